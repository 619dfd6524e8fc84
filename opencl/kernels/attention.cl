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

/* The tiled variant (the CPU one; kernel_variant.c chooses): the same four
 * products as register tiles, as gemm.cl's kernels, where the kernels above
 * take a work-item per value or per row and read one float at a time.
 * Scores and dp tiles are 4 rows by 4 columns of dot products over the head
 * dimension in float8 chunks, so a work-item owns 4 whole rows and runs the
 * softmax (or its backward) over them itself; the weighing products are 4
 * rows by 8 values with float8 accumulators. */

/* Lanes 0..count-1 of eight. */
inline int8 att_lanes_below(int count)
{
    return (int8)(0, 1, 2, 3, 4, 5, 6, 7) < (int8)(count);
}

/* dot[r][c] = a row r . b row c over n values, a's rows at a0..a3 and b's
 * at b0..b3 (rows past the tile's own are passed as repeats of row 0 by
 * the caller: in bounds, their sums unused). */
inline void att_dot_tile(__global const float *a0, __global const float *a1,
                         __global const float *a2, __global const float *a3,
                         __global const float *b0, __global const float *b1,
                         __global const float *b2, __global const float *b3, int n,
                         float dot[4][4])
{
    float8 s00 = (float8)(0.0f), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00;
    float8 s12 = s00, s13 = s00, s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00;
    float8 s31 = s00, s32 = s00, s33 = s00;
    for (int x = 0; x < n; x += 8) {
        const int left = n - x;
        const float8 x0 = kiln_load8(a0 + x, left), x1 = kiln_load8(a1 + x, left);
        const float8 x2 = kiln_load8(a2 + x, left), x3 = kiln_load8(a3 + x, left);
        const float8 y0 = kiln_load8(b0 + x, left), y1 = kiln_load8(b1 + x, left);
        const float8 y2 = kiln_load8(b2 + x, left), y3 = kiln_load8(b3 + x, left);
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
    }
    dot[0][0] = kiln_sum8(s00); dot[0][1] = kiln_sum8(s01);
    dot[0][2] = kiln_sum8(s02); dot[0][3] = kiln_sum8(s03);
    dot[1][0] = kiln_sum8(s10); dot[1][1] = kiln_sum8(s11);
    dot[1][2] = kiln_sum8(s12); dot[1][3] = kiln_sum8(s13);
    dot[2][0] = kiln_sum8(s20); dot[2][1] = kiln_sum8(s21);
    dot[2][2] = kiln_sum8(s22); dot[2][3] = kiln_sum8(s23);
    dot[3][0] = kiln_sum8(s30); dot[3][1] = kiln_sum8(s31);
    dot[3][2] = kiln_sum8(s32); dot[3][3] = kiln_sum8(s33);
}

/* Row r of a 4-row tile starting at row `first` of `count` rows, each
 * `step` floats apart: past the last row, the first again. */
inline __global const float *att_tile_row(__global const float *first, int r, int count,
                                          size_t step)
{
    return first + (r < count ? r * step : 0);
}

/* kiln_attention_probs as tiles: a work-item per 4 query rows of one
 * (sample, head); range (ceil(Tq / 4), B * H). The scaled, masked scores
 * go to p first; the softmax then runs over each row in place (in cache),
 * eight values at a time. */
