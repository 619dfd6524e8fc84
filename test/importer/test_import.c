/* kiln_model_import_onnx against PyTorch and ONNX Runtime: small networks
 * that test/importer/make_models.py builds with fixed seeds and exports
 * with torch.onnx.export (opset 17, batch norm kept and folded) are
 * imported, and kiln's predictions on the exported inputs must equal
 * PyTorch's outputs and ONNX Runtime's on the same file within 1e-4
 * relative; parameters are read back by their ONNX names. Needs Debian's
 * python3-torch (SKIP_MISSING without it) and, for the ONNX Runtime part,
 * node with onnxruntime-node (.deps/onnxruntime). */
#include "harness.h"
#include "onnxruntime.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
#define TOLERANCE 1e-4
/* make_models.py's gemm_* (one Gemm with alpha and beta) are held to
 * 1e-5: nothing but one product and a bias to differ by. */
#define GEMM_TOLERANCE 1e-5

static double tolerance_of(const char *name)
{
    return strncmp(name, "gemm_", 5) == 0 ? GEMM_TOLERANCE : TOLERANCE;
}

static float *run_ort(const char *name, const char *type, int rank, const int64_t *dims,
                      int64_t n_out);

/* A model of ids (make_models.py names them ids_*): its input files hold
 * int32 ids, which kiln takes as int_features; the file's graph input is
 * int64, kiln's export's int32. */
static int of_ids(const char *name)
{
    return strncmp(name, "ids_", 4) == 0;
}

/* The count samples of x (floats, or int32 ids for a model of ids) as
 * kiln_model_predict takes them. */
static kiln_batch_arrays inputs_of(const char *name, const float *x, int64_t count)
{
    return (kiln_batch_arrays){.count = count, .features = of_ids(name) ? NULL : x,
                               .int_features = of_ids(name) ? (const int32_t *)(const void *)x
                                                            : NULL};
}

static const char *root, *ort_dir;
static int have_runtime;
static char no_runtime[512];
static char dir[64];

static float *read_floats(const char *path, int64_t n)
{
    size_t size = 0;
    unsigned char *data = test_read_file(path, &size);
    if (!data || size != (size_t)n * sizeof(float)) {
        fprintf(stderr, "%s: %zu bytes, expected %lld floats\n", path, size, (long long)n);
        test_failures++;
        free(data);
        return NULL;
    }
    return (float *)data;
}

static void compile(kiln_context *ctx, kiln_model *m)
{
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.01f};
    const kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                                     .optimizer = &sgd};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
}

/* ONNX Runtime's output of the model on its input, or NULL when it cannot
 * run here (noted as a missing part). */
/* type: "" for floats, "--int64" or "--int32" for ids (onnx_run.js). */
static float *run_ort(const char *name, const char *type, int rank, const int64_t *dims,
                      int64_t n_out)
{
    if (!have_runtime) {
        test_missing_part(no_runtime);
        return NULL;
    }
    char cmd[2048], out[256];
    snprintf(out, sizeof out, "%s/%s.ort", dir, name);
    int at = snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node '%s/test/saving/"
                      "onnx_run.js' %s '%s/%s.onnx' '%s/%s.in' '%s'", ort_dir, root, type, dir,
                      name, dir, name, out);
    for (int d = 0; d < rank; d++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " %lld", (long long)dims[d]);
    snprintf(cmd + at, sizeof cmd - (size_t)at, " > /dev/null");
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: ONNX Runtime failed: %s\n", name, cmd);
        test_failures++;
        return NULL;
    }
    return read_floats(out, n_out);
}

/* The CNN's parameters by their ONNX names: the batch norm's variance as
 * PyTorch had it, the Conv weight (OIHW there) as kiln's (kh, kw, C, F),
 * the Linear's (out, in) as kiln's (in, out). */
static void check_parameters(kiln_context *ctx, kiln_model *m, const char *name)
{
    char path[256];
    float var[8], conv[8 * 3 * 3 * 3], fc[5 * 12];
    snprintf(path, sizeof path, "%s/%s.bn1.running_var", dir, name);
    float *want = read_floats(path, 8);
    CHECK_OK(ctx, kiln_model_get_tensor(m, "bn1.running_var", var, 8));
    test_close("bn1.running_var", 40, var, want, sizeof(float), 8, TEST_PER_VALUE, 0);
    free(want);
    snprintf(path, sizeof path, "%s/%s.conv1.weight", dir, name);
    float *oihw = read_floats(path, 8 * 3 * 3 * 3);
    CHECK_OK(ctx, kiln_model_get_tensor(m, "conv1.weight", conv, 8 * 3 * 3 * 3));
    float hwio[8 * 3 * 3 * 3];
    for (int o = 0; oihw && o < 8; o++)
        for (int i = 0; i < 3; i++)
            for (int y = 0; y < 3; y++)
                for (int x = 0; x < 3; x++)
                    hwio[((y * 3 + x) * 3 + i) * 8 + o] = oihw[((o * 3 + i) * 3 + y) * 3 + x];
    test_close("conv1.weight", 40, conv, oihw ? hwio : NULL, sizeof(float), 8 * 27,
               TEST_PER_VALUE, 0);
    free(oihw);
    snprintf(path, sizeof path, "%s/%s.fc.weight", dir, name);
    float *out_in = read_floats(path, 5 * 12);
    CHECK_OK(ctx, kiln_model_get_tensor(m, "fc.weight", fc, 5 * 12));
    float in_out[5 * 12];
    for (int o = 0; out_in && o < 5; o++)
        for (int i = 0; i < 12; i++)
            in_out[i * 5 + o] = out_in[o * 12 + i];
    test_close("fc.weight", 40, fc, out_in ? in_out : NULL, sizeof(float), 60, TEST_PER_VALUE,
               0);
    free(out_in);
}

