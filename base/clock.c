#include "base/clock.h"

#include <errno.h>
#include <time.h>

double kiln_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

kiln_deadline kiln_deadline_in(double seconds)
{
    const kiln_deadline d = {.at = seconds > 0 ? kiln_now() + seconds : 0};
    return d;
}

int kiln_deadline_passed(kiln_deadline d)
{
    return d.at > 0 && kiln_now() >= d.at;
}

void kiln_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

int kiln_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, kiln_deadline d)
{
    if (d.at <= 0) {
        pthread_cond_wait(cond, lock);
        return 1;
    }
    struct timespec until;
    until.tv_sec = (time_t)d.at;
    until.tv_nsec = (long)((d.at - (double)until.tv_sec) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cond, lock, &until) != ETIMEDOUT;
}
