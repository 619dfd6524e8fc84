/* BatchNormalization over the last axis (Keras's default for channels-last
 * data): in training, normalise with the batch's statistics and update the
 * moving ones; otherwise use the moving ones. Synchronised, the statistics
 * are those of the global batch: the replicas add their per-channel sums
 * through the step's collective (opencl/kernels/batch_norm.cl). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>

/* On a CPU, chunks of at least this many rows per partial sum
 * (kiln_chunk_length). */
#define MIN_CHUNK_ROWS 64

typedef struct bn_config {
    float momentum, epsilon;
    int32_t synchronized;
    int32_t channels;   /* inferred */
} bn_config;

typedef struct bn_replica {
    kiln_buffer *partial;  /* chunks x 2C */
    kiln_buffer *sums;     /* forward: sum x, sum (x - mean)^2; backward: sum dy, sum dy xhat */
    kiln_buffer *stats;    /* mean, 1 / sqrt(var + eps) of the last training batch */
    float count;           /* rows those statistics cover (all replicas' when synchronised) */
    struct {
        kiln_kernel *partial, *reduce, *finish, *normalize, *backward_partial, *param_grads,
            *input_grad, *frozen_input_grad;
    } kernels;
} bn_replica;

enum { GAMMA, BETA, MOVING_MEAN, MOVING_VARIANCE };

static kiln_status bn_infer(void *config, kiln_layer_build *b)
{
    bn_config *c = config;
    const kiln_shape *in = &b->in[0];
    if (!(c->momentum >= 0.0f && c->momentum <= 1.0f) || !(c->epsilon > 0.0f) ||
        !isfinite(c->epsilon)) {
        snprintf(b->error, sizeof b->error, "momentum (%g) must be in [0, 1] and epsilon (%g) "
                 "a finite number > 0", (double)c->momentum, (double)c->epsilon);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->channels = in->dims[in->rank - 1];
    b->out = *in;
    static const char *const names[] = {"gamma", "beta", "moving_mean", "moving_variance"};
    for (int p = GAMMA; p <= MOVING_VARIANCE; p++) {
        kiln_param_spec *spec = &b->params[b->n_params++];
        spec->name = names[p];
        spec->shape.rank = 1;
        spec->shape.dims[0] = c->channels;
        spec->init = p == GAMMA || p == MOVING_VARIANCE ? KILN_INIT_ONES : KILN_INIT_ZEROS;
        spec->non_trainable = p >= MOVING_MEAN;
    }
    return KILN_OK;
}

/* Runs a per-channel pair over `n` chunks or rows: the CPU variant (_cpu)
 * takes eight channels an item, the GPU one (_gpu) a channel. */
static kiln_status run_channels(kiln_device *dev, kiln_kernel *kernel, size_t C, size_t n,
                                kiln_args args)
{
    const kiln_range cpu = {.dims = 2, .size = {(C + 7) / 8, n}};
    const kiln_range gpu = {.dims = 2, .size = {C, n}};
    return kiln_kernel_run_variant(dev, kernel, &cpu, &gpu, args);
}

static kiln_status bn_kernels(const void *config, void *replica, kiln_device *dev)
{
    bn_replica *r = replica;
    (void)config;
    kiln_status st = kiln_kernel_get_variant(dev, "batch_norm", "kiln_batch_norm_partial",
                                             &r->kernels.partial);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "batch_norm", "kiln_batch_norm_reduce", &r->kernels.reduce);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "batch_norm", "kiln_batch_norm_finish", &r->kernels.finish);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "batch_norm", "kiln_batch_norm_normalize",
                                     &r->kernels.normalize);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "batch_norm", "kiln_batch_norm_backward_partial",
                                     &r->kernels.backward_partial);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "batch_norm", "kiln_batch_norm_param_grads",
                             &r->kernels.param_grads);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "batch_norm", "kiln_batch_norm_input_grad",
                                     &r->kernels.input_grad);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "batch_norm", "kiln_batch_norm_frozen_input_grad",
                                     &r->kernels.frozen_input_grad);
    return st;
}

static kiln_status bn_prepare(const void *config, void *replica, kiln_device *dev,
                              const kiln_shape *in_shape, int32_t max_batch)
{
    const bn_config *c = config;
    bn_replica *r = replica;
    (void)in_shape;
    (void)max_batch;
    const size_t two_c = 2 * (size_t)c->channels * sizeof(float);
    const size_t chunks = kiln_chunks_most(dev);
    kiln_status st = kiln_buffer_create(dev, chunks * two_c,
                                        "batch norm partial sums", &r->partial);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, two_c, "batch norm sums", &r->sums);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, two_c, "batch norm statistics", &r->stats);
    return st;
}

