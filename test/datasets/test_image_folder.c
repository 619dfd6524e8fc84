/* Image folders, with no device (the context is made by hand): PNG and
 * JPEG decoding against PIL (test/datasets/image_cases.py), the bilinear resize
 * against a float64 reference, Fashion-MNIST written as PNG files by
 * tools/fashion_png_folder.py against the IDX reader, class names, labels
 * and file order, broken folders and files, skip_bad_images, reads from
 * several threads at once, and every allocation failing in turn. */
#include "harness.h"
#include "kiln_config.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/formats/image_decode.h"

#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PIL_PYTHON "/usr/bin/python3"
#define FASHION "/usr/share/datasets/fashion-mnist"
#define FASHION_COUNT 60

static const char *const fashion_classes[10] = {
    "0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat",
    "5_sandal", "6_shirt", "7_sneaker", "8_bag", "9_ankle_boot",
};

static char tmp[256];            /* this run's scratch folder */
static const char *source_root;  /* the repository: tools/, test/ */

/* A formatted path, valid until eight more have been made. */
static const char *at(const char *fmt, ...) KILN_PRINTF(1, 2);
static const char *at(const char *fmt, ...)
{
    static char ring[8][1024];
    static int next;
    char *s = ring[next++ % 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof ring[0], fmt, ap);
    va_end(ap);
    return s;
}

/* A copy of a path that lives until the end of the test. */
static char *kept[64];
static int n_kept;

static const char *keep(const char *path)
{
    if (n_kept == 64) {
        fprintf(stderr, "the test keeps more than 64 paths\n");
        exit(1);
    }
    kept[n_kept] = malloc(strlen(path) + 1);
    if (!kept[n_kept])
        exit(1);
    return strcpy(kept[n_kept++], path);
}

/* Runs a shell command; its exit status, or -1. */
static int shell(const char *command)
{
    const int r = system(command);
    return r != -1 && WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0) {
        fprintf(stderr, "cannot make %s\n", path);
        test_failures++;
    }
}

static void put_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, size, f) == size);
    if (f)
        fclose(f);
}

static unsigned char *slurp(const char *path, size_t *size)
{
    unsigned char *data = test_read_file(path, size);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", path);
        test_failures++;
    }
    return data;
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *data = slurp(from, &n);
    put_file(to, data, n);
    free(data);
}

/* An allocator that fails after `left` allocations (negative: never) and
 * counts the blocks alive; atomic, for the threads' reads. */
typedef struct alloc_state {
    int left;
    long live;
} alloc_state;

static void *test_realloc(void *user, void *ptr, size_t size)
{
    alloc_state *const a = user;
    if (size == 0) {
        if (ptr && a)
            __atomic_fetch_sub(&a->live, 1, __ATOMIC_RELAXED);
        free(ptr);
        return NULL;
    }
    if (a && __atomic_load_n(&a->left, __ATOMIC_RELAXED) >= 0 &&
        __atomic_fetch_sub(&a->left, 1, __ATOMIC_RELAXED) <= 0)
        return NULL;
    void *p = realloc(ptr, size);
    if (p && !ptr && a)
        __atomic_fetch_add(&a->live, 1, __ATOMIC_RELAXED);
    return p;
}

static kiln_status open_folder(kiln_context *ctx, const char *folder, int32_t h, int32_t w,
                               int32_t channels, int32_t skip, kiln_dataset **out)
{
    kiln_image_folder_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.height = h;
    o.width = w;
    o.channels = channels;
    o.skip_bad_images = skip;
    *out = (kiln_dataset *)(void *)&tmp;   /* junk that must become NULL on failure */
    const kiln_status st = kiln_dataset_from_image_folder(ctx, folder, &o, out);
    if (st != KILN_OK && *out) {
        fprintf(stderr, "kiln_dataset_from_image_folder failed but left *out set\n");
        test_failures++;
        *out = NULL;
    }
    return st;
}

static kiln_status read_sample(const kiln_dataset *ds, int64_t i, float *x, int32_t *y)
{
    return ds->ops->read(ds, i, NULL, x, y);
}

/* ---- the resize against float64 ---- */

/* tf.image.resize's bilinear sampling point, clamped to the edges. */
static double ref_axis(int i, int in, int out, int *lo, int *hi)
{
    double s = (i + 0.5) * in / out - 0.5;
    s = s < 0 ? 0 : s > in - 1 ? in - 1 : s;
    *lo = (int)floor(s);
    *hi = *lo + 1 < in ? *lo + 1 : *lo;
    return s - *lo;
}

static void ref_resize(const uint8_t *src, int ih, int iw, int c, double *dst, int oh, int ow)
{
    for (int y = 0; y < oh; y++) {
        int y0, y1, x0, x1;
        const double fy = ref_axis(y, ih, oh, &y0, &y1);
        for (int x = 0; x < ow; x++) {
            const double fx = ref_axis(x, iw, ow, &x0, &x1);
            for (int k = 0; k < c; k++) {
                const double tl = src[(y0 * iw + x0) * c + k], tr = src[(y0 * iw + x1) * c + k];
                const double bl = src[(y1 * iw + x0) * c + k], br = src[(y1 * iw + x1) * c + k];
                const double top = tl + (tr - tl) * fx, bottom = bl + (br - bl) * fx;
                dst[(y * ow + x) * c + k] = top + (bottom - top) * fy;
            }
        }
    }
}

static double resize_max_error;

