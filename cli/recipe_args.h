/* fit's learning-rate schedule and label smoothing options (issue 30):
 * parsed here, so that args.c only dispatches to them. */
#ifndef KILN_CLI_RECIPE_ARGS_H
#define KILN_CLI_RECIPE_ARGS_H

#include "args.h"

/* The options' lines of the usage text. */
extern const char cli_recipe_usage[];

/* Whether `bit` is one of the options below. */
int cli_recipe_option(cli_options bit);

/* One option's value into `a`; 0 (said) when it is not one. */
int cli_recipe_take(cli_options bit, const char *v, cli_args *a);

/* What the options say together, once all are read; 0 (said) when wrong. */
int cli_recipe_check(const cli_args *a);

#endif
