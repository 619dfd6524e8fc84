/* kiln_model_export_onnx: the inference graph as ONNX (opset 13, IR 7).
 *
 * The file is encoded by protobuf-c code generated at build time from
 * ONNX's own onnx.proto (meson feature "onnx"; tools/onnx_proto.py renames
 * its package so the symbols are kiln_onnx__*), so the schema is ONNX's
 * and not a copy of it. Without the feature the call says so.
 *
 * kiln's tensors are channels-last (NHWC); Conv, pooling and
 * BatchNormalization in ONNX are channels-first. Each node's output is kept
 * in either layout or both, and a Transpose is added only where an op
 * needs the layout its input does not have yet, once per value: a run of
 * convolutions costs one Transpose in and one out. */
#include "kiln_config.h"
#include "runtime/model/model.h"

#include <string.h>

#if KILN_HAVE_ONNX

#include "base/files.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

/* The generated header's oneofs are anonymous unions (C11). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "kiln_onnx.pb-c.h"
#pragma GCC diagnostic pop

#define OPSET 13
#define IR_VERSION 7   /* the IR of ONNX 1.8, which brought opset 13 */
#define CALL "kiln_model_export_onnx"
#define MAX_CONSTANTS 16

typedef KilnOnnx__NodeProto onnx_node;
typedef KilnOnnx__TensorProto onnx_tensor;

enum { CL, CF };   /* channels last (kiln's layout), channels first (ONNX's) */

typedef struct block {
    struct block *next;
    size_t used, size;
    unsigned char data[];
} block;

/* One kiln node's output in the ONNX graph: its value in each layout it
 * has been made in (NULL: not yet), through `rep`, the node whose value it
 * is (a layer that changes nothing, like Dropout, shares its input's). */
typedef struct value {
    const char *name[2];
    int native;          /* the layout its op produced */
    kiln_node rep;
} value;

typedef struct exporter {
    kiln_model *m;
    block *arena;
    int oom;
    size_t oom_bytes;    /* the allocation that failed */
    const float *flat;
    value *values;
    onnx_node **nodes;
    size_t n_nodes, cap_nodes;
    onnx_tensor **inits;
    size_t n_inits, cap_inits;
    const char **names;  /* every value name, kept unique */
    size_t n_names, cap_names;
    struct constant {
        const char *what, *name;
    } consts[MAX_CONSTANTS];
    size_t n_consts;
} exporter;

/* ---- memory: everything the file holds comes from one arena ------------ */

