/* float64 host reference for the transposed convolution (Keras's
 * Conv2DTranspose, PyTorch's ConvTranspose2d), written from the
 * definition as a scatter, not as a convolution's input gradient. */
#ifndef KILN_TEST_REFERENCE_CONV_TRANSPOSE_H
#define KILN_TEST_REFERENCE_CONV_TRANSPOSE_H

/* x (batch, h, w, c), y (batch, oh, ow, f), kernel (kh, kw, f / groups,
 * c): input pixel (iy, ix) of channel ci (group ci / (c / groups)) adds
 * x * w[ky, kx, fo, ci] to output (iy * sh - crop_top + ky * dil_h,
 * ix * sw - crop_left + kx * dil_w) of channel group * (f / groups) + fo,
 * where that lies inside the output. groups 0 means 1. */
typedef struct ref_convt {
    int batch, h, w, c, f, kh, kw, sh, sw, dil_h, dil_w, groups;
    int oh, ow, crop_top, crop_left;
} ref_convt;

/* One axis's output length and crop, written from Keras's
 * conv_utils.deconv_output_length and TensorFlow's 'same' padding
 * ('valid' or 'same'; output_padding < 0 is Keras's None), or from ONNX's
 * formula (explicit: pads before and after). */
void ref_convt_axis_keras(int in, int k, int s, int dilation, int same, int output_padding,
                          int *out, int *crop);
void ref_convt_axis_onnx(int in, int k, int s, int dilation, int before, int after,
                         int output_padding, int *out, int *crop);

void ref_convt_forward(const ref_convt *g, const double *x, const double *w, const double *b,
                       double *y);
/* dw, db (NULL: no bias) and dx, overwritten, from dy. */
void ref_convt_backward(const ref_convt *g, const double *x, const double *w, const double *dy,
                        double *dw, double *db, double *dx);

#endif
