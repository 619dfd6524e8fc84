/* The input pipeline's benchmarks, through the public API only
 * (test/bench/input_pipeline.sh runs them and prints the table):
 *  - io: the seed CNN trained from Fashion-MNIST in memory, and from a
 *    callback source over the same samples whose fill costs COST seconds of
 *    work per batch (a busy loop, or a sleep with --sleep: CPU work against
 *    waiting for I/O), with the loader's threads and prefetch, and without
 *    (loader_threads -1). Rounds alternate the three; each prints samples/s.
 *    COST is --cost-fraction of an in-memory step, measured first.
 *  - npy FEATURES LABELS: one epoch of the seed CNN from .npy files (uint8
 *    features are scaled by 1/255), samples/s; peak memory is measured
 *    around the process by the script.
 *  - folder DIR: images/s that kiln's loader delivers to training from an
 *    image folder (a one-layer model, whose compute is negligible beside
 *    decoding), with --threads loader threads.
 * Output: one JSON object per measurement on stdout.
 * Usage: bench_input io [--batch B] [--samples N] [--rounds R]
 *                       [--cost-fraction F] [--sleep] [--data DIR]
 *        bench_input npy FEATURES LABELS [--batch B] [--limit N]
 *        bench_input folder DIR [--batch B] [--threads T] [--size S] [--epochs E] */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* clock_gettime, nanosleep */
#endif
#include "kiln.h"
#include "seed_cnn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int failed(kiln_context *ctx, kiln_status st, const char *what)
{
    if (st == KILN_OK)
        return 0;
    fprintf(stderr, "bench_input: %s: %s: %s\n", what, kiln_status_name(st),
            ctx ? kiln_context_last_error(ctx) : "");
    return 1;
}

static const char *option(int argc, char **argv, const char *name, const char *fallback)
{
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return fallback;
}

