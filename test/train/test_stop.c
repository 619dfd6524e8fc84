/* Ending a running call early: kiln_model_stop from a callback, from
 * another thread and from a loader thread ends fit, evaluate and predict
 * between steps, and the model trains on afterwards. */
#include "harness.h"

#include <pthread.h>
#include <string.h>

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

static kiln_model *model(kiln_context *ctx, kiln_strategy strategy, double timeout)
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
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .strategy = strategy, .step_timeout_seconds = timeout};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static int32_t history(kiln_model *m)
{
    int32_t n = -1;
    kiln_model_history_length(m, &n);
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
    s->refused = kiln_model_history_length(s->m, &n);
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

static int fill_and_stop(void *user, int64_t index, float *x, void *label, char *message,
                         size_t size)
{
    const stopping_source *s = user;
    (void)message;
    (void)size;
    memcpy(x, features + index * DIM, DIM * sizeof(float));
    *(int32_t *)label = labels[index];
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
    CHECK_OK(ctx, kiln_model_predict(m, x, MANY, whole, 1));
    nagger n = {.m = m};
    pthread_t t;
    pthread_create(&t, NULL, keep_stopping, &n);
    const kiln_status st = kiln_model_predict(m, x, MANY, cut, 1);
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

int main(void)
{
    kiln_context *ctx = NULL;
    const kiln_status st = kiln_context_create(NULL, &ctx);
    if (st == KILN_ERROR_NO_DEVICE)
        SKIP_MISSING("no OpenCL device");
    CHECK(st == KILN_OK);
    kiln_dataset *ds = arrays(ctx, SAMPLES);
    test_fit(ctx, ds);
    test_evaluate(ctx, ds);
    test_predict(ctx);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_stop");
}
