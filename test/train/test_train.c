/* Losses and optimizer steps against float64 references; determinism;
 * history, callbacks, partial batches, evaluate and predict. */
#include "layer_check.h"
#include "reference.h"
#include "runtime/context/context.h"
#include "runtime/model/loss.h"
#include "runtime/model/optimizer.h"

#define N 5      /* batch */
#define IN 5
#define OUT 4

typedef struct loss_case {
    const char *name;
    kiln_loss loss;
    kiln_activation act;
    int fused;
} loss_case;

/* Reference loss (mean over the batch) and gradient w.r.t. z (fused) or y. */
static double ref_loss(const loss_case *c, const double *z, const double *y, const int *ids,
                       const double *t, double *grad)
{
    const double eps = 1e-7, scale = 1.0 / N;
    double total = 0;
    for (int r = 0; r < N; r++) {
        const double *zr = z + r * OUT, *yr = y + r * OUT, *tr = t + r * OUT;
        double *gr = grad + r * OUT;
        double m = zr[0], s = 0, tsum = 0;
        for (int j = 0; j < OUT; j++)
            tsum += c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? j == ids[r] : tr[j];
        for (int j = 1; j < OUT; j++)
            m = zr[j] > m ? zr[j] : m;
        for (int j = 0; j < OUT; j++)
            s += exp(zr[j] - m);
        const double lse = m + log(s);
        for (int j = 0; j < OUT; j++) {
            const int sparse = c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
            const double target = sparse ? (double)(j == ids[r]) : tr[j];
            const double p = yr[j] < eps ? eps : yr[j] > 1 - eps ? 1 - eps : yr[j];
            switch (c->loss) {
            case KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
            case KILN_LOSS_CATEGORICAL_CROSSENTROPY:
                total += c->fused ? -target * (zr[j] - lse) : -target * log(p);
                /* d/dz of -sum t (z - lse) is y * sum(t) - t: targets need not sum to 1. */
                gr[j] = c->fused ? (yr[j] * tsum - target) * scale : -target / p * scale;
                break;
            case KILN_LOSS_BINARY_CROSSENTROPY:
                total += (c->fused ? (zr[j] > 0 ? zr[j] : 0) - zr[j] * target +
                                         log1p(exp(-fabs(zr[j])))
                                   : -(target * log(p) + (1 - target) * log(1 - p))) / OUT;
                gr[j] = (c->fused ? yr[j] - target : -target / p + (1 - target) / (1 - p)) *
                        scale / OUT;
                break;
            default:
                total += (yr[j] - target) * (yr[j] - target) / OUT;
                gr[j] = 2 * (yr[j] - target) * scale / OUT;
            }
        }
    }
    return total / N;
}

/* One forward pass and loss on batch `b` through replica `r`: the sums, and
 * the output node's pre-activation z, activation y and gradient g (`n`
 * floats each). */
static void forward_loss(kiln_context *ctx, kiln_replica *r, const kiln_batch *b, kiln_node out,
                         double *sums, float *z, float *y, float *g, size_t n)
{
    CHECK_OK(ctx, kiln_replica_upload(r, b));
    CHECK_OK(ctx, kiln_replica_forward(r, N, 1));
    CHECK_OK(ctx, kiln_replica_loss(r, N, 1.0f / N));
    CHECK_OK(ctx, kiln_replica_read_sums(r, sums));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->out[out], 0, z, n * sizeof(float)));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->act[out], 0, y, n * sizeof(float)));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grad[out], 0, g, n * sizeof(float)));
}

