/* NumPy .npy files: a preamble (magic, version, header length), a Python
 * dict literal naming descr, fortran_order and shape, then the raw array.
 * Only the literals np.save writes are parsed, without recursion, and every
 * element is decoded as little-endian bytes, so the host's order matters
 * only for the native-order descr '='. */
#include "runtime/formats/npy.h"

#include "runtime/context/context.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_SIZE 6
#define NPY_SUPPORTED "|u1, |i1, <u2, <i2, <i4, <i8, <f2 and <f4"
#define NPY_MAX_HEADER (1 << 20)   /* read into memory: a bound on what a bad file costs */

static const struct {
    char kind;
    int itemsize;
    kiln_dtype dtype;
} npy_types[] = {
    {.kind = 'u', .itemsize = 1, .dtype = KILN_DTYPE_UINT8},
    {.kind = 'i', .itemsize = 1, .dtype = KILN_DTYPE_INT8},
    {.kind = 'u', .itemsize = 2, .dtype = KILN_DTYPE_UINT16},
    {.kind = 'i', .itemsize = 2, .dtype = KILN_DTYPE_INT16},
    {.kind = 'i', .itemsize = 4, .dtype = KILN_DTYPE_INT32},
    {.kind = 'i', .itemsize = 8, .dtype = KILN_DTYPE_INT64},
    {.kind = 'f', .itemsize = 2, .dtype = KILN_DTYPE_FLOAT16},
    {.kind = 'f', .itemsize = 4, .dtype = KILN_DTYPE_FLOAT32},
};

