/* Replicas keep gradients for the trainable parameters only (replica.h's
 * n_grad_floats): frozen weights, LoRA's base kernels among them, cost no
 * gradient memory. That is safe only if no layer's backward writes a
 * gradient past that prefix, which a wrong write would do silently (a
 * device buffer has no bounds check), so this test swaps each model's
 * gradient buffer for one as long as all its parameters, fills the part
 * past n_grad_floats with a marker, runs forward, loss and backward, and
 * requires the marker untouched, the trainable gradients written, and
 * kiln_model_memory's gradient bytes to be the buffer's. Three models,
 * every layer kind with parameters frozen somewhere:
 *   lora: Dense (LoRA) -> MultiHeadAttention (LoRA on key and
 *     attention_output) -> Flatten -> Dense;
 *   tokens: int ids -> Embedding, PositionEmbedding, a LearnedTokens row
 *     concatenated, LayerNormalization, a trained scale (binary param),
 *     MultiHeadAttention with LoRA, Dense with LoRA, a Dense, all frozen
 *     whole -> Flatten -> Dense;
 *   conv: Conv2D (trained) -> a frozen Conv2D on each of its paths
 *     (direct, depthwise, strided im2col + GEMM, 3x3 stride 1) ->
 *     Conv2DTranspose and BatchNormalization frozen -> Flatten -> Dense;
 *   frozen stem: the same without the trained Conv2D: a frozen prefix runs
 *     no backward at all, so the buffer holds the trainable prefix only. */
#include "harness.h"
#include "runtime/model/model.h"
#include "runtime/parallel/replica.h"

#define BATCH 3
#define T 5
#define MARKER 0x7fc0beefu   /* a NaN no arithmetic produces */

static void lora_options(kiln_context *ctx, kiln_model *m, const char *layer, int32_t rank,
                         const char *targets)
{
    const kiln_lora_options o = {.struct_size = sizeof o, .rank = rank, .targets = targets};
    CHECK_OK(ctx, kiln_model_enable_lora_with(m, layer, &o));
}

static kiln_node head(kiln_model *m, kiln_node x)
{
    const kiln_dense_options d = {.struct_size = sizeof d, .name = "head", .units = 3,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    return kiln_dense(m, kiln_flatten(m, x, NULL), &d);
}

static kiln_model *lora_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, 4};
    kiln_input(m, 2, dims, NULL);
    const kiln_dense_options d = {.struct_size = sizeof d, .name = "in", .units = 6,
                                  .activation = KILN_ACTIVATION_TANH};
    const kiln_node h = kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    const kiln_multi_head_attention_options a = {.struct_size = sizeof a, .name = "attn",
                                                 .num_heads = 2, .key_dim = 3};
    head(m, kiln_multi_head_attention(m, h, h, &a));
    lora_options(ctx, m, "in", 2, NULL);
    lora_options(ctx, m, "attn", 2, "key,attention_output");
    return m;
}

static kiln_model *tokens_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T};
    const kiln_node ids = kiln_input_ints(m, 1, dims, NULL);
    const kiln_embedding_options e = {.struct_size = sizeof e, .name = "emb", .input_dim = 11,
                                      .output_dim = 8};
    const kiln_position_embedding_options p = {.struct_size = sizeof p, .name = "pos",
                                               .max_length = T};
    const kiln_node x = kiln_position_embedding(m, kiln_embedding(m, ids, &e), &p);
    const int32_t row[] = {1, 8};
    const kiln_learned_tokens_options lt = {.struct_size = sizeof lt, .name = "cls"};
    const kiln_node both[2] = {kiln_learned_tokens(m, x, 2, row, &lt), x};
    const kiln_concatenate_options c = {.struct_size = sizeof c, .axis = 1};
    const kiln_layer_norm_options ln = {.struct_size = sizeof ln, .name = "ln"};
    const kiln_node n = kiln_layer_normalization(m, kiln_concatenate(m, both, 2, &c), &ln);
    const kiln_binary_options s = {.struct_size = sizeof s, .name = "scale",
                                   .op = KILN_BINARY_MULTIPLY, .param_rank = 1,
                                   .param_dims = {8}};
    const kiln_node h = kiln_binary_param(m, n, &s);
    const kiln_multi_head_attention_options a = {.struct_size = sizeof a, .name = "attn",
                                                 .num_heads = 2, .key_dim = 4};
    const kiln_dense_options d = {.struct_size = sizeof d, .name = "mlp", .units = 8,
                                  .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options d2 = {.struct_size = sizeof d2, .name = "mlp2", .units = 8};
    head(m, kiln_dense(m, kiln_dense(m, kiln_multi_head_attention(m, h, h, &a), &d), &d2));
    lora_options(ctx, m, "attn", 2, NULL);
    lora_options(ctx, m, "mlp", 2, NULL);
    static const char *const frozen[] = {"emb", "pos", "cls", "ln", "scale", "attn", "mlp",
                                         "mlp2"};
    for (size_t i = 0; i < sizeof frozen / sizeof frozen[0]; i++)
        CHECK_OK(ctx, kiln_model_set_trainable(m, frozen[i], 0));
    return m;
}

/* `stem`: a trained 1x1 convolution first, so that backward reaches the
 * frozen ones: a convolution on each of Conv2D's paths (direct, depthwise,
 * im2col + GEMM strided, and 3x3 stride 1, Winograd's where it applies)
 * and a Conv2DTranspose. */