static void bn_release(void *replica)
{
    bn_replica *r = replica;
    kiln_buffer_destroy(r->partial);
    kiln_buffer_destroy(r->sums);
    kiln_buffer_destroy(r->stats);
    r->partial = r->sums = r->stats = NULL;
}

static size_t rows_of(const kiln_step *s, int32_t channels)
{
    return (size_t)s->batch * (size_t)(kiln_shape_size(&s->in_shape[0]) / channels);
}

/* Per-channel sums over the rows into sums[offset .. offset + width): of
 * x (centred 0), of (x - mean)^2 (centred 1, the mean from sums[0..C)). */
static kiln_status sum_rows(const bn_config *c, bn_replica *r, const kiln_step *s, int centred)
{
    const size_t rows = rows_of(s, c->channels);
    const size_t per = kiln_chunk_length(s->dev, rows, MIN_CHUNK_ROWS);
    const size_t chunks = (rows + per - 1) / per;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_int((int64_t)rows),
                            kiln_arg_int(c->channels), kiln_arg_int((int64_t)per),
                            kiln_arg_int((int64_t)chunks), kiln_arg_buffer(r->sums),
                            kiln_arg_float(r->count), kiln_arg_int(centred),
                            kiln_arg_buffer(r->partial));
    kiln_status st = run_channels(s->dev, r->kernels.partial, (size_t)c->channels, chunks, a);
    kiln_args b = KILN_ARGS(kiln_arg_buffer(r->partial), kiln_arg_int(c->channels),
                            kiln_arg_int((int64_t)chunks), kiln_arg_buffer(r->sums),
                            kiln_arg_int(centred ? c->channels : 0));
    if (st == KILN_OK)
        st = kiln_kernel_run1(s->dev, r->kernels.reduce, (size_t)c->channels, b);
    return st;
}

/* Synchronised: replaces sums[offset .. offset + n) (and the count, when
 * asked) with their totals over the replicas. */
static kiln_status all_reduce(bn_replica *r, const kiln_step *s, size_t offset, size_t n,
                              int with_count)
{
    if (!s->sum_replicas)
        return KILN_OK;
    float local[KILN_MAX_SYNC_VALUES];
    double total[KILN_MAX_SYNC_VALUES];
    if (n + 1 > KILN_MAX_SYNC_VALUES)
        return kiln_fail(kiln_device_host(s->dev), KILN_ERROR_UNSUPPORTED,
                         "synchronised batch normalization supports up to %d channels",
                         (KILN_MAX_SYNC_VALUES - 1) / 2);
    kiln_status st = kiln_buffer_read(s->dev, r->sums, offset * sizeof(float), local,
                                      n * sizeof(float));
    if (st != KILN_OK)
        return st;
    for (size_t j = 0; j < n; j++)
        total[j] = local[j];
    total[n] = r->count;
    st = s->sum_replicas(s->sum_replicas_user, total, n + (with_count ? 1 : 0));
    if (st != KILN_OK)
        return st;
    for (size_t j = 0; j < n; j++)
        local[j] = (float)total[j];
    if (with_count)
        r->count = (float)total[n];
    return kiln_buffer_write(s->dev, r->sums, offset * sizeof(float), local, n * sizeof(float),
                             1);
}

static kiln_status bn_forward(const void *config, void *replica, const kiln_step *s)
{
    const bn_config *c = config;
    bn_replica *r = replica;
    const size_t rows = rows_of(s, c->channels), C = (size_t)c->channels;
    kiln_status st = KILN_OK;
    const int training = s->training && !s->frozen;   /* frozen: moving statistics */
    if (training) {
        r->count = (float)rows;
        st = sum_rows(c, r, s, 0);
        if (st == KILN_OK)
            st = all_reduce(r, s, 0, C, 1);
        if (st == KILN_OK)
            st = sum_rows(c, r, s, 1);
        if (st == KILN_OK)
            st = all_reduce(r, s, C, C, 0);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(r->sums), kiln_arg_int(c->channels),
                                kiln_arg_float(r->count), kiln_arg_float(c->epsilon),
                                kiln_arg_float(c->momentum), kiln_arg_buffer(r->stats),
                                kiln_arg_buffer(s->params),
                                kiln_arg_int((int64_t)s->param_offset[MOVING_MEAN]),
                                kiln_arg_int((int64_t)s->param_offset[MOVING_VARIANCE]));
        if (st == KILN_OK)
            st = kiln_kernel_run1(s->dev, r->kernels.finish, C, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_int((int64_t)rows), kiln_arg_int(c->channels),
                            kiln_arg_buffer(r->stats), kiln_arg_int(training),
                            kiln_arg_buffer(s->params),
                            kiln_arg_int((int64_t)s->param_offset[GAMMA]),
                            kiln_arg_int((int64_t)s->param_offset[BETA]),
                            kiln_arg_int((int64_t)s->param_offset[MOVING_MEAN]),
                            kiln_arg_int((int64_t)s->param_offset[MOVING_VARIANCE]),
                            kiln_arg_float(c->epsilon), kiln_arg_int(s->activation));
    if (st == KILN_OK)
        st = run_channels(s->dev, r->kernels.normalize, C, rows, a);
    return st;
}

