/* Datasets: host arrays, subsets, epoch order, and IDX files (plain, gzip,
 * and every way one can be broken). No device is needed. */
#include "harness.h"
#include "kiln_config.h"
#include "runtime/context.h"
#include "runtime/dataset.h"

#include <stdlib.h>
#include <unistd.h>
#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

static void *test_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

/* A context without devices: datasets live in host memory only. */
static void host_context(kiln_context *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->realloc_fn = test_realloc;
    ctx->log_level = KILN_LOG_ERROR;
    pthread_mutex_init(&ctx->error_lock, NULL);
}

static void test_arrays(kiln_context *ctx)
{
    float x[5 * 6];
    int32_t y[5] = {0, 2, 1, 2, 0};
    float dense[5 * 2];
    for (int i = 0; i < 30; i++)
        x[i] = (float)i;
    for (int i = 0; i < 10; i++)
        dense[i] = (float)-i;
    kiln_arrays_desc d = {.struct_size = sizeof d};
    d.count = 5;
    d.feature_rank = 2;
    d.feature_dims[0] = 2;
    d.feature_dims[1] = 3;
    d.features = x;
    d.sparse_labels = y;
    d.num_classes = 3;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    int64_t n = 0;
    CHECK_OK(ctx, kiln_dataset_count(ds, &n));
    CHECK(n == 5 && ds->feature_size == 6 && ds->max_label == 2);
    x[0] = 99;  /* the dataset holds a copy */
    const int64_t order[] = {3, 0};
    float f[12];
    int32_t l[2];
    kiln_dataset_gather(ds, order, 2, f, l);
    CHECK(f[0] == 18 && f[5] == 23 && f[6] == 0 && l[0] == 2 && l[1] == 0);

    kiln_dataset *sub = NULL;
    CHECK_OK(ctx, kiln_dataset_subset(ds, 1, 3, &sub));
    CHECK_OK(ctx, kiln_dataset_count(sub, &n));
    CHECK(n == 3 && sub->features[0] == 6 && sub->sparse_labels[2] == 2);
    kiln_dataset_destroy(sub);
    sub = (kiln_dataset *)ds;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "samples [3, 3 + 4) are not within the "
                "dataset's 5", kiln_dataset_subset(ds, 3, 4, &sub));
    CHECK(sub == NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "not within",
                kiln_dataset_subset(ds, -1, 2, &sub));
    kiln_dataset_destroy(ds);

    d.label_kind = KILN_LABELS_DENSE;
    d.label_size = 2;
    d.dense_labels = dense;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    float dl[4];
    kiln_dataset_gather(ds, order, 2, f, dl);
    CHECK(dl[0] == -6 && dl[1] == -7 && dl[2] == 0 && ds->max_label == -1);
    kiln_dataset_destroy(ds);
}

static void test_bad_arrays(kiln_context *ctx)
{
    float x[4] = {0};
    int32_t y[4] = {0, 1, 5, 1};
    kiln_arrays_desc d = {.struct_size = sizeof d};
    d.count = 4;
    d.feature_rank = 1;
    d.feature_dims[0] = 1;
    d.features = x;
    d.sparse_labels = y;
    kiln_dataset *ds = NULL;
    d.num_classes = 3;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "label 5 of sample 2 is out of range",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    CHECK(ds == NULL);
    y[2] = -1;
    d.num_classes = 0;
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "label -1 of sample 2",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    y[2] = 0;
    d.count = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "count must be > 0",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.count = 4;
    d.feature_rank = 5;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature_rank",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.feature_rank = 1;
    d.feature_dims[0] = 0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "feature dimension must be > 0",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.feature_dims[0] = 1;
    d.features = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "features is NULL",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.features = x;
    d.sparse_labels = NULL;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "sparse_labels is NULL",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.label_kind = KILN_LABELS_DENSE;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "label_size > 0",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.label_kind = (kiln_label_kind)7;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "label_kind",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    d.label_kind = KILN_LABELS_SPARSE;
    d.sparse_labels = y;
    d.feature_dims[0] = INT32_MAX;
    d.count = INT64_MAX / 2;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "is not possible",
                kiln_dataset_from_arrays(ctx, &d, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "desc is NULL",
                kiln_dataset_from_arrays(ctx, NULL, &ds));
}

