/* The fine-tuning path of examples/finetune.c (finetune_model.c) on the
 * backbone tools/pretrain_fashion.py wrote (test/data/onnx/
 * fashion_backbone.onnx): import, cut at /Flatten (and again at the last
 * 3x3 block's 4-D output, flattened), a new Dense(5) head,
 * /features... frozen, two epochs of SGD on random images (mirrored on two
 * devices when there are two). The frozen backbone's every tensor (moving
 * statistics included) and the cut-off head's are bit-identical after
 * training, the new head's are not; the model saved as a model file and as
 * ONNX reloads and predicts as the fine-tuned model; bad cuts and prefixes
 * are refused naming them. */
#include "finetune_model.h"
#include "harness.h"
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 48, PIXELS = 28 * 28, CLASSES = 5, MAX_TENSORS = 64 };

typedef struct snapshot {
    int32_t n;
    char names[MAX_TENSORS][96];
    float *data[MAX_TENSORS];
    int64_t size[MAX_TENSORS];
} snapshot;

static void take(kiln_context *ctx, kiln_model *m, snapshot *s)
{
    CHECK_OK(ctx, kiln_model_tensor_count(m, &s->n));
    CHECK(s->n > 0 && s->n <= MAX_TENSORS);
    for (int32_t i = 0; i < s->n && i < MAX_TENSORS; i++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, i, &info));
        memcpy(s->names[i], info.name, sizeof s->names[i]);
        s->size[i] = info.size;
        s->data[i] = malloc((size_t)info.size * sizeof(float));
        CHECK_OK(ctx, kiln_model_get_tensor(m, info.name, s->data[i], info.size));
    }
}

static void drop(snapshot *s)
{
    for (int32_t i = 0; i < s->n && i < MAX_TENSORS; i++)
        free(s->data[i]);
}

/* Largest |a - b| over `n` floats. */
static double worst(const float *a, const float *b, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
        w = d > w ? d : w;
    }
    return w;
}

static void predict(kiln_context *ctx, kiln_model *m, const float *x, float *out)
{
    const kiln_batch_arrays in = {.struct_size = sizeof in, .count = N, .features = x};
    CHECK_OK(ctx, kiln_model_predict(m, &in, out, 16));
}

/* One cut's fine-tuning: build, check the frozen layers, fit, compare
 * every tensor, then the model file and the ONNX export reloaded. */
