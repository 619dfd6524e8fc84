#include "comm/reducer.h"

#include "base/clock.h"
#include "base/host.h"

#include <string.h>

struct kiln_reducer {
    kiln_host *host;
    int n_replicas, n_buckets, n_threads;
    size_t length;
    kiln_bucket *buckets;
    float **slots;
    float *result;
    int *submitted;      /* per bucket: replicas that submitted this round */
    int *taken;          /* per bucket: a thread is summing it */
    double *started, *ended;  /* per bucket: when it was summed (kiln_now) */
    int n_reduced;
    int cancelled, stopping;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t *threads;
    int n_started;
    /* the cross stage (kiln_reducer_set_cross) */
    kiln_reducer_cross_fn cross;
    void *cross_user;
    pthread_t cross_thread;
    int cross_started;
    pthread_cond_t cross_cv;
    int *local_done;     /* per bucket: summed here this round */
    int next_cross, n_crossed;
    kiln_flag cross_abort;
    kiln_status cross_status;
};

/* Every bucket of the round has gone through every stage. */
static int round_done(const kiln_reducer *r)
{
    return r->cross ? r->n_crossed == r->n_buckets : r->n_reduced == r->n_buckets;
}

/* A fixed replica order makes the float sums reproducible: ((s0 + s1) + s2)...
 * Chunks small enough to stay in cache make it one pass over memory: each
 * slot read once, the result written once. */
#define REDUCE_CHUNK 4096

static void reduce_bucket(kiln_reducer *r, int b)
{
    const size_t lo = r->buckets[b].offset, hi = lo + r->buckets[b].count;
    float *out = r->result;
    if (r->n_replicas == 1) {
        memcpy(out + lo, r->slots[0] + lo, (hi - lo) * sizeof(float));
        return;
    }
    for (size_t c = lo; c < hi; c += REDUCE_CHUNK) {
        const size_t e = hi - c < REDUCE_CHUNK ? hi : c + REDUCE_CHUNK;
        const float *s0 = r->slots[0], *s1 = r->slots[1];
        for (size_t i = c; i < e; i++)
            out[i] = s0[i] + s1[i];
        for (int k = 2; k < r->n_replicas; k++) {
            const float *in = r->slots[k];
            for (size_t i = c; i < e; i++)
                out[i] += in[i];
        }
    }
}

static int ready_bucket(const kiln_reducer *r)
{
    for (int b = 0; b < r->n_buckets; b++)
        if (!r->taken[b] && r->submitted[b] == r->n_replicas)
            return b;
    return -1;
}

