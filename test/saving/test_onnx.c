/* kiln_model_export_onnx checked by real consumers: each file passes ONNX's
 * own checker (Debian's python3-onnx, full_check) and ONNX Runtime
 * (onnxruntime-node, which tools/install_onnxruntime.sh installs with npm
 * into KILN_ONNXRUNTIME_DIR) computes what kiln_model_predict computes, to
 * |onnx - kiln| <= 1e-5 max(1, |kiln|), for the seed CNN and the seed
 * ResNet after a little training, a model with every layer kind of the
 * seed (batch norms with momentum 0.5, so that their moving statistics are
 * far from their start), one with the later kinds and every activation,
 * one with attention layers, one of three inputs (ids and floats), one
 * that ends in a convolution behind a dropout, and a decoder of transposed
 * convolutions; and the errors.
 * Skips (77) only where node, npm or onnxruntime-node is missing, after
 * every check that needs neither (fails instead under CI=true). */
#include "fault_layer.h"
#include "onnxruntime.h"
#include "runtime/model/model.h"
#include "resnet_model.h"
#include "test_data.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECKER "/usr/bin/python3"
#define TOLERANCE 1e-5

static char dir[64];
static const char *root, *ort_dir;
static int have_checker, have_runtime;
static char no_runtime[512];
static uint64_t rng = 0x243f6a8885a308d3ULL;
/* > 0: the model's input takes int32 ids below this (check_agreement's inputs). */
static int32_t ids_below;

static float uniform(float lo, float hi)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)(rng >> 40) / 16777216.0f;
}

static float *random_floats(int64_t n, float lo, float hi)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; x && i < n; i++)
        x[i] = uniform(lo, hi);
    return x;
}

static int64_t product(int rank, const int32_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

/* n samples that differ in more than noise, which pooling would average
 * away: images are ramps of a random slope along H and along W, plus an
 * offset per channel, plus noise; other inputs are noise. */
static float *test_inputs(int rank, const int32_t *dims, int64_t n)
{
    const int64_t size = product(rank, dims);
    float *x = random_floats(n * size, -0.5f, 0.5f);
    for (int64_t s = 0; x && rank == 3 && s < n; s++) {
        const float along_h = uniform(-2, 2), along_w = uniform(-2, 2);
        float offset[64];
        for (int32_t c = 0; c < dims[2] && c < 64; c++)
            offset[c] = uniform(-1, 1);
        for (int32_t h = 0; h < dims[0]; h++)
            for (int32_t w = 0; w < dims[1]; w++)
                for (int32_t c = 0; c < dims[2]; c++)
                    x[s * size + ((int64_t)h * dims[1] + w) * dims[2] + c] +=
                        along_h * ((float)h / (float)dims[0] - 0.5f) +
                        along_w * ((float)w / (float)dims[1] - 0.5f) + offset[c % 64];
    }
    return x;
}

/* Compiles with Adam on sparse labels and, for epochs > 0, trains on
 * `count` random samples. */
static void compile_and_train(kiln_context *ctx, kiln_model *m, int rank, const int32_t *dims,
                              int32_t classes, int64_t count, int epochs)
{
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .kind = KILN_OPTIMIZER_ADAM,
                                         .learning_rate = 0.01f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    if (epochs == 0)
        return;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = rank};
    memcpy(d.feature_dims, dims, (size_t)rank * sizeof *dims);
    float *x = random_floats(count * product(rank, dims), 0.0f, 1.0f);
    int32_t *y = malloc((size_t)count * sizeof *y);
    for (int64_t i = 0; i < count; i++)
        y[i] = (int32_t)(uniform(0.0f, 1.0f) * (float)classes) % classes;
    d.features = x;
    d.sparse_labels = y;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 8;
    fo.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_dataset_destroy(ds);
    free(x);
    free(y);
}

/* Every batch norm's moving mean in [-mean, mean] and variance in
 * [var_lo, var_hi], drawn at random. */
static void set_statistics(kiln_context *ctx, kiln_model *m, float mean, float var_lo,
                           float var_hi)
{
    int32_t n = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &n));
    for (int32_t k = 0; k < n; k++) {
        kiln_parameter_info wi = {.struct_size = sizeof wi};
        CHECK_OK(ctx, kiln_model_tensor_info(m, k, &wi));
        const char *slash = strrchr(wi.name, '/');
        const int is_mean = slash && !strcmp(slash, "/moving_mean");
        if (!is_mean && !(slash && !strcmp(slash, "/moving_variance")))
            continue;
        float *v = is_mean ? random_floats(wi.size, -mean, mean)
                           : random_floats(wi.size, var_lo, var_hi);
        CHECK_OK(ctx, kiln_model_set_tensor(m, wi.name, v, wi.size));
        free(v);
    }
}

static int write_file(const char *path, const float *x, int64_t n)
{
    FILE *f = fopen(path, "wb");
    const int ok = f && fwrite(x, sizeof *x, (size_t)n, f) == (size_t)n;
    return (f && fclose(f) == 0) && ok;
}

/* ONNX's checker on the file, when Debian's python3-onnx is there. */
static void check_file(const char *path)
{
    if (!have_checker)
        return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, CHECKER " -c 'import onnx, sys; onnx.checker.check_model("
             "onnx.load(sys.argv[1]), full_check=True)' '%s'", path);
    const int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "onnx.checker refused %s\n", path);
    CHECK(rc == 0);
}

/* Exports `m`, checks the file and compares ONNX Runtime's outputs on `n`
 * random samples with kiln_model_predict's. */
static void check_agreement(kiln_context *ctx, kiln_model *m, const char *name, int rank,
                            const int32_t *dims, int64_t n)
{
    char path[128], in_path[128], out_path[128], cmd[2048];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    snprintf(in_path, sizeof in_path, "%s/%s.input", dir, name);
    snprintf(out_path, sizeof out_path, "%s/%s.output", dir, name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    check_file(path);
    if (!have_runtime)
        return;
    int64_t out_size = 0;
    CHECK_OK(ctx, kiln_model_output_size(m, &out_size));
    const int64_t in_count = n * product(rank, dims), out_count = n * out_size;
    float *x = test_inputs(rank, dims, n);
    for (int64_t i = 0; ids_below && i < in_count; i++)   /* ids, in the floats' place */
        ((int32_t *)(void *)x)[i] = (int32_t)(uniform(0.0f, 1.0f) * (float)ids_below) %
                                    ids_below;
    float *want = calloc((size_t)out_count, sizeof *want);
    const kiln_batch_arrays batch = {
        .struct_size = sizeof batch, .count = n, .features = ids_below ? NULL : x,
        .int_features = ids_below ? (const int32_t *)(const void *)x : NULL};
    CHECK_OK(ctx, kiln_model_predict(m, &batch, want, 0));
    /* A comparison that can tell: outputs that differ between samples. */
    double spread = 0.0;
    for (int64_t i = out_size; i < out_count; i++)
        spread = fmax(spread, fabs((double)want[i] - want[i % out_size]));
    CHECK(spread > 1e-3);
    CHECK(write_file(in_path, x, in_count));
    int at = snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node "
                      "'%s/test/saving/onnx_run.js' %s'%s' '%s' '%s' %lld", ort_dir, root, ids_below ? "--int32 " : "",
                      path, in_path, out_path, (long long)n);
    for (int d = 0; d < rank; d++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " %d", (int)dims[d]);
    const int rc = system(cmd);
    CHECK(rc == 0);
    size_t bytes = 0;
    float *got = rc == 0 ? (float *)test_read_file(out_path, &bytes) : NULL;
    const int complete = got && bytes == (size_t)out_count * sizeof(float);
    CHECK(complete);
    double worst = 0.0, worst_abs = 0.0;
    for (int64_t i = 0; complete && i < out_count; i++) {
        const double a = got[i], b = want[i], diff = fabs(a - b);
        const double rel = diff / (fabs(b) > 1.0 ? fabs(b) : 1.0);
        if (!(rel <= worst))   /* NaN counts as the worst */
            worst = rel;
        if (diff > worst_abs)
            worst_abs = diff;
    }
    if (complete) {
        printf("%s: %lld outputs of %lld samples (which differ by up to %.3g), max |onnx - "
               "kiln| / max(1, |kiln|) = %.3g (max |onnx - kiln| = %.3g)\n", name,
               (long long)out_count, (long long)n, spread, worst, worst_abs);
        if (!(worst <= TOLERANCE))
            fprintf(stderr, "%s: ONNX Runtime and kiln disagree by %.3g > %g\n", name, worst,
                    TOLERANCE);
        CHECK(worst <= TOLERANCE);
    }
    free(x);
    free(want);
    free(got);
}

