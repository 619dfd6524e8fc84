/* A model of three Inputs under multi_worker, run by test/common/mpi_run.sh as 2
 * MPI processes with one PoCL basic device each: each process takes its
 * share of every batch, every input's values with it. The weights,
 * evaluate and predict equal one device's on the same global batches
 * (trained in-process by every rank). An id out of range stops predict
 * on every rank with the same message before any device work. (In fit
 * only the rank whose share holds the sample reads it and stops, naming
 * it; the other's watchdog ends its wait, as for any failed rank, and the
 * job cannot go on: test_multi_worker_faults covers that path.)
 * With the argument parameter_server (3 processes): the parameter server
 * with its store on rank 0 and a worker on each other rank learns the
 * model: the weights every rank ends with (each prints their sum) cut the
 * loss on one device by more than 30%. */
#include "three_inputs.h"

static kiln_model *build(kiln_context *ctx, kiln_strategy strategy, int32_t store_ranks)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    three_inputs(m);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = 0.02f};
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                               .strategy = strategy, .replicas = 1,
                               .parameter_store_ranks = store_ranks};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* Weights after 2 epochs of batch 7 (uneven shards, a last batch of 6);
 * evaluate's loss and predict's outputs on the samples x. */
static float *train(kiln_context *ctx, kiln_dataset *ds, kiln_strategy strategy,
                    const kiln_batch_arrays *x, float *predicted, int64_t *n, double *loss,
                    int32_t *rank)
{
    kiln_model *m = build(ctx, strategy, 0);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 7;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 5, &e));
    *loss = e.loss;
    CHECK_OK(ctx, kiln_model_predict(m, x, predicted, 9));
    CHECK_OK(ctx, kiln_model_rank(m, rank, NULL));
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    kiln_model_destroy(m);
    return w;
}

static double worst_of(const float *a, const float *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; a && b && i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i])));
    return worst;
}

/* The parameter server over MPI: the weights this rank ends with learned. */
static void parameter_server(kiln_context *ctx, kiln_dataset *ds)
{
    kiln_model *before = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    kiln_metrics e0 = {.struct_size = sizeof e0}, e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_evaluate(before, ds, 16, &e0));
    kiln_model_destroy(before);
    kiln_model *m = build(ctx, KILN_STRATEGY_PARAMETER_SERVER, 1);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 3;
    fo.batch_size = 7;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    int64_t n = 0;
    kiln_model_parameter_count(m, &n);
    float *w = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    int32_t rank = 0;
    CHECK_OK(ctx, kiln_model_rank(m, &rank, NULL));
    kiln_model_destroy(m);
    /* Evaluated on one device, from the weights this rank holds. */
    kiln_model *o = build(ctx, KILN_STRATEGY_ONE_DEVICE, 0);
    CHECK_OK(ctx, kiln_model_set_weights(o, w, n));
    CHECK_OK(ctx, kiln_model_evaluate(o, ds, 16, &e));
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += w[i];
    printf("rank %d: parameter_server over MPI: loss %.4f before, %.4f after 3 epochs; weights "
           "sum %.9g\n", (int)rank, e0.loss, e.loss, sum);
    CHECK(e.loss < 0.7 * e0.loss);
    kiln_model_destroy(o);
    free(w);
}

int main(int argc, char **argv)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 7};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return 1;
    static data d;
    make_data(&d);
    kiln_dataset *ds = dataset(ctx, &d, 3);
    static float p1[SAMPLES], pw[SAMPLES];
    kiln_input_array in[3];
    const kiln_batch_arrays inputs = inputs_of(&d, in);   /* reads d as it is when used */
    if (argc > 1 && strcmp(argv[1], "parameter_server") == 0) {
        parameter_server(ctx, ds);
        kiln_dataset_destroy(ds);
        kiln_context_destroy(ctx);
        return test_finish("test_multi_input_mpi parameter_server");
    }
    int64_t n = 0;
    double l1 = 0, lw = 0;
    int32_t rank = 0;
    float *one = train(ctx, ds, KILN_STRATEGY_ONE_DEVICE, &inputs, p1, &n, &l1, &rank);
    float *mw = train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, &inputs, pw, &n, &lw, &rank);
    const double worst = worst_of(mw, one, n), worst_p = worst_of(pw, p1, SAMPLES);
    printf("rank %d: multi_worker 2 x 1 vs one_device: weights %.2e, predictions %.2e, "
           "evaluate %.6f vs %.6f\n", (int)rank, worst, worst_p, lw, l1);
    CHECK(one && mw && worst <= 1e-5 && worst_p <= 1e-5);
    CHECK(fabs(lw - l1) < 1e-5);
    free(one);
    free(mw);
    /* Sample 29's second user id is past the table, on every rank. */
    d.users[29 * 2 + 1] = USERS;
    kiln_model *m = build(ctx, KILN_STRATEGY_MULTI_WORKER, 0);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "kiln_model_predict: sample 29, position 1 of input "
                "'user': id 13 is outside [0, 13)", kiln_model_predict(m, &inputs, pw, 9));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_multi_input_mpi");
}
