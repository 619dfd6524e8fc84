/* The data-parallel strategies, one engine in three modes:
 *  one_device:      one replica on a worker thread of its own, as each of
 *                   mirrored's, so that the watchdog bounds its steps;
 *  mirrored:        a replica per device, each on its own worker thread;
 *                   gradients are summed by the shared-memory reducer bucket
 *                   by bucket while backward goes on, and every replica
 *                   applies the same update to its own copy;
 *  central_storage: the same replicas compute gradients; parameters and
 *                   optimizer state live on the host, which applies the update;
 *  multi_worker:    mirrored in every process of an MPI job: the global batch
 *                   is split over every process's replicas, and each bucket,
 *                   once summed over the local replicas, is summed over the
 *                   processes (comm/mpi_world.c) by the reducer's cross stage,
 *                   still while backward goes on.
 * A global batch is split into contiguous shards (uneven when it must be);
 * each replica scales its loss by 1 / global batch (the positions counted
 * in it, for per-position labels), so the summed gradient is exactly the
 * global mean. A watchdog bounds every step. */
#include "comm/collective.h"
#include "comm/mpi_world.h"
#include "comm/reducer.h"
#include "runtime/parallel/first_run.h"
#include "runtime/model/clip.h"
#include "runtime/model/loss.h"
#include "runtime/model/optimizer.h"
#include "runtime/parallel/replica.h"
#include "runtime/parallel/crew.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


typedef enum dp_mode { DP_ONE_DEVICE, DP_MIRRORED, DP_CENTRAL, DP_MULTI_WORKER } dp_mode;
typedef enum dp_job { JOB_TRAIN, JOB_EVAL, JOB_PREDICT } dp_job;

typedef struct dp_strategy dp_strategy;

typedef struct dp_replica {
    dp_strategy *owner;
    kiln_replica *r;
    /* the current job */
    dp_job job;
    kiln_batch shard;
    float *outputs;
    double sums[KILN_N_SUMS];
    int64_t params_version;      /* central storage: host parameters it holds */
    double backward_end;         /* kiln_now() when its backward returned */
    float *state;                /* its non-trainable state after its last step */
    int nonfinite;               /* the reduced gradient of its last step was not finite */
    int checked;                 /* its device checked its last step's update */
} dp_replica;

struct dp_strategy {
    kiln_model *m;
    dp_mode mode;
    int n;
    dp_replica *reps;
    kiln_reducer *reducer;       /* mirrored and central storage */
    kiln_bucket *buckets;
    int n_buckets;
    int *bucket_at_node;         /* per node: bucket completed after its backward, or -1 */
    /* the current step */
    kiln_update update;          /* the step's place in its accumulation cycle */
    float global_scale;
    /* central storage */
    float *host_params, *host_slots[KILN_MAX_OPTIMIZER_SLOTS];
    float *clipped;              /* the mean gradient clipped (when clipping is on) */
    int64_t params_version;
    kiln_crew *crew;             /* a thread per replica */
    kiln_strategy_stats stats;
    /* multi_worker: the MPI world; this process's replicas are global
     * replicas rank * n ... rank * n + n - 1 of world * n. */
    kiln_mpi *mpi;
    int rank, world;
    /* Shard sizes run so far per job, and whether this step has new ones:
     * then the replicas compute one at a time (runtime/parallel/first_run.h). */
    kiln_shape_log seen[3];
    int serial;
    char cross_error[768];       /* why the last cross-process sum failed */
    /* Layers that exchange statistics mid-step (synchronised batch norm). */
    kiln_collective *collective;
    /* Non-trainable state (moving statistics) each replica updates itself:
     * after a training step the replicas' copies are averaged, and the mean
     * goes to every replica before its next job. */
    size_t n_state;              /* 0 when replicas need not agree on any */
    float *state_mean;
    int state_pending;           /* state_mean not yet written to the replicas */
    /* The step's batch and outputs as the replicas' threads read and write
     * them (hold_batch); held_bytes allocated. */
    unsigned char *held;
    size_t held_bytes;
};

/* The gradient floats the replicas reduce: the trainable prefix, all the
 * optimizer reads (frozen weights have no gradient to sum, and replicas
 * keep none for them); one float for a model with nothing to train, so
 * that every buffer and bucket has a size. */
static size_t reduced_floats(const kiln_model *m)
{
    return m->plan.n_trainable_floats ? m->plan.n_trainable_floats : 1;
}

/* Prefixes the failure in this thread's own diagnostics with the replica's
 * place; run_all copies the culprit's to the calling thread. */
static kiln_status replica_failed(dp_replica *d, kiln_status st)
{
    char where[320];
    kiln_replica_describe(d->r, where, sizeof where);
    return kiln_fail_within(&d->owner->m->ctx->host, st, "%s", where);
}

/* After node i's backward: hand every bucket it completes to the reducer. */
static kiln_status on_backward(void *user, kiln_node i)
{
    dp_replica *d = user;
    dp_strategy *dp = d->owner;
    if (!dp->reducer || !dp->update.final_micro || dp->bucket_at_node[i] < 0)
        return KILN_OK;
    const int b = dp->bucket_at_node[i];
    const kiln_bucket *k = &dp->buckets[b];
    kiln_status st = KILN_OK;
    if (d->r->accum)
        st = kiln_replica_accumulate(d->r, k->offset, k->count, 1,
                                     1.0f / (float)dp->m->plan.accumulation_steps);
    /* A blocking read: this thread also drives the device's queue. */
    if (st == KILN_OK)
        st = kiln_buffer_read(d->r->dev, d->r->grads, k->offset * sizeof(float),
                              kiln_reducer_slot(dp->reducer, d->r->index) + k->offset,
                              k->count * sizeof(float));
    if (st == KILN_OK)
        kiln_reducer_submit(dp->reducer, d->r->index, b);
    return st;
}

/* A replica with no samples in this batch still joins the reduction. */
static kiln_status empty_shard(dp_replica *d)
{
    dp_strategy *dp = d->owner;
    kiln_status st = kiln_buffer_zero(d->r->dev, d->r->grads, 0,
                                      reduced_floats(dp->m) * sizeof(float));
    for (kiln_node i = dp->m->graph.n_nodes - 1; st == KILN_OK && i >= 0; i--)
        st = on_backward(d, i);
    return st;
}

