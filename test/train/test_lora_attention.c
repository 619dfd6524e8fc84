/* LoRA (kiln_model_enable_lora) on MultiHeadAttention: in (5, 4) ->
 * Dense(6, tanh) -> causal self-attention (2 heads, key_dim 3, value_dim
 * 2) with LoRA rank 2, alpha 4 on it, trained 5 SGD steps. Every kernel
 * of the attention and the key and output biases unchanged bit for bit,
 * the query and value biases and the adapters trained; tensor_info's
 * trainability; Adam's slots for the trainable tensors only; predict
 * after kiln_model_save -> kiln_model_load (the merged kernels, four
 * tensors fewer) equal to predict before; kiln_save_options.
 * keep_lora_adapters's round trip, training on identically; the same with
 * kiln_model_enable_lora_with's targets "key,attention_output" (the query
 * and value projections then frozen whole), and the default named; the
 * refusals; an older caller's kiln_lora_options (no targets: the
 * default); mirrored and the pipeline on two devices equal to one device,
 * with either targets. With --dump DIR [TARGETS] it writes the data, the
 * initial and the trained tensors for torch_lora_attention.py
 * (lora_attention_parity.sh; B set away from zeros first), which trains
 * the same in PyTorch with the kernels W + (alpha/r)·A·B written by hand.
 * The adapters' gradients against finite differences are test_gradcheck's. */
#include "harness.h"
#include "parity_dump.h"

#include <stddef.h>
#include <unistd.h>

#define BATCH 4
#define T 5
#define IN 4
#define WIDTH 6
#define RANK 2
#define ALPHA 4.0f
#define STEPS 5
#define LR 0.1f

static float xs[STEPS][BATCH * T * IN], ys[STEPS][BATCH * T * WIDTH];

static void make_data(void)
{
    uint32_t seed = 11;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH * T * IN; i++) {
            seed = seed * 1664525u + 1013904223u;
            xs[s][i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
        }
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH * T; i++)
            for (int j = 0; j < WIDTH; j++)
                ys[s][i * WIDTH + j] = sinf(2.0f * xs[s][i * IN + j % IN]) + 0.25f * (float)j;
}

/* lora: 0 none, 1 on the attention (its targets `targets`, NULL: the
 * default), 2 on the Dense too. */
static kiln_model *build_targets(kiln_context *ctx, kiln_optimizer_kind kind, int lora,
                                 const char *targets, kiln_strategy strategy)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, IN};
    kiln_input(m, 2, dims, NULL);
    const kiln_dense_options d = {.struct_size = sizeof d, .name = "in", .units = WIDTH,
                                  .activation = KILN_ACTIVATION_TANH};
    const kiln_node h = kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    const kiln_multi_head_attention_options a = {
        .struct_size = sizeof a, .name = "attn", .num_heads = 2, .key_dim = 3, .value_dim = 2,
        .use_causal_mask = 1};
    kiln_multi_head_attention(m, h, h, &a);
    const kiln_lora_options lo = {.struct_size = sizeof lo, .rank = RANK, .alpha = ALPHA,
                                  .targets = targets};
    if (lora && targets)
        CHECK_OK(ctx, kiln_model_enable_lora_with(m, "attn", &lo));
    else if (lora)
        CHECK_OK(ctx, kiln_model_enable_lora(m, "attn", RANK, ALPHA));
    if (lora > 1)   /* the Dense too, alpha 0: the rank */
        CHECK_OK(ctx, kiln_model_enable_lora(m, "in", 3, 0.0f));
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = kind,
                                      .learning_rate = kind == KILN_OPTIMIZER_SGD ? LR : 0.0f};
    const int pipeline = strategy == KILN_STRATEGY_PIPELINE;
    const kiln_compile_options co = {
        .struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o,
        .strategy = strategy, .replicas = strategy == KILN_STRATEGY_MIRRORED ? 2 : 0,
        .pipeline_stages = pipeline ? 2 : 0, .micro_batches = pipeline ? 2 : 0};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_model *build_on(kiln_context *ctx, kiln_optimizer_kind kind, int lora,
                            kiln_strategy strategy)
{
    return build_targets(ctx, kind, lora, NULL, strategy);
}

