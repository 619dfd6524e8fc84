/* Element-wise activations (n values) and softmax over rows of `cols`. */
__kernel void kiln_activation_forward(__global const float *x, __global float *y, int n,
                                      int act)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    y[i] = kiln_activate(x[i], act);
}

/* dy becomes the gradient before the activation, given its output y. */
__kernel void kiln_activation_backward(__global const float *y, __global float *dy, int n,
                                       int act)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float yi = y[i], g = dy[i];
    float r = g;
    if (act == KILN_ACT_RELU)
        r = yi > 0.0f ? g : 0.0f;
    else if (act == KILN_ACT_SIGMOID)
        r = g * yi * (1.0f - yi);
    else if (act == KILN_ACT_TANH)
        r = g * (1.0f - yi * yi);
    dy[i] = r;
}

__kernel void kiln_activation_softmax_forward(__global const float *x, __global float *y, int rows,
                                              int cols)
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