static kiln_status wait_reduced(dp_replica *d)
{
    dp_strategy *dp = d->owner;
    if (kiln_reducer_wait(dp->reducer, 0) == KILN_OK)
        return KILN_OK;
    const kiln_status cross = kiln_reducer_cross_status(dp->reducer);
    if (cross != KILN_OK)
        return kiln_error(dp->m->ctx, cross, "%.700s", dp->cross_error);
    return kiln_error(dp->m->ctx, KILN_ERROR_STOPPED, "replica %d: the step was abandoned "
                      "because another replica failed", d->r->index);
}

/* Writes the replicas' mean state to this replica when a step left one;
 * the host array stays untouched until the next step ends. */
static kiln_status push_state(dp_replica *d)
{
    dp_strategy *dp = d->owner;
    if (!dp->state_pending || dp->mode == DP_CENTRAL)
        return KILN_OK;
    return kiln_buffer_write(d->r->dev, d->r->params,
                             dp->m->plan.n_trainable_floats * sizeof(float), dp->state_mean,
                             dp->n_state * sizeof(float), 1);
}

/* After a training step: the mean of the state of the replicas that had
 * samples (the others' is stale), in replica order, for the next jobs
 * (central storage: into the host parameters they load). */
static void average_state(dp_strategy *dp)
{
    int ran = 0;
    for (int k = 0; k < dp->n; k++)
        ran += dp->reps[k].shard.n > 0;
    if (!dp->n_state || ran == 0)
        return;
    for (size_t j = 0; j < dp->n_state; j++) {
        float sum = 0;
        for (int k = 0; k < dp->n; k++)
            sum += dp->reps[k].shard.n > 0 ? dp->reps[k].state[j] : 0.0f;
        dp->state_mean[j] = sum / (float)ran;
    }
    /* Across processes, each process's mean weighs the same. */
    if (dp->mpi && kiln_mpi_sum_floats(dp->mpi, dp->state_mean, dp->n_state, NULL,
                                       dp->m->placement.step_timeout) == KILN_OK)
        for (size_t j = 0; j < dp->n_state; j++)
            dp->state_mean[j] /= (float)dp->world;
    if (dp->mode == DP_CENTRAL) {
        memcpy(dp->host_params + dp->m->plan.n_trainable_floats, dp->state_mean,
               dp->n_state * sizeof(float));
        dp->params_version++;
    } else {
        dp->state_pending = 1;
    }
}

/* Synchronised layers: the replicas with samples this step are its members. */
static void begin_collective(dp_strategy *dp)
{
    int members = 0;
    for (int k = 0; k < dp->n; k++) {
        const int joins = dp->collective && dp->reps[k].shard.n > 0;
        dp->reps[k].r->collective = joins ? dp->collective : NULL;
        dp->reps[k].r->member = dp->reps[k].shard.n > 0 ? members++ : -1;
    }
    if (dp->collective)
        kiln_collective_begin(dp->collective, members);
}

/* Central storage: the host parameters, when they changed since this
 * replica's last job. */
static kiln_status pull_host_params(dp_replica *d)
{
    dp_strategy *dp = d->owner;
    if (dp->mode != DP_CENTRAL || d->params_version == dp->params_version)
        return KILN_OK;
    d->params_version = dp->params_version;
    return kiln_replica_write_params(d->r, dp->host_params);
}

/* Forward, loss and backward on the replica's shard; backward hands the
 * reducer each bucket it completes. */
static kiln_status compute_gradients(dp_replica *d)
{
    const dp_strategy *dp = d->owner;
    kiln_replica *r = d->r;
    const int32_t n = d->shard.n;
    kiln_first_run_enter(dp->serial);
    kiln_status st = kiln_replica_upload(r, &d->shard);
    if (st == KILN_OK)
        st = kiln_replica_forward(r, n, 1);
    if (st == KILN_OK)
        st = kiln_replica_loss(r, n, dp->global_scale);
    if (st == KILN_OK)
        st = kiln_replica_backward(r, n, on_backward, d);
    if (st == KILN_OK && dp->serial)
        st = kiln_device_finish(r->dev);   /* the kernels run under the lock */
    kiln_first_run_leave(dp->serial);
    d->backward_end = kiln_now();
    return st;
}

/* Gradient accumulation: a micro-step with samples adds its gradients to
 * the replica's sum; the cycle's last step turns the sum into the mean,
 * which on_backward already did bucket by bucket where a reducer runs. */
static kiln_status accumulate(dp_replica *d)
{
    const dp_strategy *dp = d->owner;
    const kiln_model *m = dp->m;
    if (!d->r->accum)
        return KILN_OK;
    if (!dp->update.final_micro)
        return d->shard.n > 0 ? kiln_replica_accumulate(d->r, 0, reduced_floats(m), 0, 1.0f)
                              : KILN_OK;
    if (!dp->reducer)
        return kiln_replica_accumulate(d->r, 0, reduced_floats(m), 1,
                                       1.0f / (float)m->plan.accumulation_steps);
    return KILN_OK;
}

/* Nobody waits for a replica that failed before the reduction. */
static kiln_status abandon_step(dp_replica *d, kiln_status st)
{
    const dp_strategy *dp = d->owner;
    replica_failed(d, st);
    if (dp->reducer)
        kiln_reducer_cancel(dp->reducer);
    if (dp->collective)
        kiln_collective_cancel(dp->collective);
    return st;
}

/* Central storage: the reduced mean, or with clipping on a copy of its
 * trainable part (what the optimizer reads), clipped. */
static const float *clip_on_host(dp_strategy *dp, const float *mean)
{
    const kiln_model *m = dp->m;
    if (!dp->clipped)
        return mean;
    memcpy(dp->clipped, mean, m->plan.n_trainable_floats * sizeof(float));
    kiln_clip_host(m, dp->clipped);
    return dp->clipped;
}

