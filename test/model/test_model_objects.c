/* The model as an object: its layers and parameter tensors listed, one tensor
 * read and written by name, layers frozen for transfer learning (frozen
 * weights bit-identical after training, a frozen batch norm on its moving
 * statistics) under every strategy, and custom loops
 * (train_on_batch, test_on_batch, predict_on_batch) equal to fit, evaluate
 * and predict. Runs on two PoCL basic devices. */
#include "test_data.h"

#define SIDE 6
#define COUNT 40
#define CLASSES 3

static kiln_dataset *data(kiln_context *ctx)
{
    return synthetic_images(ctx, COUNT, SIDE, 12345, CLASSES);
}

/* Conv -> BN -> flatten -> dense -> head; `head_units` lets a second model
 * swap the head. */
static kiln_model *build(kiln_context *ctx, int head_units, const char *frozen,
                         kiln_strategy strategy, kiln_status want)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .name = "features",
                                .filters = 4, .kernel_size = {3, 3},
                                .activation = KILN_ACTIVATION_RELU};
    kiln_batch_norm_options bn = {.struct_size = sizeof bn, .name = "norm"};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "head", .units = head_units,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_batch_normalization(m, KILN_NODE_PREVIOUS, &bn);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    for (const char *f = frozen; f && *f; f += strlen(f) + 1)
        CHECK_OK(ctx, kiln_model_set_trainable(m, f, 0));
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 0.01f};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = strategy};
    co.optimizer = &optimizer;
    const kiln_status st = kiln_model_compile(m, &co);
    CHECK(st == want);
    if (st != KILN_OK) {
        kiln_model_destroy(m);
        return NULL;
    }
    return m;
}

static kiln_fit_options options(int epochs)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 8;
    fo.verbosity = KILN_VERBOSE_SILENT;
    return fo;
}

static float *tensor(kiln_context *ctx, kiln_model *m, const char *name, int64_t size)
{
    float *t = calloc((size_t)size, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_tensor(m, name, t, size));
    return t;
}

static void test_listing(kiln_context *ctx)
{
    kiln_model *m = build(ctx, CLASSES, NULL, KILN_STRATEGY_ONE_DEVICE, KILN_OK);
    int32_t layers = 0, weights = 0;
    CHECK_OK(ctx, kiln_model_layer_count(m, &layers));
    CHECK_OK(ctx, kiln_model_tensor_count(m, &weights));
    CHECK(layers == 5 && weights == 2 + 4 + 2);
    kiln_layer_info li = {.struct_size = sizeof li};
    CHECK_OK(ctx, kiln_model_layer_info(m, 1, &li));
    CHECK(!strcmp(li.name, "features") && !strcmp(li.kind, "conv2d") && li.rank == 3 &&
          li.dims[0] == 4 && li.dims[2] == 4 && li.trainable && li.n_tensors == 2);
    /* Offsets follow get_weights' order; every tensor reads what it holds. */
    int64_t n = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &n));
    float *all = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, all, n));
    int64_t next = 0;
    for (int32_t k = 0; k < weights; k++) {
        kiln_parameter_info wi = {.struct_size = sizeof wi};
        CHECK_OK(ctx, kiln_model_tensor_info(m, k, &wi));
        CHECK(wi.offset == next);
        float *t = tensor(ctx, m, wi.name, wi.size);
        CHECK(memcmp(t, all + wi.offset, (size_t)wi.size * sizeof(float)) == 0);
        if (!strcmp(wi.name, "norm/moving_mean"))
            CHECK(!wi.trainable);
        if (!strcmp(wi.name, "features/kernel"))
            CHECK(wi.trainable && wi.rank == 4 && wi.size == 3 * 3 * 1 * 4);
        next += wi.size;
        free(t);
    }
    CHECK(next == n);
    /* One tensor written, the rest unchanged. */
    float bias[CLASSES] = {1, 2, 3};
    CHECK_OK(ctx, kiln_model_set_tensor(m, "head/bias", bias, CLASSES));
    float *after = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, after, n));
    kiln_parameter_info hb = {.struct_size = sizeof hb};
    CHECK_OK(ctx, kiln_model_tensor_info(m, weights - 1, &hb));
    CHECK(!strcmp(hb.name, "head/bias") && !memcmp(after + hb.offset, bias, sizeof bias));
    CHECK(!memcmp(after, all, (size_t)hb.offset * sizeof(float)));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "no parameter tensor 'head/gamma'",
                kiln_model_set_tensor(m, "head/gamma", bias, CLASSES));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "holds 3 floats; 2 given",
                kiln_model_set_tensor(m, "head/bias", bias, 2));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "before kiln_model_compile",
                kiln_model_set_trainable(m, "features", 0));
    free(all);
    free(after);
    kiln_model_destroy(m);
    kiln_model *u = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &u));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "no layer 'nope'",
                kiln_model_set_trainable(u, "nope", 0));
    kiln_model_destroy(u);
}

