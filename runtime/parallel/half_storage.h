/* Private: a replica's activations kept in IEEE half precision between a
 * node's forward pass and its backward pass
 * (kiln_compile_options.activation_storage = KILN_STORAGE_FLOAT16).
 *
 * Each node the plan covers has a half copy of its output (and of its
 * post-activation values when those are a buffer of their own) for the
 * whole step; float32 buffers exist only while a layer reads or writes
 * them: from the node's forward pass to its last reader's, and from its
 * last reader's backward pass to its own. Those float32 buffers and the
 * nodes' gradients come from a pool of slots shared by nodes whose
 * lifetimes do not overlap, planned once per batch capacity. Arithmetic
 * stays float32: a node's output is rounded to half as soon as it is
 * computed (the rest of the forward pass reads the rounded value, as
 * backward does), and expanded to float32 before the backward passes that
 * read it.
 *
 * The plan leaves a node in float32 buffers of its own (pinned) where
 * something outside the layers' passes reads it: the model's inputs and
 * outputs (the loss, predict; never rounded), and nodes another pipeline
 * stage sends or receives (rounded where they are computed, so that the
 * stages compute what one device does). */
#ifndef KILN_RUNTIME_PARALLEL_HALF_STORAGE_H
#define KILN_RUNTIME_PARALLEL_HALF_STORAGE_H

#include "runtime/parallel/replica.h"

/* Whether node i of r is pinned (float32 buffers of its own, allocated by
 * the replica) rather than kept in half; every node when r keeps no
 * activation in half. */
int kiln_half_pinned(const kiln_replica *r, kiln_node i);

/* Plans and allocates the half copies and the pool for batches of n
 * samples (after the replica has made its pinned nodes' buffers). */
kiln_status kiln_half_reserve(kiln_replica *r, int32_t n);

/* Frees them and clears the covered nodes' buffer pointers. */
void kiln_half_release(kiln_replica *r);

/* Before node i's forward pass: its output buffers from the pool. */
void kiln_half_before_forward(kiln_replica *r, kiln_node i);

/* After node i's forward pass (and its activation): rounds its outputs to
 * half (a pinned one's in place), keeping the copies. */
kiln_status kiln_half_after_forward(kiln_replica *r, kiln_node i, int32_t n);

/* Before node i's backward pass: the inputs whose last reader is i get
 * their float32 buffers again, expanded from half, and a gradient slot. */
kiln_status kiln_half_before_backward(kiln_replica *r, kiln_node i, int32_t n);

/* KILN_ERROR_NUMERIC naming the first layer whose output exceeded half's
 * range since the last check (then cleared), else KILN_OK. */
kiln_status kiln_half_check(kiln_replica *r);

/* Device bytes of the half copies, the pool and the overflow flag. */
uint64_t kiln_half_bytes(const kiln_replica *r);

#endif
