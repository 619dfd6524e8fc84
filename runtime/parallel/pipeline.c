/* The pipeline strategy (model parallelism): the layers are split into
 * contiguous stages (runtime/parallel/partition.c), one per device, each driven by
 * its own worker thread. A global batch is cut into micro-batches that
 * flow through the stages: stage s runs forward (F) on micro-batch m as
 * soon as the stages before it have sent m's activations, and backward (B)
 * as soon as the stages after it have sent m's gradients, so the stages
 * work at once. Activations and gradients crossing stages go through host
 * rows (one per edge: a node read by a later stage), written by the
 * sending stage's thread and waited for by the receiving one; a skip
 * connection across several stages is just another edge.
 *
 * Schedules: GPipe (all F, then all B in reverse) keeps every
 * micro-batch's activations; 1F1B (S - s - 1 warm-up forwards, then F and B
 * alternating) keeps at most S - s, so each stage has that many activation
 * sets (replica views sharing the stage's parameters). Parameter gradients
 * accumulate over the micro-batches; each stage then applies the
 * optimizer to its own parameters, once every stage has said whether its
 * gradients and the update they make were finite and the last stage
 * whether the loss was: all stages apply the update or none does. With
 * global_clipnorm, the stages first exchange their gradients' squared
 * norms, so each clips by the whole model's (clip_stage). */
#include "runtime/parallel/first_run.h"
#include "runtime/model/clip.h"
#include "runtime/model/loss.h"
#include "runtime/parallel/partition.h"
#include "runtime/model/optimizer.h"
#include "runtime/context/text.h"
#include "runtime/parallel/crew.h"
#include "runtime/parallel/half_storage.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


typedef enum pp_job { PP_TRAIN, PP_EVAL, PP_PREDICT } pp_job;

typedef struct pp pp;

/* Node `node`, computed by stage `from`, read by stage `to`. */
typedef struct pp_edge {
    kiln_node node;
    int32_t from, to;
    size_t width;                 /* floats per sample */
    float *act, *grad;            /* rows of the global batch */
    int64_t *act_ready, *grad_ready;  /* per micro-batch: the pass that filled it */
} pp_edge;

typedef struct pp_stage {
    pp *owner;
    int32_t index;
    kiln_stage_plan plan;
    kiln_replica **views;         /* views[0] owns the parameters */
    int32_t n_views;
    float *scratch;               /* summing gradients from several stages */
    double wait_seconds;          /* this pass */
    double sums[KILN_N_SUMS];
    double squares;               /* global_clipnorm: its gradient's squared norm */
} pp_stage;

struct pp {
    kiln_model *m;
    pp_stage *stages;
    int32_t n;
    pp_edge *edges;
    int32_t n_edges;
    int32_t max_micro;            /* micro-batches asked for */
    int32_t capacity;             /* samples the host rows hold */
    int32_t micro_capacity;       /* samples each activation set holds */
    /* the current pass */
    pp_job job;
    kiln_batch batch;             /* points into the copies below */
    /* The pass's batch and outputs in the strategy's own memory: a stage
     * still running after the watchdog gave up must not touch the caller's. */
    float *features, *outputs;
    void *labels;
    int32_t n_micro;
    int32_t *start, *count;       /* per micro-batch */
    float scale;
    kiln_update update;           /* the step's place in its accumulation cycle */
    int64_t pass;
    int64_t verdict_pass;         /* every stage's verdict is in */
    int finite;                   /* the loss and every stage's gradients */
    int update_finite;            /* every stage's update, checked before it is made */
    int32_t verdicts;             /* stages that gave theirs this pass */
    int64_t squares_pass;         /* global_clipnorm: every stage's squares are in */
    int32_t squared;              /* stages that gave theirs this pass */
    int abort;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    kiln_crew *crew;              /* a thread per stage */
    int serial;                   /* this pass runs one stage at a time */
    kiln_shape_log seen[3];       /* per job: micro-batch sizes run before */
    kiln_strategy_stats stats;
};

static int32_t view_of(const pp_stage *stage, int32_t micro)
{
    return micro % stage->n_views;
}

static int is_last(const pp_stage *stage)
{
    return stage->index == stage->owner->n - 1;
}

static kiln_status stage_failed(pp_stage *stage, kiln_replica *v, kiln_status status)
{
    pp *p = stage->owner;
    /* Into this stage thread's own diagnostics; the caller copies the
     * culprit's. */
    if (status == KILN_ERROR_STOPPED) {
        kiln_error(p->m->ctx, status, "stage %d: the step was abandoned because another stage "
                   "failed", (int)stage->index);
    } else {
        char where[320];
        kiln_replica_describe(v, where, sizeof where);
        kiln_fail_within(&p->m->ctx->host, status, "pipeline %s", where);
    }
    pthread_mutex_lock(&p->lock);
    p->abort = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return status;
}

/* Waits until *stamp reaches this pass, counting the time as waiting. */
static kiln_status wait_for(pp_stage *stage, const int64_t *stamp)
{
    pp *p = stage->owner;
    const double t0 = kiln_now();
    pthread_mutex_lock(&p->lock);
    while (*stamp != p->pass && !p->abort)
        pthread_cond_wait(&p->cond, &p->lock);
    const int aborted = p->abort;
    pthread_mutex_unlock(&p->lock);
    stage->wait_seconds += kiln_now() - t0;
    return aborted ? KILN_ERROR_STOPPED : KILN_OK;
}

