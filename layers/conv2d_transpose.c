/* Conv2DTranspose over NHWC, kernel (kh, kw, F / groups, C): the input
 * gradient of a convolution of the output back to the input, with the
 * same kernel. So it reuses Conv2D's im2col and col2im kernels
 * (conv2d.cl) with the roles of input and output swapped: the forward is
 * a GEMM into columns gathered to the output by col2im, the input gradient
 * a convolution's forward (im2col of dy, one GEMM), the weight gradient a
 * convolution's weight gradient (the same columns against the input). */
#include "layers/conv2d.h"
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct convt_config {
    int32_t filters, kh, kw, sh, sw;
    kiln_padding padding;
    int32_t use_bias;
    int32_t pads[4];      /* KILN_PADDING_EXPLICIT's (top, left, bottom, right) */
    int32_t out_pad[2];   /* output_padding (height, width) */
    int32_t dh, dw;       /* dilations, >= 1 once configured */
    int32_t groups;       /* >= 1 once configured */
    /* inferred: input, output, and the rows and columns cropped off the
     * full output before it (the convolution's padding) */
    int32_t h, w, c, oh, ow, crop_top, crop_left;
} convt_config;

/* Per replica: the columns (forward: the input times the kernel, before
 * col2im; backward: im2col of dy), the kernel transposed for the forward's
 * GEMM, and conv2d.cl's two kernels. */
typedef struct convt_replica {
    kiln_buffer *cols, *kernel_t;
    kiln_kernel *im2col, *col2im;
} convt_replica;

/* The window as conv2d.cl's kernels take it for the convolution this layer
 * is the transpose of: its input is this layer's output (oh, ow, filters),
 * its output this layer's input (h, w). */
#define CONVT_WINDOW_ARGS(c)                                                                  \
    kiln_arg_int((c)->oh), kiln_arg_int((c)->ow), kiln_arg_int((c)->filters),                 \
        kiln_arg_int((c)->h), kiln_arg_int((c)->w), kiln_arg_int((c)->kh),                    \
        kiln_arg_int((c)->kw), kiln_arg_int((c)->sh), kiln_arg_int((c)->sw),                  \
        kiln_arg_int((c)->crop_top), kiln_arg_int((c)->crop_left), kiln_arg_int((c)->dh),     \
        kiln_arg_int((c)->dw), kiln_arg_int((c)->groups)

/* One group's column count: kh * kw * F / groups. */
static size_t col_width(const convt_config *c)
{
    return (size_t)c->kh * (size_t)c->kw * (size_t)(c->filters / c->groups);
}

static size_t in_pixels(const convt_config *c, int32_t batch)
{
    return (size_t)batch * (size_t)c->h * (size_t)c->w;
}

/* One axis: the output length and the pixels cropped before it, or -1 when
 * the full output would pass INT32_MAX; 0 for an output below 1. */
static int axis_infer(const convt_config *c, int32_t in, int32_t k, int32_t s, int32_t d,
                      int32_t before, int32_t after, int32_t op, int32_t *out, int32_t *crop)
{
    const int64_t span = (int64_t)(k - 1) * d + 1, full = (int64_t)(in - 1) * s + span;
    if (full + op > INT32_MAX || (int64_t)in * s + span > INT32_MAX)
        return -1;
    int64_t length, cut = 0;
    if (c->padding == KILN_PADDING_EXPLICIT) {
        length = full - before - after + op;
        cut = before;
    } else if (c->padding == KILN_PADDING_VALID) {
        /* Keras's deconv_output_length; output_padding 0 is its None. */
        length = op ? full + op : (int64_t)in * s + (span > s ? span - s : 0);
    } else {
        length = op ? full - 2 * (span / 2) + op : (int64_t)in * s;
        /* TensorFlow pads the convolution of the output back to the input
         * 'same': half the difference before, rounded down. */
        cut = full > length ? (full - length) / 2 : 0;
    }
    *out = (int32_t)length;
    *crop = (int32_t)cut;
    return length >= 1;
}