static void test_loss(kiln_context *ctx, const loss_case *c)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options d = {.struct_size = sizeof d, .units = OUT, .activation = c->act};
    kiln_node out = kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = c->loss;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    CHECK(m->plan.heads[0].fused == c->fused);
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    float x[N * IN], t[N * OUT];
    int32_t ids[N];
    int ids_int[N];
    double td[N * OUT];
    for (int i = 0; i < N * IN; i++)
        x[i] = (float)(2.0 * check_uniform());
    for (int i = 0; i < N * OUT; i++) {
        t[i] = (float)(0.5 + 0.5 * check_uniform());
        td[i] = t[i];
    }
    for (int i = 0; i < N; i++)
        ids[i] = ids_int[i] = i % OUT;
    const int sparse = c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    kiln_batch b = {.n = N, .features = x, .labels = sparse ? (const void *)ids : (const void *)t};
    double sums[KILN_N_SUMS];
    float z[N * OUT], y[N * OUT], g[N * OUT];
    forward_loss(ctx, r, &b, out, sums, z, y, g, N * OUT);
    double zd[N * OUT], yd[N * OUT], gd[N * OUT], want_g[N * OUT];
    for (int i = 0; i < N * OUT; i++) {
        zd[i] = z[i];
        gd[i] = g[i];
    }
    /* y from the float64 activation of kiln's z, so only the loss is tested. */
    ref_activation_forward(c->act, zd, N, OUT, yd);
    const double want = ref_loss(c, zd, yd, ids_int, td, want_g);
    const double got = sums[0] / N;
    printf("%s: loss %.6f (reference %.6f)\n", c->name, got, want);
    if (fabs(got - want) > 1e-5 * (1 + fabs(want))) {
        fprintf(stderr, "%s: loss %.7g, want %.7g\n", c->name, got, want);
        test_failures++;
    }
    test_close(c->name, 0, gd, want_g, sizeof(double), N * OUT, TEST_OF_ARRAY, 1e-4);
    (void)y;
    kiln_model_destroy(m);
}

/* The categorical losses and their metrics over vocabulary-wide rows
 * (WIDE classes, more than a GPU's row kernels' 64 lanes and not a multiple
 * of them): loss sum, correct count, top-k, mean absolute error, binary
 * accuracy and gradient against float64, softmax against float64 of kiln's
 * z. Rows 0 and 1 are labelled with their arg max (accuracy counts), row 2
 * is labelled with its k-th largest class (the ignore class under sparse
 * labels), row 3 with its smallest output and its inputs are large, so that
 * probabilities clip, and row 4 with its (k + 1)-th largest. */
#define WIDE 130
#define WIDE_IGNORE (WIDE + 7)
#define WIDE_TOP_K 5

typedef struct wide_case {
    const char *name;
    kiln_loss loss;
    int probs;   /* softmax then flatten: the loss reads probabilities */
    int soft;    /* dense labels in [0.5, 1) with the class at 2, tied above it */
} wide_case;

/* The first of the largest of v[0..n), as the kernels' arg max. */
static int wide_argmax(const double *v, int n)
{
    int best = 0;
    for (int j = 1; j < n; j++)
        best = v[j] > v[best] ? j : best;
    return best;
}

/* The sums of one batch of N rows: loss, correct, top-k, absolute error,
 * binary accuracy (the KILN_SUM_* order from KILN_SUM_LOSS, samples
 * left 0), and the gradient, scaled by 1 / N. z: the pre-softmax output,
 * y: kiln's output (read as probabilities unless fused), yd: float64 softmax
 * of z. */
