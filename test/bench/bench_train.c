/* Training and evaluation throughput of the seed CNN on Fashion-MNIST, through
 * the public API only. torch_seed_cnn.py is its peer and times the same things
 * the same way:
 *  - startup_s: context creation to the end of the first training step
 *    (device discovery, reading the training samples, compile, kernel builds
 *    or cache hits, the first step);
 *  - train_samples_per_s: after a warm-up fit over W*B samples, one silent,
 *    shuffled epoch over N*B further samples; only kiln_model_fit is timed;
 *  - eval_samples_per_s (--eval): kiln_model_evaluate over the 10k test set
 *    at batch B, after a warm-up evaluate that meets the same batch shapes;
 *  - accuracy (--epochs-accuracy E): a fresh model trained E epochs on all
 *    60k training samples at batch B, then its test accuracy.
 * Usage: bench_train [--batch B] [--steps N] [--warmup W] [--limit L] [--eval]
 *                    [--epochs-accuracy E] [--json PATH] [--data DIR]
 * Exits 0, 1 on a kiln error, 2 on bad usage, 77 (skip) without an OpenCL device. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#endif
#include "kiln.h"
#include "bench_util.h"
#include "seed_cnn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRAIN_SAMPLES 60000
#define TEST_SAMPLES 10000

typedef struct bench_args {
    long batch, steps, warmup, epochs;
    long limit;              /* training samples read; 0: what warm-up and timing use */
    int eval;
    const char *json, *data;
} bench_args;

static int parse_args(int argc, char **argv, bench_args *a)
{
    a->batch = 128;
    a->steps = 200;
    a->warmup = 20;
    a->epochs = 0;
    a->limit = 0;
    a->eval = 0;
    a->json = NULL;
    a->data = "/usr/share/datasets/fashion-mnist";
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (strcmp(opt, "--eval") == 0) {
            a->eval = 1;
            continue;
        }
        if (strcmp(opt, "--batch") == 0)
            ok = bench_parse_long("bench_train", opt, v, 1, TRAIN_SAMPLES, &a->batch);
        else if (strcmp(opt, "--steps") == 0)
            ok = bench_parse_long("bench_train", opt, v, 1, TRAIN_SAMPLES, &a->steps);
        else if (strcmp(opt, "--warmup") == 0)   /* >= 1: startup ends with its first step */
            ok = bench_parse_long("bench_train", opt, v, 1, TRAIN_SAMPLES, &a->warmup);
        else if (strcmp(opt, "--limit") == 0)
            ok = bench_parse_long("bench_train", opt, v, 1, TRAIN_SAMPLES, &a->limit);
        else if (strcmp(opt, "--epochs-accuracy") == 0)
            ok = bench_parse_long("bench_train", opt, v, 0, 1000, &a->epochs);
        else if (strcmp(opt, "--json") == 0 && v)
            a->json = v;
        else if (strcmp(opt, "--data") == 0 && v)
            a->data = v;
        else {
            fprintf(stderr, "usage: bench_train [--batch B] [--steps N] [--warmup W] "
                    "[--limit L] [--eval] [--epochs-accuracy E] [--json PATH] [--data DIR]\n");
            return 0;
        }
        if (!ok)
            return 0;
        i++;
    }
    const long need = (a->warmup + a->steps) * a->batch;
    if (need > TRAIN_SAMPLES || (a->limit && a->limit < need)) {
        fprintf(stderr, "bench_train: (warmup + steps) * batch = %ld samples, more than the "
                "%ld read\n", need, a->limit ? a->limit : (long)TRAIN_SAMPLES);
        return 0;
    }
    if (!a->limit)
        a->limit = need;
    return 1;
}

static kiln_status load(kiln_context *ctx, const char *dir, const char *prefix, long limit,
                        kiln_dataset **out)
{
    char images[1024], labels[1024];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    kiln_idx_options o = {.struct_size = sizeof o, .limit = limit};
    return kiln_dataset_from_idx(ctx, images, labels, &o, out);
}

/* Input(28,28,1) -> Conv2D(32, 3x3, relu, valid) -> MaxPooling2D(2x2) -> Flatten
 * -> Dense(64, relu) -> Dense(10, softmax); Adam(1e-3), sparse categorical CE. */
static kiln_status seed_cnn(kiln_context *ctx, kiln_model **out)
{
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (st != KILN_OK)
        return st;
    seed_cnn_layers(m);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 1e-3f};
    kiln_compile_options co;
    memset(&co, 0, sizeof co);
    co.struct_size = sizeof co;
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.optimizer = &optimizer;
    st = kiln_model_compile(m, &co);   /* builder errors surface here */
    if (st != KILN_OK) {
        kiln_model_destroy(m);
        m = NULL;
    }
    *out = m;
    return st;
}

