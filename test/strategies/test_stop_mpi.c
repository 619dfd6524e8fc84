/* A data source that never returns a sample, under the MPI strategies: run
 * as MPI processes by common/mpi_run.sh.
 *  multi_worker (2 processes): rank 1 reads sample 20 of step 3's batch
 *    (rank 0 the batch's first half) and blocks there; rank 1 fails at its
 *    loader's watchdog naming the sample, rank 0 at the all-reduce it then
 *    waits in, both with KILN_ERROR_TIMEOUT within seconds;
 *  parameter_server (2 processes: a store and a worker): the worker blocks
 *    reading sample 20 and fails at its loader's watchdog; the store fails
 *    at the watchdog of its own wait for the worker.
 * Each process then releases the blocked fill, tears down and prints
 * "rank R: ok". */
#include "harness.h"
#include "counting_alloc.h"
#include "base/clock.h"

#include <pthread.h>
#include <time.h>

#define DIM 4
#define SAMPLES 48
#define BLOCKED 20

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int released;

static int fill(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                size_t size)
{
    (void)user;
    (void)message;
    (void)size;
    for (int j = 0; j < DIM; j++)
        b->features[j] = (float)((index * 7 + j) % 5) / 5.0f;
    *b->sparse_labels = (int32_t)(index % 3);
    if (index != BLOCKED)
        return 0;
    pthread_mutex_lock(&lock);
    while (!released)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return 0;
}

int main(int argc, char **argv)
{
    const int ps = argc > 1 && strcmp(argv[1], "parameter_server") == 0;
    counter c = {0};
    const kiln_context_options o = {.struct_size = sizeof o, .seed = 5,
                                    .realloc_fn = counting_realloc, .realloc_user = &c};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return 1;
    const kiln_callback_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 1,
                                  .feature_dims = {DIM}, .fill = fill};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &d, &ds));
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {DIM};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_compile_options co = {
        .struct_size = sizeof co, .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        .strategy = ps ? KILN_STRATEGY_PARAMETER_SERVER : KILN_STRATEGY_MULTI_WORKER,
        .parameter_store_ranks = ps ? 1 : 0, .step_timeout_seconds = 2.0};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    int32_t rank = -1, world = 0;
    CHECK_OK(ctx, kiln_model_rank(m, &rank, &world));
    CHECK(world == 2);
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2, .batch_size = 8,
                                 .no_shuffle = 1, .loader_threads = 2,
                                 .verbosity = KILN_VERBOSE_SILENT};
    const double t0 = kiln_now();
    const kiln_status st = kiln_model_fit(m, ds, &fo);
    const double waited = kiln_now() - t0;
    const char *msg = kiln_context_last_error(ctx);
    printf("rank %d: %s after %.1f s: %s\n", (int)rank, kiln_status_name(st), waited, msg);
    CHECK(st == KILN_ERROR_TIMEOUT);
    CHECK(waited < 15.0);
    /* The process that reads sample 20 names it. */
    if (rank == 1)
        CHECK(strstr(msg, "reading sample 20 (5 of 8 of step 3's batch) from the dataset's "
                          "callback source") != NULL);
    const double t1 = kiln_now();
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    CHECK(kiln_now() - t1 < 15.0);
    pthread_mutex_lock(&lock);
    released = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    /* The thread left in the fill ends, and the context closes with it:
     * exiting before would pull the library from under it. */
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10000000};
    long live = 1;
    for (const double end = kiln_now() + 10.0; live && kiln_now() < end;) {
        pthread_mutex_lock(&counter_lock);
        live = c.live;
        pthread_mutex_unlock(&counter_lock);
        if (live)
            nanosleep(&tick, NULL);
    }
    CHECK(live == 0);
    if (test_failures == 0)
        printf("rank %d: ok\n", (int)rank);
    fflush(stdout);
    /* mpirun ends the job when a process leaves MPI unfinalised (after an
     * abandoned all-reduce): rank 1, which waits for its fill's thread, must
     * report before rank 0 leaves. */
    if (!ps && rank == 0)
        nanosleep(&(struct timespec){.tv_sec = 5}, NULL);
    return test_finish("test_stop_mpi");
}
