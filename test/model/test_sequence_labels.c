/* Per-position sparse labels: a (T, classes) output trained with sparse
 * categorical cross-entropy against T ids per sample. The loss, accuracy,
 * top-k accuracy and gradient against a float64 host reference, with and
 * without an ignore class (and a batch where every position is ignored);
 * label sequences through every dataset path; one_device against mirrored
 * and the pipeline on two devices (meson runs this with POCL_DEVICES="basic
 * basic"; what needs two is skipped on one); the bad inputs; the compile
 * option through a model file. */
#include "harness.h"
#include "sequence_data.h"
#include "runtime/data/dataset.h"
#include "runtime/model/model.h"

#include <stdint.h>
#include <unistd.h>

static kiln_context *context(void)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 7};
    kiln_context *ctx = NULL;
    kiln_context_create(&o, &ctx);
    return ctx;
}

typedef struct setup {
    kiln_strategy strategy;
    int32_t replicas, stages, top_k, ignore, hidden;
    kiln_optimizer_kind optimizer;
} setup;

/* Input(T, F) -> [Dense(hidden, tanh) ->] Dense(C, softmax). */
static kiln_model *build(kiln_context *ctx, const setup *s)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, F};
    kiln_input(m, 2, dims, NULL);
    if (s->hidden) {
        const kiln_dense_options h = {.struct_size = sizeof h, .units = s->hidden,
                                      .activation = KILN_ACTIVATION_TANH};
        kiln_dense(m, KILN_NODE_PREVIOUS, &h);
    }
    const kiln_dense_options d = {.struct_size = sizeof d, .units = C,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    const kiln_optimizer_options optimizer = {
        .struct_size = sizeof optimizer, .kind = s->optimizer,
        .learning_rate = s->optimizer == KILN_OPTIMIZER_SGD ? 1.0f : 0.01f};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = s->strategy, .replicas = s->replicas,
                               .pipeline_stages = s->stages, .top_k = s->top_k,
                               .has_ignore_class = s->ignore, .ignore_class = IGNORE};
    co.optimizer = &optimizer;
    co.micro_batches = 3;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* The float64 reference of a one-Dense model (kernel w[F][C], bias w[F*C..]):
 * mean loss, accuracy and top-2 accuracy over the counted positions of n
 * samples, and the mean gradient of every weight. Returns the count. */
static double reference(const float *w, const float *x, const int32_t *y, int n, int ignore,
                        double *loss, double *acc, double *top2, double *grad)
{
    double counted = 0, l = 0, a = 0, t2 = 0;
    memset(grad, 0, (F * C + C) * sizeof *grad);
    for (int i = 0; i < n * T; i++) {
        if (ignore && y[i] == IGNORE)
            continue;
        double z[C], p[C], mx = -1e300, sum = 0;
        for (int c = 0; c < C; c++) {
            z[c] = w[F * C + c];
            for (int f = 0; f < F; f++)
                z[c] += (double)x[i * F + f] * w[f * C + c];
            mx = z[c] > mx ? z[c] : mx;
        }
        for (int c = 0; c < C; c++)
            sum += (p[c] = exp(z[c] - mx));
        int best = 0, above = 0;
        for (int c = 0; c < C; c++) {
            p[c] /= sum;
            best = z[c] > z[best] ? c : best;
            above += z[c] > z[y[i]];
        }
        counted++;
        l -= log(p[y[i]]);
        a += best == y[i];
        t2 += above < 2;
        for (int c = 0; c < C; c++) {
            const double d = p[c] - (c == y[i]);
            grad[F * C + c] += d;
            for (int f = 0; f < F; f++)
                grad[f * C + c] += d * x[i * F + f];
        }
    }
    const double k = counted > 0 ? counted : 1;
    *loss = l / k;
    *acc = a / k;
    *top2 = t2 / k;
    for (int j = 0; j < F * C + C; j++)
        grad[j] /= k;
    return counted;
}

/* One SGD step at learning rate 1 moves every weight by minus its gradient:
 * the gradient is old - new. */
