/* Dense: y = x W + b on the last dimension; kernel (in, units). With ONNX
 * Gemm's scales: y = alpha x W + beta b. With LoRA (Keras 3's enable_lora):
 * y = x W + (lora_alpha/r) (x A) B + b, W frozen. */
#include "layers/layer.h"
#include "layers/lora.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct dense_config {
    int32_t units;
    int32_t use_bias;
    int32_t in;          /* inferred: last input dimension */
    int64_t rows;        /* inferred: rows per sample (product of other dims) */
    int32_t lora_rank;   /* 0: no adapters */
    float lora_alpha;
    /* Gemm's alpha and beta as kiln_dense_options has them (0 reads as 1):
     * scales of the product and of the bias, kept apart from the
     * parameters so that kernel and bias keep the values, and train with
     * the gradients, they have in the ONNX file. */
    float alpha, beta;
} dense_config;

static float product_scale(const dense_config *c)
{
    return c->alpha != 0.0f ? c->alpha : 1.0f;
}

static float bias_scale(const dense_config *c)
{
    return c->beta != 0.0f ? c->beta : 1.0f;
}

/* A bias scaled by beta is added, and its gradient summed, as a GEMM with
 * a column of ones (kiln_bias_add and kiln_column_sum have no scale). */
static int scaled_bias(const dense_config *c)
{
    return c->use_bias && bias_scale(c) != 1.0f;
}

/* Where the adapters sit among the parameters: after kernel and bias, so
 * that an imported layer's parameter indices keep their meaning. */
static int lora_a_index(const dense_config *c)
{
    return c->use_bias ? 2 : 1;
}

static float lora_scale(const dense_config *c)
{
    return c->lora_rank ? c->lora_alpha / (float)c->lora_rank : 0.0f;
}