static kiln_status convt_infer(void *config, kiln_layer_build *b)
{
    convt_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64];
    if (c->filters <= 0 || c->kh <= 0 || c->kw <= 0 || c->sh <= 0 || c->sw <= 0) {
        snprintf(b->error, sizeof b->error, "filters (%d), kernel_size (%d, %d) and strides "
                 "(%d, %d) must be > 0", (int)c->filters, (int)c->kh, (int)c->kw, (int)c->sh,
                 (int)c->sw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->groups <= 0 || c->dh <= 0 || c->dw <= 0) {
        snprintf(b->error, sizeof b->error, "groups %d and dilations (%d, %d) must be >= 0 "
                 "(0: 1)", (int)c->groups, (int)c->dh, (int)c->dw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if ((int)c->padding < KILN_PADDING_VALID || c->padding > KILN_PADDING_EXPLICIT) {
        snprintf(b->error, sizeof b->error, "padding %d is not a kiln_padding", (int)c->padding);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->padding == KILN_PADDING_EXPLICIT &&
        (c->pads[0] < 0 || c->pads[1] < 0 || c->pads[2] < 0 || c->pads[3] < 0)) {
        snprintf(b->error, sizeof b->error, "pads (%d, %d, %d, %d) must be >= 0",
                 (int)c->pads[0], (int)c->pads[1], (int)c->pads[2], (int)c->pads[3]);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->out_pad[0] < 0 || c->out_pad[1] < 0 ||
        (c->out_pad[0] >= c->sh && c->out_pad[0] >= c->dh) ||
        (c->out_pad[1] >= c->sw && c->out_pad[1] >= c->dw)) {
        snprintf(b->error, sizeof b->error, "output_padding (%d, %d) must be >= 0 and below "
                 "the strides (%d, %d) or the dilations (%d, %d)", (int)c->out_pad[0],
                 (int)c->out_pad[1], (int)c->sh, (int)c->sw, (int)c->dh, (int)c->dw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (in->rank != 3) {
        snprintf(b->error, sizeof b->error, "expects a (height, width, channels) input, got %s",
                 kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    c->h = in->dims[0];
    c->w = in->dims[1];
    c->c = in->dims[2];
    if (c->c % c->groups || c->filters % c->groups) {
        snprintf(b->error, sizeof b->error, "groups %d must divide the input's channels (%d) "
                 "and the filters (%d)", (int)c->groups, (int)c->c, (int)c->filters);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    const int fit_h = axis_infer(c, c->h, c->kh, c->sh, c->dh, c->pads[0], c->pads[2],
                                 c->out_pad[0], &c->oh, &c->crop_top);
    const int fit_w = axis_infer(c, c->w, c->kw, c->sw, c->dw, c->pads[1], c->pads[3],
                                 c->out_pad[1], &c->ow, &c->crop_left);
    if (fit_h < 0 || fit_w < 0) {
        snprintf(b->error, sizeof b->error, "kernel (%d, %d) at strides (%d, %d) over input %s "
                 "makes an output longer than %d pixels", (int)c->kh, (int)c->kw, (int)c->sh,
                 (int)c->sw, kiln_shape_str(in, s, sizeof s), INT32_MAX);
        return KILN_ERROR_SHAPE;
    }
    if (!fit_h || !fit_w) {
        snprintf(b->error, sizeof b->error, "pads (%d, %d, %d, %d) crop all of the output "
                 "(%d, %d) of kernel (%d, %d) over input %s", (int)c->pads[0], (int)c->pads[1],
                 (int)c->pads[2], (int)c->pads[3], (int)c->oh, (int)c->ow, (int)c->kh,
                 (int)c->kw, kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    b->out.rank = 3;
    b->out.dims[0] = c->oh;
    b->out.dims[1] = c->ow;
    b->out.dims[2] = c->filters;
    /* Keras's fans for any rank-4 kernel: the receptive field times its
     * last two axes (for this layer, the filters in and the channels out). */
    kiln_conv2d_add_params(b, c->kh, c->kw, c->filters / c->groups, c->c, c->filters,
                           c->use_bias);
    return KILN_OK;
}

static kiln_status convt_kernels(const void *config, void *replica, kiln_device *dev)
{
    convt_replica *r = replica;
    (void)config;
    kiln_status st = kiln_kernel_get_variant(dev, "conv2d", "kiln_conv2d_im2col", &r->im2col);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "conv2d", "kiln_conv2d_col2im", &r->col2im);
    return st;
}

static kiln_status convt_prepare(const void *config, void *replica, kiln_device *dev,
                                 const kiln_shape *in_shape, int32_t max_batch)
{
    const convt_config *c = config;
    convt_replica *r = replica;
    (void)in_shape;
    kiln_status st = kiln_buffer_create(dev, in_pixels(c, max_batch) * col_width(c) *
                                                 (size_t)c->groups * sizeof(float),
                                        "conv2d_transpose columns", &r->cols);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, col_width(c) * (size_t)c->c * sizeof(float),
                                "a transposed conv2d_transpose kernel", &r->kernel_t);
    return st;
}

static void convt_release(void *replica)
{
    convt_replica *r = replica;
    kiln_buffer_destroy(r->cols);
    kiln_buffer_destroy(r->kernel_t);
    r->cols = r->kernel_t = NULL;
}

static kiln_status convt_forward(const void *config, void *replica, const kiln_step *s)
{
    const convt_config *c = config;
    convt_replica *r = replica;
    const size_t m = in_pixels(c, s->batch), k = col_width(c);
    const size_t ch = (size_t)c->c, cg = ch / (size_t)c->groups;
    /* cols = x K^T per group, on the kernel transposed first (a plain GEMM
     * runs faster than one of a transposed right operand): group g's
     * channels times its rows of K^T, into its own block of columns. */
    kiln_status st = kiln_transpose(s->dev, s->params, s->param_offset[0], k, ch, r->kernel_t);
    for (size_t g = 0; g < (size_t)c->groups && st == KILN_OK; g++)
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, k, cg, 1.0f, s->in[0], g * cg, ch,
                       r->kernel_t, g * cg * k, k, 0.0f, r->cols, g * m * k, k);
    if (st != KILN_OK)
        return st;
    /* col2im sums into each output pixel the columns that reach it. */
    const size_t pixels = (size_t)s->batch * (size_t)c->oh * (size_t)c->ow;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(r->cols), kiln_arg_buffer(s->out),
                            kiln_arg_int((int64_t)pixels), CONVT_WINDOW_ARGS(c), kiln_arg_int(0));
    const kiln_range cpu = {.dims = 1, .size = {pixels}};
    const kiln_range gpu = {.dims = 2, .size = {(size_t)c->filters, pixels}};
    st = kiln_kernel_run_variant(s->dev, r->col2im, &cpu, &gpu, a);
    if (st != KILN_OK)
        return st;
    if (!c->use_bias)
        return kiln_step_activate(s, s->out);
    return kiln_bias_add(s->dev, s->out, pixels, (size_t)c->filters, s->params,
                         s->param_offset[1], s->activation);
}

static kiln_status convt_backward(const void *config, void *replica, const kiln_step *s)
{
    const convt_config *c = config;
    convt_replica *r = replica;
    const size_t m = in_pixels(c, s->batch), k = col_width(c);
    const size_t ch = (size_t)c->c, cg = ch / (size_t)c->groups;
    const size_t pixels = (size_t)s->batch * (size_t)c->oh * (size_t)c->ow;
    /* dy's patches, a row per input pixel: the convolution's forward. */
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_buffer(r->cols),
                            kiln_arg_int((int64_t)m), CONVT_WINDOW_ARGS(c));
    const kiln_range cpu = {.dims = 1, .size = {m}};
    const kiln_range gpu = {.dims = 2, .size = {k * (size_t)c->groups, m}};
    kiln_status st = kiln_kernel_run_variant(s->dev, r->im2col, &cpu, &gpu, a);
    /* dK = cols^T x per group: group g's columns against its channels (a
     * frozen layer's weights get none: replicas keep no gradient for them). */
    for (size_t g = 0; g < (size_t)c->groups && st == KILN_OK && !s->frozen; g++)
        st = kiln_gemm(s->dev, KILN_GEMM_T, KILN_GEMM_N, k, cg, m, 1.0f, r->cols, g * m * k, k,
                       s->in[0], g * cg, ch, 0.0f, s->grads, s->param_offset[0] + g * cg, ch);
    if (st == KILN_OK && c->use_bias && !s->frozen)
        st = kiln_column_sum(s->dev, s->d_out, pixels, (size_t)c->filters, s->grads,
                             s->param_offset[1], 0);
    if (st != KILN_OK || !s->d_in[0])
        return st;
    /* dx = cols K per group, added where the input's gradient accumulates. */
    const float beta = s->d_in_accumulate[0] ? 1.0f : 0.0f;
    for (size_t g = 0; g < (size_t)c->groups && st == KILN_OK; g++)
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, cg, k, 1.0f, r->cols, g * m * k, k,
                       s->params, s->param_offset[0] + g * cg, ch, beta, s->d_in[0], g * cg,
                       ch);
    return st;
}

static uint64_t convt_flops(const void *config, const kiln_shape *in_shape)
{
    const convt_config *c = config;
    (void)in_shape;
    return 2u * (uint64_t)in_pixels(c, 1) * col_width(c) * (uint64_t)c->c;
}

/* args: the kiln_conv2d_transpose_options the builder copied. */
static void convt_configure(void *config, const void *args)
{
    const kiln_conv2d_transpose_options *o = args;
    *(convt_config *)config = (convt_config){
        .filters = o->filters, .kh = o->kernel_size[0], .kw = o->kernel_size[1],
        .sh = o->strides[0] ? o->strides[0] : 1, .sw = o->strides[1] ? o->strides[1] : 1,
        .padding = o->padding, .use_bias = !o->no_bias,
        .pads = {o->pads[0], o->pads[1], o->pads[2], o->pads[3]},
        .out_pad = {o->output_padding[0], o->output_padding[1]},
        /* A negative one stays, for infer to refuse. */
        .dh = o->dilations[0] ? o->dilations[0] : 1, .dw = o->dilations[1] ? o->dilations[1] : 1,
        .groups = o->groups ? o->groups : 1};
}

static void convt_describe(const void *config, void *args)
{
    const convt_config *c = config;
    kiln_conv2d_transpose_options *o = args;
    o->filters = c->filters;
    o->kernel_size[0] = c->kh;
    o->kernel_size[1] = c->kw;
    o->strides[0] = c->sh;
    o->strides[1] = c->sw;
    o->padding = c->padding;
    o->no_bias = !c->use_bias;
    memcpy(o->pads, c->pads, sizeof o->pads);
    memcpy(o->output_padding, c->out_pad, sizeof o->output_padding);
    /* 1 is the default: written back as 0, so that files leave it out. */
    o->dilations[0] = c->dh == 1 && c->dw == 1 ? 0 : c->dh;
    o->dilations[1] = c->dh == 1 && c->dw == 1 ? 0 : c->dw;
    o->groups = c->groups == 1 ? 0 : c->groups;
}

#define OPTION(field) offsetof(kiln_conv2d_transpose_options, field)

static const kiln_layer_field convt_fields[] = {
    {.key = "filters", .type = KILN_FIELD_INT, .offset = OPTION(filters)},
    {.key = "kernel_size", .type = KILN_FIELD_PAIR, .offset = OPTION(kernel_size)},
    {.key = "strides", .type = KILN_FIELD_PAIR, .offset = OPTION(strides)},
    {.key = "padding", .type = KILN_FIELD_PADDING, .offset = OPTION(padding)},
    {.key = "use_bias", .type = KILN_FIELD_NOT_BOOL, .offset = OPTION(no_bias)},
    {.key = "pads", .type = KILN_FIELD_QUAD, .offset = OPTION(pads), .optional = 1},
    {.key = "output_padding", .type = KILN_FIELD_PAIR, .offset = OPTION(output_padding),
     .optional = 1},
    {.key = "dilation_rate", .type = KILN_FIELD_PAIR, .offset = OPTION(dilations),
     .optional = 1},
    {.key = "groups", .type = KILN_FIELD_INT, .offset = OPTION(groups), .optional = 1},
};

/* Kernel (kh, kw, Fg, C) as ONNX's ConvTranspose weight (C, Fg, kh, kw). */
static float *weight_to_onnx(kiln_onnx_graph *g, const float *hwfc, const kiln_param_spec *spec)
{
    const int32_t kh = spec->shape.dims[0], kw = spec->shape.dims[1];
    const int32_t fg = spec->shape.dims[2], c = spec->shape.dims[3];
    float *cfhw = kiln_onnx_alloc(g, (size_t)kh * kw * fg * c * sizeof *cfhw);
    for (int32_t y = 0; cfhw && y < kh; y++)
        for (int32_t x = 0; x < kw; x++)
            for (int32_t f = 0; f < fg; f++)
                for (int32_t ci = 0; ci < c; ci++)
                    cfhw[(((size_t)ci * fg + f) * kh + y) * kw + x] =
                        hwfc[(((size_t)y * kw + x) * fg + f) * c + ci];
    return cfhw;
}

/* ONNX's ConvTranspose, channels-first. Its pads crop the full output as
 * the layer does; whatever the layer's output has past the full output's
 * end (Keras's output_padding) is ONNX's output_padding, unless that
 * reaches the stride (PyTorch allows it below the dilation; ONNX Runtime
 * refuses it): those rows, which no pixel reaches, become a Pad of zeros,
 * and the bias an Add after it. */
static void convt_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const convt_config *c = g->layers[i].config;
    const kiln_param_spec *spec;
    const float *hwfc = kiln_onnx_param(g, i, "kernel", &spec);
    float *cfhw = weight_to_onnx(g, hwfc, spec);
    if (!cfhw)
        return;
    const int64_t in[2] = {c->h, c->w}, size[2] = {c->oh, c->ow};
    const int64_t stride[2] = {c->sh, c->sw}, span[2] = {(int64_t)(c->kh - 1) * c->dh + 1,
                                                          (int64_t)(c->kw - 1) * c->dw + 1};
    const int64_t crop[2] = {c->crop_top, c->crop_left};
    int64_t pads[4], extra[2];
    for (int a = 0; a < 2; a++) {
        const int64_t rest = (in[a] - 1) * stride[a] + span[a] - crop[a] - size[a];
        pads[a] = crop[a];
        pads[a + 2] = rest > 0 ? rest : 0;
        extra[a] = rest < 0 ? -rest : 0;
    }
    const int padded = extra[0] >= stride[0] || extra[1] >= stride[1];
    const int64_t dims[4] = {spec->shape.dims[3], spec->shape.dims[2], c->kh, c->kw};
    const char *args[3] = {
        kiln_onnx_input_value(g, i, 0, KILN_ONNX_CF),
        kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, "kernel"), 4, dims, cfhw),
        c->use_bias && !padded ? kiln_onnx_param_initializer(g, i, "bias") : NULL};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CF);
    const char *made = padded ? kiln_onnx_unique_name(g, kiln_onnx_printf(
                                    g, "%s/unpadded", g->layers[i].name)) : out;
    kiln_onnx_node *nd = kiln_onnx_add_node(g, "ConvTranspose", args, args[2] ? 3 : 2, made);
    const int64_t kernel[2] = {c->kh, c->kw}, dilations[2] = {c->dh, c->dw};
    const int64_t none[2] = {0, 0};
    kiln_onnx_attr_ints(g, nd, "kernel_shape", kernel, 2);
    kiln_onnx_attr_ints(g, nd, "strides", stride, 2);
    kiln_onnx_attr_ints(g, nd, "pads", pads, 4);
    kiln_onnx_attr_ints(g, nd, "output_padding", padded ? none : extra, 2);
    kiln_onnx_attr_ints(g, nd, "dilations", dilations, 2);
    kiln_onnx_attr_int(g, nd, "group", c->groups);
    if (padded) {
        const int64_t after[8] = {0, 0, 0, 0, 0, 0, extra[0], extra[1]};
        const char *pad[2] = {made, kiln_onnx_int64s(g, i, "output_padding", after, 8)};
        if (!c->use_bias) {
            kiln_onnx_add_node(g, "Pad", pad, 2, out);
        } else {
            const int64_t chw[3] = {c->filters, 1, 1};
            const float *bias = kiln_onnx_param(g, i, "bias", &spec);
            const char *sum[2] = {
                kiln_onnx_step(g, i, "Pad", pad[0], pad[1], "padded"),
                kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, "bias"), 3, chw, bias)};
            kiln_onnx_add_node(g, "Add", sum, 2, out);
        }
    }
    kiln_onnx_activate(g, i, KILN_ONNX_CF, out);
}

