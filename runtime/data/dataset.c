/* Datasets in host memory: built from arrays or IDX files, cut into subsets,
 * visited in a seeded order and gathered into batches. */
#include "runtime/data/dataset.h"

#include "runtime/context/context.h"
#include "runtime/context/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SHUFFLE_STREAM 0x5348554646ULL  /* "SHUFF": one stream per epoch from here */

/* Floats per sample of `shape`, or -1 when a dimension is not positive or
 * the product does not fit int64. */
static int64_t sample_size(const kiln_shape *shape)
{
    if (shape->rank < 1 || shape->rank > KILN_MAX_RANK)
        return -1;
    int64_t n = 1;
    for (int32_t i = 0; i < shape->rank; i++) {
        if (shape->dims[i] <= 0 || n > INT64_MAX / shape->dims[i])
            return -1;
        n *= shape->dims[i];
    }
    return n;
}

/* Largest label of a sparse dataset (labels are known to be >= 0). */
static int32_t sparse_max(const int32_t *labels, int64_t count)
{
    int32_t max = -1;
    for (int64_t i = 0; i < count; i++)
        max = labels[i] > max ? labels[i] : max;
    return max;
}

static void init_body(kiln_dataset *ds, kiln_context *ctx, int64_t count, const kiln_shape *shape,
                      int64_t feature_size, kiln_label_kind kind, int32_t label_size)
{
    ds->ctx = ctx;
    kiln_context_hold(ctx);
    ds->refs = 1;
    ds->count = count;
    ds->feature_shape = *shape;
    ds->feature_size = feature_size;
    ds->dtype = KILN_DTYPE_FLOAT32;
    ds->label_kind = kind;
    ds->label_size = label_size;
    ds->max_label = -1;
}

kiln_status kiln_dataset_new_streamed(kiln_context *ctx, int64_t count, const kiln_shape *shape,
                                      kiln_label_kind kind, int32_t label_size,
                                      kiln_dataset **out)
{
    *out = NULL;
    const int64_t fsize = sample_size(shape);
    /* A batch's staging is counted in size_t bytes. */
    if (fsize < 0 || count <= 0 || label_size <= 0 ||
        (uint64_t)fsize > SIZE_MAX / sizeof(float) / 65536)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "a dataset of %lld samples of %lld elements with labels of %d is not "
                          "possible: a size is <= 0 or too large", (long long)count,
                          (long long)fsize, (int)label_size);
    kiln_dataset *ds = kiln_calloc(ctx, 1, sizeof *ds);
    if (!ds)
        return kiln_error_oom(ctx, "a dataset", sizeof *ds);
    init_body(ds, ctx, count, shape, fsize, kind, label_size);
    *out = ds;
    return KILN_OK;
}

kiln_status kiln_dataset_alloc(kiln_context *ctx, int64_t count, const kiln_shape *shape,
                               kiln_label_kind kind, int32_t label_size, kiln_dataset **out)
{
    *out = NULL;
    const int64_t fsize = sample_size(shape);
    /* Both arrays must be addressable in bytes, not only counted in int64. */
    const uint64_t max_elems = SIZE_MAX / sizeof(float);
    if (fsize < 0 || count <= 0 || label_size <= 0 ||
        (uint64_t)count > max_elems / (uint64_t)fsize ||
        (uint64_t)count > max_elems / (uint64_t)label_size) {
        char dims[64] = "";
        for (int32_t i = 0, n = 0; i < shape->rank && i < KILN_MAX_RANK; i++)
            n += snprintf(dims + n, sizeof dims - (size_t)n, "%s%d", i ? " x " : "",
                          (int)shape->dims[i]);
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "a dataset of %lld samples of shape (%s) with labels of %d is not "
                          "possible: a size is <= 0 or overflows", (long long)count, dims,
                          (int)label_size);
    }
    const size_t feature_bytes = (size_t)(count * fsize) * sizeof(float);
    const size_t label_bytes = (size_t)(count * label_size) *
                               (kind == KILN_LABELS_SPARSE ? sizeof(int32_t) : sizeof(float));
    kiln_status st = KILN_OK;
    kiln_dataset *ds = kiln_calloc(ctx, 1, sizeof *ds);
    if (!ds)
        return kiln_error_oom(ctx, "a dataset", sizeof *ds);
    init_body(ds, ctx, count, shape, fsize, kind, label_size);
    ds->owns_arrays = 1;
    ds->features = kiln_alloc(ctx, feature_bytes);
    if (!ds->features) {
        st = kiln_error_oom(ctx, "dataset features", feature_bytes);
        goto fail;
    }
    if (kind == KILN_LABELS_SPARSE)
        ds->sparse_labels = kiln_alloc(ctx, label_bytes);
    else
        ds->dense_labels = kiln_alloc(ctx, label_bytes);
    if (!ds->sparse_labels && !ds->dense_labels) {
        st = kiln_error_oom(ctx, "dataset labels", label_bytes);
        goto fail;
    }
    *out = ds;
    return KILN_OK;
