/* MultiHeadAttention against the float64 reference (test/common/reference_attention.c),
 * forward and backward: self-attention with and without the causal mask,
 * cross-attention with other lengths and widths (the value is a Reshape of
 * the query's input, so one Input feeds both and their gradients add), more
 * heads, value_dim and output_shape of their own, no biases, dropout in fit
 * and none in evaluate; then Keras's weight names, shapes and initial
 * values, and each bad option or shape refused naming the layer. */
#include "layer_check.h"
#include "reference_attention.h"

typedef struct mha_case {
    int32_t tq, d;       /* the input, and the query */
    int32_t tv, dv;      /* 0: self-attention; else the value, a Reshape of the input */
    int32_t heads, key_dim, value_dim, output_shape;
    int causal, no_bias;
    float dropout;
    /* A padding mask: ReLU of the value's first feature, so position j is
     * padding where that feature is > 0 (about half of them). */
    int mask;
} mha_case;

static kiln_node build_mha(kiln_model *m, kiln_node pre, const void *arg)
{
    const mha_case *c = arg;
    const int32_t vdims[] = {c->tv, c->dv};
    const kiln_node value = c->tv ? kiln_reshape(m, pre, 2, vdims,
                                                 &(kiln_reshape_options){.name = "as_value"}) : pre;
    const kiln_multi_head_attention_options o = {
        .struct_size = sizeof o, .num_heads = c->heads, .key_dim = c->key_dim,
        .value_dim = c->value_dim, .output_shape = c->output_shape,
        .use_causal_mask = c->causal, .no_bias = c->no_bias, .dropout = c->dropout, .seed = 7};
    if (!c->mask)
        return kiln_multi_head_attention(m, pre, value, &o);
    const kiln_slice_options first = {.struct_size = sizeof first, .size = {0, 1}};
    const kiln_node flags = kiln_activation_layer(m, kiln_slice(m, value, &first),
                                                  KILN_ACTIVATION_RELU, NULL);
    const int32_t tv = c->tv ? c->tv : c->tq;
    return kiln_multi_head_attention_masked(m, pre, value, kiln_reshape(m, flags, 1, &tv, NULL),
                                            &o);
}

/* The mask build_mha makes, (batch, Tv), from the value's values; how many
 * samples it pads whole. */
static int padding_of(const mha_case *c, const double *xv, int batch, double *mask)
{
    const int32_t tv = c->tv ? c->tv : c->tq, dv = c->tv ? c->dv : c->d;
    int whole = 0;
    for (int b = 0; b < batch; b++) {
        int padded = 0;
        for (int j = 0; j < tv; j++) {
            mask[b * tv + j] = xv[((size_t)b * tv + j) * dv] > 0.0 ? 1.0 : 0.0;
            padded += mask[b * tv + j] != 0.0;
        }
        whole += padded == tv;
    }
    return whole;
}

/* The host's copy of kiln_keep_scale (opencl/kernels/prelude.cl), so the
 * reference applies the device's dropout draws. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double keep_scale(uint64_t seed, uint32_t step, int sample, int element, float rate)
{
    const uint64_t key = seed ^ mix((uint64_t)step * 0x9e3779b97f4a7c15ULL + (uint64_t)sample);
    const uint64_t h = mix(key ^ ((uint64_t)(uint32_t)element * 0xd1b54a32d192ed03ULL));
    const float u = (float)(h >> 40) * (1.0f / 16777216.0f);
    return u < rate ? 0.0 : (double)(1.0f / (1.0f - rate));
}

/* Samples whose every value position the masked cases pad. */
static int whole_padding;

