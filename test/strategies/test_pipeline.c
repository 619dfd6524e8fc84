/* The pipeline strategy (model parallelism) against one-device training,
 * on three PoCL basic devices (meson sets POCL_DEVICES): two stages with
 * M = 1, 2, 4, 7 micro-batches under GPipe and 1F1B; a functional model
 * whose skip connections cross stage boundaries (and one that crosses a
 * whole stage); the automatic partition against a brute-force optimum and
 * the budgets; activation memory of the two schedules; a model that only
 * fits split; checkpoints across strategies; faults; and the errors. */
#include "fault_layer.h"
#include "test_data.h"
#include "runtime/model/model.h"
#include "runtime/parallel/partition.h"
#include "runtime/parallel/replica.h"

#include <unistd.h>

#define SAMPLES 64
#define SIDE 8
#define TOL 1e-5

static kiln_dataset *data(kiln_context *ctx)
{
    return synthetic_images(ctx, SAMPLES, SIDE, 4242, 5);
}

typedef enum shape_kind { SEQUENTIAL, SKIP_TWO_STAGES, SKIP_THREE_STAGES } shape_kind;

typedef struct run {
    kiln_strategy strategy;
    shape_kind shape;
    int micro;
    kiln_pipeline_schedule schedule;
    int place;           /* place the layers explicitly */
    int32_t stages;      /* automatic partition into this many */
    fault_plan *fault;   /* a fault layer in the stage on the plan's device */
    double timeout;      /* watchdog, seconds (0: default) */
} run;

/* conv, pool, flatten | dense, dense (the cut after flatten), or the
 * functional models: flatten -> h1 -> h2 -> h3, h1 + h3, dense(flatten),
 * summed, head, with h1 and flatten read across the cuts. */
static kiln_model *build(kiln_context *ctx, const run *r, uint64_t budget)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 5,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node in = kiln_input(m, 3, dims, NULL);
    if (r->shape == SEQUENTIAL) {
        kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4, .kernel_size = {3, 3},
                                    .strides = {1, 1}, .padding = KILN_PADDING_SAME,
                                    .activation = KILN_ACTIVATION_RELU};
        kiln_pool2d_options pool = {.struct_size = sizeof pool, .pool_size = {2, 2},
                                    .strides = {2, 2}, .padding = KILN_PADDING_VALID};
        kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 12,
                                     .activation = KILN_ACTIVATION_TANH};
        /* A fault on device 0 goes first in stage 0, one on device 1 after
         * the hidden dense layer in stage 1. */
        const int fault_first = r->fault && r->fault->device == 0;
        kiln_conv2d(m, fault_first ? fault_layer(m, in, r->fault) : in, &conv);
        kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &pool);
        kiln_node f = kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
        kiln_node h = kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
        if (r->fault && !fault_first)
            fault_layer(m, KILN_NODE_PREVIOUS, r->fault);
        kiln_dense(m, KILN_NODE_PREVIOUS, &head);
        if (r->place) {
            kiln_model_place(m, 0, f, 0);
            kiln_model_place(m, h, KILN_NODE_PREVIOUS, 1);
        }
    } else {
        kiln_dense_options d16 = {.struct_size = sizeof d16, .units = 16,
                                  .activation = KILN_ACTIVATION_TANH};
        kiln_node f = kiln_flatten(m, in, NULL);
        kiln_node h1 = kiln_dense(m, f, &d16);
        kiln_node h2 = kiln_dense(m, h1, &d16);
        kiln_node h3 = kiln_dense(m, h2, &d16);
        const kiln_node pair[] = {h1, h3};
        kiln_node a = kiln_add(m, pair, 2, NULL);
        kiln_node g = kiln_dense(m, f, &d16);
        const kiln_node pair2[] = {a, g};
        kiln_add(m, pair2, 2, NULL);
        kiln_dense(m, KILN_NODE_PREVIOUS, &head);
        if (r->place && r->shape == SKIP_TWO_STAGES) {
            kiln_model_place(m, 0, h2, 0);
            kiln_model_place(m, h3, KILN_NODE_PREVIOUS, 1);
        } else if (r->place) {
            kiln_model_place(m, 0, h1, 0);
            kiln_model_place(m, h2, h2, 1);
            kiln_model_place(m, h3, KILN_NODE_PREVIOUS, 2);
        }
    }
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = 0.01f};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.optimizer = &optimizer;
    co.strategy = r->strategy;
    co.micro_batches = r->micro;
    co.pipeline_schedule = r->schedule;
    co.pipeline_stages = r->stages;
    co.device_memory_budget = budget;
    co.step_timeout_seconds = r->timeout;
    kiln_model_compile(m, &co);
    return m;
}

