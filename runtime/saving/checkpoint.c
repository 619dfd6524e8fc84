/* Checkpoints: a model's tensors and training position in safetensors files,
 * and the folder of rotating checkpoints fit keeps.
 * Names: "<layer>/<parameter>", and "optimizer/<layer>/<parameter>/<slot>". */
#include "runtime/saving/checkpoint.h"
#include "runtime/model/ema.h"
#include "runtime/model/lora.h"
#include "base/files.h"
#include "runtime/saving/model_desc.h"
#include "runtime/model/optimizer.h"
#include "runtime/formats/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT "kiln-checkpoint"
#define FORMAT_VERSION "1"
#define MAX_META 24

/* What a file holds: weights (kiln_model_save_weights), weights and the
 * model's description (kiln_model_save), or the training state with the
 * description (checkpoints). */
/* SAVE_MODEL_ADAPTERS: a model file that keeps LoRA's adapters apart. */
typedef enum save_kind {
    SAVE_WEIGHTS, SAVE_MODEL, SAVE_TRAINING_STATE, SAVE_MODEL_ADAPTERS
} save_kind;

/* Keras's names for the optimizers' variables (Adam's as kiln always
 * named them). */
static const char *slot_name(const kiln_optimizer_options *o, int slot)
{
    if (o->use_ema && slot == kiln_optimizer_ema_slot(o))
        return "average";   /* Keras 3's name for the moving average */
    switch (o->kind) {
    case KILN_OPTIMIZER_ADAM:
    case KILN_OPTIMIZER_ADAMW:
        return slot == 0 ? "m" : "v";
    case KILN_OPTIMIZER_RMSPROP:
        /* velocity, then momentum (with momentum), then average_gradient */
        return slot == 0 ? "velocity"
               : slot == 1 && o->momentum > 0.0f ? "momentum" : "average_gradient";
    case KILN_OPTIMIZER_ADAGRAD:
        return "accumulator";
    default:
        return "momentum";
    }
}

static const char *optimizer_name(const kiln_optimizer_options *o)
{
    static const char *const names[] = {"adam", "sgd", "adamw", "rmsprop", "adagrad"};
    return names[o->kind];
}

/* Parameter p of node's name; with slot >= 0, the name of its optimizer
 * slot's tensor. */
static void tensor_name(const kiln_model *m, const kiln_node_rec *node, int p, int slot,
                        char *name, size_t size)
{
    if (slot < 0)
        kiln_node_param_name(node, p, name, size);
    else {
        char param[160];
        snprintf(name, size, "optimizer/%s/%s", kiln_node_param_name(node, p, param, sizeof param),
                 slot_name(&m->plan.optimizer, slot));
    }
}

static kiln_status check_compiled_and_path(kiln_model *m, const char *call, const char *path)
{
    const kiln_status st = kiln_model_check_compiled(m, call);
    if (st != KILN_OK)
        return st;
    if (!path)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: path is NULL", call);
    if (!path[0])
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: path is empty", call);
    return KILN_OK;
}

/* Writes one epoch's line into `out` (snprintf's contract). */
typedef int (*record_line_fn)(char *out, size_t room, const kiln_epoch_record *r);

/* The first line of each epoch: loss, accuracy and validation, time and
 * samples. */
static int history_line(char *out, size_t room, const kiln_epoch_record *r)
{
    return snprintf(out, room, "%.17g %.17g %d %.17g %.17g %.17g %lld\n", r->loss,
                    r->accuracy, (int)r->has_validation, r->val_loss, r->val_accuracy,
                    r->seconds, (long long)r->samples);
}

/* The rest of each epoch's record: the metrics beyond accuracy, the
 * learning rate and the skipped steps (files without it read as metrics
 * not computed). */
static int history_metrics_line(char *out, size_t room, const kiln_epoch_record *r)
{
    return snprintf(out, room, "%.17g %.17g %.17g %.17g %.17g %.17g %.17g %lld\n",
                    r->top_k_accuracy, r->mean_absolute_error, r->binary_accuracy,
                    r->val_top_k_accuracy, r->val_mean_absolute_error,
                    r->val_binary_accuracy, r->learning_rate, (long long)r->skipped_steps);
}

/* Several outputs: each output's loss and accuracy, then on the validation
 * data (files of a model of one output have no such line). */
static int history_outputs_line(char *out, size_t room, const kiln_epoch_record *r)
{
    char line[4 * 25 * KILN_MAX_MODEL_OUTPUTS + 2];
    size_t at = 0;
    for (int32_t k = 0; k < r->n_outputs && k < KILN_MAX_MODEL_OUTPUTS; k++) {
        const int n = snprintf(line + at, sizeof line - at, "%s%.17g %.17g %.17g %.17g",
                               k ? " " : "", r->outputs[k].loss, r->outputs[k].accuracy,
                               r->val_outputs[k].loss, r->val_outputs[k].accuracy);
        if (n < 0 || (size_t)n >= sizeof line - at)
            return -1;
        at += (size_t)n;
    }
    return snprintf(out, room, "%s\n", line);
}

