/* Option structs grow without breaking callers: no options struct holds
 * another by value, each nested one is read as its own struct_size says
 * (an older caller's shorter struct, a newer caller's longer one, an array
 * whose elements are as far apart as their struct_size), and a NULL or
 * zeroed struct is the documented defaults. */
#include "harness.h"
#include "runtime/model/model.h"

#include <stddef.h>

enum { SAMPLES = 40, FEATURES = 6, CLASSES = 3 };

/* A caller built against a later kiln, whose structs have a field more. */
typedef struct newer_optimizer {
    kiln_optimizer_options known;
    double later;
} newer_optimizer;
typedef struct newer_schedule {
    kiln_lr_schedule known;
    double later;
} newer_schedule;
typedef struct newer_loss {
    kiln_output_loss known;
    double later;
} newer_loss;
typedef struct newer_dropout {
    kiln_dropout_options known;
    double later;
} newer_dropout;
typedef struct newer_batch {
    kiln_batch_arrays known;
    double later;
} newer_batch;
typedef struct newer_buffers {
    kiln_sample_buffers known;
    double later;
} newer_buffers;
typedef struct newer_labels {
    kiln_label_array known;
    double later;
} newer_labels;

static kiln_model *classifier(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {FEATURES};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* Compiles a classifier with `optimizer`; NULL on failure (checked). */
static kiln_model *compiled(kiln_context *ctx, const kiln_optimizer_options *optimizer)
{
    kiln_model *m = classifier(ctx);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = optimizer};
    const kiln_status st = kiln_model_compile(m, &co);
    CHECK_OK(ctx, st);
    if (st == KILN_OK)
        return m;
    kiln_model_destroy(m);
    return NULL;
}

static int summary_has(kiln_model *m, const char *line)
{
    char text[4096];
    return kiln_model_summary(m, text, sizeof text, NULL) == KILN_OK && strstr(text, line);
}

/* The nested structs are pointers: a struct that grows moves nothing after
 * it in the struct that holds it. */
static void test_layout(void)
{
    CHECK(sizeof(((kiln_compile_options *)NULL)->optimizer) ==
          sizeof(const kiln_optimizer_options *));
    CHECK(sizeof(((kiln_optimizer_options *)NULL)->schedule) == sizeof(const kiln_lr_schedule *));
    CHECK(offsetof(kiln_lr_schedule, struct_size) == 0);
    CHECK(offsetof(kiln_output_loss, struct_size) == 0);
    CHECK(offsetof(kiln_input_array, struct_size) == 0);
    CHECK(offsetof(kiln_label_array, struct_size) == 0);
    CHECK(offsetof(kiln_sample_buffers, struct_size) == 0);
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
             KILN_VERSION_PATCH);
    CHECK(strcmp(kiln_version(), version) == 0 && strcmp(version, "0.2.0") == 0);
}

/* NULL: Adam with Keras's defaults, a constant rate. */
static void test_null_defaults(kiln_context *ctx)
{
    kiln_model *m = compiled(ctx, NULL);
    if (!m)
        return;
    CHECK(m->plan.optimizer.kind == KILN_OPTIMIZER_ADAM &&
          m->plan.optimizer.learning_rate == 1e-3f && m->plan.optimizer.beta_1 == 0.9f &&
          m->plan.optimizer.beta_2 == 0.999f && m->plan.optimizer.epsilon == 1e-7f);
    CHECK(m->plan.optimizer.schedule == &m->plan.lr_schedule &&
          m->plan.lr_schedule.kind == KILN_LR_CONSTANT);
    CHECK(kiln_model_learning_rate(m, 0) == (double)1e-3f);
    CHECK(kiln_model_learning_rate(m, 100000) == (double)1e-3f);
    CHECK(summary_has(m, "\nOptimizer: adam, learning rate 0.001\n"));
    kiln_model_destroy(m);

    /* A zeroed struct means what NULL does; so does a NULL schedule. */
    const kiln_optimizer_options zero = {.struct_size = sizeof zero};
    m = compiled(ctx, &zero);
    if (m)
        CHECK(kiln_model_learning_rate(m, 7) == (double)1e-3f &&
              m->plan.optimizer.kind == KILN_OPTIMIZER_ADAM &&
              m->plan.lr_schedule.kind == KILN_LR_CONSTANT);
    kiln_model_destroy(m);
    CHECK(test_learning_rate(ctx, NULL, 5) == (double)1e-3f);
    CHECK(test_learning_rate(ctx, &zero, 5) == (double)1e-3f);
}

