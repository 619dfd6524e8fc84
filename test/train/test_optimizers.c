/* AdamW, RMSprop, Adagrad and weight decay against PyTorch: a small Conv2D
 * and Dense model trained 20 steps from kiln's initial weights, beside
 * torch.optim (or Keras's rules written by hand in torch,
 * torch_optimizers.py) in float64 from the same weights and batches; the
 * same under mirrored, central storage and the pipeline on two devices as
 * on one; a checkpoint saved, loaded into the model file's model and
 * continued equal to training straight on; bad options refused. */
#include "harness.h"

#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
enum { N = 32, BATCH = 16, STEPS = 20, FEATURES = 5 * 5 * 2, MOST = 4096 };

static float x[N * FEATURES];
static int32_t y[N];
static const char *root;
static char dir[64];
static int have_torch = 1;

typedef struct opt_case {
    const char *name;
    const char *kind;            /* torch_optimizers.py's */
    kiln_optimizer_options o;    /* kiln's, Keras's defaults where left 0 */
    /* torch_optimizers.py's settings, every one explicit */
    float lr, wd, momentum, rho, eps, init, beta_1, beta_2;
    int exclude, nesterov, centered;
    const char *form;            /* "torch": torch.optim; "keras": by hand */
    double tol;
} opt_case;

static void make_data(void)
{
    uint64_t s = 12345;
    for (int i = 0; i < N * FEATURES; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)((i * 7 + (x[i * FEATURES] > 0)) % 3);
}

static kiln_model *build(kiln_context *ctx, const kiln_optimizer_options *o,
                         kiln_strategy strategy, int stages)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    if (!m)
        return NULL;
    const int32_t dims[] = {5, 5, 2};
    kiln_node h = kiln_input(m, 3, dims, NULL);
    const kiln_conv2d_options c = {.struct_size = sizeof c, .filters = 3, .kernel_size = {3, 3},
                                   .activation = KILN_ACTIVATION_TANH};
    h = kiln_conv2d(m, h, &c);
    h = kiln_flatten(m, h, NULL);
    const kiln_dense_options d1 = {.struct_size = sizeof d1, .units = 8,
                                   .activation = KILN_ACTIVATION_TANH};
    h = kiln_dense(m, h, &d1);
    const kiln_dense_options d2 = {.struct_size = sizeof d2, .units = 3,
                                   .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, h, &d2);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = o, .strategy = strategy,
                                     .pipeline_stages = stages};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

/* Updates number from+1 .. to, on consecutive batches (wrapping around). */
static void train(kiln_context *ctx, kiln_model *m, int from, int to)
{
    for (int step = from; step < to; step++) {
        const int at = step * BATCH % N;
        const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH,
                                     .features = x + at * FEATURES, .sparse_labels = y + at};
        CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, NULL));
    }
}

/* Every parameter tensor, one after another; returns how many floats. */
static int64_t params_of(kiln_context *ctx, kiln_model *m, float *out, FILE *list)
{
    int32_t n = 0;
    int64_t at = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &n));
    for (int32_t k = 0; k < n; k++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, k, &info));
        CHECK(at + info.size <= MOST);
        if (at + info.size > MOST)
            break;
        CHECK_OK(ctx, kiln_model_get_tensor(m, info.name, out + at, info.size));
        if (list) {
            fprintf(list, "%s %d", info.name, (int)info.rank);
            for (int r = 0; r < info.rank; r++)
                fprintf(list, " %d", (int)info.dims[r]);
            fprintf(list, "\n");
        }
        at += info.size;
    }
    return at;
}

static void write_file(const char *name, const void *data, size_t bytes)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, bytes, f) == bytes);
    if (f)
        fclose(f);
}

/* Runs torch_optimizers.py for `c` from the model's initial weights; its
 * float64 result goes to want64, float32 to want32. 0 when PyTorch is
 * missing. */
