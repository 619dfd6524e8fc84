/* Shared by every kiln kernel file: passed as the first source string. */
/* Activation ids: the values of kiln_activation in kiln.h. */
#define KILN_ACT_LINEAR 0
#define KILN_ACT_RELU 1
#define KILN_ACT_SIGMOID 2
#define KILN_ACT_TANH 3
#define KILN_ACT_SOFTMAX 4

/* Stable logistic function for either sign of x. */
inline float kiln_sigmoid(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + exp(-x));
    const float e = exp(x);
    return e / (1.0f + e);
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
    return v;
}

inline float8 kiln_activate8(float8 v, int act)
{
    if (act == KILN_ACT_RELU)
        return fmax(v, (float8)(0.0f));
    if (act == KILN_ACT_SIGMOID) {
        const float8 e = exp(-fabs(v));   /* kiln_sigmoid for either sign */
        return select(e / (1.0f + e), 1.0f / (1.0f + e), isgreaterequal(v, (float8)(0.0f)));
    }
    if (act == KILN_ACT_TANH)
        return tanh(v);
    return v;
}

/* Up to eight consecutive values (the rest zero) as one vector, and their
 * store: kernels that work on channels or filters in blocks of eight reach a
 * CPU device's SIMD units this way (PoCL does not vectorise such loops across
 * work-items), at no cost on a GPU. */
inline float8 kiln_load8(__global const float *p, int count)
{
    if (count >= 8)
        return vload8(0, p);
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < count; j++)
        v[j] = p[j];
    return vload8(0, v);
}

inline void kiln_store8(__global float *p, float8 x, int count)
{
    if (count >= 8) {
        vstore8(x, 0, p);
        return;
    }
    float v[8];
    vstore8(x, 0, v);
    for (int j = 0; j < count; j++)
        p[j] = v[j];
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
