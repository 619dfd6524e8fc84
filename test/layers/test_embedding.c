/* int32 Inputs, datasets of ids, Embedding and PositionEmbedding (whose
 * kernels test_layers checks against the references): every bad input with
 * its message, ids from .npy files and callbacks, and a small model trained
 * under every strategy against one device (meson runs this with
 * POCL_DEVICES="basic basic"; what needs two devices is skipped, saying
 * why, on one). */
#include "harness.h"
#include "npy_file.h"
#include "runtime/model/model.h"
#include "runtime/formats/npy.h"

#include <sys/wait.h>

#include <unistd.h>

#define VOCAB 11

/* ---- a small model of ids ----------------------------------------------- */

#define SAMPLES 48
#define LENGTH 6

/* Random ids (with repeats); the class is the first id's, modulo 3. */
static kiln_dataset *id_data(kiln_context *ctx, int bad_sample, int bad_position)
{
    int32_t ids[SAMPLES * LENGTH], labels[SAMPLES];
    uint64_t s = 7;
    for (int i = 0; i < SAMPLES; i++) {
        for (int p = 0; p < LENGTH; p++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            ids[i * LENGTH + p] = (int32_t)((s >> 33) % VOCAB);
        }
        labels[i] = ids[i * LENGTH] % 3;
    }
    if (bad_sample >= 0)
        ids[bad_sample * LENGTH + bad_position] = VOCAB;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = SAMPLES, .feature_rank = 1,
                          .feature_dims = {LENGTH}, .int_features = ids,
                          .sparse_labels = labels};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

typedef struct run {
    kiln_strategy strategy;
    int replicas, position;
} run;

/* ids (6) -> Embedding(11, 8) [-> PositionEmbedding(8)] -> Flatten -> Dense(3, softmax). */
static kiln_model *build(kiln_context *ctx, const run *r)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {LENGTH};
    kiln_input_ints(m, 1, dims, &(kiln_input_options){.name = "tokens"});
    const kiln_embedding_options eo = {.struct_size = sizeof eo, .input_dim = VOCAB,
                                       .output_dim = 8};
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    if (r->position) {
        const kiln_position_embedding_options po = {.struct_size = sizeof po,
                                                    .max_length = 8};
        kiln_position_embedding(m, KILN_NODE_PREVIOUS, &po);
    }
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .learning_rate = 0.03f};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = r->strategy, .replicas = r->replicas};
    co.optimizer = &optimizer;
    if (r->strategy == KILN_STRATEGY_PIPELINE)
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

/* Trains 3 epochs; the weights (caller frees), NULL when compile failed. */
static float *weights_after(kiln_context *ctx, kiln_dataset *ds, const run *r, int64_t *n,
                            double *loss)
{
    kiln_model *m = build(ctx, r);
    float *w = NULL;
    if (m->plan.compiled) {
        CHECK_OK(ctx, train(m, ds, 3));
        kiln_model_parameter_count(m, n);
        w = calloc((size_t)*n, sizeof(float));
        CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
        kiln_metrics e = {.struct_size = sizeof e};
        CHECK_OK(ctx, kiln_model_evaluate(m, ds, 16, &e));
        *loss = e.loss;
    }
    kiln_model_destroy(m);
    return w;
}

static void compare(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    test_close(what, 60, a, b, sizeof(float), n, TEST_PER_VALUE, tol);
}

