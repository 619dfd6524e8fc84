/* Every layer forward and backward against the float64 reference, on odd
 * sizes, batch 1 and odd batches, with each activation. */
#include "layer_check.h"
#include "reference.h"

#define TOL 2e-5

static const char *act_name(kiln_activation a)
{
    static const char *names[] = {"linear", "relu", "sigmoid", "tanh", "softmax", "gelu",
                                  "gelu_tanh", "leaky_relu", "silu", "relu6", "log_softmax",
                                  "hard_sigmoid", "hard_silu"};
    return names[a];
}

/* z -> y = act(z) and dy -> dz, in the reference. */
static void apply_act(kiln_activation act, double *z, const double *dy, int rows, int cols,
                      double *y, double *dz)
{
    ref_activation_forward(act, z, rows, cols, y);
    ref_activation_backward_z(act, z, dy, rows, cols, dz);
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
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dparams[0], dw, sizeof(double), (int64_t)in * c->units, TEST_OF_ARRAY,
               TOL);
    if (!c->no_bias)
        test_close(what, 0, r.dparams[1], db, sizeof(double), c->units, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), batch * r.in_size, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(z), free(y), free(dz), free(dw), free(db), free(dx);
    layer_run_free(&r);
}

enum { POOL_NONE, POOL_MAX, POOL_AVERAGE, POOL_GLOBAL, POOL_GLOBAL_MAX };

typedef struct conv_case {
    int filters, kh, kw, sh, sw;
    kiln_padding padding;
    kiln_activation act;
    int no_bias;
    int pool;   /* POOL_*: pooling with kh x kw, strides sh x sw, not conv */
    int pads[4];   /* KILN_PADDING_EXPLICIT's (top, left, bottom, right) */
    int dil[2], groups;         /* a convolution's; 0: 1 */
    int ceil_mode, include_pad; /* a pool's */
} conv_case;

static kiln_node build_conv(kiln_model *m, kiln_node pre, const void *arg)
{
    const conv_case *c = arg;
    kiln_pool2d_options o = {.struct_size = sizeof o, .pool_size = {c->kh, c->kw},
                             .strides = {c->sh, c->sw}, .padding = c->padding,
                             .pads = {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                             .ceil_mode = c->ceil_mode, .count_include_pad = c->include_pad};
    if (c->pool == POOL_MAX)
        return kiln_max_pooling2d(m, pre, &o);
    if (c->pool == POOL_AVERAGE)
        return kiln_average_pooling2d(m, pre, &o);
    if (c->pool == POOL_GLOBAL)
        return kiln_global_average_pooling2d(m, pre, NULL);
    if (c->pool == POOL_GLOBAL_MAX)
        return kiln_global_max_pooling2d(m, pre, NULL);
    kiln_conv2d_options co = {.struct_size = sizeof co, .filters = c->filters,
                              .kernel_size = {c->kh, c->kw}, .strides = {c->sh, c->sw},
                              .padding = c->padding, .activation = c->act, .no_bias = c->no_bias,
                              .pads = {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                              .dilations = {c->dil[0], c->dil[1]}, .groups = c->groups};
    return kiln_conv2d(m, pre, &co);
}

static const char *const pool_name[] = {"conv2d", "max_pooling2d", "average_pooling2d",
                                         "global_average_pooling2d", "global_max_pooling2d"};

static void test_conv(kiln_context *ctx, const int32_t *dims, int batch, const conv_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build_conv, c, &r))
        return;
    ref_conv g = {.batch = batch, .h = dims[0], .w = dims[1], .c = dims[2],
                  .f = c->pool ? dims[2] : c->filters, .kh = c->kh, .kw = c->kw, .sh = c->sh,
                  .sw = c->sw};
    if (c->pool == POOL_GLOBAL || c->pool == POOL_GLOBAL_MAX) {
        g.kh = g.sh = g.h;
        g.kw = g.sw = g.w;
    }
    g.dil_h = c->dil[0] ? c->dil[0] : 1;
    g.dil_w = c->dil[1] ? c->dil[1] : 1;
    g.groups = c->groups;
    g.include_pad = c->include_pad;
    const int span_h = (g.kh - 1) * g.dil_h + 1, span_w = (g.kw - 1) * g.dil_w + 1;
    if (c->padding == KILN_PADDING_EXPLICIT || c->ceil_mode) {
        const int explicit = c->padding == KILN_PADDING_EXPLICIT;
        g.pad_top = explicit ? c->pads[0] : 0;
        g.pad_left = explicit ? c->pads[1] : 0;
        g.pad_bottom = explicit ? c->pads[2] : 0;
        g.pad_right = explicit ? c->pads[3] : 0;
        ref_window_explicit(g.h, g.kh, g.sh, g.dil_h, g.pad_top, g.pad_bottom, c->ceil_mode,
                            &g.oh);
        ref_window_explicit(g.w, g.kw, g.sw, g.dil_w, g.pad_left, g.pad_right, c->ceil_mode,
                            &g.ow);
    } else {
        ref_window(g.h, span_h, g.sh, c->padding == KILN_PADDING_SAME, &g.oh, &g.pad_top);
        ref_window(g.w, span_w, g.sw, c->padding == KILN_PADDING_SAME, &g.ow, &g.pad_left);
        const int after_h = (g.oh - 1) * g.sh + span_h - g.h - g.pad_top;
        const int after_w = (g.ow - 1) * g.sw + span_w - g.w - g.pad_left;
        g.pad_bottom = c->padding == KILN_PADDING_SAME && after_h > 0 ? after_h : 0;
        g.pad_right = c->padding == KILN_PADDING_SAME && after_w > 0 ? after_w : 0;
    }
    const int64_t ny = (int64_t)batch * g.oh * g.ow * g.f, nx = batch * r.in_size;
    char what[240];
    snprintf(what, sizeof what, "%s %dx%d stride %dx%d %s (%d, %d, %d, %d) dilation %dx%d "
             "groups %d%s%s, %d filters, %s, batch %d on (%d, %d, %d)", pool_name[c->pool], g.kh,
             g.kw, g.sh, g.sw, c->padding == KILN_PADDING_SAME ? "same"
                               : c->padding == KILN_PADDING_VALID ? "valid" : "explicit",
             g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.dil_h, g.dil_w,
             c->groups ? c->groups : 1, c->ceil_mode ? " ceil_mode" : "",
             c->include_pad ? " count_include_pad" : "", g.f, act_name(c->act), batch, dims[0],
             dims[1], dims[2]);
    if (ny != batch * r.out_size) {
        fprintf(stderr, "%s: output size %lld, reference %lld\n", what,
                (long long)(batch * r.out_size), (long long)ny);
        test_failures++;
        layer_run_free(&r);
        return;
    }
    double *z = calloc((size_t)ny, sizeof(double)), *y = calloc((size_t)ny, sizeof(double));
    double *dz = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    const int64_t nw = (int64_t)g.kh * g.kw * (g.c / (c->groups ? c->groups : 1)) * g.f;
    double *dw = calloc((size_t)nw, sizeof(double)), *db = calloc((size_t)g.f, sizeof(double));
    test_worst = 0;
    if (c->pool == POOL_MAX || c->pool == POOL_GLOBAL_MAX) {
        ref_max_pool_forward(&g, r.x, y);
        ref_max_pool_backward(&g, r.x, r.dy, dx);
    } else if (c->pool) {
        ref_avg_pool_forward(&g, r.x, y);
        ref_avg_pool_backward(&g, r.dy, dx);
    } else {
        ref_conv2d_forward(&g, r.x, r.params[0], c->no_bias ? NULL : r.params[1], z);
        apply_act(c->act, z, r.dy, (int)(ny / g.f), g.f, y, dz);
        ref_conv2d_backward(&g, r.x, r.params[0], dz, dw, c->no_bias ? NULL : db, dx);
        test_close(what, 0, r.dparams[0], dw, sizeof(double), nw, TEST_OF_ARRAY, TOL);
        if (!c->no_bias)
            test_close(what, 0, r.dparams[1], db, sizeof(double), g.f, TEST_OF_ARRAY, TOL);
    }
    for (int64_t i = 0; check_residual && i < nx; i++)   /* the Add's share */
        dx[i] += r.dy[i];
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), nx, TEST_OF_ARRAY, TOL);
    printf("%s%s: largest error %.2g\n", what, check_residual ? ", residual" : "", test_worst);
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
    kiln_node t = kiln_activation_layer(m, pre, KILN_ACTIVATION_TANH,
                                        &(kiln_activation_layer_options){.name = "t"});
    kiln_node in[] = {pre, pre, t};
    return kiln_add(m, in, 3, NULL);
}

