/* Softmax and log softmax along any axis of a sample, or along every axis
 * from one to the last (ONNX's Softmax before opset 13); the softmax
 * activation keeps the last axis, where the loss fuses with it. The values
 * of a row are `inner` apart (opencl/kernels/softmax.cl): no axis moves;
 * a work-item per row, or on a GPU a work-group per long row. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <stddef.h>
#include <string.h>

typedef struct softmax_config {
    kiln_softmax_options given;   /* axis, through_last and log only */
    int32_t at;                   /* inferred: the first axis, in a sample's shape */
    int32_t len, inner;           /* inferred: a row's values and their distance */
} softmax_config;

static kiln_status softmax_infer(void *config, kiln_layer_build *b)
{
    softmax_config *c = config;
    const kiln_shape *in = &b->in[0];
    const int32_t rank = in->rank, axis = c->given.axis;
    char s[64];
    if (axis == 0 || axis < -rank || axis > rank) {
        snprintf(b->error, sizeof b->error, "axis %d is %s of the input %s (axes 1..%d or "
                 "-%d..-1)", (int)axis, axis == 0 || axis == -rank - 1 ? "the batch"
                 : "out of range", kiln_shape_str(in, s, sizeof s), (int)rank, (int)rank);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->at = axis > 0 ? axis - 1 : rank + axis;
    const int32_t end = c->given.through_last ? rank : c->at + 1;
    int64_t len = 1, inner = 1;
    for (int32_t d = c->at; d < end; d++)
        len *= in->dims[d];
    for (int32_t d = end; d < rank; d++)
        inner *= in->dims[d];
    c->len = (int32_t)len;   /* a sample holds at most KILN_MAX_FLOATS */
    c->inner = (int32_t)inner;
    b->out = *in;
    return KILN_OK;
}

static size_t rows_of(const softmax_config *c, const kiln_step *s)
{
    return (size_t)(s->batch * kiln_shape_size(s->out_shape) / c->len);
}

static kiln_status softmax_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const softmax_config *c = config;
    const size_t rows = rows_of(c, s);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_int((int64_t)rows), kiln_arg_int(c->len),
                            kiln_arg_int(c->inner), kiln_arg_int(c->given.log != 0));
    return kiln_run_per_row(s->dev, "softmax", "kiln_softmax_forward", rows, (size_t)c->len, a);
}

static kiln_status softmax_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const softmax_config *c = config;
    if (!s->d_in[0])
        return KILN_OK;
    const size_t rows = rows_of(c, s);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->out), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(s->d_in[0]), kiln_arg_int((int64_t)rows),
                            kiln_arg_int(c->len), kiln_arg_int(c->inner),
                            kiln_arg_int(c->given.log != 0),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return kiln_run_per_row(s->dev, "softmax", "kiln_softmax_backward", rows, (size_t)c->len,
                            a);
}

static uint64_t softmax_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return 4 * (uint64_t)kiln_shape_size(in_shape);
}

/* args: the kiln_softmax_options the builder took (axis 0 made -1). */
static void softmax_configure(void *config, const void *args)
{
    const kiln_softmax_options *o = args;
    softmax_config *c = config;
    /* The options alone: not their size, name or padding, so that a model
     * file's layer is configured byte for byte as the builder's. */
    c->given.axis = o->axis;
    c->given.through_last = o->through_last != 0;
    c->given.log = o->log != 0;
}

static void softmax_describe(const void *config, void *args)
{
    kiln_softmax_options *o = args;
    *o = ((const softmax_config *)config)->given;
    o->struct_size = sizeof *o;
}

static const kiln_layer_field softmax_fields[] = {
    {.key = "axis", .type = KILN_FIELD_INT, .offset = offsetof(kiln_softmax_options, axis)},
    {.key = "through_last", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_softmax_options, through_last), .optional = 1},
    {.key = "log", .type = KILN_FIELD_BOOL, .offset = offsetof(kiln_softmax_options, log),
     .optional = 1},
};

/* kiln's axes as they are: (Log)Softmax at opset 13 over the axis (the
 * batch 0); through_last flattens the axes it covers into one first. */
