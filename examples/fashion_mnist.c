/* The seed CNN on Fashion-MNIST:
 *   Input(28,28,1) -> Conv2D(32, 3x3, relu) -> MaxPooling2D(2x2) -> Flatten
 *   -> Dense(64, relu) -> Dense(10, softmax); Adam(1e-3); batch 32; 5 epochs.
 * Usage: fashion_mnist [--epochs N] [--batch N | --per-replica-batch N] [--limit N]
 *                      [--devices SPEC] [--data DIR] [--data-format idx|npy|folder]
 *                      [--save PATH]
 * --batch is the global batch (split across the devices); --per-replica-batch
 * N makes it N times the replicas instead (kiln_fit_options.
 * per_replica_batch_size, TensorFlow's rule), so that each added device adds
 * work rather than cutting each one's share.
 * --devices takes what KILN_DEVICES takes ("0", "0,1", "gpu", "all").
 * --data-format: Debian's IDX files (the default), .npy files written by
 * tools/fashion_npy.py, or an image folder written by
 * tools/fashion_png_folder.py; --data names their folder. --save writes the
 * trained model to PATH (kiln_model_save; `kiln summary PATH` reads it). */
#include "fashion_data.h"
#include "seed_cnn.h"
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct args {
    int epochs, batch, per_replica;   /* batch 0: set by per_replica */
    long limit;
    const char *devices, *data, *save;
    fashion_format format;
} args;

static const char usage[] =
    "usage: fashion_mnist [--epochs N] [--batch N | --per-replica-batch N] [--limit N]\n"
    "                     [--devices SPEC] [--data DIR] [--data-format idx|npy|folder]\n"
    "                     [--save PATH]\n"
    "Trains the seed CNN on Fashion-MNIST (5 epochs, batch 32) and prints the test\n"
    "loss and accuracy. --batch is the global batch, split across the devices;\n"
    "--per-replica-batch N makes it N times the replicas. --devices takes what\n"
    "KILN_DEVICES takes (\"0\", \"0,1\", \"gpu\", \"all\"). --data-format: Debian's IDX\n"
    "files (the default), .npy files written by tools/fashion_npy.py, or an image\n"
    "folder written by tools/fashion_png_folder.py; --data names their folder.\n"
    "--save writes the trained model to PATH (kiln summary PATH reads it).\n";

/* 1: parsed; 0: a usage error (said on stderr); -1: --help (the usage on
 * stdout). */
static int parse_args(int argc, char **argv, args *a)
{
    a->epochs = 5;
    a->batch = -1;   /* not given: 32, or 0 under --per-replica-batch */
    a->per_replica = 0;
    a->limit = 0;
    a->devices = NULL;
    a->data = FASHION_DEFAULT_DIR;
    a->save = NULL;
    a->format = FASHION_IDX;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return fputs(usage, stdout), -1;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s needs a value\n", argv[i]);
            return 0;
        }
        if (strcmp(argv[i], "--epochs") == 0)
            a->epochs = atoi(v);
        else if (strcmp(argv[i], "--batch") == 0)
            a->batch = atoi(v);
        else if (strcmp(argv[i], "--per-replica-batch") == 0)
            a->per_replica = atoi(v);
        else if (strcmp(argv[i], "--limit") == 0)
            a->limit = atol(v);
        else if (strcmp(argv[i], "--devices") == 0)
            a->devices = v;
        else if (strcmp(argv[i], "--data") == 0)
            a->data = v;
        else if (strcmp(argv[i], "--save") == 0)
            a->save = v;
        else if (strcmp(argv[i], "--data-format") == 0 && fashion_format_parse(v) >= 0)
            a->format = (fashion_format)fashion_format_parse(v);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 0;
        }
    }
    if (a->batch < 0)
        a->batch = a->per_replica ? 0 : 32;
    return 1;
}

static kiln_model *seed_cnn(kiln_context *ctx)
{
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m) != KILN_OK)
        return NULL;
    seed_cnn_layers(m);
    return m;
}