/* batch < 0: -batch as fit's per-replica batch size (batch_size 0). */
static kiln_status train(kiln_model *m, kiln_dataset *ds, int batch)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = batch > 0 ? batch : 0;
    fo.per_replica_batch_size = batch < 0 ? -batch : 0;
    fo.verbosity = KILN_VERBOSE_SILENT;
    return kiln_model_fit(m, ds, &fo);
}

/* Trains 2 epochs at batch 16 (the last batch of each epoch full) and
 * returns the weights (caller frees). */
static float *weights_after(kiln_context *ctx, kiln_dataset *ds, const run *r, int64_t *n)
{
    kiln_model *m = build(ctx, r, 0);
    if (!m->plan.compiled) {
        fprintf(stderr, "compile failed: %s\n", kiln_context_last_error(ctx));
        test_failures++;
        kiln_model_destroy(m);
        return NULL;
    }
    CHECK_OK(ctx, train(m, ds, 15));
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    if (r->strategy == KILN_STRATEGY_PIPELINE) {
        kiln_training_stats s = {.struct_size = sizeof s};
        CHECK_OK(ctx, kiln_model_training_stats(m, &s));
        CHECK(s.pipeline_bubble >= 0 && s.pipeline_bubble < 1);
    }
    kiln_model_destroy(m);
    return w;
}

static void compare(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    test_close(what, 62, a, b, sizeof(float), n, TEST_PER_VALUE, tol);
}

static void test_equivalence(kiln_context *ctx, kiln_dataset *ds)
{
    int64_t n = 0;
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .shape = SEQUENTIAL};
    float *base = weights_after(ctx, ds, &one, &n);
    static const int micro[] = {1, 2, 4, 7};
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < 4; k++) {
            const run r = {.strategy = KILN_STRATEGY_AUTO, .shape = SEQUENTIAL, .micro = micro[k],
                           .schedule = s ? KILN_PIPELINE_1F1B : KILN_PIPELINE_GPIPE, .place = 1};
            float *w = weights_after(ctx, ds, &r, &n);
            char what[128];
            snprintf(what, sizeof what, "2 stages, %s, M = %d (batch 15) vs one_device",
                     s ? "1F1B" : "GPipe", micro[k]);
            compare(what, w, base, n, TOL);
            free(w);
        }
    }
    /* The automatic split of the same model. */
    const run autosplit = {.strategy = KILN_STRATEGY_PIPELINE, .shape = SEQUENTIAL, .micro = 3,
                           .stages = 2};
    float *w = weights_after(ctx, ds, &autosplit, &n);
    compare("2 stages split automatically, 1F1B, M = 3 vs one_device", w, base, n, TOL);
    free(w);
    /* The stages hold one replica between them: a per-replica batch of 15
     * is the global batch of 15 (2 epochs of 5 steps), not 15 x 2 stages. */
    kiln_model *m = build(ctx, &autosplit, 0);
    CHECK_OK(ctx, train(m, ds, -15));
    kiln_training_stats s = {.struct_size = sizeof s};
    CHECK_OK(ctx, kiln_model_training_stats(m, &s));
    CHECK(s.steps == 2 * ((SAMPLES + 14) / 15));
    w = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    compare("2 stages, per-replica batch 15 vs one_device batch 15", w, base, n, TOL);
    free(w);
    kiln_model_destroy(m);
    free(base);

    const run skip_one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .shape = SKIP_TWO_STAGES};
    base = weights_after(ctx, ds, &skip_one, &n);
    const run skip2 = {.strategy = KILN_STRATEGY_AUTO, .shape = SKIP_TWO_STAGES, .micro = 4,
                       .schedule = KILN_PIPELINE_1F1B, .place = 1};
    w = weights_after(ctx, ds, &skip2, &n);
    compare("skip connections across 2 stages, 1F1B, M = 4 vs one_device", w, base, n, TOL);
    free(w);
    const run skip3 = {.strategy = KILN_STRATEGY_AUTO, .shape = SKIP_THREE_STAGES, .micro = 4,
                       .schedule = KILN_PIPELINE_GPIPE, .place = 1};
    w = weights_after(ctx, ds, &skip3, &n);
    compare("a skip across a whole stage, 3 stages, GPipe, M = 4 vs one_device", w, base, n,
            TOL);
    free(w);
    const run skip3b = {.strategy = KILN_STRATEGY_AUTO, .shape = SKIP_THREE_STAGES, .micro = 5,
                        .schedule = KILN_PIPELINE_1F1B, .place = 1};
    w = weights_after(ctx, ds, &skip3b, &n);
    compare("the same, 1F1B, M = 5 vs one_device", w, base, n, TOL);
    free(w);
    free(base);
}

