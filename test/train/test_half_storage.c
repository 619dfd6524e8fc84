/* Activations kept in half precision (kiln_compile_options.activation_storage
 * = KILN_STORAGE_FLOAT16; runtime/parallel/half_storage.c):
 *   - a value that is not a kiln_storage is refused;
 *   - the two rounding kernels (into a half buffer, and in place without
 *     one) agree bit for bit over every sign, exponent and leading
 *     fraction bits, ties included;
 *   - the memory it saves, from kiln_model_memory, on a deep Dense stack,
 *     and none lost on a shallow one (whose plan would save nothing);
 *   - an output beyond half's range fails predict, evaluation and training
 *     with KILN_ERROR_NUMERIC naming the layer, and the model stays usable;
 *   - training with half storage stays near float32 training, but not at
 *     it (the rounding happens);
 *   - mirrored (2 devices) and the pipeline (2 stages) train as one device
 *     does, each with half storage (on two devices only: SKIP on one, the
 *     basic-basic pass runs them);
 *   - with --dump DIR it writes the data, the initial weights and the
 *     weights after 5 steps with half storage and with float32 for
 *     torch_half_storage.py (half_storage_parity.sh), which trains the same
 *     network in float64 with every layer output rounded to half where
 *     kiln rounds it, and without.
 * The network: a residual CNN with batch normalization, average pooling,
 * a Dense with a fused tanh and a Dense whose softmax is a buffer of its
 * own (rounded before and after). */
#include "harness.h"
#include "parity_dump.h"
#include "opencl/device.h"
#include "runtime/context/context.h"

#include <unistd.h>

#define BATCH 4
#define SIDE 8
#define CHANNELS 2
#define FILTERS 4
#define OUTPUTS 3
#define STEPS 5
#define LR 0.05f
#define MOMENTUM 0.9f

static float xs[STEPS][BATCH * SIDE * SIDE * CHANNELS], ys[STEPS][BATCH * OUTPUTS];

static void make_data(void)
{
    uint32_t seed = 17;
    for (int s = 0; s < STEPS; s++)
        for (size_t i = 0; i < sizeof xs[s] / sizeof xs[s][0]; i++) {
            seed = seed * 1664525u + 1013904223u;
            xs[s][i] = (float)(seed >> 8) / 16777216.0f * 4.0f - 2.0f;
        }
    for (int s = 0; s < STEPS; s++)
        for (int b = 0; b < BATCH; b++)
            for (int j = 0; j < OUTPUTS; j++)
                ys[s][b * OUTPUTS + j] = sinf(xs[s][b * 128 + 5 * j]) + 0.3f * (float)j;
}

/* with_bn 0 for the strategies' comparison: each replica (each
 * micro-batch) would normalise by its own statistics. */
static kiln_model *build_on(kiln_context *ctx, kiln_storage storage, kiln_strategy strategy,
                            int with_bn)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, CHANNELS};
    const kiln_node x = kiln_input(m, 3, dims, NULL);
    const kiln_conv2d_options c1 = {.struct_size = sizeof c1, .name = "c1", .filters = FILTERS,
                                    .kernel_size = {3, 3}, .padding = KILN_PADDING_SAME,
                                    .activation = KILN_ACTIVATION_RELU};
    const kiln_batch_norm_options bn = {.struct_size = sizeof bn, .name = "bn"};
    kiln_conv2d_options c2 = c1;
    c2.name = "c2";
    const kiln_node h1 = kiln_conv2d(m, x, &c1);
    const kiln_node b1 = with_bn ? kiln_batch_normalization(m, h1, &bn) : h1;
    const kiln_node sum[] = {b1, kiln_conv2d(m, b1, &c2)};
    const kiln_add_options add = {.struct_size = sizeof add, .name = "add"};
    const kiln_pool2d_options pool = {.struct_size = sizeof pool, .name = "pool"};
    const kiln_flatten_options flat = {.struct_size = sizeof flat, .name = "flat"};
    const kiln_node f =
        kiln_flatten(m, kiln_average_pooling2d(m, kiln_add(m, sum, 2, &add), &pool), &flat);
    const kiln_dense_options d1 = {.struct_size = sizeof d1, .name = "d1", .units = 6,
                                   .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options d2 = {.struct_size = sizeof d2, .name = "d2", .units = 5,
                                   .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options out = {.struct_size = sizeof out, .name = "out",
                                    .units = OUTPUTS};
    kiln_dense(m, kiln_dense(m, kiln_dense(m, f, &d1), &d2), &out);
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .learning_rate = LR, .momentum = MOMENTUM};
    const int pipeline = strategy == KILN_STRATEGY_PIPELINE;
    const kiln_compile_options co = {
        .struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o,
        .strategy = strategy, .replicas = strategy == KILN_STRATEGY_MIRRORED ? 2 : 0,
        .pipeline_stages = pipeline ? 2 : 0, .micro_batches = pipeline ? 2 : 0,
        .activation_storage = storage};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static void train(kiln_context *ctx, kiln_model *m, int s)
{
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = xs[s],
                                 .dense_labels = ys[s]};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, NULL));
}