/* The same for a model of several inputs (`m` has kiln's internals): each
 * input's values written to a file of its own, fed to its graph input. */
static void check_agreement_inputs(kiln_context *ctx, kiln_model *m, const char *name,
                                   int64_t n)
{
    char path[128], out_path[128], cmd[2048];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    snprintf(out_path, sizeof out_path, "%s/%s.output", dir, name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    check_file(path);
    if (!have_runtime)
        return;
    const int64_t size = m->graph.sample_size, out_size = m->plan.output_size; /* every output's */
    float *x = random_floats(n * size, -1.0f, 1.0f);
    float *want = calloc((size_t)(n * out_size), sizeof *want);
    float *part = malloc((size_t)(n * size) * sizeof *part);
    float *own[KILN_MAX_MODEL_INPUTS] = {NULL};   /* each input's values, for predict */
    kiln_input_array arrays[KILN_MAX_MODEL_INPUTS];
    int at = snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node "
                      "'%s/test/saving/onnx_run.js' --inputs '%s' '%s'", ort_dir, root, path, out_path);
    for (int32_t k = 0; k < m->graph.n_inputs; k++) {
        const kiln_id_range *r = &m->graph.ids[k];
        const kiln_shape *shape = &m->graph.nodes[m->graph.inputs[k]].shape;
        for (int64_t i = 0; i < n; i++)
            for (int64_t p = 0; p < r->size; p++) {
                float *v = x + i * size + r->offset + p;
                if (r->limit > 0)   /* ids, in the floats' place */
                    *(int32_t *)(void *)v = (int32_t)(uniform(0.0f, 1.0f) * (float)r->limit) %
                                            r->limit;
                part[i * r->size + p] = *v;
            }
        char in_path[128];
        snprintf(in_path, sizeof in_path, "%s/%s.input%d", dir, name, (int)k);
        CHECK(write_file(in_path, part, n * r->size));
        own[k] = malloc((size_t)(n * r->size) * sizeof *own[k]);
        memcpy(own[k], part, (size_t)(n * r->size) * sizeof *own[k]);
        arrays[k] = (kiln_input_array){
            .rank = shape->rank, .features = r->limit > 0 ? NULL : own[k],
            .int_features = r->limit > 0 ? (const int32_t *)(const void *)own[k] : NULL};
        memcpy(arrays[k].dims, shape->dims, sizeof arrays[k].dims);
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " %s:'%s':%lld",
                       r->limit > 0 ? "int32" : "float32", in_path, (long long)n);
        for (int d = 0; d < shape->rank; d++)
            at += snprintf(cmd + at, sizeof cmd - (size_t)at, ",%d", (int)shape->dims[d]);
    }
    const kiln_batch_arrays batch = {.struct_size = sizeof batch, .count = n,
                                     .n_inputs = m->graph.n_inputs, .inputs = arrays};
    CHECK_OK(ctx, kiln_model_predict(m, &batch, want, 0));
    for (int32_t k = 0; k < m->graph.n_inputs; k++)
        free(own[k]);
    const int rc = system(cmd);
    CHECK(rc == 0);
    size_t bytes = 0;
    float *got = rc == 0 ? (float *)test_read_file(out_path, &bytes) : NULL;
    const int complete = got && bytes == (size_t)(n * out_size) * sizeof(float);
    CHECK(complete);
    double worst = 0.0, spread = 0.0;
    for (int64_t i = 0; complete && i < n * out_size; i++) {
        const double rel = fabs((double)got[i] - want[i]) / fmax(1.0, fabs((double)want[i]));
        worst = rel <= worst ? worst : rel;   /* NaN counts as the worst */
        spread = fmax(spread, fabs((double)want[i] - want[i % out_size]));
    }
    if (complete)
        printf("%s: %lld outputs of %lld samples (which differ by up to %.3g), max |onnx - "
               "kiln| / max(1, |kiln|) = %.3g\n", name, (long long)(n * out_size),
               (long long)n, spread, worst);
    CHECK(!complete || (worst <= TOLERANCE && spread > 1e-3));
    free(x);
    free(part);
    free(want);
    free(got);
}

/* Input(9, 11, 3) through every layer kind: 'same' convolutions and pools
 * with asymmetric padding and unequal strides, an average pool whose edge
 * windows hold padding, a softmax over channels, Dense on a rank-3 tensor,
 * batch norms on rank 3 and rank 1, Flatten after NCHW work, a three-way
 * Add, a linear Activation layer. */