/* Every replica applies the same update to its own copy. The reduced sum
 * is the same everywhere, so all skip a non-finite step alike; without a
 * reducer, the optimizer checks the replica's own loss and gradient on the
 * device. Either way the device checks the update before committing it
 * (one more pass over the parameters, gradient and optimizer state, no
 * copy to restore): the replicas hold the same parameters and state, so
 * all skip a non-finite update alike too. */
static kiln_status apply_update(dp_replica *d)
{
    const dp_strategy *dp = d->owner;
    kiln_replica *r = d->r;
    const kiln_model *m = dp->m;
    kiln_status st = KILN_OK;
    if (dp->reducer) {
        const float *sum = kiln_reducer_result(dp->reducer);
        d->nonfinite = !kiln_optimizer_all_finite(sum, reduced_floats(m));
        if (d->nonfinite)
            return KILN_OK;
        st = kiln_buffer_write(r->dev, r->grads, 0, sum, reduced_floats(m) * sizeof(float), 0);
    }
    /* Every replica clips the same summed gradient alike (one device's norm). */
    if (st == KILN_OK && r->clip)
        st = kiln_clip_gradients(r->clip, r->grads);
    if (st == KILN_OK)
        st = kiln_optimizer_apply(r->dev, &m->plan.optimizer, dp->update.lr, r->params, r->grads,
                                  r->slots, m->plan.n_trainable_floats, dp->update.number, r->sums,
                                  dp->reducer == NULL, &m->plan.decay, 0);
    d->checked = st == KILN_OK;
    return st;
}

/* The step's loss sums (its one synchronisation) and the replica's state,
 * which average_state takes the mean of. The update's verdict only from a
 * step that checked one (the device's slot is stale otherwise); a replica
 * without samples reads just that. */
static kiln_status read_results(dp_replica *d)
{
    const dp_strategy *dp = d->owner;
    kiln_replica *r = d->r;
    kiln_status st = KILN_OK;
    float verdict = 0.0f;
    if (d->shard.n > 0) {
        st = kiln_replica_read_sums(r, d->sums);
    } else if (d->checked) {
        st = kiln_buffer_read(r->dev, r->sums, KILN_SUM_UPDATE * sizeof(float), &verdict,
                              sizeof verdict);
        d->sums[KILN_SUM_UPDATE] = verdict;
    }
    if (!d->checked)
        d->sums[KILN_SUM_UPDATE] = 0.0;
    if (st == KILN_OK && dp->n_state)
        st = kiln_buffer_read(r->dev, r->params, dp->m->plan.n_trainable_floats * sizeof(float),
                              d->state, dp->n_state * sizeof(float));
    return st;
}

static kiln_status train_job(void *arg)
{
    dp_replica *d = arg;
    const dp_strategy *dp = d->owner;
    kiln_status st = push_state(d);
    if (st == KILN_OK)
        st = pull_host_params(d);
    memset(d->sums, 0, sizeof d->sums);
    d->nonfinite = 0;
    d->checked = 0;
    if (st == KILN_OK && d->shard.n > 0)
        st = compute_gradients(d);
    else if (st == KILN_OK && dp->update.final_micro && dp->reducer)
        st = empty_shard(d);
    if (st == KILN_OK)
        st = accumulate(d);
    if (st != KILN_OK)
        return abandon_step(d, st);
    /* Central storage: the host updates once the replicas are done. */
    if (dp->update.final_micro && dp->mode != DP_CENTRAL) {
        if (dp->reducer)
            st = wait_reduced(d);
        if (st != KILN_OK)
            return st;   /* wait_reduced explains its own failure */
        st = apply_update(d);
    }
    if (st == KILN_OK)
        st = read_results(d);
    return st == KILN_OK ? KILN_OK : replica_failed(d, st);
}

static kiln_status eval_job(void *arg)
{
    dp_replica *d = arg;
    dp_strategy *dp = d->owner;
    kiln_replica *r = d->r;
    memset(d->sums, 0, sizeof d->sums);
    kiln_status st = push_state(d);
    if (st != KILN_OK || d->shard.n == 0)
        return st == KILN_OK ? KILN_OK : replica_failed(d, st);
    if (dp->mode == DP_CENTRAL && d->params_version != dp->params_version) {
        st = kiln_replica_write_params(r, dp->host_params);
        d->params_version = dp->params_version;
    }
    kiln_first_run_enter(dp->serial);
    if (st == KILN_OK)
        st = kiln_replica_upload(r, &d->shard);
    if (st == KILN_OK)
        st = kiln_replica_forward(r, d->shard.n, 0);
    if (st == KILN_OK && d->job == JOB_EVAL) {
        st = kiln_replica_loss(r, d->shard.n, 1.0f);
        if (st == KILN_OK)
            st = kiln_replica_read_sums(r, d->sums);
    } else if (st == KILN_OK) {
        st = kiln_replica_read_output(r, d->shard.n, d->outputs);
    }
    kiln_first_run_leave(dp->serial);
    return st == KILN_OK ? KILN_OK : replica_failed(d, st);
}

/* Splits a batch into contiguous shards, the first n % R one larger, for
 * a job of kind `job`. */
/* The batch the replicas' threads read, and the outputs they write, live in
 * the strategy, not in the caller's arrays: a replica the watchdog gave up
 * on may still be copying them after the call has returned and the caller
 * has freed its arrays. The strategy frees them on destroy, and leaks them
 * while a thread is stuck. `*outputs` is where the replicas write (NULL:
 * no outputs). */
static kiln_status hold_batch(dp_strategy *dp, const kiln_batch *b, float *caller_outputs,
                              kiln_batch *held, float **outputs)
{
    *held = *b;
    *outputs = caller_outputs;
    const kiln_model *m = dp->m;
    int32_t first;
    const size_t n = (size_t)b->n, out = (size_t)m->plan.output_size;
    const size_t present = (size_t)kiln_batch_present(b, &first);
    const size_t feature_bytes = present * (size_t)m->graph.sample_size * sizeof(float);
    const size_t label_bytes = !b->labels ? 0 : present * kiln_model_label_bytes(m);
    const size_t output_bytes = caller_outputs ? n * out * sizeof(float) : 0;
    const size_t bytes = feature_bytes + label_bytes + output_bytes;
    if (bytes > dp->held_bytes) {
        unsigned char *grown = kiln_realloc(m->ctx, dp->held, bytes);
        if (!grown)
            return kiln_error_oom(m->ctx, "the step's batch", bytes);
        dp->held = grown;
        dp->held_bytes = bytes;
    }
    memcpy(dp->held, b->features, feature_bytes);
    held->features = (const float *)dp->held;
    if (label_bytes) {
        memcpy(dp->held + feature_bytes, b->labels, label_bytes);
        held->labels = dp->held + feature_bytes;
    }
    if (output_bytes)
        *outputs = (float *)(dp->held + feature_bytes + label_bytes);
    return KILN_OK;
}