fail:
    kiln_dataset_destroy(ds);
    return st;
}

kiln_status kiln_check_samples(kiln_context *ctx, const char *fn, int64_t count, int32_t rank,
                               const int32_t *dims)
{
    if (count <= 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: count is %lld; it must be > 0",
                          fn, (long long)count);
    if (rank < 1 || rank > KILN_MAX_RANK)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: feature_rank is %d; it must be in 1..%d", fn, (int)rank,
                          KILN_MAX_RANK);
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] <= 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: feature_dims[%d] is %d; every dimension must be > 0", fn,
                              (int)i, (int)dims[i]);
    return KILN_OK;
}

/* The first argument error of a copied desc, recorded on ctx; KILN_OK if none. */
static kiln_status check_desc(kiln_context *ctx, const kiln_arrays_desc *d)
{
    const char *fn = "kiln_dataset_from_arrays";
    const kiln_status st = kiln_check_samples(ctx, fn, d->count, d->feature_rank,
                                              d->feature_dims);
    if (st != KILN_OK)
        return st;
    if (!d->features == !d->int_features)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s; set exactly one (float "
                          "features, or int32 ids for an Input of kiln_input_ints)", fn,
                          d->features ? "both features and int_features are set"
                                      : "features and int_features are both NULL");
    return KILN_OK;
}

/* Copies the caller's input and label arrays as their struct_size says,
 * and points d at the copies. Counts out of range are left to the checks,
 * which name them. */
static kiln_status take_arrays(kiln_arrays_desc *d, kiln_input_array *inputs,
                               kiln_label_array *outputs, kiln_diag *why)
{
    kiln_status st = KILN_OK;
    if (d->inputs && d->n_inputs > 0 && d->n_inputs <= KILN_MAX_MODEL_INPUTS) {
        for (int32_t k = 0; k < d->n_inputs && st == KILN_OK; k++)
            st = kiln_options_take_at(&inputs[k], sizeof *inputs, d->inputs, (size_t)k,
                                      sizeof *inputs, "kiln_arrays_desc.inputs", why);
        d->inputs = inputs;
    }
    if (d->outputs && d->n_outputs > 0 && d->n_outputs <= KILN_MAX_MODEL_OUTPUTS) {
        for (int32_t k = 0; k < d->n_outputs && st == KILN_OK; k++)
            st = kiln_options_take_at(&outputs[k], sizeof *outputs, d->outputs, (size_t)k,
                                      offsetof(kiln_label_array, num_classes),
                                      "kiln_arrays_desc.outputs", why);
        d->outputs = outputs;
    }
    return st;
}

/* The same for a desc of several inputs (d->inputs); `shape` gets the
 * packed sample's (total floats). */
