/* Every source trains exactly as host arrays holding the same samples:
 * Fashion-MNIST's first 300 training images as IDX, as a .npy file written
 * here, and as a PNG folder written by tools/fashion_png_folder.py (whose
 * samples run class by class, so its arrays are sorted the same way). */
#include "test_data.h"

#include <unistd.h>

#define COUNT 300

static char dir[64];
static float pixels[COUNT * 784], sorted_pixels[COUNT * 784];
static int32_t labels[COUNT], sorted_labels[COUNT];
static unsigned char bytes[COUNT * 784];

static kiln_dataset *arrays(kiln_context *ctx, const float *x, const int32_t *y)
{
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = COUNT, .feature_rank = 3,
                          .feature_dims = {28, 28, 1}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

/* The IDX samples as floats and bytes, and sorted by class (stable). */
static kiln_dataset *read_idx(kiln_context *ctx)
{
    kiln_dataset *ds = fashion_subset(ctx, "train", COUNT);
    for (int64_t i = 0; ds && i < COUNT; i++)
        CHECK_OK(ctx, kiln_dataset_read(ds, i,
                                        &(kiln_sample_buffers){.features = pixels + i * 784,
                                                               .sparse_labels = labels + i}));
    for (int i = 0; i < COUNT * 784; i++)
        bytes[i] = (unsigned char)lrintf(pixels[i] * 255.0f);
    int at = 0;
    for (int32_t k = 0; k < 10; k++)
        for (int i = 0; i < COUNT; i++)
            if (labels[i] == k) {
                memcpy(sorted_pixels + at * 784, pixels + i * 784, 784 * sizeof(float));
                sorted_labels[at++] = k;
            }
    CHECK(at == COUNT);
    return ds;
}

static void write_npy(const char *name, const char *shape, const void *data, size_t n)
{
    char header[128], path[128];
    int len = snprintf(header, sizeof header, "{'descr': '|u1', 'fortran_order': False, "
                       "'shape': %s, }", shape);
    while ((10 + len + 1) % 64)
        header[len++] = ' ';
    header[len++] = '\n';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)len, 0};
    CHECK(f && fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len &&
          fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

static kiln_dataset *npy(kiln_context *ctx)
{
    unsigned char y[COUNT];
    for (int i = 0; i < COUNT; i++)
        y[i] = (unsigned char)labels[i];
    write_npy("x.npy", "(300, 28, 28, 1)", bytes, sizeof bytes);
    write_npy("y.npy", "(300,)", y, sizeof y);
    char x_path[128], y_path[128];
    snprintf(x_path, sizeof x_path, "%s/x.npy", dir);
    snprintf(y_path, sizeof y_path, "%s/y.npy", dir);
    kiln_npy_options o = {.struct_size = sizeof o, .scale = 1.0f / 255.0f};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_npy(ctx, x_path, y_path, &o, &ds));
    return ds;
}

static kiln_dataset *folder(kiln_context *ctx, const char *root)
{
    char cmd[512], path[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/fashion_png_folder.py %s/png "
             "--limit %d > /dev/null", root, dir, COUNT);
    if (system(cmd) != 0)
        return NULL;
    snprintf(path, sizeof path, "%s/png/train", dir);
    kiln_image_folder_options o = {.struct_size = sizeof o, .height = 28, .width = 28,
                                   .channels = 1};
    kiln_dataset *ds = NULL;
    const kiln_status st = kiln_dataset_from_image_folder(ctx, path, &o, &ds);
    if (st == KILN_ERROR_UNSUPPORTED)
        printf("image folder not compared: %s\n", kiln_context_last_error(ctx));
    else
        CHECK_OK(ctx, st);
    return ds;
}

static float *train(kiln_context *ctx, const kiln_dataset *ds, int64_t *n)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM};
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                               .strategy = KILN_STRATEGY_ONE_DEVICE};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 32;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    CHECK_OK(ctx, kiln_model_parameter_count(m, n));
    float *w = calloc((size_t)*n, sizeof(float));
    CHECK_OK(ctx, kiln_model_get_weights(m, w, *n));
    kiln_model_destroy(m);
    return w;
}

static void compare(kiln_context *ctx, const char *what, const kiln_dataset *a,
                    const kiln_dataset *b)
{
    int64_t n;
    float *wa = train(ctx, a, &n), *wb = train(ctx, b, &n);
    const int same = memcmp(wa, wb, (size_t)n * sizeof(float)) == 0;
    printf("%-36s %s\n", what, same ? "bit-identical weights" : "DIFFERENT weights");
    CHECK(same);
    free(wa);
    free(wb);
}

int main(void)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        SKIP_MISSING("Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)");
    snprintf(dir, sizeof dir, "/tmp/kiln-sources-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    kiln_context *ctx = test_context(11);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    kiln_dataset *idx = read_idx(ctx), *plain = arrays(ctx, pixels, labels);
    kiln_dataset *from_npy = npy(ctx);
    compare(ctx, "IDX vs host arrays", idx, plain);
    compare(ctx, ".npy (uint8, scaled) vs host arrays", from_npy, plain);
    kiln_dataset *png = root ? folder(ctx, root) : NULL;
    if (png) {
        kiln_dataset *sorted = arrays(ctx, sorted_pixels, sorted_labels);
        compare(ctx, "PNG folder vs host arrays", png, sorted);
        kiln_dataset_destroy(sorted);
    } else if (!root) {
        printf("image folder not compared: KILN_SOURCE_ROOT is unset\n");
    }
    kiln_dataset_destroy(png);
    kiln_dataset_destroy(from_npy);
    kiln_dataset_destroy(plain);
    kiln_dataset_destroy(idx);
    kiln_context_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_finish("test_sources");
}
