/* nn.MultiheadAttention as torch.onnx.export (PyTorch 1.13) writes it, self-
 * or cross-attention with no mask or a causal one, imported as one kiln
 * MultiHeadAttention layer (onnx_import.h). PyTorch computes it in (T, N, E)
 * order whatever batch_first says, folding the batch into the heads, which
 * kiln (the batch first, a sample at a time) cannot import op by op. The
 * block, from its input x (N, T, E):
 *   Transpose(x, 1 0 2) -> MatMul(., Transpose(in_proj_weight)) -> Add(in_proj_bias)
 *   -> three Slices of the last axis, [0, E) [E, 2E) [2E, 3E): q, k, v
 *   -> each Reshape (T, N*heads, d); q: Transpose(1 0 2) -> Div(sqrt d) or Mul(1/sqrt d);
 *      k: Transpose(1 2 0); v: Transpose(1 0 2)
 *   -> MatMul(q, k) [-> Mul(., 1) -> Add(., Mul(mask, 1)): attn_mask, causal only]
 *   -> Softmax(last axis) -> MatMul(., v) -> Transpose(1 0 2) -> Reshape (T*N, E)
 *   -> Gemm(out_proj.weight, out_proj.bias, transB) -> Reshape (T, N, E) -> Transpose(1 0 2)
 * Cross-attention (query x (N, T, E), key = value m (N, S, E), a decoder over
 * an encoder's output) has a projection each: Split(in_proj_weight) and
 * Split(in_proj_bias) into rows [0, E) and [E, 3E); Transpose(x, 1 0 2) ->
 * MatMul(., Transpose(the first)) -> Add(its bias) is q; Transpose(m, 1 0 2)
 * -> MatMul, Add of the second, then two Slices, k and v, of length S; the
 * rest as above. With kdim = vdim = K other than E the weights are
 * separate, q_proj_weight (E, E), k_proj_weight and v_proj_weight (E, K),
 * the bias still one in_proj_bias (3E): three projections of their own,
 * MatMul(Transpose(.), Transpose(W)) + Slice(in_proj_bias), the key's and
 * value's of one Transpose(m, 1 0 2), m (N, S, K). The block is matched
 * from the query's Transpose, which PyTorch writes first; the memory must
 * be imported by then.
 * A key_padding_mask, a bool graph input pad (N, S), is the Add's other term:
 *   Reshape(pad, (N, 1, 1, S)) -> Expand (N, heads, 1, S) -> Reshape (N*heads, 1, S)
 *   -> Where(., -inf, zeros of its shape) [-> Mul(., 1)]
 *   (with a causal attn_mask beside it, Where(., -inf, that mask), as causal)
 * and becomes the layer's padding mask (kiln_multi_head_attention_masked), pad
 * an Input of floats 0 and 1.
 * The Slice bounds and Reshape shapes are Shape arithmetic of the block's
 * own values; they are evaluated here, for two batch sizes, from the
 * shapes the block's values must have. The block is taken only when every
 * value inside it is read inside it (the last alone leaves); the shape
 * arithmetic is skipped with it, and a constant it shares with a later
 * block (PyTorch reuses one Unsqueeze of the mask) is recorded as the
 * constant it is. Anything else is imported op by op, where the first
 * Transpose is refused, with the reason this block was not taken. */
#include "runtime/saving/onnx_import.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_INTERNAL 40
#define MAX_DEPTH 24

/* A small tensor of the shape arithmetic, as doubles. */
typedef struct att_value {
    int rank;
    int64_t dims[KILN_MAX_RANK + 1];
    int64_t count;
    double *v;
    int real;        /* float values (else integers) */
    int varies;      /* depends on the batch's size */
} att_value;

/* The shape of one of the block's values. */
typedef struct att_shape {
    const char *name;
    int rank;
    int64_t dims[4];
    int batch_axis;   /* that axis is dims * the batch */
} att_shape;

typedef struct att_match {
    kiln_importer *im;
    const KilnOnnx__GraphProto *g;
    char *mark;      /* per node: 1 the block's chain, 2 its shape arithmetic */
    char *varies;    /* per node marked 2: its value depends on the batch */
    int64_t batch;   /* the batch size the shape arithmetic is evaluated at */
    att_shape internal[MAX_INTERNAL];
    int n_internal;
    char why[400];
} att_match;

static size_t maker(const att_match *m, const char *name)
{
    for (size_t k = 0; k < m->g->n_node; k++)
        for (size_t o = 0; o < m->g->node[k]->n_output; o++)
            if (strcmp(m->g->node[k]->output[o], name) == 0)
                return k;
    return SIZE_MAX;
}

/* The one reader of `name` that is not a Shape node or other shape
 * arithmetic (marked 2), if it is an `op` (SIZE_MAX otherwise); closed()
 * checks the others. */
static size_t main_reader(const att_match *m, const char *name, const char *op)
{
    size_t found = SIZE_MAX;
    int count = 0;
    for (size_t k = 0; k < m->g->n_node; k++) {
        const KilnOnnx__NodeProto *n = m->g->node[k];
        for (size_t i = 0; i < n->n_input; i++)
            if (strcmp(n->input[i], name) == 0) {
                if (strcmp(n->op_type, "Shape") != 0 && m->mark[k] != 2) {
                    found = k;
                    count++;
                }
                break;
            }
    }
    if (count != 1 || strcmp(m->g->node[found]->op_type, op) != 0 ||
        m->g->node[found]->n_output != 1 || m->im->skip[found])
        return SIZE_MAX;
    return found;
}

static const KilnOnnx__AttributeProto *attribute(const KilnOnnx__NodeProto *n, const char *name)
{
    for (size_t k = 0; k < n->n_attribute; k++)
        if (strcmp(n->attribute[k]->name, name) == 0)
            return n->attribute[k];
    return NULL;
}

static int64_t attr_int(const KilnOnnx__NodeProto *n, const char *name, int64_t fallback)
{
    const KilnOnnx__AttributeProto *a = attribute(n, name);
    return a ? a->i : fallback;
}

/* A Transpose of one attribute, perm (p0, p1, p2). */
static int transpose_is(const KilnOnnx__NodeProto *n, int p0, int p1, int p2)
{
    const KilnOnnx__AttributeProto *p = attribute(n, "perm");
    return n->n_attribute == 1 && p && p->n_ints == 3 && p->ints[0] == p0 && p->ints[1] == p1 &&
           p->ints[2] == p2;
}

static void internal(att_match *m, const char *name, int rank, int64_t d0, int64_t d1,
                     int64_t d2, int batch_axis)
{
    if (m->n_internal < MAX_INTERNAL)
        m->internal[m->n_internal++] = (att_shape){
            .name = name, .rank = rank, .dims = {d0, d1, d2}, .batch_axis = batch_axis};
}

/* A rank-4 value of the padding mask's chain. */
static void internal4(att_match *m, const char *name, const int64_t *dims, int batch_axis)
{
    if (m->n_internal < MAX_INTERNAL)
        m->internal[m->n_internal++] = (att_shape){
            .name = name, .rank = 4, .dims = {dims[0], dims[1], dims[2], dims[3]},
            .batch_axis = batch_axis};
}

static int alloc_value(att_match *m, att_value *out, int rank, const int64_t *dims)
{
    out->rank = rank;
    out->count = 1;
    for (int d = 0; d < rank; d++) {
        out->dims[d] = dims[d];
        out->count *= dims[d];
    }
    out->v = out->count >= 0 && out->count < (1 << 24)
                 ? kiln_onnx_alloc(&m->im->mem, (size_t)(out->count + 1) * sizeof *out->v)
                 : NULL;
    return out->v != NULL;
}

static int eval(att_match *m, const char *name, int depth, att_value *out);

/* Input i of node n evaluated (0 when absent or not evaluable). */
static int eval_input(att_match *m, const KilnOnnx__NodeProto *n, size_t i, int depth,
                      att_value *out)
{
    return i < n->n_input && *n->input[i] && eval(m, n->input[i], depth + 1, out);
}

/* Element-wise arithmetic: operands of one shape, or one of one value. */
static int arithmetic(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value a, b;
    if (n->n_input != 2 || !eval_input(m, n, 0, depth, &a) || !eval_input(m, n, 1, depth, &b))
        return 0;
    const att_value *big = a.count >= b.count && (a.count > 1 || a.rank >= b.rank) ? &a : &b;
    int same = a.rank == b.rank;
    for (int d = 0; same && d < a.rank; d++)
        same = a.dims[d] == b.dims[d];
    if ((!same && a.count != 1 && b.count != 1) || !alloc_value(m, out, big->rank, big->dims))
        return 0;
    const char op = n->op_type[0];
    out->real = a.real || b.real;
    out->varies = a.varies || b.varies;
    for (int64_t k = 0; k < out->count; k++) {
        const double x = a.v[a.count == 1 ? 0 : k], y = b.v[b.count == 1 ? 0 : k];
        if (!out->real && op == 'D' && y == 0)
            return 0;
        out->v[k] = op == 'A' ? x + y : op == 'S' ? x - y : op == 'M' ? x * y
                    : out->real ? x / y : trunc(x / y);
    }
    return 1;
}