static void every_layer(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {9, 11, 3};
    kiln_conv2d_options same = {.struct_size = sizeof same, .filters = 8, .kernel_size = {4, 3},
                                .strides = {2, 1}, .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_RELU};
    kiln_conv2d_options point = {.struct_size = sizeof point, .filters = 8,
                                 .kernel_size = {1, 1}, .no_bias = 1,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_conv2d_options strided = {.struct_size = sizeof strided, .filters = 6,
                                   .kernel_size = {2, 2}, .strides = {2, 2}};
    kiln_batch_norm_options bn = {.struct_size = sizeof bn, .momentum = 0.5f};
    kiln_batch_norm_options bn_relu = {.struct_size = sizeof bn_relu, .momentum = 0.5f,
                                       .epsilon = 0.01f, .activation = KILN_ACTIVATION_RELU};
    kiln_pool2d_options max = {.struct_size = sizeof max, .pool_size = {3, 3},
                               .strides = {2, 2}, .padding = KILN_PADDING_SAME};
    kiln_pool2d_options avg_same = {.struct_size = sizeof avg_same, .pool_size = {3, 3},
                                    .strides = {1, 1}, .padding = KILN_PADDING_SAME};
    kiln_pool2d_options avg_valid = {.struct_size = sizeof avg_valid, .pool_size = {2, 2},
                                     .strides = {1, 1}};
    kiln_dense_options wide = {.struct_size = sizeof wide, .units = 5,
                               .activation = KILN_ACTIVATION_SIGMOID};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 6,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "probabilities", .units = 4,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node x = kiln_input(m, 3, dims, &(kiln_input_options){.name = "image"});
    x = kiln_conv2d(m, x, &same);                                   /* (5, 11, 8) */
    x = kiln_batch_normalization(m, x, &bn);
    const kiln_node pooled = kiln_max_pooling2d(m, x, &max);        /* (3, 6, 8) */
    const kiln_node three[] = {kiln_conv2d(m, pooled, &point),
                               kiln_average_pooling2d(m, pooled, &avg_same), pooled};
    x = kiln_activation_layer(m, kiln_add(m, three, 3, NULL), KILN_ACTIVATION_SOFTMAX, NULL);
    x = kiln_dropout(m, x, &(kiln_dropout_options){.rate = 0.25f, .seed = 7});
    x = kiln_dense(m, x, &wide);                                    /* (3, 6, 5) */
    x = kiln_batch_normalization(m, x, &bn_relu);
    const kiln_node global = kiln_activation_layer(
        m, kiln_global_average_pooling2d(m, kiln_conv2d(m, x, &strided), NULL),
        KILN_ACTIVATION_LINEAR, NULL);                              /* (6) */
    x = kiln_flatten(m, kiln_average_pooling2d(m, x, &avg_valid), NULL);    /* (50) */
    x = kiln_batch_normalization(m, kiln_dense(m, x, &hidden), &bn);
    const kiln_node both[] = {global, x};
    kiln_dense(m, kiln_add(m, both, 2, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 4, 48, 3);
    check_agreement(ctx, m, "every_layer", 3, dims, 7);
    kiln_model_destroy(m);
}

/* The layers kiln gained later and the activations ONNX spells as several
 * ops: concatenation along channels and along width of NCHW values and
 * along the first axis of rank-2 ones, layer norm on channels-first work
 * and on rank 2 (without beta), Reshape, GELU (exact and tanh), leaky ReLU
 * and SiLU. */
static void more_layers(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 6, 4}, rows[] = {30, 8};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4, .kernel_size = {3, 3},
                                .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_GELU};
    kiln_layer_norm_options ln = {.struct_size = sizeof ln};
    kiln_layer_norm_options ln_scale = {.struct_size = sizeof ln_scale, .epsilon = 0.05f,
                                        .no_center = 1};
    kiln_dense_options leaky = {.struct_size = sizeof leaky, .units = 6,
                                .activation = KILN_ACTIVATION_LEAKY_RELU};
    kiln_dense_options silu = {.struct_size = sizeof silu, .units = 8,
                               .activation = KILN_ACTIVATION_SILU};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_input(m, 3, dims, NULL);
    const kiln_node c = kiln_conv2d(m, x, &conv);                          /* (5, 6, 4) */
    const kiln_node channels[] = {c, x}, wide[] = {c, c};
    kiln_node y = kiln_concatenate(m, channels, 2, NULL);               /* (5, 6, 8) */
    const kiln_concatenate_options axis1 = {.struct_size = sizeof axis1, .axis = 1};
    const kiln_concatenate_options axis2 = {.struct_size = sizeof axis2, .axis = 2};
    const kiln_node w = kiln_concatenate(m, wide, 2, &axis2);              /* (5, 12, 4) */
    const int32_t order[] = {2, 3, 1};                                      /* (12, 4, 5) */
    y = kiln_activation_layer(m, kiln_layer_normalization(m, y, &ln),
                              KILN_ACTIVATION_GELU_TANH, NULL);
    y = kiln_reshape(m, y, 2, rows, NULL);                                  /* (30, 8) */
    y = kiln_dense(m, y, &leaky);                                           /* (30, 6) */
    const kiln_node pair[] = {kiln_layer_normalization(m, y, &ln_scale), y};
    y = kiln_flatten(m, kiln_concatenate(m, pair, 2, &axis1), NULL);       /* (360) */
    const kiln_node both[] = {kiln_dense(m, y, &silu),
                              kiln_dense(m, kiln_flatten(m, kiln_permute(m, w, 3, order, NULL),
                                                         NULL), &silu)};
    kiln_dense(m, kiln_add(m, both, 2, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    check_agreement(ctx, m, "more_layers", 3, dims, 5);
    kiln_model_destroy(m);
}

/* The layers and activations the importer brought: ZeroPadding2D
 * (asymmetric), leaky_relu of its own (negative) slope, GlobalMaxPooling2D
 * of an NCHW value (GlobalMaxPool) and of an NHWC one (ReduceMax), and
 * log_softmax over channels; trained a little. */
static void importer_layers(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 5, 3};
    const kiln_zero_padding2d_options pad = {.struct_size = sizeof pad,
                                             .padding = {1, 0, 2, 1}};
    const kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4,
                                      .kernel_size = {3, 3}};
    const kiln_activation_layer_options leaky = {.struct_size = sizeof leaky,
                                                 .negative_slope = -0.1f};
    /* Scaled (ONNX Gemm's alpha and beta): on 3-D values the export's
     * MatMul, Mul and Add; on vectors a Gemm with the two attributes. */
    const kiln_dense_options mix = {.struct_size = sizeof mix, .units = 5, .alpha = 0.7f,
                                    .beta = -1.5f};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX, .alpha = 1.25f,
                                     .beta = 0.5f};
    kiln_node x = kiln_zero_padding2d(m, kiln_input(m, 3, dims, NULL), &pad);   /* (7, 8, 3) */
    x = kiln_activation_layer(m, kiln_conv2d(m, x, &conv), KILN_ACTIVATION_LEAKY_RELU,
                              &leaky);                                          /* (5, 6, 4) */
    const kiln_node mixed = kiln_activation_layer(m, kiln_dense(m, x, &mix),
                                                  KILN_ACTIVATION_LOG_SOFTMAX, NULL);
    const kiln_node both[] = {kiln_global_max_pooling2d(m, x, NULL),           /* (4) */
                              kiln_global_max_pooling2d(m, mixed, NULL)};      /* (5) */
    kiln_dense(m, kiln_concatenate(m, both, 2, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    check_agreement(ctx, m, "importer_layers", 3, dims, 5);
    kiln_model_destroy(m);
}

/* The reductions and softmax along any axis: ReduceMax over H and W,
 * ReduceSum over the channels kept (its axes an input), softmax over H
 * then ReduceMean over everything (to (1): an Unsqueeze), log softmax from
 * W through the channels (a Reshape around it) then ReduceMin over W;
 * trained a little. */
static void reductions(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 5, 3}, hw[] = {1, 2}, last[] = {-1}, all[] = {1, 2, 3},
                  w[] = {2};
    const kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4,
                                      .kernel_size = {3, 3}, .padding = KILN_PADDING_SAME};
    const kiln_reduce_options keep = {.struct_size = sizeof keep, .keepdims = 1};
    const kiln_softmax_options over_h = {.struct_size = sizeof over_h, .axis = 1};
    const kiln_softmax_options through = {.struct_size = sizeof through, .axis = 2,
                                          .through_last = 1, .log = 1};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node c = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &conv);   /* (6, 5, 4) */
    const kiln_node parts[] = {
        kiln_reduce(m, c, KILN_REDUCE_MAX, 2, hw, NULL),                         /* (4) */
        kiln_flatten(m, kiln_reduce(m, c, KILN_REDUCE_SUM, 1, last, &keep), NULL), /* (30) */
        kiln_reduce(m, kiln_softmax(m, c, &over_h), KILN_REDUCE_MEAN, 3, all, NULL), /* (1) */
        kiln_flatten(m, kiln_reduce(m, kiln_softmax(m, c, &through), KILN_REDUCE_MIN, 1, w,
                                    NULL), NULL),                               /* (24) */
    };
    kiln_dense(m, kiln_concatenate(m, parts, 4, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    check_agreement(ctx, m, "reductions", 3, dims, 5);
    kiln_model_destroy(m);
}

/* The binary kind's ops as they export: a squeeze-and-excitation scale
 * (an image times its (C) means), a trained layer scale, constants on
 * either side (1.5 - x, x / 2), Max and Min of two computed values, and a
 * (T, D) + (D) broadcast; trained a little. */
static void binary_layers(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 6, 4}, rows[] = {30, 4};
    const kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4,
                                      .kernel_size = {3, 3}, .padding = KILN_PADDING_SAME,
                                      .activation = KILN_ACTIVATION_TANH};
    const kiln_binary_options mul = {.struct_size = sizeof mul, .op = KILN_BINARY_MULTIPLY};
    const kiln_binary_options scale = {.struct_size = sizeof scale, .op = KILN_BINARY_MULTIPLY,
                                       .param_rank = 3, .param_dims = {1, 1, 4},
                                       .param_value = 0.5f};
    const kiln_binary_options from = {.struct_size = sizeof from, .op = KILN_BINARY_SUBTRACT,
                                      .param_rank = 1, .param_dims = {1}, .param_first = 1,
                                      .param_constant = 1, .param_value = 1.5f};
    const kiln_binary_options half = {.struct_size = sizeof half, .op = KILN_BINARY_DIVIDE,
                                      .param_rank = 1, .param_dims = {1},
                                      .param_constant = 1, .param_value = 2.0f};
    const kiln_binary_options max = {.struct_size = sizeof max, .op = KILN_BINARY_MAXIMUM};
    const kiln_binary_options min = {.struct_size = sizeof min, .op = KILN_BINARY_MINIMUM};
    const kiln_binary_options add = {.struct_size = sizeof add};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &conv);
    kiln_node y = kiln_binary(m, x, kiln_global_average_pooling2d(m, x, NULL), &mul);
    y = kiln_binary_param(m, y, &scale);
    const kiln_node a = kiln_binary_param(m, y, &from), b = kiln_binary_param(m, x, &half);
    y = kiln_binary(m, kiln_binary(m, a, b, &max), kiln_binary(m, b, y, &min), &max);
    y = kiln_reshape(m, y, 2, rows, NULL);
    const kiln_node pooled = kiln_global_average_pooling2d(m, x, NULL);   /* (4) */
    y = kiln_binary(m, y, pooled, &add);                                  /* (30, 4) + (4) */
    kiln_dense(m, kiln_flatten(m, y, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    check_agreement(ctx, m, "binary_layers", 3, dims, 5);
    kiln_model_destroy(m);
}

/* LoRA (kiln_model_enable_lora): the export holds the merged kernel
 * W + (alpha/r)·A·B, and ONNX Runtime predicts as the unmerged model does;
 * on a Dense over rows (MatMul), on the softmax head, and on a Dense of
 * the file imported again (a Gemm, found by its kind and named as its node);
 * then on attention layers (attention_model). */
static void attention_model(kiln_context *ctx, int lora);

static void lora(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 6};
    const kiln_dense_options rows = {.struct_size = sizeof rows, .name = "rows", .units = 5,
                                     .activation = KILN_ACTIVATION_RELU};
    /* head scaled as ONNX Gemm's alpha and beta: the merged kernel keeps
     * the adapters' term under alpha. */
    const kiln_dense_options head = {.struct_size = sizeof head, .name = "head", .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX, .alpha = 0.75f,
                                     .beta = 2.0f};
    kiln_node x = kiln_dense(m, kiln_input(m, 2, dims, NULL), &rows);
    kiln_dense(m, kiln_flatten(m, x, NULL), &head);
    CHECK_OK(ctx, kiln_model_enable_lora(m, "rows", 3, 0.0f));
    CHECK_OK(ctx, kiln_model_enable_lora(m, "head", 2, 8.0f));
    compile_and_train(ctx, m, 2, dims, 3, 48, 3);
    check_agreement(ctx, m, "lora", 2, dims, 5);
    kiln_model_destroy(m);

    char path[128];
    snprintf(path, sizeof path, "%s/lora.onnx", dir);
    kiln_model *imported = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &imported));
    if (!imported)
        return;
    int32_t n = 0, found = 0;
    CHECK_OK(ctx, kiln_model_layer_count(imported, &n));
    for (int32_t i = 0; i < n; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_layer_info(imported, i, &info));
        if (strcmp(info.kind, "dense") == 0 && info.rank == 1) {
            CHECK_OK(ctx, kiln_model_enable_lora(imported, info.name, 2, 0.0f));
            found++;
        }
    }
    CHECK(found == 1);
    compile_and_train(ctx, imported, 2, dims, 3, 48, 3);
    check_agreement(ctx, imported, "lora_imported", 2, dims, 5);
    /* Its model file names the imported weights, the adapters merged away
     * (and kept apart with keep_lora_adapters): both load. */
    for (int keep = 0; keep < 2; keep++) {
        const kiln_save_options so = {.struct_size = sizeof so, .keep_lora_adapters = keep};
        snprintf(path, sizeof path, "%s/lora_imported.kiln", dir);
        CHECK_OK(ctx, kiln_model_save_with(imported, path, &so));
        kiln_model *again = NULL;
        CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &again));
        int32_t before = 0, after = 0;
        CHECK_OK(ctx, kiln_model_tensor_count(imported, &before));
        if (again)
            CHECK_OK(ctx, kiln_model_tensor_count(again, &after));
        CHECK(after == (keep ? before : before - 2));
        kiln_model_destroy(again);
        remove(path);
    }
    kiln_model_destroy(imported);
    attention_model(ctx, 1);
}