static void check_cut(kiln_context *ctx, const char *onnx, const char *cut,
                      kiln_strategy strategy, const char *dir, const float *x,
                      const kiln_dataset *ds)
{
    char saved[1100], exported[1100];
    snprintf(saved, sizeof saved, "%s/tuned.kiln", dir);
    snprintf(exported, sizeof exported, "%s/tuned.onnx", dir);
    printf("head on %s:\n", cut);
    kiln_model *m = NULL;
    CHECK_OK(ctx, finetune_build(ctx, onnx, cut, FINETUNE_BACKBONE, CLASSES, &m));
    if (!m)
        return;
    int32_t n_layers = 0, frozen = 0;
    CHECK_OK(ctx, kiln_model_layer_count(m, &n_layers));
    for (int32_t i = 0; i < n_layers; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_layer_info(m, i, &info));
        frozen += !info.trainable;
        CHECK(!info.trainable == (strncmp(info.name, FINETUNE_BACKBONE, 9) == 0));
    }
    CHECK(frozen == 9);   /* four Conv/BN blocks (each ReLU fused into its BN) and the max pool */
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.1f, .momentum = 0.9f};
    const kiln_compile_options co = {.struct_size = sizeof co, .optimizer = &sgd,
        .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .strategy = strategy};
    CHECK_OK(ctx, kiln_model_compile(m, &co));

    snapshot before = {0}, after = {0};
    take(ctx, m, &before);
    const kiln_fit_options fit = {.struct_size = sizeof fit, .epochs = 2, .batch_size = 16,
                                  .verbosity = KILN_VERBOSE_SILENT};
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fit));
    take(ctx, m, &after);
    CHECK(before.n == after.n);
    int same = 0, changed = 0;
    for (int32_t i = 0; i < before.n && i < after.n; i++) {
        const int head = strncmp(before.names[i], FINETUNE_HEAD "/", 5) == 0;
        const int equal = memcmp(before.data[i], after.data[i],
                                 (size_t)before.size[i] * sizeof(float)) == 0;
        if (head != !equal)
            fprintf(stderr, "%s: %s after fine-tuning\n", before.names[i],
                    equal ? "unchanged" : "changed");
        CHECK(head == !equal);
        same += equal;
        changed += !equal;
    }
    /* 4 conv kernels, 4 x 4 batch norm tensors, the old head's 2. */
    printf("  %d tensors bit-identical after fine-tuning, %d changed (the head's)\n", same,
           changed);
    CHECK(same == 22 && changed == 2);

    float *want = malloc(N * CLASSES * sizeof *want), *got = malloc(N * CLASSES * sizeof *got);
    predict(ctx, m, x, want);
    CHECK_OK(ctx, kiln_model_save(m, saved));
    CHECK_OK(ctx, kiln_model_export_onnx(m, exported));

    kiln_model *loaded = NULL;
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, saved, &one, &loaded));
    if (loaded) {
        predict(ctx, loaded, x, got);
        printf("  model file reloaded: largest difference %.3g\n",
               worst(want, got, N * CLASSES));
        CHECK(memcmp(want, got, N * CLASSES * sizeof *got) == 0);
    }
    kiln_model *imported = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, exported, NULL, &imported));
    const kiln_compile_options mse = {.struct_size = sizeof mse,
        .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .strategy = KILN_STRATEGY_ONE_DEVICE};
    if (imported) {
        CHECK_OK(ctx, kiln_model_compile(imported, &mse));
        predict(ctx, imported, x, got);
        const double w = worst(want, got, N * CLASSES);
        printf("  ONNX re-imported: largest difference %.3g\n", w);
        CHECK(w < 1e-6);
    }
    kiln_model_destroy(imported);
    kiln_model_destroy(loaded);
    kiln_model_destroy(m);
    drop(&before);
    drop(&after);
    free(want), free(got);
    remove(saved);
    remove(exported);
}

int main(void)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    char onnx[1024], dir[] = "/tmp/kiln_finetune_XXXXXX";
    snprintf(onnx, sizeof onnx, "%s/test/data/onnx/fashion_backbone.onnx", root);
    CHECK(mkdtemp(dir) != NULL);

    kiln_context *ctx = NULL;
    CHECK_OK(ctx, kiln_context_create(NULL, &ctx));
    int32_t devices = 0;
    CHECK_OK(ctx, kiln_context_device_count(ctx, &devices));
    const kiln_strategy strategy = devices > 1 ? KILN_STRATEGY_MIRRORED
                                               : KILN_STRATEGY_ONE_DEVICE;
    printf("%d device(s): %s\n", (int)devices, devices > 1 ? "mirrored" : "one_device");

    /* The refusals first: a cut and a prefix that name nothing. */
    kiln_model *m = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "/NoSuchNode",
                finetune_build(ctx, onnx, "/NoSuchNode", FINETUNE_BACKBONE, CLASSES, &m));
    CHECK(m == NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "/backbone",
                finetune_build(ctx, onnx, FINETUNE_FEATURES, "/backbone", CLASSES, &m));
    CHECK(m == NULL);

    float *x = malloc(N * PIXELS * sizeof *x);
    int32_t y[N];
    uint32_t r = 12345;
    for (int i = 0; i < N * PIXELS; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)(r >> 8) / 16777216.0f;
    }
    for (int i = 0; i < N; i++)
        y[i] = i % CLASSES;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = N, .feature_rank = 3,
                                .feature_dims = {1, 28, 28}, .features = x,
                                .sparse_labels = y, .num_classes = CLASSES};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    /* The pooled features (2-D), and a 4-D value that the head flattens. */
    check_cut(ctx, onnx, FINETUNE_FEATURES, strategy, dir, x, ds);
    check_cut(ctx, onnx, FINETUNE_SPATIAL, strategy, dir, x, ds);

    kiln_dataset_destroy(ds);
    free(x);
    kiln_context_destroy(ctx);
    rmdir(dir);
    return test_failures ? 1 : 0;
}
