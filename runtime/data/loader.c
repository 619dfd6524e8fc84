/* The loader: a ring of batch slots filled by a pool of threads. The
 * fitting thread schedules steps into free slots (in step order, so the
 * share of a step is asked in order) and takes them back in step order;
 * loader threads fill whichever queued slot has the lowest step.
 *
 * A read can block forever (an application's fill or map function that
 * waits on something that never comes), and a thread inside one cannot be
 * killed. So every wait for a thread is bounded by the watchdog: past it,
 * the loader is latched broken, and on destroy a thread still reading is
 * detached. The loader (and a reference on the dataset, which holds the
 * context) lives until its last thread ends: the owner and every thread
 * hold it, and whoever leaves last frees it. */
#include "runtime/data/loader.h"

#include "base/flag.h"
#include "runtime/context/context.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_FILLING, SLOT_READY } slot_state;

typedef struct slot {
    slot_state state;
    int64_t step;
    int32_t n, first, count;
    float *features;
    unsigned char *labels;
    kiln_status status;          /* of a filled slot */
    char message[sizeof(((kiln_diag *)0)->message)];
    int32_t at;                  /* the sample of the batch being read (atomic) */
    double since;                /* kiln_now() when a thread took it */
} slot;

typedef struct loader_thread {
    kiln_loader *owner;
    pthread_t thread;
    int started;
    int filling;                 /* under lock: inside a slot's reads */
    int detached;                /* destroy left it running */
    kiln_diag diag;              /* this thread's messages */
    float *scratch;              /* one sample, for augmentation */
} loader_thread;

struct kiln_loader {
    kiln_context *ctx;
    kiln_loader_config c;
    size_t label_bytes;
    int32_t capacity;            /* samples a slot holds */
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    slot *slots;
    loader_thread *threads;
    int32_t n_threads;
    float *scratch;              /* the calling thread's, without threads */
    /* The epoch: under lock. `order` is the loader's own copy, so that a
     * thread left reading never shares an array its caller frees. */
    int64_t *order;
    int64_t count, steps;
    int32_t epoch;
    int64_t next_step;           /* the step kiln_loader_next returns next */
    int64_t scheduled;           /* steps below this one are scheduled */
    slot *taken;                 /* the slot last returned, freed by the next call */
    kiln_flag cancel;            /* the epoch ends: stop between samples */
    int stopping;                /* destroy: threads leave */
    /* Under lock: the owner (until destroy) and each running thread; the
     * last to leave frees the loader and lets `held` go. */
    int live;
    kiln_dataset *held;          /* c.ds, kept alive for a thread left reading */
    /* The plan's id ranges and their names, copied: a thread left reading
     * may check ids after the model they came from is gone. */
    kiln_id_range ids[KILN_MAX_MODEL_INPUTS];
    char id_names[KILN_MAX_MODEL_INPUTS][2][64];
    /* A wait passed the watchdog: a thread may still fill a slot, which no
     * later epoch may reuse; every later call fails with the reason. */
    int broken;
    char broken_reason[sizeof(((kiln_diag *)0)->message)];
};

int32_t kiln_loader_default_threads(int32_t requested)
{
    if (requested > 0)
        return requested;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 2 ? (int32_t)(cores - 1) : 1;
}

/* Reads the slot's samples; returns their status, the message left in the
 * calling thread's diagnostics. */
static kiln_status fill(kiln_loader *l, slot *s, float *scratch)
{
    const kiln_dataset *ds = l->c.ds;
    const int64_t base = s->step * l->c.batch_size + s->first;
    kiln_read_plan plan = l->c.plan;
    plan.epoch = l->epoch;
    for (int32_t i = 0; i < s->count; i++) {
        /* Checked before `order` is read: an abandoned thread returning
         * from a read never touches the epoch's order again. */
        if (kiln_flag_up(&l->cancel))
            return KILN_ERROR_STOPPED;
        __atomic_store_n(&s->at, i, __ATOMIC_RELAXED);
        const kiln_status st = kiln_dataset_read_sample(
            ds, l->order[base + i], &plan, s->features + (size_t)i * (size_t)ds->feature_size,
            s->labels + (size_t)i * l->label_bytes, scratch);
        if (st != KILN_OK)
            return st;
    }
    return KILN_OK;
}

