/* Finite differences against backward, through small multi-layer models:
 * one where a node feeds two layers that meet again in Add, a
 * convolutional one, a residual block with batch normalisation, one of
 * layer norms, concatenations and the newer activations, kiln_math's ops, a decoder of
 * transposed convolutions, and one of ids
 * through Embedding (ids repeated) and PositionEmbedding, one of
 * broadcasting binary ops, and LoRA on Dense layers over rows and on
 * attention (the adapters' gradients and the input gradient through them,
 * B away from its zeros).
 * Smooth activations keep the differences meaningful. */
#include "layer_check.h"

#define BATCH 3
#define EPS 1e-3  /* small enough that max pooling keeps its winners */

typedef kiln_model *(*model_fn)(kiln_context *ctx);

static kiln_model *branchy(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6};
    kiln_node x = kiln_input(m, 1, dims, NULL);
    kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = 5,
                            .activation = KILN_ACTIVATION_TANH};
    /* ONNX Gemm's scales: alpha x W + beta b. */
    kiln_dense_options b1 = {.struct_size = sizeof b1, .name = "b1", .units = 4,
                             .activation = KILN_ACTIVATION_SIGMOID, .alpha = 0.5f,
                             .beta = -2.0f};
    kiln_dense_options b2 = {.struct_size = sizeof b2, .name = "b2", .units = 4,
                             .activation = KILN_ACTIVATION_TANH, .no_bias = 1};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "head", .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node h = kiln_dense(m, x, &a);
    kiln_node both[] = {kiln_dense(m, h, &b1), kiln_dense(m, h, &b2)};  /* h feeds two */
    kiln_node sum = kiln_add(m, both, 2, NULL);
    kiln_dense(m, sum, &head);
    return m;
}

static kiln_model *convolutional(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {7, 6, 2};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d_options c1 = {.struct_size = sizeof c1, .filters = 3, .kernel_size = {3, 3},
                              .strides = {1, 1}, .padding = KILN_PADDING_SAME,
                              .activation = KILN_ACTIVATION_TANH};
    kiln_conv2d_options c2 = {.struct_size = sizeof c2, .filters = 4, .kernel_size = {2, 3},
                              .strides = {2, 1}, .padding = KILN_PADDING_VALID,
                              .activation = KILN_ACTIVATION_SIGMOID};
    kiln_pool2d_options p = {.struct_size = sizeof p, .pool_size = {2, 2}, .strides = {1, 2},
                             .padding = KILN_PADDING_SAME};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &c1);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &c2);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &p);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* ONNX's and PyTorch's window attributes: a grouped, dilated convolution
 * with asymmetric explicit pads, a depthwise one at stride 2, an average
 * pool counting its padding and a max pool rounding up. */
static kiln_model *pytorch_windows(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {7, 6, 4};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d_options grouped = {.struct_size = sizeof grouped, .filters = 6,
                                   .kernel_size = {3, 2}, .padding = KILN_PADDING_EXPLICIT,
                                   .pads = {2, 1, 1, 0}, .dilations = {2, 1}, .groups = 2,
                                   .activation = KILN_ACTIVATION_TANH};
    kiln_conv2d_options depthwise = {.struct_size = sizeof depthwise, .filters = 6,
                                     .kernel_size = {3, 3}, .strides = {2, 2},
                                     .padding = KILN_PADDING_EXPLICIT, .pads = {1, 1, 0, 1},
                                     .groups = 6, .activation = KILN_ACTIVATION_SIGMOID};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &grouped);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &depthwise);
    kiln_pool2d_options avg = {.struct_size = sizeof avg, .pool_size = {2, 2},
                               .strides = {1, 1}, .padding = KILN_PADDING_EXPLICIT,
                               .pads = {1, 0, 0, 1}, .count_include_pad = 1};
    kiln_pool2d_options max = {.struct_size = sizeof max, .pool_size = {2, 2}, .ceil_mode = 1};
    kiln_average_pooling2d(m, KILN_NODE_PREVIOUS, &avg);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &max);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* What the ONNX importer brought: an asymmetric ZeroPadding2D, leaky_relu
 * of its own slope (-0.3; the finite differences step over its kink only
 * where an input lies within EPS of 0), log_softmax over channels and a
 * GlobalMaxPooling2D (winners kept, as max pooling's). */
static kiln_model *importer_layers(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 4, 2};
    kiln_input(m, 3, dims, NULL);
    const kiln_zero_padding2d_options pad = {.struct_size = sizeof pad,
                                             .padding = {1, 0, 2, 1}};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 3, .kernel_size = {3, 3}};
    const kiln_activation_layer_options leaky = {.struct_size = sizeof leaky,
                                                 .negative_slope = -0.3f};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_zero_padding2d(m, KILN_NODE_PREVIOUS, &pad);                   /* (6, 7, 2) */
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);                          /* (4, 5, 3) */
    kiln_activation_layer(m, KILN_NODE_PREVIOUS, KILN_ACTIVATION_LEAKY_RELU, &leaky);
    kiln_activation_layer(m, KILN_NODE_PREVIOUS, KILN_ACTIVATION_LOG_SOFTMAX, NULL);
    kiln_global_max_pooling2d(m, KILN_NODE_PREVIOUS, NULL);             /* (3) */
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* Reductions and softmax along inner axes: a convolution's output, softmax
 * over H (log softmax from W through the channels), then its largest over
 * H, its sum over the channels kept and its mean over W and the channels,
 * concatenated into a head. */
