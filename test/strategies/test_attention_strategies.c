/* A small attention model trained under the strategies against one device:
 * mirrored and central storage on two devices (uneven shards), the
 * pipeline with its two attention layers on two stages. The first
 * attention layer has dropout on its probabilities: every strategy draws
 * the same masks for a sample, so the weights agree to round-off. meson
 * runs this with POCL_DEVICES="basic basic"; on one device what needs two
 * is skipped, with the reason printed. */
#include "test_data.h"
#include "runtime/model/model.h"

#define SAMPLES 40
#define SIDE 8
#define TOL 1e-5

typedef struct run {
    kiln_strategy strategy;
    int replicas, stages, micro, place;
} run;

/* Images as 8 positions of 8 features: a projection, causal attention with
 * dropout, a residual Add, layer norm, then cross-attention from that over
 * the raw rows (another width), a softmax head. */
static kiln_model *build(kiln_context *ctx, const run *r)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1}, seq[] = {SIDE, SIDE};
    kiln_input(m, 3, dims, NULL);
    const kiln_node rows = kiln_reshape(m, KILN_NODE_PREVIOUS, 2, seq, NULL);
    kiln_dense_options d12 = {.struct_size = sizeof d12, .units = 12};
    const kiln_node h = kiln_dense(m, rows, &d12);
    const kiln_multi_head_attention_options causal = {
        .struct_size = sizeof causal, .num_heads = 3, .key_dim = 4, .use_causal_mask = 1,
        .dropout = 0.1f, .seed = 5};
    const kiln_node pair[] = {h, kiln_multi_head_attention(m, h, h, &causal)};
    const kiln_node sum = kiln_add(m, pair, 2, NULL);
    const kiln_node norm = kiln_layer_normalization(m, sum, NULL);
    const kiln_multi_head_attention_options cross = {.struct_size = sizeof cross,
                                                     .num_heads = 2, .key_dim = 3,
                                                     .value_dim = 5};
    kiln_multi_head_attention(m, norm, rows, &cross);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense_options head = {.struct_size = sizeof head, .units = 4,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    if (r->place) {
        kiln_model_place(m, 0, sum, 0);
        kiln_model_place(m, norm, KILN_NODE_PREVIOUS, 1);
    }
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.1f};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    /* SGD: Adam turns the key bias's gradient, 0 but for round-off (the
     * softmax ignores it), into whole steps of either sign. */
    co.optimizer = &optimizer;
    co.strategy = r->strategy;
    co.replicas = r->replicas;
    co.pipeline_stages = r->stages;
    co.micro_batches = r->micro;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* Two epochs at batch 7 (shards 4 + 3, a last batch of 5); the weights. */
static float *weights_after(kiln_context *ctx, kiln_dataset *ds, const run *r, int64_t *n)
{
    kiln_model *m = build(ctx, r);
    float *w = NULL;
    if (m->plan.compiled) {
        kiln_fit_options fo = {.struct_size = sizeof fo};
        fo.epochs = 2;
        fo.batch_size = 7;
        fo.verbosity = KILN_VERBOSE_SILENT;
        CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
        kiln_model_parameter_count(m, n);
        w = calloc((size_t)*n, sizeof(float));
        CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    }
    kiln_model_destroy(m);
    return w;
}

static void compare(const char *what, const float *a, const float *b, const float *start,
                    int64_t n)
{
    const double worst = test_difference(a, b, sizeof(float), n, TEST_PER_VALUE, NULL);
    double moved = 0;
    for (int64_t i = 0; b && i < n; i++)
        moved = fmax(moved, fabs((double)b[i] - start[i]));
    printf("%-50s max relative difference %.2e\n", what, worst);
    if (!a || !b || !(worst <= TOL) || !(moved > 1e-3)) {
        fprintf(stderr, "%s: %.3g exceeds %.1g, or training moved nothing (%g)\n", what, worst,
                TOL, moved);
        test_failures++;
    }
}

int main(void)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 42};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    kiln_dataset *ds = synthetic_images(ctx, SAMPLES, SIDE, 777, 4);
    int64_t n = 0;
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *fresh = build(ctx, &one);
    kiln_model_parameter_count(fresh, &n);
    float *start = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(fresh, start, n));
    kiln_model_destroy(fresh);
    float *base = weights_after(ctx, ds, &one, &n);
    if (test_has_devices(devices, 2, "mirrored, central storage and the pipeline on 2 devices")) {
        const struct {
            const char *what;
            run r;
        } runs[] = {
            {"mirrored, 2 replicas vs one_device", {.strategy = KILN_STRATEGY_MIRRORED,
                                                    .replicas = 2}},
            {"central_storage, 2 replicas vs one_device",
             {.strategy = KILN_STRATEGY_CENTRAL_STORAGE, .replicas = 2}},
            {"pipeline, 2 placed stages, 3 micro-batches",
             {.strategy = KILN_STRATEGY_PIPELINE, .micro = 3, .place = 1}},
            {"pipeline, 2 stages partitioned, 2 micro-batches",
             {.strategy = KILN_STRATEGY_PIPELINE, .stages = 2, .micro = 2}},
        };
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
            int64_t m = 0;
            float *w = weights_after(ctx, ds, &runs[i].r, &m);
            CHECK(m == n);
            compare(runs[i].what, w, base, start, n);
            free(w);
        }
    }
    free(base);
    free(start);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return test_finish("test_attention_strategies");
}
