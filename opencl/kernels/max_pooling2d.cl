/* Max pooling, channels last. Forward: one work-item per row of output
 * pixels (few, large work-groups suit CPU devices); it keeps, per output, the index of
 * the winning input within its sample, for the backward gather. */
__kernel void kiln_max_pooling2d_forward_cpu(__global const float *in, __global float *out,
                                             __global int *argmax, int pixels, int H, int W, int C,
                                             int OH, int OW, int PH, int PW, int stride_h,
                                             int stride_w, int pad_top, int pad_left)
{
    /* A work-item per output row: the divisions that place a pixel once
     * a row. */
    const int row = get_global_id(0);
    if (row >= pixels / OW)
        return;
    const int oy = row % OH, n = row / OH;
    for (int ox = 0; ox < OW; ox++) {
        const int p = row * OW + ox;
        __global const float *sample = in + (size_t)n * H * W * C;
        const int4 w =
            kiln_pool_window(oy, ox, H, W, PH, PW, stride_h, stride_w, pad_top, pad_left);
        const int y0 = w.s0, y1 = w.s1, x0 = w.s2, x1 = w.s3;
        /* Channels in blocks of eight as vectors (kiln_load8, prelude.cl). */
        for (int c0 = 0; c0 < C; c0 += 8) {
            const int count = C - c0;
            const int first = (y0 * W + x0) * C + c0;
            float8 best = kiln_load8(sample + first, count);
            int8 index = (int8)(first) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
            for (int y = y0; y < y1; y++)
                for (int x = x0; x < x1; x++) {
                    const int base = (y * W + x) * C + c0;
                    const float8 v = kiln_load8(sample + base, count);
                    /* The first maximum wins, as in the host reference; NaN propagates. */
                    const int8 better = isgreater(v, best) | (isnan(v) & ~isnan(best));
                    best = select(best, v, better);
                    index = select(index, (int8)(base) + (int8)(0, 1, 2, 3, 4, 5, 6, 7), better);
                }
            kiln_store8(out + (size_t)p * C + c0, best, count);
            kiln_store8i(argmax + (size_t)p * C + c0, index, count);
        }
    }
}

/* Backward: one work-item per row of input pixels gathers, for each pixel
 * and channel, the
 * outputs whose window holds it and chose it. */
__kernel void kiln_max_pooling2d_backward_cpu(__global const float *d_out,
                                              __global const int *argmax, __global float *d_in,
                                              int pixels, int H, int W, int C, int OH, int OW,
                                              int PH, int PW, int stride_h, int stride_w,
                                              int pad_top, int pad_left, int accumulate)
{
    /* A work-item per input row: the divisions that place a pixel once a
     * row. */
    const int row = get_global_id(0);
    if (row >= pixels / W)
        return;
    const int y = row % H, n = row / H;
    for (int x = 0; x < W; x++) {
        const int p = row * W + x;
        const int4 o =
            kiln_pool_outputs(y, x, OH, OW, PH, PW, stride_h, stride_w, pad_top, pad_left);
        const int oy_lo = o.s0, oy_hi = o.s1, ox_lo = o.s2, ox_hi = o.s3;
        const int self = (y * W + x) * C;
        __global float *dst = d_in + (size_t)p * C;
        for (int c0 = 0; c0 < C; c0 += 8) {
            const int count = C - c0;
            const int8 mine = (int8)(self + c0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
            float8 s = (float8)(0.0f);
            for (int oy = oy_lo; oy <= oy_hi; oy++)
                for (int ox = ox_lo; ox <= ox_hi; ox++) {
                    const size_t o = (((size_t)n * OH + oy) * OW + ox) * C + c0;
                    const int8 won = kiln_load8i(argmax + o, count) == mine;
                    s += select((float8)(0.0f), kiln_load8(d_out + o, count), won);
                }
            if (accumulate)
                s += kiln_load8(dst + c0, count);
            kiln_store8(dst + c0, s, count);
        }
    }
}

/* The GPU variants: a work-item per float over a (C, pixels) range, so that
 * neighbouring items read and write neighbouring channels; the same
 * comparisons and sums in the same order as the variants above. */
__kernel void kiln_max_pooling2d_forward_gpu(__global const float *in, __global float *out,
                                             __global int *argmax, int pixels, int H, int W,
                                             int C, int OH, int OW, int PH, int PW,
                                             int stride_h, int stride_w, int pad_top,
                                             int pad_left)
{
    const int c = get_global_id(0), p = get_global_id(1);
    if (c >= C || p >= pixels)
        return;
    const int ox = p % OW, oy = (p / OW) % OH, n = p / (OW * OH);
    __global const float *sample = in + (size_t)n * H * W * C;
    const int4 w = kiln_pool_window(oy, ox, H, W, PH, PW, stride_h, stride_w, pad_top, pad_left);
    const int y0 = w.s0, y1 = w.s1, x0 = w.s2, x1 = w.s3;
    int index = (y0 * W + x0) * C + c;
    float best = sample[index];
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const int i = (y * W + x) * C + c;
            const float v = sample[i];
            if (isgreater(v, best) || (isnan(v) && !isnan(best))) {
                best = v;
                index = i;
            }
        }
    out[(size_t)p * C + c] = best;
    argmax[(size_t)p * C + c] = index;
}

__kernel void kiln_max_pooling2d_backward_gpu(__global const float *d_out,
                                              __global const int *argmax, __global float *d_in,
                                              int pixels, int H, int W, int C, int OH, int OW,
                                              int PH, int PW, int stride_h, int stride_w,
                                              int pad_top, int pad_left, int accumulate)
{
    const int c = get_global_id(0), p = get_global_id(1);
    if (c >= C || p >= pixels)
        return;
    const int x = p % W, y = (p / W) % H, n = p / (W * H);
    const int4 o = kiln_pool_outputs(y, x, OH, OW, PH, PW, stride_h, stride_w, pad_top, pad_left);
    const int oy_lo = o.s0, oy_hi = o.s1, ox_lo = o.s2, ox_hi = o.s3;
    const int mine = (y * W + x) * C + c;
    float s = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; oy++)
        for (int ox = ox_lo; ox <= ox_hi; ox++) {
            const size_t o = (((size_t)n * OH + oy) * OW + ox) * C + c;
            s += argmax[o] == mine ? d_out[o] : 0.0f;
        }
    __global float *dst = d_in + (size_t)p * C + c;
    *dst = accumulate ? s + *dst : s;
}
