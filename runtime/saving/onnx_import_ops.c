/* The importer's ops (onnx_import.h): the table from ONNX op to layer kind
 * (whose import_onnx op reads the node) or to a handler here for the ops
 * that are not one kind (Identity, Constant, Flatten, Reshape, MatMul with
 * its Add), and the layouts: a 4-D value is held channels-last where a
 * channels-last layer made it, in ONNX's order otherwise, and permuted
 * once where a node wants the other. */
#include "base/hash.h"
#include "runtime/saving/onnx_import.h"

#include <stdio.h>
#include <string.h>

#define CALL KILN_IMPORT_CALL
/* The batch in a folded shape (Shape of a computed value): not a size. */
#define BATCH INT64_MIN

typedef kiln_status (*op_handler)(kiln_importer *im, const KilnOnnx__NodeProto *n);

static int64_t count_of(const kiln_import_value *v);

/* The layer error the model recorded, with the node's name and op. */
static kiln_status build_error(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    return kiln_error(im->ctx, im->m->graph.build_status, CALL ": node '%s' (%s): %s",
                      kiln_import_node_name(n), n->op_type, im->m->graph.build_error);
}

/* How many nodes and graph outputs read `name`; *reader the last node. */
static int readers(const kiln_importer *im, const char *name, size_t *reader)
{
    int count = 0;
    for (size_t k = 0; k < im->g->n_node; k++)
        for (size_t i = 0; i < im->g->node[k]->n_input; i++)
            if (strcmp(im->g->node[k]->input[i], name) == 0) {
                count++;
                *reader = k;
            }
    for (size_t k = 0; k < im->g->n_output; k++)
        count += strcmp(im->g->output[k]->name, name) == 0;
    return count;
}

/* As readers(), but a node a pattern's chain took (skipped, its reads
 * the chain's one op's) not counted, and each node once. */
static int live_readers(const kiln_importer *im, const char *name)
{
    int count = 0;
    for (size_t k = 0; k < im->g->n_node; k++) {
        const KilnOnnx__NodeProto *n = im->replace[k] ? im->replace[k] : im->g->node[k];
        int reads = 0;
        for (size_t i = 0; !im->skip[k] && i < n->n_input; i++)
            reads |= strcmp(n->input[i], name) == 0;
        count += reads;
    }
    for (size_t k = 0; k < im->g->n_output; k++)
        count += strcmp(im->g->output[k]->name, name) == 0;
    return count;
}

/* v's layer in `cl` layout (a value of another rank has one layout). */
static kiln_status in_layout(kiln_importer *im, kiln_import_value *v, int cl, kiln_node *node)
{
    *node = v->node;
    if (v->rank != 4 || v->cl == cl)
        return KILN_OK;
    if (v->converted == KILN_NODE_INVALID) {
        const kiln_shape *s = &im->m->graph.nodes[v->node].shape;
        /* One channel, or one pixel: both layouts hold the values in one
         * order, and a reshape (a copy) does what a permute would. */
        const int32_t c = s->rank == 3 ? s->dims[cl ? 0 : 2] : 0;
        const int32_t pixels = s->rank == 3 ? s->dims[cl ? 1 : 0] * s->dims[cl ? 2 : 1] : 0;
        if (cl && s->rank == 1) {   /* (C) of a (N, C, 1, 1): the same values */
            const int32_t dims[3] = {1, 1, s->dims[0]};
            v->converted = kiln_reshape(im->m, v->node, 3, dims, NULL);
        } else if (s->rank == 3 && (c == 1 || pixels == 1)) {
            const int32_t to_cl[3] = {s->dims[1], s->dims[2], s->dims[0]};
            const int32_t to_cf[3] = {s->dims[2], s->dims[0], s->dims[1]};
            v->converted = kiln_reshape(im->m, v->node, 3, cl ? to_cl : to_cf, NULL);
        } else {
            const int32_t to_cl[3] = {2, 3, 1}, to_cf[3] = {3, 1, 2};
            v->converted = kiln_permute(im->m, v->node, 3, cl ? to_cl : to_cf, NULL);
        }
        if (v->converted == KILN_NODE_INVALID)
            return kiln_error(im->ctx, im->m->graph.build_status, CALL ": converting '%s' to %s: %s",
                              v->name, cl ? "channels-last" : "channels-first",
                              im->m->graph.build_error);
    }
    *node = v->converted;
    return KILN_OK;
}

/* The computed value `name` (node n's input k). */
static kiln_status computed(kiln_importer *im, const KilnOnnx__NodeProto *n, size_t k,
                            kiln_import_value **out)
{
    *out = k < n->n_input ? kiln_import_find(im, n->input[k]) : NULL;
    if (!*out || !(*out)->computed)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): input %zu "
                          "'%s' is %s; kiln takes a value the graph computes there",
                          kiln_import_node_name(n), n->op_type, k,
                          k < n->n_input ? n->input[k] : "", *out ? "a constant" : "missing");
    return KILN_OK;
}

/* Records node's output as layer `node`'s, in ONNX dims (batch first). */
static kiln_status made(kiln_importer *im, const KilnOnnx__NodeProto *n, kiln_node node, int cl,
                        const kiln_import_value *like)
{
    if (node == KILN_NODE_INVALID)
        return build_error(im, n);
    kiln_import_value *v = kiln_import_add_value(im, n->output[0]);
    if (!v)
        return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
    const kiln_shape *s = &im->m->graph.nodes[node].shape;
    v->computed = 1;
    v->node = node;
    v->cl = cl && s->rank == 3;
    if (like) {   /* element-wise: the input's ONNX shape */
        v->rank = like->rank;
        memcpy(v->dims, like->dims, sizeof v->dims);
        return KILN_OK;
    }
    v->rank = s->rank + 1;
    v->dims[0] = -1;
    for (int32_t d = 0; d < s->rank; d++)
        v->dims[d + 1] = s->dims[d];
    if (v->cl) {
        v->dims[1] = s->dims[2];
        v->dims[2] = s->dims[0];
        v->dims[3] = s->dims[1];
    }
    return KILN_OK;
}

/* The node's attributes as layers/onnx_import.h has them. */
static kiln_status read_attrs(kiln_importer *im, const KilnOnnx__NodeProto *n,
                              kiln_onnx_import *imp)
{
    /* Two spare: a folded Pad's pads and count_include_pad (fold_pads). */
    kiln_onnx_in_attr *attrs = kiln_onnx_alloc(&im->mem, (n->n_attribute + 2) * sizeof *attrs);
    if (!attrs)
        return kiln_error_oom(im->ctx, "attributes", im->mem.oom_bytes);
    for (size_t k = 0; k < n->n_attribute; k++) {
        const KilnOnnx__AttributeProto *a = n->attribute[k];
        kiln_onnx_in_attr *t = &attrs[k];
        t->name = a->name ? a->name : "";
        switch (a->type) {
        case KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
            t->kind = KILN_ONNX_IN_INT;
            t->i = a->i;
            break;
        case KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
            t->kind = KILN_ONNX_IN_FLOAT;
            t->f = a->f;
            break;
        case KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
            t->kind = KILN_ONNX_IN_INTS;
            t->ints = a->ints;
            t->n_ints = a->n_ints;
            break;
        case KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
            char *s = kiln_onnx_alloc(&im->mem, a->s.len + 1);
            if (!s)
                return kiln_error_oom(im->ctx, "attributes", im->mem.oom_bytes);
            if (a->s.len)
                memcpy(s, a->s.data, a->s.len);
            t->kind = KILN_ONNX_IN_STRING;
            t->s = s;
            break;
        }
        default:
            t->kind = KILN_ONNX_IN_OTHER;
            break;
        }
    }
    imp->attrs = attrs;
    imp->n_attrs = n->n_attribute;
    return KILN_OK;
}

/* imp's inputs from n's, plus `extra` (MatMul's bias) when not NULL. */
static kiln_status read_inputs(kiln_importer *im, const KilnOnnx__NodeProto *n,
                               kiln_onnx_import *imp, const char *extra)
{
    const size_t count = n->n_input + (extra != NULL);
    if (count > KILN_ONNX_MAX_NODE_INPUTS)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s) has %zu "
                          "inputs; kiln imports nodes of up to %d", kiln_import_node_name(n),
                          n->op_type, n->n_input, KILN_ONNX_MAX_NODE_INPUTS);
    for (size_t k = 0; k < count; k++) {
        const char *name = k < n->n_input ? n->input[k] : extra;
        kiln_onnx_in *in = &imp->in[k];
        in->name = name;
        if (!*name)
            continue;
        const kiln_import_value *v = kiln_import_find(im, name);
        in->rank = v->rank;
        memcpy(in->dims, v->dims, sizeof in->dims);
        in->data = v->f;
        in->held = !v->computed || v->rank != 4 || v->converted != KILN_NODE_INVALID
                       ? KILN_ONNX_WANT_ANY
                   : v->cl ? KILN_ONNX_WANT_CHANNELS_LAST : KILN_ONNX_WANT_ONNX;
        if (!v->computed && !v->f) {   /* integers as floats for the ops that read them */
            int64_t size = 1;
            for (int d = 0; d < v->rank; d++)
                size *= v->dims[d];
            float *f = kiln_onnx_alloc(&im->mem, (size_t)(size + 1) * sizeof *f);
            if (!f)
                return kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
            for (int64_t i = 0; i < size; i++)
                f[i] = (float)v->ints[i];
            in->data = f;
        }
    }
    imp->n_in = (int)count;
    return KILN_OK;
}

