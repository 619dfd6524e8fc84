/* kiln_model_export_onnx: the inference graph as ONNX (opset 13, IR 7).
 *
 * Each layer kind writes its own nodes (its export_onnx op, into the graph
 * of layers/onnx_graph.h, which also keeps track of layouts); this file
 * walks the model and encodes the graph with protobuf-c code generated at
 * build time from ONNX's own onnx.proto (meson feature "onnx";
 * tools/onnx_proto.py renames its package so the symbols are kiln_onnx__*),
 * so the schema is ONNX's and not a copy of it. Without the feature the
 * call says so. */
#include "kiln_config.h"
#include "runtime/model/model.h"
#include "runtime/model/ema.h"

#include <string.h>

#if KILN_HAVE_ONNX

#include "base/files.h"
#include "layers/onnx_graph.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

/* The generated header's oneofs are anonymous unions (C11). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "kiln_onnx.pb-c.h"
#pragma GCC diagnostic pop

#define OPSET 13
#define IR_VERSION 7   /* the IR of ONNX 1.8, which brought opset 13 */
#define CALL "kiln_model_export_onnx"

typedef struct exporter {
    kiln_model *m;
    kiln_onnx_graph g;
} exporter;

static void *arena_alloc(exporter *ex, size_t size)
{
    return kiln_onnx_alloc(&ex->g, size);
}

/* ---- encoding ------------------------------------------------------------ */

static KilnOnnx__AttributeProto *encode_attr(exporter *ex, const kiln_onnx_attr *a)
{
    static const KilnOnnx__AttributeProto__AttributeType types[] = {
        [KILN_ONNX_ATTR_INT] = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT,
        [KILN_ONNX_ATTR_FLOAT] = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT,
        [KILN_ONNX_ATTR_INTS] = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS,
    };
    KilnOnnx__AttributeProto *p = arena_alloc(ex, sizeof *p);
    if (!p)
        return NULL;
    kiln_onnx__attribute_proto__init(p);
    p->name = (char *)a->name;
    p->has_type = 1;
    p->type = types[a->kind];
    p->has_i = a->kind == KILN_ONNX_ATTR_INT;
    p->i = a->i;
    p->has_f = a->kind == KILN_ONNX_ATTR_FLOAT;
    p->f = a->f;
    p->n_ints = a->n_ints;
    p->ints = (int64_t *)a->ints;
    return p;
}

static KilnOnnx__NodeProto *encode_node(exporter *ex, const kiln_onnx_node *nd)
{
    KilnOnnx__NodeProto *p = arena_alloc(ex, sizeof *p);
    char **outputs = arena_alloc(ex, sizeof *outputs);
    KilnOnnx__AttributeProto **attrs = arena_alloc(ex, (nd->n_attrs + 1) * sizeof *attrs);
    if (!p || !outputs || !attrs)
        return NULL;
    kiln_onnx__node_proto__init(p);
    outputs[0] = (char *)nd->output;
    p->n_input = nd->n_inputs;
    p->input = (char **)nd->inputs;
    p->n_output = 1;
    p->output = outputs;
    p->name = (char *)nd->output;
    p->op_type = (char *)nd->op;
    size_t k = 0;
    for (const kiln_onnx_attr *a = nd->attrs; a; a = a->next)
        if (!(attrs[k++] = encode_attr(ex, a)))
            return NULL;
    p->n_attribute = k;
    p->attribute = attrs;
    return p;
}

static KilnOnnx__TensorProto *encode_tensor(exporter *ex, const kiln_onnx_tensor *t)
{
    KilnOnnx__TensorProto *p = arena_alloc(ex, sizeof *p);
    if (!p)
        return NULL;
    kiln_onnx__tensor_proto__init(p);
    size_t count = 1;
    for (int k = 0; k < t->rank; k++)
        count *= (size_t)t->dims[k];
    p->name = (char *)t->name;
    p->n_dims = (size_t)t->rank;
    p->dims = (int64_t *)t->dims;
    p->has_data_type = 1;
    p->data_type = t->type;
    p->has_raw_data = 1;
    p->raw_data.len = count * t->width;
    p->raw_data.data = (uint8_t *)t->data;
    return p;
}

