/* Optimizer updates over the flat parameter buffer: one work-item per
 * parameter, so they never need to know what a layer is. */

/* One parameter's update, written once for the kernels that apply it and
 * for the check that runs before them (kiln_optimizer_check_update), so
 * that both compute the same floats: float or float8 operands alike, each
 * a value already loaded (an operand appears more than once). */

/* Keras's decoupled weight decay, before the step: decay = lr * weight_decay
 * from the host, 0 for none (then p exactly, as before decay existed). */
#define KILN_DECAYED(p) (decay != 0.0f ? (p) - (p) * decay : (p))

/* Keras SGD: v = momentum * v - lr * g; p += v (Nesterov: p += momentum * v - lr * g). */
#define KILN_SGD_STEP(p, g, v, vi, pi)                                                     \
    do {                                                                                   \
        vi = momentum * (v) - lr * (g);                                                    \
        pi = momentum == 0.0f ? KILN_DECAYED(p) - lr * (g)                                 \
             : nesterov ? KILN_DECAYED(p) + (momentum * vi - lr * (g))                     \
                        : KILN_DECAYED(p) + vi;                                            \
    } while (0)

/* Keras Adam; alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) from the host. */
#define KILN_ADAM_STEP(p, g, m, v, mi, vi, pi)                                             \
    do {                                                                                   \
        mi = (m) + ((g) - (m)) * (1.0f - beta_1);                                          \
        vi = (v) + ((g) * (g) - (v)) * (1.0f - beta_2);                                    \
        pi = KILN_DECAYED(p) - alpha * mi / (sqrt(vi) + epsilon);                          \
    } while (0)

/* Keras RMSprop: v the mean square, m the momentum buffer (with momentum),
 * a the mean gradient (centered); epsilon inside the root, lr inside the
 * buffer, as Keras (torch.optim.RMSprop has both outside). inc: scratch. */
#define KILN_RMSPROP_STEP(p, g, v, m, a, vi, mi, ai, inc, pi)                              \
    do {                                                                                   \
        vi = rho * (v) + (1.0f - rho) * ((g) * (g));                                       \
        ai = centered ? rho * (a) + (1.0f - rho) * (g) : (a);                              \
        inc = lr * (g) / sqrt((centered ? vi - ai * ai : vi) + epsilon);                   \
        mi = momentum != 0.0f ? momentum * (m) + inc : (m);                                \
        pi = KILN_DECAYED(p) - (momentum != 0.0f ? mi : inc);                              \
    } while (0)

/* Keras Adagrad: the accumulator starts at `init` (the update numbered 1
 * reads it instead of the zeroed slot); epsilon inside the root. */
#define KILN_ADAGRAD_STEP(p, g, a, ai, pi)                                                 \
    do {                                                                                   \
        ai = (first ? init : (a)) + (g) * (g);                                             \
        pi = KILN_DECAYED(p) - lr * (g) / sqrt(ai + epsilon);                              \
    } while (0)

/* guard: the step's sums. With use_guard, a non-finite guard[grad_at] (the
 * loss, or a gradient the check found) or guard[update_at] (an update the
 * check found) skips the update, so a bad step never reaches the
 * parameters or the optimizer's state (use_guard 0: the host decided). */
inline int kiln_optimizer_held(__global const float *guard, int use_guard, int grad_at,
                               int update_at)
{
    return use_guard && (!isfinite(guard[grad_at]) || !isfinite(guard[update_at]));
}

/* Every update kernel works on [at, at + n) of its buffers: one launch a
 * run of parameters that share their weight decay. */
__kernel void kiln_optimizer_sgd(__global float *p, __global const float *g, __global float *v,
                                 int at, int n, float lr, float momentum, int nesterov,
                                 float decay, __global const float *guard, int use_guard,
                                 int grad_at, int update_at)
{
    p += at;
    g += at;
    v += at;
    const int i = get_global_id(0);
    if (i >= n || kiln_optimizer_held(guard, use_guard, grad_at, update_at))
        return;
    const float pp = p[i], gi = g[i], v0 = momentum == 0.0f ? 0.0f : v[i];
    float vi, pi;
    KILN_SGD_STEP(pp, gi, v0, vi, pi);
    if (momentum != 0.0f)
        v[i] = vi;
    p[i] = pi;
}

