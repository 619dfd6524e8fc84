/* Imported networks' import time, parameter count, speed and device memory,
 * through the public API only (test/bench/import.sh and zoo.sh run it
 * beside torch_zoo.py and print the tables):
 *   bench_import NET.onnx [--batch B] [--steps N] [--warmup W] [--infer]
 *   bench_import --handmade resnet18 --size S [--batch B] [--steps N] [--warmup W]
 * The first imports an ONNX classifier (input (N, 3, S, S)); the second
 * builds torchvision's resnet18 layer for layer in kiln's API (channels
 * last), the network import.sh compares the imported one with. Either gets
 * a softmax head, sparse categorical cross-entropy and SGD with momentum
 * 0.9, and trains W untimed steps, then N timed ones with
 * kiln_model_train_on_batch on fixed synthetic batches; with --infer it
 * runs kiln_model_predict on one batch as many times instead. It prints one
 * line:
 *   import_s P params N samples_per_s R ms_per_step T peak_device_bytes M
 * (import_s is 0 for --handmade; M is kiln_model_memory's peak of the one
 * replica: weights, gradients, optimizer state, activations, workspace).
 * Exits 0, 1 on a kiln error, 2 on bad usage, 77 without an OpenCL device. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#endif
#include "kiln.h"
#include "bench_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLASSES 10

/* conv (no bias) -> batch norm, ReLU unless `linear`, as torchvision's
 * conv/bn pairs. */
static kiln_node conv_bn(kiln_model *m, kiln_node x, int filters, int k, int stride, int pad,
                         int linear)
{
    const kiln_conv2d_options co = {.struct_size = sizeof co, .filters = filters,
                                    .kernel_size = {k, k}, .strides = {stride, stride},
                                    .padding = KILN_PADDING_EXPLICIT,
                                    .pads = {pad, pad, pad, pad}, .no_bias = 1};
    const kiln_batch_norm_options bo = {.struct_size = sizeof bo, .momentum = 0.9f,
                                        .epsilon = 1e-5f,
                                        .activation = linear ? KILN_ACTIVATION_LINEAR
                                                             : KILN_ACTIVATION_RELU};
    return kiln_batch_normalization(m, kiln_conv2d(m, x, &co), &bo);
}

/* torchvision's BasicBlock: two 3x3 conv/bn, a 1x1 conv/bn shortcut where
 * the shape changes, the sum through ReLU. */
static kiln_node basic_block(kiln_model *m, kiln_node x, int in, int filters, int stride)
{
    kiln_node y = conv_bn(m, x, filters, 3, stride, 1, 0);
    y = conv_bn(m, y, filters, 3, 1, 1, 1);
    const kiln_node shortcut = stride != 1 || in != filters
                                   ? conv_bn(m, x, filters, 1, stride, 0, 1) : x;
    const kiln_node both[2] = {y, shortcut};
    const kiln_add_options ao = {.struct_size = sizeof ao};
    const kiln_node sum = kiln_add(m, both, 2, &ao);
    const kiln_activation_layer_options relu = {.struct_size = sizeof relu};
    return kiln_activation_layer(m, sum, KILN_ACTIVATION_RELU, &relu);
}

