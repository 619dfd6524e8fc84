/* The parameter-server strategy across the processes of an MPI job
 * (parameter_store_ranks = R >= 1): ranks 0..R-1 hold the store (parameters
 * and optimizer state, on the host), the flat parameter array cut into R
 * contiguous shards of equal size (the update is element-wise, so any cut
 * works), each served by a thread of its store rank; ranks R..W-1 are
 * workers, each with its device. Every process runs the same fit over the
 * same batches; worker k trains batches k, k + (W - R), ... of each epoch:
 * it computes the gradient on the parameters it holds, pushes each shard of
 * it (with its loss sums and non-trainable state) to that shard's store,
 * and receives each store's shard after its push was applied. A store
 * applies each push as it arrives, with no barrier between workers; with
 * max_staleness S > 0 it holds back the reply to a worker that has pushed
 * more than S times beyond the slowest active worker (stale synchronous
 * parallel; every store sees the same pushes, so they agree). At the end of
 * an epoch (drain) every worker says it is done, the loss sums are summed
 * over the ranks and every rank receives the whole store (parameters and
 * optimizer state), so evaluate, predict and checkpoints see one model. */
#include "comm/mpi_world.h"
#include "runtime/model/loss.h"
#include "runtime/model/clip.h"
#include "runtime/model/optimizer.h"
#include "runtime/parallel/replica.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { TAG_PUSH = 11, TAG_PARAMS = 12, TAG_DONE = 13 };

typedef struct psm {
    kiln_model *m;
    kiln_mpi *mpi;
    int rank, world, workers;
    int stores;                   /* ranks 0..stores-1 hold the store */
    size_t *bound;                /* stores + 1: shard s is [bound[s], bound[s + 1]) */
    size_t widest;                /* the largest shard */
    float *slice;                 /* widest + 3: one shard of a push (a store: of a drain) */
    int *counts;                  /* per rank: floats of its shard (workers: 0) */
    float *slice_all;             /* n_param_floats: a gathered optimizer slot */
    kiln_replica *r;              /* this process's device (rank 0: for inference) */
    float *msg;                   /* n_param_floats + 3: gradient, state, loss sums (a
                                   * store: the whole store at a drain); this thread's alone */
    double reported[KILN_N_SUMS];  /* this rank's sums given to fit this epoch */
    /* the store (rank 0) */
    float *params, *slots[KILN_MAX_OPTIMIZER_SLOTS];
    int64_t version;
    int64_t *clock, *replied;     /* per worker: pushes, version of its last reply */
    int *done, *deferred;
    int n_done;
    int skipped;                  /* pushes this epoch whose update on this shard was not finite */
    pthread_t server;
    int server_started;
    kiln_flag stop;
    kiln_status server_status;
    char server_error[512];
    pthread_mutex_t lock;
    kiln_strategy_stats stats;
} psm;

static int64_t slowest(const psm *p);

/* Releases worker w to its next batch with the store's parameters; its
 * lead over the slowest worker then is what the staleness bound limits. */
static kiln_status reply(psm *p, int w)
{
    const int64_t low = slowest(p);
    if (low != INT64_MAX && p->clock[w] - low > p->stats.max_lead)
        p->stats.max_lead = p->clock[w] - low;
    p->replied[w] = p->version;
    p->deferred[w] = 0;
    const size_t lo = p->bound[p->rank], hi = p->bound[p->rank + 1];
    return kiln_mpi_send(p->mpi, p->stores + w, TAG_PARAMS, p->params + lo, hi - lo, 0,
                         p->m->placement.step_timeout);
}

static int64_t slowest(const psm *p)
{
    int64_t s = INT64_MAX;
    for (int w = 0; w < p->workers; w++)
        if (!p->done[w] && p->clock[w] < s)
            s = p->clock[w];
    return s;
}

/* Replies held back by the staleness bound that it now allows. */
static kiln_status release_deferred(psm *p)
{
    kiln_status st = KILN_OK;
    const int64_t low = slowest(p);
    for (int w = 0; w < p->workers && st == KILN_OK; w++)
        if (p->deferred[w] && (low == INT64_MAX || p->clock[w] - low <= p->m->placement.max_staleness))
            st = reply(p, w);
    return st;
}

