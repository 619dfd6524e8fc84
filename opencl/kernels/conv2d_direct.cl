/* Direct convolution for small patches (K = KH * KW * C of a few dozen at
 * most: the first layers of image models). im2col + GEMM spends most of its
 * time there on a K-wide matrix it writes and reads back and on a GEMM too
 * thin to block well; these kernels read the input where it lies.
 *
 * Filters go in blocks of eight as float8 values (kiln_load8, prelude.cl),
 * a filter a work-item in the GPU variants. NHWC input, kernel (KH, KW, C, F). */

/* out[p, f] = act(bias[f] + sum over the window and channels of in *
 * kernel); one work-item per run of up to four neighbouring output pixels
 * of a row (`runs` = ceil(OW / 4) per row), all filters in blocks of eight:
 * each weight vector is read once for the four. use_bias 0: no bias; act
 * is element-wise (KILN_ACT_LINEAR: none). */
__kernel void kiln_conv2d_direct_forward(__global const float *in, __global float *out,
                                         __global const float *params, int kernel_offset,
                                         int bias_offset, int use_bias, int act, int F,
                                         int items, int runs, int H, int W, int C, int OH,
                                         int OW, int KH, int KW, int stride_h, int stride_w,
                                         int pad_top, int pad_left)
{
    const int id = get_global_id(0);
    if (id >= items)
        return;
    const int ox0 = (id % runs) * 4;
    const int oy = (id / runs) % OH;
    const int n = id / (runs * OH);
    const int px = min(4, OW - ox0);
    __global const float *sample = in + (size_t)n * H * W * C;
    const size_t p0 = ((size_t)n * OH + oy) * OW + ox0;
    /* Input columns of the four pixels at kx = 0; a pixel past the row
     * repeats the first (in bounds, never stored). */
    const int x0 = ox0 * stride_w - pad_left;
    const int x1 = px > 1 ? x0 + stride_w : x0, x2 = px > 2 ? x0 + 2 * stride_w : x0;
    const int x3 = px > 3 ? x0 + 3 * stride_w : x0;
    for (int f0 = 0; f0 < F; f0 += 8) {
        const int count = F - f0;
        const float8 bias =
            use_bias ? kiln_load8(params + bias_offset + f0, count) : (float8)(0.0f);
        float8 acc0 = bias, acc1 = bias, acc2 = bias, acc3 = bias;
        for (int ky = 0; ky < KH; ky++) {
            const int y = oy * stride_h - pad_top + ky;
            if (y < 0 || y >= H)
                continue;
            __global const float *row = sample + (size_t)y * W * C;
            for (int kx = 0; kx < KW; kx++) {
                __global const float *w =
                    params + kernel_offset + (size_t)((ky * KW + kx) * C) * F + f0;
                const int a = x0 + kx, b = x1 + kx, d = x2 + kx, e = x3 + kx;
                const int in0 = a >= 0 && a < W, in1 = b >= 0 && b < W;
                const int in2 = d >= 0 && d < W, in3 = e >= 0 && e < W;
                for (int c = 0; c < C; c++) {
                    const float8 wv = kiln_load8(w + (size_t)c * F, count);
                    acc0 += (in0 ? row[a * C + c] : 0.0f) * wv;
                    acc1 += (in1 ? row[b * C + c] : 0.0f) * wv;
                    acc2 += (in2 ? row[d * C + c] : 0.0f) * wv;
                    acc3 += (in3 ? row[e * C + c] : 0.0f) * wv;
                }
            }
        }
        __global float *dst = out + p0 * F + f0;
        kiln_store8(dst, kiln_activate8(acc0, act), count);
        if (px > 1)
            kiln_store8(dst + F, kiln_activate8(acc1, act), count);
        if (px > 2)
            kiln_store8(dst + 2 * F, kiln_activate8(acc2, act), count);
        if (px > 3)
            kiln_store8(dst + 3 * F, kiln_activate8(acc3, act), count);
    }
}

/* Partial weight and bias gradients over one chunk of output pixels, over a
 * (filter blocks, groups of `taps` <= TAPS window elements, chunks) range:
 * partial[chunk, k, f] = sum over the chunk's pixels of in(window element
 * k) * dy[p, f]; k = K is the bias (in = 1). A work-item reads each dy
 * vector once for its window elements. kiln_conv2d_direct_reduce sums the
 * chunks in a fixed order. */