/* Train, then a new model with another head takes the features, frozen,
 * and trains again: the frozen tensors come out bit-identical. */
static float *transfer(kiln_context *ctx, const kiln_dataset *ds, kiln_strategy strategy,
                       int64_t *n)
{
    kiln_model *a = build(ctx, CLASSES, NULL, KILN_STRATEGY_ONE_DEVICE, KILN_OK);
    kiln_fit_options fo = options(2);
    CHECK_OK(ctx, kiln_model_fit(a, ds, &fo));
    kiln_model *b = build(ctx, 5, "features\0norm\0", strategy, KILN_OK);
    static const char *const copied[] = {"features/kernel", "features/bias", "norm/gamma",
                                         "norm/beta", "norm/moving_mean",
                                         "norm/moving_variance"};
    const int64_t sizes[] = {36, 4, 4, 4, 4, 4};
    float *before[6];
    for (int k = 0; k < 6; k++) {
        before[k] = tensor(ctx, a, copied[k], sizes[k]);
        CHECK_OK(ctx, kiln_model_set_tensor(b, copied[k], before[k], sizes[k]));
    }
    float *head0 = tensor(ctx, b, "head/kernel", 4 * 4 * 4 * 5);
    CHECK_OK(ctx, kiln_model_fit(b, ds, &fo));
    int frozen_same = 1;
    for (int k = 0; k < 6; k++) {
        float *t = tensor(ctx, b, copied[k], sizes[k]);
        frozen_same &= memcmp(t, before[k], (size_t)sizes[k] * sizeof(float)) == 0;
        free(t);
        free(before[k]);
    }
    float *head1 = tensor(ctx, b, "head/kernel", 4 * 4 * 4 * 5);
    CHECK(frozen_same);
    CHECK(memcmp(head0, head1, 4 * 4 * 4 * 5 * sizeof(float)) != 0);
    free(head0);
    free(head1);
    CHECK_OK(ctx, kiln_model_parameter_count(b, n));
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(b, w, *n));
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    return w;
}

static void test_transfer(kiln_context *ctx)
{
    kiln_dataset *ds = data(ctx);
    int64_t n;
    float *one = transfer(ctx, ds, KILN_STRATEGY_ONE_DEVICE, &n);
    const kiln_strategy others[] = {KILN_STRATEGY_MIRRORED, KILN_STRATEGY_CENTRAL_STORAGE,
                                    KILN_STRATEGY_PIPELINE};
    const char *names[] = {"mirrored", "central_storage", "pipeline"};
    for (int k = 0; k < 3; k++) {
        float *w = transfer(ctx, ds, others[k], &n);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            const double d = fabs((double)w[i] - one[i]) / fmax(1.0, fabs(one[i]));
            worst = d > worst ? d : worst;
        }
        printf("transfer learning, frozen features, %s vs one device: %.2e\n", names[k],
               worst);
        CHECK(worst < 1e-5);
        free(w);
    }
    free(one);
    /* Asynchronous: no step-for-step equality, but the frozen tensors
     * (checked inside) stay bit-identical. */
    free(transfer(ctx, ds, KILN_STRATEGY_PARAMETER_SERVER, &n));
    /* The summary counts frozen weights as non-trainable. */
    kiln_model *b = build(ctx, 5, "features\0", KILN_STRATEGY_ONE_DEVICE, KILN_OK);
    char text[4096];
    size_t len = 0;
    CHECK_OK(ctx, kiln_model_summary(b, text, sizeof text, &len));
    CHECK(strstr(text, "Trainable params: 333") && strstr(text, "Non-trainable params: 48"));
    kiln_model_destroy(b);
    kiln_dataset_destroy(ds);
}