/* Resizes random pixels both ways; equal sizes must copy exactly. */
static void check_resize(int ih, int iw, int c, int oh, int ow, float scale, float offset)
{
    const size_t n_in = (size_t)ih * iw * c, n_out = (size_t)oh * ow * c;
    uint8_t *src = malloc(n_in);
    float *got = malloc(n_out * sizeof *got);
    double *want = malloc(n_out * sizeof *want);
    for (size_t i = 0; i < n_in; i++)
        src[i] = (uint8_t)(rand() & 255);
    kiln_image_resize_bilinear(src, ih, iw, c, got, oh, ow, scale, offset);
    ref_resize(src, ih, iw, c, want, oh, ow);
    double worst = 0;
    int exact = 1;
    for (size_t i = 0; i < n_out; i++) {
        const double e = fabs(got[i] - (want[i] * scale + offset)) / (fabs(scale) * 255);
        worst = e > worst ? e : worst;
        if (ih == oh && iw == ow && got[i] != src[i] * scale + offset)
            exact = 0;
    }
    if (worst > 1e-5 || !exact)
        fprintf(stderr, "resize %dx%dx%d -> %dx%d: error %.3g of the range%s\n", ih, iw, c, oh,
                ow, worst, exact ? "" : ", equal sizes not copied exactly");
    CHECK(worst <= 1e-5);
    CHECK(exact);
    resize_max_error = worst > resize_max_error ? worst : resize_max_error;
    free(src);
    free(got);
    free(want);
}

static void test_resize(void)
{
    static const int sizes[][5] = {
        {7, 5, 1, 7, 5}, {28, 28, 3, 28, 28}, {7, 5, 3, 13, 11}, {13, 11, 1, 5, 3},
        {1, 1, 3, 4, 3}, {9, 1, 1, 3, 5}, {5, 8, 3, 5, 3}, {31, 17, 1, 17, 31},
        {2, 2, 1, 1, 1}, {3, 7, 3, 2, 14}, {28, 28, 1, 14, 14}, {28, 28, 1, 56, 56},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++, n++)
        check_resize(sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], sizes[i][4], 1.0f,
                     0.0f);
    for (int i = 0; i < 40; i++, n++)
        check_resize(1 + 2 * (rand() % 20), 1 + 2 * (rand() % 20), rand() % 2 ? 3 : 1,
                     1 + 2 * (rand() % 20), 1 + 2 * (rand() % 20),
                     i % 2 ? 1.0f / 255.0f : -2.0f / 255.0f, i % 2 ? 0.0f : 1.0f);
    printf("resize: %d size pairs, largest error %.2g of the range against float64\n", n,
           resize_max_error);
}

/* ---- decoding against PIL ---- */

static int is_png(const char *name)
{
    return strstr(name, ".png") != NULL;
}

/* TensorFlow's decode_png gray from colour: libpng's fixed point for
 * (0.299, 0.587), truncated. */
static uint8_t tf_gray(const uint8_t *rgb)
{
    return (uint8_t)((9797u * rgb[0] + 19234u * rgb[1] + 3737u * rgb[2]) >> 15);
}

static int max_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = abs((int)a[i] - (int)b[i]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

typedef struct decode_stats {
    int cases, png_diff, jpeg_diff, pil_gray_diff;
} decode_stats;

static void check_case(kiln_context *ctx, const char *dir, const char *name, int w, int h,
                       int colour, decode_stats *stats)
{
    size_t n, n_rgb, n_gray;
    unsigned char *file = slurp(at("%s/%s", dir, name), &n);
    unsigned char *rgb = slurp(at("%s/%s.rgb", dir, name), &n_rgb);
    unsigned char *pil_gray = slurp(at("%s/%s.gray", dir, name), &n_gray);
    const size_t pixels = (size_t)w * h;
    CHECK(n_rgb == 3 * pixels && n_gray == pixels);
    for (int channels = 1; file && channels <= 3 && n_rgb == 3 * pixels; channels += 2) {
        kiln_image img;
        const kiln_status st = kiln_image_decode(ctx, name, file, n, channels, &img);
        if (st != KILN_OK) {
            fprintf(stderr, "%s (%d channels): %s\n", name, channels,
                    kiln_context_last_error(ctx));
            test_failures++;
            continue;
        }
        CHECK(img.width == w && img.height == h && img.channels == channels);
        uint8_t *want = malloc(pixels * channels);
        if (channels == 3)
            memcpy(want, rgb, 3 * pixels);
        else if (colour && is_png(name))
            for (size_t i = 0; i < pixels; i++)
                want[i] = tf_gray(rgb + 3 * i);
        else
            memcpy(want, pil_gray, pixels);
        const int d = max_diff(img.pixels, want, pixels * channels);
        if (is_png(name)) {
            if (d)
                fprintf(stderr, "%s (%d channels): off by up to %d\n", name, channels, d);
            CHECK(d == 0);
            stats->png_diff = d > stats->png_diff ? d : stats->png_diff;
            if (channels == 1 && colour) {
                const int p = max_diff(img.pixels, pil_gray, pixels);
                CHECK(p <= 1);   /* PIL rounds 0.299 R + 0.587 G + 0.114 B; libpng truncates */
                stats->pil_gray_diff = p > stats->pil_gray_diff ? p : stats->pil_gray_diff;
            }
        } else {
            /* The same libjpeg-turbo and settings as PIL: exact is expected,
             * one level is allowed for another build of it. */
            if (d > 1)
                fprintf(stderr, "%s (%d channels): off by up to %d\n", name, channels, d);
            CHECK(d <= 1);
            stats->jpeg_diff = d > stats->jpeg_diff ? d : stats->jpeg_diff;
        }
        free(want);
        kiln_image_free(ctx, &img);
    }
    stats->cases++;
    free(file);
    free(rgb);
    free(pil_gray);
}

/* Writes the cases with PIL; 0 when PIL is missing (the reason printed). */
static int make_cases(void)
{
    if (access(PIL_PYTHON, X_OK) != 0) {
        test_missing_part("no " PIL_PYTHON ", so no comparison with PIL");
        return 0;
    }
    const int rc = shell(at(PIL_PYTHON " '%s/test/datasets/image_cases.py' '%s/cases' "
                            "> '%s/cases.log' 2>&1", source_root, tmp, tmp));
    if (rc == 77) {
        test_missing_part(PIL_PYTHON " has no PIL (python3-pil), so no comparison with PIL");
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "test/datasets/image_cases.py failed (%d); see %s/cases.log\n", rc, tmp);
        test_failures++;
        return 0;
    }
    return 1;
}

