/* kiln_math's ops and the hard_sigmoid and hard_silu activations: forward
 * and backward against float64 on random inputs, then PyTorch 1.13's values
 * at the kinks and poles (measured with torch, listed below), and the
 * builder's refusals. */
#include "layer_check.h"

#define TOL 2e-5

typedef struct math_case {
    kiln_math_op op;
    kiln_math_options o;
    double scale, offset;   /* the inputs: uniform in offset + [-scale, scale) */
} math_case;

static const char *const op_names[] = {"sqrt", "reciprocal", "neg", "abs", "exp", "log", "erf",
                                       "pow", "hard_sigmoid", "clip"};

/* y = f(v) and dy f'(v) in float64, PyTorch 1.13's at the kinks and poles. */
static double ref_math(const math_case *c, double v, double g, double *dx)
{
    const kiln_math_options *o = &c->o;
    const double p = o->exponent;
    const double a = o->alpha == 0 && o->beta == 0 ? 0.2 : o->alpha;
    const double b = o->alpha == 0 && o->beta == 0 ? 0.5 : o->beta;
    switch (c->op) {
    case KILN_MATH_SQRT:
        *dx = g / (2 * sqrt(v));
        return sqrt(v);
    case KILN_MATH_RECIPROCAL:
        *dx = -g / (v * v);
        return 1 / v;
    case KILN_MATH_NEG:
        *dx = -g;
        return -v;
    case KILN_MATH_ABS:
        *dx = v > 0 ? g : v < 0 ? -g : 0;
        return fabs(v);
    case KILN_MATH_EXP:
        *dx = g * exp(v);
        return exp(v);
    case KILN_MATH_LOG:
        *dx = g / v;
        return log(v);
    case KILN_MATH_ERF:
        *dx = g * 2 / sqrt(3.14159265358979323846) * exp(-v * v);
        return erf(v);
    case KILN_MATH_POW:
        *dx = p == 0 ? 0 : g * p * pow(v, p - 1);
        return pow(v, p);
    case KILN_MATH_HARD_SIGMOID: {
        const double u = a * v + b;
        *dx = u > 0 && u < 1 ? g * a : 0;
        return u < 0 ? 0 : u > 1 ? 1 : u;
    }
    case KILN_MATH_CLIP: {
        const double lo = o->has_min ? o->min : -INFINITY, hi = o->has_max ? o->max : INFINITY;
        *dx = v >= lo && v <= hi ? g : 0;
        const double m = v < lo ? lo : v;
        return m > hi ? hi : m;
    }
    }
    return NAN;
}

static kiln_node build_math(kiln_model *m, kiln_node pre, const void *arg)
{
    const math_case *c = arg;
    return kiln_math(m, pre, c->op, c->o.struct_size ? &c->o : NULL);
}

static void describe(const math_case *c, char *name, size_t size)
{
    const kiln_math_options *o = &c->o;
    snprintf(name, size, "math %s (exponent %g, alpha %g, beta %g, min %s%g, max %s%g) on "
             "%g + [-%g, %g)", op_names[c->op], (double)o->exponent, (double)o->alpha,
             (double)o->beta, o->has_min ? "" : "none ", (double)o->min,
             o->has_max ? "" : "none ", (double)o->max, c->offset, c->scale, c->scale);
}

/* Random inputs of a rank-3 sample, batch 3. */
static void test_random(kiln_context *ctx, const math_case *c)
{
    const int32_t dims[] = {3, 5, 7};
    check_input_scale = c->scale;
    check_input_offset = c->offset;
    layer_run r;
    const int ok = layer_run_once(ctx, 3, dims, 3, build_math, c, &r);
    check_input_scale = 1.0;
    check_input_offset = 0.0;
    if (!ok)
        return;
    const int64_t n = r.batch * r.in_size;
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++)
        y[i] = ref_math(c, r.x[i], r.dy[i], &dx[i]);
    char name[320];
    describe(c, name, sizeof name);
    test_worst = 0;
    test_close(name, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, TOL);
    test_close(name, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", name, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

/* got equals want: both NaN, the same infinity, or within tol of it
 * (relative to 1 + |want|). */
static int same_value(double got, double want, double tol)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs(got - want) <= tol * (1 + fabs(want));
}

typedef struct special {
    float x;
    double y, dydx;   /* PyTorch 1.13's output and gradient at x */
} special;

/* The given inputs through `build`, against PyTorch's values: each
 * gradient is dy dydx (dy random, never 0), compared as such. */
