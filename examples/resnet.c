/* The seed ResNet (examples/resnet_model.c) on Fashion-MNIST at its own
 * 28x28x1 size (no resizing: the stride-2 stem and pooling take it to 1x1
 * by the last block), printing its summary, training briefly and printing
 * the test accuracy. The strategy is the default for the devices (one_device
 * on one, mirrored on several; KILN_STRATEGY overrides).
 *
 * Usage: resnet [--epochs N] [--batch N] [--limit N] [--test-limit N]
 *               [--sync-bn] [--data DIR] [--save PATH]
 *        resnet --input 224 [--batch N] [--steps N] [--warmup N] [--sync-bn]
 * --input S benchmarks training at the seed's S x S x 3 input on synthetic
 * data (step time and samples/s; no accuracy): --warmup steps (default 1:
 * kernel builds, first allocations) run untimed, then --steps timed ones. --save writes the trained
 * model to PATH (kiln_model_save). */
#include "fashion_data.h"
#include "resnet_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct args {
    int epochs, batch, steps, warmup, input, sync_bn;
    long limit, test_limit;
    const char *data, *save;
} args;

static const char usage[] =
    "usage: resnet [--epochs N] [--batch N] [--limit N] [--test-limit N]\n"
    "              [--sync-bn] [--data DIR] [--save PATH]\n"
    "       resnet --input 224 [--batch N] [--steps N] [--warmup N] [--sync-bn]\n"
    "Trains the seed ResNet on Fashion-MNIST briefly and prints its summary and the\n"
    "test accuracy. --input S benchmarks training at S x S x 3 on synthetic data\n"
    "(--warmup untimed steps, then --steps timed ones). --save writes the trained\n"
    "model to PATH (kiln_model_save).\n";

/* 1: parsed; 0: a usage error (said on stderr); -1: --help (the usage on
 * stdout). */
static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.epochs = 2, .batch = 32, .steps = 10, .warmup = 1, .limit = 4096,
                .test_limit = 2000, .data = FASHION_DEFAULT_DIR};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return fputs(usage, stdout), -1;
        if (strcmp(argv[i], "--sync-bn") == 0) {
            a->sync_bn = 1;
            continue;
        }
        const char *opt = argv[i];
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        long n = v ? atol(v) : 0;
        const int text = !strcmp(opt, "--data") || !strcmp(opt, "--save");
        if (!v || (!text && n <= 0)) {
            fprintf(stderr, "resnet: %s needs a %svalue\n", opt, text ? "" : "positive ");
            return 0;
        }
        if (strcmp(opt, "--epochs") == 0)
            a->epochs = (int)n;
        else if (strcmp(opt, "--batch") == 0)
            a->batch = (int)n;
        else if (strcmp(opt, "--steps") == 0)
            a->steps = (int)n;
        else if (strcmp(opt, "--warmup") == 0)
            a->warmup = (int)n;
        else if (strcmp(opt, "--input") == 0)
            a->input = (int)n;
        else if (strcmp(opt, "--limit") == 0)
            a->limit = n;
        else if (strcmp(opt, "--test-limit") == 0)
            a->test_limit = n;
        else if (strcmp(opt, "--data") == 0)
            a->data = v;
        else if (strcmp(opt, "--save") == 0)
            a->save = v;
        else {
            fprintf(stderr, "resnet: unknown option %s\n", opt);
            return 0;
        }
    }
    return 1;
}

/* Random images and labels of the benchmark's size (speed only). */
static kiln_status synthetic(kiln_context *ctx, int side, long count, float **x, int32_t **y,
                             kiln_dataset **out)
{
    const size_t n = (size_t)count * (size_t)side * (size_t)side * 3;
    *x = malloc(n * sizeof(float));
    *y = malloc((size_t)count * sizeof(int32_t));
    if (!*x || !*y)
        return KILN_ERROR_OUT_OF_MEMORY;
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        (*x)[i] = (float)(s >> 40) / 16777216.0f;
    }
    for (long i = 0; i < count; i++)
        (*y)[i] = (int32_t)(i % 10);
    kiln_arrays_desc d = {.struct_size = sizeof d};
    d.count = count;
    d.feature_rank = 3;
    d.feature_dims[0] = side;
    d.feature_dims[1] = side;
    d.feature_dims[2] = 3;
    d.features = *x;
    d.sparse_labels = *y;
    return kiln_dataset_from_arrays(ctx, &d, out);
}