/* The model keeps its own schedule: the caller's may change or go. */
static void test_schedule_copied(kiln_context *ctx)
{
    kiln_lr_schedule step = {.struct_size = sizeof step, .kind = KILN_LR_STEP_DECAY,
                             .decay_steps = 10, .decay_rate = 0.5f};
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .learning_rate = 0.08f, .schedule = &step};
    kiln_model *m = compiled(ctx, &sgd);
    step = (kiln_lr_schedule){.struct_size = 1, .kind = (kiln_lr_schedule_kind)99};
    if (m) {
        CHECK(m->plan.optimizer.schedule == &m->plan.lr_schedule);
        CHECK(fabs(kiln_model_learning_rate(m, 9) - 0.08) < 1e-7);
        CHECK(fabs(kiln_model_learning_rate(m, 25) - 0.02) < 1e-7);
        CHECK(summary_has(m, "\nOptimizer: sgd, learning rate 0.08\n"));
    }
    kiln_model_destroy(m);
}

/* struct_size says how much of each struct the caller knows. */
static void test_sizes(kiln_context *ctx)
{
    const kiln_lr_schedule halve = {.struct_size = sizeof halve, .kind = KILN_LR_STEP_DECAY,
                                    .decay_steps = 1, .decay_rate = 0.5f};
    kiln_optimizer_options sgd = {.kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.1f,
                                  .schedule = &halve};

    /* The size an application built with this header passes, which later,
     * larger versions of the struct keep accepting. */
    sgd.struct_size = offsetof(kiln_optimizer_options, schedule) + sizeof sgd.schedule;
    kiln_model *m = compiled(ctx, &sgd);
    if (m)
        CHECK(fabs(kiln_model_learning_rate(m, 2) - 0.025) < 1e-7);
    kiln_model_destroy(m);
    CHECK(fabs(test_learning_rate(ctx, &sgd, 2) - 0.025) < 1e-8);

    /* A caller that knew no schedule yet: the pointer after its struct_size
     * is not read, and the rate is constant. */
    sgd.struct_size = offsetof(kiln_optimizer_options, schedule);
    m = compiled(ctx, &sgd);
    if (m)
        CHECK(fabs(kiln_model_learning_rate(m, 2) - 0.1) < 1e-7 &&
              m->plan.lr_schedule.kind == KILN_LR_CONSTANT);
    kiln_model_destroy(m);

    /* A newer caller's longer structs: what this kiln does not know is left
     * alone. */
    const newer_schedule later_schedule = {
        .known = {.struct_size = sizeof later_schedule, .kind = KILN_LR_STEP_DECAY,
                  .decay_steps = 1, .decay_rate = 0.5f},
        .later = 1.0};
    const newer_optimizer later = {
        .known = {.struct_size = sizeof later, .kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.1f,
                  .schedule = &later_schedule.known},
        .later = 1.0};
    m = compiled(ctx, &later.known);
    if (m)
        CHECK(fabs(kiln_model_learning_rate(m, 3) - 0.0125) < 1e-7);
    kiln_model_destroy(m);

    /* Sizes that cannot even hold struct_size are refused, naming the struct;
     * 0 is this header's size. */
    m = classifier(ctx);
    kiln_lr_schedule schedule = {.struct_size = 4};
    kiln_optimizer_options opt = {.struct_size = 4, .schedule = &schedule};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &opt};
    char want[128];
    snprintf(want, sizeof want, "kiln_model_compile: kiln_optimizer_options.struct_size is 4; "
             "it must be 0 or at least %zu", sizeof(size_t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_compile(m, &co));
    double rate;
    snprintf(want, sizeof want, "kiln_learning_rate_at: kiln_optimizer_options.struct_size is 4; "
             "it must be 0 or at least %zu", sizeof(size_t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want,
                kiln_learning_rate_at(ctx, &opt, 0, &rate));
    opt.struct_size = 0;
    snprintf(want, sizeof want, "kiln_model_compile: kiln_lr_schedule.struct_size is 4; "
             "it must be 0 or at least %zu", sizeof(size_t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_compile(m, &co));
    snprintf(want, sizeof want, "kiln_learning_rate_at: kiln_lr_schedule.struct_size is 4; "
             "it must be 0 or at least %zu", sizeof(size_t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want,
                kiln_learning_rate_at(ctx, &opt, 0, &rate));
    schedule.struct_size = 0;
    CHECK(test_learning_rate(ctx, &opt, 0) == (double)1e-3f);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* Arrays of structs: element 0's struct_size is the distance between
 * elements, the same in every one (0: this header's size). */
static void test_arrays(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {FEATURES};
    const kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = CLASSES,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options b = {.struct_size = sizeof b, .name = "b", .units = 2};
    const kiln_node x = kiln_input(m, 1, dims, NULL);
    const kiln_node heads[2] = {kiln_dense(m, x, &a), kiln_dense(m, x, &b)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    newer_loss losses[2] = {
        {.known = {.struct_size = sizeof(newer_loss),
                   .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY},
         .later = 1.0},
        {.known = {.struct_size = sizeof(newer_loss) + 8, .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                   .weight = 0.5f},
         .later = 1.0}};
    const kiln_compile_options co = {.struct_size = sizeof co, .n_outputs = 2,
                                     .outputs = &losses[0].known};
    char want[256];
    snprintf(want, sizeof want, "kiln_model_compile: kiln_compile_options.outputs[1].struct_size "
             "is %zu but kiln_compile_options.outputs[0]'s is %zu", sizeof(newer_loss) + 8,
             sizeof(newer_loss));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_compile(m, &co));
    losses[1].known.struct_size = 0;   /* as long as element 0 */
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK(summary_has(m, "\nLoss of output 'b': mean_squared_error x 0.5\n"));
    CHECK(m->plan.heads[1].loss == KILN_LOSS_MEAN_SQUARED_ERROR && m->plan.head_weight[1] == 0.5f);
    kiln_model_destroy(m);

    static float features[SAMPLES * FEATURES], targets[SAMPLES * 2];
    static int32_t classes[SAMPLES];
    newer_labels labels[2] = {
        {.known = {.struct_size = sizeof(newer_labels), .sparse_labels = classes,
                   .num_classes = CLASSES}},
        {.known = {.label_kind = KILN_LABELS_DENSE, .dense_labels = targets, .label_size = 2}}};
    const kiln_input_array inputs[1] = {{.rank = 1, .dims = {FEATURES}, .features = features}};
    kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = SAMPLES, .n_inputs = 1,
                             .inputs = inputs, .n_outputs = 2, .outputs = &labels[0].known};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    int32_t rank = 0, shape[KILN_MAX_RANK];
    CHECK_OK(ctx, kiln_dataset_sample_shape(ds, &rank, shape, NULL));
    CHECK(rank == 1 && shape[0] == FEATURES);
    kiln_dataset_destroy(ds);
    ds = NULL;
    labels[1].known.struct_size = sizeof(kiln_label_array);
    snprintf(want, sizeof want, "kiln_arrays_desc.outputs[1].struct_size is %zu but "
             "kiln_arrays_desc.outputs[0]'s is %zu", sizeof(kiln_label_array),
             sizeof(newer_labels));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want,
                kiln_dataset_from_arrays(ctx, &desc, &ds));
    CHECK(ds == NULL);
    const kiln_input_array short_input[1] = {{.struct_size = 2, .rank = 1, .dims = {FEATURES},
                                              .features = features}};
    labels[1].known.struct_size = 0;
    desc.inputs = short_input;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT,
                "kiln_arrays_desc.inputs[0].struct_size is 2; it must be 0 or at least",
                kiln_dataset_from_arrays(ctx, &desc, &ds));
}

/* A zeroed kiln_fit_options, or NULL, is Keras's fit: 1 epoch, batch 32. */
static void test_fit_defaults(kiln_context *ctx)
{
    static float x[SAMPLES * FEATURES];
    static int32_t y[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        y[i] = i % CLASSES;
        for (int j = 0; j < FEATURES; j++)
            x[i * FEATURES + j] = (float)((i * 7 + j * 3) % 11) / 11.0f;
    }
    const kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = SAMPLES,
                                   .feature_rank = 1, .feature_dims = {FEATURES}, .features = x,
                                   .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    const kiln_fit_options zeroed = {.struct_size = sizeof zeroed,
                                     .verbosity = KILN_VERBOSE_SILENT};
    /* An older caller's shorter struct: the fields it lacks are defaults. */
    const kiln_fit_options older = {.struct_size = offsetof(kiln_fit_options, no_shuffle),
                                    .verbosity = KILN_VERBOSE_SILENT};
    const kiln_fit_options *cases[] = {&zeroed, &older, NULL};
    for (int c = 0; c < 3; c++) {
        kiln_model *m = compiled(ctx, NULL);
        if (!m)
            continue;
        CHECK_OK(ctx, kiln_model_fit(m, ds, cases[c]));
        int32_t epochs = 0;
        kiln_training_stats stats = {.struct_size = sizeof stats};
        kiln_epoch_record e = {.struct_size = sizeof e};
        CHECK_OK(ctx, kiln_model_history_count(m, &epochs));
        CHECK_OK(ctx, kiln_model_training_stats(m, &stats));
        CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &e));
        /* 40 samples in batches of 32: two steps. */
        CHECK(epochs == 1 && stats.steps == 2 && e.samples == SAMPLES);
        kiln_model_destroy(m);
    }
    /* batch_size 0 beside per_replica_batch_size: the global batch it makes. */
    kiln_model *m = compiled(ctx, NULL);
    if (m) {
        const kiln_fit_options per = {.struct_size = sizeof per, .per_replica_batch_size = 8,
                                      .verbosity = KILN_VERBOSE_SILENT};
        CHECK_OK(ctx, kiln_model_fit(m, ds, &per));
        int32_t replicas = 0;
        kiln_training_stats stats = {.struct_size = sizeof stats};
        CHECK_OK(ctx, kiln_model_distribution(m, NULL, &replicas));
        CHECK_OK(ctx, kiln_model_training_stats(m, &stats));
        const int32_t global = 8 * replicas;
        CHECK(replicas >= 1 && stats.steps == (SAMPLES + global - 1) / global);
    }
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
}