static kiln_model *build(kiln_context *ctx, kiln_optimizer_kind kind, int lora)
{
    return build_on(ctx, kind, lora, KILN_STRATEGY_ONE_DEVICE);
}

static void train(kiln_context *ctx, kiln_model *m, int s)
{
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[s],
                                 .dense_labels = ys[s]};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, NULL));
}

/* Tensor `name`'s values (at most 64). */
static void tensor(kiln_context *ctx, kiln_model *m, const char *name, float *out, int64_t n)
{
    CHECK_OK(ctx, kiln_model_get_tensor(m, name, out, n));
}

static int same(kiln_context *ctx, kiln_model *m, const char *name, const float *before,
                int64_t n)
{
    float now[64];
    tensor(ctx, m, name, now, n);
    return memcmp(now, before, (size_t)n * sizeof(float)) == 0;
}

/* The largest |v[i]|. A plain comparison, not fmax: the aarch64 cross
 * compiler (Debian's GCC 12) stops with an internal error vectorising an
 * fmax reduction over these arrays. */
static double largest_magnitude(const float *v, int n)
{
    double most = 0.0;
    for (int i = 0; i < n; i++) {
        const double a = fabs((double)v[i]);
        if (a > most)
            most = a;
    }
    return most;
}

/* save -> load: the merged kernels, `adapters` tensors fewer, the same
 * predictions. */
static void check_merged_file(kiln_context *ctx, kiln_model *m, const char *dir, int adapters)
{
    float y[BATCH * T * WIDTH], y_loaded[BATCH * T * WIDTH];
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[1]};
    CHECK_OK(ctx, kiln_model_predict(m, &b, y, 0));
    char path[600];
    snprintf(path, sizeof path, "%s/lora_attention.kiln", dir);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *loaded = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    if (loaded) {
        CHECK_OK(ctx, kiln_model_predict(loaded, &b, y_loaded, 0));
        const double d = test_difference(y_loaded, y, sizeof(float), BATCH * T * WIDTH,
                                         TEST_PER_VALUE, NULL);
        int32_t n_loaded = 0;
        CHECK_OK(ctx, kiln_model_tensor_count(loaded, &n_loaded));
        printf("save -> load: %d tensors of %d (adapters merged), predictions within %.2e\n",
               (int)n_loaded, (int)count, d);
        CHECK(n_loaded == count - adapters && d < 1e-6);
        kiln_model_destroy(loaded);
    }
    remove(path);
}

static void test_training(kiln_context *ctx, const char *dir)
{
    kiln_model *m = build(ctx, KILN_OPTIMIZER_SGD, 1);
    static const struct { const char *name; int64_t size; int frozen; } watched[] = {
        {.name = "attn/query/kernel", .size = WIDTH * 2 * 3, .frozen = 1},
        {.name = "attn/value/kernel", .size = WIDTH * 2 * 2, .frozen = 1},
        {.name = "attn/key/kernel", .size = WIDTH * 2 * 3, .frozen = 1},
        {.name = "attn/attention_output/kernel", .size = 2 * 2 * WIDTH, .frozen = 1},
        {.name = "attn/key/bias", .size = 2 * 3, .frozen = 1},
        {.name = "attn/attention_output/bias", .size = WIDTH, .frozen = 1},
        {.name = "attn/query/bias", .size = 2 * 3},
        {.name = "attn/value/bias", .size = 2 * 2},
        {.name = "attn/query/lora_kernel_a", .size = WIDTH * 2 * RANK},
        {.name = "attn/query/lora_kernel_b", .size = RANK * 3},
        {.name = "attn/value/lora_kernel_a", .size = WIDTH * 2 * RANK},
        {.name = "attn/value/lora_kernel_b", .size = RANK * 2},
    };
    enum { n_watched = sizeof watched / sizeof watched[0] };
    float before[n_watched][64];
    for (int i = 0; i < n_watched; i++)
        tensor(ctx, m, watched[i].name, before[i], watched[i].size);
    /* Keras 3's initialisers: A HeUniform over fans 6 x 2, B zeros. */
    const double a_max = largest_magnitude(before[8], WIDTH * 2 * RANK);
    const double b_max = largest_magnitude(before[9], RANK * 3);
    CHECK(a_max > 0.5 * sqrt(6.0 / 12) && a_max <= sqrt(6.0 / 12) && b_max == 0.0);
    for (int s = 0; s < STEPS; s++)
        train(ctx, m, s);
    for (int i = 0; i < n_watched; i++) {
        const int kept = same(ctx, m, watched[i].name, before[i], watched[i].size);
        printf("%-30s %s\n", watched[i].name, kept ? "unchanged bit for bit" : "trained");
        CHECK(kept == watched[i].frozen);
    }

    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    int64_t frozen = 0;
    for (int32_t t = 0; t < count; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, t, &info));
        const int trains = strncmp(info.name, "in/", 3) == 0 || strstr(info.name, "lora_") ||
                           strcmp(info.name, "attn/query/bias") == 0 ||
                           strcmp(info.name, "attn/value/bias") == 0;
        CHECK(info.trainable == trains);
        frozen += info.trainable ? 0 : info.size;
    }
    CHECK(frozen == WIDTH * 2 * 3 * 2 + WIDTH * 2 * 2 + 2 * 2 * WIDTH + 2 * 3 + WIDTH);

    check_merged_file(ctx, m, dir, 4);
    kiln_model_destroy(m);
}

