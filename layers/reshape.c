/* Reshape (Keras Reshape): a sample takes a new shape of the same size;
 * memory order is unchanged. The runtime gives every node its own buffer,
 * so forward and backward copy, as Flatten's do. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>

typedef struct reshape_config {
    kiln_shape target;     /* as given: one dimension may be -1 */
    int no_dims;           /* the caller's dims was NULL */
} reshape_config;

/* The target's problem as an argument, into error; 0 when it has none. */
static int bad_target(const reshape_config *c, char *error, size_t size)
{
    if (c->no_dims) {
        snprintf(error, size, "target shape dims is NULL (rank %d)", (int)c->target.rank);
        return 1;
    }
    if (c->target.rank < 1 || c->target.rank > KILN_MAX_RANK) {
        snprintf(error, size, "target shape rank %d is not in 1..%d", (int)c->target.rank,
                 KILN_MAX_RANK);
        return 1;
    }
    int unknown = -1;
    for (int32_t i = 0; i < c->target.rank; i++) {
        const int32_t d = c->target.dims[i];
        if (d == -1 && unknown >= 0) {
            snprintf(error, size, "target shape dimensions %d and %d are both -1; one may be",
                     unknown, (int)i);
            return 1;
        }
        if (d == -1)
            unknown = (int)i;
        else if (d <= 0) {
            snprintf(error, size, "target shape dimension %d is %d; it must be > 0 or -1",
                     (int)i, (int)d);
            return 1;
        }
    }
    return 0;
}

static kiln_status reshape_infer(void *config, kiln_layer_build *b)
{
    const reshape_config *c = config;
    if (bad_target(c, b->error, sizeof b->error))
        return KILN_ERROR_INVALID_ARGUMENT;
    const int64_t size = kiln_shape_size(&b->in[0]);
    int64_t known = 1;
    int unknown = -1;
    for (int32_t i = 0; i < c->target.rank; i++) {
        if (c->target.dims[i] == -1)
            unknown = (int)i;
        else if (known <= size)   /* beyond size it fails anyway; no overflow */
            known *= c->target.dims[i];
    }
    b->out = c->target;
    if (unknown >= 0 && known <= size && size % known == 0)
        b->out.dims[unknown] = (int32_t)(size / known);
    if (unknown >= 0 ? known > size || size % known != 0 : known != size) {
        char in[64], to[64];
        snprintf(b->error, sizeof b->error, "cannot reshape input %s (%lld values) to %s",
                 kiln_shape_str(&b->in[0], in, sizeof in), (long long)size,
                 kiln_shape_str(&c->target, to, sizeof to));
        return KILN_ERROR_SHAPE;
    }
    return KILN_OK;
}

/* args: a kiln_reshape_args. */
static void reshape_configure(void *config, const void *args)
{
    const kiln_reshape_args *a = args;
    reshape_config *c = config;
    c->no_dims = !a->dims;   /* reported by infer */
    c->target.rank = a->rank;
    /* A rank out of range is reported by infer; dims then holds no such
     * count of values and is not read. */
    for (int32_t i = 0; a->dims && a->rank <= KILN_MAX_RANK && i < a->rank; i++)
        c->target.dims[i] = a->dims[i];
}

/* dims points into the config: the target as given, -1 included. */
static void reshape_describe(const void *config, void *args)
{
    const reshape_config *c = config;
    kiln_reshape_args *a = args;
    a->rank = c->target.rank;
    a->dims = c->target.dims;
}

/* The target shape, written and read as Input's. */
static const kiln_layer_field reshape_fields[] = {
    {.key = "target_shape", .type = KILN_FIELD_SHAPE, .offset = 0},
};

/* The values in kiln's (NHWC) row-major order, so from channels-last. */
static void reshape_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const kiln_shape *to = &g->layers[i].shape;
    int64_t shape[KILN_MAX_RANK + 1];
    shape[0] = 0;   /* opset 13: keep the input's batch */
    for (int32_t d = 0; d < to->rank; d++)
        shape[d + 1] = to->dims[d];
    const char *args[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL),
                           kiln_onnx_int64s(g, i, "shape", shape, to->rank + 1)};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "Reshape", args, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_reshape = {
    .kind = "reshape", .config_size = sizeof(reshape_config), .min_inputs = 1, .max_inputs = 1,
    .configure = reshape_configure, .describe = reshape_describe, .infer = reshape_infer,
    .forward = kiln_identity_forward,
    .backward = kiln_identity_backward,
    .args_size = sizeof(kiln_reshape_args), KILN_FIELDS(reshape_fields),
    .export_onnx = reshape_export_onnx,
};
