/* float64 host references for every layer, activation, loss and optimizer.
 * Layouts follow kiln: NHWC activations, dense kernel (in, units), conv
 * kernel (kh, kw, C, F). */
#ifndef KILN_TEST_REFERENCE_H
#define KILN_TEST_REFERENCE_H

#include "kiln.h"

void ref_dense_forward(const double *x, const double *w, const double *b, int rows, int in,
                       int units, double *y);
void ref_dense_backward(const double *x, const double *w, const double *dy, int rows, int in,
                        int units, double *dw, double *db, double *dx);

/* dil_h, dil_w and groups 0 mean 1; the kernel is (kh, kw, c / groups, f).
 * pad_bottom, pad_right and include_pad serve average pooling only:
 * include_pad divides by the window inside the padded input (PyTorch's
 * count_include_pad), else by its cells inside the input. */
typedef struct ref_conv {
    int batch, h, w, c, f, kh, kw, sh, sw, oh, ow, pad_top, pad_left;
    int pad_bottom, pad_right, dil_h, dil_w, groups, include_pad;
} ref_conv;

/* Keras's 'same'/'valid' arithmetic, written independently of kiln's. */
void ref_window(int in, int k, int s, int same, int *out, int *pad_before);
/* PyTorch's: explicit pads, a dilated window (k taps `dilation` apart),
 * ceil_mode's rounding up with its last window starting before the
 * padding after. */
void ref_window_explicit(int in, int k, int s, int dilation, int pad_before, int pad_after,
                         int ceil_mode, int *out);

void ref_conv2d_forward(const ref_conv *g, const double *x, const double *w, const double *b,
                        double *y);
void ref_conv2d_backward(const ref_conv *g, const double *x, const double *w, const double *dy,
                         double *dw, double *db, double *dx);

/* Pooling reuses ref_conv's geometry with kh/kw as the pool and f == c. */
void ref_max_pool_forward(const ref_conv *g, const double *x, double *y);
void ref_max_pool_backward(const ref_conv *g, const double *x, const double *dy, double *dx);
void ref_avg_pool_forward(const ref_conv *g, const double *x, double *y);
void ref_avg_pool_backward(const ref_conv *g, const double *dy, double *dx);

/* Batch norm over the last axis of rows x c; training: the batch's
 * statistics and the moving ones updated (unbiased variance), else the
 * moving ones. Backward in training. */
void ref_batch_norm_forward(int rows, int c, const double *x, const double *gamma,
                            const double *beta, const double *moving_mean,
                            const double *moving_var, double eps, double momentum,
                            int training, double *y, double *new_mean, double *new_var);
void ref_batch_norm_backward(int rows, int c, const double *x, const double *gamma, double eps,
                             const double *dy, double *dx, double *dgamma, double *dbeta);

void ref_activation_forward(kiln_activation act, const double *z, int rows, int cols,
                            double *y);
/* dz from y = act(z) and dy. */
void ref_activation_backward(kiln_activation act, const double *y, const double *dy, int rows,
                             int cols, double *dz);

/* dz from z and dy: every activation, from its input (the runtime keeps
 * it for the ones whose gradient needs it). */
void ref_activation_backward_z(kiln_activation act, const double *z, const double *dy, int rows,
                               int cols, double *dz);

/* Layer norm over the last axis of rows x c (biased variance); gamma or
 * beta NULL: absent; dgamma or dbeta NULL: not wanted. */
void ref_layer_norm_forward(int rows, int c, const double *x, const double *gamma,
                            const double *beta, double eps, double *y);
void ref_layer_norm_backward(int rows, int c, const double *x, const double *gamma, double eps,
                             const double *dy, double *dx, double *dgamma, double *dbeta);

/* Embedding: y[i] = table[ids[i]] over n ids of a (vocab, width) table;
 * dtable (vocab x width, overwritten) sums dy over every use of a row. */
void ref_embedding_forward(int n, int width, const int32_t *ids, const double *table, double *y);
void ref_embedding_backward(int n, int vocab, int width, const int32_t *ids, const double *dy,
                            double *dtable);

/* PositionEmbedding: y[b, t, c] = x[b, t, c] + table[t, c] for t < length;
 * dtable (max_length x width, overwritten) sums dy over the batch. */
void ref_position_embedding_forward(int batch, int length, int width, const double *x,
                                    const double *table, double *y);
void ref_position_embedding_backward(int batch, int length, int max_length, int width,
                                     const double *dy, double *dtable);

#endif
