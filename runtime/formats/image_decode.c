/* PNG (libpng's simplified API, which reports errors instead of jumping)
 * and JPEG (TurboJPEG, which returns them), from memory, to 8-bit pixels;
 * and tf.image.resize's bilinear resize. */
#include "runtime/formats/image_decode.h"

#include "kiln_config.h"
#include "runtime/context/context.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#if KILN_HAVE_PNG
#include <png.h>
#endif
#if KILN_HAVE_JPEG
#include <turbojpeg.h>
#endif

/* TensorFlow's decode_png asks libpng for gray = 0.299 R + 0.587 G +
 * 0.114 B (png_set_rgb_to_gray), which libpng computes as these weights in
 * 1/32768 (truncated, blue taking the rest) and a truncating shift. */
#define PNG_GRAY_R 9797u
#define PNG_GRAY_G 19234u
#define PNG_GRAY_B 3737u

static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
static const unsigned char jpeg_magic[3] = {0xff, 0xd8, 0xff};

#if KILN_HAVE_PNG || KILN_HAVE_JPEG
static kiln_status too_large(kiln_context *ctx, const char *name, const char *format,
                             int64_t width, int64_t height)
{
    return kiln_error(ctx, KILN_ERROR_FORMAT, "%s: a %s image of %lld x %lld pixels is more "
                      "than the %lld pixels (2^28) kiln decodes", name, format,
                      (long long)width, (long long)height, (long long)KILN_IMAGE_MAX_PIXELS);
}

static kiln_status alloc_pixels(kiln_context *ctx, const char *name, kiln_image *img,
                                int64_t width, int64_t height, int32_t channels, size_t bytes)
{
    img->pixels = kiln_alloc(ctx, bytes);
    if (!img->pixels)
        return kiln_error_oom(ctx, name, bytes);
    img->width = (int32_t)width;
    img->height = (int32_t)height;
    img->channels = channels;
    return KILN_OK;
}
#endif

#if KILN_HAVE_PNG
static kiln_status decode_png(kiln_context *ctx, const char *name, const void *bytes,
                              size_t size, int32_t channels, kiln_image *img)
{
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    kiln_status st = KILN_OK;
    if (!png_image_begin_read_from_memory(&png, bytes, size))
        goto bad;
    if ((int64_t)png.width * png.height > KILN_IMAGE_MAX_PIXELS) {
        st = too_large(ctx, name, "PNG", png.width, png.height);
        goto fail;
    }
    /* Alpha is read and dropped, as TensorFlow's decode_png and PIL do: with
     * an output format without alpha, libpng would composite onto the
     * buffer's previous contents. Colour becomes gray here, with
     * decode_png's weights: libpng's own conversion goes through 8-bit
     * linear light, where dark colours lose up to 20 levels. */
    const int alpha = (png.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    const int to_gray = channels == 1 && (png.format & PNG_FORMAT_FLAG_COLOR);
    const int32_t stored = (to_gray ? 3 : channels) + alpha;
    png.format = (stored - alpha == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY) |
                 (alpha ? PNG_FORMAT_FLAG_ALPHA : 0);
    /* 16-bit samples are sRGB-encoded, as nearly every file without a gAMA
     * chunk is, so they are scaled to 8 bits rather than gamma-encoded. */
    png.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    const size_t pixels = (size_t)png.width * png.height;
    st = alloc_pixels(ctx, name, img, png.width, png.height, channels,
                      pixels * (size_t)stored);
    if (st != KILN_OK)
        goto fail;
    if (!png_image_finish_read(&png, NULL, img->pixels, 0, NULL))
        goto bad;
    uint8_t *const p = img->pixels;
    if (to_gray) {
        for (size_t i = 0; i < pixels; i++) {
            const uint8_t *const q = p + i * (size_t)stored;
            p[i] = (uint8_t)((PNG_GRAY_R * q[0] + PNG_GRAY_G * q[1] + PNG_GRAY_B * q[2]) >> 15);
        }
    } else if (alpha) {
        for (size_t i = 0; i < pixels; i++)
            memmove(p + i * (size_t)channels, p + i * (size_t)stored, (size_t)channels);
    }
    return KILN_OK;
bad:
    st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s is not a valid PNG file: libpng: %s", name,
                    png.message[0] ? png.message : "unknown error");
fail:
    png_image_free(&png);
    kiln_image_free(ctx, img);
    return st;
}
#endif

