/* Learning-rate schedules: the rate at every step against float64 formulas
 * written from Keras's source (CosineDecay with its warm-up,
 * ExponentialDecay, PiecewiseConstantDecay); 20 training steps under each
 * schedule equal, bit for bit, to the same steps with each step's rate set
 * by hand (a LearningRateScheduler, one step an epoch); a checkpoint of a
 * scheduled model resumed through kiln_model_load and
 * kiln_model_load_checkpoint equal to training straight through; and the
 * bad options refused. */
#include "harness.h"

#include <unistd.h>

#define DIM 4
#define CLASSES 3
#define BATCH 6
#define STEPS 20

static const double pi = 3.14159265358979323846;

/* Keras 3 CosineDecay.__call__: without a warm-up target, cosine from
 * initial over decay_steps (step clipped); with one, a linear rise from
 * initial to target over warmup steps, then cosine from target on
 * (step - warmup), the step clipped to decay_steps + warmup. */
static double keras_cosine(double step, double initial, double decay_steps, double alpha,
                           int has_target, double target, double warmup)
{
    if (!has_target) {
        step = fmin(step, decay_steps);
        return initial * ((1.0 - alpha) * 0.5 * (1.0 + cos(pi * step / decay_steps)) + alpha);
    }
    step = fmin(step, decay_steps + warmup);
    if (step < warmup)
        return (target - initial) * (step / warmup) + initial;
    const double done = (step - warmup) / decay_steps;
    return target * ((1.0 - alpha) * 0.5 * (1.0 + cos(pi * done)) + alpha);
}

/* Keras 3 PiecewiseConstantDecay.__call__: the sum of each range's value
 * times whether the step is in it, step <= b[0], b[i-1] < step <= b[i],
 * step > b[n-1]. */
static double keras_piecewise(int64_t step, const int64_t *b, const float *v, int n)
{
    double r = (step <= b[0]) * (double)v[0] + (step > b[n - 1]) * (double)v[n];
    for (int i = 0; i + 1 < n; i++)
        r += (step > b[i] && step <= b[i + 1]) * (double)v[i + 1];
    return r;
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fabs(b) + 1e-300;
}

static const int64_t bounds[] = {4, 9, 15};
static const float rates[] = {0.2f, 0.1f, 0.05f, 0.02f};