static void test_epoch_order(void)
{
    enum { n = 1000 };
    static int64_t a[n], b[n], c[n], d[n];
    kiln_epoch_order(n, 9, 0, 1, a);
    kiln_epoch_order(n, 9, 0, 1, b);
    kiln_epoch_order(n, 9, 1, 1, c);
    kiln_epoch_order(n, 9, 0, 0, d);
    char seen[n] = {0};
    int permutation = 1, identity = 1;
    for (int i = 0; i < n; i++) {
        permutation &= a[i] >= 0 && a[i] < n && !seen[a[i]];
        if (a[i] >= 0 && a[i] < n)
            seen[a[i]] = 1;
        identity &= d[i] == i;
    }
    CHECK(permutation && identity);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    kiln_epoch_order(n, 10, 0, 1, b);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes an IDX file; `gz` compresses it. `cut` bytes are dropped from the end. */
static void write_idx(const char *path, uint32_t magic, const uint32_t *dims, int n_dims,
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
        gzwrite(f, buf, (unsigned)n);
        gzclose(f);
        return;
    }
#else
    (void)gz;
#endif
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

static void test_idx(kiln_context *ctx)
{
    char dir[] = "/tmp/kiln-idx-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char img[256], lab[256], bad[256];
    snprintf(img, sizeof img, "%s/images", dir);
    snprintf(lab, sizeof lab, "%s/labels", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    unsigned char pixels[3 * 4 * 5], labels[3] = {7, 0, 9};
    for (int i = 0; i < 60; i++)
        pixels[i] = (unsigned char)(i * 4);
    const uint32_t idims[] = {3, 4, 5}, ldims[] = {3}, ldims2[] = {2};

    for (int gz = 0; gz <= KILN_HAVE_ZLIB; gz++) {
        write_idx(img, 0x803, idims, 3, pixels, sizeof pixels, 0, gz);
        write_idx(lab, 0x801, ldims, 1, labels, sizeof labels, 0, gz);
        kiln_dataset *ds = NULL;
        CHECK_OK(ctx, kiln_dataset_from_idx(ctx, img, lab, NULL, &ds));
        if (ds) {
            CHECK(ds->count == 3 && ds->feature_shape.rank == 3);
            CHECK(ds->feature_shape.dims[0] == 4 && ds->feature_shape.dims[1] == 5);
            CHECK(ds->feature_shape.dims[2] == 1);
            CHECK(fabsf(ds->features[59] - 236.0f / 255.0f) < 1e-7f);
            CHECK(ds->sparse_labels[0] == 7 && ds->max_label == 9);
        }
        kiln_dataset_destroy(ds);
        kiln_idx_options o = {.struct_size = sizeof o};
        o.limit = 2;
        o.scale = 1.0f;
        CHECK_OK(ctx, kiln_dataset_from_idx(ctx, img, lab, &o, &ds));
        CHECK(ds && ds->count == 2 && ds->features[59 - 20] == 156.0f && ds->max_label == 7);
        kiln_dataset_destroy(ds);

        write_idx(bad, 0x803, idims, 3, pixels, sizeof pixels, 7, gz);
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "is truncated: expected 60 bytes of pixels, got 53",
                    kiln_dataset_from_idx(ctx, bad, lab, NULL, &ds));
        CHECK(ds == NULL);
        write_idx(bad, 0x801, ldims, 1, labels, sizeof labels, 1, gz);
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "expected 3 bytes of labels, got 2",
                    kiln_dataset_from_idx(ctx, img, bad, NULL, &ds));
        write_idx(bad, 0x801, ldims, 1, labels, sizeof labels, 0, gz);
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "magic 0x00000801, expected 0x00000803",
                    kiln_dataset_from_idx(ctx, bad, lab, NULL, &ds));
        write_idx(bad, 0x801, ldims2, 1, labels, 2, 0, gz);
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "has 3 images but",
                    kiln_dataset_from_idx(ctx, img, bad, NULL, &ds));
        write_idx(bad, 0x803, idims, 0, pixels, 2, 0, gz);
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "shorter than an IDX header",
                    kiln_dataset_from_idx(ctx, bad, lab, NULL, &ds));
    }
    kiln_dataset *ds = NULL;
    snprintf(bad, sizeof bad, "%s/missing", dir);
    CHECK_FAILS(ctx, KILN_ERROR_IO, "cannot open", kiln_dataset_from_idx(ctx, bad, lab, NULL,
                                                                        &ds));
    kiln_idx_options neg = {.struct_size = sizeof neg};
    neg.limit = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "limit >= 0",
                kiln_dataset_from_idx(ctx, img, lab, &neg, &ds));
    remove(img);
    remove(lab);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    remove(bad);
    rmdir(dir);
}

static void test_fashion(kiln_context *ctx)
{
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char img[256], lab[256];
    snprintf(img, sizeof img, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%s/t10k-labels-idx1-ubyte.gz", dir);
    kiln_dataset *ds = NULL;
    if (access(img, R_OK) != 0) {
        printf("note: %s not readable; skipping the real-data check\n", img);
        return;
    }
    if (!KILN_HAVE_ZLIB) {
        CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "this build of kiln has no zlib",
                    kiln_dataset_from_idx(ctx, img, lab, NULL, &ds));
        return;
    }
    CHECK_OK(ctx, kiln_dataset_from_idx(ctx, img, lab, NULL, &ds));
    if (!ds)
        return;
    CHECK(ds->count == 10000 && ds->feature_size == 784 && ds->max_label == 9);
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < ds->count * 784; i++) {
        lo = ds->features[i] < lo ? ds->features[i] : lo;
        hi = ds->features[i] > hi ? ds->features[i] : hi;
    }
    CHECK(lo == 0.0f && hi == 1.0f);
    printf("fashion-mnist t10k: %lld samples, pixels in [%g, %g]\n", (long long)ds->count, lo,
           hi);
    kiln_dataset_destroy(ds);
}

int main(void)
{
    kiln_context ctx;
    host_context(&ctx);
    test_arrays(&ctx);
    test_bad_arrays(&ctx);
    test_epoch_order();
    test_idx(&ctx);
    test_fashion(&ctx);
    pthread_mutex_destroy(&ctx.error_lock);
    return test_finish("test_dataset");
}
