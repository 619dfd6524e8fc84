/* Private: the dataset body, its sources and batch assembly.
 *
 * A dataset is `count` samples of one shape, read by index. Resident data
 * (host arrays) lives in float arrays the dataset points into; a streamed
 * source (.npy and IDX files, image folders, an application's callback)
 * reads a sample when a batch needs it, through its ops, from loader
 * threads at once. A subset is a view: it holds its parent and shifts
 * indices. */
#ifndef KILN_RUNTIME_DATA_DATASET_H
#define KILN_RUNTIME_DATA_DATASET_H

#include "kiln.h"
#include "layers/layer.h"

struct kiln_read_plan;

/* Where a sparse label past an output's classes first lies, so that fit
 * names it before training as it names a label of host arrays. */
typedef struct kiln_label_hit {
    int searched;               /* 0: the source cannot say before reading */
    int64_t sample;             /* -1: none found */
    int32_t position;           /* among the sample's ids */
    int32_t label;
    char where[512];            /* the file (and label array) holding it; "" for arrays */
} kiln_label_hit;

typedef struct kiln_source_ops {
    const char *kind;   /* "npy", "image folder", "callback": for messages */
    /* Reads sample `index` of the source into `features` (feature_size
     * floats, final values: scaled, not yet mapped or augmented) and
     * `label` (label_size int32 ids or label_size floats). Called from several
     * threads at once. A failure records its message with kiln_error on
     * the calling thread, naming the sample (and file), and returns it.
     * `plan` is the read's (a zip passes its augmentation on to the
     * datasets it joins; a file or callback reads the same under any). */
    kiln_status (*read)(const kiln_dataset *ds, int64_t index,
                        const struct kiln_read_plan *plan, float *features, void *label);
    void (*destroy)(kiln_dataset *ds);   /* frees ds->source */
    /* Optional: the first of samples [first, first + count) whose sparse
     * label (of label array `part`, for a zip) is >= limit and not
     * `ignore`, into `hit` (searched set; sample -1: none). A file cut
     * short meanwhile is KILN_ERROR_IO, as in `read`. */
    kiln_status (*find_label)(const kiln_dataset *ds, int32_t part, int64_t first,
                              int64_t count, int32_t limit, int32_t ignore,
                              kiln_label_hit *hit);
} kiln_source_ops;

/* The transforms a dataset carries (kiln_dataset_transform). */
typedef struct kiln_transforms {
    kiln_map_fn map;
    void *map_user;
    int augmenting;
    kiln_augment_options augment;
} kiln_transforms;

struct kiln_dataset {
    kiln_context *ctx;
    int refs;                   /* the handle, and each subset cut from it (atomic) */
    int64_t count;
    kiln_shape feature_shape;   /* one sample, batch not counted */
    int64_t feature_size;       /* floats per sample */
    kiln_dtype dtype;           /* as the source stores features */
    /* The features are int32 ids (for an Input of kiln_input_ints): their
     * bits ride in the float slots; no NaN check, map or augmentation
     * touches them. */
    int ints;
    kiln_label_kind label_kind;
    int32_t label_size;         /* ids (sparse: one per output position) or floats */
    /* Largest sparse label, -1 if dense; for a source that cannot know its
     * labels before reading them (a callback), `labels_unchecked` is set
     * and each label is checked as it is read (sparse: the range; dense:
     * finite). */
    int32_t max_label;
    int labels_unchecked;
    /* No labels (kiln_dataset_from_npy without a labels file), for reading
     * and predicting: fit, evaluate and a zip's outputs refuse it, and a
     * source read fills its one sparse label slot with 0 (zip reads a part
     * with a label buffer even when it uses only the features). */
    int unlabeled;
    /* Streamed features may hold NaN or Inf (float files, callbacks, a
     * map): checked as they are read, naming the sample. */
    int features_unchecked;
    /* Resident data, or NULL: count * feature_size floats, and the labels. */
    float *features;
    int32_t *sparse_labels;     /* KILN_LABELS_SPARSE: count * label_size ids */
    float *dense_labels;        /* KILN_LABELS_DENSE: count * label_size */
    int owns_arrays;            /* else they belong to `parent` */
    /* A streamed source: its ops and state. */
    const kiln_source_ops *ops;
    void *source;
    /* A subset: samples [offset, offset + count) of parent. */
    kiln_dataset *parent;
    int64_t offset;
    char **class_names;         /* n_classes names, or NULL */
    int32_t n_classes;
    int64_t skipped;            /* samples a source replaced (atomic) */
    kiln_transforms transforms;
    /* Several inputs (kiln_arrays_desc.inputs): a sample is part 0's
     * values, then part 1's, ...; part k has part_shape[k] and holds ids
     * when part_ints[k]. feature_shape is then (feature_size) and `ints`
     * 0. n_parts 0: one input of feature_shape. */
    int32_t n_parts;
    kiln_shape part_shape[KILN_MAX_MODEL_INPUTS];
    int part_ints[KILN_MAX_MODEL_INPUTS];
    /* Several outputs (kiln_arrays_desc.outputs): a sample's label is label
     * part 0's words (int32 ids or floats, 4 bytes each), then part 1's,
     * ...; label_kind is then KILN_LABELS_DENSE with label_size the words
     * in all (ids keep their bits in the float slots). 0: one label. */
    int32_t n_label_parts;
    kiln_label_kind label_part_kind[KILN_MAX_MODEL_OUTPUTS];
    int32_t label_part_size[KILN_MAX_MODEL_OUTPUTS];
};

