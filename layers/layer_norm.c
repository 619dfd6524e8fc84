/* LayerNormalization over the last axis (Keras's default): each row of the
 * last axis is normalised by its own mean and variance, the same in
 * training and inference; gamma and beta are per position along that axis
 * (opencl/kernels/layer_norm.cl). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>

/* Rows of at most this many values go a work-item per row; wider ones a
 * work-group per row. */
#define NARROW_ROW 32
/* The parameter gradients' sums over rows: on a CPU, chunks of at least
 * this many rows, as batch norm's (kiln_chunk_length). */
#define MIN_CHUNK_ROWS 64
/* Work-items per row of the wide kernels (LN_LANES in layer_norm.cl; the
 * device's work-group may be narrower). */
#define ROW_LANES 64

typedef struct ln_config {
    float epsilon;
    int32_t center, scale;
    int32_t channels;        /* inferred: the last axis */
    int32_t gamma, beta;     /* inferred: parameter indices, -1 when absent */
} ln_config;

typedef struct ln_replica {
    kiln_buffer *stats;      /* per row: mean, 1 / sqrt(var + eps) of the last forward */
    kiln_buffer *partial;    /* chunks x 2C */
    struct {
        kiln_kernel *forward, *backward, *param_partial, *param_reduce;
    } kernels;
    int per_item;   /* forward and backward take a work-item per row */
} ln_replica;

static kiln_status ln_infer(void *config, kiln_layer_build *b)
{
    ln_config *c = config;
    const kiln_shape *in = &b->in[0];
    if (!(c->epsilon > 0.0f) || !isfinite(c->epsilon)) {
        snprintf(b->error, sizeof b->error, "epsilon (%g) must be a finite number > 0",
                 (double)c->epsilon);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->channels = in->dims[in->rank - 1];
    c->gamma = c->beta = -1;
    b->out = *in;
    for (int p = 0; p < 2; p++) {   /* Keras's order: gamma, then beta */
        if (!(p == 0 ? c->scale : c->center))
            continue;
        *(p == 0 ? &c->gamma : &c->beta) = b->n_params;
        kiln_param_spec *spec = &b->params[b->n_params++];
        spec->name = p == 0 ? "gamma" : "beta";
        spec->shape.rank = 1;
        spec->shape.dims[0] = c->channels;
        spec->init = p == 0 ? KILN_INIT_ONES : KILN_INIT_ZEROS;
    }
    return KILN_OK;
}

static int narrow(const ln_config *c)
{
    return c->channels <= NARROW_ROW;
}

/* Forward's or backward's kernel, `name`: the CPU variant gives a row a
 * work-item, eight values at a time (_cpu); the GPU variant gives a wide
 * row a work-group (_gpu) and a narrow one a work-item (the pair
 * `narrow_name`, of which only _narrow_gpu exists). */
static kiln_status row_kernel(const ln_config *c, kiln_device *dev, const char *name,
                              const char *narrow_name, kiln_kernel **out)
{
    const int narrow_gpu = kiln_device_gpu_kernels(dev) && narrow(c);
    return kiln_kernel_get_variant(dev, "layer_norm", narrow_gpu ? narrow_name : name, out);
}

static kiln_status ln_kernels(const void *config, void *replica, kiln_device *dev)
{
    const ln_config *c = config;
    ln_replica *r = replica;
    r->per_item = !kiln_device_gpu_kernels(dev) || narrow(c);
    kiln_status st = row_kernel(c, dev, "kiln_layer_norm_forward",
                                "kiln_layer_norm_forward_narrow", &r->kernels.forward);
    if (st == KILN_OK)
        st = row_kernel(c, dev, "kiln_layer_norm_backward", "kiln_layer_norm_backward_narrow",
                        &r->kernels.backward);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "layer_norm", "kiln_layer_norm_param_partial",
                                     &r->kernels.param_partial);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "layer_norm", "kiln_layer_norm_param_reduce",
                             &r->kernels.param_reduce);
    return st;
}

static kiln_status ln_prepare(const void *config, void *replica, kiln_device *dev,
                              const kiln_shape *in_shape, int32_t max_batch)
{
    const ln_config *c = config;
    ln_replica *r = replica;
    const size_t rows = (size_t)max_batch * (size_t)(kiln_shape_size(in_shape) / c->channels);
    const size_t chunks = kiln_chunks_most(dev);
    kiln_status st = kiln_buffer_create(dev, 2 * rows * sizeof(float),
                                        "layer norm statistics", &r->stats);
    if (st == KILN_OK && (c->gamma >= 0 || c->beta >= 0))
        st = kiln_buffer_create(dev, chunks * 2 * (size_t)c->channels * sizeof(float),
                                "layer norm partial sums", &r->partial);
    return st;
}

static void ln_release(void *replica)
{
    ln_replica *r = replica;
    kiln_buffer_destroy(r->stats);
    kiln_buffer_destroy(r->partial);
    r->stats = r->partial = NULL;
}

