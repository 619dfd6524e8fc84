/* Checkpoints: round trips of every layer's parameters and every
 * optimizer's state, mismatch reports, bit-exact resume mid-epoch, loading
 * across strategies, and malformed safetensors files. */
#include "harness.h"
#include "runtime/model/model.h"
#include "runtime/formats/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *file(const char *name)
{
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static kiln_dataset *data(kiln_context *ctx)
{
    static float x[48 * 36];
    static int32_t y[48];
    for (int i = 0; i < 48 * 36; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 48; i++)
        y[i] = (int32_t)((i * 7) % 3);
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 48, .feature_rank = 3,
                          .feature_dims = {6, 6, 1}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

/* Every layer kind with parameters, and ones without. */
static kiln_model *model(kiln_context *ctx, kiln_optimizer_kind opt, int units,
                         kiln_strategy strategy)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6, 6, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 3, .kernel_size = {3, 3},
                                .activation = KILN_ACTIVATION_RELU};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = units,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options head = {.struct_size = sizeof head, .name = "head", .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 3, dims, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, NULL);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_optimizer_options optimizer = {
        .struct_size = sizeof optimizer, .kind = opt, .learning_rate = 0.02f,
        .momentum = opt == KILN_OPTIMIZER_SGD ? 0.9f : 0.0f};
    /* The parameter server with one worker: the setting that trains (and
     * resumes) reproducibly; several workers race by design. */
    const kiln_compile_options co = {
        .struct_size = sizeof co, .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        .strategy = strategy, .optimizer = &optimizer,
        .replicas = strategy == KILN_STRATEGY_PARAMETER_SERVER ? 1 : 0};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_fit_options fit_options(int epochs)
{
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = epochs;
    fo.batch_size = 5;   /* 48 = 9 * 5 + 3: a partial batch each epoch */
    fo.verbosity = KILN_VERBOSE_SILENT;
    return fo;
}

static float *weights(kiln_model *m, int64_t *n)
{
    kiln_model_parameter_count(m, n);
    float *w = calloc((size_t)*n, sizeof(float));
    kiln_model_get_weights(m, w, *n);
    return w;
}

static float *slots(kiln_model *m, int *n_slots)
{
    *n_slots = m->plan.optimizer.kind == KILN_OPTIMIZER_ADAM ? 2 : 1;
    float *s = calloc(m->plan.n_param_floats * 2, sizeof(float));
    float *p[2] = {s, s + m->plan.n_param_floats};
    m->placement.strategy->get_slots(m->placement.strategy_impl, p);
    return s;
}

static void test_round_trip(kiln_context *ctx, kiln_optimizer_kind opt)
{
    kiln_dataset *ds = data(ctx);
    kiln_model *a = model(ctx, opt, 7, KILN_STRATEGY_AUTO);
    kiln_fit_options fo = fit_options(2);
    CHECK_OK(ctx, kiln_model_fit(a, ds, &fo));
    CHECK_OK(ctx, kiln_model_save_checkpoint(a, file("full.safetensors")));
    CHECK_OK(ctx, kiln_model_save_weights(a, file("weights.safetensors")));

    kiln_model *b = model(ctx, opt, 7, KILN_STRATEGY_AUTO);
    CHECK_OK(ctx, kiln_model_load_checkpoint(b, file("full.safetensors")));
    int64_t n = 0;
    int ns = 0;
    float *wa = weights(a, &n), *wb = weights(b, &n), *sa = slots(a, &ns), *sb = slots(b, &ns);
    CHECK(memcmp(wa, wb, (size_t)n * 4) == 0);
    CHECK(memcmp(sa, sb, a->plan.n_param_floats * 4 * (size_t)ns) == 0);
    CHECK(b->training.n_optimizer_steps == a->training.n_optimizer_steps &&
          b->training.n_history == 2);
    kiln_epoch_record ra = {.struct_size = sizeof ra}, rb = {.struct_size = sizeof rb};
    kiln_model_history_epoch(a, 1, &ra);
    kiln_model_history_epoch(b, 1, &rb);
    CHECK(ra.loss == rb.loss && ra.samples == rb.samples);

    /* A weights-only file loads its weights, not as a training state. */
    kiln_model *c = model(ctx, opt, 7, KILN_STRATEGY_AUTO);
    CHECK_OK(ctx, kiln_model_load_weights(c, file("weights.safetensors")));
    float *wc = weights(c, &n);
    CHECK(memcmp(wa, wc, (size_t)n * 4) == 0);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "holds weights only",
                kiln_model_load_checkpoint(c, file("weights.safetensors")));
    /* Another tool reads the same numbers (the standard library's struct
     * module on the documented layout). */
    const char *root = getenv("KILN_SOURCE_ROOT");
    if (root && access("/usr/bin/python3", X_OK) == 0) {
        char cmd[1024], line[128] = "";
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/test/saving/read_checkpoint.py %s "
                 "dense/kernel head/bias", root, file("full.safetensors"));
        FILE *p = popen(cmd, "r");
        if (p && fgets(line, sizeof line, p)) {
            double want = 0;
            int64_t at = 0;
            for (int32_t i = 0; i < a->graph.n_nodes; i++)
                for (int q = 0; q < a->graph.nodes[i].n_params; q++) {
                    const int64_t size = kiln_shape_size(&a->graph.nodes[i].params[q].shape);
                    const int pick = (!strcmp(a->graph.nodes[i].name, "dense") && q == 0) ||
                                     (!strcmp(a->graph.nodes[i].name, "head") && q == 1);
                    for (int64_t j = 0; pick && j < size; j++)
                        want += wa[at + j];
                    at += size;
                }
            double got = 0;
            CHECK(sscanf(line, "kiln-checkpoint %lf", &got) == 1 &&
                  fabs(got - want) <= 1e-5 * (1 + fabs(want)));
        } else {
            CHECK(0);
        }
        if (p)
            pclose(p);
    }
    printf("round trip (%s): %lld parameters and %d optimizer slot(s) identical\n",
           opt == KILN_OPTIMIZER_ADAM ? "adam" : "sgd momentum", (long long)n, ns);
    free(wa), free(wb), free(wc), free(sa), free(sb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    kiln_model_destroy(c);
    kiln_dataset_destroy(ds);
}

