/* LoRA (kiln_model_enable_lora) on Dense: 5 SGD steps of
 * in -> Dense(6, tanh) -> Dense(3) with LoRA on the second layer against a
 * float64 host evaluation of x·(W + (alpha/r)·A·B) + b (the adapters'
 * input gradient reaches the first layer); the adapters' gradient against
 * central finite differences of the float64 loss; the base kernel bit for
 * bit unchanged and the bias trained (as Keras 3); predict after
 * kiln_model_save -> kiln_model_load equal to predict before (the merged
 * kernel); mirrored, central storage and the pipeline on two devices
 * equal to one device; the bad calls
 * refused, naming what they refused. */
#include "harness.h"

#include <unistd.h>

#define BATCH 8
#define IN 7
#define HID 6
#define OUT 3
#define RANK 2
#define ALPHA 3.0f
#define STEPS 5
#define LR 0.1f

static float xs[STEPS][BATCH * IN], ys[STEPS][BATCH * OUT];

static void make_data(void)
{
    uint32_t seed = 7;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH * IN; i++) {
            seed = seed * 1664525u + 1013904223u;
            xs[s][i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
        }
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH; i++)
            for (int j = 0; j < OUT; j++)
                ys[s][i * OUT + j] = sinf(2.0f * xs[s][i * IN + j]) + 0.5f * (float)j;
}

static kiln_model *build(kiln_context *ctx, kiln_strategy strategy, int lora)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    const kiln_dense_options d0 = {.struct_size = sizeof d0, .name = "d0", .units = HID,
                                   .activation = KILN_ACTIVATION_TANH};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d0);
    const kiln_dense_options d1 = {.struct_size = sizeof d1, .name = "d1", .units = OUT};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d1);
    if (lora)
        CHECK_OK(ctx, kiln_model_enable_lora(m, "d1", RANK, ALPHA));
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = LR};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = strategy,
                                     .replicas = strategy == KILN_STRATEGY_MIRRORED ||
                                                 strategy == KILN_STRATEGY_CENTRAL_STORAGE
                                                 ? 2 : strategy ==
                                                 KILN_STRATEGY_PARAMETER_SERVER ? 1 : 0,
                                     .pipeline_stages = strategy == KILN_STRATEGY_PIPELINE ? 2 : 0,
                                     .micro_batches = strategy == KILN_STRATEGY_PIPELINE ? 2 : 0};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* The model's weights by name, in float64. */
typedef struct weights {
    double w0[IN * HID], b0[HID], w1[HID * OUT], b1[OUT], a[HID * RANK], b[RANK * OUT];
} weights;

static void get(kiln_context *ctx, kiln_model *m, const char *name, double *out, int64_t n)
{
    float tmp[64];
    CHECK_OK(ctx, kiln_model_get_tensor(m, name, tmp, n));
    for (int64_t i = 0; i < n; i++)
        out[i] = tmp[i];
}

static void read_weights(kiln_context *ctx, kiln_model *m, weights *w)
{
    get(ctx, m, "d0/kernel", w->w0, IN * HID);
    get(ctx, m, "d0/bias", w->b0, HID);
    get(ctx, m, "d1/kernel", w->w1, HID * OUT);
    get(ctx, m, "d1/bias", w->b1, OUT);
    get(ctx, m, "d1/lora_kernel_a", w->a, HID * RANK);
    get(ctx, m, "d1/lora_kernel_b", w->b, RANK * OUT);
}

/* The float64 loss of step s's batch; with `g`, every gradient. */
static double loss_and_grads(const weights *w, int s, weights *g)
{
    const double scale = (double)ALPHA / RANK;
    double merged[HID * OUT], h[BATCH * HID], dy[BATCH * OUT], loss = 0.0;
    for (int i = 0; i < HID * OUT; i++) {
        double sum = 0.0;
        for (int k = 0; k < RANK; k++)
            sum += w->a[i / OUT * RANK + k] * w->b[k * OUT + i % OUT];
        merged[i] = w->w1[i] + scale * sum;
    }
    for (int n = 0; n < BATCH; n++) {
        for (int j = 0; j < HID; j++) {
            double z = w->b0[j];
            for (int i = 0; i < IN; i++)
                z += xs[s][n * IN + i] * w->w0[i * HID + j];
            h[n * HID + j] = tanh(z);
        }
        for (int j = 0; j < OUT; j++) {
            double y = w->b1[j];
            for (int i = 0; i < HID; i++)
                y += h[n * HID + i] * merged[i * OUT + j];
            const double e = y - ys[s][n * OUT + j];
            loss += e * e / (BATCH * OUT);
            dy[n * OUT + j] = 2.0 * e / (BATCH * OUT);
        }
    }
    if (!g)
        return loss;
    memset(g, 0, sizeof *g);
    for (int n = 0; n < BATCH; n++) {
        const double *hn = h + n * HID, *dn = dy + n * OUT;
        double dyb[RANK] = {0}, ha[RANK] = {0};
        for (int k = 0; k < RANK; k++)
            for (int j = 0; j < OUT; j++)
                dyb[k] += dn[j] * w->b[k * OUT + j];
        for (int k = 0; k < RANK; k++)
            for (int i = 0; i < HID; i++)
                ha[k] += hn[i] * w->a[i * RANK + k];
        for (int j = 0; j < OUT; j++) {
            g->b1[j] += dn[j];
            for (int k = 0; k < RANK; k++)
                g->b[k * OUT + j] += scale * ha[k] * dn[j];
        }
        for (int i = 0; i < HID; i++) {
            double dh = 0.0;
            for (int j = 0; j < OUT; j++)
                dh += dn[j] * merged[i * OUT + j];
            for (int k = 0; k < RANK; k++)
                g->a[i * RANK + k] += scale * hn[i] * dyb[k];
            const double dz = dh * (1.0 - hn[i] * hn[i]);
            g->b0[i] += dz;
            for (int a = 0; a < IN; a++)
                g->w0[a * HID + i] += xs[s][n * IN + a] * dz;
        }
    }
    return loss;   /* g->w1 stays 0: the base kernel is frozen */
}

