#include "runtime/model/loss.h"

#include <math.h>
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

kiln_status kiln_loss_plan_make_for(kiln_model *m, kiln_node output, kiln_loss loss,
                                    int want_accuracy, kiln_loss_plan *plan)
{
    const kiln_node_rec *out = &m->graph.nodes[output];
    char s[64];
    const int64_t size = kiln_shape_size(&out->shape);
    const int32_t classes = out->shape.dims[out->shape.rank - 1];
    plan->loss = loss;
    plan->fused = 0;
    plan->sparse = 0;
    plan->accuracy = want_accuracy;
    plan->positions = 1;
    plan->cols = size;
    plan->has_ignore = 0;
    plan->ignore = 0;
    plan->label_smoothing = 0.0f;
    plan->sums_at = 0;
    plan->per_row_variants = 0;
    switch (loss) {
    case KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
    case KILN_LOSS_CATEGORICAL_CROSSENTROPY:
        if (classes < 2)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE,
                              "%s needs an output of (classes,) or (positions..., classes) "
                              "with at least 2 classes; output layer '%s' gives %s",
                              kiln_loss_name(loss), out->name,
                              kiln_shape_str(&out->shape, s, sizeof s));
        /* Keras on a rank-3 output: one distribution per position, the last
         * axis (where softmax applies), and the loss averaged over them. */
        plan->positions = size / classes;
        plan->cols = classes;
        plan->sparse = loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
        plan->fused = out->activation == KILN_ACTIVATION_SOFTMAX;
        if (plan->sparse)
            plan->kernel = plan->fused ? "kiln_loss_sparse_ce_logits" : "kiln_loss_sparse_ce_probs";
        else
            plan->kernel = plan->fused ? "kiln_loss_ce_logits" : "kiln_loss_ce_probs";
        plan->per_row_variants = 1;
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

kiln_status kiln_loss_take_smoothing(kiln_model *m, int32_t k, const char *field, float ls,
                                     kiln_loss_plan *plan)
{
    plan->label_smoothing = 0.0f;
    if (ls == 0.0f)
        return KILN_OK;
    const char *output = m->graph.nodes[m->graph.outputs[k]].name;
    if (!(ls >= 0.0f && ls <= 1.0f))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %s is %g (output '%s'); it must be in [0, 1]",
                          field, (double)ls, output);
    if (plan->loss == KILN_LOSS_MEAN_SQUARED_ERROR)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %s is %g (output '%s'), but label smoothing is "
                          "for the cross-entropy losses, not %s", field, (double)ls, output,
                          kiln_loss_name(plan->loss));
    plan->label_smoothing = ls;
    return KILN_OK;
}

size_t kiln_loss_label_bytes(const kiln_loss_plan *plan)
{
    return plan->sparse ? (size_t)plan->positions * sizeof(int32_t)
                        : (size_t)(plan->positions * plan->cols) * sizeof(float);
}

double kiln_loss_counted(const kiln_loss_plan *plan, const void *labels, int32_t n)
{
    const int64_t rows = (int64_t)n * plan->positions;
    if (!plan->has_ignore)
        return (double)rows;
    const int32_t *y = labels;
    int64_t counted = 0;
    for (int64_t i = 0; i < rows; i++)
        counted += y[i] != plan->ignore;
    return (double)counted;
}

int64_t kiln_loss_bad_label(const kiln_loss_plan *plan, const int32_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if ((y[i] < 0 || y[i] >= plan->cols) && !(plan->has_ignore && y[i] == plan->ignore))
            return i;
    return -1;
}

void kiln_loss_label_place(const kiln_loss_plan *plan, int64_t i, char *buf, size_t size)
{
    if (plan->positions == 1)
        snprintf(buf, size, "sample %lld", (long long)i);
    else
        snprintf(buf, size, "sample %lld, position %lld", (long long)(i / plan->positions),
                 (long long)(i % plan->positions));
}

float kiln_loss_scale(double counted)
{
    /* Every position ignored: loss 0 and no gradient, as Keras's masked mean. */
    return counted > 0 ? 1.0f / (float)counted : 0.0f;
}

kiln_status kiln_loss_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                              const kiln_buffer *z, const kiln_buffer *y,
                              const kiln_buffer *labels, kiln_buffer *grad, kiln_buffer *loss,
                              kiln_buffer *correct, kiln_buffer *sums, int32_t n, float scale)
{
    const int64_t rows = (int64_t)n * plan->positions;
    const int32_t ignore = plan->has_ignore ? plan->ignore : -1;   /* -1: no label is */
    kiln_args a = KILN_ARGS(kiln_arg_buffer(z), kiln_arg_buffer(y), kiln_arg_buffer(labels),
                            kiln_arg_buffer(grad), kiln_arg_buffer(loss), kiln_arg_buffer(correct),
                            kiln_arg_int(rows), kiln_arg_int(plan->cols), kiln_arg_float(scale),
                            kiln_arg_int(ignore), kiln_arg_float(plan->label_smoothing));
    kiln_status st = plan->per_row_variants
                         ? kiln_run_per_row(dev, "loss", plan->kernel, (size_t)rows,
                                            (size_t)plan->cols, a)
                         : kiln_run1(dev, "loss", plan->kernel, (size_t)rows, a);
    if (st != KILN_OK)
        return st;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(loss), kiln_arg_buffer(correct),
                            kiln_arg_buffer(labels), kiln_arg_int(rows), kiln_arg_int(n),
                            kiln_arg_int(plan->sparse ? ignore : -1), kiln_arg_buffer(sums),
                            kiln_arg_int(plan->sums_at));
    return kiln_run1(dev, "loss", "kiln_loss_sum", 64, b);
}

