/* Gradient clipping under every in-process strategy against one device:
 * the global norm is the whole model's under mirrored and central storage
 * (two replicas: the summed gradient's), the pipeline (two stages, each
 * holding its own layers' gradients: their squares are added before any
 * stage updates) and the parameter server (one worker: each push its own
 * whole-model norm, which then is one device's); per-tensor clipnorm and
 * clipvalue too. A frozen layer takes no part. Accumulated micro-batches
 * are clipped once, as one large batch. Meson runs this with
 * POCL_DEVICES="basic basic"; on one device what needs two is skipped. */
#include "harness.h"

#define SAMPLES 64
#define IN 6
#define TOL 1e-5

static kiln_dataset *data(kiln_context *ctx)
{
    static float x[SAMPLES * IN], y[SAMPLES * 3];
    uint32_t seed = 4321;
    for (int i = 0; i < SAMPLES * IN; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f * 4.0f - 2.0f;
    }
    for (int i = 0; i < SAMPLES; i++)   /* large targets: clipping acts */
        for (int j = 0; j < 3; j++)
            y[i * 3 + j] = 8.0f * sinf(x[i * IN + j] - x[i * IN + j + 3]) + 3.0f * (float)j;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 1,
                                .feature_dims = {IN}, .features = x,
                                .label_kind = KILN_LABELS_DENSE, .label_size = 3,
                                .dense_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

typedef struct run {
    kiln_strategy strategy;
    int replicas, stages;
    float clipnorm, clipvalue, global_clipnorm;
    const char *frozen;
    int accumulation, batch;   /* 0: none, 16 */
} run;

/* Trains 2 epochs of batch 16 from the context's seed; the weights (caller
 * frees), NULL when something failed. */
static float *weights_after(kiln_context *ctx, kiln_dataset *ds, const run *r, int64_t *n)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    const char *names[] = {"d0", "d1", "d2", "d3"};
    for (int k = 0; k < 4; k++) {
        const kiln_dense_options d = {.struct_size = sizeof d, .name = names[k],
                                      .units = k == 3 ? 3 : 16,
                                      .activation = k == 3 ? KILN_ACTIVATION_LINEAR
                                                           : KILN_ACTIVATION_TANH};
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    }
    if (r->frozen)
        CHECK_OK(ctx, kiln_model_set_trainable(m, r->frozen, 0));
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .learning_rate = 0.05f, .momentum = 0.5f,
                                      .clipnorm = r->clipnorm, .clipvalue = r->clipvalue,
                                      .global_clipnorm = r->global_clipnorm};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o,
                                     .strategy = r->strategy, .replicas = r->replicas,
                                     .pipeline_stages = r->stages,
                                     .gradient_accumulation_steps = r->accumulation};
    float *w = NULL;
    kiln_status st = kiln_model_compile(m, &co);
    CHECK_OK(ctx, st);
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2,
                                 .batch_size = r->batch ? r->batch : 16,
                                 .no_shuffle = 1, .verbosity = KILN_VERBOSE_SILENT};
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fo);
    CHECK_OK(ctx, st);   /* a skipped (non-finite) step would fail it */
    kiln_model_parameter_count(m, n);
    if (st == KILN_OK && (w = calloc((size_t)*n, sizeof(float))))
        CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    kiln_model_destroy(m);
    return w;
}

static double compare(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    int64_t at = 0;
    const double worst = a && b ? test_difference(a, b, sizeof(float), n, TEST_PER_VALUE, &at)
                                : INFINITY;
    printf("%-64s max relative difference %.2e\n", what, worst);
    if (!(worst <= tol)) {
        fprintf(stderr, "%s: %.3g exceeds %.1g (weight %lld)\n", what, worst, tol, (long long)at);
        test_failures++;
    }
    return worst;
}

