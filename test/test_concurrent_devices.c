/* Two devices running one kernel at the same time, with one local size and
 * two global sizes, as a pipeline's stages or mirrored replicas with uneven
 * shares do. On PoCL's CPU devices this used to abort the process (an
 * assertion in pocl_release_dlhandle_cache) within a few hundred launches
 * when both devices built their programs with the same options; each now
 * builds with its own (opencl/program.c). Run with POCL_DEVICES="basic
 * basic"; one device is a skip. Each thread also checks its results. */
#include "harness.h"
#include "opencl/device.h"
#include "runtime/context.h"

#include <pthread.h>

enum { LAUNCHES = 3000, MOST = 8192 + 64 };

typedef struct worker {
    kiln_device *dev;
    int which;
    int wrong;       /* launches whose result was not what it should be */
    kiln_status st;
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    kiln_buffer *src = NULL, *dst = NULL;
    static float ones[MOST];
    for (int i = 0; i < MOST; i++)
        ones[i] = 1.0f;
    w->st = kiln_buffer_create(w->dev, MOST * sizeof(float), "test source", &src);
    if (w->st == KILN_OK)
        w->st = kiln_buffer_create(w->dev, MOST * sizeof(float), "test destination", &dst);
    if (w->st == KILN_OK)
        w->st = kiln_buffer_write(w->dev, src, 0, ones, sizeof ones, 1);
    for (int it = 0; it < LAUNCHES && w->st == KILN_OK; it++) {
        /* Work-groups of 64 either way; the devices alternate between a
         * short and a long range, out of step with each other. */
        const size_t n = ((it + w->which) % 2 ? 64 : 8192) + 64 * (size_t)(it % 9);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst),
                                kiln_arg_int((int64_t)n), kiln_arg_int(0));
        w->st = kiln_run1(w->dev, "elementwise", "kiln_elementwise_copy_or_add", n, a);
        if (w->st == KILN_OK && it % 500 == 0) {
            float last = 0.0f;
            w->st = kiln_buffer_read(w->dev, dst, (n - 1) * sizeof(float), &last, sizeof last);
            w->wrong += last != 1.0f;
        }
    }
    if (w->st == KILN_OK)
        w->st = kiln_device_finish(w->dev);
    kiln_buffer_destroy(src);
    kiln_buffer_destroy(dst);
    return NULL;
}

int main(void)
{
    kiln_context *ctx = test_context(1);
    if (!ctx)
        SKIP("no OpenCL device");
    if (ctx->n_devices < 2) {
        kiln_context_destroy(ctx);
        SKIP("one device; run with POCL_DEVICES=\"basic basic\"");
    }
    worker w[2] = {{.dev = ctx->devices[0], .which = 0}, {.dev = ctx->devices[1], .which = 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, run, &w[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(ctx, w[i].st);
        CHECK(w[i].wrong == 0);
    }
    printf("%d launches on each of two devices at once, one kernel, two global sizes\n",
           LAUNCHES);
    kiln_context_destroy(ctx);
    return test_finish("test_concurrent_devices");
}
