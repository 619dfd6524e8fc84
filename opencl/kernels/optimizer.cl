/* Optimizer updates over the flat parameter buffer: one work-item per
 * parameter, so they never need to know what a layer is. */

/* Keras SGD: v = momentum * v - lr * g; p += v (Nesterov: p += momentum * v - lr * g). */
/* guard: the step's loss sums; a non-finite loss skips the update, so a NaN
 * step never reaches the parameters (use_guard 0: the host decided). */
__kernel void kiln_optimizer_sgd(__global float *p, __global const float *g, __global float *v,
                                 int n, float lr, float momentum, int nesterov,
                                 __global const float *guard, int use_guard)
{
    const int i = get_global_id(0);
    if (i >= n || (use_guard && !isfinite(guard[0])))
        return;
    if (momentum == 0.0f) {
        p[i] -= lr * g[i];
        return;
    }
    const float vi = momentum * v[i] - lr * g[i];
    v[i] = vi;
    p[i] += nesterov ? momentum * vi - lr * g[i] : vi;
}

/* Keras Adam; alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) from the host. */
__kernel void kiln_optimizer_adam(__global float *p, __global const float *g, __global float *m,
                                  __global float *v, int n, float alpha, float beta_1, float beta_2,
                                  float epsilon, __global const float *guard, int use_guard)
{
    const int i = get_global_id(0);
    if (i >= n || (use_guard && !isfinite(guard[0])))
        return;
    const float gi = g[i];
    const float mi = m[i] + (gi - m[i]) * (1.0f - beta_1);
    const float vi = v[i] + (gi * gi - v[i]) * (1.0f - beta_2);
    m[i] = mi;
    v[i] = vi;
    p[i] -= alpha * mi / (sqrt(vi) + epsilon);
}

/* kiln_optimizer_adam eight parameters per work-item: the CPU variant (a
 * work-item per float ran the seed ResNet's 11M-parameter update at about
 * 5 GB/s on PoCL). The same arithmetic lane by lane. */
__kernel void kiln_optimizer_adam8(__global float *p, __global const float *g,
                                   __global float *m, __global float *v, int n, float alpha,
                                   float beta_1, float beta_2, float epsilon,
                                   __global const float *guard, int use_guard)
{
    const int i = get_global_id(0) * 8;
    if (i >= n || (use_guard && !isfinite(guard[0])))
        return;
    const int count = n - i;
    const float8 gi = kiln_load8(g + i, count), m0 = kiln_load8(m + i, count);
    const float8 v0 = kiln_load8(v + i, count);
    const float8 mi = m0 + (gi - m0) * (1.0f - beta_1);
    const float8 vi = v0 + (gi * gi - v0) * (1.0f - beta_2);
    kiln_store8(m + i, mi, count);
    kiln_store8(v + i, vi, count);
    kiln_store8(p + i, kiln_load8(p + i, count) - alpha * mi / (sqrt(vi) + epsilon), count);
}

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
__kernel void kiln_optimizer_check_finite(__global const float *g, int n,
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
__kernel void kiln_optimizer_check_finite8(__global const float *g, int n,
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
__kernel void kiln_optimizer_accumulate(__global float *accum, __global float *g, int offset, int n,
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
