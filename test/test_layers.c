/* Every layer forward and backward against the float64 reference, on odd
 * sizes, batch 1 and odd batches, with each activation. */
#include "layer_check.h"
#include "reference.h"

#define TOL 2e-5

static const char *act_name(kiln_activation a)
{
    static const char *names[] = {"linear", "relu", "sigmoid", "tanh", "softmax"};
    return names[a];
}

/* z -> y = act(z) and dy -> dz, in the reference. */
static void apply_act(kiln_activation act, double *z, const double *dy, int rows, int cols,
                      double *y, double *dz)
{
    ref_activation_forward(act, z, rows, cols, y);
    ref_activation_backward(act, y, dy, rows, cols, dz);
}

typedef struct dense_case {
    int units;
    kiln_activation act;
    int no_bias;
} dense_case;

static kiln_node build_dense(kiln_model *m, kiln_node pre, const void *arg)
{
    const dense_case *c = arg;
    kiln_dense_options o = {.struct_size = sizeof o, .units = c->units, .activation = c->act,
                            .no_bias = c->no_bias};
    return kiln_dense(m, pre, &o);
}

static void test_dense(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                       const dense_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_dense, c, &r))
        return;
    const int in = dims[rank - 1];
    const int rows = (int)(batch * r.in_size / in);
    const int64_t ny = (int64_t)rows * c->units;
    double *z = calloc((size_t)ny, sizeof(double)), *y = calloc((size_t)ny, sizeof(double));
    double *dz = calloc((size_t)ny, sizeof(double));
    double *dw = calloc((size_t)in * c->units, sizeof(double));
    double *db = calloc((size_t)c->units, sizeof(double));
    double *dx = calloc((size_t)(batch * r.in_size), sizeof(double));
    ref_dense_forward(r.x, r.params[0], c->no_bias ? NULL : r.params[1], rows, in, c->units, z);
    apply_act(c->act, z, r.dy, rows, c->units, y, dz);
    ref_dense_backward(r.x, r.params[0], dz, rows, in, c->units, dw, c->no_bias ? NULL : db,
                       dx);
    char what[128];
    snprintf(what, sizeof what, "dense(%d, %s%s) rank %d batch %d", c->units, act_name(c->act),
             c->no_bias ? ", no bias" : "", rank, batch);
    printf("%s\n", what);
    check_close(what, r.y, y, ny, TOL);
    check_close(what, r.dparams[0], dw, (int64_t)in * c->units, TOL);
    if (!c->no_bias)
        check_close(what, r.dparams[1], db, c->units, TOL);
    check_close(what, r.dx, dx, batch * r.in_size, TOL);
    free(z), free(y), free(dz), free(dw), free(db), free(dx);
    layer_run_free(&r);
}

enum { POOL_NONE, POOL_MAX, POOL_AVERAGE, POOL_GLOBAL };

typedef struct conv_case {
    int filters, kh, kw, sh, sw;
    kiln_padding padding;
    kiln_activation act;
    int no_bias;
    int pool;   /* POOL_*: pooling with kh x kw, strides sh x sw, not conv */
} conv_case;

static kiln_node build_conv(kiln_model *m, kiln_node pre, const void *arg)
{
    const conv_case *c = arg;
    kiln_pool2d_options o = {.struct_size = sizeof o, .pool_size = {c->kh, c->kw},
                             .strides = {c->sh, c->sw}, .padding = c->padding};
    if (c->pool == POOL_MAX)
        return kiln_max_pooling2d(m, pre, &o);
    if (c->pool == POOL_AVERAGE)
        return kiln_average_pooling2d(m, pre, &o);
    if (c->pool == POOL_GLOBAL)
        return kiln_global_average_pooling2d(m, pre, NULL);
    kiln_conv2d_options co = {.struct_size = sizeof co, .filters = c->filters,
                              .kernel_size = {c->kh, c->kw}, .strides = {c->sh, c->sw},
                              .padding = c->padding, .activation = c->act, .no_bias = c->no_bias};
    return kiln_conv2d(m, pre, &co);
}

static const char *const pool_name[] = {"conv2d", "max_pooling2d", "average_pooling2d",
                                         "global_average_pooling2d"};

