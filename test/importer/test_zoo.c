/* One torchvision network (the argument: resnet18, vgg16, ...) imported
 * from PyTorch's ONNX export and trained beside PyTorch (issue 28).
 * make_zoo.py exports it and trains it 5 SGD-with-momentum steps at float32
 * and float64; this test
 *   1. predicts with the imported model and compares with ONNX Runtime on
 *      the same file (1e-4 of the largest output);
 *   2. trains the imported model the same 5 steps (train_on_batch, one
 *      device, MSE) and holds kiln's loss at each step, and every parameter
 *      and moving statistic after the last, to within 4 times PyTorch
 *      float32's distance from PyTorch float64, plus a floor of 1e-6 of
 *      the value's size (a few float32 roundings) for where float32 and
 *      float64 agree exactly;
 *   3. exports the trained model and compares ONNX Runtime on the export
 *      with kiln's predictions (1e-4 of the largest output).
 * It prints a line "zoo NAME ..." with the numbers and times that
 * docs/importing.md tabulates. Needs Debian's python3-torch,
 * python3-torchvision and python3-onnx, and node with onnxruntime-node. */
#include "harness.h"
#include "onnxruntime.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
#define TOLERANCE 1e-4
#define RATIO 4.0
#define FLOOR 1e-6
#define TAU 0.05
#define MAX_STEPS 16

static const char *root, *ort_dir;
static char dir[64];

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* NAME.SUFFIX of the work folder, `n` values of `elem` bytes, or NULL. */
static void *read_values(const char *name, const char *suffix, int64_t n, size_t elem)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, suffix);
    size_t size = 0;
    unsigned char *data = test_read_file(path, &size);
    if (!data || size != (size_t)n * elem) {
        fprintf(stderr, "%s: %zu bytes, expected %lld values of %zu\n", path, size,
                (long long)n, elem);
        test_failures++;
        free(data);
        return NULL;
    }
    return data;
}

/* ONNX Runtime's output of FILE.onnx on NAME.in, or NULL. */
static float *run_ort(const char *file, const char *name, const int64_t *dims, int64_t n_out)
{
    char cmd[2048], out[256];
    snprintf(out, sizeof out, "%s/%s.ort", dir, file);
    snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node '%s/test/saving/onnx_run.js' "
             "'%s/%s.onnx' '%s/%s.in' '%s' %lld %lld %lld %lld > /dev/null", ort_dir, root, dir,
             file, dir, name, out, (long long)dims[0], (long long)dims[1], (long long)dims[2],
             (long long)dims[3]);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: ONNX Runtime failed: %s\n", file, cmd);
        test_failures++;
        return NULL;
    }
    return read_values(file, "ort", n_out, sizeof(float));
}

/* kiln's tensor back in ONNX's layout: a Conv weight (kh, kw, C, F) to
 * (F, C, kh, kw), a Gemm weight (in, out) to (out, in); the rest as is. */
static void to_onnx_layout(const float *kiln, float *onnx, int rank, const int64_t *dims)
{
    if (rank == 4) {
        const int64_t f = dims[0], c = dims[1], kh = dims[2], kw = dims[3];
        for (int64_t o = 0; o < f; o++)
            for (int64_t i = 0; i < c; i++)
                for (int64_t y = 0; y < kh; y++)
                    for (int64_t x = 0; x < kw; x++)
                        onnx[((o * c + i) * kh + y) * kw + x] = kiln[((y * kw + x) * c + i) * f
                                                                     + o];
    } else if (rank == 2) {
        for (int64_t r = 0; r < dims[0]; r++)
            for (int64_t q = 0; q < dims[1]; q++)
                onnx[r * dims[1] + q] = kiln[q * dims[0] + r];
    } else {
        int64_t n = 1;
        for (int d = 0; d < rank; d++)
            n *= dims[d];
        memcpy(onnx, kiln, (size_t)n * sizeof *onnx);
    }
}

/* The distances of one kind of comparison (losses, or tensors), the
 * worst of them kept for the summary. */
typedef struct distances {
    double kiln64, torch32;    /* largest kiln - float64, float32 - float64, relative */
    double ratio;              /* largest (kiln - float64) / (float32 - float64 + FLOOR) */
    double of_moved;           /* largest (kiln - float64) / what training moved */
    int over_strict;           /* how many were over RATIO x float32's + FLOOR */
    char worst[128];           /* where the ratio is largest */
} distances;

