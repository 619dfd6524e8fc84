/* IDX files (MNIST, Fashion-MNIST): big-endian header, then unsigned bytes.
 * Plain or gzip-compressed; zlib reads both when the build has it. A plain
 * file is read a sample at a time with pread, never mapped: a mapped file
 * cut short by another process (a copy over it) would kill the reader with
 * SIGBUS, where pread gives a short count, an error naming the file. */
#include "runtime/data/dataset.h"

#include "kiln_config.h"
#include "runtime/context/context.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

#define IDX_IMAGES_MAGIC 0x00000803u  /* unsigned bytes, 3 dimensions */
#define IDX_LABELS_MAGIC 0x00000801u  /* unsigned bytes, 1 dimension */
#define IDX_MAX_BYTES ((uint64_t)INT32_MAX)  /* refuse headers promising more */
#define IDX_CHUNK (1u << 30)          /* gzread takes an unsigned count */

/* An IDX file read from disk (plain or gzip, zlib reading both when the
 * build has it), or from memory (plain or gzip; the fuzzer's entry point). */
typedef struct idx_file {
    const char *path;            /* its name in messages */
    const unsigned char *mem;    /* in memory: the bytes, else NULL */
    size_t mem_size, mem_pos;
    int fd;                      /* a plain regular file, read with pread; else -1 */
    uint64_t file_size, file_pos;
#if KILN_HAVE_ZLIB
    gzFile gz;
    z_stream z;                  /* in memory and gzip-compressed */
    int z_open;
#else
    FILE *f;
#endif
} idx_file;

static int is_gzip(const unsigned char *b, size_t n)
{
    return n >= 2 && b[0] == 0x1f && b[1] == 0x8b;
}

/* pread until `n` bytes or the end of the file: how many arrived, or -1
 * (errno set). */
static int64_t read_at(int fd, void *buf, uint64_t n, uint64_t at)
{
    uint64_t got = 0;
    while (got < n) {
        const uint64_t left = n - got;
        const ssize_t r = pread(fd, (unsigned char *)buf + got,
                                (size_t)(left > IDX_CHUNK ? IDX_CHUNK : left),
                                (off_t)(at + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (uint64_t)r;
    }
    return (int64_t)got;
}

/* A plain (not gzip) regular file is kept open, to be read with pread; 0
 * when it is gzip or not a regular file, to be read through the stream. */
static int open_plain(idx_file *f)
{
    const int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    unsigned char magic[2];
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read_at(fd, magic, 2, 0) == 2 &&
        !is_gzip(magic, 2)) {
        f->fd = fd;
        f->file_size = (uint64_t)st.st_size;
        return 1;
    }
    close(fd);
    return 0;
}

static kiln_status idx_open(kiln_context *ctx, idx_file *f)
{
    const char *path = f->path;
    if (!f->mem && open_plain(f))
        return KILN_OK;
#if KILN_HAVE_ZLIB
    if (f->mem) {
        if (!is_gzip(f->mem, f->mem_size))
            return KILN_OK;
        memset(&f->z, 0, sizeof f->z);
        if (inflateInit2(&f->z, 16 + MAX_WBITS) != Z_OK)   /* 16: gzip framing */
            return kiln_error_oom(ctx, "a gzip stream", sizeof f->z);
        f->z_open = 1;
        return KILN_OK;
    }
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return kiln_error(ctx, KILN_ERROR_IO, "cannot open %s: %s", path,
                          errno ? strerror(errno) : "out of memory");
    gzbuffer(f->gz, 1u << 17);
#else
    unsigned char magic[2];
    size_t n = f->mem_size < 2 ? f->mem_size : 2;
    if (f->mem) {
        memcpy(magic, f->mem, n);
    } else {
        f->f = fopen(path, "rb");
        if (!f->f)
            return kiln_error(ctx, KILN_ERROR_IO, "cannot open %s: %s", path, strerror(errno));
        n = fread(magic, 1, 2, f->f);
        rewind(f->f);
    }
    if (is_gzip(magic, n))
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED,
                          "%s is gzip-compressed and this build of kiln has no zlib", path);
#endif
    return KILN_OK;
}

/* Reports why the last read failed: the system (KILN_ERROR_IO) or a corrupt
 * compressed stream (KILN_ERROR_FORMAT). */
