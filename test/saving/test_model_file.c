/* Model files: the seed CNN, a model of every layer kind, a decoder of
 * transposed convolutions and the seed ResNet saved whole and loaded into
 * new models that predict bit for bit as the saved ones (before and after
 * training, batch norm's moving statistics included), with the same
 * description, weights and summary;
 * checkpoints load the same way; every refusal of kiln_model_load (each
 * file written here by editing a good file's description) names what is
 * wrong and leaves no model behind; and the JSON writer's escaping. */
#include "harness.h"
#include "resnet_model.h"
#include "runtime/formats/json.h"
#include "runtime/formats/json_writer.h"
#include "runtime/saving/model_desc.h"
#include "runtime/formats/safetensors.h"
#include "seed_cnn.h"

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

static char dir[256];

static const char *file(const char *name)
{
    static char path[8][512];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

/* Deterministic inputs in [-1, 1). */
static float *inputs(int64_t count, int64_t size, uint64_t seed)
{
    float *x = malloc((size_t)(count * size) * sizeof(float));
    for (int64_t i = 0; i < count * size; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)(seed >> 40) / 8388608.0f - 1.0f;
    }
    return x;
}

static kiln_dataset *dataset(kiln_context *ctx, int count, const int32_t *dims, int classes)
{
    const int64_t size = (int64_t)dims[0] * dims[1] * dims[2];
    float *x = inputs(count, size, 7);
    int32_t *y = malloc((size_t)count * sizeof(int32_t));
    for (int i = 0; i < count; i++)
        y[i] = (int32_t)((x[(size_t)i * (size_t)size] + 1.0f) * 0.5f * (float)classes) % classes;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 3,
                          .feature_dims = {dims[0], dims[1], dims[2]}, .features = x,
                          .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    free(x);
    free(y);
    return ds;
}

static float *predict(kiln_context *ctx, kiln_model *m, const float *x, int64_t count)
{
    int64_t out = 0;
    CHECK_OK(ctx, kiln_model_output_size(m, &out));
    float *y = calloc((size_t)(count * (out ? out : 1)), sizeof(float));
    CHECK_OK(ctx, test_predict_packed(m, x, count, y, 7));   /* 7: a partial last batch */
    return y;
}

static char *describe(kiln_model *m)
{
    char *text = NULL;
    size_t length = 0;
    CHECK_OK(m->ctx, kiln_model_describe(m, "test", 0, &text, &length));
    return text;
}

static char *summary(kiln_context *ctx, kiln_model *m)
{
    size_t length = 0;
    CHECK_OK(ctx, kiln_model_summary(m, NULL, 0, &length));
    char *text = malloc(length + 1);
    CHECK_OK(ctx, kiln_model_summary(m, text, length + 1, NULL));
    return text;
}

static float *weights(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = calloc((size_t)(*n ? *n : 1), sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

static int32_t live_objects(kiln_context *ctx)
{
    pthread_mutex_lock(&ctx->objects_lock);
    const int32_t n = ctx->live_objects;
    pthread_mutex_unlock(&ctx->objects_lock);
    return n;
}

/* `m` saved to `name` and loaded into a new model: the same description
 * (every layer option and training setting), summary, weights and
 * predictions on `count` samples, bit for bit. Returns the loaded model. */
static kiln_model *round_trip(kiln_context *ctx, kiln_model *m, const char *name, int64_t count,
                              const kiln_compile_options *options)
{
    int64_t in_size = m->graph.sample_size;
    float *x = inputs(count, in_size, 99);
    for (int32_t k = 0; k < m->graph.n_inputs; k++) {   /* ids in their floats */
        const kiln_id_range *r = &m->graph.ids[k];
        for (int64_t i = 0; r->limit > 0 && i < count * r->size; i++)
            ((int32_t *)(void *)(x + i / r->size * in_size + r->offset))[i % r->size] =
                (int32_t)(i * 7 % r->limit);
    }
    CHECK_OK(ctx, kiln_model_save(m, file(name)));
    kiln_model *l = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, file(name), options, &l));
    if (!l) {
        free(x);
        return NULL;
    }
    char *da = describe(m), *db = describe(l), *sa = summary(ctx, m), *sb = summary(ctx, l);
    CHECK(da && db && strcmp(da, db) == 0);
    if (da && db && strcmp(da, db) != 0)
        fprintf(stderr, "saved:  %s\nloaded: %s\n", da, db);
    CHECK(sa && sb && strcmp(sa, sb) == 0);
    int64_t na = 0, nb = 0;
    float *wa = weights(ctx, m, &na), *wb = weights(ctx, l, &nb);
    CHECK(na == nb && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0);
    int64_t out = 0;
    kiln_model_output_size(m, &out);
    float *ya = predict(ctx, m, x, count), *yb = predict(ctx, l, x, count);
    CHECK(memcmp(ya, yb, (size_t)(count * out) * sizeof(float)) == 0);
    printf("%s: %lld layers, %lld parameters, %lld x %lld outputs identical\n", name,
           (long long)m->graph.n_nodes, (long long)na, (long long)count, (long long)out);
    free(da), free(db), free(sa), free(sb), free(wa), free(wb), free(x), free(ya), free(yb);
    return l;
}

static kiln_fit_options fit_options(int epochs, int batch)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = batch;
    fo.verbosity = KILN_VERBOSE_SILENT;
    return fo;
}

static void test_seed_cnn(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .learning_rate = 1e-3f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_model_destroy(round_trip(ctx, m, "seed_cnn_untrained.safetensors", 9, NULL));
    const int32_t dims[] = {28, 28, 1};
    kiln_dataset *ds = dataset(ctx, 64, dims, 10);
    kiln_fit_options fo = fit_options(1, 16);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_model *l = round_trip(ctx, m, "seed_cnn.safetensors", 23, NULL);
    /* The loaded model trains on as the saved one would have, from the
     * file's optimizer settings (Adam's state starts afresh on both). */
    kiln_model *again = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, file("seed_cnn.safetensors"), NULL, &again));
    if (l && again) {
        CHECK_OK(ctx, kiln_model_fit(l, ds, &fo));
        CHECK_OK(ctx, kiln_model_fit(again, ds, &fo));
        int64_t n = 0;
        float *wa = weights(ctx, l, &n), *wb = weights(ctx, again, &n);
        CHECK(memcmp(wa, wb, (size_t)n * sizeof(float)) == 0);
        free(wa), free(wb);
    }
    kiln_model_destroy(again);
    kiln_model_destroy(l);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* Every layer kind (sequence layers and the newer activations included),
 * every option away from its default, a name that needs
 * escaping, a frozen layer, an output that is not the last layer, SGD with
 * Nesterov momentum, a cosine schedule with warm-up, accumulation. */
