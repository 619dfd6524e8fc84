/* Small building blocks shared by several layers. */

/* dst = src, or dst += src when accumulate is set. */
__kernel void kiln_elementwise_copy_or_add(__global const float *src, __global float *dst, int n,
                                           int accumulate)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    dst[i] = accumulate ? dst[i] + src[i] : src[i];
}

/* y[r, c] = act(y[r, c] + bias[c]) for a rows x cols matrix over a (cols,
 * rows) range; bias lives in the flat parameter buffer at bias_offset, act
 * is element-wise (KILN_ACT_LINEAR: none). */
__kernel void kiln_elementwise_bias_add(__global float *y, int rows, int cols,
                                        __global const float *params, int bias_offset, int act)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c >= cols || r >= rows)
        return;
    __global float *v = y + (size_t)r * cols + c;
    *v = kiln_activate(*v + params[bias_offset + c], act);
}

/* One work-group per column: out[offset + c] (+)= sum over rows of x[r, c].
 * The tree reduction has a fixed order, so results are deterministic. */
__kernel void kiln_elementwise_column_sum(__global const float *x, int rows, int cols,
                                          __global float *out, int offset, int accumulate)
{
    __local float partial[64];
    const int c = get_group_id(0);
    const int lid = get_local_id(0);
    const int group = get_local_size(0);
    float s = 0.0f;
    if (c < cols)
        for (int r = lid; r < rows; r += group)
            s += x[(size_t)r * cols + c];
    partial[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = group / 2; step > 0; step /= 2) {
        if (lid < step)
            partial[lid] += partial[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && c < cols)
        out[offset + c] = accumulate ? out[offset + c] + partial[0] : partial[0];
}

/* dst (cols x rows) = src (rows x cols, at src_offset) transposed, over a
 * (rows, cols) range: consecutive work-items write consecutive floats. */
__kernel void kiln_elementwise_transpose(__global const float *src, int src_offset, int rows,
                                         int cols, __global float *dst)
{
    const int r = get_global_id(0), c = get_global_id(1);
    if (r >= rows || c >= cols)
        return;
    dst[(size_t)c * rows + r] = src[src_offset + (size_t)r * cols + c];
}