/* A frozen layer normalised with its moving statistics, a per-channel
 * affine map: dx = dy * gamma / sqrt(moving variance + epsilon). */
static kiln_status frozen_backward(const bn_config *c, bn_replica *r, const kiln_step *s)
{
    if (!s->d_in[0])
        return KILN_OK;
    const size_t rows = rows_of(s, c->channels), C = (size_t)c->channels;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_buffer(s->d_in[0]),
                            kiln_arg_int((int64_t)rows), kiln_arg_int(c->channels),
                            kiln_arg_buffer(s->params),
                            kiln_arg_int((int64_t)s->param_offset[GAMMA]),
                            kiln_arg_int((int64_t)s->param_offset[MOVING_VARIANCE]),
                            kiln_arg_float(c->epsilon), kiln_arg_int(s->d_in_accumulate[0]));
    return run_channels(s->dev, r->kernels.frozen_input_grad, C, rows, a);
}

static kiln_status bn_backward(const void *config, void *replica, const kiln_step *s)
{
    const bn_config *c = config;
    bn_replica *r = replica;
    if (s->frozen)
        return frozen_backward(c, r, s);
    const size_t rows = rows_of(s, c->channels), C = (size_t)c->channels;
    const size_t per = kiln_chunk_length(s->dev, rows, MIN_CHUNK_ROWS);
    const size_t chunks = (rows + per - 1) / per;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_int((int64_t)rows), kiln_arg_int(c->channels),
                            kiln_arg_int((int64_t)per), kiln_arg_int((int64_t)chunks),
                            kiln_arg_buffer(r->stats), kiln_arg_buffer(r->partial));
    kiln_status st = run_channels(s->dev, r->kernels.backward_partial, C, chunks, a);
    kiln_args b = KILN_ARGS(kiln_arg_buffer(r->partial), kiln_arg_int((int64_t)(2 * C)),
                            kiln_arg_int((int64_t)chunks), kiln_arg_buffer(r->sums),
                            kiln_arg_int(0));
    if (st == KILN_OK)
        st = kiln_kernel_run1(s->dev, r->kernels.reduce, 2 * C, b);
    kiln_args g = KILN_ARGS(kiln_arg_buffer(r->sums), kiln_arg_int(c->channels),
                            kiln_arg_buffer(s->grads),
                            kiln_arg_int((int64_t)s->param_offset[GAMMA]),
                            kiln_arg_int((int64_t)s->param_offset[BETA]));
    if (st == KILN_OK)
        st = kiln_kernel_run1(s->dev, r->kernels.param_grads, C, g);
    /* gamma and beta's gradients stay this replica's (the reducer adds them);
     * the input gradient needs the sums over all who shared the statistics. */
    if (st == KILN_OK && s->d_in[0])
        st = all_reduce(r, s, 0, 2 * C, 0);
    if (st != KILN_OK || !s->d_in[0])
        return st;
    kiln_args d = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(s->d_in[0]), kiln_arg_int((int64_t)rows),
                            kiln_arg_int(c->channels), kiln_arg_buffer(r->stats),
                            kiln_arg_buffer(r->sums), kiln_arg_float(r->count),
                            kiln_arg_buffer(s->params),
                            kiln_arg_int((int64_t)s->param_offset[GAMMA]),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return run_channels(s->dev, r->kernels.input_grad, C, rows, d);
}

static int bn_synchronized(const void *config)
{
    return ((const bn_config *)config)->synchronized;
}

static uint64_t bn_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return 8u * (uint64_t)kiln_shape_size(in_shape);
}

/* args: the kiln_batch_norm_options the builder copied. */
static void bn_configure(void *config, const void *args)
{
    const kiln_batch_norm_options *o = args;
    *(bn_config *)config = (bn_config){.momentum = o->momentum != 0.0f ? o->momentum : 0.99f,
                                       .epsilon = o->epsilon != 0.0f ? o->epsilon : 1e-3f,
                                       .synchronized = o->synchronized != 0};
}

static void bn_describe(const void *config, void *args)
{
    const bn_config *c = config;
    kiln_batch_norm_options *o = args;
    o->momentum = c->momentum;
    o->epsilon = c->epsilon;
    o->synchronized = c->synchronized;
}