static slot *lowest_queued(kiln_loader *l)
{
    slot *best = NULL;
    for (int32_t k = 0; k < l->c.prefetch; k++)
        if (l->slots[k].state == SLOT_QUEUED && (!best || l->slots[k].step < best->step))
            best = &l->slots[k];
    return best;
}

static void release(kiln_loader *l);

/* Drops a reference on the loader (under no lock); the last frees it. */
static void leave(kiln_loader *l)
{
    pthread_mutex_lock(&l->lock);
    const int last = --l->live == 0;
    pthread_mutex_unlock(&l->lock);
    if (last)
        release(l);
}

static void finish(slot *s, kiln_status st, const char *message)
{
    s->status = st;
    snprintf(s->message, sizeof s->message, "%s", st == KILN_OK ? "" : message);
    s->state = SLOT_READY;
}

static void *thread_main(void *arg)
{
    loader_thread *t = arg;
    kiln_loader *l = t->owner;
    /* Unbound, this thread's messages would not reach the fitting thread. */
    const int bound = kiln_diag_bind(&l->ctx->host, &t->diag);
    pthread_mutex_lock(&l->lock);
    for (;;) {
        slot *s = NULL;
        while (!l->stopping && !(s = lowest_queued(l)))
            pthread_cond_wait(&l->work, &l->lock);
        if (!s)
            break;
        s->state = SLOT_FILLING;
        s->at = 0;
        s->since = kiln_now();
        t->filling = 1;
        pthread_mutex_unlock(&l->lock);
        const kiln_status st = bound ? fill(l, s, t->scratch) : KILN_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&l->lock);
        t->filling = 0;
        finish(s, st, bound ? t->diag.message : "out of host memory for a loader thread's "
                                                "diagnostics");
        pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->lock);
    /* The last to leave may close the context: nothing of the host may
     * be left to this thread's exit. */
    kiln_diag_release(&l->ctx->host);
    leave(l);
    return NULL;
}

/* Under lock: the next unscheduled step into slot `s`, when the epoch has one. */
static void schedule(kiln_loader *l, slot *s)
{
    if (l->scheduled >= l->steps) {
        s->state = SLOT_FREE;
        return;
    }
    const int64_t step = l->scheduled++, start = step * l->c.batch_size;
    s->step = step;
    s->n = (int32_t)(l->count - start < l->c.batch_size ? l->count - start : l->c.batch_size);
    s->first = 0;
    s->count = s->n;
    if (l->c.share)
        l->c.share(l->c.share_user, step - l->next_step, s->n, &s->first, &s->count);
    s->state = SLOT_QUEUED;
}

void kiln_loader_begin(kiln_loader *l, const int64_t *order, int64_t count, int64_t first_step,
                       int32_t epoch)
{
    pthread_mutex_lock(&l->lock);
    if (l->broken) {   /* a slot may still be filling: kiln_loader_next says why */
        pthread_mutex_unlock(&l->lock);
        return;
    }
    memcpy(l->order, order, (size_t)count * sizeof *order);
    l->count = count;
    l->steps = (count + l->c.batch_size - 1) / l->c.batch_size;
    l->epoch = epoch;
    l->next_step = l->scheduled = first_step;
    l->taken = NULL;
    kiln_flag_lower(&l->cancel);
    for (int32_t k = 0; k < l->c.prefetch; k++)
        schedule(l, &l->slots[k]);
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->lock);
}

static slot *slot_of_step(kiln_loader *l, int64_t step)
{
    for (int32_t k = 0; k < l->c.prefetch; k++)
        if (l->slots[k].state != SLOT_FREE && l->slots[k].step == step)
            return &l->slots[k];
    return NULL;
}

/* Where the dataset's samples come from, for a message. */
static void name_source(const kiln_dataset *ds, char *text, size_t size)
{
    const kiln_dataset *root = ds;
    while (root->parent)
        root = root->parent;
    snprintf(text, size, "the dataset's %s%s%s", root->ops ? root->ops->kind : "arrays",
             root->ops ? " source" : "", ds->transforms.map ? " and its map function" : "");
}

