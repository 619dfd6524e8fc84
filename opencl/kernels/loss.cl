/* Losses, one work-item per row (the categorical ones also a work-group
 * per row in their GPU variants, _gpu): a sample, or for the categorical losses a
 * position of a (positions..., classes) output, so `batch` counts rows.
 * Each writes the row's loss and whether it was classified correctly (a
 * fraction for binary outputs), and the gradient of the batch loss, scaled
 * by `scale` (1 / the global batch's counted rows). A sparse row whose
 * label is `ignore` (>= 0; -1: none) is padding: no loss, no gradient, not
 * counted.
 * The *_logits variants are fused with the output's activation: they read
 * the pre-activation z and its activation y, and write the gradient with
 * respect to z (softmax or sigmoid backward is then skipped).
 * `smoothing` is Keras's label_smoothing: the cross-entropies read the
 * target t as t (1 - smoothing) + smoothing / classes (a sparse label as
 * its one-hot), binary cross-entropy as t (1 - smoothing) + smoothing / 2;
 * accuracy reads the labels as given. 0 leaves every number as before. */

#define KILN_PROB_EPSILON 1e-7f

inline int kiln_argmax(__global const float *v, int n)
{
    int best = 0;
    for (int j = 1; j < n; j++)
        if (v[j] > v[best])
            best = j;
    return best;
}

inline float kiln_log_sum_exp(__global const float *z, int n)
{
    float m = z[0];
    for (int j = 1; j < n; j++)
        m = fmax(m, z[j]);
    float s = 0.0f;
    for (int j = 0; j < n; j++)
        s += exp(z[j] - m);
    return m + log(s);
}

__kernel void kiln_loss_sparse_ce_logits(__global const float *z, __global const float *y,
                                         __global const int *labels, __global float *grad,
                                         __global float *loss, __global float *correct,
                                         int batch, int cols, float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    __global const float *zr = z + (size_t)r * cols;
    __global const float *yr = y + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    const int t = labels[r];
    if (t == ignore) {
        loss[r] = correct[r] = 0.0f;
        for (int j = 0; j < cols; j++)
            gr[j] = 0.0f;
        return;
    }
    const float lse = kiln_log_sum_exp(zr, cols);
    const float keep = 1.0f - smoothing, spread = smoothing / cols;
    if (smoothing == 0.0f) {
        loss[r] = lse - zr[t];
    } else {
        float rest = 0.0f;
        for (int j = 0; j < cols; j++)
            rest += lse - zr[j];
        loss[r] = keep * (lse - zr[t]) + spread * rest;
    }
    correct[r] = kiln_argmax(zr, cols) == t ? 1.0f : 0.0f;
    for (int j = 0; j < cols; j++)
        gr[j] = (yr[j] - (j == t ? keep + spread : spread)) * scale;
}

/* The GPU variants for wide rows (a vocabulary): a work-group of
 * KILN_ROW_LANES items per row, each lane taking every KILN_ROW_LANES-th
 * class, sums and arg maxes merged in a fixed order (prelude.cl). The arg
 * max keeps the first of equal maxima, as kiln_argmax does. */
/* A wide row at the ignored class: no loss, not counted, no gradient. */
inline void row_ignored(__global float *gr, int cols, __global float *loss,
                        __global float *correct)
{
    const int lane = get_local_id(0);
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        gr[j] = 0.0f;
    if (lane == 0)
        *loss = *correct = 0.0f;
}

