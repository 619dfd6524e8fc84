/* LearnedTokens: a trainable tensor emitted for every sample (ViT's class
 * token, torchvision's class_token.expand(n, -1, -1)). Its input only
 * gives the batch; the layer's output does not depend on its values, so
 * its gradient is zero. The parameter's gradient is the sum over the
 * batch of the output's. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>

typedef struct tokens_config {
    kiln_shape shape;
    int no_dims;           /* the caller's dims was NULL */
} tokens_config;

static kiln_status tokens_infer(void *config, kiln_layer_build *b)
{
    const tokens_config *c = config;
    char t[64];
    if (c->no_dims || c->shape.rank < 1 || c->shape.rank > KILN_MAX_RANK) {
        snprintf(b->error, sizeof b->error, "shape %s of rank %d; it must be given, of rank "
                 "1..%d", c->no_dims ? "dims NULL" : "given", (int)c->shape.rank,
                 KILN_MAX_RANK);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    kiln_shape_str(&c->shape, t, sizeof t);
    for (int32_t d = 0; d < c->shape.rank; d++)
        if (c->shape.dims[d] < 1) {
            snprintf(b->error, sizeof b->error, "shape %s: dimension %d is %d; each must be "
                     "> 0", t, (int)d, (int)c->shape.dims[d]);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
    const int64_t size = kiln_shape_size(&c->shape);
    if (size < 0 || size > KILN_MAX_FLOATS) {
        snprintf(b->error, sizeof b->error, "shape %s holds more than %d floats", t,
                 (int)KILN_MAX_FLOATS);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    b->out = c->shape;
    kiln_param_spec *p = &b->params[b->n_params++];
    p->name = "tokens";
    p->shape = c->shape;
    p->init = KILN_INIT_ZEROS;   /* torchvision's class_token starts at zeros */
    p->fan_in = p->fan_out = c->shape.dims[c->shape.rank - 1];
    return KILN_OK;
}

/* The parameter added to a zeroed output, sample by sample, with the
 * node's activation fused. */
static kiln_status tokens_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const size_t size = (size_t)kiln_shape_size(&((const tokens_config *)config)->shape);
    kiln_status st = kiln_buffer_zero(s->dev, s->out, 0, (size_t)s->batch * size *
                                      sizeof(float));
    if (st == KILN_OK)
        st = kiln_bias_add(s->dev, s->out, (size_t)s->batch, size, s->params,
                           s->param_offset[0], s->activation);
    return st;
}

static kiln_status tokens_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const size_t size = (size_t)kiln_shape_size(&((const tokens_config *)config)->shape);
    kiln_status st = KILN_OK;
    if (!s->frozen)
        st = kiln_column_sum(s->dev, s->d_out, (size_t)s->batch, size, s->grads,
                             s->param_offset[0], 0);
    if (st == KILN_OK && s->d_in[0] && !s->d_in_accumulate[0])
        st = kiln_buffer_zero(s->dev, s->d_in[0], 0, (size_t)s->batch *
                              (size_t)kiln_shape_size(&s->in_shape[0]) * sizeof(float));
    return st;
}

static uint64_t tokens_flops(const void *config, const kiln_shape *in_shape)
{
    (void)in_shape;
    return (uint64_t)kiln_shape_size(&((const tokens_config *)config)->shape);
}

/* args: a kiln_learned_tokens_args. */
static void tokens_configure(void *config, const void *args)
{
    const kiln_learned_tokens_args *a = args;
    tokens_config *c = config;
    c->no_dims = !a->dims;   /* reported by infer */
    c->shape.rank = a->rank;
    for (int32_t i = 0; a->dims && a->rank >= 0 && a->rank <= KILN_MAX_RANK && i < a->rank; i++)
        c->shape.dims[i] = a->dims[i];
}

/* dims points into the config. */
static void tokens_describe(const void *config, void *args)
{
    const tokens_config *c = config;
    kiln_learned_tokens_args *a = args;
    a->rank = c->shape.rank;
    a->dims = c->shape.dims;
}

static const kiln_layer_field tokens_fields[] = {
    {.key = "shape", .type = KILN_FIELD_SHAPE, .offset = 0},
};

/* Expand(tokens, Concat(Shape(input)[0:1], shape)): the parameter
 * repeated over the input's batch, as torch.onnx.export writes
 * class_token.expand(n, -1, -1); the importer reads it back as this kind. */
static void tokens_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *name = g->layers[i].name;
    const kiln_shape *shape = &g->layers[i].shape;
    const char *x = kiln_onnx_input_value(g, i, 0, kiln_onnx_input_layout(g, i, 0));
    const char *batch_shape = kiln_onnx_step(g, i, "Shape", x, NULL, "shape");
    static const char *const what[3] = {"starts", "ends", "axes"};
    const int64_t bounds[3] = {0, 1, 0};
    const char *in[4] = {batch_shape, NULL, NULL, NULL};
    for (int k = 0; k < 3; k++)
        in[k + 1] = kiln_onnx_int64s(g, i, what[k], &bounds[k], 1);
    const char *batch = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/batch", name));
    kiln_onnx_add_node(g, "Slice", in, 4, batch);
    int64_t dims[KILN_MAX_RANK];
    for (int32_t d = 0; d < shape->rank; d++)
        dims[d] = shape->dims[d];
    const char *parts[2] = {batch, kiln_onnx_int64s(g, i, "sample_shape", dims, shape->rank)};
    const char *to = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/expand_shape", name));
    kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Concat", parts, 2, to), "axis", 0);
    const char *args[2] = {kiln_onnx_param_initializer(g, i, "tokens"), to};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "Expand", args, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_learned_tokens = {
    .kind = "learned_tokens", .config_size = sizeof(tokens_config), .min_inputs = 1,
    .max_inputs = 1, .configure = tokens_configure, .describe = tokens_describe,
    .infer = tokens_infer, .forward = tokens_forward, .backward = tokens_backward,
    .flops = tokens_flops, .args_size = sizeof(kiln_learned_tokens_args),
    KILN_FIELDS(tokens_fields), .export_onnx = tokens_export_onnx,
    .writes_trainable_gradients_only = 1,
};
