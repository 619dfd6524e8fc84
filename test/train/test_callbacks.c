/* Callbacks and metrics: each built-in callback against an expectation
 * worked out by hand from Keras's rules, on a problem whose validation loss
 * rises every epoch (the validation labels are the training labels shifted
 * by one class); the learning rate a callback sets reaching every strategy;
 * the metrics beyond accuracy against float64 references; mirrored on two
 * devices (meson runs this with POCL_DEVICES="basic basic") against one. */
#include "harness.h"
#include "runtime/data/dataset.h"

#include <errno.h>
#include <float.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mount.h>
#endif

#define DIM 4
#define CLASSES 3
#define TRAIN 24
#define VAL 12
#define BATCH 8
#define LR 0.1f

static char dir[64];

static const char *file(const char *name)
{
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Sample i of class (i + shift) % CLASSES: a one-hot of i % CLASSES plus a
 * little noise, so a model learns the training labels at once and gets the
 * shifted (validation) labels ever more wrong. */
static kiln_dataset *data(kiln_context *ctx, int count, int shift)
{
    float x[TRAIN * DIM];
    int32_t y[TRAIN];
    uint64_t s = 7;
    for (int i = 0; i < count; i++) {
        for (int j = 0; j < DIM; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            x[i * DIM + j] = (j == i % CLASSES ? 1.0f : 0.0f) + (float)(s >> 40) / 1.6777216e8f;
        }
        y[i] = (i + shift) % CLASSES;
    }
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 1,
                                .feature_dims = {DIM}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

typedef struct setup {
    kiln_strategy strategy;
    float lr;                       /* 0: LR */
    kiln_lr_schedule schedule;      /* struct_size 0: this header's */
    int32_t top_k;
    int32_t replicas;
} setup;

static kiln_model *model(kiln_context *ctx, const setup *s)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {DIM};
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 5,
                                       .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = s->strategy ? s->strategy : KILN_STRATEGY_ONE_DEVICE,
                               .top_k = s->top_k, .replicas = s->replicas,
                               .pipeline_stages = 2, .micro_batches = 2};
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = s->lr ? s->lr : LR,
                                        .schedule = &s->schedule};
    co.optimizer = &sgd;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_fit_options options(int epochs, const kiln_dataset *val)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = BATCH;
    fo.no_shuffle = 1;
    fo.validation = val;
    fo.verbosity = KILN_VERBOSE_SILENT;
    return fo;
}

static float *weights(kiln_model *m, int64_t *n)
{
    CHECK(kiln_model_parameter_count(m, n) == KILN_OK);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK(kiln_model_get_weights(m, w, *n) == KILN_OK);
    return w;
}

static int same(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static int32_t epochs_run(kiln_model *m)
{
    int32_t n = -1;
    CHECK(kiln_model_history_count(m, &n) == KILN_OK);
    return n;
}

static kiln_epoch_record epoch(kiln_model *m, int32_t i)
{
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK(kiln_model_history_epoch(m, i, &r) == KILN_OK);
    return r;
}

static kiln_stop_cause stop_cause(kiln_model *m, char *text, size_t size)
{
    kiln_stop_cause cause = (kiln_stop_cause)-1;
    size_t length = 0;
    CHECK(kiln_model_stop_reason(m, &cause, text, size, &length) == KILN_OK);
    CHECK(length == strlen(text));
    return cause;
}

/* Fits a fresh model of `s` with `callbacks` for `epochs`; returns it. */
static kiln_model *fit(kiln_context *ctx, const setup *s, int epochs, const kiln_dataset *train,
                       const kiln_dataset *val, const kiln_callback_spec *callbacks, int n)
{
    kiln_model *m = model(ctx, s);
    kiln_fit_options fo = options(epochs, val);
    fo.callbacks = callbacks;
    fo.n_callbacks = n;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    return m;
}

static const setup one = {.strategy = KILN_STRATEGY_ONE_DEVICE};

/* What every expectation below stands on: the training loss falls and the
 * validation loss rises, epoch after epoch. */
static void test_rising_validation(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    kiln_model *m = fit(ctx, &one, 8, train, val, NULL, 0);
    for (int32_t e = 1; e < 8; e++) {
        CHECK(epoch(m, e).val_loss > epoch(m, e - 1).val_loss);
        CHECK(epoch(m, e).loss < epoch(m, e - 1).loss);
        CHECK(epoch(m, e).learning_rate == (double)LR);
    }
    char text[64] = "x";
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_NONE && text[0] == '\0');
    kiln_model_destroy(m);
}

static int32_t stopped_after(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val,
                             const kiln_callback_spec *es, int epochs)
{
    kiln_model *m = fit(ctx, &one, epochs, train, val, es, 1);
    const int32_t n = epochs_run(m);
    char text[320];
    const kiln_stop_cause cause = stop_cause(m, text, sizeof text);
    CHECK(n == epochs ? cause == KILN_STOP_NONE
                      : cause == KILN_STOP_EARLY_STOPPING && strstr(text, "EarlyStopping"));
    kiln_model_destroy(m);
    return n;
}

/* val_loss v0 < v1 < v2 < ...: epoch 0 is the best; each later one adds 1
 * to the wait, which stops training once it reaches patience (never at
 * epoch 0). */
static void test_early_stopping(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    kiln_callback_spec es = {.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 2};
    CHECK(stopped_after(ctx, train, val, &es, 8) == 3);
    es.patience = 0;
    CHECK(stopped_after(ctx, train, val, &es, 8) == 2);
    /* Rising is improving in max mode: it never stops. */
    es.mode = KILN_MONITOR_MAX;
    CHECK(stopped_after(ctx, train, val, &es, 5) == 5);
    /* A baseline nothing beats: epoch 0 improves on the best but does not
     * reset the wait (1), epoch 1 makes it 2 = patience. */
    es = (kiln_callback_spec){.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 2,
                              .has_baseline = 1, .baseline = 0.0};
    CHECK(stopped_after(ctx, train, val, &es, 8) == 2);
    /* Epochs 0 and 1 unwatched; epoch 2 is the first best, epoch 3 stops. */
    es = (kiln_callback_spec){.kind = KILN_CALLBACK_EARLY_STOPPING, .start_from_epoch = 2};
    CHECK(stopped_after(ctx, train, val, &es, 8) == 4);
    /* The training loss falls by less than 10 every epoch: only epoch 0 counts
     * as an improvement (on infinity). */
    es = (kiln_callback_spec){.struct_size = sizeof es, .kind = KILN_CALLBACK_EARLY_STOPPING,
                              .monitor = "loss", .min_delta = -10.0, .patience = 3};
    CHECK(stopped_after(ctx, train, val, &es, 8) == 4);
    es.min_delta = 0;
    CHECK(stopped_after(ctx, train, val, &es, 6) == 6);
}

/* The rate, 0 from epoch 3 on: the weights, and so val_loss, stay epoch 2's. */
static double still_from_3(void *user, int32_t e, double lr)
{
    (void)user;
    return e < 3 ? lr : 0.0;
}

/* The stop reason, for the cause EarlyStopping: `text`. */
static void early_stop_reason(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val,
                              const kiln_callback_spec *es, const kiln_callback_spec *before,
                              int32_t epochs_wanted, char *text, size_t size)
{
    kiln_callback_spec both[2];
    int n = 0;
    if (before)
        both[n++] = *before;
    both[n++] = *es;
    kiln_model *m = fit(ctx, &one, 8, train, val, both, n);
    CHECK(epochs_run(m) == epochs_wanted);
    CHECK(stop_cause(m, text, size) == KILN_STOP_EARLY_STOPPING);
    kiln_model_destroy(m);
}

