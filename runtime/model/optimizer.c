#include "runtime/model/optimizer.h"
#include "runtime/model/clip.h"
#include "runtime/model/lr_schedule.h"
#include "runtime/model/strategy.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

kiln_status kiln_optimizer_take(kiln_optimizer_options *o, kiln_lr_schedule *schedule,
                                const kiln_optimizer_options *src, kiln_diag *why)
{
    memset(schedule, 0, sizeof *schedule);
    kiln_status st = kiln_options_take(o, sizeof *o, src, sizeof(size_t),
                                       "kiln_optimizer_options", why);
    if (st == KILN_OK)
        st = kiln_options_take(schedule, sizeof *schedule, o->schedule, sizeof(size_t),
                               "kiln_lr_schedule", why);
    o->schedule = schedule;
    return st;
}

kiln_status kiln_optimizer_resolve(kiln_context *ctx, kiln_optimizer_options *o)
{
    assert(o->schedule);   /* kiln_optimizer_take points it at a copy */
    /* First: a piecewise schedule's values[0] is its learning_rate. */
    const kiln_status checked = kiln_lr_schedule_check(ctx, o);
    if (checked != KILN_OK)
        return checked;
    if (o->kind == KILN_OPTIMIZER_ADAM) {
        if (o->learning_rate == 0.0f)
            o->learning_rate = 1e-3f;
        if (o->beta_1 == 0.0f)
            o->beta_1 = 0.9f;
        if (o->beta_2 == 0.0f)
            o->beta_2 = 0.999f;
        if (o->epsilon == 0.0f)
            o->epsilon = 1e-7f;
        if (!(o->beta_1 > 0.0f && o->beta_1 < 1.0f) || !(o->beta_2 > 0.0f && o->beta_2 < 1.0f) ||
            !(o->epsilon > 0.0f) || !isfinite(o->epsilon))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "Adam: beta_1 (%g) and beta_2 (%g) must be in (0, 1) and epsilon "
                              "(%g) a finite number > 0", o->beta_1, o->beta_2, o->epsilon);
    } else if (o->kind == KILN_OPTIMIZER_SGD) {
        if (o->learning_rate == 0.0f)
            o->learning_rate = 1e-2f;
        if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "SGD: momentum %g is not in [0, 1)", o->momentum);
        if (o->nesterov && o->momentum == 0.0f)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "SGD: nesterov needs momentum > 0");
    } else {
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "optimizer kind %d is not a kiln_optimizer_kind", (int)o->kind);
    }
    if (!(o->learning_rate > 0.0f) || !isfinite(o->learning_rate))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "learning_rate %g must be a positive number", o->learning_rate);
    const kiln_lr_schedule *sc = o->schedule;
    if (sc->kind != KILN_LR_CONSTANT && sc->kind != KILN_LR_PIECEWISE_CONSTANT_DECAY &&
        sc->decay_steps <= 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: decay_steps %lld must be > 0", (long long)sc->decay_steps);
    if ((sc->kind == KILN_LR_STEP_DECAY || sc->kind == KILN_LR_EXPONENTIAL_DECAY) &&
        (!(sc->decay_rate > 0.0f) || !isfinite(sc->decay_rate)))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: decay_rate %g must be a finite number > 0", sc->decay_rate);
    if (sc->kind == KILN_LR_COSINE_DECAY && !(sc->alpha >= 0.0f && sc->alpha <= 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: alpha %g must be in [0, 1]", sc->alpha);
    /* The settings in use are checked above; the others too must be finite:
     * model files and checkpoints store every setting, as JSON numbers. */
    static const char *const schedules[] = {"constant", "step_decay", "exponential_decay",
                                            "cosine_decay", "piecewise_constant_decay"};
    char schedule[48];
    snprintf(schedule, sizeof schedule, "a %s schedule", schedules[sc->kind]);
    const char *optimizer = o->kind == KILN_OPTIMIZER_ADAM ? "Adam" : "SGD";
    const struct {
        const char *name, *unused_by;
        float value;
    } settings[] = {
        {.name = "momentum", .unused_by = optimizer, .value = o->momentum},
        {.name = "beta_1", .unused_by = optimizer, .value = o->beta_1},
        {.name = "beta_2", .unused_by = optimizer, .value = o->beta_2},
        {.name = "epsilon", .unused_by = optimizer, .value = o->epsilon},
        {.name = "schedule.decay_rate", .unused_by = schedule, .value = sc->decay_rate},
        {.name = "schedule.alpha", .unused_by = schedule, .value = sc->alpha},
    };
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (!isfinite(settings[i].value))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "optimizer: %s is %s, not a finite number (%s does not use it, "
                              "but model files and checkpoints store every setting)",
                              settings[i].name, isnan(settings[i].value) ? "nan"
                              : settings[i].value < 0 ? "-inf" : "inf", settings[i].unused_by);
    return kiln_clip_check(ctx, o);
}

double kiln_optimizer_learning_rate(const kiln_optimizer_options *o, int64_t step)
{
    assert(o->schedule);
    return kiln_lr_schedule_rate(o, step);
}

kiln_status kiln_learning_rate_at(kiln_context *ctx, const kiln_optimizer_options *options,
                                  int64_t step, double *rate)
{
    if (rate)
        *rate = 0.0;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!rate)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_learning_rate_at: rate is NULL");
    if (step < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_learning_rate_at: step %lld is negative (steps count from 0)",
                          (long long)step);
    kiln_optimizer_options o;
    kiln_lr_schedule schedule;
    kiln_diag why;
    if (kiln_optimizer_take(&o, &schedule, options, &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_learning_rate_at: %s", why.message);
    const kiln_status st = kiln_optimizer_resolve(ctx, &o);
    if (st == KILN_OK)
        *rate = kiln_optimizer_learning_rate(&o, step);
    return st;
}

int kiln_optimizer_slot_count(const kiln_optimizer_options *o)
{
    if (o->kind == KILN_OPTIMIZER_ADAM)
        return 2;
    return o->momentum > 0.0f ? 1 : 0;
}

/* Adam's step size with its bias correction, in double, as one scalar. */
static double adam_alpha(const kiln_optimizer_options *o, double lr, int64_t step)
{
    const double t = (double)step;
    return lr * sqrt(1.0 - pow(o->beta_2, t)) / (1.0 - pow(o->beta_1, t));
}

int kiln_optimizer_all_finite(const float *x, size_t n)
{
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++)
        acc += x[i] * 0.0f;   /* stays 0 unless some x[i] is NaN or infinite */
    return acc == 0.0f;
}

/* Enough work-groups to fill a large GPU, few enough that a small gradient
 * is not mostly idle work-items. */
#define FINITE_ITEMS (256 * 64)
#define CPU_STRETCH 4096

/* SGD without momentum never reads its velocity; the gradient stands in. */
static const kiln_buffer *slot_or(kiln_buffer *const *slots, int i, int count,
                                  const kiln_buffer *grads)
{
    return i < count ? slots[i] : grads;
}

kiln_status kiln_optimizer_check_update(kiln_device *dev, const kiln_optimizer_options *o,
                                        double lr, const kiln_buffer *params,
                                        const kiln_buffer *grads, kiln_buffer *const *slots,
                                        size_t n, int64_t step, kiln_buffer *guard, int grad_at)
{
    const int count = kiln_optimizer_slot_count(o);
    const int adam = o->kind == KILN_OPTIMIZER_ADAM;
    kiln_status st = kiln_buffer_zero(dev, guard, KILN_SUM_UPDATE * sizeof(float),
                                      sizeof(float));
    if (st != KILN_OK)
        return st;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                            kiln_arg_buffer(slot_or(slots, 0, count, grads)),
                            kiln_arg_buffer(slot_or(slots, 1, count, grads)),
                            kiln_arg_int((int64_t)n), kiln_arg_int(adam),
                            kiln_arg_float((float)lr), kiln_arg_float(o->momentum),
                            kiln_arg_int(o->nesterov ? 1 : 0),
                            kiln_arg_float(adam ? (float)adam_alpha(o, lr, step) : 0.0f),
                            kiln_arg_float(o->beta_1), kiln_arg_float(o->beta_2),
                            kiln_arg_float(o->epsilon), kiln_arg_buffer(guard),
                            kiln_arg_int(grad_at), kiln_arg_int(KILN_SUM_UPDATE));
    /* The CPU variant: stretches of at least CPU_STRETCH floats an item. */
    const size_t items = (n + CPU_STRETCH - 1) / CPU_STRETCH;
    const kiln_range cpu = {.dims = 1, .size = {items < FINITE_ITEMS ? items : FINITE_ITEMS}};
    const kiln_range gpu = {.dims = 1, .size = {n < FINITE_ITEMS ? n : FINITE_ITEMS}};
    return kiln_run_variant(dev, "optimizer", "kiln_optimizer_check_update", &cpu, &gpu, a);
}

kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step,
                                 kiln_buffer *guard, int guard_loss)
{
    /* The host checked the gradient when the loss is not the guard's. */
    const int grad_at = guard_loss ? KILN_SUM_LOSS : KILN_SUM_UPDATE;
    if (guard) {
        const kiln_status st = kiln_optimizer_check_update(dev, o, lr, params, grads, slots, n,
                                                           step, guard, grad_at);
        if (st != KILN_OK)
            return st;
    }
    const kiln_arg g = kiln_arg_buffer(guard ? guard : grads);
    const kiln_arg use = kiln_arg_int(guard != NULL);
    const kiln_arg at = kiln_arg_int(grad_at), update_at = kiln_arg_int(KILN_SUM_UPDATE);
    if (o->kind == KILN_OPTIMIZER_ADAM) {
        const double alpha = adam_alpha(o, lr, step);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                                kiln_arg_buffer(slots[0]), kiln_arg_buffer(slots[1]),
                                kiln_arg_int((int64_t)n), kiln_arg_float((float)alpha),
                                kiln_arg_float(o->beta_1), kiln_arg_float(o->beta_2),
                                kiln_arg_float(o->epsilon), g, use, at, update_at);
        /* Eight parameters a work-item, or one. */
        const kiln_range cpu = {.dims = 1, .size = {(n + 7) / 8}};
        const kiln_range gpu = {.dims = 1, .size = {n}};
        return kiln_run_variant(dev, "optimizer", "kiln_optimizer_adam", &cpu, &gpu, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                            kiln_arg_buffer(slot_or(slots, 0, kiln_optimizer_slot_count(o),
                                                    grads)),
                            kiln_arg_int((int64_t)n), kiln_arg_float((float)lr),
                            kiln_arg_float(o->momentum), kiln_arg_int(o->nesterov ? 1 : 0), g,
                            use, at, update_at);
    return kiln_run1(dev, "optimizer", "kiln_optimizer_sgd", n, a);
}