static void test_strategies(kiln_context *ctx, int devices)
{
    kiln_dataset *ds = id_data(ctx, -1, 0);
    for (int position = 0; position < 2; position++) {
        int64_t n = 0;
        double loss0 = 0, loss = 0;
        const run one = {.strategy = KILN_STRATEGY_ONE_DEVICE, .position = position};
        float *base = weights_after(ctx, ds, &one, &n, &loss0);
        printf("%s: loss after 3 epochs %.4f (chance: %.4f)\n",
               position ? "embedding + positions" : "embedding", loss0, log(3.0));
        CHECK(loss0 < 0.9 * log(3.0));   /* it learned something */
        const int two = test_has_devices(devices, 2, "the strategies on 2 devices");
        static const struct {
            kiln_strategy strategy;
            const char *name;
        } others[] = {{KILN_STRATEGY_MIRRORED, "mirrored, 2 replicas"},
                      {KILN_STRATEGY_CENTRAL_STORAGE, "central_storage, 2 replicas"},
                      {KILN_STRATEGY_PIPELINE, "pipeline, 2 stages"}};
        for (int k = 0; two && k < 3; k++) {
            const run r = {.strategy = others[k].strategy, .replicas = 2, .position = position};
            float *w = weights_after(ctx, ds, &r, &n, &loss);
            char what[96];
            snprintf(what, sizeof what, "%s%s vs one_device", others[k].name,
                     position ? " (positions)" : "");
            compare(what, w, base, n, 1e-5);
            free(w);
        }
        /* Asynchronous: not the same weights, but it learns and checks ids. */
        const run ps = {.strategy = KILN_STRATEGY_PARAMETER_SERVER, .position = position};
        float *w = weights_after(ctx, ds, &ps, &n, &loss);
        printf("parameter_server%s: loss after 3 epochs %.4f\n", position ? " (positions)" : "",
               loss);
        CHECK(w && loss < 0.95 * log(3.0));
        free(w);
        free(base);
    }
    /* An id out of range stops every strategy before device work. */
    kiln_dataset *bad = id_data(ctx, 29, 4);
    const kiln_strategy all[] = {KILN_STRATEGY_ONE_DEVICE, KILN_STRATEGY_MIRRORED,
                                 KILN_STRATEGY_CENTRAL_STORAGE, KILN_STRATEGY_PIPELINE,
                                 KILN_STRATEGY_PARAMETER_SERVER};
    for (int k = 0; k < 5; k++) {
        if (devices < 2 && (all[k] == KILN_STRATEGY_PIPELINE))
            continue;
        const run r = {.strategy = all[k], .replicas = devices >= 2 ? 2 : 1};
        kiln_model *m = build(ctx, &r);
        if (m->plan.compiled)
            CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 29, position 4: id 11 is outside [0, 11)",
                        train(m, bad, 1));
        kiln_model_destroy(m);
    }
    kiln_dataset_destroy(bad);
    kiln_dataset_destroy(ds);
}

/* ---- bad input ---------------------------------------------------------- */

