/* One torchvision network (the argument: resnet18, vgg16, ...) imported
 * from PyTorch's ONNX export and trained beside PyTorch (issue 28).
 * make_zoo.py exports it and trains it 5 SGD-with-momentum steps at float32
 * and float64; this test
 *   1. predicts with the imported model and compares with ONNX Runtime on
 *      the same file (1e-4 of the largest output);
 *   2. trains the imported model the same 5 steps (train_on_batch, one
 *      device, MSE), and again with each batch's samples reversed, and
 *      holds kiln's loss at each step, and every parameter and moving
 *      statistic after the last (Euclidean norms per tensor), to within 4
 *      times the larger of PyTorch float32's distance from float64 and
 *      kiln's from itself reversed, plus 1e-6 of the value's size (for a
 *      loss, the largest of those two at that step or any before it);
 *      PyTorch float32's distance is the farther of its two runs (as set
 *      up, and on one thread with the batches reversed);
 *   3. exports the trained model and compares ONNX Runtime on the export
 *      with kiln's predictions (1e-4 of the largest output).
 * Why kiln reversed: a value within rounding of a ReLU's kink falls on one
 * side in one float32 computation and on the other in another, and the
 * gradient of every layer before it changes (resnet18's layer3.1.bn1
 * channel 201 at step 2 was 6.5e-7 in float64, 2.0e-6 in PyTorch float32
 * and below 0 in kiln: resnet18's weights then differed by 1e-2 of what
 * training moved them). PyTorch float32 is one float32 computation; kiln
 * with its sums in another order is a second, measured on each run. The
 * issue's own bound (4 times PyTorch float32's alone) is counted and
 * printed, not asserted.
 * Why two PyTorch float32 runs: one run's distance is one draw of
 * float32's. efficientnet_b0's fourth loss was 1.45e-4 of itself from
 * float64's in PyTorch float32 on two threads, 7.15e-4 on one thread, and
 * 7.14e-4 in kiln (2-core AMD EPYC, 2026-11-28): one draw failed kiln
 * where PyTorch itself, summing in another order, lands as far.
 * Why the losses' bound is the largest distance so far: in the batch norm
 * networks the forward pass alone is sensitive to the order of sums (the
 * first loss, before any update, moved by 6.3e-6 of itself in resnet50
 * and 1.6e-5 in wide_resnet50_2 when kiln reversed the batch, against
 * PyTorch float32's 2.6e-7 and 1.8e-6 from float64), and five steps make
 * training chaotic (their worst tensors end 0.73 to 0.81 of their norm
 * from float64's, in PyTorch float32 as in kiln). A float32 computation's
 * distance at one step is then one draw below the spread reached so far:
 * wide_resnet50_2's PyTorch float32 loss was 14.8% from float64's at step
 * 3 and 0.4% at step 5, where kiln was 5.5% (2026-11-28). A systematic
 * error in kiln is in both of its runs and cancels from their distance,
 * so it cannot widen the bound; the weights are judged tensor by tensor
 * as before.
 * It prints a line "zoo NAME ..." with the numbers and times that
 * docs/importing.md tabulates. Needs Debian's python3-torch,
 * python3-torchvision and python3-onnx, and node with onnxruntime-node. */
#include "harness.h"
#include "onnxruntime.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
#define TOLERANCE 1e-4
#define RATIO 4.0
#define FLOOR 1e-6
#define MAX_STEPS 16