static void rates_at_every_step(kiln_context *ctx)
{
    kiln_lr_schedule s = {.struct_size = sizeof s, .kind = KILN_LR_COSINE_DECAY,
                          .decay_steps = 30, .alpha = 0.1f, .warmup_steps = 10,
                          .has_warmup_target = 1, .warmup_target = 0.3f};
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .learning_rate = 0.01f, .schedule = &s};
    int bad = 0;
    /* Keras CosineDecay(0.01, 30, alpha=0.1, warmup_target=0.3, warmup_steps=10). */
    for (int64_t t = 0; t <= 60; t++) {
        bad += !close_to(test_learning_rate(ctx, &o, t),
                         keras_cosine((double)t, 0.01f, 30, 0.1f, 1, 0.3f, 10));
    }
    /* kiln's warm-up without a target: Keras with initial 0 and the target
     * learning_rate. */
    s.has_warmup_target = 0;
    s.warmup_target = 0.0f;
    for (int64_t t = 0; t <= 60; t++)
        bad += !close_to(test_learning_rate(ctx, &o, t),
                         keras_cosine((double)t, 0.0, 30, 0.1f, 1, 0.01f, 10));
    /* No warm-up: Keras without warmup_target. */
    s.warmup_steps = 0;
    for (int64_t t = 0; t <= 60; t++)
        bad += !close_to(test_learning_rate(ctx, &o, t),
                         keras_cosine((double)t, 0.01f, 30, 0.1f, 0, 0.0, 0));
    /* Keras's warm-up in front of ExponentialDecay(target, 7, 0.5) on
     * (step - warmup): kiln's composition, the same warm-up rule. */
    s = (kiln_lr_schedule){.struct_size = sizeof s, .kind = KILN_LR_EXPONENTIAL_DECAY,
                           .decay_steps = 7, .decay_rate = 0.5f, .warmup_steps = 5,
                           .has_warmup_target = 1, .warmup_target = 0.1f};
    for (int64_t t = 0; t <= 40; t++) {
        const double want = t < 5 ? ((double)0.1f - (double)0.01f) * (t / 5.0) + (double)0.01f
                                  : 0.1f * pow(0.5f, (double)(t - 5) / 7.0);
        bad += !close_to(test_learning_rate(ctx, &o, t), want);
    }
    /* PiecewiseConstantDecay([4, 9, 15], [0.2, 0.1, 0.05, 0.02]): at a
     * boundary step the earlier value holds. */
    s = (kiln_lr_schedule){.struct_size = sizeof s, .kind = KILN_LR_PIECEWISE_CONSTANT_DECAY,
                           .n_boundaries = 3, .boundaries = bounds, .n_values = 4,
                           .values = rates};
    kiln_optimizer_options p = o;
    p.learning_rate = 0.0f;
    for (int64_t t = 0; t <= 30; t++)
        bad += !close_to(test_learning_rate(ctx, &p, t), keras_piecewise(t, bounds, rates, 3));
    CHECK(test_learning_rate(ctx, &p, 4) == (double)0.2f &&
          test_learning_rate(ctx, &p, 5) == (double)0.1f &&
          test_learning_rate(ctx, &p, 15) == (double)0.05f &&
          test_learning_rate(ctx, &p, 16) == (double)0.02f);
    /* learning_rate equal to values[0] is accepted too. */
    p.learning_rate = 0.2f;
    CHECK(test_learning_rate(ctx, &p, 0) == (double)0.2f);
    /* A warm-up in front: from 0 to values[0], boundaries counted after it. */
    s.warmup_steps = 3;
    for (int64_t t = 0; t <= 30; t++)
        bad += !close_to(test_learning_rate(ctx, &p, t),
                         t < 3 ? 0.2f * (double)t / 3.0 : keras_piecewise(t - 3, bounds, rates, 3));
    CHECK(bad == 0);
    printf("rates: %d of 304 steps differ from Keras's formulas\n", bad);
}