static void test_decode_cases(kiln_context *ctx)
{
    const char *dir = keep(at("%s/cases", tmp));
    FILE *list = fopen(at("%s/cases.txt", dir), "r");
    CHECK(list != NULL);
    char name[64], kind[16];
    int w, h;
    decode_stats stats = {0};
    while (list && fscanf(list, "%63s %d %d %15s", name, &w, &h, kind) == 4)
        check_case(ctx, dir, name, w, h, strcmp(kind, "colour") == 0, &stats);
    if (list)
        fclose(list);
    CHECK(stats.cases == 12);
    printf("decode: %d files against PIL at 1 and 3 channels: PNG off by %d, JPEG by %d; "
           "gray from colour PNG off PIL's convert(\"L\") by %d\n", stats.cases,
           stats.png_diff, stats.jpeg_diff, stats.pil_gray_diff);
}

/* The cases as a folder (png/, jpeg/), resized: against the float64
 * resize of PIL's pixels. */
static void test_cases_folder(kiln_context *ctx)
{
    const char *dir = keep(at("%s/cases", tmp)), *root = keep(at("%s/mixed", tmp));
    make_dir(root);
    make_dir(at("%s/jpeg", root));
    make_dir(at("%s/png", root));
    FILE *list = fopen(at("%s/cases.txt", dir), "r");
    char names[16][64];
    int dims[16][2], n = 0;
    while (list && n < 16 && fscanf(list, "%63s %d %d %*s", names[n], &dims[n][1],
                                    &dims[n][0]) == 3)
        n++;
    if (list)
        fclose(list);
    for (int i = 0; i < n; i++)
        copy_file(at("%s/%s", dir, names[i]),
                  at("%s/%s/%s", root, is_png(names[i]) ? "png" : "jpeg", names[i]));
    kiln_dataset *ds;
    const int oh = 10, ow = 12;
    CHECK_OK(ctx, open_folder(ctx, root, oh, ow, 0, 0, &ds));
    if (!ds)
        return;
    CHECK(ds->count == n && ds->n_classes == 2 && ds->feature_size == oh * ow * 3);
    CHECK(strcmp(ds->class_names[0], "jpeg") == 0 && strcmp(ds->class_names[1], "png") == 0);
    float x[10 * 12 * 3];
    double want[10 * 12 * 3];
    int64_t s = 0;
    double worst[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        /* Within a class, the files in strcmp order (cases.txt lists them so). */
        const char *order[16];
        int m = 0;
        for (int i = 0; i < n; i++)
            if (is_png(names[i]) == k)
                order[m++] = names[i];
        for (int a = 0; a < m; a++)
            for (int b = a + 1; b < m; b++)
                if (strcmp(order[b], order[a]) < 0) {
                    const char *t = order[a];
                    order[a] = order[b];
                    order[b] = t;
                }
        for (int i = 0; i < m; i++, s++) {
            int j = 0;
            while (strcmp(names[j], order[i]) != 0)
                j++;
            size_t size;
            unsigned char *rgb = slurp(at("%s/%s.rgb", dir, order[i]), &size);
            int32_t y = -1;
            CHECK_OK(ctx, read_sample(ds, s, x, &y));
            CHECK(y == k);
            ref_resize(rgb, dims[j][0], dims[j][1], 3, want, oh, ow);
            for (int e = 0; e < oh * ow * 3; e++) {
                const double d = fabs(x[e] - want[e] / 255.0);
                worst[k] = d > worst[k] ? d : worst[k];
            }
            free(rgb);
        }
    }
    CHECK(worst[1] <= 1e-5);                    /* PNG: PIL's pixels exactly */
    CHECK(worst[0] <= 1.0 / 255.0 + 1e-5);      /* JPEG: within a level */
    printf("folder of the cases at %dx%d: PNG off the float64 resize of PIL's pixels by "
           "%.2g, JPEG by %.2g (in [0, 1])\n", oh, ow, worst[1], worst[0]);
    kiln_dataset_destroy(ds);
}

/* ---- Fashion-MNIST through the tool ---- */

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Plain IDX files named as Fashion-MNIST's, of random pixels. */
static void write_idx(const char *dir, const char *prefix, uint32_t count)
{
    unsigned char *images = malloc(16 + (size_t)count * 784), labels[8 + 256];
    put_be32(images, 0x803);
    put_be32(images + 4, count);
    put_be32(images + 8, 28);
    put_be32(images + 12, 28);
    put_be32(labels, 0x801);
    put_be32(labels + 4, count);
    for (uint32_t i = 0; i < count * 784; i++)
        images[16 + i] = (unsigned char)(rand() & 255);
    for (uint32_t i = 0; i < count; i++)
        labels[8 + i] = (unsigned char)((i * 7 + 3) % 10);
    put_file(at("%s/%s-images-idx3-ubyte", dir, prefix), images, 16 + (size_t)count * 784);
    put_file(at("%s/%s-labels-idx1-ubyte", dir, prefix), labels, 8 + count);
    free(images);
}

static char idx_dir[512], idx_suffix[4];

/* tmp/fashion/{train,test}: Debian's Fashion-MNIST when installed (and
 * this build reads gzip), else random IDX files of the same names. */
