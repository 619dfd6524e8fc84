/* The data-parallel strategies against one-device training: mirrored and
 * central storage on two devices (meson runs this with POCL_DEVICES="basic
 * basic"), uneven and empty shards, gradient accumulation, learning-rate
 * schedules, fit's per-replica batch size, and the faults: a replica that
 * fails and one that stalls. What
 * needs two devices is skipped, with the reason printed, on one. */
#include "counting_alloc.h"
#include "fault_layer.h"
#include "test_data.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/parallel/replica.h"


#define SAMPLES 64
#define SIDE 8
#define TOL 1e-5

static kiln_context *context(counter *c)
{
    kiln_context_options o = {.struct_size = sizeof o};
    o.seed = 99;
    o.realloc_fn = c ? counting_realloc : NULL;
    o.realloc_user = c;
    kiln_context *ctx = NULL;
    kiln_context_create(&o, &ctx);
    return ctx;
}

static kiln_dataset *data(kiln_context *ctx)
{
    return synthetic_images(ctx, SAMPLES, SIDE, 12345, 5);
}

typedef struct run {
    kiln_strategy strategy;
    int replicas, accumulation, batch, epochs;
    kiln_optimizer_kind optimizer;
    int bn;   /* BN_*: batch normalisation after the convolution */
    int per_replica;   /* > 0: fit's per_replica_batch_size, batch_size 0 */
} run;

enum { BN_NONE, BN_PER_REPLICA, BN_SYNCHRONIZED };

static kiln_model *build(kiln_context *ctx, const run *r, fault_plan *fault,
                         double timeout)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4, .kernel_size = {3, 3},
                                .strides = {1, 1}, .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_RELU};
    kiln_pool2d_options pool = {.struct_size = sizeof pool, .pool_size = {2, 2}, .strides = {2, 2},
                                .padding = KILN_PADDING_VALID};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 12,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 5,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    if (r->bn) {
        kiln_batch_norm_options bn = {.struct_size = sizeof bn, .momentum = 0.9f,
                                      .synchronized = r->bn == BN_SYNCHRONIZED,
                                      .activation = KILN_ACTIVATION_RELU};
        /* No bias before batch norm (it cancels out: its gradient is rounding
         * noise, which Adam would turn into full-size steps). */
        conv.activation = KILN_ACTIVATION_LINEAR;
        conv.no_bias = 1;
        kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
        kiln_batch_normalization(m, KILN_NODE_PREVIOUS, &bn);
    } else {
        kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    }
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &pool);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    if (fault)
        fault_layer(m, KILN_NODE_PREVIOUS, fault);
    /* Dropout masks follow the sample, not the replica holding it. */
    if (r->bn == BN_SYNCHRONIZED)
        kiln_dropout(m, KILN_NODE_PREVIOUS, &(kiln_dropout_options){.rate = 0.25f, .seed = 3});
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer, .kind = r->optimizer,
                                              .learning_rate = 0.01f};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.optimizer = &optimizer;
    co.strategy = r->strategy;
    co.replicas = r->replicas;
    co.gradient_accumulation_steps = r->accumulation;
    co.step_timeout_seconds = timeout;
    co.bucket_bytes = 64;   /* several buckets even for this small model */
    co.first_bucket_bytes = 64;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_status train(kiln_model *m, kiln_dataset *ds, const run *r)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = r->epochs;
    fo.batch_size = r->per_replica ? 0 : r->batch;
    fo.per_replica_batch_size = r->per_replica;
    fo.verbosity = KILN_VERBOSE_SILENT;
    return kiln_model_fit(m, ds, &fo);
}

/* The time breakdown counts every step, and reductions exactly where
 * replicas exchange gradients: once per optimizer update. */