static void wide_reference(const wide_case *c, const double *z, const double *y,
                           const double *yd, const int *ids, const double *t, double *sums,
                           double *grad)
{
    const int sparse = c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    const double lo = 1e-7f, hi = 1.0f - 1e-7f;   /* the kernels' float bounds */
    for (int i = 0; i < N; i++) {
        const double *zr = z + i * WIDE, *yr = y + i * WIDE, *tr = t + i * WIDE;
        double *gr = grad + i * WIDE;
        double td[WIDE], tsum = 0;
        for (int j = 0; j < WIDE; j++) {
            td[j] = sparse ? (double)(j == ids[i]) : tr[j];
            tsum += td[j];
            gr[j] = 0;
        }
        if (sparse && ids[i] == WIDE_IGNORE)
            continue;
        const int want = sparse ? ids[i] : wide_argmax(td, WIDE);
        const double top = zr[wide_argmax(zr, WIDE)];
        double s = 0;
        for (int j = 0; j < WIDE; j++)
            s += exp(zr[j] - top);
        const double lse = top + log(s);
        int above = 0;
        for (int j = 0; j < WIDE; j++) {
            const double p = yr[j] < lo ? lo : yr[j] > hi ? hi : yr[j];
            sums[0] -= c->probs ? td[j] * log(p) : td[j] * (zr[j] - lse);
            gr[j] = (c->probs ? (p == yr[j] ? -td[j] / p : 0) : yd[i * WIDE + j] * tsum - td[j]) /
                    N;
            above += yr[j] > yr[want];
            sums[3] += sparse ? 0 : fabs(yr[j] - td[j]) / WIDE;
            sums[4] += sparse ? 0 : (td[j] == (yr[j] > 0.5 ? 1.0 : 0.0)) / (double)WIDE;
        }
        sums[1] += wide_argmax(c->probs ? yr : zr, WIDE) == want;
        sums[2] += above < WIDE_TOP_K;
    }
}

static void test_wide_rows(kiln_context *ctx, const wide_case *c)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options d = {.struct_size = sizeof d, .units = WIDE,
                            .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node logits = kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    const kiln_node out = c->probs ? kiln_flatten(m, logits, NULL) : logits;
    const int sparse = c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    kiln_compile_options co = {.struct_size = sizeof co, .loss = c->loss,
                               .has_ignore_class = sparse, .ignore_class = WIDE_IGNORE,
                               .top_k = WIDE_TOP_K, .mean_absolute_error = !sparse,
                               .binary_accuracy = !sparse};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    CHECK(m->plan.heads[0].fused == !c->probs);
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    float x[N * IN];
    static float z[N * WIDE], y[N * WIDE], g[N * WIDE], t[N * WIDE];
    int32_t ids[N];
    int ids_int[N];
    for (int i = 0; i < N * IN; i++)
        x[i] = (float)(3.0 * check_uniform()) * (i / IN == 3 ? 20.0f : 1.0f);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 37 + 11) % WIDE);
    kiln_batch b = {.n = N, .features = x, .labels = sparse ? (const void *)ids : (const void *)t};
    CHECK_OK(ctx, kiln_replica_upload(r, &b));
    CHECK_OK(ctx, kiln_replica_forward(r, N, 1));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->out[logits], 0, z, sizeof z));
    for (int j = 0; j < WIDE; j++) {
        for (int i = 0; i < 2; i++)
            ids[i] = z[i * WIDE + j] > z[i * WIDE + ids[i]] ? j : ids[i];
        ids[3] = z[3 * WIDE + j] < z[3 * WIDE + ids[3]] ? j : ids[3];
        /* Row 2: the k-th largest class, the last inside the top k; row 4:
         * the (k + 1)-th, the first outside. */
        for (int i = 2; i <= 4; i += 2) {
            int above = 0;
            for (int o = 0; o < WIDE; o++)
                above += z[i * WIDE + o] > z[i * WIDE + j];
            ids[i] = above == WIDE_TOP_K - 2 + i / 2 ? j : ids[i];
        }
    }
    if (sparse)
        ids[2] = WIDE_IGNORE;   /* padding: no loss, no gradient */
    static double td[N * WIDE];
    for (int i = 0; i < N; i++) {
        ids_int[i] = ids[i];
        for (int j = 0; j < WIDE; j++)
            t[i * WIDE + j] = c->soft ? (float)(0.75 + 0.25 * check_uniform()) : j == ids[i];
        /* The class first of three equal maxima: the next one in the next
         * lane of a row kernel, the last in the same lane. */
        for (int j = ids[i]; c->soft && j < WIDE; j++)
            if (j == ids[i] || j == ids[i] + 1 || j == ids[i] + KILN_ROW_LANES)
                t[i * WIDE + j] = 2.0f;
    }
    for (int i = 0; i < N * WIDE; i++)
        td[i] = t[i];
    double sums[KILN_N_SUMS];
    forward_loss(ctx, r, &b, out, sums, z, y, g, N * WIDE);
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->out[logits], 0, z, sizeof z));
    static double zd[N * WIDE], yd[N * WIDE], want_g[N * WIDE], yk[N * WIDE], gd[N * WIDE];
    for (int i = 0; i < N * WIDE; i++) {
        zd[i] = z[i];
        yk[i] = y[i];
        gd[i] = g[i];
    }
    char what[160];
    snprintf(what, sizeof what, "softmax over %d classes (%s)", WIDE, c->name);
    ref_activation_forward(KILN_ACTIVATION_SOFTMAX, zd, N, WIDE, yd);
    test_close(what, 0, yk, yd, sizeof(double), N * WIDE, TEST_OF_ARRAY, 1e-5);
    double want[5] = {0, 0, 0, 0, 0};
    wide_reference(c, zd, yk, yd, ids_int, td, want, want_g);
    const double got[5] = {sums[KILN_SUM_LOSS], sums[KILN_SUM_CORRECT], sums[KILN_SUM_TOP_K],
                           sums[KILN_SUM_ABS_ERROR], sums[KILN_SUM_BINARY]};
    printf("%s over %d classes: loss sum %.6f (reference %.6f), correct %.0f (%.0f), top-%d "
           "%.0f (%.0f), absolute error %.6f (%.6f), binary %.6f (%.6f)\n", c->name, WIDE,
           got[0], want[0], got[1], want[1], WIDE_TOP_K, got[2], want[2], got[3], want[3],
           got[4], want[4]);
    for (int k = 0; k < 5; k++)
        if (!(fabs(got[k] - want[k]) <= 1e-5 * (1 + fabs(want[k])))) {
            fprintf(stderr, "%s: sum %d is %.9g, want %.9g\n", c->name, k, got[k], want[k]);
            test_failures++;
        }
    /* Row by row: a clipped row's gradient would hide the others' errors. */
    for (int i = 0; i < N; i++) {
        snprintf(what, sizeof what, "%s gradient over %d classes, row %d", c->name, WIDE, i);
        test_close(what, 0, gd + i * WIDE, want_g + i * WIDE, sizeof(double), WIDE, TEST_OF_ARRAY,
                   1e-4);
    }
    kiln_model_destroy(m);
}