kiln_status kiln_metric_plan_make(kiln_model *m, const kiln_compile_options *o)
{
    kiln_loss_plan *plan = &m->plan.heads[0];
    const char *loss = kiln_loss_name(plan->loss);
    const int categorical = plan->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
                            plan->loss == KILN_LOSS_CATEGORICAL_CROSSENTROPY;
    if (o->top_k < 0 || (o->top_k > 0 && !categorical))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: top_k is %d; it must be >= 0, and is for the "
                          "categorical cross-entropy losses only (the loss is %s)",
                          (int)o->top_k, loss);
    if ((o->mean_absolute_error || o->binary_accuracy) && plan->sparse)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %s needs dense labels; %s takes class ids",
                          o->mean_absolute_error ? "mean_absolute_error" : "binary_accuracy",
                          loss);
    if (!isfinite(o->binary_threshold))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: binary_threshold %g is not finite",
                          (double)o->binary_threshold);
    if (o->has_ignore_class && (!plan->sparse || o->ignore_class < 0))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: ignore_class is %d; it must be >= 0, and is for "
                          "sparse_categorical_crossentropy only (the loss is %s)",
                          (int)o->ignore_class, loss);
    plan->has_ignore = o->has_ignore_class != 0;
    plan->ignore = plan->has_ignore ? o->ignore_class : 0;
    plan->top_k = o->top_k;
    plan->mean_abs_error = o->mean_absolute_error != 0;
    plan->binary_accuracy = o->binary_accuracy != 0;
    plan->threshold = o->binary_threshold != 0.0f ? o->binary_threshold
                      : o->has_binary_threshold ? 0.0f : 0.5f;
    return KILN_OK;
}

int kiln_metric_count(const kiln_loss_plan *plan)
{
    return (plan->top_k > 0) + plan->mean_abs_error + plan->binary_accuracy;
}

const char *kiln_metric_name(const kiln_loss_plan *plan, int c)
{
    switch (c) {
    case 0:
        return plan->top_k <= 0 ? NULL
               : plan->sparse   ? "sparse_top_k_categorical_accuracy"
                                : "top_k_categorical_accuracy";
    case 1: return plan->mean_abs_error ? "mean_absolute_error" : NULL;
    case 2: return plan->binary_accuracy ? "binary_accuracy" : NULL;
    default: return NULL;
    }
}

kiln_status kiln_metric_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                                const kiln_buffer *y, const kiln_buffer *labels,
                                kiln_buffer *metric, kiln_buffer *sums, int32_t n)
{
    const int64_t rows = (int64_t)n * plan->positions;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(y), kiln_arg_buffer(labels), kiln_arg_buffer(metric),
                            kiln_arg_int(rows), kiln_arg_int(plan->cols),
                            kiln_arg_int(plan->top_k), kiln_arg_float(plan->threshold),
                            kiln_arg_int(plan->has_ignore ? plan->ignore : -1));
    kiln_status st = kiln_run_per_row(dev, "metrics",
                                      plan->sparse ? "kiln_metrics_sparse" : "kiln_metrics_dense",
                                      (size_t)rows, (size_t)plan->cols, a);
    if (st != KILN_OK)
        return st;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(metric), kiln_arg_int(rows), kiln_arg_buffer(sums));
    return kiln_run1(dev, "metrics", "kiln_metrics_sum", 64, b);
}

void kiln_metrics_from_sums(const kiln_loss_plan *plan, const double *sums,
                            kiln_metrics *out)
{
    /* Nothing counted (every position ignored): the sums are 0, and so the means. */
    const double n = sums[KILN_SUM_COUNTED] > 0 ? sums[KILN_SUM_COUNTED] : 1.0;
    out->loss = sums[KILN_SUM_LOSS] / n;
    out->accuracy = plan->accuracy ? sums[KILN_SUM_CORRECT] / n : -1.0;
    out->top_k_accuracy = plan->top_k > 0 ? sums[KILN_SUM_TOP_K] / n : -1.0;
    out->mean_absolute_error = plan->mean_abs_error ? sums[KILN_SUM_ABS_ERROR] / n : -1.0;
    out->binary_accuracy = plan->binary_accuracy ? sums[KILN_SUM_BINARY] / n : -1.0;
}
