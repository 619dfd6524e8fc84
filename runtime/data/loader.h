/* Private: the input pipeline. Loader threads read, map and augment the
 * next batches of an epoch into a ring of `prefetch` slots while the
 * fitting thread trains on the current one; the fitting thread only takes
 * finished batches. A batch is the same whatever the number of threads:
 * each sample's transforms depend on (seed, epoch, index) alone. */
#ifndef KILN_RUNTIME_DATA_LOADER_H
#define KILN_RUNTIME_DATA_LOADER_H

#include "base/flag.h"
#include "runtime/data/dataset.h"

typedef struct kiln_loader kiln_loader;

/* Which samples of a global batch of `n` this process gathers: [*first,
 * *first + *count). `ahead` counts the steps that run before this one
 * (0: the next). NULL: all of them. */
typedef void (*kiln_share_fn)(void *user, int64_t ahead, int32_t n, int32_t *first,
                              int32_t *count);

typedef struct kiln_loader_config {
    const kiln_dataset *ds;
    int32_t batch_size;        /* samples per global batch */
    int32_t threads;           /* loader threads; 0: read on the calling thread */
    int32_t prefetch;          /* batches prepared ahead, >= 1 */
    kiln_read_plan plan;
    kiln_share_fn share;
    void *share_user;
    /* The watchdog, seconds (<= 0: none): a batch not ready this long
     * after kiln_loader_next began waiting fails it with KILN_ERROR_TIMEOUT
     * naming the read that holds it, and latches the loader broken. Reads
     * on the calling thread (threads 0) are not bounded. */
    double timeout;
    /* Raised: a wait for a batch ends with KILN_ERROR_STOPPED and no
     * message (kiln_model_stop). May be NULL. */
    const kiln_flag *stop;
} kiln_loader_config;

/* A finished batch: samples [first, first + count) of a global batch of n,
 * valid until the next kiln_loader_next or kiln_loader_end. */
typedef struct kiln_loaded {
    int32_t n, first, count;
    const float *features;
    const void *labels;
} kiln_loaded;

kiln_status kiln_loader_create(kiln_context *ctx, const kiln_loader_config *config,
                               kiln_loader **out);

/* Starts an epoch over `order` (the epoch's `count` sample indices, at
 * most the dataset's count; copied) at step `first_step`. */
void kiln_loader_begin(kiln_loader *l, const int64_t *order, int64_t count, int64_t first_step,
                       int32_t epoch);

/* The next batch of the epoch, waiting for it (within the watchdog, while
 * the stop flag is down). A failed read returns its status, its message
 * (naming the sample) on the calling thread. Once a wait has timed out,
 * every call fails with its reason. */
kiln_status kiln_loader_next(kiln_loader *l, kiln_loaded *out);

/* Stops the epoch's remaining reads (a thread finishes at most the sample
 * it is reading) and waits for them, within the watchdog: a read still
 * running after it latches the loader broken. */
void kiln_loader_end(kiln_loader *l);

/* Ends the epoch and joins the threads; a thread still inside a read (an
 * application's function that never returned) is detached instead, and
 * the loader, with its reference on the dataset, is freed by whichever of
 * them ends last. Accepts NULL. */
void kiln_loader_destroy(kiln_loader *l);

/* Loader threads for `requested` (0: processors minus 1, at least 1). */
int32_t kiln_loader_default_threads(int32_t requested);

#endif