/* Shape of one of the block's values, or of the computed input. */
static int shape_of(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value c;
    if (n->n_attribute || n->n_input != 1)   /* opset 15's start and end */
        return 0;
    for (int k = 0; k < m->n_internal; k++)
        if (strcmp(m->internal[k].name, n->input[0]) == 0) {
            const int64_t one = m->internal[k].rank;
            if (!alloc_value(m, out, 1, &one))
                return 0;
            for (int d = 0; d < m->internal[k].rank; d++)
                out->v[d] = (double)m->internal[k].dims[d] *
                            (d == m->internal[k].batch_axis ? (double)m->batch : 1.0);
            out->varies = 1;
            return 1;
        }
    /* A constant's (an Expand's sizes, whose -1s PyTorch replaces). */
    if (!eval_input(m, n, 0, depth, &c) || c.varies)
        return 0;
    const int64_t rank = c.rank;
    if (!alloc_value(m, out, 1, &rank))
        return 0;
    for (int d = 0; d < c.rank; d++)
        out->v[d] = (double)c.dims[d];
    return 1;
}

static int gather(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value data, at;
    if (n->n_input != 2 || attr_int(n, "axis", 0) != 0 || !eval_input(m, n, 0, depth, &data) ||
        !eval_input(m, n, 1, depth, &at) || data.rank != 1 || at.rank > 1 || at.real ||
        !alloc_value(m, out, at.rank, at.dims))
        return 0;
    for (int64_t k = 0; k < at.count; k++) {
        const int64_t i = (int64_t)at.v[k] < 0 ? (int64_t)at.v[k] + data.count : (int64_t)at.v[k];
        if (i < 0 || i >= data.count)
            return 0;
        out->v[k] = data.v[i];
    }
    out->real = data.real;
    out->varies = data.varies || at.varies;
    return 1;
}

static int unsqueeze(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value data, axes;
    const KilnOnnx__AttributeProto *a = attribute(n, "axes");
    if (!eval_input(m, n, 0, depth, &data))
        return 0;
    if (a) {
        axes.count = axes.rank = 1;
        axes.dims[0] = (int64_t)a->n_ints;
        if (!alloc_value(m, &axes, 1, axes.dims))
            return 0;
        for (size_t k = 0; k < a->n_ints; k++)
            axes.v[k] = (double)a->ints[k];
    } else if (!eval_input(m, n, 1, depth, &axes)) {
        return 0;
    }
    const int rank = data.rank + (int)axes.count;
    if (rank > KILN_MAX_RANK + 1)
        return 0;
    int64_t dims[KILN_MAX_RANK + 1];
    int inserted[KILN_MAX_RANK + 1] = {0};
    for (int64_t k = 0; k < axes.count; k++) {
        const int axis = (int)axes.v[k] < 0 ? (int)axes.v[k] + rank : (int)axes.v[k];
        if (axis < 0 || axis >= rank || inserted[axis])
            return 0;
        inserted[axis] = 1;
    }
    for (int d = 0, from = 0; d < rank; d++)
        dims[d] = inserted[d] ? 1 : data.dims[from++];
    if (!alloc_value(m, out, rank, dims))
        return 0;
    memcpy(out->v, data.v, (size_t)data.count * sizeof *out->v);
    out->real = data.real;
    out->varies = data.varies;
    return 1;
}

static int concat(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value parts[8];
    int64_t total = 0;
    if (n->n_input > 8 || attr_int(n, "axis", 1) != 0)
        return 0;
    for (size_t i = 0; i < n->n_input; i++) {
        if (!eval_input(m, n, i, depth, &parts[i]) || parts[i].rank != 1)
            return 0;
        total += parts[i].count;
    }
    if (!alloc_value(m, out, 1, &total))
        return 0;
    out->real = out->varies = 0;
    for (size_t i = 0, at = 0; i < n->n_input; at += (size_t)parts[i].count, i++) {
        memcpy(out->v + at, parts[i].v, (size_t)parts[i].count * sizeof *out->v);
        out->real |= parts[i].real;
        out->varies |= parts[i].varies;
    }
    return 1;
}

static int cast(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    const int64_t to = attr_int(n, "to", 0);
    if ((to != KILN_ONNX_FLOAT && to != KILN_ONNX_INT64) || !eval_input(m, n, 0, depth, out))
        return 0;
    out->real = to == KILN_ONNX_FLOAT;
    for (int64_t k = 0; !out->real && k < out->count; k++)
        out->v[k] = trunc(out->v[k]);
    return 1;
}

/* Equal and Where (the -1 sizes of an Expand's shape): operands of one
 * shape, or of one value. */
static int equal_or_where(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    const int where = n->op_type[0] == 'W';
    const size_t count = where ? 3 : 2;
    att_value in[3];
    const att_value *big = NULL;
    if (n->n_input != count)
        return 0;
    for (size_t i = 0; i < count; i++) {
        if (!eval_input(m, n, i, depth, &in[i]))
            return 0;
        if (!big || in[i].count > big->count)
            big = &in[i];
    }
    for (size_t i = 0; i < count; i++) {
        int same = in[i].rank == big->rank;
        for (int d = 0; same && d < big->rank; d++)
            same = in[i].dims[d] == big->dims[d];
        if (!same && in[i].count != 1)
            return 0;
    }
    if (!alloc_value(m, out, big->rank, big->dims))
        return 0;
    out->real = where && (in[1].real || in[2].real);
    out->varies = in[0].varies || in[1].varies || (where && in[2].varies);
    for (int64_t k = 0; k < out->count; k++) {
        double at[3];
        for (size_t i = 0; i < count; i++)
            at[i] = in[i].v[in[i].count == 1 ? 0 : k];
        out->v[k] = where ? (at[0] != 0.0 ? at[1] : at[2]) : (double)(at[0] == at[1]);
    }
    return 1;
}

/* ConstantOfShape: its value attribute (0.0 when absent) over the shape. */
static int constant_of_shape(att_match *m, const KilnOnnx__NodeProto *n, int depth,
                             att_value *out)
{
    att_value shape, fill = {.count = 1, .real = 1};
    double zero = 0.0;
    fill.v = &zero;
    const KilnOnnx__AttributeProto *a = attribute(n, "value");
    if (n->n_input != 1 || n->n_attribute > (a ? 1u : 0u) ||
        !eval_input(m, n, 0, depth, &shape) || shape.rank != 1 || shape.real ||
        shape.count > KILN_MAX_RANK + 1)
        return 0;
    if (a) {
        const char *held = kiln_onnx_printf(&m->im->mem, "%s/value", n->output[0]);
        if (!held || !a->t || (!kiln_import_find(m->im, held) &&
                               kiln_import_tensor(m->im, a->t, held,
                                                  kiln_import_node_name(n)) != KILN_OK) ||
            !eval(m, held, depth + 1, &fill) || fill.count != 1)
            return 0;
    }
    int64_t dims[KILN_MAX_RANK + 1];
    for (int64_t d = 0; d < shape.count; d++)
        dims[d] = (int64_t)shape.v[d];
    if (!alloc_value(m, out, (int)shape.count, dims))
        return 0;
    for (int64_t k = 0; k < out->count; k++)
        out->v[k] = fill.v[0];
    out->real = fill.real;
    out->varies = shape.varies;
    return 1;
}

/* Slice of a vector (a shape's last entries: E = query.size(-1)). */
static int slice_vector(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value data, start, end, axes, steps;
    if (n->n_input < 3 || n->n_input > 5 || !eval_input(m, n, 0, depth, &data) ||
        data.rank != 1 || !eval_input(m, n, 1, depth, &start) ||
        !eval_input(m, n, 2, depth, &end) || start.count != 1 || end.count != 1 ||
        (n->n_input > 3 && (!eval_input(m, n, 3, depth, &axes) || axes.count != 1 ||
                            (axes.v[0] != 0 && axes.v[0] != -1))) ||
        (n->n_input > 4 && (!eval_input(m, n, 4, depth, &steps) || steps.count != 1 ||
                            steps.v[0] != 1)))
        return 0;
    const double len = (double)data.count;
    double b = start.v[0] < 0 ? start.v[0] + len : start.v[0];
    double e = end.v[0] < 0 ? end.v[0] + len : end.v[0];
    b = fmin(fmax(b, 0.0), len);
    e = fmin(fmax(e, b), len);
    const int64_t count = (int64_t)(e - b);
    if (!alloc_value(m, out, 1, &count))
        return 0;
    memcpy(out->v, data.v + (int64_t)b, (size_t)count * sizeof *out->v);
    out->real = data.real;
    out->varies = data.varies || start.varies || end.varies;
    return 1;
}