/* Every initializer kiln's export at `path` shares a name with the
 * original NAME.onnx has its shape there (a Conv weight OIHW, a Gemm
 * weight (out, in) as transB held it), and ONNX's checker passes it. */
static void check_initializer_shapes(const char *path, const char *name)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, PYTHON " -c 'import onnx, sys; m = onnx.load(sys.argv[1]); "
             "onnx.checker.check_model(m); o = onnx.load(sys.argv[2]); "
             "d = {i.name: list(i.dims) for i in m.graph.initializer}; "
             "bad = [(i.name, list(i.dims), d[i.name]) for i in o.graph.initializer "
             "if i.name in d and d[i.name] != list(i.dims)]; print(*bad, sep=chr(10)); "
             "sys.exit(1 if bad or not set(d) & {i.name for i in o.graph.initializer} "
             "else 0)' '%s' '%s/%s.onnx'", path, dir, name);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: the export's initializers (above: name, original shape, export's "
                "shape) differ from the file's, or share no name with it\n", name);
        test_failures++;
    }
}

/* The imported model exported again: its initializers keep their ONNX
 * names in ONNX's layouts (ONNX's checker and a Conv weight of OIHW), and
 * ONNX Runtime on the export gives kiln's predictions. */
static void check_export(kiln_context *ctx, kiln_model *m, const char *name, int rank,
                         const int64_t *dims, const float *got, int64_t n_out)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.kiln.onnx", dir, name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    /* layer_norms' norms over several axes keep Scale and B as one axis
     * (kiln normalises the axes flattened), (H * W) where the file had
     * (H, W): the same values, in order. */
    if (strcmp(name, "layer_norms") != 0)
        check_initializer_shapes(path, name);
    char export_name[128];
    snprintf(export_name, sizeof export_name, "%s.kiln", name);
    char in_from[256], in_to[256];
    snprintf(in_from, sizeof in_from, "%s/%s.in", dir, name);
    snprintf(in_to, sizeof in_to, "%s/%s.kiln.in", dir, name);
    CHECK(link(in_from, in_to) == 0);
    float *ort = run_ort(export_name, of_ids(name) ? "--int32" : "", rank, dims, n_out);
    if (ort) {
        char what[128];
        snprintf(what, sizeof what, "%s: its export in ONNX Runtime", name);
        test_close(what, 40, ort, got, sizeof(float), n_out, TEST_PER_VALUE,
                   tolerance_of(name));
    }
    free(ort);
}

/* The imported model saved as a model file and loaded: the same
 * predictions, its parameters still under their ONNX names (the CNN's). */
static void check_model_file(kiln_context *ctx, kiln_model *m, const char *name,
                             const float *x, int64_t count, const float *got, int64_t n_out)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.kiln", dir, name);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *back = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &back));
    if (!back)
        return;
    float *again = calloc((size_t)n_out, sizeof *again);
    const kiln_batch_arrays in = inputs_of(name, x, count);
    CHECK_OK(ctx, kiln_model_predict(back, &in, again, 0));
    char what[128];
    snprintf(what, sizeof what, "%s: saved and loaded", name);
    test_close(what, 40, again, got, sizeof(float), n_out, TEST_PER_VALUE, 0);
    float var[8];
    if (strcmp(name, "cnn") == 0) {
        CHECK_OK(ctx, kiln_model_get_tensor(back, "bn1.running_var", var, 8));
        /* The model file keeps which weights ONNX held transposed. */
        snprintf(path, sizeof path, "%s/%s.loaded.onnx", dir, name);
        CHECK_OK(ctx, kiln_model_export_onnx(back, path));
        check_initializer_shapes(path, name);
    }
    /* The packed in_proj's parts, by name (cross-attention's too); with
     * kdim = 6 the separate weights under their own names, the key's (6, 8)
     * in kiln's layout, and no packed name. */
    const int kdim = strcmp(name, "attention_kdim") == 0;
    if (strcmp(name, "attention") == 0 || strcmp(name, "attention_cross") == 0 || kdim) {
        float before[64], after[64];
        const char *key = kdim ? "attn.k_proj_weight" : "attn.in_proj_weight/key";
        const int64_t size = kdim ? 48 : 64;
        CHECK_OK(ctx, kiln_model_get_tensor(m, key, before, size));
        CHECK_OK(ctx, kiln_model_get_tensor(back, key, after, size));
        CHECK(memcmp(before, after, (size_t)size * sizeof *before) == 0);
        CHECK_OK(ctx, kiln_model_get_tensor(back, "attn.in_proj_bias/key", after, 8));
        if (kdim) {
            CHECK_OK(ctx, kiln_model_get_tensor(back, "attn.q_proj_weight", after, 64));
            CHECK_OK(ctx, kiln_model_get_tensor(back, "attn.v_proj_weight", after, 48));
            CHECK(kiln_model_get_tensor(back, "attn.in_proj_weight/key", after, 64) ==
                  KILN_ERROR_INVALID_ARGUMENT);
        }
        snprintf(path, sizeof path, "%s/%s.loaded.onnx", dir, name);
        CHECK_OK(ctx, kiln_model_export_onnx(back, path));
        char loaded[128];
        snprintf(loaded, sizeof loaded, "%s.loaded", name);
        char in_from[256], in_to[256];
        snprintf(in_from, sizeof in_from, "%s/%s.in", dir, name);
        snprintf(in_to, sizeof in_to, "%s/%s.loaded.in", dir, name);
        CHECK(link(in_from, in_to) == 0);
        const int64_t shape[3] = {count, 5, 8};
        float *ort = run_ort(loaded, "", 3, shape, n_out);
        if (ort)
            test_close(loaded, 40, ort, got, sizeof(float), n_out, TEST_PER_VALUE, TOLERANCE);
        free(ort);
    }
    free(again);
    kiln_model_destroy(back);
}

