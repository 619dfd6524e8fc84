/* Datasets: host arrays, subsets, epoch order, and IDX files (plain, gzip,
 * and every way one can be broken). No device is needed: the context is
 * made by hand. */
#include "harness.h"
#include "kiln_config.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"

#include <float.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

/* Allocations left before the allocator fails; negative: it never fails. */
typedef struct alloc_budget {
    int left;
} alloc_budget;

static void *test_realloc(void *user, void *ptr, size_t size)
{
    alloc_budget *const b = user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    if (b && b->left >= 0) {
        if (b->left == 0)
            return NULL;
        b->left--;
    }
    return realloc(ptr, size);
}

/* A context without devices: datasets live in host memory only. The budget
 * starts counting after the context is made (a context whose own set-up
 * failed is destroyed already and must not be used). */
static void host_context(kiln_context *ctx, alloc_budget *budget)
{
    const int left = budget ? budget->left : -1;
    if (budget)
        budget->left = -1;
    if (kiln_context_init_host_only(ctx, test_realloc, budget, NULL) != KILN_OK) {
        fprintf(stderr, "cannot make a host-only context\n");
        exit(1);
    }
    if (budget)
        budget->left = left;
}

/* Stale out-pointers show: *out starts as junk and must be NULL after a failure. */
static char junk;

static kiln_status from_arrays(kiln_context *ctx, const kiln_arrays_desc *d, kiln_dataset **out)
{
    *out = (kiln_dataset *)(void *)&junk;
    const kiln_status st = kiln_dataset_from_arrays(ctx, d, out);
    if (st != KILN_OK && *out) {
        fprintf(stderr, "kiln_dataset_from_arrays failed (%s) but left *out set\n",
                kiln_status_name(st));
        test_failures++;
    }
    return st;
}

/* Element i of the dataset's features, flattened, as a batch would get it. */
static float element(const kiln_dataset *ds, int64_t i)
{
    float sample[1024];
    if (ds->feature_size > 1024 || kiln_dataset_read(ds, i / ds->feature_size,
                                                     &(kiln_sample_buffers){.features = sample}))
        return NAN;
    return sample[i % ds->feature_size];
}

static int32_t label_of(const kiln_dataset *ds, int64_t i)
{
    int32_t y = -1;
    return kiln_dataset_read(ds, i,
                             &(kiln_sample_buffers){.sparse_labels = &y}) == KILN_OK ? y : -1;
}

/* Two datasets read the same: every sample's features and label, each
 * sample read once. */
static int same_samples(const kiln_dataset *a, const kiln_dataset *b)
{
    if (a->count != b->count || a->feature_size != b->feature_size || a->feature_size > 1024)
        return 0;
    float xa[1024], xb[1024];
    for (int64_t i = 0; i < a->count; i++) {
        int32_t ya = -1, yb = -2;
        const kiln_sample_buffers ba = {.struct_size = sizeof ba, .features = xa,
                                        .sparse_labels = &ya};
        const kiln_sample_buffers bb = {.struct_size = sizeof bb, .features = xb,
                                        .sparse_labels = &yb};
        if (kiln_dataset_read(a, i, &ba) != KILN_OK || kiln_dataset_read(b, i, &bb) != KILN_OK ||
            ya != yb || memcmp(xa, xb, (size_t)a->feature_size * sizeof(float)) != 0)
            return 0;
    }
    return 1;
}

/* The in-memory reader (the fuzzer's entry point) must agree with the file
 * reader on every case: the same status, and the same samples. */
static void check_idx_memory(kiln_context *ctx, const char *images, const char *labels,
                             const kiln_idx_options *o, kiln_status want,
                             const kiln_dataset *from_file)
{
    size_t ni, nl;
    unsigned char *img = test_read_file(images, &ni), *lab = test_read_file(labels, &nl);
    if (!img || !lab || (o && o->struct_size != sizeof *o))
        goto done;   /* a missing file or a malformed options struct: file-only cases */
    kiln_idx_options plain = {.struct_size = sizeof plain};
    kiln_dataset *ds = NULL;
    const kiln_status st = kiln_dataset_from_idx_memory(ctx, img, ni, lab, nl,
                                                        o ? o : &plain, &ds);
    if (st != want)
        fprintf(stderr, "IDX from memory: %s, from files: %s (%s)\n", kiln_status_name(st),
                kiln_status_name(want), kiln_context_last_error(ctx));
    CHECK(st == want);
    if (st == KILN_OK && from_file) {
        CHECK(same_samples(ds, from_file));
    }
    kiln_dataset_destroy(ds);
done:
    free(img);
    free(lab);
}

