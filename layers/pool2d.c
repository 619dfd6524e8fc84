/* Window arithmetic shared by the pooling layers. */
#include "layers/pool2d.h"
#include "layers/onnx_graph.h"

#include <stdio.h>
#include <string.h>
#include <stddef.h>

pool_config kiln_pool2d_config(const kiln_pool2d_options *o)
{
    pool_config c = {.ph = o->pool_size[0] ? o->pool_size[0] : 2,
                     .pw = o->pool_size[1] ? o->pool_size[1] : 2, .padding = o->padding};
    c.sh = o->strides[0] ? o->strides[0] : c.ph;
    c.sw = o->strides[1] ? o->strides[1] : c.pw;
    return c;
}

void kiln_pool2d_describe(const void *config, void *args)
{
    const pool_config *c = config;
    kiln_pool2d_options *o = args;
    o->pool_size[0] = c->ph;
    o->pool_size[1] = c->pw;
    o->strides[0] = c->sh;
    o->strides[1] = c->sw;
    o->padding = c->padding;
}

kiln_status kiln_pool2d_infer(void *config, kiln_layer_build *b)
{
    pool_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64];
    if (in->rank != 3) {
        snprintf(b->error, sizeof b->error, "expects a (height, width, channels) input, got %s",
                 kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    if (c->global) {
        c->ph = c->sh = in->dims[0];
        c->pw = c->sw = in->dims[1];
        c->padding = KILN_PADDING_VALID;
    }
    if (c->ph <= 0 || c->pw <= 0 || c->sh <= 0 || c->sw <= 0) {
        snprintf(b->error, sizeof b->error, "pool_size (%d, %d) and strides (%d, %d) must be "
                 "> 0", (int)c->ph, (int)c->pw, (int)c->sh, (int)c->sw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if ((int)c->padding < KILN_PADDING_VALID || c->padding > KILN_PADDING_SAME) {
        snprintf(b->error, sizeof b->error, "padding %d is not a kiln_padding", (int)c->padding);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->h = in->dims[0];
    c->w = in->dims[1];
    c->c = in->dims[2];
    kiln_window_axis y = {.in = c->h, .window = c->ph, .stride = c->sh, .dilation = 1,
                          .padding = c->padding};
    kiln_window_axis x = {.in = c->w, .window = c->pw, .stride = c->sw, .dilation = 1,
                          .padding = c->padding};
    const int fit_h = kiln_window_infer(&y), fit_w = kiln_window_infer(&x);
    c->oh = y.out;
    c->ow = x.out;
    c->pad_top = y.pad_before;
    c->pad_bottom = y.pad_after;
    c->pad_left = x.pad_before;
    c->pad_right = x.pad_after;
    if (fit_h < 0 || fit_w < 0) {
        snprintf(b->error, sizeof b->error, "pool (%d, %d) with 'same' padding over input %s "
                 "spans more than %d pixels", (int)c->ph, (int)c->pw,
                 kiln_shape_str(in, s, sizeof s), INT32_MAX);
        return KILN_ERROR_SHAPE;
    }
    if (!fit_h || !fit_w) {
        snprintf(b->error, sizeof b->error, "pool (%d, %d) is larger than input %s with "
                 "'valid' padding", (int)c->ph, (int)c->pw, kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    if (c->global) {
        b->out.rank = 1;
        b->out.dims[0] = c->c;
        return KILN_OK;
    }
    b->out.rank = 3;
    b->out.dims[0] = c->oh;
    b->out.dims[1] = c->ow;
    b->out.dims[2] = c->c;
    return KILN_OK;
}

size_t kiln_pool2d_out_count(const pool_config *c, int32_t batch)
{
    return (size_t)batch * (size_t)c->oh * (size_t)c->ow * (size_t)c->c;
}

uint64_t kiln_pool2d_flops(const void *config, const kiln_shape *in_shape)
{
    const pool_config *c = config;
    (void)in_shape;
    return (uint64_t)kiln_pool2d_out_count(c, 1) * (uint64_t)c->ph * (uint64_t)c->pw;
}

kiln_status kiln_pool2d_run(kiln_device *dev, kiln_kernel *kernel, size_t pixels, size_t row,
                            size_t channels, kiln_args args)
{
    const kiln_range cpu = {.dims = 1, .size = {pixels / row}};
    const kiln_range gpu = {.dims = 2, .size = {channels, pixels}};
    return kiln_kernel_run_variant(dev, kernel, &cpu, &gpu, args);
}

const kiln_layer_field kiln_pool2d_fields[3] = {
    {.key = "pool_size", .type = KILN_FIELD_PAIR,
     .offset = offsetof(kiln_pool2d_options, pool_size)},
    {.key = "strides", .type = KILN_FIELD_PAIR, .offset = offsetof(kiln_pool2d_options, strides)},
    {.key = "padding", .type = KILN_FIELD_PADDING,
     .offset = offsetof(kiln_pool2d_options, padding)},
};

void kiln_pool2d_export_onnx(kiln_onnx_graph *g, int32_t i, const char *op)
{
    kiln_pool2d_options o;
    memset(&o, 0, sizeof o);
    kiln_pool2d_describe(g->layers[i].config, &o);
    const char *x = kiln_onnx_input_value(g, i, 0, KILN_ONNX_CF);
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CF);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, op, &x, 1, out);
    const pool_config *c = g->layers[i].config;
    const int32_t pads[4] = {c->pad_top, c->pad_left, c->pad_bottom, c->pad_right};
    kiln_onnx_window_attrs(g, nd, o.pool_size, o.strides, pads);
    /* Keras averages over the cells inside the image only. */
    if (strcmp(op, "AveragePool") == 0)
        kiln_onnx_attr_int(g, nd, "count_include_pad", 0);
    kiln_onnx_activate(g, i, KILN_ONNX_CF, out);
}
