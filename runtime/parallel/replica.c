#include "runtime/parallel/replica.h"

#include "comm/collective.h"
#include "runtime/parallel/half_storage.h"

#include "runtime/model/clip.h"
#include "runtime/model/loss.h"
#include "runtime/model/optimizer.h"

#include <stdio.h>
#include <string.h>

static void release_activations(kiln_replica *r)
{
    const kiln_model *m = r->model;
    kiln_half_release(r);
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        if (r->act[i] != r->out[i])
            kiln_buffer_destroy(r->act[i]);
        kiln_buffer_destroy(r->out[i]);
        kiln_buffer_destroy(r->grad[i]);
        r->act[i] = r->out[i] = r->grad[i] = NULL;
        if (r->state[i] && m->graph.nodes[i].ops->release)
            m->graph.nodes[i].ops->release(r->state[i]);
    }
    for (int k = 0; k < KILN_MAX_MODEL_OUTPUTS; k++) {
        struct kiln_replica_output *o = &r->outputs[k];
        kiln_buffer_destroy(o->labels);
        kiln_buffer_destroy(o->loss);
        kiln_buffer_destroy(o->correct);
        kiln_buffer_destroy(o->metric);
        memset(o, 0, sizeof *o);
    }
    r->capacity = 0;
    r->workspace_bytes = 0;
}

static uint64_t bytes_of(const kiln_buffer *b)
{
    return b ? kiln_buffer_bytes(b) : 0;
}

size_t kiln_replica_slot_floats(const kiln_replica *r, int slot)
{
    const kiln_optimizer_options *o = &r->model->plan.optimizer;
    return o->use_ema && slot == kiln_optimizer_ema_slot(o) ? r->n_floats : r->n_trainable;
}

void kiln_replica_memory(const kiln_replica *r, kiln_memory_report *o)
{
    const kiln_model *m = r->model;
    o->batch_capacity = r->capacity;
    o->parameter_bytes = o->gradient_bytes = o->optimizer_bytes = 0;
    if (!r->shared) {
        o->parameter_bytes = bytes_of(r->params);
        o->gradient_bytes = bytes_of(r->grads) + bytes_of(r->accum) + kiln_clip_bytes(r->clip);
        for (int s = 0; s < KILN_MAX_OPTIMIZER_SLOTS; s++)
            o->optimizer_bytes += bytes_of(r->slots[s]);
    }
    o->activation_bytes = bytes_of(r->sums);
    for (int k = 0; k < KILN_MAX_MODEL_OUTPUTS; k++) {
        const struct kiln_replica_output *out = &r->outputs[k];
        o->activation_bytes += bytes_of(out->labels) + bytes_of(out->loss) +
                               bytes_of(out->correct) + bytes_of(out->metric);
    }
    o->activation_bytes += kiln_half_bytes(r);
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        if (kiln_half_pinned(r, i))   /* the others' buffers are the pool's */
            o->activation_bytes += bytes_of(r->out[i]) + bytes_of(r->grad[i]) +
                                   (r->act[i] != r->out[i] ? bytes_of(r->act[i]) : 0);
    o->workspace_bytes = r->workspace_bytes;
    size_t now, peak;
    kiln_device_memory(r->dev, &now, &peak);
    o->device_bytes = now;
    o->device_peak_bytes = peak;
}

static int in_span(const kiln_replica *r, kiln_node i)
{
    return i >= r->span.first && i <= r->span.last;
}

/* The replica's tables: which nodes it holds, where their parameters sit in
 * its buffers, and each layer's state, with the kernels it launches. */
