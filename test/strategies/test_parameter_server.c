/* The parameter-server strategy (asynchronous, in one process) on two
 * devices of different speed (meson sets POCL_DEVICES="basic pthread"):
 * on a Fashion-MNIST subset it reaches the accuracy of synchronous
 * (mirrored) training on the same batches within 1 point with
 * max_staleness 1 (mean of eight runs); without a bound it still learns
 * (5 points); every batch is accounted for in the epoch's record; with
 * max_staleness 1 no worker takes a batch more than 1 step ahead of the
 * slowest (instrumented), while
 * without a bound the fast worker runs ahead; its checkpoint loads on one
 * device; bad options are errors. Skips without the dataset. */
#include "test_data.h"

#include <unistd.h>

#define TRAIN 6000

static kiln_model *seed_cnn(kiln_context *ctx, kiln_strategy strategy, int32_t staleness)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = strategy;
    co.max_staleness = staleness;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* Trains 2 epochs at batch 32; returns the test accuracy. */
static double train(kiln_context *ctx, kiln_model *m, const kiln_dataset *train,
                    const kiln_dataset *test, kiln_training_stats *stats)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    kiln_epoch_record last = {.struct_size = sizeof last};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &last));
    CHECK(last.samples == TRAIN);   /* every batch reported, in flight or not */
    stats->struct_size = sizeof *stats;
    CHECK_OK(ctx, kiln_model_training_stats(m, stats));
    kiln_metrics met = {.struct_size = sizeof met};
    CHECK_OK(ctx, kiln_model_evaluate(m, test, 100, &met));
    return met.accuracy;
}

int main(void)
{
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        SKIP_MISSING("%s is missing: install dataset-fashion-mnist", FASHION_DIR);
    kiln_context *ctx = test_context(11);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    int32_t devices = 0;
    kiln_context_device_count(ctx, &devices);
    if (devices < 2) {
        kiln_context_destroy(ctx);
        SKIP("the parameter server needs two devices; run with POCL_DEVICES=\"basic pthread\"");
    }
    kiln_dataset *train_ds = fashion_subset(ctx, "train", TRAIN);
    kiln_dataset *test_ds = fashion_subset(ctx, "t10k", 2000);

    kiln_training_stats sync_stats, free_stats, bound_stats;
    kiln_model *sync = seed_cnn(ctx, KILN_STRATEGY_MIRRORED, 0);
    const double sync_acc = train(ctx, sync, train_ds, test_ds, &sync_stats);
    kiln_model_destroy(sync);
    kiln_model *unbounded = seed_cnn(ctx, KILN_STRATEGY_PARAMETER_SERVER, 0);
    const double free_acc = train(ctx, unbounded, train_ds, test_ds, &free_stats);
    /* Asynchronous runs differ with the interleaving of the workers: 21
     * bounded runs went from 0.8285 to 0.8500 (mean 0.8394, standard
     * deviation 0.0058), so the bounded accuracy is the mean of eight runs,
     * 3.8 of its standard deviations above the 1-point line. */
    enum { BOUNDED_RUNS = 8 };
    kiln_model *bounded = NULL;
    double bound_acc = 0;
    for (int run = 0; run < BOUNDED_RUNS; run++) {
        kiln_model_destroy(bounded);
        bounded = seed_cnn(ctx, KILN_STRATEGY_PARAMETER_SERVER, 1);
        const double acc = train(ctx, bounded, train_ds, test_ds, &bound_stats);
        bound_acc += acc / BOUNDED_RUNS;
        CHECK(bound_stats.max_lead <= 1);
        printf("max_staleness 1, run %d: %.4f (stale %lld, lead %lld)\n", run + 1, acc,
               (long long)bound_stats.max_staleness, (long long)bound_stats.max_lead);
    }
    printf("test accuracy after 2 epochs on %d images, batch 32: mirrored %.4f; parameter "
           "server %.4f (updates %lld, most stale gradient %lld updates, lead %lld steps); "
           "with max_staleness 1, mean of %d runs: %.4f\n", TRAIN, sync_acc, free_acc,
           (long long)free_stats.reductions, (long long)free_stats.max_staleness,
           (long long)free_stats.max_lead, BOUNDED_RUNS, bound_acc);
    /* Bounded, within 1 point of synchronous training (the promise of stale
     * synchronous parallel). Unbounded there is no such promise: the pthread
     * worker runs 33 to 106 batches ahead and one run's accuracy follows the
     * interleaving (0.8205 to 0.8450 against 0.8415, 0.8205 in a CI run), so
     * it is held only to learning: 5 points. */
    CHECK(bound_acc >= sync_acc - 0.01);
    CHECK(free_acc >= sync_acc - 0.05);
    CHECK(free_stats.reductions == 2 * ((TRAIN + 31) / 32));   /* one update per batch */
    CHECK(free_stats.max_staleness >= 1);   /* it really ran asynchronously */

    /* Its checkpoint (the store) loads on one device. */
    char path[] = "/tmp/kiln_ps_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK_OK(ctx, kiln_model_save_checkpoint(bounded, path));
    kiln_model *one = seed_cnn(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    CHECK_OK(ctx, kiln_model_load_checkpoint(one, path));
    remove(path);
    kiln_metrics a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    CHECK_OK(ctx, kiln_model_evaluate(bounded, test_ds, 100, &a));
    CHECK_OK(ctx, kiln_model_evaluate(one, test_ds, 100, &b));
    CHECK(fabs(a.loss - b.loss) < 1e-5 && a.accuracy == b.accuracy);
    kiln_model_destroy(one);

    /* A worker trains whole batches: a per-replica batch of 48 is 48 per
     * update (10 over 480 samples), not 48 x 2 workers. */
    kiln_dataset *few = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(train_ds, 0, 480, &few));
    kiln_training_stats before = {.struct_size = sizeof before}, after = before;
    CHECK_OK(ctx, kiln_model_training_stats(bounded, &before));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.per_replica_batch_size = 48;
    CHECK_OK(ctx, kiln_model_fit(bounded, few, &fo));
    CHECK_OK(ctx, kiln_model_training_stats(bounded, &after));
    CHECK(after.reductions - before.reductions == 10);
    kiln_dataset_destroy(few);
    kiln_model_destroy(bounded);
    kiln_model_destroy(unbounded);

    /* Bad options. */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options d = {.struct_size = sizeof d, .units = 2,
                            .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.strategy = KILN_STRATEGY_PARAMETER_SERVER;
    co.max_staleness = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "max_staleness", kiln_model_compile(m, &co));
    co.max_staleness = 0;
    co.gradient_accumulation_steps = 2;
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "gradient_accumulation_steps",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    kiln_dataset_destroy(train_ds);
    kiln_dataset_destroy(test_ds);
    kiln_context_destroy(ctx);
    return test_finish("test_parameter_server");
}
