/* Batch normalisation over the last (channel) axis of a rows x C matrix
 * (rows = samples x spatial positions). Per-channel sums are taken per
 * chunk of rows, then over the chunks in a fixed order, so results do not
 * depend on the device; channels go in blocks of eight as vectors
 * (kiln_load8, prelude.cl).
 *
 * stats holds 2C floats: the batch mean, then 1 / sqrt(variance + eps). */

/* partial[chunk, c] = sum over the chunk's rows of x, or of (x - mean)^2
 * when `centred` (the mean being sums[c] / count); over a (C blocks,
 * chunks) range. */
__kernel void kiln_batch_norm_partial_cpu(__global const float *x, int rows, int C, int chunk_rows,
                                          int chunks, __global const float *sums, float count,
                                          int centred, __global float *partial)
{
    const int c0 = get_global_id(0) * 8, chunk = get_global_id(1);
    if (c0 >= C || chunk >= chunks)
        return;
    const int n = C - c0;
    const float8 mean = centred ? kiln_load8(sums + c0, n) / count : (float8)(0.0f);
    const int last = min((chunk + 1) * chunk_rows, rows);
    float8 s = (float8)(0.0f);
    for (int r = chunk * chunk_rows; r < last; r++) {
        const float8 v = kiln_load8(x + (size_t)r * C + c0, n) - mean;
        s += centred ? v * v : v;
    }
    kiln_store8(partial + (size_t)chunk * C + c0, s, n);
}

/* out[offset + j] = sum over chunks of partial[chunk, j], j < width,
 * chunk by chunk. */
__kernel void kiln_batch_norm_reduce(__global const float *partial, int width, int chunks,
                                     __global float *out, int offset)
{
    const int j = get_global_id(0);
    if (j >= width)
        return;
    float s = 0.0f;
    for (int chunk = 0; chunk < chunks; chunk++)
        s += partial[(size_t)chunk * width + j];
    out[offset + j] = s;
}

/* From the sums of x (sums[0..C)) and of squared deviations (sums[C..2C))
 * over `count` rows: the batch statistics, and the moving averages updated
 * Keras's way, moving = moving * momentum + batch * (1 - momentum), with
 * the unbiased variance (one row: the variance is 0). */
__kernel void kiln_batch_norm_finish(__global const float *sums, int C, float count, float epsilon,
                                     float momentum, __global float *stats, __global float *params,
                                     int mean_offset, int variance_offset)
{
    const int c = get_global_id(0);
    if (c >= C)
        return;
    const float mean = sums[c] / count, variance = sums[C + c] / count;
    stats[c] = mean;
    stats[C + c] = rsqrt(variance + epsilon);
    const float unbiased = count > 1.0f ? sums[C + c] / (count - 1.0f) : 0.0f;
    params[mean_offset + c] = params[mean_offset + c] * momentum + mean * (1.0f - momentum);
    params[variance_offset + c] =
        params[variance_offset + c] * momentum + unbiased * (1.0f - momentum);
}

/* y = act(gamma (x - mean) inv_std + beta) over a (C blocks, rows) range
 * (act: the layer's fused activation, a kiln_activation). In training the
 * batch's statistics (stats), else the moving ones. */
__kernel void kiln_batch_norm_normalize_cpu(__global const float *x, __global float *y, int rows,
                                            int C, __global const float *stats, int training,
                                            __global const float *params, int gamma_offset,
                                            int beta_offset, int mean_offset, int variance_offset,
                                            float epsilon, int act)
{
    const int c0 = get_global_id(0) * 8, r = get_global_id(1);
    if (c0 >= C || r >= rows)
        return;
    const int n = C - c0;
    float8 mean, inv_std;
    if (training) {
        mean = kiln_load8(stats + c0, n);
        inv_std = kiln_load8(stats + C + c0, n);
    } else {
        mean = kiln_load8(params + mean_offset + c0, n);
        inv_std = rsqrt(kiln_load8(params + variance_offset + c0, n) + epsilon);
    }
    const float8 scale = kiln_load8(params + gamma_offset + c0, n) * inv_std;
    const float8 v = kiln_load8(x + (size_t)r * C + c0, n);
    kiln_store8(y + (size_t)r * C + c0,
                kiln_activate8((v - mean) * scale + kiln_load8(params + beta_offset + c0, n), act),
                n);
}

