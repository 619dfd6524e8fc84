#include "runtime/model/clip.h"
#include "runtime/model/model.h"

#include <math.h>
#include <string.h>

/* Floats a work-group of clip.cl sums (64 each for its 64 lanes). */
#define CHUNK 4096

struct kiln_clip {
    kiln_context *ctx;
    kiln_device *dev;
    kiln_clip_mode mode;
    float limit;
    size_t n;                    /* floats of the range */
    int32_t n_chunks, n_tensors;
    kiln_buffer *chunks;         /* {offset, count, tensor} per chunk */
    kiln_buffer *partial;        /* a chunk's squares (8 bytes each) */
    kiln_buffer *tensor_squares; /* a tensor's (8 bytes each) */
    kiln_buffer *total;          /* the range's, then its size (clip.cl) */
    int acc_bytes;               /* 8 or 4, read back with the total */
};

kiln_clip_mode kiln_clip_mode_of(const kiln_optimizer_options *o, float *limit)
{
    *limit = o->clipnorm > 0.0f ? o->clipnorm : o->clipvalue > 0.0f ? o->clipvalue
                                                                    : o->global_clipnorm;
    return o->clipnorm > 0.0f ? KILN_CLIP_NORM : o->clipvalue > 0.0f ? KILN_CLIP_VALUE
                              : o->global_clipnorm > 0.0f ? KILN_CLIP_GLOBAL : KILN_CLIP_OFF;
}

kiln_status kiln_clip_check(kiln_context *ctx, const kiln_optimizer_options *o)
{
    const struct {
        const char *name;
        float value;
    } settings[] = {
        {.name = "clipnorm", .value = o->clipnorm},
        {.name = "clipvalue", .value = o->clipvalue},
        {.name = "global_clipnorm", .value = o->global_clipnorm},
    };
    int set = 0;
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        if (!(settings[i].value >= 0.0f) || !isfinite(settings[i].value))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "optimizer: %s is %g, not a finite number >= 0 (0: no clipping)",
                              settings[i].name, settings[i].value);
        set += settings[i].value > 0.0f;
    }
    if (set > 1)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "optimizer: only one of clipnorm (%g), clipvalue (%g) and "
                          "global_clipnorm (%g) can be set, as in Keras", o->clipnorm,
                          o->clipvalue, o->global_clipnorm);
    return KILN_OK;
}

/* Calls f(user, offset, count) for each trainable tensor in [begin, end),
 * in the flat layout's order. */
static void each_tensor(const kiln_model *m, size_t begin, size_t end,
                        void (*f)(void *user, size_t offset, size_t count), void *user)
{
    size_t at = begin;
    while (at < end) {
        size_t next = end, count = 0;
        for (int32_t i = 0; i < m->graph.n_nodes; i++) {
            const kiln_node_rec *node = &m->graph.nodes[i];
            for (int p = 0; p < node->n_params; p++) {
                const size_t off = node->param_offset[p];
                if (kiln_param_frozen(node, p) || node->params[p].non_trainable || off < at ||
                    off >= next)
                    continue;
                next = off;
                count = (size_t)kiln_shape_size(&node->params[p].shape);
            }
        }
        if (next < end && count > 0)
            f(user, next, count);
        at = next + (count > 0 ? count : 1);
    }
}

typedef struct chunk_table {
    size_t begin;
    int32_t *rows;               /* NULL: count only */
    int32_t n_chunks, n_tensors;
} chunk_table;

static void add_chunks(void *user, size_t offset, size_t count)
{
    chunk_table *t = user;
    for (size_t done = 0; done < count; done += CHUNK) {
        if (t->rows) {
            int32_t *row = t->rows + 3 * (size_t)t->n_chunks;
            row[0] = (int32_t)(offset - t->begin + done);
            row[1] = (int32_t)(count - done < CHUNK ? count - done : CHUNK);
            row[2] = t->n_tensors;
        }
        t->n_chunks++;
    }
    t->n_tensors++;
}