/* An ONNX parameter of `rank` dims as kiln holds it: a Conv weight (OIHW)
 * as (kh, kw, C, F), a Linear's (out, in) as (in, out), others as they are. */
static void to_kiln_layout(const float *onnx, int rank, const int64_t *d, float *out)
{
    int64_t size = 1;
    for (int k = 0; k < rank; k++)
        size *= d[k];
    if (rank == 4) {
        for (int64_t o = 0; o < d[0]; o++)
            for (int64_t i = 0; i < d[1]; i++)
                for (int64_t k = 0; k < d[2] * d[3]; k++)
                    out[(k * d[1] + i) * d[0] + o] = onnx[(o * d[1] + i) * d[2] * d[3] + k];
    } else if (rank == 2) {
        for (int64_t o = 0; o < d[0]; o++)
            for (int64_t i = 0; i < d[1]; i++)
                out[i * d[0] + o] = onnx[o * d[1] + i];
    } else {
        memcpy(out, onnx, (size_t)size * sizeof *out);
    }
}

/* A trained model exported: ONNX Runtime on the export gives kiln's
 * predictions, and its initializers of the trained parameters' names hold
 * PyTorch's trained values (NAME.trained.PARAMETER, in ONNX's layout), so
 * the scales kept their meaning (Gemm's alpha and beta). */
static void check_trained_export(kiln_context *ctx, kiln_model *m, const char *name, int rank,
                                 const int64_t *dims, int64_t n_out, char (*params)[96], int n)
{
    char path[256], link_to[256], export_name[128];
    snprintf(export_name, sizeof export_name, "%s.fit", name);
    snprintf(path, sizeof path, "%s/%s.onnx", dir, export_name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    int64_t n_in = 1;
    for (int d = 0; d < rank; d++)
        n_in *= dims[d];
    snprintf(link_to, sizeof link_to, "%s/%s.in", dir, name);
    float *x = read_floats(link_to, n_in);
    float *got = calloc((size_t)n_out, sizeof *got);
    const kiln_batch_arrays in = inputs_of(name, x, dims[0]);
    if (x && got)
        CHECK_OK(ctx, kiln_model_predict(m, &in, got, 0));
    snprintf(path, sizeof path, "%s/%s.in", dir, export_name);
    CHECK(link(link_to, path) == 0);
    float *ort = run_ort(export_name, "", rank, dims, n_out);
    if (ort && got) {
        char what[128];
        snprintf(what, sizeof what, "%s: trained, exported, in ORT", name);
        test_close(what, 40, ort, got, sizeof(float), n_out, TEST_PER_VALUE,
                   tolerance_of(name));
    }
    free(ort);
    free(got);
    free(x);
    char cmd[2048];
    int at = snprintf(cmd, sizeof cmd, PYTHON " -c 'import onnx, sys, numpy as np; "
                      "from onnx import numpy_helper as h; m = onnx.load(sys.argv[1]); "
                      "d = {i.name: h.to_array(i).ravel() for i in m.graph.initializer}; "
                      "e = [abs(d[p] - w).max() / max(abs(w).max(), 1e-30) if p in d else 1 "
                      "for p in sys.argv[3:] for w in [np.fromfile(sys.argv[2] + p, \"<f4\")]]; "
                      "print(\"%s: the export against PyTorch trained, worst relative\", "
                      "max(e)); sys.exit(1 if max(e) > %g else 0)' '%s/%s.onnx' "
                      "'%s/%s.trained.'", name, GEMM_TOLERANCE, dir, export_name, dir, name);
    for (int p = 0; p < n; p++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " '%s'", params[p]);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: the trained export's initializers are not PyTorch's trained "
                "values under their names\n", name);
        test_failures++;
    }
}

/* Training from the imported weights: 3 SGD steps (learning rate 0.1, no
 * shuffling; 5 with the momentum NAME.momentum gives, where it exists) on
 * one batch with MSE, batch norm on batch statistics, against PyTorch's
 * steps on the same batch (make_models.py's train_steps); the
 * parameters and moving statistics NAME.trained lists compared by name. */