static kiln_model *every_kind(kiln_context *ctx, int compile)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {9, 9, 2};
    const kiln_node in = kiln_input(m, 3, dims, &(kiln_input_options){.name = "pixels"});
    kiln_conv2d_options same = {.struct_size = sizeof same, .filters = 4, .kernel_size = {3, 3},
                                .padding = KILN_PADDING_SAME, .activation = KILN_ACTIVATION_RELU};
    kiln_conv2d_options one = {.struct_size = sizeof one, .name = "shortcut", .filters = 4,
                               .kernel_size = {1, 1}, .no_bias = 1,
                               .activation = KILN_ACTIVATION_TANH};
    kiln_batch_norm_options bn = {.struct_size = sizeof bn, .momentum = 0.9f, .epsilon = 2e-3f,
                                  .synchronized = 1};
    kiln_pool2d_options max = {.struct_size = sizeof max, .pool_size = {2, 2},
                               .padding = KILN_PADDING_SAME};
    kiln_pool2d_options avg = {.struct_size = sizeof avg, .name = "avg", .pool_size = {3, 2},
                               .strides = {1, 2}};
    kiln_conv2d_options strided = {.struct_size = sizeof strided, .name = "strided",
                                   .filters = 6, .kernel_size = {2, 2}, .strides = {2, 1},
                                   .activation = KILN_ACTIVATION_SIGMOID};
    kiln_dense_options d1 = {.struct_size = sizeof d1, .units = 5,
                             .activation = KILN_ACTIVATION_GELU};
    kiln_dense_options d2 = {.struct_size = sizeof d2, .name = "odd \"name\" \\ \t\x01 caf\xc3\xa9",
                             .units = 5, .no_bias = 1};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "head", .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense_options spare = {.struct_size = sizeof spare, .name = "spare", .units = 2};
    const kiln_node c1 = kiln_conv2d(m, in, &same);
    const kiln_node b1 = kiln_batch_normalization(m, c1, &bn);
    const kiln_node sum1[] = {b1, kiln_conv2d(m, in, &one)};
    kiln_add(m, sum1, 2, NULL);
    kiln_activation_layer(m, KILN_NODE_PREVIOUS, KILN_ACTIVATION_LEAKY_RELU,
                          &(kiln_activation_layer_options){.name = "act"});
    const kiln_node mp = kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &max);       /* (5, 5, 4) */
    const kiln_node ap = kiln_average_pooling2d(m, mp, &avg);                   /* (3, 2, 4) */
    kiln_conv2d(m, mp, &strided);                                                /* (2, 4, 6) */
    const kiln_node gap = kiln_global_average_pooling2d(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_node flat = kiln_flatten(m, ap, NULL);
    kiln_node sum2[2];
    sum2[0] = kiln_dense(m, flat, &d1);
    sum2[1] = kiln_dense(m, gap, &d2);
    kiln_add(m, sum2, 2, &(kiln_add_options){.name = "merge"});
    kiln_layer_norm_options ln = {.struct_size = sizeof ln, .epsilon = 2e-3f, .no_center = 1};
    const kiln_node norm = kiln_layer_normalization(m, KILN_NODE_PREVIOUS, &ln);
    const int32_t column[] = {-1, 1};
    const kiln_node col = kiln_reshape(m, norm, 2, column, NULL);                /* (5, 1) */
    const kiln_node pair[] = {col, col};
    kiln_concatenate(m, pair, 2, NULL);                                      /* (5, 2) */
    kiln_flatten(m, KILN_NODE_PREVIOUS, &(kiln_flatten_options){.name = "flat2"});
    kiln_activation_layer(m, KILN_NODE_PREVIOUS, KILN_ACTIVATION_SILU, NULL);
    kiln_dropout(m, KILN_NODE_PREVIOUS,   /* a seed > 2^53 */
                 &(kiln_dropout_options){.rate = 0.25f, .seed = 0xdeadbeefcafef00dULL});
    const kiln_node out = kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_dense(m, out, &spare);   /* not on the output's path */
    CHECK_OK(ctx, kiln_model_set_output(m, out));
    CHECK_OK(ctx, kiln_model_set_trainable(m, "shortcut", 0));
    if (!compile)
        return m;
    /* The model keeps copies: these go out of scope when compile returns. */
    const kiln_lr_schedule cosine = {.struct_size = sizeof cosine, .kind = KILN_LR_COSINE_DECAY,
                                     .decay_steps = 40, .alpha = 0.1f, .warmup_steps = 3};
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.05f, .momentum = 0.9f,
                                        .nesterov = 1, .schedule = &cosine};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .gradient_accumulation_steps = 2, .top_k = 2,
                                     .optimizer = &sgd};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static void test_every_kind(kiln_context *ctx)
{
    kiln_model *m = every_kind(ctx, 1);
    kiln_model_destroy(round_trip(ctx, m, "every_kind_untrained.safetensors", 10, NULL));
    const int32_t dims[] = {9, 9, 2};
    kiln_dataset *ds = dataset(ctx, 60, dims, 3);
    kiln_fit_options fo = fit_options(2, 8);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    /* Training moved the moving statistics off their initial 0 and 1. */
    float mean[4] = {0};
    CHECK_OK(ctx, kiln_model_get_tensor(m, "batch_normalization/moving_mean", mean, 4));
    CHECK(mean[0] != 0.0f || mean[1] != 0.0f);
    kiln_compile_options one = {.struct_size = sizeof one, .strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *l = round_trip(ctx, m, "every_kind.safetensors", 31, &one);
    if (l) {
        CHECK(l->plan.optimizer.kind == KILN_OPTIMIZER_SGD && l->plan.optimizer.nesterov &&
              l->plan.accumulation_steps == 2 && l->graph.nodes[3].frozen &&
              l->graph.output == m->graph.output);
        /* The schedule came back from the file, into the loaded model's own copy. */
        CHECK(l->plan.optimizer.schedule == &l->plan.lr_schedule &&
              l->plan.lr_schedule.kind == KILN_LR_COSINE_DECAY &&
              l->plan.lr_schedule.decay_steps == 40 && l->plan.lr_schedule.alpha == 0.1f &&
              l->plan.lr_schedule.warmup_steps == 3);
        CHECK(kiln_model_learning_rate(l, 13) == kiln_model_learning_rate(m, 13));
        CHECK(strcmp(l->graph.nodes[12].name, "odd \"name\" \\ \t\x01 caf\xc3\xa9") == 0);
        CHECK(l->graph.nodes[2].ops->synchronized(
            l->graph.nodes[2].config)); /* matters with replicas */
    }
    kiln_model_destroy(l);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* Transposed convolutions, trained: PyTorch's upsampling (explicit pads,
 * output_padding) and Keras's 'same' with output_padding, grouped and
 * dilated, come back from the file configured and weighted as they were. */
static void test_decoder(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 4, 2};
    const kiln_conv2d_options down = {.struct_size = sizeof down, .filters = 6,
                                      .kernel_size = {3, 3}, .strides = {2, 2},
                                      .padding = KILN_PADDING_SAME,
                                      .activation = KILN_ACTIVATION_RELU};
    const kiln_conv2d_transpose_options torch = {
        .struct_size = sizeof torch, .name = "up", .filters = 4, .kernel_size = {3, 3},
        .strides = {2, 2}, .padding = KILN_PADDING_EXPLICIT, .pads = {1, 1, 1, 1},
        .output_padding = {1, 1}, .no_bias = 1, .activation = KILN_ACTIVATION_TANH};
    const kiln_conv2d_transpose_options keras = {
        .struct_size = sizeof keras, .filters = 4, .kernel_size = {2, 3}, .strides = {2, 2},
        .padding = KILN_PADDING_SAME, .output_padding = {1, 0}, .dilations = {1, 2},
        .groups = 2, .activation = KILN_ACTIVATION_SIGMOID};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node x = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &down);   /* (3, 2, 6) */
    x = kiln_conv2d_transpose(m, x, &torch);                              /* (6, 4, 4) */
    x = kiln_conv2d_transpose(m, x, &keras);                              /* (11, 8, 4) */
    kiln_dense(m, kiln_global_average_pooling2d(m, x, NULL), &head);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    float before[4 * 3 * 3 * 6];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "up/kernel", before, 4 * 3 * 3 * 6));
    kiln_dataset *ds = dataset(ctx, 24, dims, 3);
    const kiln_fit_options fo = fit_options(2, 8);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    float after[4 * 3 * 3 * 6];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "up/kernel", after, 4 * 3 * 3 * 6));
    CHECK(memcmp(before, after, sizeof after) != 0);
    kiln_model_destroy(round_trip(ctx, m, "decoder.safetensors", 7, NULL));
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
}

