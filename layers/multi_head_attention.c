/* MultiHeadAttention (Keras's, key = value): query (Tq, D), value (Tv, Dv).
 * The four projections are GEMMs on the flat (tokens, features) views,
 * since Keras's kernels (D, heads, dim) are (D, heads * dim) matrices laid
 * out row-major; what lies between them, per head, is attention.cl's:
 * scores, mask and softmax (one kernel on the CPU variant, a product and a
 * pass over rows on the GPU's), then the probabilities times the values.
 * An optional third input, the padding mask (Tv), reaches the softmax alone
 * (kiln_multi_head_attention_masked).
 * Backward keeps q, k, v, the probabilities and the context from forward
 * (per replica, sized by prepare's batch). With LoRA (kiln_model_enable_lora)
 * every kernel freezes, and the targets (query and value unless chosen)
 * each gain Keras 3's EinsumDense adapters (layers/lora.h). */
#include "layers/layer.h"
#include "layers/lora.h"
#include "layers/onnx_graph.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>

/* The CPU variant of the kernels (kernel_variant.c), attention.cl's _cpu
 * ones: register tiles of 4 rows, TILE_ROWS here. The GPU variant's
 * products take work-groups of GROUP_SIDE x GROUP_SIDE items per BLOCK x
 * BLOCK block (ATT_GROUP and ATT_BLOCK in attention.cl, which say why so
 * small); its row passes a group of KILN_ROW_LANES per row. */
#define TILE_ROWS 4
#define TILE_VALUES 8
#define GROUP_SIDE 8
#define BLOCK 32

typedef struct mha_config {
    /* As given (describe returns them). */
    int32_t heads, key_dim, value_dim, output_shape;
    float dropout;
    uint64_t seed;
    int32_t causal, use_bias;
    /* Inferred. */
    int32_t tq, d, tv, dv;   /* query and value lengths and features */
    int32_t masked;          /* a third input: the padding mask (Tv) */
    int32_t vdim, out;       /* value_dim and output_shape with their defaults */
    /* LoRA: rank 0 none; lora_on, a bit per projection (1 << PROJ_*). */
    int32_t lora_rank, lora_on;
    float lora_alpha;
} mha_config;

/* The projections in Keras's weight order. */
enum { PROJ_QUERY, PROJ_KEY, PROJ_VALUE, PROJ_OUTPUT, N_PROJ };

static const char *const kernel_names[N_PROJ] = {"query/kernel", "key/kernel", "value/kernel",
                                                 "attention_output/kernel"};
static const char *const bias_names[N_PROJ] = {"query/bias", "key/bias", "value/bias",
                                               "attention_output/bias"};

static const char *const lora_a_names[N_PROJ] = {
    "query/lora_kernel_a", "key/lora_kernel_a", "value/lora_kernel_a",
    "attention_output/lora_kernel_a"};
static const char *const lora_b_names[N_PROJ] = {
    "query/lora_kernel_b", "key/lora_kernel_b", "value/lora_kernel_b",
    "attention_output/lora_kernel_b"};

static int kernel_index(const mha_config *c, int proj)
{
    return c->use_bias ? 2 * proj : proj;
}

static int adapted(const mha_config *c, int proj)
{
    return c->lora_rank > 0 && (c->lora_on >> proj & 1);
}

/* A's index: the adapters follow the layer's own parameters, in the
 * projections' order, so imported parameter indices keep their meaning. */
static int lora_index(const mha_config *c, int proj)
{
    int at = c->use_bias ? 2 * N_PROJ : N_PROJ;
    for (int p = 0; p < proj; p++)
        at += adapted(c, p) ? 2 : 0;
    return at;
}

/* Projection proj's adapters as layers/lora.h reads them: its kernel (in,
 * heads, dim) with a group per head; the output's (heads, value_dim, out)
 * as one (heads x value_dim, out) matrix. With a step's offsets, where they
 * lie. */
static kiln_lora_gemm lora_of(const mha_config *c, int proj, const size_t *param_offset)
{
    const int32_t in[N_PROJ] = {c->d, c->dv, c->dv, c->heads * c->vdim};
    const int32_t last[N_PROJ] = {c->key_dim, c->key_dim, c->vdim, c->out};
    const int a = lora_index(c, proj);
    return (kiln_lora_gemm){
        .in = (size_t)in[proj], .groups = proj == PROJ_OUTPUT ? 1 : (size_t)c->heads,
        .rank = (size_t)c->lora_rank, .last = (size_t)last[proj],
        .scale = c->lora_alpha / (float)c->lora_rank,
        .a_at = param_offset ? param_offset[a] : 0, .b_at = param_offset ? param_offset[a + 1] : 0};
}

static int bias_index(int proj)
{
    return 2 * proj + 1;
}

/* A kernel (a, heads, b) or (heads, a, b) with Keras's glorot fans: its
 * initialiser counts every axis but the last two as a receptive field, so
 * fan_in = shape[-2] * shape[0] and fan_out = shape[-1] * shape[0]. */
static void add_kernel(kiln_layer_build *b, const char *name, int32_t d0, int32_t d1,
                       int32_t d2)
{
    kiln_param_spec *k = &b->params[b->n_params++];
    k->name = name;
    k->shape.rank = 3;
    k->shape.dims[0] = d0;
    k->shape.dims[1] = d1;
    k->shape.dims[2] = d2;
    k->init = KILN_INIT_GLOROT_UNIFORM;
    k->fan_in = (int64_t)d0 * d1;
    k->fan_out = (int64_t)d0 * d2;
}

static void add_bias(kiln_layer_build *b, const char *name, int32_t rank, int32_t d0,
                     int32_t d1)
{
    kiln_param_spec *p = &b->params[b->n_params++];
    p->name = name;
    p->shape.rank = rank;
    p->shape.dims[0] = d0;
    p->shape.dims[1] = d1;
    p->init = KILN_INIT_ZEROS;
}

