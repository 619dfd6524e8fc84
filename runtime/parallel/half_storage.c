#include "runtime/parallel/half_storage.h"

#include <stdlib.h>

/* A covered node's float32 uses, each a pool slot for part of the step. */
enum { FWD_OUT, FWD_ACT, BWD_OUT, BWD_ACT, GRAD, HALF_USES };

typedef struct half_node {
    int rounded;              /* a layer output of this span: rounded to half */
    int covered;              /* kept in half between its passes (else pinned) */
    int separate_act;         /* post-activation values in a buffer of their own */
    kiln_node last_reader;    /* the last on-path node to read it, forward or backward */
    int32_t slot[HALF_USES];  /* -1: not used */
    kiln_buffer *h_out, *h_act;
} half_node;

struct kiln_half_storage {
    half_node *nodes;
    kiln_buffer **slots;
    int32_t n_slots;
    kiln_buffer *overflow;    /* int: node + 1 of the first output beyond half's range */
};

/* One float32 buffer's lifetime on the step's clock: node t's forward
 * pass is time t, node t's backward pass time 2N - 1 - t. */
typedef struct half_request {
    int32_t start, end;
    size_t bytes;
    int32_t *slot;
} half_request;

static int in_span(const kiln_replica *r, kiln_node i)
{
    return i >= r->span.first && i <= r->span.last;
}

/* Rounded: a layer's output computed here, but not the model's (which the
 * loss reads and predict returns). Covered: rounded, and read only by this
 * span's layers' passes; a node another stage reads is rounded in its own
 * float32 buffers, so that the stages compute what one device does. */
static void plan_coverage(const kiln_replica *r, half_node *nodes)
{
    const kiln_model *m = r->model;
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        nodes[i].last_reader = -1;
        nodes[i].rounded = in_span(r, i) && r->present[i] && m->graph.nodes[i].on_path &&
                           !kiln_node_is_input(m, i) && kiln_model_output_index(m, i) < 0;
        nodes[i].covered = nodes[i].rounded;
        for (int u = 0; u < HALF_USES; u++)
            nodes[i].slot[u] = -1;
    }
    for (kiln_node c = 0; c < m->graph.n_nodes; c++) {
        const kiln_node_rec *reader = &m->graph.nodes[c];
        if (!reader->on_path)
            continue;
        for (int k = 0; k < reader->n_inputs; k++) {
            half_node *h = &nodes[reader->inputs[k]];
            if (!in_span(r, c))
                h->covered = 0;   /* sent to another stage */
            else if (c > h->last_reader)
                h->last_reader = c;
        }
    }
    for (kiln_node i = 0; i < m->graph.n_nodes; i++) {
        half_node *h = &nodes[i];
        const kiln_node_rec *node = &m->graph.nodes[i];
        h->covered = h->covered && h->last_reader > i;
        h->separate_act = node->activation != KILN_ACTIVATION_LINEAR &&
                          !kiln_node_fuses_activation(m, i);
    }
}

static int by_start(const void *a, const void *b)
{
    const half_request *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;   /* the order nodes were listed */
}

/* Greedy interval packing, in start order: a free slot large enough (the
 * smallest such), else the largest free slot grown, else a new slot. Fills
 * each request's slot and the slots' sizes; returns the slot count. */
static int32_t pack(half_request *req, int32_t n, size_t *bytes, int32_t *busy_until)
{
    qsort(req, (size_t)n, sizeof *req, by_start);
    int32_t n_slots = 0;
    for (int32_t q = 0; q < n; q++) {
        int32_t fit = -1, largest = -1;
        for (int32_t s = 0; s < n_slots; s++) {
            if (busy_until[s] >= req[q].start)
                continue;
            if (bytes[s] >= req[q].bytes && (fit < 0 || bytes[s] < bytes[fit]))
                fit = s;
            if (largest < 0 || bytes[s] > bytes[largest])
                largest = s;
        }
        const int32_t s = fit >= 0 ? fit : largest >= 0 ? largest : n_slots++;
        if (bytes[s] < req[q].bytes)
            bytes[s] = req[q].bytes;
        busy_until[s] = req[q].end;
        *req[q].slot = s;
    }
    return n_slots;
}

