/* The kiln tool's command line: which command, its paths and options. */
#ifndef KILN_CLI_ARGS_H
#define KILN_CLI_ARGS_H

#include "kiln.h"

#include <stdint.h>
#include <stdio.h>

#define CLI_MAX_FREEZE 32

/* Each option's bit in cli_args.given: a 64-bit set, as fit's options
 * outgrew 32 (macros, since an enum constant must fit an int). */
typedef uint64_t cli_options;
#define CLI_BIT(n) ((cli_options)1 << (n))
#define CLI_BATCH CLI_BIT(0)
#define CLI_SCALE CLI_BIT(1)
#define CLI_EPOCHS CLI_BIT(2)
#define CLI_NO_SHUFFLE CLI_BIT(3)
#define CLI_LOSS CLI_BIT(4)
#define CLI_FROM_LOGITS CLI_BIT(5)
#define CLI_OPTIMIZER CLI_BIT(6)
#define CLI_LEARNING_RATE CLI_BIT(7)
#define CLI_MOMENTUM CLI_BIT(8)
#define CLI_NESTEROV CLI_BIT(9)
#define CLI_VALIDATION_SPLIT CLI_BIT(10)
#define CLI_FREEZE CLI_BIT(11)
#define CLI_HEAD CLI_BIT(12)
#define CLI_HEAD_FROM CLI_BIT(13)
#define CLI_STRATEGY CLI_BIT(14)
#define CLI_SEED CLI_BIT(15)
#define CLI_SAVE CLI_BIT(16)
/* recipe_args.c's */
#define CLI_WARMUP_STEPS CLI_BIT(17)
#define CLI_WARMUP_TARGET CLI_BIT(18)
#define CLI_DECAY CLI_BIT(19)
#define CLI_DECAY_STEPS CLI_BIT(20)
#define CLI_DECAY_RATE CLI_BIT(21)
#define CLI_ALPHA CLI_BIT(22)
#define CLI_BOUNDARIES CLI_BIT(23)
#define CLI_VALUES CLI_BIT(24)
#define CLI_LABEL_SMOOTHING CLI_BIT(25)
#define CLI_CLIPNORM CLI_BIT(26)
#define CLI_CLIPVALUE CLI_BIT(27)
#define CLI_GLOBAL_CLIPNORM CLI_BIT(28)
#define CLI_WEIGHT_DECAY CLI_BIT(29)
#define CLI_EMA CLI_BIT(30)
/* lora_args.c's */
#define CLI_LORA CLI_BIT(31)
#define CLI_LORA_ALPHA CLI_BIT(32)
#define CLI_LORA_LAYERS CLI_BIT(33)
#define CLI_LORA_TARGETS CLI_BIT(34)
#define CLI_ACTIVATIONS CLI_BIT(35)
#define CLI_HALF CLI_BIT(36)
#define CLI_ALL_OPTIONS (~(cli_options)0)
#define CLI_LORA_OPTIONS (CLI_LORA | CLI_LORA_ALPHA | CLI_LORA_LAYERS | CLI_LORA_TARGETS)
#define CLI_RECIPE_OPTIONS (CLI_WARMUP_STEPS | CLI_WARMUP_TARGET | CLI_DECAY | CLI_DECAY_STEPS | \
                            CLI_DECAY_RATE | CLI_ALPHA | CLI_BOUNDARIES | CLI_VALUES | \
                            CLI_LABEL_SMOOTHING | CLI_EMA)
#define CLI_CLIPPING (CLI_CLIPNORM | CLI_CLIPVALUE | CLI_GLOBAL_CLIPNORM)

/* The options that change how an imported model is built or trained: a
 * kiln model file carries its own. */
#define CLI_BUILD_OPTIONS (CLI_LOSS | CLI_FROM_LOGITS | CLI_OPTIMIZER | CLI_LEARNING_RATE | \
                           CLI_MOMENTUM | CLI_NESTEROV | CLI_FREEZE | CLI_HEAD | CLI_HEAD_FROM | \
                           CLI_RECIPE_OPTIONS | CLI_CLIPPING | CLI_WEIGHT_DECAY | \
                           CLI_LORA_OPTIONS)

typedef struct cli_args {
    const char *command;
    const char *paths[3];
    int n_paths;
    cli_options given;           /* CLI_* bits of the options on the line */
    int help;                    /* --help or -h: print the usage and do nothing else */
    int32_t batch;               /* 32 */
    float scale;                 /* 1 */
    int32_t epochs;              /* 1 */
    kiln_loss loss;              /* sparse categorical cross-entropy */
    kiln_optimizer_kind optimizer;   /* adam */
    float learning_rate;         /* 0: the optimizer's default */
    float momentum;
    float clipnorm, clipvalue, global_clipnorm;   /* 0: off */
    float weight_decay;          /* 0: the optimizer's default (adamw 0.004, others none) */
    float validation_split;
    const char *freeze[CLI_MAX_FREEZE];
    int n_freeze;
    int32_t head;                /* units; 0: no new head */
    const char *head_from;
    kiln_strategy strategy;      /* one_device */
    kiln_storage activations;    /* float32; float16 by --activations or --half */
    uint64_t seed;               /* 0: kiln's default seed */
    const char *save;
    /* The schedule (a zeroed one: constant) and label smoothing, with the
     * boundaries and values the schedule points at. */
    kiln_lr_schedule schedule;
    int64_t boundaries[KILN_LR_MAX_BOUNDARIES];
    float values[KILN_LR_MAX_BOUNDARIES + 1];
    float label_smoothing;
    float ema_momentum;          /* --ema M: use_ema with momentum M; 0: off */
    int32_t lora_rank;           /* --lora RANK; 0: off */
    float lora_alpha;            /* --lora-alpha A; 0: RANK (Keras's default) */
    const char *lora_layers[CLI_MAX_FREEZE];
    int n_lora_layers;
    const char *lora_targets;    /* --lora-targets LIST; NULL: the default */
} cli_args;

/* Fills `a` from argv[1..]; `allowed` is the CLI_* bits the command takes.
 * 0 (with the reason and the usage printed on stderr) on a usage error. */
int cli_parse(int argc, char **argv, cli_options allowed, cli_args *a);

/* The name of the first option (in usage order) among the CLI_* `bits`. */
const char *cli_option_name(cli_options bits);

/* Prints "kiln: <why>" and the usage on stderr; returns 2. */
int cli_usage(const char *why, ...);

/* Prints the usage text to f. */
void cli_print_usage(FILE *f);

#endif
