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
