/* MatMul: NumPy's and ONNX's matrix product of two computed values, batched
 * over their leading axes with broadcasting (attention's q k^T and its
 * weights times v). Every product runs through kiln_gemm_batched, the
 * products of the batch in as few launches as their strides allow;
 * backward's products for an operand that was broadcast add up, in order,
 * into its one gradient. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <string.h>

typedef struct matmul_config {
    int32_t unused;
} matmul_config;

/* The sample axis and up to KILN_MAX_RANK - 2 leading axes. */
#define MAX_AXES (KILN_MAX_RANK - 1)

/* One axis of a batch of products: its length and how many floats apart
 * two neighbouring products' operands (x, y) and results lie along it; 0
 * where one operand serves every product (broadcast) or one result takes
 * all of them (a gradient summed). */
typedef struct batch_axis {
    size_t len, x, y, out;
} batch_axis;

/* One GEMM of the batch, as kiln_gemm_batched takes it. */
typedef struct product {
    kiln_gemm_op tx, ty;
    size_t m, n, k;
    const kiln_buffer *x, *y;
    kiln_buffer *out;
    size_t ldx, ldy, ldo;
    int accumulate;   /* add to out rather than overwrite it */
} product;

/* Leading axis j of `out` (rank r_out) read from `in`: its dimension, or 1
 * where in has no such axis. */
static int32_t leading_dim(const kiln_shape *in, int32_t r_out, int32_t j)
{
    const int32_t at = j - (r_out - in->rank);
    return at < 0 ? 1 : in->dims[at];
}

static kiln_status matmul_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    const kiln_shape *x = &b->in[0], *y = &b->in[1];
    char sa[64], sb[64];
    kiln_shape_str(x, sa, sizeof sa);
    kiln_shape_str(y, sb, sizeof sb);
    if (x->rank < 2 || y->rank < 2) {
        snprintf(b->error, sizeof b->error, "its inputs are %s and %s; MatMul multiplies "
                 "samples of rank 2 or more (reshape a vector to (1, K) or (K, 1) first)",
                 sa, sb);
        return KILN_ERROR_SHAPE;
    }
    if (x->dims[x->rank - 1] != y->dims[y->rank - 2]) {
        snprintf(b->error, sizeof b->error, "its inputs are %s and %s: the first's last "
                 "dimension (%d) is not the second's next to last (%d)", sa, sb,
                 (int)x->dims[x->rank - 1], (int)y->dims[y->rank - 2]);
        return KILN_ERROR_SHAPE;
    }
    const int32_t rank = x->rank > y->rank ? x->rank : y->rank;
    b->out.rank = rank;
    for (int32_t j = 0; j < rank - 2; j++) {
        const int32_t da = leading_dim(x, rank, j), db = leading_dim(y, rank, j);
        if (da != db && da != 1 && db != 1) {
            snprintf(b->error, sizeof b->error, "its inputs are %s and %s, whose leading axes "
                     "do not broadcast (%d against %d; each pair must be equal or one of "
                     "them 1)", sa, sb, (int)da, (int)db);
            return KILN_ERROR_SHAPE;
        }
        b->out.dims[j] = da == 1 ? db : da;
    }
    b->out.dims[rank - 2] = x->dims[x->rank - 2];
    b->out.dims[rank - 1] = y->dims[y->rank - 1];
    return KILN_OK;
}

/* How far apart neighbours along leading axis j of the output lie in
 * `in`: 0 where in is broadcast along it. */
static size_t leading_stride(const kiln_shape *in, int32_t r_out, int32_t j)
{
    const int32_t at = j - (r_out - in->rank);
    if (at < 0 || in->dims[at] == 1)
        return 0;
    size_t stride = 1;
    for (int32_t d = at + 1; d < in->rank; d++)
        stride *= (size_t)in->dims[d];
    return stride;
}

