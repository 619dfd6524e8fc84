/* The model builder: nodes are added in order, so insertion order is a
 * topological order. Shapes are inferred as each layer is added. */
#include "runtime/model/model.h"

#include <stdio.h>
#include <string.h>

kiln_status kiln_model_create(kiln_context *ctx, kiln_model **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_create: out is NULL");
    kiln_model *m = kiln_calloc(ctx, 1, sizeof *m);
    if (!m)
        return kiln_error_oom(ctx, "a model", sizeof *m);
    m->ctx = ctx;
    m->graph.output = -1;
    m->graph.input = -1;
    pthread_mutex_init(&m->busy, NULL);
    kiln_context_hold(ctx);
    *out = m;
    return KILN_OK;
}

const char *kiln_node_param_name(const kiln_node_rec *node, int p, char *buf, size_t size)
{
    if (node->param_name[p])
        snprintf(buf, size, "%s", node->param_name[p]);
    else
        snprintf(buf, size, "%s/%s", node->name, node->params[p].name);
    return buf;
}

void kiln_model_destroy(kiln_model *m)
{
    if (!m)
        return;
    if (m->placement.strategy)
        m->placement.strategy->destroy(m->placement.strategy_impl);
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        kiln_free(m->ctx, m->graph.nodes[i].config);
        for (int p = 0; p < KILN_MAX_PARAMS; p++) {
            kiln_free(m->ctx, m->graph.nodes[i].param_name[p]);
            kiln_free(m->ctx, m->graph.nodes[i].param_init[p]);
        }
    }
    kiln_free(m->ctx, m->graph.nodes);
    kiln_free(m->ctx, m->training.history);
    kiln_free(m->ctx, m->plan.decay.run);
    pthread_mutex_destroy(&m->busy);
    kiln_context *ctx = m->ctx;
    kiln_free(ctx, m);
    kiln_context_release(ctx);
}

static kiln_status build_fail(kiln_model *m, kiln_status st, const char *fmt, ...)
    KILN_PRINTF(3, 4);

/* Keeps the first error only: later ones are usually its consequences.
 * Returns st. */
static kiln_status build_fail(kiln_model *m, kiln_status st, const char *fmt, ...)
{
    if (m->graph.build_status == KILN_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->graph.build_error, sizeof m->graph.build_error, fmt, ap);
        va_end(ap);
        m->graph.build_status = st;
    }
    return st;
}

/* Keras names layers "dense", "dense_1", ... per kind. */
static void default_name(const kiln_model *m, const kiln_layer_ops *ops, char *name,
                         size_t size)
{
    int same = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].ops == ops)
            same++;
    if (same == 0)
        snprintf(name, size, "%s", ops->kind);
    else
        snprintf(name, size, "%s_%d", ops->kind, same);
}

/* The layer's label (its name, or Keras's default) into label[64], and
 * whether the call may add it (a refusal is recorded on the model). */
static kiln_status check_call(kiln_model *m, const kiln_layer_ops *ops, int n_inputs,
                            const char *name, kiln_activation activation, char *label)
{
    const size_t size = 64;
    if (name && (strlen(name) == 0 || strlen(name) >= size))
        return build_fail(m, KILN_ERROR_INVALID_ARGUMENT,
                          "a %s layer's name must have 1 to %d characters", ops->kind,
                          (int)size - 1);
    if (name)
        snprintf(label, size, "%s", name);
    else
        default_name(m, ops, label, size);
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        if (strcmp(m->graph.nodes[i].name, label) == 0)
            return build_fail(m, KILN_ERROR_INVALID_ARGUMENT,
                              "layer name '%s' is used twice", label);
    if (m->plan.compiled)
        return build_fail(m, KILN_ERROR_STATE, "layer '%s' added after compile", label);
    if ((int)activation < KILN_ACTIVATION_LINEAR || activation > KILN_ACTIVATION_LAST)
        return build_fail(m, KILN_ERROR_INVALID_ARGUMENT,
                          "layer '%s': activation %d is not a kiln_activation", label,
                          (int)activation);
    if (n_inputs < ops->min_inputs || n_inputs > ops->max_inputs)
        return build_fail(m, KILN_ERROR_INVALID_ARGUMENT,
                          "layer '%s' takes %d to %d inputs, got %d", label, ops->min_inputs,
                          ops->max_inputs, n_inputs);
    return KILN_OK;
}

