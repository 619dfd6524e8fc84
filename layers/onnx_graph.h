/* Private: the ONNX inference graph as layer kinds write it. Each kind's
 * export_onnx op adds the nodes and initializers of its layer here;
 * runtime/saving/onnx_export.c walks the model, then encodes the graph
 * with ONNX's own schema. Nothing here knows protobuf.
 *
 * kiln's tensors are channels-last (NHWC); ONNX's Conv, pooling and
 * BatchNormalization are channels-first. Each layer's output is kept in
 * either layout or both, and a Transpose is added only where an op needs
 * the layout its input does not have yet, once per value: a run of
 * convolutions costs one Transpose in and one out.
 *
 * Everything comes from one arena; a failed allocation sets `oom` and the
 * calls after it return NULL, so an export op needs no checks of its own. */
#ifndef KILN_LAYERS_ONNX_GRAPH_H
#define KILN_LAYERS_ONNX_GRAPH_H

#include "base/host.h"
#include "layers/layer.h"

/* Layouts of a value. */
enum { KILN_ONNX_CL, KILN_ONNX_CF };

/* ONNX's TensorProto.DataType numbers. */
enum { KILN_ONNX_FLOAT = 1, KILN_ONNX_INT32 = 6, KILN_ONNX_INT64 = 7 };

typedef enum kiln_onnx_attr_kind {
    KILN_ONNX_ATTR_INT,
    KILN_ONNX_ATTR_FLOAT,
    KILN_ONNX_ATTR_INTS
} kiln_onnx_attr_kind;

typedef struct kiln_onnx_attr {
    struct kiln_onnx_attr *next;
    const char *name;
    kiln_onnx_attr_kind kind;
    int64_t i;
    float f;
    const int64_t *ints;
    size_t n_ints;
} kiln_onnx_attr;

typedef struct kiln_onnx_node {
    const char *op;
    const char **inputs;
    size_t n_inputs;
    const char *output;
    kiln_onnx_attr *attrs;     /* in the order added */
    size_t n_attrs;
} kiln_onnx_node;

/* An initializer: `data` holds count(dims) elements of `width` bytes,
 * little-endian whatever the host. */
typedef struct kiln_onnx_tensor {
    const char *name;
    int32_t type;
    size_t width;
    int rank;
    const int64_t *dims;
    const void *data;
} kiln_onnx_tensor;

/* One node of the model as its export op sees it. */
typedef struct kiln_onnx_layer {
    const char *name;
    const kiln_layer_ops *ops;
    const void *config;
    kiln_shape shape;                      /* output, batch not counted */
    kiln_activation activation;            /* applied after the layer */
    int32_t inputs[KILN_MAX_INPUTS];       /* node indices */
    int n_inputs;
    const kiln_param_spec *params;
    int n_params;
    const float *param_data[KILN_MAX_PARAMS];   /* host copies, kiln's layout */
    /* Each parameter's own name (an imported model's initializer names);
     * NULL: "<layer>/<param>". */
    const char *param_names[KILN_MAX_PARAMS];
    /* Imported from a transposed tensor (Gemm's transB weight): written
     * back transposed. */
    unsigned char param_transposed[KILN_MAX_PARAMS];
} kiln_onnx_layer;

typedef struct kiln_onnx_block kiln_onnx_block;

/* A value of the graph: its name in each layout it has been made in (NULL:
 * not yet), through `rep`, the node whose value it is (a layer that
 * changes nothing, like Dropout, shares its input's). */
typedef struct kiln_onnx_value {
    const char *name[2];
    int native;            /* the layout its op produced */
    int32_t rep;
} kiln_onnx_value;

#define KILN_ONNX_MAX_CONSTANTS 16

typedef struct kiln_onnx_graph {
    kiln_host *host;
    kiln_onnx_block *arena;
    int oom;
    size_t oom_bytes;      /* the allocation that failed */
    const kiln_onnx_layer *layers;   /* every node of the model */
    kiln_onnx_value *values;         /* one per node */
    int32_t n_layers;
    kiln_onnx_node **nodes;
    size_t n_nodes, cap_nodes;
    kiln_onnx_tensor **inits;
    size_t n_inits, cap_inits;
    const char **names;    /* every value name, kept unique */
    size_t n_names, cap_names;
    struct kiln_onnx_constant {
        const char *what, *name;
    } consts[KILN_ONNX_MAX_CONSTANTS];
    size_t n_consts;
} kiln_onnx_graph;

/* Sets up `g` over the model's n layers (values start as their own). */
kiln_status kiln_onnx_graph_init(kiln_onnx_graph *g, kiln_host *host,
                                 const kiln_onnx_layer *layers, int32_t n);