/* Zero means Keras's default whatever its sign (-0.0f is 0); a has_* field
 * asks for 0 itself. */
static void test_zero_is_default(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {FEATURES};
    const kiln_dense_options a = {.struct_size = sizeof a, .name = "a", .units = CLASSES,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options b = {.struct_size = sizeof b, .name = "b", .units = 2};
    const kiln_dense_options c = {.struct_size = sizeof c, .name = "c", .units = 2};
    const kiln_node x = kiln_input(m, 1, dims, NULL);
    const kiln_node heads[3] = {kiln_dense(m, x, &a), kiln_dense(m, x, &b),
                                kiln_dense(m, x, &c)};
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 3));
    const kiln_output_loss losses[3] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .weight = -0.0f},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .has_weight = 1, .weight = -0.0f},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .has_weight = 1, .weight = 0.25f}};
    const kiln_compile_options co = {.struct_size = sizeof co, .n_outputs = 3,
                                     .outputs = losses};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK(m->plan.head_weight[0] == 1.0f);
    CHECK(m->plan.head_weight[1] == 0.0f && !signbit(m->plan.head_weight[1]));
    CHECK(m->plan.head_weight[2] == 0.25f);
    kiln_model_destroy(m);

    kiln_compile_options one = {.struct_size = sizeof one, .loss = KILN_LOSS_MEAN_SQUARED_ERROR,
                                .binary_accuracy = 1, .binary_threshold = -0.0f};
    const float want[3] = {0.5f, 0.0f, 0.0f};
    for (int i = 0; i < 3; i++) {
        m = classifier(ctx);
        one.has_binary_threshold = i > 0;
        one.binary_threshold = i == 2 ? 0.0f : -0.0f;
        CHECK_OK(ctx, kiln_model_compile(m, &one));
        CHECK(m->plan.heads[0].threshold == want[i] && !signbit(m->plan.heads[0].threshold));
        kiln_model_destroy(m);
    }
}