static kiln_status from_idx(kiln_context *ctx, const char *images, const char *labels,
                            const kiln_idx_options *o, kiln_dataset **out)
{
    *out = (kiln_dataset *)(void *)&junk;
    const kiln_status st = kiln_dataset_from_idx(ctx, images, labels, o, out);
    if (st != KILN_OK && *out) {
        fprintf(stderr, "kiln_dataset_from_idx failed (%s) but left *out set\n",
                kiln_status_name(st));
        test_failures++;
    }
    if (ctx && images && labels && st != KILN_ERROR_OUT_OF_MEMORY && st != KILN_ERROR_IO) {
        char message[1024];
        snprintf(message, sizeof message, "%s", kiln_context_last_error(ctx));
        check_idx_memory(ctx, images, labels, o, st, st == KILN_OK ? *out : NULL);
        if (st != KILN_OK)
            kiln_error(ctx, st, "%s", message);   /* the file reader's, for the caller */
    }
    return st;
}

/* 5 samples of shape (2, 3): feature j of sample i is 6 i + j. */
static float x5[5 * 6];
static int32_t y5[5] = {0, 2, 1, 2, 0};
static float dense5[5 * 2];

static kiln_arrays_desc desc5(void)
{
    for (int i = 0; i < 30; i++)
        x5[i] = (float)i;
    for (int i = 0; i < 10; i++)
        dense5[i] = (float)-i;
    kiln_arrays_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.count = 5;
    d.feature_rank = 2;
    d.feature_dims[0] = 2;
    d.feature_dims[1] = 3;
    d.features = x5;
    d.label_kind = KILN_LABELS_SPARSE;
    d.sparse_labels = y5;
    d.num_classes = 3;
    return d;
}

static void test_arrays(kiln_context *ctx)
{
    kiln_arrays_desc d = desc5();
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    if (!ds)
        return;
    int64_t n = 0;
    CHECK_OK(ctx, kiln_dataset_count(ds, &n));
    CHECK(n == 5 && ds->feature_size == 6 && ds->label_size == 1);
    CHECK(ds->feature_shape.rank == 2 && ds->feature_shape.dims[0] == 2);
    CHECK(ds->feature_shape.dims[1] == 3);
    CHECK(ds->label_kind == KILN_LABELS_SPARSE && ds->max_label == 2);
    x5[18] = 99.0f;  /* the dataset holds a copy */
    y5[3] = 1;

    const int64_t order[] = {3, 0, 4};
    float f[3 * 6];
    int32_t l[3];
    kiln_dataset_gather(ds, order, 3, f, l);
    int same = 1;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 6; j++)
            same &= f[i * 6 + j] == (float)(order[i] * 6 + j);
    CHECK(same);
    CHECK(l[0] == 2 && l[1] == 0 && l[2] == 0);
    kiln_dataset_destroy(ds);
    y5[3] = 2;

    d = desc5();
    d.label_kind = KILN_LABELS_DENSE;
    d.label_size = 2;
    d.dense_labels = dense5;
    d.sparse_labels = NULL;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    if (!ds)
        return;
    CHECK(ds->label_kind == KILN_LABELS_DENSE && ds->label_size == 2 && ds->max_label == -1);
    dense5[6] = 42.0f;
    float dl[3 * 2];
    kiln_dataset_gather(ds, order, 3, f, dl);
    CHECK(dl[0] == -6 && dl[1] == -7 && dl[2] == 0 && dl[3] == -1);
    CHECK(dl[4] == -8 && dl[5] == -9 && f[6] == 0 && f[17] == 29);
    kiln_dataset_destroy(ds);

    /* struct_size 0 reads the whole struct; an older, shorter struct has no
     * num_classes, so labels are not checked against it. */
    d = desc5();
    y5[1] = 5;
    d.struct_size = 0;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 1 has label 5", from_arrays(ctx, &d, &ds));
    d.struct_size = offsetof(kiln_arrays_desc, num_classes);
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    CHECK(ds && ds->max_label == 5);
    kiln_dataset_destroy(ds);
    y5[1] = 2;
}

