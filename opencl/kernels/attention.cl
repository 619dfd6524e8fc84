/* Multi-head attention between the projections (layers/multi_head_attention.c).
 *
 * Layouts, b the sample, h the head, i a query position, j a value position:
 *   q  (B, Tq, H, K)   k (B, Tv, H, K)   v (B, Tv, H, V)   c (B, Tq, H, V)
 *   p  (B, H, Tq, Tv): the attention probabilities, and the scores'
 *      gradient ds in backward.
 * Query position i sees value positions j < visible(i): all of them, or
 * j <= i under the causal mask (Keras's lower triangle, from the first
 * position, whatever Tq and Tv); unseen probabilities are exactly 0.
 *
 * Dropout on p (rate > 0) is a kiln_keep_scale draw per element of a
 * sample's (H, Tq, Tv) probabilities, recomputed wherever it is needed,
 * as dropout.cl does: no mask is stored.
 *
 * A work-item per output value. The score pass is fused: the scaled dot
 * products, the mask and the softmax run in one kernel that writes p once
 * (an online softmax: a first sweep finds each row's maximum and sum, the
 * second writes). Rows of more than a few values (the _wide kernels) take
 * a work-group each instead, split over ATT_LANES lanes whatever the
 * group's size and merged in local memory in a fixed tree, as
 * layer_norm.cl does: a row's result does not depend on the device's
 * work-group size. */

#define ATT_LANES 64

inline int att_visible(int i, int Tv, int causal)
{
    return causal ? min(i + 1, Tv) : Tv;
}

/* The dropout factor of probability (h, i, j) of global sample `sample`. */
inline float att_keep(float rate, uint seed_lo, uint seed_hi, uint step, int sample, int h,
                      int i, int j, int Tq, int Tv)
{
    if (rate == 0.0f)
        return 1.0f;
    return kiln_keep_scale(seed_lo, seed_hi, step, sample, (h * Tq + i) * Tv + j, rate);
}

inline float att_dot(__global const float *a, __global const float *b, int n)
{
    float s = 0.0f;
    for (int x = 0; x < n; x++)
        s += a[x] * b[x];
    return s;
}

/* p = softmax over j of scale * q_i . k_j, masked; a work-item per
 * (b, h, i) row, over B * H * Tq rows. */
__kernel void kiln_attention_probs(__global const float *q, __global const float *k,
                                   __global float *p, int rows, int H, int Tq, int Tv, int K,
                                   float scale, int causal)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    const int i = row % Tq, h = (row / Tq) % H, b = row / Tq / H;
    const size_t step = (size_t)H * K;
    __global const float *qi = q + ((size_t)b * Tq + i) * step + (size_t)h * K;
    __global const float *k0 = k + (size_t)b * Tv * step + (size_t)h * K;
    const int n = att_visible(i, Tv, causal);
    float m = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) {
        const float s = scale * att_dot(qi, k0 + j * step, K);
        if (s > m) {
            sum = sum * exp(m - s) + 1.0f;
            m = s;
        } else {
            sum += exp(s - m);
        }
    }
    const float inv = 1.0f / sum;
    __global float *pr = p + (size_t)row * Tv;
    for (int j = 0; j < n; j++)
        pr[j] = exp(scale * att_dot(qi, k0 + j * step, K) - m) * inv;
    for (int j = n; j < Tv; j++)
        pr[j] = 0.0f;
}

/* out[b, i, h, x] = sum over visible j of w[b, h, i, j] (times its dropout
 * factor) src[b, j, h, x], X values per head: the context c from p and v
 * (forward), and dq from ds and k (backward, rate 0). Range (H * X, B * Tq). */
