/* The moving average of the weights (kiln_optimizer_options.use_ema): the
 * averages against a float64 host evaluation of Keras 3's rule over 20
 * updates (batch norm's moving statistics left out), ema_overwrite_frequency,
 * predict and evaluate using the averages without disturbing training,
 * save / load, save_weights and ONNX export carrying them, a checkpoint
 * resumed bit for bit, set_weights restarting them, and the bad settings
 * refused. */
#include "harness.h"
#include "kiln_config.h"
#include "runtime/model/ema.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/strategy.h"

#include <unistd.h>

#define STEPS 20
#define BATCH 8
#define IN 5
#define OUT 3
#define MOMENTUM 0.9f

static float xs[STEPS][BATCH * IN], ys[STEPS][BATCH * OUT];

static void make_data(void)
{
    uint32_t seed = 99;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH * IN; i++) {
            seed = seed * 1664525u + 1013904223u;
            xs[s][i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
        }
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH; i++)
            for (int j = 0; j < OUT; j++)
                ys[s][i * OUT + j] = sinf(3.0f * xs[s][i * IN + j]) + (float)j;
}

/* in -> Dense(8, tanh) -> BatchNorm -> Dense(3): BN's moving statistics are
 * parameters the optimizer does not update. */
static kiln_model *build(kiln_context *ctx, const kiln_optimizer_options *o, kiln_status *st)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    const kiln_dense_options d0 = {.struct_size = sizeof d0, .name = "d0", .units = 8,
                                   .activation = KILN_ACTIVATION_TANH};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d0);
    kiln_batch_normalization(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_dense_options d1 = {.struct_size = sizeof d1, .name = "d1", .units = OUT};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d1);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = o,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    *st = kiln_model_compile(m, &co);
    return m;
}

static kiln_optimizer_options ema_sgd(int32_t overwrite)
{
    return (kiln_optimizer_options){.struct_size = sizeof(kiln_optimizer_options),
                                    .kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.1f,
                                    .momentum = 0.5f, .use_ema = 1, .ema_momentum = MOMENTUM,
                                    .ema_overwrite_frequency = overwrite};
}

static void train(kiln_context *ctx, kiln_model *m, int step)
{
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[step],
                                 .dense_labels = ys[step]};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, NULL));
}

static void predict(kiln_context *ctx, kiln_model *m, float *out)
{
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[0]};
    CHECK_OK(ctx, kiln_model_predict(m, &b, out, 0));
}

static float *params(kiln_model *m)
{
    float *p = calloc(m->plan.n_param_floats, sizeof(float));
    CHECK(p && m->placement.strategy->get_params(m->placement.strategy_impl, p) == KILN_OK);
    return p;
}

static float *averages(kiln_model *m)
{
    float *p = calloc(m->plan.n_param_floats, sizeof(float));
    CHECK(p && kiln_ema_params(m, p) == KILN_OK);
    return p;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return a && b && memcmp(a, b, n * sizeof(float)) == 0;
}

/* The averages after each of 20 updates against float64 evaluation of
 * a_1 = w_1, a_t = m a_{t-1} + (1 - m) w_t over the weights read back. */
static void test_formula(kiln_context *ctx)
{
    const kiln_optimizer_options o = ema_sgd(0);
    kiln_status st;
    kiln_model *m = build(ctx, &o, &st);
    CHECK_OK(ctx, st);
    const size_t nt = m->plan.n_trainable_floats, np = m->plan.n_param_floats;
    CHECK(nt < np);   /* batch norm's statistics follow the trainable prefix */
    double *ref = calloc(nt, sizeof(double));
    double worst = 0.0;
    for (int s = 0; s < STEPS && ref; s++) {
        train(ctx, m, s);
        float *w = params(m), *a = averages(m);
        for (size_t i = 0; w && a && i < nt; i++) {
            ref[i] = s == 0 ? w[i] : (double)MOMENTUM * ref[i] + (1.0 - MOMENTUM) * w[i];
            const double d = fabs(a[i] - ref[i]) / (fabs(ref[i]) > 1e-3 ? fabs(ref[i]) : 1e-3);
            worst = d > worst ? d : worst;
        }
        /* Not averaged: the moving statistics are the model's own. */
        CHECK(w && a && memcmp(w + nt, a + nt, (np - nt) * sizeof(float)) == 0);
        if (s == 0)
            CHECK(same_bits(w, a, nt));   /* the first update copies */
        free(w);
        free(a);
    }
    printf("averages vs float64 formula, 20 updates: max relative difference %.2e\n", worst);
    CHECK(worst < 1e-5);
    /* The averages differ from the weights (momentum 0.9 lags). */
    float *w = params(m), *a = averages(m);
    CHECK(w && a && !same_bits(w, a, nt));
    free(w);
    free(a);
    free(ref);
    kiln_model_destroy(m);
}

