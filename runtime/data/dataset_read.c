/* Reading one sample, whatever its source: resident arrays, a streamed
 * source through its ops, views shifting indices; then the checks a
 * streamed source needs, the application's map and the augmentations. And
 * the public accessors built on it. */
#include "runtime/data/augment.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t kiln_dataset_label_bytes(const kiln_dataset *ds)
{
    return (size_t)ds->label_size *
           (ds->label_kind == KILN_LABELS_SPARSE ? sizeof(int32_t) : sizeof(float));
}

/* The dataset that holds sample `*index` of `ds`: `ds` itself when it is
 * resident (views point into their parent's arrays) or a source; else the
 * view's parent, with the index shifted. */
static const kiln_dataset *holder(const kiln_dataset *ds, int64_t *index)
{
    while (!ds->features && !ds->ops && ds->parent) {
        *index += ds->offset;
        ds = ds->parent;
    }
    return ds;
}

static kiln_status read_source(const kiln_dataset *ds, int64_t index,
                               const kiln_read_plan *plan, float *features, void *label)
{
    int64_t at = index;
    const kiln_dataset *h = holder(ds, &at);
    if (!h->features)
        return h->ops->read(h, at, plan, features, label);
    const size_t fsize = (size_t)h->feature_size;
    memcpy(features, h->features + (size_t)at * fsize, fsize * sizeof(float));
    if (h->label_kind == KILN_LABELS_SPARSE)
        memcpy(label, h->sparse_labels + (size_t)at * (size_t)h->label_size,
               (size_t)h->label_size * sizeof(int32_t));
    else
        memcpy(label, h->dense_labels + (size_t)at * (size_t)h->label_size,
               (size_t)h->label_size * sizeof(float));
    return KILN_OK;
}

static kiln_status check_finite(const kiln_dataset *ds, int64_t index, const float *x,
                                int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return kiln_error(ds->ctx, KILN_ERROR_DATA, "sample %lld: element %lld of its %s "
                              "is %s; every value must be finite", (long long)index,
                              (long long)i, what,
                              isnan(x[i]) ? "NaN" : x[i] > 0 ? "+Inf" : "-Inf");
    return KILN_OK;
}

/* Several outputs: the ids of each sparse label array against its
 * output's classes. */
static kiln_status check_label_parts(const kiln_dataset *ds, int64_t index, const void *label,
                                     const kiln_read_plan *plan)
{
    int32_t offset = 0;
    for (int32_t k = 0; k < ds->n_label_parts; offset += ds->label_part_size[k], k++) {
        const int32_t classes = k < plan->n_label_classes ? plan->label_classes[k] : 0;
        for (int32_t p = 0; ds->label_part_kind[k] == KILN_LABELS_SPARSE &&
                            p < ds->label_part_size[k]; p++) {
            int32_t y;
            memcpy(&y, (const int32_t *)label + offset + p, sizeof y);
            if (y >= 0 && (classes <= 0 || y < classes))
                continue;
            char at[32] = "";
            if (ds->label_part_size[k] > 1)
                snprintf(at, sizeof at, ", position %d", (int)p);
            if (y < 0)
                return kiln_error(ds->ctx, KILN_ERROR_DATA, "sample %lld%s: label array %d has "
                                  "label %d; labels must be >= 0", (long long)index, at,
                                  (int)k, (int)y);
            return kiln_error(ds->ctx, KILN_ERROR_DATA, "sample %lld%s: label array %d has "
                              "label %d, outside [0, %d): output %d has %d classes",
                              (long long)index, at, (int)k, (int)y, (int)classes, (int)k,
                              (int)classes);
        }
    }
    return KILN_OK;
}

static kiln_status check_label(const kiln_dataset *ds, int64_t index, const void *label,
                               const kiln_read_plan *plan)
{
    if (ds->n_label_parts)
        return check_label_parts(ds, index, label, plan);
    if (ds->label_kind != KILN_LABELS_SPARSE)
        return ds->features_unchecked || ds->labels_unchecked
                   ? check_finite(ds, index, label, ds->label_size, "label")
                   : KILN_OK;
    for (int32_t p = 0; p < ds->label_size; p++) {
        int32_t y;
        memcpy(&y, (const int32_t *)label + p, sizeof y);
        if (y < 0 || (plan->max_classes > 0 && y >= plan->max_classes && y != plan->ignore)) {
            char at[32] = "";
            if (ds->label_size > 1)
                snprintf(at, sizeof at, ", position %d,", (int)p);
            return kiln_error(ds->ctx, KILN_ERROR_DATA, "sample %lld%s has label %d, outside "
                              "[0, %d): the output has %d classes", (long long)index, at,
                              (int)y, (int)plan->max_classes, (int)plan->max_classes);
        }
    }
    return KILN_OK;
}

