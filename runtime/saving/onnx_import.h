/* Private: the ONNX importer's shared state (runtime/saving/onnx_import*.c).
 * onnx_import.c reads the file and walks the graph in order;
 * onnx_import_tensor.c decodes initializers (inline and external data);
 * onnx_import_fold.c folds integer constants (a Pad's computed pads);
 * onnx_import_patterns.c finds the chains of ops that are one layer;
 * onnx_import_attention.c imports nn.MultiheadAttention's exported block;
 * onnx_import_ops.c maps each op onto layers, through the layer kinds'
 * import_onnx ops where an op is one kind, and keeps track of layouts. */
#ifndef KILN_RUNTIME_SAVING_ONNX_IMPORT_H
#define KILN_RUNTIME_SAVING_ONNX_IMPORT_H

#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"
#include "runtime/model/model.h"

/* The generated header's oneofs are anonymous unions (C11). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "kiln_onnx.pb-c.h"
#pragma GCC diagnostic pop

#define KILN_IMPORT_CALL "kiln_model_import_onnx"

/* TensorProto.DataType BOOL and DOUBLE (onnx_graph.h names the others). */
#define KILN_ONNX_BOOL 9
#define KILN_ONNX_DOUBLE 11

/* A value of the graph: computed by a layer, or a constant (initializer,
 * Constant, or the copy an Identity makes of one). */
typedef struct kiln_import_value {
    const char *name;
    int computed;
    kiln_node node;            /* computed: the layer whose output it is */
    int cl;                    /* computed 4-D value that kiln holds as (H, W, C) */
    kiln_node converted;       /* its permute to the other layout, once made (-1: none) */
    int rank;
    int64_t dims[KILN_MAX_RANK + 1];   /* ONNX's; a computed value's dims[0] is the batch */
    const float *f;            /* a float constant's values */
    const int64_t *ints;       /* an integer constant's values */
    const char *param_of;      /* a constant: the node that took it as a parameter */
    /* A 2-D constant folded from Transpose(W): W's name. A layer that
     * takes it as its kernel names the parameter W and exports it
     * transposed again, as a Gemm's transB weight (PyTorch writes a Linear
     * on a 3-D or 4-D input as MatMul(x, Transpose(W))). */
    const char *transpose_of;
    /* A constant from a Constant node (not an initializer): a binary op's
     * parameter of it is not trained. */
    int constant_node;
    int uses;                  /* nodes (and graph outputs) that read it */
    /* A bool graph input, held as floats 0 and 1: only nn.MultiheadAttention's
     * key_padding_mask may read it (onnx_import_attention.c). */
    int boolean;
    /* A Pad's output folded into its one reader (a Conv or AveragePool):
     * `node`'s value, and the zeros (top, left, bottom, right) the reader
     * adds to its own pads. */
    int padded;
    int32_t pads[4];
} kiln_import_value;

typedef struct kiln_importer {
    kiln_context *ctx;
    kiln_model *m;
    kiln_onnx_graph mem;       /* an arena for everything the import allocates */
    const char *folder;        /* external data's (NULL: refused) */
    const kiln_import_options *options;
    int opset;
    const KilnOnnx__GraphProto *g;
    kiln_import_value *values;
    size_t n_values, cap_values;
    char *skip;                /* per node: joined into an earlier one (MatMul's Add) */
    /* Per node: the one op a pattern's chain that starts there is imported
     * as (onnx_import_patterns.c), or NULL. */
    const KilnOnnx__NodeProto **replace;
    /* Why the Transpose being imported is not nn.MultiheadAttention's
     * block, where it nearly is (onnx_import_attention.c), or NULL. */
    const char *attention_miss;
} kiln_importer;

/* The value named `name`, or NULL. */
kiln_import_value *kiln_import_find(kiln_importer *im, const char *name);
/* A new value (NULL after an allocation failure, which mem.oom records). */
kiln_import_value *kiln_import_add_value(kiln_importer *im, const char *name);

/* Initializer t as a constant value (floats or integers); `node` names the
 * Constant node it came from (NULL: an initializer). */
kiln_status kiln_import_tensor(kiln_importer *im, const KilnOnnx__TensorProto *t,
                               const char *name, const char *node);

