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

/* Fills the zero fields of Adam and AdamW with Keras's defaults and checks them. */
static kiln_status resolve_adam(kiln_context *ctx, kiln_optimizer_options *o, const char *name)
{
    if (o->learning_rate == 0.0f)
        o->learning_rate = 1e-3f;
    if (o->beta_1 == 0.0f)
        o->beta_1 = 0.9f;
    if (o->beta_2 == 0.0f)
        o->beta_2 = 0.999f;
    if (o->epsilon == 0.0f)
        o->epsilon = 1e-7f;
    if (o->kind == KILN_OPTIMIZER_ADAMW && o->weight_decay == 0.0f)
        o->weight_decay = 0.004f;
    if (!(o->beta_1 > 0.0f && o->beta_1 < 1.0f) || !(o->beta_2 > 0.0f && o->beta_2 < 1.0f) ||
        !(o->epsilon > 0.0f) || !isfinite(o->epsilon))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: beta_1 (%g) and beta_2 (%g) must be in (0, 1) and epsilon "
                          "(%g) a finite number > 0", name, o->beta_1, o->beta_2, o->epsilon);
    return KILN_OK;
}

/* RMSprop's and Adagrad's defaults and checks. */
static kiln_status resolve_rms(kiln_context *ctx, kiln_optimizer_options *o)
{
    const int rms = o->kind == KILN_OPTIMIZER_RMSPROP;
    const char *name = rms ? "RMSprop" : "Adagrad";
    if (o->learning_rate == 0.0f)
        o->learning_rate = 1e-3f;
    if (o->epsilon == 0.0f)
        o->epsilon = 1e-7f;
    if (rms && o->rho == 0.0f)
        o->rho = 0.9f;
    if (!rms && o->initial_accumulator_value == 0.0f)
        o->initial_accumulator_value = 0.1f;
    if (!(o->epsilon > 0.0f) || !isfinite(o->epsilon))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: epsilon %g must be a finite number > 0", name, o->epsilon);
    if (rms && !(o->rho >= 0.0f && o->rho < 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "RMSprop: rho %g is not in [0, 1)",
                          o->rho);
    if (rms && !(o->momentum >= 0.0f && o->momentum < 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "RMSprop: momentum %g is not in [0, 1)", o->momentum);
    if (!rms && (!(o->initial_accumulator_value > 0.0f) ||
                 !isfinite(o->initial_accumulator_value)))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "Adagrad: initial_accumulator_value %g must be a finite number > 0",
                          o->initial_accumulator_value);
    return KILN_OK;
}

static const char *kind_name(kiln_optimizer_kind kind)
{
    static const char *const names[] = {"Adam", "SGD", "AdamW", "RMSprop", "Adagrad"};
    return names[kind];
}

kiln_status kiln_optimizer_resolve(kiln_context *ctx, kiln_optimizer_options *o)
{
    assert(o->schedule);   /* kiln_optimizer_take points it at a copy */
    /* First: a piecewise schedule's values[0] is its learning_rate. */
    const kiln_status checked = kiln_lr_schedule_check(ctx, o);
    if (checked != KILN_OK)
        return checked;
    kiln_status st = KILN_OK;
    if (o->kind == KILN_OPTIMIZER_ADAM || o->kind == KILN_OPTIMIZER_ADAMW) {
        st = resolve_adam(ctx, o, kind_name(o->kind));
    } else if (o->kind == KILN_OPTIMIZER_RMSPROP || o->kind == KILN_OPTIMIZER_ADAGRAD) {
        st = resolve_rms(ctx, o);
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
    if (st != KILN_OK)
        return st;
    if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "%s: weight_decay %g must be a finite number >= 0",
                          kind_name(o->kind), o->weight_decay);
    /* Filled in only when used, so files without EMA stay as they were. */
    if (o->use_ema && o->ema_momentum == 0.0f)
        o->ema_momentum = 0.99f;
    if (!(o->ema_momentum >= 0.0f && o->ema_momentum < 1.0f))
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "ema_momentum %g is not in [0, 1) (0: 0.99, Keras's default)%s",
                          o->ema_momentum, o->use_ema ? "" : "; use_ema is off, but model "
                          "files and checkpoints store every setting");
    if (o->ema_overwrite_frequency < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "ema_overwrite_frequency %d must be >= 0 (0: never)",
                          (int)o->ema_overwrite_frequency);
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
    const char *optimizer = kind_name(o->kind);
    const struct {
        const char *name, *unused_by;
        float value;
    } settings[] = {
        {.name = "momentum", .unused_by = optimizer, .value = o->momentum},
        {.name = "beta_1", .unused_by = optimizer, .value = o->beta_1},
        {.name = "beta_2", .unused_by = optimizer, .value = o->beta_2},
        {.name = "epsilon", .unused_by = optimizer, .value = o->epsilon},
        {.name = "rho", .unused_by = optimizer, .value = o->rho},
        {.name = "initial_accumulator_value", .unused_by = optimizer,
         .value = o->initial_accumulator_value},
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

/* The optimizer's own slots, without the moving average. */
static int own_slot_count(const kiln_optimizer_options *o)
{
    switch (o->kind) {
    case KILN_OPTIMIZER_ADAM:
    case KILN_OPTIMIZER_ADAMW:
        return 2;
    case KILN_OPTIMIZER_RMSPROP:
        return 1 + (o->momentum > 0.0f) + (o->centered != 0);
    case KILN_OPTIMIZER_ADAGRAD:
        return 1;
    default:
        return o->momentum > 0.0f ? 1 : 0;
    }
}

int kiln_optimizer_slot_count(const kiln_optimizer_options *o)
{
    return own_slot_count(o) + (o->use_ema != 0);
}

int kiln_optimizer_ema_slot(const kiln_optimizer_options *o)
{
    return own_slot_count(o);
}

static int is_adam(const kiln_optimizer_options *o)
{
    return o->kind == KILN_OPTIMIZER_ADAM || o->kind == KILN_OPTIMIZER_ADAMW;
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

/* The kernels' slots in their order: SGD (velocity), Adam (m, v), RMSprop
 * (mean square, momentum buffer, mean gradient), Adagrad (accumulator):
 * idx[k] is kernel slot k's index in the optimizer's slots, -1 when not
 * kept. RMSprop keeps only some, back to back. */
static void slot_map(const kiln_optimizer_options *o, int *idx)
{
    const int count = own_slot_count(o);
    for (int i = 0; i < 3; i++)
        idx[i] = i < count ? i : -1;
    if (o->kind == KILN_OPTIMIZER_RMSPROP) {
        const int momentum = o->momentum > 0.0f;
        idx[1] = momentum ? 1 : -1;
        idx[2] = o->centered ? 1 + momentum : -1;
    }
}

/* The kernels' number for each kind (optimizer.cl's KILN_CHECK_STEP). */
static int kernel_kind(const kiln_optimizer_options *o)
{
    return is_adam(o) ? 1 : o->kind == KILN_OPTIMIZER_RMSPROP ? 2
           : o->kind == KILN_OPTIMIZER_ADAGRAD ? 3 : 0;
}

/* A stretch of the n parameters at `first` that share their weight decay. */
typedef struct segment {
    size_t at, n;
    float decay;   /* lr * weight_decay, or 0 */
} segment;

typedef struct segments {
    const kiln_decay_runs *runs;
    size_t first, n, at;
    int32_t k;
    float decay;
} segments;

static segments segments_of(const kiln_optimizer_options *o, double lr,
                            const kiln_decay_runs *runs, size_t first, size_t n)
{
    /* Computed once in double, as Keras's lr * weight_decay is one scalar. */
    const float decay = o->weight_decay > 0.0f ? (float)(lr * (double)o->weight_decay) : 0.0f;
    return (segments){.runs = decay != 0.0f && runs && runs->run ? runs : NULL, .first = first,
                      .n = n, .decay = decay};
}

/* The next segment, in order; 0 after the last. */
static int next_segment(segments *it, segment *out)
{
    if (it->at >= it->n)
        return 0;
    const size_t g = it->first + it->at, end = it->first + it->n;
    size_t stop = end;
    float decay = it->decay;
    if (it->runs) {
        while (it->k < it->runs->n && it->runs->run[it->k][1] <= g)
            it->k++;
        const int inside = it->k < it->runs->n && it->runs->run[it->k][0] <= g;
        if (inside)
            stop = it->runs->run[it->k][1] < end ? it->runs->run[it->k][1] : end;
        else if (it->k < it->runs->n && it->runs->run[it->k][0] < end)
            stop = it->runs->run[it->k][0];
        decay = inside ? it->decay : 0.0f;
    }
    *out = (segment){.at = it->at, .n = stop - g, .decay = decay};
    it->at += stop - g;
    return 1;
}

/* Enough work-groups to fill a large GPU, few enough that a small gradient
 * is not mostly idle work-items. */
#define FINITE_ITEMS (256 * 64)
#define CPU_STRETCH 4096

static kiln_status check_segment(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 const kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slot, const segment *seg, int64_t step,
                                 kiln_buffer *guard, int grad_at)
{
    const int adam = is_adam(o);
    int used = 0;
    for (int i = 0; i < 3; i++)
        used |= slot[i] ? 1 << i : 0;
    /* A slot not kept is never read; the gradient stands in. */
    const kiln_buffer *s[3];
    for (int i = 0; i < 3; i++)
        s[i] = slot[i] ? slot[i] : grads;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                            kiln_arg_buffer(s[0]), kiln_arg_buffer(s[1]), kiln_arg_buffer(s[2]),
                            kiln_arg_int((int64_t)seg->at), kiln_arg_int((int64_t)seg->n),
                            kiln_arg_int(kernel_kind(o)), kiln_arg_int(used),
                            kiln_arg_float((float)lr), kiln_arg_float(o->momentum),
                            kiln_arg_int(o->nesterov ? 1 : 0),
                            kiln_arg_float(adam ? (float)adam_alpha(o, lr, step) : 0.0f),
                            kiln_arg_float(o->beta_1), kiln_arg_float(o->beta_2),
                            kiln_arg_float(o->epsilon), kiln_arg_float(o->rho),
                            kiln_arg_int(o->centered ? 1 : 0), kiln_arg_int(step == 1),
                            kiln_arg_float(o->initial_accumulator_value),
                            kiln_arg_float(seg->decay), kiln_arg_buffer(guard),
                            kiln_arg_int(grad_at), kiln_arg_int(KILN_SUM_UPDATE));
    /* The CPU variant: stretches of at least CPU_STRETCH floats an item. */
    const size_t n = seg->n;
    const size_t items = (n + CPU_STRETCH - 1) / CPU_STRETCH;
    const kiln_range cpu = {.dims = 1, .size = {items < FINITE_ITEMS ? items : FINITE_ITEMS}};
    const kiln_range gpu = {.dims = 1, .size = {n < FINITE_ITEMS ? n : FINITE_ITEMS}};
    return kiln_run_variant(dev, "optimizer", "kiln_optimizer_check_update", &cpu, &gpu, a);
}

kiln_status kiln_optimizer_check_update(kiln_device *dev, const kiln_optimizer_options *o,
                                        double lr, const kiln_buffer *params,
                                        const kiln_buffer *grads, kiln_buffer *const *slots,
                                        size_t n, int64_t step, kiln_buffer *guard, int grad_at,
                                        const kiln_decay_runs *decay, size_t first)
{
    kiln_buffer *slot[3];
    int idx[3];
    slot_map(o, idx);
    for (int k = 0; k < 3; k++)
        slot[k] = idx[k] >= 0 ? slots[idx[k]] : NULL;
    kiln_status st = kiln_buffer_zero(dev, guard, KILN_SUM_UPDATE * sizeof(float),
                                      sizeof(float));
    segments it = segments_of(o, lr, decay, first, n);
    segment seg;
    while (st == KILN_OK && next_segment(&it, &seg))
        st = check_segment(dev, o, lr, params, grads, slot, &seg, step, guard, grad_at);
    return st;
}

static kiln_status apply_segment(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slot, const segment *seg, int64_t step,
                                 kiln_arg g, kiln_arg use, kiln_arg at, kiln_arg update_at)
{
    const size_t n = seg->n;
    const kiln_arg from = kiln_arg_int((int64_t)seg->at), count = kiln_arg_int((int64_t)n);
    const kiln_arg decay = kiln_arg_float(seg->decay);
    const kiln_buffer *s[3];
    for (int i = 0; i < 3; i++)
        s[i] = slot[i] ? slot[i] : grads;   /* a slot not kept is never read */
    if (is_adam(o)) {
        const double alpha = adam_alpha(o, lr, step);
        kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                                kiln_arg_buffer(s[0]), kiln_arg_buffer(s[1]), from, count,
                                kiln_arg_float((float)alpha), kiln_arg_float(o->beta_1),
                                kiln_arg_float(o->beta_2), kiln_arg_float(o->epsilon), decay, g,
                                use, at, update_at);
        /* Eight parameters a work-item, or one. */
        const kiln_range cpu = {.dims = 1, .size = {(n + 7) / 8}};
        const kiln_range gpu = {.dims = 1, .size = {n}};
        return kiln_run_variant(dev, "optimizer", "kiln_optimizer_adam", &cpu, &gpu, a);
    }
    if (o->kind == KILN_OPTIMIZER_RMSPROP) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                                kiln_arg_buffer(s[0]), kiln_arg_buffer(s[1]),
                                kiln_arg_buffer(s[2]), from, count, kiln_arg_float((float)lr),
                                kiln_arg_float(o->rho), kiln_arg_float(o->momentum),
                                kiln_arg_int(o->centered ? 1 : 0), kiln_arg_float(o->epsilon),
                                decay, g, use, at, update_at);
        return kiln_run1(dev, "optimizer", "kiln_optimizer_rmsprop", n, a);
    }
    if (o->kind == KILN_OPTIMIZER_ADAGRAD) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                                kiln_arg_buffer(s[0]), from, count, kiln_arg_float((float)lr),
                                kiln_arg_int(step == 1),
                                kiln_arg_float(o->initial_accumulator_value),
                                kiln_arg_float(o->epsilon), decay, g, use, at, update_at);
        return kiln_run1(dev, "optimizer", "kiln_optimizer_adagrad", n, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(grads),
                            kiln_arg_buffer(s[0]), from, count, kiln_arg_float((float)lr),
                            kiln_arg_float(o->momentum), kiln_arg_int(o->nesterov ? 1 : 0),
                            decay, g, use, at, update_at);
    return kiln_run1(dev, "optimizer", "kiln_optimizer_sgd", n, a);
}

