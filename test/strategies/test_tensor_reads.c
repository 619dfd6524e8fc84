/* kiln_model_get_tensor reads one tensor's floats (the strategy's
 * get_param_range where it has one) and must give exactly what
 * kiln_model_get_weights gives at the tensor's offset: under one device,
 * mirrored and central storage (two replicas: the moving statistics are
 * the mean of the replicas', held apart until the next step writes them
 * back), the pipeline (two stages) and the parameter server, after
 * training a model with batch normalisation and a frozen first layer
 * (whose weights follow the moving statistics in the parameters), and
 * after set_tensor.
 * Meson runs this with POCL_DEVICES="basic basic"; on one device what
 * needs two is skipped. */
#include "harness.h"

#define SAMPLES 48
#define IN 5

static float x[SAMPLES * IN], y[SAMPLES * 2];

static kiln_dataset *data(kiln_context *ctx)
{
    uint32_t seed = 99;
    for (int i = 0; i < SAMPLES * IN; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f * 4.0f - 2.0f;
    }
    for (int i = 0; i < SAMPLES; i++)
        for (int j = 0; j < 2; j++)
            y[i * 2 + j] = x[i * IN + j] * x[i * IN + j + 2] + (float)j;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 1,
                                .feature_dims = {IN}, .features = x,
                                .label_kind = KILN_LABELS_DENSE, .label_size = 2,
                                .dense_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

/* Every tensor read alone against the whole array; `what` names the run. */
static void compare_tensors(kiln_context *ctx, kiln_model *m, const char *what)
{
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    int64_t total = 0;
    for (int32_t i = 0; i < count; i++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, i, &info));
        total += info.size;
    }
    float *all = calloc((size_t)total, sizeof *all);
    CHECK(all != NULL);
    if (!all)
        return;
    CHECK_OK(ctx, kiln_model_get_weights(m, all, total));
    int differ = 0;
    for (int32_t i = 0; i < count; i++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, i, &info));
        float *one = malloc((size_t)info.size * sizeof *one);
        CHECK(one != NULL);
        if (!one)
            break;
        memset(one, 0xff, (size_t)info.size * sizeof *one);   /* NaNs until read */
        CHECK_OK(ctx, kiln_model_get_tensor(m, info.name, one, info.size));
        if (memcmp(one, all + info.offset, (size_t)info.size * sizeof *one) != 0) {
            fprintf(stderr, "%s: %s read alone differs from kiln_model_get_weights's\n", what,
                    info.name);
            differ++;
        }
        free(one);
    }
    printf("%-64s %d tensors, %d differ\n", what, (int)count, differ);
    test_failures += differ;
    free(all);
}

static void run_strategy(kiln_context *ctx, kiln_dataset *ds, kiln_strategy strategy,
                         int replicas, int stages, const char *name)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    const kiln_dense_options d0 = {.struct_size = sizeof d0, .name = "d0", .units = 8};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d0);
    const kiln_batch_norm_options bn = {.struct_size = sizeof bn, .name = "bn",
                                        .momentum = 0.5f, .activation = KILN_ACTIVATION_RELU};
    kiln_batch_normalization(m, KILN_NODE_PREVIOUS, &bn);
    const kiln_dense_options d1 = {.struct_size = sizeof d1, .name = "d1", .units = 2};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d1);
    CHECK_OK(ctx, kiln_model_set_trainable(m, "d0", 0));
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_ADAM,
                                      .learning_rate = 0.01f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o,
                                     .strategy = strategy, .replicas = replicas,
                                     .pipeline_stages = stages};
    kiln_status st = kiln_model_compile(m, &co);
    CHECK_OK(ctx, st);
    char what[128];
    snprintf(what, sizeof what, "%s, compiled", name);
    if (st == KILN_OK)
        compare_tensors(ctx, m, what);
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2, .batch_size = 16,
                                 .no_shuffle = 1, .verbosity = KILN_VERBOSE_SILENT};
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fo);
    CHECK_OK(ctx, st);
    snprintf(what, sizeof what, "%s, trained", name);
    if (st == KILN_OK)
        compare_tensors(ctx, m, what);
    /* A tensor written alone reads back alone and in the whole array. */
    const float mean[8] = {1, -2, 3, -4, 5, -6, 7, -8};
    float back[8] = {0};
    if (st == KILN_OK) {
        CHECK_OK(ctx, kiln_model_set_tensor(m, "bn/moving_mean", mean, 8));
        CHECK_OK(ctx, kiln_model_get_tensor(m, "bn/moving_mean", back, 8));
        CHECK(memcmp(back, mean, sizeof mean) == 0);
        snprintf(what, sizeof what, "%s, bn/moving_mean set", name);
        compare_tensors(ctx, m, what);
    }
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context_options co = {.struct_size = sizeof co, .seed = 3};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    kiln_dataset *ds = data(ctx);
    run_strategy(ctx, ds, KILN_STRATEGY_ONE_DEVICE, 0, 0, "one_device");
    run_strategy(ctx, ds, KILN_STRATEGY_PARAMETER_SERVER, 1, 0, "parameter_server, 1 worker");
    if (test_has_devices(devices, 2, "mirrored, central storage and the pipeline on 2")) {
        run_strategy(ctx, ds, KILN_STRATEGY_MIRRORED, 2, 0, "mirrored, 2");
        run_strategy(ctx, ds, KILN_STRATEGY_CENTRAL_STORAGE, 2, 0, "central_storage, 2");
        run_strategy(ctx, ds, KILN_STRATEGY_PIPELINE, 0, 2, "pipeline, 2 stages");
    }
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_tensor_reads");
}
