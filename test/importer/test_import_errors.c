/* kiln_model_import_onnx's refusals, each with its status and a message
 * naming what was wrong, and the names an imported model keeps: files
 * that test/importer/make_bad_models.py writes with ONNX's helpers (python3-
 * onnx; SKIP_MISSING without it), plus bytes that are not ONNX and a
 * truncated file made here. */
#include "harness.h"

#include <sys/wait.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"

static char dir[64];

static const char *file(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    return path;
}

/* The import fails with `status`, *out NULL, the message holding each of
 * the (up to three) needles. */
static void refused(kiln_context *ctx, const char *name, kiln_status status, const char *a,
                    const char *b, const char *c)
{
    kiln_model *m = (kiln_model *)1;
    const kiln_status st = kiln_model_import_onnx(ctx, file(name), NULL, &m);
    const char *msg = kiln_context_last_error(ctx);
    printf("%-20s %s: %s\n", name, kiln_status_name(st), msg);
    CHECK(st == status);
    CHECK(m == NULL);
    const char *needles[] = {a, b, c};
    for (int k = 0; k < 3; k++)
        if (needles[k] && !strstr(msg, needles[k])) {
            fprintf(stderr, "%s: the message lacks \"%s\"\n", name, needles[k]);
            test_failures++;
        }
}

static void bytes_refused(kiln_context *ctx, const char *what, const void *data, size_t size)
{
    kiln_model *m = (kiln_model *)1;
    CHECK_FAILS(ctx, KILN_ERROR_FORMAT, "not an ONNX model",
                kiln_model_import_onnx_buffer(ctx, data, size, NULL, &m));
    printf("%-20s %s\n", what, kiln_context_last_error(ctx));
    CHECK(m == NULL);
}

static void compile(kiln_context *ctx, kiln_model *m)
{
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.01f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
}

/* Names: the good graph's parameters and layers by their ONNX names, and
 * names that do not exist refused. */
static void names(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("good"), NULL, &m));
    if (!m)
        return;
    kiln_node node = 0;
    CHECK_OK(ctx, kiln_model_find_layer(m, "fc", &node));
    CHECK(node >= 0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "'no_such_layer'",
                kiln_model_find_layer(m, "no_such_layer", &node));
    CHECK(node == KILN_NODE_INVALID);
    compile(ctx, m);
    float b[3], w[3 * 12];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "b", b, 3));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "fc_w", w, 36));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "conv/bias",
                kiln_model_get_tensor(m, "conv/bias", b, 3));
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    CHECK(count == 4);
    kiln_model_destroy(m);
}

/* Each Identity copy of one initializer is a parameter named after the
 * copy; the initializer itself is no parameter. */
static void copies(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("copies"), NULL, &m));
    if (!m)
        return;
    compile(ctx, m);
    float first[16], second[16];
    CHECK_OK(ctx, kiln_model_get_tensor(m, "first.weight", first, 16));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "second.weight", second, 16));
    CHECK(memcmp(first, second, sizeof first) == 0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "shared",
                kiln_model_get_tensor(m, "shared", first, 16));
    /* Untied: setting one leaves the other. */
    float zeros[16] = {0};
    CHECK_OK(ctx, kiln_model_set_tensor(m, "first.weight", zeros, 16));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "second.weight", first, 16));
    CHECK(memcmp(first, second, sizeof first) == 0);
    kiln_model_destroy(m);
}

/* A node name of 77 bytes: its layer is "<hash>~<its last 54 bytes>", the
 * hash 64-bit FNV-1a's low 32 bits (as docs/importing.md says). */
static void long_node(kiln_context *ctx)
{
    uint64_t hash = 0xcbf29ce484222325ULL;
    char full[96] = "", want[64];
    for (int k = 0; k < 12; k++)
        strcat(full, "/block");
    strcat(full, "/Conv");
    const size_t len = strlen(full);
    for (size_t k = 0; k < len; k++)
        hash = (hash ^ (unsigned char)full[k]) * 0x100000001b3ULL;
    snprintf(want, sizeof want, "%08x~%s", (unsigned)(hash & 0xffffffffu), full + len - 54);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("long_node"), NULL, &m));
    kiln_node node = KILN_NODE_INVALID;
    if (m)
        CHECK_OK(ctx, kiln_model_find_layer(m, want, &node));
    CHECK(strlen(want) == 63);
    kiln_model_destroy(m);
}