kiln_status kiln_dataset_find_label(const kiln_dataset *ds, int32_t part, int64_t first,
                                    int64_t count, int32_t limit, int32_t ignore,
                                    kiln_label_hit *hit)
{
    *hit = (kiln_label_hit){.sample = -1};
    int64_t at = first;
    const kiln_dataset *h = holder(ds, &at);
    const int one = !h->n_label_parts && h->label_kind == KILN_LABELS_SPARSE;
    if (one && !h->labels_unchecked && h->max_label < limit) {
        hit->searched = 1;   /* no label reaches it: nothing to read */
        return KILN_OK;
    }
    if (one && h->sparse_labels) {
        const int64_t n = (int64_t)h->label_size;
        hit->searched = 1;
        for (int64_t i = at * n; i < (at + count) * n; i++) {
            const int32_t y = h->sparse_labels[i];
            if (y < limit || y == ignore)
                continue;
            hit->sample = i / n;
            hit->position = (int32_t)(i % n);
            hit->label = y;
            break;
        }
    } else if (h->ops && h->ops->find_label) {
        const kiln_status st = h->ops->find_label(h, part, at, count, limit, ignore, hit);
        if (st != KILN_OK)
            return st;
    }
    if (hit->sample < 0)
        return KILN_OK;
    /* A view's index is its own; its source's is named beside the file. */
    if (at != first && hit->where[0]) {
        char where[sizeof hit->where + 32];
        snprintf(where, sizeof where, "sample %lld of %s", (long long)hit->sample, hit->where);
        memcpy(hit->where, where, sizeof hit->where - 1);   /* cut short if it must be */
        hit->where[sizeof hit->where - 1] = '\0';
    }
    hit->sample -= at - first;
    return KILN_OK;
}

kiln_status kiln_check_ids(kiln_context *ctx, const char *call, const int32_t *ids,
                           int64_t count, int64_t per_sample, int64_t first_sample,
                           int32_t limit, const char *layer)
{
    for (int64_t i = 0; i < count * per_sample; i++)
        if (ids[i] < 0 || ids[i] >= limit)
            return kiln_error(ctx, KILN_ERROR_DATA, "%s%ssample %lld, position %lld: id %d is "
                              "outside [0, %d), the input_dim of layer '%s'", call ? call : "",
                              call ? ": " : "", (long long)(first_sample + i / per_sample),
                              (long long)(i % per_sample), (int)ids[i], (int)limit, layer);
    return KILN_OK;
}

