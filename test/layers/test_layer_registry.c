/* Every layer kind in the registry (layers/kinds.h) can leave kiln and
 * come back: for each kind, a small model holding it, with every option
 * away from its default, is saved as a model file and loaded, and each
 * layer must come back configured byte for byte as it was (so a kind whose
 * ops table forgets a model-file field fails here), with the same weights
 * and the same predictions; the model must also export to ONNX. The ops
 * tables themselves are checked too: args that fit the description's room,
 * fields inside the args, an export op for every kind but Input. A kind
 * registered without an example below fails: add one with the kind. */
#include "harness.h"
#include "kiln_config.h"
#include "layers/onnx_graph.h"
#include "runtime/model/model.h"

#include <unistd.h>

static char dir[256];

/* Adds a model's one layer of the kind to m after its input(s). */
typedef void (*example_fn)(kiln_model *m);

static kiln_node image(kiln_model *m)
{
    const int32_t dims[] = {7, 6, 3};
    return kiln_input(m, 3, dims, &(kiln_input_options){.name = "pixels"});
}

static kiln_node sequence(kiln_model *m)
{
    const int32_t dims[] = {5, 4};
    return kiln_input(m, 2, dims, &(kiln_input_options){.name = "tokens"});
}

static kiln_node vector(kiln_model *m)
{
    const int32_t dims[] = {6};
    return kiln_input(m, 1, dims, &(kiln_input_options){.name = "features"});
}

/* An Input of ids, so that its dtype field is written. */
static void ex_input(kiln_model *m)
{
    const int32_t dims[] = {2, 3};
    const kiln_embedding_options o = {.struct_size = sizeof o, .input_dim = 5, .output_dim = 2};
    kiln_embedding(m, kiln_input_ints(m, 2, dims, &(kiln_input_options){.name = "ids"}), &o);
}

static void ex_dense(kiln_model *m)
{
    const kiln_dense_options o = {.struct_size = sizeof o, .units = 3, .no_bias = 1,
                                  .activation = KILN_ACTIVATION_TANH};
    kiln_dense(m, vector(m), &o);
}

static void ex_conv2d(kiln_model *m)
{
    const kiln_conv2d_options o = {.struct_size = sizeof o, .filters = 2, .kernel_size = {3, 2},
                                   .strides = {2, 1}, .padding = KILN_PADDING_SAME, .no_bias = 1,
                                   .activation = KILN_ACTIVATION_RELU};
    kiln_conv2d(m, image(m), &o);
}

/* ONNX's attributes, each away from its default, so that a model file
 * that forgot one brings the layer back configured differently. */
static void ex_conv2d_onnx(kiln_model *m)
{
    const kiln_conv2d_options o = {.struct_size = sizeof o, .filters = 3, .kernel_size = {2, 2},
                                   .strides = {1, 2}, .padding = KILN_PADDING_EXPLICIT,
                                   .pads = {1, 0, 2, 1}, .dilations = {2, 1}, .groups = 3};
    kiln_conv2d(m, image(m), &o);
}

static void ex_conv2d_transpose(kiln_model *m)
{
    const kiln_conv2d_transpose_options o = {
        .struct_size = sizeof o, .filters = 2, .kernel_size = {3, 2}, .strides = {2, 1},
        .padding = KILN_PADDING_SAME, .output_padding = {1, 0}, .no_bias = 1,
        .activation = KILN_ACTIVATION_RELU};
    kiln_conv2d_transpose(m, image(m), &o);
}

/* PyTorch's and ONNX's options, each away from its default. */
static void ex_conv2d_transpose_onnx(kiln_model *m)
{
    const kiln_conv2d_transpose_options o = {
        .struct_size = sizeof o, .filters = 6, .kernel_size = {2, 3}, .strides = {3, 2},
        .padding = KILN_PADDING_EXPLICIT, .pads = {1, 0, 2, 1}, .output_padding = {2, 1},
        .dilations = {1, 2}, .groups = 3};
    kiln_conv2d_transpose(m, image(m), &o);
}

static void ex_max_pooling2d(kiln_model *m)
{
    const kiln_pool2d_options o = {.struct_size = sizeof o, .pool_size = {3, 2},
                                   .strides = {1, 2}, .padding = KILN_PADDING_SAME};
    kiln_max_pooling2d(m, image(m), &o);
}

