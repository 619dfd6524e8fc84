/* kiln_dataset_zip: a model of two inputs (an item id and SIDE floats) and
 * two outputs (a softmax head under sparse cross-entropy, a linear head
 * under mean squared error) trained on a zip of a .npy source of ids, an
 * application's callback and host arrays must train exactly as on the
 * same values given as host arrays of several inputs and outputs (same
 * batches, so the same weights bit for bit); the same for one output.
 * Reads, subsets and a joined dataset's map and augmentations; the checks a zip adds to its
 * sources' (sparse ids as they are read, ids against the Embedding); a
 * .npy file without labels as an input; and every bad description, naming
 * its place. */
#include "harness.h"
#include "npy_file.h"
#include "runtime/data/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

enum { N = 40, ITEMS = 7, SIDE = 3, CLS = 3, REG = 2, PACKED = 1 + SIDE };

typedef struct data {
    int32_t item[N], cls[N];
    float side[N * SIDE], reg[N * REG];
    int32_t bad_cls_at;      /* the callback's class label here is CLS (-1: none) */
    int32_t fail_at;         /* the callback fails here (-1: none) */
    int32_t nan_at;          /* fill_ids' regression target is NaN here (-1: none) */
} data;

static void make_data(data *d)
{
    uint64_t s = 5;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        d->item[i] = (int32_t)((s >> 33) % ITEMS);
        for (int k = 0; k < SIDE; k++)
            d->side[i * SIDE + k] = (float)(((s >> (8 * k + 3)) & 255) / 255.0 - 0.5);
        d->cls[i] = (d->item[i] + (d->side[i * SIDE] > 0)) % CLS;
        for (int k = 0; k < REG; k++)
            d->reg[i * REG + k] = 0.4f * d->side[i * SIDE + k] - 0.1f * (float)(d->item[i] % 2);
    }
    d->bad_cls_at = d->fail_at = d->nan_at = -1;
}

/* item -> Embedding(ITEMS, 4) -> Flatten; side -> Dense(4, tanh);
 * Concatenate -> Dense(6, relu) -> cls (softmax) and, with two outputs,
 * reg (linear). */
static kiln_model *build(kiln_context *ctx, int outputs)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t one[] = {1}, side[] = {SIDE};
    const kiln_embedding_options e = {.struct_size = sizeof e, .input_dim = ITEMS,
                                      .output_dim = 4, .name = "item_embedding"};
    const kiln_dense_options sd = {.struct_size = sizeof sd, .units = 4, .name = "side_dense",
                                   .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 6,
                                       .name = "hidden", .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options cls = {.struct_size = sizeof cls, .units = CLS, .name = "cls",
                                    .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options reg = {.struct_size = sizeof reg, .units = REG, .name = "reg"};
    kiln_node item = kiln_input_ints(m, 1, one, &(kiln_input_options){.name = "item"});
    item = kiln_flatten(m, kiln_embedding(m, item, &e), NULL);
    const kiln_node s = kiln_dense(m, kiln_input(m, 1, side,
                                                 &(kiln_input_options){.name = "side"}), &sd);
    const kiln_node both[] = {item, s};
    const kiln_node h = kiln_dense(m, kiln_concatenate(m, both, 2, NULL), &hidden);
    kiln_node heads[2];
    heads[0] = kiln_dense(m, h, &cls);
    if (outputs == 2) {
        heads[1] = kiln_dense(m, h, &reg);
        CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    }
    const kiln_output_loss losses[2] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .weight = 1.0f},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .weight = 0.5f}};
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 0.01f};
    kiln_compile_options co = {.struct_size = sizeof co};
    if (outputs == 2) {
        co.n_outputs = 2;
        co.outputs = losses;
    } else {
        co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    }
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* The reference: the same values as host arrays of two inputs and one or
 * two label arrays. */
