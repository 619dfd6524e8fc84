/* Models of several outputs: a shared Dense trunk with a softmax head under
 * sparse cross-entropy and a linear head under mean squared error, loss
 * weights 1 and 0.5. The first step's losses and the parameters after SGD
 * steps against a float64 host reference; mirrored, central storage, the
 * pipeline and the parameter server on two devices (meson runs this with
 * POCL_DEVICES="basic basic"; skipped, saying why, on one) against one
 * device; the names and values the
 * history, evaluate, callbacks, CSVLogger, the progress line and the report
 * give; model files and checkpoints (a fit stopped and resumed);
 * accumulation, a zero weight and a non-finite loss; the Inputs and
 * outputs the public accessors list, and the summary's loss lines;
 * each bad model, option, dataset and description with its message. */
#include "runtime/saving/model_desc.h"
#include "runtime/train/progress.h"
#include "two_outputs.h"

#include <unistd.h>

static const double WEIGHT[2] = {1.0, 0.5};   /* the reference's, as compiled() is given */

/* ---- a float64 reference of a training step ------------------------------ */

typedef struct params {
    double tk[IN * HID], tb[HID], ck[HID * CLS], cb[CLS], rk[HID * REG], rb[REG];
} params;

static void read_tensor(kiln_context *ctx, kiln_model *m, const char *name, double *out, int n)
{
    float f[64];
    CHECK_OK(ctx, kiln_model_get_tensor(m, name, f, n));
    for (int i = 0; i < n; i++)
        out[i] = f[i];
}

static void read_params(kiln_context *ctx, kiln_model *m, params *p)
{
    read_tensor(ctx, m, "trunk/kernel", p->tk, IN * HID);
    read_tensor(ctx, m, "trunk/bias", p->tb, HID);
    read_tensor(ctx, m, "cls/kernel", p->ck, HID * CLS);
    read_tensor(ctx, m, "cls/bias", p->cb, CLS);
    read_tensor(ctx, m, "reg/kernel", p->rk, HID * REG);
    read_tensor(ctx, m, "reg/bias", p->rb, REG);
}

/* One SGD step on all N samples; the two losses (means) go to `loss`. */
static void reference_step(const data *d, const double *weight, params *p, double *loss)
{
    params g;
    memset(&g, 0, sizeof g);
    loss[0] = loss[1] = 0;
    for (int i = 0; i < N; i++) {
        double a[HID], h[HID], z[CLS], y[REG], dz[CLS], dy[REG], dh[HID] = {0};
        for (int u = 0; u < HID; u++) {
            a[u] = p->tb[u];
            for (int k = 0; k < IN; k++)
                a[u] += d->x[i * IN + k] * p->tk[k * HID + u];
            h[u] = a[u] > 0 ? a[u] : 0;
        }
        double top = -INFINITY, sum = 0;
        for (int c = 0; c < CLS; c++) {
            z[c] = p->cb[c];
            for (int u = 0; u < HID; u++)
                z[c] += h[u] * p->ck[u * CLS + c];
            top = z[c] > top ? z[c] : top;
        }
        for (int c = 0; c < CLS; c++)
            sum += exp(z[c] - top);
        loss[0] += (log(sum) + top - z[d->cls[i]]) / N;
        for (int c = 0; c < CLS; c++)
            dz[c] = weight[0] * (exp(z[c] - top) / sum - (c == d->cls[i])) / N;
        for (int o = 0; o < REG; o++) {
            y[o] = p->rb[o];
            for (int u = 0; u < HID; u++)
                y[o] += h[u] * p->rk[u * REG + o];
            const double e = y[o] - d->reg[i * REG + o];
            loss[1] += e * e / REG / N;
            dy[o] = weight[1] * 2 * e / REG / N;
        }
        for (int u = 0; u < HID; u++) {
            for (int c = 0; c < CLS; c++) {
                g.ck[u * CLS + c] += h[u] * dz[c];
                dh[u] += dz[c] * p->ck[u * CLS + c];
            }
            for (int o = 0; o < REG; o++) {
                g.rk[u * REG + o] += h[u] * dy[o];
                dh[u] += dy[o] * p->rk[u * REG + o];
            }
            const double da = a[u] > 0 ? dh[u] : 0;
            g.tb[u] += da;
            for (int k = 0; k < IN; k++)
                g.tk[k * HID + u] += d->x[i * IN + k] * da;
        }
        for (int c = 0; c < CLS; c++)
            g.cb[c] += dz[c];
        for (int o = 0; o < REG; o++)
            g.rb[o] += dy[o];
    }
    double *w = (double *)p;
    const double *gw = (const double *)&g;
    for (size_t k = 0; k < sizeof *p / sizeof(double); k++)
        w[k] -= LR * gw[k];
}

static double params_difference(const params *a, const params *b)
{
    return test_difference(a, b, sizeof(double), (int64_t)(sizeof *a / sizeof(double)),
                           TEST_PER_VALUE, NULL);
}

static void check_close(const char *what, double got, double want, double tol)
{
    const double e = test_difference(&got, &want, sizeof(double), 1, TEST_PER_VALUE, NULL);
    printf("%-58s %.7f against %.7f (%.1e)\n", what, got, want, e);
    if (!(e <= tol)) {
        fprintf(stderr, "%s: %.9g, the reference %.9g\n", what, got, want);
        test_failures++;
    }
}

