/* Private: the dataset body and batch assembly. */
#ifndef KILN_RUNTIME_DATASET_H
#define KILN_RUNTIME_DATASET_H

#include "kiln.h"
#include "layers/layer.h"

struct kiln_dataset {
    kiln_context *ctx;
    int64_t count;
    kiln_shape feature_shape;   /* one sample, batch not counted */
    int64_t feature_size;       /* floats per sample */
    float *features;            /* count * feature_size */
    kiln_label_kind label_kind;
    int32_t label_size;         /* 1 for sparse labels */
    int32_t *sparse_labels;     /* KILN_LABELS_SPARSE: count ids */
    float *dense_labels;        /* KILN_LABELS_DENSE: count * label_size */
    int32_t max_label;          /* largest sparse label (-1 if dense) */
};

/* An uninitialised dataset of `count` samples of `shape` (idx.c fills one). */
kiln_status kiln_dataset_alloc(kiln_context *ctx, int64_t count, const kiln_shape *shape,
                               kiln_label_kind kind, int32_t label_size, kiln_dataset **out);

/* kiln_dataset_from_idx on two files already in memory (plain or gzip),
 * read in place: the fuzzer's entry point. */
kiln_status kiln_dataset_from_idx_memory(kiln_context *ctx, const void *images,
                                         size_t images_size, const void *labels,
                                         size_t labels_size, const kiln_idx_options *o,
                                         kiln_dataset **out);

/* The order of an epoch's samples: 0..count-1, shuffled (Fisher-Yates)
 * from (seed, epoch) when `shuffle` is set. */
void kiln_epoch_order(int64_t count, uint64_t seed, int32_t epoch, int shuffle,
                      int64_t *order);

/* Copies samples order[0..n) into contiguous host arrays: features
 * (n * feature_size floats) and labels (n int32 or n * label_size floats). */
void kiln_dataset_gather(const kiln_dataset *ds, const int64_t *order, int32_t n,
                         float *features, void *labels);

#endif
