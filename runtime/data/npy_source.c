/* A streamed dataset over two .npy files, both read with pread a sample at
 * a time as batches are gathered (features converted as they arrive), the
 * labels also scanned once at creation. Without a labels file, a dataset of
 * features alone (for kiln_dataset_read and prediction).
 *
 * Neither file is mapped: read through a mapping, every page touched would
 * stay in the process's resident memory (a 2 GB file would end up as 2 GB
 * of RSS), and a file cut short by another process (np.save over it) would
 * kill it with SIGBUS. pread keeps the data in the page cache alone, and a
 * short read is an error naming the file. */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/formats/npy.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 16384   /* bytes read at once: on the loader threads' stacks */
#define IDS 2048      /* labels converted at once where they are scanned */

/* One file: its header, the open file, its name. */
typedef struct npy_file {
    kiln_npy array;               /* data NULL: read from fd at array.offset */
    int fd;
    char *path;                   /* array.name points here */
} npy_file;

typedef struct npy_source {
    npy_file features, labels;
    float scale, offset;
    int ids;                      /* features are int32 ids, not converted to float */
} npy_source;

/* Elements [first, first + n) of `f`'s array, flattened, into `buf` (n *
 * itemsize <= CHUNK bytes); a short read is the file cut short since it
 * was opened. `what` and `sample` say what was being read. */
