/* Private: the Keras-style progress bar fit prints on stderr. */
#ifndef KILN_RUNTIME_TRAIN_PROGRESS_H
#define KILN_RUNTIME_TRAIN_PROGRESS_H

#include "kiln.h"

#include <stdio.h>

typedef struct kiln_progress_bar {
    FILE *out;
    int live;           /* redraw one line in place */
    int silent;
    int32_t epoch, epochs;
    int64_t steps;
    double start, last_draw;
} kiln_progress_bar;

/* Resolves KILN_VERBOSE_AUTO from whether `out` is a terminal. */
void kiln_progress_init(kiln_progress_bar *bar, kiln_verbosity verbosity, FILE *out);
void kiln_progress_begin(kiln_progress_bar *bar, int32_t epoch, int32_t epochs, int64_t steps);
/* The epoch's running means so far (an accuracy < 0 is not shown). */
void kiln_progress_step(kiln_progress_bar *bar, int64_t step, const kiln_epoch_record *record);
void kiln_progress_end(kiln_progress_bar *bar, const kiln_epoch_record *record);
/* Ends a live line that an error interrupted, so the next output starts clean. */
void kiln_progress_abort(kiln_progress_bar *bar);

/* Formats one bar line (no newline) into buf; shared by the live and the
 * per-epoch output, and unit-tested. `seconds` is elapsed time at the end of
 * the epoch and the estimated time left before it. `validation` (may be
 * NULL) gives the val_ values when it has them, and for a model of several
 * outputs each output's values, which then replace `accuracy`. */
void kiln_progress_format(char *buf, size_t size, int64_t step, int64_t steps, double seconds,
                          double per_step, double loss, double accuracy,
                          const kiln_epoch_record *validation);

#endif
