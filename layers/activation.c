/* Activation as a layer: an identity whose node carries the activation, so
 * the runtime applies it (and fuses softmax or sigmoid with the loss) exactly
 * as for a layer's own activation option. */
#include "layers/layer.h"

typedef struct activation_config {
    int32_t unused;
} activation_config;

static kiln_status activation_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    b->out = b->in[0];
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_activation = {
    "activation", sizeof(activation_config), 0, 1, 1, activation_infer, NULL,
    kiln_identity_forward, kiln_identity_backward, NULL, NULL, NULL,
};

kiln_node kiln_activation_layer(kiln_model *model, kiln_node input, kiln_activation activation,
                                const char *name)
{
    activation_config c = {0};
    return kiln_model_add_layer(model, &kiln_layer_activation, &c, &input, 1, name, activation);
}