static kiln_status check_options(const mha_config *c, char *error, size_t size)
{
    if (c->heads < 1)
        snprintf(error, size, "num_heads must be > 0, got %d", (int)c->heads);
    else if (c->key_dim < 1)
        snprintf(error, size, "key_dim must be > 0, got %d", (int)c->key_dim);
    else if (c->value_dim < 0)
        snprintf(error, size, "value_dim must be >= 0 (0: key_dim), got %d", (int)c->value_dim);
    else if (c->output_shape < 0)
        snprintf(error, size, "output_shape must be >= 0 (0: the query's last dimension), "
                 "got %d", (int)c->output_shape);
    else if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        snprintf(error, size, "dropout must be in [0, 1), got %g", (double)c->dropout);
    else
        return KILN_OK;
    return KILN_ERROR_INVALID_ARGUMENT;
}

/* The largest per-sample buffer forward or backward indexes: every one
 * must fit a kernel's int. */
static int64_t largest_per_sample(const mha_config *c)
{
    const int64_t h = c->heads, t = c->tq > c->tv ? c->tq : c->tv;
    const int64_t width = c->key_dim > c->vdim ? c->key_dim : c->vdim;
    const int64_t probs = h * c->tq * c->tv, rows = t * h * width;
    return probs > rows ? probs : rows;
}

static kiln_status mha_infer(void *config, kiln_layer_build *b)
{
    mha_config *c = config;
    char s0[64], s1[64];
    const kiln_status st = check_options(c, b->error, sizeof b->error);
    if (st != KILN_OK)
        return st;
    for (int k = 0; k < 2; k++)
        if (b->in[k].rank != 2) {
            snprintf(b->error, sizeof b->error, "%s is %s: it must be (sequence, features), "
                     "rank 3 with the batch", k == 0 ? "query" : "value",
                     kiln_shape_str(&b->in[k], s0, sizeof s0));
            return KILN_ERROR_SHAPE;
        }
    c->tq = b->in[0].dims[0];
    c->d = b->in[0].dims[1];
    c->tv = b->in[1].dims[0];
    c->dv = b->in[1].dims[1];
    c->masked = b->n_in == 3;
    if (c->masked && (b->in[2].rank != 1 || b->in[2].dims[0] != c->tv)) {
        snprintf(b->error, sizeof b->error, "the padding mask is %s: it must be (%d,), a flag "
                 "per value position (the value is %s)",
                 kiln_shape_str(&b->in[2], s0, sizeof s0), (int)c->tv,
                 kiln_shape_str(&b->in[1], s1, sizeof s1));
        return KILN_ERROR_SHAPE;
    }
    c->vdim = c->value_dim ? c->value_dim : c->key_dim;
    c->out = c->output_shape ? c->output_shape : c->d;
    const int64_t most = largest_per_sample(c);
    if (most > KILN_MAX_FLOATS) {
        snprintf(b->error, sizeof b->error, "query %s and value %s with %d heads need %lld "
                 "floats per sample for one attention buffer; kiln supports at most %d",
                 kiln_shape_str(&b->in[0], s0, sizeof s0),
                 kiln_shape_str(&b->in[1], s1, sizeof s1), (int)c->heads, (long long)most,
                 KILN_MAX_FLOATS);
        return KILN_ERROR_SHAPE;
    }
    b->out.rank = 2;
    b->out.dims[0] = c->tq;
    b->out.dims[1] = c->out;
    const int32_t in_dim[N_PROJ] = {c->d, c->dv, c->dv, c->heads};
    const int32_t mid[N_PROJ] = {c->heads, c->heads, c->heads, c->vdim};
    const int32_t last[N_PROJ] = {c->key_dim, c->key_dim, c->vdim, c->out};
    for (int p = 0; p < N_PROJ; p++) {
        add_kernel(b, kernel_names[p], in_dim[p], mid[p], last[p]);
        if (c->use_bias) {
            if (p == PROJ_OUTPUT)
                add_bias(b, bias_names[p], 1, c->out, 0);
            else
                add_bias(b, bias_names[p], 2, c->heads, last[p]);
        }
    }
    /* As KerasHub's enable_lora leaves a transformer's attention: the
     * projections it does not adapt freeze whole; an adapted one as Keras
     * 3's EinsumDense.enable_lora: the kernel freezes (its bias trains
     * on), A (kernel's axes but the last, rank) is HeUniform over its fans
     * as add_kernel counts them, B (rank, last) zeros. */
    for (int p = 0; c->lora_rank > 0 && p < N_PROJ; p++) {
        b->params[kernel_index(c, p)].frozen = 1;
        if (!adapted(c, p)) {
            if (c->use_bias)
                b->params[bias_index(p)].frozen = 1;
            continue;
        }
        const double fan_in = (double)in_dim[p] * (double)mid[p];
        b->params[b->n_params++] = (kiln_param_spec){
            .name = lora_a_names[p], .init = KILN_INIT_UNIFORM, .adapter = 1,
            .shape = {.rank = 3, .dims = {in_dim[p], mid[p], c->lora_rank}},
            .init_limit = (float)sqrt(6.0 / fan_in)};
        b->params[b->n_params++] = (kiln_param_spec){
            .name = lora_b_names[p], .init = KILN_INIT_ZEROS, .adapter = 1,
            .shape = {.rank = 2, .dims = {c->lora_rank, last[p]}}};
    }
    return KILN_OK;
}

/* Which projections `targets` names, a bit each (1 << PROJ_*), or -1 with
 * `error` saying why: Keras's sublayer names, comma-separated, each once. */
