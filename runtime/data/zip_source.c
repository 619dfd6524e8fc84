/* kiln_dataset_zip: one dataset per model input and per output, read
 * side by side (tf.data.Dataset.zip). Sample i packs input k's features
 * from sample i of inputs[k] and output k's labels from sample i of
 * outputs[k], in the layout of kiln_dataset_from_arrays' several inputs
 * and outputs, so batches, fit's checks and the strategies see no
 * difference. Each joined dataset is read through its own source, map
 * and augmentations (which see the zip's plan), and checks its own values
 * (finite floats, labels >= 0); the zip adds the model's checks. */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* One distinct dataset of the zip (a dataset given for several places is
 * read once per sample). */
typedef struct zip_part {
    kiln_dataset *ds;           /* held */
    char name[24];              /* "inputs[1]", for messages */
    int64_t input_offset[KILN_MAX_MODEL_INPUTS];   /* where its features go, or -1 */
    int32_t label_offset[KILN_MAX_MODEL_OUTPUTS];  /* where its labels go, or -1 */
    int feeds_input;            /* its features are used (else only its labels) */
} zip_part;

typedef struct zip_source {
    int32_t n_parts;
    zip_part parts[KILN_MAX_MODEL_INPUTS + KILN_MAX_MODEL_OUTPUTS];
    /* Room one part's read needs, taken per sample: the largest features
     * of any part (a part read for its labels alone still reads them) and
     * the largest label. */
    int64_t spare_features;
    size_t spare_label_bytes;
    /* That room, kept between reads: the loader's threads read at once,
     * each taking a buffer off this list and giving it back, so that a
     * read allocates only while the list is shorter than the threads. */
    pthread_mutex_t lock;
    struct zip_spare *spares;
} zip_source;

typedef struct zip_spare {
    struct zip_spare *next;
    float room[];   /* 2 * spare_features floats, then spare_label_bytes */
} zip_spare;

static zip_spare *take_spare(const kiln_dataset *ds)
{
    zip_source *z = ds->source;
    pthread_mutex_lock(&z->lock);
    zip_spare *s = z->spares;
    if (s)
        z->spares = s->next;
    pthread_mutex_unlock(&z->lock);
    if (s)
        return s;
    const size_t bytes = sizeof *s + (size_t)z->spare_features * 2 * sizeof(float) +
                         z->spare_label_bytes;
    s = kiln_alloc(ds->ctx, bytes);
    if (!s)
        kiln_error_oom(ds->ctx, "one zipped sample", bytes);
    return s;
}

static void give_spare(const kiln_dataset *ds, zip_spare *s)
{
    zip_source *z = ds->source;
    pthread_mutex_lock(&z->lock);
    s->next = z->spares;
    z->spares = s;
    pthread_mutex_unlock(&z->lock);
}

/* Reads part `p` of sample `index` into `spare` (its features, then room
 * for its augmentation, spare_features floats each; then its label) and
 * copies what the zip takes of it into place. */
static kiln_status read_part(const kiln_dataset *ds, const zip_part *p, int64_t index,
                             const kiln_read_plan *plan, float *features, void *label,
                             float *spare)
{
    const zip_source *z = ds->source;
    /* A dataset read for its labels alone is not augmented: its features
     * are dropped. The model's checks (ids, classes) are the zip's. */
    const kiln_read_plan own = {.augment = p->feeds_input && plan->augment,
                                .augment_seed = plan->augment_seed, .epoch = plan->epoch};
    const kiln_dataset *part = p->ds;
    void *part_label = spare + 2 * z->spare_features;
    const kiln_status st = kiln_dataset_read_sample(part, index, &own, spare, part_label,
                                                    spare + z->spare_features);
    if (st != KILN_OK)
        return kiln_fail_within(&ds->ctx->host, st, "the zip's %s", p->name);
    for (int32_t k = 0; k < KILN_MAX_MODEL_INPUTS; k++)
        if (p->input_offset[k] >= 0)
            memcpy(features + p->input_offset[k], spare,
                   (size_t)part->feature_size * sizeof(float));
    for (int32_t k = 0; k < KILN_MAX_MODEL_OUTPUTS; k++)
        if (p->label_offset[k] >= 0)
            memcpy((char *)label + (size_t)p->label_offset[k] * 4, part_label,
                   kiln_dataset_label_bytes(part));
    return KILN_OK;
}

static kiln_status zip_read(const kiln_dataset *ds, int64_t index, const kiln_read_plan *plan,
                            float *features, void *label)
{
    const zip_source *z = ds->source;
    zip_spare *spare = take_spare(ds);
    if (!spare)
        return KILN_ERROR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < z->n_parts && st == KILN_OK; i++)
        st = read_part(ds, &z->parts[i], index, plan, features, label, spare->room);
    give_spare(ds, spare);
    return st;
}