static void check_training(kiln_context *ctx, const char *name, int rank, const int64_t *dims,
                           int64_t n_out)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.trained", dir, name);
    FILE *list = fopen(path, "r");
    if (!list)
        return;   /* not a network trained here */
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &m));
    if (!m) {
        fclose(list);
        return;
    }
    /* NAME.momentum: SGD's momentum (PyTorch's buffer b = m b + g, w -= lr b
     * is Keras's, for a constant learning rate), and 5 steps. */
    float momentum = 0.0f;
    snprintf(path, sizeof path, "%s/%s.momentum", dir, name);
    FILE *mf = fopen(path, "r");
    if (mf) {
        CHECK(fscanf(mf, "%f", &momentum) == 1);
        fclose(mf);
    }
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.1f, .momentum = momentum};
    /* One device: PyTorch's batch norm takes the whole batch's statistics,
     * as one replica does (mirrored replicas would take their halves'). */
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    int64_t n_in = 1;
    for (int d = 0; d < rank; d++)
        n_in *= dims[d];
    snprintf(path, sizeof path, "%s/%s.train_in", dir, name);
    float *x = read_floats(path, n_in);
    snprintf(path, sizeof path, "%s/%s.target", dir, name);
    float *y = read_floats(path, n_out);
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = dims[0], .feature_rank = rank - 1,
                          .features = of_ids(name) ? NULL : x,
                          .int_features = of_ids(name) ? (const int32_t *)(const void *)x : NULL,
                          .label_kind = KILN_LABELS_DENSE,
                          .label_size = (int32_t)(n_out / dims[0]), .dense_labels = y};
    for (int k = 1; k < rank; k++)
        d.feature_dims[k - 1] = (int32_t)dims[k];
    kiln_dataset *ds = NULL;
    if (x && y)
        CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = momentum > 0.0f ? 5 : 3,
                                 .batch_size = (int32_t)dims[0], .no_shuffle = 1,
                                 .verbosity = KILN_VERBOSE_SILENT};
    enum { MOST = 8, MOST_FLOATS = 4096 };
    static float before[MOST][MOST_FLOATS];
    char params[MOST][96];
    int64_t pdims[MOST][4], sizes[MOST];
    int prank[MOST], n = 0;
    char line[256];
    while (n < MOST && fgets(line, sizeof line, list)) {
        int used = 0;
        long long dim;
        if (sscanf(line, "%95s%n", params[n], &used) != 1)
            continue;
        prank[n] = 0;
        sizes[n] = 1;
        for (const char *at = line + used; prank[n] < 4 && sscanf(at, " %lld%n", &dim, &used) == 1;
             at += used) {
            pdims[n][prank[n]++] = dim;
            sizes[n] *= dim;
        }
        CHECK(sizes[n] <= MOST_FLOATS);
        if (sizes[n] <= MOST_FLOATS)
            CHECK_OK(ctx, kiln_model_get_tensor(m, params[n], before[n], sizes[n]));
        n++;
    }
    fclose(list);
    if (ds)
        CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    for (int p = 0; p < n; p++) {
        if (sizes[p] > MOST_FLOATS)
            continue;
        static float got[MOST_FLOATS], fixed[MOST_FLOATS];
        snprintf(path, sizeof path, "%s/%.63s.trained.%.95s", dir, name, params[p]);
        float *want = read_floats(path, sizes[p]);
        CHECK_OK(ctx, kiln_model_get_tensor(m, params[p], got, sizes[p]));
        CHECK(memcmp(got, before[p], (size_t)sizes[p] * sizeof *got) != 0);   /* trained */
        /* An embedding's table (a Gather's) kiln keeps as ONNX has it. */
        if (want && strcmp(params[p], "emb.weight") == 0)
            memcpy(fixed, want, (size_t)sizes[p] * sizeof *fixed);
        else if (want)
            to_kiln_layout(want, prank[p], pdims[p], fixed);
        char what[128];
        snprintf(what, sizeof what, "%.40s trained: %.60s", name, params[p]);
        test_close(what, 40, got, want ? fixed : NULL, sizeof(float), sizes[p], TEST_PER_VALUE,
                   tolerance_of(name));
        free(want);
    }
    if (strncmp(name, "gemm_", 5) == 0)
        check_trained_export(ctx, m, name, rank, dims, n_out, params, n);
    kiln_dataset_destroy(ds);
    free(x);
    free(y);
    kiln_model_destroy(m);
}

/* How many of the model's layers are of `kind`; *before, the kind of the
 * layer added just before the last of them (the importer adds a node's
 * layers in the graph's order, a permute of its input first). */
static int layers_before(kiln_context *ctx, const kiln_model *m, const char *kind,
                         char *before, size_t size)
{
    int32_t count = 0;
    int found = 0;
    const char *previous = "";
    CHECK_OK(ctx, kiln_model_layer_count(m, &count));
    for (int32_t i = 0; i < count; i++) {
        kiln_layer_info li = {.struct_size = sizeof li};
        CHECK_OK(ctx, kiln_model_layer_info(m, i, &li));
        if (strcmp(li.kind, kind) == 0) {
            found++;
            snprintf(before, size, "%s", previous);
        }
        previous = li.kind;
    }
    return found;
}

/* How many layers of `kind` the model has. */
static int layers_of(kiln_context *ctx, kiln_model *m, const char *kind)
{
    int32_t n = 0;
    int found = 0;
    CHECK_OK(ctx, kiln_model_layer_count(m, &n));
    for (int32_t i = 0; i < n; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_layer_info(m, i, &info));
        found += strcmp(info.kind, kind) == 0;
    }
    return found;
}

/* The patterns as they should import: the SE block's Mul one broadcast
 * multiply of the channels-last value, adding no Permute or Reshape (the
 * network has two Permutes, the input's to channels-last and the
 * Flatten's back, and one Reshape, the pooled (C) to the 1x1 Conv's
 * (1, 1, C)); SiLU's
 * three Sigmoid -> Mul pairs no Mul at all, the two after a Conv that
 * alone reads them that Conv's activation (one Activation layer for
 * tanh, one for the SiLU of a value read elsewhere too). */
