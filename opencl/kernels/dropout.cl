/* Dropout: element i of sample n is kept unless its hash falls below the
 * rate; kept values are scaled by 1 / (1 - rate) (inverted dropout, as
 * Keras). The hash of (seed, step, global sample, element) is recomputed in
 * backward, so no mask is stored, and every strategy draws the same mask
 * for a sample whichever replica holds it. The hash, kiln_keep_scale, is in
 * prelude.cl: attention's dropout draws its masks the same way. */

/* dst[i] (+)= src[i] * keep_scale(i) over n = samples x size values. */
__kernel void kiln_dropout_apply(__global const float *src, __global float *dst, int n, int size,
                                 int first_sample, uint seed_lo, uint seed_hi, uint step,
                                 float rate, int accumulate)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float v =
        src[i] * kiln_keep_scale(seed_lo, seed_hi, step, first_sample + i / size, i % size, rate);
    dst[i] = accumulate ? dst[i] + v : v;
}
