/* kiln_model_import_onnx: an ONNX inference graph as an uncompiled kiln
 * model. This file reads the file with the protobuf-c code generated from
 * ONNX's own onnx.proto (as onnx_export.c writes it), checks its versions,
 * declares the inputs, orders the nodes (refusing a cycle) and hands each
 * to onnx_import_ops.c; initializers are onnx_import_tensor.c's. */
#include "kiln_config.h"
#include "runtime/model/model.h"

#include <string.h>

#if KILN_HAVE_ONNX

#include "base/options.h"
#include "runtime/saving/onnx_import.h"

#include <errno.h>
#include <stdio.h>

#define CALL KILN_IMPORT_CALL
#define IR_FIRST 6
#define IR_LAST 9
#define OPSET_FIRST 11
#define OPSET_LAST 18

kiln_import_value *kiln_import_find(kiln_importer *im, const char *name)
{
    for (size_t k = im->n_values; k-- > 0;)   /* the latest of a name: Identity copies */
        if (strcmp(im->values[k].name, name) == 0)
            return &im->values[k];
    return NULL;
}

kiln_import_value *kiln_import_add_value(kiln_importer *im, const char *name)
{
    if (im->n_values == im->cap_values) {
        const size_t cap = im->cap_values ? 2 * im->cap_values : 256;
        kiln_import_value *bigger = kiln_onnx_alloc(&im->mem, cap * sizeof *bigger);
        if (!bigger)
            return NULL;
        if (im->n_values)
            memcpy(bigger, im->values, im->n_values * sizeof *bigger);
        im->values = bigger;
        im->cap_values = cap;
    }
    kiln_import_value *v = &im->values[im->n_values++];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->node = v->converted = KILN_NODE_INVALID;
    return v;
}

const char *kiln_import_node_name(const KilnOnnx__NodeProto *n)
{
    if (n->name && *n->name)
        return n->name;
    return n->n_output && n->output[0] ? n->output[0] : "";
}

/* protobuf-c allocates through the context's allocator. */
static void *pb_alloc(void *host, size_t size)
{
    return kiln_host_alloc(host, size ? size : 1);
}

static void pb_free(void *host, void *p)
{
    kiln_host_free(host, p);
}

/* Graph input v: an Input layer of its dims but the batch, in ONNX's
 * order (of int32 ids for an int64 or int32 input: what an Embedding's
 * Gather reads); named dimensions take their size from the options. */
static kiln_status declare_input(kiln_importer *im, const KilnOnnx__ValueInfoProto *vi)
{
    kiln_context *ctx = im->ctx;
    const KilnOnnx__TypeProto *type = vi->type;
    const KilnOnnx__TypeProto__Tensor *tensor =
        type && type->value_case == KILN_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? type->tensor_type
                                                                            : NULL;
    if (!tensor || !tensor->shape)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": graph input '%s' is not a tensor "
                          "of known rank", vi->name);
    const int ints = tensor->has_elem_type && (tensor->elem_type == KILN_ONNX_INT64 ||
                                               tensor->elem_type == KILN_ONNX_INT32);
    if (!tensor->has_elem_type || (tensor->elem_type != KILN_ONNX_FLOAT &&
                                   tensor->elem_type != KILN_ONNX_BOOL && !ints))
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": graph input '%s' has element "
                          "type %d; kiln imports float (1) inputs, bool (9) ones as floats 0 "
                          "and 1, and int64 (7) or int32 (6) ids, which it takes as int32",
                          vi->name, (int)tensor->elem_type);
    const size_t rank = tensor->shape->n_dim;
    if (rank < 2 || rank > KILN_MAX_RANK + 1)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": graph input '%s' has %zu "
                          "dimensions; kiln imports 2 to %d (the batch first)", vi->name, rank,
                          KILN_MAX_RANK + 1);
    kiln_import_value *v = kiln_import_add_value(im, vi->name);
    if (!v)
        return kiln_error_oom(ctx, "a value", im->mem.oom_bytes);
    int32_t dims[KILN_MAX_RANK];
    for (size_t d = 0; d < rank; d++) {
        const KilnOnnx__TensorShapeProto__Dimension *dim = tensor->shape->dim[d];
        int64_t size = -1;
        if (dim->value_case == KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            size = dim->dim_value;
        else if (d > 0) {
            const char *param = dim->value_case ==
                KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dim->dim_param : "";
            for (int32_t k = 0; k < im->options->n_dims && size < 0 && *param; k++)
                if (im->options->dims[k].name && strcmp(im->options->dims[k].name, param) == 0)
                    size = im->options->dims[k].size;
            if (size < 0)
                return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, CALL ": graph input '%s' "
                                  "dimension %zu ('%s') has no size; give it in "
                                  "kiln_import_options.dims", vi->name, d, param);
        }
        if (d > 0 && (size < 1 || size > INT32_MAX))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, CALL ": graph input '%s' "
                              "dimension %zu is %lld; it must be in 1..2^31-1", vi->name, d,
                              (long long)size);
        v->dims[d] = d == 0 ? -1 : size;
        if (d > 0)
            dims[d - 1] = (int32_t)size;
    }
    v->computed = 1;
    v->rank = (int)rank;
    v->boolean = tensor->elem_type == KILN_ONNX_BOOL;   /* fed as floats 0 and 1 */
    const kiln_input_options io = {.struct_size = sizeof io, .name = vi->name};
    v->node = ints ? kiln_input_ints(im->m, (int32_t)rank - 1, dims, &io)
                   : kiln_input(im->m, (int32_t)rank - 1, dims, &io);
    if (v->node == KILN_NODE_INVALID)
        return kiln_error(ctx, im->m->graph.build_status, CALL ": graph input '%s': %s", vi->name,
                          im->m->graph.build_error);
    return KILN_OK;
}