/* The batch of products of a step: the sample axis, then the output's
 * leading axes, with A's, B's and C's strides as (x, y, out). */
static int batch_axes(const kiln_step *s, batch_axis *ax)
{
    const kiln_shape *a = &s->in_shape[0], *b = &s->in_shape[1], *c = s->out_shape;
    ax[0] = (batch_axis){.len = (size_t)s->batch, .x = (size_t)kiln_shape_size(a),
                         .y = (size_t)kiln_shape_size(b), .out = (size_t)kiln_shape_size(c)};
    for (int32_t j = 0; j < c->rank - 2; j++)
        ax[j + 1] = (batch_axis){.len = (size_t)c->dims[j], .x = leading_stride(a, c->rank, j),
                                 .y = leading_stride(b, c->rank, j),
                                 .out = leading_stride(c, c->rank, j)};
    return c->rank - 1;
}

/* Runs p over the batch `axes` (outermost first). Axes along which the
 * result does not move (out 0) are summed: their products run one after
 * another, each adding to what the ones before wrote. The others merge
 * where their strides allow into one batched launch; any left run in a
 * loop. */
static kiln_status run_products(kiln_device *dev, const product *p, const batch_axis *axes,
                                int n_axes)
{
    batch_axis looped[MAX_AXES], inner = {.len = 1};
    int n_looped = 0, have_inner = 0;
    for (int i = n_axes - 1; i >= 0; i--) {   /* innermost first */
        const batch_axis *a = &axes[i];
        if (a->len == 1)
            continue;
        if (a->out == 0) {
            looped[n_looped++] = *a;
        } else if (!have_inner) {
            inner = *a;
            have_inner = 1;
        } else if (a->x == inner.x * inner.len && a->y == inner.y * inner.len &&
                   a->out == inner.out * inner.len) {
            inner.len *= a->len;   /* a's steps are whole runs of inner's */
        } else {
            looped[n_looped++] = *a;
        }
    }
    size_t index[MAX_AXES] = {0};
    for (;;) {
        size_t ox = 0, oy = 0, oo = 0;
        int summed_start = 1;
        for (int l = 0; l < n_looped; l++) {
            ox += index[l] * looped[l].x;
            oy += index[l] * looped[l].y;
            oo += index[l] * looped[l].out;
            if (looped[l].out == 0 && index[l] != 0)
                summed_start = 0;
        }
        const float beta = p->accumulate || !summed_start ? 1.0f : 0.0f;
        const kiln_status st =
            kiln_gemm_batched(dev, p->tx, p->ty, p->m, p->n, p->k, 1.0f, p->x, ox, p->ldx,
                              inner.x, p->y, oy, p->ldy, inner.y, beta, p->out, oo, p->ldo,
                              inner.out, inner.len);
        if (st != KILN_OK)
            return st;
        int l = 0;   /* the next index, the first looped axis fastest */
        while (l < n_looped && ++index[l] == looped[l].len)
            index[l++] = 0;
        if (l == n_looped)
            return KILN_OK;
    }
}

static kiln_status matmul_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const kiln_shape *a = &s->in_shape[0], *b = &s->in_shape[1];
    const size_t m = (size_t)a->dims[a->rank - 2], k = (size_t)a->dims[a->rank - 1];
    const size_t n = (size_t)b->dims[b->rank - 1];
    batch_axis axes[MAX_AXES];
    const int n_axes = batch_axes(s, axes);
    const product p = {.tx = KILN_GEMM_N, .ty = KILN_GEMM_N, .m = m, .n = n, .k = k,
                       .x = s->in[0], .ldx = k, .y = s->in[1], .ldy = n, .out = s->out,
                       .ldo = n};
    return run_products(s->dev, &p, axes, n_axes);
}

/* dA = dC B^T and dB = A^T dC, each product's summed into the operand's
 * gradient along the axes the operand was broadcast over. The same node
 * given twice gets both (the runtime asks the second to add). */
