/* Kernels over the flat gradient buffer that are no optimizer's: the
 * check for NaN and infinity before an update, and the accumulation of
 * gradients over several steps. */

/* Makes guard[0] NaN when any of g[0..n) is NaN or infinite, and leaves it
 * alone otherwise: a ReLU turns a NaN into 0, so the loss can be finite
 * while a gradient is not, and the optimizers' guard then skips the step
 * as for a non-finite loss. The host bounds the grid; each work-group
 * takes one contiguous stretch of g, its items neighbouring floats (one
 * stream per group: a CPU thread reads on through its cache lines, a GPU
 * coalesces; a grid-wide stride read 64 KiB apart, 10x slower here). It
 * sums g * 0 (NaN for NaN or Inf, else 0) in local memory, and a group
 * that finds one writes NaN with an atomic exchange, the one write to
 * guard[0] that several groups can make. Work-groups are a power of two,
 * <= 64. */
__kernel void kiln_gradients_check_finite_gpu(__global const float *g, int n,
                                              __global float *guard)
{
    __local float partial[64];
    const int lid = get_local_id(0);
    const int group = get_local_size(0);
    const int groups = get_num_groups(0);
    /* Whole groups' worth per stretch, so no item runs past its own. */
    const int stretch = (n / groups + group) / group * group;
    const int start = get_group_id(0) * stretch;
    const int end = min(n, start + stretch);
    float s = 0.0f;
    for (int i = start + lid; i < end; i += group)
        s += g[i] * 0.0f;
    partial[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = group / 2; step > 0; step /= 2) {
        if (lid < step)
            partial[lid] += partial[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && partial[0] != 0.0f)
        atomic_xchg((volatile __global float *)guard, NAN);
}

/* The CPU variant: each work-item one contiguous stretch (a multiple of 8
 * floats), read eight at a time; one that finds a NaN or infinity writes
 * NaN as above. No local memory: on a CPU a group's items take turns, and
 * the variant above had each of them read every 64th float of its group's
 * stretch. */
__kernel void kiln_gradients_check_finite_cpu(__global const float *g, int n,
                                              __global float *guard)
{
    const int items = get_global_size(0);
    const int stretch = ((n + items - 1) / items + 7) / 8 * 8;
    const int start = get_global_id(0) * stretch, end = min(n, start + stretch);
    float8 s = (float8)(0.0f);
    for (int i = start; i < end; i += 8)
        s += kiln_load8(g + i, end - i) * 0.0f;
    if (kiln_sum8(s) != 0.0f)
        atomic_xchg((volatile __global float *)guard, NAN);
}

/* Gradient accumulation over [offset, offset + n) of the flat buffers:
 * accum += g on intermediate micro-steps; on the last, g = (accum + g) * scale
 * (scale = 1 / steps: the mean) and accum restarts from zero. */
__kernel void kiln_gradients_accumulate(__global float *accum, __global float *g, int offset, int n,
                                        int final, float scale)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int j = offset + i;
    if (final) {
        g[j] = (accum[j] + g[j]) * scale;
        accum[j] = 0.0f;
    } else {
        accum[j] += g[j];
    }
}
