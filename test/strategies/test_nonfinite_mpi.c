/* test_nonfinite's features of 1e38 across MPI processes, run by
 * test/common/mpi_run.sh: the loss and gradients stay finite but Adam's
 * update does not (g * g overflows). Steps 1, 2 and 4 are clean, step 3
 * meets the huge features.
 *
 * multi_worker (2 processes): every rank stops at step 3 naming the update,
 * its weights those of steps 1-2; with skip_nonfinite every rank skips it
 * and ends bit for bit where steps 1, 2 and 4 end.
 * parameter_server (argument, 2 processes: the store on rank 0, one
 * worker): the store drops the update and every rank hears of it at the
 * epoch's end, stopping or (skip_nonfinite) skipping it; the weights stay
 * finite and, with one worker, equal to steps 1, 2 and 4's. With a second
 * argument 2 (3 processes: two stores, one worker) each store checks its
 * shard: the weights stay finite, but a store whose shard's update was
 * finite applies it, so they are not compared. */
#include "harness.h"
#include "huge_steps.h"

#include <math.h>



static int32_t stores = 1;

static kiln_model *model(kiln_context *ctx, kiln_strategy strategy, const float *w, int64_t n)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6};
    const kiln_dense_options h = {.struct_size = sizeof h, .units = 5,
                                  .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options o = {.struct_size = sizeof o, .units = 3,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &h);
    kiln_dense(m, KILN_NODE_PREVIOUS, &o);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam,
                                         .kind = KILN_OPTIMIZER_ADAM};
    const kiln_compile_options co = {.struct_size = sizeof co, .strategy = strategy,
                                     .replicas = 1, .parameter_store_ranks = stores,
                                     .step_timeout_seconds = test_seconds(60),
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (w)
        CHECK_OK(ctx, kiln_model_set_weights(m, w, n));
    return m;
}

static void fit_options(kiln_fit_options *fo, int skip)
{
    *fo = (kiln_fit_options){.struct_size = sizeof *fo};
    fo->batch_size = HUGE_BATCH;
    fo->no_shuffle = 1;
    fo->verbosity = KILN_VERBOSE_SILENT;
    fo->skip_nonfinite = skip;
}

/* All finite; bit for bit as `ref` unless the stores are several. */
static int finite_and_equal(const float *w, const float *ref, int64_t n)
{
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= isfinite(w[i]) && (stores > 1 || memcmp(&w[i], &ref[i], sizeof w[i]) == 0);
    return ok;
}

int main(int argc, char **argv)
{
    const int ps = argc > 1 && strcmp(argv[1], "parameter_server") == 0;
    stores = ps && argc > 2 ? atoi(argv[2]) : 1;
    const kiln_strategy strategy = ps ? KILN_STRATEGY_PARAMETER_SERVER
                                      : KILN_STRATEGY_MULTI_WORKER;
    kiln_context *ctx = test_context(5);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    kiln_dataset *first = huge_data(ctx, 0, 2), *last = huge_data(ctx, HUGE_STEPS - 1, 1);
    kiln_dataset *all = huge_data(ctx, 0, HUGE_STEPS);
    kiln_model *m = model(ctx, strategy, NULL, 0);
    int32_t rank = 0;
    CHECK_OK(ctx, kiln_model_rank(m, &rank, NULL));
    int64_t n = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &n));
    float *w0 = calloc((size_t)n, sizeof(float)), *w2 = calloc((size_t)n, sizeof(float));
    float *w4 = calloc((size_t)n, sizeof(float)), *w = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w0, n));
    kiln_fit_options fo;
    fit_options(&fo, 0);
    CHECK_OK(ctx, kiln_model_fit(m, first, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w2, n));
    CHECK_OK(ctx, kiln_model_fit(m, last, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w4, n));
    kiln_model_destroy(m);

    m = model(ctx, strategy, w0, n);
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, ps ? "the update is not finite at epoch 1"
                                            : "the update is not finite at epoch 1, step 3",
                kiln_model_fit(m, all, &fo));
    printf("rank %d: %s\n", (int)rank, kiln_context_last_error(ctx));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    /* The parameter server's one worker went on to step 4 before the end. */
    CHECK(finite_and_equal(w, ps ? w4 : w2, n));
    kiln_model_destroy(m);

    m = model(ctx, strategy, w0, n);
    fit_options(&fo, 1);
    CHECK_OK(ctx, kiln_model_fit(m, all, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &r));
    CHECK(r.skipped_steps >= 1 && isfinite(r.loss));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    const int as_reference = finite_and_equal(w, w4, n);
    CHECK(as_reference);
    printf("rank %d: skipped %lld step(s), weights %s\n", (int)rank,
           (long long)r.skipped_steps, !as_reference ? "NOT finite or NOT as expected"
                                       : stores > 1 ? "finite"
                                                    : "as steps 1, 2 and 4 make them");
    kiln_model_destroy(m);

    free(w0);
    free(w2);
    free(w4);
    free(w);
    kiln_dataset_destroy(first);
    kiln_dataset_destroy(last);
    kiln_dataset_destroy(all);
    kiln_context_destroy(ctx);
    return test_finish(ps ? "test_nonfinite_mpi_parameter_server" : "test_nonfinite_mpi");
}
