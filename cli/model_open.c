#include "model_open.h"

#include <string.h>

int cli_is_onnx(const char *path)
{
    const size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

kiln_status cli_open(kiln_context *ctx, const char *path, kiln_strategy strategy,
                     kiln_storage activations, kiln_model **m)
{
    if (cli_is_onnx(path))
        return kiln_model_import_onnx(ctx, path, NULL, m);
    /* A model-parallel file's placements are not applied off the pipeline:
     * the tool runs what it is asked to, where it is asked to. */
    const kiln_compile_options co = {.struct_size = sizeof co, .strategy = strategy,
                                     .activation_storage = activations};
    return kiln_model_load(ctx, path, &co, m);
}

kiln_status cli_from_logits(kiln_model *m, kiln_loss loss)
{
    const kiln_activation_layer_options o = {.struct_size = sizeof o,
                                             .name = "from_logits"};
    const kiln_activation f = loss == KILN_LOSS_BINARY_CROSSENTROPY ? KILN_ACTIVATION_SIGMOID
                                                                    : KILN_ACTIVATION_SOFTMAX;
    return kiln_model_set_output(m, kiln_activation_layer(m, KILN_NODE_PREVIOUS, f, &o));
}

kiln_status cli_compile(kiln_model *m, const cli_args *a)
{
    const kiln_optimizer_options opt = {.struct_size = sizeof opt, .kind = a->optimizer,
                                        .learning_rate = a->learning_rate,
                                        .momentum = a->momentum,
                                        .nesterov = (a->given & CLI_NESTEROV) != 0,
                                        .schedule = &a->schedule,
                                        .clipnorm = a->clipnorm, .clipvalue = a->clipvalue,
                                        .global_clipnorm = a->global_clipnorm,
                                        .weight_decay = a->weight_decay,
                                        .use_ema = a->ema_momentum > 0.0f,
                                        .ema_momentum = a->ema_momentum};
    const kiln_compile_options co = {.struct_size = sizeof co, .loss = a->loss,
                                     .optimizer = &opt, .strategy = a->strategy,
                                     .label_smoothing = a->label_smoothing,
                                     .activation_storage = a->activations};
    return kiln_model_compile(m, &co);
}
