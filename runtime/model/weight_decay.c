/* Which trainable parameters weight decay applies to: the plan's runs of
 * the flat layout, so the optimizers decay them with no table per
 * parameter on the devices. */
#include "runtime/model/model.h"

#include <string.h>

/* Every trainable parameter decays unless the options exclude some. */
static int decays(const kiln_model *m, const kiln_param_spec *spec)
{
    return !m->plan.optimizer.exclude_vectors_from_weight_decay || spec->shape.rank > 1;
}

kiln_status kiln_model_plan_decay(kiln_model *m)
{
    kiln_decay_runs *d = &m->plan.decay;
    kiln_free(m->ctx, d->run);
    memset(d, 0, sizeof *d);
    if (m->plan.optimizer.weight_decay == 0.0f ||
        !m->plan.optimizer.exclude_vectors_from_weight_decay)
        return KILN_OK;   /* run NULL: all of them */
    int32_t most = 1;
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        most += m->graph.nodes[i].n_params;
    d->run = kiln_calloc(m->ctx, (size_t)most, sizeof *d->run);
    if (!d->run)
        return kiln_error_oom(m->ctx, "the weight decay runs", (size_t)most * sizeof *d->run);
    /* The trainable prefix in layer order; a parameter's run takes its
     * alignment padding too (zeros in parameters and gradients alike). */
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        for (int p = 0; p < node->n_params; p++) {
            const kiln_param_spec *spec = &node->params[p];
            if (spec->non_trainable || kiln_param_frozen(node, p) || !decays(m, spec))
                continue;
            const size_t begin = node->param_offset[p];
            const size_t size = (size_t)kiln_shape_size(&spec->shape);
            const size_t end = (begin + size + KILN_PARAM_ALIGN - 1) / KILN_PARAM_ALIGN *
                               KILN_PARAM_ALIGN;
            if (d->n > 0 && d->run[d->n - 1][1] == begin)
                d->run[d->n - 1][1] = end;
            else {
                d->run[d->n][0] = begin;
                d->run[d->n][1] = end;
                d->n++;
            }
        }
    }
    return KILN_OK;
}
