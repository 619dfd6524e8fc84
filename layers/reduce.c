/* Reduce (ONNX ReduceMean, ReduceSum, ReduceMax, ReduceMin): a sample's
 * values over some of its axes, as their mean, sum, largest or smallest.
 * An output value's inputs are found by strides over the kept and the
 * reduced axes (opencl/kernels/reduce.cl), so no axis is moved first. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <stddef.h>
#include <string.h>

typedef struct reduce_config {
    kiln_reduce_args given;
    /* Inferred, padded to 4 axes with 1s (and stride 0) in front: the kept
     * axes' and the reduced axes' lengths and input strides, the input's
     * lengths and each input axis's stride in the output (0 if reduced). */
    int32_t kept_dims[4], kept_strides[4];
    int32_t reduced_dims[4], reduced_strides[4];
    int32_t in_dims[4], out_strides[4];
    int32_t count;             /* inferred: values per output value */
    int32_t reduced_mask;      /* inferred: bit d for sample axis d */
} reduce_config;

typedef struct reduce_replica {
    kiln_buffer *ties;   /* per output value: the extreme and how many equal it */
} reduce_replica;

/* The axes as sample axes 0..rank-1 in reduced_mask. */
static kiln_status reduce_axes(reduce_config *c, const kiln_shape *in, kiln_layer_build *b)
{
    const kiln_reduce_args *g = &c->given;
    const int32_t rank = in->rank;
    char s[64];
    if (g->op < KILN_REDUCE_MEAN || g->op > KILN_REDUCE_MIN) {
        snprintf(b->error, sizeof b->error, "op %d is not a kiln_reduce_op", (int)g->op);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (g->no_axes || g->n_axes < 1 || g->n_axes > rank) {
        snprintf(b->error, sizeof b->error, "%s; the input %s has %d axes to reduce",
                 g->no_axes ? "axes is NULL" : "n_axes is out of range",
                 kiln_shape_str(in, s, sizeof s), (int)rank);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    c->reduced_mask = 0;
    for (int32_t k = 0; k < g->n_axes; k++) {
        const int32_t a = g->axes[k];
        if (a == 0) {
            snprintf(b->error, sizeof b->error, "axis 0 is the batch: a sample's output would "
                     "depend on the other samples of its batch (axes 1..%d or -%d..-1 of the "
                     "input %s)", (int)rank, (int)rank, kiln_shape_str(in, s, sizeof s));
            return KILN_ERROR_INVALID_ARGUMENT;
        }
        if (a < -rank || a > rank) {
            snprintf(b->error, sizeof b->error, "axis %d is out of range: axes 1..%d or "
                     "-%d..-1 of the input %s", (int)a, (int)rank, (int)rank,
                     kiln_shape_str(in, s, sizeof s));
            return KILN_ERROR_INVALID_ARGUMENT;
        }
        const int32_t d = a > 0 ? a - 1 : rank + a;
        if (c->reduced_mask & (1 << d)) {
            snprintf(b->error, sizeof b->error, "axis %d is given twice", (int)a);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
        c->reduced_mask |= 1 << d;
    }
    return KILN_OK;
}

static kiln_status reduce_infer(void *config, kiln_layer_build *b)
{
    reduce_config *c = config;
    const kiln_shape *in = &b->in[0];
    const kiln_status st = reduce_axes(c, in, b);
    if (st != KILN_OK)
        return st;
    const int32_t rank = in->rank;
    int32_t stride[KILN_MAX_RANK];
    int32_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        stride[d] = s;
        s *= in->dims[d];
    }
    for (int d = 0; d < 4; d++) {
        c->kept_dims[d] = c->reduced_dims[d] = c->in_dims[d] = 1;
        c->kept_strides[d] = c->reduced_strides[d] = c->out_strides[d] = 0;
    }
    int n_kept = 0, n_reduced = 0;
    for (int32_t d = 0; d < rank; d++)
        n_kept += !(c->reduced_mask & (1 << d));
    n_reduced = rank - n_kept;
    int kept = 4 - n_kept, reduced = 4 - n_reduced;
    c->count = 1;
    b->out.rank = 0;
    for (int32_t d = 0; d < rank; d++) {
        c->in_dims[4 - rank + d] = in->dims[d];
        if (c->reduced_mask & (1 << d)) {
            c->reduced_dims[reduced] = in->dims[d];
            c->reduced_strides[reduced++] = stride[d];
            c->count *= in->dims[d];
            if (c->given.keepdims)
                b->out.dims[b->out.rank++] = 1;
        } else {
            c->kept_dims[kept] = in->dims[d];
            c->kept_strides[kept++] = stride[d];
            b->out.dims[b->out.rank++] = in->dims[d];
        }
    }
    if (b->out.rank == 0)   /* every axis reduced: one value */
        b->out.dims[b->out.rank++] = 1;
    int32_t os = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        if (c->reduced_mask & (1 << d))
            continue;
        c->out_strides[4 - rank + d] = os;
        os *= in->dims[d];
    }
    return KILN_OK;
}

static kiln_status reduce_prepare(const void *config, void *replica, kiln_device *dev,
                                  const kiln_shape *in_shape, int32_t max_batch)
{
    const reduce_config *c = config;
    reduce_replica *r = replica;
    if (c->given.op != KILN_REDUCE_MAX && c->given.op != KILN_REDUCE_MIN)
        return KILN_OK;
    const size_t outs = (size_t)(kiln_shape_size(in_shape) / c->count);
    return kiln_buffer_create(dev, 2 * (size_t)max_batch * outs * sizeof(float),
                              "reduce ties", &r->ties);
}

static void reduce_release(void *replica)
{
    reduce_replica *r = replica;
    kiln_buffer_destroy(r->ties);
    r->ties = NULL;
}

/* The arguments reduce.cl's KILN_REDUCE_SHAPE_ARGS names, after x, y and rows. */
#define SHAPE_ARGS(c, out_size, in_size)                                                      \
    kiln_arg_int(out_size), kiln_arg_int(in_size), kiln_arg_int((c)->count),                  \
        kiln_arg_int((c)->given.op), kiln_arg_int((c)->kept_dims[1]),                         \
        kiln_arg_int((c)->kept_dims[2]), kiln_arg_int((c)->kept_dims[3]),                     \
        kiln_arg_int((c)->kept_strides[0]), kiln_arg_int((c)->kept_strides[1]),               \
        kiln_arg_int((c)->kept_strides[2]), kiln_arg_int((c)->kept_strides[3]),               \
        kiln_arg_int((c)->reduced_dims[1]), kiln_arg_int((c)->reduced_dims[2]),               \
        kiln_arg_int((c)->reduced_dims[3]), kiln_arg_int((c)->reduced_strides[0]),            \
        kiln_arg_int((c)->reduced_strides[1]), kiln_arg_int((c)->reduced_strides[2]),         \
        kiln_arg_int((c)->reduced_strides[3])

static kiln_status reduce_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const reduce_config *c = config;
    const int64_t out_size = kiln_shape_size(s->out_shape);
    const int64_t in_size = kiln_shape_size(&s->in_shape[0]);
    const int64_t rows = s->batch * out_size;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_int(rows), SHAPE_ARGS(c, out_size, in_size));
    return kiln_run_per_row(s->dev, "reduce", "kiln_reduce_forward", (size_t)rows,
                            (size_t)c->count, a);
}