static void test_bad_arrays(kiln_context *ctx)
{
    kiln_arrays_desc d = desc5();
    kiln_dataset *ds = NULL;
    CHECK(kiln_dataset_from_arrays(NULL, &d, &ds) == KILN_ERROR_INVALID_ARGUMENT && !ds);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out is NULL",
                kiln_dataset_from_arrays(ctx, &d, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "desc is NULL", from_arrays(ctx, NULL, &ds));

    d.count = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "count is 0; it must be > 0",
                from_arrays(ctx, &d, &ds));
    d.count = -3;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "count is -3", from_arrays(ctx, &d, &ds));
    d = desc5();
    d.feature_rank = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature_rank is 0; it must be in 1..4",
                from_arrays(ctx, &d, &ds));
    d.feature_rank = KILN_MAX_RANK + 1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature_rank is 5",
                from_arrays(ctx, &d, &ds));
    d = desc5();
    d.feature_dims[1] = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature_dims[1] is 0",
                from_arrays(ctx, &d, &ds));
    d.feature_dims[1] = -2;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature_dims[1] is -2",
                from_arrays(ctx, &d, &ds));
    d = desc5();
    d.features = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "features and int_features are both NULL",
                from_arrays(ctx, &d, &ds));
    d = desc5();
    d.label_kind = (kiln_label_kind)7;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "label_kind is 7",
                from_arrays(ctx, &d, &ds));
    d = desc5();
    d.sparse_labels = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "sparse_labels is NULL",
                from_arrays(ctx, &d, &ds));
    d = desc5();
    d.num_classes = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "num_classes is -1",
                from_arrays(ctx, &d, &ds));
    d = desc5();
    d.label_kind = KILN_LABELS_DENSE;
    d.dense_labels = dense5;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "label_size is 0",
                from_arrays(ctx, &d, &ds));
    d.label_size = 2;
    d.dense_labels = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "dense_labels is NULL",
                from_arrays(ctx, &d, &ds));

    /* Sizes that overflow are refused before a single byte is read. */
    d = desc5();
    d.feature_rank = 4;
    for (int i = 0; i < 4; i++)
        d.feature_dims[i] = INT32_MAX;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "overflows", from_arrays(ctx, &d, &ds));
    d = desc5();
    d.count = INT64_MAX;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "overflows", from_arrays(ctx, &d, &ds));
    d.count = (int64_t)1 << 40;
    d.feature_rank = 1;
    d.feature_dims[0] = 1 << 30;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "overflows", from_arrays(ctx, &d, &ds));
    d = desc5();
    d.count = (int64_t)1 << 40;
    d.feature_rank = 1;
    d.feature_dims[0] = 1;
    d.label_kind = KILN_LABELS_DENSE;
    d.label_size = INT32_MAX;
    d.dense_labels = dense5;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "overflows", from_arrays(ctx, &d, &ds));

    /* Labels: out of [0, num_classes), and negative even when unchecked. */
    d = desc5();
    y5[2] = 3;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2 has label 3, outside [0, 3)",
                from_arrays(ctx, &d, &ds));
    y5[2] = -1;
    d.num_classes = 0;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2 has label -1; labels must be >= 0",
                from_arrays(ctx, &d, &ds));
    y5[2] = 1000;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    CHECK(ds && ds->max_label == 1000);
    kiln_dataset_destroy(ds);
    y5[2] = 1;
}

/* NaN or Inf in the features or dense labels would reach the weights
 * through a gradient while the loss stays finite (ReLU maps NaN to 0):
 * refused here, naming the first bad sample and element. */
static void test_nonfinite_arrays(kiln_context *ctx)
{
    float x[8 * 3], y[8 * 2];
    for (int i = 0; i < 8 * 3; i++)
        x[i] = (float)i;
    for (int i = 0; i < 8 * 2; i++)
        y[i] = (float)(i % 2);
    kiln_arrays_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.count = 8;
    d.feature_rank = 1;
    d.feature_dims[0] = 3;
    d.features = x;
    d.label_kind = KILN_LABELS_DENSE;
    d.label_size = 2;
    d.dense_labels = y;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    CHECK(ds != NULL);
    kiln_dataset_destroy(ds);

    x[5 * 3 + 2] = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 5, element 2 of its features is NaN",
                from_arrays(ctx, &d, &ds));
    x[2 * 3 + 0] = INFINITY;   /* now the first bad sample */
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2, element 0 of its features is +Inf",
                from_arrays(ctx, &d, &ds));
    x[2 * 3 + 0] = -INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 2, element 0 of its features is -Inf",
                from_arrays(ctx, &d, &ds));
    x[2 * 3 + 0] = 0.0f;
    x[5 * 3 + 2] = 0.0f;
    y[7 * 2 + 1] = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "sample 7, element 1 of its labels is NaN",
                from_arrays(ctx, &d, &ds));
    y[7 * 2 + 1] = 1.0f;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    kiln_dataset_destroy(ds);
}

