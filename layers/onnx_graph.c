/* The ONNX graph the layer kinds write (onnx_graph.h). */
#include "layers/onnx_graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct kiln_onnx_block {
    kiln_onnx_block *next;
    size_t used, size;
    unsigned char data[];
};

/* ---- memory ------------------------------------------------------------- */

void *kiln_onnx_alloc(kiln_onnx_graph *g, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    kiln_onnx_block *b = g->arena;
    if (!b || b->size - b->used < size) {
        const size_t want = size > (1u << 16) ? size : (1u << 16);
        b = kiln_host_alloc(g->host, sizeof *b + want);
        if (!b) {
            g->oom = 1;
            g->oom_bytes = sizeof *b + want;
            return NULL;
        }
        b->size = want;
        b->used = 0;
        b->next = g->arena;
        g->arena = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

kiln_status kiln_onnx_graph_init(kiln_onnx_graph *g, kiln_host *host,
                                 const kiln_onnx_layer *layers, int32_t n)
{
    memset(g, 0, sizeof *g);
    g->host = host;
    g->layers = layers;
    g->n_layers = n;
    g->values = kiln_onnx_alloc(g, (size_t)(n ? n : 1) * sizeof *g->values);
    if (!g->values)
        return KILN_ERROR_OUT_OF_MEMORY;
    for (int32_t i = 0; i < n; i++)
        g->values[i].rep = i;
    return KILN_OK;
}

void kiln_onnx_graph_free(kiln_onnx_graph *g)
{
    for (kiln_onnx_block *b = g->arena, *next; b; b = next) {
        next = b->next;
        kiln_host_free(g->host, b);
    }
    g->arena = NULL;
}

/* Appends item to a growing array of pointers. */
static void push(kiln_onnx_graph *g, void ***array, size_t *n, size_t *cap, void *item)
{
    if (!item)
        return;   /* its allocation failed: g->oom says so */
    if (*n == *cap) {
        const size_t grown = *cap ? 2 * *cap : 64;
        void **bigger = kiln_onnx_alloc(g, grown * sizeof *bigger);
        if (!bigger)
            return;
        if (*n)
            memcpy(bigger, *array, *n * sizeof *bigger);
        *array = bigger;
        *cap = grown;
    }
    (*array)[(*n)++] = item;
}

char *kiln_onnx_printf(kiln_onnx_graph *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? kiln_onnx_alloc(g, (size_t)n + 1) : NULL;
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

const char *kiln_onnx_unique_name(kiln_onnx_graph *g, const char *base)
{
    const char *name = base;
    for (int k = 1; name; k++) {
        size_t i = 0;
        while (i < g->n_names && strcmp(g->names[i], name) != 0)
            i++;
        if (i == g->n_names)
            break;
        name = kiln_onnx_printf(g, "%s_%d", base, k);
    }
    push(g, (void ***)&g->names, &g->n_names, &g->cap_names, (void *)name);
    return name;
}

/* ---- nodes and initializers ---------------------------------------------- */

kiln_onnx_node *kiln_onnx_add_node(kiln_onnx_graph *g, const char *op, const char *const *in,
                                   size_t n_in, const char *out)
{
    kiln_onnx_node *nd = kiln_onnx_alloc(g, sizeof *nd);
    const char **inputs = kiln_onnx_alloc(g, (n_in ? n_in : 1) * sizeof *inputs);
    if (!nd || !inputs || !out)
        return NULL;
    for (size_t k = 0; k < n_in; k++)
        inputs[k] = in[k];
    nd->op = op;
    nd->inputs = inputs;
    nd->n_inputs = n_in;
    nd->output = out;
    push(g, (void ***)&g->nodes, &g->n_nodes, &g->cap_nodes, nd);
    return g->oom ? NULL : nd;
}

static kiln_onnx_attr *add_attr(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name,
                                kiln_onnx_attr_kind kind)
{
    kiln_onnx_attr *a = nd ? kiln_onnx_alloc(g, sizeof *a) : NULL;
    if (!a)
        return NULL;
    a->name = name;
    a->kind = kind;
    kiln_onnx_attr **last = &nd->attrs;
    while (*last)
        last = &(*last)->next;
    *last = a;
    nd->n_attrs++;
    return a;
}

void kiln_onnx_attr_int(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name, int64_t v)
{
    kiln_onnx_attr *a = add_attr(g, nd, name, KILN_ONNX_ATTR_INT);
    if (a)
        a->i = v;
}

void kiln_onnx_attr_float(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name, float v)
{
    kiln_onnx_attr *a = add_attr(g, nd, name, KILN_ONNX_ATTR_FLOAT);
    if (a)
        a->f = v;
}

void kiln_onnx_attr_ints(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name,
                         const int64_t *v, size_t n)
{
    kiln_onnx_attr *a = add_attr(g, nd, name, KILN_ONNX_ATTR_INTS);
    int64_t *copy = a ? kiln_onnx_alloc(g, n * sizeof *copy) : NULL;
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

const char *kiln_onnx_add_tensor(kiln_onnx_graph *g, const char *name, int32_t type,
                                 size_t width, int rank, const int64_t *dims, const void *data)
{
    kiln_onnx_tensor *t = kiln_onnx_alloc(g, sizeof *t);
    int64_t *d = kiln_onnx_alloc(g, (size_t)(rank ? rank : 1) * sizeof *d);
    name = kiln_onnx_unique_name(g, name);
    if (!t || !d || !name)
        return NULL;
    size_t count = 1;
    for (int k = 0; k < rank; k++)
        count *= (size_t)(d[k] = dims[k]);
    /* ONNX's raw data is little-endian whatever the host. */
    const unsigned char *bytes = data;
    if (!host_is_little_endian()) {
        unsigned char *le = kiln_onnx_alloc(g, count * width);
        if (!le)
            return NULL;
        for (size_t k = 0; k < count * width; k++)
            le[k] = bytes[k - k % width + width - 1 - k % width];
        bytes = le;
    }
    t->name = name;
    t->type = type;
    t->width = width;
    t->rank = rank;
    t->dims = d;
    t->data = bytes;
    push(g, (void ***)&g->inits, &g->n_inits, &g->cap_inits, t);
    return name;
}

const char *kiln_onnx_add_floats(kiln_onnx_graph *g, const char *name, int rank,
                                 const int64_t *dims, const float *data)
{
    return kiln_onnx_add_tensor(g, name, KILN_ONNX_FLOAT, sizeof *data, rank, dims, data);
}

const char *kiln_onnx_int64s(kiln_onnx_graph *g, int32_t i, const char *what, const int64_t *v,
                             int64_t n)
{
    int64_t *data = kiln_onnx_alloc(g, (size_t)n * sizeof *data);
    if (!data)
        return NULL;
    memcpy(data, v, (size_t)n * sizeof *data);
    return kiln_onnx_add_tensor(g, kiln_onnx_printf(g, "%s/%s", g->layers[i].name, what),
                                KILN_ONNX_INT64, sizeof *data, 1, &n, data);
}

const char *kiln_onnx_constant(kiln_onnx_graph *g, const char *what, float v)
{
    for (size_t k = 0; k < g->n_consts; k++)
        if (strcmp(g->consts[k].what, what) == 0)
            return g->consts[k].name;
    float *data = kiln_onnx_alloc(g, sizeof *data);
    if (!data)
        return NULL;
    *data = v;
    const char *name = kiln_onnx_add_floats(g, kiln_onnx_printf(g, "kiln/%s", what), 0, NULL,
                                            data);
    if (name && g->n_consts < KILN_ONNX_MAX_CONSTANTS)
        g->consts[g->n_consts++] = (struct kiln_onnx_constant){.what = what, .name = name};
    return name;
}

const float *kiln_onnx_param(const kiln_onnx_graph *g, int32_t i, const char *name,
                             const kiln_param_spec **spec)
{
    const kiln_onnx_layer *l = &g->layers[i];
    for (int p = 0; p < l->n_params; p++)
        if (strcmp(l->params[p].name, name) == 0) {
            if (spec)
                *spec = &l->params[p];
            return l->param_data[p];
        }
    return NULL;
}

const char *kiln_onnx_param_name(kiln_onnx_graph *g, int32_t i, const char *name)
{
    const kiln_onnx_layer *l = &g->layers[i];
    for (int p = 0; p < l->n_params; p++)
        if (strcmp(l->params[p].name, name) == 0 && l->param_names[p])
            return l->param_names[p];
    return kiln_onnx_printf(g, "%s/%s", l->name, name);
}

const char *kiln_onnx_param_initializer(kiln_onnx_graph *g, int32_t i, const char *name)
{
    const kiln_param_spec *spec;
    const float *data = kiln_onnx_param(g, i, name, &spec);
    if (!data)
        return NULL;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < spec->shape.rank; d++)
        dims[d] = spec->shape.dims[d];
    return kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, name), spec->shape.rank, dims,
                                data);
}

/* ---- values and layouts ---------------------------------------------------- */

static int32_t sample_rank(const kiln_onnx_graph *g, int32_t i)
{
    return g->layers[i].shape.rank;
}

/* The final name of node i's value in `layout`: its own name channels-last
 * (what kiln calls the tensor), "<name>/nchw" channels-first. */
static const char *final_name(kiln_onnx_graph *g, int32_t i, int layout)
{
    const char *name = g->layers[i].name;
    if (layout == KILN_ONNX_CF && sample_rank(g, i) > 1)
        return kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/nchw", name));
    return kiln_onnx_unique_name(g, name);
}

void kiln_onnx_set_value(kiln_onnx_graph *g, int32_t i, int layout, const char *name)
{
    kiln_onnx_value *v = &g->values[i];
    v->rep = i;
    v->native = layout;
    v->name[layout] = name;
    /* (batch, C): both layouts are one. */
    v->name[!layout] = sample_rank(g, i) == 1 ? name : NULL;
}

const char *kiln_onnx_value_in(kiln_onnx_graph *g, int32_t i, int layout)
{
    const int32_t r = g->values[i].rep;
    kiln_onnx_value *v = &g->values[r];
    if (v->name[layout] || !v->name[!layout])
        return v->name[layout];
    const int32_t rank = sample_rank(g, r);
    int64_t perm[KILN_MAX_RANK + 1];
    perm[0] = 0;
    for (int32_t d = 1; d <= rank; d++)
        perm[d] = layout == KILN_ONNX_CF ? (d == 1 ? rank : d - 1)
                                         : (d == rank ? 1 : d + 1);
    const char *out = final_name(g, r, layout);
    kiln_onnx_node *nd = kiln_onnx_add_node(g, "Transpose", &v->name[!layout], 1, out);
    kiln_onnx_attr_ints(g, nd, "perm", perm, (size_t)rank + 1);
    if (nd)
        v->name[layout] = out;
    return v->name[layout];
}

int32_t kiln_onnx_input(const kiln_onnx_graph *g, int32_t i, int k)
{
    return g->layers[i].inputs[k];
}

const kiln_shape *kiln_onnx_input_shape(const kiln_onnx_graph *g, int32_t i, int k)
{
    return &g->layers[kiln_onnx_input(g, i, k)].shape;
}

const char *kiln_onnx_input_value(kiln_onnx_graph *g, int32_t i, int k, int layout)
{
    return kiln_onnx_value_in(g, kiln_onnx_input(g, i, k), layout);
}

int kiln_onnx_input_layout(const kiln_onnx_graph *g, int32_t i, int k)
{
    return g->values[g->values[kiln_onnx_input(g, i, k)].rep].native;
}

const char *kiln_onnx_output(kiln_onnx_graph *g, int32_t i, int layout)
{
    if (g->layers[i].activation == KILN_ACTIVATION_LINEAR)
        return final_name(g, i, layout);
    const char *name = g->layers[i].name;
    if (layout == KILN_ONNX_CF && sample_rank(g, i) > 1)
        return kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/nchw_preactivation", name));
    return kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/preactivation", name));
}

const char *kiln_onnx_step(kiln_onnx_graph *g, int32_t i, const char *op, const char *a,
                           const char *b, const char *what)
{
    const char *in[2] = {a, b};
    const char *out = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s", g->layers[i].name,
                                                                what));
    kiln_onnx_add_node(g, op, in, b ? 2 : 1, out);
    return out;
}