static void test_conv(kiln_context *ctx, const int32_t *dims, int batch, const conv_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build_conv, c, &r))
        return;
    ref_conv g = {.batch = batch, .h = dims[0], .w = dims[1], .c = dims[2],
                  .f = c->pool ? dims[2] : c->filters, .kh = c->kh, .kw = c->kw, .sh = c->sh,
                  .sw = c->sw};
    if (c->pool == POOL_GLOBAL) {
        g.kh = g.sh = g.h;
        g.kw = g.sw = g.w;
    }
    ref_window(g.h, g.kh, g.sh, c->padding == KILN_PADDING_SAME, &g.oh, &g.pad_top);
    ref_window(g.w, g.kw, g.sw, c->padding == KILN_PADDING_SAME, &g.ow, &g.pad_left);
    const int64_t ny = (int64_t)batch * g.oh * g.ow * g.f, nx = batch * r.in_size;
    char what[160];
    snprintf(what, sizeof what, "%s %dx%d stride %dx%d %s, %d filters, %s, batch %d on "
             "(%d, %d, %d)", pool_name[c->pool], g.kh, g.kw, g.sh, g.sw,
             c->padding == KILN_PADDING_SAME ? "same" : "valid", g.f, act_name(c->act), batch,
             dims[0], dims[1], dims[2]);
    printf("%s\n", what);
    if (ny != batch * r.out_size) {
        fprintf(stderr, "%s: output size %lld, reference %lld\n", what,
                (long long)(batch * r.out_size), (long long)ny);
        test_failures++;
        layer_run_free(&r);
        return;
    }
    double *z = calloc((size_t)ny, sizeof(double)), *y = calloc((size_t)ny, sizeof(double));
    double *dz = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    const int64_t nw = (int64_t)g.kh * g.kw * g.c * g.f;
    double *dw = calloc((size_t)nw, sizeof(double)), *db = calloc((size_t)g.f, sizeof(double));
    if (c->pool == POOL_MAX) {
        ref_max_pool_forward(&g, r.x, y);
        ref_max_pool_backward(&g, r.x, r.dy, dx);
    } else if (c->pool) {
        ref_avg_pool_forward(&g, r.x, y);
        ref_avg_pool_backward(&g, r.dy, dx);
    } else {
        ref_conv2d_forward(&g, r.x, r.params[0], c->no_bias ? NULL : r.params[1], z);
        apply_act(c->act, z, r.dy, (int)(ny / g.f), g.f, y, dz);
        ref_conv2d_backward(&g, r.x, r.params[0], dz, dw, c->no_bias ? NULL : db, dx);
        check_close(what, r.dparams[0], dw, nw, TOL);
        if (!c->no_bias)
            check_close(what, r.dparams[1], db, g.f, TOL);
    }
    check_close(what, r.y, y, ny, TOL);
    check_close(what, r.dx, dx, nx, TOL);
    free(z), free(y), free(dz), free(dx), free(dw), free(db);
    layer_run_free(&r);
}

static kiln_node build_flatten(kiln_model *m, kiln_node pre, const void *arg)
{
    (void)arg;
    return kiln_flatten(m, pre, NULL);
}

static kiln_node build_activation(kiln_model *m, kiln_node pre, const void *arg)
{
    return kiln_activation_layer(m, pre, *(const kiln_activation *)arg, NULL);
}

/* Add(pre, pre, tanh(pre)): one node feeds the same layer twice and another. */
static kiln_node build_add(kiln_model *m, kiln_node pre, const void *arg)
{
    (void)arg;
    kiln_node t = kiln_activation_layer(m, pre, KILN_ACTIVATION_TANH, "t");
    kiln_node in[] = {pre, pre, t};
    return kiln_add(m, in, 3, NULL);
}

static void test_elementwise(kiln_context *ctx, const char *name, build_fn build,
                             const void *arg, kiln_activation act, int add)
{
    const int32_t dims[] = {3, 5, 7};
    const int batch = 3;
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build, arg, &r))
        return;
    const int64_t n = batch * r.in_size;
    const int cols = dims[2];  /* softmax runs over the last dimension */
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    if (add) {
        double *t = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            t[i] = tanh(r.x[i]);
            y[i] = 2 * r.x[i] + t[i];
            dx[i] = 2 * r.dy[i] + r.dy[i] * (1 - t[i] * t[i]);
        }
        free(t);
    } else {
        apply_act(act, r.x, r.dy, (int)(n / cols), cols, y, dx);
    }
    printf("%s\n", name);
    check_close(name, r.y, y, n, TOL);
    check_close(name, r.dx, dx, n, TOL);
    free(y), free(dx);
    layer_run_free(&r);
}

typedef struct bn_case {
    float momentum, epsilon;
} bn_case;