static kiln_status idx_read_failed(kiln_context *ctx, idx_file *f)
{
#if KILN_HAVE_ZLIB
    if (f->z_open)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is not a valid gzip stream: %s",
                          f->path, f->z.msg ? f->z.msg : "corrupt data");
    int code = 0;
    const char *text = gzerror(f->gz, &code);
    if (code != Z_ERRNO) {
        const size_t n = strlen(f->path);
        if (strncmp(text, f->path, n) == 0 && text[n] == ':')
            text += n + 1 + (text[n + 1] == ' ');  /* zlib prefixes the path */
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is not a valid gzip stream: %s",
                          f->path, text);
    }
#endif
    return kiln_error(ctx, KILN_ERROR_IO, "reading %s failed: %s", f->path, strerror(errno));
}

/* From memory: copies, or inflates; -1 on a corrupt gzip stream. */
static int64_t mem_read(idx_file *f, unsigned char *p, uint64_t n)
{
#if KILN_HAVE_ZLIB
    if (f->z_open) {
        uint64_t got = 0;
        while (got < n) {
            if (f->z.avail_in == 0 && f->mem_pos < f->mem_size) {
                const size_t left = f->mem_size - f->mem_pos;
                f->z.next_in = (unsigned char *)f->mem + f->mem_pos;   /* only read */
                f->z.avail_in = left > IDX_CHUNK ? IDX_CHUNK : (unsigned)left;
                f->mem_pos += f->z.avail_in;
            }
            const uint64_t want = n - got;
            f->z.next_out = p + got;
            f->z.avail_out = want > IDX_CHUNK ? IDX_CHUNK : (unsigned)want;
            const unsigned room = f->z.avail_out;
            const int r = inflate(&f->z, Z_NO_FLUSH);
            got += room - f->z.avail_out;
            if (r == Z_STREAM_END ||
                (r == Z_BUF_ERROR && f->z.avail_in == 0 && f->mem_pos == f->mem_size))
                break;   /* the end of the data, or of the input: a short count */
            if (r != Z_OK)
                return -1;
        }
        return (int64_t)got;
    }
#endif
    const uint64_t left = f->mem_size - f->mem_pos, take = n < left ? n : left;
    memcpy(p, f->mem + f->mem_pos, (size_t)take);
    f->mem_pos += (size_t)take;
    return (int64_t)take;
}

/* Reads up to n bytes in large chunks; returns how many were read, or -1 on
 * a read error (a short count means end of file). */
static int64_t idx_read(idx_file *f, void *buf, uint64_t n)
{
    unsigned char *const p = buf;
    if (f->mem)
        return mem_read(f, p, n);
    if (f->fd >= 0) {
        const int64_t got = read_at(f->fd, p, n, f->file_pos);
        f->file_pos += got > 0 ? (uint64_t)got : 0;
        return got;
    }
    uint64_t got = 0;
    while (got < n) {
        const unsigned chunk = n - got > IDX_CHUNK ? IDX_CHUNK : (unsigned)(n - got);
#if KILN_HAVE_ZLIB
        const int r = gzread(f->gz, p + got, chunk);
        if (r < 0)
            return -1;
#else
        const size_t r = fread(p + got, 1, chunk, f->f);
        if (ferror(f->f))
            return -1;
#endif
        if (r == 0)
            break;
        got += (uint64_t)r;
    }
    return (int64_t)got;
}

static void idx_close(idx_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
#if KILN_HAVE_ZLIB
    if (f->z_open)
        inflateEnd(&f->z);
    f->z_open = 0;
    if (f->gz)
        gzclose(f->gz);
    f->gz = NULL;
#else
    if (f->f)
        fclose(f->f);
    f->f = NULL;
#endif
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads the header: magic, then `n_dims` big-endian sizes, each > 0. The
 * magic is checked first, so a wrong file is named as such even when short. */
static kiln_status read_header(kiln_context *ctx, idx_file *f, uint32_t magic, int n_dims,
                               uint32_t *dims)
{
    const char *what = n_dims == 3 ? "images" : "labels";
    unsigned char head[16];
    const uint64_t want = 4u * (uint64_t)(n_dims + 1);
    const int64_t got = idx_read(f, head, want);
    if (got < 0)
        return idx_read_failed(ctx, f);
    if (got >= 4 && be32(head) != magic)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is not an IDX %s file: magic 0x%08x, "
                          "expected 0x%08x", f->path, what, (unsigned)be32(head),
                          (unsigned)magic);
    if ((uint64_t)got < want)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is truncated: expected a %llu-byte IDX "
                          "header, got %lld bytes", f->path, (unsigned long long)want,
                          (long long)got);
    for (int i = 0; i < n_dims; i++) {
        dims[i] = be32(head + 4 * (i + 1));
        if (dims[i] == 0)
            return kiln_error(ctx, KILN_ERROR_FORMAT, "%s: dimension %d of the IDX header is "
                              "0; IDX %s need sizes > 0", f->path, i, what);
    }
    return KILN_OK;
}