/* A bad option: compile and kiln_learning_rate_at refuse it, naming it. */
static void refused(kiln_context *ctx, const kiln_lr_schedule *s, float lr, const char *needle)
{
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .learning_rate = lr, .schedule = s};
    double rate = 1.0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, needle, kiln_learning_rate_at(ctx, &o, 3, &rate));
    CHECK(rate == 0.0);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {DIM};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &(kiln_dense_options){.struct_size =
                                                                sizeof(kiln_dense_options),
                                                            .units = CLASSES});
    const kiln_compile_options co = {.struct_size = sizeof co, .optimizer = &o,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, needle, kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

static void bad_options(kiln_context *ctx)
{
    const int64_t down[] = {4, 4, 15}, negative[] = {-1, 9, 15};
    const float nan_value[] = {0.2f, NAN, 0.05f, 0.02f}, zero_value[] = {0.2f, 0.1f, 0.0f, 0.02f};
    const kiln_lr_schedule piecewise = {.struct_size = sizeof piecewise,
                                        .kind = KILN_LR_PIECEWISE_CONSTANT_DECAY,
                                        .n_boundaries = 3, .boundaries = bounds, .n_values = 4,
                                        .values = rates};
    kiln_lr_schedule s = piecewise;
    s.warmup_steps = -2;
    refused(ctx, &s, 0.0f, "warmup_steps -2 must be >= 0");
    s = piecewise;
    s.boundaries = down;
    refused(ctx, &s, 0.0f, "boundaries[1] is 4; boundaries must be steps >= 0 in strictly "
            "increasing order");
    s.boundaries = negative;
    refused(ctx, &s, 0.0f, "boundaries[0] is -1");
    s = piecewise;
    s.n_values = 3;
    refused(ctx, &s, 0.0f, "n_values 3 must be n_boundaries + 1 (4)");
    s = piecewise;
    s.values = nan_value;
    refused(ctx, &s, 0.0f, "values[1] is nan");
    s.values = zero_value;
    refused(ctx, &s, 0.0f, "values[2] is 0");
    s = piecewise;
    s.values = NULL;
    refused(ctx, &s, 0.0f, "values NULL");
    s = piecewise;
    s.n_boundaries = 0;
    s.n_values = 1;
    refused(ctx, &s, 0.0f, "n_boundaries 0 must be 1 to 64");
    refused(ctx, &piecewise, 0.5f, "learning_rate 0.5 differs from values[0] 0.2");
    s = piecewise;
    s.has_warmup_target = 1;
    s.warmup_target = 0.1f;
    refused(ctx, &s, 0.0f, "piecewise constant schedule takes no warmup_target");
    s = (kiln_lr_schedule){.struct_size = sizeof s, .kind = KILN_LR_COSINE_DECAY,
                           .decay_steps = 10, .warmup_steps = 3, .has_warmup_target = 1,
                           .warmup_target = INFINITY};
    refused(ctx, &s, 0.1f, "warmup_target inf must be a finite number > 0");
    s.warmup_target = -0.5f;
    refused(ctx, &s, 0.1f, "warmup_target -0.5");
    s.has_warmup_target = 0;   /* a target without has_warmup_target */
    s.warmup_target = 0.5f;
    refused(ctx, &s, 0.1f, "warmup_target 0.5 must be a finite number > 0 with "
            "has_warmup_target, else 0");
    s.warmup_target = 0.0f;
    s.n_boundaries = 3;
    s.boundaries = bounds;
    refused(ctx, &s, 0.1f, "are for a piecewise constant schedule only");
}

static kiln_dataset *data(kiln_context *ctx)
{
    float x[BATCH * DIM];
    int32_t y[BATCH];
    uint64_t r = 11;
    for (int i = 0; i < BATCH * DIM; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)(r >> 40) / 8388608.0f - 1.0f;
    }
    for (int i = 0; i < BATCH; i++)
        y[i] = i % CLASSES;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = BATCH, .feature_rank = 1,
                                .feature_dims = {DIM}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

static kiln_model *model(kiln_context *ctx, float lr, const kiln_lr_schedule *s)
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
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = lr, .momentum = 0.9f, .schedule = s};
    const kiln_compile_options co = {.struct_size = sizeof co, .optimizer = &sgd,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static void fit(kiln_context *ctx, kiln_model *m, const kiln_dataset *ds, int epochs,
                const kiln_callback_spec *cb)
{
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = epochs, .batch_size = BATCH,
                                 .no_shuffle = 1, .verbosity = KILN_VERBOSE_SILENT,
                                 .callbacks = cb, .n_callbacks = cb ? 1 : 0};
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
}

static float *weights(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

/* The rate of step `epoch` (one step an epoch) under the options in user. */
typedef struct by_hand {
    kiln_context *ctx;
    const kiln_optimizer_options *o;
} by_hand;

static double rate_by_hand(void *user, int32_t epoch, double lr)
{
    (void)lr;
    const by_hand *h = user;
    return test_learning_rate(h->ctx, h->o, epoch);
}

static void training_equals_rates_by_hand(kiln_context *ctx, const kiln_dataset *ds,
                                          const char *name, float lr, const kiln_lr_schedule *s)
{
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .learning_rate = lr, .schedule = s};
    by_hand h = {.ctx = ctx, .o = &o};
    const kiln_callback_spec cb = {.kind = KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
                                   .schedule = rate_by_hand, .user = &h};
    kiln_model *a = model(ctx, lr, s), *b = model(ctx, lr ? lr : 0.5f, NULL);
    fit(ctx, a, ds, STEPS, NULL);
    fit(ctx, b, ds, STEPS, &cb);
    int64_t n = 0;
    float *wa = weights(ctx, a, &n), *wb = weights(ctx, b, &n);
    CHECK(memcmp(wa, wb, (size_t)n * sizeof *wa) == 0);
    int rates_differ = 0;
    for (int32_t e = 0; e < STEPS; e++) {
        kiln_epoch_record ra = {.struct_size = sizeof ra}, rb = {.struct_size = sizeof rb};
        CHECK_OK(ctx, kiln_model_history_epoch(a, e, &ra));
        CHECK_OK(ctx, kiln_model_history_epoch(b, e, &rb));
        /* The rate set by hand is a float32, as the kernels take it. */
        rates_differ += (float)ra.learning_rate != (float)rb.learning_rate;
    }
    CHECK(rates_differ == 0);
    printf("%s: %d steps, weights %s the rates set by hand's\n", name, STEPS,
           memcmp(wa, wb, (size_t)n * sizeof *wa) == 0 ? "equal" : "DIFFER from");
    free(wa);
    free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

/* 8 steps, a checkpoint, a model loaded from it (its schedule from the
 * file) and 12 more = 20 straight. */
static void checkpoint_resumes(kiln_context *ctx, const kiln_dataset *ds, const char *name,
                               float lr, const kiln_lr_schedule *s)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-schedules-%d.safetensors", (int)getpid());
    kiln_model *a = model(ctx, lr, s), *b = model(ctx, lr, s), *c = NULL;
    fit(ctx, a, ds, STEPS, NULL);
    fit(ctx, b, ds, 8, NULL);
    CHECK_OK(ctx, kiln_model_save_checkpoint(b, path));
    /* As the straight run: one device, whatever the machine has. */
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, path, &one, &c));
    if (c) {
        CHECK_OK(ctx, kiln_model_load_checkpoint(c, path));
        fit(ctx, c, ds, STEPS - 8, NULL);
        int64_t n = 0;
        float *wa = weights(ctx, a, &n), *wc = weights(ctx, c, &n);
        CHECK(memcmp(wa, wc, (size_t)n * sizeof *wa) == 0);
        printf("%s: resumed at step 8 from a checkpoint, weights %s\n", name,
               memcmp(wa, wc, (size_t)n * sizeof *wa) == 0 ? "equal" : "DIFFER");
        free(wa);
        free(wc);
    }
    unlink(path);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    kiln_model_destroy(c);
}