static kiln_status matmul_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const kiln_shape *a = &s->in_shape[0], *b = &s->in_shape[1];
    const size_t m = (size_t)a->dims[a->rank - 2], k = (size_t)a->dims[a->rank - 1];
    const size_t n = (size_t)b->dims[b->rank - 1];
    batch_axis axes[MAX_AXES], roles[MAX_AXES];
    const int n_axes = batch_axes(s, axes);
    kiln_status st = KILN_OK;
    if (s->d_in[0]) {
        for (int i = 0; i < n_axes; i++)   /* x = dC, y = B, out = dA */
            roles[i] = (batch_axis){.len = axes[i].len, .x = axes[i].out, .y = axes[i].y,
                                    .out = axes[i].x};
        const product p = {.tx = KILN_GEMM_N, .ty = KILN_GEMM_T, .m = m, .n = k, .k = n,
                           .x = s->d_out, .ldx = n, .y = s->in[1], .ldy = n,
                           .out = s->d_in[0], .ldo = k, .accumulate = s->d_in_accumulate[0]};
        st = run_products(s->dev, &p, roles, n_axes);
    }
    if (st == KILN_OK && s->d_in[1]) {
        for (int i = 0; i < n_axes; i++)   /* x = A, y = dC, out = dB */
            roles[i] = (batch_axis){.len = axes[i].len, .x = axes[i].x, .y = axes[i].out,
                                    .out = axes[i].y};
        const product p = {.tx = KILN_GEMM_T, .ty = KILN_GEMM_N, .m = k, .n = n, .k = m,
                           .x = s->in[0], .ldx = k, .y = s->d_out, .ldy = n,
                           .out = s->d_in[1], .ldo = n, .accumulate = s->d_in_accumulate[1]};
        st = run_products(s->dev, &p, roles, n_axes);
    }
    return st;
}

static uint64_t matmul_flops(const void *config, const kiln_shape *in)
{
    (void)config;
    const kiln_shape *a = &in[0], *b = &in[1];
    const int32_t rank = a->rank > b->rank ? a->rank : b->rank;
    uint64_t products = 1;
    for (int32_t j = 0; j < rank - 2; j++) {
        const int32_t da = leading_dim(a, rank, j), db = leading_dim(b, rank, j);
        products *= (uint64_t)(da == 1 ? db : da);
    }
    return 2 * products * (uint64_t)a->dims[a->rank - 2] * (uint64_t)a->dims[a->rank - 1] *
           (uint64_t)b->dims[b->rank - 1];
}

/* ONNX's MatMul is this layer's arithmetic on the values as kiln holds
 * them. */
static void matmul_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *factors[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL),
                              kiln_onnx_input_value(g, i, 1, KILN_ONNX_CL)};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "MatMul", factors, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

/* MatMul of two computed values (the importer sends MatMul by an
 * initializer to Dense), each of 3 or more dimensions with the batch. */
static kiln_status matmul_import_onnx(kiln_onnx_import *imp)
{
    kiln_status st = kiln_onnx_check_attrs(imp, "");
    if (st != KILN_OK)
        return st;
    for (int k = 0; k < 2; k++)
        if (imp->in[k].rank < 3)
            return kiln_onnx_refuse(imp, "input %d '%s' is %d-D, a vector a sample; kiln "
                                    "multiplies two computed values of 3 or more dimensions "
                                    "(the batch, then a matrix or a batch of them)", k,
                                    imp->in[k].name, imp->in[k].rank);
    imp->want = KILN_ONNX_WANT_ONNX;
    imp->n_data = 2;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_matmul = {
    .kind = "matmul", .config_size = sizeof(matmul_config), .min_inputs = 2, .max_inputs = 2,
    .infer = matmul_infer, .forward = matmul_forward, .backward = matmul_backward,
    .flops = matmul_flops, .export_onnx = matmul_export_onnx,
    .import_onnx = matmul_import_onnx,
};