static void split(dp_strategy *dp, const kiln_batch *b, float *outputs, dp_job job)
{
    const kiln_model *m = dp->m;
    const int64_t in = m->graph.sample_size, out = m->plan.output_size;
    const size_t label_bytes = kiln_model_label_bytes(m);
    /* Global replica g gets b->n / G samples, one more when g < b->n % G. */
    const int G = dp->n * dp->world, g0 = dp->rank * dp->n;
    int32_t start = 0, first;
    for (int g = 0; g < g0; g++)
        start += b->n / G + (g < b->n % G);
    kiln_batch_present(b, &first);   /* a sharded batch starts at our first sample */
    for (int k = 0; k < dp->n; k++) {
        dp_replica *d = &dp->reps[k];
        const int32_t n = b->n / G + (g0 + k < b->n % G);
        const size_t at = (size_t)(start - first);
        d->shard.n = n;
        d->r->first_sample = start;
        d->r->step_number = m->training.n_train_steps;
        d->shard.features = b->features + at * (size_t)in;
        d->shard.labels = b->labels ? (const char *)b->labels + at * label_bytes : NULL;
        d->outputs = outputs ? outputs + (size_t)start * (size_t)out : NULL;
        start += n;
    }
    /* Synchronised layers wait for every replica mid-step: never serialised. */
    dp->serial = 0;
    for (int k = 0; k < dp->n; k++)
        dp->serial |= kiln_shape_log_add(&dp->seen[job], dp->reps[k].shard.n);
    dp->serial &= dp->n > 1 && !dp->collective;
}

/* multi_worker: this process's replicas take global replicas rank * n ...
 * rank * n + n - 1 of each batch, contiguous samples (as split deals them). */
static void dp_shard(void *impl, int train, int64_t ahead, int32_t n, int32_t *first,
                     int32_t *count)
{
    const dp_strategy *dp = impl;
    (void)train;
    (void)ahead;
    const int G = dp->n * dp->world, g0 = dp->rank * dp->n;
    *first = *count = 0;
    for (int g = 0; g < g0 + dp->n; g++)
        *(g < g0 ? first : count) += n / G + (g < n % G);
}

/* Before the strategy is latched broken: the other processes may be in
 * the middle of a collective with this one. */
static void abandon_world(const dp_strategy *dp)
{
    if (dp->mpi)
        kiln_mpi_abandon();
}

/* The watchdog found replica k still busy: it and the replicas waiting
 * for it give up, and the message says where it stood. */
static kiln_status stalled(dp_strategy *dp, int k)
{
    char where[320], detail[320] = "";
    kiln_replica_describe(dp->reps[k].r, where, sizeof where);
    if (dp->reducer)
        kiln_reducer_cancel(dp->reducer);
    if (dp->collective)
        kiln_collective_cancel(dp->collective);
    if (dp->mpi) {
        const int waiting = kiln_replica_phase_now(dp->reps[k].r) == KILN_PHASE_AFTER_BACKWARD;
        snprintf(detail, sizeof detail, "%s [rank %d of %d]",
                 waiting ? ": it was waiting for the other processes' gradients (MPI "
                           "all-reduce); one of them has stalled or died"
                         : "",
                 dp->rank, dp->world);
    }
    abandon_world(dp);
    return kiln_crew_break_stalled(dp->crew, where, "step", dp->m->placement.step_timeout, detail);
}

/* Runs `fn` on every replica under the watchdog. The first failing
 * replica's message wins over the ones it made abandon their step. */
static kiln_status run_all(dp_strategy *dp, kiln_job_fn fn)
{
    kiln_status st = kiln_crew_check(dp->crew);
    if (st != KILN_OK)
        return st;
    for (int k = 0; k < dp->n; k++)
        kiln_crew_post(dp->crew, k, fn, &dp->reps[k]);
    const kiln_crew_outcome o = kiln_crew_wait_all(dp->crew, dp->n, dp->m->placement.step_timeout);
    if (o.stalled >= 0)
        return stalled(dp, o.stalled);
    /* One replica has no other to leave behind mid-step: its failure is
     * the call's alone, and the model goes on as it did when one_device
     * ran on the caller's thread. */
    if (o.status != KILN_OK && dp->mode == DP_ONE_DEVICE)
        return kiln_error(dp->m->ctx, o.status, "%s", kiln_crew_diag(dp->crew, 0)->message);
    if (o.status != KILN_OK) {
        abandon_world(dp);
        return kiln_crew_break_with(dp->crew, o.status, o.culprit);
    }
    dp->state_pending = 0;  /* every job starts with push_state */
    return KILN_OK;
}

/* The replicas' sums, over every process. */
static kiln_status local_sums(dp_strategy *dp, double *sums)
{
    memset(sums, 0, KILN_N_SUMS * sizeof *sums);
    for (int k = 0; k < dp->n; k++)
        kiln_sums_add(sums, dp->reps[k].sums);
    if (!dp->mpi)
        return KILN_OK;
    const kiln_status st = kiln_mpi_sum_doubles(dp->mpi, sums, KILN_N_SUMS,
                                                dp->m->placement.step_timeout);
    if (st == KILN_OK)
        return KILN_OK;
    abandon_world(dp);
    return kiln_crew_break(dp->crew, st, "%s", kiln_context_last_error(dp->m->ctx));
}

/* 1 / the positions the global batch counts. Under multi_worker a process
 * holds only its share of the labels: with an ignore class the counts are
 * summed over the processes (every rank takes this step together). */