static void test_bad_graphs(kiln_context *ctx)
{
    const int32_t seq[] = {5}, wide[] = {5, 4};
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    const kiln_embedding_options eo = {.struct_size = sizeof eo, .input_dim = 7,
                                       .output_dim = 4};
    kiln_model *m = NULL;

    /* An Embedding fed by floats. */
    kiln_model_create(ctx, &m);
    kiln_input(m, 1, seq, &(kiln_input_options){.name = "floats"});
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'embedding' (embedding) reads int32 ids, but its "
                "input 'floats' (input_layer) holds floats", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* An Embedding fed by a float layer. */
    kiln_model_create(ctx, &m);
    kiln_input_ints(m, 1, seq, &(kiln_input_options){.name = "ids"});
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    kiln_flatten(m, KILN_NODE_PREVIOUS, &(kiln_flatten_options){.name = "flat"});
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'embedding_1' (embedding) reads int32 ids, but "
                "its input 'flat' (flatten) holds floats", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* A float layer fed by ids. */
    kiln_model_create(ctx, &m);
    kiln_input_ints(m, 1, seq, &(kiln_input_options){.name = "ids"});
    const kiln_dense_options d = {.struct_size = sizeof d, .units = 2};
    kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'dense' (dense) takes float values, but its input "
                "'ids' holds int32 ids", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* A sequence longer than the position table. */
    kiln_model_create(ctx, &m);
    kiln_input(m, 2, wide, NULL);
    const kiln_position_embedding_options po = {.struct_size = sizeof po, .max_length = 4,
                                                .name = "positions"};
    kiln_position_embedding(m, KILN_NODE_PREVIOUS, &po);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'positions' (position_embedding): the input (5, 4) "
                "is a sequence of 5 positions, longer than max_length 4",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* Positions of a rank-1 input; no max_length; an empty table. */
    kiln_model_create(ctx, &m);
    kiln_input(m, 1, seq, NULL);
    const kiln_position_embedding_options po1 = {.struct_size = sizeof po1, .max_length = 8};
    kiln_position_embedding(m, KILN_NODE_PREVIOUS, &po1);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "the input is (5,); it must be (sequence, width)",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    kiln_model_create(ctx, &m);
    kiln_input(m, 2, wide, NULL);
    kiln_position_embedding(m, KILN_NODE_PREVIOUS, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "max_length must be > 0",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    kiln_model_create(ctx, &m);
    kiln_input_ints(m, 1, seq, NULL);
    const kiln_embedding_options empty = {.struct_size = sizeof empty, .input_dim = 7};
    kiln_embedding(m, KILN_NODE_PREVIOUS, &empty);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "input_dim (7) and output_dim (0) must be > 0",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* Ids of rank 4 would give an output of rank 5. */
    const int32_t four[] = {2, 2, 2, 2};
    kiln_model_create(ctx, &m);
    kiln_input_ints(m, 4, four, NULL);
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "would give an output of rank 5",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

static void test_bad_data(kiln_context *ctx)
{
    int32_t ids[12] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4};
    float floats[12] = {0};
    int32_t labels[4] = {0, 1, 0, 1};
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 4, .feature_rank = 1,
                          .feature_dims = {3}, .sparse_labels = labels};
    kiln_dataset *ds = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "features and int_features are both NULL",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.features = floats;
    d.int_features = ids;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "both features and int_features are set",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    CHECK(ds == NULL);
    d.features = NULL;
    kiln_dataset *id_ds = NULL, *float_ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &id_ds));
    d.int_features = NULL;
    d.features = floats;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &float_ds));

    /* The type is reported, and each read takes its own. */
    kiln_dtype t = KILN_DTYPE_FLOAT16;
    CHECK_OK(ctx, kiln_dataset_feature_type(id_ds, &t));
    CHECK(t == KILN_DTYPE_INT32);
    CHECK_OK(ctx, kiln_dataset_feature_type(float_ds, &t));
    CHECK(t == KILN_DTYPE_FLOAT32);
    int32_t got[3] = {-1, -1, -1}, label = -1;
    CHECK_OK(ctx, kiln_dataset_read(id_ds, 2,
                                    &(kiln_sample_buffers){.int_features = got,
                                                           .sparse_labels = &label}));
    CHECK(got[0] == 6 && got[1] == 0 && got[2] == 1 && label == 0);
    float f[3];
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->features is set but the dataset's "
                "features are int32 ids; read them into buffers->int_features",
                kiln_dataset_read(id_ds, 0, &(kiln_sample_buffers){.features = f}));
    CHECK_OK(ctx, kiln_dataset_read(id_ds, 1, &(kiln_sample_buffers){.sparse_labels = &label}));
    CHECK(label == 1);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "features are floats",
                kiln_dataset_read(float_ds, 0, &(kiln_sample_buffers){.int_features = got}));
    const kiln_augment_options aug = {.struct_size = sizeof aug, .brightness = 0.1f};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "maps and augmentations work on float features",
                kiln_dataset_transform(id_ds, NULL, NULL, &aug));
    /* A subset keeps the type. */
    kiln_dataset *sub = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(id_ds, 1, 2, &sub));
    CHECK_OK(ctx, kiln_dataset_feature_type(sub, &t));
    CHECK(t == KILN_DTYPE_INT32);
    kiln_dataset_destroy(sub);

    /* Datasets of the other type, and ids out of range, at fit, evaluate, predict. */
    const int32_t seq[] = {3};
    kiln_model *m = NULL;
    kiln_model_create(ctx, &m);
    kiln_input_ints(m, 1, seq, &(kiln_input_options){.name = "tokens"});
    const kiln_embedding_options eo = {.struct_size = sizeof eo, .input_dim = 6,
                                       .output_dim = 4, .name = "lookup"};
    kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 2};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.batch_size = 2;
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "the dataset has float features but input "
                "'tokens' takes int32 ids", kiln_model_fit(m, float_ds, &fo));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "has float features but input 'tokens'",
                kiln_model_evaluate(m, float_ds, 2, &e));
    /* Id 6 (sample 2, position 0) is the first past input_dim 6. */
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2, position 0: id 6 is outside [0, 6), the "
                "input_dim of layer 'lookup'", kiln_model_fit(m, id_ds, &fo));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2, position 0: id 6",
                kiln_model_evaluate(m, id_ds, 2, &e));
    float out[8];
    CHECK_FAILS(
        ctx, KILN_ERROR_DATA, "kiln_model_predict: sample 2, position 0: id 6",
        kiln_model_predict(m, &(kiln_batch_arrays){.count = 4, .int_features = ids}, out, 3));
    const int32_t negative[6] = {0, 1, 2, 3, -1, 5};
    CHECK_FAILS(
        ctx, KILN_ERROR_DATA, "sample 1, position 1: id -1",
        kiln_model_predict(m, &(kiln_batch_arrays){.count = 2, .int_features = negative}, out, 0));
    CHECK_FAILS(
        ctx, KILN_ERROR_DATA, "kiln_model_train_on_batch: sample 1, position 1: id -1",
        kiln_model_train_on_batch(
            m, &(kiln_batch_arrays){.count = 2, .int_features = negative, .sparse_labels = labels},
            NULL));
    /* In range, through every entry point. */
    const int32_t fine[6] = {0, 1, 2, 3, 4, 5};
    CHECK_OK(ctx,
             kiln_model_predict(m, &(kiln_batch_arrays){.count = 2, .int_features = fine}, out, 0));
    CHECK_OK(ctx,
             kiln_model_train_on_batch(
                 m, &(kiln_batch_arrays){.count = 2, .int_features = fine, .sparse_labels = labels},
                 NULL));
    CHECK_OK(ctx, kiln_model_predict_on_batch(
                      m, &(kiln_batch_arrays){.count = 2, .int_features = fine}, out));
    kiln_dataset *good = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(id_ds, 0, 2, &good));
    CHECK_OK(ctx, kiln_model_fit(m, good, &fo));
    kiln_dataset_destroy(good);
    kiln_model_destroy(m);

    /* A dataset of ids for a float Input. */
    kiln_model_create(ctx, &m);
    kiln_input(m, 1, seq, &(kiln_input_options){.name = "pixels"});
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "the dataset has int32 id features but input "
                "'pixels' takes floats", kiln_model_fit(m, id_ds, &fo));
    kiln_model_destroy(m);
    kiln_dataset_destroy(id_ds);
    kiln_dataset_destroy(float_ds);
}

