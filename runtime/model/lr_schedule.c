/* Learning-rate schedules: Keras's ExponentialDecay, CosineDecay (with its
 * warm-up) and PiecewiseConstantDecay, kiln's step decay, and a warm-up in
 * front of any of them. Rates are computed in double. */
#include "runtime/model/lr_schedule.h"

#include <math.h>
#include <string.h>

static kiln_status check_pieces(kiln_context *ctx, const kiln_lr_schedule *sc)
{
    if (sc->n_boundaries < 1 || sc->n_boundaries > KILN_LR_MAX_BOUNDARIES || !sc->boundaries ||
        !sc->values)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: a piecewise constant schedule needs boundaries and values "
                          "(n_boundaries %d must be 1 to %d, boundaries %s, values %s)",
                          (int)sc->n_boundaries, KILN_LR_MAX_BOUNDARIES,
                          sc->boundaries ? "given" : "NULL", sc->values ? "given" : "NULL");
    if (sc->n_values != sc->n_boundaries + 1)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: n_values %d must be n_boundaries + 1 (%d), as Keras's "
                          "PiecewiseConstantDecay requires", (int)sc->n_values,
                          (int)sc->n_boundaries + 1);
    for (int32_t i = 0; i < sc->n_boundaries; i++)
        if (sc->boundaries[i] < 0 || (i > 0 && sc->boundaries[i] <= sc->boundaries[i - 1]))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "schedule: boundaries[%d] is %lld; boundaries must be steps >= 0 "
                              "in strictly increasing order", (int)i,
                              (long long)sc->boundaries[i]);
    for (int32_t i = 0; i < sc->n_values; i++)
        if (!(sc->values[i] > 0.0f) || !isfinite(sc->values[i]))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "schedule: values[%d] is %g; every value is a learning rate, a "
                              "finite number > 0", (int)i, sc->values[i]);
    if (sc->has_warmup_target)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: a piecewise constant schedule takes no warmup_target (its "
                          "values say every rate)");
    return KILN_OK;
}

kiln_status kiln_lr_schedule_check(kiln_context *ctx, kiln_optimizer_options *o)
{
    const kiln_lr_schedule *sc = o->schedule;
    if ((int)sc->kind < KILN_LR_CONSTANT || sc->kind > KILN_LR_PIECEWISE_CONSTANT_DECAY)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule kind %d is not a kiln_lr_schedule_kind", (int)sc->kind);
    if (sc->warmup_steps < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: warmup_steps %lld must be >= 0",
                          (long long)sc->warmup_steps);
    /* Model files and checkpoints store the target as a JSON number. */
    if (sc->has_warmup_target ? !(sc->warmup_target > 0.0f) || !isfinite(sc->warmup_target)
                              : sc->warmup_target != 0.0f)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: warmup_target %g must be a finite number > 0 with "
                          "has_warmup_target, else 0", sc->warmup_target);
    if (sc->kind != KILN_LR_PIECEWISE_CONSTANT_DECAY) {
        if (sc->n_boundaries || sc->boundaries || sc->n_values || sc->values)
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "schedule: boundaries and values (n_boundaries %d, n_values %d) "
                              "are for a piecewise constant schedule only",
                              (int)sc->n_boundaries, (int)sc->n_values);
        return KILN_OK;
    }
    const kiln_status st = check_pieces(ctx, sc);
    if (st != KILN_OK)
        return st;
    if (o->learning_rate == 0.0f)
        o->learning_rate = sc->values[0];
    if (o->learning_rate != sc->values[0])
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "schedule: learning_rate %g differs from values[0] %g: a piecewise "
                          "constant schedule's values are the rates (leave learning_rate 0)",
                          o->learning_rate, sc->values[0]);
    return KILN_OK;
}

void kiln_lr_schedule_own(kiln_lr_schedule *s, kiln_lr_pieces *own)
{
    memset(own, 0, sizeof *own);
    if (s->kind != KILN_LR_PIECEWISE_CONSTANT_DECAY)
        return;
    memcpy(own->boundaries, s->boundaries, (size_t)s->n_boundaries * sizeof *s->boundaries);
    memcpy(own->values, s->values, (size_t)s->n_values * sizeof *s->values);
    s->boundaries = own->boundaries;
    s->values = own->values;
}

double kiln_lr_schedule_rate(const kiln_optimizer_options *o, int64_t step)
{
    const kiln_lr_schedule *sc = o->schedule;
    const double lr = o->learning_rate;
    /* Keras CosineDecay decays from warmup_target when it has one. */
    const double from = sc->has_warmup_target ? (double)sc->warmup_target : lr;
    if (step < sc->warmup_steps) {
        if (!sc->has_warmup_target)
            return lr * (double)step / (double)sc->warmup_steps;
        return (from - lr) * ((double)step / (double)sc->warmup_steps) + lr;
    }
    const double t = (double)(step - sc->warmup_steps);
    switch (sc->kind) {
    case KILN_LR_STEP_DECAY:
        return from * pow(sc->decay_rate, floor(t / (double)sc->decay_steps));
    case KILN_LR_EXPONENTIAL_DECAY:
        return from * pow(sc->decay_rate, t / (double)sc->decay_steps);
    case KILN_LR_COSINE_DECAY: {
        const double done = fmin(t, (double)sc->decay_steps) / (double)sc->decay_steps;
        const double pi = 3.14159265358979323846;
        return from * ((1.0 - sc->alpha) * 0.5 * (1.0 + cos(pi * done)) + sc->alpha);
    }
    case KILN_LR_PIECEWISE_CONSTANT_DECAY: {
        /* Keras: values[i] while boundaries[i-1] < step <= boundaries[i]. */
        int32_t i = 0;
        while (i < sc->n_boundaries && step - sc->warmup_steps > sc->boundaries[i])
            i++;
        return sc->values[i];
    }
    default:
        return from;
    }
}