/* What the stop reason says about a baseline. Keras restarts the wait only
 * on an epoch that beats the best and the baseline, so it can stop after
 * epochs that improved on the best: the reason says the baseline was not
 * beaten, in how many epochs, and how many of them improved on the best. */
static void test_early_stopping_reasons(kiln_context *ctx, kiln_dataset *train,
                                        kiln_dataset *val)
{
    char text[320];
    /* val_loss rises (improves, in max mode) at epochs 0 to 2 without
     * reaching 100, then stays: epoch 3 ends a wait of 4 >= 3. */
    const kiln_callback_spec rate = {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
                                     .schedule = still_from_3};
    kiln_callback_spec es = {.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 3,
                             .mode = KILN_MONITOR_MAX, .has_baseline = 1, .baseline = 100.0};
    early_stop_reason(ctx, train, val, &es, &rate, 4, text, sizeof text);
    if (!strstr(text, "EarlyStopping: val_loss did not improve on the baseline 100 for 4 "
                "epoch(s) (3 of them improved on the best, ") ||
        !strstr(text, " after epoch 3); training stopped after epoch 4"))
        fprintf(stderr, "stop reason: %s\n", text);
    CHECK(strstr(text, "EarlyStopping: val_loss did not improve on the baseline 100 for 4 "
                "epoch(s) (3 of them improved on the best, ") != NULL);
    CHECK(strstr(text, " after epoch 3); training stopped after epoch 4") != NULL);
    /* A baseline the first epoch beats: the reason is the best's alone
     * (epochs 3, 4 and 5 do not improve). */
    es.baseline = -100.0;
    early_stop_reason(ctx, train, val, &es, &rate, 6, text, sizeof text);
    if (!strstr(text, "EarlyStopping: val_loss did not improve for 3 epoch(s) on its best, "))
        fprintf(stderr, "stop reason: %s\n", text);
    CHECK(strstr(text, "EarlyStopping: val_loss did not improve for 3 epoch(s) on its best, ")
          != NULL);
    CHECK(strstr(text, " after epoch 3; training stopped after epoch 6") != NULL);
    CHECK(strstr(text, "baseline") == NULL);
    /* Min mode, a baseline nothing reaches: epoch 0 improves on the best
     * only, epoch 1 not at all. */
    es = (kiln_callback_spec){.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 2,
                              .has_baseline = 1, .baseline = 0.25};
    early_stop_reason(ctx, train, val, &es, NULL, 2, text, sizeof text);
    if (!strstr(text, "did not improve on the baseline 0.25 for 2 epoch(s) (1 of them "
                "improved on the best, "))
        fprintf(stderr, "stop reason: %s\n", text);
    CHECK(strstr(text, "did not improve on the baseline 0.25 for 2 epoch(s) (1 of them "
                "improved on the best, ") != NULL);
}

/* Stopped after epoch 2 (0-based), the weights go back to epoch 0's, bit
 * for bit those of a model trained one epoch; without restoring they are
 * epoch 2's. A fit that runs out of epochs restores too (Keras 3). */
static void test_restore_best_weights(kiln_context *ctx, kiln_dataset *train,
                                      kiln_dataset *val)
{
    int64_t n;
    kiln_model *one_epoch = fit(ctx, &one, 1, train, val, NULL, 0);
    kiln_model *three = fit(ctx, &one, 3, train, val, NULL, 0);
    float *best = weights(one_epoch, &n), *last = weights(three, &n);
    kiln_callback_spec es = {.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 2,
                             .restore_best_weights = 1};
    kiln_model *m = fit(ctx, &one, 8, train, val, &es, 1);
    float *got = weights(m, &n);
    CHECK(epochs_run(m) == 3);
    CHECK(same(got, best, n) && !same(got, last, n));
    kiln_model_destroy(m);
    free(got);
    es.restore_best_weights = 0;
    m = fit(ctx, &one, 8, train, val, &es, 1);
    got = weights(m, &n);
    CHECK(same(got, last, n));
    kiln_model_destroy(m);
    free(got);
    es = (kiln_callback_spec){.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 5,
                              .restore_best_weights = 1};
    m = fit(ctx, &one, 3, train, val, &es, 1);
    got = weights(m, &n);
    CHECK(epochs_run(m) == 3 && same(got, best, n));
    kiln_model_destroy(m);
    free(got);
    free(best);
    free(last);
    kiln_model_destroy(one_epoch);
    kiln_model_destroy(three);
}

/* patience 2, factor 0.5, cooldown 2 on the rising val_loss: epoch 0 best;
 * epochs 1, 2 wait 1, 2: the rate halves after epoch 2. Epochs 3 and 4
 * spend the cooldown (the wait stays 0 in 3, becomes 1 in 4), epoch 5
 * reaches 2 again: halved after epoch 5. Rates are float32, as a Keras
 * optimizer's variable holds them. */
static void test_reduce_lr_on_plateau(kiln_context *ctx, kiln_dataset *train,
                                      kiln_dataset *val)
{
    const double r0 = (double)LR, r1 = (double)(float)(r0 * 0.5), r2 = (double)(float)(r1 * 0.5);
    kiln_callback_spec rp = {.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU, .patience = 2,
                             .factor = 0.5, .cooldown = 2};
    kiln_model *m = fit(ctx, &one, 7, train, val, &rp, 1);
    const double want[7] = {r0, r0, r0, r1, r1, r1, r2};
    CHECK(epochs_run(m) == 7);
    for (int32_t e = 0; e < 7; e++)
        CHECK(epoch(m, e).learning_rate == want[e]);
    kiln_model_destroy(m);

    /* The optimizer used it: 5 epochs so equal 3 at LR, then a model compiled
     * with the halved rate, given those weights, trained 2 more. */
    int64_t n;
    m = fit(ctx, &one, 5, train, val, &rp, 1);
    kiln_model *first = fit(ctx, &one, 3, train, val, NULL, 0);
    float *w = weights(first, &n);
    const setup halved = {.strategy = KILN_STRATEGY_ONE_DEVICE, .lr = (float)r1};
    kiln_model *rest = model(ctx, &halved);
    CHECK_OK(ctx, kiln_model_set_weights(rest, w, n));
    kiln_fit_options fo = options(2, val);
    CHECK_OK(ctx, kiln_model_fit(rest, train, &fo));
    kiln_model *plain = fit(ctx, &one, 5, train, val, NULL, 0);
    float *a = weights(m, &n), *b = weights(rest, &n), *c = weights(plain, &n);
    CHECK(same(a, b, n) && !same(a, c, n));
    free(a);
    free(b);
    free(c);
    free(w);
    kiln_model_destroy(m);
    kiln_model_destroy(first);
    kiln_model_destroy(rest);
    kiln_model_destroy(plain);

    /* Keras's defaults: patience 10 (nothing in 6 epochs), factor 0.1. */
    kiln_callback_spec d = {.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU};
    m = fit(ctx, &one, 6, train, val, &d, 1);
    CHECK(epoch(m, 5).learning_rate == r0);
    kiln_model_destroy(m);
    d.patience = 1;
    m = fit(ctx, &one, 3, train, val, &d, 1);
    CHECK(epoch(m, 1).learning_rate == r0 &&
          epoch(m, 2).learning_rate == (double)(float)(r0 * 0.1));
    kiln_model_destroy(m);

    /* min_lr: 0.1 -> max(0.05, 0.07) = 0.07 after epoch 2; after epoch 5 the
     * rate is min_lr already and stays. The rate outlives fit. */
    rp.min_lr = 0.07;
    m = fit(ctx, &one, 6, train, val, &rp, 1);
    CHECK(epoch(m, 2).learning_rate == r0 && epoch(m, 3).learning_rate == (double)0.07f &&
          epoch(m, 5).learning_rate == (double)0.07f);
    kiln_fit_options more = options(1, val);
    CHECK_OK(ctx, kiln_model_fit(m, train, &more));
    CHECK(epoch(m, 6).learning_rate == (double)0.07f);
    kiln_model_destroy(m);
}