kiln_status kiln_optimizer_apply(kiln_device *dev, const kiln_optimizer_options *o, double lr,
                                 kiln_buffer *params, const kiln_buffer *grads,
                                 kiln_buffer *const *slots, size_t n, int64_t step,
                                 kiln_buffer *guard, int guard_loss,
                                 const kiln_decay_runs *decay, size_t first)
{
    /* The host checked the gradient when the loss is not the guard's. */
    const int grad_at = guard_loss ? KILN_SUM_LOSS : KILN_SUM_UPDATE;
    if (guard) {
        const kiln_status st = kiln_optimizer_check_update(dev, o, lr, params, grads, slots, n,
                                                           step, guard, grad_at, decay, first);
        if (st != KILN_OK)
            return st;
    }
    kiln_buffer *slot[3];
    int idx[3];
    slot_map(o, idx);
    for (int k = 0; k < 3; k++)
        slot[k] = idx[k] >= 0 ? slots[idx[k]] : NULL;
    const kiln_arg g = kiln_arg_buffer(guard ? guard : grads);
    const kiln_arg use = kiln_arg_int(guard != NULL);
    const kiln_arg at = kiln_arg_int(grad_at), update_at = kiln_arg_int(KILN_SUM_UPDATE);
    kiln_status st = KILN_OK;
    segments it = segments_of(o, lr, decay, first, n);
    segment seg;
    while (st == KILN_OK && next_segment(&it, &seg))
        st = apply_segment(dev, o, lr, params, grads, slot, &seg, step, g, use, at, update_at);
    if (st != KILN_OK || !o->use_ema || n == 0)
        return st;
    /* The whole range at once: the average ignores weight decay's runs.
     * Held by the same guard, so a skipped update leaves it too. */
    const int overwrite = o->ema_overwrite_frequency > 0 &&
                          step % o->ema_overwrite_frequency == 0;
    const kiln_buffer *average = slots[kiln_optimizer_ema_slot(o)];
    kiln_args a = KILN_ARGS(kiln_arg_buffer(params), kiln_arg_buffer(average),
                            kiln_arg_int((int64_t)n), kiln_arg_float(o->ema_momentum),
                            kiln_arg_int(step == 1), kiln_arg_int(overwrite), g, use, at,
                            update_at);
    return kiln_run1(dev, "optimizer", "kiln_optimizer_ema", n, a);
}

