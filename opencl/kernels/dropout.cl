/* Dropout: element i of sample n is kept unless its hash falls below the
 * rate; kept values are scaled by 1 / (1 - rate) (inverted dropout, as
 * Keras). The hash of (seed, step, global sample, element) is recomputed in
 * backward, so no mask is stored, and every strategy draws the same mask
 * for a sample whichever replica holds it. */

/* splitmix64's finaliser: a well-mixed 64-bit value. */
inline ulong kiln_mix(ulong z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
    return z ^ (z >> 31);
}

inline float kiln_keep_scale(uint seed_lo, uint seed_hi, uint step, int sample, int element,
                             float rate)
{
    const ulong key = ((ulong)seed_hi << 32 | seed_lo) ^ kiln_mix((ulong)step * 0x9e3779b97f4a7c15UL + (ulong)sample);
    const ulong h = kiln_mix(key ^ ((ulong)element * 0xd1b54a32d192ed03UL));
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f);  /* [0, 1) */
    return u < rate ? 0.0f : 1.0f / (1.0f - rate);
}

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