/* The header being parsed, and what it said. */
typedef struct npy_header {
    kiln_context *ctx;
    const char *name;
    const unsigned char *text;
    size_t size, at;
    const unsigned char *descr;   /* the descr string, or NULL */
    size_t descr_size;
    int structured;               /* descr was a list: a structured dtype */
    int fortran_order;            /* -1 until seen */
    int rank;                     /* -1 until seen; may exceed KILN_NPY_MAX_RANK */
    int64_t shape[KILN_NPY_MAX_RANK];
} npy_header;

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* `s` for a message: at most 24 bytes, anything unprintable as '?'. */
static const char *printable(const unsigned char *s, size_t n, char *buf, size_t size)
{
    size_t i = 0;
    for (; i < n && i + 1 < size && i < 24; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
    buf[i] = '\0';
    if (i < n && size > 28)
        strcat(buf, "...");
    return buf;
}

static kiln_status malformed(const npy_header *h, const char *fmt, ...) KILN_PRINTF(2, 3);

static kiln_status malformed(const npy_header *h, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kiln_error(h->ctx, KILN_ERROR_FORMAT, "%s: malformed .npy header: %s (at byte %zu "
                      "of the %zu-byte header)", h->name, what, h->at, h->size);
}

static void skip_space(npy_header *h)
{
    while (h->at < h->size && (h->text[h->at] == ' ' || h->text[h->at] == '\t' ||
                               h->text[h->at] == '\n' || h->text[h->at] == '\r'))
        h->at++;
}

/* The next byte, or -1 at the end of the header. */
static int peek(const npy_header *h)
{
    return h->at < h->size ? h->text[h->at] : -1;
}

/* A quoted string (either quote); *s and *n receive its raw contents. */
static kiln_status parse_string(npy_header *h, const char *what, const unsigned char **s,
                                size_t *n)
{
    const int quote = peek(h);
    if (quote != '\'' && quote != '"')
        return malformed(h, "expected %s as a quoted string", what);
    const size_t start = ++h->at;
    for (; h->at < h->size; h->at++) {
        const unsigned char c = h->text[h->at];
        if (c == quote) {
            *s = h->text + start;
            *n = h->at++ - start;
            return KILN_OK;
        }
        if (c == '\n')
            return malformed(h, "%s: a string runs past the end of its line", what);
        if (c == '\\')
            h->at++;
    }
    h->at = start - 1;
    return malformed(h, "%s: a string is not terminated", what);
}

/* A list (a structured dtype's descr), skipped: brackets counted, strings
 * jumped over. */
static kiln_status skip_list(npy_header *h)
{
    const size_t start = h->at;
    size_t depth = 0;
    while (h->at < h->size) {
        const int c = peek(h);
        if (c == '\'' || c == '"') {
            const unsigned char *s;
            size_t n;
            const kiln_status st = parse_string(h, "'descr'", &s, &n);
            if (st != KILN_OK)
                return st;
            continue;
        }
        h->at++;
        if (c == '[' || c == '(')
            depth++;
        else if ((c == ']' || c == ')') && --depth == 0)
            return KILN_OK;
    }
    h->at = start;
    return malformed(h, "the list of 'descr' is not closed");
}

static kiln_status parse_bool(npy_header *h, int *value)
{
    const size_t left = h->size - h->at;
    const unsigned char *p = h->text + h->at;
    size_t n = 0;
    if (left >= 4 && memcmp(p, "True", 4) == 0)
        n = 4;
    else if (left >= 5 && memcmp(p, "False", 5) == 0)
        n = 5;
    const int c = n < left ? p[n] : ' ';
    if (n == 0 || c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
        return malformed(h, "'fortran_order' must be True or False");
    *value = n == 4;
    h->at += n;
    return KILN_OK;
}

/* A tuple of non-negative decimal integers: (), (3,), (3, 4). Python 2
 * wrote 3L; that suffix is accepted. */
static kiln_status parse_shape(npy_header *h)
{
    if (peek(h) != '(')
        return malformed(h, "'shape' must be a tuple of integers such as (60000, 28, 28)");
    h->at++;
    h->rank = 0;
    for (int commas = 0;;) {
        skip_space(h);
        if (peek(h) == ')') {
            if (h->rank == 1 && commas == 0)
                return malformed(h, "'shape' is a number in parentheses, not a tuple: a "
                                 "single dimension needs a trailing comma, as in (3,)");
            h->at++;
            return KILN_OK;
        }
        if (h->rank > commas)
            return malformed(h, "expected ',' or ')' after dimension %d of 'shape'", h->rank - 1);
        if (peek(h) == '-')
            return malformed(h, "dimension %d of 'shape' is negative", h->rank);
        if (peek(h) < '0' || peek(h) > '9')
            return malformed(h, "dimension %d of 'shape' is not a non-negative integer",
                             h->rank);
        int64_t v = 0;
        for (int c = peek(h); c >= '0' && c <= '9'; c = peek(h)) {
            if (v > (INT64_MAX - (c - '0')) / 10)
                return malformed(h, "dimension %d of 'shape' is larger than %lld", h->rank,
                                 (long long)INT64_MAX);
            v = 10 * v + (c - '0');
            h->at++;
        }
        if (peek(h) == 'L' || peek(h) == 'l')
            h->at++;
        if (h->rank < KILN_NPY_MAX_RANK)
            h->shape[h->rank] = v;
        h->rank++;
        skip_space(h);
        if (peek(h) == ',') {
            h->at++;
            commas++;
        }
    }
}

/* The dict: each of the three keys once, in any order, nothing else. */
static kiln_status parse_dict(npy_header *h)
{
    skip_space(h);
    if (peek(h) != '{')
        return malformed(h, "it does not start with '{'");
    h->at++;
    h->fortran_order = -1;
    h->rank = -1;
    for (;;) {
        skip_space(h);
        if (peek(h) == '}')
            break;
        const unsigned char *key;
        size_t n;
        kiln_status st = parse_string(h, "a key", &key, &n);
        if (st != KILN_OK)
            return st;
        const size_t key_at = h->at - n - 2;
        skip_space(h);
        if (peek(h) != ':')
            return malformed(h, "expected ':' after a key");
        h->at++;
        skip_space(h);
        int seen;
        if (n == 5 && memcmp(key, "descr", 5) == 0) {
            seen = h->descr || h->structured;
            if (!seen && peek(h) == '[') {
                h->structured = 1;
                st = skip_list(h);
            } else if (!seen) {
                st = parse_string(h, "'descr'", &h->descr, &h->descr_size);
            }
        } else if (n == 13 && memcmp(key, "fortran_order", 13) == 0) {
            seen = h->fortran_order >= 0;
            if (!seen)
                st = parse_bool(h, &h->fortran_order);
        } else if (n == 5 && memcmp(key, "shape", 5) == 0) {
            seen = h->rank >= 0;
            if (!seen)
                st = parse_shape(h);
        } else {
            char buf[32];
            h->at = key_at;
            return malformed(h, "unexpected key '%s' (a .npy header holds 'descr', "
                             "'fortran_order' and 'shape')", printable(key, n, buf, sizeof buf));
        }
        if (seen) {
            h->at = key_at;
            return malformed(h, "the key '%.*s' appears twice", (int)n, (const char *)key);
        }
        if (st != KILN_OK)
            return st;
        skip_space(h);
        if (peek(h) == ',')
            h->at++;
        else if (peek(h) != '}')
            return malformed(h, "expected ',' or '}' after the value of '%.*s'", (int)n,
                             (const char *)key);
    }
    h->at++;
    skip_space(h);
    if (h->at < h->size)
        return malformed(h, "unexpected text after the dict");
    if (!h->descr && !h->structured)
        return malformed(h, "the key 'descr' is missing");
    if (h->fortran_order < 0)
        return malformed(h, "the key 'fortran_order' is missing");
    if (h->rank < 0)
        return malformed(h, "the key 'shape' is missing");
    return KILN_OK;
}

/* The dtype kiln reads for a descr such as '<f4', or UNSUPPORTED. */
static kiln_status take_dtype(const npy_header *h, kiln_npy *out)
{
    char buf[32];
    if (h->structured)
        return kiln_error(h->ctx, KILN_ERROR_UNSUPPORTED, "%s has a structured dtype; kiln "
                          "reads plain arrays of %s", h->name, NPY_SUPPORTED);
    const unsigned char *d = h->descr;
    size_t n = h->descr_size;
    int order = '=';   /* no byte-order character: native */
    if (n > 0 && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '='))
        order = d[0], d++, n--;
    int found = -1;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (n == 2 && d[0] == npy_types[i].kind && d[1] == '0' + npy_types[i].itemsize)
            found = (int)i;
    const char *descr = printable(h->descr, h->descr_size, buf, sizeof buf);
    if (found < 0)
        return kiln_error(h->ctx, KILN_ERROR_UNSUPPORTED, "%s has dtype '%s'; kiln reads %s",
                          h->name, descr, NPY_SUPPORTED);
    const int itemsize = npy_types[found].itemsize;
    if (itemsize > 1 && (order == '>' || (order == '=' && !host_is_little_endian())))
        return kiln_error(h->ctx, KILN_ERROR_UNSUPPORTED, "%s is big-endian (dtype '%s'); kiln "
                          "reads little-endian data: save it with "
                          "a.astype(a.dtype.newbyteorder('<'))", h->name, descr);
    if (itemsize > 1 && order == '|')
        return kiln_error(h->ctx, KILN_ERROR_UNSUPPORTED, "%s has dtype '%s': byte order '|' "
                          "is for 1-byte types; kiln reads %s", h->name, descr, NPY_SUPPORTED);
    out->dtype = npy_types[found].dtype;
    out->itemsize = itemsize;
    return KILN_OK;
}

/* "(2, 3)" into buf. */
static const char *shape_str(const kiln_npy *a, char *buf, size_t size)
{
    int n = snprintf(buf, size, "(");
    for (int i = 0; i < a->rank && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)a->shape[i]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, a->rank == 1 ? ",)" : ")");
    return buf;
}