/* The rate 0 at odd epochs leaves the weights and so val_loss unchanged:
 * with save_best_only in max mode only epochs 1, 3 and 5 (counting from 1)
 * improve and are saved. */
static double alternate(void *user, int32_t e, double lr)
{
    (void)user;
    (void)lr;
    return e % 2 ? 0.0 : (double)LR;
}

static void test_model_checkpoint(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    char pattern[128], every[128];
    snprintf(pattern, sizeof pattern, "%s/best-{epoch:02d}.safetensors", dir);
    snprintf(every, sizeof every, "%s/state-{epoch}-{{{val_loss:.3f}}}.safetensors", dir);
    const kiln_callback_spec cbs[] = {
        {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER, .schedule = alternate},
        {.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = pattern, .monitor = "val_loss",
         .mode = KILN_MONITOR_MAX, .save_best_only = 1, .save_weights_only = 1},
        {.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = every},
    };
    kiln_model *m = fit(ctx, &one, 5, train, val, cbs, 3);
    CHECK(exists(file("best-01.safetensors")) && !exists(file("best-02.safetensors")) &&
          exists(file("best-03.safetensors")) && !exists(file("best-04.safetensors")) &&
          exists(file("best-05.safetensors")));
    /* The first is epoch 1's weights, the last the final ones. */
    int64_t n;
    kiln_model *one_epoch = fit(ctx, &one, 1, train, val, NULL, 0);
    kiln_model *check = model(ctx, &one);
    float *want = weights(one_epoch, &n), *final = weights(m, &n);
    CHECK_OK(ctx, kiln_model_load_weights(check, file("best-01.safetensors")));
    float *got = weights(check, &n);
    CHECK(same(got, want, n));
    free(got);
    CHECK_OK(ctx, kiln_model_load_weights(check, file("best-05.safetensors")));
    got = weights(check, &n);
    CHECK(same(got, final, n));
    free(got);
    /* Every epoch's training state, named by its epoch and val_loss. */
    for (int32_t e = 0; e < 5; e++) {
        char name[96];
        snprintf(name, sizeof name, "state-%d-{%.3f}.safetensors", (int)e + 1,
                 epoch(m, e).val_loss);
        CHECK(exists(file(name)));
        if (e == 4) {
            CHECK_OK(ctx, kiln_model_load_checkpoint(check, file(name)));
            got = weights(check, &n);
            CHECK(same(got, final, n) && epochs_run(check) == 5);
            free(got);
        }
    }
    free(want);
    free(final);
    kiln_model_destroy(check);
    kiln_model_destroy(one_epoch);
    kiln_model_destroy(m);
}

/* LearningRateScheduler halving each epoch = the compile-time step decay
 * over an epoch's steps, bit for bit. */
static double halving(void *user, int32_t e, double lr)
{
    (void)lr;
    return (double)*(const float *)user * pow(0.5, e);
}

static void scheduler_against_compile(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val,
                                      kiln_strategy strategy, int32_t replicas)
{
    int64_t n;
    const float lr = LR;
    const kiln_callback_spec s = {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
                                  .schedule = halving, .user = (void *)&lr};
    const setup plain = {.strategy = strategy, .replicas = replicas};
    const setup decay = {.strategy = strategy, .replicas = replicas,
                         .schedule = {.kind = KILN_LR_STEP_DECAY, .decay_rate = 0.5f,
                                      .decay_steps = TRAIN / BATCH}};
    kiln_model *a = fit(ctx, &plain, 4, train, val, &s, 1);
    kiln_model *b = fit(ctx, &decay, 4, train, val, NULL, 0);
    float *wa = weights(a, &n), *wb = weights(b, &n);
    CHECK(same(wa, wb, n));
    for (int32_t e = 0; e < 4; e++)
        CHECK(epoch(a, e).learning_rate == epoch(b, e).learning_rate &&
              epoch(a, e).learning_rate == (double)(float)(LR * pow(0.5, e)));
    free(wa);
    free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

static double zero(void *user, int32_t e, double lr)
{
    (void)user;
    (void)e;
    (void)lr;
    return 0.0;
}

/* Every strategy takes its rate from the one place a callback sets: a
 * scheduler returning 0 leaves the weights bit for bit, and one halving
 * each epoch equals the compile-time decay. */
static void test_scheduler(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val,
                           int devices)
{
    scheduler_against_compile(ctx, train, val, KILN_STRATEGY_ONE_DEVICE, 0);
    const struct {
        kiln_strategy strategy;
        int32_t replicas;
        int needs_two;
    } strategies[] = {
        {KILN_STRATEGY_ONE_DEVICE, 0, 0},   {KILN_STRATEGY_MIRRORED, 0, 0},
        {KILN_STRATEGY_CENTRAL_STORAGE, 0, 0}, {KILN_STRATEGY_PIPELINE, 0, 1},
        {KILN_STRATEGY_PARAMETER_SERVER, 1, 0}, {KILN_STRATEGY_PARAMETER_SERVER, 0, 0},
    };
    const kiln_callback_spec z = {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
                                  .schedule = zero};
    for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++) {
        if (strategies[i].needs_two &&
            !test_has_devices(devices, 2, "the learning-rate scheduler under the pipeline"))
            continue;
        const setup s = {.strategy = strategies[i].strategy, .replicas = strategies[i].replicas};
        int64_t n;
        kiln_model *m = model(ctx, &s);
        float *before = weights(m, &n);
        kiln_fit_options fo = options(2, val);
        fo.callbacks = &z;
        fo.n_callbacks = 1;
        CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
        float *after = weights(m, &n);
        CHECK(same(before, after, n) && epoch(m, 1).learning_rate == 0.0);
        free(before);
        free(after);
        kiln_model_destroy(m);
        if (strategies[i].strategy != KILN_STRATEGY_PARAMETER_SERVER ||
            strategies[i].replicas == 1)   /* two workers interleave at random */
            scheduler_against_compile(ctx, train, val, strategies[i].strategy,
                                      strategies[i].replicas);
    }
}

/* A model whose weights are all 0 and stay so: its outputs are (0.5, 0.5)
 * for every sample (features all 1, and each batch of 4 holds both classes
 * twice, so every gradient is exactly 0, whatever the rate). The loss is
 * float32's ln 2, accuracy 1/2 (argmax takes class 0), top-1 accuracy 1
 * (ties count in). */
static kiln_model *flat_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {1};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 2,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD};
    kiln_compile_options co = {.struct_size = sizeof co, .top_k = 1,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = KILN_STRATEGY_ONE_DEVICE};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const float w[4] = {0, 0, 0, 0};
    CHECK_OK(ctx, kiln_model_set_weights(m, w, 4));
    return m;
}