/* kiln_math's ops as ONNX's (Sqrt ... Clip with either bound or none,
 * HardSigmoid of its own alpha and beta), hard_sigmoid fused into a Conv
 * (HardSigmoid 1/6, 0.5) and hard_silu (x HardSigmoid(x): opset 13 has no
 * HardSwish); trained a little. */
static void math_layers(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 4, 3};
    const kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 4,
                                      .kernel_size = {2, 2},
                                      .activation = KILN_ACTIVATION_HARD_SIGMOID};
    const kiln_conv2d_options plain = {.struct_size = sizeof plain, .filters = 4,
                                       .kernel_size = {2, 2}};
    const kiln_math_options pow3 = {.struct_size = sizeof pow3, .exponent = 3};
    const kiln_math_options root = {.struct_size = sizeof root, .exponent = 0.5f};
    const kiln_math_options hard = {.struct_size = sizeof hard, .alpha = -0.4f, .beta = 0.3f};
    const kiln_math_options both = {.struct_size = sizeof both, .has_min = 1, .min = -0.2f,
                                    .has_max = 1, .max = 0.3f};
    const kiln_math_options below = {.struct_size = sizeof below, .has_max = 1, .max = 0.1f};
    const kiln_math_options above = {.struct_size = sizeof above, .has_min = 1, .min = -0.1f};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node in = kiln_input(m, 3, dims, NULL);
    const kiln_node h = kiln_conv2d(m, in, &plain);                          /* (4, 3, 4) */
    const kiln_node e = kiln_math(m, h, KILN_MATH_EXP, NULL);
    const kiln_node first[8] = {
        kiln_conv2d(m, in, &conv),
        kiln_math(m, kiln_math(m, e, KILN_MATH_SQRT, NULL), KILN_MATH_LOG, NULL),
        kiln_math(m, e, KILN_MATH_RECIPROCAL, NULL),
        kiln_math(m, kiln_math(m, h, KILN_MATH_ABS, NULL), KILN_MATH_NEG, NULL),
        kiln_math(m, h, KILN_MATH_ERF, NULL),
        kiln_math(m, h, KILN_MATH_POW, &pow3),
        kiln_math(m, e, KILN_MATH_POW, &root),
        kiln_activation_layer(m, h, KILN_ACTIVATION_HARD_SWISH, NULL),
    };
    const kiln_node second[5] = {
        kiln_add(m, first, 8, NULL),
        kiln_math(m, h, KILN_MATH_HARD_SIGMOID, &hard),
        kiln_math(m, h, KILN_MATH_CLIP, &both),
        kiln_math(m, h, KILN_MATH_CLIP, &below),
        kiln_math(m, kiln_math(m, h, KILN_MATH_CLIP, &above), KILN_MATH_CLIP, NULL),
    };
    kiln_dense(m, kiln_flatten(m, kiln_add(m, second, 5, NULL), NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    check_agreement(ctx, m, "math_layers", 3, dims, 5);
    kiln_model_destroy(m);
}

/* PyTorch's window attributes as ONNX writes them: a grouped, dilated Conv
 * with asymmetric pads and ReLU6 (Clip), a depthwise one at stride 2,
 * AveragePool counting its padding, MaxPool and AveragePool with
 * ceil_mode adding a window past the input; trained a little. */
static void pytorch_windows(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {15, 14, 4};
    kiln_conv2d_options grouped = {.struct_size = sizeof grouped, .filters = 6,
                                   .kernel_size = {3, 3}, .padding = KILN_PADDING_EXPLICIT,
                                   .pads = {2, 1, 0, 1}, .dilations = {2, 2}, .groups = 2,
                                   .activation = KILN_ACTIVATION_RELU6};
    kiln_conv2d_options depthwise = {.struct_size = sizeof depthwise, .filters = 6,
                                     .kernel_size = {3, 3}, .strides = {2, 2},
                                     .padding = KILN_PADDING_EXPLICIT, .pads = {1, 1, 1, 0},
                                     .groups = 6, .activation = KILN_ACTIVATION_RELU6};
    kiln_pool2d_options counted = {.struct_size = sizeof counted, .pool_size = {3, 3},
                                   .strides = {1, 1}, .padding = KILN_PADDING_EXPLICIT,
                                   .pads = {1, 1, 1, 1}, .count_include_pad = 1};
    kiln_pool2d_options max = {.struct_size = sizeof max, .pool_size = {3, 3},
                               .strides = {2, 2}, .padding = KILN_PADDING_EXPLICIT,
                               .pads = {1, 0, 0, 1}, .ceil_mode = 1};
    kiln_pool2d_options avg = {.struct_size = sizeof avg, .pool_size = {2, 2}, .ceil_mode = 1};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_node x = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &grouped);  /* (13, 12, 6) */
    x = kiln_conv2d(m, x, &depthwise);                                      /* (7, 6, 6) */
    x = kiln_average_pooling2d(m, x, &counted);                             /* (7, 6, 6) */
    x = kiln_max_pooling2d(m, x, &max);                                     /* (4, 3, 6) */
    x = kiln_average_pooling2d(m, x, &avg);                                 /* (2, 2, 6) */
    kiln_dense(m, kiln_flatten(m, x, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    kiln_layer_info li = {.struct_size = sizeof li};
    CHECK_OK(ctx, kiln_model_layer_info(m, 5, &li));
    CHECK(li.rank == 3 && li.dims[0] == 2 && li.dims[1] == 2 && li.dims[2] == 6);
    check_agreement(ctx, m, "pytorch_windows", 3, dims, 5);
    kiln_model_destroy(m);
}

/* MultiHeadAttention: causal cross-attention from a Dense projection over
 * a Reshape of the input (Tq 6, Tv 10, other widths, value_dim and
 * output_shape of its own), then self-attention without biases on its
 * output; trained a little. With `lora`, LoRA on both attention layers,
 * one on the default query and value, the other on all four projections
 * (kiln_model_enable_lora_with): the export holds the merged kernels. */
static void attention_model(kiln_context *ctx, int lora)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 5}, rows[] = {10, 3};
    kiln_dense_options proj = {.struct_size = sizeof proj, .units = 8,
                               .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_multi_head_attention_options cross = {
        .struct_size = sizeof cross, .num_heads = 2, .key_dim = 3, .value_dim = 4,
        .output_shape = 7, .use_causal_mask = 1, .dropout = 0.1f};
    const kiln_multi_head_attention_options self = {.struct_size = sizeof self,
                                                    .num_heads = 3, .key_dim = 2, .no_bias = 1};
    const kiln_node x = kiln_input(m, 2, dims, NULL);
    const kiln_node q = kiln_dense(m, x, &proj);                             /* (6, 8) */
    const kiln_node c = kiln_multi_head_attention(m, q, kiln_reshape(m, x, 2, rows, NULL),
                                                  &cross);                    /* (6, 7) */
    const kiln_node a = kiln_multi_head_attention(m, c, c, &self);           /* (6, 7) */
    kiln_dense(m, kiln_flatten(m, a, NULL), &head);
    if (lora) {
        int32_t n = 0;
        CHECK_OK(ctx, kiln_model_layer_count(m, &n));
        for (int32_t i = 0; i < n; i++) {
            kiln_layer_info info = {.struct_size = sizeof info};
            CHECK_OK(ctx, kiln_model_layer_info(m, i, &info));
            const kiln_lora_options all = {.struct_size = sizeof all, .rank = 2,
                                           .targets = "query,key,value,attention_output"};
            if (strcmp(info.kind, "multi_head_attention") == 0 && i % 2)
                CHECK_OK(ctx, kiln_model_enable_lora(m, info.name, 2, 6.0f));
            else if (strcmp(info.kind, "multi_head_attention") == 0)
                CHECK_OK(ctx, kiln_model_enable_lora_with(m, info.name, &all));
        }
    }
    compile_and_train(ctx, m, 2, dims, 3, 32, 2);
    check_agreement(ctx, m, lora ? "lora_attention" : "attention", 2, dims, 5);
    kiln_model_destroy(m);
}

static void attention(kiln_context *ctx)
{
    attention_model(ctx, 0);
}

/* Padding masks (ReLU of a first feature: > 0 is padding): a causal
 * cross-attention over 2 value positions, a Reshape of the input, whose
 * mask pads some of the 16 samples whole (their rows see nothing: 0 in
 * kiln, and in the export's Softmax times its keep), then self-attention
 * under a mask of its own; trained a little. */
static void padded_attention(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 5}, rows[] = {2, 15}, two[] = {2}, six[] = {6};
    kiln_dense_options proj = {.struct_size = sizeof proj, .units = 8,
                               .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_multi_head_attention_options cross = {
        .struct_size = sizeof cross, .num_heads = 2, .key_dim = 3, .value_dim = 4,
        .use_causal_mask = 1};
    const kiln_multi_head_attention_options self = {.struct_size = sizeof self,
                                                    .num_heads = 2, .key_dim = 4};
    const kiln_slice_options first = {.struct_size = sizeof first, .size = {0, 1}};
    const kiln_node x = kiln_input(m, 2, dims, NULL);
    const kiln_node v = kiln_reshape(m, x, 2, rows, NULL);                  /* (2, 15) */
    const kiln_node pad_v = kiln_reshape(m, kiln_activation_layer(m, kiln_slice(m, v, &first),
                                                                  KILN_ACTIVATION_RELU, NULL),
                                         1, two, NULL);
    const kiln_node pad_x = kiln_reshape(m, kiln_activation_layer(m, kiln_slice(m, x, &first),
                                                                  KILN_ACTIVATION_RELU, NULL),
                                         1, six, NULL);
    const kiln_node c = kiln_multi_head_attention_masked(m, kiln_dense(m, x, &proj), v, pad_v,
                                                         &cross);             /* (6, 8) */
    const kiln_node a = kiln_multi_head_attention_masked(m, c, c, pad_x, &self);
    kiln_dense(m, kiln_flatten(m, a, NULL), &head);
    compile_and_train(ctx, m, 2, dims, 3, 32, 2);
    check_agreement(ctx, m, "padded_attention", 2, dims, 16);
    kiln_model_destroy(m);
}

/* MatMul of computed values: attention's scores and weighted sum by
 * hand (a 3-D value a sample, which ONNX must read in kiln's order), and
 * a product broadcast over the leading axis; Slice and Expand of it. */
static void matmuls(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {2, 3, 4}, shared[] = {1, 4, 2}, swap[] = {1, 3, 2};
    kiln_dense_options proj = {.struct_size = sizeof proj, .units = 4,
                               .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options eight = {.struct_size = sizeof eight, .units = 8};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_input(m, 3, dims, NULL);
    const kiln_node q = kiln_dense(m, x, &proj);                              /* (2, 3, 4) */
    const kiln_node scores = kiln_matmul(m, q, kiln_permute(m, x, 3, swap, NULL), NULL);
    const kiln_node context = kiln_matmul(m, scores, x, NULL);              /* (2, 3, 4) */
    const kiln_node w = kiln_reshape(m, kiln_dense(m, kiln_flatten(m, x, NULL), &eight), 3,
                                     shared, NULL);                           /* (1, 4, 2) */
    const kiln_node both = kiln_matmul(m, context, w, NULL);                /* (2, 3, 2) */
    /* Slices stepping down to index 0 and by 2, one index, an expand. */
    const kiln_slice_options down = {.struct_size = sizeof down, .begin = {1, 2, 1},
                                     .step = {-1, -1, 2}};                  /* (2, 3, 1) */
    const kiln_slice_options token = {.struct_size = sizeof token, .begin = {1, 0, 0},
                                      .size = {1, 1, 0}};                     /* (1, 1, 2) */
    const int32_t cube[] = {2, 3, 2};
    const kiln_node parts[] = {kiln_flatten(m, both, NULL),
                               kiln_flatten(m, kiln_slice(m, both, &down), NULL),
                               kiln_flatten(m, kiln_expand(m, kiln_slice(m, both, &token), 3,
                                                           cube, NULL), NULL)};
    kiln_dense(m, kiln_concatenate(m, parts, 3, NULL), &head);
    compile_and_train(ctx, m, 3, dims, 3, 32, 2);
    check_agreement(ctx, m, "matmuls", 3, dims, 5);
    kiln_model_destroy(m);
}

/* A learned class token prepended to the tokens (ViT's): exported as an
 * initializer and an Expand of it to Shape(x)[0:1], run in ONNX Runtime,
 * then imported back into a LearnedTokens layer whose parameter keeps the
 * initializer's name and values, and which predicts the same. */
static void class_token(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 6}, token[] = {1, 5};
    const kiln_dense_options rows = {.struct_size = sizeof rows, .units = 5,
                                     .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_node x = kiln_dense(m, kiln_input(m, 2, dims, NULL), &rows);   /* (4, 5) */
    const kiln_learned_tokens_options to = {.struct_size = sizeof to, .name = "cls"};
    const kiln_node both[] = {kiln_learned_tokens(m, x, 2, token, &to), x};
    const kiln_concatenate_options axis1 = {.struct_size = sizeof axis1, .axis = 1};
    kiln_dense(m, kiln_flatten(m, kiln_concatenate(m, both, 2, &axis1), NULL), &head);
    compile_and_train(ctx, m, 2, dims, 3, 48, 3);
    float trained[5] = {0}, back[5] = {0};
    CHECK_OK(ctx, kiln_model_get_tensor(m, "cls/tokens", trained, 5));
    CHECK(fabs(trained[0]) + fabs(trained[4]) > 1e-6);   /* it trained away from zeros */
    check_agreement(ctx, m, "class_token", 2, dims, 5);

    char path[128];
    snprintf(path, sizeof path, "%s/class_token.onnx", dir);
    kiln_model *imported = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &imported));
    if (!imported) {
        kiln_model_destroy(m);
        return;
    }
    int32_t n = 0, found = 0;
    CHECK_OK(ctx, kiln_model_layer_count(imported, &n));
    for (int32_t i = 0; i < n; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_layer_info(imported, i, &info));
        found += strcmp(info.kind, "learned_tokens") == 0;
    }
    CHECK(found == 1);
    compile_and_train(ctx, imported, 2, dims, 3, 0, 0);
    CHECK_OK(ctx, kiln_model_get_tensor(imported, "cls/tokens", back, 5));
    CHECK(memcmp(trained, back, sizeof back) == 0);
    check_agreement(ctx, imported, "class_token_imported", 2, dims, 5);
    kiln_model_destroy(imported);
    kiln_model_destroy(m);
}