static kiln_status make_tables(kiln_replica *r)
{
    const kiln_model *m = r->model;
    kiln_context *ctx = m->ctx;
    const kiln_stage_span *sp = &r->span;
    const size_t n = (size_t)m->graph.n_nodes;
    r->n_trainable = sp->trainable_end - sp->trainable_begin;
    r->n_floats = r->n_trainable + sp->state_end - sp->state_begin + sp->frozen_end -
                  sp->frozen_begin;
    r->out = kiln_calloc(ctx, n, sizeof *r->out);
    r->act = kiln_calloc(ctx, n, sizeof *r->act);
    r->grad = kiln_calloc(ctx, n, sizeof *r->grad);
    r->state = kiln_calloc(ctx, n, sizeof *r->state);
    r->written = kiln_calloc(ctx, n, 1);
    r->present = kiln_calloc(ctx, n, 1);
    r->offsets = kiln_calloc(ctx, n * KILN_MAX_PARAMS, sizeof *r->offsets);
    if (!r->out || !r->act || !r->grad || !r->state || !r->written || !r->present ||
        !r->offsets)
        return kiln_error_oom(ctx, "replica tables", n * sizeof(void *));
    for (kiln_node i = sp->first; i <= sp->last; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!node->on_path)
            continue;
        r->present[i] = 1;
        for (int k = 0; k < node->n_inputs; k++)
            r->present[node->inputs[k]] = 1;
        for (int p = 0; p < node->n_params; p++) {
            const size_t off = node->param_offset[p];
            const size_t state = sp->state_end - sp->state_begin;
            r->offsets[(size_t)i * KILN_MAX_PARAMS + (size_t)p] =
                off < m->plan.n_trainable_floats ? off - sp->trainable_begin
                : sp->frozen_end == sp->frozen_begin || off < sp->frozen_begin
                    ? r->n_trainable + off - sp->state_begin
                    : r->n_trainable + state + off - sp->frozen_begin;
        }
        const size_t size = node->ops->replica_size;
        if (size && !(r->state[i] = kiln_calloc(ctx, 1, size)))
            return kiln_error_oom(ctx, "layer state", size);
        if (node->ops->kernels) {
            kiln_status st = node->ops->kernels(node->config, r->state[i], r->dev);
            if (st != KILN_OK)
                return kiln_fail_within(&ctx->host, st, "layer '%s'", node->name);
        }
    }
    return KILN_OK;
}

static kiln_replica *replica_new(const kiln_model *m, kiln_device *dev,
                                 const kiln_stage_span *span)
{
    kiln_replica *r = kiln_calloc(m->ctx, 1, sizeof *r);
    if (!r)
        return NULL;
    r->model = m;
    r->dev = dev;
    r->span = *span;
    r->role = "replica";
    r->stage_node = -1;
    r->stage_phase = KILN_PHASE_IDLE;
    pthread_mutex_init(&r->stage_lock, NULL);
    return r;
}

/* Zeroed: the slots of metrics that are not computed stay 0. */
static kiln_status create_sums(kiln_replica *r)
{
    const size_t bytes = KILN_N_SUMS * sizeof(float);
    kiln_status st = kiln_buffer_create(r->dev, bytes, "loss sums", &r->sums);
    return st == KILN_OK ? kiln_buffer_zero(r->dev, r->sums, 0, bytes) : st;
}

kiln_status kiln_replica_create(const kiln_model *m, kiln_device *dev, kiln_replica **out)
{
    const kiln_stage_span whole = {
        .first = 0, .last = m->graph.n_nodes - 1, .trainable_begin = 0,
        .trainable_end = m->plan.n_trainable_floats, .state_begin = m->plan.n_trainable_floats,
        .state_end = m->plan.n_param_floats, .accumulate = m->plan.accumulation_steps > 1};
    return kiln_replica_create_stage(m, dev, &whole, out);
}

kiln_status kiln_replica_create_view(const kiln_replica *base, kiln_replica **out)
{
    const kiln_model *m = base->model;
    *out = NULL;
    kiln_replica *r = replica_new(m, base->dev, &base->span);
    if (!r)
        return kiln_error_oom(m->ctx, "a replica", sizeof *r);
    r->shared = 1;
    r->params = base->params;
    r->grads = base->grads;
    r->n_grad_floats = base->n_grad_floats;
    r->accum = base->accum;
    memcpy(r->slots, base->slots, sizeof r->slots);
    r->index = base->index;
    kiln_status st = make_tables(r);
    if (st == KILN_OK)
        st = create_sums(r);
    if (st != KILN_OK) {
        kiln_replica_destroy(r);
        return st;
    }
    *out = r;
    return KILN_OK;
}

/* How far backward writes into the gradient buffer: the trainable prefix,
 * and the frozen weights of kinds that may still write their gradients
 * where their backward runs (not in a frozen prefix: needs_gradient). */
