/* kiln_math: an element-wise function of a value of any shape (sqrt,
 * reciprocal, neg, abs, exp, log, erf, pow by a constant, ONNX's general
 * hard sigmoid, clip), forward and backward in opencl/kernels/math.cl, and
 * the ONNX op of each. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define N_OPS (KILN_MATH_CLIP + 1)

/* Model files' names and ONNX's ops, indexed by kiln_math_op. */
static const char *const names[N_OPS] = {"sqrt", "reciprocal", "neg", "abs", "exp", "log",
                                         "erf", "pow", "hard_sigmoid", "clip"};
static const char *const onnx_ops[N_OPS] = {"Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log",
                                            "Erf", "Pow", "HardSigmoid", "Clip"};

typedef kiln_math_args math_config;

/* args: the kiln_math_args the builder made. */
static void math_configure(void *config, const void *args)
{
    *(math_config *)config = *(const kiln_math_args *)args;
}

static void math_describe(const void *config, void *args)
{
    *(kiln_math_args *)args = *(const math_config *)config;
}

static const kiln_layer_field math_fields[] = {
    {.key = "op", .type = KILN_FIELD_NAME, .offset = offsetof(kiln_math_args, op),
     .names = names, .n_names = N_OPS},
    {.key = "exponent", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_math_args, exponent),
     .optional = 1},
    {.key = "alpha", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_math_args, alpha),
     .optional = 1},
    {.key = "beta", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_math_args, beta),
     .optional = 1},
    {.key = "has_min", .type = KILN_FIELD_BOOL, .offset = offsetof(kiln_math_args, has_min),
     .optional = 1},
    {.key = "min", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_math_args, min),
     .optional = 1},
    {.key = "has_max", .type = KILN_FIELD_BOOL, .offset = offsetof(kiln_math_args, has_max),
     .optional = 1},
    {.key = "max", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_math_args, max),
     .optional = 1},
};

/* Each constant belongs to one op, and none is NaN. */
static kiln_status math_infer(void *config, kiln_layer_build *b)
{
    const math_config *c = config;
    if (c->op < 0 || c->op >= N_OPS) {
        snprintf(b->error, sizeof b->error, "op %d is not a kiln_math_op", (int)c->op);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    const char *name = names[c->op], *wrong = NULL;
    if (c->op != KILN_MATH_POW && c->exponent != 0.0f)
        wrong = "exponent";
    else if (c->op != KILN_MATH_HARD_SIGMOID && (c->alpha != 0.0f || c->beta != 0.0f))
        wrong = c->alpha != 0.0f ? "alpha" : "beta";
    else if (c->op != KILN_MATH_CLIP && (c->has_min || c->min != 0.0f))
        wrong = "min";
    else if (c->op != KILN_MATH_CLIP && (c->has_max || c->max != 0.0f))
        wrong = "max";
    else if (!c->has_min && c->min != 0.0f)
        wrong = "min without has_min";
    else if (!c->has_max && c->max != 0.0f)
        wrong = "max without has_max";
    if (wrong) {
        snprintf(b->error, sizeof b->error, "%s is given to op %s, which does not take it",
                 wrong, name);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    const float finite[3] = {c->exponent, c->alpha, c->beta};
    static const char *const finite_names[3] = {"exponent", "alpha", "beta"};
    for (int k = 0; k < 3; k++)
        if (!isfinite(finite[k])) {
            snprintf(b->error, sizeof b->error, "%s is %g; it must be finite", finite_names[k],
                     (double)finite[k]);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
    if (isnan(c->min) || isnan(c->max)) {
        snprintf(b->error, sizeof b->error, "clip's %s is NaN", isnan(c->min) ? "min" : "max");
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    b->out = b->in[0];
    return KILN_OK;
}

static kiln_status math_run(const math_config *c, const kiln_step *s, int back)
{
    const int64_t n = (int64_t)s->batch * kiln_shape_size(s->out_shape);
    const float p = c->op == KILN_MATH_POW ? c->exponent : c->alpha;
    const float lo = c->has_min ? c->min : -INFINITY, hi = c->has_max ? c->max : INFINITY;
    if (!back) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                                kiln_arg_int(n), kiln_arg_int(c->op), kiln_arg_float(p),
                                kiln_arg_float(c->beta), kiln_arg_float(lo), kiln_arg_float(hi));
        return kiln_run1(s->dev, "math", "kiln_math_forward", (size_t)n, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_buffer(s->d_out), kiln_arg_buffer(s->d_in[0]),
                            kiln_arg_int(n), kiln_arg_int(c->op), kiln_arg_float(p),
                            kiln_arg_float(c->beta), kiln_arg_float(lo), kiln_arg_float(hi),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return kiln_run1(s->dev, "math", "kiln_math_backward", (size_t)n, a);
}

static kiln_status math_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    return math_run(config, s, 0);
}

static kiln_status math_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    return s->d_in[0] ? math_run(config, s, 1) : KILN_OK;
}

static uint64_t math_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return (uint64_t)kiln_shape_size(in_shape);
}

/* The op of ONNX's name, in either layout; Pow's exponent and Clip's
 * bounds as initializers named after the layer. */
static void math_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const math_config *c = g->layers[i].config;
    const int layout = kiln_onnx_input_layout(g, i, 0);
    const char *in[3] = {kiln_onnx_input_value(g, i, 0, layout), "", ""};
    size_t n_in = 1;
    const char *name = g->layers[i].name;
    if (c->op == KILN_MATH_POW) {
        in[1] = kiln_onnx_add_floats(g, kiln_onnx_printf(g, "%s/exponent", name), 0, NULL,
                                     &c->exponent);
        n_in = 2;
    } else if (c->op == KILN_MATH_CLIP) {
        if (c->has_min)
            in[1] = kiln_onnx_add_floats(g, kiln_onnx_printf(g, "%s/min", name), 0, NULL,
                                         &c->min);
        if (c->has_max)
            in[2] = kiln_onnx_add_floats(g, kiln_onnx_printf(g, "%s/max", name), 0, NULL,
                                         &c->max);
        n_in = c->has_max ? 3 : c->has_min ? 2 : 1;
    }
    const char *out = kiln_onnx_output(g, i, layout);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, onnx_ops[c->op], in, n_in, out);
    if (c->op == KILN_MATH_HARD_SIGMOID) {
        kiln_onnx_attr_float(g, nd, "alpha", c->alpha);
        kiln_onnx_attr_float(g, nd, "beta", c->beta);
    }
    kiln_onnx_activate(g, i, layout, out);
}