static void check_stats(kiln_model *m, kiln_dataset *ds, const run *r)
{
    kiln_training_stats s = {.struct_size = sizeof s};
    CHECK_OK(m->ctx, kiln_model_training_stats(m, &s));
    int64_t count = 0;
    kiln_dataset_count(ds, &count);
    const int64_t steps = r->epochs * ((count + r->batch - 1) / r->batch);
    const int exchanges = m->placement.strategy != &kiln_strategy_one_device;
    CHECK(s.steps == steps);
    CHECK(s.step_seconds > 0 && s.input_seconds >= 0);
    CHECK(s.reductions == (exchanges ? steps / (r->accumulation > 1 ? r->accumulation : 1) : 0));
    CHECK(s.reduce_hidden_seconds <= s.reduce_seconds + 1e-9);
    kiln_training_stats small = {.struct_size = sizeof s - 1};
    CHECK(kiln_model_training_stats(m, &small) == KILN_ERROR_INVALID_ARGUMENT);

    /* Every replica holds its own copy of everything. */
    const int32_t n = m->placement.strategy->replica_count(m->placement.strategy_impl);
    const uint64_t flat = (uint64_t)m->plan.n_param_floats * sizeof(float);
    for (int32_t k = 0; k < n; k++) {
        kiln_memory_report mem;
        memset(&mem, 0, sizeof mem);
        mem.struct_size = sizeof mem;
        CHECK_OK(m->ctx, kiln_model_memory(m, k, &mem));
        CHECK(mem.device >= 0 && mem.device < m->ctx->n_devices);
        CHECK(mem.parameter_bytes == flat);
        /* Gradients for what backward writes, at least the trainable prefix
         * (frozen weights need none), accumulated for the trainable prefix;
         * a slot holds the trainable prefix (the moving average all). */
        const uint64_t trainable = (uint64_t)m->plan.n_trainable_floats * sizeof(float);
        const kiln_replica *rk = m->placement.strategy->replica(m->placement.strategy_impl, k);
        CHECK(rk->n_grad_floats >= m->plan.n_trainable_floats &&
              rk->n_grad_floats <= rk->n_floats);
        CHECK(mem.gradient_bytes ==
              rk->n_grad_floats * sizeof(float) + (r->accumulation > 1 ? trainable : 0));
        const int ema = m->plan.optimizer.use_ema != 0;
        CHECK(mem.optimizer_bytes ==
              trainable * (uint64_t)(kiln_optimizer_slot_count(&m->plan.optimizer) - ema) +
              flat * (uint64_t)ema);
        CHECK(mem.batch_capacity > 0 && mem.batch_capacity <= r->batch);
        CHECK(mem.activation_bytes > 0 && mem.workspace_bytes > 0);
        const uint64_t sum = mem.parameter_bytes + mem.gradient_bytes + mem.optimizer_bytes +
                             mem.activation_bytes + mem.workspace_bytes;
        CHECK(mem.device_bytes >= sum && mem.device_peak_bytes >= mem.device_bytes);
    }
    kiln_memory_report bad;
    memset(&bad, 0, sizeof bad);
    bad.struct_size = sizeof bad;
    CHECK_FAILS(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "replica", kiln_model_memory(m, n, &bad));
}

/* Trains and returns the weights (caller frees), NULL on failure. */
static float *weights_after(kiln_context *ctx, kiln_dataset *ds, const run *r, int64_t *n)
{
    kiln_model *m = build(ctx, r, NULL, 0);
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return NULL;
    }
    CHECK_OK(ctx, train(m, ds, r));
    check_stats(m, ds, r);
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    /* Replicas hold bit-identical trainable parameters (their own moving
     * statistics are averaged before the next job reads them). */
    for (int32_t k = 1; k < m->placement.strategy->replica_count(m->placement.strategy_impl); k++) {
        kiln_replica *a = m->placement.strategy->replica(m->placement.strategy_impl, 0);
        kiln_replica *b = m->placement.strategy->replica(m->placement.strategy_impl, k);
        float *pa = calloc(m->plan.n_param_floats, sizeof(float));
        float *pb = calloc(m->plan.n_param_floats, sizeof(float));
        kiln_replica_read_params(a, pa);
        kiln_replica_read_params(b, pb);
        if (r->strategy == KILN_STRATEGY_MIRRORED &&
            memcmp(pa, pb, m->plan.n_trainable_floats * 4)) {
            fprintf(stderr, "replica %d differs from replica 0\n", (int)k);
            test_failures++;
        }
        free(pa);
        free(pb);
    }
    kiln_model_destroy(m);
    return w;
}

