/* Private: the shared-memory gradient reducer. It knows flat host buffers,
 * buckets (contiguous ranges of them) and replicas, never layers.
 *
 * Each replica owns a host slot as long as the gradient. In a round, a
 * replica fills a bucket's range of its slot and submits it; once every
 * replica has submitted a bucket, a reducer thread sums the slots' ranges in
 * replica order 0, 1, ... (so results are identical run to run) into the
 * result buffer. Waiters block until every bucket of the round is reduced,
 * the round is cancelled, or a timeout passes. */
#ifndef KILN_COMM_REDUCER_H
#define KILN_COMM_REDUCER_H

#include "base/flag.h"
#include "base/host.h"
#include "kiln.h"

#include <stddef.h>

typedef struct kiln_reducer kiln_reducer;

typedef struct kiln_bucket {
    size_t offset, count;   /* floats */
} kiln_bucket;

/* Copies `buckets`. n_threads reducer threads (>= 1) are started. */
kiln_status kiln_reducer_create(kiln_host *host, int n_replicas, size_t length,
                                const kiln_bucket *buckets, int n_buckets, int n_threads,
                                kiln_reducer **out);
/* Stops and joins the threads. Accepts NULL. */
void kiln_reducer_destroy(kiln_reducer *r);

/* Where replica k writes its gradient (length floats). */
float *kiln_reducer_slot(kiln_reducer *r, int replica);
/* The summed gradient of the round, valid after kiln_reducer_wait succeeds. */
const float *kiln_reducer_result(const kiln_reducer *r);

/* Starts a round: no bucket submitted, none reduced, not cancelled. Call
 * when no replica is submitting. */
void kiln_reducer_begin(kiln_reducer *r);
/* Replica `replica` has written bucket `bucket` of its slot. */
void kiln_reducer_submit(kiln_reducer *r, int replica, int bucket);
/* Makes every waiter of this round return KILN_ERROR_STOPPED. */
void kiln_reducer_cancel(kiln_reducer *r);

/* Waits until every bucket of the round is reduced (timeout <= 0: forever):
 * KILN_OK; KILN_ERROR_TIMEOUT when the time ran out, KILN_ERROR_STOPPED when
 * the round was cancelled, each with a message. */
kiln_status kiln_reducer_wait(kiln_reducer *r, double timeout_seconds);

/* A second stage for every bucket (multi-worker training: the sum across
 * processes). After bucket b is summed here, `fn` transforms its range of
 * the result in place; buckets go through fn one at a time, in bucket
 * order, on a thread of its own, so that every process calls it in the
 * same order. `abort` becomes nonzero when the round is cancelled. A
 * round is done once every bucket went through fn; a failing fn cancels
 * the round and its status is kept (kiln_reducer_cross_status). */
typedef kiln_status (*kiln_reducer_cross_fn)(void *user, float *data, size_t count,
                                             const kiln_flag *abort);
kiln_status kiln_reducer_set_cross(kiln_reducer *r, kiln_reducer_cross_fn fn, void *user);
/* KILN_OK, or the status of the fn call that failed this round. */
kiln_status kiln_reducer_cross_status(kiln_reducer *r);

/* Time the last round's buckets spent being summed, and how much of it fell
 * before `until` (a kiln_now() time, e.g. when backward ended everywhere):
 * the reduction hidden behind compute. */
void kiln_reducer_timing(const kiln_reducer *r, double until, double *busy, double *hidden);

/* Plans buckets over a gradient of `length` floats given the boundaries it
 * may be cut at (ascending offsets, e.g. where each layer's parameters
 * start), in reverse order: the last layers' parameters first, since
 * backward produces them first. The first bucket holds at most first_bytes,
 * the others at most bucket_bytes (0: one bucket per boundary). Returns the
 * number of buckets written to `out` (room for n_cuts + 1). */
int kiln_reducer_plan(const size_t *cuts, int n_cuts, size_t length, size_t first_bytes,
                      size_t bucket_bytes, kiln_bucket *out);

#endif
