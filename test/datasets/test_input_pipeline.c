/* The input pipeline: a callback source trains exactly as the same samples
 * in host arrays; the batches (augmented and mapped) are the same with 0, 1,
 * 2 and 4 loader threads and any prefetch; resume mid-epoch is exact with a
 * streamed, augmented source; validation_split is Keras's; a failing fill
 * or map, a bad label or a NaN stops fit naming the sample, and the loader
 * threads stop with it; subsets are views that outlive their parent. */
#include "kiln_config.h"
#include "npy_file.h"
#include "test_data.h"

#include <time.h>
#include <unistd.h>

#define COUNT 50
#define SIDE 6
#define CLASSES 3

static float pixels[COUNT * SIDE * SIDE];
static int32_t labels[COUNT];

static void make_data(void)
{
    uint64_t seed = 99;
    for (int i = 0; i < COUNT * SIDE * SIDE; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        pixels[i] = (float)(seed >> 40) / 16777216.0f;
    }
    for (int i = 0; i < COUNT; i++)
        labels[i] = (int32_t)((pixels[i * SIDE * SIDE] + pixels[i * SIDE * SIDE + 9]) * 2.5f) %
                    CLASSES;
}

static kiln_dataset *arrays(kiln_context *ctx)
{
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = COUNT, .feature_rank = 3,
                          .feature_dims = {SIDE, SIDE, 1}, .features = pixels,
                          .sparse_labels = labels};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

/* The callback's behaviour, set per test. */
typedef struct source_state {
    int64_t fail_at;         /* fill returns nonzero here (-1: never) */
    int64_t nan_at;          /* a NaN pixel here */
    int64_t bad_label_at;    /* label CLASSES + 2 here */
    int64_t reads;           /* fills so far (atomic) */
    int sleep_us;            /* per fill, to make the loader the slow side */
} source_state;

static int fill(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                size_t size)
{
    source_state *s = user;
    __atomic_add_fetch(&s->reads, 1, __ATOMIC_RELAXED);
    if (s->sleep_us)
        nanosleep(&(struct timespec){.tv_nsec = 1000L * s->sleep_us}, NULL);
    if (index == s->fail_at) {
        snprintf(message, size, "disk %d is gone", 3);
        return 1;
    }
    memcpy(b->features, pixels + index * SIDE * SIDE, SIDE * SIDE * sizeof(float));
    *b->sparse_labels = index == s->bad_label_at ? CLASSES + 2 : labels[index];
    if (index == s->nan_at)
        b->features[7] = NAN;
    return 0;
}

static kiln_dataset *streamed(kiln_context *ctx, source_state *s)
{
    kiln_callback_desc d = {.struct_size = sizeof d, .count = COUNT, .feature_rank = 3,
                            .feature_dims = {SIDE, SIDE, 1}, .fill = fill, .user = s};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &d, &ds));
    return ds;
}

static kiln_model *model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {SIDE, SIDE, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 3, .kernel_size = {3, 3},
                                .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 0.01f};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = KILN_STRATEGY_ONE_DEVICE};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_fit_options options(int epochs, int threads, int prefetch)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 8;   /* 50 = 6 * 8 + 2: a partial last batch */
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.loader_threads = threads;
    fo.prefetch_batches = prefetch;
    return fo;
}

static float *weights(kiln_context *ctx, kiln_model *m, int64_t *n)
{
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    return w;
}

/* Trains a fresh model on `ds` and returns its weights. */
static float *train(kiln_context *ctx, const kiln_dataset *ds, const kiln_fit_options *fo,
                    int64_t *n)
{
    kiln_model *m = model(ctx);
    CHECK_OK(ctx, kiln_model_fit(m, ds, fo));
    float *w = weights(ctx, m, n);
    kiln_model_destroy(m);
    return w;
}

static void test_callback_equals_arrays(kiln_context *ctx)
{
    source_state s = {.fail_at = -1, .nan_at = -1, .bad_label_at = -1};
    kiln_dataset *a = arrays(ctx), *b = streamed(ctx, &s);
    const kiln_fit_options fo = options(2, 1, 2);
    int64_t n;
    float *wa = train(ctx, a, &fo, &n), *wb = train(ctx, b, &fo, &n);
    CHECK(memcmp(wa, wb, (size_t)n * sizeof(float)) == 0);
    CHECK(s.reads == 2 * COUNT);   /* each sample once per epoch */
    free(wa);
    free(wb);
    kiln_dataset_destroy(a);
    kiln_dataset_destroy(b);
}

