/* A kiln_realloc_fn that counts live allocations, for tests that check
 * nothing is left after teardown. Replica and reducer threads allocate too,
 * hence the lock. */
#ifndef KILN_TEST_COUNTING_ALLOC_H
#define KILN_TEST_COUNTING_ALLOC_H

#include <pthread.h>
#include <stdlib.h>

typedef struct counter {
    long live;
} counter;

static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;

static void *counting_realloc(void *user, void *ptr, size_t size)
{
    counter *c = user;
    if (size == 0) {
        pthread_mutex_lock(&counter_lock);
        c->live -= ptr != NULL;
        pthread_mutex_unlock(&counter_lock);
        free(ptr);
        return NULL;
    }
    void *p = realloc(ptr, size);
    pthread_mutex_lock(&counter_lock);
    c->live += p && !ptr;
    pthread_mutex_unlock(&counter_lock);
    return p;
}

#endif
