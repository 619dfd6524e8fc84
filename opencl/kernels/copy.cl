/* Copies between float buffers: a layer that passes its input on, or a
 * gradient that reaches a node by several paths. */

/* dst = src, or dst += src when accumulate is set. */
__kernel void kiln_copy_or_add(__global const float *src, __global float *dst, int n,
                               int accumulate)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    dst[i] = accumulate ? dst[i] + src[i] : src[i];
}