/* Parameter p of layer `node` from its initializer, in kiln's layout,
 * under the initializer's name. */
static kiln_status take_param(kiln_importer *im, const KilnOnnx__NodeProto *n,
                              const kiln_onnx_import *imp, kiln_node node, int p)
{
    kiln_context *ctx = im->ctx;
    kiln_node_rec *rec = &im->m->graph.nodes[node];
    const kiln_onnx_in *t = &imp->in[imp->param_input[p]];
    kiln_import_value *v = kiln_import_find(im, t->name);
    const kiln_param_spec *spec = &rec->params[p];
    int64_t size = 1;
    for (int d = 0; d < t->rank; d++)
        size *= t->dims[d];
    if (size != kiln_shape_size(&spec->shape)) {
        char s[64];
        return kiln_error(ctx, KILN_ERROR_SHAPE, CALL ": node '%s' (%s): initializer '%s' holds "
                          "%lld values; the layer's %s is %s", kiln_import_node_name(n),
                          n->op_type, t->name, (long long)size, spec->name,
                          kiln_shape_str(&spec->shape, s, sizeof s));
    }
    /* kiln_parameter_info holds names of up to 95 bytes. */
    if (strlen(t->name) >= sizeof ((kiln_parameter_info *)0)->name)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): initializer "
                          "'%s' has a name of %zu bytes; kiln keeps parameter names of up to "
                          "%zu", kiln_import_node_name(n), n->op_type, t->name, strlen(t->name),
                          sizeof ((kiln_parameter_info *)0)->name - 1);
    /* W of MatMul(x, Transpose(W)): the parameter is W, held as kiln's
     * (in, out) and written back transposed. */
    const int untransposed = v->transpose_of && imp->param_layout[p] == KILN_ONNX_PARAM_AS_IS &&
                             t->rank == 2;
    kiln_import_value *origin = untransposed ? kiln_import_find(im, v->transpose_of) : NULL;
    const char *pname = origin ? origin->name : t->name;
    kiln_import_value *owner = origin ? origin : v;
    if (owner->param_of || (origin && v->param_of))
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": initializer '%s' is used by node "
                          "'%s' and node '%s'; kiln cannot tie parameters (give each node its "
                          "own copy, an Identity)", pname,
                          owner->param_of ? owner->param_of : v->param_of,
                          kiln_import_node_name(n));
    owner->param_of = v->param_of = kiln_import_node_name(n);
    rec->param_name[p] = kiln_strdup(ctx, pname);
    rec->param_init[p] = kiln_alloc(ctx, (size_t)(size ? size : 1) * sizeof(float));
    if (!rec->param_name[p] || !rec->param_init[p])
        return kiln_error_oom(ctx, "a parameter", (size_t)size * sizeof(float));
    kiln_onnx_param_convert(t, imp->param_layout[p], rec->param_init[p]);
    rec->param_transposed[p] = imp->param_layout[p] == KILN_ONNX_PARAM_TRANSPOSED || origin;
    return KILN_OK;
}

/* The attribute `name` of imp, appended (read_attrs left room for two) when
 * absent. */
static kiln_onnx_in_attr *set_attr(kiln_onnx_import *imp, const char *name)
{
    kiln_onnx_in_attr *a = (kiln_onnx_in_attr *)kiln_onnx_find_attr(imp, name);
    if (!a) {
        a = (kiln_onnx_in_attr *)&imp->attrs[imp->n_attrs++];
        *a = (kiln_onnx_in_attr){.name = name};
    }
    return a;
}

/* A Pad that import_pad folded into this Conv or AveragePool (pad_foldable
 * said it may): its zeros added to the node's own pads. An AveragePool
 * then counts its pads (count_include_pad 1): the Pad's zeros are values
 * it averages. */
static kiln_status fold_pads(kiln_importer *im, kiln_onnx_import *imp,
                             const kiln_import_value *v)
{
    if (strcmp(imp->op, "AveragePool") == 0) {
        kiln_onnx_in_attr *count = set_attr(imp, "count_include_pad");
        count->kind = KILN_ONNX_IN_INT;
        count->i = 1;
    }
    const kiln_onnx_in_attr *own = kiln_onnx_find_attr(imp, "pads");
    if (own && (own->kind != KILN_ONNX_IN_INTS || own->n_ints != 4))
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): attribute "
                          "'pads' must be 4 ints (2-D windows)", imp->node, imp->op);
    int64_t *sum = kiln_onnx_alloc(&im->mem, 4 * sizeof *sum);
    if (!sum)
        return kiln_error_oom(im->ctx, "attributes", im->mem.oom_bytes);
    for (int a = 0; a < 4; a++)   /* (top, left, bottom, right) both */
        sum[a] = (own ? own->ints[a] : 0) + v->pads[a];
    kiln_onnx_in_attr *pads = set_attr(imp, "pads");
    pads->kind = KILN_ONNX_IN_INTS;
    pads->ints = sum;
    pads->n_ints = 4;
    imp->in[0].dims[2] -= v->pads[0] + v->pads[2];
    imp->in[0].dims[3] -= v->pads[1] + v->pads[3];
    return KILN_OK;
}

/* An activation whose input is the output of a layer that takes one (a
 * Conv, ConvTranspose, Gemm/MatMul or BatchNormalization without its own),
 * read by nothing else, becomes that layer's activation, as kiln_conv2d's
 * .activation would: one pass over the output and one buffer fewer, the
 * same numbers. The layer then takes the activation's name, since its
 * output is the activation's: a model cut at the Relu as the file names it
 * is cut where it was, and the earlier layer's name, whose output no
 * longer exists, is not found. Softmax and LogSoftmax keep their layer
 * (the axis is theirs to choose), as does a LeakyRelu of its own slope.
 * Nonzero when it fused (*st the result). */
static int fuse_activation(kiln_importer *im, const KilnOnnx__NodeProto *n,
                           const kiln_onnx_import *imp, kiln_status *st)
{
    const kiln_activation_layer_options *o =
        (const kiln_activation_layer_options *)(const void *)imp->args.bytes;
    if (imp->activation == KILN_ACTIVATION_LINEAR || imp->activation == KILN_ACTIVATION_SOFTMAX ||
        imp->activation == KILN_ACTIVATION_LOG_SOFTMAX || o->negative_slope != 0.0f)
        return 0;
    kiln_import_value *v = kiln_import_find(im, n->input[0]);
    if (!v || !v->computed || v->padded || v->converted != KILN_NODE_INVALID ||
        live_readers(im, v->name) != 1)
        return 0;
    if (!kiln_node_take_activation(im->m, v->node, imp->activation, kiln_import_node_name(n)))
        return 0;
    *st = made(im, n, v->node, v->cl, v);
    return 1;
}

/* A node whose op is one layer kind: the kind reads it, and its layer
 * makes the node's first output; where it refuses and `other` is given,
 * `other` reads it (ReduceMean over H and W is a global average pool, over
 * other axes a reduce layer). `extra` is a further input (MatMul's bias,
 * from the Add joined to it). */