static void zip_destroy(kiln_dataset *ds)
{
    zip_source *z = ds->source;
    for (int32_t i = 0; z && i < z->n_parts; i++)
        kiln_dataset_destroy(z->parts[i].ds);
    while (z && z->spares) {
        zip_spare *next = z->spares->next;
        kiln_free(ds->ctx, z->spares);
        z->spares = next;
    }
    if (z)
        pthread_mutex_destroy(&z->lock);
    kiln_free(ds->ctx, z);
}

/* Label array `part` is outputs[part]'s labels: found there, and named. */
static kiln_status zip_find_label(const kiln_dataset *ds, int32_t part, int64_t first,
                                  int64_t count, int32_t limit, int32_t ignore,
                                  kiln_label_hit *hit)
{
    const zip_source *z = ds->source;
    const zip_part *p = NULL;
    for (int32_t i = 0; i < z->n_parts && !p; i++)
        if (part < KILN_MAX_MODEL_OUTPUTS && z->parts[i].label_offset[part] >= 0)
            p = &z->parts[i];
    if (!p)
        return KILN_OK;
    const kiln_status st = kiln_dataset_find_label(p->ds, 0, first, count, limit, ignore, hit);
    if (st != KILN_OK)
        return kiln_fail_within(&ds->ctx->host, st, "the zip's outputs[%d]", (int)part);
    if (hit->sample < 0)
        return KILN_OK;
    char where[sizeof hit->where + 64];
    snprintf(where, sizeof where, "label array %d, outputs[%d]%s%s", (int)part, (int)part,
             hit->where[0] ? ": " : "", hit->where);
    memcpy(hit->where, where, sizeof hit->where - 1);   /* cut short if it must be */
    hit->where[sizeof hit->where - 1] = '\0';
    return KILN_OK;
}

static const kiln_source_ops zip_ops = {
    .kind = "zip", .read = zip_read, .destroy = zip_destroy, .find_label = zip_find_label,
};

/* The first problem with dataset `d`, given as `name`, or KILN_OK. */
static kiln_status check_part(kiln_context *ctx, const kiln_dataset *d, const char *name,
                              int64_t count, int input)
{
    const char *fn = "kiln_dataset_zip";
    if (!d)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (d->ctx != ctx)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s belongs to another "
                          "context", fn, name);
    if (d->count != count)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s has %lld samples but "
                          "inputs[0] has %lld; zipped datasets must have the same count", fn,
                          name, (long long)d->count, (long long)count);
    if (input && d->n_parts)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s holds %d inputs per "
                          "sample; give each input its own dataset", fn, name,
                          (int)d->n_parts);
    if (!input && d->n_label_parts)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s holds %d label arrays per "
                          "sample; give each output its own dataset", fn, name,
                          (int)d->n_label_parts);
    if (!input && d->unlabeled)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s has no labels (a .npy "
                          "dataset made without a labels file)", fn, name);
    return KILN_OK;
}

static kiln_status check_desc(kiln_context *ctx, const kiln_zip_desc *d)
{
    const char *fn = "kiln_dataset_zip";
    if (d->n_inputs < 1 || d->n_inputs > KILN_MAX_MODEL_INPUTS || !d->inputs)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: n_inputs is %d%s; it must be "
                          "in 1..%d with inputs set", fn, (int)d->n_inputs,
                          d->inputs ? "" : " and inputs is NULL", KILN_MAX_MODEL_INPUTS);
    if (d->n_outputs < 1 || d->n_outputs > KILN_MAX_MODEL_OUTPUTS || !d->outputs)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: n_outputs is %d%s; it must "
                          "be in 1..%d with outputs set", fn, (int)d->n_outputs,
                          d->outputs ? "" : " and outputs is NULL", KILN_MAX_MODEL_OUTPUTS);
    if (!d->inputs[0])
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: inputs[0] is NULL", fn);
    const int64_t count = d->inputs[0]->count;
    for (int32_t k = 0; k < d->n_inputs + d->n_outputs; k++) {
        const int input = k < d->n_inputs;
        const int32_t at = input ? k : k - d->n_inputs;
        char name[24];
        snprintf(name, sizeof name, "%s[%d]", input ? "inputs" : "outputs", (int)at);
        const kiln_status st = check_part(ctx, input ? d->inputs[at] : d->outputs[at], name,
                                          count, input);
        if (st != KILN_OK)
            return st;
    }
    return KILN_OK;
}

