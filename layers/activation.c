/* Activation as a layer: an identity whose node carries the activation, so
 * the runtime treats it exactly as a layer's own activation option: applied
 * here when the runtime lets the layer fuse it, else by the runtime (and
 * softmax or sigmoid fused with the loss). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

typedef struct activation_config {
    int32_t unused;
} activation_config;

static kiln_status activation_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    b->out = b->in[0];
    return KILN_OK;
}

static kiln_status activation_forward(const void *config, void *replica, const kiln_step *s)
{
    if (s->activation == KILN_ACTIVATION_LINEAR)
        return kiln_identity_forward(config, replica, s);
    return kiln_step_activate(s, s->in[0]);
}

const kiln_layer_ops kiln_layer_activation = {
    .kind = "activation", .config_size = sizeof(activation_config), .min_inputs = 1,
    .max_inputs = 1, .infer = activation_infer, .forward = activation_forward,
    .backward = kiln_identity_backward, .fuses_activation = kiln_layer_fuses_activation,
    .takes_activation = 1, .export_onnx = kiln_onnx_identity,
};