/* The history as text, one `line` per epoch; NULL when out of memory. A
 * line is at most 8 numbers of 24 characters (%.17g of a double, %lld)
 * and their separators, within `line_bytes` (256; several outputs' lines:
 * 4 numbers per output); one that is not (a format grown past it) fails
 * rather than writes past the end. */
static char *history_lines(const kiln_model *m, record_line_fn line, size_t line_bytes)
{
    const size_t size = (size_t)m->training.n_history * line_bytes + 1;
    char *t = kiln_alloc(m->ctx, size);
    if (!t)
        return NULL;
    size_t at = 0;
    t[0] = '\0';
    for (int32_t i = 0; i < m->training.n_history; i++) {
        const int wrote = line(t + at, size - at, &m->training.history[i]);
        if (wrote < 0 || (size_t)wrote >= size - at) {
            kiln_free(m->ctx, t);
            return NULL;
        }
        at += (size_t)wrote;
    }
    return t;
}

/* The parameters, then each optimizer slot's, as tensors of the model's
 * shapes; `flat` holds the parameters and after them each slot, every one
 * n_param_floats long. `merged`: without LoRA's adapters (a model file,
 * whose kernels hold them merged). Returns how many. */
static size_t list_tensors(const kiln_model *m, int n_slots, const float *flat, int merged,
                           kiln_st_entry *e, char (*name)[160])
{
    size_t n = 0;
    for (int slot = -1; slot < n_slots; slot++) {
        const float *array = flat + (size_t)(slot + 1) * m->plan.n_param_floats;
        for (int32_t i = 0; i < m->graph.n_nodes; i++) {
            const kiln_node_rec *node = &m->graph.nodes[i];
            for (int p = 0; p < node->n_params; p++) {
                const kiln_param_spec *spec = &node->params[p];
                if (merged && kiln_node_param_is_adapter(m, i, p))
                    continue;
                tensor_name(m, node, p, slot, name[n], sizeof name[n]);
                e[n].name = name[n];
                e[n].rank = spec->shape.rank;
                for (int d = 0; d < spec->shape.rank; d++)
                    e[n].shape[d] = spec->shape.dims[d];
                e[n].data = array + node->param_offset[p];
                n++;
            }
        }
    }
    return n;
}

typedef struct metadata {
    const char *keys[MAX_META], *values[MAX_META];
    char text[MAX_META][160];
    size_t n;
} metadata;

static void meta_add(metadata *md, const char *key, const char *fmt, ...) KILN_PRINTF(3, 4);

static void meta_add(metadata *md, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(md->text[md->n], sizeof md->text[md->n], fmt, ap);
    va_end(ap);
    md->keys[md->n] = key;
    md->values[md->n] = md->text[md->n];
    md->n++;
}

/* A checkpoint's texts too long for a metadata value of 160 characters. */
typedef struct long_texts {
    char *history, *history_metrics;
    char *history_outputs, *output_sums;   /* several outputs, else NULL */
} long_texts;

/* Several outputs: the epoch's sums of each output so far. */
static char *output_sums_text(const kiln_model *m)
{
    const size_t n = (size_t)m->graph.n_outputs * KILN_SUM_HEAD_SLOTS, size = n * 26 + 1;
    char *t = kiln_alloc(m->ctx, size);
    size_t at = 0;
    for (size_t i = 0; t && i < n; i++)
        at += (size_t)snprintf(t + at, size - at, "%s%.17g", i ? " " : "",
                               m->training.epoch_heads[i]);
    return t;
}

static kiln_status make_long_texts(const kiln_model *m, long_texts *t)
{
    memset(t, 0, sizeof *t);
    t->history = history_lines(m, history_line, 256);
    t->history_metrics = history_lines(m, history_metrics_line, 256);
    if (kiln_model_outputs_apart(m)) {   /* each output's values, kept apart */
        t->history_outputs = history_lines(m, history_outputs_line,
                                           4 * 25 * KILN_MAX_MODEL_OUTPUTS + 2);
        t->output_sums = output_sums_text(m);
    }
    return t->history && t->history_metrics &&
                   (!kiln_model_outputs_apart(m) || (t->history_outputs && t->output_sums))
               ? KILN_OK : KILN_ERROR_OUT_OF_MEMORY;
}

static void free_long_texts(kiln_context *ctx, long_texts *t)
{
    kiln_free(ctx, t->history);
    kiln_free(ctx, t->history_metrics);
    kiln_free(ctx, t->history_outputs);
    kiln_free(ctx, t->output_sums);
}