static kiln_dataset *ones(kiln_context *ctx, int count, const int32_t *y)
{
    float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 1,
                                .feature_dims = {1}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

static double rates(void *user, int32_t e, double lr)
{
    (void)user;
    (void)lr;
    static const double r[] = {0.5, 1e-5, 1e16, 5e-5, 5e-4, 123456, 3e15};
    return r[e % 7];
}

static int file_is(const char *path, const char *want)
{
    size_t size = 0;
    unsigned char *got = test_read_file(path, &size);
    const int ok = got && size == strlen(want) && memcmp(got, want, size) == 0;
    if (!ok)
        fprintf(stderr, "%s holds:\n%.*s\nexpected:\n%s\n", path, (int)size,
                got ? (const char *)got : "", want);
    free(got);
    return ok;
}

/* CSVLogger's file, byte for byte as Keras writes it. */
static void test_csv_logger(kiln_context *ctx)
{
    const int32_t y_train[8] = {0, 1, 0, 1, 0, 1, 0, 1}, y_val[4] = {0, 1, 1, 1};
    kiln_dataset *train = ones(ctx, 8, y_train), *val = ones(ctx, 4, y_val);
    kiln_model *m = flat_model(ctx);
    kiln_callback_spec cbs[] = {
        {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER, .schedule = rates},
        {.kind = KILN_CALLBACK_CSV_LOGGER, .path = file("log.csv")},
    };
    kiln_fit_options fo = options(7, val);
    fo.batch_size = 4;
    fo.callbacks = cbs;
    fo.n_callbacks = 2;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    CHECK(epoch(m, 6).loss == 0.6931471824645996 && epoch(m, 6).val_accuracy == 0.25);
    const char *header = "epoch,accuracy,learning_rate,loss,sparse_top_k_categorical_accuracy,"
                         "val_accuracy,val_loss,val_sparse_top_k_categorical_accuracy\r\n";
    /* The rates as Python prints float32 values: repr(float(np.float32(r))). */
    static const char *const rate[] = {"0.5", "9.999999747378752e-06", "1.0000000272564224e+16",
                                       "4.999999873689376e-05", "0.0005000000237487257",
                                       "123456.0", "3000000028082176.0"};
    char want[2048];
    snprintf(want, sizeof want, "%s", header);
    for (int e = 0; e < 7; e++)
        snprintf(want + strlen(want), sizeof want - strlen(want),
                 "%d,0.5,%s,0.6931471824645996,1.0,0.25,0.6931471824645996,1.0\r\n", e, rate[e]);
    CHECK(file_is(file("log.csv"), want));
    /* Appended with another separator: rows only, the epochs from 0 again. */
    cbs[1].separator = ';';
    cbs[1].append = 1;
    fo.epochs = 1;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    strcat(want, "0;0.5;0.5;0.6931471824645996;1.0;0.25;0.6931471824645996;1.0\r\n");
    CHECK(file_is(file("log.csv"), want));
    /* Appending to an empty file writes the header; no validation, no val_. */
    FILE *f = fopen(file("empty.csv"), "wb");
    fclose(f);
    cbs[1].path = file("empty.csv");
    cbs[1].separator = 0;
    fo.validation = NULL;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    CHECK(file_is(file("empty.csv"), "epoch,accuracy,learning_rate,loss,"
                  "sparse_top_k_categorical_accuracy\r\n0,0.5,0.5,0.6931471824645996,1.0\r\n"));
    kiln_model_destroy(m);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fputs(text, f) >= 0);
    if (f)
        fclose(f);
}

static void count_warning(void *user, kiln_log_level level, const char *message)
{
    if (level == KILN_LOG_WARNING && strstr(message, "CSVLogger"))
        ++*(int *)user;
}

/* A fit of `epochs` that appends to `path` with a CSVLogger; with `limit`,
 * under RLIMIT_FSIZE (SIGXFSZ ignored): a write past `limit` bytes writes
 * what fits and then fails with EFBIG, as one on a full disk does with
 * ENOSPC. The kernels it runs are built and cached by then, so nothing else
 * is written. */
static kiln_status csv_fit(kiln_model *m, const kiln_dataset *train, const char *path,
                           int epochs, long limit)
{
    kiln_callback_spec cb = {.kind = KILN_CALLBACK_CSV_LOGGER, .path = path, .append = 1};
    kiln_fit_options fo = options(epochs, NULL);
    fo.batch_size = 4;
    fo.callbacks = &cb;
    fo.n_callbacks = 1;
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    if (limit > 0) {
        const struct rlimit small = {.rlim_cur = (rlim_t)limit, .rlim_max = old.rlim_max};
        CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    }
    const kiln_status st = kiln_model_fit(m, train, &fo);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, was);
    return st;
}

/* CSVLogger on a full disk: the write that fails leaves no cut row (it is
 * truncated back to the last whole row) and fit fails naming the file;
 * once there is room, an append starts on a line of its own. A file that
 * does end in a cut row (a writer killed mid-row, or an older kiln) loses
 * it on an append, with a warning. The disk is a 64 KiB tmpfs filled up
 * when the test may mount one (ENOSPC), and RLIMIT_FSIZE (EFBIG) always. */
