/* --warmup-steps, --warmup-target, --decay and its settings,
 * --label-smoothing and --ema: each maps onto a field of kiln_lr_schedule or
 * kiln_compile_options, whose checks (compile's) stay the library's. */
#include "recipe_args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char cli_recipe_usage[] =
    "--warmup-steps N   the rate rises linearly over the first N steps, from 0 to\n"
    "                   --learning-rate (default 0: no warm-up)\n"
    "--warmup-target R  Keras CosineDecay's warmup_target: the warm-up goes from\n"
    "                   --learning-rate to R, and the decay starts from R\n"
    "--decay KIND       cosine (Keras CosineDecay: --decay-steps N, --alpha A,\n"
    "                   default 0), exponential (Keras ExponentialDecay:\n"
    "                   --decay-steps N, --decay-rate R) or piecewise (Keras\n"
    "                   PiecewiseConstantDecay: --boundaries B1,B2,... steps and\n"
    "                   --values V0,V1,... rates, one more than boundaries);\n"
    "                   counted after the warm-up (default: a constant rate)\n"
    "--label-smoothing LS  Keras's label_smoothing, in [0, 1] (default 0)\n"
    "--ema M            keep a moving average of the weights with momentum M, in\n"
    "                   (0, 1) (Keras's use_ema, ema_momentum; Keras's default is\n"
    "                   0.99); the saved model gets the averages (default: off)\n";

int cli_recipe_option(cli_options bit)
{
    return (bit & CLI_RECIPE_OPTIONS) != 0;
}

/* A comma-separated list of up to `max` numbers (whole ones when `ints`);
 * its length, or -1 when it is not one. */
static int list(const char *v, int ints, int max, int64_t *whole, float *real)
{
    int n = 0;
    const char *p = v;
    while (*p) {
        char *end = NULL;
        errno = 0;
        if (n == max)
            return -1;
        if (ints) {
            const long long x = strtoll(p, &end, 10);
            whole[n] = x;
        } else {
            const double x = strtod(p, &end);
            if (!isfinite(x) || fabs(x) > 3.4e38)
                return -1;
            real[n] = (float)x;
        }
        if (end == p || errno || (*end && *end != ','))
            return -1;
        n++;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return -1;   /* a trailing comma */
    }
    return n;
}

static int number(const char *v, double lo, double hi, float *out)
{
    char *end = NULL;
    errno = 0;
    const double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi)
        return 0;
    *out = (float)x;
    return 1;
}

static int steps(const char *v, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    const long long n = strtoll(v, &end, 10);
    if (end == v || *end || errno || n < 0)
        return 0;
    *out = n;
    return 1;
}

int cli_recipe_take(cli_options bit, const char *v, cli_args *a)
{
    kiln_lr_schedule *s = &a->schedule;
    s->struct_size = sizeof *s;
    switch (bit) {
    case CLI_WARMUP_STEPS:
        if (!steps(v, &s->warmup_steps))
            return cli_usage("--warmup-steps needs a whole number >= 0, not '%s'", v), 0;
        return 1;
    case CLI_WARMUP_TARGET:
        s->has_warmup_target = 1;
        if (!number(v, 0.0, 3.4e38, &s->warmup_target) || s->warmup_target == 0.0f)
            return cli_usage("--warmup-target needs a finite number > 0, not '%s'", v), 0;
        return 1;
    case CLI_DECAY:
        if (strcmp(v, "cosine") == 0)
            s->kind = KILN_LR_COSINE_DECAY;
        else if (strcmp(v, "exponential") == 0)
            s->kind = KILN_LR_EXPONENTIAL_DECAY;
        else if (strcmp(v, "piecewise") == 0)
            s->kind = KILN_LR_PIECEWISE_CONSTANT_DECAY;
        else
            return cli_usage("unknown decay '%s' (cosine, exponential, piecewise)", v), 0;
        return 1;
    case CLI_DECAY_STEPS:
        if (!steps(v, &s->decay_steps) || s->decay_steps == 0)
            return cli_usage("--decay-steps needs a whole number >= 1, not '%s'", v), 0;
        return 1;
    case CLI_DECAY_RATE:
        if (!number(v, 0.0, 3.4e38, &s->decay_rate) || s->decay_rate == 0.0f)
            return cli_usage("--decay-rate needs a finite number > 0, not '%s'", v), 0;
        return 1;
    case CLI_ALPHA:
        if (!number(v, 0.0, 1.0, &s->alpha))
            return cli_usage("--alpha needs a number in [0, 1], not '%s'", v), 0;
        return 1;
    case CLI_BOUNDARIES:
        s->n_boundaries = list(v, 1, KILN_LR_MAX_BOUNDARIES, a->boundaries, NULL);
        if (s->n_boundaries < 1)
            return cli_usage("--boundaries needs 1 to %d whole numbers, comma-separated, not "
                             "'%s'", KILN_LR_MAX_BOUNDARIES, v), 0;
        s->boundaries = a->boundaries;
        return 1;
    case CLI_VALUES:
        s->n_values = list(v, 0, KILN_LR_MAX_BOUNDARIES + 1, NULL, a->values);
        if (s->n_values < 1)
            return cli_usage("--values needs 2 to %d numbers, comma-separated, not '%s'",
                             KILN_LR_MAX_BOUNDARIES + 1, v), 0;
        s->values = a->values;
        return 1;
    case CLI_LABEL_SMOOTHING:
        if (!number(v, 0.0, 1.0, &a->label_smoothing))
            return cli_usage("--label-smoothing needs a number in [0, 1], not '%s'", v), 0;
        return 1;
    case CLI_EMA:
        if (!number(v, 0.0, 1.0, &a->ema_momentum) || a->ema_momentum == 0.0f ||
            a->ema_momentum >= 1.0f)
            return cli_usage("--ema needs a momentum in (0, 1), not '%s'", v), 0;
        return 1;
    default:
        return 1;
    }
}

int cli_recipe_check(const cli_args *a)
{
    const int piecewise = a->schedule.kind == KILN_LR_PIECEWISE_CONSTANT_DECAY;
    const cli_options decaying = CLI_DECAY_STEPS | CLI_DECAY_RATE | CLI_ALPHA;
    if ((a->given & (decaying | CLI_BOUNDARIES | CLI_VALUES)) && !(a->given & CLI_DECAY))
        return cli_usage("%s needs --decay", cli_option_name(a->given & (decaying |
                                                                         CLI_BOUNDARIES |
                                                                         CLI_VALUES))), 0;
    if (piecewise && (a->given & decaying))
        return cli_usage("%s is not for --decay piecewise (its --values are the rates)",
                         cli_option_name(a->given & decaying)), 0;
    if (!piecewise && (a->given & (CLI_BOUNDARIES | CLI_VALUES)))
        return cli_usage("--boundaries and --values are for --decay piecewise"), 0;
    if (piecewise && (a->given & (CLI_BOUNDARIES | CLI_VALUES)) != (CLI_BOUNDARIES | CLI_VALUES))
        return cli_usage("--decay piecewise needs --boundaries and --values"), 0;
    return 1;
}
