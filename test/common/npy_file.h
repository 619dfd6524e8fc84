/* Writing small .npy files (version 1.0, C order, little-endian) for the
 * tests that read them back through kiln_dataset_from_npy. */
#ifndef KILN_TEST_NPY_FILE_H
#define KILN_TEST_NPY_FILE_H

#include "harness.h"

/* `count` rows of `row` elements of `item` bytes as dtype `descr` (e.g.
 * "<i4", "<f4"); row 0 writes a 1-D array of count elements. */
static inline void write_npy(const char *path, const char *descr, int count, int row,
                             const void *data, size_t item)
{
    char header[128];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, "
                     "'shape': (%d, %d), }", descr, count, row);
    if (row == 0)
        n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, "
                     "'shape': (%d,), }", descr, count);
    const int total = (10 + n + 1 + 63) / 64 * 64;   /* the data starts 64-aligned */
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    const unsigned char len[2] = {(unsigned char)((total - 10) & 255),
                                  (unsigned char)((total - 10) >> 8)};
    CHECK(fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(len, 1, 2, f) == 2 &&
          fwrite(header, 1, (size_t)n, f) == (size_t)n);
    for (int k = 10 + n; k < total - 1; k++)
        fputc(' ', f);
    fputc('\n', f);
    const size_t elems = (size_t)count * (size_t)(row ? row : 1);
    CHECK(fwrite(data, item, elems, f) == elems);
    CHECK(fclose(f) == 0);
}

#endif