static void test_csv_full_disk(void)
{
    int warnings = 0;
    kiln_context_options o = {.struct_size = sizeof o, .seed = 5, .log_fn = count_warning,
                              .log_user = &warnings, .log_level = KILN_LOG_WARNING};
    kiln_context *ctx = NULL;
    CHECK_OK(ctx, kiln_context_create(&o, &ctx));
    const int32_t y[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    kiln_dataset *train = ones(ctx, 8, y);
    kiln_model *m = flat_model(ctx);
    /* The header and rows this model writes: its rows differ only in the
     * epoch (its gradients are 0). */
    const char *scratch = file("rows.csv");
    remove(scratch);
    CHECK_OK(ctx, csv_fit(m, train, scratch, 1, 0));
    size_t size = 0;
    unsigned char *bytes = test_read_file(scratch, &size);
    char text[512] = "";
    if (bytes && size < sizeof text)
        memcpy(text, bytes, size);
    free(bytes);
    char *row0 = strstr(text, "\r\n");
    CHECK(row0 && strncmp(row0 + 2, "0,", 2) == 0);
    if (!row0)
        return;
    row0 += 2;
    const size_t row_len = strlen(row0);
    /* Whole rows short of the limit (which a 4 KiB page sets on the tmpfs)
     * by a row and a half: the next fit's first row fits, its second does
     * not. */
    char seed[4096] = "";
    const size_t limit = 4096, target = limit - row_len - row_len / 2;
    memcpy(seed, text, (size_t)(row0 - text));
    while (strlen(seed) + 2 * row_len <= target)
        strcat(seed, row0);
    const size_t pad = target - strlen(seed) - 2;   /* a row of its own, ended */
    memset(seed + strlen(seed), '9', pad);
    strcat(seed, "\r\n");
    CHECK(strlen(seed) == target);
    char want[8192];
    snprintf(want, sizeof want, "%s%s", seed, row0);
    char disk[160];
    snprintf(disk, sizeof disk, "%s/full", dir);
    mkdir(disk, 0755);
    int mounted = 0;
#ifdef __linux__
    mounted = mount("tmpfs", disk, "tmpfs", 0, "size=64k") == 0;
    if (!mounted)
        printf("CSVLogger not checked on a full tmpfs: cannot mount one here (%s)\n",
               strerror(errno));
#endif
    for (int full = !mounted; full < 2; full++) {
        char path[200], filler[200];
        snprintf(path, sizeof path, "%s/log.csv", full ? dir : disk);
        snprintf(filler, sizeof filler, "%s/filler", disk);
        write_text(path, seed);
        if (!full) {   /* every page of the tmpfs taken but the log's own */
            FILE *f = fopen(filler, "wb");
            static char block[4096];
            while (f && fwrite(block, 1, sizeof block, f) == sizeof block && fflush(f) == 0)
                continue;
            if (f)
                fclose(f);
        }
        CHECK_FAILS(ctx, KILN_ERROR_IO, "cannot write",
                    csv_fit(m, train, path, 3, full ? (long)limit : 0));
        CHECK(strstr(kiln_context_last_error(ctx), "ends with the last whole row") != NULL);
        CHECK(file_is(path, want));
        remove(filler);
        CHECK_OK(ctx, csv_fit(m, train, path, 1, 0));
        char again[8192];
        snprintf(again, sizeof again, "%s%s", want, row0);
        CHECK(file_is(path, again));
        printf("CSVLogger on a full disk (%s): the row that did not fit left nothing\n",
               full ? "RLIMIT_FSIZE" : "a 64 KiB tmpfs");
    }
#ifdef __linux__
    if (mounted)
        umount2(disk, MNT_DETACH);
#endif
    /* A cut last row, as a killed writer leaves it, goes before an append. */
    char cut[8192];
    snprintf(cut, sizeof cut, "%s%.20s", seed, row0);
    write_text(file("cut.csv"), cut);
    warnings = 0;
    CHECK_OK(ctx, csv_fit(m, train, file("cut.csv"), 1, 0));
    CHECK(file_is(file("cut.csv"), want));
    CHECK(warnings == 1);
    /* A file of one cut line: the header comes again. */
    write_text(file("cut.csv"), "epoch,accura");
    CHECK_OK(ctx, csv_fit(m, train, file("cut.csv"), 1, 0));
    CHECK(file_is(file("cut.csv"), text));
    kiln_model_destroy(m);
    kiln_dataset_destroy(train);
    kiln_context_destroy(ctx);
}

typedef struct stopper {
    int32_t epoch;
    int64_t step;          /* 0: at the epoch's end */
    int result;
    int calls;
    kiln_model *m;
    kiln_progress last;    /* at the last epoch end */
} stopper;

static int stop_at(void *user, const kiln_progress *p)
{
    stopper *s = user;
    s->calls++;
    if (p->event == KILN_EVENT_EPOCH_END) {
        s->last = *p;
        char text[8];
        kiln_stop_cause cause;
        CHECK(kiln_model_stop_reason(s->m, &cause, text, sizeof text, NULL) == KILN_OK);
    }
    const int here = p->epoch == s->epoch &&
                     (s->step ? p->event == KILN_EVENT_BATCH_END && p->step == s->step
                              : p->event == KILN_EVENT_EPOCH_END);
    return here ? s->result : KILN_CALLBACK_CONTINUE;
}

/* The application's functions: KILN_CALLBACK_STOP ends fit normally, any
 * other nonzero value with KILN_ERROR_STOPPED (old callbacks' return). */
static void test_functions(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    stopper s = {.epoch = 1, .result = KILN_CALLBACK_STOP};
    kiln_model *m = model(ctx, &one);
    s.m = m;
    const kiln_callback_spec f = {.kind = KILN_CALLBACK_FUNCTION, .function = stop_at,
                                  .user = &s};
    kiln_fit_options fo = options(5, val);
    fo.callbacks = &f;
    fo.n_callbacks = 1;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    char text[320];
    CHECK(epochs_run(m) == 2 && stop_cause(m, text, sizeof text) == KILN_STOP_CALLBACK &&
          strstr(text, "callbacks[0] (function) stopped training after epoch 2"));
    /* What it saw at the epoch's end is the epoch's record. */
    const kiln_epoch_record r = epoch(m, 1);
    CHECK(s.last.loss == r.loss && s.last.val_loss == r.val_loss &&
          s.last.learning_rate == (double)LR && s.last.top_k_accuracy < 0);
    /* The old field, stopping normally mid-epoch: the epoch is left out. */
    s = (stopper){.epoch = 0, .step = 2, .result = KILN_CALLBACK_STOP, .m = m};
    fo.callbacks = NULL;
    fo.n_callbacks = 0;
    fo.callback = stop_at;
    fo.callback_user = &s;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    CHECK(epochs_run(m) == 2 && stop_cause(m, text, sizeof text) == KILN_STOP_CALLBACK &&
          strstr(text, "the callback stopped training at epoch 1, step 2"));
    /* Abort: both ways fail. The reason of the last fit is gone. */
    s = (stopper){.epoch = 0, .step = 1, .result = KILN_CALLBACK_ABORT, .m = m};
    CHECK_FAILS(ctx, KILN_ERROR_STOPPED, "the callback stopped training at epoch 1, step 1",
                kiln_model_fit(m, train, &fo));
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_NONE);
    s = (stopper){.epoch = 0, .result = 7, .m = m};
    fo.callback = NULL;
    fo.callbacks = &f;
    fo.n_callbacks = 1;
    CHECK_FAILS(ctx, KILN_ERROR_STOPPED, "callbacks[0] (function) stopped training after "
                "epoch 1", kiln_model_fit(m, train, &fo));
    /* Every callback runs at an epoch's end before fit stops. */
    stopper a = {.epoch = 0, .result = KILN_CALLBACK_STOP, .m = m}, b = {.epoch = -1, .m = m};
    const kiln_callback_spec two[] = {
        {.kind = KILN_CALLBACK_FUNCTION, .function = stop_at, .user = &a},
        {.kind = KILN_CALLBACK_FUNCTION, .function = stop_at, .user = &b},
    };
    fo.callbacks = two;
    fo.n_callbacks = 2;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    CHECK(a.calls == 4 && b.calls == 4);   /* 3 steps and the epoch's end each */
    kiln_model_destroy(m);
}

/* TerminateOnNaN: a NaN feature in epoch 2's second step ends fit normally,
 * with the weights of the step before (the model that stopped itself just
 * before that step). Without it fit fails; with skip_nonfinite it is
 * refused. */
static void test_terminate_on_nan(kiln_context *ctx, kiln_dataset *val)
{
    kiln_dataset *train = data(ctx, TRAIN, 0);
    train->features[(BATCH + 3) * DIM + 1] = NAN;   /* written past from_arrays' check */
    const kiln_callback_spec t = {.kind = KILN_CALLBACK_TERMINATE_ON_NAN};
    kiln_model *m = model(ctx, &one);
    kiln_fit_options fo = options(4, val);
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, "NaN at epoch 1, step 2", kiln_model_fit(m, train, &fo));
    kiln_model_destroy(m);
    /* Epoch 1 step 1 runs on clean samples; a clean set for epoch 0. */
    kiln_dataset *clean = data(ctx, TRAIN, 0);
    m = model(ctx, &one);
    fo = options(1, val);
    CHECK_OK(ctx, kiln_model_fit(m, clean, &fo));
    fo.epochs = 4;
    fo.callbacks = &t;
    fo.n_callbacks = 1;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    char text[320];
    CHECK(epochs_run(m) == 1 && stop_cause(m, text, sizeof text) == KILN_STOP_TERMINATE_ON_NAN &&
          strstr(text, "NaN at epoch 1, step 2"));
    stopper s = {.epoch = 0, .step = 1, .result = KILN_CALLBACK_STOP};
    kiln_model *ref = model(ctx, &one);
    s.m = ref;
    fo = options(1, val);
    CHECK_OK(ctx, kiln_model_fit(ref, clean, &fo));
    fo.epochs = 4;
    fo.callback = stop_at;
    fo.callback_user = &s;
    CHECK_OK(ctx, kiln_model_fit(ref, train, &fo));
    int64_t n;
    float *a = weights(m, &n), *b = weights(ref, &n);
    int finite = 1;
    for (int64_t i = 0; i < n; i++)
        finite &= isfinite(a[i]);
    CHECK(finite && same(a, b, n));
    free(a);
    free(b);
    fo = options(4, val);
    fo.skip_nonfinite = 1;
    fo.callbacks = &t;
    fo.n_callbacks = 1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "skip_nonfinite", kiln_model_fit(m, train, &fo));
    kiln_model_destroy(m);
    kiln_model_destroy(ref);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(clean);
}

