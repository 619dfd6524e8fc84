#include "base/host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A thread's diagnostics, either bound (a worker's own buffer) or made on
 * the thread's first error and kept on the host's list until it exits. */
struct kiln_diag_slot {
    kiln_diag diag;
    kiln_diag *bound;            /* a worker's buffer, or NULL: use `diag` */
    kiln_host *host;
    kiln_diag_slot *prev, *next;
};

void *kiln_default_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static void unlink_slot(kiln_host *host, kiln_diag_slot *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        host->slots = s->next;
    if (s->next)
        s->next->prev = s->prev;
}

/* Runs when a thread that had diagnostics exits while the host lives. */
static void release_slot(void *p)
{
    kiln_diag_slot *s = p;
    kiln_host *host = s->host;
    pthread_mutex_lock(&host->slots_lock);
    unlink_slot(host, s);
    pthread_mutex_unlock(&host->slots_lock);
    host->realloc_fn(host->realloc_user, s, 0);
}

kiln_status kiln_host_init(kiln_host *host, kiln_realloc_fn realloc_fn, void *realloc_user,
                           kiln_log_fn log_fn, void *log_user, kiln_log_level log_level)
{
    memset(host, 0, sizeof *host);
    host->realloc_fn = realloc_fn ? realloc_fn : kiln_default_realloc;
    host->realloc_user = realloc_user;
    host->log_fn = log_fn;
    host->log_user = log_user;
    host->log_level = log_level;
    if (pthread_key_create(&host->diag_key, release_slot) != 0)
        return KILN_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&host->slots_lock, NULL);
    if (!kiln_diag_of_thread(host)) {
        kiln_host_destroy(host);
        return KILN_ERROR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

void kiln_host_destroy(kiln_host *host)
{
    pthread_key_delete(host->diag_key);
    while (host->slots) {
        kiln_diag_slot *s = host->slots;
        host->slots = s->next;
        host->realloc_fn(host->realloc_user, s, 0);
    }
    pthread_mutex_destroy(&host->slots_lock);
}

void *kiln_host_alloc(kiln_host *host, size_t size)
{
    return host->realloc_fn(host->realloc_user, NULL, size ? size : 1);
}

void *kiln_host_calloc(kiln_host *host, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = kiln_host_alloc(host, n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *kiln_host_realloc(kiln_host *host, void *ptr, size_t size)
{
    return host->realloc_fn(host->realloc_user, ptr, size ? size : 1);
}

void kiln_host_free(kiln_host *host, void *ptr)
{
    if (ptr)
        host->realloc_fn(host->realloc_user, ptr, 0);
}

char *kiln_host_strdup(kiln_host *host, const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = kiln_host_alloc(host, n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

void kiln_host_log(kiln_host *host, kiln_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_host_vlog(host, level, fmt, ap);
    va_end(ap);
}

void kiln_host_vlog(kiln_host *host, kiln_log_level level, const char *fmt, va_list ap)
{
    if (level > host->log_level)
        return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (host->log_fn)
        host->log_fn(host->log_user, level, msg);
    else
        fprintf(stderr, "kiln: %s\n", msg);
}

static kiln_diag_slot *slot_of_thread(kiln_host *host, int create)
{
    kiln_diag_slot *s = pthread_getspecific(host->diag_key);
    if (s || !create)
        return s;
    s = kiln_host_calloc(host, 1, sizeof *s);
    if (!s)
        return NULL;
    s->host = host;
    pthread_mutex_lock(&host->slots_lock);
    s->next = host->slots;
    if (s->next)
        s->next->prev = s;
    host->slots = s;
    pthread_mutex_unlock(&host->slots_lock);
    pthread_setspecific(host->diag_key, s);
    return s;
}

kiln_diag *kiln_diag_of_thread(kiln_host *host)
{
    kiln_diag_slot *s = slot_of_thread(host, 1);
    if (!s)
        return NULL;
    return s->bound ? s->bound : &s->diag;
}

const char *kiln_diag_message(kiln_host *host)
{
    const kiln_diag_slot *s = slot_of_thread(host, 0);
    if (!s) {
        pthread_mutex_lock(&host->slots_lock);
        const int mine = host->fallback_used && pthread_equal(host->fallback_thread,
                                                              pthread_self());
        pthread_mutex_unlock(&host->slots_lock);
        return mine ? host->fallback.message : "";
    }
    return s->bound ? s->bound->message : s->diag.message;
}

void kiln_diag_release(kiln_host *host)
{
    kiln_diag_slot *s = pthread_getspecific(host->diag_key);
    if (!s)
        return;
    pthread_setspecific(host->diag_key, NULL);   /* no destructor at exit */
    release_slot(s);
}

int kiln_diag_bind(kiln_host *host, kiln_diag *diag)
{
    kiln_diag_slot *s = slot_of_thread(host, 1);
    if (s)
        s->bound = diag;
    return s != NULL;
}

kiln_status kiln_vfail(kiln_host *host, kiln_status status, const char *fmt, va_list ap)
{
    char msg[sizeof ((kiln_diag *)0)->message];
    vsnprintf(msg, sizeof msg, fmt, ap);
    kiln_diag *d = kiln_diag_of_thread(host);
    if (!d)
        pthread_mutex_lock(&host->slots_lock);
    kiln_diag *to = d ? d : &host->fallback;
    to->status = status;
    memcpy(to->message, msg, sizeof msg);
    if (!d) {
        host->fallback_thread = pthread_self();
        host->fallback_used = 1;
        pthread_mutex_unlock(&host->slots_lock);
    }
    kiln_host_log(host, KILN_LOG_DEBUG, "%s: %s", kiln_status_name(status), msg);
    return status;
}

kiln_status kiln_fail(kiln_host *host, kiln_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_vfail(host, status, fmt, ap);
    va_end(ap);
    return status;
}

kiln_status kiln_fail_within(kiln_host *host, kiln_status status, const char *fmt, ...)
{
    char place[sizeof ((kiln_diag *)0)->message], why[sizeof place];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(place, sizeof place, fmt, ap);
    va_end(ap);
    snprintf(why, sizeof why, "%s", kiln_diag_message(host));
    return kiln_fail(host, status, "%s: %s", place, why);
}

kiln_status kiln_fail_oom(kiln_host *host, const char *what, size_t bytes)
{
    return kiln_fail(host, KILN_ERROR_OUT_OF_MEMORY, "out of host memory: %zu bytes for %s",
                     bytes, what);
}