static kiln_status import_kind_or(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                  const kiln_layer_ops *ops, const kiln_layer_ops *other,
                                  const char *extra)
{
    const char *name = kiln_import_node_name(n);
    kiln_onnx_import imp = {.op = n->op_type, .node = name, .opset = im->opset};
    kiln_status st = read_attrs(im, n, &imp);
    if (st == KILN_OK)
        st = read_inputs(im, n, &imp, extra);
    if (st != KILN_OK)
        return st;
    if (n->n_input < 1 || !*n->input[0])
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s) has no input",
                          name, n->op_type);
    const kiln_import_value *in0 = kiln_import_find(im, n->input[0]);
    if (in0 && in0->padded && (st = fold_pads(im, &imp, in0)) != KILN_OK)
        return st;
    const kiln_onnx_import unread = imp;
    st = ops->import_onnx(&imp);
    if (st == KILN_ERROR_UNSUPPORTED && other) {
        imp = unread;
        ops = other;
        st = ops->import_onnx(&imp);
    }
    if (st != KILN_OK)
        return kiln_error(im->ctx, st, CALL ": node '%s' (%s): %s", name, n->op_type, imp.error);
    if (ops == &kiln_layer_activation && fuse_activation(im, n, &imp, &st))
        return st;
    if (ops == &kiln_layer_batch_norm && im->options->synchronized_batch_norm)
        ((kiln_batch_norm_options *)(void *)imp.args.bytes)->synchronized = 1;
    kiln_import_value *first;
    st = computed(im, n, 0, &first);
    if (st != KILN_OK)
        return st;
    const int cl = imp.want == KILN_ONNX_WANT_ANY ? first->cl
                                                  : imp.want == KILN_ONNX_WANT_CHANNELS_LAST;
    kiln_node inputs[KILN_MAX_INPUTS];
    for (int k = 0; k < imp.n_data && st == KILN_OK; k++) {
        kiln_import_value *v;
        st = computed(im, n, (size_t)k, &v);
        if (st == KILN_OK)
            st = in_layout(im, v, cl, &inputs[k]);
    }
    if (st != KILN_OK)
        return st;
    const kiln_node node = kiln_model_add_layer(im->m, ops, ops->configure ? &imp.args : NULL,
                                                inputs, imp.n_data, name, imp.activation);
    if (node == KILN_NODE_INVALID)
        return build_error(im, n);
    for (int p = 0; p < imp.n_params && st == KILN_OK; p++)
        st = take_param(im, n, &imp, node, p);
    if (st != KILN_OK)
        return st;
    if (imp.out_rank) {   /* GlobalAveragePool's (N, C, 1, 1), ReduceMean's (N, C) */
        st = made(im, n, node, 0, NULL);
        kiln_import_value *v = kiln_import_find(im, n->output[0]);
        if (st == KILN_OK)
            for (v->rank = 2; v->rank < imp.out_rank; v->rank++)
                v->dims[v->rank] = 1;
        if (st == KILN_OK && imp.out_rank == 1)   /* a reduction to (N): kiln's (1) */
            v->rank = 1;
        return st;
    }
    return made(im, n, node, cl, imp.want == KILN_ONNX_WANT_ANY ? first : NULL);
}

static kiln_status import_kind(kiln_importer *im, const KilnOnnx__NodeProto *n,
                               const kiln_layer_ops *ops, const char *extra)
{
    return import_kind_or(im, n, ops, NULL, extra);
}

/* ---- the ops that are not one kind -------------------------------------- */

/* An Identity of a constant is a constant of its own (a parameter named
 * after its output, as PyTorch's exporter writes copies of equal
 * initializers); of a computed value, a linear Activation keeping the
 * node's name. */
static kiln_status import_identity(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *in = kiln_import_find(im, n->input[0]);
    if (in->computed) {
        const kiln_node node = kiln_activation_layer(
            im->m, in->node, KILN_ACTIVATION_LINEAR,
            &(kiln_activation_layer_options){.struct_size = sizeof(kiln_activation_layer_options),
                                             .name = kiln_import_node_name(n)});
        return made(im, n, node, in->cl, in);
    }
    const kiln_import_value copy = *in;
    kiln_import_value *v = kiln_import_add_value(im, n->output[0]);
    if (!v)
        return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
    *v = copy;
    v->name = n->output[0];
    v->param_of = NULL;
    return KILN_OK;
}

static kiln_status import_constant(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    for (size_t k = 0; k < n->n_attribute; k++) {
        const KilnOnnx__AttributeProto *a = n->attribute[k];
        if (strcmp(a->name, "value") == 0 && a->t)
            return kiln_import_tensor(im, a->t, n->output[0], name);
        if (strcmp(a->name, "value_float") == 0 || strcmp(a->name, "value_int") == 0 ||
            strcmp(a->name, "value_floats") == 0 || strcmp(a->name, "value_ints") == 0) {
            const int floats = a->name[6] == 'f', list = a->name[strlen(a->name) - 1] == 's';
            KilnOnnx__TensorProto t = KILN_ONNX__TENSOR_PROTO__INIT;
            int64_t dims[1] = {(int64_t)(floats ? a->n_floats : a->n_ints)};
            t.has_data_type = 1;
            t.data_type = floats ? KILN_ONNX_FLOAT : KILN_ONNX_INT64;
            t.n_dims = list ? 1 : 0;
            t.dims = dims;
            t.n_float_data = floats ? (list ? a->n_floats : 1) : 0;
            t.float_data = list ? a->floats : &((KilnOnnx__AttributeProto *)a)->f;
            t.n_int64_data = floats ? 0 : (list ? a->n_ints : 1);
            t.int64_data = list ? a->ints : &((KilnOnnx__AttributeProto *)a)->i;
            return kiln_import_tensor(im, &t, n->output[0], name);
        }
    }
    return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Constant): kiln reads "
                      "attribute value, value_float(s) or value_int(s)", name);
}

/* Cast of a constant to float, folded: PyTorch writes F.relu6's bounds as
 * Constant -> Cast -> Clip; of an integer constant to int64, as it writes
 * nn.ZeroPad2d's pads. A cast of a computed value, or to another type, is
 * refused. */
static kiln_status import_cast(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    int64_t to = 0;
    for (size_t k = 0; k < n->n_attribute; k++)
        if (strcmp(n->attribute[k]->name, "to") == 0)
            to = n->attribute[k]->i;
    kiln_import_value *in = n->n_input > 0 ? kiln_import_find(im, n->input[0]) : NULL;
    if (to == KILN_ONNX_INT64 && in && !in->computed && in->ints) {
        /* An integer constant to int64 (nn.ZeroPad2d's pads): the same. */
        const kiln_import_value copy = *in;
        kiln_import_value *v = kiln_import_add_value(im, n->output[0]);
        if (!v)
            return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
        *v = copy;
        v->name = n->output[0];
        v->param_of = NULL;
        return KILN_OK;
    }
    if (to != KILN_ONNX_FLOAT || !in || in->computed || (!in->f && !in->ints))
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Cast): kiln folds a "
                          "cast of a constant to float (to = 1) or of an integer constant to "
                          "int64 (to = 7) only; this one casts %s to %lld",
                          name, in && in->computed ? "a computed value" : "no constant",
                          (long long)to);
    int64_t count = 1;
    for (int d = 0; d < in->rank; d++)
        count *= in->dims[d];
    float *f = kiln_onnx_alloc(&im->mem, (size_t)(count + 1) * sizeof *f);
    kiln_import_value *v = f ? kiln_import_add_value(im, n->output[0]) : NULL;
    if (!v)
        return kiln_error(im->ctx, KILN_ERROR_OUT_OF_MEMORY, CALL ": node '%s' (Cast): out of "
                          "memory", name);
    for (int64_t k = 0; k < count; k++)
        f[k] = in->f ? in->f[k] : (float)in->ints[k];
    v->rank = in->rank;
    memcpy(v->dims, in->dims, sizeof v->dims);
    v->f = f;
    v->constant_node = in->constant_node;
    return KILN_OK;
}

/* ReduceMean, ReduceSum, ReduceMax, ReduceMin: with noop_with_empty_axes
 * and no axes (none given, or an empty constant), ONNX's identity;
 * ReduceMean over H and W a global average pool; else a reduce layer. */
static kiln_status import_reduce(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    int noop = 0, axes_attr = 0;
    for (size_t k = 0; k < n->n_attribute; k++) {
        noop |= strcmp(n->attribute[k]->name, "noop_with_empty_axes") == 0 &&
                n->attribute[k]->i != 0;
        axes_attr |= strcmp(n->attribute[k]->name, "axes") == 0 && n->attribute[k]->n_ints;
    }
    const kiln_import_value *axes = n->n_input > 1 && *n->input[1]
                                        ? kiln_import_find(im, n->input[1]) : NULL;
    const int no_axes = !axes_attr && (!axes || (!axes->computed && count_of(axes) == 0));
    if (noop && no_axes)
        return import_identity(im, n);
    const int mean = strcmp(n->op_type, "ReduceMean") == 0;
    return import_kind_or(im, n, mean ? &kiln_layer_global_average_pooling2d
                                      : &kiln_layer_reduce,
                          mean ? &kiln_layer_reduce : NULL, NULL);
}

/* LayerNormalization over the last axis is a layer_norm; over the axes
 * from `axis` (not the batch) through the last, the same on the value
 * reshaped so that those axes are one (Scale and B then hold their
 * product's values, in order), reshaped back: exact, whatever the axes. */
