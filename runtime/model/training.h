/* Private: where training stands (m->training), owned by train/: the
 * history, the current epoch's sums, the shuffle seed, the callbacks'
 * learning rate, why fit stopped, the timing statistics and the count of
 * optimizer updates. Defined in model/, below train/, because struct
 * kiln_model holds it. Other rooms touch it only as docs/architecture.md
 * ("The parts of a model") allows; tools/check_floors.py checks it. */
#ifndef KILN_RUNTIME_MODEL_TRAINING_H
#define KILN_RUNTIME_MODEL_TRAINING_H

#include "base/flag.h"
#include "kiln.h"
#include "runtime/model/strategy.h"

typedef struct kiln_training {
    kiln_epoch_record *history;
    int32_t n_history, cap_history;

    /* Where training stands inside the current epoch (saved in checkpoints;
     * fit with resume continues from here). */
    int64_t n_train_steps;       /* training steps run, all epochs */
    int64_t epoch_step;          /* steps done in epoch n_history */
    double epoch_loss, epoch_correct;
    double epoch_metrics[3];     /* the sums of kiln_loss_plan's metrics */
    int64_t epoch_seen;
    double epoch_counted;        /* the positions the sums cover (KILN_SUM_COUNTED) */
    double epoch_heads[KILN_SUM_HEAD_SLOTS * KILN_MAX_MODEL_OUTPUTS];  /* per output */
    uint64_t shuffle_seed;

    /* A learning rate a callback set (ReduceLROnPlateau, a scheduler): it
     * replaces the compile-time rate from then on, as Keras's assignment to
     * optimizer.learning_rate does. */
    int has_lr_override;
    double lr_override;
    /* Why the last fit stopped early (kiln_model_stop_reason), and the
     * application's request that the running call stop (kiln_model_stop,
     * from any thread: a flag, never the busy lock). */
    kiln_stop_cause stop_cause;
    char stop_reason[320];
    kiln_flag stop_requested;

    /* Since compile, in this process (kiln_model_training_stats). */
    int64_t timed_steps;
    double input_seconds, step_seconds;
    int64_t n_optimizer_steps;   /* the optimizer updates applied (checkpoints carry it) */
} kiln_training;

/* The learning rate of update `step` (counting from 0): the callbacks'
 * override, else the compile-time schedule's. Every strategy takes it
 * from here. */
double kiln_model_learning_rate(const kiln_model *m, int64_t step);

/* The optimizer bookkeeping of the synchronous strategies' training steps:
 * where a step stands in its gradient-accumulation cycle and, when it ends
 * one, the update it makes. */
typedef struct kiln_update {
    int32_t micro;          /* micro-steps done in the cycle before this one */
    int final_micro;        /* this step ends the cycle: the optimizer runs */
    int64_t number;         /* that update's number, from 1 */
    double lr;              /* and its learning rate */
} kiln_update;

/* Before a training step of `m`. */
void kiln_update_begin(kiln_update *u, const kiln_model *m);
/* After it, with the step's sums: the cycle moves on, and a final step
 * counts as an optimizer step unless its loss, a gradient or its update was
 * non-finite (kiln_sums_skipped: every replica then skipped the update). */
void kiln_update_end(kiln_update *u, kiln_model *m, const double *sums);

#endif
