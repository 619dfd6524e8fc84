/* Label smoothing (Keras's label_smoothing): each cross-entropy's loss and
 * output gradient, on the softmax (sigmoid) output's logits and on
 * probabilities, against a float64 reference, on rows of 5 and of 70
 * classes (meson runs it again through the kernels' GPU variants);
 * accuracy unaffected; 20 SGD steps of a two-layer classifier against
 * PyTorch's CrossEntropyLoss(label_smoothing=0.1) from the same weights
 * (test/train/label_smoothing_torch.py, float64); model files keep the
 * setting; bad values refused. */
#include "layer_check.h"
#include "reference.h"
#include "runtime/context/context.h"
#include "runtime/model/loss.h"

#include <unistd.h>

#define N 6
#define IN 5
#define LS 0.2

typedef struct ls_case {
    const char *name;
    kiln_loss loss;
    kiln_activation act;
    int probs;   /* a Flatten after the activation: the loss reads probabilities */
    int cols;
} ls_case;

/* The smoothed target of class j of row r, as Keras smooths it. */
static double smoothed(const ls_case *c, const int *ids, const double *t, int r, int j)
{
    const double raw = c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
                           ? (double)(j == ids[r]) : t[r * c->cols + j];
    return c->loss == KILN_LOSS_BINARY_CROSSENTROPY ? raw * (1 - LS) + 0.5 * LS
                                                    : raw * (1 - LS) + LS / c->cols;
}

/* Mean loss over the rows and its gradient w.r.t. z (fused) or y. */
static double reference(const ls_case *c, const double *z, const double *y, const int *ids,
                        const double *t, double *grad)
{
    const double eps = 1e-7, scale = 1.0 / N;
    const int fused = !c->probs, cols = c->cols;
    double total = 0;
    for (int r = 0; r < N; r++) {
        const double *zr = z + r * cols, *yr = y + r * cols;
        double m = zr[0], s = 0, tsum = 0;
        for (int j = 0; j < cols; j++) {
            m = zr[j] > m ? zr[j] : m;
            tsum += smoothed(c, ids, t, r, j);
        }
        for (int j = 0; j < cols; j++)
            s += exp(zr[j] - m);
        const double lse = m + log(s);
        for (int j = 0; j < cols; j++) {
            const double tj = smoothed(c, ids, t, r, j);
            const double p = yr[j] < eps ? eps : yr[j] > 1 - eps ? 1 - eps : yr[j];
            double *g = &grad[r * cols + j];
            if (c->loss == KILN_LOSS_BINARY_CROSSENTROPY) {
                total += (fused ? fmax(zr[j], 0) - zr[j] * tj + log1p(exp(-fabs(zr[j])))
                                : -(tj * log(p) + (1 - tj) * log(1 - p))) / cols;
                *g = (fused ? yr[j] - tj : -tj / p + (1 - tj) / (1 - p)) * scale / cols;
            } else {
                total += fused ? -tj * (zr[j] - lse) : -tj * log(p);
                *g = fused ? (yr[j] * tsum - tj) * scale : -tj / p * scale;
            }
        }
    }
    return total / N;
}

