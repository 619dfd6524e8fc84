/* compile: check the graph, lay out parameters, pick the loss kernel, the
 * optimizer and the strategy, and put initial weights on the devices. */
#include "runtime/model/loss.h"
#include "runtime/model/lr_schedule.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/context/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static kiln_status find_input_and_path(kiln_model *m)
{
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        m->graph.nodes[i].on_path = 0;
    if (m->graph.n_outputs < 2) {
        m->graph.n_outputs = 1;
        m->graph.outputs[0] = m->graph.output;
    }
    kiln_node last = 0;
    for (int32_t k = 0; k < m->graph.n_outputs; k++) {
        m->graph.nodes[m->graph.outputs[k]].on_path = 1;
        last = m->graph.outputs[k] > last ? m->graph.outputs[k] : last;
    }
    m->plan.output_size = 0;
    for (int32_t k = 0; k < m->graph.n_outputs; k++)
        m->plan.output_size += kiln_node_size(m, m->graph.outputs[k]);
    for (int32_t i = last; i >= 0; i--) {
        if (!m->graph.nodes[i].on_path)
            continue;
        for (int k = 0; k < m->graph.nodes[i].n_inputs; k++)
            m->graph.nodes[m->graph.nodes[i].inputs[k]].on_path = 1;
    }
    return kiln_model_find_inputs(m);
}

/* Which region of the flat buffer a parameter lives in: 0 trainable, 1 the
 * state its layer updates itself, 2 a frozen layer's or frozen parameter's
 * weights and constants. */
static int region_of(const kiln_node_rec *node, int p)
{
    const kiln_param_spec *spec = &node->params[p];
    return spec->constant ? 2 : spec->non_trainable ? 1 : kiln_param_frozen(node, p) ? 2 : 0;
}

/* Trainable parameters first, in layer order, then the non-trainable
 * state, then frozen layers' weights: the optimizer and the gradient
 * buffers' users work on the prefix, replicas average the state, and
 * nothing touches the frozen weights (averaging identical copies could
 * still round them). */
static kiln_status lay_out_params(kiln_model *m)
{
    size_t offset = 0;
    int64_t weights = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (int32_t i = 0; i < m->graph.n_nodes; i++) {
            kiln_node_rec *node = &m->graph.nodes[i];
            for (int p = 0; p < node->n_params; p++) {
                if (region_of(node, p) != pass)
                    continue;
                const int64_t size = kiln_shape_size(&node->params[p].shape);
                node->param_offset[p] = offset;
                offset += ((size_t)size + KILN_PARAM_ALIGN - 1) / KILN_PARAM_ALIGN *
                          KILN_PARAM_ALIGN;
                weights += size;
                m->plan.n_trainable_weights += pass == 0 ? size : 0;
            }
        }
        if (pass == 0)
            m->plan.n_trainable_floats = offset;
        if (pass == 1)
            m->plan.n_state_floats = offset - m->plan.n_trainable_floats;
    }
    if (offset > (size_t)INT32_MAX)
        return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED,
                          "kiln_model_compile: %lld parameters exceed the 2^31 kiln supports",
                          (long long)weights);
    m->plan.n_param_floats = offset;
    m->plan.n_weights = weights;
    return KILN_OK;
}

/* Which nodes backward must reach: those with a trainable parameter, and
 * every node after one (nodes come after their inputs). */
static void find_gradients(kiln_model *m)
{
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        kiln_node_rec *node = &m->graph.nodes[i];
        node->needs_gradient = 0;
        for (int p = 0; p < node->n_params; p++)
            node->needs_gradient |= region_of(node, p) == 0;
        for (int k = 0; k < node->n_inputs; k++)
            node->needs_gradient |= m->graph.nodes[node->inputs[k]].needs_gradient;
    }
}

void kiln_model_init_params(const kiln_model *m, float *flat)
{
    kiln_rng rng;
    kiln_rng_seed(&rng, m->ctx->seed, 1);
    memset(flat, 0, m->plan.n_param_floats * sizeof(float));
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        for (int p = 0; p < node->n_params; p++) {
            const kiln_param_spec *spec = &node->params[p];
            float *dst = flat + node->param_offset[p];
            const int64_t size = kiln_shape_size(&spec->shape);
            if (node->param_init[p]) {
                memcpy(dst, node->param_init[p], (size_t)size * sizeof *dst);
                continue;
            }
            for (int64_t j = 0; spec->init == KILN_INIT_ONES && j < size; j++)
                dst[j] = 1.0f;
            for (int64_t j = 0; spec->init == KILN_INIT_CONSTANT && j < size; j++)
                dst[j] = spec->init_value;
            if (spec->init != KILN_INIT_GLOROT_UNIFORM && spec->init != KILN_INIT_UNIFORM)
                continue;  /* zeros, ones or a constant */
            const float limit = spec->init == KILN_INIT_UNIFORM
                                    ? spec->init_limit
                                    : (float)sqrt(6.0 / (double)(spec->fan_in + spec->fan_out));
            for (int64_t j = 0; j < size; j++)
                dst[j] = (2.0f * kiln_rng_uniform(&rng) - 1.0f) * limit;
        }
    }
}

