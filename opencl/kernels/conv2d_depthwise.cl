/* Depthwise convolution (groups == channels == filters): each channel
 * convolved with its own kh x kw kernel, (KH, KW, 1, C) in kiln's layout.
 * A grouped GEMM would multiply matrices one column wide; these kernels
 * read the input where it lies instead. A work-item per value, channels
 * fastest: neighbouring items read and write neighbouring floats, which
 * both a CPU device (vectors across work-items) and a GPU run well, so
 * there is one variant. NHWC; the window as KILN_CONV2D_WINDOW_ARGS. */

/* out[p, c] = act(bias[c] + sum over the window of in * kernel[ky, kx, c]),
 * over `count` = output pixels x C work-items. */
__kernel void kiln_conv2d_depthwise_forward(__global const float *in, __global float *out,
                                            __global const float *params, int kernel_offset,
                                            int bias_offset, int use_bias, int act, int count,
                                            int H, int W, int C, int OH, int OW, int KH, int KW,
                                            int stride_h, int stride_w, int pad_top,
                                            int pad_left, int dil_h, int dil_w)
{
    const int id = get_global_id(0);
    if (id >= count)
        return;
    const int c = id % C, p = id / C;
    const int ox = p % OW, oy = (p / OW) % OH, n = p / (OW * OH);
    __global const float *sample = in + (size_t)n * H * W * C + c;
    __global const float *w = params + kernel_offset + c;
    float acc = use_bias ? params[bias_offset + c] : 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int y = oy * stride_h - pad_top + ky * dil_h;
        if (y < 0 || y >= H)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int x = ox * stride_w - pad_left + kx * dil_w;
            if (x >= 0 && x < W)
                acc += sample[((size_t)y * W + x) * C] * w[(ky * KW + kx) * C];
        }
    }
    out[id] = kiln_activate(acc, act);
}

/* d_in[q, c] (+)= sum over the outputs whose window holds input pixel q of
 * dy[p, c] * kernel[ky, kx, c], over `count` = input pixels x C
 * work-items: a gather, so no atomics and a fixed summation order. */
__kernel void kiln_conv2d_depthwise_input_grad(__global const float *dy,
                                               __global const float *params, int kernel_offset,
                                               __global float *d_in, int accumulate, int count,
                                               int H, int W, int C, int OH, int OW, int KH,
                                               int KW, int stride_h, int stride_w, int pad_top,
                                               int pad_left, int dil_h, int dil_w)
{
    const int id = get_global_id(0);
    if (id >= count)
        return;
    const int c = id % C, q = id / C;
    const int x = q % W, y = (q / W) % H, n = q / (W * H);
    __global const float *g = dy + (size_t)n * OH * OW * C + c;
    __global const float *w = params + kernel_offset + c;
    float acc = 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int ty = y + pad_top - ky * dil_h;
        if (ty < 0 || ty % stride_h || ty / stride_h >= OH)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int tx = x + pad_left - kx * dil_w;
            if (tx < 0 || tx % stride_w || tx / stride_w >= OW)
                continue;
            acc += g[((size_t)(ty / stride_h) * OW + tx / stride_w) * C] *
                   w[(ky * KW + kx) * C];
        }
    }
    d_in[id] = accumulate ? d_in[id] + acc : acc;
}

/* Partial weight and bias gradients over a (C, K + 1, chunks) range, K =
 * KH x KW: partial[chunk, k, c] = sum over the chunk's output pixels of
 * in(window element k, channel c) * dy[p, c]; k = K is the bias (in = 1).
 * The layout of the direct kernels' partial sums, so that
 * kiln_conv2d_direct_reduce (conv2d_direct.cl) sums the chunks, in a fixed
 * order, into the (KH, KW, 1, C) kernel's gradient. */
__kernel void kiln_conv2d_depthwise_grad_partial(__global const float *in,
                                                 __global const float *dy,
                                                 __global float *partial, int chunks,
                                                 int chunk_pixels, int pixels, int H, int W,
                                                 int C, int OH, int OW, int KH, int KW,
                                                 int stride_h, int stride_w, int pad_top,
                                                 int pad_left, int dil_h, int dil_w)
{
    const int c = get_global_id(0), k = get_global_id(1), chunk = get_global_id(2);
    const int K = KH * KW;
    if (c >= C || k > K || chunk >= chunks)
        return;
    const int bias = k == K;
    const int wy = bias ? 0 : k / KW * dil_h - pad_top, wx = bias ? 0 : k % KW * dil_w - pad_left;
    const int first = chunk * chunk_pixels, last = min(first + chunk_pixels, pixels);
    int ox = first % OW, oy = (first / OW) % OH, n = first / (OW * OH);
    float acc = 0.0f;
    for (int p = first; p < last; p++) {
        const float g = dy[(size_t)p * C + c];
        if (bias) {
            acc += g;
        } else {
            const int y = oy * stride_h + wy, x = ox * stride_w + wx;
            if (y >= 0 && y < H && x >= 0 && x < W)
                acc += in[(((size_t)n * H + y) * W + x) * C + c] * g;
        }
        if (++ox == OW) {
            ox = 0;
            if (++oy == OH) {
                oy = 0;
                ++n;
            }
        }
    }
    partial[((size_t)chunk * (K + 1) + k) * C + c] = acc;
}
