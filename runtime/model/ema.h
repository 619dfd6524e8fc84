/* Private: the moving average of the trainable weights
 * (kiln_optimizer_options.use_ema). The averages are the optimizer's last
 * slot, so every strategy keeps, checkpoints and restores them where it
 * keeps the optimizer's state; this file is what reads them out. */
#ifndef KILN_RUNTIME_MODEL_EMA_H
#define KILN_RUNTIME_MODEL_EMA_H

#include "runtime/model/model.h"

/* Whether the averages stand in for the weights now: use_ema, and at
 * least one update applied (before it the slot holds nothing). */
int kiln_ema_active(const kiln_model *m);

/* The model's parameters (n_param_floats) as inference uses them: the
 * averages over the trainable prefix when kiln_ema_active, the rest as
 * they are (the strategy's get_params otherwise). */
kiln_status kiln_ema_params(kiln_model *m, float *flat);

/* When kiln_ema_active, sets the parameters to kiln_ema_params and
 * *kept to a copy of the weights for kiln_ema_swap_out; else *kept NULL. */
kiln_status kiln_ema_swap_in(kiln_model *m, float **kept);

/* Writes `kept` back (bit for bit) and frees it; NULL: nothing. Returns
 * `st` unless that is KILN_OK and writing back fails. */
kiln_status kiln_ema_swap_out(kiln_model *m, float *kept, kiln_status st);

/* Writes new weights (n_param_floats) through the strategy and, when
 * kiln_ema_active, restarts the averages from them: what the public calls
 * that set weights use (set_weights, set_tensor, load_weights, best
 * weights restored). */
kiln_status kiln_model_write_params(kiln_model *m, const float *flat);

#endif
