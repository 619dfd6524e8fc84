/* Shared by every kiln kernel file: passed as the first source string. */
/* Activation ids: the values of kiln_activation in kiln.h. */
#define KILN_ACT_LINEAR 0
#define KILN_ACT_RELU 1
#define KILN_ACT_SIGMOID 2
#define KILN_ACT_TANH 3
#define KILN_ACT_SOFTMAX 4
#define KILN_ACT_GELU 5
#define KILN_ACT_GELU_TANH 6
#define KILN_ACT_LEAKY_RELU 7
#define KILN_ACT_SILU 8
#define KILN_ACT_RELU6 9
#define KILN_ACT_LOG_SOFTMAX 10
#define KILN_ACT_HARD_SIGMOID 11
#define KILN_ACT_HARD_SWISH 12

/* Keras's leaky_relu default, and GELU's constants. */
#define KILN_LEAKY_SLOPE 0.2f
#define KILN_SQRT_HALF 0.70710678118654752f
#define KILN_SQRT_2_OVER_PI 0.79788456080286536f
#define KILN_GELU_CUBIC 0.044715f

/* Stable logistic function for either sign of x. Both sides are computed
 * and one is selected, not branched to: PoCL then runs the work-items'
 * exp in SIMD lanes (a branch made it a scalar call each: SiLU ran 10x
 * slower than ReLU). */
inline float kiln_sigmoid(float x)
{
    const float e = exp(-fabs(x));
    const float positive = 1.0f / (1.0f + e), negative = e / (1.0f + e);
    return x >= 0.0f ? positive : negative;
}

/* erfc(x) to a relative error below 1.2e-7 (a Chebyshev fit of
 * exp(z^2) erfc(z) in t = 1 / (1 + z/2), z = |x|, from Numerical Recipes'
 * erfcc), without branches: the OpenCL library's erfc is a scalar call
 * per work-item on PoCL, 40% of a GPT-style model's step in GELU. */
inline float kiln_erfc(float x)
{
    const float z = fabs(x), t = 1.0f / (1.0f + 0.5f * z);
    const float p = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f +
                    t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f +
                    t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    const float r = t * exp(-z * z + p);
    return x >= 0.0f ? r : 2.0f - r;
}

/* The same two on eight lanes, as explicit vectors: a kernel that takes
 * eight values per work-item reaches the SIMD units whatever PoCL makes of
 * its work-item loop. */
inline float8 kiln_sigmoid8(float8 x)
{
    const float8 e = exp(-fabs(x));
    return select(e / (1.0f + e), 1.0f / (1.0f + e), isgreaterequal(x, (float8)(0.0f)));
}

inline float8 kiln_erfc8(float8 x)
{
    const float8 z = fabs(x), t = 1.0f / (1.0f + 0.5f * z);
    const float8 p = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f +
                     t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f +
                     t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    const float8 r = t * exp(-z * z + p);
    return select(2.0f - r, r, isgreaterequal(x, (float8)(0.0f)));
}

/* The output a window's tap reaches from an input coordinate: tap k
 * (dilation dil) of output o's window covers input o * stride - pad +
 * k * dil, so input x is read by tap k of output (x + pad - k * dil) /
 * stride when that divides evenly and lies in [0, O). That output, or -1
 * (the adjoint kernels: col2im, the input gradients). */
inline int kiln_tap_output(int x, int k, int pad, int dil, int stride, int O)
{
    const int t = x + pad - k * dil;
    return t < 0 || t % stride || t / stride >= O ? -1 : t / stride;
}

/* An element-wise activation (not softmax) of one value, and of eight:
 * layers that apply their activation in their own forward pass call these
 * (the same arithmetic as kiln_activation_forward, lane by lane). */
