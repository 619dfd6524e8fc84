/* Input: declares one sample's shape; the runtime uploads data into it. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>
#include <stddef.h>

typedef struct input_config {
    kiln_shape shape;
    int no_dims;           /* the caller's dims was NULL */
    int32_t ints;          /* int32 ids (kiln_input_ints) */
} input_config;

static kiln_status input_infer(void *config, kiln_layer_build *b)
{
    const input_config *c = config;
    if (c->no_dims) {
        snprintf(b->error, sizeof b->error, "dims is NULL (rank %d)", (int)c->shape.rank);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (c->shape.rank < 1 || c->shape.rank > KILN_MAX_RANK) {
        snprintf(b->error, sizeof b->error, "rank %d is not in 1..%d", (int)c->shape.rank,
                 KILN_MAX_RANK);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    for (int32_t i = 0; i < c->shape.rank; i++) {
        if (c->shape.dims[i] <= 0) {
            snprintf(b->error, sizeof b->error, "dimension %d is %d; it must be > 0", (int)i,
                     (int)c->shape.dims[i]);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
    }
    b->out = c->shape;
    b->out_ints = c->ints != 0;
    return KILN_OK;
}

/* args: a kiln_input_args. */
static void input_configure(void *config, const void *args)
{
    const kiln_input_args *a = args;
    input_config *c = config;
    c->no_dims = !a->dims;   /* reported by infer */
    c->ints = a->ints;
    c->shape.rank = a->rank;
    /* A rank out of range is reported by infer; dims then holds no such
     * count of values and is not read. */
    for (int32_t i = 0; a->dims && a->rank <= KILN_MAX_RANK && i < a->rank; i++)
        c->shape.dims[i] = a->dims[i];
}

/* dims points into the config. */
static void input_describe(const void *config, void *args)
{
    const input_config *c = config;
    kiln_input_args *a = args;
    a->rank = c->shape.rank;
    a->dims = c->shape.dims;
    a->ints = c->ints;
}

static const kiln_layer_field input_fields[] = {
    {.key = "shape", .type = KILN_FIELD_SHAPE, .offset = 0},
    {.key = "dtype", .type = KILN_FIELD_DTYPE, .offset = offsetof(kiln_input_args, ints)},
};

const kiln_layer_ops kiln_layer_input = {
    .kind = "input_layer", .config_size = sizeof(input_config), .min_inputs = 0, .max_inputs = 0,
    .configure = input_configure, .describe = input_describe, .infer = input_infer,
    .args_size = sizeof(kiln_input_args), KILN_FIELDS(input_fields),
};