/* kiln's distance `kiln64` and PyTorch float32's `torch32` from float64,
 * relative to `size` (the float64 value's), and `moved` (how far training
 * moved the float64 value from the start). The strict bound is RATIO x
 * float32's + FLOOR; kiln must keep within it plus TAU x moved, since a
 * value within rounding of a ReLU's kink takes the other side in one of
 * two float32 computations and changes every gradient before it. */
static void judge(distances *d, const char *what, double kiln64, double torch32, double size,
                  double moved)
{
    const double scale = size > 0 ? size : 1.0;
    const double k = kiln64 / scale, t = torch32 / scale, m = moved / scale;
    const double ratio = k / (t + FLOOR);
    d->kiln64 = fmax(d->kiln64, k);
    d->torch32 = fmax(d->torch32, t);
    if (m > 0)
        d->of_moved = fmax(d->of_moved, k / m);
    if (!(ratio <= d->ratio)) {
        d->ratio = ratio;
        snprintf(d->worst, sizeof d->worst, "%s", what);
    }
    if (!(k <= RATIO * t + FLOOR))
        d->over_strict++;
    if (!(k <= RATIO * t + FLOOR + TAU * m)) {
        fprintf(stderr, "%s: kiln is %.3g from PyTorch float64, more than %g x float32's %.3g "
                "+ %g + %g x the %.3g training moved it (relative to %.3g)\n", what, k, RATIO,
                t, FLOOR, TAU, m, size);
        test_failures++;
    }
}

/* The tensors of NAME.tensors: ONNX names, ranks, dims and sizes. */
typedef struct tensor_list {
    int count;
    int64_t total;
    char (*names)[256];
    int *ranks;
    int64_t (*dims)[KILN_MAX_RANK], *sizes;
} tensor_list;

/* One line of NAME.tensors: the ONNX name, rank and dims; the size, or
 * -1 for a line that is not one. */
static int64_t parse_tensor(const char *line, char name[256], int *rank, int64_t *dims)
{
    int used = 0;
    if (sscanf(line, "%255s %d%n", name, rank, &used) != 2 || *rank < 0 ||
        *rank > KILN_MAX_RANK)
        return -1;
    int64_t size = 1;
    for (int k = 0; k < *rank; k++) {
        long long dim = 0;
        int more = 0;
        if (sscanf(line + used, " %lld%n", &dim, &more) != 1)
            return -1;
        used += more;
        dims[k] = dim;
        size *= dim;
    }
    return size;
}

static int read_tensor_list(const char *name, tensor_list *t)
{
    char path[256], line[512], tensor[256];
    int64_t dims[KILN_MAX_RANK];
    int rank = 0, lines = 0;
    snprintf(path, sizeof path, "%s/%s.tensors", dir, name);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    while (f && fgets(line, sizeof line, f))
        lines++;
    memset(t, 0, sizeof *t);
    t->names = calloc((size_t)lines + 1, sizeof *t->names);
    t->ranks = calloc((size_t)lines + 1, sizeof *t->ranks);
    t->dims = calloc((size_t)lines + 1, sizeof *t->dims);
    t->sizes = calloc((size_t)lines + 1, sizeof *t->sizes);
    if (!f || !t->names || !t->ranks || !t->dims || !t->sizes) {
        if (f)
            fclose(f);
        return 0;
    }
    rewind(f);
    while (fgets(line, sizeof line, f) && t->count < lines) {
        const int64_t size = parse_tensor(line, tensor, &rank, dims);
        if (size < 0)
            continue;
        memcpy(t->names[t->count], tensor, sizeof tensor);
        memcpy(t->dims[t->count], dims, sizeof dims);
        t->ranks[t->count] = rank;
        t->sizes[t->count] = size;
        t->total += size;
        t->count++;
    }
    fclose(f);
    return 1;
}

static void free_tensor_list(tensor_list *t)
{
    free(t->names);
    free(t->ranks);
    free(t->dims);
    free(t->sizes);
}

/* kiln's tensors by their ONNX names, in ONNX's layouts, one after
 * another in the list's order (t->total floats), or NULL. */
