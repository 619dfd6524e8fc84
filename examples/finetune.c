/* Fine-tuning: a CNN pretrained in PyTorch on Fashion-MNIST classes 0-4
 * (tools/pretrain_fashion.py writes it as ONNX) learns classes 5-9 from
 * 1,000 samples. kiln imports it, cuts it at the pooled features (its
 * Flatten), puts a new Dense(5, softmax) head there, freezes the backbone
 * and trains the head; then the same with the cut at the last 3x3 block's
 * output (7x7x32, before the 1x1 block and the pool), which it saves as a
 * kiln model file and as ONNX. It prints the test accuracies on classes
 * 5-9 of both beside that of the same architecture built with kiln's
 * builders and trained from scratch on the same samples, epochs and
 * optimizer.
 * Usage: finetune --backbone NET.onnx [--epochs N] [--samples N] [--batch N]
 *                 [--learning-rate R] [--data DIR] [--devices SPEC]
 *                 [--save PATH] [--save-onnx PATH]
 * Both models train mirrored on two devices when the context has two or
 * more (POCL_DEVICES="basic basic"), on one otherwise. */
#include "fashion_classes.h"
#include "fashion_data.h"
#include "finetune_model.h"
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct args {
    int epochs, samples, batch;
    float learning_rate;
    const char *backbone, *data, *devices, *save, *save_onnx;
} args;

static const char usage[] =
    "usage: finetune --backbone NET.onnx [--epochs N] [--samples N] [--batch N]\n"
    "                [--learning-rate R] [--data DIR] [--devices SPEC]\n"
    "                [--save PATH] [--save-onnx PATH]\n"
    "Fine-tunes NET.onnx (tools/pretrain_fashion.py: trained on Fashion-MNIST\n"
    "classes 0-4; test/data/onnx/fashion_backbone.onnx is one) on --samples (1000)\n"
    "samples of classes 5-9: a new Dense(5) head on its pooled features, the\n"
    "backbone frozen, --epochs (5) of Adam(--learning-rate, 0.003) in batches of\n"
    "--batch (32); then a head on its last 3x3 block's output; then trains the\n"
    "same architecture from scratch on the same samples and prints the three test\n"
    "accuracies on classes 5-9. --save writes the second fine-tuned model's file,\n"
    "--save-onnx its ONNX. --devices takes what KILN_DEVICES takes; with two\n"
    "devices or more all train mirrored.\n";

/* 1: parsed; 0: a usage error (said on stderr); -1: --help. */
static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.epochs = 5, .samples = 1000, .batch = 32, .learning_rate = 3e-3f,
                .data = FASHION_DEFAULT_DIR};
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return fputs(usage, stdout), -1;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "finetune: %s needs a value\n", argv[i]);
            return 0;
        }
        if (strcmp(argv[i], "--epochs") == 0)
            a->epochs = atoi(v);
        else if (strcmp(argv[i], "--samples") == 0)
            a->samples = atoi(v);
        else if (strcmp(argv[i], "--batch") == 0)
            a->batch = atoi(v);
        else if (strcmp(argv[i], "--learning-rate") == 0)
            a->learning_rate = (float)atof(v);
        else if (strcmp(argv[i], "--backbone") == 0)
            a->backbone = v;
        else if (strcmp(argv[i], "--data") == 0)
            a->data = v;
        else if (strcmp(argv[i], "--devices") == 0)
            a->devices = v;
        else if (strcmp(argv[i], "--save") == 0)
            a->save = v;
        else if (strcmp(argv[i], "--save-onnx") == 0)
            a->save_onnx = v;
        else {
            fprintf(stderr, "finetune: unknown option %s\n", argv[i]);
            return 0;
        }
    }
    if (!a->backbone || a->epochs < 1 || a->samples < 1 || a->batch < 1 ||
        !(a->learning_rate > 0.0f)) {
        fprintf(stderr, "finetune: --backbone is required; --epochs, --samples, --batch and "
                "--learning-rate must be positive\n");
        return 0;
    }
    return 1;
}

/* The pretrained network's architecture, channels-last, from kiln's
 * builders: each Conv/BN/ReLU block with PyTorch's padding and
 * momentum (kiln's 0.99 would leave the moving statistics near their
 * start after the ~160 steps this example takes). */
static kiln_model *scratch_cnn(kiln_context *ctx)
{
    static const struct { int32_t filters, size, stride; } blocks[4] = {
        {16, 3, 1}, {32, 3, 1}, {32, 3, 2}, {128, 1, 1}};
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m) != KILN_OK)
        return NULL;
    const int32_t shape[3] = {28, 28, 1};
    kiln_node x = kiln_input(m, 3, shape, NULL);
    for (int b = 0; b < 4; b++) {
        const int32_t k = blocks[b].size, pad = k / 2;
        const kiln_conv2d_options conv = {.struct_size = sizeof conv,
            .filters = blocks[b].filters, .kernel_size = {k, k},
            .strides = {blocks[b].stride, blocks[b].stride},
            .padding = KILN_PADDING_EXPLICIT, .pads = {pad, pad, pad, pad}, .no_bias = 1};
        const kiln_batch_norm_options bn = {.struct_size = sizeof bn, .momentum = 0.9f,
                                            .epsilon = 1e-5f,
                                            .activation = KILN_ACTIVATION_RELU};
        x = kiln_batch_normalization(m, kiln_conv2d(m, x, &conv), &bn);
        if (b == 0)
            x = kiln_max_pooling2d(m, x, NULL);
    }
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 5,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, kiln_global_average_pooling2d(m, x, NULL), &head);
    return m;
}

