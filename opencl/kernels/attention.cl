/* Multi-head attention between the projections (layers/multi_head_attention.c).
 *
 * Layouts, b the sample, h the head, i a query position, j a value position:
 *   q  (B, Tq, H, K)   k (B, Tv, H, K)   v (B, Tv, H, V)   c (B, Tq, H, V)
 *   p  (B, H, Tq, Tv): the attention probabilities, and the scores'
 *      gradient ds in backward.
 * Query position i sees value positions j < visible(i): all of them, or
 * j <= i under the causal mask (Keras's lower triangle, from the first
 * position, whatever Tq and Tv); unseen probabilities are exactly 0.
 * A padding mask (B, Tv), where the layer has one (`masked`), hides value
 * position j of sample b from every query where mask[b, j] is nonzero;
 * only the softmax reads it (the scores of a hidden position become
 * probabilities of 0, which every later product and backward pass then
 * carries). A row that sees nothing is all zeros, not 0 / 0.
 *
 * Dropout on p (rate > 0) is a kiln_keep_scale draw per element of a
 * sample's (H, Tq, Tv) probabilities, recomputed wherever it is needed,
 * as dropout.cl does: no mask is stored.
 *
 * The GPU variant (kernel_variant.c chooses) is four products of a
 * (sample, head)'s matrices, each a batched GEMM tiled as gemm.cl's
 * kiln_gemm_nn_gpu is, and two passes over rows of p:
 *   scores  p = scale q k^T (forward), dp = keep dc v^T into ds (backward);
 *   then    softmax over each row of p, or ds = scale p (dp - sum p dp);
 *   weigh   c = (keep p) v, dq = ds k;   weigh_t  dv = (keep p)^T dc, dk = ds^T q.
 * A work-group of ATT_GROUP x ATT_GROUP items computes an ATT_BLOCK x
 * ATT_BLOCK block of its product, each item ATT_PER x ATT_PER values ATT_GROUP apart
 * (neighbouring items store neighbouring columns), over steps of ATT_STEP
 * along the summed dimension whose blocks the group stages in local memory
 * first: each key, value or probability is read once per group, not once
 * per work-item. The mask and the dropout factors are applied as the
 * scores are stored (once per element) or as a group stages the
 * probabilities (once per element and group, not once per work-item).
 * The row passes take up to KILN_ROW_LANES lanes per row and merge the
 * lanes' maximum and sums in local memory, in a fixed order whatever the
 * device. */

/* 8 x 8 items of 4 x 4 values, not gemm.cl's 16 x 16 of 4 x 4: attention's
 * products are often small (a head of 8 to 64 values, a few dozen
 * positions), where a 64 x 64 block is mostly padding. Each item keeps
 * gemm.cl's ratio of 16 FMAs to 8 local loads. */
#define ATT_GROUP 8
#define ATT_BLOCK 32
#define ATT_STEP 16
#define ATT_PER (ATT_BLOCK / ATT_GROUP)   /* an item's rows and columns */
/* A staged block's row: one float more than the block, so that the copies
 * whose neighbouring items write ATT_ROW apart spread over the banks. */
#define ATT_ROW (ATT_BLOCK + 1)

inline int att_visible(int i, int Tv, int causal)
{
    return causal ? min(i + 1, Tv) : Tv;
}

/* Value position j of sample b is padding (hidden). */
inline int att_padded(__global const float *mask, int masked, int b, int Tv, int j)
{
    return masked && mask[(size_t)b * Tv + j] != 0.0f;
}

/* The dropout factor of probability (h, i, j) of global sample `sample`. */
inline float att_keep(float rate, uint seed_lo, uint seed_hi, uint step, int sample, int h,
                      int i, int j, int Tq, int Tv)
{
    if (rate == 0.0f)
        return 1.0f;
    return kiln_keep_scale(seed_lo, seed_hi, step, sample, (h * Tq + i) * Tv + j, rate);
}

/* Copies m[r0 .. r0 + ATT_BLOCK, l0 .. l0 + ATT_STEP) (rows `ld` apart,
 * zeros past `rows` or `width`) into `to`, l-major: a block of q, k, v or
 * dc read along a head's values. */
inline void att_stage_across(__local float *to, __global const float *m, size_t ld, int rows,
                             int width, int r0, int l0, int t)
{
    for (int e = t; e < ATT_BLOCK * ATT_STEP; e += ATT_GROUP * ATT_GROUP) {
        const int r = e / ATT_STEP, l = e % ATT_STEP;
        const int row = r0 + r, x = l0 + l;
        to[l * ATT_ROW + r] = row < rows && x < width ? m[(size_t)row * ld + x] : 0.0f;
    }
}