static void ex_average_pooling2d(kiln_model *m)
{
    const kiln_pool2d_options o = {.struct_size = sizeof o, .pool_size = {2, 3},
                                   .strides = {2, 1}, .padding = KILN_PADDING_SAME};
    kiln_average_pooling2d(m, image(m), &o);
}

static void ex_max_pooling2d_onnx(kiln_model *m)
{
    const kiln_pool2d_options o = {.struct_size = sizeof o, .pool_size = {3, 2},
                                   .strides = {2, 2}, .padding = KILN_PADDING_EXPLICIT,
                                   .pads = {1, 0, 2, 1}, .ceil_mode = 1};
    kiln_max_pooling2d(m, image(m), &o);
}

static void ex_average_pooling2d_onnx(kiln_model *m)
{
    const kiln_pool2d_options o = {.struct_size = sizeof o, .pool_size = {3, 3},
                                   .strides = {2, 2}, .padding = KILN_PADDING_EXPLICIT,
                                   .pads = {0, 1, 1, 2}, .ceil_mode = 1,
                                   .count_include_pad = 1};
    kiln_average_pooling2d(m, image(m), &o);
}

static void ex_global_average_pooling2d(kiln_model *m)
{
    kiln_global_average_pooling2d(m, image(m), NULL);
}

static void ex_global_max_pooling2d(kiln_model *m)
{
    kiln_global_max_pooling2d(m, image(m), NULL);
}

static void ex_batch_norm(kiln_model *m)
{
    const kiln_batch_norm_options o = {.struct_size = sizeof o, .momentum = 0.8f,
                                       .epsilon = 3e-3f, .synchronized = 1,
                                       .activation = KILN_ACTIVATION_SIGMOID};
    kiln_batch_normalization(m, image(m), &o);
}

static void ex_dropout(kiln_model *m)
{
    kiln_dropout(m, vector(m), &(kiln_dropout_options){.rate = 0.3f, .seed = 1234567});
}

static void ex_flatten(kiln_model *m)
{
    kiln_flatten(m, image(m), NULL);
}

static void ex_activation(kiln_model *m)
{
    kiln_activation_layer(m, vector(m), KILN_ACTIVATION_SILU, NULL);
}

/* leaky_relu of its own slope: the layer's negative_slope field. */
static void ex_activation_slope(kiln_model *m)
{
    const kiln_activation_layer_options o = {.struct_size = sizeof o, .negative_slope = -0.3f};
    kiln_activation_layer(m, vector(m), KILN_ACTIVATION_LEAKY_RELU, &o);
}

/* hard_sigmoid fused into a Dense, hard_silu as a layer. */
static void ex_activation_hard(kiln_model *m)
{
    const kiln_dense_options o = {.struct_size = sizeof o, .units = 4,
                                  .activation = KILN_ACTIVATION_HARD_SIGMOID};
    kiln_activation_layer(m, kiln_dense(m, vector(m), &o), KILN_ACTIVATION_HARD_SWISH, NULL);
}

/* kiln_math: every op, each with its constants (a bound of 0 too: its
 * has_min flag is what files keep). */
static void math_of(kiln_model *m, kiln_math_op op, const kiln_math_options *o)
{
    kiln_math(m, image(m), op, o);
}

static void ex_math_sqrt(kiln_model *m) { math_of(m, KILN_MATH_SQRT, NULL); }
static void ex_math_reciprocal(kiln_model *m) { math_of(m, KILN_MATH_RECIPROCAL, NULL); }
static void ex_math_neg(kiln_model *m) { math_of(m, KILN_MATH_NEG, NULL); }
static void ex_math_abs(kiln_model *m) { math_of(m, KILN_MATH_ABS, NULL); }
static void ex_math_exp(kiln_model *m) { math_of(m, KILN_MATH_EXP, NULL); }
static void ex_math_log(kiln_model *m) { math_of(m, KILN_MATH_LOG, NULL); }
static void ex_math_erf(kiln_model *m) { math_of(m, KILN_MATH_ERF, NULL); }

static void ex_math_pow(kiln_model *m)
{
    const kiln_math_options o = {.struct_size = sizeof o, .exponent = -1.5f};
    math_of(m, KILN_MATH_POW, &o);
}