/* Reads `bytes` into a buffer that grows as data arrives, so a header that
 * promises gigabytes in a small (or compressed) file costs no more memory
 * than the file holds. */
static kiln_status read_body(kiln_context *ctx, idx_file *f, unsigned char **out,
                             uint64_t bytes, const char *what)
{
    unsigned char *buf = NULL;
    uint64_t have = 0;
    *out = NULL;
    while (have < bytes) {
        const uint64_t step = have < (1u << 20) ? (1u << 20) : have;
        const uint64_t want = bytes - have < step ? bytes - have : step;
        unsigned char *grown = kiln_realloc(ctx, buf, (size_t)(have + want));
        if (!grown) {
            kiln_free(ctx, buf);
            return kiln_error_oom(ctx, f->path, (size_t)(have + want));
        }
        buf = grown;
        const int64_t got = idx_read(f, buf + have, want);
        if (got < 0) {
            kiln_free(ctx, buf);
            return idx_read_failed(ctx, f);
        }
        have += (uint64_t)got;
        if ((uint64_t)got < want) {
            kiln_free(ctx, buf);
            return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is truncated: expected %llu bytes of "
                              "%s, got %llu", f->path, (unsigned long long)bytes, what,
                              (unsigned long long)have);
        }
    }
    *out = buf;
    return KILN_OK;
}

/* The dataset's source: each file's body read into memory (a gzip file,
 * or the fuzzer's bytes), or left in a plain file and read with pread;
 * converted to floats one sample at a time. Part 0 is the images, part 1
 * the labels. */
typedef struct idx_source {
    unsigned char *body[2];         /* in memory, or NULL */
    int fd[2];                      /* else the file, its body from offset[k] */
    uint64_t offset[2];
    char *path[2];                  /* for messages ("labels in memory": the fuzzer's) */
    size_t per_image;
    float scale;
} idx_source;

/* Part k's `bytes` of body: the file's place when it is plain (its size
 * checked now; a file cut short later is caught as it is read), else read
 * into memory. */
static kiln_status take_body(kiln_context *ctx, idx_file *f, idx_source *src, int k,
                             uint64_t bytes, const char *what)
{
    src->path[k] = kiln_strdup(ctx, f->path);
    if (!src->path[k])
        return kiln_error_oom(ctx, "a file name", strlen(f->path) + 1);
    if (f->fd < 0)
        return read_body(ctx, f, &src->body[k], bytes, what);
    const uint64_t left = f->file_size - f->file_pos;
    if (left < bytes)
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s is truncated: expected %llu bytes of %s, "
                          "got %llu", f->path, (unsigned long long)bytes, what,
                          (unsigned long long)left);
    src->fd[k] = f->fd;   /* the source's now */
    src->offset[k] = f->file_pos;
    f->fd = -1;
    return KILN_OK;
}

/* `n` bytes of part k from byte `at` of its body; a plain file cut short
 * since it was opened is an error naming it and the sample. */
static kiln_status body_read(const kiln_dataset *ds, int k, uint64_t at, size_t n,
                             unsigned char *out, int64_t sample)
{
    const idx_source *s = ds->source;
    if (s->body[k]) {
        memcpy(out, s->body[k] + at, n);
        return KILN_OK;
    }
    const int64_t got = read_at(s->fd[k], out, n, s->offset[k] + at);
    if (got == (int64_t)n)
        return KILN_OK;
    return kiln_error(ds->ctx, KILN_ERROR_IO, "%s: reading %s %lld failed: %s", s->path[k],
                      k == 0 ? "sample" : "the label of sample", (long long)sample,
                      got < 0 ? strerror(errno) : "the file is shorter than when it was opened");
}

