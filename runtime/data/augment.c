/* The random augmentations of kiln_augment_options, as Keras's preprocessing
 * layers apply them, with two deliberate differences: shifts are whole
 * pixels filled with 0 (Keras's RandomTranslation defaults to
 * fill_mode='reflect' and bilinear interpolation; kiln uses 'constant' with
 * fill_value 0, as pad_crop does), and brightness and contrast never clip
 * (Keras clips to value_range; kiln's values are already scaled, to a range
 * it does not know). */
#include "runtime/data/augment.h"

#include "runtime/context/context.h"
#include "runtime/context/rng.h"

#include <math.h>
#include <string.h>

#define AUGMENT_STREAM 0x4155474d454e54ULL  /* "AUGMENT" */

kiln_status kiln_augment_check(kiln_context *ctx, const kiln_augment_options *o,
                               const kiln_shape *shape)
{
    const char *fn = "kiln_dataset_transform";
    if (shape->rank != 3) {
        char s[96];
        return kiln_error(ctx, KILN_ERROR_SHAPE,
                          "%s: augmentation needs samples of (height, width, channels); "
                          "these are %s", fn, kiln_shape_str(shape, s, sizeof s));
    }
    /* Negated comparisons so that NaN fails them too. */
    if (!(o->translate_height >= 0.0f && o->translate_height < 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: translate_height is %g; it must be in [0, 1)", fn,
                          (double)o->translate_height);
    if (!(o->translate_width >= 0.0f && o->translate_width < 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: translate_width is %g; it must be in [0, 1)", fn,
                          (double)o->translate_width);
    if (o->pad_crop < 0 || o->pad_crop > shape->dims[0] || o->pad_crop > shape->dims[1])
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: pad_crop is %d; it must be >= 0 and at most the samples' "
                          "height %d and width %d", fn, (int)o->pad_crop,
                          (int)shape->dims[0], (int)shape->dims[1]);
    if (!(o->brightness >= 0.0f) || isinf(o->brightness))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: brightness is %g; it must be finite and >= 0", fn,
                          (double)o->brightness);
    if (!(o->contrast >= 0.0f && o->contrast <= 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: contrast is %g; it must be in [0, 1]", fn, (double)o->contrast);
    return KILN_OK;
}

/* One stream per (epoch, index); the bytes are laid out by hand so that
 * every platform hashes the same ones. */
static uint64_t sample_stream(int32_t epoch, int64_t index)
{
    unsigned char b[12];
    const uint32_t e = (uint32_t)epoch;
    const uint64_t i = (uint64_t)index;
    for (int k = 0; k < 4; k++)
        b[k] = (unsigned char)(e >> (8 * k));
    for (int k = 0; k < 8; k++)
        b[4 + k] = (unsigned char)(i >> (8 * k));
    return kiln_hash(KILN_HASH_SEED ^ AUGMENT_STREAM, b, sizeof b);
}

/* Uniform in [-1, 1). */
static double symmetric(kiln_rng *rng)
{
    return 2.0 * (double)kiln_rng_uniform(rng) - 1.0;
}

static void flip_columns(float *x, int64_t h, int64_t w, int64_t c)
{
    for (int64_t y = 0; y < h; y++) {
        float *const row = x + y * w * c;
        for (int64_t a = 0, b = w - 1; a < b; a++, b--)
            for (int64_t k = 0; k < c; k++) {
                const float t = row[a * c + k];
                row[a * c + k] = row[b * c + k];
                row[b * c + k] = t;
            }
    }
}

static void flip_rows(float *x, int64_t h, int64_t w, int64_t c)
{
    for (int64_t a = 0, b = h - 1; a < b; a++, b--)
        for (int64_t k = 0; k < w * c; k++) {
            const float t = x[a * w * c + k];
            x[a * w * c + k] = x[b * w * c + k];
            x[b * w * c + k] = t;
        }
}

/* x(y, j) becomes x(y - sy, j - sx), or 0 where that falls outside. */
static void shift(float *x, float *scratch, int64_t h, int64_t w, int64_t c, int64_t sy,
                  int64_t sx)
{
    if (sy == 0 && sx == 0)
        return;
    const int64_t row = w * c;
    memcpy(scratch, x, (size_t)(h * row) * sizeof *x);
    /* Columns [j0, j1) of every row come from the source; the rest is 0. */
    const int64_t j0 = sx > 0 ? (sx < w ? sx : w) : 0;
    const int64_t j1 = sx < 0 ? (w + sx > 0 ? w + sx : 0) : w;
    for (int64_t y = 0; y < h; y++) {
        float *const out = x + y * row;
        const int64_t from = y - sy;
        if (from < 0 || from >= h || j0 >= j1) {
            for (int64_t k = 0; k < row; k++)
                out[k] = 0.0f;
            continue;
        }
        for (int64_t k = 0; k < j0 * c; k++)
            out[k] = 0.0f;
        memcpy(out + j0 * c, scratch + from * row + (j0 - sx) * c,
               (size_t)((j1 - j0) * c) * sizeof *x);
        for (int64_t k = j1 * c; k < row; k++)
            out[k] = 0.0f;
    }
}

void kiln_augment_sample(const kiln_augment_options *o, uint64_t seed, int32_t epoch,
                         int64_t index, const kiln_shape *shape, float *features,
                         float *scratch)
{
    const int64_t h = shape->dims[0], w = shape->dims[1], c = shape->dims[2];
    kiln_rng rng;
    kiln_rng_seed(&rng, seed, sample_stream(epoch, index));

    /* Every draw is made, in this order, whether its transform is on or
     * not: turning one transform on leaves the others' draws as they were. */
    const int flip_h = kiln_rng_uniform(&rng) < 0.5f;
    const int flip_v = kiln_rng_uniform(&rng) < 0.5f;
    const int64_t pad = o->pad_crop;
    const int64_t crop_y = (int64_t)kiln_rng_below(&rng, (uint64_t)(2 * pad + 1));
    const int64_t crop_x = (int64_t)kiln_rng_below(&rng, (uint64_t)(2 * pad + 1));
    const int64_t move_y = (int64_t)lround(symmetric(&rng) * o->translate_height * (double)h);
    const int64_t move_x = (int64_t)lround(symmetric(&rng) * o->translate_width * (double)w);
    const float delta = (float)(symmetric(&rng) * o->brightness);
    const double factor = 1.0 + symmetric(&rng) * o->contrast;

    if (o->flip_horizontal && flip_h)
        flip_columns(features, h, w, c);
    if (o->flip_vertical && flip_v)
        flip_rows(features, h, w, c);
    /* The window at (crop_y, crop_x) of the image padded by `pad`. */
    shift(features, scratch, h, w, c, pad - crop_y, pad - crop_x);
    shift(features, scratch, h, w, c, move_y, move_x);
    if (delta != 0.0f)
        for (int64_t k = 0; k < h * w * c; k++)
            features[k] += delta;
    if (factor != 1.0)
        for (int64_t k = 0; k < c; k++) {
            double sum = 0.0;
            for (int64_t p = 0; p < h * w; p++)
                sum += features[p * c + k];
            const double mean = sum / (double)(h * w);
            for (int64_t p = 0; p < h * w; p++)
                features[p * c + k] =
                    (float)(((double)features[p * c + k] - mean) * factor + mean);
        }
}