#define TAPS 8
__kernel void kiln_conv2d_direct_grad_partial(__global const float *in,
                                              __global const float *dy,
                                              __global float *partial, int F, int K,
                                              int taps, int chunks, int chunk_pixels,
                                              int pixels, int H, int W, int C, int OH, int OW,
                                              int KH, int KW, int stride_h, int stride_w,
                                              int pad_top, int pad_left)
{
    (void)KH;  /* the window arguments are the same for every kernel */
    const int f0 = get_global_id(0) * 8, k0 = get_global_id(1) * taps;
    const int chunk = get_global_id(2);
    if (f0 >= F || k0 > K || chunk >= chunks)
        return;
    const int count = F - f0, mine = min(taps, K + 1 - k0);
    /* Each element's (ky, kx, c) once; the bias row (k = K) reads no input. */
    int wy[TAPS], wx[TAPS], c_of[TAPS];   /* window offsets from the output pixel */
    float8 acc[TAPS];
    for (int t = 0; t < TAPS; t++) {
        const int k = min(k0 + t, K);
        c_of[t] = k % C;
        wx[t] = (k / C) % KW - pad_left;
        wy[t] = k / (C * KW) - pad_top;
        acc[t] = (float8)(0.0f);
    }
    const int bias = K - k0;   /* its place among the taps, if there */
    const int first = chunk * chunk_pixels;
    const int last = min(first + chunk_pixels, pixels);
    int ox = first % OW, oy = (first / OW) % OH, n = first / (OW * OH);
    for (int p = first; p < last; p++) {
        const float8 g = kiln_load8(dy + (size_t)p * F + f0, count);
        __global const float *sample = in + (size_t)n * H * W * C;
        for (int t = 0; t < TAPS; t++) {
            if (t >= mine)
                break;
            if (t == bias) {
                acc[t] += g;
                continue;
            }
            const int y = oy * stride_h + wy[t], x = ox * stride_w + wx[t];
            if (y >= 0 && y < H && x >= 0 && x < W)
                acc[t] += sample[((size_t)y * W + x) * C + c_of[t]] * g;
        }
        /* Step (n, oy, ox) without dividing again. */
        if (++ox == OW) {
            ox = 0;
            if (++oy == OH) {
                oy = 0;
                n++;
            }
        }
    }
    for (int t = 0; t < mine; t++)
        kiln_store8(partial + ((size_t)chunk * (K + 1) + k0 + t) * F + f0, acc[t], count);
}

/* grads[kernel_offset + k * F + f] = sum over chunks of partial[chunk, k, f],
 * chunk by chunk (deterministic); row K goes to the bias when use_bias. */
__kernel void kiln_conv2d_direct_reduce(__global const float *partial, __global float *grads,
                                        int kernel_offset, int bias_offset, int use_bias,
                                        int F, int K, int chunks)
{
    const int f = get_global_id(0), k = get_global_id(1);
    if (f >= F || k > K || (k == K && !use_bias))
        return;
    float s = 0.0f;
    for (int chunk = 0; chunk < chunks; chunk++)
        s += partial[((size_t)chunk * (K + 1) + k) * F + f];
    grads[(k == K ? bias_offset : kernel_offset + k * F) + f] = s;
}

/* The GPU variants ("_items"): a work-item per filter over dim 0, so that
 * neighbouring items read neighbouring weights and write neighbouring
 * outputs or partial sums; scalars, no float8. The same arithmetic in the
 * same order as above. */

/* Forward over an (F, items) range, the host's runs being a pixel each
 * (runs = OW, items = output pixels). */