/* MultiHeadAttention with every option away from its default (causal,
 * value_dim, output_shape, no biases, dropout and its seed), then one with
 * Keras's defaults attending from the first's output over the sequence:
 * the description, weights and predictions come back, before and after
 * training. */
static void test_attention(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 4, 1}, seq[] = {6, 4};
    kiln_input(m, 3, dims, NULL);
    const kiln_node x = kiln_reshape(m, KILN_NODE_PREVIOUS, 2, seq, NULL);
    const kiln_multi_head_attention_options every = {
        .struct_size = sizeof every, .name = "causal", .num_heads = 3, .key_dim = 2,
        .value_dim = 5, .dropout = 0.125f, .seed = 0xfeedfacecafebeefULL,
        .use_causal_mask = 1, .no_bias = 1, .output_shape = 7};
    const kiln_node a = kiln_multi_head_attention(m, x, x, &every);          /* (6, 7) */
    const kiln_multi_head_attention_options plain = {.struct_size = sizeof plain,
                                                     .num_heads = 2, .key_dim = 3};
    kiln_multi_head_attention(m, a, x, &plain);                              /* (6, 7) */
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const char *seeds = getenv("MODEL_JSON_SEEDS");   /* writes the fuzzer's seed */
    if (seeds) {
        char path[512], *text = describe(m);
        snprintf(path, sizeof path, "%s/attention.json", seeds);
        FILE *f = fopen(path, "w");
        if (f && text)
            fputs(text, f);
        if (f)
            fclose(f);
        free(text);
    }
    kiln_model_destroy(round_trip(ctx, m, "attention_untrained.safetensors", 5, NULL));
    kiln_dataset *ds = dataset(ctx, 24, dims, 3);
    kiln_fit_options fo = fit_options(1, 8);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_model *l = round_trip(ctx, m, "attention.safetensors", 7, NULL);
    float bias[7] = {0};
    if (l)
        CHECK_OK(ctx, kiln_model_get_tensor(l, "multi_head_attention_1/attention_output/bias",
                                            bias, 7));
    CHECK(bias[0] != 0.0f);   /* trained, and found by its default name */
    kiln_model_destroy(l);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* MultiHeadAttention under a padding mask (ReLU of the first feature):
 * the file keeps its third input, so the loaded model masks the same
 * positions and predicts the same, before and after training. */
static void test_padded_attention(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 4, 1}, seq[] = {6, 4}, six[] = {6};
    kiln_input(m, 3, dims, NULL);
    const kiln_node x = kiln_reshape(m, KILN_NODE_PREVIOUS, 2, seq, NULL);
    const kiln_slice_options first = {.struct_size = sizeof first, .size = {0, 1}};
    const kiln_node pad = kiln_reshape(m, kiln_activation_layer(m, kiln_slice(m, x, &first),
                                                                KILN_ACTIVATION_RELU, NULL),
                                       1, six, NULL);
    const kiln_multi_head_attention_options o = {.struct_size = sizeof o, .name = "padded",
                                                 .num_heads = 2, .key_dim = 3,
                                                 .use_causal_mask = 1};
    kiln_multi_head_attention_masked(m, x, x, pad, &o);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_model *l = round_trip(ctx, m, "padded_untrained.safetensors", 5, NULL);
    kiln_node at = KILN_NODE_INVALID;
    if (l)
        CHECK_OK(ctx, kiln_model_find_layer(l, "padded", &at));
    CHECK(l && at != KILN_NODE_INVALID && l->graph.nodes[at].n_inputs == 3);
    kiln_model_destroy(l);
    kiln_dataset *ds = dataset(ctx, 24, dims, 3);
    kiln_fit_options fo = fit_options(1, 8);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(round_trip(ctx, m, "padded.safetensors", 7, NULL));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

