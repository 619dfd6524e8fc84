/* Private: appending formatted lines to a caller's bounded buffer while
 * counting the full length (the summary and stage-plan tables). */
#ifndef KILN_RUNTIME_CONTEXT_TEXT_H
#define KILN_RUNTIME_CONTEXT_TEXT_H

#include "runtime/context/context.h"

typedef struct kiln_text {
    char *text;      /* may be NULL when size is 0 */
    size_t size;     /* bytes including the terminating NUL */
    size_t length;   /* everything appended, including what did not fit */
} kiln_text;

void kiln_text_printf(kiln_text *t, const char *fmt, ...) KILN_PRINTF(2, 3);

/* 1234567 -> "1,234,567" into buf; returns buf. */
const char *kiln_grouped(int64_t v, char *buf, size_t size);

#endif
