/* A gradient that is not finite while the loss is: a NaN feature through a
 * ReLU (fmax(NaN, 0) is 0, so the loss stays finite but the weight
 * gradient x * dy is NaN). Every strategy must treat the step as one with a
 * non-finite loss: fit stops with KILN_ERROR_NUMERIC, or with
 * skip_nonfinite skips and counts it, and the weights never see it; so
 * again with global_clipnorm, whose NaN norm must not scale it into an
 * update. */
#include "harness.h"
#include "huge_steps.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/strategy.h"

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

/* global_clipnorm of the models, when the strategies run again with it: a
 * NaN gradient's norm is NaN, which must still skip the step. */
static float clip;

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
                                         .kind = KILN_OPTIMIZER_ADAM, .global_clipnorm = clip};
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


static int count_nonfinite(const float *w, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !isfinite(w[i]);
    return bad;
}

/* The data of test/common/huge_steps.h: before the update was checked, step
 * 3 left an infinite moment and step 4 turned the weights to NaN under
 * KILN_OK. exact as in test_strategy. Reference: steps 1-2, then step 4 alone (the
 * optimizer's step count resumes where it stood, as after a skipped step). */
static void test_huge_features(kiln_strategy strategy, const char *name, int exact)
{
    kiln_context *ctx = test_context(5);
    kiln_dataset *first = huge_data(ctx, 0, 2), *last = huge_data(ctx, HUGE_STEPS - 1, 1);
    kiln_dataset *all = huge_data(ctx, 0, HUGE_STEPS);
    kiln_model *m = model(ctx, strategy, NULL, 0);
    int64_t n = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &n));
    float *w0 = calloc((size_t)n, sizeof(float)), *w2 = calloc((size_t)n, sizeof(float));
    float *w4 = calloc((size_t)n, sizeof(float)), *w = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w0, n));
    kiln_fit_options fo;
    fit_options(&fo, 0);
    CHECK_OK(ctx, kiln_model_fit(m, first, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w2, n));
    CHECK_OK(ctx, kiln_model_fit(m, last, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w4, n));
    kiln_model_destroy(m);

    /* Stops at step 3 and says the update, not the loss, went non-finite. */
    m = model(ctx, strategy, w0, n);
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, exact ? "update is not finite at epoch 1, step 3"
                                               : "update is not finite at epoch 1",
                kiln_model_fit(m, all, &fo));
    if (exact)
        CHECK(strstr(kiln_context_last_error(ctx), "loss and gradients were finite") != NULL);
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    const int stopped_bad = count_nonfinite(w, n);
    CHECK(unharmed(w, w2, n, exact));
    kiln_model_destroy(m);

    /* Skipped: the weights and the optimizer's state are those before step 3,
     * so step 4 ends where the reference does. */
    m = model(ctx, strategy, w0, n);
    fit_options(&fo, 1);
    CHECK_OK(ctx, kiln_model_fit(m, all, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &r));
    CHECK(exact ? r.skipped_steps == 1 && r.samples == 3 * BATCH : r.skipped_steps >= 1);
    CHECK(isfinite(r.loss));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    const int skipped_bad = count_nonfinite(w, n);
    CHECK(unharmed(w, w4, n, exact));
    kiln_model_destroy(m);
    printf("features of 1e38 under %s: %d and %d of %lld weights not finite after fit "
           "(stopped, skipped)\n", name, stopped_bad, skipped_bad, (long long)n);

    free(w0);
    free(w2);
    free(w4);
    free(w);
    kiln_dataset_destroy(first);
    kiln_dataset_destroy(last);
    kiln_dataset_destroy(all);
    kiln_context_destroy(ctx);
}

/* The device check alone: for Adam, SGD with momentum, and AdamW,
 * RMSprop (centered, with momentum: three slots) and Adagrad with weight
 * decay over n parameters, guard[KILN_SUM_LOSS] becomes NaN for one NaN or Inf gradient
 * and guard[KILN_SUM_UPDATE] for one update that would not be finite (a
 * gradient of 1e30, whose square overflows Adam's second moment; SGD's
 * step past FLT_MAX), wherever it is (past the first stride of the bounded
 * grid included); nothing changes for finite ones, nor past the checked
 * range. Then kiln_optimizer_apply with the guard leaves the parameters
 * and state of a bad update as they were. */