/* The requests of every covered node; returns their count. */
static int32_t list_requests(const kiln_replica *r, half_node *nodes, int32_t n,
                             half_request *req)
{
    const kiln_model *m = r->model;
    const int32_t N = m->graph.n_nodes;
    int32_t q = 0;
    for (kiln_node i = 0; i < N; i++) {
        half_node *h = &nodes[i];
        if (!h->covered)
            continue;
        const size_t bytes = (size_t)n * (size_t)kiln_node_size(m, i) * sizeof(float);
        const int32_t forward_end = h->last_reader, backward_start = 2 * N - 1 - h->last_reader,
                      backward_end = 2 * N - 1 - i;
        for (int u = 0; u < HALF_USES; u++) {
            if ((u == FWD_ACT || u == BWD_ACT) && !h->separate_act)
                continue;
            if (u == GRAD && !m->graph.nodes[i].needs_gradient)
                continue;   /* backward does not reach it */
            const int forward = u == FWD_OUT || u == FWD_ACT;
            req[q++] = (half_request){.start = forward ? i : backward_start,
                                      .end = forward ? forward_end : backward_end,
                                      .bytes = bytes, .slot = &h->slot[u]};
        }
    }
    return q;
}

/* Whether the plan holds less than the covered nodes' own float32 buffers
 * would (their outputs, post-activation values and gradients). A shallow
 * network whose few covered layers' lifetimes all overlap in backward
 * (two hidden Dense layers: four float32 buffers live at once against four
 * of their own) gains nothing: its nodes are then all pinned, and rounded
 * in place. */
static int saves_memory(const kiln_replica *r, int32_t n, const half_node *nodes,
                        const size_t *slot_bytes, int32_t n_slots)
{
    uint64_t plan = 0, own = 0;
    for (int32_t s = 0; s < n_slots; s++)
        plan += slot_bytes[s];
    for (kiln_node i = 0; i < r->model->graph.n_nodes; i++) {
        if (!nodes[i].covered)
            continue;
        const uint64_t values = (uint64_t)n * (uint64_t)kiln_node_size(r->model, i);
        const uint64_t copies = nodes[i].separate_act ? 2 : 1;
        const uint64_t gradients = r->model->graph.nodes[i].needs_gradient ? 1 : 0;
        plan += copies * values * 2;
        own += (copies + gradients) * values * sizeof(float);
    }
    return plan < own;
}

int kiln_half_pinned(const kiln_replica *r, kiln_node i)
{
    return !r->half || !r->half->nodes[i].covered;
}

