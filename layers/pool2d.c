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
                     .pw = o->pool_size[1] ? o->pool_size[1] : 2, .padding = o->padding,
                     .pads = {o->pads[0], o->pads[1], o->pads[2], o->pads[3]},
                     .ceil_mode = o->ceil_mode != 0, .include_pad = o->count_include_pad != 0};
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
    memcpy(o->pads, c->pads, sizeof o->pads);
    o->ceil_mode = c->ceil_mode;
    o->count_include_pad = c->include_pad;
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
    if ((int)c->padding < KILN_PADDING_VALID || c->padding > KILN_PADDING_EXPLICIT) {
        snprintf(b->error, sizeof b->error, "padding %d is not a kiln_padding", (int)c->padding);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    const int32_t *p = c->pads;
    if (c->padding == KILN_PADDING_EXPLICIT &&
        (p[0] < 0 || p[1] < 0 || p[2] < 0 || p[3] < 0 || p[0] >= c->ph || p[2] >= c->ph ||
         p[1] >= c->pw || p[3] >= c->pw)) {
        snprintf(b->error, sizeof b->error, "pads (%d, %d, %d, %d) must be >= 0 and less than "
                 "pool_size (%d, %d) along their axis", (int)p[0], (int)p[1], (int)p[2],
                 (int)p[3], (int)c->ph, (int)c->pw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->h = in->dims[0];
    c->w = in->dims[1];
    c->c = in->dims[2];
    kiln_window_axis y = {.in = c->h, .window = c->ph, .stride = c->sh, .dilation = 1,
                          .padding = c->padding, .pad_before = p[0], .pad_after = p[2],
                          .ceil_mode = c->ceil_mode};
    kiln_window_axis x = {.in = c->w, .window = c->pw, .stride = c->sw, .dilation = 1,
                          .padding = c->padding, .pad_before = p[1], .pad_after = p[3],
                          .ceil_mode = c->ceil_mode};
    const int fit_h = kiln_window_infer(&y), fit_w = kiln_window_infer(&x);
    c->oh = y.out;
    c->ow = x.out;
    c->pad_top = y.pad_before;
    c->pad_bottom = y.pad_after;
    c->pad_left = x.pad_before;
    c->pad_right = x.pad_after;
    if (fit_h < 0 || fit_w < 0) {
        snprintf(b->error, sizeof b->error, "pool (%d, %d) with %s over input %s spans more "
                 "than %d pixels", (int)c->ph, (int)c->pw, kiln_padding_words(c->padding),
                 kiln_shape_str(in, s, sizeof s), INT32_MAX);
        return KILN_ERROR_SHAPE;
    }
    if (!fit_h || !fit_w) {
        snprintf(b->error, sizeof b->error, "pool (%d, %d) is larger than input %s with %s",
                 (int)c->ph, (int)c->pw, kiln_shape_str(in, s, sizeof s),
                 kiln_padding_words(c->padding));
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

const kiln_layer_field kiln_pool2d_fields[6] = {
    {.key = "pool_size", .type = KILN_FIELD_PAIR,
     .offset = offsetof(kiln_pool2d_options, pool_size)},
    {.key = "strides", .type = KILN_FIELD_PAIR, .offset = offsetof(kiln_pool2d_options, strides)},
    {.key = "padding", .type = KILN_FIELD_PADDING,
     .offset = offsetof(kiln_pool2d_options, padding)},
    {.key = "pads", .type = KILN_FIELD_QUAD, .offset = offsetof(kiln_pool2d_options, pads),
     .optional = 1},
    {.key = "ceil_mode", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_pool2d_options, ceil_mode), .optional = 1},
    {.key = "count_include_pad", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_pool2d_options, count_include_pad), .optional = 1},
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
    kiln_onnx_attr_int(g, nd, "ceil_mode", c->ceil_mode);
    if (strcmp(op, "AveragePool") == 0)
        kiln_onnx_attr_int(g, nd, "count_include_pad", c->include_pad);
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
    kiln_onnx_window_spec win = {.kernel = {0, 0}};
    st = kiln_onnx_window(imp, 0, &win);
    if (st != KILN_OK)
        return st;
    if (kiln_onnx_attr_i(imp, "storage_order", 0) != 0)
        return kiln_onnx_refuse(imp, "attribute 'storage_order' is 1; kiln supports 0");
    const int64_t ceil_mode = kiln_onnx_attr_i(imp, "ceil_mode", 0);
    const int64_t include_pad = average ? kiln_onnx_attr_i(imp, "count_include_pad", 0) : 0;
    if ((ceil_mode != 0 && ceil_mode != 1) || (include_pad != 0 && include_pad != 1))
        return kiln_onnx_refuse(imp, "attribute '%s' is %lld; it is 0 or 1",
                                ceil_mode != 0 && ceil_mode != 1 ? "ceil_mode"
                                                                 : "count_include_pad",
                                (long long)(ceil_mode != 0 && ceil_mode != 1 ? ceil_mode
                                                                             : include_pad));
    kiln_pool2d_options *o = (kiln_pool2d_options *)imp->args.bytes;
    *o = (kiln_pool2d_options){.struct_size = sizeof *o,
                               .pool_size = {win.kernel[0], win.kernel[1]},
                               .strides = {win.strides[0], win.strides[1]},
                               .padding = win.padding,
                               .pads = {win.pads[0], win.pads[1], win.pads[2], win.pads[3]},
                               .ceil_mode = (int32_t)ceil_mode,
                               .count_include_pad = (int32_t)include_pad};
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    return KILN_OK;
}

/* ReduceMean over H and W of a 4-D value is a global average pool: its
 * axes an attribute before opset 18 and a constant input from 18 on;
 * keepdims 1 keeps (N, C, 1, 1), 0 gives (N, C). Other axes are refused. */
static kiln_status reduce_mean_axes(kiln_onnx_import *imp, int64_t *keepdims)
{
    const int from_input = imp->opset >= 18;
    kiln_status st = kiln_onnx_check_attrs(imp, from_input ? "keepdims:i,noop_with_empty_axes:i"
                                                           : "axes:I,keepdims:i");
    if (st == KILN_OK && from_input)
        st = kiln_onnx_need_constant(imp, 1, "axes", 1);
    if (st != KILN_OK)
        return st;
    int64_t axes[2];
    size_t n = 0;
    if (from_input && imp->n_in > 1 && *imp->in[1].name) {
        const kiln_onnx_in *t = &imp->in[1];
        n = t->rank == 0 ? 1 : (size_t)t->dims[0];
        if (t->rank > 1 || n > 2)
            return kiln_onnx_refuse(imp, "input 1 (axes) '%s' holds %zu axes; kiln reduces "
                                    "axes (2, 3) of a 4-D value only", t->name, n);
        for (size_t k = 0; k < n; k++)
            axes[k] = (int64_t)t->data[k];
    } else if (!from_input && kiln_onnx_find_attr(imp, "axes")) {
        const kiln_onnx_in_attr *a = kiln_onnx_find_attr(imp, "axes");
        n = a->n_ints;
        if (n > 2)
            return kiln_onnx_refuse(imp, "attribute 'axes' holds %zu axes; kiln reduces axes "
                                    "(2, 3) of a 4-D value only", n);
        for (size_t k = 0; k < n; k++)
            axes[k] = a->ints[k];
    }
    if (n == 0)
        return kiln_onnx_refuse(imp, "no axes (all of them reduced); kiln reduces axes (2, 3) "
                                "of a 4-D value only");
    int seen[4] = {0};
    for (size_t k = 0; k < n; k++) {
        const int64_t a = axes[k] < 0 ? axes[k] + 4 : axes[k];
        if (a < 0 || a > 3)
            return kiln_onnx_refuse(imp, "axis %lld of a 4-D value", (long long)axes[k]);
        seen[a] = 1;
    }
    if (!seen[2] || !seen[3] || seen[0] || seen[1]) {
        char given[48];
        if (n > 1)
            snprintf(given, sizeof given, "%lld, %lld", (long long)axes[0], (long long)axes[1]);
        else
            snprintf(given, sizeof given, "%lld", (long long)axes[0]);
        return kiln_onnx_refuse(imp, "axes (%s); kiln reduces axes (2, 3) (H and W) of a 4-D "
                                "value only", given);
    }
    *keepdims = kiln_onnx_attr_i(imp, "keepdims", 1);
    if (*keepdims != 0 && *keepdims != 1)
        return kiln_onnx_refuse(imp, "attribute 'keepdims' is %lld; it is 0 or 1",
                                (long long)*keepdims);
    return KILN_OK;
}

/* GlobalAveragePool and GlobalMaxPool, and ReduceMean over H and W. */
kiln_status kiln_pool2d_import_global(kiln_onnx_import *imp)
{
    const int reduce = strcmp(imp->op, "ReduceMean") == 0;
    if (imp->in[0].rank != 4)
        return kiln_onnx_refuse(imp, "%s is %d-D; kiln %s 4-D (N, C, H, W) values",
                                reduce ? "data" : "X", imp->in[0].rank,
                                reduce ? "reduces axes (2, 3) of" : "pools");
    int64_t keepdims = 1;
    const kiln_status st = reduce ? reduce_mean_axes(imp, &keepdims)
                                  : kiln_onnx_check_attrs(imp, "");
    if (st != KILN_OK)
        return st;
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    /* (N, C, 1, 1) or (N, C), both kiln's (C). */
    imp->out_rank = keepdims ? 4 : 2;
    return KILN_OK;
}