/* Every weight of m after the 5 steps (calloc'd, *n of them). */
static float *trained(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    for (int s = 0; s < STEPS; s++)
        train(ctx, m, s);
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = calloc((size_t)*n, sizeof *w);
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

/* The same network with half and with float32 storage, from half's
 * initial weights (returned, *n of them), 5 steps each: the trained
 * weights in *w16 and *w32. Both models are destroyed. */
static float *train_both(kiln_context *ctx, kiln_model *half, kiln_model *full, int64_t *n,
                         float **w16, float **w32)
{
    CHECK_OK(ctx, kiln_model_parameter_count(half, n));
    float *init = calloc((size_t)*n, sizeof *init);
    CHECK_OK(ctx, kiln_model_get_weights(half, init, *n));
    CHECK_OK(ctx, kiln_model_set_weights(full, init, *n));
    *w16 = trained(ctx, half, n);
    *w32 = trained(ctx, full, n);
    kiln_model_destroy(half);
    kiln_model_destroy(full);
    return init;
}

static void test_refusal(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4};
    const kiln_dense_options d = {.struct_size = sizeof d, .units = 2};
    kiln_dense(m, kiln_input(m, 1, dims, NULL), &d);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                                     .activation_storage = (kiln_storage)7};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "activation_storage 7",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* A stack of 12 Dense layers of 256 (relu), batch 64: float32 keeps each
 * layer's output and gradient (8 bytes a value); half storage keeps 2
 * bytes a value for the step and float32 only around the layer at work. */
static uint64_t stack_activation_bytes(kiln_context *ctx, kiln_storage storage, int depth)
{
    enum { WIDTH = 256, ROWS = 64 };
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {WIDTH};
    kiln_node h = kiln_input(m, 1, dims, NULL);
    for (int k = 0; k < depth; k++) {
        const kiln_dense_options d = {.struct_size = sizeof d, .units = WIDTH,
                                      .activation = KILN_ACTIVATION_RELU};
        h = kiln_dense(m, h, &d);
    }
    const kiln_dense_options last = {.struct_size = sizeof last, .units = 1};
    kiln_dense(m, h, &last);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE,
                                     .activation_storage = storage};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    char text[4096];
    CHECK_OK(ctx, kiln_model_summary(m, text, sizeof text, NULL));
    CHECK((strstr(text, "Activations: half precision") != NULL) ==
          (storage == KILN_STORAGE_FLOAT16));
    static float x[ROWS * WIDTH], y[ROWS];
    for (int i = 0; i < ROWS * WIDTH; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = ROWS, .features = x,
                                 .dense_labels = y};
    kiln_metrics r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, &r));
    CHECK(isfinite(r.loss));
    kiln_memory_report mem = {.struct_size = sizeof mem};
    CHECK_OK(ctx, kiln_model_memory(m, 0, &mem));
    kiln_model_destroy(m);
    return mem.activation_bytes;
}

static void test_memory(kiln_context *ctx)
{
    const uint64_t full = stack_activation_bytes(ctx, KILN_STORAGE_FLOAT32, 12);
    const uint64_t half = stack_activation_bytes(ctx, KILN_STORAGE_FLOAT16, 12);
    printf("12 Dense layers' activations: float32 %llu bytes, half storage %llu (%.2f)\n",
           (unsigned long long)full, (unsigned long long)half, (double)half / (double)full);
    /* The half copies alone are a quarter of float32's outputs and
     * gradients; the pool adds a few layers' worth. */
    CHECK(half > full / 4 && half < full / 2);
    /* Two hidden layers: four float32 buffers live at once in backward
     * against their four own; the plan keeps them (only the overflow flag
     * is added). */
    const uint64_t full2 = stack_activation_bytes(ctx, KILN_STORAGE_FLOAT32, 2);
    const uint64_t half2 = stack_activation_bytes(ctx, KILN_STORAGE_FLOAT16, 2);
    printf("2 Dense layers' activations: float32 %llu bytes, half storage %llu\n",
           (unsigned long long)full2, (unsigned long long)half2);
    CHECK(half2 <= full2 + sizeof(int32_t));
}

/* Every sign and exponent and the 6 leading fraction bits of float, the
 * others drawn, and every 16th value an exact tie between two halves. */