/* Evaluate and predict run through the stages and agree with one device
 * holding the same weights. */
static void test_inference(kiln_context *ctx, kiln_dataset *ds)
{
    const run pipe = {.strategy = KILN_STRATEGY_AUTO, .shape = SKIP_THREE_STAGES, .micro = 3,
                      .schedule = KILN_PIPELINE_1F1B, .place = 1};
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .shape = SKIP_THREE_STAGES};
    kiln_model *a = build(ctx, &pipe, 0), *b = build(ctx, &one, 0);
    CHECK_OK(ctx, train(a, ds, 16));
    int64_t n = 0;
    kiln_model_parameter_count(a, &n);
    float *w = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(a, w, n));
    CHECK_OK(ctx, kiln_model_set_weights(b, w, n));
    kiln_metrics ma = {.struct_size = sizeof ma}, mb = {.struct_size = sizeof mb};
    CHECK_OK(ctx, kiln_model_evaluate(a, ds, 10, &ma));
    CHECK_OK(ctx, kiln_model_evaluate(b, ds, 10, &mb));
    CHECK(fabs(ma.loss - mb.loss) < 1e-5 && ma.accuracy == mb.accuracy);
    static float x[5 * SIDE * SIDE], ya[5 * 5], yb[5 * 5];
    for (int i = 0; i < 5 * SIDE * SIDE; i++)
        x[i] = (float)(i % 7) / 7.0f;
    CHECK_OK(ctx, kiln_model_predict(a, &(kiln_batch_arrays){.count = 5, .features = x}, ya, 4));
    CHECK_OK(ctx, kiln_model_predict(b, &(kiln_batch_arrays){.count = 5, .features = x}, yb, 4));
    for (int i = 0; i < 25; i++)
        CHECK(fabs(ya[i] - yb[i]) < 1e-6);
    free(w);

    /* A checkpoint (weights and Adam state) written by the pipeline loads on
     * one device, and both continue alike. */
    char path[] = "/tmp/kiln_pipeline_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK_OK(ctx, kiln_model_save_checkpoint(a, path));
    CHECK_OK(ctx, kiln_model_load_checkpoint(b, path));
    remove(path);
    CHECK_OK(ctx, train(a, ds, 16));
    CHECK_OK(ctx, train(b, ds, 16));
    float *wa = calloc((size_t)n, sizeof(float)), *wb = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    CHECK_OK(ctx, kiln_model_get_weights(b, wb, n));
    compare("pipeline checkpoint resumed on one device, 2 more epochs", wb, wa, n, TOL);
    free(wa);
    free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

/* The automatic partition: every layer in one stage, contiguous, within
 * budget, and with the least maximal stage cost any contiguous split has. */
