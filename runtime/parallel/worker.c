#include "runtime/parallel/worker.h"

#include "runtime/context/context.h"

#include <stdio.h>


struct kiln_worker {
    kiln_context *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, finished;
    kiln_job_fn fn;
    void *arg;
    int started;             /* 0 until the thread runs: 1 bound, -1 not */
    int has_job, done, stopping;
    kiln_status status;
    kiln_diag diag;          /* what the jobs' failures say; this thread's alone */
};

static void *worker_main(void *arg)
{
    kiln_worker *w = arg;
    /* Unbound, a job's messages would go to the host's fallback, not to
     * w->diag where the caller reads them. kiln_worker_start waits for the
     * answer: binding allocates, and an allocation failure must fail the
     * start (not a job that may never come), at the same point of the
     * caller's allocations every time. */
    const int bound = kiln_diag_bind(&w->ctx->host, &w->diag);
    pthread_mutex_lock(&w->lock);
    w->started = bound ? 1 : -1;
    pthread_cond_broadcast(&w->finished);
    while (bound) {
        while (!w->has_job && !w->stopping)
            pthread_cond_wait(&w->wake, &w->lock);
        if (!w->has_job && w->stopping)
            break;
        kiln_job_fn fn = w->fn;
        void *job = w->arg;
        pthread_mutex_unlock(&w->lock);
        const kiln_status st = fn(job);
        pthread_mutex_lock(&w->lock);
        w->has_job = 0;
        w->done = 1;
        w->status = st;
        pthread_cond_broadcast(&w->finished);
    }
    pthread_mutex_unlock(&w->lock);
    if (bound)
        kiln_diag_bind(&w->ctx->host, NULL);
    return NULL;
}

static void release(kiln_worker *w)
{
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->finished);
    kiln_free(w->ctx, w);
}

kiln_status kiln_worker_start(kiln_context *ctx, kiln_worker **out)
{
    *out = NULL;
    kiln_worker *w = kiln_calloc(ctx, 1, sizeof *w);
    if (!w)
        return kiln_error_oom(ctx, "a worker thread", sizeof *w);
    w->ctx = ctx;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    kiln_cond_init_monotonic(&w->finished);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        release(w);
        return kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY, "cannot start a worker thread");
    }
    pthread_mutex_lock(&w->lock);
    while (!w->started)
        pthread_cond_wait(&w->finished, &w->lock);
    const int bound = w->started > 0;
    pthread_mutex_unlock(&w->lock);
    if (!bound) {   /* the thread is ending: nothing to stop */
        pthread_join(w->thread, NULL);
        release(w);
        return kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY,
                          "out of host memory for a worker thread's diagnostics");
    }
    *out = w;
    return KILN_OK;
}

void kiln_worker_post(kiln_worker *w, kiln_job_fn fn, void *arg)
{
    pthread_mutex_lock(&w->lock);
    w->fn = fn;
    w->arg = arg;
    w->has_job = 1;
    w->done = 0;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

int kiln_worker_wait(kiln_worker *w, kiln_deadline deadline, kiln_status *status)
{
    int finished = 1;
    pthread_mutex_lock(&w->lock);
    while (!w->done) {
        if (!kiln_cond_wait_until(&w->finished, &w->lock, deadline)) {
            finished = w->done;
            break;
        }
    }
    if (finished && status)
        *status = w->status;
    pthread_mutex_unlock(&w->lock);
    return finished;
}

int kiln_worker_stop(kiln_worker *w, double grace)
{
    if (!w)
        return 1;
    pthread_mutex_lock(&w->lock);
    const int busy = w->has_job;
    w->stopping = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    if (busy && !kiln_worker_wait(w, kiln_deadline_in(grace), NULL)) {
        /* Stuck in a driver call: joining would hang the caller. */
        pthread_detach(w->thread);
        kiln_log(w->ctx, KILN_LOG_ERROR, "a worker thread did not stop within %.0f s; it is "
                 "left detached", grace);
        return 0;
    }
    pthread_join(w->thread, NULL);
    release(w);
    return 1;
}

const kiln_diag *kiln_worker_diag(const kiln_worker *w)
{
    return &w->diag;
}