/* ONNX's output_shape (2 values: H and W), or for auto_pad SAME_UPPER and
 * SAME_LOWER the input times the stride, as explicit pads: the full
 * output's excess is cropped, an odd pixel after for SAME_UPPER and before
 * otherwise (ONNX's formula, which ONNX Runtime 1.30 and ONNX's node tests
 * follow); a shortfall is output_padding after the full output. */
static kiln_status target_pads(kiln_onnx_import *imp, const kiln_onnx_in_attr *shape,
                               int upper, kiln_onnx_window_spec *win, int32_t *extra)
{
    if (shape && shape->n_ints != 2)
        return kiln_onnx_refuse(imp, "attribute 'output_shape' has %zu values; kiln reads 2 "
                                "(height, width)", shape->n_ints);
    const char *what = shape ? "attribute 'output_shape'" : "attribute 'auto_pad' (SAME)";
    for (int a = 0; a < 2; a++) {
        const int64_t in = imp->in[0].dims[2 + a], s = win->strides[a];
        const int64_t full = (in - 1) * s + (int64_t)(win->kernel[a] - 1) * win->dilations[a] +
                             1 + extra[a];
        const int64_t want = shape ? shape->ints[a] : in * s, total = full - want;
        if (want < 1 || full > INT32_MAX || want > INT32_MAX)
            return kiln_onnx_refuse(imp, "%s asks for %lld pixels on axis %d, the full output "
                                    "holding %lld; kiln takes 1 to %d", what, (long long)want,
                                    a + 2, (long long)full, INT32_MAX);
        if (total < 0 && extra[a] - total >= s && extra[a] - total >= win->dilations[a])
            return kiln_onnx_refuse(imp, "%s asks for %lld pixels on axis %d, %lld past the "
                                    "full output; kiln adds fewer than the stride (%lld) or "
                                    "the dilation (%d)", what, (long long)want, a + 2,
                                    (long long)-total, (long long)s, (int)win->dilations[a]);
        const int64_t before = total < 0 ? 0 : upper ? total / 2 : total - total / 2;
        win->pads[a] = (int32_t)before;
        win->pads[a + 2] = (int32_t)(total < 0 ? 0 : total - before);
        extra[a] += total < 0 ? (int32_t)-total : 0;
    }
    return KILN_OK;
}

