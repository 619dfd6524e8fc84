/* A process of a multi_worker job that stalls or dies: run by
 * test/strategies/mpi_faults.sh as 2 MPI processes with one device each.
 *  stall: rank 1 stalls in the forward of a fault layer (fault_layer.h)
 *         before its convolution at step 2, until fit returns (at most
 *         4 s, past the watchdog);
 *         with a 2 s watchdog both ranks must return KILN_ERROR_TIMEOUT
 *         within seconds (rank 0 from its all-reduce, rank 1 from its own
 *         watchdog), name what they waited for and tear down: "rank R: ok".
 *  kill:  rank 1 kills itself (SIGKILL) after step 2; rank 0 must return
 *         an error naming what it waited for within the watchdog and tear
 *         down: "rank 0: ok" (mpirun must be told not to end the job). */
#include <signal.h>

#include "fault_layer.h"
#include "harness.h"
#include "base/clock.h"

#define SAMPLES 64
#define SIDE 6

static int kill_rank1(void *user, const kiln_progress *progress)
{
    if (*(const int *)user == 1 && progress->event == KILN_EVENT_BATCH_END &&
        progress->step == 2)
        raise(SIGKILL);
    return 0;
}

int main(int argc, char **argv)
{
    const int kill = argc > 1 && strcmp(argv[1], "kill") == 0;
    kiln_context *ctx = test_context(3);
    if (!ctx)
        return 1;
    static float x[SAMPLES * SIDE * SIDE];
    static int32_t y[SAMPLES];
    for (int i = 0; i < SAMPLES * SIDE * SIDE; i++)
        x[i] = (float)(i % 17) / 17.0f;
    for (int i = 0; i < SAMPLES; i++)
        y[i] = i % 3;
    kiln_arrays_desc d = {.struct_size = sizeof d};
    d.count = SAMPLES;
    d.feature_rank = 3;
    d.feature_dims[0] = d.feature_dims[1] = SIDE;
    d.feature_dims[2] = 1;
    d.features = x;
    d.sparse_labels = y;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));

    /* The rank is known only after compile, and the fault must be armed
     * before it; MPI's environment says it first. */
    const char *env = getenv("OMPI_COMM_WORLD_RANK");
    const int my_rank = env ? atoi(env) : 0;
    fault_plan stall = {.armed = my_rank == 1 && !kill, .device = 0, .step = 2,
                        .stall_seconds = 4.0};
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 2, .kernel_size = {3, 3},
                                .strides = {1, 1}, .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    fault_layer(m, KILN_NODE_PREVIOUS, &stall);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = KILN_STRATEGY_MULTI_WORKER;
    co.step_timeout_seconds = 2.0;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    int32_t rank = -1, world = 0;
    CHECK_OK(ctx, kiln_model_rank(m, &rank, &world));
    CHECK(rank == my_rank && world == 2);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = 8;
    fo.verbosity = KILN_VERBOSE_SILENT;
    if (kill) {
        fo.callback = kill_rank1;
        fo.callback_user = (void *)&my_rank;
    }
    const double t0 = kiln_now();
    const kiln_status st = kiln_model_fit(m, ds, &fo);
    const double waited = kiln_now() - t0;
    const char *msg = kiln_context_last_error(ctx);
    printf("rank %d: %s after %.1f s: %s\n", (int)rank, kiln_status_name(st), waited, msg);
    CHECK(st == KILN_ERROR_TIMEOUT || (kill && st == KILN_ERROR_DEVICE));
    CHECK(waited < 15.0);
    CHECK(strstr(msg, rank == 0 ? (kill ? "rank 0 of 2" : "waiting for the other processes' "
                                                          "gradients")
                                : "layer 'fault' (forward) did not finish") != NULL);
    CHECK(strstr(msg, rank == 0 ? "[rank 0 of 2]" : "[rank 1 of 2]") != NULL);
    kiln_flag_raise(&stall.released);
    const double t1 = kiln_now();
    kiln_model_destroy(m);   /* joins the stalled thread, released just now */
    CHECK(kiln_now() - t1 < 15.0);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    if (test_failures == 0)
        printf("rank %d: ok\n", (int)rank);
    fflush(stdout);
    return test_finish("test_multi_worker_faults");
}