static void sgd(weights *w, const weights *g)
{
    double *p = (double *)w;
    const double *d = (const double *)g;
    for (size_t i = 0; i < sizeof *w / sizeof(double); i++)
        p[i] -= (double)LR * d[i];
}

static void train(kiln_context *ctx, kiln_model *m, int s)
{
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[s],
                                 .dense_labels = ys[s]};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, NULL));
}

static double worst_of(const weights *got, const weights *want)
{
    return test_difference(got, want, sizeof(double), sizeof *got / sizeof(double),
                           TEST_PER_VALUE, NULL);
}

/* 5 steps against the float64 reference; the kernel unchanged. */
static void test_parity(kiln_context *ctx, const char *dir)
{
    kiln_model *m = build(ctx, KILN_STRATEGY_ONE_DEVICE, 1);
    weights start, ref, got, g;
    read_weights(ctx, m, &start);
    float kernel0[HID * OUT], kernel1[HID * OUT], bias0[OUT], bias1[OUT];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "d1/kernel", kernel0, HID * OUT));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "d1/bias", bias0, OUT));
    /* Keras 3's initialisers: A HeUniform (limit sqrt(6 / fan_in)), B zeros. */
    double a_max = 0.0, b_max = 0.0;
    for (int i = 0; i < HID * RANK; i++)
        a_max = fmax(a_max, fabs(start.a[i]));
    for (int i = 0; i < RANK * OUT; i++)
        b_max = fmax(b_max, fabs(start.b[i]));
    CHECK(a_max > 0.5 * sqrt(6.0 / HID) && a_max <= sqrt(6.0 / HID) && b_max == 0.0);
    ref = start;
    for (int s = 0; s < STEPS; s++) {
        train(ctx, m, s);
        loss_and_grads(&ref, s, &g);
        sgd(&ref, &g);
    }
    read_weights(ctx, m, &got);
    const double d = worst_of(&got, &ref);
    printf("5 SGD steps vs float64 x(W + (alpha/r)AB) + b: max difference %.2e\n", d);
    CHECK(d < 1e-5);
    CHECK_OK(ctx, kiln_model_get_tensor(m, "d1/kernel", kernel1, HID * OUT));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "d1/bias", bias1, OUT));
    CHECK(memcmp(kernel0, kernel1, sizeof kernel0) == 0);
    CHECK(memcmp(bias0, bias1, sizeof bias0) != 0);   /* Keras keeps the bias trainable */
    printf("base kernel unchanged bit for bit: %s; bias trained: %s\n",
           memcmp(kernel0, kernel1, sizeof kernel0) == 0 ? "yes" : "NO",
           memcmp(bias0, bias1, sizeof bias0) != 0 ? "yes" : "NO");
    double moved = 0.0;
    for (int i = 0; i < RANK * OUT; i++)
        moved = fmax(moved, fabs(got.b[i]));
    CHECK(moved > 1e-3);

    /* Trainability as kiln_model_tensor_info reports it. */
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    int64_t trainable = 0, all = 0;
    for (int32_t t = 0; t < count; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, t, &info));
        if (strcmp(info.name, "d1/kernel") == 0)
            CHECK(info.trainable == 0);
        if (strstr(info.name, "lora_kernel"))
            CHECK(info.trainable == 1);
        all += info.size;
        trainable += info.trainable ? info.size : 0;
    }
    printf("tensors: %d, weights %lld, trainable %lld\n", (int)count, (long long)all,
           (long long)trainable);
    CHECK(trainable == all - HID * OUT);
    /* SGD without momentum keeps no state; Adam's two slots below hold the
     * trainable prefix only, the frozen kernel none. */
    kiln_memory_report mem = {.struct_size = sizeof mem};
    CHECK_OK(ctx, kiln_model_memory(m, 0, &mem));
    CHECK(mem.optimizer_bytes == 0);

    /* The adapters' gradient against central differences of the float64
     * loss at the trained weights: one more step, read back as the update. */
    weights before = got, after;
    train(ctx, m, 0);
    read_weights(ctx, m, &after);
    double worst = 0.0;
    for (int which = 0; which < 2; which++) {
        double *p = which ? before.b : before.a;
        const double *q = which ? after.b : after.a;
        const int n = which ? RANK * OUT : HID * RANK;
        for (int i = 0; i < n; i++) {
            const double keep = p[i], h = 1e-5;
            p[i] = keep + h;
            const double up = loss_and_grads(&before, 0, NULL);
            p[i] = keep - h;
            const double down = loss_and_grads(&before, 0, NULL);
            p[i] = keep;
            const double fd = (up - down) / (2.0 * h), kiln = (keep - q[i]) / (double)LR;
            worst = fmax(worst, fabs(kiln - fd) / fmax(1e-2, fabs(fd)));
        }
    }
    printf("adapters' gradient vs central differences: max relative difference %.2e\n", worst);
    CHECK(worst < 1e-2);

    /* save -> load: a plain Dense holding the merged kernel, same predictions. */
    float y[BATCH * OUT], y_loaded[BATCH * OUT];
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[1]};
    CHECK_OK(ctx, kiln_model_predict(m, &b, y, 0));
    char path[600];
    snprintf(path, sizeof path, "%s/lora.kiln", dir);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *loaded = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
    if (loaded) {
        CHECK_OK(ctx, kiln_model_predict(loaded, &b, y_loaded, 0));
        const double dl = test_difference(y_loaded, y, sizeof(float), BATCH * OUT,
                                          TEST_PER_VALUE, NULL);
        int32_t n_loaded = 0;
        CHECK_OK(ctx, kiln_model_tensor_count(loaded, &n_loaded));
        printf("save -> load: %d tensors (adapters merged), predictions within %.2e\n",
               (int)n_loaded, dl);
        CHECK(n_loaded == count - 2 && dl < 1e-6);
        kiln_model_destroy(loaded);
    }
    /* save_weights keeps the adapters apart: they load back into a LoRA model. */
    snprintf(path, sizeof path, "%s/lora.weights", dir);
    CHECK_OK(ctx, kiln_model_save_weights(m, path));
    kiln_model *again = build(ctx, KILN_STRATEGY_ONE_DEVICE, 1);
    CHECK_OK(ctx, kiln_model_load_weights(again, path));
    CHECK_OK(ctx, kiln_model_predict(again, &b, y_loaded, 0));
    CHECK(memcmp(y, y_loaded, sizeof y) == 0);
    kiln_model_destroy(again);
    kiln_model_destroy(m);
}