/* Adam's two slots hold the trainable tensors (each padded to 16 floats),
 * not the frozen query and value kernels. */
static void test_memory(kiln_context *ctx)
{
    uint64_t optimizer[3] = {0};
    for (int lora = 0; lora < 3; lora++) {
        kiln_model *m = build_targets(ctx, KILN_OPTIMIZER_ADAM, lora > 0,
                                      lora == 2 ? "query,key,value,attention_output" : NULL,
                                      KILN_STRATEGY_ONE_DEVICE);
        kiln_memory_report mem = {.struct_size = sizeof mem};
        CHECK_OK(ctx, kiln_model_memory(m, 0, &mem));
        int32_t count = 0;
        CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
        uint64_t padded = 0;
        for (int32_t t = 0; t < count; t++) {
            kiln_parameter_info info = {.struct_size = sizeof info};
            CHECK_OK(ctx, kiln_model_tensor_info(m, t, &info));
            padded += info.trainable ? (uint64_t)(info.size + 15) / 16 * 16 * 4 : 0;
        }
        CHECK(mem.optimizer_bytes == 2 * padded);
        optimizer[lora] = mem.optimizer_bytes;
        kiln_model_destroy(m);
    }
    printf("Adam's slots: %llu bytes, with LoRA %llu, on all four projections %llu\n",
           (unsigned long long)optimizer[0], (unsigned long long)optimizer[1],
           (unsigned long long)optimizer[2]);
    CHECK(optimizer[1] < optimizer[2]);   /* this small a layer: more than full training */
}