/* Ids (an int32 graph input): Embedding as Gather, PositionEmbedding as
 * Add of the whole table and, shorter than max_length, of a Slice of it. */
static void ids(kiln_context *ctx)
{
    for (int sliced = 0; sliced < 2; sliced++) {
        kiln_model *m = NULL;
        CHECK_OK(ctx, kiln_model_create(ctx, &m));
        const int32_t dims[] = {7};
        kiln_input_ints(m, 1, dims, &(kiln_input_options){.name = "tokens"});
        const kiln_embedding_options eo = {.struct_size = sizeof eo, .input_dim = 19,
                                           .output_dim = 6};
        const kiln_position_embedding_options po = {.struct_size = sizeof po,
                                                    .max_length = sliced ? 10 : 7};
        const kiln_dense_options d = {.struct_size = sizeof d, .units = 3,
                                      .activation = KILN_ACTIVATION_SOFTMAX};
        kiln_embedding(m, KILN_NODE_PREVIOUS, &eo);
        kiln_position_embedding(m, KILN_NODE_PREVIOUS, &po);
        kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
        compile_and_train(ctx, m, 1, dims, 3, 0, 0);
        /* Rows far apart, so that outputs differ between samples. */
        float *table = random_floats(19 * 6, -1.0f, 1.0f);
        CHECK_OK(ctx, kiln_model_set_tensor(m, "embedding/embeddings", table, 19 * 6));
        free(table);
        ids_below = 19;
        check_agreement(ctx, m, sliced ? "ids_sliced" : "ids", 1, dims, 13);
        ids_below = 0;
        kiln_model_destroy(m);
    }
}

