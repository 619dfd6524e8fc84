/* Runs one layer on a device through a real replica and hands back its
 * inputs, outputs and gradients as float64, for comparison with
 * test/common/reference.c. The model is Input -> Activation(linear) "pre" -> layer,
 * so the layer's input gradient lands in "pre"'s gradient buffer; with
 * check_inner, -> Activation(linear) "post" after it, so the layer is not the
 * model's output and applies its own activation where it can (fused). */
#ifndef KILN_TEST_LAYER_CHECK_H
#define KILN_TEST_LAYER_CHECK_H

#include "harness.h"
#include "runtime/model/model.h"
#include "runtime/parallel/replica.h"

#define CHECK_MAX_PARAMS 8

typedef kiln_node (*build_fn)(kiln_model *m, kiln_node pre, const void *arg);

typedef struct layer_run {
    int batch;
    int64_t in_size, out_size;        /* per sample */
    double *x, *y, *dy, *dx;          /* batch * size */
    int n_params;
    double *params[CHECK_MAX_PARAMS]; /* as the layer sees them */
    double *params_after[CHECK_MAX_PARAMS];  /* after forward and backward (moving statistics) */
    double *dparams[CHECK_MAX_PARAMS];
    int64_t param_size[CHECK_MAX_PARAMS];
} layer_run;

static uint64_t check_rng_state = 88172645463325252ULL;

/* 0: run forward as evaluate does (no backward, dx and dparams left 0). */
static int check_training = 1;
/* 1: the layer feeds a "post" node instead of being the output. */
static int check_inner = 0;
/* 1: the model's output is Add(layer (or "post"), "pre"), so that two
 * layers write "pre"'s gradient and the layer's backward adds to what the
 * Add wrote first (the add to an input gradient every residual block
 * makes). The layer's output must have "pre"'s shape. */
static int check_residual = 0;
/* The inputs are uniform in [-check_input_scale, check_input_scale). */
static double check_input_scale = 1.0;
/* ... plus check_input_offset (large: rounding that a shift must avoid). */
static double check_input_offset = 0.0;
/* Nonzero: the inputs are rounded to multiples of it, so that many are
 * equal (ties of a maximum). */
static double check_input_step = 0.0;

