/* Reducer bandwidth: all-reduce of a 64 MiB gradient over 2 replicas
 * (each submitting from its own thread, in 25 MiB-ish buckets), beside a
 * plain memcpy of the same 64 MiB, in one run; prints GB/s and the ratio.
 * GB/s counts gradient bytes reduced (or copied) per second. */
#include "comm/reducer.h"
#include "runtime/context/context.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLOATS (16u << 20)   /* 64 MiB */
#define ROUNDS 10

static void *plain_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

typedef struct job {
    kiln_reducer *r;
    int replica, n_buckets;
} job;

static void *submit_all(void *arg)
{
    job *j = arg;
    for (int b = 0; b < j->n_buckets; b++)
        kiln_reducer_submit(j->r, j->replica, b);
    kiln_reducer_wait(j->r, 0);
    return NULL;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, plain_realloc, NULL, NULL);
    kiln_bucket buckets[4];
    const size_t q = FLOATS / 4;
    for (int b = 0; b < 4; b++) {
        buckets[b].offset = (size_t)(3 - b) * q;   /* reverse order, as backward makes them */
        buckets[b].count = q;
    }
    kiln_reducer *r = NULL;
    if (kiln_reducer_create(&ctx.host, 2, FLOATS, buckets, 4, threads, &r) != KILN_OK)
        return fprintf(stderr, "bench_reducer: %s\n", kiln_context_last_error(&ctx)), 1;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < FLOATS; i++)
            kiln_reducer_slot(r, k)[i] = (float)(i % 97) * 0.5f;
    float *src = malloc(FLOATS * sizeof(float)), *dst = malloc(FLOATS * sizeof(float));
    memset(src, 1, FLOATS * sizeof(float));
    memset(dst, 0, FLOATS * sizeof(float));
    double t_reduce = 0, t_copy = 0;
    for (int round = 0; round <= ROUNDS; round++) {   /* round 0 warms up */
        double t0 = kiln_now();
        memcpy(dst, src, FLOATS * sizeof(float));
        double t1 = kiln_now();
        kiln_reducer_begin(r);
        pthread_t t[2];
        job jobs[2] = {
            {.r = r, .n_buckets = 4},
            {.r = r, .replica = 1, .n_buckets = 4},
        };
        for (int k = 0; k < 2; k++)
            pthread_create(&t[k], NULL, submit_all, &jobs[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
        double t2 = kiln_now();
        if (round > 0) {
            t_copy += t1 - t0;
            t_reduce += t2 - t1;
        }
    }
    const double bytes = (double)FLOATS * sizeof(float) * ROUNDS;
    printf("{\"name\": \"reducer\", \"replicas\": 2, \"threads\": %d, \"mib\": 64, "
           "\"reduce_gb_s\": %.2f, \"memcpy_gb_s\": %.2f, \"ratio\": %.3f, \"check\": %g}\n",
           threads, bytes / t_reduce / 1e9, bytes / t_copy / 1e9, t_copy / t_reduce,
           (double)kiln_reducer_result(r)[97 * 3 + 5]);
    kiln_reducer_destroy(r);
    free(src);
    free(dst);
    kiln_context_release_host_only(&ctx);
    return 0;
}
