/* Diagnostics (base/host.c): each thread keeps its own last message on a
 * host, a worker's bound buffer is written by that worker alone, a thread
 * with no memory left for its own still gets its message recorded, and a
 * thread gives its diagnostics back when it asks, not only at exit. */
#include "base/host.h"
#include "counting_alloc.h"
#include "harness.h"

#include <pthread.h>
#include <string.h>

typedef struct thread_case {
    kiln_host *host;
    const char *word;
    pthread_barrier_t *both_failed;
    char seen[64];
    kiln_diag bound;
    int bind;
} thread_case;

static void *fail_then_read(void *arg)
{
    thread_case *t = arg;
    if (t->bind)
        kiln_diag_bind(t->host, &t->bound);
    kiln_fail(t->host, KILN_ERROR_SHAPE, "failed in %s", t->word);
    /* Both threads have failed before either reads. */
    pthread_barrier_wait(t->both_failed);
    snprintf(t->seen, sizeof t->seen, "%s", kiln_diag_message(t->host));
    return NULL;
}

static void test_threads_keep_their_own(void)
{
    kiln_host host;
    CHECK(kiln_host_init(&host, NULL, NULL, NULL, NULL, KILN_LOG_ERROR) == KILN_OK);
    kiln_fail(&host, KILN_ERROR_DATA, "failed in main");
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    thread_case a = {.host = &host, .word = "alpha", .both_failed = &barrier};
    thread_case b = {.host = &host, .word = "beta", .both_failed = &barrier, .bind = 1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, fail_then_read, &a);
    pthread_create(&tb, NULL, fail_then_read, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(strcmp(a.seen, "failed in alpha") == 0);
    CHECK(strcmp(b.seen, "failed in beta") == 0);
    /* The bound thread wrote its worker's buffer, which outlives it. */
    CHECK(b.bound.status == KILN_ERROR_SHAPE);
    CHECK(strcmp(b.bound.message, "failed in beta") == 0);
    CHECK(strcmp(kiln_diag_message(&host), "failed in main") == 0);
    pthread_barrier_destroy(&barrier);
    kiln_host_destroy(&host);
}

/* Allocation fails once the budget is spent. */
static void *budget_realloc(void *user, void *ptr, size_t size)
{
    int *budget = user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    if (!ptr && (*budget)-- <= 0)
        return NULL;
    return realloc(ptr, size);
}

/* One thread fails with no memory left for its own diagnostics, another
 * that failed nothing reads; the first stays alive meanwhile, so the two
 * cannot share a thread id. */
typedef struct oom_case {
    kiln_host *host;
    pthread_barrier_t *read_done;
    int kept, other_saw_empty;
} oom_case;

static void *fail_without_memory(void *arg)
{
    oom_case *c = arg;
    kiln_fail(c->host, KILN_ERROR_OUT_OF_MEMORY, "no memory on this thread");
    c->kept = strstr(kiln_diag_message(c->host), "no memory on this thread") != NULL;
    pthread_barrier_wait(c->read_done);   /* the reader has started */
    pthread_barrier_wait(c->read_done);   /* the reader has read */
    return NULL;
}

static void *read_only(void *arg)
{
    oom_case *c = arg;
    pthread_barrier_wait(c->read_done);
    c->other_saw_empty = kiln_diag_message(c->host)[0] == '\0';
    pthread_barrier_wait(c->read_done);
    return NULL;
}

static void test_message_kept_without_memory(void)
{
    int budget = 1;   /* the creating thread's diagnostics, nothing more */
    kiln_host host;
    CHECK(kiln_host_init(&host, budget_realloc, &budget, NULL, NULL, KILN_LOG_ERROR) ==
          KILN_OK);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    oom_case c = {.host = &host, .read_done = &barrier};
    pthread_t writer, reader;
    pthread_create(&writer, NULL, fail_without_memory, &c);
    pthread_create(&reader, NULL, read_only, &c);
    pthread_join(writer, NULL);
    pthread_join(reader, NULL);
    CHECK(c.kept);
    /* Not another thread's fallback message. */
    CHECK(c.other_saw_empty);
    pthread_barrier_destroy(&barrier);
    kiln_host_destroy(&host);
}

static long live(const counter *c)
{
    pthread_mutex_lock(&counter_lock);
    const long n = c->live;
    pthread_mutex_unlock(&counter_lock);
    return n;
}

typedef struct release_case {
    kiln_host *host;
    counter *c;
    long before, with, after;
} release_case;

static void *fail_then_release(void *arg)
{
    release_case *r = arg;
    r->before = live(r->c);
    kiln_fail(r->host, KILN_ERROR_DATA, "a message");
    r->with = live(r->c);
    kiln_diag_release(r->host);
    r->after = live(r->c);
    kiln_diag_release(r->host);   /* nothing left: no-op */
    return NULL;
}

/* A detached loader thread lets go of its diagnostics before the context
 * may close: kiln_diag_release frees them at once, and nothing is left for
 * the thread's exit. */
static void test_release_before_exit(void)
{
    counter c = {0};
    kiln_host host;
    CHECK(kiln_host_init(&host, counting_realloc, &c, NULL, NULL, KILN_LOG_ERROR) == KILN_OK);
    release_case r = {.host = &host, .c = &c};
    pthread_t t;
    pthread_create(&t, NULL, fail_then_release, &r);
    pthread_join(t, NULL);
    CHECK(r.with == r.before + 1);
    CHECK(r.after == r.before);
    kiln_host_destroy(&host);
    CHECK(live(&c) == 0);
}

int main(void)
{
    test_threads_keep_their_own();
    test_message_kept_without_memory();
    test_release_before_exit();
    return test_finish("test_diag");
}