static int flag(int argc, char **argv, const char *name)
{
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

static kiln_model *seed_cnn(kiln_context *ctx)
{
    kiln_model *m = NULL;
    if (failed(ctx, kiln_model_create(ctx, &m), "model"))
        return NULL;
    seed_cnn_layers(m);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    co.optimizer = &optimizer;
    if (failed(ctx, kiln_model_compile(m, &co), "compile")) {
        kiln_model_destroy(m);
        return NULL;
    }
    return m;
}

/* Samples per second of one silent epoch of a fresh seed CNN on `ds`. */
static double train_rate(kiln_context *ctx, const kiln_dataset *ds, int32_t batch,
                         int32_t threads)
{
    kiln_model *m = seed_cnn(ctx);
    if (!m)
        return -1;
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = batch;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.loader_threads = threads;
    int64_t count = 0;
    kiln_dataset_count(ds, &count);
    const double t0 = now();
    const kiln_status st = kiln_model_fit(m, ds, &fo);
    const double seconds = now() - t0;
    kiln_model_destroy(m);
    return failed(ctx, st, "fit") ? -1 : (double)count / seconds;
}

/* The callback source of the io benchmark: the in-memory samples, after
 * `cost` seconds of work per sample. */
typedef struct costly {
    const kiln_dataset *ds;
    double cost;
    int sleep;
    double spent;            /* seconds of fill, measured (under lock) */
    int64_t fills;
    double owed;             /* seconds of sleep asked for and not yet slept */
    pthread_mutex_t lock;
} costly;

static void sleep_for(double seconds)
{
    const struct timespec pause = {.tv_sec = (time_t)seconds,
                                   .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&pause, NULL);
}

/* A sleep of tens of microseconds overshoots by the timer slack (50 us by
 * default), which would triple the fill's cost: each call sleeps what is
 * owed, and what it oversleeps is paid back by the next calls, so the wait
 * per batch is the cost asked for. */
static void sleep_owed(costly *c)
{
    pthread_mutex_lock(&c->lock);
    c->owed += c->cost;
    const double take = c->owed > 0 ? c->owed : 0;
    c->owed -= take;
    pthread_mutex_unlock(&c->lock);
    if (take <= 0)
        return;
    const double t0 = now();
    sleep_for(take);
    const double over = now() - t0 - take;
    pthread_mutex_lock(&c->lock);
    c->owed -= over;
    pthread_mutex_unlock(&c->lock);
}

static int fill_costly(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                       size_t size)
{
    costly *c = user;
    (void)message;
    (void)size;
    const double t0 = now();
    if (c->sleep) {
        sleep_owed(c);
    } else {
        const double until = now() + c->cost;
        volatile unsigned spin = 0;
        while (now() < until)
            spin++;
    }
    const int failed_read = kiln_dataset_read(c->ds, index, b) != KILN_OK;
    pthread_mutex_lock(&c->lock);
    c->spent += now() - t0;
    c->fills++;
    pthread_mutex_unlock(&c->lock);
    return failed_read;
}

static int bench_io(kiln_context *ctx, int argc, char **argv)
{
    const int32_t batch = atoi(option(argc, argv, "--batch", "32"));
    const int64_t samples = atoll(option(argc, argv, "--samples", "12800"));
    const int rounds = atoi(option(argc, argv, "--rounds", "3"));
    const double fraction = atof(option(argc, argv, "--cost-fraction", "0.5"));
    const char *dir = option(argc, argv, "--data", "/usr/share/datasets/fashion-mnist");
    char images[512], labels[512];
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", dir);
    kiln_idx_options io = {.struct_size = sizeof io, .limit = samples};
    kiln_dataset *memory = NULL, *streamed = NULL;
    if (failed(ctx, kiln_dataset_from_idx(ctx, images, labels, &io, &memory), "idx"))
        return 1;
    /* Warm-up, then the in-memory step time sets the fill's cost. */
    train_rate(ctx, memory, batch, 0);
    const double rate = train_rate(ctx, memory, batch, 0);
    /* A batch's fill costs `fraction` of an in-memory step. */
    costly c = {.ds = memory, .cost = fraction / rate, .sleep = flag(argc, argv, "--sleep"),
                .lock = PTHREAD_MUTEX_INITIALIZER};
    kiln_callback_desc d = {.struct_size = sizeof d, .count = samples, .feature_rank = 3,
                            .feature_dims = {28, 28, 1}, .fill = fill_costly, .user = &c};
    if (failed(ctx, kiln_dataset_from_callback(ctx, &d, &streamed), "callback source"))
        return 1;
    printf("{\"bench\": \"io\", \"batch\": %d, \"fill_seconds_per_batch\": %.6f, "
           "\"fill\": \"%s\", \"calibration_samples_per_s\": %.1f}\n", (int)batch,
           c.cost * batch, c.sleep ? "sleep" : "busy", rate);
    for (int r = 0; r < rounds; r++) {
        c.spent = 0;            /* no loader thread runs between fits */
        c.fills = 0;
        const double in_memory = train_rate(ctx, memory, batch, 0);
        const double prefetched = train_rate(ctx, streamed, batch, 0);
        const double inline_reads = train_rate(ctx, streamed, batch, -1);
        printf("{\"bench\": \"io\", \"round\": %d, \"in_memory\": %.1f, \"streamed\": %.1f, "
               "\"streamed_no_prefetch\": %.1f, \"fill_seconds_per_batch_measured\": %.6f}\n",
               r, in_memory, prefetched, inline_reads,
               c.fills ? c.spent / (double)c.fills * batch : 0.0);
        fflush(stdout);
    }
    kiln_dataset_destroy(streamed);
    kiln_dataset_destroy(memory);
    return 0;
}

static int bench_npy(kiln_context *ctx, int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const int32_t batch = atoi(option(argc, argv, "--batch", "128"));
    kiln_npy_options o = {.struct_size = sizeof o, .scale = 1.0f / 255.0f,
                          .limit = atoll(option(argc, argv, "--limit", "0"))};
    kiln_dataset *ds = NULL;
    if (failed(ctx, kiln_dataset_from_npy(ctx, argv[2], argv[3], &o, &ds), "npy"))
        return 1;
    int64_t count = 0;
    kiln_dataset_count(ds, &count);
    const double rate = train_rate(ctx, ds, batch, 0);
    printf("{\"bench\": \"npy\", \"samples\": %lld, \"batch\": %d, \"samples_per_s\": %.1f}\n",
           (long long)count, (int)batch, rate);
    kiln_dataset_destroy(ds);
    return rate < 0;
}

static int bench_folder(kiln_context *ctx, int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const int32_t batch = atoi(option(argc, argv, "--batch", "64"));
    const int32_t threads = atoi(option(argc, argv, "--threads", "1"));
    const int32_t side = atoi(option(argc, argv, "--size", "28"));
    const int32_t epochs = atoi(option(argc, argv, "--epochs", "2"));
    kiln_image_folder_options o = {.struct_size = sizeof o, .height = side, .width = side,
                                   .channels = 1};
    kiln_dataset *ds = NULL;
    if (failed(ctx, kiln_dataset_from_image_folder(ctx, argv[2], &o, &ds), "image folder"))
        return 1;
    int64_t count = 0;
    int32_t classes = 0;
    kiln_dataset_count(ds, &count);
    kiln_dataset_class_count(ds, &classes);
    kiln_model *m = NULL;
    const int32_t shape[] = {side, side, 1};
    kiln_dense_options head = {.struct_size = sizeof head, .units = classes,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    kiln_status st = kiln_model_create(ctx, &m);
    if (st == KILN_OK) {
        kiln_input(m, 3, shape, NULL);
        kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
        kiln_dense(m, KILN_NODE_PREVIOUS, &head);
        st = kiln_model_compile(m, &co);
    }
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = batch;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.loader_threads = threads;
    fo.epochs = epochs;
    const double t0 = now();
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fo);
    const double seconds = now() - t0;
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    if (failed(ctx, st, "fit"))
        return 1;
    printf("{\"bench\": \"folder\", \"images\": %lld, \"epochs\": %d, \"threads\": %d, "
           "\"images_per_s\": %.1f}\n", (long long)count, (int)epochs, (int)threads,
           (double)(count * epochs) / seconds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_input io|npy|folder ...\n");
        return 2;
    }
    kiln_context *ctx = NULL;
    const kiln_status st = kiln_context_create(NULL, &ctx);
    if (st == KILN_ERROR_NO_DEVICE)
        return 77;
    if (failed(NULL, st, "context"))
        return 1;
    int rc = 2;
    if (strcmp(argv[1], "io") == 0)
        rc = bench_io(ctx, argc, argv);
    else if (strcmp(argv[1], "npy") == 0)
        rc = bench_npy(ctx, argc, argv);
    else if (strcmp(argv[1], "folder") == 0)
        rc = bench_folder(ctx, argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: bench_input io|npy FEATURES LABELS|folder DIR ...\n");
    kiln_context_destroy(ctx);
    return rc;
}
