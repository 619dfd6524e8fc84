/* Pipeline stages: from placements, or the split of the layers into
 * contiguous stages of least maximal cost that fits every device's budget
 * (exact dynamic programme over cut points; models have at most a few
 * hundred nodes). */
#include "runtime/parallel/partition.h"

#include "runtime/model/optimizer.h"

#include <stdio.h>
#include <string.h>

uint64_t kiln_node_cost(const kiln_model *m, kiln_node i)
{
    const kiln_node_rec *node = &m->graph.nodes[i];
    if (!node->on_path || kiln_node_is_input(m, i))
        return 0;
    /* FLOPs, plus one per output element so that cheap layers (pooling,
     * Flatten, Add) still weigh something. */
    uint64_t cost = (uint64_t)kiln_shape_size(&node->shape);
    if (node->ops->flops)
        cost += node->ops->flops(node->config, &m->graph.nodes[node->inputs[0]].shape);
    return cost;
}

static uint64_t node_param_floats(const kiln_node_rec *node)
{
    uint64_t n = 0;
    for (int p = 0; p < node->n_params; p++)
        n += ((uint64_t)kiln_shape_size(&node->params[p].shape) + 15) / 16 * 16;
    return n;
}

uint64_t kiln_span_state_bytes(const kiln_model *m, kiln_node first, kiln_node last,
                               int accumulate)
{
    const uint64_t copies = 2 + (uint64_t)kiln_optimizer_slot_count(&m->plan.optimizer) +
                            (accumulate ? 1 : 0);
    uint64_t floats = 0;
    for (kiln_node i = first; i <= last; i++)
        floats += node_param_floats(&m->graph.nodes[i]);
    return floats * copies * sizeof(float);
}

static uint64_t device_budget(const kiln_model *m, int32_t d)
{
    if (m->placement.memory_budget)
        return m->placement.memory_budget;
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    kiln_device_describe(m->ctx->devices[d], &info);
    return info.global_memory_bytes;
}

/* Where each node's parameters start in the trainable and non-trainable
 * parts of the flat layout (laid out in node order), for the spans. */
static void fill_spans(const kiln_model *m, kiln_stage_plan *st, int32_t n, int accumulate)
{
    for (int32_t k = 0; k < n; k++) {
        kiln_stage_span *sp = &st[k].span;
        size_t t = 0, u = m->plan.n_trainable_floats, f = u + m->plan.n_state_floats;
        for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
            if (i == sp->first) {
                sp->trainable_begin = t;
                sp->state_begin = u;
                sp->frozen_begin = f;
            }
            const kiln_node_rec *node = &m->graph.nodes[i];
            for (int p = 0; p < node->n_params; p++) {
                const size_t size =
                    ((size_t)kiln_shape_size(&node->params[p].shape) + 15) / 16 * 16;
                if (node->params[p].constant)
                    f = node->param_offset[p] + size;
                else if (node->params[p].non_trainable)
                    u = node->param_offset[p] + size;
                else if (node->frozen)
                    f = node->param_offset[p] + size;
                else
                    t = node->param_offset[p] + size;
            }
            if (i == sp->last) {
                sp->trainable_end = t;
                sp->state_end = u;
                sp->frozen_end = f;
            }
        }
        sp->accumulate = accumulate;
        st[k].cost = 0;
        for (kiln_node i = sp->first; i <= sp->last; i++)
            st[k].cost += kiln_node_cost(m, i);
        st[k].state_bytes = kiln_span_state_bytes(m, sp->first, sp->last, accumulate);
        st[k].budget = device_budget(m, st[k].device);
    }
}

static int32_t count_layers(const kiln_model *m)
{
    int32_t n = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        n += m->graph.nodes[i].on_path && !kiln_node_is_input(m, i);
    return n;
}

