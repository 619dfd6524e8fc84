/* Binary: a op b element-wise (add, subtract, multiply, divide, maximum,
 * minimum) with NumPy's broadcasting over a sample's axes, the batch
 * shared. The second operand is a computed value, or a tensor the layer
 * owns (trained, or a constant saved with the weights) on either side:
 * squeeze-and-excitation's per-channel scale, a layer scale, GELU's
 * constants written out. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct binary_config {
    kiln_binary_options o;   /* the builder's op and param_*; no name or struct_size */
    /* Inferred: the output's axes collapsed (binary.cl), each operand's
     * strides along them (0: broadcast), its sample's size, the output's. */
    int32_t dims[4];
    int32_t stride[2][4];
    int32_t size[2];
    int32_t out_size;
    int param_side;          /* 0 or 1: the operand the layer owns; -1: none */
} binary_config;

static const char *const op_names[] = {"Add", "Sub", "Mul", "Div", "Max", "Min"};

/* shape right-aligned to `rank` axes, 1s before. */
static int32_t aligned(const kiln_shape *s, int rank, int d)
{
    const int at = d - (rank - s->rank);
    return at >= 0 ? s->dims[at] : 1;
}

/* Keeps the axes the output has (> 1), merging neighbours along which both
 * operands are present or broadcast alike; right-aligns them into 4. */
static void binary_collapse(binary_config *c, const kiln_shape *a, const kiln_shape *b,
                            int rank)
{
    int32_t dims[4];
    int has[2][4], n = 0;
    for (int d = 0; d < rank; d++) {
        const int32_t x = aligned(a, rank, d), y = aligned(b, rank, d);
        const int32_t o = x > y ? x : y;
        if (o == 1)
            continue;
        const int hx = x == o, hy = y == o;
        if (n > 0 && has[0][n - 1] == hx && has[1][n - 1] == hy) {
            dims[n - 1] *= o;
            continue;
        }
        dims[n] = o;
        has[0][n] = hx;
        has[1][n] = hy;
        n++;
    }
    for (int d = 0; d < 4; d++) {   /* slot d holds collapsed axis d - (4 - n) */
        const int k = d - (4 - n);
        c->dims[d] = k >= 0 ? dims[k] : 1;
        for (int s = 0; s < 2; s++)
            c->stride[s][d] = k >= 0 && has[s][k];   /* a flag until below */
    }
    for (int s = 0; s < 2; s++) {
        int32_t step = 1;
        for (int d = 3; d >= 0; d--) {
            const int present = c->stride[s][d];
            c->stride[s][d] = present ? step : 0;
            step *= present ? c->dims[d] : 1;
        }
        c->size[s] = step;
    }
    c->out_size = c->dims[0] * c->dims[1] * c->dims[2] * c->dims[3];
}