static kiln_status dense_infer(void *config, kiln_layer_build *b)
{
    dense_config *c = config;
    const kiln_shape *in = &b->in[0];
    if (c->units <= 0) {
        snprintf(b->error, sizeof b->error, "units must be > 0, got %d", (int)c->units);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (!isfinite(c->alpha) || !isfinite(c->beta)) {
        snprintf(b->error, sizeof b->error, "alpha %g and beta %g must be finite",
                 (double)c->alpha, (double)c->beta);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->in = in->dims[in->rank - 1];
    c->rows = kiln_shape_size(in) / c->in;
    b->out = *in;
    b->out.dims[in->rank - 1] = c->units;
    kiln_param_spec *k = &b->params[b->n_params++];
    k->name = "kernel";
    k->shape.rank = 2;
    k->shape.dims[0] = c->in;
    k->shape.dims[1] = c->units;
    k->init = KILN_INIT_GLOROT_UNIFORM;
    k->fan_in = c->in;
    k->fan_out = c->units;
    if (c->use_bias) {
        kiln_param_spec *bias = &b->params[b->n_params++];
        bias->name = "bias";
        bias->shape.rank = 1;
        bias->shape.dims[0] = c->units;
        bias->init = KILN_INIT_ZEROS;
    }
    if (c->lora_rank > 0) {
        /* As Keras 3: only the kernel freezes (the bias keeps training);
         * A is HeUniform, B zeros, so training starts from the base model. */
        b->params[0].frozen = 1;
        kiln_param_spec *a = &b->params[b->n_params++];
        *a = (kiln_param_spec){.name = "lora_kernel_a", .shape = {.rank = 2,
                               .dims = {c->in, c->lora_rank}}, .init = KILN_INIT_UNIFORM,
                               .init_limit = (float)sqrt(6.0 / (double)c->in), .adapter = 1};
        kiln_param_spec *bb = &b->params[b->n_params++];
        *bb = (kiln_param_spec){.name = "lora_kernel_b", .shape = {.rank = 2,
                                .dims = {c->lora_rank, c->units}}, .init = KILN_INIT_ZEROS,
                                .adapter = 1};
    }
    return KILN_OK;
}

/* A Dense has one kernel to adapt, so nothing to choose among. */
static kiln_status dense_enable_lora(void *config, int32_t rank, float alpha,
                                     const char *targets, char *error, size_t size)
{
    dense_config *c = config;
    if (targets) {
        snprintf(error, size, "targets '%s' are given, but a Dense has one kernel to adapt "
                 "(targets choose among a MultiHeadAttention's projections); leave them NULL",
                 targets);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->lora_rank = rank;
    c->lora_alpha = alpha;
    return KILN_OK;
}

/* The adapters' shapes and, with a step, where they lie. In a step their
 * term is scaled by alpha too: alpha x (W + s A B), what the merged kernel
 * W + s A B computes. */
static kiln_lora_gemm lora_of(const dense_config *c, const size_t *param_offset)
{
    return (kiln_lora_gemm){.in = (size_t)c->in, .groups = 1, .rank = (size_t)c->lora_rank,
                            .last = (size_t)c->units,
                            .scale = lora_scale(c) * (param_offset ? product_scale(c) : 1.0f),
                            .a_at = param_offset ? param_offset[lora_a_index(c)] : 0,
                            .b_at = param_offset ? param_offset[lora_a_index(c) + 1] : 0};
}

static void dense_merge_adapters(const void *config, float *const *params)
{
    const dense_config *c = config;
    if (c->lora_rank <= 0)
        return;
    const kiln_lora_gemm l = lora_of(c, NULL);
    kiln_lora_merge(&l, params[0], params[lora_a_index(c)], params[lora_a_index(c) + 1]);
}

/* Per replica: the kernel transposed, for the input gradient; with LoRA
 * x A and dy B^T (rows x rank each); with a scaled bias a column of ones
 * (rows). */
typedef struct dense_replica {
    kiln_buffer *kernel_t;
    kiln_buffer *xa, *dyb;
    kiln_buffer *ones;
} dense_replica;

static kiln_status dense_prepare(const void *config, void *replica, kiln_device *dev,
                                 const kiln_shape *in_shape, int32_t max_batch)
{
    const dense_config *c = config;
    dense_replica *r = replica;
    (void)in_shape;
    kiln_status st = kiln_buffer_create(dev, (size_t)c->in * (size_t)c->units * sizeof(float),
                                        "a transposed dense kernel", &r->kernel_t);
    const size_t lora = (size_t)max_batch * (size_t)c->rows * (size_t)c->lora_rank;
    if (st == KILN_OK && lora)
        st = kiln_buffer_create(dev, lora * sizeof(float), "a LoRA x A", &r->xa);
    if (st == KILN_OK && lora)
        st = kiln_buffer_create(dev, lora * sizeof(float), "a LoRA dy B^T", &r->dyb);
    const size_t rows = (size_t)max_batch * (size_t)c->rows;
    if (st == KILN_OK && scaled_bias(c)) {
        float *ones = malloc(rows * sizeof *ones);
        if (!ones)
            return KILN_ERROR_OUT_OF_MEMORY;
        for (size_t k = 0; k < rows; k++)
            ones[k] = 1.0f;
        st = kiln_buffer_create(dev, rows * sizeof(float), "a dense's column of ones",
                                &r->ones);
        if (st == KILN_OK)
            st = kiln_buffer_write(dev, r->ones, 0, ones, rows * sizeof *ones, 1);
        free(ones);
    }
    return st;
}

static void dense_release(void *replica)
{
    dense_replica *r = replica;
    kiln_buffer_destroy(r->kernel_t);
    kiln_buffer_destroy(r->xa);
    kiln_buffer_destroy(r->dyb);
    kiln_buffer_destroy(r->ones);
    r->kernel_t = r->xa = r->dyb = r->ones = NULL;
}

static kiln_status dense_forward(const void *config, void *replica, const kiln_step *s)
{
    const dense_config *c = config;
    dense_replica *r = replica;
    const size_t m = (size_t)s->batch * (size_t)c->rows;
    const size_t units = (size_t)c->units, rank = (size_t)c->lora_rank;
    kiln_status st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, units, (size_t)c->in,
                               product_scale(c), s->in[0], 0, (size_t)c->in, s->params,
                               s->param_offset[0], units, 0.0f, s->out, 0, units);
    if (st == KILN_OK && rank) {   /* y += alpha (lora_alpha/r) (x A) B */
        const kiln_lora_gemm l = lora_of(c, s->param_offset);
        st = kiln_lora_forward(s, &l, s->in[0], m, r->xa, s->out);
    }
    if (st == KILN_OK && scaled_bias(c))   /* y += beta ones b */
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, units, 1, bias_scale(c), r->ones,
                       0, 1, s->params, s->param_offset[1], units, 1.0f, s->out, 0, units);
    if (st != KILN_OK)
        return st;
    if (!c->use_bias || scaled_bias(c))
        return kiln_step_activate(s, s->out);
    return kiln_bias_add(s->dev, s->out, m, (size_t)c->units, s->params, s->param_offset[1],
                         s->activation);
}

static kiln_status dense_backward(const void *config, void *replica, const kiln_step *s)
{
    const dense_config *c = config;
    dense_replica *r = replica;
    const size_t m = (size_t)s->batch * (size_t)c->rows;
    const size_t in = (size_t)c->in, units = (size_t)c->units;
    /* dW = alpha x^T dy (kiln's TN kernel while dy fits in cache); LoRA's
     * frozen kernel needs none, and a frozen layer writes no gradient at
     * all (replicas keep none for it: writes_trainable_gradients_only). */
    const kiln_lora_gemm l = lora_of(c, s->param_offset);
    const int grads = !s->frozen;
    kiln_status st = KILN_OK;
    if (c->lora_rank)
        st = kiln_lora_backward(s, &l, s->in[0], m, s->d_out, r->xa, r->dyb);
    else if (grads)
        st = kiln_gemm(s->dev, KILN_GEMM_T, KILN_GEMM_N, in, units, m, product_scale(c),
                       s->in[0], 0, in, s->d_out, 0, units, 0.0f, s->grads, s->param_offset[0],
                       units);
    if (st == KILN_OK && grads && scaled_bias(c))   /* db = beta ones^T dy */
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, 1, units, m, bias_scale(c), r->ones,
                       0, m, s->d_out, 0, units, 0.0f, s->grads, s->param_offset[1], units);
    else if (st == KILN_OK && grads && c->use_bias)
        st = kiln_column_sum(s->dev, s->d_out, m, units, s->grads, s->param_offset[1], 0);
    if (st != KILN_OK || !s->d_in[0])
        return st;
    /* dx = alpha dy W^T, as a plain GEMM on W^T (kiln_transpose says why). */
    st = kiln_transpose(s->dev, s->params, s->param_offset[0], in, units, r->kernel_t);
    if (st == KILN_OK)
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, in, units, product_scale(c),
                       s->d_out, 0, units,
                       r->kernel_t, 0, in, s->d_in_accumulate[0] ? 1.0f : 0.0f, s->d_in[0], 0,
                       in);
    if (st == KILN_OK && c->lora_rank)   /* dx += alpha (lora_alpha/r) (dy B^T) A^T */
        st = kiln_lora_input_gradient(s, &l, r->dyb, m, s->d_in[0]);
    return st;
}