/* Stages from kiln_model_place: runs of one device along the path. */
static kiln_status from_placements(const kiln_model *m, kiln_stage_plan *st, int32_t *n_out)
{
    kiln_context *ctx = m->ctx;
    int32_t dev = -1, n = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes && dev < 0; i++)
        if (m->graph.nodes[i].on_path && m->graph.nodes[i].device >= 0)
            dev = m->graph.nodes[i].device;
    kiln_node last_layer = -1;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!node->on_path)
            continue;
        if (node->device >= 0)
            dev = node->device;
        if (n == 0 || st[n - 1].device != dev) {
            for (int32_t k = 0; k < n; k++)
                if (st[k].device == dev)
                    return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                                      "kiln_model_compile: layer '%s' is placed on device %d, "
                                      "but device %d's stage ended before layer '%s': each "
                                      "device's layers must be one contiguous range",
                                      node->name, (int)dev, (int)dev,
                                      m->graph.nodes[st[n - 1].span.first].name);
            if (n > 0 && last_layer < st[n - 1].span.first)
                return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                                  "kiln_model_compile: the stage on device %d holds only the "
                                  "input '%s'; place it with the first layer",
                                  (int)st[n - 1].device, m->graph.nodes[st[n - 1].span.first].name);
            if (n > 0)
                st[n - 1].span.last = i - 1;
            st[n].device = dev;
            st[n].span.first = n == 0 ? 0 : i;
            n++;
        }
        if (!kiln_node_is_input(m, i))
            last_layer = i;
    }
    st[n - 1].span.last = m->graph.n_nodes - 1;
    if (m->placement.pipeline_stages && m->placement.pipeline_stages != n)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: pipeline_stages is %d but the placements make "
                          "%d stage(s)", (int)m->placement.pipeline_stages, (int)n);
    *n_out = n;
    return KILN_OK;
}

/* The error for a model that no split fits: the largest layer alone, or
 * the whole. */
static kiln_status no_fit(const kiln_model *m, int32_t n_stages, int accumulate)
{
    uint64_t most = 0, total = kiln_span_state_bytes(m, 0, m->graph.n_nodes - 1, accumulate);
    kiln_node worst = m->graph.input;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        const uint64_t b = kiln_span_state_bytes(m, i, i, accumulate);
        if (b > most) {
            most = b;
            worst = i;
        }
    }
    int32_t roomiest = 0;
    for (int32_t d = 1; d < n_stages; d++)
        if (device_budget(m, d) > device_budget(m, roomiest))
            roomiest = d;
    const uint64_t room = device_budget(m, roomiest);
    const char *what = m->placement.memory_budget ? "its budget" : "its global memory";
    if (most > room)
        return kiln_error(m->ctx, KILN_ERROR_OUT_OF_MEMORY,
                          "kiln_model_compile: layer '%s' alone needs %llu bytes of parameters, "
                          "gradients and optimizer state; the roomiest device, %s, has %llu "
                          "(%s)", m->graph.nodes[worst].name, (unsigned long long)most,
                          kiln_device_label(m->ctx->devices[roomiest]),
                          (unsigned long long)room, what);
    return kiln_error(m->ctx, KILN_ERROR_OUT_OF_MEMORY,
                      "kiln_model_compile: the model needs %llu bytes of parameters, gradients "
                      "and optimizer state, and no split into %d contiguous stages fits the "
                      "devices (%s has %llu, %s)", (unsigned long long)total, (int)n_stages,
                      kiln_device_label(m->ctx->devices[roomiest]), (unsigned long long)room,
                      what);
}

/* The least-maximal-cost split of the path into n stages that fit. */
static kiln_status balanced(const kiln_model *m, int32_t n, int accumulate, kiln_stage_plan *st)
{
    kiln_context *ctx = m->ctx;
    int32_t L = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        L += m->graph.nodes[i].on_path;
    kiln_node *item = kiln_calloc(ctx, (size_t)L + 1, sizeof *item);
    uint64_t *best = kiln_calloc(ctx, (size_t)(n + 1) * (size_t)(L + 1), sizeof *best);
    int32_t *cut = kiln_calloc(ctx, (size_t)(n + 1) * (size_t)(L + 1), sizeof *cut);
    uint64_t *budget = kiln_calloc(ctx, (size_t)n, sizeof *budget);
    if (!item || !best || !cut || !budget) {
        kiln_free(ctx, item);
        kiln_free(ctx, best);
        kiln_free(ctx, cut);
        kiln_free(ctx, budget);
        return kiln_error_oom(ctx, "the stage partition", (size_t)n * (size_t)L * 12);
    }
    L = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].on_path)
            item[L++] = i;
    item[L] = m->graph.n_nodes;
    for (int32_t k = 0; k < n; k++)
        budget[k] = device_budget(m, k);
    const uint64_t none = UINT64_MAX;
