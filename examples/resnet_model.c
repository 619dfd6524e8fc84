#include "resnet_model.h"

static kiln_node conv(kiln_model *m, kiln_node x, int32_t filters, int32_t size, int32_t stride)
{
    kiln_conv2d_options o = {sizeof o, NULL, filters, {size, size}, {stride, stride},
                             KILN_PADDING_SAME, KILN_ACTIVATION_LINEAR, 0};
    return kiln_conv2d(m, x, &o);
}

static kiln_node bn(kiln_model *m, kiln_node x, kiln_activation act, int synchronized)
{
    kiln_batch_norm_options o = {sizeof o, NULL, 0, 0, synchronized, act};
    return kiln_batch_normalization(m, x, &o);
}

static kiln_node block(kiln_model *m, kiln_node x, int32_t in_filters, int32_t filters,
                       int32_t stride, int sync)
{
    kiln_node y = bn(m, conv(m, x, filters, 3, stride), KILN_ACTIVATION_RELU, sync);
    y = bn(m, conv(m, y, filters, 3, 1), KILN_ACTIVATION_LINEAR, sync);
    kiln_node shortcut = x;
    if (stride != 1 || in_filters != filters)
        shortcut = bn(m, conv(m, x, filters, 1, stride), KILN_ACTIVATION_LINEAR, sync);
    const kiln_node both[] = {y, shortcut};
    return kiln_activation_layer(m, kiln_add(m, both, 2, NULL), KILN_ACTIVATION_RELU, NULL);
}

kiln_node resnet_build(kiln_model *m, int32_t height, int32_t width, int32_t channels,
                       int32_t classes, int synchronized)
{
    const int32_t shape[] = {height, width, channels};
    kiln_node x = kiln_input(m, 3, shape, NULL);
    x = bn(m, conv(m, x, 64, 7, 2), KILN_ACTIVATION_RELU, synchronized);
    kiln_pool2d_options pool = {sizeof pool, NULL, {3, 3}, {2, 2}, KILN_PADDING_SAME};
    x = kiln_max_pooling2d(m, x, &pool);
    static const int32_t filters[] = {64, 64, 128, 128, 256, 256, 512, 512};
    static const int32_t strides[] = {1, 1, 2, 1, 2, 1, 2, 1};
    int32_t in = 64;
    for (int b = 0; b < 8; b++) {
        x = block(m, x, in, filters[b], strides[b], synchronized);
        in = filters[b];
    }
    x = kiln_global_average_pooling2d(m, x, NULL);
    kiln_dense_options head = {sizeof head, NULL, classes, KILN_ACTIVATION_SOFTMAX, 0};
    return kiln_dense(m, x, &head);
}
