/* The fine-tuning path of examples/finetune.c, shared with its test
 * (test/importer/test_finetune.c): an ONNX classifier imported, cut at its
 * pooled features, a new head, the backbone frozen. */
#ifndef KILN_EXAMPLES_FINETUNE_MODEL_H
#define KILN_EXAMPLES_FINETUNE_MODEL_H

#include "kiln.h"

/* What tools/pretrain_fashion.py exports: its Flatten of the pooled
 * features; the last 3x3 block's output, (32, 7, 7) before the 1x1 block
 * and the pool, whose spatial layout tells shoes from bags better; and the
 * prefix of every layer of its backbone. */
#define FINETUNE_FEATURES "/Flatten"
#define FINETUNE_SPATIAL "/features/features.9/Relu"
#define FINETUNE_BACKBONE "/features"
#define FINETUNE_HEAD "head"

/* Freezes every layer whose name starts with `prefix` (before compile);
 * *frozen is how many. KILN_ERROR_INVALID_ARGUMENT, with the context's
 * message naming the prefix, when none does. */
kiln_status finetune_freeze(kiln_model *m, const char *prefix, int32_t *frozen);

/* Imports `onnx_path`, puts a Dense of `classes` units with softmax (named
 * FINETUNE_HEAD) on the layer named `features` (after a Flatten when its
 * output is not 1-D), makes it the output and
 * freezes the layers named `backbone...`. The model is not compiled; the
 * old head stays in the graph, off the output's path. The caller owns
 * *out (NULL on failure). */
kiln_status finetune_build(kiln_context *ctx, const char *onnx_path, const char *features,
                           const char *backbone, int32_t classes, kiln_model **out);

#endif
