/* Softmax and log softmax along one axis of a sample, of `len` values
 * `inner` apart: row r (of batch x outer x inner) starts at
 * (r / inner) * len * inner + r % inner. A work-item per row, its values
 * in order (deterministic); the GPU variants below for long rows. */

inline size_t kiln_softmax_row(int r, int len, int inner)
{
    return (size_t)(r / inner) * len * inner + r % inner;
}

__kernel void kiln_softmax_forward(__global const float *x, __global float *y, int rows,
                                   int len, int inner, int log_softmax)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + kiln_softmax_row(r, len, inner);
    __global float *yr = y + kiln_softmax_row(r, len, inner);
    float m = xr[0];
    for (int j = 1; j < len; j++)
        m = fmax(m, xr[(size_t)j * inner]);
    float s = 0.0f;
    for (int j = 0; j < len; j++)
        s += exp(xr[(size_t)j * inner] - m);
    /* (x - m) first, then log(s): as activation.cl's log softmax. */
    const float log_s = log(s), inv = 1.0f / s;
    for (int j = 0; j < len; j++) {
        const float d = xr[(size_t)j * inner] - m;
        yr[(size_t)j * inner] = log_softmax ? d - log_s : exp(d) * inv;
    }
}

/* dx = y (dy - sum dy y) for softmax, dy - exp(y) sum dy for log softmax;
 * added to dx when `accumulate`. */
__kernel void kiln_softmax_backward(__global const float *y, __global const float *dy,
                                    __global float *dx, int rows, int len, int inner,
                                    int log_softmax, int accumulate)
{
    const int r = get_global_id(0);
    if (r >= rows)
        return;
    const size_t at = kiln_softmax_row(r, len, inner);
    __global const float *yr = y + at;
    __global const float *gr = dy + at;
    __global float *dr = dx + at;
    float dot = 0.0f;
    for (int j = 0; j < len; j++)
        dot += log_softmax ? gr[(size_t)j * inner] : gr[(size_t)j * inner] * yr[(size_t)j * inner];
    for (int j = 0; j < len; j++) {
        const size_t k = (size_t)j * inner;
        const float g = log_softmax ? gr[k] - exp(yr[k]) * dot : yr[k] * (gr[k] - dot);
        dr[k] = accumulate ? dr[k] + g : g;
    }
}

/* The GPU variants for long rows: a work-group of KILN_ROW_LANES per row,
 * each lane taking every KILN_ROW_LANES-th value, the maximum and the sums
 * merged in a fixed order (prelude.cl's kiln_row_merge). */
__kernel void kiln_softmax_forward_gpu(__global const float *x, __global float *y, int rows,
                                       int len, int inner, int log_softmax)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    __global const float *xr = x + kiln_softmax_row(r, len, inner);
    __global float *yr = y + kiln_softmax_row(r, len, inner);
    float m = -INFINITY;
    for (int j = lane; j < len; j += KILN_ROW_LANES)
        m = fmax(m, xr[(size_t)j * inner]);
    m = kiln_row_merge(merge, m, 1);
    float s = 0.0f;
    for (int j = lane; j < len; j += KILN_ROW_LANES)
        s += exp(xr[(size_t)j * inner] - m);
    s = kiln_row_merge(merge, s, 0);
    const float log_s = log(s), inv = 1.0f / s;
    for (int j = lane; j < len; j += KILN_ROW_LANES) {
        const float d = xr[(size_t)j * inner] - m;
        yr[(size_t)j * inner] = log_softmax ? d - log_s : exp(d) * inv;
    }
}

__kernel void kiln_softmax_backward_gpu(__global const float *y, __global const float *dy,
                                        __global float *dx, int rows, int len, int inner,
                                        int log_softmax, int accumulate)
{
    __local float merge[KILN_ROW_LANES];
    const int r = get_group_id(0), lane = get_local_id(0);
    if (r >= rows)
        return;
    const size_t at = kiln_softmax_row(r, len, inner);
    __global const float *yr = y + at;
    __global const float *gr = dy + at;
    __global float *dr = dx + at;
    float dot = 0.0f;
    for (int j = lane; j < len; j += KILN_ROW_LANES)
        dot += log_softmax ? gr[(size_t)j * inner] : gr[(size_t)j * inner] * yr[(size_t)j * inner];
    dot = kiln_row_merge(merge, dot, 0);
    for (int j = lane; j < len; j += KILN_ROW_LANES) {
        const size_t k = (size_t)j * inner;
        const float g = log_softmax ? gr[k] - exp(yr[k]) * dot : yr[k] * (gr[k] - dot);
        dr[k] = accumulate ? dr[k] + g : g;
    }
}