static uint64_t dense_flops(const void *config, const kiln_shape *in_shape)
{
    const dense_config *c = config;
    (void)in_shape;
    return 2u * (uint64_t)c->rows * ((uint64_t)c->in * (uint64_t)c->units +
                                     (uint64_t)c->lora_rank * (uint64_t)(c->in + c->units));
}

/* args: the kiln_dense_options the builder copied. */
static void dense_configure(void *config, const void *args)
{
    const kiln_dense_options *o = args;
    *(dense_config *)config = (dense_config){.units = o->units, .use_bias = !o->no_bias,
                                             .alpha = o->alpha, .beta = o->beta};
}

static void dense_describe(const void *config, void *args)
{
    const dense_config *c = config;
    kiln_dense_options *o = args;
    o->units = c->units;
    o->no_bias = !c->use_bias;
    o->alpha = c->alpha;
    o->beta = c->beta;
}

static const kiln_layer_field dense_fields[] = {
    {.key = "units", .type = KILN_FIELD_INT, .offset = offsetof(kiln_dense_options, units)},
    {.key = "use_bias", .type = KILN_FIELD_NOT_BOOL,
     .offset = offsetof(kiln_dense_options, no_bias)},
    /* Written only when set: files of unscaled Dense layers stay as they were. */
    {.key = "alpha", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_dense_options, alpha),
     .optional = 1},
    {.key = "beta", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_dense_options, beta),
     .optional = 1},
};

/* On the last axis of any rank: MatMul broadcasts over the others. */
/* The kernel of a Dense imported from a transposed weight (Gemm's transB,
 * or the W of MatMul(x, Transpose(W))) as the file held it, (units, in),
 * under its name; NULL when it was not one. */
static const char *dense_transposed_kernel(kiln_onnx_graph *g, int32_t i)
{
    const kiln_param_spec *spec;
    const float *kernel = kiln_onnx_param(g, i, "kernel", &spec);
    if (!kernel || !g->layers[i].param_transposed[0])
        return NULL;
    const int64_t in = spec->shape.dims[0], units = spec->shape.dims[1];
    float *t = kiln_onnx_alloc(g, (size_t)(in * units) * sizeof *t);
    if (!t)
        return NULL;   /* the graph's oom, reported by the export */
    for (int64_t a = 0; a < in; a++)
        for (int64_t b = 0; b < units; b++)
            t[b * in + a] = kernel[a * units + b];
    const int64_t dims[2] = {units, in};
    return kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, "kernel"), 2, dims, t);
}

