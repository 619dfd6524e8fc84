/* Input: declares one sample's shape; the runtime uploads data into it. */
#include "layers/layer.h"

#include <stdio.h>

typedef struct input_config {
    kiln_shape shape;
} input_config;

static kiln_status input_infer(void *config, kiln_layer_build *b)
{
    const input_config *c = config;
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
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_input = {
    .kind = "input_layer", .config_size = sizeof(input_config), .min_inputs = 0,
    .max_inputs = 0, .infer = input_infer,
};

kiln_node kiln_input(kiln_model *model, int32_t rank, const int32_t *dims, const char *name)
{
    input_config c = {.shape.rank = rank};
    for (int32_t i = 0; dims && i < rank && i < KILN_MAX_RANK; i++)
        c.shape.dims[i] = dims[i];
    if (!dims)
        c.shape.rank = 0;  /* reported by infer */
    return kiln_model_add_layer(model, &kiln_layer_input, &c, NULL, 0, name,
                                KILN_ACTIVATION_LINEAR);
}
