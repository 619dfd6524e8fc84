/* Two devices running one kernel at the same time with one local size and
 * different global sizes, as a pipeline's stages or mirrored replicas with
 * uneven shares do. On PoCL's CPU devices that aborted the process (an
 * assertion in pocl_release_dlhandle_cache) when both devices built their
 * programs with the same options: with one device's range growing launch
 * after launch, 5 runs of 6 aborted. Each device now builds with its own
 * options (opencl/program.c). Run with POCL_DEVICES="basic basic"; one
 * device is a skip. Each thread also checks some results. */
#include "harness.h"
#include "opencl/device.h"
#include "runtime/context/context.h"

#include <pthread.h>

enum { LAUNCHES = 1500, MOST = 64 * (LAUNCHES + 1) };   /* the longest range */

typedef struct worker {
    kiln_device *dev;
    int growing;     /* each launch one work-group wider than the last; else one group */
    int wrong;       /* launches whose result was not what it should be */
    kiln_status st;
} worker;

/* PoCL keeps a work-group function per (kernel, local size) for ranges up
 * to the width it was loaded for, and loads another for a wider range: the
 * growing device loads a new one at every launch while the other device
 * runs the same kernel with the same local size, which is when a shared
 * cache mixed the two up. */
static void *run(void *arg)
{
    worker *w = arg;
    kiln_buffer *src = NULL, *dst = NULL;
    float *ones = malloc(MOST * sizeof(float));
    for (int i = 0; ones && i < MOST; i++)
        ones[i] = 1.0f;
    if (!ones)
        w->st = KILN_ERROR_OUT_OF_MEMORY;
    if (w->st == KILN_OK)
        w->st = kiln_buffer_create(w->dev, MOST * sizeof(float), "test source", &src);
    if (w->st == KILN_OK)
        w->st = kiln_buffer_create(w->dev, MOST * sizeof(float), "test destination", &dst);
    if (w->st == KILN_OK)
        w->st = kiln_buffer_write(w->dev, src, 0, ones, MOST * sizeof(float), 1);
    for (int it = 0; it < LAUNCHES && w->st == KILN_OK; it++) {
        const size_t n = 64 * (size_t)(w->growing ? it + 2 : 512);   /* groups of 64 */
        kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst),
                                kiln_arg_int((int64_t)n), kiln_arg_int(0));
        w->st = kiln_run1(w->dev, "copy", "kiln_copy_or_add", n, a);
        if (w->st == KILN_OK && it % 250 == 0) {
            float last = 0.0f;
            w->st = kiln_buffer_read(w->dev, dst, (n - 1) * sizeof(float), &last, sizeof last);
            w->wrong += last != 1.0f;
        }
    }
    if (w->st == KILN_OK)
        w->st = kiln_device_finish(w->dev);
    kiln_buffer_destroy(src);
    kiln_buffer_destroy(dst);
    free(ones);
    return NULL;
}

int main(void)
{
    kiln_context *ctx = test_context(1);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    if (ctx->n_devices < 2) {
        kiln_context_destroy(ctx);
        SKIP("one device; run with POCL_DEVICES=\"basic basic\"");
    }
    worker w[2] = {{.dev = ctx->devices[0], .growing = 0}, {.dev = ctx->devices[1], .growing = 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, run, &w[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(ctx, w[i].st);
        CHECK(w[i].wrong == 0);
    }
    printf("%d launches on each of two devices at once, one kernel and local size, one "
           "device's range growing\n", LAUNCHES);
    kiln_context_destroy(ctx);
    return test_finish("test_concurrent_devices");
}
