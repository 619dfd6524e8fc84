/* kiln_dataset_from_callback: samples the application fills on demand,
 * from the loader threads. */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"

#include <stddef.h>
#include <stdio.h>

typedef struct callback_source {
    kiln_sample_fn fill;
    void *user;
    int32_t num_classes;
} callback_source;

static kiln_status callback_read(const kiln_dataset *ds, int64_t index,
                                 const kiln_read_plan *plan, float *features,
                                 void *label)
{
    (void)plan;
    const callback_source *c = ds->source;
    char message[256] = "";
    /* Inside kiln a sample is packed 4-byte words; the application sees
     * them typed, only the fields of its dataset's kinds set. */
    const int sparse = ds->label_kind == KILN_LABELS_SPARSE;
    const kiln_sample_buffers buffers = {
        .struct_size = sizeof buffers,
        .features = ds->ints ? NULL : features,
        .int_features = ds->ints ? (int32_t *)features : NULL,
        .sparse_labels = sparse ? (int32_t *)label : NULL,
        .dense_labels = sparse ? NULL : (float *)label,
    };
    if (c->fill(c->user, index, &buffers, message, sizeof message) != 0)
        return kiln_error(ds->ctx, KILN_ERROR_DATA, "the dataset's fill callback failed on "
                          "sample %lld%s%s", (long long)index, message[0] ? ": " : "",
                          message);
    for (int32_t p = 0; ds->label_kind == KILN_LABELS_SPARSE && c->num_classes > 0 &&
                        p < ds->label_size; p++) {
        const int32_t y = ((const int32_t *)label)[p];
        char at[32] = "";
        if (ds->label_size > 1)
            snprintf(at, sizeof at, ", position %d,", (int)p);
        if (y < 0 || y >= c->num_classes)
            return kiln_error(ds->ctx, KILN_ERROR_DATA, "sample %lld%s has label %d, outside "
                              "[0, %d) for num_classes %d", (long long)index, at, (int)y,
                              (int)c->num_classes, (int)c->num_classes);
    }
    return KILN_OK;
}

static void callback_destroy(kiln_dataset *ds)
{
    kiln_free(ds->ctx, ds->source);
}

static const kiln_source_ops callback_ops = {
    .kind = "callback", .read = callback_read, .destroy = callback_destroy,
};

static kiln_status check_desc(kiln_context *ctx, const kiln_callback_desc *d)
{
    const char *fn = "kiln_dataset_from_callback";
    const kiln_status st = kiln_check_samples(ctx, fn, d->count, d->feature_rank,
                                              d->feature_dims);
    if (st != KILN_OK)
        return st;
    if (!d->fill)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: fill is NULL", fn);
    if (d->label_kind != KILN_LABELS_SPARSE && d->label_kind != KILN_LABELS_DENSE)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: label_kind is %d, which is not a kiln_label_kind", fn,
                          (int)d->label_kind);
    if (d->label_kind == KILN_LABELS_DENSE && d->label_size <= 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: label_size is %d; dense labels need label_size > 0", fn,
                          (int)d->label_size);
    if (d->label_kind == KILN_LABELS_SPARSE && d->label_size < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: label_size is %d; sparse labels need label_size >= 0 (ids per "
                          "sample; 0: 1)", fn, (int)d->label_size);
    if (d->num_classes < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: num_classes is %d; it must be >= 0 (0: not checked)", fn,
                          (int)d->num_classes);
    return KILN_OK;
}

kiln_status kiln_dataset_from_callback(kiln_context *ctx, const kiln_callback_desc *desc,
                                       kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out || !desc)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_from_callback: %s "
                          "is NULL", !out ? "out" : "desc");
    kiln_callback_desc d;
    kiln_diag why;
    /* user and num_classes default to 0; fill is required. */
    if (kiln_options_take(&d, sizeof d, desc, offsetof(kiln_callback_desc, user),
                          "kiln_callback_desc", &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_dataset_from_callback: %s", why.message);
    kiln_status st = check_desc(ctx, &d);
    if (st != KILN_OK)
        return st;
    kiln_shape shape = {.rank = d.feature_rank};
    for (int32_t i = 0; i < d.feature_rank; i++)
        shape.dims[i] = d.feature_dims[i];
    const int sparse = d.label_kind == KILN_LABELS_SPARSE;
    callback_source *c = kiln_calloc(ctx, 1, sizeof *c);
    if (!c)
        return kiln_error_oom(ctx, "a callback source", sizeof *c);
    *c = (callback_source){.fill = d.fill, .user = d.user, .num_classes = d.num_classes};
    kiln_dataset *ds;
    st = kiln_dataset_new_streamed(ctx, d.count, &shape, d.label_kind,
                                   sparse && d.label_size == 0 ? 1 : d.label_size, &ds);
    if (st != KILN_OK) {
        kiln_free(ctx, c);
        return st;
    }
    ds->ops = &callback_ops;
    ds->source = c;
    ds->labels_unchecked = 1;   /* the application's labels are seen only as they are read */
    ds->max_label = sparse && d.num_classes > 0 ? d.num_classes - 1 : -1;
    ds->ints = d.int_features != 0;
    ds->dtype = ds->ints ? KILN_DTYPE_INT32 : KILN_DTYPE_FLOAT32;
    ds->features_unchecked = !ds->ints;
    *out = ds;
    return KILN_OK;
}
