/* Conv2D over NHWC, kernel (kh, kw, C / groups, F): im2col + a GEMM per
 * group (the groups in one batched launch); GEMMs on the input itself for
 * 1x1 stride-1 ones (conv2d_pointwise.c); direct kernels when the patch is
 * small (conv2d_direct.c) or the convolution depthwise
 * (conv2d_depthwise.c), or for 3x3 stride-1 'same' ones Winograd's
 * transforms around 16 GEMMs (conv2d_winograd.c). */
#include "layers/conv2d.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <string.h>
#include <stddef.h>

size_t kiln_conv2d_patch(const conv2d_config *c)
{
    return (size_t)c->kh * (size_t)c->kw * (size_t)(c->c / c->groups);
}

size_t kiln_conv2d_out_pixels(const conv2d_config *c, int32_t batch)
{
    return (size_t)batch * (size_t)c->oh * (size_t)c->ow;
}

static kiln_status conv2d_infer(void *config, kiln_layer_build *b)
{
    conv2d_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64];
    if (c->filters <= 0 || c->kh <= 0 || c->kw <= 0 || c->sh <= 0 || c->sw <= 0) {
        snprintf(b->error, sizeof b->error, "filters (%d), kernel_size (%d, %d) and strides "
                 "(%d, %d) must be > 0", (int)c->filters, (int)c->kh, (int)c->kw, (int)c->sh,
                 (int)c->sw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->groups <= 0) {
        snprintf(b->error, sizeof b->error, "groups %d must be >= 0 (0: 1)", (int)c->groups);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->dh <= 0 || c->dw <= 0) {
        snprintf(b->error, sizeof b->error, "dilations (%d, %d) must be >= 0 (0: 1)",
                 (int)c->dh, (int)c->dw);
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
    kiln_window_axis y = {.in = c->h, .window = c->kh, .stride = c->sh, .dilation = c->dh,
                          .padding = c->padding, .pad_before = c->pads[0],
                          .pad_after = c->pads[2]};
    kiln_window_axis x = {.in = c->w, .window = c->kw, .stride = c->sw, .dilation = c->dw,
                          .padding = c->padding, .pad_before = c->pads[1],
                          .pad_after = c->pads[3]};
    const int fit_h = kiln_window_infer(&y), fit_w = kiln_window_infer(&x);
    if (fit_h < 0 || fit_w < 0) {
        snprintf(b->error, sizeof b->error, "kernel (%d, %d) with %s over input %s spans "
                 "more than %d pixels", (int)c->kh, (int)c->kw, kiln_padding_words(c->padding),
                 kiln_shape_str(in, s, sizeof s), INT32_MAX);
        return KILN_ERROR_SHAPE;
    }
    if (!fit_h || !fit_w) {
        char taps[64] = "";
        if (c->dh > 1 || c->dw > 1)
            snprintf(taps, sizeof taps, " dilated (%d, %d)", (int)c->dh, (int)c->dw);
        snprintf(b->error, sizeof b->error, "kernel (%d, %d)%s is larger than input %s with %s",
                 (int)c->kh, (int)c->kw, taps, kiln_shape_str(in, s, sizeof s),
                 kiln_padding_words(c->padding));
        return KILN_ERROR_SHAPE;
    }
    c->oh = y.out;
    c->ow = x.out;
    c->pad_top = y.pad_before;
    c->pad_bottom = y.pad_after;
    c->pad_left = x.pad_before;
    c->pad_right = x.pad_after;
    c->depthwise = kiln_conv2d_use_depthwise(c);
    c->pointwise = !c->depthwise && kiln_conv2d_use_pointwise(c);
    c->direct = !c->depthwise && !c->pointwise && kiln_conv2d_use_direct(c);
    c->winograd = !c->depthwise && !c->pointwise && !c->direct && kiln_conv2d_use_winograd(c);
    b->out.rank = 3;
    b->out.dims[0] = c->oh;
    b->out.dims[1] = c->ow;
    b->out.dims[2] = c->filters;
    kiln_conv2d_add_params(b, c->kh, c->kw, c->c / c->groups, c->filters, c->filters,
                           c->use_bias);
    return KILN_OK;
}

void kiln_conv2d_add_params(kiln_layer_build *b, int32_t kh, int32_t kw, int32_t d2, int32_t d3,
                            int32_t filters, int use_bias)
{
    kiln_param_spec *k = &b->params[b->n_params++];
    k->name = "kernel";
    k->shape.rank = 4;
    k->shape.dims[0] = kh;
    k->shape.dims[1] = kw;
    k->shape.dims[2] = d2;
    k->shape.dims[3] = d3;
    k->init = KILN_INIT_GLOROT_UNIFORM;
    k->fan_in = (int64_t)kh * kw * d2;
    k->fan_out = (int64_t)kh * kw * d3;
    if (use_bias) {
        kiln_param_spec *bias = &b->params[b->n_params++];
        bias->name = "bias";
        bias->shape.rank = 1;
        bias->shape.dims[0] = filters;
        bias->init = KILN_INIT_ZEROS;
    }
}

static kiln_status conv2d_kernels(const void *config, void *replica, kiln_device *dev)
{
    const conv2d_config *c = config;
    conv2d_replica *r = replica;
    if (c->depthwise)
        return kiln_conv2d_depthwise_kernels(r, dev);
    if (c->pointwise)
        return KILN_OK;   /* GEMMs and the bias's kernels only */
    if (c->direct)
        return kiln_conv2d_direct_kernels(r, dev);
    /* The GPU variants take a work-item per float (see conv2d.cl). */
    kiln_status st = kiln_kernel_get_variant(dev, "conv2d", "kiln_conv2d_im2col",
                                             &r->kernels.im2col);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "conv2d", "kiln_conv2d_col2im", &r->kernels.col2im);
    if (st == KILN_OK && c->winograd)
        st = kiln_conv2d_winograd_kernels(r, dev);
    return st;
}