/* Compiles `m`, trains it on `train` and sets *accuracy on `test`. */
static kiln_status train_and_test(kiln_model *m, const args *a, kiln_strategy strategy,
                                  const kiln_dataset *train, const kiln_dataset *test,
                                  double *accuracy)
{
    const kiln_optimizer_options adam = {.struct_size = sizeof adam,
                                         .learning_rate = a->learning_rate};
    const kiln_compile_options co = {.struct_size = sizeof co, .optimizer = &adam,
        .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .strategy = strategy};
    const kiln_fit_options fit = {.struct_size = sizeof fit, .epochs = a->epochs,
                                  .batch_size = a->batch, .verbosity = KILN_VERBOSE_EPOCH};
    kiln_metrics r = {.struct_size = sizeof r};
    kiln_status st = kiln_model_compile(m, &co);
    if (st == KILN_OK)
        st = kiln_model_fit(m, train, &fit);
    if (st == KILN_OK)
        st = kiln_model_evaluate(m, test, 256, &r);
    *accuracy = r.accuracy;
    return st;
}

int main(int argc, char **argv)
{
    args a;
    const int parsed = parse_args(argc, argv, &a);
    if (parsed <= 0)
        return parsed < 0 ? 0 : 2;
    if (a.devices)
        setenv("KILN_DEVICES", a.devices, 1);
    char err[1024] = "";
    const kiln_context_options co = {.struct_size = sizeof co, .error_buffer = err,
                                     .error_buffer_size = sizeof err,
                                     .log_level = KILN_LOG_WARNING};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        return fprintf(stderr, "finetune: %s\n", err), 1;
    kiln_dataset *train = NULL, *test = NULL, *train_hwc = NULL, *test_hwc = NULL;
    kiln_model *tuned = NULL, *scratch = NULL;
    double tuned_acc[2] = {0, 0}, scratch_acc = 0;
    int32_t devices = 1;
    kiln_context_device_count(ctx, &devices);
    const kiln_strategy strategy = devices > 1 ? KILN_STRATEGY_MIRRORED
                                               : KILN_STRATEGY_ONE_DEVICE;
    printf("%d device(s): %s\n", (int)devices, devices > 1 ? "mirrored" : "one_device");
    /* The imported graph takes images as PyTorch does, (1, 28, 28); the
     * scratch model kiln's way, (28, 28, 1): the same floats. */
    kiln_status st = fashion_classes_load(ctx, a.data, 1, 5, 5, a.samples, 1, &train);
    if (st == KILN_OK)
        st = fashion_classes_load(ctx, a.data, 0, 5, 5, 0, 1, &test);
    if (st == KILN_OK)
        st = fashion_classes_load(ctx, a.data, 1, 5, 5, a.samples, 0, &train_hwc);
    if (st == KILN_OK)
        st = fashion_classes_load(ctx, a.data, 0, 5, 5, 0, 0, &test_hwc);
    /* The head on the pooled features first, then on the spatial ones: the
     * second is the one saved. */
    static const char *const cuts[2] = {FINETUNE_FEATURES, FINETUNE_SPATIAL};
    double t0 = fashion_seconds(), t1 = t0, t2 = t0;
    for (int c = 0; c < 2 && st == KILN_OK; c++) {
        kiln_model_destroy(tuned);
        tuned = NULL;
        st = finetune_build(ctx, a.backbone, cuts[c], FINETUNE_BACKBONE, 5, &tuned);
        if (st != KILN_OK)
            break;
        printf("fine-tuning a head on %s on %d samples of classes 5-9\n", cuts[c], a.samples);
        fflush(stdout);
        st = train_and_test(tuned, &a, strategy, train, test, &tuned_acc[c]);
    }
    t1 = fashion_seconds();
    if (st == KILN_OK && a.save)
        st = kiln_model_save(tuned, a.save);
    if (st == KILN_OK && a.save_onnx)
        st = kiln_model_export_onnx(tuned, a.save_onnx);
    if (st == KILN_OK && !(scratch = scratch_cnn(ctx)))
        st = KILN_ERROR_OUT_OF_MEMORY;
    if (st == KILN_OK) {
        printf("training the same architecture from scratch on the same samples\n");
        fflush(stdout);
        st = train_and_test(scratch, &a, strategy, train_hwc, test_hwc, &scratch_acc);
        t2 = fashion_seconds();
    }
    if (st == KILN_OK) {
        printf("fine-tuned (both): %.1f s; from scratch: %.1f s\n", t1 - t0, t2 - t1);
        if (a.save)
            printf("model saved to %s\n", a.save);
        if (a.save_onnx)
            printf("ONNX saved to %s\n", a.save_onnx);
        printf("test accuracy on classes 5-9: head on %s %.4f, head on %s %.4f, "
               "from scratch %.4f\n", cuts[0], tuned_acc[0], cuts[1], tuned_acc[1],
               scratch_acc);
    } else {
        fprintf(stderr, "finetune: %s: %s\n", kiln_status_name(st),
                kiln_context_last_error(ctx));
    }
    kiln_model_destroy(tuned);
    kiln_model_destroy(scratch);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(test);
    kiln_dataset_destroy(train_hwc);
    kiln_dataset_destroy(test_hwc);
    kiln_context_destroy(ctx);
    return st == KILN_OK ? 0 : 1;
}