static int make_fashion(void)
{
    const char *python = getenv("KILN_PYTHON");
    snprintf(idx_dir, sizeof idx_dir, "%s", FASHION);
    snprintf(idx_suffix, sizeof idx_suffix, ".gz");
    if (!KILN_HAVE_ZLIB || access(FASHION "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("no %s: random IDX files stand in\n", FASHION);
        snprintf(idx_dir, sizeof idx_dir, "%s/idx", tmp);
        idx_suffix[0] = '\0';
        make_dir(idx_dir);
        write_idx(idx_dir, "train", 100);
        write_idx(idx_dir, "t10k", 70);
    }
    const int rc = shell(at("'%s' '%s/tools/fashion_png_folder.py' '%s/fashion' --source '%s' "
                            "--limit %d > '%s/fashion.log' 2>&1", python ? python : "python3",
                            source_root, tmp, idx_dir, FASHION_COUNT, tmp));
    if (rc != 0)
        fprintf(stderr, "tools/fashion_png_folder.py failed (%d); see %s/fashion.log\n", rc,
                tmp);
    CHECK(rc == 0);
    return rc == 0;
}

/* The path the tool gave IDX sample i of the training split. */
static const char *fashion_file(const kiln_dataset *idx, int64_t i)
{
    return at("%s/fashion/train/%s/%02d.png", tmp, fashion_classes[idx->sparse_labels[i]],
              (int)i);
}

/* The IDX files as a resident dataset (the IDX reader keeps bytes and
 * converts per sample; the checks below index its floats directly). */
static kiln_status open_idx(kiln_context *ctx, const char *split, kiln_dataset **out)
{
    kiln_idx_options io = {.struct_size = sizeof io, .limit = FASHION_COUNT};
    kiln_dataset *bytes = NULL;
    kiln_status st = kiln_dataset_from_idx(
        ctx, at("%s/%s-images-idx3-ubyte%s", idx_dir, split, idx_suffix),
        at("%s/%s-labels-idx1-ubyte%s", idx_dir, split, idx_suffix), &io, &bytes);
    if (st != KILN_OK)
        return st;
    static float x[FASHION_COUNT * 784];
    static int32_t y[FASHION_COUNT];
    for (int64_t i = 0; i < bytes->count && st == KILN_OK; i++)
        st = kiln_dataset_read(bytes, i,
                               &(kiln_sample_buffers){.features = x + i * 784,
                                                      .sparse_labels = y + i});
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = bytes->count, .feature_rank = 3,
                          .feature_dims = {28, 28, 1}, .features = x, .sparse_labels = y};
    if (st == KILN_OK)
        st = kiln_dataset_from_arrays(ctx, &d, out);
    kiln_dataset_destroy(bytes);
    return st;
}

static void test_fashion(kiln_context *ctx, const kiln_dataset *idx)
{
    kiln_dataset *ds;
    CHECK_OK(ctx, open_folder(ctx, at("%s/fashion/train", tmp), 28, 28, 1, 0, &ds));
    if (!ds)
        return;
    CHECK(ds->count == FASHION_COUNT);
    CHECK(ds->n_classes == 10 && ds->max_label == 9 && ds->dtype == KILN_DTYPE_UINT8);
    CHECK(ds->label_kind == KILN_LABELS_SPARSE && ds->label_size == 1);
    CHECK(ds->feature_shape.rank == 3 && ds->feature_shape.dims[0] == 28 &&
          ds->feature_shape.dims[1] == 28 && ds->feature_shape.dims[2] == 1);
    for (int k = 0; k < 10 && ds->n_classes == 10; k++)
        CHECK(strcmp(ds->class_names[k], fashion_classes[k]) == 0);
    /* Samples run class by class, each class in file (= IDX) order, and
     * decode to the IDX reader's floats exactly. */
    float x[784];
    int64_t s = 0;
    int same = 1;
    for (int32_t k = 0; k < 10; k++)
        for (int64_t i = 0; i < idx->count; i++) {
            if (idx->sparse_labels[i] != k)
                continue;
            int32_t y = -1;
            CHECK_OK(ctx, read_sample(ds, s, x, &y));
            CHECK(y == k);
            same &= memcmp(x, idx->features + i * 784, sizeof x) == 0;
            s++;
        }
    CHECK(s == FASHION_COUNT);
    CHECK(same);
    printf("fashion: %d PNG files from the tool decode to the IDX reader's floats%s\n",
           FASHION_COUNT, same ? " exactly" : " NOT exactly");
    kiln_dataset_destroy(ds);

    /* Three channels, resized, scaled and shifted: gray repeated, the
     * float64 resize of the IDX bytes. */
    kiln_image_folder_options o = {.struct_size = sizeof o, .height = 14, .width = 20,
                                   .channels = 3, .scale = 2.0f / 255.0f, .offset = -1.0f};
    CHECK_OK(ctx, kiln_dataset_from_image_folder(ctx, at("%s/fashion/train", tmp), &o, &ds));
    if (!ds)
        return;
    CHECK(ds->feature_size == 14 * 20 * 3);
    uint8_t bytes[784];
    double want[14 * 20];
    float x3[14 * 20 * 3];
    double worst = 0;
    int32_t y;
    s = 0;
    for (int64_t i = 0; i < idx->count; i++)
        if (idx->sparse_labels[i] == 0) {
            for (int e = 0; e < 784; e++)
                bytes[e] = (uint8_t)lround(idx->features[i * 784 + e] * 255.0);
            CHECK_OK(ctx, read_sample(ds, s++, x3, &y));
            ref_resize(bytes, 28, 28, 1, want, 14, 20);
            for (int e = 0; e < 14 * 20; e++)
                for (int c = 0; c < 3; c++) {
                    const double d = fabs(x3[e * 3 + c] - (want[e] * 2.0 / 255.0 - 1.0));
                    worst = d > worst ? d : worst;
                }
        }
    CHECK(s > 0 && worst < 1e-5);
    kiln_dataset_destroy(ds);

    CHECK_OK(ctx, open_folder(ctx, at("%s/fashion/test", tmp), 28, 28, 1, 0, &ds));
    CHECK(ds && ds->count == FASHION_COUNT && ds->n_classes == 10);
    kiln_dataset_destroy(ds);
}