static void test_reference(kiln_context *ctx, const data *d)
{
    const model_spec one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    kiln_model *m = compiled(ctx, &one);
    params p, got;
    read_params(ctx, m, &p);
    double loss[2];
    reference_step(d, WEIGHT, &p, loss);
    /* One step on the whole batch: its losses are those before the update. */
    const kiln_label_array labels[2] = {{.sparse_labels = d->cls},
                                        {.label_kind = KILN_LABELS_DENSE, .dense_labels = d->reg}};
    const kiln_batch_arrays batch = {.struct_size = sizeof batch, .count = N, .features = d->x,
                                     .n_outputs = 2, .outputs = labels};
    kiln_metrics r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &batch, &r));
    CHECK(r.n_outputs == 2 && strcmp(r.outputs[0].name, "cls") == 0 &&
          strcmp(r.outputs[1].name, "reg") == 0);
    check_close("first step: cls loss (sparse cross-entropy)", r.outputs[0].loss, loss[0], 1e-6);
    check_close("first step: reg loss (mean squared error)", r.outputs[1].loss, loss[1], 1e-6);
    check_close("first step: total loss 1.0 x cls + 0.5 x reg", r.loss,
                WEIGHT[0] * loss[0] + WEIGHT[1] * loss[1], 1e-6);
    CHECK(r.accuracy < 0 && r.outputs[0].accuracy >= 0 && r.outputs[1].accuracy < 0);
    read_params(ctx, m, &got);
    double e = params_difference(&got, &p);
    printf("parameters after one SGD step against the reference: %.2e\n", e);
    CHECK(e < 1e-5);
    /* Three more steps through fit (one batch of every sample, unshuffled). */
    kiln_dataset *ds = dataset(ctx, d, 0, N);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 3;
    fo.batch_size = N;
    fo.no_shuffle = 1;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    double first[2] = {0};
    for (int s = 0; s < 3; s++)
        reference_step(d, WEIGHT, &p, s == 0 ? first : loss);
    read_params(ctx, m, &got);
    e = params_difference(&got, &p);
    printf("parameters after three more SGD steps (fit) against the reference: %.2e\n", e);
    CHECK(e < 1e-5);
    kiln_epoch_record h = {.struct_size = sizeof h};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &h));
    CHECK(h.n_outputs == 2 && strcmp(h.outputs[1].name, "reg") == 0);
    check_close("history epoch 1: cls_loss", h.outputs[0].loss, first[0], 1e-6);
    check_close("history epoch 1: reg_loss", h.outputs[1].loss, first[1], 1e-6);
    check_close("history epoch 1: loss", h.loss, first[0] + 0.5 * first[1], 1e-6);
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
}

/* ---- strategies, evaluate and the history --------------------------------- */

static void weights_of(kiln_context *ctx, kiln_model *m, float *w, int64_t n)
{
    CHECK_OK(ctx, kiln_model_get_weights(m, w, n));
}

static void test_strategies(kiln_context *ctx, const data *d, int32_t devices)
{
    kiln_dataset *train = dataset(ctx, d, 0, 9), *val = dataset(ctx, d, 9, 3);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 4;   /* 4, 4 and 1: uneven splits over two replicas */
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = val;
    const model_spec one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    kiln_model *m = compiled(ctx, &one);
    int64_t n = 0;
    kiln_model_parameter_count(m, &n);
    float *base = calloc((size_t)n, sizeof(float)), *other = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    weights_of(ctx, m, base, n);
    kiln_epoch_record h = {.struct_size = sizeof h};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &h));
    kiln_metrics v = {.struct_size = sizeof v};
    CHECK_OK(ctx, kiln_model_evaluate(m, val, 2, &v));
    CHECK(h.has_validation && h.n_outputs == 2 && v.n_outputs == 2);
    CHECK(strcmp(h.val_outputs[0].name, "cls") == 0 && strcmp(v.outputs[1].name, "reg") == 0);
    check_close("evaluate: loss = cls_loss + 0.5 x reg_loss", v.loss,
                v.outputs[0].loss + 0.5 * v.outputs[1].loss, 1e-6);
    check_close("history val_cls_loss equals evaluate's", h.val_outputs[0].loss,
                v.outputs[0].loss, 1e-6);
    check_close("history val_reg_loss equals evaluate's", h.val_outputs[1].loss,
                v.outputs[1].loss, 1e-6);
    check_close("history val_cls_accuracy equals evaluate's", h.val_outputs[0].accuracy,
                v.outputs[0].accuracy, 1e-6);
    check_close("history val_loss equals evaluate's", h.val_loss, v.loss, 1e-6);
    CHECK(v.accuracy < 0 && v.outputs[1].accuracy < 0 && v.outputs[0].accuracy >= 0);
    /* predict: a sample's outputs one after another, cls's 3 then reg's 2. */
    float out[N * (CLS + REG)];
    int64_t width = 0;
    CHECK_OK(ctx, kiln_model_output_size(m, &width));
    CHECK(width == CLS + REG);
    CHECK_OK(ctx,
             kiln_model_predict(m, &(kiln_batch_arrays){.count = N, .features = d->x}, out, 5));
    double sum = out[0] + out[1] + out[2];
    CHECK(fabs(sum - 1.0) < 1e-5);
    float reg_out[N * REG];   /* the reg head alone, from the first layers' weights */
    params p;
    read_params(ctx, m, &p);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < REG; o++) {
            double y = p.rb[o];
            for (int u = 0; u < HID; u++) {
                double a = p.tb[u];
                for (int k = 0; k < IN; k++)
                    a += d->x[i * IN + k] * p.tk[k * HID + u];
                y += (a > 0 ? a : 0) * p.rk[u * REG + o];
            }
            reg_out[i * REG + o] = (float)y;
        }
    float packed_reg[N * REG];
    for (int i = 0; i < N; i++)
        memcpy(&packed_reg[i * REG], &out[i * (CLS + REG) + CLS], REG * sizeof(float));
    test_close("predict: the reg output's place in a sample, against float64", 58, packed_reg,
               reg_out, sizeof(float), N * REG, TEST_PER_VALUE, 1e-5);
    kiln_model_destroy(m);
    if (test_has_devices(devices, 2, "mirrored and central storage")) {
        const kiln_strategy strategies[] = {KILN_STRATEGY_MIRRORED, KILN_STRATEGY_CENTRAL_STORAGE};
        const char *names[] = {"mirrored (2 replicas)", "central_storage (2 replicas)"};
        for (int s = 0; s < 2; s++) {
            const model_spec spec = {.strategy = strategies[s], .replicas = 2,
                                     .weights = {1.0f, 0.5f}};
            m = compiled(ctx, &spec);
            CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
            weights_of(ctx, m, other, n);
            char what[96];
            snprintf(what, sizeof what, "%s against one device: weights", names[s]);
            test_close(what, 58, other, base, sizeof(float), n, TEST_PER_VALUE, 1e-5);
            kiln_epoch_record g = {.struct_size = sizeof g};
            CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &g));
            snprintf(what, sizeof what, "%s: last epoch's reg_loss", names[s]);
            check_close(what, g.outputs[1].loss, h.outputs[1].loss, 1e-5);
            snprintf(what, sizeof what, "%s: last epoch's val_cls_loss", names[s]);
            check_close(what, g.val_outputs[0].loss, h.val_outputs[0].loss, 1e-5);
            float got[N * (CLS + REG)];
            CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = N, .features = d->x},
                                             got, 5));
            snprintf(what, sizeof what, "%s against one device: predict", names[s]);
            test_close(what, 58, got, out, sizeof(float), N * (CLS + REG), TEST_PER_VALUE, 1e-5);
            kiln_model_destroy(m);
        }
    }
    free(base);
    free(other);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
}