/* Shape and size: every product fits int64 (zero dimensions aside), and
 * the file holds the data the shape needs; bytes after it are ignored, as
 * np.load ignores them (a file written over a longer one in place). */
static kiln_status take_shape(const npy_header *h, size_t data_start, size_t size, kiln_npy *out)
{
    char buf[160], descr[32];
    if (h->rank > KILN_NPY_MAX_RANK)
        return kiln_error(h->ctx, KILN_ERROR_UNSUPPORTED, "%s has %d dimensions; kiln reads at "
                          "most %d (samples, then up to %d per sample)", h->name, h->rank,
                          KILN_NPY_MAX_RANK, KILN_MAX_RANK);
    out->rank = h->rank;
    memcpy(out->shape, h->shape, sizeof out->shape);
    int64_t nonzero = out->itemsize, elements = 1;
    for (int i = 0; i < out->rank; i++) {
        const int64_t d = out->shape[i];
        if (d > 0 && nonzero > INT64_MAX / d)
            return kiln_error(h->ctx, KILN_ERROR_FORMAT, "%s: shape %s of %d-byte elements "
                              "overflows: its dimensions and element size multiply to more "
                              "than 2^63", h->name, shape_str(out, buf, sizeof buf),
                              out->itemsize);
        nonzero *= d > 0 ? d : 1;
        elements *= d;
    }
    out->rows = out->rank > 0 ? out->shape[0] : 1;
    out->row_size = 1;
    for (int i = 1; i < out->rank; i++)
        out->row_size *= out->shape[i];
    const uint64_t want = (uint64_t)elements * (uint64_t)out->itemsize;
    const uint64_t have = size - data_start;
    if (want > have)
        return kiln_error(h->ctx, KILN_ERROR_FORMAT, "%s: shape %s of dtype '%s' needs %llu "
                          "bytes of data after the header (from byte %zu), the file has %llu",
                          h->name, shape_str(out, buf, sizeof buf),
                          printable(h->descr, h->descr_size, descr, sizeof descr),
                          (unsigned long long)want, data_start, (unsigned long long)have);
    return KILN_OK;
}

