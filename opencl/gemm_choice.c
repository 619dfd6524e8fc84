/* The GEMM choices, each in a function of its own outside the file that
 * calls it: the tests replace them at link time (-Wl,--wrap=...), which
 * reaches calls between object files only, to run every path on every
 * shape and to keep the tuning search short. */
#include "opencl/cl_internal.h"

/* GEMMs with B as stored go to kiln's own kernels (gemm.cl) when B fits
 * in this many bytes, which a CPU's L2 or a GPU's caches hold, and plain
 * (NN) ones also when A has at most THIN_ROWS rows. The rest go to CLBlast,
 * whose blocking wins on large operands once its parameters are searched
 * for the device. On a CPU (the CPU variant) whose CLBlast runs its
 * defaults, kiln's own kernels take every GEMM with B as stored: with their
 * 4 x 16 tiles they run the seed ResNet at 224 x 224 about twice as fast
 * as default CLBlast does, and about 5% behind searched CLBlast (docs/benchmarks.md,
 * "what made kiln faster"). */
#define OWN_MAX_B_BYTES (2u << 20)
#define THIN_ROWS 64

int kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                             kiln_gemm_op trans_b, size_t m, size_t n, size_t k)
{
    if (trans_b != KILN_GEMM_N)
        return 0;
    if (!gpu_kernels && !gemm_tuned)
        return 1;
    const int b_fits = k * n * sizeof(float) <= OWN_MAX_B_BYTES;
    return b_fits || (trans_a == KILN_GEMM_N && m <= THIN_ROWS);
}

int kiln_gemm_tuning_candidates(int available)
{
    return available;
}
