/* A model's outputs: which nodes they are, the loss and weight of each,
 * where each one's labels lie in a sample, and the metrics each reports. */
#include "runtime/model/loss.h"
#include "runtime/model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

kiln_status kiln_model_set_outputs(kiln_model *m, const kiln_node *outputs, int32_t n)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE,
                          "kiln_model_set_outputs: the model is already compiled");
    if (!outputs || n < 1 || n > KILN_MAX_MODEL_OUTPUTS)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_set_outputs: %d outputs%s; a model has 1 to %d",
                          (int)n, outputs ? "" : " (outputs is NULL)", KILN_MAX_MODEL_OUTPUTS);
    for (int32_t k = 0; k < n; k++) {
        const kiln_node node = outputs[k];
        if (node < 0 || node >= m->graph.n_nodes)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "kiln_model_set_outputs: output %d is node %d, which is not in "
                              "the model (it has %d nodes)", (int)k, (int)node,
                              (int)m->graph.n_nodes);
        for (int32_t j = 0; j < k; j++)
            if (outputs[j] == node)
                return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                                  "kiln_model_set_outputs: outputs %d and %d are both layer "
                                  "'%s'; each output is a different node", (int)j, (int)k,
                                  m->graph.nodes[node].name);
    }
    memcpy(m->graph.outputs, outputs, (size_t)n * sizeof *outputs);
    m->graph.n_outputs = n;
    m->graph.output = outputs[0];
    return KILN_OK;
}

int32_t kiln_model_output_index(const kiln_model *m, kiln_node i)
{
    for (int32_t k = 0; k < m->graph.n_outputs; k++)
        if (m->graph.outputs[k] == i)
            return k;
    return -1;
}

const kiln_loss_plan *kiln_model_output_plan(const kiln_model *m, kiln_node i)
{
    const int32_t k = kiln_model_output_index(m, i);
    return k < 0 ? NULL : &m->plan.heads[k];
}

/* What several outputs do not support, before any plan is made: options
 * whose sums have no per-output slots, an output another layer reads
 * (its gradient would mix the loss's and the layer's). */
static kiln_status check_supported(kiln_model *m, const kiln_compile_options *o)
{
    if (o->top_k || o->mean_absolute_error || o->binary_accuracy || o->has_ignore_class)
        return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED,
                          "kiln_model_compile: top_k, mean_absolute_error, binary_accuracy and "
                          "ignore_class are for a model of one output; this one has several "
                          "outputs (%d)", (int)m->graph.n_outputs);
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        for (int j = 0; m->graph.nodes[i].on_path && j < m->graph.nodes[i].n_inputs; j++)
            if (kiln_model_output_index(m, m->graph.nodes[i].inputs[j]) >= 0)
                return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED,
                                  "kiln_model_compile: output '%s' feeds layer '%s'; of a "
                                  "model of several outputs, an output may not feed another "
                                  "layer", m->graph.nodes[m->graph.nodes[i].inputs[j]].name,
                                  m->graph.nodes[i].name);
    return KILN_OK;
}

/* Keras's default weight is 1; has_weight asks for 0 itself. */
static kiln_status take_weight(kiln_model *m, int32_t k, const kiln_output_loss *given)
{
    const float w = given->weight;
    if (!isfinite(w) || w < 0.0f)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: the loss weight of output %d ('%s') is %g; it "
                          "must be finite and >= 0", (int)k, m->graph.nodes[m->graph.outputs[k]].name,
                          (double)w);
    m->plan.head_weight[k] = w != 0.0f ? w : given->has_weight ? 0.0f : 1.0f;
    return KILN_OK;
}

/* The losses compile was given fit the model's outputs: kiln_compile_options'
 * outputs, one per output, or for a model of one output its loss. */
static kiln_status check_losses(kiln_model *m, const kiln_compile_options *o)
{
    if (m->graph.n_outputs == 1) {
        if (o->n_outputs > 1 || (o->n_outputs == 1 && !o->outputs) || o->n_outputs < 0)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "kiln_model_compile: losses for %d outputs given, but the model "
                              "has 1 output ('%s')", (int)o->n_outputs,
                              m->graph.nodes[m->graph.outputs[0]].name);
        if (o->n_outputs == 1 && o->loss != KILN_LOSS_NONE)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "kiln_model_compile: set loss or outputs, not both");
        return KILN_OK;
    }
    if (o->n_outputs != m->graph.n_outputs || !o->outputs)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: the model has %d outputs (the first '%s') but "
                          "kiln_compile_options.outputs holds %d losses; give one per output",
                          (int)m->graph.n_outputs, m->graph.nodes[m->graph.outputs[0]].name,
                          o->outputs ? (int)o->n_outputs : 0);
    if (o->loss != KILN_LOSS_NONE || o->label_smoothing != 0.0f)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: a model of several outputs takes its losses "
                          "(and label smoothing) from kiln_compile_options.outputs; leave "
                          "loss 0 and label_smoothing 0 (it is %g)", (double)o->label_smoothing);
    return check_supported(m, o);
}