/* Doubles every value: a map everyone can check. */
static int double_it(void *user, int64_t index, float *features, char *message, size_t size)
{
    (void)user;
    (void)index;
    (void)message;
    (void)size;
    for (int i = 0; i < SIDE * SIDE; i++)
        features[i] *= 2.0f;
    return 0;
}

static void transform(kiln_context *ctx, kiln_dataset *ds)
{
    kiln_augment_options aug = {.struct_size = sizeof aug, .flip_horizontal = 1,
                                .flip_vertical = 1, .pad_crop = 1, .brightness = 0.1f,
                                .contrast = 0.2f};
    CHECK_OK(ctx, kiln_dataset_transform(ds, double_it, NULL, &aug));
}

static void test_threads_same_batches(kiln_context *ctx)
{
    source_state s = {.fail_at = -1, .nan_at = -1, .bad_label_at = -1};
    kiln_dataset *ds = streamed(ctx, &s);
    transform(ctx, ds);
    const int threads[] = {1, 2, 4, 2, -1}, prefetch[] = {1, 2, 8, 1, 0};
    int64_t n;
    kiln_fit_options fo = options(2, 1, 1);
    float *first = train(ctx, ds, &fo, &n);
    int same = 1;
    for (int k = 1; k < 5; k++) {
        fo = options(2, threads[k], prefetch[k]);
        float *w = train(ctx, ds, &fo, &n);
        same &= memcmp(first, w, (size_t)n * sizeof(float)) == 0;
        free(w);
    }
    CHECK(same);
    /* Augmentation changes training; the plain source trains otherwise. */
    kiln_dataset *plain = streamed(ctx, &s);
    float *w = train(ctx, plain, &fo, &n);
    CHECK(memcmp(first, w, (size_t)n * sizeof(float)) != 0);
    printf("same weights with no loader thread, 1, 2 and 4, and prefetch 1 to 8\n");
    free(w);
    free(first);
    kiln_dataset_destroy(plain);
    kiln_dataset_destroy(ds);
}

/* Stops fit after `stop_at` steps of its second epoch. */
static int stop_mid_epoch(void *user, const kiln_progress *p)
{
    const int *stop_at = user;
    return p->event == KILN_EVENT_BATCH_END && p->epoch == 1 && p->step == *stop_at;
}

static void test_resume_streamed(kiln_context *ctx)
{
    char dir[] = "/tmp/kiln-pipeline-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    source_state s = {.fail_at = -1, .nan_at = -1, .bad_label_at = -1};
    kiln_dataset *ds = streamed(ctx, &s);
    transform(ctx, ds);
    int64_t n;
    kiln_fit_options fo = options(3, 2, 3);
    float *straight = train(ctx, ds, &fo, &n);
    /* Stopped after 3 steps of epoch 2, checkpointed every step, resumed. */
    int stop_at = 3;
    kiln_model *m = model(ctx);
    fo.checkpoint_dir = dir;
    fo.checkpoint_every_steps = 1;
    fo.callback = stop_mid_epoch;
    fo.callback_user = &stop_at;
    CHECK_FAILS(ctx, KILN_ERROR_STOPPED, "stopped training", kiln_model_fit(m, ds, &fo));
    kiln_model_destroy(m);
    m = model(ctx);
    fo.callback = NULL;
    fo.resume = 1;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    float *resumed = weights(ctx, m, &n);
    CHECK(memcmp(straight, resumed, (size_t)n * sizeof(float)) == 0);
    free(straight);
    free(resumed);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void test_validation_split(kiln_context *ctx)
{
    kiln_dataset *ds = arrays(ctx), *tail = NULL, *head = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(ds, 0, 40, &head));
    CHECK_OK(ctx, kiln_dataset_subset(ds, 40, 10, &tail));
    kiln_fit_options a = options(2, 1, 2), b = options(2, 1, 2);
    a.validation_split = 0.2f;   /* the last 10 of 50 */
    b.validation = tail;
    kiln_model *ma = model(ctx), *mb = model(ctx);
    CHECK_OK(ctx, kiln_model_fit(ma, ds, &a));
    CHECK_OK(ctx, kiln_model_fit(mb, head, &b));
    kiln_epoch_record ra = {.struct_size = sizeof ra}, rb = {.struct_size = sizeof rb};
    CHECK_OK(ctx, kiln_model_history_epoch(ma, 1, &ra));
    CHECK_OK(ctx, kiln_model_history_epoch(mb, 1, &rb));
    CHECK(ra.has_validation && ra.val_loss == rb.val_loss && ra.loss == rb.loss &&
          ra.samples == 40);
    a.validation = tail;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "validation_split",
                kiln_model_fit(ma, ds, &a));
    a.validation = NULL;
    a.validation_split = 1.0f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "validation_split is 1",
                kiln_model_fit(ma, ds, &a));
    a.validation_split = 0.99f;   /* int(50 * 0.01) = 0 samples to train on */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "leaves 0 for training",
                kiln_model_fit(ma, ds, &a));
    a.validation_split = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "validation_split", kiln_model_fit(ma, ds, &a));
    kiln_model_destroy(ma);
    kiln_model_destroy(mb);
    kiln_dataset_destroy(head);
    kiln_dataset_destroy(tail);
    kiln_dataset_destroy(ds);
}