static void test_refusals(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, IN};
    kiln_input(m, 2, dims, NULL);
    const kiln_layer_norm_options ln = {.struct_size = sizeof ln, .name = "norm"};
    const kiln_node h = kiln_layer_normalization(m, KILN_NODE_PREVIOUS, &ln);
    const kiln_multi_head_attention_options a = {.struct_size = sizeof a, .name = "attn",
                                                 .num_heads = 2, .key_dim = 3};
    kiln_multi_head_attention(m, h, h, &a);
    const kiln_dense_options fc = {.struct_size = sizeof fc, .name = "fc", .units = 2};
    kiln_dense(m, KILN_NODE_PREVIOUS, &fc);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "rank must be > 0, got 0",
                kiln_model_enable_lora(m, "attn", 0, 0.0f));
    /* kiln_model_enable_lora_with's: each leaves the layer as it was. */
    static const struct { const char *targets, *needle; } bad[] = {
        {.targets = "", .needle = "layer 'attn': targets is empty; name one or more of query, "
                                  "key, value and attention_output"},
        {.targets = "query,,value", .needle = "targets 'query,,value' has an empty name"},
        {.targets = "value,", .needle = "targets 'value,' has an empty name"},
        {.targets = "query,keys", .needle = "targets 'query,keys' names 'keys', which is no "
                                            "projection of a MultiHeadAttention"},
        {.targets = "query, value", .needle = "names ' value', which is no projection"},
        {.targets = "output", .needle = "names 'output', which is no projection"},
        {.targets = "value,query,value", .needle = "targets 'value,query,value' names 'value' "
                                                   "twice"},
        {.targets = "query,key,value,attention_output,query,key,value,attention_output",
         .needle = "is 65 characters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const kiln_lora_options o = {.struct_size = sizeof o, .rank = 2,
                                     .targets = bad[i].targets};
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[i].needle,
                    kiln_model_enable_lora_with(m, "attn", &o));
    }
    const kiln_lora_options on_dense = {.struct_size = sizeof on_dense, .rank = 2,
                                        .targets = "query"};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'fc': targets 'query' are given, but a "
                "Dense has one kernel to adapt", kiln_model_enable_lora_with(m, "fc", &on_dense));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_enable_lora_with: options is NULL",
                kiln_model_enable_lora_with(m, "attn", NULL));
    const kiln_lora_options short_size = {.struct_size = sizeof(size_t), .rank = 2};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_lora_options.struct_size",
                kiln_model_enable_lora_with(m, "attn", &short_size));
    const kiln_lora_options no_rank = {.struct_size = sizeof no_rank, .targets = "key"};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "rank must be > 0, got 0",
                kiln_model_enable_lora_with(m, "attn", &no_rank));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "alpha must be finite and > 0",
                kiln_model_enable_lora(m, "attn", 2, -3.0f));
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED,
                "layer 'norm' (layer_normalization) has no LoRA; it adapts Dense and MultiHeadAttention",
                kiln_model_enable_lora(m, "norm", 2, 0.0f));
    /* After the refusals: the targets as given, nothing else. */
    const kiln_lora_options key = {.struct_size = sizeof key, .rank = 2, .targets = "key"};
    CHECK_OK(ctx, kiln_model_enable_lora_with(m, "attn", &key));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "layer 'attn' has LoRA already",
                kiln_model_enable_lora(m, "attn", 4, 0.0f));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "kiln_model_enable_lora_with: layer 'attn' has LoRA "
                "already", kiln_model_enable_lora_with(m, "attn", &key));
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    float a_values[IN * 2 * 2];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "attn/key/lora_kernel_a", a_values, IN * 2 * 2));
    CHECK(kiln_model_get_tensor(m, "attn/query/lora_kernel_a", a_values, IN * 2 * 2) ==
          KILN_ERROR_INVALID_ARGUMENT);
    CHECK(kiln_model_get_tensor(m, "fc/lora_kernel_a", a_values, 4) ==
          KILN_ERROR_INVALID_ARGUMENT);
    kiln_model_destroy(m);
}

/* A caller built before kiln_lora_options had targets: its struct_size
 * ends at alpha, and whatever lies past it is not read (the default). */
static void test_older_caller(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, IN};
    const kiln_node x = kiln_input(m, 2, dims, NULL);
    const kiln_multi_head_attention_options a = {.struct_size = sizeof a, .name = "attn",
                                                 .num_heads = 2, .key_dim = 3};
    kiln_multi_head_attention(m, x, x, &a);
    const kiln_lora_options older = {.struct_size = offsetof(kiln_lora_options, targets),
                                     .rank = 2, .targets = "not read"};
    CHECK_OK(ctx, kiln_model_enable_lora_with(m, "attn", &older));
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    float v[IN * 2 * 2];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "attn/query/lora_kernel_a", v, IN * 2 * 2));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "attn/value/lora_kernel_a", v, IN * 2 * 2));
    CHECK(kiln_model_get_tensor(m, "attn/key/lora_kernel_a", v, IN * 2 * 2) ==
          KILN_ERROR_INVALID_ARGUMENT);
    kiln_model_destroy(m);
}

static void weights_of(kiln_context *ctx, kiln_model *m, float **w, int64_t *n)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    *w = calloc((size_t)*n, sizeof **w);
    CHECK_OK(ctx, kiln_model_get_weights(m, *w, *n));
}