/* Checkpoints keep what callbacks and metrics add: the rate a callback set
 * (a model loading the checkpoint trains on at it), the history's metrics
 * and rates, and the metric sums of an epoch cut short, so that a resumed
 * fit's epoch equals an uninterrupted one. */
static void test_checkpoints(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    const setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .top_k = 2};
    const kiln_callback_spec rp = {.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU, .patience = 1,
                                   .factor = 0.25};
    kiln_model *a = fit(ctx, &s, 3, train, val, &rp, 1);
    CHECK_OK(ctx, kiln_model_save_checkpoint(a, file("reduced.safetensors")));
    kiln_model *b = model(ctx, &s);
    CHECK_OK(ctx, kiln_model_load_checkpoint(b, file("reduced.safetensors")));
    for (int32_t e = 0; e < 3; e++) {
        const kiln_epoch_record ra = epoch(a, e), rb = epoch(b, e);
        CHECK(ra.learning_rate == rb.learning_rate && ra.top_k_accuracy == rb.top_k_accuracy &&
              ra.val_top_k_accuracy == rb.val_top_k_accuracy && rb.mean_absolute_error == -1.0);
    }
    kiln_fit_options fo = options(1, val);
    CHECK_OK(ctx, kiln_model_fit(a, train, &fo));
    CHECK_OK(ctx, kiln_model_fit(b, train, &fo));
    int64_t n;
    float *wa = weights(a, &n), *wb = weights(b, &n);
    CHECK(same(wa, wb, n) && epoch(b, 3).learning_rate == (double)(float)(LR * 0.25 * 0.25));
    free(wa);
    free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);

    /* Stopped after step 2 of epoch 2 with a checkpoint every step. */
    char folder[128];
    snprintf(folder, sizeof folder, "%s/resume", dir);
    kiln_model *straight = fit(ctx, &s, 3, train, val, NULL, 0);
    kiln_model *cut = model(ctx, &s);
    stopper st = {.epoch = 1, .step = 2, .result = KILN_CALLBACK_STOP, .m = cut};
    fo = options(3, val);
    fo.checkpoint_dir = folder;
    fo.checkpoint_every_steps = 1;
    fo.callback = stop_at;
    fo.callback_user = &st;
    CHECK_OK(ctx, kiln_model_fit(cut, train, &fo));
    CHECK(epochs_run(cut) == 1);
    kiln_model *resumed = model(ctx, &s);
    fo.callback = NULL;
    fo.resume = 1;
    CHECK_OK(ctx, kiln_model_fit(resumed, train, &fo));
    CHECK(epochs_run(resumed) == 3);
    for (int32_t e = 0; e < 3; e++)
        CHECK(epoch(resumed, e).top_k_accuracy == epoch(straight, e).top_k_accuracy &&
              epoch(resumed, e).loss == epoch(straight, e).loss);
    kiln_model_destroy(straight);
    kiln_model_destroy(cut);
    kiln_model_destroy(resumed);
}

/* A bad list is refused before any step, naming what is wrong; the model
 * keeps its weights and history. */
static void test_refused(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    kiln_model *m = fit(ctx, &one, 1, train, val, NULL, 0);
    int64_t n;
    float *before = weights(m, &n);
    kiln_fit_options fo = options(2, val);
    const struct {
        kiln_callback_spec spec;
        int validation;
        kiln_status status;
        const char *needle;
    } cases[] = {
        {{.kind = KILN_CALLBACK_EARLY_STOPPING, .monitor = "val_los"}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "callbacks[0] (EarlyStopping): monitor 'val_los' is not "
         "a value this fit computes (loss, accuracy, val_loss, val_accuracy)"},
        {{.kind = KILN_CALLBACK_EARLY_STOPPING}, 0, KILN_ERROR_INVALID_ARGUMENT,
         "monitor 'val_loss' is not a value this fit computes (loss, accuracy; val_ values need "
         "validation data)"},
        {{.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU, .monitor = "top_k_categorical_accuracy"},
         1, KILN_ERROR_INVALID_ARGUMENT, "monitor 'top_k_categorical_accuracy'"},
        {{.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = "x", .monitor = "mae"}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "monitor 'mae'"},
        {{.kind = KILN_CALLBACK_EARLY_STOPPING, .factor = 0.5}, 1, KILN_ERROR_INVALID_ARGUMENT,
         "callbacks[0] (EarlyStopping): factor is set, but EarlyStopping does not read it"},
        {{.kind = KILN_CALLBACK_CSV_LOGGER, .path = "x", .user = &n}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "user is set, but CSVLogger does not read it"},
        {{.kind = KILN_CALLBACK_NONE}, 1, KILN_ERROR_INVALID_ARGUMENT,
         "kind 0 is not a kiln_callback_kind"},
        /* Past the kinds, and below them: refused before any bit is shifted by
         * the kind (UBSan's check in build-ubsan). */
        {{.kind = (kiln_callback_kind)99}, 1, KILN_ERROR_INVALID_ARGUMENT,
         "callbacks[0] (none): kind 99 is not a kiln_callback_kind"},
        {{.kind = (kiln_callback_kind)-1}, 1, KILN_ERROR_INVALID_ARGUMENT,
         "kind -1 is not a kiln_callback_kind"},
        {{.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU, .factor = 1.5}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "factor (1.5) must be in (0, 1)"},
        {{.kind = KILN_CALLBACK_EARLY_STOPPING, .mode = (kiln_monitor_mode)9}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "mode 9"},
        {{.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = "w-{epoch:x}"}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "{epoch:x} is not a format"},
        {{.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = "w-{step}"}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "names {step}"},
        {{.kind = KILN_CALLBACK_MODEL_CHECKPOINT, .path = "w-}"}, 1,
         KILN_ERROR_INVALID_ARGUMENT, "a single '}'"},
        {{.kind = KILN_CALLBACK_MODEL_CHECKPOINT}, 1, KILN_ERROR_INVALID_ARGUMENT,
         "path is NULL"},
        {{.kind = KILN_CALLBACK_FUNCTION}, 1, KILN_ERROR_INVALID_ARGUMENT, "function is NULL"},
        {{.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER}, 1, KILN_ERROR_INVALID_ARGUMENT,
         "schedule is NULL"},
        {{.kind = KILN_CALLBACK_CSV_LOGGER, .path = "/nonexistent/folder/log.csv"}, 1,
         KILN_ERROR_IO, "cannot open /nonexistent/folder/log.csv"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fo.validation = cases[i].validation ? val : NULL;
        fo.callbacks = &cases[i].spec;
        fo.n_callbacks = 1;
        CHECK_FAILS(ctx, cases[i].status, cases[i].needle, kiln_model_fit(m, train, &fo));
    }
    /* The array's stride is struct_size; elements must agree. */
    kiln_callback_spec mixed[2] = {{.struct_size = sizeof mixed[0],
                                    .kind = KILN_CALLBACK_TERMINATE_ON_NAN},
                                   {.struct_size = 8, .kind = KILN_CALLBACK_TERMINATE_ON_NAN}};
    fo.callbacks = mixed;
    fo.n_callbacks = 2;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "callbacks[1]: struct_size is 8",
                kiln_model_fit(m, train, &fo));
    fo.n_callbacks = 65;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_callbacks is 65",
                kiln_model_fit(m, train, &fo));
    /* A scheduler's bad rate stops fit at that epoch. */
    const kiln_callback_spec nan_rate = {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
                                         .schedule = halving, .user = &(float){NAN}};
    fo.callbacks = &nan_rate;
    fo.n_callbacks = 1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "returned nan for epoch 1",
                kiln_model_fit(m, train, &fo));
    float *after = weights(m, &n);
    CHECK(same(before, after, n) && epochs_run(m) == 1);
    free(before);
    free(after);
    kiln_model_destroy(m);
    /* Setting a scheduled rate is refused, as Keras refuses it. */
    const setup decay = {.strategy = KILN_STRATEGY_ONE_DEVICE,
                         .schedule = {.kind = KILN_LR_EXPONENTIAL_DECAY, .decay_rate = 0.5f,
                                      .decay_steps = 3}};
    m = model(ctx, &decay);
    const kiln_callback_spec rp = {.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU};
    fo.callbacks = &rp;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "follows the schedule given at compile",
                kiln_model_fit(m, train, &fo));
    CHECK(epochs_run(m) == 0);
    kiln_model_destroy(m);
}