static void test_partition(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {24};
    static const int32_t units[] = {40, 8, 64, 32, 16, 48, 4};
    kiln_input(m, 1, dims, NULL);
    for (int i = 0; i < 7; i++) {
        kiln_dense_options d = {.struct_size = sizeof d, .units = units[i],
                                .activation = KILN_ACTIVATION_RELU};
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    }
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_MEAN_SQUARED_ERROR;
    co.strategy = KILN_STRATEGY_PIPELINE;
    co.pipeline_stages = 2;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    uint64_t total = 0, largest = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        total += kiln_node_cost(m, i);
        largest = kiln_node_cost(m, i) > largest ? kiln_node_cost(m, i) : largest;
    }
    for (int32_t S = 1; S <= 3; S++) {
        for (int tight = 0; tight < 2; tight++) {
            m->placement.pipeline_stages = S;
            /* Tight: a budget just above the largest layer's state. */
            uint64_t big = 0;
            for (kiln_node i = 0; i < m->graph.n_nodes; i++)
                big = kiln_span_state_bytes(m, i, i, 1) > big ? kiln_span_state_bytes(m, i, i, 1)
                                                              : big;
            m->placement.memory_budget = tight ? big + big / 2 : 0;
            kiln_stage_plan *plan = NULL;
            int32_t n = 0;
            kiln_status st = kiln_partition(m, 1, &plan, &n);
            if (tight && S < 3) {
                CHECK(st == KILN_ERROR_OUT_OF_MEMORY);  /* 7 layers need 3 such devices */
                kiln_free(ctx, plan);
                continue;
            }
            CHECK_OK(ctx, st);
            if (st != KILN_OK)
                continue;
            CHECK(n == S);
            uint64_t worst = 0;
            for (int32_t k = 0; k < n; k++) {
                CHECK(plan[k].span.first == (k == 0 ? 0 : plan[k - 1].span.last + 1));
                CHECK(plan[k].span.first <= plan[k].span.last);
                CHECK(plan[k].state_bytes <= plan[k].budget);
                worst = plan[k].cost > worst ? plan[k].cost : worst;
            }
            CHECK(plan[n - 1].span.last == m->graph.n_nodes - 1);
            /* Brute force over every cut of the 7 layers into S parts that fit. */
            uint64_t optimum = UINT64_MAX;
            for (int a = 2; a <= 8; a++) {
                for (int b = a; b <= 8; b++) {
                    int cuts[4] = {0, S > 1 ? a : 8, S > 2 ? b : 8, 8}, ok = 1;
                    uint64_t w = 0;
                    if ((S == 2 && (b != a || a == 8)) || (S == 3 && (b == a || b == 8)) ||
                        (S == 1 && (a != 8 || b != 8)))
                        continue;
                    for (int k = 0; k < S; k++) {
                        const int lo = cuts[k], hi = k == S - 1 ? 8 : cuts[k + 1];
                        uint64_t c = 0;
                        for (int x = lo; x < hi; x++)
                            c += kiln_node_cost(m, x);
                        ok &=
                            kiln_span_state_bytes(m, lo, hi - 1, 1) <=
                            (m->placement.memory_budget ? m->placement.memory_budget : UINT64_MAX);
                        w = c > w ? c : w;
                    }
                    if (ok && w < optimum)
                        optimum = w;
                }
            }
            printf("partition into %d stage(s)%s: max stage cost %llu, optimum %llu, mean %llu\n",
                   (int)S, tight ? " under a tight budget" : "", (unsigned long long)worst,
                   (unsigned long long)optimum, (unsigned long long)(total / (uint64_t)S));
            CHECK(worst == optimum);
            if (!tight)
                CHECK(worst <= total / (uint64_t)S + largest);
            kiln_free(ctx, plan);
        }
    }
    kiln_model_destroy(m);
}

/* GPipe keeps M activation sets per stage, 1F1B at most S - s; a model too
 * big for one device under a budget trains split in two. */