static void softmax_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const softmax_config *c = g->layers[i].config;
    const kiln_shape *shape = kiln_onnx_input_shape(g, i, 0);
    const char *op = c->given.log ? "LogSoftmax" : "Softmax";
    const char *x = kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL);
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    if (!c->given.through_last || c->at == shape->rank - 1) {
        kiln_onnx_attr_int(g, kiln_onnx_add_node(g, op, &x, 1, out), "axis", c->at + 1);
        kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
        return;
    }
    int64_t flat[KILN_MAX_RANK + 1], back[KILN_MAX_RANK + 1];
    flat[0] = back[0] = 0;   /* Reshape's 0: the batch as it is */
    for (int32_t d = 0; d < shape->rank; d++)
        back[d + 1] = shape->dims[d];
    for (int32_t d = 0; d < c->at; d++)
        flat[d + 1] = shape->dims[d];
    flat[c->at + 1] = c->len;
    const char *to[2] = {x, kiln_onnx_int64s(g, i, "flat_shape", flat, c->at + 2)};
    const char *flattened = kiln_onnx_step(g, i, "Reshape", to[0], to[1], "flattened");
    const char *name = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s", g->layers[i].name,
                                                                 "softmax"));
    kiln_onnx_attr_int(g, kiln_onnx_add_node(g, op, &flattened, 1, name), "axis", c->at + 1);
    const char *from[2] = {name, kiln_onnx_int64s(g, i, "shape", back, shape->rank + 1)};
    kiln_onnx_add_node(g, "Reshape", from, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

/* Softmax and LogSoftmax along axes the activation does not take (it
 * reads the last, and axis 1 of a 4-D value). From opset 13 one axis; a
 * 4-D value's as kiln holds it, (H, W, C), unless it is held in ONNX's
 * order alone. Before, every axis from `axis`
 * on (default 1) in ONNX's order; all of a 4-D value's as held. */
static kiln_status softmax_import_onnx(kiln_onnx_import *imp)
{
    const int log = strcmp(imp->op, "LogSoftmax") == 0;
    if (!log && strcmp(imp->op, "Softmax") != 0)
        return kiln_onnx_refuse(imp, "not a softmax");
    const kiln_status st = kiln_onnx_check_attrs(imp, "axis:i");
    if (st != KILN_OK)
        return st;
    const int rank = imp->in[0].rank, coerced = imp->opset < 13;
    const int64_t given = kiln_onnx_attr_i(imp, "axis", coerced ? 1 : -1);
    const int64_t axis = given < 0 ? given + rank : given;
    if (axis < 0 || axis >= rank)
        return kiln_onnx_refuse(imp, "attribute 'axis' is %lld of a %d-D input",
                                (long long)given, rank);
    if (axis == 0)
        return kiln_onnx_refuse(imp, "attribute 'axis' is %lld, the batch%s; kiln's softmax "
                                "stays within a sample", (long long)given,
                                coerced ? " (before opset 13, every axis from it on)" : "");
    kiln_softmax_options *o = (kiln_softmax_options *)(void *)imp->args.bytes;
    *o = (kiln_softmax_options){.struct_size = sizeof *o, .axis = (int32_t)axis,
                                .through_last = coerced, .log = log};
    static const int32_t to_cl[4] = {0, 3, 1, 2};   /* ONNX's (N, C, H, W) in kiln's (H, W, C) */
    if (rank == 4 && coerced && axis == 1) {
        imp->want = KILN_ONNX_WANT_ANY;   /* the whole sample, as held */
    } else if (rank == 4 && !coerced && imp->in[0].held != KILN_ONNX_WANT_ONNX) {
        imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
        o->axis = to_cl[axis];
    } else {
        imp->want = KILN_ONNX_WANT_ONNX;
    }
    imp->n_data = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_softmax = {
    .kind = "softmax", .config_size = sizeof(softmax_config), .min_inputs = 1,
    .max_inputs = 1, .configure = softmax_configure, .describe = softmax_describe,
    .args_size = sizeof(kiln_softmax_options), KILN_FIELDS(softmax_fields),
    .infer = softmax_infer, .forward = softmax_forward, .backward = softmax_backward,
    .flops = softmax_flops, .export_onnx = softmax_export_onnx,
    .import_onnx = softmax_import_onnx,
};