/* Largest |a - b| / max(1, |b|) over the parameters. */
static double compare(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    int64_t at = 0;
    const double worst = test_difference(a, b, sizeof(float), n, TEST_PER_VALUE, &at);
    printf("%-58s max relative difference %.2e\n", what, worst);
    if (!a || !b || !(worst <= tol)) {
        fprintf(stderr, "%s: %.3g exceeds %.1g (weight %lld)\n", what, worst, tol, (long long)at);
        test_failures++;
    }
    return worst;
}

static void test_equivalence(kiln_context *ctx, kiln_dataset *ds, int devices)
{
    int64_t n = 0;
    /* Batch 7 splits 4 + 3; the last batch of 64 has 1 sample: 1 + 0. */
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 1, .batch = 7,
                     .epochs = 2, .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_NONE};
    float *base = weights_after(ctx, ds, &one, &n);
    run r = one;
    r.strategy = KILN_STRATEGY_MIRRORED;
    r.replicas = 1;
    float *w = weights_after(ctx, ds, &r, &n);
    compare("mirrored, 1 replica == one_device (bit for bit)", w, base, n, 0.0);
    free(w);
    r.strategy = KILN_STRATEGY_CENTRAL_STORAGE;
    w = weights_after(ctx, ds, &r, &n);
    compare("central_storage, 1 replica vs one_device", w, base, n, TOL);
    free(w);
    if (test_has_devices(devices, 2, "mirrored and central_storage on 2 devices")) {
        r.replicas = 2;
        r.strategy = KILN_STRATEGY_MIRRORED;
        w = weights_after(ctx, ds, &r, &n);
        compare("mirrored, 2 replicas, uneven and empty shards vs one_device", w, base, n, TOL);
        free(w);
        r.strategy = KILN_STRATEGY_CENTRAL_STORAGE;
        w = weights_after(ctx, ds, &r, &n);
        compare("central_storage, 2 replicas vs one_device", w, base, n, TOL);
        free(w);
        r = one;
        r.optimizer = KILN_OPTIMIZER_SGD;
        float *sgd = weights_after(ctx, ds, &r, &n);
        r.strategy = KILN_STRATEGY_MIRRORED;
        r.replicas = 2;
        w = weights_after(ctx, ds, &r, &n);
        compare("mirrored, 2 replicas, SGD vs one_device", w, sgd, n, TOL);
        free(w);
        free(sgd);
    }
    free(base);

    /* Accumulating 2 micro-batches of 8 equals one batch of 16. */
    const run big = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 1, .batch = 16,
                     .epochs = 1, .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_NONE};
    float *whole = weights_after(ctx, ds, &big, &n);
    run acc = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 2, .batch = 8, .epochs = 1,
               .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_NONE};
    w = weights_after(ctx, ds, &acc, &n);
    compare("one_device, 2 x 8 accumulated vs batch 16", w, whole, n, TOL);
    free(w);
    if (devices >= 2) {
        acc.strategy = KILN_STRATEGY_MIRRORED;
        acc.replicas = 2;
        w = weights_after(ctx, ds, &acc, &n);
        compare("mirrored, 2 replicas, 2 x 8 accumulated vs batch 16", w, whole, n, TOL);
        free(w);
    }
    free(whole);
}

/* fit's per_replica_batch_size (TensorFlow's rule: the global batch is it
 * times the replicas) against one device trained on that global batch; the
 * step count (check_stats, from run.batch = the expected global batch) tells
 * which batch really ran. Then the bad values, which train nothing. */