/* The format and the model's fingerprint; the model's description when
 * given; for a training state also the optimizer, the training position
 * and the history. */
static void describe(const kiln_model *m, save_kind kind, const char *model,
                     const long_texts *texts, metadata *md)
{
    static const char *const kinds[] = {"weights", "model", "training_state", "model"};
    md->n = 0;
    meta_add(md, "format", "%s", FORMAT);
    meta_add(md, "format_version", "%s", FORMAT_VERSION);
    meta_add(md, "kind", "%s", kinds[kind]);
    meta_add(md, "fingerprint", "%016llx", (unsigned long long)(kind == SAVE_MODEL
             ? kiln_model_fingerprint_merged(m) : kiln_model_fingerprint(m)));
    if (model) {   /* long: the caller's text is used as is */
        md->keys[md->n] = KILN_MODEL_META_KEY;
        md->values[md->n++] = model;
    }
    if (kind != SAVE_TRAINING_STATE)
        return;
    const kiln_optimizer_options *o = &m->plan.optimizer;
    meta_add(md, "optimizer", "%s", optimizer_name(o));
    meta_add(md, "optimizer_settings", "lr=%.9g beta_1=%.9g beta_2=%.9g epsilon=%.9g "
             "momentum=%.9g nesterov=%d", o->learning_rate, o->beta_1, o->beta_2, o->epsilon,
             o->momentum, (int)o->nesterov);
    /* For the reader (the description carries them back); only where they
     * apply, so other checkpoints stay as they were. */
    if (o->weight_decay != 0.0f || o->kind > KILN_OPTIMIZER_SGD)
        meta_add(md, "optimizer_settings_more", "weight_decay=%.9g rho=%.9g centered=%d "
                 "initial_accumulator_value=%.9g exclude_vectors_from_weight_decay=%d",
                 o->weight_decay, o->rho, (int)o->centered, o->initial_accumulator_value,
                 (int)o->exclude_vectors_from_weight_decay);
    meta_add(md, "optimizer_steps", "%lld", (long long)m->training.n_optimizer_steps);
    meta_add(md, "train_steps", "%lld", (long long)m->training.n_train_steps);
    meta_add(md, "epoch", "%d", (int)m->training.n_history);
    meta_add(md, "epoch_step", "%lld", (long long)m->training.epoch_step);
    meta_add(md, "epoch_sums", "%.17g %.17g %lld", m->training.epoch_loss,
             m->training.epoch_correct, (long long)m->training.epoch_seen);
    meta_add(md, "shuffle_seed", "%llu", (unsigned long long)m->training.shuffle_seed);
    /* What the epoch's means divide by (positions, for sequence labels); a
     * checkpoint without it counted samples. */
    meta_add(md, "epoch_counted", "%.17g", m->training.epoch_counted);
    meta_add(md, "epoch_metric_sums", "%.17g %.17g %.17g", m->training.epoch_metrics[0],
             m->training.epoch_metrics[1], m->training.epoch_metrics[2]);
    if (m->training.has_lr_override)
        meta_add(md, "learning_rate_override", "%.17g", m->training.lr_override);
    /* Too long for a 160-character value: the caller's text is used as is. */
    md->keys[md->n] = "history";
    md->values[md->n++] = texts->history;
    md->keys[md->n] = "history_metrics";
    md->values[md->n++] = texts->history_metrics;
    if (!kiln_model_outputs_apart(m))
        return;
    md->keys[md->n] = "history_outputs";
    md->values[md->n++] = texts->history_outputs;
    md->keys[md->n] = "epoch_output_sums";
    md->values[md->n++] = texts->output_sums;
}

/* The model's description for a file of `kind`, or NULL for weights. A
 * model that cannot be described gets no checkpoint either: one without
 * its description is a file kiln_model_load cannot rebuild a model from. */
static kiln_status model_text(kiln_model *m, save_kind kind, const char *call, char **text)
{
    size_t length;
    *text = NULL;
    if (kind == SAVE_WEIGHTS)
        return KILN_OK;
    return kiln_model_describe(m, call, kind != SAVE_MODEL, text, &length);
}