/* Every allocation of from_arrays fails in turn: a status, never a crash or a leak. */
static void test_out_of_memory(void)
{
    for (int left = 0; left < 3; left++) {
        alloc_budget budget = {.left = left};
        kiln_context ctx;
        host_context(&ctx, &budget);
        const kiln_arrays_desc d = desc5();
        kiln_dataset *ds = NULL;
        CHECK_FAILS(&ctx, KILN_ERROR_OUT_OF_MEMORY, "out of host memory",
                    from_arrays(&ctx, &d, &ds));
        kiln_context_release_host_only(&ctx);
    }
}

static void test_subset(kiln_context *ctx)
{
    kiln_arrays_desc d = desc5();
    kiln_dataset *ds = NULL, *sub = NULL;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    if (!ds)
        return;
    CHECK_OK(ctx, kiln_dataset_subset(ds, 1, 3, &sub));
    int64_t n = 0;
    CHECK_OK(ctx, kiln_dataset_count(sub, &n));
    CHECK(sub && n == 3 && sub->feature_size == 6 && sub->feature_shape.rank == 2);
    if (sub) {
        int same = 1;
        for (int i = 0; i < 18; i++)
            same &= sub->features[i] == (float)(6 + i);
        CHECK(same && sub->sparse_labels[0] == 2 && sub->sparse_labels[1] == 1);
        CHECK(sub->sparse_labels[2] == 2 && sub->max_label == 2);
    }
    kiln_dataset_destroy(sub);
    CHECK_OK(ctx, kiln_dataset_subset(ds, 4, 1, &sub));
    CHECK(sub && sub->count == 1 && sub->features[0] == 24 && sub->max_label == 0);
    kiln_dataset_destroy(sub);
    CHECK_OK(ctx, kiln_dataset_subset(ds, 0, 5, &sub));
    CHECK(sub && sub->count == 5 && memcmp(sub->features, ds->features, 30 * sizeof(float)) == 0);
    kiln_dataset_destroy(sub);

    sub = (kiln_dataset *)(void *)&junk;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT,
                "start 3, count 3 is not within the dataset's 5 samples",
                kiln_dataset_subset(ds, 3, 3, &sub));
    CHECK(sub == NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "start -1, count 2",
                kiln_dataset_subset(ds, -1, 2, &sub));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "start 0, count 0",
                kiln_dataset_subset(ds, 0, 0, &sub));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "start 5, count 1",
                kiln_dataset_subset(ds, 5, 1, &sub));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "dataset's 5 samples",
                kiln_dataset_subset(ds, 2, INT64_MAX, &sub));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out is NULL",
                kiln_dataset_subset(ds, 0, 1, NULL));
    CHECK(kiln_dataset_subset(NULL, 0, 1, &sub) == KILN_ERROR_INVALID_ARGUMENT && !sub);
    n = 7;
    CHECK(kiln_dataset_count(NULL, &n) == KILN_ERROR_INVALID_ARGUMENT && n == 0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "count is NULL", kiln_dataset_count(ds, NULL));
    kiln_dataset_destroy(ds);

    d.label_kind = KILN_LABELS_DENSE;
    d.label_size = 2;
    d.dense_labels = dense5;
    CHECK_OK(ctx, from_arrays(ctx, &d, &ds));
    CHECK_OK(ctx, kiln_dataset_subset(ds, 2, 2, &sub));
    CHECK(sub && sub->label_size == 2 && sub->max_label == -1 && sub->features[0] == 12);
    CHECK(sub && sub->dense_labels[0] == -4 && sub->dense_labels[3] == -7);
    kiln_dataset_destroy(sub);
    kiln_dataset_destroy(ds);
    kiln_dataset_destroy(NULL);
}

