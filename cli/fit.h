/* kiln fit MODEL FEATURES.npy LABELS.npy --save OUT [options] */
#ifndef KILN_CLI_FIT_H
#define KILN_CLI_FIT_H

#include "args.h"

/* Trains MODEL on the .npy samples and saves a model file; the exit
 * status (0, or 1 with the reason on stderr). */
int cli_fit(kiln_context *ctx, const cli_args *a);

#endif
