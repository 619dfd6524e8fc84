/* Private: NumPy .npy files (versions 1.0, 2.0 and 3.0), parsed strictly
 * from memory or from a file's header, and their elements converted to
 * float or int32. Only the C-order, little-endian dtypes kiln_dtype names
 * are read. Nothing here maps a file: a mapped file cut short by another
 * process faults (SIGBUS) the reader past its new end, where pread gives a
 * short count. */
#ifndef KILN_RUNTIME_FORMATS_NPY_H
#define KILN_RUNTIME_FORMATS_NPY_H

#include "kiln.h"

#include <stddef.h>

/* Samples first, then up to KILN_MAX_RANK dimensions of one sample. */
#define KILN_NPY_MAX_RANK (KILN_MAX_RANK + 1)

typedef struct kiln_npy {
    const char *name;             /* the file in messages: the caller's string */
    kiln_dtype dtype;
    int itemsize;                 /* bytes per element */
    int rank;                     /* 0..KILN_NPY_MAX_RANK */
    int64_t shape[KILN_NPY_MAX_RANK];
    int64_t rows;                 /* shape[0]; 1 for a scalar (rank 0) */
    int64_t row_size;             /* elements per row: the product of shape[1..] */
    int64_t offset;               /* where the data starts in the file */
    const unsigned char *data;    /* rows * row_size elements, little-endian; NULL: opened */
    kiln_context *owner;          /* kiln_npy_map's copy of the file, and whose it is */
    unsigned char *bytes;
} kiln_npy;

/* Validates a whole file image: magic, version, header, dtype, order,
 * shape, and at least prod(shape) * itemsize bytes of data after the
 * header (more are ignored, as np.load ignores them). `name` names the file in messages and must outlive `out`, as
 * must the bytes. KILN_ERROR_FORMAT for anything malformed,
 * KILN_ERROR_UNSUPPORTED for another version, Fortran order, big-endian
 * data or another dtype; `out` is zeroed on failure. */
kiln_status kiln_npy_parse(kiln_context *ctx, const char *name, const unsigned char *bytes,
                           size_t size, kiln_npy *out);

/* Reads the whole of `path` into memory and parses it. KILN_ERROR_IO when
 * it cannot be opened, examined or read, or is not a regular file; else as
 * kiln_npy_parse. Release with kiln_npy_unmap. */
kiln_status kiln_npy_map(kiln_context *ctx, const char *path, kiln_npy *out);

/* Frees a kiln_npy_map result and zeroes it; accepts a zeroed one. */
void kiln_npy_unmap(kiln_npy *a);

/* Opens `path` and parses its header alone, read with pread: `out` has
 * data NULL (the data is read from *fd at out->offset; the caller closes
 * *fd). As kiln_npy_map's statuses, and KILN_ERROR_FORMAT for a header
 * over 1 MiB; *fd is -1 on failure. */
kiln_status kiln_npy_open(kiln_context *ctx, const char *path, kiln_npy *out, int *fd);

/* IEEE binary16 to binary32, exactly: subnormals, signed zeros, infinities
 * and NaN payloads included. */
float kiln_npy_half_to_float(uint16_t h);

/* Rows [first_row, first_row + rows) as value * scale + offset, computed in
 * float, into `out` (rows * row_size floats). */
void kiln_npy_read_floats(const kiln_npy *a, int64_t first_row, int64_t rows, float scale,
                          float offset, float *out);

/* Element `row` of an integer array of one dimension. */
int64_t kiln_npy_read_int(const kiln_npy *a, int64_t row);

/* The same as an int32: 0, or -1 for an int64 outside int32's range,
 * which is clamped to INT32_MIN or INT32_MAX (never a valid class or id,
 * yet not the wrong one silently). */
int kiln_npy_read_label(const kiln_npy *a, int64_t row, int32_t *out);

#endif