static kiln_status global_scale(dp_strategy *dp, const kiln_batch *b)
{
    const kiln_model *m = dp->m;
    const int ignore = m->plan.heads[0].has_ignore;   /* a model of one output only */
    int32_t first;
    const int32_t present = kiln_batch_present(b, &first);
    double counted = ignore ? kiln_model_counted(m, b->labels, present)
                            : kiln_model_counted(m, NULL, b->n);
    if (dp->mpi && ignore && b->sharded) {
        const kiln_status st =
            kiln_mpi_sum_doubles(dp->mpi, &counted, 1, dp->m->placement.step_timeout);
        if (st != KILN_OK) {
            abandon_world(dp);
            return kiln_crew_break(dp->crew, st, "%s", kiln_context_last_error(dp->m->ctx));
        }
    }
    dp->global_scale = kiln_loss_scale(counted);
    return KILN_OK;
}

static kiln_status dp_train_step(void *impl, const kiln_batch *b, double *sums)
{
    dp_strategy *dp = impl;
    kiln_model *m = dp->m;
    kiln_batch held;
    float *no_outputs;
    /* Before anything a stalled replica's thread may still read. */
    kiln_status st = kiln_crew_check(dp->crew);
    if (st == KILN_OK)
        st = hold_batch(dp, b, NULL, &held, &no_outputs);
    if (st != KILN_OK)
        return st;
    kiln_update_begin(&dp->update, m);
    st = global_scale(dp, b);
    if (st != KILN_OK)
        return st;
    split(dp, &held, NULL, JOB_TRAIN);
    if (dp->reducer && dp->update.final_micro)
        kiln_reducer_begin(dp->reducer);
    for (int k = 0; k < dp->n; k++)
        dp->reps[k].backward_end = 0;
    begin_collective(dp);
    st = run_all(dp, train_job);
    if (st != KILN_OK)
        return st;
    average_state(dp);
    int nonfinite = 0, update_nonfinite = 0;
    for (int k = 0; k < dp->n; k++)
        nonfinite |= dp->reps[k].nonfinite;
    if (dp->reducer && dp->update.final_micro) {
        double end = 0, busy, hidden;
        for (int k = 0; k < dp->n; k++)
            end = dp->reps[k].backward_end > end ? dp->reps[k].backward_end : end;
        kiln_reducer_timing(dp->reducer, end, &busy, &hidden);
        dp->stats.reductions++;
        dp->stats.reduce_seconds += busy;
        dp->stats.hidden_seconds += hidden;
    }
    if (dp->update.final_micro && dp->mode == DP_CENTRAL) {
        /* The reducer finished while the workers ran; its sum is the mean. */
        if (kiln_reducer_wait(dp->reducer, 0) != KILN_OK)
            return kiln_crew_break(dp->crew, KILN_ERROR_STATE, "central storage: reduction lost");
        const float *mean = kiln_reducer_result(dp->reducer);
        const int finite = kiln_optimizer_all_finite(mean, reduced_floats(m));
        nonfinite |= !finite;
        if (finite)
            mean = clip_on_host(dp, mean);
        /* The update checked before it is committed: one more pass on the host. */
        if (!finite) {
            /* reported below */
        } else if (!kiln_optimizer_update_finite_host(&m->plan.optimizer, dp->update.lr,
                                                      dp->host_params, mean, dp->host_slots,
                                                      m->plan.n_trainable_floats,
                                                      dp->update.number, &m->plan.decay, 0)) {
            update_nonfinite = 1;
        } else {
            kiln_optimizer_apply_host(&m->plan.optimizer, dp->update.lr, dp->host_params, mean,
                                      dp->host_slots, m->plan.n_trainable_floats,
                                      dp->update.number, &m->plan.decay, 0);
            dp->params_version++;
        }
    }
    st = local_sums(dp, sums);
    if (st != KILN_OK)
        return st;
    /* A gradient can be NaN under a finite loss (a ReLU maps NaN to 0): the
     * skipped update then reports a non-finite loss, which fit stops at or
     * skips and counts, as for a NaN loss. Every process's reduced sum is the
     * same, so all agree; and so on the update, which each replica's sums
     * carry in KILN_SUM_UPDATE (summed over the processes above). */
    if (nonfinite)
        sums[KILN_SUM_LOSS] = NAN;
    if (update_nonfinite)
        sums[KILN_SUM_UPDATE] = NAN;
    kiln_update_end(&dp->update, m, sums);
    return KILN_OK;
}

static kiln_status dp_eval_step(void *impl, const kiln_batch *b, double *sums)
{
    dp_strategy *dp = impl;
    kiln_batch held;
    float *no_outputs;
    /* Before anything a stalled replica's thread may still read. */
    kiln_status st = kiln_crew_check(dp->crew);
    if (st == KILN_OK)
        st = hold_batch(dp, b, NULL, &held, &no_outputs);
    if (st != KILN_OK)
        return st;
    split(dp, &held, NULL, JOB_EVAL);
    for (int k = 0; k < dp->n; k++)
        dp->reps[k].job = JOB_EVAL;
    st = run_all(dp, eval_job);
    memset(sums, 0, KILN_N_SUMS * sizeof *sums);
    return st == KILN_OK ? local_sums(dp, sums) : st;
}