static void test_resnet(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    resnet_build(m, 28, 28, 1, 10, 0);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int32_t dims[] = {28, 28, 1};
    kiln_dataset *ds = dataset(ctx, 8, dims, 10);
    kiln_fit_options fo = fit_options(1, 8);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));   /* one step: moving statistics move */
    kiln_model_destroy(round_trip(ctx, m, "resnet.safetensors", 3, NULL));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* kiln_model_save_checkpoint's file and fit's checkpoint folder load as
 * models too; with the checkpoint's training state on top, the loaded
 * model trains on exactly as the saved one does: what only training reads
 * (dropout's rate and seed, batch norm's momentum, the optimizer, its
 * schedule, accumulation, the frozen layer) came back too. */
static void test_checkpoints(kiln_context *ctx)
{
    kiln_model *m = every_kind(ctx, 1);
    const int32_t dims[] = {9, 9, 2};
    kiln_dataset *ds = dataset(ctx, 40, dims, 3);
    kiln_fit_options fo = fit_options(2, 8);
    fo.checkpoint_dir = file("ckpt");
    fo.checkpoint_every_epoch = 1;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_save_checkpoint(m, file("state.safetensors")));
    const int64_t count = 12;
    float *x = inputs(count, 9 * 9 * 2, 5), *want = predict(ctx, m, x, count);
    const char *paths[] = {file("ckpt/ckpt-000000000010.safetensors"), file("state.safetensors")};
    for (int i = 0; i < 2; i++) {
        kiln_model *l = NULL;
        CHECK_OK(ctx, kiln_model_load(ctx, paths[i], NULL, &l));
        if (!l)
            continue;
        float *got = predict(ctx, l, x, count);
        CHECK(memcmp(want, got, (size_t)count * 3 * sizeof(float)) == 0);
        /* The training state goes on with kiln_model_load_checkpoint. */
        CHECK_OK(ctx, kiln_model_load_checkpoint(l, paths[i]));
        CHECK(l->training.n_optimizer_steps == m->training.n_optimizer_steps);
        free(got);
        if (i == 1) {
            kiln_fit_options more = fit_options(1, 8);
            CHECK_OK(ctx, kiln_model_fit(m, ds, &more));
            CHECK_OK(ctx, kiln_model_fit(l, ds, &more));
            int64_t n = 0;
            float *wm = weights(ctx, m, &n), *wl = weights(ctx, l, &n);
            CHECK(memcmp(wm, wl, (size_t)n * sizeof(float)) == 0);
            free(wm), free(wl);
        }
        kiln_model_destroy(l);
    }
    printf("checkpoints: kiln_model_save_checkpoint's and fit's load, predict the same, and "
           "train on the same\n");
    free(x), free(want);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* Writes `to`: the file `from` with the first `find` in its description
 * replaced by `replace` (find NULL: the description removed). */
static void edit(kiln_context *ctx, const char *from, const char *to, const char *find,
                 const char *replace)
{
    kiln_st_file f;
    CHECK_OK(ctx, kiln_st_read(ctx, from, &f));
    kiln_st_entry *e = calloc(f.n_tensors + 1, sizeof *e);
    for (size_t i = 0; i < f.n_tensors; i++) {
        e[i].name = f.tensors[i].name;
        e[i].rank = f.tensors[i].rank;
        for (int d = 0; d < e[i].rank; d++)
            e[i].shape[d] = (int64_t)f.tensors[i].shape[d];
        e[i].data = (const float *)(const void *)kiln_st_data(&f, &f.tensors[i]);
    }
    const char *keys[32], *values[32];
    char *edited = NULL;
    size_t n = 0;
    for (size_t i = 0; f.metadata && i < f.metadata->count && n < 32; i++) {
        const char *k = f.metadata->keys[i], *v = f.metadata->items[i].text;
        if (strcmp(k, KILN_MODEL_META_KEY) == 0) {
            if (!find)
                continue;
            const char *at = strstr(v, find);
            CHECK(at != NULL);
            if (at) {
                edited = malloc(strlen(v) + strlen(replace) + 1);
                memcpy(edited, v, (size_t)(at - v));
                strcpy(edited + (at - v), replace);
                strcat(edited, at + strlen(find));
                v = edited;
            }
        }
        keys[n] = k;
        values[n++] = v;
    }
    CHECK_OK(ctx, kiln_st_write(ctx, to, e, f.n_tensors, keys, values, n));
    free(edited);
    free(e);
    kiln_st_free(&f);
}

/* Loading `path` fails with `status` and a message holding each of the
 * needles, leaves *out NULL and no model alive. */
static void refuses(kiln_context *ctx, const char *path, kiln_status status,
                    const kiln_compile_options *options, const char *needle,
                    const char *needle2)
{
    const int32_t before = live_objects(ctx);
    kiln_model *l = (kiln_model *)(void *)&l;   /* must come back NULL */
    CHECK_FAILS(ctx, status, needle, kiln_model_load(ctx, path, options, &l));
    CHECK(l == NULL);
    CHECK(live_objects(ctx) == before);
    if (needle2 && !strstr(kiln_context_last_error(ctx), needle2)) {
        fprintf(stderr, "message lacks \"%s\": %s\n", needle2, kiln_context_last_error(ctx));
        CHECK(0);
    }
}

/* A model of ids: an int Input (its dtype in the description), Embedding
 * and PositionEmbedding, trained, saved and loaded. A float model's
 * description has no dtype: files written before int Inputs read alike. */