/* ---- other sources of ids ------------------------------------------------ */

static int fill_ids(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                    size_t size)
{
    (void)user, (void)message, (void)size;
    if (b->features || b->dense_labels)   /* only the dataset's kinds are set */
        return 1;
    for (int p = 0; p < 3; p++)
        b->int_features[p] = (int32_t)(index * 3 + p) % 7;
    *b->sparse_labels = (int32_t)(index % 2);
    return 0;
}

static void test_sources(kiln_context *ctx)
{
    char dir[] = "/tmp/kiln-embedding-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char ids_path[64], uint8_path[64], floats_path[64], labels_path[64];
    snprintf(ids_path, sizeof ids_path, "%s/ids.npy", dir);
    snprintf(uint8_path, sizeof uint8_path, "%s/ids8.npy", dir);
    snprintf(floats_path, sizeof floats_path, "%s/floats.npy", dir);
    snprintf(labels_path, sizeof labels_path, "%s/labels.npy", dir);
    const int32_t ids[8] = {5, 1, 2, 3, 2000000000, 0, 6, 6};
    const unsigned char ids8[8] = {5, 1, 2, 3, 200, 0, 6, 6};
    const float floats[8] = {0};
    const int32_t labels[4] = {0, 1, 1, 0};
    write_npy(ids_path, "<i4", 4, 2, ids, 4);
    write_npy(uint8_path, "|u1", 4, 2, ids8, 1);
    write_npy(floats_path, "<f4", 4, 2, floats, 4);
    write_npy(labels_path, "<i4", 4, 0, labels, 4);

    kiln_npy_options o = {.struct_size = sizeof o, .ids = 1};
    kiln_dataset *ds = NULL;
    for (int k = 0; k < 2; k++) {
        CHECK_OK(ctx, kiln_dataset_from_npy(ctx, k ? uint8_path : ids_path, labels_path, &o,
                                            &ds));
        kiln_dtype t = KILN_DTYPE_FLOAT32;
        CHECK_OK(ctx, kiln_dataset_feature_type(ds, &t));
        CHECK(t == KILN_DTYPE_INT32);
        int32_t got[2];
        CHECK_OK(ctx, kiln_dataset_read(ds, 2, &(kiln_sample_buffers){.int_features = got}));
        CHECK(got[0] == (k ? 200 : 2000000000) && got[1] == 0);
        CHECK_OK(ctx, kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.int_features = got}));
        CHECK(got[0] == 5 && got[1] == 1);
        /* Through fit: the big id is refused, naming where it is. */
        kiln_model *m = NULL;
        kiln_model_create(ctx, &m);
        const int32_t seq[] = {2};
        kiln_input_ints(m, 1, seq, NULL);
        const kiln_embedding_options eo = {.struct_size = sizeof eo, .input_dim = 7,
                                           .output_dim = 3};
        kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
        kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
        const kiln_dense_options head = {.struct_size = sizeof head, .units = 2};
        kiln_dense(m, KILN_NODE_PREVIOUS, &head);
        const kiln_compile_options co = {.struct_size = sizeof co,
                                         .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
        CHECK_OK(ctx, kiln_model_compile(m, &co));
        kiln_metrics e = {.struct_size = sizeof e};
        CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2, position 0: id",
                    kiln_model_evaluate(m, ds, 4, &e));
        kiln_model_destroy(m);
        kiln_dataset_destroy(ds);
        ds = NULL;
    }
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "ids are read from an integer array",
                kiln_dataset_from_npy(ctx, floats_path, labels_path, &o, &ds));
    o.scale = 2.0f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "ids is set, so scale (2) and offset (0) must "
                "be 0", kiln_dataset_from_npy(ctx, ids_path, labels_path, &o, &ds));
    CHECK(ds == NULL);
    remove(ids_path);
    remove(uint8_path);
    remove(floats_path);
    remove(labels_path);
    rmdir(dir);

    /* The callback source. */
    const kiln_callback_desc cd = {.struct_size = sizeof cd, .count = 10, .feature_rank = 1,
                                   .feature_dims = {3}, .fill = fill_ids, .int_features = 1};
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &cd, &ds));
    int32_t got[3];
    int32_t label = -1;
    CHECK_OK(ctx, kiln_dataset_read(ds, 4,
                                    &(kiln_sample_buffers){.int_features = got,
                                                           .sparse_labels = &label}));
    CHECK(got[0] == 5 && got[1] == 6 && got[2] == 0 && label == 0);
    kiln_dtype t = KILN_DTYPE_FLOAT32;
    CHECK_OK(ctx, kiln_dataset_feature_type(ds, &t));
    CHECK(t == KILN_DTYPE_INT32);
    kiln_dataset_destroy(ds);
}

