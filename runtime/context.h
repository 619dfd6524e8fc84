/* Private: the context body, host allocation and error reporting. */
#ifndef KILN_RUNTIME_CONTEXT_H
#define KILN_RUNTIME_CONTEXT_H

#include "kiln.h"

#include <pthread.h>
#include <stdarg.h>



struct kiln_context {
    kiln_realloc_fn realloc_fn;
    void *realloc_user;
    kiln_log_fn log_fn;
    void *log_user;
    kiln_log_level log_level;
    uint64_t seed;
    char cache_dir[1024];     /* empty: cache disabled */
    struct kiln_device **devices;
    int32_t n_devices;
    pthread_mutex_t error_lock;
    char error[1024];
};

#if defined(__GNUC__)
#define KILN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KILN_PRINTF(f, a)
#endif

/* Host memory through the context's allocator. kiln_calloc checks n * size
 * for overflow and zeroes; all return NULL on failure and set no error. */
void *kiln_alloc(kiln_context *ctx, size_t size);
void *kiln_calloc(kiln_context *ctx, size_t n, size_t size);
void *kiln_realloc(kiln_context *ctx, void *ptr, size_t size);
void kiln_free(kiln_context *ctx, void *ptr);
char *kiln_strdup(kiln_context *ctx, const char *s);

/* Records the context's last error (thread-safe) and returns `status`, so
 * a failure reads `return kiln_error(ctx, KILN_ERROR_SHAPE, "...", ...);`. */
kiln_status kiln_error(kiln_context *ctx, kiln_status status, const char *fmt, ...)
    KILN_PRINTF(3, 4);
kiln_status kiln_verror(kiln_context *ctx, kiln_status status, const char *fmt, va_list ap);
/* Reports out of memory for `what` of `bytes` bytes. */
kiln_status kiln_error_oom(kiln_context *ctx, const char *what, size_t bytes);

void kiln_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...) KILN_PRINTF(3, 4);

/* Copies a caller's option struct (NULL: all zero) into `dst` of `size`
 * bytes, honouring the caller's struct_size (its first field): fields an
 * older caller does not know stay zero. */
void kiln_options_copy(void *dst, size_t size, const void *src);

/* The reverse, for structs kiln fills: copies no more of `src` (our `size`
 * bytes) than the caller's struct_size says its struct holds (0: all). */
void kiln_struct_export(void *dst, const void *src, size_t size);

/* Monotonic wall-clock seconds. */
double kiln_now(void);

/* 64-bit FNV-1a of n bytes, continuing from h (start from KILN_HASH_SEED):
 * cache keys and model fingerprints, never security. */
#define KILN_HASH_SEED 0xcbf29ce484222325ULL
uint64_t kiln_hash(uint64_t h, const void *data, size_t n);

#endif