/* Squeeze of axes of length 1 (all of them without axes). */
static int squeeze(att_match *m, const KilnOnnx__NodeProto *n, int depth, att_value *out)
{
    att_value data, axes = {0};
    const KilnOnnx__AttributeProto *a = attribute(n, "axes");   /* before opset 13 */
    if (!eval_input(m, n, 0, depth, &data) ||
        (n->n_input > 1 && *n->input[1] && !eval_input(m, n, 1, depth, &axes)))
        return 0;
    int drop[KILN_MAX_RANK + 1] = {0}, rank = 0;
    int64_t dims[KILN_MAX_RANK + 1];
    const int64_t listed = a ? (int64_t)a->n_ints : axes.count;
    for (int64_t k = 0; k < listed; k++) {
        const int axis = (int)(a ? a->ints[k] : (int64_t)axes.v[k]);
        const int at = axis < 0 ? axis + data.rank : axis;
        if (at < 0 || at >= data.rank || data.dims[at] != 1)
            return 0;
        drop[at] = 1;
    }
    for (int d = 0; d < data.rank; d++)
        if (!(listed ? drop[d] : data.dims[d] == 1))
            dims[rank++] = data.dims[d];
    if (!alloc_value(m, out, rank, dims))
        return 0;
    memcpy(out->v, data.v, (size_t)data.count * sizeof *out->v);
    out->real = data.real;
    out->varies = data.varies;
    return 1;
}

/* The value `name` of the shape arithmetic: a constant the importer holds,
 * or a node's result (the node marked as part of the block). */
static int eval(att_match *m, const char *name, int depth, att_value *out)
{
    kiln_importer *im = m->im;
    memset(out, 0, sizeof *out);
    const kiln_import_value *c = kiln_import_find(im, name);
    if (c && c->computed)
        return 0;
    if (!c) {
        const size_t k = maker(m, name);
        if (k == SIZE_MAX || depth > MAX_DEPTH || m->mark[k] == 1 || im->skip[k])
            return 0;
        const KilnOnnx__NodeProto *n = m->g->node[k];
        const char *op = n->op_type;
        int ok = 0;
        if (n->n_output != 1 || (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0))
            return 0;
        if (strcmp(op, "Constant") == 0) {
            const KilnOnnx__AttributeProto *a = n->n_attribute == 1 ? n->attribute[0] : NULL;
            /* A Constant that does not decode is refused when it is
             * imported itself. */
            if (!a || strcmp(a->name, "value") != 0 || !a->t ||
                kiln_import_tensor(im, a->t, name, kiln_import_node_name(n)) != KILN_OK)
                return 0;
            m->mark[k] = 2;
            return eval(m, name, depth + 1, out);
        }
        if (strcmp(op, "Shape") == 0)
            ok = shape_of(m, n, depth, out);
        else if (strcmp(op, "Gather") == 0)
            ok = gather(m, n, depth, out);
        else if (strcmp(op, "Unsqueeze") == 0)
            ok = unsqueeze(m, n, depth, out);
        else if (strcmp(op, "Concat") == 0)
            ok = concat(m, n, depth, out);
        else if (strcmp(op, "Cast") == 0)
            ok = cast(m, n, depth, out);
        else if (strcmp(op, "Equal") == 0 || strcmp(op, "Where") == 0)
            ok = equal_or_where(m, n, depth, out);
        else if (strcmp(op, "ConstantOfShape") == 0)
            ok = constant_of_shape(m, n, depth, out);
        else if (strcmp(op, "Slice") == 0)
            ok = slice_vector(m, n, depth, out);
        else if (strcmp(op, "Squeeze") == 0)
            ok = squeeze(m, n, depth, out);
        else if (strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 || strcmp(op, "Mul") == 0 ||
                 strcmp(op, "Div") == 0)
            ok = arithmetic(m, n, depth, out);
        if (ok) {
            m->mark[k] = 2;
            m->varies[k] |= (char)out->varies;
        }
        return ok;
    }
    if (!alloc_value(m, out, c->rank, c->dims))
        return 0;
    for (int64_t k = 0; k < out->count; k++)
        out->v[k] = c->f ? (double)c->f[k] : (double)c->ints[k];
    out->real = c->f != NULL;
    return 1;
}

/* main_reader's Reshape of `name`, if it is a plain one (a shape input,
 * allowzero 0); SIZE_MAX otherwise. */
static size_t plain_reshape(const att_match *m, const char *name)
{
    const size_t r = main_reader(m, name, "Reshape");
    if (r == SIZE_MAX || m->g->node[r]->n_input != 2 ||
        attr_int(m->g->node[r], "allowzero", 0) != 0)
        return SIZE_MAX;
    return r;
}

/* `name` evaluated at batch sizes 2 and 5 equals `want` with `batch_axis`
 * multiplied by the batch (-1: none). */
static int shape_is(att_match *m, const char *name, int rank, const int64_t *want,
                    int batch_axis)
{
    static const int64_t batches[2] = {2, 5};
    for (int b = 0; b < 2; b++) {
        att_value v;
        m->batch = batches[b];
        if (!eval(m, name, 0, &v) || v.real || v.rank != 1 || v.count != rank)
            return 0;
        for (int d = 0; d < rank; d++)
            if (v.v[d] != (double)want[d] * (d == batch_axis ? (double)batches[b] : 1.0))
                return 0;
    }
    return 1;
}

/* A float constant of `rank` whose dims are `dims`; its values, or NULL. */
static const kiln_import_value *weight(att_match *m, const char *name, int rank, int64_t d0,
                                       int64_t d1)
{
    const kiln_import_value *v = kiln_import_find(m->im, name);
    if (!v || v->computed || !v->f || v->rank != rank || v->dims[0] != d0 ||
        (rank == 2 && v->dims[1] != d1))
        return NULL;
    return v;
}

#define NEED(cond, ...)                                                                       \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            snprintf(m->why, sizeof m->why, __VA_ARGS__);                                     \
            return 0;                                                                         \
        }                                                                                     \
    } while (0)

/* What the block holds, once matched. */
typedef struct att_block {
    /* q, k and v's weights: the packed in_proj (3E, E) thrice, or, with
     * kdim = vdim = K other than E, q_proj_weight (E, E), k_proj_weight and
     * v_proj_weight (E, K); in_proj_bias (3E); out_proj (E, E), (E). */
    const kiln_import_value *w[3], *b, *wo, *bo;
    int64_t t, s, e, heads, dim;   /* s: the key and value's length */
    int64_t kdim;                  /* the key and value's width: K, or E */
    int separate;                  /* w[] are q/k/v_proj_weight */
    int causal;
    size_t memory;   /* cross-attention: the key and value's Transpose (SIZE_MAX: none) */
    size_t padding;  /* key_padding_mask: the Reshape of the bool input (SIZE_MAX: none) */
    size_t last;     /* the final Transpose */
} att_block;

/* The mask term of Add(scores, term): Mul(mask, 1), or the mask; 1 when it
 * is PyTorch's causal mask (0 on and below the diagonal, -inf above), T
 * query rows by S key columns. */
static int causal_mask(att_match *m, const char *term, int64_t t, int64_t s)
{
    att_value v;
    m->batch = 2;
    if (!eval(m, term, 0, &v) || !v.real || v.varies || v.count != t * s ||
        (v.rank == 3 && v.dims[0] != 1) || v.rank < 2 || v.rank > 3)
        return 0;
    for (int64_t r = 0; r < t; r++)
        for (int64_t c = 0; c < s; c++)
            if (c <= r ? v.v[r * s + c] != 0.0 : !(isinf(v.v[r * s + c]) && v.v[r * s + c] < 0))
                return 0;
    return 1;
}

/* `want` (batch axis 0 multiplied by the batch) is what Expand of a value
 * of dims `in` (the same) to the shape `name` gives, at batch sizes 2 and
 * 5: each axis of the shape 1 or the value's. */
static int expands_to(att_match *m, const char *name, const int64_t *in, const int64_t *want)
{
    static const int64_t batches[2] = {2, 5};
    for (int b = 0; b < 2; b++) {
        att_value v;
        m->batch = batches[b];
        if (!eval(m, name, 0, &v) || v.real || v.rank != 1 || v.count != 4)
            return 0;
        for (int d = 0; d < 4; d++) {
            const int64_t from = in[d] * (d == 0 ? batches[b] : 1);
            const int64_t to = want[d] * (d == 0 ? batches[b] : 1), size = (int64_t)v.v[d];
            if (size != to && !(size == 1 && from == to) && !(from == 1 && size == to))
                return 0;
        }
    }
    return 1;
}

/* The key_padding_mask term of Add(scores, term) as PyTorch 1.13 writes
 * it: [Mul(., 1) of] Where(c, -inf, zeros) (zeros_like, then masked_fill),
 * c [a Cast of] Reshape (N * heads, 1, S) of Expand (N, heads, 1, S) of
 * Reshape (N, 1, 1, S) of a bool graph input (N, S); *causal when the
 * zeros are a causal attn_mask instead. That Reshape's node (its input the
 * mask), or SIZE_MAX. */
