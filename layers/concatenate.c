/* Concatenate (Keras Concatenate): inputs of one rank joined along an
 * axis. Seen from that axis, each input is `outer` rows of `width_k`
 * values (its axis length times the size of the axes after it) and the
 * output is `outer` rows of their sum: forward copies each input's rows to
 * its column offset, backward copies the gradient's columns back
 * (opencl/kernels/concatenate.cl). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <stddef.h>

typedef struct concatenate_config {
    int32_t axis;        /* as given (Keras's, counting the batch) */
    int32_t at;          /* inferred: the axis in a sample's shape */
    int64_t inner;       /* inferred: size of the axes after it, per index */
    int64_t outer;       /* inferred: size of the axes before it, per sample */
} concatenate_config;

static kiln_status concatenate_infer(void *config, kiln_layer_build *b)
{
    concatenate_config *c = config;
    const kiln_shape *first = &b->in[0];
    const int32_t rank = first->rank;
    char s0[64], sk[64];
    if (c->axis == 0 || c->axis > rank || c->axis < -rank) {
        snprintf(b->error, sizeof b->error, "axis %d is %s for inputs of shape %s (axes 1..%d "
                 "or -%d..-1)", (int)c->axis, c->axis == 0 ? "the batch axis" : "out of range",
                 kiln_shape_str(first, s0, sizeof s0), (int)rank, (int)rank);
        return KILN_ERROR_SHAPE;
    }
    c->at = c->axis > 0 ? c->axis - 1 : rank + c->axis;
    int64_t joined = 0;
    for (int k = 0; k < b->n_in; k++) {
        const kiln_shape *x = &b->in[k];
        int same = x->rank == rank;
        for (int32_t d = 0; same && d < rank; d++)
            same = d == c->at || x->dims[d] == first->dims[d];
        if (!same) {
            snprintf(b->error, sizeof b->error, "input 0 is %s but input %d is %s: they must "
                     "match but on axis %d", kiln_shape_str(first, s0, sizeof s0), k,
                     kiln_shape_str(x, sk, sizeof sk), (int)c->axis);
            return KILN_ERROR_SHAPE;
        }
        joined += x->dims[c->at];
    }
    b->out = *first;
    if (joined > INT32_MAX) {
        snprintf(b->error, sizeof b->error, "axis %d would be %lld long", (int)c->axis,
                 (long long)joined);
        return KILN_ERROR_SHAPE;
    }
    b->out.dims[c->at] = (int32_t)joined;
    c->outer = c->inner = 1;
    for (int32_t d = 0; d < c->at; d++)
        c->outer *= first->dims[d];
    for (int32_t d = c->at + 1; d < rank; d++)
        c->inner *= first->dims[d];
    return KILN_OK;
}

/* Copies `width` columns of every row from src (rows of src_width, from
 * column src_at) to dst (rows of dst_width, from column dst_at), or adds
 * them. */
static kiln_status copy_columns(kiln_device *dev, const kiln_buffer *src, int64_t src_width,
                                int64_t src_at, kiln_buffer *dst, int64_t dst_width,
                                int64_t dst_at, int64_t width, size_t rows, int accumulate)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_int(src_width), kiln_arg_int(src_at),
                            kiln_arg_buffer(dst), kiln_arg_int(dst_width), kiln_arg_int(dst_at),
                            kiln_arg_int(width), kiln_arg_int((int64_t)rows),
                            kiln_arg_int(accumulate));
    const size_t range[2] = {(size_t)width, rows};
    return kiln_run(dev, "concatenate", "kiln_concatenate_copy", 2, range, a);
}

static kiln_status concatenate_forward(const void *config, void *replica, const kiln_step *s)
{
    const concatenate_config *c = config;
    (void)replica;
    const size_t rows = (size_t)s->batch * (size_t)c->outer;
    const int64_t out_width = s->out_shape->dims[c->at] * c->inner;
    int64_t at = 0;
    kiln_status st = KILN_OK;
    for (int k = 0; k < s->n_in && st == KILN_OK; k++) {
        const int64_t width = s->in_shape[k].dims[c->at] * c->inner;
        st = copy_columns(s->dev, s->in[k], width, 0, s->out, out_width, at, width, rows, 0);
        at += width;
    }
    return st;
}

/* Input k's gradient is its columns of the output's; the same node given
 * twice gets both (the runtime asks the second to add). */