/* ReduceLROnPlateau sets the rate: refused with a schedule, as Keras
 * refuses to set a scheduled rate (as before for the other kinds). */
static void plateau_refused(kiln_context *ctx, const kiln_dataset *ds,
                            const kiln_lr_schedule *s)
{
    kiln_model *m = model(ctx, 0.0f, s);
    const kiln_callback_spec cb = {.kind = KILN_CALLBACK_REDUCE_LR_ON_PLATEAU,
                                   .monitor = "loss"};
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2, .batch_size = BATCH,
                                 .verbosity = KILN_VERBOSE_SILENT, .callbacks = &cb,
                                 .n_callbacks = 1};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "follows the schedule given at compile",
                kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = NULL;
    const kiln_context_options co = {.struct_size = sizeof co, .seed = 5};
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    rates_at_every_step(ctx);
    bad_options(ctx);
    kiln_dataset *ds = data(ctx);
    const kiln_lr_schedule cosine = {.struct_size = sizeof cosine, .kind = KILN_LR_COSINE_DECAY,
                                     .decay_steps = 12, .alpha = 0.1f, .warmup_steps = 5,
                                     .has_warmup_target = 1, .warmup_target = 0.4f};
    const kiln_lr_schedule exponential = {.struct_size = sizeof exponential,
                                          .kind = KILN_LR_EXPONENTIAL_DECAY, .decay_steps = 6,
                                          .decay_rate = 0.5f, .warmup_steps = 4};
    const kiln_lr_schedule piecewise = {.struct_size = sizeof piecewise,
                                        .kind = KILN_LR_PIECEWISE_CONSTANT_DECAY,
                                        .n_boundaries = 3, .boundaries = bounds, .n_values = 4,
                                        .values = rates};
    training_equals_rates_by_hand(ctx, ds, "cosine decay with Keras's warm-up", 0.05f, &cosine);
    training_equals_rates_by_hand(ctx, ds, "exponential decay after a warm-up", 0.3f,
                                  &exponential);
    training_equals_rates_by_hand(ctx, ds, "piecewise constant decay", 0.0f, &piecewise);
    checkpoint_resumes(ctx, ds, "cosine decay with Keras's warm-up", 0.05f, &cosine);
    checkpoint_resumes(ctx, ds, "piecewise constant decay", 0.0f, &piecewise);
    plateau_refused(ctx, ds, &piecewise);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    printf("%s\n", test_failures ? "FAILED" : "OK");
    return test_failures ? 1 : 0;
}