/* On samples of rank 3; softmax runs over the last dimension. */
static void test_elementwise_on(kiln_context *ctx, const char *name, build_fn build,
                                const void *arg, kiln_activation act, int add,
                                const int32_t *dims)
{
    const int batch = 3, cols = dims[2];
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build, arg, &r))
        return;
    const int64_t n = batch * r.in_size;
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
    test_worst = 0;
    test_close(name, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, TOL);
    test_close(name, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", name, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

static kiln_node build_leaky(kiln_model *m, kiln_node pre, const void *arg)
{
    const kiln_activation_layer_options o = {.struct_size = sizeof o,
                                             .negative_slope = *(const float *)arg};
    return kiln_activation_layer(m, pre, KILN_ACTIVATION_LEAKY_RELU, &o);
}

/* The activation layer's leaky_relu with its negative_slope option. */
static void test_leaky_slope(kiln_context *ctx, float slope)
{
    const int32_t dims[] = {3, 5, 7};
    const int batch = 3;
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build_leaky, &slope, &r))
        return;
    const int64_t n = batch * r.in_size;
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        y[i] = r.x[i] > 0 ? r.x[i] : (double)slope * r.x[i];
        dx[i] = r.x[i] > 0 ? r.dy[i] : (double)slope * r.dy[i];
    }
    char name[64];
    snprintf(name, sizeof name, "activation layer leaky_relu slope %g", (double)slope);
    test_worst = 0;
    test_close(name, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, TOL);
    test_close(name, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", name, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

static kiln_node build_zero_padding(kiln_model *m, kiln_node pre, const void *arg)
{
    kiln_zero_padding2d_options o = {.struct_size = sizeof o};
    memcpy(o.padding, arg, sizeof o.padding);
    return kiln_zero_padding2d(m, pre, &o);
}

/* ZeroPadding2D (top, bottom, left, right) of an (h, w, c) sample. */
static void test_zero_padding(kiln_context *ctx, int h, int w, int c, const int32_t *pad)
{
    const int32_t dims[] = {h, w, c};
    const int batch = 2, oh = h + pad[0] + pad[1], ow = w + pad[2] + pad[3];
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build_zero_padding, pad, &r))
        return;
    const int64_t ny = (int64_t)batch * oh * ow * c, nx = (int64_t)batch * h * w * c;
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    for (int n = 0; n < batch; n++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++)
                for (int k = 0; k < c; k++) {
                    const int64_t at = (((int64_t)n * h + i) * w + j) * c + k;
                    const int64_t to = (((int64_t)n * oh + i + pad[0]) * ow + j + pad[2]) * c + k;
                    y[to] = r.x[at];
                    dx[at] = r.dy[to];
                }
    char name[96];
    snprintf(name, sizeof name, "zero_padding2d (%d, %d, %d, %d) of (%d, %d, %d)", (int)pad[0],
             (int)pad[1], (int)pad[2], (int)pad[3], h, w, c);
    test_worst = 0;
    test_close(name, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, 0);
    test_close(name, 0, r.dx, dx, sizeof(double), nx, TEST_OF_ARRAY, 0);
    printf("%s: largest error %.2g\n", name, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

typedef struct reduce_case {
    kiln_reduce_op op;
    int n_axes;
    int32_t axes[4];
    int keepdims;
} reduce_case;

static kiln_node build_reduce(kiln_model *m, kiln_node pre, const void *arg)
{
    const reduce_case *c = arg;
    const kiln_reduce_options o = {.struct_size = sizeof o, .keepdims = c->keepdims};
    return kiln_reduce(m, pre, c->op, c->n_axes, c->axes, &o);
}

/* Reduce of a sample of `rank` dims: each input value's output is found
 * from its coordinates on the kept axes; the largest's and the smallest's
 * gradient is split among the values equal to them (PyTorch's amax). */
static void test_reduce(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                        const reduce_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_reduce, c, &r))
        return;
    int reduced[4] = {0};
    for (int k = 0; k < c->n_axes; k++)
        reduced[c->axes[k] > 0 ? c->axes[k] - 1 : rank + c->axes[k]] = 1;
    int64_t count = 1, outs = 1;
    for (int d = 0; d < rank; d++)
        *(reduced[d] ? &count : &outs) *= dims[d];
    CHECK(r.out_size == outs);
    const int64_t n = batch * r.in_size, ny = batch * outs;
    int64_t *to = malloc(sizeof(int64_t) * (size_t)n);
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    double *ties = calloc((size_t)ny, sizeof(double));
    const int extreme = c->op == KILN_REDUCE_MAX || c->op == KILN_REDUCE_MIN;
    for (int64_t o = 0; o < ny; o++)
        y[o] = c->op == KILN_REDUCE_MAX ? -INFINITY : c->op == KILN_REDUCE_MIN ? INFINITY : 0.0;
    for (int64_t i = 0; i < n; i++) {
        int64_t rest = i % r.in_size, o = 0, scale = 1;
        for (int d = rank - 1; d >= 0; d--) {
            const int64_t coord = rest % dims[d];
            rest /= dims[d];
            if (!reduced[d]) {
                o += coord * scale;
                scale *= dims[d];
            }
        }
        to[i] = (i / r.in_size) * outs + o;
        const double v = r.x[i];
        double *acc = &y[to[i]];
        *acc = c->op == KILN_REDUCE_MAX ? fmax(*acc, v) : c->op == KILN_REDUCE_MIN ? fmin(*acc, v)
                                                                                 : *acc + v;
    }
    for (int64_t o = 0; c->op == KILN_REDUCE_MEAN && o < ny; o++)
        y[o] /= (double)count;
    int64_t tied = 0;
    for (int64_t i = 0; extreme && i < n; i++)
        ties[to[i]] += (double)(float)r.x[i] == y[to[i]];
    for (int64_t o = 0; extreme && o < ny; o++)
        tied += ties[o] > 1;
    for (int64_t i = 0; i < n; i++) {
        const double g = r.dy[to[i]];
        dx[i] = c->op == KILN_REDUCE_SUM ? g : c->op == KILN_REDUCE_MEAN ? g / (double)count
                : r.x[i] == y[to[i]] ? g / ties[to[i]] : 0.0;
    }
    static const char *const ops[] = {"mean", "sum", "max", "min"};
    char what[160];
    int at = snprintf(what, sizeof what, "reduce %s over (", ops[c->op]);
    for (int k = 0; k < c->n_axes; k++)
        at += snprintf(what + at, sizeof what - (size_t)at, "%s%d", k ? ", " : "",
                       (int)c->axes[k]);
    at += snprintf(what + at, sizeof what - (size_t)at, ")%s of (", c->keepdims ? " kept" : "");
    for (int d = 0; d < rank; d++)
        at += snprintf(what + at, sizeof what - (size_t)at, "%s%d", d ? ", " : "", (int)dims[d]);
    snprintf(what + at, sizeof what - (size_t)at, "), batch %d", batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g%s\n", what, test_worst,
           extreme ? (tied ? ", with ties" : ", no ties") : "");
    free(to), free(y), free(dx), free(ties);
    layer_run_free(&r);
}

static kiln_node build_softmax(kiln_model *m, kiln_node pre, const void *arg)
{
    return kiln_softmax(m, pre, arg);
}

/* Softmax (or log softmax) along `axis` (or from it through the last) of
 * a sample of `rank` dims, against the float64 reference row by row. */