static void ex_math_hard_sigmoid(kiln_model *m)
{
    const kiln_math_options o = {.struct_size = sizeof o, .alpha = -0.3f, .beta = 0.4f};
    math_of(m, KILN_MATH_HARD_SIGMOID, &o);
}

static void ex_math_clip(kiln_model *m)
{
    const kiln_math_options o = {.struct_size = sizeof o, .has_min = 1, .min = 0.0f,
                                 .has_max = 1, .max = 0.5f};
    math_of(m, KILN_MATH_CLIP, &o);
}

static void ex_math_clip_max(kiln_model *m)
{
    const kiln_math_options o = {.struct_size = sizeof o, .has_max = 1, .max = -0.25f};
    math_of(m, KILN_MATH_CLIP, &o);
}

static void ex_zero_padding2d(kiln_model *m)
{
    const kiln_zero_padding2d_options o = {.struct_size = sizeof o, .padding = {1, 0, 3, 2}};
    kiln_zero_padding2d(m, image(m), &o);
}

static void ex_add(kiln_model *m)
{
    const kiln_node x = vector(m);
    const kiln_node in[] = {x, kiln_activation_layer(m, x, KILN_ACTIVATION_TANH, NULL), x};
    kiln_add(m, in, 3, NULL);
}

static void ex_dot(kiln_model *m)
{
    const kiln_node x = vector(m);
    kiln_dot(m, x, kiln_activation_layer(m, x, KILN_ACTIVATION_SIGMOID, NULL), NULL);
}

/* Attention's scores: (5, 4) times its own tanh transposed, (4, 5). */
static void ex_matmul(kiln_model *m)
{
    const kiln_node x = sequence(m);
    const int32_t swap[] = {2, 1};
    kiln_matmul(m, x, kiln_permute(m, kiln_activation_layer(m, x, KILN_ACTIVATION_TANH, NULL),
                                   2, swap, NULL), NULL);
}

static void ex_slice(kiln_model *m)
{
    const kiln_slice_options o = {.struct_size = sizeof o, .begin = {6, 1, 2}, .size = {3, 0, 1},
                                  .step = {-2, 2, 0}};
    kiln_slice(m, image(m), &o);
}

static void ex_expand(kiln_model *m)
{
    const int32_t to[] = {2, 5, 4};
    kiln_expand(m, sequence(m), 3, to, NULL);
}

/* Two learned tokens of width 4, repeated over the batch of the (5, 4) tokens. */
static void ex_learned_tokens(kiln_model *m)
{
    const int32_t tokens[] = {2, 4};
    kiln_learned_tokens(m, sequence(m), 2, tokens, NULL);
}

static void ex_layer_norm(kiln_model *m)
{
    const kiln_layer_norm_options o = {.struct_size = sizeof o, .epsilon = 2e-2f,
                                       .no_center = 1};
    kiln_layer_normalization(m, sequence(m), &o);
}

static void ex_reshape(kiln_model *m)
{
    const int32_t to[] = {3, -1};
    kiln_reshape(m, vector(m), 2, to, NULL);
}

static void ex_permute(kiln_model *m)
{
    const int32_t dims[] = {3, 1, 2};
    kiln_permute(m, image(m), 3, dims, NULL);
}

/* Every op, kept and dropped axes, every axis of an image (ReduceSum's
 * axes as an input in the export). */
static void ex_reduce_mean(kiln_model *m)
{
    const int32_t axes[] = {-1, 1};
    const kiln_reduce_options o = {.struct_size = sizeof o, .keepdims = 1};
    kiln_reduce(m, image(m), KILN_REDUCE_MEAN, 2, axes, &o);
}

static void ex_reduce_sum(kiln_model *m)
{
    const int32_t axes[] = {2};
    kiln_reduce(m, image(m), KILN_REDUCE_SUM, 1, axes, NULL);
}

static void ex_reduce_max(kiln_model *m)
{
    const int32_t axes[] = {1, 2, 3};
    kiln_reduce(m, image(m), KILN_REDUCE_MAX, 3, axes, NULL);
}

static void ex_reduce_min(kiln_model *m)
{
    const int32_t axes[] = {1};
    kiln_reduce(m, sequence(m), KILN_REDUCE_MIN, 1, axes, NULL);
}

