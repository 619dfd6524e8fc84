/* Private: a host thread that runs one job at a time for one replica, so
 * every device is driven by its own thread (PoCL's basic devices compute on
 * the thread that waits on them). */
#ifndef KILN_RUNTIME_PARALLEL_WORKER_H
#define KILN_RUNTIME_PARALLEL_WORKER_H

#include "base/clock.h"
#include "base/host.h"
#include "kiln.h"

typedef struct kiln_worker kiln_worker;

/* How long a strategy's destroy waits for a busy worker before leaving it
 * detached (kiln_worker_stop): every strategy uses the same. */
#define KILN_WORKER_STOP_GRACE 10.0
typedef kiln_status (*kiln_job_fn)(void *arg);

kiln_status kiln_worker_start(kiln_context *ctx, kiln_worker **out);
/* Hands the idle worker a job. */
void kiln_worker_post(kiln_worker *w, kiln_job_fn fn, void *arg);
/* Waits for the job until `deadline`. Returns 1 and the job's status when
 * it finished, 0 on timeout. */
int kiln_worker_wait(kiln_worker *w, kiln_deadline deadline, kiln_status *status);
/* Stops the thread, waiting up to `grace` seconds for a running job; a
 * thread still busy then is detached (its job's memory is the caller's to
 * leak). Returns 1 if the thread was joined. Accepts NULL. */
int kiln_worker_stop(kiln_worker *w, double grace);

/* The worker thread's diagnostics: what its failed jobs said. Read it only
 * after kiln_worker_wait has returned the job's status. */
const kiln_diag *kiln_worker_diag(const kiln_worker *w);

#endif