static int aborted(pp *p)
{
    pthread_mutex_lock(&p->lock);
    const int a = p->abort;
    pthread_mutex_unlock(&p->lock);
    return a;
}

static void post(pp *p, int64_t *stamp)
{
    pthread_mutex_lock(&p->lock);
    *stamp = p->pass;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* A pass with a micro-batch size not run before computes one stage at a
 * time (runtime/parallel/first_run.h). */
static void enter(pp *p)
{
    kiln_first_run_enter(p->serial);
}

static void leave(pp *p)
{
    kiln_first_run_leave(p->serial);
}

static kiln_status forward_micro(pp_stage *stage, int32_t mb)
{
    pp *p = stage->owner;
    kiln_model *m = p->m;
    kiln_replica *v = stage->views[view_of(stage, mb)];
    const int32_t start = p->start[mb], n = p->count[mb];
    kiln_status st = KILN_OK;
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++)
        if (p->edges[e].to == stage->index)
            st = wait_for(stage, &p->edges[e].act_ready[mb]);
    enter(p);
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++) {
        pp_edge *edge = &p->edges[e];
        if (edge->to == stage->index)
            st = kiln_buffer_write(v->dev, v->act[edge->node], 0,
                                   edge->act + (size_t)start * edge->width,
                                   (size_t)n * edge->width * sizeof(float), 0);
    }
    const int64_t in = m->graph.sample_size, out = m->plan.output_size;
    const size_t label_bytes = kiln_model_label_bytes(m);
    const kiln_batch part = {
        .n = n, .features = p->batch.features + (size_t)start * (size_t)in,
        .labels = p->batch.labels ? (const char *)p->batch.labels + (size_t)start * label_bytes
                                  : NULL};
    v->first_sample = start;
    v->step_number = m->training.n_train_steps;
    if (st == KILN_OK)
        st = kiln_replica_upload(v, &part);
    if (st == KILN_OK)
        st = kiln_replica_forward(v, n, p->job == PP_TRAIN);
    if (st == KILN_OK && is_last(stage) && p->job != PP_PREDICT) {
        double sums[KILN_N_SUMS];
        st = kiln_replica_loss(v, n, p->job == PP_TRAIN ? p->scale : 1.0f);
        if (st == KILN_OK)
            st = kiln_replica_read_sums(v, sums);
        if (st == KILN_OK)
            kiln_sums_add(stage->sums, sums);
    } else if (st == KILN_OK && is_last(stage)) {
        st = kiln_replica_read_output(v, n, p->outputs + (size_t)start * (size_t)out);
    }
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++) {
        pp_edge *edge = &p->edges[e];
        if (edge->from == stage->index)
            st = kiln_buffer_read(v->dev, v->act[edge->node], 0,
                                  edge->act + (size_t)start * edge->width,
                                  (size_t)n * edge->width * sizeof(float));
    }
    /* A stage before the last reads no sums: its outputs beyond half's range here. */
    if (st == KILN_OK && !is_last(stage))
        st = kiln_half_check(v);
    leave(p);
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++)
        if (p->edges[e].from == stage->index)
            post(p, &p->edges[e].act_ready[mb]);
    return st == KILN_OK ? KILN_OK : stage_failed(stage, v, st);
}

/* The gradient of node j from every later stage that reads it, summed in
 * edge order, into the activation set's grad[j]. */
static kiln_status receive_gradient(pp_stage *stage, kiln_replica *v, kiln_node j, int32_t mb)
{
    pp *p = stage->owner;
    if (!p->m->graph.nodes[j].needs_gradient)   /* nothing trainable at or before it */
        return KILN_OK;
    const int32_t start = p->start[mb], n = p->count[mb];
    const float *src = NULL;
    size_t width = 0;
    int senders = 0;
    for (int32_t e = 0; e < p->n_edges; e++) {
        pp_edge *edge = &p->edges[e];
        if (edge->from != stage->index || edge->node != j)
            continue;
        const float *rows = edge->grad + (size_t)start * edge->width;
        width = edge->width;
        if (senders == 1)
            memcpy(stage->scratch, src, (size_t)n * width * sizeof(float));
        if (senders >= 1)
            for (size_t x = 0; x < (size_t)n * width; x++)
                stage->scratch[x] += rows[x];
        src = senders >= 1 ? stage->scratch : rows;
        senders++;
    }
    if (!senders)
        return KILN_OK;
    kiln_replica_mark_gradient(v, j);
    return kiln_buffer_write(v->dev, v->grad[j], 0, src, (size_t)n * width * sizeof(float), 1);
}