static void test_mismatches(kiln_context *ctx)
{
    kiln_model *a = model(ctx, KILN_OPTIMIZER_ADAM, 7, KILN_STRATEGY_AUTO);
    CHECK_OK(ctx, kiln_model_save_checkpoint(a, file("seven.safetensors")));
    kiln_model *b = model(ctx, KILN_OPTIMIZER_ADAM, 5, KILN_STRATEGY_AUTO);
    int64_t n = 0;
    float *before = weights(b, &n);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "'dense/kernel' has shape (12, 7), the model needs (12, 5)",
                kiln_model_load_weights(b, file("seven.safetensors")));
    CHECK(strstr(kiln_context_last_error(ctx), "'dense/bias' has shape (7), the model needs "
                                               "(5,)") != NULL);
    CHECK(strstr(kiln_context_last_error(ctx), "'head/kernel' has shape (7, 3)") != NULL);
    float *after = weights(b, &n);
    CHECK(memcmp(before, after, (size_t)n * 4) == 0);   /* unchanged on failure */
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "was saved from another model",
                kiln_model_load_checkpoint(b, file("seven.safetensors")));
    kiln_model *sgd = model(ctx, KILN_OPTIMIZER_SGD, 7, KILN_STRATEGY_AUTO);
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "holds adam state, the model uses sgd",
                kiln_model_load_checkpoint(sgd, file("seven.safetensors")));

    /* A file from elsewhere: a missing tensor, an extra one, another dtype. */
    float zeros[64] = {0};
    kiln_st_entry e[] = {
        {.name = "conv2d/kernel", .rank = 4, .shape = {3, 3, 1, 3}, .data = zeros},
        {.name = "stranger", .rank = 1, .shape = {4}, .data = zeros},
    };
    CHECK_OK(ctx, kiln_st_write(ctx, file("foreign.safetensors"), e, 2, NULL, NULL, 0));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "'conv2d/bias' is missing",
                kiln_model_load_weights(b, file("foreign.safetensors")));
    CHECK(strstr(kiln_context_last_error(ctx), "'stranger' is not in the model") != NULL);
    CHECK_FAILS(ctx, KILN_ERROR_IO, "cannot open",
                kiln_model_load_weights(b, file("missing.safetensors")));
    CHECK_FAILS(ctx, KILN_ERROR_IO, "cannot create",
                kiln_model_save_weights(b, "/nonexistent-dir/x.safetensors"));
    free(before);
    free(after);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
    kiln_model_destroy(sgd);
}

typedef struct stopper {
    int64_t steps, stop_at;
} stopper;

static int stop_after(void *user, const kiln_progress *p)
{
    stopper *s = user;
    if (p->event == KILN_EVENT_BATCH_END)
        s->steps++;
    return s->steps == s->stop_at;
}

/* Four epochs straight equal 2.5 epochs, a stop, and a resume to four,
 * under `strategy` (the parameter server in this process: one worker,
 * whose batches still in flight a checkpoint waits for; over MPI:
 * test_parameter_server_mpi_resume). */
