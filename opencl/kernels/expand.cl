/* Expand: each sample broadcast to a larger shape, four axes (a sample of
 * lower rank padded with leading axes of 1); an input axis of length 1
 * repeats along the output's. Arguments: the input's dims (i0..i3, each
 * 1 or the output's) and the output's (o0..o3), then accumulate and the batch. */

/* Forward, over (values of an output sample, batch). */
__kernel void kiln_expand_forward(__global const float *x, __global float *y, int i0, int i1,
                                  int i2, int i3, int o0, int o1, int o2, int o3,
                                  int accumulate, int batch)
{
    const int i = get_global_id(0), n = get_global_id(1);
    const int out_size = o0 * o1 * o2 * o3;
    if (i >= out_size || n >= batch)   /* a GPU's groups round both up */
        return;
    (void)accumulate;
    const int a3 = i % o3, a2 = i / o3 % o2, a1 = i / (o3 * o2) % o1, a0 = i / (o3 * o2 * o1);
    const int at = (((i0 == 1 ? 0 : a0) * i1 + (i1 == 1 ? 0 : a1)) * i2 +
                    (i2 == 1 ? 0 : a2)) * i3 + (i3 == 1 ? 0 : a3);
    y[(size_t)n * out_size + i] = x[(size_t)n * i0 * i1 * i2 * i3 + at];
}

/* Backward, over (values of an input sample, batch): each input value sums
 * the gradients of the output values it became, in a fixed order (the
 * output's, last axis fastest); written or added (accumulate). */
__kernel void kiln_expand_backward(__global const float *dy, __global float *dx, int i0, int i1,
                                   int i2, int i3, int o0, int o1, int o2, int o3,
                                   int accumulate, int batch)
{
    const int i = get_global_id(0), n = get_global_id(1);
    const int in_size = i0 * i1 * i2 * i3;
    if (i >= in_size || n >= batch)
        return;
    const int a3 = i % i3, a2 = i / i3 % i2, a1 = i / (i3 * i2) % i1, a0 = i / (i3 * i2 * i1);
    /* The repeats along each axis: the output's length where the input's
     * is 1, else one. */
    const int r0 = i0 == 1 ? o0 : 1, r1 = i1 == 1 ? o1 : 1, r2 = i2 == 1 ? o2 : 1;
    const int r3 = i3 == 1 ? o3 : 1;
    __global const float *g = dy + (size_t)n * o0 * o1 * o2 * o3;
    float sum = 0.0f;
    for (int b0 = 0; b0 < r0; b0++)
        for (int b1 = 0; b1 < r1; b1++)
            for (int b2 = 0; b2 < r2; b2++)
                for (int b3 = 0; b3 < r3; b3++)
                    sum += g[(((size_t)(a0 + b0) * o1 + a1 + b1) * o2 + a2 + b2) * o3 + a3 + b3];
    __global float *to = dx + (size_t)n * in_size + i;
    *to = accumulate ? *to + sum : sum;
}
