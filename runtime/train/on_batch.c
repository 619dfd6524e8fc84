/* Custom training loops: one batch of host arrays through the model's
 * strategy, as fit would hand it (train_on_batch, test_on_batch,
 * predict_on_batch). */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/model/loss.h"
#include "runtime/model/ema.h"
#include "runtime/model/model.h"
#include "runtime/model/strategy.h"
#include "runtime/train/batch_arrays.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Each sample's labels are every output's, one after another: ids must be
 * below their output's classes (or its ignore class), floats finite. The
 * messages name the output only for a model of several. */
static kiln_status check_labels(kiln_model *m, const char *call, const void *labels,
                                int32_t count)
{
    for (int32_t k = 0; k < m->graph.n_outputs; k++) {
        const kiln_loss_plan *plan = &m->plan.heads[k];
        const int64_t size = (int64_t)(kiln_loss_label_bytes(plan) / 4);
        char output[128] = "";
        if (kiln_model_outputs_apart(m))
            snprintf(output, sizeof output, " for output '%s'", m->graph.nodes[m->graph.outputs[k]].name);
        for (int64_t i = 0; i < count; i++)
            for (int64_t p = 0; p < size; p++) {
                const char *at = (const char *)labels +
                                 (size_t)(i * m->plan.label_words + m->plan.head_label_offset[k] + p) * 4;
                int32_t id;
                float v;
                memcpy(&id, at, 4);
                memcpy(&v, at, 4);
                if (plan->sparse ? kiln_loss_bad_label(plan, &id, 1) < 0 : isfinite(v))
                    continue;
                if (plan->sparse) {
                    char place[64];
                    kiln_loss_label_place(plan, i * plan->positions + p, place, sizeof place);
                    return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s has label %d%s, outside "
                                      "[0, %lld): the output has %lld classes", call, place,
                                      (int)id, output, (long long)plan->cols,
                                      (long long)plan->cols);
                }
                return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld of "
                                  "its label%s is not finite", call, (long long)i, (long long)p,
                                  output);
            }
    }
    return KILN_OK;
}

/* What every call checks: a compiled model, arrays present, and the data
 * a loss must never see (NaN, Inf, labels outside the output). */
static kiln_status check_batch(kiln_model *m, const char *call, const float *features,
                               const void *labels, int need_labels, int32_t count,
                               const void *outputs, int need_outputs)
{
    if (!m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: compile the model first", call);
    if (!features || (need_labels && !labels) || (need_outputs && !outputs) || count < 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: features%s%s must be set "
                          "and count (%d) >= 1", call, need_labels ? ", labels" : "",
                          need_outputs ? ", outputs" : "", (int)count);
    const kiln_status st = kiln_model_check_features(m, call, features, count, 0, 1);
    if (st != KILN_OK)
        return st;
    if (!need_labels)
        return KILN_OK;
    return check_labels(m, call, labels, count);
}

static void report(const kiln_model *m, const double *sums, int32_t count, kiln_metrics *out)
{
    if (!out)
        return;
    kiln_metrics r = {.struct_size = sizeof r, .samples = count};
    kiln_model_metrics(m, sums, &r);
    kiln_struct_export(out, &r, sizeof r);
}

static kiln_status train_entered(kiln_model *m, const float *features, const void *labels,
                                 int32_t count, kiln_metrics *out)
{
    const char *call = "kiln_model_train_on_batch";
    kiln_status st = check_batch(m, call, features, labels, 1, count, NULL, 0);
    if (st != KILN_OK)
        return st;
    const kiln_batch b = {.n = count, .features = features, .labels = labels};
    double sums[KILN_N_SUMS] = {0};
    st = m->placement.strategy->train_step(m->placement.strategy_impl, &b, sums);
    /* Asynchronous strategies: this batch's result, not a later call's. */
    if (st == KILN_OK && m->placement.strategy->drain)
        st = m->placement.strategy->drain(m->placement.strategy_impl, sums);
    if (st != KILN_OK)
        return st;
    m->training.n_train_steps++;
    if (!isfinite(sums[KILN_SUM_LOSS]))
        return kiln_error(m->ctx, KILN_ERROR_NUMERIC, "%s: the loss or a gradient is %s; the "
                          "update was not applied", call,
                          isnan(sums[KILN_SUM_LOSS]) ? "NaN" : "infinite");
    if (kiln_sums_skipped(sums))
        return kiln_error(m->ctx, KILN_ERROR_NUMERIC, "%s: the update is not finite (the loss "
                          "and gradients were finite; a parameter or the optimizer's state "
                          "would have overflowed); it was not applied", call);
    report(m, sums, count, out);
    return KILN_OK;
}

/* The caller's typed arrays packed (a compiled model's layout), or NULL
 * arrays when the model is not compiled, which check_batch then reports. */
static kiln_status pack(kiln_model *m, const char *call, const kiln_batch_arrays *batch,
                        int labels, kiln_packed_batch *b)
{
    memset(b, 0, sizeof *b);
    return m->plan.compiled ? kiln_batch_arrays_pack(m, call, batch, labels, 0, -1, b) : KILN_OK;
}

kiln_status kiln_model_train_on_batch(kiln_model *m, const kiln_batch_arrays *batch,
                                      kiln_metrics *out)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_train_on_batch");
    if (st != KILN_OK)
        return st;
    kiln_packed_batch b;
    st = pack(m, "kiln_model_train_on_batch", batch, 1, &b);
    if (st == KILN_OK)
        st = train_entered(m, b.features, b.labels, b.count, out);
    kiln_packed_batch_free(m, &b);
    kiln_model_leave(m);
    return st;
}

