/* Why fit, evaluate and predict end early: the stop a callback records, and
 * the application's request from any thread (kiln_model_stop), which the
 * running call honours between steps. */
#include "runtime/train/stop.h"

#include "runtime/context/text.h"

#include <stdarg.h>
#include <stdio.h>

void kiln_model_record_stop(kiln_model *m, kiln_stop_cause cause, const char *fmt, ...)
{
    if (m->training.stop_cause != KILN_STOP_NONE)
        return;   /* the first reason stands */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->training.stop_reason, sizeof m->training.stop_reason, fmt, ap);
    va_end(ap);
    m->training.stop_cause = cause;
    kiln_log(m->ctx, KILN_LOG_INFO, "%s", m->training.stop_reason);
}

/* Not entered: the call it stops holds the model, and waiting for it would
 * defeat the purpose. The flag is the only state it touches. */
kiln_status kiln_model_stop(kiln_model *m)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    kiln_flag_raise(&m->training.stop_requested);
    return KILN_OK;
}

void kiln_model_stop_begin(kiln_model *m)
{
    kiln_flag_lower(&m->training.stop_requested);
}

int kiln_model_stop_asked(kiln_model *m, const char *call, const char *where)
{
    if (!kiln_flag_up(&m->training.stop_requested))
        return 0;
    m->training.stop_cause = KILN_STOP_NONE;   /* an earlier call's reason */
    kiln_model_record_stop(m, KILN_STOP_APPLICATION, "kiln_model_stop: the application "
                           "stopped %s %s", call, where);
    return 1;
}

kiln_status kiln_model_stop_reason(const kiln_model *m, kiln_stop_cause *cause, char *text,
                                   size_t size, size_t *length)
{
    if (cause)
        *cause = KILN_STOP_NONE;
    if (length)
        *length = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!text && size > 0)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_model_stop_reason: text is NULL but size is %zu", size);
    int entered;
    const kiln_status st = kiln_model_enter_reading(m, "kiln_model_stop_reason", &entered);
    if (st == KILN_OK) {
        kiln_text t = {.text = text, .size = size};
        if (size > 0)
            text[0] = '\0';
        kiln_text_printf(&t, "%s", m->training.stop_reason);
        if (cause)
            *cause = m->training.stop_cause;
        if (length)
            *length = t.length;
    }
    kiln_model_leave_reading(m, entered);
    return st;
}