static void ex_softmax(kiln_model *m)
{
    const kiln_softmax_options o = {.struct_size = sizeof o, .axis = 1};
    kiln_softmax(m, image(m), &o);
}

/* Log softmax from axis 2 through the last: a Reshape around it. */
static void ex_log_softmax_through(kiln_model *m)
{
    const kiln_softmax_options o = {.struct_size = sizeof o, .axis = 2, .through_last = 1,
                                    .log = 1};
    kiln_softmax(m, image(m), &o);
}

static void ex_concatenate(kiln_model *m)
{
    const kiln_node x = sequence(m);
    const kiln_node in[] = {x, kiln_activation_layer(m, x, KILN_ACTIVATION_TANH, NULL)};
    kiln_concatenate(m, in, 2, &(kiln_concatenate_options){.axis = 1});
}

static void ex_multi_head_attention(kiln_model *m)
{
    const kiln_node x = sequence(m);
    const kiln_multi_head_attention_options o = {
        .struct_size = sizeof o, .num_heads = 2, .key_dim = 3, .value_dim = 2, .dropout = 0.1f,
        .seed = 99, .use_causal_mask = 1, .no_bias = 1, .output_shape = 5};
    kiln_multi_head_attention(m, x, x, &o);
}

static void ex_embedding(kiln_model *m)
{
    const int32_t dims[] = {4};
    const kiln_embedding_options o = {.struct_size = sizeof o, .input_dim = 11, .output_dim = 3};
    kiln_embedding(m, kiln_input_ints(m, 1, dims, &(kiln_input_options){.name = "ids"}), &o);
}

static void ex_position_embedding(kiln_model *m)
{
    const kiln_position_embedding_options o = {.struct_size = sizeof o, .max_length = 9};
    kiln_position_embedding(m, sequence(m), &o);
}

/* An image times its channel means: squeeze-and-excitation's broadcast. */
static void ex_binary(kiln_model *m)
{
    const kiln_node x = image(m);
    const kiln_binary_options o = {.struct_size = sizeof o, .op = KILN_BINARY_MULTIPLY};
    kiln_binary(m, x, kiln_global_average_pooling2d(m, x, NULL), &o);
}

/* A constant on the left, every param_* option away from its default. */
static void ex_binary_constant(kiln_model *m)
{
    const kiln_binary_options o = {.struct_size = sizeof o, .op = KILN_BINARY_DIVIDE,
                                   .param_rank = 3, .param_dims = {1, 1, 3}, .param_first = 1,
                                   .param_constant = 1, .param_value = 1.5f};
    kiln_binary_param(m, image(m), &o);
}

/* A trained (T, 1) table minus which a sequence is taken. */
static void ex_binary_param(kiln_model *m)
{
    const kiln_binary_options o = {.struct_size = sizeof o, .op = KILN_BINARY_SUBTRACT,
                                   .param_rank = 2, .param_dims = {5, 1}, .param_value = 0.25f};
    kiln_binary_param(m, sequence(m), &o);
}