static void check_step(kiln_context *ctx, int ignore, const int32_t *y, const char *what)
{
    const setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .top_k = 2, .ignore = ignore,
                     .optimizer = KILN_OPTIMIZER_SGD};
    kiln_model *m = build(ctx, &s);
    float before[F * C + C], after[F * C + C];
    double grad[F * C + C], loss, acc, top2;
    const int n = 6;
    CHECK_OK(ctx, kiln_model_get_weights(m, before, F * C + C));
    reference(before, features, y, n, ignore, &loss, &acc, &top2, grad);
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_test_on_batch(
                      m, &(kiln_batch_arrays){.count = n, .features = features, .sparse_labels = y},
                      &e));
    kiln_metrics t = {.struct_size = sizeof t};
    CHECK_OK(ctx, kiln_model_train_on_batch(
                      m, &(kiln_batch_arrays){.count = n, .features = features, .sparse_labels = y},
                      &t));
    CHECK_OK(ctx, kiln_model_get_weights(m, after, F * C + C));
    /* A compare, not fmax: aarch64 gcc 12 -O2 stops with an internal
     * error vectorising an fmax reduction over this loop. */
    double worst = 0;
    for (int j = 0; j < F * C + C; j++) {
        const double d = fabs((double)before[j] - after[j] - grad[j]);
        worst = d > worst ? d : worst;
    }
    printf("%-40s loss %.6f (ref %.6f) accuracy %.4f (ref %.4f) top-2 %.4f (ref %.4f), "
           "gradient max error %.2e\n", what, e.loss, loss, e.accuracy, acc, e.top_k_accuracy,
           top2, worst);
    CHECK(isfinite(e.loss) && fabs(e.loss - loss) < 1e-5 && fabs(t.loss - loss) < 1e-5);
    CHECK(fabs(e.accuracy - acc) < 1e-6 && fabs(e.top_k_accuracy - top2) < 1e-6);
    CHECK(worst < 1e-5);
    kiln_model_destroy(m);
}

static void test_reference(kiln_context *ctx)
{
    /* Without an ignore class, the padding label is out of range. */
    int32_t dense[N * T];
    for (int i = 0; i < N * T; i++)
        dense[i] = labels[i] == IGNORE ? i % C : labels[i];
    check_step(ctx, 0, dense, "every position counted (no padding)");
    check_step(ctx, 1, labels, "ignore_class padding");
    /* Every position of the batch ignored: loss 0 (never NaN), no gradient. */
    int32_t none[N * T];
    for (int i = 0; i < N * T; i++)
        none[i] = IGNORE;
    check_step(ctx, 1, none, "every position ignored");
}

/* categorical_crossentropy on the same output: one-hot rows per position,
 * the same loss and accuracy as the sparse ids (no padding). */
static void test_dense_rows(kiln_context *ctx)
{
    static int32_t ids[N * T];
    static float onehot[N * T * C];
    for (int i = 0; i < N * T; i++) {
        ids[i] = labels[i] == IGNORE ? i % C : labels[i];
        for (int c = 0; c < C; c++)
            onehot[i * C + c] = c == ids[i] ? 1.0f : 0.0f;
    }
    const setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .optimizer = KILN_OPTIMIZER_ADAM};
    kiln_model *m = build(ctx, &s);
    kiln_metrics a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    CHECK_OK(
        ctx,
        kiln_model_test_on_batch(
            m, &(kiln_batch_arrays){.count = N, .features = features, .sparse_labels = ids}, &a));
    float w[F * C + C];
    CHECK_OK(ctx, kiln_model_get_weights(m, w, F * C + C));
    kiln_model_destroy(m);
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, F};
    kiln_input(m, 2, dims, NULL);
    const kiln_dense_options d = {.struct_size = sizeof d, .units = C,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_OK(ctx, kiln_model_set_weights(m, w, F * C + C));
    CHECK_OK(
        ctx,
        kiln_model_test_on_batch(
            m, &(kiln_batch_arrays){.count = N, .features = features, .dense_labels = onehot}, &b));
    printf("categorical_crossentropy per position: loss %.6f accuracy %.4f (sparse %.6f %.4f)\n",
           b.loss, b.accuracy, a.loss, a.accuracy);
    CHECK(fabs(a.loss - b.loss) < 1e-5 && fabs(a.accuracy - b.accuracy) < 1e-6);
    kiln_model_destroy(m);
}

