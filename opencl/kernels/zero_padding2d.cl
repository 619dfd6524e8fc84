/* ZeroPadding2D over NHWC samples: an (H, W, C) sample inside an
 * (OH, OW, C) one at (top, left). Range: (values of a sample, batch). */
__kernel void kiln_zero_padding2d_forward(__global const float *x, __global float *y, int H,
                                          int W, int C, int OH, int OW, int top, int left,
                                          int accumulate)
{
    const int i = get_global_id(0), n = get_global_id(1);
    if (i >= OH * OW * C)
        return;
    const int c = i % C, p = i / C, ox = p % OW, oy = p / OW;
    const int iy = oy - top, ix = ox - left;
    const int inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
    (void)accumulate;
    y[(size_t)n * OH * OW * C + i] =
        inside ? x[(size_t)n * H * W * C + ((size_t)iy * W + ix) * C + c] : 0.0f;
}

/* dx = the output gradient's values at the input's places, written or
 * added (accumulate). */
__kernel void kiln_zero_padding2d_backward(__global const float *dy, __global float *dx, int H,
                                           int W, int C, int OH, int OW, int top, int left,
                                           int accumulate)
{
    const int i = get_global_id(0), n = get_global_id(1);
    if (i >= H * W * C)
        return;
    const int c = i % C, p = i / C, ix = p % W, iy = p / W;
    const float g = dy[(size_t)n * OH * OW * C + ((size_t)(iy + top) * OW + ix + left) * C + c];
    __global float *at = dx + (size_t)n * H * W * C + i;
    *at = accumulate ? *at + g : g;
}