static int is_permutation(const int64_t *order, int64_t n)
{
    char *seen = calloc((size_t)n + 1, 1);
    int ok = seen != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        ok = order[i] >= 0 && order[i] < n && !seen[order[i]];
        if (ok)
            seen[order[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_epoch_order(void)
{
    enum { n = 1000 };
    static int64_t a[n], b[n], c[n], d[n];
    kiln_epoch_order(n, 9, 0, 1, a);
    kiln_epoch_order(n, 9, 0, 1, b);
    kiln_epoch_order(n, 9, 1, 1, c);
    kiln_epoch_order(n, 9, 0, 0, d);
    int identity = 1, moved = 0;
    for (int i = 0; i < n; i++) {
        identity &= d[i] == i;
        moved += a[i] != i;
    }
    CHECK(is_permutation(a, n) && is_permutation(c, n));
    CHECK(identity && moved > n / 2);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    kiln_epoch_order(n, 10, 0, 1, b);
    CHECK(is_permutation(b, n) && memcmp(a, b, sizeof a) != 0);
    kiln_epoch_order(n, 9, 1, 0, c);
    CHECK(memcmp(c, d, sizeof c) == 0);
    for (int64_t m = 1; m <= 9; m++) {
        kiln_epoch_order(m, 3, (int32_t)m, 1, a);
        CHECK(is_permutation(a, m));
    }
    a[0] = -5;
    kiln_epoch_order(0, 3, 0, 1, a);
    CHECK(a[0] == -5);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int write_raw(const char *path, const unsigned char *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    const size_t wrote = fwrite(bytes, 1, n, f);
    return fclose(f) == 0 && wrote == n;
}

/* Writes an IDX file, gzip-compressed when `gz`, with `cut` bytes dropped
 * from the end. Returns nonzero on success. */
static int write_idx(const char *path, uint32_t magic, const uint32_t *dims, int n_dims,
                     const unsigned char *body, size_t body_size, size_t cut, int gz)
{
    unsigned char buf[4096];
    size_t n = 0;
    put32(buf, magic);
    n += 4;
    for (int i = 0; i < n_dims; i++, n += 4)
        put32(buf + n, dims[i]);
    memcpy(buf + n, body, body_size);
    n += body_size - cut;
#if KILN_HAVE_ZLIB
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f)
            return 0;
        const int wrote = gzwrite(f, buf, (unsigned)n);
        return gzclose(f) == Z_OK && wrote == (int)n;
    }
#else
    (void)gz;
#endif
    return write_raw(path, buf, n);
}

#if KILN_HAVE_ZLIB
/* Keeps the first `keep` bytes of a file (a compressed stream cut short). */
static int cut_file(const char *path, long keep)
{
    unsigned char buf[4096];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if ((long)n < keep)
        return 0;
    return write_raw(path, buf, (size_t)keep);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fclose(f);
    return n;
}
#endif

typedef struct idx_paths {
    char dir[32];
    char img[64], lab[64], bad[64], missing[64];
} idx_paths;

/* Three 4 x 5 images (pixel i of the file is 4 i) and their labels 7, 0, 9. */
static unsigned char pixels[3 * 4 * 5];
static const unsigned char labels[3] = {7, 0, 9};
static const uint32_t idims[] = {3, 4, 5}, ldims[] = {3};

static void test_idx_good(kiln_context *ctx, const idx_paths *p, int gz)
{
    CHECK(write_idx(p->img, 0x803, idims, 3, pixels, sizeof pixels, 0, gz));
    CHECK(write_idx(p->lab, 0x801, ldims, 1, labels, sizeof labels, 0, gz));
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, from_idx(ctx, p->img, p->lab, NULL, &ds));
    if (ds) {
        CHECK(ds->count == 3 && ds->feature_size == 20 && ds->feature_shape.rank == 3);
        CHECK(ds->feature_shape.dims[0] == 4 && ds->feature_shape.dims[1] == 5);
        CHECK(ds->feature_shape.dims[2] == 1 && ds->label_kind == KILN_LABELS_SPARSE);
        int close = 1;
        for (int i = 0; i < 60; i++)
            close &= fabsf(element(ds, i) - (float)(4 * i) / 255.0f) < 1e-6f;
        CHECK(close);
        CHECK(label_of(ds, 0) == 7 && label_of(ds, 1) == 0);
        CHECK(label_of(ds, 2) == 9 && ds->max_label == 9 && ds->dtype == KILN_DTYPE_UINT8);
    }
    kiln_dataset_destroy(ds);

    kiln_idx_options o = {.struct_size = sizeof o};
    o.limit = 2;
    o.scale = 1.0f;
    CHECK_OK(ctx, from_idx(ctx, p->img, p->lab, &o, &ds));
    CHECK(ds && ds->count == 2 && element(ds, 39) == 156.0f && ds->max_label == 7);
    kiln_dataset_destroy(ds);
    o.limit = 10;  /* more than the file holds: all of it */
    CHECK_OK(ctx, from_idx(ctx, p->img, p->lab, &o, &ds));
    CHECK(ds && ds->count == 3 && element(ds, 59) == 236.0f);
    kiln_dataset_destroy(ds);
    o.struct_size = 0;
    o.limit = 0;
    o.scale = 0.0f;
    CHECK_OK(ctx, from_idx(ctx, p->img, p->lab, &o, &ds));
    CHECK(ds && ds->count == 3 && fabsf(element(ds, 59) - 236.0f / 255.0f) < 1e-6f);
    kiln_dataset_destroy(ds);
}

static void test_idx_broken(kiln_context *ctx, const idx_paths *p, int gz)
{
    kiln_dataset *ds = NULL;
    char want[256];
    CHECK(write_idx(p->img, 0x803, idims, 3, pixels, sizeof pixels, 0, gz));
    CHECK(write_idx(p->lab, 0x801, ldims, 1, labels, sizeof labels, 0, gz));

    CHECK(write_idx(p->bad, 0x803, idims, 3, pixels, sizeof pixels, 7, gz));
    snprintf(want, sizeof want, "%s is truncated: expected 60 bytes of pixels, got 53", p->bad);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->bad, p->lab, NULL, &ds));

    CHECK(write_idx(p->bad, 0x801, ldims, 1, labels, sizeof labels, 1, gz));
    snprintf(want, sizeof want, "%s is truncated: expected 3 bytes of labels, got 2", p->bad);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->img, p->bad, NULL, &ds));
    kiln_idx_options o = {.struct_size = sizeof o};
    o.limit = 2;  /* the two labels that are there are enough */
    CHECK_OK(ctx, from_idx(ctx, p->img, p->bad, &o, &ds));
    kiln_dataset_destroy(ds);

    snprintf(want, sizeof want, "%s is not an IDX images file: magic 0x00000801, expected "
             "0x00000803", p->lab);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->lab, p->lab, NULL, &ds));
    snprintf(want, sizeof want, "%s is not an IDX labels file: magic 0x00000803, expected "
             "0x00000801", p->img);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->img, p->img, NULL, &ds));

    const uint32_t two[] = {2};
    CHECK(write_idx(p->bad, 0x801, two, 1, labels, 2, 0, gz));
    snprintf(want, sizeof want, "%s has 3 images but %s has 2 labels", p->img, p->bad);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->img, p->bad, NULL, &ds));

    CHECK(write_idx(p->bad, 0x803, idims, 0, pixels, 2, 0, gz));
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "truncated: expected a 16-byte IDX header, got 6",
                from_idx(ctx, p->bad, p->lab, NULL, &ds));
    CHECK(write_idx(p->bad, 0x803, idims, 0, pixels, 0, 0, gz));
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "truncated: expected a 16-byte IDX header, got 4",
                from_idx(ctx, p->bad, p->lab, NULL, &ds));
    CHECK(write_idx(p->bad, 0x08, idims, 0, pixels, 0, 0, gz));  /* short and wrong */
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "magic 0x00000008, expected 0x00000803",
                from_idx(ctx, p->bad, p->lab, NULL, &ds));
    CHECK(write_idx(p->bad, 0x803, idims, 0, pixels, 0, 2, gz));  /* 2 bytes: no magic */
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "header, got 2 bytes",
                from_idx(ctx, p->bad, p->lab, NULL, &ds));

    const uint32_t zero[] = {3, 0, 5};
    CHECK(write_idx(p->bad, 0x803, zero, 3, pixels, 0, 0, gz));
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "dimension 1 of the IDX header is 0",
                from_idx(ctx, p->bad, p->lab, NULL, &ds));

    /* Absurd headers are refused before anything is allocated. */
    const uint32_t huge[] = {60000, 60000, 60000}, huge_labels[] = {60000};
    CHECK(write_idx(p->bad, 0x803, huge, 3, pixels, 0, 0, gz));
    CHECK(write_idx(p->lab, 0x801, huge_labels, 1, labels, 0, 0, gz));
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "60000 images of 60000 x 60000 bytes is beyond",
                from_idx(ctx, p->bad, p->lab, NULL, &ds));
    const uint32_t wide[] = {1, 0xffffffffu, 0xffffffffu}, one[] = {1};
    CHECK(write_idx(p->bad, 0x803, wide, 3, pixels, 0, 0, gz));
    CHECK(write_idx(p->lab, 0x801, one, 1, labels, 0, 0, gz));
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "is beyond", from_idx(ctx, p->bad, p->lab, NULL, &ds));
}