static int32_t parse_targets(const char *targets, char *error, size_t size)
{
    static const char *const names[N_PROJ] = {"query", "key", "value", "attention_output"};
    const char *known = "query, key, value and attention_output";
    if (!targets[0]) {
        snprintf(error, size, "targets is empty; name one or more of %s, comma-separated",
                 known);
        return -1;
    }
    int32_t on = 0;
    for (const char *at = targets;; at++) {
        const size_t len = strcspn(at, ",");
        int p = 0;
        while (p < N_PROJ && !(strlen(names[p]) == len && strncmp(at, names[p], len) == 0))
            p++;
        if (len == 0) {
            snprintf(error, size, "targets '%s' has an empty name; name one or more of %s, "
                     "comma-separated", targets, known);
            return -1;
        }
        if (p == N_PROJ) {
            snprintf(error, size, "targets '%s' names '%.*s', which is no projection of a "
                     "MultiHeadAttention (%s)", targets, (int)(len < 64 ? len : 64), at, known);
            return -1;
        }
        if (on >> p & 1) {
            snprintf(error, size, "targets '%s' names '%s' twice", targets, names[p]);
            return -1;
        }
        on |= 1 << p;
        at += len;
        if (!*at)
            return on;
    }
}

/* Keras has no MultiHeadAttention.enable_lora of its own; KerasHub's
 * backbones adapt its "query" and "value" EinsumDense layers, the default
 * here; `targets` chooses others, as PEFT's target_modules do. */
static kiln_status mha_enable_lora(void *config, int32_t rank, float alpha, const char *targets,
                                   char *error, size_t size)
{
    mha_config *c = config;
    const int32_t on = targets ? parse_targets(targets, error, size)
                               : 1 << PROJ_QUERY | 1 << PROJ_VALUE;
    if (on < 0)
        return KILN_ERROR_INVALID_ARGUMENT;
    c->lora_rank = rank;
    c->lora_alpha = alpha;
    c->lora_on = on;
    return KILN_OK;
}

static void mha_merge_adapters(const void *config, float *const *params)
{
    const mha_config *c = config;
    for (int p = 0; p < N_PROJ; p++)
        if (adapted(c, p)) {
            const kiln_lora_gemm l = lora_of(c, p, NULL);
            kiln_lora_merge(&l, params[kernel_index(c, p)], params[lora_index(c, p)],
                            params[lora_index(c, p) + 1]);
        }
}

typedef struct mha_replica {
    /* Forward's: projections, probabilities (B, H, Tq, Tv), context. */
    kiln_buffer *q, *k, *v, *probs, *context;
    /* Backward's: their gradients, the scores' (over the probabilities'
     * shape), and a transposed kernel. */
    kiln_buffer *dq, *dk, *dv, *dscores, *dcontext, *kernel_t;
    /* LoRA's x A and dy B^T, for one projection at a time. */
    kiln_buffer *lora_t, *lora_dt;
    /* On the GPU variant probs and backward_scores are one product
     * (kiln_attention_scores_gpu), then the row passes softmax and
     * softmax_backward; on the CPU variant these two are NULL. */
    struct {
        kiln_kernel *probs, *weigh, *weigh_t, *backward_scores, *softmax, *softmax_backward;
    } kernels;
    int tiled;   /* the CPU variant: attention.cl's register tiles */
} mha_replica;

static kiln_status mha_kernels(const void *config, void *replica, kiln_device *dev)
{
    mha_replica *r = replica;
    (void)config;
    /* The GPU variant's groups (GROUP_SIDE^2 items, KILN_ROW_LANES for the
     * row passes) fit any device that runs it: kernel_variant.c gives the
     * GPU variant only to devices whose work-groups hold 256 items. */
    r->tiled = !kiln_device_gpu_kernels(dev);
    kiln_status st = kiln_kernel_get_variant(dev, "attention", "kiln_attention_weigh",
                                             &r->kernels.weigh);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "attention", "kiln_attention_weigh_t",
                                     &r->kernels.weigh_t);
    /* The probabilities and the scores' gradient take different steps in
     * the two variants, so they are no pairs: a kernel each on the CPU
     * variant; on the GPU variant a product both share, then a pass over
     * rows each. */
    if (st == KILN_OK && r->tiled) {
        st = kiln_kernel_get(dev, "attention", "kiln_attention_probs_cpu", &r->kernels.probs);
        if (st == KILN_OK)
            st = kiln_kernel_get(dev, "attention", "kiln_attention_backward_scores_cpu",
                                 &r->kernels.backward_scores);
    } else if (st == KILN_OK) {
        st = kiln_kernel_get(dev, "attention", "kiln_attention_scores_gpu", &r->kernels.probs);
        r->kernels.backward_scores = r->kernels.probs;
        if (st == KILN_OK)
            st = kiln_kernel_get(dev, "attention", "kiln_attention_softmax_gpu",
                                 &r->kernels.softmax);
        if (st == KILN_OK)
            st = kiln_kernel_get(dev, "attention", "kiln_attention_softmax_backward_gpu",
                                 &r->kernels.softmax_backward);
    }
    return st;
}

static size_t blocks_of(size_t n, size_t block)
{
    return (n + block - 1) / block;
}

/* The range of a GPU-variant product over `rows` x `cols` per (sample, head). */
static kiln_range blocks_range(const mha_config *c, const kiln_step *s, size_t rows, size_t cols)
{
    return (kiln_range){.dims = 3,
                        .size = {blocks_of(cols, BLOCK) * GROUP_SIDE,
                                 blocks_of(rows, BLOCK) * GROUP_SIDE,
                                 (size_t)s->batch * (size_t)c->heads},
                        .local = {GROUP_SIDE, GROUP_SIDE, 1}};
}

static kiln_status run_blocks(const mha_config *c, const kiln_step *s, kiln_kernel *kernel,
                              size_t rows, size_t cols, kiln_args a)
{
    const kiln_range range = blocks_range(c, s, rows, cols);
    return kiln_kernel_run_groups(s->dev, kernel, range.dims, range.size, range.local, a);
}

/* The lanes a GPU-variant row pass gives a row of the probabilities: the
 * smallest power of two that covers it, at most KILN_ROW_LANES. */
static int row_width(const mha_config *c)
{
    int width = 1;
    while (width < c->tv && width < KILN_ROW_LANES)
        width *= 2;
    return width;
}