static kiln_status pick_strategy(kiln_model *m, kiln_strategy requested)
{
    static const struct { const char *name; kiln_strategy value; } names[] = {
        {.name = "auto", .value = KILN_STRATEGY_AUTO},
        {.name = "one_device", .value = KILN_STRATEGY_ONE_DEVICE},
        {.name = "mirrored", .value = KILN_STRATEGY_MIRRORED},
        {.name = "central_storage", .value = KILN_STRATEGY_CENTRAL_STORAGE},
        {.name = "pipeline", .value = KILN_STRATEGY_PIPELINE},
        {.name = "multi_worker", .value = KILN_STRATEGY_MULTI_WORKER},
        {.name = "parameter_server", .value = KILN_STRATEGY_PARAMETER_SERVER},
    };
    /* The environment fills in what the application left to kiln; an
     * explicit strategy wins. */
    const char *env = requested == KILN_STRATEGY_AUTO ? getenv("KILN_STRATEGY") : NULL;
    if (env && *env) {
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(env, names[i].name) != 0)
            i++;
        if (i == sizeof names / sizeof names[0])
            return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "KILN_STRATEGY=\"%s\" is not one of auto, one_device, mirrored, "
                              "central_storage, pipeline, multi_worker, parameter_server", env);
        requested = names[i].value;
    }
    switch (requested) {
    case KILN_STRATEGY_AUTO:
        if (m->graph.placed)
            m->placement.strategy = &kiln_strategy_pipeline;
        else
            m->placement.strategy = m->ctx->n_devices > 1 && m->placement.n_replicas != 1
                                        ? &kiln_strategy_mirrored
                                        : &kiln_strategy_one_device;
        return KILN_OK;
    case KILN_STRATEGY_PIPELINE:
        m->placement.strategy = &kiln_strategy_pipeline;
        return KILN_OK;
    case KILN_STRATEGY_MULTI_WORKER:
        m->placement.strategy = &kiln_strategy_multi_worker;
        return KILN_OK;
    case KILN_STRATEGY_PARAMETER_SERVER:
        m->placement.strategy = m->placement.store_ranks ? &kiln_strategy_parameter_server_mpi
                                     : &kiln_strategy_parameter_server;
        return KILN_OK;
    case KILN_STRATEGY_ONE_DEVICE:
        m->placement.strategy = &kiln_strategy_one_device;
        return KILN_OK;
    case KILN_STRATEGY_MIRRORED:
        m->placement.strategy = &kiln_strategy_mirrored;
        return KILN_OK;
    case KILN_STRATEGY_CENTRAL_STORAGE:
        m->placement.strategy = &kiln_strategy_central_storage;
        return KILN_OK;
    default:
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: strategy %d is not a kiln_strategy",
                          (int)requested);
    }
}

