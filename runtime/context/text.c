#include "runtime/context/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void kiln_text_printf(kiln_text *t, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    const size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (t->length + 1 < t->size) {
        const size_t room = t->size - 1 - t->length;
        memcpy(t->text + t->length, line, len < room ? len : room);
        t->text[t->length + (len < room ? len : room)] = '\0';
    }
    t->length += len;
}

const char *kiln_grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    const int n = snprintf(digits, sizeof digits, "%lld", (long long)v);
    size_t at = 0;
    for (int i = 0; i < n && at + 1 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0 && at + 2 < size)
            buf[at++] = ',';
        buf[at++] = digits[i];
    }
    buf[at] = '\0';
    return buf;
}