/* ema_overwrite_frequency 5: after updates 5, 10, ... the weights are the
 * averages, bit for bit; in between they are not. */
static void test_overwrite(kiln_context *ctx)
{
    const kiln_optimizer_options o = ema_sgd(5);
    kiln_status st;
    kiln_model *m = build(ctx, &o, &st);
    CHECK_OK(ctx, st);
    const size_t nt = m->plan.n_trainable_floats;
    int ok = 1;
    for (int s = 0; s < STEPS; s++) {
        train(ctx, m, s);
        float *w = params(m), *a = averages(m);
        const int want = (s + 1) % 5 == 0 || s == 0;   /* update 1 copies too */
        ok &= same_bits(w, a, nt) == want;
        free(w);
        free(a);
    }
    printf("ema_overwrite_frequency 5: weights = averages after updates 1, 5, 10, 15, 20 "
           "only: %s\n", ok ? "yes" : "NO");
    CHECK(ok);
    kiln_model_destroy(m);
}

/* A model without EMA holding `flat`'s parameters (kiln_model_set_weights
 * order comes from the flat layout through the internal setter). */
static kiln_model *plain_with(kiln_context *ctx, const float *flat)
{
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD};
    kiln_status st;
    kiln_model *m = build(ctx, &o, &st);
    CHECK_OK(ctx, st);
    CHECK(m->placement.strategy->set_params(m->placement.strategy_impl, flat) == KILN_OK);
    return m;
}

static void test_inference(kiln_context *ctx, const char *dir)
{
    const kiln_optimizer_options o = ema_sgd(0);
    kiln_status st;
    kiln_model *m = build(ctx, &o, &st);
    CHECK_OK(ctx, st);
    const size_t np = m->plan.n_param_floats;
    float before_training[BATCH * OUT], y_w[BATCH * OUT], y_a[BATCH * OUT], y[BATCH * OUT];
    /* Before any update the weights serve (the averages hold nothing yet). */
    predict(ctx, m, before_training);
    float *w0 = params(m);
    kiln_model *p0 = plain_with(ctx, w0);
    predict(ctx, p0, y);
    CHECK(memcmp(y, before_training, sizeof y) == 0);
    kiln_model_destroy(p0);
    free(w0);
    for (int s = 0; s < STEPS; s++)
        train(ctx, m, s);
    float *w = params(m), *a = averages(m);
    float *slots_before = calloc(np * KILN_MAX_OPTIMIZER_SLOTS, sizeof(float));
    float *slot[KILN_MAX_OPTIMIZER_SLOTS];
    for (int i = 0; i < KILN_MAX_OPTIMIZER_SLOTS; i++)
        slot[i] = slots_before + (size_t)i * np;
    CHECK(m->placement.strategy->get_slots(m->placement.strategy_impl, slot) == KILN_OK);
    predict(ctx, m, y);
    kiln_model *pw = plain_with(ctx, w), *pa = plain_with(ctx, a);
    predict(ctx, pw, y_w);
    predict(ctx, pa, y_a);
    printf("predict uses the averages: %s (the weights' outputs differ: %s)\n",
           memcmp(y, y_a, sizeof y) == 0 ? "yes" : "NO", memcmp(y, y_w, sizeof y) ? "yes" : "NO");
    CHECK(memcmp(y, y_a, sizeof y) == 0);
    CHECK(memcmp(y, y_w, sizeof y) != 0);
    /* evaluate too: the same loss as the averaged model's. */
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[0],
                                 .dense_labels = ys[0]};
    kiln_metrics got = {.struct_size = sizeof got}, want = {.struct_size = sizeof want};
    CHECK_OK(ctx, kiln_model_test_on_batch(m, &b, &got));
    CHECK_OK(ctx, kiln_model_test_on_batch(pa, &b, &want));
    CHECK(got.loss == want.loss);
    /* Nothing of training moved: weights and every slot bit for bit. */
    float *w_after = params(m);
    float *slots_after = calloc(np * KILN_MAX_OPTIMIZER_SLOTS, sizeof(float));
    for (int i = 0; i < KILN_MAX_OPTIMIZER_SLOTS; i++)
        slot[i] = slots_after + (size_t)i * np;
    CHECK(m->placement.strategy->get_slots(m->placement.strategy_impl, slot) == KILN_OK);
    CHECK(same_bits(w, w_after, np));
    CHECK(same_bits(slots_before, slots_after, np * KILN_MAX_OPTIMIZER_SLOTS));
    free(w_after);
    free(slots_before);
    free(slots_after);

    /* save -> load: the file's weights are the averages. */
    char path[600];
    snprintf(path, sizeof path, "%s/ema.kiln", dir);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *loaded = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
    if (loaded) {
        predict(ctx, loaded, y);
        CHECK(memcmp(y, y_a, sizeof y) == 0);
        CHECK(loaded->plan.optimizer.use_ema == 1 &&
              loaded->plan.optimizer.ema_momentum == MOMENTUM);
        printf("save -> load: predicts as the averages: %s\n",
               memcmp(y, y_a, sizeof y) == 0 ? "yes" : "NO");
        kiln_model_destroy(loaded);
    }
    /* save_weights -> load_weights into a model without EMA. */
    snprintf(path, sizeof path, "%s/ema.weights", dir);
    CHECK_OK(ctx, kiln_model_save_weights(m, path));
    kiln_model *pl = plain_with(ctx, w);
    CHECK_OK(ctx, kiln_model_load_weights(pl, path));
    predict(ctx, pl, y);
    CHECK(memcmp(y, y_a, sizeof y) == 0);
    kiln_model_destroy(pl);
