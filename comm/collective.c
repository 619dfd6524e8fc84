/* A round: members copy their values into their row and count in; the last
 * to arrive sums the rows in member order, bumps the generation and wakes
 * the others, who copy the sum out. A member can start the next round only
 * after copying, and the next sum is written only once all have arrived, so
 * one result buffer serves every round. */
#include "comm/collective.h"

#include "base/host.h"

#include <pthread.h>
#include <string.h>

struct kiln_collective {
    kiln_host *host;
    pthread_mutex_t lock;
    pthread_cond_t done;
    int max_members, members, arrived, cancelled;
    size_t max_values, n;
    unsigned long generation;
    double *rows;     /* max_members x max_values */
    double *result;   /* max_values */
};

kiln_status kiln_collective_create(kiln_host *host, int max_members, size_t max_values,
                                   kiln_collective **out)
{
    *out = NULL;
    kiln_collective *c = kiln_host_calloc(host, 1, sizeof *c);
    if (!c)
        return kiln_fail_oom(host, "a collective", sizeof *c);
    c->host = host;
    c->max_members = c->members = max_members;
    c->max_values = max_values;
    c->rows = kiln_host_calloc(host, (size_t)max_members * max_values, sizeof(double));
    c->result = kiln_host_calloc(host, max_values, sizeof(double));
    if (!c->rows || !c->result) {
        kiln_host_free(host, c->rows);
        kiln_host_free(host, c->result);
        kiln_host_free(host, c);
        return kiln_fail_oom(host, "collective buffers", max_values * sizeof(double));
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    *out = c;
    return KILN_OK;
}

void kiln_collective_destroy(kiln_collective *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->done);
    kiln_host_free(c->host, c->rows);
    kiln_host_free(c->host, c->result);
    kiln_host_free(c->host, c);
}

void kiln_collective_begin(kiln_collective *c, int members)
{
    pthread_mutex_lock(&c->lock);
    c->members = members < c->max_members ? members : c->max_members;
    c->arrived = 0;
    c->cancelled = 0;
    pthread_mutex_unlock(&c->lock);
}

void kiln_collective_cancel(kiln_collective *c)
{
    pthread_mutex_lock(&c->lock);
    c->cancelled = 1;
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
}

kiln_status kiln_collective_sum(kiln_collective *c, int member, double *values, size_t n)
{
    pthread_mutex_lock(&c->lock);
    if (member < 0 || member >= c->members || n > c->max_values) {
        const int members = c->members;
        pthread_mutex_unlock(&c->lock);
        return kiln_fail(c->host, KILN_ERROR_INVALID_ARGUMENT, "replica sum: member %d of %d "
                         "with %zu values (at most %zu)", member, members, n, c->max_values);
    }
    if (c->cancelled) {
        pthread_mutex_unlock(&c->lock);
        return kiln_fail(c->host, KILN_ERROR_STOPPED, "replica sum: cancelled because "
                         "another replica failed or stalled");
    }
    memcpy(c->rows + (size_t)member * c->max_values, values, n * sizeof(double));
    const unsigned long generation = c->generation;
    if (++c->arrived == c->members) {
        for (size_t j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < c->members; k++)
                s += c->rows[(size_t)k * c->max_values + j];
            c->result[j] = s;
        }
        c->arrived = 0;
        c->generation++;
        pthread_cond_broadcast(&c->done);
    }
    while (c->generation == generation && !c->cancelled)
        pthread_cond_wait(&c->done, &c->lock);
    const int ok = c->generation != generation;
    if (ok)
        memcpy(values, c->result, n * sizeof(double));
    pthread_mutex_unlock(&c->lock);
    return ok ? KILN_OK
              : kiln_fail(c->host, KILN_ERROR_STOPPED, "replica sum: cancelled because "
                          "another replica failed or stalled");
}