/* ONNX ConvTranspose: X, W (C, F / group, kh, kw) converted to (kh, kw, F /
 * group, C) (the layout conversion of Conv's OIHW, its axes 0 and 1 read as
 * C and F / group), B. */
static kiln_status convt_import_onnx(kiln_onnx_import *imp)
{
    kiln_status st = kiln_onnx_check_attrs(imp, "kernel_shape:I,strides:I,pads:I,auto_pad:s,"
                                           "dilations:I,group:i,output_padding:I,"
                                           "output_shape:I");
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 1, "W", 0);
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 2, "B", 1);
    if (st != KILN_OK)
        return st;
    const kiln_onnx_in *x = &imp->in[0], *w = &imp->in[1];
    if (w->rank != 4 || x->rank != 4)
        return kiln_onnx_refuse(imp, "X is %d-D and W %d-D; kiln imports 2-D transposed "
                                "convolutions (4-D X and W)", x->rank, w->rank);
    const int64_t group = kiln_onnx_attr_i(imp, "group", 1);
    if (group < 1 || x->dims[1] != w->dims[0] || w->dims[0] % group ||
        w->dims[1] * group > INT32_MAX)
        return kiln_onnx_refuse(imp, "attribute 'group' is %lld, with X of %lld channels and W "
                                "'%s' of (%lld, %lld, ...); ONNX asks for W's first axis = X's "
                                "channels, a multiple of group", (long long)group,
                                (long long)x->dims[1], w->name, (long long)w->dims[0],
                                (long long)w->dims[1]);
    kiln_onnx_window_spec win = {.kernel = {(int32_t)w->dims[2], (int32_t)w->dims[3]}};
    st = kiln_onnx_window(imp, 1, &win);
    if (st != KILN_OK)
        return st;
    if (win.kernel[0] != w->dims[2] || win.kernel[1] != w->dims[3]) {
        snprintf(imp->error, sizeof imp->error, "attribute 'kernel_shape' (%d, %d) disagrees "
                 "with W '%s' (%lld, %lld, %lld, %lld)", (int)win.kernel[0], (int)win.kernel[1],
                 w->name, (long long)w->dims[0], (long long)w->dims[1], (long long)w->dims[2],
                 (long long)w->dims[3]);
        return KILN_ERROR_SHAPE;
    }
    int32_t extra[2] = {0, 0};
    const kiln_onnx_in_attr *op = kiln_onnx_find_attr(imp, "output_padding");
    if (op && op->n_ints != 2)
        return kiln_onnx_refuse(imp, "attribute 'output_padding' has %zu values; kiln reads 2",
                                op->n_ints);
    for (int a = 0; op && a < 2; a++) {
        if (op->ints[a] < 0 || (op->ints[a] >= win.strides[a] &&
                                op->ints[a] >= win.dilations[a]))
            return kiln_onnx_refuse(imp, "attribute 'output_padding' (%lld, %lld) must be >= 0 "
                                    "and below the strides (%d, %d) or the dilations (%d, %d)",
                                    (long long)op->ints[0], (long long)op->ints[1],
                                    (int)win.strides[0], (int)win.strides[1],
                                    (int)win.dilations[0], (int)win.dilations[1]);
        extra[a] = (int32_t)op->ints[a];
    }
    /* kiln_onnx_window read auto_pad (and refused values ONNX does not
     * have); its SAME pads are a convolution's, so they are made here. */
    const kiln_onnx_in_attr *ap = kiln_onnx_find_attr(imp, "auto_pad");
    const int upper = ap && strcmp(ap->s, "SAME_UPPER") == 0;
    const int same = upper || (ap && strcmp(ap->s, "SAME_LOWER") == 0);
    const kiln_onnx_in_attr *shape = kiln_onnx_find_attr(imp, "output_shape");
    if (shape || same) {
        st = target_pads(imp, shape, upper, &win, extra);
        if (st != KILN_OK)
            return st;
    }
    const int bias = imp->n_in > 2 && *imp->in[2].name;
    kiln_conv2d_transpose_options *o = (kiln_conv2d_transpose_options *)imp->args.bytes;
    /* Always explicit: kiln's 'valid' is Keras's, which differs from
     * ONNX's VALID (no crop) for kernels narrower than their stride. */
    *o = (kiln_conv2d_transpose_options){
        .struct_size = sizeof *o, .filters = (int32_t)(w->dims[1] * group),
        .kernel_size = {win.kernel[0], win.kernel[1]},
        .strides = {win.strides[0], win.strides[1]}, .padding = KILN_PADDING_EXPLICIT,
        .pads = {win.pads[0], win.pads[1], win.pads[2], win.pads[3]},
        .output_padding = {extra[0], extra[1]},
        .dilations = {win.dilations[0], win.dilations[1]}, .groups = (int32_t)group,
        .no_bias = !bias};
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    kiln_onnx_param_from(imp, 0, 1, KILN_ONNX_PARAM_OIHW);
    if (bias)
        kiln_onnx_param_from(imp, 1, 2, KILN_ONNX_PARAM_AS_IS);
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_conv2d_transpose = {
    .kind = "conv2d_transpose", .config_size = sizeof(convt_config),
    .replica_size = sizeof(convt_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = convt_configure, .describe = convt_describe, .infer = convt_infer,
    .kernels = convt_kernels, .prepare = convt_prepare, .forward = convt_forward,
    .backward = convt_backward, .release = convt_release, .flops = convt_flops,
    .writes_trainable_gradients_only = 1,
    .fuses_activation = kiln_layer_fuses_activation,
    .args_size = sizeof(kiln_conv2d_transpose_options), KILN_FIELDS(convt_fields),
    .takes_activation = 1, .export_onnx = convt_export_onnx, .import_onnx = convt_import_onnx,
};