static int failing_map(void *user, int64_t index, float *features, char *message, size_t size)
{
    (void)user;
    (void)features;
    if (index == 17) {
        snprintf(message, size, "cannot decode");
        return 1;
    }
    return 0;
}

/* Each failure stops fit with its sample named, with the loader's threads
 * busy ahead (slow fills, deep prefetch); ASan and TSan check the rest. */
static void test_stopping_failures(kiln_context *ctx)
{
    struct {
        source_state s;
        kiln_status status;
        const char *message;
    } cases[] = {
        {{.fail_at = 29, .nan_at = -1, .bad_label_at = -1},
         KILN_ERROR_DATA, "fill callback failed on sample 29: disk 3 is gone"},
        {{.fail_at = -1, .nan_at = 31, .bad_label_at = -1},
         KILN_ERROR_DATA, "sample 31: element 7 of its features is NaN"},
        {{.fail_at = -1, .nan_at = -1, .bad_label_at = 12},
         KILN_ERROR_DATA, "sample 12 has label 5, outside [0, 3)"},
    };
    for (int k = 0; k < 3; k++) {
        cases[k].s.sleep_us = 200;
        kiln_dataset *ds = streamed(ctx, &cases[k].s);
        kiln_model *m = model(ctx);
        kiln_fit_options fo = options(1, 3, 6);
        fo.no_shuffle = 1;
        CHECK_FAILS(ctx, cases[k].status, cases[k].message, kiln_model_fit(m, ds, &fo));
        /* The same through evaluate and kiln_dataset_read. */
        kiln_metrics met = {.struct_size = sizeof met};
        CHECK_FAILS(ctx, cases[k].status, cases[k].message, kiln_model_evaluate(m, ds, 8, &met));
        kiln_model_destroy(m);
        kiln_dataset_destroy(ds);
    }
    source_state s = {.fail_at = -1, .nan_at = -1, .bad_label_at = -1};
    kiln_dataset *ds = arrays(ctx);
    CHECK_OK(ctx, kiln_dataset_transform(ds, failing_map, &s, NULL));
    kiln_model *m = model(ctx);
    kiln_fit_options fo = options(1, 2, 4);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "map callback failed on sample 17: cannot decode",
                kiln_model_fit(m, ds, &fo));
    float x[SIDE * SIDE];
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 17",
                kiln_dataset_read(ds, 17, &(kiln_sample_buffers){.features = x}));
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

