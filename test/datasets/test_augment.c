/* Augmentations, one sample at a time. Each transform alone is checked by
 * what it must be, found by search in float64: an exact mirror or none, an
 * exact window of the zero-padded image, an exact shift within its bound
 * with zero fill, one added constant, one contrast factor for every
 * channel; their draws must spread as uniform draws do. The whole chain is
 * checked against a float64 reference that re-derives the draws by calling
 * the same generator in the same order (its stream copied from augment.c),
 * which also pins the order of application. Then determinism and the
 * options checks. No device: the context is host-only. */
#include "harness.h"
#include "runtime/data/augment.h"
#include "runtime/context/context.h"
#include "runtime/context/rng.h"

#include <float.h>
#include <stdint.h>

#define SEED 0x5eedULL
#define MAX_FLOATS (16 * 16 * 4)

static kiln_shape hwc(int32_t h, int32_t w, int32_t c)
{
    kiln_shape s;
    memset(&s, 0, sizeof s);
    s.rank = 3;
    s.dims[0] = h;
    s.dims[1] = w;
    s.dims[2] = c;
    return s;
}

static kiln_augment_options none(void)
{
    kiln_augment_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    return o;
}

/* Values in [0.5 + k, 1.5 + k) for channel k: never 0, so a filled pixel
 * shows, and each channel has its own mean. */
static void fill(float *x, const kiln_shape *s, uint64_t stream)
{
    kiln_rng rng;
    kiln_rng_seed(&rng, 77, stream);
    const int c = s->dims[2];
    for (int i = 0; i < s->dims[0] * s->dims[1] * c; i++)
        x[i] = 0.5f + (float)(i % c) + kiln_rng_uniform(&rng);
}

/* out = in augmented; `in` is left alone. The sample and the scratch are
 * heap blocks of exactly one sample, so that a sanitizer or valgrind sees
 * any access past them. */
static void augment(const kiln_augment_options *o, uint64_t seed, int32_t epoch, int64_t index,
                    const kiln_shape *s, const float *in, float *out)
{
    const size_t bytes = (size_t)(s->dims[0] * s->dims[1] * s->dims[2]) * sizeof(float);
    float *const x = malloc(bytes), *const scratch = malloc(bytes);
    if (!x || !scratch) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memcpy(x, in, bytes);
    kiln_augment_sample(o, seed, epoch, index, s, x, scratch);
    memcpy(out, x, bytes);
    free(x);
    free(scratch);
}

static int at(const kiln_shape *s, int y, int x, int k)
{
    return (y * s->dims[1] + x) * s->dims[2] + k;
}

/* `in` mirrored as asked, bit for bit. */
static int is_flip(const kiln_shape *s, const float *in, const float *out, int rows, int cols)
{
    const int h = s->dims[0], w = s->dims[1];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < s->dims[2]; k++)
                if (out[at(s, y, x, k)] != in[at(s, rows ? h - 1 - y : y, cols ? w - 1 - x : x, k)])
                    return 0;
    return 1;
}

/* Which of the four mirrors `out` is (bit 0: columns, bit 1: rows); -1: none. */
static int which_flip(const kiln_shape *s, const float *in, const float *out)
{
    for (int f = 0; f < 4; f++)
        if (is_flip(s, in, out, f >> 1, f & 1))
            return f;
    return -1;
}

