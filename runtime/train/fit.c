/* fit / evaluate / predict: host-side batch assembly, metrics, history and
 * progress around the strategy's steps. */
#include "comm/mpi_world.h"
#include "runtime/train/batch_arrays.h"
#include "runtime/train/callbacks.h"
#include "runtime/saving/checkpoint.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/model/loss.h"
#include "runtime/model/ema.h"
#include "runtime/train/progress.h"
#include "runtime/train/report.h"
#include "runtime/train/stop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A dataset whose largest sparse label is past the output's classes: the
 * first such label, naming its sample and position (and a source's file),
 * unless it is the ignore class. Labels a source reads are also checked as
 * they are read, against the same rule. */
static kiln_status check_classes(kiln_model *m, const kiln_dataset *ds, const char *call,
                                 const char *what)
{
    const kiln_loss_plan *plan = &m->plan.heads[0];
    const char *output = m->graph.nodes[m->graph.outputs[0]].name;
    char at[64];
    if (ds->sparse_labels) {
        const int64_t bad = kiln_loss_bad_label(plan, ds->sparse_labels,
                                                ds->count * ds->label_size);
        if (bad < 0)
            return KILN_OK;
        kiln_loss_label_place(plan, bad, at, sizeof at);
        return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s: %s has label %d but the output "
                          "'%s' has %lld classes (labels 0 to %lld)", call, what, at,
                          (int)ds->sparse_labels[bad], output, (long long)plan->cols,
                          (long long)plan->cols - 1);
    }
    /* Labels past every class but the ignore class never reach it. */
    kiln_label_hit hit;
    const kiln_status st = kiln_dataset_find_label(ds, 0, 0, ds->count, (int32_t)plan->cols,
                                                   plan->has_ignore ? plan->ignore : -1, &hit);
    if (st != KILN_OK)
        return kiln_fail_within(&m->ctx->host, st, "%s: %s", call, what);
    if (hit.searched && hit.sample < 0)
        return KILN_OK;   /* a view without the source's largest, or the ignore class */
    if (!hit.searched && plan->has_ignore)
        return KILN_OK;
    if (!hit.searched)
        return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s has label %d but the output '%s' "
                          "has %lld classes (labels 0 to %lld)", call, what,
                          (int)ds->max_label, output, (long long)plan->cols,
                          (long long)plan->cols - 1);
    kiln_loss_label_place(plan, hit.sample * plan->positions + hit.position, at, sizeof at);
    return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s: %s%s%s%s has label %d but the output "
                      "'%s' has %lld classes (labels 0 to %lld)", call, what, at,
                      hit.where[0] ? " (" : "", hit.where, hit.where[0] ? ")" : "",
                      (int)hit.label, output, (long long)plan->cols, (long long)plan->cols - 1);
}

/* Does `ds` carry one feature array per model input, each of its shape
 * and type? */
static kiln_status check_inputs(kiln_model *m, const kiln_dataset *ds, const char *call,
                                const char *what)
{
    char a[64], b[64];
    const int32_t n = ds->n_parts ? ds->n_parts : 1;
    if (n != m->graph.n_inputs)
        return kiln_error(m->ctx, KILN_ERROR_SHAPE, "%s: %s carries %d input array%s per "
                          "sample but the model has %d inputs (the first '%s')", call, what,
                          (int)n, n == 1 ? "" : "s", (int)m->graph.n_inputs,
                          m->graph.nodes[m->graph.input].name);
    for (int32_t k = 0; k < n; k++) {
        const kiln_node_rec *in = &m->graph.nodes[m->graph.inputs[k]];
        const kiln_shape *shape = ds->n_parts ? &ds->part_shape[k] : &ds->feature_shape;
        const int ints = ds->n_parts ? ds->part_ints[k] : ds->ints;
        int same = shape->rank == in->shape.rank;
        for (int32_t i = 0; same && i < in->shape.rank; i++)
            same = shape->dims[i] == in->shape.dims[i];
        char which[32] = "";
        if (n > 1)
            snprintf(which, sizeof which, "input array %d of ", (int)k);
        if (!same)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE,
                              "%s: %s%s samples are %s but input '%s' is %s", call, which, what,
                              kiln_shape_str(shape, a, sizeof a), in->name,
                              kiln_shape_str(&in->shape, b, sizeof b));
        if (ints != in->ints)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "%s: %s%s has %s features but input '%s' takes %s", call, which,
                              what, ints ? "int32 id" : "float", in->name,
                              in->ints ? "int32 ids (kiln_input_ints)" : "floats");
    }
    return KILN_OK;
}

/* Several outputs: does `ds` carry one label array per output, each of
 * the kind and size its loss takes, its ids below the output's classes? */