/* A model that `build` begins (its Input and the layer under test) and a
 * softmax head ends, compiled: its status, and layer `at`'s name through
 * *name (room for 64). */
static kiln_status compile_with(kiln_context *ctx, void (*build)(kiln_model *, const void *),
                                const void *options, int32_t at, char *name)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_dense_options head = {.struct_size = sizeof head, .units = CLASSES,
                                     .activation = KILN_ACTIVATION_SOFTMAX};
    build(m, options);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    const kiln_status st = kiln_model_compile(m, &co);
    kiln_layer_info li = {.struct_size = sizeof li};
    name[0] = '\0';
    if (kiln_model_layer_info(m, at, &li) == KILN_OK)
        snprintf(name, 64, "%s", li.name);
    kiln_model_destroy(m);
    return st;
}

static kiln_node vector_input(kiln_model *m)
{
    const int32_t dims[] = {FEATURES};
    return kiln_input(m, 1, dims, NULL);
}

static void add_dropout(kiln_model *m, const void *options)
{
    kiln_dropout(m, vector_input(m), options);
}

/* kiln_dropout_options: NULL, a newer caller's longer struct, and an older
 * one that stops before rate (whatever follows in its memory is not read). */
static void test_dropout_options(kiln_context *ctx)
{
    char name[64];
    CHECK_OK(ctx, compile_with(ctx, add_dropout, NULL, 1, name));
    CHECK(strcmp(name, "dropout") == 0);
    newer_dropout later = {.known = {.struct_size = sizeof later, .name = "drop", .rate = 0.5f},
                           .later = 1.0};
    CHECK_OK(ctx, compile_with(ctx, add_dropout, &later.known, 1, name));
    CHECK(strcmp(name, "drop") == 0);
    later.known.rate = 2.0f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "rate must be in [0, 1), got 2",
                compile_with(ctx, add_dropout, &later.known, 1, name));
    later.known.struct_size = offsetof(kiln_dropout_options, rate);
    CHECK_OK(ctx, compile_with(ctx, add_dropout, &later.known, 1, name));
    CHECK(strcmp(name, "drop") == 0);
}