static kiln_dataset *arrays(kiln_context *ctx, const data *d, int outputs)
{
    const kiln_input_array in[2] = {{.rank = 1, .dims = {1}, .int_features = d->item},
                                    {.rank = 1, .dims = {SIDE}, .features = d->side}};
    const kiln_label_array out[2] = {
        {.label_kind = KILN_LABELS_SPARSE, .sparse_labels = d->cls},
        {.label_kind = KILN_LABELS_DENSE, .dense_labels = d->reg, .label_size = REG}};
    kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = N, .n_inputs = 2,
                             .inputs = in};
    if (outputs == 2) {
        desc.n_outputs = 2;
        desc.outputs = out;
    } else {
        desc.sparse_labels = d->cls;
    }
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    return ds;
}

/* ---- the joined sources ------------------------------------------------- */

static char dir[64];

/* The item ids and class labels as .npy files: ids for input 0, the
 * labels for output 0 (the file's labels). */
static kiln_dataset *npy_items(kiln_context *ctx, const data *d)
{
    char ids[96], labels[96];
    snprintf(ids, sizeof ids, "%s/item.npy", dir);
    snprintf(labels, sizeof labels, "%s/cls.npy", dir);
    write_npy(ids, "<i4", N, 1, d->item, 4);
    write_npy(labels, "<i4", N, 0, d->cls, 4);
    const kiln_npy_options o = {.struct_size = sizeof o, .ids = 1};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, ids, labels, &o, &ds));
    return ds;
}

/* The side floats and regression targets through the application. */
static int fill_side(void *user, int64_t i, const kiln_sample_buffers *b, char *message,
                     size_t size)
{
    const data *d = user;
    if (i == d->fail_at) {
        snprintf(message, size, "record %lld is missing", (long long)i);
        return 1;
    }
    memcpy(b->features, d->side + i * SIDE, SIDE * sizeof(float));
    memcpy(b->dense_labels, d->reg + i * REG, REG * sizeof(float));
    return 0;
}

static kiln_dataset *callback_side(kiln_context *ctx, const data *d)
{
    const kiln_callback_desc c = {.struct_size = sizeof c, .count = N, .feature_rank = 1,
                                  .feature_dims = {SIDE}, .label_kind = KILN_LABELS_DENSE,
                                  .label_size = REG, .fill = fill_side, .user = (void *)d};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &c, &ds));
    return ds;
}

/* Item ids and regression targets through the application: ids, so no
 * float features to check, and labels it alone has seen. */
static int fill_ids(void *user, int64_t i, const kiln_sample_buffers *b, char *message,
                    size_t size)
{
    const data *d = user;
    (void)message, (void)size;
    b->int_features[0] = d->item[i];
    memcpy(b->dense_labels, d->reg + i * REG, REG * sizeof(float));
    if (i == d->nan_at)
        b->dense_labels[1] = NAN;
    return 0;
}

static kiln_dataset *callback_ids(kiln_context *ctx, const data *d)
{
    const kiln_callback_desc c = {.struct_size = sizeof c, .count = N, .feature_rank = 1,
                                  .feature_dims = {1}, .label_kind = KILN_LABELS_DENSE,
                                  .label_size = REG, .fill = fill_ids, .user = (void *)d,
                                  .int_features = 1};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &c, &ds));
    return ds;
}

/* Class labels through the application (unchecked until read). */
static int fill_cls(void *user, int64_t i, const kiln_sample_buffers *b, char *message,
                    size_t size)
{
    const data *d = user;
    (void)message, (void)size;
    b->features[0] = 0.0f;
    *b->sparse_labels = i == d->bad_cls_at ? CLS : d->cls[i];
    return 0;
}

static kiln_dataset *callback_cls(kiln_context *ctx, const data *d)
{
    const kiln_callback_desc c = {.struct_size = sizeof c, .count = N, .feature_rank = 1,
                                  .feature_dims = {1}, .fill = fill_cls, .user = (void *)d};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &c, &ds));
    return ds;
}

static kiln_status zip(kiln_context *ctx, const kiln_dataset *const *in, int32_t n_in,
                       const kiln_dataset *const *out, int32_t n_out, kiln_dataset **ds)
{
    const kiln_zip_desc z = {.struct_size = sizeof z, .n_inputs = n_in, .inputs = in,
                             .n_outputs = n_out, .outputs = out};
    return kiln_dataset_zip(ctx, &z, ds);
}

/* ---- training ------------------------------------------------------------ */