static kiln_node build_bn(kiln_model *m, kiln_node pre, const void *arg)
{
    const bn_case *c = arg;
    kiln_batch_norm_options o = {.struct_size = sizeof o, .momentum = c->momentum,
                                 .epsilon = c->epsilon, .activation = KILN_ACTIVATION_LINEAR};
    return kiln_batch_normalization(m, pre, &o);
}

/* Batch norm in training (forward, moving statistics, backward) and as
 * evaluate runs it, against float64. */
static void test_bn(kiln_context *ctx, int rank, const int32_t *dims, int batch, int training,
                    const bn_case *c)
{
    layer_run r;
    check_training = training;
    const int ok = layer_run_once(ctx, rank, dims, batch, build_bn, c, &r);
    check_training = 1;
    if (!ok)
        return;
    const int ch = dims[rank - 1];
    const int rows = (int)(batch * r.in_size / ch);
    char what[128];
    snprintf(what, sizeof what, "batch_normalization %s, %d rows x %d channels, momentum %g",
             training ? "training" : "inference", rows, ch, (double)c->momentum);
    printf("%s\n", what);
    const int64_t n = batch * r.in_size;
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    double *mean = calloc((size_t)ch, sizeof(double)), *var = calloc((size_t)ch, sizeof(double));
    double *dg = calloc((size_t)ch, sizeof(double)), *db = calloc((size_t)ch, sizeof(double));
    const double momentum = c->momentum ? c->momentum : 0.99, eps = c->epsilon ? c->epsilon : 1e-3;
    ref_batch_norm_forward(rows, ch, r.x, r.params[0], r.params[1], r.params[2], r.params[3], eps,
                           momentum, training, y, mean, var);
    check_close(what, r.y, y, n, TOL);
    if (training) {
        ref_batch_norm_backward(rows, ch, r.x, r.params[0], eps, r.dy, dx, dg, db);
        check_close(what, r.dx, dx, n, TOL);
        check_close(what, r.dparams[0], dg, ch, TOL);
        check_close(what, r.dparams[1], db, ch, TOL);
        check_close(what, r.params_after[2], mean, ch, TOL);
        check_close(what, r.params_after[3], var, ch, TOL);
    } else {
        check_close(what, r.params_after[2], r.params[2], ch, 0);  /* untouched */
        check_close(what, r.params_after[3], r.params[3], ch, 0);
    }
    free(y), free(dx), free(mean), free(var), free(dg), free(db);
    layer_run_free(&r);
}

static kiln_node build_dropout(kiln_model *m, kiln_node pre, const void *arg)
{
    return kiln_dropout(m, pre, *(const float *)arg, 7, NULL);
}

/* Dropout: every value is dropped or scaled by 1 / (1 - rate), about `rate`
 * of them dropped, the gradient through the same mask; at inference the
 * identity. */
static void test_dropout(kiln_context *ctx, float rate)
{
    const int32_t dims[] = {9, 7, 5};
    for (int training = 1; training >= 0; training--) {
        layer_run r;
        check_training = training;
        const int ok = layer_run_once(ctx, 3, dims, 6, build_dropout, &rate, &r);
        check_training = 1;
        if (!ok)
            return;
        const int64_t n = r.batch * r.in_size;
        int64_t dropped = 0, wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            const double kept = training ? r.x[i] / (1.0 - rate) : r.x[i];
            const int drop = training && r.y[i] == 0.0;
            dropped += drop;
            wrong += fabs(r.y[i] - (drop ? 0.0 : kept)) > 1e-6 ||
                     (training && fabs(r.dx[i] - (drop ? 0.0 : r.dy[i] / (1.0 - rate))) > 1e-6);
        }
        printf("dropout %.2f %s: %lld of %lld dropped\n", (double)rate,
               training ? "training" : "inference", (long long)dropped, (long long)n);
        CHECK(wrong == 0);
        CHECK(training ? fabs((double)dropped / (double)n - rate) < 0.04 : dropped == 0);
        layer_run_free(&r);
    }
}

