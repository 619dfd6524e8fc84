/* Flatten: one dimension per sample; memory order is unchanged. */
#include "layers/layer.h"

#include <stdio.h>

typedef struct flatten_config {
    int32_t unused;
} flatten_config;

static kiln_status flatten_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    const int64_t size = kiln_shape_size(&b->in[0]);
    if (size > INT32_MAX) {
        snprintf(b->error, sizeof b->error, "%lld values per sample is too many",
                 (long long)size);
        return KILN_ERROR_SHAPE;
    }
    b->out.rank = 1;
    b->out.dims[0] = (int32_t)size;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_flatten = {
    .kind = "flatten", .config_size = sizeof(flatten_config), .min_inputs = 1, .max_inputs = 1,
    .infer = flatten_infer, .forward = kiln_identity_forward, .backward = kiln_identity_backward,
};
