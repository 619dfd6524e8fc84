/* Ending a running call early: kiln_model_stop from a callback, from
 * another thread and from a loader thread ends fit, evaluate and predict
 * between steps, and the model trains on afterwards. And what bounds a call
 * that nothing stops: a data source that never returns a sample fails fit
 * and evaluate at the watchdog under every in-process strategy (the MPI
 * ones: test_stop_mpi), as does a device step that never ends under
 * one_device. */
#include "harness.h"
#include "counting_alloc.h"
#include "fault_layer.h"

#include "base/clock.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#define DIM 4
#define CLASSES 3
#define SAMPLES 48
#define BATCH 8
#define STEPS (SAMPLES / BATCH)

static float features[SAMPLES * DIM];
static int32_t labels[SAMPLES];

static kiln_dataset *arrays(kiln_context *ctx, int64_t count)
{
    uint64_t s = 11;
    for (int i = 0; i < SAMPLES; i++) {
        for (int j = 0; j < DIM; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            features[i * DIM + j] = (j == i % CLASSES) + (float)(s >> 40) / 1.6777216e8f;
        }
        labels[i] = i % CLASSES;
    }
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 1,
                                .feature_dims = {DIM}, .features = features,
                                .sparse_labels = labels};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

/* `fault`: a fault layer after the hidden one (NULL: none). */
static kiln_model *faulty_model(kiln_context *ctx, kiln_strategy strategy, double timeout,
                                fault_plan *fault)
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
    if (fault)
        fault_layer(m, KILN_NODE_PREVIOUS, fault);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .strategy = strategy, .step_timeout_seconds = timeout};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_model *model(kiln_context *ctx, kiln_strategy strategy, double timeout)
{
    return faulty_model(ctx, strategy, timeout, NULL);
}

static int32_t history(kiln_model *m)
{
    int32_t n = -1;
    kiln_model_history_count(m, &n);
    return n;
}

static kiln_stop_cause stop_cause(kiln_model *m, char *text, size_t size)
{
    kiln_stop_cause cause = KILN_STOP_NONE;
    text[0] = '\0';
    kiln_model_stop_reason(m, &cause, text, size, NULL);
    return cause;
}

/* A fit callback: at (epoch, step) it calls kiln_model_stop itself, or
 * hands the stop to another thread and waits until that thread has asked. */
typedef struct stopper {
    kiln_model *m;
    int32_t epoch;
    int64_t step;
    int other_thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int due, asked;
    int steps_seen;
    kiln_status other_status;       /* kiln_model_stop's, from the other thread */
    kiln_status refused;            /* an entering accessor's, from the other thread */
} stopper;

static int at_step(void *user, const kiln_progress *p)
{
    stopper *s = user;
    if (p->event != KILN_EVENT_BATCH_END)
        return KILN_CALLBACK_CONTINUE;
    s->steps_seen++;
    if (p->epoch != s->epoch || p->step != s->step)
        return KILN_CALLBACK_CONTINUE;
    if (!s->other_thread) {
        CHECK(kiln_model_stop(s->m) == KILN_OK);
        return KILN_CALLBACK_CONTINUE;
    }
    pthread_mutex_lock(&s->lock);
    s->due = 1;
    pthread_cond_broadcast(&s->cond);
    while (!s->asked)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return KILN_CALLBACK_CONTINUE;
}

static void *stop_thread(void *arg)
{
    stopper *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->due)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    /* fit is inside the model: an accessor is refused, the stop is not. */
    int32_t n;
    s->refused = kiln_model_history_count(s->m, &n);
    s->other_status = kiln_model_stop(s->m);
    pthread_mutex_lock(&s->lock);
    s->asked = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static kiln_fit_options fit_options(int32_t epochs, const kiln_callback_spec *cb)
{
    kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = epochs, .batch_size = BATCH,
                           .verbosity = KILN_VERBOSE_SILENT, .callbacks = cb,
                           .n_callbacks = cb ? 1 : 0};
    return fo;
}

