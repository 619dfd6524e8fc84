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

/* Columns per sample of a replica's metric buffer: top-k, absolute error,
 * binary accuracy (KILN_SUM_TOP_K.. of the sums). */
#define KILN_METRIC_COLUMNS 3

/* Takes the metrics kiln_compile_options asks for into m->loss (made by
 * kiln_loss_plan_make), checking that they fit the loss and output. */
kiln_status kiln_metric_plan_make(kiln_model *m, const kiln_compile_options *o);

/* How many of the metrics the plan computes. */
int kiln_metric_count(const kiln_loss_plan *plan);

/* The name metric c (0 top-k, 1 absolute error, 2 binary) goes by in the
 * history and to callbacks, or NULL when the plan does not compute it. */
const char *kiln_metric_name(const kiln_loss_plan *plan, int c);

/* Per-sample metrics of the outputs y against the labels into `metric`,
 * then their sums into sums[KILN_SUM_TOP_K..]. */
kiln_status kiln_metric_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                                const kiln_buffer *y, const kiln_buffer *labels,
                                kiln_buffer *metric, kiln_buffer *sums, int32_t n, int64_t cols);

/* Fills what evaluate reports from the sums over `count` samples. */
void kiln_metrics_from_sums(const kiln_loss_plan *plan, const double *sums, double count,
                            kiln_metrics *out);

#endif
