/* Dot: the inner product of two (n, d) row sets, one per sample. */

/* out[b] = sum_k x[b, k] y[b, k], summed in k order; one work-item per sample. */
__kernel void kiln_dot_forward(__global const float *x, __global const float *y,
                               __global float *out, int n, int d)
{
    const int b = get_global_id(0);
    if (b >= n)
        return;
    float s = 0.0f;
    for (int k = 0; k < d; k++)
        s += x[(size_t)b * d + k] * y[(size_t)b * d + k];
    out[b] = s;
}

/* The GPU variant for d of at least KILN_ROW_LANES: a work-group per sample,
 * neighbouring lanes reading neighbouring floats, merged in a fixed order. */
__kernel void kiln_dot_forward_gpu(__global const float *x, __global const float *y,
                                   __global float *out, int n, int d)
{
    __local float merge[KILN_ROW_LANES];
    const int b = get_group_id(0);
    if (b >= n)
        return;
    float s = 0.0f;
    for (int k = get_local_id(0); k < d; k += KILN_ROW_LANES)
        s += x[(size_t)b * d + k] * y[(size_t)b * d + k];
    s = kiln_row_merge(merge, s, 0);
    if (get_local_id(0) == 0)
        out[b] = s;
}

/* dst[b, k] (+)= d_out[b] other[b, k]: either input's gradient, over an (d, n) range. */
__kernel void kiln_dot_backward(__global const float *other, __global const float *d_out,
                                __global float *dst, int n, int d, int accumulate)
{
    const int k = get_global_id(0), b = get_global_id(1);
    if (k >= d || b >= n)
        return;
    const size_t i = (size_t)b * d + k;
    const float g = d_out[b] * other[i];
    dst[i] = accumulate ? dst[i] + g : g;
}
