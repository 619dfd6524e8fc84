/* Private: running a step with new shapes on one device at a time.
 *
 * PoCL 3.1's CPU devices can abort (an assertion in
 * pocl_release_dlhandle_cache) when two devices run kernels at once while
 * kernels are first specialised for a work size. opencl/program.c avoids
 * the cause (PoCL's cache mixing two devices' entries of one kernel; see
 * test_concurrent_devices); as a second guard, a strategy runs a step
 * whose batch sizes it has not run before with its devices' computation
 * serialised by a process-wide lock, at the cost of one slower step per
 * shape. */
#ifndef KILN_RUNTIME_PARALLEL_FIRST_RUN_H
#define KILN_RUNTIME_PARALLEL_FIRST_RUN_H

#include <stdint.h>

#define KILN_SHAPE_LOG_SIZE 64

/* The sizes a strategy has run (per kind of job). */
typedef struct kiln_shape_log {
    int32_t seen[KILN_SHAPE_LOG_SIZE];
    int n;
} kiln_shape_log;

/* Records `size`; returns 1 if it had not been seen (a full log says no:
 * after 64 sizes a model has met its shapes). */
int kiln_shape_log_add(kiln_shape_log *log, int32_t size);

/* The process-wide lock; no-ops when `serial` is 0. */
void kiln_first_run_enter(int serial);
void kiln_first_run_leave(int serial);

#endif
