/* Private: the callbacks of one fit, the application's (kiln_fit_options's
 * callback and function specs) and Keras's built-ins, each with the state
 * it keeps over the fit. fit calls them at its events; they act on the
 * model (its learning rate, its weights, files) and may ask fit to stop.
 * Every call accepts a NULL kiln_callbacks (a fit without callbacks). */
#ifndef KILN_RUNTIME_TRAIN_CALLBACKS_H
#define KILN_RUNTIME_TRAIN_CALLBACKS_H

#include "runtime/model/model.h"

typedef struct kiln_callbacks kiln_callbacks;

/* Checks o's callbacks (kinds, options, monitored names against the values
 * this fit computes; `validation`: it evaluates after each epoch) and makes
 * their state, changing nothing on the model or on disk. *out is NULL when
 * the fit has no callback. */
kiln_status kiln_callbacks_create(kiln_model *m, const kiln_fit_options *o, int validation,
                                  kiln_callbacks **out);
void kiln_callbacks_destroy(kiln_callbacks *c);

/* The fit starts: files are opened (CSVLogger). */
kiln_status kiln_callbacks_begin(kiln_callbacks *c);

/* Before epoch `epoch` (counting from 0, resumed epochs included): the
 * learning-rate schedulers. */
kiln_status kiln_callbacks_epoch_begin(kiln_callbacks *c, int32_t epoch);

/* After a step (KILN_EVENT_BATCH_END) or an epoch (KILN_EVENT_EPOCH_END; `r`
 * is its record, in the history already): every callback in order. A stop
 * one asks for is set on the model (kiln_model_record_stop) for fit to act on
 * once all have run; an abort returns KILN_ERROR_STOPPED at once. */
kiln_status kiln_callbacks_notify(kiln_callbacks *c, kiln_event event, int32_t epoch,
                                  int64_t step, int64_t steps, const kiln_epoch_record *r);

/* Whether a non-finite step ends fit normally (TerminateOnNaN). */
int kiln_callbacks_terminate_on_nan(const kiln_callbacks *c);

/* The fit went well (ran out of epochs or stopped): EarlyStopping's best
 * weights go back. */
kiln_status kiln_callbacks_end(kiln_callbacks *c);

#endif