static void test_ids(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t seq[] = {6};
    kiln_input_ints(m, 1, seq, &(kiln_input_options){.name = "tokens"});
    const kiln_embedding_options eo = {.struct_size = sizeof eo, .name = "token_embedding",
                                       .input_dim = 13, .output_dim = 5};
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    const kiln_position_embedding_options po = {.struct_size = sizeof po, .max_length = 9};
    kiln_position_embedding(m, KILN_NODE_PREVIOUS, &po);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    char *text = describe(m);
    CHECK(text && strstr(text, "\"options\":{\"shape\":[6],\"dtype\":\"int32\"}"));
    CHECK(text && strstr(text, "{\"input_dim\":13,\"output_dim\":5}"));
    CHECK(text && strstr(text, "{\"max_length\":9}"));
    free(text);
    int32_t ids[40 * 6], labels[40];
    for (int i = 0; i < 40 * 6; i++)
        ids[i] = (i * 5 + i / 6) % 13;
    for (int i = 0; i < 40; i++)
        labels[i] = ids[i * 6] % 3;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = 40, .feature_rank = 1,
                                .feature_dims = {6}, .int_features = ids,
                                .sparse_labels = labels};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    kiln_fit_options fo = fit_options(2, 8);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_model *l = round_trip(ctx, m, "ids.safetensors", 17, NULL);
    CHECK(l && l->graph.input_ints && l->graph.ids[0].limit == 13);
    /* A dtype kiln does not know, and a table too small for the file's. */
    edit(ctx, file("ids.safetensors"), file("ids_int64.safetensors"), "\"dtype\":\"int32\"",
         "\"dtype\":\"int64\"");
    refuses(ctx, file("ids_int64.safetensors"), KILN_ERROR_FORMAT, NULL, "'dtype'", "int64");
    edit(ctx, file("ids.safetensors"), file("ids_vocab.safetensors"), "\"input_dim\":13",
         "\"input_dim\":12");
    refuses(ctx, file("ids_vocab.safetensors"), KILN_ERROR_FORMAT, NULL,
            "token_embedding/embeddings", "(12, 5)");
    kiln_model_destroy(l);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    m = every_kind(ctx, 0);
    text = describe(m);
    CHECK(text && !strstr(text, "dtype"));
    free(text);
    kiln_model_destroy(m);
}

