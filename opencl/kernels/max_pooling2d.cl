/* Max pooling, channels last. Forward keeps, per output, the index of the
 * winning input within its sample, for the backward gather. */
__kernel void kiln_max_pooling2d_forward(__global const float *in, __global float *out,
                                         __global int *argmax, int total, int H, int W, int C,
                                         int OH, int OW, int PH, int PW, int stride_h,
                                         int stride_w, int pad_top, int pad_left)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int c = i % C;
    const int ox = (i / C) % OW;
    const int oy = (i / (C * OW)) % OH;
    const int n = i / (C * OW * OH);
    __global const float *sample = in + (size_t)n * H * W * C;
    float best = -INFINITY;
    int best_index = -1;
    for (int py = 0; py < PH; py++) {
        const int y = oy * stride_h - pad_top + py;
        if (y < 0 || y >= H)
            continue;
        for (int px = 0; px < PW; px++) {
            const int x = ox * stride_w - pad_left + px;
            if (x < 0 || x >= W)
                continue;
            const int idx = (y * W + x) * C + c;
            const float v = sample[idx];
            /* The first maximum wins, as in the host reference; NaN propagates. */
            if (best_index < 0 || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                best_index = idx;
            }
        }
    }
    out[i] = best;
    argmax[i] = best_index;
}

__kernel void kiln_max_pooling2d_backward(__global const float *d_out,
                                          __global const int *argmax, __global float *d_in,
                                          int total, int H, int W, int C, int OH, int OW,
                                          int PH, int PW, int stride_h, int stride_w,
                                          int pad_top, int pad_left, int accumulate)
{
    const int i = get_global_id(0);
    if (i >= total)
        return;
    const int c = i % C;
    const int x = (i / C) % W;
    const int y = (i / (C * W)) % H;
    const int n = i / (C * W * H);
    const int self = (y * W + x) * C + c;
    /* Outputs whose window holds (y, x): oy * stride - pad <= y < oy * stride - pad + PH. */
    const int oy_lo = max(0, (y + pad_top - PH + stride_h) / stride_h);
    const int oy_hi = min(OH - 1, (y + pad_top) / stride_h);
    const int ox_lo = max(0, (x + pad_left - PW + stride_w) / stride_w);
    const int ox_hi = min(OW - 1, (x + pad_left) / stride_w);
    float s = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; oy++)
        for (int ox = ox_lo; ox <= ox_hi; ox++) {
            const size_t o = (((size_t)n * OH + oy) * OW + ox) * C + c;
            if (argmax[o] == self)
                s += d_out[o];
        }
    d_in[i] = accumulate ? d_in[i] + s : s;
}