static size_t rows_of(const kiln_step *s, int32_t channels)
{
    return (size_t)s->batch * (size_t)(kiln_shape_size(&s->in_shape[0]) / channels);
}

static int64_t offset_of(const kiln_step *s, int32_t index)
{
    return index >= 0 ? (int64_t)s->param_offset[index] : -1;
}

/* A row's kernel over its range: a work-group of ROW_LANES per row, or a
 * work-item. */
static kiln_status run_rows(const ln_replica *r, kiln_device *dev, kiln_kernel *k, size_t rows,
                            kiln_args a)
{
    return kiln_kernel_run1(dev, k, r->per_item ? rows : rows * ROW_LANES, a);
}

static kiln_status ln_forward(const void *config, void *replica, const kiln_step *s)
{
    const ln_config *c = config;
    ln_replica *r = replica;
    const size_t rows = rows_of(s, c->channels);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_int((int64_t)rows), kiln_arg_int(c->channels),
                            kiln_arg_buffer(s->params), kiln_arg_int(offset_of(s, c->gamma)),
                            kiln_arg_int(offset_of(s, c->beta)), kiln_arg_float(c->epsilon),
                            kiln_arg_buffer(r->stats));
    return run_rows(r, s->dev, r->kernels.forward, rows, a);
}

static kiln_status ln_backward(const void *config, void *replica, const kiln_step *s)
{
    const ln_config *c = config;
    ln_replica *r = replica;
    const size_t rows = rows_of(s, c->channels), C = (size_t)c->channels;
    kiln_status st = KILN_OK;
    if (r->partial && !s->frozen) {   /* a frozen layer's gradients go unused */
        const size_t per = kiln_chunk_length(s->dev, rows, MIN_CHUNK_ROWS);
        const size_t chunks = (rows + per - 1) / per;
        kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                                kiln_arg_int((int64_t)rows), kiln_arg_int(c->channels),
                                kiln_arg_int((int64_t)per), kiln_arg_int((int64_t)chunks),
                                kiln_arg_buffer(r->stats), kiln_arg_buffer(r->partial));
        /* The CPU variant takes eight channels an item, the GPU one a channel. */
        const kiln_range cpu = {.dims = 2, .size = {(C + 7) / 8, chunks}};
        const kiln_range gpu = {.dims = 2, .size = {C, chunks}};
        st = kiln_kernel_run_variant(s->dev, r->kernels.param_partial, &cpu, &gpu, a);
        kiln_args b = KILN_ARGS(kiln_arg_buffer(r->partial), kiln_arg_int(c->channels),
                                kiln_arg_int((int64_t)chunks), kiln_arg_buffer(s->grads),
                                kiln_arg_int(offset_of(s, c->gamma)),
                                kiln_arg_int(offset_of(s, c->beta)));
        if (st == KILN_OK)
            st = kiln_kernel_run1(s->dev, r->kernels.param_reduce, C, b);
    }
    if (st != KILN_OK || !s->d_in[0])
        return st;
    kiln_args d = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(s->d_in[0]), kiln_arg_int((int64_t)rows),
                            kiln_arg_int(c->channels), kiln_arg_buffer(s->params),
                            kiln_arg_int(offset_of(s, c->gamma)), kiln_arg_buffer(r->stats),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return run_rows(r, s->dev, r->kernels.backward, rows, d);
}

static uint64_t ln_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return 10u * (uint64_t)kiln_shape_size(in_shape);
}

/* args: the kiln_layer_norm_options the builder copied. */
static void ln_configure(void *config, const void *args)
{
    const kiln_layer_norm_options *o = args;
    *(ln_config *)config = (ln_config){.epsilon = o->epsilon != 0.0f ? o->epsilon : 1e-3f,
                                       .center = !o->no_center, .scale = !o->no_scale};
}

static void ln_describe(const void *config, void *args)
{
    const ln_config *c = config;
    kiln_layer_norm_options *o = args;
    o->epsilon = c->epsilon;
    o->no_center = !c->center;
    o->no_scale = !c->scale;
}

static const kiln_layer_field ln_fields[] = {
    {.key = "epsilon", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_layer_norm_options, epsilon)},
    {.key = "center", .type = KILN_FIELD_NOT_BOOL,
     .offset = offsetof(kiln_layer_norm_options, no_center)},
    {.key = "scale", .type = KILN_FIELD_NOT_BOOL,
     .offset = offsetof(kiln_layer_norm_options, no_scale)},
};

/* The mean over the last axis, kept as an axis of 1. */
static const char *mean_of_last(kiln_onnx_graph *g, int32_t i, const char *x, const char *what)
{
    const int64_t last = -1;
    const char *out = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s", g->layers[i].name,
                                                                what));
    kiln_onnx_attr_ints(g, kiln_onnx_add_node(g, "ReduceMean", &x, 1, out), "axes", &last, 1);
    return out;
}

/* Over the last axis, as opset 13 has no LayerNormalization:
 * (x - mean) / sqrt(var + epsilon) gamma + beta, in kiln's order. */
