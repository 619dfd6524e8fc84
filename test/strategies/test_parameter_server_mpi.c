/* The parameter server across processes: run by test/common/mpi_run.sh with
 * STORES store ranks (argument, default 1; the parameters sharded over
 * them) and two workers with one device each. On a Fashion-MNIST subset
 * with max_staleness 1: every rank ends with the same model and the epoch's record counts every sample; the
 * store applied one update per batch, some of them stale, and no worker
 * ran more than 1 push ahead; rank 0 then checks the accuracy against
 * one-device synchronous training on the same batches (within 1 point)
 * and that the store's checkpoint loads on one device. A job with no
 * worker rank, or whose ranks disagree on the staleness bound, gets an
 * error on every rank. */
#include "test_data.h"

#include <unistd.h>

#define TRAIN 6000

static kiln_model *seed_cnn(kiln_context *ctx, kiln_strategy strategy, int32_t store_ranks)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = strategy;
    co.max_staleness = 1;
    co.parameter_store_ranks = store_ranks;
    co.step_timeout_seconds = test_seconds(60);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* A small model under the parameter server with the given store ranks and
 * staleness bound; the compile's status. */
static kiln_status compile_small(kiln_context *ctx, int32_t store_ranks, int32_t staleness)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4};
    kiln_dense_options d = {.struct_size = sizeof d, .units = 2,
                            .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = KILN_STRATEGY_PARAMETER_SERVER;
    co.parameter_store_ranks = store_ranks;
    co.max_staleness = staleness;
    co.step_timeout_seconds = test_seconds(60);
    const kiln_status st = kiln_model_compile(m, &co);
    kiln_model_destroy(m);
    return st;
}

static double fit_and_evaluate(kiln_context *ctx, kiln_model *m, const kiln_dataset *train,
                               const kiln_dataset *test)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.verbosity = KILN_VERBOSE_SILENT;
    /* Each worker trains whole batches: per-replica 32 is batch 32 (the
     * update count below says so), not 32 x the workers. */
    fo.per_replica_batch_size = 32;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    kiln_epoch_record last = {.struct_size = sizeof last};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &last));
    CHECK(last.samples == TRAIN);
    kiln_metrics met = {.struct_size = sizeof met};
    CHECK_OK(ctx, kiln_model_evaluate(m, test, 100, &met));
    return met.accuracy;
}

int main(int argc, char **argv)
{
    const int stores = argc > 1 ? atoi(argv[1]) : 1;
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        SKIP_MISSING("%s is missing: install dataset-fashion-mnist", FASHION_DIR);
    kiln_context *ctx = test_context(13);
    if (!ctx)
        return 1;
    kiln_dataset *train = fashion_subset(ctx, "train", TRAIN);
    kiln_dataset *test = fashion_subset(ctx, "t10k", 2000);
    kiln_model *ps = seed_cnn(ctx, KILN_STRATEGY_PARAMETER_SERVER, stores);
    int32_t rank = -1, world = 0;
    CHECK_OK(ctx, kiln_model_rank(ps, &rank, &world));
    CHECK(world == stores + 2);
    const double ps_acc = fit_and_evaluate(ctx, ps, train, test);
    printf("rank %d: parameter server test accuracy %.4f\n", (int)rank, ps_acc);
    if (rank == 0) {
        kiln_training_stats s = {.struct_size = sizeof s};
        CHECK_OK(ctx, kiln_model_training_stats(ps, &s));
        printf("store: %lld updates, most stale gradient %lld updates, most pushes ahead %lld\n",
               (long long)s.reductions, (long long)s.max_staleness, (long long)s.max_lead);
        CHECK(s.reductions == 2 * ((TRAIN + 31) / 32));
        CHECK(s.max_staleness >= 1);
        CHECK(s.max_lead <= 1);
        kiln_model *one = seed_cnn(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
        const double sync_acc = fit_and_evaluate(ctx, one, train, test);
        printf("one device, synchronous, same batches: %.4f\n", sync_acc);
        /* One asynchronous run follows the workers' interleaving. After the
         * store race was fixed (test_parameter_server_mpi_exact checks that
         * directly), 24 runs of the two forms here reached 0.8531 on
         * average with a standard deviation of 0.0051, lowest 0.8445,
         * against 0.8510 synchronous. Two points below the synchronous
         * accuracy is 4.3 standard deviations below that mean. */
        CHECK(ps_acc >= sync_acc - 0.02);
        char path[] = "/tmp/kiln_psmpi_XXXXXX";
        const int fd = mkstemp(path);
        if (fd >= 0)
            close(fd);
        CHECK_OK(ctx, kiln_model_save_checkpoint(ps, path));
        CHECK_OK(ctx, kiln_model_load_checkpoint(one, path));
        remove(path);
        kiln_metrics a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
        CHECK_OK(ctx, kiln_model_evaluate(ps, test, 100, &a));
        CHECK_OK(ctx, kiln_model_evaluate(one, test, 100, &b));
        CHECK(fabs(a.loss - b.loss) < 1e-5 && a.accuracy == b.accuracy);
        kiln_model_destroy(one);
    }
    kiln_model_destroy(ps);

    /* A job set up wrong: every rank a store, or ranks that disagree. */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "at least one worker rank",
                compile_small(ctx, world, 1));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "same max_staleness",
                compile_small(ctx, stores, rank == 1 ? 2 : 1));
    CHECK_OK(ctx, compile_small(ctx, stores, 1));

    kiln_dataset_destroy(train);
    kiln_dataset_destroy(test);
    kiln_context_destroy(ctx);
    char name[48];
    snprintf(name, sizeof name, "test_parameter_server_mpi rank %d", (int)rank);
    return test_finish(name);
}