static void loss_against_reference(kiln_context *ctx, const ls_case *c)
{
    const int cols = c->cols;
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    const kiln_dense_options d = {.struct_size = sizeof d, .units = cols, .activation = c->act};
    kiln_node out = kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    if (c->probs)
        out = kiln_flatten(m, out, NULL);
    /* One device whatever the machine has: the checks read replica 0. */
    const kiln_compile_options co = {.struct_size = sizeof co, .loss = c->loss,
                                     .label_smoothing = (float)LS,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    const size_t n = (size_t)N * cols;
    float x[N * IN], *t = calloc(n, 4), *z = calloc(n, 4), *y = calloc(n, 4), *g = calloc(n, 4);
    double *td = calloc(n, 8), *zd = calloc(n, 8), *yd = calloc(n, 8), *gd = calloc(n, 8);
    double *want_g = calloc(n, 8);
    int32_t ids[N];
    int ids_int[N];
    for (int i = 0; i < N * IN; i++)
        x[i] = (float)(3.0 * check_uniform());
    for (size_t i = 0; i < n; i++)
        td[i] = t[i] = c->loss == KILN_LOSS_BINARY_CROSSENTROPY
                           ? (float)(0.5 + 0.5 * check_uniform()) : 0.0f;
    for (int i = 0; i < N; i++) {
        ids[i] = ids_int[i] = (i * 7) % cols;
        if (c->loss == KILN_LOSS_CATEGORICAL_CROSSENTROPY)
            td[i * cols + ids[i]] = t[i * cols + ids[i]] = 1.0f;
    }
    const int sparse = c->loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    const kiln_batch b = {.n = N, .features = x,
                          .labels = sparse ? (const void *)ids : (const void *)t};
    double sums[KILN_N_SUMS];
    CHECK_OK(ctx, kiln_replica_upload(r, &b));
    CHECK_OK(ctx, kiln_replica_forward(r, N, 1));
    CHECK_OK(ctx, kiln_replica_loss(r, N, 1.0f / N));
    CHECK_OK(ctx, kiln_replica_read_sums(r, sums));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->out[out], 0, z, n * sizeof(float)));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->act[out], 0, y, n * sizeof(float)));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grad[out], 0, g, n * sizeof(float)));
    for (size_t i = 0; i < n; i++) {
        zd[i] = z[i];
        gd[i] = g[i];
    }
    /* y from the float64 activation of kiln's z, so only the loss is tested;
     * on probabilities y is kiln's. */
    if (!c->probs)
        ref_activation_forward(c->act, zd, N, cols, yd);
    else
        for (size_t i = 0; i < n; i++)
            yd[i] = y[i];
    const double want = reference(c, zd, yd, ids_int, td, want_g);
    const double got = sums[KILN_SUM_LOSS] / N;
    printf("%s over %d classes: loss %.7f (reference %.7f)\n", c->name, cols, got, want);
    CHECK(fabs(got - want) <= 2e-6 * (1 + fabs(want)));
    test_close(c->name, 0, gd, want_g, sizeof(double), (int64_t)n, TEST_OF_ARRAY, 1e-4);
    /* Accuracy reads the labels as given: argmax against the raw labels. */
    double correct = 0;
    for (int i = 0; i < N && c->loss != KILN_LOSS_BINARY_CROSSENTROPY; i++) {
        int best = 0;
        for (int j = 1; j < cols; j++)
            best = z[i * cols + j] > z[i * cols + best] ? j : best;
        correct += best == ids[i];
    }
    if (c->loss != KILN_LOSS_BINARY_CROSSENTROPY)
        CHECK(sums[KILN_SUM_CORRECT] == correct);
    free(t), free(z), free(y), free(g), free(td), free(zd), free(yd), free(gd), free(want_g);
    kiln_model_destroy(m);
}

#define H 6
#define C 4
#define B 8
#define STEPS 20