__kernel void kiln_attention_weigh(__global const float *w, __global const float *src,
                                   __global float *out, int B, int H, int Tq, int Tv, int X,
                                   int causal, int first_sample, uint seed_lo, uint seed_hi,
                                   uint step, float rate)
{
    const int hx = get_global_id(0), bi = get_global_id(1);
    if (hx >= H * X || bi >= B * Tq)
        return;
    const int h = hx / X, b = bi / Tq, i = bi % Tq;
    __global const float *wr = w + (((size_t)b * H + h) * Tq + i) * Tv;
    __global const float *s0 = src + (size_t)b * Tv * H * X + hx;
    const int n = att_visible(i, Tv, causal);
    float acc = 0.0f;
    for (int j = 0; j < n; j++)
        acc += wr[j] * att_keep(rate, seed_lo, seed_hi, step, first_sample + b, h, i, j, Tq, Tv) *
               s0[(size_t)j * H * X];
    out[(size_t)bi * H * X + hx] = acc;
}

/* The transposed product: out[b, j, h, x] = sum over the i that see j of
 * w[b, h, i, j] (times its dropout factor) src[b, i, h, x]: dk from ds and
 * q (rate 0), dv from p and dc. Range (H * X, B * Tv). */
__kernel void kiln_attention_weigh_t(__global const float *w, __global const float *src,
                                     __global float *out, int B, int H, int Tq, int Tv, int X,
                                     int causal, int first_sample, uint seed_lo, uint seed_hi,
                                     uint step, float rate)
{
    const int hx = get_global_id(0), bj = get_global_id(1);
    if (hx >= H * X || bj >= B * Tv)
        return;
    const int h = hx / X, b = bj / Tv, j = bj % Tv;
    __global const float *wc = w + ((size_t)b * H + h) * Tq * Tv + j;
    __global const float *s0 = src + (size_t)b * Tq * H * X + hx;
    float acc = 0.0f;
    for (int i = causal ? j : 0; i < Tq; i++)
        acc += wc[(size_t)i * Tv] *
               att_keep(rate, seed_lo, seed_hi, step, first_sample + b, h, i, j, Tq, Tv) *
               s0[(size_t)i * H * X];
    out[(size_t)bj * H * X + hx] = acc;
}

/* The softmax's backward, fused with the scale: for row (b, h, i),
 * dp_j = keep_j dc_i . v_j and ds_j = scale p_j (dp_j - sum_l p_l dp_l),
 * written over the rows of ds (0 where j is not seen). A work-item per row. */
__kernel void kiln_attention_backward_scores(__global const float *p, __global const float *dc,
                                             __global const float *v, __global float *ds,
                                             int rows, int H, int Tq, int Tv, int V,
                                             float scale, int causal, int first_sample,
                                             uint seed_lo, uint seed_hi, uint step, float rate)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    const int i = row % Tq, h = (row / Tq) % H, b = row / Tq / H;
    const size_t vstep = (size_t)H * V;
    __global const float *dci = dc + ((size_t)b * Tq + i) * vstep + (size_t)h * V;
    __global const float *v0 = v + (size_t)b * Tv * vstep + (size_t)h * V;
    __global const float *pr = p + (size_t)row * Tv;
    __global float *dr = ds + (size_t)row * Tv;
    const int n = att_visible(i, Tv, causal);
    float weighted = 0.0f;
    for (int j = 0; j < n; j++) {
        const float dp = att_keep(rate, seed_lo, seed_hi, step, first_sample + b, h, i, j, Tq,
                                  Tv) * att_dot(dci, v0 + j * vstep, V);
        dr[j] = dp;
        weighted += pr[j] * dp;
    }
    for (int j = 0; j < n; j++)
        dr[j] = scale * pr[j] * (dr[j] - weighted);
    for (int j = n; j < Tv; j++)
        dr[j] = 0.0f;
}

/* Lane b's running (maximum, sum of exp(s - maximum)) merged into lane a's. */
inline void att_merge(__local float *most, __local float *total, int a, int b)
{
    const float ma = most[a], mb = most[b];
    if (mb == -INFINITY)
        return;
    const float m = fmax(ma, mb);
    total[a] = total[a] * exp(ma - m) + total[b] * exp(mb - m);
    most[a] = m;
}

