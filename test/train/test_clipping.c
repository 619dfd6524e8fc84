/* Gradient clipping (kiln_optimizer_options' clipnorm, clipvalue,
 * global_clipnorm): the kernels and the host's clip against a float64
 * reference, NaN and infinity kept non-finite, the bad settings refused,
 * and the settings kept by model files. With --dump DIR it also trains a
 * small model 20 steps in each mode and writes the initial and final
 * weights and the batches for test/train/torch_clipping.py, which trains
 * the same in PyTorch (clipping_parity.sh runs both). */
#include "harness.h"
#include "parity_dump.h"
#include "runtime/model/clip.h"
#include "runtime/model/model.h"
#include "runtime/parallel/replica.h"
#include "runtime/saving/model_desc.h"

#define STEPS 20
#define BATCH 16
#define IN 6

static kiln_context *context(void)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 7};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    return ctx;
}

/* in -> Dense(hidden, tanh) "d0" -> Dense(hidden, tanh) "d1" -> Dense(3) "d2". */
static kiln_model *build(kiln_context *ctx, int32_t in, int32_t hidden,
                         const kiln_optimizer_options *o, const char *frozen,
                         kiln_status *status)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {in};
    kiln_input(m, 1, dims, NULL);
    const char *names[] = {"d0", "d1", "d2"};
    for (int k = 0; k < 3; k++) {
        const kiln_dense_options d = {.struct_size = sizeof d, .name = names[k],
                                      .units = k == 2 ? 3 : hidden,
                                      .activation = k == 2 ? KILN_ACTIVATION_LINEAR
                                                           : KILN_ACTIVATION_TANH};
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
    }
    if (frozen)
        CHECK_OK(ctx, kiln_model_set_trainable(m, frozen, 0));
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR, .optimizer = o,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE};
    *status = kiln_model_compile(m, &co);
    return m;
}

/* Each trainable tensor's offset and size in the flat layout, in order. */
static int tensors(const kiln_model *m, size_t *offset, size_t *count)
{
    int n = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].n_params; p++)
            if (!m->graph.nodes[i].frozen) {
                offset[n] = m->graph.nodes[i].param_offset[p];
                count[n++] = (size_t)kiln_shape_size(&m->graph.nodes[i].params[p].shape);
            }
    return n;
}

/* The clip of g in float64, as kiln.h states it. */
static void reference(const kiln_model *m, const float *g, double *want)
{
    size_t offset[16], count[16];
    const int n = tensors(m, offset, count);
    const kiln_optimizer_options *o = &m->plan.optimizer;
    double all = 0.0;   /* over the tensors: the padding between them takes no part */
    for (size_t i = 0; i < m->plan.n_trainable_floats; i++)
        want[i] = g[i];
    for (int t = 0; t < n; t++)
        for (size_t i = offset[t]; i < offset[t] + count[t]; i++)
            all += (double)g[i] * g[i];
    for (int t = 0; t < n; t++) {
        double s = 0.0;
        for (size_t i = offset[t]; i < offset[t] + count[t]; i++)
            s += (double)g[i] * g[i];
        const double c = o->clipnorm, gc = o->global_clipnorm, v = o->clipvalue;
        const double f = c > 0 ? c / fmax(sqrt(s), c)
                       : gc > 0 ? fmin(1.0, gc / (sqrt(all) + 1e-6)) : 1.0;
        for (size_t i = offset[t]; i < offset[t] + count[t]; i++)
            want[i] = v > 0 ? fmin(fmax(g[i], -v), v) : g[i] * f;
    }
}

/* The device's clip and the host's against the reference, on a model
 * whose middle kernel spans several of clip.cl's chunks; then an infinity
 * and a NaN leave the gradient non-finite (all of it under a global norm;
 * clipvalue never clamps one to the limit). */