static void test_flips(void)
{
    const kiln_shape s = hwc(7, 9, 3);
    float in[MAX_FLOATS], out[MAX_FLOATS];
    kiln_augment_options o = none();

    /* Alone, over sample indices and over epochs: a mirror of the asked
     * axis about half the time, never the other axis. */
    for (int axis = 0; axis < 2; axis++) {
        o = none();
        o.flip_horizontal = axis == 0;
        o.flip_vertical = axis == 1;
        const int mirror = axis == 0 ? 1 : 2;
        int by_index = 0, by_epoch = 0, wrong = 0;
        for (int i = 0; i < 1000; i++) {
            fill(in, &s, (uint64_t)i);
            augment(&o, SEED, 5, i, &s, in, out);
            int f = which_flip(&s, in, out);
            by_index += f == mirror;
            wrong += f != 0 && f != mirror;
            augment(&o, SEED, i, 12345, &s, in, out);
            f = which_flip(&s, in, out);
            by_epoch += f == mirror;
            wrong += f != 0 && f != mirror;
        }
        printf("flip %s: %d / 1000 over indices, %d / 1000 over epochs\n",
               axis == 0 ? "horizontal" : "vertical", by_index, by_epoch);
        CHECK(wrong == 0);
        CHECK(by_index >= 400 && by_index <= 600);
        CHECK(by_epoch >= 400 && by_epoch <= 600);
    }

    /* Both: each of the four about a quarter of the time (independent draws). */
    o = none();
    o.flip_horizontal = o.flip_vertical = 1;
    int count[4] = {0, 0, 0, 0}, wrong = 0;
    for (int i = 0; i < 1000; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 0, i, &s, in, out);
        const int f = which_flip(&s, in, out);
        if (f < 0)
            wrong++;
        else
            count[f]++;
    }
    printf("both flips: none %d, columns %d, rows %d, both %d\n", count[0], count[1], count[2],
           count[3]);
    CHECK(wrong == 0);
    for (int f = 0; f < 4; f++)
        CHECK(count[f] >= 180 && count[f] <= 320);
}

/* `out` is the window at (dy, dx) of `in` padded with p zeros on each side. */
static int is_window(const kiln_shape *s, const float *in, const float *out, int p, int dy,
                     int dx)
{
    const int h = s->dims[0], w = s->dims[1];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < s->dims[2]; k++) {
                const int sy = y + dy - p, sx = x + dx - p;
                const double want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                  ? (double)in[at(s, sy, sx, k)] : 0.0;
                if ((double)out[at(s, y, x, k)] != want)
                    return 0;
            }
    return 1;
}

static void test_pad_crop(void)
{
    const kiln_shape s = hwc(6, 5, 2);
    float in[MAX_FLOATS], out[MAX_FLOATS];
    kiln_augment_options o = none();
    o.pad_crop = 2;
    int seen[5][5], unmatched = 0, ambiguous = 0;
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 2000; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 1, i, &s, in, out);
        int matches = 0;
        for (int dy = 0; dy <= 4; dy++)
            for (int dx = 0; dx <= 4; dx++)
                if (is_window(&s, in, out, 2, dy, dx)) {
                    seen[dy][dx]++;
                    matches++;
                }
        unmatched += matches == 0;
        ambiguous += matches > 1;
    }
    CHECK(unmatched == 0);
    CHECK(ambiguous == 0);
    /* 25 offsets, 80 each on average. */
    int lo = 2000, hi = 0;
    for (int dy = 0; dy <= 4; dy++)
        for (int dx = 0; dx <= 4; dx++) {
            lo = seen[dy][dx] < lo ? seen[dy][dx] : lo;
            hi = seen[dy][dx] > hi ? seen[dy][dx] : hi;
        }
    printf("pad_crop 2: each of the 25 windows %d to %d times in 2000\n", lo, hi);
    CHECK(lo >= 40 && hi <= 120);

    /* The largest pad (the width): still some window, and nothing read
     * outside the sample (the sanitizers watch). */
    o.pad_crop = 5;
    for (int i = 0; i < 200; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 1, i, &s, in, out);
        int matches = 0;
        for (int dy = 0; dy <= 10; dy++)
            for (int dx = 0; dx <= 10; dx++)
                matches += is_window(&s, in, out, 5, dy, dx);
        CHECK(matches > 0);
    }
}

/* `out` is `in` moved down dy rows and right dx columns, zero-filled. */
static int is_shift(const kiln_shape *s, const float *in, const float *out, int dy, int dx)
{
    const int h = s->dims[0], w = s->dims[1];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < s->dims[2]; k++) {
                const int sy = y - dy, sx = x - dx;
                const double want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                  ? (double)in[at(s, sy, sx, k)] : 0.0;
                if ((double)out[at(s, y, x, k)] != want)
                    return 0;
            }
    return 1;
}

/* P(round(u * range) == d) for u uniform in [-1, 1]. */
static double round_probability(int d, double range)
{
    const double lo = fmax(d - 0.5, -range), hi = fmin(d + 0.5, range);
    return hi > lo ? (hi - lo) / (2 * range) : 0.0;
}