/* ---- the model ---------------------------------------------------------- */

/* A float (or, for ids, int32) tensor's type, (batch, kiln's dims...). */
static KilnOnnx__ValueInfoProto *graph_value(exporter *ex, const char *name,
                                             const kiln_shape *shape, int ints)
{
    KilnOnnx__ValueInfoProto *vi = arena_alloc(ex, sizeof *vi);
    KilnOnnx__TypeProto *type = arena_alloc(ex, sizeof *type);
    KilnOnnx__TypeProto__Tensor *tensor = arena_alloc(ex, sizeof *tensor);
    KilnOnnx__TensorShapeProto *tshape = arena_alloc(ex, sizeof *tshape);
    const size_t n = (size_t)shape->rank + 1;
    KilnOnnx__TensorShapeProto__Dimension *dims = arena_alloc(ex, n * sizeof *dims);
    KilnOnnx__TensorShapeProto__Dimension **list = arena_alloc(ex, n * sizeof *list);
    if (!vi || !type || !tensor || !tshape || !dims || !list)
        return NULL;
    for (size_t d = 0; d < n; d++) {
        kiln_onnx__tensor_shape_proto__dimension__init(&dims[d]);
        if (d == 0) {
            dims[d].value_case = KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dims[d].dim_param = "batch";
        } else {
            dims[d].value_case = KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dims[d].dim_value = shape->dims[d - 1];
        }
        list[d] = &dims[d];
    }
    kiln_onnx__tensor_shape_proto__init(tshape);
    tshape->n_dim = n;
    tshape->dim = list;
    kiln_onnx__type_proto__tensor__init(tensor);
    tensor->has_elem_type = 1;
    tensor->elem_type = ints ? KILN_ONNX__TENSOR_PROTO__DATA_TYPE__INT32
                             : KILN_ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tensor->shape = tshape;
    kiln_onnx__type_proto__init(type);
    type->value_case = KILN_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type->tensor_type = tensor;
    kiln_onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    vi->type = type;
    return vi;
}

/* The graph of every node on the path to the outputs. */
static kiln_status build_graph(exporter *ex, KilnOnnx__GraphProto *g)
{
    kiln_model *m = ex->m;
    kiln_onnx_graph *og = &ex->g;
    for (int32_t k = 0; k < m->graph.n_inputs; k++)   /* graph inputs in the model's input order */
        kiln_onnx_set_value(og, m->graph.inputs[k], KILN_ONNX_CL,
                            kiln_onnx_unique_name(og, m->graph.nodes[m->graph.inputs[k]].name));
    for (kiln_node i = 0; i < m->graph.n_nodes && !og->oom; i++)
        if (!kiln_node_is_input(m, i) && m->graph.nodes[i].on_path)
            m->graph.nodes[i].ops->export_onnx(og, i);
    KilnOnnx__ValueInfoProto **in = arena_alloc(ex, (size_t)m->graph.n_inputs * sizeof *in);
    KilnOnnx__ValueInfoProto **out = arena_alloc(ex, (size_t)m->graph.n_outputs * sizeof *out);
    if (og->oom || !in || !out)
        return kiln_error_oom(m->ctx, "the ONNX graph", og->oom_bytes);
    int all = 1;
    /* Graph outputs in the model's output order, each kiln's tensor named
     * as its layer. */
    for (int32_t k = 0; k < m->graph.n_outputs && all; k++) {
        const kiln_node output = m->graph.outputs[k];
        const char *result = kiln_onnx_value_in(og, output, KILN_ONNX_CL);
        if (result && strcmp(result, m->graph.nodes[output].name) != 0) {
            const char *named = kiln_onnx_unique_name(og, m->graph.nodes[output].name);
            kiln_onnx_add_node(og, "Identity", &result, 1, named);
            result = named;
        }
        out[k] = result ? graph_value(ex, result, &m->graph.nodes[output].shape, 0) : NULL;
        all = out[k] != NULL;
    }
    for (int32_t k = 0; k < m->graph.n_inputs; k++) {
        const kiln_node_rec *input = &m->graph.nodes[m->graph.inputs[k]];
        in[k] = graph_value(ex, input->name, &input->shape, input->ints);
        all = all && in[k];
    }
    KilnOnnx__NodeProto **nodes = arena_alloc(ex, (og->n_nodes + 1) * sizeof *nodes);
    KilnOnnx__TensorProto **inits = arena_alloc(ex, (og->n_inits + 1) * sizeof *inits);
    all = all && nodes && inits;
    for (size_t k = 0; all && k < og->n_nodes; k++)
        all = (nodes[k] = encode_node(ex, og->nodes[k])) != NULL;
    for (size_t k = 0; all && k < og->n_inits; k++)
        all = (inits[k] = encode_tensor(ex, og->inits[k])) != NULL;
    if (!all || og->oom)
        return kiln_error_oom(m->ctx, "the ONNX graph", og->oom_bytes);
    kiln_onnx__graph_proto__init(g);
    g->name = "kiln";
    g->n_node = og->n_nodes;
    g->node = nodes;
    g->n_initializer = og->n_inits;
    g->initializer = inits;
    g->n_input = (size_t)m->graph.n_inputs;
    g->input = in;
    g->n_output = (size_t)m->graph.n_outputs;
    g->output = out;
    return KILN_OK;
}