static void test_case(kiln_context *ctx, const char *what, int batch, const mha_case *c)
{
    const int32_t dims[] = {c->tq, c->d};
    layer_run run;
    if (!layer_run_once(ctx, 2, dims, batch, build_mha, c, &run))
        return;
    const int self = c->tv == 0;
    ref_mha g = {.batch = batch, .tq = c->tq, .d = c->d, .tv = self ? c->tq : c->tv,
                 .dv = self ? c->d : c->dv, .heads = c->heads, .key_dim = c->key_dim,
                 .value_dim = c->value_dim ? c->value_dim : c->key_dim,
                 .out = c->output_shape ? c->output_shape : c->d, .causal = c->causal};
    double *mask = NULL;
    if (c->mask) {
        mask = malloc(sizeof(double) * (size_t)batch * (size_t)g.tv);
        whole_padding += padding_of(c, run.x, batch, mask);
        g.mask = mask;
    }
    CHECK(run.n_params == (c->no_bias ? 4 : 8));
    ref_mha_params w = {{0}, {0}};
    double *dkernel[4], *dbias[4] = {0};
    for (int p = 0; p < 4; p++) {
        const int k = c->no_bias ? p : 2 * p;
        w.kernel[p] = run.params[k];
        w.bias[p] = c->no_bias ? NULL : run.params[k + 1];
        dkernel[p] = malloc(sizeof(double) * (size_t)run.param_size[k]);
        if (!c->no_bias)
            dbias[p] = malloc(sizeof(double) * (size_t)run.param_size[k + 1]);
    }
    double *keep = NULL;
    if (c->dropout > 0.0f && check_training) {
        const size_t n = (size_t)batch * g.heads * g.tq * g.tv, per = n / (size_t)batch;
        const uint64_t seed = ctx->seed ^ (7ULL * 0x9e3779b97f4a7c15ULL);
        keep = malloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++)
            keep[i] = keep_scale(seed, 0, (int)(i / per), (int)(i % per), c->dropout);
    }
    const double *xv = run.x;   /* the Reshape keeps the values' order */
    double *y = malloc(sizeof(double) * (size_t)(batch * run.out_size));
    double *dxq = malloc(sizeof(double) * (size_t)(batch * run.in_size));
    double *dxv = malloc(sizeof(double) * (size_t)(batch * run.in_size));
    ref_mha_forward(&g, run.x, xv, &w, keep, y);
    char name[160];
    snprintf(name, sizeof name, "%s: output", what);
    test_close(name, 0, run.y, y, sizeof(double), batch * run.out_size, TEST_OF_ARRAY, 2e-6);
    if (check_training) {
        ref_mha_backward(&g, run.x, xv, &w, keep, run.dy, dxq, dxv, dkernel, dbias);
        for (int64_t i = 0; i < batch * run.in_size; i++)
            dxq[i] += dxv[i];   /* query and value are one input */
        snprintf(name, sizeof name, "%s: input gradient", what);
        test_close(name, 0, run.dx, dxq, sizeof(double), batch * run.in_size, TEST_OF_ARRAY, 1e-5);
        static const char *const proj[4] = {"query", "key", "value", "attention_output"};
        for (int p = 0; p < 4; p++) {
            const int k = c->no_bias ? p : 2 * p;
            snprintf(name, sizeof name, "%s: %s/kernel gradient", what, proj[p]);
            test_close(name, 0, run.dparams[k], dkernel[p], sizeof(double), run.param_size[k],
                       TEST_OF_ARRAY, 1e-5);
            if (c->no_bias)
                continue;
            snprintf(name, sizeof name, "%s: %s/bias gradient", what, proj[p]);
            if (p != 1) {
                test_close(name, 0, run.dparams[k + 1], dbias[p], sizeof(double),
                           run.param_size[k + 1], TEST_OF_ARRAY, 1e-5);
                continue;
            }
            /* The key's bias adds one number to a row of scores, which the
             * softmax ignores: its gradient is 0, round-off against the query's. */
            double most = 1e-6;
            for (int64_t i = 0; i < run.param_size[1]; i++)
                most = fmax(most, fabs(dbias[0][i]));
            for (int64_t i = 0; i < run.param_size[3]; i++)
                if (!(fabs(run.dparams[3][i]) <= 1e-5 * most)) {
                    fprintf(stderr, "%s: %g at %lld, want 0\n", name, run.dparams[3][i],
                            (long long)i);
                    test_failures++;
                    break;
                }
        }
    }
    for (int p = 0; p < 4; p++) {
        free(dkernel[p]);
        free(dbias[p]);
    }
    free(keep);
    free(mask);
    free(y);
    free(dxq);
    free(dxv);
    layer_run_free(&run);
}

