/* Layer normalisation over the last axis of a rows x C matrix.
 *
 * Forward and backward each take one launch. The GPU variant gives a wide
 * row a work-group (_gpu) and a narrow one a work-item (_narrow_gpu); the
 * CPU variant gives every row a work-item (_cpu, below). A
 * work-group splits its row over LN_LANES lanes whatever its size, and
 * the lanes combine in a fixed tree, so a row's result does not depend on
 * the device's work-group size. The statistics come from one read of the
 * row: Welford's update within a lane, lanes merged as Chan et al. do.
 *
 * stats holds 2 floats per row for backward: the mean and
 * 1 / sqrt(variance + epsilon). A parameter offset < 0: that parameter is
 * absent (gamma 1, beta 0). */

#define LN_LANES 64

/* Lane b's (count, mean, sum of squared deviations) merged into lane a's. */
inline void ln_merge(__local int *n, __local float *mean, __local float *m2, int a, int b)
{
    const int na = n[a], nb = n[b];
    if (nb == 0)
        return;
    const int total = na + nb;
    const float d = mean[b] - mean[a], f = (float)nb / (float)total;
    mean[a] += d * f;
    m2[a] += m2[b] + d * d * (float)na * f;
    n[a] = total;
}

inline float ln_scale(__global const float *params, int gamma_offset, int j)
{
    return gamma_offset >= 0 ? params[gamma_offset + j] : 1.0f;
}

inline float ln_shift(__global const float *params, int beta_offset, int j)
{
    return beta_offset >= 0 ? params[beta_offset + j] : 0.0f;
}

/* A work-group per row, over a range of LN_LANES work-items per row (a
 * group wider than LN_LANES takes several rows in turn). */
__kernel void kiln_layer_norm_forward_gpu(__global const float *x, __global float *y, int rows,
                                          int C, __global const float *params, int gamma_offset,
                                          int beta_offset, float epsilon, __global float *stats)
{
    __local int n[LN_LANES];
    __local float mean[LN_LANES], m2[LN_LANES];
    const int lid = get_local_id(0), group = get_local_size(0);
    /* The whole group takes each of its rows: its barriers are uniform. */
    for (int row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        __global const float *xr = x + (size_t)row * C;
        for (int lane = lid; lane < LN_LANES; lane += group) {
            int k = 0;
            float mu = 0.0f, q = 0.0f;
            for (int j = lane; j < C; j += LN_LANES) {
                const float v = xr[j], d = v - mu;
                k++;
                mu += d / (float)k;
                q += d * (v - mu);
            }
            n[lane] = k;
            mean[lane] = mu;
            m2[lane] = q;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int step = LN_LANES / 2; step > 0; step /= 2) {
            for (int lane = lid; lane < step; lane += group)
                ln_merge(n, mean, m2, lane, lane + step);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const float mu = mean[0], inv = rsqrt(m2[0] / (float)C + epsilon);
        if (lid == 0) {
            stats[2 * (size_t)row] = mu;
            stats[2 * (size_t)row + 1] = inv;
        }
        __global float *yr = y + (size_t)row * C;
        for (int j = lid; j < C; j += group)
            yr[j] = (xr[j] - mu) * inv * ln_scale(params, gamma_offset, j) +
                    ln_shift(params, beta_offset, j);
        barrier(CLK_LOCAL_MEM_FENCE);   /* the next row reuses the lanes */
    }
}

/* One work-item per row. */
__kernel void kiln_layer_norm_forward_narrow_gpu(__global const float *x, __global float *y,
                                                 int rows, int C, __global const float *params,
                                                 int gamma_offset, int beta_offset, float epsilon,
                                                 __global float *stats)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    __global const float *xr = x + (size_t)row * C;
    float mu = 0.0f, q = 0.0f;
    for (int j = 0; j < C; j++) {
        const float v = xr[j], d = v - mu;
        mu += d / (float)(j + 1);
        q += d * (v - mu);
    }
    const float inv = rsqrt(q / (float)C + epsilon);
    stats[2 * (size_t)row] = mu;
    stats[2 * (size_t)row + 1] = inv;
    __global float *yr = y + (size_t)row * C;
    for (int j = 0; j < C; j++)
        yr[j] = (xr[j] - mu) * inv * ln_scale(params, gamma_offset, j) +
                ln_shift(params, beta_offset, j);
}

/* The input gradient, with g = dy gamma and xhat = (x - mean) inv:
 * dx = inv (g - mean(g) - xhat mean(g xhat)), written or added. A
 * work-group per row, as forward. */
