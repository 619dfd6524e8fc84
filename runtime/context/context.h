/* Private: the context body. Runtime code speaks of contexts; the floors
 * below it (opencl/, comm/, layers/) receive the context's kiln_host. */
#ifndef KILN_RUNTIME_CONTEXT_CONTEXT_H
#define KILN_RUNTIME_CONTEXT_CONTEXT_H

#include "base/clock.h"
#include "base/hash.h"
#include "base/host.h"
#include "base/options.h"
#include "kiln.h"

#include <pthread.h>

struct kiln_context {
    kiln_host host;           /* allocator, log, each thread's diagnostics */
    uint64_t seed;
    char cache_dir[1024];     /* empty: cache disabled */
    struct kiln_device **devices;
    int32_t n_devices;
    /* Models and datasets made from the context hold it open; destroying it
     * while any live defers the close to the last one's destroy. */
    pthread_mutex_t objects_lock;
    int32_t live_objects;
    int closing;
};

/* The runtime's spelling of base/host.h: the same calls on ctx->host. */
static inline void *kiln_alloc(kiln_context *ctx, size_t size)
{
    return kiln_host_alloc(&ctx->host, size);
}

static inline void *kiln_calloc(kiln_context *ctx, size_t n, size_t size)
{
    return kiln_host_calloc(&ctx->host, n, size);
}

static inline void *kiln_realloc(kiln_context *ctx, void *ptr, size_t size)
{
    return kiln_host_realloc(&ctx->host, ptr, size);
}

static inline void kiln_free(kiln_context *ctx, void *ptr)
{
    kiln_host_free(&ctx->host, ptr);
}

static inline char *kiln_strdup(kiln_context *ctx, const char *s)
{
    return kiln_host_strdup(&ctx->host, s);
}

static inline kiln_status kiln_error_oom(kiln_context *ctx, const char *what, size_t bytes)
{
    return kiln_fail_oom(&ctx->host, what, bytes);
}

/* Records the calling thread's last error on the context and returns
 * `status`: `return kiln_error(ctx, KILN_ERROR_SHAPE, "...", ...);`. */
kiln_status kiln_error(kiln_context *ctx, kiln_status status, const char *fmt, ...)
    KILN_PRINTF(3, 4);

void kiln_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...) KILN_PRINTF(3, 4);

/* A model or dataset made from ctx holds it open until it is destroyed;
 * the release of the last one closes a context whose destroy was deferred. */
void kiln_context_hold(kiln_context *ctx);
void kiln_context_release(kiln_context *ctx);

/* A context without devices, for code that needs only host memory and
 * messages (option validation, file parsers in tests and fuzzers); NULL
 * functions: the C library's realloc, errors logged to stderr. On failure
 * nothing is left to release and the context must not be used. */
kiln_status kiln_context_init_host_only(kiln_context *ctx, kiln_realloc_fn realloc_fn,
                                        void *realloc_user, kiln_log_fn log_fn);
void kiln_context_release_host_only(kiln_context *ctx);

#endif
