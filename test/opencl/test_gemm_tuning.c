/* GEMM tuning: a search stores its result in the cache folder and later
 * contexts apply it without searching; a damaged record is ignored; the
 * tuned kernels compute the same GEMMs as a float64 host loop, in every
 * transposition and at sizes no tile divides; bad settings are errors.
 * Last, kiln's own NN and TN GEMM kernels against the same float64 loop.
 * Linked with -Wl,--wrap for the two GEMM choices (opencl/gemm_choice.c):
 * the search tries the first candidate only, which it then applies even if
 * CLBlast's defaults are faster, and clblast_only keeps kiln's own kernels
 * out until they are checked. */
#include "harness.h"
#include "opencl/cl_internal.h"
#include "opencl/device.h"
#include "runtime/context/context.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static char cache[256];
static int clblast_only;

int __real_kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                                    kiln_gemm_op trans_b, size_t m, size_t n, size_t k);
int __wrap_kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                                    kiln_gemm_op trans_b, size_t m, size_t n, size_t k);
int __wrap_kiln_gemm_tuning_candidates(int available);

int __wrap_kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                                    kiln_gemm_op trans_b, size_t m, size_t n, size_t k)
{
    return !clblast_only &&
           __real_kiln_gemm_use_own_kernel(gpu_kernels, gemm_tuned, trans_a, trans_b, m, n,
                                           k);
}

/* One candidate: a search compiles CLBlast's GEMM kernels twice. */
int __wrap_kiln_gemm_tuning_candidates(int available)
{
    (void)available;
    return 1;
}
static int searches;         /* "tuning GEMM" log lines seen */
static int budget_searches;  /* kiln's own GEMM's cache budget searched */

static void count_search(void *user, kiln_log_level level, const char *message)
{
    (void)user;
    (void)level;
    if (strstr(message, "tuning GEMM"))
        searches++;
    if (strstr(message, "searching kiln's GEMM cache budget"))
        budget_searches++;
}

static kiln_context *open_ctx(kiln_gemm_tuning mode, kiln_status *st, char *err, size_t size)
{
    kiln_context_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.cache_dir = cache;
    o.gemm_tuning = mode;
    o.log_fn = count_search;
    o.log_level = KILN_LOG_INFO;
    o.error_buffer = err;
    o.error_buffer_size = size;
    kiln_context *ctx = NULL;
    *st = kiln_context_create(&o, &ctx);
    return ctx;
}

static void parameters(kiln_context *ctx, char *out, size_t size)
{
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(ctx, kiln_context_device_info(ctx, 0, &info));
    snprintf(out, size, "%s", info.gemm_parameters);
}

/* Every file in the cache folder (only the tuning record: no kernel runs). */
static int damage_records(void)
{
    DIR *d = opendir(cache);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
        FILE *f = fopen(path, "r+b");
        if (f && fseek(f, 60, SEEK_SET) == 0 && fputc(0x5a, f) != EOF)
            n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static double frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 40) / (double)(1ULL << 24) - 0.5;
}

/* C = alpha op(A) op(B) + beta C on the device against a float64 loop,
 * with alpha and beta other than 1 and 0 (layers accumulate through beta),
 * for `count` products one after another in each buffer (kiln_gemm_batched
 * when count > 1). */