/* The inputs as node numbers in rec, and their shapes. */
static kiln_status resolve_inputs(kiln_model *m, const kiln_node *inputs, int n_inputs,
                                const char *label, kiln_node_rec *rec, kiln_shape *in_shapes)
{
    for (int k = 0; k < n_inputs; k++) {
        kiln_node in = inputs[k];
        if (in == KILN_NODE_PREVIOUS)
            in = m->graph.n_nodes - 1;
        if (in == KILN_NODE_INVALID && m->graph.build_status != KILN_OK)
            return m->graph.build_status;  /* an earlier error already explains it */
        if (in < 0 || in >= m->graph.n_nodes)
            return build_fail(m, KILN_ERROR_INVALID_ARGUMENT,
                              "layer '%s': input %d is node %d, which does not exist (the "
                              "model has %d nodes)",
                              label, k, (int)inputs[k], (int)m->graph.n_nodes);
        rec->inputs[k] = in;
        in_shapes[k] = m->graph.nodes[in].shape;
    }
    rec->n_inputs = n_inputs;
    return KILN_OK;
}

/* One sample of the output and every parameter must fit KILN_MAX_FLOATS. */
static kiln_status check_sizes(kiln_model *m, const kiln_node_rec *rec,
                               const kiln_layer_build *build)
{
    char s[96];
    const int64_t out = kiln_shape_size(&build->out);
    if (out < 0 || out > KILN_MAX_FLOATS)
        return build_fail(m, KILN_ERROR_SHAPE, "layer '%s' (%s): %s has more than %d floats "
                          "per sample", rec->name, rec->ops->kind,
                          kiln_shape_str(&build->out, s, sizeof s), KILN_MAX_FLOATS);
    for (int p = 0; p < build->n_params; p++) {
        const kiln_param_spec *spec = &build->params[p];
        const int64_t n = kiln_shape_size(&spec->shape);
        if (n < 0 || n > KILN_MAX_FLOATS)
            return build_fail(m, KILN_ERROR_SHAPE, "layer '%s' (%s): parameter '%s' %s has "
                              "%s%lld floats; kiln supports at most %d", rec->name, rec->ops->kind,
                              spec->name, kiln_shape_str(&spec->shape, s, sizeof s),
                              n < 0 ? "more than " : "", n < 0 ? (long long)INT64_MAX
                              : (long long)n, KILN_MAX_FLOATS);
    }
    return KILN_OK;
}

/* Ids (int32) go only where a layer reads ids, and such a layer reads
 * nothing else: a float kernel would take their bits for numbers. */
static kiln_status check_value_types(kiln_model *m, const kiln_node_rec *rec)
{
    for (int k = 0; k < rec->n_inputs; k++) {
        const kiln_node_rec *in = &m->graph.nodes[rec->inputs[k]];
        if (in->ints && !rec->ops->id_limit)
            return build_fail(m, KILN_ERROR_SHAPE, "layer '%s' (%s) takes float values, but "
                              "its input '%s' holds int32 ids (kiln_input_ints); only an "
                              "Embedding reads ids", rec->name, rec->ops->kind, in->name);
        if (!in->ints && rec->ops->id_limit)
            return build_fail(m, KILN_ERROR_SHAPE, "layer '%s' (%s) reads int32 ids, but its "
                              "input '%s' (%s) holds floats; feed it an Input declared with "
                              "kiln_input_ints", rec->name, rec->ops->kind, in->name,
                              in->ops->kind);
    }
    return KILN_OK;
}

/* The layer's config from args, and its output shape and parameters. */
static kiln_status infer_layer(kiln_model *m, const void *args, const kiln_shape *in_shapes,
                             kiln_node_rec *rec)
{
    const kiln_layer_ops *ops = rec->ops;
    kiln_layer_build build;
    memset(&build, 0, sizeof build);
    build.in = in_shapes;
    build.n_in = rec->n_inputs;
    void *cfg = kiln_calloc(m->ctx, 1, ops->config_size);
    if (!cfg)
        return build_fail(m, KILN_ERROR_OUT_OF_MEMORY, "out of memory adding layer '%s'",
                          rec->name);
    if (ops->configure)
        ops->configure(cfg, args);
    const kiln_status st = ops->infer(cfg, &build);
    if (st != KILN_OK) {
        kiln_free(m->ctx, cfg);
        return build_fail(m, st, "layer '%s' (%s): %s", rec->name, ops->kind, build.error);
    }
    if (build.out.rank < 1 || kiln_shape_size(&build.out) == 0) {
        kiln_free(m->ctx, cfg);
        return build_fail(m, KILN_ERROR_SHAPE, "layer '%s' (%s): output would be empty",
                          rec->name, ops->kind);
    }
    const kiln_status fits = check_sizes(m, rec, &build);
    if (fits != KILN_OK) {
        kiln_free(m->ctx, cfg);
        return fits;
    }
    rec->config = cfg;
    rec->shape = build.out;
    rec->ints = build.out_ints;
    rec->n_params = build.n_params;
    memcpy(rec->params, build.params, sizeof rec->params);
    return KILN_OK;
}