static void test_refusals(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const char *good = file("good.safetensors"), *bad = file("bad.safetensors");
    CHECK_OK(ctx, kiln_model_save(m, good));
    CHECK_OK(ctx, kiln_model_save_weights(m, file("weights.safetensors")));

    refuses(ctx, file("weights.safetensors"), KILN_ERROR_FORMAT, NULL,
            "without a model description", "kiln_model_load_weights");
    edit(ctx, good, bad, "\"kind\":\"flatten\"", "\"kind\":\"lstm\"");
    refuses(ctx, bad, KILN_ERROR_UNSUPPORTED, NULL, "layer 3 ('flatten') is of kind 'lstm'",
            "does not know");
    edit(ctx, good, bad, "\"version\":1", "\"version\":2");
    refuses(ctx, bad, KILN_ERROR_UNSUPPORTED, NULL, "version 2, newer than version 1", NULL);
    edit(ctx, good, bad, "\"units\":64,", "");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "layer 4 ('dense') options: 'units' is missing",
            NULL);
    edit(ctx, good, bad, "\"trainable\":true", "\"trainable\":true,\"transposed_weights\":\"no\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'transposed_weights' must be an array of booleans",
            NULL);
    edit(ctx, good, bad, "\"trainable\":true", "\"trainable\":true,\"transposed_weights\":[true]");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "lists 1 transposed_weights; its kind has 0 weights",
            NULL);
    /* LoRA in the description (kiln_save_options.keep_lora_adapters). */
    edit(ctx, good, bad, "\"trainable\":true", "\"trainable\":true,\"lora\":{\"rank\":2,"
         "\"alpha\":2}");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'lora' is given, but input_layer layers have "
            "no LoRA", NULL);
    edit(ctx, good, bad, "\"kind\":\"dense\"", "\"kind\":\"dense\",\"lora\":3");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'lora' must be an object, not a number", NULL);
    edit(ctx, good, bad, "\"kind\":\"dense\"", "\"kind\":\"dense\",\"lora\":{\"rank\":0,"
         "\"alpha\":2}");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'rank' is 0; it must be an integer in [1,", NULL);
    edit(ctx, good, bad, "\"kind\":\"dense\"", "\"kind\":\"dense\",\"lora\":{\"rank\":2,"
         "\"alpha\":-1}");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "LoRA's 'alpha' is -1; it must be > 0", NULL);
    edit(ctx, good, bad, "\"kind\":\"dense\"", "\"kind\":\"dense\",\"lora\":{\"rank\":2,"
         "\"alpha\":2,\"dropout\":0}");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'dropout'", NULL);
    edit(ctx, good, bad, "\"kind\":\"dense\"", "\"kind\":\"dense\",\"lora\":{\"rank\":2,"
         "\"alpha\":2}");   /* the file's kernels are merged: no adapters in it */
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "tensor 'dense/lora_kernel_a'",
            "the file has no such tensor");
    edit(ctx, good, bad, "\"filters\":32", "\"filters\":\"32\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'filters' must be a number, not a string", NULL);
    edit(ctx, good, bad, "\"filters\":32", "\"filters\":32.5");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'filters' is 32.5; it must be an integer", NULL);
    edit(ctx, good, bad, "\"filters\":32", "\"filters\":32,\"dilation\":2");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "conv2d layers have no option 'dilation'", NULL);
    edit(ctx, good, bad, "\"padding\":\"valid\"", "\"padding\":\"full\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'padding' is 'full', not one of valid, same",
            NULL);
    /* kiln_math's op by name, and its constants checked as the builder's. */
    kiln_model *mm = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &mm));
    const int32_t four[] = {4};
    const kiln_math_options clip = {.struct_size = sizeof clip, .name = "clip", .has_min = 1,
                                    .min = -1.0f, .has_max = 1, .max = 2.0f};
    kiln_math(mm, kiln_input(mm, 1, four, NULL), KILN_MATH_CLIP, &clip);
    kiln_compile_options mse = {.struct_size = sizeof mse, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(mm, &mse));
    const char *math_file = file("math.safetensors");
    CHECK_OK(ctx, kiln_model_save(mm, math_file));
    kiln_model_destroy(mm);
    edit(ctx, math_file, bad, "\"op\":\"clip\"", "\"op\":\"tan\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'op' is 'tan', not one of sqrt, reciprocal, neg, "
            "abs, exp, log, erf, pow, hard_sigmoid, clip", NULL);
    edit(ctx, math_file, bad, "\"has_min\":true,", "");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "layer 'clip' (math): min without has_min is "
            "given to op clip", "does not build");
    edit(ctx, math_file, bad, "\"op\":\"clip\"", "\"op\":\"exp\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "min is given to op exp", "does not build");
    edit(ctx, good, bad, "\"inputs\":[\"conv2d\"]", "\"inputs\":[\"dense\"]");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "layer 2 ('max_pooling2d'): input 0, 'dense', is not an earlier layer",
            NULL);
    edit(ctx, good, bad, "\"activation\":\"linear\"", "\"activation\":\"relu\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "input_layer layers take no activation", NULL);
    edit(ctx, good, bad, "\"learning_rate\":0.001", "\"learning_rate\":1e99");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL,
            "compile.optimizer: 'learning_rate' is 1e99; it must be a finite float32", NULL);
    edit(ctx, good, bad, "\"learning_rate\":0.001", "\"learning_rate\":0.001,\"amsgrad\":1");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL,
            "compile.optimizer: optimizers have no option 'amsgrad'", NULL);
    edit(ctx, good, bad, "\"warmup_steps\":0", "\"warmup_steps\":-1");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "compile.optimizer.schedule: 'warmup_steps'",
            NULL);
    edit(ctx, good, bad, "\"format\":\"kiln.model\"", "\"format\":\"keras\"");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'format' is 'keras', not 'kiln.model'", NULL);
    edit(ctx, good, bad, "{", "[");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "is not JSON", NULL);
    edit(ctx, good, bad, "\"units\":10", "\"units\":-4");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "does not build: layer 'dense_1' (dense): units "
            "must be > 0, got -4", NULL);
    /* The description and the tensors disagree. */
    edit(ctx, good, bad, "\"units\":64", "\"units\":65");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "tensor 'dense/kernel' is F32 (5408, 64) in the "
            "file, but the model description gives it F32 (5408, 65)", NULL);
    edit(ctx, good, bad, "\"name\":\"dense_1\"", "\"name\":\"dense_9\"");   /* and the output */
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "'output' is 'dense_1', which is not a layer",
            NULL);
    /* A rank-3 output of several classes is one distribution per position
     * (test_sequence_labels.c); the layers past it are left out. */
    edit(ctx, good, bad, "\"output\":\"dense_1\"", "\"output\":\"max_pooling2d\"");
    kiln_model *pooled = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, bad, NULL, &pooled));
    CHECK(pooled && pooled->plan.heads[0].positions == 13 * 13 && pooled->plan.heads[0].cols == 32);
    kiln_model_destroy(pooled);
    edit(ctx, good, bad, "\"units\":64,\"use_bias\":true", "\"units\":64,\"use_bias\":false");
    refuses(ctx, bad, KILN_ERROR_FORMAT, NULL, "tensor 'dense/bias' is in the file but not in "
            "the model description", NULL);
    /* A placement on a device the context lacks; ignored by a strategy that
     * does not place. */
    edit(ctx, good, bad, "\"device\":null", "\"device\":7");
    refuses(ctx, bad, KILN_ERROR_INVALID_ARGUMENT, NULL, "layer 'input_layer' is placed on "
            "device 7, but the context has", NULL);
    kiln_compile_options one = {.struct_size = sizeof one, .strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *l = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, bad, &one, &l));
    kiln_model_destroy(l);
    refuses(ctx, file("missing.safetensors"), KILN_ERROR_IO, NULL, "cannot open", NULL);
    refuses(ctx, "", KILN_ERROR_INVALID_ARGUMENT, NULL, "path is empty", NULL);

    /* What cannot be saved. */
    kiln_model *u = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &u));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "compile the model first", kiln_model_save(u, good));
    const int32_t dims[] = {4};
    kiln_input(u, 1, dims, NULL);
    kiln_dense_options latin1 = {.struct_size = sizeof latin1, .name = "caf\xe9", .units = 2};
    kiln_dense(u, KILN_NODE_PREVIOUS, &latin1);
    co.loss = KILN_LOSS_MEAN_SQUARED_ERROR;
    CHECK_OK(ctx, kiln_model_compile(u, &co));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "is not valid UTF-8", kiln_model_save(u, bad));
    /* Nor is a checkpoint of it written: kiln_model_load could not rebuild
     * the model from one without its description. */
    const char *undescribed = file("undescribed.safetensors");
    remove(undescribed);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_save_checkpoint: the model "
                "cannot be described: 'caf", kiln_model_save_checkpoint(u, undescribed));
    CHECK(access(undescribed, F_OK) != 0);
    kiln_model_destroy(u);
    /* A setting the description cannot hold (compile refuses it; set here
     * behind its back) is named, and no file is written. */
    m->plan.optimizer.epsilon = INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_save: the model cannot be "
                "described: epsilon is inf, not a finite number", kiln_model_save(m, undescribed));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_save_checkpoint: the model cannot "
                "be described: epsilon is inf", kiln_model_save_checkpoint(m, undescribed));
    CHECK(access(undescribed, F_OK) != 0);
    kiln_model_destroy(m);
    printf("refusals: each names what is wrong and leaves no model\n");
}

/* The description parses without a device, as the fuzzer calls it; an
 * uncompiled model's description has no training settings. */