void kiln_onnx_graph_free(kiln_onnx_graph *g);

/* Arena memory (zeroed) and text. */
void *kiln_onnx_alloc(kiln_onnx_graph *g, size_t size);
char *kiln_onnx_printf(kiln_onnx_graph *g, const char *fmt, ...) KILN_PRINTF(2, 3);
/* `base` if no value has that name yet, else base_1, base_2, ... (a layer
 * a user named "conv/nchw" must not meet the transpose of a layer "conv"). */
const char *kiln_onnx_unique_name(kiln_onnx_graph *g, const char *base);

/* A node of `op` on in[0..n_in) writing `out`; NULL when out is. */
kiln_onnx_node *kiln_onnx_add_node(kiln_onnx_graph *g, const char *op, const char *const *in,
                                   size_t n_in, const char *out);
void kiln_onnx_attr_int(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name, int64_t v);
void kiln_onnx_attr_float(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name, float v);
void kiln_onnx_attr_ints(kiln_onnx_graph *g, kiln_onnx_node *nd, const char *name,
                         const int64_t *v, size_t n);

/* An initializer (`data` must outlive the export); returns its name. */
const char *kiln_onnx_add_tensor(kiln_onnx_graph *g, const char *name, int32_t type,
                                 size_t width, int rank, const int64_t *dims, const void *data);
const char *kiln_onnx_add_floats(kiln_onnx_graph *g, const char *name, int rank,
                                 const int64_t *dims, const float *data);
/* An int64 vector named "<layer>/<what>" (shapes, axes), copied. */
const char *kiln_onnx_int64s(kiln_onnx_graph *g, int32_t i, const char *what, const int64_t *v,
                             int64_t n);
/* A float scalar named "kiln/<what>", one initializer for every node. */
const char *kiln_onnx_constant(kiln_onnx_graph *g, const char *what, float v);

/* Layer i's parameter `name` (host copy; NULL if it has none) and its spec. */
const float *kiln_onnx_param(const kiln_onnx_graph *g, int32_t i, const char *name,
                             const kiln_param_spec **spec);
/* The name layer i's parameter `name` is written under: its own, or
 * "<layer>/<name>". */
const char *kiln_onnx_param_name(kiln_onnx_graph *g, int32_t i, const char *name);
/* The parameter as an initializer under kiln_onnx_param_name, kiln's shape. */
const char *kiln_onnx_param_initializer(kiln_onnx_graph *g, int32_t i, const char *name);

/* Layer i's input k: its node, its shape, and its value in `layout`
 * (transposed from the other once if need be). */
int32_t kiln_onnx_input(const kiln_onnx_graph *g, int32_t i, int k);
const kiln_shape *kiln_onnx_input_shape(const kiln_onnx_graph *g, int32_t i, int k);
const char *kiln_onnx_input_value(kiln_onnx_graph *g, int32_t i, int k, int layout);
/* The layout input k's value was made in. */
int kiln_onnx_input_layout(const kiln_onnx_graph *g, int32_t i, int k);
/* Node i's value in `layout`, transposed from the other once if need be. */
const char *kiln_onnx_value_in(kiln_onnx_graph *g, int32_t i, int layout);
/* Records `name` as node i's value, made in `layout`. */
void kiln_onnx_set_value(kiln_onnx_graph *g, int32_t i, int layout, const char *name);

/* Where layer i writes its output: its final name, or a name for the
 * pre-activation value when the node's activation follows. */
const char *kiln_onnx_output(kiln_onnx_graph *g, int32_t i, int layout);
/* The node's activation on `in` (its layer's output, in `layout`), then
 * `in` or the activation's result recorded as the node's value. */
void kiln_onnx_activate(kiln_onnx_graph *g, int32_t i, int layout, const char *in);
/* Nonzero when kiln_onnx_activate can write `act`. */
int kiln_onnx_activation_known(kiln_activation act);
/* A node of `op` on a (and b) writing "<layer>/<what>": the steps of a
 * layer that ONNX spells as several ops. */
const char *kiln_onnx_step(kiln_onnx_graph *g, int32_t i, const char *op, const char *a,
                           const char *b, const char *what);
/* Layer i shares its input's value (Dropout in inference, a linear
 * Activation), or applies its activation to it. */
void kiln_onnx_identity(kiln_onnx_graph *g, int32_t i);
/* A window over H and W as ONNX's kernel_shape, strides and pads: the
 * (top, left, bottom, right) pads its layer inferred, whatever its padding
 * ('same' as the pads it comes to). */
void kiln_onnx_window_attrs(kiln_onnx_graph *g, kiln_onnx_node *nd, const int32_t *size,
                            const int32_t *strides, const int32_t *pads);

#endif