static size_t padding_mask(att_match *m, const char *term, const att_block *blk, int *causal)
{
    const KilnOnnx__GraphProto *g = m->g;
    const int64_t s = blk->s, h = blk->heads;
    size_t k = maker(m, term);
    att_value v;
    m->batch = 2;
    if (k != SIZE_MAX && strcmp(g->node[k]->op_type, "Mul") == 0 && g->node[k]->n_input == 2 &&
        !m->im->skip[k]) {
        int one = -1;
        for (int i = 0; i < 2 && one < 0; i++)
            if (eval(m, g->node[k]->input[i], 0, &v) && v.count == 1 && v.v[0] == 1.0)
                one = i;
        if (one < 0)
            return SIZE_MAX;
        m->mark[k] = 1;
        k = maker(m, g->node[k]->input[1 - one]);
    }
    if (k == SIZE_MAX || strcmp(g->node[k]->op_type, "Where") != 0 ||
        g->node[k]->n_input != 3 || m->im->skip[k])
        return SIZE_MAX;
    const KilnOnnx__NodeProto *w = g->node[k];
    if (!eval(m, w->input[1], 0, &v) || v.count != 1 || !(isinf(v.v[0]) && v.v[0] < 0))
        return SIZE_MAX;
    m->mark[k] = 1;
    size_t c = maker(m, w->input[0]);
    const int64_t flat[3] = {h, 1, s};
    if (c != SIZE_MAX && strcmp(g->node[c]->op_type, "Cast") == 0 && !m->im->skip[c] &&
        attr_int(g->node[c], "to", 0) == KILN_ONNX_BOOL) {
        m->mark[c] = 1;
        internal(m, g->node[c]->output[0], 3, h, 1, s, 0);
        c = maker(m, g->node[c]->input[0]);
    }
    /* The Reshapes and the Expand, last to first. */
    const size_t r2 = c;
    if (r2 == SIZE_MAX || strcmp(g->node[r2]->op_type, "Reshape") != 0 ||
        plain_reshape(m, g->node[r2]->input[0]) != r2 ||
        !shape_is(m, g->node[r2]->input[1], 3, flat, 0))
        return SIZE_MAX;
    m->mark[r2] = 1;
    internal(m, g->node[r2]->output[0], 3, h, 1, s, 0);
    const size_t ex = maker(m, g->node[r2]->input[0]);
    const int64_t one[4] = {1, 1, 1, s}, heads[4] = {1, h, 1, s};
    if (ex == SIZE_MAX || strcmp(g->node[ex]->op_type, "Expand") != 0 ||
        g->node[ex]->n_input != 2 || main_reader(m, g->node[ex]->output[0], "Reshape") != r2 ||
        !expands_to(m, g->node[ex]->input[1], one, heads))
        return SIZE_MAX;
    m->mark[ex] = 1;
    internal4(m, g->node[ex]->output[0], heads, 0);
    const size_t r1 = maker(m, g->node[ex]->input[0]);
    if (r1 == SIZE_MAX || strcmp(g->node[r1]->op_type, "Reshape") != 0 ||
        main_reader(m, g->node[r1]->output[0], "Expand") != ex ||
        g->node[r1]->n_input != 2 || attr_int(g->node[r1], "allowzero", 0) != 0 ||
        !shape_is(m, g->node[r1]->input[1], 4, one, 0))
        return SIZE_MAX;
    const kiln_import_value *pad = kiln_import_find(m->im, g->node[r1]->input[0]);
    if (!pad || !pad->computed || !pad->boolean || pad->rank != 2 || pad->dims[1] != s)
        return SIZE_MAX;
    m->mark[r1] = 1;
    internal4(m, g->node[r1]->output[0], one, 0);
    /* What the mask fills: zeros of the condition's shape (ConstantOfShape),
     * or with an attn_mask beside it that mask, which must be causal. */
    m->batch = 2;
    if (!eval(m, w->input[2], 0, &v))
        return SIZE_MAX;
    int zeros = v.count == 2 * h * s;
    for (int64_t i = 0; zeros && i < v.count; i++)
        zeros = v.v[i] == 0.0;
    *causal = !zeros && causal_mask(m, w->input[2], blk->t, s);
    return zeros || *causal ? r1 : SIZE_MAX;
}

/* The rows of the packed in_proj a projection reads (PyTorch's
 * _in_projection_packed): all 3E (self-attention), or, when the query is
 * not the key, the query's E or the key and value's 2E, which a Slice (or
 * a Split) of the initializer's first axis takes, its bounds Shape
 * arithmetic of the query. */
typedef struct att_part {
    const kiln_import_value *src;   /* the in_proj initializer */
    const char *name;               /* the value read */
    int64_t first, rows;
    size_t cut;                     /* the Slice or Split, or SIZE_MAX */
    int separate;                   /* src is a q/k/v_proj_weight (E, width) of its own */
} att_part;

/* `name`, a weight (rank 2, (rows, E)) or bias (rank 1) a projection reads,
 * as such a part; 0 when it is neither. A weight may also be one of the
 * separate (E, width) ones PyTorch keeps when kdim or vdim is not E, width
 * the projected input's. */
static int in_proj_part(att_match *m, const char *name, int rank, int64_t e, int64_t width,
                        att_part *p)
{
    *p = (att_part){.name = name, .cut = SIZE_MAX};
    if ((p->src = weight(m, name, rank, 3 * e, e)) != NULL) {
        p->rows = 3 * e;
        return 1;
    }
    if (rank == 2 && (p->src = weight(m, name, 2, e, width)) != NULL) {
        p->rows = e;
        p->separate = 1;
        return 1;
    }
    const size_t k = kiln_import_find(m->im, name) ? SIZE_MAX : maker(m, name);
    const KilnOnnx__NodeProto *n = k == SIZE_MAX ? NULL : m->g->node[k];
    if (!n || m->im->skip[k] || n->n_input < 1 ||
        !(p->src = weight(m, n->input[0], rank, 3 * e, e)))
        return 0;
    m->batch = 2;
    if (strcmp(n->op_type, "Slice") == 0) {
        att_value start, end, axes, steps;
        if (n->n_input < 4 || n->n_input > 5 || !eval_input(m, n, 1, 0, &start) ||
            !eval_input(m, n, 2, 0, &end) || !eval_input(m, n, 3, 0, &axes) ||
            start.count != 1 || end.count != 1 || axes.count != 1 || axes.v[0] != 0 ||
            (n->n_input == 5 && (!eval_input(m, n, 4, 0, &steps) || steps.count != 1 ||
                                 steps.v[0] != 1)))
            return 0;
        p->first = (int64_t)start.v[0];
        p->rows = (int64_t)fmin(end.v[0], (double)(3 * e)) - p->first;
        p->cut = p->first >= 0 && p->rows > 0 ? k : SIZE_MAX;
        return p->cut != SIZE_MAX;
    }
    if (strcmp(n->op_type, "Split") != 0 || attr_int(n, "axis", 0) != 0)
        return 0;
    att_value sizes = {0};
    const KilnOnnx__AttributeProto *a = attribute(n, "split");   /* before opset 13 */
    if (a) {
        const int64_t count = (int64_t)a->n_ints;
        if (!alloc_value(m, &sizes, 1, &count))
            return 0;
        for (size_t i = 0; i < a->n_ints; i++)
            sizes.v[i] = (double)a->ints[i];
    } else if (n->n_input < 2 || !eval_input(m, n, 1, 0, &sizes)) {
        return 0;
    }
    if (sizes.count != (int64_t)n->n_output)
        return 0;
    for (size_t o = 0, at = 0; o < n->n_output; at += (size_t)sizes.v[o], o++)
        if (strcmp(n->output[o], name) == 0) {
            p->first = (int64_t)at;
            p->rows = (int64_t)sizes.v[o];
            p->cut = k;
        }
    return p->cut != SIZE_MAX;
}

/* The weight MatMul mm reads through its Transpose (or a Transpose the
 * importer folded), by name; NULL when it reads none. */
static const char *transposed_weight(const att_match *m, size_t mm, size_t *tw)
{
    const KilnOnnx__GraphProto *g = m->g;
    const char *wt = g->node[mm]->input[1];
    const kiln_import_value *folded = kiln_import_find(m->im, wt);
    *tw = maker(m, wt);
    return folded && !folded->computed && folded->transpose_of ? folded->transpose_of
           : *tw != SIZE_MAX && strcmp(g->node[*tw]->op_type, "Transpose") == 0 &&
                   g->node[*tw]->n_input == 1 ? g->node[*tw]->input[0] : NULL;
}

/* The projection MatMul mm (its input 0 an input (N, L, width) transposed
 * to (L, N, width), L `len`): MatMul(., Transpose(W)) + b, W and b the same
 * part of the in_proj, or W a separate q/k/v_proj_weight and b part `part`
 * (0 q, 1 k, 2 v) of in_proj_bias; *add its Add, *b the bias'
 * initializer. 0 when it is not (m->why set once it clearly is a
 * projection). */