/* External data: beside the file, from a buffer with and without a base
 * folder, missing, short. */
static void external(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("external"), NULL, &m));
    kiln_model_destroy(m);
    size_t size = 0;
    unsigned char *data = test_read_file(file("external"), &size);
    m = (kiln_model *)1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "base_folder",
                kiln_model_import_onnx_buffer(ctx, data, size, NULL, &m));
    CHECK(m == NULL);
    const kiln_import_options o = {.struct_size = sizeof o, .base_folder = dir};
    CHECK_OK(ctx, kiln_model_import_onnx_buffer(ctx, data, size, &o, &m));
    kiln_model_destroy(m);
    free(data);
    refused(ctx, "external_missing", KILN_ERROR_IO, "fc_w", "external_missing.bin", NULL);
    refused(ctx, "external_short", KILN_ERROR_FORMAT, "fc_w", "external_short.bin", "holds");
}

/* A named dimension without its size is refused naming the input and the
 * dimension; with it the graph imports. */
static void dynamic(kiln_context *ctx)
{
    refused(ctx, "dynamic", KILN_ERROR_INVALID_ARGUMENT, "'x'", "'height'", "dimension 2");
    const kiln_import_dim sizes[] = {{.name = "height", .size = 4}};
    const kiln_import_options o = {.struct_size = sizeof o, .dims = sizes, .n_dims = 1};
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("dynamic"), &o, &m));
    kiln_model_destroy(m);
}

/* The first two rows (2 x size values) of a ConvTranspose's output: X (1,
 * 1, 3, 3) holding 0 to 8, a kernel of ones, stride 2, against ONNX
 * Runtime 1.30's (ONNX's node test test_convtranspose_autopad_same holds
 * SAME_UPPER's). */
static void convt_rows(kiln_context *ctx, const char *name, int size, const float *want)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file(name), NULL, &m));
    if (!m)
        return;
    compile(ctx, m);
    const float x[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    float y[64] = {0};
    CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.count = 1, .features = x}, y, 0));
    char what[64];
    snprintf(what, sizeof what, "%s: the first two rows", name);
    test_close(what, 30, y, want, sizeof(float), 2 * size, TEST_PER_VALUE, 0);
    printf("%-20s %g %g %g %g %g %g ...\n", name, y[0], y[1], y[2], y[3], y[4], y[5]);
    kiln_model_destroy(m);
}

/* ConvTranspose's refusals; output_shape and auto_pad SAME imported as the
 * pads they come to, odd crops included. */
static void conv_transpose(kiln_context *ctx)
{
    refused(ctx, "convt_auto_pad", KILN_ERROR_UNSUPPORTED, "'up'", "'auto_pad' is 'SAME'",
            "SAME_UPPER");
    refused(ctx, "convt_output_padding", KILN_ERROR_UNSUPPORTED, "'up'", "'output_padding' "
            "(2, 0)", "below the strides (2, 2)");
    refused(ctx, "convt_group", KILN_ERROR_UNSUPPORTED, "'up'", "'group' is 3", "'wt'");
    refused(ctx, "convt_kernel_shape", KILN_ERROR_SHAPE, "'up'", "'kernel_shape' (2, 2)",
            "'wt' (2, 3, 3, 3)");
    refused(ctx, "convt_big_shape", KILN_ERROR_UNSUPPORTED, "'up'", "'output_shape' asks for 12 "
            "pixels on axis 2, 3 past the full output", "fewer than the stride (2)");
    refused(ctx, "convt_three_values", KILN_ERROR_UNSUPPORTED, "'up'", "'output_padding' has "
            "3 values", NULL);
    refused(ctx, "convt_1d", KILN_ERROR_UNSUPPORTED, "'up'", "X is 3-D and W 3-D",
            "2-D transposed convolutions");
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("convt_output_shape"), NULL, &m));
    if (m) {
        kiln_node up = KILN_NODE_INVALID;
        CHECK_OK(ctx, kiln_model_find_layer(m, "up", &up));
        compile(ctx, m);
        kiln_layer_info li = {.struct_size = sizeof li};
        CHECK_OK(ctx, kiln_model_layer_info(m, up, &li));
        printf("%-20s (%d, %d, %d) %s\n", "convt_output_shape", (int)li.dims[0],
               (int)li.dims[1], (int)li.dims[2], li.kind);
        CHECK(li.rank == 3 && li.dims[0] == 8 && li.dims[1] == 8 && li.dims[2] == 3 &&
              !strcmp(li.kind, "conv2d_transpose"));
        kiln_model_destroy(m);
    }
    /* The full output's rows are 0 0 1 1 3 2 2 twice, then 3 3 8 5 12 7 7:
     * SAME_UPPER crops its odd pixel after, SAME_LOWER and output_shape
     * before; output_shape past it adds zeros after. */
    const float after[12] = {0, 0, 1, 1, 3, 2, 0, 0, 1, 1, 3, 2};
    const float before[12] = {0, 1, 1, 3, 2, 2, 3, 8, 5, 12, 7, 7};
    const float past[16] = {0, 0, 1, 1, 3, 2, 2, 0, 0, 0, 1, 1, 3, 2, 2, 0};
    convt_rows(ctx, "convt_upper", 6, after);
    convt_rows(ctx, "convt_lower", 6, before);
    convt_rows(ctx, "convt_odd_shape", 6, before);
    convt_rows(ctx, "convt_past_shape", 8, past);
}