static kiln_status conv2d_prepare(const void *config, void *replica, kiln_device *dev,
                                  const kiln_shape *in_shape, int32_t max_batch)
{
    const conv2d_config *c = config;
    conv2d_replica *r = replica;
    (void)in_shape;
    if (c->depthwise)
        return kiln_buffer_create(dev, kiln_conv2d_depthwise_scratch(c, dev, max_batch),
                                  "depthwise conv2d partial weight gradients", &r->scratch);
    if (c->pointwise)
        return kiln_conv2d_pointwise_prepare(c, r, dev);
    if (c->direct)
        return kiln_buffer_create(dev, kiln_conv2d_direct_scratch(c, dev, max_batch),
                                  "conv2d partial weight gradients", &r->scratch);
    kiln_status st = kiln_buffer_create(dev, kiln_conv2d_out_pixels(c, max_batch) *
                                                 kiln_conv2d_patch(c) * (size_t)c->groups *
                                                 sizeof(float),
                                        "a conv2d im2col buffer", &r->scratch);
    if (st == KILN_OK && c->winograd)
        return kiln_conv2d_winograd_prepare(c, r, dev, max_batch);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, kiln_conv2d_patch(c) * (size_t)c->filters * sizeof(float),
                                "a transposed conv2d kernel", &r->kernel_t);
    return st;
}

static void conv2d_release(void *replica)
{
    conv2d_replica *r = replica;
    kiln_buffer_destroy(r->scratch);
    kiln_buffer_destroy(r->kernel_t);
    kiln_buffer_destroy(r->wino_u);
    kiln_buffer_destroy(r->wino_v);
    kiln_buffer_destroy(r->wino_m);
    r->scratch = r->kernel_t = r->wino_u = r->wino_v = r->wino_m = NULL;
}

/* The forward patches into r->scratch, one row per output pixel, group
 * after group. */
static kiln_status im2col(const conv2d_config *c, conv2d_replica *r, const kiln_step *s)
{
    const size_t m = kiln_conv2d_out_pixels(c, s->batch);
    /* im2col and col2im take their two buffers, their work-items' count
     * (output or input pixels) and the window. */
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(r->scratch),
                            kiln_arg_int((int64_t)m), KILN_CONV2D_WINDOW_ARGS(c),
                            kiln_arg_int(c->groups));
    /* An output pixel a work-item, or a float of its patch rows. */
    const kiln_range cpu = {.dims = 1, .size = {m}};
    const kiln_range gpu = {.dims = 2, .size = {kiln_conv2d_patch(c) * (size_t)c->groups, m}};
    return kiln_kernel_run_variant(s->dev, r->kernels.im2col, &cpu, &gpu, a);
}