static void compare_strategy(kiln_context *ctx, kiln_strategy strategy, const char *name)
{
    kiln_model *one = build(ctx, KILN_STRATEGY_ONE_DEVICE, 1);
    kiln_model *two = build(ctx, strategy, 1);
    weights w1, w2;
    float k0[HID * OUT], k1[HID * OUT];
    CHECK_OK(ctx, kiln_model_get_tensor(two, "d1/kernel", k0, HID * OUT));
    for (int s = 0; s < STEPS; s++) {
        train(ctx, one, s);
        train(ctx, two, s);
    }
    read_weights(ctx, one, &w1);
    read_weights(ctx, two, &w2);
    CHECK_OK(ctx, kiln_model_get_tensor(two, "d1/kernel", k1, HID * OUT));
    const double d = worst_of(&w2, &w1);
    printf("%s vs one device, 5 steps: max difference %.2e; kernel "
           "unchanged: %s\n", name, d, memcmp(k0, k1, sizeof k0) == 0 ? "yes" : "NO");
    CHECK(d < 1e-5 && memcmp(k0, k1, sizeof k0) == 0);
    kiln_model_destroy(one);
    kiln_model_destroy(two);
}

/* Mirrored and central storage over two devices (the batch split) and the
 * pipeline in two stages of 2 micro-batches (both micro-batches' forwards
 * before their backwards) equal one device, as does the parameter server
 * with one worker (asynchronous with more). */