static kiln_dataset *arrays(kiln_context *ctx, int32_t label_size, const int32_t *y,
                            int32_t num_classes)
{
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = N, .feature_rank = 2,
                          .feature_dims = {T, F}, .features = features,
                          .label_kind = KILN_LABELS_SPARSE, .sparse_labels = y,
                          .label_size = label_size, .num_classes = num_classes};
    kiln_dataset *ds = NULL;
    kiln_dataset_from_arrays(ctx, &d, &ds);
    return ds;
}

static int fill(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                size_t size)
{
    const int32_t *y = user;
    memcpy(b->features, features + index * T * F, T * F * sizeof(float));
    memcpy(b->sparse_labels, y + index * T, T * sizeof(int32_t));
    (void)message;
    (void)size;
    return 0;
}

/* An (N, T) int32 .npy of `y`, written as np.save writes it. */
static void write_labels_npy(const char *path, const int32_t *y)
{
    char header[128];
    int h = snprintf(header, sizeof header,
                     "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }", N, T);
    while ((10 + h + 1) % 64)
        header[h++] = ' ';
    header[h++] = '\n';
    FILE *f = fopen(path, "wb");
    const unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)h,
                                     (unsigned char)(h >> 8)};
    fwrite(magic, 1, 10, f);
    fwrite(header, 1, (size_t)h, f);
    fwrite(y, sizeof(int32_t), N * T, f);
    fclose(f);
}

static void write_features_npy(const char *path)
{
    char header[128];
    int h = snprintf(header, sizeof header,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d), }", N, T,
                     F);
    while ((10 + h + 1) % 64)
        header[h++] = ' ';
    header[h++] = '\n';
    FILE *f = fopen(path, "wb");
    const unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)h,
                                     (unsigned char)(h >> 8)};
    fwrite(magic, 1, 10, f);
    fwrite(header, 1, (size_t)h, f);
    fwrite(features, sizeof(float), N * T * F, f);
    fclose(f);
}

/* Evaluate over every source equals test_on_batch over all samples: the
 * loader's batches of 5 (uneven), views and the sources carry T ids each. */