static kiln_status dp_predict_step(void *impl, const kiln_batch *b, float *outputs)
{
    dp_strategy *dp = impl;
    kiln_batch held;
    float *into;
    kiln_status st = kiln_crew_check(dp->crew);
    if (st == KILN_OK)
        st = hold_batch(dp, b, outputs, &held, &into);
    if (st != KILN_OK)
        return st;
    split(dp, &held, into, JOB_PREDICT);
    for (int k = 0; k < dp->n; k++)
        dp->reps[k].job = JOB_PREDICT;
    st = run_all(dp, eval_job);
    if (st != KILN_OK)
        return st;
    if (into != outputs)
        memcpy(outputs, into, (size_t)b->n * (size_t)dp->m->plan.output_size *
                                  sizeof(float));
    if (!dp->mpi)
        return KILN_OK;
    /* Every process gets every output: rank r's rows follow rank r - 1's. */
    const int64_t width = dp->m->plan.output_size;
    const int G = dp->n * dp->world;
    int *counts = kiln_calloc(dp->m->ctx, (size_t)dp->world, sizeof(int));
    float *mine = kiln_calloc(dp->m->ctx, (size_t)b->n * (size_t)width + 1, sizeof(float));
    if (!counts || !mine) {
        kiln_free(dp->m->ctx, counts);
        kiln_free(dp->m->ctx, mine);
        return kiln_error_oom(dp->m->ctx, "gathered outputs", (size_t)b->n * (size_t)width * 4);
    }
    int32_t start = 0;
    for (int g = 0; g < G; g++) {
        const int32_t rows = b->n / G + (g < b->n % G);
        if (g / dp->n == dp->rank)
            memcpy(mine + (size_t)counts[dp->rank], outputs + (size_t)start * (size_t)width,
                   (size_t)rows * (size_t)width * sizeof(float));
        counts[g / dp->n] += (int)(rows * width);
        start += rows;
    }
    st = kiln_mpi_gather_all(dp->mpi, mine, counts, outputs, dp->m->placement.step_timeout);
    kiln_free(dp->m->ctx, counts);
    kiln_free(dp->m->ctx, mine);
    return st;
}

/* Floats [offset, offset + count) of the parameters: central storage's
 * host copy, or the first replica's, with the moving statistics not yet
 * written back (n_state floats after the trainable ones; frozen weights
 * may follow them) taken from their mean. */
static kiln_status dp_get_param_range(void *impl, int64_t offset, int64_t count, float *out)
{
    dp_strategy *dp = impl;
    if (dp->mode == DP_CENTRAL) {
        memcpy(out, dp->host_params + offset, (size_t)count * sizeof(float));
        return KILN_OK;
    }
    kiln_replica *r = dp->reps[0].r;
    kiln_status st = kiln_buffer_read(r->dev, r->params,
                                      (size_t)offset * sizeof(float), out,
                                      (size_t)count * sizeof(float));
    const int64_t state = dp->m->plan.n_trainable_floats, state_end = state + dp->n_state;
    if (st == KILN_OK && dp->state_pending && offset < state_end && offset + count > state) {
        const int64_t from = offset > state ? offset : state;
        const int64_t to = offset + count < state_end ? offset + count : state_end;
        memcpy(out + (from - offset), dp->state_mean + (from - state),
               (size_t)(to - from) * sizeof(float));
    }
    return st;
}

static kiln_status dp_get_params(void *impl, float *flat)
{
    const dp_strategy *dp = impl;
    return dp_get_param_range(impl, 0, (int64_t)dp->m->plan.n_param_floats, flat);
}

static kiln_status dp_set_params(void *impl, const float *flat)
{
    dp_strategy *dp = impl;
    kiln_status st = KILN_OK;
    dp->state_pending = 0;
    if (dp->mode == DP_CENTRAL) {
        memcpy(dp->host_params, flat, dp->m->plan.n_param_floats * sizeof(float));
        dp->params_version++;
        return KILN_OK;
    }
    for (int k = 0; k < dp->n && st == KILN_OK; k++)
        st = kiln_replica_write_params(dp->reps[k].r, flat);
    return st;
}

static int32_t dp_replica_count(void *impl)
{
    return ((dp_strategy *)impl)->n;
}

/* Every process holds the same number of replicas (compile checks). */
static int32_t dp_replicas_in_sync(void *impl)
{
    const dp_strategy *dp = impl;
    return dp->n * dp->world;
}

static kiln_replica *dp_replica_at(void *impl, int32_t i)
{
    dp_strategy *dp = impl;
    return i >= 0 && i < dp->n ? dp->reps[i].r : NULL;
}

static kiln_status dp_get_slots(void *impl, float *const *slots)
{
    dp_strategy *dp = impl;
    const size_t bytes = dp->m->plan.n_param_floats * sizeof(float);
    kiln_status st = KILN_OK;
    for (int i = 0; i < kiln_optimizer_slot_count(&dp->m->plan.optimizer) && st == KILN_OK; i++) {
        if (dp->mode == DP_CENTRAL) {
            memcpy(slots[i], dp->host_slots[i], bytes);
            continue;
        }
        /* A replica's slot may hold only the trainable prefix; the rest,
         * which no update touches, is zeros. */
        const size_t held = kiln_replica_slot_floats(dp->reps[0].r, i) * sizeof(float);
        memset((char *)slots[i] + held, 0, bytes - held);
        if (held)
            st = kiln_buffer_read(dp->reps[0].r->dev, dp->reps[0].r->slots[i], 0, slots[i],
                                  held);
    }
    return st;
}

static kiln_status dp_set_slots(void *impl, const float *const *slots)
{
    dp_strategy *dp = impl;
    const size_t bytes = dp->m->plan.n_param_floats * sizeof(float);
    kiln_status st = KILN_OK;
    for (int i = 0; i < kiln_optimizer_slot_count(&dp->m->plan.optimizer) && st == KILN_OK; i++) {
        if (dp->mode == DP_CENTRAL) {
            memcpy(dp->host_slots[i], slots[i], bytes);
            continue;
        }
        const size_t held = kiln_replica_slot_floats(dp->reps[0].r, i) * sizeof(float);
        for (int k = 0; k < dp->n && st == KILN_OK && held; k++)
            st = kiln_buffer_write(dp->reps[k].r->dev, dp->reps[k].r->slots[i], 0, slots[i], held,
                                   1);
    }
    return st;
}

static int32_t dp_micro_step(void *impl)
{
    return ((dp_strategy *)impl)->update.micro;
}

static void dp_stats(void *impl, kiln_strategy_stats *out)
{
    *out = ((dp_strategy *)impl)->stats;
}

