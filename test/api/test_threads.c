/* Threads and one context. Two models on one context, trained at once from
 * two threads, end with exactly the weights they reach one after the other
 * (they share the device's kernels, whose arguments OpenCL forbids setting
 * from two threads at once). One model used by two calls at once, or from
 * inside its own fit's callback, refuses the second call with
 * KILN_ERROR_STATE instead of mixing the two. */
#include "harness.h"
#include "test_data.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SIDE 12
#define SAMPLES 96

static kiln_model *small_cnn(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 6, .kernel_size = {3, 3},
                                .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 16,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 4,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

typedef struct fit_job {
    kiln_model *model;
    const kiln_dataset *data;
    int32_t batch;
    kiln_status status;
} fit_job;

static void *fit_thread(void *arg)
{
    fit_job *j = arg;
    kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 6, .batch_size = j->batch,
                           .verbosity = KILN_VERBOSE_SILENT};
    j->status = kiln_model_fit(j->model, j->data, &fo);
    return NULL;
}

static float *weights_of(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = malloc((size_t)*n * sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

/* Two batch sizes, so the two models launch different work at once. */
static void test_two_models_one_context(kiln_context *ctx, const kiln_dataset *ds)
{
    kiln_model *seq[2], *par[2];
    fit_job jobs[2];
    for (int k = 0; k < 2; k++) {
        seq[k] = small_cnn(ctx);
        jobs[k] = (fit_job){.model = seq[k], .data = ds, .batch = k ? 5 : 3};
        fit_thread(&jobs[k]);
        CHECK(jobs[k].status == KILN_OK);
    }
    for (int round = 0; round < 3; round++) {
        pthread_t t[2];
        for (int k = 0; k < 2; k++) {
            par[k] = small_cnn(ctx);
            jobs[k] = (fit_job){.model = par[k], .data = ds, .batch = k ? 5 : 3};
        }
        for (int k = 0; k < 2; k++)
            pthread_create(&t[k], NULL, fit_thread, &jobs[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
        for (int k = 0; k < 2; k++) {
            CHECK(jobs[k].status == KILN_OK);
            int64_t n_seq, n_par;
            float *a = weights_of(ctx, seq[k], &n_seq), *b = weights_of(ctx, par[k], &n_par);
            CHECK(n_seq == n_par && memcmp(a, b, (size_t)n_seq * sizeof(float)) == 0);
            free(a);
            free(b);
            kiln_model_destroy(par[k]);
        }
    }
    for (int k = 0; k < 2; k++)
        kiln_model_destroy(seq[k]);
}

/* fit's callback calls predict on the model being fit. */
typedef struct reentry {
    kiln_model *model;
    kiln_context *ctx;
    int tried;
    kiln_status status;
    char message[256];
    int reads_ok;     /* fit's callback may read the model it is inside */
} reentry;

/* The accessors of a compiled model's shape and placement: how many of
 * them did not return KILN_OK. */
static int accessors(const kiln_model *m)
{
    int64_t count = 0, size = 0;
    const char *strategy = NULL;
    int32_t replicas = 0, rank = 0, ranks = 0, inputs = 0, outputs = 0;
    kiln_tensor_info input = {.struct_size = sizeof input};
    kiln_tensor_info output = {.struct_size = sizeof output};
    const kiln_status st[] = {
        kiln_model_parameter_count(m, &count), kiln_model_output_size(m, &size),
        kiln_model_distribution(m, &strategy, &replicas), kiln_model_rank(m, &rank, &ranks),
        kiln_model_input_count(m, &inputs), kiln_model_input_info(m, 0, &input),
        kiln_model_output_count(m, &outputs), kiln_model_output_info(m, 0, &output),
    };
    int refused = 0;
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
        refused += st[i] != KILN_OK;
    return refused;
}

static int predict_from_callback(void *user, const kiln_progress *progress)
{
    reentry *r = user;
    (void)progress;
    if (r->tried++)
        return 0;
    float x[SIDE * SIDE] = {0}, y[4];
    r->status = kiln_model_predict(r->model, &(kiln_batch_arrays){.count = 1, .features = x}, y, 1);
    snprintf(r->message, sizeof r->message, "%s", kiln_context_last_error(r->ctx));
    int32_t epochs = -1;
    size_t length = 0;
    kiln_training_stats stats = {.struct_size = sizeof stats};
    kiln_memory_report memory = {.struct_size = sizeof memory};
    r->reads_ok = kiln_model_history_count(r->model, &epochs) == KILN_OK && epochs >= 0 &&
                  kiln_model_training_stats(r->model, &stats) == KILN_OK &&
                  kiln_model_memory(r->model, 0, &memory) == KILN_OK &&
                  kiln_model_summary(r->model, NULL, 0, &length) == KILN_OK && length > 0 &&
                  accessors(r->model) == 0;
    return 0;
}

static void test_reentry_refused(kiln_context *ctx, const kiln_dataset *ds)
{
    kiln_model *plain = small_cnn(ctx), *called = small_cnn(ctx);
    fit_job job = {.model = plain, .data = ds, .batch = 5};
    fit_thread(&job);
    CHECK(job.status == KILN_OK);
    reentry r = {.model = called, .ctx = ctx};
    kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 6, .batch_size = 5,
                           .verbosity = KILN_VERBOSE_SILENT, .callback = predict_from_callback,
                           .callback_user = &r};
    CHECK_OK(ctx, kiln_model_fit(called, ds, &fo));
    CHECK(r.tried > 0 && r.status == KILN_ERROR_STATE && r.reads_ok);
    CHECK(strstr(r.message, "kiln_model_predict") && strstr(r.message, "kiln_model_fit"));
    /* The refused call changed nothing. */
    int64_t n;
    float *a = weights_of(ctx, plain, &n), *b = weights_of(ctx, called, &n);
    CHECK(memcmp(a, b, (size_t)n * sizeof(float)) == 0);
    free(a);
    free(b);
    kiln_model_destroy(plain);
    kiln_model_destroy(called);
}

/* Thread B calls the model while thread A's fit holds it: A's callback
 * lets B in and waits until B has tried. */
typedef struct crossing {
    kiln_model *model;
    kiln_context *ctx;
    pthread_barrier_t inside, tried;
    int signalled;
    kiln_status status, read_status;
    int accessors_refused;   /* of accessors()'s 8 calls */
    char message[256], accessor_message[256];
} crossing;

static int hold_for_other_thread(void *user, const kiln_progress *progress)
{
    crossing *c = user;
    (void)progress;
    if (!c->signalled++) {
        pthread_barrier_wait(&c->inside);
        pthread_barrier_wait(&c->tried);
    }
    return 0;
}

static void *call_while_fitting(void *arg)
{
    crossing *c = arg;
    pthread_barrier_wait(&c->inside);
    float w[1];
    c->status = kiln_model_get_weights(c->model, w, 1);
    snprintf(c->message, sizeof c->message, "%s", kiln_context_last_error(c->ctx));
    /* Reading is refused too: the history is fit's to grow. */
    int32_t epochs;
    c->read_status = kiln_model_history_count(c->model, &epochs);
    /* And so is every accessor: compile and fit write what they read. */
    c->accessors_refused = accessors(c->model);
    snprintf(c->accessor_message, sizeof c->accessor_message, "%s",
             kiln_context_last_error(c->ctx));
    pthread_barrier_wait(&c->tried);
    return NULL;
}

static void test_second_thread_refused(kiln_context *ctx, const kiln_dataset *ds)
{
    crossing c = {.model = small_cnn(ctx), .ctx = ctx};
    pthread_barrier_init(&c.inside, NULL, 2);
    pthread_barrier_init(&c.tried, NULL, 2);
    pthread_t other;
    pthread_create(&other, NULL, call_while_fitting, &c);
    kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 1, .batch_size = 16,
                           .verbosity = KILN_VERBOSE_SILENT, .callback = hold_for_other_thread,
                           .callback_user = &c};
    CHECK_OK(ctx, kiln_model_fit(c.model, ds, &fo));
    pthread_join(other, NULL);
    CHECK(c.status == KILN_ERROR_STATE && c.read_status == KILN_ERROR_STATE);
    CHECK(strstr(c.message, "kiln_model_get_weights") && strstr(c.message, "kiln_model_fit"));
    if (c.accessors_refused != 8)
        fprintf(stderr, "%d of 8 accessors refused during another thread's fit\n",
                c.accessors_refused);
    CHECK(c.accessors_refused == 8);
    CHECK(strstr(c.accessor_message, "kiln_model_output_info: the model is in use by another "
                 "call (kiln_model_fit)"));
    /* Once fit has returned, the model is free again. */
    int64_t n;
    free(weights_of(ctx, c.model, &n));
    CHECK(accessors(c.model) == 0);
    pthread_barrier_destroy(&c.inside);
    pthread_barrier_destroy(&c.tried);
    kiln_model_destroy(c.model);
}

int main(void)
{
    /* Two threads drive one device here: PoCL 3.1's basic device hangs
     * under that (a thread waits on an event lock it holds itself), so a
     * PoCL device is its pthread one, whatever POCL_DEVICES the suite runs
     * under ("basic basic" in CI's second pass). The first device, whatever
     * KILN_DEVICES says: the test is about one device. */
    setenv("POCL_DEVICES", "pthread", 1);
    const int32_t first = 0;
    const kiln_context_options o = {.struct_size = sizeof o, .n_device_indices = 1,
                                    .device_indices = &first};
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(&o, &ctx);
    if (st == KILN_ERROR_NO_DEVICE)
        SKIP_MISSING("no OpenCL device");
    CHECK(st == KILN_OK);
    kiln_dataset *ds = synthetic_images(ctx, SAMPLES, SIDE, 7, 4);
    test_two_models_one_context(ctx, ds);
    test_reentry_refused(ctx, ds);
    test_second_thread_refused(ctx, ds);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_threads");
}