static void test_mode(kiln_context *ctx, kiln_dataset *ds, int devices, run mode,
                      const char *name)
{
    int64_t n = 0;
    char what[160];
    run r = mode;
    r.strategy = KILN_STRATEGY_ONE_DEVICE;
    float *base = weights_after(ctx, ds, &r, &n);
    /* Clipping acts here: without it the weights end elsewhere. */
    run off = r;
    off.clipnorm = off.clipvalue = off.global_clipnorm = 0.0f;
    float *plain = weights_after(ctx, ds, &off, &n);
    const double apart = base && plain ? test_difference(plain, base, sizeof(float), n,
                                                         TEST_PER_VALUE, NULL)
                                       : 0.0;
    printf("%-64s %.2e apart from no clipping\n", name, apart);
    CHECK(apart > 1e-2);
    free(plain);
    static const struct {
        kiln_strategy strategy;
        int replicas, stages, devices;
        const char *name;
    } strategies[] = {
        {.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2, .devices = 2, .name = "mirrored, 2"},
        {.strategy = KILN_STRATEGY_CENTRAL_STORAGE, .replicas = 2, .devices = 2,
         .name = "central_storage, 2"},
        {.strategy = KILN_STRATEGY_PIPELINE, .stages = 2, .devices = 2,
         .name = "pipeline, 2 stages"},
        {.strategy = KILN_STRATEGY_PARAMETER_SERVER, .replicas = 1, .devices = 1,
         .name = "parameter_server, 1 worker"},
    };
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        snprintf(what, sizeof what, "%s: %s", name, strategies[k].name);
        if (!test_has_devices(devices, strategies[k].devices, what))
            continue;
        r = mode;
        r.strategy = strategies[k].strategy;
        r.replicas = strategies[k].replicas;
        r.stages = strategies[k].stages;
        float *w = weights_after(ctx, ds, &r, &n);
        snprintf(what, sizeof what, "%s: %s vs one_device", name, strategies[k].name);
        compare(what, w, base, n, TOL);
        free(w);
    }
    free(base);
}

/* Accumulating 2 micro-batches of 8 clips the update's gradient, the mean
 * of the two: as one batch of 16 does (Keras 3 would clip each half). */
static void test_accumulation(kiln_context *ctx, kiln_dataset *ds, int devices)
{
    int64_t n = 0;
    const run whole = {.strategy = KILN_STRATEGY_ONE_DEVICE, .global_clipnorm = 1.0f};
    float *base = weights_after(ctx, ds, &whole, &n);
    static const struct {
        kiln_strategy strategy;
        int replicas, stages, devices;
        const char *name;
    } runs[] = {
        {.strategy = KILN_STRATEGY_ONE_DEVICE, .devices = 1,
         .name = "global_clipnorm 1: one_device, 2 x 8 accumulated vs batch 16"},
        {.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2, .devices = 2,
         .name = "global_clipnorm 1: mirrored, 2 x 8 accumulated vs batch 16"},
        {.strategy = KILN_STRATEGY_PIPELINE, .stages = 2, .devices = 2,
         .name = "global_clipnorm 1: pipeline, 2 x 8 accumulated vs batch 16"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        if (runs[k].devices > devices)
            continue;
        run r = whole;
        r.strategy = runs[k].strategy;
        r.replicas = runs[k].replicas;
        r.stages = runs[k].stages;
        r.accumulation = 2;
        r.batch = 8;
        float *w = weights_after(ctx, ds, &r, &n);
        compare(runs[k].name, w, base, n, TOL);
        free(w);
    }
    free(base);
}

int main(void)
{
    kiln_context_options co = {.struct_size = sizeof co, .seed = 5};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    kiln_dataset *ds = data(ctx);
    test_mode(ctx, ds, devices, (run){.global_clipnorm = 1.0f}, "global_clipnorm 1");
    test_mode(ctx, ds, devices, (run){.global_clipnorm = 1.0f, .frozen = "d1"},
              "global_clipnorm 1, d1 frozen");
    test_mode(ctx, ds, devices, (run){.clipnorm = 0.5f}, "clipnorm 0.5");
    test_mode(ctx, ds, devices, (run){.clipvalue = 0.1f}, "clipvalue 0.1");
    test_accumulation(ctx, ds, devices);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_clip_strategies");
}