/* kiln_attention_probs with a work-group per row, over a range of
 * ATT_LANES work-items per row (a group wider than that takes several
 * rows in turn). */
__kernel void kiln_attention_probs_wide(__global const float *q, __global const float *k,
                                        __global float *p, int rows, int H, int Tq, int Tv,
                                        int K, float scale, int causal)
{
    __local float most[ATT_LANES], total[ATT_LANES];
    const int lid = get_local_id(0), group = get_local_size(0);
    /* The whole group takes each of its rows: its barriers are uniform. */
    for (int row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        const int i = row % Tq, h = (row / Tq) % H, b = row / Tq / H;
        const size_t step = (size_t)H * K;
        __global const float *qi = q + ((size_t)b * Tq + i) * step + (size_t)h * K;
        __global const float *k0 = k + (size_t)b * Tv * step + (size_t)h * K;
        const int n = att_visible(i, Tv, causal);
        for (int lane = lid; lane < ATT_LANES; lane += group) {
            float m = -INFINITY, sum = 0.0f;
            for (int j = lane; j < n; j += ATT_LANES) {
                const float s = scale * att_dot(qi, k0 + j * step, K);
                if (s > m) {
                    sum = sum * exp(m - s) + 1.0f;
                    m = s;
                } else {
                    sum += exp(s - m);
                }
            }
            most[lane] = m;
            total[lane] = sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int span = ATT_LANES / 2; span > 0; span /= 2) {
            for (int lane = lid; lane < span; lane += group)
                att_merge(most, total, lane, lane + span);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const float m = most[0], inv = 1.0f / total[0];
        __global float *pr = p + (size_t)row * Tv;
        for (int j = lid; j < Tv; j += group)
            pr[j] = j < n ? exp(scale * att_dot(qi, k0 + j * step, K) - m) * inv : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);   /* most and total are the next row's */
    }
}

/* kiln_attention_backward_scores with a work-group per row, as
 * kiln_attention_probs_wide: each lane keeps to its own values of the
 * row, so only the lanes' sums cross work-items. */
__kernel void kiln_attention_backward_scores_wide(__global const float *p,
                                                  __global const float *dc,
                                                  __global const float *v, __global float *ds,
                                                  int rows, int H, int Tq, int Tv, int V,
                                                  float scale, int causal, int first_sample,
                                                  uint seed_lo, uint seed_hi, uint step,
                                                  float rate)
{
    __local float part[ATT_LANES];
    const int lid = get_local_id(0), group = get_local_size(0);
    for (int row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        const int i = row % Tq, h = (row / Tq) % H, b = row / Tq / H;
        const size_t vstep = (size_t)H * V;
        __global const float *dci = dc + ((size_t)b * Tq + i) * vstep + (size_t)h * V;
        __global const float *v0 = v + (size_t)b * Tv * vstep + (size_t)h * V;
        __global const float *pr = p + (size_t)row * Tv;
        __global float *dr = ds + (size_t)row * Tv;
        const int n = att_visible(i, Tv, causal);
        for (int lane = lid; lane < ATT_LANES; lane += group) {
            float weighted = 0.0f;
            for (int j = lane; j < n; j += ATT_LANES) {
                const float dp = att_keep(rate, seed_lo, seed_hi, step, first_sample + b, h, i,
                                          j, Tq, Tv) * att_dot(dci, v0 + j * vstep, V);
                dr[j] = dp;
                weighted += pr[j] * dp;
            }
            part[lane] = weighted;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int span = ATT_LANES / 2; span > 0; span /= 2) {
            for (int lane = lid; lane < span; lane += group)
                part[lane] += part[lane + span];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const float weighted = part[0];
        for (int lane = lid; lane < ATT_LANES; lane += group)
            for (int j = lane; j < Tv; j += ATT_LANES)
                dr[j] = j < n ? scale * pr[j] * (dr[j] - weighted) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);   /* part is the next row's */
    }
}