static float *kiln_tensors(kiln_context *ctx, kiln_model *m, const tensor_list *t)
{
    float *all = calloc((size_t)t->total + 1, sizeof *all);
    int64_t at = 0;
    for (int i = 0; all && i < t->count; i++) {
        float *got = calloc((size_t)t->sizes[i], sizeof *got);
        CHECK_OK(ctx, kiln_model_get_tensor(m, t->names[i], got, t->sizes[i]));
        if (got)
            to_onnx_layout(got, all + at, t->ranks[i], t->dims[i]);
        free(got);
        at += t->sizes[i];
    }
    return all;
}

/* Every tensor after training (`final`) judged against NAME.final32 and
 * NAME.final64 in Euclidean norms, the training's movement measured from
 * `initial`. */
static void check_tensors(const char *name, const tensor_list *t, const float *initial,
                          const float *final, distances *d)
{
    float *p32 = read_values(name, "final32", t->total, sizeof(float));
    double *p64 = read_values(name, "final64", t->total, sizeof(double));
    int64_t at = 0;
    for (int i = 0; p32 && p64 && initial && final && i < t->count; i++) {
        double kiln64 = 0, torch32 = 0, size = 0, moved = 0;
        for (int64_t j = at; j < at + t->sizes[i]; j++) {
            const double w = p64[j];
            kiln64 += (final[j] - w) * (final[j] - w);
            torch32 += (p32[j] - w) * (p32[j] - w);
            size += w * w;
            moved += (w - initial[j]) * (w - initial[j]);
        }
        judge(d, t->names[i], sqrt(kiln64), sqrt(torch32), sqrt(size), sqrt(moved));
        at += t->sizes[i];
    }
    /* KILN_ZOO_KEEP: kiln's tensors beside PyTorch's for a closer look. */
    char path[256];
    snprintf(path, sizeof path, "%s/%s.final_kiln", dir, name);
    FILE *keep = getenv("KILN_ZOO_KEEP") && final ? fopen(path, "wb") : NULL;
    if (keep) {
        CHECK(fwrite(final, sizeof *final, (size_t)t->total, keep) == (size_t)t->total);
        fclose(keep);
    }
    free(p32);
    free(p64);
}

