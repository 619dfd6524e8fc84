/* Slice: a strided window of each sample, any axis but the batch, steps
 * negative included (ONNX's Slice, Split's parts, Gather of a constant
 * index). Forward reads the window; backward gives every input value its
 * place's gradient, zero where the window skipped it. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stddef.h>
#include <stdio.h>

typedef struct slice_config {
    int32_t begin[KILN_MAX_RANK], size[KILN_MAX_RANK], step[KILN_MAX_RANK];   /* as given */
} slice_config;

/* Axis a's step (0: 1). */
static int32_t step_of(const slice_config *c, int a)
{
    return c->step[a] ? c->step[a] : 1;
}

static kiln_status slice_infer(void *config, kiln_layer_build *b)
{
    const slice_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64];
    kiln_shape_str(in, s, sizeof s);
    b->out.rank = in->rank;
    for (int a = 0; a < KILN_MAX_RANK; a++) {
        const int64_t dim = a < in->rank ? in->dims[a] : 1, step = step_of(c, a);
        if (c->begin[a] < 0 || c->begin[a] >= dim || c->size[a] < 0) {
            snprintf(b->error, sizeof b->error, "begin[%d] %d or size[%d] %d does not fit the "
                     "input %s (begin in 0..dim - 1, size >= 0)", a, (int)c->begin[a], a,
                     (int)c->size[a], s);
            return a < in->rank ? KILN_ERROR_SHAPE : KILN_ERROR_INVALID_ARGUMENT;
        }
        /* How many indices fit from begin on, stepping as asked. */
        const int64_t room = step > 0 ? (dim - 1 - c->begin[a]) / step + 1
                                      : c->begin[a] / -step + 1;
        if (c->size[a] > room) {
            snprintf(b->error, sizeof b->error, "axis %d: %d values from %d in steps of %d "
                     "pass the end of the input %s", a, (int)c->size[a], (int)c->begin[a],
                     (int)step, s);
            return a < in->rank ? KILN_ERROR_SHAPE : KILN_ERROR_INVALID_ARGUMENT;
        }
        if (a < in->rank)
            b->out.dims[a] = c->size[a] ? c->size[a] : (int32_t)room;
    }
    return KILN_OK;
}

/* The kernels' arguments: the shapes padded to 4 axes with leading 1s. */
static kiln_status slice_run(const slice_config *c, const kiln_step *s, const kiln_buffer *src,
                             kiln_buffer *dst, int back, int accumulate)
{
    const kiln_shape *in = &s->in_shape[0], *out = s->out_shape;
    int32_t d[KILN_MAX_RANK], o[KILN_MAX_RANK], bg[KILN_MAX_RANK], st[KILN_MAX_RANK];
    const int pad = KILN_MAX_RANK - in->rank;
    for (int a = 0; a < KILN_MAX_RANK; a++) {
        const int from = a - pad;
        d[a] = from < 0 ? 1 : in->dims[from];
        o[a] = from < 0 ? 1 : out->dims[from];
        bg[a] = from < 0 ? 0 : c->begin[from];
        st[a] = from < 0 ? 1 : step_of(c, from);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst), kiln_arg_int(d[0]),
                            kiln_arg_int(d[1]), kiln_arg_int(d[2]), kiln_arg_int(d[3]),
                            kiln_arg_int(o[0]), kiln_arg_int(o[1]), kiln_arg_int(o[2]),
                            kiln_arg_int(o[3]), kiln_arg_int(bg[0]), kiln_arg_int(bg[1]),
                            kiln_arg_int(bg[2]), kiln_arg_int(bg[3]), kiln_arg_int(st[0]),
                            kiln_arg_int(st[1]), kiln_arg_int(st[2]), kiln_arg_int(st[3]),
                            kiln_arg_int(accumulate), kiln_arg_int(s->batch));
    const size_t range[2] = {(size_t)kiln_shape_size(back ? in : out), (size_t)s->batch};
    return kiln_run(s->dev, "slice", back ? "kiln_slice_backward" : "kiln_slice_forward", 2,
                    range, a);
}

static kiln_status slice_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    const kiln_status st = slice_run(config, s, s->in[0], s->out, 0, 0);
    return st != KILN_OK ? st : kiln_step_activate(s, s->out);
}

static kiln_status slice_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)replica;
    if (!s->d_in[0])
        return KILN_OK;
    return slice_run(config, s, s->d_out, s->d_in[0], 1, s->d_in_accumulate[0]);
}

/* args: the kiln_slice_options the builder took. */
static void slice_configure(void *config, const void *args)
{
    const kiln_slice_options *o = args;
    slice_config *c = config;
    for (int a = 0; a < KILN_MAX_RANK; a++) {
        c->begin[a] = o->begin[a];
        c->size[a] = o->size[a];
        c->step[a] = o->step[a];
    }
}

static void slice_describe(const void *config, void *args)
{
    const slice_config *c = config;
    kiln_slice_options *o = args;
    o->struct_size = sizeof *o;
    for (int a = 0; a < KILN_MAX_RANK; a++) {
        o->begin[a] = c->begin[a];
        o->size[a] = c->size[a];
        o->step[a] = c->step[a];
    }
}

static const kiln_layer_field slice_fields[] = {
    {.key = "begin", .type = KILN_FIELD_QUAD, .offset = offsetof(kiln_slice_options, begin)},
    {.key = "size", .type = KILN_FIELD_QUAD, .offset = offsetof(kiln_slice_options, size)},
    {.key = "step", .type = KILN_FIELD_QUAD, .offset = offsetof(kiln_slice_options, step)},
};

/* ONNX's Slice on the values in kiln's order: starts, ends, axes, steps;
 * an end past index 0 stepping down is -(dim + 1), which ONNX clamps to
 * "before the first". */
static void slice_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const slice_config *c = g->layers[i].config;
    const kiln_shape *in = kiln_onnx_input_shape(g, i, 0), *out = &g->layers[i].shape;
    int64_t starts[KILN_MAX_RANK], ends[KILN_MAX_RANK], axes[KILN_MAX_RANK], steps[KILN_MAX_RANK];
    for (int32_t a = 0; a < in->rank; a++) {
        const int64_t step = step_of(c, a);
        starts[a] = c->begin[a];
        ends[a] = c->begin[a] + (out->dims[a] - 1) * step + (step > 0 ? 1 : -1);
        if (ends[a] < 0)
            ends[a] = -(int64_t)in->dims[a] - 1;
        axes[a] = a + 1;
        steps[a] = step;
    }
    const char *args[5] = {kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL),
                           kiln_onnx_int64s(g, i, "starts", starts, in->rank),
                           kiln_onnx_int64s(g, i, "ends", ends, in->rank),
                           kiln_onnx_int64s(g, i, "axes", axes, in->rank),
                           kiln_onnx_int64s(g, i, "steps", steps, in->rank)};
    const char *o = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_add_node(g, "Slice", args, 5, o);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, o);
}

const kiln_layer_ops kiln_layer_slice = {
    .kind = "slice", .config_size = sizeof(slice_config), .min_inputs = 1, .max_inputs = 1,
    .configure = slice_configure, .describe = slice_describe, .infer = slice_infer,
    .forward = slice_forward, .backward = slice_backward,
    .args_size = sizeof(kiln_slice_options), KILN_FIELDS(slice_fields),
    .export_onnx = slice_export_onnx,
};