static kiln_status binary_infer(void *config, kiln_layer_build *b)
{
    binary_config *c = config;
    const kiln_binary_options *o = &c->o;
    char sa[64], sb[64];
    if ((int)o->op < KILN_BINARY_ADD || (int)o->op > KILN_BINARY_MINIMUM) {
        snprintf(b->error, sizeof b->error, "op is %d; kiln_binary_op has 0..%d", (int)o->op,
                 (int)KILN_BINARY_MINIMUM);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    kiln_shape param = {.rank = o->param_rank};
    if (b->n_in == 2) {
        if (o->param_rank || o->param_first || o->param_constant || o->param_value != 0.0f) {
            snprintf(b->error, sizeof b->error, "the param_* options are given but the layer "
                     "has two inputs (kiln_binary_param takes them)");
            return KILN_ERROR_INVALID_ARGUMENT;
        }
        c->param_side = -1;
    } else {
        if (o->param_rank < 1 || o->param_rank > KILN_MAX_RANK) {
            snprintf(b->error, sizeof b->error, "param_rank is %d; it must be 1..%d",
                     (int)o->param_rank, KILN_MAX_RANK);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
        for (int d = 0; d < o->param_rank; d++) {
            if (o->param_dims[d] < 1) {
                snprintf(b->error, sizeof b->error, "param_dims[%d] is %d; each must be >= 1",
                         d, (int)o->param_dims[d]);
                return KILN_ERROR_INVALID_ARGUMENT;
            }
            param.dims[d] = o->param_dims[d];
        }
        if (kiln_shape_size(&param) > KILN_MAX_FLOATS) {
            snprintf(b->error, sizeof b->error, "the parameter %s holds more than %d floats",
                     kiln_shape_str(&param, sa, sizeof sa), KILN_MAX_FLOATS);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
        c->param_side = o->param_first ? 0 : 1;
    }
    const kiln_shape *x = b->n_in == 2 ? &b->in[0] : c->param_side == 0 ? &param : &b->in[0];
    const kiln_shape *y = b->n_in == 2 ? &b->in[1] : c->param_side == 0 ? &b->in[0] : &param;
    const int rank = x->rank > y->rank ? x->rank : y->rank;
    kiln_shape out = {.rank = rank};
    for (int d = 0; d < rank; d++) {
        const int32_t p = aligned(x, rank, d), q = aligned(y, rank, d);
        if (p != q && p != 1 && q != 1) {
            snprintf(b->error, sizeof b->error, "%s %s and %s %s do not broadcast (axis %d of "
                     "the right-aligned shapes: %d and %d)",
                     c->param_side == 0 ? "the parameter" : c->param_side == 1 ? "x" : "a",
                     kiln_shape_str(x, sa, sizeof sa), c->param_side == 1 ? "the parameter"
                     : c->param_side == 0 ? "x" : "b", kiln_shape_str(y, sb, sizeof sb), d,
                     (int)p, (int)q);
            return KILN_ERROR_SHAPE;
        }
        out.dims[d] = p > q ? p : q;
    }
    if (kiln_shape_size(&out) > KILN_MAX_FLOATS) {
        snprintf(b->error, sizeof b->error, "the output %s holds more than %d floats",
                 kiln_shape_str(&out, sa, sizeof sa), KILN_MAX_FLOATS);
        return KILN_ERROR_SHAPE;
    }
    binary_collapse(c, x, y, rank);
    b->out = out;
    if (c->param_side >= 0) {
        kiln_param_spec *p = &b->params[b->n_params++];
        p->name = "operand";
        p->shape = param;
        p->init = KILN_INIT_CONSTANT;
        p->init_value = o->param_value;
        p->non_trainable = p->constant = o->param_constant != 0;
    }
    return KILN_OK;
}

/* Operand k's buffer, offset and batch stride. */
static void operand(const binary_config *c, const kiln_step *s, int k,
                    const kiln_buffer **buf, int64_t *off, int64_t *batch)
{
    if (k == c->param_side) {
        *buf = s->params;
        *off = (int64_t)s->param_offset[0];
        *batch = 0;
        return;
    }
    *buf = s->in[c->param_side == 0 ? 0 : k];
    *off = 0;
    *batch = c->size[k];
}

static kiln_status binary_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const binary_config *c = config;
    const kiln_buffer *a, *b;
    int64_t ao, ab, bo, bb;
    operand(c, s, 0, &a, &ao, &ab);
    operand(c, s, 1, &b, &bo, &bb);
    kiln_args args = KILN_ARGS(
        kiln_arg_buffer(a), kiln_arg_int(ao), kiln_arg_int(ab), kiln_arg_buffer(b),
        kiln_arg_int(bo), kiln_arg_int(bb), kiln_arg_buffer(s->out), kiln_arg_int(c->o.op),
        kiln_arg_int(c->dims[1]), kiln_arg_int(c->dims[2]), kiln_arg_int(c->dims[3]),
        kiln_arg_int(c->out_size), kiln_arg_int(s->batch), kiln_arg_int(c->stride[0][0]),
        kiln_arg_int(c->stride[0][1]), kiln_arg_int(c->stride[0][2]),
        kiln_arg_int(c->stride[0][3]), kiln_arg_int(c->stride[1][0]),
        kiln_arg_int(c->stride[1][1]), kiln_arg_int(c->stride[1][2]),
        kiln_arg_int(c->stride[1][3]));
    const kiln_range cpu = {.dims = 2, .size = {(size_t)(c->out_size / c->dims[3]),
                                                (size_t)s->batch}};
    const kiln_range gpu = {.dims = 2, .size = {(size_t)c->out_size, (size_t)s->batch}};
    const kiln_status st = kiln_run_variant(s->dev, "binary", "kiln_binary_forward", &cpu, &gpu,
                                            args);
    return st != KILN_OK ? st : kiln_step_activate(s, s->out);
}

/* Operand `side`'s gradient into g at g_off: per sample, or a parameter's
 * summed over the batch too. */
static kiln_status binary_grad(const binary_config *c, const kiln_step *s, int side,
                               kiln_buffer *g, int64_t g_off, int accumulate)
{
    const kiln_buffer *a, *b;
    int64_t ao, ab, bo, bb;
    operand(c, s, 0, &a, &ao, &ab);
    operand(c, s, 1, &b, &bo, &bb);
    const int param = side == c->param_side;
    if (!param && c->size[side] == c->out_size) {   /* broadcast along no axis */
        kiln_args full = KILN_ARGS(
            kiln_arg_buffer(s->d_out), kiln_arg_buffer(a), kiln_arg_int(ao), kiln_arg_int(ab),
            kiln_arg_buffer(b), kiln_arg_int(bo), kiln_arg_int(bb), kiln_arg_buffer(g),
            kiln_arg_int(accumulate), kiln_arg_int(c->o.op), kiln_arg_int(side),
            kiln_arg_int(c->dims[1]), kiln_arg_int(c->dims[2]), kiln_arg_int(c->dims[3]),
            kiln_arg_int(c->out_size), kiln_arg_int(s->batch), kiln_arg_int(c->stride[0][0]),
            kiln_arg_int(c->stride[0][1]), kiln_arg_int(c->stride[0][2]),
            kiln_arg_int(c->stride[0][3]), kiln_arg_int(c->stride[1][0]),
            kiln_arg_int(c->stride[1][1]), kiln_arg_int(c->stride[1][2]),
            kiln_arg_int(c->stride[1][3]));
        const kiln_range cpu = {.dims = 2, .size = {(size_t)(c->out_size / c->dims[3]),
                                                    (size_t)s->batch}};
        const kiln_range gpu = {.dims = 2, .size = {(size_t)c->out_size, (size_t)s->batch}};
        (void)g_off;   /* a computed operand's gradient starts at 0 */
        return kiln_run_variant(s->dev, "binary", "kiln_binary_backward_full", &cpu, &gpu,
                                full);
    }
    kiln_args args = KILN_ARGS(
        kiln_arg_buffer(s->d_out), kiln_arg_buffer(a), kiln_arg_int(ao), kiln_arg_int(ab),
        kiln_arg_buffer(b), kiln_arg_int(bo), kiln_arg_int(bb), kiln_arg_buffer(g),
        kiln_arg_int(g_off), kiln_arg_int(accumulate), kiln_arg_int(c->o.op),
        kiln_arg_int(side), kiln_arg_int(param ? s->batch : 1),
        kiln_arg_int(param ? 1 : s->batch), kiln_arg_int(c->size[side]),
        kiln_arg_int(c->dims[0]), kiln_arg_int(c->dims[1]), kiln_arg_int(c->dims[2]),
        kiln_arg_int(c->dims[3]), kiln_arg_int(c->stride[0][0]),
        kiln_arg_int(c->stride[0][1]), kiln_arg_int(c->stride[0][2]),
        kiln_arg_int(c->stride[0][3]), kiln_arg_int(c->stride[1][0]),
        kiln_arg_int(c->stride[1][1]), kiln_arg_int(c->stride[1][2]),
        kiln_arg_int(c->stride[1][3]));
    const size_t range[2] = {(size_t)c->size[side], param ? 1 : (size_t)s->batch};
    return kiln_run(s->dev, "binary", "kiln_binary_backward", 2, range, args);
}

static kiln_status binary_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const binary_config *c = config;
    kiln_status st = KILN_OK;
    for (int side = 0; side < 2 && st == KILN_OK; side++) {
        if (side == c->param_side) {
            if (!s->frozen && !c->o.param_constant)
                st = binary_grad(c, s, side, s->grads, (int64_t)s->param_offset[0], 0);
            continue;
        }
        const int k = c->param_side == 0 ? 0 : side;   /* its input */
        if (s->d_in[k])
            st = binary_grad(c, s, side, s->d_in[k], 0, s->d_in_accumulate[k]);
    }
    return st;
}

static uint64_t binary_flops(const void *config, const kiln_shape *in_shape)
{
    (void)in_shape;
    return (uint64_t)((const binary_config *)config)->out_size;
}

/* args: the kiln_binary_options the builder copied. */
static void binary_configure(void *config, const void *args)
{
    const kiln_binary_options *o = args;
    binary_config *c = config;
    /* Field by field: the config is compared byte for byte after a model
     * file, so no name, struct_size or padding of the caller's. */
    c->o.op = o->op;
    c->o.param_rank = o->param_rank;
    memcpy(c->o.param_dims, o->param_dims, sizeof c->o.param_dims);
    c->o.param_first = o->param_first;
    c->o.param_constant = o->param_constant;
    c->o.param_value = o->param_value;
}

static void binary_describe(const void *config, void *args)
{
    kiln_binary_options *o = args;
    *o = ((const binary_config *)config)->o;
    o->struct_size = sizeof *o;
}

static const kiln_layer_field binary_fields[] = {
    {.key = "op", .type = KILN_FIELD_INT, .offset = offsetof(kiln_binary_options, op)},
    {.key = "param_rank", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_binary_options, param_rank), .optional = 1},
    {.key = "param_dims", .type = KILN_FIELD_QUAD,
     .offset = offsetof(kiln_binary_options, param_dims), .optional = 1},
    {.key = "param_first", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_binary_options, param_first), .optional = 1},
    {.key = "param_constant", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_binary_options, param_constant), .optional = 1},
    {.key = "param_value", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_binary_options, param_value), .optional = 1},
};

