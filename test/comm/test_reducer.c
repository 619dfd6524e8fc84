/* The shared-memory reducer on its own: 1 to 4 replicas submitting from
 * their own threads, many bucket layouts, 1 to 3 reducer threads; sums
 * against a float64 reference; cancel and timeout; bucket planning.
 * Also built with -fsanitize=thread (see docs/testing.md: tests under TSan). */
#include "harness.h"
#include "comm/reducer.h"
#include "runtime/context/context.h"

#include <pthread.h>

typedef struct submitter {
    kiln_reducer *r;
    int replica, n_buckets;
    const kiln_bucket *buckets;
    size_t length;
    int fails;
} submitter;

static float value(int round, int replica, size_t i)
{
    return (float)((double)((i * 7 + (size_t)replica * 13 + (size_t)round) % 101) / 17.0 - 3.0);
}

/* One replica's round: fill and submit buckets in reverse order, as
 * backward would, then wait for the sum. */
static void *submit_round(void *arg)
{
    submitter *s = arg;
    float *slot = kiln_reducer_slot(s->r, s->replica);
    for (int b = s->n_buckets - 1; b >= 0; b--) {
        for (size_t i = 0; i < s->buckets[b].count; i++)
            slot[s->buckets[b].offset + i] = value(0, s->replica, s->buckets[b].offset + i);
        kiln_reducer_submit(s->r, s->replica, b);
    }
    if (kiln_reducer_wait(s->r, 30) != KILN_OK)
        s->fails++;
    return NULL;
}

static void run_case(kiln_context *ctx, int replicas, size_t length, const kiln_bucket *buckets,
                     int n_buckets, int threads, int rounds)
{
    kiln_reducer *r = NULL;
    CHECK_OK(ctx, kiln_reducer_create(&ctx->host, replicas, length, buckets, n_buckets, threads,
                                      &r));
    if (!r)
        return;
    for (int round = 0; round < rounds; round++) {
        kiln_reducer_begin(r);
        pthread_t t[4];
        submitter s[4];
        for (int k = 0; k < replicas; k++) {
            s[k] = (submitter){.r = r, .replica = k, .n_buckets = n_buckets, .buckets = buckets,
                               .length = length};
            pthread_create(&t[k], NULL, submit_round, &s[k]);
        }
        for (int k = 0; k < replicas; k++) {
            pthread_join(t[k], NULL);
            CHECK(s[k].fails == 0);
        }
        const float *sum = kiln_reducer_result(r);
        double worst = 0;
        for (size_t i = 0; i < length; i++) {
            double want = 0;
            for (int k = 0; k < replicas; k++)
                want += value(0, k, i);
            const double e = fabs(sum[i] - want);
            worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-5);
    }
    kiln_reducer_destroy(r);
}

static void test_sums(kiln_context *ctx)
{
    const size_t length = 1001;
    kiln_bucket one[] = {
        {.offset = 0, .count = length},
    };
    kiln_bucket odd[] = {
        {.offset = 0, .count = 1},
        {.offset = 1, .count = 2},
        {.offset = 3, .count = 997},
        {.offset = 1000, .count = 1},
    };
    kiln_bucket many[64];
    for (int b = 0; b < 64; b++) {
        many[b].offset = (size_t)b * length / 64;
        many[b].count = (size_t)(b + 1) * length / 64 - many[b].offset;
    }
    for (int replicas = 1; replicas <= 4; replicas++)
        for (int threads = 1; threads <= 3; threads++) {
            run_case(ctx, replicas, length, one, 1, threads, 2);
            run_case(ctx, replicas, length, odd, 4, threads, 2);
            run_case(ctx, replicas, length, many, 64, threads, 3);
        }
    printf("sums: 1-4 replicas, 1-3 threads, 1/4/64 buckets\n");
}

static void test_errors_and_cancel(kiln_context *ctx)
{
    kiln_reducer *r = (kiln_reducer *)ctx;
    kiln_bucket over[] = {
        {.offset = 10, .count = 5},
    };
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "bucket 0 [10, +5) overruns 12 floats",
                kiln_reducer_create(&ctx->host, 2, 12, over, 1, 1, &r));
    CHECK(r == NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "0 replicas",
                kiln_reducer_create(&ctx->host, 0, 12, over, 1, 1, &r));

    kiln_bucket two[] = {
        {.offset = 0, .count = 6},
        {.offset = 6, .count = 6},
    };
    CHECK_OK(ctx, kiln_reducer_create(&ctx->host, 2, 12, two, 2, 1, &r));
    kiln_reducer_begin(r);
    kiln_reducer_submit(r, 0, 0);
    kiln_reducer_submit(r, 1, 0);
    kiln_reducer_submit(r, 0, 1);   /* replica 1 never sends bucket 1 */
    CHECK(kiln_reducer_wait(r, 0.05) == KILN_ERROR_TIMEOUT);
    kiln_reducer_cancel(r);
    CHECK(kiln_reducer_wait(r, 0) == KILN_ERROR_STOPPED);
    kiln_reducer_begin(r);          /* a new round after a cancelled one */
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++)
            kiln_reducer_submit(r, k, b);
    CHECK(kiln_reducer_wait(r, 5) == KILN_OK);
    kiln_reducer_destroy(r);
    kiln_reducer_destroy(NULL);
}

static void test_plan(void)
{
    kiln_bucket out[8];
    const size_t cuts[] = {0, 100, 150, 1000};  /* four layers' parameters */
    /* Cap 0: a bucket per layer, last layer first. */
    int n = kiln_reducer_plan(cuts, 4, 1200, 0, 0, out);
    CHECK(n == 4 && out[0].offset == 1000 && out[0].count == 200 && out[3].offset == 0);
    /* A cap larger than everything: one bucket. */
    n = kiln_reducer_plan(cuts, 4, 1200, 1 << 20, 1 << 20, out);
    CHECK(n == 1 && out[0].offset == 0 && out[0].count == 1200);
    /* First bucket small (1 KiB = 256 floats), then 4 KiB: [1000,1200) alone,
     * then [0,1000) fits in 1024 floats. */
    n = kiln_reducer_plan(cuts, 4, 1200, 1024, 4096, out);
    CHECK(n == 2 && out[0].offset == 1000 && out[1].offset == 0 && out[1].count == 1000);
    /* Buckets always cover the whole buffer, contiguously, from the end. */
    for (size_t cap = 4; cap <= 8192; cap *= 3) {
        n = kiln_reducer_plan(cuts, 4, 1200, cap, cap, out);
        size_t hi = 1200;
        for (int b = 0; b < n; b++) {
            CHECK(out[b].offset + out[b].count == hi);
            hi = out[b].offset;
        }
        CHECK(hi == 0);
    }
}

int main(void)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    test_sums(&ctx);
    test_errors_and_cancel(&ctx);
    test_plan();
    kiln_context_release_host_only(&ctx);
    return test_finish("test_reducer");
}
