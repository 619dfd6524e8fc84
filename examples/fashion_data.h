/* Fashion-MNIST as Debian's dataset-fashion-mnist package ships it
 * (gzip-compressed IDX), for the examples. */
#ifndef KILN_EXAMPLES_FASHION_DATA_H
#define KILN_EXAMPLES_FASHION_DATA_H

#include "kiln.h"

#define FASHION_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Loads `prefix` ("train" or "t10k") from `dir`, at most `limit` samples
 * (0: all), pixels scaled to [0, 1]. */
kiln_status fashion_load(kiln_context *ctx, const char *dir, const char *prefix, long limit,
                         kiln_dataset **out);

/* Monotonic seconds. */
double fashion_seconds(void);

#endif
