/* A model's layers and parameter tensors as objects: listing them, one tensor
 * read or written by name, and freezing a layer before compile. */
#include "runtime/context/context.h"
#include "runtime/model/model.h"
#include "runtime/model/ema.h"

#include <stdio.h>
#include <string.h>

kiln_status kiln_model_layer_count(const kiln_model *m, int32_t *count)
{
    if (count)
        *count = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_layer_count: count is NULL");
    int entered;
    const kiln_status st = kiln_model_enter_reading(m, "kiln_model_layer_count", &entered);
    if (st == KILN_OK)
        *count = m->graph.n_nodes;
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_layer_info(const kiln_model *m, int32_t index, kiln_layer_info *info)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!info || info->struct_size < sizeof *info)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_layer_info: info is "
                          "NULL or its struct_size is not sizeof(kiln_layer_info)");
    int entered;
    kiln_status st = kiln_model_enter_reading(m, "kiln_model_layer_info", &entered);
    if (st == KILN_OK && (index < 0 || index >= m->graph.n_nodes))
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_layer_info: layer %d "
                        "of %d", (int)index, (int)m->graph.n_nodes);
    if (st == KILN_OK) {
        const kiln_node_rec *node = &m->graph.nodes[index];
        kiln_layer_info r = {.struct_size = sizeof r, .name = node->name,
                             .kind = node->ops->kind, .rank = node->shape.rank,
                             .trainable = !node->frozen, .n_tensors = node->n_params};
        memcpy(r.dims, node->shape.dims, sizeof r.dims);
        kiln_struct_export(info, &r, sizeof r);
    }
    kiln_model_leave_reading(m, entered);
    return st;
}

/* Weight tensor `index` in get_weights order: its node, parameter and
 * offset in the packed array. 0 when there is no such tensor. */
static int find_weight(const kiln_model *m, int32_t index, const char *name, kiln_node *node,
                       int *param, int64_t *offset)
{
    int64_t at = 0;
    int32_t k = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].n_params; p++, k++) {
            char full[96];
            kiln_node_param_name(&m->graph.nodes[i], p, full, sizeof full);
            if (name ? strcmp(full, name) == 0 : k == index) {
                *node = i;
                *param = p;
                *offset = at;
                return 1;
            }
            at += kiln_shape_size(&m->graph.nodes[i].params[p].shape);
        }
    return 0;
}

kiln_status kiln_model_tensor_count(const kiln_model *m, int32_t *count)
{
    if (count)
        *count = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_tensor_count: count is NULL");
    int entered;
    kiln_status st = kiln_model_enter_reading(m, "kiln_model_tensor_count", &entered);
    if (st == KILN_OK)
        st = kiln_model_check_compiled(m, "kiln_model_tensor_count");
    for (kiln_node i = 0; st == KILN_OK && i < m->graph.n_nodes; i++)
        *count += m->graph.nodes[i].n_params;
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_tensor_info(const kiln_model *m, int32_t index, kiln_parameter_info *info)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!info || info->struct_size < sizeof *info)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_tensor_info: info "
                          "is NULL or its struct_size is not sizeof(kiln_parameter_info)");
    int entered;
    kiln_status st = kiln_model_enter_reading(m, "kiln_model_tensor_info", &entered);
    if (st == KILN_OK)
        st = kiln_model_check_compiled(m, "kiln_model_tensor_info");
    kiln_node i;
    int p;
    int64_t offset;
    if (st == KILN_OK && (index < 0 || !find_weight(m, index, NULL, &i, &p, &offset)))
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_tensor_info: tensor "
                        "%d does not exist", (int)index);
    if (st == KILN_OK) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        const kiln_param_spec *spec = &node->params[p];
        kiln_parameter_info r = {.struct_size = sizeof r, .rank = spec->shape.rank,
                              .size = kiln_shape_size(&spec->shape), .offset = offset,
                              .trainable = !spec->non_trainable && !kiln_param_frozen(node, p)};
        kiln_node_param_name(node, p, r.name, sizeof r.name);
        memcpy(r.dims, spec->shape.dims, sizeof r.dims);
        kiln_struct_export(info, &r, sizeof r);
    }
    kiln_model_leave_reading(m, entered);
    return st;
}

/* One tensor through the strategy's whole parameter copy. */
static kiln_status tensor_io(kiln_model *m, const char *call, const char *name, float *data,
                             int64_t count, int get)
{
    kiln_status st = kiln_model_check_compiled(m, call);
    if (st != KILN_OK)
        return st;
    if (!name || !data)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", call,
                          !name ? "name" : "data");
    kiln_node i;
    int p;
    int64_t offset;
    if (!find_weight(m, -1, name, &i, &p, &offset))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: the model has no parameter "
                          "tensor '%s' (names are \"<layer>/<tensor>\", e.g. \"dense/kernel\")",
                          call, name);
    const int64_t size = kiln_shape_size(&m->graph.nodes[i].params[p].shape);
    if (count != size)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: '%s' holds %lld floats; "
                          "%lld given", call, name, (long long)size, (long long)count);
    const int64_t at_offset = m->graph.nodes[i].param_offset[p];
    if (get && m->placement.strategy->get_param_range)
        return m->placement.strategy->get_param_range(m->placement.strategy_impl, at_offset,
                                                      size, data);
    float *flat = kiln_calloc(m->ctx, m->plan.n_param_floats, sizeof(float));
    if (!flat)
        return kiln_error_oom(m->ctx, "a parameter copy", m->plan.n_param_floats * sizeof(float));
    float *at = flat + at_offset;
    st = m->placement.strategy->get_params(m->placement.strategy_impl, flat);
    if (st == KILN_OK && get)
        memcpy(data, at, (size_t)size * sizeof(float));
    if (st == KILN_OK && !get) {
        memcpy(at, data, (size_t)size * sizeof(float));
        st = kiln_model_write_params(m, flat);
    }
    kiln_free(m->ctx, flat);
    return st;
}

kiln_status kiln_model_get_tensor(kiln_model *m, const char *name, float *data, int64_t count)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_get_tensor");
    if (st == KILN_OK) {
        st = tensor_io(m, "kiln_model_get_tensor", name, data, count, 1);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_model_set_tensor(kiln_model *m, const char *name, const float *data,
                                  int64_t count)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_set_tensor");
    if (st == KILN_OK) {
        st = tensor_io(m, "kiln_model_set_tensor", name, (float *)data, count, 0);
        kiln_model_leave(m);
    }
    return st;
}

static kiln_status set_trainable_entered(kiln_model *m, const char *layer, int32_t trainable)
{
    if (!layer)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_set_trainable: layer is NULL");
    if (m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "kiln_model_set_trainable: the model is "
                          "compiled; freeze or unfreeze layers before kiln_model_compile");
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        if (strcmp(m->graph.nodes[i].name, layer) == 0) {
            m->graph.nodes[i].frozen = !trainable;
            return KILN_OK;
        }
    return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_set_trainable: the "
                      "model has no layer '%s'", layer);
}

kiln_status kiln_model_set_trainable(kiln_model *m, const char *layer, int32_t trainable)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_set_trainable");
    if (st == KILN_OK) {
        st = set_trainable_entered(m, layer, trainable);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_model_find_layer(const kiln_model *m, const char *name, kiln_node *node)
{
    if (node)
        *node = KILN_NODE_INVALID;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!name || !node)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_find_layer: %s is "
                          "NULL", name ? "node" : "name");
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        if (strcmp(m->graph.nodes[i].name, name) == 0) {
            *node = i;
            return KILN_OK;
        }
    return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_find_layer: the model "
                      "has no layer '%s'", name);
}