/* The builders whose options hold only a name, each with that layer after
 * an Input (an Input itself for kiln_input). Their structs share one
 * layout, {struct_size, name}, which `named` below extends as a newer
 * header's would. */
static void add_input(kiln_model *m, const void *o)
{
    const int32_t dims[] = {FEATURES};
    kiln_input(m, 1, dims, o);
}
static void add_flatten(kiln_model *m, const void *o)
{
    kiln_flatten(m, vector_input(m), o);
}
static void add_global_pool(kiln_model *m, const void *o)
{
    const int32_t dims[] = {2, 3, FEATURES};
    kiln_global_average_pooling2d(m, kiln_input(m, 3, dims, NULL), o);
}
static void add_global_max_pool(kiln_model *m, const void *o)
{
    const int32_t dims[] = {2, 3, FEATURES};
    kiln_global_max_pooling2d(m, kiln_input(m, 3, dims, NULL), o);
}
static void add_activation(kiln_model *m, const void *o)
{
    kiln_activation_layer(m, vector_input(m), KILN_ACTIVATION_RELU, o);
}
static void add_reshape(kiln_model *m, const void *o)
{
    const int32_t dims[] = {2, FEATURES / 2};
    kiln_flatten(m, kiln_reshape(m, vector_input(m), 2, dims, o), NULL);
}
static void add_add(kiln_model *m, const void *o)
{
    const kiln_node x = vector_input(m), pair[2] = {x, x};
    kiln_add(m, pair, 2, o);
}
static void add_dot(kiln_model *m, const void *o)
{
    const kiln_node x = vector_input(m);
    kiln_dot(m, x, x, o);
}
static void add_math_pow(kiln_model *m, const void *o)
{
    kiln_math(m, vector_input(m), KILN_MATH_POW, o);
}
static void add_math_clip(kiln_model *m, const void *o)
{
    kiln_math(m, vector_input(m), KILN_MATH_CLIP, o);
}

