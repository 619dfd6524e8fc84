/* Minimal test harness: CHECK records a failure and goes on; the test's exit
 * code is 1 if any check failed, else 0; SKIP exits 77, which meson reports
 * as a skipped test. SKIP_MISSING is the skip for something not installed
 * (a package, a data set, any OpenCL device): under CI=true, where
 * test/run.sh has installed everything, it fails instead. A skip because the
 * machine has one device where a test wants two stays a SKIP
 * (test_has_devices for a part of a test, test_require_devices for all of
 * it). */
#ifndef KILN_TEST_HARNESS_H
#define KILN_TEST_HARNESS_H

#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                \
        }                                                                   \
    } while (0)

/* A call that must succeed; on failure prints the context's message. */
#define CHECK_OK(ctx, call)                                                  \
    do {                                                                     \
        kiln_status check_st_ = (call);                                      \
        if (check_st_ != KILN_OK) {                                          \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
                    kiln_status_name(check_st_), kiln_context_last_error(ctx)); \
            test_failures++;                                                 \
        }                                                                    \
    } while (0)

/* A call that must fail with `expected` and a message containing `needle`. */
#define CHECK_FAILS(ctx, expected, needle, call)                            \
    do {                                                                    \
        kiln_status check_st_ = (call);                                     \
        const char *check_msg_ = kiln_context_last_error(ctx);              \
        if (check_st_ != (expected)) {                                      \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, \
                    #call, kiln_status_name(check_st_), kiln_status_name(expected), check_msg_); \
            test_failures++;                                                \
        } else if (!strstr(check_msg_, (needle))) {                         \
            fprintf(stderr, "%s:%d: message of %s lacks \"%s\": %s\n", __FILE__, __LINE__, \
                    #call, (needle), check_msg_);                           \
            test_failures++;                                                \
        }                                                                   \
    } while (0)

#define SKIP(...)                                                           \
    do {                                                                    \
        printf("SKIP: " __VA_ARGS__);                                       \
        printf("\n");                                                       \
        exit(77);                                                           \
    } while (0)

/* A time limit a test sets (a step watchdog), stretched by
 * KILN_TEST_TIME_SCALE where everything runs several times slower than
 * usual: tools/tsan.sh sets it, since ThreadSanitizer's processes beside a
 * busy machine took 160 s where 60 s is plenty. Never below `seconds`. */
static inline double test_seconds(double seconds)
{
    const char *scale = getenv("KILN_TEST_TIME_SCALE");
    const double k = scale ? atof(scale) : 1.0;
    return k > 1.0 ? seconds * k : seconds;
}

static inline int test_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && strcmp(ci, "true") == 0;
}

#define SKIP_MISSING(...)                                                   \
    do {                                                                    \
        if (test_in_ci()) {                                                 \
            fprintf(stderr, "FAIL (CI=true: a missing dependency fails): " __VA_ARGS__); \
            fprintf(stderr, "\n");                                          \
            exit(1);                                                        \
        }                                                                   \
        SKIP(__VA_ARGS__);                                                  \
    } while (0)

/* A part of a test left out because `why` is not installed: a note, or a
 * failure under CI=true (as SKIP_MISSING). */
static inline void test_missing_part(const char *why)
{
    if (test_in_ci()) {
        fprintf(stderr, "FAIL (CI=true: a missing dependency fails): %s\n", why);
        test_failures++;
    } else {
        printf("SKIP (part): %s\n", why);
    }
}

/* The context's device count (0, and a failed check, when it cannot be read). */
static inline int32_t test_device_count(kiln_context *ctx)
{
    int32_t devices = 0;
    CHECK_OK(ctx, kiln_context_device_count(ctx, &devices));
    return devices;
}

/* The POCL_DEVICES that gives `n` devices: "basic" n times (each a device
 * of its own thread, as the multi-device tests run). */
static inline const char *test_pocl_devices(int32_t n)
{
    static char list[64];
    list[0] = '\0';
    for (int32_t k = 0; k < n && strlen(list) + 7 < sizeof list; k++)
        strcat(list, k ? " basic" : "basic");
    return list;
}

