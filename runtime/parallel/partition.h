/* Private: splitting a model's layers into pipeline stages, one per
 * device, from explicit placements or balanced by compute cost within
 * each device's memory budget. Host code only: it sizes, it allocates
 * nothing on a device. */
#ifndef KILN_RUNTIME_PARALLEL_PARTITION_H
#define KILN_RUNTIME_PARALLEL_PARTITION_H

#include "runtime/parallel/replica.h"

typedef struct kiln_stage_plan {
    int32_t device;           /* the context's device index */
    kiln_stage_span span;     /* its nodes and parameter slices */
    uint64_t cost;            /* forward work per sample (FLOPs plus elementwise) */
    uint64_t state_bytes;     /* parameters, gradients, optimizer state, accumulation */
    uint64_t budget;          /* bytes it may use on its device */
} kiln_stage_plan;

/* Per-sample forward cost of node i as the partitioner weighs it. */
uint64_t kiln_node_cost(const kiln_model *m, kiln_node i);

/* Bytes of parameters, gradients, optimizer state (and the accumulation
 * buffer when `accumulate`) that nodes first..last hold on a device. */
uint64_t kiln_span_state_bytes(const kiln_model *m, kiln_node first, kiln_node last,
                               int accumulate);

/* Plans the stages of a compiled model (parameters laid out, path known)
 * from its placements or, without any, by splitting the path into
 * m->pipeline_stages (0: every device) contiguous stages of least maximal
 * cost whose state fits each device's budget. `stages` receives a
 * kiln_calloc'd array. Errors name the layer, device, bytes needed and
 * bytes available. */
kiln_status kiln_partition(const kiln_model *m, int accumulate, kiln_stage_plan **stages,
                           int32_t *n_stages);

#endif