int kiln_node_take_activation(kiln_model *m, kiln_node i, kiln_activation act,
                              const char *name)
{
    kiln_node_rec *node = &m->graph.nodes[i];
    if (node->ops == &kiln_layer_activation || !node->ops->takes_activation ||
        node->activation != KILN_ACTIVATION_LINEAR)
        return 0;
    node->activation = act;
    snprintf(node->name, sizeof node->name, "%s", name);
    return 1;
}

kiln_node kiln_model_refuse_layer(kiln_model *m, kiln_status status, const char *call,
                                  const char *why)
{
    if (m)
        build_fail(m, status, "%s: %s", call, why);
    return KILN_NODE_INVALID;
}

kiln_node kiln_model_add_layer(kiln_model *m, const kiln_layer_ops *ops, const void *args,
                               const kiln_node *inputs, int n_inputs, const char *name,
                               kiln_activation activation)
{
    if (!m)
        return KILN_NODE_INVALID;
    kiln_node_rec rec;
    memset(&rec, 0, sizeof rec);
    kiln_shape in_shapes[KILN_MAX_INPUTS];
    char label[64];
    if (check_call(m, ops, n_inputs, name, activation, label) != KILN_OK ||
        resolve_inputs(m, inputs, n_inputs, label, &rec, in_shapes) != KILN_OK)
        return KILN_NODE_INVALID;
    rec.device = -1;
    rec.ops = ops;
    rec.activation = activation;
    snprintf(rec.name, sizeof rec.name, "%s", label);
    if (check_value_types(m, &rec) != KILN_OK ||
        infer_layer(m, args, in_shapes, &rec) != KILN_OK)
        return KILN_NODE_INVALID;
    if (m->graph.n_nodes == m->graph.cap_nodes) {
        int32_t cap = m->graph.cap_nodes ? m->graph.cap_nodes * 2 : 16;
        kiln_node_rec *grown = kiln_realloc(m->ctx, m->graph.nodes, (size_t)cap * sizeof *grown);
        if (!grown) {
            kiln_free(m->ctx, rec.config);
            build_fail(m, KILN_ERROR_OUT_OF_MEMORY, "out of memory adding layer '%s'", label);
            return KILN_NODE_INVALID;
        }
        m->graph.nodes = grown;
        m->graph.cap_nodes = cap;
    }
    m->graph.nodes[m->graph.n_nodes] = rec;
    return m->graph.n_nodes++;
}

kiln_status kiln_model_place(kiln_model *m, kiln_node first, kiln_node last, int32_t device)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE,
                          "kiln_model_place: the model is already compiled");
    if (last == KILN_NODE_PREVIOUS)
        last = m->graph.n_nodes - 1;
    char msg[320];
    msg[0] = '\0';
    if (first < 0 || last < first || last >= m->graph.n_nodes)
        snprintf(msg, sizeof msg, "kiln_model_place: nodes %d to %d are not a range of the "
                 "model's %d nodes", (int)first, (int)last, (int)m->graph.n_nodes);
    else if (device < 0 || device >= m->ctx->n_devices)
        snprintf(msg, sizeof msg, "kiln_model_place: layers '%s' to '%s' placed on device %d, "
                 "but the context has %d device(s)", m->graph.nodes[first].name,
                 m->graph.nodes[last].name, (int)device, (int)m->ctx->n_devices);
    if (msg[0]) {
        build_fail(m, KILN_ERROR_INVALID_ARGUMENT, "%s", msg);
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s", msg);
    }
    for (kiln_node i = first; i <= last; i++)
        m->graph.nodes[i].device = device;
    m->graph.placed = 1;
    return KILN_OK;
}

kiln_status kiln_model_set_output(kiln_model *m, kiln_node node)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (node == KILN_NODE_PREVIOUS)
        node = m->graph.n_nodes - 1;
    if (node < 0 || node >= m->graph.n_nodes)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_set_output: node %d does not exist (the model has %d)",
                          (int)node, (int)m->graph.n_nodes);
    if (m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE,
                          "kiln_model_set_output: the model is already compiled");
    m->graph.output = node;
    m->graph.n_outputs = 0;   /* the last call decides: one output now */
    return KILN_OK;
}

int64_t kiln_node_size(const kiln_model *m, kiln_node node)
{
    return kiln_shape_size(&m->graph.nodes[node].shape);
}
