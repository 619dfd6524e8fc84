/* A streamed dataset over two .npy files: features read with pread and
 * converted a sample at a time as batches are gathered, labels mapped and
 * checked once at creation (they are small). Without a labels file, a
 * dataset of features alone (for kiln_dataset_read and prediction).
 *
 * The features are mapped only to parse the header: read through a
 * mapping, every page touched would stay in the process's resident memory
 * (a 2 GB file would end up as 2 GB of RSS), and a file cut short by
 * another process would kill it with SIGBUS. pread keeps the data in the
 * page cache alone, and a short read is an error naming the file. */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/formats/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct npy_source {
    kiln_npy features, labels;    /* features: parsed, then unmapped */
    int fd;                       /* the features file, or -1 */
    off_t data_offset;            /* where its data starts */
    char *features_path, *labels_path;   /* the arrays' names point here */
    float scale, offset;
    int ids;                      /* features are int32 ids, not converted to float */
} npy_source;

/* Sample `index`'s features, read in chunks that fit on the stack and
 * converted as they arrive. */
static kiln_status read_features(const kiln_dataset *ds, int64_t index, float *out)
{
    const npy_source *s = ds->source;
    const size_t item = (size_t)s->features.itemsize;
    const int64_t n = s->features.row_size;
    const off_t row = s->data_offset + (off_t)index * (off_t)n * (off_t)item;
    unsigned char chunk[16384];
    kiln_npy part = s->features;
    part.data = chunk;
    for (int64_t done = 0; done < n;) {
        const int64_t take = n - done < (int64_t)(sizeof chunk / item)
                                 ? n - done : (int64_t)(sizeof chunk / item);
        const size_t bytes = (size_t)take * item;
        const ssize_t got = pread(s->fd, chunk, bytes, row + (off_t)done * (off_t)item);
        if (got != (ssize_t)bytes)
            return kiln_error(ds->ctx, KILN_ERROR_IO, "%s: reading sample %lld failed: %s",
                              s->features_path, (long long)index,
                              got < 0 ? strerror(errno) : "the file is shorter than when it "
                                                         "was opened");
        part.rows = 1;
        part.row_size = take;
        if (s->ids) {   /* one id per element, bits into the float slots */
            part.rows = take;
            part.row_size = 1;
            for (int64_t k = 0; k < take; k++)
                kiln_npy_read_label(&part, k, (int32_t *)(void *)(out + done + k));
        } else {
            kiln_npy_read_floats(&part, 0, 1, s->scale, s->offset, out + done);
        }
        done += take;
    }
    return KILN_OK;
}

/* Sample `row`'s ids: one, or a row of a 2-D integer array (one id per
 * position), read as the same array seen one value per row. */
static void read_ids(const kiln_npy *l, int64_t row, int32_t *out)
{
    kiln_npy flat = *l;
    flat.rows = l->rows * l->row_size;
    flat.row_size = 1;
    for (int64_t p = 0; p < l->row_size; p++)
        kiln_npy_read_label(&flat, row * l->row_size + p, out + p);
}

static kiln_status npy_read(const kiln_dataset *ds, int64_t index,
                            const kiln_read_plan *plan, float *features,
                            void *label)
{
    (void)plan;
    const npy_source *s = ds->source;
    if (features) {
        const kiln_status st = read_features(ds, index, features);
        if (st != KILN_OK)
            return st;
    }
    if (label && ds->unlabeled)
        memset(label, 0, sizeof(int32_t));   /* its one sparse slot; never used */
    else if (label && ds->label_kind == KILN_LABELS_SPARSE)
        read_ids(&s->labels, index, label);
    else if (label)
        kiln_npy_read_floats(&s->labels, index, 1, 1.0f, 0.0f, label);
    return KILN_OK;
}

static void npy_source_free(kiln_context *ctx, npy_source *s)
{
    if (!s)
        return;
    kiln_npy_unmap(&s->features);
    kiln_npy_unmap(&s->labels);
    if (s->fd >= 0)
        close(s->fd);
    kiln_free(ctx, s->features_path);
    kiln_free(ctx, s->labels_path);
    kiln_free(ctx, s);
}

static void npy_destroy(kiln_dataset *ds)
{
    npy_source_free(ds->ctx, ds->source);
    ds->source = NULL;
}

static const kiln_source_ops npy_ops = {
    .kind = "npy",
    .read = npy_read,
    .destroy = npy_destroy,
};

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

/* The first `count` labels: sparse ones >= 0 (and their largest), dense
 * ones finite. */