static void test_fit(kiln_context *ctx, kiln_dataset *ds)
{
    char text[320];
    kiln_model *m = model(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    /* From the callback, mid-epoch 2: epoch 1 whole in the history. */
    stopper s = {.m = m, .epoch = 1, .step = 2};
    kiln_callback_spec cb = {.kind = KILN_CALLBACK_FUNCTION, .function = at_step, .user = &s};
    kiln_fit_options fo = fit_options(4, &cb);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK(history(m) == 1);
    CHECK(s.steps_seen == STEPS + 2);
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_APPLICATION);
    CHECK(strstr(text, "kiln_model_stop: the application stopped training at epoch 2, "
                       "step 2 of 6") != NULL);
    printf("from a callback: %s\n", text);

    /* From another thread while fit is inside the model. */
    s = (stopper){.m = m, .epoch = 0, .step = 3, .other_thread = 1};
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cond, NULL);
    pthread_t t;
    pthread_create(&t, NULL, stop_thread, &s);
    fo = fit_options(3, &cb);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    pthread_join(t, NULL);
    CHECK(s.other_status == KILN_OK);
    CHECK(s.refused == KILN_ERROR_STATE);
    CHECK(history(m) == 1);   /* the cut epoch left out */
    CHECK(s.steps_seen == 3);
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_APPLICATION);
    CHECK(strstr(text, "at epoch 1, step 3 of 6") != NULL);
    printf("from another thread: %s\n", text);
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.cond);

    /* At the last step of an epoch: that epoch is whole and recorded. */
    s = (stopper){.m = m, .epoch = 0, .step = STEPS};
    fo = fit_options(3, &cb);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK(history(m) == 2);
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_APPLICATION);

    /* A request while nothing runs is dropped: the next fit runs whole. */
    CHECK(kiln_model_stop(m) == KILN_OK);
    fo = fit_options(2, NULL);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK(history(m) == 4);
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_NONE && text[0] == '\0');
    CHECK(kiln_model_stop(NULL) == KILN_ERROR_INVALID_ARGUMENT);
    kiln_model_destroy(m);
}

/* A callback source whose fill asks the model to stop once it reads sample
 * `at`: a stop from a loader thread. */
typedef struct stopping_source {
    kiln_model *m;
    int64_t at;
} stopping_source;

static int fill_and_stop(void *user, int64_t index, const kiln_sample_buffers *b,
                         char *message, size_t size)
{
    const stopping_source *s = user;
    (void)message;
    (void)size;
    memcpy(b->features, features + index * DIM, DIM * sizeof(float));
    *b->sparse_labels = labels[index];
    if (index == s->at && s->m)
        kiln_model_stop(s->m);
    return 0;
}

static void test_evaluate(kiln_context *ctx, kiln_dataset *ds)
{
    char text[320];
    kiln_model *m = model(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    stopping_source src = {.m = NULL, .at = 1};
    const kiln_callback_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 1,
                                  .feature_dims = {DIM}, .fill = fill_and_stop, .user = &src};
    kiln_dataset *streamed = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &d, &streamed));
    /* The first batch's own reads ask: evaluate stops after it, with the
     * metrics of its samples (those of evaluating them alone). */
    kiln_dataset *first = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(ds, 0, BATCH, &first));
    kiln_metrics want = {.struct_size = sizeof want}, got = {.struct_size = sizeof got};
    CHECK_OK(ctx, kiln_model_evaluate(m, first, BATCH, &want));
    src.m = m;
    CHECK_OK(ctx, kiln_model_evaluate(m, streamed, BATCH, &got));
    CHECK(got.samples == BATCH);
    CHECK(got.loss == want.loss && got.accuracy == want.accuracy);
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_APPLICATION);
    CHECK(strstr(text, "stopped kiln_model_evaluate after 8 of 48 samples") != NULL);
    printf("evaluate: %s\n", text);
    /* Asked for nothing, it runs whole. */
    src.m = NULL;
    CHECK_OK(ctx, kiln_model_evaluate(m, streamed, BATCH, &got));
    CHECK(got.samples == SAMPLES);
    kiln_dataset_destroy(first);
    kiln_dataset_destroy(streamed);
    kiln_model_destroy(m);
}