__kernel void kiln_conv2d_direct_forward_items(__global const float *in, __global float *out,
                                               __global const float *params, int kernel_offset,
                                               int bias_offset, int use_bias, int act, int F,
                                               int items, int runs, int H, int W, int C,
                                               int OH, int OW, int KH, int KW, int stride_h,
                                               int stride_w, int pad_top, int pad_left)
{
    (void)runs;
    const int f = get_global_id(0), p = get_global_id(1);
    if (f >= F || p >= items)
        return;
    const int ox = p % OW, oy = (p / OW) % OH, n = p / (OW * OH);
    __global const float *sample = in + (size_t)n * H * W * C;
    const int x0 = ox * stride_w - pad_left;
    float acc = use_bias ? params[bias_offset + f] : 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int y = oy * stride_h - pad_top + ky;
        if (y < 0 || y >= H)
            continue;
        __global const float *row = sample + (size_t)y * W * C;
        for (int kx = 0; kx < KW; kx++) {
            const int x = x0 + kx;
            if (x < 0 || x >= W)
                continue;
            __global const float *w =
                params + kernel_offset + (size_t)((ky * KW + kx) * C) * F + f;
            for (int c = 0; c < C; c++)
                acc += row[x * C + c] * w[(size_t)c * F];
        }
    }
    out[(size_t)p * F + f] = kiln_activate(acc, act);
}

/* Partial weight and bias gradients over an (F, tap groups, chunks) range,
 * as kiln_conv2d_direct_grad_partial: each item reads dy[p, f] once per
 * pixel for its window elements; the host gives it more, shorter chunks. */
__kernel void kiln_conv2d_direct_grad_partial_items(__global const float *in,
                                                    __global const float *dy,
                                                    __global float *partial, int F, int K,
                                                    int taps, int chunks, int chunk_pixels,
                                                    int pixels, int H, int W, int C, int OH,
                                                    int OW, int KH, int KW, int stride_h,
                                                    int stride_w, int pad_top, int pad_left)
{
    (void)KH;
    const int f = get_global_id(0), k0 = get_global_id(1) * taps;
    const int chunk = get_global_id(2);
    if (f >= F || k0 > K || chunk >= chunks)
        return;
    const int mine = min(taps, K + 1 - k0);
    int wy[TAPS], wx[TAPS], c_of[TAPS];
    float acc[TAPS];
    for (int t = 0; t < TAPS; t++) {
        const int k = min(k0 + t, K);
        c_of[t] = k % C;
        wx[t] = (k / C) % KW - pad_left;
        wy[t] = k / (C * KW) - pad_top;
        acc[t] = 0.0f;
    }
    const int bias = K - k0;
    const int first = chunk * chunk_pixels;
    const int last = min(first + chunk_pixels, pixels);
    int ox = first % OW, oy = (first / OW) % OH, n = first / (OW * OH);
    for (int p = first; p < last; p++) {
        const float g = dy[(size_t)p * F + f];
        __global const float *sample = in + (size_t)n * H * W * C;
        for (int t = 0; t < TAPS; t++) {
            if (t >= mine)
                break;
            if (t == bias) {
                acc[t] += g;
                continue;
            }
            const int y = oy * stride_h + wy[t], x = ox * stride_w + wx[t];
            if (y >= 0 && y < H && x >= 0 && x < W)
                acc[t] += sample[((size_t)y * W + x) * C + c_of[t]] * g;
        }
        if (++ox == OW) {
            ox = 0;
            if (++oy == OH) {
                oy = 0;
                n++;
            }
        }
    }
    for (int t = 0; t < mine; t++)
        partial[((size_t)chunk * (K + 1) + k0 + t) * F + f] = acc[t];
}

/* d_in[q, c] (+)= sum over the outputs whose window holds input pixel q and
 * over the filters of dy[p, f] * kernel[ky, kx, c, f], over a (C, input
 * pixels) range: a gather, so no atomics and a fixed summation order. */
__kernel void kiln_conv2d_direct_input_grad(__global const float *dy,
                                            __global const float *params, int kernel_offset,
                                            __global float *d_in, int accumulate, int F,
                                            int pixels, int H, int W, int C, int OH, int OW,
                                            int KH, int KW, int stride_h, int stride_w,
                                            int pad_top, int pad_left)
{
    const int c = get_global_id(0), q = get_global_id(1);
    if (c >= C || q >= pixels)
        return;
    const int x = q % W;
    const int y = (q / W) % H;
    const int n = q / (W * H);
    float acc = 0.0f;
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
            __global const float *g = dy + (((size_t)n * OH + oy) * OW + ox) * F;
            __global const float *w = params + kernel_offset + (size_t)((ky * KW + kx) * C + c) * F;
            for (int f = 0; f < F; f++)
                acc += g[f] * w[f];
        }
    }
    __global float *dst = d_in + (size_t)q * C + c;
    *dst = accumulate ? *dst + acc : acc;
}