static int torch_run(kiln_context *ctx, kiln_model *m, const opt_case *c, double *want64,
                     double *want32, int64_t n)
{
    if (!have_torch)
        return 0;
    static float init[MOST];
    char path[160];
    snprintf(path, sizeof path, "%s/params.txt", dir);
    FILE *list = fopen(path, "w");
    CHECK(list != NULL);
    if (!list)
        return 0;
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    CHECK(count == 6);   /* conv2d, dense, dense_1: kernel and bias each */
    for (int32_t k = 0; k < count; k++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, k, &info));
        CHECK_OK(ctx, kiln_model_get_tensor(m, info.name, init, info.size));
        fprintf(list, "%s %d", info.name, (int)info.rank);
        for (int r = 0; r < info.rank; r++)
            fprintf(list, " %d", (int)info.dims[r]);
        fprintf(list, "\n");
        char name[32];
        snprintf(name, sizeof name, "init.%d.bin", (int)k);
        write_file(name, init, (size_t)info.size * sizeof(float));
    }
    fclose(list);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             PYTHON " '%s/test/train/torch_optimizers.py' '%s' %s %.9g %.9g %d %.9g %d %.9g %d "
             "%.9g %.9g %.9g %.9g %d %d %s", root, dir, c->kind, c->lr, c->wd, c->exclude,
             c->momentum, c->nesterov, c->rho, c->centered, c->eps, c->init, c->beta_1,
             c->beta_2, STEPS, BATCH, c->form);
    const int rc = system(cmd);
    if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
        have_torch = 0;
        return 0;
    }
    CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    int64_t at = 0;
    for (int32_t k = 0; k < count; k++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, k, &info));
        for (int which = 0; which < 2; which++) {
            snprintf(path, sizeof path, "%s/%s.%d.bin", dir, which ? "torch32" : "torch",
                     (int)k);
            FILE *f = fopen(path, "rb");
            double *to = (which ? want32 : want64) + at;
            CHECK(f && fread(to, sizeof(double), (size_t)info.size, f) == (size_t)info.size);
            if (f)
                fclose(f);
        }
        at += info.size;
    }
    CHECK(at == n);
    return 1;
}

/* kiln's 20 steps beside PyTorch's. */
static void check_parity(kiln_context *ctx, const opt_case *c)
{
    kiln_model *m = build(ctx, &c->o, KILN_STRATEGY_ONE_DEVICE, 0);
    if (!m)
        return;
    static float before[MOST], got[MOST];
    static double got64[MOST], want64[MOST], want32[MOST];
    const int64_t n = params_of(ctx, m, before, NULL);
    const int torch = torch_run(ctx, m, c, want64, want32, n);
    train(ctx, m, 0, STEPS);
    params_of(ctx, m, got, NULL);
    CHECK(memcmp(got, before, (size_t)n * sizeof(float)) != 0);
    if (!torch) {
        kiln_model_destroy(m);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        got64[i] = got[i];
    const double torch32 = test_difference(want32, want64, sizeof(double), n, TEST_PER_VALUE,
                                           NULL);
    char what[160];
    snprintf(what, sizeof what, "%s vs PyTorch (%s), float32 PyTorch %.2e:", c->name, c->form,
             torch32);
    test_close(what, 78, got64, want64, sizeof(double), n, TEST_PER_VALUE, c->tol);
    kiln_model_destroy(m);
}

/* Under mirrored, central storage and two pipeline stages on two devices,
 * as on one (the reducer's order of summing aside: within 1e-6). */
static void check_strategies(kiln_context *ctx, const opt_case *c)
{
    static float one[MOST], got[MOST];
    kiln_model *m = build(ctx, &c->o, KILN_STRATEGY_ONE_DEVICE, 0);
    if (!m)
        return;
    train(ctx, m, 0, STEPS);
    const int64_t n = params_of(ctx, m, one, NULL);
    kiln_model_destroy(m);
    const struct { const char *name; kiln_strategy s; int stages; } runs[] = {
        {.name = "mirrored", .s = KILN_STRATEGY_MIRRORED},
        {.name = "central_storage", .s = KILN_STRATEGY_CENTRAL_STORAGE},
        {.name = "pipeline", .s = KILN_STRATEGY_PIPELINE, .stages = 2},
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        m = build(ctx, &c->o, runs[k].s, runs[k].stages);
        if (!m)
            continue;
        train(ctx, m, 0, STEPS);
        params_of(ctx, m, got, NULL);
        char what[160];
        snprintf(what, sizeof what, "%s under %s:", c->name, runs[k].name);
        test_close(what, 78, got, one, sizeof(float), n, TEST_PER_VALUE, 1e-6);
        kiln_model_destroy(m);
    }
}

/* 10 steps, a checkpoint and the model file; the file's model (its
 * optimizer settings from the file) loads the checkpoint and takes 10 more:
 * bit for bit the 20 steps straight. */
static void check_resume(kiln_context *ctx, const opt_case *c)
{
    static float straight[MOST], resumed[MOST];
    kiln_model *m = build(ctx, &c->o, KILN_STRATEGY_ONE_DEVICE, 0);
    if (!m)
        return;
    train(ctx, m, 0, STEPS);
    const int64_t n = params_of(ctx, m, straight, NULL);
    kiln_model_destroy(m);
    m = build(ctx, &c->o, KILN_STRATEGY_ONE_DEVICE, 0);
    if (!m)
        return;
    train(ctx, m, 0, STEPS / 2);
    char ckpt[128], file[128];
    snprintf(ckpt, sizeof ckpt, "%s/resume.ckpt", dir);
    snprintf(file, sizeof file, "%s/resume.kiln", dir);
    CHECK_OK(ctx, kiln_model_save_checkpoint(m, ckpt));
    CHECK_OK(ctx, kiln_model_save(m, file));
    kiln_model_destroy(m);
    m = NULL;
    /* One device, as the model saved (auto would mirror on two). */
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    CHECK_OK(ctx, kiln_model_load(ctx, file, &one, &m));
    if (!m)
        return;
    CHECK_OK(ctx, kiln_model_load_checkpoint(m, ckpt));
    train(ctx, m, STEPS / 2, STEPS);
    params_of(ctx, m, resumed, NULL);
    char what[160];
    snprintf(what, sizeof what, "%s resumed from a checkpoint:", c->name);
    test_close(what, 78, resumed, straight, sizeof(float), n, TEST_PER_VALUE, 0.0);
    kiln_memory_report r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_memory(m, 0, &r));
    printf("%s: optimizer state %llu bytes for %llu of parameters\n", c->name,
           (unsigned long long)r.optimizer_bytes, (unsigned long long)r.parameter_bytes);
    kiln_model_destroy(m);
}