static void add_matmul(kiln_model *m, const void *o)
{
    const int32_t dims[] = {2, 2};
    const kiln_node x = kiln_input(m, 2, dims, NULL);
    kiln_flatten(m, kiln_matmul(m, x, x, o), NULL);
}
static void add_concatenate(kiln_model *m, const void *o)
{
    const kiln_node x = vector_input(m), pair[2] = {x, x};
    kiln_concatenate(m, pair, 2, o);
}

static void add_reduce(kiln_model *m, const void *o)
{
    const int32_t dims[] = {2, FEATURES / 2}, axes[] = {1};
    kiln_flatten(m, kiln_reduce(m, kiln_input(m, 2, dims, NULL), KILN_REDUCE_SUM, 1, axes, o),
                 NULL);
}
static void add_softmax(kiln_model *m, const void *o)
{
    kiln_softmax(m, vector_input(m), o);
}

/* NULL, a newer caller's longer struct and an older one that stops before
 * the name (whatever follows in its memory is not read), for each. */
static void test_name_options(kiln_context *ctx)
{
    const struct {
        void (*build)(kiln_model *, const void *);
        int32_t at;
        const char *default_name;
    } builders[] = {
        {.build = add_input, .at = 0, .default_name = "input_layer"},
        {.build = add_flatten, .at = 1, .default_name = "flatten"},
        {.build = add_global_pool, .at = 1, .default_name = "global_average_pooling2d"},
        {.build = add_global_max_pool, .at = 1, .default_name = "global_max_pooling2d"},
        {.build = add_reshape, .at = 1, .default_name = "reshape"},
        {.build = add_add, .at = 1, .default_name = "add"},
        {.build = add_dot, .at = 1, .default_name = "dot"},
        {.build = add_matmul, .at = 1, .default_name = "matmul"},
    };
    struct {
        kiln_flatten_options known;   /* the layout of every name-only struct */
        double later;
    } named = {.known = {.struct_size = sizeof named, .name = "mine"}, .later = 1.0};
    char name[64];
    for (size_t i = 0; i < sizeof builders / sizeof builders[0]; i++) {
        CHECK_OK(ctx, compile_with(ctx, builders[i].build, NULL, builders[i].at, name));
        CHECK(strcmp(name, builders[i].default_name) == 0);
        named.known.struct_size = sizeof named;
        CHECK_OK(ctx, compile_with(ctx, builders[i].build, &named, builders[i].at, name));
        CHECK(strcmp(name, "mine") == 0);
        named.known.struct_size = offsetof(kiln_flatten_options, name);
        CHECK_OK(ctx, compile_with(ctx, builders[i].build, &named, builders[i].at, name));
        CHECK(strcmp(name, builders[i].default_name) == 0);
    }
    CHECK(sizeof(kiln_input_options) == sizeof(kiln_flatten_options) &&
          sizeof(kiln_global_pool2d_options) == sizeof(kiln_flatten_options) &&
          sizeof(kiln_reshape_options) == sizeof(kiln_flatten_options) &&
          sizeof(kiln_add_options) == sizeof(kiln_flatten_options) &&
          sizeof(kiln_dot_options) == sizeof(kiln_flatten_options) &&
          sizeof(kiln_matmul_options) == sizeof(kiln_flatten_options));

    /* kiln_concatenate_options: its axis too (0: -1). */
    struct {
        kiln_concatenate_options known;
        double later;
    } join = {.known = {.struct_size = sizeof join, .name = "join", .axis = 1}, .later = 1.0};
    CHECK_OK(ctx, compile_with(ctx, add_concatenate, NULL, 1, name));
    CHECK(strcmp(name, "concatenate") == 0);
    CHECK_OK(ctx, compile_with(ctx, add_concatenate, &join, 1, name));
    CHECK(strcmp(name, "join") == 0);
    join.known.axis = 2;   /* past a vector's one axis: read, so refused */
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'join' (concatenate): axis 2 is out of range",
                compile_with(ctx, add_concatenate, &join, 1, name));
    join.known.struct_size = offsetof(kiln_concatenate_options, axis);
    CHECK_OK(ctx, compile_with(ctx, add_concatenate, &join, 1, name));   /* axis not read */
    CHECK(strcmp(name, "join") == 0);

    /* kiln_activation_layer_options: its negative_slope too, which only
     * leaky_relu takes (add_activation builds a ReLU). */
    struct {
        kiln_activation_layer_options known;
        double later;
    } act = {.known = {.struct_size = sizeof act, .name = "act"}, .later = 1.0};
    CHECK_OK(ctx, compile_with(ctx, add_activation, NULL, 1, name));
    CHECK(strcmp(name, "activation") == 0);
    CHECK_OK(ctx, compile_with(ctx, add_activation, &act, 1, name));
    CHECK(strcmp(name, "act") == 0);
    act.known.negative_slope = 0.1f;   /* read, and not ReLU's: refused */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "negative_slope is leaky_relu's",
                compile_with(ctx, add_activation, &act, 1, name));
    act.known.struct_size = offsetof(kiln_activation_layer_options, negative_slope);
    CHECK_OK(ctx, compile_with(ctx, add_activation, &act, 1, name));   /* slope not read */
    CHECK(strcmp(name, "act") == 0);
    act.known.struct_size = offsetof(kiln_activation_layer_options, name);
    CHECK_OK(ctx, compile_with(ctx, add_activation, &act, 1, name));
    CHECK(strcmp(name, "activation") == 0);

    /* kiln_reduce_options: its keepdims too (the reduced axis kept, of 1). */
    struct {
        kiln_reduce_options known;
        double later;
    } sum = {.known = {.struct_size = sizeof sum, .name = "sum", .keepdims = 1}, .later = 1.0};
    CHECK_OK(ctx, compile_with(ctx, add_reduce, NULL, 1, name));
    CHECK(strcmp(name, "reduce") == 0);
    CHECK_OK(ctx, compile_with(ctx, add_reduce, &sum, 1, name));
    CHECK(strcmp(name, "sum") == 0);
    sum.known.struct_size = offsetof(kiln_reduce_options, keepdims);
    CHECK_OK(ctx, compile_with(ctx, add_reduce, &sum, 1, name));   /* keepdims not read */
    CHECK(strcmp(name, "sum") == 0);
    sum.known.struct_size = offsetof(kiln_reduce_options, name);
    CHECK_OK(ctx, compile_with(ctx, add_reduce, &sum, 1, name));
    CHECK(strcmp(name, "reduce") == 0);

    /* kiln_softmax_options: axis, through_last and log (0: the last axis). */
    struct {
        kiln_softmax_options known;
        double later;
    } soft = {.known = {.struct_size = sizeof soft, .name = "soft", .axis = 2}, .later = 1.0};
    CHECK_OK(ctx, compile_with(ctx, add_softmax, NULL, 1, name));
    CHECK(strcmp(name, "softmax") == 0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'soft' (softmax): axis 2 is out of "
                "range", compile_with(ctx, add_softmax, &soft, 1, name));   /* read */
    soft.known.struct_size = offsetof(kiln_softmax_options, axis);
    CHECK_OK(ctx, compile_with(ctx, add_softmax, &soft, 1, name));   /* axis not read */
    CHECK(strcmp(name, "soft") == 0);
    soft.known.struct_size = offsetof(kiln_softmax_options, name);
    CHECK_OK(ctx, compile_with(ctx, add_softmax, &soft, 1, name));
    CHECK(strcmp(name, "softmax") == 0);

    /* kiln_math_options: the constants read up to struct_size only (a NaN
     * past it is not read, so not refused). */
    struct {
        kiln_math_options known;
        double later;
    } math = {.known = {.struct_size = sizeof math, .name = "m", .exponent = NAN},
              .later = 1.0};
    CHECK_OK(ctx, compile_with(ctx, add_math_pow, NULL, 1, name));
    CHECK(strcmp(name, "math") == 0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'm' (math): exponent is nan",
                compile_with(ctx, add_math_pow, &math, 1, name));
    math.known.struct_size = offsetof(kiln_math_options, exponent);
    CHECK_OK(ctx, compile_with(ctx, add_math_pow, &math, 1, name));
    CHECK(strcmp(name, "m") == 0);
    math.known = (kiln_math_options){.struct_size = sizeof math, .name = "c", .has_min = 1,
                                     .min = -1.0f, .has_max = 1, .max = NAN};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'c' (math): clip's max is NaN",
                compile_with(ctx, add_math_clip, &math, 1, name));
    math.known.struct_size = offsetof(kiln_math_options, has_max);
    CHECK_OK(ctx, compile_with(ctx, add_math_clip, &math, 1, name));
    CHECK(strcmp(name, "c") == 0);
}