static size_t gradient_floats(const kiln_replica *r)
{
    const kiln_model *m = r->model;
    size_t end = r->n_trainable;
    for (kiln_node i = r->span.first; i <= r->span.last; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!node->on_path || !node->needs_gradient ||
            node->ops->writes_trainable_gradients_only)
            continue;
        for (int p = 0; p < node->n_params; p++) {
            const size_t size = (size_t)kiln_shape_size(&node->params[p].shape);
            const size_t at = r->offsets[(size_t)i * KILN_MAX_PARAMS + (size_t)p] + size;
            end = at > end ? at : end;
        }
    }
    return end;
}

kiln_status kiln_replica_create_stage(const kiln_model *m, kiln_device *dev,
                                      const kiln_stage_span *span, kiln_replica **out)
{
    kiln_context *ctx = m->ctx;
    *out = NULL;
    kiln_replica *r = replica_new(m, dev, span);
    if (!r)
        return kiln_error_oom(ctx, "a replica", sizeof *r);
    kiln_status st = make_tables(r);
    if (st != KILN_OK)
        goto fail;
    const size_t bytes = (r->n_floats ? r->n_floats : 1) * sizeof(float);
    r->n_grad_floats = gradient_floats(r);
    const size_t grad_bytes = (r->n_grad_floats ? r->n_grad_floats : 1) * sizeof(float);
    const size_t accum_bytes = (r->n_trainable ? r->n_trainable : 1) * sizeof(float);
    st = kiln_buffer_create(dev, bytes, "parameters", &r->params);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, grad_bytes, "gradients", &r->grads);
    if (st == KILN_OK)
        st = kiln_buffer_zero(dev, r->grads, 0, grad_bytes);
    for (int s = 0; st == KILN_OK && s < kiln_optimizer_slot_count(&m->plan.optimizer); s++) {
        const size_t floats = kiln_replica_slot_floats(r, s);
        const size_t slot_bytes = (floats ? floats : 1) * sizeof(float);
        st = kiln_buffer_create(dev, slot_bytes, "optimizer state", &r->slots[s]);
        if (st == KILN_OK)
            st = kiln_buffer_zero(dev, r->slots[s], 0, slot_bytes);
    }
    if (st == KILN_OK)
        st = create_sums(r);
    if (st == KILN_OK && span->accumulate)
        st = kiln_buffer_create(dev, accum_bytes, "accumulated gradients", &r->accum);
    if (st == KILN_OK && r->accum)
        st = kiln_buffer_zero(dev, r->accum, 0, accum_bytes);
    if (st == KILN_OK)
        st = kiln_clip_create(m, dev, span->trainable_begin, span->trainable_end, &r->clip);
    if (st != KILN_OK)
        goto fail;
    *out = r;
    return KILN_OK;
fail:
    kiln_replica_destroy(r);
    return st;
}

void kiln_replica_destroy(kiln_replica *r)
{
    if (!r)
        return;
    kiln_context *ctx = r->model->ctx;
    if (r->out && r->act && r->grad && r->state)
        release_activations(r);
    for (int32_t i = 0; r->state && i < r->model->graph.n_nodes; i++)
        kiln_free(ctx, r->state[i]);
    if (!r->shared) {
        kiln_buffer_destroy(r->params);
        kiln_buffer_destroy(r->grads);
        for (int s = 0; s < KILN_MAX_OPTIMIZER_SLOTS; s++)
            kiln_buffer_destroy(r->slots[s]);
        kiln_buffer_destroy(r->accum);
        kiln_clip_destroy(r->clip);
    }
    kiln_buffer_destroy(r->sums);
    pthread_mutex_destroy(&r->stage_lock);
    kiln_free(ctx, r->out);
    kiln_free(ctx, r->act);
    kiln_free(ctx, r->grad);
    kiln_free(ctx, r->state);
    kiln_free(ctx, r->written);
    kiln_free(ctx, r->present);
    kiln_free(ctx, r->offsets);
    kiln_free(ctx, r);
}

void kiln_replica_release(kiln_replica *r)
{
    release_activations(r);
}