typedef struct nagger {
    kiln_model *m;
    int done;
} nagger;

static void *keep_stopping(void *arg)
{
    nagger *n = arg;
    while (!__atomic_load_n(&n->done, __ATOMIC_ACQUIRE))
        kiln_model_stop(n->m);
    return NULL;
}

/* predict has no count to give back: stopped, it fails naming what it
 * wrote, and what it wrote is what a whole predict writes. */
static void test_predict(kiln_context *ctx)
{
    enum { MANY = 20000 };
    kiln_model *m = model(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    float *x = malloc((size_t)MANY * DIM * sizeof(float));
    float *whole = malloc((size_t)MANY * CLASSES * sizeof(float));
    float *cut = calloc((size_t)MANY * CLASSES, sizeof(float));
    for (int i = 0; i < MANY; i++)
        memcpy(x + (size_t)i * DIM, features + (i % SAMPLES) * DIM, DIM * sizeof(float));
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = MANY, .features = x}, whole, 1));
    nagger n = {.m = m};
    pthread_t t;
    pthread_create(&t, NULL, keep_stopping, &n);
    const kiln_status st = kiln_model_predict(m, &(kiln_batch_arrays){.count = MANY, .features = x}, cut, 1);
    __atomic_store_n(&n.done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(st == KILN_ERROR_STOPPED);
    const char *msg = kiln_context_last_error(ctx);
    long long written = -1, of = -1;
    const char *after = strstr(msg, "stopped by kiln_model_stop after ");
    CHECK(after && sscanf(after, "stopped by kiln_model_stop after %lld of %lld", &written,
                          &of) == 2);
    printf("predict: %s\n", msg);
    CHECK(written > 0 && written < MANY && of == MANY);
    if (written > 0 && written <= MANY)
        CHECK(memcmp(cut, whole, (size_t)written * CLASSES * sizeof(float)) == 0);
    free(x);
    free(whole);
    free(cut);
    kiln_model_destroy(m);
}

/* A callback source whose fill blocks on sample `at` until the test
 * releases it, as a fill waiting on a network that never answers. */
typedef struct blocking_source {
    int64_t at;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int released;
    int blocked;                    /* fills inside the block */
} blocking_source;

static int fill_or_block(void *user, int64_t index, const kiln_sample_buffers *b,
                         char *message, size_t size)
{
    blocking_source *bs = user;
    (void)message;
    (void)size;
    memcpy(b->features, features + index * DIM, DIM * sizeof(float));
    *b->sparse_labels = labels[index];
    if (index != bs->at)
        return 0;
    pthread_mutex_lock(&bs->lock);
    bs->blocked++;
    while (!bs->released)
        pthread_cond_wait(&bs->cond, &bs->lock);
    bs->blocked--;
    pthread_mutex_unlock(&bs->lock);
    return 0;
}

static kiln_dataset *blocking(kiln_context *ctx, blocking_source *b, int64_t at)
{
    *b = (blocking_source){.at = at};
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    const kiln_callback_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 1,
                                  .feature_dims = {DIM}, .fill = fill_or_block, .user = b};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &d, &ds));
    return ds;
}

static void release(blocking_source *b)
{
    pthread_mutex_lock(&b->lock);
    b->released = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* Waits (up to 10 s) for every allocation of the context to be gone: a
 * loader thread left inside the fill frees what it holds once released. */
static int all_freed(const counter *c)
{
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10000000};
    const double end = kiln_now() + 10.0;
    long live;
    do {
        pthread_mutex_lock(&counter_lock);
        live = c->live;
        pthread_mutex_unlock(&counter_lock);
        if (live == 0)
            return 1;
        nanosleep(&tick, NULL);
    } while (kiln_now() < end);
    printf("%ld allocation(s) still live\n", live);
    return 0;
}

