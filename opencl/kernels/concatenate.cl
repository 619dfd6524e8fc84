/* Concatenate: a block of columns of a row-major matrix into another's
 * (forward: an input into the output; backward: the output's gradient
 * back into an input's), over a (width, rows) range. */
__kernel void kiln_concatenate_copy(__global const float *src, int src_width, int src_at,
                                    __global float *dst, int dst_width, int dst_at, int width,
                                    int rows, int accumulate)
{
    const int j = get_global_id(0), r = get_global_id(1);
    if (j >= width || r >= rows)
        return;
    const float v = src[(size_t)r * src_width + src_at + j];
    __global float *d = dst + (size_t)r * dst_width + dst_at + j;
    *d = accumulate ? *d + v : v;
}