/* Whether a part of a test that needs `n` devices runs on the context's
 * `devices`: if not, it says which part it leaves out and why, and the
 * rest of the test goes on. Too few devices is the machine, not a missing
 * dependency: a skip under CI=true too. */
static inline int test_has_devices(int32_t devices, int32_t n, const char *part)
{
    if (devices >= n)
        return 1;
    printf("SKIP (%d device%s, %d needed): %s; run with POCL_DEVICES=\"%s\"\n", (int)devices,
           devices == 1 ? "" : "s", (int)n, part, test_pocl_devices(n));
    return 0;
}

/* A test that needs `n` devices as a whole: on fewer, destroys ctx and
 * skips (exit 77; 1 if a check has already failed), saying why. */
static inline void test_require_devices(kiln_context *ctx, int32_t n, const char *test)
{
    const int32_t devices = test_device_count(ctx);
    if (devices >= n)
        return;
    kiln_context_destroy(ctx);
    printf("SKIP: %s: %d devices needed, the context has %d; run with POCL_DEVICES=\"%s\"\n",
           test, (int)n, (int)devices, test_pocl_devices(n));
    exit(test_failures ? 1 : 77);
}

/* A whole file in memory (the caller frees it), or NULL; *size its length. */
static inline unsigned char *test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *data = NULL;
    *size = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        rewind(f);
        data = malloc(n > 0 ? (size_t)n : 1);
        *size = data && n > 0 ? fread(data, 1, (size_t)n, f) : 0;
    }
    if (f)
        fclose(f);
    return data;
}