/* Each output's loss buffers, where this replica or stage holds the output. */
static kiln_status reserve_outputs(kiln_replica *r, int32_t n)
{
    const kiln_model *m = r->model;
    kiln_status st = KILN_OK;
    for (int32_t k = 0; k < m->graph.n_outputs && st == KILN_OK; k++) {
        const kiln_loss_plan *plan = &m->plan.heads[k];
        struct kiln_replica_output *o = &r->outputs[k];
        const size_t rows = (size_t)n * (size_t)plan->positions;
        if (!in_span(r, m->graph.outputs[k]))   /* another pipeline stage's */
            continue;
        st = kiln_buffer_create(r->dev, (size_t)n * kiln_loss_label_bytes(plan), "labels",
                                &o->labels);
        if (st == KILN_OK)
            st = kiln_buffer_create(r->dev, rows * sizeof(float), "losses", &o->loss);
        if (st == KILN_OK)
            st = kiln_buffer_create(r->dev, rows * sizeof(float), "metrics", &o->correct);
        if (st == KILN_OK && kiln_metric_count(plan) > 0)
            st = kiln_buffer_create(r->dev, rows * KILN_METRIC_COLUMNS * sizeof(float),
                                    "metrics", &o->metric);
    }
    return st;
}

/* Node i's own float32 buffers: its output, its post-activation values
 * where they are a buffer of their own, and its gradient. */
static kiln_status create_node_buffers(kiln_replica *r, kiln_node i, int32_t n)
{
    const kiln_model *m = r->model;
    const kiln_node_rec *node = &m->graph.nodes[i];
    const size_t bytes = (size_t)n * (size_t)kiln_shape_size(&node->shape) * sizeof(float);
    kiln_status st = kiln_buffer_create(r->dev, bytes, node->name, &r->out[i]);
    r->act[i] = r->out[i];
    if (st == KILN_OK && in_span(r, i) && node->activation != KILN_ACTIVATION_LINEAR &&
        !kiln_node_fuses_activation(m, i))
        st = kiln_buffer_create(r->dev, bytes, node->name, &r->act[i]);
    /* Another stage's output too: its gradient goes back there. An output
     * always has one (the loss writes it). */
    if (st == KILN_OK && !kiln_node_is_input(m, i) &&
        (node->needs_gradient || kiln_model_output_index(m, i) >= 0))
        st = kiln_buffer_create(r->dev, bytes, node->name, &r->grad[i]);
    return st;
}

kiln_status kiln_replica_reserve(kiln_replica *r, int32_t n)
{
    if (n <= r->capacity)
        return KILN_OK;
    const kiln_model *m = r->model;
    release_activations(r);
    kiln_status st = kiln_half_reserve(r, n);
    for (int32_t i = 0; i < m->graph.n_nodes && st == KILN_OK; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!r->present[i])
            continue;
        if (kiln_half_pinned(r, i))   /* else its buffers are the half storage pool's */
            st = create_node_buffers(r, i, n);
        if (st == KILN_OK && in_span(r, i) && node->ops->prepare) {
            size_t before, after;
            kiln_device_memory(r->dev, &before, NULL);
            st = node->ops->prepare(node->config, r->state[i], r->dev,
                                    &m->graph.nodes[node->inputs[0]].shape, n);
            kiln_device_memory(r->dev, &after, NULL);
            r->workspace_bytes += after - before;
        }
    }
    if (st == KILN_OK)
        st = reserve_outputs(r, n);
    if (st != KILN_OK) {
        release_activations(r);
        return st;
    }
    r->capacity = n;
    return KILN_OK;
}

static const char *const phase_names[] = {
    [KILN_PHASE_IDLE] = "idle",
    [KILN_PHASE_UPLOAD] = "uploading its batch",
    [KILN_PHASE_FORWARD] = "forward",
    [KILN_PHASE_BACKWARD] = "backward",
    [KILN_PHASE_AFTER_BACKWARD] = "after backward",
};

static void set_stage(kiln_replica *r, kiln_node node, kiln_replica_phase phase)
{
    pthread_mutex_lock(&r->stage_lock);
    r->stage_node = node;
    r->stage_phase = phase;
    pthread_mutex_unlock(&r->stage_lock);
}

