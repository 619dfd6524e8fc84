/* .npy datasets: NumPy's own files of every supported dtype, ranks 2 to 5
 * and versions 1 to 3, read back exactly (test/datasets/write_npy.py writes them
 * beside their values as float64); the files kiln refuses, as NumPy writes
 * them; and malformed files written here byte by byte, each refused with
 * the right status and a message naming the file; a features file read
 * without labels. No device is needed. */
#include "harness.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/formats/npy.h"

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

static char dir[64];

/* `name` in the temporary folder; four buffers, so one call can take two. */
static const char *path(const char *name)
{
    static char paths[4][160];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

/* Stale out-pointers show: *out starts as junk and must be NULL after a failure. */
static char junk;

static kiln_status from_npy(kiln_context *ctx, const char *features, const char *labels,
                            const kiln_npy_options *o, kiln_dataset **out)
{
    *out = (kiln_dataset *)(void *)&junk;
    const kiln_status st = kiln_dataset_from_npy(ctx, features, labels, o, out);
    if (st != KILN_OK && *out) {
        fprintf(stderr, "kiln_dataset_from_npy failed (%s) but left *out set\n",
                kiln_status_name(st));
        test_failures++;
    }
    return st;
}

static void write_bytes(const char *name, const void *bytes, size_t n)
{
    FILE *f = fopen(path(name), "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f)
        fclose(f);
}

/* A file of version `major` whose header is `header` exactly (no padding
 * added), then `n` bytes of data. */
static void write_npy(const char *name, int major, const char *header, const void *data,
                      size_t n)
{
    const size_t h = strlen(header), pre = major == 1 ? 10 : 12;
    unsigned char *b = malloc(pre + h + n + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    for (size_t i = 8; i < pre; i++)
        b[i] = (unsigned char)(h >> (8 * (i - 8)));
    memcpy(b + pre, header, h);
    if (n)
        memcpy(b + pre + h, data, n);
    write_bytes(name, b, pre + h + n);
    free(b);
}

/* The values write_npy.py stored beside a file, as little-endian float64. */
static double *reference(const char *name, size_t *n)
{
    char file[64];
    snprintf(file, sizeof file, "%s.f64", name);
    size_t size;
    unsigned char *b = test_read_file(path(file), &size);
    double *v = malloc(size + 8);
    *n = size / 8;
    for (size_t i = 0; b && v && i < *n; i++) {
        uint64_t bits = 0;
        for (int k = 7; k >= 0; k--)
            bits = bits << 8 | b[8 * i + (size_t)k];
        memcpy(&v[i], &bits, 8);
    }
    free(b);
    CHECK(*n > 0);
    return v;
}

/* The same bits, or both NaN. */
static int same(float got, float want)
{
    if (isnan(want))
        return isnan(got);
    return memcmp(&got, &want, sizeof got) == 0;
}

static void test_half(void)
{
    static const struct { uint16_t h; float f; } cases[] = {
        {0x0000, 0.0f}, {0x8000, -0.0f}, {0x3c00, 1.0f}, {0xc000, -2.0f},
        {0x0001, 0x1p-24f}, {0x8001, -0x1p-24f}, {0x03ff, 1023 * 0x1p-24f},
        {0x0400, 0x1p-14f}, {0x7bff, 65504.0f}, {0x3555, 0x1.554p-2f},
        {0x7c00, INFINITY}, {0xfc00, -INFINITY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!same(kiln_npy_half_to_float(cases[i].h), cases[i].f)) {
            fprintf(stderr, "half 0x%04x: got %a, expected %a\n", (unsigned)cases[i].h,
                    (double)kiln_npy_half_to_float(cases[i].h), (double)cases[i].f);
            test_failures++;
        }
    const float nan = kiln_npy_half_to_float(0x7e01), neg_nan = kiln_npy_half_to_float(0xfe00);
    uint32_t bits;
    memcpy(&bits, &nan, 4);
    CHECK(isnan(nan) && bits == 0x7fc02000u);   /* the payload kept */
    CHECK(isnan(neg_nan) && signbit(neg_nan));
}

/* Every sample of `ds` against the reference values of its files. */
static void check_reads(kiln_context *ctx, const kiln_dataset *ds, const char *features,
                        const char *labels, float scale, float offset)
{
    size_t nf, nl;
    double *want_f = reference(features, &nf), *want_l = reference(labels, &nl);
    const int64_t fsize = ds->feature_size, lsize = ds->label_size;
    CHECK((int64_t)nf >= ds->count * fsize && (int64_t)nl >= ds->count * lsize);
    float *x = malloc((size_t)fsize * sizeof *x), *y = malloc((size_t)lsize * sizeof *y);
    int32_t sparse = -1, max_label = -1;
    int64_t bad = 0;
    for (int64_t i = 0; i < ds->count && (int64_t)nf >= ds->count * fsize; i++) {
        CHECK_OK(ctx, ds->ops->read(ds, i, NULL, x, ds->label_kind == KILN_LABELS_SPARSE ?
                                    (void *)&sparse : (void *)y));
        for (int64_t j = 0; j < fsize; j++) {
            const float v = (float)want_f[i * fsize + j];
            const float want = scale == 1.0f && offset == 0.0f ? v : v * scale + offset;
            if (!same(x[j], want) && bad++ < 5)
                fprintf(stderr, "%s sample %lld element %lld: read %a, expected %a\n", features,
                        (long long)i, (long long)j, (double)x[j], (double)want);
        }
        if (ds->label_kind == KILN_LABELS_SPARSE) {
            if ((double)sparse != want_l[i] && bad++ < 5)
                fprintf(stderr, "%s sample %lld: label %d, expected %.0f\n", labels,
                        (long long)i, (int)sparse, want_l[i]);
            max_label = sparse > max_label ? sparse : max_label;
        } else {
            for (int64_t j = 0; j < lsize; j++)
                if (!same(y[j], (float)want_l[i * lsize + j]) && bad++ < 5)
                    fprintf(stderr, "%s sample %lld value %lld: %a, expected %a\n", labels,
                            (long long)i, (long long)j, (double)y[j], want_l[i * lsize + j]);
        }
    }
    CHECK(bad == 0);
    CHECK(ds->max_label == max_label);
    free(want_f), free(want_l), free(x), free(y);
}

/* NumPy's files of every dtype and rank, read back exactly. */
static void test_numpy_files(kiln_context *ctx)
{
    static const struct {
        const char *name;
        kiln_dtype dtype;
        int32_t rank, dims[KILN_MAX_RANK];
        int64_t count;
    } cases[] = {
        {.name = "u1", .dtype = KILN_DTYPE_UINT8, .rank = 1, .dims = {5}, .count = 7},
        {.name = "i1", .dtype = KILN_DTYPE_INT8, .rank = 2, .dims = {3, 2}, .count = 6},
        {.name = "u2", .dtype = KILN_DTYPE_UINT16, .rank = 3, .dims = {2, 3, 2}, .count = 5},
        {.name = "i2", .dtype = KILN_DTYPE_INT16, .rank = 4, .dims = {2, 2, 3, 2}, .count = 4},
        {.name = "i4", .dtype = KILN_DTYPE_INT32, .rank = 1, .dims = {4}, .count = 9},
        {.name = "f2", .dtype = KILN_DTYPE_FLOAT16, .rank = 1, .dims = {256}, .count = 256},
        {.name = "f4", .dtype = KILN_DTYPE_FLOAT32, .rank = 2, .dims = {4, 3}, .count = 5},
        {.name = "f4_v2", .dtype = KILN_DTYPE_FLOAT32, .rank = 1, .dims = {2}, .count = 3},
        {.name = "u1_v3", .dtype = KILN_DTYPE_UINT8, .rank = 1, .dims = {3}, .count = 4},
        {.name = "i8", .dtype = KILN_DTYPE_INT64, .rank = 1, .dims = {2}, .count = 6},
        {.name = "trailing", .dtype = KILN_DTYPE_FLOAT32, .rank = 1, .dims = {2}, .count = 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char features[32], labels[32];
        snprintf(features, sizeof features, "%s.npy", cases[c].name);
        snprintf(labels, sizeof labels, "%s.labels.npy", cases[c].name);
        kiln_dataset *ds;
        CHECK_OK(ctx, from_npy(ctx, path(features), path(labels), NULL, &ds));
        if (!ds)
            continue;
        int64_t count = 0;
        CHECK_OK(ctx, kiln_dataset_count(ds, &count));
        CHECK(count == cases[c].count && ds->count == cases[c].count);
        CHECK(ds->feature_shape.rank == cases[c].rank);
        int64_t size = 1;
        for (int32_t i = 0; i < cases[c].rank; i++) {
            CHECK(ds->feature_shape.dims[i] == cases[c].dims[i]);
            size *= cases[c].dims[i];
        }
        CHECK(ds->feature_size == size && ds->dtype == cases[c].dtype);
        CHECK(ds->label_kind == KILN_LABELS_SPARSE && ds->label_size == 1);
        CHECK(ds->features_unchecked == (cases[c].dtype == KILN_DTYPE_FLOAT16 ||
                                         cases[c].dtype == KILN_DTYPE_FLOAT32));
        CHECK(!ds->labels_unchecked && ds->ops && strcmp(ds->ops->kind, "npy") == 0);
        snprintf(features, sizeof features, "%s", cases[c].name);
        snprintf(labels, sizeof labels, "%s.labels", cases[c].name);
        check_reads(ctx, ds, features, labels, 1.0f, 0.0f);
        kiln_dataset_destroy(ds);
    }
    printf("numpy files: %zu dtypes and layouts read back exactly\n",
           sizeof cases / sizeof cases[0]);
}

/* Scale and offset, limit, dense labels. */
static void test_options(kiln_context *ctx)
{
    kiln_dataset *ds;
    kiln_npy_options o = {.struct_size = sizeof o, .scale = 1.0f / 255.0f, .offset = -0.5f};
    CHECK_OK(ctx, from_npy(ctx, path("u1.npy"), path("u1.labels.npy"), &o, &ds));
    if (ds) {
        check_reads(ctx, ds, "u1", "u1.labels", o.scale, o.offset);
        CHECK(!ds->features_unchecked);
        kiln_dataset_destroy(ds);
    }
    o = (kiln_npy_options){.struct_size = sizeof o, .scale = 0.25f, .offset = -3.0f};
    CHECK_OK(ctx, from_npy(ctx, path("i2.npy"), path("i2.labels.npy"), &o, &ds));
    if (ds) {
        check_reads(ctx, ds, "i2", "i2.labels", o.scale, o.offset);
        kiln_dataset_destroy(ds);
    }
    /* A scale that could carry an integer past FLT_MAX: checked as read. */
    o = (kiln_npy_options){.struct_size = sizeof o, .scale = 1e37f};
    CHECK_OK(ctx, from_npy(ctx, path("u1.npy"), path("u1.labels.npy"), &o, &ds));
    CHECK(ds && ds->features_unchecked);
    kiln_dataset_destroy(ds);
    o = (kiln_npy_options){.struct_size = sizeof o, .limit = 3};
    CHECK_OK(ctx, from_npy(ctx, path("i4.npy"), path("i4.labels.npy"), &o, &ds));
    if (ds) {
        CHECK(ds->count == 3 && !ds->features_unchecked);
        check_reads(ctx, ds, "i4", "i4.labels", 1.0f, 0.0f);   /* max_label of 3 samples */
        kiln_dataset_destroy(ds);
    }
    o.limit = 1000;
    CHECK_OK(ctx, from_npy(ctx, path("i4.npy"), path("i4.labels.npy"), &o, &ds));
    CHECK(ds && ds->count == 9);
    kiln_dataset_destroy(ds);
    CHECK_OK(ctx, from_npy(ctx, path("f4.npy"), path("f4.dense.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->label_kind == KILN_LABELS_DENSE && ds->label_size == 3);
        check_reads(ctx, ds, "f4", "f4.dense", 1.0f, 0.0f);
        CHECK(ds->max_label == -1 && ds->features_unchecked);
        kiln_dataset_destroy(ds);
    }
    /* Only the samples within the limit are scanned: a bad label after it
     * is never read. */
    o.limit = 2;
    CHECK_OK(ctx, from_npy(ctx, path("u1.npy"), path("negative.labels.npy"), &o, &ds));
    kiln_dataset_destroy(ds);
}

/* np.save(np.array([0, 1, 2])) writes int64 on every 64-bit platform:
 * such labels read as any integer labels. */
static void test_default_int_labels(kiln_context *ctx)
{
    kiln_dataset *ds;
    CHECK_OK(ctx, from_npy(ctx, path("u1.npy"), path("default.labels.npy"), NULL, &ds));
    if (!ds)
        return;
    CHECK(ds->label_kind == KILN_LABELS_SPARSE && ds->max_label == 2);
    check_reads(ctx, ds, "u1", "default.labels", 1.0f, 0.0f);
    kiln_dataset_destroy(ds);
}

/* `features` (with `labels`) is refused with `want`, the message naming
 * `named` and holding `needle`. */
static void check_refused(kiln_context *ctx, const char *features, const char *labels,
                          const kiln_npy_options *o, kiln_status want, const char *named,
                          const char *needle)
{
    kiln_dataset *ds = NULL;
    const kiln_status st = from_npy(ctx, path(features), path(labels), o, &ds);
    const char *msg = kiln_context_last_error(ctx);
    if (st != want || !strstr(msg, path(named)) || !strstr(msg, needle)) {
        fprintf(stderr, "%s with %s: %s (%s), expected %s naming %s with \"%s\"\n", features,
                labels, kiln_status_name(st), msg, kiln_status_name(want), named, needle);
        test_failures++;
    }
    kiln_dataset_destroy(st == KILN_OK ? ds : NULL);
}

/* The files kiln refuses, as NumPy writes them. */
static void test_numpy_refusals(kiln_context *ctx)
{
    const kiln_status unsupported = KILN_ERROR_UNSUPPORTED;
    const char *l7 = "u1.labels.npy";
    const char *supported = "kiln reads |u1, |i1, <u2, <i2, <i4, <i8, <f2";
    check_refused(ctx, "f8.npy", l7, NULL, unsupported, "f8.npy", "dtype '<f8'");
    check_refused(ctx, "f8.npy", l7, NULL, unsupported, "f8.npy", supported);
    check_refused(ctx, "bool.npy", l7, NULL, unsupported, "bool.npy", "dtype '|b1'");
    check_refused(ctx, "big_endian.npy", l7, NULL, unsupported, "big_endian.npy",
                  "is big-endian (dtype '>i4')");
    check_refused(ctx, "fortran.npy", l7, NULL, unsupported, "fortran.npy",
                  "Fortran order; kiln reads C order: save it with np.ascontiguousarray");
    check_refused(ctx, "structured.npy", l7, NULL, unsupported, "structured.npy",
                  "structured dtype");
    check_refused(ctx, "rank6.npy", l7, NULL, unsupported, "rank6.npy", "has 6 dimensions");
    check_refused(ctx, "one_d.npy", l7, NULL, KILN_ERROR_SHAPE, "one_d.npy",
                  "features need samples first");
    check_refused(ctx, "zero_dim.npy", l7, NULL, KILN_ERROR_SHAPE, "zero_dim.npy",
                  "a sample holds no features");
    check_refused(ctx, "empty.npy", l7, NULL, KILN_ERROR_DATA, "empty.npy",
                  "holds no samples");
    check_refused(ctx, "u1.npy", "negative.labels.npy", NULL, KILN_ERROR_DATA,
                  "negative.labels.npy", "sample 2 has label -1; labels must be >= 0");
    /* int64 labels past what an int32 holds, either way. */
    check_refused(ctx, "u1.npy", "big.labels.npy", NULL, KILN_ERROR_DATA, "big.labels.npy",
                  "sample 2 has label 2147483648; labels must be below 2^31");
    check_refused(ctx, "u1.npy", "negative64.labels.npy", NULL, KILN_ERROR_DATA,
                  "negative64.labels.npy", "sample 1 has label -1099511627776; labels must "
                  "be >= 0");
    check_refused(ctx, "u1.npy", "float.labels.npy", NULL, unsupported, "float.labels.npy",
                  "1-D float32 labels");
    check_refused(ctx, "u1.npy", "rank3.labels.npy", NULL, KILN_ERROR_SHAPE,
                  "rank3.labels.npy", "labels of 3 dimensions");
    check_refused(ctx, "f4.npy", "nan.labels.npy", NULL, KILN_ERROR_DATA, "nan.labels.npy",
                  "sample 1, value 0 of its label is NaN");
    /* 2-D integers are label sequences (test_sequence_labels.c); 2-D floats
     * other than float32 are refused. */
    check_refused(ctx, "f2.npy", "f2.npy", NULL, unsupported, "f2.npy",
                  "2-D labels that are not float32");
    /* Counts that differ name both files. */
    char both[400];
    snprintf(both, sizeof both, "%s has 7 samples but %s has 6 labels", path("u1.npy"),
             path("i1.labels.npy"));
    check_refused(ctx, "u1.npy", "i1.labels.npy", NULL, KILN_ERROR_FORMAT, "u1.npy", both);
    check_refused(ctx, "u1.npy", "f8.npy", NULL, unsupported, "f8.npy", "dtype '<f8'");
}

/* kiln_npy_parse on the same bytes agrees with the file path. */
static void check_parse_agrees(kiln_context *ctx, const char *name, kiln_status want)
{
    size_t size;
    unsigned char *bytes = test_read_file(path(name), &size);
    kiln_npy a;
    memset(&a, 0xff, sizeof a);
    const kiln_status st = kiln_npy_parse(ctx, path(name), bytes ? bytes : (unsigned char *)"",
                                          size, &a);
    if (st != want || !strstr(kiln_context_last_error(ctx), path(name))) {
        fprintf(stderr, "kiln_npy_parse of %s: %s (%s), expected %s\n", name,
                kiln_status_name(st), kiln_context_last_error(ctx), kiln_status_name(want));
        test_failures++;
    }
    CHECK(a.data == NULL && a.rank == 0 && a.name == NULL);
    free(bytes);
}

/* Malformed files, byte by byte: each refused as features (and once as
 * labels) with its status, naming the file and what is wrong. */
static void test_malformed(kiln_context *ctx)
{
    static const unsigned char two[2] = {1, 2};
    write_npy("good.labels.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }"
              "      \n", two, 2);
    const float six[6] = {0};
    static const struct {
        const char *name;
        int major;
        const char *header;
        size_t data;            /* bytes of data after the header */
        kiln_status want;
        const char *needle;
    } cases[] = {
        {"version4", 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24,
         KILN_ERROR_UNSUPPORTED, "version 4.0; kiln reads versions 1.0, 2.0 and 3.0"},
        {"missing_descr", 1, "{'fortran_order': False, 'shape': (2, 3), }", 24,
         KILN_ERROR_FORMAT, "the key 'descr' is missing"},
        {"missing_order", 1, "{'descr': '<f4', 'shape': (2, 3), }", 24, KILN_ERROR_FORMAT,
         "the key 'fortran_order' is missing"},
        {"missing_shape", 2, "{'descr': '<f4', 'fortran_order': False}", 24, KILN_ERROR_FORMAT,
         "the key 'shape' is missing"},
        {"garbage", 1, "this is not a dict", 24, KILN_ERROR_FORMAT, "does not start with '{'"},
        {"unterminated", 1, "{'descr': '<f4", 24, KILN_ERROR_FORMAT, "a string is not terminated"},
        {"string_newline", 1, "{'descr': '<f4\n', 'fortran_order': False, 'shape': (2, 3), }",
         24, KILN_ERROR_FORMAT, "runs past the end of its line"},
        {"dict_descr", 1, "{'descr': {'a': '<f4'}, 'fortran_order': False, 'shape': (2, 3)}",
         24, KILN_ERROR_FORMAT, "expected 'descr' as a quoted string"},
        {"open_list", 1, "{'descr': [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[(('a', '<f4'", 24,
         KILN_ERROR_FORMAT, "the list of 'descr' is not closed"},
        {"nested_list", 1, "{'descr': [('a', [('b', '<f4')]), ('c', '<i4')], 'fortran_order': "
         "False, 'shape': (2, 3), }", 24, KILN_ERROR_UNSUPPORTED, "structured dtype"},
        {"huge_dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
         "(99999999999999999999, 3), }", 24, KILN_ERROR_FORMAT,
         "dimension 0 of 'shape' is larger than 9223372036854775807"},
        {"overflow", 3, "{'descr': '<f4', 'fortran_order': False, 'shape': "
         "(4294967296, 4294967296), }", 24, KILN_ERROR_FORMAT,
         "shape (4294967296, 4294967296) of 4-byte elements overflows"},
        {"negative", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 24,
         KILN_ERROR_FORMAT, "dimension 1 of 'shape' is negative"},
        {"shape_int", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': 6}", 24,
         KILN_ERROR_FORMAT, "'shape' must be a tuple of integers"},
        {"shape_parens", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", 24,
         KILN_ERROR_FORMAT, "needs a trailing comma, as in (3,)"},
        {"shape_space", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 24,
         KILN_ERROR_FORMAT, "expected ',' or ')' after dimension 0 of 'shape'"},
        {"shape_text", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 'x')}", 24,
         KILN_ERROR_FORMAT, "dimension 1 of 'shape' is not a non-negative integer"},
        {"shape_open", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", 24,
         KILN_ERROR_FORMAT, "expected ',' or ')' after dimension 1"},
        {"order_text", 1, "{'descr': '<f4', 'fortran_order': 'no', 'shape': (2, 3)}", 24,
         KILN_ERROR_FORMAT, "'fortran_order' must be True or False"},
        {"order_word", 1, "{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (2, 3)}", 24,
         KILN_ERROR_FORMAT, "'fortran_order' must be True or False"},
        {"fortran", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", 24,
         KILN_ERROR_UNSUPPORTED, "Fortran order"},
        {"extra_key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "
         "'extra': 1}", 24, KILN_ERROR_FORMAT, "unexpected key 'extra'"},
        {"odd_key", 1, "{'descr': '<f4', '\x01\xfe': 1}", 24, KILN_ERROR_FORMAT,
         "unexpected key '\?\?'"},
        {"twice", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "
         "'descr': '<f4'}", 24, KILN_ERROR_FORMAT, "the key 'descr' appears twice"},
        {"no_colon", 1, "{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24,
         KILN_ERROR_FORMAT, "expected ':' after a key"},
        {"no_comma", 1, "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", 24,
         KILN_ERROR_FORMAT, "expected ',' or '}' after the value of 'descr'"},
        {"key_not_string", 1, "{descr: '<f4'}", 24, KILN_ERROR_FORMAT,
         "expected a key as a quoted string"},
        {"trailing", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} extra\n",
         24, KILN_ERROR_FORMAT, "unexpected text after the dict"},
        {"short_data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20,
         KILN_ERROR_FORMAT, "shape (2, 3) of dtype '<f4' needs 24 bytes of data after the "
         "header (from byte 69), the file has 20"},
        {"empty_descr", 1, "{'descr': '', 'fortran_order': False, 'shape': (2, 3)}", 24,
         KILN_ERROR_UNSUPPORTED, "dtype ''; kiln reads |u1"},
        {"pipe_f4", 1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3)}", 24,
         KILN_ERROR_UNSUPPORTED, "byte order '|' is for 1-byte types"},
        {"big_f2", 1, "{'descr': '>f2', 'fortran_order': False, 'shape': (2, 3)}", 12,
         KILN_ERROR_UNSUPPORTED, "is big-endian (dtype '>f2')"},
        {"long_descr", 1, "{'descr': '<f4xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', "
         "'fortran_order': False, 'shape': (2, 3)}", 24, KILN_ERROR_UNSUPPORTED,
         "dtype '<f4xxxxxxxxxxxxxxxxxxxxx...'"},
    };
    unsigned char data[32] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char file[48];
        snprintf(file, sizeof file, "%s.npy", cases[c].name);
        write_npy(file, cases[c].major, cases[c].header, data, cases[c].data);
        check_refused(ctx, file, "good.labels.npy", NULL, cases[c].want, file, cases[c].needle);
        check_parse_agrees(ctx, file, cases[c].want);
    }
    /* The preamble: magic, length, version, header length. */
    static const struct {
        const char *name;
        const char *bytes;
        size_t size;
        kiln_status want;
        const char *needle;
    } raw[] = {
        {"zero_bytes", "", 0, KILN_ERROR_FORMAT, "is truncated: 0 bytes"},
        {"text", "hello, world\n", 13, KILN_ERROR_FORMAT, "is not a .npy file"},
        {"bad_magic", "\x93NUMPZ\x01\x00\x02\x00{}", 12, KILN_ERROR_FORMAT,
         "is not a .npy file: it does not start with \\x93NUMPY"},
        {"magic_only", "\x93NUM", 4, KILN_ERROR_FORMAT, "is truncated: 4 bytes"},
        {"short_v1", "\x93NUMPY\x01\x00\x02", 9, KILN_ERROR_FORMAT, "is truncated: 9 bytes"},
        {"short_v2", "\x93NUMPY\x02\x00\x02\x00\x00", 11, KILN_ERROR_FORMAT,
         "shorter than a version 2.0 .npy preamble"},
        {"minor", "\x93NUMPY\x01\x01\x02\x00{}", 12, KILN_ERROR_UNSUPPORTED, "version 1.1"},
        {"version0", "\x93NUMPY\x00\x00\x02\x00{}", 12, KILN_ERROR_UNSUPPORTED, "version 0.0"},
        {"past_end", "\x93NUMPY\x01\x00\xe8\x03{'descr': '<f4'}", 26, KILN_ERROR_FORMAT,
         "its .npy header of 1000 bytes runs past the end of the file (26 bytes)"},
        {"past_end_v2", "\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14, KILN_ERROR_FORMAT,
         "header of 4294967295 bytes runs past the end"},
        {"empty_header", "\x93NUMPY\x01\x00\x00\x00", 10, KILN_ERROR_FORMAT,
         "does not start with '{'"},
        {"nul_descr", "\x93NUMPY\x01\x00\x35\x00{'descr': '\0f4', 'fortran_order': False, "
         "'shape': ()}", 63, KILN_ERROR_UNSUPPORTED, "dtype '?f4'"},
    };
    for (size_t c = 0; c < sizeof raw / sizeof raw[0]; c++) {
        char file[48];
        snprintf(file, sizeof file, "%s.npy", raw[c].name);
        write_bytes(file, raw[c].bytes, raw[c].size);
        check_refused(ctx, file, "good.labels.npy", NULL, raw[c].want, file, raw[c].needle);
        check_parse_agrees(ctx, file, raw[c].want);
    }
    /* As labels: the labels file is the one named. */
    write_npy("good.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
              six, sizeof six);
    check_refused(ctx, "good.npy", "bad_magic.npy", NULL, KILN_ERROR_FORMAT, "bad_magic.npy",
                  "is not a .npy file");
    check_refused(ctx, "good.npy", "short_data.npy", NULL, KILN_ERROR_FORMAT,
                  "short_data.npy", "needs 24 bytes");
    /* Files that are not there, or not files. */
    check_refused(ctx, "missing.npy", "good.labels.npy", NULL, KILN_ERROR_IO, "missing.npy",
                  "cannot open");
    check_refused(ctx, "good.npy", "missing.npy", NULL, KILN_ERROR_IO, "missing.npy",
                  "cannot open");
    check_refused(ctx, "good.npy", "", NULL, KILN_ERROR_IO, "", "is not a regular file");
    printf("malformed files: %zu refused, each naming the file\n",
           sizeof cases / sizeof cases[0] + sizeof raw / sizeof raw[0]);
}

/* Valid files NumPy does not write but reads: native and 1-byte orders,
 * Python 2's long integers, no padding, the keys in another order. */
static void test_unusual_headers(kiln_context *ctx)
{
    const uint16_t u2[6] = {0, 1, 255, 256, 4660, 65535};
    unsigned char le[12];
    for (int i = 0; i < 6; i++)
        le[2 * i] = (unsigned char)u2[i], le[2 * i + 1] = (unsigned char)(u2[i] >> 8);
    write_npy("native.npy", 1, "{'descr': '=u2', 'fortran_order': False, 'shape': (2L, 3L), }"
              "        \n", le, sizeof le);
    write_npy("quoted.npy", 2, "{\"shape\": (2,\t1,), 'fortran_order': False, \"descr\": "
              "'<f2'}", (const unsigned char[]){0x00, 0x3c, 0x01, 0x80}, 4);
    const unsigned char bytes[2] = {0x80, 0x7f};
    write_npy("order_i1.npy", 3, "{'descr': '>i1', 'fortran_order': False, 'shape': (2, 1)}",
              bytes, 2);
    write_npy("plain_u1.npy", 1, "{'descr': 'u1', 'fortran_order': False, 'shape': (2, 1)}",
              bytes, 2);
    kiln_dataset *ds;
    float x[3];
    int32_t y;
    CHECK_OK(ctx, from_npy(ctx, path("native.npy"), path("good.labels.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->dtype == KILN_DTYPE_UINT16 && ds->feature_size == 3 && ds->max_label == 2);
        CHECK_OK(ctx, ds->ops->read(ds, 1, NULL, x, &y));
        CHECK(x[0] == 256.0f && x[1] == 4660.0f && x[2] == 65535.0f && y == 2);
        kiln_dataset_destroy(ds);
    }
    CHECK_OK(ctx, from_npy(ctx, path("quoted.npy"), path("good.labels.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->dtype == KILN_DTYPE_FLOAT16 && ds->features_unchecked);
        CHECK_OK(ctx, ds->ops->read(ds, 0, NULL, x, NULL));
        CHECK(x[0] == 1.0f);
        CHECK_OK(ctx, ds->ops->read(ds, 1, NULL, x, &y));
        CHECK(x[0] == -0x1p-24f && y == 2);
        kiln_dataset_destroy(ds);
    }
    CHECK_OK(ctx, from_npy(ctx, path("order_i1.npy"), path("good.labels.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->dtype == KILN_DTYPE_INT8);
        CHECK_OK(ctx, ds->ops->read(ds, 0, NULL, x, &y));
        CHECK(x[0] == -128.0f && y == 1);
        kiln_dataset_destroy(ds);
    }
    CHECK_OK(ctx, from_npy(ctx, path("plain_u1.npy"), path("good.labels.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->dtype == KILN_DTYPE_UINT8);
        CHECK_OK(ctx, ds->ops->read(ds, 0, NULL, x, NULL));
        CHECK(x[0] == 128.0f);
        kiln_dataset_destroy(ds);
    }
    /* Bytes after the data, which np.load ignores: so does kiln. */
    const float six[7] = {1, 2, 3, 4, 5, 6, 7};
    write_npy("long_data.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
              six, sizeof six);
    CHECK_OK(ctx, from_npy(ctx, path("long_data.npy"), path("good.labels.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->count == 2 && ds->feature_size == 3);
        CHECK_OK(ctx, ds->ops->read(ds, 1, NULL, x, &y));
        CHECK(x[0] == 4.0f && x[2] == 6.0f && y == 2);
        kiln_dataset_destroy(ds);
    }
    size_t size;
    unsigned char *bytes_read = test_read_file(path("long_data.npy"), &size);
    kiln_npy a;
    CHECK(bytes_read && kiln_npy_parse(ctx, "long_data.npy", bytes_read, size, &a) == KILN_OK);
    CHECK(a.rows == 2 && a.row_size == 3 && a.data == bytes_read + size - sizeof six);
    free(bytes_read);
}

/* A file cut short while a dataset reads it is an error naming it (read
 * through a mapping, it would kill the process with SIGBUS). */
static void test_cut_short(kiln_context *ctx)
{
    unsigned char data[2 * 6];
    for (int i = 0; i < 12; i++)
        data[i] = (unsigned char)(10 * i);
    const char *header = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 6), }"
                         "          \n";
    write_npy("short.npy", 1, header, data, sizeof data);
    kiln_dataset *ds;
    CHECK_OK(ctx, from_npy(ctx, path("short.npy"), path("good.labels.npy"), NULL, &ds));
    if (!ds)
        return;
    float x[6];
    int32_t y;
    CHECK_OK(ctx, ds->ops->read(ds, 1, NULL, x, &y));
    CHECK(x[0] == 60.0f && x[5] == 110.0f);
    CHECK(truncate(path("short.npy"), (off_t)(10 + strlen(header) + 7)) == 0);
    CHECK_OK(ctx, ds->ops->read(ds, 0, NULL, x, NULL));   /* still there */
    CHECK_FAILS(ctx, KILN_ERROR_IO, "reading sample 1 failed: the file is shorter",
                ds->ops->read(ds, 1, NULL, x, &y));
    kiln_dataset_destroy(ds);

    /* The labels too (np.save over a file being read truncates it in place):
     * a label past the new end is pages past it, which a mapping would
     * fault on. */
    enum { N = 3000 };
    static unsigned char bytes[N];
    static int32_t ids[N];
    for (int i = 0; i < N; i++)
        bytes[i] = (unsigned char)i, ids[i] = i % 7;
    write_npy("long.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3000, 1), }",
              bytes, sizeof bytes);
    const char *lheader = "{'descr': '<i4', 'fortran_order': False, 'shape': (3000,), }";
    write_npy("long.labels.npy", 1, lheader, ids, sizeof ids);
    CHECK_OK(ctx, from_npy(ctx, path("long.npy"), path("long.labels.npy"), NULL, &ds));
    if (!ds)
        return;
    const kiln_sample_buffers xy = {.struct_size = sizeof xy, .features = x, .sparse_labels = &y};
    CHECK_OK(ctx, kiln_dataset_read(ds, 2900, &xy));
    CHECK(x[0] == (float)(2900 % 256) && y == 2900 % 7);
    CHECK(truncate(path("long.labels.npy"), (off_t)(10 + strlen(lheader) + 40)) == 0);
    CHECK_OK(ctx, kiln_dataset_read(ds, 9, &xy));   /* still there */
    CHECK(y == 2);
    char want[256];
    snprintf(want, sizeof want, "%s: reading the label of sample 2900 failed: the file is "
             "shorter than when it was opened", path("long.labels.npy"));
    CHECK_FAILS(ctx, KILN_ERROR_IO, want, kiln_dataset_read(ds, 2900, &xy));
    kiln_dataset_destroy(ds);
}

/* int64 features: as floats (rounded once), and as ids that must fit an
 * int32, checked as each sample is read. */
static void test_int64(kiln_context *ctx)
{
    const int64_t v[4] = {1, -2, 16777217, (int64_t)1 << 40};
    unsigned char le[32];
    for (int i = 0; i < 32; i++)
        le[i] = (unsigned char)((uint64_t)v[i / 8] >> (8 * (i % 8)));
    write_npy("ids64.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }",
              le, sizeof le);
    kiln_dataset *ds;
    float x[2];
    int32_t ids[2], y;
    CHECK_OK(ctx, from_npy(ctx, path("ids64.npy"), path("good.labels.npy"), NULL, &ds));
    if (ds) {
        CHECK(ds->dtype == KILN_DTYPE_INT64 && !ds->features_unchecked);
        CHECK_OK(ctx, kiln_dataset_read(ds, 0,
                                        &(kiln_sample_buffers){.features = x,
                                                               .sparse_labels = &y}));
        CHECK(x[0] == 1.0f && x[1] == -2.0f && y == 1);
        CHECK_OK(ctx, kiln_dataset_read(ds, 1,
                                        &(kiln_sample_buffers){.features = x,
                                                               .sparse_labels = &y}));
        CHECK(x[0] == 16777216.0f && x[1] == 0x1p40f && y == 2);
        kiln_dataset_destroy(ds);
    }
    const kiln_npy_options o = {.struct_size = sizeof o, .ids = 1};
    CHECK_OK(ctx, from_npy(ctx, path("ids64.npy"), path("good.labels.npy"), &o, &ds));
    if (ds) {
        CHECK(ds->ints && ds->dtype == KILN_DTYPE_INT64);
        CHECK_OK(ctx, kiln_dataset_read(ds, 0,
                                        &(kiln_sample_buffers){.int_features = ids,
                                                               .sparse_labels = &y}));
        CHECK(ids[0] == 1 && ids[1] == -2);
        char want[256];
        snprintf(want, sizeof want, "%s: sample 1, element 1: id 1099511627776 does not fit "
                 "an int32", path("ids64.npy"));
        const kiln_sample_buffers iy = {.struct_size = sizeof iy, .int_features = ids,
                                        .sparse_labels = &y};
        CHECK_FAILS(ctx, KILN_ERROR_DATA, want, kiln_dataset_read(ds, 1, &iy));
        kiln_dataset_destroy(ds);
    }
}

static void test_arguments(kiln_context *ctx)
{
    kiln_dataset *ds;
    const char *f = path("good.npy"), *l = path("good.labels.npy");
    CHECK(kiln_dataset_from_npy(NULL, f, l, NULL, &ds) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out is NULL",
                kiln_dataset_from_npy(ctx, f, l, NULL, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "features_path is NULL",
                from_npy(ctx, NULL, l, NULL, &ds));
    kiln_npy_options o = {.struct_size = sizeof o, .limit = -1};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "limit is -1", from_npy(ctx, f, l, &o, &ds));
    o = (kiln_npy_options){.struct_size = sizeof o, .scale = NAN};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "must be finite",
                from_npy(ctx, f, l, &o, &ds));
    o = (kiln_npy_options){.struct_size = sizeof o, .offset = -INFINITY};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "must be finite",
                from_npy(ctx, f, l, &o, &ds));
    o = (kiln_npy_options){.struct_size = 2};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_npy_options.struct_size",
                from_npy(ctx, f, l, &o, &ds));
    /* An older caller's struct: the fields it does not know are zero. */
    o = (kiln_npy_options){.struct_size = offsetof(kiln_npy_options, offset), .scale = 2.0f,
                           .offset = 99.0f, .limit = -5};
    CHECK_OK(ctx, from_npy(ctx, f, l, &o, &ds));
    CHECK(ds && ds->count == 2);
    kiln_dataset_destroy(ds);
}

/* No labels file: a dataset of features alone, read (as floats or ids)
 * with no label buffer, its subsets too; asking for a label is refused. */
static void test_no_labels(kiln_context *ctx)
{
    const float values[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    write_npy("no_labels.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
              values, sizeof values);
    kiln_dataset *ds = NULL, *sub = NULL;
    const kiln_npy_options half = {.struct_size = sizeof half, .scale = 0.5f};
    CHECK_OK(ctx, from_npy(ctx, path("no_labels.npy"), NULL, &half, &ds));
    int64_t count = 0;
    int32_t rank = 0, dims[KILN_MAX_RANK] = {0}, label = 0;
    kiln_dtype dtype = KILN_DTYPE_INT8;
    float x[3] = {0};
    CHECK_OK(ctx, kiln_dataset_count(ds, &count));
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, dims, &dtype));
    CHECK(count == 2 && rank == 1 && dims[0] == 3 && dtype == KILN_DTYPE_FLOAT32);
    CHECK_OK(ctx, kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.features = x}));
    CHECK(x[0] == 2.0f && x[1] == 2.5f && x[2] == 3.0f);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_read: buffers->sparse_labels is "
                "set but the dataset has no labels",
                kiln_dataset_read(ds, 0,
                                  &(kiln_sample_buffers){.features = x, .sparse_labels = &label}));
    CHECK_OK(ctx, kiln_dataset_subset(ds, 1, 1, &sub));
    CHECK_OK(ctx, kiln_dataset_read(sub, 0, &(kiln_sample_buffers){.features = x}));
    CHECK(x[0] == 2.0f);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "has no labels",
                kiln_dataset_read(sub, 0, &(kiln_sample_buffers){.sparse_labels = &label}));
    kiln_dataset_destroy(sub);
    kiln_dataset_destroy(ds);

    const int32_t ids[4] = {7, 0, 3, 9};
    write_npy("no_labels_ids.npy", 1, "{'descr': '<i4', 'fortran_order': False, "
              "'shape': (2, 2), }", ids, sizeof ids);
    const kiln_npy_options as_ids = {.struct_size = sizeof as_ids, .ids = 1};
    CHECK_OK(ctx, from_npy(ctx, path("no_labels_ids.npy"), NULL, &as_ids, &ds));
    int32_t got[2] = {0};
    CHECK_OK(ctx, kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.int_features = got}));
    CHECK(got[0] == 3 && got[1] == 9);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_read: buffers->sparse_labels is "
                "set but the dataset has no labels", kiln_dataset_read(ds, 0,
                                            &(kiln_sample_buffers){.int_features = got,
                                                                   .sparse_labels = &label}));
    kiln_dataset_destroy(ds);
    /* The features file's own checks still apply. */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "ids is set but",
                from_npy(ctx, path("no_labels.npy"), NULL, &as_ids, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_IO, "missing.npy", from_npy(ctx, path("missing.npy"), NULL, NULL,
                                                            &ds));
}