static void check_structure(kiln_context *ctx, kiln_model *m, const char *name)
{
    if (strcmp(name, "squeeze_excite") == 0) {
        const int binary = layers_of(ctx, m, "binary"), permute = layers_of(ctx, m, "permute");
        const int reshape = layers_of(ctx, m, "reshape");
        printf("%s: %d binary, %d permute, %d reshape layers\n", name, binary, permute, reshape);
        CHECK(binary == 1 && permute == 2 && reshape == 1);
    }
    if (strcmp(name, "silu") == 0) {
        const int binary = layers_of(ctx, m, "binary");
        const int activation = layers_of(ctx, m, "activation");
        printf("%s: %d binary, %d activation layers\n", name, binary, activation);
        CHECK(binary == 0 && activation == 2);
    }
}

/* One network of models.txt: import, predict, compare. */
/* The layer named after ONNX node `node` is a `kind`: an activation fused
 * into the layer before it takes the activation's name (a Relu after a
 * BatchNormalization, or after the Conv a folded batch norm left; a GELU
 * chain's last Mul after a Gemm); one after an Add keeps a layer of its
 * own. */
static void check_layer_kind(kiln_context *ctx, kiln_model *m, const char *node, const char *kind)
{
    kiln_node at = KILN_NODE_INVALID;
    CHECK_OK(ctx, kiln_model_find_layer(m, node, &at));
    kiln_layer_info info = {.struct_size = sizeof info};
    CHECK_OK(ctx, kiln_model_layer_info(m, at, &info));
    if (!info.kind || strcmp(info.kind, kind) != 0) {
        fprintf(stderr, "layer '%s' is a %s, expected a %s\n", node,
                info.kind ? info.kind : "(none)", kind);
        CHECK(0);
    }
}

/* One network of models.txt: import, predict, compare. */
static void check_network(kiln_context *ctx, const char *name, int rank, const int64_t *dims,
                          int64_t n_out)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &m));
    if (!m)
        return;
    compile(ctx, m);
    /* ConvNeXt's Transpose pair around LayerNormalization only changes
     * the layout: the norm reads the depthwise Conv's (H, W, C) as it is. */
    char before[64] = "";
    if (strcmp(name, "convnext_block") == 0 || strcmp(name, "convnext_block13") == 0) {
        CHECK(layers_before(ctx, m, "layer_normalization", before, sizeof before) == 1);
        CHECK(strcmp(before, "conv2d") == 0);
    }
    if (strcmp(name, "gelus_norm") == 0)   /* the chain as one layer */
        CHECK(layers_before(ctx, m, "layer_normalization", before, sizeof before) == 1);
    if (strcmp(name, "permute5d") == 0)   /* the one Transpose of a computed value */
        CHECK(layers_before(ctx, m, "permute", before, sizeof before) == 1);
    /* The input's for the Conv alone: the ops read the (N, H, W, C) value
     * as kiln holds it. */
    if (strcmp(name, "channels_last_ops") == 0)
        CHECK(layers_before(ctx, m, "permute", before, sizeof before) == 1);
    /* The input's for the Conv, and one for each Transpose. */
    if (strcmp(name, "transpose4d") == 0)
        CHECK(layers_before(ctx, m, "permute", before, sizeof before) == 3);
    int64_t n_in = 1;
    for (int d = 0; d < rank; d++)
        n_in *= dims[d];
    snprintf(path, sizeof path, "%s/%s.in", dir, name);
    float *x = read_floats(path, n_in);
    snprintf(path, sizeof path, "%s/%s.out", dir, name);
    float *want = read_floats(path, n_out);
    float *got = calloc((size_t)n_out, sizeof *got);
    const kiln_batch_arrays in = inputs_of(name, x, dims[0]);
    if (x && want)
        CHECK_OK(ctx, kiln_model_predict(m, &in, got, 0));
    char what[128];
    snprintf(what, sizeof what, "%s: kiln against PyTorch", name);
    test_close(what, 40, got, want, sizeof(float), n_out, TEST_PER_VALUE, tolerance_of(name));
    /* A training-form graph (train_*) ONNX Runtime normalises with the
     * batch's statistics; kiln's predict, as PyTorch's eval, with the
     * moving ones. */
    float *ort = strncmp(name, "train_", 6) != 0
                     ? run_ort(name, of_ids(name) ? "--int64" : "", rank, dims, n_out) : NULL;
    if (ort) {
        snprintf(what, sizeof what, "%s: kiln against ONNX Runtime", name);
        test_close(what, 40, got, ort, sizeof(float), n_out, TEST_PER_VALUE,
                   tolerance_of(name));
    }
    free(ort);
    if (strcmp(name, "cnn") == 0)
        check_parameters(ctx, m, name);
    check_structure(ctx, m, name);
    /* nn.MultiheadAttention's exported block: one MultiHeadAttention a block. */
    if (strncmp(name, "attention", 9) == 0 || strncmp(name, "encoder_layer", 13) == 0)
        CHECK(layers_of(ctx, m, "multi_head_attention") == 1);
    if (strncmp(name, "ids_char_lm", 11) == 0 || strncmp(name, "vit_blocks", 10) == 0)
        CHECK(layers_of(ctx, m, "multi_head_attention") == 2);
    if (strcmp(name, "resnet18") == 0 || strcmp(name, "resnet18_folded") == 0) {
        check_layer_kind(ctx, m, "/relu/Relu",
                         name[8] ? "conv2d" : "batch_normalization");
        check_layer_kind(ctx, m, "/layer1/layer1.0/relu_1/Relu", "activation");
    }
    /* Each GELU chain (opset 13) one activation, fused into its Gemm. */
    /* Each HardSigmoid -> Mul (opset 13) one hard_silu: the first fused
     * into its Conv, the second (after an Add) a layer of its own. */
    if (strcmp(name, "hard_swishes") == 0) {
        check_layer_kind(ctx, m, "/act1/Mul", "conv2d");
        check_layer_kind(ctx, m, "/act2/Mul", "activation");
    }
    if (strcmp(name, "gelus") == 0) {
        check_layer_kind(ctx, m, "/act1/Mul_1", "dense");
        check_layer_kind(ctx, m, "/act2/Mul_5", "dense");
    }
    /* unary: HardSigmoid (1/6, 0.5) an activation fused into the Conv
     * before it, HardSwish one of its own (its input has other readers),
     * every other op, both Clips included, kiln_math's. */
    if (strcmp(name, "unary") == 0) {
        static const char *const math[] = {"/Clip", "/Clip_1", "/Exp", "/Sqrt", "/Log",
                                           "/Reciprocal", "/Erf", "/Pow", "/Abs", "/Neg"};
        check_layer_kind(ctx, m, "/HardSigmoid", "conv2d");
        check_layer_kind(ctx, m, "/HardSwish", "activation");
        for (size_t k = 0; k < sizeof math / sizeof math[0]; k++)
            check_layer_kind(ctx, m, math[k], "math");
    }
    /* channels: leaky_relu's slopes and log_softmax kept in the file;
     * gemm_scaled: the Dense's alpha and beta;
     * unary: kiln_math's ops and constants, the hard activations. */
    /* attention, ids_char_lm: the MultiHeadAttention's parameter names
     * (in_proj split) and which kernels are PyTorch's (out, in). */
    if (strcmp(name, "cnn") == 0 || strcmp(name, "channels") == 0 ||
        strcmp(name, "unary") == 0 || strcmp(name, "attention") == 0 ||
        strcmp(name, "attention_cross") == 0 || strcmp(name, "attention_kdim") == 0 ||
        strcmp(name, "ids_char_lm") == 0 || strcmp(name, "gemm_scaled") == 0)
        check_model_file(ctx, m, name, x, dims[0], got, n_out);
    check_export(ctx, m, name, rank, dims, got, n_out);
    free(x);
    free(want);
    free(got);
    kiln_model_destroy(m);
}

