/* kiln_model_summary: the Keras-style table of a model's layers, and a
 * compiled model's loss and optimizer. */
#include "runtime/context/context.h"
#include "runtime/context/text.h"
#include "runtime/model/loss.h"
#include "runtime/model/model.h"

#include <stdio.h>
#include <string.h>

static int64_t node_params(const kiln_node_rec *node, int trainable_only)
{
    int64_t n = 0;
    for (int p = 0; p < node->n_params; p++)
        if (!trainable_only || (!node->params[p].non_trainable && !kiln_param_frozen(node, p)))
            n += kiln_shape_size(&node->params[p].shape);
    return n;
}

/* What compile chose, in the words `kiln summary` printed before the
 * summary carried it (scripts read these lines). */
static void compile_settings(const kiln_model *m, kiln_text *t)
{
    for (int32_t k = 0; k < kiln_model_outputs_apart(m); k++)
        kiln_text_printf(t, "Loss of output '%s': %s x %g%s\n",
                         m->graph.nodes[m->graph.outputs[k]].name,
                         kiln_loss_name(m->plan.heads[k].loss), (double)m->plan.head_weight[k],
                         m->plan.heads[k].accuracy ? " (with accuracy)" : "");
    if (!kiln_model_outputs_apart(m))
        kiln_text_printf(t, "Loss: %s%s\n", kiln_loss_name(m->plan.heads[0].loss),
                         m->plan.heads[0].accuracy ? " (with accuracy)" : "");
    const kiln_optimizer_options *o = &m->plan.optimizer;
    static const char *const kinds[] = {"adam", "sgd", "adamw", "rmsprop", "adagrad"};
    kiln_text_printf(t, "Optimizer: %s, learning rate %g", kinds[o->kind],
                     (double)o->learning_rate);
    if (o->kind == KILN_OPTIMIZER_RMSPROP)
        kiln_text_printf(t, ", rho %g%s", (double)o->rho, o->centered ? ", centered" : "");
    if (o->kind == KILN_OPTIMIZER_ADAGRAD)
        kiln_text_printf(t, ", initial accumulator %g", (double)o->initial_accumulator_value);
    if ((o->kind == KILN_OPTIMIZER_SGD || o->kind == KILN_OPTIMIZER_RMSPROP) &&
        o->momentum > 0.0f)
        kiln_text_printf(t, ", momentum %g%s", (double)o->momentum,
                         o->nesterov ? " (Nesterov)" : "");
    const char *clip = o->clipnorm > 0.0f ? "clipnorm" : o->clipvalue > 0.0f ? "clipvalue"
                     : o->global_clipnorm > 0.0f ? "global_clipnorm" : NULL;
    if (clip)
        kiln_text_printf(t, ", %s %g", clip,
                         (double)(o->clipnorm + o->clipvalue + o->global_clipnorm));
    if (o->weight_decay > 0.0f)
        kiln_text_printf(t, ", weight decay %g%s", (double)o->weight_decay,
                         o->exclude_vectors_from_weight_decay ? " (not of vectors)" : "");
    if (o->use_ema)
        kiln_text_printf(t, ", weights' moving average (momentum %g)", (double)o->ema_momentum);
    if (o->use_ema && o->ema_overwrite_frequency > 0)
        kiln_text_printf(t, ", averages written to the weights every %d updates",
                         (int)o->ema_overwrite_frequency);
    if (m->plan.accumulation_steps > 1)
        kiln_text_printf(t, ", gradients accumulated over %d steps",
                         (int)m->plan.accumulation_steps);
    kiln_text_printf(t, "\n");
    if (m->plan.half_activations)
        kiln_text_printf(t, "Activations: half precision between forward and backward\n");
}

static kiln_status summary(const kiln_model *m, char *text, size_t size, size_t *length)
{
    if (!text && size > 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_summary: text is NULL but size is %zu", size);
    if (m->graph.build_status != KILN_OK)
        return kiln_error(m->ctx, m->graph.build_status, "kiln_model_summary: the model failed to "
                          "build: %s", m->graph.build_error);
    kiln_text t = {.text = text, .size = size};
    if (size > 0)
        text[0] = '\0';
    const char *rule = "============================================================"
                       "====================================";
    kiln_text_printf(&t, "%-50s %-20s %11s  %s\n", "Layer (type)", "Output Shape", "Param #",
        "Connected to");
    kiln_text_printf(&t, "%s\n", rule);
    int64_t total = 0, trainable = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        char label[160], shape[64] = "(None", count[32];
        snprintf(label, sizeof label, "%s (%s)", node->name, node->ops->kind);
        for (int d = 0; d < node->shape.rank; d++) {
            const size_t used = strlen(shape);
            snprintf(shape + used, sizeof shape - used, ", %d", (int)node->shape.dims[d]);
        }
        strcat(shape, ")");
        const int64_t params = node_params(node, 0);
        total += params;
        trainable += node_params(node, 1);
        kiln_text_printf(&t, "%-50s %-20s %11s", label, shape,
                         kiln_grouped(params, count, sizeof count));
        for (int k = 0; k < node->n_inputs; k++)
            kiln_text_printf(&t, "%s%s", k ? ", " : "  ", m->graph.nodes[node->inputs[k]].name);
        kiln_text_printf(&t, "\n");
    }
    char a[32], b[32], c[32];
    kiln_text_printf(&t, "%s\nTotal params: %s\nTrainable params: %s\nNon-trainable params: %s\n",
                     rule, kiln_grouped(total, a, sizeof a), kiln_grouped(trainable, b, sizeof b),
                     kiln_grouped(total - trainable, c, sizeof c));
    if (m->plan.compiled)
        compile_settings(m, &t);
    if (length)
        *length = t.length;
    return KILN_OK;
}

kiln_status kiln_model_summary(const kiln_model *m, char *text, size_t size, size_t *length)
{
    if (length)
        *length = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    int entered;
    kiln_status st = kiln_model_enter_reading(m, "kiln_model_summary", &entered);
    if (st == KILN_OK)
        st = summary(m, text, size, length);
    kiln_model_leave_reading(m, entered);
    return st;
}