static kiln_status scan_labels(kiln_context *ctx, const kiln_npy *l, kiln_label_kind kind,
                               int64_t count, int32_t *max_label)
{
    *max_label = -1;
    /* The same array seen as one value per row. */
    kiln_npy flat = *l;
    if (kind == KILN_LABELS_SPARSE) {
        flat.rows = l->rows * l->row_size;
        flat.row_size = 1;
        for (int64_t i = 0; i < count * l->row_size; i++) {
            int32_t y;
            kiln_npy_read_label(&flat, i, &y);
            char at[32] = "";
            if (l->row_size > 1)
                snprintf(at, sizeof at, ", position %lld,", (long long)(i % l->row_size));
            if (y < 0)
                return kiln_error(ctx, KILN_ERROR_DATA, "%s: sample %lld%s has label %d; "
                                  "labels must be >= 0", l->name, (long long)(i / l->row_size),
                                  at, (int)y);
            *max_label = y > *max_label ? y : *max_label;
        }
        return KILN_OK;
    }
    /* Dense values read in chunks. */
    flat.rows = count * l->row_size;
    flat.row_size = 1;
    float chunk[256];
    for (int64_t at = 0; at < flat.rows; at += 256) {
        const int64_t n = flat.rows - at < 256 ? flat.rows - at : 256;
        kiln_npy_read_floats(&flat, at, n, 1.0f, 0.0f, chunk);
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(chunk[k]))
                return kiln_error(ctx, KILN_ERROR_DATA, "%s: sample %lld, value %lld of its "
                                  "label is %s; labels must be finite", l->name,
                                  (long long)((at + k) / l->row_size),
                                  (long long)((at + k) % l->row_size),
                                  isnan(chunk[k]) ? "NaN" : chunk[k] > 0 ? "+Inf" : "-Inf");
    }
    return KILN_OK;
}

/* From the parsed mapping to pread: the data's offset, then the mapping
 * goes and a descriptor stays. */
static kiln_status reopen_for_reading(kiln_context *ctx, npy_source *s)
{
    s->data_offset = (off_t)(s->features.data - (const unsigned char *)s->features.map);
    s->fd = open(s->features_path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return kiln_error(ctx, KILN_ERROR_IO, "cannot open %s: %s", s->features_path,
                          strerror(errno));
    if (s->features.map)
        munmap(s->features.map, s->features.map_size);
    s->features.map = NULL;
    s->features.map_size = 0;
    s->features.data = NULL;
    return KILN_OK;
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
    s->fd = -1;
    s->scale = o.scale != 0.0f ? o.scale : 1.0f;
    s->offset = o.offset;
    s->features_path = kiln_strdup(ctx, features_path);
    s->labels_path = labels_path ? kiln_strdup(ctx, labels_path) : NULL;
    if (!s->features_path || (labels_path && !s->labels_path)) {
        st = kiln_error_oom(ctx, "a file name",
                            strlen(features_path) + (labels_path ? strlen(labels_path) : 0));
        goto fail;
    }
    kiln_shape shape = {0};
    st = kiln_npy_map(ctx, s->features_path, &s->features);
    if (st == KILN_OK)
        st = features_shape(ctx, &s->features, &shape);
    kiln_label_kind kind = KILN_LABELS_SPARSE;
    int32_t label_size = 1, max_label = -1;
    if (st == KILN_OK && labels_path)
        st = kiln_npy_map(ctx, s->labels_path, &s->labels);
    if (st == KILN_OK && labels_path)
        st = label_kind(ctx, &s->labels, &kind, &label_size);
    if (st != KILN_OK)
        goto fail;
    s->ids = o.ids != 0;
    if (s->ids && is_float(s->features.dtype)) {
        st = kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_from_npy: ids is set "
                        "but %s holds %s values; ids are read from an integer array",
                        s->features_path,
                        s->features.dtype == KILN_DTYPE_FLOAT16 ? "float16" : "float32");
        goto fail;
    }
    const int64_t rows = s->features.rows;
    if (labels_path && s->labels.rows != rows) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s has %lld samples but %s has %lld labels",
                        s->features_path, (long long)rows, s->labels_path,
                        (long long)s->labels.rows);
        goto fail;
    }
    const int64_t count = o.limit > 0 && o.limit < rows ? o.limit : rows;
    if (labels_path)
        st = scan_labels(ctx, &s->labels, kind, count, &max_label);
    if (st == KILN_OK)
        st = reopen_for_reading(ctx, s);
    kiln_dataset *ds = NULL;
    if (st == KILN_OK)
        st = kiln_dataset_new_streamed(ctx, count, &shape, kind, label_size, &ds);
    if (st != KILN_OK)
        goto fail;
    ds->ops = &npy_ops;
    ds->source = s;
    ds->dtype = s->features.dtype;
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