/* The preamble, from its first min(size, 12) bytes: magic, version, and
 * the header's length (*preamble + *header <= size). */
static kiln_status parse_preamble(kiln_context *ctx, const char *name,
                                  const unsigned char *bytes, size_t size, size_t *preamble,
                                  size_t *header)
{
    const size_t magic = size < NPY_MAGIC_SIZE ? size : NPY_MAGIC_SIZE;
    if (magic > 0 && memcmp(bytes, NPY_MAGIC, magic) != 0)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is not a .npy file: it does not start "
                          "with \\x93NUMPY", name);
    if (size < 10)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is truncated: %zu bytes, shorter than a "
                          ".npy preamble", name, size);
    const int major = bytes[6], minor = bytes[7];
    if (major < 1 || major > 3 || minor != 0)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s is a .npy file of version %d.%d; "
                          "kiln reads versions 1.0, 2.0 and 3.0", name, major, minor);
    *preamble = major == 1 ? 10 : 12;
    if (size < *preamble)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is truncated: %zu bytes, shorter than a "
                          "version %d.0 .npy preamble", name, size, major);
    uint64_t length = (uint64_t)bytes[8] | (uint64_t)bytes[9] << 8;
    if (major > 1)
        length |= (uint64_t)bytes[10] << 16 | (uint64_t)bytes[11] << 24;
    if (length > size - *preamble)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s: its .npy header of %llu bytes runs past "
                          "the end of the file (%zu bytes)", name, (unsigned long long)length,
                          size);
    *header = (size_t)length;
    return KILN_OK;
}

/* The header's dict (`text`, `length` bytes, after `preamble` bytes of a
 * file of `size`) into `out`, its data not yet placed. */
static kiln_status parse_header(kiln_context *ctx, const char *name, const unsigned char *text,
                                size_t length, size_t preamble, size_t size, kiln_npy *out)
{
    npy_header h = {.ctx = ctx, .name = name, .text = text, .size = length};
    kiln_status st = parse_dict(&h);
    if (st == KILN_OK)
        st = take_dtype(&h, out);
    if (st == KILN_OK && h.fortran_order)
        st = kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s is in Fortran order; kiln reads C "
                        "order: save it with np.ascontiguousarray(a)", name);
    if (st == KILN_OK)
        st = take_shape(&h, preamble + length, size, out);
    if (st != KILN_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    out->name = name;
    out->offset = (int64_t)(preamble + length);
    return KILN_OK;
}