static float *weights_of(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

static kiln_status fit(kiln_model *m, const kiln_dataset *ds, const kiln_dataset *val)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 3;
    fo.batch_size = 8;
    fo.validation = val;
    fo.verbosity = KILN_VERBOSE_SILENT;
    return kiln_model_fit(m, ds, &fo);
}

/* Fit on `zipped` equals fit on `reference`: weights bit for bit, and
 * evaluate's losses. */
static void same_training(kiln_context *ctx, const char *what, int outputs,
                          const kiln_dataset *reference, const kiln_dataset *zipped)
{
    kiln_model *a = build(ctx, outputs), *b = build(ctx, outputs);
    CHECK_OK(ctx, fit(a, reference, reference));
    CHECK_OK(ctx, fit(b, zipped, zipped));
    int64_t n = 0;
    float *wa = weights_of(ctx, a, &n), *wb = weights_of(ctx, b, &n);
    char line[96];
    snprintf(line, sizeof line, "%s: weights after 3 epochs", what);
    test_close(line, 60, wb, wa, sizeof(float), n, TEST_PER_VALUE, 0);
    kiln_metrics ea = {.struct_size = sizeof ea}, eb = {.struct_size = sizeof eb};
    CHECK_OK(ctx, kiln_model_evaluate(a, reference, 16, &ea));
    CHECK_OK(ctx, kiln_model_evaluate(b, zipped, 16, &eb));
    printf("%s: evaluate loss %.7f on the zip, %.7f on the arrays\n", what, eb.loss, ea.loss);
    CHECK(ea.loss == eb.loss && ea.samples == N && eb.samples == N);
    free(wa), free(wb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

/* Every sample of `zipped` reads as the reference's packed sample. */
static void same_reads(kiln_context *ctx, const kiln_dataset *reference,
                       const kiln_dataset *zipped, int64_t first)
{
    int64_t count = 0;
    CHECK_OK(ctx, kiln_dataset_count(zipped, &count));
    int differ = 0;
    for (int64_t i = 0; i < count; i++) {
        float fa[PACKED], fb[PACKED], la[1 + REG], lb[1 + REG];
        CHECK_OK(ctx, kiln_dataset_read(reference, first + i,
                                        &(kiln_sample_buffers){.features = fa,
                                                               .dense_labels = la}));
        CHECK_OK(ctx, kiln_dataset_read(zipped, i,
                                        &(kiln_sample_buffers){.features = fb,
                                                               .dense_labels = lb}));
        differ += memcmp(fa, fb, sizeof fa) != 0 || memcmp(la, lb, sizeof la) != 0;
    }
    printf("reads of %lld samples: %d differ\n", (long long)count, differ);
    CHECK(differ == 0);
}

static void test_two_outputs(kiln_context *ctx, const data *d)
{
    kiln_dataset *ref = arrays(ctx, d, 2);
    kiln_dataset *items = npy_items(ctx, d), *side = callback_side(ctx, d);
    const kiln_dataset *in[] = {items, side}, *out[] = {items, side};
    kiln_dataset *z = NULL;
    CHECK_OK(ctx, zip(ctx, in, 2, out, 2, &z));
    /* The zip holds what it joins. */
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(side);
    int32_t rank = 0, dims[4] = {0};
    kiln_dtype type = KILN_DTYPE_FLOAT32;
    CHECK_OK(ctx, kiln_dataset_sample_shape(z, &rank, dims, NULL));
    CHECK(rank == 1 && dims[0] == PACKED);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "hold 1 of ids and 1 of floats",
                kiln_dataset_feature_type(z, &type));
    same_reads(ctx, ref, z, 0);
    kiln_dataset *sub = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(z, 13, 9, &sub));
    same_reads(ctx, ref, sub, 13);
    kiln_dataset_destroy(sub);
    same_training(ctx, "two outputs (npy, callback)", 2, ref, z);
    kiln_dataset_destroy(z);
    kiln_dataset_destroy(ref);
}