static void test_rounding_kernels(kiln_context *ctx)
{
    enum { COUNT = 1 << 15 };
    kiln_device *dev = ctx->devices[0];
    uint32_t *bits = malloc(COUNT * sizeof *bits);
    float *kept = malloc(COUNT * sizeof *kept), *in_place = malloc(COUNT * sizeof *in_place);
    for (uint32_t i = 0; i < COUNT; i++) {
        bits[i] = i << 17 | ((i * 2654435761u) >> 15);
        if (i % 16 == 0)
            bits[i] = (bits[i] & ~0x1fffu) | 0x1000u;
    }
    kiln_buffer *x = NULL, *y = NULL, *h = NULL, *flag = NULL;
    CHECK_OK(ctx, kiln_buffer_create(dev, COUNT * sizeof(float), "x", &x));
    CHECK_OK(ctx, kiln_buffer_create(dev, COUNT * sizeof(float), "y", &y));
    CHECK_OK(ctx, kiln_buffer_create(dev, COUNT * 2, "h", &h));
    CHECK_OK(ctx, kiln_buffer_create(dev, sizeof(int32_t), "flag", &flag));
    CHECK_OK(ctx, kiln_buffer_write(dev, x, 0, bits, COUNT * sizeof(float), 1));
    CHECK_OK(ctx, kiln_buffer_write(dev, y, 0, bits, COUNT * sizeof(float), 1));
    CHECK_OK(ctx, kiln_buffer_zero(dev, flag, 0, sizeof(int32_t)));
    kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_buffer(h), kiln_arg_int(COUNT),
                            kiln_arg_buffer(flag), kiln_arg_int(0));
    CHECK_OK(ctx, kiln_run1(dev, "half_storage", "kiln_half_storage_round", COUNT, a));
    kiln_args b = KILN_ARGS(kiln_arg_buffer(y), kiln_arg_int(COUNT), kiln_arg_buffer(flag),
                            kiln_arg_int(0));
    CHECK_OK(ctx, kiln_run1(dev, "half_storage", "kiln_half_storage_round_in_place", COUNT, b));
    CHECK_OK(ctx, kiln_buffer_read(dev, x, 0, kept, COUNT * sizeof(float)));
    CHECK_OK(ctx, kiln_buffer_read(dev, y, 0, in_place, COUNT * sizeof(float)));
    int differ = 0, ties_up = 0;
    for (int i = 0; i < COUNT; i++) {
        const int both_nan = isnan(kept[i]) && isnan(in_place[i]);
        differ += !both_nan && memcmp(&kept[i], &in_place[i], sizeof(float)) != 0;
        float v;
        memcpy(&v, &bits[i], sizeof v);
        ties_up += i % 16 == 0 && isfinite(v) && fabsf(kept[i]) > fabsf(v);
    }
    printf("rounding kernels: %d of %d values differ; %d of the ties rounded away from 0\n",
           differ, COUNT, ties_up);
    CHECK(differ == 0 && ties_up > COUNT / 16 / 8);
    kiln_buffer_destroy(x);
    kiln_buffer_destroy(y);
    kiln_buffer_destroy(h);
    kiln_buffer_destroy(flag);
    free(bits);
    free(kept);
    free(in_place);
}

/* Input 1 -> Dense "big" (x 1e5 each) -> Dense "out": 1e5 > 65504. */
static void test_overflow(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {2};
    const kiln_dense_options big = {.struct_size = sizeof big, .name = "big", .units = 2,
                                    .no_bias = 1};
    const kiln_dense_options out = {.struct_size = sizeof out, .name = "out", .units = 1,
                                    .no_bias = 1};
    kiln_dense(m, kiln_dense(m, kiln_input(m, 1, dims, NULL), &big), &out);
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .learning_rate = 1e-12f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE,
                                     .activation_storage = KILN_STORAGE_FLOAT16};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const float kernel[] = {1e5f, 0.0f, 0.0f, 1e5f}, ones[] = {1e-5f, 1e-5f};
    CHECK_OK(ctx, kiln_model_set_tensor(m, "big/kernel", kernel, 4));
    CHECK_OK(ctx, kiln_model_set_tensor(m, "out/kernel", ones, 2));
    const float x_big[] = {1.0f, 0.5f}, x_small[] = {0.5f, 0.25f}, y[] = {1.0f};
    const kiln_batch_arrays too_big = {.struct_size = sizeof too_big, .count = 1,
                                       .features = x_big, .dense_labels = y};
    const kiln_batch_arrays fine = {.struct_size = sizeof fine, .count = 1,
                                    .features = x_small, .dense_labels = y};
    const kiln_batch_arrays big_in = {.struct_size = sizeof big_in, .count = 1,
                                      .features = x_big};
    const kiln_batch_arrays fine_in = {.struct_size = sizeof fine_in, .count = 1,
                                       .features = x_small};
    float pred = 0.0f;
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, "layer 'big'",
                kiln_model_predict_on_batch(m, &big_in, &pred));
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, "layer 'big'", kiln_model_test_on_batch(m, &too_big, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, "half precision",
                kiln_model_train_on_batch(m, &too_big, NULL));
    /* 5e4 and 2.5e4 are within range: rounded, the prediction is
     * 0.75 within half's rounding. */
    CHECK_OK(ctx, kiln_model_predict_on_batch(m, &fine_in, &pred));
    CHECK(fabsf(pred - 0.75f) < 1e-3f);
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &fine, NULL));
    kiln_model_destroy(m);
}