/* Node k of the graph, in order (its inputs known). */
kiln_status kiln_import_node(kiln_importer *im, size_t k);

/* The node's name for messages and layers: its own, or its first output's. */
const char *kiln_import_node_name(const KilnOnnx__NodeProto *n);

/* Integer constants folded (onnx_import_fold.c): the pads arithmetic
 * torch.onnx.export writes for nn.ZeroPad2d. */
kiln_status kiln_import_constant_of_shape(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_slice(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_transpose(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_reshape_constant(kiln_importer *im, const KilnOnnx__NodeProto *n);
int kiln_import_all_ints(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_arithmetic(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_equal_where(kiln_importer *im, const KilnOnnx__NodeProto *n);

/* Shape ops on computed values (onnx_import_shape.c). */
kiln_status kiln_import_squeeze(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_unsqueeze_value(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_slice_value(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_gather_value(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_split(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_expand(kiln_importer *im, const KilnOnnx__NodeProto *n);

/* What the op handlers share (onnx_import_ops.c): the computed value that
 * is node n's input k (refused when it is a constant or missing); v's
 * layer in channels-last (cl 1) or ONNX's order, a permute made once; and
 * layer `node` recorded as making n's first output, held channels-last
 * when cl and 4-D. */
kiln_status kiln_import_computed(kiln_importer *im, const KilnOnnx__NodeProto *n, size_t k,
                                 kiln_import_value **out);
kiln_status kiln_import_in_layout(kiln_importer *im, kiln_import_value *v, int cl,
                                  kiln_node *node);
kiln_status kiln_import_made(kiln_importer *im, const KilnOnnx__NodeProto *n, kiln_node node,
                             int cl);
/* How many nodes and graph outputs read the value `name`. */
int kiln_import_readers(const kiln_importer *im, const char *name);

/* nn.MultiheadAttention's exported block from its first Transpose, node k,
 * imported as one MultiHeadAttention layer and its nodes skipped (*found
 * 1); otherwise nothing is imported (*found 0, attention_miss saying why
 * when the block nearly matched) (onnx_import_attention.c). */
kiln_status kiln_import_attention(kiln_importer *im, size_t k, int *found);
/* A layer's name for node name `name`: itself, or (over 63 bytes, kiln's
 * limit) "<8 hex digits of its hash>~<its last 54 bytes>"; NULL when out
 * of memory. */
const char *kiln_import_layer_name(kiln_importer *im, const char *name);

/* Marks the chains of ops that are one function kiln has as one layer
 * (GELU, LayerNorm), before the nodes are imported (onnx_import_patterns.c). */
kiln_status kiln_import_patterns(kiln_importer *im);

/* More of them: kiln_import_made with the ONNX shape of `like` (an
 * element-wise op's input); kiln_import_readers with *reader the last
 * reading node; a node whose op is one layer kind. */
kiln_status kiln_import_made_like(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                  kiln_node node, int cl, const kiln_import_value *like);
int kiln_import_last_reader(const kiln_importer *im, const char *name, size_t *reader);
kiln_status kiln_import_kind(kiln_importer *im, const KilnOnnx__NodeProto *n,
                             const kiln_layer_ops *ops, const char *extra);

/* Add, Sub, Mul, Div, Max and Min broadcasting (onnx_import_binary.c), and
 * Sigmoid, which with the Mul after it may be SiLU. */
kiln_status kiln_import_binary(kiln_importer *im, const KilnOnnx__NodeProto *n);
kiln_status kiln_import_sigmoid(kiln_importer *im, const KilnOnnx__NodeProto *n);

/* Constant `name`'s values src, of ONNX shape (rank, dims), as layer
 * node's first parameter: trained and named after the initializer (a
 * Constant node's: not trained), in kiln's layout when `cl` (onnx_import_binary.c). */
kiln_status kiln_import_take_constant(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                      kiln_node node, const char *name, const float *src,
                                      int rank, const int64_t *dims, int cl);

/* A computed value as the model's output: in ONNX's order. */
kiln_status kiln_import_output(kiln_importer *im, kiln_import_value *v, kiln_node *node);

#endif
