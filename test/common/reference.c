#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_dense_forward(const double *x, const double *w, const double *b, int rows, int in,
                       int units, double *y)
{
    for (int r = 0; r < rows; r++)
        for (int u = 0; u < units; u++) {
            double s = b ? b[u] : 0.0;
            for (int i = 0; i < in; i++)
                s += x[r * in + i] * w[i * units + u];
            y[r * units + u] = s;
        }
}

void ref_dense_backward(const double *x, const double *w, const double *dy, int rows, int in,
                        int units, double *dw, double *db, double *dx)
{
    for (int i = 0; i < in; i++)
        for (int u = 0; u < units; u++) {
            double s = 0;
            for (int r = 0; r < rows; r++)
                s += x[r * in + i] * dy[r * units + u];
            dw[i * units + u] = s;
        }
    for (int u = 0; db && u < units; u++) {
        double s = 0;
        for (int r = 0; r < rows; r++)
            s += dy[r * units + u];
        db[u] = s;
    }
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < in; i++) {
            double s = 0;
            for (int u = 0; u < units; u++)
                s += dy[r * units + u] * w[i * units + u];
            dx[r * in + i] = s;
        }
}

void ref_window(int in, int k, int s, int same, int *out, int *pad_before)
{
    if (same) {
        *out = (int)ceil((double)in / s);
        int pad = (*out - 1) * s + k - in;
        *pad_before = pad > 0 ? pad / 2 : 0;
    } else {
        *out = (int)floor((double)(in - k) / s) + 1;
        *pad_before = 0;
    }
}

void ref_window_explicit(int in, int k, int s, int dilation, int pad_before, int pad_after,
                         int ceil_mode, int *out)
{
    const double span = (double)(k - 1) * dilation + 1;
    const double q = (in + pad_before + pad_after - span) / s;
    *out = (int)(ceil_mode ? ceil(q) : floor(q)) + 1;
    if (ceil_mode && (*out - 1) * s >= in + pad_before)
        --*out;
}

static int in_index(const ref_conv *g, int n, int y, int x, int c)
{
    return ((n * g->h + y) * g->w + x) * g->c + c;
}

static int one_if_zero(int v)
{
    return v ? v : 1;
}

/* One loop for both directions: forward (dy NULL) writes y, backward
 * writes dw, db and dx. */
static void conv2d(const ref_conv *g, const double *x, const double *w, const double *b,
                   double *y, const double *dy, double *dw, double *db, double *dx)
{
    const int groups = one_if_zero(g->groups), dh = one_if_zero(g->dil_h);
    const int dwl = one_if_zero(g->dil_w);
    const int cg = g->c / groups, fg = g->f / groups;
    for (int n = 0; n < g->batch; n++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int f = 0; f < g->f; f++) {
                    const int o = ((n * g->oh + oy) * g->ow + ox) * g->f + f;
                    const double d = dy ? dy[o] : 0;
                    double s = b && !dy ? b[f] : 0.0;
                    if (dy && db)
                        db[f] += d;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            int iy = oy * g->sh - g->pad_top + ky * dh;
                            int ix = ox * g->sw - g->pad_left + kx * dwl;
                            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                                continue;
                            for (int cc = 0; cc < cg; cc++) {
                                const int xi = in_index(g, n, iy, ix, f / fg * cg + cc);
                                const int wi = ((ky * g->kw + kx) * cg + cc) * g->f + f;
                                if (!dy) {
                                    s += x[xi] * w[wi];
                                } else {
                                    dw[wi] += x[xi] * d;
                                    dx[xi] += w[wi] * d;
                                }
                            }
                        }
                    if (!dy)
                        y[o] = s;
                }
}

void ref_conv2d_forward(const ref_conv *g, const double *x, const double *w, const double *b,
                        double *y)
{
    conv2d(g, x, w, b, y, NULL, NULL, NULL, NULL);
}