static void test_softmax_axis(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                              int axis, int through_last, int take_log)
{
    const kiln_softmax_options o = {.struct_size = sizeof o, .axis = axis,
                                    .through_last = through_last, .log = take_log};
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_softmax, &o, &r))
        return;
    const int at = axis > 0 ? axis - 1 : axis < 0 ? rank + axis : rank - 1, end = through_last ? rank : at + 1;
    int64_t len = 1, inner = 1;
    for (int d = at; d < end; d++)
        len *= dims[d];
    for (int d = end; d < rank; d++)
        inner *= dims[d];
    const int64_t n = batch * r.in_size, rows = n / len;
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    for (int64_t row = 0; row < rows; row++) {
        const int64_t base = (row / inner) * len * inner + row % inner;
        double m = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j < len; j++)
            m = fmax(m, r.x[base + j * inner]);
        for (int64_t j = 0; j < len; j++)
            sum += exp(r.x[base + j * inner] - m);
        for (int64_t j = 0; j < len; j++) {
            const int64_t k = base + j * inner;
            const double p = exp(r.x[k] - m) / sum;
            y[k] = take_log ? r.x[k] - m - log(sum) : p;
            dot += take_log ? r.dy[k] : r.dy[k] * p;
        }
        for (int64_t j = 0; j < len; j++) {
            const int64_t k = base + j * inner;
            const double p = exp(r.x[k] - m) / sum;
            dx[k] = take_log ? r.dy[k] - p * dot : p * (r.dy[k] - dot);
        }
    }
    char what[128];
    snprintf(what, sizeof what, "%s axis %d%s of a rank-%d sample, batch %d",
             take_log ? "log_softmax" : "softmax", axis, through_last ? " through the last" : "",
             rank, batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

static void test_elementwise(kiln_context *ctx, const char *name, build_fn build,
                             const void *arg, kiln_activation act, int add)
{
    const int32_t dims[] = {3, 5, 7};
    test_elementwise_on(ctx, name, build, arg, act, add, dims);
}

typedef struct bn_case {
    float momentum, epsilon;
    kiln_activation act;   /* 0: linear */
} bn_case;

static kiln_node build_bn(kiln_model *m, kiln_node pre, const void *arg)
{
    const bn_case *c = arg;
    kiln_batch_norm_options o = {.struct_size = sizeof o, .momentum = c->momentum,
                                 .epsilon = c->epsilon, .activation = c->act};
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
    snprintf(what, sizeof what, "batch_normalization %s, %d rows x %d channels, momentum %g, %s%s",
             training ? "training" : "inference", rows, ch, (double)c->momentum,
             act_name(c->act), check_inner ? " (the layer's own)" : "");
    printf("%s\n", what);
    const int64_t n = batch * r.in_size;
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    double *mean = calloc((size_t)ch, sizeof(double)), *var = calloc((size_t)ch, sizeof(double));
    double *dg = calloc((size_t)ch, sizeof(double)), *db = calloc((size_t)ch, sizeof(double));
    double *z = calloc((size_t)n, sizeof(double)), *dz = calloc((size_t)n, sizeof(double));
    const double momentum = c->momentum ? c->momentum : 0.99, eps = c->epsilon ? c->epsilon : 1e-3;
    ref_batch_norm_forward(rows, ch, r.x, r.params[0], r.params[1], r.params[2], r.params[3], eps,
                           momentum, training, z, mean, var);
    apply_act(c->act, z, r.dy, rows, ch, y, dz);
    test_close(what, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, TOL);
    if (training) {
        ref_batch_norm_backward(rows, ch, r.x, r.params[0], eps, dz, dx, dg, db);
        test_close(what, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
        test_close(what, 0, r.dparams[0], dg, sizeof(double), ch, TEST_OF_ARRAY, TOL);
        test_close(what, 0, r.dparams[1], db, sizeof(double), ch, TEST_OF_ARRAY, TOL);
        test_close(what, 0, r.params_after[2], mean, sizeof(double), ch, TEST_OF_ARRAY, TOL);
        test_close(what, 0, r.params_after[3], var, sizeof(double), ch, TEST_OF_ARRAY, TOL);
    } else {
        test_close(what, 0, r.params_after[2], r.params[2], sizeof(double), ch, TEST_OF_ARRAY,
                   0);  /* untouched */
        test_close(what, 0, r.params_after[3], r.params[3], sizeof(double), ch, TEST_OF_ARRAY, 0);
    }
    free(y), free(dx), free(mean), free(var), free(dg), free(db), free(z), free(dz);
    layer_run_free(&r);
}

static kiln_node build_dropout(kiln_model *m, kiln_node pre, const void *arg)
{
    const kiln_dropout_options o = {.struct_size = sizeof o, .rate = *(const float *)arg,
                                    .seed = 7};
    return kiln_dropout(m, pre, &o);
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

typedef struct ln_case {
    float epsilon;
    int no_center, no_scale;
} ln_case;

static kiln_node build_ln(kiln_model *m, kiln_node pre, const void *arg)
{
    const ln_case *c = arg;
    kiln_layer_norm_options o = {.struct_size = sizeof o, .epsilon = c->epsilon,
                                 .no_center = c->no_center, .no_scale = c->no_scale};
    return kiln_layer_normalization(m, pre, &o);
}

/* Layer norm over the last axis, forward (in training and as evaluate runs
 * it: the same) and backward, against float64. Its random gamma and beta
 * come from layer_run_once. */
static void test_ln(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                    const ln_case *c)
{
    const int ch = dims[rank - 1];
    char what[160];
    for (int training = 1; training >= 0; training--) {
        layer_run r;
        check_training = training;
        const int ok = layer_run_once(ctx, rank, dims, batch, build_ln, c, &r);
        check_training = 1;
        if (!ok)
            return;
        const int rows = (int)(batch * r.in_size / ch);
        snprintf(what, sizeof what, "layer_normalization %s, %d rows x %d%s%s, epsilon %g",
                 training ? "training" : "inference", rows, ch,
                 c->no_center ? ", no center" : "", c->no_scale ? ", no scale" : "",
                 (double)(c->epsilon ? c->epsilon : 1e-3f));
        const int64_t n = batch * r.in_size;
        const double *gamma = c->no_scale ? NULL : r.params[0];
        const double *beta = c->no_center ? NULL : r.params[c->no_scale ? 0 : 1];
        double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
        double *dg = calloc((size_t)ch, sizeof(double)), *db = calloc((size_t)ch, sizeof(double));
        const double eps = c->epsilon ? c->epsilon : 1e-3;
        CHECK(r.n_params == !c->no_scale + !c->no_center);
        ref_layer_norm_forward(rows, ch, r.x, gamma, beta, eps, y);
        test_worst = 0;
        test_close(what, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, TOL);
        if (training) {
            ref_layer_norm_backward(rows, ch, r.x, gamma, eps, r.dy, dx, dg, db);
            test_close(what, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
            if (gamma)
                test_close(what, 0, r.dparams[0], dg, sizeof(double), ch, TEST_OF_ARRAY, TOL);
            if (beta)
                test_close(what, 0, r.dparams[c->no_scale ? 0 : 1], db, sizeof(double), ch,
                           TEST_OF_ARRAY, TOL);
        }
        printf("%s: largest error %.2g\n", what, test_worst);
        free(y), free(dx), free(dg), free(db);
        layer_run_free(&r);
    }
}

typedef struct shape_case {
    int32_t rank;
    int32_t dims[KILN_MAX_RANK];
    int32_t axis;    /* concatenate */
    int n;           /* concatenate: inputs, each pre (the last tanh(pre) when n > 2) */
} shape_case;

static kiln_node build_reshape(kiln_model *m, kiln_node pre, const void *arg)
{
    const shape_case *c = arg;
    return kiln_reshape(m, pre, c->rank, c->dims, NULL);
}

static kiln_node build_permute(kiln_model *m, kiln_node pre, const void *arg)
{
    const shape_case *c = arg;
    return kiln_permute(m, pre, c->rank, c->dims, NULL);
}

/* Permute of a (3, 5, 7) sample: output value (a, b, c) is the input's at
 * the coordinates it came from; backward sends dy to the same places. */
static void test_permute(kiln_context *ctx, const int32_t *dims, int batch, const shape_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build_permute, c, &r))
        return;
    char what[128];
    snprintf(what, sizeof what, "permute (%d, %d, %d) by (%d, %d, %d), batch %d", dims[0],
             dims[1], dims[2], c->dims[0], c->dims[1], c->dims[2], batch);
    CHECK(r.out_size == r.in_size);
    const int64_t n = batch * r.in_size;
    double *y = calloc((size_t)n, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    const int32_t od[3] = {dims[c->dims[0] - 1], dims[c->dims[1] - 1], dims[c->dims[2] - 1]};
    const int64_t stride[3] = {dims[1] * dims[2], dims[2], 1};
    for (int64_t s = 0; s < batch; s++)
        for (int32_t a = 0; a < od[0]; a++)
            for (int32_t b = 0; b < od[1]; b++)
                for (int32_t k = 0; k < od[2]; k++) {
                    const int64_t o = s * r.in_size + ((int64_t)a * od[1] + b) * od[2] + k;
                    const int64_t i = s * r.in_size + a * stride[c->dims[0] - 1] +
                                      b * stride[c->dims[1] - 1] + k * stride[c->dims[2] - 1];
                    y[o] = r.x[i];
                    dx[i] = r.dy[o];
                }
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), n, TEST_OF_ARRAY, 0);
    test_close(what, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, 0);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y);
    free(dx);
    layer_run_free(&r);
}

/* Concatenate(Concatenate(pre, pre), pre, ..., tanh(pre)) with n inputs:
 * inputs of different lengths on the axis (the first twice the others'),
 * one node given several times, and one input through another node. */
static kiln_node build_concatenate(kiln_model *m, kiln_node pre, const void *arg)
{
    const shape_case *c = arg;
    const kiln_node pair[] = {pre, pre};
    const kiln_concatenate_options named = {.struct_size = sizeof named, .name = "pair",
                                            .axis = c->axis};
    const kiln_concatenate_options o = {.struct_size = sizeof o, .axis = c->axis};
    const kiln_activation_layer_options t = {.struct_size = sizeof t, .name = "t"};
    kiln_node in[8] = {kiln_concatenate(m, pair, 2, &named)};
    for (int k = 1; k < c->n; k++)
        in[k] = k == c->n - 1 && c->n > 2 ? kiln_activation_layer(m, pre, KILN_ACTIVATION_TANH, &t)
                                          : pre;
    return kiln_concatenate(m, in, c->n, &o);
}

static void test_reshape(kiln_context *ctx, const int32_t *dims, int batch, const shape_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build_reshape, c, &r))
        return;
    char what[128], to[64];
    kiln_shape target = {.rank = c->rank};
    memcpy(target.dims, c->dims, sizeof target.dims);
    snprintf(what, sizeof what, "reshape (%d, %d, %d) to %s, batch %d", dims[0], dims[1],
             dims[2], kiln_shape_str(&target, to, sizeof to), batch);
    CHECK(r.out_size == r.in_size);
    const int64_t n = batch * r.in_size;
    test_worst = 0;
    test_close(what, 0, r.y, r.x, sizeof(double), n, TEST_OF_ARRAY, 0);
    test_close(what, 0, r.dx, r.dy, sizeof(double), n, TEST_OF_ARRAY, 0);
    printf("%s: largest error %.2g\n", what, test_worst);
    layer_run_free(&r);
}

static void test_concatenate(kiln_context *ctx, int32_t rank, const int32_t *dims, int batch,
                             const shape_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_concatenate, c, &r))
        return;
    /* Blocks along the axis: pre, pre (the pair), then pre ... or tanh(pre). */
    const int at = c->axis > 0 ? c->axis - 1 : rank + c->axis, blocks = c->n + 1;
    int64_t outer = batch, inner = 1;
    for (int d = 0; d < at; d++)
        outer *= dims[d];
    for (int d = at; d < rank; d++)
        inner *= dims[d];   /* one block's width: the axis and the axes after it */
    char what[128];
    snprintf(what, sizeof what, "concatenate %d inputs on axis %d of rank %d, batch %d",
             c->n, (int)c->axis, (int)rank, batch);
    CHECK(r.out_size == blocks * r.in_size);
    const int64_t n = batch * r.in_size, ny = blocks * n;
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)n, sizeof(double));
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < blocks; k++)
            for (int64_t j = 0; j < inner; j++) {
                const int64_t xi = o * inner + j, yi = (o * blocks + k) * inner + j;
                const int t = c->n > 2 && k == blocks - 1;
                const double v = r.x[xi], tv = tanh(v);
                y[yi] = t ? tv : v;
                dx[xi] += t ? r.dy[yi] * (1 - tv * tv) : r.dy[yi];
            }
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), n, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

