/* Private: the model body: the node graph, compiled state and history. */
#ifndef KILN_RUNTIME_MODEL_MODEL_H
#define KILN_RUNTIME_MODEL_MODEL_H

#include "layers/layer.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/model/strategy.h"

#include <pthread.h>

/* kiln_compile_options.step_timeout_seconds when left 0 (kiln.h says so). */
#define KILN_DEFAULT_STEP_TIMEOUT 600.0
/* Keras's defaults for kiln_fit_options.epochs and batch_size left 0, and
 * for evaluate's and predict's batch_size 0. */
#define KILN_DEFAULT_EPOCHS 1
#define KILN_DEFAULT_BATCH_SIZE 32

typedef struct kiln_node_rec {
    const kiln_layer_ops *ops;
    void *config;
    char name[64];
    kiln_node inputs[KILN_MAX_INPUTS];
    int n_inputs;
    kiln_activation activation;   /* applied by the runtime after the layer */
    kiln_shape shape;             /* output, batch not counted */
    kiln_param_spec params[KILN_MAX_PARAMS];
    int n_params;
    size_t param_offset[KILN_MAX_PARAMS];  /* floats into the flat buffer */
    int on_path;                  /* the output depends on it */
    int32_t device;               /* kiln_model_place: its device, or -1 */
    int frozen;                   /* kiln_model_set_trainable(.., 0): no updates */
    int ints;                     /* its output holds int32 ids (an int Input) */
    /* Imported (kiln_model_import_onnx): each parameter's own name, which
     * files and accessors use instead of "<layer>/<param>" (NULL: that), and
     * its initial value in kiln's layout (NULL: the spec's initialiser).
     * Both belong to the model. */
    char *param_name[KILN_MAX_PARAMS];
    float *param_init[KILN_MAX_PARAMS];
} kiln_node_rec;

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

struct kiln_model {
    kiln_context *ctx;
    /* Held by the public call using the model (kiln_model_enter); its name,
     * for the message a second call gets, read with __atomic loads. */
    pthread_mutex_t busy;
    const char *busy_call;
    kiln_diag *busy_thread;      /* the diagnostics of the thread inside: its token */
    kiln_node_rec *nodes;
    int32_t n_nodes, cap_nodes;
    kiln_node output;            /* -1: the last node; with several outputs the first */
    /* The outputs in order (compile makes `output` the only one when
     * kiln_model_set_outputs was not called), each with its loss plan
     * (heads) and weight; a sample's labels are output 0's label words
     * (ids or floats, 4 bytes each), then output 1's, ... */
    kiln_node outputs[KILN_MAX_MODEL_OUTPUTS];
    int32_t n_outputs;
    kiln_status build_status;    /* first builder error, reported by compile */
    char build_error[512];