static unsigned char *read_all(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *bytes = NULL;
    *size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (bytes = malloc((size_t)*size + 1)) && fread(bytes, 1, (size_t)*size, f) != (size_t)*size)
        *size = -1;
    if (f)
        fclose(f);
    return bytes;
}

/* kiln_model_enable_lora_with's targets "key,attention_output": the query
 * and value projections frozen whole, every kernel frozen, the key and
 * output biases and adapters trained (A HeUniform over the key's fans 6 x
 * 2 and the output's 2 x 2, B zeros); tensor_info's trainability; save ->
 * load merged; kept apart, the description names the targets and the
 * model loads with the same tensors, predicting and training on bit for
 * bit; a file whose targets no longer name projections is refused. The
 * default written out in another order ("value,query") trains as the
 * default bit for bit. */
static void test_targets(kiln_context *ctx, const char *dir)
{
    const char *targets = "key,attention_output";
    kiln_model *m = build_targets(ctx, KILN_OPTIMIZER_SGD, 1, targets, KILN_STRATEGY_ONE_DEVICE);
    static const struct { const char *name; int64_t size; int frozen; } watched[] = {
        {.name = "attn/query/kernel", .size = WIDTH * 2 * 3, .frozen = 1},
        {.name = "attn/value/kernel", .size = WIDTH * 2 * 2, .frozen = 1},
        {.name = "attn/key/kernel", .size = WIDTH * 2 * 3, .frozen = 1},
        {.name = "attn/attention_output/kernel", .size = 2 * 2 * WIDTH, .frozen = 1},
        {.name = "attn/query/bias", .size = 2 * 3, .frozen = 1},
        {.name = "attn/value/bias", .size = 2 * 2, .frozen = 1},
        {.name = "attn/key/bias", .size = 2 * 3},
        {.name = "attn/attention_output/bias", .size = WIDTH},
        {.name = "attn/key/lora_kernel_a", .size = WIDTH * 2 * RANK},
        {.name = "attn/key/lora_kernel_b", .size = RANK * 3},
        {.name = "attn/attention_output/lora_kernel_a", .size = 2 * 2 * RANK},
        {.name = "attn/attention_output/lora_kernel_b", .size = RANK * WIDTH},
    };
    enum { n_watched = sizeof watched / sizeof watched[0] };
    float before[n_watched][64];
    for (int i = 0; i < n_watched; i++)
        tensor(ctx, m, watched[i].name, before[i], watched[i].size);
    float none[64];
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "attn/query/lora_kernel_a",
                kiln_model_get_tensor(m, "attn/query/lora_kernel_a", none, WIDTH * 2 * RANK));
    const double key_a = largest_magnitude(before[8], WIDTH * 2 * RANK);
    const double out_a = largest_magnitude(before[10], 2 * 2 * RANK);
    const double zeros = largest_magnitude(before[9], RANK * 3) +
                         largest_magnitude(before[11], RANK * WIDTH);
    CHECK(key_a > 0.5 * sqrt(6.0 / 12) && key_a <= sqrt(6.0 / 12));
    CHECK(out_a > 0.3 * sqrt(6.0 / 4) && out_a <= sqrt(6.0 / 4) && zeros == 0.0);
    for (int s = 0; s < STEPS; s++)
        train(ctx, m, s);
    for (int i = 0; i < n_watched; i++) {
        const int kept = same(ctx, m, watched[i].name, before[i], watched[i].size);
        printf("targets %s: %-36s %s\n", targets, watched[i].name,
               kept ? "unchanged bit for bit" : "trained");
        CHECK(kept == watched[i].frozen);
    }
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    CHECK(count == 14);   /* the Dense's 2, the attention's 8, 4 adapters */
    for (int32_t t = 0; t < count; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, t, &info));
        const int trains = strncmp(info.name, "in/", 3) == 0 || strstr(info.name, "lora_") ||
                           strcmp(info.name, "attn/key/bias") == 0 ||
                           strcmp(info.name, "attn/attention_output/bias") == 0;
        CHECK(info.trainable == trains);
    }
    check_merged_file(ctx, m, dir, 4);

    /* Kept apart: the targets travel in the description. */
    char path[600];
    snprintf(path, sizeof path, "%s/targets.kiln", dir);
    const kiln_save_options keep = {.struct_size = sizeof keep, .keep_lora_adapters = 1};
    CHECK_OK(ctx, kiln_model_save_with(m, path, &keep));
    kiln_model *loaded = NULL;
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, path, &one, &loaded));
    if (loaded) {
        int32_t n_loaded = 0;
        CHECK_OK(ctx, kiln_model_tensor_count(loaded, &n_loaded));
        CHECK(n_loaded == count);
        for (int32_t t = 0; t < count && t < n_loaded; t++) {
            kiln_parameter_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
            CHECK_OK(ctx, kiln_model_tensor_info(m, t, &a));
            CHECK_OK(ctx, kiln_model_tensor_info(loaded, t, &b));
            CHECK(strcmp(a.name, b.name) == 0 && a.trainable == b.trainable);
        }
        float y[BATCH * T * WIDTH], y_loaded[BATCH * T * WIDTH];
        const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[3]};
        CHECK_OK(ctx, kiln_model_predict(m, &b, y, 0));
        CHECK_OK(ctx, kiln_model_predict(loaded, &b, y_loaded, 0));
        CHECK(memcmp(y, y_loaded, sizeof y) == 0);
        train(ctx, m, 0);
        train(ctx, loaded, 0);
        float *w = NULL, *w_loaded = NULL;
        int64_t n = 0, n2 = 0;
        weights_of(ctx, m, &w, &n);
        weights_of(ctx, loaded, &w_loaded, &n2);
        const int equal = n == n2 && memcmp(w, w_loaded, (size_t)n * sizeof *w) == 0;
        printf("targets %s kept apart: %d tensors loaded back, a step on each equal bit for "
               "bit: %s\n", targets, (int)n_loaded, equal ? "yes" : "NO");
        CHECK(equal);
        free(w);
        free(w_loaded);
        kiln_model_destroy(loaded);
    }
    /* The same file with the targets misspelt (same length): refused. */
    long size = 0;
    unsigned char *bytes = read_all(path, &size);
    unsigned char *at = NULL;
    for (long i = 0; bytes && i + 20 <= size && !at; i++)
        if (memcmp(bytes + i, "key,attention_output", 20) == 0)
            at = bytes + i;
    CHECK(at != NULL);
    if (at) {
        memcpy(at, "key,attention_outpux", 20);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(bytes, 1, (size_t)size, f) == (size_t)size);
        if (f)
            fclose(f);
        loaded = NULL;
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "names 'attention_outpux', which is no projection",
                    kiln_model_load(ctx, path, &one, &loaded));
        CHECK(loaded == NULL);
    }
    free(bytes);
    remove(path);
    kiln_model_destroy(m);

    /* The default, named: the same adapters in the same places. */
    kiln_model *named = build_targets(ctx, KILN_OPTIMIZER_SGD, 1, "value,query",
                                      KILN_STRATEGY_ONE_DEVICE);
    kiln_model *plain = build(ctx, KILN_OPTIMIZER_SGD, 1);
    for (int s = 0; s < STEPS; s++) {
        train(ctx, named, s);
        train(ctx, plain, s);
    }
    float *w = NULL, *w_plain = NULL;
    int64_t n = 0, n2 = 0;
    weights_of(ctx, named, &w, &n);
    weights_of(ctx, plain, &w_plain, &n2);
    CHECK(n == n2 && memcmp(w, w_plain, (size_t)n * sizeof *w) == 0);
    free(w);
    free(w_plain);
    kiln_model_destroy(named);
    kiln_model_destroy(plain);
}