static void test_specials(kiln_context *ctx, const char *what, build_fn build, const void *arg,
                          const special *s, int n)
{
    float x[16];
    for (int i = 0; i < n; i++)
        x[i] = s[i].x;
    check_fixed_x = x;
    check_fixed_n = n;
    const int32_t dims[] = {n};
    layer_run r;
    const int ok = layer_run_once(ctx, 1, dims, 1, build, arg, &r);
    check_fixed_x = NULL;
    if (!ok)
        return;
    for (int i = 0; i < n; i++) {
        const double g = r.dy[i], want_dx = s[i].dydx == 0 ? 0 : g * s[i].dydx;
        if (!same_value(r.y[i], s[i].y, 1e-6) || !same_value(r.dx[i], want_dx, 1e-6)) {
            fprintf(stderr, "%s at x = %.9g: got y %.9g, dx %.9g; PyTorch's y %.9g, dx %.9g "
                    "(dy %.9g)\n", what, (double)s[i].x, r.y[i], r.dx[i], s[i].y, want_dx, g);
            test_failures++;
        }
    }
    printf("%s: %d special inputs as PyTorch's\n", what, n);
    layer_run_free(&r);
}

static kiln_node build_activation(kiln_model *m, kiln_node pre, const void *arg)
{
    return kiln_activation_layer(m, pre, *(const kiln_activation *)arg, NULL);
}

/* A Dense of identity weights would need set weights; the activation
 * fused into the layer before is test_layers' (every activation through
 * Dense and Conv2D). Here: the activation layer, fed the kinks. */
static void test_activation_kinks(kiln_context *ctx)
{
    const float below = nextafterf(-3.0f, -4.0f), above = nextafterf(-3.0f, 0.0f);
    const float under3 = 2.9999f, over3 = nextafterf(3.0f, 4.0f);
    /* torch.nn.functional.hardsigmoid / hardswish, float64, at these x. */
    const special hard_sigmoid[] = {
        {below, 0, 0}, {-3.0f, 0, 0}, {above, (above + 3.0) / 6, 1.0 / 6},
        {0.0f, 0.5, 1.0 / 6}, {under3, (under3 + 3.0) / 6, 1.0 / 6}, {3.0f, 1, 0},
        {over3, 1, 0}, {-7.5f, 0, 0}, {7.5f, 1, 0},
        /* kiln's one difference from PyTorch (1/6 there), as kiln.h says:
         * x + 3 rounds to 6, and the gradient is read from the output */
        {nextafterf(3.0f, 0.0f), 1, 0},
    };
    const special hard_swish[] = {
        {below, 0, 0}, {-3.0f, 0, -0.5}, {above, above * (above + 3.0) / 6, above / 3.0 + 0.5},
        {0.0f, 0, 0.5}, {under3, under3 * (under3 + 3.0) / 6, under3 / 3.0 + 0.5},
        {3.0f, 3, 1.5}, {over3, over3, 1}, {-7.5f, 0, 0}, {7.5f, 7.5, 1},
    };
    const kiln_activation hs = KILN_ACTIVATION_HARD_SIGMOID, hw = KILN_ACTIVATION_HARD_SWISH;
    test_specials(ctx, "activation hard_sigmoid", build_activation, &hs, hard_sigmoid, 10);
    test_specials(ctx, "activation hard_silu", build_activation, &hw, hard_swish, 9);
}

/* Each op where PyTorch 1.13 has a kink, a pole or NaN (measured:
 * torch.sqrt, reciprocal, abs, log, pow, clamp on float64 tensors). */