/* Copies m[l0 .. l0 + ATT_STEP, c0 .. c0 + ATT_BLOCK) into `to` as it lies:
 * a block of the values v, dc, k or q that weigh sums over. */
inline void att_stage_down(__local float *to, __global const float *m, size_t ld, int rows,
                           int width, int l0, int c0, int t)
{
    for (int e = t; e < ATT_BLOCK * ATT_STEP; e += ATT_GROUP * ATT_GROUP) {
        const int l = e / ATT_BLOCK, c = e % ATT_BLOCK;
        const int row = l0 + l, x = c0 + c;
        to[l * ATT_ROW + c] = row < rows && x < width ? m[(size_t)row * ld + x] : 0.0f;
    }
}

/* Copies a block of one (sample, head)'s weights w (Tq x Tv), masked and
 * times their dropout factors, into `to`, l-major: rows i = r0.. by
 * j = l0.. (weigh), or transposed, rows j = r0.. by i = l0.. (weigh_t).
 * Either way neighbouring items read neighbouring j. */
inline void att_stage_weights(__local float *to, __global const float *w, int Tq, int Tv,
                              int causal, int transposed, int r0, int l0, int t, float rate,
                              uint seed_lo, uint seed_hi, uint step, int sample, int h)
{
    for (int e = t; e < ATT_BLOCK * ATT_STEP; e += ATT_GROUP * ATT_GROUP) {
        const int r = transposed ? e % ATT_BLOCK : e / ATT_STEP;
        const int l = transposed ? e / ATT_BLOCK : e % ATT_STEP;
        const int i = transposed ? l0 + l : r0 + r, j = transposed ? r0 + r : l0 + l;
        float x = 0.0f;
        if (i < Tq && j < att_visible(i, Tv, causal))
            x = w[(size_t)i * Tv + j] *
                att_keep(rate, seed_lo, seed_hi, step, sample, h, i, j, Tq, Tv);
        to[l * ATT_ROW + r] = x;
    }
}

/* acc[r][q] += sum over the step of a[l][ty + r * ATT_GROUP] b[l][tx + q * ATT_GROUP]. */
inline void att_block_step(__local const float *a, __local const float *b, int tx, int ty,
                           float acc[ATT_PER][ATT_PER])
{
    for (int l = 0; l < ATT_STEP; l++) {
        float x[ATT_PER], y[ATT_PER];
        for (int r = 0; r < ATT_PER; r++)
            x[r] = a[l * ATT_ROW + ty + r * ATT_GROUP];
        for (int q = 0; q < ATT_PER; q++)
            y[q] = b[l * ATT_ROW + tx + q * ATT_GROUP];
        for (int r = 0; r < ATT_PER; r++)
            for (int q = 0; q < ATT_PER; q++)
                acc[r][q] += x[r] * y[q];
    }
}

inline void att_block_zero(float acc[ATT_PER][ATT_PER])
{
    for (int r = 0; r < ATT_PER; r++)
        for (int q = 0; q < ATT_PER; q++)
            acc[r][q] = 0.0f;
}

/* The weighing products' store: rows r0 .. of `rows` and columns c0 .. of
 * `cols` of o (rows ld floats apart), this item's ATT_PER x ATT_PER at a
 * stride of ATT_GROUP. */
inline void att_block_store(__global float *o, size_t ld, int r0, int rows, int c0, int cols,
                            int tx, int ty, float acc[ATT_PER][ATT_PER])
{
    for (int r = 0; r < ATT_PER; r++) {
        const int i = r0 + ty + r * ATT_GROUP;
        for (int q = 0; q < ATT_PER; q++) {
            const int x = c0 + tx + q * ATT_GROUP;
            if (i < rows && x < cols)
                o[(size_t)i * ld + x] = acc[r][q];
        }
    }
}

/* out[b, h, i, j] = scale keep(i, j) a_i . c_j for the j that i sees (0 for
 * the others), a (B, Tq, H, X) and c (B, Tv, H, X): the scores from q and
 * k (keep 1), and dp from dc and v. Groups of ATT_GROUP x ATT_GROUP over a
 * range (ceil(Tv / ATT_BLOCK) * ATT_GROUP, ceil(Tq / ATT_BLOCK) * ATT_GROUP,
 * B * H). A block wholly right of the mask's diagonal is left as it was:
 * the row passes read only what a row sees. */
