/* ZeroPadding2D (Keras ZeroPadding2D, channels-last): rows of zeros above
 * and below an (H, W, C) sample, columns left and right. The importer
 * makes one of an ONNX Pad that no Conv or AveragePool can take into its
 * own pads. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stddef.h>
#include <stdio.h>

typedef struct zero_padding2d_config {
    int32_t padding[4];    /* top, bottom, left, right, as given */
    int32_t in[3];         /* inferred: H, W, C */
} zero_padding2d_config;

static kiln_status zero_padding2d_infer(void *config, kiln_layer_build *b)
{
    zero_padding2d_config *c = config;
    const kiln_shape *in = &b->in[0];
    for (int k = 0; k < 4; k++)
        if (c->padding[k] < 0) {
            snprintf(b->error, sizeof b->error, "padding[%d] is %d; pads are >= 0", k,
                     (int)c->padding[k]);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
    if (in->rank != 3) {
        char s[64];
        snprintf(b->error, sizeof b->error, "input is %s; ZeroPadding2D pads an (H, W, C) "
                 "sample", kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    const int64_t h = (int64_t)in->dims[0] + c->padding[0] + c->padding[1];
    const int64_t w = (int64_t)in->dims[1] + c->padding[2] + c->padding[3];
    if (h * w * in->dims[2] > KILN_MAX_FLOATS) {
        snprintf(b->error, sizeof b->error, "the padded sample (%lld, %lld, %d) holds more "
                 "than %d floats", (long long)h, (long long)w, (int)in->dims[2],
                 KILN_MAX_FLOATS);
        return KILN_ERROR_SHAPE;
    }
    for (int d = 0; d < 3; d++)
        c->in[d] = in->dims[d];
    b->out.rank = 3;
    b->out.dims[0] = (int32_t)h;
    b->out.dims[1] = (int32_t)w;
    b->out.dims[2] = in->dims[2];
    return KILN_OK;
}

/* Forward over the output (zeros where no input lands), backward over the
 * input (each reads its place in the output's gradient). */
static kiln_status zero_padding2d_run(const zero_padding2d_config *c, const kiln_step *s,
                                      const kiln_buffer *src, kiln_buffer *dst, int back,
                                      int accumulate)
{
    const kiln_shape *out = s->out_shape;
    const int64_t size = back ? (int64_t)c->in[0] * c->in[1] * c->in[2]
                              : kiln_shape_size(out);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst), kiln_arg_int(c->in[0]),
                            kiln_arg_int(c->in[1]), kiln_arg_int(c->in[2]),
                            kiln_arg_int(out->dims[0]), kiln_arg_int(out->dims[1]),
                            kiln_arg_int(c->padding[0]), kiln_arg_int(c->padding[2]),
                            kiln_arg_int(accumulate));
    const size_t range[2] = {(size_t)size, (size_t)s->batch};
    return kiln_run(s->dev, "zero_padding2d", back ? "kiln_zero_padding2d_backward"
                                                   : "kiln_zero_padding2d_forward", 2, range, a);
}

static kiln_status zero_padding2d_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const kiln_status st = zero_padding2d_run(config, s, s->in[0], s->out, 0, 0);
    return st != KILN_OK ? st : kiln_step_activate(s, s->out);
}

static kiln_status zero_padding2d_backward(const void *config, void *replica,
                                           const kiln_step *s)
{
    (void)replica;
    if (!s->d_in[0])
        return KILN_OK;
    return zero_padding2d_run(config, s, s->d_out, s->d_in[0], 1, s->d_in_accumulate[0]);
}

/* args: the kiln_zero_padding2d_options the builder took. */
static void zero_padding2d_configure(void *config, const void *args)
{
    const kiln_zero_padding2d_options *o = args;
    zero_padding2d_config *c = config;
    for (int k = 0; k < 4; k++)
        c->padding[k] = o->padding[k];
}

static void zero_padding2d_describe(const void *config, void *args)
{
    const zero_padding2d_config *c = config;
    kiln_zero_padding2d_options *o = args;
    o->struct_size = sizeof *o;
    for (int k = 0; k < 4; k++)
        o->padding[k] = c->padding[k];
}

static const kiln_layer_field zero_padding2d_fields[] = {
    {.key = "padding", .type = KILN_FIELD_QUAD,
     .offset = offsetof(kiln_zero_padding2d_options, padding)},
};

/* ONNX's Pad over NCHW: the begins of N, C, H, W, then their ends. */
static void zero_padding2d_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const zero_padding2d_config *c = g->layers[i].config;
    const int64_t pads[8] = {0, 0, c->padding[0], c->padding[2],
                             0, 0, c->padding[1], c->padding[3]};
    const char *args[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CF),
                           kiln_onnx_int64s(g, i, "pads", pads, 8)};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CF);
    kiln_onnx_add_node(g, "Pad", args, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CF, out);
}

static uint64_t zero_padding2d_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return (uint64_t)kiln_shape_size(in_shape);
}

const kiln_layer_ops kiln_layer_zero_padding2d = {
    .kind = "zero_padding2d", .config_size = sizeof(zero_padding2d_config), .min_inputs = 1,
    .max_inputs = 1, .configure = zero_padding2d_configure,
    .describe = zero_padding2d_describe, .infer = zero_padding2d_infer,
    .forward = zero_padding2d_forward, .backward = zero_padding2d_backward,
    .flops = zero_padding2d_flops, .args_size = sizeof(kiln_zero_padding2d_options),
    KILN_FIELDS(zero_padding2d_fields), .export_onnx = zero_padding2d_export_onnx,
};