static kiln_status test_entered(kiln_model *m, const float *features, const void *labels,
                                int32_t count, kiln_metrics *out)
{
    kiln_status st = check_batch(m, "kiln_model_test_on_batch", features, labels, 1, count,
                                 NULL, 0);
    if (st != KILN_OK)
        return st;
    const kiln_batch b = {.n = count, .features = features, .labels = labels};
    double sums[KILN_N_SUMS] = {0};
    float *kept;   /* the weights, while the averages stand in (use_ema) */
    st = kiln_ema_swap_in(m, &kept);
    if (st == KILN_OK)
        st = m->placement.strategy->eval_step(m->placement.strategy_impl, &b, sums);
    st = kiln_ema_swap_out(m, kept, st);
    if (st == KILN_OK)
        report(m, sums, count, out);
    return st;
}

kiln_status kiln_model_test_on_batch(kiln_model *m, const kiln_batch_arrays *batch,
                                     kiln_metrics *out)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_test_on_batch");
    if (st != KILN_OK)
        return st;
    kiln_packed_batch b;
    st = pack(m, "kiln_model_test_on_batch", batch, 1, &b);
    if (st == KILN_OK)
        st = test_entered(m, b.features, b.labels, b.count, out);
    kiln_packed_batch_free(m, &b);
    kiln_model_leave(m);
    return st;
}

kiln_status kiln_model_predict_on_batch(kiln_model *m, const kiln_batch_arrays *batch,
                                        float *outputs)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_predict_on_batch");
    if (st != KILN_OK)
        return st;
    kiln_packed_batch packed;
    st = pack(m, "kiln_model_predict_on_batch", batch, 0, &packed);
    if (st == KILN_OK)
        st = check_batch(m, "kiln_model_predict_on_batch", packed.features, NULL, 0,
                         packed.count, outputs, 1);
    const kiln_batch b = {.n = packed.count, .features = packed.features};
    float *kept = NULL;   /* the weights, while the averages stand in (use_ema) */
    if (st == KILN_OK)
        st = kiln_ema_swap_in(m, &kept);
    if (st == KILN_OK)
        st = m->placement.strategy->predict_step(m->placement.strategy_impl, &b, outputs);
    st = kiln_ema_swap_out(m, kept, st);
    kiln_packed_batch_free(m, &packed);
    kiln_model_leave(m);
    return st;
}