void ref_conv2d_backward(const ref_conv *g, const double *x, const double *w, const double *dy,
                         double *dw, double *db, double *dx)
{
    memset(dw, 0, sizeof(double) * (size_t)(g->kh * g->kw * (g->c / one_if_zero(g->groups)) *
                                            g->f));
    if (db)
        memset(db, 0, sizeof(double) * (size_t)g->f);
    memset(dx, 0, sizeof(double) * (size_t)(g->batch * g->h * g->w * g->c));
    conv2d(g, x, w, NULL, NULL, dy, dw, db, dx);
}

/* The first maximum in window order wins, as in kiln. */
static int pool_argmax(const ref_conv *g, const double *x, int n, int oy, int ox, int c)
{
    int best = -1;
    for (int ky = 0; ky < g->kh; ky++)
        for (int kx = 0; kx < g->kw; kx++) {
            int iy = oy * g->sh - g->pad_top + ky;
            int ix = ox * g->sw - g->pad_left + kx;
            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                continue;
            int i = in_index(g, n, iy, ix, c);
            if (best < 0 || x[i] > x[best])
                best = i;
        }
    return best;
}

void ref_max_pool_forward(const ref_conv *g, const double *x, double *y)
{
    for (int n = 0; n < g->batch; n++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int c = 0; c < g->c; c++)
                    y[((n * g->oh + oy) * g->ow + ox) * g->c + c] =
                        x[pool_argmax(g, x, n, oy, ox, c)];
}

void ref_max_pool_backward(const ref_conv *g, const double *x, const double *dy, double *dx)
{
    memset(dx, 0, sizeof(double) * (size_t)(g->batch * g->h * g->w * g->c));
    for (int n = 0; n < g->batch; n++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int c = 0; c < g->c; c++)
                    dx[pool_argmax(g, x, n, oy, ox, c)] +=
                        dy[((n * g->oh + oy) * g->ow + ox) * g->c + c];
}

/* Average pooling: each output is the mean of its window's cells inside
 * the input; backward spreads dy evenly over those cells. One function does
 * both (dy NULL: forward into y; else backward into dx). */
static void avg_pool(const ref_conv *g, const double *x, double *y, const double *dy,
                     double *dx)
{
    if (dy)
        memset(dx, 0, sizeof(double) * (size_t)(g->batch * g->h * g->w * g->c));
    for (int n = 0; n < g->batch; n++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int c = 0; c < g->c; c++) {
                    int cells = 0;
                    double sum = 0;
                    const int y0 = oy * g->sh - g->pad_top, x0 = ox * g->sw - g->pad_left;
                    const int ye = y0 + g->kh < g->h + g->pad_bottom ? y0 + g->kh
                                                                      : g->h + g->pad_bottom;
                    const int xe = x0 + g->kw < g->w + g->pad_right ? x0 + g->kw
                                                                     : g->w + g->pad_right;
                    const int whole = (ye - y0) * (xe - x0);
                    for (int pass = 0; pass < 2; pass++)
                        for (int ky = 0; ky < g->kh; ky++)
                            for (int kx = 0; kx < g->kw; kx++) {
                                const int iy = oy * g->sh - g->pad_top + ky;
                                const int ix = ox * g->sw - g->pad_left + kx;
                                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                                    continue;
                                const int i = ((n * g->h + iy) * g->w + ix) * g->c + c;
                                const int o = ((n * g->oh + oy) * g->ow + ox) * g->c + c;
                                if (pass == 0) {
                                    cells++;
                                    sum += dy ? 0 : x[i];
                                } else if (dy) {
                                    dx[i] += dy[o] / (g->include_pad ? whole : cells);
                                }
                            }
                    if (!dy)
                        y[((n * g->oh + oy) * g->ow + ox) * g->c + c] =
                            sum / (g->include_pad ? whole : cells);
                }
}