/* A frozen batch norm normalises with its moving statistics in training:
 * the loss train_on_batch reports (before its update) is test_on_batch's. */
static void test_frozen_batch_norm(kiln_context *ctx)
{
    static float x[8 * SIDE * SIDE];
    int32_t y[8];
    for (int i = 0; i < 8 * SIDE * SIDE; i++)
        x[i] = (float)((i * 7919) % 113) / 113.0f;
    for (int i = 0; i < 8; i++)
        y[i] = i % CLASSES;
    for (int frozen = 0; frozen < 2; frozen++) {
        kiln_model *m = build(ctx, CLASSES, frozen ? "norm\0" : NULL, KILN_STRATEGY_ONE_DEVICE,
                              KILN_OK);
        kiln_metrics t = {.struct_size = sizeof t}, r = {.struct_size = sizeof r};
        CHECK_OK(ctx,
                 kiln_model_test_on_batch(
                     m, &(kiln_batch_arrays){.count = 8, .features = x, .sparse_labels = y}, &t));
        CHECK_OK(ctx,
                 kiln_model_train_on_batch(
                     m, &(kiln_batch_arrays){.count = 8, .features = x, .sparse_labels = y}, &r));
        float mean[4];
        CHECK_OK(ctx, kiln_model_get_tensor(m, "norm/moving_mean", mean, 4));
        if (frozen)
            CHECK(t.loss == r.loss && mean[0] == 0.0f && mean[3] == 0.0f);
        else
            CHECK(t.loss != r.loss && mean[0] != 0.0f);
        kiln_model_destroy(m);
    }
}

/* train_on_batch over an epoch's batches equals fit without shuffling
 * (the asynchronous parameter server's fit interleaves its workers' steps:
 * its train_on_batch, one step at a time, equals one device's instead);
 * test_on_batch and predict_on_batch equal evaluate and predict. Returns
 * the weights train_on_batch reached. */
