/* The binary layer against the float64 reference: every op, on broadcast
 * patterns of a parameter operand on either side (same shape, (T, D) with
 * (D), (H, W, C) with (1, 1, C), (1, T, 1) with (T, D), a single value), of
 * two computed values (squeeze-and-excitation's (H, W, C) * (C), a node
 * with itself: Max and Min ties), the shapes and options refused, and a
 * trained parameter and a constant under the strategies. */
#include "layer_check.h"

#define TOL 2e-5

static double ref_apply(kiln_binary_op op, double x, double y)
{
    switch (op) {
    case KILN_BINARY_ADD: return x + y;
    case KILN_BINARY_SUBTRACT: return x - y;
    case KILN_BINARY_MULTIPLY: return x * y;
    case KILN_BINARY_DIVIDE: return x / y;
    case KILN_BINARY_MAXIMUM: return x > y ? x : y;
    default: return x < y ? x : y;
    }
}

/* d/dx (side 0) or d/dy (side 1); a tie of Max or Min gives each half, as
 * torch.maximum's backward (measured in PyTorch 1.13). */
static double ref_partial(kiln_binary_op op, int side, double x, double y)
{
    switch (op) {
    case KILN_BINARY_ADD: return 1.0;
    case KILN_BINARY_SUBTRACT: return side ? -1.0 : 1.0;
    case KILN_BINARY_MULTIPLY: return side ? x : y;
    case KILN_BINARY_DIVIDE: return side ? -x / (y * y) : 1.0 / y;
    case KILN_BINARY_MAXIMUM: return x == y ? 0.5 : (side ? y > x : x > y);
    default: return x == y ? 0.5 : (side ? y < x : x < y);
    }
}

/* One operand of the reference: rank, dims, values; batched 0 (a
 * parameter: one for the batch, its gradient summed over it). */
typedef struct ref_operand {
    int rank;
    const int32_t *dims;
    const double *v;
    int batched;
    double *grad;     /* zeroed by the caller; sums into it */
} ref_operand;

/* y = a op b broadcast right-aligned over `rank` axes of out dims; the
 * gradients of both from dy. */
static void ref_binary(kiln_binary_op op, int batch, int rank, const int32_t *out,
                       ref_operand *o, const double *dy, double *y)
{
    int64_t stride[2][KILN_MAX_RANK], size[2] = {1, 1}, n_out = 1;
    for (int s = 0; s < 2; s++)
        for (int d = rank - 1; d >= 0; d--) {
            const int at = d - (rank - o[s].rank);
            const int32_t dim = at >= 0 ? o[s].dims[at] : 1;
            stride[s][d] = dim == 1 ? 0 : size[s];
            size[s] *= dim;
        }
    for (int d = 0; d < rank; d++)
        n_out *= out[d];
    for (int n = 0; n < batch; n++)
        for (int64_t i = 0; i < n_out; i++) {
            int64_t rest = i, at[2] = {0, 0};
            for (int d = rank - 1; d >= 0; d--) {
                const int64_t c = rest % out[d];
                rest /= out[d];
                at[0] += c * stride[0][d];
                at[1] += c * stride[1][d];
            }
            for (int s = 0; s < 2; s++)
                at[s] += o[s].batched ? n * size[s] : 0;
            const double x = o[0].v[at[0]], w = o[1].v[at[1]], g = dy[n * n_out + i];
            y[n * n_out + i] = ref_apply(op, x, w);
            for (int s = 0; s < 2; s++)
                o[s].grad[at[s]] += g * ref_partial(op, s, x, w);
        }
}

static const char *const op_name[] = {"add", "subtract", "multiply", "divide", "maximum",
                                      "minimum"};

typedef struct param_case {
    kiln_binary_op op;
    int32_t rank;
    int32_t dims[KILN_MAX_RANK];
    int first, constant;
} param_case;