/* The part reading `d`, added on its first place. */
static zip_part *part_of(zip_source *z, const kiln_dataset *d, const char *name)
{
    for (int32_t i = 0; i < z->n_parts; i++)
        if (z->parts[i].ds == d)
            return &z->parts[i];
    zip_part *p = &z->parts[z->n_parts++];
    *p = (zip_part){.ds = (kiln_dataset *)d};   /* held, never written through */
    snprintf(p->name, sizeof p->name, "%s", name);
    for (int32_t k = 0; k < KILN_MAX_MODEL_INPUTS; k++)
        p->input_offset[k] = -1;
    for (int32_t k = 0; k < KILN_MAX_MODEL_OUTPUTS; k++)
        p->label_offset[k] = -1;
    __atomic_add_fetch(&p->ds->refs, 1, __ATOMIC_RELAXED);
    return p;
}

/* Where each input's features and each output's labels go in a packed
 * sample; `features` and `words` get their totals. */
static void place_parts(zip_source *z, const kiln_zip_desc *d, int64_t *features,
                        int32_t *words)
{
    *features = 0;
    *words = 0;
    for (int32_t k = 0; k < d->n_inputs; k++) {
        char name[24];
        snprintf(name, sizeof name, "inputs[%d]", (int)k);
        zip_part *p = part_of(z, d->inputs[k], name);
        p->input_offset[k] = *features;
        p->feeds_input = 1;
        *features += d->inputs[k]->feature_size;
    }
    for (int32_t k = 0; k < d->n_outputs; k++) {
        char name[24];
        snprintf(name, sizeof name, "outputs[%d]", (int)k);
        zip_part *p = part_of(z, d->outputs[k], name);
        p->label_offset[k] = *words;
        *words += d->outputs[k]->label_size;
    }
    for (int32_t i = 0; i < z->n_parts; i++) {
        const kiln_dataset *ds = z->parts[i].ds;
        z->spare_features = ds->feature_size > z->spare_features ? ds->feature_size
                                                                   : z->spare_features;
        const size_t lb = kiln_dataset_label_bytes(ds);
        z->spare_label_bytes = lb > z->spare_label_bytes ? lb : z->spare_label_bytes;
    }
}

/* The zip's facts: one input or output keeps its dataset's; several are
 * packed as kiln_dataset_from_arrays packs them. */
static void describe(kiln_dataset *ds, const kiln_zip_desc *d)
{
    const kiln_dataset *in0 = d->inputs[0], *out0 = d->outputs[0];
    if (d->n_inputs == 1) {
        ds->feature_shape = in0->feature_shape;
        ds->dtype = in0->dtype;
        ds->ints = in0->ints;
    } else {
        ds->n_parts = d->n_inputs;
        for (int32_t k = 0; k < d->n_inputs; k++) {
            ds->part_shape[k] = d->inputs[k]->feature_shape;
            ds->part_ints[k] = d->inputs[k]->ints;
        }
    }
    if (d->n_outputs == 1) {
        ds->label_kind = out0->label_kind;
        ds->max_label = out0->max_label;
        ds->labels_unchecked = out0->labels_unchecked;
    } else {
        ds->n_label_parts = d->n_outputs;
        ds->label_kind = KILN_LABELS_DENSE;   /* ids keep their bits in the float slots */
        for (int32_t k = 0; k < d->n_outputs; k++) {
            ds->label_part_kind[k] = d->outputs[k]->label_kind;
            ds->label_part_size[k] = d->outputs[k]->label_size;
        }
    }
}

kiln_status kiln_dataset_zip(kiln_context *ctx, const kiln_zip_desc *desc, kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out || !desc)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_zip: %s is NULL",
                          !out ? "out" : "desc");
    kiln_zip_desc d;
    kiln_diag why;
    if (kiln_options_take(&d, sizeof d, desc, sizeof d, "kiln_zip_desc", &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_dataset_zip: %s", why.message);
    kiln_status st = check_desc(ctx, &d);
    if (st != KILN_OK)
        return st;
    zip_source *z = kiln_calloc(ctx, 1, sizeof *z);
    if (!z)
        return kiln_error_oom(ctx, "a zip", sizeof *z);
    pthread_mutex_init(&z->lock, NULL);
    int64_t features;
    int32_t words;
    place_parts(z, &d, &features, &words);
    const kiln_shape packed = {.rank = 1, .dims = {(int32_t)features}};
    const kiln_dataset *in0 = d.inputs[0], *out0 = d.outputs[0];
    kiln_dataset *ds = NULL;
    if (features > INT32_MAX)
        st = kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_zip: a sample of the "
                        "inputs holds more than %d values", INT32_MAX);
    else
        st = kiln_dataset_new_streamed(ctx, in0->count,
                                       d.n_inputs == 1 ? &in0->feature_shape : &packed,
                                       d.n_outputs == 1 ? out0->label_kind : KILN_LABELS_DENSE,
                                       words, &ds);
    if (st != KILN_OK) {
        kiln_dataset tmp = {.ctx = ctx, .source = z};
        zip_destroy(&tmp);
        return st;
    }
    ds->ops = &zip_ops;
    ds->source = z;
    describe(ds, &d);
    *out = ds;
    return KILN_OK;
}
