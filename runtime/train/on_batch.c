/* Custom training loops: one batch of host arrays through the model's
 * strategy, as fit would hand it (train_on_batch, test_on_batch,
 * predict_on_batch). */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/model/loss.h"
#include "runtime/model/model.h"
#include "runtime/model/strategy.h"

#include <math.h>
#include <string.h>

/* What every call checks: a compiled model, arrays present, and the data
 * a loss must never see (NaN, Inf, labels outside the output). */
/* Several outputs: each sample's labels are every output's, one after
 * another; ids must be below their output's classes, floats finite. */
static kiln_status check_packed_labels(kiln_model *m, const char *call, const void *labels,
                                       int32_t count)
{
    const int64_t words = m->loss.cols;
    for (int32_t k = 0; k < m->n_outputs; k++) {
        const kiln_loss_plan *plan = &m->heads[k];
        const int64_t size = (int64_t)(kiln_loss_label_bytes(plan) / 4);
        for (int64_t i = 0; i < count; i++)
            for (int64_t p = 0; p < size; p++) {
                const char *at = (const char *)labels +
                                 (size_t)(i * words + m->head_label_offset[k] + p) * 4;
                int32_t id;
                float v;
                memcpy(&id, at, 4);
                memcpy(&v, at, 4);
                if (plan->sparse ? id >= 0 && id < plan->cols : isfinite(v))
                    continue;
                if (plan->sparse)
                    return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld (position "
                                      "%lld) has label %d for output '%s', outside [0, %lld)",
                                      call, (long long)i, (long long)p, (int)id,
                                      m->nodes[m->outputs[k]].name, (long long)plan->cols);
                return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld of "
                                  "its label for output '%s' is not finite", call,
                                  (long long)i, (long long)p, m->nodes[m->outputs[k]].name);
            }
    }
    return KILN_OK;
}

static kiln_status check_batch(kiln_model *m, const char *call, const float *features,
                               const void *labels, int need_labels, int32_t count,
                               const void *outputs, int need_outputs)
{
    if (!m->compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: compile the model first", call);
    if (!features || (need_labels && !labels) || (need_outputs && !outputs) || count < 1)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: features%s%s must be set "
                          "and count (%d) >= 1", call, need_labels ? ", labels" : "",
                          need_outputs ? ", outputs" : "", (int)count);
    const int64_t out = kiln_node_size(m, m->output);
    const kiln_status st = kiln_model_check_features(m, call, features, count, 0, 1);
    if (st != KILN_OK)
        return st;
    if (!need_labels)
        return KILN_OK;
    if (kiln_model_multi_output(m))
        return check_packed_labels(m, call, labels, count);
    if (m->loss.sparse) {
        const int32_t *y = labels;
        const int64_t bad = kiln_loss_bad_label(&m->loss, y, (int64_t)count * m->loss.positions);
        char at[64];
        if (bad < 0)
            return KILN_OK;
        kiln_loss_label_place(&m->loss, bad, at, sizeof at);
        return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: %s has label %d, outside [0, %lld): "
                          "the output has %lld classes", call, at, (int)y[bad],
                          (long long)m->loss.cols, (long long)m->loss.cols);
    }
    const float *y = labels;
    for (int64_t i = 0; i < (int64_t)count * out; i++)
        if (!isfinite(y[i]))
            return kiln_error(m->ctx, KILN_ERROR_DATA, "%s: sample %lld, element %lld of its "
                              "label is not finite", call, (long long)(i / out),
                              (long long)(i % out));
    return KILN_OK;
}

static void report(const kiln_model *m, const double *sums, int32_t count, kiln_metrics *out)
{
    if (!out)
        return;
    kiln_metrics r = {.struct_size = sizeof r, .samples = count};
    kiln_metrics_from_sums(&m->loss, sums, &r);
    kiln_model_output_metrics(m, sums, &r);
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
    st = m->strategy->train_step(m->strategy_impl, &b, sums);
    /* Asynchronous strategies: this batch's result, not a later call's. */
    if (st == KILN_OK && m->strategy->drain)
        st = m->strategy->drain(m->strategy_impl, sums);
    if (st != KILN_OK)
        return st;
    m->n_train_steps++;
    if (!isfinite(sums[0]))
        return kiln_error(m->ctx, KILN_ERROR_NUMERIC, "%s: the loss or a gradient is %s; the "
                          "update was not applied", call, isnan(sums[0]) ? "NaN" : "infinite");
    report(m, sums, count, out);
    return KILN_OK;
}

kiln_status kiln_model_train_on_batch(kiln_model *m, const float *features, const void *labels,
                                      int32_t count, kiln_metrics *out)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_train_on_batch");
    if (st == KILN_OK) {
        st = train_entered(m, features, labels, count, out);
        kiln_model_leave(m);
    }
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
    st = m->strategy->eval_step(m->strategy_impl, &b, sums);
    if (st == KILN_OK)
        report(m, sums, count, out);
    return st;
}

kiln_status kiln_model_test_on_batch(kiln_model *m, const float *features, const void *labels,
                                     int32_t count, kiln_metrics *out)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_test_on_batch");
    if (st == KILN_OK) {
        st = test_entered(m, features, labels, count, out);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_model_predict_on_batch(kiln_model *m, const float *features, int32_t count,
                                        float *outputs)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_predict_on_batch");
    if (st != KILN_OK)
        return st;
    st = check_batch(m, "kiln_model_predict_on_batch", features, NULL, 0, count, outputs, 1);
    const kiln_batch b = {.n = count, .features = features};
    if (st == KILN_OK)
        st = m->strategy->predict_step(m->strategy_impl, &b, outputs);
    kiln_model_leave(m);
    return st;
}