/* Non-NULL: the inputs are these check_fixed_n values, repeated. */
static const float *check_fixed_x = NULL;
static int64_t check_fixed_n = 0;
/* Uniform in [-1, 1), reproducible. */
static inline double check_uniform(void)
{
    check_rng_state ^= check_rng_state << 13;
    check_rng_state ^= check_rng_state >> 7;
    check_rng_state ^= check_rng_state << 17;
    return (double)(check_rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static inline double *to_double(const float *f, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

static inline void layer_run_free(layer_run *r)
{
    free(r->x);
    free(r->y);
    free(r->dy);
    free(r->dx);
    for (int p = 0; p < r->n_params; p++) {
        free(r->params[p]);
        free(r->params_after[p]);
        free(r->dparams[p]);
    }
    memset(r, 0, sizeof *r);
}

/* Builds, compiles, fills random inputs, weights and output gradient, runs
 * forward and backward. Returns 0 on any failure (already reported). */
static inline int layer_run_once(kiln_context *ctx, int rank, const int32_t *dims, int batch,
                          build_fn build, const void *arg, layer_run *out)
{
    memset(out, 0, sizeof *out);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_node in = kiln_input(m, rank, dims, NULL);
    const kiln_activation_layer_options pre_name = {.struct_size = sizeof pre_name,
                                                    .name = "pre"};
    const kiln_activation_layer_options post_name = {.struct_size = sizeof post_name,
                                                     .name = "post"};
    kiln_node pre = kiln_activation_layer(m, in, KILN_ACTIVATION_LINEAR, &pre_name);
    kiln_node node = build(m, pre, arg);
    kiln_node last =
        check_inner ? kiln_activation_layer(m, node, KILN_ACTIVATION_LINEAR, &post_name) : node;
    if (check_residual) {
        const kiln_node both[2] = {last, pre};
        last = kiln_add(m, both, 2, NULL);
    }
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD};
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_MEAN_SQUARED_ERROR;
    co.optimizer = &optimizer;
    kiln_status st = kiln_model_compile(m, &co);
    if (st != KILN_OK) {
        fprintf(stderr, "compile failed: %s\n", kiln_context_last_error(ctx));
        test_failures++;
        kiln_model_destroy(m);
        return 0;
    }
    /* The runtime computes a node's gradient only where something trainable
     * lies at or before it (compile's find_gradients); "pre" has nothing
     * before it but the Input, and its gradient is the layer's input
     * gradient checked here. */
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        m->graph.nodes[i].needs_gradient = 1;
    kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
    const kiln_node_rec *rec = &m->graph.nodes[node];
    if (check_inner)   /* the layers checked this way apply any element-wise activation */
        CHECK(rec->activation == KILN_ACTIVATION_LINEAR || kiln_node_fuses_activation(m, node) ||
              kiln_activation_needs_input(rec->activation));
    out->batch = batch;
    out->in_size = kiln_node_size(m, in);
    out->out_size = kiln_node_size(m, node);
    const int64_t nx = batch * out->in_size, ny = batch * out->out_size;

    float *flat = calloc(m->plan.n_param_floats + 1, sizeof(float));
    for (size_t i = 0; i < m->plan.n_param_floats; i++)
        flat[i] = (float)(0.5 * check_uniform());
    for (int p = 0; p < rec->n_params; p++)   /* a variance is positive */
        for (int64_t j = 0; !strcmp(rec->params[p].name, "moving_variance") &&
                            j < kiln_shape_size(&rec->params[p].shape); j++)
            flat[rec->param_offset[p] + j] = (float)(0.75 + 0.5 * check_uniform());
    float *x = malloc(sizeof(float) * (size_t)nx), *g = malloc(sizeof(float) * (size_t)ny);
    float *y = malloc(sizeof(float) * (size_t)ny), *dx = malloc(sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < nx; i++)
        x[i] = check_fixed_x ? check_fixed_x[i % check_fixed_n]
                             : (float)(check_input_offset + check_input_scale * check_uniform());
    for (int64_t i = 0; check_input_step != 0.0 && i < nx; i++)
        x[i] = (float)(check_input_step * floor(x[i] / check_input_step));
    for (int64_t i = 0; i < ny; i++)
        g[i] = (float)check_uniform();
    kiln_batch b = {.n = batch, .features = x};
    CHECK_OK(ctx, kiln_replica_write_params(r, flat));
    CHECK_OK(ctx, kiln_replica_upload(r, &b));
    CHECK_OK(ctx, kiln_replica_forward(r, batch, check_training));
    CHECK_OK(ctx, kiln_buffer_read(r->dev, r->act[node], 0, y, sizeof(float) * (size_t)ny));
    float *dflat = calloc(m->plan.n_param_floats + 1, sizeof(float));
    float *after = calloc(m->plan.n_param_floats + 1, sizeof(float));
    memset(dx, 0, sizeof(float) * (size_t)nx);
    if (check_training) {
        CHECK_OK(ctx, kiln_buffer_write(r->dev, r->grad[last], 0, g, sizeof(float) * (size_t)ny,
                                        1));
        CHECK_OK(ctx, kiln_replica_backward(r, batch, NULL, NULL));
        CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grad[pre], 0, dx, sizeof(float) * (size_t)nx));
        /* The gradients of the trainable prefix (frozen weights have none). */
        CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grads, 0, dflat,
                                       sizeof(float) * r->n_grad_floats));
    }
    CHECK_OK(ctx, kiln_replica_read_params(r, after));

    out->x = to_double(x, nx);
    out->y = to_double(y, ny);
    out->dy = to_double(g, ny);
    out->dx = to_double(dx, nx);
    out->n_params = rec->n_params;
    for (int p = 0; p < rec->n_params; p++) {
        out->param_size[p] = kiln_shape_size(&rec->params[p].shape);
        out->params[p] = to_double(flat + rec->param_offset[p], out->param_size[p]);
        out->params_after[p] = to_double(after + rec->param_offset[p], out->param_size[p]);
        out->dparams[p] = to_double(dflat + rec->param_offset[p], out->param_size[p]);
    }
    free(flat);
    free(after);
    free(dflat);
    free(x);
    free(g);
    free(y);
    free(dx);
    kiln_model_destroy(m);
    return 1;
}

#endif