/* Under lock: the watchdog passed waiting for slot `s`. Names what the
 * loader was doing: the sample the slot's thread is reading, or, when
 * every thread was busy elsewhere, the read that holds the oldest. */
static void describe_stall(kiln_loader *l, const slot *s, char *text, size_t size)
{
    const slot *busy = s->state == SLOT_FILLING ? s : NULL;
    for (int32_t k = 0; !busy && k < l->c.prefetch; k++)
        if (l->slots[k].state == SLOT_FILLING &&
            (!busy || l->slots[k].since < busy->since))
            busy = &l->slots[k];
    char source[128];
    name_source(l->c.ds, source, sizeof source);
    int n = snprintf(text, size, "the loader did not deliver the batch of step %lld (epoch %d) "
                     "within the %.3g s watchdog (step_timeout_seconds): ",
                     (long long)s->step + 1, (int)l->epoch + 1, l->c.timeout);
    if (n < 0 || (size_t)n >= size)
        return;
    if (!busy) {
        snprintf(text + n, size - (size_t)n, "no loader thread took it");
        return;
    }
    const int32_t at = __atomic_load_n(&busy->at, __ATOMIC_RELAXED);
    const int64_t sample = l->order[busy->step * l->c.batch_size + busy->first + at];
    snprintf(text + n, size - (size_t)n, "%sa loader thread has been reading sample %lld "
             "(%d of %d of step %lld's batch) from %s for %.3g s; it is left to finish that "
             "read on its own", busy == s ? "" : "every loader thread was busy; ",
             (long long)sample, (int)(busy->first + at) + 1, (int)busy->n,
             (long long)busy->step + 1, source, kiln_now() - busy->since);
}

/* Under lock: waits for slot `s` within the watchdog, and while the stop
 * flag (if any) is down. */
static kiln_status wait_ready(kiln_loader *l, slot *s)
{
    const kiln_deadline deadline = kiln_deadline_in(l->c.timeout);
    while (s->state != SLOT_READY) {
        if (kiln_flag_up(l->c.stop))
            return KILN_ERROR_STOPPED;
        kiln_deadline until = deadline;
        if (l->c.stop) {   /* nothing signals a raised flag: look again soon */
            const kiln_deadline poll = kiln_deadline_in(0.05);
            if (deadline.at <= 0 || poll.at < deadline.at)
                until = poll;
        }
        if (!kiln_cond_wait_until(&l->done, &l->lock, until) && s->state != SLOT_READY &&
            kiln_deadline_passed(deadline)) {
            describe_stall(l, s, l->broken_reason, sizeof l->broken_reason);
            l->broken = 1;
            return KILN_ERROR_TIMEOUT;
        }
    }
    return KILN_OK;
}

kiln_status kiln_loader_next(kiln_loader *l, kiln_loaded *out)
{
    pthread_mutex_lock(&l->lock);
    if (l->broken) {
        pthread_mutex_unlock(&l->lock);
        return kiln_error(l->ctx, KILN_ERROR_TIMEOUT, "%s", l->broken_reason);
    }
    if (l->taken) {
        schedule(l, l->taken);
        l->taken = NULL;
        pthread_cond_broadcast(&l->work);
    }
    slot *s = slot_of_step(l, l->next_step);
    if (!s) {
        pthread_mutex_unlock(&l->lock);
        return kiln_error(l->ctx, KILN_ERROR_STATE, "the loader has no step %lld to give",
                          (long long)l->next_step);
    }
    if (!l->n_threads && s->state == SLOT_QUEUED) {
        /* No threads: this thread reads, its own message kept as it is. */
        s->state = SLOT_FILLING;
        pthread_mutex_unlock(&l->lock);
        const kiln_status st = fill(l, s, l->scratch);
        pthread_mutex_lock(&l->lock);
        finish(s, st, "");
        if (st != KILN_OK) {
            pthread_mutex_unlock(&l->lock);
            return st;
        }
    }
    const kiln_status waited = wait_ready(l, s);
    if (waited != KILN_OK) {
        pthread_mutex_unlock(&l->lock);
        return waited == KILN_ERROR_STOPPED
                   ? KILN_ERROR_STOPPED
                   : kiln_error(l->ctx, waited, "%s", l->broken_reason);
    }
    const kiln_status st = s->status;
    if (st == KILN_OK) {
        *out = (kiln_loaded){.n = s->n, .first = s->first, .count = s->count,
                             .features = s->features, .labels = s->labels};
        l->next_step++;
        l->taken = s;
    }
    char message[sizeof s->message];
    memcpy(message, s->message, sizeof message);
    pthread_mutex_unlock(&l->lock);
    return st == KILN_OK ? KILN_OK : kiln_error(l->ctx, st, "%s", message);
}