static void test_memory(kiln_context *ctx, kiln_dataset *ds)
{
    uint64_t act[2][2];
    for (int s = 0; s < 2; s++) {
        const run r = {.strategy = KILN_STRATEGY_AUTO, .shape = SEQUENTIAL, .micro = 4,
                       .schedule = s ? KILN_PIPELINE_1F1B : KILN_PIPELINE_GPIPE, .place = 1};
        kiln_model *m = build(ctx, &r, 0);
        CHECK_OK(ctx, train(m, ds, 16));
        for (int k = 0; k < 2; k++) {
            kiln_memory_report mem = {.struct_size = sizeof mem};
            CHECK_OK(ctx, kiln_model_memory(m, k, &mem));
            CHECK(mem.device == k && mem.batch_capacity == 4);
            act[s][k] = mem.activation_bytes;
        }
        char plan[2048];
        CHECK_OK(ctx, kiln_model_stage_plan(m, plan, sizeof plan, NULL));
        CHECK(strstr(plan, "stage 1 on device 1") != NULL);
        if (s)
            printf("%s", plan);
        kiln_model_destroy(m);
    }
    printf("activation bytes per stage, M = 4: GPipe %llu, %llu; 1F1B %llu, %llu\n",
           (unsigned long long)act[0][0], (unsigned long long)act[0][1],
           (unsigned long long)act[1][0], (unsigned long long)act[1][1]);
    CHECK(act[0][0] == 2 * act[1][0]);   /* 4 sets against 2 */
    CHECK(act[0][1] == 4 * act[1][1]);   /* 4 against 1 */

    /* The skip model's state is about 4/3 of a stage's share: a budget of
     * 75% of the whole fits no single device but fits two. */
    const run whole = {.strategy = KILN_STRATEGY_PIPELINE, .shape = SKIP_TWO_STAGES, .micro = 2,
                       .stages = 1};
    kiln_model *probe = build(ctx, &whole, 0);
    const uint64_t need = kiln_span_state_bytes(probe, 0, probe->graph.n_nodes - 1, 1);
    kiln_model_destroy(probe);
    const uint64_t budget = need * 3 / 4;
    kiln_model *m = build(ctx, &whole, budget);
    CHECK(!m->plan.compiled && strstr(kiln_context_last_error(ctx), "bytes") != NULL);
    printf("one stage under a %llu-byte budget: %s\n", (unsigned long long)budget,
           kiln_context_last_error(ctx));
    kiln_model_destroy(m);
    /* One sample per micro-batch keeps the activations small. */
    const run two = {.strategy = KILN_STRATEGY_PIPELINE, .shape = SKIP_TWO_STAGES, .micro = 8,
                     .stages = 2};
    m = build(ctx, &two, budget);
    CHECK(m->plan.compiled);
    if (m->plan.compiled)
        CHECK_OK(ctx, train(m, ds, 8));
    kiln_model_destroy(m);
}