static kiln_model *new_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    return m;
}

static kiln_compile_options mse(void)
{
    /* Static: the options returned point to it. */
    static const kiln_optimizer_options sgd = {.struct_size = sizeof sgd,
                                               .kind = KILN_OPTIMIZER_SGD};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd};
    return co;
}

/* Keras's weights: names, shapes, glorot limits from its fans, zero biases. */
static void test_weights(kiln_context *ctx)
{
    const int32_t dims[] = {5, 6};
    kiln_model *m = new_model(ctx);
    kiln_node x = kiln_input(m, 2, dims, NULL);
    const int32_t vdims[] = {10, 3};
    kiln_node v = kiln_reshape(m, x, 2, vdims, NULL);
    const kiln_multi_head_attention_options o = {.struct_size = sizeof o, .num_heads = 4,
                                                 .key_dim = 3, .value_dim = 2,
                                                 .output_shape = 7};
    kiln_node a = kiln_multi_head_attention(m, x, v, &o);
    const kiln_compile_options co = mse();
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK(m->graph.nodes[a].shape.rank == 2 && m->graph.nodes[a].shape.dims[0] == 5 &&
          m->graph.nodes[a].shape.dims[1] == 7);
    const struct {
        const char *name;
        int rank;
        int32_t dims[3];
        double fan_in, fan_out;   /* 0: a bias */
    } want[] = {
        {"multi_head_attention/query/kernel", 3, {6, 4, 3}, 24, 18},
        {"multi_head_attention/query/bias", 2, {4, 3, 0}, 0, 0},
        {"multi_head_attention/key/kernel", 3, {3, 4, 3}, 12, 9},
        {"multi_head_attention/key/bias", 2, {4, 3, 0}, 0, 0},
        {"multi_head_attention/value/kernel", 3, {3, 4, 2}, 12, 6},
        {"multi_head_attention/value/bias", 2, {4, 2, 0}, 0, 0},
        {"multi_head_attention/attention_output/kernel", 3, {4, 2, 7}, 8, 28},
        {"multi_head_attention/attention_output/bias", 1, {7, 0, 0}, 0, 0},
    };
    CHECK(m->graph.nodes[a].n_params == 8);
    float *flat = calloc(m->plan.n_param_floats + 1, sizeof(float));
    CHECK_OK(ctx, kiln_replica_read_params(
                      m->placement.strategy->replica(m->placement.strategy_impl, 0), flat));
    for (int p = 0; p < 8 && p < m->graph.nodes[a].n_params; p++) {
        const kiln_param_spec *s = &m->graph.nodes[a].params[p];
        char full[128];
        snprintf(full, sizeof full, "%s/%s", m->graph.nodes[a].name, s->name);
        CHECK(strcmp(full, want[p].name) == 0);
        CHECK(s->shape.rank == want[p].rank);
        for (int d = 0; d < want[p].rank; d++)
            CHECK(s->shape.dims[d] == want[p].dims[d]);
        const int64_t n = kiln_shape_size(&s->shape);
        const float *w = flat + m->graph.nodes[a].param_offset[p];
        double most = 0.0;
        for (int64_t i = 0; i < n; i++)
            most = fabs(w[i]) > most ? fabs(w[i]) : most;
        if (want[p].fan_in == 0.0) {
            CHECK(most == 0.0);
        } else {   /* within Keras's limit, and not far below it */
            const double limit = sqrt(6.0 / (want[p].fan_in + want[p].fan_out));
            if (!(most <= limit && most > 0.6 * limit))
                fprintf(stderr, "%s: largest %g, limit %g\n", full, most, limit);
            CHECK(most <= limit && most > 0.6 * limit);
        }
    }
    free(flat);
    /* The summary counts Keras's 227 parameters and names both inputs. */
    char text[4096];
    CHECK_OK(ctx, kiln_model_summary(m, text, sizeof text, NULL));
    CHECK(strstr(text, "multi_head_attention (multi_head_attention)") &&
          strstr(text, "(None, 5, 7)") && strstr(text, "227  input_layer, reshape\n") &&
          strstr(text, "Total params: 227"));
    kiln_model_destroy(m);

    /* no_bias: the four kernels alone. */
    m = new_model(ctx);
    x = kiln_input(m, 2, dims, NULL);
    const kiln_multi_head_attention_options bare = {.struct_size = sizeof bare, .num_heads = 2,
                                                    .key_dim = 4, .no_bias = 1};
    a = kiln_multi_head_attention(m, x, x, &bare);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK(m->graph.nodes[a].n_params == 4);
    CHECK(m->graph.nodes[a].shape.dims[1] == 6);   /* output_shape 0: the query's width */
    CHECK(m->graph.nodes[a].params[3].shape.dims[1] == 4);   /* value_dim 0: key_dim */
    CHECK(strcmp(m->graph.nodes[a].params[3].name, "attention_output/kernel") == 0);
    kiln_model_destroy(m);
}

