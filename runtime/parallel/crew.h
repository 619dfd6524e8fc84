/* Private: the worker threads of a strategy and the control every strategy
 * shares. One thread per member (a replica, a pipeline stage, a
 * parameter-server worker) runs one job at a time; the crew posts jobs,
 * waits for them under the step watchdog, names the member that caused a
 * failure, latches the strategy broken when its state can no longer be
 * trusted, and stops its threads on destroy. The strategies keep only
 * their schedules. */
#ifndef KILN_RUNTIME_PARALLEL_CREW_H
#define KILN_RUNTIME_PARALLEL_CREW_H

#include "runtime/context/context.h"
#include "runtime/parallel/worker.h"

typedef struct kiln_crew kiln_crew;

/* `members` threads (at least 1). */
kiln_status kiln_crew_create(kiln_context *ctx, int members, kiln_crew **out);

/* Stops the threads, waiting KILN_WORKER_STOP_GRACE for a busy one.
 * Returns 0 when a thread stayed stuck (in a driver call) and was left
 * detached: the caller must then leak whatever its job may still touch,
 * and the crew itself is leaked. Accepts NULL (returns 1). */
int kiln_crew_destroy(kiln_crew *crew);

void kiln_crew_post(kiln_crew *crew, int member, kiln_job_fn fn, void *arg);

/* What waiting for members [0, n) found. */
typedef struct kiln_crew_outcome {
    kiln_status status;   /* KILN_OK, the culprit's status, or KILN_ERROR_TIMEOUT */
    int culprit;          /* the member whose failure it was, or -1 */
    int stalled;          /* the first member still busy at the deadline, or -1 */
} kiln_crew_outcome;

/* Waits for the jobs of members [0, n) until `timeout` seconds from now.
 * The culprit is the first member that failed for a reason of its own: a
 * member that gave up because another failed (KILN_ERROR_STOPPED) is not
 * the cause while one that failed otherwise exists. */
kiln_crew_outcome kiln_crew_wait_all(kiln_crew *crew, int n, double timeout);

/* Waits for one member's job until `timeout` seconds from now. Returns 1
 * and its status when it finished, 0 when it is still busy. */
int kiln_crew_wait_one(kiln_crew *crew, int member, double timeout, kiln_status *status);

/* What member's last failed job said (read after a wait returned it). */
const kiln_diag *kiln_crew_diag(const kiln_crew *crew, int member);

/* The broken latch. KILN_OK while the strategy can go on; once broken,
 * KILN_ERROR_STATE naming the first failure, for every later call. */
kiln_status kiln_crew_check(const kiln_crew *crew);

/* Latches the crew broken with the formatted reason and reports it on the
 * calling thread as `status`. */
kiln_status kiln_crew_break(kiln_crew *crew, kiln_status status, const char *fmt, ...)
    KILN_PRINTF(3, 4);

/* kiln_crew_break with member's own message: a failed job reported to the
 * thread that called kiln. */
kiln_status kiln_crew_break_with(kiln_crew *crew, kiln_status status, int member);

/* kiln_crew_break for a stalled member: "<who> did not finish its <job>
 * within the <t> s watchdog<detail>", KILN_ERROR_TIMEOUT. */
kiln_status kiln_crew_break_stalled(kiln_crew *crew, const char *who, const char *job,
                                    double timeout, const char *detail);

#endif