int kiln_onnx_activation_known(kiln_activation act)
{
    switch (act) {
    case KILN_ACTIVATION_LINEAR: case KILN_ACTIVATION_RELU: case KILN_ACTIVATION_SIGMOID:
    case KILN_ACTIVATION_TANH: case KILN_ACTIVATION_SOFTMAX: case KILN_ACTIVATION_GELU:
    case KILN_ACTIVATION_GELU_TANH: case KILN_ACTIVATION_LEAKY_RELU: case KILN_ACTIVATION_SILU:
    case KILN_ACTIVATION_RELU6: case KILN_ACTIVATION_LOG_SOFTMAX:
    case KILN_ACTIVATION_HARD_SIGMOID: case KILN_ACTIVATION_HARD_SWISH:
        return 1;
    }
    return 0;
}

/* relu6(x + 3) / 6 as ONNX's HardSigmoid. */
static void hard_sigmoid(kiln_onnx_graph *g, const char *in, const char *out)
{
    kiln_onnx_node *nd = kiln_onnx_add_node(g, "HardSigmoid", &in, 1, out);
    kiln_onnx_attr_float(g, nd, "alpha", 1.0f / 6.0f);
    kiln_onnx_attr_float(g, nd, "beta", 0.5f);
}

/* In the order of kiln's arithmetic (opencl/kernels/prelude.cl); opset 13
 * has no Gelu. */