kiln_status kiln_clip_create(const kiln_model *m, kiln_device *dev, size_t begin, size_t end,
                             kiln_clip **out)
{
    *out = NULL;
    float limit;
    const kiln_clip_mode mode = kiln_clip_mode_of(&m->plan.optimizer, &limit);
    chunk_table t = {.begin = begin};
    if (mode == KILN_CLIP_OFF)
        return KILN_OK;
    each_tensor(m, begin, end, add_chunks, &t);
    if (t.n_tensors == 0)
        return KILN_OK;
    kiln_clip *c = kiln_calloc(m->ctx, 1, sizeof *c);
    if (!c)
        return kiln_error_oom(m->ctx, "gradient clipping", sizeof *c);
    *c = (kiln_clip){.ctx = m->ctx, .dev = dev, .mode = mode, .limit = limit,
                     .n = end - begin, .n_chunks = t.n_chunks, .n_tensors = t.n_tensors};
    kiln_status st = KILN_OK;
    if (mode != KILN_CLIP_VALUE) {
        const size_t rows = 3 * (size_t)t.n_chunks * sizeof(int32_t);
        t.rows = kiln_calloc(m->ctx, 3 * (size_t)t.n_chunks, sizeof(int32_t));
        if (!t.rows)
            st = kiln_error_oom(m->ctx, "gradient clipping's table", rows);
        t.n_chunks = t.n_tensors = 0;
        if (st == KILN_OK)
            each_tensor(m, begin, end, add_chunks, &t);
        if (st == KILN_OK)
            st = kiln_buffer_create(dev, rows, "clipping table", &c->chunks);
        if (st == KILN_OK)
            st = kiln_buffer_write(dev, c->chunks, 0, t.rows, rows, 1);
        if (st == KILN_OK)
            st = kiln_buffer_create(dev, (size_t)t.n_chunks * 8, "clipping sums", &c->partial);
        if (st == KILN_OK)
            st = kiln_buffer_create(dev, (size_t)t.n_tensors * 8, "clipping sums",
                                    &c->tensor_squares);
        if (st == KILN_OK)
            st = kiln_buffer_create(dev, 16, "clipping sums", &c->total);
        kiln_free(m->ctx, t.rows);
    }
    if (st != KILN_OK) {
        kiln_clip_destroy(c);
        return st;
    }
    *out = c;
    return KILN_OK;
}

void kiln_clip_destroy(kiln_clip *c)
{
    if (!c)
        return;
    kiln_buffer_destroy(c->chunks);
    kiln_buffer_destroy(c->partial);
    kiln_buffer_destroy(c->tensor_squares);
    kiln_buffer_destroy(c->total);
    kiln_free(c->ctx, c);
}

size_t kiln_clip_bytes(const kiln_clip *c)
{
    if (!c || !c->chunks)
        return 0;
    return kiln_buffer_bytes(c->chunks) + kiln_buffer_bytes(c->partial) +
           kiln_buffer_bytes(c->tensor_squares) + kiln_buffer_bytes(c->total);
}

/* clip.cl's work-groups: KILN_ROW_LANES, or the largest power of two the
 * device's groups hold. */
static size_t lanes_of(const kiln_clip *c)
{
    size_t lanes = KILN_ROW_LANES;
    while (lanes > kiln_device_max_work_group(c->dev))
        lanes /= 2;
    return lanes;
}

kiln_status kiln_clip_measure(kiln_clip *c, const kiln_buffer *grads)
{
    if (c->mode == KILN_CLIP_VALUE)
        return KILN_OK;
    const size_t lanes[] = {lanes_of(c)};
    const size_t groups[] = {(size_t)c->n_chunks * lanes[0]};
    kiln_status st = kiln_run_groups(c->dev, "clip", "kiln_clip_squares", 1, groups, lanes,
                                     KILN_ARGS(kiln_arg_buffer(grads), kiln_arg_buffer(c->chunks),
                                               kiln_arg_buffer(c->partial)));
    if (st == KILN_OK)
        st = kiln_run1(c->dev, "clip", "kiln_clip_sums", 1,
                       KILN_ARGS(kiln_arg_buffer(c->partial), kiln_arg_buffer(c->chunks),
                                 kiln_arg_int(c->n_chunks), kiln_arg_buffer(c->tensor_squares),
                                 kiln_arg_buffer(c->total)));
    return st;
}

