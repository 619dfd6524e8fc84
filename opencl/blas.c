#include "opencl/cl_internal.h"

#include <clblast_c.h>
#include <pthread.h>
#include <stdio.h>

/* Two threads that use a CLBlast routine for the first time at once (it
 * compiles and caches its kernels then) can fail with CLBlastUnexpectedError
 * ("basic_string::_M_create"): replicas starting together did. So a shape's
 * first call on a device is serialised; later calls run freely, since on
 * PoCL's basic devices a GEMM computes inside the call and a lock would
 * serialise the devices. It guards CLBlast, not kiln: one of kiln's three
 * process-wide locks, with the first-run lock (runtime/parallel/first_run.c) and the
 * MPI lock (comm/mpi_world.c), each guarding a library shared by the
 * process. */
static pthread_mutex_t clblast_first_use = PTHREAD_MUTEX_INITIALIZER;

static CLBlastTranspose clblast_op(kiln_gemm_op op)
{
    return op == KILN_GEMM_T ? CLBlastTransposeYes : CLBlastTransposeNo;
}

/* 'N' or 'T', for profile names. */
static char op_letter(kiln_gemm_op op)
{
    return op == KILN_GEMM_T ? 'T' : 'N';
}

static uint64_t shape_key(size_t m, size_t n, size_t k, kiln_gemm_op ta, kiln_gemm_op tb)
{
    return ((uint64_t)m * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)n * 0xc2b2ae3d27d4eb4fULL) ^
           ((uint64_t)k * 0x165667b19e3779f9ULL) ^
           (uint64_t)((ta == KILN_GEMM_T) * 2 + (tb == KILN_GEMM_T));
}

static int seen(const kiln_device *dev, uint64_t key)
{
    for (int i = 0; i < dev->n_gemm_seen; i++)
        if (dev->gemm_seen[i] == key)
            return 1;
    return 0;
}

/* The CPU variant packs B in panels of a tile's 32 columns (gemm.cl's
 * kiln_gemm_pack_b_cpu) where B's rows lie a page or more apart (each step
 * of a tile on a page of its own, out of the prefetchers' reach), B does
 * not stay in the core's cache (dev->gemm_cache_bytes), PACK_MIN_ROW_TILES
 * row tiles or more read it, and the copy is at most PACK_MAX_BYTES; not
 * at all where the device's search found it slower (dev->gemm_pack).
 * Measured with bench_gemm on a 2-core AVX-512 machine: 1024^3 (rows 4 KiB
 * apart, 128 row tiles) 10 to 15% faster packed; 392x512x4608 (2 KiB, 49
 * row tiles) no faster, the copy eating what the tiles gained. */
#define PACK_MIN_ROW_BYTES 4096
#define PACK_MIN_ROW_TILES 64
#define PACK_MAX_BYTES ((size_t)64 << 20)

static int packs_b(const kiln_device *dev, size_t m, size_t n, size_t k, size_t ldb,
                   size_t count)
{
    const size_t bytes = k * ((n + 31) / 32 * 32) * sizeof(float);
    return !dev->gpu_kernels && dev->gemm_pack && count == 1 &&
           ldb * sizeof(float) >= PACK_MIN_ROW_BYTES &&
           (m + 7) / 8 >= PACK_MIN_ROW_TILES && k * n * sizeof(float) > dev->gemm_cache_bytes &&
           bytes <= PACK_MAX_BYTES;
}

/* GotoBLAS's order for a large NN product on the CPU variant: where
 * neither operand stays in the core's cache but a panel of B (k rows of 32
 * columns) does, B is packed and the tiles of one panel run one after
 * another (rows first), the panel staying in cache while A streams past
 * it. The chunks of k stay those packs_b alone gives (B packed where its
 * rows lie pages apart, else the budget's), and so do the sums: one sum
 * over the whole of k ran as fast but moved the rounding (392x512x4608
 * 2.6e-6 of the largest value from OpenBLAS, against 5.9e-7 in chunks),
 * which vgg16's parity against PyTorch (test_zoo) failed. With fewer than
 * PANEL_MIN_ROWS rows of A the copy of B costs more than the order saves.
 * Measured with bench_gemm on a 2-core AVX-512 machine, against the
 * chunks as packs_b left them: 392x512x4608 0.93 to
 * 1.02 of OpenBLAS, 1568x256x2304 0.95 to 1.06, 3136x512x4608 0.73 to
 * 1.02, 1024^3 (one chunk, packed as before) 0.95-1.00 to 1.08; slower
 * where B fits the cache (6272x128x1152 in one chunk: 1.42 to 1.18), with
 * few rows (128x64x5408: 1.8 to 1.3) and for TN (576x64x25088: 1.65 to
 * 0.57), which keep their order. */