static kiln_status conv2d_forward(const void *config, void *replica, const kiln_step *s)
{
    const conv2d_config *c = config;
    conv2d_replica *r = replica;
    if (c->depthwise)
        return kiln_conv2d_depthwise_forward(c, r, s);
    if (c->direct)
        return kiln_conv2d_direct_forward(c, r, s);
    const size_t m = kiln_conv2d_out_pixels(c, s->batch), k = kiln_conv2d_patch(c);
    const size_t f = (size_t)c->filters, fg = f / (size_t)c->groups;
    kiln_status st;
    if (c->pointwise) {
        st = kiln_conv2d_pointwise_forward(c, s);
    } else if (c->winograd) {
        st = kiln_conv2d_winograd_forward(c, r, s);
    } else {
        /* Group g: its patches times its columns of the kernel, into its
         * columns of the output; the groups in one launch. */
        st = im2col(c, r, s);
        if (st == KILN_OK)
            st = kiln_gemm_batched(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, fg, k, 1.0f, r->scratch,
                                   0, k, m * k, s->params, s->param_offset[0], f, fg, 0.0f,
                                   s->out, 0, f, fg, (size_t)c->groups);
    }
    if (st != KILN_OK)
        return st;
    if (!c->use_bias)
        return kiln_step_activate(s, s->out);
    return kiln_bias_add(s->dev, s->out, m, f, s->params, s->param_offset[1], s->activation);
}

static kiln_status conv2d_backward(const void *config, void *replica, const kiln_step *s)
{
    const conv2d_config *c = config;
    conv2d_replica *r = replica;
    if (c->depthwise)
        return kiln_conv2d_depthwise_backward(c, r, s);
    if (c->pointwise)
        return kiln_conv2d_pointwise_backward(c, r, s);
    if (c->direct)
        return kiln_conv2d_direct_backward(c, r, s);
    const size_t m = kiln_conv2d_out_pixels(c, s->batch), k = kiln_conv2d_patch(c);
    const size_t f = (size_t)c->filters, fg = f / (size_t)c->groups;
    /* dW = col^T dy per group, while col still holds the forward patches
     * (Winograd's forward made none: they are made here); none for a frozen
     * layer, whose weights replicas keep no gradient for. */
    kiln_status st = c->winograd && !s->frozen ? im2col(c, r, s) : KILN_OK;
    if (st == KILN_OK && !s->frozen)
        st = kiln_gemm_batched(s->dev, KILN_GEMM_T, KILN_GEMM_N, k, fg, m, 1.0f, r->scratch, 0,
                               k, m * k, s->d_out, 0, f, fg, 0.0f, s->grads,
                               s->param_offset[0], f, fg, (size_t)c->groups);
    if (st == KILN_OK && c->use_bias && !s->frozen)
        st = kiln_column_sum(s->dev, s->d_out, m, f, s->grads, s->param_offset[1], 0);
    if (st != KILN_OK || !s->d_in[0])
        return st;
    if (c->winograd)
        return kiln_conv2d_winograd_input_grad(c, r, s);
    /* dcol = dy W^T per group overwrites col, then gathers back to the
     * input; a plain GEMM on W^T (kiln_transpose says why), whose rows
     * group g's filters are. */
    st = kiln_transpose(s->dev, s->params, s->param_offset[0], k, f, r->kernel_t);
    if (st == KILN_OK)
        st = kiln_gemm_batched(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, k, fg, 1.0f, s->d_out, 0, f,
                               fg, r->kernel_t, 0, k, fg * k, 0.0f, r->scratch, 0, k, m * k,
                               (size_t)c->groups);
    if (st != KILN_OK)
        return st;
    const size_t pixels = (size_t)s->batch * (size_t)c->h * (size_t)c->w;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(r->scratch), kiln_arg_buffer(s->d_in[0]),
                            kiln_arg_int((int64_t)pixels), KILN_CONV2D_WINDOW_ARGS(c),
                            kiln_arg_int(c->groups), kiln_arg_int(s->d_in_accumulate[0]));
    /* An input pixel a work-item, or one of its channels. */
    const kiln_range cpu = {.dims = 1, .size = {pixels}};
    const kiln_range gpu = {.dims = 2, .size = {(size_t)c->c, pixels}};
    return kiln_kernel_run_variant(s->dev, r->kernels.col2im, &cpu, &gpu, a);
}