/* ---- the pipeline ---------------------------------------------------------- */

/* The trunk on device 0 (nodes: features 0, trunk 1, cls 2, reg 3), the
 * heads as given; compiled with SGD, weights 1 and 0.5. */
static kiln_model *placed(kiln_context *ctx, kiln_node heads_from, kiln_status expect,
                          const char *message)
{
    kiln_node heads[2];
    kiln_model *m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    CHECK_OK(ctx, kiln_model_place(m, 0, heads_from - 1, 0));
    CHECK_OK(ctx, kiln_model_place(m, heads_from, 3, 1));
    const kiln_output_loss losses[2] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .weight = 1.0f},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .weight = 0.5f}};
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD,
                                              .learning_rate = (float)LR};
    kiln_compile_options co = {.struct_size = sizeof co, .n_outputs = 2, .outputs = losses,
                               .micro_batches = 2};
    co.optimizer = &optimizer;
    if (expect == KILN_OK)
        CHECK_OK(ctx, kiln_model_compile(m, &co));
    else
        CHECK_FAILS(ctx, expect, message, kiln_model_compile(m, &co));
    return m;
}

/* Both heads on the last stage: equal to one device (micro-batches of 2
 * and 2, or 1 and 0 for the last batch); a head on the first stage is
 * refused, naming it. */
static void test_pipeline(kiln_context *ctx, const data *d, int32_t devices)
{
    if (!test_has_devices(devices, 2, "the pipeline"))
        return;
    kiln_dataset *train = dataset(ctx, d, 0, 9), *val = dataset(ctx, d, 9, 3);
    const model_spec one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    kiln_model *a = compiled(ctx, &one), *b = placed(ctx, 2, KILN_OK, NULL);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 3;
    fo.batch_size = 4;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = val;
    const char *strategy = NULL;
    CHECK_OK(ctx, kiln_model_distribution(b, &strategy, NULL));
    CHECK(strategy && strcmp(strategy, "pipeline") == 0);
    CHECK_OK(ctx, kiln_model_fit(a, train, &fo));
    CHECK_OK(ctx, kiln_model_fit(b, train, &fo));
    int64_t n = 0;
    kiln_model_parameter_count(a, &n);
    float *wa = calloc((size_t)n, sizeof(float)), *wb = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    CHECK_OK(ctx, kiln_model_get_weights(b, wb, n));
    test_close("pipeline (heads on stage 1) against one device: weights", 58, wb, wa, sizeof(float),
               n, TEST_PER_VALUE, 1e-5);
    kiln_epoch_record ra = {.struct_size = sizeof ra}, rb = {.struct_size = sizeof rb};
    CHECK_OK(ctx, kiln_model_history_epoch(a, 2, &ra));
    CHECK_OK(ctx, kiln_model_history_epoch(b, 2, &rb));
    check_close("pipeline: last epoch's cls_loss", rb.outputs[0].loss, ra.outputs[0].loss,
                1e-5);
    check_close("pipeline: last epoch's reg_loss", rb.outputs[1].loss, ra.outputs[1].loss,
                1e-5);
    check_close("pipeline: last epoch's val_cls_accuracy", rb.val_outputs[0].accuracy,
                ra.val_outputs[0].accuracy, 1e-6);
    float pa[N * (CLS + REG)], pb[N * (CLS + REG)];
    CHECK_OK(ctx, kiln_model_predict(a, &(kiln_batch_arrays){.count = N, .features = d->x}, pa, 5));
    CHECK_OK(ctx, kiln_model_predict(b, &(kiln_batch_arrays){.count = N, .features = d->x}, pb, 5));
    test_close("pipeline against one device: predict", 58, pb, pa, sizeof(float), N * (CLS + REG),
               TEST_PER_VALUE, 1e-5);
    free(wa);
    free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    kiln_model_destroy(placed(ctx, 3, KILN_ERROR_UNSUPPORTED,
                              "output 'cls' of a model of several outputs is on stage 0 of 2"));
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
}

/* ---- the parameter server ------------------------------------------------- */

/* Asynchronous: one worker equals one device; two learn (both outputs'
 * losses fall), and evaluate reports both outputs from the store. */