kiln_status kiln_check_id_ranges(kiln_context *ctx, const char *call, const kiln_id_range *r,
                                 int32_t n, const float *x, int64_t count, int64_t stride,
                                 int64_t first_sample)
{
    for (int32_t k = 0; k < n; k++) {
        if (r[k].limit <= 0)
            continue;
        for (int64_t i = 0; i < count; i++) {
            const int32_t *ids = (const int32_t *)(x + i * stride + r[k].offset);
            for (int64_t p = 0; p < r[k].size; p++) {
                if (ids[p] >= 0 && ids[p] < r[k].limit)
                    continue;
                if (!r[k].input)
                    return kiln_check_ids(ctx, call, ids, 1, r[k].size, first_sample + i,
                                          r[k].limit, r[k].layer);
                return kiln_error(ctx, KILN_ERROR_DATA, "%s%ssample %lld, position %lld of "
                                  "input '%s': id %d is outside [0, %d), the input_dim of "
                                  "layer '%s'", call ? call : "", call ? ": " : "",
                                  (long long)(first_sample + i), (long long)p, r[k].input,
                                  (int)ids[p], (int)r[k].limit, r[k].layer);
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln_dataset_read_sample(const kiln_dataset *ds, int64_t index,
                                     const kiln_read_plan *plan, float *features, void *label,
                                     float *scratch)
{
    kiln_status st = read_source(ds, index, plan, features, label);
    if (st == KILN_OK)
        st = check_label(ds, index, label, plan);
    if (st == KILN_OK && plan->n_ids > 0)
        st = kiln_check_id_ranges(ds->ctx, NULL, plan->ids, plan->n_ids, features, 1,
                                  ds->feature_size, index);
    if (st == KILN_OK && ds->features_unchecked && !ds->ints)
        st = check_finite(ds, index, features, ds->feature_size, "features");
    const kiln_transforms *t = &ds->transforms;
    if (st == KILN_OK && t->map) {
        char message[256] = "";
        if (t->map(t->map_user, index, features, message, sizeof message) != 0)
            return kiln_error(ds->ctx, KILN_ERROR_DATA, "the map callback failed on sample "
                              "%lld%s%s", (long long)index, message[0] ? ": " : "", message);
        st = check_finite(ds, index, features, ds->feature_size, "features after the map");
    }
    if (st == KILN_OK && plan->augment && t->augmenting)
        kiln_augment_sample(&t->augment, t->augment.seed ? t->augment.seed : plan->augment_seed,
                            plan->epoch, index, &ds->feature_shape, features, scratch);
    return st;
}

kiln_status kiln_dataset_sample_shape(const kiln_dataset *ds, int32_t *rank, int32_t *dims,
                                      kiln_dtype *dtype)
{
    if (rank)
        *rank = 0;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!rank || !dims)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_sample_shape: %s is NULL", !rank ? "rank" : "dims");
    *rank = ds->feature_shape.rank;
    for (int32_t i = 0; i < ds->feature_shape.rank; i++)
        dims[i] = ds->feature_shape.dims[i];
    if (dtype)
        *dtype = ds->dtype;
    return KILN_OK;
}

/* How many of a dataset's inputs hold ids (one input: 0 or 1). */
static int32_t id_parts(const kiln_dataset *ds)
{
    int32_t n = ds->n_parts ? 0 : ds->ints;
    for (int32_t k = 0; k < ds->n_parts; k++)
        n += ds->part_ints[k] != 0;
    return n;
}

kiln_status kiln_dataset_feature_type(const kiln_dataset *ds, kiln_dtype *type)
{
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!type)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_feature_type: type is NULL");
    const int32_t ids = id_parts(ds), parts = ds->n_parts ? ds->n_parts : 1;
    if (ids > 0 && ids < parts)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_feature_type: "
                          "the dataset's %d inputs hold %d of ids and %d of floats",
                          (int)parts, (int)ids, (int)(parts - ids));
    *type = ids ? KILN_DTYPE_INT32 : KILN_DTYPE_FLOAT32;
    return KILN_OK;
}

/* Whether the labels are int32 ids: one output's kind, or every output's. */
static int sparse_labels(const kiln_dataset *ds)
{
    if (!ds->n_label_parts)
        return ds->label_kind == KILN_LABELS_SPARSE;
    for (int32_t k = 0; k < ds->n_label_parts; k++)
        if (ds->label_part_kind[k] != KILN_LABELS_SPARSE)
            return 0;
    return 1;
}

/* Buffers of the wrong kind: the message says what the dataset holds. */
static kiln_status check_buffers(const kiln_dataset *ds, const kiln_sample_buffers *b)
{
    const char *fn = "kiln_dataset_read";
    const int32_t parts = ds->n_parts ? ds->n_parts : 1, ids = id_parts(ds);
    if (ids == parts && b->features)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->features is "
                          "set but the dataset's features are int32 ids; read them into "
                          "buffers->int_features", fn);
    if (ids < parts && b->int_features) {
        if (ids > 0)
            return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->"
                              "int_features is set but the dataset's %d inputs hold %d of ids "
                              "and %d of floats; read the packed sample into "
                              "buffers->features (ids as int32 bits)", fn, (int)parts,
                              (int)ids, (int)(parts - ids));
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->int_features "
                          "is set but the dataset's features are floats; read them into "
                          "buffers->features", fn);
    }
    if (ds->unlabeled && (b->sparse_labels || b->dense_labels))
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->%s is set but "
                          "the dataset has no labels (made without a labels file)", fn,
                          b->sparse_labels ? "sparse_labels" : "dense_labels");
    const int sparse = sparse_labels(ds);
    if (sparse && b->dense_labels)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->dense_labels "
                          "is set but the dataset's labels are sparse int32 class ids; read "
                          "them into buffers->sparse_labels", fn);
    if (!sparse && b->sparse_labels) {
        if (ds->n_label_parts)
            return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->"
                              "sparse_labels is set but not every one of the dataset's %d "
                              "label arrays is sparse; read the packed labels into "
                              "buffers->dense_labels (ids as int32 bits)", fn,
                              (int)ds->n_label_parts);
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: buffers->sparse_labels "
                          "is set but the dataset's labels are dense floats; read them into "
                          "buffers->dense_labels", fn);
    }
    return KILN_OK;
}

/* The features and labels are packed 4-byte words whatever their type. */
static kiln_status read_one(const kiln_dataset *ds, int64_t index, void *features,
                            void *label);