static int projection_at(att_match *m, size_t mm, int64_t len, int64_t e, int64_t width,
                         int part, att_part *w, const kiln_import_value **b, size_t *add)
{
    const KilnOnnx__GraphProto *g = m->g;
    if (g->node[mm]->n_input != 2)
        return 0;
    size_t tw;
    const char *w_name = transposed_weight(m, mm, &tw);
    if (!w_name || !in_proj_part(m, w_name, 2, e, width, w))
        return 0;
    if (tw != SIZE_MAX) {
        m->mark[tw] = 2;
        m->varies[tw] = 1;   /* never recorded as a constant: it must be the block's alone */
    }
    if (w->cut != SIZE_MAX)
        m->mark[w->cut] = 1;
    m->mark[mm] = 1;
    internal(m, g->node[mm]->output[0], 3, len, 1, w->rows, 1);
    *add = main_reader(m, g->node[mm]->output[0], "Add");
    NEED(*add != SIZE_MAX && g->node[*add]->n_input == 2, "the in_proj MatMul '%s' is not "
         "followed by an Add of its bias alone", kiln_import_node_name(g->node[mm]));
    const KilnOnnx__NodeProto *an = g->node[*add];
    const char *bias = strcmp(an->input[0], g->node[mm]->output[0]) == 0 ? an->input[1]
                                                                           : an->input[0];
    att_part bp;
    const int64_t first = w->separate ? part * e : w->first;
    NEED(in_proj_part(m, bias, 1, e, e, &bp) && bp.first == first && bp.rows == w->rows,
         "the in_proj bias '%s' is not rows [%lld, %lld) of a (%lld) initializer", bias,
         (long long)first, (long long)(first + w->rows), (long long)(3 * e));
    if (bp.cut != SIZE_MAX)
        m->mark[bp.cut] = 1;
    *b = bp.src;
    m->mark[*add] = 1;
    internal(m, an->output[0], 3, len, 1, w->rows, 1);
    return 1;
}

/* The projection from Transpose node k of an input (N, L, E), L `len`,
 * that Transpose's single MatMul: as projection_at. */
static int projection(att_match *m, size_t k, int64_t len, int64_t e, att_part *w,
                      const kiln_import_value **b, size_t *add)
{
    const KilnOnnx__GraphProto *g = m->g;
    const KilnOnnx__NodeProto *t0 = g->node[k];
    m->mark[k] = 1;
    internal(m, t0->output[0], 3, len, 1, e, 1);
    const size_t mm = main_reader(m, t0->output[0], "MatMul");
    if (mm == SIZE_MAX || strcmp(g->node[mm]->input[0], t0->output[0]) != 0)
        return 0;
    return projection_at(m, mm, len, e, e, 0, w, b, add);
}

/* Cross-attention: the key and value's weight, another part of the
 * initializer the query's part q comes from, read through its Transpose by
 * a MatMul of another input's Transpose (N, S, E) -> (S, N, E); that
 * Transpose's node, or SIZE_MAX. */
static size_t memory_transpose(att_match *m, const att_part *q)
{
    const KilnOnnx__GraphProto *g = m->g;
    for (size_t j = 0; j < g->n_node; j++) {
        const KilnOnnx__NodeProto *cut = g->node[j];
        if (j == q->cut || cut->n_input < 1 || strcmp(cut->input[0], q->src->name) != 0 ||
            (strcmp(cut->op_type, "Slice") != 0 && strcmp(cut->op_type, "Split") != 0))
            continue;
        for (size_t o = 0; o < cut->n_output; o++) {
            if (strcmp(cut->output[o], q->name) == 0)
                continue;
            const size_t tw = main_reader(m, cut->output[o], "Transpose");
            const size_t mm = tw == SIZE_MAX ? SIZE_MAX
                                             : main_reader(m, g->node[tw]->output[0], "MatMul");
            if (mm == SIZE_MAX || g->node[mm]->n_input != 2 ||
                strcmp(g->node[mm]->input[1], g->node[tw]->output[0]) != 0)
                continue;
            const size_t t = maker(m, g->node[mm]->input[0]);
            if (t != SIZE_MAX && !m->im->skip[t] &&
                strcmp(g->node[t]->op_type, "Transpose") == 0 && g->node[t]->n_input == 1 &&
                g->node[t]->n_output == 1 && transpose_is(g->node[t], 1, 0, 2))
                return t;
        }
    }
    return SIZE_MAX;
}

/* Cross-attention with kdim = vdim = K other than E, where PyTorch keeps
 * separate weights (q_proj_weight (E, E), k_proj_weight and v_proj_weight
 * (E, K)) beside one in_proj_bias (3E) and projects the key and value each
 * on its own: Add(Slice(in_proj_bias, [E, 2E)), MatMul(Transpose(m, 1 0 2),
 * Transpose(k_proj_weight))), and the same of [2E, 3E) and v_proj_weight.
 * Both must read one Transpose of one memory m (N, S, K): kiln's layer
 * projects key and value from one input. Their Adds in role[1], role[2]. */
static int separate_key_value(att_match *m, size_t query, att_block *blk, const char **role)
{
    const KilnOnnx__GraphProto *g = m->g;
    const int64_t e = blk->e;
    size_t mm[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};   /* the key's and value's MatMuls */
    for (size_t j = 0; j < g->n_node; j++) {
        const KilnOnnx__NodeProto *n = g->node[j];
        att_part bp;
        if (m->mark[j] || m->im->skip[j] || strcmp(n->op_type, "Slice") != 0 ||
            n->n_input < 1 || n->n_output != 1 || strcmp(n->input[0], blk->b->name) != 0)
            continue;
        const size_t add = main_reader(m, n->output[0], "Add");
        if (add == SIZE_MAX || g->node[add]->n_input != 2 ||
            !in_proj_part(m, n->output[0], 1, e, e, &bp) || bp.rows != e ||
            (bp.first != e && bp.first != 2 * e))
            continue;
        const KilnOnnx__NodeProto *an = g->node[add];
        const size_t prod = maker(m, strcmp(an->input[0], n->output[0]) == 0 ? an->input[1]
                                                                              : an->input[0]);
        if (prod != SIZE_MAX && strcmp(g->node[prod]->op_type, "MatMul") == 0 &&
            g->node[prod]->n_input == 2 && !m->im->skip[prod])
            mm[bp.first / e] = prod;
    }
    NEED(mm[1] != SIZE_MAX && mm[2] != SIZE_MAX, "the query's weight '%s' (E, E) is not beside "
         "a key's and a value's projection, MatMuls plus rows [E, 2E) and [2E, 3E) of '%s'",
         blk->w[0]->name, blk->b->name);
    const kiln_import_value *kv[3] = {NULL, NULL, NULL};
    size_t tw;
    for (int p = 1; p < 3; p++) {
        const char *name = transposed_weight(m, mm[p], &tw);
        kv[p] = name ? kiln_import_find(m->im, name) : NULL;
        NEED(kv[p] && !kv[p]->computed && kv[p]->f && kv[p]->rank == 2 && kv[p]->dims[0] == e,
             "the %s's projection '%s' does not read an (E, %s) = (%lld, %s) initializer "
             "through a Transpose", p == 1 ? "key" : "value", kiln_import_node_name(g->node[mm[p]]),
             p == 1 ? "kdim" : "vdim", (long long)e, p == 1 ? "kdim" : "vdim");
    }
    NEED(kv[1]->dims[1] == kv[2]->dims[1], "kdim %lld is not vdim %lld ('%s' is (%lld, %lld), "
         "'%s' (%lld, %lld)): the key and value are different tensors, and kiln's "
         "MultiHeadAttention projects both from one input", (long long)kv[1]->dims[1],
         (long long)kv[2]->dims[1], kv[1]->name, (long long)e, (long long)kv[1]->dims[1],
         kv[2]->name, (long long)e, (long long)kv[2]->dims[1]);
    const size_t from = maker(m, g->node[mm[1]]->input[0]);
    NEED(from != SIZE_MAX && from == maker(m, g->node[mm[2]]->input[0]) && from != query,
         "the key '%s' and value '%s' are projected from different tensors; kiln's "
         "MultiHeadAttention projects both from one input", g->node[mm[1]]->input[0],
         g->node[mm[2]]->input[0]);
    const KilnOnnx__NodeProto *tm = g->node[from];
    const kiln_import_value *memory = tm->n_input == 1 ? kiln_import_find(m->im, tm->input[0])
                                                       : NULL;
    NEED(strcmp(tm->op_type, "Transpose") == 0 && tm->n_output == 1 && !m->im->skip[from] &&
         transpose_is(tm, 1, 0, 2) && memory && memory->computed && memory->rank == 3 &&
         memory->dims[2] == kv[1]->dims[1], "the key and value are not a Transpose (1 0 2) of "
         "a computed (N, S, %lld) value before the query's Transpose", (long long)kv[1]->dims[1]);
    blk->memory = from;
    blk->s = memory->dims[1];
    blk->kdim = kv[1]->dims[1];
    blk->separate = 1;
    m->mark[from] = 1;
    internal(m, tm->output[0], 3, blk->s, 1, blk->kdim, 1);
    for (int p = 1; p < 3; p++) {
        att_part w;
        const kiln_import_value *bias;
        size_t add;
        NEED(projection_at(m, mm[p], blk->s, e, blk->kdim, p, &w, &bias, &add) && w.separate &&
             bias == blk->b, "the %s's projection '%s' is not MatMul(., Transpose('%s')) plus "
             "rows [%lld, %lld) of '%s'", p == 1 ? "key" : "value",
             kiln_import_node_name(g->node[mm[p]]), kv[p]->name, (long long)(p * e),
             (long long)((p + 1) * e), blk->b->name);
        blk->w[p] = w.src;
        role[p] = g->node[add]->output[0];
    }
    return 1;
}