/* A NaN in a wide row of probabilities the loss reads (a sparse loss on
 * a softmax output's copy): the correct count must follow the per-row
 * kernels' arg max, which passes over a NaN unless it stands first (then
 * the arg max is 0), whichever kernel runs. Row 0 has a NaN where a row
 * kernel's lane 5 starts and its maximum later in that lane; row 1 a NaN
 * first. Each row is labelled with that arg max, so all N count. */
static void test_wide_nan(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options d = {.struct_size = sizeof d, .units = WIDE,
                            .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node out = kiln_flatten(m, kiln_dense(m, KILN_NODE_PREVIOUS, &d), NULL);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    float x[N * IN];
    static float y[N * WIDE];
    int32_t ids[N];
    for (int i = 0; i < N * IN; i++)
        x[i] = (float)check_uniform();
    for (int i = 0; i < N * WIDE; i++)
        y[i] = 0.001f * (float)(1 + (i * 7) % 13);
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 29 + 3) % WIDE;
        y[i * WIDE + ids[i]] = 0.5f;
    }
    y[5] = NAN;
    y[5 + KILN_ROW_LANES] = 0.9f;
    ids[0] = 5 + KILN_ROW_LANES;
    y[WIDE] = NAN;
    ids[1] = 0;
    kiln_batch b = {.n = N, .features = x, .labels = ids};
    CHECK_OK(ctx, kiln_replica_upload(r, &b));
    CHECK_OK(ctx, kiln_replica_forward(r, N, 1));
    CHECK_OK(ctx, kiln_buffer_write(r->dev, r->act[out], 0, y, sizeof y, 1));
    CHECK_OK(ctx, kiln_replica_loss(r, N, 1.0f / N));
    double sums[KILN_N_SUMS];
    CHECK_OK(ctx, kiln_replica_read_sums(r, sums));
    printf("NaN in a wide row of probabilities: correct %.0f of %d\n", sums[KILN_SUM_CORRECT], N);
    CHECK(sums[KILN_SUM_CORRECT] == N);
    kiln_model_destroy(m);
}