/* Which entries count: sorted by strcmp, any case of .png .jpg .jpeg, the
 * format told by the bytes; hidden entries, other files, folders within a
 * class and files beside the classes are left out. */
static void test_listing(kiln_context *ctx, const kiln_dataset *idx)
{
    const char *root = keep(at("%s/listing", tmp));
    make_dir(root);
    const char *a = keep(at("%s/a_first", root)), *b = keep(at("%s/b_second", root));
    make_dir(a);
    make_dir(b);
    make_dir(at("%s/.git", root));
    make_dir(at("%s/sub.png", b));
    /* Samples 0..4 of the IDX file, under names whose order is known. */
    const char *const files[5] = {"10.png", "2.png", "UPPER.PNG", "a.jpg", "x.JpEg"};
    const char *const dirs[5] = {a, a, b, b, b};
    for (int i = 0; i < 5; i++)
        copy_file(fashion_file(idx, i), at("%s/%s", dirs[i], files[i]));
    const char *extra[] = {"%s/.git/x.png", "%s/top.png", "%s/b_second/.hidden.png",
                           "%s/b_second/notes.txt", "%s/b_second/sub.png/y.png",
                           "%s/b_second/png", "%s/b_second/x.png.bak"};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        copy_file(fashion_file(idx, 5), at(extra[i], root));
    kiln_dataset *ds;
    CHECK_OK(ctx, open_folder(ctx, root, 28, 28, 1, 0, &ds));
    if (!ds)
        return;
    /* A hidden file is listed, as Keras's os.walk lists it ('.' sorts
     * before letters and digits); a hidden folder is no class. */
    CHECK(ds->count == 6 && ds->n_classes == 2 && ds->max_label == 1);
    CHECK(strcmp(ds->class_names[0], "a_first") == 0);
    CHECK(strcmp(ds->class_names[1], "b_second") == 0);
    static const int idx_sample[6] = {0, 1, 5, 2, 3, 4};
    float x[784];
    for (int s = 0; s < 6 && ds->count == 6; s++) {
        int32_t y = -1;
        CHECK_OK(ctx, read_sample(ds, s, x, &y));
        CHECK(y == (s < 2 ? 0 : 1));
        CHECK(memcmp(x, idx->features + idx_sample[s] * 784, sizeof x) == 0);
    }
    kiln_dataset_destroy(ds);
}

/* Symbolic links: to a file, read through; dangling or looping, listed
 * (Keras lists them too) and refused when read, naming the file, or
 * skipped and counted with skip_bad_images; beside the classes, a dangling
 * one is no class (os.path.isdir is false for it). */
static void test_links(kiln_context *ctx, const kiln_dataset *idx)
{
    const char *root = keep(at("%s/links", tmp)), *c = keep(at("%s/links/c", tmp));
    make_dir(root);
    make_dir(c);
    copy_file(fashion_file(idx, 0), at("%s/1.png", c));
    CHECK(symlink(at("%s/nowhere.png", c), at("%s/2.png", c)) == 0);
    CHECK(symlink(at("%s/3.png", c), at("%s/3.png", c)) == 0);
    copy_file(fashion_file(idx, 4), at("%s/4.png", c));
    CHECK(symlink("1.png", at("%s/5.png", c)) == 0);
    CHECK(symlink(at("%s/gone", root), at("%s/d", root)) == 0);
    kiln_dataset *plain, *ds;
    float x[784];
    int32_t y;
    CHECK_OK(ctx, open_folder(ctx, root, 28, 28, 1, 0, &plain));
    CHECK_OK(ctx, open_folder(ctx, root, 28, 28, 1, 1, &ds));
    if (!plain || !ds) {
        kiln_dataset_destroy(plain);
        kiln_dataset_destroy(ds);
        return;
    }
    CHECK(plain->count == 5 && plain->n_classes == 1);
    CHECK_FAILS(ctx, KILN_ERROR_IO, at("cannot open %s/2.png: it is a symbolic link to a "
                                       "missing file", c), read_sample(plain, 1, x, &y));
    CHECK_FAILS(ctx, KILN_ERROR_IO, at("cannot open %s/3.png: Too many levels of symbolic "
                                       "links", c), read_sample(plain, 2, x, &y));
    CHECK_OK(ctx, read_sample(plain, 4, x, &y));
    CHECK(memcmp(x, idx->features, sizeof x) == 0);
    /* Skipped: the next good file of the class stands in, counted. */
    CHECK_OK(ctx, read_sample(ds, 1, x, &y));
    CHECK(memcmp(x, idx->features + 4 * 784, sizeof x) == 0);
    CHECK_OK(ctx, read_sample(ds, 2, x, &y));
    CHECK(memcmp(x, idx->features + 4 * 784, sizeof x) == 0);
    int64_t skipped = 0;
    CHECK_OK(ctx, kiln_dataset_skipped(ds, &skipped));
    CHECK(skipped == 2);
    kiln_dataset_destroy(plain);
    kiln_dataset_destroy(ds);
}

/* ---- errors ---- */

