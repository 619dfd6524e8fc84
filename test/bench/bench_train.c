/* Training (and optionally evaluation) throughput of the seed CNN on
 * Fashion-MNIST, timed as torch_seed_cnn.py times its peer: the same
 * warm-up steps, then `steps` timed steps of `batch` samples. Prints one
 * JSON object. Usage: bench_train [--batch B] [--steps N] [--warmup W] [--eval]
 * [--bucket-bytes N] (gradient buckets for the mirrored strategy; 0: default) */
#include "kiln.h"
#include "runtime/model.h"   /* the strategy's own timing of its reducer */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA "/usr/share/datasets/fashion-mnist"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static kiln_status build(kiln_context *ctx, int64_t bucket_bytes, kiln_model **out)
{
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (st != KILN_OK)
        return st;
    const int32_t shape[] = {28, 28, 1};
    kiln_conv2d_options conv = {sizeof conv, NULL, 32, {3, 3}, {1, 1}, KILN_PADDING_VALID,
                                KILN_ACTIVATION_RELU, 0};
    kiln_pool2d_options pool = {sizeof pool, NULL, {2, 2}, {2, 2}, KILN_PADDING_VALID};
    kiln_dense_options hidden = {sizeof hidden, NULL, 64, KILN_ACTIVATION_RELU, 0};
    kiln_dense_options head = {sizeof head, NULL, 10, KILN_ACTIVATION_SOFTMAX, 0};
    kiln_input(m, 3, shape, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &pool);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.bucket_bytes = bucket_bytes;
    co.first_bucket_bytes = bucket_bytes;
    st = kiln_model_compile(m, &co);
    if (st != KILN_OK)
        kiln_model_destroy(m);
    *out = st == KILN_OK ? m : NULL;
    return st;
}

/* One silent epoch over the first steps * batch samples of `data`. */
static kiln_status train(kiln_model *m, const kiln_dataset *data, int64_t start, int batch,
                         int steps)
{
    kiln_dataset *part = NULL;
    kiln_status st = kiln_dataset_subset(data, start, (int64_t)steps * batch, &part);
    kiln_fit_options fo;
    kiln_fit_options_init(&fo);
    fo.batch_size = batch;
    fo.no_shuffle = 1;
    fo.verbosity = KILN_VERBOSE_SILENT;
    if (st == KILN_OK)
        st = kiln_model_fit(m, part, &fo);
    kiln_dataset_destroy(part);
    return st;
}

int main(int argc, char **argv)
{
    int batch = 128, steps = 200, warmup = 20, eval = 0;
    int64_t bucket_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--eval") == 0)
            eval = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0)
            batch = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
            warmup = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--bucket-bytes") == 0)
            bucket_bytes = atoll(argv[++i]);
        else
            return fprintf(stderr, "usage: bench_train [--batch B] [--steps N] [--warmup W] "
                           "[--eval] [--bucket-bytes N]\n"), 2;
    }
    if (batch < 1 || steps < 1 || warmup < 1 || (int64_t)(steps + warmup + 1) * batch > 60000)
        return fprintf(stderr, "bench_train: need 1 <= (steps + warmup + 1) * batch <= "
                       "60000\n"), 2;
    const double t_start = now();
    kiln_context *ctx = NULL;
    kiln_model *m = NULL;
    kiln_dataset *data = NULL, *test = NULL;
    kiln_idx_options io = {.struct_size = sizeof io};
    io.limit = (int64_t)(steps + warmup + 1) * batch;
    kiln_status st = kiln_context_create(NULL, &ctx);
    if (st == KILN_OK)
        st = kiln_dataset_from_idx(ctx, DATA "/train-images-idx3-ubyte.gz",
                                   DATA "/train-labels-idx1-ubyte.gz", &io, &data);
    if (st == KILN_OK)
        st = build(ctx, bucket_bytes, &m);
    if (st == KILN_OK)
        st = train(m, data, 0, batch, 1);
    const double startup = now() - t_start;
    if (st == KILN_OK)
        st = train(m, data, batch, batch, warmup);
    double t0 = now();
    if (st == KILN_OK)
        st = train(m, data, (int64_t)(warmup + 1) * batch, batch, steps);
    const double train_rate = (double)steps * batch / (now() - t0);
    double eval_rate = -1;
    if (st == KILN_OK && eval) {
        st = kiln_dataset_from_idx(ctx, DATA "/t10k-images-idx3-ubyte.gz",
                                   DATA "/t10k-labels-idx1-ubyte.gz", NULL, &test);
        kiln_metrics met = {.struct_size = sizeof met};
        t0 = now();
        if (st == KILN_OK)
            st = kiln_model_evaluate(m, test, 256, &met);
        eval_rate = 10000.0 / (now() - t0);
    }
    if (st != KILN_OK) {
        fprintf(stderr, "bench_train: %s: %s\n", kiln_status_name(st),
                ctx ? kiln_context_last_error(ctx) : "no context");
        return 1;
    }
    kiln_device_info info = {.struct_size = sizeof info};
    kiln_context_device_info(ctx, 0, &info);
    const char *strategy = "";
    int32_t replicas = 0;
    kiln_model_distribution(m, &strategy, &replicas);
    kiln_strategy_stats stats = {0, 0, 0};
    m->strategy->stats(m->strategy_impl, &stats);
    printf("{\"name\": \"kiln\", \"batch\": %d, \"steps\": %d, \"train_samples_per_s\": %.1f, "
           "\"eval_samples_per_s\": ", batch, steps, train_rate);
    if (eval_rate > 0)
        printf("%.1f", eval_rate);
    else
        printf("null");
    printf(", \"startup_s\": %.3f, \"device\": \"%s\", \"strategy\": \"%s\", "
           "\"replicas\": %d, \"reduce_ms_per_step\": %.3f, \"reduce_hidden_fraction\": ",
           startup, info.name, strategy, (int)replicas,
           stats.reductions ? 1e3 * stats.reduce_seconds / (double)stats.reductions : 0.0);
    if (stats.reduce_seconds > 0)
        printf("%.3f}\n", stats.hidden_seconds / stats.reduce_seconds);
    else
        printf("null}\n");
    kiln_model_destroy(m);
    kiln_dataset_destroy(data);
    kiln_dataset_destroy(test);
    kiln_context_destroy(ctx);
    return 0;
}
