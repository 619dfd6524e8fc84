#include "runtime/loss.h"

#include <stdio.h>

const char *kiln_loss_name(kiln_loss loss)
{
    switch (loss) {
    case KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY: return "sparse_categorical_crossentropy";
    case KILN_LOSS_CATEGORICAL_CROSSENTROPY: return "categorical_crossentropy";
    case KILN_LOSS_BINARY_CROSSENTROPY: return "binary_crossentropy";
    case KILN_LOSS_MEAN_SQUARED_ERROR: return "mean_squared_error";
    default: return "none";
    }
}

kiln_status kiln_loss_plan_make(kiln_model *m, kiln_loss loss, int want_accuracy,
                                kiln_loss_plan *plan)
{
    const kiln_node_rec *out = &m->nodes[m->output];
    char s[64];
    plan->loss = loss;
    plan->fused = 0;
    plan->sparse = 0;
    plan->accuracy = want_accuracy;
    switch (loss) {
    case KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
    case KILN_LOSS_CATEGORICAL_CROSSENTROPY:
        if (out->shape.rank != 1 || out->shape.dims[0] < 2)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE,
                              "%s needs an output of (classes,) with at least 2 classes; "
                              "output layer '%s' gives %s", kiln_loss_name(loss), out->name,
                              kiln_shape_str(&out->shape, s, sizeof s));
        plan->sparse = loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
        plan->fused = out->activation == KILN_ACTIVATION_SOFTMAX;
        if (plan->sparse)
            plan->kernel = plan->fused ? "kiln_loss_sparse_ce_logits" : "kiln_loss_sparse_ce_probs";
        else
            plan->kernel = plan->fused ? "kiln_loss_ce_logits" : "kiln_loss_ce_probs";
        if (!plan->fused)
            kiln_log(m->ctx, KILN_LOG_WARNING, "%s on output '%s' without softmax: the output "
                     "is read as probabilities", kiln_loss_name(loss), out->name);
        return KILN_OK;
    case KILN_LOSS_BINARY_CROSSENTROPY:
        plan->fused = out->activation == KILN_ACTIVATION_SIGMOID;
        plan->kernel = plan->fused ? "kiln_loss_bce_logits" : "kiln_loss_bce_probs";
        return KILN_OK;
    case KILN_LOSS_MEAN_SQUARED_ERROR:
        plan->kernel = "kiln_loss_mse";
        plan->accuracy = 0;
        return KILN_OK;
    default:
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: loss %d is not a kiln_loss (set "
                          "kiln_compile_options.loss)", (int)loss);
    }
}

kiln_status kiln_loss_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                              const kiln_buffer *z, const kiln_buffer *y,
                              const kiln_buffer *labels, kiln_buffer *grad, kiln_buffer *loss,
                              kiln_buffer *correct, kiln_buffer *sums, int32_t n, int64_t cols,
                              float scale)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(z), kiln_arg_buffer(y), kiln_arg_buffer(labels),
                            kiln_arg_buffer(grad), kiln_arg_buffer(loss), kiln_arg_buffer(correct),
                            kiln_arg_int(n), kiln_arg_int(cols), kiln_arg_float(scale));
    kiln_status st = kiln_run1(dev, "loss", plan->kernel, (size_t)n, a);
    if (st != KILN_OK)
        return st;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(loss), kiln_arg_buffer(correct), kiln_arg_int(n),
                            kiln_arg_buffer(sums));
    return kiln_run1(dev, "loss", "kiln_loss_sum", 64, b);
}
