/* The moving average of the weights (use_ema) under every in-process
 * strategy against one device: mirrored and central storage (two
 * replicas), the pipeline (two stages, each averaging its own layers) and
 * the parameter server (one worker, the store averaging on the host); the
 * weights and the averages after 2 epochs, with ema_overwrite_frequency and
 * with accumulated micro-batches too, and predict's outputs (the averages).
 * Meson runs this with POCL_DEVICES="basic basic"; on one device what
 * needs two is skipped. */
#include "harness.h"
#include "runtime/model/ema.h"
#include "runtime/model/model.h"

#define SAMPLES 64
#define IN 6
#define TOL 1e-5

static float x[SAMPLES * IN], y[SAMPLES * 3];

static kiln_dataset *data(kiln_context *ctx)
{
    uint32_t seed = 4321;
    for (int i = 0; i < SAMPLES * IN; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f * 4.0f - 2.0f;
    }
    for (int i = 0; i < SAMPLES; i++)
        for (int j = 0; j < 3; j++)
            y[i * 3 + j] = sinf(x[i * IN + j] - x[i * IN + j + 3]) + 0.5f * (float)j;
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
    int32_t overwrite;
    int accumulation, batch;   /* 0: none, 16 */
} run;

typedef struct result {
    float *weights, *averages, *outputs;
    size_t n;
} result;

static void result_free(result *r)
{
    free(r->weights);
    free(r->averages);
    free(r->outputs);
}

/* Trains 2 epochs of batch 16 from the context's seed. */
static result train(kiln_context *ctx, kiln_dataset *ds, const run *r)
{
    result out = {0};
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
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_ADAM,
                                      .learning_rate = 0.01f, .use_ema = 1,
                                      .ema_momentum = 0.8f,
                                      .ema_overwrite_frequency = r->overwrite};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o,
                                     .strategy = r->strategy, .replicas = r->replicas,
                                     .pipeline_stages = r->stages,
                                     .gradient_accumulation_steps = r->accumulation};
    kiln_status st = kiln_model_compile(m, &co);
    CHECK_OK(ctx, st);
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2,
                                 .batch_size = r->batch ? r->batch : 16,
                                 .no_shuffle = 1, .verbosity = KILN_VERBOSE_SILENT};
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fo);
    CHECK_OK(ctx, st);
    if (st == KILN_OK) {
        out.n = m->plan.n_param_floats;
        out.weights = calloc(out.n, sizeof(float));
        out.averages = calloc(out.n, sizeof(float));
        out.outputs = calloc(SAMPLES * 3, sizeof(float));
        CHECK(out.weights && out.averages && out.outputs);
        CHECK(m->placement.strategy->get_params(m->placement.strategy_impl, out.weights) ==
              KILN_OK);
        CHECK(kiln_ema_params(m, out.averages) == KILN_OK);
        CHECK_OK(ctx, test_predict_packed(m, x, SAMPLES, out.outputs, 16));
    }
    kiln_model_destroy(m);
    return out;
}

static void compare(const char *what, const float *a, const float *b, int64_t n)
{
    int64_t at = 0;
    const double worst = a && b ? test_difference(a, b, sizeof(float), n, TEST_PER_VALUE, &at)
                                : INFINITY;
    printf("%-72s max relative difference %.2e\n", what, worst);
    if (!(worst <= TOL)) {
        fprintf(stderr, "%s: %.3g exceeds %.1g (value %lld)\n", what, worst, TOL, (long long)at);
        test_failures++;
    }
}

static void test_mode(kiln_context *ctx, kiln_dataset *ds, int devices, run mode,
                      const char *name)
{
    run r = mode;
    r.strategy = KILN_STRATEGY_ONE_DEVICE;
    result base = train(ctx, ds, &r);
    static const struct {
        kiln_strategy strategy;
        int replicas, stages, devices, accumulates;
        const char *name;
    } strategies[] = {
        {.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2, .devices = 2, .accumulates = 1,
         .name = "mirrored, 2"},
        {.strategy = KILN_STRATEGY_CENTRAL_STORAGE, .replicas = 2, .devices = 2,
         .accumulates = 1, .name = "central_storage, 2"},
        {.strategy = KILN_STRATEGY_PIPELINE, .stages = 2, .devices = 2, .accumulates = 1,
         .name = "pipeline, 2 stages"},
        {.strategy = KILN_STRATEGY_PARAMETER_SERVER, .replicas = 1, .devices = 1,
         .name = "parameter_server, 1 worker"},
    };
    for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
        char what[200];
        snprintf(what, sizeof what, "%s: %s", name, strategies[k].name);
        if (!test_has_devices(devices, strategies[k].devices, what))
            continue;
        if (mode.accumulation && !strategies[k].accumulates)
            continue;
        r = mode;
        r.strategy = strategies[k].strategy;
        r.replicas = strategies[k].replicas;
        r.stages = strategies[k].stages;
        result got = train(ctx, ds, &r);
        snprintf(what, sizeof what, "%s: %s vs one_device, weights", name, strategies[k].name);
        compare(what, got.weights, base.weights, (int64_t)base.n);
        snprintf(what, sizeof what, "%s: %s vs one_device, averages", name, strategies[k].name);
        compare(what, got.averages, base.averages, (int64_t)base.n);
        snprintf(what, sizeof what, "%s: %s vs one_device, predict", name, strategies[k].name);
        compare(what, got.outputs, base.outputs, SAMPLES * 3);
        result_free(&got);
    }
    /* The averages act: they are not the weights. */
    CHECK(base.weights && base.averages &&
          test_difference(base.averages, base.weights, sizeof(float), (int64_t)base.n,
                          TEST_PER_VALUE, NULL) > 1e-3);
    result_free(&base);
}

int main(void)
{
    kiln_context_options co = {.struct_size = sizeof co, .seed = 5};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    kiln_dataset *ds = data(ctx);
    test_mode(ctx, ds, devices, (run){0}, "use_ema, momentum 0.8");
    test_mode(ctx, ds, devices, (run){.overwrite = 3}, "use_ema, overwrite every 3");
    test_mode(ctx, ds, devices, (run){.accumulation = 2, .batch = 8},
              "use_ema, 2 x 8 accumulated");
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_ema_strategies");
}