static void test_translate(void)
{
    const kiln_shape s = hwc(8, 10, 3);
    float in[MAX_FLOATS], out[MAX_FLOATS];
    kiln_augment_options o = none();
    o.translate_height = 0.3f;   /* 2.4 rows: shifts of -2..2 */
    o.translate_width = 0.45f;   /* 4.5 columns: -4..4 (5 only at u = -1 exactly) */
    const int bound_y = 2, bound_x = 5;
    int seen_y[17], seen_x[21], unmatched = 0, ambiguous = 0;
    memset(seen_y, 0, sizeof seen_y);
    memset(seen_x, 0, sizeof seen_x);
    for (int i = 0; i < 2000; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 2, i, &s, in, out);
        int matches = 0;
        /* Every shift that leaves a pixel, not only those within the bound. */
        for (int dy = -7; dy <= 7; dy++)
            for (int dx = -9; dx <= 9; dx++)
                if (is_shift(&s, in, out, dy, dx)) {
                    CHECK(abs(dy) <= bound_y && abs(dx) <= bound_x);
                    seen_y[dy + 8]++;
                    seen_x[dx + 10]++;
                    matches++;
                }
        unmatched += matches == 0;
        ambiguous += matches > 1;
    }
    CHECK(unmatched == 0);
    CHECK(ambiguous == 0);
    printf("translate rows:");
    for (int d = -bound_y; d <= bound_y; d++)
        printf(" %d:%d", d, seen_y[d + 8]);
    printf("\ntranslate columns:");
    for (int d = -bound_x; d <= bound_x; d++)
        printf(" %d:%d", d, seen_x[d + 10]);
    printf("\n");
    /* Each shift as often as round(u * f * size) makes it, within 5 deviations. */
    for (int d = -bound_y; d <= bound_y; d++)
        CHECK(fabs(seen_y[d + 8] - 2000 * round_probability(d, 0.3 * 8)) <=
              5 * sqrt(2000 * 0.25) + 1);
    for (int d = -bound_x; d <= bound_x; d++)
        CHECK(fabs(seen_x[d + 10] - 2000 * round_probability(d, 0.45 * 10)) <=
              5 * sqrt(2000 * 0.25) + 1);

    /* The largest fractions and a one-pixel image: no read outside. */
    o.translate_height = o.translate_width = 0.999f;
    for (int i = 0; i < 100; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 2, i, &s, in, out);
        int matches = 0;
        for (int dy = -8; dy <= 8; dy++)
            for (int dx = -10; dx <= 10; dx++)
                matches += is_shift(&s, in, out, dy, dx);
        CHECK(matches > 0);
    }
    const kiln_shape one = hwc(1, 1, 1);
    for (int i = 0; i < 100; i++) {
        in[0] = 3.0f;
        augment(&o, SEED, 2, i, &one, in, out);
        CHECK(out[0] == 3.0f || out[0] == 0.0f);
    }
}

static void test_brightness(void)
{
    const kiln_shape s = hwc(5, 7, 3);
    const int n = 5 * 7 * 3;
    float in[MAX_FLOATS], out[MAX_FLOATS];
    kiln_augment_options o = none();
    o.brightness = 0.25f;
    double lo = 1.0, hi = -1.0, sum = 0.0;
    for (int i = 0; i < 1000; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 3, i, &s, in, out);
        double delta = 0.0, spread = 0.0;
        for (int k = 0; k < n; k++)
            delta += ((double)out[k] - in[k]) / n;
        for (int k = 0; k < n; k++)
            spread = fmax(spread, fabs((double)out[k] - in[k] - delta));
        CHECK(spread <= 1e-6);
        CHECK(fabs(delta) <= 0.25 + 1e-6);
        lo = fmin(lo, delta);
        hi = fmax(hi, delta);
        sum += delta;
    }
    printf("brightness 0.25: deltas in [%.4f, %.4f], mean %.4f\n", lo, hi, sum / 1000);
    CHECK(lo < -0.225 && hi > 0.225);
    CHECK(fabs(sum / 1000) < 0.025);  /* the mean's deviation is 0.0046 */
}

/* Per-channel means of a sample, in float64. */
static void channel_means(const kiln_shape *s, const float *x, double *mean)
{
    const int hw = s->dims[0] * s->dims[1], c = s->dims[2];
    for (int k = 0; k < c; k++) {
        mean[k] = 0.0;
        for (int p = 0; p < hw; p++)
            mean[k] += x[p * c + k];
        mean[k] /= hw;
    }
}

