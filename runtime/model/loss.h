/* Private: losses and the accuracy metric that goes with them. */
#ifndef KILN_RUNTIME_MODEL_LOSS_H
#define KILN_RUNTIME_MODEL_LOSS_H

#include "runtime/model/model.h"

/* Checks that `loss` fits output node `output` and picks its kernel: fused
 * with a softmax (cross-entropy) or sigmoid (binary cross-entropy) output. */
kiln_status kiln_loss_plan_make_for(kiln_model *m, kiln_node output, kiln_loss loss,
                                    int want_accuracy, kiln_loss_plan *plan);

/* Takes label smoothing `ls` (Keras's label_smoothing) into the plan of
 * output `k`: in [0, 1] and for the cross-entropies only, else
 * KILN_ERROR_INVALID_ARGUMENT naming the field, the output and the value. */
kiln_status kiln_loss_take_smoothing(kiln_model *m, int32_t k, const char *field, float ls,
                                     kiln_loss_plan *plan);

/* Bytes of one sample's labels under the plan: an id per position, or the
 * output's floats. */
size_t kiln_loss_label_bytes(const kiln_loss_plan *plan);

/* The positions of n samples' labels that count in the loss: n * positions
 * less those equal to the ignore class. The gradient scale of a batch is
 * kiln_loss_scale of its global count (0 when nothing counts). */
/* The first of n sparse ids outside [0, classes) that is not the ignore
 * class, or -1; and where id i sits, "sample S" or "sample S, position P",
 * for messages. */
int64_t kiln_loss_bad_label(const kiln_loss_plan *plan, const int32_t *y, int64_t n);
void kiln_loss_label_place(const kiln_loss_plan *plan, int64_t i, char *buf, size_t size);

double kiln_loss_counted(const kiln_loss_plan *plan, const void *labels, int32_t n);
float kiln_loss_scale(double counted);

/* Per-row (position) loss and metric for n samples, the output gradient
 * (w.r.t. z when fused, else w.r.t. y) scaled by `scale`, and their sums
 * (loss, correct, samples, counted positions) in `sums`. */
kiln_status kiln_loss_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                              const kiln_buffer *z, const kiln_buffer *y,
                              const kiln_buffer *labels, kiln_buffer *grad, kiln_buffer *loss,
                              kiln_buffer *correct, kiln_buffer *sums, int32_t n, float scale);

const char *kiln_loss_name(kiln_loss loss);

/* Columns per sample of a replica's metric buffer: top-k, absolute error,
 * binary accuracy (KILN_SUM_TOP_K.. of the sums). */
#define KILN_METRIC_COLUMNS 3

/* Takes the metrics kiln_compile_options asks for into the plan of a
 * model's only output, checking that they fit its loss and output. */
kiln_status kiln_metric_plan_make(kiln_model *m, const kiln_compile_options *o);

/* How many of the metrics the plan computes. */
int kiln_metric_count(const kiln_loss_plan *plan);

/* The name metric c (0 top-k, 1 absolute error, 2 binary) goes by in the
 * history and to callbacks, or NULL when the plan does not compute it. */
const char *kiln_metric_name(const kiln_loss_plan *plan, int c);

/* Per-row metrics of the outputs y against the labels into `metric`,
 * then their sums into sums[KILN_SUM_TOP_K..]. */
kiln_status kiln_metric_enqueue(kiln_device *dev, const kiln_loss_plan *plan,
                                const kiln_buffer *y, const kiln_buffer *labels,
                                kiln_buffer *metric, kiln_buffer *sums, int32_t n);

/* Fills what evaluate reports from the sums, the means over
 * sums[KILN_SUM_COUNTED]. */
void kiln_metrics_from_sums(const kiln_loss_plan *plan, const double *sums, kiln_metrics *out);

#endif
