/* ONNX's own conformance tests through kiln's importer: every test folder
 * of ONNX's test data (Debian's libonnx-testdata: node/ and
 * pytorch-converted/) whose graph holds only ops kiln claims
 * (conformance_claims.h) is imported with kiln_model_import_onnx_buffer,
 * run with kiln_model_predict on its input_K.pb and compared with its
 * output_K.pb. Each folder passes, fails, or is skipped for a limit
 * docs/importing.md documents (the reason printed); a table per op ends
 * the output.
 *
 * Node tests pass an op's weights as graph inputs: those (the inputs no
 * node reads as data, conformance_claims.h) become initializers of their
 * input_K.pb, written into the model with protobuf-c before the import.
 * Models of an opset below 11 (pytorch-converted's opset 6) are raised to
 * opset 11 first by ONNX's own version converter (upgrade_opset.py,
 * /usr/bin/python3 with python3-onnx) and marked so.
 *
 * A value passes when |kiln - ONNX| <= RTOL |ONNX| + ATOL. */
#include "harness.h"
#include "kiln_config.h"

#if KILN_HAVE_ONNX

#include "conformance_claims.h"

#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The generated header's oneofs are anonymous unions (C11). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "kiln_onnx.pb-c.h"
#pragma GCC diagnostic pop

#define PYTHON "/usr/bin/python3"
#define DATA_ROOT "/usr/share/libonnx-testdata/data"
#define RTOL 1e-4
#define ATOL 1e-5
#define ONNX_FLOAT 1
#define ONNX_INT32 6
#define ONNX_INT64 7
#define FIRST_OPSET 11
#define FIRST_IR 6
#define MAX_TESTS 2048
#define MAX_GRAPH_INPUTS 16

#define RANDOM_DROPOUT "training_mode 1 draws a random mask (kiln's predict passes values " \
    "on, as documented)"

#define UNCONVERTED "an opset below 11, not raised to 11 (ONNX's version converter failed or " \
    "is missing)"

static const char *const folders[] = {"node", "pytorch-converted"};

typedef enum outcome { PASSED, SKIPPED, FAILED } outcome;

typedef struct result {
    char name[96];          /* folder/test */
    char op[32];            /* the op it tests */
    outcome outcome;
    int converted;          /* raised from an older opset */
    char why[512];          /* a skip's reason, a failure's message */
    char reason[160];       /* a skip's reason alone, for the table */
    double worst;           /* a run's largest |kiln - ONNX| / (RTOL |ONNX| + ATOL) */
} result;

static result results[MAX_TESTS];
static int n_results, unclaimed;
static char tmp[64];

static const conformance_op *claimed(const char *op)
{
    for (size_t k = 0; k < sizeof conformance_ops / sizeof conformance_ops[0]; k++)
        if (strcmp(conformance_ops[k].op, op) == 0)
            return &conformance_ops[k];
    return NULL;
}

static KilnOnnx__ModelProto *load_model(const char *path)
{
    size_t size = 0;
    unsigned char *bytes = test_read_file(path, &size);
    KilnOnnx__ModelProto *m = bytes ? kiln_onnx__model_proto__unpack(NULL, size, bytes) : NULL;
    free(bytes);
    return m;
}

static KilnOnnx__TensorProto *load_tensor(const char *path)
{
    size_t size = 0;
    unsigned char *bytes = test_read_file(path, &size);
    KilnOnnx__TensorProto *t = bytes ? kiln_onnx__tensor_proto__unpack(NULL, size, bytes)
                                     : NULL;
    free(bytes);
    return t;
}

static int64_t tensor_count(const KilnOnnx__TensorProto *t)
{
    int64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++)
        n *= t->dims[d];
    return n;
}

/* A float tensor's values (the caller frees them), or NULL: not float, or
 * its data disagrees with its shape. */