static kiln_status backward_micro(pp_stage *stage, int32_t mb, int last_backward)
{
    pp *p = stage->owner;
    kiln_model *m = p->m;
    kiln_replica *v = stage->views[view_of(stage, mb)], *base = stage->views[0];
    const int32_t start = p->start[mb], n = p->count[mb];
    kiln_status st = KILN_OK;
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++)
        if (p->edges[e].from == stage->index)
            st = wait_for(stage, &p->edges[e].grad_ready[mb]);
    enter(p);
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++) {
        const pp_edge *edge = &p->edges[e];
        int first = edge->from == stage->index;
        for (int32_t f = 0; f < e && first; f++)
            first = !(p->edges[f].from == stage->index && p->edges[f].node == edge->node);
        if (first)
            st = receive_gradient(stage, v, edge->node, mb);
    }
    if (st == KILN_OK)
        st = kiln_replica_backward(v, n, NULL, NULL);
    /* Parameter gradients of each micro-batch add up in the accumulation
     * buffer; the last one of an update leaves the sum in grads. */
    if (st == KILN_OK && base->accum && base->n_trainable > 0) {
        const int final = last_backward && p->update.final_micro;
        st = kiln_replica_accumulate(base, 0, base->n_trainable, final,
                                     final ? 1.0f / (float)m->plan.accumulation_steps : 1.0f);
    }
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++) {
        pp_edge *edge = &p->edges[e];
        if (edge->to == stage->index && m->graph.nodes[edge->node].needs_gradient)
            st = kiln_buffer_read(v->dev, v->grad[edge->node], 0,
                                  edge->grad + (size_t)start * edge->width,
                                  (size_t)n * edge->width * sizeof(float));
    }
    leave(p);
    for (int32_t e = 0; e < p->n_edges && st == KILN_OK; e++)
        if (p->edges[e].to == stage->index)
            post(p, &p->edges[e].grad_ready[mb]);
    return st == KILN_OK ? KILN_OK : stage_failed(stage, v, st);
}

/* Stage s's order of passes: micro-batch m as m (forward) or -(m + 1)
 * (backward). Returns the count. */
static int32_t schedule(const pp *p, int32_t st, int32_t *ops)
{
    const int32_t M = p->n_micro;
    int32_t k = 0;
    if (p->job != PP_TRAIN) {
        for (int32_t mb = 0; mb < M; mb++)
            ops[k++] = mb;
        return k;
    }
    if (p->m->placement.schedule == KILN_PIPELINE_GPIPE) {
        for (int32_t mb = 0; mb < M; mb++)
            ops[k++] = mb;
        for (int32_t mb = M - 1; mb >= 0; mb--)
            ops[k++] = -(mb + 1);
        return k;
    }
    const int32_t warm = p->n - 1 - st < M ? p->n - 1 - st : M;
    for (int32_t mb = 0; mb < warm; mb++)
        ops[k++] = mb;
    for (int32_t i = 0; i + warm < M; i++) {
        ops[k++] = i + warm;
        ops[k++] = -(i + 1);
    }
    for (int32_t mb = M - warm; mb < M; mb++)
        ops[k++] = -(mb + 1);
    return k;
}

/* Whether the stage's gradients about to be applied are all finite (a NaN
 * can hide under a finite loss: a ReLU maps NaN to 0), and the parameters
 * and optimizer state the update would leave: checked on the device, in one
 * pass that writes nothing but the stage's loss sums, free once its
 * forwards are done; the sums come back. */
static kiln_status update_verdict(const pp *p, kiln_replica *base, int *finite,
                                  int *update_finite)
{
    const kiln_model *m = p->m;
    double sums[KILN_N_SUMS];
    kiln_status st = kiln_buffer_zero(base->dev, base->sums, 0, KILN_N_SUMS * sizeof(float));
    if (st == KILN_OK)
        st = kiln_optimizer_check_update(base->dev, &m->plan.optimizer, p->update.lr, base->params,
                                         base->grads, base->slots, base->n_trainable,
                                         p->update.number, base->sums, KILN_SUM_LOSS,
                                         &m->plan.decay, base->span.trainable_begin);
    if (st == KILN_OK)
        st = kiln_replica_read_sums(base, sums);
    *finite = st == KILN_OK && isfinite(sums[KILN_SUM_LOSS]);
    *update_finite = st == KILN_OK && isfinite(sums[KILN_SUM_UPDATE]);
    return st;
}

/* Clips the stage's gradient before the verdict checks it. A global norm
 * is the whole model's: each stage gives its squared norm, and once all are
 * in, each adds them up in stage order (the same double on every stage)
 * and scales its own gradient by it. A stage without trainable parameters
 * gives 0. */
static kiln_status clip_stage(pp_stage *stage)
{
    pp *p = stage->owner;
    kiln_replica *base = stage->views[0];
    float limit;
    if (kiln_clip_mode_of(&p->m->plan.optimizer, &limit) != KILN_CLIP_GLOBAL)
        return base->clip ? kiln_clip_gradients(base->clip, base->grads) : KILN_OK;
    double squares = 0.0;
    kiln_status st = base->clip ? kiln_clip_measure(base->clip, base->grads) : KILN_OK;
    if (st == KILN_OK && base->clip)
        st = kiln_clip_read_squares(base->clip, &squares);
    if (st != KILN_OK)
        return st;
    pthread_mutex_lock(&p->lock);
    stage->squares = squares;
    if (++p->squared == p->n) {
        p->squares_pass = p->pass;
        pthread_cond_broadcast(&p->cond);
    }
    pthread_mutex_unlock(&p->lock);
    st = wait_for(stage, &p->squares_pass);
    if (st != KILN_OK || !base->clip)
        return st;
    double total = 0.0;
    for (int32_t k = 0; k < p->n; k++)
        total += p->stages[k].squares;
    st = kiln_clip_set_squares(base->clip, total);
    return st == KILN_OK ? kiln_clip_scale(base->clip, base->grads) : st;
}

