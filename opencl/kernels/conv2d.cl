/* Convolution as im2col + GEMM, channels last (NHWC).
 * col has one row per output pixel (n, oy, ox) and K = kh * kw * C columns
 * ordered (ky, kx, c), matching the kernel's (kh, kw, C, F) layout. */
__kernel void kiln_conv2d_im2col(__global const float *in, __global float *col, int total,
                                 int H, int W, int C, int OH, int OW, int KH, int KW,
                                 int stride_h, int stride_w, int pad_top, int pad_left)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int K = KH * KW * C;
    const int k = i % K;
    const int row = i / K;
    const int c = k % C;
    const int kx = (k / C) % KW;
    const int ky = k / (C * KW);
    const int ox = row % OW;
    const int oy = (row / OW) % OH;
    const int n = row / (OW * OH);
    const int y = oy * stride_h - pad_top + ky;
    const int x = ox * stride_w - pad_left + kx;
    float v = 0.0f;
    if (y >= 0 && y < H && x >= 0 && x < W)
        v = in[(((size_t)n * H + y) * W + x) * C + c];
    col[i] = v;
}

/* The adjoint of im2col, gathered per input element (no atomics, fixed
 * summation order): d_in (+)= sum of the dcol entries that read it. */
__kernel void kiln_conv2d_col2im(__global const float *dcol, __global float *d_in, int total,
                                 int H, int W, int C, int OH, int OW, int KH, int KW,
                                 int stride_h, int stride_w, int pad_top, int pad_left,
                                 int accumulate)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int c = i % C;
    const int x = (i / C) % W;
    const int y = (i / (C * W)) % H;
    const int n = i / (C * W * H);
    const int K = KH * KW * C;
    float s = 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int ty = y + pad_top - ky;
        if (ty < 0 || ty % stride_h)
            continue;
        const int oy = ty / stride_h;
        if (oy >= OH)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int tx = x + pad_left - kx;
            if (tx < 0 || tx % stride_w)
                continue;
            const int ox = tx / stride_w;
            if (ox >= OW)
                continue;
            const size_t row = ((size_t)n * OH + oy) * OW + ox;
            s += dcol[row * K + (ky * KW + kx) * C + c];
        }
    }
    d_in[i] = accumulate ? d_in[i] + s : s;
}
