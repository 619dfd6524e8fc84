/* The compiled model's accessors: its distribution, statistics,
 * sizes and hashes, and its weights as one packed array. */
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/ema.h"

#include <math.h>

#include <stdio.h>
#include <string.h>

uint64_t kiln_model_fingerprint(const kiln_model *m)
{
    uint64_t h = KILN_HASH_SEED;
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *n = &m->graph.nodes[i];
        for (int p = 0; p < n->n_params; p++) {
            char text[256];
            char shape[64];
            const int len = snprintf(text, sizeof text, "%s|%s|%s|%s;", n->ops->kind, n->name,
                                     n->params[p].name,
                                     kiln_shape_str(&n->params[p].shape, shape, sizeof shape));
            h = kiln_hash(h, text, len < (int)sizeof text ? (size_t)len : sizeof text - 1);
        }
    }
    return h;
}

uint64_t kiln_model_training_hash(const kiln_model *m)
{
    const kiln_optimizer_options *o = &m->plan.optimizer;
    const kiln_lr_schedule *schedule = &m->plan.lr_schedule;
    char text[1024];   /* %a: every float exactly */
    /* The ignore class and several outputs' losses and weights only when
     * set: other models hash as before. */
    char extra[32 + 48 * KILN_MAX_MODEL_OUTPUTS] = "";
    if (m->plan.heads[0].has_ignore)
        snprintf(extra, sizeof extra, "|ignore %d", (int)m->plan.heads[0].ignore);
    for (int32_t k = 0; k < kiln_model_outputs_apart(m); k++)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "|output %d %a",
                 (int)m->plan.heads[k].loss, (double)m->plan.head_weight[k]);
    /* The newer optimizers' settings and weight decay likewise. */
    char more[160] = "";
    if (o->weight_decay != 0.0f || o->kind > KILN_OPTIMIZER_SGD)
        snprintf(more, sizeof more, "|decay %a %d|rms %a %d|adagrad %a",
                 (double)o->weight_decay, (int)o->exclude_vectors_from_weight_decay,
                 (double)o->rho, (int)o->centered, (double)o->initial_accumulator_value);
    const int len =
        snprintf(text, sizeof text, "%d|%d|%a|%a|%d|%a|%a|%a|%d|%lld|%a|%a|%lld|%d%s%s",
                 (int)m->plan.heads[0].loss, (int)o->kind, o->learning_rate, o->momentum,
                 (int)o->nesterov, o->beta_1, o->beta_2, o->epsilon, (int)schedule->kind,
                 (long long)schedule->decay_steps, schedule->decay_rate, schedule->alpha,
                 (long long)schedule->warmup_steps, (int)m->plan.accumulation_steps, extra,
                 more);
    uint64_t h = kiln_hash(KILN_HASH_SEED, text,
                           len < (int)sizeof text ? (size_t)len : sizeof text - 1);
    /* Label smoothing, a warm-up target and piecewise values only when
     * set: other models hash as before. */
    for (int32_t k = 0; k < m->graph.n_outputs; k++)
        if (m->plan.heads[k].label_smoothing != 0.0f)
            h = kiln_hash(h, &m->plan.heads[k].label_smoothing, sizeof(float));
    if (schedule->has_warmup_target)
        h = kiln_hash(h, &schedule->warmup_target, sizeof schedule->warmup_target);
    if (schedule->kind == KILN_LR_PIECEWISE_CONSTANT_DECAY) {
        h = kiln_hash(h, schedule->boundaries,
                      (size_t)schedule->n_boundaries * sizeof *schedule->boundaries);
        h = kiln_hash(h, schedule->values, (size_t)schedule->n_values * sizeof *schedule->values);
    }
    if (o->clipnorm > 0.0f || o->clipvalue > 0.0f || o->global_clipnorm > 0.0f) {
        const float clip[] = {o->clipnorm, o->clipvalue, o->global_clipnorm};   /* likewise */
        h = kiln_hash(h, clip, sizeof clip);
    }
    return h;
}

kiln_status kiln_model_check_compiled(const kiln_model *m, const char *call)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!m->plan.compiled)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: compile the model first", call);
    return KILN_OK;
}