typedef struct opt_case {
    const char *name;
    kiln_optimizer_options o;
    int runs;   /* decay only [3, 20) and [25, 30) of parameters starting at 2 */
} opt_case;

static size_t decay_run[2][2] = {{3, 20}, {25, 30}};

/* Keras's update rules, in float64: weight decay first (on the runs, with
 * `runs`), then the step; s0, s1, s2 the kernels' three slots. */
static void ref_optimizer(const kiln_optimizer_options *o, int runs, double *p,
                          const double *g, double *s0, double *s1, double *s2, int n, int step)
{
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)i + 2;
        const int decays = !runs || (at >= decay_run[0][0] && at < decay_run[0][1]) ||
                           (at >= decay_run[1][0] && at < decay_run[1][1]);
        if (decays)
            p[i] -= p[i] * o->learning_rate * (double)o->weight_decay;
        if (o->kind == KILN_OPTIMIZER_RMSPROP) {
            const double rho = o->rho;
            s0[i] = rho * s0[i] + (1 - rho) * g[i] * g[i];
            s2[i] = o->centered ? rho * s2[i] + (1 - rho) * g[i] : 0;
            const double inc = o->learning_rate * g[i] / sqrt(s0[i] - s2[i] * s2[i] + o->epsilon);
            s1[i] = o->momentum * s1[i] + inc;
            p[i] -= o->momentum > 0 ? s1[i] : inc;
        } else if (o->kind == KILN_OPTIMIZER_ADAGRAD) {
            s0[i] = (step == 1 ? o->initial_accumulator_value : s0[i]) + g[i] * g[i];
            p[i] -= o->learning_rate * g[i] / sqrt(s0[i] + o->epsilon);
        } else if (o->kind == KILN_OPTIMIZER_ADAM || o->kind == KILN_OPTIMIZER_ADAMW) {
            s0[i] += (g[i] - s0[i]) * (1 - (double)o->beta_1);
            s1[i] += (g[i] * g[i] - s1[i]) * (1 - (double)o->beta_2);
            const double alpha = o->learning_rate * sqrt(1 - pow(o->beta_2, step)) /
                                 (1 - pow(o->beta_1, step));
            p[i] -= alpha * s0[i] / (sqrt(s1[i]) + o->epsilon);
        } else if (o->momentum == 0) {
            p[i] -= o->learning_rate * g[i];
        } else {
            s0[i] = o->momentum * s0[i] - o->learning_rate * g[i];
            p[i] += o->nesterov ? o->momentum * s0[i] - o->learning_rate * g[i] : s0[i];
        }
    }
}

