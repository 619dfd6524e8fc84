/* Imported networks train under kiln's strategies as on one device:
 * torchvision's resnet18 and mobilenet_v2 (export_torchvision.py, 64 x 64,
 * random weights), and a character LM of PyTorch's nn.TransformerEncoder
 * (make_models.py's ids_char_lm), with a softmax head, 3 steps of SGD with
 * momentum on fixed batches of 8, on one device, mirrored on two (batch
 * norm synchronised: kiln_import_options.synchronized_batch_norm, so the
 * replicas normalise with the global batch as one device does), and as a
 * pipeline of two stages. The CNNs' pipeline runs one micro-batch: batch
 * norm normalises each micro-batch by its own statistics (as GPipe), so
 * more micro-batches train another function than one device's. The LM has
 * no batch norm, so its pipeline also runs 4 micro-batches. Each run's
 * losses and every parameter and moving statistic after the last step are
 * compared with one device's. Needs two devices (meson sets
 * POCL_DEVICES="basic basic"). */
#include "harness.h"

#include <math.h>
#include <sys/wait.h>

#define STEPS 3
#define BATCH 8
#define SIZE 64
#define CLASSES 10
#define PYTHON "/usr/bin/python3"

static char dir[64];

typedef struct run {
    const char *what;
    kiln_strategy strategy;
    int sync_bn;
    int reversed;   /* each batch's samples in reverse order */
    int32_t micro_batches;   /* the pipeline's */
} run;

/* The imported network with a softmax head, compiled for the run. */
static kiln_model *build(kiln_context *ctx, const char *net, const run *r)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, net);
    const kiln_import_options io = {.struct_size = sizeof io, .synchronized_batch_norm = r->sync_bn};
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, &io, &m));
    if (!m)
        return NULL;
    /* The head is the output: the import made the graph's output the model's. */
    const kiln_activation_layer_options so = {.struct_size = sizeof so, .name = "probabilities"};
    CHECK_OK(ctx, kiln_model_set_output(m, kiln_activation_layer(m, KILN_NODE_PREVIOUS,
                                                                 KILN_ACTIVATION_SOFTMAX, &so)));
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 5e-4f, .momentum = 0.9f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &sgd, .strategy = r->strategy,
                                     .replicas = r->strategy == KILN_STRATEGY_MIRRORED ? 2 : 0,
                                     .pipeline_stages = r->strategy == KILN_STRATEGY_PIPELINE ? 2 : 0,
                                     .micro_batches = r->micro_batches};
    if (kiln_model_compile(m, &co) != KILN_OK) {
        fprintf(stderr, "%s %s: %s\n", net, r->what, kiln_context_last_error(ctx));
        test_failures++;
        kiln_model_destroy(m);
        return NULL;
    }
    return m;
}

/* STEPS batches of BATCH samples: floats or ids, `sample` of them a
 * sample, and `positions` class ids a sample for labels. */
typedef struct batches {
    const float *x;
    const int32_t *ids;
    size_t sample;
    const int32_t *y;
    int positions;
} batches;