static void test_idx_args(kiln_context *ctx, const idx_paths *p)
{
    kiln_dataset *ds = NULL;
    char want[256];
    CHECK(write_idx(p->img, 0x803, idims, 3, pixels, sizeof pixels, 0, 0));
    CHECK(write_idx(p->lab, 0x801, ldims, 1, labels, sizeof labels, 0, 0));
    snprintf(want, sizeof want, "cannot open %s: No such file", p->missing);
    CHECK_FAILS(ctx, KILN_ERROR_IO, want, from_idx(ctx, p->missing, p->lab, NULL, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_IO, want, from_idx(ctx, p->img, p->missing, NULL, &ds));

    kiln_idx_options o = {.struct_size = sizeof o};
    o.limit = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "limit is -1",
                from_idx(ctx, p->img, p->lab, &o, &ds));
    o.limit = 0;
    o.scale = -1.0f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "scale is -1",
                from_idx(ctx, p->img, p->lab, &o, &ds));
    o.scale = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "scale is",
                from_idx(ctx, p->img, p->lab, &o, &ds));
    o.scale = FLT_MAX / 2;   /* finite, but 255 times it is not */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "scale is",
                from_idx(ctx, p->img, p->lab, &o, &ds));
    o.scale = 0.0f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "images_path is NULL",
                from_idx(ctx, NULL, p->lab, NULL, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "labels_path is NULL",
                from_idx(ctx, p->img, NULL, NULL, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out is NULL",
                kiln_dataset_from_idx(ctx, p->img, p->lab, NULL, NULL));
    CHECK(from_idx(NULL, p->img, p->lab, NULL, &ds) == KILN_ERROR_INVALID_ARGUMENT);

    /* The gzip magic: read by zlib, or refused by name without it. A deflate
     * stream starting 0xff has the reserved block type: corrupt, not short. */
    const unsigned char gz_head[] = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff};
    CHECK(write_raw(p->bad, gz_head, sizeof gz_head));
