/* A gradient that is not finite while the loss is: a NaN feature through a
 * ReLU (fmax(NaN, 0) is 0, so the loss stays finite but the weight
 * gradient x * dy is NaN). Every strategy must treat the step as one with a
 * non-finite loss: fit stops with KILN_ERROR_NUMERIC, or with
 * skip_nonfinite skips and counts it, and the weights never see it. */
#include "harness.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/model/optimizer.h"

#define COUNT 12
#define BATCH 4
#define POISONED 9   /* in step 3 of 3 */

/* Features in [0, 1), labels i % 3; sample POISONED gets a NaN feature
 * when `poison` (written past from_arrays, which refuses it). */
static kiln_dataset *data(kiln_context *ctx, int count, int poison)
{
    float x[COUNT * 6];
    int32_t y[COUNT];
    for (int i = 0; i < COUNT * 6; i++)
        x[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < COUNT; i++)
        y[i] = i % 3;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 1,
                                .feature_dims = {6}, .features = x, .sparse_labels = y,
                                .num_classes = 3};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    if (poison && ds)
        ds->features[POISONED * 6 + 4] = NAN;
    return ds;
}

static kiln_model *model(kiln_context *ctx, kiln_strategy strategy, const float *w, int64_t n)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6};
    const kiln_dense_options h = {.struct_size = sizeof h, .units = 5,
                                  .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options o = {.struct_size = sizeof o, .units = 3,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &h);
    kiln_dense(m, KILN_NODE_PREVIOUS, &o);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam,
                                         .kind = KILN_OPTIMIZER_ADAM};
    const kiln_compile_options co = {.struct_size = sizeof co, .strategy = strategy,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .pipeline_stages = 2, .micro_batches = 2,
                                     .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (w)
        CHECK_OK(ctx, kiln_model_set_weights(m, w, n));
    return m;
}

static void fit_options(kiln_fit_options *fo, int skip)
{
    *fo = (kiln_fit_options){.struct_size = sizeof *fo, .batch_size = BATCH, .no_shuffle = 1,
                             .verbosity = KILN_VERBOSE_SILENT, .skip_nonfinite = skip};
}

/* Weights bit for bit, all finite. */
static int same_finite(const float *a, const float *b, int64_t n)
{
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= isfinite(a[i]) && memcmp(&a[i], &b[i], sizeof a[i]) == 0;
    return ok;
}

/* All finite; bit for bit as `ref` when `exact` (the synchronous
 * strategies: the bad step never happened). */
static int unharmed(const float *w, const float *ref, int64_t n, int exact)
{
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= isfinite(w[i]) != 0;
    return ok && (!exact || same_finite(w, ref, n));
}

/* exact: a synchronous strategy, whose weights after the bad step are
 * those before it; the parameter server's workers race, so its weights are
 * only checked finite, and which report carries the NaN may vary. */
static void test_strategy(kiln_strategy strategy, const char *name, int exact)
{
    kiln_context *ctx = test_context(5);
    kiln_dataset *clean = data(ctx, 2 * BATCH, 0), *poisoned = data(ctx, COUNT, 1);
    kiln_model *m = model(ctx, strategy, NULL, 0);
    int64_t n = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &n));
    float *w0 = calloc((size_t)n, sizeof(float)), *w2 = calloc((size_t)n, sizeof(float));
    float *w = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w0, n));
    kiln_fit_options fo;

    /* The reference: the two clean steps that come before the poisoned one. */
    fit_options(&fo, 0);
    CHECK_OK(ctx, kiln_model_fit(m, clean, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w2, n));
    kiln_model_destroy(m);

    m = model(ctx, strategy, w0, n);
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, exact ? "gradient is NaN at epoch 1, step 3"
                                               : "gradient is NaN at epoch 1",
                kiln_model_fit(m, poisoned, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    CHECK(unharmed(w, w2, n, exact));
    kiln_model_destroy(m);

    m = model(ctx, strategy, w0, n);
    fit_options(&fo, 1);
    CHECK_OK(ctx, kiln_model_fit(m, poisoned, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &r));
    CHECK(exact ? r.skipped_steps == 1 && r.samples == 2 * BATCH : r.skipped_steps >= 1);
    CHECK(isfinite(r.loss));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    CHECK(unharmed(w, w2, n, exact));
    kiln_model_destroy(m);
    printf("NaN gradient, finite loss under %s: stopped, then skipped\n", name);

    free(w0);
    free(w2);
    free(w);
    kiln_dataset_destroy(clean);
    kiln_dataset_destroy(poisoned);
    kiln_context_destroy(ctx);
}

/* The device check alone: guard[0] becomes NaN for one NaN or Inf among n
 * gradients, wherever it is (past the first stride of the bounded grid
 * included), and nothing changes for finite ones. */
static void test_check_kernel(kiln_context *ctx)
{
    enum { n = 20011 };
    kiln_device *dev = ctx->devices[0];
    float *g = calloc(n, sizeof(float));
    for (int i = 0; i < n; i++)
        g[i] = (float)(i % 17) - 8.0f;
    kiln_buffer *grads = NULL, *guard = NULL;
    CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "grads", &grads));
    CHECK_OK(ctx, kiln_buffer_create(dev, 2 * sizeof(float), "guard", &guard));
    const struct { int at; float value; int len; } cases[] = {
        {.at = -1, .len = n}, {.at = n - 1, .value = NAN, .len = n},
        {.at = 3, .value = INFINITY, .len = n}, {.at = 16400, .value = -INFINITY, .len = n},
        {.at = 4, .value = NAN, .len = 5}, {.at = 9, .value = NAN, .len = 9},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const float before[2] = {1.5f, 2.5f};
        float after[2];
        if (cases[c].at >= 0)
            g[cases[c].at] = cases[c].value;
        CHECK_OK(ctx, kiln_buffer_write(dev, grads, 0, g, n * sizeof(float), 1));
        CHECK_OK(ctx, kiln_buffer_write(dev, guard, 0, before, sizeof before, 1));
        CHECK_OK(ctx, kiln_optimizer_check_finite(dev, grads, (size_t)cases[c].len, guard));
        CHECK_OK(ctx, kiln_buffer_read(dev, guard, 0, after, sizeof after));
        /* The last case's NaN lies just past the checked range. */
        const int bad = cases[c].at >= 0 && cases[c].at < cases[c].len;
        CHECK(bad ? isnan(after[0]) : after[0] == before[0]);
        CHECK(after[1] == before[1]);
        if (cases[c].at >= 0)
            g[cases[c].at] = 0.0f;
    }
    kiln_buffer_destroy(grads);
    kiln_buffer_destroy(guard);
    free(g);
}

int main(void)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    int32_t devices = 0;
    kiln_context_device_count(ctx, &devices);
    test_check_kernel(ctx);
    kiln_context_destroy(ctx);
    test_strategy(KILN_STRATEGY_ONE_DEVICE, "one_device", 1);
    test_strategy(KILN_STRATEGY_PARAMETER_SERVER, "parameter_server", 0);
    if (devices >= 2) {
        test_strategy(KILN_STRATEGY_MIRRORED, "mirrored", 1);
        test_strategy(KILN_STRATEGY_CENTRAL_STORAGE, "central_storage", 1);
        test_strategy(KILN_STRATEGY_PIPELINE, "pipeline", 1);
    } else {
        printf("one device: mirrored, central_storage and pipeline not run\n");
    }
    return test_finish("test_nonfinite");
}