/* An operand's ONNX value: its dims right-aligned to the output's rank
 * (in NCHW order when `cf`), the batch first for a computed one. */
static const char *export_operand(kiln_onnx_graph *g, int32_t i, const binary_config *c,
                                  int side, int k, int cf)
{
    const int rank = g->layers[i].shape.rank;
    const kiln_param_spec *spec = NULL;
    const float *data = side == c->param_side ? kiln_onnx_param(g, i, "operand", &spec) : NULL;
    const kiln_shape *s = spec ? &spec->shape : kiln_onnx_input_shape(g, i, k);
    int64_t a[KILN_MAX_RANK] = {0}, o[KILN_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) {
        const int at = d - (rank - s->rank);
        a[d] = at >= 0 ? s->dims[at] : 1;
    }
    for (int d = 0; d < rank; d++)   /* (H, W, C) as (C, H, W) */
        o[d] = cf ? a[(d + 2) % 3] : a[d];
    if (spec) {
        const int64_t size = kiln_shape_size(&spec->shape), hw = a[0] * a[1];
        float *t = cf ? kiln_onnx_alloc(g, (size_t)size * sizeof *t) : NULL;
        for (int64_t p = 0; t && p < hw; p++)
            for (int64_t ch = 0; ch < a[2]; ch++)
                t[ch * hw + p] = data[p * a[2] + ch];
        int lead = 0;   /* ONNX right-aligns: leading 1s add nothing */
        while (lead < rank - 1 && o[lead] == 1)
            lead++;
        return kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, "operand"), rank - lead,
                                    o + lead, t ? t : data);
    }
    const char *value = kiln_onnx_input_value(g, i, k, cf ? KILN_ONNX_CF : KILN_ONNX_CL);
    if (s->rank == rank)
        return value;
    /* ONNX would align a lower rank's batch with a sample's axis: 1s go
     * between, the batch (0: kept) first. */
    int64_t shape[KILN_MAX_RANK + 1] = {0};
    memcpy(shape + 1, o, (size_t)rank * sizeof *o);
    const char *in[2] = {value, kiln_onnx_int64s(g, i, "shape", shape, rank + 1)};
    const char *out = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/aligned%d",
                                                                g->layers[i].name, side));
    kiln_onnx_add_node(g, "Reshape", in, 2, out);
    return out;
}

