/* Activation as a layer: an identity whose node carries the activation, so
 * the runtime treats it exactly as a layer's own activation option: applied
 * here when the runtime lets the layer fuse it, else by the runtime (and
 * softmax or sigmoid fused with the loss). A leaky_relu with a slope other
 * than Keras's 0.2 is the layer's own function (the node's activation
 * linear): the runtime's activations take no argument. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

typedef struct activation_config {
    float negative_slope;   /* 0: none of its own */
} activation_config;

/* args: the kiln_activation_layer_options the builder checked. */
static void activation_configure(void *config, const void *args)
{
    ((activation_config *)config)->negative_slope =
        ((const kiln_activation_layer_options *)args)->negative_slope;
}

static void activation_describe(const void *config, void *args)
{
    kiln_activation_layer_options *o = args;
    o->struct_size = sizeof *o;
    o->negative_slope = ((const activation_config *)config)->negative_slope;
}

static const kiln_layer_field activation_fields[] = {
    {.key = "negative_slope", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_activation_layer_options, negative_slope), .optional = 1},
};

static kiln_status activation_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    b->out = b->in[0];
    return KILN_OK;
}

static kiln_status activation_forward(const void *config, void *replica, const kiln_step *s)
{
    const activation_config *c = config;
    if (c->negative_slope != 0.0f) {
        const int64_t n = s->batch * kiln_shape_size(s->out_shape);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                                kiln_arg_int(n), kiln_arg_float(c->negative_slope));
        return kiln_run1(s->dev, "activation", "kiln_activation_leaky_forward",
                         (size_t)(n + 7) / 8, a);
    }
    if (s->activation == KILN_ACTIVATION_LINEAR)
        return kiln_identity_forward(config, replica, s);
    return kiln_step_activate(s, s->in[0]);
}

/* The slope's gradient from the input (a slope <= 0 hides x's sign in y). */
static kiln_status activation_backward(const void *config, void *replica, const kiln_step *s)
{
    const activation_config *c = config;
    if (c->negative_slope == 0.0f)
        return kiln_identity_backward(config, replica, s);
    if (!s->d_in[0])
        return KILN_OK;
    const int64_t n = s->batch * kiln_shape_size(s->out_shape);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(s->d_in[0]), kiln_arg_int(n),
                            kiln_arg_float(c->negative_slope),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return kiln_run1(s->dev, "activation", "kiln_activation_leaky_backward",
                     (size_t)(n + 7) / 8, a);
}

/* LeakyRelu with its alpha as the layer's slope. */
static void activation_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const activation_config *c = g->layers[i].config;
    if (c->negative_slope == 0.0f) {
        kiln_onnx_identity(g, i);
        return;
    }
    const int layout = kiln_onnx_input_layout(g, i, 0);
    const char *x = kiln_onnx_input_value(g, i, 0, layout);
    const char *out = kiln_onnx_output(g, i, layout);
    kiln_onnx_attr_float(g, kiln_onnx_add_node(g, "LeakyRelu", &x, 1, out), "alpha",
                         c->negative_slope);
    kiln_onnx_activate(g, i, layout, out);
}

/* Relu, Sigmoid, Tanh, LeakyRelu (any finite alpha), Softmax and
 * LogSoftmax over kiln's last axis, Clip as ReLU6 (0, 6) or ReLU (0, none),
 * HardSigmoid of alpha 1/6 and beta 0.5, and HardSwish. The importer takes
 * a Clip or HardSigmoid refused here as kiln_math's (layers/math.c). */
