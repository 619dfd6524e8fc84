/* Element-wise activations (n values) and (log) softmax over rows of `cols`. */
/* Eight values per work-item (kiln_activate8), over a range of (n + 7) / 8. */
__kernel void kiln_activation_forward(__global const float *x, __global float *y, int n,
                                      int act)
{
    const int i = get_global_id(0) * 8;
    if (i >= n)
        return;
    const int count = n - i;
    kiln_store8(y + i, kiln_activate8(kiln_load8(x + i, count), act), count);
}

/* dy becomes the gradient before the activation, given its input x and its
 * output y: the activations that need x (GELU, SiLU, hard swish) are never fused into a
 * layer, so their x is kept; the others read y alone (x may be y). */
__kernel void kiln_activation_backward(__global const float *x, __global const float *y,
                                       __global float *dy, int n, int act)
{
    const int i = get_global_id(0) * 8;   /* eight values per work-item, as forward */
    if (i >= n)
        return;
    const int count = n - i;
    const float8 yi = kiln_load8(y + i, count), g = kiln_load8(dy + i, count);
    const float8 zero = (float8)(0.0f);
    float8 r = g;
    if (act == KILN_ACT_RELU) {
        r = select(zero, g, isgreater(yi, zero));
    } else if (act == KILN_ACT_SIGMOID) {
        r = g * yi * (1.0f - yi);
    } else if (act == KILN_ACT_TANH) {
        r = g * (1.0f - yi * yi);
    } else if (act == KILN_ACT_RELU6) {
        /* 0 < y < 6 exactly when 0 < x < 6 */
        r = select(zero, g, isgreater(yi, zero) & isless(yi, (float8)(6.0f)));
    } else if (act == KILN_ACT_HARD_SIGMOID) {
        /* 0 < y < 1 exactly when -3 < x < 3: PyTorch's 1/6 there, 0 at the kinks */
        r = select(zero, g / 6.0f, isgreater(yi, zero) & isless(yi, (float8)(1.0f)));
    } else if (act == KILN_ACT_HARD_SWISH) {
        /* PyTorch's: 0 below -3, x / 3 + 0.5 on [-3, 3], 1 above */
        const float8 v = kiln_load8(x + i, count);
        r = select(select(g * (v / 3.0f + 0.5f), g, isgreater(v, (float8)(3.0f))), zero,
                   isless(v, (float8)(-3.0f)));
    } else if (act == KILN_ACT_LEAKY_RELU) {
        /* y > 0 exactly when x > 0 */
        r = select(KILN_LEAKY_SLOPE * g, g, isgreater(yi, zero));
    } else if (act == KILN_ACT_GELU) {
        /* Phi(x) + x phi(x) */
        const float8 v = kiln_load8(x + i, count);
        const float8 pdf = 0.39894228040143268f * exp(-0.5f * v * v);
        r = g * (0.5f * kiln_erfc8(-v * KILN_SQRT_HALF) + v * pdf);
    } else if (act == KILN_ACT_GELU_TANH) {
        /* y = x s with s = sigmoid(2u) = 0.5 (1 + tanh u): y' = s + 2 x s (1 - s) u',
         * 1 - s as sigmoid(-2u) (no cancellation where tanh u is near -1 or 1) */
        const float8 v = kiln_load8(x + i, count);
        const float8 u2 = 2.0f * KILN_SQRT_2_OVER_PI * (v + KILN_GELU_CUBIC * v * v * v);
        const float8 du = KILN_SQRT_2_OVER_PI * (1.0f + 3.0f * KILN_GELU_CUBIC * v * v);
        const float8 s = kiln_sigmoid8(u2);
        r = g * (s + 2.0f * v * s * kiln_sigmoid8(-u2) * du);
    } else if (act == KILN_ACT_SILU) {
        /* sigmoid(x) (1 + x (1 - sigmoid(x))) */
        const float8 v = kiln_load8(x + i, count), s = kiln_sigmoid8(v);
        r = g * s * (1.0f + v * (1.0f - s));
    }
    kiln_store8(dy + i, r, count);
}

__kernel void kiln_activation_softmax_forward(__global const float *x, __global float *y,
                                              int rows, int cols)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + (size_t)r * cols;
    __global float *yr = y + (size_t)r * cols;
    float m = xr[0];
    for (int j = 1; j < cols; j++)
        m = fmax(m, xr[j]);
    float s = 0.0f;
    for (int j = 0; j < cols; j++) {
        const float e = exp(xr[j] - m);
        yr[j] = e;
        s += e;
    }
    const float inv = 1.0f / s;
    for (int j = 0; j < cols; j++)
        yr[j] *= inv;
}

/* The GPU variant for wide rows (a vocabulary): a work-group of
 * KILN_ROW_LANES items per row, each lane taking every KILN_ROW_LANES-th
 * value, the maximum and the sum merged in local memory in a fixed order
 * (prelude.cl's kiln_row_merge). */
