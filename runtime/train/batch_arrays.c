/* A caller's typed batch (kiln_batch_arrays) checked against the model's
 * Inputs and losses, and packed as a strategy takes a batch: the wrong
 * array for an Input or an output is refused by name before anything is
 * copied. */
#include "runtime/train/batch_arrays.h"

#include "runtime/context/context.h"
#include "runtime/model/loss.h"

#include <stdio.h>
#include <string.h>

static const char *input_name(const kiln_model *m, int32_t k)
{
    return m->graph.nodes[m->graph.inputs[k]].name;
}

static const char *output_name(const kiln_model *m, int32_t k)
{
    return m->graph.nodes[m->graph.outputs[k]].name;
}

/* Input k's values for every sample: `floats` or `ids`, whichever its
 * Input takes (`what` names the array in messages). */
static kiln_status pack_input(kiln_model *m, const char *call, const char *what, int32_t k,
                              const float *floats, const int32_t *ids, int64_t first,
                              kiln_packed_batch *out)
{
    const int ints = m->graph.nodes[m->graph.inputs[k]].ints;
    if ((floats != NULL) + (ids != NULL) != 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s: set exactly one of "
                          "features and int_features (Input '%s' takes %s)", call, what,
                          input_name(m, k), ints ? "int_features" : "features");
    if (ints != (ids != NULL))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s: Input '%s' takes %s: "
                          "set %s, not %s", call, what, input_name(m, k),
                          ints ? "int32 ids (kiln_input_ints)" : "floats",
                          ints ? "int_features" : "features", ints ? "features" : "int_features");
    const int64_t size = m->graph.ids[k].size;
    const char *src = ints ? (const char *)ids : (const char *)floats;
    for (int32_t i = 0; i < out->count; i++)
        memcpy(out->features + i * m->graph.sample_size + m->graph.input_offset[k],
               src + (size_t)((first + i) * size) * 4, (size_t)size * 4);
    return KILN_OK;
}

static kiln_status pack_inputs(kiln_model *m, const char *call, const kiln_batch_arrays *b,
                               int64_t first, kiln_packed_batch *out)
{
    const int set = (b->features != NULL) + (b->int_features != NULL) +
                    (b->n_inputs != 0 || b->inputs != NULL);
    if (set != 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: set exactly one of "
                          "kiln_batch_arrays.features, int_features and inputs (%d are set)",
                          call, set);
    if (b->n_inputs == 0 && b->inputs == NULL) {
        if (m->graph.n_inputs != 1)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: the model has %d "
                              "Inputs; give one array per Input in kiln_batch_arrays.inputs",
                              call, (int)m->graph.n_inputs);
        return pack_input(m, call, "kiln_batch_arrays", 0, b->features, b->int_features, first,
                          out);
    }
    if (b->n_inputs != m->graph.n_inputs || !b->inputs)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: kiln_batch_arrays.inputs "
                          "holds %d arrays but the model has %d Inputs", call,
                          b->inputs ? (int)b->n_inputs : 0, (int)m->graph.n_inputs);
    kiln_status st = KILN_OK;
    for (int32_t k = 0; k < m->graph.n_inputs && st == KILN_OK; k++) {
        kiln_input_array a;
        kiln_diag why;
        if (kiln_options_take_at(&a, sizeof a, b->inputs, (size_t)k, sizeof(size_t),
                                 "kiln_batch_arrays.inputs", &why) != KILN_OK)
            return kiln_error(m->ctx, why.status, "%s: %s", call, why.message);
        char what[32];
        snprintf(what, sizeof what, "inputs[%d]", (int)k);
        const kiln_shape *want = &m->graph.nodes[m->graph.inputs[k]].shape;
        kiln_shape got = {.rank = a.rank};
        if (a.rank > 0 && a.rank <= KILN_MAX_RANK)
            memcpy(got.dims, a.dims, sizeof got.dims);
        if (a.rank != 0 && (a.rank != want->rank ||
                            memcmp(got.dims, want->dims, (size_t)want->rank * 4) != 0)) {
            char g[64], w[64];
            return kiln_error(m->ctx, KILN_ERROR_SHAPE, "%s: %s is %s but Input '%s' is %s",
                              call, what, a.rank > 0 && a.rank <= KILN_MAX_RANK
                              ? kiln_shape_str(&got, g, sizeof g) : "of a bad rank",
                              input_name(m, k), kiln_shape_str(want, w, sizeof w));
        }
        st = pack_input(m, call, what, k, a.features, a.int_features, first, out);
    }
    return st;
}