__kernel void kiln_optimizer_adam_gpu(__global float *p, __global const float *g, __global float *m,
                                  __global float *v, int at, int n, float alpha, float beta_1,
                                  float beta_2, float epsilon, float decay,
                                  __global const float *guard, int use_guard, int grad_at,
                                  int update_at)
{
    p += at;
    g += at;
    m += at;
    v += at;
    const int i = get_global_id(0);
    if (i >= n || kiln_optimizer_held(guard, use_guard, grad_at, update_at))
        return;
    const float pp = p[i], gi = g[i], m0 = m[i], v0 = v[i];
    float mi, vi, pi;
    KILN_ADAM_STEP(pp, gi, m0, v0, mi, vi, pi);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
}

/* kiln_optimizer_adam_gpu eight parameters per work-item: the CPU variant (a
 * work-item per float ran the seed ResNet's 11M-parameter update at about
 * 5 GB/s on PoCL). The same arithmetic lane by lane. */
__kernel void kiln_optimizer_adam_cpu(__global float *p, __global const float *g,
                                   __global float *m, __global float *v, int at, int n,
                                   float alpha, float beta_1, float beta_2, float epsilon,
                                   float decay, __global const float *guard, int use_guard,
                                   int grad_at, int update_at)
{
    p += at;
    g += at;
    m += at;
    v += at;
    const int i = get_global_id(0) * 8;
    if (i >= n || kiln_optimizer_held(guard, use_guard, grad_at, update_at))
        return;
    const int count = n - i;
    const float8 pp = kiln_load8(p + i, count), gi = kiln_load8(g + i, count);
    const float8 m0 = kiln_load8(m + i, count), v0 = kiln_load8(v + i, count);
    float8 mi, vi, pi;
    KILN_ADAM_STEP(pp, gi, m0, v0, mi, vi, pi);
    kiln_store8(m + i, mi, count);
    kiln_store8(v + i, vi, count);
    kiln_store8(p + i, pi, count);
}

/* RMSprop: v the mean square, m the momentum buffer (read and written only
 * with momentum), a the mean gradient (only when centered); a slot not
 * kept is any buffer the host hands. */
__kernel void kiln_optimizer_rmsprop(__global float *p, __global const float *g,
                                     __global float *v, __global float *m, __global float *a,
                                     int at, int n, float lr, float rho, float momentum,
                                     int centered, float epsilon, float decay,
                                     __global const float *guard, int use_guard, int grad_at,
                                     int update_at)
{
    p += at;
    g += at;
    v += at;
    m += at;
    a += at;
    const int i = get_global_id(0);
    if (i >= n || kiln_optimizer_held(guard, use_guard, grad_at, update_at))
        return;
    const float pp = p[i], gi = g[i], v0 = v[i];
    const float m0 = momentum != 0.0f ? m[i] : 0.0f, a0 = centered ? a[i] : 0.0f;
    float vi, mi, ai, inc, pi;
    KILN_RMSPROP_STEP(pp, gi, v0, m0, a0, vi, mi, ai, inc, pi);
    v[i] = vi;
    if (momentum != 0.0f)
        m[i] = mi;
    if (centered)
        a[i] = ai;
    p[i] = pi;
}