static void test_kernels(kiln_context *ctx)
{
    const struct {
        const char *name;
        kiln_optimizer_options o;
    } modes[] = {
        {.name = "clipnorm", .o = {.struct_size = sizeof(kiln_optimizer_options),
                                   .kind = KILN_OPTIMIZER_SGD, .clipnorm = 0.7f}},
        {.name = "clipvalue", .o = {.struct_size = sizeof(kiln_optimizer_options),
                                    .kind = KILN_OPTIMIZER_SGD, .clipvalue = 0.05f}},
        {.name = "global_clipnorm", .o = {.struct_size = sizeof(kiln_optimizer_options),
                                          .kind = KILN_OPTIMIZER_SGD,
                                          .global_clipnorm = 1.5f}},
    };
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        kiln_status st;
        kiln_model *m = build(ctx, 77, 91, &modes[k].o, NULL, &st);   /* 7007-float kernel */
        CHECK_OK(ctx, st);
        kiln_replica *r = m->placement.strategy->replica(m->placement.strategy_impl, 0);
        const size_t n = m->plan.n_trainable_floats;
        float *g = calloc(n, sizeof(float)), *got = calloc(n, sizeof(float));
        double *want = calloc(n, sizeof(double));
        uint32_t seed = 12345;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            g[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
        }
        /* The padding between tensors stays 0, as in training, where no
         * layer writes it (clipvalue's kernel runs over it, the norms not). */
        size_t offset[16], count[16], end = 0;
        const int n_tensors = tensors(m, offset, count);
        for (int t = 0; t < n_tensors; t++) {
            for (size_t i = end; i < offset[t]; i++)
                g[i] = 0.0f;
            end = offset[t] + count[t];
        }
        for (size_t i = end; i < n; i++)
            g[i] = 0.0f;
        CHECK(r->clip != NULL);
        for (int trial = 0; trial < 3; trial++) {
            if (trial == 1)
                g[5000] = INFINITY;   /* in d1's kernel */
            if (trial == 2)
                g[5000] = NAN;
            CHECK_OK(ctx, kiln_buffer_write(r->dev, r->grads, 0, g, n * sizeof(float), 1));
            CHECK_OK(ctx, kiln_clip_gradients(r->clip, r->grads));
            CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grads, 0, got, n * sizeof(float)));
            if (trial == 0) {
                reference(m, g, want);
                int changed = 0;
                for (size_t i = 0; i < n; i++)
                    changed += got[i] != g[i];
                double worst = 0.0;
                for (size_t i = 0; i < n; i++)
                    worst = fmax(worst, fabs(got[i] - want[i]) / fmax(1e-3, fabs(want[i])));
                printf("%-16s device vs float64: %.2e (%d of %zu clipped)\n", modes[k].name,
                       worst, changed, n);
                CHECK(worst <= 1e-6 && changed > 0);
                memcpy(got, g, n * sizeof(float));
                kiln_clip_host(m, got);
                worst = 0.0;
                for (size_t i = 0; i < n; i++)
                    worst = fmax(worst, fabs(got[i] - want[i]) / fmax(1e-3, fabs(want[i])));
                printf("%-16s host vs float64:   %.2e\n", modes[k].name, worst);
                CHECK(worst <= 1e-6);
                continue;
            }
            /* A non-finite element stays so; under a norm its whole tensor
             * (d0's kernel, 7007 floats; global: every tensor) becomes NaN. */
            size_t all = 0;
            for (int t = 0; t < n_tensors; t++)
                all += count[t];
            size_t nonfinite = 0;
            for (size_t i = 0; i < n; i++)
                nonfinite += !isfinite(got[i]);
            CHECK(!isfinite(got[5000]));
            CHECK(nonfinite == (k == 0 ? 7007 : k == 1 ? 1 : all));
        }
        if (k == 2) {
            /* Elements of 1e20: their squares overflow float, not double. In
             * double the clipped gradient's norm is the limit; in float the
             * norm is infinite and the gradient NaN (the step is skipped). */
            for (size_t i = 0; i < n; i++)
                g[i] = g[i] != 0.0f ? 1e20f : 0.0f;
            g[5000] = 1e20f;
            double squares = 0.0;
            CHECK_OK(ctx, kiln_buffer_write(r->dev, r->grads, 0, g, n * sizeof(float), 1));
            CHECK_OK(ctx, kiln_clip_measure(r->clip, r->grads));
            CHECK_OK(ctx, kiln_clip_read_squares(r->clip, &squares));
            CHECK_OK(ctx, kiln_clip_scale(r->clip, r->grads));
            CHECK_OK(ctx, kiln_buffer_read(r->dev, r->grads, 0, got, n * sizeof(float)));
            double norm = 0.0;
            for (size_t i = 0; i < n; i++)
                norm += (double)got[i] * got[i];
            printf("squares of 1e20 summed on the device: %g (%s); clipped norm %.7g\n", squares,
                   isfinite(squares) ? "double" : "float: the step would be skipped",
                   sqrt(norm));
            if (isfinite(squares))
                CHECK(fabs(sqrt(norm) - 1.5) < 1e-5);
            else
                CHECK(isnan(got[0]));
        }
        free(g);
        free(got);
        free(want);
        kiln_model_destroy(m);
    }
}