/* A GPU-variant row pass over the B * H * Tq rows of the probabilities,
 * KILN_ROW_LANES / row_width rows a group. */
static kiln_status run_each_row(const mha_config *c, const kiln_step *s, kiln_kernel *kernel,
                                kiln_args a)
{
    const size_t rows = (size_t)s->batch * (size_t)c->heads * (size_t)c->tq;
    const size_t per_group = (size_t)(KILN_ROW_LANES / row_width(c));
    const size_t range = blocks_of(rows, per_group) * KILN_ROW_LANES, local = KILN_ROW_LANES;
    return kiln_kernel_run_groups(s->dev, kernel, 1, &range, &local, a);
}

/* The CPU variant's score kernels (probs, backward_scores): 4 rows each. */
static kiln_status run_tiled_rows(const mha_config *c, const kiln_step *s, kiln_kernel *kernel,
                                  kiln_args a)
{
    const size_t range[2] = {blocks_of((size_t)c->tq, TILE_ROWS),
                             (size_t)s->batch * (size_t)c->heads};
    return kiln_kernel_run(s->dev, kernel, 2, range, a);
}

static void mha_release(void *replica)
{
    mha_replica *r = replica;
    kiln_buffer *const all[] = {r->q, r->k, r->v, r->probs, r->context, r->dq, r->dk,
                                r->dv, r->dscores, r->dcontext, r->kernel_t, r->lora_t,
                                r->lora_dt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        kiln_buffer_destroy(all[i]);
    r->q = r->k = r->v = r->probs = r->context = NULL;
    r->dq = r->dk = r->dv = r->dscores = r->dcontext = r->kernel_t = NULL;
    r->lora_t = r->lora_dt = NULL;
}

static size_t max_size(const size_t *x, int n)
{
    size_t m = 0;
    for (int i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static kiln_status mha_prepare(const void *config, void *replica, kiln_device *dev,
                               const kiln_shape *in_shape, int32_t max_batch)
{
    const mha_config *c = config;
    mha_replica *r = replica;
    (void)in_shape;
    const size_t n = (size_t)max_batch, h = (size_t)c->heads, kd = (size_t)c->key_dim;
    const size_t vd = (size_t)c->vdim;
    const size_t q = n * (size_t)c->tq * h * kd, k = n * (size_t)c->tv * h * kd;
    const size_t v = n * (size_t)c->tv * h * vd, ctx = n * (size_t)c->tq * h * vd;
    const size_t probs = n * h * (size_t)c->tq * (size_t)c->tv;
    const size_t kernels[N_PROJ] = {(size_t)c->d * h * kd, (size_t)c->dv * h * kd,
                                    (size_t)c->dv * h * vd, h * vd * (size_t)c->out};
    struct {
        kiln_buffer **buf;
        size_t floats;
        const char *what;
    } const want[] = {
        {&r->q, q, "attention queries"}, {&r->k, k, "attention keys"},
        {&r->v, v, "attention values"}, {&r->probs, probs, "attention probabilities"},
        {&r->context, ctx, "attention context"}, {&r->dq, q, "attention query gradients"},
        {&r->dk, k, "attention key gradients"}, {&r->dv, v, "attention value gradients"},
        {&r->dscores, probs, "attention score gradients"},
        {&r->dcontext, ctx, "attention context gradients"},
        {&r->kernel_t, max_size(kernels, N_PROJ), "a transposed attention kernel"},
    };
    kiln_status st = KILN_OK;
    for (size_t i = 0; i < sizeof want / sizeof want[0] && st == KILN_OK; i++)
        st = kiln_buffer_create(dev, want[i].floats * sizeof(float), want[i].what, want[i].buf);
    size_t lora = 0;
    for (int p = 0; p < N_PROJ; p++)
        if (adapted(c, p)) {
            const kiln_lora_gemm l = lora_of(c, p, NULL);
            const size_t t = p == PROJ_KEY || p == PROJ_VALUE ? (size_t)c->tv : (size_t)c->tq;
            lora = n * t * l.groups * l.rank > lora ? n * t * l.groups * l.rank : lora;
        }
    if (st == KILN_OK && lora)
        st = kiln_buffer_create(dev, lora * sizeof(float), "a LoRA x A", &r->lora_t);
    if (st == KILN_OK && lora)
        st = kiln_buffer_create(dev, lora * sizeof(float), "a LoRA dy B^T", &r->lora_dt);
    if (st != KILN_OK)
        mha_release(r);
    return st;
}

/* y = x W (+ b) (+ (alpha/r) x A B) over rows of the flat (tokens,
 * features) views. */
static kiln_status project(const mha_config *c, mha_replica *r, const kiln_step *s, int proj,
                           const kiln_buffer *x, size_t rows, size_t in, size_t out,
                           kiln_buffer *y)
{
    kiln_status st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, rows, out, in, 1.0f, x, 0, in,
                               s->params, s->param_offset[kernel_index(c, proj)], out, 0.0f, y,
                               0, out);
    if (st == KILN_OK && c->use_bias)
        st = kiln_bias_add(s->dev, y, rows, out, s->params, s->param_offset[bias_index(proj)],
                           KILN_ACTIVATION_LINEAR);
    if (st == KILN_OK && adapted(c, proj)) {
        const kiln_lora_gemm l = lora_of(c, proj, s->param_offset);
        st = kiln_lora_forward(s, &l, x, rows, r->lora_t, y);
    }
    return st;
}

/* The dropout arguments every attention.cl kernel after the mask takes:
 * the draw dropout.c makes, with this layer's seed. */
#define DROPOUT_ARGS(c, s, rate)                                                              \
    kiln_arg_int((s)->first_sample), kiln_arg_uint((uint32_t)drop_seed(c, s)),                \
        kiln_arg_uint((uint32_t)(drop_seed(c, s) >> 32)),                                     \
        kiln_arg_uint((uint32_t)(s)->step_number), kiln_arg_float(rate)

static uint64_t drop_seed(const mha_config *c, const kiln_step *s)
{
    return s->seed ^ (c->seed * 0x9e3779b97f4a7c15ULL);
}

/* The dropout rate this step applies. */
static float drop_rate(const mha_config *c, const kiln_step *s)
{
    return s->training ? c->dropout : 0.0f;
}

static float score_scale(const mha_config *c)
{
    return (float)(1.0 / sqrt((double)c->key_dim));
}

/* out = w (B, H, Tq, Tv) times src per head (kiln_attention_weigh_*), or its
 * transpose (weigh_t), X values per head. */
static kiln_status weigh(const mha_config *c, const mha_replica *r, const kiln_step *s,
                         int transposed, const kiln_buffer *w, const kiln_buffer *src,
                         kiln_buffer *out, int32_t X, float rate)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(w), kiln_arg_buffer(src), kiln_arg_buffer(out),
                            kiln_arg_int(s->batch), kiln_arg_int(c->heads), kiln_arg_int(c->tq),
                            kiln_arg_int(c->tv), kiln_arg_int(X), kiln_arg_int(c->causal),
                            DROPOUT_ARGS(c, s, rate));
    const size_t rows = (size_t)(transposed ? c->tv : c->tq);
    kiln_kernel *kernel = transposed ? r->kernels.weigh_t : r->kernels.weigh;
    const kiln_range cpu = {.dims = 2,
                            .size = {(size_t)c->heads * blocks_of((size_t)X, TILE_VALUES),
                                     (size_t)s->batch * blocks_of(rows, TILE_ROWS)}};
    const kiln_range gpu = blocks_range(c, s, rows, (size_t)X);
    return kiln_kernel_run_variant(s->dev, kernel, &cpu, &gpu, a);
}