static kiln_status check_label_parts(kiln_model *m, const kiln_dataset *ds, const char *call,
                                     const char *what)
{
    char a[64];
    const int32_t got = ds->n_label_parts ? ds->n_label_parts : 1;   /* 0: one, unpacked */
    if (ds->n_label_parts != m->graph.n_outputs)
        return kiln_error(m->ctx, KILN_ERROR_SHAPE, "%s: %s carries %d label array%s per "
                          "sample but the model has %d outputs (the first '%s'); give one per "
                          "output (kiln_arrays_desc.outputs)", call, what, (int)got,
                          got == 1 ? "" : "s", (int)m->graph.n_outputs,
                          m->graph.nodes[m->graph.outputs[0]].name);
    int64_t offset = 0;
    for (int32_t k = 0; k < m->graph.n_outputs; k++) {
        const kiln_loss_plan *plan = &m->plan.heads[k];
        const kiln_node_rec *out = &m->graph.nodes[m->graph.outputs[k]];
        const int64_t want = plan->sparse ? plan->positions : plan->positions * plan->cols;
        const int sparse = ds->label_part_kind[k] == KILN_LABELS_SPARSE;
        if (sparse != plan->sparse || ds->label_part_size[k] != want)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE, "%s: label array %d of %s holds %d %s "
                              "per sample but output '%s' %s under %s takes %lld %s", call,
                              (int)k, what, (int)ds->label_part_size[k],
                              sparse ? "class ids" : "floats", out->name,
                              kiln_shape_str(&out->shape, a, sizeof a),
                              kiln_loss_name(plan->loss), (long long)want,
                              plan->sparse ? "class ids" : "floats");
        for (int64_t i = 0; sparse && ds->dense_labels && i < ds->count; i++)
            for (int32_t p = 0; p < ds->label_part_size[k]; p++) {
                int32_t y;
                memcpy(&y, ds->dense_labels + i * ds->label_size + offset + p, sizeof y);
                if (y >= 0 && y < plan->cols)
                    continue;
                return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s: sample %lld (position %d) "
                                  "has label %d but output '%s' has %lld classes (labels 0 "
                                  "to %lld)", call, what, (long long)i, (int)p, (int)y,
                                  out->name, (long long)plan->cols, (long long)plan->cols - 1);
            }
        offset += ds->label_part_size[k];
        if (!sparse || ds->dense_labels)
            continue;
        /* A source's: found now where it can say, else checked as read. */
        kiln_label_hit hit;
        const kiln_status st = kiln_dataset_find_label(ds, k, 0, ds->count,
                                                       (int32_t)plan->cols, -1, &hit);
        if (st != KILN_OK)
            return kiln_fail_within(&m->ctx->host, st, "%s: %s", call, what);
        if (hit.sample < 0)
            continue;
        char pos[32] = "";
        if (ds->label_part_size[k] > 1)
            snprintf(pos, sizeof pos, ", position %d", (int)hit.position);
        return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s: sample %lld%s (%s) has label %d "
                          "but output '%s' has %lld classes (labels 0 to %lld)", call, what,
                          (long long)hit.sample, pos, hit.where, (int)hit.label, out->name,
                          (long long)plan->cols, (long long)plan->cols - 1);
    }
    return KILN_OK;
}

/* Does `ds` fit the model's inputs and loss? */
static kiln_status check_dataset(kiln_model *m, const kiln_dataset *ds, const char *call,
                                 const char *what)
{
    char a[64];
    if (ds->unlabeled)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s has no labels (a .npy "
                          "dataset made without a labels file); it is for reading and "
                          "kiln_model_predict", call, what);
    const kiln_status st = check_inputs(m, ds, call, what);
    if (st != KILN_OK)
        return st;
    /* Several outputs take one label array per output (kiln_arrays_desc.outputs). */
    if (kiln_model_outputs_apart(m))
        return check_label_parts(m, ds, call, what);
    if (ds->n_label_parts)
        return kiln_error(m->ctx, KILN_ERROR_SHAPE, "%s: %s carries %d label arrays per "
                          "sample but the model has 1 output ('%s')", call, what,
                          (int)ds->n_label_parts, m->graph.nodes[m->graph.output].name);
    const int64_t outputs = kiln_node_size(m, m->graph.output);
    const kiln_loss_plan *plan = &m->plan.heads[0];
    if (plan->sparse) {
        const kiln_node_rec *out = &m->graph.nodes[m->graph.output];
        if (ds->label_kind != KILN_LABELS_SPARSE)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE,
                              "%s: %s has dense labels but the loss is "
                              "sparse_categorical_crossentropy (integer class ids)", call, what);
        if (ds->label_size != plan->positions)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE,
                              "%s: %s has %d sparse labels per sample but output '%s' %s has "
                              "%lld position%s (labels (%lld,) per sample)", call, what,
                              (int)ds->label_size, out->name,
                              kiln_shape_str(&out->shape, a, sizeof a),
                              (long long)plan->positions, plan->positions == 1 ? "" : "s",
                              (long long)plan->positions);
        if (!ds->labels_unchecked && ds->max_label >= plan->cols)
            return check_classes(m, ds, call, what);
    } else if (ds->label_kind != KILN_LABELS_DENSE || ds->label_size != outputs) {
        return kiln_error(m->ctx, KILN_ERROR_SHAPE,
                          "%s: %s labels must be %lld floats per sample to match output '%s' "
                          "(%s); they are %s", call, what, (long long)outputs,
                          m->graph.nodes[m->graph.output].name, "dense",
                          ds->label_kind == KILN_LABELS_SPARSE ? "sparse class ids" : "dense");
    }
    return KILN_OK;
}

static kiln_status check_ready(kiln_model *m, const kiln_dataset *ds, const char *call)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: compile the model first", call);
    if (!ds)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: the dataset is NULL", call);
    return KILN_OK;
}

/* Where the ranks of an MPI job run a call together (`together`), each
 * must be called with the same settings, or their steps' collectives would
 * not pair up. */
static kiln_status check_same_everywhere(kiln_model *m, int together, const char *call,
                                         const char *const *names, const int64_t *values, int n)
{
    return m->placement.mpi && together
               ? kiln_mpi_check_same(m->placement.mpi, call, names, values, n, m->placement.step_timeout)
               : KILN_OK;
}

/* The strategy's share of each batch, for the loader. */
typedef struct share_of {
    kiln_model *m;
    int train;
} share_of;

static void strategy_share(void *user, int64_t ahead, int32_t n, int32_t *first, int32_t *count)
{
    const share_of *s = user;
    s->m->placement.strategy->shard(s->m->placement.strategy_impl, s->train, ahead, n, first, count);
}

/* A loader over `ds` and the order its epochs fill: training applies the
 * augmentations; sparse labels are checked against the output. */
