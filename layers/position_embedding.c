/* PositionEmbedding: a learned (max_length, width) table whose first T rows
 * are added to a (T, width) input, position by position (keras_hub's
 * PositionEmbedding returns the rows for the caller to Add; kiln fuses the
 * Add, so that token + position embeddings stay one layer after the
 * Embedding). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>
#include <stddef.h>

typedef struct position_config {
    int32_t max_length;
    int32_t length, width;   /* inferred: the input's (T, width) */
} position_config;

typedef struct position_replica {
    kiln_kernel *forward, *grad;
} position_replica;

static kiln_status position_infer(void *config, kiln_layer_build *b)
{
    position_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64];
    if (c->max_length <= 0) {
        snprintf(b->error, sizeof b->error, "max_length must be > 0, got %d",
                 (int)c->max_length);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (in->rank != 2) {
        snprintf(b->error, sizeof b->error, "the input is %s; it must be (sequence, width)",
                 kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    if (in->dims[0] > c->max_length) {
        snprintf(b->error, sizeof b->error, "the input %s is a sequence of %d positions, "
                 "longer than max_length %d", kiln_shape_str(in, s, sizeof s),
                 (int)in->dims[0], (int)c->max_length);
        return KILN_ERROR_SHAPE;
    }
    c->length = in->dims[0];
    c->width = in->dims[1];
    b->out = *in;
    kiln_param_spec *t = &b->params[b->n_params++];
    t->name = "embeddings";
    t->shape.rank = 2;
    t->shape.dims[0] = c->max_length;
    t->shape.dims[1] = c->width;
    t->init = KILN_INIT_GLOROT_UNIFORM;   /* keras_hub's default */
    t->fan_in = c->max_length;
    t->fan_out = c->width;
    return KILN_OK;
}

static kiln_status position_kernels(const void *config, void *replica, kiln_device *dev)
{
    (void)config;
    position_replica *r = replica;
    kiln_status st = kiln_kernel_get(dev, "position_embedding", "kiln_position_embedding_forward",
                                     &r->forward);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "position_embedding", "kiln_position_embedding_grad",
                             &r->grad);
    return st;
}

static kiln_status position_forward(const void *config, void *replica, const kiln_step *s)
{
    const position_config *c = config;
    const position_replica *r = replica;
    const size_t row = (size_t)c->length * (size_t)c->width;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_int((int64_t)row),
                            kiln_arg_int(s->batch), kiln_arg_buffer(s->params),
                            kiln_arg_int((int64_t)s->param_offset[0]), kiln_arg_buffer(s->out));
    const size_t range[2] = {row, (size_t)s->batch};
    kiln_status st = kiln_kernel_run(s->dev, r->forward, 2, range, a);
    if (st == KILN_OK)
        st = kiln_step_activate(s, s->out);
    return st;
}

static kiln_status position_backward(const void *config, void *replica, const kiln_step *s)
{
    const position_config *c = config;
    const position_replica *r = replica;
    const size_t row = (size_t)c->length * (size_t)c->width;
    const size_t table = (size_t)c->max_length * (size_t)c->width;
    kiln_status st = KILN_OK;
    if (!s->frozen) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_int((int64_t)row),
                                kiln_arg_int((int64_t)table), kiln_arg_int(s->batch),
                                kiln_arg_buffer(s->grads),
                                kiln_arg_int((int64_t)s->param_offset[0]));
        st = kiln_kernel_run1(s->dev, r->grad, table, a);
    }
    if (st == KILN_OK && s->d_in[0])
        st = kiln_copy_or_add(s->dev, s->d_out, s->d_in[0], (size_t)s->batch * row,
                              s->d_in_accumulate[0]);
    return st;
}

static uint64_t position_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return (uint64_t)kiln_shape_size(in_shape);
}

/* args: the kiln_position_embedding_options the builder copied. */
static void position_configure(void *config, const void *args)
{
    const kiln_position_embedding_options *o = args;
    *(position_config *)config = (position_config){.max_length = o->max_length};
}

static void position_describe(const void *config, void *args)
{
    kiln_position_embedding_options *o = args;
    o->max_length = ((const position_config *)config)->max_length;
}

static const kiln_layer_field position_fields[] = {
    {.key = "max_length", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_position_embedding_options, max_length)},
};

/* x + the table's first T rows (all of it when T is max_length). */
static void position_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *name = g->layers[i].name;
    const kiln_param_spec *spec;
    const char *table = kiln_onnx_param_initializer(g, i, "embeddings");
    const int64_t length = g->layers[i].shape.dims[0];
    if (kiln_onnx_param(g, i, "embeddings", &spec) && spec->shape.dims[0] != length) {
        static const char *const what[3] = {"starts", "ends", "axes"};
        const int64_t bounds[3] = {0, length, 0};
        const char *in[4] = {table, NULL, NULL, NULL};
        for (int k = 0; k < 3; k++)
            in[k + 1] = kiln_onnx_int64s(g, i, what[k], &bounds[k], 1);
        table = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/rows", name));
        kiln_onnx_add_node(g, "Slice", in, 4, table);
    }
    const char *args[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL), table};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "Add", args, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_position_embedding = {
    .kind = "position_embedding", .config_size = sizeof(position_config),
    .replica_size = sizeof(position_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = position_configure, .describe = position_describe, .infer = position_infer,
    .kernels = position_kernels, .forward = position_forward,
    .backward = position_backward, .flops = position_flops,
    .args_size = sizeof(kiln_position_embedding_options), KILN_FIELDS(position_fields),
    .export_onnx = position_export_onnx,
    .writes_trainable_gradients_only = 1,
};