/* ------------------------------------------------------------------------ */
/* Metrics beyond accuracy                                                  */
/* ------------------------------------------------------------------------ */

#define MN 37      /* samples: odd, so the last batch is short */
#define MDIM 5
#define MOUT 6

static void random_array(float *x, int n, uint64_t seed, float scale)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = ((float)(seed >> 40) / 16777216.0f - 0.5f) * scale;
    }
}

static kiln_model *metric_model(kiln_context *ctx, kiln_loss loss, kiln_activation out,
                                const kiln_compile_options *metrics, kiln_strategy strategy)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {MDIM};
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 7,
                                       .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = MOUT,
                                     .activation = out};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD};
    kiln_compile_options co = *metrics;
    co.struct_size = sizeof co;
    co.loss = loss;
    co.strategy = strategy;
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* The float64 references, from the outputs predict gives. */
static double ref_top_k(const float *y, const int32_t *label, int k)
{
    double hits = 0;
    for (int i = 0; i < MN; i++) {
        const float *yi = y + i * MOUT;
        int above = 0;
        for (int j = 0; j < MOUT; j++)
            above += yi[j] > yi[label[i]];
        hits += isfinite(yi[label[i]]) && above < k;
    }
    return hits / MN;
}

static void ref_dense(const float *y, const float *t, float threshold, double *mae, double *bin)
{
    *mae = *bin = 0;
    for (int i = 0; i < MN; i++) {
        double err = 0, right = 0;
        for (int j = 0; j < MOUT; j++) {
            err += fabs((double)y[i * MOUT + j] - (double)t[i * MOUT + j]);
            right += t[i * MOUT + j] == (y[i * MOUT + j] > threshold ? 1.0f : 0.0f);
        }
        *mae += err / MOUT / MN;
        *bin += right / MOUT / MN;
    }
}

static int close_to(double got, double want)
{
    const int ok = fabs(got - want) <= 1e-6 * (1 + fabs(want));
    if (!ok)
        fprintf(stderr, "got %.9g, want %.9g\n", got, want);
    return ok;
}

/* The history's training metrics under a rate of 0 are evaluate's on the
 * training data, and its val_ ones evaluate's on the validation data. */
static void check_history(kiln_context *ctx, kiln_model *m, kiln_dataset *ds)
{
    const kiln_callback_spec z = {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
                                  .schedule = zero};
    kiln_fit_options fo = options(1, ds);
    fo.batch_size = 8;
    fo.callbacks = &z;
    fo.n_callbacks = 1;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 8, &e));
    int32_t last = epochs_run(m) - 1;
    const kiln_epoch_record r = epoch(m, last);
    CHECK(close_to(r.top_k_accuracy, e.top_k_accuracy) &&
          close_to(r.mean_absolute_error, e.mean_absolute_error) &&
          close_to(r.binary_accuracy, e.binary_accuracy) &&
          r.val_top_k_accuracy == e.top_k_accuracy &&
          r.val_mean_absolute_error == e.mean_absolute_error &&
          r.val_binary_accuracy == e.binary_accuracy);
}

