/* Fashion-MNIST samples of a few classes only, relabelled from 0: the
 * fine-tuning example trains and tests on classes 5-9 of the backbone that
 * tools/pretrain_fashion.py trained on classes 0-4. */
#ifndef KILN_EXAMPLES_FASHION_CLASSES_H
#define KILN_EXAMPLES_FASHION_CLASSES_H

#include "kiln.h"

/* The first `limit` samples (0: all) of the training (`train` nonzero) or
 * test split in Debian's IDX files under `dir` whose class is in [first,
 * first + n_classes), labelled class - first, pixels in [0, 1]. Samples
 * are (1, 28, 28) as an ONNX graph from PyTorch declares them when
 * `channels_first`, else (28, 28, 1): one channel, so the floats are the
 * same either way. */
kiln_status fashion_classes_load(kiln_context *ctx, const char *dir, int train, int32_t first,
                                 int32_t n_classes, int64_t limit, int channels_first,
                                 kiln_dataset **out);

#endif
