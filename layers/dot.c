/* Dot: Keras's Dot(axes=-1) of two samples of D values each, (1,) out; the
 * two towers of a recommender meet here. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>

typedef struct dot_config {
    int32_t unused;
} dot_config;

static kiln_status dot_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    const kiln_shape *x = &b->in[0], *y = &b->in[1];
    char a[64], c[64];
    if (x->rank != 1 || y->rank != 1 || x->dims[0] != y->dims[0]) {
        snprintf(b->error, sizeof b->error, "its inputs are %s and %s; Dot takes two of one "
                 "length (D,) (flatten or reshape them first)", kiln_shape_str(x, a, sizeof a),
                 kiln_shape_str(y, c, sizeof c));
        return KILN_ERROR_SHAPE;
    }
    b->out = (kiln_shape){.rank = 1, .dims = {1}};
    return KILN_OK;
}

static kiln_status dot_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const int64_t d = s->in_shape[0].dims[0];
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->in[1]),
                            kiln_arg_buffer(s->out), kiln_arg_int(s->batch), kiln_arg_int(d));
    return kiln_run_per_row(s->dev, "dot", "kiln_dot_forward", (size_t)s->batch, (size_t)d, a);
}

/* Each input's gradient is the other input scaled by the output's; the
 * same node given twice gets both (the runtime asks the second to add). */
static kiln_status dot_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const int64_t d = s->in_shape[0].dims[0];
    const size_t range[2] = {(size_t)d, (size_t)s->batch};
    kiln_status st = KILN_OK;
    for (int k = 0; k < 2 && st == KILN_OK; k++) {
        if (!s->d_in[k])
            continue;
        kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[1 - k]), kiln_arg_buffer(s->d_out),
                                kiln_arg_buffer(s->d_in[k]), kiln_arg_int(s->batch),
                                kiln_arg_int(d), kiln_arg_int(s->d_in_accumulate[k]));
        st = kiln_run(s->dev, "dot", "kiln_dot_backward", 2, range, a);
    }
    return st;
}

static uint64_t dot_flops(const void *config, const kiln_shape *in)
{
    (void)config;
    return 2 * (uint64_t)in->dims[0];
}

/* Mul, then ReduceSum over the last axis (opset 13 takes the axes as an
 * input) keeping it: (batch, 1). Samples are rank 1, so either layout. */
static void dot_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *factors[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL),
                              kiln_onnx_input_value(g, i, 1, KILN_ONNX_CL)};
    const char *product = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/product",
                                                                    g->layers[i].name));
    kiln_onnx_add_node(g, "Mul", factors, 2, product);
    const int64_t last = -1;
    const char *args[2] = {product, kiln_onnx_int64s(g, i, "axes", &last, 1)};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "ReduceSum", args, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_dot = {
    .kind = "dot", .config_size = sizeof(dot_config), .min_inputs = 2, .max_inputs = 2,
    .infer = dot_infer, .forward = dot_forward, .backward = dot_backward, .flops = dot_flops,
    .export_onnx = dot_export_onnx,
};
