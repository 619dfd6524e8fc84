/* The kiln tool's usage text and option parsing. */
#include "args.h"
#include "lora_args.h"
#include "recipe_args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Three literals (with recipe_args.c's and lora_args.c's lines between
 * the last two): C99 caps a string literal at 4095 characters. */
static const char usage_commands[] =
    "usage: kiln summary MODEL\n"
    "       kiln predict MODEL INPUT.npy OUTPUT.npy [--batch N] [--scale S]\n"
    "       kiln evaluate MODEL FEATURES.npy LABELS.npy [--batch N] [--scale S]\n"
    "                     [--loss LOSS] [--from-logits]\n"
    "       kiln fit MODEL FEATURES.npy LABELS.npy --save OUT [options]\n"
    "       kiln export-onnx MODEL OUT.onnx\n"
    "       kiln devices\n"
    "       kiln tune\n"
    "       kiln --help | --version\n"
    "MODEL is a file written by kiln_model_save (or a checkpoint), or an ONNX file\n"
    "(its name ends in .onnx), imported on the fly: its inputs in the layout the\n"
    "graph declares (NCHW from PyTorch). summary prints the layers, then a model\n"
    "file's loss(es) and optimizer. predict writes float32 outputs of shape\n"
    "(samples, output dims...) to OUTPUT.npy; a model of several outputs gets one\n"
    "file per output, the output's layer name put before the extension\n"
    "(out.npy -> out.<layer>.npy), and each path written is printed. evaluate\n"
    "prints the loss and accuracy: a model file's own loss, an ONNX model's --loss.\n"
    "fit prints the compiled model's loss, optimizer and activations, trains MODEL\n"
    "on the samples (Keras's progress on stderr, then one history line per epoch on\n"
    "stdout) and saves a model file to OUT (kiln export-onnx turns it into ONNX).\n"
    "devices prints one line per device kiln uses (KILN_DEVICES chooses them): type,\n"
    "name, driver, memory, kernel variant, GEMM parameters.\n"
    "tune searches each device's GEMM parameters (CLBlast's, and on a CPU kiln's own\n"
    "GEMM's cache budget: KILN_GEMM_TUNING=search), stores them in kiln's cache\n"
    "folder for every later run, and prints what devices prints.\n"
    "Features are read as value * S (default 1; 0.00392156863 maps\n"
    "bytes to [0, 1] as the examples train); a model whose input takes int32 ids\n"
    "reads an integer .npy as ids, without --scale.\n";

static const char usage_options[] =
    "--batch N          samples per step (default 32)\n"
    "--scale S          features are read as value * S (default 1)\n"
    "--loss LOSS        an ONNX model's loss: sparse_categorical_crossentropy\n"
    "                   (default), categorical_crossentropy, binary_crossentropy, mse\n"
    "--from-logits      an ONNX model's output is logits: a softmax (sigmoid for\n"
    "                   binary_crossentropy) is put after it, and stays in the\n"
    "                   saved model (it then predicts probabilities)\n"
    "fit only:\n"
    "--save OUT         the model file to write (required)\n"
    "--epochs N         default 1\n"
    "--no-shuffle       keep the samples' order: an epoch of N samples is\n"
    "                   ceil(N / batch) steps in order (default: shuffled)\n"
    "--optimizer NAME   adam (default), sgd, adamw, rmsprop or adagrad (Keras's\n"
    "                   defaults: kiln.h's kiln_optimizer_kind)\n"
    "--learning-rate R  default: sgd 0.01, the others 0.001\n"
    "--momentum M       sgd and rmsprop only, in [0, 1) (default 0)\n"
    "--nesterov         sgd only, with --momentum > 0\n"
    "--clipnorm C       clip each weight's gradient to L2 norm C (Keras's clipnorm)\n"
    "--clipvalue V      clip each gradient element to [-V, V] (Keras's clipvalue)\n"
    "--global-clipnorm C  scale all gradients so their global L2 norm is at most C\n"
    "                   (Keras's global_clipnorm, PyTorch's clip_grad_norm_); at\n"
    "                   most one of the three (default: no clipping)\n"
    "--weight-decay W   decoupled weight decay, w -= lr * W * w each step (Keras's\n"
    "                   weight_decay), a finite number >= 0 (default: adamw\n"
    "                   0.004, the others 0)\n"
    "--validation-split F  the last F of the samples (in [0, 1), default 0) are\n"
    "                   held out and evaluated after each epoch\n"
    "--freeze PREFIX    freeze every layer whose name starts with PREFIX; may be\n"
    "                   repeated; each must match a layer (default: none)\n"
    "--head UNITS --head-from NODE  a new Dense(UNITS) head on the layer named NODE\n"
    "                   (flattened first when not 1-D), with softmax for the\n"
    "                   categorical losses, sigmoid for binary_crossentropy,\n"
    "                   none for mse; it becomes the output (default: none)\n"
    "--strategy NAME    one_device (default) or mirrored (every device)\n"
    "--activations TYPE  float32 (default) or float16: each layer's output kept\n"
    "                   in IEEE half precision between forward and backward, the\n"
    "                   arithmetic float32 (kiln_compile_options.activation_storage)\n"
    "--half WHAT        activations: the same as --activations float16; weights are\n"
    "                   refused: they stay float32 (a half copy beside the optimizer's\n"
    "                   float32 master saves no memory without half arithmetic)\n"
    "--seed S           seed of the weights a new head starts from and of the\n"
    "                   shuffling (default 0: kiln's default seed)\n";

