/* The kiln tool's command line: which command, its paths and options. */
#ifndef KILN_CLI_ARGS_H
#define KILN_CLI_ARGS_H

#include "kiln.h"

#include <stdio.h>

#define CLI_MAX_FREEZE 32

/* Each option's bit in cli_args.given. */
enum {
    CLI_BATCH = 1 << 0, CLI_SCALE = 1 << 1, CLI_EPOCHS = 1 << 2, CLI_NO_SHUFFLE = 1 << 3,
    CLI_LOSS = 1 << 4, CLI_FROM_LOGITS = 1 << 5, CLI_OPTIMIZER = 1 << 6,
    CLI_LEARNING_RATE = 1 << 7, CLI_MOMENTUM = 1 << 8, CLI_NESTEROV = 1 << 9,
    CLI_VALIDATION_SPLIT = 1 << 10, CLI_FREEZE = 1 << 11, CLI_HEAD = 1 << 12,
    CLI_HEAD_FROM = 1 << 13, CLI_STRATEGY = 1 << 14, CLI_SEED = 1 << 15, CLI_SAVE = 1 << 16,
    /* recipe_args.c's */
    CLI_WARMUP_STEPS = 1 << 17, CLI_WARMUP_TARGET = 1 << 18, CLI_DECAY = 1 << 19,
    CLI_DECAY_STEPS = 1 << 20, CLI_DECAY_RATE = 1 << 21, CLI_ALPHA = 1 << 22,
    CLI_BOUNDARIES = 1 << 23, CLI_VALUES = 1 << 24, CLI_LABEL_SMOOTHING = 1 << 25,
    CLI_CLIPNORM = 1 << 26, CLI_CLIPVALUE = 1 << 27, CLI_GLOBAL_CLIPNORM = 1 << 28,
    CLI_WEIGHT_DECAY = 1 << 29, CLI_EMA = 1u << 30
};
/* --lora, --lora-alpha, --lora-layers and --lora-targets share the last bit (an enum
 * constant must fit an int); lora_args.c tells them apart by name. */
#define CLI_LORA (1u << 31)
#define CLI_RECIPE_OPTIONS (CLI_WARMUP_STEPS | CLI_WARMUP_TARGET | CLI_DECAY | CLI_DECAY_STEPS | \
                            CLI_DECAY_RATE | CLI_ALPHA | CLI_BOUNDARIES | CLI_VALUES | \
                            CLI_LABEL_SMOOTHING | CLI_EMA)
#define CLI_CLIPPING (CLI_CLIPNORM | CLI_CLIPVALUE | CLI_GLOBAL_CLIPNORM)

/* The options that change how an imported model is built or trained: a
 * kiln model file carries its own. */
#define CLI_BUILD_OPTIONS (CLI_LOSS | CLI_FROM_LOGITS | CLI_OPTIMIZER | CLI_LEARNING_RATE | \
                           CLI_MOMENTUM | CLI_NESTEROV | CLI_FREEZE | CLI_HEAD | CLI_HEAD_FROM | \
                           CLI_RECIPE_OPTIONS | CLI_CLIPPING | CLI_WEIGHT_DECAY | CLI_LORA)

typedef struct cli_args {
    const char *command;
    const char *paths[3];
    int n_paths;
    unsigned given;              /* CLI_* bits of the options on the line */
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
int cli_parse(int argc, char **argv, unsigned allowed, cli_args *a);

/* The name of the first option (in usage order) among the CLI_* `bits`. */
const char *cli_option_name(unsigned bits);

/* Prints "kiln: <why>" and the usage on stderr; returns 2. */
int cli_usage(const char *why, ...);

/* Prints the usage text to f. */
void cli_print_usage(FILE *f);

#endif