/* The run's losses and its weights after the steps (NULL on failure). */
static float *train(kiln_context *ctx, const char *net, const run *r, const batches *d,
                    double *losses, int64_t *count)
{
    kiln_model *m = build(ctx, net, r);
    if (!m)
        return NULL;
    const size_t sample = d->sample, width = d->x ? sizeof *d->x : sizeof *d->ids;
    const int per = d->positions;
    unsigned char *rx = malloc(BATCH * sample * width);
    int32_t *ry = malloc((size_t)BATCH * (size_t)per * sizeof *ry);
    CHECK(rx && ry);
    for (int s = 0; s < STEPS && rx && ry; s++) {
        const unsigned char *from = d->x ? (const unsigned char *)d->x
                                         : (const unsigned char *)d->ids;
        from += (size_t)s * BATCH * sample * width;
        const int32_t *labels = d->y + (size_t)s * BATCH * (size_t)per;
        for (int i = 0; i < BATCH; i++) {   /* as given, or each batch reversed */
            const int at = r->reversed ? BATCH - 1 - i : i;
            memcpy(rx + (size_t)i * sample * width, from + (size_t)at * sample * width,
                   sample * width);
            memcpy(ry + (size_t)i * (size_t)per, labels + (size_t)at * (size_t)per,
                   (size_t)per * sizeof *ry);
        }
        kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH,
                               .features = d->x ? (const float *)(const void *)rx : NULL,
                               .int_features = d->ids ? (const int32_t *)(const void *)rx
                                                      : NULL,
                               .sparse_labels = ry};
        kiln_metrics mt = {.struct_size = sizeof mt};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, &mt));
        losses[s] = mt.loss;
    }
    free(rx);
    free(ry);
    CHECK_OK(ctx, kiln_model_parameter_count(m, count));
    float *w = malloc((size_t)*count * sizeof *w);
    CHECK(w != NULL);
    if (w)
        CHECK_OK(ctx, kiln_model_get_weights(m, w, *count));
    kiln_model_destroy(m);
    return w;
}

/* Relative distance: max |a - b| over max |b| (a tensor-wide scale, as
 * the summation orders of two strategies differ in float32). */
static double distance(const float *a, const float *b, int64_t n)
{
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return scale > 0.0 ? diff / scale : diff;
}

/* Each run of `runs` against one device: its losses and weights within
 * 4 times what reversing each batch moves them on one device. */
static void compare(kiln_context *ctx, const char *net, const batches *d, const run *runs,
                    size_t n_runs)
{
    /* Reversing each batch's samples on one device changes only the order
     * of float32 sums: how far that moves the losses and weights is the
     * network's own sensitivity to round-off, which a strategy's other
     * summation order cannot be held below. mobilenet_v2 at random
     * initialisation is ill-conditioned (channels of near-zero batch
     * variance amplify round-off: its losses move by 5e-3), so the
     * first loss, a forward pass before any update, is held to 1e-5 on
     * its own: it shows batch norm normalising with the wrong batch. */
    static const run one = {.what = "one device", .strategy = KILN_STRATEGY_ONE_DEVICE};
    static const run floor_run = {.what = "one device, each batch reversed",
                                  .strategy = KILN_STRATEGY_ONE_DEVICE, .reversed = 1};
    double ref_loss[STEPS], loss[STEPS];
    int64_t ref_count = 0, count = 0;
    float *ref = train(ctx, net, &one, d, ref_loss, &ref_count);
    float *w = ref ? train(ctx, net, &floor_run, d, loss, &count) : NULL;
    if (!w) {
        free(ref);
        return;
    }
    CHECK(count == ref_count);
    double floor_loss = 0.0;
    for (int s = 0; s < STEPS; s++)
        floor_loss = fmax(floor_loss, fabs(loss[s] - ref_loss[s]) / fabs(ref_loss[s]));
    const double floor_w = distance(w, ref, count);
    printf("%s: one device's losses %.6f %.6f %.6f; reversed batches move them %.2e and the "
           "weights %.2e\n", net, ref_loss[0], ref_loss[1], ref_loss[2], floor_loss, floor_w);
    free(w);
    for (size_t k = 0; k < n_runs; k++) {
        w = train(ctx, net, &runs[k], d, loss, &count);
        if (!w)
            continue;
        CHECK(count == ref_count);
        double first = fabs(loss[0] - ref_loss[0]) / fabs(ref_loss[0]), worst = 0.0;
        for (int s = 0; s < STEPS; s++)
            worst = fmax(worst, fabs(loss[s] - ref_loss[s]) / fabs(ref_loss[s]));
        const double dw = count == ref_count ? distance(w, ref, count) : INFINITY;
        printf("%s %s: losses %.6f %.6f %.6f: first %.2e, worst %.2e and weights %.2e from "
               "one device's\n", net, runs[k].what, loss[0], loss[1], loss[2], first, worst, dw);
        CHECK(first < 1e-5);
        CHECK(worst <= fmax(4.0 * floor_loss, 1e-5));
        CHECK(dw <= fmax(4.0 * floor_w, 1e-5));
        free(w);
    }
    free(ref);
}