static kiln_status idx_source_read(const kiln_dataset *ds, int64_t index,
                                   const kiln_read_plan *plan, float *features,
                                   void *label)
{
    (void)plan;
    const idx_source *s = ds->source;
    unsigned char chunk[4096];
    for (size_t done = 0; features && done < s->per_image;) {
        const size_t n = s->per_image - done < sizeof chunk ? s->per_image - done
                                                             : sizeof chunk;
        const kiln_status st = body_read(ds, 0, (uint64_t)index * s->per_image + done, n,
                                         chunk, index);
        if (st != KILN_OK)
            return st;
        for (size_t i = 0; i < n; i++)
            features[done + i] = (float)chunk[i] * s->scale;
        done += n;
    }
    if (!label)
        return KILN_OK;
    const kiln_status st = body_read(ds, 1, (uint64_t)index, 1, chunk, index);
    if (st == KILN_OK)
        *(int32_t *)label = chunk[0];
    return st;
}

static void idx_source_free(kiln_context *ctx, idx_source *s)
{
    for (int k = 0; k < 2; k++) {
        kiln_free(ctx, s->body[k]);
        kiln_free(ctx, s->path[k]);
        if (s->fd[k] >= 0)
            close(s->fd[k]);
    }
    kiln_free(ctx, s);
}

static void idx_source_destroy(kiln_dataset *ds)
{
    idx_source_free(ds->ctx, ds->source);
}

static kiln_status idx_find_label(const kiln_dataset *ds, int32_t part, int64_t first,
                                  int64_t count, int32_t limit, int32_t ignore,
                                  kiln_label_hit *hit)
{
    (void)part;
    const idx_source *s = ds->source;
    unsigned char chunk[4096];
    hit->searched = 1;
    for (int64_t i = first; i < first + count; i += (int64_t)sizeof chunk) {
        const int64_t n = first + count - i < (int64_t)sizeof chunk ? first + count - i
                                                                    : (int64_t)sizeof chunk;
        const kiln_status st = body_read(ds, 1, (uint64_t)i, (size_t)n, chunk, i);
        if (st != KILN_OK)
            return st;
        for (int64_t k = 0; k < n; k++) {
            if (chunk[k] < limit || chunk[k] == ignore)
                continue;
            hit->sample = i + k;
            hit->label = chunk[k];
            snprintf(hit->where, sizeof hit->where, "%s", s->path[1]);
            return KILN_OK;
        }
    }
    return KILN_OK;
}

static const kiln_source_ops idx_ops = {
    .kind = "idx", .read = idx_source_read, .destroy = idx_source_destroy,
    .find_label = idx_find_label,
};

static kiln_status check_args(kiln_context *ctx, const char *images_path,
                              const char *labels_path, const kiln_idx_options *o)
{
    const char *fn = "kiln_dataset_from_idx";
    if (!images_path)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: images_path is NULL", fn);
    if (!labels_path)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: labels_path is NULL", fn);
    if (o->limit < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: limit is %lld; it must be >= 0 (0: all samples)", fn,
                          (long long)o->limit);
    /* A negative scale is surely a mistake; NaN or Inf would poison every
     * pixel, and so would a scale that turns 255 into Inf. */
    if (!isfinite(o->scale) || o->scale < 0.0f || o->scale > FLT_MAX / 255.0f)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: scale is %g; it must be finite, >= 0 and <= FLT_MAX / 255 "
                          "(0: 1/255)", fn, (double)o->scale);
    return KILN_OK;
}

/* Reads both files (opened here, images first, so that a wrong image file
 * is named before a missing label file) into a dataset. */