static kiln_status reduce_backward(const void *config, void *replica, const kiln_step *s)
{
    const reduce_config *c = config;
    const reduce_replica *r = replica;
    if (!s->d_in[0])
        return KILN_OK;
    const int64_t out_size = kiln_shape_size(s->out_shape);
    const int64_t in_size = kiln_shape_size(&s->in_shape[0]);
    const int64_t rows = s->batch * out_size, n = s->batch * in_size;
    kiln_buffer *ties = r->ties ? r->ties : s->d_out;   /* read only by max and min */
    if (r->ties) {
        kiln_args t = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(r->ties),
                                kiln_arg_int(rows), SHAPE_ARGS(c, out_size, in_size));
        const kiln_status st = kiln_run1(s->dev, "reduce", "kiln_reduce_ties", (size_t)rows, t);
        if (st != KILN_OK)
            return st;
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(ties), kiln_arg_buffer(s->d_in[0]), kiln_arg_int(n),
                            kiln_arg_int(out_size), kiln_arg_int(in_size),
                            kiln_arg_int(c->count), kiln_arg_int(c->given.op),
                            kiln_arg_int(c->in_dims[1]), kiln_arg_int(c->in_dims[2]),
                            kiln_arg_int(c->in_dims[3]), kiln_arg_int(c->out_strides[0]),
                            kiln_arg_int(c->out_strides[1]), kiln_arg_int(c->out_strides[2]),
                            kiln_arg_int(c->out_strides[3]),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return kiln_run1(s->dev, "reduce", "kiln_reduce_backward", (size_t)n, a);
}