/* Output k's labels for every sample: `ids` for a sparse loss, `floats`
 * for the others; num_classes, when > 0, bounds the ids. */
static kiln_status pack_labels(kiln_model *m, const char *call, const char *what, int32_t k,
                               const int32_t *ids, const float *floats, int32_t num_classes,
                               int64_t first, kiln_packed_batch *out)
{
    const kiln_loss_plan *plan = &m->plan.heads[k];
    if ((ids != NULL) + (floats != NULL) != 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s: set exactly one of "
                          "sparse_labels and dense_labels (output '%s' takes %s)", call, what,
                          output_name(m, k), plan->sparse ? "sparse_labels" : "dense_labels");
    if (plan->sparse != (ids != NULL))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s: output '%s' takes %s "
                          "(its loss is %s): set %s, not %s", call, what, output_name(m, k),
                          plan->sparse ? "int32 class ids" : "float labels",
                          plan->sparse ? "sparse" : "dense",
                          plan->sparse ? "sparse_labels" : "dense_labels",
                          plan->sparse ? "dense_labels" : "sparse_labels");
    const int64_t words = (int64_t)(kiln_loss_label_bytes(plan) / 4);
    const int32_t *own = ids ? ids + first * words : NULL;
    for (int64_t i = 0; own && num_classes > 0 && i < out->count * words; i++)
        if (own[i] < 0 || own[i] >= num_classes)
            return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s: sample %lld has label %d, "
                              "outside [0, %d) (num_classes)", call, what,
                              (long long)(first + i / words), (int)own[i], (int)num_classes);
    const char *src = ids ? (const char *)ids : (const char *)floats;
    for (int32_t i = 0; i < out->count; i++)
        memcpy((char *)out->labels + (size_t)(i * m->plan.label_words + m->plan.head_label_offset[k]) * 4,
               src + (size_t)((first + i) * words) * 4, (size_t)words * 4);
    return KILN_OK;
}

static kiln_status pack_outputs(kiln_model *m, const char *call, const kiln_batch_arrays *b,
                                int64_t first, kiln_packed_batch *out)
{
    const int set = (b->sparse_labels != NULL) + (b->dense_labels != NULL) +
                    (b->n_outputs != 0 || b->outputs != NULL);
    if (set != 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: set exactly one of "
                          "kiln_batch_arrays.sparse_labels, dense_labels and outputs (%d are "
                          "set)", call, set);
    if (b->n_outputs == 0 && b->outputs == NULL) {
        if (m->graph.n_outputs != 1)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: the model has %d "
                              "outputs; give one label array per output in "
                              "kiln_batch_arrays.outputs", call, (int)m->graph.n_outputs);
        return pack_labels(m, call, "kiln_batch_arrays", 0, b->sparse_labels, b->dense_labels,
                           0, first, out);
    }
    if (b->n_outputs != m->graph.n_outputs || !b->outputs)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: kiln_batch_arrays.outputs "
                          "holds %d label arrays but the model has %d outputs", call,
                          b->outputs ? (int)b->n_outputs : 0, (int)m->graph.n_outputs);
    kiln_status st = KILN_OK;
    for (int32_t k = 0; k < m->graph.n_outputs && st == KILN_OK; k++) {
        kiln_label_array a;
        kiln_diag why;
        if (kiln_options_take_at(&a, sizeof a, b->outputs, (size_t)k, sizeof(size_t),
                                 "kiln_batch_arrays.outputs", &why) != KILN_OK)
            return kiln_error(m->ctx, why.status, "%s: %s", call, why.message);
        char what[32];
        snprintf(what, sizeof what, "outputs[%d]", (int)k);
        if ((a.label_kind == KILN_LABELS_DENSE) != (a.dense_labels != NULL) &&
            (a.dense_labels != NULL) + (a.sparse_labels != NULL) == 1)
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s: label_kind is %s "
                              "but %s is set", call, what,
                              a.label_kind == KILN_LABELS_DENSE ? "dense" : "sparse",
                              a.dense_labels ? "dense_labels" : "sparse_labels");
        const int64_t words = (int64_t)(kiln_loss_label_bytes(&m->plan.heads[k]) / 4);
        if (a.label_size != 0 && a.label_size != words)
            return kiln_error(m->ctx, KILN_ERROR_SHAPE, "%s: %s: label_size is %d but output "
                              "'%s' takes %lld per sample", call, what, (int)a.label_size,
                              output_name(m, k), (long long)words);
        st = pack_labels(m, call, what, k, a.sparse_labels, a.dense_labels, a.num_classes,
                         first, out);
    }
    return st;
}