static void test_per_replica_batch(kiln_context *ctx, kiln_dataset *ds, int devices)
{
    int64_t n = 0;
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 1, .batch = 8,
                     .epochs = 1, .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_NONE};
    float *base = weights_after(ctx, ds, &one, &n);
    run r = one;
    r.per_replica = 8;
    float *w = weights_after(ctx, ds, &r, &n);
    compare("one_device, per-replica batch 8 == batch 8 (bit for bit)", w, base, n, 0.0);
    free(w);
    if (test_has_devices(devices, 2, "per-replica batches on 2 replicas")) {
        static const kiln_strategy both[] = {KILN_STRATEGY_MIRRORED,
                                             KILN_STRATEGY_CENTRAL_STORAGE};
        for (int k = 0; k < 2; k++) {
            r.strategy = both[k];
            r.replicas = 2;
            r.per_replica = 4;   /* global 8 */
            w = weights_after(ctx, ds, &r, &n);
            compare(k ? "central_storage, 2 replicas x per-replica 4 vs batch 8"
                      : "mirrored, 2 replicas x per-replica 4 vs batch 8", w, base, n, TOL);
            free(w);
        }
    }
    free(base);

    run bad = one;
    bad.strategy = KILN_STRATEGY_MIRRORED;
    bad.replicas = devices < 2 ? 1 : 2;
    kiln_model *m = build(ctx, &bad, NULL, 0);
    float *before = calloc((size_t)n, sizeof(float));
    float *after = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, before, n));
    kiln_fit_options fo = {.struct_size = sizeof fo, .verbosity = KILN_VERBOSE_SILENT};
    fo.batch_size = 32;
    fo.per_replica_batch_size = 5;   /* 5 or 10 a step: disagrees */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "set batch_size to 0",
                kiln_model_fit(m, ds, &fo));
    fo.batch_size = 0;
    fo.per_replica_batch_size = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "per_replica_batch_size is -1",
                kiln_model_fit(m, ds, &fo));
    if (bad.replicas == 2) {
        fo.per_replica_batch_size = INT32_MAX / 2 + 1;   /* twice that overflows int32 */
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "per_replica_batch_size",
                    kiln_model_fit(m, ds, &fo));
    }
    CHECK_OK(ctx, kiln_model_get_weights(m, after, n));
    CHECK(memcmp(before, after, (size_t)n * sizeof(float)) == 0);
    /* Agreeing values train; a caller built before the field never sets it
     * (its struct_size stops short), so what lies there is not read. */
    fo.per_replica_batch_size = 4;
    fo.batch_size = 4 * bad.replicas;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_training_stats s = {.struct_size = sizeof s};
    CHECK_OK(ctx, kiln_model_training_stats(m, &s));
    CHECK(s.steps == SAMPLES / (4 * bad.replicas));
    fo.struct_size = offsetof(kiln_fit_options, per_replica_batch_size);
    fo.batch_size = 32;
    fo.per_replica_batch_size = -7;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_training_stats(m, &s));
    CHECK(s.steps == SAMPLES / (4 * bad.replicas) + SAMPLES / 32);
    free(before);
    free(after);
    kiln_model_destroy(m);
}

/* Batch normalisation under the strategies. Synchronised on 2 replicas it
 * is one-device batch norm on the global batch (moving statistics too).
 * Per replica, each half batch has its own statistics: the trainable
 * weights equal one device accumulating the two halves as micro-batches,
 * whose moving statistics (updated twice in a row, not averaged) differ. */