/* Add, Sub, Mul, Div, Max or Min. An (H, W, C) output is written as
 * ONNX's (N, C, H, W), its operands alike, so that an imported layer
 * scale keeps its initializer's (C, 1, 1); a (W, C) operand would need a
 * Transpose there, and such a layer is written channels-last instead. */
static void binary_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const binary_config *c = g->layers[i].config;
    int cf = g->layers[i].shape.rank == 3;
    for (int k = 0; k < g->layers[i].n_inputs; k++)
        cf &= kiln_onnx_input_shape(g, i, k)->rank != 2;
    const char *args[2];
    for (int side = 0, k = 0; side < 2; side++)
        args[side] = export_operand(g, i, c, side, side == c->param_side ? -1 : k++, cf);
    const int layout = cf ? KILN_ONNX_CF : KILN_ONNX_CL;
    const char *out = kiln_onnx_output(g, i, layout);
    kiln_onnx_add_node(g, op_names[c->o.op], args, 2, out);
    kiln_onnx_activate(g, i, layout, out);
}

const kiln_layer_ops kiln_layer_binary = {
    .kind = "binary", .config_size = sizeof(binary_config), .min_inputs = 1, .max_inputs = 2,
    .configure = binary_configure, .describe = binary_describe, .infer = binary_infer,
    .forward = binary_forward, .backward = binary_backward, .flops = binary_flops,
    .args_size = sizeof(kiln_binary_options), KILN_FIELDS(binary_fields),
    .export_onnx = binary_export_onnx,
    .writes_trainable_gradients_only = 1,
};