/* The Slices of the last axis of a projection `packed` (L, N, parts E)
 * into its parts, part p giving role[first + p] (q, k, v). */
static int parts_of(att_match *m, const char *packed, int64_t len, int64_t e, int parts,
                    int first, const char **role)
{
    const KilnOnnx__GraphProto *g = m->g;
    size_t slice[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    int n_slices = 0;
    for (size_t j = 0; j < g->n_node; j++) {
        const KilnOnnx__NodeProto *n = g->node[j];
        if (n->n_input < 1 || strcmp(n->input[0], packed) != 0 ||
            strcmp(n->op_type, "Shape") == 0)
            continue;
        NEED(strcmp(n->op_type, "Slice") == 0 && n->n_input >= 4 && n->n_input <= 5 &&
             n->n_output == 1 && n_slices < parts, "the packed projection '%s' is read by node "
             "'%s' (%s); PyTorch writes %d Slices", packed, kiln_import_node_name(n),
             n->op_type, parts);
        att_value start, end, axes, steps;
        m->batch = 2;
        NEED(eval_input(m, n, 1, 0, &start) && eval_input(m, n, 2, 0, &end) &&
             eval_input(m, n, 3, 0, &axes) && start.count == 1 && end.count == 1 &&
             axes.count == 1 && (axes.v[0] == -1 || axes.v[0] == 2) &&
             (n->n_input < 5 || (eval_input(m, n, 4, 0, &steps) && steps.count == 1 &&
                                 steps.v[0] == 1)), "Slice '%s' of the packed projection does "
             "not take a part of the last axis", kiln_import_node_name(n));
        const int64_t part = (int64_t)start.v[0] / e;
        NEED((int64_t)start.v[0] == part * e && part >= 0 && part < parts &&
             (int64_t)end.v[0] == (part + 1) * e && slice[part] == SIZE_MAX, "Slice '%s' of "
             "the packed projection takes [%g, %g), not a part of %lld",
             kiln_import_node_name(n), start.v[0], end.v[0], (long long)(parts * e));
        slice[part] = j;
        m->mark[j] = 1;
        internal(m, n->output[0], 3, len, 1, e, 1);
        role[first + part] = n->output[0];
        n_slices++;
    }
    NEED(n_slices == parts, "the packed projection '%s' is sliced %d times, not %d", packed,
         n_slices, parts);
    return 1;
}

/* Transposes (1 0 2) of `name`, (L, N * heads, d), read by Shape nodes
 * alone (with a key_padding_mask PyTorch takes src_len from such a copy of
 * the keys): marked as the shape arithmetic's, their shape registered. */
static void shape_copies(att_match *m, const char *name, int64_t heads, int64_t len, int64_t d)
{
    const KilnOnnx__GraphProto *g = m->g;
    for (size_t j = 0; j < g->n_node; j++) {
        const KilnOnnx__NodeProto *n = g->node[j];
        if (strcmp(n->op_type, "Transpose") != 0 || n->n_input != 1 || n->n_output != 1 ||
            strcmp(n->input[0], name) != 0 || !transpose_is(n, 1, 0, 2) || m->im->skip[j])
            continue;
        int shapes_only = 1;
        for (size_t k = 0; k < g->n_node && shapes_only; k++)
            for (size_t i = 0; i < g->node[k]->n_input; i++)
                if (strcmp(g->node[k]->input[i], n->output[0]) == 0)
                    shapes_only &= strcmp(g->node[k]->op_type, "Shape") == 0;
        for (size_t o = 0; o < g->n_output; o++)
            shapes_only &= strcmp(g->output[o]->name, n->output[0]) != 0;
        if (!shapes_only)
            continue;
        m->mark[j] = 2;
        m->varies[j] = 1;
        internal(m, n->output[0], 3, heads, len, d, 0);
    }
}

/* The chain from the Transpose of x at node k (the query's); 1 when it is
 * the block. */
static int match(att_match *m, size_t k, att_block *blk)
{
    const KilnOnnx__GraphProto *g = m->g;
    const KilnOnnx__NodeProto *t0 = g->node[k];
    const kiln_import_value *x = kiln_import_find(m->im, t0->input[0]);
    if (!x || !x->computed || x->rank != 3 || !transpose_is(t0, 1, 0, 2) || t0->n_output != 1)
        return 0;
    const int64_t t = blk->t = x->dims[1], e = blk->e = x->dims[2];
    att_part w, kv;
    const kiln_import_value *kv_bias;
    size_t add, kv_add;
    if (!projection(m, k, t, e, &w, &blk->b, &add))
        return 0;
    blk->w[0] = blk->w[1] = blk->w[2] = w.src;
    blk->s = t;
    blk->kdim = e;
    blk->memory = blk->padding = SIZE_MAX;
    /* q, k and v (PyTorch's order). */
    const char *role[3] = {NULL, NULL, NULL};
    if (w.separate) {
        role[0] = g->node[add]->output[0];
        if (!separate_key_value(m, k, blk, role))
            return 0;
    } else if (w.rows == 3 * e) {
        if (!parts_of(m, g->node[add]->output[0], t, e, 3, 0, role))
            return 0;
    } else {
        NEED(w.first == 0 && w.rows == e, "the in_proj MatMul of '%s' reads rows [%lld, %lld) "
             "of '%s'; PyTorch's query reads [0, E), E = %lld", t0->input[0],
             (long long)w.first, (long long)(w.first + w.rows), w.src->name, (long long)e);
        blk->memory = memory_transpose(m, &w);
        NEED(blk->memory != SIZE_MAX, "the query's in_proj part '%s' is not beside a key and "
             "value part that a Transpose of another input reads", w.name);
        const KilnOnnx__NodeProto *tm = g->node[blk->memory];
        const kiln_import_value *memory = kiln_import_find(m->im, tm->input[0]);
        NEED(memory && memory->computed && memory->rank == 3 && memory->dims[2] == e,
             "the key and value '%s' are not a computed (N, S, %lld) value before the "
             "query's Transpose", tm->input[0], (long long)e);
        blk->s = memory->dims[1];
        NEED(projection(m, blk->memory, blk->s, e, &kv, &kv_bias, &kv_add) &&
             kv.src == w.src && kv_bias == blk->b && kv.first == e && kv.rows == 2 * e,
             "the key and value's projection from '%s' is not rows [E, 3E) of the in_proj "
             "'%s' and its bias", tm->input[0], w.src->name);
        role[0] = g->node[add]->output[0];
        if (!parts_of(m, g->node[kv_add]->output[0], blk->s, e, 2, 1, role))
            return 0;
    }
    const int64_t s = blk->s;
    /* Each Reshape to (L, N * heads, d), then its Transpose. */
    size_t by_head[3];
    static const int perms[3][3] = {{1, 0, 2}, {1, 2, 0}, {1, 0, 2}};
    for (int p = 0; p < 3; p++) {
        const int64_t len = p == 0 ? t : s;
        const size_t r = plain_reshape(m, role[p]);
        NEED(r != SIZE_MAX, "the %s is not reshaped to (L, N * heads, d)",
             p == 0 ? "query" : p == 1 ? "key" : "value");
        att_value v;
        m->batch = 2;
        NEED(eval(m, g->node[r]->input[1], 0, &v) && v.count == 3 && !v.real &&
             (int64_t)v.v[1] % 2 == 0 && v.v[1] > 0, "the Reshape '%s' of the %s has "
             "a shape kiln cannot evaluate", kiln_import_node_name(g->node[r]),
             p == 0 ? "query" : p == 1 ? "key" : "value");
        const int64_t heads = (int64_t)v.v[1] / 2;
        const int64_t want[3] = {len, heads, heads ? e / heads : 0};
        NEED(heads > 0 && e % heads == 0 && (p == 0 || heads == blk->heads) &&
             shape_is(m, g->node[r]->input[1], 3, want, 1), "the Reshape '%s' does not split "
             "E = %lld into heads of one size, (L, N * heads, E / heads)",
             kiln_import_node_name(g->node[r]), (long long)e);
        blk->heads = heads;
        blk->dim = e / heads;
        m->mark[r] = 1;
        internal(m, g->node[r]->output[0], 3, len, heads, e / heads, 1);
        shape_copies(m, g->node[r]->output[0], heads, len, e / heads);
        by_head[p] = main_reader(m, g->node[r]->output[0], "Transpose");
        NEED(by_head[p] != SIZE_MAX &&
             transpose_is(g->node[by_head[p]], perms[p][0], perms[p][1], perms[p][2]),
             "the %s heads are not transposed as PyTorch's attention transposes them",
             p == 0 ? "query" : p == 1 ? "key" : "value");
        m->mark[by_head[p]] = 1;
        const int64_t d = e / heads, a1 = p == 1 ? d : len, a2 = p == 1 ? s : d;
        internal(m, g->node[by_head[p]]->output[0], 3, heads, a1, a2, 0);
    }
    /* The query's scale: 1 / sqrt(d), as a Div by sqrt(d) or a Mul. */
    const char *q = g->node[by_head[0]]->output[0];
    size_t scale = main_reader(m, q, "Div");
    const int divides = scale != SIZE_MAX;
    scale = divides ? scale : main_reader(m, q, "Mul");
    NEED(scale != SIZE_MAX && g->node[scale]->n_input == 2, "the query heads are not scaled "
         "by a Div or Mul");
    const KilnOnnx__NodeProto *sn = g->node[scale];
    att_value by;
    m->batch = 2;
    NEED((divides ? strcmp(sn->input[0], q) == 0 : 1) &&
         eval(m, strcmp(sn->input[0], q) == 0 ? sn->input[1] : sn->input[0], 0, &by) &&
         by.count == 1, "the query's scale '%s' is not a constant", kiln_import_node_name(sn));
    const float want_scale = divides ? (float)sqrt((double)blk->dim)
                                     : (float)(1.0 / sqrt((double)blk->dim));
    NEED((float)by.v[0] == want_scale, "the query is scaled by %s %.9g; kiln's MultiHeadAttention "
         "scales by 1/sqrt(d) = 1/sqrt(%lld) only", divides ? "1 /" : "", by.v[0],
         (long long)blk->dim);
    m->mark[scale] = 1;
    const size_t scores = main_reader(m, sn->output[0], "MatMul");
    NEED(scores != SIZE_MAX && g->node[scores]->n_input == 2 &&
         strcmp(g->node[scores]->input[0], sn->output[0]) == 0 &&
         strcmp(g->node[scores]->input[1], g->node[by_head[1]]->output[0]) == 0,
         "the scaled query does not multiply the keys");
    m->mark[scores] = 1;
    /* An attn_mask: baddbmm(mask, q, k) is Mul(scores, 1) + Mul(mask, 1). */
    const char *logits = g->node[scores]->output[0];
    size_t soft = main_reader(m, logits, "Softmax");
    if (soft == SIZE_MAX) {
        size_t one = main_reader(m, logits, "Mul"), sum;
        att_value a;
        m->batch = 2;
        if (one != SIZE_MAX) {
            const KilnOnnx__NodeProto *on = g->node[one];
            NEED(on->n_input == 2 && eval(m, strcmp(on->input[0], logits) == 0 ? on->input[1]
                                                                               : on->input[0],
                                          0, &a) && a.count == 1 && a.v[0] == 1.0,
                 "the scores are multiplied by '%s', not 1", kiln_import_node_name(on));
            m->mark[one] = 1;
            logits = on->output[0];
        }
        sum = main_reader(m, logits, "Add");
        NEED(sum != SIZE_MAX && g->node[sum]->n_input == 2, "the scores '%s' are read by "
             "something other than a Softmax or an attention mask's Add", logits);
        const KilnOnnx__NodeProto *mn = g->node[sum];
        const char *term = strcmp(mn->input[0], logits) == 0 ? mn->input[1] : mn->input[0];
        blk->causal = causal_mask(m, term, t, s);
        blk->padding = blk->causal ? SIZE_MAX : padding_mask(m, term, blk, &blk->causal);
        NEED(blk->causal || blk->padding != SIZE_MAX, "attention mask '%s' is neither a causal "
             "mask (0 on and below the diagonal, -inf above, as nn.Transformer.generate_square_"
             "subsequent_mask) nor a key_padding_mask of a bool graph input (N, S), alone or "
             "with a causal mask, the masks kiln's MultiHeadAttention takes", term);
        m->mark[sum] = 1;
        soft = main_reader(m, mn->output[0], "Softmax");
    }
    NEED(soft != SIZE_MAX && (attr_int(g->node[soft], "axis", -1) == -1 ||
                              attr_int(g->node[soft], "axis", -1) == 2),
         "the scores' Softmax is not over the last axis");
    m->mark[soft] = 1;
    const size_t weigh = main_reader(m, g->node[soft]->output[0], "MatMul");
    NEED(weigh != SIZE_MAX && g->node[weigh]->n_input == 2 &&
         strcmp(g->node[weigh]->input[0], g->node[soft]->output[0]) == 0 &&
         strcmp(g->node[weigh]->input[1], g->node[by_head[2]]->output[0]) == 0,
         "the probabilities do not multiply the values (a Dropout between them is not imported)");
    m->mark[weigh] = 1;
    const size_t back = main_reader(m, g->node[weigh]->output[0], "Transpose");
    NEED(back != SIZE_MAX && transpose_is(g->node[back], 1, 0, 2), "the heads' results are not "
         "transposed back to (T, N * heads, d)");
    m->mark[back] = 1;
    const size_t flat = plain_reshape(m, g->node[back]->output[0]);
    const int64_t flat_shape[2] = {t, e};
    NEED(flat != SIZE_MAX && shape_is(m, g->node[flat]->input[1], 2, flat_shape, 0),
         "the heads' results are not reshaped to (T * N, E)");
    m->mark[flat] = 1;
    /* The output projection. */
    const size_t gemm = main_reader(m, g->node[flat]->output[0], "Gemm");
    NEED(gemm != SIZE_MAX && g->node[gemm]->n_input == 3 &&
         attr_int(g->node[gemm], "transB", 0) == 1 && attr_int(g->node[gemm], "transA", 0) == 0,
         "the out_proj is not a Gemm with transB and a bias");
    const KilnOnnx__NodeProto *gn = g->node[gemm];
    const KilnOnnx__AttributeProto *alpha = attribute(gn, "alpha"), *beta = attribute(gn, "beta");
    NEED((!alpha || alpha->f == 1.0f) && (!beta || beta->f == 1.0f) &&
         (blk->wo = weight(m, gn->input[1], 2, e, e)) &&
         (blk->bo = weight(m, gn->input[2], 1, e, 0)), "the out_proj Gemm '%s' is not x W^T + b "
         "of a (%lld, %lld) initializer and a (%lld) one", kiln_import_node_name(gn),
         (long long)e, (long long)e, (long long)e);
    m->mark[gemm] = 1;
    internal(m, gn->output[0], 2, t, e, 0, 0);
    const size_t unflat = plain_reshape(m, gn->output[0]);
    const int64_t unflat_shape[3] = {t, 1, e};
    NEED(unflat != SIZE_MAX && shape_is(m, g->node[unflat]->input[1], 3, unflat_shape, 1),
         "the out_proj's result is not reshaped to (T, N, E)");
    m->mark[unflat] = 1;
    const size_t last = main_reader(m, g->node[unflat]->output[0], "Transpose");
    NEED(last != SIZE_MAX && transpose_is(g->node[last], 1, 0, 2), "the result is not "
         "transposed back to (N, T, E)");
    m->mark[last] = 1;
    blk->last = last;
    return 1;
}

/* Every value the block makes is read inside it, the last alone leaving;
 * a piece of the shape arithmetic read elsewhere, of constants only, is
 * recorded as the constant it is (nonzero: the block may be taken). */
static int read_outside(const att_match *m, const char *out)
{
    const KilnOnnx__GraphProto *g = m->g;
    int outside = 0;
    for (size_t j = 0; j < g->n_node && !outside; j++)
        for (size_t i = 0; i < g->node[j]->n_input && !m->mark[j]; i++)
            outside |= strcmp(g->node[j]->input[i], out) == 0;
    for (size_t j = 0; j < g->n_output; j++)
        outside |= strcmp(g->output[j]->name, out) == 0;
    return outside;
}

static int closed(att_match *m, const att_block *blk)
{
    const KilnOnnx__GraphProto *g = m->g;
    for (size_t k = 0; k < g->n_node; k++) {
        if (!m->mark[k] || k == blk->last)
            continue;
        const char *out = g->node[k]->output[0];
        for (size_t o = 1; o < g->node[k]->n_output; o++)   /* the in_proj's Splits */
            NEED(!read_outside(m, g->node[k]->output[o]), "its value '%s' is read outside "
                 "the block", g->node[k]->output[o]);
        if (!read_outside(m, out))
            continue;
        NEED(m->mark[k] == 2 && !m->varies[k], "its value '%s' is read outside the block", out);
        att_value v;
        m->batch = 2;
        if (kiln_import_find(m->im, out))
            continue;   /* a Constant, recorded as it was evaluated */
        kiln_import_value *c = eval(m, out, 0, &v) ? kiln_import_add_value(m->im, out) : NULL;
        float *f = c && v.real ? kiln_onnx_alloc(&m->im->mem, (size_t)(v.count + 1) * sizeof *f)
                               : NULL;
        int64_t *ints = c && !v.real ? kiln_onnx_alloc(&m->im->mem,
                                                      (size_t)(v.count + 1) * sizeof *ints)
                                     : NULL;
        NEED(f || ints, "out of memory recording '%s'", out);
        for (int64_t i = 0; i < v.count; i++) {
            if (f)
                f[i] = (float)v.v[i];
            else
                ints[i] = (int64_t)v.v[i];
        }
        c->rank = v.rank;
        memcpy(c->dims, v.dims, sizeof c->dims);
        c->f = f;
        c->ints = ints;
        c->constant_node = 1;
    }
    return 1;
}

/* Parameter `kind` exists, `name` fits, `source` is no other layer's. */
static kiln_status check_param(kiln_importer *im, const kiln_node_rec *rec, const char *layer,
                               const char *kind, const char *name,
                               const kiln_import_value *source)
{
    int p = 0;
    while (p < rec->n_params && strcmp(rec->params[p].name, kind) != 0)
        p++;
    if (p == rec->n_params)
        return kiln_error(im->ctx, KILN_ERROR_STATE, KILN_IMPORT_CALL ": layer '%s' has no "
                          "parameter '%s'", layer, kind);
    if (strlen(name) >= sizeof ((kiln_parameter_info *)0)->name)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, KILN_IMPORT_CALL ": layer '%s': "
                          "parameter name '%s' has %zu bytes; kiln keeps names of up to %zu",
                          layer, name, strlen(name),
                          sizeof ((kiln_parameter_info *)0)->name - 1);
    if (source->param_of && strcmp(source->param_of, layer) != 0)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, KILN_IMPORT_CALL ": initializer '%s' "
                          "is used by node '%s' and layer '%s'; kiln cannot tie parameters "
                          "(give each node its own copy, an Identity)", source->name,
                          source->param_of, layer);
    return KILN_OK;
}

