/* Private: one monotonic clock and one deadline type for every wait. */
#ifndef KILN_BASE_CLOCK_H
#define KILN_BASE_CLOCK_H

#include <pthread.h>

/* Monotonic seconds (CLOCK_MONOTONIC): durations and deadlines. */
double kiln_now(void);

/* A moment on kiln_now()'s clock; `at` <= 0 means never. */
typedef struct kiln_deadline {
    double at;
} kiln_deadline;

/* `seconds` from now; seconds <= 0: no deadline. */
kiln_deadline kiln_deadline_in(double seconds);
int kiln_deadline_passed(kiln_deadline d);

/* A condition variable whose timed waits read kiln_now()'s clock. */
void kiln_cond_init_monotonic(pthread_cond_t *cond);
/* Waits on `cond` until signalled or `d` passes (no deadline: untimed).
 * Returns 0 when the deadline passed, 1 otherwise (recheck the predicate). */
int kiln_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, kiln_deadline d);

#endif