static void test_batch_norm(kiln_context *ctx, kiln_dataset *ds, int devices)
{
    int64_t n = 0;
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 1, .batch = 7,
                     .epochs = 2, .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_SYNCHRONIZED};
    float *base = weights_after(ctx, ds, &one, &n);
    if (!test_has_devices(devices, 2, "batch norm across 2 replicas")) {
        free(base);
        return;
    }
    run r = one;
    r.strategy = KILN_STRATEGY_MIRRORED;
    r.replicas = 2;
    float *w = weights_after(ctx, ds, &r, &n);
    compare("mirrored, synchronised batch norm and dropout vs one_device", w, base, n, TOL);
    free(w);
    free(base);

    const run halves = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 2, .batch = 4,
                        .epochs = 2, .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_PER_REPLICA};
    base = weights_after(ctx, ds, &halves, &n);
    const run mirrored = {.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2, .accumulation = 1,
                          .batch = 8, .epochs = 2, .optimizer = KILN_OPTIMIZER_ADAM,
                          .bn = BN_PER_REPLICA};
    w = weights_after(ctx, ds, &mirrored, &n);
    float *central = NULL;
    run c = mirrored;
    c.strategy = KILN_STRATEGY_CENTRAL_STORAGE;
    central = weights_after(ctx, ds, &c, &n);
    compare("central_storage vs mirrored, per-replica batch norm", central, w, n, TOL);
    /* Packed weights: conv kernel 36, gamma 4, beta 4, then the moving mean
     * and variance (8) that legitimately differ. */
    for (int i = 44; i < 52 && w && base; i++)
        w[i] = base[i];
    compare("mirrored, per-replica batch norm vs one_device 2 x 4 accumulated", w, base, n,
            TOL);
    free(w);
    free(central);
    free(base);
}

/* Evaluate and predict use the moving statistics: a sample's output does
 * not depend on the batch around it. */
static void test_inference_statistics(kiln_context *ctx, kiln_dataset *ds)
{
    const run r = {.strategy = KILN_STRATEGY_ONE_DEVICE, .accumulation = 1, .batch = 8, .epochs = 1,
                   .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_PER_REPLICA};
    kiln_model *m = build(ctx, &r, NULL, 0);
    CHECK_OK(ctx, train(m, ds, &r));
    float x[5 * SIDE * SIDE], one[5], five[25];
    for (int i = 0; i < 5 * SIDE * SIDE; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f;
    CHECK_OK(ctx,
             kiln_model_predict(
                 m, &(kiln_batch_arrays){.count = 1, .features = x + 3 * SIDE * SIDE}, one, 1));
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = 5, .features = x}, five, 5));
    compare("batch norm at inference: sample alone vs in a batch of 5", one, five + 15, 5, 1e-6);
    kiln_model_destroy(m);
}

static void test_schedules(kiln_context *ctx)
{
    kiln_lr_schedule s = {.struct_size = sizeof s};
    kiln_optimizer_options o = {.struct_size = sizeof o};
    o.learning_rate = 0.1f;
    CHECK(fabs(test_learning_rate(ctx, &o, 1000) - 0.1f) < 1e-9);
    o.schedule = &s;
    CHECK(fabs(test_learning_rate(ctx, &o, 1000) - 0.1f) < 1e-9);
    s.kind = KILN_LR_STEP_DECAY;
    s.decay_steps = 10;
    s.decay_rate = 0.5f;
    CHECK(fabs(test_learning_rate(ctx, &o, 9) - 0.1) < 1e-7);
    CHECK(fabs(test_learning_rate(ctx, &o, 25) - 0.025) < 1e-7);
    s.kind = KILN_LR_EXPONENTIAL_DECAY;
    CHECK(fabs(test_learning_rate(ctx, &o, 5) - 0.1 * pow(0.5, 0.5)) < 1e-7);
    s.kind = KILN_LR_COSINE_DECAY;
    s.decay_steps = 100;
    s.alpha = 0.1f;
    s.warmup_steps = 10;
    CHECK(fabs(test_learning_rate(ctx, &o, 0)) < 1e-9);
    CHECK(fabs(test_learning_rate(ctx, &o, 5) - 0.05) < 1e-7);
    CHECK(fabs(test_learning_rate(ctx, &o, 10) - 0.1) < 1e-7);
    CHECK(fabs(test_learning_rate(ctx, &o, 60) - 0.1 * (0.9 * 0.5 + 0.1)) < 1e-7);
    CHECK(fabs(test_learning_rate(ctx, &o, 500) - 0.01) < 1e-7);
    s.decay_steps = 0;
    double rate = 1.0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "schedule: decay_steps 0 must be > 0",
                kiln_learning_rate_at(ctx, &o, 3, &rate));
    CHECK(rate == 0.0);
}