static float *tensor_floats(const KilnOnnx__TensorProto *t, int64_t *count)
{
    *count = tensor_count(t);
    if (!t->has_data_type || t->data_type != ONNX_FLOAT)
        return NULL;
    float *f = malloc((size_t)(*count + 1) * sizeof *f);
    if (f && t->has_raw_data && t->raw_data.len == (size_t)*count * sizeof *f) {
        if (*count)   /* little-endian, as this machine */
            memcpy(f, t->raw_data.data, t->raw_data.len);
    } else if (f && !t->has_raw_data && t->n_float_data == (size_t)*count) {
        if (*count)
            memcpy(f, t->float_data, t->n_float_data * sizeof *f);
    } else {
        free(f);
        return NULL;
    }
    return f;
}

/* An int64 or int32 tensor's values as the int32 ids a kiln_input_ints
 * Input reads (an Embedding's indices); NULL for another type or a value
 * past int32. */
static int32_t *tensor_ids(const KilnOnnx__TensorProto *t)
{
    const int64_t count = tensor_count(t);
    const int wide = t->has_data_type && t->data_type == ONNX_INT64;
    if (!t->has_data_type || (!wide && t->data_type != ONNX_INT32))
        return NULL;
    int32_t *ids = malloc((size_t)(count + 1) * sizeof *ids);
    const size_t width = wide ? 8 : 4;
    const int raw = t->has_raw_data && t->raw_data.len == (size_t)count * width;
    if (!ids || (!raw && (wide ? t->n_int64_data : t->n_int32_data) != (size_t)count)) {
        free(ids);
        return NULL;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t v;
        if (raw && wide)
            memcpy(&v, t->raw_data.data + i * 8, 8);   /* little-endian, as this machine */
        else if (raw) {
            int32_t v32;
            memcpy(&v32, t->raw_data.data + i * 4, 4);
            v = v32;
        } else
            v = wide ? t->int64_data[i] : t->int32_data[i];
        if (v < INT32_MIN || v > INT32_MAX) {
            free(ids);
            return NULL;
        }
        ids[i] = (int32_t)v;
    }
    return ids;
}

static int opset_of(const KilnOnnx__ModelProto *m)
{
    for (size_t k = 0; k < m->n_opset_import; k++)
        if (!m->opset_import[k]->domain || !*m->opset_import[k]->domain ||
            strcmp(m->opset_import[k]->domain, "ai.onnx") == 0)
            return (int)m->opset_import[k]->version;
    return 0;
}

static int is_initializer(const KilnOnnx__GraphProto *g, const char *name)
{
    for (size_t k = 0; k < g->n_initializer; k++)
        if (strcmp(g->initializer[k]->name, name) == 0)
            return 1;
    return 0;
}

/* The op a test is about: its first node's that is not a Constant. */
static const char *main_op(const KilnOnnx__GraphProto *g)
{
    for (size_t k = 0; k < g->n_node; k++)
        if (strcmp(g->node[k]->op_type, "Constant") != 0)
            return g->node[k]->op_type;
    return g->n_node ? g->node[0]->op_type : "(none)";
}

/* Whether graph input `name` is data somewhere: a node reads it at one of
 * its op's data positions. */
static int read_as_data(const KilnOnnx__GraphProto *g, const char *name)
{
    for (size_t k = 0; k < g->n_node; k++) {
        const conformance_op *op = claimed(g->node[k]->op_type);
        for (size_t i = 0; i < g->node[k]->n_input; i++)
            if (strcmp(g->node[k]->input[i], name) == 0 &&
                (op->data_inputs < 0 || (int)i < op->data_inputs))
                return 1;
    }
    return 0;
}