int main(void)
{
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    snprintf(dir, sizeof dir, "/tmp/kiln_import_bad_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/make_bad_models.py' '%s'", root, dir);
    const int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77)
        SKIP_MISSING("ONNX's Python package for " PYTHON " (Debian: python3-onnx)");
    CHECK(WEXITSTATUS(rc) == 0);
    kiln_context *ctx = test_context(1);
    if (!ctx)
        return 1;

    const char text[] = "this is not an ONNX model, only some text\n";
    kiln_model *m = (kiln_model *)1;
    const kiln_status st = kiln_model_import_onnx_buffer(ctx, text, sizeof text - 1, NULL, &m);
    printf("%-20s %s\n", "text", kiln_context_last_error(ctx));
    CHECK(st == KILN_ERROR_FORMAT && m == NULL);
    bytes_refused(ctx, "empty", "", 0);   /* parses as a protobuf of nothing */
    size_t size = 0;
    unsigned char *good = test_read_file(file("good"), &size);
    CHECK(good && size > 100);
    if (good)
        bytes_refused(ctx, "truncated", good, size / 2);
    free(good);
    refused(ctx, "missing_file", KILN_ERROR_IO, "missing_file.onnx", NULL, NULL);
    refused(ctx, "old_ir", KILN_ERROR_UNSUPPORTED, "IR version is 3", "6 to 9", NULL);
    refused(ctx, "old_opset", KILN_ERROR_UNSUPPORTED, "opset 10", "11 to 18", NULL);
    refused(ctx, "short_initializer", KILN_ERROR_FORMAT, "initializer 'b'", "8 bytes", NULL);
    refused(ctx, "cycle", KILN_ERROR_FORMAT, "cycle", NULL, NULL);
    refused(ctx, "unknown_op", KILN_ERROR_UNSUPPORTED, "'odd_one'", "'Mystery'", NULL);
    refused(ctx, "dilated", KILN_ERROR_UNSUPPORTED, "'pool'", "'dilations'", "(1, 1)");
    m = NULL;   /* Clip of (0, 1): kiln_math's clip */
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("clip_bounds"), NULL, &m));
    kiln_model_destroy(m);
    refused(ctx, "pow_computed", KILN_ERROR_UNSUPPORTED, "'pow' (Pow)",
            "input 1 (exponent) 'c' is computed by the graph", "initializer");
    refused(ctx, "pow_tensor", KILN_ERROR_UNSUPPORTED, "'pow' (Pow)", "'e' holds 3 values",
            "one constant exponent");
    refused(ctx, "clip_computed", KILN_ERROR_UNSUPPORTED, "'clip' (Clip)",
            "input 1 (min) 'c' is computed by the graph", "initializer");
    refused(ctx, "clip_two", KILN_ERROR_UNSUPPORTED, "'clip' (Clip)", "'lo' holds 2 values",
            "Clip takes one");
    refused(ctx, "clip_nan", KILN_ERROR_INVALID_ARGUMENT, "'clip' (Clip)", "clip's max is NaN",
            NULL);
    refused(ctx, "hard_sigmoid_zero", KILN_ERROR_UNSUPPORTED, "'hard' (HardSigmoid)",
            "alpha and beta are 0", NULL);
    refused(ctx, "ids_double", KILN_ERROR_UNSUPPORTED, "'ids'", "element type 11",
            "int64 (7) or int32 (6) ids");
    refused(ctx, "bool_input", KILN_ERROR_UNSUPPORTED, "'as_float' (Cast)",
            "graph input 'flags' of element type 9 (bool)",
            "bool ones only as nn.MultiheadAttention's key_padding_mask");
    refused(ctx, "ids_axis", KILN_ERROR_UNSUPPORTED, "'lookup'", "'axis' is 1", "rows");
    refused(ctx, "ids_table_3d", KILN_ERROR_UNSUPPORTED, "'lookup'", "'table'",
            "2-D float initializer");
    refused(ctx, "ids_computed", KILN_ERROR_SHAPE, "'copy'", "int32 ids",
            "only an Embedding reads ids");
    refused(ctx, "transpose_batch", KILN_ERROR_UNSUPPORTED, "'swap_batch'", "perm",
            "keeps the batch");
    refused(ctx, "tied", KILN_ERROR_UNSUPPORTED, "'shared'", "'first'", "'second'");
    /* nn.MultiheadAttention's block, near misses: refused at its first
     * Transpose, saying why the block is not kiln's MultiHeadAttention. */
    if (access(file("attention_scale"), R_OK) == 0) {
        refused(ctx, "attention_scale", KILN_ERROR_UNSUPPORTED, "'/attn/Transpose' (Transpose)",
                "nn.MultiheadAttention", "scaled by 1 / 3; kiln's MultiHeadAttention scales by "
                "1/sqrt(d) = 1/sqrt(4) only");
        refused(ctx, "attention_mask", KILN_ERROR_UNSUPPORTED, "'/attn/Transpose' (Transpose)",
                "nn.MultiheadAttention", "is neither a causal mask");
        refused(ctx, "attention_padded_mask", KILN_ERROR_UNSUPPORTED,
                "'/attn/Transpose' (Transpose)", "is neither a causal mask",
                "nor a key_padding_mask of a bool graph input");
        refused(ctx, "attention_kdim_vdim", KILN_ERROR_UNSUPPORTED,
                "'/attn/Transpose' (Transpose)", "kdim 6 is not vdim 4 ('attn.k_proj_weight' "
                "is (8, 6), 'attn.v_proj_weight' (8, 4))", "projects both from one input");
        refused(ctx, "attention_kv_apart", KILN_ERROR_UNSUPPORTED,
                "'/attn/Transpose' (Transpose)", "are projected from different tensors",
                "projects both from one input");
    } else {
        test_missing_part("PyTorch for " PYTHON " (Debian: python3-torch): the attention near "
                          "misses");
    }
    refused(ctx, "dropout_one", KILN_ERROR_UNSUPPORTED, "'drop'", "ratio 1", "[0, 1)");
    refused(ctx, "leaky_slope", KILN_ERROR_UNSUPPORTED, "'leaky'", "'alpha' is inf", "finite");
    refused(ctx, "reduce_axes", KILN_ERROR_UNSUPPORTED, "'mean'", "axis 0 is the batch",
            "within a sample");
    refused(ctx, "reduce_all", KILN_ERROR_UNSUPPORTED, "'mean'", "no axes",
            "the batch (axis 0) too");
    refused(ctx, "reduce_computed_axes", KILN_ERROR_UNSUPPORTED, "'sum' (ReduceSum)",
            "input 1 (axes) 'c' is computed", "initializer");
    refused(ctx, "softmax_axis", KILN_ERROR_UNSUPPORTED, "'soft'", "'axis' is 0, the batch",
            "within a sample");
    refused(ctx, "log_softmax_axis", KILN_ERROR_UNSUPPORTED, "'logsoft' (LogSoftmax)",
            "'axis' is -4, the batch", "within a sample");
    refused(ctx, "layer_norm_axis", KILN_ERROR_UNSUPPORTED, "'ln' (LayerNormalization)",
            "'axis' is 0 of a 4-D input", "from axis 1 on");
    refused(ctx, "layer_norm_broadcast", KILN_ERROR_SHAPE, "'ln' (LayerNormalization)",
            "'scale' holds 3 values", "gamma is (12");
    refused(ctx, "layer_norm_stash", KILN_ERROR_UNSUPPORTED, "'ln' (LayerNormalization)",
            "'stash_type' is 0", "float (1)");
    refused(ctx, "pad_reflect", KILN_ERROR_UNSUPPORTED, "'pad'", "'reflect'", "'constant'");
    refused(ctx, "pad_value", KILN_ERROR_UNSUPPORTED, "'pad'", "constant_value", "zeros");
    refused(ctx, "pad_channels", KILN_ERROR_UNSUPPORTED, "'pad'", "pads[1] is 1", "H and W");
    refused(ctx, "slice_batch", KILN_ERROR_UNSUPPORTED, "'slice' (Slice)",
            "slices axis 0 (starts 0, ends 1, step 1)", "keeps the batch whole");
    refused(ctx, "matmul_vectors", KILN_ERROR_UNSUPPORTED, "'mm' (MatMul)", "input 0 'f2' is "
            "2-D", "3 or more dimensions");
    refused(ctx, "matmul_inner", KILN_ERROR_SHAPE, "'mm' (MatMul)", "(3, 4) and (3, 4)",
            "last dimension (4) is not the second's next to last (3)");
    refused(ctx, "squeeze_batch", KILN_ERROR_UNSUPPORTED, "'sq' (Squeeze)", "axis 0 is the "
            "batch", NULL);
    refused(ctx, "squeeze_long", KILN_ERROR_SHAPE, "'sq' (Squeeze)", "axis 1 has length 3",
            "axes of length 1");
    refused(ctx, "unsqueeze_rank", KILN_ERROR_UNSUPPORTED, "'unsq' (Unsqueeze)",
            "6 dimensions", "2 to 5");
    refused(ctx, "slice_empty", KILN_ERROR_UNSUPPORTED, "'slice' (Slice)", "axis 2 is empty",
            "no empty values");
    refused(ctx, "gather_uneven", KILN_ERROR_UNSUPPORTED, "'take' (Gather)", "indices 0, 1, "
            "... do not step evenly", NULL);
    refused(ctx, "gather_computed", KILN_ERROR_UNSUPPORTED, "'take' (Gather)",
            "indices must be a scalar or 1-D integer constant", NULL);
    refused(ctx, "split_unequal", KILN_ERROR_UNSUPPORTED, "'split' (Split)", "length 3 does "
            "not split into 2 equal parts", NULL);
    refused(ctx, "split_sum", KILN_ERROR_FORMAT, "'split' (Split)", "parts add up to 2",
            "axis 1 is 3 long");
    refused(ctx, "expand_batch", KILN_ERROR_UNSUPPORTED, "'ex' (Expand)", "expands axis 0 to 2",
            "keeps the batch");
    refused(ctx, "expand_axis", KILN_ERROR_FORMAT, "'ex' (Expand)", "axis 1 of length 3 "
            "cannot expand to 4", NULL);
    refused(ctx, "div_zero", KILN_ERROR_UNSUPPORTED, "'div' (Div)", "element 1 divides a size "
            "by zero", "nonzero sizes");
    refused(ctx, "div_batch", KILN_ERROR_UNSUPPORTED, "'div' (Div)", "element 0 divides the "
            "batch by a size", NULL);
    refused(ctx, "tokens_not_batch", KILN_ERROR_UNSUPPORTED, "'ex' (Expand)", "initializer 'k' "
            "to a shape whose first entry is not the batch", "over the batch only");
    refused(ctx, "tokens_axis", KILN_ERROR_UNSUPPORTED, "'ex' (Expand)", "expands axis 1 of "
            "initializer 'k' from 1 to 3", NULL);
    refused(ctx, "tokens_constant_node", KILN_ERROR_UNSUPPORTED, "'ex' (Expand)", "input 0 'k' "
            "is a Constant node's value", NULL);
    refused(ctx, "tokens_4d", KILN_ERROR_UNSUPPORTED, "'ex' (Expand)", "initializer 'k' of 4 "
            "dimensions expanded to 4", "2, 3 or 5 dimensions");
    refused(ctx, "where_shapes", KILN_ERROR_UNSUPPORTED, "'where' (Where)", "integer constants "
            "of one shape", NULL);
    refused(ctx, "mul_no_broadcast", KILN_ERROR_SHAPE, "'mul' (Mul)", "'c' and 'k'",
            "do not broadcast (axis 3: 2 and 5)");
    refused(ctx, "add_batch_constant", KILN_ERROR_UNSUPPORTED, "'add' (Add)", "constant 'k'",
            "2 values along the batch axis");
    refused(ctx, "sub_lower_rank", KILN_ERROR_UNSUPPORTED, "'sub' (Sub)", "input 'fl'",
            "its batch would meet another axis");
    refused(ctx, "div_constants", KILN_ERROR_UNSUPPORTED, "'div' (Div)", "'k' and 'k2'",
            "are constants");
    refused(ctx, "mul_tied", KILN_ERROR_UNSUPPORTED, "initializer 'k'", "'mul' and node 'add'",
            "cannot tie parameters");
    refused(ctx, "max_attribute", KILN_ERROR_UNSUPPORTED, "'max' (Max)", "attribute 'broadcast'",
            NULL);
    refused(ctx, "add_empty_input", KILN_ERROR_FORMAT, "'add' (Add)", "input '' is no value",
            "Add takes two");
    refused(ctx, "bn_stats_read", KILN_ERROR_UNSUPPORTED, "'bn'", "output 1 'running_mean'",
            "first output only");
    refused(ctx, "gemm_trans_a", KILN_ERROR_UNSUPPORTED, "'gemm'", "'transA' is 1",
            "mixing the batch into the features");
    refused(ctx, "gemm_alpha_zero", KILN_ERROR_UNSUPPORTED, "'gemm'", "'alpha' 0",
            "alpha not 0");
    refused(ctx, "gemm_const_a", KILN_ERROR_UNSUPPORTED, "'gemm'",
            "A 'gw' is an initializer and B 'x' the graph's value", "mix the batch");
    refused(ctx, "gemm_scalar_bias", KILN_ERROR_UNSUPPORTED, "'gemm'", "bias 'gb'",
            "one value per output (4)");
    m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("gemm_row_bias"), NULL, &m));
    kiln_model_destroy(m);
    refused(ctx, "global_max_2d", KILN_ERROR_UNSUPPORTED, "'gmp'", "2-D", "4-D");
    m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, file("dropout"), NULL, &m));
    kiln_model_destroy(m);
    refused(ctx, "no_input", KILN_ERROR_FORMAT, "'no_input'", "no input", NULL);
    refused(ctx, "unnamed_attribute", KILN_ERROR_UNSUPPORTED, "'conv'", "attribute ''", NULL);
    refused(ctx, "unnamed_initializer", KILN_ERROR_FORMAT, "initializer 1 has no name", NULL,
            NULL);
    refused(ctx, "constant_input", KILN_ERROR_UNSUPPORTED, "'relu_of_weight'", "constant",
            NULL);
    refused(ctx, "long_name", KILN_ERROR_UNSUPPORTED, "name of 120 bytes", "95", NULL);
    /* Bad arguments and options. */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "path is NULL",
                kiln_model_import_onnx(ctx, NULL, NULL, &m));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "out is NULL",
                kiln_model_import_onnx(ctx, file("good"), NULL, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "data is NULL",
                kiln_model_import_onnx_buffer(ctx, NULL, 10, NULL, &m));
    const kiln_import_options no_dims = {.struct_size = sizeof no_dims, .n_dims = 1};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "dims",
                kiln_model_import_onnx(ctx, file("good"), &no_dims, &m));
    const kiln_import_options tiny = {.struct_size = 4};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "struct_size",
                kiln_model_import_onnx(ctx, file("good"), &tiny, &m));
    CHECK(m == NULL);
    names(ctx);
    copies(ctx);
    long_node(ctx);
    external(ctx);
    dynamic(ctx);
    conv_transpose(ctx);

    kiln_context_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_import_errors");
}