/* After the schedule and LoRA options. */
static const char usage_tail[] =
    "--loss, --from-logits, --optimizer, --learning-rate, --momentum, --nesterov,\n"
    "--weight-decay, --freeze, --head, the schedule, --label-smoothing, --ema, the\n"
    "LoRA and the clipping options are for ONNX models: a model file keeps the loss, optimizer\n"
    "and frozen layers it was compiled with. Other commands run on one device\n"
    "(KILN_DEVICES chooses which).\n"
    "Exit status: 0 done, 1 kiln refused or failed (its message on stderr), 2 usage.\n";

void cli_print_usage(FILE *f)
{
    fputs(usage_commands, f);
    fputs(usage_options, f);
    fputs(cli_recipe_usage, f);
    fputs(cli_lora_usage, f);
    fputs(usage_tail, f);
}

int cli_usage(const char *why, ...)
{
    if (why) {
        va_list ap;
        va_start(ap, why);
        fputs("kiln: ", stderr);
        vfprintf(stderr, why, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    cli_print_usage(stderr);
    return 2;
}

static const char *const loss_names[] = {
    [KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY] = "sparse_categorical_crossentropy",
    [KILN_LOSS_CATEGORICAL_CROSSENTROPY] = "categorical_crossentropy",
    [KILN_LOSS_BINARY_CROSSENTROPY] = "binary_crossentropy",
    [KILN_LOSS_MEAN_SQUARED_ERROR] = "mse",
};

typedef struct option_spec {
    const char *name;
    cli_options bit;
    int takes_value;
} option_spec;

static const option_spec options[] = {
    {.name = "--batch", .bit = CLI_BATCH, .takes_value = 1},
    {.name = "--scale", .bit = CLI_SCALE, .takes_value = 1},
    {.name = "--epochs", .bit = CLI_EPOCHS, .takes_value = 1},
    {.name = "--no-shuffle", .bit = CLI_NO_SHUFFLE},
    {.name = "--loss", .bit = CLI_LOSS, .takes_value = 1},
    {.name = "--from-logits", .bit = CLI_FROM_LOGITS},
    {.name = "--optimizer", .bit = CLI_OPTIMIZER, .takes_value = 1},
    {.name = "--learning-rate", .bit = CLI_LEARNING_RATE, .takes_value = 1},
    {.name = "--momentum", .bit = CLI_MOMENTUM, .takes_value = 1},
    {.name = "--nesterov", .bit = CLI_NESTEROV},
    {.name = "--clipnorm", .bit = CLI_CLIPNORM, .takes_value = 1},
    {.name = "--clipvalue", .bit = CLI_CLIPVALUE, .takes_value = 1},
    {.name = "--global-clipnorm", .bit = CLI_GLOBAL_CLIPNORM, .takes_value = 1},
    {.name = "--weight-decay", .bit = CLI_WEIGHT_DECAY, .takes_value = 1},
    {.name = "--validation-split", .bit = CLI_VALIDATION_SPLIT, .takes_value = 1},
    {.name = "--freeze", .bit = CLI_FREEZE, .takes_value = 1},
    {.name = "--head", .bit = CLI_HEAD, .takes_value = 1},
    {.name = "--head-from", .bit = CLI_HEAD_FROM, .takes_value = 1},
    {.name = "--strategy", .bit = CLI_STRATEGY, .takes_value = 1},
    {.name = "--seed", .bit = CLI_SEED, .takes_value = 1},
    {.name = "--save", .bit = CLI_SAVE, .takes_value = 1},
    {.name = "--warmup-steps", .bit = CLI_WARMUP_STEPS, .takes_value = 1},
    {.name = "--warmup-target", .bit = CLI_WARMUP_TARGET, .takes_value = 1},
    {.name = "--decay", .bit = CLI_DECAY, .takes_value = 1},
    {.name = "--decay-steps", .bit = CLI_DECAY_STEPS, .takes_value = 1},
    {.name = "--decay-rate", .bit = CLI_DECAY_RATE, .takes_value = 1},
    {.name = "--alpha", .bit = CLI_ALPHA, .takes_value = 1},
    {.name = "--boundaries", .bit = CLI_BOUNDARIES, .takes_value = 1},
    {.name = "--values", .bit = CLI_VALUES, .takes_value = 1},
    {.name = "--label-smoothing", .bit = CLI_LABEL_SMOOTHING, .takes_value = 1},
    {.name = "--ema", .bit = CLI_EMA, .takes_value = 1},
    {.name = "--lora", .bit = CLI_LORA, .takes_value = 1},
    {.name = "--lora-alpha", .bit = CLI_LORA_ALPHA, .takes_value = 1},
    {.name = "--lora-layers", .bit = CLI_LORA_LAYERS, .takes_value = 1},
    {.name = "--lora-targets", .bit = CLI_LORA_TARGETS, .takes_value = 1},
    {.name = "--activations", .bit = CLI_ACTIVATIONS, .takes_value = 1},
    {.name = "--half", .bit = CLI_HALF, .takes_value = 1},
};

/* A whole number in [lo, hi]; 0 if `v` is not one. */
static int whole(const char *v, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    const long long n = strtoll(v, &end, 10);
    if (end == v || *end || errno || n < lo || n > hi)
        return 0;
    *out = n;
    return 1;
}

/* A finite float in [lo, hi] (hi excluded when `open_hi`); 0 if not. */
static int real(const char *v, double lo, double hi, int open_hi, float *out)
{
    char *end = NULL;
    errno = 0;
    const double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi || (open_hi && x == hi))
        return 0;
    *out = (float)x;
    return 1;
}

const char *cli_option_name(cli_options bit)
{
    for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
        if (bit & options[k].bit)
            return options[k].name;
    return "";
}

/* One option's value into `a`; 0 (said) when it is not one. */
static int take(const option_spec *o, const char *v, cli_args *a)
{
    long long n = 0;
    if (cli_recipe_option(o->bit))
        return cli_recipe_take(o->bit, v, a);
    if (o->bit & CLI_LORA_OPTIONS)
        return cli_lora_take(o->bit, v, a);
    switch (o->bit) {
    case CLI_BATCH:
        if (!whole(v, 1, INT32_MAX, &n))
            return cli_usage("--batch needs a whole number >= 1, not '%s'", v), 0;
        a->batch = (int32_t)n;
        return 1;
    case CLI_EPOCHS:
        if (!whole(v, 1, INT32_MAX, &n))
            return cli_usage("--epochs needs a whole number >= 1, not '%s'", v), 0;
        a->epochs = (int32_t)n;
        return 1;
    case CLI_HEAD:
        if (!whole(v, 1, INT32_MAX, &n))
            return cli_usage("--head needs a whole number of units >= 1, not '%s'", v), 0;
        a->head = (int32_t)n;
        return 1;
    case CLI_SEED:
        /* A seed above 2^63 would need strtoull; nobody types one. */
        if (!whole(v, 0, INT64_MAX, &n))
            return cli_usage("--seed needs a whole number >= 0, not '%s'", v), 0;
        a->seed = (uint64_t)n;
        return 1;
    case CLI_SCALE:
        /* kiln_npy_options reads a scale of 0 as "not given" (1). */
        if (!real(v, -3.4e38, 3.4e38, 0, &a->scale) || a->scale == 0.0f)
            return cli_usage("--scale needs a finite number other than 0, not '%s'", v), 0;
        return 1;
    case CLI_LEARNING_RATE:
        if (!real(v, 0.0, 3.4e38, 0, &a->learning_rate) || a->learning_rate == 0.0f)
            return cli_usage("--learning-rate needs a finite number > 0, not '%s'", v), 0;
        return 1;
    case CLI_MOMENTUM:
        if (!real(v, 0.0, 1.0, 1, &a->momentum))
            return cli_usage("--momentum needs a number in [0, 1), not '%s'", v), 0;
        return 1;
    case CLI_CLIPNORM:
    case CLI_CLIPVALUE:
    case CLI_GLOBAL_CLIPNORM: {
        float *to = o->bit == CLI_CLIPNORM ? &a->clipnorm
                    : o->bit == CLI_CLIPVALUE ? &a->clipvalue : &a->global_clipnorm;
        if (!real(v, 0.0, 3.4e38, 0, to) || *to == 0.0f)
            return cli_usage("%s needs a finite number > 0, not '%s'", o->name, v), 0;
        return 1;
    }
    case CLI_WEIGHT_DECAY:
        if (!real(v, 0.0, 3.4e38, 0, &a->weight_decay))
            return cli_usage("--weight-decay needs a finite number >= 0, not '%s'", v), 0;
        return 1;
    case CLI_VALIDATION_SPLIT:
        if (!real(v, 0.0, 1.0, 1, &a->validation_split))
            return cli_usage("--validation-split needs a number in [0, 1), not '%s'", v), 0;
        return 1;
    case CLI_LOSS:
        for (size_t k = 1; k < sizeof loss_names / sizeof loss_names[0]; k++)
            if (strcmp(v, loss_names[k]) == 0)
                return a->loss = (kiln_loss)k, 1;
        return cli_usage("unknown loss '%s' (sparse_categorical_crossentropy, "
                         "categorical_crossentropy, binary_crossentropy, mse)", v), 0;
    case CLI_OPTIMIZER: {
        static const char *const names[] = {
            [KILN_OPTIMIZER_ADAM] = "adam", [KILN_OPTIMIZER_SGD] = "sgd",
            [KILN_OPTIMIZER_ADAMW] = "adamw", [KILN_OPTIMIZER_RMSPROP] = "rmsprop",
            [KILN_OPTIMIZER_ADAGRAD] = "adagrad"};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (strcmp(v, names[k]) == 0)
                return a->optimizer = (kiln_optimizer_kind)k, 1;
        return cli_usage("unknown optimizer '%s' (adam, sgd, adamw, rmsprop, adagrad)", v), 0;
    }
    case CLI_STRATEGY:
        if (strcmp(v, "one_device") == 0 || strcmp(v, "mirrored") == 0)
            return a->strategy = v[0] == 'o' ? KILN_STRATEGY_ONE_DEVICE
                                             : KILN_STRATEGY_MIRRORED, 1;
        return cli_usage("unknown strategy '%s' (one_device, mirrored)", v), 0;
    case CLI_ACTIVATIONS:
        if (strcmp(v, "float32") == 0)
            return a->activations = KILN_STORAGE_FLOAT32, 1;
        if (strcmp(v, "float16") == 0)
            return a->activations = KILN_STORAGE_FLOAT16, 1;
        return cli_usage("unknown activation storage '%s' (float32, float16)", v), 0;
    case CLI_HALF:
        if (strcmp(v, "activations") == 0)
            return a->activations = KILN_STORAGE_FLOAT16, 1;
        /* The "--half weights": kiln keeps no half parameters (docs/training.md,
         * "Activations in half precision"), so it is refused, not ignored. */
        if (strcmp(v, "weights") == 0)
            return cli_usage("--half weights is not offered: weights stay float32, since a "
                             "half copy beside the optimizer's float32 master adds memory and "
                             "saves none on a device without half arithmetic (--half "
                             "activations halves the activations' memory)"), 0;
        return cli_usage("unknown --half '%s' (activations; weights are not offered)", v), 0;
    case CLI_FREEZE:
        if (a->n_freeze == CLI_MAX_FREEZE)
            return cli_usage("--freeze is given more than %d times", CLI_MAX_FREEZE), 0;
        if (!v[0])
            return cli_usage("--freeze needs a layer name prefix, not ''"), 0;
        a->freeze[a->n_freeze++] = v;
        return 1;
    case CLI_HEAD_FROM:
        a->head_from = v;
        return 1;
    case CLI_SAVE:
        a->save = v;
        return 1;
    default:   /* the flags */
        return 1;
    }
}

/* What fit's options say together, once all are read. */
static int check_together(const cli_args *a)
{
    if ((a->given & CLI_HEAD) && !(a->given & CLI_HEAD_FROM))
        return cli_usage("--head needs --head-from NODE, the layer the head goes on"), 0;
    if ((a->given & CLI_HEAD_FROM) && !(a->given & CLI_HEAD))
        return cli_usage("--head-from needs --head UNITS"), 0;
    if ((a->given & CLI_FROM_LOGITS) && a->loss == KILN_LOSS_MEAN_SQUARED_ERROR)
        return cli_usage("--from-logits is for the cross-entropy losses, not mse"), 0;
    if ((a->given & CLI_FROM_LOGITS) && (a->given & CLI_HEAD))
        return cli_usage("--from-logits is for the model's own output: a --head "
                         "already ends in its loss's activation"), 0;
    if ((a->given & CLI_MOMENTUM) && a->optimizer != KILN_OPTIMIZER_SGD &&
        a->optimizer != KILN_OPTIMIZER_RMSPROP)
        return cli_usage("--momentum is for --optimizer sgd and rmsprop"), 0;
    if ((a->given & CLI_NESTEROV) && a->optimizer != KILN_OPTIMIZER_SGD)
        return cli_usage("--nesterov is for --optimizer sgd"), 0;
    if ((a->given & CLI_NESTEROV) && !(a->momentum > 0.0f))
        return cli_usage("--nesterov needs --momentum > 0"), 0;
    if ((a->given & CLI_HALF) && (a->given & CLI_ACTIVATIONS))
        return cli_usage("--half activations is --activations float16: give one of them"), 0;
    const cli_options clips = a->given & CLI_CLIPPING;
    if (clips & (clips - 1))   /* Keras takes one */
        return cli_usage("only one of --clipnorm, --clipvalue and --global-clipnorm can be "
                         "given"), 0;
    return cli_recipe_check(a) && cli_lora_check(a);
}

int cli_parse(int argc, char **argv, cli_options allowed, cli_args *a)
{
    *a = (cli_args){.command = argv[1], .batch = 32, .scale = 1.0f, .epochs = 1,
                    .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    .optimizer = KILN_OPTIMIZER_ADAM, .strategy = KILN_STRATEGY_ONE_DEVICE,
                    .activations = KILN_STORAGE_FLOAT32};
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            continue;
        }
        if (arg[0] != '-' || arg[1] != '-') {
            if (a->n_paths == 3)
                return cli_usage("unexpected argument %s", arg), 0;
            a->paths[a->n_paths++] = arg;
            continue;
        }
        const option_spec *o = NULL;
        for (size_t k = 0; k < sizeof options / sizeof options[0] && !o; k++)
            o = strcmp(arg, options[k].name) == 0 ? &options[k] : NULL;
        if (!o)
            return cli_usage("unknown option %s", arg), 0;
        if (!(o->bit & allowed))
            return cli_usage("%s is not an option of %s", arg, a->command), 0;
        if (o->takes_value && i + 1 >= argc)
            return cli_usage("%s needs a value", arg), 0;
        if (!take(o, o->takes_value ? argv[++i] : NULL, a))
            return 0;
        a->given |= o->bit;
    }
    return a->help || check_together(a);
}