#if defined(__GNUC__)
static void finish(result *r, outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#endif

static void finish(result *r, outcome o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    r->outcome = o;
}

/* A documented refusal: the limit's reason, or NULL. */
static const char *documented(const char *op, kiln_status st, const char *message)
{
    if (st != KILN_ERROR_UNSUPPORTED)
        return NULL;
    for (size_t k = 0; k < sizeof conformance_limits / sizeof conformance_limits[0]; k++) {
        const conformance_limit *l = &conformance_limits[k];
        if ((!l->op || strcmp(l->op, op) == 0) && strstr(message, l->needle))
            return l->reason;
    }
    return NULL;
}

/* The largest |got - want| / (RTOL |want| + ATOL) of n values, and where;
 * a NaN or infinity the other lacks scores infinity. */
static double worst_of(const float *got, const float *want, int64_t n, int64_t *at)
{
    double worst = 0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = 0;
        if (got[i] != want[i])
            e = isfinite(got[i]) && isfinite(want[i])
                    ? fabs((double)got[i] - want[i]) / (RTOL * fabs(want[i]) + ATOL)
                    : INFINITY;
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return worst;
}

/* Dropout in training mode with a ratio above 0 draws a random mask:
 * ONNX's outputs come from numpy's generator, and kiln's predict passes
 * values on whatever training_mode says (docs/importing.md). */
static int random_dropout(const KilnOnnx__GraphProto *g, KilnOnnx__TensorProto *const *weights,
                          const char *const *names, int n_weights)
{
    for (size_t k = 0; k < g->n_node; k++) {
        const KilnOnnx__NodeProto *n = g->node[k];
        if (strcmp(n->op_type, "Dropout") != 0 || n->n_input < 3)
            continue;
        float ratio = 0.5f;
        int training = 0;
        for (int w = 0; w < n_weights; w++) {
            const KilnOnnx__TensorProto *t = weights[w];
            if (strcmp(names[w], n->input[1]) == 0 && t->has_raw_data && t->raw_data.len == 4)
                memcpy(&ratio, t->raw_data.data, 4);
            if (strcmp(names[w], n->input[1]) == 0 && t->n_float_data == 1)
                ratio = t->float_data[0];
            if (strcmp(names[w], n->input[2]) == 0)
                training = (t->has_raw_data && t->raw_data.len && t->raw_data.data[0]) ||
                           (t->n_int32_data && t->int32_data[0]);
        }
        if (training && ratio > 0)
            return 1;
    }
    return 0;
}

/* The model with `weights` added as initializers, packed; NULL after a
 * failure. */
static unsigned char *with_initializers(KilnOnnx__ModelProto *m,
                                        KilnOnnx__TensorProto *const *weights, int n_weights,
                                        size_t *size)
{
    KilnOnnx__GraphProto *g = m->graph;
    KilnOnnx__TensorProto **all = malloc((g->n_initializer + (size_t)n_weights + 1) *
                                         sizeof *all);
    if (!all)
        return NULL;
    if (g->n_initializer)
        memcpy(all, g->initializer, g->n_initializer * sizeof *all);
    for (int w = 0; w < n_weights; w++)
        all[g->n_initializer + (size_t)w] = weights[w];
    KilnOnnx__TensorProto **kept = g->initializer;
    const size_t n_kept = g->n_initializer;
    g->initializer = all;
    g->n_initializer += (size_t)n_weights;
    *size = kiln_onnx__model_proto__get_packed_size(m);
    unsigned char *bytes = malloc(*size + 1);
    if (bytes)
        kiln_onnx__model_proto__pack(m, bytes);
    g->initializer = kept;   /* free_unpacked frees what unpack made */
    g->n_initializer = n_kept;
    free(all);
    return bytes;
}

static const char *tensor_path(const char *dir, int set, const char *kind, int k)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/test_data_set_%d/%s_%d.pb", dir, set, kind, k);
    return path;
}

/* Compiles m and runs it on `data` (one float array per Input), then
 * compares each output with output_K.pb of the set. */