/* make_models.py's two-tower recommender (two inputs of int64 ids, an
 * Embedding each, their dot product plus an MLP): predict against PyTorch
 * and ONNX Runtime, then 3 SGD steps against PyTorch's, every listed
 * tensor (the embedding tables as ONNX has them, the Linear weight
 * turned to kiln's (in, out)). */
static void check_two_towers(kiln_context *ctx)
{
    enum { BATCH = 6 };
    char path[256], cmd[2048];
    snprintf(path, sizeof path, "%s/two_towers.onnx", dir);
    if (access(path, R_OK) != 0)
        return;   /* not asked for (KILN_IMPORT_ONLY) */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &m));
    if (!m)
        return;
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.1f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    float *ids[2], *want, *target;
    static const char *const towers[2] = {"user", "item"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/two_towers.%s", dir, towers[k]);
        ids[k] = read_floats(path, BATCH);   /* int32 ids, 4 bytes each */
    }
    snprintf(path, sizeof path, "%s/two_towers.out", dir);
    want = read_floats(path, BATCH);
    snprintf(path, sizeof path, "%s/two_towers.target", dir);
    target = read_floats(path, BATCH);
    if (!ids[0] || !ids[1] || !want || !target)
        goto done;
    kiln_input_array in[2];
    for (int k = 0; k < 2; k++)
        in[k] = (kiln_input_array){.struct_size = sizeof in[k], .rank = 1, .dims = {1},
                                   .int_features = (const int32_t *)(const void *)ids[k]};
    float got[BATCH];
    const kiln_batch_arrays both = {.struct_size = sizeof both, .count = BATCH, .n_inputs = 2,
                                    .inputs = in};
    CHECK_OK(ctx, kiln_model_predict(m, &both, got, 0));
    test_close("two_towers: kiln against PyTorch", 40, got, want, sizeof(float), BATCH,
               TEST_PER_VALUE, TOLERANCE);
    if (have_runtime) {
        snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node '%s/test/saving/onnx_run.js' "
                 "--inputs '%s/two_towers.onnx' '%s/two_towers.ort' "
                 "int64:'%s/two_towers.user':%d,1 int64:'%s/two_towers.item':%d,1 > /dev/null",
                 ort_dir, root, dir, dir, dir, BATCH, dir, BATCH);
        CHECK(system(cmd) == 0);
        snprintf(path, sizeof path, "%s/two_towers.ort", dir);
        float *ort = read_floats(path, BATCH);
        test_close("two_towers: kiln against ONNX Runtime", 40, got, ort, sizeof(float), BATCH,
                   TEST_PER_VALUE, TOLERANCE);
        free(ort);
    } else {
        test_missing_part(no_runtime);
    }
    const kiln_batch_arrays step = {.struct_size = sizeof step, .count = BATCH, .n_inputs = 2,
                                    .inputs = in, .dense_labels = target};
    for (int k = 0; k < 3; k++) {
        kiln_metrics mt = {.struct_size = sizeof mt};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &step, &mt));
    }
    static const struct { const char *name; int64_t rows, cols; int linear; } trained[] = {
        {"user.weight", 7, 4, 0}, {"item.weight", 9, 4, 0}, {"mlp.0.weight", 6, 8, 1},
        {"mlp.2.bias", 1, 1, 0},
    };
    for (size_t t = 0; t < sizeof trained / sizeof trained[0]; t++) {
        const int64_t size = trained[t].rows * trained[t].cols;
        float after[64], fixed[64];
        snprintf(path, sizeof path, "%s/two_towers.trained.%s", dir, trained[t].name);
        float *ref = read_floats(path, size);
        CHECK_OK(ctx, kiln_model_get_tensor(m, trained[t].name, after, size));
        if (ref && trained[t].linear)
            to_kiln_layout(ref, 2, (int64_t[]){trained[t].rows, trained[t].cols}, fixed);
        else if (ref)
            memcpy(fixed, ref, (size_t)size * sizeof *fixed);
        char what[96];
        snprintf(what, sizeof what, "two_towers trained: %s", trained[t].name);
        test_close(what, 40, after, ref ? fixed : NULL, sizeof(float), size, TEST_PER_VALUE,
                   TOLERANCE);
        free(ref);
    }