/* Backward sums per chunk: partial[chunk, 0..C) = sum dy, partial[chunk,
 * C..2C) = sum dy * xhat, over a (C blocks, chunks) range. */
__kernel void kiln_batch_norm_backward_partial_cpu(__global const float *x,
                                                   __global const float *dy, int rows, int C,
                                                   int chunk_rows, int chunks,
                                                   __global const float *stats,
                                                   __global float *partial)
{
    const int c0 = get_global_id(0) * 8, chunk = get_global_id(1);
    if (c0 >= C || chunk >= chunks)
        return;
    const int n = C - c0;
    const float8 mean = kiln_load8(stats + c0, n), inv_std = kiln_load8(stats + C + c0, n);
    const int last = min((chunk + 1) * chunk_rows, rows);
    float8 sum_dy = (float8)(0.0f), sum_dy_xhat = (float8)(0.0f);
    for (int r = chunk * chunk_rows; r < last; r++) {
        const float8 g = kiln_load8(dy + (size_t)r * C + c0, n);
        sum_dy += g;
        sum_dy_xhat += g * (kiln_load8(x + (size_t)r * C + c0, n) - mean) * inv_std;
    }
    kiln_store8(partial + (size_t)chunk * 2 * C + c0, sum_dy, n);
    kiln_store8(partial + (size_t)chunk * 2 * C + C + c0, sum_dy_xhat, n);
}

/* gamma's and beta's gradients from this replica's sums (the reducer adds
 * the replicas'). */
__kernel void kiln_batch_norm_param_grads(__global const float *sums, int C, __global float *grads,
                                          int gamma_offset, int beta_offset)
{
    const int c = get_global_id(0);
    if (c >= C)
        return;
    grads[beta_offset + c] = sums[c];
    grads[gamma_offset + c] = sums[C + c];
}

/* dx = gamma inv_std / N (N dy - sum dy - xhat sum(dy xhat)), N and the
 * sums over every row that shared the statistics; over (C blocks, rows). */
__kernel void kiln_batch_norm_input_grad_cpu(__global const float *x, __global const float *dy,
                                             __global float *dx, int rows, int C,
                                             __global const float *stats,
                                             __global const float *sums, float count,
                                             __global const float *params, int gamma_offset,
                                             int accumulate)
{
    const int c0 = get_global_id(0) * 8, r = get_global_id(1);
    if (c0 >= C || r >= rows)
        return;
    const int n = C - c0;
    const float8 gamma = kiln_load8(params + gamma_offset + c0, n);
    const float8 g = kiln_load8(dy + (size_t)r * C + c0, n);
    const float8 mean = kiln_load8(stats + c0, n), inv_std = kiln_load8(stats + C + c0, n);
    const float8 xhat = (kiln_load8(x + (size_t)r * C + c0, n) - mean) * inv_std;
    float8 d = gamma * inv_std / count *
               (count * g - kiln_load8(sums + c0, n) - xhat * kiln_load8(sums + C + c0, n));
    __global float *dst = dx + (size_t)r * C + c0;
    if (accumulate)
        d += kiln_load8(dst, n);
    kiln_store8(dst, d, n);
}

/* A frozen layer (inference mode in training): the gradient of the
 * per-channel affine map gamma * (x - moving mean) / sqrt(moving variance
 * + epsilon) + beta. */
__kernel void kiln_batch_norm_frozen_input_grad_cpu(__global const float *dy, __global float *dx,
                                                    int rows, int C, __global const float *params,
                                                    int gamma_offset, int variance_offset,
                                                    float epsilon, int accumulate)
{
    const int c0 = get_global_id(0) * 8, r = get_global_id(1);
    if (c0 >= C || r >= rows)
        return;
    const int n = C - c0;
    const float8 scale = kiln_load8(params + gamma_offset + c0, n) *
                         rsqrt(kiln_load8(params + variance_offset + c0, n) + epsilon);
    __global float *dst = dx + (size_t)r * C + c0;
    float8 d = kiln_load8(dy + (size_t)r * C + c0, n) * scale;
    if (accumulate)
        d += kiln_load8(dst, n);
    kiln_store8(dst, d, n);
}