/* Dot(pre, tanh(pre)), or Dot(pre, pre): the same node given twice. */
static kiln_node build_dot(kiln_model *m, kiln_node pre, const void *arg)
{
    const int same = *(const int *)arg;
    const kiln_activation_layer_options t = {.struct_size = sizeof t, .name = "t"};
    return kiln_dot(m, pre, same ? pre : kiln_activation_layer(m, pre, KILN_ACTIVATION_TANH, &t),
                    NULL);
}

static void test_dot(kiln_context *ctx, int32_t d, int batch, int same)
{
    layer_run r;
    const int32_t dims[] = {d};
    if (!layer_run_once(ctx, 1, dims, batch, build_dot, &same, &r))
        return;
    char what[96];
    snprintf(what, sizeof what, "dot of (%d,) %s, batch %d", (int)d,
             same ? "with itself" : "and its tanh", batch);
    CHECK(r.out_size == 1);
    double *y = calloc((size_t)batch, sizeof(double)), *dx = calloc((size_t)(batch * d), 8);
    for (int b = 0; b < batch; b++)
        for (int32_t k = 0; k < d; k++) {
            const double x = r.x[b * d + k], t = same ? x : tanh(x);
            const double dt = same ? 1.0 : 1.0 - t * t;
            y[b] += x * t;
            dx[b * d + k] = r.dy[b] * (t + x * dt);
        }
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), batch, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), batch * d, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

/* MatMul(pre, reshape(tanh(pre), b)), or MatMul(pre, pre): samples of
 * shapes a and b (one size, so that one input gives both). */
typedef struct matmul_case {
    int32_t ra, rb;
    int32_t a[4], b[4];
    int same;
} matmul_case;

static kiln_node build_matmul(kiln_model *m, kiln_node pre, const void *arg)
{
    const matmul_case *c = arg;
    if (c->same)
        return kiln_matmul(m, pre, pre, NULL);
    const kiln_activation_layer_options t = {.struct_size = sizeof t, .name = "t"};
    const kiln_node tanh_node = kiln_activation_layer(m, pre, KILN_ACTIVATION_TANH, &t);
    return kiln_matmul(m, pre, kiln_reshape(m, tanh_node, c->rb, c->b, NULL), NULL);
}

/* Where leading index `at` (of the output's leading axes `lead`, rank
 * r - 2) starts in an operand of rank `rank` and dims `dims`: broadcast
 * axes (1 or absent) stay at 0. */
static int64_t ref_matmul_start(int32_t r, const int32_t *lead, int64_t at, int32_t rank,
                                const int32_t *dims)
{
    int64_t start = 0, stride = (int64_t)dims[rank - 2] * dims[rank - 1];
    for (int32_t j = r - 3; j >= 0; j--) {
        const int64_t i = at % lead[j];
        at /= lead[j];
        const int32_t d = j - (r - rank);
        if (d >= 0) {
            start += (dims[d] == 1 ? 0 : i) * stride;
            stride *= dims[d];
        }
    }
    return start;
}

static void test_matmul(kiln_context *ctx, int batch, const matmul_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, c->ra, c->a, batch, build_matmul, c, &r))
        return;
    const int32_t ra = c->ra, rb = c->same ? c->ra : c->rb;
    const int32_t *bd = c->same ? c->a : c->b;
    const int32_t rank = ra > rb ? ra : rb;
    const int64_t m = c->a[ra - 2], k = c->a[ra - 1], n = bd[rb - 1];
    int32_t lead[4];
    int64_t products = 1;
    for (int32_t j = 0; j < rank - 2; j++) {
        const int32_t ja = j - (rank - ra), jb = j - (rank - rb);
        const int32_t da = ja < 0 ? 1 : c->a[ja], db = jb < 0 ? 1 : bd[jb];
        lead[j] = da == 1 ? db : da;
        products *= lead[j];
    }
    CHECK(r.out_size == products * m * n);
    const int64_t size = r.in_size, ny = batch * r.out_size;
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)(batch * size), 8);
    double *b = malloc(sizeof(double) * (size_t)(batch * size));
    double *da = calloc((size_t)(batch * size), 8), *db = calloc((size_t)(batch * size), 8);
    for (int64_t i = 0; i < batch * size; i++)
        b[i] = c->same ? r.x[i] : tanh(r.x[i]);
    for (int s = 0; s < batch; s++)
        for (int64_t p = 0; p < products; p++) {
            const int64_t a0 = s * size + ref_matmul_start(rank, lead, p, ra, c->a);
            const int64_t b0 = s * size + ref_matmul_start(rank, lead, p, rb, bd);
            const int64_t y0 = s * r.out_size + p * m * n;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double sum = 0;
                    const double g = r.dy[y0 + i * n + j];
                    for (int64_t l = 0; l < k; l++) {
                        sum += r.x[a0 + i * k + l] * b[b0 + l * n + j];
                        da[a0 + i * k + l] += g * b[b0 + l * n + j];
                        db[b0 + l * n + j] += g * r.x[a0 + i * k + l];
                    }
                    y[y0 + i * n + j] = sum;
                }
        }
    for (int64_t i = 0; i < batch * size; i++)
        dx[i] = da[i] + db[i] * (c->same ? 1.0 : 1.0 - b[i] * b[i]);
    char what[128];
    snprintf(what, sizeof what, "matmul of rank %d and %d%s, batch %d", (int)ra, (int)rb,
             c->same ? " (one node twice)" : "", batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), batch * size, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dx), free(b), free(da), free(db);
    layer_run_free(&r);
}

/* Slice(pre): a window of each sample, steps negative included. */
static kiln_node build_slice(kiln_model *m, kiln_node pre, const void *arg)
{
    return kiln_slice(m, pre, arg);
}

static void test_slice(kiln_context *ctx, int32_t rank, const int32_t *dims, int batch,
                       const kiln_slice_options *o)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_slice, o, &r))
        return;
    int32_t out[4] = {1, 1, 1, 1}, in[4] = {1, 1, 1, 1}, begin[4] = {0}, step[4] = {1, 1, 1, 1};
    const int pad = 4 - rank;
    for (int a = 0; a < rank; a++) {
        const int32_t st = o->step[a] ? o->step[a] : 1;
        in[pad + a] = dims[a];
        begin[pad + a] = o->begin[a];
        step[pad + a] = st;
        out[pad + a] = o->size[a] ? o->size[a]
                       : st > 0 ? (dims[a] - 1 - o->begin[a]) / st + 1 : o->begin[a] / -st + 1;
    }
    const int64_t out_size = (int64_t)out[0] * out[1] * out[2] * out[3];
    CHECK(r.out_size == out_size);
    double *y = calloc((size_t)(batch * out_size), 8), *dx = calloc((size_t)(batch * r.in_size), 8);
    for (int n = 0; n < batch; n++)
        for (int64_t i = 0; i < out_size; i++) {
            int64_t rest = i, at = 0, stride = 1;
            for (int a = 3; a >= 0; a--) {
                at += (begin[a] + rest % out[a] * step[a]) * stride;
                rest /= out[a];
                stride *= in[a];
            }
            y[n * out_size + i] = r.x[n * r.in_size + at];
            dx[n * r.in_size + at] += r.dy[n * out_size + i];
        }
    char what[160];
    snprintf(what, sizeof what, "slice of rank %d from (%d, %d, %d, %d) by (%d, %d, %d, %d), "
             "batch %d", (int)rank, begin[0], begin[1], begin[2], begin[3], step[0], step[1],
             step[2], step[3], batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), batch * out_size, TEST_OF_ARRAY, 0);
    test_close(what, 0, r.dx, dx, sizeof(double), batch * r.in_size, TEST_OF_ARRAY, 0);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

/* Expand(pre) to a target shape (in a shape_case's rank and dims). */
static kiln_node build_expand(kiln_model *m, kiln_node pre, const void *arg)
{
    const shape_case *c = arg;
    return kiln_expand(m, pre, c->rank, c->dims, NULL);
}

static void test_expand(kiln_context *ctx, int32_t rank, const int32_t *dims, int batch,
                        const shape_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_expand, c, &r))
        return;
    int32_t in[4] = {1, 1, 1, 1}, out[4] = {1, 1, 1, 1};
    for (int a = 0; a < rank; a++)
        in[4 - rank + a] = dims[a];
    for (int a = 0; a < c->rank; a++)
        out[4 - c->rank + a] = c->dims[a];
    const int64_t out_size = (int64_t)out[0] * out[1] * out[2] * out[3];
    CHECK(r.out_size == out_size);
    double *y = calloc((size_t)(batch * out_size), 8), *dx = calloc((size_t)(batch * r.in_size), 8);
    for (int n = 0; n < batch; n++)
        for (int64_t i = 0; i < out_size; i++) {
            int64_t rest = i, at = 0, stride = 1;
            for (int a = 3; a >= 0; a--) {
                at += (in[a] == 1 ? 0 : rest % out[a]) * stride;
                rest /= out[a];
                stride *= in[a];
            }
            y[n * out_size + i] = r.x[n * r.in_size + at];
            dx[n * r.in_size + at] += r.dy[n * out_size + i];
        }
    char what[160];
    snprintf(what, sizeof what, "expand (%d, %d, %d, %d) to (%d, %d, %d, %d), batch %d", in[0],
             in[1], in[2], in[3], out[0], out[1], out[2], out[3], batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), batch * out_size, TEST_OF_ARRAY, 0);
    test_close(what, 0, r.dx, dx, sizeof(double), batch * r.in_size, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dx);
    layer_run_free(&r);
}

/* LearnedTokens beside pre (the tokens' shape in a shape_case's rank and
 * dims): every sample's output the parameter, its gradient the sum of dy
 * over the batch, pre's gradient zero. */