static void *reducer_thread(void *arg)
{
    kiln_reducer *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        int b;
        while (!r->stopping && (b = ready_bucket(r)) < 0)
            pthread_cond_wait(&r->work, &r->lock);
        if (r->stopping)
            break;
        r->taken[b] = 1;
        pthread_mutex_unlock(&r->lock);
        const double t0 = kiln_now();
        reduce_bucket(r, b);
        const double t1 = kiln_now();
        pthread_mutex_lock(&r->lock);
        r->started[b] = t0;
        r->ended[b] = t1;
        r->n_reduced++;
        r->local_done[b] = 1;
        if (r->cross)
            pthread_cond_broadcast(&r->cross_cv);
        else if (r->n_reduced == r->n_buckets)
            pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* Feeds the locally summed buckets to the cross stage, in bucket order. */
static void *cross_thread(void *arg)
{
    kiln_reducer *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->stopping && (r->cancelled || r->next_cross >= r->n_buckets ||
                                !r->local_done[r->next_cross]))
            pthread_cond_wait(&r->cross_cv, &r->lock);
        if (r->stopping)
            break;
        const kiln_bucket k = r->buckets[r->next_cross];
        pthread_mutex_unlock(&r->lock);
        const kiln_status st = r->cross(r->cross_user, r->result + k.offset, k.count,
                                        &r->cross_abort);
        pthread_mutex_lock(&r->lock);
        if (st != KILN_OK) {
            r->cross_status = st;
            r->cancelled = 1;
            kiln_flag_raise(&r->cross_abort);
        } else {
            r->next_cross++;
            r->n_crossed++;
        }
        if (st != KILN_OK || r->n_crossed == r->n_buckets)
            pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

kiln_status kiln_reducer_set_cross(kiln_reducer *r, kiln_reducer_cross_fn fn, void *user)
{
    if (r->cross_started)
        return kiln_fail(r->host, KILN_ERROR_STATE, "reducer: the cross stage is already set");
    pthread_mutex_lock(&r->lock);
    r->cross = fn;
    r->cross_user = user;
    r->n_crossed = r->n_buckets;  /* no round yet */
    pthread_mutex_unlock(&r->lock);
    if (pthread_create(&r->cross_thread, NULL, cross_thread, r) != 0) {
        r->cross = NULL;
        return kiln_fail(r->host, KILN_ERROR_OUT_OF_MEMORY, "reducer: cannot start a thread");
    }
    r->cross_started = 1;
    return KILN_OK;
}

kiln_status kiln_reducer_cross_status(kiln_reducer *r)
{
    pthread_mutex_lock(&r->lock);
    const kiln_status st = r->cross_status;
    pthread_mutex_unlock(&r->lock);
    return st;
}

kiln_status kiln_reducer_create(kiln_host *host, int n_replicas, size_t length,
                                const kiln_bucket *buckets, int n_buckets, int n_threads,
                                kiln_reducer **out)
{
    *out = NULL;
    if (n_replicas < 1 || n_buckets < 1 || n_threads < 1)
        return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                         "reducer: %d replicas, %d buckets, %d threads (each must be >= 1)",
                         n_replicas, n_buckets, n_threads);
    for (int b = 0; b < n_buckets; b++)
        if (buckets[b].offset > length || buckets[b].count > length - buckets[b].offset)
            return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                             "reducer: bucket %d [%zu, +%zu) overruns %zu floats", b,
                             buckets[b].offset, buckets[b].count, length);
    kiln_reducer *r = kiln_host_calloc(host, 1, sizeof *r);
    if (!r)
        return kiln_fail_oom(host, "a reducer", sizeof *r);
    r->host = host;
    r->n_replicas = n_replicas;
    r->n_buckets = n_buckets;
    r->n_threads = n_threads;
    r->length = length;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->work, NULL);
    kiln_cond_init_monotonic(&r->done);
    pthread_cond_init(&r->cross_cv, NULL);
    r->local_done = kiln_host_calloc(host, (size_t)n_buckets, sizeof(int));
    r->buckets = kiln_host_calloc(host, (size_t)n_buckets, sizeof *r->buckets);
    r->submitted = kiln_host_calloc(host, (size_t)n_buckets, sizeof(int));
    r->taken = kiln_host_calloc(host, (size_t)n_buckets, sizeof(int));
    r->started = kiln_host_calloc(host, (size_t)n_buckets, sizeof(double));
    r->ended = kiln_host_calloc(host, (size_t)n_buckets, sizeof(double));
    r->slots = kiln_host_calloc(host, (size_t)n_replicas, sizeof(float *));
    r->result = kiln_host_calloc(host, length ? length : 1, sizeof(float));
    r->threads = kiln_host_calloc(host, (size_t)n_threads, sizeof(pthread_t));
    int ok = r->local_done && r->buckets && r->submitted && r->taken && r->slots && r->result &&
             r->threads && r->started && r->ended;
    for (int k = 0; ok && k < n_replicas; k++)
        ok = (r->slots[k] = kiln_host_calloc(host, length ? length : 1, sizeof(float))) != NULL;
    if (!ok) {
        kiln_reducer_destroy(r);
        return kiln_fail_oom(host, "reducer buffers", (size_t)(n_replicas + 1) * length * 4);
    }
    memcpy(r->buckets, buckets, (size_t)n_buckets * sizeof *buckets);
    r->n_reduced = n_buckets;  /* no round yet */
    for (int t = 0; t < n_threads; t++) {
        if (pthread_create(&r->threads[t], NULL, reducer_thread, r) != 0) {
            kiln_reducer_destroy(r);
            return kiln_fail(host, KILN_ERROR_OUT_OF_MEMORY, "reducer: cannot start thread %d",
                             t);
        }
        r->n_started++;
    }
    *out = r;
    return KILN_OK;
}

