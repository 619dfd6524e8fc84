/* GEMM efficiency: kiln_gemm (CLBlast on the context's device 0) beside
 * OpenBLAS's cblas_sgemm on host memory, on the GEMMs the seed CNN runs at
 * batch 128 and 32 (as KILN_PROFILE=1 lists them) and a few square and
 * ResNet-like shapes. GFLOPS = 2 m n k / seconds / 1e9.
 *
 * Each side is warmed up with 2 calls (the first compiles CLBlast's kernels),
 * then timed in rounds of at least 0.3 s; the device is finished after each
 * batch of calls. Rounds alternate kiln and OpenBLAS, as this machine's speed
 * drifts; the table reports the median round of each.
 *
 * Device peak GFLOPS = clock_GHz x compute_units x vector_width x 2 (FMA),
 * from CL_DEVICE_MAX_CLOCK_FREQUENCY, CL_DEVICE_MAX_COMPUTE_UNITS and
 * CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT (PREFERRED when NATIVE is 0): one FMA
 * per float lane per cycle per compute unit. On PoCL's CPU devices both the
 * reported width and the clock are PoCL's reading of the host, which may not
 * be the ISA's (AVX-512 holds 16 floats) nor the turbo clock, and many x86
 * cores have 2 FMA ports, so the true peak may be twice this.
 *
 * kiln's result is checked against OpenBLAS's, or without OpenBLAS against a
 * double-precision host loop on the smaller shapes only: max relative error
 * = max |kiln - reference| / max |reference|.
 *
 * Usage: bench_gemm [--json PATH] [--rounds R] [--only TEXT]
 *                   [--shape MxNxK,OP]
 * --json appends one JSON object a line per shape to PATH; --only runs the
 * shapes whose name contains TEXT (none: a usage error); --shape MxNxK,OP
 * (OP one of NN, TN, NT) runs that one shape instead, named "custom".
 * Exits 0, 1 on a kiln error, 2 on bad usage, 77 (skip) without an OpenCL
 * device. OpenBLAS takes its thread count from OPENBLAS_NUM_THREADS. */
/* The private header, and with it CL/cl.h: the peak needs the device's
 * cl_device_id, since kiln_device_info has no vector width. */
#include "opencl/cl_internal.h"
#include "runtime/context/context.h"

#ifdef KILN_BENCH_HAVE_CBLAS
#include <cblas.h>
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIN_ROUND_S 0.3
#define BATCH_S 0.05          /* device work between two finishes */
#define NAIVE_MAX_MACS (1.0 * (1 << 26))   /* larger shapes: no host loop check */

typedef struct gemm_shape {
    const char *what;
    size_t m, n, k;
    kiln_gemm_op ta, tb;
} gemm_shape;