#define PANEL_MIN_ROWS 256

static int panels_first(const kiln_device *dev, kiln_gemm_op trans_a, size_t m, size_t n,
                        size_t k, size_t count)
{
    const size_t cache = dev->gemm_cache_bytes;
    return !dev->gpu_kernels && dev->gemm_pack && trans_a == KILN_GEMM_N && count == 1 &&
           m >= PANEL_MIN_ROWS && k * n * sizeof(float) > cache &&
           m * k * sizeof(float) > cache && k * 32 * sizeof(float) <= cache &&
           k * ((n + 31) / 32 * 32) * sizeof(float) <= PACK_MAX_BYTES;
}

/* The sums of a GEMM's chunks (gemm.cl) take at most this much device
 * memory: past it, fewer and longer chunks. */
#define PARTIALS_MAX_BYTES ((size_t)16 << 20)

/* B packed in panels (packs_b) streams from the outer cache as a tile
 * reads it, so its chunks may be longer: measured at 1024^3, chunks of 4
 * times the budget ran 5 to 10% faster packed than chunks of the budget. */
#define PACKED_BUDGET_FACTOR 4

static size_t chunk_count(const kiln_device *dev, int packed, kiln_gemm_op trans_a, size_t m,
                          size_t n, size_t k, size_t count, size_t *chunk_k)
{
    *chunk_k = k;
    if (dev->gpu_kernels || k == 0)
        return 1;
    const size_t budget = dev->gemm_cache_bytes * (packed ? PACKED_BUDGET_FACTOR : 1);
    size_t chunks = k / kiln_gemm_chunk_steps(budget, trans_a, m, n, k);
    const size_t chunk_bytes = m * n * count * sizeof(float);
    if (chunks * chunk_bytes > PARTIALS_MAX_BYTES)
        chunks = PARTIALS_MAX_BYTES / chunk_bytes;
    if (chunks <= 1)
        return 1;
    *chunk_k = (k + chunks - 1) / chunks;
    return (k + *chunk_k - 1) / *chunk_k;
}

/* Grows one of the device's GEMM buffers to at least `bytes`. A launch
 * still queued on the old one keeps it alive (OpenCL frees a memory object
 * when its commands finish). */
static kiln_status reserve(kiln_device *dev, kiln_buffer **buf, size_t bytes, const char *what)
{
    if (bytes <= (*buf ? kiln_buffer_bytes(*buf) : 0))
        return KILN_OK;
    kiln_buffer_destroy(*buf);
    *buf = NULL;
    return kiln_buffer_create(dev, bytes, what, buf);
}

/* kiln's own kernels, with dev->gemm_lock held: the device's buffers of
 * chunk sums and transposed operands are the GEMM's from its first launch
 * to its last. */
