/* Add, Sub, Mul, Div, Max and Min with ONNX's multidirectional
 * broadcasting, as the binary layer kind: two computed values, or one and
 * a constant, which becomes the layer's parameter (an initializer trained,
 * a Constant node's value not). Max and Min of N inputs are chained. And
 * Mul(x, Sigmoid(x)) as SiLU: the activation of x's own layer where x is
 * that layer's output and read by nothing else, else an Activation; either
 * named after the Mul, whose output it makes. */
#include "runtime/saving/onnx_import.h"

#include <stdio.h>
#include <string.h>

#define CALL KILN_IMPORT_CALL

static const struct {
    const char *op;
    kiln_binary_op kind;
} binary_ops[] = {
    {.op = "Add", .kind = KILN_BINARY_ADD},      {.op = "Sub", .kind = KILN_BINARY_SUBTRACT},
    {.op = "Mul", .kind = KILN_BINARY_MULTIPLY}, {.op = "Div", .kind = KILN_BINARY_DIVIDE},
    {.op = "Max", .kind = KILN_BINARY_MAXIMUM},  {.op = "Min", .kind = KILN_BINARY_MINIMUM},
};

static int64_t count(int rank, const int64_t *dims)
{
    int64_t c = 1;
    for (int d = 0; d < rank; d++)
        c *= dims[d];
    return c;
}

/* The constant `v` as floats (integers converted), or NULL after the
 * error. */
static const float *constant_floats(kiln_importer *im, const kiln_import_value *v)
{
    if (v->f)
        return v->f;
    const int64_t size = count(v->rank, v->dims);
    float *f = kiln_onnx_alloc(&im->mem, (size_t)(size + 1) * sizeof *f);
    if (!f) {
        kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
        return NULL;
    }
    for (int64_t i = 0; v->ints && i < size; i++)
        f[i] = (float)v->ints[i];
    return f;
}

/* The constant side's parameter: its values in kiln's layout (an ONNX
 * (C, H, W) sample as (H, W, C) when `cl`), trained and named after the
 * initializer, or (a Constant node's) not trained. An initializer one
 * node already trains is refused: kiln does not tie parameters. */
kiln_status kiln_import_take_constant(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                      kiln_node node, const char *name, const float *src,
                                      int rank, const int64_t *dims, int cl)
{
    kiln_context *ctx = im->ctx;
    kiln_import_value *v = kiln_import_find(im, name);
    kiln_node_rec *rec = &im->m->graph.nodes[node];
    const int64_t size = count(rank, dims);
    if (!v->constant_node) {
        if (v->param_of)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": initializer '%s' is used "
                              "by node '%s' and node '%s'; kiln cannot tie parameters (give "
                              "each node its own copy, an Identity)", name, v->param_of,
                              kiln_import_node_name(n));
        if (strlen(name) >= sizeof ((kiln_parameter_info *)0)->name)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): initializer "
                              "'%s' has a name of %zu bytes; kiln keeps parameter names of up "
                              "to %zu", kiln_import_node_name(n), n->op_type, name,
                              strlen(name), sizeof ((kiln_parameter_info *)0)->name - 1);
        v->param_of = kiln_import_node_name(n);
        rec->param_name[0] = kiln_strdup(ctx, name);
        if (!rec->param_name[0])
            return kiln_error_oom(ctx, "a parameter", strlen(name) + 1);
    }
    float *dst = kiln_alloc(ctx, (size_t)(size ? size : 1) * sizeof(float));
    if (!dst)
        return kiln_error_oom(ctx, "a parameter", (size_t)size * sizeof(float));
    rec->param_init[0] = dst;
    if (!cl) {
        memcpy(dst, src, (size_t)size * sizeof *dst);
        return KILN_OK;
    }
    const int64_t c = dims[0], hw = dims[1] * dims[2];   /* (C, H, W) to (H, W, C) */
    for (int64_t k = 0; k < c; k++)
        for (int64_t p = 0; p < hw; p++)
            dst[p * c + k] = src[k * hw + p];
    return KILN_OK;
}