static kiln_status save(kiln_model *m, const char *path, save_kind kind)
{
    static const char *const calls[] = {"kiln_model_save_weights", "kiln_model_save",
                                        "kiln_model_save_checkpoint", "kiln_model_save_with"};
    const char *call = calls[kind];
    const int full = kind == SAVE_TRAINING_STATE;
    kiln_status st = check_compiled_and_path(m, call, path);
    if (st != KILN_OK)
        return st;
    kiln_context *ctx = m->ctx;
    char *model = NULL;
    if ((st = model_text(m, kind, call, &model)) != KILN_OK)
        return st;
    const int n_slots = full ? kiln_optimizer_slot_count(&m->plan.optimizer) : 0;
    const size_t floats = m->plan.n_param_floats;
    float *flat = kiln_calloc(ctx, floats * (size_t)(1 + n_slots), sizeof(float));
    size_t n_params = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        n_params += (size_t)m->graph.nodes[i].n_params;
    kiln_st_entry *e = kiln_calloc(ctx, n_params * (size_t)(1 + n_slots) + 1, sizeof *e);
    char (*name)[160] = kiln_calloc(ctx, n_params * (size_t)(1 + n_slots) + 1, 160);
    long_texts texts = {0};
    const kiln_status made = full ? make_long_texts(m, &texts) : KILN_OK;
    if (!flat || !e || !name || made != KILN_OK) {
        st = kiln_error_oom(ctx, "a checkpoint", floats * sizeof(float) * (size_t)(1 + n_slots));
        goto done;
    }
    float *slots[KILN_MAX_OPTIMIZER_SLOTS] = {NULL};
    for (int i = 0; i < n_slots; i++)
        slots[i] = flat + (size_t)(i + 1) * floats;
    /* A training state keeps the weights (the averages are a slot); the
     * other files are for inference, which uses the averages (use_ema). */
    st = full ? m->placement.strategy->get_params(m->placement.strategy_impl, flat)
              : kiln_ema_params(m, flat);
    if (st == KILN_OK && n_slots)
        st = m->placement.strategy->get_slots(m->placement.strategy_impl, slots);
    if (st != KILN_OK)
        goto done;
    if (kind == SAVE_MODEL)
        kiln_model_merge_adapters(m, flat);
    const size_t n = list_tensors(m, n_slots, flat, kind == SAVE_MODEL, e, name);
    metadata md;
    describe(m, kind, model, &texts, &md);
    st = kiln_st_write(ctx, path, e, n, md.keys, md.values, md.n);
done:
    kiln_free(ctx, model);
    kiln_free(ctx, flat);
    kiln_free(ctx, e);
    kiln_free(ctx, name);
    free_long_texts(ctx, &texts);
    return st;
}

static kiln_status save_weights_entered(kiln_model *m, const char *path)
{
    return save(m, path, SAVE_WEIGHTS);
}

kiln_status kiln_model_save_weights(kiln_model *m, const char *path)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_save_weights");
    if (st == KILN_OK) {
        st = save_weights_entered(m, path);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_checkpoint_save(kiln_model *m, const char *path)
{
    return save(m, path, SAVE_TRAINING_STATE);
}

kiln_status kiln_checkpoint_save_model(kiln_model *m, const char *path, int adapters)
{
    return save(m, path, adapters ? SAVE_MODEL_ADAPTERS : SAVE_MODEL);
}

kiln_status kiln_checkpoint_save_weights(kiln_model *m, const char *path)
{
    return save(m, path, 0);
}

kiln_status kiln_model_save_checkpoint(kiln_model *m, const char *path)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_save_checkpoint");
    if (st == KILN_OK) {
        st = kiln_checkpoint_save(m, path);
        kiln_model_leave(m);
    }
    return st;
}

/* Appends "; <text>" to the mismatch list, keeping it bounded. */
static void note(char *list, size_t size, int *count, const char *text)
{
    const size_t used = strlen(list);
    if (used + strlen(text) + 4 < size)
        snprintf(list + used, size - used, "%s%s", *count ? "; " : "", text);
    else if (used + 5 < size && !strstr(list, "..."))
        snprintf(list + used, size - used, "; ...");
    (*count)++;
}

static float read_f32(const unsigned char *p)
{
    const uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Copies tensor `name` of `spec`'s shape into dst, or notes why not. */
static void take(const kiln_st_file *f, const char *name, const kiln_param_spec *spec,
                 float *dst, char *list, size_t size, int *bad)
{
    char text[320], a[64];
    const kiln_st_tensor *t = kiln_st_find(f, name);
    if (!t) {
        snprintf(text, sizeof text, "'%s' is missing", name);
        note(list, size, bad, text);
        return;
    }
    if (strcmp(t->dtype, "F32") != 0) {
        snprintf(text, sizeof text, "'%s' is %s, kiln needs F32", name, t->dtype);
        note(list, size, bad, text);
        return;
    }
    int same = t->rank == spec->shape.rank;
    for (int d = 0; same && d < t->rank; d++)
        same = t->shape[d] == (uint64_t)spec->shape.dims[d];
    if (!same) {
        size_t at = (size_t)snprintf(text, sizeof text, "'%s' has shape (", name);
        for (int d = 0; d < t->rank && at < sizeof text; d++)
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%llu", d ? ", " : "",
                                   (unsigned long long)t->shape[d]);
        if (at < sizeof text)
            snprintf(text + at, sizeof text - at, "), the model needs %s",
                     kiln_shape_str(&spec->shape, a, sizeof a));
        note(list, size, bad, text);
        return;
    }
    const unsigned char *src = kiln_st_data(f, t);
    const int64_t count = kiln_shape_size(&spec->shape);
    for (int64_t i = 0; i < count; i++)
        dst[i] = read_f32(src + 4 * i);
}