static void check_net(kiln_context *ctx, const char *net)
{
    const size_t pixels = (size_t)STEPS * BATCH * 3 * SIZE * SIZE;
    float *x = malloc(pixels * sizeof *x);
    int32_t y[STEPS * BATCH];
    CHECK(x != NULL);
    if (!x)
        return;
    uint64_t seed = 5;
    for (size_t i = 0; i < pixels; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)(seed >> 40) / 8388608.0f - 1.0f;   /* [-1, 1) */
    }
    for (int i = 0; i < STEPS * BATCH; i++)
        y[i] = i % CLASSES;
    static const run runs[] = {
        {.what = "mirrored on 2 devices", .strategy = KILN_STRATEGY_MIRRORED, .sync_bn = 1},
        {.what = "pipeline of 2 stages", .strategy = KILN_STRATEGY_PIPELINE,
         .micro_batches = 1},
    };
    const batches d = {.x = x, .sample = 3 * SIZE * SIZE, .y = y, .positions = 1};
    compare(ctx, net, &d, runs, sizeof runs / sizeof *runs);
    free(x);
}

/* make_models.py's ids_char_lm (Embedding, two causal TransformerEncoder
 * layers imported as MultiHeadAttention, a Linear to the vocabulary of
 * CharLm.vocab) learning each next id of a cyclic text, mirrored on two
 * devices and as a pipeline of two stages (the split falls between the two
 * encoder layers). */
static void check_char_lm(kiln_context *ctx)
{
    enum { LENGTH = 6, VOCAB = 11 };
    int32_t ids[STEPS * BATCH * LENGTH], next[STEPS * BATCH * LENGTH];
    for (int i = 0; i < STEPS * BATCH; i++)
        for (int t = 0; t < LENGTH; t++) {
            ids[i * LENGTH + t] = (3 * i + t) % VOCAB;
            next[i * LENGTH + t] = (3 * i + t + 1) % VOCAB;
        }
    static const run runs[] = {
        {.what = "mirrored on 2 devices", .strategy = KILN_STRATEGY_MIRRORED},
        {.what = "pipeline of 2 stages", .strategy = KILN_STRATEGY_PIPELINE,
         .micro_batches = 1},
        {.what = "pipeline of 2 stages, 4 micro-batches", .strategy = KILN_STRATEGY_PIPELINE,
         .micro_batches = 4},
    };
    const batches d = {.ids = ids, .sample = LENGTH, .y = next, .positions = LENGTH};
    compare(ctx, "ids_char_lm", &d, runs, sizeof runs / sizeof *runs);
}

int main(void)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    kiln_context *ctx = test_context(3);
    if (!ctx)
        return 1;
    test_require_devices(ctx, 2, "test_import_strategies");
    snprintf(dir, sizeof dir, "/tmp/kiln_import_strategies_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/export_torchvision.py' '%s' %d "
             "resnet18 mobilenet_v2", root, dir, SIZE);
    const int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77) {
        kiln_context_destroy(ctx);
        SKIP_MISSING("PyTorch and torchvision for " PYTHON
                     " (Debian: python3-torch python3-torchvision)");
    }
    CHECK(WEXITSTATUS(rc) == 0);
    /* KILN_IMPORT_ONLY="ids_char_lm": those networks alone. */
    const char *only = getenv("KILN_IMPORT_ONLY");
    if (!only || strstr(only, "resnet18"))
        check_net(ctx, "resnet18");
    if (!only || strstr(only, "mobilenet_v2"))
        check_net(ctx, "mobilenet_v2");
    snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/make_models.py' '%s' ids_char_lm "
             "> /dev/null", root, dir);
    if (!only || strstr(only, "ids_char_lm")) {
        CHECK(system(cmd) == 0);
        check_char_lm(ctx);
    }
    kiln_context_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_import_strategies");
}
