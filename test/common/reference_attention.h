/* float64 host reference for MultiHeadAttention (Keras's layout, key =
 * value), written from the definition, one loop per sum. */
#ifndef KILN_TEST_REFERENCE_ATTENTION_H
#define KILN_TEST_REFERENCE_ATTENTION_H

typedef struct ref_mha {
    int batch, tq, d, tv, dv, heads, key_dim, value_dim, out, causal;
    /* (batch, tv): nonzero hides that value position (a padding mask), or
     * NULL; a row that sees nothing has probabilities 0. */
    const double *mask;
} ref_mha;

/* The parameters in Keras's order: query, key, value, attention_output,
 * each a kernel then a bias (a NULL bias: none). */
typedef struct ref_mha_params {
    const double *kernel[4], *bias[4];
} ref_mha_params;

/* y (batch, tq, out) from xq (batch, tq, d) and xv (batch, tv, dv). keep
 * (batch, heads, tq, tv): each probability's dropout factor, or NULL. */
void ref_mha_forward(const ref_mha *g, const double *xq, const double *xv,
                     const ref_mha_params *w, const double *keep, double *y);
/* Gradients from dy: dxq, dxv (written), and per parameter dkernel[p],
 * dbias[p] (NULL: not wanted). */
void ref_mha_backward(const ref_mha *g, const double *xq, const double *xv,
                      const ref_mha_params *w, const double *keep, const double *dy,
                      double *dxq, double *dxv, double *const *dkernel, double *const *dbias);

#endif
