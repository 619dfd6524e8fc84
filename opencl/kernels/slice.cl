/* Slice: a strided window of each sample, four axes (a sample of lower
 * rank padded with leading axes of 1). On axis a the output's index o
 * reads the input's begin[a] + o * step[a]; a negative step walks the axis
 * down. Arguments: the input's dims (i0..i3), the output's (o0..o3),
 * begin (b0..b3) and step (s0..s3), then accumulate and the batch. */

/* Forward, over (values of an output sample, batch). */
__kernel void kiln_slice_forward(__global const float *x, __global float *y, int i0, int i1,
                                 int i2, int i3, int o0, int o1, int o2, int o3, int b0, int b1,
                                 int b2, int b3, int s0, int s1, int s2, int s3, int accumulate,
                                 int batch)
{
    const int i = get_global_id(0), n = get_global_id(1);
    const int out_size = o0 * o1 * o2 * o3;
    if (i >= out_size || n >= batch)   /* a GPU's groups round both up */
        return;
    (void)accumulate;
    const int a3 = i % o3, a2 = i / o3 % o2, a1 = i / (o3 * o2) % o1, a0 = i / (o3 * o2 * o1);
    const int at = (((b0 + a0 * s0) * i1 + b1 + a1 * s1) * i2 + b2 + a2 * s2) * i3 + b3 + a3 * s3;
    y[(size_t)n * out_size + i] = x[(size_t)n * i0 * i1 * i2 * i3 + at];
}

/* Where input index `at` of an axis lands in the output (-1: nowhere). */
inline int kiln_slice_place(int at, int begin, int step, int size)
{
    const int from = step > 0 ? at - begin : begin - at, stride = step > 0 ? step : -step;
    return from >= 0 && from % stride == 0 && from / stride < size ? from / stride : -1;
}

/* Backward, over (values of an input sample, batch): each input value
 * takes its one place's gradient, or zero where the slice skipped it;
 * written or added (accumulate). */
__kernel void kiln_slice_backward(__global const float *dy, __global float *dx, int i0, int i1,
                                  int i2, int i3, int o0, int o1, int o2, int o3, int b0, int b1,
                                  int b2, int b3, int s0, int s1, int s2, int s3, int accumulate,
                                  int batch)
{
    const int i = get_global_id(0), n = get_global_id(1);
    const int in_size = i0 * i1 * i2 * i3;
    if (i >= in_size || n >= batch)
        return;
    const int p3 = kiln_slice_place(i % i3, b3, s3, o3);
    const int p2 = kiln_slice_place(i / i3 % i2, b2, s2, o2);
    const int p1 = kiln_slice_place(i / (i3 * i2) % i1, b1, s1, o1);
    const int p0 = kiln_slice_place(i / (i3 * i2 * i1), b0, s0, o0);
    const int inside = p0 >= 0 && p1 >= 0 && p2 >= 0 && p3 >= 0;
    const float g = inside ? dy[(size_t)n * o0 * o1 * o2 * o3 + ((p0 * o1 + p1) * o2 + p2) * o3 +
                                p3] : 0.0f;
    __global float *to = dx + (size_t)n * in_size + i;
    *to = accumulate ? *to + g : g;
}