static void predict_and_compare(kiln_context *ctx, kiln_model *m, result *r, const char *dir,
                                int set, KilnOnnx__TensorProto *const *data, int n_data)
{
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.01f};
    /* A node of several outputs (Split) makes a model of several: a loss
     * each. */
    kiln_output_loss losses[KILN_MAX_MODEL_OUTPUTS];
    int32_t outputs = 0;   /* the set's output files */
    while (outputs < KILN_MAX_MODEL_OUTPUTS &&
           access(tensor_path(dir, set, "output", outputs), R_OK) == 0) {
        losses[outputs] = (kiln_output_loss){.struct_size = sizeof losses[outputs],
                                             .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
        outputs++;
    }
    const int several = outputs > 1;
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = several ? 0 : KILN_LOSS_MEAN_SQUARED_ERROR,
                                     .n_outputs = several ? outputs : 0,
                                     .outputs = several ? losses : NULL, .optimizer = &sgd,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    kiln_status st = kiln_model_compile(m, &co);
    if (st != KILN_OK) {
        finish(r, FAILED, "compile: %s: %s", kiln_status_name(st), kiln_context_last_error(ctx));
        return;
    }
    float *in[MAX_GRAPH_INPUTS] = {NULL};
    int32_t *ids[MAX_GRAPH_INPUTS] = {NULL};   /* int inputs: Embedding indices */
    int any_ids = 0;
    kiln_input_array arrays[MAX_GRAPH_INPUTS];
    int64_t count = 0, out_size = 0;
    int32_t n_out = 0;
    float *got = NULL;
    for (int k = 0; k < n_data; k++) {
        int64_t n = 0;
        in[k] = tensor_floats(data[k], &n);
        ids[k] = in[k] ? NULL : tensor_ids(data[k]);
        memset(&arrays[k], 0, sizeof arrays[k]);
        arrays[k].features = in[k];
        arrays[k].int_features = ids[k];
        any_ids |= ids[k] != NULL;
        if ((!in[k] && !ids[k]) || data[k]->n_dims < 1) {
            finish(r, FAILED, "input %d of set %d: not a float or integer tensor of its shape",
                   k, set);
            goto done;
        }
    }
    count = data[0]->dims[0];
    for (int k = 0; k < n_data; k++) {   /* kiln reads count samples of each */
        kiln_tensor_info info = {.struct_size = sizeof info};
        int64_t size = 1;
        st = kiln_model_input_info(m, k, &info);
        for (int32_t d = 0; d < info.rank; d++)
            size *= info.dims[d];
        arrays[k].rank = info.rank;
        memcpy(arrays[k].dims, info.dims, sizeof arrays[k].dims);
        if (st != KILN_OK || tensor_count(data[k]) != count * size) {
            finish(r, FAILED, "input %d holds %lld values; kiln's Input takes %lld samples of "
                   "%lld", k, (long long)tensor_count(data[k]), (long long)count,
                   (long long)size);
            goto done;
        }
    }
    st = kiln_model_output_size(m, &out_size);
    if (st == KILN_OK)
        st = kiln_model_output_count(m, &n_out);
    got = st == KILN_OK ? calloc((size_t)(count * out_size + 1), sizeof *got) : NULL;
    const kiln_batch_arrays batch = {.struct_size = sizeof batch, .count = count,
                                     .features = n_data == 1 && !any_ids ? in[0] : NULL,
                                     .n_inputs = n_data == 1 && !any_ids ? 0 : n_data,
                                     .inputs = n_data == 1 && !any_ids ? NULL : arrays};
    if (got)
        st = kiln_model_predict(m, &batch, got, 0);
    if (st != KILN_OK || !got) {
        finish(r, FAILED, "predict: %s: %s", kiln_status_name(st), kiln_context_last_error(ctx));
        goto done;
    }
    /* Each sample's outputs one after another (kiln), output by output
     * (ONNX). */
    for (int32_t k = 0, offset = 0; k < n_out; k++) {
        kiln_tensor_info info = {.struct_size = sizeof info};
        kiln_model_output_info(m, k, &info);
        int64_t size = 1, n = 0, at = 0;
        for (int32_t d = 0; d < info.rank; d++)
            size *= info.dims[d];
        KilnOnnx__TensorProto *t = load_tensor(tensor_path(dir, set, "output", k));
        float *want = t ? tensor_floats(t, &n) : NULL;
        float *mine = malloc((size_t)(count * size + 1) * sizeof *mine);
        if (!want || !mine || n != count * size) {
            finish(r, FAILED, "output %d: ONNX's holds %lld values, kiln's %lld (%lld samples "
                   "of %lld)%s", k, (long long)n, (long long)(count * size), (long long)count,
                   (long long)size, want ? "" : "; ONNX's is not a float tensor");
        } else {
            for (int64_t s = 0; s < count; s++)
                memcpy(mine + s * size, got + s * out_size + offset, (size_t)size * sizeof *mine);
            const double worst = worst_of(mine, want, n, &at);
            r->worst = worst > r->worst ? worst : r->worst;
            if (!(worst <= 1.0))
                finish(r, FAILED, "output %d differs: at %lld kiln %.7g, ONNX %.7g "
                       "(|difference| %.3g, %.3g times the tolerance)", k, (long long)at,
                       mine[at], want[at], fabs((double)mine[at] - want[at]), worst);
        }
        free(mine);
        free(want);
        if (t)
            kiln_onnx__tensor_proto__free_unpacked(t, NULL);
        offset += (int32_t)size;
    }
done:
    for (int k = 0; k < n_data; k++)
        free(in[k]), free(ids[k]);
    free(got);
}