static kiln_status concatenate_backward(const void *config, void *replica, const kiln_step *s)
{
    const concatenate_config *c = config;
    (void)replica;
    const size_t rows = (size_t)s->batch * (size_t)c->outer;
    const int64_t out_width = s->out_shape->dims[c->at] * c->inner;
    int64_t at = 0;
    kiln_status st = KILN_OK;
    for (int k = 0; k < s->n_in && st == KILN_OK; k++) {
        const int64_t width = s->in_shape[k].dims[c->at] * c->inner;
        if (s->d_in[k])
            st = copy_columns(s->dev, s->d_out, out_width, at, s->d_in[k], width, 0, width,
                              rows, s->d_in_accumulate[k]);
        at += width;
    }
    return st;
}

/* args: a kiln_concatenate_args. */
static void concatenate_configure(void *config, const void *args)
{
    ((concatenate_config *)config)->axis = ((const kiln_concatenate_args *)args)->axis;
}

static void concatenate_describe(const void *config, void *args)
{
    ((kiln_concatenate_args *)args)->axis = ((const concatenate_config *)config)->axis;
}

static const kiln_layer_field concatenate_fields[] = {
    {.key = "axis", .type = KILN_FIELD_INT, .offset = offsetof(kiln_concatenate_args, axis)},
};

/* In the layout the first input has; the axis is where the output's shape
 * differs from that input's. */
static void concatenate_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const kiln_onnx_layer *l = &g->layers[i];
    const kiln_shape *first = kiln_onnx_input_shape(g, i, 0);
    const int32_t rank = l->shape.rank;
    int32_t at = 0;
    while (at < rank - 1 && l->shape.dims[at] == first->dims[at])
        at++;
    const int layout = kiln_onnx_input_layout(g, i, 0);
    const char *in[KILN_MAX_INPUTS];
    for (int k = 0; k < l->n_inputs; k++)
        in[k] = kiln_onnx_input_value(g, i, k, layout);
    const char *out = kiln_onnx_output(g, i, layout);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, "Concat", in, (size_t)l->n_inputs, out);
    kiln_onnx_attr_int(g, nd, "axis", layout == KILN_ONNX_CF && rank > 1
                                          ? (at == rank - 1 ? 1 : at + 2) : at + 1);
    kiln_onnx_activate(g, i, layout, out);
}

/* ONNX Concat of computed values; a 4-D value's channel axis is kiln's
 * last. */
static kiln_status concatenate_import_onnx(kiln_onnx_import *imp)
{
    const kiln_status st = kiln_onnx_check_attrs(imp, "axis:i");
    if (st != KILN_OK)
        return st;
    const int rank = imp->in[0].rank;
    int64_t axis = kiln_onnx_attr_i(imp, "axis", 0);
    if (axis < 0)
        axis += rank;
    if (!kiln_onnx_find_attr(imp, "axis") || axis <= 0 || axis >= rank)
        return kiln_onnx_refuse(imp, "attribute 'axis' must name an axis of a sample (1..%d)",
                                rank - 1);
    if (imp->n_in < 2 || imp->n_in > KILN_MAX_INPUTS)
        return kiln_onnx_refuse(imp, "%d inputs; kiln joins 2 to %d", imp->n_in,
                                KILN_MAX_INPUTS);
    for (int k = 0; k < imp->n_in; k++)
        if (imp->in[k].data)
            return kiln_onnx_refuse(imp, "input %d '%s' is an initializer; kiln joins computed "
                                    "values", k, imp->in[k].name);
    kiln_concatenate_args *a = (kiln_concatenate_args *)imp->args.bytes;
    if (rank == 4 && axis == 1) {
        a->axis = -1;
        imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    } else {
        a->axis = (int32_t)axis;
        imp->want = KILN_ONNX_WANT_ONNX;
    }
    imp->n_data = imp->n_in;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_concatenate = {
    .kind = "concatenate", .config_size = sizeof(concatenate_config), .min_inputs = 2,
    .max_inputs = KILN_MAX_INPUTS, .configure = concatenate_configure,
    .describe = concatenate_describe,
    .infer = concatenate_infer, .forward = concatenate_forward,
    .backward = concatenate_backward,
    .args_size = sizeof(kiln_concatenate_args), KILN_FIELDS(concatenate_fields),
    .export_onnx = concatenate_export_onnx,
    .import_onnx = concatenate_import_onnx,
};
