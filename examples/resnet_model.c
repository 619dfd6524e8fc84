#include "resnet_model.h"

static kiln_node conv(kiln_model *m, kiln_node x, int32_t filters, int32_t size, int32_t stride)
{
    kiln_conv2d_options o = {.struct_size = sizeof o, .filters = filters,
                             .kernel_size = {size, size}, .strides = {stride, stride},
                             .padding = KILN_PADDING_SAME, .activation = KILN_ACTIVATION_LINEAR};
    return kiln_conv2d(m, x, &o);
}

static kiln_node bn(kiln_model *m, kiln_node x, kiln_activation act, int synchronized)
{
    kiln_batch_norm_options o = {.struct_size = sizeof o, .synchronized = synchronized,
                                 .activation = act};
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
    kiln_pool2d_options pool = {.struct_size = sizeof pool, .pool_size = {3, 3}, .strides = {2, 2},
                                .padding = KILN_PADDING_SAME};
    x = kiln_max_pooling2d(m, x, &pool);
    static const int32_t filters[] = {64, 64, 128, 128, 256, 256, 512, 512};
    static const int32_t strides[] = {1, 1, 2, 1, 2, 1, 2, 1};
    int32_t in = 64;
    for (int b = 0; b < 8; b++) {
        x = block(m, x, in, filters[b], strides[b], synchronized);
        in = filters[b];
    }
    x = kiln_global_average_pooling2d(m, x, NULL);
    kiln_dense_options head = {.struct_size = sizeof head, .units = classes,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    return kiln_dense(m, x, &head);
}
