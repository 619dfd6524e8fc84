/* Two convolutions trained with Adam and MSE on fixed data, the first with
 * ReLU: the process's CPU seconds per step (user + system, after 3
 * untimed steps), which on a machine busy with other work varies less
 * than the wall clock. For comparing two builds of the convolution kernels
 * run alternately: LD_LIBRARY_PATH=OLD_BUILD and NEW_BUILD in turns.
 *   depthwise: two 3x3 depthwise convolutions (groups == channels, 'same',
 *     the given stride) of CHANNELS (conv2d_depthwise.cl);
 *   pointwise: 1x1 CHANNELS -> CHANNELS, then 1x1 CHANNELS -> FILTERS of
 *     the given stride (the second's input gradient is computed, the
 *     first's not: nothing is before it); at stride 1 GEMMs on the layers'
 *     own buffers (conv2d_pointwise.c).
 * Usage: bench_conv depthwise|pointwise [SIZE [CHANNELS [STRIDE [STEPS [FILTERS]]]]]
 *        (56 144 1 20 96)
 * Prints "MODE SIZExSIZExCHANNELS stride S batch 8: T ms CPU/step". */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define BATCH 8

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char **argv)
{
    const int depthwise = argc > 1 && strcmp(argv[1], "depthwise") == 0;
    const int pointwise = argc > 1 && strcmp(argv[1], "pointwise") == 0;
    const int size = argc > 2 ? atoi(argv[2]) : 56, channels = argc > 3 ? atoi(argv[3]) : 144;
    const int stride = argc > 4 ? atoi(argv[4]) : 1, steps = argc > 5 ? atoi(argv[5]) : 20;
    const int filters = argc > 6 ? atoi(argv[6]) : 96;
    if ((!depthwise && !pointwise) || size < 1 || channels < 1 || stride < 1 || steps < 1 ||
        filters < 1) {
        fprintf(stderr, "usage: bench_conv depthwise|pointwise [SIZE [CHANNELS [STRIDE [STEPS "
                        "[FILTERS]]]]]\n");
        return 2;
    }
    kiln_context *ctx = NULL;
    kiln_model *m = NULL;
    if (kiln_context_create(NULL, &ctx) != KILN_OK || kiln_model_create(ctx, &m) != KILN_OK)
        return fprintf(stderr, "bench_conv: no context\n"), 1;
    const int32_t dims[] = {size, size, channels};
    const int side = depthwise ? 3 : 1;
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = channels,
                                .kernel_size = {side, side},
                                .strides = {pointwise ? 1 : stride, pointwise ? 1 : stride},
                                .padding = KILN_PADDING_SAME,
                                .groups = depthwise ? channels : 1,
                                .activation = KILN_ACTIVATION_RELU};
    const kiln_node h = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &conv);
    conv.activation = KILN_ACTIVATION_LINEAR;
    conv.filters = depthwise ? channels : filters;
    if (pointwise)
        conv.strides[0] = conv.strides[1] = stride;
    kiln_conv2d(m, h, &conv);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    if (kiln_model_compile(m, &co) != KILN_OK)
        return fprintf(stderr, "bench_conv: %s\n", kiln_context_last_error(ctx)), 1;
    size_t out_side = (size_t)(size + stride - 1) / (size_t)stride;
    if (depthwise)   /* both layers strided */
        out_side = (out_side + (size_t)stride - 1) / (size_t)stride;
    const size_t n_x = (size_t)BATCH * size * size * channels;
    const size_t n_y = (size_t)BATCH * out_side * out_side * (depthwise ? channels : filters);
    float *x = malloc(n_x * sizeof *x), *y = calloc(n_y, sizeof *y);
    if (!x || !y)
        return fprintf(stderr, "bench_conv: out of memory\n"), 1;
    for (size_t i = 0; i < n_x; i++)
        x[i] = (float)(i % 97) / 97.0f - 0.5f;
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = x,
                                 .dense_labels = y};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 3 && st == KILN_OK; i++)
        st = kiln_model_train_on_batch(m, &b, NULL);
    const double t0 = cpu_seconds();
    for (int i = 0; i < steps && st == KILN_OK; i++)
        st = kiln_model_train_on_batch(m, &b, NULL);
    const double t = cpu_seconds() - t0;
    if (st != KILN_OK)
        return fprintf(stderr, "bench_conv: %s\n", kiln_context_last_error(ctx)), 1;
    printf("%s %dx%dx%d stride %d batch %d: %.1f ms CPU/step\n", argv[1], size, size, channels,
           stride, BATCH, 1e3 * t / steps);
    free(x);
    free(y);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return 0;
}
