/* kiln_math's element-wise functions (layers/math.c), one value per
 * work-item. op: kiln_math_op's value; p and q its constants (POW's
 * exponent; HARD_SIGMOID's alpha and beta), lo and hi CLIP's bounds
 * (-inf and inf where absent). */
#define KILN_MATH_SQRT 0
#define KILN_MATH_RECIPROCAL 1
#define KILN_MATH_NEG 2
#define KILN_MATH_ABS 3
#define KILN_MATH_EXP 4
#define KILN_MATH_LOG 5
#define KILN_MATH_ERF 6
#define KILN_MATH_POW 7
#define KILN_MATH_HARD_SIGMOID 8
#define KILN_MATH_CLIP 9

/* x^e; an integer e by repeated products (pown: exact where pow may be
 * off by ulps, and right for a negative x). */
inline float kiln_math_pow(float x, float e)
{
    return e == rint(e) && fabs(e) < 16777216.0f ? pown(x, (int)e) : pow(x, e);
}

__kernel void kiln_math_forward(__global const float *x, __global float *y, int n, int op,
                                float p, float q, float lo, float hi)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float v = x[i];
    float r = v;
    if (op == KILN_MATH_SQRT) {
        r = sqrt(v);
    } else if (op == KILN_MATH_RECIPROCAL) {
        r = 1.0f / v;
    } else if (op == KILN_MATH_NEG) {
        r = -v;
    } else if (op == KILN_MATH_ABS) {
        r = fabs(v);
    } else if (op == KILN_MATH_EXP) {
        r = exp(v);
    } else if (op == KILN_MATH_LOG) {
        r = log(v);
    } else if (op == KILN_MATH_ERF) {
        r = erf(v);
    } else if (op == KILN_MATH_POW) {
        r = kiln_math_pow(v, p);
    } else if (op == KILN_MATH_HARD_SIGMOID) {
        const float u = p * v + q;
        r = u < 0.0f ? 0.0f : u > 1.0f ? 1.0f : u;
    } else if (op == KILN_MATH_CLIP) {   /* min(max(x, lo), hi): hi where lo > hi; NaN stays */
        const float m = v < lo ? lo : v;
        r = m > hi ? hi : m;
    }
    y[i] = r;
}

/* dx = dy f'(x), written or added (accumulate); PyTorch 1.13's values
 * where f has a kink or a pole (kiln.h's kiln_math_op says each). */
__kernel void kiln_math_backward(__global const float *x, __global const float *y,
                                 __global const float *dy, __global float *dx, int n, int op,
                                 float p, float q, float lo, float hi, int accumulate)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const float v = x[i], g = dy[i];
    float r = g;
    if (op == KILN_MATH_SQRT) {
        r = g / (2.0f * y[i]);
    } else if (op == KILN_MATH_RECIPROCAL) {
        r = -g * y[i] * y[i];
    } else if (op == KILN_MATH_NEG) {
        r = -g;
    } else if (op == KILN_MATH_ABS) {
        r = g * sign(v);
    } else if (op == KILN_MATH_EXP) {
        r = g * y[i];
    } else if (op == KILN_MATH_LOG) {
        r = g / v;
    } else if (op == KILN_MATH_ERF) {
        r = g * (1.12837916709551257f * exp(-v * v));
    } else if (op == KILN_MATH_POW) {
        r = p == 0.0f ? 0.0f : g * (p * kiln_math_pow(v, p - 1.0f));
    } else if (op == KILN_MATH_HARD_SIGMOID) {
        const float u = p * v + q;
        r = u > 0.0f && u < 1.0f ? g * p : 0.0f;
    } else if (op == KILN_MATH_CLIP) {
        r = v >= lo && v <= hi ? g : 0.0f;
    }
    dx[i] = accumulate ? dx[i] + r : r;
}