static kiln_status handmade_resnet18(kiln_context *ctx, long size, kiln_model **out)
{
    kiln_status st = kiln_model_create(ctx, out);
    if (st != KILN_OK)
        return st;
    kiln_model *m = *out;
    const int32_t dims[3] = {(int32_t)size, (int32_t)size, 3};
    kiln_node x = conv_bn(m, kiln_input(m, 3, dims, NULL), 64, 7, 2, 3, 0);
    const kiln_pool2d_options po = {.struct_size = sizeof po, .pool_size = {3, 3},
                                    .strides = {2, 2}, .padding = KILN_PADDING_EXPLICIT,
                                    .pads = {1, 1, 1, 1}};
    x = kiln_max_pooling2d(m, x, &po);
    int in = 64;
    static const int widths[4] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; stage++) {
        x = basic_block(m, x, in, widths[stage], stage == 0 ? 1 : 2);
        x = basic_block(m, x, widths[stage], widths[stage], 1);
        in = widths[stage];
    }
    const kiln_global_pool2d_options go = {.struct_size = sizeof go};
    x = kiln_global_average_pooling2d(m, x, &go);
    const kiln_dense_options fc = {.struct_size = sizeof fc, .units = CLASSES};
    kiln_dense(m, x, &fc);
    return KILN_OK;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *handmade = NULL;
    long batch = 8, steps = 10, warmup = 2, size = 64;
    int infer = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (strcmp(argv[i], "--batch") == 0)
            ok = bench_parse_long("bench_import", "--batch", v, 1, 4096, &batch), i++;
        else if (strcmp(argv[i], "--steps") == 0)
            ok = bench_parse_long("bench_import", "--steps", v, 1, 1000000, &steps), i++;
        else if (strcmp(argv[i], "--warmup") == 0)
            ok = bench_parse_long("bench_import", "--warmup", v, 0, 1000000, &warmup), i++;
        else if (strcmp(argv[i], "--size") == 0)
            ok = bench_parse_long("bench_import", "--size", v, 8, 4096, &size), i++;
        else if (strcmp(argv[i], "--infer") == 0)
            infer = 1;
        else if (strcmp(argv[i], "--handmade") == 0 && v)
            handmade = v, i++;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            ok = 0;
        if (!ok || (handmade && strcmp(handmade, "resnet18") != 0)) {
            fprintf(stderr, "usage: bench_import NET.onnx | --handmade resnet18 --size S "
                    "[--batch B] [--steps N] [--warmup W] [--infer]\n");
            return 2;
        }
    }
    if (!path == !handmade) {
        fprintf(stderr, "bench_import: give an ONNX file or --handmade resnet18\n");
        return 2;
    }
    char err[512] = "";
    const kiln_context_options cto = {.struct_size = sizeof cto, .seed = 1,
                                      .error_buffer = err, .error_buffer_size = sizeof err};
    kiln_context *ctx = NULL;
    const kiln_status made = kiln_context_create(&cto, &ctx);
    if (made != KILN_OK) {
        fprintf(stderr, "bench_import: %s\n", err);
        return made == KILN_ERROR_NO_DEVICE ? 77 : 1;
    }
    kiln_model *m = NULL;
    const double t0 = bench_now();
    kiln_status st = path ? kiln_model_import_onnx(ctx, path, NULL, &m)
                          : handmade_resnet18(ctx, size, &m);
    const double import_s = path ? bench_now() - t0 : 0.0;
    if (st == KILN_OK) {
        const kiln_activation_layer_options so = {.struct_size = sizeof so};
        kiln_activation_layer(m, KILN_NODE_PREVIOUS, KILN_ACTIVATION_SOFTMAX, &so);
        const kiln_optimizer_options sgd = {.struct_size = sizeof sgd,
                                            .kind = KILN_OPTIMIZER_SGD,
                                            .learning_rate = 1e-3f, .momentum = 0.9f};
        const kiln_compile_options co = {.struct_size = sizeof co,
                                         .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                         .optimizer = &sgd,
                                         .strategy = KILN_STRATEGY_ONE_DEVICE};
        st = kiln_model_compile(m, &co);
    }
    int64_t params = 0, sample = 0;
    int64_t out_size = 1;
    if (st == KILN_OK)
        st = kiln_model_parameter_count(m, &params);
    kiln_tensor_info out = {.struct_size = sizeof out};
    if (st == KILN_OK)
        st = kiln_model_output_info(m, 0, &out);
    for (int d = 0; st == KILN_OK && d < out.rank; d++)
        out_size *= out.dims[d];
    kiln_tensor_info in = {.struct_size = sizeof in};
    if (st == KILN_OK)
        st = kiln_model_input_info(m, 0, &in);
    if (st == KILN_OK) {
        sample = 1;
        for (int d = 0; d < in.rank; d++)
            sample *= in.dims[d];
    }
    float *x = st == KILN_OK ? malloc((size_t)(batch * sample) * sizeof *x) : NULL;
    int32_t *y = malloc((size_t)batch * sizeof *y);
    float *p = malloc((size_t)batch * (size_t)out_size * sizeof *p);
    if (st == KILN_OK && (!x || !y || !p)) {
        fprintf(stderr, "bench_import: out of memory\n");
        return 1;
    }
    uint64_t seed = 9;
    for (int64_t i = 0; x && i < batch * sample; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)(seed >> 40) / 8388608.0f - 1.0f;
    }
    for (long i = 0; y && i < batch; i++)
        y[i] = (int32_t)(i % CLASSES);
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = batch, .features = x,
                                 .sparse_labels = y};
    const kiln_batch_arrays in_only = {.struct_size = sizeof in_only, .count = batch,
                                       .features = x};
    double t1 = 0.0;
    for (long s = 0; st == KILN_OK && s < warmup + steps; s++) {
        if (s == warmup)
            t1 = bench_now();
        kiln_metrics mt = {.struct_size = sizeof mt};
        st = infer ? kiln_model_predict(m, &in_only, p, (int32_t)batch)
                   : kiln_model_train_on_batch(m, &b, &mt);
    }
    const double seconds = bench_now() - t1;
    kiln_memory_report mem = {.struct_size = sizeof mem};
    if (st == KILN_OK)
        st = kiln_model_memory(m, 0, &mem);
    if (st != KILN_OK) {
        fprintf(stderr, "bench_import: %s\n", kiln_context_last_error(ctx));
    } else {
        printf("import_s %.4f params %lld samples_per_s %.2f ms_per_step %.3f "
               "peak_device_bytes %llu\n", import_s, (long long)params,
               (double)(batch * steps) / seconds, 1e3 * seconds / (double)steps,
               (unsigned long long)mem.device_peak_bytes);
    }
    free(x);
    free(y);
    free(p);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return st == KILN_OK ? 0 : 1;
}
