#include "reference_conv_transpose.h"

#include <stddef.h>
#include <string.h>

void ref_convt_axis_keras(int in, int k, int s, int dilation, int same, int output_padding,
                          int *out, int *crop)
{
    const int size = k + (k - 1) * (dilation - 1);   /* Keras's dilated filter_size */
    if (output_padding < 0)
        *out = same ? in * s : in * s + (size - s > 0 ? size - s : 0);
    else
        *out = (in - 1) * s + size - 2 * (same ? size / 2 : 0) + output_padding;
    /* The convolution of the output back to the input, 'same' as
     * TensorFlow pads it: pad_needed = max(0, (in - 1) s + size - out). */
    const int needed = (in - 1) * s + size - *out;
    *crop = same && needed > 0 ? needed / 2 : 0;
}

void ref_convt_axis_onnx(int in, int k, int s, int dilation, int before, int after,
                         int output_padding, int *out, int *crop)
{
    *out = s * (in - 1) + output_padding + ((k - 1) * dilation + 1) - before - after;
    *crop = before;
}

static int one_if_zero(int v)
{
    return v ? v : 1;
}

/* Forward (dy NULL) writes y; backward adds into dw, db and dx. */
static void convt(const ref_convt *g, const double *x, const double *w, const double *b,
                  double *y, const double *dy, double *dw, double *db, double *dx)
{
    const int groups = one_if_zero(g->groups), cg = g->c / groups, fg = g->f / groups;
    const int dh = one_if_zero(g->dil_h), dwl = one_if_zero(g->dil_w);
    const size_t out_count = (size_t)g->batch * g->oh * g->ow * g->f;
    if (!dy)
        for (size_t o = 0; o < out_count; o++)
            y[o] = b ? b[o % (size_t)g->f] : 0.0;
    if (dy && db)
        for (size_t o = 0; o < out_count; o++)
            db[o % (size_t)g->f] += dy[o];
    for (int n = 0; n < g->batch; n++)
        for (int iy = 0; iy < g->h; iy++)
            for (int ix = 0; ix < g->w; ix++)
                for (int ci = 0; ci < g->c; ci++) {
                    const size_t xi = (((size_t)n * g->h + iy) * g->w + ix) * g->c + ci;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            const int oy = iy * g->sh - g->crop_top + ky * dh;
                            const int ox = ix * g->sw - g->crop_left + kx * dwl;
                            if (oy < 0 || oy >= g->oh || ox < 0 || ox >= g->ow)
                                continue;
                            for (int fo = 0; fo < fg; fo++) {
                                const int f = ci / cg * fg + fo;
                                const size_t yi = (((size_t)n * g->oh + oy) * g->ow + ox) *
                                                  g->f + f;
                                const size_t wi = (((size_t)ky * g->kw + kx) * fg + fo) * g->c +
                                                  ci;
                                if (!dy) {
                                    y[yi] += x[xi] * w[wi];
                                } else {
                                    dw[wi] += x[xi] * dy[yi];
                                    dx[xi] += w[wi] * dy[yi];
                                }
                            }
                        }
                }
}

void ref_convt_forward(const ref_convt *g, const double *x, const double *w, const double *b,
                       double *y)
{
    convt(g, x, w, b, y, NULL, NULL, NULL, NULL);
}

void ref_convt_backward(const ref_convt *g, const double *x, const double *w, const double *dy,
                        double *dw, double *db, double *dx)
{
    const int groups = one_if_zero(g->groups);
    memset(dw, 0, sizeof(double) * (size_t)g->kh * g->kw * (g->f / groups) * g->c);
    if (db)
        memset(db, 0, sizeof(double) * (size_t)g->f);
    memset(dx, 0, sizeof(double) * (size_t)g->batch * g->h * g->w * g->c);
    convt(g, x, w, NULL, NULL, dy, dw, db, dx);
}
