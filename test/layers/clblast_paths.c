/* Linked into the *_clblast tests with -Wl,--wrap for the four choices:
 * every convolution, small enough for the direct kernels, 3x3 enough for
 * Winograd's, depthwise, or none of these, goes through im2col + GEMM (a
 * GEMM per group), and every GEMM, even one kiln's own kernel would take,
 * through CLBlast. 1x1 stride-1 convolutions keep their own path
 * (conv2d_pointwise.c), so its GEMMs, which read and write the layer's
 * buffers at a column offset and a row stride, run through CLBlast here. */
#include "layers/conv2d.h"

int32_t __wrap_kiln_conv2d_use_direct(const conv2d_config *c);
int32_t __wrap_kiln_conv2d_use_winograd(const conv2d_config *c);
int32_t __wrap_kiln_conv2d_use_depthwise(const conv2d_config *c);
int __wrap_kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                                    kiln_gemm_op trans_b, size_t m, size_t n, size_t k);

int32_t __wrap_kiln_conv2d_use_direct(const conv2d_config *c)
{
    (void)c;
    return 0;
}

int32_t __wrap_kiln_conv2d_use_winograd(const conv2d_config *c)
{
    (void)c;
    return 0;
}

int32_t __wrap_kiln_conv2d_use_depthwise(const conv2d_config *c)
{
    (void)c;
    return 0;
}

int __wrap_kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                                    kiln_gemm_op trans_b, size_t m, size_t n, size_t k)
{
    (void)gpu_kernels;
    (void)gemm_tuned;
    (void)trans_a;
    (void)trans_b;
    (void)m;
    (void)n;
    (void)k;
    return 0;
}