/* Sqrt, Reciprocal, Neg, Abs, Exp, Log, Erf; Pow by a constant of one
 * value; HardSigmoid of any alpha and beta; Clip of constant bounds. */
static kiln_status math_import_onnx(kiln_onnx_import *imp)
{
    int op = 0;
    while (op < N_OPS && strcmp(onnx_ops[op], imp->op) != 0)
        op++;
    if (op == N_OPS)
        return kiln_onnx_refuse(imp, "not one of kiln_math's ops");
    kiln_status st = kiln_onnx_check_attrs(imp, op == KILN_MATH_HARD_SIGMOID ? "alpha:f,beta:f"
                                                : op == KILN_MATH_CLIP ? "min:f,max:f" : "");
    if (st != KILN_OK)
        return st;
    kiln_math_args *a = (kiln_math_args *)(void *)imp->args.bytes;
    *a = (kiln_math_args){.op = op};
    if (op == KILN_MATH_POW) {
        if ((st = kiln_onnx_need_constant(imp, 1, "exponent", 0)) != KILN_OK)
            return st;
        const kiln_onnx_in *e = &imp->in[1];
        int64_t size = 1;
        for (int d = 0; d < e->rank; d++)
            size *= e->dims[d];
        if (size != 1)
            return kiln_onnx_refuse(imp, "input 1 (exponent) '%s' holds %lld values; kiln "
                                    "raises to one constant exponent", e->name,
                                    (long long)size);
        a->exponent = e->data[0];
    } else if (op == KILN_MATH_HARD_SIGMOID) {
        a->alpha = kiln_onnx_attr_f(imp, "alpha", 0.2f);
        a->beta = kiln_onnx_attr_f(imp, "beta", 0.5f);
        if (a->alpha == 0.0f && a->beta == 0.0f)
            return kiln_onnx_refuse(imp, "alpha and beta are 0 (a constant 0)");
    } else if (op == KILN_MATH_CLIP) {
        float lo, hi;
        if ((st = kiln_onnx_clip_bounds(imp, &lo, &hi)) != KILN_OK)
            return st;
        a->has_min = lo != -INFINITY;
        a->min = a->has_min ? lo : 0.0f;
        a->has_max = hi != INFINITY;
        a->max = a->has_max ? hi : 0.0f;
    }
    imp->want = KILN_ONNX_WANT_ANY;
    imp->n_data = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_math = {
    .kind = "math", .config_size = sizeof(math_config), .min_inputs = 1, .max_inputs = 1,
    .configure = math_configure, .describe = math_describe, .args_size = sizeof(kiln_math_args),
    KILN_FIELDS(math_fields), .infer = math_infer, .forward = math_forward,
    .backward = math_backward, .flops = math_flops, .export_onnx = math_export_onnx,
    .import_onnx = math_import_onnx,
};