static void test_bad_arguments(kiln_context *ctx)
{
    const char *folder = keep(at("%s/fashion/train", tmp));
    kiln_dataset *ds = (kiln_dataset *)(void *)&tmp;
    kiln_image_folder_options o = {.struct_size = sizeof o, .height = 8, .width = 8};
    CHECK(kiln_dataset_from_image_folder(NULL, folder, &o, &ds) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(ds == NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out is NULL",
                kiln_dataset_from_image_folder(ctx, folder, &o, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "folder is NULL",
                kiln_dataset_from_image_folder(ctx, NULL, &o, &ds));
    /* Zero sizes are Keras's default, 256; NULL options are all defaults. */
    int32_t rank, dims[KILN_MAX_RANK];
    CHECK_OK(ctx, kiln_dataset_from_image_folder(ctx, folder, NULL, &ds));
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, dims, NULL));
    CHECK(rank == 3 && dims[0] == 256 && dims[1] == 256 && dims[2] == 3);
    kiln_dataset_destroy(ds);
    CHECK_OK(ctx, open_folder(ctx, folder, 8, 0, 1, 0, &ds));
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, dims, NULL));
    CHECK(rank == 3 && dims[0] == 8 && dims[1] == 256 && dims[2] == 1);
    kiln_dataset_destroy(ds);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "height 8, width -1; both must be > 0 (images "
                "are resized to them), or 0 for 256", open_folder(ctx, folder, 8, -1, 1, 0, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "height -3",
                open_folder(ctx, folder, -3, 8, 1, 0, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "more than 268435456 pixels",
                open_folder(ctx, folder, 65536, 65536, 1, 0, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "channels is 2",
                open_folder(ctx, folder, 8, 8, 2, 0, &ds));
    o.scale = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "scale nan",
                kiln_dataset_from_image_folder(ctx, folder, &o, &ds));
    o.scale = 1e37f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "255 * scale + offset",
                kiln_dataset_from_image_folder(ctx, folder, &o, &ds));
    o.scale = 0.0f;
    o.offset = INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "offset inf",
                kiln_dataset_from_image_folder(ctx, folder, &o, &ds));
    o.offset = 0.0f;
    o.struct_size = 4;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "struct_size",
                kiln_dataset_from_image_folder(ctx, folder, &o, &ds));
    CHECK(ds == NULL);
}

static void test_bad_folders(kiln_context *ctx, const kiln_dataset *idx)
{
    kiln_dataset *ds;
    const char *missing = keep(at("%s/no such folder", tmp));
    CHECK_FAILS(ctx, KILN_ERROR_IO, missing, open_folder(ctx, missing, 8, 8, 1, 0, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_IO, "No such file", open_folder(ctx, missing, 8, 8, 1, 0, &ds));
    const char *empty = keep(at("%s/empty", tmp));
    make_dir(empty);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, at("%s has no class subfolder", empty),
                open_folder(ctx, empty, 8, 8, 1, 0, &ds));
    /* Files and hidden folders only: still no class. */
    copy_file(fashion_file(idx, 0), at("%s/a.png", empty));
    make_dir(at("%s/.cache", empty));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, at("%s has no class subfolder", empty),
                open_folder(ctx, empty, 8, 8, 1, 0, &ds));
    /* A class folder of no image: named, even beside good ones. */
    const char *hollow = keep(at("%s/hollow", tmp));
    make_dir(hollow);
    make_dir(at("%s/a", hollow));
    make_dir(at("%s/b", hollow));
    copy_file(fashion_file(idx, 0), at("%s/a/1.png", hollow));
    copy_file(fashion_file(idx, 0), at("%s/b/1.png.bak", hollow));
    put_file(at("%s/b/notes.txt", hollow), "x", 1);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, at("class folder %s/b holds no image", hollow),
                open_folder(ctx, hollow, 8, 8, 1, 0, &ds));
    /* A file named as an image that is none: listed, refused when read. */
    const char *notimg = keep(at("%s/notimg", tmp));
    make_dir(notimg);
    make_dir(at("%s/c", notimg));
    make_dir(at("%s/c/d.png", notimg));   /* a folder so named is not a file */
    put_file(at("%s/c/x.png", notimg), "hello, world\n", 13);
    CHECK_OK(ctx, open_folder(ctx, notimg, 8, 8, 1, 0, &ds));
    if (ds) {
        float x[64];
        CHECK(ds->count == 1);
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, at("%s/c/x.png is neither a PNG nor a JPEG", notimg),
                    read_sample(ds, 0, x, NULL));
        kiln_dataset_destroy(ds);
    }
}

/* Broken files, each named with its library's message when read. */
static void make_broken(const char *dir)
{
    size_t n;
    unsigned char *png = slurp(at("%s/test/data/image/rgb.png", source_root), &n);
    put_file(at("%s/trunc.png", dir), png, n * 2 / 3);
    free(png);
    unsigned char *jpg = slurp(at("%s/test/data/image/rgb420.jpg", source_root), &n);
    size_t sos = 2;
    while (sos + 3 < n && !(jpg[sos] == 0xff && jpg[sos + 1] == 0xda))
        sos++;
    const size_t start = sos + 2 + ((size_t)jpg[sos + 2] << 8 | jpg[sos + 3]);
    CHECK(start + 40 < n);
    /* Cut within the scan data, and flipped in it. */
    put_file(at("%s/trunc.jpg", dir), jpg, start + (n - start) / 2);
    for (size_t i = start + 10; i < start + 40 && i < n; i++)
        jpg[i] ^= 0xff;
    put_file(at("%s/corrupt.jpg", dir), jpg, n);
    free(jpg);
    put_file(at("%s/empty.png", dir), "", 0);
    put_file(at("%s/text.png", dir), "hello, world\n", 13);
}

static void test_bad_files(kiln_context *ctx)
{
    const char *root = keep(at("%s/broken", tmp)), *dir = keep(at("%s/broken/c", tmp));
    make_dir(root);
    make_dir(dir);
    make_broken(dir);
    kiln_dataset *ds;
    CHECK_OK(ctx, open_folder(ctx, root, 8, 8, 3, 0, &ds));
    if (!ds)
        return;
    /* Sorted: corrupt.jpg empty.png text.png trunc.jpg trunc.png */
    static const char *const want[5][2] = {
        {"corrupt.jpg is not a valid JPEG file: TurboJPEG: Corrupt JPEG data", NULL},
        {"empty.png is empty", NULL},
        {"text.png is neither a PNG nor a JPEG file: it starts with bytes 68 65 6c", NULL},
        {"trunc.jpg is not a valid JPEG file: TurboJPEG: ", "Premature end"},
        {"trunc.png is not a valid PNG file: libpng: ", NULL},
    };
    float x[8 * 8 * 3];
    int32_t y;
    CHECK(ds->count == 5);
    printf("broken files:\n");
    for (int i = 0; i < 5 && ds->count == 5; i++) {
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, at("%s/%s", dir, want[i][0]),
                    read_sample(ds, i, x, &y));
        if (want[i][1])
            CHECK(strstr(kiln_context_last_error(ctx), want[i][1]) != NULL);
        printf("  %s\n", kiln_context_last_error(ctx));
    }
    kiln_dataset_destroy(ds);
}