/* Parameter p of the layer under `name`, from `values` (already in
 * kiln's layout), its source initializer marked as taken. */
static kiln_status set_param(kiln_importer *im, kiln_node node, const char *layer,
                             const char *kind,
                             const char *name, const kiln_import_value *source, float *values,
                             int transposed)
{
    kiln_node_rec *rec = &im->m->graph.nodes[node];
    const kiln_status st = check_param(im, rec, layer, kind, name, source);
    if (st != KILN_OK) {
        kiln_free(im->ctx, values);
        return st;
    }
    int p = 0;
    while (strcmp(rec->params[p].name, kind) != 0)
        p++;
    ((kiln_import_value *)source)->param_of = layer;
    rec->param_name[p] = kiln_strdup(im->ctx, name);
    rec->param_init[p] = values;
    rec->param_transposed[p] = (unsigned char)transposed;
    if (!rec->param_name[p])
        return kiln_error_oom(im->ctx, "a parameter", strlen(name) + 1);
    return KILN_OK;
}

/* The packed in_proj split into Keras's query, key and value kernels (E,
 * heads, d) and biases (heads, d), or the separate q/k/v_proj_weights
 * (the key's and value's (K, heads, d)) under their own names, the bias
 * split all the same; out_proj's weight as (heads, d, E). */
