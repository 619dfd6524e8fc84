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

/* x = h, float32 again for the layer's backward pass. */
__kernel void kiln_half_storage_expand(__global const half *h, __global float *x, int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    x[i] = vload_half(i, h);
}