kiln_status kiln_model_plan_outputs(kiln_model *m, const kiln_compile_options *o)
{
    kiln_status st = check_losses(m, o);
    const int several = m->graph.n_outputs > 1;
    int64_t words = 0;
    for (int32_t k = 0; k < m->graph.n_outputs && st == KILN_OK; k++) {
        kiln_loss_plan *plan = &m->plan.heads[k];
        kiln_output_loss given = {.loss = o->loss};
        kiln_diag why;
        if (o->n_outputs &&
            kiln_options_take_at(&given, sizeof given, o->outputs, (size_t)k,
                                 offsetof(kiln_output_loss, has_weight),
                                 "kiln_compile_options.outputs", &why) != KILN_OK)
            return kiln_error(m->ctx, why.status, "kiln_model_compile: %s", why.message);
        st = kiln_loss_plan_make_for(m, m->graph.outputs[k], given.loss, !o->no_accuracy, plan);
        if (st == KILN_OK)
            st = kiln_loss_take_smoothing(m, k, o->n_outputs ? "outputs[].label_smoothing"
                                                             : "label_smoothing",
                                          o->n_outputs ? given.label_smoothing
                                                       : o->label_smoothing, plan);
        m->plan.head_weight[k] = 1.0f;
        if (st == KILN_OK && o->n_outputs)
            st = take_weight(m, k, &given);
        plan->sums_at = several ? KILN_SUM_HEADS + KILN_SUM_HEAD_SLOTS * k : 0;
        plan->head_scale = several ? m->plan.head_weight[k] / (float)plan->positions : 1.0f;
        m->plan.head_label_offset[k] = words;
        words += (int64_t)(kiln_loss_label_bytes(plan) / 4);
    }
    m->plan.label_words = words;
    /* One output's weight scales its loss as in Keras; only 1 is kept. */
    if (st == KILN_OK && !several && m->plan.head_weight[0] != 1.0f)
        st = kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED,
                        "kiln_model_compile: a loss weight other than 1 (%g) on a model "
                        "of one output", (double)m->plan.head_weight[0]);
    if (st == KILN_OK && !several)
        st = kiln_metric_plan_make(m, o);
    return st;
}

double kiln_model_counted(const kiln_model *m, const void *labels, int32_t n)
{
    return m->graph.n_outputs == 1 ? kiln_loss_counted(&m->plan.heads[0], labels, n) : (double)n;
}

const kiln_loss_plan *kiln_model_totals(const kiln_model *m)
{
    static const kiln_loss_plan loss_only;
    return m->graph.n_outputs == 1 ? &m->plan.heads[0] : &loss_only;
}

void kiln_model_metrics(const kiln_model *m, const double *sums, kiln_metrics *out)
{
    kiln_metrics_from_sums(kiln_model_totals(m), sums, out);
    kiln_model_output_metrics(m, sums, out);
}

void kiln_model_output_metrics(const kiln_model *m, const double *sums, kiln_metrics *out)
{
    out->n_outputs = kiln_model_outputs_apart(m);
    for (int32_t k = 0; k < out->n_outputs; k++) {
        const double *s = sums + KILN_SUM_HEADS + KILN_SUM_HEAD_SLOTS * k;
        /* A head's slots mirror the model's: loss, correct, samples, ..., counted. */
        const double n = s[KILN_SUM_COUNTED] > 0 ? s[KILN_SUM_COUNTED] : 1.0;
        kiln_output_metrics *o = &out->outputs[k];
        snprintf(o->name, sizeof o->name, "%s", m->graph.nodes[m->graph.outputs[k]].name);
        o->loss = s[KILN_SUM_LOSS] / n;
        o->accuracy = m->plan.heads[k].accuracy ? s[KILN_SUM_CORRECT] / n : -1.0;
    }
}