/* kiln_save_options.keep_lora_adapters: LoRA on the Dense and the
 * attention, 2 steps, saved with the adapters apart and loaded: the same
 * tensors, trainability, weights and predictions bit for bit, and 3 more
 * SGD steps on both give the same weights bit for bit; a checkpoint loads
 * as the LoRA model too. A model without
 * LoRA writes the same bytes either way; a bad struct_size is refused. */
static void test_keep_adapters(kiln_context *ctx, const char *dir)
{
    kiln_model *m = build(ctx, KILN_OPTIMIZER_SGD, 2);
    for (int s = 0; s < 2; s++)
        train(ctx, m, s);
    char path[600];
    snprintf(path, sizeof path, "%s/adapters.kiln", dir);
    const kiln_save_options keep = {.struct_size = sizeof keep, .keep_lora_adapters = 1};
    CHECK_OK(ctx, kiln_model_save_with(m, path, &keep));
    kiln_model *loaded = NULL;
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, path, &one, &loaded));
    if (!loaded) {
        kiln_model_destroy(m);
        return;
    }
    int32_t count = 0, n_loaded = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    CHECK_OK(ctx, kiln_model_tensor_count(loaded, &n_loaded));
    CHECK(count == n_loaded && count == 16);
    for (int32_t t = 0; t < count && t < n_loaded; t++) {
        kiln_parameter_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
        CHECK_OK(ctx, kiln_model_tensor_info(m, t, &a));
        CHECK_OK(ctx, kiln_model_tensor_info(loaded, t, &b));
        CHECK(strcmp(a.name, b.name) == 0 && a.trainable == b.trainable && a.size == b.size);
    }
    float y[BATCH * T * WIDTH], y_loaded[BATCH * T * WIDTH];
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[4]};
    CHECK_OK(ctx, kiln_model_predict(m, &b, y, 0));
    CHECK_OK(ctx, kiln_model_predict(loaded, &b, y_loaded, 0));
    CHECK(memcmp(y, y_loaded, sizeof y) == 0);
    for (int s = 2; s < STEPS; s++) {
        train(ctx, m, s);
        train(ctx, loaded, s);
    }
    float *w = NULL, *w_loaded = NULL;
    int64_t n = 0, n2 = 0;
    weights_of(ctx, m, &w, &n);
    weights_of(ctx, loaded, &w_loaded, &n2);
    const int same = n == n2 && memcmp(w, w_loaded, (size_t)n * sizeof *w) == 0;
    printf("adapters kept apart: %d tensors loaded back (the Dense's and the attention's "
           "adapters trainable, their kernels frozen), predictions equal bit for bit, 3 more "
           "steps equal bit for bit: %s\n", (int)n_loaded, same ? "yes" : "NO");
    CHECK(same);
    free(w);
    free(w_loaded);
    kiln_model_destroy(loaded);

    /* A checkpoint keeps the adapters too, and describes them: it loads
     * as the same LoRA model. */
    CHECK_OK(ctx, kiln_model_save_checkpoint(m, path));
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
    if (loaded) {
        CHECK_OK(ctx, kiln_model_tensor_count(loaded, &n_loaded));
        CHECK(n_loaded == count);
        kiln_model_destroy(loaded);
    }

    const kiln_save_options bad = {.struct_size = 1};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_save_options.struct_size",
                kiln_model_save_with(m, path, &bad));
    kiln_model_destroy(m);

    kiln_model *plain = build(ctx, KILN_OPTIMIZER_SGD, 0);
    char other[600];
    snprintf(other, sizeof other, "%s/plain.kiln", dir);
    CHECK_OK(ctx, kiln_model_save_with(plain, path, &keep));
    CHECK_OK(ctx, kiln_model_save(plain, other));
    long size_a = 0, size_b = 0;
    unsigned char *a = read_all(path, &size_a), *bb = read_all(other, &size_b);
    CHECK(a && bb && size_a == size_b && size_a > 0 && memcmp(a, bb, (size_t)size_a) == 0);
    free(a);
    free(bb);
    remove(path);
    remove(other);
    kiln_model_destroy(plain);
}

