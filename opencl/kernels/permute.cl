/* Permute: a sample's axes in another order. */

/* Over a (values per sample, batch) range, output value o of a sample
 * takes input value sum_d coord_d(o) * in_stride[d], where coord_d is o's
 * coordinate on output axis d (out_dims, up to 4 axes, unused ones 1) and
 * in_stride[d] the stride of the input axis that output axis d reads.
 * Forward copies input to output; backward (`back`) the gradient from the
 * output's place to the input's, adding when `accumulate`: a permutation
 * meets every place once, so no two work-items write one value. */
__kernel void kiln_permute_copy(__global const float *src, __global float *dst, int size,
                                int d0, int d1, int d2, int d3, int s0, int s1, int s2, int s3,
                                int back, int accumulate)
{
    const int o = get_global_id(0), n = get_global_id(1);
    if (o >= size)
        return;
    int rest = o;
    const int c3 = rest % d3;
    rest /= d3;
    const int c2 = rest % d2;
    rest /= d2;
    const int c1 = rest % d1;
    const int c0 = rest / d1;
    const int i = c0 * s0 + c1 * s1 + c2 * s2 + c3 * s3;
    const size_t base = (size_t)n * size;
    const size_t from = base + (back ? o : i), to = base + (back ? i : o);
    dst[to] = accumulate ? dst[to] + src[from] : src[from];
}