#if KILN_HAVE_ZLIB
    snprintf(want, sizeof want, "%s is not a valid gzip stream: invalid block type", p->bad);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->bad, p->lab, NULL, &ds));
    CHECK(write_idx(p->bad, 0x803, idims, 3, pixels, sizeof pixels, 0, 1));
    const long size = file_size(p->bad);
    CHECK(size > 20 && cut_file(p->bad, size / 2));
    snprintf(want, sizeof want, "%s is truncated", p->bad);
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, want, from_idx(ctx, p->bad, p->lab, NULL, &ds));
#else
    snprintf(want, sizeof want, "%s is gzip-compressed and this build of kiln has no zlib",
             p->bad);
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, want, from_idx(ctx, p->bad, p->lab, NULL, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, want, from_idx(ctx, p->img, p->bad, NULL, &ds));
#endif
}

/* A plain file cut short while a dataset reads it (np.save's and
 * a copy's everyday in-place rewrite) is an error naming the file: a
 * sample past the new end lies pages past it, which a mapping would fault
 * on. 5000 1 x 1 images, so that both files span several pages. */
static void test_idx_cut_short(kiln_context *ctx, const idx_paths *p)
{
    enum { N = 5000 };
    static unsigned char img[16 + N], lab[8 + N];
    const uint32_t head[] = {0x803, N, 1, 1, 0x801, N};
    for (int k = 0; k < 4; k++)
        put32(img + 4 * k, head[k]);
    put32(lab, head[4]);
    put32(lab + 4, head[5]);
    for (int i = 0; i < N; i++)
        img[16 + i] = (unsigned char)(i % 251), lab[8 + i] = (unsigned char)(i % 10);
    CHECK(write_raw(p->img, img, sizeof img) && write_raw(p->lab, lab, sizeof lab));
    kiln_dataset *ds = NULL;
    const kiln_idx_options o = {.struct_size = sizeof o, .scale = 1.0f};
    CHECK_OK(ctx, from_idx(ctx, p->img, p->lab, &o, &ds));
    if (!ds)
        return;
    float x;
    int32_t y;
    const kiln_sample_buffers xy = {.struct_size = sizeof xy, .features = &x, .sparse_labels = &y};
    const kiln_sample_buffers only_x = {.struct_size = sizeof only_x, .features = &x};
    CHECK_OK(ctx, kiln_dataset_read(ds, 4500, &xy));
    CHECK(x == (float)(4500 % 251) && y == 0);
    char want[256];
    CHECK(truncate(p->lab, 8 + 10) == 0);
    CHECK_OK(ctx, kiln_dataset_read(ds, 9, &xy));   /* still there */
    CHECK(x == 9.0f && y == 9);
    snprintf(want, sizeof want, "%s: reading the label of sample 4500 failed: the file is "
             "shorter than when it was opened", p->lab);
    CHECK_FAILS(ctx, KILN_ERROR_IO, want, kiln_dataset_read(ds, 4500, &xy));
    CHECK(truncate(p->img, 16 + 10) == 0);
    snprintf(want, sizeof want, "%s: reading sample 4500 failed: the file is shorter than "
             "when it was opened", p->img);
    CHECK_FAILS(ctx, KILN_ERROR_IO, want, kiln_dataset_read(ds, 4500, &only_x));
    CHECK_OK(ctx, kiln_dataset_read(ds, 9, &xy));
    kiln_dataset_destroy(ds);
}