static int known(const kiln_model *m, const char *name, int n_slots)
{
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].n_params; p++)
            for (int slot = -1; slot < n_slots; slot++) {
                char want[160];
                tensor_name(m, &m->graph.nodes[i], p, slot, want, sizeof want);
                if (strcmp(want, name) == 0)
                    return 1;
            }
    return strncmp(name, "optimizer/", 10) == 0 && n_slots == 0;
}

static kiln_status restore_position(kiln_model *m, const kiln_st_file *f, const char *path,
                                    int apply);

static kiln_status load(kiln_model *m, const char *path, int full)
{
    const char *call = full ? "kiln_model_load_checkpoint" : "kiln_model_load_weights";
    kiln_status st = check_compiled_and_path(m, call, path);
    if (st != KILN_OK)
        return st;
    kiln_context *ctx = m->ctx;
    kiln_st_file f;
    st = kiln_st_read(ctx, path, &f);
    if (st != KILN_OK)
        return st;
    const int n_slots = full ? kiln_optimizer_slot_count(&m->plan.optimizer) : 0;
    if (full) {
        const char *kind = kiln_st_meta(&f, "kind"), *opt = kiln_st_meta(&f, "optimizer");
        const char *fp = kiln_st_meta(&f, "fingerprint");
        char want[32];
        snprintf(want, sizeof want, "%016llx", (unsigned long long)kiln_model_fingerprint(m));
        if (!kind || strcmp(kind, "training_state") != 0)
            st = kiln_error(ctx, KILN_ERROR_DATA, "%s: %s holds weights only, not a training "
                            "state (use kiln_model_load_weights)", call, path);
        else if (!fp || strcmp(fp, want) != 0)
            st = kiln_error(ctx, KILN_ERROR_DATA, "%s: %s was saved from another model "
                            "(fingerprint %s, this model %s)", call, path, fp ? fp : "none",
                            want);
        else if (!opt || strcmp(opt, optimizer_name(&m->plan.optimizer)) != 0)
            st = kiln_error(ctx, KILN_ERROR_DATA, "%s: %s holds %s state, the model uses %s",
                            call, path, opt ? opt : "no optimizer",
                            optimizer_name(&m->plan.optimizer));
    }
    const size_t floats = m->plan.n_param_floats;
    float *flat = st == KILN_OK ? kiln_calloc(ctx, floats * (size_t)(1 + n_slots), 4) : NULL;
    if (st == KILN_OK && !flat)
        st = kiln_error_oom(ctx, "a checkpoint", floats * 4 * (size_t)(1 + n_slots));
    if (st != KILN_OK) {
        kiln_st_free(&f);
        return st;
    }
    float *slots[KILN_MAX_OPTIMIZER_SLOTS] = {NULL};
    for (int i = 0; i < n_slots; i++)
        slots[i] = flat + (size_t)(i + 1) * floats;
    char list[900] = "";
    int bad = 0;
    for (int slot = -1; slot < n_slots; slot++)
        for (int32_t i = 0; i < m->graph.n_nodes; i++) {
            const kiln_node_rec *node = &m->graph.nodes[i];
            for (int p = 0; p < node->n_params; p++) {
                char name[160];
                tensor_name(m, node, p, slot, name, sizeof name);
                take(&f, name, &node->params[p],
                     flat + (size_t)(slot + 1) * floats + node->param_offset[p], list,
                     sizeof list, &bad);
            }
        }
    for (size_t i = 0; i < f.n_tensors; i++) {
        if (!known(m, f.tensors[i].name, full ? n_slots : 0) &&
            strncmp(f.tensors[i].name, "optimizer/", 10) != 0) {
            char text[200];
            snprintf(text, sizeof text, "'%s' is not in the model", f.tensors[i].name);
            note(list, sizeof list, &bad, text);
        }
    }
    if (bad)
        st = kiln_error(ctx, KILN_ERROR_SHAPE, "%s: %s does not fit the model (%d mismatch%s): %s",
                        call, path, bad, bad == 1 ? "" : "es", list);
    /* Everything is checked before anything of the model changes. */
    if (st == KILN_OK && full)
        st = restore_position(m, &f, path, 0);
    /* Weights alone restart the averages from them; a training state
     * brings its own. */
    if (st == KILN_OK)
        st = full ? m->placement.strategy->set_params(m->placement.strategy_impl, flat)
                  : kiln_model_write_params(m, flat);
    if (st == KILN_OK && n_slots)
        st = m->placement.strategy->set_slots(m->placement.strategy_impl,
                                              (const float *const *)slots);
    if (st == KILN_OK && full)
        st = restore_position(m, &f, path, 1);
    if (st == KILN_OK && full && m->placement.strategy->set_optimizer_steps)
        st = m->placement.strategy->set_optimizer_steps(m->placement.strategy_impl, m->training.n_optimizer_steps);
    kiln_free(ctx, flat);
    kiln_st_free(&f);
    return st;
}