/* Adagrad: acc the accumulator; `first` for the update numbered 1. */
__kernel void kiln_optimizer_adagrad(__global float *p, __global const float *g,
                                     __global float *acc, int at, int n, float lr, int first,
                                     float init, float epsilon, float decay,
                                     __global const float *guard, int use_guard, int grad_at,
                                     int update_at)
{
    p += at;
    g += at;
    acc += at;
    const int i = get_global_id(0);
    if (i >= n || kiln_optimizer_held(guard, use_guard, grad_at, update_at))
        return;
    const float pp = p[i], gi = g[i], a0 = acc[i];
    float ai, pi;
    KILN_ADAGRAD_STEP(pp, gi, a0, ai, pi);
    acc[i] = ai;
    p[i] = pi;
}

/* The update of g[i], checked before it is committed: reads what the update
 * would read and computes what it would write, writing none of it. g * 0 is
 * NaN for a NaN or infinite g, else 0; the same for the new parameter and
 * optimizer state. `kind`: 0 SGD (s0 its velocity, read only with
 * momentum), 1 Adam (s0, s1 its moments), 2 RMSprop (s0 mean square, s1
 * momentum buffer, s2 mean gradient), 3 Adagrad (s0 accumulator); the
 * host passes the slots kept in `used` (bit k: s_k), and only those count.
 * Adds the gradient's term to sg, the update's to su. */
#define KILN_CHECK_STEP(T, pp, gg, s0, s1, s2, sg, su)                                     \
    do {                                                                                   \
        const T p0 = (pp), gi = (gg), m0 = (s0), v0 = (s1), w0 = (s2);                     \
        T mi, vi, wi, inc, pi;                                                             \
        sg += gi * 0.0f;                                                                   \
        if (kind == 1) {                                                                   \
            KILN_ADAM_STEP(p0, gi, m0, v0, mi, vi, pi);                                    \
            su += mi * 0.0f + vi * 0.0f + pi * 0.0f;                                       \
        } else if (kind == 2) {                                                            \
            KILN_RMSPROP_STEP(p0, gi, m0, v0, w0, mi, vi, wi, inc, pi);                    \
            su += pi * 0.0f + mi * 0.0f + ((used & 2) ? vi * 0.0f : (T)(0.0f)) +           \
                  ((used & 4) ? wi * 0.0f : (T)(0.0f));                                    \
        } else if (kind == 3) {                                                            \
            KILN_ADAGRAD_STEP(p0, gi, m0, mi, pi);                                         \
            su += mi * 0.0f + pi * 0.0f;                                                   \
        } else {                                                                           \
            KILN_SGD_STEP(p0, gi, m0, mi, pi);                                             \
            su += pi * 0.0f + (momentum == 0.0f ? (T)(0.0f) : mi * 0.0f);                  \
        }                                                                                  \
    } while (0)

/* Makes guard[grad_at] NaN when any of g[0..n) is NaN or infinite, and
 * guard[update_at] NaN when the update of p (and m, v) that the optimizer
 * kernels above would make is not finite; leaves them alone otherwise. The
 * optimizers' guard then skips the step: the update is checked before it is
 * committed, so there is nothing to undo (a ReLU turns a NaN into 0, so the
 * loss can be finite while a gradient is not; features near FLT_MAX keep
 * the gradient finite while Adam's g * g overflows). alpha is Adam's step,
 * lr SGD's. The host bounds the grid; each work-group takes one contiguous
 * stretch, its items neighbouring floats (one stream per group: a CPU
 * thread reads on through its cache lines, a GPU coalesces; a grid-wide
 * stride read 64 KiB apart, 10x slower here). It sums the terms in local
 * memory, and a group that finds one writes NaN with an atomic exchange,
 * the one write to the guard that several groups can make. Work-groups are
 * a power of two, <= 64. */