__kernel void kiln_activation_softmax_forward_gpu(__global const float *x, __global float *y,
                                                  int rows, int cols)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + (size_t)r * cols;
    __global float *yr = y + (size_t)r * cols;
    float m = -INFINITY;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        m = fmax(m, xr[j]);
    m = kiln_row_merge(merge, m, 1);
    float s = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES) {
        const float e = exp(xr[j] - m);
        yr[j] = e;
        s += e;
    }
    const float inv = 1.0f / kiln_row_merge(merge, s, 0);
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        yr[j] *= inv;
}

__kernel void kiln_activation_softmax_backward(__global const float *y, __global float *dy,
                                               int rows, int cols)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global float *dr = dy + (size_t)r * cols;
    float dot = 0.0f;
    for (int j = 0; j < cols; j++)
        dot += dr[j] * yr[j];
    for (int j = 0; j < cols; j++)
        dr[j] = yr[j] * (dr[j] - dot);
}

/* The GPU variant for wide rows, as kiln_activation_softmax_forward_gpu:
 * the row's dot product merged before any lane overwrites its dy. */
__kernel void kiln_activation_softmax_backward_gpu(__global const float *y, __global float *dy,
                                                   int rows, int cols)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global float *dr = dy + (size_t)r * cols;
    float dot = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        dot += dr[j] * yr[j];
    dot = kiln_row_merge(merge, dot, 0);
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        dr[j] = yr[j] * (dr[j] - dot);
}

/* log softmax: x - m - log(sum exp(x - m)), m the row's maximum, so that
 * a value far below the maximum is its difference, not log of 0. */
__kernel void kiln_activation_log_softmax_forward(__global const float *x, __global float *y,
                                                  int rows, int cols)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + (size_t)r * cols;
    __global float *yr = y + (size_t)r * cols;
    float m = xr[0];
    for (int j = 1; j < cols; j++)
        m = fmax(m, xr[j]);
    float s = 0.0f;
    for (int j = 0; j < cols; j++)
        s += exp(xr[j] - m);
    /* (x - m) first, exact for x near m, then the log: m + log(s) would
     * round away log(s)'s digits where m is large (1e4: 1e-3). */
    const float log_s = log(s);
    for (int j = 0; j < cols; j++)
        yr[j] = (xr[j] - m) - log_s;
}

/* The GPU variant for wide rows, as kiln_activation_softmax_forward_gpu. */
__kernel void kiln_activation_log_softmax_forward_gpu(__global const float *x,
                                                      __global float *y, int rows, int cols)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + (size_t)r * cols;
    __global float *yr = y + (size_t)r * cols;
    float m = -INFINITY;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        m = fmax(m, xr[j]);
    m = kiln_row_merge(merge, m, 1);
    float s = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        s += exp(xr[j] - m);
    const float log_s = log(kiln_row_merge(merge, s, 0));
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        yr[j] = (xr[j] - m) - log_s;
}

/* dx = dy - softmax(x) sum(dy), softmax(x) = exp(y). */
__kernel void kiln_activation_log_softmax_backward(__global const float *y, __global float *dy,
                                                   int rows, int cols)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global float *dr = dy + (size_t)r * cols;
    float sum = 0.0f;
    for (int j = 0; j < cols; j++)
        sum += dr[j];
    for (int j = 0; j < cols; j++)
        dr[j] -= exp(yr[j]) * sum;
}

/* The GPU variant for wide rows: the row's sum merged before any lane
 * overwrites its dy. */
__kernel void kiln_activation_log_softmax_backward_gpu(__global const float *y,
                                                       __global float *dy, int rows, int cols)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    __global const float *yr = y + (size_t)r * cols;
    __global float *dr = dy + (size_t)r * cols;
    float sum = 0.0f;
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        sum += dr[j];
    sum = kiln_row_merge(merge, sum, 0);
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        dr[j] -= exp(yr[j]) * sum;
}

/* The activation layer's leaky_relu of another slope than Keras's 0.2:
 * x for x > 0, slope x else; eight values per work-item. */
__kernel void kiln_activation_leaky_forward(__global const float *x, __global float *y, int n,
                                            float slope)
{
    const int i = get_global_id(0) * 8;
    if (i >= n)
        return;
    const int count = n - i;
    const float8 v = kiln_load8(x + i, count);
    kiln_store8(y + i, select(slope * v, v, isgreater(v, (float8)(0.0f))), count);
}

/* dx = dy (x > 0) or slope dy, written or added (accumulate). */
__kernel void kiln_activation_leaky_backward(__global const float *x, __global const float *dy,
                                             __global float *dx, int n, float slope,
                                             int accumulate)
{
    const int i = get_global_id(0) * 8;
    if (i >= n)
        return;
    const int count = n - i;
    const float8 v = kiln_load8(x + i, count), g = kiln_load8(dy + i, count);
    float8 r = select(slope * g, g, isgreater(v, (float8)(0.0f)));
    if (accumulate)
        r += kiln_load8(dx + i, count);
    kiln_store8(dx + i, r, count);
}
