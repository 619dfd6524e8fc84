/* Private to the Conv2D layer: its configuration, shared by the im2col +
 * GEMM path (conv2d.c), the direct kernels for small patches
 * (conv2d_direct.c), the depthwise ones (conv2d_depthwise.c) and
 * Winograd's (conv2d_winograd.c). */
#ifndef KILN_LAYERS_CONV2D_H
#define KILN_LAYERS_CONV2D_H

#include "layers/layer.h"

/* Largest patch (KH * KW * C) the direct kernels take (one group only). Up to here they beat
 * im2col + GEMM on the devices measured (docs/performance.md). */
#define KILN_CONV_DIRECT_MAX_PATCH 32

typedef struct conv2d_config {
    int32_t filters, kh, kw, sh, sw;
    kiln_padding padding;
    int32_t use_bias;
    int32_t pads[4];  /* KILN_PADDING_EXPLICIT's (top, left, bottom, right) */
    int32_t dh, dw;   /* dilations, >= 1 once configured */
    int32_t groups;   /* >= 1 once configured; C and filters divide by it */
    /* inferred */
    int32_t h, w, c, oh, ow, pad_top, pad_left, pad_bottom, pad_right;
    int32_t direct;   /* direct kernels, not im2col + GEMM */
    int32_t depthwise; /* the depthwise kernels (groups == C == filters) */
    int32_t pointwise; /* 1x1, stride 1, unpadded: GEMMs on the layer's own buffers */
    int32_t winograd; /* Winograd's F(2x2, 3x3) forward and input gradient */
} conv2d_config;

/* Per replica: the im2col matrix (GEMM path) or the per-chunk partial
 * weight gradients (direct path); the GEMM path's transposed kernel; the
 * OpenCL kernels of the path taken. */
typedef struct conv2d_replica {
    kiln_buffer *scratch;
    kiln_buffer *kernel_t;
    kiln_buffer *wino_u, *wino_v, *wino_m;   /* Winograd's transforms and products */
    struct {
        kiln_kernel *im2col, *col2im;                                   /* GEMM path */
        kiln_kernel *forward, *grad_partial, *reduce, *input_grad;     /* direct path */
        kiln_kernel *wino_filter, *wino_filter_flipped, *wino_input, *wino_output; /* Winograd */
    } kernels;
} conv2d_replica;

/* The window geometry every conv2d kernel takes, in a KILN_ARGS list: input,
 * output, kernel, strides, padding and dilations. */
#define KILN_CONV2D_WINDOW_ARGS(c)                                                            \
    kiln_arg_int((c)->h), kiln_arg_int((c)->w), kiln_arg_int((c)->c), kiln_arg_int((c)->oh),  \
        kiln_arg_int((c)->ow), kiln_arg_int((c)->kh), kiln_arg_int((c)->kw),                  \
        kiln_arg_int((c)->sh), kiln_arg_int((c)->sw), kiln_arg_int((c)->pad_top),             \
        kiln_arg_int((c)->pad_left), kiln_arg_int((c)->dh), kiln_arg_int((c)->dw)

/* One group's patch, KH * KW * C / groups: the GEMMs' inner dimension. */
size_t kiln_conv2d_patch(const conv2d_config *c);
size_t kiln_conv2d_out_pixels(const conv2d_config *c, int32_t batch);

/* Whether a convolution not direct computes its output and input gradient
 * through Winograd's F(2x2, 3x3) (conv2d_winograd.c); its weight gradient
 * stays im2col + GEMM. */
int32_t kiln_conv2d_use_winograd(const conv2d_config *c);

/* A convolution's parameters, Conv2D's and Conv2DTranspose's alike: the
 * kernel (kh, kw, d2, d3), Glorot uniform with Keras's fans for a rank-4
 * kernel (the receptive field times d2, and times d3), and, with use_bias,
 * `filters` zero biases. */
void kiln_conv2d_add_params(kiln_layer_build *b, int32_t kh, int32_t kw, int32_t d2, int32_t d3,
                            int32_t filters, int use_bias);
/* The Winograd path: its kernels, buffers for max_batch, the output before
 * bias and activation, the input gradient (s->d_in[0]). */
kiln_status kiln_conv2d_winograd_kernels(conv2d_replica *r, kiln_device *dev);
kiln_status kiln_conv2d_winograd_prepare(const conv2d_config *c, conv2d_replica *r,
                                         kiln_device *dev, int32_t max_batch);
kiln_status kiln_conv2d_winograd_forward(const conv2d_config *c, conv2d_replica *r,
                                         const kiln_step *s);
kiln_status kiln_conv2d_winograd_input_grad(const conv2d_config *c, conv2d_replica *r,
                                            const kiln_step *s);

/* Whether a depthwise convolution takes the depthwise kernels
 * (conv2d_depthwise.c), not a grouped GEMM; their scratch bytes (partial
 * weight gradients) for max_batch on `dev`, forward, backward. */
int32_t kiln_conv2d_use_depthwise(const conv2d_config *c);
kiln_status kiln_conv2d_depthwise_kernels(conv2d_replica *r, kiln_device *dev);
size_t kiln_conv2d_depthwise_scratch(const conv2d_config *c, const kiln_device *dev,
                                     int32_t max_batch);
kiln_status kiln_conv2d_depthwise_forward(const conv2d_config *c, conv2d_replica *r,
                                          const kiln_step *s);
kiln_status kiln_conv2d_depthwise_backward(const conv2d_config *c, conv2d_replica *r,
                                           const kiln_step *s);

/* Whether a convolution is 1x1, stride 1 and unpadded, which
 * conv2d_pointwise.c computes as GEMMs on the input and output themselves
 * (no im2col); its buffer (the transposed kernel), forward (before bias
 * and activation), backward. */
int32_t kiln_conv2d_use_pointwise(const conv2d_config *c);
kiln_status kiln_conv2d_pointwise_prepare(const conv2d_config *c, conv2d_replica *r,
                                          kiln_device *dev);
kiln_status kiln_conv2d_pointwise_forward(const conv2d_config *c, const kiln_step *s);
kiln_status kiln_conv2d_pointwise_backward(const conv2d_config *c, conv2d_replica *r,
                                           const kiln_step *s);

/* Whether a convolution of one group takes the direct path (conv2d_direct.c). */
int32_t kiln_conv2d_use_direct(const conv2d_config *c);
/* The direct path: its kernels, scratch bytes for max_batch on `dev` (its
 * variant's chunks), forward, backward. */
kiln_status kiln_conv2d_direct_kernels(conv2d_replica *r, kiln_device *dev);
size_t kiln_conv2d_direct_scratch(const conv2d_config *c, const kiln_device *dev,
                                  int32_t max_batch);
kiln_status kiln_conv2d_direct_forward(const conv2d_config *c, conv2d_replica *r,
                                       const kiln_step *s);
kiln_status kiln_conv2d_direct_backward(const conv2d_config *c, conv2d_replica *r,
                                        const kiln_step *s);

#endif