/* The GPU variants (_gpu): a work-item per channel (and chunk or row)
 * over a (C, chunks) or (C, rows) range, so that neighbouring items read
 * and write neighbouring channels; the host gives the partial sums more,
 * shorter chunks (layers/batch_norm.c). The same arithmetic as above. */
__kernel void kiln_batch_norm_partial_gpu(__global const float *x, int rows, int C,
                                          int chunk_rows, int chunks,
                                          __global const float *sums, float count,
                                          int centred, __global float *partial)
{
    const int c = get_global_id(0), chunk = get_global_id(1);
    if (c >= C || chunk >= chunks)
        return;
    const float mean = centred ? sums[c] / count : 0.0f;
    const int last = min((chunk + 1) * chunk_rows, rows);
    float s = 0.0f;
    for (int r = chunk * chunk_rows; r < last; r++) {
        const float v = x[(size_t)r * C + c] - mean;
        s += centred ? v * v : v;
    }
    partial[(size_t)chunk * C + c] = s;
}

__kernel void kiln_batch_norm_normalize_gpu(__global const float *x, __global float *y,
                                            int rows, int C, __global const float *stats,
                                            int training, __global const float *params,
                                            int gamma_offset, int beta_offset,
                                            int mean_offset, int variance_offset,
                                            float epsilon, int act)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c >= C || r >= rows)
        return;
    const float mean = training ? stats[c] : params[mean_offset + c];
    const float inv_std = training ? stats[C + c] : rsqrt(params[variance_offset + c] + epsilon);
    const float scale = params[gamma_offset + c] * inv_std;
    y[(size_t)r * C + c] =
        kiln_activate((x[(size_t)r * C + c] - mean) * scale + params[beta_offset + c], act);
}

__kernel void kiln_batch_norm_backward_partial_gpu(__global const float *x,
                                                   __global const float *dy, int rows, int C,
                                                   int chunk_rows, int chunks,
                                                   __global const float *stats,
                                                   __global float *partial)
{
    const int c = get_global_id(0), chunk = get_global_id(1);
    if (c >= C || chunk >= chunks)
        return;
    const float mean = stats[c], inv_std = stats[C + c];
    const int last = min((chunk + 1) * chunk_rows, rows);
    float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
    for (int r = chunk * chunk_rows; r < last; r++) {
        const float g = dy[(size_t)r * C + c];
        sum_dy += g;
        sum_dy_xhat += g * (x[(size_t)r * C + c] - mean) * inv_std;
    }
    partial[(size_t)chunk * 2 * C + c] = sum_dy;
    partial[(size_t)chunk * 2 * C + C + c] = sum_dy_xhat;
}

__kernel void kiln_batch_norm_input_grad_gpu(__global const float *x,
                                             __global const float *dy, __global float *dx,
                                             int rows, int C, __global const float *stats,
                                             __global const float *sums, float count,
                                             __global const float *params, int gamma_offset,
                                             int accumulate)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c >= C || r >= rows)
        return;
    const float inv_std = stats[C + c];
    const float xhat = (x[(size_t)r * C + c] - stats[c]) * inv_std;
    const float d = params[gamma_offset + c] * inv_std / count *
                    (count * dy[(size_t)r * C + c] - sums[c] - xhat * sums[C + c]);
    __global float *dst = dx + (size_t)r * C + c;
    *dst = accumulate ? d + *dst : d;
}

__kernel void kiln_batch_norm_frozen_input_grad_gpu(__global const float *dy,
                                                    __global float *dx, int rows, int C,
                                                    __global const float *params,
                                                    int gamma_offset, int variance_offset,
                                                    float epsilon, int accumulate)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (c >= C || r >= rows)
        return;
    const float scale = params[gamma_offset + c] * rsqrt(params[variance_offset + c] + epsilon);
    __global float *dst = dx + (size_t)r * C + c;
    const float d = dy[(size_t)r * C + c] * scale;
    *dst = accumulate ? d + *dst : d;
}