int main(void)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP("no OpenCL device");

    const int32_t flat37[] = {37}, cube[] = {2, 3, 5};
    for (int act = KILN_ACTIVATION_LINEAR; act <= KILN_ACTIVATION_SOFTMAX; act++) {
        dense_case c = {.units = 19, .act = (kiln_activation)act};
        test_dense(ctx, 1, flat37, 5, &c);
    }
    dense_case one = {.units = 1, .act = KILN_ACTIVATION_SIGMOID};
    dense_case nobias = {.units = 13, .act = KILN_ACTIVATION_RELU, .no_bias = 1};
    test_dense(ctx, 1, flat37, 1, &one);
    test_dense(ctx, 1, flat37, 7, &nobias);
    /* Batches of 64 and 70 rows: the weight gradient's GEMM (TN) sums over
     * them. */
    test_dense(ctx, 1, flat37, 64, &nobias);
    test_dense(ctx, 1, flat37, 70, &nobias);
    dense_case last_axis = {.units = 11, .act = KILN_ACTIVATION_TANH};
    test_dense(ctx, 3, cube, 3, &last_axis);
    /* Not the output: each element-wise activation applied by the layer
     * itself (with its bias, or after its GEMM without one). */
    check_inner = 1;
    for (int act = KILN_ACTIVATION_RELU; act <= KILN_ACTIVATION_TANH; act++) {
        dense_case c = {.units = 19, .act = (kiln_activation)act,
                        .no_bias = act == KILN_ACTIVATION_TANH};
        test_dense(ctx, 1, flat37, 5, &c);
    }
    check_inner = 0;

    const int32_t img[] = {9, 7, 3}, tall[] = {11, 4, 2};
    const conv_case convs[] = {
        {.filters = 5, .kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_RELU},
        {.filters = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR},
        {.filters = 6, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_TANH, .no_bias = 1},
        {.filters = 3, .kh = 4, .kw = 3, .sh = 3, .sw = 2, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_SIGMOID},
        {.kh = 2, .kw = 2, .sh = 2, .sw = 2, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_LINEAR, .pool = POOL_MAX},
        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR, .pool = POOL_MAX},
        {.kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_LINEAR, .pool = POOL_MAX},
        {.kh = 2, .kw = 2, .sh = 2, .sw = 2, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_LINEAR, .pool = POOL_AVERAGE},
        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR, .pool = POOL_AVERAGE},
        {.kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR, .pool = POOL_AVERAGE},
        {.padding = KILN_PADDING_VALID, .act = KILN_ACTIVATION_LINEAR, .pool = POOL_GLOBAL},
    };
    /* More channels than one vector of eight holds, for the pooling kernels. */
    const int32_t wide[] = {6, 5, 11};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        test_conv(ctx, img, 1, &convs[i]);
        test_conv(ctx, tall, 3, &convs[i]);
        if (convs[i].pool)
            test_conv(ctx, wide, 2, &convs[i]);
    }
    /* The seed CNN's first layer: enough output pixels that the direct
     * path's weight gradient is summed in several chunks, the last partial. */
    const int32_t fashion[] = {28, 28, 1};
    const conv_case seed = {.filters = 32, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                            .padding = KILN_PADDING_VALID, .act = KILN_ACTIVATION_RELU};
    test_conv(ctx, fashion, 5, &seed);
    /* Not the output: the activations applied by the convolution itself. */
    check_inner = 1;
    for (size_t i = 0; i < 4; i++)
        test_conv(ctx, img, 2, &convs[i]);
    test_conv(ctx, fashion, 3, &seed);
    check_inner = 0;

    /* Batch norm: channels in and beyond one vector of eight, rows in one
     * chunk and in several (the last partial), batch 1 with one value per
     * channel (variance 0: output beta, moving variance decays). */
    const int32_t feat[] = {13}, maps[] = {5, 3, 11}, big[] = {20, 20, 3};
    const bn_case keras = {.momentum = 0.0f, .epsilon = 0.0f};
    const bn_case fast = {.momentum = 0.5f, .epsilon = 1e-2f};
    for (int training = 1; training >= 0; training--) {
        test_bn(ctx, 1, feat, 7, training, &keras);
        test_bn(ctx, 3, maps, 3, training, &fast);
        test_bn(ctx, 1, feat, 1, training, &fast);
        test_bn(ctx, 3, big, 30, training, &keras);
    }

    test_dropout(ctx, 0.3f);
    test_dropout(ctx, 0.75f);

    test_elementwise(ctx, "flatten", build_flatten, NULL, KILN_ACTIVATION_LINEAR, 0);
    for (int act = KILN_ACTIVATION_LINEAR; act <= KILN_ACTIVATION_SOFTMAX; act++) {
        char name[64];
        kiln_activation a = (kiln_activation)act;
        snprintf(name, sizeof name, "activation layer %s", act_name(a));
        test_elementwise(ctx, name, build_activation, &a, a, 0);
    }
    test_elementwise(ctx, "add(pre, pre, tanh(pre))", build_add, NULL, KILN_ACTIVATION_LINEAR,
                     1);
    kiln_context_destroy(ctx);
    return test_finish("test_layers");
}
