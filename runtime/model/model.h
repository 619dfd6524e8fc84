/* Private: the model body: its context, the lock of the call inside it, and
 * its parts (graph, plan, placement, training; docs/architecture.md, "The
 * parts of a model"). The helpers here need the whole body. */
#ifndef KILN_RUNTIME_MODEL_MODEL_H
#define KILN_RUNTIME_MODEL_MODEL_H

#include "layers/layer.h"
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/model/graph.h"
#include "runtime/model/placement.h"
#include "runtime/model/plan.h"
#include "runtime/model/training.h"
#include "runtime/model/strategy.h"

#include <pthread.h>

/* kiln_compile_options.step_timeout_seconds when left 0 (kiln.h says so). */
#define KILN_DEFAULT_STEP_TIMEOUT 600.0
/* Keras's defaults for kiln_fit_options.epochs and batch_size left 0, and
 * for evaluate's and predict's batch_size 0. */
#define KILN_DEFAULT_EPOCHS 1
#define KILN_DEFAULT_BATCH_SIZE 32

struct kiln_model {
    kiln_context *ctx;
    /* Held by the public call using the model (kiln_model_enter); its name,
     * for the message a second call gets, read with __atomic loads. */
    pthread_mutex_t busy;
    const char *busy_call;
    kiln_diag *busy_thread;      /* the diagnostics of the thread inside: its token */
    /* The parts, each written by the room that owns it (docs/architecture.md,
     * "The parts of a model"; tools/check_floors.py checks who reads what). */
    kiln_graph graph;            /* model/ */
    kiln_plan plan;              /* compile (train/) and model/'s planners */
    kiln_placement placement;    /* compile (train/) and parallel/ */
    kiln_training training;      /* train/ */
};

/* How many outputs report a loss and accuracy of their own beside the
 * model's (Keras's per-output history entries): each of several outputs;
 * none of a model of one output, whose loss and accuracy are the model's. */
static inline int32_t kiln_model_outputs_apart(const kiln_model *m)
{
    return m->graph.n_outputs > 1 ? m->graph.n_outputs : 0;
}

/* Bytes of one sample's labels, every output's. */
static inline size_t kiln_model_label_bytes(const kiln_model *m)
{
    return (size_t)m->plan.label_words * 4;
}

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

#endif