/* Applies push g (this store's shard) from worker w (under the lock): the
 * trainable part through the optimizer, the state part as sent. The update
 * is checked before it is made: one that would leave a parameter or the
 * optimizer's state of the shard non-finite is dropped here, as a push with
 * a non-finite loss is (the other stores check their shards alike, and may
 * apply theirs), and reported at the epoch's end. */
static kiln_status apply_push(psm *p, int w, const float *g)
{
    kiln_model *m = p->m;
    const size_t nt = m->plan.n_trainable_floats;
    const size_t lo = p->bound[p->rank], hi = p->bound[p->rank + 1];
    const size_t t_hi = hi < nt ? hi : nt, s_lo = lo > nt ? lo : nt;
    float *slots[KILN_MAX_OPTIMIZER_SLOTS] = {NULL};
    for (int i = 0; i < KILN_MAX_OPTIMIZER_SLOTS; i++)
        slots[i] = p->slots[i] ? p->slots[i] + lo : NULL;
    const double lr = kiln_model_learning_rate(m, p->version);
    int finite = isfinite(g[hi - lo]);
    if (finite && t_hi > lo &&
        !kiln_optimizer_update_finite_host(&m->plan.optimizer, lr, p->params + lo, g, slots,
                                           t_hi - lo, p->version + 1, &m->plan.decay, lo)) {
        finite = 0;
        p->skipped++;
    }
    if (finite) {
        if (t_hi > lo)
            kiln_optimizer_apply_host(&m->plan.optimizer, lr, p->params + lo, g, slots, t_hi - lo,
                                      p->version + 1, &m->plan.decay, lo);
        if (hi > s_lo)
            memcpy(p->params + s_lo, g + (s_lo - lo), (hi - s_lo) * sizeof(float));
        const int64_t stale = p->version - p->replied[w];
        if (stale > p->stats.max_staleness)
            p->stats.max_staleness = stale;
        p->version++;
        p->stats.reductions++;
    }
    p->clock[w]++;
    if (m->placement.max_staleness > 0 && p->clock[w] - slowest(p) > m->placement.max_staleness) {
        p->deferred[w] = 1;
        return KILN_OK;
    }
    return reply(p, w);
}