#define BEST(k, i) best[(size_t)(k) * (size_t)(L + 1) + (size_t)(i)]
#define CUT(k, i) cut[(size_t)(k) * (size_t)(L + 1) + (size_t)(i)]
    for (size_t i = 0; i < (size_t)(n + 1) * (size_t)(L + 1); i++)
        best[i] = none;
    BEST(0, 0) = 0;
    /* Stage k takes items [j, i): nodes item[j] (0 for the first) to item[i] - 1. */
    for (int32_t k = 1; k <= n; k++) {
        for (int32_t i = k + 1; i <= L; i++) {
            if (k == n && i != L)
                continue;
            for (int32_t j = k == 1 ? 0 : k; j < i; j++) {
                if (BEST(k - 1, j) == none || (k == 1) != (j == 0) || (j == 0 && i < 2))
                    continue;
                const kiln_node first = j == 0 ? 0 : item[j];
                const kiln_node last = i == L ? m->graph.n_nodes - 1 : item[i] - 1;
                if (kiln_span_state_bytes(m, first, last, accumulate) > budget[k - 1])
                    continue;
                uint64_t cost = 0;
                for (kiln_node x = first; x <= last; x++)
                    cost += kiln_node_cost(m, x);
                const uint64_t worst = cost > BEST(k - 1, j) ? cost : BEST(k - 1, j);
                if (worst < BEST(k, i)) {
                    BEST(k, i) = worst;
                    CUT(k, i) = j;
                }
            }
        }
    }
    kiln_status status = KILN_OK;
    if (BEST(n, L) == none) {
        status = no_fit(m, n, accumulate);
    } else {
        for (int32_t k = n, i = L; k >= 1; k--) {
            const int32_t j = CUT(k, i);
            st[k - 1].device = k - 1;
            st[k - 1].span.first = j == 0 ? 0 : item[j];
            st[k - 1].span.last = i == L ? m->graph.n_nodes - 1 : item[i] - 1;
            i = j;
        }
    }
#undef BEST
#undef CUT
    kiln_free(ctx, item);
    kiln_free(ctx, best);
    kiln_free(ctx, cut);
    kiln_free(ctx, budget);
    return status;
}

kiln_status kiln_partition(const kiln_model *m, int accumulate, kiln_stage_plan **stages,
                           int32_t *n_stages)
{
    kiln_context *ctx = m->ctx;
    *stages = NULL;
    *n_stages = 0;
    const int32_t layers = count_layers(m);
    int32_t n = m->placement.pipeline_stages ? m->placement.pipeline_stages : ctx->n_devices;
    if (m->placement.pipeline_stages < 0 || n > ctx->n_devices)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: pipeline_stages is %d; the context has %d "
                          "device(s)", (int)m->placement.pipeline_stages, (int)ctx->n_devices);
    if (!m->graph.placed && n > layers)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %d pipeline stages asked for, but the model has "
                          "only %d layer(s) to split", (int)n, (int)layers);
    kiln_stage_plan *st = kiln_calloc(ctx, (size_t)ctx->n_devices, sizeof *st);
    if (!st)
        return kiln_error_oom(ctx, "the stage plan", (size_t)ctx->n_devices * sizeof *st);
    kiln_status status =
        m->graph.placed ? from_placements(m, st, &n) : balanced(m, n, accumulate, st);
    if (status == KILN_OK)
        fill_spans(m, st, n, accumulate);
    for (int32_t k = 0; status == KILN_OK && k < n; k++)
        if (st[k].state_bytes > st[k].budget)
            status = kiln_error(
                ctx, KILN_ERROR_OUT_OF_MEMORY,
                "kiln_model_compile: stage %d (layers '%s' to '%s') needs %llu "
                "bytes of parameters, gradients and optimizer state on %s, "
                "which has %llu (%s)",
                (int)k, m->graph.nodes[st[k].span.first].name, m->graph.nodes[st[k].span.last].name,
                (unsigned long long)st[k].state_bytes,
                kiln_device_label(ctx->devices[st[k].device]), (unsigned long long)st[k].budget,
                m->placement.memory_budget ? "its budget" : "its global memory");
    if (status != KILN_OK) {
        kiln_free(ctx, st);
        return status;
    }
    *stages = st;
    *n_stages = n;
    return KILN_OK;
}