kiln_status kiln_replica_upload(kiln_replica *r, const kiln_batch *b)
{
    const kiln_model *m = r->model;
    set_stage(r, -1, KILN_PHASE_UPLOAD);
    kiln_status st = kiln_replica_reserve(r, b->n);
    if (st != KILN_OK)
        return st;
    /* Each input's rows are strided in the host batch (a sample holds every
     * input's values); a stage uploads only the inputs it reads. */
    for (int32_t k = 0; k < m->graph.n_inputs && st == KILN_OK; k++) {
        kiln_buffer *dst = r->act[m->graph.inputs[k]];
        const size_t row = (size_t)kiln_node_size(m, m->graph.inputs[k]) * sizeof(float);
        if (!dst || !b->features)
            continue;
        st =
            kiln_buffer_write_rows(r->dev, dst, b->features + m->graph.input_offset[k],
                                   (size_t)b->n, row, (size_t)m->graph.sample_size * sizeof(float));
    }
    if (st != KILN_OK || !b->labels)
        return st;
    /* A sample's labels hold every output's, one after another. */
    for (int32_t k = 0; k < m->graph.n_outputs && st == KILN_OK; k++)
        if (r->outputs[k].labels)   /* not on a pipeline stage without the output */
            st = kiln_buffer_write_rows(r->dev, r->outputs[k].labels,
                                        (const int32_t *)b->labels + m->plan.head_label_offset[k],
                                        (size_t)b->n, kiln_loss_label_bytes(&m->plan.heads[k]),
                                        kiln_model_label_bytes(m));
    return st;
}

kiln_replica_phase kiln_replica_phase_now(kiln_replica *r)
{
    pthread_mutex_lock(&r->stage_lock);
    const kiln_replica_phase phase = r->stage_phase;
    pthread_mutex_unlock(&r->stage_lock);
    return phase;
}

void kiln_replica_describe(kiln_replica *r, char *buf, size_t size)
{
    pthread_mutex_lock(&r->stage_lock);
    const kiln_node node = r->stage_node;
    const char *phase = phase_names[r->stage_phase];
    pthread_mutex_unlock(&r->stage_lock);
    if (node >= 0)
        snprintf(buf, size, "%s %d on %s, layer '%s' (%s)", r->role, r->index,
                 kiln_device_label(r->dev), r->model->graph.nodes[node].name, phase);
    else
        snprintf(buf, size, "%s %d on %s (%s)", r->role, r->index, kiln_device_label(r->dev),
                 phase);
}

/* The step a layer sees for node i. */
/* kiln_step.sum_replicas for replicas whose step has a collective. */
static kiln_status sum_over_replicas(void *user, double *values, size_t n)
{
    const kiln_replica *r = user;
    return kiln_collective_sum(r->collective, r->member, values, n);
}

static void make_step(kiln_replica *r, int32_t i, int32_t n, int training, kiln_step *s,
                      kiln_buffer **in, kiln_shape *in_shape, kiln_buffer **d_in, int *acc)
{
    const kiln_model *m = r->model;
    const kiln_node_rec *node = &m->graph.nodes[i];
    for (int k = 0; k < node->n_inputs; k++) {
        const kiln_node j = node->inputs[k];
        in[k] = r->act[j];
        in_shape[k] = m->graph.nodes[j].shape;
        d_in[k] = m->graph.nodes[j].needs_gradient ? r->grad[j] : NULL;
        acc[k] = 0;
    }
    memset(s, 0, sizeof *s);
    s->dev = r->dev;
    s->batch = n;
    s->training = training;
    s->frozen = node->frozen;
    s->in_shape = in_shape;
    s->n_in = node->n_inputs;
    s->out_shape = &node->shape;
    s->in = in;
    s->out = r->out[i];
    s->activation = kiln_node_fuses_activation(m, i) ? node->activation : KILN_ACTIVATION_LINEAR;
    s->params = r->params;
    s->grads = r->grads;
    s->param_offset = r->offsets + (size_t)i * KILN_MAX_PARAMS;
    s->d_out = r->grad[i];
    s->d_in = d_in;
    s->d_in_accumulate = acc;
    s->sum_replicas = r->collective ? sum_over_replicas : NULL;
    s->sum_replicas_user = r;
    s->seed = r->model->ctx->seed;
    s->step_number = r->step_number;
    s->first_sample = r->first_sample;
}

int kiln_node_fuses_activation(const kiln_model *m, kiln_node i)
{
    const kiln_node_rec *node = &m->graph.nodes[i];
    const kiln_activation a = node->activation;
    return a != KILN_ACTIVATION_LINEAR && a != KILN_ACTIVATION_SOFTMAX &&
           a != KILN_ACTIVATION_LOG_SOFTMAX &&
           !kiln_activation_needs_input(a) && kiln_model_output_index(m, i) < 0 &&
           node->ops->fuses_activation && node->ops->fuses_activation(node->config);
}