static void *serve(void *arg)
{
    psm *p = arg;
    const size_t len = p->widest + 3;
    float *buf = kiln_calloc(p->m->ctx, len, sizeof(float));
    kiln_status st = buf ? KILN_OK : KILN_ERROR_OUT_OF_MEMORY;
    while (st == KILN_OK && !kiln_flag_up(&p->stop)) {
        int from = -1, tag = -1;
        st = kiln_mpi_receive(p->mpi, -1, -1, buf, len, 0, &from, &tag, &p->stop, 0);
        if (st != KILN_OK)
            break;
        pthread_mutex_lock(&p->lock);
        const int w = from - p->stores;
        if (w < 0 || w >= p->workers) {
            st = kiln_error(p->m->ctx, KILN_ERROR_STATE, "parameter store: a message from "
                            "rank %d, which is not a worker", from);
        } else if (tag == TAG_PUSH) {
            st = apply_push(p, w, buf);
        } else if (tag == TAG_DONE) {
            p->done[w] = 1;
            p->n_done++;
        }
        if (st == KILN_OK)
            st = release_deferred(p);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_lock(&p->lock);
    if (st != KILN_OK && st != KILN_ERROR_STOPPED) {
        p->server_status = st;
        snprintf(p->server_error, sizeof p->server_error, "%s",
                 kiln_context_last_error(p->m->ctx));
    }
    pthread_mutex_unlock(&p->lock);
    kiln_free(p->m->ctx, buf);
    return NULL;
}

/* A worker trains the batches whose number is its own, modulo the workers;
 * stores train none. Everyone evaluates whole batches. */
static void psm_shard(void *impl, int train, int64_t ahead, int32_t n, int32_t *first,
                      int32_t *count)
{
    const psm *p = impl;
    const int64_t idx = p->m->training.epoch_step + ahead;
    *first = 0;
    *count = !train || (p->rank >= p->stores && idx % p->workers == p->rank - p->stores) ? n
                                                                                       : 0;
}

static kiln_status psm_train_step(void *impl, const kiln_batch *b, double *sums)
{
    psm *p = impl;
    kiln_model *m = p->m;
    /* The batch's place in its epoch (fit's, so that a resumed epoch deals
     * its batches to the workers as the whole epoch would have). */
    const int64_t idx = m->training.epoch_step;
    memset(sums, 0, KILN_N_SUMS * sizeof *sums);
    if (p->rank < p->stores || idx % p->workers != p->rank - p->stores)
        return KILN_OK;   /* another worker's batch (or a store) */
    const size_t n = m->plan.n_param_floats, nt = m->plan.n_trainable_floats;
    kiln_replica *r = p->r;
    double s[KILN_N_SUMS] = {0};
    r->first_sample = 0;
    r->step_number = m->training.n_train_steps;
    kiln_status st = kiln_replica_upload(r, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(r, b->n, 1);
    if (st == KILN_OK)
        st = kiln_replica_loss(r, b->n, kiln_loss_scale(kiln_model_counted(m, b->labels, b->n)));
    if (st == KILN_OK)
        st = kiln_replica_backward(r, b->n, NULL, NULL);
    if (st == KILN_OK)
        st = kiln_buffer_read(r->dev, r->grads, 0, p->msg, nt * sizeof(float));
    if (st == KILN_OK && n > nt)
        st = kiln_buffer_read(r->dev, r->params, nt * sizeof(float), p->msg + nt,
                              (n - nt) * sizeof(float));
    if (st == KILN_OK)
        st = kiln_replica_read_sums(r, s);
    if (st != KILN_OK)
        return st;
    /* A gradient can be NaN under a finite loss (a ReLU maps NaN to 0): every
     * store then drops the push, as for a non-finite loss, and fit sees one. */
    if (!kiln_optimizer_all_finite(p->msg, nt))
        s[0] = NAN;
    /* Clipping: by the push's own whole-model norm, before the shards part. */
    if (isfinite(s[0]))
        kiln_clip_host(m, p->msg);
    for (int k = 0; k < p->stores && st == KILN_OK; k++) {
        const size_t lo = p->bound[k], hi = p->bound[k + 1];
        memcpy(p->slice, p->msg + lo, (hi - lo) * sizeof(float));
        p->slice[hi - lo] = (float)s[0];
        p->slice[hi - lo + 1] = (float)s[1];
        p->slice[hi - lo + 2] = (float)b->n;
        st = kiln_mpi_send(p->mpi, k, TAG_PUSH, p->slice, hi - lo + 3, 0, m->placement.step_timeout);
    }
    for (int k = 0; k < p->stores && st == KILN_OK; k++)   /* each shard, after this push */
        st = kiln_mpi_receive(p->mpi, k, TAG_PARAMS, p->msg + p->bound[k],
                              p->bound[k + 1] - p->bound[k], 0, NULL, NULL, NULL,
                              m->placement.step_timeout);
    if (st == KILN_OK)
        st = kiln_replica_write_params(r, p->msg);
    s[KILN_SUM_SAMPLES] = b->n;
    s[KILN_SUM_UPDATE] = 0;   /* the stores check the update and report at drain */
    memcpy(sums, s, sizeof s);
    kiln_sums_add(p->reported, sums);
    return st;
}

/* End of an epoch: every worker done, sums over the ranks, one model. */
static kiln_status psm_drain(void *impl, double *sums)
{
    psm *p = impl;
    kiln_model *m = p->m;
    const size_t n = m->plan.n_param_floats;
    kiln_status st = KILN_OK;
    int skipped = 0;
    if (p->rank >= p->stores) {
        float one = 1;
        for (int k = 0; k < p->stores && st == KILN_OK; k++)
            st = kiln_mpi_send(p->mpi, k, TAG_DONE, &one, 1, 0, m->placement.step_timeout);
    } else {
        const kiln_deadline deadline = kiln_deadline_in(m->placement.step_timeout);
        pthread_mutex_lock(&p->lock);
        while (p->n_done < p->workers && p->server_status == KILN_OK &&
               !kiln_deadline_passed(deadline)) {
            pthread_mutex_unlock(&p->lock);
            const struct timespec tick = {.tv_sec = 0, .tv_nsec = 1000000};
            nanosleep(&tick, NULL);
            pthread_mutex_lock(&p->lock);
        }
        if (p->server_status != KILN_OK)
            st = kiln_error(m->ctx, p->server_status, "%s", p->server_error);
        else if (p->n_done < p->workers)
            st = kiln_error(m->ctx, KILN_ERROR_TIMEOUT, "parameter store: %d of %d workers "
                            "finished the epoch within the %.1f s watchdog", p->n_done,
                            p->workers, m->placement.step_timeout);
        p->n_done = 0;
        memset(p->done, 0, (size_t)p->workers * sizeof(int));
        skipped = p->skipped;
        p->skipped = 0;
        pthread_mutex_unlock(&p->lock);
    }
    double all[KILN_N_SUMS];
    memcpy(all, p->reported, sizeof all);
    /* A dropped update reaches every rank's fit through the sum. */
    if (skipped)
        all[KILN_SUM_UPDATE] = NAN;
    if (st == KILN_OK)
        st = kiln_mpi_sum_doubles(p->mpi, all, KILN_N_SUMS, m->placement.step_timeout);
    for (int i = 0; i < KILN_N_SUMS; i++) {
        sums[i] = all[i] - p->reported[i];
        p->reported[i] = 0;
    }
    /* The whole store to every rank: parameters, then each optimizer slot.
     * A worker that has its copy starts the next epoch, whose pushes this
     * store's thread applies while this one may still be gathering: a store
     * sends a copy of its shard taken under the lock, and takes in only
     * the other stores' shards (its own may be newer by then). */
    const int slots = kiln_optimizer_slot_count(&m->plan.optimizer);
    const int store = p->rank < p->stores;
    const size_t lo = store ? p->bound[p->rank] : 0, hi = store ? p->bound[p->rank + 1] : 0;
    int64_t version = 0;
    for (int i = -1; i < slots && st == KILN_OK; i++) {
        if (store) {
            pthread_mutex_lock(&p->lock);
            memcpy(p->slice, (i < 0 ? p->params : p->slots[i]) + lo, (hi - lo) * sizeof(float));
            if (i < 0)
                version = p->version;
            pthread_mutex_unlock(&p->lock);
        }
        float *all = i < 0 ? p->msg : p->slice_all;
        st = kiln_mpi_gather_all(p->mpi, p->slice, p->counts, all, m->placement.step_timeout);
        if (st == KILN_OK && store) {   /* workers keep no optimizer state */
            float *dst = i < 0 ? p->params : p->slots[i];
            pthread_mutex_lock(&p->lock);
            memcpy(dst, all, lo * sizeof(float));
            memcpy(dst + hi, all + hi, (n - hi) * sizeof(float));
            pthread_mutex_unlock(&p->lock);
        }
    }
    if (st == KILN_OK)
        st = kiln_replica_write_params(p->r, p->msg);
    m->training.n_optimizer_steps = version;   /* the store's at the epoch's end (workers: 0) */
    return st;
}

static kiln_status psm_eval_step(void *impl, const kiln_batch *b, double *sums)
{
    psm *p = impl;
    kiln_status st = kiln_replica_upload(p->r, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(p->r, b->n, 0);
    if (st == KILN_OK)
        st = kiln_replica_loss(p->r, b->n, 1.0f);
    if (st == KILN_OK)
        st = kiln_replica_read_sums(p->r, sums);
    return st;
}

static kiln_status psm_predict_step(void *impl, const kiln_batch *b, float *outputs)
{
    psm *p = impl;
    kiln_status st = kiln_replica_upload(p->r, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(p->r, b->n, 0);
    if (st == KILN_OK)
        st = kiln_replica_read_output(p->r, b->n, outputs);
    return st;
}

static kiln_status psm_get_params(void *impl, float *flat)
{
    psm *p = impl;
    if (p->rank >= p->stores)
        return kiln_replica_read_params(p->r, flat);
    pthread_mutex_lock(&p->lock);
    memcpy(flat, p->params, p->m->plan.n_param_floats * sizeof(float));
    pthread_mutex_unlock(&p->lock);
    return KILN_OK;
}

static kiln_status psm_set_params(void *impl, const float *flat)
{
    psm *p = impl;
    if (p->rank < p->stores) {
        pthread_mutex_lock(&p->lock);
        memcpy(p->params, flat, p->m->plan.n_param_floats * sizeof(float));
        pthread_mutex_unlock(&p->lock);
    }
    return kiln_replica_write_params(p->r, flat);
}

/* Optimizer state lives on the store ranks (whole after each epoch's
 * drain; rank 0 writes checkpoints); workers keep none. */
static kiln_status psm_slots(void *impl, float *const *slots, int get)
{
    psm *p = impl;
    const size_t bytes = p->m->plan.n_param_floats * sizeof(float);
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < kiln_optimizer_slot_count(&p->m->plan.optimizer); i++) {
        if (p->rank >= p->stores && get)
            memset(slots[i], 0, bytes);
        else if (p->rank < p->stores)
            memcpy(get ? slots[i] : p->slots[i], get ? p->slots[i] : slots[i], bytes);
    }
    pthread_mutex_unlock(&p->lock);
    return KILN_OK;
}

static kiln_status psm_get_slots(void *impl, float *const *slots)
{
    return psm_slots(impl, slots, 1);
}

static kiln_status psm_set_slots(void *impl, const float *const *slots)
{
    return psm_slots(impl, (float *const *)slots, 0);
}

static kiln_status psm_set_optimizer_steps(void *impl, int64_t steps)
{
    psm *p = impl;
    pthread_mutex_lock(&p->lock);
    if (p->rank < p->stores)
        p->version = steps;
    pthread_mutex_unlock(&p->lock);
    return KILN_OK;
}

static int32_t psm_replica_count(void *impl)
{
    (void)impl;
    return 1;
}

/* Each worker process trains whole batches: none is split. */
static kiln_replica *psm_replica_at(void *impl, int32_t i)
{
    return i == 0 ? ((psm *)impl)->r : NULL;
}

static void psm_stats(void *impl, kiln_strategy_stats *out)
{
    psm *p = impl;
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}

static void psm_destroy(void *impl)
{
    psm *p = impl;
    if (!p)
        return;
    kiln_context *ctx = p->m->ctx;
    kiln_flag_raise(&p->stop);
    if (p->server_started)
        pthread_join(p->server, NULL);
    kiln_replica_destroy(p->r);
    if (p->mpi)
        p->m->placement.mpi = NULL;
    kiln_mpi_leave(p->mpi);
    for (int i = 0; i < KILN_MAX_OPTIMIZER_SLOTS; i++)
        kiln_free(ctx, p->slots[i]);
    kiln_free(ctx, p->params);
    kiln_free(ctx, p->msg);
    kiln_free(ctx, p->bound);
    kiln_free(ctx, p->slice);
    kiln_free(ctx, p->slice_all);
    kiln_free(ctx, p->counts);
    kiln_free(ctx, p->clock);
    kiln_free(ctx, p->replied);
    kiln_free(ctx, p->done);
    kiln_free(ctx, p->deferred);
    pthread_mutex_destroy(&p->lock);
    kiln_free(ctx, p);
}

/* Long but linear: each step runs only while st is KILN_OK, and psm_destroy
 * undoes whatever was done. */
static kiln_status psm_create(kiln_model *m, void **impl)
{
    kiln_context *ctx = m->ctx;
    if (m->plan.accumulation_steps > 1)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED,
                          "kiln_model_compile: the parameter_server strategy applies every "
                          "batch's gradient as it arrives; gradient_accumulation_steps must be "
                          "0 or 1");
    psm *p = kiln_calloc(ctx, 1, sizeof *p);
    if (!p)
        return kiln_error_oom(ctx, "a strategy", sizeof *p);
    p->m = m;
    pthread_mutex_init(&p->lock, NULL);
    const size_t n = m->plan.n_param_floats ? m->plan.n_param_floats : 1;
    kiln_status st = kiln_mpi_join(&ctx->host, &p->mpi);
    if (st == KILN_OK) {
        p->rank = kiln_mpi_rank(p->mpi);
        p->world = kiln_mpi_size(p->mpi);
        p->stores = m->placement.store_ranks;
        p->workers = p->world - p->stores;
        m->placement.rank = p->rank;
        m->placement.world = p->world;
        m->placement.mpi = p->mpi;
        static const char *const names[] = {
            "parameter_store_ranks", "max_staleness",
            "#model (its layers' kinds, names and parameter shapes)",
            "#loss, optimizer and optimizer settings"};
        const int64_t mine[] = {p->stores, m->placement.max_staleness,
                                (int64_t)kiln_model_fingerprint(m),
                                (int64_t)kiln_model_training_hash(m)};
        st = kiln_mpi_check_same(p->mpi, "kiln_model_compile: parameter_server", names, mine, 4,
                                 m->placement.step_timeout);
    }
    if (st == KILN_OK && p->workers < 1)
        st = kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                        "kiln_model_compile: a parameter store on %d rank(s) needs at least one "
                        "worker rank besides; the job has %d process(es)", p->stores, p->world);
    if (st == KILN_OK) {   /* equal shards of the flat array */
        p->bound = kiln_calloc(ctx, (size_t)p->stores + 1, sizeof(size_t));
        p->counts = kiln_calloc(ctx, (size_t)p->world, sizeof(int));
        p->slice_all = kiln_calloc(ctx, n, sizeof(float));
        if (!p->bound || !p->counts || !p->slice_all)
            st = kiln_error_oom(ctx, "the store's shards", n * sizeof(float));
        for (int k = 0; st == KILN_OK && k <= p->stores; k++)
            p->bound[k] = m->plan.n_param_floats * (size_t)k / (size_t)p->stores;
        for (int k = 0; st == KILN_OK && k < p->stores; k++) {
            p->counts[k] = (int)(p->bound[k + 1] - p->bound[k]);
            if (p->bound[k + 1] - p->bound[k] > p->widest)
                p->widest = p->bound[k + 1] - p->bound[k];
        }
        if (st == KILN_OK && !(p->slice = kiln_calloc(ctx, p->widest + 3, sizeof(float))))
            st = kiln_error_oom(ctx, "a push", (p->widest + 3) * sizeof(float));
    }
    if (st == KILN_OK && !(p->msg = kiln_calloc(ctx, n + 3, sizeof(float))))
        st = kiln_error_oom(ctx, "a push", (n + 3) * sizeof(float));
    float *init = st == KILN_OK ? kiln_calloc(ctx, n, sizeof(float)) : NULL;
    if (st == KILN_OK && !init)
        st = kiln_error_oom(ctx, "initial parameters", n * sizeof(float));
    if (st == KILN_OK)
        kiln_model_init_params(m, init);
    if (st == KILN_OK)   /* one model everywhere: rank 0's */
        st = kiln_mpi_broadcast(p->mpi, init, m->plan.n_param_floats, m->placement.step_timeout);
    if (st == KILN_OK)
        st = kiln_replica_create(m, ctx->devices[0], &p->r);
    if (st == KILN_OK)
        st = kiln_replica_write_params(p->r, init);
    if (st == KILN_OK && p->rank < p->stores) {
        p->params = init;
        init = NULL;
        p->clock = kiln_calloc(ctx, (size_t)p->workers, sizeof(int64_t));
        p->replied = kiln_calloc(ctx, (size_t)p->workers, sizeof(int64_t));
        p->done = kiln_calloc(ctx, (size_t)p->workers, sizeof(int));
        p->deferred = kiln_calloc(ctx, (size_t)p->workers, sizeof(int));
        if (!p->clock || !p->replied || !p->done || !p->deferred)
            st = kiln_error_oom(ctx, "the store's bookkeeping", (size_t)p->workers * 32);
        for (int i = 0; st == KILN_OK && i < kiln_optimizer_slot_count(&m->plan.optimizer); i++)
            if (!(p->slots[i] = kiln_calloc(ctx, n, sizeof(float))))
                st = kiln_error_oom(ctx, "the parameter store", n * sizeof(float));
        if (st == KILN_OK && pthread_create(&p->server, NULL, serve, p) != 0)
            st = kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY, "parameter store: cannot start its "
                            "thread");
        p->server_started = st == KILN_OK;
    }
    kiln_free(ctx, init);
    if (st != KILN_OK) {
        psm_destroy(p);
        return st;
    }
    *impl = p;
    return KILN_OK;
}

const kiln_strategy_ops kiln_strategy_parameter_server_mpi = {
    .name = "parameter_server", .create = psm_create, .destroy = psm_destroy,
    .train_step = psm_train_step, .eval_step = psm_eval_step, .predict_step = psm_predict_step,
    .get_params = psm_get_params, .set_params = psm_set_params, .replica_count = psm_replica_count,
    .replica = psm_replica_at, .stats = psm_stats, .get_slots = psm_get_slots,
    .set_slots = psm_set_slots, .drain = psm_drain,
    .set_optimizer_steps = psm_set_optimizer_steps, .shard = psm_shard,
};