static kiln_node build_param(kiln_model *m, kiln_node pre, const void *arg)
{
    const param_case *c = arg;
    kiln_binary_options o = {.struct_size = sizeof o, .op = c->op, .param_rank = c->rank,
                             .param_first = c->first, .param_constant = c->constant};
    memcpy(o.param_dims, c->dims, sizeof o.param_dims);
    return kiln_binary_param(m, pre, &o);
}

/* x (rank, dims) op p, or p op x. */
static void check_param(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                        const param_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_param, c, &r))
        return;
    const int out_rank = rank > c->rank ? rank : c->rank;
    int32_t out[KILN_MAX_RANK];
    for (int d = 0; d < out_rank; d++) {
        const int a = d - (out_rank - rank), b = d - (out_rank - c->rank);
        const int32_t x = a >= 0 ? dims[a] : 1, p = b >= 0 ? c->dims[b] : 1;
        out[d] = x > p ? x : p;
    }
    const int64_t nx = batch * r.in_size, ny = batch * r.out_size, np = r.param_size[0];
    double *y = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    double *dp = calloc((size_t)np, sizeof(double));
    ref_operand x = {.rank = rank, .dims = dims, .v = r.x, .batched = 1, .grad = dx};
    ref_operand p = {.rank = c->rank, .dims = c->dims, .v = r.params[0], .grad = dp};
    ref_operand both[2] = {c->first ? p : x, c->first ? x : p};
    ref_binary(c->op, batch, out_rank, out, both, r.dy, y);
    if (c->constant)
        memset(dp, 0, sizeof(double) * (size_t)np);   /* none written */
    char what[160], xs[64], ps[64];
    kiln_shape xshape = {.rank = rank}, pshape = {.rank = c->rank};
    memcpy(xshape.dims, dims, sizeof(int32_t) * (size_t)rank);
    memcpy(pshape.dims, c->dims, sizeof(int32_t) * (size_t)c->rank);
    kiln_shape_str(&xshape, xs, sizeof xs);
    kiln_shape_str(&pshape, ps, sizeof ps);
    snprintf(what, sizeof what, "binary %s: %s %s, %s %s%s", op_name[c->op],
             c->first ? "p" : "x", c->first ? ps : xs, c->first ? "x" : "p",
             c->first ? xs : ps, c->constant ? " (p constant)" : "");
    CHECK(r.out_size == ny / batch);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), nx, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dparams[0], dp, sizeof(double), np, TEST_OF_ARRAY, TOL);
    printf("%s, batch %d: largest error %.2g\n", what, batch, test_worst);
    free(y), free(dx), free(dp);
    layer_run_free(&r);
}

typedef struct pair_case {
    kiln_binary_op op;
    int pooled_first;   /* the pooled (C) the left operand */
    int self;           /* pre op pre instead */
} pair_case;

/* pre (..., C) op its mean over all but the last axis (C): the squeeze-
 * and-excitation scale, (T, D) with (D) through a Reshape to (T, 1, D);
 * or pre op pre. */
static kiln_node build_pair(kiln_model *m, kiln_node pre, const void *arg)
{
    const pair_case *c = arg;
    const kiln_binary_options o = {.struct_size = sizeof o, .op = c->op};
    if (c->self)
        return kiln_binary(m, pre, pre, &o);
    const kiln_node_rec *rec = &m->graph.nodes[pre];
    kiln_node image = pre;
    if (rec->shape.rank == 2) {
        const int32_t dims[3] = {rec->shape.dims[0], 1, rec->shape.dims[1]};
        image = kiln_reshape(m, pre, 3, dims, NULL);
    }
    const kiln_node pooled = kiln_global_average_pooling2d(m, image, NULL);
    return c->pooled_first ? kiln_binary(m, pooled, pre, &o) : kiln_binary(m, pre, pooled, &o);
}