int main(int argc, char **argv)
{
    root = getenv("KILN_SOURCE_ROOT");
    ort_dir = getenv("KILN_ONNXRUNTIME_DIR");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    if (argc != 2) {
        fprintf(stderr, "usage: test_zoo NETWORK (a torchvision model name)\n");
        return 1;
    }
    const char *name = argv[1];
    snprintf(dir, sizeof dir, "/tmp/kiln_zoo_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char cmd[1024], why[512];
    double t0 = now();
    snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/make_zoo.py' '%s' '%s'", root, dir,
             name);
    const int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77)
        SKIP_MISSING("PyTorch, torchvision or onnx for " PYTHON
                     " (Debian: python3-torch python3-torchvision python3-onnx)");
    if (WEXITSTATUS(rc) != 0) {
        fprintf(stderr, "make_zoo.py failed for %s\n", name);
        return 1;
    }
    const double torch_s = now() - t0;
    if (!test_onnxruntime_ready(root, ort_dir, why, sizeof why))
        SKIP_MISSING("%s", why);
    char path[256];
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    FILE *f = fopen(path, "r");
    long long n_, c_, h_, w_;
    int steps = 0;
    float lr = 0, momentum = 0, python_s = 0;
    CHECK(f && fscanf(f, "%lld %lld %lld %lld %d %f %f %f", &n_, &c_, &h_, &w_, &steps, &lr,
                      &momentum, &python_s) == 8);
    if (f)
        fclose(f);
    if (steps < 1 || steps > MAX_STEPS)
        return test_finish("test_zoo");
    const int64_t dims[4] = {n_, c_, h_, w_}, n_in = n_ * c_ * h_ * w_, n_out = n_ * 10;

    t0 = now();
    float *ort = run_ort(name, name, dims, n_out);
    const double ort_s = now() - t0;

    kiln_context *ctx = test_context(1);
    if (!ctx)
        return 1;
    t0 = now();
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &m));
    if (!m)
        return test_finish("test_zoo");
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = lr, .momentum = momentum};
    /* One device: PyTorch's batch norm takes the whole batch's statistics. */
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const double import_s = now() - t0;

    /* 1. inference against ONNX Runtime */
    float *x = read_values(name, "in", n_in, sizeof(float));
    float *got = calloc((size_t)n_out, sizeof *got);
    t0 = now();
    if (x)
        CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.struct_size =
                 sizeof(kiln_batch_arrays), .count = n_, .features = x}, got, 0));
    const double predict_s = now() - t0;
    char what[128];
    snprintf(what, sizeof what, "%s: kiln against ONNX Runtime", name);
    const double infer = test_close(what, 48, got, ort, sizeof(float), n_out, TEST_OF_ARRAY,
                                    TOLERANCE);

    /* 2. training beside PyTorch */
    float *batches = read_values(name, "batches", steps * n_in, sizeof(float));
    float *targets = read_values(name, "targets", steps * n_out, sizeof(float));
    double *losses = read_values(name, "loss", 3 * steps, sizeof(double));
    distances loss = {.ratio = 0}, params = {.ratio = 0};
    tensor_list list;
    CHECK(read_tensor_list(name, &list));
    int32_t listed = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &listed));
    if (listed != list.count) {   /* every kiln tensor is one of PyTorch's */
        fprintf(stderr, "%s: kiln has %d tensors, PyTorch %d\n", name, (int)listed, list.count);
        test_failures++;
    }
    float *initial = kiln_tensors(ctx, m, &list);
    t0 = now();
    for (int s = 0; batches && targets && losses && s < steps; s++) {
        kiln_metrics out = {.struct_size = sizeof out};
        const kiln_batch_arrays batch = {.struct_size = sizeof batch, .count = n_,
                                         .features = batches + s * n_in,
                                         .dense_labels = targets + s * n_out};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &batch, &out));
        const double l32 = losses[s], l64 = losses[steps + s], l0 = losses[2 * steps + s];
        snprintf(what, sizeof what, "%s: loss of step %d", name, s + 1);
        printf("%-48s kiln %.9g, PyTorch float32 %.9g, float64 %.9g (untrained %.6g)\n", what,
               out.loss, l32, l64, l0);
        /* no step before the first: its loss has nothing to move */
        judge(&loss, what, fabs(out.loss - l64), fabs(l32 - l64), fabs(l64),
              s == 0 ? 0.0 : fabs(l64 - l0));
    }
    const double train_s = now() - t0;
    float *final = kiln_tensors(ctx, m, &list);
    check_tensors(name, &list, initial, final, &params);
    free(initial);
    free(final);
    free_tensor_list(&list);

    /* 3. the trained model exported, in ONNX Runtime */
    float *trained = calloc((size_t)n_out, sizeof *trained);
    if (x)
        CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.struct_size =
                 sizeof(kiln_batch_arrays), .count = n_, .features = x}, trained, 0));
    char export_name[96];
    snprintf(export_name, sizeof export_name, "%s.kiln", name);
    snprintf(path, sizeof path, "%s/%s.onnx", dir, export_name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    float *back = run_ort(export_name, name, dims, n_out);
    snprintf(what, sizeof what, "%s: its trained export in ONNX Runtime", name);
    const double round_trip = test_close(what, 48, back, trained, sizeof(float), n_out,
                                         TEST_OF_ARRAY, TOLERANCE);

    const distances *both[2] = {&loss, &params};
    static const char *const kinds[2] = {"losses", "parameters and statistics"};
    for (int k = 0; k < 2; k++)
        printf("%-48s from float64: kiln %.2e, float32 %.2e; ratio %.2f at %s; %d over %g x "
               "float32's + %g; kiln's difference at most %.2e of the training's movement\n",
               kinds[k], both[k]->kiln64, both[k]->torch32, both[k]->ratio, both[k]->worst,
               both[k]->over_strict, RATIO, FLOOR, both[k]->of_moved);
    printf("zoo %s: ort %.2e | loss %.2e %.2e x%.2f >%d %.2e | params %.2e %.2e x%.2f >%d "
           "%.2e | round-trip %.2e | seconds: torch %.0f (python's own %.0f) ort %.0f "
           "import %.1f predict %.1f train %.1f\n", name, infer, loss.kiln64, loss.torch32,
           loss.ratio, loss.over_strict, loss.of_moved, params.kiln64, params.torch32,
           params.ratio, params.over_strict, params.of_moved, round_trip, torch_s,
           (double)python_s, ort_s, import_s, predict_s, train_s);
    free(ort);
    free(x);
    free(got);
    free(batches);
    free(targets);
    free(losses);
    free(trained);
    free(back);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("KILN_ZOO_KEEP"))
        printf("kept %s\n", dir);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_zoo");
}