static void test_description(kiln_context *ctx)
{
    kiln_model *m = every_kind(ctx, 0);
    kiln_model_place(m, 0, 5, 0);
    char *text = describe(m);
    kiln_model_desc d;
    CHECK_OK(ctx, kiln_model_desc_parse(ctx, "test", text, strlen(text), &d));
    CHECK(d.n_layers == m->graph.n_nodes && !d.has_compile && d.output == m->graph.output);
    CHECK(d.layers[5].device == 0 && d.layers[6].device == -1 && !d.layers[3].trainable);
    kiln_dropout_args dropout;
    memcpy(&dropout, d.layers[19].options.bytes, sizeof dropout);
    CHECK(dropout.seed == 0xdeadbeefcafef00dULL);
    CHECK(strstr(text, "\"device\":0") && !strstr(text, "\"compile\""));
    const char *seeds = getenv("MODEL_JSON_SEEDS");   /* writes the fuzzer's seed */
    if (seeds) {
        char path[512];
        snprintf(path, sizeof path, "%s/every_kind_placed.json", seeds);
        FILE *f = fopen(path, "w");
        if (f)
            fputs(text, f), fclose(f);
    }
    kiln_model_desc_free(&d);
    free(text);
    kiln_model_destroy(m);
}

/* A description kiln 0.1 wrote (the fuzzer's attention seed, its schedule
 * made a cosine with warm-up as 0.1 wrote one) reads into 0.2's structs,
 * whose optimizer points to its schedule: the file format did not change
 * with them. */
/* Descriptions kiln wrote before compile's metrics were recorded (the
 * fuzzer's seeds, as 0.1 wrote them) still parse, asking for no metric. */
static void test_before_metrics(kiln_context *ctx)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (!root) {
        printf("SKIP (KILN_SOURCE_ROOT is not set; meson test sets it): older files\n");
        return;
    }
    static const char *const names[] = {"seed_cnn", "seed_cnn_pretty", "every_kind",
                                        "every_kind_placed", "resnet"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/test/data/model_json/%s.json", root, names[k]);
        size_t size = 0;
        unsigned char *bytes = test_read_file(path, &size);
        CHECK(bytes != NULL);
        kiln_model_desc d;
        CHECK_OK(ctx, kiln_model_desc_parse(ctx, path, (const char *)bytes, size, &d));
        CHECK(d.top_k == 0 && !d.mean_absolute_error && !d.binary_accuracy);
        kiln_model_desc_free(&d);
        free(bytes);
    }
    printf("descriptions written before compile's metrics: parsed\n");
}

static void test_written_by_0_1(kiln_context *ctx)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (!root) {
        printf("SKIP (KILN_SOURCE_ROOT is not set; meson test sets it): 0.1's file\n");
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/test/data/model_json/attention.json", root);
    size_t size = 0;
    unsigned char *bytes = test_read_file(path, &size);
    char *text = bytes ? calloc(size + 1, 1) : NULL;   /* as a string */
    if (text)
        memcpy(text, bytes, size);
    free(bytes);
    const char *constant = "\"schedule\":{\"kind\":\"constant\",\"decay_steps\":0,"
                           "\"decay_rate\":0,\"alpha\":0,\"warmup_steps\":0}";
    const char *cosine = "\"schedule\":{\"kind\":\"cosine_decay\",\"decay_steps\":40,"
                         "\"decay_rate\":0,\"alpha\":0.1,\"warmup_steps\":3}";
    const char *at = text ? strstr(text, constant) : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(text);
        return;
    }
    char *edited = malloc(size + 64);
    const size_t before = (size_t)(at - (const char *)text);
    snprintf(edited, size + 64, "%.*s%s%s", (int)before, text, cosine, at + strlen(constant));
    kiln_model_desc d;
    CHECK_OK(ctx, kiln_model_desc_parse(ctx, path, edited, strlen(edited), &d));
    const kiln_optimizer_options *o = &d.optimizer;
    CHECK(d.has_compile && o->kind == KILN_OPTIMIZER_ADAM && o->learning_rate == 1e-3f &&
          o->schedule == &d.schedule);
    CHECK(d.schedule.kind == KILN_LR_COSINE_DECAY && d.schedule.decay_steps == 40 &&
          d.schedule.alpha == 0.1f && d.schedule.warmup_steps == 3);
    /* Step 13: 10 steps past the warm-up, a quarter of the way down. */
    const double want = 1e-3f * (0.9f * 0.5 * (1.0 + cos(3.14159265358979323846 / 4)) + 0.1f);
    CHECK(fabs(test_learning_rate(ctx, o, 13) - want) < 1e-9);
    kiln_model_desc_free(&d);
    /* The file as written: a constant rate. */
    CHECK_OK(ctx, kiln_model_desc_parse(ctx, path, text, size, &d));
    CHECK(d.schedule.kind == KILN_LR_CONSTANT && test_learning_rate(ctx, o, 13) == 1e-3f);
    kiln_model_desc_free(&d);
    free(edited);
    free(text);
}

/* Strings come back as written: quotes, backslashes, control characters,
 * UTF-8; floats and doubles exactly; nesting. */
static void test_json_writer(kiln_context *ctx)
{
    static const char tricky[] = "q\" b\\ s/ \b\f\n\r\t \x01\x1f\x7f caf\xc3\xa9 \xf0\x9f\x94\xa5";
    const float f = 0.1f, tiny = 1e-38f;
    const double d = 0.1;
    kiln_jw w;
    kiln_jw_init(&w, ctx);
    kiln_jw_begin_object(&w);
    kiln_jw_key(&w, tricky);
    kiln_jw_begin_array(&w);
    kiln_jw_string(&w, tricky);
    kiln_jw_float(&w, f);
    kiln_jw_float(&w, tiny);
    kiln_jw_double(&w, d);
    kiln_jw_int(&w, INT64_MIN);
    kiln_jw_uint(&w, UINT64_MAX);
    kiln_jw_bool(&w, 1);
    kiln_jw_null(&w);
    kiln_jw_begin_object(&w);
    kiln_jw_end_object(&w);
    kiln_jw_end_array(&w);
    kiln_jw_end_object(&w);
    char *text = NULL;
    size_t length = 0;
    CHECK_OK(ctx, kiln_jw_finish(&w, &text, &length));
    kiln_json_doc doc;
    CHECK_OK(ctx, kiln_json_parse(ctx, "test", text, length, &doc));
    const kiln_json *a = kiln_json_get(doc.root, tricky);
    CHECK(a && a->type == KILN_JSON_ARRAY && a->count == 9);
    if (a && a->count == 9) {
        double v = 0;
        CHECK(strcmp(a->items[0].text, tricky) == 0);
        CHECK(kiln_json_number_to_double(a->items[1].text, a->items[1].length, &v) &&
              (float)v == f && strcmp(a->items[1].text, "0.1") == 0);
        CHECK(kiln_json_number_to_double(a->items[2].text, a->items[2].length, &v) &&
              (float)v == tiny);
        CHECK(kiln_json_number_to_double(a->items[3].text, a->items[3].length, &v) && v == d);
        CHECK(strcmp(a->items[4].text, "-9223372036854775808") == 0);
        CHECK(strcmp(a->items[5].text, "18446744073709551615") == 0);
        CHECK(a->items[6].boolean && a->items[7].type == KILN_JSON_NULL &&
              a->items[8].type == KILN_JSON_OBJECT);
    }
    kiln_json_free(&doc);
    kiln_free(ctx, text);
    /* Refused: a string that is not UTF-8, a number that is not finite. */
    kiln_jw_init(&w, ctx);
    kiln_jw_string(&w, "\xff");
    CHECK(kiln_jw_finish(&w, &text, &length) == KILN_ERROR_INVALID_ARGUMENT && !text);
    kiln_jw_init(&w, ctx);
    kiln_jw_float(&w, INFINITY);
    CHECK(kiln_jw_finish(&w, &text, &length) == KILN_ERROR_INVALID_ARGUMENT && !text);
}