/* The binary layer of inputs a and b (names) making value `out`. */
static kiln_status binary_node(kiln_importer *im, const KilnOnnx__NodeProto *n,
                               kiln_binary_op op, const char *a_name, const char *b_name,
                               const char *out, const char *layer_name)
{
    const char *node_name = kiln_import_node_name(n);
    kiln_import_value *in[2] = {kiln_import_find(im, a_name), kiln_import_find(im, b_name)};
    /* An empty name (ONNX's absent optional input) finds nothing. */
    for (int k = 0; k < 2; k++)
        if (!in[k])
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s): input '%s' "
                              "is no value of the graph; %s takes two", node_name, n->op_type,
                              k ? b_name : a_name, n->op_type);
    if (!in[0]->computed && !in[1]->computed)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): both inputs "
                          "'%s' and '%s' are constants; kiln imports %s of a computed value",
                          node_name, n->op_type, a_name, b_name, n->op_type);
    for (int k = 0; k < 2; k++)
        if (!in[k]->computed && !in[k]->f && !in[k]->ints)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): input "
                              "'%s' is not a float or integer constant", node_name, n->op_type,
                              in[k]->name);
    /* Every computed input has the output's rank (its batch on the
     * output's first axis); a constant of that rank is 1 along it. */
    const int rank = in[0]->rank > in[1]->rank ? in[0]->rank : in[1]->rank;
    for (int k = 0; k < 2; k++) {
        if (in[k]->computed && in[k]->rank != rank)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): input "
                              "'%s' is a computed value of %d dimensions and the output has "
                              "%d; its batch would meet another axis (kiln keeps the batch "
                              "first)", node_name, n->op_type, in[k]->name, in[k]->rank, rank);
        if (!in[k]->computed && in[k]->rank == rank && in[k]->dims[0] != 1)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): "
                              "constant '%s' has %lld values along the batch axis; kiln "
                              "broadcasts constants over the batch (1 there)", node_name,
                              n->op_type, in[k]->name, (long long)in[k]->dims[0]);
    }
    int64_t out_dims[KILN_MAX_RANK + 1];
    for (int d = 0; d < rank; d++) {
        int64_t size[2];
        for (int k = 0; k < 2; k++) {
            const int at = d - (rank - in[k]->rank);
            size[k] = at >= 0 ? in[k]->dims[at] : 1;
        }
        if (d == 0) {
            out_dims[0] = -1;
            continue;
        }
        if (size[0] != size[1] && size[0] != 1 && size[1] != 1)
            return kiln_error(im->ctx, KILN_ERROR_SHAPE, CALL ": node '%s' (%s): inputs '%s' "
                              "and '%s' do not broadcast (axis %d: %lld and %lld)", node_name,
                              n->op_type, a_name, b_name, d, (long long)size[0],
                              (long long)size[1]);
        out_dims[d] = size[0] > size[1] ? size[0] : size[1];
    }
    if (rank > KILN_MAX_RANK + 1 || rank < 2)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): an output "
                          "of %d dimensions; kiln imports 2 to %d (the batch first)", node_name,
                          n->op_type, rank, KILN_MAX_RANK + 1);
    /* Channels-last where a 4-D input is held so: the others broadcast
     * in (N, H, W, C) too. */
    int cl = 0;
    for (int k = 0; k < 2; k++)
        cl |= rank == 4 && in[k]->computed && in[k]->cl;
    kiln_node inputs[2];
    int n_inputs = 0, constant = -1;
    for (int k = 0; k < 2; k++) {
        kiln_import_value *v = in[k];
        if (!v->computed) {
            constant = k;
            continue;
        }
        const kiln_shape *s = &im->m->graph.nodes[v->node].shape;
        kiln_status st = KILN_OK;
        if (cl && s->rank == 1)   /* (C) of a (N, C, 1, 1): right-aligned as (1, 1, C) */
            inputs[n_inputs] = v->node;
        else
            st = kiln_import_in_layout(im, v, cl, &inputs[n_inputs]);
        if (st != KILN_OK)
            return st;
        /* In ONNX's order a value kiln holds without trailing 1s
         * (GlobalAveragePool's (C) of (N, C, 1, 1)) is given them back. */
        const kiln_shape *held = &im->m->graph.nodes[inputs[n_inputs]].shape;
        int same = held->rank == v->rank - 1;
        for (int d = 0; same && d < held->rank; d++)
            same = held->dims[d] == v->dims[d + 1];
        if (!cl && !same) {
            int32_t dims[KILN_MAX_RANK];
            for (int d = 1; d < v->rank; d++)
                dims[d - 1] = (int32_t)v->dims[d];
            inputs[n_inputs] = kiln_reshape(im->m, inputs[n_inputs], v->rank - 1, dims,
                                            &(kiln_reshape_options){
                                                .struct_size = sizeof(kiln_reshape_options),
                                                .name = kiln_onnx_printf(&im->mem, "%s/in%d",
                                                                         layer_name, k)});
            if (inputs[n_inputs] == KILN_NODE_INVALID)
                return kiln_error(im->ctx, im->m->graph.build_status, CALL ": node '%s' (%s): "
                                  "%s", node_name, n->op_type, im->m->graph.build_error);
        }
        n_inputs++;
    }
    kiln_binary_options o = {.struct_size = sizeof o, .name = layer_name, .op = op};
    kiln_node node;
    int64_t pdims[KILN_MAX_RANK + 1];
    const float *data = NULL;
    int prank = 0;
    if (constant >= 0) {
        const kiln_import_value *c = in[constant];
        /* Its sample: the constant right-aligned to the output's rank,
         * the batch axis dropped (a scalar: one value). */
        prank = rank - 1;
        for (int d = 1; d < rank; d++) {
            const int at = d - (rank - c->rank);
            pdims[d - 1] = at >= 0 ? c->dims[at] : 1;
        }
        o.param_rank = prank;
        for (int d = 0; d < prank; d++)
            o.param_dims[d] = (int32_t)pdims[cl && d == 0 ? 1 : cl && d == 1 ? 2 : cl ? 0 : d];
        o.param_first = constant == 0;
        o.param_constant = c->constant_node;
        if (!(data = constant_floats(im, c)))
            return KILN_ERROR_OUT_OF_MEMORY;
        node = kiln_binary_param(im->m, inputs[0], &o);
    } else {
        node = kiln_binary(im->m, inputs[0], inputs[1], &o);
    }
    if (node == KILN_NODE_INVALID)
        return kiln_error(im->ctx, im->m->graph.build_status, CALL ": node '%s' (%s): %s",
                          node_name, n->op_type, im->m->graph.build_error);
    if (constant >= 0) {
        const kiln_status st = kiln_import_take_constant(im, n, node, in[constant]->name, data,
                                                         prank, pdims, cl);
        if (st != KILN_OK)
            return st;
    }
    kiln_import_value *v = kiln_import_add_value(im, out);
    if (!v)
        return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
    v->computed = 1;
    v->node = node;
    v->cl = cl;
    v->rank = rank;
    memcpy(v->dims, out_dims, sizeof out_dims);
    return KILN_OK;
}

