/* Dropout: in training, zeroes each value with probability `rate` and
 * scales the others by 1 / (1 - rate); otherwise the identity. The mask is
 * a hash (opencl/kernels/dropout.cl), deterministic for a seed. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <stddef.h>

typedef struct dropout_config {
    float rate;
    uint64_t seed;   /* mixed with the context's */
} dropout_config;

static kiln_status dropout_infer(void *config, kiln_layer_build *b)
{
    const dropout_config *c = config;
    if (!(c->rate >= 0.0f && c->rate < 1.0f)) {
        snprintf(b->error, sizeof b->error, "rate must be in [0, 1), got %g", (double)c->rate);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    b->out = b->in[0];
    return KILN_OK;
}

typedef struct dropout_replica {
    kiln_kernel *dropout;
} dropout_replica;

static kiln_status dropout_kernels(const void *config, void *replica, kiln_device *dev)
{
    (void)config;
    dropout_replica *r = replica;
    return kiln_kernel_get(dev, "dropout", "kiln_dropout_apply", &r->dropout);
}

static kiln_status apply(const dropout_config *c, const dropout_replica *r, const kiln_step *s,
                         const kiln_buffer *src, kiln_buffer *dst, int accumulate)
{
    const int64_t size = kiln_shape_size(s->out_shape);
    const size_t n = (size_t)s->batch * (size_t)size;
    const uint64_t seed = s->seed ^ (c->seed * 0x9e3779b97f4a7c15ULL);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst), kiln_arg_int((int64_t)n),
                            kiln_arg_int(size), kiln_arg_int(s->first_sample),
                            kiln_arg_uint((uint32_t)seed), kiln_arg_uint((uint32_t)(seed >> 32)),
                            kiln_arg_uint((uint32_t)s->step_number), kiln_arg_float(c->rate),
                            kiln_arg_int(accumulate));
    return kiln_kernel_run1(s->dev, r->dropout, n, a);
}

static kiln_status dropout_forward(const void *config, void *replica, const kiln_step *s)
{
    const dropout_config *c = config;
    if (!s->training || c->rate == 0.0f)
        return kiln_identity_forward(config, replica, s);
    return apply(c, replica, s, s->in[0], s->out, 0);
}

static kiln_status dropout_backward(const void *config, void *replica, const kiln_step *s)
{
    const dropout_config *c = config;
    if (!s->d_in[0])
        return KILN_OK;
    if (c->rate == 0.0f)
        return kiln_identity_backward(config, replica, s);
    return apply(c, replica, s, s->d_out, s->d_in[0], s->d_in_accumulate[0]);
}

/* args: a kiln_dropout_args. */
static void dropout_configure(void *config, const void *args)
{
    const kiln_dropout_args *a = args;
    *(dropout_config *)config = (dropout_config){.rate = a->rate, .seed = a->seed};
}

static void dropout_describe(const void *config, void *args)
{
    const dropout_config *c = config;
    *(kiln_dropout_args *)args = (kiln_dropout_args){.rate = c->rate, .seed = c->seed};
}

static const kiln_layer_field dropout_fields[] = {
    {.key = "rate", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_dropout_args, rate)},
    {.key = "seed", .type = KILN_FIELD_SEED, .offset = offsetof(kiln_dropout_args, seed)},
};

/* ONNX Dropout: its ratio an attribute (opset 11) or a constant input 1
 * (default 0.5); kiln drops in fit and passes values on in evaluate and
 * predict, whatever training_mode says. */
static kiln_status dropout_import_onnx(kiln_onnx_import *imp)
{
    kiln_status st = kiln_onnx_check_attrs(imp, imp->opset < 12 ? "ratio:f" : "seed:i");
    if (st == KILN_OK && imp->opset >= 12)
        st = kiln_onnx_need_constant(imp, 1, "ratio", 1);
    if (st == KILN_OK && imp->opset >= 12)
        st = kiln_onnx_need_constant(imp, 2, "training_mode", 1);
    if (st != KILN_OK)
        return st;
    float ratio = kiln_onnx_attr_f(imp, "ratio", 0.5f);
    if (imp->opset >= 12 && imp->n_in > 1 && *imp->in[1].name) {
        if (imp->in[1].rank != 0)
            return kiln_onnx_refuse(imp, "input 1 (ratio) is %d-D; ONNX takes a scalar",
                                    imp->in[1].rank);
        ratio = imp->in[1].data[0];
    }
    if (!(ratio >= 0.0f && ratio < 1.0f))
        return kiln_onnx_refuse(imp, "ratio %g; kiln supports [0, 1)", (double)ratio);
    kiln_dropout_args *a = (kiln_dropout_args *)imp->args.bytes;
    *a = (kiln_dropout_args){.rate = ratio,
                             .seed = (uint64_t)kiln_onnx_attr_i(imp, "seed", 0)};
    imp->want = KILN_ONNX_WANT_ANY;
    imp->n_data = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_dropout = {
    .kind = "dropout", .config_size = sizeof(dropout_config),
    .replica_size = sizeof(dropout_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = dropout_configure, .describe = dropout_describe, .infer = dropout_infer,
    .kernels = dropout_kernels, .forward = dropout_forward, .backward = dropout_backward,
    .args_size = sizeof(kiln_dropout_args), KILN_FIELDS(dropout_fields),
    .export_onnx = kiln_onnx_identity,   /* inference passes its input on */
    .import_onnx = dropout_import_onnx,
};