static kiln_status read_elements(kiln_context *ctx, const npy_file *f, int64_t first, int64_t n,
                                 unsigned char *buf, const char *what, int64_t sample)
{
    const size_t bytes = (size_t)n * (size_t)f->array.itemsize;
    const off_t at = (off_t)f->array.offset + (off_t)first * (off_t)f->array.itemsize;
    size_t got = 0;
    while (got < bytes) {
        const ssize_t r = pread(f->fd, buf + got, bytes - got, at + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return kiln_error(ctx, KILN_ERROR_IO, "%s: reading %s %lld failed: %s", f->path,
                              what, (long long)sample,
                              r < 0 ? strerror(errno) : "the file is shorter than when it was "
                                                        "opened");
        got += (size_t)r;
    }
    return KILN_OK;
}

/* Row `row` of `f` (row_size elements), a chunk at a time: as int32 ids
 * when `ids` (an int64 that does not fit is an error naming it), else as
 * value * scale + offset floats. `labels`: the row is a sample's label. */
static kiln_status read_row(kiln_context *ctx, const npy_file *f, int64_t row, int ids,
                            float scale, float offset, void *out, int labels)
{
    const int64_t n = f->array.row_size, per = CHUNK / f->array.itemsize;
    unsigned char chunk[CHUNK];
    kiln_npy part = f->array;
    part.data = chunk;
    for (int64_t done = 0; done < n;) {
        const int64_t take = n - done < per ? n - done : per;
        const kiln_status st = read_elements(ctx, f, row * n + done, take, chunk,
                                             labels ? "the label of sample" : "sample", row);
        if (st != KILN_OK)
            return st;
        if (ids) {   /* one id per element; a dataset's ids ride in float slots */
            part.rows = take;
            part.row_size = 1;
            for (int64_t k = 0; k < take; k++)
                if (kiln_npy_read_label(&part, k, (int32_t *)out + done + k) != 0)
                    return kiln_error(ctx, KILN_ERROR_DATA, "%s: sample %lld, %s %lld: %s %lld "
                                      "does not fit an int32", f->path, (long long)row,
                                      labels ? "position" : "element", (long long)(done + k),
                                      labels ? "label" : "id",
                                      (long long)kiln_npy_read_int(&part, k));
        } else {
            part.rows = 1;
            part.row_size = take;
            kiln_npy_read_floats(&part, 0, 1, scale, offset, (float *)out + done);
        }
        done += take;
    }
    return KILN_OK;
}

static kiln_status npy_read(const kiln_dataset *ds, int64_t index,
                            const kiln_read_plan *plan, float *features,
                            void *label)
{
    (void)plan;
    const npy_source *s = ds->source;
    kiln_status st = KILN_OK;
    if (features)
        st = read_row(ds->ctx, &s->features, index, s->ids, s->scale, s->offset, features, 0);
    if (st == KILN_OK && label && ds->unlabeled)
        memset(label, 0, sizeof(int32_t));   /* its one sparse slot; never used */
    else if (st == KILN_OK && label)
        st = read_row(ds->ctx, &s->labels, index, ds->label_kind == KILN_LABELS_SPARSE, 1.0f,
                      0.0f, label, 1);
    return st;
}

static void close_file(kiln_context *ctx, npy_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    kiln_free(ctx, f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

static void npy_source_free(kiln_context *ctx, npy_source *s)
{
    if (!s)
        return;
    close_file(ctx, &s->features);
    close_file(ctx, &s->labels);
    kiln_free(ctx, s);
}

static void npy_destroy(kiln_dataset *ds)
{
    npy_source_free(ds->ctx, ds->source);
    ds->source = NULL;
}

static int is_float(kiln_dtype t)
{
    return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_FLOAT32;
}

/* The largest magnitude an integer dtype holds. */
static double int_range(kiln_dtype t)
{
    switch (t) {
    case KILN_DTYPE_UINT8: return 255.0;
    case KILN_DTYPE_INT8: return 128.0;
    case KILN_DTYPE_UINT16: return 65535.0;
    case KILN_DTYPE_INT16: return 32768.0;
    case KILN_DTYPE_INT64: return 9223372036854775808.0;
    default: return 2147483648.0;
    }
}

/* Features: samples first, then 1..KILN_MAX_RANK positive dimensions that
 * each fit the int32 of a kiln_shape. */
static kiln_status features_shape(kiln_context *ctx, const kiln_npy *f, kiln_shape *shape)
{
    if (f->rank < 2)
        return kiln_error(ctx, KILN_ERROR_SHAPE, "%s holds an array of %d dimension(s); "
                          "features need samples first and at least one dimension per "
                          "sample, e.g. (count, 1)", f->name, f->rank);
    shape->rank = f->rank - 1;
    for (int i = 1; i < f->rank; i++) {
        if (f->shape[i] == 0)
            return kiln_error(ctx, KILN_ERROR_SHAPE, "%s: dimension %d of its shape is 0, so "
                              "a sample holds no features", f->name, i);
        if (f->shape[i] > INT32_MAX)
            return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s: dimension %d of its shape is "
                              "%lld; kiln reads sample dimensions up to %d", f->name, i,
                              (long long)f->shape[i], INT32_MAX);
        shape->dims[i - 1] = (int32_t)f->shape[i];
    }
    if (f->rows == 0)
        return kiln_error(ctx, KILN_ERROR_DATA, "%s holds no samples", f->name);
    return KILN_OK;
}

/* Labels: 1-D integers (sparse), 2-D integers (N, T) (sparse, T ids per
 * sample) or 2-D float32 (dense). */
static kiln_status label_kind(kiln_context *ctx, const kiln_npy *l, kiln_label_kind *kind,
                              int32_t *label_size)
{
    if (l->rank == 1 && !is_float(l->dtype)) {
        *kind = KILN_LABELS_SPARSE;
        *label_size = 1;
        return KILN_OK;
    }
    if (l->rank == 2 && (l->shape[1] == 0 || l->shape[1] > INT32_MAX))
        return kiln_error(ctx, KILN_ERROR_SHAPE, "%s: labels of %lld values per sample; kiln "
                          "reads 1 to %d", l->name, (long long)l->shape[1], INT32_MAX);
    if (l->rank == 2 && !is_float(l->dtype)) {
        *kind = KILN_LABELS_SPARSE;
        *label_size = (int32_t)l->shape[1];
        return KILN_OK;
    }
    if (l->rank == 2 && l->dtype == KILN_DTYPE_FLOAT32) {
        if (l->shape[1] == 0 || l->shape[1] > INT32_MAX)
            return kiln_error(ctx, KILN_ERROR_SHAPE, "%s: dense labels of %lld values per "
                              "sample; kiln reads 1 to %d", l->name, (long long)l->shape[1],
                              INT32_MAX);
        *kind = KILN_LABELS_DENSE;
        *label_size = (int32_t)l->shape[1];
        return KILN_OK;
    }
    if (l->rank == 1)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s holds 1-D %s labels; sparse labels "
                          "are integers, and float targets a 2-D float32 array (count, size)",
                          l->name, l->dtype == KILN_DTYPE_FLOAT16 ? "float16" : "float32");
    if (l->rank == 2)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "%s holds 2-D labels that are not "
                          "float32; dense labels are float32 (sparse ones integers)",
                          l->name);
    return kiln_error(ctx, KILN_ERROR_SHAPE, "%s holds labels of %d dimensions; labels are "
                      "1-D or 2-D integers (sparse) or 2-D float32 (dense)", l->name, l->rank);
}

