/* Private: how and where the model runs (m->placement), owned by parallel/:
 * the strategy and its settings (replicas, buckets, pipeline, parameter
 * server) and the MPI world; compile (train/compile.c) sets the settings
 * from its options and picks the strategy. Defined in model/, below both,
 * because struct kiln_model holds it. Other rooms touch it only as
 * docs/architecture.md ("The parts of a model") allows; tools/check_floors.py
 * checks it. */
#ifndef KILN_RUNTIME_MODEL_PLACEMENT_H
#define KILN_RUNTIME_MODEL_PLACEMENT_H

#include "runtime/model/strategy.h"

typedef struct kiln_placement {
    int32_t n_replicas;          /* requested (0: every device) */
    double step_timeout;         /* watchdog, seconds */
    size_t bucket_bytes, first_bucket_bytes;
    int reducer_threads;
    /* Pipeline (model parallelism) settings. */
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
} kiln_placement;

#endif