typedef struct batch_source {
    kiln_loader *loader;
    int64_t *order;
    share_of share;
} batch_source;

/* `stoppable`: kiln_model_stop ends a wait for the next batch. */
static kiln_status source_open(kiln_model *m, const kiln_dataset *ds, int32_t batch, int train,
                               int32_t threads, int32_t prefetch, int stoppable,
                               batch_source *src)
{
    memset(src, 0, sizeof *src);
    src->share = (share_of){.m = m, .train = train};
    src->order = kiln_calloc(m->ctx, (size_t)ds->count, sizeof(int64_t));
    if (!src->order)
        return kiln_error_oom(m->ctx, "the epoch's order", (size_t)ds->count * sizeof(int64_t));
    threads = threads < 0 ? 0 : kiln_loader_default_threads(threads);   /* -1: none */
    kiln_loader_config c = {
        .ds = ds, .batch_size = batch, .threads = threads,
        .prefetch = threads == 0 ? 1 : prefetch > 0 ? prefetch : 2 * threads,
        .plan = {.augment = train, .augment_seed = m->ctx->seed ^ 0x6175676dULL,
                 .max_classes = m->plan.heads[0].sparse ? (int32_t)m->plan.heads[0].cols : 0,
                 .ignore = m->plan.heads[0].has_ignore ? m->plan.heads[0].ignore : -1,
                 .n_ids = m->graph.n_inputs, .ids = m->graph.ids},
        .share = m->placement.strategy->shard ? strategy_share : NULL, .share_user = &src->share,
        .timeout = m->placement.step_timeout, .stop = stoppable ? &m->training.stop_requested : NULL};
    /* Label arrays, one per output, come to a model of several outputs. */
    for (int32_t k = 0; k < kiln_model_outputs_apart(m); k++)
        c.plan.label_classes[k] = m->plan.heads[k].sparse ? (int32_t)m->plan.heads[k].cols : 0;
    c.plan.n_label_classes = kiln_model_outputs_apart(m);
    const kiln_status st = kiln_loader_create(m->ctx, &c, &src->loader);
    if (st != KILN_OK)
        kiln_free(m->ctx, src->order);
    return st;
}

static void source_close(kiln_model *m, batch_source *src)
{
    kiln_loader_destroy(src->loader);
    kiln_free(m->ctx, src->order);
    memset(src, 0, sizeof *src);
}

/* The next batch from the loader, as the strategy takes it. */
static kiln_status next_batch(kiln_model *m, batch_source *src, kiln_batch *b)
{
    kiln_loaded l;
    const kiln_status st = kiln_loader_next(src->loader, &l);
    if (st != KILN_OK)
        return st;
    *b = (kiln_batch){.n = l.n, .features = l.features, .labels = l.labels,
                      .sharded = m->placement.strategy->shard != NULL, .first = l.first,
                      .count = l.count};
    return KILN_OK;
}

/* `stoppable`: kiln_model_evaluate, which kiln_model_stop may end between
 * batches (the metrics then cover the samples done); fit's validation runs
 * whole, a stop asked meanwhile taking effect after the epoch. */
static kiln_status evaluate_dataset(kiln_model *m, const kiln_dataset *ds, int32_t batch,
                                    int stoppable, kiln_metrics *out)
{
    batch_source src;
    kiln_status st = source_open(m, ds, batch, 0, 0, 0, stoppable, &src);
    if (st != KILN_OK)
        return st;
    float *kept;   /* the weights, while the averages stand in (use_ema) */
    st = kiln_ema_swap_in(m, &kept);
    if (st != KILN_OK) {
        source_close(m, &src);
        return st;
    }
    kiln_epoch_order(ds->count, 0, 0, 0, src.order);
    kiln_loader_begin(src.loader, src.order, ds->count, 0, 0);
    double total[KILN_N_SUMS] = {0};
    int64_t done = 0;
    while (done < ds->count && st == KILN_OK) {
        kiln_batch b;
        st = next_batch(m, &src, &b);
        char where[96];
        snprintf(where, sizeof where, "after %lld of %lld samples", (long long)done,
                 (long long)ds->count);
        /* The loader's wait for the batch ended: the stop was asked. */
        const int stopped = st == KILN_ERROR_STOPPED && stoppable &&
                            kiln_model_stop_asked(m, "kiln_model_evaluate", where);
        if (stopped)
            st = KILN_OK;
        if (st != KILN_OK || stopped)
            break;
        double sums[KILN_N_SUMS] = {0};
        st = m->placement.strategy->eval_step(m->placement.strategy_impl, &b, sums);
        kiln_sums_add(total, sums);
        done += st == KILN_OK ? b.n : 0;
        snprintf(where, sizeof where, "after %lld of %lld samples", (long long)done,
                 (long long)ds->count);
        if (st == KILN_OK && done < ds->count && stoppable &&
            kiln_model_stop_asked(m, "kiln_model_evaluate", where))
            break;
    }
    source_close(m, &src);
    st = kiln_ema_swap_out(m, kept, st);
    kiln_model_metrics(m, total, out);
    out->samples = done;
    return st;
}

static kiln_status evaluate_entered(kiln_model *m, const kiln_dataset *ds, int32_t batch_size,
                                    kiln_metrics *out)
{
    kiln_status st = check_ready(m, ds, "kiln_model_evaluate");
    if (st == KILN_OK)
        st = check_dataset(m, ds, "kiln_model_evaluate", "the dataset");
    if (st != KILN_OK)
        return st;
    if (!out || batch_size < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_evaluate: %s", !out ? "out is NULL"
                                                          : "batch_size must be >= 0");
    const int32_t batch = batch_size ? batch_size : KILN_DEFAULT_BATCH_SIZE;
    static const char *const names[] = {"batch_size", "number of samples"};
    const int64_t mine[] = {batch, ds->count};
    st = check_same_everywhere(m, m->placement.mpi_evaluates, "kiln_model_evaluate", names, mine, 2);
    if (st != KILN_OK)
        return st;
    kiln_metrics r;
    memset(&r, 0, sizeof r);
    st = evaluate_dataset(m, ds, batch, 1, &r);
    if (st == KILN_OK)
        kiln_struct_export(out, &r, sizeof r);
    return st;
}