void ref_avg_pool_forward(const ref_conv *g, const double *x, double *y)
{
    avg_pool(g, x, y, NULL, NULL);
}

void ref_avg_pool_backward(const ref_conv *g, const double *dy, double *dx)
{
    avg_pool(g, NULL, NULL, dy, dx);
}

/* sqrt(2 / pi), of the tanh approximation of GELU. */
#define GELU_K 0.79788456080286535588
#define SQRT_2PI 2.50662827463100050242

void ref_activation_forward(kiln_activation act, const double *z, int rows, int cols,
                            double *y)
{
    for (int r = 0; r < rows; r++) {
        const double *zr = z + r * cols;
        double *yr = y + r * cols;
        if (act == KILN_ACTIVATION_SOFTMAX) {
            double m = zr[0], s = 0;
            for (int j = 1; j < cols; j++)
                m = zr[j] > m ? zr[j] : m;
            for (int j = 0; j < cols; j++)
                s += exp(zr[j] - m);
            for (int j = 0; j < cols; j++)
                yr[j] = exp(zr[j] - m) / s;
            continue;
        }
        if (act == KILN_ACTIVATION_LOG_SOFTMAX) {
            double m = zr[0], s = 0;
            for (int j = 1; j < cols; j++)
                m = zr[j] > m ? zr[j] : m;
            for (int j = 0; j < cols; j++)
                s += exp(zr[j] - m);
            for (int j = 0; j < cols; j++)
                yr[j] = zr[j] - m - log(s);
            continue;
        }
        for (int j = 0; j < cols; j++) {
            const double v = zr[j];
            yr[j] = act == KILN_ACTIVATION_RELU         ? (v > 0 ? v : 0)
                    : act == KILN_ACTIVATION_SIGMOID    ? 1.0 / (1.0 + exp(-v))
                    : act == KILN_ACTIVATION_TANH       ? tanh(v)
                    : act == KILN_ACTIVATION_GELU       ? 0.5 * v * erfc(-v / sqrt(2.0))
                    : act == KILN_ACTIVATION_GELU_TANH
                        ? 0.5 * v * (1 + tanh(GELU_K * (v + 0.044715 * v * v * v)))
                    : act == KILN_ACTIVATION_LEAKY_RELU ? (v > 0 ? v : 0.2 * v)
                    : act == KILN_ACTIVATION_SILU       ? v / (1.0 + exp(-v))
                    : act == KILN_ACTIVATION_RELU6      ? (v > 6 ? 6 : v > 0 ? v : 0)
                    : act == KILN_ACTIVATION_HARD_SIGMOID
                        ? (v > 3 ? 1 : v > -3 ? (v + 3) / 6 : 0)
                    : act == KILN_ACTIVATION_HARD_SWISH ? (v > 3 ? v : v > -3 ? v * (v + 3) / 6 : 0)
                                                        : v;
        }
    }
}

void ref_activation_backward(kiln_activation act, const double *y, const double *dy, int rows,
                             int cols, double *dz)
{
    for (int r = 0; r < rows; r++) {
        const double *yr = y + r * cols, *gr = dy + r * cols;
        double *dr = dz + r * cols;
        if (act == KILN_ACTIVATION_SOFTMAX) {
            double dot = 0;
            for (int j = 0; j < cols; j++)
                dot += gr[j] * yr[j];
            for (int j = 0; j < cols; j++)
                dr[j] = yr[j] * (gr[j] - dot);
            continue;
        }
        if (act == KILN_ACTIVATION_LOG_SOFTMAX) {   /* dy - softmax sum(dy) */
            double sum = 0;
            for (int j = 0; j < cols; j++)
                sum += gr[j];
            for (int j = 0; j < cols; j++)
                dr[j] = gr[j] - exp(yr[j]) * sum;
            continue;
        }
        for (int j = 0; j < cols; j++) {
            const double v = yr[j], g = gr[j];
            dr[j] = act == KILN_ACTIVATION_RELU      ? (v > 0 ? g : 0)
                    : act == KILN_ACTIVATION_SIGMOID ? g * v * (1 - v)
                    : act == KILN_ACTIVATION_TANH    ? g * (1 - v * v)
                    : act == KILN_ACTIVATION_RELU6   ? (v > 0 && v < 6 ? g : 0)
                    : act == KILN_ACTIVATION_HARD_SIGMOID ? (v > 0 && v < 1 ? g / 6 : 0)
                                                     : g;
        }
    }
}