    int compiled;
    /* The Inputs in declaration order, the model's input order; `input` is
     * the first. One sample's features are the inputs' values one after
     * another: input k's input_size[k] floats at input_offset[k], the
     * whole sample_size floats (ids ride as int32 bits). */
    kiln_node inputs[KILN_MAX_MODEL_INPUTS];
    int32_t n_inputs;
    kiln_node input;
    int64_t input_offset[KILN_MAX_MODEL_INPUTS];
    int64_t sample_size;
    /* Inputs of int32 ids: each id must be below ids[k].limit, the smallest
     * of the id-reading layers input k feeds (limit 0: a float input). */
    kiln_id_range ids[KILN_MAX_MODEL_INPUTS];
    int input_ints;              /* the first input holds ids */
    kiln_loss_plan heads[KILN_MAX_MODEL_OUTPUTS];
    float head_weight[KILN_MAX_MODEL_OUTPUTS];
    int64_t head_label_offset[KILN_MAX_MODEL_OUTPUTS];  /* 4-byte words into a sample's */
    int64_t label_words;         /* a sample's labels, every output's */
    int64_t output_size;         /* floats per sample predict writes: every output's */
    /* Resolved at compile; its schedule points at lr_schedule, the model's
     * own copy (never the caller's). */
    kiln_optimizer_options optimizer;
    kiln_lr_schedule lr_schedule;
    size_t n_param_floats;       /* flat buffer length, with alignment padding */
    size_t n_trainable_floats;   /* its trainable prefix; non-trainable state follows */
    size_t n_state_floats;       /* that state (batch norm's moving statistics); then the
                                  * parameters of frozen layers, which nothing updates */
    int64_t n_trainable_weights;
    int64_t n_weights;           /* parameters without padding */
    int64_t n_optimizer_steps;
    int32_t accumulation_steps;  /* micro-steps per optimizer update (>= 1) */
    int32_t n_replicas;          /* requested (0: every device) */
    double step_timeout;         /* watchdog, seconds */
    size_t bucket_bytes, first_bucket_bytes;
    int reducer_threads;
    /* Pipeline (model parallelism) settings. */
    int placed;                  /* some node was placed on a device */
    int32_t pipeline_stages;     /* 0: every device (automatic partition) */
    int32_t micro_batches;
    kiln_pipeline_schedule schedule;
    uint64_t memory_budget;      /* per device; 0: its global memory */
    int32_t max_staleness;       /* parameter server: steps ahead of the slowest (0: any) */
    int32_t store_ranks;         /* parameter server: 0 in-process, 1 over MPI (rank 0) */
    const kiln_strategy_ops *strategy;
    void *strategy_impl;
    int32_t rank, world;         /* multi-worker: this process among `world` (else 0, 1) */
    struct kiln_mpi *mpi;        /* the strategy's MPI world, whose ranks fit together */
    int mpi_evaluates;           /* ... and evaluate and predict together (multi_worker) */

    kiln_epoch_record *history;
    int32_t n_history, cap_history;

    /* Where training stands inside the current epoch (saved in checkpoints;
     * fit with resume continues from here). */
    int64_t n_train_steps;       /* training steps run, all epochs */
    int64_t epoch_step;          /* steps done in epoch n_history */
    double epoch_loss, epoch_correct;
    double epoch_metrics[3];     /* the sums of kiln_loss_plan's metrics */
    int64_t epoch_seen;
    double epoch_counted;        /* the positions the sums cover (KILN_SUM_COUNTED) */
    double epoch_heads[KILN_SUM_HEAD_SLOTS * KILN_MAX_MODEL_OUTPUTS];  /* per output */
    uint64_t shuffle_seed;

    /* A learning rate a callback set (ReduceLROnPlateau, a scheduler): it
     * replaces the compile-time rate from then on, as Keras's assignment to
     * optimizer.learning_rate does. */
    int has_lr_override;
    double lr_override;
    /* Why the last fit stopped early (kiln_model_stop_reason). */
    kiln_stop_cause stop_cause;
    char stop_reason[320];

    /* Since compile, in this process (kiln_model_training_stats). */
    int64_t timed_steps;
    double input_seconds, step_seconds;
};

/* Parameter p of a node as files and accessors name it: its own name, or
 * "<layer>/<param>"; returns buf. */
const char *kiln_node_param_name(const kiln_node_rec *node, int p, char *buf, size_t size);

/* The node's output size per sample and the input size of the model. */
int64_t kiln_node_size(const kiln_model *m, kiln_node node);

/* Compile's part: the Inputs in order, their places in a sample and their
 * id limits; every Input must reach the output. */
kiln_status kiln_model_find_inputs(kiln_model *m);

/* How many outputs report a loss and accuracy of their own beside the
 * model's (Keras's per-output history entries): each of several outputs;
 * none of a model of one output, whose loss and accuracy are the model's. */
static inline int32_t kiln_model_outputs_apart(const kiln_model *m)
{
    return m->n_outputs > 1 ? m->n_outputs : 0;
}

/* Bytes of one sample's labels, every output's. */
static inline size_t kiln_model_label_bytes(const kiln_model *m)
{
    return (size_t)m->label_words * 4;
}

/* What a batch's loss is a mean over: the positions of the model's only
 * output that count (its ignore class left out), or the samples of a
 * model of several outputs (each output's mean over its positions is in
 * its head_scale). The gradient scale is kiln_loss_scale of the global
 * count. */