static kiln_status check_inputs(kiln_context *ctx, const kiln_arrays_desc *d, kiln_shape *shape)
{
    const char *fn = "kiln_dataset_from_arrays";
    if (d->n_inputs < 0 || d->n_inputs > KILN_MAX_MODEL_INPUTS || !d->inputs)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: n_inputs is %d%s; it must be "
                          "in 0..%d with inputs set", fn, (int)d->n_inputs,
                          d->inputs ? "" : " and inputs is NULL", KILN_MAX_MODEL_INPUTS);
    if (d->feature_rank || d->features || d->int_features)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: n_inputs is %d, so "
                          "feature_rank, features and int_features must be left zero (each "
                          "input's are in inputs[])", fn, (int)d->n_inputs);
    int64_t total = 0;
    for (int32_t k = 0; k < d->n_inputs; k++) {
        const kiln_input_array *a = &d->inputs[k];
        char at[64];
        snprintf(at, sizeof at, "%s: inputs[%d]", fn, (int)k);
        const kiln_status st = kiln_check_samples(ctx, at, d->count, a->rank, a->dims);
        if (st != KILN_OK)
            return st;
        if (!a->features == !a->int_features)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s; set exactly one "
                              "(float features, or int32 ids for an Input of "
                              "kiln_input_ints)", at,
                              a->features ? "both features and int_features are set"
                                          : "features and int_features are both NULL");
        const kiln_shape part = {.rank = a->rank, .dims = {a->dims[0], a->dims[1],
                                                            a->dims[2], a->dims[3]}};
        total += sample_size(&part);
        if (total > INT32_MAX || sample_size(&part) < 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: a sample of the inputs "
                              "holds more than %d values", fn, INT32_MAX);
    }
    *shape = (kiln_shape){.rank = 1, .dims = {(int32_t)total}};
    return KILN_OK;
}

static kiln_status check_label_desc(kiln_context *ctx, const kiln_arrays_desc *d,
                                    const char *fn)
{
    if (d->label_kind == KILN_LABELS_SPARSE) {
        if (!d->sparse_labels)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: sparse_labels is NULL (label_kind is KILN_LABELS_SPARSE)",
                              fn);
        if (d->num_classes < 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: num_classes is %d; it must be >= 0 (0: not checked)", fn,
                              (int)d->num_classes);
        if (d->label_size < 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: label_size is %d; sparse labels need label_size >= 0 (ids "
                              "per sample; 0: 1)", fn, (int)d->label_size);
    } else if (d->label_kind == KILN_LABELS_DENSE) {
        if (d->label_size <= 0)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: label_size is %d; dense labels need label_size > 0", fn,
                              (int)d->label_size);
        if (!d->dense_labels)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: dense_labels is NULL (label_kind is KILN_LABELS_DENSE)", fn);
    } else {
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: label_kind is %d, which is not a kiln_label_kind", fn,
                          (int)d->label_kind);
    }
    return KILN_OK;
}

/* The label arrays of several outputs, each checked as the single-output
 * fields are; `words` gets a sample's label words in all. */
static kiln_status check_outputs(kiln_context *ctx, const kiln_arrays_desc *d, int32_t *words)
{
    const char *fn = "kiln_dataset_from_arrays";
    if (d->n_outputs < 0 || d->n_outputs > KILN_MAX_MODEL_OUTPUTS || !d->outputs)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: n_outputs is %d%s; it must "
                          "be in 0..%d with outputs set", fn, (int)d->n_outputs,
                          d->outputs ? "" : " and outputs is NULL", KILN_MAX_MODEL_OUTPUTS);
    if (d->sparse_labels || d->dense_labels || d->label_size || d->num_classes ||
        d->label_kind != KILN_LABELS_SPARSE)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: n_outputs is %d, so "
                          "label_kind, sparse_labels, label_size, dense_labels and num_classes "
                          "must be left zero (each output's are in outputs[])", fn,
                          (int)d->n_outputs);
    int64_t total = 0;
    for (int32_t k = 0; k < d->n_outputs; k++) {
        const kiln_label_array *a = &d->outputs[k];
        const kiln_arrays_desc one = {.label_kind = a->label_kind,
                                      .sparse_labels = a->sparse_labels,
                                      .label_size = a->label_size,
                                      .dense_labels = a->dense_labels,
                                      .num_classes = a->num_classes};
        char at[64];
        snprintf(at, sizeof at, "%s: outputs[%d]", fn, (int)k);
        const kiln_status st = check_label_desc(ctx, &one, at);
        if (st != KILN_OK)
            return st;
        total += a->label_size ? a->label_size : 1;
        if (total > INT32_MAX / 2)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: a sample's labels hold "
                              "more than %d values", fn, INT32_MAX / 2);
    }
    *words = (int32_t)total;
    return KILN_OK;
}