/* A Dense on vectors with such a kernel, or with scales: Gemm, with transB
 * 1 as the file had it (PyTorch's Linear) and alpha and beta where not 1.
 * Nonzero when written. */
static int dense_export_gemm(kiln_onnx_graph *g, int32_t i, const char *transposed)
{
    const dense_config *c = g->layers[i].config;
    const int scaled = product_scale(c) != 1.0f || scaled_bias(c);
    if ((!transposed && !scaled) || kiln_onnx_input_shape(g, i, 0)->rank != 1)
        return 0;
    const char *args[3] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL),
                           transposed ? transposed : kiln_onnx_param_initializer(g, i, "kernel"),
                           kiln_onnx_param(g, i, "bias", NULL)
                               ? kiln_onnx_param_initializer(g, i, "bias") : NULL};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, "Gemm", args, args[2] ? 3 : 2, out);
    if (nd && transposed)
        kiln_onnx_attr_int(g, nd, "transB", 1);
    if (nd && product_scale(c) != 1.0f)
        kiln_onnx_attr_float(g, nd, "alpha", product_scale(c));
    if (nd && scaled_bias(c))
        kiln_onnx_attr_float(g, nd, "beta", bias_scale(c));
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
    return 1;
}

/* `value` times the scale `v` (a scalar "<layer>/<what>"), or `value`
 * itself when v is 1. */
static const char *dense_export_scale(kiln_onnx_graph *g, int32_t i, const char *value,
                                      float v, const char *what)
{
    if (v == 1.0f || !value)
        return value;
    float *data = kiln_onnx_alloc(g, sizeof *data);
    if (!data)
        return NULL;   /* the graph's oom, reported by the export */
    *data = v;
    const char *scale = kiln_onnx_add_floats(g, kiln_onnx_unique_name(g, kiln_onnx_printf(
                                                 g, "%s/%s", g->layers[i].name, what)),
                                             0, NULL, data);
    return kiln_onnx_step(g, i, "Mul", value, scale, kiln_onnx_printf(g, "%s_scaled", what));
}

static void dense_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const dense_config *c = g->layers[i].config;
    const char *transposed = dense_transposed_kernel(g, i);
    if (dense_export_gemm(g, i, transposed))
        return;
    /* Of more axes: MatMul, by Transpose(W) where the file held W so. */
    const char *kernel = transposed
        ? kiln_onnx_step(g, i, "Transpose", transposed, NULL, "kernel_t")
        : kiln_onnx_param_initializer(g, i, "kernel");
    const char *args[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL), kernel};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    const int bias = kiln_onnx_param(g, i, "bias", NULL) != NULL;
    if (bias || product_scale(c) != 1.0f) {
        /* With scales (a Dense of more axes, which a Gemm cannot be):
         * Mul(MatMul(x, W), alpha) + Mul(b, beta). */
        const char *product = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/matmul",
                                                                        g->layers[i].name));
        kiln_onnx_add_node(g, "MatMul", args, 2, product);
        product = dense_export_scale(g, i, product, product_scale(c), "alpha");
        const char *b = bias ? dense_export_scale(g, i, kiln_onnx_param_initializer(g, i, "bias"),
                                                  bias_scale(c), "beta") : NULL;
        const char *sum[2] = {product, b};
        kiln_onnx_add_node(g, bias ? "Add" : "Identity", sum, bias ? 2 : 1, out);
    } else {
        kiln_onnx_add_node(g, "MatMul", args, 2, out);
    }
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

/* ONNX Gemm (A, B, C; A not transposed) and MatMul by an initializer, with
 * the bias of an Add that follows it as input 2 (the importer joins them).
 * The kernel is (K, M): Gemm's transB weight (M, K) is transposed. Gemm's
 * alpha and beta stay scales of the layer (B and C keep their values, and
 * train as they would in ONNX); beta 0 drops C. */
