/* Models of several Inputs: a float64 host reference of the forward pass,
 * training under every strategy against one device (meson runs this with
 * POCL_DEVICES="basic basic"; what needs two devices is skipped, saying
 * why, on one), the model file, ONNX export, and each bad dataset with its
 * message. test_gradcheck checks the backward of a two-input model. */
#include "kiln_config.h"
#include "runtime/model/model.h"
#include "three_inputs.h"

#include <unistd.h>

typedef struct run {
    kiln_strategy strategy;
    int replicas;
    int placed;      /* pipeline: the side input feeds the second stage */
} run;

/* three_inputs.h's model, mean squared error; placed: the side input and
 * what follows it on the second device. */
static kiln_model *build(kiln_context *ctx, const run *r)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_node side_in = three_inputs(m);
    if (r->placed) {
        CHECK_OK(ctx, kiln_model_place(m, 0, side_in - 1, 0));
        CHECK_OK(ctx, kiln_model_place(m, side_in, m->graph.n_nodes - 1, 1));
    }
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = 0.02f};
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                               .strategy = r->strategy, .replicas = r->replicas};
    co.optimizer = &optimizer;
    if (r->strategy == KILN_STRATEGY_PIPELINE && !r->placed)
        co.pipeline_stages = 2;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_status train(kiln_model *m, kiln_dataset *ds, int epochs)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 7;   /* splits 4 + 3; the last batch of 48 has 6 */
    fo.verbosity = KILN_VERBOSE_SILENT;
    return kiln_model_fit(m, ds, &fo);
}

static float *weights_of(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

static void compare(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    test_close(what, 60, a, b, sizeof(float), n, TEST_PER_VALUE, tol);
}

/* ---- a float64 reference of the forward pass ---------------------------- */

static void tensor(kiln_context *ctx, kiln_model *m, const char *name, double *out, int64_t n)
{
    float *f = calloc((size_t)n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_tensor(m, name, f, n));
    for (int64_t i = 0; i < n; i++)
        out[i] = f[i];
    free(f);
}

static void test_reference(kiln_context *ctx, const data *d)
{
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *m = build(ctx, &one);
    if (!m->plan.compiled) {
        kiln_model_destroy(m);
        return;
    }
    kiln_dataset *ds = dataset(ctx, d, 3);
    CHECK_OK(ctx, train(m, ds, 1));   /* weights that are not the initial draw */
    double ie[ITEMS * 4], ue[USERS * 3], sk[SIDE * 4], sb[4], hk[14 * 6], hb[6], ok[6], ob[1];
    tensor(ctx, m, "item_embedding/embeddings", ie, ITEMS * 4);
    tensor(ctx, m, "user_embedding/embeddings", ue, USERS * 3);
    tensor(ctx, m, "side_dense/kernel", sk, SIDE * 4);
    tensor(ctx, m, "side_dense/bias", sb, 4);
    tensor(ctx, m, "hidden/kernel", hk, 14 * 6);
    tensor(ctx, m, "hidden/bias", hb, 6);
    tensor(ctx, m, "head/kernel", ok, 6);
    tensor(ctx, m, "head/bias", ob, 1);
    float got[SAMPLES];
    kiln_input_array in[3];
    const kiln_batch_arrays inputs = inputs_of(d, in);
    CHECK_OK(ctx, kiln_model_predict(m, &inputs, got, 5));
    double worst = 0;
    for (int i = 0; i < SAMPLES; i++) {
        double c[14], h[6], y = ob[0];
        for (int k = 0; k < 4; k++)
            c[k] = ie[d->items[i] * 4 + k];
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < 3; k++)
                c[4 + 3 * p + k] = ue[d->users[2 * i + p] * 3 + k];
        for (int u = 0; u < 4; u++) {
            double a = sb[u];
            for (int k = 0; k < SIDE; k++)
                a += d->side[i * SIDE + k] * sk[k * 4 + u];
            c[10 + u] = tanh(a);
        }
        for (int u = 0; u < 6; u++) {
            h[u] = hb[u];
            for (int k = 0; k < 14; k++)
                h[u] += c[k] * hk[k * 6 + u];
            y += (h[u] > 0 ? h[u] : 0) * ok[u];
        }
        const double e = fabs(got[i] - y) / fmax(1.0, fabs(y));
        worst = e > worst ? e : worst;
    }
    printf("predict of three inputs against a float64 reference: max relative difference "
           "%.2e\n", worst);
    CHECK(worst < 1e-5);
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
}

