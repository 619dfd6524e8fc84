/* The fault layer (fault_layer.h). */
#include "fault_layer.h"
#include "base/clock.h"
#include "runtime/model/model.h"

#include <time.h>

typedef struct fault_config {
    fault_plan *plan;
} fault_config;

static kiln_status fault_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    b->out = b->in[0];
    return KILN_OK;
}

static kiln_status strike(const fault_config *c, const kiln_step *s, int backward)
{
    fault_plan *p = c->plan;
    kiln_device_info info = {.struct_size = sizeof info};
    kiln_device_describe(s->dev, &info);
    if (!p->armed || info.index != p->device || p->backward != backward ||
        p->step != s->step_number || (!backward && !s->training))
        return KILN_OK;
    if (p->stall_seconds <= 0)
        return kiln_fail(kiln_device_host(s->dev), KILN_ERROR_DEVICE, "injected fault on %s",
                         kiln_device_label(s->dev));
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10000000};
    const double end = kiln_now() + p->stall_seconds;
    while (!kiln_flag_up(&p->released) && kiln_now() < end)
        nanosleep(&tick, NULL);
    return KILN_OK;
}

static kiln_status fault_forward(const void *config, void *replica, const kiln_step *s)
{
    const kiln_status st = strike(config, s, 0);
    return st != KILN_OK ? st : kiln_identity_forward(config, replica, s);
}

static kiln_status fault_backward(const void *config, void *replica, const kiln_step *s)
{
    const kiln_status st = strike(config, s, 1);
    return st != KILN_OK ? st : kiln_identity_backward(config, replica, s);
}

/* args: the fault_plan. */
static void fault_configure(void *config, const void *args)
{
    ((fault_config *)config)->plan = (fault_plan *)args;
}

static const kiln_layer_ops fault_ops = {
    .kind = "fault", .config_size = sizeof(fault_config), .min_inputs = 1, .max_inputs = 1,
    .configure = fault_configure, .infer = fault_infer, .forward = fault_forward,
    .backward = fault_backward,
};

kiln_node fault_layer(kiln_model *model, kiln_node input, fault_plan *plan)
{
    return kiln_model_add_layer(model, &fault_ops, plan, &input, 1, "fault",
                                KILN_ACTIVATION_LINEAR);
}