kiln_status kiln_dataset_read(const kiln_dataset *ds, int64_t index,
                              const kiln_sample_buffers *buffers)
{
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    kiln_sample_buffers b;
    kiln_diag why;
    if (kiln_options_take(&b, sizeof b, buffers, sizeof(size_t), "kiln_sample_buffers",
                          &why) != KILN_OK)
        return kiln_error(ds->ctx, why.status, "kiln_dataset_read: %s", why.message);
    const kiln_status st = check_buffers(ds, &b);
    if (st != KILN_OK)
        return st;
    void *features = b.features ? (void *)b.features : (void *)b.int_features;
    void *label = b.sparse_labels ? (void *)b.sparse_labels : (void *)b.dense_labels;
    return read_one(ds, index, features, label);
}

static kiln_status read_one(const kiln_dataset *ds, int64_t index, void *features,
                            void *label)
{
    if (index < 0 || index >= ds->count)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_read: index "
                          "%lld is not in [0, %lld)", (long long)index, (long long)ds->count);
    const size_t fbytes = (size_t)ds->feature_size * sizeof(float);
    float *f = kiln_alloc(ds->ctx, fbytes);
    float l[64], *lbuf = l;
    if (kiln_dataset_label_bytes(ds) > sizeof l)
        lbuf = kiln_alloc(ds->ctx, kiln_dataset_label_bytes(ds));
    kiln_status st = KILN_OK;
    if (!f || !lbuf) {
        st = kiln_error_oom(ds->ctx, "one sample", fbytes);
    } else {
        const kiln_read_plan plan = {.augment = 0};
        st = kiln_dataset_read_sample(ds, index, &plan, f, lbuf, NULL);
        if (st != KILN_OK)
            st = kiln_fail_within(&ds->ctx->host, st, "kiln_dataset_read");
    }
    if (st == KILN_OK && features)
        memcpy(features, f, fbytes);
    if (st == KILN_OK && label)
        memcpy(label, lbuf, kiln_dataset_label_bytes(ds));
    kiln_free(ds->ctx, f);
    if (lbuf != l)
        kiln_free(ds->ctx, lbuf);
    return st;
}

/* The dataset a view was cut from, down to the source that has the names. */
static const kiln_dataset *root(const kiln_dataset *ds)
{
    while (ds->parent)
        ds = ds->parent;
    return ds;
}

kiln_status kiln_dataset_class_count(const kiln_dataset *ds, int32_t *count)
{
    if (count)
        *count = 0;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_class_count: count is NULL");
    *count = root(ds)->n_classes;
    return KILN_OK;
}

kiln_status kiln_dataset_class_name(const kiln_dataset *ds, int32_t index, const char **name)
{
    if (name)
        *name = NULL;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    const kiln_dataset *r = root(ds);
    if (!name || index < 0 || index >= r->n_classes)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_class_name: %s",
                          !name ? "name is NULL" : "index out of range");
    *name = r->class_names[index];
    return KILN_OK;
}

kiln_status kiln_dataset_skipped(const kiln_dataset *ds, int64_t *count)
{
    if (count)
        *count = 0;
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_dataset_skipped: count is NULL");
    *count = __atomic_load_n(&root(ds)->skipped, __ATOMIC_RELAXED);
    return KILN_OK;
}

kiln_status kiln_dataset_transform(kiln_dataset *ds, kiln_map_fn map, void *map_user,
                                   const kiln_augment_options *augment)
{
    if (!ds)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (ds->n_parts > 0 && (map || augment))
        return kiln_error(ds->ctx, KILN_ERROR_UNSUPPORTED, "kiln_dataset_transform: the "
                          "dataset holds %d input%s per sample; maps and augmentations work on "
                          "datasets of one float input (transform the one dataset before "
                          "kiln_dataset_zip joins it)",
                          (int)ds->n_parts, ds->n_parts == 1 ? "" : "s");
    if (ds->ints && (map || augment))
        return kiln_error(ds->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_transform: the "
                          "dataset's features are int32 ids; maps and augmentations work on "
                          "float features");
    kiln_transforms t = {.map = map, .map_user = map_user, .augmenting = augment != NULL};
    if (augment) {
        kiln_diag why;
        if (kiln_options_take(&t.augment, sizeof t.augment, augment, sizeof(size_t),
                              "kiln_augment_options", &why) != KILN_OK)
            return kiln_error(ds->ctx, why.status, "kiln_dataset_transform: %s", why.message);
        const kiln_status st = kiln_augment_check(ds->ctx, &t.augment, &ds->feature_shape);
        if (st != KILN_OK)
            return st;
    }
    /* A map or augmentation may produce what the source never would. */
    ds->transforms = t;
    return KILN_OK;
}