/* The padding mask the softmax reads: the third input, or (none, never
 * read) the queries, which stand in for a buffer the kernel must be given. */
#define MASK_ARGS(c, r, s)                                                                    \
    kiln_arg_buffer((c)->masked ? (s)->in[2] : (r)->q), kiln_arg_int((c)->masked)

/* The probabilities: p = softmax over j of scale q_i . k_j, masked. */
static kiln_status probabilities(const mha_config *c, const mha_replica *r, const kiln_step *s)
{
    if (r->tiled) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(r->q), kiln_arg_buffer(r->k),
                                kiln_arg_buffer(r->probs), kiln_arg_int(s->batch),
                                kiln_arg_int(c->heads), kiln_arg_int(c->tq),
                                kiln_arg_int(c->tv), kiln_arg_int(c->key_dim),
                                kiln_arg_float(score_scale(c)), kiln_arg_int(c->causal),
                                MASK_ARGS(c, r, s));
        return run_tiled_rows(c, s, r->kernels.probs, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(r->q), kiln_arg_buffer(r->k),
                            kiln_arg_buffer(r->probs), kiln_arg_int(s->batch),
                            kiln_arg_int(c->heads), kiln_arg_int(c->tq), kiln_arg_int(c->tv),
                            kiln_arg_int(c->key_dim), kiln_arg_float(score_scale(c)),
                            kiln_arg_int(c->causal), DROPOUT_ARGS(c, s, 0.0f));
    kiln_status st = run_blocks(c, s, r->kernels.probs, (size_t)c->tq, (size_t)c->tv, a);
    const int64_t rows = (int64_t)s->batch * c->heads * c->tq;
    kiln_args each = KILN_ARGS(kiln_arg_buffer(r->probs), kiln_arg_int(rows),
                               kiln_arg_int(c->heads), kiln_arg_int(c->tq), kiln_arg_int(c->tv),
                               kiln_arg_int(c->causal), kiln_arg_int(row_width(c)),
                               MASK_ARGS(c, r, s));
    if (st == KILN_OK)
        st = run_each_row(c, s, r->kernels.softmax, each);
    return st;
}

/* The scores' gradient ds from dc: dp_j = keep_j dc_i . v_j, then
 * ds_j = scale p_j (dp_j - sum_l p_l dp_l). */
static kiln_status score_gradients(const mha_config *c, const mha_replica *r,
                                   const kiln_step *s, float rate)
{
    if (r->tiled) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(r->probs), kiln_arg_buffer(r->dcontext),
                                kiln_arg_buffer(r->v), kiln_arg_buffer(r->dscores),
                                kiln_arg_int(s->batch), kiln_arg_int(c->heads),
                                kiln_arg_int(c->tq), kiln_arg_int(c->tv), kiln_arg_int(c->vdim),
                                kiln_arg_float(score_scale(c)), kiln_arg_int(c->causal),
                                DROPOUT_ARGS(c, s, rate));
        return run_tiled_rows(c, s, r->kernels.backward_scores, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(r->dcontext), kiln_arg_buffer(r->v),
                            kiln_arg_buffer(r->dscores), kiln_arg_int(s->batch),
                            kiln_arg_int(c->heads), kiln_arg_int(c->tq), kiln_arg_int(c->tv),
                            kiln_arg_int(c->vdim), kiln_arg_float(1.0f), kiln_arg_int(c->causal),
                            DROPOUT_ARGS(c, s, rate));
    kiln_status st = run_blocks(c, s, r->kernels.backward_scores, (size_t)c->tq,
                                (size_t)c->tv, a);
    const int64_t rows = (int64_t)s->batch * c->heads * c->tq;
    kiln_args each = KILN_ARGS(kiln_arg_buffer(r->probs), kiln_arg_buffer(r->dscores),
                               kiln_arg_int(rows), kiln_arg_int(c->tq), kiln_arg_int(c->tv),
                               kiln_arg_float(score_scale(c)), kiln_arg_int(c->causal),
                               kiln_arg_int(row_width(c)));
    if (st == KILN_OK)
        st = run_each_row(c, s, r->kernels.softmax_backward, each);
    return st;
}

