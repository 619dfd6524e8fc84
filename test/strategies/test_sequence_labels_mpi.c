/* Per-position labels with an ignore class under multi_worker, run by
 * test/common/mpi_run.sh as 2 MPI processes with one PoCL basic device each: each
 * process holds only its share of every batch's labels, so the count of
 * positions not ignored is summed over the processes before the step. The
 * weights, the history's loss and evaluate equal one device's on the same
 * global batches (trained in-process by every rank). */
#include "harness.h"
#include "sequence_data.h"

static kiln_model *build(kiln_context *ctx, kiln_strategy strategy)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {T, F};
    kiln_input(m, 2, dims, NULL);
    const kiln_dense_options h = {.struct_size = sizeof h, .units = 6,
                                  .activation = KILN_ACTIVATION_TANH};
    kiln_dense(m, KILN_NODE_PREVIOUS, &h);
    const kiln_dense_options d = {.struct_size = sizeof d, .units = C,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .strategy = strategy, .replicas = 1,
                                     .has_ignore_class = 1, .ignore_class = IGNORE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* Weights after 2 epochs of batch 7 (uneven shards, a last batch of 3). */
static float *train(kiln_context *ctx, kiln_dataset *ds, kiln_strategy strategy, int64_t *n,
                    double *loss, kiln_metrics *e, int32_t *rank)
{
    kiln_model *m = build(ctx, strategy);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 7;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &r));
    *loss = r.loss;
    e->struct_size = sizeof *e;
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 5, e));
    CHECK_OK(ctx, kiln_model_rank(m, rank, NULL));
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    kiln_model_destroy(m);
    return w;
}

int main(void)
{
    make_data();
    kiln_context_options o = {.struct_size = sizeof o, .seed = 7};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return 1;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = N, .feature_rank = 2,
                                .feature_dims = {T, F}, .features = features,
                                .label_kind = KILN_LABELS_SPARSE, .sparse_labels = labels,
                                .label_size = T};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    int64_t n = 0;
    double l1 = 0, lw = 0;
    int32_t rank = 0;
    kiln_metrics e1, ew;
    float *one = train(ctx, ds, KILN_STRATEGY_ONE_DEVICE, &n, &l1, &e1, &rank);
    float *mw = train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, &n, &lw, &ew, &rank);
    const double worst = test_difference(mw, one, sizeof(float), n, TEST_PER_VALUE, NULL);
    printf("rank %d: multi_worker 2 x 1 vs one_device: max relative difference %.2e, loss "
           "%.6f vs %.6f, evaluate %.6f vs %.6f\n", (int)rank, worst, lw, l1, ew.loss, e1.loss);
    CHECK(one && mw && worst <= 1e-5);
    CHECK(fabs(lw - l1) < 1e-5 && fabs(ew.loss - e1.loss) < 1e-5 &&
          fabs(ew.accuracy - e1.accuracy) < 1e-6);
    free(one);
    free(mw);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    if (test_failures) {
        fprintf(stderr, "test_sequence_labels_mpi: %d check(s) failed\n", test_failures);
        return 1;
    }
    printf("test_sequence_labels_mpi: all checks passed\n");
    return 0;
}
