/* Private: LoRA's arithmetic on one adapted projection, which the layers
 * with adapters (Dense, MultiHeadAttention) share. The kernel W is read as
 * an (in x groups, last) matrix: Dense's (in, units) with one group, an
 * attention projection's (in, heads, dim) with a group per head, as Keras
 * 3's EinsumDense.enable_lora lays its adapters out: A (in, groups, rank),
 * B (rank, last), and W + (alpha/r) A B, the product over A's last axis.
 * x (rows, in) times A is then one GEMM giving (rows, groups x rank), and
 * that, read as (rows x groups, rank), times B another. */
#ifndef KILN_LAYERS_LORA_H
#define KILN_LAYERS_LORA_H

#include "layers/layer.h"

typedef struct kiln_lora_gemm {
    size_t in, groups, rank, last;
    float scale;           /* alpha / rank */
    size_t a_at, b_at;     /* A's and B's offsets in the parameters and gradients */
} kiln_lora_gemm;

/* y += scale (x A) B, leaving x A in t (rows x groups x rank floats). */
kiln_status kiln_lora_forward(const kiln_step *s, const kiln_lora_gemm *l, const kiln_buffer *x,
                              size_t rows, kiln_buffer *t, kiln_buffer *y);

/* The adapters' gradients from dy: dB = scale (x A)^T dy, dA = scale x^T
 * (dy B^T); leaves dy B^T in dt for kiln_lora_input_gradient (a frozen
 * step computes only that, writing no gradient). x A is
 * recomputed into t rather than kept from forward: a pipeline runs several
 * micro-batches' forwards before their backwards. */
kiln_status kiln_lora_backward(const kiln_step *s, const kiln_lora_gemm *l,
                               const kiln_buffer *x, size_t rows, const kiln_buffer *dy,
                               kiln_buffer *t, kiln_buffer *dt);

/* dx += scale (dy B^T) A^T, from the dt kiln_lora_backward left. */
kiln_status kiln_lora_input_gradient(const kiln_step *s, const kiln_lora_gemm *l,
                                     const kiln_buffer *dt, size_t rows, kiln_buffer *dx);

/* kernel += scale A B on the host, summed in double: the merged weight
 * model files and ONNX export carry. */
void kiln_lora_merge(const kiln_lora_gemm *l, float *kernel, const float *a, const float *b);

/* Multiply-adds per row of x that the adapters add, forward. */
uint64_t kiln_lora_flops(const kiln_lora_gemm *l);

#endif