static void test_accessors_and_views(kiln_context *ctx)
{
    source_state s = {.fail_at = -1, .nan_at = -1, .bad_label_at = -1};
    kiln_dataset *ds = streamed(ctx, &s), *sub = NULL;
    CHECK_OK(ctx, kiln_dataset_transform(ds, double_it, NULL, NULL));
    int32_t rank = 0, dims[KILN_MAX_RANK], classes = -1;
    kiln_dtype dtype = KILN_DTYPE_INT8;
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, dims, &dtype));
    CHECK(rank == 3 && dims[0] == SIDE && dims[2] == 1 && dtype == KILN_DTYPE_FLOAT32);
    CHECK_OK(ctx, kiln_dataset_class_count(ds, &classes));
    CHECK(classes == 0);
    const char *name = "x";
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out of range",
                kiln_dataset_class_name(ds, 0, &name));
    CHECK(name == NULL);
    /* A view reads through its parent, after the parent's handle is gone. */
    CHECK_OK(ctx, kiln_dataset_subset(ds, 20, 5, &sub));
    kiln_dataset_destroy(ds);
    float x[SIDE * SIDE];
    int32_t y = -1;
    CHECK_OK(ctx, kiln_dataset_read(sub, 2,
                                    &(kiln_sample_buffers){.features = x, .sparse_labels = &y}));
    CHECK(x[5] == 2.0f * pixels[22 * SIDE * SIDE + 5] && y == labels[22]);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "index 5 is not in [0, 5)",
                kiln_dataset_read(sub, 5,
                                  &(kiln_sample_buffers){.features = x, .sparse_labels = &y}));
    kiln_dataset *subsub = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(sub, 4, 1, &subsub));
    kiln_dataset_destroy(sub);
    CHECK_OK(ctx, kiln_dataset_read(subsub, 0,
                                    &(kiln_sample_buffers){.features = x, .sparse_labels = &y}));
    CHECK(y == labels[24]);
    kiln_dataset_destroy(subsub);
    /* Bad descriptions. */
    kiln_callback_desc d = {.struct_size = sizeof d, .count = COUNT, .feature_rank = 3,
                            .feature_dims = {SIDE, SIDE, 1}};
    kiln_dataset *none = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "fill is NULL",
                kiln_dataset_from_callback(ctx, &d, &none));
    d.fill = fill;
    d.count = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "count is 0",
                kiln_dataset_from_callback(ctx, &d, &none));
    d.count = COUNT;
    d.feature_dims[1] = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature_dims[1] is -1",
                kiln_dataset_from_callback(ctx, &d, &none));
    CHECK(none == NULL);
    kiln_fit_options fo = options(1, -2, 0);
    kiln_model *m = model(ctx);
    kiln_dataset *a = arrays(ctx);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "loader_threads is -2",
                kiln_model_fit(m, a, &fo));
    kiln_augment_options bad = {.struct_size = sizeof bad, .contrast = 2.0f};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "contrast",
                kiln_dataset_transform(a, NULL, NULL, &bad));
    kiln_model_destroy(m);
    kiln_dataset_destroy(a);
}

/* A file to cut short, and where, at the end of the first epoch. */
typedef struct cut_file {
    const char *path;
    off_t keep;
} cut_file;

static int cut_after_first_epoch(void *user, const kiln_progress *p)
{
    const cut_file *c = user;
    if (p->event == KILN_EVENT_EPOCH_END && p->epoch == 0 && truncate(c->path, c->keep) != 0)
        return KILN_CALLBACK_ABORT;
    return KILN_CALLBACK_CONTINUE;
}

/* Fits `ds` (3 classes) for two epochs, cutting `c` short after the first:
 * the second stops with KILN_ERROR_IO naming the file. */