typedef struct budget {
    long allowed;   /* allocations that succeed before one fails (-1: all) */
    long made;
    long live;      /* not yet freed */
    int only_main;  /* nonzero: every allocation off the thread `main` fails */
    pthread_t main;
} budget;

/* Worker threads allocate too (a mirrored model on two devices): unlocked,
 * two threads' counts would race and lose updates. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;

static void *counting_realloc(void *user, void *ptr, size_t size)
{
    budget *b = user;
    pthread_mutex_lock(&budget_lock);
    void *p = NULL;
    if (size == 0) {
        if (ptr)
            b->live--;
        free(ptr);
    } else if (b->only_main && !pthread_equal(pthread_self(), b->main)) {
        p = NULL;
    } else if (b->allowed < 0 || b->made < b->allowed) {
        b->made++;
        p = realloc(ptr, size);
        if (p && !ptr)
            b->live++;
    }
    pthread_mutex_unlock(&budget_lock);
    return p;
}

/* Every host allocation of kiln_model_save and kiln_model_load failed in
 * turn: KILN_ERROR_OUT_OF_MEMORY, nothing leaked, no model, and the file
 * saved before still whole. Then only the worker threads' allocations. */
static void test_allocation_failures(void)
{
    budget b = {.allowed = -1};
    kiln_context_options o = {.struct_size = sizeof o, .realloc_fn = counting_realloc,
                              .realloc_user = &b};
    kiln_context *ctx = NULL;
    CHECK_OK(ctx, kiln_context_create(&o, &ctx));
    if (!ctx)
        return;
    kiln_model *m = every_kind(ctx, 1), *l = NULL;
    const char *path = file("alloc.safetensors");
    CHECK_OK(ctx, kiln_model_save(m, path));
    /* A first load builds the kernels, which the context keeps. */
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &l));
    kiln_model_destroy(l);
    l = NULL;
    long failures = 0, calls = 0;
    for (int load = 0; load < 2; load++) {
        const long live = b.live, start = b.made;
        kiln_status st = load ? kiln_model_load(ctx, path, NULL, &l) : kiln_model_save(m, path);
        kiln_model_destroy(l);
        l = NULL;
        CHECK(st == KILN_OK && b.live == live);
        const long made = b.made - start;
        for (long n = 0; n < made; n++, calls++) {
            b.allowed = b.made + n;
            st = load ? kiln_model_load(ctx, path, NULL, &l) : kiln_model_save(m, path);
            b.allowed = -1;
            if (st != KILN_ERROR_OUT_OF_MEMORY || b.live != live || l) {
                fprintf(stderr, "%s, allocation %ld of %ld failing: %s, %ld allocations "
                        "leaked\n", load ? "load" : "save", n, made, kiln_status_name(st),
                        b.live - live);
                failures++;
            }
            kiln_model_destroy(l);
            l = NULL;
        }
    }
    CHECK(failures == 0);
    /* A worker thread's own allocations (mirrored: a thread per replica,
     * one device or several) failing: the load fails, rather than leaving
     * a model whose workers can run nothing. */
    const long live = b.live;
    const kiln_compile_options mirrored = {.struct_size = sizeof mirrored,
                                           .strategy = KILN_STRATEGY_MIRRORED};
    b.main = pthread_self();
    b.only_main = 1;
    CHECK_FAILS(ctx, KILN_ERROR_OUT_OF_MEMORY, "worker thread",
                kiln_model_load(ctx, path, &mirrored, &l));
    b.only_main = 0;
    CHECK(!l && b.live == live);
    kiln_model_destroy(l);
    l = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, &mirrored, &l));
    kiln_model_destroy(l);
    l = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &l));   /* the file is whole */
    printf("allocation failures: %ld calls, each failing cleanly\n", calls);
    kiln_model_destroy(l);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    CHECK(b.live == 0);
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char child[1024];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        remove_tree(child);
    }
    if (d)
        closedir(d);
    remove(path);
}

int main(void)
{
    kiln_context *ctx = test_context(11);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    snprintf(dir, sizeof dir, "/tmp/kiln-model-file-XXXXXX");
    if (!mkdtemp(dir))
        SKIP("cannot make a temporary folder");
    test_json_writer(ctx);
    test_description(ctx);
    test_written_by_0_1(ctx);
    test_before_metrics(ctx);
    test_refusals(ctx);
    test_seed_cnn(ctx);
    test_every_kind(ctx);
    test_decoder(ctx);
    test_attention(ctx);
    test_padded_attention(ctx);
    test_ids(ctx);
    test_checkpoints(ctx);
    test_resnet(ctx);
    CHECK(live_objects(ctx) == 0);
    kiln_context_destroy(ctx);
    test_allocation_failures();
    if (getenv("KEEP_MODEL_FILES"))
        printf("files kept in %s\n", dir);
    else
        remove_tree(dir);
    return test_finish("test_model_file");
}
