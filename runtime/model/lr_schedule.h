/* Private: the learning-rate schedules of kiln_lr_schedule, their checks
 * and the rate at each optimizer step. */
#ifndef KILN_RUNTIME_MODEL_LR_SCHEDULE_H
#define KILN_RUNTIME_MODEL_LR_SCHEDULE_H

#include "runtime/context/context.h"

/* A piecewise constant schedule's boundaries and values, where a model or
 * a parsed description keeps its own copy. */
typedef struct kiln_lr_pieces {
    int64_t boundaries[KILN_LR_MAX_BOUNDARIES];
    float values[KILN_LR_MAX_BOUNDARIES + 1];
} kiln_lr_pieces;

/* Checks the warm-up target and the piecewise settings of o's schedule,
 * and gives a piecewise schedule's learning_rate left 0 its values[0]:
 * kiln_optimizer_resolve calls it before filling the optimizer's defaults.
 * KILN_ERROR_INVALID_ARGUMENT naming the field and its value. */
kiln_status kiln_lr_schedule_check(kiln_context *ctx, kiln_optimizer_options *o);

/* Copies the boundaries and values of a checked schedule into `own` and
 * points `s` at them, so nothing points at the caller's memory after. */
void kiln_lr_schedule_own(kiln_lr_schedule *s, kiln_lr_pieces *own);

/* The rate of update `step` (counting from 0) under resolved options. */
double kiln_lr_schedule_rate(const kiln_optimizer_options *o, int64_t step);

#endif