kiln_status kiln_model_evaluate(kiln_model *m, const kiln_dataset *ds, int32_t batch_size,
                                kiln_metrics *out)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_evaluate");
    if (st == KILN_OK) {
        kiln_model_stop_begin(m);
        st = evaluate_entered(m, ds, batch_size, out);
        kiln_model_leave(m);
    }
    return st;
}

/* Each batch of the caller's typed arrays is packed (kiln_batch_arrays_pack)
 * when its turn comes, so a large input is never copied whole; ids are
 * checked before the first batch runs. */
static kiln_status predict_entered(kiln_model *m, const kiln_batch_arrays *inputs,
                                   float *outputs, int32_t batch_size)
{
    const char *call = "kiln_model_predict";
    if (!m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: compile the model first", call);
    int64_t count;
    kiln_status st = kiln_batch_arrays_count(m, call, inputs, &count);
    if (st != KILN_OK)
        return st;
    if (!outputs || batch_size < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: outputs must be set and "
                          "batch_size (%d) >= 0", call, (int)batch_size);
    const int32_t batch = batch_size ? batch_size : KILN_DEFAULT_BATCH_SIZE;
    for (int64_t start = 0; start < count && st == KILN_OK; start += batch) {
        kiln_packed_batch p;
        st = kiln_batch_arrays_pack(m, call, inputs, 0, start,
                                    (int32_t)(count - start < batch ? count - start : batch), &p);
        if (st == KILN_OK)
            st = kiln_model_check_features(m, call, p.features, p.count, start, 0);
        kiln_packed_batch_free(m, &p);
    }
    static const char *const names[] = {"batch_size", "count"};
    const int64_t mine[] = {batch, count};
    if (st == KILN_OK)
        st = check_same_everywhere(m, m->placement.mpi_evaluates, call, names, mine, 2);
    float *kept = NULL;   /* the weights, while the averages stand in (use_ema) */
    if (st == KILN_OK)
        st = kiln_ema_swap_in(m, &kept);
    for (int64_t start = 0; start < count && st == KILN_OK; start += batch) {
        kiln_packed_batch p;
        st = kiln_batch_arrays_pack(m, call, inputs, 0, start,
                                    (int32_t)(count - start < batch ? count - start : batch), &p);
        const kiln_batch b = {.n = p.count, .features = p.features};
        if (st == KILN_OK)
            st = m->placement.strategy->predict_step(m->placement.strategy_impl, &b,
                                           outputs + start * m->plan.output_size);
        kiln_packed_batch_free(m, &p);
        const int64_t done = start + b.n;
        char where[96];
        snprintf(where, sizeof where, "after %lld of %lld samples", (long long)done,
                 (long long)count);
        /* No count goes back: outputs left unwritten must not pass for results. */
        if (st == KILN_OK && done < count && kiln_model_stop_asked(m, call, where))
            st = kiln_error(m->ctx, KILN_ERROR_STOPPED, "%s: stopped by kiln_model_stop %s; "
                            "the outputs of those are written, the rest are not", call, where);
    }
    return kiln_ema_swap_out(m, kept, st);
}

kiln_status kiln_model_predict(kiln_model *m, const kiln_batch_arrays *inputs, float *outputs,
                               int32_t batch_size)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_predict");
    if (st == KILN_OK) {
        kiln_model_stop_begin(m);
        st = predict_entered(m, inputs, outputs, batch_size);
        kiln_model_leave(m);
    }
    return st;
}

static kiln_status check_fit_options(kiln_model *m, const kiln_fit_options *o)
{
    if (o->checkpoint_every_steps < 0 || o->keep_checkpoints < 0 ||
        ((o->checkpoint_every_steps || o->checkpoint_every_epoch || o->resume) &&
         !o->checkpoint_dir))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: checkpoint_every_steps and keep_checkpoints must be "
                          ">= 0, and checkpoints or resume need checkpoint_dir");
    if (o->epochs < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: epochs is %d; it must be >= 0 (0: %d)",
                          (int)o->epochs, KILN_DEFAULT_EPOCHS);
    if (o->batch_size < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: batch_size is %d; it must be >= 0 (0: %d)",
                          (int)o->batch_size, KILN_DEFAULT_BATCH_SIZE);
    if ((int)o->verbosity < KILN_VERBOSE_AUTO || o->verbosity > KILN_VERBOSE_EPOCH)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: verbosity %d is not a kiln_verbosity",
                          (int)o->verbosity);
    if (!(o->validation_split >= 0.0f && o->validation_split < 1.0f) ||
        (o->validation_split > 0.0f && o->validation))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: validation_split is %g; it must be in [0, 1), and 0 "
                          "when validation data is given", (double)o->validation_split);
    if (o->loader_threads < -1 || o->loader_threads > 256 || o->prefetch_batches < 0 ||
        o->prefetch_batches > 1024)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: loader_threads is %d and prefetch_batches %d; they "
                          "must be in [-1, 256] and [0, 1024] (0: the default)",
                          (int)o->loader_threads, (int)o->prefetch_batches);
    if (o->validation)
        return check_dataset(m, o->validation, "kiln_model_fit", "the validation data");
    return KILN_OK;
}

/* TensorFlow's rule: the global batch is the per-replica batch times the
 * replicas in sync; without it, 0 is Keras's default. Resolved before any
 * check reads batch_size. */