static kiln_status import_layer_norm(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    kiln_status st = computed(im, n, 0, &v);
    if (st != KILN_OK)
        return st;
    int64_t axis = -1;
    for (size_t k = 0; k < n->n_attribute; k++)
        if (strcmp(n->attribute[k]->name, "axis") == 0)
            axis = n->attribute[k]->i;
    const int rank = v->rank;
    axis = axis < 0 ? axis + rank : axis;
    if (axis <= 0 || axis >= rank - 1 || n->n_input > 3)   /* the kind takes it or refuses */
        return import_kind(im, n, &kiln_layer_layer_norm, NULL);
    kiln_node in;
    if ((st = in_layout(im, v, 0, &in)) != KILN_OK)
        return st;
    int32_t flat[KILN_MAX_RANK], back[KILN_MAX_RANK];
    int64_t len = 1;
    for (int d = 1; d < rank; d++) {
        back[d - 1] = (int32_t)v->dims[d];
        if (d < axis)
            flat[d - 1] = (int32_t)v->dims[d];
        else
            len *= v->dims[d];
    }
    flat[axis - 1] = (int32_t)len;   /* a sample's size: it fits */
    const kiln_node flattened = kiln_reshape(im->m, in, (int32_t)axis, flat, NULL);
    if (flattened == KILN_NODE_INVALID)
        return build_error(im, n);
    const char *names[2] = {kiln_onnx_printf(&im->mem, "%s/flattened", n->output[0]),
                            kiln_onnx_printf(&im->mem, "%s/normalized", n->output[0])};
    const char **inputs = kiln_onnx_alloc(&im->mem, n->n_input * sizeof *inputs);
    kiln_import_value *fv = names[0] && names[1] && inputs
                                ? kiln_import_add_value(im, names[0]) : NULL;
    if (!fv)
        return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
    fv->computed = 1;
    fv->node = flattened;
    fv->rank = (int)axis + 1;
    fv->dims[0] = -1;
    for (int d = 1; d <= axis; d++)
        fv->dims[d] = d < axis ? flat[d - 1] : len;
    /* The node on the flattened value, whose last axis is the one to
     * normalise: its axis attribute made -1. */
    KilnOnnx__AttributeProto **attrs = kiln_onnx_alloc(&im->mem, n->n_attribute * sizeof *attrs);
    KilnOnnx__AttributeProto *last = kiln_onnx_alloc(&im->mem, sizeof *last);
    if (!attrs || !last)
        return kiln_error_oom(im->ctx, "an attribute", im->mem.oom_bytes);
    for (size_t k = 0; k < n->n_attribute; k++) {
        attrs[k] = n->attribute[k];
        if (strcmp(n->attribute[k]->name, "axis") == 0) {
            *last = *n->attribute[k];
            last->i = -1;
            attrs[k] = last;
        }
    }
    KilnOnnx__NodeProto norm = *n;
    norm.attribute = attrs;
    memcpy(inputs, n->input, n->n_input * sizeof *inputs);
    inputs[0] = names[0];
    norm.input = (char **)inputs;
    norm.output = (char **)&names[1];
    norm.n_output = 1;
    norm.name = (char *)kiln_import_node_name(n);
    if ((st = import_kind(im, &norm, &kiln_layer_layer_norm, NULL)) != KILN_OK)
        return st;
    const kiln_node restored = kiln_reshape(im->m, kiln_import_find(im, names[1])->node,
                                            rank - 1, back, NULL);
    return made(im, n, restored, 0, kiln_import_find(im, n->input[0]));
}

/* Flatten keeps ONNX's element order: a channels-last value is permuted
 * to channels-first first, so that a Gemm after it computes what it did. */
static kiln_status import_flatten(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    kiln_status st = computed(im, n, 0, &v);
    if (st != KILN_OK)
        return st;
    int64_t axis = 1;
    for (size_t k = 0; k < n->n_attribute; k++) {
        if (strcmp(n->attribute[k]->name, "axis") != 0)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Flatten): "
                              "attribute '%s' is not supported (Flatten reads axis)",
                              kiln_import_node_name(n), n->attribute[k]->name);
        axis = n->attribute[k]->i;
    }
    if (axis < 0)
        axis += v->rank;
    if (axis != 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Flatten): "
                          "attribute 'axis' is %lld; kiln supports 1 (the batch kept)",
                          kiln_import_node_name(n), (long long)axis);
    kiln_node in;
    st = in_layout(im, v, 0, &in);
    if (st != KILN_OK)
        return st;
    return made(im, n, kiln_flatten(im->m, in,
                                        &(kiln_flatten_options){
                                            .struct_size = sizeof(kiln_flatten_options),
                                            .name = kiln_import_node_name(n)}), 0, NULL);
}

/* A Transpose of a float constant, folded (PyTorch's older exporter
 * writes Linear without a bias as Transpose(W) -> MatMul): perm as ONNX
 * has it, the axes reversed when absent. */
static kiln_status fold_transpose(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                  const kiln_import_value *in,
                                  const KilnOnnx__AttributeProto *perm)
{
    const char *name = kiln_import_node_name(n);
    const int rank = in->rank;
    int64_t p[KILN_MAX_RANK + 1], dims[KILN_MAX_RANK + 1], stride[KILN_MAX_RANK + 1];
    int seen = 0, ok = !perm || perm->n_ints == (size_t)rank;
    for (int d = 0; ok && d < rank; d++) {
        p[d] = perm ? perm->ints[d] : rank - 1 - d;
        ok = p[d] >= 0 && p[d] < rank && !(seen & (1 << p[d]));
        seen |= ok ? 1 << p[d] : 0;
    }
    if (!ok)
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Transpose): perm is "
                          "not a permutation of its constant's %d axes", name, rank);
    int64_t count = 1;
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = count;
        count *= in->dims[d];
    }
    for (int d = 0; d < rank; d++)
        dims[d] = in->dims[p[d]];
    const float *src = in->f;   /* the value table may move under add_value */
    float *f = kiln_onnx_alloc(&im->mem, (size_t)(count + 1) * sizeof *f);
    kiln_import_value *v = f ? kiln_import_add_value(im, n->output[0]) : NULL;
    if (!v)
        return kiln_error(im->ctx, KILN_ERROR_OUT_OF_MEMORY, CALL ": node '%s' (Transpose): out "
                          "of memory", name);
    for (int64_t k = 0; k < count; k++) {
        int64_t rest = k, at = 0;
        for (int d = rank - 1; d >= 0; d--) {
            at += rest % dims[d] * stride[p[d]];
            rest /= dims[d];
        }
        f[k] = src[at];
    }
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->f = f;
    if (rank == 2 && p[0] == 1 && !in->transpose_of)
        v->transpose_of = in->name;
    return KILN_OK;
}

/* Transpose: of a constant, folded; of a computed value, the batch kept
 * first. Of a 4-D value, perm (0, 2, 3, 1) and (0, 3, 1, 2) change its
 * layout only, as kiln's own ONNX export writes them around each
 * channels-last layer: the result is the value in its other layout, read
 * as held, and no layer is added. Any other perm is a Permute of the value
 * in ONNX's order. */