/* Mirrored over two devices (the batch split) and the pipeline in two
 * stages of 2 micro-batches equal one device after 5 steps. */
static void test_strategies(kiln_context *ctx)
{
    if (!test_has_devices(test_device_count(ctx), 2, "the strategies"))
        return;
    const kiln_strategy strategies[] = {KILN_STRATEGY_MIRRORED, KILN_STRATEGY_PIPELINE};
    const char *const targets[] = {NULL, "key,attention_output"};
    for (int k = 0; k < 4; k++) {
        kiln_model *one = build_targets(ctx, KILN_OPTIMIZER_SGD, 1, targets[k / 2],
                                        KILN_STRATEGY_ONE_DEVICE);
        kiln_model *two = build_targets(ctx, KILN_OPTIMIZER_SGD, 1, targets[k / 2],
                                        strategies[k % 2]);
        for (int s = 0; s < STEPS; s++) {
            train(ctx, one, s);
            train(ctx, two, s);
        }
        int64_t n = 0;
        CHECK_OK(ctx, kiln_model_parameter_count(one, &n));
        float *w1 = calloc((size_t)n, sizeof *w1), *w2 = calloc((size_t)n, sizeof *w2);
        CHECK_OK(ctx, kiln_model_get_weights(one, w1, n));
        CHECK_OK(ctx, kiln_model_get_weights(two, w2, n));
        const double d = test_difference(w2, w1, sizeof(float), n, TEST_PER_VALUE, NULL);
        printf("%s vs one device, targets %s, 5 steps: max difference %.2e\n",
               k % 2 ? "pipeline (2 stages)" : "mirrored (2 devices)",
               targets[k / 2] ? targets[k / 2] : "query,value (default)", d);
        CHECK(d < 1e-5);
        free(w1);
        free(w2);
        kiln_model_destroy(one);
        kiln_model_destroy(two);
    }
}

