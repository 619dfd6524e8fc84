/* Private: safetensors files (8-byte little-endian header length, a JSON
 * header, raw little-endian tensors), read strictly and written atomically.
 * This module knows tensors and files, not models (see checkpoint.c). */
#ifndef KILN_RUNTIME_FORMATS_SAFETENSORS_H
#define KILN_RUNTIME_FORMATS_SAFETENSORS_H

#include "runtime/formats/json.h"

#define KILN_ST_MAX_RANK 8
#define KILN_ST_MAX_HEADER 100000000u   /* the format's own limit */

typedef struct kiln_st_tensor {
    const char *name;
    const char *dtype;            /* "F32", ... */
    size_t dtype_size;
    int rank;
    uint64_t shape[KILN_ST_MAX_RANK];
    uint64_t begin, end;          /* byte offsets into the data section */
} kiln_st_tensor;

typedef struct kiln_st_file {
    kiln_context *ctx;
    unsigned char *bytes;         /* the whole file (owned when read from disk) */
    size_t size;
    int owns_bytes;
    size_t data_start;
    kiln_st_tensor *tensors;
    size_t n_tensors;
    kiln_json_doc doc;
    const kiln_json *metadata;    /* object of strings, or NULL */
} kiln_st_file;

/* Validates a whole file image; `what` names it in errors. The bytes must
 * outlive the result. KILN_ERROR_FORMAT for anything malformed. */
kiln_status kiln_st_parse(kiln_context *ctx, const char *what, const unsigned char *bytes,
                          size_t size, kiln_st_file *out);
/* Reads and validates a file. KILN_ERROR_IO if it cannot be read. */
kiln_status kiln_st_read(kiln_context *ctx, const char *path, kiln_st_file *out);
void kiln_st_free(kiln_st_file *f);

const kiln_st_tensor *kiln_st_find(const kiln_st_file *f, const char *name);
/* A __metadata__ string, or NULL. */
const char *kiln_st_meta(const kiln_st_file *f, const char *key);
/* The tensor's data (little-endian as stored). */
const unsigned char *kiln_st_data(const kiln_st_file *f, const kiln_st_tensor *t);

typedef struct kiln_st_entry {
    const char *name;
    int rank;
    int64_t shape[KILN_ST_MAX_RANK];
    const float *data;            /* prod(shape) floats, written as F32 */
} kiln_st_entry;

/* Writes a file atomically: a temporary file in the same folder, flushed,
 * fsync'd and renamed over `path`, then the folder fsync'd. On failure the
 * previous file at `path` is untouched and the temporary one removed. */
kiln_status kiln_st_write(kiln_context *ctx, const char *path, const kiln_st_entry *entries,
                          size_t n, const char *const *meta_keys,
                          const char *const *meta_values, size_t n_meta);

#endif