/* protobuf-c packs through this: 64 KiB at a time into the file. */
typedef struct file_sink {
    ProtobufCBuffer base;
    int fd;
    int error;        /* errno of the first failed write */
    size_t used;
    unsigned char buf[1 << 16];
} file_sink;

static void sink_flush(file_sink *s)
{
    if (s->used && !s->error && !kiln_write_all(s->fd, s->buf, s->used))
        s->error = errno ? errno : EIO;
    s->used = 0;
}

static void sink_append(ProtobufCBuffer *buffer, size_t len, const uint8_t *data)
{
    file_sink *s = (file_sink *)buffer;
    if (s->used + len > sizeof s->buf)
        sink_flush(s);
    if (len > sizeof s->buf) {   /* weights: straight from their memory */
        if (!s->error && !kiln_write_all(s->fd, data, len))
            s->error = errno ? errno : EIO;
        return;
    }
    memcpy(s->buf + s->used, data, len);
    s->used += len;
}

/* Writes the packed model to a temporary file renamed over path. */
static kiln_status write_model(exporter *ex, const KilnOnnx__ModelProto *model, const char *path)
{
    kiln_context *ctx = ex->m->ctx;
    char tmp[4200];
    file_sink *sink = arena_alloc(ex, sizeof *sink);
    if (!sink)
        return kiln_error_oom(ctx, "an ONNX write buffer", sizeof *sink);
    kiln_remove_dead_temporaries(&ctx->host, path);
    const int fd = kiln_create_temporary(path, tmp, sizeof tmp);
    if (fd < 0)
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": cannot create %s: %s; %s is unchanged",
                          tmp, strerror(errno), path);
    sink->base.append = sink_append;
    sink->fd = fd;
    kiln_onnx__model_proto__pack_to_buffer(model, &sink->base);
    sink_flush(sink);
    int error = sink->error;
    if (!error && fsync(fd) != 0)
        error = errno;
    if (close(fd) != 0 && !error)
        error = errno;
    if (error) {
        unlink(tmp);
        kiln_temporary_closed();
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": writing %s failed: %s; %s is unchanged",
                          tmp, strerror(error), path);
    }
    if (rename(tmp, path) != 0) {
        error = errno;
        unlink(tmp);
        kiln_temporary_closed();
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": renaming %s to %s failed: %s", tmp, path,
                          strerror(error));
    }
    kiln_temporary_closed();
    kiln_sync_folder_of(path);
    return KILN_OK;
}

