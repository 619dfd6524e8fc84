/* Private: a replica is one device's full copy of a model: flat parameter,
 * gradient and optimizer buffers, per-node activations and gradients, and
 * each layer's device state. Everything a strategy does to a device goes
 * through these calls, made from the one host thread that drives it. */
#ifndef KILN_RUNTIME_PARALLEL_REPLICA_H
#define KILN_RUNTIME_PARALLEL_REPLICA_H

#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"   /* KILN_MAX_OPTIMIZER_SLOTS */

/* Called after backward has finished with node i (for every node, from the
 * last to the first, whether or not it ran). */
typedef kiln_status (*kiln_backward_hook)(void *user, kiln_node i);

/* The part of a model a replica computes: a pipeline stage's contiguous
 * node range and its slices of the flat parameter layout (trainable, then
 * non-trainable state, then frozen layers' weights), which the replica's
 * buffers hold back to back. A whole-model replica's state slice runs to
 * the end of the layout, frozen weights included, and its frozen slice is
 * empty. */
typedef struct kiln_stage_span {
    kiln_node first, last;                  /* computed here, inclusive */
    size_t trainable_begin, trainable_end;  /* floats of the model's flat layout */
    size_t state_begin, state_end;
    size_t frozen_begin, frozen_end;
    int accumulate;                         /* keep an accumulation buffer */
} kiln_stage_span;

/* Where a replica stands in its step, for the watchdog and its messages. */
typedef enum kiln_replica_phase {
    KILN_PHASE_IDLE,
    KILN_PHASE_UPLOAD,
    KILN_PHASE_FORWARD,
    KILN_PHASE_BACKWARD,
    KILN_PHASE_AFTER_BACKWARD,   /* backward done: reducing, waiting for others */
} kiln_replica_phase;

/* Activations kept in half precision: runtime/parallel/half_storage.h. */
typedef struct kiln_half_storage kiln_half_storage;

typedef struct kiln_replica {
    const kiln_model *model;
    kiln_device *dev;
    kiln_stage_span span;        /* the whole model for data-parallel replicas */
    size_t n_floats;             /* parameter floats held here */
    size_t n_trainable;          /* their trainable prefix */
    /* The gradient buffer's floats: the trainable prefix, or further where
     * a layer kind may write gradients for frozen weights (layer.h's
     * writes_trainable_gradients_only). Frozen weights past it, LoRA's base
     * kernels among them, cost no gradient memory. */
    size_t n_grad_floats;
    size_t *offsets;             /* per node x KILN_MAX_PARAMS: offsets into params */
    unsigned char *present;      /* per node: buffers here (computed or received) */
    int shared;                  /* a view: params, grads, slots, accum are borrowed */
    const char *role;            /* "replica" or "stage", for messages */
    int32_t capacity;            /* largest batch the buffers hold */
    kiln_buffer *params, *grads;
    kiln_buffer *slots[KILN_MAX_OPTIMIZER_SLOTS];  /* optimizer state */
    kiln_buffer **out;           /* per node: the layer's output (before activation) */
    kiln_buffer **act;           /* per node: after activation (== out when linear) */
    kiln_buffer **grad;          /* per node: gradient w.r.t. act (NULL: not needed) */
    void **state;                /* per node: the layer's replica state */
    unsigned char *written;      /* per node: grad written this backward pass */
    kiln_half_storage *half;     /* NULL: every activation in float32 buffers of its own */
    kiln_buffer *sums;           /* KILN_N_SUMS floats */
    /* Each output's labels, per-row losses and correct counts, and its
     * per-row metrics (KILN_METRIC_COLUMNS; NULL when none is asked); NULL
     * on a pipeline stage that does not hold the output. */
    struct kiln_replica_output {
        kiln_buffer *labels, *loss, *correct, *metric;
    } outputs[KILN_MAX_MODEL_OUTPUTS];
    kiln_buffer *accum;          /* gradient accumulation (NULL when not accumulating) */
    struct kiln_clip *clip;      /* gradient clipping over its trainable span (or NULL) */
    size_t workspace_bytes;      /* what the layers' prepare allocated */
    struct kiln_collective *collective;  /* this step's, for synchronised layers (or NULL) */
    int64_t step_number;         /* training steps before this one (random masks) */
    int32_t first_sample;        /* its shard's place in the global batch */
    int member;
    int index;                   /* replica number within its strategy */
    /* Where the replica is, for watchdog messages; under stage_lock. */
    pthread_mutex_t stage_lock;
    kiln_node stage_node;
    kiln_replica_phase stage_phase;
} kiln_replica;