static void test_one_output(kiln_context *ctx, const data *d)
{
    kiln_dataset *ref = arrays(ctx, d, 1);
    kiln_dataset *items = npy_items(ctx, d), *side = callback_side(ctx, d);
    const kiln_dataset *in[] = {items, side}, *out[] = {items};
    kiln_dataset *z = NULL;
    CHECK_OK(ctx, zip(ctx, in, 2, out, 1, &z));
    int32_t label = -1;
    float f[PACKED];
    CHECK_OK(ctx, kiln_dataset_read(z, 5,
                                    &(kiln_sample_buffers){.features = f,
                                                           .sparse_labels = &label}));
    CHECK(label == d->cls[5]);
    same_training(ctx, "one output (npy, callback)", 1, ref, z);
    kiln_dataset_destroy(z);
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(side);
    kiln_dataset_destroy(ref);
}

/* A joined dataset's map applies to what the zip reads. */
static int double_it(void *user, int64_t index, float *x, char *message, size_t size)
{
    (void)user, (void)index, (void)message, (void)size;
    for (int k = 0; k < SIDE; k++)
        x[k] *= 2.0f;
    return 0;
}

static void test_map(kiln_context *ctx, const data *d)
{
    kiln_dataset *items = npy_items(ctx, d), *side = callback_side(ctx, d);
    CHECK_OK(ctx, kiln_dataset_transform(side, double_it, NULL, NULL));
    const kiln_dataset *in[] = {items, side}, *out[] = {items, side};
    kiln_dataset *z = NULL;
    CHECK_OK(ctx, zip(ctx, in, 2, out, 2, &z));
    float f[PACKED];
    CHECK_OK(ctx, kiln_dataset_read(z, 7, &(kiln_sample_buffers){.features = f}));
    CHECK(f[1] == 2.0f * d->side[7 * SIDE] && f[3] == 2.0f * d->side[7 * SIDE + 2]);
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "2 inputs",
                kiln_dataset_transform(z, double_it, NULL, NULL));
    kiln_dataset_destroy(z);
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(side);
}

/* A joined dataset's augmentations see the zip's plan: in training the
 * zip reads what the dataset alone would read under that plan (the same
 * draws), in evaluation the plain sample. */
static int fill_image(void *user, int64_t i, const kiln_sample_buffers *b, char *message,
                      size_t size)
{
    (void)user, (void)message, (void)size;
    for (int k = 0; k < 16; k++)
        b->features[k] = (float)(i * 16 + k);
    *b->sparse_labels = (int32_t)(i % CLS);
    return 0;
}

static void test_augmentation(kiln_context *ctx)
{
    const kiln_callback_desc c = {.struct_size = sizeof c, .count = N, .feature_rank = 3,
                                  .feature_dims = {4, 4, 1}, .fill = fill_image};
    kiln_dataset *image = NULL, *z = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &c, &image));
    const kiln_augment_options aug = {.struct_size = sizeof aug, .flip_horizontal = 1,
                                      .flip_vertical = 1, .seed = 9};
    CHECK_OK(ctx, kiln_dataset_transform(image, NULL, NULL, &aug));
    const kiln_dataset *one[] = {image};
    CHECK_OK(ctx, zip(ctx, one, 1, one, 1, &z));
    int flipped = 0, differ = 0;
    for (int epoch = 0; epoch < 2; epoch++)
        for (int64_t i = 0; i < N; i++) {
            const kiln_read_plan train = {.augment = 1, .epoch = epoch};
            float a[16], b[16], plain[16], scratch[16];
            int32_t la = -1, lb = -2;
            CHECK_OK(ctx, kiln_dataset_read_sample(image, i, &train, a, &la, scratch));
            CHECK_OK(ctx, kiln_dataset_read_sample(z, i, &train, b, &lb, scratch));
            CHECK_OK(ctx, kiln_dataset_read(z, i, &(kiln_sample_buffers){.features = plain}));
            differ += memcmp(a, b, sizeof a) != 0 || la != lb;
            flipped += memcmp(a, plain, sizeof a) != 0;
            CHECK(plain[5] == (float)(i * 16 + 5));
        }
    printf("augmented reads through the zip: %d of %d differ from the dataset's own, %d "
           "flipped\n", differ, 2 * N, flipped);
    CHECK(differ == 0 && flipped > N / 2);
    kiln_dataset_destroy(z);
    kiln_dataset_destroy(image);
}

