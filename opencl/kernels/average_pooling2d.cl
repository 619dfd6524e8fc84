/* Average pooling, channels last: by default over the window's cells
 * inside the input (padded cells are not counted, as in Keras); with
 * include_pad over the window's cells inside the padded input (PyTorch's
 * and ONNX's count_include_pad), pad_bottom and pad_right being the
 * padding after. GlobalAveragePooling2D is the case where the window is
 * the whole input. Channels go in blocks of eight as vectors (kiln_load8,
 * prelude.cl). */

/* The cells output o's window counts along one axis of n pixels. */
inline int avg_cells(int o, int stride, int pad_before, int P, int n, int pad_after,
                     int include_pad)
{
    const int start = o * stride - pad_before;
    return include_pad ? min(start + P, n + pad_after) - start
                       : min(start + P, n) - max(start, 0);
}

/* Forward: one work-item per row of output pixels. */
__kernel void kiln_average_pooling2d_forward_cpu(__global const float *in, __global float *out,
                                                 int pixels, int H, int W, int C, int OH, int OW,
                                                 int PH, int PW, int stride_h, int stride_w,
                                                 int pad_top, int pad_left, int include_pad,
                                                 int pad_bottom, int pad_right)
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
        const float scale =
            1.0f / (float)(avg_cells(oy, stride_h, pad_top, PH, H, pad_bottom, include_pad) *
                           avg_cells(ox, stride_w, pad_left, PW, W, pad_right, include_pad));
        for (int c0 = 0; c0 < C; c0 += 8) {
            const int count = C - c0;
            float8 s = (float8)(0.0f);
            for (int y = y0; y < y1; y++)
                for (int x = x0; x < x1; x++)
                    s += kiln_load8(sample + ((size_t)y * W + x) * C + c0, count);
            kiln_store8(out + (size_t)p * C + c0, s * scale, count);
        }
    }
}

/* Backward: one work-item per row of input pixels gathers, for each, dy / cells of every
 * output whose window holds it. */
__kernel void kiln_average_pooling2d_backward_cpu(__global const float *d_out,
                                                  __global float *d_in, int pixels, int H, int W,
                                                  int C, int OH, int OW, int PH, int PW,
                                                  int stride_h, int stride_w, int pad_top,
                                                  int pad_left, int include_pad, int pad_bottom,
                                                  int pad_right, int accumulate)
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
        __global float *dst = d_in + (size_t)p * C;
        for (int c0 = 0; c0 < C; c0 += 8) {
            const int count = C - c0;
            float8 s = (float8)(0.0f);
            for (int oy = oy_lo; oy <= oy_hi; oy++) {
                const int cells_y =
                    avg_cells(oy, stride_h, pad_top, PH, H, pad_bottom, include_pad);
                for (int ox = ox_lo; ox <= ox_hi; ox++) {
                    const int cells_x =
                        avg_cells(ox, stride_w, pad_left, PW, W, pad_right, include_pad);
                    const size_t o = (((size_t)n * OH + oy) * OW + ox) * C + c0;
                    s += kiln_load8(d_out + o, count) / (float)(cells_y * cells_x);
                }
            }
            if (accumulate)
                s += kiln_load8(dst + c0, count);
            kiln_store8(dst + c0, s, count);
        }
    }
}

/* The GPU variants: a work-item per float over a (C, pixels) range, so that
 * neighbouring items read and write neighbouring channels; the same sums
 * in the same order as the variants above. */
__kernel void kiln_average_pooling2d_forward_gpu(__global const float *in,
                                                 __global float *out, int pixels, int H,
                                                 int W, int C, int OH, int OW, int PH, int PW,
                                                 int stride_h, int stride_w, int pad_top,
                                                 int pad_left, int include_pad, int pad_bottom,
                                                 int pad_right)
{
    const int c = get_global_id(0), p = get_global_id(1);
    if (c >= C || p >= pixels)
        return;
    const int ox = p % OW, oy = (p / OW) % OH, n = p / (OW * OH);
    __global const float *sample = in + (size_t)n * H * W * C + c;
    const int4 w = kiln_pool_window(oy, ox, H, W, PH, PW, stride_h, stride_w, pad_top, pad_left);
    const int y0 = w.s0, y1 = w.s1, x0 = w.s2, x1 = w.s3;
    const float scale =
        1.0f / (float)(avg_cells(oy, stride_h, pad_top, PH, H, pad_bottom, include_pad) *
                       avg_cells(ox, stride_w, pad_left, PW, W, pad_right, include_pad));
    float s = 0.0f;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            s += sample[((size_t)y * W + x) * C];
    out[(size_t)p * C + c] = s * scale;
}

__kernel void kiln_average_pooling2d_backward_gpu(__global const float *d_out,
                                                  __global float *d_in, int pixels, int H,
                                                  int W, int C, int OH, int OW, int PH,
                                                  int PW, int stride_h, int stride_w,
                                                  int pad_top, int pad_left, int include_pad,
                                                  int pad_bottom, int pad_right, int accumulate)
{
    const int c = get_global_id(0), p = get_global_id(1);
    if (c >= C || p >= pixels)
        return;
    const int x = p % W, y = (p / W) % H, n = p / (W * H);
    const int4 o = kiln_pool_outputs(y, x, OH, OW, PH, PW, stride_h, stride_w, pad_top, pad_left);
    const int oy_lo = o.s0, oy_hi = o.s1, ox_lo = o.s2, ox_hi = o.s3;
    float s = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; oy++) {
        const int cells_y = avg_cells(oy, stride_h, pad_top, PH, H, pad_bottom, include_pad);
        for (int ox = ox_lo; ox <= ox_hi; ox++) {
            const int cells_x = avg_cells(ox, stride_w, pad_left, PW, W, pad_right, include_pad);
            s += d_out[(((size_t)n * OH + oy) * OW + ox) * C + c] / (float)(cells_y * cells_x);
        }
    }
    __global float *dst = d_in + (size_t)p * C + c;
    *dst = accumulate ? s + *dst : s;
}