kiln_status kiln_replica_forward(kiln_replica *r, int32_t n, int training)
{
    const kiln_model *m = r->model;
    kiln_buffer *in[KILN_MAX_INPUTS], *d_in[KILN_MAX_INPUTS];
    kiln_shape in_shape[KILN_MAX_INPUTS];
    int acc[KILN_MAX_INPUTS];
    for (int32_t i = r->span.first; i <= r->span.last; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (!node->on_path || kiln_node_is_input(m, i))
            continue;
        set_stage(r, i, KILN_PHASE_FORWARD);
        kiln_half_before_forward(r, i);
        kiln_step s;
        make_step(r, i, n, training, &s, in, in_shape, d_in, acc);
        kiln_status st = node->ops->forward(node->config, r->state[i], &s);
        if (st == KILN_OK && node->activation != KILN_ACTIVATION_LINEAR &&
            s.activation == KILN_ACTIVATION_LINEAR) {   /* the layer did not apply it */
            const size_t cols = (size_t)node->shape.dims[node->shape.rank - 1];
            const size_t rows = (size_t)n * (size_t)kiln_shape_size(&node->shape) / cols;
            st = kiln_activation_forward(r->dev, node->activation, r->out[i], r->act[i], rows,
                                         cols);
        }
        if (st == KILN_OK)
            st = kiln_half_after_forward(r, i, n);
        if (st != KILN_OK)
            return st;
    }
    return KILN_OK;
}

/* Each output's loss, its gradient scaled by `scale` times the output's
 * share of the total (kiln_loss_plan.head_scale), and its metrics. An
 * output whose sums have slots of their own (one of several) then adds its
 * share to the total in the sums' first slots, which the optimizer's guard
 * reads; a model's only output sums into those slots directly. */
kiln_status kiln_replica_loss(kiln_replica *r, int32_t n, float scale)
{
    const kiln_model *m = r->model;
    kiln_status st = KILN_OK;
    for (int32_t k = 0; k < m->graph.n_outputs && st == KILN_OK; k++) {
        const kiln_loss_plan *plan = &m->plan.heads[k];
        const struct kiln_replica_output *o = &r->outputs[k];
        const kiln_node node = m->graph.outputs[k];
        st = kiln_loss_enqueue(r->dev, plan, r->out[node], r->act[node], o->labels,
                               r->grad[node], o->loss, o->correct, r->sums, n,
                               scale * plan->head_scale);
        if (st == KILN_OK && o->metric)
            st = kiln_metric_enqueue(r->dev, plan, r->act[node], o->labels, o->metric, r->sums,
                                     n);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(r->sums), kiln_arg_int(plan->sums_at),
                                kiln_arg_float(plan->head_scale), kiln_arg_int(k == 0));
        if (st == KILN_OK && plan->sums_at > 0)
            st = kiln_run1(r->dev, "loss", "kiln_loss_head_total", 1, a);
    }
    return st;
}

/* Node i's backward pass: its activation's, then its layer's. */
static kiln_status backward_node(kiln_replica *r, kiln_node i, int32_t n)
{
    const kiln_model *m = r->model;
    const kiln_node_rec *node = &m->graph.nodes[i];
    kiln_buffer *in[KILN_MAX_INPUTS], *d_in[KILN_MAX_INPUTS];
    kiln_shape in_shape[KILN_MAX_INPUTS];
    int acc[KILN_MAX_INPUTS];
    const kiln_loss_plan *plan = kiln_model_output_plan(m, i);
    kiln_status st = KILN_OK;
    if (node->activation != KILN_ACTIVATION_LINEAR && !(plan && plan->fused)) {
        const size_t cols = (size_t)node->shape.dims[node->shape.rank - 1];
        const size_t rows = (size_t)n * (size_t)kiln_shape_size(&node->shape) / cols;
        st = kiln_activation_backward(r->dev, node->activation, r->out[i], r->act[i],
                                      r->grad[i], rows, cols);
    }
    kiln_step s;
    make_step(r, i, n, 1, &s, in, in_shape, d_in, acc);
    /* The first consumer to reach a node writes its gradient; later ones add. */
    for (int k = 0; k < node->n_inputs; k++) {
        const kiln_node j = node->inputs[k];
        acc[k] = r->written[j];
        r->written[j] = 1;
    }
    if (st == KILN_OK)
        st = node->ops->backward(node->config, r->state[i], &s);
    return st;
}