/* Runs `command`, its stderr to `err`; the exit status, -1 if it did not exit. */
static int run_command(const char *command, const char *err)
{
    char line[1024];
    snprintf(line, sizeof line, "%s 2> '%s' > /dev/null", command, err);
    const int rc = system(line);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int file_holds(const char *path, const char *needle)
{
    char text[2048] = "";
    FILE *f = fopen(path, "r");
    const size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    return strstr(text, needle) != NULL;
}

/* The kiln tool on a saved model of ids: predict reads an integer .npy as
 * ids (the outputs kiln_model_predict gives), evaluate too; a float file
 * and --scale are refused with the input's name. */
static void test_cli(kiln_context *ctx, const char *kiln)
{
    char dir[] = "/tmp/kiln-embedding-cli-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char model[96], ids_path[96], floats_path[96], labels_path[96], out_path[96], err[96];
    char cmd[768];
    snprintf(model, sizeof model, "%s/ids.safetensors", dir);
    snprintf(ids_path, sizeof ids_path, "%s/ids.npy", dir);
    snprintf(floats_path, sizeof floats_path, "%s/floats.npy", dir);
    snprintf(labels_path, sizeof labels_path, "%s/labels.npy", dir);
    snprintf(out_path, sizeof out_path, "%s/out.npy", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    const run r = {.strategy = KILN_STRATEGY_ONE_DEVICE, .position = 1};
    kiln_model *m = build(ctx, &r);
    int32_t ids[5 * LENGTH], labels[5] = {0, 1, 2, 0, 1};
    float floats[5 * LENGTH] = {0}, want[5 * 3];
    for (int i = 0; i < 5 * LENGTH; i++)
        ids[i] = (i * 4) % VOCAB;
    write_npy(ids_path, "<i4", 5, LENGTH, ids, 4);
    write_npy(floats_path, "<f4", 5, LENGTH, floats, 4);
    write_npy(labels_path, "<i4", 5, 0, labels, 4);
    CHECK_OK(ctx, kiln_model_save(m, model));
    CHECK_OK(ctx,
             kiln_model_predict(m, &(kiln_batch_arrays){.count = 5, .int_features = ids}, want, 0));
    snprintf(cmd, sizeof cmd, "'%s' predict '%s' '%s' '%s'", kiln, model, ids_path, out_path);
    CHECK(run_command(cmd, err) == 0);
    kiln_npy got;
    memset(&got, 0, sizeof got);
    CHECK_OK(ctx, kiln_npy_map(ctx, out_path, &got));
    CHECK(got.data && got.rows == 5 && got.row_size == 3 &&
          memcmp(got.data, want, sizeof want) == 0);
    kiln_npy_unmap(&got);
    snprintf(cmd, sizeof cmd, "'%s' evaluate '%s' '%s' '%s'", kiln, model, ids_path,
             labels_path);
    CHECK(run_command(cmd, err) == 0);
    snprintf(cmd, sizeof cmd, "'%s' predict '%s' '%s' '%s'", kiln, model, floats_path, out_path);
    CHECK(run_command(cmd, err) == 1);
    CHECK(file_holds(err, "the model's input 'tokens' takes int32 ids"));
    snprintf(cmd, sizeof cmd, "'%s' evaluate '%s' '%s' '%s' --scale 2", kiln, model, ids_path,
             labels_path);
    CHECK(run_command(cmd, err) == 1);
    CHECK(file_holds(err, "ids is set, so scale (2)"));
    printf("kiln predict and evaluate on a model of ids: checked\n");
    kiln_model_destroy(m);
    const char *files[] = {model, ids_path, floats_path, labels_path, out_path, err};
    for (int k = 0; k < 6; k++)
        remove(files[k]);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 5};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(ctx);
    printf("%d device(s)\n", (int)devices);
    test_bad_graphs(ctx);
    test_bad_data(ctx);
    test_sources(ctx);
    test_strategies(ctx, devices);
    if (argc > 1)   /* meson passes the kiln tool */
        test_cli(ctx, argv[1]);
    kiln_context_destroy(ctx);
    return test_finish("test_embedding");
}