__kernel void kiln_loss_sparse_ce_logits_gpu(__global const float *z, __global const float *y,
                                             __global const int *labels, __global float *grad,
                                             __global float *loss, __global float *correct,
                                             int batch, int cols, float scale, int ignore,
                                  float smoothing)
{
    __local float merge[KILN_ROW_LANES];
    __local int where[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= batch)
        return;
    __global const float *zr = z + (size_t)r * cols;
    __global const float *yr = y + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    const int t = labels[r];
    if (t == ignore) {
        row_ignored(gr, cols, loss + r, correct + r);
        return;
    }
    float top;
    const int arg = kiln_row_argmax(merge, where, zr, cols, &top);
    float s = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        s += exp(zr[j] - top);
    s = kiln_row_merge(merge, s, 0);
    const float keep = 1.0f - smoothing, spread = smoothing / cols;
    float rest = 0.0f;
    if (smoothing != 0.0f) {
        const float lse = top + log(s);
        for (int j = lane; j < cols; j += KILN_ROW_LANES)
            rest += lse - zr[j];
        rest = kiln_row_merge(merge, rest, 0);
    }
    if (lane == 0) {
        loss[r] = smoothing == 0.0f ? top + log(s) - zr[t]
                                    : keep * (top + log(s) - zr[t]) + spread * rest;
        correct[r] = arg == t ? 1.0f : 0.0f;
    }
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        gr[j] = (yr[j] - (j == t ? keep + spread : spread)) * scale;
}

__kernel void kiln_loss_ce_logits(__global const float *z, __global const float *y,
                                  __global const float *target, __global float *grad,
                                  __global float *loss, __global float *correct, int batch,
                                  int cols, float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    __global const float *zr = z + (size_t)r * cols;
    __global const float *yr = y + (size_t)r * cols;
    __global const float *tr = target + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    const float lse = kiln_log_sum_exp(zr, cols);
    const float keep = 1.0f - smoothing, spread = smoothing / cols;
    float l = 0.0f, tsum = 0.0f;
    for (int j = 0; j < cols; j++) {
        const float tj = tr[j] * keep + spread;
        l -= tj * (zr[j] - lse);
        tsum += tj;
    }
    loss[r] = l;
    correct[r] = kiln_argmax(zr, cols) == kiln_argmax(tr, cols) ? 1.0f : 0.0f;
    for (int j = 0; j < cols; j++)
        gr[j] = (yr[j] * tsum - (tr[j] * keep + spread)) * scale;
    (void)ignore;
}

__kernel void kiln_loss_ce_logits_gpu(__global const float *z, __global const float *y,
                                      __global const float *target, __global float *grad,
                                      __global float *loss, __global float *correct, int batch,
                                      int cols, float scale, int ignore,
                                  float smoothing)
{
    __local float merge[KILN_ROW_LANES];
    __local int where[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= batch)
        return;
    __global const float *zr = z + (size_t)r * cols;
    __global const float *yr = y + (size_t)r * cols;
    __global const float *tr = target + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    float top, unused;
    const int arg = kiln_row_argmax(merge, where, zr, cols, &top);
    const int want = kiln_row_argmax(merge, where, tr, cols, &unused);
    float s = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        s += exp(zr[j] - top);
    const float lse = top + log(kiln_row_merge(merge, s, 0));
    const float keep = 1.0f - smoothing, spread = smoothing / cols;
    float l = 0.0f, tsum = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES) {
        const float tj = tr[j] * keep + spread;
        l -= tj * (zr[j] - lse);
        tsum += tj;
    }
    l = kiln_row_merge(merge, l, 0);
    tsum = kiln_row_merge(merge, tsum, 0);   /* soft targets need not sum to 1 */
    if (lane == 0) {
        loss[r] = l;
        correct[r] = arg == want ? 1.0f : 0.0f;
    }
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        gr[j] = (yr[j] * tsum - (tr[j] * keep + spread)) * scale;
    (void)ignore;
}