inline float kiln_activate(float v, int act)
{
    if (act == KILN_ACT_RELU)
        return fmax(v, 0.0f);
    if (act == KILN_ACT_SIGMOID)
        return kiln_sigmoid(v);
    if (act == KILN_ACT_TANH)
        return tanh(v);
    if (act == KILN_ACT_GELU)   /* erfc: no cancellation for negative v */
        return 0.5f * v * kiln_erfc(-v * KILN_SQRT_HALF);
    if (act == KILN_ACT_GELU_TANH)   /* 0.5 (1 + tanh u) = sigmoid(2u), without cancellation */
        return v * kiln_sigmoid(2.0f * KILN_SQRT_2_OVER_PI * (v + KILN_GELU_CUBIC * v * v * v));
    if (act == KILN_ACT_LEAKY_RELU)
        return v > 0.0f ? v : KILN_LEAKY_SLOPE * v;
    if (act == KILN_ACT_SILU)
        return v * kiln_sigmoid(v);
    if (act == KILN_ACT_RELU6)
        return fmin(fmax(v, 0.0f), 6.0f);
    if (act == KILN_ACT_HARD_SIGMOID)   /* relu6(x + 3) / 6 */
        return fmin(fmax(v + 3.0f, 0.0f), 6.0f) / 6.0f;
    if (act == KILN_ACT_HARD_SWISH)
        return v * (fmin(fmax(v + 3.0f, 0.0f), 6.0f) / 6.0f);
    return v;
}

inline float8 kiln_activate8(float8 v, int act)
{
    if (act == KILN_ACT_RELU)
        return fmax(v, (float8)(0.0f));
    if (act == KILN_ACT_SIGMOID)
        return kiln_sigmoid8(v);
    if (act == KILN_ACT_TANH)
        return tanh(v);
    if (act == KILN_ACT_GELU)
        return 0.5f * v * kiln_erfc8(-v * KILN_SQRT_HALF);
    if (act == KILN_ACT_GELU_TANH)
        return v * kiln_sigmoid8(2.0f * KILN_SQRT_2_OVER_PI * (v + KILN_GELU_CUBIC * v * v * v));
    if (act == KILN_ACT_LEAKY_RELU)
        return select(KILN_LEAKY_SLOPE * v, v, isgreater(v, (float8)(0.0f)));
    if (act == KILN_ACT_SILU)
        return v * kiln_sigmoid8(v);
    if (act == KILN_ACT_RELU6)
        return fmin(fmax(v, (float8)(0.0f)), (float8)(6.0f));
    if (act == KILN_ACT_HARD_SIGMOID)
        return fmin(fmax(v + 3.0f, (float8)(0.0f)), (float8)(6.0f)) / 6.0f;
    if (act == KILN_ACT_HARD_SWISH)
        return v * (fmin(fmax(v + 3.0f, (float8)(0.0f)), (float8)(6.0f)) / 6.0f);
    return v;
}

/* Up to N consecutive values (the rest zero) as one vector, and their
 * store: kernels that work on channels or filters in blocks of eight reach a
 * CPU device's SIMD units this way (PoCL does not vectorise such loops across
 * work-items), at no cost on a GPU; the GEMM's tiles use 16. */
#define KILN_LOAD_STORE(N)                                                                     \
    inline float##N kiln_load##N(__global const float *p, int count)                           \
    {                                                                                          \
        if (count >= N)                                                                        \
            return vload##N(0, p);                                                             \
        float v[N];                                                                            \
        for (int j = 0; j < N; j++)                                                            \
            v[j] = j < count ? p[j] : 0.0f;                                                    \
        return vload##N(0, v);                                                                 \
    }                                                                                          \
                                                                                               \
    inline void kiln_store##N(__global float *p, float##N x, int count)                        \
    {                                                                                          \
        if (count >= N) {                                                                      \
            vstore##N(x, 0, p);                                                                \
            return;                                                                            \
        }                                                                                      \
        float v[N];                                                                            \
        vstore##N(x, 0, v);                                                                    \
        for (int j = 0; j < count; j++)                                                        \
            p[j] = v[j];                                                                       \
    }
KILN_LOAD_STORE(8)
KILN_LOAD_STORE(16)

/* The sum of a vector's eight lanes, pairwise. */
inline float kiln_sum8(float8 v)
{
    const float4 s = v.lo + v.hi;
    const float2 t = s.lo + s.hi;
    return t.x + t.y;
}

inline int8 kiln_load8i(__global const int *p, int count)
{
    if (count >= 8)
        return vload8(0, p);
    int v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < count; j++)
        v[j] = p[j];
    return vload8(0, v);
}

inline void kiln_store8i(__global int *p, int8 x, int count)
{
    if (count >= 8) {
        vstore8(x, 0, p);
        return;
    }
    int v[8];
    vstore8(x, 0, v);
    for (int j = 0; j < count; j++)
        p[j] = v[j];
}

