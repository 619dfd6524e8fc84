/* The seed CNN, built through kiln's Sequential-style API (examples/
 * fashion_mnist.c trains it, examples/model_parallel.c widens its head; the
 * tests and benchmarks build it from here too). */
#ifndef KILN_EXAMPLES_SEED_CNN_H
#define KILN_EXAMPLES_SEED_CNN_H

#include "kiln.h"

/* Adds Input(28, 28, 1), Conv2D(32, 3x3, relu), MaxPooling2D(2) and Flatten
 * to an empty model: the seed CNN's convolutional part. */
void seed_cnn_stem(kiln_model *model);

/* The seed CNN's layers on an empty model: the stem, Dense(64, relu) and
 * Dense(10, softmax). */
void seed_cnn_layers(kiln_model *model);

#endif