static void test_contrast(void)
{
    const kiln_shape s = hwc(6, 5, 3);
    const int hw = 6 * 5, c = 3;
    float in[MAX_FLOATS], out[MAX_FLOATS];
    kiln_augment_options o = none();
    o.contrast = 0.6f;
    double lo = 2.0, hi = 0.0;
    for (int i = 0; i < 1000; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&o, SEED, 4, i, &s, in, out);
        double m_in[4], m_out[4], num = 0.0, den = 0.0;
        channel_means(&s, in, m_in);
        channel_means(&s, out, m_out);
        /* One factor for every channel, by least squares over all of them. */
        for (int p = 0; p < hw; p++)
            for (int k = 0; k < c; k++) {
                num += ((double)out[p * c + k] - m_in[k]) * ((double)in[p * c + k] - m_in[k]);
                den += ((double)in[p * c + k] - m_in[k]) * ((double)in[p * c + k] - m_in[k]);
            }
        const double factor = num / den;
        double err = 0.0;
        for (int p = 0; p < hw; p++)
            for (int k = 0; k < c; k++)
                err = fmax(err, fabs(out[p * c + k] -
                                     (m_in[k] + factor * ((double)in[p * c + k] - m_in[k]))));
        for (int k = 0; k < c; k++)
            CHECK(fabs(m_out[k] - m_in[k]) <= 1e-5);
        CHECK(err <= 1e-5);
        CHECK(factor >= 0.4 - 1e-6 && factor <= 1.6 + 1e-6);
        lo = fmin(lo, factor);
        hi = fmax(hi, factor);
    }
    printf("contrast 0.6: factors in [%.4f, %.4f]\n", lo, hi);
    CHECK(lo < 0.46 && hi > 1.54);

    /* A constant image has no deviation to scale. */
    const kiln_shape one = hwc(1, 1, 2);
    in[0] = 3.0f;
    in[1] = -2.0f;
    augment(&o, SEED, 4, 0, &one, in, out);
    CHECK(out[0] == 3.0f && out[1] == -2.0f);
}

/* The stream of augment.c, copied: the reference re-derives its draws. */
static uint64_t reference_stream(int32_t epoch, int64_t index)
{
    unsigned char b[12];
    for (int k = 0; k < 4; k++)
        b[k] = (unsigned char)((uint32_t)epoch >> (8 * k));
    for (int k = 0; k < 8; k++)
        b[4 + k] = (unsigned char)((uint64_t)index >> (8 * k));
    return kiln_hash(KILN_HASH_SEED ^ 0x4155474d454e54ULL, b, sizeof b);
}

/* The chain in float64 on an h x w x c image: flips, pad_crop, translation,
 * brightness, contrast, with draws made in the order augment.c makes them. */
static void reference(const kiln_augment_options *o, uint64_t seed, int32_t epoch, int64_t index,
                      const kiln_shape *s, const float *in, double *out)
{
    const int h = s->dims[0], w = s->dims[1], c = s->dims[2], p = o->pad_crop;
    kiln_rng rng;
    kiln_rng_seed(&rng, seed, reference_stream(epoch, index));
    const int flip_h = kiln_rng_uniform(&rng) < 0.5f;
    const int flip_v = kiln_rng_uniform(&rng) < 0.5f;
    const int crop_y = (int)kiln_rng_below(&rng, (uint64_t)(2 * p + 1));
    const int crop_x = (int)kiln_rng_below(&rng, (uint64_t)(2 * p + 1));
    const double uy = 2.0 * kiln_rng_uniform(&rng) - 1.0;
    const double ux = 2.0 * kiln_rng_uniform(&rng) - 1.0;
    const double ub = 2.0 * kiln_rng_uniform(&rng) - 1.0;
    const double uc = 2.0 * kiln_rng_uniform(&rng) - 1.0;
    const int move_y = (int)lround(uy * o->translate_height * h);
    const int move_x = (int)lround(ux * o->translate_width * w);

    double a[MAX_FLOATS], b[MAX_FLOATS];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                const int fy = o->flip_vertical && flip_v ? h - 1 - y : y;
                const int fx = o->flip_horizontal && flip_h ? w - 1 - x : x;
                a[at(s, y, x, k)] = in[at(s, fy, fx, k)];
            }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                const int sy = y + crop_y - p, sx = x + crop_x - p;
                b[at(s, y, x, k)] = sy >= 0 && sy < h && sx >= 0 && sx < w
                                  ? a[at(s, sy, sx, k)] : 0.0;
            }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                const int sy = y - move_y, sx = x - move_x;
                out[at(s, y, x, k)] = sy >= 0 && sy < h && sx >= 0 && sx < w
                                    ? b[at(s, sy, sx, k)] : 0.0;
            }
    for (int i = 0; i < h * w * c; i++)
        out[i] += ub * o->brightness;
    const double factor = 1.0 + uc * o->contrast;
    for (int k = 0; k < c; k++) {
        double mean = 0.0;
        for (int q = 0; q < h * w; q++)
            mean += out[q * c + k] / (h * w);
        for (int q = 0; q < h * w; q++)
            out[q * c + k] = (out[q * c + k] - mean) * factor + mean;
    }
}