/* Elements [first, first + n) (n <= IDS) of an integer labels file, as
 * stored (an int64 may not fit an int32). */
static kiln_status read_ids(kiln_context *ctx, const npy_file *f, int64_t first, int64_t n,
                            int64_t *out)
{
    unsigned char chunk[IDS * 8];   /* 8: the widest integer */
    const kiln_status st = read_elements(ctx, f, first, n, chunk, "the label of sample",
                                         first / f->array.row_size);
    kiln_npy view = f->array;
    view.data = chunk;
    view.rows = n;
    view.row_size = 1;
    for (int64_t k = 0; st == KILN_OK && k < n; k++)
        out[k] = kiln_npy_read_int(&view, k);
    return st;
}

/* The first `count` labels, read a chunk at a time: sparse ones >= 0 (and
 * their largest), dense ones finite. */
static kiln_status scan_labels(kiln_context *ctx, const npy_file *f, kiln_label_kind kind,
                               int64_t count, int32_t *max_label)
{
    *max_label = -1;
    const kiln_npy *l = &f->array;
    const int64_t total = count * l->row_size;
    if (kind == KILN_LABELS_SPARSE) {
        int64_t ids[IDS];
        for (int64_t at = 0; at < total; at += IDS) {
            const int64_t n = total - at < IDS ? total - at : IDS;
            const kiln_status st = read_ids(ctx, f, at, n, ids);
            if (st != KILN_OK)
                return st;
            for (int64_t k = 0; k < n; k++) {
                const int64_t i = at + k;
                if (ids[k] >= 0 && ids[k] <= INT32_MAX) {
                    *max_label = ids[k] > *max_label ? (int32_t)ids[k] : *max_label;
                    continue;
                }
                char pos[48] = "";
                if (l->row_size > 1)
                    snprintf(pos, sizeof pos, ", position %lld,",
                             (long long)(i % l->row_size));
                return kiln_error(ctx, KILN_ERROR_DATA, "%s: sample %lld%s has label %lld; "
                                  "labels must be %s", l->name, (long long)(i / l->row_size),
                                  pos, (long long)ids[k],
                                  ids[k] < 0 ? ">= 0" : "below 2^31 (they are int32)");
            }
        }
        return KILN_OK;
    }
    const int64_t per = CHUNK / l->itemsize;
    unsigned char chunk[CHUNK];
    float values[CHUNK / 4];   /* dense labels are float32 */
    kiln_npy view = *l;        /* a chunk, seen as one value per row */
    view.data = chunk;
    view.row_size = 1;
    for (int64_t at = 0; at < total; at += per) {
        const int64_t n = total - at < per ? total - at : per;
        const kiln_status st = read_elements(ctx, f, at, n, chunk, "the label of sample",
                                             at / l->row_size);
        if (st != KILN_OK)
            return st;
        view.rows = n;
        kiln_npy_read_floats(&view, 0, n, 1.0f, 0.0f, values);
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(values[k]))
                return kiln_error(ctx, KILN_ERROR_DATA, "%s: sample %lld, value %lld of its "
                                  "label is %s; labels must be finite", l->name,
                                  (long long)((at + k) / l->row_size),
                                  (long long)((at + k) % l->row_size),
                                  isnan(values[k]) ? "NaN" : values[k] > 0 ? "+Inf" : "-Inf");
    }
    return KILN_OK;
}

static kiln_status npy_find_label(const kiln_dataset *ds, int32_t part, int64_t first,
                                  int64_t count, int32_t limit, int32_t ignore,
                                  kiln_label_hit *hit)
{
    (void)part;
    const npy_file *f = &((const npy_source *)ds->source)->labels;
    const int64_t row = f->array.row_size, end = (first + count) * row;
    int64_t ids[IDS];
    hit->searched = ds->label_kind == KILN_LABELS_SPARSE;
    for (int64_t at = first * row; hit->searched && at < end; at += IDS) {
        const int64_t n = end - at < IDS ? end - at : IDS;
        const kiln_status st = read_ids(ds->ctx, f, at, n, ids);
        if (st != KILN_OK)
            return st;
        for (int64_t k = 0; k < n; k++) {
            if (ids[k] < limit || ids[k] == ignore)
                continue;
            hit->sample = (at + k) / row;
            hit->position = (int32_t)((at + k) % row);
            hit->label = (int32_t)(ids[k] > INT32_MAX ? INT32_MAX : ids[k]);
            snprintf(hit->where, sizeof hit->where, "%s", f->path);
            return KILN_OK;
        }
    }
    return KILN_OK;
}