/* Negative, NaN and infinite settings, and two at once (Keras 3 refuses
 * any two), are refused by compile and kiln_learning_rate_at, naming the
 * setting and its value. */
static void test_refusals(kiln_context *ctx)
{
    const struct {
        kiln_optimizer_options o;
        const char *needle;
    } bad[] = {
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .clipnorm = -1.0f},
         .needle = "clipnorm is -1"},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .clipvalue = NAN},
         .needle = "clipvalue is nan"},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .global_clipnorm = INFINITY},
         .needle = "global_clipnorm is inf"},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .global_clipnorm = -0.5f},
         .needle = "global_clipnorm is -0.5"},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .clipnorm = 1.0f,
               .global_clipnorm = 1.0f},
         .needle = "only one of clipnorm (1), clipvalue (0) and global_clipnorm (1)"},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .clipnorm = 1.0f,
               .clipvalue = 0.5f},
         .needle = "only one of clipnorm"},
        {.o = {.struct_size = sizeof(kiln_optimizer_options), .clipvalue = 1.0f,
               .global_clipnorm = 2.0f},
         .needle = "only one of clipnorm"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        kiln_status st;
        kiln_model *m = build(ctx, IN, 8, &bad[k].o, NULL, &st);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[k].needle, st);
        kiln_model_destroy(m);
        double rate = 1.0;
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[k].needle,
                    kiln_learning_rate_at(ctx, &bad[k].o, 0, &rate));
        CHECK(rate == 0.0);
    }
    /* A caller built before the fields never sets them: off. */
    kiln_optimizer_options old = {.struct_size = offsetof(kiln_optimizer_options, clipnorm),
                                  .clipnorm = -1.0f, .clipvalue = NAN};
    kiln_status st;
    kiln_model *m = build(ctx, IN, 8, &old, NULL, &st);
    CHECK_OK(ctx, st);
    CHECK(m->plan.optimizer.clipnorm == 0.0f && m->plan.optimizer.clipvalue == 0.0f);
    kiln_model_destroy(m);
}

/* A model file and a checkpoint keep the settings; a model without
 * clipping writes none of the keys. */
static void test_model_file(kiln_context *ctx)
{
    const char *path = "test_clipping_model.kiln";
    const kiln_optimizer_options o = {.struct_size = sizeof o, .kind = KILN_OPTIMIZER_SGD,
                                      .global_clipnorm = 2.5f};
    kiln_status st;
    kiln_model *m = build(ctx, IN, 8, &o, NULL, &st);
    CHECK_OK(ctx, st);
    CHECK_OK(ctx, kiln_model_save(m, path));
    kiln_model *back = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &back));
    CHECK(back && back->plan.optimizer.global_clipnorm == 2.5f &&
          back->plan.optimizer.clipnorm == 0.0f && back->plan.optimizer.clipvalue == 0.0f);
    CHECK(back && kiln_model_training_hash(back) == kiln_model_training_hash(m));
    kiln_model_destroy(back);
    CHECK_OK(ctx, kiln_model_save_checkpoint(m, path));
    back = NULL;
    CHECK_OK(ctx, kiln_model_load(ctx, path, NULL, &back));
    CHECK(back && back->plan.optimizer.global_clipnorm == 2.5f);
    kiln_model_destroy(back);
    kiln_model_destroy(m);
    const kiln_optimizer_options off = {.struct_size = sizeof off, .kind = KILN_OPTIMIZER_SGD};
    m = build(ctx, IN, 8, &off, NULL, &st);
    char *text = NULL;
    size_t length = 0;
    CHECK_OK(ctx, kiln_model_describe(m, "test", 0, &text, &length));
    CHECK(text && !strstr(text, "clip"));
    kiln_free(ctx, text);
    kiln_model_destroy(m);
    remove(path);
}