static void ln_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *name = g->layers[i].name;
    float *epsilon = kiln_onnx_alloc(g, sizeof *epsilon);
    if (!epsilon)
        return;
    kiln_layer_norm_options o;
    memset(&o, 0, sizeof o);
    ln_describe(g->layers[i].config, &o);
    *epsilon = o.epsilon;
    const char *x = kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL);
    const char *centered = kiln_onnx_step(g, i, "Sub", x, mean_of_last(g, i, x, "mean"),
                                          "centered");
    const char *var = mean_of_last(g, i, kiln_onnx_step(g, i, "Mul", centered, centered,
                                                        "squared"), "variance");
    const char *eps = kiln_onnx_add_floats(g, kiln_onnx_printf(g, "%s/epsilon", name), 0, NULL,
                                           epsilon);
    const char *std = kiln_onnx_step(g, i, "Sqrt", kiln_onnx_step(g, i, "Add", var, eps,
                                                                  "variance_epsilon"),
                                     NULL, "std");
    const char *terms[3][3] = {
        {"Mul", kiln_onnx_step(g, i, "Reciprocal", std, NULL, "inv_std"), "normalized"},
        {"Mul", kiln_onnx_param(g, i, "gamma", NULL) ? kiln_onnx_param_initializer(g, i, "gamma")
                                                     : NULL,
         "scaled"},
        {"Add", kiln_onnx_param(g, i, "beta", NULL) ? kiln_onnx_param_initializer(g, i, "beta")
                                                    : NULL,
         ""}};
    const int last = terms[2][1] ? 2 : terms[1][1] ? 1 : 0;
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL), *y = centered;
    for (int k = 0; k <= last; k++) {
        if (!terms[k][1])
            continue;
        const char *in[2] = {y, terms[k][1]};
        y = k == last ? out
                      : kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s", name, terms[k][2]));
        kiln_onnx_add_node(g, terms[k][0], in, 2, y);
    }
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

/* LayerNormalization (opset 17) over the last axis (the importer makes
 * the axes from `axis` one first), in ONNX's order (a
 * 4-D value Transposed to (N, H, W, C) is kiln's (H, W, C) as held, so
 * ConvNeXt's norm needs no permute): Scale as gamma, B (optional) as beta,
 * both trainable; its Mean and InvStdDev outputs must go unread (the
 * importer refuses a read second output). */
static kiln_status ln_import_onnx(kiln_onnx_import *imp)
{
    kiln_status st = kiln_onnx_check_attrs(imp, "axis:i,epsilon:f,stash_type:i");
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 1, "Scale", 0);
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 2, "B", 1);
    if (st != KILN_OK)
        return st;
    const int rank = imp->in[0].rank;
    const int64_t given = kiln_onnx_attr_i(imp, "axis", -1);
    const int64_t axis = given < 0 ? given + rank : given;
    if (axis != rank - 1)   /* the importer reshapes axes 1.. into one first */
        return kiln_onnx_refuse(imp, "attribute 'axis' is %lld of a %d-D input: normalising "
                                "axes %lld..%d together; kiln normalises the axes of a sample, "
                                "from axis 1 on", (long long)given, rank, (long long)axis,
                                rank - 1);
    const int64_t stash = kiln_onnx_attr_i(imp, "stash_type", 1);
    if (stash != 1)
        return kiln_onnx_refuse(imp, "attribute 'stash_type' is %lld; kiln computes the "
                                "statistics in float (1)", (long long)stash);
    const float epsilon = kiln_onnx_attr_f(imp, "epsilon", 1e-5f);
    if (!(epsilon > 0.0f) || !isfinite(epsilon))
        return kiln_onnx_refuse(imp, "attribute 'epsilon' is %g; kiln takes a finite epsilon "
                                "> 0", (double)epsilon);
    const int bias = imp->n_in > 2 && *imp->in[2].name;
    kiln_layer_norm_options *o = (kiln_layer_norm_options *)(void *)imp->args.bytes;
    *o = (kiln_layer_norm_options){.struct_size = sizeof *o, .epsilon = epsilon,
                                   .no_center = !bias};
    kiln_onnx_param_from(imp, 0, 1, KILN_ONNX_PARAM_AS_IS);
    if (bias)
        kiln_onnx_param_from(imp, 1, 2, KILN_ONNX_PARAM_AS_IS);
    imp->want = KILN_ONNX_WANT_ONNX;
    imp->n_data = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_layer_norm = {
    .kind = "layer_normalization", .config_size = sizeof(ln_config),
    .replica_size = sizeof(ln_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = ln_configure, .describe = ln_describe, .infer = ln_infer,
    .kernels = ln_kernels, .prepare = ln_prepare,
    .forward = ln_forward, .backward = ln_backward, .release = ln_release, .flops = ln_flops,
    .args_size = sizeof(kiln_layer_norm_options), KILN_FIELDS(ln_fields),
    .export_onnx = ln_export_onnx, .import_onnx = ln_import_onnx,
    .writes_trainable_gradients_only = 1,
};
