/* LoRA: kiln_model_enable_lora turns a layer's kernel into a frozen base
 * plus trained low-rank adapters (the layer's infer lays them out), and the
 * merge that files and exports use. */
#include "runtime/model/lora.h"
#include "base/options.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static kiln_status enable_entered(kiln_model *m, const char *call, const char *layer,
                                  const kiln_lora_options *o)
{
    const int32_t rank = o->rank;
    const float alpha = o->alpha;
    if (!layer)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: layer is NULL", call);
    if (m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: the model is compiled; enable LoRA "
                          "before kiln_model_compile", call);
    if (rank <= 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: rank must be > 0, got %d",
                          call, (int)rank);
    if (!(alpha >= 0.0f) || isinf(alpha))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: alpha must be finite and "
                          "> 0 (0: the rank, Keras's default), got %g", call, (double)alpha);
    kiln_node i = 0;
    while (i < m->graph.n_nodes && strcmp(m->graph.nodes[i].name, layer) != 0)
        i++;
    if (i == m->graph.n_nodes)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: the model has no layer "
                          "'%s'", call, layer);
    kiln_node_rec *node = &m->graph.nodes[i];
    if (!node->ops->enable_lora)
        return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED, "%s: layer '%s' (%s) has no LoRA; "
                          "it adapts Dense and MultiHeadAttention layers", call, layer,
                          node->ops->kind);
    for (int p = 0; p < node->n_params; p++)
        if (node->params[p].adapter)
            return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: layer '%s' has LoRA already "
                              "(as in Keras, once per layer)", call, layer);
    /* Kept for model files, which name the targets again on load. */
    if (o->targets && strlen(o->targets) >= sizeof node->lora_targets)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: layer '%s': targets "
                          "'%.40s...' is %zu characters; a list of %s's targets is shorter "
                          "than %zu", call, layer, o->targets, strlen(o->targets),
                          node->ops->kind, sizeof node->lora_targets);
    /* Infer again on the same inputs: the kernel freezes, the adapters
     * join the parameters after the layer's own (imported initial values,
     * by index, keep theirs). */
    kiln_layer_build b;
    memset(&b, 0, sizeof b);
    kiln_shape in[KILN_MAX_INPUTS];
    for (int k = 0; k < node->n_inputs; k++)
        in[k] = m->graph.nodes[node->inputs[k]].shape;
    b.in = in;
    b.n_in = node->n_inputs;
    const float scale_alpha = alpha > 0.0f ? alpha : (float)rank;
    kiln_status st = node->ops->enable_lora(node->config, rank, scale_alpha, o->targets, b.error,
                                            sizeof b.error);
    if (st == KILN_OK)
        st = node->ops->infer(node->config, &b);
    if (st != KILN_OK)
        return kiln_error(m->ctx, st, "%s: layer '%s': %s", call, layer, b.error);
    memcpy(node->params, b.params, sizeof node->params);
    node->n_params = b.n_params;
    node->lora_rank = rank;
    node->lora_alpha = scale_alpha;
    snprintf(node->lora_targets, sizeof node->lora_targets, "%s", o->targets ? o->targets : "");
    return KILN_OK;
}

kiln_status kiln_model_enable_lora(kiln_model *m, const char *layer, int32_t rank, float alpha)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_enable_lora");
    if (st == KILN_OK) {
        const kiln_lora_options o = {.struct_size = sizeof o, .rank = rank, .alpha = alpha};
        st = enable_entered(m, "kiln_model_enable_lora", layer, &o);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_model_enable_lora_with(kiln_model *m, const char *layer,
                                        const kiln_lora_options *options)
{
    const char *call = "kiln_model_enable_lora_with";
    /* No default rank (Keras's enable_lora has none either): NULL or a
     * struct too short to hold it is refused. */
    const size_t least = offsetof(kiln_lora_options, rank) + sizeof(int32_t);
    kiln_lora_options o;
    kiln_diag why;
    kiln_status st = kiln_model_enter(m, call);
    if (st != KILN_OK)
        return st;
    if (!options)
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: options is NULL; LoRA needs "
                        "at least a rank", call);
    else if ((st = kiln_options_take(&o, sizeof o, options, least, "kiln_lora_options",
                                     &why)) != KILN_OK)
        st = kiln_error(m->ctx, why.status, "%s: %s", call, why.message);
    else
        st = enable_entered(m, call, layer, &o);
    kiln_model_leave(m);
    return st;
}

void kiln_model_merge_adapters(const kiln_model *m, float *flat)
{
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!node->ops->merge_adapters)
            continue;
        float *params[KILN_MAX_PARAMS];
        for (int p = 0; p < node->n_params; p++)
            params[p] = flat + node->param_offset[p];
        node->ops->merge_adapters(node->config, params);
    }
}

int kiln_node_param_is_adapter(const kiln_model *m, kiln_node i, int p)
{
    return m->graph.nodes[i].params[p].adapter;
}