/* --dump DIR: 20 steps of each case on the same batches from the same
 * initial weights; DIR/cases.txt lists them for torch_clipping.py. */
static void dump(kiln_context *ctx, const char *dir)
{
    enum { n = STEPS * BATCH };
    static float x[n * IN], y[n * 3];
    uint32_t seed = 99;
    for (size_t i = 0; i < n * IN; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f * 4.0f - 2.0f;
    }
    for (size_t i = 0; i < n; i++)   /* large targets: large gradients */
        for (int j = 0; j < 3; j++)
            y[i * 3 + j] = 8.0f * sinf(x[i * IN + j] + 2.0f * x[i * IN + j + 3]) + 4.0f * (float)j;
    dump_floats(dir, "x.f32", x, n * IN);
    dump_floats(dir, "y.f32", y, n * 3);
    char path[512];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *list = fopen(path, "w");
    CHECK(list != NULL);
    if (!list)
        return;
#define OPT(...) {.struct_size = sizeof(kiln_optimizer_options), __VA_ARGS__}
    const struct {
        const char *name, *frozen;
        kiln_optimizer_options o;
    } cases[] = {
        {.name = "sgd_clipnorm", .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f,
                                          .clipnorm = 1.0f)},
        {.name = "sgd_clipvalue", .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f,
                                           .clipvalue = 0.5f)},
        {.name = "sgd_global_clipnorm", .o = OPT(.kind = KILN_OPTIMIZER_SGD,
                                                 .learning_rate = 0.05f, .momentum = 0.5f,
                                                 .global_clipnorm = 2.0f)},
        {.name = "adam_global_clipnorm", .o = OPT(.kind = KILN_OPTIMIZER_ADAM,
                                                  .learning_rate = 0.01f,
                                                  .global_clipnorm = 2.0f)},
        {.name = "sgd_global_clipnorm_frozen", .frozen = "d0",
         .o = OPT(.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .global_clipnorm = 2.0f)},
    };
#undef OPT
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = n, .feature_rank = 1,
                                .feature_dims = {IN}, .features = x,
                                .label_kind = KILN_LABELS_DENSE, .label_size = 3,
                                .dense_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_status st;
        kiln_model *m = build(ctx, IN, 8, &cases[k].o, cases[k].frozen, &st);
        CHECK_OK(ctx, st);
        int64_t count = 0;
        kiln_model_parameter_count(m, &count);
        float *w = calloc((size_t)count, sizeof(float));
        char name[96];
        CHECK_OK(ctx, kiln_model_get_weights(m, w, count));
        snprintf(name, sizeof name, "%s.init.f32", cases[k].name);
        dump_floats(dir, name, w, (size_t)count);
        const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 1, .batch_size = BATCH,
                                     .no_shuffle = 1, .verbosity = KILN_VERBOSE_SILENT};
        CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
        CHECK_OK(ctx, kiln_model_get_weights(m, w, count));
        snprintf(name, sizeof name, "%s.final.f32", cases[k].name);
        dump_floats(dir, name, w, (size_t)count);
        const kiln_optimizer_options *o = &m->plan.optimizer;
        fprintf(list, "%s %s %.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g %s\n", cases[k].name,
                o->kind == KILN_OPTIMIZER_ADAM ? "adam" : "sgd", o->learning_rate, o->momentum,
                o->beta_1, o->beta_2, o->epsilon, o->clipnorm, o->clipvalue,
                o->global_clipnorm, cases[k].frozen ? cases[k].frozen : "-");
        free(w);
        kiln_model_destroy(m);
    }
    fclose(list);
    kiln_dataset_destroy(ds);
}

int main(int argc, char **argv)
{
    kiln_context *ctx = context();
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        dump(ctx, argv[2]);
        kiln_context_destroy(ctx);
        return test_finish("test_clipping --dump");
    }
    test_kernels(ctx);
    test_refusals(ctx);
    test_model_file(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_clipping");
}