static void test_check_kernel(kiln_context *ctx)
{
    enum { n = 20011, slots_n = 3 };
    kiln_device *dev = ctx->devices[0];
    float *p = calloc(n, sizeof(float)), *g = calloc(n, sizeof(float));
    float *s0 = calloc(n, sizeof(float)), *s1 = calloc(n, sizeof(float));
    float *s2 = calloc(n, sizeof(float));
    float *got = calloc(n, sizeof(float));
    kiln_buffer *params = NULL, *grads = NULL, *slots[slots_n] = {NULL}, *guard = NULL;
    CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "params", &params));
    CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "grads", &grads));
    for (int k = 0; k < slots_n; k++)
        CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "slot", &slots[k]));
    CHECK_OK(ctx, kiln_buffer_create(dev, KILN_N_SUMS * sizeof(float), "guard", &guard));
    /* .adam: 1 Adam, 0 SGD; .kind, when set, another kind (with decay). */
    const struct {
        int adam; kiln_optimizer_kind kind; int at; float value; float param; int len;
        int grad, update;
    } cases[] = {
        {.adam = 1, .at = -1, .len = n},
        {.adam = 1, .at = n - 1, .value = NAN, .len = n, .grad = 1, .update = 1},
        {.adam = 1, .at = 3, .value = INFINITY, .len = n, .grad = 1, .update = 1},
        {.adam = 1, .at = 16400, .value = -INFINITY, .len = n, .grad = 1, .update = 1},
        {.adam = 1, .at = 4, .value = NAN, .len = 5, .grad = 1, .update = 1},
        {.adam = 1, .at = 9, .value = NAN, .len = 9},
        {.adam = 1, .at = 16400, .value = 1e30f, .len = n, .update = 1},
        {.adam = 1, .at = n - 1, .value = -1e30f, .len = n, .update = 1},
        {.adam = 1, .at = 7, .value = 1e30f, .len = 7},
        {.adam = 0, .at = -1, .len = n},
        {.adam = 0, .at = 12000, .value = NAN, .len = n, .grad = 1, .update = 1},
        {.adam = 0, .at = 17, .value = -3e38f, .param = 3e38f, .len = n, .update = 1},
        {.kind = KILN_OPTIMIZER_ADAMW, .at = -1, .len = n},
        {.kind = KILN_OPTIMIZER_ADAMW, .at = 16400, .value = 1e30f, .len = n, .update = 1},
        {.kind = KILN_OPTIMIZER_RMSPROP, .at = -1, .len = n},
        {.kind = KILN_OPTIMIZER_RMSPROP, .at = 12000, .value = NAN, .len = n, .grad = 1,
         .update = 1},
        {.kind = KILN_OPTIMIZER_RMSPROP, .at = n - 1, .value = 1e30f, .len = n, .update = 1},
        {.kind = KILN_OPTIMIZER_RMSPROP, .at = 7, .value = 1e30f, .len = 7},
        {.kind = KILN_OPTIMIZER_ADAGRAD, .at = -1, .len = n},
        {.kind = KILN_OPTIMIZER_ADAGRAD, .at = 3, .value = -INFINITY, .len = n, .grad = 1,
         .update = 1},
        {.kind = KILN_OPTIMIZER_ADAGRAD, .at = 16400, .value = -1e30f, .len = n, .update = 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        static const kiln_lr_schedule constant = {.struct_size = sizeof constant};
        const int other = cases[c].kind != KILN_OPTIMIZER_ADAM;
        kiln_optimizer_options o = {.kind = other ? cases[c].kind
                                            : cases[c].adam ? KILN_OPTIMIZER_ADAM
                                                            : KILN_OPTIMIZER_SGD,
                                    .momentum = 0.5f, .learning_rate = 1.0f,
                                    .schedule = &constant, .centered = 1,
                                    .weight_decay = other ? 0.1f : 0.0f};
        CHECK_OK(ctx, kiln_optimizer_resolve(ctx, &o));
        for (int i = 0; i < n; i++) {
            p[i] = (float)(i % 13) / 13.0f - 0.5f;
            g[i] = (float)(i % 17) - 8.0f;
            s0[i] = (float)(i % 5) * 0.1f;
            s1[i] = (float)(i % 3) * 0.2f;
            s2[i] = 0.0f;   /* RMSprop's mean gradient: v - a^2 stays >= 0 */
        }
        if (cases[c].at >= 0) {
            g[cases[c].at] = cases[c].value;
            if (cases[c].param != 0.0f)
                p[cases[c].at] = cases[c].param;
        }
        float before[KILN_N_SUMS], after[KILN_N_SUMS];
        for (int k = 0; k < KILN_N_SUMS; k++)
            before[k] = k == 0 ? 1.5f : 2.5f;
        CHECK_OK(ctx, kiln_buffer_write(dev, params, 0, p, n * sizeof(float), 1));
        CHECK_OK(ctx, kiln_buffer_write(dev, grads, 0, g, n * sizeof(float), 1));
        CHECK_OK(ctx, kiln_buffer_write(dev, slots[0], 0, s0, n * sizeof(float), 1));
        CHECK_OK(ctx, kiln_buffer_write(dev, slots[1], 0, s1, n * sizeof(float), 1));
        CHECK_OK(ctx, kiln_buffer_write(dev, slots[2], 0, s2, n * sizeof(float), 1));
        CHECK_OK(ctx, kiln_buffer_write(dev, guard, 0, before, sizeof before, 1));
        CHECK_OK(ctx, kiln_optimizer_check_update(dev, &o, o.learning_rate, params, grads,
                                                  slots, (size_t)cases[c].len, 1, guard,
                                                  KILN_SUM_LOSS, NULL, 0));
        CHECK_OK(ctx, kiln_buffer_read(dev, guard, 0, after, sizeof after));
        CHECK(cases[c].grad ? isnan(after[KILN_SUM_LOSS]) : after[KILN_SUM_LOSS] == 1.5f);
        CHECK(cases[c].update ? isnan(after[KILN_SUM_UPDATE]) : after[KILN_SUM_UPDATE] == 0.0f);
        CHECK(after[1] == before[1]);
        /* Through the optimizer: a bad update changes nothing, a good one does. */
        CHECK_OK(ctx, kiln_buffer_write(dev, guard, 0, before, sizeof before, 1));
        CHECK_OK(ctx, kiln_optimizer_apply(dev, &o, o.learning_rate, params, grads, slots,
                                           (size_t)cases[c].len, 1, guard, 1, NULL, 0));
        CHECK_OK(ctx, kiln_buffer_read(dev, params, 0, got, n * sizeof(float)));
        const int held = cases[c].grad || cases[c].update;
        CHECK((memcmp(got, p, n * sizeof(float)) == 0) == held);
        CHECK_OK(ctx, kiln_buffer_read(dev, slots[0], 0, got, n * sizeof(float)));
        CHECK((memcmp(got, s0, n * sizeof(float)) == 0) == held);
        if (cases[c].adam || o.kind == KILN_OPTIMIZER_ADAMW ||
            o.kind == KILN_OPTIMIZER_RMSPROP) {
            CHECK_OK(ctx, kiln_buffer_read(dev, slots[1], 0, got, n * sizeof(float)));
            CHECK((memcmp(got, s1, n * sizeof(float)) == 0) == held);
        }
        if (o.kind == KILN_OPTIMIZER_RMSPROP) {
            CHECK_OK(ctx, kiln_buffer_read(dev, slots[2], 0, got, n * sizeof(float)));
            CHECK((memcmp(got, s2, n * sizeof(float)) == 0) == held);
        }
    }
    kiln_buffer_destroy(params);
    kiln_buffer_destroy(grads);
    for (int k = 0; k < slots_n; k++)
        kiln_buffer_destroy(slots[k]);
    kiln_buffer_destroy(guard);
    free(p);
    free(g);
    free(s0);
    free(s1);
    free(s2);
    free(got);
}