/* splitmix64's finaliser: a well-mixed 64-bit value. */
inline ulong kiln_mix(ulong z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
    return z ^ (z >> 31);
}

/* Dropout's keep-or-zero draw (dropout.cl, attention.cl): element `element`
 * of global sample `sample` at training step `step`; 0 or 1 / (1 - rate). */
inline float kiln_keep_scale(uint seed_lo, uint seed_hi, uint step, int sample, int element,
                             float rate)
{
    const ulong key = ((ulong)seed_hi << 32 | seed_lo) ^
                      kiln_mix((ulong)step * 0x9e3779b97f4a7c15UL + (ulong)sample);
    const ulong h = kiln_mix(key ^ ((ulong)element * 0xd1b54a32d192ed03UL));
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f);  /* [0, 1) */
    return u < rate ? 0.0f : 1.0f / (1.0f - rate);
}

/* Kernels that give a row a work-group (the GPU variants of softmax, the
 * categorical losses and metrics over a vocabulary, dot) run groups of
 * exactly this many lanes. */
#define KILN_ROW_LANES 64

/* Every lane's `v` merged over the group (their maximum when `largest`,
 * else their sum), in a fixed order whatever the device, returned to every
 * lane; `merge` holds KILN_ROW_LANES floats and is free again on return.
 * The whole group must call it. */
inline float kiln_row_merge(__local float *merge, float v, int largest)
{
    const int lane = get_local_id(0);
    merge[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = KILN_ROW_LANES / 2; step > 0; step /= 2) {
        if (lane < step)
            merge[lane] = largest ? fmax(merge[lane], merge[lane + step])
                                  : merge[lane] + merge[lane + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = merge[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

/* The index of the first of the largest of v[0..cols), as loss.cl's
 * kiln_argmax finds it scanning from 0, returned to every lane with that
 * value in *top: each lane keeps the first maximum of its own values, and a
 * tie between lanes goes to the lower index. NaNs as the scan takes them:
 * passed over, unless v[0] is one (the scan's start; then 0). `merge` and
 * `where` hold KILN_ROW_LANES each and are free again on return. The whole
 * group must call it. */
inline int kiln_row_argmax(__local float *merge, __local int *where, __global const float *v,
                           int cols, float *top)
{
    const int lane = get_local_id(0);
    float m = -INFINITY;
    int best = cols;   /* none yet: a lane of NaNs keeps it and loses every tie */
    for (int j = lane; j < cols; j += KILN_ROW_LANES)
        if (best == cols ? !isnan(v[j]) : v[j] > m) {
            m = v[j];
            best = j;
        }
    merge[lane] = m;
    where[lane] = best;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = KILN_ROW_LANES / 2; step > 0; step /= 2) {
        if (lane < step) {
            const float o = merge[lane + step];
            const int w = where[lane + step];
            if (o > merge[lane] || (o == merge[lane] && w < where[lane])) {
                merge[lane] = o;
                where[lane] = w;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    *top = isnan(v[0]) ? v[0] : merge[0];
    best = isnan(v[0]) ? 0 : where[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return best;
}

/* Pooling (max_pooling2d.cl, average_pooling2d.cl): the cells inside the
 * image of output pixel (oy, ox)'s window, rows [s0, s1) and columns
 * [s2, s3). */
inline int4 kiln_pool_window(int oy, int ox, int H, int W, int PH, int PW, int stride_h,
                             int stride_w, int pad_top, int pad_left)
{
    const int y = oy * stride_h - pad_top, x = ox * stride_w - pad_left;
    return (int4)(max(y, 0), min(y + PH, H), max(x, 0), min(x + PW, W));
}

/* The output pixels whose window holds input pixel (y, x): rows s0 to s1
 * and columns s2 to s3, inclusive (oy * stride - pad <= y < oy * stride -
 * pad + PH). */
inline int4 kiln_pool_outputs(int y, int x, int OH, int OW, int PH, int PW, int stride_h,
                              int stride_w, int pad_top, int pad_left)
{
    return (int4)(max(0, (y + pad_top - PH + stride_h) / stride_h),
                  min(OH - 1, (y + pad_top) / stride_h),
                  max(0, (x + pad_left - PW + stride_w) / stride_w),
                  min(OW - 1, (x + pad_left) / stride_w));
}