static kiln_status resolve_batch_size(kiln_model *m, kiln_fit_options *o)
{
    if (o->per_replica_batch_size == 0) {
        if (o->batch_size == 0)
            o->batch_size = KILN_DEFAULT_BATCH_SIZE;
        return KILN_OK;
    }
    const int64_t replicas = m->placement.strategy->replicas_in_sync
                                 ? m->placement.strategy->replicas_in_sync(m->placement.strategy_impl) : 1;
    const int64_t global = (int64_t)o->per_replica_batch_size * replicas;
    if (o->per_replica_batch_size < 0 || global > INT32_MAX)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: per_replica_batch_size is %d; times the %lld "
                          "replica(s) in sync of %s it must be in [0, %d]",
                          (int)o->per_replica_batch_size, (long long)replicas, m->placement.strategy->name,
                          (int)INT32_MAX);
    if (o->batch_size != 0 && o->batch_size != global)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_fit: per_replica_batch_size %d x %lld replica(s) in sync "
                          "of %s is a global batch of %lld, but batch_size is %d; set "
                          "batch_size to 0 or %lld", (int)o->per_replica_batch_size,
                          (long long)replicas, m->placement.strategy->name, (long long)global,
                          (int)o->batch_size, (long long)global);
    o->batch_size = (int32_t)global;
    return KILN_OK;
}

static kiln_status append_history(kiln_model *m, const kiln_epoch_record *r)
{
    if (m->training.n_history == m->training.cap_history) {
        int32_t cap = m->training.cap_history ? m->training.cap_history * 2 : 16;
        kiln_epoch_record *grown = kiln_realloc(m->ctx, m->training.history, (size_t)cap * sizeof *grown);
        if (!grown)
            return kiln_error_oom(m->ctx, "the history", (size_t)cap * sizeof *grown);
        m->training.history = grown;
        m->training.cap_history = cap;
    }
    m->training.history[m->training.n_history++] = *r;
    return KILN_OK;
}

/* Multi-worker: rank 0 writes for everyone. */
static kiln_status save_checkpoint(kiln_model *m, const kiln_fit_options *o)
{
    if (m->placement.rank != 0)
        return KILN_OK;
    return kiln_checkpoint_folder_save(m, o->checkpoint_dir,
                                       o->keep_checkpoints > 0 ? o->keep_checkpoints : 3);
}

/* Where training stands: the start of a fresh epoch. */
static void reset_epoch_position(kiln_model *m)
{
    m->training.epoch_step = 0;
    m->training.epoch_loss = m->training.epoch_correct = 0;
    memset(m->training.epoch_metrics, 0, sizeof m->training.epoch_metrics);
    memset(m->training.epoch_heads, 0, sizeof m->training.epoch_heads);
    m->training.epoch_seen = 0;
    m->training.epoch_counted = 0;
}

/* Adds a step's sums to the epoch's. */
static void add_sums(kiln_model *m, const double *sums)
{
    m->training.epoch_loss += sums[KILN_SUM_LOSS];
    m->training.epoch_correct += sums[KILN_SUM_CORRECT];
    m->training.epoch_seen += (int64_t)sums[KILN_SUM_SAMPLES];
    m->training.epoch_counted += sums[KILN_SUM_COUNTED];
    for (int k = 0; k < 3; k++)
        m->training.epoch_metrics[k] += sums[KILN_SUM_TOP_K + k];
    for (int k = 0; k < KILN_SUM_HEAD_SLOTS * KILN_MAX_MODEL_OUTPUTS; k++)
        m->training.epoch_heads[k] += sums[KILN_SUM_HEADS + k];
}

static void update_means(const kiln_model *m, kiln_epoch_record *r)
{
    double sums[KILN_N_SUMS] = {
        [KILN_SUM_LOSS] = m->training.epoch_loss, [KILN_SUM_CORRECT] = m->training.epoch_correct,
        [KILN_SUM_TOP_K] = m->training.epoch_metrics[0], [KILN_SUM_ABS_ERROR] = m->training.epoch_metrics[1],
        [KILN_SUM_BINARY] = m->training.epoch_metrics[2], [KILN_SUM_COUNTED] = m->training.epoch_counted};
    memcpy(sums + KILN_SUM_HEADS, m->training.epoch_heads, sizeof m->training.epoch_heads);
    kiln_metrics means;
    kiln_model_metrics(m, sums, &means);
    r->n_outputs = means.n_outputs;
    memcpy(r->outputs, means.outputs, sizeof r->outputs);
    r->loss = means.loss;
    r->accuracy = means.accuracy;
    r->top_k_accuracy = means.top_k_accuracy;
    r->mean_absolute_error = means.mean_absolute_error;
    r->binary_accuracy = means.binary_accuracy;
    r->learning_rate = kiln_model_learning_rate(
        m, m->training.n_optimizer_steps > 0 ? m->training.n_optimizer_steps - 1 : 0);
}

/* Every checkpoint_every_steps steps, and at an epoch's end with
 * checkpoint_every_epoch; never inside an accumulation cycle, whose
 * partial gradients a checkpoint does not hold. */
static int checkpoint_due(const kiln_model *m, const kiln_fit_options *o, int at_epoch_end)
{
    return o->checkpoint_dir &&
           ((at_epoch_end && o->checkpoint_every_epoch) ||
            (o->checkpoint_every_steps > 0 && m->training.n_train_steps % o->checkpoint_every_steps == 0)) &&
           (!m->placement.strategy->micro_step || m->placement.strategy->micro_step(m->placement.strategy_impl) == 0);
}

/* Trains on the loader's next batch, timing the wait for input apart from
 * the step. `*stopped`: kiln_model_stop ended the wait, no step ran. */
