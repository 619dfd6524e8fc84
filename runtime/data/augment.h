/* Private: the random augmentations of kiln_augment_options, one sample at
 * a time, on the loader threads. */
#ifndef KILN_RUNTIME_DATA_AUGMENT_H
#define KILN_RUNTIME_DATA_AUGMENT_H

#include "kiln.h"
#include "layers/layer.h"

/* The first invalid field of `o` (already copied with its defaults) for a
 * dataset of samples `shape`, recorded on ctx; KILN_OK if none. Samples
 * must be (height, width, channels). */
kiln_status kiln_augment_check(kiln_context *ctx, const kiln_augment_options *o,
                               const kiln_shape *shape);

/* Applies `o` to one sample of `shape` (height, width, channels), in place.
 * The draws come from (seed, epoch, index) alone. `scratch` has room for
 * one sample (feature count floats). */
void kiln_augment_sample(const kiln_augment_options *o, uint64_t seed, int32_t epoch,
                         int64_t index, const kiln_shape *shape, float *features,
                         float *scratch);

#endif