static void check_gemm_batched(kiln_context *ctx, int m, int n, int k, kiln_gemm_op ta,
                               kiln_gemm_op tb, int count)
{
    kiln_device *dev = ctx->devices[0];
    const size_t sa = (size_t)m * k, sb = (size_t)k * n, sc = (size_t)m * n;
    float *a = calloc(sa * count, 4), *b = calloc(sb * count, 4);
    float *c = calloc(sc * count, 4), *c0 = calloc(sc * count, 4);
    const float alpha = 0.5f, beta = 0.75f;
    const int t_a = ta == KILN_GEMM_T, t_b = tb == KILN_GEMM_T;
    uint64_t s = (uint64_t)(m * 131 + n * 17 + k + t_a * 7 + t_b);
    for (size_t i = 0; i < sa * count; i++)
        a[i] = (float)frand(&s);
    for (size_t i = 0; i < sb * count; i++)
        b[i] = (float)frand(&s);
    for (size_t i = 0; i < sc * count; i++)
        c0[i] = (float)frand(&s);
    kiln_buffer *da = NULL, *db = NULL, *dc = NULL;
    CHECK_OK(ctx, kiln_buffer_create(dev, sa * count * 4, "a", &da));
    CHECK_OK(ctx, kiln_buffer_create(dev, sb * count * 4, "b", &db));
    CHECK_OK(ctx, kiln_buffer_create(dev, sc * count * 4, "c", &dc));
    CHECK_OK(ctx, kiln_buffer_write(dev, da, 0, a, sa * count * 4, 1));
    CHECK_OK(ctx, kiln_buffer_write(dev, db, 0, b, sb * count * 4, 1));
    CHECK_OK(ctx, kiln_buffer_write(dev, dc, 0, c0, sc * count * 4, 1));
    CHECK_OK(ctx, kiln_gemm_batched(dev, ta, tb, (size_t)m, (size_t)n, (size_t)k, alpha, da, 0,
                                    t_a ? (size_t)m : (size_t)k, sa, db, 0,
                                    t_b ? (size_t)k : (size_t)n, sb, beta, dc, 0, (size_t)n, sc,
                                    (size_t)count));
    CHECK_OK(ctx, kiln_buffer_read(dev, dc, 0, c, sc * count * 4));
    double worst = 0;
    for (int p = 0; p < count; p++) {
        const float *pa = a + p * sa, *pb = b + p * sb;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double ref = 0;
                for (int l = 0; l < k; l++)
                    ref += (double)pa[t_a ? l * m + i : i * k + l] *
                           pb[t_b ? j * k + l : l * n + j];
                ref = alpha * ref + beta * (double)c0[p * sc + i * n + j];
                const double e = fabs(c[p * sc + i * n + j] - ref) / (1.0 + fabs(ref));
                worst = e > worst ? e : worst;
            }
    }
    printf("gemm %dx%dx%d %c%c x%d: max relative error %.2e\n", m, n, k, t_a ? 'T' : 'N',
           t_b ? 'T' : 'N', count, worst);
    CHECK(worst < 1e-4);
    kiln_buffer_destroy(da);
    kiln_buffer_destroy(db);
    kiln_buffer_destroy(dc);
    free(a);
    free(b);
    free(c);
    free(c0);
}

static void check_gemm(kiln_context *ctx, int m, int n, int k, kiln_gemm_op ta, kiln_gemm_op tb)
{
    check_gemm_batched(ctx, m, n, k, ta, tb, 1);
}

/* NN, TN, NT. */
static const kiln_gemm_op ops[3][2] = {
    {KILN_GEMM_N, KILN_GEMM_N}, {KILN_GEMM_T, KILN_GEMM_N}, {KILN_GEMM_N, KILN_GEMM_T}};

