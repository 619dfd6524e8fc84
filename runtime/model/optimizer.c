#include "runtime/model/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void discard_log(void *user, kiln_log_level level, const char *message)
{
    (void)user;
    (void)level;
    (void)message;
}

kiln_status kiln_optimizer_resolve(kiln_context *ctx, kiln_optimizer_options *o)
{
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
    const kiln_lr_schedule *sc = &o->schedule;
    if ((int)sc->kind < KILN_LR_CONSTANT || sc->kind > KILN_LR_COSINE_DECAY)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule kind %d is not a kiln_lr_schedule_kind", (int)sc->kind);
    if (sc->warmup_steps < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: warmup_steps %lld must be >= 0",
                          (long long)sc->warmup_steps);
    if (sc->kind != KILN_LR_CONSTANT && sc->decay_steps <= 0)
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
                                            "cosine_decay"};
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
    return KILN_OK;
}

double kiln_optimizer_learning_rate(const kiln_optimizer_options *o, int64_t step)
{
    const kiln_lr_schedule *sc = &o->schedule;
    const double lr = o->learning_rate;
    if (step < sc->warmup_steps)
        return lr * (double)step / (double)sc->warmup_steps;
    const double t = (double)(step - sc->warmup_steps);
    switch (sc->kind) {
    case KILN_LR_STEP_DECAY:
        return lr * pow(sc->decay_rate, floor(t / (double)sc->decay_steps));
    case KILN_LR_EXPONENTIAL_DECAY:
        return lr * pow(sc->decay_rate, t / (double)sc->decay_steps);
    case KILN_LR_COSINE_DECAY: {
        const double done = fmin(t, (double)sc->decay_steps) / (double)sc->decay_steps;
        const double pi = 3.14159265358979323846;
        return lr * ((1.0 - sc->alpha) * 0.5 * (1.0 + cos(pi * done)) + sc->alpha);
    }
    default:
        return lr;
    }
}

float kiln_learning_rate_at(const kiln_optimizer_options *options, int64_t step)
{
    kiln_optimizer_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_optimizer_options",
                          &why) != KILN_OK)
        return -1.0f;
    /* Validation without a context: a scratch one only collects the message. */
    kiln_context scratch;
    if (kiln_context_init_host_only(&scratch, NULL, NULL, discard_log) != KILN_OK)
        return -1.0f;
    const kiln_status st = kiln_optimizer_resolve(&scratch, &o);
    kiln_context_release_host_only(&scratch);
    if (st != KILN_OK || step < 0)
        return -1.0f;
    return (float)kiln_optimizer_learning_rate(&o, step);
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

kiln_status kiln_optimizer_check_finite(kiln_device *dev, const kiln_buffer *grads, size_t n,
                                        kiln_buffer *guard)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(grads), kiln_arg_int((int64_t)n),
                            kiln_arg_buffer(guard));
    if (kiln_device_gpu_kernels(dev))
        return kiln_run1(dev, "optimizer", "kiln_optimizer_check_finite",
                         n < FINITE_ITEMS ? n : FINITE_ITEMS, a);
    /* The CPU variant: stretches of at least CPU_STRETCH floats. */
    const size_t items = (n + CPU_STRETCH - 1) / CPU_STRETCH;
    return kiln_run1(dev, "optimizer", "kiln_optimizer_check_finite8",
                     items < FINITE_ITEMS ? items : FINITE_ITEMS, a);
}

kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step,
                                 kiln_buffer *guard)
{
    if (guard) {
        const kiln_status st = kiln_optimizer_check_finite(dev, grads, n, guard);
        if (st != KILN_OK)
            return st;
    }
    const kiln_arg g = kiln_arg_buffer(guard ? guard : grads);
    const kiln_arg use = kiln_arg_int(guard != NULL);
    if (o->kind == KILN_OPTIMIZER_ADAM) {
        const double alpha = adam_alpha(o, lr, step);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                                kiln_arg_buffer(slots[0]), kiln_arg_buffer(slots[1]),
                                kiln_arg_int((int64_t)n), kiln_arg_float((float)alpha),
                                kiln_arg_float(o->beta_1), kiln_arg_float(o->beta_2),
                                kiln_arg_float(o->epsilon), g, use);
        if (kiln_device_gpu_kernels(dev))
            return kiln_run1(dev, "optimizer", "kiln_optimizer_adam", n, a);
        return kiln_run1(dev, "optimizer", "kiln_optimizer_adam8", (n + 7) / 8, a);
    }
    /* SGD without momentum never reads its velocity; pass the gradient. */
    const kiln_buffer *velocity = o->momentum > 0.0f ? slots[0] : grads;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                            kiln_arg_buffer(velocity), kiln_arg_int((int64_t)n),
                            kiln_arg_float((float)lr), kiln_arg_float(o->momentum),
                            kiln_arg_int(o->nesterov ? 1 : 0), g, use);
    return kiln_run1(dev, "optimizer", "kiln_optimizer_sgd", n, a);
}

void kiln_optimizer_apply_host(const kiln_optimizer_options *o, double lr, float *p,
                               const float *g, float *const *slots, size_t n, int64_t step)
{
    if (o->kind == KILN_OPTIMIZER_ADAM) {
        const float alpha = (float)adam_alpha(o, lr, step);
        float *m = slots[0], *v = slots[1];
        for (size_t i = 0; i < n; i++) {
            m[i] += (g[i] - m[i]) * (1.0f - o->beta_1);
            v[i] += (g[i] * g[i] - v[i]) * (1.0f - o->beta_2);
            p[i] -= alpha * m[i] / (sqrtf(v[i]) + o->epsilon);
        }
        return;
    }
    const float rate = (float)lr;
    for (size_t i = 0; i < n; i++) {
        if (o->momentum == 0.0f) {
            p[i] -= rate * g[i];
            continue;
        }
        const float vi = o->momentum * slots[0][i] - rate * g[i];
        slots[0][i] = vi;
        p[i] += o->nesterov ? o->momentum * vi - rate * g[i] : vi;
    }
}
