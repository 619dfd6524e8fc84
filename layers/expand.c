/* Expand: each sample broadcast to a target shape (NumPy's broadcast_to,
 * ONNX's Expand of a computed value, x.unsqueeze(1).expand(-1, 4, -1)):
 * the input right-aligned against the target, each of its axes equal to
 * the target's or 1, which repeats. Backward sums each input value's
 * repeats. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>

typedef struct expand_config {
    kiln_shape target;
    int no_dims;           /* the caller's dims was NULL */
} expand_config;

static kiln_status expand_infer(void *config, kiln_layer_build *b)
{
    const expand_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64], t[64];
    if (c->no_dims || c->target.rank < 1 || c->target.rank > KILN_MAX_RANK) {
        snprintf(b->error, sizeof b->error, "target shape %s of rank %d; it must be given, of "
                 "rank 1..%d", c->no_dims ? "dims NULL" : "given", (int)c->target.rank,
                 KILN_MAX_RANK);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    kiln_shape_str(in, s, sizeof s);
    kiln_shape_str(&c->target, t, sizeof t);
    for (int32_t d = 0; d < c->target.rank; d++)
        if (c->target.dims[d] < 1) {
            snprintf(b->error, sizeof b->error, "target shape %s: dimension %d is %d; each "
                     "must be > 0", t, (int)d, (int)c->target.dims[d]);
            return KILN_ERROR_INVALID_ARGUMENT;
        }
    if (in->rank > c->target.rank) {
        snprintf(b->error, sizeof b->error, "cannot expand input %s to %s, a lower rank", s, t);
        return KILN_ERROR_SHAPE;
    }
    for (int32_t d = 0; d < in->rank; d++) {
        const int32_t from = in->dims[d], to = c->target.dims[d + c->target.rank - in->rank];
        if (from != to && from != 1) {
            snprintf(b->error, sizeof b->error, "cannot expand input %s to %s: dimension %d "
                     "(%d) is neither %d nor 1", s, t, (int)d, (int)from, (int)to);
            return KILN_ERROR_SHAPE;
        }
    }
    b->out = c->target;
    return KILN_OK;
}

/* Forward over the output, backward over the input; shapes padded to 4
 * axes with leading 1s. */
static kiln_status expand_run(const kiln_step *s, const kiln_buffer *src, kiln_buffer *dst,
                              int back, int accumulate)
{
    const kiln_shape *in = &s->in_shape[0], *out = s->out_shape;
    int32_t i[KILN_MAX_RANK], o[KILN_MAX_RANK];
    for (int a = 0; a < KILN_MAX_RANK; a++) {
        const int from_in = a - (KILN_MAX_RANK - in->rank);
        const int from_out = a - (KILN_MAX_RANK - out->rank);
        i[a] = from_in < 0 ? 1 : in->dims[from_in];
        o[a] = from_out < 0 ? 1 : out->dims[from_out];
    }
    kiln_args args = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst), kiln_arg_int(i[0]),
                               kiln_arg_int(i[1]), kiln_arg_int(i[2]), kiln_arg_int(i[3]),
                               kiln_arg_int(o[0]), kiln_arg_int(o[1]), kiln_arg_int(o[2]),
                               kiln_arg_int(o[3]), kiln_arg_int(accumulate),
                               kiln_arg_int(s->batch));
    const size_t range[2] = {(size_t)kiln_shape_size(back ? in : out), (size_t)s->batch};
    return kiln_run(s->dev, "expand", back ? "kiln_expand_backward" : "kiln_expand_forward", 2,
                    range, args);
}

static kiln_status expand_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const kiln_status st = expand_run(s, s->in[0], s->out, 0, 0);
    return st != KILN_OK ? st : kiln_step_activate(s, s->out);
}

static kiln_status expand_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    if (!s->d_in[0])
        return KILN_OK;
    return expand_run(s, s->d_out, s->d_in[0], 1, s->d_in_accumulate[0]);
}

/* args: a kiln_expand_args. */
static void expand_configure(void *config, const void *args)
{
    const kiln_expand_args *a = args;
    expand_config *c = config;
    c->no_dims = !a->dims;   /* reported by infer */
    c->target.rank = a->rank;
    for (int32_t i = 0; a->dims && a->rank >= 0 && a->rank <= KILN_MAX_RANK && i < a->rank; i++)
        c->target.dims[i] = a->dims[i];
}

/* dims points into the config. */
static void expand_describe(const void *config, void *args)
{
    const expand_config *c = config;
    kiln_expand_args *a = args;
    a->rank = c->target.rank;
    a->dims = c->target.dims;
}

static const kiln_layer_field expand_fields[] = {
    {.key = "target_shape", .type = KILN_FIELD_SHAPE, .offset = 0},
};

/* ONNX's Expand on the values in kiln's order, the batch kept (1). */
static void expand_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const kiln_shape *to = &g->layers[i].shape;
    int64_t shape[KILN_MAX_RANK + 1] = {1};
    for (int32_t d = 0; d < to->rank; d++)
        shape[d + 1] = to->dims[d];
    const char *args[2] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL),
                           kiln_onnx_int64s(g, i, "shape", shape, to->rank + 1)};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "Expand", args, 2, out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_expand = {
    .kind = "expand", .config_size = sizeof(expand_config), .min_inputs = 1, .max_inputs = 1,
    .configure = expand_configure, .describe = expand_describe, .infer = expand_infer,
    .forward = expand_forward, .backward = expand_backward,
    .args_size = sizeof(kiln_expand_args), KILN_FIELDS(expand_fields),
    .export_onnx = expand_export_onnx,
};