static kiln_model *classifier(kiln_context *ctx, kiln_loss loss, float ls)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = H,
                                       .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = C,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.5f};
    const kiln_compile_options co = {.struct_size = sizeof co, .loss = loss, .optimizer = &sgd,
                                     .label_smoothing = ls,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static void write_floats(FILE *f, const char *what, const float *v, int64_t n)
{
    fprintf(f, "%s", what);
    for (int64_t i = 0; i < n; i++)
        fprintf(f, " %.9g", v[i]);
    fprintf(f, "\n");
}

/* 20 steps in kiln, written with the initial weights and the batch for
 * the PyTorch script, which replays them in float64 and compares. */
static void against_torch(kiln_context *ctx, kiln_loss loss, const char *kind)
{
    const char *python = getenv("KILN_PYTHON"), *root = getenv("KILN_SOURCE_ROOT");
    kiln_model *m = classifier(ctx, loss, 0.1f);
    int64_t n = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &n));
    float *w = calloc((size_t)n, sizeof *w), x[B * IN], onehot[B * C];
    int32_t y[B];
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    for (int i = 0; i < B * IN; i++)
        x[i] = (float)(2.0 * check_uniform());
    for (int i = 0; i < B; i++) {
        y[i] = (i * 3) % C;
        for (int j = 0; j < C; j++)
            onehot[i * C + j] = j == y[i] ? 1.0f : 0.0f;
    }
    char path[80];
    snprintf(path, sizeof path, "/tmp/kiln-ls-%d-%s.txt", (int)getpid(), kind);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "shape %d %d %d %d %d\n", IN, H, C, B, STEPS);
    write_floats(f, "w0", w, n);
    write_floats(f, "x", x, B * IN);
    fprintf(f, "y");
    for (int i = 0; i < B; i++)
        fprintf(f, " %d", (int)y[i]);
    fprintf(f, "\n");
    const int sparse = loss == KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    const kiln_batch_arrays batch = {.count = B, .features = x,
                                     .sparse_labels = sparse ? y : NULL,
                                     .dense_labels = sparse ? NULL : onehot};
    float losses[STEPS];
    for (int s = 0; s < STEPS; s++) {
        kiln_metrics out = {.struct_size = sizeof out};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &batch, &out));
        losses[s] = (float)out.loss;
    }
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
    write_floats(f, "losses", losses, STEPS);
    write_floats(f, "w20", w, n);
    fprintf(f, "dense %d\n", !sparse);
    fclose(f);
    free(w);
    kiln_model_destroy(m);
    if (!python || !root) {
        unlink(path);
        SKIP_MISSING("KILN_PYTHON or KILN_SOURCE_ROOT not set (run through meson)");
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s/test/train/label_smoothing_torch.py %s", python, root, path);
    const int rc = system(cmd);
    unlink(path);
    if (rc != 0 && WEXITSTATUS(rc) == 77)
        SKIP_MISSING("PyTorch is not installed");
    CHECK(rc == 0);
}

static void refused(kiln_context *ctx, kiln_loss loss, float ls, const char *needle)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &(kiln_dense_options){
                                          .struct_size = sizeof(kiln_dense_options),
                                          .units = C, .activation = KILN_ACTIVATION_SOFTMAX});
    const kiln_compile_options co = {.struct_size = sizeof co, .loss = loss,
                                     .label_smoothing = ls};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, needle, kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* A model file keeps the setting: the loaded model's loss equals. */
static void model_file_keeps_it(kiln_context *ctx)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-ls-%d.safetensors", (int)getpid());
    kiln_model *m = classifier(ctx, KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, 0.3f), *l = NULL;
    CHECK_OK(ctx, kiln_model_save(m, path));
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, path, &one, &l));
    unlink(path);
    if (!l) {
        kiln_model_destroy(m);
        return;
    }
    CHECK(l->plan.heads[0].label_smoothing == 0.3f);
    float x[B * IN];
    int32_t y[B];
    for (int i = 0; i < B * IN; i++)
        x[i] = (float)check_uniform();
    for (int i = 0; i < B; i++)
        y[i] = i % C;
    const kiln_batch_arrays batch = {.count = B, .features = x, .sparse_labels = y};
    kiln_metrics a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    CHECK_OK(ctx, kiln_model_test_on_batch(m, &batch, &a));
    CHECK_OK(ctx, kiln_model_test_on_batch(l, &batch, &b));
    CHECK(a.loss == b.loss);
    printf("model file: label_smoothing %g kept, loss %.7f both\n",
           (double)l->plan.heads[0].label_smoothing, b.loss);
    kiln_model_destroy(m);
    kiln_model_destroy(l);
}

/* Two softmax heads on one Input, smoothing 0.2 on the first only: each
 * head's loss against float64 from its predicted probabilities; the
 * setting is refused on a mean squared error head and in compile's own
 * field for several outputs. */