/* What a source cannot know before it is read, the zip checks then. */
static void test_bad_values(kiln_context *ctx, data *d)
{
    kiln_dataset *items = npy_items(ctx, d), *side = callback_side(ctx, d);
    kiln_dataset *cls = callback_cls(ctx, d);
    const kiln_dataset *in[] = {items, side}, *out[] = {cls, side};
    kiln_dataset *z = NULL;
    CHECK_OK(ctx, zip(ctx, in, 2, out, 2, &z));
    kiln_model *m = build(ctx, 2);
    d->bad_cls_at = 17;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 17: label array 0 has label 3, outside [0, 3)",
                fit(m, z, NULL));
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "label array 0 has label 3",
                kiln_model_evaluate(m, z, 8, &e));
    d->bad_cls_at = -1;
    kiln_dataset_destroy(z);
    /* From a file, the zip names the sample, the label array and the file
     * before training, as host arrays are named. */
    char item_path[96], bad[96], want[320];
    snprintf(item_path, sizeof item_path, "%s/item.npy", dir);
    snprintf(bad, sizeof bad, "%s/cls_bad.npy", dir);
    d->cls[11] = CLS;
    write_npy(bad, "<i4", N, 0, d->cls, 4);
    d->cls[11] = 0;
    const kiln_npy_options ido = {.struct_size = sizeof ido, .ids = 1};
    kiln_dataset *bad_cls = NULL;
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, item_path, bad, &ido, &bad_cls));
    const kiln_dataset *bad_out[] = {bad_cls, side};
    CHECK_OK(ctx, zip(ctx, in, 2, bad_out, 2, &z));
    snprintf(want, sizeof want, "sample 11 (label array 0, outputs[0]: %s) has label 3 but "
             "output 'cls' has 3 classes", bad);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, want, fit(m, z, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, want, kiln_model_evaluate(m, z, 8, &e));
    kiln_dataset_destroy(z);
    CHECK_OK(ctx, zip(ctx, in, 2, out, 2, &z));
    d->fail_at = 22;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "the zip's inputs[1]: the dataset's fill callback "
                "failed on sample 22: record 22 is missing", fit(m, z, NULL));
    d->fail_at = -1;
    CHECK_OK(ctx, fit(m, z, NULL));
    kiln_dataset_destroy(z);
    /* A NaN target from a callback of ids (no float features to check). */
    kiln_dataset *ids = callback_ids(ctx, d);
    const kiln_dataset *nan_out[] = {cls, ids};
    CHECK_OK(ctx, zip(ctx, in, 2, nan_out, 2, &z));
    d->nan_at = 31;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 31: element 1 of its label is NaN", fit(m, z, NULL));
    d->nan_at = -1;
    kiln_dataset_destroy(z);
    kiln_dataset_destroy(ids);
    /* An id beyond the Embedding's input_dim, from the .npy file. */
    d->item[9] = ITEMS;
    kiln_dataset *bad_items = npy_items(ctx, d);
    d->item[9] = 0;
    const kiln_dataset *in2[] = {bad_items, side};
    CHECK_OK(ctx, zip(ctx, in2, 2, out, 2, &z));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 9, position 0 of input 'item': id 7 is outside "
                "[0, 7)", fit(m, z, NULL));
    kiln_dataset_destroy(z);
    /* A label array of another size than its output takes. */
    const kiln_dataset *swapped[] = {side, cls};
    CHECK_OK(ctx, zip(ctx, in, 2, swapped, 2, &z));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "label array 0 of the dataset holds 2 floats",
                fit(m, z, NULL));
    kiln_dataset_destroy(z);
    /* Inputs in the wrong order. */
    const kiln_dataset *reversed[] = {side, items};
    CHECK_OK(ctx, zip(ctx, reversed, 2, out, 2, &z));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "input array 0 of the dataset", fit(m, z, NULL));
    kiln_dataset_destroy(z);
    kiln_model_destroy(m);
    kiln_dataset_destroy(bad_cls);
    kiln_dataset_destroy(bad_items);
    kiln_dataset_destroy(cls);
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(side);
}

/* A .npy file without labels feeds an input (the labels come from the
 * outputs' datasets) and trains as the arrays do; fit, evaluate and a
 * zip's outputs refuse it. */