/* Three graph inputs in the model's input order: item and user ids
 * through Embeddings, floats through a Dense, concatenated; two towers
 * meeting in a Dot; two graph outputs. */
static void several_inputs(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t one[] = {1}, two[] = {2}, side[] = {3};
    const kiln_embedding_options ie = {.struct_size = sizeof ie, .input_dim = 7,
                                       .output_dim = 4};
    const kiln_embedding_options ue = {.struct_size = sizeof ue, .input_dim = 13,
                                       .output_dim = 3};
    const kiln_dense_options sd = {.struct_size = sizeof sd, .units = 4,
                                   .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_input_options item_name = {.struct_size = sizeof item_name, .name = "item"};
    const kiln_input_options user_name = {.struct_size = sizeof user_name, .name = "user"};
    const kiln_input_options side_name = {.struct_size = sizeof side_name, .name = "side"};
    const kiln_node item = kiln_flatten(m, kiln_embedding(m, kiln_input_ints(m, 1, one,
                                                                             &item_name),
                                                          &ie), NULL);
    const kiln_node user = kiln_flatten(m, kiln_embedding(m, kiln_input_ints(m, 1, two,
                                                                             &user_name),
                                                          &ue), NULL);
    const kiln_node all[] = {item, user, kiln_dense(m, kiln_input(m, 1, side, &side_name), &sd)};
    kiln_dense(m, kiln_concatenate(m, all, 3, NULL), &head);
    compile_and_train(ctx, m, 1, one, 3, 0, 0);
    /* Rows far apart, so that outputs differ between samples. */
    float *table = random_floats(13 * 3, -1.0f, 1.0f);
    CHECK_OK(ctx, kiln_model_set_tensor(m, "embedding_1/embeddings", table, 13 * 3));
    free(table);
    if (m->plan.compiled)
        check_agreement_inputs(ctx, m, "several_inputs", 11);
    kiln_model_destroy(m);

    /* Two towers meeting in a Dot: Mul and ReduceSum. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_embedding_options te = {.struct_size = sizeof te, .input_dim = 13,
                                       .output_dim = 5};
    const kiln_node u = kiln_flatten(m, kiln_embedding(m, kiln_input_ints(m, 1, one,
                                                                          &user_name),
                                                       &te), NULL);
    const kiln_dense_options vd = {.struct_size = sizeof vd, .units = 5};
    const kiln_node v = kiln_dense(m, kiln_input(m, 1, side,
                                                 &(kiln_input_options){.name = "features"}), &vd);
    kiln_dot(m, u, v, &(kiln_dot_options){.name = "score"});
    const kiln_compile_options mse = {.struct_size = sizeof mse,
                                      .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &mse));
    float *users = random_floats(13 * 5, -1.0f, 1.0f);
    CHECK_OK(ctx, kiln_model_set_tensor(m, "embedding/embeddings", users, 13 * 5));
    free(users);
    if (m->plan.compiled)
        check_agreement_inputs(ctx, m, "dot", 11);
    kiln_model_destroy(m);

    /* Several outputs, the graph's in the model's order: a softmax head
     * (whose softmax kiln fuses with its loss in training) and a sigmoid
     * one on a shared trunk, with two inputs. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_node a = kiln_input(m, 1, side, &(kiln_input_options){.name = "a"});
    const kiln_node b = kiln_input(m, 1, two, &(kiln_input_options){.name = "b"});
    const kiln_node ab[] = {a, b};
    const kiln_dense_options trunk = {.struct_size = sizeof trunk, .units = 6,
                                      .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options sig = {.struct_size = sizeof sig, .name = "flag", .units = 2,
                                    .activation = KILN_ACTIVATION_SIGMOID};
    const kiln_node h = kiln_dense(m, kiln_concatenate(m, ab, 2, NULL), &trunk);
    const kiln_node heads[] = {kiln_dense(m, h, &head), kiln_dense(m, h, &sig)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    const kiln_output_loss losses[] = {{.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
                                       {.loss = KILN_LOSS_BINARY_CROSSENTROPY, .weight = 0.5f}};
    const kiln_compile_options two_losses = {.struct_size = sizeof two_losses, .n_outputs = 2,
                                             .outputs = losses};
    CHECK_OK(ctx, kiln_model_compile(m, &two_losses));
    if (m->plan.compiled)
        check_agreement_inputs(ctx, m, "several_outputs", 11);
    kiln_model_destroy(m);
}

/* A decoder of transposed convolutions, ending in one: PyTorch's
 * upsampling (padding 1, output_padding 1), Keras's 'same' with
 * output_padding on one axis (written as ONNX's pads that crop after,
 * not before), grouped; Keras's 'valid' with a kernel narrower than its
 * stride, dilated on the other axis (its rows past the full output as
 * ONNX's output_padding); output_padding at the stride but below the
 * dilation, as PyTorch allows (a Pad and an Add); trained a little towards
 * random images. */
static void decoder(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4, 3, 4};
    const kiln_conv2d_transpose_options torch = {
        .struct_size = sizeof torch, .filters = 6, .kernel_size = {3, 3}, .strides = {2, 2},
        .padding = KILN_PADDING_EXPLICIT, .pads = {1, 1, 1, 1}, .output_padding = {1, 1},
        .no_bias = 1, .activation = KILN_ACTIVATION_RELU};
    const kiln_conv2d_transpose_options keras = {
        .struct_size = sizeof keras, .filters = 4, .kernel_size = {3, 3}, .strides = {2, 2},
        .padding = KILN_PADDING_SAME, .output_padding = {1, 0}, .groups = 2,
        .activation = KILN_ACTIVATION_TANH};
    const kiln_conv2d_transpose_options narrow = {
        .struct_size = sizeof narrow, .filters = 3, .kernel_size = {1, 2}, .strides = {2, 2},
        .dilations = {1, 2}, .activation = KILN_ACTIVATION_TANH};
    const kiln_conv2d_transpose_options past = {
        .struct_size = sizeof past, .filters = 2, .kernel_size = {2, 2},
        .padding = KILN_PADDING_EXPLICIT, .pads = {0, 1, 0, 0}, .output_padding = {1, 0},
        .dilations = {2, 1}, .activation = KILN_ACTIVATION_SIGMOID};
    kiln_node x = kiln_input(m, 3, dims, NULL);
    x = kiln_conv2d_transpose(m, x, &torch);                       /* (8, 6, 6) */
    x = kiln_conv2d_transpose(m, x, &keras);                       /* (16, 12, 4) */
    x = kiln_conv2d_transpose(m, x, &narrow);                      /* (32, 25, 3) */
    x = kiln_conv2d_transpose(m, x, &past);                        /* (35, 25, 2) */
    kiln_layer_info li = {.struct_size = sizeof li};
    CHECK_OK(ctx, kiln_model_layer_info(m, x, &li));
    CHECK(li.rank == 3 && li.dims[0] == 35 && li.dims[1] == 25 && li.dims[2] == 2);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .kind = KILN_OPTIMIZER_ADAM,
                                         .learning_rate = 0.01f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int64_t count = 16, in = product(3, dims), out = 35 * 25 * 2;
    float *images = random_floats(count * in, -1.0f, 1.0f);
    float *targets = random_floats(count * out, 0.0f, 1.0f);
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 3,
                          .feature_dims = {4, 3, 4}, .features = images,
                          .label_kind = KILN_LABELS_DENSE, .label_size = (int32_t)out,
                          .dense_labels = targets};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 2, .batch_size = 4,
                                 .verbosity = KILN_VERBOSE_SILENT};
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_dataset_destroy(ds);
    free(images);
    free(targets);
    check_agreement(ctx, m, "decoder", 3, dims, 4);
    kiln_model_destroy(m);
}