static kiln_status own_gemm_locked(kiln_device *dev, kiln_gemm_op trans_a, size_t m, size_t n,
                                   size_t k, float alpha, const kiln_buffer *a, size_t a_offset,
                                   size_t lda, size_t a_stride, const kiln_buffer *b,
                                   size_t b_offset, size_t ldb, size_t b_stride, float beta,
                                   kiln_buffer *c, size_t c_offset, size_t ldc, size_t c_stride,
                                   size_t count)
{
    size_t chunk_k;
    const int panel_order = panels_first(dev, trans_a, m, n, k, count);
    const int pages_apart = packs_b(dev, m, n, k, ldb, count);
    const int packed = panel_order || pages_apart;
    /* The chunks, and so the sums, packs_b alone gives (panels_first). */
    const size_t chunks = chunk_count(dev, pages_apart, trans_a, m, n, k, count, &chunk_k);
    const int rows_first = panel_order || (!dev->gpu_kernels &&
                                           kiln_gemm_rows_first(dev->gemm_cache_bytes, m, n, k));
    kiln_status st = KILN_OK;
    if (chunks > 1)
        st = reserve(dev, &dev->gemm_partials, chunks * m * n * count * sizeof(float),
                     "a GEMM's chunk sums");
    const size_t panels = (n + 31) / 32;
    if (st == KILN_OK && packed) {
        st = reserve(dev, &dev->gemm_packed, panels * 32 * k * sizeof(float),
                     "a GEMM's packed operand");
        const size_t size[2] = {panels, k};
        if (st == KILN_OK)
            st = kiln_run(dev, "gemm", "kiln_gemm_pack_b_cpu", 2, size,
                          KILN_ARGS(kiln_arg_int((int64_t)k), kiln_arg_int((int64_t)n),
                                    kiln_arg_buffer(b), kiln_arg_int((int64_t)b_offset),
                                    kiln_arg_int((int64_t)ldb), kiln_arg_buffer(dev->gemm_packed)));
        b = dev->gemm_packed;
        b_offset = 0;
        ldb = 32;
    }
    /* A buffer argument is never NULL: with one chunk C stands in. */
    const kiln_buffer *partials = chunks > 1 ? dev->gemm_partials : c;
    kiln_args args = KILN_ARGS(kiln_arg_int((int64_t)m), kiln_arg_int((int64_t)n),
                               kiln_arg_int((int64_t)k), kiln_arg_float(alpha), kiln_arg_buffer(a),
                               kiln_arg_int((int64_t)a_offset), kiln_arg_int((int64_t)lda),
                               kiln_arg_buffer(b), kiln_arg_int((int64_t)b_offset),
                               kiln_arg_int((int64_t)ldb), kiln_arg_float(beta), kiln_arg_buffer(c),
                               kiln_arg_int((int64_t)c_offset), kiln_arg_int((int64_t)ldc),
                               kiln_arg_int((int64_t)a_stride), kiln_arg_int((int64_t)b_stride),
                               kiln_arg_int((int64_t)c_stride), kiln_arg_int((int64_t)chunk_k),
                               kiln_arg_int((int64_t)chunks), kiln_arg_int(rows_first),
                               kiln_arg_buffer(partials), kiln_arg_int(packed ? (int64_t)k : 0));
    /* An 8 x 32 tile a work-item over (column tiles, row tiles, products x
     * chunks), or 16 x 16 items per 64 x 64 block of C (gemm.cl). */
    const size_t column_tiles = (n + 31) / 32, row_tiles = (m + 7) / 8;
    const kiln_range cpu = {.dims = 3,
                            .size = {rows_first ? row_tiles : column_tiles,
                                     rows_first ? column_tiles : row_tiles, count * chunks}};
    const kiln_range gpu = {.dims = 3, .size = {(n + 63) / 64 * 16, (m + 63) / 64 * 16, count},
                            .local = {16, 16, 1}};
    if (st == KILN_OK)
        st = kiln_run_variant(dev, "gemm", trans_a == KILN_GEMM_T ? "kiln_gemm_tn" : "kiln_gemm_nn",
                              &cpu, &gpu, args);
    if (st == KILN_OK && chunks > 1) {
        const size_t size[3] = {(n + 7) / 8, m, count};
        st = kiln_run(dev, "gemm", "kiln_gemm_sum_chunks", 3, size,
                      KILN_ARGS(kiln_arg_int((int64_t)m), kiln_arg_int((int64_t)n),
                                kiln_arg_int((int64_t)chunks), kiln_arg_float(alpha),
                                kiln_arg_buffer(dev->gemm_partials), kiln_arg_float(beta),
                                kiln_arg_buffer(c), kiln_arg_int((int64_t)c_offset),
                                kiln_arg_int((int64_t)ldc), kiln_arg_int((int64_t)c_stride)));
    }
    return st;
}

static kiln_status own_gemm(kiln_device *dev, kiln_gemm_op trans_a, size_t m, size_t n, size_t k,
                            float alpha, const kiln_buffer *a, size_t a_offset, size_t lda,
                            size_t a_stride, const kiln_buffer *b, size_t b_offset, size_t ldb,
                            size_t b_stride, float beta, kiln_buffer *c, size_t c_offset,
                            size_t ldc, size_t c_stride, size_t count)
{
    pthread_mutex_lock(&dev->gemm_lock);
    const kiln_status st = own_gemm_locked(dev, trans_a, m, n, k, alpha, a, a_offset, lda,
                                           a_stride, b, b_offset, ldb, b_stride, beta, c,
                                           c_offset, ldc, c_stride, count);
    pthread_mutex_unlock(&dev->gemm_lock);
    return st;
}

/* The CPU variant computes C = alpha A B^T + beta C as C^T = B A^T where A
 * is the smaller operand, its rows packed (lda == k) and k one chunk: A
 * transposed (m x k floats copied, where the NN route copies B's n x k)
 * and kiln_gemm_nt_cpu storing C^T's tiles as C's rows (gemm.cl). */