/* ---- skip_bad_images ---- */

static void test_skip(kiln_context *ctx, const kiln_dataset *idx)
{
    const char *root = keep(at("%s/skip", tmp));
    make_dir(root);
    const char *s = keep(at("%s/s", root)), *t = keep(at("%s/t", root));
    make_dir(s);
    make_dir(t);
    make_broken(t);   /* every file of class t is bad */
    put_file(at("%s/0_bad.png", s), "not a png", 9);
    copy_file(fashion_file(idx, 1), at("%s/1_good.png", s));
    copy_file(at("%s/trunc.png", t), at("%s/2_trunc.png", s));
    copy_file(fashion_file(idx, 3), at("%s/3_good.png", s));
    copy_file(at("%s/corrupt.jpg", t), at("%s/4_bad.jpg", s));
    kiln_dataset *plain, *ds;
    float x[784];
    int32_t y;
    CHECK_OK(ctx, open_folder(ctx, root, 28, 28, 1, 0, &plain));
    CHECK_OK(ctx, open_folder(ctx, root, 28, 28, 1, 1, &ds));
    if (!plain || !ds)
        return;
    CHECK(ds->count == 10);
    /* Without skipping: the bad file stops the read, named. */
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, at("%s/0_bad.png", s), read_sample(plain, 0, x, &y));
    CHECK(plain->skipped == 0);
    /* With: the next good file of the class, wrapping; counted. */
    static const int stand_in[5] = {1, 1, 3, 3, 1};   /* sample -> IDX sample read */
    static const int skips[5] = {1, 1, 2, 2, 3};      /* the count after reading it */
    for (int i = 0; i < 5; i++) {
        y = -1;
        CHECK_OK(ctx, read_sample(ds, i, x, &y));
        CHECK(y == 0);
        CHECK(memcmp(x, idx->features + stand_in[i] * 784, sizeof x) == 0);
        CHECK(ds->skipped == skips[i]);
    }
    /* A class with no good file fails, naming the class and the first file. */
    for (int i = 5; i < 10; i++)
        CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "none of the 5 images of class 't' can be decoded",
                    read_sample(ds, i, x, &y));
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, at("the first: %s/text.png is neither", t),
                read_sample(ds, 7, x, &y));
    CHECK(ds->skipped == 3);
    /* A file that cannot be read is not a bad image: never skipped. */
    CHECK(unlink(at("%s/3_good.png", s)) == 0);
    CHECK_FAILS(ctx, KILN_ERROR_IO, at("cannot open %s/3_good.png", s),
                read_sample(ds, 3, x, &y));
    CHECK_FAILS(ctx, KILN_ERROR_IO, at("cannot open %s/3_good.png", s),
                read_sample(ds, 2, x, &y));
    CHECK(ds->skipped == 3);
    copy_file(fashion_file(idx, 3), at("%s/3_good.png", s));
    /* Class s alone, for the threads and the allocation failures. */
    make_dir(at("%s/skip_s", tmp));
    CHECK(symlink(s, at("%s/skip_s/s", tmp)) == 0);
    kiln_dataset_destroy(plain);
    kiln_dataset_destroy(ds);
}

/* ---- several threads at once ---- */

typedef struct reader {
    pthread_t thread;
    const kiln_dataset *ds;
    const float *want;      /* every sample, read by one thread */
    const int32_t *labels;
    int rounds, mismatches, failures;
} reader;

static void *read_all(void *arg)
{
    reader *r = arg;
    const int64_t fsize = r->ds->feature_size;
    float *x = malloc((size_t)fsize * sizeof *x);
    for (int round = 0; round < r->rounds; round++)
        for (int64_t i = r->ds->count - 1; i >= 0; i--) {
            int32_t y;
            if (read_sample(r->ds, i, x, &y) != KILN_OK) {
                r->failures++;
                continue;
            }
            r->mismatches += y != r->labels[i] ||
                             memcmp(x, r->want + i * fsize, (size_t)fsize * sizeof *x) != 0;
        }
    free(x);
    return NULL;
}

static void test_threads(kiln_context *ctx, const char *folder, int bad_per_pass)
{
    enum { THREADS = 4, ROUNDS = 3 };
    kiln_dataset *ds;
    CHECK_OK(ctx, open_folder(ctx, folder, 20, 24, 3, 1, &ds));
    if (!ds)
        return;
    const int64_t fsize = ds->feature_size;
    float *want = malloc((size_t)(ds->count * fsize) * sizeof *want);
    int32_t *labels = malloc((size_t)ds->count * sizeof *labels);
    for (int64_t i = 0; i < ds->count; i++)
        CHECK_OK(ctx, read_sample(ds, i, want + i * fsize, labels + i));
    const int64_t before = ds->skipped;
    CHECK(before == bad_per_pass);
    reader r[THREADS];
    for (int t = 0; t < THREADS; t++) {
        r[t] = (reader){.ds = ds, .want = want, .labels = labels, .rounds = ROUNDS};
        CHECK(pthread_create(&r[t].thread, NULL, read_all, &r[t]) == 0);
    }
    int mismatches = 0, failures = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(r[t].thread, NULL);
        mismatches += r[t].mismatches;
        failures += r[t].failures;
    }
    CHECK(mismatches == 0 && failures == 0);
    CHECK(ds->skipped == before + THREADS * ROUNDS * bad_per_pass);
    printf("threads: %d threads read %s %d times each: %d mismatches, %d failures, "
           "%lld skipped\n", THREADS, folder, ROUNDS, mismatches, failures,
           (long long)ds->skipped);
    free(want);
    free(labels);
    kiln_dataset_destroy(ds);
}