static const char *root, *ort_dir;
static char dir[64];

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds of this process (who: RUSAGE_SELF) or of its finished
 * children (RUSAGE_CHILDREN: Python, node), beside the wall clock on a busy
 * machine (PyTorch's threads spin while they wait, so these vary too). */
static double cpu(int who)
{
    struct rusage u;
    if (getrusage(who, &u) != 0)
        return 0;
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
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
 * (F, C, kh, kw), a Gemm weight (in, out) to (out, in) (torchvision's only
 * 4-D and 2-D tensors); the rest as is. */
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
    double kiln64, torch32, self;  /* largest kiln - float64, float32 - float64, kiln - reversed */
    int so_far;          /* losses: bound by the largest float32 spread of this step or before */
    double ratio;        /* largest (kiln - float64) / (float32 - float64 + FLOOR) */
    int over_strict;     /* how many were over RATIO x float32's + FLOOR (the bound) */
    char worst[128];     /* where the ratio is largest */
} distances;

/* kiln's distance `kiln64` and PyTorch float32's `torch32` from float64,
 * and kiln's from itself reversed `self`, relative to `size` (the float64
 * value's): kiln's must be within RATIO x the larger of the other two
 * (with so_far, the largest of them up to this one) + FLOOR. */
static void judge(distances *d, const char *what, double kiln64, double torch32, double self,
                  double size)
{
    const double scale = size > 0 ? size : 1.0;
    const double k = kiln64 / scale, t = torch32 / scale, r = self / scale;
    const double ratio = k / (t + FLOOR);
    d->kiln64 = fmax(d->kiln64, k);
    d->torch32 = fmax(d->torch32, t);
    d->self = fmax(d->self, r);
    const double spread = d->so_far ? fmax(d->torch32, d->self) : fmax(t, r);
    if (!(ratio <= d->ratio)) {
        d->ratio = ratio;
        snprintf(d->worst, sizeof d->worst, "%s", what);
    }
    if (!(k <= RATIO * t + FLOOR))
        d->over_strict++;
    if (!(k <= RATIO * spread + FLOOR)) {
        fprintf(stderr, "%s: kiln is %.3g from PyTorch float64, more than %g x %.3g (the "
                "larger of float32's %.3g and kiln reversed's %.3g%s) + %g (relative to %.3g)\n",
                what, k, RATIO, spread, t, r, d->so_far ? ", or either's before" : "", FLOOR,
                size);
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

/* nn.MultiheadAttention's packed in_proj_weight (3E, E) or in_proj_bias
 * (3E), which kiln imports as three parameters "<name>/query", "/key" and
 * "/value" (kernels (E, E) as (in, out)), into got in kiln's layout of
 * the packed tensor: the kernels side by side as one (E, 3E), which
 * to_onnx_layout turns to PyTorch's (3E, E); the biases one after another. */
static void get_packed(kiln_context *ctx, kiln_model *m, const tensor_list *t, int i, float *got)
{
    static const char *const part[3] = {"query", "key", "value"};
    const int64_t e = t->dims[i][0] / 3, each = t->sizes[i] / 3;
    float *one = calloc((size_t)each, sizeof *one);
    for (int p = 0; one && p < 3; p++) {
        char name[300];
        snprintf(name, sizeof name, "%s/%s", t->names[i], part[p]);
        CHECK_OK(ctx, kiln_model_get_tensor(m, name, one, each));
        if (t->ranks[i] == 1)
            memcpy(got + p * e, one, (size_t)e * sizeof *one);
        else
            for (int64_t r = 0; r < e; r++)
                memcpy(got + r * 3 * e + p * e, one + r * e, (size_t)e * sizeof *one);
    }
    free(one);
}

static int packed(const tensor_list *t, int i)
{
    static const char *const ends[2] = {"in_proj_weight", "in_proj_bias"};
    const size_t n = strlen(t->names[i]);
    for (int k = 0; k < 2; k++)
        if (n >= strlen(ends[k]) && strcmp(t->names[i] + n - strlen(ends[k]), ends[k]) == 0 &&
            t->ranks[i] == 2 - k && t->dims[i][0] % 3 == 0)
            return 1;
    return 0;
}

/* kiln's tensors by their ONNX names, in ONNX's layouts, one after
 * another in the list's order (t->total floats), or NULL. */
static float *kiln_tensors(kiln_context *ctx, kiln_model *m, const tensor_list *t)
{
    float *all = calloc((size_t)t->total + 1, sizeof *all);
    int64_t at = 0;
    for (int i = 0; all && i < t->count; i++) {
        float *got = calloc((size_t)t->sizes[i], sizeof *got);
        if (got && packed(t, i))
            get_packed(ctx, m, t, i, got);
        else
            CHECK_OK(ctx, kiln_model_get_tensor(m, t->names[i], got, t->sizes[i]));
        if (got)
            to_onnx_layout(got, all + at, t->ranks[i], t->dims[i]);
        free(got);
        at += t->sizes[i];
    }
    return all;
}

/* Every tensor after training (`final`, and `reversed` of the run on
 * reversed batches) judged against NAME.final32 and NAME.final64. */
static void check_tensors(const char *name, const tensor_list *t, const float *final,
                          const float *reversed, distances *d)
{
    float *p32 = read_values(name, "final32", t->total, sizeof(float));
    float *p32b = read_values(name, "final32b", t->total, sizeof(float));
    double *p64 = read_values(name, "final64", t->total, sizeof(double));
    int64_t at = 0;
    for (int i = 0; p32 && p32b && p64 && final && reversed && i < t->count; i++) {
        double kiln64 = 0, torch32 = 0, torch32b = 0, self = 0, size = 0;
        for (int64_t j = at; j < at + t->sizes[i]; j++) {
            const double w = p64[j];
            kiln64 += (final[j] - w) * (final[j] - w);
            torch32 += (p32[j] - w) * (p32[j] - w);
            torch32b += (p32b[j] - w) * (p32b[j] - w);
            self += ((double)final[j] - reversed[j]) * ((double)final[j] - reversed[j]);
            size += w * w;
        }
        judge(d, t->names[i], sqrt(kiln64), sqrt(fmax(torch32, torch32b)), sqrt(self),
              sqrt(size));
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
    free(p32b);
    free(p64);
}

/* The run's settings (NAME.txt) and data. */
typedef struct run {
    int64_t n, n_in, n_out;   /* samples per batch, floats per batch in and out */
    int steps;
    float lr, momentum;
    const float *batches, *targets;
} run;

/* The imported model compiled as PyTorch trains it: MSE, SGD with
 * momentum, one device (PyTorch's batch norm takes the whole batch's
 * statistics); NULL on failure. */
static kiln_model *import(kiln_context *ctx, const char *name, const run *r)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_import_onnx(ctx, path, NULL, &m));
    if (!m)
        return NULL;
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = r->lr, .momentum = r->momentum};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &sgd,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* The run's steps on `m` (each batch's samples in reverse order when
 * `reverse`): the losses to losses[step]. */
static void train(kiln_context *ctx, kiln_model *m, const run *r, int reverse, double *losses)
{
    const int64_t in = r->n_in / r->n, out = r->n_out / r->n;
    float *x = malloc((size_t)r->n_in * sizeof *x), *y = malloc((size_t)r->n_out * sizeof *y);
    for (int s = 0; x && y && s < r->steps; s++) {
        for (int64_t i = 0; i < r->n; i++) {
            const int64_t from = reverse ? r->n - 1 - i : i;
            memcpy(x + i * in, r->batches + s * r->n_in + from * in, (size_t)in * sizeof *x);
            memcpy(y + i * out, r->targets + s * r->n_out + from * out, (size_t)out * sizeof *y);
        }
        kiln_metrics metrics = {.struct_size = sizeof metrics};
        const kiln_batch_arrays batch = {.struct_size = sizeof batch, .count = r->n,
                                         .features = x, .dense_labels = y};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &batch, &metrics));
        losses[s] = metrics.loss;
    }
    free(x);
    free(y);
}