static kiln_model *reductions(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 4, 2}, h[] = {1}, c[] = {-1}, wc[] = {2, 3};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 3, .kernel_size = {2, 2},
                                .activation = KILN_ACTIVATION_TANH};
    const kiln_softmax_options over_h = {.struct_size = sizeof over_h, .axis = 1};
    const kiln_softmax_options through = {.struct_size = sizeof through, .axis = 2,
                                          .through_last = 1, .log = 1};
    const kiln_reduce_options keep = {.struct_size = sizeof keep, .keepdims = 1};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &conv);  /* (4, 3, 3) */
    const kiln_node s = kiln_softmax(m, x, &over_h), l = kiln_softmax(m, x, &through);
    const kiln_node parts[] = {
        kiln_flatten(m, kiln_reduce(m, s, KILN_REDUCE_MAX, 1, h, NULL), NULL),   /* (9) */
        kiln_flatten(m, kiln_reduce(m, l, KILN_REDUCE_SUM, 1, c, &keep), NULL),  /* (12) */
        kiln_reduce(m, x, KILN_REDUCE_MEAN, 2, wc, NULL),                        /* (4) */
        kiln_flatten(m, kiln_reduce(m, x, KILN_REDUCE_MIN, 1, h, NULL), NULL),   /* (9) */
    };
    kiln_dense(m, kiln_concatenate(m, parts, 4, NULL), &head);
    return m;
}

/* kiln_math's ops on branches of one Dense, summed, then Dense layers with
 * hard_sigmoid (fused) and hard_silu (kept apart, it needs its input). */