#if KILN_HAVE_JPEG
static kiln_status decode_jpeg(kiln_context *ctx, const char *name, const void *bytes,
                               size_t size, int32_t channels, kiln_image *img)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY, "%s: TurboJPEG: %s", name,
                          tjGetErrorStr2(NULL));
    kiln_status st = KILN_OK;
    int width, height, subsampling, colorspace;
    if (tjDecompressHeader3(tj, bytes, (unsigned long)size, &width, &height, &subsampling,
                            &colorspace) != 0)
        goto bad;
    if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
        st = kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s is a CMYK JPEG file; kiln reads "
                        "grayscale and colour (YCbCr, RGB) JPEG files", name);
        goto fail;
    }
    if (width < 1 || height < 1 || (int64_t)width * height > KILN_IMAGE_MAX_PIXELS) {
        st = too_large(ctx, name, "JPEG", width, height);
        goto fail;
    }
    st = alloc_pixels(ctx, name, img, width, height, channels,
                      (size_t)width * (size_t)height * (size_t)channels);
    if (st != KILN_OK)
        goto fail;
    /* A warning (corrupt data, a premature end) is an error too, as in
     * TensorFlow's decode_jpeg: a damaged image must not train silently.
     * LIMITSCANS refuses progressive files of hundreds of scans, a known
     * way to make a small file decode for minutes. */
    if (tjDecompress2(tj, bytes, (unsigned long)size, img->pixels, width, 0, height,
                      channels == 3 ? TJPF_RGB : TJPF_GRAY,
                      TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        goto bad;
    tjDestroy(tj);
    return KILN_OK;
bad:
    st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s is not a valid JPEG file: TurboJPEG: %s", name,
                    tjGetErrorStr2(tj));
fail:
    tjDestroy(tj);
    kiln_image_free(ctx, img);
    return st;
}
#endif

kiln_status kiln_image_decode(kiln_context *ctx, const char *name, const void *bytes,
                              size_t size, int32_t channels, kiln_image *img)
{
    const unsigned char *const b = bytes;
    memset(img, 0, sizeof *img);
    (void)channels;   /* unused in a build with neither library */
    if (size == 0)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is empty; expected a PNG or JPEG file",
                          name);
    if (size >= sizeof png_magic && memcmp(b, png_magic, sizeof png_magic) == 0) {
#if KILN_HAVE_PNG
        return decode_png(ctx, name, bytes, size, channels, img);
#else
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s is a PNG file and this build of "
                          "kiln has no libpng (meson option png)", name);
#endif
    }
    if (size >= sizeof jpeg_magic && memcmp(b, jpeg_magic, sizeof jpeg_magic) == 0) {
#if KILN_HAVE_JPEG
        return decode_jpeg(ctx, name, bytes, size, channels, img);
#else
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s is a JPEG file and this build of "
                          "kiln has no libturbojpeg (meson option jpeg)", name);
#endif
    }
    char head[3 * 8] = "";
    for (size_t i = 0, n = 0; i < size && i < 8; i++)
        n += (size_t)snprintf(head + n, sizeof head - n, "%s%02x", i ? " " : "", b[i]);
    return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is neither a PNG nor a JPEG file: it starts "
                      "with bytes %s", name, head);
}

void kiln_image_free(kiln_context *ctx, kiln_image *img)
{
    kiln_free(ctx, img->pixels);
    memset(img, 0, sizeof *img);
}

/* Where output index i samples an axis of `in` pixels (TensorFlow's
 * half-pixel scaler, in float as TensorFlow computes it): between lo and
 * hi, at `frac` from lo. */
static void source_of(int32_t i, int32_t in, int32_t out, float ratio, int32_t *lo,
                      int32_t *hi, float *frac)
{
    if (in == out) {
        *lo = *hi = i;
        *frac = 0.0f;
        return;
    }
    const float s = ((float)i + 0.5f) * ratio - 0.5f;
    const float f = floorf(s);
    const int32_t top = in - 1, down = (int32_t)f, up = (int32_t)ceilf(s);
    *lo = down < 0 ? 0 : down > top ? top : down;
    *hi = up < 0 ? 0 : up > top ? top : up;
    *frac = s - f;
}

void kiln_image_resize_bilinear(const uint8_t *src, int32_t in_h, int32_t in_w,
                                int32_t channels, float *dst, int32_t out_h, int32_t out_w,
                                float scale, float offset)
{
    const float ry = (float)in_h / (float)out_h, rx = (float)in_w / (float)out_w;
    const size_t c = (size_t)channels, row = (size_t)in_w * c;
    for (int32_t y = 0; y < out_h; y++) {
        int32_t y0, y1;
        float fy;
        source_of(y, in_h, out_h, ry, &y0, &y1, &fy);
        const uint8_t *const r0 = src + (size_t)y0 * row, *const r1 = src + (size_t)y1 * row;
        for (int32_t x = 0; x < out_w; x++) {
            int32_t x0, x1;
            float fx;
            source_of(x, in_w, out_w, rx, &x0, &x1, &fx);
            const size_t a = (size_t)x0 * c, b = (size_t)x1 * c;
            for (size_t k = 0; k < c; k++) {
                const float tl = r0[a + k], tr = r0[b + k], bl = r1[a + k], br = r1[b + k];
                const float top = tl + (tr - tl) * fx, bottom = bl + (br - bl) * fx;
                *dst++ = (top + (bottom - top) * fy) * scale + offset;
            }
        }
    }
}
