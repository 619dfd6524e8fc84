/* For test/cli.sh: loads MODEL as the kiln tool does (in this process, not
 * the tool's), predicts X.npy (scaled by SCALE) in batches of BATCH with
 * kiln_model_predict, and compares the result bit for bit with Y.npy,
 * which `kiln predict` wrote: float32 of shape (samples, output dims...).
 * Usage: cli_predict MODEL X.npy Y.npy SCALE BATCH */
#include "harness.h"
#include "runtime/context/context.h"
#include "runtime/model/model.h"
#include "runtime/formats/npy.h"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: cli_predict MODEL X.npy Y.npy SCALE BATCH\n");
        return 2;
    }
    kiln_context *ctx = test_context(0);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *m = NULL;
    kiln_npy x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    CHECK_OK(ctx, kiln_model_load(ctx, argv[1], &one, &m));
    CHECK_OK(ctx, kiln_npy_map(ctx, argv[2], &x));
    CHECK_OK(ctx, kiln_npy_map(ctx, argv[3], &y));
    if (m && x.data && y.data) {
        const kiln_shape *out = &m->nodes[m->output].shape;
        int same = y.dtype == KILN_DTYPE_FLOAT32 && y.rank == out->rank + 1 &&
                   y.rows == x.rows;
        for (int d = 0; same && d < out->rank; d++)
            same = y.shape[d + 1] == out->dims[d];
        CHECK(same);
        float *in = malloc((size_t)(x.rows * x.row_size) * sizeof(float));
        float *want = malloc((size_t)(x.rows * kiln_shape_size(out)) * sizeof(float));
        float *got = malloc((size_t)(y.rows * y.row_size) * sizeof(float));
        kiln_npy_read_floats(&x, 0, x.rows, (float)atof(argv[4]), 0.0f, in);
        CHECK_OK(ctx, kiln_model_predict(m, in, x.rows, want, atoi(argv[5])));
        if (same) {
            kiln_npy_read_floats(&y, 0, y.rows, 1.0f, 0.0f, got);
            CHECK(memcmp(want, got, (size_t)(y.rows * y.row_size) * sizeof(float)) == 0);
            printf("cli_predict: %lld x %lld outputs of kiln predict identical to "
                   "kiln_model_predict's\n", (long long)y.rows, (long long)y.row_size);
        }
        free(in), free(want), free(got);
    }
    kiln_npy_unmap(&x);
    kiln_npy_unmap(&y);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return test_finish("cli_predict");
}