double kiln_model_counted(const kiln_model *m, const void *labels, int32_t n);

/* Which of the model's outputs node i is, or -1. */
int32_t kiln_model_output_index(const kiln_model *m, kiln_node i);

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

/* Is node i one of the model's Inputs? */
int kiln_node_is_input(const kiln_model *m, kiln_node i);

/* The checks a batch of `count` samples of host features (sample_size
 * floats each, sample i named first_sample + i) gets before any device
 * work: ids in range for every input of ids and, when `finite`, no NaN or
 * Inf in float inputs. `call` starts the messages. */
kiln_status kiln_model_check_features(const kiln_model *m, const char *call, const float *x,
                                      int64_t count, int64_t first_sample, int finite);

/* A hash of every parameter's layer kind, name and shape (checkpoints
 * carry it; the processes of an MPI job compare it). */
uint64_t kiln_model_fingerprint(const kiln_model *m);

/* A hash of what else decides an update: the loss, the optimizer with its
 * settings and schedule, the accumulation steps. */
uint64_t kiln_model_training_hash(const kiln_model *m);

/* The learning rate of update `step` (counting from 0): the callbacks'
 * override, else the compile-time schedule's. Every strategy takes it
 * from here. */
double kiln_model_learning_rate(const kiln_model *m, int64_t step);

/* Host copy of initial parameters in the flat layout (n_param_floats). */
void kiln_model_init_params(const kiln_model *m, float *flat);

/* KILN_ERROR_STATE, naming `call`, unless the model is compiled;
 * KILN_ERROR_INVALID_ARGUMENT, with no message, for a NULL model. */
kiln_status kiln_model_check_compiled(const kiln_model *m, const char *call);

/* A model takes one call at a time. A public call that drives the model's
 * strategy or weights enters first: KILN_ERROR_STATE, naming the call
 * already inside, when another call (from another thread, or from inside
 * fit's callback) holds it; KILN_ERROR_INVALID_ARGUMENT, with no message,
 * for a NULL model. It never waits: a callback waiting for the fit that
 * called it would never return. */
kiln_status kiln_model_enter(kiln_model *m, const char *call);
void kiln_model_leave(kiln_model *m);
/* The accessors that read what a call may be changing (history, training
 * statistics, memory, summaries) enter too, so that no other thread reads
 * it half-written; but fit's callback, on the thread inside fit, may read.
 * Call kiln_model_leave_reading with `entered` afterwards. m is not NULL. */
kiln_status kiln_model_enter_reading(const kiln_model *m, const char *call, int *entered);
void kiln_model_leave_reading(const kiln_model *m, int entered);

/* Records, as kiln_model_add_layer records its own errors, that builder
 * `call` refused its arguments before adding a layer; returns
 * KILN_NODE_INVALID. */
kiln_node kiln_model_refuse_layer(kiln_model *model, kiln_status status, const char *call,
                                  const char *why);

/* Adds a layer node to a model: its config comes from ops->configure(args)
 * (zeros when the kind has none), then infer checks the shapes. Records
 * the first error on the model. */
kiln_node kiln_model_add_layer(kiln_model *model, const kiln_layer_ops *ops, const void *args,
                               const kiln_node *inputs, int n_inputs, const char *name,
                               kiln_activation activation);

/* The optimizer bookkeeping of the synchronous strategies' training steps:
 * where a step stands in its gradient-accumulation cycle and, when it ends
 * one, the update it makes. */
typedef struct kiln_update {
    int32_t micro;          /* micro-steps done in the cycle before this one */
    int final_micro;        /* this step ends the cycle: the optimizer runs */
    int64_t number;         /* that update's number, from 1 */
    double lr;              /* and its learning rate */
} kiln_update;

/* Before a training step of `m`. */
void kiln_update_begin(kiln_update *u, const kiln_model *m);
/* After it, with the step's sums: the cycle moves on, and a final step
 * counts as an optimizer step unless its loss, a gradient or its update was
 * non-finite (kiln_sums_skipped: every replica then skipped the update). */
void kiln_update_end(kiln_update *u, kiln_model *m, const double *sums);

#endif