/* Negative labels are never valid: they would index outside the output.
 * `size` ids per sample, one per position. */
static kiln_status check_labels(kiln_context *ctx, const int32_t *labels, int64_t count,
                                int32_t size, int32_t num_classes)
{
    for (int64_t i = 0; i < count * size; i++) {
        const int32_t y = labels[i];
        if (y >= 0 && (num_classes <= 0 || y < num_classes))
            continue;
        char at[64];
        if (size > 1)
            snprintf(at, sizeof at, "sample %lld, position %d,", (long long)(i / size),
                     (int)(i % size));
        else
            snprintf(at, sizeof at, "sample %lld", (long long)i);
        if (y < 0)
            return kiln_error(ctx, KILN_ERROR_DATA,
                              "kiln_dataset_from_arrays: %s has label %d; labels must be >= 0",
                              at, (int)y);
        return kiln_error(ctx, KILN_ERROR_DATA,
                          "kiln_dataset_from_arrays: %s has label %d, outside [0, %d) for "
                          "num_classes %d", at, (int)y, (int)num_classes, (int)num_classes);
    }
    return KILN_OK;
}

/* NaN or Inf would reach the weights through a gradient while the loss can
 * stay finite (ReLU maps NaN to 0), so they are refused where they enter. */
static kiln_status check_finite(kiln_context *ctx, const float *x, int64_t count, int64_t size,
                                const char *what)
{
    for (int64_t i = 0; i < count * size; i++)
        if (!isfinite(x[i]))
            return kiln_error(ctx, KILN_ERROR_DATA,
                              "kiln_dataset_from_arrays: sample %lld, element %lld of its %s "
                              "is %s; every value must be finite", (long long)(i / size),
                              (long long)(i % size), what,
                              isnan(x[i]) ? "NaN" : x[i] > 0 ? "+Inf" : "-Inf");
    return KILN_OK;
}

/* Several outputs: each sample's labels one output after another, ids as
 * int32 bits (the layout every batch keeps up to the device). */
static kiln_status pack_outputs(kiln_dataset *ds, const kiln_arrays_desc *d)
{
    ds->n_label_parts = d->n_outputs;
    int32_t offset = 0;
    for (int32_t k = 0; k < d->n_outputs; k++) {
        const kiln_label_array *a = &d->outputs[k];
        const int sparse = a->label_kind == KILN_LABELS_SPARSE;
        const int32_t size = sparse && a->label_size == 0 ? 1 : a->label_size;
        char what[32];
        snprintf(what, sizeof what, "output %d's labels", (int)k);
        const kiln_status st =
            sparse ? check_labels(ds->ctx, a->sparse_labels, ds->count, size, a->num_classes)
                   : check_finite(ds->ctx, a->dense_labels, ds->count, size, what);
        if (st != KILN_OK)
            return st;
        ds->label_part_kind[k] = a->label_kind;
        ds->label_part_size[k] = size;
        const char *src = sparse ? (const char *)a->sparse_labels
                                 : (const char *)a->dense_labels;
        for (int64_t i = 0; i < ds->count; i++)
            memcpy(ds->dense_labels + i * ds->label_size + offset,
                   src + (size_t)(i * size) * 4, (size_t)size * 4);
        offset += size;
    }
    return KILN_OK;
}

/* Several inputs: each sample's values one input after another (the
 * layout every batch keeps up to the device). */
