/* Permute (Keras Permute): a sample's axes in another order, `dims` a
 * permutation of 1..rank counting from 1 as Keras's does (the batch axis
 * stays first). The importer uses it where an ONNX graph's channels-first
 * values meet kiln's channels-last layers. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>

typedef struct permute_config {
    kiln_shape dims;       /* as given, from 1 */
    int no_dims;           /* the caller's dims was NULL */
    int32_t out_dims[4];   /* inferred, padded to 4 axes with 1s in front */
    int32_t strides[4];    /* inferred: the input stride each output axis reads */
} permute_config;

static kiln_status permute_infer(void *config, kiln_layer_build *b)
{
    permute_config *c = config;
    const kiln_shape *in = &b->in[0];
    if (c->no_dims) {
        snprintf(b->error, sizeof b->error, "dims is NULL");
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->dims.rank != in->rank) {
        snprintf(b->error, sizeof b->error, "dims has %d axes but the input has %d",
                 (int)c->dims.rank, (int)in->rank);
        return KILN_ERROR_SHAPE;
    }
    int seen[KILN_MAX_RANK] = {0};
    for (int32_t d = 0; d < in->rank; d++) {
        const int32_t a = c->dims.dims[d];
        if (a < 1 || a > in->rank || seen[a - 1]++) {
            snprintf(b->error, sizeof b->error, "dims[%d] is %d: dims must be a permutation "
                     "of 1..%d", (int)d, (int)a, (int)in->rank);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
    }
    int32_t stride[KILN_MAX_RANK];
    int32_t s = 1;
    for (int32_t d = in->rank - 1; d >= 0; d--) {
        stride[d] = s;
        s *= in->dims[d];
    }
    b->out.rank = in->rank;
    const int pad = 4 - in->rank;
    for (int d = 0; d < 4; d++) {
        c->out_dims[d] = 1;
        c->strides[d] = 0;
    }
    for (int32_t d = 0; d < in->rank; d++) {
        const int32_t a = c->dims.dims[d] - 1;
        b->out.dims[d] = in->dims[a];
        c->out_dims[pad + d] = in->dims[a];
        c->strides[pad + d] = stride[a];
    }
    return KILN_OK;
}

static kiln_status permute_copy(const permute_config *c, const kiln_step *s,
                                const kiln_buffer *src, kiln_buffer *dst, int back,
                                int accumulate)
{
    const int64_t size = kiln_shape_size(s->out_shape);
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst), kiln_arg_int(size),
                            kiln_arg_int(c->out_dims[0]), kiln_arg_int(c->out_dims[1]),
                            kiln_arg_int(c->out_dims[2]), kiln_arg_int(c->out_dims[3]),
                            kiln_arg_int(c->strides[0]), kiln_arg_int(c->strides[1]),
                            kiln_arg_int(c->strides[2]), kiln_arg_int(c->strides[3]),
                            kiln_arg_int(back), kiln_arg_int(accumulate));
    const size_t range[2] = {(size_t)size, (size_t)s->batch};
    return kiln_run(s->dev, "permute", "kiln_permute_copy", 2, range, a);
}

static kiln_status permute_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const kiln_status st = permute_copy(config, s, s->in[0], s->out, 0, 0);
    return st != KILN_OK ? st : kiln_step_activate(s, s->out);
}

static kiln_status permute_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    if (!s->d_in[0])
        return KILN_OK;
    return permute_copy(config, s, s->d_out, s->d_in[0], 1, s->d_in_accumulate[0]);
}

/* args: a kiln_permute_args. */
static void permute_configure(void *config, const void *args)
{
    const kiln_permute_args *a = args;
    permute_config *c = config;
    c->no_dims = !a->dims;
    c->dims.rank = a->rank;
    for (int32_t i = 0; a->dims && a->rank <= KILN_MAX_RANK && i < a->rank; i++)
        c->dims.dims[i] = a->dims[i];
}

static void permute_describe(const void *config, void *args)
{
    const permute_config *c = config;
    kiln_permute_args *a = args;
    a->rank = c->dims.rank;
    a->dims = c->dims.dims;
}

static const kiln_layer_field permute_fields[] = {
    {.key = "dims", .type = KILN_FIELD_SHAPE, .offset = 0},
};

/* kiln's axes as they are, whatever layout the graph thinks of them in. */
static void permute_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const permute_config *c = g->layers[i].config;
    int64_t perm[KILN_MAX_RANK + 1] = {0};
    for (int32_t d = 0; d < c->dims.rank; d++)
        perm[d + 1] = c->dims.dims[d];
    const char *x = kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL);
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_attr_ints(g, kiln_onnx_add_node(g, "Transpose", &x, 1, out), "perm", perm,
                        (size_t)c->dims.rank + 1);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_permute = {
    .kind = "permute", .config_size = sizeof(permute_config), .min_inputs = 1, .max_inputs = 1,
    .configure = permute_configure, .describe = permute_describe, .infer = permute_infer,
    .forward = permute_forward, .backward = permute_backward,
    .args_size = sizeof(kiln_permute_args), KILN_FIELDS(permute_fields),
    .export_onnx = permute_export_onnx,
};
