/* test_multi_output's model of two outputs under multi_worker, run by
 * test/common/mpi_run.sh as 2 MPI processes with one PoCL basic device each: each
 * process takes its share of every batch, both outputs' labels with it.
 * The weights, evaluate (the total and each output's loss and accuracy),
 * the history's per-output values and predict's packed outputs equal one
 * device's on the same global batches (trained in-process by every rank).
 * Ranks given different loss weights fail compile on every rank. With the
 * argument parameter_server (3 processes): the parameter server with its
 * store on rank 0 (see parameter_server below). */
#include "two_outputs.h"

typedef struct result {
    float *weights;
    int64_t n;
    kiln_metrics eval;
    kiln_epoch_record last;
    float predicted[N * (CLS + REG)];
    int32_t rank;
} result;

/* Two epochs of batch 5 (uneven shards, a last batch of 2). */
static void train(kiln_context *ctx, kiln_dataset *ds, kiln_strategy strategy, const data *d,
                  result *r)
{
    const model_spec s = {.strategy = strategy, .replicas = 1, .weights = {1.0f, 0.5f}};
    kiln_model *m = compiled(ctx, &s);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 5;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    r->eval = (kiln_metrics){.struct_size = sizeof r->eval};
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 4, &r->eval));
    r->last = (kiln_epoch_record){.struct_size = sizeof r->last};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &r->last));
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = N, .features = d->x},
                                     r->predicted, 7));
    CHECK_OK(ctx, kiln_model_rank(m, &r->rank, NULL));
    kiln_model_parameter_count(m, &r->n);
    r->weights = calloc((size_t)r->n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, r->weights, r->n));
    kiln_model_destroy(m);
}

static void check_value(int32_t rank, const char *what, double got, double want)
{
    printf("rank %d: %-28s multi_worker %.7f, one device %.7f\n", (int)rank, what, got, want);
    CHECK(fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want)));
}

/* Ranks whose outputs' loss weights differ would train different models:
 * compile fails on every rank, naming what differs. */
static void test_weights_differ(kiln_context *ctx, int32_t rank)
{
    kiln_node heads[2];
    kiln_model *m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    const kiln_output_loss losses[2] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .weight = rank == 0 ? 0.5f : 0.25f}};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .strategy = KILN_STRATEGY_MULTI_WORKER, .replicas = 1,
                                     .n_outputs = 2, .outputs = losses};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "loss, optimizer and optimizer settings",
                kiln_model_compile(m, &co));
    printf("rank %d: reg's weight %g against the other rank's: %s\n", (int)rank,
           (double)losses[1].weight, kiln_context_last_error(ctx));
    kiln_model_destroy(m);
}

/* The parameter server over MPI (3 processes: the store on rank 0, a
 * worker on each other rank) trains the model of two outputs: every
 * epoch's history names both, and its total is their weighted sum; the
 * weights every rank ends with evaluate to finite per-output losses. Only
 * that: its numbers are not checked against one device, because two
 * asynchronous workers interleave as they will. (A learning rate of 1e-30
 * once gave an epoch loss of 0.765 where the initial weights give 0.221:
 * the store's end-of-epoch gather raced the next epoch's pushes, fixed
 * since and checked by test_parameter_server_mpi_exact.) */
static void parameter_server(kiln_context *ctx, kiln_dataset *ds)
{
    kiln_node heads[2];
    kiln_model *m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    const kiln_output_loss losses[2] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .weight = 1.0f},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .weight = 0.5f}};
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD,
                                              .learning_rate = (float)LR};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .strategy = KILN_STRATEGY_PARAMETER_SERVER,
                               .parameter_store_ranks = 1, .n_outputs = 2, .outputs = losses};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 10;
    fo.batch_size = 2;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    int32_t rank = 0;
    CHECK_OK(ctx, kiln_model_rank(m, &rank, NULL));
    for (int32_t i = 0; i < 10; i++) {
        kiln_epoch_record r = {.struct_size = sizeof r};
        CHECK_OK(ctx, kiln_model_history_epoch(m, i, &r));
        CHECK(r.n_outputs == 2 && strcmp(r.outputs[0].name, "cls") == 0 &&
              strcmp(r.outputs[1].name, "reg") == 0 && r.outputs[0].accuracy >= 0 &&
              r.outputs[1].accuracy < 0 &&
              fabs(r.loss - (r.outputs[0].loss + 0.5 * r.outputs[1].loss)) < 1e-5);
        if (i == 9)
            printf("rank %d: parameter_server over MPI, epoch 10: loss %.4f = cls_loss %.4f + "
                   "0.5 x reg_loss %.4f\n", (int)rank, r.loss, r.outputs[0].loss,
                   r.outputs[1].loss);
    }
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_evaluate(m, ds, 4, &e));
    CHECK(e.n_outputs == 2 && isfinite(e.outputs[0].loss) && isfinite(e.outputs[1].loss));
    kiln_model_destroy(m);
}

int main(int argc, char **argv)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 11};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return 1;
    static data d;
    make_data(&d);
    kiln_dataset *ds = dataset(ctx, &d, 0, N);
    if (argc > 1 && strcmp(argv[1], "parameter_server") == 0) {
        parameter_server(ctx, ds);
        kiln_dataset_destroy(ds);
        kiln_context_destroy(ctx);
        return test_finish("test_multi_output_mpi parameter_server");
    }
    static result one, mw;
    train(ctx, ds, KILN_STRATEGY_ONE_DEVICE, &d, &one);
    train(ctx, ds, KILN_STRATEGY_MULTI_WORKER, &d, &mw);
    const int32_t rank = mw.rank;
    test_close("multi_worker 2 x 1 against one device: weights", 50, mw.weights, one.weights,
               sizeof(float), one.n, TEST_PER_VALUE, 1e-5);
    test_close("multi_worker 2 x 1 against one device: predict", 50, mw.predicted, one.predicted,
               sizeof(float), N * (CLS + REG), TEST_PER_VALUE, 1e-5);
    CHECK(mw.eval.n_outputs == 2 && mw.last.n_outputs == 2 &&
          strcmp(mw.eval.outputs[1].name, "reg") == 0);
    check_value(rank, "evaluate: loss", mw.eval.loss, one.eval.loss);
    check_value(rank, "evaluate: cls_loss", mw.eval.outputs[0].loss, one.eval.outputs[0].loss);
    check_value(rank, "evaluate: cls_accuracy", mw.eval.outputs[0].accuracy,
                one.eval.outputs[0].accuracy);
    check_value(rank, "evaluate: reg_loss", mw.eval.outputs[1].loss, one.eval.outputs[1].loss);
    check_value(rank, "epoch 2: cls_loss", mw.last.outputs[0].loss, one.last.outputs[0].loss);
    check_value(rank, "epoch 2: reg_loss", mw.last.outputs[1].loss, one.last.outputs[1].loss);
    check_value(rank, "epoch 2: loss", mw.last.loss, one.last.loss);
    free(one.weights);
    free(mw.weights);
    test_weights_differ(ctx, rank);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_multi_output_mpi");
}
