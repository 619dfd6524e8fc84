/* Depthwise convolution (groups == channels == filters): each channel
 * convolved with its own kh x kw kernel, (KH, KW, 1, C) in kiln's layout.
 * A grouped GEMM would multiply matrices one column wide; these kernels
 * read the input where it lies instead. The GPU variants (_gpu) take a
 * work-item per value, channels fastest, so that neighbouring items read
 * and write neighbouring floats; the CPU variants (_cpu, at the end) eight
 * channels of a row of pixels. NHWC; the window as KILN_CONV2D_WINDOW_ARGS. */

/* The GPU variants of the forward and input gradient run over a (C, width,
 * rows x batch) range: the channel varies fastest, and neighbouring
 * work-items share one pixel's coordinates and bounds. */

/* out[p, c] = act(bias[c] + sum over the window of in * kernel[ky, kx, c]),
 * over (C, OW, OH x batch). */
__kernel void kiln_conv2d_depthwise_forward_gpu(__global const float *in, __global float *out,
                                            __global const float *params, int kernel_offset,
                                            int bias_offset, int use_bias, int act, int rows,
                                            int H, int W, int C, int OH, int OW, int KH, int KW,
                                            int stride_h, int stride_w, int pad_top,
                                            int pad_left, int dil_h, int dil_w)
{
    const int c = get_global_id(0), ox = get_global_id(1), row = get_global_id(2);
    if (c >= C || ox >= OW || row >= rows)
        return;
    const int oy = row % OH, n = row / OH;
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
    out[((size_t)row * OW + ox) * C + c] = kiln_activate(acc, act);
}

/* d_in[q, c] (+)= sum over the outputs whose window holds input pixel q of
 * dy[p, c] * kernel[ky, kx, c], over (C, W, H x batch): a gather, so no
 * atomics and a fixed summation order. */
__kernel void kiln_conv2d_depthwise_input_grad_gpu(__global const float *dy,
                                               __global const float *params, int kernel_offset,
                                               __global float *d_in, int accumulate, int rows,
                                               int H, int W, int C, int OH, int OW, int KH,
                                               int KW, int stride_h, int stride_w, int pad_top,
                                               int pad_left, int dil_h, int dil_w)
{
    const int c = get_global_id(0), x = get_global_id(1), row = get_global_id(2);
    if (c >= C || x >= W || row >= rows)
        return;
    const int y = row % H, n = row / H;
    __global const float *g = dy + (size_t)n * OH * OW * C + c;
    __global const float *w = params + kernel_offset + c;
    float acc = 0.0f;
    if (stride_h == 1 && stride_w == 1 && dil_h == 1 && dil_w == 1) {
        /* The common case (mobilenet's 3x3 and 5x5 of stride 1): the taps
         * that reach an output, as loop bounds. */
        const int ky0 = max(0, y + pad_top - OH + 1), ky1 = min(KH - 1, y + pad_top);
        const int kx0 = max(0, x + pad_left - OW + 1), kx1 = min(KW - 1, x + pad_left);
        for (int ky = ky0; ky <= ky1; ky++)
            for (int kx = kx0; kx <= kx1; kx++)
                acc += g[((size_t)(y + pad_top - ky) * OW + x + pad_left - kx) * C] *
                       w[(ky * KW + kx) * C];
        const size_t at = ((size_t)row * W + x) * C + c;
        d_in[at] = accumulate ? d_in[at] + acc : acc;
        return;
    }
    for (int ky = 0; ky < KH; ky++) {
        const int oy = kiln_tap_output(y, ky, pad_top, dil_h, stride_h, OH);
        if (oy < 0)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int ox = kiln_tap_output(x, kx, pad_left, dil_w, stride_w, OW);
            if (ox < 0)
                continue;
            acc += g[((size_t)oy * OW + ox) * C] *
                   w[(ky * KW + kx) * C];
        }
    }
    const size_t at = ((size_t)row * W + x) * C + c;
    d_in[at] = accumulate ? d_in[at] + acc : acc;
}

