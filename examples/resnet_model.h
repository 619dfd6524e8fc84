/* The seed ResNet, built through kiln's functional API (examples/resnet.c
 * trains it; test/train/test_resnet.c checks its parameter count). */
#ifndef KILN_EXAMPLES_RESNET_MODEL_H
#define KILN_EXAMPLES_RESNET_MODEL_H

#include "kiln.h"

/* Adds the seed's create_resnet_model(input_shape, num_classes) to an empty
 * model: 7x7/2 stem with 64 filters, batch norm, ReLU, 3x3/2 max pooling;
 * residual blocks of 64, 64, 128/2, 128, 256/2, 256, 512/2, 512 filters
 * (conv 3x3 - BN - ReLU - conv 3x3 - BN, plus a 1x1 strided conv and BN on
 * the shortcut where the block downsamples or widens; Add; ReLU); global
 * average pooling; a softmax Dense head. Convolutions keep Keras's default
 * bias. `synchronized` makes every batch norm synchronised across
 * replicas. Returns the output node. */
kiln_node resnet_build(kiln_model *model, int32_t height, int32_t width, int32_t channels,
                       int32_t classes, int synchronized);

#endif