static int transposed_product(const kiln_device *dev, size_t m, size_t n, size_t k, size_t lda)
{
    size_t chunk_k;
    return !dev->gpu_kernels && m < n && lda == k &&
           chunk_count(dev, 0, KILN_GEMM_N, n, m, k, 1, &chunk_k) == 1;
}

/* C^T = B A^T on the CPU variant, dev->gemm_lock held, A already
 * transposed into dev->gemm_transposed (k x m). */
static kiln_status own_gemm_transposed_locked(kiln_device *dev, size_t m, size_t n, size_t k,
                                              float alpha, const kiln_buffer *b,
                                              size_t b_offset, float beta, kiln_buffer *c,
                                              size_t c_offset, size_t ldc)
{
    /* C^T's tiles over (row tiles, column tiles): neighbouring row tiles
     * store the two halves of the same cache lines of C, and a work-group's
     * items run on one core (measured: 10 to 30% faster than columns
     * first at 128x5408x64). C^T's m and n are the caller's n and m. */
    const size_t size[3] = {(n + 7) / 8, (m + 31) / 32, 1};
    return kiln_run(
        dev, "gemm", "kiln_gemm_nt_cpu", 3, size,
        KILN_ARGS(kiln_arg_int((int64_t)n), kiln_arg_int((int64_t)m), kiln_arg_int((int64_t)k),
                  kiln_arg_float(alpha), kiln_arg_buffer(b), kiln_arg_int((int64_t)b_offset),
                  kiln_arg_int((int64_t)k), kiln_arg_buffer(dev->gemm_transposed),
                  kiln_arg_int(0), kiln_arg_int((int64_t)m), kiln_arg_float(beta),
                  kiln_arg_buffer(c), kiln_arg_int((int64_t)c_offset),
                  kiln_arg_int((int64_t)ldc), kiln_arg_int(0), kiln_arg_int(0), kiln_arg_int(0),
                  kiln_arg_int((int64_t)k), kiln_arg_int(1), kiln_arg_int(1),
                  kiln_arg_buffer(c), kiln_arg_int(0)));
}

/* C = alpha A B^T + beta C with B (n x k) stored whole: A transposed into
 * the device's buffer where transposed_product says so, then
 * kiln_gemm_nt_cpu; otherwise B transposed, then kiln's NN kernel, which
 * on a CPU runs several times as fast as CLBlast's NT
 * (docs/performance.md). */
static kiln_status own_gemm_nt(kiln_device *dev, size_t m, size_t n, size_t k, float alpha,
                               const kiln_buffer *a, size_t a_offset, size_t lda,
                               const kiln_buffer *b, size_t b_offset, float beta, kiln_buffer *c,
                               size_t c_offset, size_t ldc)
{
    const int small_a = transposed_product(dev, m, n, k, lda);
    pthread_mutex_lock(&dev->gemm_lock);
    kiln_status st = reserve(dev, &dev->gemm_transposed, k * (small_a ? m : n) * sizeof(float),
                             "a GEMM's transposed operand");
    if (st == KILN_OK && small_a) {
        st = kiln_transpose(dev, a, a_offset, m, k, dev->gemm_transposed);
        if (st == KILN_OK)
            st = own_gemm_transposed_locked(dev, m, n, k, alpha, b, b_offset, beta, c, c_offset,
                                            ldc);
    } else if (st == KILN_OK) {
        st = kiln_transpose(dev, b, b_offset, n, k, dev->gemm_transposed);
        if (st == KILN_OK)
            st = own_gemm_locked(dev, KILN_GEMM_N, m, n, k, alpha, a, a_offset, lda, 0,
                                 dev->gemm_transposed, 0, n, 0, beta, c, c_offset, ldc, 0, 1);
    }
    pthread_mutex_unlock(&dev->gemm_lock);
    return st;
}

kiln_status kiln_gemm(kiln_device *dev, kiln_gemm_op trans_a, kiln_gemm_op trans_b, size_t m,
                      size_t n, size_t k, float alpha, const kiln_buffer *a, size_t a_offset,
                      size_t lda, const kiln_buffer *b, size_t b_offset, size_t ldb,
                      float beta, kiln_buffer *c, size_t c_offset, size_t ldc)
{
    return kiln_gemm_batched(dev, trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, 0, b,
                             b_offset, ldb, 0, beta, c, c_offset, ldc, 0, 1);
}

