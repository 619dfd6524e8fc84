/* Direct convolution for small patches (K = KH * KW * C of a few dozen at
 * most: the first layers of image models). im2col + GEMM spends most of its
 * time there on a K-wide matrix it writes and reads back and on a GEMM too
 * thin to block well; these kernels read the input where it lies.
 *
 * Filters go in blocks of eight as float8 values (kiln_load8, prelude.cl),
 * four blocks at a time (the CPU variants, _cpu); a filter a work-item in
 * the GPU variants (_gpu).
 * NHWC input, kernel (KH, KW, C, F). */

/* Output pixels per forward work-item, and filter blocks of eight per
 * pass: 4 x 4 float8 sums, sixteen multiply-adds for every four weight
 * vectors read. */
#define RUN 4
#define BLOCKS 4

/* acc[q][b] += v[q] * w[8b .. 8b + 8) for the RUN pixels and BLOCKS
 * vectors of filters; `count` filters are left from w.
 *
 * Inlined always, and the loops over RUN, BLOCKS and TAPS here and below
 * unrolled (with constant trip counts, the tests inside): PoCL's compiler
 * otherwise left this a call, or the loops rolled, either way keeping the
 * float8 sums on the stack, a load and a store for every multiply-add.
 * Forced, the sums stay in registers and both kernels ran twice as fast. */
__attribute__((always_inline)) inline void direct_accumulate(float8 acc[RUN][BLOCKS],
                                                             const float v[RUN],
                                                             __global const float *w, int count)
{
    float8 wv[BLOCKS];
    #pragma unroll
    for (int b = 0; b < BLOCKS; b++)
        wv[b] = kiln_load8(w + 8 * b, count - 8 * b);
    #pragma unroll
    for (int q = 0; q < RUN; q++)
        #pragma unroll
        for (int b = 0; b < BLOCKS; b++)
            acc[q][b] += v[q] * wv[b];
}

/* out[p, f] = act(bias[f] + sum over the window and channels of in *
 * kernel) for the run of px <= RUN neighbouring output pixels of row oy
 * of sample n from column ox0, filters 8 x BLOCKS at a time: each input
 * value is read once for them, each weight vector once for the run.
 * use_bias 0: no bias; act is element-wise (KILN_ACT_LINEAR: none). */
__attribute__((always_inline)) inline void direct_run(__global const float *in, __global float *out,
                       __global const float *params, int kernel_offset, int bias_offset,
                       int use_bias, int act, int F, int n, int oy, int ox0, int H, int W,
                       int C, int OH, int OW, int KH, int KW, int stride_h, int stride_w,
                       int pad_top, int pad_left, int dil_h, int dil_w)
{
    const int px = min(RUN, OW - ox0);
    __global const float *sample = in + (size_t)n * H * W * C;
    const size_t p0 = ((size_t)n * OH + oy) * OW + ox0;
    /* The run's first window's corner, and the step between the run's
     * windows; whether all RUN windows lie inside the image. */
    const int y0 = oy * stride_h - pad_top, x0 = ox0 * stride_w - pad_left;
    const int step = stride_w * C;
    const int interior = px == RUN && y0 >= 0 && y0 + (KH - 1) * dil_h + 1 <= H && x0 >= 0 &&
                         x0 + (RUN - 1) * stride_w + (KW - 1) * dil_w + 1 <= W;
    __global const float *corner = sample + ((size_t)(interior ? y0 : 0) * W +
                                             (interior ? x0 : 0)) * C;
    for (int f0 = 0; f0 < F; f0 += 8 * BLOCKS) {
        float8 acc[RUN][BLOCKS];
        #pragma unroll
        for (int b = 0; b < BLOCKS; b++) {
            const float8 bias = use_bias ? kiln_load8(params + bias_offset + f0 + 8 * b,
                                                      F - f0 - 8 * b)
                                         : (float8)(0.0f);
            #pragma unroll
            for (int q = 0; q < RUN; q++)
                acc[q][b] = bias;
        }
        if (interior) {
            /* No window element falls outside the image: no checks. */
            __global const float *w = params + kernel_offset + f0;
            for (int ky = 0; ky < KH; ky++) {
                __global const float *src = corner + (size_t)ky * dil_h * W * C;
                for (int kx = 0; kx < KW; kx++, src += dil_w * C)
                    for (int c = 0; c < C; c++, w += F) {
                        float v[RUN];
                        #pragma unroll
                        for (int q = 0; q < RUN; q++)
                            v[q] = src[q * step + c];
                        direct_accumulate(acc, v, w, F - f0);
                    }
            }
        } else {
            for (int ky = 0; ky < KH; ky++) {
                const int y = oy * stride_h - pad_top + ky * dil_h;
                if (y < 0 || y >= H)
                    continue;
                __global const float *row = sample + (size_t)y * W * C;
                for (int kx = 0; kx < KW; kx++) {
                    __global const float *w =
                        params + kernel_offset + (size_t)((ky * KW + kx) * C) * F + f0;
                    /* The run's input columns; a pixel past the row reads
                     * zeros and is never stored. */
                    int x[RUN], inside[RUN];
                    #pragma unroll
                    for (int q = 0; q < RUN; q++) {
                        x[q] = (ox0 + q) * stride_w - pad_left + kx * dil_w;
                        inside[q] = q < px && x[q] >= 0 && x[q] < W;
                        x[q] = inside[q] ? x[q] : 0;
                    }
                    for (int c = 0; c < C; c++, w += F) {
                        float v[RUN];
                        #pragma unroll
                        for (int q = 0; q < RUN; q++)
                            v[q] = inside[q] ? row[x[q] * C + c] : 0.0f;
                        direct_accumulate(acc, v, w, F - f0);
                    }
                }
            }
        }
        /* Constant trip counts (the test inside): an index the compiler
         * cannot resolve would keep the sums in memory, not registers. */
        #pragma unroll
        for (int q = 0; q < RUN; q++)
            #pragma unroll
            for (int b = 0; b < BLOCKS; b++)
                if (q < px)
                    kiln_store8(out + (p0 + q) * F + f0 + 8 * b,
                                kiln_activate8(acc[q][b], act), F - f0 - 8 * b);
    }
}