/* Reads one metadata number; 0 if absent or malformed. */
static int meta_ll(const kiln_st_file *f, const char *key, long long *out)
{
    const char *v = kiln_st_meta(f, key);
    char *end;
    if (!v)
        return 0;
    *out = strtoll(v, &end, 10);
    return end != v && *end == '\0';
}

/* The history's metrics beyond accuracy, learning rates and skipped steps;
 * a file without them (an older kiln's) gives metrics not computed. */
static kiln_status take_history_metrics(const kiln_model *m, const kiln_st_file *f,
                                        const char *path, kiln_epoch_record *records,
                                        long long epochs)
{
    const char *p = kiln_st_meta(f, "history_metrics");
    for (long long i = 0; i < epochs; i++) {
        kiln_epoch_record *r = &records[i];
        long long skipped = 0;
        int used = 0;
        if (!p) {
            r->top_k_accuracy = r->mean_absolute_error = r->binary_accuracy = -1.0;
            r->val_top_k_accuracy = r->val_mean_absolute_error = r->val_binary_accuracy = -1.0;
            continue;
        }
        if (sscanf(p, "%lf %lf %lf %lf %lf %lf %lf %lld%n", &r->top_k_accuracy,
                   &r->mean_absolute_error, &r->binary_accuracy, &r->val_top_k_accuracy,
                   &r->val_mean_absolute_error, &r->val_binary_accuracy, &r->learning_rate,
                   &skipped, &used) != 8)
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load_checkpoint: %s: "
                              "history_metrics line %lld is malformed", path, i + 1);
        r->skipped_steps = skipped;
        p += used;
    }
    return KILN_OK;
}

/* Several outputs: each epoch's per-output values (names from the model)
 * and the current epoch's per-output sums, which such a checkpoint must
 * hold. */
static kiln_status take_history_outputs(const kiln_model *m, const kiln_st_file *f,
                                        const char *path, kiln_epoch_record *records,
                                        long long epochs, double *sums)
{
    if (!kiln_model_outputs_apart(m))
        return KILN_OK;
    const char *p = kiln_st_meta(f, "history_outputs"), *q = kiln_st_meta(f, "epoch_output_sums");
    for (long long i = 0; p && i < epochs; i++) {
        kiln_epoch_record *r = &records[i];
        r->n_outputs = m->graph.n_outputs;
        for (int32_t k = 0; p && k < m->graph.n_outputs; k++) {
            int used = 0;
            kiln_output_metrics *o = &r->outputs[k], *v = &r->val_outputs[k];
            snprintf(o->name, sizeof o->name, "%s", m->graph.nodes[m->graph.outputs[k]].name);
            snprintf(v->name, sizeof v->name, "%s", m->graph.nodes[m->graph.outputs[k]].name);
            if (sscanf(p, "%lf %lf %lf %lf%n", &o->loss, &o->accuracy, &v->loss, &v->accuracy,
                       &used) != 4)
                p = NULL;
            else
                p += used;
        }
    }
    for (int32_t i = 0; q && i < m->graph.n_outputs * KILN_SUM_HEAD_SLOTS; i++) {
        int used = 0;
        if (sscanf(q, "%lf%n", &sums[i], &used) != 1)
            q = NULL;
        else
            q += used;
    }
    if (!p || !q)
        return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load_checkpoint: %s: the "
                          "model has %d outputs, but the checkpoint's per-output history "
                          "('history_outputs') or sums ('epoch_output_sums') are missing or "
                          "malformed", path, (int)m->graph.n_outputs);
    return KILN_OK;
}