/* Ends in a convolution (NCHW inside) behind a dropout, with a layer off
 * the output's path; untrained. */
static void conv_output(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {5, 7, 2};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 3, .kernel_size = {3, 3},
                                .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_SIGMOID};
    kiln_dense_options unused = {.struct_size = sizeof unused, .units = 2};
    const kiln_node x = kiln_conv2d(m, kiln_input(m, 3, dims, NULL), &conv);
    const kiln_node out = kiln_dropout(m, x, &(kiln_dropout_options){.name = "last",
                                                                    .rate = 0.5f, .seed = 1});
    kiln_dense(m, x, &unused);
    CHECK_OK(ctx, kiln_model_set_output(m, out));
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    check_agreement(ctx, m, "conv_output", 3, dims, 3);
    kiln_model_destroy(m);
}

static int folder_holds_only(const char *folder, const char *name)
{
    DIR *d = opendir(folder);
    int others = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, name);
    if (d)
        closedir(d);
    return d && !others;
}

static void errors(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {4};
    kiln_dense_options dense = {.struct_size = sizeof dense, .units = 3};
    kiln_dense(m, kiln_input(m, 1, dims, NULL), &dense);
    char path[128];
    snprintf(path, sizeof path, "%s/errors/model.onnx", dir);
    CHECK(kiln_model_export_onnx(NULL, path) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "compile the model first",
                kiln_model_export_onnx(m, path));
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "path is NULL",
                kiln_model_export_onnx(m, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "path is empty",
                kiln_model_export_onnx(m, ""));
    /* The folder does not exist yet. */
    CHECK_FAILS(ctx, KILN_ERROR_IO, path, kiln_model_export_onnx(m, path));
    /* Written over an existing file, with no temporary file left beside. */
    char folder[128];
    snprintf(folder, sizeof folder, "%s/errors", dir);
    CHECK(mkdir(folder, 0755) == 0);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("old", f) >= 0 && fclose(f) == 0);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    size_t size = 0;
    unsigned char *bytes = test_read_file(path, &size);
    CHECK(size > 3 && bytes[0] == 0x08);   /* field 1 (ir_version), a varint */
    free(bytes);
    CHECK(folder_holds_only(folder, "model.onnx"));
    check_file(path);
    /* A read-only folder: the old file stays (root may write anyway). */
    if (geteuid() != 0) {
        CHECK(chmod(folder, 0555) == 0);
        CHECK_FAILS(ctx, KILN_ERROR_IO, "model.onnx", kiln_model_export_onnx(m, path));
        CHECK(chmod(folder, 0755) == 0);
        bytes = test_read_file(path, &size);
        CHECK(size > 3 && bytes[0] == 0x08);
        free(bytes);
    }
    kiln_model_destroy(m);

    /* A layer kind with no ONNX form, named. */
    fault_plan plan;
    memset(&plan, 0, sizeof plan);
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_node x = fault_layer(m, kiln_input(m, 1, dims, NULL), &plan);
    kiln_dense(m, x, &dense);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_FAILS(ctx, KILN_ERROR_UNSUPPORTED, "layer 'fault' (fault) has no ONNX form",
                kiln_model_export_onnx(m, path));
    kiln_model_destroy(m);
}