kiln_status kiln_import_binary(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    size_t k = 0;
    while (strcmp(binary_ops[k].op, n->op_type) != 0)
        k++;
    const kiln_binary_op op = binary_ops[k].kind;
    const int variadic = op == KILN_BINARY_MAXIMUM || op == KILN_BINARY_MINIMUM;
    if (n->n_attribute)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): attribute "
                          "'%s' is not supported (%s has none since opset 7)", name,
                          n->op_type, n->attribute[0]->name, n->op_type);
    if (variadic ? n->n_input < 1 : n->n_input != 2)
        return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (%s) has %zu inputs; "
                          "it takes %s", name, n->op_type, n->n_input,
                          variadic ? "1 or more" : "2");
    if (n->n_input == 1) {   /* Max or Min of one value: that value */
        kiln_import_value *in = kiln_import_find(im, n->input[0]);
        if (!in->computed)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): its one "
                              "input '%s' is a constant; kiln imports %s of computed values",
                              name, n->op_type, n->input[0], n->op_type);
        const kiln_node node = kiln_activation_layer(
            im->m, in->node, KILN_ACTIVATION_LINEAR,
            &(kiln_activation_layer_options){.struct_size = sizeof(kiln_activation_layer_options),
                                             .name = name});
        if (node == KILN_NODE_INVALID)
            return kiln_error(im->ctx, im->m->graph.build_status, CALL ": node '%s' (%s): %s",
                              name, n->op_type, im->m->graph.build_error);
        const kiln_import_value copy = *in;
        kiln_import_value *v = kiln_import_add_value(im, n->output[0]);
        if (!v)
            return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
        *v = copy;
        v->name = n->output[0];
        v->node = node;
        v->converted = KILN_NODE_INVALID;
        v->param_of = NULL;
        return KILN_OK;
    }
    /* Of N inputs: ((x0 op x1) op x2) ..., the parts "<node>/part<k>". */
    const char *prev = n->input[0];
    for (size_t i = 1; i < n->n_input; i++) {
        const int last = i + 1 == n->n_input;
        const char *out = last ? n->output[0]
                               : kiln_onnx_printf(&im->mem, "%s/part%zu", n->output[0], i);
        const char *layer = last ? name : kiln_onnx_printf(&im->mem, "%s/part%zu", name, i);
        if (!out || !layer)
            return kiln_error_oom(im->ctx, "a name", im->mem.oom_bytes);
        const kiln_status st = binary_node(im, n, op, prev, n->input[i], out, layer);
        if (st != KILN_OK)
            return st;
        prev = out;
    }
    return KILN_OK;
}