static kiln_status import_transpose(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    const KilnOnnx__AttributeProto *perm = NULL;
    for (size_t k = 0; k < n->n_attribute; k++) {
        if (strcmp(n->attribute[k]->name, "perm") != 0)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Transpose): "
                              "attribute '%s' is not supported (Transpose reads perm)", name,
                              n->attribute[k]->name);
        perm = n->attribute[k];
    }
    kiln_import_value *c = n->n_input > 0 ? kiln_import_find(im, n->input[0]) : NULL;
    if (c && !c->computed && c->f)
        return fold_transpose(im, n, c, perm);
    if (c && !c->computed && c->ints)   /* nn.ZeroPad2d's pads arithmetic */
        return kiln_import_transpose(im, n);
    kiln_import_value *v;
    kiln_status st = computed(im, n, 0, &v);
    if (st != KILN_OK)
        return st;
    /* Without perm, ONNX reverses the axes, the batch moved last. */
    int seen = 0, ok = perm && perm->n_ints == (size_t)v->rank && perm->ints[0] == 0;
    for (size_t d = 0; ok && d < perm->n_ints; d++) {
        ok = perm->ints[d] >= 0 && perm->ints[d] < v->rank && !(seen & (1 << perm->ints[d]));
        seen |= ok ? 1 << perm->ints[d] : 0;
    }
    if (!ok)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Transpose): perm "
                          "must be given, a permutation of the input's %d axes that keeps the "
                          "batch (axis 0) first%s%s%s", name, v->rank,
                          im->attention_miss ? " (it begins what reads as nn.MultiheadAttention's "
                          "block, which kiln imports as one layer, but " : "",
                          im->attention_miss ? im->attention_miss : "",
                          im->attention_miss ? ")" : "");
    const int64_t *p = perm->ints;
    const int to_cl = v->rank == 4 && p[1] == 2 && p[2] == 3 && p[3] == 1;
    const int from_cl = v->rank == 4 && p[1] == 3 && p[2] == 1 && p[3] == 2;
    if (!to_cl && !from_cl) {
        /* Keras counts a sample's axes from 1, as ONNX here. A 4-D value
         * held channels-last and not yet converted is permuted from there
         * (ONNX's C, H, W are kiln's axes 3, 1, 2): one layer, not two. */
        static const int32_t held[4] = {0, 3, 1, 2};
        const int from_held = v->rank == 4 && v->cl && v->converted == KILN_NODE_INVALID;
        int32_t dims[KILN_MAX_RANK];
        for (int d = 1; d < v->rank; d++)
            dims[d - 1] = from_held ? held[p[d]] : (int32_t)p[d];
        kiln_node in = v->node;
        st = from_held ? KILN_OK : in_layout(im, v, 0, &in);
        if (st != KILN_OK)
            return st;
        return made(im, n, kiln_permute(im->m, in, v->rank - 1, dims,
                                        &(kiln_permute_options){
                                            .struct_size = sizeof(kiln_permute_options),
                                            .name = name}), 0, NULL);
    }
    /* (0, 2, 3, 1): the channels-last form of v, read in ONNX's order;
     * (0, 3, 1, 2): v read in ONNX's order is the result's channels-last
     * form. */
    kiln_node node;
    st = in_layout(im, v, to_cl, &node);
    if (st != KILN_OK)
        return st;
    int64_t dims[4];
    for (int d = 0; d < 4; d++)
        dims[d] = v->dims[p[d]];
    kiln_import_value *out = kiln_import_add_value(im, n->output[0]);   /* v may move */
    if (!out)
        return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
    out->computed = 1;
    out->node = node;
    out->cl = from_cl && im->m->graph.nodes[node].shape.rank == 3;   /* a (C) is both */
    out->rank = 4;
    memcpy(out->dims, dims, sizeof dims);
    return KILN_OK;
}

/* Reshape to a constant shape whose first entry keeps the batch (0, or -1
 * when the rest is known); 0 elsewhere copies the input's dimension. */
static kiln_status import_reshape(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    kiln_import_value *v, *shape = n->n_input > 1 ? kiln_import_find(im, n->input[1]) : NULL;
    const kiln_import_value *data = kiln_import_find(im, n->input[0]);
    if (data && !data->computed && data->ints)
        return kiln_import_reshape_constant(im, n);
    kiln_status st = computed(im, n, 0, &v);
    if (st != KILN_OK)
        return st;
    for (size_t k = 0; k < n->n_attribute; k++)
        if (strcmp(n->attribute[k]->name, "allowzero") != 0 || n->attribute[k]->i != 0)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Reshape): "
                              "attribute '%s' is not supported (Reshape reads allowzero 0)",
                              name, n->attribute[k]->name);
    if (!shape || shape->computed || !shape->ints || shape->rank != 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Reshape): its "
                          "shape must be a constant 1-D int64 tensor", name);
    const int64_t rank = shape->dims[0];
    if (rank < 2 || rank > KILN_MAX_RANK + 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Reshape): a "
                          "shape of %lld dimensions; kiln reshapes to 2 to %d (the batch "
                          "first)", name, (long long)rank, KILN_MAX_RANK + 1);
    int unknown = 0;
    for (int64_t d = 1; d < rank; d++)
        unknown += shape->ints[d] == -1;
    const int64_t first = shape->ints[0] == BATCH ? 0 : shape->ints[0];
    if (!(first == 0 || (first == -1 && !unknown)))
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Reshape): shape[0] "
                          "is %lld; kiln keeps the batch first (0, or -1 with the other "
                          "dimensions known)", name, (long long)shape->ints[0]);
    int32_t dims[KILN_MAX_RANK];
    for (int64_t d = 1; d < rank; d++) {
        int64_t s = shape->ints[d];
        if (s == 0 && d < v->rank)
            s = v->dims[d];
        if (s < -1 || s == 0 || s > INT32_MAX)
            return kiln_error(im->ctx, KILN_ERROR_SHAPE, CALL ": node '%s' (Reshape): shape[%lld] "
                              "is %lld", name, (long long)d, (long long)shape->ints[d]);
        dims[d - 1] = (int32_t)s;
    }
    /* A leading -1 is the batch only when the rest holds one sample: ONNX's
     * test_reshape_negative_extended_dims reshapes (2, 3, 4) to (-1, 2, 3, 4),
     * folding the batch into the sample. */
    int64_t sample = 1, rest = 1;
    for (int d = 1; d < v->rank; d++)
        sample *= v->dims[d];
    for (int64_t d = 1; d < rank; d++)
        rest *= dims[d - 1];
    if (first == -1 && rest != sample)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Reshape): shape[0] "
                          "is -1 and the other dimensions hold %lld values, a sample %lld: the "
                          "batch would not be kept; kiln keeps the batch first", name,
                          (long long)rest, (long long)sample);
    kiln_node in;
    st = in_layout(im, v, 0, &in);
    if (st != KILN_OK)
        return st;
    return made(im, n, kiln_reshape(im->m, in, (int32_t)rank - 1, dims,
                                        &(kiln_reshape_options){
                                            .struct_size = sizeof(kiln_reshape_options),
                                            .name = name}), 0, NULL);
}

/* Nonzero when Pad output `value`'s one reader r can take the Pad into its
 * own explicit pads: a Conv, or an AveragePool without ceil_mode (a last
 * window past the padding would count otherwise) whose own pads are none
 * or counted (count_include_pad 1), either with auto_pad NOTSET and 2-D
 * pads. */
static int pad_foldable(const KilnOnnx__NodeProto *r, const char *value)
{
    const int conv = strcmp(r->op_type, "Conv") == 0;
    if ((!conv && strcmp(r->op_type, "AveragePool") != 0) || (r->domain && *r->domain) ||
        r->n_input < 1 || strcmp(r->input[0], value) != 0)
        return 0;
    int own = 0, counted = 0;
    for (size_t k = 0; k < r->n_attribute; k++) {
        const KilnOnnx__AttributeProto *a = r->attribute[k];
        if (strcmp(a->name, "auto_pad") == 0 &&
            !(a->s.len == 6 && memcmp(a->s.data, "NOTSET", 6) == 0))
            return 0;
        if (strcmp(a->name, "pads") == 0) {
            if (a->type != KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS || a->n_ints != 4)
                return 0;
            for (int d = 0; d < 4; d++)
                own |= a->ints[d] != 0;
        }
        if (strcmp(a->name, "ceil_mode") == 0 && a->i != 0)
            return 0;
        if (strcmp(a->name, "count_include_pad") == 0)
            counted = a->i == 1;
    }
    return conv || !own || counted;
}

/* Pad in constant mode with value 0 over H and W of a 4-D value: one that
 * pads nothing passes its input on (PyTorch's AvgPool2d writes one before
 * its AveragePool); one that pads is folded into the Conv or AveragePool
 * that alone reads it where it can be (pad_foldable; exact, and no layer
 * more), else a ZeroPadding2D layer. */