/* The nodes in an order where each comes after what it reads: ONNX asks
 * for one already, but a file need not keep it. A node that never becomes
 * ready reads a value no node, initializer or input makes, or sits on a
 * cycle. */
static kiln_status order_nodes(kiln_importer *im, size_t *order)
{
    const KilnOnnx__GraphProto *g = im->g;
    char *done = kiln_onnx_alloc(&im->mem, g->n_node + 1);
    const char **made = kiln_onnx_alloc(&im->mem, (im->n_values + 1) * sizeof *made);
    size_t n_made = 0, n_done = 0;
    if (!done || !made)
        return kiln_error_oom(im->ctx, "the node order", im->mem.oom_bytes);
    for (size_t k = 0; k < im->n_values; k++)
        made[n_made++] = im->values[k].name;
    /* Outputs are appended as nodes are done; the table holds every
     * output of every node. */
    size_t outputs = 0;
    for (size_t k = 0; k < g->n_node; k++)
        outputs += g->node[k]->n_output;
    const char **all = kiln_onnx_alloc(&im->mem, (n_made + outputs + 1) * sizeof *all);
    if (!all)
        return kiln_error_oom(im->ctx, "the node order", im->mem.oom_bytes);
    memcpy(all, made, n_made * sizeof *all);
    for (int progress = 1; progress && n_done < g->n_node;) {
        progress = 0;
        for (size_t k = 0; k < g->n_node; k++) {
            const KilnOnnx__NodeProto *n = g->node[k];
            int ready = !done[k];
            for (size_t i = 0; ready && i < n->n_input; i++) {
                int found = !*n->input[i];   /* an optional input left out */
                for (size_t j = 0; !found && j < n_made; j++)
                    found = strcmp(all[j], n->input[i]) == 0;
                ready = found;
            }
            if (!ready)
                continue;
            done[k] = 1;
            order[n_done++] = k;
            for (size_t o = 0; o < n->n_output; o++)
                all[n_made++] = n->output[o];
            progress = 1;
        }
    }
    if (n_done == g->n_node)
        return KILN_OK;
    /* The first node left, and what it waits for. */
    for (size_t k = 0; k < g->n_node; k++) {
        if (done[k])
            continue;
        const KilnOnnx__NodeProto *n = g->node[k];
        for (size_t i = 0; i < n->n_input; i++) {
            int found = !*n->input[i];
            for (size_t j = 0; !found && j < n_made; j++)
                found = strcmp(all[j], n->input[i]) == 0;
            if (found)
                continue;
            int made_by_node = 0;
            for (size_t j = 0; j < g->n_node && !made_by_node; j++)
                for (size_t o = 0; o < g->node[j]->n_output; o++)
                    made_by_node |= strcmp(g->node[j]->output[o], n->input[i]) == 0;
            if (made_by_node)
                return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": the graph has a cycle: "
                                  "node '%s' (%s) reads '%s', which depends on its own output",
                                  kiln_import_node_name(n), n->op_type, n->input[i]);
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s) reads '%s', "
                              "which no node, initializer or graph input makes",
                              kiln_import_node_name(n), n->op_type, n->input[i]);
        }
    }
    return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": the graph's nodes cannot be ordered");
}