/* On probabilities (an output without softmax), clipped as Keras clips. */
__kernel void kiln_loss_sparse_ce_probs(__global const float *z, __global const float *y,
                                        __global const int *labels, __global float *grad,
                                        __global float *loss, __global float *correct,
                                        int batch, int cols, float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    const int t = labels[r];
    for (int j = 0; j < cols; j++)
        gr[j] = 0.0f;
    if (t == ignore) {
        loss[r] = correct[r] = 0.0f;
        return;
    }
    correct[r] = kiln_argmax(yr, cols) == t ? 1.0f : 0.0f;
    if (smoothing != 0.0f) {   /* every class has a target, and a gradient */
        const float keep = 1.0f - smoothing, spread = smoothing / cols;
        float l = 0.0f;
        for (int j = 0; j < cols; j++) {
            const float pj = clamp(yr[j], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
            const float tj = j == t ? keep + spread : spread;
            l -= tj * log(pj);
            gr[j] = pj == yr[j] ? -tj / pj * scale : 0.0f;
        }
        loss[r] = l;
        return;
    }
    const float p = clamp(yr[t], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
    loss[r] = -log(p);
    if (p == yr[t])
        gr[t] = -scale / p;
    (void)z;
}

__kernel void kiln_loss_sparse_ce_probs_gpu(__global const float *z, __global const float *y,
                                            __global const int *labels, __global float *grad,
                                            __global float *loss, __global float *correct,
                                            int batch, int cols, float scale, int ignore,
                                  float smoothing)
{
    __local float merge[KILN_ROW_LANES];
    __local int where[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= batch)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    const int t = labels[r];
    if (t == ignore) {
        row_ignored(gr, cols, loss + r, correct + r);
        return;
    }
    float top;
    const int arg = kiln_row_argmax(merge, where, yr, cols, &top);
    if (smoothing != 0.0f) {   /* every class has a target, and a gradient */
        const float keep = 1.0f - smoothing, spread = smoothing / cols;
        float l = 0.0f;
        for (int j = lane; j < cols; j += KILN_ROW_LANES) {
            const float pj = clamp(yr[j], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
            const float tj = j == t ? keep + spread : spread;
            l -= tj * log(pj);
            gr[j] = pj == yr[j] ? -tj / pj * scale : 0.0f;
        }
        l = kiln_row_merge(merge, l, 0);
        if (lane == 0) {
            loss[r] = l;
            correct[r] = arg == t ? 1.0f : 0.0f;
        }
        return;
    }
    const float p = clamp(yr[t], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
    if (lane == 0) {
        loss[r] = -log(p);
        correct[r] = arg == t ? 1.0f : 0.0f;
    }
    /* A clipped probability passes no gradient. */
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        gr[j] = j == t && p == yr[t] ? -scale / p : 0.0f;
    (void)z;
}

__kernel void kiln_loss_ce_probs(__global const float *z, __global const float *y,
                                 __global const float *target, __global float *grad,
                                 __global float *loss, __global float *correct, int batch,
                                 int cols, float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global const float *tr = target + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    float l = 0.0f;
    for (int j = 0; j < cols; j++) {
        const float p = clamp(yr[j], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
        const float tj = tr[j] * (1.0f - smoothing) + smoothing / cols;
        l -= tj * log(p);
        gr[j] = p == yr[j] ? -tj / p * scale : 0.0f;
    }
    loss[r] = l;
    correct[r] = kiln_argmax(yr, cols) == kiln_argmax(tr, cols) ? 1.0f : 0.0f;
    (void)z;
    (void)ignore;
}

__kernel void kiln_loss_ce_probs_gpu(__global const float *z, __global const float *y,
                                     __global const float *target, __global float *grad,
                                     __global float *loss, __global float *correct, int batch,
                                     int cols, float scale, int ignore,
                                  float smoothing)
{
    __local float merge[KILN_ROW_LANES];
    __local int where[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= batch)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global const float *tr = target + (size_t)r * cols;
    __global float *gr = grad + (size_t)r * cols;
    float l = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES) {
        const float p = clamp(yr[j], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
        const float tj = tr[j] * (1.0f - smoothing) + smoothing / cols;
        l -= tj * log(p);
        gr[j] = p == yr[j] ? -tj / p * scale : 0.0f;
    }
    l = kiln_row_merge(merge, l, 0);
    float top, unused;
    const int arg = kiln_row_argmax(merge, where, yr, cols, &top);
    const int want = kiln_row_argmax(merge, where, tr, cols, &unused);
    if (lane == 0) {
        loss[r] = l;
        correct[r] = arg == want ? 1.0f : 0.0f;
    }
    (void)z;
    (void)ignore;
}

/* Binary cross-entropy averaged over the outputs; fused with sigmoid. */
__kernel void kiln_loss_bce_logits(__global const float *z, __global const float *y,
                                   __global const float *target, __global float *grad,
                                   __global float *loss, __global float *correct, int batch,
                                   int cols, float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    float l = 0.0f, right = 0.0f;
    for (int j = 0; j < cols; j++) {
        const size_t i = (size_t)r * cols + j;
        const float zi = z[i], label = target[i];
        const float t = label * (1.0f - smoothing) + 0.5f * smoothing;
        l += fmax(zi, 0.0f) - zi * t + log1p(exp(-fabs(zi)));
        right += (y[i] > 0.5f) == (label > 0.5f) ? 1.0f : 0.0f;
        grad[i] = (y[i] - t) * scale / cols;
    }
    loss[r] = l / cols;
    correct[r] = right / cols;
    (void)ignore;
}

__kernel void kiln_loss_bce_probs(__global const float *z, __global const float *y,
                                  __global const float *target, __global float *grad,
                                  __global float *loss, __global float *correct, int batch,
                                  int cols, float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    float l = 0.0f, right = 0.0f;
    for (int j = 0; j < cols; j++) {
        const size_t i = (size_t)r * cols + j;
        const float t = target[i] * (1.0f - smoothing) + 0.5f * smoothing;
        const float p = clamp(y[i], KILN_PROB_EPSILON, 1.0f - KILN_PROB_EPSILON);
        l -= t * log(p) + (1.0f - t) * log(1.0f - p);
        right += (y[i] > 0.5f) == (target[i] > 0.5f) ? 1.0f : 0.0f;
        grad[i] = p == y[i] ? (-t / p + (1.0f - t) / (1.0f - p)) * scale / cols : 0.0f;
    }
    loss[r] = l / cols;
    correct[r] = right / cols;
    (void)z;
    (void)ignore;
}

__kernel void kiln_loss_mse(__global const float *z, __global const float *y,
                            __global const float *target, __global float *grad,
                            __global float *loss, __global float *correct, int batch, int cols,
                            float scale, int ignore,
                                  float smoothing)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    float l = 0.0f;
    for (int j = 0; j < cols; j++) {
        const size_t i = (size_t)r * cols + j;
        const float d = y[i] - target[i];
        l += d * d;
        grad[i] = 2.0f * d * scale / cols;
    }
    loss[r] = l / cols;
    correct[r] = 0.0f;
    (void)z;
    (void)ignore;
    (void)smoothing;
}

/* sums[0] = sum of loss, sums[1] = sum of correct, in a fixed order,
 * sums[2] = the samples they cover and sums[6] the rows they count: every
 * row, less the sparse labels equal to `ignore` (>= 0; -1: none, and the
 * labels, maybe floats, are not read). One work-group of up to 64 items. */
__kernel void kiln_loss_sum(__global const float *loss, __global const float *correct,
                            __global const int *labels, int rows, int samples, int ignore,
                            __global float *sums, int at)
{
    sums += at;   /* one output's slots of a model of several */
    __local float pl[64], pc[64], pn[64];
    const int lid = get_local_id(0);
    const int group = get_local_size(0);
    float sl = 0.0f, sc = 0.0f, sn = 0.0f;
    for (int i = lid; i < rows; i += group) {
        sl += loss[i];
        sc += correct[i];
        sn += ignore < 0 || labels[i] != ignore ? 1.0f : 0.0f;
    }
    pl[lid] = sl;
    pc[lid] = sc;
    pn[lid] = sn;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = group / 2; step > 0; step /= 2) {
        if (lid < step) {
            pl[lid] += pl[lid + step];
            pc[lid] += pc[lid + step];
            pn[lid] += pn[lid + step];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        sums[0] = pl[0];
        sums[1] = pc[0];
        sums[2] = (float)samples;
        sums[6] = pn[0];
    }
}

/* Several outputs: sums[0] takes output `at`'s loss sum times `factor` (its
 * weight over its positions per sample), added to the earlier outputs'
 * unless `first`, so a non-finite output loss makes the total non-finite
 * (the optimizer's guard reads it); the total is a mean over samples. */
__kernel void kiln_loss_head_total(__global float *sums, int at, float factor, int first)
{
    if (get_global_id(0) != 0)
        return;
    const float part = factor * sums[at];
    sums[0] = first ? part : sums[0] + part;
    sums[1] = 0.0f;
    sums[2] = sums[at + 2];
    sums[6] = sums[at + 2];
}