/* The caller's struct, taken as its struct_size says, with a count >= 1. */
static kiln_status take(kiln_model *m, const char *call, const kiln_batch_arrays *batch,
                        kiln_batch_arrays *b)
{
    if (!batch)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: batch is NULL", call);
    kiln_diag why;
    if (kiln_options_take(b, sizeof *b, batch, offsetof(kiln_batch_arrays, count) +
                          sizeof b->count, "kiln_batch_arrays", &why) != KILN_OK)
        return kiln_error(m->ctx, why.status, "%s: %s", call, why.message);
    if (b->count < 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: kiln_batch_arrays.count is "
                          "%lld; it must be >= 1", call, (long long)b->count);
    return KILN_OK;
}

kiln_status kiln_batch_arrays_count(kiln_model *m, const char *call,
                                    const kiln_batch_arrays *batch, int64_t *count)
{
    kiln_batch_arrays b;
    const kiln_status st = take(m, call, batch, &b);
    *count = st == KILN_OK ? b.count : 0;
    return st;
}

kiln_status kiln_batch_arrays_pack(kiln_model *m, const char *call,
                                   const kiln_batch_arrays *batch, int labels, int64_t first,
                                   int32_t n, kiln_packed_batch *out)
{
    memset(out, 0, sizeof *out);
    kiln_batch_arrays b;
    kiln_status st = take(m, call, batch, &b);
    if (st != KILN_OK)
        return st;
    if (n < 0 && b.count > INT32_MAX)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: kiln_batch_arrays.count is "
                          "%lld; a batch holds at most 2^31 - 1 samples", call,
                          (long long)b.count);
    if (!labels && (b.sparse_labels || b.dense_labels || b.n_outputs || b.outputs))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s takes no labels: leave "
                          "kiln_batch_arrays.sparse_labels, dense_labels and outputs 0", call);
    out->count = n < 0 ? (int32_t)b.count : n;
    out->features = kiln_calloc(m->ctx, (size_t)(out->count * m->graph.sample_size), sizeof(float));
    if (labels && out->features)
        out->labels = kiln_calloc(m->ctx, (size_t)(out->count * m->plan.label_words), 4);
    if (!out->features || (labels && !out->labels)) {
        kiln_packed_batch_free(m, out);
        return kiln_error_oom(m->ctx, "a batch's host copy",
                              (size_t)(out->count * (m->graph.sample_size + m->plan.label_words)) * 4);
    }
    st = pack_inputs(m, call, &b, first, out);
    if (st == KILN_OK && labels)
        st = pack_outputs(m, call, &b, first, out);
    if (st != KILN_OK)
        kiln_packed_batch_free(m, out);
    return st;
}

void kiln_packed_batch_free(kiln_model *m, kiln_packed_batch *b)
{
    kiln_free(m->ctx, b->features);
    kiln_free(m->ctx, b->labels);
    b->features = NULL;
    b->labels = NULL;
}