static kiln_status import_pad(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    kiln_import_value *v, *pads = n->n_input > 1 ? kiln_import_find(im, n->input[1]) : NULL;
    kiln_status st = computed(im, n, 0, &v);
    if (st != KILN_OK)
        return st;
    for (size_t k = 0; k < n->n_attribute; k++) {
        const KilnOnnx__AttributeProto *a = n->attribute[k];
        const int constant = a->s.len == 8 && memcmp(a->s.data, "constant", 8) == 0;
        if (strcmp(a->name, "mode") != 0 || !constant)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Pad): "
                              "attribute '%s'%s%.*s%s is not supported; kiln pads in mode "
                              "'constant' only", name, a->name, strcmp(a->name, "mode") ? ""
                              : " '", strcmp(a->name, "mode") ? 0 : (int)a->s.len,
                              strcmp(a->name, "mode") ? "" : (const char *)a->s.data,
                              strcmp(a->name, "mode") ? "" : "'");
    }
    if (!pads || pads->computed || !pads->ints)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Pad): its pads "
                          "must be a constant int64 tensor", name);
    if (n->n_input > 2 && *n->input[2]) {
        const kiln_import_value *c = kiln_import_find(im, n->input[2]);
        const int zero = !c->computed && count_of(c) == 1 &&
                         (c->f ? c->f[0] == 0.0f : c->ints && c->ints[0] == 0);
        if (!zero)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Pad): input 2 "
                              "(constant_value) '%s' is not the constant 0; kiln pads with "
                              "zeros only", name, n->input[2]);
    }
    if (n->n_input > 3 && *n->input[3])
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Pad): input 3 "
                          "(axes) is given; kiln reads pads for every axis", name);
    const int64_t count = pads->rank ? pads->dims[0] : 1;
    int any = 0;
    for (int64_t k = 0; k < count; k++)
        any |= pads->ints[k] != 0;
    if (!any) {
        const kiln_node node = kiln_activation_layer(
            im->m, v->node, KILN_ACTIVATION_LINEAR,
            &(kiln_activation_layer_options){.struct_size = sizeof(kiln_activation_layer_options),
                                             .name = name});
        return made(im, n, node, v->cl, v);
    }
    if (v->rank != 4 || count != 8)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Pad): pads a "
                          "%d-D value; kiln pads H and W of a 4-D (N, C, H, W) value only",
                          name, v->rank);
    /* ONNX's pads: the begins of the 4 axes, then their ends. */
    const int64_t *p = pads->ints;
    for (int a = 0; a < 8; a++)
        if ((a % 4 < 2 && p[a] != 0) || p[a] < 0 || p[a] > 65535)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Pad): pads[%d] "
                              "is %lld; kiln pads H and W (pads 2, 3, 6, 7) by 0 to 65535 only",
                              name, a, (long long)p[a]);
    size_t reader = 0;
    const KilnOnnx__NodeProto *r = readers(im, n->output[0], &reader) == 1 ? im->g->node[reader]
                                                                            : NULL;
    if (!r || !pad_foldable(r, n->output[0])) {
        kiln_node in;
        st = in_layout(im, v, 1, &in);
        if (st != KILN_OK)
            return st;
        const kiln_zero_padding2d_options o = {
            .struct_size = sizeof o, .name = name,
            .padding = {(int32_t)p[2], (int32_t)p[6], (int32_t)p[3], (int32_t)p[7]}};
        return made(im, n, kiln_zero_padding2d(im->m, in, &o), 1, NULL);
    }
    const kiln_import_value copy = *v;
    kiln_import_value *out = kiln_import_add_value(im, n->output[0]);
    if (!out)
        return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
    *out = copy;
    out->name = n->output[0];
    out->padded = 1;
    out->pads[0] = (int32_t)p[2];
    out->pads[1] = (int32_t)p[3];
    out->pads[2] = (int32_t)p[6];
    out->pads[3] = (int32_t)p[7];
    out->dims[2] += p[2] + p[6];
    out->dims[3] += p[3] + p[7];
    return KILN_OK;
}

/* ---- shape arithmetic, folded --------------------------------------------
 * torch.onnx.export writes x.view(x.size(0), -1) as Shape -> Gather ->
 * Unsqueeze -> Concat -> Reshape. The shapes are known but the batch, so
 * these fold into constants, the batch a marker that Reshape reads as 0. */


/* A new integer constant of `rank` (dims) whose `count` values the caller
 * writes at *ints. */
static kiln_import_value *int_constant(kiln_importer *im, const char *name, int rank,
                                       const int64_t *dims, int64_t count, int64_t **ints_out)
{
    int64_t *ints = kiln_onnx_alloc(&im->mem, (size_t)(count + 1) * sizeof *ints);
    kiln_import_value *v = ints ? kiln_import_add_value(im, name) : NULL;
    *ints_out = ints;
    if (!v)
        return NULL;
    v->rank = rank;
    for (int d = 0; d < rank; d++)
        v->dims[d] = dims[d];
    v->ints = ints;
    return v;
}

/* Input k of n as an integer constant, or NULL after the error. */
static const kiln_import_value *int_input(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                          size_t k, kiln_status *st)
{
    const kiln_import_value *v = k < n->n_input ? kiln_import_find(im, n->input[k]) : NULL;
    if (v && !v->computed && v->ints)
        return v;
    *st = kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): input %zu must "
                     "be an integer constant (kiln folds shape arithmetic on known shapes)",
                     kiln_import_node_name(n), n->op_type, k);
    return NULL;
}

static int64_t count_of(const kiln_import_value *v)
{
    int64_t c = 1;
    for (int d = 0; d < v->rank; d++)
        c *= v->dims[d];
    return c;
}

static kiln_status no_attrs_but(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                const char *allowed)
{
    for (size_t k = 0; k < n->n_attribute; k++)
        if (!allowed || strcmp(n->attribute[k]->name, allowed) != 0)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): "
                              "attribute '%s' is not supported", kiln_import_node_name(n),
                              n->op_type, n->attribute[k]->name);
    return KILN_OK;
}

static kiln_status import_shape(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v = kiln_import_find(im, n->input[0]);
    kiln_status st = no_attrs_but(im, n, NULL);
    if (st != KILN_OK)
        return st;
    const int64_t rank = v->rank;
    int64_t *ints;
    if (!int_constant(im, n->output[0], 1, &rank, rank, &ints))
        return kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
    for (int d = 0; d < v->rank; d++)
        ints[d] = v->computed && d == 0 ? BATCH : v->dims[d];
    return KILN_OK;
}

/* Gather of a float initializer's rows by computed ids is an Embedding
 * lookup: the embedding kind reads it with the ids first, as its layer
 * takes them. */
static kiln_status import_lookup(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    char *swapped_inputs[2] = {n->input[1], n->input[0]};
    KilnOnnx__NodeProto swapped = *n;
    swapped.input = swapped_inputs;
    return import_kind(im, &swapped, &kiln_layer_embedding, NULL);
}

static kiln_status import_gather(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const kiln_import_value *table = kiln_import_find(im, n->input[0]);
    const kiln_import_value *ids = n->n_input == 2 ? kiln_import_find(im, n->input[1]) : NULL;
    if (table && !table->computed && table->f && ids && ids->computed)
        return import_lookup(im, n);
    if (table && table->computed)   /* a computed value at constant indices */
        return kiln_import_gather_value(im, n);
    kiln_status st = no_attrs_but(im, n, "axis");
    const kiln_import_value *data = st == KILN_OK ? int_input(im, n, 0, &st) : NULL;
    const kiln_import_value *idx = data ? int_input(im, n, 1, &st) : NULL;
    if (!idx)
        return st;
    for (size_t k = 0; k < n->n_attribute; k++)
        if (n->attribute[k]->i != 0)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Gather): "
                              "attribute 'axis' is %lld; kiln folds axis 0",
                              kiln_import_node_name(n), (long long)n->attribute[k]->i);
    if (data->rank != 1 || idx->rank > 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Gather): kiln "
                          "folds a 1-D constant indexed by a scalar or 1-D constant",
                          kiln_import_node_name(n));
    const int64_t count = count_of(idx);
    int64_t *ints;
    if (!int_constant(im, n->output[0], idx->rank, idx->dims, count, &ints))
        return kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
    for (int64_t k = 0; k < count; k++) {
        int64_t i = idx->ints[k];
        if (i < 0)
            i += data->dims[0];
        if (i < 0 || i >= data->dims[0])
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Gather): index "
                              "%lld of %lld values", kiln_import_node_name(n),
                              (long long)idx->ints[k], (long long)data->dims[0]);
        ints[k] = data->ints[i];
    }
    return KILN_OK;
}

static kiln_status import_unsqueeze(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const kiln_import_value *in = kiln_import_find(im, n->input[0]);
    if (in && in->computed)
        return kiln_import_unsqueeze_value(im, n);
    kiln_status st = KILN_OK;
    const kiln_import_value *data = int_input(im, n, 0, &st);
    if (!data)
        return st;
    const int64_t *axes;
    int64_t n_axes;
    if (im->opset < 13) {
        const KilnOnnx__AttributeProto *a = n->n_attribute == 1 ? n->attribute[0] : NULL;
        if (!a || strcmp(a->name, "axes") != 0)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Unsqueeze): "
                              "kiln reads attribute 'axes' only", kiln_import_node_name(n));
        axes = a->ints;
        n_axes = (int64_t)a->n_ints;
    } else {
        const kiln_import_value *a = (st = no_attrs_but(im, n, NULL)) == KILN_OK
                                         ? int_input(im, n, 1, &st) : NULL;
        if (!a)
            return st;
        axes = a->ints;
        n_axes = count_of(a);
    }
    const int64_t rank = data->rank + n_axes;
    if (rank > KILN_MAX_RANK + 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Unsqueeze): %lld "
                          "dimensions", kiln_import_node_name(n), (long long)rank);
    int64_t dims[KILN_MAX_RANK + 1];
    int one[KILN_MAX_RANK + 1] = {0};
    for (int64_t k = 0; k < n_axes; k++) {
        const int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
        if (a < 0 || a >= rank || one[a])
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Unsqueeze): axis "
                              "%lld", kiln_import_node_name(n), (long long)axes[k]);
        one[a] = 1;
    }
    for (int64_t d = 0, from = 0; d < rank; d++)
        dims[d] = one[d] ? 1 : data->dims[from++];
    const int64_t count = count_of(data);
    int64_t *ints;
    if (!int_constant(im, n->output[0], (int)rank, dims, count, &ints))
        return kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
    memcpy(ints, data->ints, (size_t)count * sizeof *ints);
    return KILN_OK;
}