void kiln_onnx_activate(kiln_onnx_graph *g, int32_t i, int layout, const char *in)
{
    const kiln_activation act = g->layers[i].activation;
    if (act == KILN_ACTIVATION_LINEAR) {
        kiln_onnx_set_value(g, i, layout, in);
        return;
    }
    const char *out = final_name(g, i, layout);
    const char *args[2] = {in, NULL};
    const char *op = NULL;
    kiln_onnx_node *nd = NULL;
    switch (act) {
    case KILN_ACTIVATION_RELU: op = "Relu"; break;
    case KILN_ACTIVATION_SIGMOID: op = "Sigmoid"; break;
    case KILN_ACTIVATION_TANH: op = "Tanh"; break;
    case KILN_ACTIVATION_SOFTMAX: case KILN_ACTIVATION_LOG_SOFTMAX:
        /* Over the last axis, the channels: axis 1 of NCHW. */
        nd = kiln_onnx_add_node(g, act == KILN_ACTIVATION_SOFTMAX ? "Softmax" : "LogSoftmax",
                                args, 1, out);
        kiln_onnx_attr_int(g, nd, "axis",
                           layout == KILN_ONNX_CF && sample_rank(g, i) > 1 ? 1 : -1);
        break;
    case KILN_ACTIVATION_LEAKY_RELU:
        kiln_onnx_attr_float(g, kiln_onnx_add_node(g, "LeakyRelu", args, 1, out), "alpha",
                             0.2f);
        break;
    case KILN_ACTIVATION_RELU6: {   /* Clip's bounds are inputs since opset 11 */
        const char *clip[3] = {in, kiln_onnx_constant(g, "zero", 0.0f),
                               kiln_onnx_constant(g, "six", 6.0f)};
        kiln_onnx_add_node(g, "Clip", clip, 3, out);
        break;
    }
    case KILN_ACTIVATION_HARD_SIGMOID:
        hard_sigmoid(g, in, out);
        break;
    case KILN_ACTIVATION_HARD_SWISH:   /* opset 13 has no HardSwish: x HardSigmoid(x) */
        op = "Mul";
        args[1] = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/hard_sigmoid",
                                                            g->layers[i].name));
        hard_sigmoid(g, in, args[1]);
        break;
    case KILN_ACTIVATION_SILU:   /* x sigmoid(x) */
        op = "Mul";
        args[1] = kiln_onnx_step(g, i, "Sigmoid", in, NULL, "sigmoid");
        break;
    case KILN_ACTIVATION_GELU: {   /* 0.5 x (1 + erf(x / sqrt 2)) */
        const char *scaled = kiln_onnx_step(g, i, "Mul", in,
                                            kiln_onnx_constant(g, "sqrt_half",
                                                               0.70710678118654752f),
                                            "gelu_scaled");
        const char *e = kiln_onnx_step(g, i, "Erf", scaled, NULL, "gelu_erf");
        op = "Mul";
        args[0] = kiln_onnx_step(g, i, "Mul", in, kiln_onnx_constant(g, "half", 0.5f),
                                 "gelu_half");
        args[1] = kiln_onnx_step(g, i, "Add", e, kiln_onnx_constant(g, "one", 1.0f),
                                 "gelu_cdf");
        break;
    }
    case KILN_ACTIVATION_GELU_TANH: {   /* x sigmoid(2 sqrt(2 / pi) (x + 0.044715 x^3)) */
        const char *cube = kiln_onnx_step(g, i, "Mul",
                                          kiln_onnx_step(g, i, "Mul", in, in, "gelu_square"),
                                          in, "gelu_cube");
        const char *cubic = kiln_onnx_step(g, i, "Mul", cube,
                                           kiln_onnx_constant(g, "gelu_cubic", 0.044715f),
                                           "gelu_cubic_term");
        const char *u = kiln_onnx_step(g, i, "Add", in, cubic, "gelu_inner");
        const char *u2 = kiln_onnx_step(g, i, "Mul", u,
                                        kiln_onnx_constant(g, "two_sqrt_2_over_pi",
                                                           2.0f * 0.79788456080286536f),
                                        "gelu_argument");
        op = "Mul";
        args[1] = kiln_onnx_step(g, i, "Sigmoid", u2, NULL, "gelu_sigmoid");
        break;
    }
    default:   /* kiln_onnx_activation_known refused it before */
        break;
    }
    if (op)
        kiln_onnx_add_node(g, op, args, args[1] ? 2 : 1, out);
    kiln_onnx_set_value(g, i, layout, out);
}

void kiln_onnx_identity(kiln_onnx_graph *g, int32_t i)
{
    const int32_t r = g->values[kiln_onnx_input(g, i, 0)].rep;
    const kiln_onnx_value *v = &g->values[r];
    if (g->layers[i].activation == KILN_ACTIVATION_LINEAR)
        g->values[i].rep = r;
    else
        kiln_onnx_activate(g, i, v->native, v->name[v->native]);
}

void kiln_onnx_window_attrs(kiln_onnx_graph *g, kiln_onnx_node *nd, const int32_t *size,
                            const int32_t *strides, const int32_t *pads)
{
    const int64_t kernel[2] = {size[0], size[1]}, step[2] = {strides[0], strides[1]};
    const int64_t all[4] = {pads[0], pads[1], pads[2], pads[3]};
    kiln_onnx_attr_ints(g, nd, "kernel_shape", kernel, 2);
    kiln_onnx_attr_ints(g, nd, "strides", step, 2);
    kiln_onnx_attr_ints(g, nd, "pads", all, 4);
}
