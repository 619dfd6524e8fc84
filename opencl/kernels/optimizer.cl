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
__kernel void kiln_optimizer_adam_gpu(__global float *p, __global const float *g, __global float *m,
                                      __global float *v, int n, float alpha, float beta_1,
                                      float beta_2, float epsilon, __global const float *guard,
                                      int use_guard)
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

/* kiln_optimizer_adam_gpu eight parameters per work-item: the CPU variant (a
 * work-item per float ran the seed ResNet's 11M-parameter update at about
 * 5 GB/s on PoCL). The same arithmetic lane by lane. */
__kernel void kiln_optimizer_adam_cpu(__global float *p, __global const float *g,
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
