/* Private, the lowest floor: what an embedding application hands kiln (an
 * allocator and a log sink) and where kiln's calls leave their diagnostics.
 * Everything above base/ receives a kiln_host, never the context body. */
#ifndef KILN_BASE_HOST_H
#define KILN_BASE_HOST_H

#include "kiln.h"

#include <pthread.h>
#include <stdarg.h>

#if defined(__GNUC__)
#define KILN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KILN_PRINTF(f, a)
#endif

/* What a failed call leaves behind: its status and a message naming the
 * call, the layer or device and the cause. */
typedef struct kiln_diag {
    kiln_status status;
    char message[1024];
} kiln_diag;

typedef struct kiln_diag_slot kiln_diag_slot;

typedef struct kiln_host {
    kiln_realloc_fn realloc_fn;
    void *realloc_user;
    kiln_log_fn log_fn;
    void *log_user;
    kiln_log_level log_level;
    /* Each thread's diagnostics for this host: worker threads bind their
     * own (kiln_diag_bind), other threads get one on their first error. */
    pthread_key_t diag_key;
    pthread_mutex_t slots_lock;
    kiln_diag_slot *slots;
    /* Where a thread's message goes when no memory was left for its own
     * diagnostics (under slots_lock): the message is kept, not lost, and
     * only the thread that wrote it last reads it. */
    kiln_diag fallback;
    pthread_t fallback_thread;
    int fallback_used;
} kiln_host;

/* The C library's realloc and free as a kiln_realloc_fn. */
void *kiln_default_realloc(void *user, void *ptr, size_t size);

/* Sets up `host` in place (it must not move: threads' diagnostics point
 * back to it). realloc_fn NULL: the C library's. The calling thread's diagnostics are
 * made now, so a single-threaded application never allocates to report an
 * error. Fails when the thread key or that memory cannot be had
 * (KILN_ERROR_OUT_OF_MEMORY). */
kiln_status kiln_host_init(kiln_host *host, kiln_realloc_fn realloc_fn, void *realloc_user,
                           kiln_log_fn log_fn, void *log_user, kiln_log_level log_level);
/* Frees every thread's diagnostics; no thread may use the host after. */
void kiln_host_destroy(kiln_host *host);

/* Host memory through the application's allocator. kiln_host_calloc checks
 * n * size for overflow and zeroes; all return NULL on failure and leave no
 * diagnostics. */
void *kiln_host_alloc(kiln_host *host, size_t size);
void *kiln_host_calloc(kiln_host *host, size_t n, size_t size);
void *kiln_host_realloc(kiln_host *host, void *ptr, size_t size);
void kiln_host_free(kiln_host *host, void *ptr);
char *kiln_host_strdup(kiln_host *host, const char *s);

void kiln_host_log(kiln_host *host, kiln_log_level level, const char *fmt, ...)
    KILN_PRINTF(3, 4);
void kiln_host_vlog(kiln_host *host, kiln_log_level level, const char *fmt, va_list ap);

/* Records a failure in the calling thread's diagnostics and returns
 * `status`, so a failure reads `return kiln_fail(host, KILN_ERROR_SHAPE, ...)`. */
kiln_status kiln_fail(kiln_host *host, kiln_status status, const char *fmt, ...)
    KILN_PRINTF(3, 4);
kiln_status kiln_vfail(kiln_host *host, kiln_status status, const char *fmt, va_list ap);
/* Puts "<formatted place>: " before the calling thread's last message and
 * sets its status to `status`, which it returns: a failure reported from
 * inside a layer or replica gains where it happened. */
kiln_status kiln_fail_within(kiln_host *host, kiln_status status, const char *fmt, ...)
    KILN_PRINTF(3, 4);
/* Out of host memory for `what` of `bytes` bytes. */
kiln_status kiln_fail_oom(kiln_host *host, const char *what, size_t bytes);

/* The calling thread's diagnostics for this host; NULL when the thread has
 * none yet and could not get any (out of memory: kiln_fail then writes the
 * host's fallback). */
kiln_diag *kiln_diag_of_thread(kiln_host *host);
/* The calling thread's last message, "" when it has none. */
const char *kiln_diag_message(kiln_host *host);
/* Makes `diag` (owned by the caller, alive while the thread runs kiln
 * work) the calling thread's diagnostics: a worker's own buffer, which no
 * other thread writes. Returns 0 when no memory was left to record the
 * binding: the thread's messages then go to the host's fallback. */
int kiln_diag_bind(kiln_host *host, kiln_diag *diag);
/* Gives back the calling thread's diagnostics now rather than when it
 * exits: a detached thread must, before it lets go of what keeps the host
 * alive, or its exit would touch a host already destroyed. */
void kiln_diag_release(kiln_host *host);

#endif