static const kiln_source_ops npy_ops = {
    .kind = "npy",
    .read = npy_read,
    .destroy = npy_destroy,
    .find_label = npy_find_label,
};

/* Opens `path` into `f`, its header parsed. */
static kiln_status open_file(kiln_context *ctx, const char *path, npy_file *f)
{
    f->path = kiln_strdup(ctx, path);
    if (!f->path)
        return kiln_error_oom(ctx, "a file name", strlen(path) + 1);
    return kiln_npy_open(ctx, f->path, &f->array, &f->fd);
}

static kiln_status check_options(kiln_context *ctx, const char *features_path,
                                 const kiln_npy_options *o)
{
    const char *fn = "kiln_dataset_from_npy";
    if (!features_path)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: features_path is NULL", fn);
    if (o->limit < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: limit is %lld; it must be >= 0 (0: all samples)", fn,
                          (long long)o->limit);
    if (o->ids && (o->scale != 0.0f || o->offset != 0.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: ids is set, so scale (%g) and offset (%g) must be 0: ids are "
                          "read as they are stored", fn, (double)o->scale, (double)o->offset);
    if (!isfinite(o->scale) || !isfinite(o->offset))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: scale %g and offset %g must be finite", fn, (double)o->scale,
                          (double)o->offset);
    return KILN_OK;
}

kiln_status kiln_dataset_from_npy(kiln_context *ctx, const char *features_path,
                                  const char *labels_path, const kiln_npy_options *options,
                                  kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_from_npy: out is NULL");
    kiln_npy_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_npy_options",
                          &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_dataset_from_npy: %s", why.message);
    kiln_status st = check_options(ctx, features_path, &o);
    if (st != KILN_OK)
        return st;
    npy_source *s = kiln_calloc(ctx, 1, sizeof *s);
    if (!s)
        return kiln_error_oom(ctx, "an .npy source", sizeof *s);
    s->features.fd = s->labels.fd = -1;
    s->scale = o.scale != 0.0f ? o.scale : 1.0f;
    s->offset = o.offset;
    const kiln_npy *f = &s->features.array, *l = &s->labels.array;
    kiln_shape shape = {0};
    st = open_file(ctx, features_path, &s->features);
    if (st == KILN_OK)
        st = features_shape(ctx, f, &shape);
    kiln_label_kind kind = KILN_LABELS_SPARSE;
    int32_t label_size = 1, max_label = -1;
    if (st == KILN_OK && labels_path)
        st = open_file(ctx, labels_path, &s->labels);
    if (st == KILN_OK && labels_path)
        st = label_kind(ctx, l, &kind, &label_size);
    if (st != KILN_OK)
        goto fail;
    s->ids = o.ids != 0;
    if (s->ids && is_float(f->dtype)) {
        st = kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_from_npy: ids is set "
                        "but %s holds %s values; ids are read from an integer array",
                        f->name, f->dtype == KILN_DTYPE_FLOAT16 ? "float16" : "float32");
        goto fail;
    }
    const int64_t rows = f->rows;
    if (labels_path && l->rows != rows) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s has %lld samples but %s has %lld labels",
                        f->name, (long long)rows, l->name, (long long)l->rows);
        goto fail;
    }
    const int64_t count = o.limit > 0 && o.limit < rows ? o.limit : rows;
    if (labels_path)
        st = scan_labels(ctx, &s->labels, kind, count, &max_label);
    kiln_dataset *ds = NULL;
    if (st == KILN_OK)
        st = kiln_dataset_new_streamed(ctx, count, &shape, kind, label_size, &ds);
    if (st != KILN_OK)
        goto fail;
    ds->ops = &npy_ops;
    ds->source = s;
    ds->dtype = f->dtype;
    ds->max_label = max_label;
    ds->unlabeled = !labels_path;
    /* Float files may hold NaN or Inf; integers stay finite unless the
     * scale and offset could carry one past FLT_MAX (half of it: margin
     * for float rounding). */
    const double reach = int_range(ds->dtype) * fabs(s->scale) + fabs(s->offset);
    ds->features_unchecked = !s->ids && (is_float(ds->dtype) || reach > FLT_MAX / 2);
    ds->ints = s->ids;
    *out = ds;
    return KILN_OK;
fail:
    npy_source_free(ctx, s);
    return st;
}