static void print_summary(const kiln_model *m)
{
    size_t length = 0;
    if (kiln_model_summary(m, NULL, 0, &length) != KILN_OK)
        return;
    char *text = malloc(length + 1);
    if (text && kiln_model_summary(m, text, length + 1, NULL) == KILN_OK)
        fputs(text, stdout);
    free(text);
}

int main(int argc, char **argv)
{
    args a;
    const int parsed = parse_args(argc, argv, &a);
    if (parsed <= 0)
        return parsed < 0 ? 0 : 2;
    kiln_context_options co = {.struct_size = sizeof co};
    char err[1024] = "";
    co.error_buffer = err;
    co.error_buffer_size = sizeof err;
    co.log_level = KILN_LOG_WARNING;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        return fprintf(stderr, "resnet: %s\n", err), 1;

    const int side = a.input ? a.input : 28, channels = a.input ? 3 : 1;
    kiln_model *model = NULL;
    kiln_dataset *train = NULL, *test = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    kiln_status st = kiln_model_create(ctx, &model);
    if (st == KILN_OK)
        resnet_build(model, side, side, channels, 10, a.sync_bn);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 1e-3f};
    kiln_compile_options opts = {.struct_size = sizeof opts};
    opts.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    opts.optimizer = &optimizer;
    if (st == KILN_OK)
        st = kiln_model_compile(model, &opts);
    if (st == KILN_OK)
        print_summary(model);
    const char *strategy = "";
    int32_t replicas = 0;
    if (st == KILN_OK && kiln_model_distribution(model, &strategy, &replicas) == KILN_OK)
        printf("strategy: %s, %d replica(s), global batch %d, %s batch norm\n", strategy,
               (int)replicas, a.batch, a.sync_bn ? "synchronised" : "per-replica");
    fflush(stdout);

    if (st == KILN_OK && a.input)
        st = synthetic(ctx, side, (long)a.batch * (a.warmup + a.steps), &x, &y, &train);
    else if (st == KILN_OK)
        st = fashion_load(ctx, FASHION_IDX, a.data, 1, a.limit, &train);
    if (st == KILN_OK && !a.input)
        st = fashion_load(ctx, FASHION_IDX, a.data, 0, a.test_limit, &test);
    kiln_fit_options fit = {.struct_size = sizeof fit};
    fit.epochs = a.input ? 1 : a.epochs;
    fit.batch_size = a.batch;
    fit.no_shuffle = a.input != 0;
    int64_t n_train = 0;
    if (st == KILN_OK && a.input) {
        /* Warm-up steps (kernel builds, first allocations), then the timed ones. */
        kiln_dataset *warm = NULL, *timed = NULL;
        const int64_t w = (int64_t)a.batch * a.warmup;
        st = kiln_dataset_subset(train, 0, w, &warm);
        if (st == KILN_OK)
            st = kiln_dataset_subset(train, w, (int64_t)a.batch * a.steps, &timed);
        if (st == KILN_OK)
            st = kiln_model_fit(model, warm, &fit);
        const double t0 = fashion_seconds();
        if (st == KILN_OK)
            st = kiln_model_fit(model, timed, &fit);
        const double dt = fashion_seconds() - t0;
        if (st == KILN_OK)
            printf("input %dx%dx3, batch %d: %.3f s per step, %.1f samples/s\n", side, side,
                   a.batch, dt / a.steps, (double)a.batch * a.steps / dt);
        kiln_dataset_destroy(warm);
        kiln_dataset_destroy(timed);
    } else if (st == KILN_OK) {
        kiln_dataset_count(train, &n_train);
        const double t0 = fashion_seconds();
        st = kiln_model_fit(model, train, &fit);
        const double dt = fashion_seconds() - t0;
        if (st == KILN_OK)
            printf("training: %lld samples x %d epochs in %.1f s, %.0f samples/s\n",
                   (long long)n_train, a.epochs, dt, (double)n_train * a.epochs / dt);
    }
    kiln_metrics result = {.struct_size = sizeof result};
    if (st == KILN_OK && test)
        st = kiln_model_evaluate(model, test, 256, &result);
    if (st == KILN_OK && test)
        printf("test accuracy: %.4f\n", result.accuracy);
    if (st == KILN_OK && a.save && (st = kiln_model_save(model, a.save)) == KILN_OK)
        printf("model saved to %s\n", a.save);
    if (st != KILN_OK)
        fprintf(stderr, "resnet: %s: %s\n", kiln_status_name(st), kiln_context_last_error(ctx));
    kiln_model_destroy(model);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(test);
    kiln_context_destroy(ctx);
    free(x);
    free(y);
    return st == KILN_OK ? 0 : 1;
}