__kernel void kiln_optimizer_check_update_gpu(__global const float *p, __global const float *g,
                                          __global const float *m, __global const float *v,
                                          __global const float *w, int at, int n, int kind,
                                          int used, float lr, float momentum, int nesterov,
                                          float alpha, float beta_1, float beta_2,
                                          float epsilon, float rho, int centered, int first,
                                          float init, float decay, __global float *guard,
                                          int grad_at, int update_at)
{
    p += at;
    g += at;
    m += at;
    v += at;
    w += at;
    __local float pg[64], pu[64];
    const int lid = get_local_id(0);
    const int group = get_local_size(0);
    const int groups = get_num_groups(0);
    /* Whole groups' worth per stretch, so no item runs past its own. */
    const int stretch = (n / groups + group) / group * group;
    const int start = get_group_id(0) * stretch;
    const int end = min(n, start + stretch);
    float sg = 0.0f, su = 0.0f;
    for (int i = start + lid; i < end; i += group)
        KILN_CHECK_STEP(float, p[i], g[i], (used & 1) ? m[i] : 0.0f, (used & 2) ? v[i] : 0.0f,
                        (used & 4) ? w[i] : 0.0f, sg, su);
    pg[lid] = sg;
    pu[lid] = su;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = group / 2; step > 0; step /= 2) {
        if (lid < step) {
            pg[lid] += pg[lid + step];
            pu[lid] += pu[lid + step];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && pg[0] != 0.0f)
        atomic_xchg((volatile __global float *)(guard + grad_at), NAN);
    if (lid == 0 && pu[0] != 0.0f)
        atomic_xchg((volatile __global float *)(guard + update_at), NAN);
}

/* The CPU variant: each work-item one contiguous stretch (a multiple of 8
 * floats), read eight at a time; one that finds a NaN or infinity writes
 * NaN as above. No local memory: on a CPU a group's items take turns, and
 * the variant above had each of them read every 64th float of its group's
 * stretch. */
__kernel void kiln_optimizer_check_update_cpu(__global const float *p, __global const float *g,
                                           __global const float *m, __global const float *v,
                                           __global const float *w, int at, int n, int kind,
                                           int used, float lr, float momentum, int nesterov,
                                           float alpha, float beta_1, float beta_2,
                                           float epsilon, float rho, int centered, int first,
                                           float init, float decay, __global float *guard,
                                           int grad_at, int update_at)
{
    p += at;
    g += at;
    m += at;
    v += at;
    w += at;
    const int items = get_global_size(0);
    const int stretch = ((n + items - 1) / items + 7) / 8 * 8;
    const int start = get_global_id(0) * stretch, end = min(n, start + stretch);
    float8 sg = (float8)(0.0f), su = (float8)(0.0f);
    for (int i = start; i < end; i += 8) {
        const int count = end - i;
        KILN_CHECK_STEP(float8, kiln_load8(p + i, count), kiln_load8(g + i, count),
                        (used & 1) ? kiln_load8(m + i, count) : (float8)(0.0f),
                        (used & 2) ? kiln_load8(v + i, count) : (float8)(0.0f),
                        (used & 4) ? kiln_load8(w + i, count) : (float8)(0.0f), sg, su);
    }
    if (kiln_sum8(sg) != 0.0f)
        atomic_xchg((volatile __global float *)(guard + grad_at), NAN);
    if (kiln_sum8(su) != 0.0f)
        atomic_xchg((volatile __global float *)(guard + update_at), NAN);
}

/* Keras 3's moving average of the weights (use_ema), after the update over
 * [0, n): a = m a + (1 - m) p in float32, the update numbered 1 (`first`)
 * copying p (Keras's momentum 0 at iterations 0); with `overwrite`
 * (ema_overwrite_frequency's N-th update) p = a after. Held as the update
 * was: a skipped step leaves the average alone. */
__kernel void kiln_optimizer_ema(__global float *p, __global float *a, int n, float momentum,
                                 int first, int overwrite, __global const float *guard,
                                 int use_guard, int grad_at, int update_at)
{
    const int i = get_global_id(0);
    if (i >= n || kiln_optimizer_held(guard, use_guard, grad_at, update_at))
        return;
    const float pi = p[i];
    const float ai = first ? pi : momentum * a[i] + (1.0f - momentum) * pi;
    a[i] = ai;
    if (overwrite)
        p[i] = ai;
}