/* --dump DIR: x.f32, y.f32 (the 5 batches), tensors.txt (each tensor's
 * name, trainability and shape, in kiln_model_get_weights's order),
 * init.f32 and final.f32 (every weight before and after the 5 steps). */
static void dump(kiln_context *ctx, const char *dir, const char *targets)
{
    kiln_model *m = build_targets(ctx, KILN_OPTIMIZER_SGD, 1, targets, KILN_STRATEGY_ONE_DEVICE);
    /* B away from its zeros, so that the adapters' product, and A's
     * gradient, weigh from the first step. */
    float b[RANK * WIDTH];
    uint32_t seed = 5;
    for (int i = 0; i < RANK * WIDTH; i++) {
        seed = seed * 1664525u + 1013904223u;
        b[i] = (float)(seed >> 8) / 16777216.0f * 0.8f - 0.4f;
    }
    static const struct { const char *name; int64_t size; } bs[] = {
        {.name = "attn/query/lora_kernel_b", .size = RANK * 3},
        {.name = "attn/key/lora_kernel_b", .size = RANK * 3},
        {.name = "attn/value/lora_kernel_b", .size = RANK * 2},
        {.name = "attn/attention_output/lora_kernel_b", .size = RANK * WIDTH},
    };
    int set = 0;
    for (int i = 0; i < 4; i++)
        set += kiln_model_set_tensor(m, bs[i].name, b, bs[i].size) == KILN_OK;
    CHECK(set == 2 || set == 4);
    dump_floats(dir, "x.f32", &xs[0][0], sizeof xs / sizeof(float));
    dump_floats(dir, "y.f32", &ys[0][0], sizeof ys / sizeof(float));
    dump_tensor_list(ctx, m, dir);
    int64_t n = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &n));
    float *w = calloc((size_t)n, sizeof *w);
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    dump_floats(dir, "init.f32", w, (size_t)n);
    for (int s = 0; s < STEPS; s++)
        train(ctx, m, s);
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    dump_floats(dir, "final.f32", w, (size_t)n);
    free(w);
    kiln_model_destroy(m);
}

int main(int argc, char **argv)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    make_data();
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--dump") == 0) {
        dump(ctx, argv[2], argc == 4 ? argv[3] : NULL);
        kiln_context_destroy(ctx);
        return test_finish("test_lora_attention --dump");
    }
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln-lora-attention-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_refusals(ctx);
    test_older_caller(ctx);
    test_memory(ctx);
    test_training(ctx, dir);
    test_targets(ctx, dir);
    test_keep_adapters(ctx, dir);
    test_strategies(ctx);
    rmdir(dir);
    kiln_context_destroy(ctx);
    return test_finish("test_lora_attention");
}
