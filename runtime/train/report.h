/* Private: the training report fit writes (kiln_fit_options.report_path):
 * one self-contained HTML file, inline SVG charts of the history and a
 * table of the run, rewritten (temp file + rename) after every epoch. */
#ifndef KILN_RUNTIME_TRAIN_REPORT_H
#define KILN_RUNTIME_TRAIN_REPORT_H

#include "runtime/model/model.h"

typedef struct kiln_report kiln_report;

/* Before training, which runs `epochs` epochs on `train`: gathers what
 * does not change during the fit (summary, devices, distribution) and
 * writes a first report with the history so far. *out is NULL when
 * o->report_path is NULL or m is not rank 0.
 * KILN_ERROR_IO naming the path when it cannot be written; OOM. */
kiln_status kiln_report_open(kiln_model *m, const kiln_dataset *train, const kiln_fit_options *o,
                             int32_t epochs, kiln_report **out);

/* After each epoch, whatever its outcome: records the learning rate of the
 * epochs the history gained (the schedule's rate for the next update, as
 * Keras reports the optimizer's rate at an epoch's end) and rewrites the
 * report. A failed write is logged as a warning; training goes on. NULL:
 * nothing. */
void kiln_report_epoch(kiln_report *r);

/* At the end of fit: the last report, saying whether training finished or
 * how it stopped (`status`, and the context's message for it), then frees
 * `r`. NULL: nothing. */
void kiln_report_close(kiln_report *r, kiln_status status);

#endif