static kiln_model *math_ops(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options a = {.struct_size = sizeof a, .units = 8};
    const kiln_node h = kiln_dense(m, KILN_NODE_PREVIOUS, &a);
    const kiln_node e = kiln_math(m, h, KILN_MATH_EXP, NULL);
    const kiln_math_options cube = {.struct_size = sizeof cube, .exponent = 3};
    const kiln_math_options root = {.struct_size = sizeof root, .exponent = 2.5f};
    const kiln_math_options clip = {.struct_size = sizeof clip, .has_min = 1, .min = -0.5f,
                                    .has_max = 1, .max = 0.4f};
    const kiln_math_options hard = {.struct_size = sizeof hard, .alpha = 0.3f, .beta = 0.2f};
    const kiln_node branches[8] = {
        kiln_math(m, kiln_math(m, e, KILN_MATH_SQRT, NULL), KILN_MATH_LOG, NULL),
        kiln_math(m, e, KILN_MATH_RECIPROCAL, NULL),
        kiln_math(m, e, KILN_MATH_POW, &root),
        kiln_math(m, h, KILN_MATH_ERF, NULL),
        kiln_math(m, h, KILN_MATH_POW, &cube),
        kiln_math(m, kiln_math(m, h, KILN_MATH_ABS, NULL), KILN_MATH_NEG, NULL),
        kiln_math(m, h, KILN_MATH_CLIP, &clip),
        kiln_math(m, h, KILN_MATH_HARD_SIGMOID, &hard),
    };
    kiln_add(m, branches, 8, NULL);
    kiln_dense_options b = {.struct_size = sizeof b, .units = 6,
                            .activation = KILN_ACTIVATION_HARD_SIGMOID};
    kiln_dense_options c = {.struct_size = sizeof c, .units = 5,
                            .activation = KILN_ACTIVATION_HARD_SWISH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &b);
    kiln_dense(m, KILN_NODE_PREVIOUS, &c);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* A downsampling residual block, as the seed ResNet's: conv 3x3/2 - BN -
 * tanh - conv 3x3 - BN on one path, conv 1x1/2 - BN on the shortcut (the
 * input feeds both), Add, tanh, global average pooling, softmax head. */
static kiln_model *residual(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {7, 6, 3};
    kiln_node x = kiln_input(m, 3, dims, NULL);
    kiln_conv2d_options c1 = {.struct_size = sizeof c1, .filters = 4, .kernel_size = {3, 3},
                              .strides = {2, 2}, .padding = KILN_PADDING_SAME,
                              .activation = KILN_ACTIVATION_LINEAR, .no_bias = 1};
    kiln_conv2d_options c2 = {.struct_size = sizeof c2, .filters = 4, .kernel_size = {3, 3},
                              .strides = {1, 1}, .padding = KILN_PADDING_SAME,
                              .activation = KILN_ACTIVATION_LINEAR, .no_bias = 1};
    kiln_conv2d_options sc = {.struct_size = sizeof sc, .filters = 4, .kernel_size = {1, 1},
                              .strides = {2, 2}, .padding = KILN_PADDING_SAME,
                              .activation = KILN_ACTIVATION_LINEAR, .no_bias = 1};
    kiln_batch_norm_options bn = {.struct_size = sizeof bn, .activation = KILN_ACTIVATION_LINEAR};
    kiln_batch_norm_options bn_tanh = {.struct_size = sizeof bn_tanh,
                                       .activation = KILN_ACTIVATION_TANH};
    kiln_node y = kiln_conv2d(m, x, &c1);
    y = kiln_batch_normalization(m, y, &bn_tanh);
    y = kiln_conv2d(m, y, &c2);
    y = kiln_batch_normalization(m, y, &bn);
    kiln_node shortcut = kiln_batch_normalization(m, kiln_conv2d(m, x, &sc), &bn);
    kiln_node both[] = {y, shortcut};
    kiln_node sum = kiln_activation_layer(m, kiln_add(m, both, 2, NULL), KILN_ACTIVATION_TANH,
                                          NULL);
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, kiln_global_average_pooling2d(m, sum, NULL), &head);
    return m;
}

/* Trainable convolutions around a frozen batch norm, which normalises with
 * its moving statistics in training: the first convolution's gradients
 * pass through the frozen layer's own backward. */
static kiln_model *frozen_norm(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 4, 3};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d_options c1 = {.struct_size = sizeof c1, .filters = 4, .kernel_size = {3, 3},
                              .padding = KILN_PADDING_SAME, .activation = KILN_ACTIVATION_TANH};
    kiln_batch_norm_options bn = {.struct_size = sizeof bn, .name = "frozen_bn"};
    kiln_conv2d_options c2 = {.struct_size = sizeof c2, .filters = 3, .kernel_size = {1, 1},
                              .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &c1);
    kiln_batch_normalization(m, KILN_NODE_PREVIOUS, &bn);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &c2);
    kiln_global_average_pooling2d(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    CHECK_OK(ctx, kiln_model_set_trainable(m, "frozen_bn", 0));
    return m;
}

/* The newer layers: GELU and SiLU dense layers on a rank-2 input, layer
 * norm on narrow rows (a work-item each) and wide ones (a work-group
 * each), Concatenate on the last axis (a node given twice) and on the
 * first, GELU (tanh) as a layer, Reshape. Leaky ReLU's kink is left to
 * test_layers' float64 check. */
static kiln_model *sequence(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {3, 5}, rows[] = {11, 3};
    kiln_node x = kiln_input(m, 2, dims, NULL);
    kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = 4,
                            .activation = KILN_ACTIVATION_GELU};
    kiln_dense_options b = {.struct_size = sizeof b, .name = "b", .units = 3,
                            .activation = KILN_ACTIVATION_SILU};
    kiln_layer_norm_options no_center = {.struct_size = sizeof no_center, .no_center = 1};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node n = kiln_layer_normalization(m, kiln_dense(m, x, &a), NULL);   /* (3, 4) */
    kiln_node bx = kiln_dense(m, x, &b);                                     /* (3, 3) */
    kiln_node last[] = {n, bx, n};
    kiln_node g = kiln_activation_layer(m, kiln_concatenate(m, last, 3, NULL),
                                        KILN_ACTIVATION_GELU_TANH, NULL);     /* (3, 11) */
    kiln_node first[] = {kiln_reshape(m, g, 2, rows, NULL), bx};
    const kiln_concatenate_options rows_axis = {.struct_size = sizeof rows_axis, .axis = 1};
    kiln_node d = kiln_layer_normalization(m, kiln_concatenate(m, first, 2, &rows_axis),
                                           &no_center);                       /* (14, 3) */
    const int32_t swap[] = {2, 1};
    kiln_node t = kiln_permute(m, d, 2, swap, NULL);                         /* (3, 14) */
    kiln_node wide = kiln_layer_normalization(m, kiln_flatten(m, t, NULL), NULL);  /* (42,) */
    kiln_dense(m, wide, &head);
    return m;
}

