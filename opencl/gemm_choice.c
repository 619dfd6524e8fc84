/* The GEMM choices, each in a function of its own outside the file that
 * calls it: the tests replace them at link time (-Wl,--wrap=...), which
 * reaches calls between object files only, to run every path on every
 * shape and to keep the tuning search short. */
#include "opencl/cl_internal.h"

/* On a GPU (the GPU variant), GEMMs with B as stored go to kiln's own
 * kernels (gemm.cl) when B fits in this many bytes, which its caches
 * hold, and plain (NN) ones also when A has at most THIN_ROWS rows; the
 * rest, and every product with B transposed, go to CLBlast, whose
 * blocking wins on large operands. On a CPU (the CPU variant) kiln's own
 * kernels take every GEMM, CLBlast's parameters searched or not, NT ones
 * on a transposed copy of B (blas.c): with searched parameters CLBlast ran
 * 1024^3 at 34 GFLOPS to their 142, the seed ResNet's 392x512x4608 at 30
 * to 122 and the seed CNN's 9x32x86528 weight gradient at 1.8 to 58
 * (bench_gemm, docs/performance.md). Batched or strided NT products stay
 * on CLBlast (blas.c). */
#define OWN_MAX_B_BYTES (2u << 20)
#define THIN_ROWS 64

int kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                             kiln_gemm_op trans_b, size_t m, size_t n, size_t k)
{
    (void)gemm_tuned;
    if (!gpu_kernels)
        return trans_b == KILN_GEMM_N || trans_a == KILN_GEMM_N;
    if (trans_b != KILN_GEMM_N)
        return 0;
    const int b_fits = k * n * sizeof(float) <= OWN_MAX_B_BYTES;
    return b_fits || (trans_a == KILN_GEMM_N && m <= THIN_ROWS);
}

int kiln_gemm_tuning_candidates(int available)
{
    return available;
}

/* The CPU variant's column tiles of one row tile run one after another,
 * reading that row tile's rows of A again and B once each: where B is too
 * large to stay in cache and A is not, the tiles of one column run one
 * after another instead (rows_first), reading the column's rows of B
 * again and A once each. Where neither fits, the GEMM runs in chunks of k.
 * The CPU variant's GEMMs run in chunks of k (gemm.cl) so that the rows of
 * A and B a chunk's tiles share stay in the core's cache between tiles:
 * about cache_bytes of them (KILN_GEMM_CACHE_BYTES, or what the device's
 * search found: gemm_cache_search.c). An NN tile reads 8 rows of A along
 * k, used again by the next tile, while every row tile reads the chunk's
 * rows of B again: those are what must fit. A TN tile reads 8 values of
 * each row of A, a part of a cache line whose rest the next row tile
 * reads: the chunk's rows of both. Chunks shorter than MIN_CHUNK steps
 * cost more in sums than they save. */
#define MIN_CHUNK 128

int kiln_gemm_rows_first(size_t cache_bytes, size_t m, size_t n, size_t k)
{
    return k * n * sizeof(float) > cache_bytes && m * k * sizeof(float) <= cache_bytes;
}

size_t kiln_gemm_chunk_steps(size_t cache_bytes, kiln_gemm_op trans_a, size_t m, size_t n,
                             size_t k)
{
    if (kiln_gemm_rows_first(cache_bytes, m, n, k))
        return k;
    const size_t row_bytes = (trans_a == KILN_GEMM_T ? m + n : n) * sizeof(float);
    if (k * row_bytes <= cache_bytes)
        return k;
    const size_t steps = cache_bytes / row_bytes;
    return steps > MIN_CHUNK ? steps : MIN_CHUNK;
}