static kiln_status pack_inputs(kiln_dataset *ds, const kiln_arrays_desc *d)
{
    ds->n_parts = d->n_inputs;
    ds->dtype = KILN_DTYPE_FLOAT32;
    int64_t offset = 0;
    for (int32_t k = 0; k < d->n_inputs; k++) {
        const kiln_input_array *a = &d->inputs[k];
        kiln_shape *part = &ds->part_shape[k];
        *part = (kiln_shape){.rank = a->rank};
        for (int32_t i = 0; i < a->rank; i++)
            part->dims[i] = a->dims[i];
        ds->part_ints[k] = a->int_features != NULL;
        const int64_t size = sample_size(part);
        if (!ds->part_ints[k]) {
            char what[32];
            snprintf(what, sizeof what, "input %d", (int)k);
            const kiln_status st = check_finite(ds->ctx, a->features, ds->count, size, what);
            if (st != KILN_OK)
                return st;
        }
        const char *src = a->features ? (const char *)a->features
                                      : (const char *)a->int_features;
        for (int64_t i = 0; i < ds->count; i++)
            memcpy(ds->features + i * ds->feature_size + offset,
                   src + (size_t)(i * size) * sizeof(float), (size_t)size * sizeof(float));
        offset += size;
    }
    return KILN_OK;
}