static kiln_status activation_import_onnx(kiln_onnx_import *imp)
{
    static const struct { const char *op; kiln_activation act; const char *attrs; } ops[] = {
        {.op = "Relu", .act = KILN_ACTIVATION_RELU, .attrs = ""},
        {.op = "Sigmoid", .act = KILN_ACTIVATION_SIGMOID, .attrs = ""},
        {.op = "Tanh", .act = KILN_ACTIVATION_TANH, .attrs = ""},
        {.op = "Gelu", .act = KILN_ACTIVATION_GELU, .attrs = "approximate:s"},
        {.op = "LeakyRelu", .act = KILN_ACTIVATION_LEAKY_RELU, .attrs = "alpha:f"},
        {.op = "Softmax", .act = KILN_ACTIVATION_SOFTMAX, .attrs = "axis:i"},
        {.op = "LogSoftmax", .act = KILN_ACTIVATION_LOG_SOFTMAX, .attrs = "axis:i"},
        {.op = "Clip", .act = KILN_ACTIVATION_RELU6, .attrs = "min:f,max:f"},
        {.op = "HardSigmoid", .act = KILN_ACTIVATION_HARD_SIGMOID, .attrs = "alpha:f,beta:f"},
        {.op = "HardSwish", .act = KILN_ACTIVATION_HARD_SWISH, .attrs = ""},
    };
    size_t k = 0;
    while (k < sizeof ops / sizeof ops[0] && strcmp(ops[k].op, imp->op) != 0)
        k++;
    if (k == sizeof ops / sizeof ops[0])
        return kiln_onnx_refuse(imp, "not an activation");
    const kiln_status st = kiln_onnx_check_attrs(imp, ops[k].attrs);
    if (st != KILN_OK)
        return st;
    kiln_activation act = ops[k].act;
    if (act == KILN_ACTIVATION_GELU) {   /* opset 20's, and the chains before it */
        const kiln_onnx_in_attr *a = kiln_onnx_find_attr(imp, "approximate");
        if (a && strcmp(a->s, "tanh") == 0)
            act = KILN_ACTIVATION_GELU_TANH;
        else if (a && strcmp(a->s, "none") != 0)
            return kiln_onnx_refuse(imp, "attribute 'approximate' is '%s'; ONNX defines "
                                    "'none' and 'tanh'", a->s);
    }
    if (act == KILN_ACTIVATION_RELU6) {
        float lo, hi;
        const kiln_status bounds = kiln_onnx_clip_bounds(imp, &lo, &hi);
        if (bounds != KILN_OK)
            return bounds;
        if (lo != 0.0f || (hi != 6.0f && hi != INFINITY))
            return kiln_onnx_refuse(imp, "Clip's bounds are (%g, %g); kiln imports (0, 6) as "
                                    "ReLU6 and (0, none) as ReLU", (double)lo, (double)hi);
        act = hi == INFINITY ? KILN_ACTIVATION_RELU : KILN_ACTIVATION_RELU6;
    }
    if (act == KILN_ACTIVATION_HARD_SIGMOID) {   /* any other alpha, beta: kiln_math's */
        const float alpha = kiln_onnx_attr_f(imp, "alpha", 0.2f);
        const float beta = kiln_onnx_attr_f(imp, "beta", 0.5f);
        if (alpha != 1.0f / 6.0f || beta != 0.5f)
            return kiln_onnx_refuse(imp, "alpha %g and beta %g; the hard_sigmoid activation is "
                                    "alpha 1/6 and beta 0.5", (double)alpha, (double)beta);
    }
    kiln_activation_layer_options *o = (kiln_activation_layer_options *)imp->args.bytes;
    *o = (kiln_activation_layer_options){.struct_size = sizeof *o};
    if (act == KILN_ACTIVATION_LEAKY_RELU) {
        const float alpha = kiln_onnx_attr_f(imp, "alpha", 0.01f);
        if (!isfinite(alpha))
            return kiln_onnx_refuse(imp, "attribute 'alpha' is %g; kiln supports finite slopes",
                                    (double)alpha);
        /* Slope 0 is ReLU; 0.2 the leaky_relu activation; any other the
         * layer's own slope. */
        o->negative_slope = alpha == 0.2f ? 0.0f : alpha;
        act = alpha == 0.0f ? KILN_ACTIVATION_RELU
              : alpha == 0.2f ? KILN_ACTIVATION_LEAKY_RELU : KILN_ACTIVATION_LINEAR;
    }
    imp->want = KILN_ONNX_WANT_ANY;
    if (act == KILN_ACTIVATION_SOFTMAX || act == KILN_ACTIVATION_LOG_SOFTMAX) {
        /* Over kiln's last axis: ONNX's last, or axis 1 of a 4-D value,
         * which kiln holds channels-last (held in ONNX's order alone, the
         * softmax layer takes it there, with no permute). Before opset 13 (Log)Softmax
         * flattened the axes from `axis` on (default 1): the last axis
         * alone only when axis is the last. */
        const int rank = imp->in[0].rank;
        const int64_t given = kiln_onnx_attr_i(imp, "axis", imp->opset < 13 ? 1 : -1);
        const int64_t axis = given < 0 ? given + rank : given;
        if (axis == rank - 1) {
            imp->want = KILN_ONNX_WANT_ONNX;
        } else if (axis == 1 && rank == 4 && imp->opset >= 13 &&
                   imp->in[0].held != KILN_ONNX_WANT_ONNX) {
            imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
        } else {
            return kiln_onnx_refuse(imp, "attribute 'axis' is %lld of a %d-D input; kiln "
                                    "supports the last axis, and axis 1 (the channels) of a "
                                    "4-D input from opset 13 on", (long long)given, rank);
        }
    }
    imp->activation = act;
    imp->n_data = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_activation = {
    .kind = "activation", .config_size = sizeof(activation_config), .min_inputs = 1,
    .max_inputs = 1, .configure = activation_configure, .describe = activation_describe,
    .args_size = sizeof(kiln_activation_layer_options), KILN_FIELDS(activation_fields),
    .infer = activation_infer, .forward = activation_forward,
    .backward = activation_backward, .fuses_activation = kiln_layer_fuses_activation,
    .takes_activation = 1, .export_onnx = activation_export_onnx,
    .import_onnx = activation_import_onnx,
};
