/* Private: an ONNX node as a layer kind's import op sees it. The runtime
 * (runtime/saving/onnx_import*.c) decodes the file, walks the graph and
 * hands each node whose op maps onto one layer kind to that kind's
 * import_onnx op; the op checks every attribute, fills the options its
 * builder takes and says which initializer gives each parameter and in
 * which layout. Nothing here knows protobuf or the model.
 *
 * ONNX's activations are channels-first (NCHW); kiln computes channels-
 * last. The op says in which layout it wants its data input; the runtime
 * permutes a value once where a node needs the other layout. */
#ifndef KILN_LAYERS_ONNX_IMPORT_H
#define KILN_LAYERS_ONNX_IMPORT_H

#include "layers/layer.h"

#define KILN_ONNX_MAX_NODE_INPUTS 8

/* One attribute of a node, as the file has it. */
typedef struct kiln_onnx_in_attr {
    const char *name;
    enum { KILN_ONNX_IN_INT, KILN_ONNX_IN_FLOAT, KILN_ONNX_IN_INTS, KILN_ONNX_IN_STRING,
           KILN_ONNX_IN_OTHER } kind;
    int64_t i;
    float f;
    const int64_t *ints;
    size_t n_ints;
    const char *s;         /* NUL-terminated copy */
} kiln_onnx_in_attr;

/* One input of a node: a value the graph computes (data NULL) or an
 * initializer or folded constant (its floats). dims are ONNX's, the batch
 * first for computed values. */
typedef struct kiln_onnx_in {
    const char *name;
    int rank;
    int64_t dims[KILN_MAX_RANK + 1];
    const float *data;
    /* A computed 4-D value: the layout it is held in now, KILN_ONNX_WANT_ANY
     * when it is held in both (converted once already) or of another rank;
     * an op free to choose takes it as held, with no permute. */
    int held;
} kiln_onnx_in;

/* How an initializer becomes a kiln parameter. */
typedef enum kiln_onnx_param_layout {
    KILN_ONNX_PARAM_AS_IS,       /* the same values in the same order */
    KILN_ONNX_PARAM_OIHW,        /* Conv weight (F, C, kh, kw) to (kh, kw, C, F) */
    KILN_ONNX_PARAM_TRANSPOSED   /* (a, b) to (b, a): Gemm's transB weight */
} kiln_onnx_param_layout;

/* The layout an op wants its data inputs in. */
typedef enum kiln_onnx_want {
    KILN_ONNX_WANT_ANY,          /* element-wise: either, all inputs alike */
    KILN_ONNX_WANT_ONNX,         /* ONNX's order (a 4-D value channels-first) */
    KILN_ONNX_WANT_CHANNELS_LAST /* a 4-D value as kiln's (H, W, C) */
} kiln_onnx_want;

typedef struct kiln_onnx_import {
    const char *op;            /* "Conv" */
    const char *node;          /* its name, for messages */
    int opset;
    const kiln_onnx_in_attr *attrs;
    size_t n_attrs;
    kiln_onnx_in in[KILN_ONNX_MAX_NODE_INPUTS];
    int n_in;                  /* inputs given (an empty optional one has name "") */
    /* Filled by the op. */
    kiln_layer_args args;      /* what its builder takes (configure's struct) */
    kiln_activation activation;
    kiln_onnx_want want;
    int n_data;                /* inputs 0..n_data-1 are layer inputs */
    /* Nonzero: the ONNX output has this rank, kiln's output the same values
     * without its trailing 1s (GlobalAveragePool's (N, C, 1, 1) as (C)). */
    int out_rank;
    int param_input[KILN_MAX_PARAMS];              /* the input that gives parameter p */
    kiln_onnx_param_layout param_layout[KILN_MAX_PARAMS];
    int n_params;
    char error[256];           /* why the op refused (attribute, value, what is supported) */
} kiln_onnx_import;

/* The attribute named `name`, or NULL. */
const kiln_onnx_in_attr *kiln_onnx_find_attr(const kiln_onnx_import *imp, const char *name);
/* Its int (or `fallback` when absent); an attribute of another kind is
 * refused by kiln_onnx_check_attrs. */
int64_t kiln_onnx_attr_i(const kiln_onnx_import *imp, const char *name, int64_t fallback);
float kiln_onnx_attr_f(const kiln_onnx_import *imp, const char *name, float fallback);
/* KILN_ERROR_UNSUPPORTED, `error` naming an attribute not in the
 * comma-separated `known` or of another kind than the op reads. */
kiln_status kiln_onnx_check_attrs(kiln_onnx_import *imp, const char *known);
/* Writes the refusal into imp->error and returns KILN_ERROR_UNSUPPORTED. */
kiln_status kiln_onnx_refuse(kiln_onnx_import *imp, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Input k must be an initializer (or absent, when `optional`). */
kiln_status kiln_onnx_need_constant(kiln_onnx_import *imp, int k, const char *what,
                                    int optional);
/* Clip's bounds, from its min and max inputs (opset 11 on: initializers
 * of one value) or attributes (before); a bound not given is -inf or inf. */
kiln_status kiln_onnx_clip_bounds(kiln_onnx_import *imp, float *lo, float *hi);
/* Parameter p of the layer comes from input k in `layout`. */
void kiln_onnx_param_from(kiln_onnx_import *imp, int p, int k, kiln_onnx_param_layout layout);

/* The 2-D window of Conv and the pools as kiln's: kernel, strides,
 * dilations (1: contiguous) and padding, with the explicit pads (top,
 * left, bottom, right) when the node's are neither none nor 'same' as
 * Keras pads (SAME_UPPER). */
typedef struct kiln_onnx_window_spec {
    int32_t kernel[2];
    int32_t strides[2];
    int32_t dilations[2];
    int32_t pads[4];
    kiln_padding padding;
} kiln_onnx_window_spec;

/* Reads kernel_shape, strides, pads, auto_pad and dilations into w
 * (dilations other than 1 refused unless `dilated`); w->kernel holds the
 * kernel's (kh, kw) on entry for a node without kernel_shape. A value kiln
 * can't take is KILN_ERROR_UNSUPPORTED naming the attribute. */
kiln_status kiln_onnx_window(kiln_onnx_import *imp, int dilated, kiln_onnx_window_spec *w);

/* Writes `t` (an initializer) into dst, `size` floats, in kiln's layout. */
void kiln_onnx_param_convert(const kiln_onnx_in *t, kiln_onnx_param_layout layout, float *dst);

#endif
