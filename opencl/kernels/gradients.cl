/* Kernels over the flat gradient buffer that are no optimizer's: the
 * accumulation of gradients over several steps. (The check of a step's
 * gradients and update is the optimizer's: optimizer.cl.) */

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
