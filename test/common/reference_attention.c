#include "reference_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y (rows x out) = x (rows x in) w + b. */
static void linear(const double *x, int rows, int in, const double *w, const double *b, int out,
                   double *y)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++)
                s += x[(size_t)r * in + i] * w[(size_t)i * out + o];
            y[(size_t)r * out + o] = s;
        }
}

/* dw = x^T dy, db = column sums of dy, dx = dy w^T added to dx (if not NULL). */
static void linear_backward(const double *x, int rows, int in, const double *w, int out,
                            const double *dy, double *dw, double *db, double *dx)
{
    for (int i = 0; i < in && dw; i++)
        for (int o = 0; o < out; o++) {
            double s = 0.0;
            for (int r = 0; r < rows; r++)
                s += x[(size_t)r * in + i] * dy[(size_t)r * out + o];
            dw[(size_t)i * out + o] = s;
        }
    for (int o = 0; o < out && db; o++) {
        double s = 0.0;
        for (int r = 0; r < rows; r++)
            s += dy[(size_t)r * out + o];
        db[o] = s;
    }
    for (int r = 0; r < rows && dx; r++)
        for (int i = 0; i < in; i++) {
            double s = 0.0;
            for (int o = 0; o < out; o++)
                s += dy[(size_t)r * out + o] * w[(size_t)i * out + o];
            dx[(size_t)r * in + i] += s;
        }
}

typedef struct inner {
    double *q, *k, *v, *p, *c;   /* (B,Tq,HK) (B,Tv,HK) (B,Tv,HV) (B,H,Tq,Tv) (B,Tq,HV) */
} inner;

static int visible(const ref_mha *g, int b, int i, int j)
{
    return (!g->causal || j <= i) && !(g->mask && g->mask[(size_t)b * g->tv + j] != 0.0);
}

static double keep_of(const double *keep, size_t at)
{
    return keep ? keep[at] : 1.0;
}

static void forward_inner(const ref_mha *g, const double *xq, const double *xv,
                          const ref_mha_params *w, const double *keep, inner *t)
{
    const int H = g->heads, K = g->key_dim, V = g->value_dim, B = g->batch;
    t->q = malloc(sizeof(double) * (size_t)B * g->tq * H * K);
    t->k = malloc(sizeof(double) * (size_t)B * g->tv * H * K);
    t->v = malloc(sizeof(double) * (size_t)B * g->tv * H * V);
    t->p = calloc((size_t)B * H * g->tq * g->tv, sizeof(double));
    t->c = calloc((size_t)B * g->tq * H * V, sizeof(double));
    linear(xq, B * g->tq, g->d, w->kernel[0], w->bias[0], H * K, t->q);
    linear(xv, B * g->tv, g->dv, w->kernel[1], w->bias[1], H * K, t->k);
    linear(xv, B * g->tv, g->dv, w->kernel[2], w->bias[2], H * V, t->v);
    const double scale = 1.0 / sqrt((double)K);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < g->tq; i++) {
                double *p = t->p + (((size_t)b * H + h) * g->tq + i) * g->tv, most = -INFINITY;
                for (int j = 0; j < g->tv; j++) {
                    if (!visible(g, b, i, j))
                        continue;
                    double s = 0.0;
                    for (int x = 0; x < K; x++)
                        s += t->q[((size_t)b * g->tq + i) * H * K + h * K + x] *
                             t->k[((size_t)b * g->tv + j) * H * K + h * K + x];
                    p[j] = s * scale;
                    most = p[j] > most ? p[j] : most;
                }
                double sum = 0.0;   /* a row that sees nothing: 0 / 0 never taken */
                for (int j = 0; j < g->tv; j++)
                    if (visible(g, b, i, j))
                        sum += (p[j] = exp(p[j] - most));
                for (int j = 0; j < g->tv; j++)
                    p[j] = visible(g, b, i, j) ? p[j] / sum : 0.0;
                for (int x = 0; x < V; x++) {
                    double s = 0.0;
                    for (int j = 0; j < g->tv; j++)
                        s += p[j] * keep_of(keep, (size_t)(p - t->p) + j) *
                             t->v[((size_t)b * g->tv + j) * H * V + h * V + x];
                    t->c[((size_t)b * g->tq + i) * H * V + h * V + x] = s;
                }
            }
}

static void inner_free(inner *t)
{
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->p);
    free(t->c);
}

void ref_mha_forward(const ref_mha *g, const double *xq, const double *xv,
                     const ref_mha_params *w, const double *keep, double *y)
{
    inner t;
    forward_inner(g, xq, xv, w, keep, &t);
    linear(t.c, g->batch * g->tq, g->heads * g->value_dim, w->kernel[3], w->bias[3], g->out, y);
    inner_free(&t);
}

void ref_mha_backward(const ref_mha *g, const double *xq, const double *xv,
                      const ref_mha_params *w, const double *keep, const double *dy,
                      double *dxq, double *dxv, double *const *dkernel, double *const *dbias)
{
    const int H = g->heads, K = g->key_dim, V = g->value_dim, B = g->batch;
    const int tq = g->tq, tv = g->tv;
    inner t;
    forward_inner(g, xq, xv, w, keep, &t);
    double *dc = calloc((size_t)B * tq * H * V, sizeof(double));
    double *dq = calloc((size_t)B * tq * H * K, sizeof(double));
    double *dk = calloc((size_t)B * tv * H * K, sizeof(double));
    double *dv = calloc((size_t)B * tv * H * V, sizeof(double));
    double *dp = calloc((size_t)tv, sizeof(double));
    linear_backward(t.c, B * tq, H * V, w->kernel[3], g->out, dy, dkernel[3], dbias[3], dc);
    const double scale = 1.0 / sqrt((double)K);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < tq; i++) {
                const size_t row = (((size_t)b * H + h) * tq + i) * tv;
                const double *p = t.p + row, *dci = dc + ((size_t)b * tq + i) * H * V + h * V;
                double weighted = 0.0;
                for (int j = 0; j < tv; j++) {
                    const double *vj = t.v + ((size_t)b * tv + j) * H * V + h * V;
                    double s = 0.0;
                    for (int x = 0; x < V; x++) {
                        s += dci[x] * vj[x];
                        dv[((size_t)b * tv + j) * H * V + h * V + x] +=
                            p[j] * keep_of(keep, row + j) * dci[x];
                    }
                    dp[j] = s * keep_of(keep, row + j);
                    weighted += p[j] * dp[j];
                }
                for (int j = 0; j < tv; j++) {
                    const double ds = p[j] * (dp[j] - weighted) * scale;
                    for (int x = 0; x < K; x++) {
                        dq[((size_t)b * tq + i) * H * K + h * K + x] +=
                            ds * t.k[((size_t)b * tv + j) * H * K + h * K + x];
                        dk[((size_t)b * tv + j) * H * K + h * K + x] +=
                            ds * t.q[((size_t)b * tq + i) * H * K + h * K + x];
                    }
                }
            }
    memset(dxq, 0, sizeof(double) * (size_t)B * tq * g->d);
    memset(dxv, 0, sizeof(double) * (size_t)B * tv * g->dv);
    linear_backward(xq, B * tq, g->d, w->kernel[0], H * K, dq, dkernel[0], dbias[0], dxq);
    linear_backward(xv, B * tv, g->dv, w->kernel[1], H * K, dk, dkernel[1], dbias[1], dxv);
    linear_backward(xv, B * tv, g->dv, w->kernel[2], H * V, dv, dkernel[2], dbias[2], dxv);
    free(dc);
    free(dq);
    free(dk);
    free(dv);
    free(dp);
    inner_free(&t);
}