static const gemm_shape shapes[] = {
    {.what = "conv fwd b128", .m = 86528, .n = 32, .k = 9,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "conv wgrad b128", .m = 9, .n = 32, .k = 86528,
     .ta = KILN_GEMM_T, .tb = KILN_GEMM_N},
    {.what = "dense1 fwd b128", .m = 128, .n = 64, .k = 5408,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "dense1 wgrad b128", .m = 5408, .n = 64, .k = 128,
     .ta = KILN_GEMM_T, .tb = KILN_GEMM_N},
    {.what = "dense1 igrad b128", .m = 128, .n = 5408, .k = 64,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_T},
    {.what = "dense1 igrad b128 NN", .m = 128, .n = 5408, .k = 64,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "conv fwd b32", .m = 21632, .n = 32, .k = 9,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "conv wgrad b32", .m = 9, .n = 32, .k = 21632,
     .ta = KILN_GEMM_T, .tb = KILN_GEMM_N},
    {.what = "dense1 fwd b32", .m = 32, .n = 64, .k = 5408,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "dense1 wgrad b32", .m = 5408, .n = 64, .k = 32,
     .ta = KILN_GEMM_T, .tb = KILN_GEMM_N},
    {.what = "dense1 igrad b32", .m = 32, .n = 5408, .k = 64,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_T},
    {.what = "square 256", .m = 256, .n = 256, .k = 256,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "square 1024", .m = 1024, .n = 1024, .k = 1024,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    {.what = "resnet 3x3x64 32x32 b32", .m = 32768, .n = 64, .k = 576,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
    /* The seed ResNet at 224 x 224, batch 8: the 7 x 7 stem's and a 3 x 3
     * 64-channel layer's weight gradients, and a 3 x 3 512-channel
     * convolution's forward (im2col). */
    {.what = "resnet stem wgrad 224 b8", .m = 147, .n = 64, .k = 100352,
     .ta = KILN_GEMM_T, .tb = KILN_GEMM_N},
    {.what = "resnet 3x3x64 wgrad 224 b8", .m = 576, .n = 64, .k = 25088,
     .ta = KILN_GEMM_T, .tb = KILN_GEMM_N},
    {.what = "resnet 3x3x512 fwd 224 b8", .m = 392, .n = 512, .k = 4608,
     .ta = KILN_GEMM_N, .tb = KILN_GEMM_N},
};

#define N_SHAPES (sizeof shapes / sizeof shapes[0])

typedef struct bench_args {
    const char *json;
    const char *only;   /* NULL: every shape */
    gemm_shape custom;  /* custom.what non-NULL: this shape alone */
    int rounds;
} bench_args;

typedef struct peak_info {
    cl_uint clock_mhz, units, native_width, preferred_width, width;
    double gflops;
} peak_info;

typedef struct result {
    double kiln_gflops, blas_gflops;   /* blas_gflops < 0: no OpenBLAS */
    double max_rel_error;              /* NAN: not checked */
} result;

/* One side of the comparison: `call` runs (or enqueues) one GEMM, `finish`
 * waits for those made; `batch` calls go between two finishes. */
typedef struct runner {
    kiln_status (*call)(void *job);
    kiln_status (*finish)(void *job);
    void *job;
    long batch;
} runner;

typedef struct kiln_job {
    kiln_device *dev;
    const gemm_shape *s;
    kiln_buffer *a, *b, *c;
} kiln_job;

typedef struct host_job {
    const gemm_shape *s;
    const float *a, *b;
    float *c;
} host_job;

static int any_shape_named(const char *text)
{
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strstr(shapes[i].what, text))
            return 1;
    return 0;
}

/* "MxNxK,OP", each size positive, OP one of NN, TN, NT. */
static int parse_shape(const char *text, gemm_shape *s)
{
    long m = 0, n = 0, k = 0;
    char op[3] = "";
    int used = 0;
    if (sscanf(text, "%ldx%ldx%ld,%2[NT]%n", &m, &n, &k, op, &used) != 4 ||
        text[used] != '\0' || m <= 0 || n <= 0 || k <= 0 || strlen(op) != 2 ||
        strcmp(op, "TT") == 0)
        return 0;
    *s = (gemm_shape){.what = "custom", .m = (size_t)m, .n = (size_t)n, .k = (size_t)k,
                      .ta = op[0] == 'T' ? KILN_GEMM_T : KILN_GEMM_N,
                      .tb = op[1] == 'T' ? KILN_GEMM_T : KILN_GEMM_N};
    return 1;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    a->json = NULL;
    a->only = NULL;
    memset(&a->custom, 0, sizeof a->custom);
    a->rounds = 3;
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--json") == 0 && v)
            a->json = v;
        else if (strcmp(argv[i], "--rounds") == 0 && v && atoi(v) > 0)
            a->rounds = atoi(v);
        else if (strcmp(argv[i], "--only") == 0 && v && any_shape_named(v))
            a->only = v;
        else if (strcmp(argv[i], "--shape") == 0 && v && parse_shape(v, &a->custom))
            continue;
        else {
            fprintf(stderr, "usage: bench_gemm [--json PATH] [--rounds R] [--only TEXT] "
                            "[--shape MxNxK,OP]\n");
            return 0;
        }
    }
    return 1;
}