static void test_parameter_server(kiln_context *ctx, const data *d, int32_t devices)
{
    kiln_dataset *ds = dataset(ctx, d, 0, N);
    const model_spec one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    const model_spec ps1 = {.strategy = KILN_STRATEGY_PARAMETER_SERVER, .replicas = 1,
                            .weights = {1.0f, 0.5f}};
    kiln_model *a = compiled(ctx, &one), *b = compiled(ctx, &ps1);
    int64_t n = 0;
    kiln_model_parameter_count(a, &n);
    float *wa = calloc((size_t)n, sizeof(float)), *wb = calloc((size_t)n, sizeof(float));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 5;
    fo.no_shuffle = 1;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(a, ds, &fo));
    CHECK_OK(ctx, kiln_model_fit(b, ds, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    CHECK_OK(ctx, kiln_model_get_weights(b, wb, n));
    test_close("parameter_server, one worker, against one device: weights", 58, wb, wa,
               sizeof(float), n, TEST_PER_VALUE, 1e-5);
    kiln_epoch_record ra = {.struct_size = sizeof ra}, rb = {.struct_size = sizeof rb};
    CHECK_OK(ctx, kiln_model_history_epoch(a, 1, &ra));
    CHECK_OK(ctx, kiln_model_history_epoch(b, 1, &rb));
    check_close("parameter_server, one worker: epoch 2's reg_loss", rb.outputs[1].loss,
                ra.outputs[1].loss, 1e-5);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    if (devices >= 2) {
        const model_spec ps2 = {.strategy = KILN_STRATEGY_PARAMETER_SERVER, .replicas = 2,
                                .weights = {1.0f, 0.5f}};
        kiln_model *c = compiled(ctx, &ps2);
        kiln_metrics before = {.struct_size = sizeof before},
                     after = {.struct_size = sizeof after};
        CHECK_OK(ctx, kiln_model_evaluate(c, ds, 4, &before));
        fo.epochs = 8;
        fo.batch_size = 3;
        CHECK_OK(ctx, kiln_model_fit(c, ds, &fo));
        CHECK_OK(ctx, kiln_model_evaluate(c, ds, 4, &after));
        printf("parameter_server, two workers: cls_loss %.4f to %.4f, reg_loss %.4f to %.4f "
               "in 8 epochs\n", before.outputs[0].loss, after.outputs[0].loss,
               before.outputs[1].loss, after.outputs[1].loss);
        CHECK(after.n_outputs == 2 && after.outputs[0].loss < 0.9 * before.outputs[0].loss &&
              after.outputs[1].loss < 0.9 * before.outputs[1].loss);
        kiln_model_destroy(c);
    }
    free(wa);
    free(wb);
    kiln_dataset_destroy(ds);
}

/* ---- accumulation, a zero weight, a non-finite loss ----------------------- */

static void fit_once(kiln_context *ctx, kiln_model *m, kiln_dataset *ds, int32_t batch,
                     int skip)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = batch;
    fo.no_shuffle = 1;
    fo.skip_nonfinite = skip;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
}

static void test_updates(kiln_context *ctx, const data *d)
{
    /* Two micro-steps of 4 accumulated are one step of 8 (equal halves, SGD). */
    kiln_dataset *eight = dataset(ctx, d, 0, 8);
    const model_spec whole = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    const model_spec halves = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f},
                               .accumulation = 2};
    kiln_model *a = compiled(ctx, &whole), *b = compiled(ctx, &halves);
    int64_t n = 0;
    kiln_model_parameter_count(a, &n);
    float *wa = calloc((size_t)n, sizeof(float)), *wb = calloc((size_t)n, sizeof(float));
    fit_once(ctx, a, eight, 8, 0);
    fit_once(ctx, b, eight, 4, 0);
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    CHECK_OK(ctx, kiln_model_get_weights(b, wb, n));
    test_close("gradient accumulation 2 x 4 against one step of 8", 58, wb, wa, sizeof(float), n,
               TEST_PER_VALUE, 1e-6);
    kiln_model_destroy(a);
    kiln_model_destroy(b);

    /* Weight 0 with has_weight: the reg head is exactly out of training; its loss is
     * still reported. */
    const model_spec off = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.0f},
                            .has_weight = {0, 1}};
    a = compiled(ctx, &off);
    params before, after;
    read_params(ctx, a, &before);
    fit_once(ctx, a, eight, 8, 0);
    read_params(ctx, a, &after);
    CHECK(memcmp(before.rk, after.rk, sizeof before.rk) == 0 &&
          memcmp(before.rb, after.rb, sizeof before.rb) == 0 &&
          memcmp(before.ck, after.ck, sizeof before.ck) != 0);
    kiln_epoch_record h = {.struct_size = sizeof h};
    CHECK_OK(ctx, kiln_model_history_epoch(a, 0, &h));
    check_close("weight 0: loss is cls_loss alone", h.loss, h.outputs[0].loss, 1e-6);
    CHECK(h.outputs[1].loss > 0);
    printf("weight 0: the reg head's weights are unchanged, reg_loss %.4f reported\n",
           h.outputs[1].loss);
    kiln_model_destroy(a);

    /* A reg target of 1e30 overflows its squared error: the step is not applied. */
    data big = *d;
    big.reg[3] = 1e30f;
    kiln_dataset *huge = dataset(ctx, &big, 0, 8);
    a = compiled(ctx, &whole);
    kiln_model_parameter_count(a, &n);
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = 8;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, "the loss or a gradient is", kiln_model_fit(a, huge, &fo));
    CHECK_OK(ctx, kiln_model_get_weights(a, wb, n));
    CHECK(memcmp(wa, wb, (size_t)n * sizeof(float)) == 0);
    fit_once(ctx, a, huge, 8, 1);
    CHECK_OK(ctx, kiln_model_get_weights(a, wb, n));
    CHECK(memcmp(wa, wb, (size_t)n * sizeof(float)) == 0);
    CHECK_OK(ctx, kiln_model_history_epoch(a, 0, &h));
    CHECK(h.skipped_steps == 1);
    printf("an infinite reg loss: fit fails with KILN_ERROR_NUMERIC, skip_nonfinite skips "
           "the step, weights unchanged\n");
    kiln_model_destroy(a);
    kiln_dataset_destroy(huge);
    kiln_dataset_destroy(eight);
    free(wa);
    free(wb);
}

/* ---- model files --------------------------------------------------------- */

/* A trained model of two outputs saved and loaded: the outputs, their
 * losses and weights (one of them exactly 0) come back, so evaluate,
 * predict and a further SGD step equal the original's. */