/* Accumulation, replicas, watchdog and reducer settings, activation storage. */
static kiln_status take_distribution_options(kiln_model *m, const kiln_compile_options *o)
{
    if (o->gradient_accumulation_steps < 0 || o->replicas < 0 || o->step_timeout_seconds < 0 ||
        o->first_bucket_bytes < 0 || o->bucket_bytes < 0 || o->reducer_threads < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: gradient_accumulation_steps (%d), replicas (%d), "
                          "step_timeout_seconds (%g), bucket sizes and reducer_threads (%d) "
                          "must be >= 0", (int)o->gradient_accumulation_steps,
                          (int)o->replicas, o->step_timeout_seconds, (int)o->reducer_threads);
    if (o->activation_storage != KILN_STORAGE_FLOAT32 &&
        o->activation_storage != KILN_STORAGE_FLOAT16)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: activation_storage %d is not a kiln_storage "
                          "(KILN_STORAGE_FLOAT32 or KILN_STORAGE_FLOAT16)",
                          (int)o->activation_storage);
    if (!isfinite(o->step_timeout_seconds))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: step_timeout_seconds (%g) must be a finite number "
                          ">= 0 (0: %g s)", o->step_timeout_seconds, KILN_DEFAULT_STEP_TIMEOUT);
    /* Checked here, not by the strategy: one that runs on one device ignores it. */
    if (o->replicas > m->ctx->n_devices)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: %d replicas asked for, but the context has %d "
                          "device(s)", (int)o->replicas, (int)m->ctx->n_devices);
    m->plan.accumulation_steps = o->gradient_accumulation_steps > 1 ? o->gradient_accumulation_steps
                                                               : 1;
    m->plan.half_activations = o->activation_storage == KILN_STORAGE_FLOAT16;
    m->placement.n_replicas = o->replicas;
    m->placement.step_timeout = o->step_timeout_seconds > 0 ? o->step_timeout_seconds
                                                  : KILN_DEFAULT_STEP_TIMEOUT;
    m->placement.first_bucket_bytes =
        o->first_bucket_bytes ? (size_t)o->first_bucket_bytes : 1u << 20;
    m->placement.bucket_bytes = o->bucket_bytes ? (size_t)o->bucket_bytes : 1u << 20;
    m->placement.reducer_threads = o->reducer_threads ? o->reducer_threads : 2;
    if (o->pipeline_stages < 0 || o->micro_batches < 0 ||
        (int)o->pipeline_schedule < KILN_PIPELINE_DEFAULT ||
        o->pipeline_schedule > KILN_PIPELINE_1F1B)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: pipeline_stages (%d) and micro_batches (%d) must "
                          "be >= 0 and pipeline_schedule (%d) a kiln_pipeline_schedule",
                          (int)o->pipeline_stages, (int)o->micro_batches,
                          (int)o->pipeline_schedule);
    m->placement.pipeline_stages = o->pipeline_stages;
    m->placement.micro_batches = o->micro_batches ? o->micro_batches : 4;
    m->placement.schedule = o->pipeline_schedule == KILN_PIPELINE_GPIPE ? KILN_PIPELINE_GPIPE
                                                              : KILN_PIPELINE_1F1B;
    m->placement.memory_budget = o->device_memory_budget;
    if (o->max_staleness < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: max_staleness (%d) must be >= 0",
                          (int)o->max_staleness);
    m->placement.max_staleness = o->max_staleness;
    const char *ranks = getenv("KILN_PARAMETER_STORE_RANKS");
    m->placement.store_ranks = ranks && *ranks ? atoi(ranks) : o->parameter_store_ranks;
    if (m->placement.store_ranks < 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_compile: parameter_store_ranks (%d) must be >= 0",
                          (int)m->placement.store_ranks);
    return KILN_OK;
}

static kiln_status compile_entered(kiln_model *m, const kiln_compile_options *options)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    kiln_context *ctx = m->ctx;
    if (m->plan.compiled)
        return kiln_error(ctx, KILN_ERROR_STATE, "kiln_model_compile: already compiled");
    if (m->graph.build_status != KILN_OK)
        return kiln_error(ctx, m->graph.build_status, "%s", m->graph.build_error);
    if (m->graph.n_nodes == 0)
        return kiln_error(ctx, KILN_ERROR_STATE, "kiln_model_compile: the model has no layers");
    kiln_compile_options o;
    kiln_optimizer_options opt;
    kiln_lr_schedule schedule;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, offsetof(kiln_compile_options, optimizer),
                          "kiln_compile_options", &why) != KILN_OK ||
        kiln_optimizer_take(&opt, &schedule, o.optimizer, &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_model_compile: %s", why.message);
    if (m->graph.output < 0)
        m->graph.output = m->graph.n_nodes - 1;

    kiln_status st = find_input_and_path(m);
    if (st == KILN_OK)
        st = lay_out_params(m);
    if (st == KILN_OK)
        find_gradients(m);
    if (st == KILN_OK)
        st = kiln_model_plan_outputs(m, &o);
    if (st == KILN_OK)
        st = kiln_optimizer_resolve(ctx, &opt);
    if (st == KILN_OK)
        st = take_distribution_options(m, &o);
    if (st == KILN_OK)
        st = pick_strategy(m, o.strategy);
    /* The store ranks keep the averages, the workers only weights: their
     * evaluate and predict could not use them. */
    if (st == KILN_OK && opt.use_ema &&
        m->placement.strategy == &kiln_strategy_parameter_server_mpi)
        st = kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_compile: use_ema under the "
                        "parameter server across MPI processes (parameter_store_ranks > 0): the "
                        "workers keep no averages to evaluate and predict with; use "
                        "multi_worker, or the parameter server in one process");
    if (st != KILN_OK)
        return st;
    m->plan.optimizer = opt;
    m->plan.lr_schedule = schedule;
    m->plan.optimizer.schedule = &m->plan.lr_schedule;
    kiln_lr_schedule_own(&m->plan.lr_schedule, &m->plan.lr_pieces);
    st = kiln_model_plan_decay(m);
    if (st != KILN_OK)
        return st;
    st = m->placement.strategy->create(m, &m->placement.strategy_impl);
    if (st != KILN_OK) {
        m->placement.strategy = NULL;
        return st;
    }
    m->plan.compiled = 1;
    return KILN_OK;
}

kiln_status kiln_model_compile(kiln_model *m, const kiln_compile_options *options)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_compile");
    if (st == KILN_OK) {
        st = compile_entered(m, options);
        kiln_model_leave(m);
    }
    return st;
}
