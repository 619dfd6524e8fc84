#include "runtime/model/ema.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/strategy.h"

#include <string.h>

int kiln_ema_active(const kiln_model *m)
{
    return m->plan.optimizer.use_ema && m->training.n_optimizer_steps > 0;
}

/* Every slot, read from the strategy into one allocation: *slots[i] point
 * into it, the averages last. */
static kiln_status read_slots(kiln_model *m, float **block, float **slots)
{
    const int n = kiln_optimizer_slot_count(&m->plan.optimizer);
    const size_t floats = m->plan.n_param_floats;
    *block = kiln_calloc(m->ctx, floats * (size_t)n, sizeof(float));
    if (!*block)
        return kiln_error_oom(m->ctx, "the optimizer's state", floats * (size_t)n * 4);
    for (int i = 0; i < n; i++)
        slots[i] = *block + (size_t)i * floats;
    return m->placement.strategy->get_slots(m->placement.strategy_impl, slots);
}

kiln_status kiln_ema_params(kiln_model *m, float *flat)
{
    kiln_status st = m->placement.strategy->get_params(m->placement.strategy_impl, flat);
    if (st != KILN_OK || !kiln_ema_active(m))
        return st;
    float *block = NULL, *slots[KILN_MAX_OPTIMIZER_SLOTS];
    st = read_slots(m, &block, slots);
    if (st == KILN_OK)
        memcpy(flat, slots[kiln_optimizer_ema_slot(&m->plan.optimizer)],
               m->plan.n_trainable_floats * sizeof(float));
    kiln_free(m->ctx, block);
    return st;
}

kiln_status kiln_ema_swap_in(kiln_model *m, float **kept)
{
    *kept = NULL;
    if (!kiln_ema_active(m))
        return KILN_OK;
    const size_t bytes = m->plan.n_param_floats * sizeof(float);
    float *weights = kiln_alloc(m->ctx, bytes), *averaged = kiln_alloc(m->ctx, bytes);
    kiln_status st = weights && averaged ? KILN_OK
                                         : kiln_error_oom(m->ctx, "a parameter copy", 2 * bytes);
    if (st == KILN_OK)
        st = m->placement.strategy->get_params(m->placement.strategy_impl, weights);
    if (st == KILN_OK)
        st = kiln_ema_params(m, averaged);
    if (st == KILN_OK)
        st = m->placement.strategy->set_params(m->placement.strategy_impl, averaged);
    kiln_free(m->ctx, averaged);
    if (st != KILN_OK) {
        /* A failed set may have written part: the weights go back. */
        if (weights)
            m->placement.strategy->set_params(m->placement.strategy_impl, weights);
        kiln_free(m->ctx, weights);
        return st;
    }
    *kept = weights;
    return KILN_OK;
}

kiln_status kiln_ema_swap_out(kiln_model *m, float *kept, kiln_status st)
{
    if (!kept)
        return st;
    const kiln_status back = m->placement.strategy->set_params(m->placement.strategy_impl, kept);
    kiln_free(m->ctx, kept);
    return st != KILN_OK ? st : back;
}

kiln_status kiln_model_write_params(kiln_model *m, const float *flat)
{
    kiln_status st = m->placement.strategy->set_params(m->placement.strategy_impl, flat);
    if (st != KILN_OK || !kiln_ema_active(m))
        return st;
    float *block = NULL, *slots[KILN_MAX_OPTIMIZER_SLOTS];
    st = read_slots(m, &block, slots);
    if (st == KILN_OK) {
        memcpy(slots[kiln_optimizer_ema_slot(&m->plan.optimizer)], flat,
               m->plan.n_trainable_floats * sizeof(float));
        st = m->placement.strategy->set_slots(m->placement.strategy_impl,
                                              (const float *const *)slots);
    }
    kiln_free(m->ctx, block);
    return st;
}
