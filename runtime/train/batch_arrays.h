/* Private: a caller's kiln_batch_arrays packed as the strategies take a
 * batch (train_on_batch, test_on_batch, predict_on_batch). */
#ifndef KILN_RUNTIME_TRAIN_BATCH_ARRAYS_H
#define KILN_RUNTIME_TRAIN_BATCH_ARRAYS_H

#include "runtime/model/model.h"

/* A batch in the model's packed layout: each sample's inputs one after
 * another (ids as int32 bits), its labels every output's one after another
 * (4-byte words); both owned, released by kiln_packed_batch_free. */
typedef struct kiln_packed_batch {
    int32_t count;
    float *features;
    void *labels;                /* NULL without labels */
} kiln_packed_batch;

/* Checks `batch` against the compiled model (the right typed array for
 * each Input and output, counts, shapes; `labels`: whether the call takes
 * labels) and packs its samples [first, first + n) into `out` (n < 0: all
 * of them, at most INT32_MAX), messages prefixed with `call`. Values
 * (ranges, finiteness) are checked by the caller on the packed arrays. */
kiln_status kiln_batch_arrays_pack(kiln_model *m, const char *call,
                                   const kiln_batch_arrays *batch, int labels, int64_t first,
                                   int32_t n, kiln_packed_batch *out);

/* The batch's sample count after the checks kiln_batch_arrays_pack makes
 * of the struct itself (NULL, struct_size, count >= 1). */
kiln_status kiln_batch_arrays_count(kiln_model *m, const char *call,
                                    const kiln_batch_arrays *batch, int64_t *count);

/* Releases what kiln_batch_arrays_pack allocated; accepts a zeroed one. */
void kiln_packed_batch_free(kiln_model *m, kiln_packed_batch *b);

#endif