static void *arena_alloc(exporter *ex, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    block *b = ex->arena;
    if (!b || b->size - b->used < size) {
        const size_t want = size > (1u << 16) ? size : (1u << 16);
        b = kiln_alloc(ex->m->ctx, sizeof *b + want);
        if (!b) {
            ex->oom = 1;
            ex->oom_bytes = sizeof *b + want;
            return NULL;
        }
        b->size = want;
        b->used = 0;
        b->next = ex->arena;
        ex->arena = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

static void arena_free(exporter *ex)
{
    for (block *b = ex->arena, *next; b; b = next) {
        next = b->next;
        kiln_free(ex->m->ctx, b);
    }
    ex->arena = NULL;
}

/* Appends item to a growing array of pointers. */
static void push(exporter *ex, void ***array, size_t *n, size_t *cap, void *item)
{
    if (!item)
        return;   /* its allocation failed: ex->oom says so */
    if (*n == *cap) {
        const size_t grown = *cap ? 2 * *cap : 64;
        void **bigger = arena_alloc(ex, grown * sizeof *bigger);
        if (!bigger)
            return;
        if (*n)
            memcpy(bigger, *array, *n * sizeof *bigger);
        *array = bigger;
        *cap = grown;
    }
    (*array)[(*n)++] = item;
}

static char *arena_printf(exporter *ex, const char *fmt, ...) KILN_PRINTF(2, 3);

static char *arena_printf(exporter *ex, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? arena_alloc(ex, (size_t)n + 1) : NULL;
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* A value name not used yet: `base`, else base_1, base_2, ... (a layer a
 * user named "conv/nchw" must not meet the transpose of a layer "conv"). */
static const char *unique_name(exporter *ex, const char *base)
{
    const char *name = base;
    for (int k = 1; name; k++) {
        size_t i = 0;
        while (i < ex->n_names && strcmp(ex->names[i], name) != 0)
            i++;
        if (i == ex->n_names)
            break;
        name = arena_printf(ex, "%s_%d", base, k);
    }
    push(ex, (void ***)&ex->names, &ex->n_names, &ex->cap_names, (void *)name);
    return name;
}

/* ---- graph pieces ------------------------------------------------------ */

/* A node of `op` with inputs in[0..n_in) and one output, named as it. */
static onnx_node *add_node(exporter *ex, const char *op, const char *const *in, size_t n_in,
                           const char *out)
{
    onnx_node *nd = arena_alloc(ex, sizeof *nd);
    char **inputs = arena_alloc(ex, n_in * sizeof *inputs);
    char **outputs = arena_alloc(ex, sizeof *outputs);
    if (!nd || !inputs || !outputs || !out)
        return NULL;
    kiln_onnx__node_proto__init(nd);
    for (size_t i = 0; i < n_in; i++)
        inputs[i] = (char *)in[i];
    outputs[0] = (char *)out;
    nd->n_input = n_in;
    nd->input = inputs;
    nd->n_output = 1;
    nd->output = outputs;
    nd->name = (char *)out;
    nd->op_type = (char *)op;
    push(ex, (void ***)&ex->nodes, &ex->n_nodes, &ex->cap_nodes, nd);
    return ex->oom ? NULL : nd;
}

static KilnOnnx__AttributeProto *add_attr(exporter *ex, onnx_node *nd, const char *name,
                                          KilnOnnx__AttributeProto__AttributeType type)
{
    KilnOnnx__AttributeProto *a = nd ? arena_alloc(ex, sizeof *a) : NULL;
    if (!a)
        return NULL;
    kiln_onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    size_t cap = nd->n_attribute;   /* attribute lists are short: grown one by one */
    KilnOnnx__AttributeProto **list = arena_alloc(ex, (cap + 1) * sizeof *list);
    if (!list)
        return NULL;
    if (cap)
        memcpy(list, nd->attribute, cap * sizeof *list);
    list[cap] = a;
    nd->attribute = list;
    nd->n_attribute = cap + 1;
    return a;
}

static void attr_int(exporter *ex, onnx_node *nd, const char *name, int64_t v)
{
    KilnOnnx__AttributeProto *a = add_attr(ex, nd, name,
                                           KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) {
        a->has_i = 1;
        a->i = v;
    }
}

static void attr_float(exporter *ex, onnx_node *nd, const char *name, float v)
{
    KilnOnnx__AttributeProto *a = add_attr(ex, nd, name,
                                           KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) {
        a->has_f = 1;
        a->f = v;
    }
}

static void attr_ints(exporter *ex, onnx_node *nd, const char *name, const int64_t *v, size_t n)
{
    KilnOnnx__AttributeProto *a = add_attr(ex, nd, name,
                                           KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *copy = a ? arena_alloc(ex, n * sizeof *copy) : NULL;
    if (copy) {
        memcpy(copy, v, n * sizeof *copy);
        a->n_ints = n;
        a->ints = copy;
    }
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* An initializer of FLOAT or INT64 elements (`width` bytes); `data` must
 * outlive the export. */
static const char *add_tensor(exporter *ex, const char *name, int32_t type, size_t width,
                              int rank, const int64_t *dims, const void *data)
{
    onnx_tensor *t = arena_alloc(ex, sizeof *t);
    int64_t *d = arena_alloc(ex, (size_t)rank * sizeof *d);
    name = unique_name(ex, name);
    if (!t || !d || !name)
        return NULL;
    kiln_onnx__tensor_proto__init(t);
    size_t count = 1;
    for (int i = 0; i < rank; i++)
        count *= (size_t)(d[i] = dims[i]);
    /* raw_data is little-endian whatever the host. */
    const unsigned char *bytes = data;
    if (!host_is_little_endian()) {
        unsigned char *le = arena_alloc(ex, count * width);
        if (!le)
            return NULL;
        for (size_t i = 0; i < count * width; i++)
            le[i] = bytes[i - i % width + width - 1 - i % width];
        bytes = le;
    }
    t->name = (char *)name;
    t->n_dims = (size_t)rank;
    t->dims = d;
    t->has_data_type = 1;
    t->data_type = type;
    t->has_raw_data = 1;
    t->raw_data.len = count * width;
    t->raw_data.data = (uint8_t *)bytes;
    push(ex, (void ***)&ex->inits, &ex->n_inits, &ex->cap_inits, t);
    return name;
}

static const char *add_initializer(exporter *ex, const char *name, int rank,
                                   const int64_t *dims, const float *data)
{
    return add_tensor(ex, name, KILN_ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, sizeof *data, rank,
                      dims, data);
}

/* A float scalar, one initializer for every node that needs it. */
static const char *constant(exporter *ex, const char *what, float v)
{
    for (size_t k = 0; k < ex->n_consts; k++)
        if (strcmp(ex->consts[k].what, what) == 0)
            return ex->consts[k].name;
    float *data = arena_alloc(ex, sizeof *data);
    if (!data)
        return NULL;
    *data = v;
    const char *name = add_initializer(ex, arena_printf(ex, "kiln/%s", what), 0, NULL, data);
    if (name && ex->n_consts < MAX_CONSTANTS)
        ex->consts[ex->n_consts++] = (struct constant){what, name};
    return name;
}

/* The layer's parameter `name` in the host copy, and its spec. */
static const float *param(const exporter *ex, kiln_node i, const char *name,
                          const kiln_param_spec **spec)
{
    const kiln_node_rec *node = &ex->m->nodes[i];
    for (int p = 0; p < node->n_params; p++)
        if (strcmp(node->params[p].name, name) == 0) {
            if (spec)
                *spec = &node->params[p];
            return ex->flat + node->param_offset[p];
        }
    return NULL;
}

/* A parameter as an initializer named "<layer>/<name>", kiln's shape. */
static const char *param_initializer(exporter *ex, kiln_node i, const char *name)
{
    const kiln_param_spec *spec;
    const float *data = param(ex, i, name, &spec);
    if (!data)
        return NULL;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < spec->shape.rank; d++)
        dims[d] = spec->shape.dims[d];
    return add_initializer(ex, arena_printf(ex, "%s/%s", ex->m->nodes[i].name, name),
                           spec->shape.rank, dims, data);
}

/* ---- values and layouts ------------------------------------------------ */

static int32_t sample_rank(const exporter *ex, kiln_node i)
{
    return ex->m->nodes[i].shape.rank;
}

/* The final name of node i's value in `layout`: its own name channels-last
 * (what kiln calls the tensor), "<name>/nchw" channels-first. */
static const char *final_name(exporter *ex, kiln_node i, int layout)
{
    const char *name = ex->m->nodes[i].name;
    if (layout == CF && sample_rank(ex, i) > 1)
        return unique_name(ex, arena_printf(ex, "%s/nchw", name));
    return unique_name(ex, name);
}

static void set_value(exporter *ex, kiln_node i, int layout, const char *name)
{
    value *v = &ex->values[i];
    v->rep = i;
    v->native = layout;
    v->name[layout] = name;
    /* (batch, C): both layouts are one. */
    v->name[!layout] = sample_rank(ex, i) == 1 ? name : NULL;
}

/* Node i's value in `layout`, transposed from the other once if need be. */
static const char *get_value(exporter *ex, kiln_node i, int layout)
{
    const kiln_node r = ex->values[i].rep;
    value *v = &ex->values[r];
    if (v->name[layout] || !v->name[!layout])
        return v->name[layout];
    const int32_t rank = sample_rank(ex, r);
    int64_t perm[KILN_MAX_RANK + 1];
    perm[0] = 0;
    for (int32_t d = 1; d <= rank; d++)
        perm[d] = layout == CF ? (d == 1 ? rank : d - 1) : (d == rank ? 1 : d + 1);
    const char *out = final_name(ex, r, layout);
    onnx_node *nd = add_node(ex, "Transpose", &v->name[!layout], 1, out);
    attr_ints(ex, nd, "perm", perm, (size_t)rank + 1);
    if (nd)
        v->name[layout] = out;
    return v->name[layout];
}

/* Where a layer writes its output: its final name, or a name for the
 * pre-activation value when the node's activation follows. */
static const char *layer_output(exporter *ex, kiln_node i, int layout)
{
    if (ex->m->nodes[i].activation == KILN_ACTIVATION_LINEAR)
        return final_name(ex, i, layout);
    const char *name = ex->m->nodes[i].name;
    if (layout == CF && sample_rank(ex, i) > 1)
        return unique_name(ex, arena_printf(ex, "%s/nchw_preactivation", name));
    return unique_name(ex, arena_printf(ex, "%s/preactivation", name));
}

/* A node of `op` on in[0..n_in) writing "<layer>/<what>", for the steps
 * of a layer that ONNX spells as several ops. */
static const char *step(exporter *ex, kiln_node i, const char *op, const char *a,
                        const char *b, const char *what)
{
    const char *in[2] = {a, b};
    const char *out = unique_name(ex, arena_printf(ex, "%s/%s", ex->m->nodes[i].name, what));
    add_node(ex, op, in, b ? 2 : 1, out);
    return out;
}

static int activation_known(kiln_activation act)
{
    switch (act) {
    case KILN_ACTIVATION_LINEAR: case KILN_ACTIVATION_RELU: case KILN_ACTIVATION_SIGMOID:
    case KILN_ACTIVATION_TANH: case KILN_ACTIVATION_SOFTMAX: case KILN_ACTIVATION_GELU:
    case KILN_ACTIVATION_GELU_TANH: case KILN_ACTIVATION_LEAKY_RELU: case KILN_ACTIVATION_SILU:
        return 1;
    }
    return 0;
}

/* The node's activation on `in` (its layer's output, in `layout`), in the
 * order of kiln's arithmetic (opencl/kernels/prelude.cl); opset 13 has
 * no Gelu. */
static void activate(exporter *ex, kiln_node i, int layout, const char *in)
{
    const kiln_activation act = ex->m->nodes[i].activation;
    if (act == KILN_ACTIVATION_LINEAR) {
        set_value(ex, i, layout, in);
        return;
    }
    const char *out = final_name(ex, i, layout);
    const char *args[2] = {in, NULL};
    const char *op = NULL;
    onnx_node *nd = NULL;
    switch (act) {
    case KILN_ACTIVATION_RELU: op = "Relu"; break;
    case KILN_ACTIVATION_SIGMOID: op = "Sigmoid"; break;
    case KILN_ACTIVATION_TANH: op = "Tanh"; break;
    case KILN_ACTIVATION_SOFTMAX:
        /* Over the last axis, the channels: axis 1 of NCHW. */
        nd = add_node(ex, "Softmax", args, 1, out);
        attr_int(ex, nd, "axis", layout == CF && sample_rank(ex, i) > 1 ? 1 : -1);
        break;
    case KILN_ACTIVATION_LEAKY_RELU:
        attr_float(ex, add_node(ex, "LeakyRelu", args, 1, out), "alpha", 0.2f);
        break;
    case KILN_ACTIVATION_SILU:   /* x sigmoid(x) */
        op = "Mul";
        args[1] = step(ex, i, "Sigmoid", in, NULL, "sigmoid");
        break;
    case KILN_ACTIVATION_GELU: {   /* 0.5 x (1 + erf(x / sqrt 2)) */
        const char *e = step(ex, i, "Erf", step(ex, i, "Mul", in,
                             constant(ex, "sqrt_half", 0.70710678118654752f), "gelu_scaled"),
                             NULL, "gelu_erf");
        op = "Mul";
        args[0] = step(ex, i, "Mul", in, constant(ex, "half", 0.5f), "gelu_half");
        args[1] = step(ex, i, "Add", e, constant(ex, "one", 1.0f), "gelu_cdf");
        break;
    }
    case KILN_ACTIVATION_GELU_TANH: {   /* x sigmoid(2 sqrt(2 / pi) (x + 0.044715 x^3)) */
        const char *cube = step(ex, i, "Mul", step(ex, i, "Mul", in, in, "gelu_square"), in,
                                "gelu_cube");
        const char *u = step(ex, i, "Add", in, step(ex, i, "Mul", cube,
                             constant(ex, "gelu_cubic", 0.044715f), "gelu_cubic_term"),
                             "gelu_inner");
        const char *u2 = step(ex, i, "Mul", u, constant(ex, "two_sqrt_2_over_pi",
                                                          2.0f * 0.79788456080286536f),
                              "gelu_argument");
        op = "Mul";
        args[1] = step(ex, i, "Sigmoid", u2, NULL, "gelu_sigmoid");
        break;
    }
    default:   /* activation_known refused it before */
        break;
    }
    if (op)
        add_node(ex, op, args, args[1] ? 2 : 1, out);
    set_value(ex, i, layout, out);
}

/* ---- one function per layer kind --------------------------------------- */

typedef union layer_args {
    kiln_conv2d_options conv2d;
    kiln_pool2d_options pool;
    kiln_batch_norm_options batch_norm;
    kiln_layer_norm_options layer_norm;
    kiln_multi_head_attention_options mha;
} layer_args;

static layer_args describe(const kiln_node_rec *node)
{
    layer_args a;
    memset(&a, 0, sizeof a);
    node->ops->describe(node->config, &a);
    return a;
}

/* Keras's padding along one axis as ONNX's explicit pads: 'same' may put
 * one more pixel after than before; 'valid' drops what the strides leave. */
static void window_pads(int32_t in, int32_t window, int32_t stride, kiln_padding padding,
                        int64_t *before, int64_t *after)
{
    int32_t out = 0, pad = 0;
    kiln_window_output(in, window, stride, padding, &out, &pad);
    const int64_t span = (int64_t)(out - 1) * stride + window;
    *before = pad;
    *after = span - in - pad > 0 ? span - in - pad : 0;
}

static void window_attrs(exporter *ex, onnx_node *nd, const kiln_shape *in, const int32_t *size,
                         const int32_t *strides, kiln_padding padding)
{
    int64_t kernel[2] = {size[0], size[1]}, step[2] = {strides[0], strides[1]}, pads[4];
    window_pads(in->dims[0], size[0], strides[0], padding, &pads[0], &pads[2]);
    window_pads(in->dims[1], size[1], strides[1], padding, &pads[1], &pads[3]);
    attr_ints(ex, nd, "kernel_shape", kernel, 2);
    attr_ints(ex, nd, "strides", step, 2);
    attr_ints(ex, nd, "pads", pads, 4);
}

static kiln_node input_of(const exporter *ex, kiln_node i, int k)
{
    return ex->m->nodes[i].inputs[k];
}

static void emit_conv2d(exporter *ex, kiln_node i)
{
    const kiln_node_rec *node = &ex->m->nodes[i];
    const kiln_conv2d_options o = describe(node).conv2d;
    const kiln_shape *in = &ex->m->nodes[input_of(ex, i, 0)].shape;
    const kiln_param_spec *spec;
    const float *hwio = param(ex, i, "kernel", &spec);
    const int32_t kh = spec->shape.dims[0], kw = spec->shape.dims[1];
    const int32_t c = spec->shape.dims[2], f = spec->shape.dims[3];
    float *oihw = arena_alloc(ex, (size_t)kh * kw * c * f * sizeof *oihw);
    if (!oihw)
        return;
    for (int32_t y = 0; y < kh; y++)
        for (int32_t x = 0; x < kw; x++)
            for (int32_t ci = 0; ci < c; ci++)
                for (int32_t fi = 0; fi < f; fi++)
                    oihw[(((size_t)fi * c + ci) * kh + y) * kw + x] =
                        hwio[(((size_t)y * kw + x) * c + ci) * f + fi];
    const int64_t dims[4] = {f, c, kh, kw};
    const char *args[3] = {get_value(ex, input_of(ex, i, 0), CF),
                           add_initializer(ex, arena_printf(ex, "%s/kernel", node->name), 4,
                                           dims, oihw),
                           o.no_bias ? NULL : param_initializer(ex, i, "bias")};
    const char *out = layer_output(ex, i, CF);
    onnx_node *nd = add_node(ex, "Conv", args, o.no_bias ? 2 : 3, out);
    window_attrs(ex, nd, in, o.kernel_size, o.strides, o.padding);
    activate(ex, i, CF, out);
}

static void emit_pool(exporter *ex, kiln_node i, const char *op)
{
    const kiln_pool2d_options o = describe(&ex->m->nodes[i]).pool;
    const char *x = get_value(ex, input_of(ex, i, 0), CF);
    const char *out = layer_output(ex, i, CF);
    onnx_node *nd = add_node(ex, op, &x, 1, out);
    window_attrs(ex, nd, &ex->m->nodes[input_of(ex, i, 0)].shape, o.pool_size, o.strides,
                 o.padding);
    /* Keras averages over the cells inside the image only. */
    if (strcmp(op, "AveragePool") == 0)
        attr_int(ex, nd, "count_include_pad", 0);
    activate(ex, i, CF, out);
}

static void emit_max_pooling2d(exporter *ex, kiln_node i)
{
    emit_pool(ex, i, "MaxPool");
}

static void emit_average_pooling2d(exporter *ex, kiln_node i)
{
    emit_pool(ex, i, "AveragePool");
}

/* From NCHW when the input is there already, else a mean over H and W of
 * NHWC: no transpose either way. */
static void emit_global_average_pooling2d(exporter *ex, kiln_node i)
{
    const value *in = &ex->values[ex->values[input_of(ex, i, 0)].rep];
    const char *out = layer_output(ex, i, CL);
    if (in->name[CL]) {
        onnx_node *nd = add_node(ex, "ReduceMean", &in->name[CL], 1, out);
        const int64_t axes[2] = {1, 2};
        attr_ints(ex, nd, "axes", axes, 2);
        attr_int(ex, nd, "keepdims", 0);
    } else {
        const char *pooled = unique_name(ex, arena_printf(ex, "%s/nchw_pooled",
                                                          ex->m->nodes[i].name));
        add_node(ex, "GlobalAveragePool", &in->name[CF], 1, pooled);
        attr_int(ex, add_node(ex, "Flatten", &pooled, 1, out), "axis", 1);
    }
    activate(ex, i, CL, out);
}

static void emit_batch_norm(exporter *ex, kiln_node i)
{
    const kiln_batch_norm_options o = describe(&ex->m->nodes[i]).batch_norm;
    const char *args[5] = {get_value(ex, input_of(ex, i, 0), CF),
                           param_initializer(ex, i, "gamma"), param_initializer(ex, i, "beta"),
                           param_initializer(ex, i, "moving_mean"),
                           param_initializer(ex, i, "moving_variance")};
    const char *out = layer_output(ex, i, CF);
    attr_float(ex, add_node(ex, "BatchNormalization", args, 5, out), "epsilon", o.epsilon);
    activate(ex, i, CF, out);
}

/* On the last axis of any rank: MatMul broadcasts over the others. */
static void emit_dense(exporter *ex, kiln_node i)
{
    const char *args[2] = {get_value(ex, input_of(ex, i, 0), CL),
                           param_initializer(ex, i, "kernel")};
    const char *out = layer_output(ex, i, CL);
    if (param(ex, i, "bias", NULL)) {
        const char *product = unique_name(ex, arena_printf(ex, "%s/matmul",
                                                           ex->m->nodes[i].name));
        add_node(ex, "MatMul", args, 2, product);
        const char *sum[2] = {product, param_initializer(ex, i, "bias")};
        add_node(ex, "Add", sum, 2, out);
    } else {
        add_node(ex, "MatMul", args, 2, out);
    }
    activate(ex, i, CL, out);
}

/* Dropout in inference and the Activation layer: the input's value, or
 * the node's activation of it. */
static void emit_identity(exporter *ex, kiln_node i)
{
    const kiln_node r = ex->values[input_of(ex, i, 0)].rep;
    const value *v = &ex->values[r];
    if (ex->m->nodes[i].activation == KILN_ACTIVATION_LINEAR)
        ex->values[i].rep = r;
    else
        activate(ex, i, v->native, v->name[v->native]);
}

/* kiln's Flatten keeps memory order, which is NHWC's. */
static void emit_flatten(exporter *ex, kiln_node i)
{
    if (sample_rank(ex, input_of(ex, i, 0)) == 1) {
        emit_identity(ex, i);
        return;
    }
    const char *x = get_value(ex, input_of(ex, i, 0), CL);
    const char *out = layer_output(ex, i, CL);
    attr_int(ex, add_node(ex, "Flatten", &x, 1, out), "axis", 1);
    activate(ex, i, CL, out);
}

/* Sums in kiln's order, in the layout the first input has. */
static void emit_add(exporter *ex, kiln_node i)
{
    const kiln_node_rec *node = &ex->m->nodes[i];
    const int layout = ex->values[ex->values[node->inputs[0]].rep].native;
    const char *sum = get_value(ex, node->inputs[0], layout);
    for (int k = 1; k < node->n_inputs; k++) {
        const char *args[2] = {sum, get_value(ex, node->inputs[k], layout)};
        sum = k + 1 < node->n_inputs
                  ? unique_name(ex, arena_printf(ex, "%s/sum%d", node->name, k))
                  : layer_output(ex, i, layout);
        add_node(ex, "Add", args, 2, sum);
    }
    activate(ex, i, layout, sum);
}

/* The mean over the last axis, kept as an axis of 1. */
static const char *mean_of_last(exporter *ex, kiln_node i, const char *x, const char *what)
{
    const int64_t last = -1;
    const char *out = unique_name(ex, arena_printf(ex, "%s/%s", ex->m->nodes[i].name, what));
    attr_ints(ex, add_node(ex, "ReduceMean", &x, 1, out), "axes", &last, 1);
    return out;
}

/* Over the last axis, as opset 13 has no LayerNormalization:
 * (x - mean) / sqrt(var + epsilon) gamma + beta, in kiln's order. */
static void emit_layer_norm(exporter *ex, kiln_node i)
{
    const char *name = ex->m->nodes[i].name;
    float *epsilon = arena_alloc(ex, sizeof *epsilon);
    if (!epsilon)
        return;
    *epsilon = describe(&ex->m->nodes[i]).layer_norm.epsilon;
    const char *x = get_value(ex, input_of(ex, i, 0), CL);
    const char *centered = step(ex, i, "Sub", x, mean_of_last(ex, i, x, "mean"), "centered");
    const char *var = mean_of_last(ex, i, step(ex, i, "Mul", centered, centered, "squared"),
                                   "variance");
    const char *eps = add_initializer(ex, arena_printf(ex, "%s/epsilon", name), 0, NULL,
                                      epsilon);
    const char *std = step(ex, i, "Sqrt", step(ex, i, "Add", var, eps, "variance_epsilon"),
                           NULL, "std");
    const char *terms[3][3] = {
        {"Mul", step(ex, i, "Reciprocal", std, NULL, "inv_std"), "normalized"},
        {"Mul", param(ex, i, "gamma", NULL) ? param_initializer(ex, i, "gamma") : NULL,
         "scaled"},
        {"Add", param(ex, i, "beta", NULL) ? param_initializer(ex, i, "beta") : NULL, ""}};
    const int last = terms[2][1] ? 2 : terms[1][1] ? 1 : 0;
    const char *out = layer_output(ex, i, CL), *y = centered;
    for (int k = 0; k <= last; k++) {
        if (!terms[k][1])
            continue;
        const char *in[2] = {y, terms[k][1]};
        y = k == last ? out : unique_name(ex, arena_printf(ex, "%s/%s", name, terms[k][2]));
        add_node(ex, terms[k][0], in, 2, y);
    }
    activate(ex, i, CL, out);
}

/* The values in kiln's (NHWC) row-major order, so from channels-last. */
static void emit_reshape(exporter *ex, kiln_node i)
{
    const kiln_shape *to = &ex->m->nodes[i].shape;
    int64_t *shape = arena_alloc(ex, ((size_t)to->rank + 1) * sizeof *shape);
    if (!shape)
        return;
    shape[0] = 0;   /* opset 13: keep the input's batch */
    for (int32_t d = 0; d < to->rank; d++)
        shape[d + 1] = to->dims[d];
    const int64_t dims = to->rank + 1;
    const char *args[2] = {get_value(ex, input_of(ex, i, 0), CL),
                           add_tensor(ex, arena_printf(ex, "%s/shape", ex->m->nodes[i].name),
                                      KILN_ONNX__TENSOR_PROTO__DATA_TYPE__INT64, sizeof *shape, 1,
                                      &dims, shape)};
    const char *out = layer_output(ex, i, CL);
    add_node(ex, "Reshape", args, 2, out);
    activate(ex, i, CL, out);
}

/* In the layout the first input has; the axis is where the output's shape
 * differs from that input's. */
static void emit_concatenate(exporter *ex, kiln_node i)
{
    const kiln_node_rec *node = &ex->m->nodes[i];
    const kiln_shape *first = &ex->m->nodes[node->inputs[0]].shape;
    const int32_t rank = node->shape.rank;
    int32_t at = 0;
    while (at < rank - 1 && node->shape.dims[at] == first->dims[at])
        at++;
    const int layout = ex->values[ex->values[node->inputs[0]].rep].native;
    const char *in[KILN_MAX_INPUTS];
    for (int k = 0; k < node->n_inputs; k++)
        in[k] = get_value(ex, node->inputs[k], layout);
    const char *out = layer_output(ex, i, layout);
    onnx_node *nd = add_node(ex, "Concat", in, (size_t)node->n_inputs, out);
    attr_int(ex, nd, "axis", layout == CF && rank > 1 ? (at == rank - 1 ? 1 : at + 2) : at + 1);
    activate(ex, i, layout, out);
}

/* An int64 vector initializer named "<layer>/<what>" (shapes). */
static const char *int64_tensor(exporter *ex, kiln_node i, const char *what, const int64_t *v,
                                int64_t n)
{
    int64_t *data = arena_alloc(ex, (size_t)n * sizeof *data);
    if (!data)
        return NULL;
    memcpy(data, v, (size_t)n * sizeof *data);
    return add_tensor(ex, arena_printf(ex, "%s/%s", ex->m->nodes[i].name, what),
                      KILN_ONNX__TENSOR_PROTO__DATA_TYPE__INT64, sizeof *data, 1, &n, data);
}

/* Mul, then ReduceSum over the last axis (opset 13 takes the axes as an
 * input) keeping it: (batch, 1). Samples are rank 1, so either layout. */
static void emit_dot(exporter *ex, kiln_node i)
{
    const kiln_node_rec *node = &ex->m->nodes[i];
    const char *factors[2] = {get_value(ex, node->inputs[0], CL),
                              get_value(ex, node->inputs[1], CL)};
    const char *product = unique_name(ex, arena_printf(ex, "%s/product", node->name));
    add_node(ex, "Mul", factors, 2, product);
    const int64_t last = -1;
    const char *args[2] = {product, int64_tensor(ex, i, "axes", &last, 1)};
    const char *out = layer_output(ex, i, CL);
    add_node(ex, "ReduceSum", args, 2, out);
    activate(ex, i, CL, out);
}

/* (batch, T, heads x dim) -> (batch, heads, T, dim), or (batch, heads,
 * dim, T) for the keys, which the scores multiply transposed. */
static const char *split_heads(exporter *ex, kiln_node i, const char *x, int64_t t,
                               int64_t heads, int64_t dim, int keys, const char *what)
{
    const int64_t shape[4] = {0, t, heads, dim};
    const int64_t perm[4] = {0, 2, keys ? 3 : 1, keys ? 1 : 3};
    const char *name = ex->m->nodes[i].name;
    const char *args[2] = {x, int64_tensor(ex, i, arena_printf(ex, "%s_shape", what), shape, 4)};
    const char *split = unique_name(ex, arena_printf(ex, "%s/%s_heads", name, what));
    add_node(ex, "Reshape", args, 2, split);
    const char *out = unique_name(ex, arena_printf(ex, "%s/%s_by_head", name, what));
    attr_ints(ex, add_node(ex, "Transpose", &split, 1, out), "perm", perm, 4);
    return out;
}

/* x W + b with a Keras kernel as the matrix it is in memory: (in, heads,
 * dim) as (in, heads x dim), the output's (heads, dim, out) as (heads x
 * dim, out); the bias flat. `proj` is Keras's name; out NULL: a name of
 * the layer's. */
static const char *projection(exporter *ex, kiln_node i, const char *x, const char *proj,
                              const char *out)
{
    const char *name = ex->m->nodes[i].name;
    const kiln_param_spec *spec;
    const float *w = param(ex, i, arena_printf(ex, "%s/kernel", proj), &spec);
    if (!w)
        return NULL;
    const int64_t size = kiln_shape_size(&spec->shape);
    const int64_t cols = strcmp(proj, "attention_output") == 0
                             ? spec->shape.dims[spec->shape.rank - 1]
                             : size / spec->shape.dims[0];
    const int64_t dims[2] = {size / cols, cols};
    const char *args[2] = {x, add_initializer(ex, arena_printf(ex, "%s/%s/kernel", name, proj),
                                              2, dims, w)};
    const float *b = param(ex, i, arena_printf(ex, "%s/bias", proj), NULL);
    const char *product = b || !out ? unique_name(ex, arena_printf(ex, "%s/%s", name, proj))
                                    : out;
    add_node(ex, "MatMul", args, 2, product);
    if (!b)
        return product;
    const char *sum[2] = {product, add_initializer(ex, arena_printf(ex, "%s/%s/bias", name, proj),
                                                   1, &cols, b)};
    const char *biased = out ? out : unique_name(ex, arena_printf(ex, "%s/%s_biased", name,
                                                                  proj));
    add_node(ex, "Add", sum, 2, biased);
    return biased;
}

/* MatMul per head, in kiln's order of arithmetic: the scores times the
 * scale, the causal mask added as a constant (a large negative where
 * j > i, which the softmax turns into 0, as Keras's), Softmax over the
 * values. Dropout is fit's only. */
static void emit_multi_head_attention(exporter *ex, kiln_node i)
{
    const kiln_node_rec *node = &ex->m->nodes[i];
    const kiln_multi_head_attention_options o = describe(node).mha;
    const kiln_param_spec *q_spec, *v_spec;
    if (!param(ex, i, "query/kernel", &q_spec) || !param(ex, i, "value/kernel", &v_spec))
        return;
    const int64_t heads = q_spec->shape.dims[1], kd = q_spec->shape.dims[2];
    const int64_t vd = v_spec->shape.dims[2];
    const int64_t tq = ex->m->nodes[input_of(ex, i, 0)].shape.dims[0];
    const int64_t tv = ex->m->nodes[input_of(ex, i, 1)].shape.dims[0];
    const char *xq = get_value(ex, input_of(ex, i, 0), CL);
    const char *xv = get_value(ex, input_of(ex, i, 1), CL);
    const char *q = split_heads(ex, i, projection(ex, i, xq, "query", NULL), tq, heads, kd, 0,
                                "query");
    const char *k = split_heads(ex, i, projection(ex, i, xv, "key", NULL), tv, heads, kd, 1,
                                "key");
    const char *v = split_heads(ex, i, projection(ex, i, xv, "value", NULL), tv, heads, vd, 0,
                                "value");
    float *scale = arena_alloc(ex, sizeof *scale);
    if (!scale)
        return;
    *scale = (float)(1.0 / sqrt((double)kd));   /* the layer's */
    const char *scores = step(ex, i, "Mul", step(ex, i, "MatMul", q, k, "dot"),
                              add_initializer(ex, arena_printf(ex, "%s/scale", node->name), 0,
                                              NULL, scale), "scores");
    if (o.use_causal_mask) {
        float *mask = arena_alloc(ex, (size_t)(tq * tv) * sizeof *mask);
        if (!mask)
            return;
        for (int64_t r = 0; r < tq; r++)
            for (int64_t c = 0; c < tv; c++)
                mask[r * tv + c] = c <= r ? 0.0f : -1e30f;
        const int64_t dims[2] = {tq, tv};
        scores = step(ex, i, "Add", scores, add_initializer(ex, arena_printf(ex,
                      "%s/causal_mask", node->name), 2, dims, mask), "masked_scores");
    }
    const char *probs = unique_name(ex, arena_printf(ex, "%s/probabilities", node->name));
    attr_int(ex, add_node(ex, "Softmax", &scores, 1, probs), "axis", -1);
    const char *by_head = step(ex, i, "MatMul", probs, v, "context_by_head");
    const int64_t perm[4] = {0, 2, 1, 3}, merged[3] = {0, tq, heads * vd};
    const char *context = unique_name(ex, arena_printf(ex, "%s/context_heads", node->name));
    attr_ints(ex, add_node(ex, "Transpose", &by_head, 1, context), "perm", perm, 4);
    const char *out = layer_output(ex, i, CL);
    projection(ex, i, step(ex, i, "Reshape", context, int64_tensor(ex, i, "context_shape",
                                                                   merged, 3), "context"),
               "attention_output", out);
    activate(ex, i, CL, out);
}

/* Gather's rows of the table by the int32 ids (the graph's input). */
static void emit_embedding(exporter *ex, kiln_node i)
{
    const char *args[2] = {param_initializer(ex, i, "embeddings"),
                           get_value(ex, input_of(ex, i, 0), CL)};
    const char *out = layer_output(ex, i, CL);
    attr_int(ex, add_node(ex, "Gather", args, 2, out), "axis", 0);
    activate(ex, i, CL, out);
}

/* x + the table's first T rows (all of it when T is max_length). */
static void emit_position_embedding(exporter *ex, kiln_node i)
{
    const char *name = ex->m->nodes[i].name;
    const kiln_param_spec *spec;
    const char *table = param_initializer(ex, i, "embeddings");
    const int64_t length = ex->m->nodes[i].shape.dims[0];
    if (param(ex, i, "embeddings", &spec) && spec->shape.dims[0] != length) {
        int64_t *bounds = arena_alloc(ex, 3 * sizeof *bounds);
        if (!bounds)
            return;
        bounds[0] = 0;        /* starts */
        bounds[1] = length;   /* ends */
        bounds[2] = 0;        /* axes */
        const int64_t one = 1;
        const char *in[4] = {table, NULL, NULL, NULL};
        static const char *const what[3] = {"starts", "ends", "axes"};
        for (int k = 0; k < 3; k++)
            in[k + 1] = add_tensor(ex, arena_printf(ex, "%s/%s", name, what[k]),
                                   KILN_ONNX__TENSOR_PROTO__DATA_TYPE__INT64, sizeof *bounds, 1,
                                   &one, &bounds[k]);
        table = unique_name(ex, arena_printf(ex, "%s/rows", name));
        add_node(ex, "Slice", in, 4, table);
    }
    const char *args[2] = {get_value(ex, input_of(ex, i, 0), CL), table};
    const char *out = layer_output(ex, i, CL);
    add_node(ex, "Add", args, 2, out);
    activate(ex, i, CL, out);
}

typedef struct kind_export {
    const kiln_layer_ops *ops;
    void (*emit)(exporter *ex, kiln_node i);
} kind_export;

static const kind_export kinds[] = {
    {&kiln_layer_conv2d, emit_conv2d},
    {&kiln_layer_max_pooling2d, emit_max_pooling2d},
    {&kiln_layer_average_pooling2d, emit_average_pooling2d},
    {&kiln_layer_global_average_pooling2d, emit_global_average_pooling2d},
    {&kiln_layer_batch_norm, emit_batch_norm},
    {&kiln_layer_dense, emit_dense},
    {&kiln_layer_flatten, emit_flatten},
    {&kiln_layer_add, emit_add},
    {&kiln_layer_dot, emit_dot},
    {&kiln_layer_dropout, emit_identity},
    {&kiln_layer_activation, emit_identity},
    {&kiln_layer_layer_norm, emit_layer_norm},
    {&kiln_layer_reshape, emit_reshape},
    {&kiln_layer_concatenate, emit_concatenate},
    {&kiln_layer_multi_head_attention, emit_multi_head_attention},
    {&kiln_layer_embedding, emit_embedding},
    {&kiln_layer_position_embedding, emit_position_embedding},
};

static const kind_export *kind_of(const kiln_node_rec *node)
{
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (kinds[k].ops == node->ops)
            return &kinds[k];
    return NULL;
}

/* ---- the model ---------------------------------------------------------- */

/* A float (or, for ids, int32) tensor's type, (batch, kiln's dims...). */
static KilnOnnx__ValueInfoProto *graph_value(exporter *ex, const char *name,
                                             const kiln_shape *shape, int ints)
{
    KilnOnnx__ValueInfoProto *vi = arena_alloc(ex, sizeof *vi);
    KilnOnnx__TypeProto *type = arena_alloc(ex, sizeof *type);
    KilnOnnx__TypeProto__Tensor *tensor = arena_alloc(ex, sizeof *tensor);
    KilnOnnx__TensorShapeProto *tshape = arena_alloc(ex, sizeof *tshape);
    const size_t n = (size_t)shape->rank + 1;
    KilnOnnx__TensorShapeProto__Dimension *dims = arena_alloc(ex, n * sizeof *dims);
    KilnOnnx__TensorShapeProto__Dimension **list = arena_alloc(ex, n * sizeof *list);
    if (!vi || !type || !tensor || !tshape || !dims || !list)
        return NULL;
    for (size_t d = 0; d < n; d++) {
        kiln_onnx__tensor_shape_proto__dimension__init(&dims[d]);
        if (d == 0) {
            dims[d].value_case = KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dims[d].dim_param = "batch";
        } else {
            dims[d].value_case = KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dims[d].dim_value = shape->dims[d - 1];
        }
        list[d] = &dims[d];
    }
    kiln_onnx__tensor_shape_proto__init(tshape);
    tshape->n_dim = n;
    tshape->dim = list;
    kiln_onnx__type_proto__tensor__init(tensor);
    tensor->has_elem_type = 1;
    tensor->elem_type = ints ? KILN_ONNX__TENSOR_PROTO__DATA_TYPE__INT32
                             : KILN_ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tensor->shape = tshape;
    kiln_onnx__type_proto__init(type);
    type->value_case = KILN_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    type->tensor_type = tensor;
    kiln_onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    vi->type = type;
    return vi;
}

/* The graph of every node on the path to the outputs. */
static kiln_status build_graph(exporter *ex, KilnOnnx__GraphProto *g)
{
    kiln_model *m = ex->m;
    for (int32_t k = 0; k < m->n_inputs; k++)   /* graph inputs in the model's input order */
        set_value(ex, m->inputs[k], CL, unique_name(ex, m->nodes[m->inputs[k]].name));
    for (kiln_node i = 0; i < m->n_nodes && !ex->oom; i++)
        if (!kiln_node_is_input(m, i) && m->nodes[i].on_path)
            kind_of(&m->nodes[i])->emit(ex, i);
    KilnOnnx__ValueInfoProto **in = arena_alloc(ex, (size_t)m->n_inputs * sizeof *in);
    KilnOnnx__ValueInfoProto **out = arena_alloc(ex, (size_t)m->n_outputs * sizeof *out);
    if (ex->oom || !in || !out)
        return kiln_error_oom(m->ctx, "the ONNX graph", ex->oom_bytes);
    int all = 1;
    /* Graph outputs in the model's output order, each kiln's tensor named
     * as its layer. */
    for (int32_t k = 0; k < m->n_outputs && all; k++) {
        const kiln_node output = m->outputs[k];
        const char *result = get_value(ex, output, CL);
        if (result && strcmp(result, m->nodes[output].name) != 0) {
            const char *named = unique_name(ex, m->nodes[output].name);
            add_node(ex, "Identity", &result, 1, named);
            result = named;
        }
        out[k] = result ? graph_value(ex, result, &m->nodes[output].shape, 0) : NULL;
        all = out[k] != NULL;
    }
    for (int32_t k = 0; k < m->n_inputs; k++) {
        const kiln_node_rec *input = &m->nodes[m->inputs[k]];
        in[k] = graph_value(ex, input->name, &input->shape, input->ints);
        all = all && in[k];
    }
    if (!all || ex->oom)
        return kiln_error_oom(m->ctx, "the ONNX graph", ex->oom_bytes);
    kiln_onnx__graph_proto__init(g);
    g->name = "kiln";
    g->n_node = ex->n_nodes;
    g->node = ex->nodes;
    g->n_initializer = ex->n_inits;
    g->initializer = ex->inits;
    g->n_input = (size_t)m->n_inputs;
    g->input = in;
    g->n_output = (size_t)m->n_outputs;
    g->output = out;
    return KILN_OK;
}

/* protobuf-c packs through this: 64 KiB at a time into the file. */
typedef struct file_sink {
    ProtobufCBuffer base;
    int fd;
    int error;        /* errno of the first failed write */
    size_t used;
    unsigned char buf[1 << 16];
} file_sink;

static void sink_flush(file_sink *s)
{
    if (s->used && !s->error && !kiln_write_all(s->fd, s->buf, s->used))
        s->error = errno ? errno : EIO;
    s->used = 0;
}

static void sink_append(ProtobufCBuffer *buffer, size_t len, const uint8_t *data)
{
    file_sink *s = (file_sink *)buffer;
    if (s->used + len > sizeof s->buf)
        sink_flush(s);
    if (len > sizeof s->buf) {   /* weights: straight from their memory */
        if (!s->error && !kiln_write_all(s->fd, data, len))
            s->error = errno ? errno : EIO;
        return;
    }
    memcpy(s->buf + s->used, data, len);
    s->used += len;
}

/* Writes the packed model to a temporary file renamed over path. */
static kiln_status write_model(exporter *ex, const KilnOnnx__ModelProto *model, const char *path)
{
    kiln_context *ctx = ex->m->ctx;
    char tmp[4200];
    file_sink *sink = arena_alloc(ex, sizeof *sink);
    if (!sink)
        return kiln_error_oom(ctx, "an ONNX write buffer", sizeof *sink);
    const int fd = kiln_create_temporary(path, tmp, sizeof tmp);
    if (fd < 0)
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": cannot create %s: %s; %s is unchanged",
                          tmp, strerror(errno), path);
    sink->base.append = sink_append;
    sink->fd = fd;
    kiln_onnx__model_proto__pack_to_buffer(model, &sink->base);
    sink_flush(sink);
    int error = sink->error;
    if (!error && fsync(fd) != 0)
        error = errno;
    if (close(fd) != 0 && !error)
        error = errno;
    if (error) {
        unlink(tmp);
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": writing %s failed: %s; %s is unchanged",
                          tmp, strerror(error), path);
    }
    if (rename(tmp, path) != 0) {
        error = errno;
        unlink(tmp);
        return kiln_error(ctx, KILN_ERROR_IO, CALL ": renaming %s to %s failed: %s", tmp, path,
                          strerror(error));
    }
    kiln_sync_folder_of(path);
    return KILN_OK;
}

static kiln_status export_entered(kiln_model *m, const char *path)
{
    kiln_context *ctx = m->ctx;
    if (!m->compiled)
        return kiln_error(ctx, KILN_ERROR_STATE, CALL ": compile the model first");
    for (kiln_node i = 0; i < m->n_nodes; i++) {
        const kiln_node_rec *node = &m->nodes[i];
        if (!kiln_node_is_input(m, i) && node->on_path && !kind_of(node))
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": layer '%s' (%s) has no ONNX "
                              "form; %s was not written", node->name, node->ops->kind, path);
        if (node->on_path && !activation_known(node->activation))
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": layer '%s' has activation "
                              "%d, which has no ONNX form here; %s was not written", node->name,
                              (int)node->activation, path);
    }
    exporter ex = {.m = m};
    kiln_status st = KILN_OK;
    float *flat = kiln_calloc(ctx, m->n_param_floats ? m->n_param_floats : 1, sizeof(float));
    ex.values = kiln_calloc(ctx, (size_t)m->n_nodes, sizeof *ex.values);
    if (!flat || !ex.values) {
        st = kiln_error_oom(ctx, "a parameter copy", m->n_param_floats * sizeof(float));
        goto fail;
    }
    for (kiln_node i = 0; i < m->n_nodes; i++)
        ex.values[i].rep = i;
    st = m->strategy->get_params(m->strategy_impl, flat);
    if (st != KILN_OK)
        goto fail;
    ex.flat = flat;
    KilnOnnx__GraphProto graph;
    st = build_graph(&ex, &graph);
    if (st != KILN_OK)
        goto fail;
    KilnOnnx__OperatorSetIdProto opset = KILN_ONNX__OPERATOR_SET_ID_PROTO__INIT;
    KilnOnnx__OperatorSetIdProto *opsets[1] = {&opset};
    opset.domain = "";
    opset.has_version = 1;
    opset.version = OPSET;
    KilnOnnx__ModelProto model = KILN_ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = "kiln";
    model.producer_version = (char *)kiln_version();
    model.graph = &graph;
    /* Protobuf parsers refuse messages of 2 GiB and more. */
    const size_t size = kiln_onnx__model_proto__get_packed_size(&model);
    if (size > (size_t)INT32_MAX) {
        st = kiln_error(ctx, KILN_ERROR_UNSUPPORTED, CALL ": the model takes %zu bytes as ONNX; "
                        "a protobuf file holds less than 2 GiB and kiln writes no external "
                        "data; %s was not written", size, path);
        goto fail;
    }
    st = write_model(&ex, &model, path);
fail:
    arena_free(&ex);
    kiln_free(ctx, ex.values);
    kiln_free(ctx, flat);
    return st;
}

#endif /* KILN_HAVE_ONNX */

kiln_status kiln_model_export_onnx(const kiln_model *model, const char *path)
{
    kiln_model *m = (kiln_model *)model;   /* entered, read, not changed */
    kiln_status st = kiln_model_enter(m, "kiln_model_export_onnx");
    if (st != KILN_OK)
        return st;
    if (!path || !*path) {
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_export_onnx: path is "
                        "%s", path ? "empty" : "NULL");
    } else {
#if KILN_HAVE_ONNX
        st = export_entered(m, path);
#else
        st = kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_export_onnx: this kiln was "
                        "built without ONNX export (meson feature 'onnx': it needs libprotobuf-c, "
                        "protoc-c and ONNX's onnx.proto; on Debian libprotobuf-c-dev, "
                        "protobuf-c-compiler and python3-onnx); %s was not written", path);
#endif
    }
    kiln_model_leave(m);
    return st;
}