static kiln_status take_params(kiln_importer *im, kiln_node node, const char *layer,
                               const att_block *blk)
{
    static const char *const part[3] = {"query", "key", "value"};
    const int64_t e = blk->e;
    kiln_status st = KILN_OK;
    for (int p = 0; p < 3 && st == KILN_OK; p++) {
        const kiln_import_value *w = blk->w[p];
        const int64_t width = p == 0 ? e : blk->kdim, row0 = blk->separate ? 0 : p * e;
        float *kernel = kiln_alloc(im->ctx, (size_t)(width * e) * sizeof *kernel);
        float *bias = kiln_alloc(im->ctx, (size_t)e * sizeof *bias);
        if (!kernel || !bias) {
            kiln_free(im->ctx, kernel);
            kiln_free(im->ctx, bias);
            return kiln_error_oom(im->ctx, "a parameter", (size_t)(width * e) * sizeof *kernel);
        }
        for (int64_t i = 0; i < width; i++)    /* kernel[i][j] = W[row0 + j][i] */
            for (int64_t j = 0; j < e; j++)
                kernel[i * e + j] = w->f[(row0 + j) * width + i];
        memcpy(bias, blk->b->f + p * e, (size_t)e * sizeof *bias);
        char kind[32], name[256];
        snprintf(kind, sizeof kind, "%s/kernel", part[p]);
        if (blk->separate)
            snprintf(name, sizeof name, "%s", w->name);
        else
            snprintf(name, sizeof name, "%s/%s", w->name, part[p]);
        st = set_param(im, node, layer, kind, name, w, kernel, 1);
        if (st != KILN_OK) {
            kiln_free(im->ctx, bias);
            return st;
        }
        snprintf(kind, sizeof kind, "%s/bias", part[p]);
        snprintf(name, sizeof name, "%s/%s", blk->b->name, part[p]);
        st = set_param(im, node, layer, kind, name, blk->b, bias, 0);
    }
    float *kernel = st == KILN_OK ? kiln_alloc(im->ctx, (size_t)(e * e) * sizeof *kernel) : NULL;
    float *bias = st == KILN_OK ? kiln_alloc(im->ctx, (size_t)e * sizeof *bias) : NULL;
    if (st == KILN_OK && (!kernel || !bias)) {
        kiln_free(im->ctx, kernel);
        kiln_free(im->ctx, bias);
        return kiln_error_oom(im->ctx, "a parameter", (size_t)(e * e) * sizeof *kernel);
    }
    if (st != KILN_OK)
        return st;
    for (int64_t i = 0; i < e; i++)   /* (heads * d, E) = Wo^T */
        for (int64_t j = 0; j < e; j++)
            kernel[i * e + j] = blk->wo->f[j * e + i];
    memcpy(bias, blk->bo->f, (size_t)e * sizeof *bias);
    st = set_param(im, node, layer, "attention_output/kernel", blk->wo->name, blk->wo, kernel, 1);
    if (st != KILN_OK) {
        kiln_free(im->ctx, bias);
        return st;
    }
    return set_param(im, node, layer, "attention_output/bias", blk->bo->name, blk->bo, bias, 0);
}

kiln_status kiln_import_attention(kiln_importer *im, size_t k, int *found)
{
    *found = 0;
    im->attention_miss = NULL;
    const KilnOnnx__GraphProto *g = im->g;
    const kiln_import_value *input = g->node[k]->n_input == 1
                                         ? kiln_import_find(im, g->node[k]->input[0]) : NULL;
    if (!input || !input->computed || input->rank != 3 || !transpose_is(g->node[k], 1, 0, 2))
        return KILN_OK;   /* not the block's first node: nothing to look at */
    att_match *m = kiln_onnx_alloc(&im->mem, sizeof *m);
    char *marks = kiln_onnx_alloc(&im->mem, 2 * g->n_node + 2);
    if (!m || !marks)
        return kiln_error_oom(im->ctx, "the attention pattern", im->mem.oom_bytes);
    *m = (att_match){.im = im, .g = g, .mark = marks, .varies = marks + g->n_node + 1};
    att_block blk = {0};
    if (!match(m, k, &blk) || !closed(m, &blk)) {
        if (m->why[0])
            im->attention_miss = kiln_onnx_printf(&im->mem, "%s", m->why);
        return KILN_OK;
    }
    const KilnOnnx__NodeProto *last = g->node[blk.last];
    const char *name = kiln_import_layer_name(im, kiln_import_node_name(last));
    if (!name)
        return kiln_error_oom(im->ctx, "a name", im->mem.oom_bytes);
    kiln_import_value *x, *mem;
    kiln_node in = KILN_NODE_INVALID, value = KILN_NODE_INVALID;
    kiln_status st = kiln_import_computed(im, g->node[k], 0, &x);
    if (st == KILN_OK)
        st = kiln_import_in_layout(im, x, 0, &in);
    value = in;
    if (st == KILN_OK && blk.memory != SIZE_MAX) {   /* cross-attention */
        st = kiln_import_computed(im, g->node[blk.memory], 0, &mem);
        if (st == KILN_OK)
            st = kiln_import_in_layout(im, mem, 0, &value);
    }
    kiln_node padding = KILN_NODE_INVALID;
    if (st == KILN_OK && blk.padding != SIZE_MAX) {   /* key_padding_mask */
        kiln_import_value *pad;
        st = kiln_import_computed(im, g->node[blk.padding], 0, &pad);
        if (st == KILN_OK)
            st = kiln_import_in_layout(im, pad, 0, &padding);
    }
    if (st != KILN_OK)
        return st;
    const kiln_multi_head_attention_options o = {
        .struct_size = sizeof o, .name = name, .num_heads = (int32_t)blk.heads,
        .key_dim = (int32_t)blk.dim, .use_causal_mask = blk.causal};
    const kiln_node node = padding != KILN_NODE_INVALID
                               ? kiln_multi_head_attention_masked(im->m, in, value, padding, &o)
                               : kiln_multi_head_attention(im->m, in, value, &o);
    if (node != KILN_NODE_INVALID && im->m->graph.nodes[node].n_params != 8)
        return kiln_error(im->ctx, KILN_ERROR_STATE, KILN_IMPORT_CALL ": layer '%s' has %d "
                          "parameters; a MultiHeadAttention with biases has 8", name,
                          im->m->graph.nodes[node].n_params);
    if (node != KILN_NODE_INVALID)
        st = take_params(im, node, name, &blk);
    if (st == KILN_OK)
        st = kiln_import_made(im, last, node, 0);
    for (size_t j = 0; j < g->n_node && st == KILN_OK; j++)
        if (m->mark[j])
            im->skip[j] = 1;
    *found = st == KILN_OK;
    return st;
}