static void check_pair(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                       const pair_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, rank, dims, batch, build_pair, c, &r))
        return;
    const int32_t ch = dims[rank - 1];
    const int64_t nx = batch * r.in_size, spots = r.in_size / ch;
    double *y = calloc((size_t)nx, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    double *dx2 = calloc((size_t)nx, sizeof(double));
    double *s = calloc((size_t)(batch * ch), sizeof(double));
    double *ds = calloc((size_t)(batch * ch), sizeof(double));
    for (int n = 0; n < batch && !c->self; n++)
        for (int64_t i = 0; i < r.in_size; i++)
            s[n * ch + i % ch] += r.x[n * r.in_size + i] / (double)spots;
    ref_operand x = {.rank = rank, .dims = dims, .v = r.x, .batched = 1, .grad = dx};
    ref_operand p = c->self ? (ref_operand){.rank = rank, .dims = dims, .v = r.x, .batched = 1,
                                            .grad = dx2}
                            : (ref_operand){.rank = 1, .dims = &ch, .v = s, .batched = 1,
                                            .grad = ds};
    ref_operand both[2] = {c->pooled_first ? p : x, c->pooled_first ? x : p};
    ref_binary(c->op, batch, rank, dims, both, r.dy, y);
    for (int n = 0; n < batch; n++)
        for (int64_t i = 0; i < r.in_size; i++)
            dx[n * r.in_size + i] += c->self ? dx2[n * r.in_size + i]
                                             : ds[n * ch + i % ch] / (double)spots;
    char what[128];
    snprintf(what, sizeof what, "binary %s of %s, rank %d", op_name[c->op],
             c->self ? "a node with itself" : c->pooled_first ? "its mean (C) and the input"
                                                              : "the input and its mean (C)",
             rank);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), nx, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), nx, TEST_OF_ARRAY, TOL);
    printf("%s, batch %d: largest error %.2g\n", what, batch, test_worst);
    free(y), free(dx), free(dx2), free(s), free(ds);
    layer_run_free(&r);
}

/* A model whose compile must fail with `status` and a message holding
 * each of `needles` (NULL-terminated). */
static void check_refused(kiln_context *ctx, const char *what, int rank_a, const int32_t *a,
                          int rank_b, const int32_t *b, const kiln_binary_options *o,
                          kiln_status status, const char *const *needles)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_node x = kiln_input(m, rank_a, a, NULL);
    if (b)
        kiln_binary(m, x, kiln_input(m, rank_b, b, NULL), o);
    else
        kiln_binary_param(m, x, o);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    const kiln_status st = kiln_model_compile(m, &co);
    const char *msg = kiln_context_last_error(ctx);
    int ok = st == status;
    for (int k = 0; ok && needles[k]; k++)
        ok = strstr(msg, needles[k]) != NULL;
    if (!ok) {
        fprintf(stderr, "%s: status %d (want %d), message '%s'\n", what, (int)st, (int)status,
                msg);
        test_failures++;
    } else {
        printf("%s: refused: %s\n", what, msg);
    }
    kiln_model_destroy(m);
}