/* Flatten -> Dense(classes, softmax) on the samples of `ds`. */
static kiln_model *flat_model(kiln_context *ctx, const kiln_dataset *ds, int32_t classes)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    int32_t rank = 0, dims[KILN_MAX_RANK];
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, dims, NULL));
    kiln_dense_options head = {.struct_size = sizeof head, .units = classes,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, rank, dims, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static void check_cut_mid_fit(kiln_context *ctx, const kiln_dataset *ds, cut_file *c)
{
    kiln_model *m = flat_model(ctx, ds, 3);
    kiln_fit_options fo = options(2, 2, 4);
    fo.batch_size = 100;
    fo.no_shuffle = 1;
    fo.callback = cut_after_first_epoch;
    fo.callback_user = c;
    CHECK_FAILS(ctx, KILN_ERROR_IO, c->path, kiln_model_fit(m, ds, &fo));
    CHECK(strstr(kiln_context_last_error(ctx), "shorter than when it was opened") != NULL);
    kiln_model_destroy(m);
}

/* A .npy labels file and a plain IDX images file rewritten in place while
 * fit reads them (np.save again, a copy over it) stop fit with an error
 * naming the file, where reading them through a mapping killed the
 * process with SIGBUS: both files span pages past the cut. */
static void test_file_cut_mid_fit(kiln_context *ctx)
{
    enum { N = 3000 };
    char dir[] = "/tmp/kiln-cut-XXXXXX", x[64], y[64];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    static float features[N * 2];
    static int32_t ids[N];
    for (int i = 0; i < N; i++) {
        features[2 * i] = (float)(i % 3);
        features[2 * i + 1] = 0.5f;
        ids[i] = i % 3;
    }
    snprintf(x, sizeof x, "%s/x.npy", dir);
    snprintf(y, sizeof y, "%s/y.npy", dir);
    write_npy(x, "<f4", N, 2, features, sizeof(float));
    write_npy(y, "<i4", N, 0, ids, sizeof(int32_t));
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, x, y, NULL, &ds));
    cut_file c = {.path = y, .keep = 128 + 4 * 50};   /* the header, 50 labels */
    if (ds)
        check_cut_mid_fit(ctx, ds, &c);
    kiln_dataset_destroy(ds);

    /* IDX: 3000 images of 2 x 1 pixels, big-endian header. */
    static unsigned char img[16 + 2 * N], lab[8 + N];
    const unsigned char ihead[16] = {0, 0, 8, 3, 0, 0, N >> 8, N & 255, 0, 0, 0, 2, 0, 0, 0, 1};
    const unsigned char lhead[8] = {0, 0, 8, 1, 0, 0, N >> 8, N & 255};
    memcpy(img, ihead, sizeof ihead);
    memcpy(lab, lhead, sizeof lhead);
    for (int i = 0; i < N; i++) {
        img[16 + 2 * i] = (unsigned char)(i % 3);
        img[17 + 2 * i] = 7;
        lab[8 + i] = (unsigned char)(i % 3);
    }
    snprintf(x, sizeof x, "%s/images", dir);
    snprintf(y, sizeof y, "%s/labels", dir);
    FILE *fi = fopen(x, "wb"), *fl = fopen(y, "wb");
    CHECK(fi && fl && fwrite(img, 1, sizeof img, fi) == sizeof img &&
          fwrite(lab, 1, sizeof lab, fl) == sizeof lab);
    if (fi)
        CHECK(fclose(fi) == 0);
    if (fl)
        CHECK(fclose(fl) == 0);
    CHECK_OK(ctx, kiln_dataset_from_idx(ctx, x, y, NULL, &ds));
    c = (cut_file){.path = x, .keep = 16 + 2 * 50};
    if (ds)
        check_cut_mid_fit(ctx, ds, &c);
    kiln_dataset_destroy(ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* fit and evaluate refuse `ds` for a label past an output of `classes`,
 * naming it as `want` says. */
static void check_bad_label(kiln_context *ctx, const kiln_dataset *ds, int32_t classes,
                            const char *want)
{
    kiln_model *m = flat_model(ctx, ds, classes);
    kiln_fit_options fo = options(1, 1, 2);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, want, kiln_model_fit(m, ds, &fo));
    CHECK(strstr(kiln_context_last_error(ctx), "has label") != NULL);
    kiln_metrics e = {.struct_size = sizeof e};
    CHECK_FAILS(ctx, KILN_ERROR_DATA, want, kiln_model_evaluate(m, ds, 8, &e));
    kiln_model_destroy(m);
}

/* A label past the output's classes in a streamed source is named before
 * training as host arrays name theirs: the sample, and the file holding
 * it (a zip: the label array too; a view: the source's sample as well). */