/* Half storage moves training off float32's path by about half's
 * rounding, and only that much. */
static void test_near_float32(kiln_context *ctx)
{
    int64_t n = 0;
    float *w16 = NULL, *w32 = NULL;
    float *init =
        train_both(ctx, build_on(ctx, KILN_STORAGE_FLOAT16, KILN_STRATEGY_ONE_DEVICE, 1),
                   build_on(ctx, KILN_STORAGE_FLOAT32, KILN_STRATEGY_ONE_DEVICE, 1), &n, &w16,
                   &w32);
    const double d = test_difference(w16, w32, sizeof(float), n, TEST_PER_VALUE, NULL);
    printf("half storage vs float32, 5 steps: max difference %.2e\n", d);
    CHECK(d > 1e-7 && d < 2e-2);
    free(init);
    free(w32);
    free(w16);
}

static void test_strategies(kiln_context *ctx)
{
    if (!test_has_devices(test_device_count(ctx), 2, "the strategies"))
        return;
    /* The yardstick: how far half storage moves this network's training
     * from float32's. A float32 sum in another order (the pipeline's
     * micro-batches) can round a value to the other half step, which moves
     * training by a part of that. */
    int64_t n = 0;
    float *w16 = NULL, *w32 = NULL;
    float *init =
        train_both(ctx, build_on(ctx, KILN_STORAGE_FLOAT16, KILN_STRATEGY_ONE_DEVICE, 0),
                   build_on(ctx, KILN_STORAGE_FLOAT32, KILN_STRATEGY_ONE_DEVICE, 0), &n, &w16,
                   &w32);
    const double effect = test_difference(w16, w32, sizeof(float), n, TEST_PER_VALUE, NULL);
    const kiln_strategy strategies[] = {KILN_STRATEGY_MIRRORED, KILN_STRATEGY_PIPELINE};
    for (int k = 0; k < 2; k++) {
        kiln_model *two = build_on(ctx, KILN_STORAGE_FLOAT16, strategies[k], 0);
        CHECK_OK(ctx, kiln_model_set_weights(two, init, n));
        float *w2 = trained(ctx, two, &n);
        const double d = test_difference(w2, w16, sizeof(float), n, TEST_PER_VALUE, NULL);
        printf("%s vs one device, half storage, 5 steps: max difference %.2e (%.3f of half "
               "storage's effect, %.2e)\n", k ? "pipeline (2 stages)" : "mirrored (2 devices)",
               d, d / effect, effect);
        CHECK(effect > 1e-6 && d < 0.05 * effect);
        free(w2);
        kiln_model_destroy(two);
    }
    free(init);
    free(w16);
    free(w32);
}

/* --dump DIR: x.f32, y.f32 (the 5 batches), tensors.txt (each tensor's
 * name, trainability, offset and shape, in kiln_model_get_weights's
 * order), init.f32, half.f32 and float.f32 (every weight before and after
 * the 5 steps with each storage). */
static void dump(kiln_context *ctx, const char *dir)
{
    kiln_model *half = build_on(ctx, KILN_STORAGE_FLOAT16, KILN_STRATEGY_ONE_DEVICE, 1);
    kiln_model *full = build_on(ctx, KILN_STORAGE_FLOAT32, KILN_STRATEGY_ONE_DEVICE, 1);
    dump_floats(dir, "x.f32", &xs[0][0], sizeof xs / sizeof(float));
    dump_floats(dir, "y.f32", &ys[0][0], sizeof ys / sizeof(float));
    dump_tensor_list(ctx, half, dir);
    int64_t n = 0;
    float *w16 = NULL, *w32 = NULL;
    float *init = train_both(ctx, half, full, &n, &w16, &w32);
    dump_floats(dir, "init.f32", init, (size_t)n);
    dump_floats(dir, "half.f32", w16, (size_t)n);
    dump_floats(dir, "float.f32", w32, (size_t)n);
    free(init);
    free(w16);
    free(w32);
}

int main(int argc, char **argv)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    make_data();
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        dump(ctx, argv[2]);
        kiln_context_destroy(ctx);
        return test_finish("test_half_storage --dump");
    }
    test_refusal(ctx);
    test_rounding_kernels(ctx);
    test_memory(ctx);
    test_overflow(ctx);
    test_near_float32(ctx);
    test_strategies(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_half_storage");
}