static void test_optimizer(kiln_context *ctx, const opt_case *c)
{
    enum { n = 37, steps = 4 };
    kiln_device *dev = ctx->devices[0];
    kiln_optimizer_options o;
    kiln_lr_schedule schedule;
    kiln_diag why;
    CHECK(kiln_optimizer_take(&o, &schedule, &c->o, &why) == KILN_OK);
    CHECK_OK(ctx, kiln_optimizer_resolve(ctx, &o));
    kiln_buffer *p = NULL, *g = NULL, *slots[3] = {NULL, NULL, NULL};
    CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "p", &p));
    CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "g", &g));
    for (int s = 0; s < kiln_optimizer_slot_count(&o); s++) {
        CHECK_OK(ctx, kiln_buffer_create(dev, n * sizeof(float), "slot", &slots[s]));
        CHECK_OK(ctx, kiln_buffer_zero(dev, slots[s], 0, n * sizeof(float)));
    }
    float pf[n], gf[n];
    double pd[n], gd[n], s0[n] = {0}, s1[n] = {0}, s2[n] = {0};
    const kiln_decay_runs runs = {.run = decay_run, .n = 2};
    for (int i = 0; i < n; i++)
        pd[i] = pf[i] = (float)check_uniform();
    CHECK_OK(ctx, kiln_buffer_write(dev, p, 0, pf, sizeof pf, 1));
    for (int step = 1; step <= steps; step++) {
        for (int i = 0; i < n; i++)
            gd[i] = gf[i] = (float)check_uniform();
        CHECK_OK(ctx, kiln_buffer_write(dev, g, 0, gf, sizeof gf, 1));
        CHECK_OK(ctx, kiln_optimizer_apply(dev, &o, o.learning_rate, p, g, slots, n, step,
                                           NULL, 0, c->runs ? &runs : NULL, 2));
        ref_optimizer(&o, c->runs, pd, gd, s0, s1, s2, n, step);
    }
    CHECK_OK(ctx, kiln_buffer_read(dev, p, 0, pf, sizeof pf));
    double got[n];
    for (int i = 0; i < n; i++)
        got[i] = pf[i];
    printf("optimizer %s\n", c->name);
    test_close(c->name, 0, got, pd, sizeof(double), n, TEST_OF_ARRAY, 1e-5);
    kiln_buffer_destroy(p);
    kiln_buffer_destroy(g);
    kiln_buffer_destroy(slots[0]);
    kiln_buffer_destroy(slots[1]);
    kiln_buffer_destroy(slots[2]);
}

/* A small three-class problem that a classifier can learn. */
static void blob_arrays(int count, uint64_t seed, float *x, int32_t *y)
{
    check_rng_state = seed;
    for (int i = 0; i < count; i++) {
        y[i] = i % 3;
        for (int j = 0; j < 8; j++)
            x[i * 8 + j] = (float)(0.5 * check_uniform() + (j % 3 == y[i] ? 1.0 : 0.0));
    }
}

static kiln_dataset *blobs(kiln_context *ctx, int count, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)count * 8);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)count);
    blob_arrays(count, seed, x, y);
    kiln_arrays_desc d = {.struct_size = sizeof d};
    d.count = count;
    d.feature_rank = 1;
    d.feature_dims[0] = 8;
    d.features = x;
    d.sparse_labels = y;
    d.num_classes = 3;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    free(x);
    free(y);
    return ds;
}

static kiln_model *mlp(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {8};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options h = {.struct_size = sizeof h, .units = 16,
                            .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options o = {.struct_size = sizeof o, .units = 3,
                            .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &h);
    kiln_dense(m, KILN_NODE_PREVIOUS, &o);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = 1e-2f};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

typedef struct events {
    int batches, epochs, stop_after;
    int64_t last_steps;
} events;

static int on_progress(void *user, const kiln_progress *p)
{
    events *e = user;
    if (p->event == KILN_EVENT_BATCH_END)
        e->batches++;
    else
        e->epochs++;
    e->last_steps = p->steps;
    return e->stop_after && e->batches >= e->stop_after;
}

/* Same seed, same weights, bit for bit; another seed differs. */
static void train_weights(uint64_t seed, float *w, int64_t n)
{
    kiln_context *ctx = test_context(seed);
    kiln_dataset *ds = blobs(ctx, 100, 5);
    kiln_model *m = mlp(ctx);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 7;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
}

static void test_determinism(void)
{
    enum { n = 8 * 16 + 16 + 16 * 3 + 3 };
    float a[n], b[n], c[n];
    train_weights(11, a, n);
    train_weights(11, b, n);
    train_weights(12, c, n);
    printf("determinism\n");
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
}

/* Refuses any one allocation over 256 MiB: no staging may follow a batch
 * size the dataset cannot fill. */
static void *capped_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return size > ((size_t)256 << 20) ? NULL : realloc(ptr, size);
}