/* The versions kiln reads. */
static kiln_status check_versions(kiln_importer *im, const KilnOnnx__ModelProto *model)
{
    kiln_context *ctx = im->ctx;
    if (!model->has_ir_version && !model->graph)
        return kiln_error(ctx, KILN_ERROR_FORMAT, CALL ": the bytes parse as protobuf but hold no "
                          "IR version and no graph: not an ONNX model");
    if (!model->has_ir_version || model->ir_version < IR_FIRST || model->ir_version > IR_LAST)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": the model's IR version is %lld; "
                          "kiln imports IR %d to %d", (long long)model->ir_version, IR_FIRST,
                          IR_LAST);
    for (size_t k = 0; k < model->n_opset_import; k++) {
        const KilnOnnx__OperatorSetIdProto *o = model->opset_import[k];
        if (o->domain && *o->domain && strcmp(o->domain, "ai.onnx") != 0)
            continue;   /* a node of another domain is refused by its op */
        im->opset = (int)o->version;
        if (o->version < OPSET_FIRST || o->version > OPSET_LAST)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": the model imports opset "
                              "%lld; kiln imports opsets %d to %d", (long long)o->version,
                              OPSET_FIRST, OPSET_LAST);
    }
    if (!im->opset)
        return kiln_error(ctx, KILN_ERROR_FORMAT, CALL ": the model imports no version of the "
                          "ONNX operator set");
    if (!model->graph)
        return kiln_error(ctx, KILN_ERROR_FORMAT, CALL ": the model has no graph");
    return KILN_OK;
}

/* The names ONNX requires (protobuf leaves an absent one NULL). */
static kiln_status check_names(kiln_importer *im, const KilnOnnx__GraphProto *g)
{
    const char *missing = NULL;
    size_t at = 0;
    for (size_t k = 0; !missing && k < g->n_initializer; k++) {
        missing = g->initializer[k]->name ? NULL : "initializer";
        at = k;
    }
    for (size_t k = 0; !missing && k < g->n_input; k++) {
        missing = g->input[k]->name ? NULL : "graph input";
        at = k;
    }
    for (size_t k = 0; !missing && k < g->n_output; k++) {
        missing = g->output[k]->name ? NULL : "graph output";
        at = k;
    }
    for (size_t k = 0; !missing && k < g->n_node; k++) {
        const KilnOnnx__NodeProto *n = g->node[k];
        at = k;
        missing = n->op_type ? NULL : "node's op (node)";
        for (size_t a = 0; !missing && a < n->n_attribute; a++)
            missing = n->attribute[a]->name ? NULL : "node's attribute (node)";
    }
    if (missing)
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": %s %zu has no name", missing, at);
    return KILN_OK;
}

static kiln_status import_model(kiln_importer *im, const KilnOnnx__ModelProto *model)
{
    kiln_status st = check_versions(im, model);
    if (st == KILN_OK)
        st = check_names(im, model->graph);
    if (st != KILN_OK)
        return st;
    const KilnOnnx__GraphProto *g = im->g = model->graph;
    if (g->n_sparse_initializer)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": the graph has sparse "
                          "initializers ('%s'); kiln imports dense ones",
                          g->sparse_initializer[0]->values ?
                              g->sparse_initializer[0]->values->name : "");
    for (size_t k = 0; k < g->n_initializer && st == KILN_OK; k++)
        st = kiln_import_tensor(im, g->initializer[k], g->initializer[k]->name, NULL);
    for (size_t k = 0; k < g->n_input && st == KILN_OK; k++)
        if (!kiln_import_find(im, g->input[k]->name))   /* not an initializer */
            st = declare_input(im, g->input[k]);
    if (st != KILN_OK)
        return st;
    if (im->m->graph.n_nodes == 0)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": the graph has no input but "
                          "its initializers");
    size_t *order = kiln_onnx_alloc(&im->mem, (g->n_node + 1) * sizeof *order);
    im->skip = kiln_onnx_alloc(&im->mem, g->n_node + 1);
    im->replace = kiln_onnx_alloc(&im->mem, (g->n_node + 1) * sizeof *im->replace);
    if (!order || !im->skip || !im->replace)
        return kiln_error_oom(im->ctx, "the node order", im->mem.oom_bytes);
    st = order_nodes(im, order);
    if (st == KILN_OK)
        st = kiln_import_patterns(im);
    for (size_t k = 0; k < g->n_node && st == KILN_OK; k++)
        if (!im->skip[order[k]])
            st = kiln_import_node(im, order[k]);
    if (st != KILN_OK)
        return st;
    if (g->n_output < 1 || g->n_output > KILN_MAX_MODEL_OUTPUTS)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": the graph has %zu outputs; "
                          "kiln models have 1 to %d", g->n_output, KILN_MAX_MODEL_OUTPUTS);
    kiln_node outputs[KILN_MAX_MODEL_OUTPUTS];
    for (size_t k = 0; k < g->n_output && st == KILN_OK; k++) {
        kiln_import_value *v = kiln_import_find(im, g->output[k]->name);
        if (!v || !v->computed)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": graph output '%s' is %s",
                              g->output[k]->name, v ? "a constant" : "made by no node");
        st = kiln_import_output(im, v, &outputs[k]);
    }
    if (st == KILN_OK && im->m->graph.build_status != KILN_OK)
        st = kiln_error(im->ctx, im->m->graph.build_status, CALL ": %s", im->m->graph.build_error);
    if (st == KILN_OK)
        st = kiln_model_set_outputs(im->m, outputs, (int32_t)g->n_output);
    return st;
}