/* An accessor's way in: the model is compiled and no other call is inside
 * it (fit's callback may read the model it fits). Compile and fit write
 * what accessors read, so none may read from another thread meanwhile.
 * Leave with kiln_model_leave_reading(m, *entered), even after a failure. */
static kiln_status enter_compiled(const kiln_model *m, const char *call, int *entered)
{
    *entered = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    kiln_status st = kiln_model_enter_reading(m, call, entered);
    return st == KILN_OK ? kiln_model_check_compiled(m, call) : st;
}

kiln_status kiln_model_distribution(const kiln_model *m, const char **strategy,
                                    int32_t *replicas)
{
    int entered;
    kiln_status st = enter_compiled(m, "kiln_model_distribution", &entered);
    if (st == KILN_OK && strategy)
        *strategy = m->placement.strategy->name;
    if (st == KILN_OK && replicas)
        *replicas = m->placement.strategy->replica_count(m->placement.strategy_impl);
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_rank(const kiln_model *m, int32_t *rank, int32_t *count)
{
    int entered;
    kiln_status st = enter_compiled(m, "kiln_model_rank", &entered);
    if (st == KILN_OK && rank)
        *rank = m->placement.rank;
    if (st == KILN_OK && count)
        *count = m->placement.world > 0 ? m->placement.world : 1;
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_training_stats(const kiln_model *m, kiln_training_stats *stats)
{
    if (m && (!stats || stats->struct_size < sizeof *stats))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_training_stats: stats is NULL or its struct_size is not "
                          "sizeof(kiln_training_stats)");
    int entered;
    kiln_status st = enter_compiled(m, "kiln_model_training_stats", &entered);
    if (st != KILN_OK) {
        kiln_model_leave_reading(m, entered);
        return st;
    }
    kiln_strategy_stats counters;
    memset(&counters, 0, sizeof counters);
    if (m->placement.strategy->stats)
        m->placement.strategy->stats(m->placement.strategy_impl, &counters);
    stats->steps = m->training.timed_steps;
    stats->input_seconds = m->training.input_seconds;
    stats->step_seconds = m->training.step_seconds;
    stats->reductions = counters.reductions;
    stats->reduce_seconds = counters.reduce_seconds;
    stats->reduce_hidden_seconds = counters.hidden_seconds;
    stats->pipeline_bubble =
        counters.stage_seconds > 0 ? 1.0 - counters.busy_seconds / counters.stage_seconds : 0.0;
    stats->pipeline_stage_seconds = counters.stage_seconds;
    stats->max_staleness = counters.max_staleness;
    stats->max_lead = counters.max_lead;
    kiln_model_leave_reading(m, entered);
    return KILN_OK;
}

/* A count of a compiled model into `*out` (0 after a failure). */
static kiln_status read_count(const kiln_model *m, const int64_t *field, int64_t *out,
                              const char *call, const char *arg)
{
    if (out)
        *out = 0;
    if (m && !out)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", call, arg);
    int entered;
    const kiln_status st = enter_compiled(m, call, &entered);
    if (st == KILN_OK)
        *out = *field;
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_parameter_count(const kiln_model *m, int64_t *count)
{
    return read_count(m, m ? &m->plan.n_weights : NULL, count, "kiln_model_parameter_count",
                      "count");
}

kiln_status kiln_model_output_size(const kiln_model *m, int64_t *size)
{
    return read_count(m, m ? &m->plan.output_size : NULL, size, "kiln_model_output_size", "size");
}

/* Copies between the padded flat layout and the caller's packed array. */
static void pack(const kiln_model *m, float *flat, float *packed, int to_packed)
{
    int64_t at = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        for (int p = 0; p < node->n_params; p++) {
            const size_t bytes = (size_t)kiln_shape_size(&node->params[p].shape) * sizeof(float);
            if (to_packed)
                memcpy(packed + at, flat + node->param_offset[p], bytes);
            else
                memcpy(flat + node->param_offset[p], packed + at, bytes);
            at += (int64_t)(bytes / sizeof(float));
        }
    }
}

static kiln_status weights_io(kiln_model *m, float *weights, int64_t count, int get)
{
    const char *call = get ? "kiln_model_get_weights" : "kiln_model_set_weights";
    kiln_status st = kiln_model_check_compiled(m, call);
    if (st != KILN_OK)
        return st;
    if (!weights)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: weights is NULL", call);
    if (get && count < m->plan.n_weights)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: room for %lld floats given, the model has %lld parameters", call,
                          (long long)count, (long long)m->plan.n_weights);
    /* More floats than parameters is as likely a mistake as fewer. */
    if (!get && count != m->plan.n_weights)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: %lld floats given, the model has %lld parameters", call,
                          (long long)count, (long long)m->plan.n_weights);
    float *flat = kiln_calloc(m->ctx, m->plan.n_param_floats, sizeof(float));
    if (!flat)
        return kiln_error_oom(m->ctx, "a parameter copy", m->plan.n_param_floats * sizeof(float));
    if (get) {
        st = m->placement.strategy->get_params(m->placement.strategy_impl, flat);
        if (st == KILN_OK)
            pack(m, flat, weights, 1);
    } else {
        pack(m, flat, weights, 0);
        st = kiln_model_write_params(m, flat);
    }
    kiln_free(m->ctx, flat);
    return st;
}