static kiln_context *counted_context(counter *c)
{
    const kiln_context_options o = {.struct_size = sizeof o, .realloc_fn = counting_realloc,
                                    .realloc_user = c};
    kiln_context *ctx = NULL;
    CHECK(kiln_context_create(&o, &ctx) == KILN_OK);
    return ctx;
}

/* Seconds: far above a step of this model, even under ThreadSanitizer. */
#define TIMEOUT 2.0
/* The sample that blocks: in step 3 of an unshuffled epoch of batches of 8. */
#define BLOCKED 20

/* Under `strategy`, fit on a source that blocks fails at the watchdog,
 * naming the sample and the source; the model trains on afterwards and is
 * destroyed with the thread still blocked; once released, the thread ends
 * and every allocation is freed. */
static void test_blocked_source(kiln_strategy strategy, const char *name)
{
    counter c = {0};
    kiln_context *ctx = counted_context(&c);
    blocking_source b;
    kiln_dataset *ds = blocking(ctx, &b, BLOCKED);
    kiln_dataset *good = arrays(ctx, SAMPLES);
    kiln_model *m = model(ctx, strategy, TIMEOUT);
    kiln_fit_options fo = fit_options(2, NULL);
    fo.no_shuffle = 1;
    fo.loader_threads = 2;
    const double t0 = kiln_now();
    CHECK_FAILS(ctx, KILN_ERROR_TIMEOUT, "reading sample 20 (5 of 8 of step 3's batch) from "
                "the dataset's callback source", kiln_model_fit(m, ds, &fo));
    const double waited = kiln_now() - t0;
    CHECK(strstr(kiln_context_last_error(ctx), "the batch of step 3 (epoch 1) within the "
                 "2 s watchdog") != NULL);
    printf("%s: %s (after %.2f s)\n", name, kiln_context_last_error(ctx), waited);
    CHECK(waited < test_seconds(10.0));
    CHECK(history(m) == 0);
    /* The model is not broken by its data: it trains on good data. */
    fo = fit_options(1, NULL);
    CHECK_OK(ctx, kiln_model_fit(m, good, &fo));
    CHECK(history(m) == 1);
    /* evaluate waits for its batches under the same watchdog. */
    kiln_metrics r = {.struct_size = sizeof r};
    CHECK_FAILS(ctx, KILN_ERROR_TIMEOUT, "reading sample 20",
                kiln_model_evaluate(m, ds, BATCH, &r));
    pthread_mutex_lock(&b.lock);
    CHECK(b.blocked == 2);   /* fit's thread and evaluate's, both left inside */
    pthread_mutex_unlock(&b.lock);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_dataset_destroy(good);
    kiln_context_destroy(ctx);   /* closes when the blocked threads let go */
    release(&b);
    CHECK(all_freed(&c));
    pthread_mutex_destroy(&b.lock);
    pthread_cond_destroy(&b.cond);
}

typedef struct delayed_stop {
    kiln_model *m;
    blocking_source *b;
} delayed_stop;

static void *stop_when_blocked(void *arg)
{
    delayed_stop *d = arg;
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10000000};
    for (;;) {
        pthread_mutex_lock(&d->b->lock);
        const int blocked = d->b->blocked;
        pthread_mutex_unlock(&d->b->lock);
        if (blocked)
            break;
        nanosleep(&tick, NULL);
    }
    kiln_model_stop(d->m);
    return NULL;
}

/* A stop ends fit's wait for a batch long before the watchdog would, and
 * fit does not wait for the read still blocked. */