/* Marks the end of the first training step of a fit. */
static int first_step_done(void *user, const kiln_progress *p)
{
    double *t = user;
    if (p->event == KILN_EVENT_BATCH_END && p->epoch == 0 && p->step == 1)
        *t = bench_now();
    return 0;
}

static void fit_options(kiln_fit_options *fo, long batch, long epochs)
{
    *fo = (kiln_fit_options){.struct_size = sizeof *fo};
    fo->epochs = (int32_t)epochs;
    fo->batch_size = (int32_t)batch;
    fo->verbosity = KILN_VERBOSE_SILENT;
}

/* Writes s as a JSON string (device names are free text). */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_number(FILE *f, const char *key, double v, int valid)
{
    if (valid)
        fprintf(f, ", \"%s\": %.4f", key, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

int main(int argc, char **argv)
{
    bench_args a;
    if (!parse_args(argc, argv, &a))
        return 2;

    char err[1024] = "";
    kiln_context_options co;
    memset(&co, 0, sizeof co);
    co.struct_size = sizeof co;
    co.error_buffer = err;
    co.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    kiln_model *model = NULL, *fresh = NULL;
    kiln_dataset *train = NULL, *warm = NULL, *timed = NULL, *test = NULL, *test_warm = NULL;
    kiln_dataset *full = NULL;
    double t_first = 0, train_rate = 0, eval_rate = 0, accuracy = 0;
    kiln_training_stats timed_stats = {.struct_size = sizeof timed_stats};
    kiln_memory_report memory;
    memset(&memory, 0, sizeof memory);
    memory.struct_size = sizeof memory;
    FILE *f = NULL;

    const double t_start = bench_now();
    kiln_status st = kiln_context_create(&co, &ctx);
    if (st != KILN_OK) {
        fprintf(stderr, "bench_train: %s: %s\n", kiln_status_name(st), err);
        return st == KILN_ERROR_NO_DEVICE ? 77 : 1;
    }
    st = load(ctx, a.data, "train", a.limit, &train);
    if (st == KILN_OK)
        st = seed_cnn(ctx, &model);
    if (st == KILN_OK)
        st = kiln_dataset_subset(train, 0, a.warmup * a.batch, &warm);
    if (st == KILN_OK) {
        kiln_fit_options fo;
        fit_options(&fo, a.batch, 1);
        fo.callback = first_step_done;
        fo.callback_user = &t_first;
        st = kiln_model_fit(model, warm, &fo);
    }
    const double startup = t_first - t_start;

    /* The subset is cut before the clock starts: only the fit is timed. */
    if (st == KILN_OK)
        st = kiln_dataset_subset(train, a.warmup * a.batch, a.steps * a.batch, &timed);
    if (st == KILN_OK) {
        kiln_fit_options fo;
        fit_options(&fo, a.batch, 1);
        kiln_training_stats before = {.struct_size = sizeof before};
        kiln_model_training_stats(model, &before);
        const double t0 = bench_now();
        st = kiln_model_fit(model, timed, &fo);
        train_rate = (double)(a.steps * a.batch) / (bench_now() - t0);
        if (st == KILN_OK)
            st = kiln_model_training_stats(model, &timed_stats);
        if (st == KILN_OK)
            st = kiln_model_memory(model, 0, &memory);
        timed_stats.reductions -= before.reductions;
        timed_stats.reduce_seconds -= before.reduce_seconds;
        timed_stats.reduce_hidden_seconds -= before.reduce_hidden_seconds;
        timed_stats.input_seconds -= before.input_seconds;
    }

    if (st == KILN_OK && (a.eval || a.epochs))
        st = load(ctx, a.data, "t10k", 0, &test);
    if (st == KILN_OK && a.eval) {
        /* Warm-up: full batches plus the same ragged last batch as the timed pass. */
        long n = a.warmup * a.batch + TEST_SAMPLES % a.batch;
        n = n < TEST_SAMPLES ? n : TEST_SAMPLES;
        kiln_metrics met = {.struct_size = sizeof met};
        st = kiln_dataset_subset(test, 0, n, &test_warm);
        if (st == KILN_OK)
            st = kiln_model_evaluate(model, test_warm, (int32_t)a.batch, &met);
        const double t0 = bench_now();
        if (st == KILN_OK)
            st = kiln_model_evaluate(model, test, (int32_t)a.batch, &met);
        eval_rate = (double)met.samples / (bench_now() - t0);
    }

    if (st == KILN_OK && a.epochs) {
        kiln_metrics met = {.struct_size = sizeof met};
        kiln_fit_options fo;
        fit_options(&fo, a.batch, a.epochs);
        st = load(ctx, a.data, "train", 0, &full);
        if (st == KILN_OK)
            st = seed_cnn(ctx, &fresh);
        if (st == KILN_OK)
            st = kiln_model_fit(fresh, full, &fo);
        if (st == KILN_OK)
            st = kiln_model_evaluate(fresh, test, (int32_t)a.batch, &met);
        accuracy = met.accuracy;
    }

    kiln_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    const char *strategy = "";
    int32_t replicas = 0;
    if (st == KILN_OK)
        st = kiln_context_device_info(ctx, 0, &info);
    if (st == KILN_OK)
        st = kiln_model_distribution(model, &strategy, &replicas);
    if (st != KILN_OK) {
        fprintf(stderr, "bench_train: %s: %s\n", kiln_status_name(st),
                kiln_context_last_error(ctx));
        goto fail;
    }
    if (a.json && !(f = fopen(a.json, "a"))) {
        fprintf(stderr, "bench_train: cannot open %s: %s\n", a.json, strerror(errno));
        st = KILN_ERROR_IO;
    }
    if (f) {
        fprintf(f, "{\"name\": \"kiln\", \"batch\": %ld, \"steps\": %ld, \"warmup\": %ld",
                a.batch, a.steps, a.warmup);
        json_number(f, "train_samples_per_s", train_rate, 1);
        json_number(f, "eval_samples_per_s", eval_rate, a.eval);
        json_number(f, "startup_s", startup, 1);
        json_number(f, "accuracy", accuracy, a.epochs > 0);
        /* Data-parallel only: the gradient reduction per step and the share of
         * it that overlapped backward. */
        const int reduced = timed_stats.reductions > 0;
        json_number(f, "reduce_ms_per_step",
                    reduced ? 1e3 * timed_stats.reduce_seconds / (double)timed_stats.reductions
                            : 0, reduced);
        json_number(f, "reduce_hidden_fraction",
                    reduced && timed_stats.reduce_seconds > 0
                        ? timed_stats.reduce_hidden_seconds / timed_stats.reduce_seconds : 0,
                    reduced && timed_stats.reduce_seconds > 0);
        /* Replica 0 after training: what it holds beside the least it could. */
        const double least = (double)(memory.parameter_bytes + memory.gradient_bytes +
                                      memory.optimizer_bytes + memory.activation_bytes);
        json_number(f, "memory_peak_mib", (double)memory.device_peak_bytes / 1048576.0, 1);
        json_number(f, "memory_least_mib", least / 1048576.0, 1);
        json_number(f, "memory_workspace_mib", (double)memory.workspace_bytes / 1048576.0, 1);
        json_number(f, "input_ms_per_step", 1e3 * timed_stats.input_seconds / (double)a.steps, 1);
        fprintf(f, ", \"epochs_accuracy\": %ld, \"device\": ", a.epochs);
        json_string(f, info.name);
        fprintf(f, ", \"gemm_parameters\": ");
        json_string(f, info.gemm_parameters);
        fprintf(f, ", \"strategy\": \"%s\", \"replicas\": %d}\n", strategy, (int)replicas);
        if (fclose(f) != 0) {
            fprintf(stderr, "bench_train: cannot write %s\n", a.json);
            st = KILN_ERROR_IO;
        }
    }
    if (st == KILN_OK) {
        printf("kiln: batch %ld, %ld steps: %.0f train samples/s", a.batch, a.steps, train_rate);
        if (a.eval)
            printf(", %.0f eval samples/s", eval_rate);
        printf(", startup %.2f s, device memory peak %.1f MiB (parameters, gradients, "
               "optimizer state and activations %.1f MiB)", startup,
               (double)memory.device_peak_bytes / 1048576.0,
               (double)(memory.parameter_bytes + memory.gradient_bytes +
                        memory.optimizer_bytes + memory.activation_bytes) / 1048576.0);
        if (a.epochs)
            printf(", test accuracy %.4f after %ld epoch(s)", accuracy, a.epochs);
        printf(" [%s, %s x%d; GEMM: %s]\n", info.name, strategy, (int)replicas,
               info.gemm_parameters);
    }
fail:
    kiln_model_destroy(fresh);
    kiln_model_destroy(model);
    kiln_dataset_destroy(full);
    kiln_dataset_destroy(test_warm);
    kiln_dataset_destroy(test);
    kiln_dataset_destroy(timed);
    kiln_dataset_destroy(warm);
    kiln_dataset_destroy(train);
    kiln_context_destroy(ctx);
    return st == KILN_OK ? 0 : 1;
}