static float *test_custom_loops(kiln_context *ctx, kiln_strategy strategy, const float *want)
{
    kiln_dataset *ds = data(ctx);
    static float x[COUNT * SIDE * SIDE];
    int32_t y[COUNT];
    for (int64_t i = 0; i < COUNT; i++)
        CHECK_OK(ctx, kiln_dataset_read(ds, i,
                                        &(kiln_sample_buffers){.features = x + i * SIDE * SIDE,
                                                               .sparse_labels = y + i}));
    kiln_model *a = build(ctx, CLASSES, NULL, strategy, KILN_OK);
    kiln_model *b = build(ctx, CLASSES, NULL, strategy, KILN_OK);
    kiln_fit_options fo = options(1);
    fo.no_shuffle = 1;
    CHECK_OK(ctx, kiln_model_fit(a, ds, &fo));
    double loss = 0;
    for (int start = 0; start < COUNT; start += 8) {
        kiln_metrics r = {.struct_size = sizeof r};
        CHECK_OK(ctx,
                 kiln_model_train_on_batch(b,
                                           &(kiln_batch_arrays){.count = 8,
                                                                .features = x + start * SIDE * SIDE,
                                                                .sparse_labels = y + start},
                                           &r));
        loss += r.loss * 8;
    }
    int64_t n;
    CHECK_OK(ctx, kiln_model_parameter_count(a, &n));
    float *wa = calloc((size_t)n, sizeof(float)), *wb = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    CHECK_OK(ctx, kiln_model_get_weights(b, wb, n));
    kiln_epoch_record e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_history_epoch(a, 0, &e));
    if (!want) {
        CHECK(memcmp(wa, wb, (size_t)n * sizeof(float)) == 0);
        CHECK(fabs(loss / COUNT - e.loss) < 1e-6);
    } else {
        double worst = 0;
        for (int64_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)wb[i] - want[i]) / fmax(1.0, fabs(want[i])));
        printf("train_on_batch, parameter server vs one device: %.2e\n", worst);
        CHECK(worst < 1e-5);
    }
    kiln_metrics ev = {.struct_size = sizeof ev}, tb = {.struct_size = sizeof tb};
    CHECK_OK(ctx, kiln_model_evaluate(b, ds, COUNT, &ev));
    CHECK_OK(ctx,
             kiln_model_test_on_batch(
                 b, &(kiln_batch_arrays){.count = COUNT, .features = x, .sparse_labels = y}, &tb));
    CHECK(fabs(ev.loss - tb.loss) < 1e-6 && ev.accuracy == tb.accuracy);
    static float pa[COUNT * CLASSES], pb[COUNT * CLASSES];
    CHECK_OK(ctx,
             kiln_model_predict(b, &(kiln_batch_arrays){.count = COUNT, .features = x}, pa, 0));
    CHECK_OK(ctx, kiln_model_predict_on_batch(
                      b, &(kiln_batch_arrays){.count = COUNT, .features = x}, pb));
    CHECK(memcmp(pa, pb, sizeof pa) == 0);
    /* What fit refuses, the custom loop refuses too. */
    y[3] = CLASSES;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 3 has label 3",
                kiln_model_train_on_batch(
                    b, &(kiln_batch_arrays){.count = 8, .features = x, .sparse_labels = y}, NULL));
    y[3] = 0;
    x[5] = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 0, element 5",
                kiln_model_train_on_batch(
                    b, &(kiln_batch_arrays){.count = 8, .features = x, .sparse_labels = y}, NULL));
    x[5] = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT,
                "kiln_batch_arrays.count is 0; it must be >= 1",
                kiln_model_train_on_batch(
                    b, &(kiln_batch_arrays){.count = 0, .features = x, .sparse_labels = y}, NULL));
    free(wa);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    kiln_dataset_destroy(ds);
    return wb;
}

/* A frozen prefix runs no backward and keeps no gradient of its outputs:
 * features (4x4x4), norm and flatten (64 each) are all before the first
 * trainable layer, so the frozen model holds 3 x 64 floats a sample less,
 * and trains its head as before. */
static void test_frozen_prefix(kiln_context *ctx)
{
    kiln_dataset *ds = data(ctx);
    uint64_t bytes[2] = {0, 0};
    for (int frozen = 0; frozen < 2; frozen++) {
        kiln_model *m =
            build(ctx, 5, frozen ? "features\0norm\0" : NULL, KILN_STRATEGY_ONE_DEVICE, KILN_OK);
        kiln_fit_options fo = options(1);
        CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
        kiln_memory_report mem = {.struct_size = sizeof mem};
        CHECK_OK(ctx, kiln_model_memory(m, 0, &mem));
        bytes[frozen] = mem.activation_bytes;
        kiln_model_destroy(m);
    }
    printf("frozen prefix: activation bytes %llu trainable, %llu frozen\n",
           (unsigned long long)bytes[0], (unsigned long long)bytes[1]);
    CHECK(bytes[0] - bytes[1] == 3 * 64 * 8 * sizeof(float));
    kiln_dataset_destroy(ds);
}

int main(void)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_listing(ctx);
    test_transfer(ctx);
    test_frozen_batch_norm(ctx);
    test_frozen_prefix(ctx);
    float *one = test_custom_loops(ctx, KILN_STRATEGY_ONE_DEVICE, NULL);
    free(test_custom_loops(ctx, KILN_STRATEGY_MIRRORED, NULL));
    free(test_custom_loops(ctx, KILN_STRATEGY_PARAMETER_SERVER, one));
    free(one);
    kiln_context_destroy(ctx);
    return test_finish("test_model_objects");
}
