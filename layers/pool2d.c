/* Window arithmetic shared by the pooling layers. */
#include "layers/pool2d.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

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
    const int fit_h = kiln_window_output(c->h, c->ph, c->sh, c->padding, &c->oh, &c->pad_top);
    const int fit_w = kiln_window_output(c->w, c->pw, c->sw, c->padding, &c->ow, &c->pad_left);
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
    kiln_onnx_window_attrs(g, nd, kiln_onnx_input_shape(g, i, 0), o.pool_size, o.strides,
                           o.padding);
    /* Keras averages over the cells inside the image only. */
    if (strcmp(op, "AveragePool") == 0)
        kiln_onnx_attr_int(g, nd, "count_include_pad", 0);
    kiln_onnx_activate(g, i, KILN_ONNX_CF, out);
}

kiln_status kiln_pool2d_import_onnx(kiln_onnx_import *imp, int average)
{
    kiln_status st = kiln_onnx_check_attrs(imp, average
        ? "kernel_shape:I,strides:I,pads:I,auto_pad:s,ceil_mode:i,count_include_pad:i"
        : "kernel_shape:I,strides:I,pads:I,auto_pad:s,dilations:I,ceil_mode:i,storage_order:i");
    if (st != KILN_OK)
        return st;
    if (imp->in[0].rank != 4)
        return kiln_onnx_refuse(imp, "X is %d-D; kiln pools 4-D (N, C, H, W) values",
                                imp->in[0].rank);
    int32_t kernel[2] = {0, 0}, strides[2];
    kiln_padding padding;
    st = kiln_onnx_window(imp, kernel, strides, &padding);
    if (st != KILN_OK)
        return st;
    if (kiln_onnx_attr_i(imp, "storage_order", 0) != 0)
        return kiln_onnx_refuse(imp, "attribute 'storage_order' is 1; kiln supports 0");
    /* ceil_mode changes nothing where the windows tile the input exactly. */
    if (kiln_onnx_attr_i(imp, "ceil_mode", 0) != 0) {
        int exact = padding == KILN_PADDING_VALID;
        for (int a = 0; a < 2 && exact; a++)
            exact = imp->in[0].dims[2 + a] >= kernel[a] &&
                    (imp->in[0].dims[2 + a] - kernel[a]) % strides[a] == 0;
        if (!exact)
            return kiln_onnx_refuse(imp, "attribute 'ceil_mode' is 1 where it adds a partial "
                                    "window; kiln supports 0 (or 1 where windows tile the "
                                    "input)");
    }
    /* kiln's 'same' average counts the cells inside the input only. */
    if (average && padding == KILN_PADDING_SAME && kiln_onnx_attr_i(imp, "count_include_pad", 0))
        return kiln_onnx_refuse(imp, "attribute 'count_include_pad' is 1 with padding; kiln "
                                "supports 0");
    kiln_pool2d_options *o = (kiln_pool2d_options *)imp->args.bytes;
    *o = (kiln_pool2d_options){.struct_size = sizeof *o, .pool_size = {kernel[0], kernel[1]},
                               .strides = {strides[0], strides[1]}, .padding = padding};
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    return KILN_OK;
}

kiln_status kiln_pool2d_import_global(kiln_onnx_import *imp)
{
    const kiln_status st = kiln_onnx_check_attrs(imp, "");
    if (st != KILN_OK)
        return st;
    if (imp->in[0].rank != 4)
        return kiln_onnx_refuse(imp, "X is %d-D; kiln pools 4-D (N, C, H, W) values",
                                imp->in[0].rank);
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    imp->out_rank = 4;   /* (N, C, 1, 1), kiln's (C) */
    return KILN_OK;
}