static void test_faults(int devices)
{
    if (!test_has_devices(devices, 2, "replica faults"))
        return;
    counter c = {0};
    kiln_context *ctx = context(&c);
    kiln_dataset *ds = data(ctx);
    const run r = {.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2, .accumulation = 1, .batch = 8,
                   .epochs = 1, .optimizer = KILN_OPTIMIZER_ADAM, .bn = BN_NONE};

    /* Replica 1 fails in the backward of the fault layer after its hidden
     * dense layer at step 2. */
    fault_plan fail = {.armed = 1, .device = 1, .backward = 1, .step = 2};
    kiln_model *m = build(ctx, &r, &fail, 0);
    CHECK_FAILS(ctx, KILN_ERROR_DEVICE, "replica 1 on device 1", train(m, ds, &r));
    CHECK(strstr(kiln_context_last_error(ctx), "layer 'fault' (backward)") != NULL);
    printf("failure: %s\n", kiln_context_last_error(ctx));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "failed earlier", train(m, ds, &r));
    kiln_model_destroy(m);

    /* Replica 0 stalls in the forward of the fault layer at step 1: the
     * watchdog (0.5 s) gives up on it well before the stall's 3 s bound. */
    fault_plan stall = {.armed = 1, .device = 0, .step = 1, .stall_seconds = 3.0};
    m = build(ctx, &r, &stall, 0.5);
    const double t0 = kiln_now();
    CHECK_FAILS(ctx, KILN_ERROR_TIMEOUT, "replica 0 on device 0", train(m, ds, &r));
    const double waited = kiln_now() - t0;
    CHECK(strstr(kiln_context_last_error(ctx), "layer 'fault' (forward) did not finish") != NULL);
    printf("stall: %s (after %.2f s)\n", kiln_context_last_error(ctx), waited);
    CHECK(waited < 5.0);
    kiln_flag_raise(&stall.released);
    kiln_model_destroy(m);   /* joins the stalled thread, released just now */

    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    CHECK(c.live == 0);
    printf("faults: no host allocation left (%ld)\n", c.live);
}

/* The watchdog fires while the replicas upload large samples: fit returns
 * KILN_ERROR_TIMEOUT and frees its staging, and nothing a replica still
 * copies may be that staging (AddressSanitizer, in CI's sanitizer pass,
 * reported a use after free here when the replicas read fit's arrays). */
static void test_watchdog_during_upload(int devices)
{
    if (!test_has_devices(devices, 2, "the watchdog on replicas"))
        return;
    enum { FEATURES = 1 << 21, BIG_SAMPLES = 4 };
    kiln_context *ctx = context(NULL);
    float *x = calloc((size_t)FEATURES * BIG_SAMPLES, sizeof(float));
    int32_t y[BIG_SAMPLES] = {0, 1, 0, 1};
    const int32_t shape[] = {FEATURES};
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = BIG_SAMPLES, .feature_rank = 1,
                          .feature_dims = {FEATURES}, .features = x, .sparse_labels = y,
                          .num_classes = 2};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    free(x);   /* the dataset holds its own copy */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_dense_options head = {.struct_size = sizeof head, .units = 2,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, shape, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = KILN_STRATEGY_MIRRORED, .replicas = 2,
                               .step_timeout_seconds = 1e-4};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 1, .batch_size = BIG_SAMPLES,
                           .verbosity = KILN_VERBOSE_SILENT};
    CHECK_FAILS(ctx, KILN_ERROR_TIMEOUT, "within the 0.0001 s watchdog",
                kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
}

int main(void)
{
    kiln_context *ctx = context(NULL);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    printf("%d device(s)\n", (int)devices);
    kiln_dataset *ds = data(ctx);
    test_equivalence(ctx, ds, devices);
    test_per_replica_batch(ctx, ds, devices);
    test_batch_norm(ctx, ds, devices);
    test_inference_statistics(ctx, ds);
    kiln_dataset_destroy(ds);
    test_schedules(ctx);
    kiln_context_destroy(ctx);
    test_faults(devices);
    test_watchdog_during_upload(devices);
    return test_finish("test_strategies");
}