/* Validates the training position (apply 0), or sets it on the model. */
static kiln_status restore_position(kiln_model *m, const kiln_st_file *f, const char *path,
                                    int apply)
{
    long long opt_steps, train_steps, epoch, epoch_step;
    const char *sums = kiln_st_meta(f, "epoch_sums"), *seed = kiln_st_meta(f, "shuffle_seed");
    const char *history = kiln_st_meta(f, "history");
    double loss, correct;
    long long seen;
    if (!meta_ll(f, "optimizer_steps", &opt_steps) || !meta_ll(f, "train_steps", &train_steps) ||
        !meta_ll(f, "epoch", &epoch) || !meta_ll(f, "epoch_step", &epoch_step) || !sums ||
        sscanf(sums, "%lf %lf %lld", &loss, &correct, &seen) != 3 || !seed || !history ||
        opt_steps < 0 || epoch < 0 || epoch > INT32_MAX || epoch_step < 0 || seen < 0)
        return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load_checkpoint: %s: the "
                          "training position in __metadata__ is missing or malformed", path);
    /* History: one line per completed epoch. */
    kiln_epoch_record *records = kiln_calloc(m->ctx, (size_t)epoch + 1, sizeof *records);
    if (!records)
        return kiln_error_oom(m->ctx, "the history", (size_t)epoch * sizeof *records);
    const char *p = history;
    for (long long i = 0; i < epoch; i++) {
        kiln_epoch_record *r = &records[i];
        int has_val = 0, used = 0;
        long long samples = 0;
        if (sscanf(p, "%lf %lf %d %lf %lf %lf %lld%n", &r->loss, &r->accuracy, &has_val,
                   &r->val_loss, &r->val_accuracy, &r->seconds, &samples, &used) != 7) {
            kiln_free(m->ctx, records);
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load_checkpoint: %s: "
                              "history line %lld is malformed", path, i + 1);
        }
        r->struct_size = sizeof *r;
        r->has_validation = has_val;
        r->samples = samples;
        p += used;
    }
    double metric_sums[3] = {0, 0, 0}, lr_override = 0;
    const char *sums_text = kiln_st_meta(f, "epoch_metric_sums");
    const char *lr_text = kiln_st_meta(f, "learning_rate_override");
    double output_sums[KILN_SUM_HEAD_SLOTS * KILN_MAX_MODEL_OUTPUTS] = {0};
    kiln_status st = take_history_metrics(m, f, path, records, epoch);
    if (st == KILN_OK)
        st = take_history_outputs(m, f, path, records, epoch, output_sums);
    if (st == KILN_OK &&
        ((sums_text && sscanf(sums_text, "%lf %lf %lf", &metric_sums[0], &metric_sums[1],
                              &metric_sums[2]) != 3) ||
         (lr_text && (sscanf(lr_text, "%lf", &lr_override) != 1 || !(lr_override >= 0)))))
        st = kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load_checkpoint: %s: "
                        "epoch_metric_sums or learning_rate_override is malformed", path);
    if (st != KILN_OK || !apply) {
        kiln_free(m->ctx, records);
        return st;
    }
    memcpy(m->training.epoch_metrics, metric_sums, sizeof metric_sums);
    memcpy(m->training.epoch_heads, output_sums, sizeof output_sums);
    m->training.has_lr_override = lr_text != NULL;
    m->training.lr_override = lr_override;
    kiln_free(m->ctx, m->training.history);
    m->training.history = records;
    m->training.n_history = (int32_t)epoch;
    m->training.cap_history = (int32_t)epoch + 1;
    m->training.n_optimizer_steps = opt_steps;
    m->training.n_train_steps = train_steps;
    m->training.epoch_step = epoch_step;
    m->training.epoch_loss = loss;
    m->training.epoch_correct = correct;
    m->training.epoch_seen = seen;
    const char *counted = kiln_st_meta(f, "epoch_counted");
    m->training.epoch_counted = counted ? strtod(counted, NULL) : (double)seen;
    m->training.shuffle_seed = strtoull(seed, NULL, 10);
    return KILN_OK;
}

static kiln_status load_weights_entered(kiln_model *m, const char *path)
{
    return load(m, path, 0);
}

kiln_status kiln_model_load_weights(kiln_model *m, const char *path)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_load_weights");
    if (st == KILN_OK) {
        st = load_weights_entered(m, path);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_checkpoint_load(kiln_model *m, const char *path)
{
    return load(m, path, 1);
}

kiln_status kiln_model_load_checkpoint(kiln_model *m, const char *path)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_load_checkpoint");
    if (st == KILN_OK) {
        st = kiln_checkpoint_load(m, path);
        kiln_model_leave(m);
    }
    return st;
}

/* Checkpoint files: "ckpt-<12-digit step>.safetensors", so names sort by step. */
static int is_checkpoint(const char *name)
{
    const size_t n = strlen(name);
    return n == 5 + 12 + 12 && strncmp(name, "ckpt-", 5) == 0 &&
           strcmp(name + n - 12, ".safetensors") == 0;
}