static size_t lda_of(const gemm_shape *s) { return s->ta == KILN_GEMM_T ? s->m : s->k; }
static size_t ldb_of(const gemm_shape *s) { return s->tb == KILN_GEMM_T ? s->k : s->n; }

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pause_s(double s)
{
    struct timespec t = {.tv_sec = 0, .tv_nsec = (long)(s * 1e9)};
    nanosleep(&t, NULL);
}

/* Uniform in [-1, 1): signs mixed, so no result is a sum of like terms only. */
static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
}

static cl_uint device_uint(const kiln_device *dev, cl_device_info what)
{
    cl_uint v = 0;
    if (clGetDeviceInfo(dev->id, what, sizeof v, &v, NULL) != CL_SUCCESS)
        return 0;
    return v;
}

static peak_info device_peak(const kiln_device *dev)
{
    peak_info p;
    p.clock_mhz = device_uint(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY);
    p.units = device_uint(dev, CL_DEVICE_MAX_COMPUTE_UNITS);
    p.native_width = device_uint(dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT);
    p.preferred_width = device_uint(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT);
    p.width = p.native_width ? p.native_width : p.preferred_width;
    p.gflops = p.clock_mhz / 1e3 * p.units * p.width * 2.0;
    return p;
}

static kiln_status kiln_call(void *job)
{
    const kiln_job *j = job;
    const gemm_shape *s = j->s;
    return kiln_gemm(j->dev, s->ta, s->tb, s->m, s->n, s->k, 1.0f, j->a, 0, lda_of(s), j->b,
                     0, ldb_of(s), 0.0f, j->c, 0, s->n);
}

static kiln_status kiln_finish(void *job)
{
    return kiln_device_finish(((kiln_job *)job)->dev);
}

#ifdef KILN_BENCH_HAVE_CBLAS
static kiln_status host_call(void *job)
{
    const host_job *j = job;
    const gemm_shape *s = j->s;
    cblas_sgemm(CblasRowMajor, s->ta == KILN_GEMM_T ? CblasTrans : CblasNoTrans,
                s->tb == KILN_GEMM_T ? CblasTrans : CblasNoTrans, (blasint)s->m, (blasint)s->n,
                (blasint)s->k, 1.0f, j->a, (blasint)lda_of(s), j->b, (blasint)ldb_of(s), 0.0f,
                j->c, (blasint)s->n);
    return KILN_OK;
}

static kiln_status host_finish(void *job)
{
    (void)job;
    return KILN_OK;
}
#endif

/* Two calls; the second, timed, sizes the batches. */
static kiln_status warm_up(runner *r)
{
    kiln_status st = r->call(r->job);
    if (st == KILN_OK)
        st = r->finish(r->job);
    const double t0 = now();
    if (st == KILN_OK)
        st = r->call(r->job);
    if (st == KILN_OK)
        st = r->finish(r->job);
    const double t = now() - t0;
    r->batch = t >= BATCH_S ? 1 : (long)(BATCH_S / (t > 1e-6 ? t : 1e-6));
    if (r->batch > 10000)
        r->batch = 10000;
    return st;
}

/* Seconds per call over one round of at least MIN_ROUND_S. */
static kiln_status time_round(const runner *r, double *per_call)
{
    long calls = 0;
    double t;
    const double t0 = now();
    do {
        for (long i = 0; i < r->batch; i++) {
            kiln_status st = r->call(r->job);
            if (st != KILN_OK)
                return st;
        }
        kiln_status st = r->finish(r->job);
        if (st != KILN_OK)
            return st;
        calls += r->batch;
        t = now() - t0;
    } while (t < MIN_ROUND_S);
    *per_call = t / (double)calls;
    return KILN_OK;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double gflops(const gemm_shape *s, double seconds)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / seconds / 1e9;
}