void ref_batch_norm_forward(int rows, int c, const double *x, const double *gamma,
                            const double *beta, const double *moving_mean,
                            const double *moving_var, double eps, double momentum,
                            int training, double *y, double *new_mean, double *new_var)
{
    for (int j = 0; j < c; j++) {
        double mean = moving_mean[j], var = moving_var[j];
        if (training) {
            double s = 0, q = 0;
            for (int r = 0; r < rows; r++)
                s += x[r * c + j];
            mean = s / rows;
            for (int r = 0; r < rows; r++)
                q += (x[r * c + j] - mean) * (x[r * c + j] - mean);
            var = q / rows;
            new_mean[j] = moving_mean[j] * momentum + mean * (1 - momentum);
            new_var[j] = moving_var[j] * momentum +
                         (rows > 1 ? q / (rows - 1) : 0.0) * (1 - momentum);
        }
        for (int r = 0; r < rows; r++)
            y[r * c + j] = gamma[j] * (x[r * c + j] - mean) / sqrt(var + eps) + beta[j];
    }
}

void ref_batch_norm_backward(int rows, int c, const double *x, const double *gamma, double eps,
                             const double *dy, double *dx, double *dgamma, double *dbeta)
{
    for (int j = 0; j < c; j++) {
        double mean = 0, var = 0, sum_dy = 0, sum_dy_xhat = 0;
        for (int r = 0; r < rows; r++)
            mean += x[r * c + j] / rows;
        for (int r = 0; r < rows; r++)
            var += (x[r * c + j] - mean) * (x[r * c + j] - mean) / rows;
        const double inv = 1 / sqrt(var + eps);
        for (int r = 0; r < rows; r++) {
            sum_dy += dy[r * c + j];
            sum_dy_xhat += dy[r * c + j] * (x[r * c + j] - mean) * inv;
        }
        dbeta[j] = sum_dy;
        dgamma[j] = sum_dy_xhat;
        for (int r = 0; r < rows; r++) {
            const double xhat = (x[r * c + j] - mean) * inv;
            dx[r * c + j] = gamma[j] * inv / rows * (rows * dy[r * c + j] - sum_dy - xhat * sum_dy_xhat);
        }
    }
}

void ref_activation_backward_z(kiln_activation act, const double *z, const double *dy, int rows,
                               int cols, double *dz)
{
    const size_t n = (size_t)rows * (size_t)cols;
    double *y = malloc(sizeof(double) * (n ? n : 1));
    ref_activation_forward(act, z, rows, cols, y);
    ref_activation_backward(act, y, dy, rows, cols, dz);
    for (size_t i = 0; i < n; i++) {
        const double v = z[i], g = dy[i];
        if (act == KILN_ACTIVATION_GELU) {
            dz[i] = g * (0.5 * erfc(-v / sqrt(2.0)) + v * exp(-0.5 * v * v) / SQRT_2PI);
        } else if (act == KILN_ACTIVATION_GELU_TANH) {
            const double t = tanh(GELU_K * (v + 0.044715 * v * v * v));
            dz[i] = g * (0.5 * (1 + t) +
                         0.5 * v * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * v * v));
        } else if (act == KILN_ACTIVATION_LEAKY_RELU) {
            dz[i] = v > 0 ? g : 0.2 * g;
        } else if (act == KILN_ACTIVATION_SILU) {
            const double sg = 1 / (1 + exp(-v));
            dz[i] = g * sg * (1 + v * (1 - sg));
        } else if (act == KILN_ACTIVATION_HARD_SIGMOID) {   /* PyTorch 1.13's, at the kinks too */
            dz[i] = v > -3 && v < 3 ? g / 6 : 0;
        } else if (act == KILN_ACTIVATION_HARD_SWISH) {
            dz[i] = v < -3 ? 0 : v <= 3 ? g * (v / 3 + 0.5) : g;
        }
    }
    free(y);
}

