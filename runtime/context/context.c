#include "runtime/context/context.h"

#include "opencl/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KILN_DEFAULT_SEED 0x6b696c6eULL  /* "kiln" */

kiln_status kiln_error(kiln_context *ctx, kiln_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_vfail(&ctx->host, status, fmt, ap);
    va_end(ap);
    return status;
}

void kiln_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_host_vlog(&ctx->host, level, fmt, ap);
    va_end(ap);
}

kiln_status kiln_context_init_host_only(kiln_context *ctx, kiln_realloc_fn realloc_fn,
                                        void *realloc_user, kiln_log_fn log_fn)
{
    memset(ctx, 0, sizeof *ctx);
    pthread_mutex_init(&ctx->objects_lock, NULL);
    const kiln_status st = kiln_host_init(&ctx->host, realloc_fn, realloc_user, log_fn, NULL,
                                          KILN_LOG_ERROR);
    if (st != KILN_OK)
        pthread_mutex_destroy(&ctx->objects_lock);
    return st;
}

void kiln_context_release_host_only(kiln_context *ctx)
{
    pthread_mutex_destroy(&ctx->objects_lock);
    kiln_host_destroy(&ctx->host);
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
    if (!out)
        return KILN_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_context_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_context_options",
                          &why) != KILN_OK) {
        /* Too short to hold error_buffer or log_fn: the default log. */
        kiln_host stderr_log = {.log_level = KILN_LOG_ERROR};
        kiln_host_log(&stderr_log, KILN_LOG_ERROR, "kiln_context_create: %s", why.message);
        return why.status;
    }
    const kiln_realloc_fn rf = o.realloc_fn ? o.realloc_fn : kiln_default_realloc;
    kiln_context *ctx = rf(o.realloc_user, NULL, sizeof *ctx);
    if (!ctx)
        return KILN_ERROR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    pthread_mutex_init(&ctx->objects_lock, NULL);
    if (kiln_host_init(&ctx->host, rf, o.realloc_user, o.log_fn, o.log_user,
                       o.log_level) != KILN_OK) {
        pthread_mutex_destroy(&ctx->objects_lock);
        rf(o.realloc_user, ctx, 0);
        return KILN_ERROR_OUT_OF_MEMORY;
    }
    ctx->seed = o.seed ? o.seed : KILN_DEFAULT_SEED;
    resolve_cache_dir(ctx, &o);

    kiln_status st = kiln_devices_open(&ctx->host, &o, ctx->cache_dir, &ctx->devices,
                                       &ctx->n_devices);
    if (st != KILN_OK) {
        const char *why = kiln_diag_message(&ctx->host);
        if (o.error_buffer && o.error_buffer_size)
            snprintf(o.error_buffer, o.error_buffer_size, "%s", why);
        else
            kiln_log(ctx, KILN_LOG_ERROR, "kiln_context_create: %s", why);
        kiln_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return KILN_OK;
}

static void close_context(kiln_context *ctx)
{
    kiln_devices_close(&ctx->host, ctx->devices, ctx->n_devices);
    const kiln_realloc_fn rf = ctx->host.realloc_fn;
    void *user = ctx->host.realloc_user;
    pthread_mutex_destroy(&ctx->objects_lock);
    kiln_host_destroy(&ctx->host);
    rf(user, ctx, 0);
}

void kiln_context_hold(kiln_context *ctx)
{
    pthread_mutex_lock(&ctx->objects_lock);
    ctx->live_objects++;
    pthread_mutex_unlock(&ctx->objects_lock);
}

void kiln_context_release(kiln_context *ctx)
{
    pthread_mutex_lock(&ctx->objects_lock);
    const int close = --ctx->live_objects == 0 && ctx->closing;
    pthread_mutex_unlock(&ctx->objects_lock);
    if (close)
        close_context(ctx);
}

void kiln_context_destroy(kiln_context *ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&ctx->objects_lock);
    const int32_t live = ctx->live_objects;
    pthread_mutex_unlock(&ctx->objects_lock);
    /* Said before `closing` is set: from then on another thread's last
     * kiln_context_release (a loader thread freeing its dataset) may free
     * the context, this log included (a race ThreadSanitizer saw in
     * test_strategies). Freeing it while objects are open would leave them
     * pointing at freed memory. */
    if (live > 0)
        kiln_log(ctx, KILN_LOG_ERROR, "kiln_context_destroy: %d model(s) or dataset(s) made "
                 "from this context are still open; it closes when the last is destroyed",
                 (int)live);
    pthread_mutex_lock(&ctx->objects_lock);
    const int close_now = ctx->live_objects == 0;
    ctx->closing = !close_now;
    pthread_mutex_unlock(&ctx->objects_lock);
    if (close_now)
        close_context(ctx);
}

const char *kiln_context_last_error(const kiln_context *ctx)
{
    /* The calling thread's own message: threads never see each other's. */
    return ctx ? kiln_diag_message((kiln_host *)&ctx->host) : "no context";
}

kiln_status kiln_context_device_count(const kiln_context *ctx, int32_t *count)
{
    if (count)
        *count = 0;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error((kiln_context *)ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_context_device_count: count is NULL");
    *count = ctx->n_devices;
    return KILN_OK;
}

kiln_status kiln_context_device_info(const kiln_context *ctx, int32_t i, kiln_device_info *info)
{
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!info)
        return kiln_error((kiln_context *)ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_context_device_info: info is NULL");
    if (i < 0 || i >= ctx->n_devices)
        return kiln_error((kiln_context *)ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_context_device_info: device %d does not exist (the context "
                          "has %d)", (int)i, (int)ctx->n_devices);
    kiln_device_describe(ctx->devices[i], info);
    return KILN_OK;
}