kiln_status kiln_dataset_from_arrays(kiln_context *ctx, const kiln_arrays_desc *desc,
                                     kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_from_arrays: out is NULL");
    if (!desc)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_from_arrays: desc is NULL");
    kiln_arrays_desc d;
    kiln_input_array inputs[KILN_MAX_MODEL_INPUTS];
    kiln_label_array outputs[KILN_MAX_MODEL_OUTPUTS];
    kiln_diag why;
    /* num_classes is the one field with a zero default. */
    if (kiln_options_take(&d, sizeof d, desc, offsetof(kiln_arrays_desc, num_classes),
                          "kiln_arrays_desc", &why) != KILN_OK ||
        take_arrays(&d, inputs, outputs, &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_dataset_from_arrays: %s", why.message);
    kiln_shape shape = {.rank = d.feature_rank};
    kiln_status st = d.n_inputs ? check_inputs(ctx, &d, &shape) : check_desc(ctx, &d);
    int32_t words = 0;
    if (st == KILN_OK)
        st = d.n_outputs ? check_outputs(ctx, &d, &words)
                         : check_label_desc(ctx, &d, "kiln_dataset_from_arrays");
    if (st != KILN_OK)
        return st;
    for (int32_t i = 0; !d.n_inputs && i < d.feature_rank; i++)
        shape.dims[i] = d.feature_dims[i];
    const int sparse = !d.n_outputs && d.label_kind == KILN_LABELS_SPARSE;
    const int32_t label_size = d.n_outputs ? words
                               : sparse && d.label_size == 0 ? 1 : d.label_size;
    kiln_dataset *ds;
    /* Sizes are checked for overflow here, before the caller's arrays are read. */
    st = kiln_dataset_alloc(ctx, d.count, &shape,
                            sparse ? KILN_LABELS_SPARSE : KILN_LABELS_DENSE, label_size, &ds);
    if (st != KILN_OK)
        return st;
    if (d.n_outputs) {
        st = pack_outputs(ds, &d);
        if (st != KILN_OK)
            goto fail;
    } else if (sparse) {
        st = check_labels(ctx, d.sparse_labels, d.count, label_size, d.num_classes);
        if (st != KILN_OK)
            goto fail;
        memcpy(ds->sparse_labels, d.sparse_labels,
               (size_t)(d.count * label_size) * sizeof(int32_t));
        ds->max_label = sparse_max(ds->sparse_labels, ds->count * label_size);
    } else {
        st = check_finite(ctx, d.dense_labels, d.count, label_size, "labels");
        if (st != KILN_OK)
            goto fail;
        memcpy(ds->dense_labels, d.dense_labels,
               (size_t)(d.count * label_size) * sizeof(float));
    }
    if (d.n_inputs) {
        st = pack_inputs(ds, &d);
        if (st != KILN_OK)
            goto fail;
        *out = ds;
        return KILN_OK;
    }
    /* Ids keep their bits in the float array: only an id-reading layer
     * sees them as numbers. */
    ds->ints = d.int_features != NULL;
    ds->dtype = ds->ints ? KILN_DTYPE_INT32 : KILN_DTYPE_FLOAT32;
    if (!ds->ints)
        st = check_finite(ctx, d.features, ds->count, ds->feature_size, "features");
    if (st != KILN_OK)
        goto fail;
    memcpy(ds->features, ds->ints ? (const void *)d.int_features : (const void *)d.features,
           (size_t)(ds->count * ds->feature_size) * sizeof(float));
    *out = ds;
    return KILN_OK;
fail:
    kiln_dataset_destroy(ds);
    return st;
}

kiln_status kiln_dataset_count(const kiln_dataset *ds, int64_t *count)
{
    if (count)
        *count = 0;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_count: count is NULL");
    *count = ds->count;
    return KILN_OK;
}

kiln_status kiln_dataset_subset(const kiln_dataset *ds, int64_t start, int64_t count,
                                kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_subset: out is NULL");
    if (start < 0 || count <= 0 || start >= ds->count || count > ds->count - start)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_subset: start %lld, count %lld is not within the "
                          "dataset's %lld samples (need start >= 0, count > 0, "
                          "start + count <= %lld)", (long long)start, (long long)count,
                          (long long)ds->count, (long long)ds->count);
    kiln_dataset *sub = kiln_calloc(ds->ctx, 1, sizeof *sub);
    if (!sub)
        return kiln_error_oom(ds->ctx, "a dataset", sizeof *sub);
    /* A view: the same facts and transforms, indices shifted by `start`. */
    *sub = *ds;
    kiln_context_hold(ds->ctx);
    sub->refs = 1;
    sub->count = count;
    sub->owns_arrays = 0;
    sub->ops = NULL;
    sub->source = NULL;
    sub->parent = (kiln_dataset *)ds;   /* held, never written through */
    sub->offset = start;
    __atomic_add_fetch(&sub->parent->refs, 1, __ATOMIC_RELAXED);
    if (ds->features) {
        sub->features = ds->features + start * ds->feature_size;
        if (ds->label_kind == KILN_LABELS_SPARSE) {
            sub->sparse_labels = ds->sparse_labels + start * ds->label_size;
            sub->max_label = sparse_max(sub->sparse_labels, count * ds->label_size);
        } else {
            sub->dense_labels = ds->dense_labels + start * ds->label_size;
        }
    }
    *out = sub;
    return KILN_OK;
}

void kiln_dataset_destroy(kiln_dataset *ds)
{
    if (!ds || __atomic_sub_fetch(&ds->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    kiln_context *ctx = ds->ctx;
    if (ds->parent) {
        kiln_dataset_destroy(ds->parent);
    } else {
        if (ds->ops && ds->ops->destroy)
            ds->ops->destroy(ds);
        for (int32_t i = 0; i < ds->n_classes; i++)
            kiln_free(ctx, ds->class_names[i]);
        kiln_free(ctx, ds->class_names);
    }
    if (ds->owns_arrays) {
        kiln_free(ctx, ds->features);
        kiln_free(ctx, ds->sparse_labels);
        kiln_free(ctx, ds->dense_labels);
    }
    kiln_free(ctx, ds);
    kiln_context_release(ctx);
}

void kiln_epoch_order(int64_t count, uint64_t seed, int32_t epoch, int shuffle,
                      int64_t *order)
{
    for (int64_t i = 0; i < count; i++)
        order[i] = i;
    if (!shuffle)
        return;
    kiln_rng rng;
    kiln_rng_seed(&rng, seed, SHUFFLE_STREAM + (uint64_t)epoch);
    for (int64_t i = count - 1; i > 0; i--) {
        const int64_t j = (int64_t)kiln_rng_below(&rng, (uint64_t)i + 1);
        const int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

void kiln_dataset_gather(const kiln_dataset *ds, const int64_t *order, int32_t n,
                         float *features, void *labels)
{
    const size_t fsize = (size_t)ds->feature_size;
    const size_t lsize = (size_t)ds->label_size;
    for (int32_t i = 0; i < n; i++) {
        const size_t s = (size_t)order[i];
        memcpy(features + (size_t)i * fsize, ds->features + s * fsize, fsize * sizeof(float));
        if (ds->label_kind == KILN_LABELS_SPARSE)
            memcpy((int32_t *)labels + (size_t)i * lsize, ds->sparse_labels + s * lsize,
                   lsize * sizeof(int32_t));
        else
            memcpy((float *)labels + (size_t)i * lsize, ds->dense_labels + s * lsize,
                   lsize * sizeof(float));
    }
}