static kiln_status plan(kiln_replica *r, int32_t n, kiln_half_storage *hs)
{
    const kiln_model *m = r->model;
    kiln_context *ctx = m->ctx;
    const int32_t N = m->graph.n_nodes;
    plan_coverage(r, hs->nodes);
    const size_t most = (size_t)N * HALF_USES;
    half_request *req = kiln_calloc(ctx, most, sizeof *req);
    size_t *bytes = kiln_calloc(ctx, most, sizeof *bytes);
    int32_t *busy = kiln_calloc(ctx, most, sizeof *busy);
    kiln_status st = KILN_OK;
    if (!req || !bytes || !busy)
        st = kiln_error_oom(ctx, "the half storage plan", most * sizeof *req);
    if (st == KILN_OK) {
        hs->n_slots = pack(req, list_requests(r, hs->nodes, n, req), bytes, busy);
        if (!saves_memory(r, n, hs->nodes, bytes, hs->n_slots)) {
            for (kiln_node i = 0; i < N; i++)
                hs->nodes[i].covered = 0;
            hs->n_slots = 0;
        }
        hs->slots = kiln_calloc(ctx, (size_t)hs->n_slots + 1, sizeof *hs->slots);
        if (!hs->slots)
            st = kiln_error_oom(ctx, "the half storage pool", (size_t)hs->n_slots);
    }
    for (int32_t s = 0; st == KILN_OK && s < hs->n_slots; s++)
        st = kiln_buffer_create(r->dev, bytes[s], "activations (float32 pool)", &hs->slots[s]);
    for (kiln_node i = 0; st == KILN_OK && i < N; i++) {
        half_node *h = &hs->nodes[i];
        const size_t half_bytes = (size_t)n * (size_t)kiln_node_size(m, i) * 2;
        if (!h->covered)   /* a pinned node is rounded in place */
            continue;
        const char *name = m->graph.nodes[i].name;
        st = kiln_buffer_create(r->dev, half_bytes, name, &h->h_out);
        if (st == KILN_OK && h->separate_act)
            st = kiln_buffer_create(r->dev, half_bytes, name, &h->h_act);
    }
    if (st == KILN_OK)
        st = kiln_buffer_create(r->dev, sizeof(int32_t), "half overflow flag", &hs->overflow);
    if (st == KILN_OK)
        st = kiln_buffer_zero(r->dev, hs->overflow, 0, sizeof(int32_t));
    kiln_free(ctx, req);
    kiln_free(ctx, bytes);
    kiln_free(ctx, busy);
    return st;
}

kiln_status kiln_half_reserve(kiln_replica *r, int32_t n)
{
    const kiln_model *m = r->model;
    if (!m->plan.half_activations)
        return KILN_OK;
    kiln_half_storage *hs = kiln_calloc(m->ctx, 1, sizeof *hs);
    if (hs)
        hs->nodes = kiln_calloc(m->ctx, (size_t)m->graph.n_nodes, sizeof *hs->nodes);
    if (!hs || !hs->nodes) {
        kiln_free(m->ctx, hs);
        return kiln_error_oom(m->ctx, "the half storage plan", sizeof *hs);
    }
    r->half = hs;
    const kiln_status st = plan(r, n, hs);
    if (st != KILN_OK)
        kiln_half_release(r);
    return st;
}

void kiln_half_release(kiln_replica *r)
{
    kiln_half_storage *hs = r->half;
    if (!hs)
        return;
    kiln_context *ctx = r->model->ctx;
    for (kiln_node i = 0; i < r->model->graph.n_nodes; i++) {
        half_node *h = &hs->nodes[i];
        kiln_buffer_destroy(h->h_out);
        kiln_buffer_destroy(h->h_act);
        if (h->covered)   /* the pool's, freed below; the pinned ones are the replica's */
            r->out[i] = r->act[i] = r->grad[i] = NULL;
    }
    for (int32_t s = 0; hs->slots && s < hs->n_slots; s++)
        kiln_buffer_destroy(hs->slots[s]);
    kiln_buffer_destroy(hs->overflow);
    kiln_free(ctx, hs->slots);
    kiln_free(ctx, hs->nodes);
    kiln_free(ctx, hs);
    r->half = NULL;
}

static void point(kiln_replica *r, kiln_node i, int out_use, int act_use)
{
    const half_node *h = &r->half->nodes[i];
    r->out[i] = r->half->slots[h->slot[out_use]];
    r->act[i] = h->separate_act ? r->half->slots[h->slot[act_use]] : r->out[i];
}

void kiln_half_before_forward(kiln_replica *r, kiln_node i)
{
    if (!kiln_half_pinned(r, i))
        point(r, i, FWD_OUT, FWD_ACT);
}