static void test_exact_resume(kiln_context *ctx, kiln_strategy strategy, const char *name)
{
    kiln_dataset *ds = data(ctx);
    kiln_model *straight = model(ctx, KILN_OPTIMIZER_ADAM, 7, strategy);
    kiln_fit_options fo = fit_options(4);
    CHECK_OK(ctx, kiln_model_fit(straight, ds, &fo));

    char ckdir[128];
    snprintf(ckdir, sizeof ckdir, "%s/run-%s", dir, name);
    kiln_model *first = model(ctx, KILN_OPTIMIZER_ADAM, 7, strategy);
    stopper s = {.stop_at = 25};   /* 10 steps an epoch: stop in the middle of the third */
    fo.checkpoint_dir = ckdir;
    fo.checkpoint_every_steps = 5;
    fo.keep_checkpoints = 2;
    fo.callback = stop_after;
    fo.callback_user = &s;
    CHECK_FAILS(ctx, KILN_ERROR_STOPPED, "stopped training at epoch 3, step 5",
                kiln_model_fit(first, ds, &fo));
    kiln_model_destroy(first);

    /* A damaged newest file is skipped in favour of the one before. */
    char junk[256];
    snprintf(junk, sizeof junk, "%s/ckpt-999999999999.safetensors", ckdir);
    FILE *f = fopen(junk, "wb");
    fputs("not a checkpoint", f);
    fclose(f);

    kiln_model *resumed = model(ctx, KILN_OPTIMIZER_ADAM, 7, strategy);
    fo.callback = NULL;
    fo.resume = 1;
    CHECK_OK(ctx, kiln_model_fit(resumed, ds, &fo));
    int64_t n = 0;
    float *a = weights(straight, &n), *b = weights(resumed, &n);
    int32_t len = 0;
    kiln_model_history_count(resumed, &len);
    CHECK(len == 4);
    CHECK(memcmp(a, b, (size_t)n * 4) == 0);
    kiln_epoch_record ra = {.struct_size = sizeof ra}, rb = {.struct_size = sizeof rb};
    kiln_model_history_epoch(straight, 2, &ra);
    kiln_model_history_epoch(resumed, 2, &rb);
    CHECK(fabs(ra.loss - rb.loss) < 1e-12 && ra.samples == rb.samples);
    int differ = 0;
    for (int64_t i = 0; i < n; i++)
        differ += memcmp(&a[i], &b[i], 4) != 0;
    printf("resume (%s): 2.5 epochs + resume to 4 == 4 epochs straight: %s (%d of %lld "
           "weights differ)\n", name, differ ? "DIFFERENT" : "bit-identical", differ,
           (long long)n);
    /* The damaged file was set aside; only the newest two are kept. */
    char aside[300];
    snprintf(aside, sizeof aside, "%s.damaged", junk);
    CHECK(access(junk, F_OK) != 0 && access(aside, F_OK) == 0);
    int count = 0;
    for (int step = 0; step <= 40; step++) {
        char p[256];
        snprintf(p, sizeof p, "%s/ckpt-%012d.safetensors", ckdir, step);
        count += access(p, F_OK) == 0;
    }
    CHECK(count == 2);
    free(a);
    free(b);
    kiln_model_destroy(straight);
    kiln_model_destroy(resumed);
    kiln_dataset_destroy(ds);
}

/* Saved under one strategy, loaded under another. */
static void test_cross_strategy(kiln_context *ctx)
{
    kiln_dataset *ds = data(ctx);
    kiln_model *a = model(ctx, KILN_OPTIMIZER_ADAM, 7, KILN_STRATEGY_MIRRORED);
    kiln_fit_options fo = fit_options(1);
    CHECK_OK(ctx, kiln_model_fit(a, ds, &fo));
    CHECK_OK(ctx, kiln_model_save_checkpoint(a, file("mirrored.safetensors")));
    const kiln_strategy others[] = {KILN_STRATEGY_ONE_DEVICE, KILN_STRATEGY_CENTRAL_STORAGE};
    for (int i = 0; i < 2; i++) {
        kiln_model *b = model(ctx, KILN_OPTIMIZER_ADAM, 7, others[i]);
        CHECK_OK(ctx, kiln_model_load_checkpoint(b, file("mirrored.safetensors")));
        int64_t n = 0;
        int ns = 0;
        float *wa = weights(a, &n), *wb = weights(b, &n), *sa = slots(a, &ns),
              *sb = slots(b, &ns);
        CHECK(memcmp(wa, wb, (size_t)n * 4) == 0);
        CHECK(memcmp(sa, sb, a->plan.n_param_floats * 8) == 0);
        free(wa), free(wb), free(sa), free(sb);
        kiln_model_destroy(b);
    }
    int32_t replicas = 0;
    kiln_model_distribution(a, NULL, &replicas);
    printf("cross-strategy: saved mirrored over %d replica(s), loaded one_device and "
           "central_storage\n", (int)replicas);
    kiln_model_destroy(a);
    kiln_dataset_destroy(ds);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/kiln-ckpt-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    kiln_context *ctx = test_context(21);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_round_trip(ctx, KILN_OPTIMIZER_ADAM);
    test_round_trip(ctx, KILN_OPTIMIZER_SGD);
    test_mismatches(ctx);
    test_exact_resume(ctx, KILN_STRATEGY_ONE_DEVICE, "one_device");
    test_exact_resume(ctx, KILN_STRATEGY_PARAMETER_SERVER, "parameter_server");
    test_cross_strategy(ctx);
    kiln_context_destroy(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_finish("test_checkpoint");
}
