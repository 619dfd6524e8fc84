/* MODEL for the kiln tool: a model file loaded, or an ONNX file imported
 * and compiled as the command's options say. */
#ifndef KILN_CLI_MODEL_OPEN_H
#define KILN_CLI_MODEL_OPEN_H

#include "args.h"
#include "kiln.h"

/* Whether `path` names an ONNX file: its name ends in ".onnx". */
int cli_is_onnx(const char *path);

/* A model file loaded (compiled, under `strategy`, its activations kept
 * as `activations` says: the machine's choices, which the file leaves to
 * the caller), or an ONNX file imported and not compiled. */
kiln_status cli_open(kiln_context *ctx, const char *path, kiln_strategy strategy,
                     kiln_storage activations, kiln_model **m);

/* For --from-logits: a softmax (sigmoid for binary cross-entropy) after the
 * imported model's last layer, its output in a graph of one output, made
 * the output. */
kiln_status cli_from_logits(kiln_model *m, kiln_loss loss);

/* Compiles an imported model for `a`'s loss, optimizer, strategy and
 * activation storage. */
kiln_status cli_compile(kiln_model *m, const cli_args *a);

#endif
