/* Data and the seed CNN shared by the tests: a small synthetic image set,
 * Fashion-MNIST subsets as Debian ships them, and the seed's CNN. */
#ifndef KILN_TEST_DATA_H
#define KILN_TEST_DATA_H

#include "harness.h"
#include "seed_cnn.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* `count` side x side x 1 images of pseudo-random pixels in [0, 1) drawn
 * from `seed`; the label of an image is (pixel 0 + pixel 9) x 2.5, modulo
 * `classes`, so a model can learn it. */
static inline kiln_dataset *synthetic_images(kiln_context *ctx, int count, int side,
                                             uint64_t seed, int classes)
{
    const size_t pixels = (size_t)count * (size_t)side * (size_t)side;
    float *x = malloc(pixels * sizeof(float));
    int32_t *y = malloc((size_t)count * sizeof(int32_t));
    kiln_dataset *ds = NULL;
    if (x && y) {
        for (size_t i = 0; i < pixels; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            x[i] = (float)(seed >> 40) / 16777216.0f;
        }
        for (int i = 0; i < count; i++) {
            const float *img = x + (size_t)i * (size_t)side * (size_t)side;
            y[i] = (int32_t)((img[0] + img[9]) * 2.5f) % classes;
        }
        kiln_arrays_desc d = {.struct_size = sizeof d};
        d.count = count;
        d.feature_rank = 3;
        d.feature_dims[0] = side;
        d.feature_dims[1] = side;
        d.feature_dims[2] = 1;
        d.features = x;
        d.sparse_labels = y;
        CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));   /* copies x and y */
    }
    free(x);
    free(y);
    return ds;
}

/* The first `limit` images of Fashion-MNIST's "train" or "t10k" set. */
static inline kiln_dataset *fashion_subset(kiln_context *ctx, const char *set, int64_t limit)
{
    char images[256], labels[256];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", FASHION_DIR, set);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", FASHION_DIR, set);
    kiln_idx_options o = {.struct_size = sizeof o};
    o.limit = limit;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_idx(ctx, images, labels, &o, &ds));
    return ds;
}

#endif
