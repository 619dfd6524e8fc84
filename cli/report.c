#include "report.h"

#include <stdarg.h>
#include <stdio.h>

int cli_failed(kiln_context *ctx, const char *command, kiln_status st)
{
    fprintf(stderr, "kiln %s: %s (%s)\n", command, kiln_context_last_error(ctx),
            kiln_status_name(st));
    return 1;
}

int cli_refuse(const char *command, kiln_status st, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    fprintf(stderr, "kiln %s: ", command);
    vfprintf(stderr, format, ap);
    fprintf(stderr, " (%s)\n", kiln_status_name(st));
    va_end(ap);
    return 1;
}