static void print_devices(kiln_context *ctx)
{
    int32_t n_devices = 0;
    kiln_context_device_count(ctx, &n_devices);
    for (int32_t i = 0; i < n_devices; i++) {
        kiln_device_info info = {.struct_size = sizeof info};
        kiln_context_device_info(ctx, i, &info);
        printf("device %d: %s (%s), %u compute units, %.1f GiB\n", (int)info.index, info.name,
               info.platform, info.compute_units,
               (double)info.global_memory_bytes / (1024.0 * 1024.0 * 1024.0));
    }
}

int main(int argc, char **argv)
{
    args a;
    const int parsed = parse_args(argc, argv, &a);
    if (parsed <= 0)
        return parsed < 0 ? 0 : 2;
    if (a.devices)
        setenv("KILN_DEVICES", a.devices, 1);

    kiln_context_options co = {0};
    char err[1024] = "";
    co.struct_size = sizeof co;
    co.error_buffer = err;
    co.error_buffer_size = sizeof err;
    co.log_level = KILN_LOG_WARNING;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        return fprintf(stderr, "fashion_mnist: %s\n", err), 1;
    int rc = 1;
    kiln_dataset *train = NULL, *test = NULL;
    kiln_model *model = NULL;
    kiln_status st = fashion_load(ctx, a.format, a.data, 1, a.limit, &train);
    if (st == KILN_OK)
        st = fashion_load(ctx, a.format, a.data, 0, 0, &test);
    if (st == KILN_OK && !(model = seed_cnn(ctx)))
        st = KILN_ERROR_OUT_OF_MEMORY;
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 1e-3f};
    kiln_compile_options opts = {.struct_size = sizeof opts};
    opts.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    opts.optimizer = &optimizer;
    if (st == KILN_OK)
        st = kiln_model_compile(model, &opts);
    /* Under multi_worker (mpirun), every process trains; rank 0 reports. */
    int32_t rank = 0, processes = 1;
    if (st == KILN_OK)
        st = kiln_model_rank(model, &rank, &processes);
    const char *strategy = "";
    int32_t replicas = 0;
    if (st == KILN_OK && rank == 0 &&
        kiln_model_distribution(model, &strategy, &replicas) == KILN_OK) {
        print_devices(ctx);
        printf("strategy: %s, %d replica(s)", strategy, (int)replicas);
        if (processes > 1)
            printf(" in each of %d processes", (int)processes);
        if (a.per_replica)
            printf(", per-replica batch %d", a.per_replica);
        else
            printf(", global batch %d", a.batch);
        printf("\n");
        fflush(stdout);
    }
    kiln_fit_options fit = {.struct_size = sizeof fit};
    fit.epochs = a.epochs;
    fit.batch_size = a.batch;
    fit.per_replica_batch_size = a.per_replica;
    int64_t n_train = 0;
    double t0 = fashion_seconds(), t1 = t0;
    if (st == KILN_OK) {
        kiln_dataset_count(train, &n_train);
        st = kiln_model_fit(model, train, &fit);
        t1 = fashion_seconds();
    }
    kiln_metrics result = {.struct_size = sizeof result};
    if (st == KILN_OK)
        st = kiln_model_evaluate(model, test, 256, &result);
    if (st == KILN_OK && rank == 0 && a.save)
        st = kiln_model_save(model, a.save);
    if (st == KILN_OK && rank != 0) {
        rc = 0;
    } else if (st == KILN_OK) {
        const double samples = (double)n_train * a.epochs;
        printf("training time: %.1f s for %d epochs, %.0f samples/s\n", t1 - t0, a.epochs,
               samples / (t1 - t0));
        printf("test loss: %.4f\n", result.loss);
        printf("test accuracy: %.4f\n", result.accuracy);
        if (a.save)
            printf("model saved to %s\n", a.save);
        rc = 0;
    } else {
        fprintf(stderr, "fashion_mnist: %s: %s\n", kiln_status_name(st),
                kiln_context_last_error(ctx));
    }
    kiln_model_destroy(model);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(test);
    kiln_context_destroy(ctx);
    return rc;
}