/* kiln_batch_arrays: a newer caller's longer struct, and an older one
 * that stops before the fields it does not know (never read). */
static void test_batch_arrays(kiln_context *ctx)
{
    kiln_model *m = compiled(ctx, NULL);
    if (!m)
        return;
    static float x[4 * FEATURES], out[4 * CLASSES];
    const int32_t classes[4] = {0, 1, 2, 1};
    newer_batch b = {.known = {.struct_size = sizeof b, .count = 4, .features = x,
                               .sparse_labels = classes},
                     .later = 1.0};
    CHECK_OK(ctx, kiln_model_train_on_batch(m, &b.known, NULL));
    b.known.n_outputs = 7;   /* past an older struct_size: not read */
    b.known.struct_size = offsetof(kiln_batch_arrays, dense_labels);
    CHECK_OK(ctx, kiln_model_test_on_batch(m, &b.known, NULL));
    b.known.struct_size = offsetof(kiln_batch_arrays, sparse_labels);
    CHECK_OK(ctx, kiln_model_predict_on_batch(m, &b.known, out));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "set exactly one of kiln_batch_arrays."
                "sparse_labels, dense_labels and outputs (0 are set)",
                kiln_model_train_on_batch(m, &b.known, NULL));
    kiln_model_destroy(m);
}

