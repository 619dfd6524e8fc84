/* Private: a replica is one device's full copy of a model: flat parameter,
 * gradient and optimizer buffers, per-node activations and gradients, and
 * each layer's device state. Everything a strategy does to a device goes
 * through these calls, made from the one host thread that drives it. */
#ifndef KILN_RUNTIME_REPLICA_H
#define KILN_RUNTIME_REPLICA_H

#include "runtime/model.h"

#define KILN_MAX_OPTIMIZER_SLOTS 2

typedef struct kiln_replica {
    const kiln_model *model;
    kiln_device *dev;
    int32_t capacity;            /* largest batch the buffers hold */
    kiln_buffer *params, *grads;
    kiln_buffer *slots[KILN_MAX_OPTIMIZER_SLOTS];  /* optimizer state */
    kiln_buffer **out;           /* per node: the layer's output (before activation) */
    kiln_buffer **act;           /* per node: after activation (== out when linear) */
    kiln_buffer **grad;          /* per node: gradient w.r.t. act (NULL: not needed) */
    void **state;                /* per node: the layer's replica state */
    unsigned char *written;      /* per node: grad written this backward pass */
    kiln_buffer *labels, *loss, *correct, *sums;
} kiln_replica;

kiln_status kiln_replica_create(const kiln_model *model, kiln_device *dev, kiln_replica **out);
void kiln_replica_destroy(kiln_replica *r);

/* Makes the activation buffers hold batches of n samples. */
kiln_status kiln_replica_reserve(kiln_replica *r, int32_t n);

/* Enqueues the upload of a batch (labels may be NULL for predict). The host
 * arrays must stay unchanged until the next blocking read. */
kiln_status kiln_replica_upload(kiln_replica *r, const kiln_batch *batch);

kiln_status kiln_replica_forward(kiln_replica *r, int32_t n, int training);

/* Loss, metrics and the output gradient; `scale` is 1 / global batch. */
kiln_status kiln_replica_loss(kiln_replica *r, int32_t n, float scale);

kiln_status kiln_replica_backward(kiln_replica *r, int32_t n);

/* Blocking: waits for the queue, returns the loss and correct sums. */
kiln_status kiln_replica_read_sums(kiln_replica *r, double sums[2]);

kiln_status kiln_replica_read_output(kiln_replica *r, int32_t n, float *host);

kiln_status kiln_replica_read_params(kiln_replica *r, float *flat);
kiln_status kiln_replica_write_params(kiln_replica *r, const float *flat);

#endif