kiln_status kiln_replica_backward(kiln_replica *r, int32_t n, kiln_backward_hook hook,
                                  void *user)
{
    const kiln_model *m = r->model;
    kiln_status st = KILN_OK;
    for (int32_t i = r->span.last; i >= r->span.first && st == KILN_OK; i--) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        if (node->on_path && !kiln_node_is_input(m, i)) {
            set_stage(r, i, KILN_PHASE_BACKWARD);
            /* Even where i runs no backward: another reader of its inputs
             * may need them back from half. */
            st = kiln_half_before_backward(r, i, n);
            /* Nothing trainable at or before i: no backward at all. */
            if (st == KILN_OK && node->needs_gradient)
                st = backward_node(r, i, n);
        }
        if (st == KILN_OK && hook)
            st = hook(user, i);
    }
    memset(r->written, 0, (size_t)m->graph.n_nodes);  /* the next pass starts clean */
    if (st == KILN_OK)
        set_stage(r, -1, KILN_PHASE_AFTER_BACKWARD);
    return st;
}

void kiln_replica_mark_gradient(kiln_replica *r, kiln_node j)
{
    r->written[j] = 1;
}

kiln_status kiln_replica_accumulate(kiln_replica *r, size_t offset, size_t n, int final,
                                    float scale)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(r->accum), kiln_arg_buffer(r->grads),
                            kiln_arg_int((int64_t)offset), kiln_arg_int((int64_t)n),
                            kiln_arg_int(final), kiln_arg_float(scale));
    return kiln_run1(r->dev, "gradients", "kiln_gradients_accumulate", n, a);
}

kiln_status kiln_replica_read_sums(kiln_replica *r, double *sums)
{
    float host[KILN_N_SUMS];
    kiln_status st = kiln_buffer_read(r->dev, r->sums, 0, host, sizeof host);
    if (st == KILN_OK)
        st = kiln_half_check(r);
    if (st != KILN_OK)
        return st;
    for (int k = 0; k < KILN_N_SUMS; k++)
        sums[k] = host[k];
    return KILN_OK;
}

kiln_status kiln_replica_read_output(kiln_replica *r, int32_t n, float *host)
{
    const kiln_model *m = r->model;
    /* A sample's outputs one after another, as its inputs. */
    int64_t at = 0;
    kiln_status st = KILN_OK;
    for (int32_t k = 0; k < m->graph.n_outputs && st == KILN_OK; k++) {
        const int64_t size = kiln_node_size(m, m->graph.outputs[k]);
        st = kiln_buffer_read_rows(r->dev, r->act[m->graph.outputs[k]], host + at, (size_t)n,
                                   (size_t)size * sizeof(float),
                                   (size_t)m->plan.output_size * sizeof(float));
        at += size;
    }
    return st == KILN_OK ? kiln_half_check(r) : st;
}

kiln_status kiln_replica_read_params(kiln_replica *r, float *flat)
{
    return kiln_buffer_read(r->dev, r->params, 0, flat, r->n_floats * sizeof(float));
}

kiln_status kiln_replica_write_params(kiln_replica *r, const float *flat)
{
    return kiln_buffer_write(r->dev, r->params, 0, flat, r->n_floats * sizeof(float), 1);
}

/* Public: what a compiled model's replica holds on its device. */
kiln_status kiln_model_memory(const kiln_model *m, int32_t replica, kiln_memory_report *report)
{
    kiln_status st = kiln_model_check_compiled(m, "kiln_model_memory");
    if (st != KILN_OK)
        return st;
    const int32_t n = m->placement.strategy->replica_count(m->placement.strategy_impl);
    if (!report || report->struct_size < sizeof *report || replica < 0 || replica >= n)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_memory: replica %d of %d, or a report that is NULL or "
                          "whose struct_size is not sizeof(kiln_memory_report)",
                          (int)replica, (int)n);
    int entered;
    st = kiln_model_enter_reading(m, "kiln_model_memory", &entered);
    if (st != KILN_OK)
        return st;
    const kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, replica);
    report->device = -1;
    for (int32_t d = 0; d < m->ctx->n_devices; d++)
        if (m->ctx->devices[d] == r->dev)
            report->device = d;
    if (m->placement.strategy->memory)
        m->placement.strategy->memory(m->placement.strategy_impl, replica, report);
    else
        kiln_replica_memory(r, report);
    kiln_model_leave_reading(m, entered);
    return KILN_OK;
}