__kernel void kiln_attention_probs_tiled(__global const float *q, __global const float *k,
                                         __global float *p, int B, int H, int Tq, int Tv,
                                         int K, float scale, int causal)
{
    const int i0 = get_global_id(0) * 4, bh = get_global_id(1);
    if (i0 >= Tq || bh >= B * H)
        return;
    const int b = bh / H, h = bh % H, rows = min(4, Tq - i0);
    const size_t step = (size_t)H * K;
    __global const float *qi = q + ((size_t)b * Tq + i0) * step + (size_t)h * K;
    __global const float *k0 = k + (size_t)b * Tv * step + (size_t)h * K;
    __global float *p0 = p + ((size_t)bh * Tq + i0) * Tv;
    const int seen = att_visible(i0 + rows - 1, Tv, causal);   /* by the tile's last row */
    float most[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int j0 = 0; j0 < seen; j0 += 4) {
        const int cols = min(4, seen - j0);
        __global const float *kj = k0 + (size_t)j0 * step;
        float s[4][4];
        att_dot_tile(qi, att_tile_row(qi, 1, rows, step), att_tile_row(qi, 2, rows, step),
                     att_tile_row(qi, 3, rows, step), kj, att_tile_row(kj, 1, cols, step),
                     att_tile_row(kj, 2, cols, step), att_tile_row(kj, 3, cols, step), K, s);
        for (int r = 0; r < rows; r++) {
            const int n = att_visible(i0 + r, Tv, causal);
            for (int c = 0; c < cols; c++) {
                const float v = j0 + c < n ? scale * s[r][c] : -INFINITY;
                p0[(size_t)r * Tv + j0 + c] = v;
                most[r] = fmax(most[r], v);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        __global float *pr = p0 + (size_t)r * Tv;
        const int n = att_visible(i0 + r, Tv, causal);
        float8 total = (float8)(0.0f);
        for (int j = 0; j < n; j += 8) {
            const float8 e = exp(kiln_load8(pr + j, n - j) - most[r]);
            total += select((float8)(0.0f), e, att_lanes_below(n - j));
            kiln_store8(pr + j, e, n - j);
        }
        const float inv = 1.0f / kiln_sum8(total);
        for (int j = 0; j < n; j += 8)
            kiln_store8(pr + j, kiln_load8(pr + j, n - j) * inv, n - j);
        for (int j = n; j < Tv; j++)
            pr[j] = 0.0f;
    }
}

/* kiln_attention_backward_scores as tiles, over the same range as
 * kiln_attention_probs_tiled: dp = keep dc_i . v_j tile by tile into ds,
 * then ds = scale p (dp - sum p dp) over each row in place. */
__kernel void kiln_attention_backward_scores_tiled(__global const float *p,
                                                   __global const float *dc,
                                                   __global const float *v, __global float *ds,
                                                   int B, int H, int Tq, int Tv, int V,
                                                   float scale, int causal, int first_sample,
                                                   uint seed_lo, uint seed_hi, uint step,
                                                   float rate)
{
    const int i0 = get_global_id(0) * 4, bh = get_global_id(1);
    if (i0 >= Tq || bh >= B * H)
        return;
    const int b = bh / H, h = bh % H, rows = min(4, Tq - i0);
    const size_t vstep = (size_t)H * V;
    __global const float *dci = dc + ((size_t)b * Tq + i0) * vstep + (size_t)h * V;
    __global const float *v0 = v + (size_t)b * Tv * vstep + (size_t)h * V;
    __global const float *p0 = p + ((size_t)bh * Tq + i0) * Tv;
    __global float *d0 = ds + ((size_t)bh * Tq + i0) * Tv;
    const int seen = att_visible(i0 + rows - 1, Tv, causal);
    float weighted[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j0 = 0; j0 < seen; j0 += 4) {
        const int cols = min(4, seen - j0);
        __global const float *vj = v0 + (size_t)j0 * vstep;
        float dp[4][4];
        att_dot_tile(dci, att_tile_row(dci, 1, rows, vstep), att_tile_row(dci, 2, rows, vstep),
                     att_tile_row(dci, 3, rows, vstep), vj, att_tile_row(vj, 1, cols, vstep),
                     att_tile_row(vj, 2, cols, vstep), att_tile_row(vj, 3, cols, vstep), V, dp);
        for (int r = 0; r < rows; r++) {
            const int n = att_visible(i0 + r, Tv, causal);
            for (int c = 0; c < cols && j0 + c < n; c++) {
                const int j = j0 + c;
                const float g = att_keep(rate, seed_lo, seed_hi, step, first_sample + b, h,
                                         i0 + r, j, Tq, Tv) * dp[r][c];
                d0[(size_t)r * Tv + j] = g;
                weighted[r] += p0[(size_t)r * Tv + j] * g;
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        __global const float *pr = p0 + (size_t)r * Tv;
        __global float *dr = d0 + (size_t)r * Tv;
        const int n = att_visible(i0 + r, Tv, causal);
        for (int j = 0; j < n; j += 8) {
            const float8 g = kiln_load8(dr + j, n - j), pj = kiln_load8(pr + j, n - j);
            kiln_store8(dr + j, scale * pj * (g - weighted[r]), n - j);
        }
        for (int j = n; j < Tv; j++)
            dr[j] = 0.0f;
    }
}

/* kiln_attention_weigh as tiles: 4 query rows by 8 of the X values of one
 * head; range (ceil(X / 8) * H, ceil(Tq / 4) * B). Each row sums over the
 * value positions the tile's last row sees: the probabilities (and ds) are
 * exactly 0 past a row's own. */
__kernel void kiln_attention_weigh_tiled(__global const float *w, __global const float *src,
                                         __global float *out, int B, int H, int Tq, int Tv,
                                         int X, int causal, int first_sample, uint seed_lo,
                                         uint seed_hi, uint step, float rate)
{
    const int blocks = (X + 7) / 8, row_blocks = (Tq + 3) / 4;
    const int gx = get_global_id(0), gy = get_global_id(1);
    if (gx >= blocks * H || gy >= row_blocks * B)
        return;
    const int h = gx / blocks, x0 = gx % blocks * 8, b = gy / row_blocks;
    const int i0 = gy % row_blocks * 4, rows = min(4, Tq - i0), cols = X - x0;
    const size_t hx = (size_t)H * X;
    __global const float *w0 = w + (((size_t)b * H + h) * Tq + i0) * Tv;
    __global const float *w1 = att_tile_row(w0, 1, rows, Tv);
    __global const float *w2 = att_tile_row(w0, 2, rows, Tv);
    __global const float *w3 = att_tile_row(w0, 3, rows, Tv);
    __global const float *s0 = src + (size_t)b * Tv * hx + (size_t)h * X + x0;
    const int seen = att_visible(i0 + rows - 1, Tv, causal);
    const int i1 = min(i0 + 1, Tq - 1), i2 = min(i0 + 2, Tq - 1), i3 = min(i0 + 3, Tq - 1);
    float8 acc0 = (float8)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int j = 0; j < seen; j++) {
        const float8 y = kiln_load8(s0 + (size_t)j * hx, cols);
        float a0 = w0[j], a1 = w1[j], a2 = w2[j], a3 = w3[j];
        if (rate > 0.0f) {
            const int sample = first_sample + b;
            a0 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i0, j, Tq, Tv);
            a1 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i1, j, Tq, Tv);
            a2 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i2, j, Tq, Tv);
            a3 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i3, j, Tq, Tv);
        }
        acc0 += a0 * y;
        acc1 += a1 * y;
        acc2 += a2 * y;
        acc3 += a3 * y;
    }
    const float8 acc[4] = {acc0, acc1, acc2, acc3};
    __global float *o0 = out + ((size_t)b * Tq + i0) * hx + (size_t)h * X + x0;
    for (int r = 0; r < rows; r++)
        kiln_store8(o0 + (size_t)r * hx, acc[r], cols);
}