static kiln_status stage_job(void *arg)
{
    pp_stage *stage = arg;
    pp *p = stage->owner;
    kiln_model *m = p->m;
    kiln_replica *base = stage->views[0];
    int32_t ops[2 * 1024];
    const int32_t n_ops = schedule(p, stage->index, ops);
    memset(stage->sums, 0, sizeof stage->sums);
    stage->wait_seconds = 0;
    kiln_status st = KILN_OK;
    int32_t backwards = 0;
    for (int32_t k = 0; k < n_ops && st == KILN_OK; k++) {
        if (aborted(p)) {
            st = stage_failed(stage, base, KILN_ERROR_STOPPED);
            break;
        }
        if (ops[k] >= 0)
            st = forward_micro(stage, ops[k]);
        else
            st = backward_micro(stage, -ops[k] - 1, ++backwards == p->n_micro);
    }
    if (st != KILN_OK || p->job != PP_TRAIN)
        return st;
    int finite = 1, update_finite = 1;
    if (p->update.final_micro)
        st = clip_stage(stage);
    if (st == KILN_OK && p->update.final_micro && base->n_trainable > 0)
        st = update_verdict(p, base, &finite, &update_finite);
    if (st != KILN_OK)
        return stage_failed(stage, base, st);
    pthread_mutex_lock(&p->lock);
    p->finite &= finite && (!is_last(stage) || isfinite(stage->sums[0]));
    p->update_finite &= update_finite;
    if (++p->verdicts == p->n) {
        p->verdict_pass = p->pass;
        pthread_cond_broadcast(&p->cond);
    }
    pthread_mutex_unlock(&p->lock);
    st = wait_for(stage, &p->verdict_pass);
    if (st == KILN_OK && p->update.final_micro && p->finite && p->update_finite &&
        base->n_trainable > 0)
        st = kiln_optimizer_apply(base->dev, &m->plan.optimizer, p->update.lr, base->params,
                                  base->grads, base->slots, base->n_trainable,
                                  p->update.number, NULL, 0, &m->plan.decay,
                                  base->span.trainable_begin);
    if (st == KILN_OK)
        st = kiln_device_finish(base->dev);
    return st == KILN_OK ? KILN_OK : stage_failed(stage, base, st);
}


/* Device memory the activation sets will take for micro-batches of n, as
 * kiln_replica_reserve allocates them (layers' workspace not counted). */
static uint64_t activation_bytes(const pp *p, const pp_stage *stage, int32_t n)
{
    const kiln_model *m = p->m;
    const kiln_replica *v = stage->views[0];
    uint64_t floats = 0;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        if (!v->present[i])
            continue;
        const int here = i >= v->span.first && i <= v->span.last;
        const int copies = 1 + !kiln_node_is_input(m, i) +
                           (here && m->graph.nodes[i].activation != KILN_ACTIVATION_LINEAR &&
                            !kiln_node_fuses_activation(m, i));
        floats += (uint64_t)copies * (uint64_t)kiln_node_size(m, i);
    }
    for (int32_t k = 0; k < m->graph.n_outputs; k++)   /* labels, losses and correct counts */
        if (m->graph.outputs[k] >= v->span.first && m->graph.outputs[k] <= v->span.last)
            floats += (uint64_t)kiln_node_size(m, m->graph.outputs[k]) + 2;
    return floats * (uint64_t)n * sizeof(float) * (uint64_t)stage->n_views;
}

static void pp_memory(void *impl, int32_t i, kiln_memory_report *report);

static kiln_status over_budget(pp *p, int32_t k, int32_t n, uint64_t need)
{
    kiln_context *ctx = p->m->ctx;
    const pp_stage *stage = &p->stages[k];
    return kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY,
                      "pipeline stage %d on %s: batches of %d in %d micro-batches need %llu "
                      "bytes (parameters, gradients, optimizer state and %d activation set(s) "
                      "of %d samples), the device has %llu (%s); use more micro-batches, the "
                      "1F1B schedule or a smaller batch", (int)k,
                      kiln_device_label(ctx->devices[stage->plan.device]), (int)n,
                      (int)p->max_micro, (unsigned long long)need, (int)stage->n_views,
                      (int)((n + p->max_micro - 1) / p->max_micro),
                      (unsigned long long)stage->plan.budget,
                      p->m->placement.memory_budget ? "its budget" : "its global memory");
}

/* Room for a global batch of n: host rows, and activation sets checked
 * against each device's budget before they are allocated. */