static uint64_t reduce_flops(const void *config, const kiln_shape *in_shape)
{
    (void)config;
    return (uint64_t)kiln_shape_size(in_shape);
}

/* args: a kiln_reduce_args. */
static void reduce_configure(void *config, const void *args)
{
    ((reduce_config *)config)->given = *(const kiln_reduce_args *)args;
}

static void reduce_describe(const void *config, void *args)
{
    *(kiln_reduce_args *)args = ((const reduce_config *)config)->given;
}

static const kiln_layer_field reduce_fields[] = {
    {.key = "op", .type = KILN_FIELD_INT, .offset = offsetof(kiln_reduce_args, op)},
    {.key = "n_axes", .type = KILN_FIELD_INT, .offset = offsetof(kiln_reduce_args, n_axes)},
    {.key = "axes", .type = KILN_FIELD_QUAD, .offset = offsetof(kiln_reduce_args, axes)},
    {.key = "keepdims", .type = KILN_FIELD_BOOL, .offset = offsetof(kiln_reduce_args, keepdims)},
};

/* kiln's axes as they are (the batch 0), whatever layout the graph thinks
 * of them in; ReduceSum takes its axes as an input from opset 13, the
 * others as an attribute until 18. Every axis reduced without keepdims is
 * kiln's (1): ONNX's (N) unsqueezed. */
static void reduce_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    static const char *const ops[] = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"};
    const reduce_config *c = g->layers[i].config;
    const int32_t rank = kiln_onnx_input_shape(g, i, 0)->rank;
    int64_t axes[KILN_MAX_RANK];
    int64_t n = 0;
    for (int32_t d = 0; d < rank; d++)
        if (c->reduced_mask & (1 << d))
            axes[n++] = d + 1;
    const int all = n == rank && !c->given.keepdims;
    const char *in[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL), NULL};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    const char *reduced = all ? kiln_onnx_unique_name(g, kiln_onnx_printf(
                                    g, "%s/reduced", g->layers[i].name))
                              : out;
    const int sum = c->given.op == KILN_REDUCE_SUM;
    if (sum)
        in[1] = kiln_onnx_int64s(g, i, "axes", axes, n);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, ops[c->given.op], in, sum ? 2 : 1, reduced);
    if (!sum)
        kiln_onnx_attr_ints(g, nd, "axes", axes, (size_t)n);
    kiln_onnx_attr_int(g, nd, "keepdims", c->given.keepdims ? 1 : 0);
    if (all) {
        const int64_t one = 1;
        const char *unsqueeze[2] = {reduced, kiln_onnx_int64s(g, i, "unsqueeze_axes", &one, 1)};
        kiln_onnx_add_node(g, "Unsqueeze", unsqueeze, 2, out);
    }
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

/* The axes of the node: its attribute, or (ReduceSum from opset 13, the
 * others from 18) its constant input; none at all is every axis. */
static kiln_status onnx_axes(kiln_onnx_import *imp, int64_t *axes, int *n)
{
    const int sum = strcmp(imp->op, "ReduceSum") == 0;
    const int from_input = imp->opset >= (sum ? 13 : 18);
    kiln_status st = kiln_onnx_check_attrs(imp, from_input ? "keepdims:i,noop_with_empty_axes:i"
                                                           : "axes:I,keepdims:i");
    if (st == KILN_OK && from_input)
        st = kiln_onnx_need_constant(imp, 1, "axes", 1);
    if (st != KILN_OK)
        return st;
    const int rank = imp->in[0].rank;
    *n = 0;
    if (from_input && imp->n_in > 1 && *imp->in[1].name) {
        const kiln_onnx_in *t = &imp->in[1];
        const int64_t count = t->rank == 0 ? 1 : t->dims[0];
        if (t->rank > 1 || count > rank)
            return kiln_onnx_refuse(imp, "input 1 (axes) '%s' holds %lld axes of a %d-D value",
                                    t->name, (long long)count, rank);
        for (int64_t k = 0; k < count; k++)
            axes[(*n)++] = (int64_t)t->data[k];
    } else if (!from_input && kiln_onnx_find_attr(imp, "axes")) {
        const kiln_onnx_in_attr *a = kiln_onnx_find_attr(imp, "axes");
        if (a->n_ints > (size_t)rank)
            return kiln_onnx_refuse(imp, "attribute 'axes' holds %zu axes of a %d-D value",
                                    a->n_ints, rank);
        for (size_t k = 0; k < a->n_ints; k++)
            axes[(*n)++] = a->ints[k];
    }
    if (*n == 0 && kiln_onnx_attr_i(imp, "noop_with_empty_axes", 0))
        return kiln_onnx_refuse(imp, "noop_with_empty_axes with no axes (the identity) reached "
                                "the reduce layer");
    if (*n == 0)
        return kiln_onnx_refuse(imp, "no axes: every axis reduced, the batch (axis 0) too; "
                                "kiln reduces within a sample, so that a sample's output does "
                                "not depend on the rest of its batch");
    return KILN_OK;
}

