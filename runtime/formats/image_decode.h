/* Private: one PNG or JPEG file, decoded from memory to 8-bit pixels, and
 * the bilinear resize that turns it into a sample. */
#ifndef KILN_RUNTIME_FORMATS_IMAGE_DECODE_H
#define KILN_RUNTIME_FORMATS_IMAGE_DECODE_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

/* Images larger than this many pixels are refused before decoding. */
#define KILN_IMAGE_MAX_PIXELS ((int64_t)1 << 28)

/* Decoded pixels: height rows of width pixels of `channels` bytes (HWC). */
typedef struct kiln_image {
    uint8_t *pixels;            /* kiln_alloc'd; kiln_image_free releases it */
    int32_t height, width, channels;
} kiln_image;

/* Decodes the PNG or JPEG in bytes[0..size) (told apart by their magic
 * bytes, never by a name) into `channels` (1: gray, 3: RGB) 8-bit channels.
 * PNG through libpng's simplified API: palettes are expanded, alpha is
 * dropped, 16-bit samples are scaled to 8 bits (rounded), colour becomes
 * gray as TensorFlow's decode_png makes it (0.299 R + 0.587 G + 0.114 B on
 * the encoded values, in libpng's fixed point). JPEG through TurboJPEG (accurate IDCT, fancy
 * upsampling). KILN_ERROR_FORMAT for neither format, a malformed or
 * truncated file (with the library's message) or more than
 * KILN_IMAGE_MAX_PIXELS pixels; KILN_ERROR_UNSUPPORTED for a format this
 * build has no library for (or a CMYK JPEG); each naming `name`. *img is
 * zeroed on failure. Safe from several threads at once. */
kiln_status kiln_image_decode(kiln_context *ctx, const char *name, const void *bytes,
                              size_t size, int32_t channels, kiln_image *img);

/* Accepts a zeroed image. */
void kiln_image_free(kiln_context *ctx, kiln_image *img);

/* Resizes src (in_h x in_w x channels bytes, HWC) into dst (out_h x out_w x
 * channels floats) as tf.image.resize's bilinear method without antialias:
 * half-pixel centres, src = (dst + 0.5) * in / out - 0.5 clamped to the
 * edges, then value * scale + offset. Equal sizes copy exactly. */
void kiln_image_resize_bilinear(const uint8_t *src, int32_t in_h, int32_t in_w,
                                int32_t channels, float *dst, int32_t out_h, int32_t out_w,
                                float scale, float offset);

#endif