static void dp_destroy(void *impl)
{
    dp_strategy *dp = impl;
    if (!dp)
        return;
    kiln_context *ctx = dp->m->ctx;
    if (dp->reducer)
        kiln_reducer_cancel(dp->reducer);
    if (dp->collective)
        kiln_collective_cancel(dp->collective);
    if (!kiln_crew_destroy(dp->crew)) {
        /* A thread still uses these; freeing them under it would crash. */
        kiln_log(ctx, KILN_LOG_ERROR, "a replica thread is stuck; its buffers are leaked");
        return;
    }
    for (int k = 0; dp->reps && k < dp->n; k++) {
        kiln_replica_destroy(dp->reps[k].r);
        kiln_free(ctx, dp->reps[k].state);
    }
    kiln_reducer_destroy(dp->reducer);
    if (dp->mpi) {
        dp->m->placement.mpi = NULL;
        dp->m->placement.mpi_evaluates = 0;
    }
    kiln_mpi_leave(dp->mpi);
    kiln_collective_destroy(dp->collective);
    kiln_free(ctx, dp->state_mean);
    kiln_free(ctx, dp->held);
    kiln_free(ctx, dp->reps);
    kiln_free(ctx, dp->buckets);
    kiln_free(ctx, dp->bucket_at_node);
    kiln_free(ctx, dp->host_params);
    kiln_free(ctx, dp->clipped);
    for (int i = 0; i < KILN_MAX_OPTIMIZER_SLOTS; i++)
        kiln_free(ctx, dp->host_slots[i]);
    kiln_free(ctx, dp);
}

/* Host room for averaging the replicas' non-trainable state, and the
 * collective of synchronised layers, where the model has them. */
static kiln_status plan_state(dp_strategy *dp)
{
    kiln_model *m = dp->m;
    kiln_context *ctx = m->ctx;
    if (m->plan.n_state_floats > 0 && (dp->n > 1 || dp->mode == DP_CENTRAL || dp->mpi)) {
        dp->n_state = m->plan.n_state_floats;
        if (!(dp->state_mean = kiln_calloc(ctx, dp->n_state, sizeof(float))))
            return kiln_error_oom(ctx, "replica state", dp->n_state * sizeof(float));
        for (int k = 0; k < dp->n; k++)
            if (!(dp->reps[k].state = kiln_calloc(ctx, dp->n_state, sizeof(float))))
                return kiln_error_oom(ctx, "replica state", dp->n_state * sizeof(float));
    }
    int wants = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++)
        wants |= m->graph.nodes[i].on_path && m->graph.nodes[i].ops->synchronized &&
                 m->graph.nodes[i].ops->synchronized(m->graph.nodes[i].config);
    if (wants && dp->n > 1)
        return kiln_collective_create(&ctx->host, dp->n, KILN_MAX_SYNC_VALUES, &dp->collective);
    return KILN_OK;
}

/* Buckets in reverse layer order, cut at layer boundaries; bucket b is
 * complete once backward has passed the first layer it holds. */
static kiln_status plan_buckets(dp_strategy *dp)
{
    kiln_model *m = dp->m;
    kiln_context *ctx = m->ctx;
    size_t *cuts = kiln_calloc(ctx, (size_t)m->graph.n_nodes + 1, sizeof *cuts);
    kiln_node *owner = kiln_calloc(ctx, (size_t)m->graph.n_nodes + 1, sizeof *owner);
    dp->buckets = kiln_calloc(ctx, (size_t)m->graph.n_nodes + 2, sizeof *dp->buckets);
    dp->bucket_at_node = kiln_calloc(ctx, (size_t)m->graph.n_nodes, sizeof(int));
    if (!cuts || !owner || !dp->buckets || !dp->bucket_at_node) {
        kiln_free(ctx, cuts);
        kiln_free(ctx, owner);
        return kiln_error_oom(ctx, "gradient buckets", (size_t)m->graph.n_nodes * 64);
    }
    /* A layer's cut is where its trainable parameters start: the lowest
     * offset it has in the trainable prefix. Its other parameters (moving
     * statistics, a LoRA layer's frozen kernel, constants) sit in later
     * regions and have no gradient to sum; a layer with none there is no
     * cut (a cut in a later region would leave the prefix's first bucket
     * with no layer to complete it, and every replica waiting on it). */
    int n_cuts = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        dp->bucket_at_node[i] = -1;
        const kiln_node_rec *node = &m->graph.nodes[i];
        size_t first = SIZE_MAX;
        for (int p = 0; p < node->n_params; p++)
            if (node->param_offset[p] < m->plan.n_trainable_floats && node->param_offset[p] < first)
                first = node->param_offset[p];
        if (first != SIZE_MAX) {
            owner[n_cuts] = i;
            cuts[n_cuts++] = first;
        }
    }
    dp->n_buckets = n_cuts ? kiln_reducer_plan(cuts, n_cuts, reduced_floats(m),
                                               m->placement.first_bucket_bytes,
                                               m->placement.bucket_bytes, dp->buckets)
                           : 0;
    if (dp->n_buckets == 0) {
        dp->buckets[0].offset = 0;
        dp->buckets[0].count = reduced_floats(m);
        dp->n_buckets = 1;
        dp->bucket_at_node[0] = 0;
    }
    /* The node whose parameters start a bucket completes it. */
    for (int b = 0; b < dp->n_buckets; b++)
        for (int c = 0; c < n_cuts; c++)
            if (cuts[c] == dp->buckets[b].offset)
                dp->bucket_at_node[owner[c]] = b;
    kiln_free(ctx, cuts);
    kiln_free(ctx, owner);
    return KILN_OK;
}

/* The reducer's cross stage: a locally summed bucket, summed over the
 * processes. */
static kiln_status cross_sum(void *user, float *data, size_t count, const kiln_flag *abort)
{
    dp_strategy *dp = user;
    /* Twice the watchdog: a stalled peer is reported by the step's watchdog,
     * which names the replica and rank, and cancels this wait. */
    const kiln_status st =
        kiln_mpi_sum_floats(dp->mpi, data, count, abort, 2.0 * dp->m->placement.step_timeout);
    if (st != KILN_OK)
        snprintf(dp->cross_error, sizeof dp->cross_error, "%s",
                 kiln_context_last_error(dp->m->ctx));
    return st;
}

/* Joins the MPI job: every process must bring as many replicas and the
 * same model and training settings, and all start from rank 0's
 * parameters. */
