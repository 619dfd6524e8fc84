/* Model parallelism: a model whose parameters, gradients and Adam state
 * (about 54 MB) exceed a per-device budget (50 MiB by default, standing
 * in for a small device) trains on Fashion-MNIST split across two devices
 * as a pipeline of micro-batches:
 *   Input(28,28,1) -> Conv2D(32, 3x3, relu) -> MaxPooling2D(2x2) -> Flatten
 *   -> Dense(256, relu) -> Dense(1024, relu) -> Dense(1024, relu)
 *   -> Dense(10, softmax); Adam(1e-3).
 * kiln splits it by compute cost within the budget and prints the stage
 * plan; the last line is the test accuracy. On a CPU, run it on two PoCL
 * basic devices: POCL_DEVICES="basic basic" ./build/examples/model_parallel
 * Usage: model_parallel [--epochs N] [--batch N] [--micro N] [--schedule gpipe|1f1b]
 *                       [--budget-mib N] [--limit N] [--data DIR] [--save PATH]
 * --save writes the trained model to PATH (kiln_model_save); kiln_model_load
 * (or the kiln tool) reads it back on any number of devices. */
#include "fashion_data.h"
#include "seed_cnn.h"
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct args {
    int epochs, batch, micro;
    kiln_pipeline_schedule schedule;
    double budget_mib;
    long limit;
    const char *data, *save;
} args;

static const char usage[] =
    "usage: model_parallel [--epochs N] [--batch N] [--micro N] [--schedule gpipe|1f1b]\n"
    "                      [--budget-mib N] [--limit N] [--data DIR] [--save PATH]\n"
    "Trains a CNN larger than a per-device budget (--budget-mib, default 50) on\n"
    "Fashion-MNIST as a pipeline of --micro micro-batches across the devices, prints\n"
    "the stage plan and the test accuracy. On a CPU: POCL_DEVICES=\"basic basic\".\n"
    "--save writes the trained model to PATH (kiln_model_save).\n";

/* 1: parsed; 0: a usage error (said on stderr); -1: --help (the usage on
 * stdout). */
static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.epochs = 5, .batch = 64, .micro = 4, .schedule = KILN_PIPELINE_1F1B,
                .budget_mib = 50.0, .data = FASHION_DEFAULT_DIR};
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return fputs(usage, stdout), -1;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s needs a value\n", argv[i]);
            return 0;
        }
        if (strcmp(argv[i], "--epochs") == 0)
            a->epochs = atoi(v);
        else if (strcmp(argv[i], "--batch") == 0)
            a->batch = atoi(v);
        else if (strcmp(argv[i], "--micro") == 0)
            a->micro = atoi(v);
        else if (strcmp(argv[i], "--schedule") == 0 && strcmp(v, "gpipe") == 0)
            a->schedule = KILN_PIPELINE_GPIPE;
        else if (strcmp(argv[i], "--schedule") == 0 && strcmp(v, "1f1b") == 0)
            a->schedule = KILN_PIPELINE_1F1B;
        else if (strcmp(argv[i], "--budget-mib") == 0)
            a->budget_mib = atof(v);
        else if (strcmp(argv[i], "--limit") == 0)
            a->limit = atol(v);
        else if (strcmp(argv[i], "--data") == 0)
            a->data = v;
        else if (strcmp(argv[i], "--save") == 0)
            a->save = v;
        else {
            fprintf(stderr, "unknown option %s %s\n", argv[i], v);
            return 0;
        }
    }
    return 1;
}

