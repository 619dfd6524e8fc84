/* Gradient clipping over the flat gradient buffer (runtime/model/clip.c):
 * the squared L2 norms of the parameter tensors, then the gradient scaled
 * (clipnorm, global_clipnorm) or clamped (clipvalue) in place.
 *
 * The squares add up in double where the device has it, else in float; in
 * a fixed order either way (a work-group over each fixed chunk, a tree in
 * local memory, then the chunks in order), so a device gives the same norm
 * every time. A chunk is {offset, count, tensor}: it never spans two
 * tensors. Work-groups are a power of two, at most KILN_ROW_LANES (the
 * host takes fewer on a device whose groups are smaller). */
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double kiln_acc;
#else
typedef float kiln_acc;
#endif

/* The clipping modes of runtime/model/clip.h. */
#define KILN_CLIP_NORM 1
#define KILN_CLIP_GLOBAL 3

/* One work-group a chunk: partial[c] = the sum of g^2 over chunk c. */
__kernel void kiln_clip_squares(__global const float *g, __global const int *chunks,
                                __global kiln_acc *partial)
{
    __local kiln_acc part[KILN_ROW_LANES];
    const int c = get_group_id(0), lane = get_local_id(0), lanes = get_local_size(0);
    const int offset = chunks[3 * c], count = chunks[3 * c + 1];
    kiln_acc s = 0;
    for (int i = lane; i < count; i += lanes) {
        const kiln_acc x = g[offset + i];
        s += x * x;
    }
    part[lane] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = lanes / 2; step > 0; step /= 2) {
        if (lane < step)
            part[lane] += part[lane + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0)
        partial[c] = part[0];
}

/* One work-item: each tensor's squared norm (its chunks in order) and the
 * range's, which `total` holds as a kiln_acc followed, at int 2, by its
 * size in bytes (the host reads it back for the pipeline's exchange). */
__kernel void kiln_clip_sums(__global const kiln_acc *partial, __global const int *chunks,
                             int n_chunks, __global kiln_acc *tensor_squares,
                             __global int *total)
{
    if (get_global_id(0) != 0)
        return;
    kiln_acc all = 0, tensor = 0;
    for (int c = 0; c < n_chunks; c++) {
        tensor += partial[c];
        if (c + 1 == n_chunks || chunks[3 * c + 5] != chunks[3 * c + 2]) {
            tensor_squares[chunks[3 * c + 2]] = tensor;
            all += tensor;
            tensor = 0;
        }
    }
    *(__global kiln_acc *)total = all;
    total[2] = (int)sizeof(kiln_acc);
}

/* The factor of a tensor's gradient from its squared norm: Keras's
 * clip_by_norm, c / max(norm, c), or PyTorch's clip_grad_norm_, min(1, c /
 * (norm + 1e-6)); NaN for a norm that is not finite, so the step's guard
 * sees a non-finite gradient and skips it. */
inline float kiln_clip_factor(kiln_acc squares, int mode, float limit)
{
    const kiln_acc norm = sqrt(squares), c = limit;
    if (!isfinite(norm))
        return NAN;
    if (mode == KILN_CLIP_NORM)
        return (float)(c / fmax(norm, c));
    return (float)fmin((kiln_acc)1, c / (norm + (kiln_acc)1e-6));
}

/* One work-group a chunk: its tensor's factor (mode KILN_CLIP_NORM) or the
 * whole model's (KILN_CLIP_GLOBAL, from `total`), times each element. */
__kernel void kiln_clip_scale(__global float *g, __global const int *chunks,
                              __global const kiln_acc *tensor_squares,
                              __global const int *total, int mode, float limit)
{
    const int c = get_group_id(0), lane = get_local_id(0), lanes = get_local_size(0);
    const int offset = chunks[3 * c], count = chunks[3 * c + 1];
    const kiln_acc squares = mode == KILN_CLIP_NORM ? tensor_squares[chunks[3 * c + 2]]
                                                    : *(__global const kiln_acc *)total;
    const float f = kiln_clip_factor(squares, mode, limit);
    for (int i = lane; i < count; i += lanes)
        g[offset + i] *= f;
}

/* Keras's clipvalue: each element clamped to [-v, v]. A NaN or infinite
 * element becomes NaN, never v: the step's guard must still see it. */
__kernel void kiln_clip_value(__global float *g, int n, float v)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float x = g[i];
    g[i] = isfinite(x) ? fmin(fmax(x, -v), v) : NAN;
}
