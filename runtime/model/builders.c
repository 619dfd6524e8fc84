/* The public layer builders (kiln.h): each copies its options and adds a
 * node whose config the layer kind fills from them (its configure op), so
 * layers/ never calls up into the model. A new layer kind adds its
 * builder here. */
#include "layers/layer.h"
#include "layers/pool2d.h"
#include "runtime/model/model.h"

#include <math.h>

/* Copies a builder's options; when their struct_size is too short, keeps
 * why on the model and returns 0. */
static int take_options(kiln_model *m, void *dst, size_t size, const void *src, size_t least,
                        const char *call, const char *name)
{
    kiln_diag why;
    if (kiln_options_take(dst, size, src, least, name, &why) == KILN_OK)
        return 1;
    kiln_model_refuse_layer(m, why.status, call, why.message);
    return 0;
}

/* A builder's options struct that holds nothing but struct_size and name,
 * copied; NULL name when the options are NULL. */
typedef struct name_only {
    size_t struct_size;
    const char *name;
} name_only;

/* The name of options laid out as name_only (every such struct of kiln.h);
 * 0 after keeping why on the model when their struct_size is too short. */
static int take_name(kiln_model *m, const void *options, const char *call, const char *type,
                     const char **name)
{
    name_only o;
    if (!take_options(m, &o, sizeof o, options, sizeof(size_t), call, type))
        return 0;
    *name = o.name;
    return 1;
}

