#include "runtime/optimizer.h"

#include <math.h>

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
            !(o->epsilon > 0.0f))
            return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                              "Adam: beta_1 (%g) and beta_2 (%g) must be in (0, 1) and epsilon "
                              "(%g) > 0", o->beta_1, o->beta_2, o->epsilon);
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
    return KILN_OK;
}

int kiln_optimizer_slot_count(const kiln_optimizer_options *o)
{
    if (o->kind == KILN_OPTIMIZER_ADAM)
        return 2;
    return o->momentum > 0.0f ? 1 : 0;
}

kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step)
{
    if (o->kind == KILN_OPTIMIZER_ADAM) {
        /* Bias correction in double on the host, as one scalar. */
        const double t = (double)step;
        const double alpha = o->learning_rate * sqrt(1.0 - pow(o->beta_2, t)) /
                             (1.0 - pow(o->beta_1, t));
        kiln_arg a[] = {kiln_arg_buffer(params), kiln_arg_buffer(grads),
                        kiln_arg_buffer(slots[0]), kiln_arg_buffer(slots[1]),
                        kiln_arg_int((int64_t)n), kiln_arg_float((float)alpha),
                        kiln_arg_float(o->beta_1), kiln_arg_float(o->beta_2),
                        kiln_arg_float(o->epsilon)};
        return kiln_run1(dev, "optimizer", "kiln_adam", n, a, 9);
    }
    /* SGD without momentum never reads its velocity; pass the gradient. */
    const kiln_buffer *velocity = o->momentum > 0.0f ? slots[0] : grads;
    kiln_arg a[] = {kiln_arg_buffer(params), kiln_arg_buffer(grads), kiln_arg_buffer(velocity),
                    kiln_arg_int((int64_t)n), kiln_arg_float(o->learning_rate),
                    kiln_arg_float(o->momentum), kiln_arg_int(o->nesterov ? 1 : 0)};
    return kiln_run1(dev, "optimizer", "kiln_sgd", n, a, 7);
}
