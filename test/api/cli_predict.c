/* For test/api/cli.sh.
 *
 * cli_predict MODEL X.npy Y.npy SCALE BATCH
 *   loads MODEL as the kiln tool does (in this process, not the tool's),
 *   predicts X.npy (scaled by SCALE) in batches of BATCH with
 *   kiln_model_predict, and compares the result bit for bit with what
 *   `kiln predict MODEL X.npy Y.npy` wrote: Y.npy, float32 of shape
 *   (samples, output dims...), for a model of one output; for several, one
 *   file per output named Y.<layer>.npy, each holding that output's slice of
 *   the packed predict (a sample's outputs one after another, kiln.h says).
 *
 * cli_predict --two-outputs DIR
 *   writes DIR/two.kiln, a model of two Dense heads on Input(4): "cls" (3
 *   units, softmax, sparse cross-entropy) and "reg" (2 units, mean squared
 *   error, weight 0.5), SGD with Nesterov momentum and accumulation; and
 *   DIR/x.npy, 40 samples of 4 floats; and each head's weights as
 *   DIR/<layer>.kernel.npy and DIR/<layer>.bias.npy for a check in NumPy. */
#include "harness.h"
#include "npy_file.h"
#include "runtime/formats/npy.h"

enum { SAMPLES = 40, IN = 4 };

static int make_two_outputs(kiln_context *ctx, const char *dir)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    const kiln_node x = kiln_input(m, 1, dims, &(kiln_input_options){.name = "x"});
    const kiln_dense_options cls = {.struct_size = sizeof cls, .name = "cls", .units = 3,
                                    .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options reg = {.struct_size = sizeof reg, .name = "reg", .units = 2};
    const kiln_node heads[2] = {kiln_dense(m, x, &cls), kiln_dense(m, x, &reg)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    const kiln_output_loss losses[2] = {{.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
                                        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .weight = 0.5f}};
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                       .learning_rate = 0.05f, .momentum = 0.9f,
                                       .nesterov = 1};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE, .n_outputs = 2,
                                     .outputs = losses, .gradient_accumulation_steps = 2,
                                     .optimizer = &sgd};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    char path[512];
    snprintf(path, sizeof path, "%s/two.kiln", dir);
    CHECK_OK(ctx, kiln_model_save(m, path));
    float xs[SAMPLES * IN];
    uint32_t s = 7;
    for (int i = 0; i < SAMPLES * IN; i++) {
        s = s * 1664525u + 1013904223u;
        xs[i] = (float)((s >> 8) % 4000) / 1000.0f - 2.0f;
    }
    snprintf(path, sizeof path, "%s/x.npy", dir);
    write_npy(path, "<f4", SAMPLES, IN, xs, sizeof(float));
    const struct {
        const char *layer;
        int units;
    } head[2] = {{"cls", 3}, {"reg", 2}};
    for (int k = 0; k < 2; k++) {
        float kernel[IN * 3], bias[3];
        char name[32];
        snprintf(name, sizeof name, "%s/kernel", head[k].layer);
        CHECK_OK(ctx, kiln_model_get_tensor(m, name, kernel, IN * head[k].units));
        snprintf(path, sizeof path, "%s/%s.kernel.npy", dir, head[k].layer);
        write_npy(path, "<f4", IN, head[k].units, kernel, sizeof(float));
        snprintf(name, sizeof name, "%s/bias", head[k].layer);
        CHECK_OK(ctx, kiln_model_get_tensor(m, name, bias, head[k].units));
        snprintf(path, sizeof path, "%s/%s.bias.npy", dir, head[k].layer);
        write_npy(path, "<f4", head[k].units, 0, bias, sizeof(float));
    }
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return test_finish("cli_predict --two-outputs");
}

/* `y`, the tool's file for output `info`, against that output's floats of
 * the packed predict `want` (`stride` floats per sample, this output's at
 * `offset`). */