static kiln_node build_learned_tokens(kiln_model *m, kiln_node pre, const void *arg)
{
    const shape_case *c = arg;
    return kiln_learned_tokens(m, pre, c->rank, c->dims, NULL);
}

static void test_learned_tokens(kiln_context *ctx, int32_t rank, const int32_t *dims,
                                int batch, const shape_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_learned_tokens, c, &r))
        return;
    int64_t size = 1;
    for (int a = 0; a < c->rank; a++)
        size *= c->dims[a];
    CHECK(r.out_size == size);
    double *y = calloc((size_t)(batch * size), 8), *dt = calloc((size_t)size, 8);
    double *dx = calloc((size_t)(batch * r.in_size), 8);
    for (int n = 0; n < batch; n++)
        for (int64_t i = 0; i < size; i++) {
            y[n * size + i] = r.params[0][i];
            dt[i] += r.dy[n * size + i];
        }
    char what[160];
    snprintf(what, sizeof what, "learned_tokens of %lld values, batch %d", (long long)size,
             batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), batch * size, TEST_OF_ARRAY, 0);
    test_close(what, 0, r.dparams[0], dt, sizeof(double), size, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), batch * r.in_size, TEST_OF_ARRAY, 0);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(y), free(dt), free(dx);
    layer_run_free(&r);
}

/* How check_embedding picks its ids. */
typedef enum id_pattern {
    IDS_RANDOM,     /* sample 0 repeats one id; the rest repeat by chance */
    IDS_ONE_OR_ONCE /* every other slot one id, the others an id each of their own */
} id_pattern;

/* Int Input (dims) -> Embedding(vocab, width), as the model's output: ids
 * that repeat within a sample and across the batch, the table's gradient
 * bit for bit the same twice, and bit for bit the float32 sum of each id's
 * rows in slot order (the order both kernel variants' links give). */
static void check_embedding(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                            int vocab, int width, id_pattern pattern)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_input_ints(m, rank, dims, &(kiln_input_options){.name = "ids"});
    const kiln_embedding_options eo = {.struct_size = sizeof eo, .input_dim = vocab,
                                       .output_dim = width};
    const kiln_node node = kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD};
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    const int per = (int)kiln_node_size(m, 0), n = batch * per;
    const int64_t table = (int64_t)vocab * width;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (pattern == IDS_ONE_OR_ONCE)
            ids[i] = i % 2 ? 1 + i / 2 : 0;
        else
            ids[i] = i < per ? 3 % vocab
                             : (int32_t)((check_uniform() + 1.0) * 0.5 * vocab) % vocab;
    ids[n - 1] = vocab - 1;       /* the table's last row is reached */
    float *flat = calloc(m->plan.n_param_floats, sizeof(float));
    for (size_t i = 0; i < m->plan.n_param_floats; i++)
        flat[i] = (float)check_uniform();
    float *y = malloc(sizeof(float) * (size_t)n * (size_t)width);
    float *g = malloc(sizeof(float) * (size_t)n * (size_t)width);
    for (int i = 0; i < n * width; i++)
        g[i] = (float)check_uniform();
    float *grads[2];
    const kiln_batch b = {.n = batch, .features = (const float *)ids};
    CHECK_OK(ctx, kiln_replica_write_params(r, flat));
    CHECK_OK(ctx, kiln_replica_upload(r, &b));
    CHECK_OK(ctx, kiln_replica_forward(r, batch, 1));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->act[node], 0, y, sizeof(float) * (size_t)n * width));
    for (int k = 0; k < 2; k++) {   /* twice: the gradient must not change by a bit */
        grads[k] = calloc(m->plan.n_param_floats, sizeof(float));
        CHECK_OK(ctx, kiln_buffer_write(r->dev, r->grad[node], 0, g,
                                        sizeof(float) * (size_t)n * width, 1));
        CHECK_OK(ctx, kiln_replica_backward(r, batch, NULL, NULL));
        CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grads, 0, grads[k],
                                       sizeof(float) * r->n_grad_floats));
    }
    CHECK(memcmp(grads[0], grads[1], sizeof(float) * r->n_grad_floats) == 0);

    const size_t at = m->graph.nodes[node].param_offset[0];
    double *t = to_double(flat + at, table), *gy = to_double(g, (int64_t)n * width);
    double *want_y = malloc(sizeof(double) * (size_t)n * width);
    double *want_dt = malloc(sizeof(double) * (size_t)table);
    double *got_y = to_double(y, (int64_t)n * width), *got_dt = to_double(grads[0] + at, table);
    ref_embedding_forward(n, width, ids, t, want_y);
    ref_embedding_backward(n, vocab, width, ids, gy, want_dt);
    char what[96];
    snprintf(what, sizeof what, "embedding forward, %d x %d ids, %d x %d table", batch, per,
             vocab, width);
    test_close(what, 0, got_y, want_y, sizeof(double), (int64_t)n * width, TEST_OF_ARRAY,
               0.0);  /* a copy: exact */
    snprintf(what, sizeof what, "embedding backward, %d x %d ids, %d x %d table", batch, per,
             vocab, width);
    test_close(what, 0, got_dt, want_dt, sizeof(double), table, TEST_OF_ARRAY, 1e-6);
    float *in_order = calloc((size_t)table, sizeof(float));
    for (int i = 0; i < n; i++)
        for (int c = 0; c < width; c++)
            in_order[(size_t)ids[i] * width + c] += g[(size_t)i * width + c];
    CHECK(memcmp(in_order, grads[0] + at, sizeof(float) * (size_t)table) == 0);
    free(in_order);
    printf("%s: table gradient bit for bit the same twice and as summed in slot order\n",
           what);
    free(t);
    free(gy);
    free(want_y);
    free(want_dt);
    free(got_y);
    free(got_dt);
    free(grads[0]);
    free(grads[1]);
    free(ids);
    free(flat);
    free(y);
    free(g);
    kiln_model_destroy(m);
}

static kiln_node build_position(kiln_model *m, kiln_node pre, const void *arg)
{
    const kiln_position_embedding_options o = {.struct_size = sizeof o,
                                               .max_length = *(const int32_t *)arg};
    return kiln_position_embedding(m, pre, &o);
}

static void check_position(kiln_context *ctx, int length, int width, int max_length, int batch)
{
    const int32_t dims[] = {length, width};
    layer_run r;
    if (!layer_run_once(ctx, 2, dims, batch, build_position, &max_length, &r))
        return;
    const int64_t ny = (int64_t)batch * length * width, nt = (int64_t)max_length * width;
    double *y = malloc(sizeof(double) * (size_t)ny), *dt = malloc(sizeof(double) * (size_t)nt);
    ref_position_embedding_forward(batch, length, width, r.x, r.params[0], y);
    ref_position_embedding_backward(batch, length, max_length, width, r.dy, dt);
    char what[96];
    snprintf(what, sizeof what, "position_embedding forward, %d x (%d, %d), max_length %d",
             batch, length, width, max_length);
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, 1e-6);
    snprintf(what, sizeof what, "position_embedding backward, %d x (%d, %d), max_length %d",
             batch, length, width, max_length);
    test_close(what, 0, r.dparams[0], dt, sizeof(double), nt, TEST_OF_ARRAY, 1e-6);
    test_close("position_embedding input gradient", 0, r.dx, r.dy, sizeof(double), ny,
               TEST_OF_ARRAY, 0.0);
    printf("%s: checked\n", what);
    free(y);
    free(dt);
    layer_run_free(&r);
}

