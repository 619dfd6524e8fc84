/* Threads and one context. Two models on one context, trained at once from
 * two threads, end with exactly the weights they reach one after the other
 * (they share the device's kernels, whose arguments OpenCL forbids setting
 * from two threads at once). One model used by two calls at once, or from
 * inside its own fit's callback, refuses the second call with
 * KILN_ERROR_STATE instead of mixing the two. */
#include "harness.h"
#include "test_data.h"

#include <pthread.h>
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

int main(void)
{
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(NULL, &ctx);
    if (st == KILN_ERROR_NO_DEVICE)
        SKIP("no OpenCL device");
    CHECK(st == KILN_OK);
    kiln_dataset *ds = synthetic_images(ctx, SAMPLES, SIDE, 7, 4);
    test_two_models_one_context(ctx, ds);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_threads");
}
