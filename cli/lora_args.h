/* fit's LoRA options (issue 30): --lora RANK, --lora-alpha A,
 * --lora-layers PREFIX and --lora-targets LIST, parsed here and applied
 * before compile. */
#ifndef KILN_CLI_LORA_ARGS_H
#define KILN_CLI_LORA_ARGS_H

#include "args.h"

/* The options' lines of the usage text. */
extern const char cli_lora_usage[];

/* The value of the option of CLI_LORA_OPTIONS `bit` into `a`; 0 (said)
 * when it is not one. */
int cli_lora_take(cli_options bit, const char *v, cli_args *a);

/* What the options say together, once all are read; 0 (said) when wrong. */
int cli_lora_check(const cli_args *a);

/* kiln_model_enable_lora_with on every Dense and MultiHeadAttention layer
 * whose name starts with one of the prefixes (the targets on the
 * attention layers); 0, or the exit status (said) when a prefix matches no
 * such layer, the targets no attention layer, or kiln refuses. */
int cli_lora_apply(kiln_context *ctx, kiln_model *m, const cli_args *a);

#endif
