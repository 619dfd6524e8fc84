/* Private to the pooling layers: the window configuration and arithmetic
 * MaxPooling2D, AveragePooling2D and GlobalAveragePooling2D share. */
#ifndef KILN_LAYERS_POOL2D_H
#define KILN_LAYERS_POOL2D_H

#include "layers/layer.h"

typedef struct pool_config {
    int32_t ph, pw, sh, sw;
    kiln_padding padding;
    int32_t pads[4];      /* KILN_PADDING_EXPLICIT's (top, left, bottom, right) */
    int32_t ceil_mode;    /* nonzero: the output size rounds up */
    int32_t include_pad;  /* average pooling: divide by the padded window */
    int32_t global;   /* GlobalAverage/MaxPooling2D: the window is the whole input */
    /* inferred */
    int32_t h, w, c, oh, ow, pad_top, pad_left, pad_bottom, pad_right;
} pool_config;

/* A configuration from the public options (Keras's defaults: pool (2, 2),
 * strides = pool). */
pool_config kiln_pool2d_config(const kiln_pool2d_options *options);
/* Its inverse (the ops' describe): the options of a non-global pool. */
void kiln_pool2d_describe(const void *config, void *args);

/* Checks the options against an (H, W, C) input and infers the output;
 * a global pool outputs (C). */
kiln_status kiln_pool2d_infer(void *config, kiln_layer_build *build);

/* Outputs (pixels x channels) for a batch. */
size_t kiln_pool2d_out_count(const pool_config *c, int32_t batch);

/* The kernel arguments after the buffers, in a KILN_ARGS list: `count`
 * work-items, then the input, output and window geometry. */
#define KILN_POOL2D_GEOMETRY_ARGS(c, count)                                                   \
    kiln_arg_int((int64_t)(count)), kiln_arg_int((c)->h), kiln_arg_int((c)->w),               \
        kiln_arg_int((c)->c), kiln_arg_int((c)->oh), kiln_arg_int((c)->ow),                   \
        kiln_arg_int((c)->ph), kiln_arg_int((c)->pw), kiln_arg_int((c)->sh),                  \
        kiln_arg_int((c)->sw), kiln_arg_int((c)->pad_top), kiln_arg_int((c)->pad_left)

uint64_t kiln_pool2d_flops(const void *config, const kiln_shape *in_shape);

/* What model files write of a window (kiln_pool2d_options), and ONNX's
 * MaxPool or AveragePool of node i. */
extern const kiln_layer_field kiln_pool2d_fields[6];
struct kiln_onnx_graph;
void kiln_pool2d_export_onnx(struct kiln_onnx_graph *g, int32_t i, const char *op);

/* ONNX's MaxPool (average 0) or AveragePool (1) of imp (layers/
 * onnx_import.h), and GlobalAveragePool. */
struct kiln_onnx_import;
kiln_status kiln_pool2d_import_onnx(struct kiln_onnx_import *imp, int average);
kiln_status kiln_pool2d_import_global(struct kiln_onnx_import *imp);

/* The pooling kernels come in two variants (kiln_kernel_get_variant): for
 * a CPU a work-item per row of `row` pixels, their channels eight at a
 * time (_cpu); for a GPU (_gpu) a work-item per float over a (channels,
 * pixels) range, neighbouring items on neighbouring channels.
 * kiln_pool2d_run launches the one fetched over `pixels` pixels of
 * `channels` channels, on its variant's range. */
kiln_status kiln_pool2d_run(kiln_device *dev, kiln_kernel *kernel, size_t pixels, size_t row,
                            size_t channels, kiln_args args);

#endif