kiln_status kiln_clip_read_squares(kiln_clip *c, double *squares)
{
    unsigned char total[16];
    int32_t size;
    *squares = 0.0;
    const kiln_status st = kiln_buffer_read(c->dev, c->total, 0, total, sizeof total);
    if (st != KILN_OK)
        return st;
    memcpy(&size, total + 8, sizeof size);
    c->acc_bytes = size;
    if (size == (int32_t)sizeof(double)) {
        memcpy(squares, total, sizeof *squares);
    } else {
        float f;
        memcpy(&f, total, sizeof f);
        *squares = f;
    }
    return KILN_OK;
}

kiln_status kiln_clip_set_squares(kiln_clip *c, double squares)
{
    unsigned char total[16];
    const float f = (float)squares;
    memset(total, 0, sizeof total);
    if (c->acc_bytes == (int)sizeof(double))
        memcpy(total, &squares, sizeof squares);
    else
        memcpy(total, &f, sizeof f);
    memcpy(total + 8, &c->acc_bytes, sizeof c->acc_bytes);
    return kiln_buffer_write(c->dev, c->total, 0, total, sizeof total, 1);
}

kiln_status kiln_clip_scale(kiln_clip *c, kiln_buffer *grads)
{
    if (c->mode == KILN_CLIP_VALUE)
        return kiln_run1(c->dev, "clip", "kiln_clip_value", c->n,
                         KILN_ARGS(kiln_arg_buffer(grads), kiln_arg_int((int64_t)c->n),
                                   kiln_arg_float(c->limit)));
    const size_t lanes[] = {lanes_of(c)};
    const size_t groups[] = {(size_t)c->n_chunks * lanes[0]};
    return kiln_run_groups(c->dev, "clip", "kiln_clip_scale", 1, groups, lanes,
                           KILN_ARGS(kiln_arg_buffer(grads), kiln_arg_buffer(c->chunks),
                                     kiln_arg_buffer(c->tensor_squares),
                                     kiln_arg_buffer(c->total), kiln_arg_int((int)c->mode),
                                     kiln_arg_float(c->limit)));
}

kiln_status kiln_clip_gradients(kiln_clip *c, kiln_buffer *grads)
{
    kiln_status st = kiln_clip_measure(c, grads);
    return st == KILN_OK ? kiln_clip_scale(c, grads) : st;
}

/* The host's clip, tensor by tensor: the squares first, then the factors. */
typedef struct host_clip {
    float *g;
    kiln_clip_mode mode;
    double limit, squares;
    int pass;                    /* 0: sum the squares, 1: scale */
} host_clip;

static double tensor_squares(const float *g, size_t count)
{
    double s = 0.0;
    for (size_t i = 0; i < count; i++)
        s += (double)g[i] * (double)g[i];
    return s;
}

static void host_tensor(void *user, size_t offset, size_t count)
{
    host_clip *h = user;
    float *g = h->g + offset;
    if (h->mode == KILN_CLIP_VALUE) {
        const float v = (float)h->limit;
        for (size_t i = 0; i < count; i++)
            g[i] = fminf(fmaxf(g[i], -v), v);
        return;
    }
    if (h->mode == KILN_CLIP_GLOBAL && h->pass == 0) {
        h->squares += tensor_squares(g, count);
        return;
    }
    const double norm = sqrt(h->mode == KILN_CLIP_NORM ? tensor_squares(g, count) : h->squares);
    const float f = (float)(h->mode == KILN_CLIP_NORM ? h->limit / fmax(norm, h->limit)
                                                      : fmin(1.0, h->limit / (norm + 1e-6)));
    for (size_t i = 0; i < count; i++)
        g[i] *= f;
}

void kiln_clip_host(const kiln_model *m, float *g)
{
    float limit;
    host_clip h = {.g = g, .mode = kiln_clip_mode_of(&m->plan.optimizer, &limit)};
    h.limit = limit;
    if (h.mode == KILN_CLIP_OFF)
        return;
    for (h.pass = h.mode == KILN_CLIP_GLOBAL ? 0 : 1; h.pass < 2; h.pass++)
        each_tensor(m, 0, m->plan.n_trainable_floats, host_tensor, &h);
}