static void test_model_file(kiln_context *ctx, const data *d)
{
    const model_spec spec = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {0.0f, 0.0f},
                             .has_weight = {0, 1}};
    kiln_model *m = compiled(ctx, &spec);   /* weights 1 (the default) and exactly 0 */
    kiln_dataset *ds = dataset(ctx, d, 0, N);
    fit_once(ctx, m, ds, 5, 0);
    char dir[] = "/tmp/kiln_multi_output_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/model.kiln", dir);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *l = NULL;
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, path, &one, &l));
    if (l) {
        kiln_metrics a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
        CHECK_OK(ctx, kiln_model_evaluate(m, ds, 4, &a));
        CHECK_OK(ctx, kiln_model_evaluate(l, ds, 4, &b));
        printf("model file: evaluate's outputs %d, '%s' accuracy %g, '%s' accuracy %g\n",
               (int)b.n_outputs, b.outputs[0].name, b.outputs[0].accuracy, b.outputs[1].name,
               b.outputs[1].accuracy);
        CHECK(b.n_outputs == 2 && strcmp(b.outputs[1].name, "reg") == 0 &&
              b.outputs[0].accuracy >= 0 && b.outputs[1].accuracy < 0);
        check_close("model file: evaluate's loss (weights 1 and 0)", b.loss, a.loss, 0);
        check_close("model file: evaluate's reg_loss", b.outputs[1].loss, a.outputs[1].loss, 0);
        check_close("model file: the reg weight is 0", b.loss, b.outputs[0].loss, 1e-7);
        float pa[N * (CLS + REG)], pb[N * (CLS + REG)];
        CHECK_OK(ctx,
                 kiln_model_predict(m, &(kiln_batch_arrays){.count = N, .features = d->x}, pa, 5));
        CHECK_OK(ctx,
                 kiln_model_predict(l, &(kiln_batch_arrays){.count = N, .features = d->x}, pb, 5));
        test_close("model file: predict of the loaded model", 58, pb, pa, sizeof(float),
                   N * (CLS + REG), TEST_PER_VALUE, 0);
        fit_once(ctx, m, ds, N, 0);
        fit_once(ctx, l, ds, N, 0);
        int64_t n = 0;
        kiln_model_parameter_count(m, &n);
        float *wa = calloc((size_t)n, sizeof(float)), *wb = calloc((size_t)n, sizeof(float));
        CHECK_OK(ctx, kiln_model_get_weights(m, wa, n));
        CHECK_OK(ctx, kiln_model_get_weights(l, wb, n));
        test_close("model file: a further SGD step of the loaded model", 58, wb, wa, sizeof(float),
                   n, TEST_PER_VALUE, 0);
        free(wa);
        free(wb);
    }
    /* Descriptions whose outputs and losses do not fit together. */
    char *text = NULL;
    size_t length = 0;
    CHECK_OK(ctx, kiln_model_describe(m, "test", 0, &text, &length));
    const char *at = text ? strstr(text, "\"outputs\":[\"cls\",\"reg\"]") : NULL;
    CHECK(at != NULL);
    static const struct {
        const char *outputs, *message;
    } bad[] = {
        {"\"outputs\":[\"cls\",\"trunk\",\"reg\"]", "3 outputs but 2 losses"},
        {"\"outputs\":[\"cls\",\"nope\"]", "'outputs' item 1 is 'nope', which is not a layer"},
        {"\"outputs\":[\"cls\"]", "'outputs' must be an array of 2 to 8 layer names"},
    };
    for (size_t i = 0; at && i < sizeof bad / sizeof bad[0]; i++) {
        char tampered[8192];
        const char *end = at + strlen("\"outputs\":[\"cls\",\"reg\"]");
        snprintf(tampered, sizeof tampered, "%.*s%s%s", (int)(at - text), text, bad[i].outputs,
                 end);
        kiln_model_desc desc;
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, bad[i].message,
                    kiln_model_desc_parse(ctx, "test", tampered, strlen(tampered), &desc));
    }
    kiln_free(ctx, text);
    unlink(path);
    rmdir(dir);
    kiln_model_destroy(l);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* ---- checkpoints: a fit stopped inside an epoch and resumed ---------------- */

static int stop_at_epoch_2_step_2(void *user, const kiln_progress *p)
{
    (void)user;
    return p->event == KILN_EVENT_BATCH_END && p->epoch == 1 && p->step == 2
               ? KILN_CALLBACK_STOP : KILN_CALLBACK_CONTINUE;
}

static void fit_checkpointed(kiln_context *ctx, kiln_model *m, kiln_dataset *train,
                             kiln_dataset *val, const char *dir, int stop, int resume)
{
    const kiln_callback_spec stopper = {.struct_size = sizeof stopper,
                                        .kind = KILN_CALLBACK_FUNCTION,
                                        .function = stop_at_epoch_2_step_2};
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 4;   /* 9 samples: 3 steps an epoch */
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = val;
    fo.checkpoint_dir = dir;
    fo.checkpoint_every_steps = dir ? 1 : 0;
    fo.resume = resume;
    fo.callbacks = stop ? &stopper : NULL;
    fo.n_callbacks = stop ? 1 : 0;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
}

/* Two epochs, stopped after epoch 2's second step (checkpointed at every
 * step) and resumed in a new model: the weights and every epoch's
 * per-output values (epoch 2's means carry the sums from before the stop)
 * equal a fit never stopped; kiln_model_load reads the checkpoint as a
 * model of two outputs. */