static kiln_status get_weights_entered(kiln_model *m, float *weights, int64_t count)
{
    return weights_io(m, weights, count, 1);
}

kiln_status kiln_model_get_weights(kiln_model *m, float *weights, int64_t count)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_get_weights");
    if (st == KILN_OK) {
        st = get_weights_entered(m, weights, count);
        kiln_model_leave(m);
    }
    return st;
}

static kiln_status set_weights_entered(kiln_model *m, const float *weights, int64_t count)
{
    return weights_io(m, (float *)weights, count, 0);
}

kiln_status kiln_model_set_weights(kiln_model *m, const float *weights, int64_t count)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_set_weights");
    if (st == KILN_OK) {
        st = set_weights_entered(m, weights, count);
        kiln_model_leave(m);
    }
    return st;
}

double kiln_model_learning_rate(const kiln_model *m, int64_t step)
{
    return m->training.has_lr_override ? m->training.lr_override
                              : kiln_optimizer_learning_rate(&m->plan.optimizer, step);
}

void kiln_update_begin(kiln_update *u, const kiln_model *m)
{
    u->final_micro = u->micro + 1 >= m->plan.accumulation_steps;
    u->number = m->training.n_optimizer_steps + 1;
    u->lr = kiln_model_learning_rate(m, m->training.n_optimizer_steps);
}

void kiln_update_end(kiln_update *u, kiln_model *m, const double *sums)
{
    u->micro = u->final_micro ? 0 : u->micro + 1;
    if (u->final_micro && !kiln_sums_skipped(sums))
        m->training.n_optimizer_steps++;
}

static kiln_status enter(kiln_model *m, const char *call, int reading, int *entered)
{
    *entered = 0;
    kiln_diag *const me = kiln_diag_of_thread(&m->ctx->host);
    if (pthread_mutex_trylock(&m->busy) == 0) {
        __atomic_store_n(&m->busy_call, call, __ATOMIC_RELEASE);
        __atomic_store_n(&m->busy_thread, me, __ATOMIC_RELEASE);
        *entered = 1;
        return KILN_OK;
    }
    /* Only the thread inside can see its own token there: fit's callback. */
    if (reading && me && __atomic_load_n(&m->busy_thread, __ATOMIC_ACQUIRE) == me)
        return KILN_OK;
    const char *inside = __atomic_load_n(&m->busy_call, __ATOMIC_ACQUIRE);
    return kiln_error(m->ctx, KILN_ERROR_STATE, "%s: the model is in use by another call (%s); "
                      "a model takes one call at a time, and fit's callback may only read it",
                      call, inside ? inside : "starting");
}

kiln_status kiln_model_enter(kiln_model *m, const char *call)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;   /* no model to keep the message on */
    int entered;
    return enter(m, call, 0, &entered);
}

kiln_status kiln_model_enter_reading(const kiln_model *m, const char *call, int *entered)
{
    /* The lock guards the model; taking it changes none of its state. */
    return enter((kiln_model *)m, call, 1, entered);
}

void kiln_model_leave_reading(const kiln_model *m, int entered)
{
    if (entered)
        kiln_model_leave((kiln_model *)m);
}

void kiln_model_leave(kiln_model *m)
{
    __atomic_store_n(&m->busy_call, (const char *)NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&m->busy_thread, (kiln_diag *)NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&m->busy);
}