static kiln_status join_world(dp_strategy *dp, float *init)
{
    kiln_model *m = dp->m;
    kiln_status st = kiln_mpi_join(&m->ctx->host, &dp->mpi);
    if (st != KILN_OK)
        return st;
    dp->rank = kiln_mpi_rank(dp->mpi);
    dp->world = kiln_mpi_size(dp->mpi);
    m->placement.rank = dp->rank;
    m->placement.world = dp->world;
    m->placement.mpi = dp->mpi;
    m->placement.mpi_evaluates = 1;
    static const char *const names[] = {
        "number of replicas", "#model (its layers' kinds, names and parameter shapes)",
        "#loss, optimizer and optimizer settings"};
    const int64_t mine[] = {dp->n, (int64_t)kiln_model_fingerprint(m),
                            (int64_t)kiln_model_training_hash(m)};
    st = kiln_mpi_check_same(dp->mpi, "kiln_model_compile: multi_worker", names, mine, 3,
                             m->placement.step_timeout);
    if (st == KILN_OK)
        st = kiln_mpi_broadcast(dp->mpi, init, m->plan.n_param_floats, m->placement.step_timeout);
    return st;
}

static kiln_status dp_create(kiln_model *m, dp_mode mode, void **impl)
{
    kiln_context *ctx = m->ctx;
    int n = mode == DP_ONE_DEVICE
                ? 1
                : (m->placement.n_replicas ? m->placement.n_replicas : ctx->n_devices);
    if (n > ctx->n_devices)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %d replicas asked for, but the context has %d "
                          "device(s)", n, (int)ctx->n_devices);
    dp_strategy *dp = kiln_calloc(ctx, 1, sizeof *dp);
    if (!dp)
        return kiln_error_oom(ctx, "a strategy", sizeof *dp);
    dp->m = m;
    dp->mode = mode;
    dp->n = n;
    dp->world = 1;
    float *init = kiln_calloc(ctx, m->plan.n_param_floats, sizeof(float));
    dp->reps = kiln_calloc(ctx, (size_t)n, sizeof *dp->reps);
    kiln_status st = init && dp->reps
                         ? KILN_OK
                         : kiln_error_oom(ctx, "replicas", (size_t)n * sizeof *dp->reps);
    if (st == KILN_OK)
        kiln_model_init_params(m, init);
    if (st == KILN_OK && mode == DP_MULTI_WORKER)
        st = join_world(dp, init);
    for (int k = 0; st == KILN_OK && k < n; k++) {
        dp_replica *d = &dp->reps[k];
        d->owner = dp;
        st = kiln_replica_create(m, ctx->devices[k], &d->r);
        if (st == KILN_OK) {
            d->r->index = k;
            st = kiln_replica_write_params(d->r, init);
        }
    }
    if (st == KILN_OK)
        st = kiln_crew_create(ctx, n, &dp->crew);
    if (st == KILN_OK && mode != DP_ONE_DEVICE)
        st = plan_buckets(dp);
    if (st == KILN_OK && mode != DP_ONE_DEVICE)
        st = kiln_reducer_create(&ctx->host, n, reduced_floats(m), dp->buckets, dp->n_buckets,
                                 m->placement.reducer_threads, &dp->reducer);
    if (st == KILN_OK && dp->mpi)
        st = kiln_reducer_set_cross(dp->reducer, cross_sum, dp);
    if (st == KILN_OK && mode != DP_ONE_DEVICE)
        st = plan_state(dp);
    if (st == KILN_OK && mode == DP_CENTRAL) {
        dp->host_params = init;
        init = NULL;
        for (int i = 0; st == KILN_OK && i < kiln_optimizer_slot_count(&m->plan.optimizer); i++)
            if (!(dp->host_slots[i] = kiln_calloc(ctx, m->plan.n_param_floats, sizeof(float))))
                st = kiln_error_oom(ctx, "host optimizer state", m->plan.n_param_floats * 4);
        float limit;
        if (st == KILN_OK && kiln_clip_mode_of(&m->plan.optimizer, &limit) != KILN_CLIP_OFF &&
            !(dp->clipped = kiln_calloc(ctx, m->plan.n_trainable_floats + 1, sizeof(float))))
            st = kiln_error_oom(ctx, "the clipped gradient", m->plan.n_trainable_floats * 4);
    }
    kiln_free(ctx, init);
    if (st != KILN_OK) {
        dp_destroy(dp);
        return st;
    }
    *impl = dp;
    return KILN_OK;
}

static kiln_status one_create(kiln_model *m, void **impl)
{
    return dp_create(m, DP_ONE_DEVICE, impl);
}

static kiln_status mirrored_create(kiln_model *m, void **impl)
{
    return dp_create(m, DP_MIRRORED, impl);
}

static kiln_status central_create(kiln_model *m, void **impl)
{
    return dp_create(m, DP_CENTRAL, impl);
}

static kiln_status multi_worker_create(kiln_model *m, void **impl)
{
    return dp_create(m, DP_MULTI_WORKER, impl);
}

/* The data-parallel strategies differ in how they are made, and
 * multi_worker in sharding each batch across processes. */
#define DP_STRATEGY_OPS(strategy_name, make)                                                     \
    .name = strategy_name, .create = make, .destroy = dp_destroy, .train_step = dp_train_step,  \
    .eval_step = dp_eval_step, .predict_step = dp_predict_step, .get_params = dp_get_params,    \
    .get_param_range = dp_get_param_range, .set_params = dp_set_params,                         \
    .replica_count = dp_replica_count,                                                          \
    .replicas_in_sync = dp_replicas_in_sync, .replica = dp_replica_at, .stats = dp_stats,       \
    .get_slots = dp_get_slots, .set_slots = dp_set_slots, .micro_step = dp_micro_step

const kiln_strategy_ops kiln_strategy_one_device = {DP_STRATEGY_OPS("one_device", one_create)};
const kiln_strategy_ops kiln_strategy_mirrored = {DP_STRATEGY_OPS("mirrored", mirrored_create)};
const kiln_strategy_ops kiln_strategy_central_storage = {
    DP_STRATEGY_OPS("central_storage", central_create)};
const kiln_strategy_ops kiln_strategy_multi_worker = {
    DP_STRATEGY_OPS("multi_worker", multi_worker_create), .shard = dp_shard};