static kiln_model *conv_model(kiln_context *ctx, int stem)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 6, 2};
    kiln_input(m, 3, dims, NULL);
    const kiln_conv2d_options s = {.struct_size = sizeof s, .name = "stem", .filters = 2,
                                   .kernel_size = {1, 1}};
    if (stem)
        kiln_conv2d(m, KILN_NODE_PREVIOUS, &s);
    const kiln_conv2d_options convs[] = {
        {.struct_size = sizeof convs[0], .name = "conv", .filters = 4, .kernel_size = {3, 3}},
        {.struct_size = sizeof convs[0], .name = "depthwise", .filters = 4,
         .kernel_size = {3, 3}, .padding = KILN_PADDING_SAME, .groups = 4},
        {.struct_size = sizeof convs[0], .name = "strided", .filters = 8, .kernel_size = {3, 3},
         .strides = {2, 2}, .padding = KILN_PADDING_SAME},
        {.struct_size = sizeof convs[0], .name = "square", .filters = 8, .kernel_size = {3, 3},
         .padding = KILN_PADDING_SAME},
    };
    for (int i = 0; i < 4; i++) {
        kiln_conv2d(m, KILN_NODE_PREVIOUS, &convs[i]);
        CHECK_OK(ctx, kiln_model_set_trainable(m, convs[i].name, 0));
    }
    const kiln_conv2d_transpose_options t = {.struct_size = sizeof t, .name = "up",
                                             .filters = 4, .kernel_size = {2, 2},
                                             .strides = {2, 2}};
    const kiln_batch_norm_options b = {.struct_size = sizeof b, .name = "bn"};
    head(m, kiln_batch_normalization(m, kiln_conv2d_transpose(m, KILN_NODE_PREVIOUS, &t), &b));
    CHECK_OK(ctx, kiln_model_set_trainable(m, "up", 0));
    CHECK_OK(ctx, kiln_model_set_trainable(m, "bn", 0));
    return m;
}

/* Compiles, checks the memory report, and runs one backward into a
 * full-length gradient buffer whose tail past n_grad_floats holds MARKER,
 * which must stay. `beyond`: the buffer reaches past the trainable
 * prefix (to a convolution's frozen weights). */
static void check(kiln_context *ctx, const char *name, kiln_model *m, int beyond)
{
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled)
        return;
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    const size_t all = r->n_floats, kept = r->n_grad_floats;
    kiln_memory_report mem = {.struct_size = sizeof mem};
    CHECK_OK(ctx, kiln_model_memory(m, 0, &mem));
    CHECK(mem.gradient_bytes == kept * sizeof(float));
    CHECK(kept < all && (kept > r->n_trainable) == beyond && kept >= r->n_trainable);
    /* A buffer of every parameter's length in place of the replica's. */
    uint32_t *probe = malloc(all * sizeof *probe);
    for (size_t i = 0; i < all; i++)
        probe[i] = i < kept ? 0u : MARKER;
    kiln_buffer *full = NULL;
    CHECK_OK(ctx, kiln_buffer_create(r->dev, all * sizeof(float), "a probe", &full));
    CHECK_OK(ctx, kiln_buffer_write(r->dev, full, 0, probe, all * sizeof(float), 1));
    kiln_buffer_destroy(r->grads);
    r->grads = full;

    const int64_t in = m->graph.sample_size;
    float *x = malloc(sizeof(float) * (size_t)(BATCH * in));
    for (int64_t i = 0; i < BATCH * in; i++)
        x[i] = (float)((i * 37) % 19) / 19.0f - 0.4f;
    if (m->graph.input_ints)
        for (int64_t i = 0; i < BATCH * in; i++)
            ((int32_t *)(void *)x)[i] = (int32_t)((i * 7) % 11);
    const int32_t labels[BATCH] = {2, 0, 1};
    const kiln_batch b = {.n = BATCH, .features = x, .labels = labels};
    CHECK_OK(ctx, kiln_replica_upload(r, &b));
    CHECK_OK(ctx, kiln_replica_forward(r, BATCH, 1));
    CHECK_OK(ctx, kiln_replica_loss(r, BATCH, 1.0f / BATCH));
    CHECK_OK(ctx, kiln_replica_backward(r, BATCH, NULL, NULL));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, full, 0, probe, all * sizeof(float)));
    size_t touched = 0, written = 0;
    for (size_t i = kept; i < all; i++)
        touched += probe[i] != MARKER;
    for (size_t i = 0; i < r->n_trainable; i++)
        written += probe[i] != 0u;
    printf("%s: %zu trainable floats, gradients for %zu of %zu parameter floats (%zu bytes "
           "saved); written past them: %zu\n", name, r->n_trainable, kept, all,
           (all - kept) * sizeof(float), touched);
    CHECK(touched == 0 && written > 0);
    free(probe);
    free(x);
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    check(ctx, "lora", lora_model(ctx), 0);
    check(ctx, "tokens", tokens_model(ctx), 0);
    check(ctx, "conv", conv_model(ctx, 1), 0);
    check(ctx, "frozen stem", conv_model(ctx, 0), 0);
    kiln_context_destroy(ctx);
    return test_finish("test_gradient_memory");
}
