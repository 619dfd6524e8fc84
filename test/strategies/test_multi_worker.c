/* The multi_worker strategy, run by test/common/mpi_run.sh as 2 MPI processes with
 * two PoCL basic devices each. Every rank checks, against training done
 * in-process without MPI on the same global batches: 2 processes x 1
 * device and 2 x 2 equal one device (and 1 process x 2 devices, mirrored);
 * evaluate is global; predict gathers every process's rows; checkpoints
 * are written once (by rank 0) and load on one device and under 2
 * processes; processes that disagree on the replica count, the model, the
 * optimizer or fit's and evaluate's settings get an error naming it; a
 * per-replica batch counts every process's replicas; with use_ema the weights
 * and evaluate on the averages equal one device's.
 * Usage: test_multi_worker CHECKPOINT_DIR */
#include "test_data.h"

#include <dirent.h>
#include <unistd.h>

#define SAMPLES 60
#define SIDE 6
#define CLASSES 4
#define TOL 1e-5

static kiln_dataset *data(kiln_context *ctx)
{
    return synthetic_images(ctx, SAMPLES, SIDE, 777, CLASSES);
}

/* A layer build() freezes before compiling, or NULL. */
static const char *freeze_layer;
/* The global_clipnorm build() compiles with (0: none). */
static float global_clip;
/* Nonzero: build() keeps the weights' moving average (use_ema, 0.9). */
static int use_ema;

static kiln_model *build(kiln_context *ctx, kiln_strategy strategy, int replicas)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 3, .kernel_size = {3, 3},
                                .strides = {1, 1}, .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 10,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = 0.01f,
                                              .global_clipnorm = global_clip,
                                              .use_ema = use_ema, .ema_momentum = 0.9f};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.optimizer = &optimizer;
    co.strategy = strategy;
    co.replicas = replicas;
    co.step_timeout_seconds = test_seconds(60);
    co.bucket_bytes = co.first_bucket_bytes = 256;   /* several buckets */
    if (freeze_layer)
        CHECK_OK(ctx, kiln_model_set_trainable(m, freeze_layer, 0));
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_fit_options fit_options(int epochs)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 7;   /* 7 over 2 or 4 replicas: uneven; the last batch has 4 */
    fo.verbosity = KILN_VERBOSE_SILENT;
    return fo;
}

static float *weights(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

/* The first epoch's training loss and accuracy as fit reports them:
 * global, so a sample seen twice or never would change them. */
static kiln_epoch_record first_epoch;

static float *train(kiln_context *ctx, kiln_dataset *ds, kiln_strategy strategy, int replicas,
                    int64_t *n, kiln_metrics *metrics)
{
    kiln_model *m = build(ctx, strategy, replicas);
    kiln_fit_options fo = fit_options(2);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    first_epoch.struct_size = sizeof first_epoch;
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &first_epoch));
    CHECK(first_epoch.samples == SAMPLES);
    metrics->struct_size = sizeof *metrics;
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 9, metrics));
    float *w = weights(ctx, m, n);
    kiln_model_destroy(m);
    return w;
}

/* A streamed source over `ds` that counts the samples this process reads. */
typedef struct counted {
    const kiln_dataset *ds;
    int64_t reads;
} counted;

static int fill_counted(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                        size_t size)
{
    counted *c = user;
    (void)message;
    (void)size;
    __atomic_add_fetch(&c->reads, 1, __ATOMIC_RELAXED);
    return kiln_dataset_read(c->ds, index, b) != KILN_OK;   /* the same kinds as ds */
}

/* Samples rank `rank` of 2 (one replica each) gathers from `count`
 * samples in batches of `batch`: its share of each batch, and no more. */
static int64_t share_of_rank(int rank, int64_t count, int batch)
{
    int64_t total = 0;
    for (int64_t start = 0; start < count; start += batch) {
        const int n = (int)(count - start < batch ? count - start : batch);
        total += n / 2 + (rank < n % 2);
    }
    return total;
}