/* One parameter's update on the host, in float32 as on a device: the
 * optimizer kernels' arithmetic (opencl/kernels/optimizer.cl). */
static void host_step(const kiln_optimizer_options *o, float rate, float alpha, float p,
                      float g, float s0, float s1, float *pi, float *m, float *v)
{
    if (o->kind == KILN_OPTIMIZER_ADAM) {
        *m = s0 + (g - s0) * (1.0f - o->beta_1);
        *v = s1 + (g * g - s1) * (1.0f - o->beta_2);
        *pi = p - alpha * *m / (sqrtf(*v) + o->epsilon);
        return;
    }
    *m = o->momentum * s0 - rate * g;
    *pi = o->momentum == 0.0f ? p - rate * g
                              : o->nesterov ? p + (o->momentum * *m - rate * g) : p + *m;
    *v = 0.0f;
}

int kiln_optimizer_update_finite_host(const kiln_optimizer_options *o, double lr,
                                      const float *p, const float *g, float *const *slots,
                                      size_t n, int64_t step)
{
    const int count = kiln_optimizer_slot_count(o);
    const float rate = (float)lr;
    const float alpha = o->kind == KILN_OPTIMIZER_ADAM ? (float)adam_alpha(o, lr, step) : 0.0f;
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float pi, m, v;
        host_step(o, rate, alpha, p[i], g[i], count > 0 ? slots[0][i] : 0.0f,
                  count > 1 ? slots[1][i] : 0.0f, &pi, &m, &v);
        acc += g[i] * 0.0f + pi * 0.0f + m * 0.0f + v * 0.0f;
    }
    return acc == 0.0f;
}

void kiln_optimizer_apply_host(const kiln_optimizer_options *o, double lr, float *p,
                               const float *g, float *const *slots, size_t n, int64_t step)
{
    const int count = kiln_optimizer_slot_count(o);
    const float rate = (float)lr;
    const float alpha = o->kind == KILN_OPTIMIZER_ADAM ? (float)adam_alpha(o, lr, step) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        float m, v;
        host_step(o, rate, alpha, p[i], g[i], count > 0 ? slots[0][i] : 0.0f,
                  count > 1 ? slots[1][i] : 0.0f, &p[i], &m, &v);
        if (count > 0)
            slots[0][i] = m;
        if (count > 1)
            slots[1][i] = v;
    }
}
