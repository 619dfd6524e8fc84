/* How the kiln tool says that a command failed. */
#ifndef KILN_CLI_REPORT_H
#define KILN_CLI_REPORT_H

#include "kiln.h"

/* Prints the context's message for a failed call; returns 1. */
int cli_failed(kiln_context *ctx, const char *command, kiln_status st);

/* What the tool itself refuses, printed as cli_failed() prints kiln's
 * refusals; returns 1. */
int cli_refuse(const char *command, kiln_status st, const char *format, ...);

#endif