static void test_math_specials(kiln_context *ctx)
{
    const double inf = INFINITY, nan = NAN;
    struct {
        math_case c;
        special s[8];
        int n;
    } cases[] = {
        {{.op = KILN_MATH_SQRT}, {{0, 0, inf}, {1, 1, 0.5}, {-1, nan, nan}}, 3},
        {{.op = KILN_MATH_RECIPROCAL}, {{0, inf, -inf}, {-0.0f, -inf, -inf}, {2, 0.5, -0.25}},
         3},
        {{.op = KILN_MATH_ABS}, {{-1, 1, -1}, {0, 0, 0}, {1, 1, 1}}, 3},
        {{.op = KILN_MATH_LOG}, {{0, -inf, inf}, {1, 0, 1}, {-1, nan, -1}}, 3},
        {{.op = KILN_MATH_NEG}, {{0, 0, -1}, {2, -2, -1}}, 2},
        {{.op = KILN_MATH_EXP}, {{0, 1, 1}, {1, 2.718281828459045, 2.718281828459045}}, 2},
        {{.op = KILN_MATH_ERF}, {{0, 0, 1.1283791670955126}, {1, 0.8427007929497149,
                                                              0.4151074974205947}}, 2},
        /* x ** 2.5: NaN below 0, gradient 0 at 0 */
        {{.op = KILN_MATH_POW, .o = {.exponent = 2.5f}}, {{-1, nan, nan}, {0, 0, 0},
                                                          {1, 1, 2.5}}, 3},
        /* x ** 3 of a negative x */
        {{.op = KILN_MATH_POW, .o = {.exponent = 3}}, {{-2, -8, 12}, {0, 0, 0}, {1, 1, 3}}, 3},
        /* x ** 0: ones, gradient 0 everywhere (0 ** 0 too) */
        {{.op = KILN_MATH_POW}, {{-1, 1, 0}, {0, 1, 0}, {1, 1, 0}}, 3},
        {{.op = KILN_MATH_POW, .o = {.exponent = -1}}, {{-1, -1, -1}, {0, inf, -inf},
                                                        {2, 0.5, -0.25}}, 3},
        {{.op = KILN_MATH_POW, .o = {.exponent = 0.5f}}, {{-1, nan, nan}, {0, 0, inf},
                                                          {4, 2, 0.25}}, 3},
        {{.op = KILN_MATH_POW, .o = {.exponent = 1}}, {{-1, -1, 1}, {0, 0, 1}}, 2},
        /* torch.clamp(x, -1, 2): 1 at the bounds */
        {{.op = KILN_MATH_CLIP, .o = {.has_min = 1, .min = -1, .has_max = 1, .max = 2}},
         {{-1.5f, -1, 0}, {-1, -1, 1}, {0, 0, 1}, {2, 2, 1}, {2.5f, 2, 0}}, 5},
        {{.op = KILN_MATH_CLIP, .o = {.has_min = 1, .min = -1}},
         {{-1.5f, -1, 0}, {-1, -1, 1}, {2.5f, 2.5, 1}}, 3},
        {{.op = KILN_MATH_CLIP, .o = {.has_max = 1, .max = 0}},
         {{-1.5f, -1.5, 1}, {0, 0, 1}, {2.5f, 0, 0}}, 3},
        /* torch.clamp(x, 2, 1): max everywhere, gradient 0 */
        {{.op = KILN_MATH_CLIP, .o = {.has_min = 1, .min = 2, .has_max = 1, .max = 1}},
         {{-3, 1, 0}, {1, 1, 0}, {1.5f, 1, 0}, {2, 1, 0}, {3, 1, 0}}, 5},
        /* Neither bound: the identity */
        {{.op = KILN_MATH_CLIP}, {{-3, -3, 1}, {3, 3, 1}}, 2},
        /* ONNX's default hard sigmoid, 0.2 x + 0.5: 0 at the kinks (+-2.5) */
        {{.op = KILN_MATH_HARD_SIGMOID}, {{-2.5f, 0, 0}, {0, 0.5, 0.2}, {2.5f, 1, 0},
                                          {-3, 0, 0}, {3, 1, 0}}, 5},
        {{.op = KILN_MATH_HARD_SIGMOID, .o = {.alpha = -0.5f, .beta = 0.25f}},
         {{-1.5f, 1, 0}, {0, 0.25, -0.5}, {0.5f, 0, 0}}, 3},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[320];
        describe(&cases[k].c, name, sizeof name);
        cases[k].c.o.struct_size = sizeof cases[k].c.o;
        test_specials(ctx, name, build_math, &cases[k].c, cases[k].s, cases[k].n);
    }
}