static inline int test_finish(const char *name)
{
    if (test_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
    else
        printf("%s: all checks passed\n", name);
    return test_failures ? 1 : 0;
}

/* How test_difference scales |got[i] - want[i]|. */
typedef enum test_scale {
    /* by max(1, |want[i]|): the measure of every comparison of two trainings */
    TEST_PER_VALUE,
    /* by the largest finite |want| (at least 1e-6): float32 kernels against
     * float64 references, where most values are far below the largest */
    TEST_OF_ARRAY,
} test_scale;

/* The one comparison of the tests: the largest scaled difference of got
 * from want over n values, float (elem == sizeof(float)) or double (elem ==
 * sizeof(double)); where it is goes to *at when not NULL. A NaN or an
 * infinity that the other array does not hold at the same place scores
 * +infinity, so it fails every tolerance (a NaN never equals anything,
 * NaN included); equal infinities score 0. A missing array scores
 * +infinity too. */
static inline double test_difference(const void *got, const void *want, size_t elem, int64_t n,
                                     test_scale scale, int64_t *at)
{
    const float *gf = got, *wf = want;
    const double *gd = got, *wd = want;
    const int f32 = elem == sizeof(float);
    double worst = 0, largest = 1e-6;
    if (at)
        *at = 0;
    if (!got || !want || (elem != sizeof(float) && elem != sizeof(double)))
        return INFINITY;
    for (int64_t i = 0; scale == TEST_OF_ARRAY && i < n; i++) {
        const double w = f32 ? wf[i] : wd[i];
        if (isfinite(w) && fabs(w) > largest)
            largest = fabs(w);
    }
    for (int64_t i = 0; i < n; i++) {
        const double g = f32 ? gf[i] : gd[i], w = f32 ? wf[i] : wd[i];
        double e = 0;
        if (g == w)
            e = 0;
        else if (!isfinite(g) || !isfinite(w))
            e = INFINITY;
        else
            e = fabs(g - w) / (scale == TEST_PER_VALUE ? fmax(1.0, fabs(w)) : largest);
        if (e > worst) {
            worst = e;
            if (at)
                *at = i;
        }
    }
    return worst;
}

/* The largest difference test_close has seen since a test last set it to 0. */
static double test_worst;

/* test_difference(got, want, ...) must be at most tol, else a failure is
 * counted and printed with where it is. With width > 0 `what` (padded to
 * width) and the difference are printed on success too. Returns the
 * difference. */
static inline double test_close(const char *what, int width, const void *got, const void *want,
                                size_t elem, int64_t n, test_scale scale, double tol)
{
    int64_t at = 0;
    const double worst = test_difference(got, want, elem, n, scale, &at);
    test_worst = worst > test_worst ? worst : test_worst;
    if (width > 0)
        printf("%-*s max relative difference %.2e\n", width, what, worst);
    if (!(worst <= tol)) {
        double g = NAN, w = NAN;
        if (got && want && n > 0) {
            g = elem == sizeof(float) ? ((const float *)got)[at] : ((const double *)got)[at];
            w = elem == sizeof(float) ? ((const float *)want)[at] : ((const double *)want)[at];
        }
        fprintf(stderr, "%s: difference %.3g exceeds %.1g at %lld (got %.7g, want %.7g)\n",
                what, worst, tol, (long long)at, g, w);
        test_failures++;
    }
    return worst;
}

/* A context on the default device, or NULL with the reason printed. */
static inline kiln_context *test_context(uint64_t seed)
{
    kiln_context_options o;
    char err[512] = "";
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.seed = seed;
    o.error_buffer = err;
    o.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        fprintf(stderr, "no context: %s\n", err);
    return ctx;
}

/* kiln_model_predict on `count` packed samples x (each Input's values in
 * turn, ids as int32 bits in their float slots, as kiln_dataset_read gives
 * a sample), handed over as one typed array per Input. */
static inline kiln_status test_predict_packed(kiln_model *m, const float *x, int64_t count,
                                              float *y, int32_t batch_size)
{
    int32_t n = 0;
    kiln_status st = kiln_model_input_count(m, &n);
    kiln_input_array in[KILN_MAX_MODEL_INPUTS];
    float *part[KILN_MAX_MODEL_INPUTS] = {NULL};
    int64_t sample = 0, size[KILN_MAX_MODEL_INPUTS], offset[KILN_MAX_MODEL_INPUTS];
    int ids[KILN_MAX_MODEL_INPUTS];
    for (int32_t k = 0; st == KILN_OK && k < n; k++) {
        kiln_tensor_info info = {.struct_size = sizeof info};
        st = kiln_model_input_info(m, k, &info);
        size[k] = 1;
        for (int32_t d = 0; d < info.rank; d++)
            size[k] *= info.dims[d];
        offset[k] = sample;
        sample += size[k];
        ids[k] = info.dtype == KILN_DTYPE_INT32;
    }
    for (int32_t k = 0; st == KILN_OK && k < n; k++) {
        part[k] = (float *)calloc((size_t)(count * size[k] + 1), sizeof(float));
        for (int64_t s = 0; part[k] && s < count; s++)
            memcpy(part[k] + s * size[k], x + s * sample + offset[k],
                   (size_t)size[k] * sizeof(float));
        memset(&in[k], 0, sizeof in[k]);
        in[k].features = ids[k] ? NULL : part[k];
        in[k].int_features = ids[k] ? (const int32_t *)(const void *)part[k] : NULL;
    }
    kiln_batch_arrays batch;
    memset(&batch, 0, sizeof batch);
    batch.struct_size = sizeof batch;
    batch.count = count;
    batch.n_inputs = n;
    batch.inputs = in;
    if (st == KILN_OK)
        st = kiln_model_predict(m, &batch, y, batch_size);
    for (int32_t k = 0; k < n; k++)
        free(part[k]);
    return st;
}

/* kiln_learning_rate_at's rate, which must come back KILN_OK (else the
 * failure counts and -1 comes back, which no check of a rate accepts). */
static inline double test_learning_rate(kiln_context *ctx, const kiln_optimizer_options *o,
                                        int64_t step)
{
    double rate = -1.0;
    const kiln_status st = kiln_learning_rate_at(ctx, o, step, &rate);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln_learning_rate_at(step %lld) returned %s: %s\n", (long long)step,
                kiln_status_name(st), kiln_context_last_error(ctx));
        test_failures++;
        return -1.0;
    }
    return rate;
}

#endif
