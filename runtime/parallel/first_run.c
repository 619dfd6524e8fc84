#include "runtime/parallel/first_run.h"

#include <pthread.h>

static pthread_mutex_t first_run_lock = PTHREAD_MUTEX_INITIALIZER;

int kiln_shape_log_add(kiln_shape_log *log, int32_t size)
{
    for (int i = 0; i < log->n; i++)
        if (log->seen[i] == size)
            return 0;
    if (log->n == KILN_SHAPE_LOG_SIZE)
        return 0;
    log->seen[log->n++] = size;
    return 1;
}

void kiln_first_run_enter(int serial)
{
    if (serial)
        pthread_mutex_lock(&first_run_lock);
}

void kiln_first_run_leave(int serial)
{
    if (serial)
        pthread_mutex_unlock(&first_run_lock);
}