static kiln_augment_options everything(void)
{
    kiln_augment_options o = none();
    o.flip_horizontal = o.flip_vertical = 1;
    o.pad_crop = 2;
    o.translate_height = 0.3f;
    o.translate_width = 0.25f;
    o.brightness = 0.2f;
    o.contrast = 0.5f;
    return o;
}

static void test_chain(void)
{
    const kiln_shape s = hwc(7, 9, 3);
    const int n = 7 * 9 * 3;
    float in[MAX_FLOATS], out[MAX_FLOATS];
    double want[MAX_FLOATS];
    const kiln_augment_options all = everything();
    double worst = 0.0;
    for (int epoch = 0; epoch < 3; epoch++)
        for (int i = 0; i < 300; i++) {
            fill(in, &s, (uint64_t)i);
            augment(&all, SEED, epoch, i, &s, in, out);
            reference(&all, SEED, epoch, i, &s, in, want);
            for (int k = 0; k < n; k++)
                worst = fmax(worst, fabs(out[k] - want[k]));
        }
    printf("chain against the float64 reference: largest difference %.3g\n", worst);
    CHECK(worst <= 1e-5);
}

static void test_determinism(void)
{
    const kiln_shape s = hwc(7, 9, 3);
    const size_t bytes = 7 * 9 * 3 * sizeof(float);
    float in[MAX_FLOATS], a[MAX_FLOATS], b[MAX_FLOATS];
    const kiln_augment_options all = everything();
    int differ = 0, same_epoch = 0, same_index = 0, same_seed = 0;
    for (int i = 0; i < 200; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&all, SEED, 3, i, &s, in, a);
        augment(&all, SEED, 3, i, &s, in, b);
        differ += memcmp(a, b, bytes) != 0;
        augment(&all, SEED, 4, i, &s, in, b);
        same_epoch += memcmp(a, b, bytes) == 0;
        augment(&all, SEED, 3, i + 1, &s, in, b);
        same_index += memcmp(a, b, bytes) == 0;
        augment(&all, SEED + 1, 3, i, &s, in, b);
        same_seed += memcmp(a, b, bytes) == 0;
    }
    CHECK(differ == 0);
    CHECK(same_epoch == 0);
    CHECK(same_index == 0);
    CHECK(same_seed == 0);

    /* Wide epochs and indices keep every bit: (1, 0) is not (0, 2^40) and
     * index 2^32 is not index 0. */
    fill(in, &s, 0);
    augment(&all, SEED, 1, 0, &s, in, a);
    augment(&all, SEED, 0, (int64_t)1 << 40, &s, in, b);
    CHECK(memcmp(a, b, bytes) != 0);
    augment(&all, SEED, 0, 0, &s, in, a);
    augment(&all, SEED, 0, (int64_t)1 << 32, &s, in, b);
    CHECK(memcmp(a, b, bytes) != 0);
    augment(&all, SEED, INT32_MAX, INT64_MAX, &s, in, a);
    augment(&all, SEED, INT32_MAX, INT64_MAX, &s, in, b);
    CHECK(memcmp(a, b, bytes) == 0);

    /* Turning one transform on leaves the others' draws alone: flips with
     * and without brightness differ by one constant. */
    kiln_augment_options flips = none(), flips_bright = none();
    flips.flip_horizontal = flips.flip_vertical = 1;
    flips_bright = flips;
    flips_bright.brightness = 0.5f;
    int moved = 0;
    for (int i = 0; i < 200; i++) {
        fill(in, &s, (uint64_t)i);
        augment(&flips, SEED, 0, i, &s, in, a);
        augment(&flips_bright, SEED, 0, i, &s, in, b);
        double lo = 1e9, hi = -1e9;
        for (int k = 0; k < 7 * 9 * 3; k++) {
            lo = fmin(lo, (double)b[k] - a[k]);
            hi = fmax(hi, (double)b[k] - a[k]);
        }
        moved += hi - lo > 1e-6;
    }
    CHECK(moved == 0);

    /* No transform: the sample is untouched. */
    const kiln_augment_options off = none();
    fill(in, &s, 9);
    augment(&off, SEED, 0, 9, &s, in, a);
    CHECK(memcmp(a, in, bytes) == 0);
}