/* Test data set `set` of model m in folder dir. */
static void run_set(kiln_context *ctx, KilnOnnx__ModelProto *m, result *r, const char *dir,
                    int set)
{
    const KilnOnnx__GraphProto *g = m->graph;
    KilnOnnx__TensorProto *weights[MAX_GRAPH_INPUTS], *data[MAX_GRAPH_INPUTS];
    const char *weight_names[MAX_GRAPH_INPUTS];
    int n_weights = 0, n_data = 0, k = 0;
    kiln_model *model = NULL;
    unsigned char *bytes = NULL;
    for (size_t i = 0; i < g->n_input; i++) {
        const char *name = g->input[i]->name;
        if (is_initializer(g, name))
            continue;
        if (k == MAX_GRAPH_INPUTS) {
            finish(r, FAILED, "more than %d graph inputs", MAX_GRAPH_INPUTS);
            goto done;
        }
        KilnOnnx__TensorProto *t = load_tensor(tensor_path(dir, set, "input", k));
        if (!t) {
            finish(r, FAILED, "cannot read %s", tensor_path(dir, set, "input", k));
            goto done;
        }
        k++;
        if (k == 1 || read_as_data(g, name)) {   /* the first input is always data */
            data[n_data++] = t;
            continue;
        }
        free(t->name);   /* protobuf-c's default allocator is malloc's */
        t->name = strdup(name);
        weight_names[n_weights] = name;
        weights[n_weights++] = t;
    }
    if (random_dropout(g, weights, weight_names, n_weights)) {
        finish(r, SKIPPED, "%s", RANDOM_DROPOUT);
        snprintf(r->reason, sizeof r->reason, "%s", RANDOM_DROPOUT);
        goto done;
    }
    size_t size = 0;
    bytes = with_initializers(m, weights, n_weights, &size);
    kiln_status st = bytes ? kiln_model_import_onnx_buffer(ctx, bytes, size, NULL, &model)
                           : KILN_ERROR_OUT_OF_MEMORY;
    if (st != KILN_OK) {
        const char *message = kiln_context_last_error(ctx);
        const char *reason = documented(r->op, st, message);
        if (reason) {
            finish(r, SKIPPED, "%s [kiln: %s]", reason, message);
            snprintf(r->reason, sizeof r->reason, "%s", reason);
        }
        else
            finish(r, FAILED, "import: %s: %s", kiln_status_name(st), message);
        goto done;
    }
    if (n_data == 0)
        finish(r, FAILED, "kiln imported a graph without inputs");
    else
        predict_and_compare(ctx, model, r, dir, set, data, n_data);
done:
    kiln_model_destroy(model);
    free(bytes);
    for (int w = 0; w < n_weights; w++)
        kiln_onnx__tensor_proto__free_unpacked(weights[w], NULL);
    for (int d = 0; d < n_data; d++)
        kiln_onnx__tensor_proto__free_unpacked(data[d], NULL);
}

static int all_claimed(const KilnOnnx__GraphProto *g)
{
    int all = g->n_node > 0;
    for (size_t k = 0; k < g->n_node && all; k++)
        all = (!g->node[k]->domain || !*g->node[k]->domain) &&
              claimed(g->node[k]->op_type) != NULL;
    return all;
}

/* What the runner does with the test folder dir: nothing (UNCLAIMED: an op
 * kiln does not claim), run its model (CURRENT), or raise it to opset 11
 * and run that (OLD: an opset below 11 or an IR below 6). */
enum { UNCLAIMED, CURRENT, OLD };