/* Optimizer state: Adagrad one slot, RMSprop one to three, AdamW two. */
static void check_memory(kiln_context *ctx)
{
    const struct { kiln_optimizer_options o; int slots; } cases[] = {
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .kind = KILN_OPTIMIZER_ADAGRAD},
         .slots = 1},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .kind = KILN_OPTIMIZER_RMSPROP},
         .slots = 1},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .kind = KILN_OPTIMIZER_RMSPROP,
               .momentum = 0.5f}, .slots = 2},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .kind = KILN_OPTIMIZER_RMSPROP,
               .momentum = 0.5f, .centered = 1}, .slots = 3},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .kind = KILN_OPTIMIZER_ADAMW},
         .slots = 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_model *m = build(ctx, &cases[k].o, KILN_STRATEGY_ONE_DEVICE, 0);
        if (!m)
            continue;
        kiln_memory_report r = {.struct_size = sizeof r};
        CHECK_OK(ctx, kiln_model_memory(m, 0, &r));
        /* All parameters are trainable here: a slot is as large as they are. */
        CHECK(r.optimizer_bytes == (uint64_t)cases[k].slots * r.parameter_bytes);
        kiln_model_destroy(m);
    }
}

static void check_refused(kiln_context *ctx)
{
    const struct { const char *needle; kiln_optimizer_options o; } bad[] = {
        {.needle = "weight_decay -0.1",
         .o = {.kind = KILN_OPTIMIZER_SGD, .weight_decay = -0.1f}},
        {.needle = "weight_decay nan", .o = {.kind = KILN_OPTIMIZER_ADAMW, .weight_decay = NAN}},
        {.needle = "weight_decay inf",
         .o = {.kind = KILN_OPTIMIZER_ADAM, .weight_decay = INFINITY}},
        {.needle = "rho 1 is not in [0, 1)", .o = {.kind = KILN_OPTIMIZER_RMSPROP, .rho = 1.0f}},
        {.needle = "rho -0.5", .o = {.kind = KILN_OPTIMIZER_RMSPROP, .rho = -0.5f}},
        {.needle = "rho nan", .o = {.kind = KILN_OPTIMIZER_RMSPROP, .rho = NAN}},
        {.needle = "momentum 1 is not in [0, 1)",
         .o = {.kind = KILN_OPTIMIZER_RMSPROP, .momentum = 1.0f}},
        {.needle = "epsilon -1", .o = {.kind = KILN_OPTIMIZER_RMSPROP, .epsilon = -1.0f}},
        {.needle = "epsilon inf", .o = {.kind = KILN_OPTIMIZER_ADAGRAD, .epsilon = INFINITY}},
        {.needle = "epsilon (-0.5)", .o = {.kind = KILN_OPTIMIZER_ADAMW, .epsilon = -0.5f}},
        {.needle = "initial_accumulator_value -0.1",
         .o = {.kind = KILN_OPTIMIZER_ADAGRAD, .initial_accumulator_value = -0.1f}},
        {.needle = "initial_accumulator_value nan",
         .o = {.kind = KILN_OPTIMIZER_ADAGRAD, .initial_accumulator_value = NAN}},
        /* unused by the optimizer, but stored in model files */
        {.needle = "rho is inf", .o = {.kind = KILN_OPTIMIZER_ADAM, .rho = INFINITY}},
        {.needle = "optimizer kind 99", .o = {.kind = (kiln_optimizer_kind)99}},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        kiln_optimizer_options o = bad[k].o;
        o.struct_size = sizeof o;
        kiln_model *m = NULL;
        CHECK_OK(ctx, kiln_model_create(ctx, &m));
        const int32_t dims[] = {4};
        const kiln_dense_options d = {.struct_size = sizeof d, .units = 2};
        kiln_dense(m, kiln_input(m, 1, dims, NULL), &d);
        const kiln_compile_options co = {.struct_size = sizeof co,
                                         .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = &o};
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[k].needle, kiln_model_compile(m, &co));
        double rate = 1;
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[k].needle,
                    kiln_learning_rate_at(ctx, &o, 0, &rate));
        CHECK(rate == 0);
        kiln_model_destroy(m);
    }
    /* The schedule knows nothing of the optimizer's new settings. */
    const kiln_optimizer_options rms = {.struct_size = sizeof rms,
                                        .kind = KILN_OPTIMIZER_RMSPROP, .weight_decay = 0.5f};
    const kiln_optimizer_options adagrad = {.struct_size = sizeof adagrad,
                                            .kind = KILN_OPTIMIZER_ADAGRAD,
                                            .learning_rate = 0.25f};
    double rate = 0;
    CHECK_OK(ctx, kiln_learning_rate_at(ctx, &rms, 7, &rate));
    CHECK(rate == (double)1e-3f);
    CHECK_OK(ctx, kiln_learning_rate_at(ctx, &adagrad, 3, &rate));
    CHECK(rate == 0.25);
}