static kiln_status train_batch(kiln_model *m, batch_source *src, double *sums, int *stopped)
{
    const double t0 = kiln_now();
    kiln_batch b;
    kiln_status st = next_batch(m, src, &b);
    *stopped = st == KILN_ERROR_STOPPED && kiln_flag_up(&m->training.stop_requested);
    if (*stopped)
        return KILN_OK;
    if (st != KILN_OK)
        return st;
    memset(sums, 0, KILN_N_SUMS * sizeof *sums);
    const double t1 = kiln_now();
    st = m->placement.strategy->train_step(m->placement.strategy_impl, &b, sums);
    if (st != KILN_OK)
        return st;
    m->training.input_seconds += t1 - t0;
    m->training.step_seconds += kiln_now() - t1;
    m->training.timed_steps++;
    return KILN_OK;
}

/* What a skipped step's sums say went non-finite, for the messages below:
 * the loss or a gradient (a strategy reports a non-finite gradient under a
 * finite loss as a NaN loss), else the update the optimizer would have
 * made from finite ones (Adam's g * g overflows for |g| > 1.8e19). `when`
 * names the step. */
static void describe_skip(const double *sums, const char *when, char *text, size_t size)
{
    if (!isfinite(sums[KILN_SUM_LOSS]))
        snprintf(text, size, "the loss or a gradient is %s at %s",
                 isnan(sums[KILN_SUM_LOSS]) ? "NaN" : "infinite", when);
    else
        snprintf(text, size, "the update is not finite at %s (the loss and gradients were "
                 "finite; a parameter or the optimizer's state would have overflowed)", when);
}

/* A step whose update was not applied (a non-finite loss, gradient or
 * update) stops training unless skip_nonfinite: then the step counts, but
 * not its sums; under TerminateOnNaN it ends fit normally. */
static kiln_status count_step(kiln_model *m, const kiln_fit_options *o, kiln_callbacks *cbs,
                              int32_t epoch, int64_t step, const double *sums,
                              kiln_epoch_record *r)
{
    const int skipped = kiln_sums_skipped(sums);
    char when[64], why[256];
    snprintf(when, sizeof when, "epoch %d, step %lld", (int)epoch + 1, (long long)step + 1);
    describe_skip(sums, when, why, sizeof why);
    if (skipped && !o->skip_nonfinite && kiln_callbacks_terminate_on_nan(cbs)) {
        kiln_model_record_stop(m, KILN_STOP_TERMINATE_ON_NAN, "TerminateOnNaN: %s; the step "
                               "was not applied and training stopped", why);
        return KILN_OK;
    }
    if (skipped && !o->skip_nonfinite)
        return kiln_error(m->ctx, KILN_ERROR_NUMERIC, "kiln_model_fit: %s; the step was not "
                          "applied and training stopped", why);
    m->training.n_train_steps++;
    m->training.epoch_step = step + 1;
    if (!skipped)
        add_sums(m, sums);
    else
        r->skipped_steps++;
    update_means(m, r);
    return KILN_OK;
}

/* Asynchronous strategies: the batches still in flight, whose loss can be
 * as non-finite as a step's, and is stopped at or skipped alike. */
static kiln_status drain_in_flight(kiln_model *m, const kiln_fit_options *o,
                                   kiln_callbacks *cbs, int32_t epoch, int cut,
                                   kiln_epoch_record *r)
{
    double sums[KILN_N_SUMS];
    const kiln_status st = m->placement.strategy->drain(m->placement.strategy_impl, sums);
    if (st != KILN_OK || cut)
        return st;   /* an epoch cut short is not counted */
    const int skipped = kiln_sums_skipped(sums);
    char when[96], why[256];
    /* The multi-process parameter server reports a dropped update here, of
     * any batch of the epoch. */
    snprintf(when, sizeof when, "epoch %d, in a batch %s", (int)epoch + 1,
             kiln_sums_skipped(sums) && isfinite(sums[KILN_SUM_LOSS])
                 ? "of the epoch, reported at its end" : "still in flight at its end");
    describe_skip(sums, when, why, sizeof why);
    if (skipped && !o->skip_nonfinite && kiln_callbacks_terminate_on_nan(cbs)) {
        kiln_model_record_stop(m, KILN_STOP_TERMINATE_ON_NAN, "TerminateOnNaN: %s; that batch "
                               "was not applied and training stopped", why);
        return KILN_OK;
    }
    if (skipped && !o->skip_nonfinite)
        return kiln_error(m->ctx, KILN_ERROR_NUMERIC, "kiln_model_fit: %s; that batch was not "
                          "applied and training stopped", why);
    if (!skipped)
        add_sums(m, sums);
    else
        r->skipped_steps++;
    update_means(m, r);
    return KILN_OK;
}

static kiln_status after_step(kiln_model *m, const kiln_fit_options *o, kiln_callbacks *cbs,
                              int32_t epoch, int64_t step, int64_t steps, kiln_epoch_record *r)
{
    /* The last step's checkpoint waits for the epoch's end, which writes it
     * with the epoch in the history. An asynchronous strategy's batches
     * still in flight are waited for first, so that the checkpoint holds
     * every step up to this one (weights, optimizer state and its update
     * count, and the epoch's sums) and nothing after: one worker then
     * resumes it exactly. */
    if (checkpoint_due(m, o, 0) && step + 1 < steps) {
        kiln_status st = m->placement.strategy->drain ? drain_in_flight(m, o, cbs, epoch, 0, r)
                                            : KILN_OK;
        if (st == KILN_OK)
            st = save_checkpoint(m, o);
        if (st != KILN_OK)
            return st;
    }
    return kiln_callbacks_notify(cbs, KILN_EVENT_BATCH_END, epoch, step + 1, steps, r);
}