static void test_metrics(kiln_context *ctx, kiln_strategy strategy)
{
    float x[MN * MDIM], y[MN * MOUT], t[MN * MOUT];
    int32_t label[MN];
    random_array(x, MN * MDIM, 3, 4.0f);
    uint64_t s = 11;
    for (int i = 0; i < MN; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        label[i] = (int32_t)((s >> 33) % MOUT);
    }
    /* Sparse labels: top-2, ties counted in. */
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = MN, .feature_rank = 1,
                          .feature_dims = {MDIM}, .features = x, .sparse_labels = label};
    kiln_dataset *sparse = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &sparse));
    const kiln_compile_options top2 = {.top_k = 2};
    kiln_model *m = metric_model(ctx, KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                 KILN_ACTIVATION_SOFTMAX, &top2, strategy);
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_evaluate(m, sparse, 8, &e));
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = MN, .features = x}, y, 8));
    CHECK(e.top_k_accuracy == ref_top_k(y, label, 2) && e.mean_absolute_error == -1.0 &&
          e.binary_accuracy == -1.0 && e.top_k_accuracy > e.accuracy);
    check_history(ctx, m, sparse);
    /* All weights 0: every output ties, so every label is in the top 2 (and
     * the top 1). */
    int64_t n;
    float *w = weights(m, &n);
    memset(w, 0, (size_t)n * sizeof *w);
    CHECK_OK(ctx, kiln_model_set_weights(m, w, n));
    free(w);
    CHECK_OK(ctx, kiln_model_evaluate(m, sparse, 8, &e));
    CHECK(e.top_k_accuracy == 1.0);
    kiln_model_destroy(m);

    /* One-hot labels with some 0.5 targets (never a binary match) and some
     * rows with a second 1: top-3 (of the first largest target), mean
     * absolute error, binary accuracy at 0.2. */
    for (int i = 0; i < MN * MOUT; i++)
        t[i] = (i % MOUT) == label[i / MOUT] ? 1.0f : (i % 11 == 0 ? 0.5f : 0.0f);
    for (int i = 0; i < MN; i += 4)
        t[i * MOUT + (label[i] + 3) % MOUT] = 1.0f;
    d.sparse_labels = NULL;
    d.label_kind = KILN_LABELS_DENSE;
    d.label_size = MOUT;
    d.dense_labels = t;
    kiln_dataset *dense = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &dense));
    const kiln_compile_options all = {.top_k = 3, .mean_absolute_error = 1,
                                      .binary_accuracy = 1, .binary_threshold = 0.2f};
    m = metric_model(ctx, KILN_LOSS_CATEGORICAL_CROSSENTROPY, KILN_ACTIVATION_SOFTMAX, &all,
                     strategy);
    CHECK_OK(ctx, kiln_model_evaluate(m, dense, 8, &e));
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = MN, .features = x}, y, 8));
    double mae, bin;
    ref_dense(y, t, 0.2f, &mae, &bin);
    int32_t first_max[MN];
    for (int i = 0; i < MN; i++) {
        first_max[i] = 0;
        for (int j = 1; j < MOUT; j++)
            if (t[i * MOUT + j] > t[i * MOUT + first_max[i]])
                first_max[i] = j;
    }
    CHECK(e.top_k_accuracy == ref_top_k(y, first_max, 3));
    CHECK(close_to(e.mean_absolute_error, mae) && close_to(e.binary_accuracy, bin));
    check_history(ctx, m, dense);
    kiln_model_destroy(m);

    /* Binary cross-entropy on sigmoids; has_binary_threshold asks for the
     * threshold 0, which every sigmoid output passes. */
    const kiln_compile_options at0 = {.mean_absolute_error = 1, .binary_accuracy = 1,
                                      .has_binary_threshold = 1, .binary_threshold = 0.0f};
    m = metric_model(ctx, KILN_LOSS_BINARY_CROSSENTROPY, KILN_ACTIVATION_SIGMOID, &at0,
                     strategy);
    CHECK_OK(ctx, kiln_model_evaluate(m, dense, 8, &e));
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = MN, .features = x}, y, 8));
    ref_dense(y, t, 0.0f, &mae, &bin);
    double ones = 0;
    for (int i = 0; i < MN * MOUT; i++)
        ones += t[i] == 1.0f;
    CHECK(close_to(e.mean_absolute_error, mae) && close_to(e.binary_accuracy, bin) &&
          close_to(bin, ones / (MN * MOUT)) && e.top_k_accuracy == -1.0);
    /* train_on_batch reports them too. */
    kiln_metrics b = {.struct_size = sizeof b};
    CHECK_OK(ctx, kiln_model_test_on_batch(
                      m, &(kiln_batch_arrays){.count = MN, .features = x, .dense_labels = t}, &b));
    CHECK(close_to(b.mean_absolute_error, mae) && close_to(b.binary_accuracy, bin));
    kiln_model_destroy(m);

    /* Metrics that do not fit the loss. */
    kiln_model *bad = NULL;
    const int32_t dims[] = {MDIM};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = MOUT};
    const struct {
        kiln_loss loss;
        kiln_compile_options metrics;
        const char *needle;
    } refused[] = {
        {KILN_LOSS_MEAN_SQUARED_ERROR, {.top_k = 2}, "categorical cross-entropy losses only"},
        {KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, {.top_k = -1}, "top_k is -1"},
        {KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, {.mean_absolute_error = 1},
         "mean_absolute_error needs dense labels"},
        {KILN_LOSS_MEAN_SQUARED_ERROR, {.binary_accuracy = 1, .binary_threshold = INFINITY},
         "binary_threshold inf is not finite"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK_OK(ctx, kiln_model_create(ctx, &bad));
        kiln_input(bad, 1, dims, NULL);
        kiln_dense(bad, KILN_NODE_PREVIOUS, &head);
        kiln_compile_options co = refused[i].metrics;
        co.struct_size = sizeof co;
        co.loss = refused[i].loss;
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, refused[i].needle,
                    kiln_model_compile(bad, &co));
        kiln_model_destroy(bad);
    }
    kiln_dataset_destroy(sparse);
    kiln_dataset_destroy(dense);
}

/* Mirrored on two devices decides as one device does: the same epochs, the
 * same rates, weights and metrics within rounding. */
static void test_mirrored(kiln_context *ctx, kiln_dataset *train, kiln_dataset *val)
{
    const kiln_callback_spec cbs[] = {
        {.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU, .patience = 1, .factor = 0.5},
        {.kind = KILN_CALLBACK_EARLY_STOPPING, .patience = 3, .restore_best_weights = 1},
        {.kind = KILN_CALLBACK_EARLY_STOPPING, .monitor = "val_sparse_top_k_categorical_accuracy",
         .patience = 20},
        {.kind = KILN_CALLBACK_CSV_LOGGER, .path = file("mirrored.csv")},
    };
    const setup s1 = {.strategy = KILN_STRATEGY_ONE_DEVICE, .top_k = 2};
    const setup s2 = {.strategy = KILN_STRATEGY_MIRRORED, .top_k = 2};
    kiln_model *a = fit(ctx, &s1, 10, train, val, cbs, 3);
    kiln_model *b = fit(ctx, &s2, 10, train, val, cbs, 4);
    const char *strategy = NULL;
    int32_t replicas = 0;
    CHECK_OK(ctx, kiln_model_distribution(b, &strategy, &replicas));
    CHECK(strcmp(strategy, "mirrored") == 0 && replicas == 2);
    CHECK(epochs_run(a) == 4 && epochs_run(b) == 4);
    for (int32_t e = 0; e < 4; e++) {
        const kiln_epoch_record ra = epoch(a, e), rb = epoch(b, e);
        CHECK(ra.learning_rate == rb.learning_rate);
        CHECK(fabs(ra.val_loss - rb.val_loss) < 1e-5 &&
              fabs(ra.top_k_accuracy - rb.top_k_accuracy) < 1e-6 &&
              fabs(ra.val_top_k_accuracy - rb.val_top_k_accuracy) < 1e-6);
    }
    CHECK(epoch(a, 1).learning_rate == (double)LR &&
          epoch(a, 2).learning_rate == (double)(float)(LR * 0.5));
    int64_t n;
    float *wa = weights(a, &n), *wb = weights(b, &n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)wa[i] - (double)wb[i]));
    CHECK(worst < 1e-5);
    size_t size = 0;
    unsigned char *csv = test_read_file(file("mirrored.csv"), &size);
    int lines = 0;
    for (size_t i = 0; csv && i < size; i++)
        lines += csv[i] == '\n';
    CHECK(lines == 5);
    free(csv);
    free(wa);
    free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

int main(void)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    snprintf(dir, sizeof dir, "/tmp/kiln-callbacks-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    const int32_t devices = test_device_count(ctx);
    kiln_dataset *train = data(ctx, TRAIN, 0), *val = data(ctx, VAL, 1);
    test_rising_validation(ctx, train, val);
    test_early_stopping(ctx, train, val);
    test_early_stopping_reasons(ctx, train, val);
    test_restore_best_weights(ctx, train, val);
    test_reduce_lr_on_plateau(ctx, train, val);
    test_model_checkpoint(ctx, train, val);
    test_scheduler(ctx, train, val, devices);
    test_csv_logger(ctx);
    test_csv_full_disk();
    test_functions(ctx, train, val);
    test_terminate_on_nan(ctx, val);
    test_checkpoints(ctx, train, val);
    test_refused(ctx, train, val);
    test_metrics(ctx, KILN_STRATEGY_ONE_DEVICE);
    test_metrics(ctx, KILN_STRATEGY_PARAMETER_SERVER);
    if (test_has_devices(devices, 2, "the metrics under mirrored, central storage and the "
                         "pipeline, and mirrored's callbacks")) {
        test_metrics(ctx, KILN_STRATEGY_MIRRORED);
        test_metrics(ctx, KILN_STRATEGY_CENTRAL_STORAGE);
        test_metrics(ctx, KILN_STRATEGY_PIPELINE);
        test_mirrored(ctx, train, val);
    }
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    kiln_context_destroy(ctx);
    return test_finish("test_callbacks");
}