/* ---- every strategy against one device ----------------------------------- */

static float *weights_after(kiln_context *ctx, kiln_dataset *ds, const run *r, int64_t *n,
                            double *loss)
{
    kiln_model *m = build(ctx, r);
    float *w = NULL;
    if (m->plan.compiled) {
        CHECK_OK(ctx, train(m, ds, 3));
        w = weights_of(ctx, m, n);
        kiln_metrics e = {.struct_size = sizeof e};
        CHECK_OK(ctx, kiln_model_evaluate(m, ds, 16, &e));
        *loss = e.loss;
    }
    kiln_model_destroy(m);
    return w;
}

static void test_strategies(kiln_context *ctx, const data *d, int devices)
{
    kiln_dataset *ds = dataset(ctx, d, 3);
    int64_t n = 0;
    double loss0 = 0, loss = 0, before = 0;
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *fresh = build(ctx, &one);
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_OK(ctx, kiln_model_evaluate(fresh, ds, 16, &e));
    before = e.loss;
    kiln_model_destroy(fresh);
    float *base = weights_after(ctx, ds, &one, &n, &loss0);
    printf("one_device: loss %.4f before, %.4f after 3 epochs\n", before, loss0);
    CHECK(loss0 < 0.7 * before);   /* it learned something */
    const int two = test_has_devices(devices, 2, "the strategies on 2 devices");
    static const struct {
        run r;
        const char *name;
    } others[] = {
        {{.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2}, "mirrored, 2 replicas"},
        {{.strategy = KILN_STRATEGY_CENTRAL_STORAGE, .replicas = 2}, "central_storage, 2 replicas"},
        {{.strategy = KILN_STRATEGY_PIPELINE}, "pipeline, 2 stages (automatic)"},
        {{.strategy = KILN_STRATEGY_PIPELINE, .placed = 1},
         "pipeline, input 'side' on the second stage"}};
    for (int k = 0; two && k < 4; k++) {
        float *w = weights_after(ctx, ds, &others[k].r, &n, &loss);
        compare(others[k].name, w, base, n, 1e-5);
        free(w);
    }
    /* Asynchronous: not the same weights, but it learns. */
    const run ps = {.strategy = KILN_STRATEGY_PARAMETER_SERVER};
    float *w = weights_after(ctx, ds, &ps, &n, &loss);
    printf("parameter_server: loss after 3 epochs %.4f\n", loss);
    CHECK(w && loss < 0.8 * before);
    free(w);
    free(base);

    /* Predictions agree across strategies, and with predict_on_batch. */
    float p0[SAMPLES], p1[SAMPLES];
    kiln_model *m = build(ctx, &one);
    kiln_input_array in[3];
    const kiln_batch_arrays all = inputs_of(d, in);
    CHECK_OK(ctx, kiln_model_predict(m, &all, p0, 9));
    CHECK_OK(ctx, kiln_model_predict_on_batch(m, &all, p1));
    compare("predict_on_batch vs predict", p1, p0, SAMPLES, 0);
    kiln_model_destroy(m);
    if (devices >= 2) {
        m = build(ctx, &others[0].r);
        CHECK_OK(ctx, kiln_model_predict(m, &all, p1, 9));
        compare("mirrored predict vs one_device", p1, p0, SAMPLES, 1e-6);
        kiln_model_destroy(m);
    }
    kiln_dataset_destroy(ds);
}

/* train_on_batch on the packed samples, batch after batch, equals fit
 * unshuffled on the dataset, bit for bit; test_on_batch equals evaluate. */
static void test_on_batch(kiln_context *ctx, const data *d, const run *r, const char *name)
{
    kiln_model *a = build(ctx, r), *b = build(ctx, r);
    if (!a->plan.compiled || !b->plan.compiled) {
        kiln_model_destroy(a);
        kiln_model_destroy(b);
        return;
    }
    kiln_dataset *ds = dataset(ctx, d, 3);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.batch_size = 8;
    fo.no_shuffle = 1;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(a, ds, &fo));
    kiln_input_array in[3];
    for (int start = 0; start < SAMPLES; start += 8) {
        const kiln_batch_arrays eight = batch_of(d, start, 8, in);
        CHECK_OK(ctx, kiln_model_train_on_batch(b, &eight, NULL));
    }
    int64_t n = 0;
    float *wa = weights_of(ctx, a, &n), *wb = weights_of(ctx, b, &n);
    char what[96];
    snprintf(what, sizeof what, "%s: train_on_batch vs fit", name);
    compare(what, wb, wa, n, 0);
    kiln_metrics e = {.struct_size = sizeof e}, t = {.struct_size = sizeof t};
    CHECK_OK(ctx, kiln_model_evaluate(a, ds, SAMPLES, &e));
    const kiln_batch_arrays all = batch_of(d, 0, SAMPLES, in);
    CHECK_OK(ctx, kiln_model_test_on_batch(a, &all, &t));
    printf("%s: test_on_batch loss %.7f, evaluate %.7f\n", name, t.loss, e.loss);
    CHECK(fabs(t.loss - e.loss) <= 1e-7 * fmax(1.0, e.loss));
    free(wa), free(wb);
    kiln_dataset_destroy(ds);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