static void test_stop_while_waiting(void)
{
    counter c = {0};
    kiln_context *ctx = counted_context(&c);
    blocking_source b;
    kiln_dataset *ds = blocking(ctx, &b, BLOCKED);
    kiln_model *m = model(ctx, KILN_STRATEGY_ONE_DEVICE, 60);
    kiln_fit_options fo = fit_options(2, NULL);
    fo.no_shuffle = 1;
    /* One slot: step 3's reads start once fit waits for them. */
    fo.loader_threads = 1;
    fo.prefetch_batches = 1;
    delayed_stop d = {.m = m, .b = &b};
    pthread_t t;
    pthread_create(&t, NULL, stop_when_blocked, &d);
    const double t0 = kiln_now();
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    const double waited = kiln_now() - t0;
    pthread_join(t, NULL);
    char text[320];
    CHECK(stop_cause(m, text, sizeof text) == KILN_STOP_APPLICATION);
    CHECK(strstr(text, "at epoch 1, waiting for step 3's batch") != NULL);
    printf("stop while waiting: %s (after %.2f s)\n", text, waited);
    CHECK(waited < test_seconds(30.0));
    CHECK(history(m) == 0);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    release(&b);
    CHECK(all_freed(&c));
    pthread_mutex_destroy(&b.lock);
    pthread_cond_destroy(&b.cond);
}

/* one_device bounds its device's step as the other strategies do: a step
 * that stalls in the fault layer fails at the watchdog naming the replica,
 * device and layer, and the model then refuses every call but destroy. */
static void test_one_device_step(void)
{
    counter c = {0};
    kiln_context *ctx = counted_context(&c);
    kiln_dataset *ds = arrays(ctx, SAMPLES);
    /* The stall outlasts the watchdog and ends within the 10 s a destroy
     * waits for a busy worker. */
    fault_plan stall = {.armed = 1, .device = 0, .step = 1, .stall_seconds = 6.0};
    kiln_model *m = faulty_model(ctx, KILN_STRATEGY_ONE_DEVICE, TIMEOUT, &stall);
    kiln_fit_options fo = fit_options(1, NULL);
    const double t0 = kiln_now();
    CHECK_FAILS(ctx, KILN_ERROR_TIMEOUT, "replica 0 on device 0", kiln_model_fit(m, ds, &fo));
    const double waited = kiln_now() - t0;
    CHECK(strstr(kiln_context_last_error(ctx), "layer 'fault' (forward) did not finish its "
                 "step within the 2 s watchdog") != NULL);
    printf("one_device step: %s (after %.2f s)\n", kiln_context_last_error(ctx), waited);
    CHECK(waited < test_seconds(4.5));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "failed earlier", kiln_model_fit(m, ds, &fo));
    kiln_flag_raise(&stall.released);
    kiln_model_destroy(m);   /* joins the stalled thread, released just now */
    /* A failing step (not a stall) leaves one_device usable, as before. */
    fault_plan fail = {.armed = 1, .device = 0, .step = 1};
    m = faulty_model(ctx, KILN_STRATEGY_ONE_DEVICE, TIMEOUT, &fail);
    CHECK_FAILS(ctx, KILN_ERROR_DEVICE, "injected fault", kiln_model_fit(m, ds, &fo));
    fail.armed = 0;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    CHECK(all_freed(&c));
}

int main(void)
{
    kiln_context *ctx = NULL;
    const kiln_status st = kiln_context_create(NULL, &ctx);
    if (st == KILN_ERROR_NO_DEVICE)
        SKIP_MISSING("no OpenCL device");
    CHECK(st == KILN_OK);
    int32_t devices = 0;
    kiln_context_device_count(ctx, &devices);
    printf("%d device(s)\n", (int)devices);
    kiln_dataset *ds = arrays(ctx, SAMPLES);
    test_fit(ctx, ds);
    test_evaluate(ctx, ds);
    test_predict(ctx);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    test_blocked_source(KILN_STRATEGY_ONE_DEVICE, "one_device");
    test_blocked_source(KILN_STRATEGY_MIRRORED, "mirrored");
    test_blocked_source(KILN_STRATEGY_CENTRAL_STORAGE, "central_storage");
    test_blocked_source(KILN_STRATEGY_PIPELINE, "pipeline");
    test_blocked_source(KILN_STRATEGY_PARAMETER_SERVER, "parameter_server");
    test_stop_while_waiting();
    test_one_device_step();
    return test_finish("test_stop");
}
