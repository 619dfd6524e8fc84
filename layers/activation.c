/* Activation as a layer: an identity whose node carries the activation, so
 * the runtime treats it exactly as a layer's own activation option: applied
 * here when the runtime lets the layer fuse it, else by the runtime (and
 * softmax or sigmoid fused with the loss). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <math.h>
#include <string.h>

typedef struct activation_config {
    int32_t unused;
} activation_config;

static kiln_status activation_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    b->out = b->in[0];
    return KILN_OK;
}

static kiln_status activation_forward(const void *config, void *replica, const kiln_step *s)
{
    if (s->activation == KILN_ACTIVATION_LINEAR)
        return kiln_identity_forward(config, replica, s);
    return kiln_step_activate(s, s->in[0]);
}

/* Clip's bounds, from its min and max inputs (opset 11 on: constants) or
 * attributes (before); a bound not given is none (+-infinity). */
static kiln_status clip_bounds(kiln_onnx_import *imp, float *lo, float *hi)
{
    *lo = kiln_onnx_attr_f(imp, "min", -INFINITY);
    *hi = kiln_onnx_attr_f(imp, "max", INFINITY);
    float *bound[] = {lo, hi};
    static const char *const what[] = {"min", "max"};
    for (int k = 1; k <= 2; k++) {
        const kiln_status st = kiln_onnx_need_constant(imp, k, what[k - 1], 1);
        if (st != KILN_OK)
            return st;
        if (k >= imp->n_in || !*imp->in[k].name)
            continue;
        const kiln_onnx_in *t = &imp->in[k];
        int64_t size = 1;
        for (int d = 0; d < t->rank; d++)
            size *= t->dims[d];
        if (size != 1)
            return kiln_onnx_refuse(imp, "input %d (%s) '%s' holds %lld values; Clip takes one",
                                    k, what[k - 1], t->name, (long long)size);
        *bound[k - 1] = t->data[0];
    }
    return KILN_OK;
}

/* Relu, Sigmoid, Tanh, LeakyRelu (kiln's slope, 0.2, only), Softmax over
 * the last axis, and Clip as ReLU6 (0, 6) or ReLU (0, none). */
static kiln_status activation_import_onnx(kiln_onnx_import *imp)
{
    static const struct { const char *op; kiln_activation act; const char *attrs; } ops[] = {
        {.op = "Relu", .act = KILN_ACTIVATION_RELU, .attrs = ""},
        {.op = "Sigmoid", .act = KILN_ACTIVATION_SIGMOID, .attrs = ""},
        {.op = "Tanh", .act = KILN_ACTIVATION_TANH, .attrs = ""},
        {.op = "LeakyRelu", .act = KILN_ACTIVATION_LEAKY_RELU, .attrs = "alpha:f"},
        {.op = "Softmax", .act = KILN_ACTIVATION_SOFTMAX, .attrs = "axis:i"},
        {.op = "Clip", .act = KILN_ACTIVATION_RELU6, .attrs = "min:f,max:f"},
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
    if (act == KILN_ACTIVATION_RELU6) {
        float lo, hi;
        const kiln_status bounds = clip_bounds(imp, &lo, &hi);
        if (bounds != KILN_OK)
            return bounds;
        if (lo != 0.0f || (hi != 6.0f && hi != INFINITY))
            return kiln_onnx_refuse(imp, "Clip's bounds are (%g, %g); kiln imports (0, 6) as "
                                    "ReLU6 and (0, none) as ReLU", (double)lo, (double)hi);
        act = hi == INFINITY ? KILN_ACTIVATION_RELU : KILN_ACTIVATION_RELU6;
    }
    const float alpha = kiln_onnx_attr_f(imp, "alpha", 0.01f);
    if (ops[k].act == KILN_ACTIVATION_LEAKY_RELU && alpha != 0.2f)
        return kiln_onnx_refuse(imp, "attribute 'alpha' is %g; kiln's leaky_relu has slope 0.2 "
                                "only", (double)alpha);
    imp->want = KILN_ONNX_WANT_ANY;
    if (ops[k].act == KILN_ACTIVATION_SOFTMAX) {
        /* Before opset 13 Softmax flattened the axes from `axis` on (default
         * 1): the last axis alone only when axis is the last. */
        const int rank = imp->in[0].rank;
        int64_t axis = kiln_onnx_attr_i(imp, "axis", imp->opset < 13 ? 1 : -1);
        if (axis < 0)
            axis += rank;
        if (axis != rank - 1)
            return kiln_onnx_refuse(imp, "attribute 'axis' is %lld of a %d-D input; kiln "
                                    "supports the last axis", (long long)kiln_onnx_attr_i(imp,
                                    "axis", imp->opset < 13 ? 1 : -1), rank);
        imp->want = KILN_ONNX_WANT_ONNX;
    }
    imp->activation = act;
    imp->n_data = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_activation = {
    .kind = "activation", .config_size = sizeof(activation_config), .min_inputs = 1,
    .max_inputs = 1, .infer = activation_infer, .forward = activation_forward,
    .backward = kiln_identity_backward, .fuses_activation = kiln_layer_fuses_activation,
    .takes_activation = 1, .export_onnx = kiln_onnx_identity,
    .import_onnx = activation_import_onnx,
};