/* Nonzero when x's layer may take SiLU as its own activation: its
 * output is x alone (no other value holds the layer, no layer reads it);
 * kiln_node_take_activation then checks that the kind takes one and has
 * none. */
static int silu_fusable(kiln_importer *im, const kiln_import_value *x)
{
    if (x->converted != KILN_NODE_INVALID)
        return 0;
    for (size_t k = 0; k < im->n_values; k++)
        if (&im->values[k] != x && im->values[k].computed && im->values[k].node == x->node)
            return 0;
    for (kiln_node i = 0; i < im->m->graph.n_nodes; i++)
        for (int k = 0; k < im->m->graph.nodes[i].n_inputs; k++)
            if (im->m->graph.nodes[i].inputs[k] == x->node)
                return 0;
    return 1;
}

kiln_status kiln_import_sigmoid(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    size_t reader = 0;
    const KilnOnnx__NodeProto *mul =
        n->n_output == 1 && kiln_import_last_reader(im, n->output[0], &reader) == 1
            ? im->g->node[reader] : NULL;
    kiln_import_value *x = n->n_input == 1 ? kiln_import_find(im, n->input[0]) : NULL;
    const int silu = mul && x && x->computed && !n->n_attribute &&
                     strcmp(mul->op_type, "Mul") == 0 && (!mul->domain || !*mul->domain) &&
                     mul->n_input == 2 && mul->n_attribute == 0 &&
                     ((strcmp(mul->input[0], n->input[0]) == 0 &&
                       strcmp(mul->input[1], n->output[0]) == 0) ||
                      (strcmp(mul->input[1], n->input[0]) == 0 &&
                       strcmp(mul->input[0], n->output[0]) == 0));
    if (!silu)
        return kiln_import_kind(im, n, &kiln_layer_activation, NULL);
    im->skip[reader] = 1;
    /* x read by this Sigmoid and the Mul alone: its layer applies SiLU. */
    if (kiln_import_readers(im, n->input[0]) == 2 && silu_fusable(im, x) &&
        kiln_node_take_activation(im->m, x->node, KILN_ACTIVATION_SILU,
                                  kiln_import_node_name(mul))) {
        const kiln_import_value copy = *x;
        kiln_import_value *v = kiln_import_add_value(im, mul->output[0]);
        if (!v)
            return kiln_error_oom(im->ctx, "a value", im->mem.oom_bytes);
        *v = copy;
        v->name = mul->output[0];
        return KILN_OK;
    }
    KilnOnnx__NodeProto joined = *n;   /* an Activation making the Mul's output */
    joined.output = mul->output;
    joined.n_output = mul->n_output;
    const kiln_node node = kiln_activation_layer(
        im->m, x->node, KILN_ACTIVATION_SILU,
        &(kiln_activation_layer_options){.struct_size = sizeof(kiln_activation_layer_options),
                                         .name = kiln_import_node_name(mul)});
    return kiln_import_made_like(im, &joined, node, x->cl, x);
}
