#include "runtime/parallel/crew.h"

#include <stdio.h>

struct kiln_crew {
    kiln_context *ctx;
    int n;
    kiln_worker **workers;
    int broken;
    char broken_reason[sizeof ((kiln_diag *)0)->message];
};

kiln_status kiln_crew_create(kiln_context *ctx, int members, kiln_crew **out)
{
    *out = NULL;
    kiln_crew *crew = kiln_calloc(ctx, 1, sizeof *crew);
    if (!crew)
        return kiln_error_oom(ctx, "a worker crew", sizeof *crew);
    crew->ctx = ctx;
    crew->workers = kiln_calloc(ctx, (size_t)members, sizeof *crew->workers);
    if (!crew->workers) {
        kiln_free(ctx, crew);
        return kiln_error_oom(ctx, "a worker crew", (size_t)members * sizeof(void *));
    }
    kiln_status st = KILN_OK;
    for (; crew->n < members && st == KILN_OK; crew->n++)
        st = kiln_worker_start(ctx, &crew->workers[crew->n]);
    if (st != KILN_OK) {
        crew->n--;   /* the one that failed did not start */
        kiln_crew_destroy(crew);
        return st;
    }
    *out = crew;
    return KILN_OK;
}

int kiln_crew_destroy(kiln_crew *crew)
{
    if (!crew)
        return 1;
    int joined = 1;
    for (int k = 0; k < crew->n; k++)
        joined &= kiln_worker_stop(crew->workers[k], KILN_WORKER_STOP_GRACE);
    if (!joined)
        return 0;   /* a detached thread may still read the crew */
    kiln_free(crew->ctx, crew->workers);
    kiln_free(crew->ctx, crew);
    return 1;
}

void kiln_crew_post(kiln_crew *crew, int member, kiln_job_fn fn, void *arg)
{
    kiln_worker_post(crew->workers[member], fn, arg);
}

kiln_crew_outcome kiln_crew_wait_all(kiln_crew *crew, int n, double timeout)
{
    const kiln_deadline deadline = kiln_deadline_in(timeout);
    kiln_crew_outcome o = {.status = KILN_OK, .culprit = -1, .stalled = -1};
    for (int k = 0; k < n; k++) {
        kiln_status st = KILN_OK;
        if (!kiln_worker_wait(crew->workers[k], deadline, &st)) {
            o.stalled = k;
            o.status = KILN_ERROR_TIMEOUT;
            return o;
        }
        const int own_cause = st != KILN_ERROR_STOPPED;
        if (st != KILN_OK &&
            (o.status == KILN_OK || (own_cause && o.status == KILN_ERROR_STOPPED))) {
            o.status = st;
            o.culprit = k;
        }
    }
    return o;
}

int kiln_crew_wait_one(kiln_crew *crew, int member, double timeout, kiln_status *status)
{
    return kiln_worker_wait(crew->workers[member], kiln_deadline_in(timeout), status);
}

const kiln_diag *kiln_crew_diag(const kiln_crew *crew, int member)
{
    return kiln_worker_diag(crew->workers[member]);
}

kiln_status kiln_crew_check(const kiln_crew *crew)
{
    if (!crew->broken)
        return KILN_OK;
    return kiln_error(crew->ctx, KILN_ERROR_STATE, "the model's strategy failed earlier (%s); "
                      "destroy the model", crew->broken_reason);
}

kiln_status kiln_crew_break(kiln_crew *crew, kiln_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(crew->broken_reason, sizeof crew->broken_reason, fmt, ap);
    va_end(ap);
    crew->broken = 1;
    return kiln_error(crew->ctx, status, "%s", crew->broken_reason);
}

kiln_status kiln_crew_break_with(kiln_crew *crew, kiln_status status, int member)
{
    return kiln_crew_break(crew, status, "%s", kiln_crew_diag(crew, member)->message);
}

kiln_status kiln_crew_break_stalled(kiln_crew *crew, const char *who, const char *job,
                                    double timeout, const char *detail)
{
    return kiln_crew_break(crew, KILN_ERROR_TIMEOUT, "%s did not finish its %s within the "
                           "%.3g s watchdog%s", who, job, timeout, detail);
}