/* ---- allocation failures ---- */

static void test_alloc_failures(const char *folder)
{
    alloc_state a = {.left = -1};
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, test_realloc, &a, NULL);
    const long base = a.live;
    kiln_dataset *ds = NULL;
    int budget = 0;
    for (;; budget++) {
        __atomic_store_n(&a.left, budget, __ATOMIC_RELAXED);
        const kiln_status st = open_folder(&ctx, folder, 9, 7, 3, 1, &ds);
        __atomic_store_n(&a.left, -1, __ATOMIC_RELAXED);
        if (st == KILN_OK)
            break;
        CHECK(st == KILN_ERROR_OUT_OF_MEMORY);
        CHECK(a.live == base);
        if (st != KILN_ERROR_OUT_OF_MEMORY || budget > 10000)
            break;
    }
    int reads = 0;
    float x[9 * 7 * 3];
    for (int64_t i = 0; ds && i < ds->count; i++)
        for (int b = 0;; b++) {
            const long live = a.live;
            int32_t y;
            __atomic_store_n(&a.left, b, __ATOMIC_RELAXED);
            const kiln_status st = read_sample(ds, i, x, &y);
            __atomic_store_n(&a.left, -1, __ATOMIC_RELAXED);
            CHECK(a.live == live);
            reads++;
            if (st == KILN_OK)
                break;
            CHECK(st == KILN_ERROR_OUT_OF_MEMORY);
            if (st != KILN_ERROR_OUT_OF_MEMORY)
                break;
        }
    kiln_dataset_destroy(ds);
    CHECK(a.live == base);
    printf("allocation failures: creation failed cleanly at %d budgets, reads at %d\n",
           budget, reads);
    kiln_context_release_host_only(&ctx);
}

/* The fuzzer's seeds: good ones decode, broken ones are refused. */
static void test_seeds(kiln_context *ctx)
{
    const char *dir = keep(at("%s/test/data/image", source_root));
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    const struct dirent *e;
    int good = 0, bad = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t n;
        unsigned char *data = slurp(at("%s/%s", dir, e->d_name), &n);
        const int broken = strncmp(e->d_name, "truncated", 9) == 0 ||
                           strncmp(e->d_name, "bad_", 4) == 0 ||
                           strncmp(e->d_name, "text", 4) == 0;
        for (int c = 1; c <= 3; c += 2) {
            kiln_image img;
            const kiln_status st = kiln_image_decode(ctx, e->d_name, data, n, c, &img);
            if (st != (broken ? KILN_ERROR_FORMAT : KILN_OK))
                fprintf(stderr, "seed %s: %s\n", e->d_name, kiln_context_last_error(ctx));
            CHECK(st == (broken ? KILN_ERROR_FORMAT : KILN_OK));
            if (st != KILN_OK)
                CHECK(strstr(kiln_context_last_error(ctx), e->d_name) != NULL);
            kiln_image_free(ctx, &img);
        }
        good += !broken;
        bad += broken;
        free(data);
    }
    if (d)
        closedir(d);
    CHECK(good >= 6 && bad >= 4);
}

/* A build without libpng or libturbojpeg says so, naming the file. */
static void test_missing_libraries(kiln_context *ctx)
{
    static const char *const seeds[2] = {"gray.png", "gray.jpg"};
    static const int have[2] = {KILN_HAVE_PNG, KILN_HAVE_JPEG};
    static const char *const library[2] = {"no libpng", "no libturbojpeg"};
    for (int i = 0; i < 2; i++) {
        if (have[i])
            continue;
        size_t n;
        unsigned char *data = slurp(at("%s/test/data/image/%s", source_root, seeds[i]), &n);
        kiln_image img;
        CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, library[i],
                    kiln_image_decode(ctx, seeds[i], data, n, 3, &img));
        CHECK(img.pixels == NULL);
        free(data);
    }
}

int main(void)
{
    source_root = getenv("KILN_SOURCE_ROOT");
    if (!source_root)
        SKIP("KILN_SOURCE_ROOT is not set (meson test sets it)");
    snprintf(tmp, sizeof tmp, "/tmp/kiln_image_folder_XXXXXX");
    if (!mkdtemp(tmp))
        SKIP("cannot make a scratch folder under /tmp");
    srand(12345);
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    test_resize();
    test_missing_libraries(&ctx);
    if (!KILN_HAVE_PNG || !KILN_HAVE_JPEG) {
        printf("this build lacks libpng or libturbojpeg: decoding is checked no further\n");
    } else {
        test_seeds(&ctx);
        if (make_cases()) {
            test_decode_cases(&ctx);
            test_cases_folder(&ctx);
        }
        kiln_dataset *idx = NULL;
        if (make_fashion())
            CHECK_OK(&ctx, open_idx(&ctx, "train", &idx));
        if (idx) {
            test_fashion(&ctx, idx);
            test_listing(&ctx, idx);
            test_links(&ctx, idx);
            test_bad_arguments(&ctx);
            test_bad_folders(&ctx, idx);
            test_bad_files(&ctx);
            test_skip(&ctx, idx);
            test_threads(&ctx, keep(at("%s/fashion/train", tmp)), 0);
            test_threads(&ctx, keep(at("%s/skip_s", tmp)), 3);
            test_alloc_failures(keep(at("%s/skip_s", tmp)));
        }
        kiln_dataset_destroy(idx);
    }
    kiln_context_release_host_only(&ctx);
    for (int i = 0; i < n_kept; i++)
        free(kept[i]);
    if (!test_failures)
        shell(at("rm -rf '%s'", tmp));
    else
        fprintf(stderr, "scratch files kept in %s\n", tmp);
    return test_finish("test_image_folder");
}