#ifndef KILN_BENCH_HAVE_CBLAS
/* The reference in double precision, rounded to float once at the end. */
static void naive_gemm(const gemm_shape *s, const float *a, const float *b, float *c)
{
    const size_t lda = lda_of(s), ldb = ldb_of(s);
    for (size_t i = 0; i < s->m; i++)
        for (size_t j = 0; j < s->n; j++) {
            double sum = 0;
            for (size_t p = 0; p < s->k; p++)
                sum += (double)(s->ta == KILN_GEMM_T ? a[p * lda + i] : a[i * lda + p]) *
                       (double)(s->tb == KILN_GEMM_T ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * s->n + j] = (float)sum;
        }
}
#endif

static double max_rel_error(const float *got, const float *ref, size_t n)
{
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)ref[i]);
        const double r = fabs((double)ref[i]);
        diff = d > diff || isnan(d) ? d : diff;   /* a NaN must not hide */
        scale = r > scale ? r : scale;
    }
    return scale > 0 ? diff / scale : diff;
}

/* Times both sides (host_side NULL: the device only), alternating round by
 * round, and keeps the medians. */
static kiln_status time_both(const gemm_shape *s, runner *dev_side, runner *host_side,
                             int rounds, result *res)
{
    double *t_dev = calloc((size_t)rounds * 2, sizeof *t_dev), *t_host = t_dev + rounds;
    if (!t_dev)
        return KILN_ERROR_OUT_OF_MEMORY;
    kiln_status st = warm_up(dev_side);
    if (st == KILN_OK && host_side)
        st = warm_up(host_side);
    for (int r = 0; r < rounds && st == KILN_OK; r++) {
        /* OpenBLAS's idle threads busy-wait for a while after a call (its
         * THREAD_TIMEOUT, 2^28 cycles by default): let them go to sleep
         * before the device, which shares the cores, is timed. */
        if (host_side)
            pause_s(0.2);
        st = time_round(dev_side, &t_dev[r]);
        if (st == KILN_OK && host_side)
            st = time_round(host_side, &t_host[r]);
    }
    res->kiln_gflops = gflops(s, median(t_dev, rounds));
    res->blas_gflops = host_side ? gflops(s, median(t_host, rounds)) : -1;
    free(t_dev);
    return st;
}

static kiln_status device_buffers(kiln_job *j, const float *a, const float *b)
{
    const gemm_shape *s = j->s;
    const size_t fa = s->m * s->k, fb = s->k * s->n, fc = s->m * s->n;
    kiln_status st = kiln_buffer_create(j->dev, fa * sizeof(float), "gemm A", &j->a);
    if (st == KILN_OK)
        st = kiln_buffer_create(j->dev, fb * sizeof(float), "gemm B", &j->b);
    if (st == KILN_OK)
        st = kiln_buffer_create(j->dev, fc * sizeof(float), "gemm C", &j->c);
    if (st == KILN_OK)
        st = kiln_buffer_write(j->dev, j->a, 0, a, fa * sizeof(float), 1);
    if (st == KILN_OK)
        st = kiln_buffer_write(j->dev, j->b, 0, b, fb * sizeof(float), 1);
    /* beta = 0 still reads C on some paths: 0 * NaN would be NaN. */
    if (st == KILN_OK)
        st = kiln_buffer_zero(j->dev, j->c, 0, fc * sizeof(float));
    return st;
}

/* Times the shape on both sides, then compares the device's C with the
 * reference: OpenBLAS's C (c_ref, written by its timed calls) or the host
 * loop's. */