static uint64_t conv2d_flops(const void *config, const kiln_shape *in_shape)
{
    const conv2d_config *c = config;
    (void)in_shape;
    return 2u * (uint64_t)kiln_conv2d_out_pixels(c, 1) * kiln_conv2d_patch(c) *
           (uint64_t)c->filters;
}

/* args: the kiln_conv2d_options the builder copied. */
static void conv2d_configure(void *config, const void *args)
{
    const kiln_conv2d_options *o = args;
    *(conv2d_config *)config = (conv2d_config){
        .filters = o->filters, .kh = o->kernel_size[0], .kw = o->kernel_size[1],
        .sh = o->strides[0] ? o->strides[0] : 1, .sw = o->strides[1] ? o->strides[1] : 1,
        .padding = o->padding, .use_bias = !o->no_bias,
        .pads = {o->pads[0], o->pads[1], o->pads[2], o->pads[3]},
        /* A negative one stays, for infer to refuse. */
        .dh = o->dilations[0] ? o->dilations[0] : 1, .dw = o->dilations[1] ? o->dilations[1] : 1,
        .groups = o->groups ? o->groups : 1};
}

static void conv2d_describe(const void *config, void *args)
{
    const conv2d_config *c = config;
    kiln_conv2d_options *o = args;
    o->filters = c->filters;
    o->kernel_size[0] = c->kh;
    o->kernel_size[1] = c->kw;
    o->strides[0] = c->sh;
    o->strides[1] = c->sw;
    o->padding = c->padding;
    o->no_bias = !c->use_bias;
    memcpy(o->pads, c->pads, sizeof o->pads);
    /* 1 is the default: written back as 0, so files of undilated layers
     * stay as they were. */
    o->dilations[0] = c->dh == 1 && c->dw == 1 ? 0 : c->dh;
    o->dilations[1] = c->dh == 1 && c->dw == 1 ? 0 : c->dw;
    o->groups = c->groups == 1 ? 0 : c->groups;
}

static const kiln_layer_field conv2d_fields[] = {
    {.key = "filters", .type = KILN_FIELD_INT, .offset = offsetof(kiln_conv2d_options, filters)},
    {.key = "kernel_size", .type = KILN_FIELD_PAIR,
     .offset = offsetof(kiln_conv2d_options, kernel_size)},
    {.key = "strides", .type = KILN_FIELD_PAIR,
     .offset = offsetof(kiln_conv2d_options, strides)},
    {.key = "padding", .type = KILN_FIELD_PADDING,
     .offset = offsetof(kiln_conv2d_options, padding)},
    {.key = "use_bias", .type = KILN_FIELD_NOT_BOOL,
     .offset = offsetof(kiln_conv2d_options, no_bias)},
    {.key = "pads", .type = KILN_FIELD_QUAD, .offset = offsetof(kiln_conv2d_options, pads),
     .optional = 1},
    {.key = "dilation_rate", .type = KILN_FIELD_PAIR,
     .offset = offsetof(kiln_conv2d_options, dilations), .optional = 1},
    {.key = "groups", .type = KILN_FIELD_INT, .offset = offsetof(kiln_conv2d_options, groups),
     .optional = 1},
};

