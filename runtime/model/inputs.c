/* A model's Inputs: which nodes they are, where each lies in a sample, and
 * the host checks a batch of their values gets. */
#include "runtime/model/model.h"

#include <math.h>

int kiln_node_is_input(const kiln_model *m, kiln_node i)
{
    return m->graph.nodes[i].ops == &kiln_layer_input;
}

kiln_status kiln_model_find_inputs(kiln_model *m)
{
    kiln_context *ctx = m->ctx;
    m->graph.n_inputs = 0;
    m->graph.sample_size = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        if (!kiln_node_is_input(m, i))
            continue;
        if (m->graph.n_inputs == KILN_MAX_MODEL_INPUTS)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_compile: input '%s' is "
                              "one more than the %d Inputs a model may have",
                              m->graph.nodes[i].name, KILN_MAX_MODEL_INPUTS);
        if (kiln_model_output_index(m, i) >= 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: input "
                              "'%s' is one of the outputs; an output must be a layer fed by "
                              "an Input", m->graph.nodes[i].name);
        if (!m->graph.nodes[i].on_path || i == m->graph.output)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: input "
                              "'%s' does not feed the output '%s'; every Input must reach it",
                              m->graph.nodes[i].name, m->graph.nodes[m->graph.output].name);
        const int32_t k = m->graph.n_inputs++;
        m->graph.inputs[k] = i;
        m->graph.input_offset[k] = m->graph.sample_size;
        m->graph.ids[k] = (kiln_id_range){
            .offset = m->graph.sample_size, .size = kiln_node_size(m, i), .input = NULL};
        m->graph.sample_size += kiln_node_size(m, i);
    }
    m->graph.input = m->graph.n_inputs ? m->graph.inputs[0] : -1;
    m->graph.input_ints = m->graph.n_inputs && m->graph.nodes[m->graph.input].ints;
    if (m->graph.n_inputs == 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: the output "
                          "'%s' must be a layer fed by an Input",
                          m->graph.nodes[m->graph.output].name);
    /* Ids are checked on the host against the smallest table they index (of
     * the layers that run: the others never see them). Id-reading layers
     * read an Input directly (graph.c checks it). */
    for (int32_t k = 0; k < m->graph.n_inputs; k++) {
        kiln_id_range *r = &m->graph.ids[k];
        r->input = m->graph.n_inputs > 1 ? m->graph.nodes[m->graph.inputs[k]].name : NULL;
        for (kiln_node i = 0; m->graph.nodes[m->graph.inputs[k]].ints && i < m->graph.n_nodes;
             i++) {
            const kiln_node_rec *node = &m->graph.nodes[i];
            if (!node->on_path || !node->ops->id_limit || node->inputs[0] != m->graph.inputs[k])
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
    const kiln_status st = kiln_check_id_ranges(m->ctx, call, m->graph.ids, m->graph.n_inputs, x,
                                                count, m->graph.sample_size, first_sample);
    for (int32_t k = 0; st == KILN_OK && finite && k < m->graph.n_inputs; k++) {
        if (m->graph.nodes[m->graph.inputs[k]].ints)
            continue;
        const int64_t size = m->graph.ids[k].size;
        for (int64_t i = 0; i < count; i++) {
            const float *v = x + i * m->graph.sample_size + m->graph.input_offset[k];
            for (int64_t e = 0; e < size; e++) {
                if (isfinite(v[e]))
                    continue;
                if (m->graph.n_inputs == 1)
                    return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld "
                                      "of its features is not finite", call,
                                      (long long)(first_sample + i), (long long)e);
                return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld of "
                                  "input '%s' is not finite", call,
                                  (long long)(first_sample + i), (long long)e,
                                  m->graph.nodes[m->graph.inputs[k]].name);
            }
        }
    }
    return st;
}