/* Concat of more computed values than a layer joins (8, as torchvision's
 * densenet writes up to 48): joined in chunks, each after the first taking
 * the one before as its first input (a join of joins along one axis is
 * the same join). The chunks are layers "<node>/part<k>"; the last keeps
 * the node's name and makes its output. */
static kiln_status import_concat_chunks(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    char *prev = NULL;
    size_t at = 0;
    for (int part = 0; at < n->n_input; part++) {
        char *inputs[KILN_ONNX_MAX_NODE_INPUTS];
        size_t count = 0;
        if (prev)
            inputs[count++] = prev;
        while (count < KILN_ONNX_MAX_NODE_INPUTS && at < n->n_input)
            inputs[count++] = n->input[at++];
        KilnOnnx__NodeProto chunk = *n;
        char *out = n->output[0];
        if (at < n->n_input) {
            out = kiln_onnx_printf(&im->mem, "%s/part%d", n->output[0], part);
            chunk.name = kiln_onnx_printf(&im->mem, "%s/part%d", name, part);
            if (!out || !chunk.name)
                return kiln_error_oom(im->ctx, "a name", im->mem.oom_bytes);
        }
        chunk.input = inputs;
        chunk.n_input = count;
        chunk.output = &out;
        chunk.n_output = 1;
        const kiln_status st = import_kind(im, &chunk, &kiln_layer_concatenate, NULL);
        if (st != KILN_OK)
            return st;
        prev = out;
    }
    return KILN_OK;
}

/* Concat of 1-D integer constants folds; of one computed value it passes
 * it on; of several it is the concatenate kind's. */
static kiln_status import_concat(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    int constants = 1;
    int64_t total = 0;
    for (size_t k = 0; k < n->n_input && constants; k++) {
        const kiln_import_value *v = kiln_import_find(im, n->input[k]);
        constants = v && !v->computed && v->ints && v->rank == 1;
        total += constants ? v->dims[0] : 0;
    }
    if (!constants && n->n_input == 1) {
        /* Of one value: that value (torchvision's densenet joins a list of
         * one input in each block's first layer). */
        kiln_import_value *in;
        const kiln_status st = computed(im, n, 0, &in);
        if (st != KILN_OK)
            return st;
        const kiln_node node = kiln_activation_layer(
            im->m, in->node, KILN_ACTIVATION_LINEAR,
            &(kiln_activation_layer_options){.struct_size = sizeof(kiln_activation_layer_options),
                                             .name = kiln_import_node_name(n)});
        return made(im, n, node, in->cl, in);
    }
    if (!constants && n->n_input > KILN_ONNX_MAX_NODE_INPUTS)
        return import_concat_chunks(im, n);
    if (!constants)
        return import_kind(im, n, &kiln_layer_concatenate, NULL);
    for (size_t k = 0; k < n->n_attribute; k++)
        if (strcmp(n->attribute[k]->name, "axis") != 0 ||
            (n->attribute[k]->i != 0 && n->attribute[k]->i != -1))
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Concat): "
                              "attribute '%s' is %lld; constant 1-D values join on axis 0",
                              kiln_import_node_name(n), n->attribute[k]->name,
                              (long long)n->attribute[k]->i);
    int64_t *ints;
    if (!int_constant(im, n->output[0], 1, &total, total, &ints))
        return kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
    int64_t at = 0;
    for (size_t k = 0; k < n->n_input; k++) {
        const kiln_import_value *v = kiln_import_find(im, n->input[k]);
        memcpy(ints + at, v->ints, (size_t)v->dims[0] * sizeof *v->ints);
        at += v->dims[0];
    }
    return KILN_OK;
}

/* Add of integer constants folds; of two computed values of one shape it
 * is the add kind's; else the binary kind's, broadcasting. */
static kiln_status import_add(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    if (kiln_import_all_ints(im, n))
        return kiln_import_arithmetic(im, n);
    const kiln_import_value *a = n->n_input == 2 ? kiln_import_find(im, n->input[0]) : NULL;
    const kiln_import_value *b = n->n_input == 2 ? kiln_import_find(im, n->input[1]) : NULL;
    int same = a && b && a->computed && b->computed && a->rank == b->rank;
    for (int d = 1; same && d < a->rank; d++)
        same = a->dims[d] == b->dims[d];
    return same ? import_kind(im, n, &kiln_layer_add, NULL) : kiln_import_binary(im, n);
}

/* Sub, Mul and Div of integer constants fold; else the binary kind's. */
static kiln_status import_sub_mul(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    return kiln_import_all_ints(im, n) ? kiln_import_arithmetic(im, n)
                                       : kiln_import_binary(im, n);
}

/* MatMul of two computed values is the matmul kind's; by an initializer
 * it is a Dense, and the Add of a 1-D initializer that alone reads its
 * product is the Dense's bias. */
static kiln_status import_matmul(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const kiln_import_value *b = n->n_input > 1 ? kiln_import_find(im, n->input[1]) : NULL;
    if (b && b->computed)
        return import_kind(im, n, &kiln_layer_matmul, NULL);
    size_t reader = 0;
    const char *bias = NULL;
    if (n->n_output == 1 && readers(im, n->output[0], &reader) == 1) {
        const KilnOnnx__NodeProto *add = im->g->node[reader];
        const int at = add->n_input == 2 && strcmp(add->input[0], n->output[0]) == 0 ? 1 : 0;
        const kiln_import_value *b = add->n_input == 2 ? kiln_import_find(im, add->input[at])
                                                      : NULL;
        if (strcmp(add->op_type, "Add") == 0 && (!add->domain || !*add->domain) && b &&
            !b->computed && b->f && b->rank == 1) {
            im->skip[reader] = 1;
            bias = add->input[at];
            /* The Dense makes the Add's output. */
            KilnOnnx__NodeProto joined = *n;
            joined.output = add->output;
            joined.n_output = add->n_output;
            return import_kind(im, &joined, &kiln_layer_dense, bias);
        }
    }
    return import_kind(im, n, &kiln_layer_dense, NULL);
}

/* Clip and HardSigmoid: the activation where it takes the node (Clip (0, 6)
 * as ReLU6, (0, none) as ReLU, HardSigmoid of alpha 1/6 and beta 0.5), so
 * that the layer before fuses it; any other as kiln_math's. */
static kiln_status import_activation_or_math(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_onnx_import imp = {.op = n->op_type, .node = kiln_import_node_name(n),
                            .opset = im->opset};
    kiln_status st = read_attrs(im, n, &imp);
    if (st == KILN_OK)
        st = read_inputs(im, n, &imp, NULL);
    if (st != KILN_OK)
        return st;
    const int activation = kiln_layer_activation.import_onnx(&imp) == KILN_OK;
    return import_kind(im, n, activation ? &kiln_layer_activation : &kiln_layer_math, NULL);
}

/* Slice of a computed value is a Slice layer; of integer constants it
 * folds. */
static kiln_status import_slice(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const kiln_import_value *in = kiln_import_find(im, n->input[0]);
    return in && in->computed ? kiln_import_slice_value(im, n) : kiln_import_slice(im, n);
}