static void train_batch_weights(int32_t batch, float *w, int64_t n)
{
    char err[512] = "";
    kiln_context_options co = {.struct_size = sizeof co, .seed = 11, .realloc_fn = capped_realloc,
                               .error_buffer = err, .error_buffer_size = sizeof err};
    kiln_context *ctx = NULL;
    CHECK(kiln_context_create(&co, &ctx) == KILN_OK);
    if (!ctx)
        return;
    kiln_dataset *ds = blobs(ctx, 96, 5);
    kiln_model *m = mlp(ctx);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = batch;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
}

/* A batch far larger than the dataset trains as one of the dataset's size. */
static void test_huge_batch(void)
{
    enum { n = 8 * 16 + 16 + 16 * 3 + 3 };
    float a[n], b[n];
    memset(a, 0, sizeof a);
    memset(b, 0xff, sizeof b);
    train_batch_weights(96, a, n);
    train_batch_weights(INT32_MAX, b, n);
    printf("huge batch\n");
    CHECK(memcmp(a, b, sizeof a) == 0);
}

static void test_fit_loop(kiln_context *ctx)
{
    kiln_dataset *train = blobs(ctx, 250, 1), *val = blobs(ctx, 61, 2);
    kiln_model *m = mlp(ctx);
    int64_t count = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &count));
    CHECK(count == 8 * 16 + 16 + 16 * 3 + 3);

    events e = {0};
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 3;
    fo.batch_size = 16;  /* 250 = 15 * 16 + 10: a partial last batch */
    fo.validation = val;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.callback = on_progress;
    fo.callback_user = &e;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    CHECK(e.batches == 3 * 16 && e.epochs == 3 && e.last_steps == 16);
    int32_t len = 0;
    CHECK_OK(ctx, kiln_model_history_count(m, &len));
    CHECK(len == 3);
    kiln_epoch_record first = {.struct_size = sizeof first}, last = {.struct_size = sizeof last};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &first));
    CHECK_OK(ctx, kiln_model_history_epoch(m, 2, &last));
    printf("fit: loss %.4f -> %.4f, accuracy %.4f, val_accuracy %.4f\n", first.loss, last.loss,
           last.accuracy, last.val_accuracy);
    CHECK(last.samples == 250 && last.has_validation);
    CHECK(last.loss < first.loss);
    CHECK(last.val_accuracy > 0.9);

    /* evaluate agrees with the last validation pass and with predict. */
    kiln_metrics met = {.struct_size = sizeof met};
    CHECK_OK(ctx, kiln_model_evaluate(m, val, 5, &met));
    CHECK(fabs(met.loss - last.val_loss) < 1e-5 && fabs(met.accuracy - last.val_accuracy) < 1e-9);
    CHECK(met.samples == 61);
    int64_t out_size = 0;
    CHECK_OK(ctx, kiln_model_output_size(m, &out_size));
    CHECK(out_size == 3);
    float x[61 * 8], p[61 * 3];
    int32_t y[61];
    blob_arrays(61, 2, x, y);
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = 61, .features = x}, p, 7));
    int right = 0;
    for (int i = 0; i < 61; i++) {
        const float *pi = p + i * 3;
        const int best = pi[0] >= pi[1] && pi[0] >= pi[2] ? 0 : pi[1] >= pi[2] ? 1 : 2;
        right += best == y[i];
        CHECK(fabs(pi[0] + pi[1] + pi[2] - 1.0) < 1e-5);
    }
    CHECK(fabs(right / 61.0 - met.accuracy) < 1e-9);

    /* A callback can stop training. */
    e.batches = 0;
    e.stop_after = 5;
    CHECK_FAILS(ctx, KILN_ERROR_STOPPED, "callback stopped training at epoch 1, step 5",
                kiln_model_fit(m, train, &fo));
    kiln_model_destroy(m);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
}

