/* Private: losses and the accuracy metric that goes with them. */
#ifndef KILN_RUNTIME_LOSS_H
#define KILN_RUNTIME_LOSS_H

#include "runtime/model.h"

/* Checks that `loss` fits the model's output and picks its kernel: fused
 * with a softmax (cross-entropy) or sigmoid (binary cross-entropy) output. */
kiln_status kiln_loss_plan_make(kiln_model *m, kiln_loss loss, int want_accuracy,
                                kiln_loss_plan *plan);

/* Per-sample loss and metric, the output gradient (w.r.t. z when fused,
 * else w.r.t. y) scaled by `scale`, and their two sums in `sums`. */
kiln_status kiln_loss_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                              const kiln_buffer *z, const kiln_buffer *y,
                              const kiln_buffer *labels, kiln_buffer *grad, kiln_buffer *loss,
                              kiln_buffer *correct, kiln_buffer *sums, int32_t n, int64_t cols,
                              float scale);

const char *kiln_loss_name(kiln_loss loss);

#endif
