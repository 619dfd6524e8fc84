/* Add: the element-wise sum of inputs of one shape (a residual shortcut). */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>

typedef struct add_config {
    int32_t unused;
} add_config;

static kiln_status add_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    char a[64], c[64];
    for (int k = 1; k < b->n_in; k++) {
        const kiln_shape *x = &b->in[0], *y = &b->in[k];
        int same = x->rank == y->rank;
        for (int32_t d = 0; same && d < x->rank; d++)
            same = x->dims[d] == y->dims[d];
        if (!same) {
            snprintf(b->error, sizeof b->error, "input 0 is %s but input %d is %s",
                     kiln_shape_str(x, a, sizeof a), k, kiln_shape_str(y, c, sizeof c));
            return KILN_ERROR_SHAPE;
        }
    }
    b->out = b->in[0];
    return KILN_OK;
}

static kiln_status add_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const size_t n = (size_t)s->batch * (size_t)kiln_shape_size(s->out_shape);
    kiln_status st = KILN_OK;
    for (int k = 0; k < s->n_in && st == KILN_OK; k++)
        st = kiln_copy_or_add(s->dev, s->in[k], s->out, n, k > 0);
    return st;
}

static kiln_status add_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const size_t n = (size_t)s->batch * (size_t)kiln_shape_size(s->out_shape);
    kiln_status st = KILN_OK;
    for (int k = 0; k < s->n_in && st == KILN_OK; k++)
        if (s->d_in[k])
            st = kiln_copy_or_add(s->dev, s->d_out, s->d_in[k], n, s->d_in_accumulate[k]);
    return st;
}

/* Sums in kiln's order, in the layout the first input has. */
static void add_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const kiln_onnx_layer *l = &g->layers[i];
    const int layout = kiln_onnx_input_layout(g, i, 0);
    const char *sum = kiln_onnx_input_value(g, i, 0, layout);
    for (int k = 1; k < l->n_inputs; k++) {
        const char *args[2] = {sum, kiln_onnx_input_value(g, i, k, layout)};
        sum = k + 1 < l->n_inputs
                  ? kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/sum%d", l->name, k))
                  : kiln_onnx_output(g, i, layout);
        kiln_onnx_add_node(g, "Add", args, 2, sum);
    }
    kiln_onnx_activate(g, i, layout, sum);
}

/* ONNX Add of two computed values of one shape (no broadcasting). */
static kiln_status add_import_onnx(kiln_onnx_import *imp)
{
    const kiln_status st = kiln_onnx_check_attrs(imp, "");
    if (st != KILN_OK)
        return st;
    for (int k = 0; k < 2; k++)
        if (imp->in[k].data)
            return kiln_onnx_refuse(imp, "input %d '%s' is an initializer; kiln adds two "
                                    "computed values of one shape (or a MatMul's bias)", k,
                                    imp->in[k].name);
    int same = imp->in[0].rank == imp->in[1].rank;
    for (int d = 1; same && d < imp->in[0].rank; d++)
        same = imp->in[0].dims[d] == imp->in[1].dims[d];
    if (!same)
        return kiln_onnx_refuse(imp, "its inputs '%s' and '%s' differ in shape; kiln adds "
                                "values of one shape (no broadcasting)", imp->in[0].name,
                                imp->in[1].name);
    imp->want = KILN_ONNX_WANT_ANY;
    imp->n_data = 2;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_add = {
    .kind = "add", .config_size = sizeof(add_config), .min_inputs = 2,
    .max_inputs = KILN_MAX_INPUTS, .infer = add_infer, .forward = add_forward,
    .backward = add_backward,
    .export_onnx = add_export_onnx,
    .import_onnx = add_import_onnx,
};