static int have_numpy(void)
{
    return access("/usr/bin/python3", X_OK) == 0 &&
           system("/usr/bin/python3 -c 'import numpy' 2> /dev/null") == 0;
}

int main(void)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    snprintf(dir, sizeof dir, "/tmp/kiln-npy-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp %s failed\n", dir);
        return 1;
    }
    test_half();
    test_malformed(&ctx);
    test_unusual_headers(&ctx);
    test_cut_short(&ctx);
    test_int64(&ctx);
    test_arguments(&ctx);
    test_no_labels(&ctx);
    const char *root = getenv("KILN_SOURCE_ROOT");
    int skipped = 0;
    if (!root || !have_numpy()) {
        printf("note: %s; NumPy's own files were not tested\n",
               root ? "/usr/bin/python3 with numpy is not available" : "KILN_SOURCE_ROOT is unset");
        skipped = 1;
    } else {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/test/datasets/write_npy.py %s", root, dir);
        CHECK(system(cmd) == 0);
        test_numpy_files(&ctx);
        test_options(&ctx);
        test_default_int_labels(&ctx);
        test_numpy_refusals(&ctx);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    kiln_context_release_host_only(&ctx);
    if (skipped && !test_failures)
        SKIP_MISSING("the checks without NumPy passed; NumPy's files need /usr/bin/python3 with numpy");
    return test_finish("test_npy");
}