static void test_no_labels(kiln_context *ctx, const data *d)
{
    kiln_dataset *ref = arrays(ctx, d, 2);
    kiln_dataset *labeled = npy_items(ctx, d), *side = callback_side(ctx, d);
    char ids[96];
    snprintf(ids, sizeof ids, "%s/item.npy", dir);   /* npy_items wrote it */
    const kiln_npy_options o = {.struct_size = sizeof o, .ids = 1};
    kiln_dataset *items = NULL, *z = NULL;
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, ids, NULL, &o, &items));
    const kiln_dataset *in[] = {items, side}, *out[] = {labeled, side};
    CHECK_OK(ctx, zip(ctx, in, 2, out, 2, &z));
    same_training(ctx, "an input without labels", 2, ref, z);
    kiln_dataset_destroy(z);
    const kiln_dataset *bad_out[] = {items, side};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "outputs[0] has no labels",
                zip(ctx, in, 2, bad_out, 2, &z));
    kiln_model *m = build(ctx, 1);
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_evaluate: the dataset has no "
                "labels", kiln_model_evaluate(m, items, 8, &e));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: the dataset has no labels",
                fit(m, items, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: the validation data has no "
                "labels", fit(m, ref, items));
    kiln_model_destroy(m);
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(labeled);
    kiln_dataset_destroy(side);
    kiln_dataset_destroy(ref);
}

static void test_bad_descs(kiln_context *ctx, const data *d)
{
    kiln_dataset *items = npy_items(ctx, d), *side = callback_side(ctx, d);
    kiln_dataset *packed = arrays(ctx, d, 2), *short_side = NULL, *z = (kiln_dataset *)1;
    CHECK_OK(ctx, kiln_dataset_subset(side, 0, N - 1, &short_side));
    const kiln_dataset *two[] = {items, side}, *with_null[] = {items, NULL};
    const kiln_dataset *uneven[] = {items, short_side}, *several[] = {packed};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_inputs is 0", zip(ctx, two, 0, two, 1, &z));
    CHECK(z == NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_inputs is 9", zip(ctx, two, 9, two, 1, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "n_outputs is 0", zip(ctx, two, 2, two, 0, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "outputs is NULL",
                zip(ctx, two, 2, NULL, 1, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs[1] is NULL",
                zip(ctx, with_null, 2, two, 1, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "outputs[1] is NULL",
                zip(ctx, two, 2, with_null, 2, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs[1] has 39 samples but inputs[0] has 40",
                zip(ctx, uneven, 2, two, 1, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs[0] holds 2 inputs per sample",
                zip(ctx, several, 1, two, 1, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "outputs[0] holds 2 label arrays",
                zip(ctx, two, 1, several, 1, &z));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "desc is NULL", kiln_dataset_zip(ctx, NULL, &z));
    const kiln_zip_desc small = {.struct_size = 4};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_zip_desc",
                kiln_dataset_zip(ctx, &small, &z));
    kiln_context *other = test_context(3);
    if (other) {
        kiln_dataset *theirs = npy_items(other, d);
        const kiln_dataset *mixed[] = {items, theirs};
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "inputs[1] belongs to another context",
                    zip(ctx, mixed, 2, two, 1, &z));
        kiln_dataset_destroy(theirs);
        kiln_context_destroy(other);
    }
    kiln_dataset_destroy(short_side);
    kiln_dataset_destroy(packed);
    kiln_dataset_destroy(items);
    kiln_dataset_destroy(side);
}

int main(void)
{
    kiln_context *ctx = test_context(41);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    snprintf(dir, sizeof dir, "/tmp/kiln_zip_%d", (int)getpid());
    CHECK(mkdir(dir, 0700) == 0);
    static data d;
    make_data(&d);
    test_two_outputs(ctx, &d);
    test_one_output(ctx, &d);
    test_map(ctx, &d);
    test_augmentation(ctx);
    test_bad_values(ctx, &d);
    test_no_labels(ctx, &d);
    test_bad_descs(ctx, &d);
    kiln_context_destroy(ctx);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_finish("test_dataset_zip");
}