/* Partial weight and bias gradients over a (C, K + 1, chunks) range, K =
 * KH x KW: partial[chunk, k, c] = sum over the chunk's output pixels of
 * in(window element k, channel c) * dy[p, c]; k = K is the bias (in = 1).
 * The layout of the direct kernels' partial sums, so that
 * kiln_conv2d_direct_reduce (conv2d_direct.cl) sums the chunks, in a fixed
 * order, into the (KH, KW, 1, C) kernel's gradient. */
__kernel void kiln_conv2d_depthwise_grad_partial_gpu(__global const float *in,
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

/* The CPU variants: eight channels a work-item as float8 values (kiln_load8,
 * prelude.cl), because PoCL does not vectorise a kernel with loops across
 * work-items. The loops and their order of summation are the GPU
 * variants'. */

/* The forward over (blocks of eight channels, rows x batch): a work-item
 * writes its output row's bias, adds each tap over the pixels whose tap
 * lies inside the image (bounds worked out once a tap, the tap's weights
 * held), then applies the activation: the GPU variant's order of
 * summation, the row in cache throughout. */
__kernel void kiln_conv2d_depthwise_forward_cpu(__global const float *in, __global float *out,
                                                __global const float *params, int kernel_offset,
                                                int bias_offset, int use_bias, int act,
                                                int rows, int H, int W, int C, int OH, int OW,
                                                int KH, int KW, int stride_h, int stride_w,
                                                int pad_top, int pad_left, int dil_h, int dil_w)
{
    const int c0 = 8 * get_global_id(0), row = get_global_id(1);
    if (row >= rows || c0 >= C)
        return;
    const int oy = row % OH, n = row / OH, nc = C - c0;
    __global const float *sample = in + (size_t)n * H * W * C + c0;
    __global float *o = out + (size_t)row * OW * C + c0;
    const float8 bias = use_bias ? kiln_load8(params + bias_offset + c0, nc) : (float8)(0.0f);
    for (int ox = 0; ox < OW; ox++)
        kiln_store8(o + (size_t)ox * C, bias, nc);
    for (int ky = 0; ky < KH; ky++) {
        const int y = oy * stride_h - pad_top + ky * dil_h;
        if (y < 0 || y >= H)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int wx = kx * dil_w - pad_left;
            const int x0 = max(0, (-wx + stride_w - 1) / stride_w);
            const int x1 = wx >= W ? 0 : min(OW, (W - 1 - wx) / stride_w + 1);
            const float8 w = kiln_load8(params + kernel_offset + (ky * KW + kx) * C + c0, nc);
            __global const float *line = sample + ((size_t)y * W + wx) * C;
            for (int ox = x0; ox < x1; ox++)
                kiln_store8(o + (size_t)ox * C,
                            kiln_load8(o + (size_t)ox * C, nc) +
                                kiln_load8(line + (size_t)ox * stride_w * C, nc) * w,
                            nc);
        }
    }
    for (int ox = 0; ox < OW; ox++)
        kiln_store8(o + (size_t)ox * C, kiln_activate8(kiln_load8(o + (size_t)ox * C, nc), act),
                    nc);
}

/* The input gradient over (input rows x batch, blocks of eight channels),
 * a work-item's row pixel by pixel. */