/* ---- bad datasets and ids ------------------------------------------------ */

static void test_errors(kiln_context *ctx, const data *d, int devices)
{
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *m = build(ctx, &one);
    kiln_metrics e = {.struct_size = sizeof e};

    /* The wrong number of input arrays. */
    kiln_dataset *two = dataset(ctx, d, 2);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "the dataset carries 2 input arrays per sample but the "
                "model has 3 inputs", train(m, two, 1));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "carries 2 input arrays", kiln_model_evaluate(m, two, 8,
                                                                                     &e));
    kiln_dataset_destroy(two);
    const kiln_arrays_desc single = {.struct_size = sizeof single, .count = SAMPLES,
                                     .feature_rank = 1, .feature_dims = {SIDE},
                                     .features = d->side, .label_kind = KILN_LABELS_DENSE,
                                     .label_size = 1, .dense_labels = d->y};
    kiln_dataset *one_array = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &single, &one_array));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "carries 1 input array per sample but the model has 3 "
                "inputs (the first 'item')", train(m, one_array, 1));
    kiln_dataset_destroy(one_array);

    /* An input array whose shape or type is not its Input's, named. */
    kiln_input_array in[3] = {
        {.rank = 1, .dims = {1}, .int_features = d->items},
        {.rank = 1, .dims = {2}, .int_features = d->users},
        {.rank = 2, .dims = {1, SIDE}, .features = d->side}};
    kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = SAMPLES,
                             .label_kind = KILN_LABELS_DENSE, .label_size = 1,
                             .dense_labels = d->y, .n_inputs = 3, .inputs = in};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "input array 2 of the dataset samples are (1, 3) but "
                "input 'side' is (3,)", train(m, ds, 1));
    kiln_dataset_destroy(ds);
    in[2] = (kiln_input_array){.rank = 1, .dims = {SIDE}, .features = d->side};
    in[1] = (kiln_input_array){.rank = 1, .dims = {2}, .features = d->side};
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "input array 1 of the dataset has float "
                "features but input 'user' takes int32 ids", train(m, ds, 1));
    kiln_dataset_destroy(ds);
    in[1] = (kiln_input_array){.rank = 1, .dims = {2}, .int_features = d->users};

    /* A Dot of two lengths. */
    kiln_model *dot = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &dot));
    const int32_t four[] = {4}, three[] = {3};
    const kiln_node a = kiln_input(dot, 1, four, &(kiln_input_options){.name = "a"});
    const kiln_node b = kiln_input(dot, 1, three, &(kiln_input_options){.name = "b"});
    kiln_dot(dot, a, b, &(kiln_dot_options){.name = "meet"});
    const kiln_compile_options mse = {.struct_size = sizeof mse,
                                      .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'meet' (dot): its inputs are (4,) and (3,)",
                kiln_model_compile(dot, &mse));
    kiln_model_destroy(dot);

    /* One Input more than a model may have. */
    CHECK_OK(ctx, kiln_model_create(ctx, &dot));
    kiln_node many[KILN_MAX_MODEL_INPUTS + 1];
    for (int k = 0; k <= KILN_MAX_MODEL_INPUTS; k++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", k);
        many[k] = kiln_input(dot, 1, three, &(kiln_input_options){.name = name});
    }
    const kiln_node halves[2] = {kiln_concatenate(dot, many, 5, NULL),
                                 kiln_concatenate(dot, many + 5, KILN_MAX_MODEL_INPUTS - 4, NULL)};
    kiln_concatenate(dot, halves, 2, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "input 'x8' is one more than the 8 Inputs a model "
                "may have", kiln_model_compile(dot, &mse));
    kiln_model_destroy(dot);

    /* Descriptions kiln_dataset_from_arrays refuses. */
    in[0].features = d->side;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs[0]: both features and int_features "
                "are set", kiln_dataset_from_arrays(ctx, &desc, &ds));
    in[0].features = NULL;
    in[2].rank = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs[2]: feature_rank is 0",
                kiln_dataset_from_arrays(ctx, &desc, &ds));
    in[2].rank = 1;
    desc.features = d->side;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_inputs is 3, so feature_rank, features "
                "and int_features must be left zero", kiln_dataset_from_arrays(ctx, &desc, &ds));
    desc.features = NULL;
    desc.n_inputs = KILN_MAX_MODEL_INPUTS + 1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_inputs is 9",
                kiln_dataset_from_arrays(ctx, &desc, &ds));
    desc.n_inputs = 3;
    float nan_side[SAMPLES * SIDE];
    memcpy(nan_side, d->side, sizeof nan_side);
    nan_side[5 * SIDE + 1] = NAN;
    in[2].features = nan_side;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 5, element 1 of its input 2 is NaN",
                kiln_dataset_from_arrays(ctx, &desc, &ds));
    in[2].features = d->side;
    CHECK(ds == NULL);

    /* A dataset of several inputs reads as the packed samples predict takes,
     * and is not augmented or mapped. */
    ds = dataset(ctx, d, 3);
    kiln_dtype type;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs hold 2 of ids and 1 of floats",
                kiln_dataset_feature_type(ds, &type));
    int32_t rank = 0, dims[KILN_MAX_RANK];
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, dims, NULL));
    CHECK(rank == 1 && dims[0] == PER_SAMPLE);
    float packed[SAMPLES * PER_SAMPLE], sample[PER_SAMPLE];
    pack(d, packed);
    CHECK_OK(ctx, kiln_dataset_read(ds, 17, &(kiln_sample_buffers){.features = sample}));
    CHECK(memcmp(sample, packed + 17 * PER_SAMPLE, sizeof sample) == 0);
    const kiln_augment_options aug = {.struct_size = sizeof aug, .brightness = 0.1f};
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "holds 3 inputs per sample",
                kiln_dataset_transform(ds, NULL, NULL, &aug));
    kiln_dataset_destroy(ds);

    /* An id out of range on the second input, at every entry point. */
    data bad = *d;
    bad.users[29 * 2 + 1] = USERS;
    ds = dataset(ctx, &bad, 3);
    const char *why = "sample 29, position 1 of input 'user': id 13 is outside [0, 13), the "
                      "input_dim of layer 'user_embedding'";
    CHECK_FAILS(ctx, KILN_ERROR_DATA, why, train(m, ds, 1));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, why, kiln_model_evaluate(m, ds, 8, &e));
    float out[SAMPLES];
    kiln_input_array bad_in[3];
    const kiln_batch_arrays bad_batch = batch_of(&bad, 0, SAMPLES, bad_in);
    const kiln_batch_arrays bad_inputs = inputs_of(&bad, bad_in);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "kiln_model_predict: sample 29, position 1 of input "
                "'user': id 13", kiln_model_predict(m, &bad_inputs, out, 8));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "kiln_model_train_on_batch: sample 29, position 1 of "
                "input 'user'", kiln_model_train_on_batch(m, &bad_batch, NULL));
    kiln_model_destroy(m);
    /* Each table its own limit: 10 is a user id, but no item id. */
    bad = *d;
    bad.users[3] = 10;
    bad.items[4] = 10;
    kiln_dataset *items = dataset(ctx, &bad, 3);
    const kiln_strategy all[] = {KILN_STRATEGY_ONE_DEVICE, KILN_STRATEGY_MIRRORED,
                                 KILN_STRATEGY_CENTRAL_STORAGE, KILN_STRATEGY_PIPELINE,
                                 KILN_STRATEGY_PARAMETER_SERVER};
    for (int k = 0; k < 5; k++) {
        if (devices < 2 && all[k] == KILN_STRATEGY_PIPELINE)
            continue;
        const run r = {.strategy = all[k], .replicas = devices >= 2 ? 2 : 1};
        m = build(ctx, &r);
        if (m->plan.compiled) {
            CHECK_FAILS(ctx, KILN_ERROR_DATA, why, train(m, ds, 1));
            CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 4, position 0 of input 'item': id 10 is "
                        "outside [0, 7), the input_dim of layer 'item_embedding'",
                        train(m, items, 1));
        }
        kiln_model_destroy(m);
    }
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(ds);
}