static void several_outputs(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    const kiln_node x = kiln_input(m, 1, dims, NULL);
    const kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = C,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options b = {.struct_size = sizeof b, .name = "b", .units = C,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node heads[2] = {kiln_dense(m, x, &a), kiln_dense(m, x, &b)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    kiln_output_loss losses[2] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .label_smoothing = 0.2f},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .label_smoothing = 0.1f}};
    kiln_compile_options co = {.struct_size = sizeof co, .n_outputs = 2, .outputs = losses};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "outputs[].label_smoothing is 0.1 (output "
                "'b'), but label smoothing is for the cross-entropy losses",
                kiln_model_compile(m, &co));
    losses[1] = (kiln_output_loss){.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    co.label_smoothing = 0.2f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "leave loss 0 and label_smoothing 0 (it is "
                "0.2)", kiln_model_compile(m, &co));
    co.label_smoothing = 0.0f;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    float xs[B * IN], y[B * 2 * C];
    int32_t ids[2][B];
    for (int i = 0; i < B * IN; i++)
        xs[i] = (float)(2.0 * check_uniform());
    for (int i = 0; i < B; i++) {
        ids[0][i] = i % C;
        ids[1][i] = (i + 1) % C;
    }
    const kiln_label_array labels[2] = {{.sparse_labels = ids[0]}, {.sparse_labels = ids[1]}};
    const kiln_batch_arrays batch = {.count = B, .features = xs, .n_outputs = 2,
                                     .outputs = labels};
    const kiln_batch_arrays in = {.count = B, .features = xs};
    kiln_metrics got = {.struct_size = sizeof got};
    CHECK_OK(ctx, kiln_model_test_on_batch(m, &batch, &got));
    CHECK_OK(ctx, kiln_model_predict(m, &in, y, B));
    for (int k = 0; k < 2; k++) {
        const double ls = k == 0 ? 0.2 : 0.0;
        double want = 0;
        for (int i = 0; i < B; i++)
            for (int j = 0; j < C; j++)
                want -= ((j == ids[k][i]) * (1 - ls) + ls / C) *
                        log((double)y[i * 2 * C + k * C + j]) / B;
        printf("several outputs: head %d (label_smoothing %g): loss %.7f (reference %.7f)\n",
               k, ls, got.outputs[k].loss, want);
        CHECK(got.n_outputs == 2 && fabs(got.outputs[k].loss - want) <= 2e-6 * (1 + want));
    }
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = NULL;
    const kiln_context_options o = {.struct_size = sizeof o, .seed = 3};
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const ls_case cases[] = {
        {.name = "sparse_ce_logits", .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
         .act = KILN_ACTIVATION_SOFTMAX},
        {.name = "sparse_ce_probs", .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
         .act = KILN_ACTIVATION_SOFTMAX, .probs = 1},
        {.name = "ce_logits", .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY,
         .act = KILN_ACTIVATION_SOFTMAX},
        {.name = "ce_probs", .loss = KILN_LOSS_CATEGORICAL_CROSSENTROPY,
         .act = KILN_ACTIVATION_SOFTMAX, .probs = 1},
        {.name = "bce_logits", .loss = KILN_LOSS_BINARY_CROSSENTROPY,
         .act = KILN_ACTIVATION_SIGMOID},
        {.name = "bce_probs", .loss = KILN_LOSS_BINARY_CROSSENTROPY,
         .act = KILN_ACTIVATION_SIGMOID, .probs = 1},
    };
    for (int wide = 0; wide < 2; wide++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ls_case c = cases[i];
            c.cols = wide ? 70 : 5;
            loss_against_reference(ctx, &c);
        }
    model_file_keeps_it(ctx);
    several_outputs(ctx);
    refused(ctx, KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, 1.5f,
            "label_smoothing is 1.5 (output 'dense'); it must be in [0, 1]");
    refused(ctx, KILN_LOSS_CATEGORICAL_CROSSENTROPY, -0.1f, "label_smoothing is -0.1");
    refused(ctx, KILN_LOSS_BINARY_CROSSENTROPY, NAN, "label_smoothing is nan");
    refused(ctx, KILN_LOSS_BINARY_CROSSENTROPY, INFINITY, "label_smoothing is inf");
    refused(ctx, KILN_LOSS_MEAN_SQUARED_ERROR, 0.1f,
            "label smoothing is for the cross-entropy losses, not mean_squared_error");
    against_torch(ctx, KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, "sparse");
    against_torch(ctx, KILN_LOSS_CATEGORICAL_CROSSENTROPY, "dense");
    kiln_context_destroy(ctx);
    printf("%s\n", test_failures ? "FAILED" : "OK");
    return test_failures ? 1 : 0;
}