kiln_status kiln_replica_create(const kiln_model *model, kiln_device *dev, kiln_replica **out);

/* A replica computing only `span` of the model. Nodes outside it that the
 * span's layers read are present too: their activations (and gradients)
 * are written and read by the caller, which moves them between stages. */
kiln_status kiln_replica_create_stage(const kiln_model *model, kiln_device *dev,
                                      const kiln_stage_span *span, kiln_replica **out);

/* Another set of activations for `base`'s stage (a micro-batch in flight):
 * it borrows base's parameters, gradients, optimizer state and
 * accumulation buffer, and must be destroyed before it. */
kiln_status kiln_replica_create_view(const kiln_replica *base, kiln_replica **out);
void kiln_replica_destroy(kiln_replica *r);

/* How many floats optimizer slot `slot` holds: the trainable prefix, the
 * only part an update touches (so that frozen weights, LoRA's base kernel
 * among them, cost no optimizer memory); the weights' moving average
 * (use_ema) holds all n_floats, as kiln_ema_params reads it whole. */
size_t kiln_replica_slot_floats(const kiln_replica *r, int slot);

/* The replica's share of kiln_model_memory (device left to the caller). */
void kiln_replica_memory(const kiln_replica *r, kiln_memory_report *report);

/* Makes the activation buffers hold batches of n samples. */
kiln_status kiln_replica_reserve(kiln_replica *r, int32_t n);

/* Frees the activation buffers and the layers' workspace (reserve
 * allocates them again). */
void kiln_replica_release(kiln_replica *r);

/* Uploads a batch (labels may be NULL for predict), copied before it
 * returns: a step abandoned by the watchdog must not read the caller's
 * arrays after they are freed. */
kiln_status kiln_replica_upload(kiln_replica *r, const kiln_batch *batch);

kiln_status kiln_replica_forward(kiln_replica *r, int32_t n, int training);

/* Whether node i's layer applies its element-wise activation in its own
 * forward pass, into its output buffer (then no separate post-activation
 * buffer). Never the model's output, whose loss may need the logits, nor
 * an activation whose gradient needs its input (kiln_activation_needs_input). */
int kiln_node_fuses_activation(const kiln_model *m, kiln_node i);

/* Loss, metrics and the output gradient; `scale` is kiln_loss_scale of the
 * global batch's counted positions (1 / global batch without sequences). */
kiln_status kiln_replica_loss(kiln_replica *r, int32_t n, float scale);

/* Backward over the span. A gradient arriving from another stage is
 * written into r->grad[j] before, with kiln_replica_mark_gradient(r, j), so
 * the span's own consumers of j add to it. */
kiln_status kiln_replica_backward(kiln_replica *r, int32_t n, kiln_backward_hook hook,
                                  void *user);
void kiln_replica_mark_gradient(kiln_replica *r, kiln_node j);

/* Gradient accumulation over the flat gradient range [offset, offset + n)
 * of the trainable prefix (the accumulation buffer holds n_trainable):
 * accum += grads, or (final) grads = (accum + grads) * scale and accum = 0. */
kiln_status kiln_replica_accumulate(kiln_replica *r, size_t offset, size_t n, int final,
                                    float scale);

/* "replica 1 on device 1 (name), layer 'dense' (backward)": for messages. */
void kiln_replica_describe(kiln_replica *r, char *buf, size_t size);

/* Where the replica stands now (any thread may ask). */
kiln_replica_phase kiln_replica_phase_now(kiln_replica *r);

/* Blocking: waits for the queue, returns the KILN_N_SUMS sums. */
kiln_status kiln_replica_read_sums(kiln_replica *r, double *sums);

kiln_status kiln_replica_read_output(kiln_replica *r, int32_t n, float *host);

kiln_status kiln_replica_read_params(kiln_replica *r, float *flat);
kiln_status kiln_replica_write_params(kiln_replica *r, const float *flat);

#endif