/* One work-item per output row of a sample (divisions once per row, not
 * per run), in runs of RUN pixels. */
__kernel void kiln_conv2d_direct_forward_cpu(__global const float *in, __global float *out,
                                             __global const float *params, int kernel_offset,
                                             int bias_offset, int use_bias, int act, int F,
                                             int rows, int H, int W, int C, int OH, int OW, int KH,
                                             int KW, int stride_h, int stride_w, int pad_top,
                                             int pad_left, int dil_h, int dil_w)
{
    const int id = get_global_id(0);
    if (id >= rows)
        return;
    const int oy = id % OH, n = id / OH;
    for (int ox0 = 0; ox0 < OW; ox0 += RUN)
        direct_run(in, out, params, kernel_offset, bias_offset, use_bias, act, F, n, oy, ox0,
                   H, W, C, OH, OW, KH, KW, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w);
}

/* Most window elements per weight-gradient work-item (GRAD_TAPS,
 * layers/conv2d_direct.c). */
#define TAPS 5

/* The window offsets (from an output pixel's corner) and channel of
 * window elements k0 .. k0 + TAPS, for the weight-gradient kernels; past
 * K they repeat the bias row (k = K), which reads no input. */
inline void direct_taps(int k0, int K, int C, int KW, int pad_top, int pad_left, int dil_h,
                        int dil_w, int *wy, int *wx, int *c_of)
{
    #pragma unroll
    for (int t = 0; t < TAPS; t++) {
        const int k = min(k0 + t, K);
        c_of[t] = k % C;
        wx[t] = (k / C) % KW * dil_w - pad_left;
        wy[t] = k / (C * KW) * dil_h - pad_top;
    }
}

/* Steps (n, oy, ox) to the next output pixel without dividing again. */
inline void direct_next_pixel(int *n, int *oy, int *ox, int OH, int OW)
{
    if (++*ox == OW) {
        *ox = 0;
        if (++*oy == OH) {
            *oy = 0;
            ++*n;
        }
    }
}

/* Partial weight and bias gradients over one chunk of output pixels, over a
 * (groups of 8 x BLOCKS filters, groups of `taps` <= TAPS window elements,
 * chunks) range: partial[chunk, k, f] = sum over the chunk's pixels of
 * in(window element k) * dy[p, f]; k = K is the bias (in = 1). A work-item
 * reads each dy vector once for its window elements. kiln_conv2d_direct_reduce
 * sums the chunks in a fixed order. */
