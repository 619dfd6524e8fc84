/* Private: a distribution strategy drives one or more replicas through the
 * steps fit/evaluate/predict ask for. The model code never changes between
 * strategies; compile picks one. */
#ifndef KILN_RUNTIME_MODEL_STRATEGY_H
#define KILN_RUNTIME_MODEL_STRATEGY_H

#include "kiln.h"

#include <math.h>

/* One global batch as assembled on the host: n samples of features and
 * labels (int32 ids or floats, per the loss). A sharded batch (fit and
 * evaluate under a multi-process strategy with a `shard` op) holds only
 * this process's samples [first, first + count) of the n. */
typedef struct kiln_batch {
    int32_t n;
    const float *features;
    const void *labels;
    int sharded;
    int32_t first, count;
} kiln_batch;

/* Samples of `b` present on the host: its share, or all n. */
static inline int32_t kiln_batch_present(const kiln_batch *b, int32_t *first)
{
    *first = b->sharded ? b->first : 0;
    return b->sharded ? b->count : b->n;
}

/* What a step sums over its samples: the `double sums[KILN_N_SUMS]` that
 * steps report, in the order a replica's device sums hold them. */
enum {
    KILN_SUM_LOSS = 0,
    KILN_SUM_CORRECT,            /* accuracy */
    KILN_SUM_SAMPLES,            /* the samples these sums cover */
    KILN_SUM_TOP_K,              /* kiln_loss_plan's metrics */
    KILN_SUM_ABS_ERROR,
    KILN_SUM_BINARY,
    /* What the means divide by: the samples, or for per-position labels
     * the positions not ignored. */
    KILN_SUM_COUNTED,
    /* Several outputs: KILN_SUM_HEAD_SLOTS per output from here, laid out
     * as the slots above (its loss sum, correct count, samples, ...,
     * counted positions); the slots above then hold the weighted total as
     * a sum over samples. */
    KILN_SUM_HEADS,
    KILN_SUM_HEAD_SLOTS = KILN_SUM_HEADS,
    /* Not a sum over samples: 0, or NaN when the step's update was checked
     * and would have left a parameter or the optimizer's state non-finite
     * under a finite loss and gradient; it was then not applied. */
    KILN_SUM_UPDATE = KILN_SUM_HEADS + KILN_SUM_HEAD_SLOTS * KILN_MAX_MODEL_OUTPUTS,
    KILN_N_SUMS
};

/* Whether a training step's sums say its update was not applied: a
 * non-finite loss (or gradient, reported as the loss), or update. */
static inline int kiln_sums_skipped(const double *sums)
{
    return !isfinite(sums[KILN_SUM_LOSS]) || !isfinite(sums[KILN_SUM_UPDATE]);
}

static inline void kiln_sums_add(double *to, const double *from)
{
    for (int k = 0; k < KILN_N_SUMS; k++)
        to[k] += from[k];
}

/* What a strategy measured of itself (benchmarks read it). */
typedef struct kiln_strategy_stats {
    int64_t reductions;
    double reduce_seconds;   /* reducer threads summing buckets */
    double hidden_seconds;   /* of which before backward had ended on every replica */
    double busy_seconds;     /* pipeline: stages computing, summed over stages */
    int64_t max_staleness;   /* parameter server: most updates between pull and push */
    int64_t max_lead;        /* parameter server: most steps a worker started ahead */
    double stage_seconds;    /* pipeline: stages x training step time */
} kiln_strategy_stats;

typedef struct kiln_strategy_ops {
    const char *name;
    kiln_status (*create)(kiln_model *model, void **impl);
    void (*destroy)(void *impl);
    /* Forward, loss, backward and update on one global batch; `sums` gets
     * the KILN_N_SUMS sums over the batch (loss, correct count, ...). */
    kiln_status (*train_step)(void *impl, const kiln_batch *batch, double *sums);
    kiln_status (*eval_step)(void *impl, const kiln_batch *batch, double *sums);
    kiln_status (*predict_step)(void *impl, const kiln_batch *batch, float *outputs);
    kiln_status (*get_params)(void *impl, float *flat);
    /* Floats [offset, offset + count) of what get_params gives, without
     * the whole copy (kiln_model_get_tensor on a model of 10^7 floats and
     * hundreds of tensors). NULL: the caller takes get_params's. */
    kiln_status (*get_param_range)(void *impl, int64_t offset, int64_t count, float *out);
    kiln_status (*set_params)(void *impl, const float *flat);
    /* The replicas, for tests and for strategies built on others. */
    int32_t (*replica_count)(void *impl);
    /* Replicas each global batch is split across, in every process
     * (TensorFlow's num_replicas_in_sync): fit's per-replica batch size
     * times this is the global batch. NULL: 1 (asynchronous and pipeline
     * strategies take each batch whole). */
    int32_t (*replicas_in_sync)(void *impl);
    struct kiln_replica *(*replica)(void *impl, int32_t i);
    void (*stats)(void *impl, kiln_strategy_stats *out);
    /* Optimizer state: `slots` holds kiln_optimizer_slot_count() arrays of
     * n_param_floats each (checkpoints). */
    kiln_status (*get_slots)(void *impl, float *const *slots);
    kiln_status (*set_slots)(void *impl, const float *const *slots);
    /* A checkpoint's optimizer update count (kiln_model.n_optimizer_steps
     * just loaded), for a strategy whose store counts its updates itself
     * (the parameter servers: the count sets Adam's bias correction and
     * the schedule's step). NULL: the strategy reads the model's. */
    kiln_status (*set_optimizer_steps)(void *impl, int64_t steps);
    /* Micro-steps done in the current accumulation cycle; NULL: the
     * strategy does not accumulate (0). */
    int32_t (*micro_step)(void *impl);
    /* Device memory of replica (stage) i when it is more than one replica
     * object's (pipeline stages hold several activation sets); may be NULL. */
    void (*memory)(void *impl, int32_t i, kiln_memory_report *report);
    /* Asynchronous strategies: train_step reports in `sums` the batches
     * that finished since its last call, not necessarily its own; drain
     * waits for every batch in flight and reports the rest. NULL for
     * synchronous strategies. */
    kiln_status (*drain)(void *impl, double *sums);
    /* Multi-process strategies: which samples [*first, *first + *count) of
     * a global batch of n this process's replicas use, in training
     * (`train`) or evaluation, for the step `ahead` steps after the next;
     * fit and evaluate then gather only those. NULL: every sample. */
    void (*shard)(void *impl, int train, int64_t ahead, int32_t n, int32_t *first,
                  int32_t *count);
} kiln_strategy_ops;

extern const kiln_strategy_ops kiln_strategy_one_device;
extern const kiln_strategy_ops kiln_strategy_mirrored;
extern const kiln_strategy_ops kiln_strategy_central_storage;
extern const kiln_strategy_ops kiln_strategy_pipeline;
extern const kiln_strategy_ops kiln_strategy_multi_worker;
extern const kiln_strategy_ops kiln_strategy_parameter_server;
extern const kiln_strategy_ops kiln_strategy_parameter_server_mpi;

#endif