static void test_idx(kiln_context *ctx)
{
    idx_paths p;
    snprintf(p.dir, sizeof p.dir, "/tmp/kiln-idx-XXXXXX");
    if (!mkdtemp(p.dir)) {
        fprintf(stderr, "mkdtemp %s failed\n", p.dir);
        test_failures++;
        return;
    }
    snprintf(p.img, sizeof p.img, "%s/images", p.dir);
    snprintf(p.lab, sizeof p.lab, "%s/labels", p.dir);
    snprintf(p.bad, sizeof p.bad, "%s/bad", p.dir);
    snprintf(p.missing, sizeof p.missing, "%s/missing", p.dir);
    for (int i = 0; i < 60; i++)
        pixels[i] = (unsigned char)(i * 4);

    for (int gz = 0; gz <= KILN_HAVE_ZLIB; gz++) {
        test_idx_good(ctx, &p, gz);
        test_idx_broken(ctx, &p, gz);
    }
    test_idx_args(ctx, &p);
    test_idx_cut_short(ctx, &p);
    remove(p.img);
    remove(p.lab);
    remove(p.bad);
    CHECK(rmdir(p.dir) == 0);
}

static void test_fashion(kiln_context *ctx)
{
    const char *img = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    const char *lab = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    kiln_dataset *ds = NULL;
    if (access(img, R_OK) != 0 || access(lab, R_OK) != 0) {
        printf("note: %s or its labels not readable; skipping the real-data check\n", img);
        return;
    }
    if (!KILN_HAVE_ZLIB) {
        CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "this build of kiln has no zlib",
                    from_idx(ctx, img, lab, NULL, &ds));
        return;
    }
    CHECK_OK(ctx, from_idx(ctx, img, lab, NULL, &ds));
    if (!ds)
        return;
    CHECK(ds->count == 10000 && ds->feature_size == 784 && ds->feature_shape.rank == 3);
    CHECK(ds->feature_shape.dims[0] == 28 && ds->feature_shape.dims[1] == 28);
    CHECK(ds->feature_shape.dims[2] == 1 && ds->max_label == 9);
    int labels_ok = 1;
    for (int64_t i = 0; i < ds->count; i++)
        labels_ok &= label_of(ds, i) >= 0 && label_of(ds, i) <= 9;
    CHECK(labels_ok);
    float lo = 1, hi = 0, x[784];
    for (int64_t i = 0; i < ds->count; i++) {
        CHECK_OK(ctx, kiln_dataset_read(ds, i, &(kiln_sample_buffers){.features = x}));
        for (int j = 0; j < 784; j++) {
            lo = x[j] < lo ? x[j] : lo;
            hi = x[j] > hi ? x[j] : hi;
        }
    }
    CHECK(lo >= 0.0f && hi <= 1.0f && hi > 0.0f);
    printf("fashion-mnist t10k: %lld samples, pixels in [%g, %g]\n", (long long)ds->count,
           (double)lo, (double)hi);
    kiln_dataset_destroy(ds);
}

int main(void)
{
    kiln_context ctx;
    host_context(&ctx, NULL);
    test_arrays(&ctx);
    test_bad_arrays(&ctx);
    test_nonfinite_arrays(&ctx);
    test_out_of_memory();
    test_subset(&ctx);
    test_epoch_order();
    test_idx(&ctx);
    test_fashion(&ctx);
    kiln_context_release_host_only(&ctx);
    return test_finish("test_dataset");
}