static kiln_status idx_load(kiln_context *ctx, idx_file *img, idx_file *lab,
                            const kiln_idx_options *o, kiln_dataset **out)
{
    const float scale = o->scale > 0.0f ? o->scale : 1.0f / 255.0f;
    uint32_t idims[3], ldims[1];
    kiln_dataset *ds = NULL;
    idx_source *src = kiln_calloc(ctx, 1, sizeof *src);
    if (!src)
        return kiln_error_oom(ctx, "an IDX source", sizeof *src);
    src->fd[0] = src->fd[1] = -1;
    kiln_status st = idx_open(ctx, img);
    if (st == KILN_OK)
        st = read_header(ctx, img, IDX_IMAGES_MAGIC, 3, idims);
    if (st == KILN_OK)
        st = idx_open(ctx, lab);
    if (st == KILN_OK)
        st = read_header(ctx, lab, IDX_LABELS_MAGIC, 1, ldims);
    if (st != KILN_OK)
        goto fail;
    if (idims[0] != ldims[0]) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s has %u images but %s has %u labels",
                        img->path, (unsigned)idims[0], lab->path, (unsigned)ldims[0]);
        goto fail;
    }
    /* Two uint32 multiply exactly in 64 bits; the cap on the whole file also keeps
     * rows and cols within int32. */
    const uint64_t per_image = (uint64_t)idims[1] * idims[2];
    if (per_image > IDX_MAX_BYTES || idims[0] > IDX_MAX_BYTES / per_image) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s: a header of %u images of %u x %u bytes "
                        "is beyond the %llu bytes kiln reads", img->path, (unsigned)idims[0],
                        (unsigned)idims[1], (unsigned)idims[2],
                        (unsigned long long)IDX_MAX_BYTES);
        goto fail;
    }
    const int64_t count = o->limit > 0 && o->limit < idims[0] ? o->limit : (int64_t)idims[0];
    const kiln_shape shape = {.rank = 3, .dims = {(int32_t)idims[1], (int32_t)idims[2], 1}};
    /* The data first: the dataset is made only for what really arrived. */
    st = take_body(ctx, img, src, 0, (uint64_t)count * per_image, "pixels");
    if (st == KILN_OK)
        st = take_body(ctx, lab, src, 1, (uint64_t)count, "labels");
    if (st == KILN_OK)
        st = kiln_dataset_new_streamed(ctx, count, &shape, KILN_LABELS_SPARSE, 1, &ds);
    if (st != KILN_OK)
        goto fail;
    src->per_image = (size_t)per_image;
    src->scale = scale;
    ds->ops = &idx_ops;
    ds->source = src;
    ds->dtype = KILN_DTYPE_UINT8;
    src = NULL;
    unsigned char chunk[4096];   /* the largest label, a chunk at a time */
    for (int64_t i = 0; i < count && st == KILN_OK; i += (int64_t)sizeof chunk) {
        const size_t n = count - i < (int64_t)sizeof chunk ? (size_t)(count - i) : sizeof chunk;
        st = body_read(ds, 1, (uint64_t)i, n, chunk, i);
        for (size_t k = 0; st == KILN_OK && k < n; k++)
            ds->max_label = chunk[k] > ds->max_label ? chunk[k] : ds->max_label;
    }
    if (st == KILN_OK)
        *out = ds;
    else
        kiln_dataset_destroy(ds);
fail:
    if (src)
        idx_source_free(ctx, src);
    idx_close(img);
    idx_close(lab);
    return st;
}

kiln_status kiln_dataset_from_idx(kiln_context *ctx, const char *images_path,
                                  const char *labels_path, const kiln_idx_options *options,
                                  kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_from_idx: out is NULL");
    kiln_idx_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_idx_options",
                          &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_dataset_from_idx: %s", why.message);
    kiln_status st = check_args(ctx, images_path, labels_path, &o);
    if (st != KILN_OK)
        return st;
    idx_file img = {.path = images_path, .fd = -1}, lab = {.path = labels_path, .fd = -1};
    return idx_load(ctx, &img, &lab, &o, out);
}

kiln_status kiln_dataset_from_idx_memory(kiln_context *ctx, const void *images,
                                         size_t images_size, const void *labels,
                                         size_t labels_size, const kiln_idx_options *o,
                                         kiln_dataset **out)
{
    *out = NULL;
    kiln_status st = check_args(ctx, "images in memory", "labels in memory", o);
    if (st != KILN_OK)
        return st;
    /* An empty buffer is an empty file, not "no source". */
    static const unsigned char none[1];
    idx_file img = {.path = "images in memory", .mem = images_size ? images : none,
                    .mem_size = images_size, .fd = -1},
             lab = {.path = "labels in memory", .mem = labels_size ? labels : none,
                    .mem_size = labels_size, .fd = -1};
    return idx_load(ctx, &img, &lab, o, out);
}
