/* Private: optimizers over the flat parameter buffer. */
#ifndef KILN_RUNTIME_MODEL_OPTIMIZER_H
#define KILN_RUNTIME_MODEL_OPTIMIZER_H

#include "runtime/context/context.h"
#include "opencl/device.h"

/* Copies the caller's options (NULL: all defaults) into `o` and their
 * schedule (NULL: constant) into `schedule`, each as its struct_size says
 * (kiln_options_take), and points o->schedule at `schedule`: nothing
 * points at the caller's memory after. `why` names a struct_size too
 * short. */
kiln_status kiln_optimizer_take(kiln_optimizer_options *o, kiln_lr_schedule *schedule,
                                const kiln_optimizer_options *src, kiln_diag *why);

/* Fills Keras's defaults into zero fields of options taken by
 * kiln_optimizer_take and checks the rest. */
kiln_status kiln_optimizer_resolve(kiln_context *ctx, kiln_optimizer_options *o);

/* How many parameter-sized state buffers the optimizer keeps. */
int kiln_optimizer_slot_count(const kiln_optimizer_options *o);

/* The learning rate of update `step` (counting from 0) under o's schedule;
 * `o` must have been resolved (its schedule is then never NULL). */
double kiln_optimizer_learning_rate(const kiln_optimizer_options *o, int64_t step);

/* Whether x[0..n) are all finite, on the host. */
int kiln_optimizer_all_finite(const float *x, size_t n);

/* Enqueues a check of grads[0..n) that makes guard[0] NaN when any of them
 * is NaN or infinite (and leaves it alone otherwise), so whoever reads the
 * guard sees the step as one with a non-finite loss. */
kiln_status kiln_optimizer_check_finite(kiln_device *dev, const kiln_buffer *grads, size_t n,
                                        kiln_buffer *guard);

/* Applies update number `step` (counting from 1) to n parameters with
 * learning rate `lr`. With a `guard` (the step's loss sums, may be NULL),
 * a non-finite gradient first makes guard[0] NaN, and the update is
 * skipped on the device when guard[0] is not finite: a non-finite loss or
 * gradient never reaches the parameters, and the loss read back says so. */
kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step,
                                 kiln_buffer *guard);

/* The same update on host arrays, in float32 as on a device (central
 * storage). */
void kiln_optimizer_apply_host(const kiln_optimizer_options *o, double lr, float *params,
                               const float *grads, float *const *slots, size_t n,
                               int64_t step);

#endif