static const struct example {
    const char *kind;   /* kiln_layer_ops.kind */
    example_fn build;
} examples[] = {
    {.kind = "input_layer", .build = ex_input},
    {.kind = "dense", .build = ex_dense},
    {.kind = "conv2d", .build = ex_conv2d},
    {.kind = "conv2d", .build = ex_conv2d_onnx},
    {.kind = "conv2d_transpose", .build = ex_conv2d_transpose},
    {.kind = "conv2d_transpose", .build = ex_conv2d_transpose_onnx},
    {.kind = "max_pooling2d", .build = ex_max_pooling2d},
    {.kind = "average_pooling2d", .build = ex_average_pooling2d},
    {.kind = "max_pooling2d", .build = ex_max_pooling2d_onnx},
    {.kind = "average_pooling2d", .build = ex_average_pooling2d_onnx},
    {.kind = "global_average_pooling2d", .build = ex_global_average_pooling2d},
    {.kind = "global_max_pooling2d", .build = ex_global_max_pooling2d},
    {.kind = "batch_normalization", .build = ex_batch_norm},
    {.kind = "dropout", .build = ex_dropout},
    {.kind = "flatten", .build = ex_flatten},
    {.kind = "activation", .build = ex_activation},
    {.kind = "activation", .build = ex_activation_slope},
    {.kind = "add", .build = ex_add},
    {.kind = "dot", .build = ex_dot},
    {.kind = "matmul", .build = ex_matmul},
    {.kind = "slice", .build = ex_slice},
    {.kind = "expand", .build = ex_expand},
    {.kind = "learned_tokens", .build = ex_learned_tokens},
    {.kind = "layer_normalization", .build = ex_layer_norm},
    {.kind = "reshape", .build = ex_reshape},
    {.kind = "concatenate", .build = ex_concatenate},
    {.kind = "permute", .build = ex_permute},
    {.kind = "reduce", .build = ex_reduce_mean},
    {.kind = "reduce", .build = ex_reduce_sum},
    {.kind = "reduce", .build = ex_reduce_max},
    {.kind = "reduce", .build = ex_reduce_min},
    {.kind = "softmax", .build = ex_softmax},
    {.kind = "softmax", .build = ex_log_softmax_through},
    {.kind = "zero_padding2d", .build = ex_zero_padding2d},
    {.kind = "activation", .build = ex_activation_hard},
    {.kind = "math", .build = ex_math_sqrt},
    {.kind = "math", .build = ex_math_reciprocal},
    {.kind = "math", .build = ex_math_neg},
    {.kind = "math", .build = ex_math_abs},
    {.kind = "math", .build = ex_math_exp},
    {.kind = "math", .build = ex_math_log},
    {.kind = "math", .build = ex_math_erf},
    {.kind = "math", .build = ex_math_pow},
    {.kind = "math", .build = ex_math_hard_sigmoid},
    {.kind = "math", .build = ex_math_clip},
    {.kind = "math", .build = ex_math_clip_max},
    {.kind = "multi_head_attention", .build = ex_multi_head_attention},
    {.kind = "embedding", .build = ex_embedding},
    {.kind = "position_embedding", .build = ex_position_embedding},
    {.kind = "binary", .build = ex_binary},
    {.kind = "binary", .build = ex_binary_constant},
    {.kind = "binary", .build = ex_binary_param},
};
#define N_EXAMPLES ((int)(sizeof examples / sizeof examples[0]))

static size_t field_size(kiln_field_type type)
{
    switch (type) {
    case KILN_FIELD_PAIR: return 2 * sizeof(int32_t);
    case KILN_FIELD_QUAD: return 4 * sizeof(int32_t);
    case KILN_FIELD_FLOAT: return sizeof(float);
    case KILN_FIELD_PADDING: return sizeof(kiln_padding);
    case KILN_FIELD_SEED: return sizeof(uint64_t);
    case KILN_FIELD_SHAPE: return sizeof(kiln_input_args);
    default: return sizeof(int32_t);   /* KILN_FIELD_NAME too */
    }
}

/* What the ops table promises of itself. */
static void check_ops(const kiln_layer_ops *ops)
{
    int ok = ops->args_size <= KILN_LAYER_ARGS_MAX;
    /* A kind configured from args describes them back, and files keep them
     * (GlobalAveragePooling2D configures itself from no args). */
    ok = ok && (ops->describe != NULL) == (ops->args_size > 0);
    ok = ok && (ops->args_size == 0 || (ops->configure && ops->n_fields > 0));
    for (int f = 0; ok && f < ops->n_fields; f++)
        ok = ops->fields[f].key && ops->fields[f].offset + field_size(ops->fields[f].type) <=
                                       ops->args_size;
    ok = ok && (ops->export_onnx != NULL) == (ops->min_inputs > 0);
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "kind '%s': args_size %zu, %d fields, configure %s, describe %s, "
                "export %s\n", ops->kind, ops->args_size, ops->n_fields,
                ops->configure ? "set" : "NULL", ops->describe ? "set" : "NULL",
                ops->export_onnx ? "set" : "NULL");
}

static float *predictions(kiln_context *ctx, kiln_model *m, const float *x, int64_t count,
                          int64_t *size)
{
    CHECK_OK(ctx, kiln_model_output_size(m, size));
    float *y = calloc((size_t)(count * *size + 1), sizeof *y);
    CHECK_OK(ctx, test_predict_packed(m, x, count, y, 0));
    return y;
}

