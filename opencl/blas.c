#include "opencl/cl_internal.h"

#include <clblast_c.h>
#include <stdio.h>

kiln_status kiln_gemm(kiln_device *dev, int trans_a, int trans_b, size_t m, size_t n,
                      size_t k, float alpha, const kiln_buffer *a, size_t a_offset,
                      size_t lda, const kiln_buffer *b, size_t b_offset, size_t ldb,
                      float beta, kiln_buffer *c, size_t c_offset, size_t ldc)
{
    if (m == 0 || n == 0)
        return KILN_OK;
    cl_event *event = NULL;
    if (dev->profile) {
        char name[64];
        snprintf(name, sizeof name, "gemm %zux%zux%zu %c%c", m, n, k, trans_a ? 'T' : 'N',
                 trans_b ? 'T' : 'N');
        event = kiln_profile_event(dev, name);
    }
    CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor,
                                       trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
                                       trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, m, n,
                                       k, alpha, a->mem, a_offset, lda, b->mem, b_offset, ldb,
                                       beta, c->mem, c_offset, ldc, &dev->queue, event);
    if (s != CLBlastSuccess)
        return kiln_error(dev->ctx,
                          s == CLBlastOpenCLOutOfResources || s == CLBlastTempBufferAllocFailure
                              ? KILN_ERROR_OUT_OF_MEMORY
                              : KILN_ERROR_DEVICE,
                          "CLBlastSgemm(%zux%zux%zu, trans %d%d) failed on %s: %s (%d)", m, n,
                          k, trans_a, trans_b, dev->label, kiln_cl_error_name(s), (int)s);
    return KILN_OK;
}