#if KILN_HAVE_ONNX
    snprintf(path, sizeof path, "%s/ema.onnx", dir);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    kiln_model *imported = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &imported));
    if (imported) {
        const kiln_compile_options co = {.struct_size = sizeof co,
                                         .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
        CHECK_OK(ctx, kiln_model_compile(imported, &co));
        predict(ctx, imported, y);
        double d = test_difference(y, y_a, sizeof(float), BATCH * OUT, TEST_PER_VALUE, NULL);
        printf("ONNX export -> import: predicts as the averages within %.2e\n", d);
        CHECK(d < 1e-5);
        kiln_model_destroy(imported);
    }
#endif
    /* set_weights restarts the averages from the weights it writes. */
    int64_t count = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &count));
    float *packed = calloc((size_t)count, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(pw, packed, count));
    CHECK_OK(ctx, kiln_model_set_weights(m, packed, count));
    predict(ctx, m, y);
    CHECK(memcmp(y, y_w, sizeof y) == 0);
    free(packed);
    kiln_model_destroy(pw);
    kiln_model_destroy(pa);
    kiln_model_destroy(m);
    free(w);
    free(a);
}

/* 10 updates, a checkpoint, 10 more, against a fresh model that loads the
 * checkpoint and takes the same 10: weights and averages bit for bit. */
static void test_resume(kiln_context *ctx, const char *dir)
{
    const kiln_optimizer_options o = ema_sgd(7);
    kiln_status st;
    char path[600];
    snprintf(path, sizeof path, "%s/ema.ckpt", dir);
    kiln_model *m = build(ctx, &o, &st);
    CHECK_OK(ctx, st);
    for (int s = 0; s < STEPS; s++) {
        if (s == STEPS / 2)
            CHECK_OK(ctx, kiln_model_save_checkpoint(m, path));
        train(ctx, m, s);
    }
    kiln_model *r = build(ctx, &o, &st);
    CHECK_OK(ctx, st);
    CHECK_OK(ctx, kiln_model_load_checkpoint(r, path));
    for (int s = STEPS / 2; s < STEPS; s++)
        train(ctx, r, s);
    const size_t np = m->plan.n_param_floats;
    float *w1 = params(m), *w2 = params(r), *a1 = averages(m), *a2 = averages(r);
    const int same = same_bits(w1, w2, np) && same_bits(a1, a2, np);
    printf("checkpoint at update 10, resumed to 20: weights and averages bit-identical: %s\n",
           same ? "yes" : "NO");
    CHECK(same);
    free(w1);
    free(w2);
    free(a1);
    free(a2);
    kiln_model_destroy(m);
    kiln_model_destroy(r);
}

static void test_refused(kiln_context *ctx)
{
    const float bad[] = {NAN, -0.1f, 1.0f, 1.5f, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_optimizer_options o = ema_sgd(0);
        o.ema_momentum = bad[i];
        kiln_status st;
        kiln_model *m = build(ctx, &o, &st);
        const char *msg = kiln_context_last_error(ctx);
        printf("ema_momentum %g: %s (%s)\n", bad[i], kiln_status_name(st), msg);
        CHECK(st == KILN_ERROR_INVALID_ARGUMENT && strstr(msg, "ema_momentum"));
        kiln_model_destroy(m);
    }
    kiln_optimizer_options o = ema_sgd(-1);
    kiln_status st;
    kiln_model *m = build(ctx, &o, &st);
    printf("ema_overwrite_frequency -1: %s (%s)\n", kiln_status_name(st),
           kiln_context_last_error(ctx));
    CHECK(st == KILN_ERROR_INVALID_ARGUMENT &&
          strstr(kiln_context_last_error(ctx), "ema_overwrite_frequency"));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(11);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    make_data();
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln-ema-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    test_formula(ctx);
    test_overwrite(ctx);
    test_inference(ctx, dir);
    test_resume(ctx, dir);
    test_refused(ctx);
    const char *files[] = {"ema.kiln", "ema.weights", "ema.onnx", "ema.ckpt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
    kiln_context_destroy(ctx);
    return test_finish("test_ema");
}