void kiln_loader_end(kiln_loader *l)
{
    if (!l || !l->slots)
        return;
    pthread_mutex_lock(&l->lock);
    kiln_flag_raise(&l->cancel);
    for (int32_t k = 0; k < l->c.prefetch; k++)
        if (l->slots[k].state == SLOT_QUEUED)
            l->slots[k].state = SLOT_FREE;
    /* A thread finishes at most the sample it reads, within the watchdog.
     * After a stop the call ends with the loader: a read still running is
     * left to its thread rather than waited for. */
    if (kiln_flag_up(l->c.stop) && !l->broken)
        for (int32_t k = 0; k < l->c.prefetch && !l->broken; k++)
            if (l->slots[k].state == SLOT_FILLING) {
                snprintf(l->broken_reason, sizeof l->broken_reason, "the loader was stopped "
                         "(kiln_model_stop) while a read was running");
                l->broken = 1;
            }
    const kiln_deadline deadline = kiln_deadline_in(l->c.timeout);
    for (int32_t k = 0; k < l->c.prefetch && !l->broken; k++)
        while (l->slots[k].state == SLOT_FILLING && !l->broken)
            if (!kiln_cond_wait_until(&l->done, &l->lock, deadline) &&
                l->slots[k].state == SLOT_FILLING) {
                describe_stall(l, &l->slots[k], l->broken_reason, sizeof l->broken_reason);
                l->broken = 1;
            }
    for (int32_t k = 0; k < l->c.prefetch; k++)
        if (l->slots[k].state != SLOT_FILLING)   /* a filling one stays its thread's */
            l->slots[k].state = SLOT_FREE;
    l->taken = NULL;
    l->steps = l->scheduled = l->next_step = 0;
    pthread_mutex_unlock(&l->lock);
}

static void release(kiln_loader *l)
{
    kiln_context *ctx = l->ctx;
    for (int32_t t = 0; l->threads && t < l->n_threads; t++)
        kiln_free(ctx, l->threads[t].scratch);
    for (int32_t k = 0; l->slots && k < l->c.prefetch; k++) {
        kiln_free(ctx, l->slots[k].features);
        kiln_free(ctx, l->slots[k].labels);
    }
    kiln_free(ctx, l->slots);
    kiln_free(ctx, l->threads);
    kiln_free(ctx, l->scratch);
    kiln_free(ctx, l->order);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->done);
    pthread_mutex_destroy(&l->lock);
    kiln_dataset *held = l->held;
    kiln_free(ctx, l);
    kiln_dataset_destroy(held);   /* last: it may close the context */
}

void kiln_loader_destroy(kiln_loader *l)
{
    if (!l)
        return;
    kiln_loader_end(l);
    pthread_mutex_lock(&l->lock);
    l->stopping = 1;
    pthread_cond_broadcast(&l->work);
    /* A thread still inside a read cannot be joined without waiting on the
     * read; the others leave now (nothing is queued). The owner's
     * reference keeps `threads` alive through the loop below. */
    int stuck = 0;
    for (int32_t t = 0; l->threads && t < l->n_threads; t++) {
        l->threads[t].detached = l->threads[t].started && l->threads[t].filling;
        stuck += l->threads[t].detached;
    }
    pthread_mutex_unlock(&l->lock);
    for (int32_t t = 0; l->threads && t < l->n_threads; t++) {
        if (!l->threads[t].started)
            continue;
        if (l->threads[t].detached)
            pthread_detach(l->threads[t].thread);
        else
            pthread_join(l->threads[t].thread, NULL);
    }
    if (stuck)
        kiln_log(l->ctx, KILN_LOG_WARNING, "%d loader thread(s) still inside a read of the "
                 "dataset are left running, detached; each ends when its read returns, and "
                 "the dataset stays alive until then", stuck);
    leave(l);
}