static kiln_status validate(kiln_model *m, const kiln_fit_options *o, kiln_epoch_record *r)
{
    if (!o->validation)
        return KILN_OK;
    kiln_metrics v;
    const kiln_status st = evaluate_dataset(m, o->validation, o->batch_size, 0, &v);
    if (st != KILN_OK)
        return st;
    r->has_validation = 1;
    r->val_loss = v.loss;
    r->val_accuracy = v.accuracy;
    r->val_top_k_accuracy = v.top_k_accuracy;
    r->val_mean_absolute_error = v.mean_absolute_error;
    r->val_binary_accuracy = v.binary_accuracy;
    memcpy(r->val_outputs, v.outputs, sizeof r->val_outputs);
    return KILN_OK;
}

/* The epoch goes into the history and the position to the next epoch's
 * start before the checkpoint, so a resume starts the next epoch. */
static kiln_status end_epoch(kiln_model *m, const kiln_fit_options *o, kiln_callbacks *cbs,
                             int32_t epoch, int64_t steps, const kiln_epoch_record *r)
{
    kiln_status st = append_history(m, r);
    reset_epoch_position(m);
    if (st == KILN_OK && checkpoint_due(m, o, 1))
        st = save_checkpoint(m, o);
    if (st == KILN_OK)
        st = kiln_callbacks_notify(cbs, KILN_EVENT_EPOCH_END, epoch, steps, steps, r);
    return st;
}

static kiln_status fit_epoch(kiln_model *m, const kiln_dataset *ds, const kiln_fit_options *o,
                             kiln_callbacks *cbs, int32_t epoch, batch_source *src,
                             kiln_progress_bar *bar)
{
    const int64_t steps = (ds->count + o->batch_size - 1) / o->batch_size;
    /* The epoch's order depends on the seed and the epoch count only, so a
     * resumed run replays it exactly. */
    kiln_epoch_order(ds->count, m->training.shuffle_seed, m->training.n_history, !o->no_shuffle, src->order);
    kiln_loader_begin(src->loader, src->order, ds->count, m->training.epoch_step, m->training.n_history);
    kiln_progress_begin(bar, epoch, o->epochs, steps);
    kiln_epoch_record r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    const double start = kiln_now();
    kiln_status st = kiln_callbacks_epoch_begin(cbs, epoch);
    update_means(m, &r);
    for (int64_t step = m->training.epoch_step; step < steps && st == KILN_OK; step++) {
        double sums[KILN_N_SUMS];
        int stopped;
        st = train_batch(m, src, sums, &stopped);
        char where[96];
        snprintf(where, sizeof where, "at epoch %d, waiting for step %lld's batch",
                 (int)epoch + 1, (long long)step + 1);
        if (stopped && kiln_model_stop_asked(m, "training", where))
            break;
        if (st == KILN_OK)
            st = count_step(m, o, cbs, epoch, step, sums, &r);
        if (st != KILN_OK || m->training.stop_cause != KILN_STOP_NONE)
            break;
        r.seconds = kiln_now() - start;
        kiln_progress_step(bar, step + 1, &r);
        st = after_step(m, o, cbs, epoch, step, steps, &r);
        snprintf(where, sizeof where, "at epoch %d, step %lld of %lld",
                 (int)epoch + 1, (long long)step + 1, (long long)steps);
        const int finished = step + 1 == steps && epoch + 1 == o->epochs;
        if (st == KILN_OK && m->training.stop_cause == KILN_STOP_NONE && !finished)
            kiln_model_stop_asked(m, "training", where);
        if (m->training.stop_cause != KILN_STOP_NONE)
            break;
    }
    kiln_loader_end(src->loader);
    /* A stop inside the epoch leaves it out of the history, as a failure
     * would: the history holds whole epochs, which resuming relies on. */
    const int cut = m->training.stop_cause != KILN_STOP_NONE && m->training.epoch_step < steps;
    if (st == KILN_OK && m->placement.strategy->drain)
        st = drain_in_flight(m, o, cbs, epoch, cut, &r);
    if (st != KILN_OK || cut || m->training.stop_cause == KILN_STOP_TERMINATE_ON_NAN)
        return st;
    r.samples = m->training.epoch_seen;
    st = validate(m, o, &r);
    if (st != KILN_OK)
        return st;
    r.seconds = kiln_now() - start;
    kiln_progress_end(bar, &r);
    return end_epoch(m, o, cbs, epoch, steps, &r);
}

/* Keras's validation_split: the last fraction of the samples, before any
 * shuffling, becomes the validation data (views, no copy). */
static kiln_status split_validation(kiln_model *m, const kiln_dataset *ds, kiln_fit_options *o,
                                    kiln_dataset **train, kiln_dataset **held_out)
{
    *train = *held_out = NULL;
    if (o->validation_split == 0.0f)
        return KILN_OK;
    /* Keras computes int(count * (1 - split)) in double. 0.2f is 0.200000003
     * in float, which would keep 39 of 50 samples; the float's shortest
     * decimal (0.2) keeps 40, as Keras does. */
    char decimal[32];
    snprintf(decimal, sizeof decimal, "%.7g", (double)o->validation_split);
    const int64_t kept = (int64_t)((double)ds->count * (1.0 - strtod(decimal, NULL)));
    if (kept < 1 || kept >= ds->count)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: "
                          "validation_split %g of %lld samples leaves %lld for training and "
                          "%lld for validation; each needs at least one",
                          (double)o->validation_split, (long long)ds->count, (long long)kept,
                          (long long)(ds->count - kept));
    kiln_status st = kiln_dataset_subset(ds, 0, kept, train);
    if (st == KILN_OK)
        st = kiln_dataset_subset(ds, kept, ds->count - kept, held_out);
    if (st == KILN_OK)
        o->validation = *held_out;
    return st;
}