kiln_status kiln_npy_parse(kiln_context *ctx, const char *name, const unsigned char *bytes,
                           size_t size, kiln_npy *out)
{
    memset(out, 0, sizeof *out);
    size_t preamble, header;
    kiln_status st = parse_preamble(ctx, name, bytes, size, &preamble, &header);
    if (st == KILN_OK)
        st = parse_header(ctx, name, bytes + preamble, header, preamble, size, out);
    if (st == KILN_OK)
        out->data = bytes + out->offset;
    return st;
}

/* pread until `n` bytes or the end of the file: how many arrived, or -1
 * (errno set). */
static int64_t read_at(int fd, void *buf, size_t n, int64_t at)
{
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(fd, (unsigned char *)buf + got, n - got, (off_t)at + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (int64_t)got;
}

/* Opens `path` as a regular file: *fd and *size, or KILN_ERROR_IO. */
static kiln_status open_file(kiln_context *ctx, const char *path, int *fd, size_t *size)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return kiln_error(ctx, KILN_ERROR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    kiln_status st = KILN_OK;
    if (fstat(*fd, &sb) != 0)
        st = kiln_error(ctx, KILN_ERROR_IO, "cannot examine %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = kiln_error(ctx, KILN_ERROR_IO, "%s is not a regular file", path);
    else if ((uintmax_t)sb.st_size > SIZE_MAX)
        st = kiln_error(ctx, KILN_ERROR_IO, "%s is too large for this process", path);
    if (st != KILN_OK) {
        close(*fd);
        *fd = -1;
        return st;
    }
    *size = (size_t)sb.st_size;
    return KILN_OK;
}

static kiln_status read_failed(kiln_context *ctx, const char *path, int64_t got)
{
    return kiln_error(ctx, KILN_ERROR_IO, "reading %s failed: %s", path,
                      got < 0 ? strerror(errno) : "the file is shorter than when it was opened");
}

kiln_status kiln_npy_open(kiln_context *ctx, const char *path, kiln_npy *out, int *fd)
{
    memset(out, 0, sizeof *out);
    size_t size, preamble, header;
    kiln_status st = open_file(ctx, path, fd, &size);
    if (st != KILN_OK)
        return st;
    unsigned char start[12];
    const size_t n = size < sizeof start ? size : sizeof start;
    int64_t got = read_at(*fd, start, n, 0);
    st = got == (int64_t)n ? parse_preamble(ctx, path, start, size, &preamble, &header)
                           : read_failed(ctx, path, got);
    if (st == KILN_OK && header > NPY_MAX_HEADER)
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s: its .npy header is %zu bytes; kiln reads "
                        "headers of up to %d bytes (NumPy's own limit is 10000)", path, header,
                        NPY_MAX_HEADER);
    unsigned char *text = NULL;
    if (st == KILN_OK) {
        text = kiln_alloc(ctx, header ? header : 1);
        if (!text)
            st = kiln_error_oom(ctx, path, header);
    }
    if (st == KILN_OK) {
        got = read_at(*fd, text, header, (int64_t)preamble);
        st = got == (int64_t)header ? parse_header(ctx, path, text, header, preamble, size, out)
                                    : read_failed(ctx, path, got);
    }
    kiln_free(ctx, text);
    if (st != KILN_OK) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

kiln_status kiln_npy_map(kiln_context *ctx, const char *path, kiln_npy *out)
{
    memset(out, 0, sizeof *out);
    int fd;
    size_t size;
    kiln_status st = open_file(ctx, path, &fd, &size);
    if (st != KILN_OK)
        return st;
    unsigned char *bytes = kiln_alloc(ctx, size ? size : 1);
    if (!bytes)
        st = kiln_error_oom(ctx, path, size);
    const int64_t got = bytes ? read_at(fd, bytes, size, 0) : 0;
    if (st == KILN_OK && got != (int64_t)size)
        st = read_failed(ctx, path, got);
    close(fd);
    if (st == KILN_OK)
        st = kiln_npy_parse(ctx, path, bytes, size, out);
    if (st != KILN_OK) {
        kiln_free(ctx, bytes);
        return st;
    }
    out->owner = ctx;
    out->bytes = bytes;
    return KILN_OK;
}

void kiln_npy_unmap(kiln_npy *a)
{
    if (a->bytes)
        kiln_free(a->owner, a->bytes);
    memset(a, 0, sizeof *a);
}

float kiln_npy_half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | mantissa << 13;   /* Inf, or NaN with its payload */
    } else if (exponent > 0) {
        bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
    } else {
        /* Zero or subnormal: mantissa * 2^-24, exact in float. */
        const float v = (float)mantissa * 0x1p-24f;
        memcpy(&bits, &v, sizeof bits);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t le16(const unsigned char *b)
{
    return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t le64(const unsigned char *b)
{
    return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

/* Two's complement from the bits, without implementation-defined casts. */
static int32_t signed_of(uint32_t u, int bits)
{
    const int64_t v = (int64_t)u;
    return (int32_t)(v >= (int64_t)1 << (bits - 1) ? v - ((int64_t)1 << bits) : v);
}

static int64_t signed64_of(uint64_t u)
{
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static float float_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* One loop per dtype, so the dtype is looked at once per call. Scale 1 and
 * offset 0 keep values as stored (v * 1 + 0 would turn -0 into +0). */
#define NPY_CONVERT(load)                                              \
    for (size_t i = 0; i < n; i++) {                                   \
        const float v = (load);                                        \
        out[i] = as_stored ? v : v * scale + offset;                   \
    }                                                                  \
    break

void kiln_npy_read_floats(const kiln_npy *a, int64_t first_row, int64_t rows, float scale,
                          float offset, float *out)
{
    assert(first_row >= 0 && rows >= 0 && first_row + rows <= a->rows);
    const size_t n = (size_t)(rows * a->row_size);
    const unsigned char *p = a->data + (size_t)(first_row * a->row_size) * (size_t)a->itemsize;
    const int as_stored = scale == 1.0f && offset == 0.0f;
    switch (a->dtype) {
    case KILN_DTYPE_UINT8: NPY_CONVERT((float)p[i]);
    case KILN_DTYPE_INT8: NPY_CONVERT((float)signed_of(p[i], 8));
    case KILN_DTYPE_UINT16: NPY_CONVERT((float)le16(p + 2 * i));
    case KILN_DTYPE_INT16: NPY_CONVERT((float)signed_of(le16(p + 2 * i), 16));
    case KILN_DTYPE_INT32: NPY_CONVERT((float)signed_of(le32(p + 4 * i), 32));
    case KILN_DTYPE_INT64: NPY_CONVERT((float)signed64_of(le64(p + 8 * i)));
    case KILN_DTYPE_FLOAT16: NPY_CONVERT(kiln_npy_half_to_float(le16(p + 2 * i)));
    case KILN_DTYPE_FLOAT32: NPY_CONVERT(float_of(le32(p + 4 * i)));
    }
}

int64_t kiln_npy_read_int(const kiln_npy *a, int64_t row)
{
    assert(row >= 0 && row < a->rows && a->row_size == 1);
    const unsigned char *p = a->data + (size_t)row * (size_t)a->itemsize;
    switch (a->dtype) {
    case KILN_DTYPE_UINT8: return p[0];
    case KILN_DTYPE_INT8: return signed_of(p[0], 8);
    case KILN_DTYPE_UINT16: return le16(p);
    case KILN_DTYPE_INT16: return signed_of(le16(p), 16);
    case KILN_DTYPE_INT32: return signed_of(le32(p), 32);
    case KILN_DTYPE_INT64: return signed64_of(le64(p));
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_FLOAT32: break;
    }
    assert(!"an integer array");
    return 0;
}

int kiln_npy_read_label(const kiln_npy *a, int64_t row, int32_t *out)
{
    const int64_t v = kiln_npy_read_int(a, row);
    *out = (int32_t)(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v);
    return v == *out ? 0 : -1;
}