static kiln_status mha_forward(const void *config, void *replica, const kiln_step *s)
{
    const mha_config *c = config;
    mha_replica *r = replica;
    const size_t bq = (size_t)s->batch * (size_t)c->tq, bv = (size_t)s->batch * (size_t)c->tv;
    const size_t hk = (size_t)c->heads * (size_t)c->key_dim;
    const size_t hv = (size_t)c->heads * (size_t)c->vdim;
    kiln_status st = project(c, r, s, PROJ_QUERY, s->in[0], bq, (size_t)c->d, hk, r->q);
    if (st == KILN_OK)
        st = project(c, r, s, PROJ_KEY, s->in[1], bv, (size_t)c->dv, hk, r->k);
    if (st == KILN_OK)
        st = project(c, r, s, PROJ_VALUE, s->in[1], bv, (size_t)c->dv, hv, r->v);
    if (st == KILN_OK)
        st = probabilities(c, r, s);
    if (st == KILN_OK)
        st = weigh(c, r, s, 0, r->probs, r->v, r->context, c->vdim, drop_rate(c, s));
    if (st == KILN_OK)
        st = project(c, r, s, PROJ_OUTPUT, r->context, bq, hv, (size_t)c->out, s->out);
    return st;
}

/* The gradients of projection `proj` (y = x W + b) from dy: dW and db
 * (unless frozen), and dx = dy W^T written or added. With LoRA the
 * adapters' instead of dW, and their share of dx. */
static kiln_status project_backward(const mha_config *c, mha_replica *r, const kiln_step *s,
                                    int proj, const kiln_buffer *x, size_t rows, size_t in,
                                    size_t out, const kiln_buffer *dy, kiln_buffer *dx,
                                    int accumulate)
{
    const size_t w = s->param_offset[kernel_index(c, proj)];
    const int lora = adapted(c, proj);
    const kiln_lora_gemm l = lora ? lora_of(c, proj, s->param_offset) : (kiln_lora_gemm){0};
    kiln_status st = KILN_OK;
    if (lora)   /* also dy B^T, which dx needs */
        st = kiln_lora_backward(s, &l, x, rows, dy, r->lora_t, r->lora_dt);
    /* Under LoRA a projection left unadapted is frozen whole: no gradient. */
    if (st == KILN_OK && !s->frozen && (lora || c->lora_rank == 0)) {
        if (!lora)
            st = kiln_gemm(s->dev, KILN_GEMM_T, KILN_GEMM_N, in, out, rows, 1.0f, x, 0, in, dy,
                           0, out, 0.0f, s->grads, w, out);
        if (st == KILN_OK && c->use_bias)
            st = kiln_column_sum(s->dev, dy, rows, out, s->grads,
                                 s->param_offset[bias_index(proj)], 0);
    }
    if (st != KILN_OK || !dx)
        return st;
    /* A plain GEMM on W^T, as dense.c does (kiln_transpose says why). */
    st = kiln_transpose(s->dev, s->params, w, in, out, r->kernel_t);
    if (st == KILN_OK)
        st = kiln_gemm(s->dev, KILN_GEMM_N, KILN_GEMM_N, rows, in, out, 1.0f, dy, 0, out,
                       r->kernel_t, 0, in, accumulate ? 1.0f : 0.0f, dx, 0, in);
    if (st == KILN_OK && lora)
        st = kiln_lora_input_gradient(s, &l, r->lora_dt, rows, dx);
    return st;
}

static kiln_status mha_backward(const void *config, void *replica, const kiln_step *s)
{
    const mha_config *c = config;
    mha_replica *r = replica;
    const size_t bq = (size_t)s->batch * (size_t)c->tq, bv = (size_t)s->batch * (size_t)c->tv;
    const size_t hk = (size_t)c->heads * (size_t)c->key_dim;
    const size_t hv = (size_t)c->heads * (size_t)c->vdim;
    const float rate = drop_rate(c, s);
    kiln_status st = project_backward(c, r, s, PROJ_OUTPUT, r->context, bq, hv, (size_t)c->out,
                                      s->d_out, r->dcontext, 0);
    if (st == KILN_OK)
        st = score_gradients(c, r, s, rate);
    if (st == KILN_OK)   /* dv = (p with its dropout)^T dc */
        st = weigh(c, r, s, 1, r->probs, r->dcontext, r->dv, c->vdim, rate);
    if (st == KILN_OK)   /* dq = ds k */
        st = weigh(c, r, s, 0, r->dscores, r->k, r->dq, c->key_dim, 0.0f);
    if (st == KILN_OK)   /* dk = ds^T q */
        st = weigh(c, r, s, 1, r->dscores, r->q, r->dk, c->key_dim, 0.0f);
    /* Input 0 first, then input 1: when both are one node the runtime asks
     * the second to add to what the first wrote. */
    if (st == KILN_OK)
        st = project_backward(c, r, s, PROJ_QUERY, s->in[0], bq, (size_t)c->d, hk, r->dq,
                              s->d_in[0], s->d_in_accumulate[0]);
    if (st == KILN_OK)
        st = project_backward(c, r, s, PROJ_KEY, s->in[1], bv, (size_t)c->dv, hk, r->dk,
                              s->d_in[1], s->d_in_accumulate[1]);
    if (st == KILN_OK)
        st = project_backward(c, r, s, PROJ_VALUE, s->in[1], bv, (size_t)c->dv, hv, r->dv,
                              s->d_in[1], 1);
    /* The mask only chooses what is seen: its gradient is 0. */
    if (st == KILN_OK && c->masked && s->d_in[2] && !s->d_in_accumulate[2])
        st = kiln_buffer_zero(s->dev, s->d_in[2], 0, (size_t)s->batch * (size_t)c->tv *
                                                         sizeof(float));
    return st;
}

