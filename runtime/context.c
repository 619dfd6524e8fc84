#include "runtime/context.h"

#include "opencl/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KILN_DEFAULT_SEED 0x6b696c6eULL  /* "kiln" */

static void *default_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

void *kiln_alloc(kiln_context *ctx, size_t size)
{
    return ctx->realloc_fn(ctx->realloc_user, NULL, size ? size : 1);
}

void *kiln_calloc(kiln_context *ctx, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = kiln_alloc(ctx, n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *kiln_realloc(kiln_context *ctx, void *ptr, size_t size)
{
    return ctx->realloc_fn(ctx->realloc_user, ptr, size ? size : 1);
}

void kiln_free(kiln_context *ctx, void *ptr)
{
    if (ptr)
        ctx->realloc_fn(ctx->realloc_user, ptr, 0);
}

char *kiln_strdup(kiln_context *ctx, const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = kiln_alloc(ctx, n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

kiln_status kiln_verror(kiln_context *ctx, kiln_status status, const char *fmt, va_list ap)
{
    char msg[sizeof ctx->error];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&ctx->error_lock);
    memcpy(ctx->error, msg, sizeof msg);
    pthread_mutex_unlock(&ctx->error_lock);
    kiln_log(ctx, KILN_LOG_DEBUG, "%s: %s", kiln_status_name(status), msg);
    return status;
}

kiln_status kiln_error(kiln_context *ctx, kiln_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_verror(ctx, status, fmt, ap);
    va_end(ap);
    return status;
}

kiln_status kiln_error_oom(kiln_context *ctx, const char *what, size_t bytes)
{
    return kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY, "out of host memory: %zu bytes for %s",
                      bytes, what);
}

void kiln_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...)
{
    if (level > ctx->log_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->log_fn)
        ctx->log_fn(ctx->log_user, level, msg);
    else
        fprintf(stderr, "kiln: %s\n", msg);
}

void kiln_options_copy(void *dst, size_t size, const void *src)
{
    memset(dst, 0, size);
    if (!src)
        return;
    size_t n = *(const size_t *)src;
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
}

void kiln_struct_export(void *dst, const void *src, size_t size)
{
    size_t n = *(const size_t *)dst;
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
    *(size_t *)dst = n;
}

uint64_t kiln_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

double kiln_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void resolve_cache_dir(kiln_context *ctx, const kiln_context_options *o)
{
    const char *env;
    ctx->cache_dir[0] = '\0';
    if (o->disable_cache)
        return;
    if (o->cache_dir)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s", o->cache_dir);
    else if ((env = getenv("KILN_CACHE_DIR")) && *env)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s/kiln", env);
    else if ((env = getenv("HOME")) && *env)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s/.cache/kiln", env);
}

kiln_status kiln_context_create(const kiln_context_options *options, kiln_context **out)
{
    kiln_context_options o;
    kiln_options_copy(&o, sizeof o, options);
    if (!out)
        return KILN_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_realloc_fn rf = o.realloc_fn ? o.realloc_fn : default_realloc;
    kiln_context *ctx = rf(o.realloc_user, NULL, sizeof *ctx);
    if (!ctx)
        return KILN_ERROR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->realloc_fn = rf;
    ctx->realloc_user = o.realloc_user;
    ctx->log_fn = o.log_fn;
    ctx->log_user = o.log_user;
    ctx->log_level = o.log_level;
    ctx->seed = o.seed ? o.seed : KILN_DEFAULT_SEED;
    pthread_mutex_init(&ctx->error_lock, NULL);
    resolve_cache_dir(ctx, &o);

    kiln_status st = kiln_devices_open(ctx, &o);
    if (st != KILN_OK) {
        if (o.error_buffer && o.error_buffer_size)
            snprintf(o.error_buffer, o.error_buffer_size, "%s", ctx->error);
        else
            kiln_log(ctx, KILN_LOG_ERROR, "kiln_context_create: %s", ctx->error);
        kiln_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return KILN_OK;
}

void kiln_context_destroy(kiln_context *ctx)
{
    if (!ctx)
        return;
    for (int32_t i = 0; i < ctx->n_devices; i++)
        kiln_device_destroy(ctx->devices[i]);
    kiln_free(ctx, ctx->devices);
    pthread_mutex_destroy(&ctx->error_lock);
    ctx->realloc_fn(ctx->realloc_user, ctx, 0);
}

const char *kiln_context_last_error(const kiln_context *ctx)
{
    return ctx ? ctx->error : "no context";
}

kiln_status kiln_context_device_count(const kiln_context *ctx, int32_t *count)
{
    if (!ctx || !count)
        return KILN_ERROR_INVALID_ARGUMENT;
    *count = ctx->n_devices;
    return KILN_OK;
}

kiln_status kiln_context_device_info(const kiln_context *ctx, int32_t i, kiln_device_info *info)
{
    if (!ctx || !info)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (i < 0 || i >= ctx->n_devices)
        return kiln_error((kiln_context *)ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_context_device_info: device %d does not exist (the context "
                          "has %d)", (int)i, (int)ctx->n_devices);
    kiln_device_describe(ctx->devices[i], info);
    return KILN_OK;
}