static void compare(int rank, const char *what, const float *a, const float *b, int64_t n)
{
    const double worst = test_difference(a, b, sizeof(float), n, TEST_PER_VALUE, NULL);
    if (rank == 0)
        printf("%-56s max relative difference %.2e\n", what, worst);
    if (!(worst <= TOL)) {
        fprintf(stderr, "rank %d: %s: %.3g exceeds %.1g\n", rank, what, worst, TOL);
        test_failures++;
    }
}

static int count_checkpoints(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d))
        n += strstr(e->d_name, ".safetensors") != NULL && !strstr(e->d_name, ".tmp");
    if (d)
        closedir(d);
    return n;
}

static void remove_checkpoints(const char *dir)
{
    DIR *d = opendir(dir);
    char path[4200];
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        if (!strstr(e->d_name, ".safetensors"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    if (d)
        closedir(d);
}

/* A small multi_worker model whose hidden width, learning rate and
 * replica count a rank may get wrong. */
static kiln_status compile_small(kiln_context *ctx, kiln_model **out, int32_t units,
                                 float learning_rate, int32_t replicas)
{
    kiln_model *m = NULL;
    *out = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = units,
                                 .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = learning_rate};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = KILN_STRATEGY_MULTI_WORKER;
    co.optimizer = &optimizer;
    co.replicas = replicas;
    co.step_timeout_seconds = test_seconds(60);
    *out = m;
    return kiln_model_compile(m, &co);
}

/* Processes that disagree (as hosts set up differently would): a clear
 * error naming what differs, on every rank, at compile or at the call,
 * never steps whose all-reduces do not pair up; agreeing again, the same
 * model trains. */
static void misconfigured(kiln_context *ctx, const kiln_dataset *ds, int rank)
{
    kiln_model *m = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same number of replicas",
                compile_small(ctx, &m, 5, 0.01f, rank + 1));
    kiln_model_destroy(m);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same model",
                compile_small(ctx, &m, 5 + rank, 0.01f, 1));
    kiln_model_destroy(m);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same loss, optimizer and optimizer settings",
                compile_small(ctx, &m, 5, rank ? 0.02f : 0.01f, 1));
    kiln_model_destroy(m);

    CHECK_OK(ctx, compile_small(ctx, &m, 5, 0.01f, 1));
    kiln_fit_options fo = fit_options(1);
    fo.batch_size = 7 + rank;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same batch_size", kiln_model_fit(m, ds, &fo));
    fo.batch_size = 7;
    fo.shuffle_seed = 100 + (uint64_t)rank;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same shuffle seed",
                kiln_model_fit(m, ds, &fo));
    fo.shuffle_seed = 0;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_metrics met = {.struct_size = sizeof met};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same batch_size",
                kiln_model_evaluate(m, ds, 9 + rank, &met));
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 9, &met));
    /* 0 means the default, 32: the same batch, so no error. */
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, rank ? 32 : 0, &met));
    kiln_model_destroy(m);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_multi_worker CHECKPOINT_DIR\n");
        return 2;
    }
    kiln_context *ctx = test_context(5);
    if (!ctx)
        return 1;
    kiln_dataset *ds = data(ctx);
    int64_t n = 0;
    kiln_metrics one_m, mw_m, mw2_m, mirrored_m;
    float *one = train(ctx, ds, KILN_STRATEGY_ONE_DEVICE, 0, &n, &one_m);
    const kiln_epoch_record one_epoch = first_epoch;
    float *mirrored = train(ctx, ds, KILN_STRATEGY_MIRRORED, 2, &n, &mirrored_m);

    /* 2 processes x 1 device; learn this process's place. */
    kiln_model *m = build(ctx, KILN_STRATEGY_MULTI_WORKER, 1);
    int32_t rank = -1, world = 0;
    CHECK_OK(ctx, kiln_model_rank(m, &rank, &world));
    CHECK(world == 2 && (rank == 0 || rank == 1));
    kiln_model_destroy(m);
    if (rank == 0)
        remove_checkpoints(argv[1]);   /* before any rank can count them */
    float *mw = train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, 1, &n, &mw_m);
    /* Every sample once per epoch across the ranks, uneven shards included
     * (batch 7 over 2 and 4 replicas, a last batch of 4). */
    CHECK(fabs(first_epoch.loss - one_epoch.loss) < 1e-6 &&
          first_epoch.accuracy == one_epoch.accuracy);
    /* The same from a streamed source: each process reads only its share
     * of every batch (2 epochs of batch 7, evaluate in batches of 9). */
    counted c = {.ds = ds};
    kiln_callback_desc cd = {.struct_size = sizeof cd, .count = SAMPLES, .feature_rank = 3,
                             .feature_dims = {SIDE, SIDE, 1}, .fill = fill_counted, .user = &c};
    kiln_dataset *streamed = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &cd, &streamed));
    kiln_metrics streamed_m;
    float *mw_streamed = train(ctx, streamed, KILN_STRATEGY_MULTI_WORKER, 1, &n, &streamed_m);
    const int64_t want = 2 * share_of_rank(rank, SAMPLES, 7) + share_of_rank(rank, SAMPLES, 9);
    printf("rank %d read %lld samples of a streamed source for 2 epochs and an evaluation "
           "(%lld expected, of %d each pass)\n", (int)rank, (long long)c.reads,
           (long long)want, SAMPLES);
    CHECK(c.reads == want);
    compare(rank, "2 processes x 1 device, streamed vs in memory", mw_streamed, mw, n);
    CHECK(streamed_m.loss == mw_m.loss && streamed_m.accuracy == mw_m.accuracy);
    free(mw_streamed);
    kiln_dataset_destroy(streamed);
    float *mw2 = train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, 2, &n, &mw2_m);
    CHECK(fabs(first_epoch.loss - one_epoch.loss) < 1e-6 &&
          first_epoch.accuracy == one_epoch.accuracy);
    if (rank == 0)
        printf("first epoch's training loss: one device %.7f, 2 x 2 %.7f\n", one_epoch.loss,
               first_epoch.loss);
    compare(rank, "1 process x 2 devices (mirrored) vs one device", mirrored, one, n);
    compare(rank, "2 processes x 1 device vs one device", mw, one, n);
    compare(rank, "2 processes x 1 device vs 1 process x 2 devices", mw, mirrored, n);
    compare(rank, "2 processes x 2 devices vs one device", mw2, one, n);
    /* global_clipnorm: the norm of the gradient summed over every process. */
    global_clip = 0.05f;
    kiln_metrics clip_m;
    float *one_clip = train(ctx, ds, KILN_STRATEGY_ONE_DEVICE, 0, &n, &clip_m);
    float *mw2_clip = train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, 2, &n, &clip_m);
    global_clip = 0.0f;
    compare(rank, "global_clipnorm, 2 processes x 2 devices vs one device", mw2_clip, one_clip,
            n);
    const double apart = test_difference(one_clip, one, sizeof(float), n, TEST_PER_VALUE, NULL);
    if (rank == 0)
        printf("global_clipnorm 0.05 moves one device's weights %.2e from unclipped\n", apart);
    CHECK(apart > 1e-3);
    free(one_clip);
    free(mw2_clip);
    /* use_ema: every process averages its own replicas' weights alike, and
     * evaluate (global) runs on the averages. */
    use_ema = 1;
    kiln_metrics one_ema_m, mw2_ema_m;
    float *one_ema = train(ctx, ds, KILN_STRATEGY_ONE_DEVICE, 0, &n, &one_ema_m);
    float *mw2_ema = train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, 2, &n, &mw2_ema_m);
    use_ema = 0;
    compare(rank, "use_ema, 2 processes x 2 devices vs one device", mw2_ema, one_ema, n);
    if (rank == 0)
        printf("use_ema: evaluate on the averages: one device loss %.7f, 2 x 2 %.7f (the "
               "weights' %.7f)\n", one_ema_m.loss, mw2_ema_m.loss, one_m.loss);
    CHECK(fabs(mw2_ema_m.loss - one_ema_m.loss) < 1e-5 &&
          mw2_ema_m.accuracy == one_ema_m.accuracy);
    CHECK(fabs(one_ema_m.loss - one_m.loss) > 1e-4);   /* the averages are not the weights */
    free(one_ema);
    free(mw2_ema);
    CHECK(fabs(mw_m.loss - one_m.loss) < 1e-5 && mw_m.accuracy == one_m.accuracy &&
          mw_m.samples == SAMPLES);
    CHECK(fabs(mw2_m.loss - one_m.loss) < 1e-5 && mw2_m.accuracy == one_m.accuracy);
    if (rank == 0)
        printf("evaluate: one device loss %.6f accuracy %.4f; 2 x 1 %.6f %.4f; 2 x 2 %.6f "
               "%.4f\n", one_m.loss, one_m.accuracy, mw_m.loss, mw_m.accuracy, mw2_m.loss,
               mw2_m.accuracy);

    /* fit's per-replica batch counts every process's replicas: 2 samples on
     * each of 2 x 2 replicas is a global batch of 8, 8 steps over 60
     * samples (this process's 2 replicas alone would make 15). */
    m = build(ctx, KILN_STRATEGY_MULTI_WORKER, 2);
    kiln_fit_options per = fit_options(1);
    per.batch_size = 0;
    per.per_replica_batch_size = 2;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &per));
    kiln_training_stats per_stats = {.struct_size = sizeof per_stats};
    CHECK_OK(ctx, kiln_model_training_stats(m, &per_stats));
    CHECK(per_stats.steps == (SAMPLES + 7) / 8);
    kiln_model_destroy(m);

    /* Predict: every process gets every row. */
    static float x[11 * SIDE * SIDE], y_mw[11 * CLASSES], y_one[11 * CLASSES];
    for (int i = 0; i < 11 * SIDE * SIDE; i++)
        x[i] = (float)((i * 7) % 13) / 13.0f;
    m = build(ctx, KILN_STRATEGY_MULTI_WORKER, 2);
    kiln_model *o = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    CHECK_OK(ctx, kiln_model_set_weights(m, mw2, n));
    CHECK_OK(ctx, kiln_model_set_weights(o, mw2, n));
    CHECK_OK(ctx,
             kiln_model_predict(m, &(kiln_batch_arrays){.count = 11, .features = x}, y_mw, 11));
    CHECK_OK(ctx,
             kiln_model_predict(o, &(kiln_batch_arrays){.count = 11, .features = x}, y_one, 11));
    for (int i = 0; i < 11 * CLASSES; i++)
        CHECK(fabs(y_mw[i] - y_one[i]) < 1e-6);
    kiln_model_destroy(m);

    /* A custom loop with a frozen layer under 2 processes: every process
     * passes the same global batch, each trains its share; the result
     * equals one device's, and the frozen kernel never moves. */
    freeze_layer = "conv2d";
    m = build(ctx, KILN_STRATEGY_MULTI_WORKER, 1);
    kiln_model *alone1 = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    freeze_layer = NULL;
    static float bx[SAMPLES * SIDE * SIDE];
    int32_t by[SAMPLES];
    for (int64_t i = 0; i < SAMPLES; i++)
        CHECK_OK(ctx, kiln_dataset_read(ds, i,
                                        &(kiln_sample_buffers){.features = bx + i * SIDE * SIDE,
                                                               .sparse_labels = by + i}));
    float kernel0[27], kernel1[27];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "conv2d/kernel", kernel0, 27));
    for (int start = 0; start < SAMPLES; start += 7) {
        const int b = SAMPLES - start < 7 ? SAMPLES - start : 7;
        kiln_metrics r1 = {.struct_size = sizeof r1}, r2 = {.struct_size = sizeof r2};
        CHECK_OK(ctx, kiln_model_train_on_batch(
                          m,
                          &(kiln_batch_arrays){.count = b,
                                               .features = bx + start * SIDE * SIDE,
                                               .sparse_labels = by + start},
                          &r1));
        CHECK_OK(ctx, kiln_model_train_on_batch(
                          alone1,
                          &(kiln_batch_arrays){.count = b,
                                               .features = bx + start * SIDE * SIDE,
                                               .sparse_labels = by + start},
                          &r2));
        CHECK(fabs(r1.loss - r2.loss) < 1e-5);
    }
    CHECK_OK(ctx, kiln_model_get_tensor(m, "conv2d/kernel", kernel1, 27));
    CHECK(memcmp(kernel0, kernel1, sizeof kernel0) == 0);
    float *wl = weights(ctx, m, &n), *wo = weights(ctx, alone1, &n);
    compare(rank, "train_on_batch, conv frozen, 2 processes vs one device", wl, wo, n);
    free(wl);
    free(wo);
    kiln_model_destroy(m);
    kiln_model_destroy(alone1);

    /* Checkpoints: one writer; they load on one device and resume under 2. */
    const char *dir = argv[1];
    m = build(ctx, KILN_STRATEGY_MULTI_WORKER, 1);
    kiln_fit_options fo = fit_options(2);
    fo.checkpoint_dir = dir;
    fo.checkpoint_every_steps = 3;
    fo.keep_checkpoints = 50;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));   /* 18 steps: 6 checkpoints */
    kiln_metrics after = {.struct_size = sizeof after};
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 9, &after));   /* rank 0 has saved by now */
    const int files = count_checkpoints(dir);
    if (rank == 0)
        printf("checkpoints written for 18 steps every 3 by 2 processes: %d\n", files);
    CHECK(files == 6);
    kiln_model_destroy(m);
    kiln_model *resumed = build(ctx, KILN_STRATEGY_MULTI_WORKER, 1);
    fo.epochs = 3;
    fo.resume = 1;
    CHECK_OK(ctx, kiln_model_fit(resumed, ds, &fo));
    kiln_model *straight = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    kiln_fit_options so = fit_options(3);
    CHECK_OK(ctx, kiln_model_fit(straight, ds, &so));
    int64_t k = 0;
    float *wr = weights(ctx, resumed, &k), *ws = weights(ctx, straight, &k);
    compare(rank, "2 epochs, resumed under 2 processes to 3, vs one device", wr, ws, n);
    kiln_model_destroy(resumed);
    kiln_model_destroy(straight);
    free(wr);
    free(ws);

    /* The same checkpoints resume in a single process (no MPI, one device):
     * to 4 epochs, as 4 epochs straight. */
    kiln_model *alone = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    kiln_fit_options ao = fit_options(4);
    ao.checkpoint_dir = dir;
    ao.resume = 1;
    CHECK_OK(ctx, kiln_model_fit(alone, ds, &ao));
    straight = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    so = fit_options(4);
    CHECK_OK(ctx, kiln_model_fit(straight, ds, &so));
    wr = weights(ctx, alone, &k);
    ws = weights(ctx, straight, &k);
    compare(rank, "resumed by one process to 4 epochs vs one device", wr, ws, n);
    kiln_model_destroy(alone);
    kiln_model_destroy(straight);
    free(wr);
    free(ws);

    misconfigured(ctx, ds, (int)rank);

    free(one);
    free(mirrored);
    free(mw);
    free(mw2);
    kiln_model_destroy(o);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    char name[32];
    snprintf(name, sizeof name, "test_multi_worker rank %d", (int)rank);
    return test_finish(name);
}