static const struct {
    const char *op;
    const kiln_layer_ops *kind;   /* the kind whose import_onnx reads it, */
    const kiln_layer_ops *or_kind;   /* the kind that reads it where `kind` refuses, or */
    op_handler handler;           /* a handler here */
} ops[] = {
    {.op = "Conv", .kind = &kiln_layer_conv2d},
    {.op = "ConvTranspose", .kind = &kiln_layer_conv2d_transpose},
    {.op = "BatchNormalization", .kind = &kiln_layer_batch_norm},
    {.op = "Gemm", .kind = &kiln_layer_dense},
    {.op = "MatMul", .handler = import_matmul},
    {.op = "MaxPool", .kind = &kiln_layer_max_pooling2d},
    {.op = "GlobalMaxPool", .kind = &kiln_layer_global_max_pooling2d},
    {.op = "AveragePool", .kind = &kiln_layer_average_pooling2d},
    {.op = "GlobalAveragePool", .kind = &kiln_layer_global_average_pooling2d},
    {.op = "ReduceMean", .handler = import_reduce},
    {.op = "ReduceSum", .handler = import_reduce},
    {.op = "ReduceMax", .handler = import_reduce},
    {.op = "ReduceMin", .handler = import_reduce},
    {.op = "Relu", .kind = &kiln_layer_activation},
    {.op = "LeakyRelu", .kind = &kiln_layer_activation},
    {.op = "Sigmoid", .handler = kiln_import_sigmoid},
    {.op = "Gelu", .kind = &kiln_layer_activation},
    {.op = "Tanh", .kind = &kiln_layer_activation},
    {.op = "Softmax", .kind = &kiln_layer_activation, .or_kind = &kiln_layer_softmax},
    {.op = "LogSoftmax", .kind = &kiln_layer_activation, .or_kind = &kiln_layer_softmax},
    {.op = "LayerNormalization", .handler = import_layer_norm},
    {.op = "Clip", .handler = import_activation_or_math},
    {.op = "HardSigmoid", .handler = import_activation_or_math},
    {.op = "HardSwish", .kind = &kiln_layer_activation},
    {.op = "Sqrt", .kind = &kiln_layer_math},
    {.op = "Reciprocal", .kind = &kiln_layer_math},
    {.op = "Neg", .kind = &kiln_layer_math},
    {.op = "Abs", .kind = &kiln_layer_math},
    {.op = "Exp", .kind = &kiln_layer_math},
    {.op = "Log", .kind = &kiln_layer_math},
    {.op = "Erf", .kind = &kiln_layer_math},
    {.op = "Pow", .kind = &kiln_layer_math},
    {.op = "Dropout", .kind = &kiln_layer_dropout},
    {.op = "Add", .handler = import_add},
    {.op = "Sub", .handler = import_sub_mul},
    {.op = "Mul", .handler = import_sub_mul},
    {.op = "Div", .handler = import_sub_mul},
    {.op = "Max", .handler = kiln_import_binary},
    {.op = "Min", .handler = kiln_import_binary},
    {.op = "Concat", .handler = import_concat},
    {.op = "Identity", .handler = import_identity},
    {.op = "Constant", .handler = import_constant},
    {.op = "Cast", .handler = import_cast},
    {.op = "Flatten", .handler = import_flatten},
    {.op = "Reshape", .handler = import_reshape},
    {.op = "Transpose", .handler = import_transpose},
    {.op = "Pad", .handler = import_pad},
    {.op = "Shape", .handler = import_shape},
    {.op = "Gather", .handler = import_gather},
    {.op = "Unsqueeze", .handler = import_unsqueeze},
    {.op = "ConstantOfShape", .handler = kiln_import_constant_of_shape},
    {.op = "Slice", .handler = import_slice},
    {.op = "Squeeze", .handler = kiln_import_squeeze},
    {.op = "Split", .handler = kiln_import_split},
    {.op = "Expand", .handler = kiln_import_expand},
    {.op = "Equal", .handler = kiln_import_equal_where},
    {.op = "Where", .handler = kiln_import_equal_where},
};

const char *kiln_import_layer_name(kiln_importer *im, const char *name)
{
    const size_t len = strlen(name);
    if (len <= 63)
        return name;
    return kiln_onnx_printf(&im->mem, "%08x~%s", (unsigned)(kiln_hash(KILN_HASH_SEED, name, len) &
                                                            0xffffffffu), name + len - 54);
}

kiln_status kiln_import_node(kiln_importer *im, size_t k)
{
    const KilnOnnx__NodeProto *n = im->replace[k] ? im->replace[k] : im->g->node[k];
    const char *name = kiln_import_node_name(n);
    /* kiln's layer names hold up to 63 bytes; PyTorch's node names run
     * longer in deep networks (mnasnet's "/layers/layers.10/layers.10.0/
     * layers/layers.1/BatchNormalization"): such a node and its layers are
     * named "<8 hex digits of the whole name's hash>~<its last 54 bytes>",
     * stable and unique in practice. */
    KilnOnnx__NodeProto renamed;
    if (strlen(name) > 63) {
        const char *s = kiln_import_layer_name(im, name);
        if (!s)
            return kiln_error_oom(im->ctx, "a name", im->mem.oom_bytes);
        renamed = *n;
        renamed.name = (char *)s;
        n = &renamed;
        name = s;
    }
    const char *op = n->op_type ? n->op_type : "";
    size_t i = 0;
    const int onnx_domain = !n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
    while (onnx_domain && i < sizeof ops / sizeof ops[0] && strcmp(ops[i].op, op) != 0)
        i++;
    if (!onnx_domain || i == sizeof ops / sizeof ops[0])
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' has op '%s'%s%s%s, "
                          "which kiln does not import (docs/importing.md lists the ops it does)",
                          name, op, onnx_domain ? "" : " of domain '",
                          onnx_domain ? "" : n->domain, onnx_domain ? "" : "'");
    if (n->n_output < 1)
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s) has no output",
                          name, op);
    size_t reader;
    for (size_t o = 1; o < n->n_output && strcmp(op, "Split") != 0; o++)   /* Split's all */
        if (*n->output[o] && readers(im, n->output[o], &reader))
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): output "
                              "%zu '%s' is read; kiln imports a node's first output only",
                              name, op, o, n->output[o]);
    if (strcmp(op, "Constant") != 0 && (n->n_input < 1 || !*n->input[0]))
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s) has no input",
                          name, op);
    for (size_t k = 0; k < n->n_input; k++) {
        const kiln_import_value *v = *n->input[k] ? kiln_import_find(im, n->input[k]) : NULL;
        if (*n->input[k] && !v)
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s) reads '%s', "
                              "which no node kiln imported makes", name, op, n->input[k]);
        if (v && v->boolean)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s) reads "
                              "graph input '%s' of element type 9 (bool); kiln imports float "
                              "(1) inputs, and bool ones only as nn.MultiheadAttention's "
                              "key_padding_mask", name, op, n->input[k]);
    }
    if (strcmp(op, "Identity") == 0 && n->n_input != 1)
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Identity) has %zu "
                          "inputs", name, n->n_input);
    im->attention_miss = NULL;
    if (strcmp(op, "Transpose") == 0 && !im->replace[k]) {   /* nn.MultiheadAttention's? */
        int found;
        const kiln_status st = kiln_import_attention(im, k, &found);
        if (st != KILN_OK || found)
            return st;
    }
    return ops[i].handler ? ops[i].handler(im, n)
                          : import_kind_or(im, n, ops[i].kind, ops[i].or_kind, NULL);
}

kiln_status kiln_import_output(kiln_importer *im, kiln_import_value *v, kiln_node *node)
{
    kiln_status st = in_layout(im, v, 0, node);
    if (st != KILN_OK)
        return st;
    /* An output feeds no other layer: a copy where the graph reads it too. */
    for (kiln_node i = 0; i < im->m->graph.n_nodes; i++)
        for (int k = 0; k < im->m->graph.nodes[i].n_inputs; k++)
            if (im->m->graph.nodes[i].inputs[k] == *node) {
                *node = kiln_activation_layer(im->m, *node, KILN_ACTIVATION_LINEAR, NULL);
                if (*node == KILN_NODE_INVALID)
                    return kiln_error(im->ctx, im->m->graph.build_status, CALL ": graph output "
                                      "'%s': %s", v->name, im->m->graph.build_error);
                return KILN_OK;
            }
    return KILN_OK;
}


kiln_status kiln_import_computed(kiln_importer *im, const KilnOnnx__NodeProto *n, size_t k,
                                 kiln_import_value **out)
{
    return computed(im, n, k, out);
}

kiln_status kiln_import_in_layout(kiln_importer *im, kiln_import_value *v, int cl,
                                  kiln_node *node)
{
    return in_layout(im, v, cl, node);
}

kiln_status kiln_import_made(kiln_importer *im, const KilnOnnx__NodeProto *n, kiln_node node,
                             int cl)
{
    return made(im, n, node, cl, NULL);
}

int kiln_import_readers(const kiln_importer *im, const char *name)
{
    size_t reader;
    return readers(im, name, &reader);
}

kiln_status kiln_import_made_like(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                  kiln_node node, int cl, const kiln_import_value *like)
{
    return made(im, n, node, cl, like);
}

int kiln_import_last_reader(const kiln_importer *im, const char *name, size_t *reader)
{
    return readers(im, name, reader);
}

kiln_status kiln_import_kind(kiln_importer *im, const KilnOnnx__NodeProto *n,
                             const kiln_layer_ops *ops, const char *extra)
{
    return import_kind(im, n, ops, extra);
}
