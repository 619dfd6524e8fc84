/* Private: the model's compiled plan (m->plan), owned by train/ (compile),
 * whose output planner in model/outputs.c fills the loss plans: each
 * output's loss plan and weight, the label layout, the parameter layout,
 * the optimizer with its schedule. Other rooms touch it only as
 * docs/architecture.md ("The parts of a model") allows; tools/check_floors.py
 * checks it. */
#ifndef KILN_RUNTIME_MODEL_PLAN_H
#define KILN_RUNTIME_MODEL_PLAN_H

#include "kiln.h"
#include "runtime/model/lr_schedule.h"

/* How the loss meets the output: fused with its softmax/sigmoid or not. */
typedef struct kiln_loss_plan {
    kiln_loss loss;
    const char *kernel;    /* in loss.cl */
    /* kernel, a work-item a row, has a "_gpu" variant, a work-group a
     * row, for wide rows (the categorical losses: kiln_run_per_row). */
    int per_row_variants;
    int fused;             /* gradient is w.r.t. the pre-activation */
    int sparse;            /* labels are int32 class ids */
    int accuracy;          /* report accuracy */
    /* The kernels run on rows: `positions` per sample of `cols` outputs
     * each. Categorical losses: a row per position of a (positions...,
     * classes) output, one sparse id each; others: one row of every output. */
    int64_t positions;
    int64_t cols;
    float label_smoothing; /* Keras's: the cross-entropies' targets smoothed */
    int has_ignore;        /* sparse labels equal to `ignore` are padding */
    int32_t ignore;
    /* Metrics beyond accuracy (kiln_compile_options): */
    int32_t top_k;         /* > 0: top-k accuracy */
    int mean_abs_error;
    int binary_accuracy;
    float threshold;       /* binary accuracy's */
    /* Where in the sums its loss sums go: 0 for a model's only output; for
     * each of several outputs its own slots, from which it adds its share
     * to the total in slot 0. */
    int32_t sums_at;
    /* Its per-row losses' share of the model's loss: 1 for a model's only
     * output (the loss is the mean over its counted positions); its weight
     * over its positions for each of several (the loss is the weighted sum
     * of the outputs' means, a mean over samples). */
    float head_scale;
} kiln_loss_plan;

/* Parameters start on 64-byte boundaries in the flat buffer. */
#define KILN_PARAM_ALIGN 16

/* Where weight decay applies: runs [run[k][0], run[k][1]) of the flat
 * trainable layout, ascending and apart; run NULL: every parameter (when
 * the optimizer has a weight decay at all). Compile's, freed with the
 * model. */
typedef struct kiln_decay_runs {
    size_t (*run)[2];
    int32_t n;
} kiln_decay_runs;

typedef struct kiln_plan {
    int compiled;
    kiln_loss_plan heads[KILN_MAX_MODEL_OUTPUTS];
    float head_weight[KILN_MAX_MODEL_OUTPUTS];
    int64_t head_label_offset[KILN_MAX_MODEL_OUTPUTS];  /* 4-byte words into a sample's */
    int64_t label_words;         /* a sample's labels, every output's */
    int64_t output_size;         /* floats per sample predict writes: every output's */
    /* Resolved at compile; its schedule points at lr_schedule, the model's
     * own copy (never the caller's). */
    kiln_optimizer_options optimizer;
    kiln_lr_schedule lr_schedule;
    kiln_lr_pieces lr_pieces;    /* lr_schedule's boundaries and values point here */
    kiln_decay_runs decay;       /* the parameters weight decay applies to */
    size_t n_param_floats;       /* flat buffer length, with alignment padding */
    size_t n_trainable_floats;   /* its trainable prefix; non-trainable state follows */
    size_t n_state_floats;       /* that state (batch norm's moving statistics); then the
                                  * parameters of frozen layers, which nothing updates */
    int64_t n_trainable_weights;
    int64_t n_weights;           /* parameters without padding */
    int32_t accumulation_steps;  /* micro-steps per optimizer update (>= 1) */
    int half_activations;        /* activation_storage KILN_STORAGE_FLOAT16 */
} kiln_plan;

/* What a batch's loss is a mean over: the positions of the model's only
 * output that count (its ignore class left out), or the samples of a
 * model of several outputs (each output's mean over its positions is in
 * its head_scale). The gradient scale is kiln_loss_scale of the global
 * count. */
double kiln_model_counted(const kiln_model *m, const void *labels, int32_t n);

/* The loss plan output node i is trained under (NULL: not an output). */
const kiln_loss_plan *kiln_model_output_plan(const kiln_model *m, kiln_node i);

/* Compile's part: every output's loss plan and weight, their label
 * layout, and what several outputs do not support. */
kiln_status kiln_model_plan_outputs(kiln_model *m, const kiln_compile_options *o);

/* Each output's loss and accuracy from step or epoch sums (several
 * outputs; else out->n_outputs = 0). */
void kiln_model_output_metrics(const kiln_model *m, const double *sums, kiln_metrics *out);
/* The plan the model's own values follow (its accuracy and metrics): its
 * only output's; for several outputs a loss alone, each output reporting
 * its accuracy apart. */
const kiln_loss_plan *kiln_model_totals(const kiln_model *m);
/* What evaluate reports from sums: the model's loss and metrics, then each
 * output's (kiln_model_output_metrics). */
void kiln_model_metrics(const kiln_model *m, const double *sums, kiln_metrics *out);

/* Compile's part: the runs of m->plan.decay, from the resolved optimizer's
 * exclusions. KILN_ERROR_OUT_OF_MEMORY. */
kiln_status kiln_model_plan_decay(kiln_model *m);

/* A hash of what else decides an update: the loss, the optimizer with its
 * settings and schedule, the accumulation steps. */
uint64_t kiln_model_training_hash(const kiln_model *m);

#endif