/* An uninitialised resident dataset of `count` samples of `shape` (idx.c
 * fills one). */
kiln_status kiln_dataset_alloc(kiln_context *ctx, int64_t count, const kiln_shape *shape,
                               kiln_label_kind kind, int32_t label_size, kiln_dataset **out);

/* A streamed dataset: the caller fills ops, source, dtype and the label
 * facts after; on failure the caller still owns `source`. */
kiln_status kiln_dataset_new_streamed(kiln_context *ctx, int64_t count, const kiln_shape *shape,
                                      kiln_label_kind kind, int32_t label_size,
                                      kiln_dataset **out);

/* The checks every description of samples gets: count > 0, a rank in
 * 1..KILN_MAX_RANK and positive dimensions, named after `fn`. */
kiln_status kiln_check_samples(kiln_context *ctx, const char *fn, int64_t count, int32_t rank,
                               const int32_t *dims);

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

/* Where one input's values lie in a sample and, for ids, their range. */
typedef struct kiln_id_range {
    int64_t offset, size;      /* floats into a sample, and how many */
    int32_t limit;             /* ids must be in [0, limit); 0: a float input */
    const char *layer;         /* the layer whose input_dim is that limit */
    const char *input;         /* the Input's name for messages, or NULL (one input) */
} kiln_id_range;

/* What reading a sample for a batch applies beyond the source. */
typedef struct kiln_read_plan {
    int augment;               /* training: the dataset's augmentations */
    uint64_t augment_seed;     /* when its options left seed 0 */
    int32_t epoch;             /* augmentation draws depend on it */
    int32_t max_classes;       /* sparse labels must be below (0: unchecked) */
    /* Ids of each input of ids must be in range (n_ids 0: unchecked). */
    int32_t n_ids;
    const kiln_id_range *ids;
    int32_t ignore;            /* sparse labels equal to this are padding (-1: none) */
    /* Several outputs (which take no ignore class): the sparse ids of
     * label array k must be below label_classes[k] (n_label_classes 0:
     * unchecked). Resident arrays are checked when fit starts; a source's
     * ids only as they are read. */
    int32_t n_label_classes;
    int32_t label_classes[KILN_MAX_MODEL_OUTPUTS];
} kiln_read_plan;

/* Reads sample `index` through the dataset's source, map and (when the
 * plan says) augmentations, checking what the source could not. Safe from
 * several threads at once; a failure names the sample. `scratch` holds one
 * sample (feature_size floats) for the augmentations. */
kiln_status kiln_dataset_read_sample(const kiln_dataset *ds, int64_t index,
                                     const kiln_read_plan *plan, float *features, void *label,
                                     float *scratch);

/* The first of samples [first, first + count) of `ds` whose sparse label
 * (of label array `part` of a zip; 0 otherwise) is >= limit and not
 * `ignore`: host arrays and every source that can say (hit->searched),
 * views naming their own index and their source's (in hit->where). Reads
 * a file's labels only when the dataset's largest label is >= limit. */
kiln_status kiln_dataset_find_label(const kiln_dataset *ds, int32_t part, int64_t first,
                                    int64_t count, int32_t limit, int32_t ignore,
                                    kiln_label_hit *hit);

/* KILN_ERROR_DATA, recorded on ctx, for the first of samples [0, count)
 * of `ids` (per_sample ids each) outside [0, limit): named as sample
 * first_sample + i and its position, and the layer; `call` starts the
 * message when not NULL. */
kiln_status kiln_check_ids(kiln_context *ctx, const char *call, const int32_t *ids,
                           int64_t count, int64_t per_sample, int64_t first_sample,
                           int32_t limit, const char *layer);

/* The same for samples of several inputs: `count` samples of `stride`
 * floats from x, each input of ids (the ranges with a limit) checked. */
kiln_status kiln_check_id_ranges(kiln_context *ctx, const char *call, const kiln_id_range *r,
                                 int32_t n, const float *x, int64_t count, int64_t stride,
                                 int64_t first_sample);

/* Bytes of one sample's label: label_size int32 ids or floats. */
size_t kiln_dataset_label_bytes(const kiln_dataset *ds);

/* Copies samples order[0..n) into contiguous host arrays: features
 * (n * feature_size floats) and labels (n * label_size int32 or floats).
 * Resident datasets without transforms only: the tests' shortcut. */
void kiln_dataset_gather(const kiln_dataset *ds, const int64_t *order, int32_t n,
                         float *features, void *labels);

#endif