static int by_name_desc(const void *a, const void *b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

/* The checkpoints in `dir`, newest first (caller frees each and the list). */
static int list_checkpoints(kiln_context *ctx, const char *dir, char ***out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0, cap = 0;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_checkpoint(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = kiln_realloc(ctx, names, (size_t)cap * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        if (!(names[n] = kiln_strdup(ctx, e->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, (size_t)n, sizeof *names, by_name_desc);
    *out = names;
    return n;
}

static void free_list(kiln_context *ctx, char **names, int n)
{
    for (int i = 0; i < n; i++)
        kiln_free(ctx, names[i]);
    kiln_free(ctx, names);
}

/* A temporary file of a save: "<checkpoint>.tmp-<pid>-<n>" (see
 * kiln_create_temporary). Returns its step and writer, or 0 for any other
 * name. */
static int parse_temporary(const char *name, long long *step, long *pid)
{
    const size_t stem = 5 + 12 + 12;   /* "ckpt-<12 digits>.safetensors" */
    if (strlen(name) <= stem)
        return 0;
    char checkpoint[5 + 12 + 12 + 1];
    memcpy(checkpoint, name, stem);
    checkpoint[stem] = '\0';
    if (!is_checkpoint(checkpoint) || !kiln_temporary_pid(name, stem, pid))
        return 0;
    *step = strtoll(name + 5, NULL, 10);
    return 1;
}

/* A killed save leaves its temporary file behind, and on a small disk such
 * leftovers would block every later save. A temporary is stale when its
 * writer is gone (kiln_temporary_writer_gone: this process itself counts
 * while no save of ours is under way), or wrote an older step than the
 * newest complete checkpoint. Only the folder's one writer calls this
 * (rank 0), so no live save of a newer step is removed. Each save also
 * removes its own file's dead temporaries (kiln_remove_dead_temporaries);
 * this finds the other checkpoints'. */
static void remove_stale_temporaries(kiln_model *m, const char *dir, long long newest)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    int removed = 0;
    long long bytes = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long step;
        long pid;
        if (!parse_temporary(e->d_name, &step, &pid))
            continue;
        if (!kiln_temporary_writer_gone(pid) && step >= newest)
            continue;
        char path[4200];
        struct stat s;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        const long long size = stat(path, &s) == 0 ? (long long)s.st_size : 0;
        if (remove(path) == 0) {
            removed++;
            bytes += size;
            kiln_log(m->ctx, KILN_LOG_WARNING, "kiln_model_fit: removed %s, left by an "
                     "unfinished save (%s)", path, step < newest ? "an older step than the "
                     "newest checkpoint" : "its writer is gone");
        }
    }
    closedir(d);
    if (removed > 1)
        kiln_log(m->ctx, KILN_LOG_WARNING, "kiln_model_fit: removed %d unfinished saves "
                 "(%lld bytes) from %s", removed, bytes, dir);
}

static long long newest_step(kiln_model *m, const char *dir)
{
    char **names;
    const int n = list_checkpoints(m->ctx, dir, &names);
    const long long step = n ? strtoll(names[0] + 5, NULL, 10) : -1;
    free_list(m->ctx, names, n);
    return step;
}

kiln_status kiln_checkpoint_folder_open(kiln_model *m, const char *dir)
{
    if (kiln_make_dirs(dir) != 0)
        return kiln_error(m->ctx, KILN_ERROR_IO, "kiln_model_fit: cannot create checkpoint "
                          "folder %s: %s", dir, strerror(errno));
    remove_stale_temporaries(m, dir, newest_step(m, dir));
    return KILN_OK;
}

kiln_status kiln_checkpoint_folder_save(kiln_model *m, const char *dir, int32_t keep)
{
    char path[4200];
    if (kiln_make_dirs(dir) != 0)
        return kiln_error(m->ctx, KILN_ERROR_IO, "kiln_model_fit: cannot create checkpoint "
                          "folder %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/ckpt-%012lld.safetensors", dir,
             (long long)m->training.n_train_steps);
    kiln_status st = kiln_checkpoint_save(m, path);
    if (st != KILN_OK)
        return st;
    char **names;
    const int n = list_checkpoints(m->ctx, dir, &names);
    for (int i = keep; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    free_list(m->ctx, names, n);
    remove_stale_temporaries(m, dir, (long long)m->training.n_train_steps);
    return KILN_OK;
}

/* A damaged checkpoint is renamed to "<name>.damaged": kept for
 * inspection, out of the rotation. */
int kiln_checkpoint_folder_resume(kiln_model *m, const char *dir)
{
    char **names;
    const int n = list_checkpoints(m->ctx, dir, &names);
    int resumed = 0;
    for (int i = 0; i < n && !resumed; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        const kiln_status st = kiln_checkpoint_load(m, path);
        if (st == KILN_OK) {
            resumed = 1;
            continue;
        }
        char aside[4300];
        snprintf(aside, sizeof aside, "%s.damaged", path);
        kiln_log(m->ctx, KILN_LOG_WARNING, "skipping checkpoint %s (renamed %s.damaged): %s",
                 path, names[i], kiln_context_last_error(m->ctx));
        rename(path, aside);
    }
    free_list(m->ctx, names, n);
    return resumed;
}