static kiln_status import_bytes(kiln_context *ctx, const void *data, size_t size,
                                const char *folder, const kiln_import_options *options,
                                kiln_model **out)
{
    kiln_import_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_import_options", &why)
        != KILN_OK)
        return kiln_error(ctx, why.status, CALL ": %s", why.message);
    if (o.n_dims < 0 || (o.n_dims > 0 && !o.dims))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, CALL ": kiln_import_options.dims "
                          "is %s with n_dims %d", o.dims ? "set" : "NULL", (int)o.n_dims);
    kiln_importer im = {.ctx = ctx, .options = &o, .folder = o.base_folder ? o.base_folder
                                                                           : folder};
    kiln_status st = kiln_onnx_graph_init(&im.mem, &ctx->host, NULL, 0);
    if (st != KILN_OK)
        return kiln_error_oom(ctx, "the importer", im.mem.oom_bytes);
    ProtobufCAllocator allocator = {.alloc = pb_alloc, .free = pb_free,
                                    .allocator_data = &ctx->host};
    KilnOnnx__ModelProto *model = kiln_onnx__model_proto__unpack(&allocator, size, data);
    if (!model) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, CALL ": the %zu bytes are not an ONNX model "
                        "(the protobuf does not parse: not ONNX, truncated or corrupt)", size);
        goto fail;
    }
    st = kiln_model_create(ctx, &im.m);
    if (st == KILN_OK)
        st = import_model(&im, model);
fail:
    if (model)
        kiln_onnx__model_proto__free_unpacked(model, &allocator);
    kiln_onnx_graph_free(&im.mem);
    if (st != KILN_OK) {
        kiln_model_destroy(im.m);
        return st;
    }
    *out = im.m;
    return KILN_OK;
}

#endif /* KILN_HAVE_ONNX */

#if !KILN_HAVE_ONNX
/* Without the feature the calls say so. */
static kiln_status no_onnx(kiln_context *ctx)
{
    return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_import_onnx: this kiln was "
                      "built without ONNX (meson feature 'onnx': it needs libprotobuf-c, "
                      "protoc-c and ONNX's onnx.proto)");
}
#endif

kiln_status kiln_model_import_onnx_buffer(kiln_context *ctx, const void *data, size_t size,
                                          const kiln_import_options *options, kiln_model **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out || !data)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_import_onnx_buffer: %s "
                          "is NULL", out ? "data" : "out");
#if KILN_HAVE_ONNX
    return import_bytes(ctx, data, size, NULL, options, out);
#else
    (void)size;
    (void)options;
    return no_onnx(ctx);
#endif
}

kiln_status kiln_model_import_onnx(kiln_context *ctx, const char *path,
                                   const kiln_import_options *options, kiln_model **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out || !path || !*path)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_import_onnx: %s",
                          !out ? "out is NULL" : path ? "path is empty" : "path is NULL");
#if KILN_HAVE_ONNX
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": cannot open %s: %s", path,
                          strerror(errno));
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0)
        size = ftell(fp);
    unsigned char *data = size >= 0 ? kiln_alloc(ctx, (size_t)size + 1) : NULL;
    const int read = data && fseek(fp, 0, SEEK_SET) == 0 &&
                     fread(data, 1, (size_t)size, fp) == (size_t)size;
    fclose(fp);
    if (!read) {
        kiln_free(ctx, data);
        return size >= 0 && !data ? kiln_error_oom(ctx, "the ONNX file", (size_t)size)
                                  : kiln_error(ctx, KILN_ERROR_IO, CALL ": cannot read %s",
                                               path);
    }
    /* External data is named relative to the model's folder. */
    char folder[4096];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(folder, sizeof folder, ".");
    const kiln_status st = import_bytes(ctx, data, (size_t)size, folder, options, out);
    kiln_free(ctx, data);
    return st;
#else
    (void)options;
    return no_onnx(ctx);
#endif
}