/* kiln_attention_weigh_t as tiles: 4 value positions by 8 of the X values
 * of one head; range (ceil(X / 8) * H, ceil(Tv / 4) * B). Under the mask
 * the sum starts at the tile's first position (w is 0 above the diagonal). */
__kernel void kiln_attention_weigh_t_tiled(__global const float *w, __global const float *src,
                                           __global float *out, int B, int H, int Tq, int Tv,
                                           int X, int causal, int first_sample, uint seed_lo,
                                           uint seed_hi, uint step, float rate)
{
    const int blocks = (X + 7) / 8, col_blocks = (Tv + 3) / 4;
    const int gx = get_global_id(0), gy = get_global_id(1);
    if (gx >= blocks * H || gy >= col_blocks * B)
        return;
    const int h = gx / blocks, x0 = gx % blocks * 8, b = gy / col_blocks;
    const int j0 = gy % col_blocks * 4, cols_j = min(4, Tv - j0), cols = X - x0;
    const size_t hx = (size_t)H * X;
    /* Column c of the tile, or column 0 again past Tv. */
    const int c1 = cols_j > 1 ? 1 : 0, c2 = cols_j > 2 ? 2 : 0, c3 = cols_j > 3 ? 3 : 0;
    __global const float *wc = w + ((size_t)b * H + h) * Tq * Tv + j0;
    __global const float *s0 = src + (size_t)b * Tq * hx + (size_t)h * X + x0;
    float8 acc0 = (float8)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int i = causal ? min(j0, Tq) : 0; i < Tq; i++) {
        const float8 y = kiln_load8(s0 + (size_t)i * hx, cols);
        __global const float *wi = wc + (size_t)i * Tv;
        float a0 = wi[0], a1 = wi[c1], a2 = wi[c2], a3 = wi[c3];
        if (rate > 0.0f) {
            const int sample = first_sample + b;
            a0 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i, j0, Tq, Tv);
            a1 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i, j0 + c1, Tq, Tv);
            a2 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i, j0 + c2, Tq, Tv);
            a3 *= att_keep(rate, seed_lo, seed_hi, step, sample, h, i, j0 + c3, Tq, Tv);
        }
        acc0 += a0 * y;
        acc1 += a1 * y;
        acc2 += a2 * y;
        acc3 += a3 * y;
    }
    const float8 acc[4] = {acc0, acc1, acc2, acc3};
    __global float *o0 = out + ((size_t)b * Tv + j0) * hx + (size_t)h * X + x0;
    for (int c = 0; c < cols_j; c++)
        kiln_store8(o0 + (size_t)c * hx, acc[c], cols);
}