static void test_sources(kiln_context *ctx, const char *dir)
{
    const setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .top_k = 2, .ignore = 1,
                     .optimizer = KILN_OPTIMIZER_ADAM};
    kiln_model *m = build(ctx, &s);
    kiln_metrics whole = {.struct_size = sizeof whole};
    CHECK_OK(ctx,
             kiln_model_test_on_batch(
                 m, &(kiln_batch_arrays){.count = N, .features = features, .sparse_labels = labels},
                 &whole));
    kiln_dataset *ds[3] = {arrays(ctx, T, labels, 0), NULL, NULL};
    const kiln_callback_desc cd = {.struct_size = sizeof cd, .count = N, .feature_rank = 2,
                                   .feature_dims = {T, F}, .label_kind = KILN_LABELS_SPARSE,
                                   .label_size = T, .fill = fill, .user = labels};
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &cd, &ds[1]));
    char fx[512], fy[512];
    snprintf(fx, sizeof fx, "%s/x.npy", dir);
    snprintf(fy, sizeof fy, "%s/y.npy", dir);
    write_features_npy(fx);
    write_labels_npy(fy, labels);
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, fx, fy, NULL, &ds[2]));
    static const char *const names[] = {"arrays", "callback", "npy (N, T) int32 labels"};
    for (int k = 0; k < 3; k++) {
        CHECK(ds[k] && ds[k]->label_size == T);
        if (!ds[k])
            continue;
        int32_t y[T];
        float x[T * F];
        CHECK_OK(ctx, kiln_dataset_read(ds[k], 3,
                                        &(kiln_sample_buffers){.features = x, .sparse_labels = y}));
        CHECK(memcmp(y, labels + 3 * T, sizeof y) == 0);
        kiln_metrics e = {.struct_size = sizeof e};
        CHECK_OK(ctx, kiln_model_evaluate(m, ds[k], 5, &e));
        printf("evaluate over %-26s loss %.6f accuracy %.4f (one batch: %.6f %.4f)\n",
               names[k], e.loss, e.accuracy, whole.loss, whole.accuracy);
        CHECK(fabs(e.loss - whole.loss) < 1e-5 && fabs(e.accuracy - whole.accuracy) < 1e-6);
        CHECK(fabs(e.top_k_accuracy - whole.top_k_accuracy) < 1e-6 && e.samples == N);
        /* A view: samples 10..19, their ids. */
        kiln_dataset *sub = NULL;
        CHECK_OK(ctx, kiln_dataset_subset(ds[k], 10, 10, &sub));
        CHECK_OK(ctx, kiln_dataset_read(sub, 2,
                                        &(kiln_sample_buffers){.features = x, .sparse_labels = y}));
        CHECK(memcmp(y, labels + 12 * T, sizeof y) == 0);
        kiln_metrics part = {.struct_size = sizeof part}, ref = {.struct_size = sizeof ref};
        CHECK_OK(ctx, kiln_model_evaluate(m, sub, 4, &part));
        CHECK_OK(ctx,
                 kiln_model_test_on_batch(m,
                                          &(kiln_batch_arrays){.count = 10,
                                                               .features = features + 10 * T * F,
                                                               .sparse_labels = labels + 10 * T},
                                          &ref));
        CHECK(fabs(part.loss - ref.loss) < 1e-5 && fabs(part.accuracy - ref.accuracy) < 1e-6);
        kiln_dataset_destroy(sub);
    }
    /* validation_split: the last 6 samples, evaluated as a view. */
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = 6;
    fo.validation_split = 0.25f;
    fo.verbosity = KILN_VERBOSE_SILENT;
    kiln_metrics held = {.struct_size = sizeof held};
    CHECK_OK(ctx, kiln_model_fit(m, ds[0], &fo));
    CHECK_OK(ctx, kiln_model_test_on_batch(m,
                                           &(kiln_batch_arrays){.count = 6,
                                                                .features = features + 18 * T * F,
                                                                .sparse_labels = labels + 18 * T},
                                           &held));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &r));
    CHECK(r.has_validation && fabs(r.val_loss - held.loss) < 1e-5 && isfinite(r.loss));
    for (int k = 0; k < 3; k++)
        kiln_dataset_destroy(ds[k]);
    kiln_model_destroy(m);
}

/* Weights after 2 epochs of fit (batch 7: uneven shards, a last batch of 3). */
static float *trained(kiln_context *ctx, const setup *s, kiln_dataset *ds, int64_t *n,
                      double *loss)
{
    kiln_model *m = build(ctx, s);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 7;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &r));
    *loss = r.loss;
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    kiln_model_destroy(m);
    return w;
}

static void compare(const char *what, const float *a, const float *b, int64_t n, double la,
                    double lb)
{
    const double worst = test_difference(a, b, sizeof(float), n, TEST_PER_VALUE, NULL);
    printf("%-52s max relative difference %.2e, loss %.6f vs %.6f\n", what, worst, la, lb);
    CHECK(worst <= 1e-5 && fabs(la - lb) <= 1e-5 * fmax(1.0, fabs(lb)));
}

static void test_strategies(kiln_context *ctx, int32_t devices)
{
    if (!test_has_devices(devices, 2, "mirrored and the pipeline on 2 devices"))
        return;
    kiln_dataset *ds = arrays(ctx, T, labels, 0);
    int64_t n = 0;
    double l0, l1;
    setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .ignore = 1, .hidden = 6,
               .optimizer = KILN_OPTIMIZER_ADAM};
    float *base = trained(ctx, &s, ds, &n, &l0);
    s.strategy = KILN_STRATEGY_MIRRORED;
    s.replicas = 2;
    float *w = trained(ctx, &s, ds, &n, &l1);
    compare("mirrored, 2 replicas vs one_device", w, base, n, l1, l0);
    free(w);
    s.strategy = KILN_STRATEGY_PIPELINE;
    s.replicas = 0;
    s.stages = 2;
    w = trained(ctx, &s, ds, &n, &l1);
    compare("pipeline, 2 stages x 3 micro-batches vs one_device", w, base, n, l1, l0);
    free(w);
    s.strategy = KILN_STRATEGY_PARAMETER_SERVER;
    s.stages = 0;
    s.replicas = 0;
    w = trained(ctx, &s, ds, &n, &l1);
    printf("parameter_server trains: loss %.6f\n", l1);
    CHECK(isfinite(l1));
    free(w);
    free(base);
    kiln_dataset_destroy(ds);
}