int main(void)
{
    /* CLBlast's GEMM at every shape here (small NN ones would go to kiln's
     * own kernel, checked at the end). */
    clblast_only = 1;
    snprintf(cache, sizeof cache, "/tmp/kiln-test-gemm-tuning-%ld", (long)getpid());
    mkdir(cache, 0700);
    char err[512] = "", first[128] = "", again[128] = "";
    kiln_status st;

    kiln_context *ctx = open_ctx(KILN_GEMM_TUNING_SEARCH, &st, err, sizeof err);
    if (st == KILN_ERROR_NO_DEVICE)
        SKIP_MISSING("no OpenCL device");
    CHECK(st == KILN_OK);
    CHECK(searches > 0);
    parameters(ctx, first, sizeof first);
    printf("searched: %s\n", first);
    CHECK(strncmp(first, "WGD=32 MDIMCD=8", 15) == 0);  /* the first candidate */
    /* On the CPU variant, kiln's own GEMM's cache budget too: one of the
     * six candidates, 256 KiB to 8 MiB, each with B packed where it pays
     * and never packed (said in the description where the search chose
     * never). */
    kiln_device_info info0 = {.struct_size = sizeof info0};
    CHECK_OK(ctx, kiln_context_device_info(ctx, 0, &info0));
    const int own_budget = !info0.gpu_kernels;
    const size_t budget = ctx->devices[0]->gemm_cache_bytes;
    const int pack = ctx->devices[0]->gemm_pack;
    CHECK(!own_budget || (budget_searches == 12 && strstr(first, "(searched)") &&
                          budget >= (256u << 10) && budget <= (8u << 20) &&
                          (budget & (budget - 1)) == 0 && (pack == 0 || pack == 1) &&
                          (strstr(first, ", unpacked (searched)") != NULL) == !pack));
    const int shapes[][3] = {{37, 13, 101}, {128, 64, 300}, {5, 70, 9}};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 3; t++)
            check_gemm(ctx, shapes[i][0], shapes[i][1], shapes[i][2], ops[t][0], ops[t][1]);
    kiln_context_destroy(ctx);

    /* Stored: applied again, no search. */
    searches = budget_searches = 0;
    ctx = open_ctx(KILN_GEMM_TUNING_STORED, &st, err, sizeof err);
    CHECK(st == KILN_OK && searches == 0 && budget_searches == 0);
    parameters(ctx, again, sizeof again);
    CHECK(strcmp(first, again) == 0 && ctx->devices[0]->gemm_cache_bytes == budget &&
          ctx->devices[0]->gemm_pack == pack);
    kiln_context_destroy(ctx);

    /* Off: CLBlast's defaults and kiln's default budget, whatever is stored. */
    const char *defaults = own_budget ? "CLBlast defaults; kiln GEMM cache 1024 KiB (default)"
                                      : "CLBlast defaults";
    ctx = open_ctx(KILN_GEMM_TUNING_OFF, &st, err, sizeof err);
    parameters(ctx, again, sizeof again);
    CHECK(strcmp(again, defaults) == 0);
    kiln_context_destroy(ctx);

    /* A damaged record is not applied (nor an error): CLBlast's, and the
     * budget's. */
    CHECK(damage_records() == 1 + own_budget);
    ctx = open_ctx(KILN_GEMM_TUNING_STORED, &st, err, sizeof err);
    CHECK(st == KILN_OK && searches == 0 && budget_searches == 0);
    parameters(ctx, again, sizeof again);
    CHECK(strcmp(again, defaults) == 0);
    kiln_context_destroy(ctx);

    ctx = open_ctx((kiln_gemm_tuning)7, &st, err, sizeof err);
    CHECK(st == KILN_ERROR_INVALID_ARGUMENT && !ctx && strstr(err, "gemm_tuning 7"));
    setenv("KILN_GEMM_TUNING", "fast", 1);
    ctx = open_ctx(KILN_GEMM_TUNING_STORED, &st, err, sizeof err);
    CHECK(st == KILN_ERROR_INVALID_ARGUMENT && !ctx && strstr(err, "KILN_GEMM_TUNING='fast'"));
    unsetenv("KILN_GEMM_TUNING");

    /* kiln's NN and TN kernels, and NT on a transposed copy of B, at sizes
     * no tile divides. */
    clblast_only = 0;
    ctx = open_ctx(KILN_GEMM_TUNING_OFF, &st, err, sizeof err);
    /* NT with A the smaller (m < n: 3x70x9, 32x5408x64, 20x301x33) runs as
     * C^T = B A^T, its tiles stored transposed, 20 columns of C^T filling
     * one vector of a tile and part of the next. */
    const int own[][3] = {{1, 1, 1}, {3, 70, 9}, {37, 13, 101}, {64, 64, 5408}, {32, 5408, 64},
                          {61, 9, 300}, {301, 99, 577}, {20, 301, 33}};
    const int n_own = (int)(sizeof own / sizeof own[0]);
    for (int i = 0; i < n_own && ctx; i++)
        for (int t = 0; t < 3; t++)
            check_gemm(ctx, own[i][0], own[i][1], own[i][2], ops[t][0], ops[t][1]);
    /* The CPU variant in chunks of k (opencl/blas.c, gemm_choice.c): NN
     * and TN in chunks of unequal length, several products each in its
     * own chunks, and a C so large that its chunk sums would pass the cap
     * (fewer chunks, then). Each keeps its sums on the device. */
    const int chunked[][4] = {{200, 600, 1501, 1}, {300, 100, 3001, 2}, {60, 40, 6001, 2},
                              {1100, 1000, 600, 2}};
    const int counts[] = {1, 1, 3, 1};
    for (int i = 0; i < 4 && ctx; i++) {
        size_t before, after, peak;
        kiln_device_memory(ctx->devices[0], &before, &peak);
        check_gemm_batched(ctx, chunked[i][0], chunked[i][1], chunked[i][2], ops[chunked[i][3] - 1][0],
                           ops[chunked[i][3] - 1][1], counts[i]);
        kiln_device_memory(ctx->devices[0], &after, &peak);
        CHECK(i > 0 || after >= before + 2 * 200 * 600 * sizeof(float));
    }
    /* B packed in panels of 32 columns (65 row tiles read a B of 2.9 MB
     * whose rows lie 4120 bytes apart; 1030 columns leave the last panel 6
     * wide): NN a panel's tiles one after another over the whole of k
     * (blas.c's panels_first; 261 rows leave the last tile 5 high), TN in
     * chunks. */
    check_gemm(ctx, 520, 1030, 700, KILN_GEMM_N, KILN_GEMM_N);
    check_gemm(ctx, 261, 1030, 1100, KILN_GEMM_N, KILN_GEMM_N);
    check_gemm(ctx, 520, 1030, 700, KILN_GEMM_T, KILN_GEMM_N);
    /* A small enough to read again, B not: a column's tiles one after
     * another (kiln_gemm_rows_first), NN and NT. */
    check_gemm(ctx, 37, 600, 1501, KILN_GEMM_N, KILN_GEMM_N);
    check_gemm(ctx, 45, 700, 1301, KILN_GEMM_N, KILN_GEMM_T);
    /* The smallest and largest budgets a search may choose: other chunks,
     * and rows first or not. */
    const size_t budgets[] = {256u << 10, 8u << 20};
    for (int i = 0; i < 2 && ctx; i++) {
        ctx->devices[0]->gemm_cache_bytes = budgets[i];
        check_gemm(ctx, 300, 600, 1501, KILN_GEMM_N, KILN_GEMM_N);
        check_gemm(ctx, 300, 100, 3001, KILN_GEMM_T, KILN_GEMM_N);
        check_gemm(ctx, 37, 600, 1501, KILN_GEMM_N, KILN_GEMM_N);
        check_gemm(ctx, 128, 1000, 64, KILN_GEMM_N, KILN_GEMM_T);
    }
    kiln_context_destroy(ctx);

    /* The same through the GPU variant (64 x 64 blocks in local memory;
     * NT on CLBlast): shapes of one partial block, of many, and k no step
     * divides. */
    setenv("KILN_KERNEL_VARIANT", "gpu", 1);
    ctx = open_ctx(KILN_GEMM_TUNING_OFF, &st, err, sizeof err);
    kiln_device_info info = {.struct_size = sizeof info};
    CHECK(ctx && kiln_context_device_info(ctx, 0, &info) == KILN_OK && info.gpu_kernels);
    for (int i = 0; i < n_own && ctx; i++)
        for (int t = 0; t < 3; t++)
            check_gemm(ctx, own[i][0], own[i][1], own[i][2], ops[t][0], ops[t][1]);
    kiln_context_destroy(ctx);
    setenv("KILN_KERNEL_VARIANT", "cpu", 1);
    ctx = open_ctx(KILN_GEMM_TUNING_OFF, &st, err, sizeof err);
    CHECK(ctx && kiln_context_device_info(ctx, 0, &info) == KILN_OK && !info.gpu_kernels);
    kiln_context_destroy(ctx);
    setenv("KILN_KERNEL_VARIANT", "fast", 1);
    ctx = open_ctx(KILN_GEMM_TUNING_OFF, &st, err, sizeof err);
    CHECK(st == KILN_ERROR_INVALID_ARGUMENT && !ctx && strstr(err, "KILN_KERNEL_VARIANT='fast'"));
    unsetenv("KILN_KERNEL_VARIANT");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    CHECK(system(cmd) == 0);
    return test_finish("test_gemm_tuning");
}