static void test_checkpoints(kiln_context *ctx, const data *d)
{
    kiln_dataset *train = dataset(ctx, d, 0, 9), *val = dataset(ctx, d, 9, 3);
    const model_spec spec = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    char dir[] = "/tmp/kiln_multi_output_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    kiln_model *a = compiled(ctx, &spec), *b = compiled(ctx, &spec), *c = compiled(ctx, &spec);
    fit_checkpointed(ctx, a, train, val, NULL, 0, 0);
    fit_checkpointed(ctx, b, train, val, dir, 1, 0);
    int32_t length = 0;
    CHECK_OK(ctx, kiln_model_history_count(b, &length));
    CHECK(length == 1);
    fit_checkpointed(ctx, c, train, val, dir, 0, 1);
    int64_t n = 0;
    kiln_model_parameter_count(a, &n);
    float *wa = calloc((size_t)n, sizeof(float)), *wc = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(a, wa, n));
    CHECK_OK(ctx, kiln_model_get_weights(c, wc, n));
    test_close("checkpoint: stopped and resumed against never stopped", 58, wc, wa, sizeof(float),
               n, TEST_PER_VALUE, 0);
    CHECK_OK(ctx, kiln_model_history_count(c, &length));
    CHECK(length == 2);
    for (int32_t e = 0; e < 2 && length == 2; e++) {
        kiln_epoch_record ra = {.struct_size = sizeof ra}, rc = {.struct_size = sizeof rc};
        CHECK_OK(ctx, kiln_model_history_epoch(a, e, &ra));
        CHECK_OK(ctx, kiln_model_history_epoch(c, e, &rc));
        CHECK(rc.n_outputs == 2 && strcmp(rc.outputs[1].name, "reg") == 0 &&
              strcmp(rc.val_outputs[0].name, "cls") == 0);
        for (int k = 0; k < 2; k++) {
            CHECK(rc.outputs[k].loss == ra.outputs[k].loss);
            CHECK(rc.outputs[k].accuracy == ra.outputs[k].accuracy);
            CHECK(rc.val_outputs[k].loss == ra.val_outputs[k].loss);
            CHECK(rc.val_outputs[k].accuracy == ra.val_outputs[k].accuracy);
        }
        CHECK(rc.loss == ra.loss && rc.val_loss == ra.val_loss);
        printf("checkpoint: resumed epoch %d: loss %.7f, cls_loss %.7f, reg_loss %.7f, "
               "val_cls_accuracy %.4f: as never stopped\n", (int)e + 1, rc.loss,
               rc.outputs[0].loss, rc.outputs[1].loss, rc.val_outputs[0].accuracy);
    }
    /* The checkpoint file as a model: its outputs and losses. */
    char path[128];
    snprintf(path, sizeof path, "%s/saved.ckpt", dir);
    CHECK_OK(ctx, kiln_model_save_checkpoint(c, path));
    kiln_model *l = NULL;
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, path, &one, &l));
    kiln_metrics ml = {.struct_size = sizeof ml}, mc = {.struct_size = sizeof mc};
    if (l) {
        CHECK_OK(ctx, kiln_model_load_checkpoint(l, path));
        CHECK_OK(ctx, kiln_model_evaluate(l, val, 4, &ml));
        CHECK_OK(ctx, kiln_model_evaluate(c, val, 4, &mc));
        CHECK(ml.n_outputs == 2 && ml.outputs[1].loss == mc.outputs[1].loss &&
              ml.loss == mc.loss);
        kiln_epoch_record r = {.struct_size = sizeof r};
        CHECK_OK(ctx, kiln_model_history_epoch(l, 1, &r));
        CHECK(r.n_outputs == 2 && strcmp(r.outputs[0].name, "cls") == 0);
    }
    kiln_model_destroy(l);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    kiln_model_destroy(c);
    free(wa);
    free(wc);
    /* Leave nothing behind. */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    CHECK(system(cmd) == 0);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
}

/* ---- names in callbacks, CSVLogger, the progress line and the report ------- */

static int seen_outputs(void *user, const kiln_progress *p)
{
    int *ok = user;
    *ok &= p->n_outputs == 2 && strcmp(p->outputs[0].name, "cls") == 0 &&
           fabs(p->loss - (p->outputs[0].loss + 0.5 * p->outputs[1].loss)) < 1e-5 &&
           (p->event != KILN_EVENT_EPOCH_END ||
            (p->has_validation && strcmp(p->val_outputs[1].name, "reg") == 0));
    return KILN_CALLBACK_CONTINUE;
}

static char *slurp(const char *path)
{
    size_t size = 0;
    unsigned char *text = test_read_file(path, &size);
    char *s = calloc(size + 1, 1);
    if (text)
        memcpy(s, text, size);
    free(text);
    return s;
}

static void test_names(kiln_context *ctx, const data *d)
{
    const model_spec one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    kiln_model *m = compiled(ctx, &one);
    kiln_dataset *train = dataset(ctx, d, 0, 9), *val = dataset(ctx, d, 9, 3);
    char dir[] = "/tmp/kiln_multi_output_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char csv[128], report[128];
    snprintf(csv, sizeof csv, "%s/log.csv", dir);
    snprintf(report, sizeof report, "%s/report.html", dir);
    int ok = 1;
    const kiln_callback_spec cbs[3] = {
        {.struct_size = sizeof cbs[0], .kind = KILN_CALLBACK_CSV_LOGGER, .path = csv},
        {.struct_size = sizeof cbs[0], .kind = KILN_CALLBACK_EARLY_STOPPING,
         .monitor = "val_cls_accuracy", .patience = 5},
        {.struct_size = sizeof cbs[0], .kind = KILN_CALLBACK_FUNCTION,
         .function = seen_outputs, .user = &ok}};
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 1;
    fo.batch_size = 4;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = val;
    fo.callbacks = cbs;
    fo.n_callbacks = 3;
    fo.report_path = report;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    CHECK(ok);
    char *text = slurp(csv);
    const char *header = "epoch,cls_accuracy,cls_loss,learning_rate,loss,reg_loss,"
                         "val_cls_accuracy,val_cls_loss,val_loss,val_reg_loss\r\n";
    printf("CSVLogger's header: %s", text);
    CHECK(strncmp(text, header, strlen(header)) == 0);
    free(text);
    text = slurp(report);
    CHECK(strstr(text, "cls: sparse_categorical_crossentropy x 1, reg: mean_squared_error x 0.5"));
    CHECK(strstr(text, "<th>val_reg_loss</th>") && strstr(text, "<th>cls_accuracy</th>"));
    free(text);
    kiln_callback_spec bad = cbs[1];
    bad.monitor = "val_trunk_loss";
    fo.callbacks = &bad;
    fo.n_callbacks = 1;
    fo.report_path = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "val_cls_loss, val_cls_accuracy, val_reg_loss",
                kiln_model_fit(m, train, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &r));
    char line[1024];
    kiln_progress_format(line, sizeof line, 3, 3, 1, 0.2, r.loss, r.accuracy, &r);
    printf("progress line: %s\n", line);
    CHECK(strstr(line, "- cls_accuracy: ") && strstr(line, " - cls_loss: ") &&
          strstr(line, " - loss: ") && strstr(line, " - reg_loss: ") &&
          strstr(line, " - val_cls_accuracy: ") && strstr(line, " - val_loss: ") &&
          strstr(line, " - val_reg_loss: ") && !strstr(line, " - accuracy"));
    unlink(csv);
    unlink(report);
    rmdir(dir);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(val);
    kiln_model_destroy(m);
}