static kiln_status fit_dataset(kiln_model *m, const kiln_dataset *train, kiln_fit_options *o,
                               kiln_callbacks *cbs)
{
    kiln_status st = KILN_OK;
    if (o->checkpoint_dir && m->placement.rank == 0)
        st = kiln_checkpoint_folder_open(m, o->checkpoint_dir);
    if (st != KILN_OK)
        return st;
    batch_source src;
    st = source_open(m, train, o->batch_size, 1, o->loader_threads, o->prefetch_batches, 1,
                     &src);
    if (st != KILN_OK)
        return st;
    const int resumed = o->resume && kiln_checkpoint_folder_resume(m, o->checkpoint_dir);
    if (!resumed) {
        m->training.shuffle_seed = o->shuffle_seed ? o->shuffle_seed : m->ctx->seed ^ 0x73687566ULL;
        reset_epoch_position(m);
    }
    /* A rank that found no checkpoint to load would count `epochs` from
     * its own history, not from the checkpoint's. */
    static const char *const names[] = {
        "epochs", "batch_size", "number of training samples", "number of validation samples",
        "shuffle seed", "outcome of resuming from checkpoint_dir (1: a checkpoint loaded)",
        "epochs in the history", "steps done in the current epoch", "n_callbacks"};
    const int64_t mine[] = {o->epochs, o->batch_size, train->count,
                            o->validation ? o->validation->count : 0, (int64_t)m->training.shuffle_seed,
                            resumed, m->training.n_history, m->training.epoch_step, o->n_callbacks};
    st = check_same_everywhere(m, 1, "kiln_model_fit", names, mine, 9);
    /* Resumed: `epochs` is the total to reach; otherwise, epochs to run. */
    const int32_t first = resumed ? m->training.n_history : 0;
    const int32_t last = o->epochs;
    kiln_report *report = NULL;
    if (st == KILN_OK)
        st = kiln_report_open(m, train, o, last - first, &report);
    kiln_progress_bar bar;
    kiln_progress_init(&bar, m->placement.rank == 0 ? o->verbosity : KILN_VERBOSE_SILENT, stderr);
    if (st == KILN_OK)
        st = kiln_callbacks_begin(cbs);
    for (int32_t e = first; e < last && st == KILN_OK && m->training.stop_cause == KILN_STOP_NONE; e++) {
        st = fit_epoch(m, train, o, cbs, e, &src, &bar);
        kiln_report_epoch(report);
        char where[64];
        snprintf(where, sizeof where, "after epoch %d", (int)e + 1);
        if (st == KILN_OK && m->training.stop_cause == KILN_STOP_NONE && e + 1 < last)
            kiln_model_stop_asked(m, "training", where);
    }
    if (st != KILN_OK || (m->training.stop_cause != KILN_STOP_NONE && m->training.epoch_step != 0))
        kiln_progress_abort(&bar);   /* a line left unfinished */
    if (st == KILN_OK)
        st = kiln_callbacks_end(cbs);
    kiln_report_close(report, st);
    source_close(m, &src);
    return st;
}

static kiln_status fit_entered(kiln_model *m, const kiln_dataset *train,
                               const kiln_fit_options *options)
{
    kiln_status st = check_ready(m, train, "kiln_model_fit");
    if (st != KILN_OK)
        return st;
    kiln_fit_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_fit_options",
                          &why) != KILN_OK)
        return kiln_error(m->ctx, why.status, "kiln_model_fit: %s", why.message);
    if (o.epochs == 0)
        o.epochs = KILN_DEFAULT_EPOCHS;
    st = resolve_batch_size(m, &o);
    if (st == KILN_OK)
        st = check_fit_options(m, &o);
    if (st == KILN_OK)
        st = check_dataset(m, train, "kiln_model_fit", "the dataset");
    kiln_dataset *kept = NULL, *held_out = NULL;
    kiln_callbacks *cbs = NULL;
    if (st == KILN_OK)
        st = split_validation(m, train, &o, &kept, &held_out);
    if (st == KILN_OK)
        st = kiln_callbacks_create(m, &o, o.validation != NULL, &cbs);
    if (st == KILN_OK) {
        m->training.stop_cause = KILN_STOP_NONE;
        m->training.stop_reason[0] = '\0';
        st = fit_dataset(m, kept ? kept : train, &o, cbs);
    }
    kiln_callbacks_destroy(cbs);
    kiln_dataset_destroy(kept);
    kiln_dataset_destroy(held_out);
    return st;
}

kiln_status kiln_model_fit(kiln_model *m, const kiln_dataset *train,
                           const kiln_fit_options *options)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_fit");
    if (st == KILN_OK) {
        kiln_model_stop_begin(m);
        st = fit_entered(m, train, options);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_model_history_count(const kiln_model *m, int32_t *count)
{
    if (count)
        *count = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_history_count: count is NULL");
    int entered;
    const kiln_status st = kiln_model_enter_reading(m, "kiln_model_history_count", &entered);
    if (st == KILN_OK)
        *count = m->training.n_history;
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_history_epoch(const kiln_model *m, int32_t i, kiln_epoch_record *record)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!record)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_history_epoch: record is NULL");
    int entered;
    kiln_status st = kiln_model_enter_reading(m, "kiln_model_history_epoch", &entered);
    if (st == KILN_OK && (i < 0 || i >= m->training.n_history))
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                        "kiln_model_history_epoch: epoch %d is not in the history (%d epochs)",
                        (int)i, (int)m->training.n_history);
    if (st == KILN_OK)
        kiln_struct_export(record, &m->training.history[i], sizeof *record);
    kiln_model_leave_reading(m, entered);
    return st;
}