/* Attention: a causal cross-attention from a dense projection of the
 * input over the input itself (other widths), with dropout on its
 * probabilities (one step: the same mask every pass), then self-attention
 * on its output (one node as query and value), through Add. The dense
 * layer before them checks the input gradients of both. */
static kiln_model *attention(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 3};
    kiln_node x = kiln_input(m, 2, dims, NULL);
    kiln_dense_options a = {.struct_size = sizeof a, .units = 5,
                            .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_multi_head_attention_options cross = {
        .struct_size = sizeof cross, .num_heads = 2, .key_dim = 3, .value_dim = 2,
        .use_causal_mask = 1, .dropout = 0.2f};
    const kiln_multi_head_attention_options self = {.struct_size = sizeof self,
                                                    .num_heads = 3, .key_dim = 2};
    kiln_node q = kiln_dense(m, x, &a);                                       /* (4, 5) */
    kiln_node c = kiln_multi_head_attention(m, q, x, &cross);                 /* (4, 5) */
    kiln_node both[] = {c, kiln_multi_head_attention(m, c, c, &self)};
    kiln_add(m, both, 2, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

static kiln_model *tokens(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4};
    kiln_input_ints(m, 1, dims, NULL);
    const kiln_embedding_options e = {.struct_size = sizeof e, .input_dim = 5, .output_dim = 3};
    const kiln_position_embedding_options p = {.struct_size = sizeof p, .max_length = 6};
    kiln_dense_options a = {.struct_size = sizeof a, .units = 4,
                            .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_embedding(m, KILN_NODE_PREVIOUS, &e);                     /* (4, 3) */
    kiln_position_embedding(m, KILN_NODE_PREVIOUS, &p);
    kiln_dense(m, KILN_NODE_PREVIOUS, &a);                         /* (4, 4) */
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* The binary kind: a squeeze-and-excitation scale (an image times a
 * Dense of its channel means), a trained layer scale, a constant on the
 * left, a division by a trained tensor, Max and Min of two branches. */
static kiln_model *broadcasting(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 5, 3};
    kiln_input(m, 3, dims, NULL);
    const kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4,
                                      .kernel_size = {3, 3}, .padding = KILN_PADDING_SAME,
                                      .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options excite = {.struct_size = sizeof excite, .units = 4,
                                       .activation = KILN_ACTIVATION_SIGMOID};
    const kiln_binary_options mul = {.struct_size = sizeof mul, .op = KILN_BINARY_MULTIPLY};
    const kiln_binary_options scale = {.struct_size = sizeof scale, .op = KILN_BINARY_MULTIPLY,
                                       .param_rank = 3, .param_dims = {1, 1, 4},
                                       .param_value = 0.5f};
    const kiln_binary_options from = {.struct_size = sizeof from, .op = KILN_BINARY_SUBTRACT,
                                      .param_rank = 1, .param_dims = {1}, .param_first = 1,
                                      .param_constant = 1, .param_value = 1.5f};
    const kiln_binary_options by = {.struct_size = sizeof by, .op = KILN_BINARY_DIVIDE,
                                    .param_rank = 2, .param_dims = {5, 1}, .param_value = 2.0f};
    const kiln_binary_options max = {.struct_size = sizeof max, .op = KILN_BINARY_MAXIMUM};
    const kiln_binary_options min = {.struct_size = sizeof min, .op = KILN_BINARY_MINIMUM};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    const kiln_node s = kiln_dense(m, kiln_global_average_pooling2d(m, x, NULL), &excite);
    kiln_node y = kiln_binary_param(m, kiln_binary(m, x, s, &mul), &scale);
    const kiln_node a = kiln_binary_param(m, y, &from);
    const kiln_node b = kiln_binary_param(m, kiln_conv2d(m, x, &conv), &by);
    y = kiln_binary(m, kiln_binary(m, a, b, &max), kiln_binary(m, y, b, &min), &mul);
    kiln_dense(m, kiln_flatten(m, y, NULL), &head);
    return m;
}

/* Two inputs, the second declared after the first's layers: ids through an
 * Embedding, floats through a Dense, concatenated. */
static kiln_model *two_inputs(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t ids[] = {2}, side[] = {3};
    kiln_node u = kiln_input_ints(m, 1, ids, &(kiln_input_options){.name = "user"});
    const kiln_embedding_options e = {.struct_size = sizeof e, .input_dim = 5, .output_dim = 3};
    u = kiln_flatten(m, kiln_embedding(m, u, &e), NULL);           /* (6) */
    kiln_node f = kiln_input(m, 1, side, &(kiln_input_options){.name = "side"});
    kiln_dense_options a = {.struct_size = sizeof a, .units = 4,
                            .activation = KILN_ACTIVATION_TANH};
    f = kiln_dense(m, f, &a);
    const kiln_node both[] = {u, f};
    kiln_concatenate(m, both, 2, NULL);                        /* (10) */
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* Two towers meeting in a Dot, as a recommender's: ids through an
 * Embedding, floats through a Dense. */
static kiln_model *towers(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t ids[] = {2}, side[] = {3};
    const kiln_embedding_options e = {.struct_size = sizeof e, .input_dim = 5, .output_dim = 3};
    const kiln_input_options user = {.struct_size = sizeof user, .name = "user"};
    const kiln_node u = kiln_flatten(m, kiln_embedding(m, kiln_input_ints(m, 1, ids, &user),
                                                       &e), NULL);   /* (6) */
    kiln_dense_options a = {.struct_size = sizeof a, .units = 6,
                            .activation = KILN_ACTIVATION_TANH};
    const kiln_node f = kiln_dense(m, kiln_input(m, 1, side, &(kiln_input_options){.name = "side"}),
                                   &a);
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, kiln_dot(m, u, f, NULL), &head);
    return m;
}

/* Attention by hand through MatMul: per-head queries times keys
 * transposed, a softmax, times values; then a product by a (1, 4, 3)
 * broadcast over the heads, its gradient summed over them. */
static kiln_model *matmuls(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {2, 3, 4}, swap[] = {1, 3, 2}, shared[] = {1, 4, 3};
    kiln_dense_options proj = {.struct_size = sizeof proj, .units = 4,
                               .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options twelve = {.struct_size = sizeof twelve, .units = 12,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_input(m, 3, dims, NULL);
    const kiln_node q = kiln_dense(m, x, &proj), k = kiln_dense(m, x, &proj);
    const kiln_node v = kiln_dense(m, x, &proj);
    const kiln_node scores = kiln_matmul(m, q, kiln_permute(m, k, 3, swap, NULL), NULL);
    const kiln_node weights = kiln_activation_layer(m, scores, KILN_ACTIVATION_SOFTMAX, NULL);
    const kiln_node context = kiln_matmul(m, weights, v, NULL);             /* (2, 3, 4) */
    const kiln_node w = kiln_reshape(m, kiln_dense(m, kiln_flatten(m, x, NULL), &twelve), 3,
                                     shared, NULL);                           /* (1, 4, 3) */
    kiln_dense(m, kiln_flatten(m, kiln_matmul(m, context, w, NULL), NULL), &head);
    return m;
}

/* Slice and Expand between trained layers: a window stepping backwards
 * on one axis and by 2 on another, the class token (one place), and a
 * broadcast of it back over the tokens, added to the window. */
static kiln_model *windows_and_repeats(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 6}, over[] = {3, 4};
    kiln_dense_options mix = {.struct_size = sizeof mix, .units = 8,
                              .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options four = {.struct_size = sizeof four, .units = 4,
                               .activation = KILN_ACTIVATION_SIGMOID};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node h = kiln_dense(m, kiln_input(m, 2, dims, NULL), &mix);   /* (5, 8) */
    const kiln_slice_options back = {.struct_size = sizeof back, .begin = {4, 1},
                                     .size = {3, 4}, .step = {-1, 2}};  /* (3, 4) */
    const kiln_node window = kiln_slice(m, h, &back);
    const kiln_slice_options token = {.struct_size = sizeof token, .size = {1}};
    const kiln_node first = kiln_dense(m, kiln_slice(m, h, &token), &four);  /* (1, 4) */
    const kiln_node both[] = {window, kiln_expand(m, first, 2, over, NULL)};
    kiln_dense(m, kiln_flatten(m, kiln_add(m, both, 2, NULL), NULL), &head);
    return m;
}

/* ViT's class token: a LearnedTokens row prepended to the tokens (its
 * gradient the sum over the batch; its input, the tokens, given none
 * through it), then the tokens mixed and read out. */
static kiln_model *class_token(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 6}, token[] = {1, 5};
    kiln_dense_options mix = {.struct_size = sizeof mix, .units = 5,
                              .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node h = kiln_dense(m, kiln_input(m, 2, dims, NULL), &mix);   /* (4, 5) */
    const kiln_node both[] = {kiln_learned_tokens(m, h, 2, token, NULL), h};
    const kiln_concatenate_options rows = {.struct_size = sizeof rows, .axis = 1};
    const kiln_node all = kiln_dense(m, kiln_concatenate(m, both, 2, &rows), &mix);  /* (5, 5) */
    kiln_dense(m, kiln_flatten(m, all, NULL), &head);
    return m;
}

/* A padding mask: ReLU of the input's first feature flags the value
 * positions (those > 0) that a causal cross-attention from a dense
 * projection does not see; then self-attention under the same mask. The
 * mask's own gradient is 0 (it only chooses), so the input's comes
 * through the projections alone. */
static kiln_model *padded_attention(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 3}, rows[] = {5};
    kiln_node x = kiln_input(m, 2, dims, NULL);
    kiln_dense_options a = {.struct_size = sizeof a, .units = 4,
                            .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_multi_head_attention_options cross = {
        .struct_size = sizeof cross, .num_heads = 2, .key_dim = 3, .use_causal_mask = 1};
    const kiln_multi_head_attention_options self = {.struct_size = sizeof self,
                                                    .num_heads = 2, .key_dim = 2};
    const kiln_slice_options first = {.struct_size = sizeof first, .size = {0, 1}};
    const kiln_node flags = kiln_activation_layer(m, kiln_slice(m, x, &first),
                                                  KILN_ACTIVATION_RELU, NULL);
    const kiln_node pad = kiln_reshape(m, flags, 1, rows, NULL);
    kiln_node c = kiln_multi_head_attention_masked(m, kiln_dense(m, x, &a), x, pad, &cross);
    kiln_node s = kiln_multi_head_attention_masked(m, c, c, pad, &self);
    kiln_dense(m, kiln_flatten(m, s, NULL), &head);
    return m;
}

/* A decoder of transposed convolutions: PyTorch's (padding 1,
 * output_padding 1) and Keras's ('same') upsampling of one value, added
 * (its input gradient summed from both), then a grouped, dilated one with
 * asymmetric pads and output_padding. */
static kiln_model *decoder(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 3, 2};
    const kiln_conv2d_options mix = {.struct_size = sizeof mix, .filters = 3,
                                     .kernel_size = {1, 1}, .activation = KILN_ACTIVATION_TANH};
    const kiln_conv2d_transpose_options torch = {
        .struct_size = sizeof torch, .filters = 4, .kernel_size = {3, 3}, .strides = {2, 2},
        .padding = KILN_PADDING_EXPLICIT, .pads = {1, 1, 1, 1}, .output_padding = {1, 1},
        .no_bias = 1, .activation = KILN_ACTIVATION_TANH};
    const kiln_conv2d_transpose_options keras = {
        .struct_size = sizeof keras, .filters = 4, .kernel_size = {2, 2}, .strides = {2, 2},
        .padding = KILN_PADDING_SAME, .activation = KILN_ACTIVATION_SIGMOID};
    const kiln_conv2d_transpose_options grouped = {
        .struct_size = sizeof grouped, .filters = 2, .kernel_size = {3, 2}, .strides = {1, 2},
        .padding = KILN_PADDING_EXPLICIT, .pads = {2, 0, 1, 1}, .output_padding = {1, 0},
        .dilations = {2, 1}, .groups = 2, .activation = KILN_ACTIVATION_TANH};
    const kiln_pool2d_options pool = {.struct_size = sizeof pool, .pool_size = {2, 2},
                                      .padding = KILN_PADDING_SAME};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node h = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &mix);   /* (4, 3, 3) */
    const kiln_node both[] = {kiln_conv2d_transpose(m, h, &torch),            /* (8, 6, 4) */
                              kiln_conv2d_transpose(m, h, &keras)};
    kiln_node y = kiln_conv2d_transpose(m, kiln_add(m, both, 2, NULL), &grouped); /* (10, 11, 2) */
    y = kiln_flatten(m, kiln_average_pooling2d(m, y, &pool), NULL);           /* (5, 6, 2) */
    kiln_dense(m, y, &head);
    return m;
}

static kiln_model *lora(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {3, 5};
    /* a scaled as ONNX Gemm's alpha and beta: the adapters' term too. */
    kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = 4,
                            .activation = KILN_ACTIVATION_TANH, .alpha = 0.5f, .beta = 1.5f};
    kiln_dense_options b = {.struct_size = sizeof b, .name = "b", .units = 6,
                            .activation = KILN_ACTIVATION_SIGMOID, .no_bias = 1};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "head", .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node h = kiln_dense(m, kiln_dense(m, kiln_input(m, 2, dims, NULL), &a), &b);
    kiln_dense(m, kiln_flatten(m, h, NULL), &head);
    CHECK_OK(ctx, kiln_model_enable_lora(m, "a", 2, 3.0f));
    CHECK_OK(ctx, kiln_model_enable_lora(m, "b", 3, 6.0f));   /* scale 2 */
    return m;
}

/* LoRA on attention: cross-attention (query from a Dense, key and value
 * from the input: other widths, value_dim 2, biases) with its key and
 * output adapters (kiln_model_enable_lora_with's targets; query and value
 * frozen whole), and self-attention without biases with all four (A of 3
 * axes, a slice per head; the output's a slice per head of value_dim);
 * the Dense before them sees the input gradient through the adapters. */
static kiln_model *lora_attention(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 3};
    kiln_node x = kiln_input(m, 2, dims, NULL);
    kiln_dense_options a = {.struct_size = sizeof a, .units = 5,
                            .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_multi_head_attention_options cross = {
        .struct_size = sizeof cross, .name = "cross", .num_heads = 2, .key_dim = 3,
        .value_dim = 2, .use_causal_mask = 1};
    const kiln_multi_head_attention_options self = {.struct_size = sizeof self, .name = "self",
                                                    .num_heads = 3, .key_dim = 2, .no_bias = 1};
    kiln_node c = kiln_multi_head_attention(m, kiln_dense(m, x, &a), x, &cross);
    kiln_multi_head_attention(m, c, c, &self);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_lora_options cross_lora = {.struct_size = sizeof cross_lora, .rank = 2,
                                          .alpha = 3.0f, .targets = "key,attention_output"};
    const kiln_lora_options self_lora = {.struct_size = sizeof self_lora, .rank = 3,
                                         .targets = "attention_output,value,key,query"};
    CHECK_OK(ctx, kiln_model_enable_lora_with(m, "cross", &cross_lora));
    CHECK_OK(ctx, kiln_model_enable_lora_with(m, "self", &self_lora));
    return m;
}

static double batch_loss(kiln_context *ctx, kiln_replica *r)
{
    double sums[KILN_N_SUMS] = {0};
    CHECK_OK(ctx, kiln_replica_forward(r, BATCH, 1));
    CHECK_OK(ctx, kiln_replica_loss(r, BATCH, 1.0f / BATCH));
    CHECK_OK(ctx, kiln_replica_read_sums(r, sums));
    return sums[0] / BATCH;
}

static void gradcheck(kiln_context *ctx, const char *name, model_fn make)
{
    kiln_model *m = make(ctx);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    const int64_t in = m->graph.sample_size;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * in));
    for (int64_t i = 0; i < BATCH * in; i++)
        x[i] = (float)check_uniform();
    for (int32_t k = 0; k < m->graph.n_inputs; k++) { /* ids of 5 values in their inputs' places */
        const kiln_id_range *id = &m->graph.ids[k];
        for (int64_t i = 0; id->limit > 0 && i < BATCH * id->size; i++)
            ((int32_t *)(void *)(x + i / id->size * in + id->offset))[i % id->size] =
                (int32_t)(i * 3 % 5);
    }
    int32_t labels[BATCH] = {2, 0, 1};
    kiln_batch b = {.n = BATCH, .features = x, .labels = labels};
    CHECK_OK(ctx, kiln_replica_upload(r, &b));

    const size_t n = m->plan.n_param_floats;
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    CHECK_OK(ctx, kiln_replica_read_params(r, p));
    /* Frozen layers keep what they were given: make it more than 0 and 1;
     * LoRA's adapters too (B starts at zeros, which would hide A's gradient). */
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        for (int k = 0; k < m->graph.nodes[i].n_params; k++) {
            const int adapter = m->graph.nodes[i].params[k].adapter;
            if (!m->graph.nodes[i].frozen && !adapter)
                continue;
            for (int64_t j = 0; j < kiln_shape_size(&m->graph.nodes[i].params[k].shape); j++)
                p[m->graph.nodes[i].param_offset[k] + (size_t)j] =
                    adapter ? 0.6f * (float)check_uniform() - 0.3f
                            : 0.75f + 0.5f * (float)check_uniform();
        }
    CHECK_OK(ctx, kiln_replica_write_params(r, p));
    batch_loss(ctx, r);
    CHECK_OK(ctx, kiln_replica_backward(r, BATCH, NULL, NULL));
    /* The gradient buffer holds the trainable prefix (and frozen weights of
     * kinds that may write theirs): n_grad_floats, at most n. */
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grads, 0, g, sizeof(float) * r->n_grad_floats));

    /* Every parameter of every layer, one at a time. */
    int checked = 0, bad = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        for (int k = 0; k < node->n_params; k++) {
            if (kiln_param_frozen(node, k) || node->params[k].non_trainable)
                continue;   /* no gradient: nothing updates them */
            const int64_t size = kiln_shape_size(&node->params[k].shape);
            for (int64_t j = 0; j < size; j++) {
                const size_t at = node->param_offset[k] + (size_t)j;
                const float keep = p[at];
                p[at] = keep + (float)EPS;
                kiln_replica_write_params(r, p);
                const double up = batch_loss(ctx, r);
                p[at] = keep - (float)EPS;
                kiln_replica_write_params(r, p);
                const double down = batch_loss(ctx, r);
                p[at] = keep;
                const double numeric = (up - down) / (2 * EPS), analytic = g[at];
                checked++;
                if (fabs(numeric - analytic) > 2e-3 + 3e-2 * fabs(numeric)) {
                    if (bad++ < 5)
                        fprintf(stderr, "%s: %s/%s[%lld]: backward %.6g, finite difference "
                                "%.6g\n", name, node->name, node->params[k].name, (long long)j,
                                analytic, numeric);
                }
            }
        }
    }
    kiln_replica_write_params(r, p);
    printf("%s: %d parameters checked, %d off\n", name, checked, bad);
    CHECK(bad == 0 && checked > 40);
    free(x);
    free(p);
    free(g);
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    gradcheck(ctx, "dense with a branch and Add", branchy);
    gradcheck(ctx, "conv2d, max pooling, dense", convolutional);
    gradcheck(ctx, "grouped, dilated, padded and depthwise conv2d", pytorch_windows);
    gradcheck(ctx, "zero padding, leaky slope, log_softmax, global max pooling",
              importer_layers);
    gradcheck(ctx, "math ops, hard_sigmoid and hard_silu", math_ops);
    gradcheck(ctx, "residual block with batch norm", residual);
    gradcheck(ctx, "convolutions around a frozen batch norm", frozen_norm);
    gradcheck(ctx, "transposed convolutions: PyTorch's, Keras's, grouped and dilated", decoder);
    gradcheck(ctx, "gelu, silu, layer norm, concatenate, reshape, permute", sequence);
    gradcheck(ctx, "cross- and self-attention", attention);
    gradcheck(ctx, "embedding, position embedding", tokens);
    gradcheck(ctx, "two inputs: ids and floats, concatenated", two_inputs);
    gradcheck(ctx, "two towers meeting in a Dot", towers);
    gradcheck(ctx, "broadcast multiply, layer scale, constant, divide, max, min",
              broadcasting);
    gradcheck(ctx, "LoRA on Dense layers over rows", lora);
    gradcheck(ctx, "attention by hand: batched and broadcast MatMul", matmuls);
    gradcheck(ctx, "slices stepping backwards and by 2, a token expanded", windows_and_repeats);
    /* Last: the models before it draw the random values they drew before. */
    gradcheck(ctx, "softmax along inner axes, reductions", reductions);
    gradcheck(ctx, "LoRA on cross- and self-attention", lora_attention);
    gradcheck(ctx, "a learned class token prepended", class_token);
    gradcheck(ctx, "attention under a padding mask", padded_attention);
    kiln_context_destroy(ctx);
    return test_finish("test_gradcheck");
}