/* ONNX's Conv is channels-first, its kernel (filters, channels, kh, kw). */
static void conv2d_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    kiln_conv2d_options o;
    memset(&o, 0, sizeof o);
    conv2d_describe(g->layers[i].config, &o);
    const kiln_param_spec *spec;
    const float *hwio = kiln_onnx_param(g, i, "kernel", &spec);
    const int32_t kh = spec->shape.dims[0], kw = spec->shape.dims[1];
    const int32_t c = spec->shape.dims[2], f = spec->shape.dims[3];
    float *oihw = kiln_onnx_alloc(g, (size_t)kh * kw * c * f * sizeof *oihw);
    if (!oihw)
        return;
    for (int32_t y = 0; y < kh; y++)
        for (int32_t x = 0; x < kw; x++)
            for (int32_t ci = 0; ci < c; ci++)
                for (int32_t fi = 0; fi < f; fi++)
                    oihw[(((size_t)fi * c + ci) * kh + y) * kw + x] =
                        hwio[(((size_t)y * kw + x) * c + ci) * f + fi];
    const int64_t dims[4] = {f, c, kh, kw};
    const char *args[3] = {
        kiln_onnx_input_value(g, i, 0, KILN_ONNX_CF),
        kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, "kernel"), 4, dims, oihw),
        o.no_bias ? NULL : kiln_onnx_param_initializer(g, i, "bias")};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CF);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, "Conv", args, o.no_bias ? 2 : 3, out);
    const conv2d_config *cfg = g->layers[i].config;
    const int32_t pads[4] = {cfg->pad_top, cfg->pad_left, cfg->pad_bottom, cfg->pad_right};
    kiln_onnx_window_attrs(g, nd, o.kernel_size, o.strides, pads);
    const int64_t dilations[2] = {cfg->dh, cfg->dw};
    kiln_onnx_attr_ints(g, nd, "dilations", dilations, 2);
    kiln_onnx_attr_int(g, nd, "group", cfg->groups);
    kiln_onnx_activate(g, i, KILN_ONNX_CF, out);
}

/* ONNX Conv: X, W (F, C, kh, kw) converted to (kh, kw, C, F), B. */
static kiln_status conv2d_import_onnx(kiln_onnx_import *imp)
{
    kiln_status st = kiln_onnx_check_attrs(imp, "kernel_shape:I,strides:I,pads:I,auto_pad:s,"
                                           "dilations:I,group:i");
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 1, "W", 0);
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 2, "B", 1);
    if (st != KILN_OK)
        return st;
    const kiln_onnx_in *w = &imp->in[1];
    if (w->rank != 4 || imp->in[0].rank != 4)
        return kiln_onnx_refuse(imp, "X is %d-D and W %d-D; kiln imports 2-D convolutions "
                                "(4-D X and W)", imp->in[0].rank, w->rank);
    const int64_t group = kiln_onnx_attr_i(imp, "group", 1);
    if (group < 1 || group > INT32_MAX || imp->in[0].dims[1] != w->dims[1] * group)
        return kiln_onnx_refuse(imp, "attribute 'group' is %lld, with X of %lld channels and W "
                                "'%s' of %lld per group; ONNX asks for X's channels = group x "
                                "W's", (long long)group, (long long)imp->in[0].dims[1], w->name,
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
    const int bias = imp->n_in > 2 && *imp->in[2].name;
    kiln_conv2d_options *o = (kiln_conv2d_options *)imp->args.bytes;
    *o = (kiln_conv2d_options){.struct_size = sizeof *o, .filters = (int32_t)w->dims[0],
                               .kernel_size = {win.kernel[0], win.kernel[1]},
                               .strides = {win.strides[0], win.strides[1]},
                               .padding = win.padding,
                               .pads = {win.pads[0], win.pads[1], win.pads[2], win.pads[3]},
                               .dilations = {win.dilations[0], win.dilations[1]},
                               .groups = (int32_t)group, .no_bias = !bias};
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    kiln_onnx_param_from(imp, 0, 1, KILN_ONNX_PARAM_OIHW);
    if (bias)
        kiln_onnx_param_from(imp, 1, 2, KILN_ONNX_PARAM_AS_IS);
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_conv2d = {
    .kind = "conv2d", .config_size = sizeof(conv2d_config), .replica_size = sizeof(conv2d_replica),
    .min_inputs = 1, .max_inputs = 1, .configure = conv2d_configure, .describe = conv2d_describe,
    .infer = conv2d_infer, .kernels = conv2d_kernels, .prepare = conv2d_prepare,
    .forward = conv2d_forward, .backward = conv2d_backward, .release = conv2d_release,
    .flops = conv2d_flops, .fuses_activation = kiln_layer_fuses_activation,
    .args_size = sizeof(kiln_conv2d_options), KILN_FIELDS(conv2d_fields), .takes_activation = 1,
    .export_onnx = conv2d_export_onnx,
    .import_onnx = conv2d_import_onnx,
    .writes_trainable_gradients_only = 1,
};