static kiln_status time_and_check(kiln_job *dj, const float *a, const float *b, float *c_dev,
                                  float *c_ref, int rounds, result *res)
{
    const gemm_shape *s = dj->s;
    runner dev_side = {.call = kiln_call, .finish = kiln_finish, .job = dj, .batch = 1};
#ifdef KILN_BENCH_HAVE_CBLAS
    host_job hj = {.s = s, .a = a, .b = b, .c = c_ref};
    runner host_side = {.call = host_call, .finish = host_finish, .job = &hj, .batch = 1};
    kiln_status st = time_both(s, &dev_side, &host_side, rounds, res);
    const int have_ref = 1;
#else
    kiln_status st = time_both(s, &dev_side, NULL, rounds, res);
    const int have_ref = (double)s->m * (double)s->n * (double)s->k <= NAIVE_MAX_MACS;
    if (have_ref)
        naive_gemm(s, a, b, c_ref);
#endif
    if (st == KILN_OK)
        st = kiln_buffer_read(dj->dev, dj->c, 0, c_dev, s->m * s->n * sizeof(float));
    res->max_rel_error = st == KILN_OK && have_ref ? max_rel_error(c_dev, c_ref, s->m * s->n)
                                                   : NAN;
    return st;
}

/* Benchmarks one shape on fresh host and device buffers. */
static kiln_status bench_shape(kiln_device *dev, const gemm_shape *s, int rounds, result *res)
{
    const size_t fa = s->m * s->k, fb = s->k * s->n, fc = s->m * s->n;
    float *a = malloc(fa * sizeof *a), *b = malloc(fb * sizeof *b);
    float *c_dev = malloc(fc * sizeof *c_dev), *c_ref = calloc(fc, sizeof *c_ref);
    kiln_job dj = {.dev = dev, .s = s};
    kiln_status st = a && b && c_dev && c_ref ? KILN_OK : KILN_ERROR_OUT_OF_MEMORY;
    if (st != KILN_OK)
        goto fail;
    fill(a, fa, 1);
    fill(b, fb, 2);
    st = device_buffers(&dj, a, b);
    if (st == KILN_OK)
        st = time_and_check(&dj, a, b, c_dev, c_ref, rounds, res);
fail:
    kiln_buffer_destroy(dj.a);
    kiln_buffer_destroy(dj.b);
    kiln_buffer_destroy(dj.c);
    free(a);
    free(b);
    free(c_dev);
    free(c_ref);
    return st;
}

static void print_header(const kiln_device_info *info, const peak_info *p, int rounds)
{
    printf("GEMM efficiency on %s (%s, %s); median of %d rounds of >= %.1f s each\n",
           info->name, info->platform, info->driver_version, rounds, MIN_ROUND_S);
    printf("kiln: kiln_gemm (CLBlast), GEMM parameters: %s\n", info->gemm_parameters);
    printf("peak = clock_GHz x compute_units x vector_width x 2 (FMA) = %.3f x %u x %u x 2"
           " = %.1f GFLOPS\n", p->clock_mhz / 1e3, p->units, p->width, p->gflops);
    printf("  (vector width: native %u, preferred %u; a CPU core with 2 FMA ports can do"
           " twice this)\n", p->native_width, p->preferred_width);
#ifdef KILN_BENCH_HAVE_CBLAS
    printf("OpenBLAS: %s, %d threads (OPENBLAS_NUM_THREADS=%s), core %s\n",
           openblas_get_config(), openblas_get_num_threads(),
           getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "unset",
           openblas_get_corename());
    printf("max rel error: kiln vs OpenBLAS, max |diff| / max |OpenBLAS|\n\n");
    printf("| shape | m x n x k | op | kiln GFLOPS | OpenBLAS GFLOPS | kiln / OpenBLAS "
           "| kiln / peak | max rel error |\n|---|---|---|---|---|---|---|---|\n");
#else
    printf("OpenBLAS: not built\n");
    printf("max rel error: kiln vs a float64 host loop, max |diff| / max |ref|"
           " (shapes up to %.0f multiply-adds)\n\n", NAIVE_MAX_MACS);
    printf("| shape | m x n x k | op | kiln GFLOPS | kiln / peak | max rel error |\n"
           "|---|---|---|---|---|---|\n");
#endif
}