static int test_kind(const char *dir)
{
    char path[768];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    KilnOnnx__ModelProto *m = load_model(path);
    int kind = UNCLAIMED;
    if (m && m->graph && all_claimed(m->graph))
        kind = opset_of(m) < FIRST_OPSET || m->ir_version < FIRST_IR ? OLD : CURRENT;
    if (m)
        kiln_onnx__model_proto__free_unpacked(m, NULL);
    return kind;
}

/* One test folder of claimed ops: its model, or the model raised to opset
 * 11 at `converted` when not NULL. */
static void run_test(kiln_context *ctx, const char *folder, const char *test, const char *dir,
                     const char *converted)
{
    char path[768];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    struct stat sb;
    const int unconverted = converted && stat(converted, &sb) != 0;
    KilnOnnx__ModelProto *m = load_model(converted && !unconverted ? converted : path);
    result *r = &results[n_results++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s/%s", folder, test);
    r->converted = converted && !unconverted;
    if (!m || !m->graph) {   /* ONNX's files and the converter's all parse */
        snprintf(r->op, sizeof r->op, "?");
        finish(r, FAILED, "%s does not parse as ONNX", converted ? converted : path);
        if (m)
            kiln_onnx__model_proto__free_unpacked(m, NULL);
        return;
    }
    const KilnOnnx__GraphProto *g = m->graph;
    snprintf(r->op, sizeof r->op, "%s", main_op(g));
    if (unconverted) {   /* upgrade_opset.py said why */
        finish(r, SKIPPED, "%s", UNCONVERTED);
        snprintf(r->reason, sizeof r->reason, "%s", UNCONVERTED);
    }
    for (int set = 0; r->outcome == PASSED; set++) {
        char set_dir[800];
        snprintf(set_dir, sizeof set_dir, "%s/test_data_set_%d", dir, set);
        if (stat(set_dir, &sb) != 0) {
            if (set == 0)
                finish(r, FAILED, "no test_data_set_0");
            break;
        }
        run_set(ctx, m, r, dir, set);
    }
    kiln_onnx__model_proto__free_unpacked(m, NULL);
    const char *tag[] = {"PASS", "SKIP", "FAIL"};
    if (r->outcome == PASSED)
        printf("PASS %-58s %-18s %s%.3f of the tolerance\n", r->name, r->op,
               r->converted ? "(raised to opset 11) " : "", r->worst);
    else
        printf("%s %-58s %-18s %s%s\n", tag[r->outcome], r->name, r->op,
               r->converted ? "(raised to opset 11) " : "", r->why);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The test folders of `folder`, sorted; the caller frees each and the list. */
static char **list_tests(const char *root, const char *folder, int *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, folder);
    DIR *d = opendir(path);
    char **names = calloc(MAX_TESTS, sizeof *names);
    *n = 0;
    for (struct dirent *e; d && names && (e = readdir(d)) && *n < MAX_TESTS;)
        if (strncmp(e->d_name, "test_", 5) == 0)
            names[(*n)++] = strdup(e->d_name);
    if (d)
        closedir(d);
    qsort(names, (size_t)*n, sizeof *names, by_name);
    return names;
}

/* Per op: how many passed, were skipped (each reason with its tests) and
 * failed (each test). */
static void print_table(void)
{
    printf("\n%-20s %6s %7s %6s\n", "op", "passed", "skipped", "failed");
    int total[3] = {0, 0, 0};
    for (size_t o = 0; o < sizeof conformance_ops / sizeof conformance_ops[0]; o++) {
        const char *op = conformance_ops[o].op;
        int count[3] = {0, 0, 0};
        for (int k = 0; k < n_results; k++)
            if (strcmp(results[k].op, op) == 0)
                count[results[k].outcome]++;
        for (int c = 0; c < 3; c++)
            total[c] += count[c];
        if (count[PASSED] + count[SKIPPED] + count[FAILED] == 0) {
            printf("%-20s (no test of ONNX's has only claimed ops)\n", op);
            continue;
        }
        printf("%-20s %6d %7d %6d\n", op, count[PASSED], count[SKIPPED], count[FAILED]);
        /* Each reason once, with the tests it covers. */
        for (int k = 0; k < n_results; k++) {
            const result *r = &results[k];
            if (strcmp(r->op, op) != 0 || r->outcome == PASSED)
                continue;
            int first = 1;
            for (int j = 0; j < k && first; j++)
                first = !(strcmp(results[j].op, op) == 0 && results[j].outcome == r->outcome &&
                          strcmp(results[j].reason, r->reason) == 0 && r->outcome == SKIPPED);
            if (!first)
                continue;
            if (r->outcome == FAILED) {
                printf("    failed: %s\n", r->name);
                continue;
            }
            printf("    skipped, %s:", r->reason);
            for (int j = k; j < n_results; j++)
                if (strcmp(results[j].op, op) == 0 && results[j].outcome == SKIPPED &&
                    strcmp(results[j].reason, r->reason) == 0)
                    printf(" %s", strchr(results[j].name, '/') + 1);
            printf("\n");
        }
    }
    printf("%-20s %6d %7d %6d   (%d test folders hold ops kiln does not claim)\n", "all",
           total[PASSED], total[SKIPPED], total[FAILED], unclaimed);
}

int main(void)
{
    const char *root = getenv("KILN_ONNX_TESTDATA");
    const char *source = getenv("KILN_SOURCE_ROOT");
    root = root ? root : DATA_ROOT;
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/node", root);
    if (stat(path, &sb) != 0)
        SKIP_MISSING("ONNX's test data, %s (Debian: libonnx-testdata)", path);
    if (!source)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    snprintf(tmp, sizeof tmp, "/tmp/kiln_conformance_XXXXXX");
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "cannot make a temporary folder\n");
        return 1;
    }
    char **tests[2];
    int n_tests[2];
    /* The models of old opsets, raised by ONNX's converter in one run. */
    char list[128];
    snprintf(list, sizeof list, "%s/upgrade.txt", tmp);
    FILE *f = fopen(list, "w");
    int to_upgrade = 0;
    for (int k = 0; k < 2; k++) {
        tests[k] = list_tests(root, folders[k], &n_tests[k]);
        for (int t = 0; t < n_tests[k]; t++) {
            snprintf(path, sizeof path, "%s/%s/%s", root, folders[k], tests[k][t]);
            const int kind = test_kind(path);
            unclaimed += kind == UNCLAIMED;
            if (f && kind == OLD) {
                fprintf(f, "%s/model.onnx %s/%s__%s.onnx\n", path, tmp, folders[k], tests[k][t]);
                to_upgrade++;
            }
        }
    }
    if (f)
        fclose(f);
    if (to_upgrade) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/upgrade_opset.py' '%s'", source,
                 list);
        const int rc = system(cmd);
        if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
            test_missing_part("ONNX's version converter (" PYTHON " with python3-onnx) for the "
                              "models of opsets below 11");
    }
    kiln_context *ctx = test_context(1);
    if (!ctx)
        return 1;
    printf("ONNX's test data in %s; a value passes when |kiln - ONNX| <= %g |ONNX| + %g\n",
           root, RTOL, ATOL);
    for (int k = 0; k < 2; k++) {
        for (int t = 0; t < n_tests[k]; t++) {
            char converted[256];
            snprintf(path, sizeof path, "%s/%s/%s", root, folders[k], tests[k][t]);
            snprintf(converted, sizeof converted, "%s/%s__%s.onnx", tmp, folders[k],
                     tests[k][t]);
            const int kind = test_kind(path);
            if (kind != UNCLAIMED && n_results < MAX_TESTS)
                run_test(ctx, folders[k], tests[k][t], path, kind == OLD ? converted : NULL);
            free(tests[k][t]);
        }
        free(tests[k]);
    }
    kiln_context_destroy(ctx);
    print_table();
    for (int k = 0; k < n_results; k++)
        test_failures += results[k].outcome == FAILED;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return test_finish("test_onnx_conformance");
}

#else /* !KILN_HAVE_ONNX */

int main(void)
{
    SKIP_MISSING("kiln built without ONNX (meson feature 'onnx': libprotobuf-c, protoc-c and "
                 "python3-onnx's onnx.proto)");
}

#endif