/* The scalars of one update on the host. */
typedef struct host_update {
    const kiln_optimizer_options *o;
    float rate, alpha, decay;
    int first;
} host_update;

static float decayed(const host_update *u, float p)
{
    return u->decay != 0.0f ? p - p * u->decay : p;
}

/* One parameter's update on the host, in float32 as on a device: the
 * optimizer kernels' arithmetic (opencl/kernels/optimizer.cl). s: the
 * kernels' three slots in, then out (a slot not kept stays 0). */
static float host_step(const host_update *u, float p, float g, float *s)
{
    const kiln_optimizer_options *o = u->o;
    const float rate = u->rate;
    if (is_adam(o)) {
        s[0] = s[0] + (g - s[0]) * (1.0f - o->beta_1);
        s[1] = s[1] + (g * g - s[1]) * (1.0f - o->beta_2);
        return decayed(u, p) - u->alpha * s[0] / (sqrtf(s[1]) + o->epsilon);
    }
    if (o->kind == KILN_OPTIMIZER_RMSPROP) {
        const float rho = o->rho;
        s[0] = rho * s[0] + (1.0f - rho) * (g * g);
        if (o->centered)
            s[2] = rho * s[2] + (1.0f - rho) * g;
        const float inc = rate * g / sqrtf((o->centered ? s[0] - s[2] * s[2] : s[0]) +
                                           o->epsilon);
        if (o->momentum == 0.0f)
            return decayed(u, p) - inc;
        s[1] = o->momentum * s[1] + inc;
        return decayed(u, p) - s[1];
    }
    if (o->kind == KILN_OPTIMIZER_ADAGRAD) {
        s[0] = (u->first ? o->initial_accumulator_value : s[0]) + g * g;
        return decayed(u, p) - rate * g / sqrtf(s[0] + o->epsilon);
    }
    s[0] = o->momentum * s[0] - rate * g;
    return o->momentum == 0.0f ? decayed(u, p) - rate * g
           : o->nesterov ? decayed(u, p) + (o->momentum * s[0] - rate * g)
                         : decayed(u, p) + s[0];
}