done:
    free(ids[0]);
    free(ids[1]);
    free(want);
    free(target);
    kiln_model_destroy(m);
}

/* make_models.py's attention_padded*: nn.MultiheadAttention with a
 * key_padding_mask, a bool graph input, imported as one MultiHeadAttention
 * whose padding mask is that input (floats 0 and 1): predict against
 * PyTorch and ONNX Runtime; kiln's export (the mask a float input) in ONNX
 * Runtime; a sample of padding alone gives the out_proj's bias (PyTorch
 * NaN); then 5 SGD steps with momentum against PyTorch's. _causal: with
 * generate_square_subsequent_mask's attn_mask beside it. */
static void check_padded(kiln_context *ctx, const char *name)
{
    enum { N = 4, T = 5, E = 8 };
    char path[256], cmd[2048];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    if (access(path, R_OK) != 0)
        return;   /* not asked for (KILN_IMPORT_ONLY) */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &m));
    if (!m)
        return;
    CHECK(layers_of(ctx, m, "multi_head_attention") == 1);
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.1f, .momentum = 0.9f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    snprintf(path, sizeof path, "%s/%s.in", dir, name);
    float *x = read_floats(path, N * T * E);
    snprintf(path, sizeof path, "%s/%s.pad", dir, name);
    int32_t *flags = (int32_t *)read_floats(path, N * T);   /* int32, 4 bytes each */
    snprintf(path, sizeof path, "%s/%s.out", dir, name);
    float *want = read_floats(path, N * T * E);
    snprintf(path, sizeof path, "%s/%s.target", dir, name);
    float *target = read_floats(path, N * T * E);
    float pad[N * T], got[N * T * E];
    if (!x || !flags || !want || !target)
        goto done;
    for (int i = 0; i < N * T; i++)
        pad[i] = (float)flags[i];
    kiln_input_array in[2] = {
        {.struct_size = sizeof in[0], .rank = 2, .dims = {T, E}, .features = x},
        {.struct_size = sizeof in[1], .rank = 1, .dims = {T}, .features = pad}};
    const kiln_batch_arrays both = {.struct_size = sizeof both, .count = N, .n_inputs = 2,
                                    .inputs = in};
    CHECK_OK(ctx, kiln_model_predict(m, &both, got, 0));
    char what[160];
    snprintf(what, sizeof what, "%s: kiln against PyTorch", name);
    test_close(what, 40, got, want, sizeof(float), N * T * E, TEST_PER_VALUE, TOLERANCE);
    /* The file in ONNX Runtime (the mask bool), then kiln's export (float). */
    char pad_file[256];
    snprintf(pad_file, sizeof pad_file, "%s/%s.padf", dir, name);
    FILE *pf = fopen(pad_file, "wb");
    CHECK(pf && fwrite(pad, sizeof pad, 1, pf) == 1);
    if (pf)
        fclose(pf);
    snprintf(path, sizeof path, "%s/%s.kiln.onnx", dir, name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    for (int k = 0; k < 2 && have_runtime; k++) {
        char spec[320];
        if (k)
            snprintf(spec, sizeof spec, "float32:'%s':%d,%d", pad_file, N, T);
        else
            snprintf(spec, sizeof spec, "bool:'%s/%s.pad':%d,%d", dir, name, N, T);
        snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node "
                 "'%s/test/saving/onnx_run.js' --inputs '%s/%s%s.onnx' '%s/%s.ort' "
                 "float32:'%s/%s.in':%d,%d,%d %s > /dev/null", ort_dir, root, dir, name,
                 k ? ".kiln" : "", dir, name, dir, name, N, T, E, spec);
        CHECK(system(cmd) == 0);
        snprintf(path, sizeof path, "%s/%s.ort", dir, name);
        float *ort = read_floats(path, N * T * E);
        snprintf(what, sizeof what, k ? "%s: its export in ONNX Runtime"
                                      : "%s: kiln against ONNX Runtime", name);
        test_close(what, 40, ort, got, sizeof(float), N * T * E, TEST_PER_VALUE, TOLERANCE);
        free(ort);
    }
    if (!have_runtime)
        test_missing_part(no_runtime);
    /* A sample of padding alone: every query row sees nothing, so the
     * context is 0 and the output the out_proj's bias at each position. */
    float bias[E], alone[T * E], all_pad[T] = {1, 1, 1, 1, 1};
    in[1].features = all_pad;
    const kiln_batch_arrays one = {.struct_size = sizeof one, .count = 1, .n_inputs = 2,
                                   .inputs = in};
    CHECK_OK(ctx, kiln_model_predict(m, &one, alone, 0));
    CHECK_OK(ctx, kiln_model_get_tensor(m, "attn.out_proj.bias", bias, E));
    float repeated[T * E];
    for (int i = 0; i < T * E; i++)
        repeated[i] = bias[i % E];
    snprintf(what, sizeof what, "%s: a sample of padding alone", name);
    test_close(what, 40, alone, repeated, sizeof(float), T * E, TEST_PER_VALUE, 1e-6);
    in[1].features = pad;
    /* Training: 5 steps on the batch, against PyTorch's, every parameter
     * NAME.trained lists moved from where it was. */
    enum { MOST = 8, FLOATS = 3 * E * E };
    static float before[MOST][FLOATS];
    char params[MOST][96];
    int64_t pdims[MOST][2], sizes[MOST];
    int ranks[MOST], n = 0;
    snprintf(path, sizeof path, "%s/%s.trained", dir, name);
    FILE *list = fopen(path, "r");
    CHECK(list != NULL);
    char line[256];
    while (list && n < MOST && fgets(line, sizeof line, list)) {
        pdims[n][0] = pdims[n][1] = 1;
        ranks[n] = sscanf(line, "%95s %lld %lld", params[n], (long long *)&pdims[n][0],
                          (long long *)&pdims[n][1]) - 1;
        sizes[n] = pdims[n][0] * pdims[n][1];
        if (ranks[n] < 1 || sizes[n] > FLOATS)
            continue;
        CHECK_OK(ctx, kiln_model_get_tensor(m, params[n], before[n], sizes[n]));
        n++;
    }
    if (list)
        fclose(list);
    CHECK(n == 7);
    const kiln_batch_arrays step = {.struct_size = sizeof step, .count = N, .n_inputs = 2,
                                    .inputs = in, .dense_labels = target};
    for (int k = 0; k < 5; k++) {
        kiln_metrics mt = {.struct_size = sizeof mt};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &step, &mt));
    }
    for (int p = 0; p < n; p++) {
        static float after[FLOATS], fixed[FLOATS];
        snprintf(path, sizeof path, "%s/%.63s.trained.%.95s", dir, name, params[p]);
        float *ref = read_floats(path, sizes[p]);
        CHECK_OK(ctx, kiln_model_get_tensor(m, params[p], after, sizes[p]));
        CHECK(memcmp(after, before[p], (size_t)sizes[p] * sizeof *after) != 0);
        if (ref)
            to_kiln_layout(ref, ranks[p], pdims[p], fixed);
        snprintf(what, sizeof what, "%.40s trained: %.95s", name, params[p]);
        test_close(what, 40, after, ref ? fixed : NULL, sizeof(float), sizes[p],
                   TEST_PER_VALUE, TOLERANCE);
        free(ref);
    }