/* ---- the model's Inputs and outputs through the public accessors ---------- */

static void check_info(const kiln_tensor_info *t, const char *name, int32_t dim,
                       kiln_dtype dtype)
{
    const int ok = t->name && strcmp(t->name, name) == 0 && t->rank == 1 && t->dims[0] == dim &&
                   t->dims[1] == 0 && t->dtype == dtype;
    printf("%s: rank %d, (%d,), dtype %d%s\n", t->name ? t->name : "(null)", (int)t->rank,
           (int)t->dims[0], (int)t->dtype, ok ? "" : "  WRONG");
    CHECK(ok);
}

static void test_inputs_outputs(kiln_context *ctx)
{
    kiln_node heads[2];
    kiln_model *m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    int32_t count = 7;
    kiln_tensor_info t = {.struct_size = sizeof t};
    /* Compile decides which Inputs and outputs there are. */
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "kiln_model_output_count: compile the model first",
                kiln_model_output_count(m, &count));
    CHECK(count == 0);
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "kiln_model_input_info: compile the model first",
                kiln_model_input_info(m, 0, &t));
    kiln_model_destroy(m);

    const model_spec spec = {.strategy = KILN_STRATEGY_ONE_DEVICE, .weights = {1.0f, 0.5f}};
    m = compiled(ctx, &spec);
    CHECK_OK(ctx, kiln_model_input_count(m, &count));
    CHECK(count == 1);
    CHECK_OK(ctx, kiln_model_input_info(m, 0, &t));
    check_info(&t, "features", IN, KILN_DTYPE_FLOAT32);
    CHECK_OK(ctx, kiln_model_output_count(m, &count));
    CHECK(count == 2);
    int64_t size = 0, sum = 0;
    for (int32_t k = 0; k < count; k++) {
        CHECK_OK(ctx, kiln_model_output_info(m, k, &t));
        check_info(&t, k ? "reg" : "cls", k ? REG : CLS, KILN_DTYPE_FLOAT32);
        sum += t.dims[0];
    }
    CHECK_OK(ctx, kiln_model_output_size(m, &size));
    CHECK(size == sum);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_output_info: output 2 of 2",
                kiln_model_output_info(m, 2, &t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_input_info: input -1 of 1",
                kiln_model_input_info(m, -1, &t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_input_count: count is NULL",
                kiln_model_input_count(m, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "its struct_size is not "
                "sizeof(kiln_tensor_info)", kiln_model_output_info(m, 0, NULL));
    kiln_tensor_info old = {.struct_size = sizeof(size_t)};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_input_info: info is NULL or its "
                "struct_size", kiln_model_input_info(m, 0, &old));
    CHECK(kiln_model_output_count(NULL, &count) == KILN_ERROR_INVALID_ARGUMENT && count == 0);
    CHECK(kiln_model_output_info(NULL, 0, &t) == KILN_ERROR_INVALID_ARGUMENT);
    /* The summary ends with what compile chose. */
    char text[4096];
    CHECK_OK(ctx, kiln_model_summary(m, text, sizeof text, NULL));
    const char *tail = "Loss of output 'cls': sparse_categorical_crossentropy x 1 (with accuracy)\n"
                       "Loss of output 'reg': mean_squared_error x 0.5\n"
                       "Optimizer: sgd, learning rate 0.1\n";
    CHECK(strlen(text) > strlen(tail) && strcmp(text + strlen(text) - strlen(tail), tail) == 0);
    kiln_model_destroy(m);

    /* One output is 1 output. */
    m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_output(m, heads[1]));
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                               .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_OK(ctx, kiln_model_output_count(m, &count));
    CHECK(count == 1);
    CHECK_OK(ctx, kiln_model_output_info(m, 0, &t));
    check_info(&t, "reg", REG, KILN_DTYPE_FLOAT32);
    CHECK_OK(ctx, kiln_model_summary(m, text, sizeof text, NULL));
    CHECK(strstr(text, "\nLoss: mean_squared_error\nOptimizer: adam, learning rate 0.001\n"));
    kiln_model_destroy(m);

    /* Inputs in the order they were added, ids among them. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t three[] = {3}, two[] = {2};
    const kiln_node ids = kiln_input_ints(m, 1, three, &(kiln_input_options){.name = "ids"});
    const kiln_node floats = kiln_input(m, 1, two, &(kiln_input_options){.name = "floats"});
    const kiln_embedding_options e = {.struct_size = sizeof e, .input_dim = 10,
                                      .output_dim = 4};
    const kiln_node flat = kiln_flatten(m, kiln_embedding(m, ids, &e), NULL);
    const kiln_node both[] = {flat, floats};
    const kiln_dense_options out = {.struct_size = sizeof out, .name = "out", .units = 1};
    kiln_dense(m, kiln_concatenate(m, both, 2, NULL), &out);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_OK(ctx, kiln_model_input_count(m, &count));
    CHECK(count == 2);
    CHECK_OK(ctx, kiln_model_input_info(m, 0, &t));
    check_info(&t, "ids", 3, KILN_DTYPE_INT32);
    CHECK_OK(ctx, kiln_model_input_info(m, 1, &t));
    check_info(&t, "floats", 2, KILN_DTYPE_FLOAT32);
    kiln_model_destroy(m);
}

/* ---- bad models, options and datasets ------------------------------------- */