static void print_row(const gemm_shape *s, const result *r, const peak_info *p)
{
    char err[32] = "-";
    if (!isnan(r->max_rel_error))
        snprintf(err, sizeof err, "%.2e", r->max_rel_error);
    printf("| %s | %zux%zux%zu | %c%c | %.1f | ", s->what, s->m, s->n, s->k,
           s->ta == KILN_GEMM_T ? 'T' : 'N', s->tb == KILN_GEMM_T ? 'T' : 'N', r->kiln_gflops);
    if (r->blas_gflops >= 0)
        printf("%.1f | %.2f | ", r->blas_gflops, r->kiln_gflops / r->blas_gflops);
    printf("%.3f | %s |\n", p->gflops > 0 ? r->kiln_gflops / p->gflops : 0.0, err);
    fflush(stdout);
}

/* Writes s as a JSON string (device names are free text). */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_number(FILE *f, const char *key, double v, int valid)
{
    if (valid)
        fprintf(f, ", \"%s\": %.6g", key, v);
    else
        fprintf(f, ", \"%s\": null", key);
}

static void json_row(FILE *f, const gemm_shape *s, const result *r, const peak_info *p,
                     const char *device)
{
    fprintf(f, "{\"name\": \"gemm\", \"shape\": ");
    json_string(f, s->what);
    fprintf(f, ", \"m\": %zu, \"n\": %zu, \"k\": %zu, \"ta\": %d, \"tb\": %d", s->m, s->n,
            s->k, s->ta == KILN_GEMM_T, s->tb == KILN_GEMM_T);
    json_number(f, "kiln_gflops", r->kiln_gflops, 1);
    json_number(f, "openblas_gflops", r->blas_gflops, r->blas_gflops >= 0);
    json_number(f, "peak_gflops", p->gflops, p->gflops > 0);
    json_number(f, "max_rel_error", r->max_rel_error, !isnan(r->max_rel_error));
    fprintf(f, ", \"statistic\": \"median\", \"device\": ");
    json_string(f, device);
    fprintf(f, "}\n");
}

static kiln_status run_all(kiln_context *ctx, const bench_args *a, FILE *json)
{
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    kiln_status st = kiln_context_device_info(ctx, 0, &info);
    if (st != KILN_OK)
        return st;
    const peak_info peak = device_peak(ctx->devices[0]);
    print_header(&info, &peak, a->rounds);
    const int custom = a->custom.what != NULL;
    for (size_t i = 0; i < (custom ? 1 : N_SHAPES) && st == KILN_OK; i++) {
        const gemm_shape *s = custom ? &a->custom : &shapes[i];
        if (a->only && !strstr(s->what, a->only))
            continue;
        result r;
        st = bench_shape(ctx->devices[0], s, a->rounds, &r);
        if (st != KILN_OK)
            break;
        print_row(s, &r, &peak);
        if (json)
            json_row(json, s, &r, &peak, info.name);
    }
    return st;
}

int main(int argc, char **argv)
{
    bench_args a;
    if (!parse_args(argc, argv, &a))
        return 2;
    char err[1024] = "";
    kiln_context_options co;
    memset(&co, 0, sizeof co);
    co.struct_size = sizeof co;
    co.error_buffer = err;
    co.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(&co, &ctx);
    if (st != KILN_OK) {
        fprintf(stderr, "bench_gemm: %s: %s\n", kiln_status_name(st), err);
        return st == KILN_ERROR_NO_DEVICE ? 77 : 1;
    }
    FILE *json = NULL;
    if (a.json && !(json = fopen(a.json, "a"))) {
        fprintf(stderr, "bench_gemm: cannot open %s: %s\n", a.json, strerror(errno));
        kiln_context_destroy(ctx);
        return 1;
    }
    st = run_all(ctx, &a, json);
    if (st != KILN_OK)
        fprintf(stderr, "bench_gemm: %s: %s\n", kiln_status_name(st),
                kiln_context_last_error(ctx));
    if (json && fclose(json) != 0) {
        fprintf(stderr, "bench_gemm: cannot write %s\n", a.json);
        st = KILN_ERROR_IO;
    }
    kiln_context_destroy(ctx);
    return st == KILN_OK ? 0 : 1;
}