int main(void)
{
    kiln_context *ctx = test_context(3);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const loss_case losses[] = {
        {.name = "sparse_categorical_crossentropy + softmax",
         .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .act = KILN_ACTIVATION_SOFTMAX,
         .fused = 1},
        {.name = "sparse_categorical_crossentropy on sigmoid",
         .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .act = KILN_ACTIVATION_SIGMOID},
        {.name = "categorical_crossentropy + softmax", .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY,
         .act = KILN_ACTIVATION_SOFTMAX, .fused = 1},
        {.name = "categorical_crossentropy on sigmoid", .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY,
         .act = KILN_ACTIVATION_SIGMOID},
        {.name = "binary_crossentropy + sigmoid", .loss = KILN_LOSS_BINARY_CROSSENTROPY,
         .act = KILN_ACTIVATION_SIGMOID, .fused = 1},
        {.name = "binary_crossentropy on softmax", .loss = KILN_LOSS_BINARY_CROSSENTROPY,
         .act = KILN_ACTIVATION_SOFTMAX},
        {.name = "mean_squared_error", .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
         .act = KILN_ACTIVATION_LINEAR},
        {.name = "mean_squared_error on tanh", .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
         .act = KILN_ACTIVATION_TANH},
    };
    for (size_t i = 0; i < sizeof losses / sizeof losses[0]; i++)
        test_loss(ctx, &losses[i]);
    const wide_case wide[] = {
        {.name = "sparse_categorical_crossentropy + softmax",
         .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
        {.name = "sparse_categorical_crossentropy on probabilities",
         .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .probs = 1},
        {.name = "categorical_crossentropy + softmax, one-hot",
         .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY},
        {.name = "categorical_crossentropy + softmax, soft labels",
         .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY, .soft = 1},
        {.name = "categorical_crossentropy on probabilities, one-hot",
         .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY, .probs = 1},
        {.name = "categorical_crossentropy on probabilities, soft labels",
         .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY, .probs = 1, .soft = 1},
    };
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        test_wide_rows(ctx, &wide[i]);
    test_wide_nan(ctx);

#define OPT(...) {.struct_size = sizeof(kiln_optimizer_options), __VA_ARGS__}
    opt_case opts[] = {
        {.name = "sgd", .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.1f)},
        {.name = "sgd momentum",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .momentum = 0.9f)},
        {.name = "sgd nesterov",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .momentum = 0.8f,
                  .nesterov = 1)},
        {.name = "adam defaults", .o = OPT(.kind = KILN_OPTIMIZER_ADAM)},
        {.name = "adam custom",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAM, .learning_rate = 0.01f, .beta_1 = 0.8f,
                  .beta_2 = 0.99f, .epsilon = 1e-4f)},
        {.name = "adamw defaults", .o = OPT(.kind = KILN_OPTIMIZER_ADAMW)},
        {.name = "adamw, decay on two runs",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAMW, .learning_rate = 0.05f, .weight_decay = 0.5f),
         .runs = 1},
        {.name = "sgd nesterov, decay on two runs",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .momentum = 0.8f,
                  .nesterov = 1, .weight_decay = 0.3f),
         .runs = 1},
        {.name = "sgd, decay", .o = OPT(.kind = KILN_OPTIMIZER_SGD, .weight_decay = 0.3f)},
        {.name = "rmsprop defaults", .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP)},
        {.name = "rmsprop centered, momentum, decay on two runs",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .learning_rate = 0.01f, .rho = 0.7f,
                  .momentum = 0.6f, .centered = 1, .weight_decay = 0.2f),
         .runs = 1},
        {.name = "rmsprop momentum",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .momentum = 0.5f)},
        {.name = "adagrad defaults", .o = OPT(.kind = KILN_OPTIMIZER_ADAGRAD)},
        {.name = "adagrad, decay on two runs",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAGRAD, .learning_rate = 0.1f,
                  .initial_accumulator_value = 0.01f, .epsilon = 1e-3f, .weight_decay = 0.4f),
         .runs = 1},
    };
#undef OPT
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        test_optimizer(ctx, &opts[i]);

    test_fit_loop(ctx);
    kiln_context_destroy(ctx);
    test_determinism();
    test_huge_batch();
    return test_finish("test_train");
}