static void test_streamed_bad_labels(kiln_context *ctx)
{
    enum { N = 30 };
    char dir[] = "/tmp/kiln-labels-XXXXXX", x[64], y[64], want[320];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    static float features[N * 2];
    static int32_t ids[N];
    static unsigned char img[16 + 2 * N], lab[8 + N];
    const unsigned char ihead[16] = {0, 0, 8, 3, 0, 0, 0, N, 0, 0, 0, 2, 0, 0, 0, 1};
    const unsigned char lhead[8] = {0, 0, 8, 1, 0, 0, 0, N};
    memcpy(img, ihead, sizeof ihead);
    memcpy(lab, lhead, sizeof lhead);
    for (int i = 0; i < N; i++) {
        features[2 * i] = features[2 * i + 1] = (float)i;
        ids[i] = i % 3;
        img[16 + 2 * i] = img[17 + 2 * i] = (unsigned char)i;
        lab[8 + i] = (unsigned char)(i % 3);
    }
    ids[11] = lab[8 + 11] = 5;
    snprintf(x, sizeof x, "%s/x.npy", dir);
    snprintf(y, sizeof y, "%s/y.npy", dir);
    write_npy(x, "<f4", N, 2, features, sizeof(float));
    write_npy(y, "<i4", N, 0, ids, sizeof(int32_t));
    kiln_dataset *ds = NULL, *sub = NULL, *z = NULL;
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, x, y, NULL, &ds));
    if (ds) {
        snprintf(want, sizeof want, "sample 11 (%s) has label 5 but the output", y);
        check_bad_label(ctx, ds, 3, want);
        /* A view names its own index and the file's. */
        CHECK_OK(ctx, kiln_dataset_subset(ds, 5, 20, &sub));
        snprintf(want, sizeof want, "sample 6 (sample 11 of %s) has label 5", y);
        if (sub)
            check_bad_label(ctx, sub, 3, want);
        kiln_dataset_destroy(sub);
        /* A view without it trains. */
        CHECK_OK(ctx, kiln_dataset_subset(ds, 0, 10, &sub));
        kiln_model *m = flat_model(ctx, ds, 3);
        kiln_fit_options fo = options(1, 1, 2);
        if (sub)
            CHECK_OK(ctx, kiln_model_fit(m, sub, &fo));
        kiln_model_destroy(m);
        kiln_dataset_destroy(sub);
        /* Through a zip: its label array too. */
        const kiln_dataset *one[] = {ds};
        const kiln_zip_desc zd = {.struct_size = sizeof zd, .n_inputs = 1, .inputs = one,
                                  .n_outputs = 1, .outputs = one};
        CHECK_OK(ctx, kiln_dataset_zip(ctx, &zd, &z));
        snprintf(want, sizeof want, "sample 11 (label array 0, outputs[0]: %s) has label 5",
                 y);
        if (z)
            check_bad_label(ctx, z, 3, want);
        kiln_dataset_destroy(z);
    }
    kiln_dataset_destroy(ds);
    /* IDX: the labels file. */
    snprintf(x, sizeof x, "%s/images", dir);
    snprintf(y, sizeof y, "%s/labels", dir);
    FILE *fi = fopen(x, "wb"), *fl = fopen(y, "wb");
    CHECK(fi && fl && fwrite(img, 1, sizeof img, fi) == sizeof img &&
          fwrite(lab, 1, sizeof lab, fl) == sizeof lab);
    if (fi)
        CHECK(fclose(fi) == 0);
    if (fl)
        CHECK(fclose(fl) == 0);
    CHECK_OK(ctx, kiln_dataset_from_idx(ctx, x, y, NULL, &ds));
    snprintf(want, sizeof want, "sample 11 (%s) has label 5 but the output", y);
    if (ds)
        check_bad_label(ctx, ds, 3, want);
    kiln_dataset_destroy(ds);
    /* An image folder of 4 classes for 3: the first image of the fourth. */
    const char *root = getenv("KILN_SOURCE_ROOT");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cd %s && mkdir a b c d && for c in a b c d; do cp "
             "%s/test/data/image/rgb.png $c/1.png; cp $c/1.png $c/2.png; done", dir,
             root ? root : ".");
    const kiln_image_folder_options io = {.struct_size = sizeof io, .height = 4, .width = 4};
    if (root && KILN_HAVE_PNG && system(cmd) == 0) {
        CHECK_OK(ctx, kiln_dataset_from_image_folder(ctx, dir, &io, &ds));
        snprintf(want, sizeof want, "sample 6 (%s/d/1.png) has label 3 but the output", dir);
        if (ds)
            check_bad_label(ctx, ds, 3, want);
        kiln_dataset_destroy(ds);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    make_data();
    kiln_context *ctx = test_context(3);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_callback_equals_arrays(ctx);
    test_threads_same_batches(ctx);
    test_resume_streamed(ctx);
    test_validation_split(ctx);
    test_stopping_failures(ctx);
    test_accessors_and_views(ctx);
    test_file_cut_mid_fit(ctx);
    test_streamed_bad_labels(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_input_pipeline");
}