static kiln_status alloc_buffers(kiln_loader *l)
{
    const kiln_dataset *ds = l->c.ds;
    const size_t sample = (size_t)ds->feature_size * sizeof(float);
    l->slots = kiln_calloc(l->ctx, (size_t)l->c.prefetch, sizeof *l->slots);
    l->threads = kiln_calloc(l->ctx, (size_t)(l->n_threads ? l->n_threads : 1),
                             sizeof *l->threads);
    l->scratch = kiln_alloc(l->ctx, sample);
    l->order = kiln_calloc(l->ctx, (size_t)ds->count, sizeof *l->order);
    if (!l->slots || !l->threads || !l->scratch || !l->order)
        return kiln_error_oom(l->ctx, "the loader", sample + (size_t)ds->count * 8);
    for (int32_t k = 0; k < l->c.prefetch; k++) {
        l->slots[k].features = kiln_calloc(l->ctx, (size_t)l->capacity, sample);
        l->slots[k].labels = kiln_calloc(l->ctx, (size_t)l->capacity, l->label_bytes);
        if (!l->slots[k].features || !l->slots[k].labels)
            return kiln_error_oom(l->ctx, "a batch of the loader", (size_t)l->capacity * sample);
    }
    for (int32_t t = 0; t < l->n_threads; t++)
        if (!(l->threads[t].scratch = kiln_alloc(l->ctx, sample)))
            return kiln_error_oom(l->ctx, "a loader thread's sample", sample);
    return KILN_OK;
}

kiln_status kiln_loader_create(kiln_context *ctx, const kiln_loader_config *config,
                               kiln_loader **out)
{
    *out = NULL;
    kiln_loader *l = kiln_calloc(ctx, 1, sizeof *l);
    if (!l)
        return kiln_error_oom(ctx, "the loader", sizeof *l);
    l->ctx = ctx;
    l->c = *config;
    l->live = 1;
    for (int32_t k = 0; k < config->plan.n_ids && k < KILN_MAX_MODEL_INPUTS; k++) {
        const kiln_id_range *r = &config->plan.ids[k];
        l->ids[k] = *r;
        snprintf(l->id_names[k][0], sizeof l->id_names[k][0], "%s", r->layer ? r->layer : "");
        snprintf(l->id_names[k][1], sizeof l->id_names[k][1], "%s", r->input ? r->input : "");
        l->ids[k].layer = r->layer ? l->id_names[k][0] : NULL;
        l->ids[k].input = r->input ? l->id_names[k][1] : NULL;
    }
    l->c.plan.ids = config->plan.n_ids ? l->ids : NULL;
    l->held = (kiln_dataset *)config->ds;
    __atomic_add_fetch(&l->held->refs, 1, __ATOMIC_RELAXED);
    l->c.prefetch = config->prefetch > 0 ? config->prefetch : 1;
    l->n_threads = config->threads > 0 ? config->threads : 0;
    l->label_bytes = kiln_dataset_label_bytes(config->ds);
    /* No batch holds more samples than the dataset. */
    l->capacity = config->ds->count < config->batch_size ? (int32_t)config->ds->count
                                                         : config->batch_size;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->work, NULL);
    kiln_cond_init_monotonic(&l->done);
    kiln_status st = alloc_buffers(l);
    for (int32_t t = 0; t < l->n_threads && st == KILN_OK; t++) {
        l->threads[t].owner = l;
        pthread_mutex_lock(&l->lock);
        l->live++;
        pthread_mutex_unlock(&l->lock);
        if (pthread_create(&l->threads[t].thread, NULL, thread_main, &l->threads[t]) != 0) {
            st = kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY, "cannot start loader thread %d of "
                            "%d", (int)t + 1, (int)l->n_threads);
            pthread_mutex_lock(&l->lock);
            l->live--;
            pthread_mutex_unlock(&l->lock);
        }
        l->threads[t].started = st == KILN_OK;
    }
    if (st != KILN_OK) {
        kiln_loader_destroy(l);
        return st;
    }
    *out = l;
    return KILN_OK;
}