done:
    free(x);
    free(flags);
    free(want);
    free(target);
    kiln_model_destroy(m);
}

int main(void)
{
    root = getenv("KILN_SOURCE_ROOT");
    ort_dir = getenv("KILN_ONNXRUNTIME_DIR");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    snprintf(dir, sizeof dir, "/tmp/kiln_import_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char cmd[1024];
    /* KILN_IMPORT_ONLY="reduce channels": those networks alone. */
    const char *only = getenv("KILN_IMPORT_ONLY");
    snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/make_models.py' '%s' %s", root, dir,
             only ? only : "");
    const int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77)
        SKIP_MISSING("PyTorch for " PYTHON " (Debian: python3-torch)");
    CHECK(WEXITSTATUS(rc) == 0);
    have_runtime = test_onnxruntime_ready(root, ort_dir, no_runtime, sizeof no_runtime);
    kiln_context *ctx = test_context(1);
    if (!ctx)
        return 1;
    char list[128];
    snprintf(list, sizeof list, "%s/models.txt", dir);
    FILE *f = fopen(list, "r");
    CHECK(f != NULL);
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char name[64];
        int64_t dims[KILN_MAX_RANK + 1], n_out = 0;
        int rank = 0, used = 0;
        if (sscanf(line, "%63s%n", name, &used) != 1)
            continue;
        const char *at = line + used;
        long long dim;
        while (rank <= KILN_MAX_RANK && sscanf(at, " %lld%n", &dim, &used) == 1) {
            dims[rank] = dim;
            rank++;
            at += used;
        }
        long long outputs = 0;
        CHECK(sscanf(at, " : %lld", &outputs) == 1);
        n_out = outputs;
        check_network(ctx, name, rank, dims, n_out);
        check_training(ctx, name, rank, dims, n_out);
    }
    if (f)
        fclose(f);
    check_two_towers(ctx);
    check_padded(ctx, "attention_padded");
    check_padded(ctx, "attention_padded13");
    check_padded(ctx, "attention_padded_causal");
    kiln_context_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_import");
}
