/* Private: optimizers over the flat parameter buffer. */
#ifndef KILN_RUNTIME_OPTIMIZER_H
#define KILN_RUNTIME_OPTIMIZER_H

#include "runtime/context.h"
#include "opencl/device.h"

/* Fills Keras's defaults into zero fields and checks the rest. */
kiln_status kiln_optimizer_resolve(kiln_context *ctx, kiln_optimizer_options *o);

/* How many parameter-sized state buffers the optimizer keeps. */
int kiln_optimizer_slot_count(const kiln_optimizer_options *o);

/* The learning rate of update `step` (counting from 0) under o's schedule;
 * `o` must have been resolved. */
double kiln_optimizer_learning_rate(const kiln_optimizer_options *o, int64_t step);

/* Applies update number `step` (counting from 1) to n parameters with
 * learning rate `lr`; skipped on the device when `guard` (the step's loss
 * sums, may be NULL) holds a non-finite loss. */
kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step,
                                 const kiln_buffer *guard);

/* The same update on host arrays, in float32 as on a device (central
 * storage). */
void kiln_optimizer_apply_host(const kiln_optimizer_options *o, double lr, float *params,
                               const float *grads, float *const *slots, size_t n,
                               int64_t step);

#endif