static host_update host_update_of(const kiln_optimizer_options *o, double lr, int64_t step)
{
    return (host_update){.o = o, .rate = (float)lr,
                         .alpha = is_adam(o) ? (float)adam_alpha(o, lr, step) : 0.0f,
                         .first = step == 1};
}

int kiln_optimizer_update_finite_host(const kiln_optimizer_options *o, double lr,
                                      const float *p, const float *g, float *const *slots,
                                      size_t n, int64_t step, const kiln_decay_runs *decay,
                                      size_t first)
{
    float *slot[3];
    int idx[3];
    slot_map(o, idx);
    for (int k = 0; k < 3; k++)
        slot[k] = idx[k] >= 0 ? slots[idx[k]] : NULL;
    host_update u = host_update_of(o, lr, step);
    float acc = 0.0f;
    segments it = segments_of(o, lr, decay, first, n);
    segment seg;
    while (next_segment(&it, &seg)) {
        u.decay = seg.decay;
        for (size_t i = seg.at; i < seg.at + seg.n; i++) {
            float s[3];
            for (int k = 0; k < 3; k++)
                s[k] = slot[k] ? slot[k][i] : 0.0f;
            const float pi = host_step(&u, p[i], g[i], s);
            acc += g[i] * 0.0f + pi * 0.0f + s[0] * 0.0f + s[1] * 0.0f + s[2] * 0.0f;
        }
    }
    return acc == 0.0f;
}