static uint64_t mha_flops(const void *config, const kiln_shape *in_shape)
{
    const mha_config *c = config;
    (void)in_shape;
    const uint64_t h = (uint64_t)c->heads, kd = (uint64_t)c->key_dim, vd = (uint64_t)c->vdim;
    const uint64_t tq = (uint64_t)c->tq, tv = (uint64_t)c->tv;
    const uint64_t projections = tq * (uint64_t)c->d * h * kd +
                                 tv * (uint64_t)c->dv * h * (kd + vd) +
                                 tq * h * vd * (uint64_t)c->out;
    uint64_t lora = 0;
    for (int p = 0; p < N_PROJ; p++)
        if (adapted(c, p)) {
            const kiln_lora_gemm l = lora_of(c, p, NULL);
            lora += (p == PROJ_KEY || p == PROJ_VALUE ? tv : tq) * kiln_lora_flops(&l);
        }
    return 2u * (projections + lora + h * tq * tv * (kd + vd));
}

/* args: the kiln_multi_head_attention_options the builder copied. */
static void mha_configure(void *config, const void *args)
{
    const kiln_multi_head_attention_options *o = args;
    *(mha_config *)config = (mha_config){
        .heads = o->num_heads, .key_dim = o->key_dim, .value_dim = o->value_dim,
        .output_shape = o->output_shape, .dropout = o->dropout, .seed = o->seed,
        .causal = o->use_causal_mask != 0, .use_bias = !o->no_bias,
    };
}

static void mha_describe(const void *config, void *args)
{
    const mha_config *c = config;
    kiln_multi_head_attention_options *o = args;
    o->num_heads = c->heads;
    o->key_dim = c->key_dim;
    o->value_dim = c->value_dim;
    o->output_shape = c->output_shape;
    o->dropout = c->dropout;
    o->seed = c->seed;
    o->use_causal_mask = c->causal;
    o->no_bias = !c->use_bias;
}

/* Keras's MultiHeadAttention config keys; value_dim and output_shape 0
 * mean their defaults, as in the options. */
static const kiln_layer_field mha_fields[] = {
    {.key = "num_heads", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_multi_head_attention_options, num_heads)},
    {.key = "key_dim", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_multi_head_attention_options, key_dim)},
    {.key = "value_dim", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_multi_head_attention_options, value_dim)},
    {.key = "dropout", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_multi_head_attention_options, dropout)},
    {.key = "seed", .type = KILN_FIELD_SEED,
     .offset = offsetof(kiln_multi_head_attention_options, seed)},
    {.key = "use_causal_mask", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_multi_head_attention_options, use_causal_mask)},
    {.key = "use_bias", .type = KILN_FIELD_NOT_BOOL,
     .offset = offsetof(kiln_multi_head_attention_options, no_bias)},
    {.key = "output_shape", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_multi_head_attention_options, output_shape)},
};

/* (batch, T, heads x dim) -> (batch, heads, T, dim), or (batch, heads,
 * dim, T) for the keys, which the scores multiply transposed. */
static const char *split_heads(kiln_onnx_graph *g, int32_t i, const char *x, int64_t t,
                               int64_t heads, int64_t dim, int keys, const char *what)
{
    const int64_t shape[4] = {0, t, heads, dim};
    const int64_t perm[4] = {0, 2, keys ? 3 : 1, keys ? 1 : 3};
    const char *name = g->layers[i].name;
    const char *args[2] = {x, kiln_onnx_int64s(g, i, kiln_onnx_printf(g, "%s_shape", what),
                                               shape, 4)};
    const char *split = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s_heads", name, what));
    kiln_onnx_add_node(g, "Reshape", args, 2, split);
    const char *out = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s_by_head", name, what));
    kiln_onnx_attr_ints(g, kiln_onnx_add_node(g, "Transpose", &split, 1, out), "perm", perm, 4);
    return out;
}

/* x W + b with a Keras kernel as the matrix it is in memory: (in, heads,
 * dim) as (in, heads x dim), the output's (heads, dim, out) as (heads x
 * dim, out); the bias flat; each under its parameter's name (an imported
 * one's own). `proj` is Keras's name; out NULL: a name of the layer's. */
static const char *projection(kiln_onnx_graph *g, int32_t i, const char *x, const char *proj,
                              const char *out)
{
    const char *name = g->layers[i].name;
    const kiln_param_spec *spec;
    const float *w = kiln_onnx_param(g, i, kiln_onnx_printf(g, "%s/kernel", proj), &spec);
    if (!w)
        return NULL;
    const int64_t size = kiln_shape_size(&spec->shape);
    const int64_t cols = strcmp(proj, "attention_output") == 0
                             ? spec->shape.dims[spec->shape.rank - 1]
                             : size / spec->shape.dims[0];
    const int64_t rows = size / cols, dims[2] = {rows, cols}, back[2] = {cols, rows};
    const char *kernel = kiln_onnx_printf(g, "%s/kernel", proj);
    const char *args[2] = {x, NULL};
    if (g->layers[i].param_transposed[spec - g->layers[i].params]) {
        /* Imported from PyTorch's (out, in) weights: written back so, under
         * the parameter's name, and transposed as PyTorch writes a Linear. */
        float *t = kiln_onnx_alloc(g, (size_t)size * sizeof *t);
        if (!t)
            return NULL;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                t[c * rows + r] = w[r * cols + c];
        const char *held = kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, kernel), 2, back, t);
        args[1] = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s/kernel_t", name, proj));
        kiln_onnx_attr_ints(g, kiln_onnx_add_node(g, "Transpose", &held, 1, args[1]), "perm",
                            (const int64_t[]){1, 0}, 2);
    } else {
        args[1] = kiln_onnx_add_floats(g, kiln_onnx_param_name(g, i, kernel), 2, dims, w);
    }
    const float *b = kiln_onnx_param(g, i, kiln_onnx_printf(g, "%s/bias", proj), NULL);
    const char *product = b || !out
                              ? kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s", name, proj))
                              : out;
    kiln_onnx_add_node(g, "MatMul", args, 2, product);
    if (!b)
        return product;
    const char *sum[2] = {product, kiln_onnx_add_floats(g, kiln_onnx_param_name(
                                                           g, i, kiln_onnx_printf(g, "%s/bias",
                                                                                  proj)),
                                                       1, &cols, b)};
    const char *biased = out ? out : kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/%s_biased",
                                                                               name, proj));
    kiln_onnx_add_node(g, "Add", sum, 2, biased);
    return biased;
}

