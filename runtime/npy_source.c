/* A streamed dataset over two memory-mapped .npy files: features converted
 * a sample at a time as batches are gathered, labels checked once at
 * creation (a scan of the mapped labels, which are small). */
#include "runtime/context.h"
#include "runtime/dataset.h"
#include "runtime/npy.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct npy_source {
    kiln_npy features, labels;
    char *features_path, *labels_path;   /* the arrays' names point here */
    float scale, offset;
} npy_source;

static kiln_status npy_read(const kiln_dataset *ds, int64_t index, float *features,
                            void *label)
{
    const npy_source *s = ds->source;
    if (features)
        kiln_npy_read_floats(&s->features, index, 1, s->scale, s->offset, features);
    if (label && ds->label_kind == KILN_LABELS_SPARSE)
        kiln_npy_read_label(&s->labels, index, label);
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

/* Labels: 1-D integers (sparse) or 2-D float32 (dense). */
static kiln_status label_kind(kiln_context *ctx, const kiln_npy *l, kiln_label_kind *kind,
                              int32_t *label_size)
{
    if (l->rank == 1 && !is_float(l->dtype)) {
        *kind = KILN_LABELS_SPARSE;
        *label_size = 1;
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
                          "float32; dense labels are float32 (sparse ones 1-D integers)",
                          l->name);
    return kiln_error(ctx, KILN_ERROR_SHAPE, "%s holds labels of %d dimensions; labels are "
                      "1-D integers (sparse) or 2-D float32 (dense)", l->name, l->rank);
}

/* The first `count` labels: sparse ones >= 0 (and their largest), dense
 * ones finite. */
static kiln_status scan_labels(kiln_context *ctx, const kiln_npy *l, kiln_label_kind kind,
                               int64_t count, int32_t *max_label)
{
    *max_label = -1;
    if (kind == KILN_LABELS_SPARSE) {
        for (int64_t i = 0; i < count; i++) {
            int32_t y;
            kiln_npy_read_label(l, i, &y);
            if (y < 0)
                return kiln_error(ctx, KILN_ERROR_DATA, "%s: sample %lld has label %d; labels "
                                  "must be >= 0", l->name, (long long)i, (int)y);
            *max_label = y > *max_label ? y : *max_label;
        }
        return KILN_OK;
    }
    /* The same array seen as one value per row, read in chunks. */
    kiln_npy flat = *l;
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

static kiln_status check_options(kiln_context *ctx, const char *features_path,
                                 const char *labels_path, const kiln_npy_options *o)
{
    const char *fn = "kiln_dataset_from_npy";
    if (!features_path)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: features_path is NULL", fn);
    if (!labels_path)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: labels_path is NULL", fn);
    if (o->limit < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: limit is %lld; it must be >= 0 (0: all samples)", fn,
                          (long long)o->limit);
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
    kiln_status st = check_options(ctx, features_path, labels_path, &o);
    if (st != KILN_OK)
        return st;
    npy_source *s = kiln_calloc(ctx, 1, sizeof *s);
    if (!s)
        return kiln_error_oom(ctx, "an .npy source", sizeof *s);
    s->scale = o.scale != 0.0f ? o.scale : 1.0f;
    s->offset = o.offset;
    s->features_path = kiln_strdup(ctx, features_path);
    s->labels_path = kiln_strdup(ctx, labels_path);
    if (!s->features_path || !s->labels_path) {
        st = kiln_error_oom(ctx, "a file name", strlen(features_path) + strlen(labels_path));
        goto fail;
    }
    kiln_shape shape = {0};
    st = kiln_npy_map(ctx, s->features_path, &s->features);
    if (st == KILN_OK)
        st = features_shape(ctx, &s->features, &shape);
    kiln_label_kind kind = KILN_LABELS_SPARSE;
    int32_t label_size = 1, max_label = -1;
    if (st == KILN_OK)
        st = kiln_npy_map(ctx, s->labels_path, &s->labels);
    if (st == KILN_OK)
        st = label_kind(ctx, &s->labels, &kind, &label_size);
    if (st != KILN_OK)
        goto fail;
    const int64_t rows = s->features.rows;
    if (s->labels.rows != rows) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s has %lld samples but %s has %lld labels",
                        s->features_path, (long long)rows, s->labels_path,
                        (long long)s->labels.rows);
        goto fail;
    }
    const int64_t count = o.limit > 0 && o.limit < rows ? o.limit : rows;
    st = scan_labels(ctx, &s->labels, kind, count, &max_label);
    kiln_dataset *ds = NULL;
    if (st == KILN_OK)
        st = kiln_dataset_new_streamed(ctx, count, &shape, kind, label_size, &ds);
    if (st != KILN_OK)
        goto fail;
    ds->ops = &npy_ops;
    ds->source = s;
    ds->dtype = s->features.dtype;
    ds->max_label = max_label;
    /* Float files may hold NaN or Inf; integers stay finite unless the
     * scale and offset could carry one past FLT_MAX (half of it: margin
     * for float rounding). */
    const double reach = int_range(ds->dtype) * fabs(s->scale) + fabs(s->offset);
    ds->features_unchecked = is_float(ds->dtype) || reach > FLT_MAX / 2;
    *out = ds;
    return KILN_OK;
fail:
    npy_source_free(ctx, s);
    return st;
}