static kiln_status dense_import_onnx(kiln_onnx_import *imp)
{
    const int gemm = strcmp(imp->op, "Gemm") == 0;
    kiln_status st = kiln_onnx_check_attrs(imp, gemm ? "alpha:f,beta:f,transA:i,transB:i" : "");
    if (st != KILN_OK)
        return st;
    /* Y = A' B' with A constant and B the graph's value contracts over, or
     * keeps on another axis, B's first axis: the batch, which kiln keeps
     * on axis 0 and computes sample by sample. */
    if (gemm && imp->in[0].data && imp->n_in > 1 && *imp->in[1].name && !imp->in[1].data)
        return kiln_onnx_refuse(imp, "A '%s' is an initializer and B '%s' the graph's value: "
                                "Y = A B' would mix the batch (B's first axis) into the "
                                "product; kiln supports A the value and B an initializer",
                                imp->in[0].name, imp->in[1].name);
    if (gemm && kiln_onnx_attr_i(imp, "transA", 0) != 0)
        return kiln_onnx_refuse(imp, "attribute 'transA' is 1: A (batch, features) would be "
                                "read as (features, batch), mixing the batch into the "
                                "features, while kiln keeps the batch on axis 0 and computes "
                                "sample by sample; kiln supports transA 0");
    const float alpha = gemm ? kiln_onnx_attr_f(imp, "alpha", 1.0f) : 1.0f;
    const float beta = gemm ? kiln_onnx_attr_f(imp, "beta", 1.0f) : 1.0f;
    if (!isfinite(alpha) || alpha == 0.0f || !isfinite(beta))
        return kiln_onnx_refuse(imp, "attributes 'alpha' %g and 'beta' %g; kiln supports "
                                "finite ones, alpha not 0 (B would not count)", (double)alpha,
                                (double)beta);
    st = kiln_onnx_need_constant(imp, 1, "B", 0);
    if (st == KILN_OK)
        st = kiln_onnx_need_constant(imp, 2, gemm ? "C" : "the Add's bias", 1);
    if (st != KILN_OK)
        return st;
    const kiln_onnx_in *b = &imp->in[1];
    const int trans_b = (int)kiln_onnx_attr_i(imp, "transB", 0);
    if (b->rank != 2)
        return kiln_onnx_refuse(imp, "B '%s' is %d-D; kiln supports a 2-D weight", b->name,
                                b->rank);
    if (gemm && imp->in[0].rank != 2)
        return kiln_onnx_refuse(imp, "A is %d-D; Gemm takes 2-D A", imp->in[0].rank);
    if (imp->in[0].rank < 2)
        return kiln_onnx_refuse(imp, "A is %d-D; kiln supports A of 2 to 5 dimensions",
                                imp->in[0].rank);
    const int64_t units = trans_b ? b->dims[0] : b->dims[1];
    const int bias = imp->n_in > 2 && *imp->in[2].name && beta != 0.0f;
    if (bias) {
        const kiln_onnx_in *c = &imp->in[2];
        const int one_row = (c->rank == 1 && c->dims[0] == units) ||
                            (c->rank == 2 && c->dims[0] == 1 && c->dims[1] == units);
        if (!one_row)
            return kiln_onnx_refuse(imp, "bias '%s' is %d-D (%lld values); kiln supports a "
                                    "bias of one value per output (%lld)", c->name, c->rank,
                                    (long long)(c->rank ? c->dims[0] : 1), (long long)units);
    }
    if (units < 1 || units > INT32_MAX)
        return kiln_onnx_refuse(imp, "B '%s' gives %lld outputs", b->name, (long long)units);
    kiln_dense_options *o = (kiln_dense_options *)imp->args.bytes;
    *o = (kiln_dense_options){.struct_size = sizeof *o, .units = (int32_t)units,
                              .no_bias = !bias, .alpha = alpha != 1.0f ? alpha : 0.0f,
                              .beta = bias && beta != 1.0f ? beta : 0.0f};
    imp->want = KILN_ONNX_WANT_ONNX;
    imp->n_data = 1;
    kiln_onnx_param_from(imp, 0, 1, trans_b ? KILN_ONNX_PARAM_TRANSPOSED : KILN_ONNX_PARAM_AS_IS);
    if (bias)
        kiln_onnx_param_from(imp, 1, 2, KILN_ONNX_PARAM_AS_IS);
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_dense = {
    .kind = "dense", .config_size = sizeof(dense_config), .replica_size = sizeof(dense_replica),
    .min_inputs = 1, .max_inputs = 1, .configure = dense_configure, .describe = dense_describe,
    .infer = dense_infer, .prepare = dense_prepare, .forward = dense_forward,
    .backward = dense_backward, .release = dense_release, .flops = dense_flops,
    .fuses_activation = kiln_layer_fuses_activation,
    .args_size = sizeof(kiln_dense_options), KILN_FIELDS(dense_fields), .takes_activation = 1,
    .export_onnx = dense_export_onnx,
    .import_onnx = dense_import_onnx,
    .enable_lora = dense_enable_lora, .merge_adapters = dense_merge_adapters,
    .writes_trainable_gradients_only = 1,
};