static kiln_status export_entered(kiln_model *m, const char *path)
{
    kiln_context *ctx = m->ctx;
    if (!m->plan.compiled)
        return kiln_error(ctx, KILN_ERROR_STATE, CALL ": compile the model first");
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!kiln_node_is_input(m, i) && node->on_path && !node->ops->export_onnx)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": layer '%s' (%s) has no ONNX "
                              "form; %s was not written", node->name, node->ops->kind, path);
        if (node->on_path && !kiln_onnx_activation_known(node->activation))
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": layer '%s' has activation "
                              "%d, which has no ONNX form here; %s was not written", node->name,
                              (int)node->activation, path);
    }
    exporter ex = {.m = m};
    kiln_status st = KILN_OK;
    float *flat =
        kiln_calloc(ctx, m->plan.n_param_floats ? m->plan.n_param_floats : 1, sizeof(float));
    kiln_onnx_layer *layers = kiln_calloc(ctx, (size_t)m->graph.n_nodes, sizeof *layers);
    if (!flat || !layers) {
        st = kiln_error_oom(ctx, "a parameter copy", m->plan.n_param_floats * sizeof(float));
        goto fail;
    }
    st = kiln_ema_params(m, flat);   /* the averages, with use_ema */
    if (st != KILN_OK)
        goto fail;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        kiln_onnx_layer *l = &layers[i];
        *l = (kiln_onnx_layer){.name = node->name, .ops = node->ops, .config = node->config,
                               .shape = node->shape, .activation = node->activation,
                               .n_inputs = node->n_inputs, .params = node->params,
                               .n_params = node->n_params};
        for (int k = 0; k < node->n_inputs; k++)
            l->inputs[k] = node->inputs[k];
        for (int p = 0; p < node->n_params; p++) {
            l->param_data[p] = flat + node->param_offset[p];
            l->param_names[p] = node->param_name[p];
            l->param_transposed[p] = node->param_transposed[p];
        }
    }
    if (kiln_onnx_graph_init(&ex.g, &ctx->host, layers, m->graph.n_nodes) != KILN_OK) {
        st = kiln_error_oom(ctx, "the ONNX graph", ex.g.oom_bytes);
        goto fail;
    }
    KilnOnnx__GraphProto graph;
    st = build_graph(&ex, &graph);
    if (st != KILN_OK)
        goto fail;
    KilnOnnx__OperatorSetIdProto opset = KILN_ONNX__OPERATOR_SET_ID_PROTO__INIT;
    KilnOnnx__OperatorSetIdProto *opsets[1] = {&opset};
    opset.domain = "";
    opset.has_version = 1;
    opset.version = OPSET;
    KilnOnnx__ModelProto model = KILN_ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = "kiln";
    model.producer_version = (char *)kiln_version();
    model.graph = &graph;
    /* Protobuf parsers refuse messages of 2 GiB and more. */
    const size_t size = kiln_onnx__model_proto__get_packed_size(&model);
    if (size > (size_t)INT32_MAX) {
        st = kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": the model takes %zu bytes as ONNX; "
                        "a protobuf file holds less than 2 GiB and kiln writes no external "
                        "data; %s was not written", size, path);
        goto fail;
    }
    st = write_model(&ex, &model, path);
fail:
    kiln_onnx_graph_free(&ex.g);
    kiln_free(ctx, layers);
    kiln_free(ctx, flat);
    return st;
}

#endif /* KILN_HAVE_ONNX */

kiln_status kiln_model_export_onnx(kiln_model *m, const char *path)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_export_onnx");
    if (st != KILN_OK)
        return st;
    if (!path || !*path) {
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_export_onnx: path is "
                        "%s", path ? "empty" : "NULL");
    } else {
#if KILN_HAVE_ONNX
        st = export_entered(m, path);
#else
        st = kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_export_onnx: this kiln was "
                        "built without ONNX export (meson feature 'onnx': it needs libprotobuf-c, "
                        "protoc-c and ONNX's onnx.proto; on Debian libprotobuf-c-dev, "
                        "protobuf-c-compiler and python3-onnx); %s was not written", path);
#endif
    }
    kiln_model_leave(m);
    return st;
}