__kernel void kiln_layer_norm_backward_gpu(__global const float *x, __global const float *dy,
                                           __global float *dx, int rows, int C,
                                           __global const float *params, int gamma_offset,
                                           __global const float *stats, int accumulate)
{
    __local float sum_g[LN_LANES], sum_gx[LN_LANES];
    const int lid = get_local_id(0), group = get_local_size(0);
    for (int row = get_group_id(0); row < rows; row += get_num_groups(0)) {
        const size_t at = (size_t)row * C;
        const float mu = stats[2 * (size_t)row], inv = stats[2 * (size_t)row + 1];
        for (int lane = lid; lane < LN_LANES; lane += group) {
            float s = 0.0f, t = 0.0f;
            for (int j = lane; j < C; j += LN_LANES) {
                const float g = dy[at + j] * ln_scale(params, gamma_offset, j);
                s += g;
                t += g * (x[at + j] - mu) * inv;
            }
            sum_g[lane] = s;
            sum_gx[lane] = t;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int step = LN_LANES / 2; step > 0; step /= 2) {
            for (int lane = lid; lane < step; lane += group) {
                sum_g[lane] += sum_g[lane + step];
                sum_gx[lane] += sum_gx[lane + step];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const float mean_g = sum_g[0] / (float)C, mean_gx = sum_gx[0] / (float)C;
        for (int j = lid; j < C; j += group) {
            const float g = dy[at + j] * ln_scale(params, gamma_offset, j);
            const float d = inv * (g - mean_g - (x[at + j] - mu) * inv * mean_gx);
            dx[at + j] = accumulate ? dx[at + j] + d : d;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* One work-item per row. */
__kernel void kiln_layer_norm_backward_narrow_gpu(__global const float *x, __global const float *dy,
                                                  __global float *dx, int rows, int C,
                                                  __global const float *params, int gamma_offset,
                                                  __global const float *stats, int accumulate)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    const size_t at = (size_t)row * C;
    const float mu = stats[2 * (size_t)row], inv = stats[2 * (size_t)row + 1];
    float s = 0.0f, t = 0.0f;
    for (int j = 0; j < C; j++) {
        const float g = dy[at + j] * ln_scale(params, gamma_offset, j);
        s += g;
        t += g * (x[at + j] - mu) * inv;
    }
    const float mean_g = s / (float)C, mean_gx = t / (float)C;
    for (int j = 0; j < C; j++) {
        const float g = dy[at + j] * ln_scale(params, gamma_offset, j);
        const float d = inv * (g - mean_g - (x[at + j] - mu) * inv * mean_gx);
        dx[at + j] = accumulate ? dx[at + j] + d : d;
    }
}

/* The CPU variant of forward and backward: a work-item per row, eight
 * values at a time (the kernels above read one float per work-item, which
 * PoCL's CPU device runs at about 1 GB/s). The statistics take two sweeps
 * over the row (in cache): the mean, then the squared deviations from it. */
inline float8 ln_scale8(__global const float *params, int gamma_offset, int j, int n)
{
    return gamma_offset >= 0 ? kiln_load8(params + gamma_offset + j, n) : (float8)(1.0f);
}

inline float8 ln_shift8(__global const float *params, int beta_offset, int j, int n)
{
    return beta_offset >= 0 ? kiln_load8(params + beta_offset + j, n) : (float8)(0.0f);
}

__kernel void kiln_layer_norm_forward_cpu(__global const float *x, __global float *y,
                                          int rows, int C, __global const float *params,
                                          int gamma_offset, int beta_offset, float epsilon,
                                          __global float *stats)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    __global const float *xr = x + (size_t)row * C;
    float8 total = (float8)(0.0f);
    for (int j = 0; j < C; j += 8)
        total += kiln_load8(xr + j, C - j);   /* lanes past C load 0 */
    const float mu = kiln_sum8(total) / (float)C;
    float8 squares = (float8)(0.0f);
    for (int j = 0; j < C; j += 8) {
        const float8 d = kiln_load8(xr + j, C - j) - mu;
        squares += select((float8)(0.0f), d * d,
                          (int8)(0, 1, 2, 3, 4, 5, 6, 7) < (int8)(C - j));
    }
    const float inv = rsqrt(kiln_sum8(squares) / (float)C + epsilon);
    stats[2 * (size_t)row] = mu;
    stats[2 * (size_t)row + 1] = inv;
    __global float *yr = y + (size_t)row * C;
    for (int j = 0; j < C; j += 8) {
        const int n = C - j;
        kiln_store8(yr + j, (kiln_load8(xr + j, n) - mu) * inv *
                            ln_scale8(params, gamma_offset, j, n) +
                            ln_shift8(params, beta_offset, j, n), n);
    }
}

__kernel void kiln_layer_norm_backward_cpu(__global const float *x, __global const float *dy,
                                           __global float *dx, int rows, int C,
                                           __global const float *params, int gamma_offset,
                                           __global const float *stats, int accumulate)
{
    const int row = get_global_id(0);
    if (row >= rows)
        return;
    const size_t at = (size_t)row * C;
    const float mu = stats[2 * (size_t)row], inv = stats[2 * (size_t)row + 1];
    float8 s = (float8)(0.0f), t = (float8)(0.0f);
    for (int j = 0; j < C; j += 8) {   /* lanes past C: dy loads 0, so g is 0 */
        const int n = C - j;
        const float8 g = kiln_load8(dy + at + j, n) * ln_scale8(params, gamma_offset, j, n);
        s += g;
        t += g * (kiln_load8(x + at + j, n) - mu) * inv;
    }
    const float mean_g = kiln_sum8(s) / (float)C, mean_gx = kiln_sum8(t) / (float)C;
    for (int j = 0; j < C; j += 8) {
        const int n = C - j;
        const float8 g = kiln_load8(dy + at + j, n) * ln_scale8(params, gamma_offset, j, n);
        float8 d = inv * (g - mean_g - (kiln_load8(x + at + j, n) - mu) * inv * mean_gx);
        if (accumulate)
            d += kiln_load8(dx + at + j, n);
        kiln_store8(dx + at + j, d, n);
    }
}

/* gamma's and beta's gradients, per chunk of rows: partial[chunk, 0..C) =
 * sum dy, partial[chunk, C..2C) = sum dy xhat, over a (C blocks of 8,
 * chunks) range; kiln_layer_norm_param_reduce adds the chunks in order. */
__kernel void kiln_layer_norm_param_partial_cpu(__global const float *x, __global const float *dy,
                                                int rows, int C, int chunk_rows, int chunks,
                                                __global const float *stats,
                                                __global float *partial)
{
    const int c0 = get_global_id(0) * 8, chunk = get_global_id(1);
    if (c0 >= C || chunk >= chunks)
        return;
    const int n = C - c0;
    const int last = min((chunk + 1) * chunk_rows, rows);
    float8 sum_dy = (float8)(0.0f), sum_dy_xhat = (float8)(0.0f);
    for (int r = chunk * chunk_rows; r < last; r++) {
        const float mu = stats[2 * (size_t)r], inv = stats[2 * (size_t)r + 1];
        const float8 g = kiln_load8(dy + (size_t)r * C + c0, n);
        sum_dy += g;
        sum_dy_xhat += g * (kiln_load8(x + (size_t)r * C + c0, n) - mu) * inv;
    }
    kiln_store8(partial + (size_t)chunk * 2 * C + c0, sum_dy, n);
    kiln_store8(partial + (size_t)chunk * 2 * C + C + c0, sum_dy_xhat, n);
}

/* The GPU variant: a work-item per channel and chunk over a (C, chunks)
 * range, so that neighbouring items read neighbouring channels of a row;
 * the host gives it more, shorter chunks (layers/layer_norm.c). */
__kernel void kiln_layer_norm_param_partial_gpu(__global const float *x,
                                                __global const float *dy, int rows, int C,
                                                int chunk_rows, int chunks,
                                                __global const float *stats,
                                                __global float *partial)
{
    const int c = get_global_id(0), chunk = get_global_id(1);
    if (c >= C || chunk >= chunks)
        return;
    const int last = min((chunk + 1) * chunk_rows, rows);
    float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
    for (int r = chunk * chunk_rows; r < last; r++) {
        const float mu = stats[2 * (size_t)r], inv = stats[2 * (size_t)r + 1];
        const float g = dy[(size_t)r * C + c];
        sum_dy += g;
        sum_dy_xhat += g * (x[(size_t)r * C + c] - mu) * inv;
    }
    partial[(size_t)chunk * 2 * C + c] = sum_dy;
    partial[(size_t)chunk * 2 * C + C + c] = sum_dy_xhat;
}

__kernel void kiln_layer_norm_param_reduce(__global const float *partial, int C, int chunks,
                                           __global float *grads, int gamma_offset,
                                           int beta_offset)
{
    const int c = get_global_id(0);
    if (c >= C)
        return;
    float s = 0.0f, t = 0.0f;
    for (int chunk = 0; chunk < chunks; chunk++) {
        s += partial[(size_t)chunk * 2 * C + c];
        t += partial[(size_t)chunk * 2 * C + C + c];
    }
    if (beta_offset >= 0)
        grads[beta_offset + c] = s;
    if (gamma_offset >= 0)
        grads[gamma_offset + c] = t;
}