static void test_strategies(kiln_context *ctx)
{
    if (!test_has_devices(test_device_count(ctx), 2, "the strategies"))
        return;
    static const struct { kiln_strategy strategy; const char *name; } runs[] = {
        {.strategy = KILN_STRATEGY_MIRRORED, .name = "mirrored (2 devices)"},
        {.strategy = KILN_STRATEGY_CENTRAL_STORAGE, .name = "central storage (2 devices)"},
        {.strategy = KILN_STRATEGY_PIPELINE, .name = "pipeline (2 stages)"},
        {.strategy = KILN_STRATEGY_PARAMETER_SERVER, .name = "parameter server (1 worker)"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++)
        compare_strategy(ctx, runs[k].strategy, runs[k].name);
}


/* What LoRA saves, by kiln_model_memory, on 256 -> Dense(512, relu) ->
 * Dense(10) under Adam with rank 8 on the first layer (docs/training.md
 * quotes it): Adam's two slots hold the trainable parameters only (each
 * tensor padded to 16 floats), the frozen kernel none. */
static void test_memory(kiln_context *ctx)
{
    uint64_t bytes[2][2] = {{0}};
    int64_t trainable[2] = {0};
    for (int lora = 0; lora < 2; lora++) {
        kiln_model *m = NULL;
        CHECK_OK(ctx, kiln_model_create(ctx, &m));
        const int32_t dims[] = {256};
        kiln_input(m, 1, dims, NULL);
        const kiln_dense_options fc = {.struct_size = sizeof fc, .name = "fc", .units = 512,
                                       .activation = KILN_ACTIVATION_RELU};
        kiln_dense(m, KILN_NODE_PREVIOUS, &fc);
        const kiln_dense_options head = {.struct_size = sizeof head, .name = "head",
                                         .units = 10};
        kiln_dense(m, KILN_NODE_PREVIOUS, &head);
        if (lora)
            CHECK_OK(ctx, kiln_model_enable_lora(m, "fc", 8, 0.0f));
        const kiln_compile_options co = {.struct_size = sizeof co,
                                         .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
        CHECK_OK(ctx, kiln_model_compile(m, &co));
        kiln_memory_report mem = {.struct_size = sizeof mem};
        CHECK_OK(ctx, kiln_model_memory(m, 0, &mem));
        bytes[lora][0] = mem.parameter_bytes;
        bytes[lora][1] = mem.optimizer_bytes;
        int32_t count = 0;
        CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
        uint64_t padded = 0;
        for (int32_t t = 0; t < count; t++) {
            kiln_parameter_info info = {.struct_size = sizeof info};
            CHECK_OK(ctx, kiln_model_tensor_info(m, t, &info));
            trainable[lora] += info.trainable ? info.size : 0;
            padded += info.trainable ? (uint64_t)(info.size + 15) / 16 * 16 * 4 : 0;
        }
        CHECK(mem.optimizer_bytes == 2 * padded);
        kiln_model_destroy(m);
    }
    printf("256 -> Dense(512) -> Dense(10), Adam: trainable parameters %lld -> %lld with LoRA "
           "rank 8 on the first; parameter bytes %llu -> %llu; optimizer bytes %llu -> %llu\n",
           (long long)trainable[0], (long long)trainable[1], (unsigned long long)bytes[0][0],
           (unsigned long long)bytes[1][0], (unsigned long long)bytes[0][1],
           (unsigned long long)bytes[1][1]);
    CHECK(trainable[1] < trainable[0] && bytes[1][1] < bytes[0][1]);
}

static void test_refusals(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, &(kiln_input_options){.struct_size = sizeof(kiln_input_options),
                                                 .name = "x"});
    const kiln_dense_options d = {.struct_size = sizeof d, .name = "d", .units = OUT};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "rank must be > 0, got 0",
                kiln_model_enable_lora(m, "d", 0, 0.0f));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "rank must be > 0, got -2",
                kiln_model_enable_lora(m, "d", -2, 0.0f));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "alpha must be finite and > 0",
                kiln_model_enable_lora(m, "d", 2, -1.0f));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "alpha must be finite and > 0",
                kiln_model_enable_lora(m, "d", 2, NAN));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "alpha must be finite and > 0",
                kiln_model_enable_lora(m, "d", 2, INFINITY));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "no layer 'nope'",
                kiln_model_enable_lora(m, "nope", 2, 0.0f));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer is NULL",
                kiln_model_enable_lora(m, NULL, 2, 0.0f));
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "layer 'x' (input_layer) has no LoRA",
                kiln_model_enable_lora(m, "x", 2, 0.0f));
    CHECK_OK(ctx, kiln_model_enable_lora(m, "d", 2, 0.0f));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "layer 'd' has LoRA already",
                kiln_model_enable_lora(m, "d", 2, 0.0f));
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "the model is compiled",
                kiln_model_enable_lora(m, "d", 2, 0.0f));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln-lora-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    make_data();
    test_refusals(ctx);
    test_memory(ctx);
    test_parity(ctx, dir);
    test_strategies(ctx);
    const char *files[] = {"lora.kiln", "lora.weights"};
    char path[600];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
    kiln_context_destroy(ctx);
    return test_finish("test_lora");
}