int main(void)
{
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    test_check_kernel(ctx);
    kiln_context_destroy(ctx);
    test_strategy(KILN_STRATEGY_ONE_DEVICE, "one_device", 1);
    test_strategy(KILN_STRATEGY_PARAMETER_SERVER, "parameter_server", 0);
    test_huge_features(KILN_STRATEGY_ONE_DEVICE, "one_device", 1);
    test_huge_features(KILN_STRATEGY_PARAMETER_SERVER, "parameter_server", 0);
    const int two = test_has_devices(devices, 2, "mirrored, central_storage and pipeline");
    if (two) {
        test_strategy(KILN_STRATEGY_MIRRORED, "mirrored", 1);
        test_strategy(KILN_STRATEGY_CENTRAL_STORAGE, "central_storage", 1);
        test_strategy(KILN_STRATEGY_PIPELINE, "pipeline", 1);
        test_huge_features(KILN_STRATEGY_MIRRORED, "mirrored", 1);
        test_huge_features(KILN_STRATEGY_CENTRAL_STORAGE, "central_storage", 1);
        test_huge_features(KILN_STRATEGY_PIPELINE, "pipeline", 1);
    }
    clip = 0.5f;
    printf("again with global_clipnorm %g:\n", clip);
    test_strategy(KILN_STRATEGY_ONE_DEVICE, "one_device", 1);
    test_strategy(KILN_STRATEGY_PARAMETER_SERVER, "parameter_server", 0);
    if (two) {
        test_strategy(KILN_STRATEGY_MIRRORED, "mirrored", 1);
        test_strategy(KILN_STRATEGY_CENTRAL_STORAGE, "central_storage", 1);
        test_strategy(KILN_STRATEGY_PIPELINE, "pipeline", 1);
    }
    return test_finish("test_nonfinite");
}