/* ---- model files and ONNX ------------------------------------------------ */

static void test_files(kiln_context *ctx, const data *d)
{
    char dir[] = "/tmp/kiln-multi-input-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[96], onnx[96];
    snprintf(path, sizeof path, "%s/two_towers.safetensors", dir);
    snprintf(onnx, sizeof onnx, "%s/two_towers.onnx", dir);
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *m = build(ctx, &one);
    kiln_dataset *ds = dataset(ctx, d, 3);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation_split = 0.25f;   /* subsets of a dataset of several inputs */
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *l = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &l));
    float a[SAMPLES], b[SAMPLES];
    kiln_input_array three[3];
    const kiln_batch_arrays inputs = inputs_of(d, three);
    CHECK_OK(ctx, kiln_model_predict(m, &inputs, a, 0));
    if (l) {
        CHECK(l->graph.n_inputs == 3 && strcmp(l->graph.nodes[l->graph.inputs[1]].name, "user") == 0 &&
              l->graph.ids[1].limit == USERS && l->graph.ids[0].limit == ITEMS && l->graph.ids[2].limit == 0);
        CHECK_OK(ctx, kiln_model_predict(l, &inputs, b, 0));
        compare("loaded model's predictions vs the saved one's", b, a, SAMPLES, 0);
    }
    kiln_model_destroy(l);
