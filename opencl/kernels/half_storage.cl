/* Activations kept in IEEE half precision between a layer's forward pass
 * and its backward pass (kiln_compile_options.activation_storage; the plan
 * is runtime/parallel/half_storage.c). vstore_half and vload_half are core
 * OpenCL: no device needs cl_khr_fp16 for them, and the arithmetic stays
 * float32. */

/* Rounds the layer's float32 output x to half precision (to nearest, ties
 * to even) into h, and writes the rounded value back into x, so that the
 * rest of the forward pass reads the value backward will read. A finite
 * value beyond half's range (|x| >= 65520 rounds to infinity) records its
 * node + 1 in *overflow, the first such node keeping its place. */
__kernel void kiln_half_storage_round(__global float *x, __global half *h, int n,
                              __global int *overflow, int node)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float v = x[i];
    vstore_half_rte(v, i, h);
    const float r = vload_half(i, h);
    x[i] = r;
    if (isinf(r) && !isinf(v))
        atomic_cmpxchg(overflow, 0, node + 1);
}

/* v rounded to the nearest half (ties to even) and back to float: what
 * vstore_half_rte then vload_half give, without a half buffer. */
float kiln_half_storage_rounded(float v)
{
    const uint u = as_uint(v), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)   /* infinity, NaN */
        return v;
    if (a >= 0x477ff000u)   /* 65520 and up: infinity */
        return as_float(sign | 0x7f800000u);
    if (a < 0x38800000u) {  /* below 2^-14: half's subnormals, steps of 2^-24 */
        const float q = rint(as_float(a) * 16777216.0f) * 5.9604644775390625e-8f;
        return as_float(sign | as_uint(q));
    }
    /* Half keeps 10 of float's 23 fraction bits: round at bit 13, ties to
     * the even one (a carry into the exponent is the next binade). */
    const uint kept = a + 0x0fffu + ((a >> 13) & 1u);
    return as_float(sign | (kept & ~0x1fffu));
}

/* kiln_half_storage_round without keeping the half values: a node whose
 * float32 buffers are its own (another stage reads it, or the plan saved
 * nothing). */
__kernel void kiln_half_storage_round_in_place(__global float *x, int n,
                                               __global int *overflow, int node)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float v = x[i], r = kiln_half_storage_rounded(v);
    x[i] = r;
    if (isinf(r) && !isinf(v))
        atomic_cmpxchg(overflow, 0, node + 1);
}

/* x = h, float32 again for the layer's backward pass. */
__kernel void kiln_half_storage_expand(__global const half *h, __global float *x, int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    x[i] = vload_half(i, h);
}