static const kiln_layer_field bn_fields[] = {
    {.key = "momentum", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_batch_norm_options, momentum)},
    {.key = "epsilon", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_batch_norm_options, epsilon)},
    {.key = "synchronized", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_batch_norm_options, synchronized)},
};

static void bn_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    kiln_batch_norm_options o;
    memset(&o, 0, sizeof o);
    bn_describe(g->layers[i].config, &o);
    const char *args[5] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CF),
                           kiln_onnx_param_initializer(g, i, "gamma"),
                           kiln_onnx_param_initializer(g, i, "beta"),
                           kiln_onnx_param_initializer(g, i, "moving_mean"),
                           kiln_onnx_param_initializer(g, i, "moving_variance")};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CF);
    kiln_onnx_attr_float(g, kiln_onnx_add_node(g, "BatchNormalization", args, 5, out),
                         "epsilon", o.epsilon);
    kiln_onnx_activate(g, i, KILN_ONNX_CF, out);
}

/* ONNX BatchNormalization (inference or training form): X, scale, B, mean, var.
 * ONNX's momentum weighs the running statistic as Keras's does (PyTorch's
 * momentum m is written as 1 - m). */
static kiln_status bn_import_onnx(kiln_onnx_import *imp)
{
    kiln_status st = kiln_onnx_check_attrs(imp, "epsilon:f,momentum:f,training_mode:i,"
                                           "spatial:i");
    static const char *const what[] = {"scale", "B", "input_mean", "input_var"};
    for (int k = 1; k <= 4 && st == KILN_OK; k++)
        st = kiln_onnx_need_constant(imp, k, what[k - 1], 0);
    if (st != KILN_OK)
        return st;
    /* The training form (training_mode 1, as torch.onnx.export writes with
     * TrainingMode.TRAINING) is the same layer: kiln normalises with batch
     * statistics in fit and with the moving ones in evaluate and predict.
     * Its running_mean and running_var outputs must go unread (the importer
     * refuses a read output past the first). */
    const int64_t training = kiln_onnx_attr_i(imp, "training_mode", 0);
    if (training != 0 && training != 1)
        return kiln_onnx_refuse(imp, "attribute 'training_mode' is %lld; it is 0 or 1",
                                (long long)training);
    if (kiln_onnx_attr_i(imp, "spatial", 1) != 1)
        return kiln_onnx_refuse(imp, "attribute 'spatial' is 0; kiln supports 1");
    const float epsilon = kiln_onnx_attr_f(imp, "epsilon", 1e-5f);
    const float momentum = kiln_onnx_attr_f(imp, "momentum", 0.9f);
    if (!(epsilon > 0.0f) || !isfinite(epsilon))
        return kiln_onnx_refuse(imp, "attribute 'epsilon' is %g; kiln supports finite values "
                                "> 0", (double)epsilon);
    if (!(momentum > 0.0f && momentum <= 1.0f))
        return kiln_onnx_refuse(imp, "attribute 'momentum' is %g; kiln supports (0, 1]",
                                (double)momentum);
    const int rank = imp->in[0].rank;
    if (rank != 2 && rank != 4)
        return kiln_onnx_refuse(imp, "X is %d-D; kiln supports 2-D (N, C) and 4-D (N, C, H, W)",
                                rank);
    kiln_batch_norm_options *o = (kiln_batch_norm_options *)imp->args.bytes;
    *o = (kiln_batch_norm_options){.struct_size = sizeof *o, .momentum = momentum,
                                   .epsilon = epsilon};
    imp->want = rank == 4 ? KILN_ONNX_WANT_CHANNELS_LAST : KILN_ONNX_WANT_ONNX;
    imp->n_data = 1;
    for (int p = 0; p < 4; p++)
        kiln_onnx_param_from(imp, p, p + 1, KILN_ONNX_PARAM_AS_IS);
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_batch_norm = {
    .kind = "batch_normalization", .config_size = sizeof(bn_config),
    .replica_size = sizeof(bn_replica), .min_inputs = 1, .max_inputs = 1, .configure = bn_configure,
    .describe = bn_describe, .infer = bn_infer, .kernels = bn_kernels, .prepare = bn_prepare,
    .forward = bn_forward, .backward = bn_backward, .release = bn_release, .flops = bn_flops,
    .synchronized = bn_synchronized, .fuses_activation = kiln_layer_fuses_activation,
    .args_size = sizeof(kiln_batch_norm_options), KILN_FIELDS(bn_fields), .takes_activation = 1,
    .export_onnx = bn_export_onnx,
    .import_onnx = bn_import_onnx,
    .writes_trainable_gradients_only = 1,
};