/* ReduceMean, ReduceSum, ReduceMax and ReduceMin over any axes but the
 * batch. A 4-D value not held in ONNX's order alone is reduced as kiln
 * holds it, (H, W, C), when the result keeps ONNX's order of the axes that
 * stay (keepdims, the channels reduced, or one axis left); else in ONNX's
 * order. */
static kiln_status reduce_import_onnx(kiln_onnx_import *imp)
{
    static const char *const ops[] = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"};
    int op = 0;
    while (op < 4 && strcmp(ops[op], imp->op) != 0)
        op++;
    if (op == 4)
        return kiln_onnx_refuse(imp, "not a reduction");
    int64_t axes[KILN_MAX_RANK + 1];
    int n;
    kiln_status st = onnx_axes(imp, axes, &n);
    if (st != KILN_OK)
        return st;
    const int rank = imp->in[0].rank;
    int reduced = 0;
    for (int k = 0; k < n; k++) {
        const int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
        if (a < 0 || a >= rank)
            return kiln_onnx_refuse(imp, "axis %lld of a %d-D value", (long long)axes[k], rank);
        if (a == 0)
            return kiln_onnx_refuse(imp, "axis %lld is the batch (axis 0); kiln reduces within "
                                    "a sample, so that a sample's output does not depend on "
                                    "the rest of its batch", (long long)axes[k]);
        if (reduced & (1 << a))
            return kiln_onnx_refuse(imp, "axis %lld is given twice", (long long)axes[k]);
        reduced |= 1 << a;
    }
    const int64_t keepdims = kiln_onnx_attr_i(imp, "keepdims", 1);
    if (keepdims != 0 && keepdims != 1)
        return kiln_onnx_refuse(imp, "attribute 'keepdims' is %lld; it is 0 or 1",
                                (long long)keepdims);
    const int kept = rank - 1 - n;
    const int cl = rank == 4 && imp->in[0].held != KILN_ONNX_WANT_ONNX &&
                   (keepdims || (reduced & 2) || kept <= 1);
    kiln_reduce_args *a = (kiln_reduce_args *)(void *)imp->args.bytes;
    *a = (kiln_reduce_args){.op = op, .n_axes = n, .keepdims = (int32_t)keepdims};
    static const int32_t to_cl[4] = {0, 3, 1, 2};   /* ONNX's (N, C, H, W) in kiln's (H, W, C) */
    int k = 0;
    for (int d = 1; d < rank; d++)
        if (reduced & (1 << d))
            a->axes[k++] = cl ? to_cl[d] : d;
    imp->want = cl ? KILN_ONNX_WANT_CHANNELS_LAST : KILN_ONNX_WANT_ONNX;
    imp->n_data = 1;
    if (kept == 0 && !keepdims)
        imp->out_rank = 1;   /* ONNX's (N); kiln's (1) */
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_reduce = {
    .kind = "reduce", .config_size = sizeof(reduce_config),
    .replica_size = sizeof(reduce_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = reduce_configure, .describe = reduce_describe, .infer = reduce_infer,
    .prepare = reduce_prepare, .forward = reduce_forward, .backward = reduce_backward,
    .release = reduce_release, .flops = reduce_flops,
    .args_size = sizeof(kiln_reduce_args), KILN_FIELDS(reduce_fields),
    .export_onnx = reduce_export_onnx, .import_onnx = reduce_import_onnx,
};