static kiln_model *wide_cnn(kiln_context *ctx)
{
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m) != KILN_OK)
        return NULL;
    const kiln_dense_options d256 = {.struct_size = sizeof d256, .units = 256,
                                     .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options d1024 = {.struct_size = sizeof d1024, .units = 1024,
                                      .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 10,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    seed_cnn_stem(m);
    kiln_dense(m, KILN_NODE_PREVIOUS, &d256);
    kiln_dense(m, KILN_NODE_PREVIOUS, &d1024);
    kiln_dense(m, KILN_NODE_PREVIOUS, &d1024);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

static kiln_compile_options options(const args *a, int32_t stages)
{
    /* Static: the options returned point to it. */
    static const kiln_optimizer_options adam = {.struct_size = sizeof adam,
                                                .kind = KILN_OPTIMIZER_ADAM,
                                                .learning_rate = 1e-3f};
    kiln_compile_options o = {.struct_size = sizeof o};
    o.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    o.optimizer = &adam;
    o.strategy = KILN_STRATEGY_PIPELINE;
    o.pipeline_stages = stages;
    o.micro_batches = a->micro;
    o.pipeline_schedule = a->schedule;
    o.device_memory_budget = (uint64_t)(a->budget_mib * 1048576.0);
    return o;
}

static void print_plan(const kiln_model *m)
{
    size_t length = 0;
    kiln_model_stage_plan(m, NULL, 0, &length);
    char *text = malloc(length + 1);
    if (text && kiln_model_stage_plan(m, text, length + 1, NULL) == KILN_OK)
        printf("%s", text);
    free(text);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    args a;
    const int parsed = parse_args(argc, argv, &a);
    if (parsed <= 0)
        return parsed < 0 ? 0 : 2;
    kiln_context_options co = {.struct_size = sizeof co};
    char err[1024] = "";
    co.error_buffer = err;
    co.error_buffer_size = sizeof err;
    co.log_level = KILN_LOG_WARNING;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        return fprintf(stderr, "model_parallel: %s\n", err), 1;

    /* On one device under the budget the model does not fit: compile says so. */
    kiln_model *model = wide_cnn(ctx);
    kiln_compile_options one = options(&a, 1);
    if (model && kiln_model_compile(model, &one) != KILN_OK)
        printf("on one device: %s\n", kiln_context_last_error(ctx));
    kiln_model_destroy(model);

    int rc = 1;
    kiln_dataset *train = NULL, *test = NULL;
    kiln_status st = fashion_load(ctx, FASHION_IDX, a.data, 1, a.limit, &train);
    if (st == KILN_OK)
        st = fashion_load(ctx, FASHION_IDX, a.data, 0, 0, &test);
    model = NULL;
    if (st == KILN_OK && !(model = wide_cnn(ctx)))
        st = KILN_ERROR_OUT_OF_MEMORY;
    kiln_compile_options two = options(&a, 2);
    if (st == KILN_OK)
        st = kiln_model_compile(model, &two);
    int64_t params = 0;
    if (st == KILN_OK && kiln_model_parameter_count(model, &params) == KILN_OK) {
        printf("%lld parameters, split across two devices, global batch %d "
               "(activations are allocated by the first batch):\n", (long long)params, a.batch);
        print_plan(model);
    }
    kiln_fit_options fit = {.struct_size = sizeof fit};
    fit.epochs = a.epochs;
    fit.batch_size = a.batch;
    int64_t n_train = 0;
    double t0 = fashion_seconds(), t1 = t0;
    if (st == KILN_OK) {
        kiln_dataset_count(train, &n_train);
        st = kiln_model_fit(model, train, &fit);
        t1 = fashion_seconds();
    }
    kiln_metrics result = {.struct_size = sizeof result};
    kiln_training_stats stats = {.struct_size = sizeof stats};
    if (st == KILN_OK)
        st = kiln_model_evaluate(model, test, a.batch, &result);
    if (st == KILN_OK && a.save)
        st = kiln_model_save(model, a.save);
    if (st == KILN_OK) {
        printf("after training:\n");
        print_plan(model);
        kiln_model_training_stats(model, &stats);
        printf("training time: %.1f s for %d epochs, %.0f samples/s, pipeline bubble %.0f%%\n",
               t1 - t0, a.epochs, (double)n_train * a.epochs / (t1 - t0),
               100.0 * stats.pipeline_bubble);
        printf("test loss: %.4f\n", result.loss);
        printf("test accuracy: %.4f\n", result.accuracy);
        if (a.save)
            printf("model saved to %s\n", a.save);
        rc = 0;
    } else {
        fprintf(stderr, "model_parallel: %s: %s\n", kiln_status_name(st),
                kiln_context_last_error(ctx));
    }
    kiln_model_destroy(model);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(test);
    kiln_context_destroy(ctx);
    return rc;
}