static float *weights(kiln_context *ctx, kiln_model *m, int64_t *count)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, count));
    float *w = calloc((size_t)(*count + 1), sizeof *w);
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *count));
    return w;
}

static void round_trip(kiln_context *ctx, const kiln_layer_ops *ops, example_fn build)
{
    kiln_model *m = NULL, *l = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    build(m);
    CHECK(m->graph.n_nodes > 0 &&
          (ops == &kiln_layer_input || m->graph.nodes[m->graph.n_nodes - 1].ops == ops));
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    char path[512], onnx[512];
    snprintf(path, sizeof path, "%s/%s.kiln", dir, ops->kind);
    snprintf(onnx, sizeof onnx, "%s/%s.onnx", dir, ops->kind);
    CHECK_OK(ctx, kiln_model_save(m, path));
    CHECK_OK(ctx, kiln_model_load(ctx, path, &co, &l));
    if (!l) {
        kiln_model_destroy(m);
        return;
    }
    int same = l->graph.n_nodes == m->graph.n_nodes;
    for (int32_t i = 0; same && i < m->graph.n_nodes; i++) {
        const kiln_node_rec *a = &m->graph.nodes[i], *b = &l->graph.nodes[i];
        same = a->ops == b->ops && a->activation == b->activation &&
               memcmp(a->config, b->config, a->ops->config_size) == 0;
        if (!same)
            fprintf(stderr, "kind '%s': layer %d ('%s', %s) is configured differently after "
                    "a model file\n", ops->kind, (int)i, a->name, a->ops->kind);
    }
    CHECK(same);
    int64_t na = 0, nb = 0, sa = 0, sb = 0;
    float *wa = weights(ctx, m, &na), *wb = weights(ctx, l, &nb);
    CHECK(na == nb && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0);
    const int64_t count = 3, in = m->graph.sample_size;
    float *x = calloc((size_t)(count * in), sizeof *x);
    for (int64_t k = 0; k < count * in; k++)
        x[k] = (float)((k * 37 % 19) - 9) / 9.0f;
    for (int32_t k = 0; k < m->graph.n_inputs; k++)   /* ids ride in the floats' place */
        for (int64_t s = 0; m->graph.ids[k].limit > 0 && s < count; s++)
            for (int32_t j = 0; j < m->graph.ids[k].size; j++)
                ((int32_t *)(void *)(x + s * in + m->graph.ids[k].offset))[j] =
                    (int32_t)((s * 5 + j * 3) % m->graph.ids[k].limit);
    float *ya = predictions(ctx, m, x, count, &sa), *yb = predictions(ctx, l, x, count, &sb);
    CHECK(sa == sb && memcmp(ya, yb, (size_t)(count * sa) * sizeof(float)) == 0);
#if KILN_HAVE_ONNX
    CHECK_OK(ctx, kiln_model_export_onnx(m, onnx));
    unlink(onnx);
#endif
    printf("%-26s %d fields, %lld weights, %lld x %lld outputs: model file identical%s\n",
           ops->kind, ops->n_fields, (long long)na, (long long)count, (long long)sa,
           KILN_HAVE_ONNX ? ", ONNX written" : "");
    unlink(path);
    free(x), free(wa), free(wb), free(ya), free(yb);
    kiln_model_destroy(l);
    kiln_model_destroy(m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/kiln_registry_XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    kiln_context *ctx = test_context(7);
    if (!ctx)
        return 1;
    for (int e = 0; e < N_EXAMPLES; e++)
        CHECK(kiln_layer_kind_named(examples[e].kind) != NULL);
    for (int k = 0; k < kiln_layer_kind_count; k++) {
        const kiln_layer_ops *ops = kiln_layer_kinds[k];
        CHECK(kiln_layer_kind_named(ops->kind) == ops);
        check_ops(ops);
        int found = 0;
        for (int e = 0; e < N_EXAMPLES; e++)
            if (strcmp(examples[e].kind, ops->kind) == 0) {
                round_trip(ctx, ops, examples[e].build);
                found++;
            }
        CHECK(found > 0);
        if (!found)
            fprintf(stderr, "kind '%s' has no example in %s: add one\n", ops->kind, __FILE__);
    }
    kiln_context_destroy(ctx);
    rmdir(dir);
    return test_finish("test_layer_registry");
}
