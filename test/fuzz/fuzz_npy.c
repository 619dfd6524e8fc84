/* Fuzz target: the .npy parser on the input as one file; when it accepts
 * one, every row converted to floats (scaled and as stored) and, for 1-D
 * integer arrays, every label read. */
#include "runtime/context/context.h"
#include "runtime/formats/npy.h"

#include <stdlib.h>

#define FUZZ_MAX_FLOATS ((1 << 20) / sizeof(float))   /* 1 MiB of output */

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    kiln_npy a;
    if (kiln_npy_parse(&ctx, "input.npy", data, size, &a) == KILN_OK &&
        (uint64_t)(a.rows * a.row_size) <= FUZZ_MAX_FLOATS) {
        const size_t n = (size_t)(a.rows * a.row_size);
        float *out = malloc(n ? n * sizeof *out : 1);
        if (out) {
            kiln_npy_read_floats(&a, 0, a.rows, 0.5f, -1.0f, out);
            kiln_npy_read_floats(&a, 0, a.rows, 1.0f, 0.0f, out);
        }
        free(out);
        const int integers = a.dtype != KILN_DTYPE_FLOAT16 && a.dtype != KILN_DTYPE_FLOAT32;
        for (int64_t i = 0; a.rank == 1 && integers && i < a.rows; i++) {
            int32_t y;
            kiln_npy_read_label(&a, i, &y);
        }
    }
    kiln_context_release_host_only(&ctx);
    return 0;
}