void ref_layer_norm_forward(int rows, int c, const double *x, const double *gamma,
                            const double *beta, double eps, double *y)
{
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * c;
        double mean = 0, var = 0;
        for (int j = 0; j < c; j++)
            mean += xr[j] / c;
        for (int j = 0; j < c; j++)
            var += (xr[j] - mean) * (xr[j] - mean) / c;
        for (int j = 0; j < c; j++)
            y[(size_t)r * c + j] = (gamma ? gamma[j] : 1) * (xr[j] - mean) / sqrt(var + eps) +
                                   (beta ? beta[j] : 0);
    }
}

void ref_layer_norm_backward(int rows, int c, const double *x, const double *gamma, double eps,
                             const double *dy, double *dx, double *dgamma, double *dbeta)
{
    for (int j = 0; j < c; j++) {
        if (dgamma)
            dgamma[j] = 0;
        if (dbeta)
            dbeta[j] = 0;
    }
    for (int r = 0; r < rows; r++) {
        const double *xr = x + (size_t)r * c, *gr = dy + (size_t)r * c;
        double mean = 0, var = 0, sum_g = 0, sum_g_xhat = 0;
        for (int j = 0; j < c; j++)
            mean += xr[j] / c;
        for (int j = 0; j < c; j++)
            var += (xr[j] - mean) * (xr[j] - mean) / c;
        const double inv = 1 / sqrt(var + eps);
        for (int j = 0; j < c; j++) {
            const double xhat = (xr[j] - mean) * inv, g = gr[j] * (gamma ? gamma[j] : 1);
            sum_g += g;
            sum_g_xhat += g * xhat;
            if (dgamma)
                dgamma[j] += gr[j] * xhat;
            if (dbeta)
                dbeta[j] += gr[j];
        }
        for (int j = 0; j < c; j++) {
            const double xhat = (xr[j] - mean) * inv, g = gr[j] * (gamma ? gamma[j] : 1);
            dx[(size_t)r * c + j] = inv / c * (c * g - sum_g - xhat * sum_g_xhat);
        }
    }
}

void ref_embedding_forward(int n, int width, const int32_t *ids, const double *table, double *y)
{
    for (int i = 0; i < n; i++)
        for (int c = 0; c < width; c++)
            y[(size_t)i * width + c] = table[(size_t)ids[i] * width + c];
}

void ref_embedding_backward(int n, int vocab, int width, const int32_t *ids, const double *dy,
                            double *dtable)
{
    for (size_t k = 0; k < (size_t)vocab * width; k++)
        dtable[k] = 0.0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < width; c++)
            dtable[(size_t)ids[i] * width + c] += dy[(size_t)i * width + c];
}

void ref_position_embedding_forward(int batch, int length, int width, const double *x,
                                    const double *table, double *y)
{
    const size_t row = (size_t)length * width;
    for (int b = 0; b < batch; b++)
        for (size_t k = 0; k < row; k++)
            y[b * row + k] = x[b * row + k] + table[k];
}

void ref_position_embedding_backward(int batch, int length, int max_length, int width,
                                     const double *dy, double *dtable)
{
    const size_t row = (size_t)length * width;
    for (size_t k = 0; k < (size_t)max_length * width; k++)
        dtable[k] = 0.0;
    for (int b = 0; b < batch; b++)
        for (size_t k = 0; k < row; k++)
            dtable[k] += dy[b * row + k];
}