/* Rounds x to half, into h (kept) or, h NULL, in place only. */
static kiln_status round_to_half(kiln_replica *r, kiln_node i, kiln_buffer *x, kiln_buffer *h,
                                 int64_t n)
{
    if (!h) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_int(n),
                                kiln_arg_buffer(r->half->overflow), kiln_arg_int(i));
        return kiln_run1(r->dev, "half_storage", "kiln_half_storage_round_in_place", (size_t)n,
                         a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_buffer(h), kiln_arg_int(n),
                            kiln_arg_buffer(r->half->overflow), kiln_arg_int(i));
    return kiln_run1(r->dev, "half_storage", "kiln_half_storage_round", (size_t)n, a);
}

static kiln_status expand(kiln_replica *r, kiln_buffer *h, kiln_buffer *x, int64_t n)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(h), kiln_arg_buffer(x), kiln_arg_int(n));
    return kiln_run1(r->dev, "half_storage", "kiln_half_storage_expand", (size_t)n, a);
}

kiln_status kiln_half_after_forward(kiln_replica *r, kiln_node i, int32_t n)
{
    if (!r->half || !r->half->nodes[i].rounded)
        return KILN_OK;
    const half_node *h = &r->half->nodes[i];
    const int64_t count = (int64_t)n * kiln_node_size(r->model, i);
    kiln_status st = round_to_half(r, i, r->out[i], h->h_out, count);
    if (st == KILN_OK && h->separate_act)
        st = round_to_half(r, i, r->act[i], h->h_act, count);
    return st;
}

kiln_status kiln_half_before_backward(kiln_replica *r, kiln_node i, int32_t n)
{
    if (!r->half)
        return KILN_OK;
    const kiln_node_rec *node = &r->model->graph.nodes[i];
    kiln_status st = KILN_OK;
    for (int k = 0; k < node->n_inputs && st == KILN_OK; k++) {
        const kiln_node j = node->inputs[k];
        const half_node *h = &r->half->nodes[j];
        int again = 0;   /* an input read twice (Add(x, x)) is expanded once */
        for (int e = 0; e < k; e++)
            again |= node->inputs[e] == j;
        if (!h->covered || h->last_reader != i || again)
            continue;
        point(r, j, BWD_OUT, BWD_ACT);
        r->grad[j] = h->slot[GRAD] >= 0 ? r->half->slots[h->slot[GRAD]] : NULL;
        const int64_t count = (int64_t)n * kiln_node_size(r->model, j);
        st = expand(r, h->h_out, r->out[j], count);
        if (st == KILN_OK && h->separate_act)
            st = expand(r, h->h_act, r->act[j], count);
    }
    return st;
}

kiln_status kiln_half_check(kiln_replica *r)
{
    if (!r->half)
        return KILN_OK;
    int32_t node = 0;
    kiln_status st = kiln_buffer_read(r->dev, r->half->overflow, 0, &node, sizeof node);
    if (st != KILN_OK || node == 0)
        return st;
    st = kiln_buffer_zero(r->dev, r->half->overflow, 0, sizeof node);
    if (st != KILN_OK)
        return st;
    return kiln_error(r->model->ctx, KILN_ERROR_NUMERIC,
                      "layer '%s': an output beyond half precision's range (a magnitude of "
                      "65520 or more rounds to infinity) under activation_storage "
                      "KILN_STORAGE_FLOAT16; keep activations in float32, or scale the "
                      "layer's output down",
                      r->model->graph.nodes[node - 1].name);
}

uint64_t kiln_half_bytes(const kiln_replica *r)
{
    const kiln_half_storage *hs = r->half;
    if (!hs)
        return 0;
    uint64_t sum = kiln_buffer_bytes(hs->overflow);
    for (int32_t s = 0; s < hs->n_slots; s++)
        sum += kiln_buffer_bytes(hs->slots[s]);
    for (kiln_node i = 0; i < r->model->graph.n_nodes; i++) {
        const half_node *h = &hs->nodes[i];
        if (h->h_out)
            sum += kiln_buffer_bytes(h->h_out);
        if (h->h_act)
            sum += kiln_buffer_bytes(h->h_act);
    }
    return sum;
}
