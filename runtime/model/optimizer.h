/* Private: optimizers over the flat parameter buffer. */
#ifndef KILN_RUNTIME_MODEL_OPTIMIZER_H
#define KILN_RUNTIME_MODEL_OPTIMIZER_H

#include "runtime/context/context.h"
#include "runtime/model/plan.h"
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

/* RMSprop centered with momentum (3), then the weights' moving average. */
#define KILN_MAX_OPTIMIZER_SLOTS 4

/* How many parameter-sized state buffers the optimizer keeps (at most
 * KILN_MAX_OPTIMIZER_SLOTS: RMSprop's mean square, then its momentum buffer
 * with momentum, then its mean gradient when centered; with use_ema the
 * weights' moving average after the optimizer's own). */
int kiln_optimizer_slot_count(const kiln_optimizer_options *o);

/* The index of the moving average among the slots (use_ema only). */
int kiln_optimizer_ema_slot(const kiln_optimizer_options *o);

/* The learning rate of update `step` (counting from 0) under o's schedule;
 * `o` must have been resolved (its schedule is then never NULL). */
double kiln_optimizer_learning_rate(const kiln_optimizer_options *o, int64_t step);

/* Whether x[0..n) are all finite, on the host. */
int kiln_optimizer_all_finite(const float *x, size_t n);

/* The calls below update the n parameters that start at `first` in the
 * model's flat layout (0, a pipeline stage's or a store shard's start);
 * `decay` says which of them weight decay applies to (the plan's; NULL:
 * all), each run of them one launch. */

/* Enqueues the check of update number `step` (as kiln_optimizer_apply
 * would make it) before it is committed, reading and writing nothing of
 * the parameters or the optimizer's state: `guard` is the step's sums on
 * the device, whose guard[KILN_SUM_UPDATE] it zeroes, then makes NaN when
 * an updated parameter or slot would not be finite; a non-finite gradient
 * makes guard[grad_at] NaN. Slots it leaves alone otherwise. */
kiln_status kiln_optimizer_check_update(kiln_device *dev, const kiln_optimizer_options *o,
                                        double lr, const kiln_buffer *params,
                                        const kiln_buffer *grads, kiln_buffer *const *slots,
                                        size_t n, int64_t step, kiln_buffer *guard, int grad_at,
                                        const kiln_decay_runs *decay, size_t first);

/* Applies update number `step` (counting from 1) to n parameters with
 * learning rate `lr`, then (use_ema) their moving average. With a `guard` (the step's sums, may be NULL), the
 * update is first checked (kiln_optimizer_check_update) and skipped on the
 * device when it would not be finite, so a bad update never reaches the
 * parameters or the optimizer's state and guard[KILN_SUM_UPDATE] read back
 * says so. With `guard_loss`, a non-finite loss (guard[KILN_SUM_LOSS]) also
 * skips it and a non-finite gradient makes that loss NaN; without, the
 * caller has checked the gradient and the guard's loss is not read (a
 * replica's share of a reduced step). */
kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step,
                                 kiln_buffer *guard, int guard_loss,
                                 const kiln_decay_runs *decay, size_t first);

/* Whether update number `step` on host arrays (kiln_optimizer_apply_host's)
 * leaves every parameter and slot finite, the gradient included; changes
 * nothing. */
int kiln_optimizer_update_finite_host(const kiln_optimizer_options *o, double lr,
                                      const float *params, const float *grads,
                                      float *const *slots, size_t n, int64_t step,
                                      const kiln_decay_runs *decay, size_t first);

/* The same update on host arrays, in float32 as on a device (central
 * storage), the moving average included. */
void kiln_optimizer_apply_host(const kiln_optimizer_options *o, double lr, float *params,
                               const float *grads, float *const *slots, size_t n,
                               int64_t step, const kiln_decay_runs *decay, size_t first);

#endif