void kiln_reducer_destroy(kiln_reducer *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = 1;
    kiln_flag_raise(&r->cross_abort);
    pthread_cond_broadcast(&r->work);
    pthread_cond_broadcast(&r->done);
    pthread_cond_broadcast(&r->cross_cv);
    pthread_mutex_unlock(&r->lock);
    for (int t = 0; t < r->n_started; t++)
        pthread_join(r->threads[t], NULL);
    if (r->cross_started)
        pthread_join(r->cross_thread, NULL);
    kiln_host_free(r->host, r->local_done);
    for (int k = 0; r->slots && k < r->n_replicas; k++)
        kiln_host_free(r->host, r->slots[k]);
    kiln_host_free(r->host, r->slots);
    kiln_host_free(r->host, r->result);
    kiln_host_free(r->host, r->buckets);
    kiln_host_free(r->host, r->submitted);
    kiln_host_free(r->host, r->taken);
    kiln_host_free(r->host, r->started);
    kiln_host_free(r->host, r->ended);
    kiln_host_free(r->host, r->threads);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->done);
    pthread_cond_destroy(&r->cross_cv);
    kiln_host_free(r->host, r);
}

float *kiln_reducer_slot(kiln_reducer *r, int replica)
{
    return r->slots[replica];
}

const float *kiln_reducer_result(const kiln_reducer *r)
{
    return r->result;
}

void kiln_reducer_begin(kiln_reducer *r)
{
    pthread_mutex_lock(&r->lock);
    memset(r->submitted, 0, (size_t)r->n_buckets * sizeof(int));
    memset(r->taken, 0, (size_t)r->n_buckets * sizeof(int));
    memset(r->local_done, 0, (size_t)r->n_buckets * sizeof(int));
    r->n_reduced = 0;
    r->cancelled = 0;
    r->next_cross = r->n_crossed = 0;
    kiln_flag_lower(&r->cross_abort);
    r->cross_status = KILN_OK;
    pthread_mutex_unlock(&r->lock);
}

void kiln_reducer_submit(kiln_reducer *r, int replica, int bucket)
{
    (void)replica;
    pthread_mutex_lock(&r->lock);
    if (++r->submitted[bucket] == r->n_replicas)
        pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->lock);
}

void kiln_reducer_cancel(kiln_reducer *r)
{
    pthread_mutex_lock(&r->lock);
    r->cancelled = 1;
    kiln_flag_raise(&r->cross_abort);
    pthread_cond_broadcast(&r->done);
    pthread_mutex_unlock(&r->lock);
}

kiln_status kiln_reducer_wait(kiln_reducer *r, double timeout_seconds)
{
    const kiln_deadline deadline = kiln_deadline_in(timeout_seconds);
    int timed_out = 0;
    pthread_mutex_lock(&r->lock);
    while (!round_done(r) && !r->cancelled && !r->stopping && !timed_out)
        timed_out = !kiln_cond_wait_until(&r->done, &r->lock, deadline);
    const int done = round_done(r);
    pthread_mutex_unlock(&r->lock);
    if (done)
        return KILN_OK;
    if (timed_out)
        return kiln_fail(r->host, KILN_ERROR_TIMEOUT, "reducer: the round was not reduced "
                         "within %.1f s", timeout_seconds);
    return kiln_fail(r->host, KILN_ERROR_STOPPED, "reducer: the round was cancelled");
}

void kiln_reducer_timing(const kiln_reducer *r, double until, double *busy, double *hidden)
{
    *busy = *hidden = 0;
    pthread_mutex_lock((pthread_mutex_t *)&r->lock);
    for (int b = 0; b < r->n_buckets; b++) {
        *busy += r->ended[b] - r->started[b];
        if (r->started[b] < until)
            *hidden += (r->ended[b] < until ? r->ended[b] : until) - r->started[b];
    }
    pthread_mutex_unlock((pthread_mutex_t *)&r->lock);
}

int kiln_reducer_plan(const size_t *cuts, int n_cuts, size_t length, size_t first_bytes,
                      size_t bucket_bytes, kiln_bucket *out)
{
    int n = 0;
    size_t hi = length;
    /* Walk the cuts from the end; close a bucket once it would exceed its cap. */
    for (int i = n_cuts - 1; i >= 0; i--) {
        const size_t lo = cuts[i];
        if (lo >= hi)
            continue;
        const size_t cap = (n == 0 ? first_bytes : bucket_bytes) / sizeof(float);
        const size_t next = i > 0 ? cuts[i - 1] : 0;
        /* Close at lo when the bucket already reaches its cap or the next
         * layer would take it past the cap. */
        if (cap == 0 || hi - lo >= cap || hi - next > cap || i == 0) {
            out[n].offset = lo;
            out[n].count = hi - lo;
            n++;
            hi = lo;
        }
    }
    if (hi > 0) {
        out[n].offset = 0;
        out[n].count = hi;
        n++;
    }
    return n;
}