#if KILN_HAVE_ONNX
    CHECK_OK(ctx, kiln_model_export_onnx(m, onnx));
    CHECK(access(onnx, R_OK) == 0);
    unlink(onnx);
#else
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "built without ONNX export", kiln_model_export_onnx(m, onnx));
    CHECK(access(onnx, F_OK) != 0);
#endif

    /* Two id towers meeting in a Dot: the file keeps it (test_onnx exports it). */
    kiln_model *dot = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &dot));
    const int32_t id[] = {1};
    const kiln_embedding_options ue = {.struct_size = sizeof ue, .input_dim = USERS,
                                       .output_dim = 5};
    const kiln_embedding_options ie = {.struct_size = sizeof ie, .input_dim = ITEMS,
                                       .output_dim = 5};
    /* One statement per tower: the order of declaration is the input order. */
    const kiln_input_options un = {.struct_size = sizeof un, .name = "u"};
    const kiln_input_options in = {.struct_size = sizeof in, .name = "i"};
    const kiln_node u = kiln_embedding(dot, kiln_input_ints(dot, 1, id, &un), &ue);
    const kiln_node i = kiln_embedding(dot, kiln_input_ints(dot, 1, id, &in), &ie);
    kiln_dot(dot, kiln_flatten(dot, u, NULL), kiln_flatten(dot, i, NULL),
             &(kiln_dot_options){.name = "score"});
    const kiln_compile_options mse = {.struct_size = sizeof mse,
                                      .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(dot, &mse));
    const kiln_input_array towers[2] = {
        {.rank = 1, .dims = {1}, .int_features = d->users},
        {.rank = 1, .dims = {1}, .int_features = d->items}};
    const kiln_batch_arrays pairs = {.struct_size = sizeof pairs, .count = SAMPLES,
                                     .n_inputs = 2, .inputs = towers};
    CHECK_OK(ctx, kiln_model_save(dot, path));
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &l));
    CHECK_OK(ctx, kiln_model_predict(dot, &pairs, a, 0));
    if (l) {
        CHECK_OK(ctx, kiln_model_predict(l, &pairs, b, 0));
        compare("loaded Dot model's predictions vs the saved one's", b, a, SAMPLES, 0);
    }
    kiln_model_destroy(l);
    kiln_model_destroy(dot);
    unlink(path);
    rmdir(dir);
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 5};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    printf("%d device(s)\n", (int)devices);
    data d;
    make_data(&d);
    test_reference(ctx, &d);
    test_strategies(ctx, &d, devices);
    const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE};
    const run mirrored = {.strategy = KILN_STRATEGY_MIRRORED, .replicas = 2};
    test_on_batch(ctx, &d, &one, "one_device");
    if (devices >= 2)
        test_on_batch(ctx, &d, &mirrored, "mirrored");
    test_errors(ctx, &d, devices);
    test_files(ctx, &d);
    kiln_context_destroy(ctx);
    return test_finish("test_multi_input");
}