static kiln_status reserve(pp *p, int32_t n)
{
    kiln_context *ctx = p->m->ctx;
    const int32_t micro = (n + p->max_micro - 1) / p->max_micro;
    if (micro > p->micro_capacity) {
        for (int32_t k = 0; k < p->n; k++) {
            pp_stage *stage = &p->stages[k];
            const uint64_t need = stage->plan.state_bytes + activation_bytes(p, stage, micro);
            if (need > stage->plan.budget)
                return over_budget(p, k, n, need);
        }
        for (int32_t k = 0; k < p->n; k++) {
            pp_stage *stage = &p->stages[k];
            for (int32_t v = 0; v < stage->n_views; v++) {
                kiln_status st = kiln_replica_reserve(stage->views[v], micro);
                if (st != KILN_OK)
                    return st;
            }
            /* Now with the layers' workspace, which only they can size. */
            kiln_memory_report r;
            memset(&r, 0, sizeof r);
            pp_memory(p, k, &r);
            const uint64_t held = r.parameter_bytes + r.gradient_bytes + r.optimizer_bytes +
                                  r.activation_bytes + r.workspace_bytes;
            if (held > stage->plan.budget) {
                for (int32_t v = 0; v < stage->n_views; v++)
                    kiln_replica_release(stage->views[v]);
                return over_budget(p, k, n, held);
            }
        }
        p->micro_capacity = micro;
    }
    if (n <= p->capacity)
        return KILN_OK;
    const kiln_model *m = p->m;
    const size_t in = (size_t)n * (size_t)m->graph.sample_size;
    const size_t out = (size_t)n * (size_t)m->plan.output_size;
    const size_t label_bytes = (size_t)n * kiln_model_label_bytes(m);
    kiln_free(ctx, p->features);
    kiln_free(ctx, p->outputs);
    kiln_free(ctx, p->labels);
    p->features = kiln_calloc(ctx, in, sizeof(float));
    p->outputs = kiln_calloc(ctx, out, sizeof(float));
    p->labels = kiln_calloc(ctx, label_bytes ? label_bytes : 1, 1);
    if (!p->features || !p->outputs || !p->labels)
        return kiln_error_oom(ctx, "the pipeline's batch",
                              (in + out) * sizeof(float) + label_bytes);
    size_t widest = 0;
    for (int32_t e = 0; e < p->n_edges; e++) {
        pp_edge *edge = &p->edges[e];
        const size_t rows = (size_t)n * edge->width;
        kiln_free(ctx, edge->act);
        kiln_free(ctx, edge->grad);
        edge->act = kiln_calloc(ctx, rows, sizeof(float));
        edge->grad = kiln_calloc(ctx, rows, sizeof(float));
        if (!edge->act || !edge->grad)
            return kiln_error_oom(ctx, "pipeline transfer rows", 2 * rows * sizeof(float));
        widest = edge->width > widest ? edge->width : widest;
    }
    for (int32_t k = 0; k < p->n; k++) {
        kiln_free(ctx, p->stages[k].scratch);
        if (!(p->stages[k].scratch = kiln_calloc(ctx, (size_t)n * widest + 1, sizeof(float))))
            return kiln_error_oom(ctx, "pipeline gradient sums", (size_t)n * widest * 4);
    }
    p->capacity = n;
    return KILN_OK;
}

/* One pass of every stage over a global batch, under the watchdog. */
static kiln_status run_pass(pp *p, pp_job job, const kiln_batch *b, float *outputs)
{
    kiln_model *m = p->m;
    kiln_status status = kiln_crew_check(p->crew);
    if (status == KILN_OK)
        status = reserve(p, b->n);
    if (status != KILN_OK)
        return status;
    p->job = job;
    const kiln_model *m0 = p->m;
    const size_t in_bytes = (size_t)b->n * (size_t)m0->graph.sample_size * sizeof(float);
    const size_t out_floats = (size_t)b->n * (size_t)m0->plan.output_size;
    memcpy(p->features, b->features, in_bytes);
    if (b->labels)
        memcpy(p->labels, b->labels, (size_t)b->n * kiln_model_label_bytes(m0));
    p->batch.n = b->n;
    p->batch.features = p->features;
    p->batch.labels = b->labels ? p->labels : NULL;
    p->n_micro = b->n < p->max_micro ? b->n : p->max_micro;
    for (int32_t mb = 0, at = 0; mb < p->n_micro; mb++) {
        p->start[mb] = at;
        p->count[mb] = b->n / p->n_micro + (mb < b->n % p->n_micro);
        at += p->count[mb];
    }
    p->pass++;
    p->abort = 0;
    p->finite = 1;
    p->update_finite = 1;
    p->verdicts = 0;
    p->squared = 0;
    p->serial = 0;
    for (int32_t mb = 0; mb < p->n_micro; mb++)
        p->serial |= kiln_shape_log_add(&p->seen[job], p->count[mb]);
    const double t0 = kiln_now();
    for (int32_t k = 0; k < p->n; k++)
        kiln_crew_post(p->crew, k, stage_job, &p->stages[k]);
    const kiln_crew_outcome o = kiln_crew_wait_all(p->crew, p->n, m->placement.step_timeout);
    if (o.stalled >= 0) {
        char where[320];
        kiln_replica_describe(p->stages[o.stalled].views[0], where, sizeof where);
        pthread_mutex_lock(&p->lock);
        p->abort = 1;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        char who[340];
        snprintf(who, sizeof who, "pipeline %s", where);
        return kiln_crew_break_stalled(p->crew, who, "step", m->placement.step_timeout, "");
    }
    if (o.status != KILN_OK)
        return kiln_crew_break_with(p->crew, o.status, o.culprit);
    if (outputs)
        memcpy(outputs, p->outputs, out_floats * sizeof(float));
    if (job == PP_TRAIN) {
        const double elapsed = kiln_now() - t0;
        p->stats.stage_seconds += elapsed * p->n;
        for (int32_t k = 0; k < p->n; k++) {
            const double busy = elapsed - p->stages[k].wait_seconds;
            p->stats.busy_seconds += busy > 0 ? busy : 0;
        }
    }
    return KILN_OK;
}

static kiln_status pp_train_step(void *impl, const kiln_batch *b, double *sums)
{
    pp *p = impl;
    kiln_model *m = p->m;
    kiln_update_begin(&p->update, m);
    /* The last stage's loss: each micro-batch scaled by the whole batch's count. */
    p->scale = kiln_loss_scale(kiln_model_counted(m, b->labels, b->n));
    kiln_status st = run_pass(p, PP_TRAIN, b, NULL);
    if (st != KILN_OK)
        return st;
    const pp_stage *last = &p->stages[p->n - 1];
    /* A non-finite gradient under a finite loss, or update, skipped the
     * update: the loss or KILN_SUM_UPDATE says so, and fit stops at it or
     * skips and counts it. */
    memcpy(sums, last->sums, sizeof last->sums);
    sums[KILN_SUM_UPDATE] = p->update_finite ? 0.0 : NAN;
    if (!p->finite)
        sums[KILN_SUM_LOSS] = NAN;
    kiln_update_end(&p->update, m, sums);
    return KILN_OK;
}