void kiln_optimizer_apply_host(const kiln_optimizer_options *o, double lr, float *p,
                               const float *g, float *const *slots, size_t n, int64_t step,
                               const kiln_decay_runs *decay, size_t first)
{
    float *slot[3];
    int idx[3];
    slot_map(o, idx);
    for (int k = 0; k < 3; k++)
        slot[k] = idx[k] >= 0 ? slots[idx[k]] : NULL;
    host_update u = host_update_of(o, lr, step);
    segments it = segments_of(o, lr, decay, first, n);
    segment seg;
    while (next_segment(&it, &seg)) {
        u.decay = seg.decay;
        for (size_t i = seg.at; i < seg.at + seg.n; i++) {
            float s[3];
            for (int k = 0; k < 3; k++)
                s[k] = slot[k] ? slot[k][i] : 0.0f;
            p[i] = host_step(&u, p[i], g[i], s);
            for (int k = 0; k < 3; k++)
                if (slot[k])
                    slot[k][i] = s[k];
        }
    }
    if (!o->use_ema)
        return;
    /* optimizer.cl's kiln_optimizer_ema, in the same float32 steps. */
    float *avg = slots[kiln_optimizer_ema_slot(o)];
    const float m = o->ema_momentum;
    const int overwrite = o->ema_overwrite_frequency > 0 &&
                          step % o->ema_overwrite_frequency == 0;
    for (size_t i = 0; i < n; i++) {
        avg[i] = step == 1 ? p[i] : m * avg[i] + (1.0f - m) * p[i];
        if (overwrite)
            p[i] = avg[i];
    }
}