/* MatMul per head, in kiln's order of arithmetic: the scores times the
 * scale, the causal mask added as a constant (a large negative where
 * j > i, which the softmax turns into 0, as Keras's), the padding mask's
 * (below), Softmax over the values. Dropout is fit's only. */
static void mha_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *name = g->layers[i].name;
    kiln_multi_head_attention_options o;
    memset(&o, 0, sizeof o);
    mha_describe(g->layers[i].config, &o);
    const kiln_param_spec *q_spec, *v_spec;
    if (!kiln_onnx_param(g, i, "query/kernel", &q_spec) ||
        !kiln_onnx_param(g, i, "value/kernel", &v_spec))
        return;
    const int64_t heads = q_spec->shape.dims[1], kd = q_spec->shape.dims[2];
    const int64_t vd = v_spec->shape.dims[2];
    const int64_t tq = kiln_onnx_input_shape(g, i, 0)->dims[0];
    const int64_t tv = kiln_onnx_input_shape(g, i, 1)->dims[0];
    const char *xq = kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL);
    const char *xv = kiln_onnx_input_value(g, i, 1, KILN_ONNX_CL);
    const char *q = split_heads(g, i, projection(g, i, xq, "query", NULL), tq, heads, kd, 0,
                                "query");
    const char *k = split_heads(g, i, projection(g, i, xv, "key", NULL), tv, heads, kd, 1,
                                "key");
    const char *v = split_heads(g, i, projection(g, i, xv, "value", NULL), tv, heads, vd, 0,
                                "value");
    float *scale = kiln_onnx_alloc(g, sizeof *scale);
    if (!scale)
        return;
    *scale = (float)(1.0 / sqrt((double)kd));   /* the layer's */
    const char *dot = kiln_onnx_step(g, i, "MatMul", q, k, "dot");
    const char *scores = kiln_onnx_step(g, i, "Mul", dot,
                                        kiln_onnx_add_floats(g, kiln_onnx_printf(g, "%s/scale",
                                                                                 name),
                                                             0, NULL, scale),
                                        "scores");
    if (o.use_causal_mask) {
        float *mask = kiln_onnx_alloc(g, (size_t)(tq * tv) * sizeof *mask);
        if (!mask)
            return;
        for (int64_t r = 0; r < tq; r++)
            for (int64_t c = 0; c < tv; c++)
                mask[r * tv + c] = c <= r ? 0.0f : -1e30f;
        const int64_t dims[2] = {tq, tv};
        const char *masks = kiln_onnx_add_floats(g, kiln_onnx_printf(g, "%s/causal_mask", name),
                                                 2, dims, mask);
        scores = kiln_onnx_step(g, i, "Add", scores, masks, "masked_scores");
    }
    const char *keep = NULL;
    if (g->layers[i].n_inputs == 3) {
        /* keep (N, 1, 1, Tv) where the padding mask is 0; -1e30 added
         * elsewhere, which the softmax turns into 0, and a row of padding
         * (uniform there) multiplied by keep to 0, as the layer gives. */
        const int64_t shape[4] = {0, 1, 1, tv};
        const char *flags = kiln_onnx_input_value(g, i, 2, KILN_ONNX_CL);
        const char *pad = kiln_onnx_step(g, i, "Reshape", flags,
                                         kiln_onnx_int64s(g, i, "padding_shape", shape, 4),
                                         "padding");
        const char *open = kiln_onnx_step(g, i, "Equal", pad, kiln_onnx_constant(g, "zero", 0.0f),
                                          "unpadded");
        keep = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/keep", name));
        kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Cast", &open, 1, keep), "to",
                           KILN_ONNX_FLOAT);
        const char *off = kiln_onnx_step(g, i, "Sub", keep, kiln_onnx_constant(g, "one", 1.0f),
                                         "padded");
        const char *bias = kiln_onnx_step(g, i, "Mul", off,
                                          kiln_onnx_constant(g, "padding_size", 1e30f),
                                          "padding_bias");
        scores = kiln_onnx_step(g, i, "Add", scores, bias, "unpadded_scores");
    }
    const char *probs = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/probabilities", name));
    kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Softmax", &scores, 1, probs), "axis", -1);
    if (keep)
        probs = kiln_onnx_step(g, i, "Mul", probs, keep, "kept_probabilities");
    const char *by_head = kiln_onnx_step(g, i, "MatMul", probs, v, "context_by_head");
    const int64_t perm[4] = {0, 2, 1, 3}, merged[3] = {0, tq, heads * vd};
    const char *context = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/context_heads", name));
    kiln_onnx_attr_ints(g, kiln_onnx_add_node(g, "Transpose", &by_head, 1, context), "perm", perm,
                        4);
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    const char *flat = kiln_onnx_step(g, i, "Reshape", context,
                                      kiln_onnx_int64s(g, i, "context_shape", merged, 3),
                                      "context");
    projection(g, i, flat, "attention_output", out);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_multi_head_attention = {
    .kind = "multi_head_attention", .config_size = sizeof(mha_config),
    .replica_size = sizeof(mha_replica), .min_inputs = 2, .max_inputs = 3,
    .configure = mha_configure, .describe = mha_describe, .infer = mha_infer,
    .kernels = mha_kernels, .prepare = mha_prepare, .forward = mha_forward,
    .backward = mha_backward, .release = mha_release, .flops = mha_flops,
    .args_size = sizeof(kiln_multi_head_attention_options), KILN_FIELDS(mha_fields),
    .export_onnx = mha_export_onnx,
    .enable_lora = mha_enable_lora, .merge_adapters = mha_merge_adapters,
    .writes_trainable_gradients_only = 1,
};
