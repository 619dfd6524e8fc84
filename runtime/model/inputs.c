/* A model's Inputs: which nodes they are, where each lies in a sample, and
 * the host checks a batch of their values gets. */
#include "runtime/model/model.h"

#include <math.h>

int kiln_node_is_input(const kiln_model *m, kiln_node i)
{
    return m->nodes[i].ops == &kiln_layer_input;
}

kiln_status kiln_model_find_inputs(kiln_model *m)
{
    kiln_context *ctx = m->ctx;
    m->n_inputs = 0;
    m->sample_size = 0;
    for (kiln_node i = 0; i < m->n_nodes; i++) {
        if (!kiln_node_is_input(m, i))
            continue;
        if (m->n_inputs == KILN_MAX_MODEL_INPUTS)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_compile: input '%s' is "
                              "one more than the %d Inputs a model may have",
                              m->nodes[i].name, KILN_MAX_MODEL_INPUTS);
        if (kiln_model_output_index(m, i) >= 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: input "
                              "'%s' is one of the outputs; an output must be a layer fed by "
                              "an Input", m->nodes[i].name);
        if (!m->nodes[i].on_path || i == m->output)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: input "
                              "'%s' does not feed the output '%s'; every Input must reach it",
                              m->nodes[i].name, m->nodes[m->output].name);
        const int32_t k = m->n_inputs++;
        m->inputs[k] = i;
        m->input_offset[k] = m->sample_size;
        m->ids[k] = (kiln_id_range){.offset = m->sample_size, .size = kiln_node_size(m, i),
                                    .input = NULL};
        m->sample_size += kiln_node_size(m, i);
    }
    m->input = m->n_inputs ? m->inputs[0] : -1;
    m->input_ints = m->n_inputs && m->nodes[m->input].ints;
    if (m->n_inputs == 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: the output "
                          "'%s' must be a layer fed by an Input", m->nodes[m->output].name);
    /* Ids are checked on the host against the smallest table they index (of
     * the layers that run: the others never see them). Id-reading layers
     * read an Input directly (graph.c checks it). */
    for (int32_t k = 0; k < m->n_inputs; k++) {
        kiln_id_range *r = &m->ids[k];
        r->input = m->n_inputs > 1 ? m->nodes[m->inputs[k]].name : NULL;
        for (kiln_node i = 0; m->nodes[m->inputs[k]].ints && i < m->n_nodes; i++) {
            const kiln_node_rec *node = &m->nodes[i];
            if (!node->on_path || !node->ops->id_limit || node->inputs[0] != m->inputs[k])
                continue;
            const int32_t limit = node->ops->id_limit(node->config);
            if (r->limit == 0 || limit < r->limit) {
                r->limit = limit;
                r->layer = node->name;
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln_model_check_features(const kiln_model *m, const char *call, const float *x,
                                      int64_t count, int64_t first_sample, int finite)
{
    const kiln_status st = kiln_check_id_ranges(m->ctx, call, m->ids, m->n_inputs, x, count,
                                                m->sample_size, first_sample);
    for (int32_t k = 0; st == KILN_OK && finite && k < m->n_inputs; k++) {
        if (m->nodes[m->inputs[k]].ints)
            continue;
        const int64_t size = m->ids[k].size;
        for (int64_t i = 0; i < count; i++) {
            const float *v = x + i * m->sample_size + m->input_offset[k];
            for (int64_t e = 0; e < size; e++) {
                if (isfinite(v[e]))
                    continue;
                if (m->n_inputs == 1)
                    return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld "
                                      "of its features is not finite", call,
                                      (long long)(first_sample + i), (long long)e);
                return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld of "
                                  "input '%s' is not finite", call,
                                  (long long)(first_sample + i), (long long)e,
                                  m->nodes[m->inputs[k]].name);
            }
        }
    }
    return st;
}
