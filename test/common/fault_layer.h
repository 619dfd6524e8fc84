/* A layer kind for the tests only: the identity, except that on one device,
 * at one training step, in forward or backward, it fails or stalls. Tests
 * insert it where a replica, stage or process should break; the library
 * carries no fault hook. */
#ifndef KILN_TEST_FAULT_LAYER_H
#define KILN_TEST_FAULT_LAYER_H

#include "base/flag.h"
#include "layers/layer.h"

typedef struct fault_plan {
    int armed;
    int32_t device;         /* kiln_device_info.index of the device that faults */
    int backward;           /* in backward, else in a training forward */
    int64_t step;           /* kiln_step.step_number: training steps before it */
    /* > 0: stall instead of failing, until the test raises `released` (once
     * fit has returned) or this many seconds pass. Nothing tells a layer
     * that the watchdog abandoned its step, so this bound must outlast the
     * step timeout and end within KILN_WORKER_STOP_GRACE (10 s). */
    double stall_seconds;
    kiln_flag released;
} fault_plan;

/* Adds the layer (named "fault") after `input`; `plan` must outlive the
 * model. */
kiln_node fault_layer(kiln_model *model, kiln_node input, fault_plan *plan);

#endif
