/* Metrics beyond accuracy, one work-item per row (a sample, or a position
 * under the categorical losses; the GPU variants, _gpu, a work-group per
 * row of at least KILN_ROW_LANES classes), on the outputs y (after the
 * output's activation, as Keras's metrics see them). A sparse row
 * labelled `ignore` (>= 0; -1: none) scores 0 and is not counted. Each
 * row gets three columns of `metric`: whether its class is among the k highest
 * outputs, its mean absolute error and its binary accuracy at `threshold`;
 * kiln_metrics_sum adds them up into sums[3..5]. */

/* Ties at the k-th place are counted in (tf.math.in_top_k): the class is in
 * the top k when fewer than k outputs are strictly above it. */
inline float kiln_in_top_k(__global const float *yr, int cols, int t, int k)
{
    const float v = yr[t];
    if (!isfinite(v))
        return 0.0f;
    int above = 0;
    for (int j = 0; j < cols; j++)
        above += yr[j] > v;
    return above < k ? 1.0f : 0.0f;
}

/* The same over a work-group per row, the counts merged in a fixed order
 * (exact in float up to 2^24 classes). The whole group must call it. */
inline float kiln_row_in_top_k(__local float *merge, __global const float *yr, int cols, int t,
                               int k)
{
    const float v = yr[t];
    if (!isfinite(v))
        return 0.0f;
    float above = 0.0f;
    for (int j = get_local_id(0); j < cols; j += KILN_ROW_LANES)
        above += yr[j] > v ? 1.0f : 0.0f;
    return kiln_row_merge(merge, above, 0) < k ? 1.0f : 0.0f;
}

__kernel void kiln_metrics_sparse(__global const float *y, __global const int *labels,
                                  __global float *metric, int batch, int cols, int k,
                                  float threshold, int ignore)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    metric[(size_t)r * 3] = labels[r] == ignore
                                ? 0.0f : kiln_in_top_k(y + (size_t)r * cols, cols, labels[r], k);
    metric[(size_t)r * 3 + 1] = 0.0f;
    metric[(size_t)r * 3 + 2] = 0.0f;
    (void)threshold;
}

__kernel void kiln_metrics_sparse_gpu(__global const float *y, __global const int *labels,
                                      __global float *metric, int batch, int cols, int k,
                                      float threshold, int ignore)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0);
    if (r >= batch)
        return;
    const int t = labels[r];
    __global const float *yr = y + (size_t)r * cols;
    const float in = t == ignore ? 0.0f : kiln_row_in_top_k(merge, yr, cols, t, k);
    if (get_local_id(0) == 0) {
        metric[(size_t)r * 3] = in;
        metric[(size_t)r * 3 + 1] = 0.0f;
        metric[(size_t)r * 3 + 2] = 0.0f;
    }
    (void)threshold;
}

__kernel void kiln_metrics_dense(__global const float *y, __global const float *target,
                                 __global float *metric, int batch, int cols, int k,
                                 float threshold, int ignore)
{
    const int r = get_global_id(0);
    if (r >= batch)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global const float *tr = target + (size_t)r * cols;
    int t = 0;
    float err = 0.0f, right = 0.0f;
    for (int j = 0; j < cols; j++) {
        if (tr[j] > tr[t])
            t = j;
        err += fabs(yr[j] - tr[j]);
        right += tr[j] == (yr[j] > threshold ? 1.0f : 0.0f) ? 1.0f : 0.0f;
    }
    metric[(size_t)r * 3] = k > 0 ? kiln_in_top_k(yr, cols, t, k) : 0.0f;
    metric[(size_t)r * 3 + 1] = err / cols;
    metric[(size_t)r * 3 + 2] = right / cols;
    (void)ignore;
}

__kernel void kiln_metrics_dense_gpu(__global const float *y, __global const float *target,
                                     __global float *metric, int batch, int cols, int k,
                                     float threshold, int ignore)
{
    __local float merge[KILN_ROW_LANES];
    __local int where[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= batch)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global const float *tr = target + (size_t)r * cols;
    float err = 0.0f, right = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES) {
        err += fabs(yr[j] - tr[j]);
        right += tr[j] == (yr[j] > threshold ? 1.0f : 0.0f) ? 1.0f : 0.0f;
    }
    err = kiln_row_merge(merge, err, 0);
    right = kiln_row_merge(merge, right, 0);
    float in = 0.0f;
    if (k > 0) {
        float top;
        const int t = kiln_row_argmax(merge, where, tr, cols, &top);
        in = kiln_row_in_top_k(merge, yr, cols, t, k);
    }
    if (lane == 0) {
        metric[(size_t)r * 3] = in;
        metric[(size_t)r * 3 + 1] = err / cols;
        metric[(size_t)r * 3 + 2] = right / cols;
    }
    (void)ignore;
}

/* sums[3 + c] = the sum of column c, in a fixed order. One work-group of up
 * to 64 items. */
__kernel void kiln_metrics_sum(__global const float *metric, int n, __global float *sums)
{
    __local float part[3][64];
    const int lid = get_local_id(0);
    const int group = get_local_size(0);
    float s[3] = {0.0f, 0.0f, 0.0f};
    for (int i = lid; i < n; i += group)
        for (int c = 0; c < 3; c++)
            s[c] += metric[(size_t)i * 3 + c];
    for (int c = 0; c < 3; c++)
        part[c][lid] = s[c];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = group / 2; step > 0; step /= 2) {
        if (lid < step)
            for (int c = 0; c < 3; c++)
                part[c][lid] += part[c][lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        for (int c = 0; c < 3; c++)
            sums[3 + c] = part[c][0];
}