#define OPT(...) {.struct_size = sizeof(kiln_optimizer_options), __VA_ARGS__}

int main(void)
{
    root = getenv("KILN_SOURCE_ROOT");
    if (!root)
        SKIP("KILN_SOURCE_ROOT is not set (run through meson test)");
    snprintf(dir, sizeof dir, "/tmp/kiln_optimizers_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    make_data();
    write_file("x.bin", x, sizeof x);
    write_file("y.bin", y, sizeof y);
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    /* Tolerances: a few times what was measured (float32 kiln against the
     * float64 run: Adam's kinds 1.8e-6, the others 3.3e-7; PyTorch's own
     * float32 run lies 1e-7 to 5e-7 from it), per value scaled by
     * max(1, |w|). PyTorch's Adam adds epsilon to sqrt(v / (1 - beta_2^t)), Keras's to
     * sqrt(v): the same for an epsilon far below sqrt(v) (1e-10 here). The
     * RMSprop and Adagrad cases against torch.optim put epsilon far below
     * the mean square (1e-20) too: Keras's and kiln's sit inside the
     * root, PyTorch's outside. */
    const opt_case cases[] = {
        {.name = "AdamW", .kind = "adamw",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAMW, .learning_rate = 0.01f, .weight_decay = 0.1f,
                  .epsilon = 1e-10f),
         .lr = 0.01f, .wd = 0.1f, .eps = 1e-10f, .beta_1 = 0.9f, .beta_2 = 0.999f,
         .form = "torch", .tol = 1e-5},
        {.name = "AdamW defaults, vectors not decayed", .kind = "adamw",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAMW, .learning_rate = 0.01f, .epsilon = 1e-10f,
                  .exclude_vectors_from_weight_decay = 1),
         .lr = 0.01f, .wd = 0.004f, .exclude = 1, .eps = 1e-10f, .beta_1 = 0.9f,
         .beta_2 = 0.999f, .form = "torch", .tol = 1e-5},
        {.name = "Adam with weight_decay", .kind = "adam",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAM, .learning_rate = 0.01f, .weight_decay = 0.05f,
                  .beta_1 = 0.8f, .epsilon = 1e-10f),
         .lr = 0.01f, .wd = 0.05f, .eps = 1e-10f, .beta_1 = 0.8f, .beta_2 = 0.999f,
         .form = "torch", .tol = 1e-5},
        {.name = "SGD with weight_decay", .kind = "sgd",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.1f, .weight_decay = 0.05f),
         .lr = 0.1f, .wd = 0.05f, .form = "keras", .tol = 2e-6},
        {.name = "SGD momentum, weight_decay", .kind = "sgd",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .momentum = 0.9f,
                  .weight_decay = 0.05f),
         .lr = 0.05f, .wd = 0.05f, .momentum = 0.9f, .form = "keras", .tol = 2e-6},
        {.name = "SGD Nesterov, weight_decay, vectors not", .kind = "sgd",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .momentum = 0.8f,
                  .nesterov = 1, .weight_decay = 0.1f, .exclude_vectors_from_weight_decay = 1),
         .lr = 0.05f, .wd = 0.1f, .momentum = 0.8f, .nesterov = 1, .exclude = 1,
         .form = "keras", .tol = 2e-6},
        {.name = "RMSprop", .kind = "rmsprop",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .learning_rate = 0.003f, .epsilon = 1e-20f),
         .lr = 0.003f, .rho = 0.9f, .eps = 1e-20f, .form = "torch", .tol = 2e-6},
        {.name = "RMSprop momentum", .kind = "rmsprop",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .learning_rate = 0.002f, .rho = 0.8f,
                  .momentum = 0.7f, .epsilon = 1e-20f),
         .lr = 0.002f, .rho = 0.8f, .momentum = 0.7f, .eps = 1e-20f, .form = "torch",
         .tol = 2e-6},
        {.name = "RMSprop centered", .kind = "rmsprop",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .learning_rate = 0.002f, .centered = 1,
                  .epsilon = 1e-20f),
         .lr = 0.002f, .rho = 0.9f, .centered = 1, .eps = 1e-20f, .form = "torch", .tol = 2e-6},
        {.name = "RMSprop centered momentum", .kind = "rmsprop",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .learning_rate = 0.002f, .centered = 1,
                  .momentum = 0.9f, .epsilon = 1e-20f),
         .lr = 0.002f, .rho = 0.9f, .centered = 1, .momentum = 0.9f, .eps = 1e-20f,
         .form = "torch", .tol = 2e-6},
        {.name = "RMSprop defaults", .kind = "rmsprop", .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP),
         .lr = 1e-3f, .rho = 0.9f, .eps = 1e-7f, .form = "keras", .tol = 2e-6},
        {.name = "RMSprop centered momentum decay", .kind = "rmsprop",
         .o = OPT(.kind = KILN_OPTIMIZER_RMSPROP, .learning_rate = 0.003f, .rho = 0.85f,
                  .centered = 1, .momentum = 0.5f, .weight_decay = 0.2f,
                  .exclude_vectors_from_weight_decay = 1),
         .lr = 0.003f, .rho = 0.85f, .centered = 1, .momentum = 0.5f, .eps = 1e-7f,
         .wd = 0.2f, .exclude = 1, .form = "keras", .tol = 2e-6},
        {.name = "Adagrad", .kind = "adagrad",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAGRAD, .learning_rate = 0.05f),
         .lr = 0.05f, .init = 0.1f, .eps = 1e-7f, .form = "torch", .tol = 2e-6},
        {.name = "Adagrad weight_decay, vectors not", .kind = "adagrad",
         .o = OPT(.kind = KILN_OPTIMIZER_ADAGRAD, .learning_rate = 0.05f,
                  .initial_accumulator_value = 0.3f, .epsilon = 1e-4f, .weight_decay = 0.1f,
                  .exclude_vectors_from_weight_decay = 1),
         .lr = 0.05f, .init = 0.3f, .eps = 1e-4f, .wd = 0.1f, .exclude = 1, .form = "keras",
         .tol = 2e-6},
    };
    const size_t n_cases = sizeof cases / sizeof cases[0];
    for (size_t k = 0; k < n_cases; k++)
        check_parity(ctx, &cases[k]);
    if (!have_torch)
        test_missing_part("PyTorch for " PYTHON " (Debian: python3-torch)");
    /* The cases of the most slots and runs of decay through the strategies
     * and a checkpoint: AdamW without vectors, RMSprop's three slots,
     * Adagrad's first update. */
    const size_t through[] = {1, 11, 13};
    const int two = test_has_devices(test_device_count(ctx), 2, "the strategies on two devices");
    for (size_t k = 0; k < sizeof through / sizeof through[0]; k++) {
        if (two)
            check_strategies(ctx, &cases[through[k]]);
        check_resume(ctx, &cases[through[k]]);
    }
    check_memory(ctx);
    check_refused(ctx);
    kiln_context_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_optimizers");
}