static void test_bad_input(kiln_context *ctx)
{
    int32_t y[N * T], z[N * T];
    memcpy(y, labels, sizeof y);
    y[1 * T + 2] = 9;
    for (int i = 0; i < N * T; i++)
        z[i] = y[i] == IGNORE ? 0 : y[i];
    /* At creation, against num_classes. */
    kiln_dataset *bad = arrays(ctx, T, z, C);
    CHECK(!bad);
    CHECK(strstr(kiln_context_last_error(ctx), "sample 1, position 2, has label 9") != NULL);
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = N, .feature_rank = 2,
                          .feature_dims = {T, F}, .features = features,
                          .sparse_labels = labels, .label_size = -1};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "label_size is -1",
                kiln_dataset_from_arrays(ctx, &d, &bad));
    /* At fit and evaluate, against the output's classes (IGNORE is not one
     * without ignore_class). */
    const setup plain = {.strategy = KILN_STRATEGY_ONE_DEVICE,
                         .optimizer = KILN_OPTIMIZER_ADAM};
    const setup masked = {.strategy = KILN_STRATEGY_ONE_DEVICE, .ignore = 1,
                          .optimizer = KILN_OPTIMIZER_ADAM};
    kiln_model *m = build(ctx, &masked);
    kiln_dataset *ds = arrays(ctx, T, y, 0);
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 1, position 2 has label 9 but the output",
                kiln_model_fit(m, ds, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 1, position 2 has label 9",
                kiln_model_evaluate(m, ds, 4, &e));
    CHECK_FAILS(
        ctx, KILN_ERROR_DATA, "sample 1, position 2 has label 9, outside [0, 4)",
        kiln_model_train_on_batch(
            m, &(kiln_batch_arrays){.count = 4, .features = features, .sparse_labels = y}, NULL));
    kiln_dataset_destroy(ds);
    /* A callback's labels are checked as they are read. */
    const kiln_callback_desc cd = {.struct_size = sizeof cd, .count = N, .feature_rank = 2,
                                   .feature_dims = {T, F}, .label_kind = KILN_LABELS_SPARSE,
                                   .label_size = T, .fill = fill, .user = y};
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &cd, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 1, position 2, has label 9, outside [0, 4)",
                kiln_model_evaluate(m, ds, 4, &e));
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
    m = build(ctx, &plain);
    ds = arrays(ctx, T, labels, 0);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 1, position 0 has label 7 but the output "
                "'dense' has 4 classes", kiln_model_fit(m, ds, NULL));
    kiln_dataset_destroy(ds);
    /* T' = 4 labels against an output of 5 positions. */
    static int32_t four[N * 4];
    ds = arrays(ctx, 4, four, 0);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "has 4 sparse labels per sample but output 'dense' "
                "(5, 4) has 5 positions", kiln_model_fit(m, ds, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "has 4 sparse labels per sample",
                kiln_model_evaluate(m, ds, 4, &e));
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
    /* T > 1 labels against a (classes,) output. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, F};
    kiln_input(m, 2, dims, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_dense_options head = {.struct_size = sizeof head, .units = C, .name = "head",
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    ds = arrays(ctx, T, labels, C + 4);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "has 5 sparse labels per sample but output 'head' (4,) "
                "has 1 position", kiln_model_fit(m, ds, NULL));
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
    /* One class per position is no classification. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_input(m, 2, dims, NULL);
    const kiln_dense_options one = {.struct_size = sizeof one, .units = 1, .name = "one"};
    kiln_dense(m, KILN_NODE_PREVIOUS, &one);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "output layer 'one' gives (5, 1)",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    /* ignore_class: sparse cross-entropy only, and >= 0. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_input(m, 2, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    co.loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY;
    co.has_ignore_class = 1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "ignore_class is 0; it must be >= 0, and is "
                "for sparse_categorical_crossentropy only", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_input(m, 2, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.ignore_class = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "ignore_class is -1",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

static int stop_at_step_2(void *user, const kiln_progress *p)
{
    (void)user;
    return p->event == KILN_EVENT_BATCH_END && p->step == 2 ? KILN_CALLBACK_STOP
                                                             : KILN_CALLBACK_CONTINUE;
}

/* A fit resumed mid-epoch from a checkpoint reports the epoch's loss over
 * all its counted positions: the checkpoint keeps their count. */