__kernel void kiln_conv2d_depthwise_input_grad_cpu(__global const float *dy,
                                                   __global const float *params,
                                                   int kernel_offset, __global float *d_in,
                                                   int accumulate, int rows, int H, int W, int C,
                                                   int OH, int OW, int KH, int KW, int stride_h,
                                                   int stride_w, int pad_top, int pad_left,
                                                   int dil_h, int dil_w)
{
    const int c0 = 8 * get_global_id(0), row = get_global_id(1);
    if (row >= rows || c0 >= C)
        return;
    const int y = row % H, n = row / H, nc = C - c0;
    __global const float *g = dy + (size_t)n * OH * OW * C + c0;
    __global const float *w = params + kernel_offset + c0;
    const int unit = stride_h == 1 && stride_w == 1 && dil_h == 1 && dil_w == 1;
    for (int x = 0; x < W; x++) {
        float8 acc = (float8)(0.0f);
        if (unit) {
            const int ky0 = max(0, y + pad_top - OH + 1), ky1 = min(KH - 1, y + pad_top);
            const int kx0 = max(0, x + pad_left - OW + 1), kx1 = min(KW - 1, x + pad_left);
            for (int ky = ky0; ky <= ky1; ky++)
                for (int kx = kx0; kx <= kx1; kx++)
                    acc += kiln_load8(g + ((size_t)(y + pad_top - ky) * OW + x + pad_left - kx) *
                                              C, nc) *
                           kiln_load8(w + (ky * KW + kx) * C, nc);
        } else {
            for (int ky = 0; ky < KH; ky++) {
                const int oy = kiln_tap_output(y, ky, pad_top, dil_h, stride_h, OH);
                if (oy < 0)
                    continue;
                for (int kx = 0; kx < KW; kx++) {
                    const int ox = kiln_tap_output(x, kx, pad_left, dil_w, stride_w, OW);
                    if (ox < 0)
                        continue;
                    acc += kiln_load8(g + ((size_t)oy * OW + ox) * C,
                                      nc) *
                           kiln_load8(w + (ky * KW + kx) * C, nc);
                }
            }
        }
        __global float *at = d_in + ((size_t)row * W + x) * C + c0;
        kiln_store8(at, accumulate ? kiln_load8(at, nc) + acc : acc, nc);
    }
}

/* The partial weight and bias gradients over (blocks of eight channels,
 * K + 1, chunks), as the GPU variant's, in the same order; the chunk's
 * pixels go a row segment at a time, the tap's bounds worked out once a
 * segment, so the inner loop is loads and multiply-adds only. */
__kernel void kiln_conv2d_depthwise_grad_partial_cpu(__global const float *in,
                                                     __global const float *dy,
                                                     __global float *partial, int chunks,
                                                     int chunk_pixels, int pixels, int H, int W,
                                                     int C, int OH, int OW, int KH, int KW,
                                                     int stride_h, int stride_w, int pad_top,
                                                     int pad_left, int dil_h, int dil_w)
{
    const int c0 = 8 * get_global_id(0), k = get_global_id(1), chunk = get_global_id(2);
    const int K = KH * KW;
    if (c0 >= C || k > K || chunk >= chunks)
        return;
    const int bias = k == K, nc = C - c0;
    const int wy = bias ? 0 : k / KW * dil_h - pad_top, wx = bias ? 0 : k % KW * dil_w - pad_left;
    /* The outputs whose tap lies inside the image's width: ox in [x0, x1). */
    const int x0 = bias ? 0 : max(0, (-wx + stride_w - 1) / stride_w);
    const int x1 = bias ? OW : wx >= W ? 0 : min(OW, (W - 1 - wx) / stride_w + 1);
    const int first = chunk * chunk_pixels, last = min(first + chunk_pixels, pixels);
    float8 acc = (float8)(0.0f);
    for (int p = first; p < last;) {
        /* The segment of the chunk in output row (n, oy): pixels p .. end. */
        const int ox = p % OW, row = p / OW, end = min(last, p - ox + OW);
        const int oy = row % OH, n = row / OH, y = oy * stride_h + wy;
        if (bias) {
            for (int q = p; q < end; q++)
                acc += kiln_load8(dy + (size_t)q * C + c0, nc);
        } else if (y >= 0 && y < H) {
            const int from = max(ox, x0), to = min(ox + end - p, x1);
            __global const float *g = dy + ((size_t)row * OW) * C + c0;
            __global const float *x_row = in + (((size_t)n * H + y) * W + wx) * C + c0;
            for (int q = from; q < to; q++)
                acc += kiln_load8(x_row + (size_t)q * stride_w * C, nc) *
                       kiln_load8(g + (size_t)q * C, nc);
        }
        p = end;
    }
    kiln_store8(partial + ((size_t)chunk * (K + 1) + k) * C + c0, acc, nc);
}