static kiln_status pp_eval_step(void *impl, const kiln_batch *b, double *sums)
{
    pp *p = impl;
    kiln_status st = run_pass(p, PP_EVAL, b, NULL);
    memset(sums, 0, KILN_N_SUMS * sizeof *sums);
    if (st == KILN_OK)
        memcpy(sums, p->stages[p->n - 1].sums, KILN_N_SUMS * sizeof *sums);
    return st;
}

static kiln_status pp_predict_step(void *impl, const kiln_batch *b, float *outputs)
{
    return run_pass(impl, PP_PREDICT, b, outputs);
}

/* Between a stage's buffer and the model's flat layout. */
static void scatter(const kiln_stage_span *sp, const float *local, float *flat, int to_flat)
{
    const size_t nt = sp->trainable_end - sp->trainable_begin;
    const size_t ns = sp->state_end - sp->state_begin;
    const size_t nf = sp->frozen_end - sp->frozen_begin;
    if (to_flat) {
        memcpy(flat + sp->trainable_begin, local, nt * sizeof(float));
        memcpy(flat + sp->state_begin, local + nt, ns * sizeof(float));
        memcpy(flat + sp->frozen_begin, local + nt + ns, nf * sizeof(float));
    } else {
        memcpy((float *)local, flat + sp->trainable_begin, nt * sizeof(float));
        memcpy((float *)local + nt, flat + sp->state_begin, ns * sizeof(float));
        memcpy((float *)local + nt + ns, flat + sp->frozen_begin, nf * sizeof(float));
    }
}

/* Reads (get) or writes every stage's `which` buffer: -1 parameters, else
 * optimizer slot `which`. */
static kiln_status stage_io(pp *p, int which, float *flat, int get)
{
    kiln_context *ctx = p->m->ctx;
    kiln_status st = KILN_OK;
    for (int32_t k = 0; k < p->n && st == KILN_OK; k++) {
        kiln_replica *base = p->stages[k].views[0];
        if (base->n_floats == 0)
            continue;
        float *local = kiln_calloc(ctx, base->n_floats, sizeof(float));
        if (!local)
            return kiln_error_oom(ctx, "a stage's parameters", base->n_floats * 4);
        kiln_buffer *buf = which < 0 ? base->params : base->slots[which];
        /* A slot may hold only the trainable prefix (the rest reads as zeros). */
        const size_t bytes = (which < 0 ? base->n_floats : kiln_replica_slot_floats(base, which)) *
                             sizeof(float);
        if (get) {
            st = bytes ? kiln_buffer_read(base->dev, buf, 0, local, bytes) : KILN_OK;
            if (st == KILN_OK)
                scatter(&base->span, local, flat, 1);
        } else {
            scatter(&base->span, local, flat, 0);
            st = bytes ? kiln_buffer_write(base->dev, buf, 0, local, bytes, 1) : KILN_OK;
        }
        kiln_free(ctx, local);
    }
    return st;
}

static kiln_status pp_get_params(void *impl, float *flat)
{
    return stage_io(impl, -1, flat, 1);
}

static kiln_status pp_set_params(void *impl, const float *flat)
{
    return stage_io(impl, -1, (float *)flat, 0);
}

static kiln_status pp_get_slots(void *impl, float *const *slots)
{
    pp *p = impl;
    kiln_status st = KILN_OK;
    for (int i = 0; i < kiln_optimizer_slot_count(&p->m->plan.optimizer) && st == KILN_OK; i++)
        st = stage_io(p, i, slots[i], 1);
    return st;
}

static kiln_status pp_set_slots(void *impl, const float *const *slots)
{
    pp *p = impl;
    kiln_status st = KILN_OK;
    for (int i = 0; i < kiln_optimizer_slot_count(&p->m->plan.optimizer) && st == KILN_OK; i++)
        st = stage_io(p, i, (float *)slots[i], 0);
    return st;
}

static int32_t pp_replica_count(void *impl)
{
    return ((pp *)impl)->n;
}

/* The stages together hold one replica of the model; micro-batches cut the
 * global batch, they do not multiply it. */
static kiln_replica *pp_replica_at(void *impl, int32_t i)
{
    pp *p = impl;
    return i >= 0 && i < p->n ? p->stages[i].views[0] : NULL;
}

static void pp_stats(void *impl, kiln_strategy_stats *out)
{
    *out = ((pp *)impl)->stats;
}

static int32_t pp_micro_step(void *impl)
{
    return ((pp *)impl)->update.micro;
}

static void pp_memory(void *impl, int32_t i, kiln_memory_report *report)
{
    pp *p = impl;
    const pp_stage *stage = &p->stages[i];
    kiln_replica_memory(stage->views[0], report);
    for (int32_t v = 1; v < stage->n_views; v++) {
        kiln_memory_report extra;
        memset(&extra, 0, sizeof extra);
        kiln_replica_memory(stage->views[v], &extra);
        report->activation_bytes += extra.activation_bytes;
        report->workspace_bytes += extra.workspace_bytes;
    }
}