static void check_refusals(kiln_context *ctx)
{
    const int32_t td[] = {5, 7}, six[] = {6}, hwc[] = {4, 3, 7}, four1[] = {4, 1};
    const kiln_binary_options mul = {.struct_size = sizeof mul, .op = KILN_BINARY_MULTIPLY};
    check_refused(ctx, "(5, 7) * (6)", 2, td, 1, six, &mul, KILN_ERROR_SHAPE,
                  (const char *const[]){"a (5, 7)", "b (6,)", "do not broadcast", NULL});
    check_refused(ctx, "(4, 3, 7) * (4, 1)", 3, hwc, 2, four1, &mul, KILN_ERROR_SHAPE,
                  (const char *const[]){"a (4, 3, 7)", "b (4, 1)", "do not broadcast", NULL});
    kiln_binary_options p = {.struct_size = sizeof p, .op = KILN_BINARY_SUBTRACT,
                             .param_rank = 1, .param_dims = {6}, .param_first = 1};
    check_refused(ctx, "p (6) - x (5, 7)", 2, td, 0, NULL, &p, KILN_ERROR_SHAPE,
                  (const char *const[]){"the parameter (6,)", "x (5, 7)", NULL});
    const kiln_binary_options bad_op = {.struct_size = sizeof bad_op,
                                        .op = (kiln_binary_op)6};
    check_refused(ctx, "op 6", 2, td, 2, td, &bad_op, KILN_ERROR_INVALID_ARGUMENT,
                  (const char *const[]){"op is 6", NULL});
    check_refused(ctx, "param options on two inputs", 2, td, 2, td, &p,
                  KILN_ERROR_INVALID_ARGUMENT, (const char *const[]){"param_", NULL});
    const kiln_binary_options no_rank = {.struct_size = sizeof no_rank};
    check_refused(ctx, "param_rank 0", 2, td, 0, NULL, &no_rank, KILN_ERROR_INVALID_ARGUMENT,
                  (const char *const[]){"param_rank is 0", NULL});
    const kiln_binary_options zero_dim = {.struct_size = sizeof zero_dim, .param_rank = 2,
                                          .param_dims = {5, 0}};
    check_refused(ctx, "param_dims[1] 0", 2, td, 0, NULL, &zero_dim,
                  KILN_ERROR_INVALID_ARGUMENT, (const char *const[]){"param_dims[1] is 0", NULL});
}

/* Input (5, 4) -> x * scale (4, trained) -> 1.7 - x (a constant) ->
 * Dense(3), trained 2 epochs of 24 samples in batches of 12 under
 * `strategy`; its weights (caller frees) and the constant after. */
static float *trained(kiln_context *ctx, kiln_strategy strategy, int replicas, int64_t *n,
                      float *constant)
{
    enum { SAMPLES = 24 };
    static float x[SAMPLES * 20], y[SAMPLES * 3];
    for (int i = 0; i < SAMPLES * 20; i++)
        x[i] = (float)(((i * 37) % 19) - 9) / 9.0f;
    for (int i = 0; i < SAMPLES * 3; i++)
        y[i] = (float)((i * 11) % 7) / 7.0f;
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 4};
    const kiln_binary_options scale = {.struct_size = sizeof scale, .name = "scale",
                                       .op = KILN_BINARY_MULTIPLY, .param_rank = 1,
                                       .param_dims = {4}, .param_value = 0.5f};
    const kiln_binary_options shift = {.struct_size = sizeof shift, .name = "shift",
                                       .op = KILN_BINARY_SUBTRACT, .param_rank = 1,
                                       .param_dims = {1}, .param_first = 1,
                                       .param_constant = 1, .param_value = 1.7f};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3};
    kiln_node h = kiln_binary_param(m, kiln_input(m, 2, dims, NULL), &scale);
    h = kiln_flatten(m, kiln_binary_param(m, h, &shift), NULL);
    kiln_dense(m, h, &head);
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.05f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = strategy, .replicas = replicas,
                                     .pipeline_stages = strategy == KILN_STRATEGY_PIPELINE
                                                            ? 2 : 0};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 2,
                          .feature_dims = {5, 4}, .features = x,
                          .label_kind = KILN_LABELS_DENSE, .label_size = 3, .dense_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2, .batch_size = 12,
                                 .no_shuffle = 1, .verbosity = KILN_VERBOSE_SILENT};
    float *w = NULL;
    if (m->plan.compiled && ds) {
        CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
        CHECK_OK(ctx, kiln_model_parameter_count(m, n));
        w = calloc((size_t)*n, sizeof *w);
        CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
        CHECK_OK(ctx, kiln_model_get_tensor(m, "shift/operand", constant, 1));
        float scale[4] = {0};
        CHECK_OK(ctx, kiln_model_get_tensor(m, "scale/operand", scale, 4));
        CHECK(scale[0] != 0.5f && scale[3] != 0.5f);   /* trained */
    }
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
    return w;
}