int main(void)
{
    root = getenv("KILN_SOURCE_ROOT");
    ort_dir = getenv("KILN_ONNXRUNTIME_DIR");
    if (!root || !ort_dir)
        SKIP("run through meson test (KILN_SOURCE_ROOT and KILN_ONNXRUNTIME_DIR unset)");
    kiln_context *ctx = test_context(42);
    if (!ctx)
        return 1;
    snprintf(dir, sizeof dir, "/tmp/kiln-onnx-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    kiln_model *probe = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &probe));
    if (kiln_model_export_onnx(probe, "unused.onnx") == KILN_ERROR_UNSUPPORTED) {
        printf("%s\n", kiln_context_last_error(ctx));
        SKIP_MISSING("kiln was built without the onnx feature");
    }
    kiln_model_destroy(probe);
    have_checker = system(CHECKER " -c 'import onnx' 2> /dev/null") == 0;
    if (!have_checker)
        test_missing_part(CHECKER " cannot import onnx (Debian: python3-onnx); the files are "
                          "not checked by ONNX's checker");
    errors(ctx);
    have_runtime = test_onnxruntime_ready(root, ort_dir, no_runtime, sizeof no_runtime);

    /* The seed CNN, a little trained. */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    const int32_t mnist[] = {28, 28, 1};
    compile_and_train(ctx, m, 3, mnist, 10, 64, 2);
    check_agreement(ctx, m, "seed_cnn", 3, mnist, 9);
    kiln_model_destroy(m);

    /* The seed ResNet on 32 x 32 x 3. */
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    resnet_build(m, 32, 32, 3, 10, 0);
    const int32_t small[] = {32, 32, 3};
    compile_and_train(ctx, m, 3, small, 10, 32, 2);
    /* A few steps leave the moving statistics near (0, 1), under which
     * activations grow block by block until the softmax is one-hot and
     * any two runs agree; variances a trained network could have keep the
     * outputs graded. */
    set_statistics(ctx, m, 0.2f, 9.0f, 25.0f);
    check_agreement(ctx, m, "seed_resnet", 3, small, 5);
    kiln_model_destroy(m);
    binary_layers(ctx);

    every_layer(ctx);
    more_layers(ctx);
    importer_layers(ctx);
    lora(ctx);
    reductions(ctx);
    math_layers(ctx);
    pytorch_windows(ctx);
    attention(ctx);
    padded_attention(ctx);
    matmuls(ctx);
    class_token(ctx);
    ids(ctx);
    several_inputs(ctx);
    conv_output(ctx);
    decoder(ctx);
    kiln_context_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (!have_runtime && !test_failures)
        SKIP_MISSING("%s; the exports passed every other check", no_runtime);
    return test_finish("test_onnx");
}