static void test_resume(kiln_context *ctx, const char *dir)
{
    const setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .ignore = 1,
                     .optimizer = KILN_OPTIMIZER_ADAM};
    kiln_dataset *ds = arrays(ctx, T, labels, 0);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = 7;
    fo.verbosity = KILN_VERBOSE_SILENT;
    kiln_model *m = build(ctx, &s);
    kiln_epoch_record whole = {.struct_size = sizeof whole};
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &whole));
    kiln_model_destroy(m);
    char folder[512];
    snprintf(folder, sizeof folder, "%s/checkpoints", dir);
    fo.checkpoint_dir = folder;
    fo.checkpoint_every_steps = 2;
    fo.callback = stop_at_step_2;
    m = build(ctx, &s);
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(m);
    fo.callback = NULL;
    fo.resume = 1;
    m = build(ctx, &s);
    kiln_epoch_record resumed = {.struct_size = sizeof resumed};
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &resumed));
    printf("resumed after step 2 of 4: epoch loss %.6f (uninterrupted %.6f)\n", resumed.loss,
           whole.loss);
    CHECK(fabs(resumed.loss - whole.loss) < 1e-6 &&
          fabs(resumed.accuracy - whole.accuracy) < 1e-9);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* The ignore class survives kiln_model_save / kiln_model_load. */
static void test_model_file(kiln_context *ctx, const char *dir)
{
    const setup s = {.strategy = KILN_STRATEGY_ONE_DEVICE, .ignore = 1,
                     .optimizer = KILN_OPTIMIZER_ADAM};
    kiln_model *m = build(ctx, &s);
    char path[512];
    snprintf(path, sizeof path, "%s/seq.kiln", dir);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_metrics a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    CHECK_OK(ctx,
             kiln_model_test_on_batch(
                 m, &(kiln_batch_arrays){.count = N, .features = features, .sparse_labels = labels},
                 &a));
    kiln_model *loaded = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &loaded));
    if (loaded) {
        CHECK(loaded->plan.heads[0].has_ignore && loaded->plan.heads[0].ignore == IGNORE);
        CHECK_OK(ctx, kiln_model_test_on_batch(loaded,
                                               &(kiln_batch_arrays){.count = N,
                                                                    .features = features,
                                                                    .sparse_labels = labels},
                                               &b));
        printf("model file: ignore_class %d kept, loss %.6f == %.6f\n", (int)IGNORE, b.loss,
               a.loss);
        CHECK(fabs(a.loss - b.loss) < 1e-6);
    }
    kiln_model_destroy(loaded);
    kiln_model_destroy(m);
}

int main(void)
{
    make_data();
    kiln_context *ctx = context();
    if (!ctx) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    const int32_t devices = test_device_count(ctx);
    printf("%d device(s)\n", (int)devices);
    char dir[] = "/tmp/kiln-seq-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "no temporary folder\n");
        return 1;
    }
    test_reference(ctx);
    test_dense_rows(ctx);
    test_sources(ctx, dir);
    test_bad_input(ctx);
    test_model_file(ctx, dir);
    test_resume(ctx, dir);
    test_strategies(ctx, devices);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    kiln_context_destroy(ctx);
    if (test_failures) {
        fprintf(stderr, "test_sequence_labels: %d check(s) failed\n", test_failures);
        return 1;
    }
    printf("test_sequence_labels: all checks passed\n");
    return 0;
}