/* The check refuses `o` with `status`, naming the function and `field`. */
static void refused(kiln_context *ctx, const kiln_augment_options *o, const kiln_shape *s,
                    kiln_status status, const char *field)
{
    CHECK_FAILS(ctx, status, field, kiln_augment_check(ctx, o, s));
    if (!strstr(kiln_context_last_error(ctx), "kiln_dataset_transform")) {
        fprintf(stderr, "message lacks kiln_dataset_transform: %s\n",
                kiln_context_last_error(ctx));
        test_failures++;
    }
}

static void test_check(kiln_context *ctx)
{
    const kiln_shape s = hwc(8, 6, 3);
    kiln_augment_options o = none();
    CHECK_OK(ctx, kiln_augment_check(ctx, &o, &s));
    o = everything();
    CHECK_OK(ctx, kiln_augment_check(ctx, &o, &s));
    /* The edges of every range. */
    o.translate_height = o.translate_width = 0.999f;
    o.pad_crop = 6;
    o.brightness = FLT_MAX;
    o.contrast = 1.0f;
    CHECK_OK(ctx, kiln_augment_check(ctx, &o, &s));

    kiln_shape flat;
    memset(&flat, 0, sizeof flat);
    flat.rank = 2;
    flat.dims[0] = flat.dims[1] = 28;
    o = none();
    refused(ctx, &o, &flat, KILN_ERROR_SHAPE, "(28, 28)");
    flat.rank = 1;
    flat.dims[0] = 784;
    refused(ctx, &o, &flat, KILN_ERROR_SHAPE, "(784,)");
    flat.rank = 4;
    flat.dims[0] = flat.dims[1] = flat.dims[2] = flat.dims[3] = 2;
    refused(ctx, &o, &flat, KILN_ERROR_SHAPE, "(2, 2, 2, 2)");

    const float bad_translate[] = {1.0f, 1.5f, -0.1f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad_translate / sizeof *bad_translate; i++) {
        o = none();
        o.translate_height = bad_translate[i];
        refused(ctx, &o, &s, KILN_ERROR_INVALID_ARGUMENT, "translate_height");
        o = none();
        o.translate_width = bad_translate[i];
        refused(ctx, &o, &s, KILN_ERROR_INVALID_ARGUMENT, "translate_width");
    }
    const int32_t bad_pad[] = {-1, INT32_MIN, 7 /* > width 6 */, 9 /* > height 8 */};
    for (size_t i = 0; i < sizeof bad_pad / sizeof *bad_pad; i++) {
        o = none();
        o.pad_crop = bad_pad[i];
        refused(ctx, &o, &s, KILN_ERROR_INVALID_ARGUMENT, "pad_crop");
    }
    const float bad_brightness[] = {-0.5f, -FLT_MIN, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_brightness / sizeof *bad_brightness; i++) {
        o = none();
        o.brightness = bad_brightness[i];
        refused(ctx, &o, &s, KILN_ERROR_INVALID_ARGUMENT, "brightness");
    }
    const float bad_contrast[] = {-0.1f, 1.5f, 1.0001f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_contrast / sizeof *bad_contrast; i++) {
        o = none();
        o.contrast = bad_contrast[i];
        refused(ctx, &o, &s, KILN_ERROR_INVALID_ARGUMENT, "contrast");
    }
}

int main(void)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    test_flips();
    test_pad_crop();
    test_translate();
    test_brightness();
    test_contrast();
    test_chain();
    test_determinism();
    test_check(&ctx);
    kiln_context_release_host_only(&ctx);
    return test_finish("test_augment");
}
