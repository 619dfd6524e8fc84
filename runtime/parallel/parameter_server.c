/* The parameter-server strategy (asynchronous), in one process: the
 * parameters and optimizer state live in a host store; each device has a
 * worker (a replica driven by its own thread). fit hands each global batch
 * to an idle worker and goes on: the worker pulls the store's parameters
 * when they changed since its last pull, computes the batch's gradient and
 * pushes it, and the store applies the optimizer update at once, under its
 * lock, with no barrier between workers. So several batches are in flight
 * and a gradient may have been computed on parameters a few updates old.
 *
 * Bounded staleness (stale synchronous parallel): with max_staleness S > 0
 * a worker that has finished S more steps than the slowest worker waits
 * before taking another batch. Loss and accuracy reach fit as batches
 * complete (train_step reports what finished since its last call; drain
 * collects the rest). */
#include "runtime/parallel/crew.h"
#include "runtime/model/clip.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/loss.h"
#include "runtime/parallel/replica.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


typedef struct ps ps;

typedef struct ps_worker {
    ps *owner;
    kiln_replica *r;
    int index;                   /* its member of the crew */
    int busy;                     /* a batch is in flight (under ps lock) */
    int posted;                   /* a job was posted and not yet collected */
    int32_t capacity;
    float *features;              /* its own copy of its batch */
    void *labels;
    int32_t n;
    float *snapshot, *grads;      /* host copies of parameters and gradient */
    int64_t pulled;               /* store version its device holds (-1: none) */
    int64_t clock;                /* batches it has finished */
} ps_worker;

struct ps {
    kiln_model *m;
    int n;
    ps_worker *w;
    pthread_mutex_t lock;         /* workers' state, pending sums */
    /* the store */
    pthread_mutex_t store_lock;
    float *params, *slots[KILN_MAX_OPTIMIZER_SLOTS];
    int64_t version;              /* updates applied */
    /* finished batches not yet reported to fit */
    double pending[KILN_N_SUMS];
    int32_t max_staleness;
    kiln_crew *crew;             /* a thread per worker */
    kiln_strategy_stats stats;
};

static kiln_status worker_failed(ps_worker *w, kiln_status st)
{
    /* Into this worker thread's own diagnostics; the caller copies them. */
    char where[320];
    kiln_replica_describe(w->r, where, sizeof where);
    return kiln_fail_within(&w->owner->m->ctx->host, st, "%s", where);
}

