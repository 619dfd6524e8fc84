#include "runtime/dataset.h"

#include "runtime/context.h"
#include "runtime/rng.h"

#include <string.h>

/* Allocates an empty dataset body for count samples of `shape`. */
kiln_status kiln_dataset_alloc(kiln_context *ctx, int64_t count, const kiln_shape *shape,
                               kiln_label_kind kind, int32_t label_size, kiln_dataset **out)
{
    *out = NULL;
    const int64_t fsize = kiln_shape_size(shape);
    if (count <= 0 || fsize <= 0 || label_size <= 0 || count > INT64_MAX / fsize ||
        (uint64_t)(count * fsize) > SIZE_MAX / sizeof(float) ||
        count > INT64_MAX / label_size)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "a dataset of %lld samples of %lld floats is not possible",
                          (long long)count, (long long)fsize);
    kiln_dataset *ds = kiln_calloc(ctx, 1, sizeof *ds);
    if (!ds)
        return kiln_error_oom(ctx, "a dataset", sizeof *ds);
    ds->ctx = ctx;
    ds->count = count;
    ds->feature_shape = *shape;
    ds->feature_size = fsize;
    ds->label_kind = kind;
    ds->label_size = label_size;
    ds->max_label = -1;
    ds->features = kiln_calloc(ctx, (size_t)(count * fsize), sizeof(float));
    if (kind == KILN_LABELS_SPARSE)
        ds->sparse_labels = kiln_calloc(ctx, (size_t)count, sizeof(int32_t));
    else
        ds->dense_labels = kiln_calloc(ctx, (size_t)(count * label_size), sizeof(float));
    if (!ds->features || (!ds->sparse_labels && !ds->dense_labels)) {
        kiln_dataset_destroy(ds);
        return kiln_error_oom(ctx, "dataset samples", (size_t)(count * fsize) * sizeof(float));
    }
    *out = ds;
    return KILN_OK;
}

/* Checks sparse labels: never negative, below num_classes when it is set. */
static kiln_status scan_labels(kiln_dataset *ds, int32_t num_classes)
{
    for (int64_t i = 0; i < ds->count; i++) {
        const int32_t y = ds->sparse_labels[i];
        if (y < 0 || (num_classes > 0 && y >= num_classes))
            return kiln_error(ds->ctx, KILN_ERROR_DATA,
                              "label %d of sample %lld is out of range: labels must be in "
                              "[0, %d)", (int)y, (long long)i,
                              num_classes > 0 ? (int)num_classes : INT32_MAX);
        if (y > ds->max_label)
            ds->max_label = y;
    }
    return KILN_OK;
}

kiln_status kiln_dataset_from_arrays(kiln_context *ctx, const kiln_arrays_desc *desc,
                                     kiln_dataset **out)
{
    if (!out)
        return KILN_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!desc)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_from_arrays: desc is NULL");
    kiln_arrays_desc d;
    kiln_options_copy(&d, sizeof d, desc);
    const char *bad = NULL;
    kiln_shape shape = {d.feature_rank, {0}};
    if (d.count <= 0)
        bad = "count must be > 0";
    else if (d.feature_rank < 1 || d.feature_rank > KILN_MAX_RANK)
        bad = "feature_rank must be in 1..4";
    else if (!d.features)
        bad = "features is NULL";
    else if (d.label_kind != KILN_LABELS_SPARSE && d.label_kind != KILN_LABELS_DENSE)
        bad = "label_kind is not a kiln_label_kind";
    else if (d.label_kind == KILN_LABELS_SPARSE && !d.sparse_labels)
        bad = "sparse_labels is NULL";
    else if (d.label_kind == KILN_LABELS_DENSE && (d.label_size <= 0 || !d.dense_labels))
        bad = "dense labels need label_size > 0 and dense_labels";
    else if (d.num_classes < 0)
        bad = "num_classes must be >= 0";
    for (int32_t i = 0; !bad && i < d.feature_rank; i++) {
        shape.dims[i] = d.feature_dims[i];
        if (d.feature_dims[i] <= 0)
            bad = "every feature dimension must be > 0";
    }
    if (bad)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_from_arrays: %s",
                          bad);
    const int32_t label_size = d.label_kind == KILN_LABELS_SPARSE ? 1 : d.label_size;
    kiln_dataset *ds;
    kiln_status st = kiln_dataset_alloc(ctx, d.count, &shape, d.label_kind, label_size, &ds);
    if (st != KILN_OK)
        return st;
    memcpy(ds->features, d.features, (size_t)(ds->count * ds->feature_size) * sizeof(float));
    if (d.label_kind == KILN_LABELS_SPARSE) {
        memcpy(ds->sparse_labels, d.sparse_labels, (size_t)ds->count * sizeof(int32_t));
        st = scan_labels(ds, d.num_classes);
    } else {
        memcpy(ds->dense_labels, d.dense_labels,
               (size_t)(ds->count * label_size) * sizeof(float));
    }
    if (st != KILN_OK) {
        kiln_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return KILN_OK;
}

