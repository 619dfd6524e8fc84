/* Conv2D's 1x1 stride-1 unpadded convolutions (MobileNet's and EfficientNet's
 * expansions and projections, ResNet's bottleneck ends): in NHWC the input
 * already is the GEMM's left operand, a row of C channels per pixel, so
 * forward, weight gradient and input gradient are each a GEMM per group,
 * the groups in one batched launch, on the layer's own buffers, with no
 * im2col matrix and no col2im. */
#include "layers/conv2d.h"

int32_t kiln_conv2d_use_pointwise(const conv2d_config *c)
{
    return c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 && !c->pad_top &&
           !c->pad_left && !c->pad_bottom && !c->pad_right && c->oh == c->h && c->ow == c->w;
}

kiln_status kiln_conv2d_pointwise_prepare(const conv2d_config *c, conv2d_replica *r,
                                          kiln_device *dev)
{
    return kiln_buffer_create(dev, (size_t)(c->c / c->groups) * (size_t)c->filters *
                                       sizeof(float),
                              "a transposed conv2d kernel", &r->kernel_t);
}

/* Group g reads its cg channels of each input row (lda C) and writes its
 * fg filters of each output row (ldc F); the kernel (1, 1, cg, F) is cg
 * rows of F. */
kiln_status kiln_conv2d_pointwise_forward(const conv2d_config *c, const kiln_step *s)
{
    const size_t m = kiln_conv2d_out_pixels(c, s->batch), f = (size_t)c->filters;
    const size_t ch = (size_t)c->c, cg = ch / (size_t)c->groups, fg = f / (size_t)c->groups;
    return kiln_gemm_batched(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, fg, cg, 1.0f, s->in[0], 0, ch,
                             cg, s->params, s->param_offset[0], f, fg, 0.0f, s->out, 0, f, fg,
                             (size_t)c->groups);
}

kiln_status kiln_conv2d_pointwise_backward(const conv2d_config *c, conv2d_replica *r,
                                           const kiln_step *s)
{
    const size_t m = kiln_conv2d_out_pixels(c, s->batch), f = (size_t)c->filters;
    const size_t ch = (size_t)c->c, cg = ch / (size_t)c->groups, fg = f / (size_t)c->groups;
    kiln_status st = KILN_OK;
    /* dW = x^T dy per group; none for a frozen layer. */
    if (!s->frozen)
        st = kiln_gemm_batched(s->dev, KILN_GEMM_T, KILN_GEMM_N, cg, fg, m, 1.0f, s->in[0], 0,
                               ch, cg, s->d_out, 0, f, fg, 0.0f, s->grads, s->param_offset[0],
                               f, fg, (size_t)c->groups);
    if (st == KILN_OK && c->use_bias && !s->frozen)
        st = kiln_column_sum(s->dev, s->d_out, m, f, s->grads, s->param_offset[1], 0);
    if (st != KILN_OK || !s->d_in[0])
        return st;
    /* dx = dy W^T per group, written (or, in a residual block, added:
     * beta 1) straight into the input gradient; a plain GEMM on W^T
     * (kiln_transpose says why), whose rows group g's filters are. */
    st = kiln_transpose(s->dev, s->params, s->param_offset[0], cg, f, r->kernel_t);
    const float beta = s->d_in_accumulate[0] ? 1.0f : 0.0f;
    if (st == KILN_OK)
        st = kiln_gemm_batched(s->dev, KILN_GEMM_N, KILN_GEMM_N, m, cg, fg, 1.0f, s->d_out, 0, f,
                               fg, r->kernel_t, 0, cg, fg * cg, beta, s->d_in[0], 0, ch, cg,
                               (size_t)c->groups);
    return st;
}