static void pp_destroy(void *impl)
{
    pp *p = impl;
    if (!p)
        return;
    kiln_context *ctx = p->m->ctx;
    pthread_mutex_lock(&p->lock);
    p->abort = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (!kiln_crew_destroy(p->crew)) {
        kiln_log(ctx, KILN_LOG_ERROR, "a pipeline stage's thread is stuck; its buffers are "
                 "leaked");
        return;
    }
    for (int32_t k = 0; p->stages && k < p->n; k++) {
        pp_stage *stage = &p->stages[k];
        for (int32_t v = stage->n_views - 1; stage->views && v >= 0; v--)
            kiln_replica_destroy(stage->views[v]);
        kiln_free(ctx, stage->views);
        kiln_free(ctx, stage->scratch);
    }
    for (int32_t e = 0; p->edges && e < p->n_edges; e++) {
        kiln_free(ctx, p->edges[e].act);
        kiln_free(ctx, p->edges[e].grad);
        kiln_free(ctx, p->edges[e].act_ready);
        kiln_free(ctx, p->edges[e].grad_ready);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    kiln_free(ctx, p->edges);
    kiln_free(ctx, p->stages);
    kiln_free(ctx, p->start);
    kiln_free(ctx, p->count);
    kiln_free(ctx, p->features);
    kiln_free(ctx, p->outputs);
    kiln_free(ctx, p->labels);
    kiln_free(ctx, p);
}

static int32_t stage_of(const pp *p, kiln_node i)
{
    for (int32_t k = 0; k < p->n; k++)
        if (i >= p->stages[k].plan.span.first && i <= p->stages[k].plan.span.last)
            return k;
    return -1;
}

/* Every (node, reading stage) pair that crosses stages; the input is not
 * sent: every stage that reads it uploads it from the batch. */
static kiln_status plan_edges(pp *p)
{
    kiln_model *m = p->m;
    kiln_context *ctx = m->ctx;
    p->edges = kiln_calloc(ctx, (size_t)m->graph.n_nodes * (size_t)p->n, sizeof *p->edges);
    if (!p->edges)
        return kiln_error_oom(ctx, "pipeline edges", (size_t)m->graph.n_nodes * sizeof *p->edges);
    for (kiln_node j = 0; j < m->graph.n_nodes; j++) {
        if (!m->graph.nodes[j].on_path || kiln_node_is_input(m, j))
            continue;
        const int32_t from = stage_of(p, j);
        for (int32_t to = from + 1; to < p->n; to++) {
            int reads = 0;
            for (kiln_node i = p->stages[to].plan.span.first;
                 i <= p->stages[to].plan.span.last; i++)
                for (int k = 0; m->graph.nodes[i].on_path && k < m->graph.nodes[i].n_inputs; k++)
                    reads |= m->graph.nodes[i].inputs[k] == j;
            if (!reads)
                continue;
            pp_edge *e = &p->edges[p->n_edges++];
            e->node = j;
            e->from = from;
            e->to = to;
            e->width = (size_t)kiln_node_size(m, j);
            e->act_ready = kiln_calloc(ctx, (size_t)p->max_micro, sizeof(int64_t));
            e->grad_ready = kiln_calloc(ctx, (size_t)p->max_micro, sizeof(int64_t));
            if (!e->act_ready || !e->grad_ready)
                return kiln_error_oom(ctx, "pipeline edges", (size_t)p->max_micro * 16);
        }
    }
    return KILN_OK;
}

/* The last stage computes the loss: every output must be there (an
 * earlier stage's output would need its own loss and sums, and a gradient
 * that starts there). */
static kiln_status check_outputs_last(const kiln_model *m, const kiln_stage_plan *plan,
                                      int32_t n)
{
    const kiln_stage_span *last = &plan[n - 1].span;
    for (int32_t k = 0; k < m->graph.n_outputs; k++) {
        const kiln_node o = m->graph.outputs[k];
        if (o >= last->first && o <= last->last)
            continue;
        int32_t s = 0;
        while (s < n - 1 && !(o >= plan[s].span.first && o <= plan[s].span.last))
            s++;
        return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_compile: pipeline: "
                          "output '%s' of a model of several outputs is on stage %d of %d; "
                          "every output must be on the last stage, which computes the loss "
                          "(place the outputs' layers on the last device)",
                          m->graph.nodes[o].name, (int)s, (int)n);
    }
    return KILN_OK;
}