/* Builder refusals, each reported by compile with its reason. */
static void test_refusals(kiln_context *ctx)
{
    struct {
        kiln_math_op op;
        kiln_math_options o;
        const char *why;
    } bad[] = {
        {KILN_MATH_POW, {.exponent = NAN}, "exponent is nan; it must be finite"},
        {KILN_MATH_POW, {.exponent = INFINITY}, "exponent is inf; it must be finite"},
        {KILN_MATH_HARD_SIGMOID, {.alpha = NAN}, "alpha is nan; it must be finite"},
        {KILN_MATH_HARD_SIGMOID, {.alpha = 1, .beta = -INFINITY}, "beta is -inf"},
        {KILN_MATH_CLIP, {.has_min = 1, .min = NAN}, "clip's min is NaN"},
        {KILN_MATH_CLIP, {.has_max = 1, .max = NAN}, "clip's max is NaN"},
        {KILN_MATH_SQRT, {.exponent = 2}, "exponent is given to op sqrt, which does not take"},
        {KILN_MATH_POW, {.exponent = 2, .alpha = 1}, "alpha is given to op pow"},
        {KILN_MATH_EXP, {.has_min = 1}, "min is given to op exp"},
        {KILN_MATH_LOG, {.max = 1}, "max is given to op log"},
        {KILN_MATH_CLIP, {.min = 1}, "min without has_min is given to op clip"},
        {KILN_MATH_CLIP, {.has_min = 1, .max = 1}, "max without has_max is given to op clip"},
        {(kiln_math_op)(KILN_MATH_CLIP + 1), {0}, "op 10 is not a kiln_math_op"},
        {(kiln_math_op)-1, {0}, "op -1 is not a kiln_math_op"},
    };
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        kiln_model *m = NULL;
        CHECK_OK(ctx, kiln_model_create(ctx, &m));
        const int32_t dims[] = {4};
        kiln_input(m, 1, dims, NULL);
        bad[k].o.struct_size = sizeof bad[k].o;
        bad[k].o.name = "bad";
        CHECK(kiln_math(m, KILN_NODE_PREVIOUS, bad[k].op, &bad[k].o) == KILN_NODE_INVALID);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[k].why, kiln_model_compile(m, &co));
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'bad'", kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    /* A struct_size too short to hold struct_size. */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4};
    kiln_input(m, 1, dims, NULL);
    const kiln_math_options tiny = {.struct_size = 1};
    CHECK(kiln_math(m, KILN_NODE_PREVIOUS, KILN_MATH_EXP, &tiny) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_math_options",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const math_case cases[] = {
        {.op = KILN_MATH_SQRT, .scale = 1, .offset = 2},
        {.op = KILN_MATH_RECIPROCAL, .scale = 1, .offset = 2},
        {.op = KILN_MATH_RECIPROCAL, .scale = 1, .offset = -2.5},
        {.op = KILN_MATH_NEG, .scale = 3},
        {.op = KILN_MATH_ABS, .scale = 3},
        {.op = KILN_MATH_EXP, .scale = 3},
        {.op = KILN_MATH_LOG, .scale = 1, .offset = 2},
        {.op = KILN_MATH_LOG, .scale = 0.5, .offset = 0.51},
        {.op = KILN_MATH_ERF, .scale = 3},
        {.op = KILN_MATH_POW, .o = {.exponent = 3}, .scale = 2},
        {.op = KILN_MATH_POW, .o = {.exponent = 2}, .scale = 2},
        {.op = KILN_MATH_POW, .o = {.exponent = -2}, .scale = 1, .offset = -2},
        {.op = KILN_MATH_POW, .o = {.exponent = 2.5f}, .scale = 1, .offset = 1.5},
        {.op = KILN_MATH_POW, .o = {.exponent = -0.5f}, .scale = 1, .offset = 2},
        {.op = KILN_MATH_POW, .scale = 2},
        {.op = KILN_MATH_HARD_SIGMOID, .scale = 4},
        {.op = KILN_MATH_HARD_SIGMOID, .o = {.alpha = 1.0f / 6, .beta = 0.5f}, .scale = 5},
        {.op = KILN_MATH_HARD_SIGMOID, .o = {.alpha = -0.7f, .beta = 0.1f}, .scale = 2},
        {.op = KILN_MATH_HARD_SIGMOID, .o = {.beta = 0.3f}, .scale = 2},
        {.op = KILN_MATH_CLIP, .o = {.has_min = 1, .min = -0.5f, .has_max = 1, .max = 0.3f},
         .scale = 1},
        {.op = KILN_MATH_CLIP, .o = {.has_min = 1, .min = -0.5f}, .scale = 1},
        {.op = KILN_MATH_CLIP, .o = {.has_max = 1, .max = 0.25f}, .scale = 1},
        {.op = KILN_MATH_CLIP, .o = {.has_min = 1, .min = 0.5f, .has_max = 1, .max = -0.5f},
         .scale = 1},
        {.op = KILN_MATH_CLIP, .scale = 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        math_case c = cases[k];
        c.o.struct_size = sizeof c.o;
        test_random(ctx, &c);
    }
    /* NULL options: every op without constants, and pow by 0. */
    for (int op = KILN_MATH_SQRT; op <= KILN_MATH_CLIP; op++) {
        const math_case c = {.op = (kiln_math_op)op, .scale = 1, .offset = 2};
        check_input_offset = 2;
        layer_run r;
        const int32_t dims[] = {7};
        if (layer_run_once(ctx, 1, dims, 2, build_math, &(math_case){.op = c.op}, &r)) {
            for (int64_t i = 0; i < r.batch * r.in_size; i++) {
                double dx, y = ref_math(&c, r.x[i], r.dy[i], &dx);
                CHECK(fabs(r.y[i] - y) <= TOL * (1 + fabs(y)));
            }
            layer_run_free(&r);
        }
        check_input_offset = 0;
    }
    test_activation_kinks(ctx);
    test_math_specials(ctx);
    test_refusals(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_math");
}
