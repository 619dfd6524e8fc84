#include "seed_cnn.h"

void seed_cnn_stem(kiln_model *m)
{
    const int32_t shape[] = {28, 28, 1};
    const kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 32,
                                      .kernel_size = {3, 3}, .strides = {1, 1},
                                      .padding = KILN_PADDING_VALID,
                                      .activation = KILN_ACTIVATION_RELU};
    const kiln_pool2d_options pool = {.struct_size = sizeof pool, .pool_size = {2, 2},
                                      .strides = {2, 2}, .padding = KILN_PADDING_VALID};
    kiln_input(m, 3, shape, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &pool);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
}

void seed_cnn_layers(kiln_model *m)
{
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 64,
                                       .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 10,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    seed_cnn_stem(m);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
}