/* Input, Flatten and `dense` Dense(8) layers: the errors' model. */
static kiln_model *flat_model(kiln_context *ctx, int dense)
{
    kiln_model *m = NULL;
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_dense_options d = {.struct_size = sizeof d, .units = 8,
                            .activation = KILN_ACTIVATION_RELU};
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_input(m, 3, dims, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    for (int i = 0; i < dense; i++)
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    return m;
}

static void test_errors(kiln_context *ctx, kiln_dataset *ds)
{
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;

    /* A device the context lacks: refused at once, and again by compile. */
    kiln_model *m = flat_model(ctx, 1);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "placed on device 7",
                kiln_model_place(m, 1, 2, 7));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "not a range", kiln_model_place(m, 2, 1, 0));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "placed on device 7",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* More stages than layers, or than devices. */
    co.strategy = KILN_STRATEGY_PIPELINE;
    co.pipeline_stages = 3;
    m = flat_model(ctx, 1);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "only 2 layer(s)", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    co.pipeline_stages = 4;
    m = flat_model(ctx, 1);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "the context has 3",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    co.pipeline_stages = 0;

    /* A device's layers split in two ranges; a stage holding only the input. */
    m = flat_model(ctx, 2);
    kiln_model_place(m, 0, 1, 0);
    kiln_model_place(m, 2, 2, 1);
    kiln_model_place(m, 3, 3, 0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "one contiguous range",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    m = flat_model(ctx, 0);
    kiln_model_place(m, 0, 0, 0);
    kiln_model_place(m, 1, 1, 1);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "only the input", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* A budget nothing fits: compile names the layer, the bytes and the device. */
    m = flat_model(ctx, 1);
    co.device_memory_budget = 1024;
    co.pipeline_stages = 1;
    CHECK_FAILS(ctx, KILN_ERROR_OUT_OF_MEMORY, "layer 'dense' alone needs",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* Parameters fit but the activations of a large batch do not: fit fails
     * before the first step, saying what to change. */
    m = flat_model(ctx, 1);
    co.device_memory_budget = 16 * 1024;
    co.pipeline_stages = 2;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = 64;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_FAILS(ctx, KILN_ERROR_OUT_OF_MEMORY, "micro-batches", kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(m);

    /* Bad options. */
    m = flat_model(ctx, 1);
    co.device_memory_budget = 0;
    co.micro_batches = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "micro_batches", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    m = flat_model(ctx, 1);
    co.micro_batches = 0;
    co.pipeline_stages = 0;
    co.strategy = KILN_STRATEGY_ONE_DEVICE;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    size_t length = 99;
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "not compiled with the pipeline",
                kiln_model_stage_plan(m, NULL, 0, &length));
    CHECK(length == 0);   /* out-pointers are zeroed on failure */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_stage_plan: text is NULL but size "
                "is 8", kiln_model_stage_plan(m, NULL, 8, &length));
    kiln_model_destroy(m);
}

/* A stage that fails, and one that stalls past the watchdog: errors naming
 * the stage, device and layer; the other stage gives up; nothing hangs. */
static void test_faults(kiln_context *ctx, kiln_dataset *ds)
{
    /* stage 1, after the hidden dense layer, backward, step 2 */
    fault_plan fail = {.armed = 1, .device = 1, .backward = 1, .step = 2};
    run r = {.strategy = KILN_STRATEGY_AUTO, .shape = SEQUENTIAL, .micro = 4,
             .schedule = KILN_PIPELINE_1F1B, .place = 1, .fault = &fail};
    kiln_model *m = build(ctx, &r, 0);
    CHECK_FAILS(ctx, KILN_ERROR_DEVICE, "pipeline stage 1 on device 1", train(m, ds, 16));
    CHECK(strstr(kiln_context_last_error(ctx), "layer 'fault' (backward)") != NULL);
    printf("failure: %s\n", kiln_context_last_error(ctx));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "failed earlier", train(m, ds, 16));
    kiln_model_destroy(m);

    /* stage 0, before the convolution, forward, step 1; the 0.5 s watchdog
     * gives up well before the stall's 3 s bound */
    fault_plan stall = {.armed = 1, .device = 0, .step = 1, .stall_seconds = 3.0};
    r.fault = &stall;
    r.timeout = 0.5;
    m = build(ctx, &r, 0);
    const double t0 = kiln_now();
    CHECK_FAILS(ctx, KILN_ERROR_TIMEOUT, "pipeline stage 0 on device 0", train(m, ds, 16));
    CHECK(strstr(kiln_context_last_error(ctx), "layer 'fault' (forward) did not finish") !=
          NULL);
    printf("stall: %s (after %.2f s)\n", kiln_context_last_error(ctx), kiln_now() - t0);
    CHECK(kiln_now() - t0 < 5.0);
    kiln_flag_raise(&stall.released);
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        return 1;
    test_require_devices(ctx, 3, "the pipeline tests");
    kiln_dataset *ds = data(ctx);
    test_partition(ctx);
    test_errors(ctx, ds);
    test_equivalence(ctx, ds);
    test_inference(ctx, ds);
    test_memory(ctx, ds);
    test_faults(ctx, ds);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_pipeline");
}