kiln_node kiln_input(kiln_model *model, int32_t rank, const int32_t *dims,
                     const kiln_input_options *options)
{
    const kiln_input_args args = {.rank = rank, .dims = dims};
    const char *name;
    if (!take_name(model, options, "kiln_input", "kiln_input_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_input, &args, NULL, 0, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_input_ints(kiln_model *model, int32_t rank, const int32_t *dims,
                          const kiln_input_options *options)
{
    const kiln_input_args args = {.rank = rank, .dims = dims, .ints = 1};
    const char *name;
    if (!take_name(model, options, "kiln_input_ints", "kiln_input_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_input, &args, NULL, 0, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_dense(kiln_model *model, kiln_node input, const kiln_dense_options *options)
{
    kiln_dense_options o;
    if (!take_options(model, &o, sizeof o, options, offsetof(kiln_dense_options, activation),
                      "kiln_dense", "kiln_dense_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_dense, &o, &input, 1, o.name, o.activation);
}

kiln_node kiln_conv2d(kiln_model *model, kiln_node input, const kiln_conv2d_options *options)
{
    kiln_conv2d_options o;
    if (!take_options(model, &o, sizeof o, options, offsetof(kiln_conv2d_options, strides),
                      "kiln_conv2d", "kiln_conv2d_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_conv2d, &o, &input, 1, o.name,
                                o.activation);
}

kiln_node kiln_conv2d_transpose(kiln_model *model, kiln_node input,
                                const kiln_conv2d_transpose_options *options)
{
    kiln_conv2d_transpose_options o;
    if (!take_options(model, &o, sizeof o, options,
                      offsetof(kiln_conv2d_transpose_options, strides), "kiln_conv2d_transpose",
                      "kiln_conv2d_transpose_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_conv2d_transpose, &o, &input, 1, o.name,
                                o.activation);
}

kiln_node kiln_max_pooling2d(kiln_model *model, kiln_node input,
                             const kiln_pool2d_options *options)
{
    kiln_pool2d_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_max_pooling2d",
                      "kiln_pool2d_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_max_pooling2d, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_average_pooling2d(kiln_model *model, kiln_node input,
                                 const kiln_pool2d_options *options)
{
    kiln_pool2d_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_average_pooling2d",
                      "kiln_pool2d_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_average_pooling2d, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_global_average_pooling2d(kiln_model *model, kiln_node input,
                                         const kiln_global_pool2d_options *options)
{
    const char *name;
    if (!take_name(model, options, "kiln_global_average_pooling2d",
                   "kiln_global_pool2d_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_global_average_pooling2d, NULL, &input, 1,
                                name, KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_global_max_pooling2d(kiln_model *model, kiln_node input,
                                     const kiln_global_pool2d_options *options)
{
    const char *name;
    if (!take_name(model, options, "kiln_global_max_pooling2d", "kiln_global_pool2d_options",
                   &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_global_max_pooling2d, NULL, &input, 1,
                                name, KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_zero_padding2d(kiln_model *model, kiln_node input,
                               const kiln_zero_padding2d_options *options)
{
    /* NULL: Keras's default, one row or column of zeros on each side. */
    kiln_zero_padding2d_options o = {.padding = {1, 1, 1, 1}};
    if (options && !take_options(model, &o, sizeof o, options, sizeof(size_t),
                                 "kiln_zero_padding2d", "kiln_zero_padding2d_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_zero_padding2d, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_batch_normalization(kiln_model *model, kiln_node input,
                                   const kiln_batch_norm_options *options)
{
    kiln_batch_norm_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_batch_normalization",
                      "kiln_batch_norm_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_batch_norm, &o, &input, 1, o.name,
                                o.activation);
}

kiln_node kiln_dropout(kiln_model *model, kiln_node input, const kiln_dropout_options *options)
{
    kiln_dropout_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_dropout",
                      "kiln_dropout_options"))
        return KILN_NODE_INVALID;
    const kiln_dropout_args args = {.rate = o.rate, .seed = o.seed};
    return kiln_model_add_layer(model, &kiln_layer_dropout, &args, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_flatten(kiln_model *model, kiln_node input, const kiln_flatten_options *options)
{
    const char *name;
    if (!take_name(model, options, "kiln_flatten", "kiln_flatten_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_flatten, NULL, &input, 1, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_activation_layer(kiln_model *model, kiln_node input, kiln_activation activation,
                                const kiln_activation_layer_options *options)
{
    kiln_activation_layer_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_activation_layer",
                      "kiln_activation_layer_options"))
        return KILN_NODE_INVALID;
    if (o.negative_slope != 0.0f && activation != KILN_ACTIVATION_LEAKY_RELU)
        return kiln_model_refuse_layer(model, KILN_ERROR_INVALID_ARGUMENT,
                                       "kiln_activation_layer", "negative_slope is leaky_relu's "
                                       "option; the activation is another");
    if (!isfinite(o.negative_slope))
        return kiln_model_refuse_layer(model, KILN_ERROR_INVALID_ARGUMENT,
                                       "kiln_activation_layer", "negative_slope is not finite");
    /* Keras's default slope is the leaky_relu activation itself (fused,
     * saved and exported as every activation); another slope is the
     * layer's own function, the node's activation linear. */
    if (o.negative_slope == 0.2f)
        o.negative_slope = 0.0f;
    return kiln_model_add_layer(model, &kiln_layer_activation, &o, &input, 1, o.name,
                                o.negative_slope != 0.0f ? KILN_ACTIVATION_LINEAR : activation);
}

kiln_node kiln_math(kiln_model *model, kiln_node input, kiln_math_op op,
                    const kiln_math_options *options)
{
    kiln_math_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_math",
                      "kiln_math_options"))
        return KILN_NODE_INVALID;
    /* ONNX's defaults where both are 0 (the layer checks the rest). */
    if (op == KILN_MATH_HARD_SIGMOID && o.alpha == 0.0f && o.beta == 0.0f) {
        o.alpha = 0.2f;
        o.beta = 0.5f;
    }
    const kiln_math_args args = {.op = (int32_t)op, .exponent = o.exponent, .alpha = o.alpha,
                                 .beta = o.beta, .has_min = o.has_min != 0, .min = o.min,
                                 .has_max = o.has_max != 0, .max = o.max};
    return kiln_model_add_layer(model, &kiln_layer_math, &args, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_layer_normalization(kiln_model *model, kiln_node input,
                                   const kiln_layer_norm_options *options)
{
    kiln_layer_norm_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_layer_normalization",
                      "kiln_layer_norm_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_layer_norm, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_reshape(kiln_model *model, kiln_node input, int32_t rank, const int32_t *dims,
                       const kiln_reshape_options *options)
{
    const kiln_reshape_args args = {.rank = rank, .dims = dims};
    const char *name;
    if (!take_name(model, options, "kiln_reshape", "kiln_reshape_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_reshape, &args, &input, 1, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_permute(kiln_model *model, kiln_node input, int32_t rank, const int32_t *dims,
                       const kiln_permute_options *options)
{
    const kiln_permute_args args = {.rank = rank, .dims = dims};
    const char *name;
    if (!take_name(model, options, "kiln_permute", "kiln_permute_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_permute, &args, &input, 1, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_reduce(kiln_model *model, kiln_node input, kiln_reduce_op op, int32_t n_axes,
                      const int32_t *axes, const kiln_reduce_options *options)
{
    kiln_reduce_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_reduce",
                      "kiln_reduce_options"))
        return KILN_NODE_INVALID;
    kiln_reduce_args args = {.op = (int32_t)op, .n_axes = n_axes, .keepdims = o.keepdims != 0,
                             .no_axes = !axes};
    for (int32_t k = 0; axes && k < n_axes && k < KILN_MAX_RANK; k++)
        args.axes[k] = axes[k];
    return kiln_model_add_layer(model, &kiln_layer_reduce, &args, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_softmax(kiln_model *model, kiln_node input, const kiln_softmax_options *options)
{
    kiln_softmax_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_softmax",
                      "kiln_softmax_options"))
        return KILN_NODE_INVALID;
    if (!o.axis)
        o.axis = -1;   /* Keras's default */
    return kiln_model_add_layer(model, &kiln_layer_softmax, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_concatenate(kiln_model *model, const kiln_node *inputs, int32_t n_inputs,
                           const kiln_concatenate_options *options)
{
    kiln_concatenate_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_concatenate",
                      "kiln_concatenate_options"))
        return KILN_NODE_INVALID;
    const kiln_concatenate_args args = {.axis = o.axis ? o.axis : -1};   /* Keras's default */
    return kiln_model_add_layer(model, &kiln_layer_concatenate, &args, inputs,
                                inputs ? (int)n_inputs : 0, o.name, KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_add(kiln_model *model, const kiln_node *inputs, int32_t n_inputs,
                   const kiln_add_options *options)
{
    const char *name;
    if (!take_name(model, options, "kiln_add", "kiln_add_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_add, NULL, inputs, inputs ? (int)n_inputs : 0,
                                name, KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_dot(kiln_model *model, kiln_node a, kiln_node b, const kiln_dot_options *options)
{
    const kiln_node inputs[2] = {a, b};
    const char *name;
    if (!take_name(model, options, "kiln_dot", "kiln_dot_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_dot, NULL, inputs, 2, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_binary(kiln_model *model, kiln_node a, kiln_node b,
                      const kiln_binary_options *options)
{
    const kiln_node inputs[2] = {a, b};
    kiln_binary_options o;
    if (!take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_binary",
                      "kiln_binary_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_binary, &o, inputs, 2, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_binary_param(kiln_model *model, kiln_node x, const kiln_binary_options *options)
{
    kiln_binary_options o;
    if (!take_options(model, &o, sizeof o, options, offsetof(kiln_binary_options, param_dims),
                      "kiln_binary_param", "kiln_binary_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_binary, &o, &x, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_slice(kiln_model *model, kiln_node input, const kiln_slice_options *options)
{
    kiln_slice_options o = {.name = NULL};   /* NULL: every axis whole */
    if (options && !take_options(model, &o, sizeof o, options, sizeof(size_t), "kiln_slice",
                                 "kiln_slice_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_slice, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_expand(kiln_model *model, kiln_node input, int32_t rank, const int32_t *dims,
                      const kiln_expand_options *options)
{
    const kiln_expand_args args = {.rank = rank, .dims = dims};
    const char *name;
    if (!take_name(model, options, "kiln_expand", "kiln_expand_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_expand, &args, &input, 1, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_learned_tokens(kiln_model *model, kiln_node like, int32_t rank,
                              const int32_t *dims, const kiln_learned_tokens_options *options)
{
    const kiln_learned_tokens_args args = {.rank = rank, .dims = dims};
    const char *name;
    if (!take_name(model, options, "kiln_learned_tokens", "kiln_learned_tokens_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_learned_tokens, &args, &like, 1, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_matmul(kiln_model *model, kiln_node a, kiln_node b,
                      const kiln_matmul_options *options)
{
    const kiln_node inputs[2] = {a, b};
    const char *name;
    if (!take_name(model, options, "kiln_matmul", "kiln_matmul_options", &name))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_matmul, NULL, inputs, 2, name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_multi_head_attention(kiln_model *model, kiln_node query, kiln_node value,
                                    const kiln_multi_head_attention_options *options)
{
    kiln_multi_head_attention_options o;
    if (!take_options(model, &o, sizeof o, options,
                      offsetof(kiln_multi_head_attention_options, value_dim),
                      "kiln_multi_head_attention", "kiln_multi_head_attention_options"))
        return KILN_NODE_INVALID;
    const kiln_node inputs[2] = {query, value};
    return kiln_model_add_layer(model, &kiln_layer_multi_head_attention, &o, inputs, 2, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_multi_head_attention_masked(kiln_model *model, kiln_node query, kiln_node value,
                                           kiln_node padding_mask,
                                           const kiln_multi_head_attention_options *options)
{
    kiln_multi_head_attention_options o;
    if (!take_options(model, &o, sizeof o, options,
                      offsetof(kiln_multi_head_attention_options, value_dim),
                      "kiln_multi_head_attention_masked", "kiln_multi_head_attention_options"))
        return KILN_NODE_INVALID;
    const kiln_node inputs[3] = {query, value, padding_mask};
    return kiln_model_add_layer(model, &kiln_layer_multi_head_attention, &o, inputs, 3, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_embedding(kiln_model *model, kiln_node input,
                         const kiln_embedding_options *options)
{
    kiln_embedding_options o;
    if (!take_options(model, &o, sizeof o, options,
                      offsetof(kiln_embedding_options, output_dim) + sizeof(int32_t),
                      "kiln_embedding",
                      "kiln_embedding_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_embedding, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}

kiln_node kiln_position_embedding(kiln_model *model, kiln_node input,
                                  const kiln_position_embedding_options *options)
{
    kiln_position_embedding_options o;
    if (!take_options(model, &o, sizeof o, options,
                      offsetof(kiln_position_embedding_options, max_length) + sizeof(int32_t),
                      "kiln_position_embedding",
                      "kiln_position_embedding_options"))
        return KILN_NODE_INVALID;
    return kiln_model_add_layer(model, &kiln_layer_position_embedding, &o, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}