/* kiln_sample_buffers: NULL reads and checks the sample, writing nothing;
 * a newer caller's longer struct; an older one that stops before the
 * fields it does not know (never read, never written). */
static void test_sample_buffers(kiln_context *ctx)
{
    static float x[3 * FEATURES];
    const int32_t classes[3] = {2, 0, 1};
    for (int i = 0; i < 3 * FEATURES; i++)
        x[i] = (float)i;
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = 3, .feature_rank = 1,
                                .feature_dims = {FEATURES}, .features = x,
                                .sparse_labels = classes};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    if (!ds)
        return;
    CHECK_OK(ctx, kiln_dataset_read(ds, 2, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "index 3 is not in [0, 3)",
                kiln_dataset_read(ds, 3, NULL));
    float f[FEATURES] = {0};
    int32_t y = -1, untouched = -7;
    newer_buffers b = {.known = {.struct_size = sizeof b, .features = f, .sparse_labels = &y},
                       .later = 1.0};
    CHECK_OK(ctx, kiln_dataset_read(ds, 1, &b.known));
    CHECK(f[0] == (float)FEATURES && f[FEATURES - 1] == (float)(2 * FEATURES - 1) && y == 0);
    b.known.sparse_labels = &untouched;   /* past an older struct_size: not written */
    b.known.dense_labels = f;             /* the wrong kind, but not read either */
    b.known.struct_size = offsetof(kiln_sample_buffers, sparse_labels);
    CHECK_OK(ctx, kiln_dataset_read(ds, 0, &b.known));
    CHECK(f[1] == 1.0f && untouched == -7);
    b.known.struct_size = 0;   /* 0: this header's, so both are read */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->dense_labels is set",
                kiln_dataset_read(ds, 0, &b.known));
    kiln_dataset_destroy(ds);
}

int main(void)
{
    test_layout();
    kiln_context *ctx = test_context(1);
    if (!ctx)
        SKIP("no OpenCL device");
    test_null_defaults(ctx);
    test_schedule_copied(ctx);
    test_sizes(ctx);
    test_arrays(ctx);
    test_fit_defaults(ctx);
    test_zero_is_default(ctx);
    test_dropout_options(ctx);
    test_name_options(ctx);
    test_batch_arrays(ctx);
    test_sample_buffers(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_option_growth");
}