static void compare(kiln_context *ctx, const char *path, const kiln_tensor_info *info,
                    int64_t rows, const float *want, int64_t stride, int64_t offset)
{
    kiln_npy y;
    memset(&y, 0, sizeof y);
    CHECK_OK(ctx, kiln_npy_map(ctx, path, &y));
    if (!y.data)
        return;
    int64_t size = 1;
    int same = y.dtype == KILN_DTYPE_FLOAT32 && y.rank == info->rank + 1 && y.rows == rows;
    for (int d = 0; same && d < info->rank; d++) {
        same = y.shape[d + 1] == info->dims[d];
        size *= info->dims[d];
    }
    CHECK(same);
    int64_t differ = 0;
    float *got = malloc((size_t)(rows * size + 1) * sizeof(float));
    if (same && got) {
        kiln_npy_read_floats(&y, 0, rows, 1.0f, 0.0f, got);
        for (int64_t i = 0; i < rows; i++)
            differ += memcmp(got + i * size, want + i * stride + offset,
                             (size_t)size * sizeof(float)) != 0;
        CHECK(differ == 0);
        printf("cli_predict: %s: %lld x %lld outputs of '%s', %lld samples differ from "
               "kiln_model_predict's\n", path, (long long)rows, (long long)size, info->name,
               (long long)differ);
    }
    free(got);
    kiln_npy_unmap(&y);
}

int main(int argc, char **argv)
{
    const int make = argc == 3 && strcmp(argv[1], "--two-outputs") == 0;
    if (argc != 6 && !make) {
        fprintf(stderr, "usage: cli_predict MODEL X.npy Y.npy SCALE BATCH\n"
                        "       cli_predict --two-outputs DIR\n");
        return 2;
    }
    kiln_context *ctx = test_context(0);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    if (make)
        return make_two_outputs(ctx, argv[2]);
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_model *m = NULL;
    kiln_npy x;
    memset(&x, 0, sizeof x);
    int32_t n_outputs = 0;
    int64_t stride = 0;
    CHECK_OK(ctx, kiln_model_load(ctx, argv[1], &one, &m));
    CHECK_OK(ctx, kiln_npy_map(ctx, argv[2], &x));
    if (m) {
        CHECK_OK(ctx, kiln_model_output_count(m, &n_outputs));
        CHECK_OK(ctx, kiln_model_output_size(m, &stride));
    }
    if (m && x.data && n_outputs > 0) {
        float *in = malloc((size_t)(x.rows * x.row_size) * sizeof(float));
        float *want = malloc((size_t)(x.rows * stride) * sizeof(float));
        kiln_npy_read_floats(&x, 0, x.rows, (float)atof(argv[4]), 0.0f, in);
        CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = x.rows, .features = in},
                                         want, atoi(argv[5])));
        int64_t offset = 0;
        for (int32_t k = 0; k < n_outputs; k++) {
            kiln_tensor_info info = {.struct_size = sizeof info};
            CHECK_OK(ctx, kiln_model_output_info(m, k, &info));
            /* Y.npy itself, or Y.<layer>.npy: the name the tool's usage gives. */
            char path[1024];
            const char *y = argv[3];
            const size_t n = strlen(y);
            if (n_outputs == 1)
                snprintf(path, sizeof path, "%s", y);
            else if (n > 4 && strcmp(y + n - 4, ".npy") == 0)
                snprintf(path, sizeof path, "%.*s.%s.npy", (int)(n - 4), y, info.name);
            else
                snprintf(path, sizeof path, "%s.%s", y, info.name);
            compare(ctx, path, &info, x.rows, want, stride, offset);
            int64_t size = 1;
            for (int d = 0; d < info.rank; d++)
                size *= info.dims[d];
            offset += size;
        }
        CHECK(offset == stride);
        free(in), free(want);
    }
    kiln_npy_unmap(&x);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return test_finish("cli_predict");
}