static void test_bad_input(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    const struct {
        kiln_multi_head_attention_options o;
        kiln_status status;
        const char *why;
    } bad[] = {
        {{.num_heads = 0, .key_dim = 4}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): num_heads must be > 0, got 0"},
        {{.num_heads = -2, .key_dim = 4}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): num_heads must be > 0, got -2"},
        {{.num_heads = 2, .key_dim = 0}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): key_dim must be > 0, got 0"},
        {{.num_heads = 2, .key_dim = 3, .value_dim = -1}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): value_dim must be >= 0 (0: key_dim), got -1"},
        {{.num_heads = 2, .key_dim = 3, .output_shape = -4}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): output_shape must be >= 0"},
        {{.num_heads = 2, .key_dim = 3, .dropout = 1.0f}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): dropout must be in [0, 1), got 1"},
        {{.num_heads = 2, .key_dim = 3, .dropout = -0.5f}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'mha' (multi_head_attention): dropout must be in [0, 1), got -0.5"},
        /* heads x key_dim too large for kiln's buffers */
        {{.num_heads = 1 << 20, .key_dim = 1 << 10}, KILN_ERROR_SHAPE,
         "layer 'mha' (multi_head_attention): query (5, 6) and value (5, 6) with 1048576 heads "
         "need 5368709120 floats per sample for one attention buffer; kiln supports at most "
         "2147483647"},
    };
    const int32_t dims[] = {5, 6}, flat[] = {30};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_model *m = new_model(ctx);
        kiln_node x = kiln_input(m, 2, dims, NULL);
        kiln_multi_head_attention_options o = bad[i].o;
        o.struct_size = sizeof o;
        o.name = "mha";
        CHECK(kiln_multi_head_attention(m, x, x, &o) == KILN_NODE_INVALID);
        CHECK_FAILS(ctx, bad[i].status, bad[i].why, kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    /* Inputs not (sequence, features): rank 1 as the query, then as the value. */
    const kiln_multi_head_attention_options o = {.struct_size = sizeof o, .name = "mha",
                                                 .num_heads = 2, .key_dim = 3};
    for (int k = 0; k < 2; k++) {
        kiln_model *m = new_model(ctx);
        kiln_node x = kiln_input(m, 2, dims, NULL);
        kiln_node line = kiln_reshape(m, x, 1, flat, NULL);
        CHECK(kiln_multi_head_attention(m, k ? x : line, k ? line : x, &o) == KILN_NODE_INVALID);
        CHECK_FAILS(ctx, KILN_ERROR_SHAPE, k ? "layer 'mha' (multi_head_attention): value is "
                    "(30,): it must be (sequence, features), rank 3 with the batch"
                    : "layer 'mha' (multi_head_attention): query is (30,): it must be "
                    "(sequence, features), rank 3 with the batch", kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    /* A rank-4 input (an image) as the value. */
    kiln_model *m = new_model(ctx);
    const int32_t image[] = {5, 3, 2};
    kiln_node x = kiln_input(m, 3, image, NULL);
    const int32_t seq[] = {15, 2};
    kiln_node q = kiln_reshape(m, x, 2, seq, NULL);
    CHECK(kiln_multi_head_attention(m, q, x, &o) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'mha' (multi_head_attention): value is (5, 3, 2)",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    /* A padding mask not (Tv): of the query's length (5 is not the value's
     * 15), and of rank 2. */
    for (int k = 0; k < 2; k++) {
        m = new_model(ctx);
        x = kiln_input(m, 3, image, NULL);
        const int32_t five[] = {5}, grid[] = {15, 2};
        kiln_node v = kiln_reshape(m, x, 2, grid, NULL);
        kiln_node pad = k ? v : kiln_input(m, 1, five, NULL);
        CHECK(kiln_multi_head_attention_masked(m, kiln_reshape(m, x, 2, (const int32_t[]){5, 6},
                                                               NULL), v, pad, &o)
              == KILN_NODE_INVALID);
        CHECK_FAILS(ctx, KILN_ERROR_SHAPE, k ? "layer 'mha' (multi_head_attention): the padding "
                    "mask is (15, 2): it must be (15,), a flag per value position (the value is "
                    "(15, 2))" : "layer 'mha' (multi_head_attention): the padding mask is (5,): "
                    "it must be (15,), a flag per value position (the value is (15, 2))",
                    kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    /* An unknown node as the value, and options too short to hold num_heads. */
    m = new_model(ctx);
    x = kiln_input(m, 2, dims, NULL);
    CHECK(kiln_multi_head_attention(m, x, 9, &o) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'mha': input 1 is node 9, which does "
                "not exist", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    m = new_model(ctx);
    x = kiln_input(m, 2, dims, NULL);
    kiln_multi_head_attention_options shortened = o;
    shortened.struct_size = sizeof(size_t) + sizeof(const char *);
    CHECK(kiln_multi_head_attention(m, x, x, &shortened) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_multi_head_attention: "
                "kiln_multi_head_attention_options.struct_size", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    /* NULL options: num_heads is required. */
    m = new_model(ctx);
    x = kiln_input(m, 2, dims, NULL);
    CHECK(kiln_multi_head_attention(m, x, x, NULL) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'multi_head_attention' "
                "(multi_head_attention): num_heads must be > 0", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(11);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const mha_case self = {.tq = 5, .d = 6, .heads = 2, .key_dim = 3};
    const mha_case causal = {.tq = 7, .d = 5, .heads = 3, .key_dim = 2, .value_dim = 4,
                             .output_shape = 3, .causal = 1};
    const mha_case cross = {.tq = 6, .d = 4, .tv = 8, .dv = 3, .heads = 2, .key_dim = 3,
                            .value_dim = 2, .output_shape = 5};
    mha_case cross_causal = cross;
    cross_causal.causal = 1;
    /* Fewer value positions than query positions: rows past Tv see them all. */
    const mha_case shorter = {.tq = 8, .d = 3, .tv = 4, .dv = 6, .heads = 1, .key_dim = 5,
                              .causal = 1};
    const mha_case bare = {.tq = 4, .d = 5, .heads = 4, .key_dim = 1, .value_dim = 3,
                           .no_bias = 1, .causal = 1};
    mha_case dropout = causal;
    dropout.dropout = 0.3f;
    /* Rows of probabilities longer than 32: a work-group each. */
    const mha_case wide = {.tq = 45, .d = 3, .heads = 2, .key_dim = 2, .causal = 1,
                           .dropout = 0.2f};
    const mha_case wide_cross = {.tq = 9, .d = 20, .tv = 36, .dv = 5, .heads = 3, .key_dim = 4,
                                 .value_dim = 2};
    /* Head sizes past one float8 chunk (the tiled kernels' dot products and
     * value blocks): a partial chunk after a whole one, and whole ones. */
    const mha_case long_heads = {.tq = 13, .d = 7, .heads = 2, .key_dim = 11, .value_dim = 9,
                                 .causal = 1, .dropout = 0.25f};
    const mha_case whole_chunks = {.tq = 6, .d = 5, .tv = 10, .dv = 3, .heads = 2,
                                   .key_dim = 16, .value_dim = 8};
    /* Past the GPU variant's 32 x 32 blocks and 16-deep steps, none of
     * them whole: several blocks of rows and of value positions, the
     * mask's diagonal across blocks (blocks wholly past it skipped; the
     * 65th row's diagonal alone in its block), head sizes past one step,
     * three blocks of value_dim, and Tq and Tv of their own either way
     * with the mask. */
    const mha_case blocks = {.tq = 65, .d = 3, .heads = 2, .key_dim = 20, .value_dim = 66,
                             .causal = 1, .dropout = 0.2f};
    const mha_case blocks_cross = {.tq = 70, .d = 6, .tv = 84, .dv = 5, .heads = 2,
                                   .key_dim = 5, .value_dim = 3, .causal = 1, .dropout = 0.1f};
    const mha_case blocks_shorter = {.tq = 90, .d = 2, .tv = 36, .dv = 5, .heads = 1,
                                     .key_dim = 17, .causal = 1};
    test_case(ctx, "self-attention", 3, &self);
    test_case(ctx, "causal self-attention, key_dim 11, value_dim 9, dropout", 3, &long_heads);
    test_case(ctx, "cross-attention, key_dim 16, value_dim 8", 2, &whole_chunks);
    test_case(ctx, "causal self-attention", 2, &causal);
    test_case(ctx, "cross-attention Tq < Tv", 3, &cross);
    test_case(ctx, "causal cross-attention Tq < Tv", 2, &cross_causal);
    test_case(ctx, "causal cross-attention Tq > Tv", 3, &shorter);
    test_case(ctx, "no biases, 4 heads of 1", 2, &bare);
    test_case(ctx, "dropout 0.3 in fit", 3, &dropout);
    test_case(ctx, "causal self-attention over 45 positions, dropout", 2, &wide);
    test_case(ctx, "cross-attention over 36 positions", 3, &wide_cross);
    test_case(ctx, "causal self-attention over 65 positions, key_dim 20, value_dim 66, "
              "dropout", 2, &blocks);
    test_case(ctx, "causal cross-attention Tq 70 < Tv 84, dropout", 2, &blocks_cross);
    test_case(ctx, "causal cross-attention Tq 90 > Tv 36, key_dim 17", 2, &blocks_shorter);
    /* Padding masks: self-attention; causal cross-attention over 2 value
     * positions (a sample of padding alone, whose rows see nothing:
     * probabilities 0, not NaN); past the GPU variant's blocks with dropout. */
    mha_case masked = self;
    masked.mask = 1;
    const mha_case masked_short = {.tq = 6, .d = 4, .tv = 2, .dv = 12, .heads = 2, .key_dim = 3,
                                   .value_dim = 2, .causal = 1, .mask = 1};
    mha_case masked_blocks = blocks_cross;
    masked_blocks.mask = 1;
    test_case(ctx, "padding mask, self-attention", 4, &masked);
    test_case(ctx, "padding mask, causal cross-attention over 2 positions", 6, &masked_short);
    test_case(ctx, "padding mask, causal cross-attention Tq 70 < Tv 84, dropout", 2,
              &masked_blocks);
    printf("padding masks: %d samples all padding\n", whole_padding);
    CHECK(whole_padding > 0);   /* the row that sees nothing was tested */
    check_training = 0;   /* evaluate: no dropout */
    test_case(ctx, "dropout 0.3 in evaluate", 3, &dropout);
    test_case(ctx, "padding mask in evaluate", 6, &masked_short);
    check_training = 1;
    test_weights(ctx);
    test_bad_input(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_attention");
}