int main(int argc, char **argv)
{
    root = getenv("KILN_SOURCE_ROOT");
    ort_dir = getenv("KILN_ONNXRUNTIME_DIR");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_zoo NETWORK [OPSET] (a network of zoo_models.py; the "
                "export's opset, 17 when not given)\n");
        return 1;
    }
    const char *name = argv[1], *opset = argc == 3 ? argv[2] : "17";
    if (strspn(opset, "0123456789") != strlen(opset) || strlen(opset) != 2) {
        fprintf(stderr, "test_zoo: OPSET '%s' is not an opset number\n", opset);
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/kiln_zoo_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char cmd[1024], why[512], path[256], what[128];
    double t0 = now();
    snprintf(cmd, sizeof cmd, PYTHON " '%s/test/importer/make_zoo.py' '%s' '%s' %s", root, dir,
             name, opset);
    const int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) == 77)
        SKIP_MISSING("PyTorch, torchvision or onnx for " PYTHON
                     " (Debian: python3-torch python3-torchvision python3-onnx)");
    if (WEXITSTATUS(rc) != 0) {
        fprintf(stderr, "make_zoo.py failed for %s\n", name);
        return 1;
    }
    const double torch_s = now() - t0, torch_cpu = cpu(RUSAGE_CHILDREN);
    if (!test_onnxruntime_ready(root, ort_dir, why, sizeof why))
        SKIP_MISSING("%s", why);
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    FILE *f = fopen(path, "r");
    long long n, c, h, w;
    run r = {.steps = 0};
    float python_s = 0;
    CHECK(f && fscanf(f, "%lld %lld %lld %lld %d %f %f %f", &n, &c, &h, &w, &r.steps, &r.lr,
                      &r.momentum, &python_s) == 8);
    if (f)
        fclose(f);
    if (r.steps < 1 || r.steps > MAX_STEPS)
        return test_finish("test_zoo");
    const int64_t dims[4] = {n, c, h, w};
    r.n = n;
    r.n_in = n * c * h * w;
    r.n_out = n * 10;

    t0 = now();
    float *ort = run_ort(name, name, dims, r.n_out);
    const double ort_s = now() - t0;

    kiln_context *ctx = test_context(1);
    if (!ctx)
        return 1;
    t0 = now();
    kiln_model *m = import(ctx, name, &r);
    if (!m)
        return test_finish("test_zoo");
    const double import_s = now() - t0;

    /* 1. inference against ONNX Runtime */
    float *x = read_values(name, "in", r.n_in, sizeof(float));
    float *got = calloc((size_t)r.n_out, sizeof *got);
    t0 = now();
    if (x)
        CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.struct_size =
                 sizeof(kiln_batch_arrays), .count = n, .features = x}, got, 0));
    const double predict_s = now() - t0;
    snprintf(what, sizeof what, "%s: kiln against ONNX Runtime", name);
    const double infer = test_close(what, 48, got, ort, sizeof(float), r.n_out, TEST_OF_ARRAY,
                                    TOLERANCE);

    /* 2. training beside PyTorch, and again on reversed batches */
    float *batches = read_values(name, "batches", r.steps * r.n_in, sizeof(float));
    float *targets = read_values(name, "targets", r.steps * r.n_out, sizeof(float));
    double *torch_losses = read_values(name, "loss", 3 * r.steps, sizeof(double));
    r.batches = batches;
    r.targets = targets;
    distances loss = {.so_far = 1}, params = {.ratio = 0};
    tensor_list list;
    CHECK(read_tensor_list(name, &list));
    int32_t listed = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &listed));
    int expected = list.count;   /* a packed in_proj is three of kiln's */
    for (int i = 0; i < list.count; i++)
        expected += 2 * packed(&list, i);
    if (listed != expected) {   /* every kiln tensor is one of PyTorch's */
        fprintf(stderr, "%s: kiln has %d tensors, PyTorch %d (%d in kiln's count)\n", name,
                (int)listed, list.count, expected);
        test_failures++;
    }
    double losses[MAX_STEPS] = {0}, reversed_losses[MAX_STEPS] = {0};
    float *final = NULL, *reversed = NULL;
    double train_s = 0, train_cpu = 0;
    if (batches && targets && torch_losses) {
        t0 = now();
        const double c0 = cpu(RUSAGE_SELF);
        train(ctx, m, &r, 0, losses);
        train_s = now() - t0;
        train_cpu = cpu(RUSAGE_SELF) - c0;
        final = kiln_tensors(ctx, m, &list);
        kiln_model *again = import(ctx, name, &r);
        if (again)
            train(ctx, again, &r, 1, reversed_losses);
        reversed = again ? kiln_tensors(ctx, again, &list) : NULL;
        kiln_model_destroy(again);
    }
    for (int s = 0; torch_losses && s < r.steps; s++) {
        const double l32 = torch_losses[s], l64 = torch_losses[r.steps + s],
                     l32b = torch_losses[2 * r.steps + s];
        snprintf(what, sizeof what, "%s: loss of step %d", name, s + 1);
        printf("%-48s kiln %.9g (reversed %.9g), PyTorch float32 %.9g (one thread, "
               "reversed %.9g), float64 %.9g\n", what, losses[s], reversed_losses[s], l32, l32b,
               l64);
        judge(&loss, what, fabs(losses[s] - l64), fmax(fabs(l32 - l64), fabs(l32b - l64)),
              fabs(losses[s] - reversed_losses[s]), fabs(l64));
    }
    check_tensors(name, &list, final, reversed, &params);
    free(final);
    free(reversed);
    free_tensor_list(&list);

    /* 3. the trained model exported, in ONNX Runtime */
    float *trained = calloc((size_t)r.n_out, sizeof *trained);
    if (x)
        CHECK_OK(ctx, kiln_model_predict(m, &(kiln_batch_arrays){.struct_size =
                 sizeof(kiln_batch_arrays), .count = n, .features = x}, trained, 0));
    char export_name[96];
    snprintf(export_name, sizeof export_name, "%s.kiln", name);
    snprintf(path, sizeof path, "%s/%s.onnx", dir, export_name);
    CHECK_OK(ctx, kiln_model_export_onnx(m, path));
    float *back = run_ort(export_name, name, dims, r.n_out);
    snprintf(what, sizeof what, "%s: its trained export in ONNX Runtime", name);
    const double round_trip = test_close(what, 48, back, trained, sizeof(float), r.n_out,
                                         TEST_OF_ARRAY, TOLERANCE);

    const distances *both[2] = {&loss, &params};
    static const char *const kinds[2] = {"losses", "parameters and statistics"};
    for (int k = 0; k < 2; k++)
        printf("%-48s from float64: kiln %.2e, float32 %.2e, kiln reversed from kiln %.2e; "
               "kiln / float32 up to %.2f (%s), %d over the issue's %g x float32's + %g\n",
               kinds[k], both[k]->kiln64, both[k]->torch32, both[k]->self, both[k]->ratio,
               both[k]->worst, both[k]->over_strict, RATIO, FLOOR);
    printf("zoo %s: ort %.2e | loss %.2e %.2e %.2e x%.1f >%d | params %.2e %.2e %.2e x%.1f "
           ">%d | round-trip %.2e | seconds: torch %.0f (python's own %.0f, cpu %.0f) "
           "ort %.0f import %.1f predict %.1f train %.1f (cpu %.1f) | cpu in all: kiln %.0f, "
           "children %.0f\n", name, infer, loss.kiln64, loss.torch32, loss.self, loss.ratio,
           loss.over_strict, params.kiln64, params.torch32, params.self, params.ratio,
           params.over_strict, round_trip, torch_s, (double)python_s, torch_cpu, ort_s,
           import_s, predict_s, train_s, train_cpu, cpu(RUSAGE_SELF), cpu(RUSAGE_CHILDREN));
    free(ort);
    free(x);
    free(got);
    free(batches);
    free(targets);
    free(torch_losses);
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