static void test_errors(kiln_context *ctx, const data *d)
{
    kiln_node heads[2];
    kiln_model *m = build(ctx, heads);
    const kiln_node nine[9] = {0};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "0 outputs", kiln_model_set_outputs(m, heads, 0));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "9 outputs", kiln_model_set_outputs(m, nine, 9));
    const kiln_node missing[2] = {heads[0], 42};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "node 42, which is not in the model",
                kiln_model_set_outputs(m, missing, 2));
    const kiln_node twice[2] = {heads[1], heads[1]};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "both layer 'reg'",
                kiln_model_set_outputs(m, twice, 2));
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    kiln_output_loss losses[2] = {{.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
                                  {.loss = KILN_LOSS_MEAN_SQUARED_ERROR}};
    kiln_compile_options co = {.struct_size = sizeof co, .n_outputs = 1, .outputs = losses};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "has 2 outputs (the first 'cls') but "
                "kiln_compile_options.outputs holds 1 losses", kiln_model_compile(m, &co));
    co.n_outputs = 2;
    losses[1].weight = -0.5f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "loss weight of output 1 ('reg') is -0.5",
                kiln_model_compile(m, &co));
    losses[1].weight = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "loss weight of output 1 ('reg') is nan",
                kiln_model_compile(m, &co));
    losses[1].weight = 0.5f;
    co.strategy = KILN_STRATEGY_ONE_DEVICE;
    co.top_k = 2;
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "several outputs", kiln_model_compile(m, &co));
    co.top_k = 0;
    CHECK_OK(ctx, kiln_model_compile(m, &co));

    /* Datasets: one label array for two outputs, a label array of the wrong size. */
    kiln_dataset *one = NULL, *bad = NULL;
    const kiln_arrays_desc single = {.struct_size = sizeof single, .count = N,
                                     .feature_rank = 1, .feature_dims = {IN},
                                     .features = d->x, .sparse_labels = d->cls};
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &single, &one));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "carries 1 label array per sample but the model has 2 "
                "outputs", kiln_model_evaluate(m, one, 4, &(kiln_metrics){.struct_size = 0}));
    const kiln_label_array wrong[2] = {
        {.label_kind = KILN_LABELS_SPARSE, .sparse_labels = d->cls},
        {.label_kind = KILN_LABELS_DENSE, .dense_labels = d->reg, .label_size = 1}};
    const kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = N, .feature_rank = 1,
                                   .feature_dims = {IN}, .features = d->x, .n_outputs = 2,
                                   .outputs = wrong};
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &bad));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "label array 1 of the dataset holds 1 floats per sample "
                "but output 'reg'", kiln_model_fit(m, bad, &fo));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_outputs is 9",
                kiln_dataset_from_arrays(ctx, &(kiln_arrays_desc){
                    .struct_size = sizeof desc, .count = N, .feature_rank = 1,
                    .feature_dims = {IN}, .features = d->x, .n_outputs = 9, .outputs = wrong},
                    &(kiln_dataset *){NULL}));
    kiln_dataset_destroy(one);
    kiln_dataset_destroy(bad);

    /* Three label arrays for two outputs; a model of one output given two losses. */
    const kiln_label_array three[3] = {wrong[0], wrong[0], wrong[0]};
    kiln_dataset *extra = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &(kiln_arrays_desc){
                      .struct_size = sizeof desc, .count = N, .feature_rank = 1,
                      .feature_dims = {IN}, .features = d->x, .n_outputs = 3,
                      .outputs = three}, &extra));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "carries 3 label arrays per sample but the model has 2 "
                "outputs (the first 'cls')", kiln_model_fit(m, extra, &fo));
    kiln_dataset_destroy(extra);
    kiln_model_destroy(m);
    m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_output(m, heads[0]));
    co.n_outputs = 2;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "losses for 2 outputs given, but the model "
                "has 1 output ('cls')", kiln_model_compile(m, &co));

    kiln_model_destroy(m);

    /* An output that feeds another layer. */
    m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    const kiln_node x = kiln_input(m, 1, dims, &(kiln_input_options){.name = "x"});
    const kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = 3};
    const kiln_dense_options b = {.struct_size = sizeof b, .name = "b", .units = 2};
    const kiln_node outs[2] = {kiln_dense(m, x, &a), 0};
    const kiln_node both[2] = {outs[0], kiln_dense(m, outs[0], &b)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, both, 2));
    losses[0].loss = KILN_LOSS_MEAN_SQUARED_ERROR;
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "output 'a' feeds layer 'b'",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* An Input as an output: it has no gradient for a loss to write. */
    m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_node in = kiln_input(m, 1, dims, &(kiln_input_options){.name = "x"});
    const kiln_node inputs_out[2] = {in, kiln_dense(m, in, &a)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, inputs_out, 2));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "input 'x' is one of the outputs",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 11};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    printf("%d device(s)\n", (int)devices);
    data d;
    make_data(&d);
    test_reference(ctx, &d);
    test_strategies(ctx, &d, devices);
    test_pipeline(ctx, &d, devices);
    test_parameter_server(ctx, &d, devices);
    test_updates(ctx, &d);
    test_model_file(ctx, &d);
    test_checkpoints(ctx, &d);
    test_names(ctx, &d);
    test_inputs_outputs(ctx);
    test_errors(ctx, &d);
    kiln_context_destroy(ctx);
    return test_finish("test_multi_output");
}