kiln_status kiln_dataset_count(const kiln_dataset *ds, int64_t *count)
{
    if (!ds || !count)
        return KILN_ERROR_INVALID_ARGUMENT;
    *count = ds->count;
    return KILN_OK;
}

kiln_status kiln_dataset_subset(const kiln_dataset *ds, int64_t start, int64_t count,
                                kiln_dataset **out)
{
    if (!out)
        return KILN_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (start < 0 || count <= 0 || start > ds->count || count > ds->count - start)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_subset: samples [%lld, %lld + %lld) are not within the "
                          "dataset's %lld", (long long)start, (long long)start,
                          (long long)count, (long long)ds->count);
    kiln_dataset *sub;
    kiln_status st = kiln_dataset_alloc(ds->ctx, count, &ds->feature_shape, ds->label_kind,
                                        ds->label_size, &sub);
    if (st != KILN_OK)
        return st;
    memcpy(sub->features, ds->features + start * ds->feature_size,
           (size_t)(count * ds->feature_size) * sizeof(float));
    if (ds->label_kind == KILN_LABELS_SPARSE) {
        memcpy(sub->sparse_labels, ds->sparse_labels + start, (size_t)count * sizeof(int32_t));
        scan_labels(sub, 0);
    } else {
        memcpy(sub->dense_labels, ds->dense_labels + start * ds->label_size,
               (size_t)(count * ds->label_size) * sizeof(float));
    }
    *out = sub;
    return KILN_OK;
}

void kiln_dataset_destroy(kiln_dataset *ds)
{
    if (!ds)
        return;
    kiln_free(ds->ctx, ds->features);
    kiln_free(ds->ctx, ds->sparse_labels);
    kiln_free(ds->ctx, ds->dense_labels);
    kiln_free(ds->ctx, ds);
}

void kiln_epoch_order(int64_t count, uint64_t seed, int32_t epoch, int shuffle,
                      int64_t *order)
{
    for (int64_t i = 0; i < count; i++)
        order[i] = i;
    if (!shuffle)
        return;
    kiln_rng rng;
    kiln_rng_seed(&rng, seed, 0x5348554646ULL + (uint64_t)epoch);
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
    const size_t fbytes = (size_t)ds->feature_size * sizeof(float);
    for (int32_t i = 0; i < n; i++) {
        const int64_t s = order[i];
        memcpy(features + (size_t)i * (size_t)ds->feature_size,
               ds->features + s * ds->feature_size, fbytes);
        if (ds->label_kind == KILN_LABELS_SPARSE)
            ((int32_t *)labels)[i] = ds->sparse_labels[s];
        else
            memcpy((float *)labels + (size_t)i * (size_t)ds->label_size,
                   ds->dense_labels + s * ds->label_size,
                   (size_t)ds->label_size * sizeof(float));
    }
}