__kernel void kiln_attention_scores_gpu(__global const float *a, __global const float *c,
                                        __global float *out, int B, int H, int Tq, int Tv, int X,
                                        float scale, int causal, int first_sample, uint seed_lo,
                                        uint seed_hi, uint step, float rate)
{
    __local float as[ATT_STEP * ATT_ROW], cs[ATT_STEP * ATT_ROW];
    const int tx = get_local_id(0), ty = get_local_id(1), t = ty * ATT_GROUP + tx;
    const int j0 = get_group_id(0) * ATT_BLOCK, i0 = get_group_id(1) * ATT_BLOCK;
    const int bh = get_group_id(2);
    /* The whole group returns or none of it: its barriers stay uniform. */
    if (bh >= B * H || i0 >= Tq || j0 >= att_visible(min(i0 + ATT_BLOCK, Tq) - 1, Tv, causal))
        return;
    const int b = bh / H, h = bh % H;
    const size_t ld = (size_t)H * X;
    __global const float *a0 = a + (size_t)b * Tq * ld + (size_t)h * X;
    __global const float *c0 = c + (size_t)b * Tv * ld + (size_t)h * X;
    float acc[ATT_PER][ATT_PER];
    att_block_zero(acc);
    for (int l0 = 0; l0 < X; l0 += ATT_STEP) {
        att_stage_across(as, a0, ld, Tq, X, i0, l0, t);
        att_stage_across(cs, c0, ld, Tv, X, j0, l0, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        att_block_step(as, cs, tx, ty, acc);
        /* The next step overwrites what slower items may still read. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < ATT_PER; r++) {
        const int i = i0 + ty + r * ATT_GROUP;
        const int n = att_visible(i, Tv, causal);
        for (int q = 0; q < ATT_PER; q++) {
            const int j = j0 + tx + q * ATT_GROUP;
            if (i < Tq && j < Tv)
                out[((size_t)bh * Tq + i) * Tv + j] =
                    j < n ? scale * acc[r][q] *
                            att_keep(rate, seed_lo, seed_hi, step, first_sample + b, h, i, j,
                                     Tq, Tv)
                          : 0.0f;
        }
    }
}

/* The row passes give a row `width` lanes of a KILN_ROW_LANES group: the
 * smallest power of two that covers Tv, at most KILN_ROW_LANES (the host
 * passes it), so that a group takes KILN_ROW_LANES / width short rows
 * instead of idling most of its lanes on one. */

/* kiln_row_merge over each row's `width` lanes: the same fixed tree, which
 * depends on Tv alone (kiln_row_merge's own when width is
 * KILN_ROW_LANES). The whole group must call it. */
inline float att_row_merge(__local float *merge, float v, int largest, int width)
{
    const int lane = get_local_id(0), own = lane & (width - 1);
    merge[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = width / 2; step > 0; step /= 2) {
        if (own < step)
            merge[lane] = largest ? fmax(merge[lane], merge[lane + step])
                                  : merge[lane] + merge[lane + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = merge[lane - own];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

/* The softmax over each of the `rows` rows of p (B * H * Tq), in place:
 * the scores kiln_attention_scores_gpu wrote become probabilities, 0 where
 * not seen or padding (mask, when masked), and 0 across a row that sees
 * nothing. Lane l of a row takes values l, l + width, ... Every lane of
 * a row runs the same number of turns (j0) and tests its own j: with
 * loops from j = l, PoCL 5 computed the trip count of a lane past the
 * row's end as a huge one and stored far past it. A lane past the last
 * row still takes part in the merges (the group's barriers). */
__kernel void kiln_attention_softmax_gpu(__global float *p, int rows, int H, int Tq, int Tv,
                                         int causal, int width, __global const float *mask,
                                         int masked)
{
    __local float merge[KILN_ROW_LANES];
    const int lane = get_local_id(0) & (width - 1);
    const int row = get_group_id(0) * (KILN_ROW_LANES / width) + get_local_id(0) / width;
    const int n = row < rows ? att_visible(row % Tq, Tv, causal) : 0;
    const int end = row < rows ? Tv : 0;
    const int b = min(row, rows - 1) / (H * Tq);
    __global float *pr = p + (size_t)min(row, rows - 1) * Tv;
    float most = -INFINITY;
    for (int j0 = 0; j0 < n; j0 += width)
        if (j0 + lane < n && !att_padded(mask, masked, b, Tv, j0 + lane))
            most = fmax(most, pr[j0 + lane]);
    most = att_row_merge(merge, most, 1, width);
    float total = 0.0f;
    for (int j0 = 0; j0 < n; j0 += width)
        if (j0 + lane < n) {
            const int j = j0 + lane;
            const float e = att_padded(mask, masked, b, Tv, j) ? 0.0f : exp(pr[j] - most);
            pr[j] = e;
            total += e;
        }
    total = att_row_merge(merge, total, 0, width);
    /* Every position padding: most stayed -inf and total 0. */
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int j0 = 0; j0 < end; j0 += width) {
        const int j = j0 + lane;
        if (j < n)
            pr[j] *= inv;
        else if (j < end)
            pr[j] = 0.0f;
    }
}

/* The softmax's backward over each row, with the scale: ds holds
 * dp = keep dc_i . v_j (kiln_attention_scores_gpu) and becomes
 * scale p (dp - sum_l p_l dp_l), 0 where not seen. As
 * kiln_attention_softmax_gpu. */
__kernel void kiln_attention_softmax_backward_gpu(__global const float *p, __global float *ds,
                                                  int rows, int Tq, int Tv, float scale, int causal,
                                                  int width)
{
    __local float merge[KILN_ROW_LANES];
    const int lane = get_local_id(0) & (width - 1);
    const int row = get_group_id(0) * (KILN_ROW_LANES / width) + get_local_id(0) / width;
    const int n = row < rows ? att_visible(row % Tq, Tv, causal) : 0;
    const int end = row < rows ? Tv : 0;
    __global const float *pr = p + (size_t)min(row, rows - 1) * Tv;
    __global float *dr = ds + (size_t)min(row, rows - 1) * Tv;
    float weighted = 0.0f;
    for (int j0 = 0; j0 < n; j0 += width)
        if (j0 + lane < n)
            weighted += pr[j0 + lane] * dr[j0 + lane];
    weighted = att_row_merge(merge, weighted, 0, width);
    for (int j0 = 0; j0 < end; j0 += width) {
        const int j = j0 + lane;
        if (j < n)
            dr[j] = scale * pr[j] * (dr[j] - weighted);
        else if (j < end)
            dr[j] = 0.0f;
    }
}

/* out[b, i, h, x] = sum over visible j of w[b, h, i, j] (times its dropout
 * factor) src[b, j, h, x], X values per head: the context c from p and v
 * (forward), and dq from ds and k (backward, rate 0). Groups as
 * kiln_attention_scores_gpu', over (ceil(X / ATT_BLOCK) * ATT_GROUP,
 * ceil(Tq / ATT_BLOCK) * ATT_GROUP, B * H). */
__kernel void kiln_attention_weigh_gpu(__global const float *w, __global const float *src,
                                       __global float *out, int B, int H, int Tq, int Tv, int X,
                                       int causal, int first_sample, uint seed_lo, uint seed_hi,
                                       uint step, float rate)
{
    __local float ws[ATT_STEP * ATT_ROW], ss[ATT_STEP * ATT_ROW];
    const int tx = get_local_id(0), ty = get_local_id(1), t = ty * ATT_GROUP + tx;
    const int x0 = get_group_id(0) * ATT_BLOCK, i0 = get_group_id(1) * ATT_BLOCK;
    const int bh = get_group_id(2);
    if (bh >= B * H || i0 >= Tq || x0 >= X)
        return;
    const int b = bh / H, h = bh % H;
    const size_t ld = (size_t)H * X;
    __global const float *w0 = w + (size_t)bh * Tq * Tv;
    __global const float *s0 = src + (size_t)b * Tv * ld + (size_t)h * X;
    /* Past what the block's last row sees, every weight is masked. */
    const int seen = att_visible(min(i0 + ATT_BLOCK, Tq) - 1, Tv, causal);
    float acc[ATT_PER][ATT_PER];
    att_block_zero(acc);
    for (int l0 = 0; l0 < seen; l0 += ATT_STEP) {
        att_stage_weights(ws, w0, Tq, Tv, causal, 0, i0, l0, t, rate, seed_lo, seed_hi, step,
                          first_sample + b, h);
        att_stage_down(ss, s0, ld, Tv, X, l0, x0, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        att_block_step(ws, ss, tx, ty, acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    att_block_store(out + (size_t)b * Tq * ld + (size_t)h * X, ld, i0, Tq, x0, X, tx, ty, acc);
}

/* The transposed product: out[b, j, h, x] = sum over the i that see j of
 * w[b, h, i, j] (times its dropout factor) src[b, i, h, x]: dk from ds and
 * q (rate 0), dv from p and dc. Over (ceil(X / ATT_BLOCK) * ATT_GROUP,
 * ceil(Tv / ATT_BLOCK) * ATT_GROUP, B * H). */
__kernel void kiln_attention_weigh_t_gpu(__global const float *w, __global const float *src,
                                         __global float *out, int B, int H, int Tq, int Tv, int X,
                                         int causal, int first_sample, uint seed_lo, uint seed_hi,
                                         uint step, float rate)
{
    __local float ws[ATT_STEP * ATT_ROW], ss[ATT_STEP * ATT_ROW];
    const int tx = get_local_id(0), ty = get_local_id(1), t = ty * ATT_GROUP + tx;
    const int x0 = get_group_id(0) * ATT_BLOCK, j0 = get_group_id(1) * ATT_BLOCK;
    const int bh = get_group_id(2);
    if (bh >= B * H || j0 >= Tv || x0 >= X)
        return;
    const int b = bh / H, h = bh % H;
    const size_t ld = (size_t)H * X;
    __global const float *w0 = w + (size_t)bh * Tq * Tv;
    __global const float *s0 = src + (size_t)b * Tq * ld + (size_t)h * X;
    float acc[ATT_PER][ATT_PER];
    att_block_zero(acc);
    /* Under the mask no query position before j0 sees the block. */
    for (int l0 = causal ? min(j0, Tq) : 0; l0 < Tq; l0 += ATT_STEP) {
        att_stage_weights(ws, w0, Tq, Tv, causal, 1, j0, l0, t, rate, seed_lo, seed_hi, step,
                          first_sample + b, h);
        att_stage_down(ss, s0, ld, Tq, X, l0, x0, t);
        barrier(CLK_LOCAL_MEM_FENCE);
        att_block_step(ws, ss, tx, ty, acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    att_block_store(out + (size_t)b * Tv * ld + (size_t)h * X, ld, j0, Tv, x0, X, tx, ty, acc);
}

/* The CPU variant (_cpu; kernel_variant.c chooses): the same four
 * products as register tiles, as gemm.cl's CPU kernels, with no local
 * memory (a CPU driver emulates it in ordinary memory).
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

/* The probabilities (kiln_attention_scores_gpu, then
 * kiln_attention_softmax_gpu) as tiles: a work-item per 4 query rows of one
 * (sample, head); range (ceil(Tq / 4), B * H). The scaled, masked scores
 * go to p first (-inf where not seen or padding); the softmax then runs
 * over each row in place (in cache), eight values at a time; a row that
 * sees nothing (its largest score -inf) is zeros. */
__kernel void kiln_attention_probs_cpu(__global const float *q, __global const float *k,
                                       __global float *p, int B, int H, int Tq, int Tv,
                                       int K, float scale, int causal,
                                       __global const float *mask, int masked)
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
                const int j = j0 + c;
                const float v = j < n && !att_padded(mask, masked, b, Tv, j) ? scale * s[r][c]
                                                                             : -INFINITY;
                p0[(size_t)r * Tv + j] = v;
                most[r] = fmax(most[r], v);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        __global float *pr = p0 + (size_t)r * Tv;
        const int n = most[r] == -INFINITY ? 0 : att_visible(i0 + r, Tv, causal);
        float8 total = (float8)(0.0f);
        for (int j = 0; j < n; j += 8) {
            const float8 e = exp(kiln_load8(pr + j, n - j) - most[r]);
            total += select((float8)(0.0f), e, att_lanes_below(n - j));
            kiln_store8(pr + j, e, n - j);
        }
        const float inv = n ? 1.0f / kiln_sum8(total) : 0.0f;
        for (int j = 0; j < n; j += 8)
            kiln_store8(pr + j, kiln_load8(pr + j, n - j) * inv, n - j);
        for (int j = n; j < Tv; j++)
            pr[j] = 0.0f;
    }
}

/* The scores' gradient (kiln_attention_scores_gpu, then
 * kiln_attention_softmax_backward_gpu) as tiles, over the same range as
 * kiln_attention_probs_cpu: dp = keep dc_i . v_j tile by tile into ds,
 * then ds = scale p (dp - sum p dp) over each row in place. */
__kernel void kiln_attention_backward_scores_cpu(__global const float *p,
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

/* kiln_attention_weigh_gpu as tiles: 4 query rows by 8 of the X values of one
 * head; range (ceil(X / 8) * H, ceil(Tq / 4) * B). Each row sums over the
 * value positions the tile's last row sees: the probabilities (and ds) are
 * exactly 0 past a row's own. */
__kernel void kiln_attention_weigh_cpu(__global const float *w, __global const float *src,
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

/* kiln_attention_weigh_t_gpu as tiles: 4 value positions by 8 of the X values
 * of one head; range (ceil(X / 8) * H, ceil(Tv / 4) * B). Under the mask
 * the sum starts at the tile's first position (w is 0 above the diagonal). */
__kernel void kiln_attention_weigh_t_cpu(__global const float *w, __global const float *src,
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
