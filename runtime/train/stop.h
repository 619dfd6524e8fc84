/* Private: why fit, evaluate and predict end early, and the application's
 * request that they do (kiln_model_stop). */
#ifndef KILN_RUNTIME_TRAIN_STOP_H
#define KILN_RUNTIME_TRAIN_STOP_H

#include "runtime/model/model.h"

/* Records why fit stops before its last epoch (kiln_model_stop_reason);
 * fit ends after the step or epoch that asked. The first reason stands. */
void kiln_model_record_stop(kiln_model *m, kiln_stop_cause cause, const char *fmt, ...)
    KILN_PRINTF(3, 4);

/* A call that kiln_model_stop may end begins: a request made while no call
 * ran is dropped, as Keras's fit resets model.stop_training. */
void kiln_model_stop_begin(kiln_model *m);

/* Has the application asked the running call to stop? Then its reason is
 * recorded (KILN_STOP_APPLICATION: "kiln_model_stop: <call> stopped
 * <where>") and 1 returned. */
int kiln_model_stop_asked(kiln_model *m, const char *call, const char *where);

#endif