int main(void)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");

    const int32_t ids1[] = {5}, ids2[] = {3, 2}, ids3[] = {2, 3, 1};
    check_embedding(ctx, 1, ids1, 7, 11, 13, IDS_RANDOM);
    check_embedding(ctx, 2, ids2, 5, 3, 4, IDS_RANDOM);   /* 30 ids of 3 values: all repeat */
    check_embedding(ctx, 3, ids3, 3, 97, 33, IDS_RANDOM);
    check_embedding(ctx, 1, ids1, 1, 1, 1, IDS_RANDOM);
    /* More ids than the GPU variant's sort takes in one block (512), not a
     * power of two: its global passes; then one id in half of 1500 slots,
     * the others once each (the last slot the table's last row). */
    const int32_t ids_many[] = {37, 29}, ids_long[] = {300};
    check_embedding(ctx, 2, ids_many, 3, 50, 3, IDS_RANDOM);
    check_embedding(ctx, 1, ids_long, 5, 760, 2, IDS_ONE_OR_ONCE);
    check_position(ctx, 5, 6, 8, 7);
    check_position(ctx, 4, 3, 4, 3);            /* T = max_length */
    check_position(ctx, 1, 1, 9, 1);

    const int32_t flat37[] = {37}, cube[] = {2, 3, 5};
    for (int act = KILN_ACTIVATION_LINEAR; act <= KILN_ACTIVATION_LAST; act++) {
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
     * itself (with its bias, or after its GEMM without one), but those
     * whose gradient needs their input, which the runtime applies. */
    check_inner = 1;
    for (int act = KILN_ACTIVATION_RELU; act <= KILN_ACTIVATION_LAST; act++) {
        dense_case c = {.units = 19, .act = (kiln_activation)act,
                        .no_bias = act == KILN_ACTIVATION_TANH || act == KILN_ACTIVATION_SILU};
        if (act != KILN_ACTIVATION_SOFTMAX && act != KILN_ACTIVATION_LOG_SOFTMAX)
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
        {.padding = KILN_PADDING_VALID, .act = KILN_ACTIVATION_LINEAR, .pool = POOL_GLOBAL_MAX},
    };
    /* More channels than one vector of eight holds, for the pooling kernels. */
    const int32_t wide[] = {6, 5, 11};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        test_conv(ctx, img, 1, &convs[i]);
        test_conv(ctx, tall, 3, &convs[i]);
        if (convs[i].pool)
            test_conv(ctx, wide, 2, &convs[i]);
    }
    /* ONNX's and PyTorch's pooling: asymmetric pads, ceil_mode at stride 2
     * (the last window past the input, or dropped where it would start in
     * the padding after), count_include_pad both ways. */
    const conv_case onnx_pools[] = {
        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 0, 2, 1}, .pool = POOL_MAX},
        {.kh = 3, .kw = 2, .sh = 2, .sw = 2, .padding = KILN_PADDING_VALID, .ceil_mode = 1,
         .pool = POOL_MAX},
        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 1, 1, 1}, .ceil_mode = 1, .pool = POOL_MAX},
        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 0, 2, 1}, .pool = POOL_AVERAGE},
        {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 0, 2, 1}, .include_pad = 1, .pool = POOL_AVERAGE},
        {.kh = 3, .kw = 2, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 1, 0, 1}, .ceil_mode = 1, .include_pad = 1, .pool = POOL_AVERAGE},
        {.kh = 3, .kw = 2, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 1, 0, 1}, .ceil_mode = 1, .pool = POOL_AVERAGE},
        {.kh = 3, .kw = 3, .sh = 2, .sw = 1, .padding = KILN_PADDING_SAME, .include_pad = 1,
         .pool = POOL_AVERAGE},
        /* Stride 3: on (9, 7) and (11, 4) ceil_mode would add a window
         * starting in the padding after; PyTorch's rule drops it. */
        {.kh = 3, .kw = 3, .sh = 3, .sw = 3, .padding = KILN_PADDING_EXPLICIT,
         .pads = {0, 0, 2, 2}, .ceil_mode = 1, .pool = POOL_MAX},
        {.kh = 3, .kw = 3, .sh = 3, .sw = 3, .padding = KILN_PADDING_EXPLICIT,
         .pads = {0, 0, 2, 2}, .ceil_mode = 1, .include_pad = 1, .pool = POOL_AVERAGE},
    };
    for (size_t i = 0; i < sizeof onnx_pools / sizeof onnx_pools[0]; i++) {
        test_conv(ctx, img, 2, &onnx_pools[i]);
        test_conv(ctx, tall, 3, &onnx_pools[i]);
        test_conv(ctx, wide, 2, &onnx_pools[i]);
    }
    /* The seed CNN's first layer: enough output pixels that the direct
     * path's weight gradient is summed in several chunks, the last partial. */
    const int32_t fashion[] = {28, 28, 1};
    const conv_case seed = {.filters = 32, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                            .padding = KILN_PADDING_VALID, .act = KILN_ACTIVATION_RELU};
    test_conv(ctx, fashion, 5, &seed);
    /* The direct kernels' filter blocks: more filters than one pass of 32
     * takes, the last block partial; 'same' padding on an image wide
     * enough that some runs of four pixels lie inside it and some do not. */
    const int32_t wide_rgb[] = {9, 13, 3};
    const conv_case many = {.filters = 37, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                            .padding = KILN_PADDING_SAME, .act = KILN_ACTIVATION_RELU};
    const conv_case strided = {.filters = 12, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
                               .padding = KILN_PADDING_SAME, .act = KILN_ACTIVATION_LINEAR};
    test_conv(ctx, wide_rgb, 3, &many);
    test_conv(ctx, wide_rgb, 2, &strided);
    /* Dilated, on an image wide enough that the direct kernels' runs of
     * four windows lie inside it ('valid': the weight gradient's no-checks
     * path too) and, padded, partly outside. */
    const conv_case spread[] = {
        {.filters = 12, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_VALID,
         .dil = {2, 2}, .act = KILN_ACTIVATION_RELU},
        {.filters = 35, .kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 2, 2, 0}, .dil = {2, 3}, .act = KILN_ACTIVATION_LINEAR},
    };
    test_conv(ctx, wide_rgb, 2, &spread[0]);
    test_conv(ctx, wide_rgb, 3, &spread[1]);
    /* ONNX's and PyTorch's attributes: asymmetric explicit pads (a side
     * without, a side wider than the window leaves), through the direct
     * kernels (small patches) and im2col + GEMM (larger ones). */
    const conv_case onnx_convs[] = {
        {.filters = 5, .kh = 3, .kw = 2, .sh = 1, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {2, 0, 1, 3}, .act = KILN_ACTIVATION_RELU},
        {.filters = 7, .kh = 3, .kw = 3, .sh = 2, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .pads = {0, 1, 2, 1}, .act = KILN_ACTIVATION_LINEAR, .no_bias = 1},
        /* Dilated: with explicit pads, 'same' and 'valid', unequal. */
        {.filters = 4, .kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .pads = {2, 1, 1, 0}, .dil = {2, 2}, .act = KILN_ACTIVATION_RELU},
        {.filters = 33, .kh = 3, .kw = 3, .sh = 1, .sw = 2, .padding = KILN_PADDING_SAME,
         .dil = {2, 1}, .act = KILN_ACTIVATION_LINEAR},
        {.filters = 3, .kh = 2, .kw = 3, .sh = 2, .sw = 1, .padding = KILN_PADDING_VALID,
         .dil = {3, 2}, .act = KILN_ACTIVATION_TANH},
    };
    const int32_t rgb[] = {8, 7, 3}, deep_small[] = {7, 6, 6};
    for (size_t i = 0; i < sizeof onnx_convs / sizeof onnx_convs[0]; i++) {
        test_conv(ctx, rgb, 2, &onnx_convs[i]);
        test_conv(ctx, deep_small, 3, &onnx_convs[i]);
    }
    /* 3x3 stride-1 'same' with 128 or more channels each way: Winograd's
     * F(2x2, 3x3) here (im2col + GEMM in test_layers_clblast); odd sizes
     * leave tiles partly outside the image. */
    const int32_t deep[] = {5, 3, 128}, deeper[] = {2, 7, 130};
    const conv_case wino[] = {
        {.filters = 128, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_RELU},
        {.filters = 133, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR, .no_bias = 1},
    };
    for (size_t i = 0; i < 2; i++) {
        test_conv(ctx, deep, 1, &wino[i]);
        test_conv(ctx, deeper, 3, &wino[i]);
    }
    /* In a residual block, whose input gradient the convolution adds to
     * what the block's Add wrote first. */
    const conv_case wino_residual[] = {
        {.filters = 128, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_RELU},
        {.filters = 130, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR},
    };
    check_residual = 1;
    test_conv(ctx, deep, 2, &wino_residual[0]);
    test_conv(ctx, deeper, 2, &wino_residual[1]);
    check_residual = 0;
    /* Grouped: two groups through the grouped GEMM; depthwise (groups ==
     * channels == filters) through its own kernels here and the grouped
     * GEMM in test_layers_clblast, strided, dilated, with asymmetric pads;
     * and a deep 3x3 'same' grouped one that Winograd must skip. */
    const conv_case grouped[] = {
        {.filters = 6, .kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .groups = 2, .act = KILN_ACTIVATION_RELU},
        {.filters = 4, .kh = 2, .kw = 3, .sh = 2, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 2, 0, 1}, .dil = {2, 1}, .groups = 2, .act = KILN_ACTIVATION_LINEAR,
         .no_bias = 1},
    };
    const int32_t quad[] = {7, 9, 4}, six[] = {8, 5, 6};
    for (size_t i = 0; i < sizeof grouped / sizeof grouped[0]; i++) {
        test_conv(ctx, quad, 2, &grouped[i]);
        test_conv(ctx, six, 3, &grouped[i]);
    }
    const conv_case depthwise[] = {
        {.filters = 6, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .groups = 6, .act = KILN_ACTIVATION_RELU},
        {.filters = 6, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 0, 2, 1}, .groups = 6, .act = KILN_ACTIVATION_LINEAR, .no_bias = 1},
        {.filters = 6, .kh = 3, .kw = 2, .sh = 1, .sw = 2, .padding = KILN_PADDING_VALID,
         .dil = {2, 2}, .groups = 6, .act = KILN_ACTIVATION_TANH},
        /* Stride 1 with uneven explicit padding: the input gradient's taps
         * as loop bounds (conv2d_depthwise.cl), clipped on every side. */
        {.filters = 6, .kh = 5, .kw = 3, .sh = 1, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .pads = {2, 0, 1, 2}, .groups = 6, .act = KILN_ACTIVATION_LINEAR},
    };
    for (size_t i = 0; i < sizeof depthwise / sizeof depthwise[0]; i++)
        test_conv(ctx, six, 3, &depthwise[i]);
    /* Two pixels wide, stride 2, padded after: the last column of taps
     * lies wholly past the image (the weight gradient's bounds of a row
     * segment must then be empty, not one pixel). */
    const int32_t narrow[] = {5, 2, 8};
    const conv_case past = {.filters = 8, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
                            .padding = KILN_PADDING_EXPLICIT, .pads = {1, 0, 1, 1}, .groups = 8,
                            .act = KILN_ACTIVATION_LINEAR};
    test_conv(ctx, narrow, 3, &past);
    /* Enough output pixels that the depthwise weight gradient sums
     * several chunks, the last partial; channels past one vector of 32. */
    const int32_t many_channels[] = {19, 17, 37};
    const conv_case mobile = {.filters = 37, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                              .padding = KILN_PADDING_SAME, .groups = 37,
                              .act = KILN_ACTIVATION_RELU};
    test_conv(ctx, many_channels, 2, &mobile);
    const conv_case deep_grouped = {.filters = 128, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                                    .padding = KILN_PADDING_SAME, .groups = 2,
                                    .act = KILN_ACTIVATION_LINEAR};
    test_conv(ctx, deep, 1, &deep_grouped);
    /* 1x1 stride 1 unpadded: GEMMs on the input and output themselves
     * (conv2d_pointwise.c), with more channels than the direct kernels
     * take, grouped (each group's channels a column block of the rows),
     * and 'same' (no padding at 1x1 either); in a residual block the input
     * gradient is added to the Add's. */
    const int32_t pointwise_in[] = {6, 5, 40};
    const conv_case pointwise[] = {
        {.filters = 24, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_RELU},
        {.filters = 12, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .groups = 4, .act = KILN_ACTIVATION_LINEAR, .no_bias = 1},
        {.filters = 35, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .groups = 5, .act = KILN_ACTIVATION_TANH},
    };
    for (size_t i = 0; i < sizeof pointwise / sizeof pointwise[0]; i++)
        test_conv(ctx, pointwise_in, 3, &pointwise[i]);
    /* Strided 1x1 of few channels: im2col (a gather) + GEMM, not direct. */
    const conv_case strided_1x1 = {.filters = 5, .kh = 1, .kw = 1, .sh = 2, .sw = 2,
                                   .padding = KILN_PADDING_VALID, .act = KILN_ACTIVATION_RELU};
    test_conv(ctx, img, 3, &strided_1x1);
    test_conv(ctx, pointwise_in, 2, &strided_1x1);
    const conv_case pointwise_residual = {.filters = 40, .kh = 1, .kw = 1, .sh = 1, .sw = 1,
                                          .padding = KILN_PADDING_VALID,
                                          .act = KILN_ACTIVATION_LINEAR};
    check_residual = 1;
    test_conv(ctx, pointwise_in, 2, &pointwise_residual);
    check_residual = 0;
    /* 3x3 stride-1 'same' and deep, but dilated: not Winograd's. */
    const conv_case wide_taps = {.filters = 128, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                                 .padding = KILN_PADDING_SAME, .dil = {2, 2},
                                 .act = KILN_ACTIVATION_LINEAR};
    test_conv(ctx, deep, 2, &wide_taps);
    /* Not the output: the activations applied by the convolution itself. */
    check_inner = 1;
    test_conv(ctx, deeper, 2, &wino[0]);
    for (size_t i = 0; i < 4; i++)
        test_conv(ctx, img, 2, &convs[i]);
    test_conv(ctx, fashion, 3, &seed);
    /* The newer activations, with a bias and without (through the direct
     * kernel here, through im2col + GEMM in test_layers_clblast). */
    for (int act = KILN_ACTIVATION_GELU; act <= KILN_ACTIVATION_LAST; act++) {
        if (act == KILN_ACTIVATION_LOG_SOFTMAX)   /* over rows: the runtime's */
            continue;
        conv_case c = convs[act % 2 ? 0 : 2];
        c.act = (kiln_activation)act;
        test_conv(ctx, img, 2, &c);
    }
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
    /* Not the output: the activation applied by the normalisation itself
     * (imported Conv -> BatchNormalization -> Relu), each element-wise one
     * but those whose gradient needs their input, which the runtime
     * applies. */
    check_inner = 1;
    for (int act = KILN_ACTIVATION_RELU; act <= KILN_ACTIVATION_LAST; act++) {
        if (act == KILN_ACTIVATION_SOFTMAX || act == KILN_ACTIVATION_LOG_SOFTMAX)
            continue;
        const bn_case with = {.momentum = 0.5f, .epsilon = 1e-2f, .act = (kiln_activation)act};
        for (int training = 1; training >= 0; training--)
            test_bn(ctx, 3, maps, 3, training, &with);
    }
    check_inner = 0;

    test_dropout(ctx, 0.3f);
    test_dropout(ctx, 0.75f);

    test_elementwise(ctx, "flatten", build_flatten, NULL, KILN_ACTIVATION_LINEAR, 0);
    for (int act = KILN_ACTIVATION_LINEAR; act <= KILN_ACTIVATION_LAST; act++) {
        char name[64];
        kiln_activation a = (kiln_activation)act;
        snprintf(name, sizeof name, "activation layer %s", act_name(a));
        test_elementwise(ctx, name, build_activation, &a, a, 0);
    }
    /* The newer activations again on inputs in [-8, 8): GELU's far tails
     * (erfc, not 1 + erf), SiLU's saturation. */
    check_input_scale = 8.0;
    for (int act = KILN_ACTIVATION_GELU; act <= KILN_ACTIVATION_LAST; act++) {
        char name[64];
        kiln_activation a = (kiln_activation)act;
        snprintf(name, sizeof name, "activation layer %s on [-8, 8)", act_name(a));
        test_elementwise(ctx, name, build_activation, &a, a, 0);
    }
    check_input_scale = 1.0;
    /* Softmax over rows a GPU gives a work-group each (64 lanes): one past
     * a multiple of them, and the whole of one. */
    const kiln_activation softmax = KILN_ACTIVATION_SOFTMAX;
    const int32_t rows129[] = {2, 3, 129}, rows64[] = {2, 3, 64};
    test_elementwise_on(ctx, "activation layer softmax over 129 classes", build_activation,
                        &softmax, softmax, 0, rows129);
    test_elementwise_on(ctx, "activation layer softmax over 64 classes", build_activation,
                        &softmax, softmax, 0, rows64);
    const kiln_activation log_softmax = KILN_ACTIVATION_LOG_SOFTMAX;
    test_elementwise_on(ctx, "activation layer log_softmax over 129 classes", build_activation,
                        &log_softmax, log_softmax, 0, rows129);
    test_elementwise_on(ctx, "activation layer log_softmax over 64 classes", build_activation,
                        &log_softmax, log_softmax, 0, rows64);
    /* Logits near 1e4 (ONNX's test_logsoftmax_large_number): the row's
     * maximum and log(sum) added first would round log's digits away. */
    check_input_offset = 1e4;
    test_elementwise_on(ctx, "activation layer log_softmax of logits near 1e4 over 129 classes",
                        build_activation, &log_softmax, log_softmax, 0, rows129);
    test_elementwise_on(ctx, "activation layer log_softmax of logits near 1e4 over 64 classes",
                        build_activation, &log_softmax, log_softmax, 0, rows64);
    test_elementwise_on(ctx, "activation layer softmax of logits near 1e4 over 64 classes",
                        build_activation, &softmax, softmax, 0, rows64);
    check_input_offset = 0.0;
    /* leaky_relu of other slopes than 0.2: ONNX's default, a negative one
     * (y's sign then hides x's: the gradient reads x), and Keras's own. */
    test_leaky_slope(ctx, 0.01f);
    test_leaky_slope(ctx, -0.5f);
    test_leaky_slope(ctx, 0.2f);
    const int32_t asymmetric[] = {1, 3, 0, 2}, none[] = {0, 0, 0, 0}, around[] = {2, 2, 5, 1};
    test_zero_padding(ctx, 5, 4, 3, asymmetric);
    test_zero_padding(ctx, 3, 7, 9, none);
    test_zero_padding(ctx, 1, 1, 1, around);
    test_elementwise(ctx, "add(pre, pre, tanh(pre))", build_add, NULL, KILN_ACTIVATION_LINEAR,
                     1);

    /* Layer norm: rows narrow (a work-item each) and wide (a work-group
     * each: one lane short of and past a multiple of the 64 lanes), rank 1
     * to 4, batch 1, parameter gradients over one chunk of rows and
     * several; without beta, gamma or either. */
    const int32_t ln7[] = {3, 5, 7}, ln33[] = {33}, ln_wide[] = {2, 129}, ln63[] = {2, 1, 3, 63};
    const int32_t ln_rows[] = {40, 50};
    const ln_case ln_keras = {.epsilon = 0.0f}, ln_eps = {.epsilon = 0.25f};
    const ln_case ln_no_beta = {.no_center = 1}, ln_no_gamma = {.no_scale = 1};
    const ln_case ln_bare = {.no_center = 1, .no_scale = 1};
    test_ln(ctx, 3, ln7, 3, &ln_keras);
    test_ln(ctx, 1, ln33, 1, &ln_keras);
    test_ln(ctx, 1, ln33, 5, &ln_eps);
    test_ln(ctx, 2, ln_wide, 3, &ln_keras);
    test_ln(ctx, 4, ln63, 2, &ln_no_beta);
    test_ln(ctx, 2, ln_rows, 3, &ln_keras);
    test_ln(ctx, 3, ln7, 2, &ln_no_gamma);
    test_ln(ctx, 2, ln_wide, 1, &ln_bare);

    /* Reshape: to each rank, with and without an inferred dimension. */
    const int32_t box[] = {3, 5, 7};
    const shape_case reshapes[] = {
        {.rank = 1, .dims = {105}}, {.rank = 2, .dims = {5, -1}},
        {.rank = 3, .dims = {7, 3, 5}}, {.rank = 4, .dims = {-1, 1, 5, 3}},
    };
    for (size_t i = 0; i < sizeof reshapes / sizeof reshapes[0]; i++)
        test_reshape(ctx, box, i % 2 ? 1 : 3, &reshapes[i]);

    /* Reduce: every op over one axis, several, all (kept and not), of
     * ranks 1 to 4, negative axes; long reductions (the GPU variant's
     * work-groups); the largest and the smallest with ties. */
    const int32_t sample4[] = {2, 3, 4, 5}, long_row[] = {3, 301}, seven[] = {7};
    const reduce_case reductions[] = {
        {.op = KILN_REDUCE_MEAN, .n_axes = 1, .axes = {2}},
        {.op = KILN_REDUCE_SUM, .n_axes = 1, .axes = {-1}, .keepdims = 1},
        {.op = KILN_REDUCE_MAX, .n_axes = 2, .axes = {1, 3}},
        {.op = KILN_REDUCE_MIN, .n_axes = 2, .axes = {-1, 2}, .keepdims = 1},
        {.op = KILN_REDUCE_MEAN, .n_axes = 3, .axes = {1, 2, 3}},
        {.op = KILN_REDUCE_SUM, .n_axes = 3, .axes = {3, 1, 2}, .keepdims = 1},
    };
    for (size_t i = 0; i < sizeof reductions / sizeof reductions[0]; i++)
        test_reduce(ctx, 3, box, i % 2 ? 1 : 3, &reductions[i]);
    const reduce_case of_four[] = {
        {.op = KILN_REDUCE_SUM, .n_axes = 2, .axes = {2, 4}},
        {.op = KILN_REDUCE_MAX, .n_axes = 1, .axes = {1}, .keepdims = 1},
        {.op = KILN_REDUCE_MEAN, .n_axes = 4, .axes = {1, 2, 3, 4}},
    };
    for (size_t i = 0; i < sizeof of_four / sizeof of_four[0]; i++)
        test_reduce(ctx, 4, sample4, 2, &of_four[i]);
    const reduce_case along[] = {
        {.op = KILN_REDUCE_MEAN, .n_axes = 1, .axes = {2}},
        {.op = KILN_REDUCE_MIN, .n_axes = 1, .axes = {-1}},
        {.op = KILN_REDUCE_MAX, .n_axes = 2, .axes = {1, 2}, .keepdims = 1},
        {.op = KILN_REDUCE_SUM, .n_axes = 1, .axes = {1}},
    };
    for (size_t i = 0; i < sizeof along / sizeof along[0]; i++)
        test_reduce(ctx, 2, long_row, 2, &along[i]);
    test_reduce(ctx, 1, seven, 3, &along[3]);
    check_input_step = 0.25;   /* values of 9 levels: ties in every maximum */
    test_reduce(ctx, 3, box, 2, &reductions[2]);
    test_reduce(ctx, 3, box, 2, &reductions[3]);
    test_reduce(ctx, 2, long_row, 2, &along[1]);
    check_input_step = 0.0;
    /* 200000 values of about 1 into one sum and one mean: a float added to
     * a running total value by value would drift. */
    const int32_t plane[] = {500, 400};
    const reduce_case whole[] = {
        {.op = KILN_REDUCE_SUM, .n_axes = 2, .axes = {1, 2}},
        {.op = KILN_REDUCE_MEAN, .n_axes = 2, .axes = {-2, -1}, .keepdims = 1},
    };
    check_input_offset = 1.0;
    test_reduce(ctx, 2, plane, 2, &whole[0]);
    test_reduce(ctx, 2, plane, 1, &whole[1]);
    check_input_offset = 0.0;

    /* Softmax along each axis of ranks 2 to 4, log too, and from an axis
     * through the last (ONNX's before opset 13). */
    for (int axis = 1; axis <= 3; axis++)
        test_softmax_axis(ctx, 3, box, 2, axis, 0, axis == 2);
    test_softmax_axis(ctx, 4, sample4, 2, -3, 0, 0);
    test_softmax_axis(ctx, 4, sample4, 1, 2, 1, 0);
    test_softmax_axis(ctx, 4, sample4, 1, 1, 1, 1);
    test_softmax_axis(ctx, 2, long_row, 3, 1, 0, 1);
    test_softmax_axis(ctx, 3, box, 2, 0, 0, 0);   /* 0: the last */
    const int32_t long_axis[] = {301, 3};   /* rows the GPU variant gives a work-group */
    test_softmax_axis(ctx, 2, long_axis, 2, 1, 0, 0);
    test_softmax_axis(ctx, 2, long_axis, 2, -2, 0, 1);
    test_softmax_axis(ctx, 2, long_row, 2, 1, 1, 0);

    /* Permute: every order of three axes. */
    const shape_case permutes[] = {
        {.rank = 3, .dims = {1, 2, 3}}, {.rank = 3, .dims = {1, 3, 2}},
        {.rank = 3, .dims = {2, 1, 3}}, {.rank = 3, .dims = {2, 3, 1}},
        {.rank = 3, .dims = {3, 1, 2}}, {.rank = 3, .dims = {3, 2, 1}},
    };
    for (size_t i = 0; i < sizeof permutes / sizeof permutes[0]; i++)
        test_permute(ctx, box, i % 2 ? 1 : 3, &permutes[i]);

    /* Concatenate: every axis of rank 3 both ways, rank 1 and 4, 2 to 8
     * inputs. */
    const int32_t line[] = {11}, four[] = {2, 3, 2, 3};
    const shape_case joins[] = {
        {.axis = -1, .n = 3}, {.axis = 1, .n = 3}, {.axis = 2, .n = 2}, {.axis = -2, .n = 4},
        {.axis = 3, .n = 8}, {.axis = -3, .n = 2},
    };
    for (size_t i = 0; i < sizeof joins / sizeof joins[0]; i++)
        test_concatenate(ctx, 3, box, i % 2 ? 1 : 3, &joins[i]);
    const shape_case line_join = {.axis = -1, .n = 3}, four_join = {.axis = 3, .n = 5};
    test_concatenate(ctx, 1, line, 2, &line_join);
    test_concatenate(ctx, 4, four, 3, &four_join);
    /* Dot: odd lengths and batches, two nodes and one node twice. */
    test_dot(ctx, 1, 3, 0);
    test_dot(ctx, 13, 5, 0);
    test_dot(ctx, 37, 2, 1);
    test_dot(ctx, 130, 3, 0);   /* a GPU's work-group per sample: 64 lanes */
    test_dot(ctx, 64, 2, 1);
    /* MatMul: attention's shapes, each operand broadcast over leading axes
     * (its gradient summed), both at once, one node twice, and products
     * large enough for CLBlast's kernels on the GPU variant. */
    const matmul_case matmuls[] = {
        {.ra = 3, .a = {2, 3, 5}, .rb = 3, .b = {2, 5, 3}},
        {.ra = 2, .a = {7, 3}, .rb = 2, .b = {3, 7}},
        {.ra = 3, .a = {2, 3, 4}, .rb = 3, .b = {1, 4, 6}},
        {.ra = 2, .a = {6, 4}, .rb = 4, .b = {2, 1, 4, 3}},
        {.ra = 4, .a = {2, 1, 3, 4}, .rb = 3, .b = {3, 4, 2}},
        {.ra = 4, .a = {3, 2, 1, 4}, .rb = 4, .b = {1, 2, 4, 3}},
        {.ra = 3, .a = {2, 4, 4}, .same = 1},
        {.ra = 3, .a = {3, 40, 24}, .rb = 3, .b = {3, 24, 40}},
    };
    for (size_t i = 0; i < sizeof matmuls / sizeof matmuls[0]; i++)
        test_matmul(ctx, i % 2 ? 1 : 3, &matmuls[i]);
    /* Slice: one axis, every axis, reversed, strided both ways, one index
     * (a class token), sizes left to the steps. Exact: values are copied. */
    const kiln_slice_options slices[] = {
        {.begin = {1}, .size = {2}},
        {.begin = {2, 1, 6}, .size = {1, 2, 0}, .step = {0, 2, -3}},
        {.begin = {0, 4, 0}, .step = {0, -1, 0}},
        {.begin = {1, 0, 1}, .size = {2, 5, 3}, .step = {1, 1, 2}},
        {.begin = {0, 0, 0}, .size = {1, 0, 0}},
    };
    for (size_t i = 0; i < sizeof slices / sizeof slices[0]; i++)
        test_slice(ctx, 3, box, i % 2 ? 1 : 3, &slices[i]);
    const kiln_slice_options four_slice = {.begin = {1, 2, 0, 2}, .step = {-1, -2, 1, 1}};
    test_slice(ctx, 4, four, 2, &four_slice);
    test_slice(ctx, 1, line, 3, &(kiln_slice_options){.begin = {10}, .size = {4}, .step = {-3}});
    /* Expand: a middle axis of 1 repeated (x.unsqueeze(1).expand), leading
     * axes added, every axis repeated, nothing repeated. */
    const int32_t tokens[] = {1, 5}, column[] = {3, 1}, dot1[] = {1};
    const shape_case to_tokens = {.rank = 2, .dims = {4, 5}};
    const shape_case to_four = {.rank = 4, .dims = {2, 3, 3, 6}};
    const shape_case to_cube = {.rank = 3, .dims = {2, 3, 70}};
    const shape_case to_same = {.rank = 3, .dims = {3, 5, 7}};
    test_expand(ctx, 2, tokens, 3, &to_tokens);
    test_expand(ctx, 2, column, 2, &to_four);
    test_expand(ctx, 1, dot1, 3, &to_cube);
    test_expand(ctx, 3, box, 1, &to_same);
    /* LearnedTokens: ViT's class token (1, 8) beside (5, 8) tokens, and a
     * (3, 2, 4) block beside a vector, over batches of 3 and 1. */
    const shape_case one_token = {.rank = 2, .dims = {1, 8}};
    const shape_case block = {.rank = 3, .dims = {3, 2, 4}};
    const int32_t rows[] = {5, 8};
    test_learned_tokens(ctx, 2, rows, 3, &one_token);
    test_learned_tokens(ctx, 1, dot1, 1, &block);
    kiln_context_destroy(ctx);
    return test_finish("test_layers");
}
