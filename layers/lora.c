/* LoRA's GEMMs on one adapted projection (layers/lora.h says the layout). */
#include "layers/lora.h"

/* t = x A: (rows, in) times A read as (in, groups x rank). */
static kiln_status project(const kiln_step *s, const kiln_lora_gemm *l, const kiln_buffer *x,
                           size_t rows, kiln_buffer *t)
{
    const size_t cols = l->groups * l->rank;
    return kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, rows, cols, l->in, 1.0f, x, 0, l->in,
                     s->params, l->a_at, cols, 0.0f, t, 0, cols);
}

kiln_status kiln_lora_forward(const kiln_step *s, const kiln_lora_gemm *l, const kiln_buffer *x,
                              size_t rows, kiln_buffer *t, kiln_buffer *y)
{
    kiln_status st = project(s, l, x, rows, t);
    if (st == KILN_OK)
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, rows * l->groups, l->last, l->rank,
                       l->scale, t, 0, l->rank, s->params, l->b_at, l->last, 1.0f, y, 0,
                       l->last);
    return st;
}

kiln_status kiln_lora_backward(const kiln_step *s, const kiln_lora_gemm *l,
                               const kiln_buffer *x, size_t rows, const kiln_buffer *dy,
                               kiln_buffer *t, kiln_buffer *dt)
{
    const size_t n = rows * l->groups, r = l->rank, cols = l->groups * l->rank;
    if (s->frozen)   /* a frozen layer's adapters get no gradient; dx needs dy B^T */
        return kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_T, n, r, l->last, 1.0f, dy, 0, l->last,
                         s->params, l->b_at, l->last, 0.0f, dt, 0, r);
    kiln_status st = project(s, l, x, rows, t);
    if (st == KILN_OK)
        st = kiln_gemm(s->dev, KILN_GEMM_T, KILN_GEMM_N, r, l->last, n, l->scale, t, 0, r, dy,
                       0, l->last, 0.0f, s->grads, l->b_at, l->last);
    if (st == KILN_OK)
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_T, n, r, l->last, 1.0f, dy, 0, l->last,
                       s->params, l->b_at, l->last, 0.0f, dt, 0, r);
    if (st == KILN_OK)
        st = kiln_gemm(s->dev, KILN_GEMM_T, KILN_GEMM_N, l->in, cols, rows, l->scale, x, 0,
                       l->in, dt, 0, cols, 0.0f, s->grads, l->a_at, cols);
    return st;
}

kiln_status kiln_lora_input_gradient(const kiln_step *s, const kiln_lora_gemm *l,
                                     const kiln_buffer *dt, size_t rows, kiln_buffer *dx)
{
    const size_t cols = l->groups * l->rank;
    return kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_T, rows, l->in, cols, l->scale, dt, 0, cols,
                     s->params, l->a_at, cols, 1.0f, dx, 0, l->in);
}

void kiln_lora_merge(const kiln_lora_gemm *l, float *kernel, const float *a, const float *b)
{
    const size_t rows = l->in * l->groups;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < l->last; j++) {
            double sum = 0.0;
            for (size_t k = 0; k < l->rank; k++)
                sum += (double)a[i * l->rank + k] * (double)b[k * l->last + j];
            kernel[i * l->last + j] += (float)((double)l->scale * sum);
        }
}

uint64_t kiln_lora_flops(const kiln_lora_gemm *l)
{
    return (uint64_t)l->rank * (uint64_t)l->groups * (uint64_t)(l->in + l->last);
}
