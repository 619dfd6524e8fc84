/* Convolution as im2col + GEMM, channels last (NHWC).
 * col holds, group after group, one row per output pixel (n, oy, ox) of
 * Kg = kh * kw * Cg columns ordered (ky, kx, c), matching the kernel's
 * (kh, kw, Cg, F) layout, Cg = C / groups: each group's rows are the
 * matrix of its own GEMM. With one group, col is the usual matrix.
 * One work-item per output pixel: index arithmetic once, then plain loops
 * (integer division is slow on CPU devices and does not vectorize). */
__kernel void kiln_conv2d_im2col_cpu(__global const float *in, __global float *col, int rows,
                                     int H, int W, int C, int OH, int OW, int KH, int KW,
                                     int stride_h, int stride_w, int pad_top, int pad_left,
                                     int dil_h, int dil_w, int groups)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    const int ox = row % OW;
    const int oy = (row / OW) % OH;
    const int n = row / (OW * OH);
    const int Cg = C / groups, Kg = KH * KW * Cg;
    __global const float *sample = in + (size_t)n * H * W * C;
    for (int g = 0; g < groups; g++) {
        __global float *dst = col + ((size_t)g * rows + row) * Kg;
        for (int ky = 0; ky < KH; ky++) {
            const int y = oy * stride_h - pad_top + ky * dil_h;
            for (int kx = 0; kx < KW; kx++) {
                const int x = ox * stride_w - pad_left + kx * dil_w;
                const int inside = y >= 0 && y < H && x >= 0 && x < W;
                __global const float *src =
                    sample + ((size_t)(inside ? y : 0) * W + (inside ? x : 0)) * C + g * Cg;
                for (int c = 0; c < Cg; c++)
                    dst[c] = inside ? src[c] : 0.0f;
                dst += Cg;
            }
        }
    }
}

/* The adjoint of im2col, gathered per input pixel (no atomics, fixed
 * summation order): d_in (+)= sum of the dcol entries that read it. */
__kernel void kiln_conv2d_col2im_cpu(__global const float *dcol, __global float *d_in, int pixels,
                                     int H, int W, int C, int OH, int OW, int KH, int KW,
                                     int stride_h, int stride_w, int pad_top, int pad_left,
                                     int dil_h, int dil_w, int groups, int accumulate)
{
    const int p = get_global_id(0);
    if (p >= pixels)
        return;
    const int x = p % W;
    const int y = (p / W) % H;
    const int n = p / (W * H);
    const int Cg = C / groups, Kg = KH * KW * Cg;
    const size_t rows = (size_t)(pixels / (H * W)) * OH * OW;
    __global float *dst = d_in + (size_t)p * C;
    for (int c = 0; c < C; c++)
        if (!accumulate)
            dst[c] = 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int oy = kiln_tap_output(y, ky, pad_top, dil_h, stride_h, OH);
        if (oy < 0)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int ox = kiln_tap_output(x, kx, pad_left, dil_w, stride_w, OW);
            if (ox < 0)
                continue;
            const size_t row = ((size_t)n * OH + oy) * OW + ox;
            for (int g = 0; g < groups; g++) {
                __global const float *src = dcol + (g * rows + row) * Kg + (ky * KW + kx) * Cg;
                for (int c = 0; c < Cg; c++)
                    dst[g * Cg + c] += src[c];
            }
        }
    }
}

/* The GPU variant of im2col: a work-item per float of col over a (groups x
 * Kg, rows) range, so that neighbouring work-items write neighbouring
 * floats and read neighbouring channels (the variant above writes Kg
 * floats per item and group, its neighbours Kg floats apart). */
__kernel void kiln_conv2d_im2col_gpu(__global const float *in, __global float *col, int rows,
                                     int H, int W, int C, int OH, int OW, int KH, int KW,
                                     int stride_h, int stride_w, int pad_top, int pad_left,
                                     int dil_h, int dil_w, int groups)
{
    const int k = get_global_id(0), row = get_global_id(1);
    const int Cg = C / groups, Kg = KH * KW * Cg;
    if (k >= groups * Kg || row >= rows)
        return;
    const int g = k / Kg, kk = k % Kg;
    const int c = g * Cg + kk % Cg, kx = (kk / Cg) % KW, ky = kk / (Cg * KW);
    const int ox = row % OW, oy = (row / OW) % OH, n = row / (OW * OH);
    const int y = oy * stride_h - pad_top + ky * dil_h;
    const int x = ox * stride_w - pad_left + kx * dil_w;
    const int inside = y >= 0 && y < H && x >= 0 && x < W;
    col[((size_t)g * rows + row) * Kg + kk] =
        inside ? in[(((size_t)n * H + y) * W + x) * C + c] : 0.0f;
}

/* The GPU variant of col2im: a work-item per float of d_in over a (C,
 * pixels) range, gathering in the same order as the variant above (so
 * both give the same sums), its neighbours on neighbouring channels. */
__kernel void kiln_conv2d_col2im_gpu(__global const float *dcol, __global float *d_in,
                                     int pixels, int H, int W, int C, int OH, int OW, int KH,
                                     int KW, int stride_h, int stride_w, int pad_top,
                                     int pad_left, int dil_h, int dil_w, int groups,
                                     int accumulate)
{
    const int c = get_global_id(0), p = get_global_id(1);
    if (c >= C || p >= pixels)
        return;
    const int x = p % W, y = (p / W) % H, n = p / (W * H);
    const int Cg = C / groups, Kg = KH * KW * Cg, g = c / Cg;
    const size_t rows = (size_t)(pixels / (H * W)) * OH * OW;
    __global const float *group = dcol + g * rows * Kg + c % Cg;
    float sum = accumulate ? d_in[(size_t)p * C + c] : 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int oy = kiln_tap_output(y, ky, pad_top, dil_h, stride_h, OH);
        if (oy < 0)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int ox = kiln_tap_output(x, kx, pad_left, dil_w, stride_w, OW);
            if (ox < 0)
                continue;
            sum += group[(((size_t)n * OH + oy) * OW + ox) * Kg +
                         (ky * KW + kx) * Cg];
        }
    }
    d_in[(size_t)p * C + c] = sum;
}