__kernel void kiln_conv2d_direct_grad_partial_cpu(__global const float *in,
                                                  __global const float *dy,
                                                  __global float *partial, int F, int K,
                                                  int taps, int chunks, int chunk_pixels,
                                                  int pixels, int H, int W, int C, int OH, int OW,
                                                  int KH, int KW, int stride_h, int stride_w,
                                                  int pad_top, int pad_left, int dil_h, int dil_w)
{
    const int f0 = get_global_id(0) * 8 * BLOCKS, k0 = get_global_id(1) * taps;
    const int chunk = get_global_id(2);
    if (f0 >= F || k0 > K || chunk >= chunks)
        return;
    const int mine = min(taps, K + 1 - k0);
    /* Each element's (ky, kx, c) once. */
    int wy[TAPS], wx[TAPS], c_of[TAPS];
    direct_taps(k0, K, C, KW, pad_top, pad_left, dil_h, dil_w, wy, wx, c_of);
    float8 acc[TAPS][BLOCKS];
    #pragma unroll
    for (int t = 0; t < TAPS; t++)
        #pragma unroll
        for (int b = 0; b < BLOCKS; b++)
            acc[t][b] = (float8)(0.0f);
    const int bias = K - k0;   /* its place among the taps, if there */
    /* No padding and every window inside the image ('valid'): no checks. */
    const int inside = pad_top == 0 && pad_left == 0 &&
                       (OH - 1) * stride_h + (KH - 1) * dil_h + 1 <= H &&
                       (OW - 1) * stride_w + (KW - 1) * dil_w + 1 <= W;
    const int first = chunk * chunk_pixels;
    const int last = min(first + chunk_pixels, pixels);
    int ox = first % OW, oy = (first / OW) % OH, n = first / (OW * OH);
    for (int p = first; p < last; p++) {
        float8 g[BLOCKS];
        #pragma unroll
        for (int b = 0; b < BLOCKS; b++)
            g[b] = kiln_load8(dy + (size_t)p * F + f0 + 8 * b, F - f0 - 8 * b);
        __global const float *sample = in + (size_t)n * H * W * C;
        /* The test inside, not a break: a loop with a second exit is left
         * rolled, and PoCL's compiler warns that it could not unroll it. */
        #pragma unroll
        for (int t = 0; t < TAPS; t++) {
            if (t < mine) {
                float v = 1.0f;
                if (t != bias) {
                    const int y = oy * stride_h + wy[t], x = ox * stride_w + wx[t];
                    v = inside || (y >= 0 && y < H && x >= 0 && x < W)
                            ? sample[((size_t)y * W + x) * C + c_of[t]] : 0.0f;
                }
                #pragma unroll
                for (int b = 0; b < BLOCKS; b++)
                    acc[t][b] += v * g[b];
            }
        }
        direct_next_pixel(&n, &oy, &ox, OH, OW);
    }
    /* Constant trip counts, as in the forward kernel. */
    #pragma unroll
    for (int t = 0; t < TAPS; t++)
        #pragma unroll
        for (int b = 0; b < BLOCKS; b++)
            if (t < mine)
                kiln_store8(partial + ((size_t)chunk * (K + 1) + k0 + t) * F + f0 + 8 * b,
                            acc[t][b], F - f0 - 8 * b);
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

/* The GPU variants (_gpu): a work-item per filter over dim 0, so that
 * neighbouring items read neighbouring weights and write neighbouring
 * outputs or partial sums; scalars, no float8. The same arithmetic in the
 * same order as above. */

/* Forward over an (F, output pixels) range. */
__kernel void kiln_conv2d_direct_forward_gpu(__global const float *in, __global float *out,
                                             __global const float *params, int kernel_offset,
                                             int bias_offset, int use_bias, int act, int F,
                                             int pixels, int H, int W, int C, int OH, int OW,
                                             int KH, int KW, int stride_h, int stride_w,
                                             int pad_top, int pad_left, int dil_h, int dil_w)
{
    const int f = get_global_id(0), p = get_global_id(1);
    if (f >= F || p >= pixels)
        return;
    const int ox = p % OW, oy = (p / OW) % OH, n = p / (OW * OH);
    __global const float *sample = in + (size_t)n * H * W * C;
    const int x0 = ox * stride_w - pad_left;
    float acc = use_bias ? params[bias_offset + f] : 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int y = oy * stride_h - pad_top + ky * dil_h;
        if (y < 0 || y >= H)
            continue;
        __global const float *row = sample + (size_t)y * W * C;
        for (int kx = 0; kx < KW; kx++) {
            const int x = x0 + kx * dil_w;
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
 * as kiln_conv2d_direct_grad_partial_cpu: each item reads dy[p, f] once per
 * pixel for its window elements; the host gives it more, shorter chunks. */
__kernel void kiln_conv2d_direct_grad_partial_gpu(__global const float *in,
                                                  __global const float *dy,
                                                  __global float *partial, int F, int K,
                                                  int taps, int chunks, int chunk_pixels,
                                                  int pixels, int H, int W, int C, int OH,
                                                  int OW, int KH, int KW, int stride_h,
                                                  int stride_w, int pad_top, int pad_left,
                                                  int dil_h, int dil_w)
{
    (void)KH;
    const int f = get_global_id(0), k0 = get_global_id(1) * taps;
    const int chunk = get_global_id(2);
    if (f >= F || k0 > K || chunk >= chunks)
        return;
    const int mine = min(taps, K + 1 - k0);
    int wy[TAPS], wx[TAPS], c_of[TAPS];
    direct_taps(k0, K, C, KW, pad_top, pad_left, dil_h, dil_w, wy, wx, c_of);
    float acc[TAPS];
    for (int t = 0; t < TAPS; t++)
        acc[t] = 0.0f;
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
        direct_next_pixel(&n, &oy, &ox, OH, OW);
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
                                            int pad_top, int pad_left, int dil_h, int dil_w)
{
    const int c = get_global_id(0), q = get_global_id(1);
    if (c >= C || q >= pixels)
        return;
    const int x = q % W;
    const int y = (q / W) % H;
    const int n = q / (W * H);
    float acc = 0.0f;
    for (int ky = 0; ky < KH; ky++) {
        const int oy = kiln_tap_output(y, ky, pad_top, dil_h, stride_h, OH);
        if (oy < 0)
            continue;
        for (int kx = 0; kx < KW; kx++) {
            const int ox = kiln_tap_output(x, kx, pad_left, dil_w, stride_w, OW);
            if (ox < 0)
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