/* Pull if stale, compute the gradient of the worker's batch, push. */
static kiln_status step_job(void *arg)
{
    ps_worker *w = arg;
    ps *p = w->owner;
    kiln_model *m = p->m;
    kiln_replica *r = w->r;
    const size_t bytes = m->plan.n_param_floats * sizeof(float);
    kiln_status st = KILN_OK;
    pthread_mutex_lock(&p->store_lock);
    const int64_t version = p->version;
    const int stale = w->pulled != version;
    if (stale)
        memcpy(w->snapshot, p->params, bytes);
    pthread_mutex_unlock(&p->store_lock);
    if (stale)
        st = kiln_replica_write_params(r, w->snapshot);
    w->pulled = version;
    const kiln_batch b = {.n = w->n, .features = w->features, .labels = w->labels};
    double sums[KILN_N_SUMS] = {0};
    r->first_sample = 0;
    r->step_number = version;
    if (st == KILN_OK)
        st = kiln_replica_upload(r, &b);
    if (st == KILN_OK)
        st = kiln_replica_forward(r, w->n, 1);
    if (st == KILN_OK)
        st = kiln_replica_loss(r, w->n, kiln_loss_scale(kiln_model_counted(m, w->labels, w->n)));
    if (st == KILN_OK)
        st = kiln_replica_backward(r, w->n, NULL, NULL);
    if (st == KILN_OK)
        st = kiln_buffer_read(r->dev, r->grads, 0, w->grads,
                              m->plan.n_trainable_floats * sizeof(float));
    if (st == KILN_OK &&
        m->plan.n_param_floats > m->plan.n_trainable_floats) /* moving statistics */
        st =
            kiln_buffer_read(r->dev, r->params, m->plan.n_trainable_floats * sizeof(float),
                             w->snapshot + m->plan.n_trainable_floats,
                             (m->plan.n_param_floats - m->plan.n_trainable_floats) * sizeof(float));
    if (st == KILN_OK)
        st = kiln_replica_read_sums(r, sums);
    /* A gradient can be NaN under a finite loss (a ReLU maps NaN to 0): the
     * push is then dropped and reported as a non-finite loss. */
    if (st == KILN_OK && !kiln_optimizer_all_finite(w->grads, m->plan.n_trainable_floats))
        sums[0] = NAN;
    /* Clipping: each push by its own norm (one batch's gradient of the whole
     * model, which one update applies), here, off the store's lock. */
    if (st == KILN_OK && isfinite(sums[0]))
        kiln_clip_host(m, w->grads);
    if (st != KILN_OK)
        worker_failed(w, st);
    sums[KILN_SUM_UPDATE] = 0;   /* the device's slot is not this step's */
    if (st == KILN_OK && isfinite(sums[0])) {
        pthread_mutex_lock(&p->store_lock);
        const double lr = kiln_model_learning_rate(m, p->version);
        /* The push's update, checked on the store before it is made: one
         * more pass over parameters, gradient and state, nothing to undo. */
        const int applied = kiln_optimizer_update_finite_host(&m->plan.optimizer, lr, p->params,
                                                              w->grads, p->slots,
                                                              m->plan.n_trainable_floats,
                                                              p->version + 1, &m->plan.decay, 0);
        if (applied) {
            kiln_optimizer_apply_host(&m->plan.optimizer, lr, p->params, w->grads, p->slots,
                                      m->plan.n_trainable_floats, p->version + 1, &m->plan.decay,
                                      0);
            memcpy(p->params + m->plan.n_trainable_floats, w->snapshot + m->plan.n_trainable_floats,
                   (m->plan.n_param_floats - m->plan.n_trainable_floats) * sizeof(float));
        }
        const int64_t lag = p->version - version;
        p->version += applied;
        pthread_mutex_unlock(&p->store_lock);
        if (!applied)
            sums[KILN_SUM_UPDATE] = NAN;
        pthread_mutex_lock(&p->lock);
        p->stats.reductions += applied;
        if (lag > p->stats.max_staleness)
            p->stats.max_staleness = lag;
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_lock(&p->lock);
    sums[KILN_SUM_SAMPLES] = w->n;
    kiln_sums_add(p->pending, sums);
    w->clock++;
    w->busy = 0;
    pthread_mutex_unlock(&p->lock);
    return st;
}

/* Collects worker w's finished job (it must not be busy). */
static kiln_status collect(ps *p, ps_worker *w)
{
    if (!w->posted)
        return KILN_OK;
    kiln_status st = KILN_OK;
    if (!kiln_crew_wait_one(p->crew, w->index, p->m->placement.step_timeout, &st))
        return kiln_crew_break(p->crew, KILN_ERROR_TIMEOUT, "a parameter-server worker did not "
                               "finish");
    w->posted = 0;
    return st == KILN_OK ? KILN_OK : kiln_crew_break_with(p->crew, st, w->index);
}

/* Waits until no batch is in flight; the first failure wins. */
static kiln_status wait_idle(ps *p)
{
    const kiln_deadline deadline = kiln_deadline_in(p->m->placement.step_timeout);
    pthread_mutex_lock(&p->lock);
    for (int k = 0; k < p->n; k++) {
        while (p->w[k].busy && !kiln_deadline_passed(deadline)) {
            pthread_mutex_unlock(&p->lock);
            kiln_status st = KILN_OK;
            const int done = kiln_crew_wait_one(p->crew, k, 0.05, &st);
            pthread_mutex_lock(&p->lock);
            if (done) {
                p->w[k].posted = 0;
                p->w[k].busy = 0;
                if (st != KILN_OK) {
                    pthread_mutex_unlock(&p->lock);
                    return kiln_crew_break_with(p->crew, st, k);
                }
            }
        }
        if (p->w[k].busy) {
            char where[320], who[360];
            kiln_replica_describe(p->w[k].r, where, sizeof where);
            pthread_mutex_unlock(&p->lock);
            snprintf(who, sizeof who, "parameter server: worker %s", where);
            return kiln_crew_break_stalled(p->crew, who, "batch", p->m->placement.step_timeout, "");
        }
    }
    pthread_mutex_unlock(&p->lock);
    for (int k = 0; k < p->n; k++) {
        kiln_status st = collect(p, &p->w[k]);
        if (st != KILN_OK)
            return st;
    }
    return KILN_OK;
}

/* An idle worker the staleness bound lets start, or -1. */
static int pick_worker(const ps *p, int64_t *lead)
{
    int64_t slowest = INT64_MAX;
    for (int k = 0; k < p->n; k++)
        slowest = p->w[k].clock < slowest ? p->w[k].clock : slowest;
    for (int k = 0; k < p->n; k++) {
        if (p->w[k].busy)
            continue;
        if (p->max_staleness > 0 && p->w[k].clock - slowest > p->max_staleness)
            continue;
        *lead = p->w[k].clock - slowest;
        return k;
    }
    return -1;
}

static kiln_status ps_train_step(void *impl, const kiln_batch *b, double *sums)
{
    ps *p = impl;
    kiln_model *m = p->m;
    kiln_status st = kiln_crew_check(p->crew);
    if (st != KILN_OK)
        return st;
    const kiln_deadline deadline = kiln_deadline_in(m->placement.step_timeout);
    int64_t lead = 0;
    int k;
    pthread_mutex_lock(&p->lock);
    while ((k = pick_worker(p, &lead)) < 0 && !kiln_deadline_passed(deadline)) {
        pthread_mutex_unlock(&p->lock);
        /* Collect finished jobs while waiting: a failed worker ends it. */
        for (int j = 0; j < p->n; j++) {
            kiln_status s = KILN_OK;
            if (p->w[j].posted && kiln_crew_wait_one(p->crew, j, 0.01, &s)) {
                p->w[j].posted = 0;
                if (s != KILN_OK)
                    return kiln_crew_break_with(p->crew, s, j);
            }
        }
        pthread_mutex_lock(&p->lock);
    }
    if (k < 0) {
        pthread_mutex_unlock(&p->lock);
        return kiln_crew_break(p->crew, KILN_ERROR_TIMEOUT, "parameter server: no worker "
                               "became free within the watchdog");
    }
    ps_worker *w = &p->w[k];
    w->busy = 1;
    if (lead > p->stats.max_lead)
        p->stats.max_lead = lead;
    pthread_mutex_unlock(&p->lock);
    st = collect(p, w);
    if (st != KILN_OK)
        return st;
    const size_t in = (size_t)b->n * (size_t)m->graph.sample_size;
    const size_t label_bytes = (size_t)b->n * kiln_model_label_bytes(m);
    if (b->n > w->capacity) {
        kiln_free(m->ctx, w->features);
        kiln_free(m->ctx, w->labels);
        w->features = kiln_calloc(m->ctx, in, sizeof(float));
        w->labels = kiln_calloc(m->ctx, label_bytes ? label_bytes : 1, 1);
        if (!w->features || !w->labels)
            return kiln_error_oom(m->ctx, "a worker's batch", in * sizeof(float) + label_bytes);
        w->capacity = b->n;
    }
    memcpy(w->features, b->features, in * sizeof(float));
    memcpy(w->labels, b->labels, label_bytes);
    w->n = b->n;
    w->posted = 1;
    kiln_crew_post(p->crew, w->index, step_job, w);
    pthread_mutex_lock(&p->lock);
    memcpy(sums, p->pending, sizeof p->pending);
    memset(p->pending, 0, sizeof p->pending);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_lock(&p->store_lock);
    m->training.n_optimizer_steps = p->version;
    pthread_mutex_unlock(&p->store_lock);
    return KILN_OK;
}

static kiln_status ps_drain(void *impl, double *sums)
{
    ps *p = impl;
    kiln_status st = kiln_crew_check(p->crew);
    if (st == KILN_OK)
        st = wait_idle(p);
    pthread_mutex_lock(&p->lock);
    memcpy(sums, p->pending, sizeof p->pending);
    memset(p->pending, 0, sizeof p->pending);
    pthread_mutex_unlock(&p->lock);
    p->m->training.n_optimizer_steps = p->version;
    return st;
}

/* Inference on worker 0 with the store's parameters. */
static kiln_status infer(ps *p, const kiln_batch *b, double *sums, float *outputs)
{
    kiln_status st = kiln_crew_check(p->crew);
    if (st == KILN_OK)
        st = wait_idle(p);
    if (st != KILN_OK)
        return st;
    ps_worker *w = &p->w[0];
    if (w->pulled != p->version) {
        st = kiln_replica_write_params(w->r, p->params);
        w->pulled = p->version;
    }
    if (st == KILN_OK)
        st = kiln_replica_upload(w->r, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(w->r, b->n, 0);
    if (st == KILN_OK && sums) {
        st = kiln_replica_loss(w->r, b->n, 1.0f);
        if (st == KILN_OK)
            st = kiln_replica_read_sums(w->r, sums);
    } else if (st == KILN_OK) {
        st = kiln_replica_read_output(w->r, b->n, outputs);
    }
    return st;
}

static kiln_status ps_eval_step(void *impl, const kiln_batch *b, double *sums)
{
    return infer(impl, b, sums, NULL);
}

static kiln_status ps_predict_step(void *impl, const kiln_batch *b, float *outputs)
{
    return infer(impl, b, NULL, outputs);
}

static kiln_status ps_get_params(void *impl, float *flat)
{
    ps *p = impl;
    kiln_status st = wait_idle(p);
    memcpy(flat, p->params, p->m->plan.n_param_floats * sizeof(float));
    return st;
}

static kiln_status ps_set_params(void *impl, const float *flat)
{
    ps *p = impl;
    kiln_status st = wait_idle(p);
    memcpy(p->params, flat, p->m->plan.n_param_floats * sizeof(float));
    for (int k = 0; k < p->n; k++)
        p->w[k].pulled = -1;   /* every worker pulls again */
    return st;
}

static kiln_status ps_get_slots(void *impl, float *const *slots)
{
    ps *p = impl;
    kiln_status st = wait_idle(p);
    for (int i = 0; i < kiln_optimizer_slot_count(&p->m->plan.optimizer); i++)
        memcpy(slots[i], p->slots[i], p->m->plan.n_param_floats * sizeof(float));
    return st;
}

static kiln_status ps_set_slots(void *impl, const float *const *slots)
{
    ps *p = impl;
    kiln_status st = wait_idle(p);
    for (int i = 0; i < kiln_optimizer_slot_count(&p->m->plan.optimizer); i++)
        memcpy(p->slots[i], slots[i], p->m->plan.n_param_floats * sizeof(float));
    return st;
}

static kiln_status ps_set_optimizer_steps(void *impl, int64_t steps)
{
    ps *p = impl;
    const kiln_status st = wait_idle(p);
    pthread_mutex_lock(&p->store_lock);
    p->version = steps;
    pthread_mutex_unlock(&p->store_lock);
    for (int k = 0; k < p->n; k++)
        p->w[k].pulled = -1;   /* a version number no longer names what it holds */
    return st;
}

static int32_t ps_replica_count(void *impl)
{
    return ((ps *)impl)->n;
}

/* A worker trains whole batches: none is split. */
static kiln_replica *ps_replica_at(void *impl, int32_t i)
{
    ps *p = impl;
    return i >= 0 && i < p->n ? p->w[i].r : NULL;
}

static void ps_stats(void *impl, kiln_strategy_stats *out)
{
    ps *p = impl;
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}

static void ps_destroy(void *impl)
{
    ps *p = impl;
    if (!p)
        return;
    kiln_context *ctx = p->m->ctx;
    if (!kiln_crew_destroy(p->crew)) {
        kiln_log(ctx, KILN_LOG_ERROR, "a parameter-server worker is stuck; its buffers are "
                 "leaked");
        return;
    }
    for (int k = 0; p->w && k < p->n; k++) {
        kiln_replica_destroy(p->w[k].r);
        kiln_free(ctx, p->w[k].features);
        kiln_free(ctx, p->w[k].labels);
        kiln_free(ctx, p->w[k].snapshot);
        kiln_free(ctx, p->w[k].grads);
    }
    for (int i = 0; i < KILN_MAX_OPTIMIZER_SLOTS; i++)
        kiln_free(ctx, p->slots[i]);
    kiln_free(ctx, p->params);
    kiln_free(ctx, p->w);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->store_lock);
    kiln_free(ctx, p);
}

static kiln_status ps_create(kiln_model *m, void **impl)
{
    kiln_context *ctx = m->ctx;
    if (m->plan.accumulation_steps > 1)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED,
                          "kiln_model_compile: the parameter_server strategy applies every "
                          "batch's gradient as it arrives; gradient_accumulation_steps must be "
                          "0 or 1");
    const int n = m->placement.n_replicas ? m->placement.n_replicas : ctx->n_devices;
    if (n > ctx->n_devices)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %d workers asked for, but the context has %d "
                          "device(s)", n, (int)ctx->n_devices);
    ps *p = kiln_calloc(ctx, 1, sizeof *p);
    if (!p)
        return kiln_error_oom(ctx, "a strategy", sizeof *p);
    p->m = m;
    p->n = n;
    p->max_staleness = m->placement.max_staleness;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->store_lock, NULL);
    const size_t floats = m->plan.n_param_floats ? m->plan.n_param_floats : 1;
    p->w = kiln_calloc(ctx, (size_t)n, sizeof *p->w);
    p->params = kiln_calloc(ctx, floats, sizeof(float));
    kiln_status st = p->w && p->params ? KILN_OK
                                       : kiln_error_oom(ctx, "the parameter store",
                                                        floats * sizeof(float));
    for (int i = 0; st == KILN_OK && i < kiln_optimizer_slot_count(&m->plan.optimizer); i++)
        if (!(p->slots[i] = kiln_calloc(ctx, floats, sizeof(float))))
            st = kiln_error_oom(ctx, "the parameter store", floats * sizeof(float));
    if (st == KILN_OK)
        kiln_model_init_params(m, p->params);
    for (int k = 0; st == KILN_OK && k < n; k++) {
        ps_worker *w = &p->w[k];
        w->owner = p;
        w->pulled = -1;
        w->snapshot = kiln_calloc(ctx, floats, sizeof(float));
        w->grads = kiln_calloc(ctx, floats, sizeof(float));
        if (!w->snapshot || !w->grads)
            st = kiln_error_oom(ctx, "a worker's host buffers", 2 * floats * sizeof(float));
        if (st == KILN_OK)
            st = kiln_replica_create(m, ctx->devices[k], &w->r);
        if (st == KILN_OK)
            w->r->index = w->index = k;
    }
    if (st == KILN_OK)
        st = kiln_crew_create(ctx, p->n, &p->crew);
    if (st != KILN_OK) {
        ps_destroy(p);
        return st;
    }
    *impl = p;
    return KILN_OK;
}

const kiln_strategy_ops kiln_strategy_parameter_server = {
    .name = "parameter_server", .create = ps_create, .destroy = ps_destroy,
    .train_step = ps_train_step, .eval_step = ps_eval_step, .predict_step = ps_predict_step,
    .get_params = ps_get_params, .set_params = ps_set_params, .replica_count = ps_replica_count,
    .replica = ps_replica_at, .stats = ps_stats, .get_slots = ps_get_slots,
    .set_slots = ps_set_slots, .drain = ps_drain, .set_optimizer_steps = ps_set_optimizer_steps,
};