/* The trained parameter and the constant under the strategies: mirrored
 * and central storage on every device and the pipeline on two stages
 * equal one device, and the constant
 * stays 1.7 exactly (3 replicas averaging it as state would round it:
 * (3 x 1.7) / 3 is not 1.7 in float32; measured when constants were
 * kept there). */
static void check_strategies(kiln_context *ctx)
{
    const int32_t devices = test_device_count(ctx);
    int64_t n = 0;
    float constant = 0;
    float *base = trained(ctx, KILN_STRATEGY_ONE_DEVICE, 1, &n, &constant);
    CHECK(constant == 1.7f);
    const int two = test_has_devices(devices, 2, "mirrored, central storage and the pipeline");
    const kiln_strategy others[] = {KILN_STRATEGY_MIRRORED, KILN_STRATEGY_CENTRAL_STORAGE,
                                    KILN_STRATEGY_PIPELINE};
    const char *const names[] = {"mirrored", "central_storage", "pipeline (2 stages)"};
    for (int k = 0; two && base && k < 3; k++) {
        int64_t m = 0;
        float *w = trained(ctx, others[k], others[k] == KILN_STRATEGY_PIPELINE ? 2 : devices,
                           &m, &constant);
        char what[96];
        snprintf(what, sizeof what, "binary params, %s on %d devices vs one", names[k],
                 others[k] == KILN_STRATEGY_PIPELINE ? 2 : (int)devices);
        if (w && m == n)
            test_close(what, 60, w, base, sizeof(float), n, TEST_PER_VALUE, 1e-5);
        CHECK(constant == 1.7f);
        free(w);
    }
    free(base);
}

int main(void)
{
    kiln_context *ctx = test_context(11);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const int32_t cube[] = {3, 4, 5}, td[] = {5, 7}, hwc[] = {4, 5, 6}, col[] = {1, 5, 1};
    const int32_t mat[] = {3, 4};
    for (int op = KILN_BINARY_ADD; op <= KILN_BINARY_MINIMUM; op++) {
        const kiln_binary_op o = (kiln_binary_op)op;
        const param_case same = {.op = o, .rank = 3, .dims = {3, 4, 5}};
        const param_case row = {.op = o, .rank = 1, .dims = {7}};
        const param_case channel = {.op = o, .rank = 3, .dims = {1, 1, 6}};
        const param_case channel_first = {.op = o, .rank = 3, .dims = {1, 1, 6}, .first = 1};
        const param_case table = {.op = o, .rank = 2, .dims = {5, 7}};
        const param_case scalar = {.op = o, .rank = 1, .dims = {1}, .first = op % 2};
        const param_case constant = {.op = o, .rank = 1, .dims = {6}, .constant = 1};
        check_param(ctx, 3, cube, 3, &same);
        check_param(ctx, 2, td, 5, &row);
        check_param(ctx, 3, hwc, 2, &channel);
        check_param(ctx, 3, hwc, 1, &channel_first);
        check_param(ctx, 3, col, 3, &table);   /* x (1, 5, 1) broadcast along both */
        check_param(ctx, 2, mat, 4, &scalar);
        check_param(ctx, 3, hwc, 3, &constant);
        const pair_case se = {.op = o}, se_first = {.op = o, .pooled_first = 1};
        const pair_case self = {.op = o, .self = 1};
        check_pair(ctx, 3, hwc, 3, &se);
        check_pair(ctx, 2, td, 2, &se_first);
        if (o != KILN_BINARY_DIVIDE)   /* x / x: two large partials that cancel */
            check_pair(ctx, 3, cube, 2, &self);
    }
    check_refusals(ctx);
    check_strategies(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_binary");
}