static kiln_status pp_create(kiln_model *m, void **impl)
{
    kiln_context *ctx = m->ctx;
    if (m->placement.micro_batches > 1024)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: micro_batches is %d; at most 1024",
                          (int)m->placement.micro_batches);
    kiln_stage_plan *plan = NULL;
    int32_t n = 0;
    const int accumulate = m->placement.micro_batches > 1 || m->plan.accumulation_steps > 1;
    kiln_status st = kiln_partition(m, accumulate, &plan, &n);
    if (st == KILN_OK)
        st = check_outputs_last(m, plan, n);
    if (st != KILN_OK) {
        kiln_free(ctx, plan);
        return st;
    }
    pp *p = kiln_calloc(ctx, 1, sizeof *p);
    if (!p) {
        kiln_free(ctx, plan);
        return kiln_error_oom(ctx, "a strategy", sizeof *p);
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->m = m;
    p->max_micro = m->placement.micro_batches;
    p->stages = kiln_calloc(ctx, (size_t)n, sizeof *p->stages);
    p->start = kiln_calloc(ctx, (size_t)p->max_micro, sizeof *p->start);
    p->count = kiln_calloc(ctx, (size_t)p->max_micro, sizeof *p->count);
    float *init =
        kiln_calloc(ctx, m->plan.n_param_floats ? m->plan.n_param_floats : 1, sizeof(float));
    if (!p->stages || !p->start || !p->count || !init)
        st = kiln_error_oom(ctx, "pipeline stages", (size_t)n * sizeof *p->stages);
    else
        p->n = n;
    for (int32_t k = 0; st == KILN_OK && k < n; k++) {
        pp_stage *stage = &p->stages[k];
        stage->owner = p;
        stage->index = k;
        stage->plan = plan[k];
        stage->n_views = m->placement.schedule == KILN_PIPELINE_GPIPE ? p->max_micro
                      : n - k < p->max_micro             ? n - k
                                                         : p->max_micro;
        stage->views = kiln_calloc(ctx, (size_t)stage->n_views, sizeof *stage->views);
        if (!stage->views) {
            st = kiln_error_oom(ctx, "pipeline activation sets", (size_t)stage->n_views * 8);
            break;
        }
        st = kiln_replica_create_stage(m, ctx->devices[plan[k].device], &plan[k].span,
                                       &stage->views[0]);
        if (st == KILN_OK)
            stage->views[0]->index = k;
        for (int32_t v = 1; st == KILN_OK && v < stage->n_views; v++)
            st = kiln_replica_create_view(stage->views[0], &stage->views[v]);
        for (int32_t v = 0; st == KILN_OK && v < stage->n_views; v++)
            stage->views[v]->role = "stage";
    }
    if (st == KILN_OK)
        st = kiln_crew_create(ctx, n, &p->crew);
    kiln_free(ctx, plan);
    if (st == KILN_OK)
        st = plan_edges(p);
    if (st == KILN_OK)
        kiln_model_init_params(m, init);
    if (st == KILN_OK)
        st = pp_set_params(p, init);
    kiln_free(ctx, init);
    if (st != KILN_OK) {
        pp_destroy(p);
        return st;
    }
    *impl = p;
    return KILN_OK;
}

static kiln_status stage_plan(const kiln_model *m, char *text, size_t size, size_t *length)
{
    if (!text && size > 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_stage_plan: text is NULL but size is %zu", size);
    if (!m->plan.compiled || m->placement.strategy != &kiln_strategy_pipeline)
        return kiln_error(m->ctx, KILN_ERROR_STATE, "kiln_model_stage_plan: the model is not "
                          "compiled with the pipeline strategy");
    const pp *p = m->placement.strategy_impl;
    kiln_text t = {.text = text, .size = size};
    if (size > 0)
        text[0] = '\0';
    uint64_t total = 0;
    for (int32_t k = 0; k < p->n; k++)
        total += p->stages[k].plan.cost;
    kiln_text_printf(&t, "Pipeline: %d stage(s), %s schedule, %d micro-batch(es)\n", (int)p->n,
                     m->placement.schedule == KILN_PIPELINE_GPIPE ? "GPipe" : "1F1B",
                     (int)p->max_micro);
    for (int32_t k = 0; k < p->n; k++) {
        const pp_stage *stage = &p->stages[k];
        kiln_memory_report r;
        memset(&r, 0, sizeof r);
        pp_memory((void *)p, k, &r);
        kiln_text_printf(&t, "stage %d on %s: %.0f%% of the compute, layers", (int)k,
                         kiln_device_label(m->ctx->devices[stage->plan.device]),
                         total ? 100.0 * (double)stage->plan.cost / (double)total : 0.0);
        for (kiln_node i = stage->plan.span.first; i <= stage->plan.span.last; i++)
            if (m->graph.nodes[i].on_path)
                kiln_text_printf(&t, " %s", m->graph.nodes[i].name);
        kiln_text_printf(&t, "\n  memory: parameters %.2f MiB, gradients %.2f MiB, optimizer "
                         "%.2f MiB, activations %.2f MiB (%d set(s)), budget %.2f MiB\n",
                         (double)r.parameter_bytes / 1048576.0,
                         (double)r.gradient_bytes / 1048576.0,
                         (double)r.optimizer_bytes / 1048576.0,
                         (double)(r.activation_bytes + r.workspace_bytes) / 1048576.0,
                         (int)stage->n_views, (double)stage->plan.budget / 1048576.0);
    }
    if (length)
        *length = t.length;
    return KILN_OK;
}

const kiln_strategy_ops kiln_strategy_pipeline = {
    .name = "pipeline", .create = pp_create, .destroy = pp_destroy, .train_step = pp_train_step,
    .eval_step = pp_eval_step, .predict_step = pp_predict_step, .get_params = pp_get_params,
    .set_params = pp_set_params, .replica_count = pp_replica_count, .replica = pp_replica_at,
    .stats = pp_stats, .get_slots = pp_get_slots, .set_slots = pp_set_slots,
    .micro_step = pp_micro_step, .memory = pp_memory,
};

kiln_status kiln_model_stage_plan(const kiln_model *m, char *text, size_t size, size_t *length)
{
    if (length)
        *length = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    int entered;
    kiln_status st = kiln_model_enter_reading(m, "kiln_model_stage_plan", &entered);
    if (st == KILN_OK)
        st = stage_plan(m, text, size, length);
    kiln_model_leave_reading(m, entered);
    return st;
}