kiln_status kiln_gemm_batched(kiln_device *dev, kiln_gemm_op trans_a, kiln_gemm_op trans_b,
                              size_t m, size_t n, size_t k, float alpha, const kiln_buffer *a,
                              size_t a_offset, size_t lda, size_t a_stride,
                              const kiln_buffer *b, size_t b_offset, size_t ldb,
                              size_t b_stride, float beta, kiln_buffer *c, size_t c_offset,
                              size_t ldc, size_t c_stride, size_t count)
{
    if (m == 0 || n == 0 || count == 0)
        return KILN_OK;
    const int own =
        kiln_gemm_use_own_kernel(dev->gpu_kernels, dev->gemm_tuned, trans_a, trans_b, m, n, k);
    /* A transposed B is copied whole: one product, B's rows packed. */
    if (own && trans_b == KILN_GEMM_T && trans_a == KILN_GEMM_N && count == 1 && ldb == k)
        return own_gemm_nt(dev, m, n, k, alpha, a, a_offset, lda, b, b_offset, beta, c, c_offset,
                           ldc);
    if (own && trans_b == KILN_GEMM_N)
        return own_gemm(dev, trans_a, m, n, k, alpha, a, a_offset, lda, a_stride, b, b_offset,
                        ldb, b_stride, beta, c, c_offset, ldc, c_stride, count);
    cl_event *event = NULL;
    /* CLBlast's batched routine builds kernels of its own: a key of its own. */
    const uint64_t key = shape_key(m, n, k, trans_a, trans_b) ^ (count > 1 ? 4 : 0);
    pthread_mutex_lock(&dev->lock);
    if (dev->profile) {
        char name[64];
        snprintf(name, sizeof name, "gemm %zux%zux%zu %c%c%s", m, n, k, op_letter(trans_a),
                 op_letter(trans_b), count > 1 ? " batched" : "");
        event = kiln_profile_event(dev, name);
    }
    const int first = !seen(dev, key);
    /* A profiled GEMM writes its event into the profile's pending list,
     * which another thread's launch may flush: profiling holds the lock. */
    if (!event)
        pthread_mutex_unlock(&dev->lock);
    if (first)
        pthread_mutex_lock(&clblast_first_use);
    CLBlastStatusCode s =
        count > 1 ? CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, clblast_op(trans_a),
                                               clblast_op(trans_b), m, n, k, alpha, a->mem,
                                               a_offset, lda, a_stride, b->mem, b_offset, ldb,
                                               b_stride, beta, c->mem, c_offset, ldc, c_stride,
                                               count, &dev->queue, event)
                  : CLBlastSgemm(CLBlastLayoutRowMajor, clblast_op(trans_a), clblast_op(trans_b),
                                 m, n, k, alpha, a->mem, a_offset, lda, b->mem, b_offset, ldb,
                                 beta, c->mem, c_offset, ldc, &dev->queue, event);
    if (first && !event)
        pthread_mutex_lock(&dev->lock);
    if (first && s == CLBlastSuccess && !seen(dev, key) &&
        dev->n_gemm_seen < (int)(sizeof dev->gemm_seen / 8))
        dev->gemm_seen[dev->n_gemm_seen++] = key;
    if (first || event)
        pthread_mutex_unlock(&dev->lock);
    if (first)
        pthread_mutex_unlock(&clblast_first_use);
    if (s != CLBlastSuccess)
        return kiln_fail(dev->host,
                         s == CLBlastOpenCLOutOfResources || s == CLBlastTempBufferAllocFailure
                              ? KILN_ERROR_OUT_OF_MEMORY
                              : KILN_ERROR_DEVICE,
                         "CLBlastSgemm%s(%zux%zux%zu, trans %d%d) failed on %s: %s (%d)",
                         count > 1 ? "StridedBatched" : "", m, n, k, trans_a == KILN_GEMM_T,
                         trans_b == KILN_GEMM_T, dev->label,
                         kiln_cl_error_name(s), (int)s);
    return KILN_OK;
}

kiln_status kiln_transpose(kiln_device *dev, const kiln_buffer *src, size_t src_offset,
                           size_t rows, size_t cols, kiln_buffer *dst)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_int((int64_t)src_offset),
                            kiln_arg_int((int64_t)rows), kiln_arg_int((int64_t)cols),
                            kiln_arg_buffer(dst));
    /* Blocks of 8 x 8 a work-item, or of 16 x 16 a group through local memory. */
    const kiln_range cpu = {.dims = 2, .size = {(cols + 7) / 8, (rows + 7) / 8}};
    const kiln_range gpu = {.dims = 2, .size = {cols, rows}, .local = {16, 16}};
    return kiln_run_variant(dev, "transpose", "kiln_transpose_matrix", &cpu, &gpu, a);
}
