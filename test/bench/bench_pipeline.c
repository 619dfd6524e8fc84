/* Pipeline efficiency: a 4 x Dense(1024) model split in two stages (the
 * automatic partition) on two devices (meson sets POCL_DEVICES="basic
 * basic"), for M = 1, 2, 4, 8 micro-batches under GPipe and 1F1B, beside the
 * same model on one device. Per run: training samples/s, the measured
 * bubble (kiln_training_stats.pipeline_bubble: the share of stage time
 * spent waiting for the other stage) beside the ideal (S - 1) / (M + S - 1)
 * of equal stages, and each stage's activation memory (kiln_model_memory).
 * Synthetic data; only kiln_model_fit after a warm-up is timed.
 * Usage: bench_pipeline [--batch B] [--steps N]
 * Exits 0, 1 on a kiln error, 77 (skip) with fewer than two devices. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#endif
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FEATURES 784
#define CLASSES 10

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct result {
    double samples_per_s, bubble;
    uint64_t activations[2];
} result;

static kiln_status run(kiln_context *ctx, const kiln_dataset *warm, const kiln_dataset *timed,
                       kiln_strategy strategy, kiln_pipeline_schedule schedule, int micro,
                       int batch, result *out)
{
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (st != KILN_OK)
        return st;
    const int32_t dims[] = {FEATURES};
    kiln_dense_options wide = {.struct_size = sizeof wide, .units = 1024,
                               .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    for (int i = 0; i < 4; i++)
        kiln_dense(m, KILN_NODE_PREVIOUS, &wide);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = strategy;
    co.pipeline_stages = 2;
    co.micro_batches = micro;
    co.pipeline_schedule = schedule;
    st = kiln_model_compile(m, &co);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = batch;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.no_shuffle = 1;
    if (st == KILN_OK)
        st = kiln_model_fit(m, warm, &fo);   /* kernels built, shapes seen */
    kiln_training_stats before = {.struct_size = sizeof before};
    kiln_training_stats after = {.struct_size = sizeof after};
    if (st == KILN_OK)
        st = kiln_model_training_stats(m, &before);
    const double t0 = now();
    if (st == KILN_OK)
        st = kiln_model_fit(m, timed, &fo);
    const double t1 = now();
    int64_t count = 0;
    kiln_dataset_count(timed, &count);
    if (st == KILN_OK)
        st = kiln_model_training_stats(m, &after);
    memset(out, 0, sizeof *out);
    if (st == KILN_OK) {
        out->samples_per_s = (double)count / (t1 - t0);
        /* The bubble of the timed steps alone: busy = (1 - bubble) x stage time. */
        const double busy = (1.0 - after.pipeline_bubble) * after.pipeline_stage_seconds -
                            (1.0 - before.pipeline_bubble) * before.pipeline_stage_seconds;
        const double stage = after.pipeline_stage_seconds - before.pipeline_stage_seconds;
        out->bubble = stage > 0 ? 1.0 - busy / stage : 0.0;
        int32_t stages = 0;
        kiln_model_distribution(m, NULL, &stages);
        for (int32_t k = 0; k < stages && k < 2; k++) {
            kiln_memory_report mem = {.struct_size = sizeof mem};
            if (kiln_model_memory(m, k, &mem) == KILN_OK)
                out->activations[k] = mem.activation_bytes;
        }
    }
    kiln_model_destroy(m);
    return st;
}

static kiln_dataset *synthetic(kiln_context *ctx, int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * FEATURES * sizeof(float));
    int32_t *y = malloc((size_t)n * sizeof(int32_t));
    kiln_dataset *ds = NULL;
    if (x && y) {
        for (int64_t i = 0; i < n * FEATURES; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            x[i] = (float)(seed >> 40) / 16777216.0f;
        }
        for (int64_t i = 0; i < n; i++)
            y[i] = (int32_t)(i % CLASSES);
        kiln_arrays_desc d = {.struct_size = sizeof d};
        d.count = n;
        d.feature_rank = 1;
        d.feature_dims[0] = FEATURES;
        d.features = x;
        d.sparse_labels = y;
        kiln_dataset_from_arrays(ctx, &d, &ds);
    }
    free(x);
    free(y);
    return ds;
}

int main(int argc, char **argv)
{
    int batch = 512, steps = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--batch") == 0)
            batch = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
    }
    if (batch < 8 || steps < 1) {
        fprintf(stderr, "usage: bench_pipeline [--batch B >= 8] [--steps N >= 1]\n");
        return 2;
    }
    kiln_context_options o = {.struct_size = sizeof o};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return printf("SKIP: no OpenCL device\n"), 77;
    int32_t devices = 0;
    kiln_context_device_count(ctx, &devices);
    if (devices < 2) {
        kiln_context_destroy(ctx);
        printf("SKIP: the pipeline needs two devices; run with POCL_DEVICES=\"basic basic\"\n");
        return 77;
    }
    kiln_dataset *warm = synthetic(ctx, 2 * batch, 1);
    kiln_dataset *timed = synthetic(ctx, (int64_t)steps * batch, 2);
    result one;
    kiln_status st = run(ctx, warm, timed, KILN_STRATEGY_ONE_DEVICE, 0, 1, batch, &one);
    if (st != KILN_OK) {
        fprintf(stderr, "bench_pipeline: %s\n", kiln_context_last_error(ctx));
        return 1;
    }
    printf("4 x Dense(1024) on 784 inputs, batch %d, %d timed steps\n", batch, steps);
    printf("one device: %.0f samples/s\n", one.samples_per_s);
    printf("| schedule | M | samples/s | vs one device | bubble measured | bubble ideal | "
           "activations stage 0, MiB | stage 1, MiB |\n|---|---|---|---|---|---|---|---|\n");
    static const int micro[] = {1, 2, 4, 8};
    for (int s = 0; s < 2 && st == KILN_OK; s++) {
        for (int k = 0; k < 4 && st == KILN_OK; k++) {
            result r;
            st = run(ctx, warm, timed, KILN_STRATEGY_PIPELINE,
                     s ? KILN_PIPELINE_1F1B : KILN_PIPELINE_GPIPE, micro[k], batch, &r);
            if (st != KILN_OK)
                break;
            printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                   s ? "1F1B" : "GPipe", micro[k], r.samples_per_s,
                   r.samples_per_s / one.samples_per_s, r.bubble,
                   1.0 / (micro[k] + 1.0), (double)r.activations[0] / 1048576.0,
                   (double)r.activations[1] / 1048576.0);
            fflush(stdout);
        }
    }
    if (st != KILN_OK)
        fprintf(stderr, "bench_pipeline: %s\n", kiln_context_last_error(ctx));
    kiln_dataset_destroy(warm);
    kiln_dataset_destroy(timed);
    kiln_context_destroy(ctx);
    return st == KILN_OK ? 0 : 1;
}
