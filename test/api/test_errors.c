/* Bad input of every kind returns the right status and a message naming
 * the problem; nothing aborts. */
#include "counting_alloc.h"
#include "harness.h"

#include <math.h>

#include <stdint.h>
#include <unistd.h>

static kiln_model *new_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    return m;
}

/* Sizes whose products or windows pass what kiln indexes are refused,
 * naming the layer, never wrapped around. */
static void test_huge_sizes(kiln_context *ctx, const kiln_compile_options *co)
{
    const int32_t huge[] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
    kiln_model *m = new_model(ctx);
    kiln_input(m, 4, huge, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'input_layer' (input_layer): "
                "(2147483647, 2147483647, 2147483647, 2147483647) has more than 2147483647 "
                "floats per sample", kiln_model_compile(m, co));
    kiln_model_destroy(m);

    const int32_t img[] = {9, 3, 1};
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 1,
                                .kernel_size = {INT32_MAX, 1}, .strides = {1, 1},
                                .padding = KILN_PADDING_SAME,
                                .activation = KILN_ACTIVATION_LINEAR};
    m = new_model(ctx);
    kiln_input(m, 3, img, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'conv2d' (conv2d): kernel (2147483647, 1) with "
                "'same' padding over input (9, 3, 1) spans more than 2147483647",
                kiln_model_compile(m, co));
    kiln_model_destroy(m);

    kiln_pool2d_options pool = {.struct_size = sizeof pool,
                                .pool_size = {2, INT32_MAX - 1}, .strides = {1, 1},
                                .padding = KILN_PADDING_SAME};
    m = new_model(ctx);
    kiln_input(m, 3, img, NULL);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &pool);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "pool (2, 2147483646) with 'same' padding over input",
                kiln_model_compile(m, co));
    kiln_model_destroy(m);

    conv.kernel_size[0] = conv.kernel_size[1] = 65536;
    m = new_model(ctx);
    kiln_input(m, 3, img, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'conv2d' (conv2d): parameter 'kernel' "
                "(65536, 65536, 1, 1) has 4294967296 floats", kiln_model_compile(m, co));
    kiln_model_destroy(m);

    const int32_t wide[] = {65536};
    kiln_dense_options big = {.struct_size = sizeof big, .name = "big", .units = 65536,
                              .activation = KILN_ACTIVATION_LINEAR};
    m = new_model(ctx);
    kiln_input(m, 1, wide, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &big);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'big' (dense): parameter 'kernel' (65536, 65536) "
                "has 4294967296 floats", kiln_model_compile(m, co));
    kiln_model_destroy(m);

    const int32_t rows[] = {32768, 65536};
    big.units = 2;
    m = new_model(ctx);
    kiln_input(m, 2, rows, NULL);
    CHECK(kiln_dense(m, KILN_NODE_PREVIOUS, &big) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'input_layer' (input_layer): (32768, 65536) has "
                "more than 2147483647 floats per sample", kiln_model_compile(m, co));
    kiln_model_destroy(m);
}

static void test_build_errors(kiln_context *ctx)
{
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_MEAN_SQUARED_ERROR;

    /* Mismatched shapes: the message names the layer and both shapes. */
    kiln_model *m = new_model(ctx);
    const int32_t a_dims[] = {3}, img[] = {5, 5, 2};
    kiln_node a = kiln_input(m, 1, a_dims, &(kiln_input_options){.name = "a"});
    kiln_dense_options d4 = {.struct_size = sizeof d4, .name = "four", .units = 4,
                             .activation = KILN_ACTIVATION_LINEAR};
    kiln_node b = kiln_dense(m, a, &d4);
    kiln_node pair[] = {a, b};
    CHECK(kiln_add(m, pair, 2, &(kiln_add_options){.name = "sum"}) == KILN_NODE_INVALID);
    kiln_dense(m, KILN_NODE_PREVIOUS, &d4);  /* later calls keep the first error */
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'sum' (add): input 0 is (3,) but input 1 is (4,)",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 1, a_dims, NULL);
    kiln_conv2d_options conv = {.struct_size = sizeof conv, .filters = 8, .kernel_size = {3, 3},
                                .strides = {1, 1}, .padding = KILN_PADDING_VALID,
                                .activation = KILN_ACTIVATION_RELU};
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'conv2d' (conv2d): expects a (height, width, "
                "channels) input, got (3,)", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 3, img, NULL);
    conv.kernel_size[0] = 7;
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "kernel (7, 3) is larger than input (5, 5, 2)",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 1, a_dims, NULL);
    CHECK(kiln_dense(m, 42, &d4) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "input 0 is node 42, which does not exist",
                kiln_model_compile(m, &co));
    size_t length = 99;  /* an out-pointer is 0 after a failure */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_summary: the model failed to build",
                kiln_model_summary(m, NULL, 0, &length));
    CHECK(length == 0);
    length = 99;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_summary: text is NULL",
                kiln_model_summary(m, NULL, 4, &length));
    CHECK(length == 0);
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 1, a_dims, NULL);
    kiln_dense_options zero = {.struct_size = sizeof zero, .name = "empty", .units = 0,
                               .activation = KILN_ACTIVATION_LINEAR};
    kiln_dense(m, KILN_NODE_PREVIOUS, &zero);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'empty' (dense): units must be > 0",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 1, a_dims, NULL);
    kiln_dense_options nan_scale = {.struct_size = sizeof nan_scale, .name = "scaled",
                                    .units = 2, .alpha = 0.5f, .beta = NAN};
    kiln_dense(m, KILN_NODE_PREVIOUS, &nan_scale);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT,
                "layer 'scaled' (dense): alpha 0.5 and beta nan must be finite",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 1, a_dims, &(kiln_input_options){.name = "x"});
    kiln_dense_options dup = {.struct_size = sizeof dup, .name = "x", .units = 2,
                              .activation = KILN_ACTIVATION_LINEAR};
    kiln_dense(m, KILN_NODE_PREVIOUS, &dup);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer name 'x' is used twice",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* Every Input is a model input: one the output does not depend on is refused. */
    m = new_model(ctx);
    kiln_input(m, 1, a_dims, &(kiln_input_options){.name = "left"});
    kiln_input(m, 1, a_dims, &(kiln_input_options){.name = "right"});
    kiln_dense(m, 0, &d4);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "input 'right' does not feed the output",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    test_huge_sizes(ctx, &co);

    kiln_batch_norm_options bn = {.struct_size = sizeof bn, .name = "bn", .epsilon = INFINITY};
    m = new_model(ctx);
    kiln_input(m, 1, a_dims, NULL);
    kiln_batch_normalization(m, KILN_NODE_PREVIOUS, &bn);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'bn' (batch_normalization): momentum "
                "(0.99) must be in [0, 1] and epsilon (inf) a finite number > 0",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx);
    kiln_input(m, 1, NULL, &(kiln_input_options){.name = "shapeless"});
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT,
                "layer 'shapeless' (input_layer): dims is NULL (rank 1)",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    const int32_t bad_dims[] = {4, -1};
    m = new_model(ctx);
    kiln_input(m, 2, bad_dims, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "dimension 1 is -1",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

static kiln_model *small_classifier(kiln_context *ctx, int classes)
{
    kiln_model *m = new_model(ctx);
    const int32_t dims[] = {6};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options head = {.struct_size = sizeof head, .units = classes,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return m;
}

/* A call refused for a NULL out-pointer says so itself: the message left by
 * an earlier failure must not survive it. */
static void test_null_out_pointers(kiln_context *ctx)
{
    kiln_device_info info = {.struct_size = sizeof info};
    const char *earlier = "kiln_context_device_info: device 99 does not exist";
#define AFTER_EARLIER_FAILURE(needle, call)                                             \
    do {                                                                                \
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, earlier,                          \
                    kiln_context_device_info(ctx, 99, &info));                          \
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, needle, call);                    \
    } while (0)
    AFTER_EARLIER_FAILURE("kiln_context_device_count: count is NULL",
                          kiln_context_device_count(ctx, NULL));
    AFTER_EARLIER_FAILURE("kiln_context_device_info: info is NULL",
                          kiln_context_device_info(ctx, 0, NULL));
    AFTER_EARLIER_FAILURE("kiln_model_create: out is NULL", kiln_model_create(ctx, NULL));
    kiln_model *m = small_classifier(ctx, 3);
    AFTER_EARLIER_FAILURE("kiln_model_summary: text is NULL but size is 8",
                          kiln_model_summary(m, NULL, 8, NULL));
    AFTER_EARLIER_FAILURE("kiln_model_parameter_count: count is NULL",
                          kiln_model_parameter_count(m, NULL));
    AFTER_EARLIER_FAILURE("kiln_model_output_size: size is NULL",
                          kiln_model_output_size(m, NULL));
    AFTER_EARLIER_FAILURE("kiln_model_history_count: count is NULL",
                          kiln_model_history_count(m, NULL));
    AFTER_EARLIER_FAILURE("kiln_model_history_epoch: record is NULL",
                          kiln_model_history_epoch(m, 0, NULL));
#undef AFTER_EARLIER_FAILURE
    /* A NULL object has nowhere to keep a message: the status alone. */
    int32_t n = 7;
    CHECK(kiln_context_device_count(NULL, &n) == KILN_ERROR_INVALID_ARGUMENT && n == 0);
    int64_t count = 7;
    CHECK(kiln_model_parameter_count(NULL, &count) == KILN_ERROR_INVALID_ARGUMENT && count == 0);
    kiln_model_destroy(m);
}

static void test_compile_and_fit_errors(kiln_context *ctx)
{
    kiln_model *m = small_classifier(ctx, 3);
    kiln_lr_schedule schedule = {.struct_size = sizeof schedule};
    kiln_optimizer_options opt = {.struct_size = sizeof opt, .schedule = &schedule};
    kiln_compile_options co = {.struct_size = sizeof co, .optimizer = &opt};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "loss 0 is not a kiln_loss",
                kiln_model_compile(m, &co));
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    opt.kind = KILN_OPTIMIZER_SGD;
    opt.momentum = 1.5f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "momentum 1.5 is not in [0, 1)",
                kiln_model_compile(m, &co));
    opt.momentum = 0.0f;
    opt.learning_rate = -1.0f;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "learning_rate -1 must be a positive number",
                kiln_model_compile(m, &co));
    opt.learning_rate = 0.0f;
    co.strategy = KILN_STRATEGY_MIRRORED;
    co.replicas = 5;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "5 replicas asked for, but the context has",
                kiln_model_compile(m, &co));
    co.replicas = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "replicas (-1)", kiln_model_compile(m, &co));
    co.replicas = 0;
    co.gradient_accumulation_steps = -2;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "gradient_accumulation_steps (-2)",
                kiln_model_compile(m, &co));
    co.gradient_accumulation_steps = 0;
    schedule.kind = KILN_LR_COSINE_DECAY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "decay_steps 0 must be > 0",
                kiln_model_compile(m, &co));
    schedule.kind = KILN_LR_EXPONENTIAL_DECAY;
    schedule.decay_steps = 10;
    schedule.decay_rate = INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "decay_rate inf must be a finite number > 0",
                kiln_model_compile(m, &co));
    schedule.decay_rate = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "decay_rate nan", kiln_model_compile(m, &co));
    schedule = (kiln_lr_schedule){.struct_size = sizeof schedule, .kind = KILN_LR_CONSTANT};
    opt.kind = KILN_OPTIMIZER_ADAM;
    opt.epsilon = INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "epsilon (inf)", kiln_model_compile(m, &co));
    opt.epsilon = 0.0f;
    /* A setting the optimizer or schedule does not use must be finite too:
     * model files and checkpoints store them all. */
    opt.kind = KILN_OPTIMIZER_SGD;
    opt.epsilon = INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "optimizer: epsilon is inf, not a finite "
                "number (SGD does not use it", kiln_model_compile(m, &co));
    opt.epsilon = 0.0f;
    opt.beta_2 = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "optimizer: beta_2 is nan",
                kiln_model_compile(m, &co));
    opt.beta_2 = 0.0f;
    opt.kind = KILN_OPTIMIZER_ADAM;
    opt.momentum = -INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "optimizer: momentum is -inf, not a finite "
                "number (Adam does not use it", kiln_model_compile(m, &co));
    opt.momentum = 0.0f;
    schedule.decay_rate = INFINITY;   /* a constant rate */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "optimizer: schedule.decay_rate is inf",
                kiln_model_compile(m, &co));
    schedule.decay_rate = 0.0f;
    schedule.kind = KILN_LR_STEP_DECAY;
    schedule.decay_steps = 10;
    schedule.decay_rate = 0.5f;
    schedule.alpha = NAN;   /* cosine decay's */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "optimizer: schedule.alpha is nan",
                kiln_model_compile(m, &co));
    schedule = (kiln_lr_schedule){.struct_size = sizeof schedule, .kind = KILN_LR_CONSTANT};
    opt.kind = KILN_OPTIMIZER_SGD;
    co.strategy = KILN_STRATEGY_AUTO;
    co.step_timeout_seconds = NAN;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "step_timeout_seconds (nan)",
                kiln_model_compile(m, &co));
    co.step_timeout_seconds = INFINITY;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "step_timeout_seconds (inf)",
                kiln_model_compile(m, &co));
    co.step_timeout_seconds = 0.0;
    /* More replicas than devices, whichever strategy the request resolves to. */
    int32_t devices = 0;
    CHECK_OK(ctx, kiln_context_device_count(ctx, &devices));
    co.replicas = devices + 1;
    char too_many[96];
    snprintf(too_many, sizeof too_many, "%d replicas asked for, but the context has %d",
             devices + 1, devices);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, too_many, kiln_model_compile(m, &co));
    co.strategy = KILN_STRATEGY_ONE_DEVICE;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, too_many, kiln_model_compile(m, &co));
    co.strategy = KILN_STRATEGY_AUTO;
    co.replicas = 0;

    float x[4 * 6];
    int32_t labels[4] = {0, 1, 2, 3};  /* 3 is out of range for 3 classes */
    for (int i = 0; i < 24; i++)
        x[i] = (float)i / 24.0f;
    kiln_arrays_desc desc = {.struct_size = sizeof desc};
    desc.count = 4;
    desc.feature_rank = 1;
    desc.feature_dims[0] = 6;
    desc.features = x;
    desc.label_kind = KILN_LABELS_SPARSE;
    desc.sparse_labels = labels;
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));

    kiln_fit_options fo = {.struct_size = sizeof fo, .verbosity = KILN_VERBOSE_SILENT};
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "compile the model first", kiln_model_fit(m, ds, &fo));
    kiln_training_stats stats = {.struct_size = sizeof stats};
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "compile the model first",
                kiln_model_training_stats(m, &stats));
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    CHECK_FAILS(ctx, KILN_ERROR_STATE, "already compiled", kiln_model_compile(m, &co));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_training_stats: stats is NULL",
                kiln_model_training_stats(m, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_DATA, "has label 3 but the output 'dense' has 3 classes",
                kiln_model_fit(m, ds, &fo));
    /* 0 is the default (test_option_growth); below it is an error. */
    fo.batch_size = -3;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "batch_size is -3; it must be >= 0 (0: 32)",
                kiln_model_fit(m, ds, &fo));
    fo.batch_size = 2;
    fo.epochs = -1;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "epochs is -1; it must be >= 0 (0: 1)",
                kiln_model_fit(m, ds, &fo));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "the dataset is NULL",
                kiln_model_fit(m, NULL, &fo));
    kiln_dataset_destroy(ds);

    /* Features that do not fit the input: names both shapes. */
    desc.feature_rank = 2;
    desc.feature_dims[0] = 2;
    desc.feature_dims[1] = 3;
    labels[3] = 0;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    fo.epochs = 1;
    kiln_metrics met = {.struct_size = sizeof met};
    /* 6 floats either way, but shapes are compared dimension by dimension. */
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "samples are (2, 3) but input 'input_layer' is (6,)",
                kiln_model_fit(m, ds, &fo));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "samples are (2, 3)", kiln_model_evaluate(m, ds, 8, &met));
    kiln_dataset_destroy(ds);
    desc.feature_rank = 1;
    desc.feature_dims[0] = 5;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "samples are (5,) but input 'input_layer' is (6,)",
                kiln_model_fit(m, ds, &fo));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "samples are (5,)", kiln_model_evaluate(m, ds, 8, &met));
    kiln_dataset_destroy(ds);

    float w[1];
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "room for 1 floats given, the model has 21",
                kiln_model_get_weights(m, w, 1));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_get_weights: weights is NULL",
                kiln_model_get_weights(m, NULL, 21));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_set_weights: weights is NULL",
                kiln_model_set_weights(m, NULL, 21));
    float many[22] = {0};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_set_weights: 22 floats given, "
                "the model has 21 parameters", kiln_model_set_weights(m, many, 22));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_set_weights: 20 floats given, "
                "the model has 21 parameters", kiln_model_set_weights(m, many, 20));
    CHECK_OK(ctx, kiln_model_get_weights(m, many, 22));  /* room to spare is fine */
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_save_weights: path is empty",
                kiln_model_save_weights(m, ""));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_save_weights: path is NULL",
                kiln_model_save_weights(m, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_save_checkpoint: path is empty",
                kiln_model_save_checkpoint(m, ""));
    kiln_epoch_record rec = {.struct_size = sizeof rec};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "epoch 5 is not in the history",
                kiln_model_history_epoch(m, 5, &rec));
    kiln_model_destroy(m);
}

/* A dataset whose samples hold as many floats as the input, in another
 * shape, is refused; so are dense labels of the wrong size. */
static void test_dataset_shapes(kiln_context *ctx)
{
    kiln_model *m = new_model(ctx);
    const int32_t dims[] = {4, 16, 1};
    kiln_input(m, 3, dims, &(kiln_input_options){.name = "image"});
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense_options out = {.struct_size = sizeof out, .name = "out", .units = 2,
                              .activation = KILN_ACTIVATION_LINEAR};
    kiln_dense(m, KILN_NODE_PREVIOUS, &out);
    kiln_compile_options co = {.struct_size = sizeof co, .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &co));

    static float x[3 * 64], y[3 * 3];
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 3, .feature_rank = 3,
                          .feature_dims = {8, 8, 1}, .features = x,
                          .label_kind = KILN_LABELS_DENSE, .label_size = 2, .dense_labels = y};
    kiln_dataset *ds = NULL;
    const kiln_fit_options fo = {.struct_size = sizeof fo, .verbosity = KILN_VERBOSE_SILENT};
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "samples are (8, 8, 1) but input 'image' is (4, 16, 1)",
                kiln_model_fit(m, ds, &fo));
    kiln_dataset_destroy(ds);

    d.feature_dims[0] = 4;
    d.feature_dims[1] = 16;
    d.label_size = 3;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "labels must be 2 floats per sample to match output 'out'",
                kiln_model_fit(m, ds, &fo));
    kiln_dataset_destroy(ds);

    d.label_size = 2;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
}

/* A callback of float features and dense labels: fails when kiln hands it
 * a buffer its dataset's kinds do not use. */
static int fill_dense(void *user, int64_t index, const kiln_sample_buffers *b, char *message,
                      size_t size)
{
    (void)user;
    if (!b->features || b->int_features || b->sparse_labels || !b->dense_labels) {
        snprintf(message, size, "got buffers of the wrong kinds");
        return 1;
    }
    b->features[0] = (float)index;
    b->dense_labels[0] = 0.5f, b->dense_labels[1] = -0.5f;
    return 0;
}

/* kiln_dataset_read: buffers of the wrong kind for the dataset name what
 * it holds; a bad index or struct_size is refused too. */
static void test_sample_buffers_errors(kiln_context *ctx)
{
    static float x[3 * 2], y[3 * 2], f[2], fl[4];
    static int32_t ids[3 * 2], classes[3] = {0, 1, 0}, i2[2], c1[4];
    const kiln_arrays_desc floats = {.struct_size = sizeof floats, .count = 3, .feature_rank = 1,
                                     .feature_dims = {2}, .features = x,
                                     .sparse_labels = classes};
    const kiln_arrays_desc of_ids = {.struct_size = sizeof of_ids, .count = 3, .feature_rank = 1,
                                     .feature_dims = {2}, .int_features = ids,
                                     .label_kind = KILN_LABELS_DENSE, .label_size = 2,
                                     .dense_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &floats, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_read: buffers->int_features is "
                "set but the dataset's features are floats; read them into buffers->features",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.int_features = i2}));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->dense_labels is set but the "
                "dataset's labels are sparse int32 class ids",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.features = f,
                                                                .dense_labels = fl}));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_read: index 3 is not in [0, 3)",
                kiln_dataset_read(ds, 3, NULL));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_sample_buffers.struct_size is 4; it "
                "must be 0 or at least 8",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.struct_size = 4}));
    CHECK_OK(ctx, kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.sparse_labels = c1}));
    CHECK(c1[0] == 1);
    kiln_dataset_destroy(ds);

    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &of_ids, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->features is set but the dataset's "
                "features are int32 ids; read them into buffers->int_features",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.features = f}));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->sparse_labels is set but the "
                "dataset's labels are dense floats; read them into buffers->dense_labels",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.int_features = i2,
                                                                .sparse_labels = c1}));
    kiln_dataset_destroy(ds);

    /* Several inputs and outputs of mixed kinds: the packed sample goes to
     * features and dense_labels, ids and class ids as int32 bits. */
    const kiln_input_array in[2] = {{.struct_size = sizeof in[0], .rank = 1, .dims = {2},
                                     .int_features = ids},
                                    {.rank = 1, .dims = {2}, .features = x}};
    const kiln_label_array out[2] = {{.struct_size = sizeof out[0], .sparse_labels = classes},
                                     {.label_kind = KILN_LABELS_DENSE, .label_size = 2,
                                      .dense_labels = y}};
    const kiln_arrays_desc mixed = {.struct_size = sizeof mixed, .count = 3, .n_inputs = 2,
                                    .inputs = in, .n_outputs = 2, .outputs = out};
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &mixed, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->int_features is set but the "
                "dataset's 2 inputs hold 1 of ids and 1 of floats; read the packed sample into "
                "buffers->features (ids as int32 bits)",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.int_features = c1}));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->sparse_labels is set but not every "
                "one of the dataset's 2 label arrays is sparse",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.sparse_labels = c1}));
    CHECK_OK(ctx, kiln_dataset_read(ds, 2, &(kiln_sample_buffers){.features = fl,
                                                                  .dense_labels = fl}));
    kiln_dataset_destroy(ds);

    /* Every input of ids and every output sparse: the packed sample is typed. */
    const kiln_input_array two_ids[2] = {{.struct_size = sizeof two_ids[0], .rank = 1,
                                          .dims = {2}, .int_features = ids},
                                         {.rank = 1, .dims = {2}, .int_features = ids}};
    const kiln_label_array two_sparse[2] = {{.struct_size = sizeof two_sparse[0],
                                             .sparse_labels = classes},
                                            {.sparse_labels = classes}};
    const kiln_arrays_desc all_ids = {.struct_size = sizeof all_ids, .count = 3, .n_inputs = 2,
                                      .inputs = two_ids, .n_outputs = 2, .outputs = two_sparse};
    ids[2] = 5, ids[3] = 6;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &all_ids, &ds));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->features is set but the dataset's "
                "features are int32 ids",
                kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.features = fl}));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->dense_labels is set but the "
                "dataset's labels are sparse",
                kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.dense_labels = fl}));
    int32_t packed[4] = {0}, both[2] = {0};
    CHECK_OK(ctx, kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.int_features = packed,
                                                                  .sparse_labels = both}));
    CHECK(packed[0] == 5 && packed[1] == 6 && packed[2] == 5 && packed[3] == 6);
    CHECK(both[0] == 1 && both[1] == 1);
    kiln_dataset_destroy(ds);

    /* A callback gets exactly its dataset's kinds (fill_dense fails otherwise). */
    const kiln_callback_desc cd = {.struct_size = sizeof cd, .count = 2, .feature_rank = 1,
                                   .feature_dims = {1}, .label_kind = KILN_LABELS_DENSE,
                                   .label_size = 2, .fill = fill_dense};
    CHECK_OK(ctx, kiln_dataset_from_callback(ctx, &cd, &ds));
    CHECK_OK(ctx, kiln_dataset_read(ds, 1, &(kiln_sample_buffers){.features = f,
                                                                  .dense_labels = fl}));
    CHECK(f[0] == 1.0f && fl[0] == 0.5f && fl[1] == -0.5f);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "buffers->sparse_labels is set but the "
                "dataset's labels are dense floats",
                kiln_dataset_read(ds, 0, &(kiln_sample_buffers){.sparse_labels = c1}));
    kiln_dataset_destroy(ds);
}

static void keep_last_log(void *user, kiln_log_level level, const char *message)
{
    (void)level;
    snprintf(user, 512, "%s", message);
}

/* A context destroyed while a model and a dataset made from it live stays
 * open until the last of them is destroyed, and says so; nothing is used
 * after it is freed, and nothing is left. */
static void test_context_destroyed_first(void)
{
    counter c = {0};
    char logged[512] = "";
    kiln_context_options o = {.struct_size = sizeof o, .realloc_fn = counting_realloc,
                              .realloc_user = &c, .log_fn = keep_last_log,
                              .log_user = logged};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK)
        return;
    const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int32_t y[4] = {0, 1, 0, 1};
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 4, .feature_rank = 1,
                          .feature_dims = {2}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    kiln_model *m = new_model(ctx);
    const int32_t dims[] = {2};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 2,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_context_destroy(ctx);
    CHECK(strstr(logged, "2 model(s) or dataset(s) made from this context are still open"));
    /* Still usable: the context closes with the last of them. */
    kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 1, .batch_size = 4,
                           .verbosity = KILN_VERBOSE_SILENT};
    CHECK(kiln_model_fit(m, ds, &fo) == KILN_OK);
    kiln_model_destroy(m);
    CHECK(c.live > 0);
    kiln_dataset_destroy(ds);
    CHECK(c.live == 0);
}

/* The environment fills in what the application left at its default; an
 * explicit setting wins. */
static void test_environment_fills_defaults(void)
{
    char err[512] = "";
    setenv("KILN_DEVICES", "63", 1);   /* no such device */
    kiln_context_options o = {.struct_size = sizeof o, .device_type = KILN_DEVICE_CPU,
                              .error_buffer = err, .error_buffer_size = sizeof err};
    kiln_context *ctx = NULL;
    CHECK(kiln_context_create(&o, &ctx) == KILN_OK);
    kiln_context_destroy(ctx);
    o.device_type = KILN_DEVICE_DEFAULT;
    CHECK(kiln_context_create(&o, &ctx) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(err, "device index 63 does not exist") != NULL);
    unsetenv("KILN_DEVICES");

    ctx = test_context(1);
    setenv("KILN_STRATEGY", "central_storage", 1);
    const int32_t dims[] = {2};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 2,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_strategy asked[] = {KILN_STRATEGY_ONE_DEVICE, KILN_STRATEGY_AUTO};
    const char *expected[] = {"one_device", "central_storage"};
    for (int i = 0; i < 2; i++) {
        kiln_model *m = new_model(ctx);
        kiln_input(m, 1, dims, NULL);
        kiln_dense(m, KILN_NODE_PREVIOUS, &head);
        kiln_compile_options co = {.struct_size = sizeof co,
                                   .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                   .strategy = asked[i]};
        CHECK_OK(ctx, kiln_model_compile(m, &co));
        const char *strategy = NULL;
        CHECK_OK(ctx, kiln_model_distribution(m, &strategy, NULL));
        CHECK(strategy && strcmp(strategy, expected[i]) == 0);
        kiln_model_destroy(m);
    }
    unsetenv("KILN_STRATEGY");
    kiln_context_destroy(ctx);
}

static void test_context_errors(void)
{
    char err[512];
    kiln_context_options o = {.struct_size = sizeof o};
    o.error_buffer = err;
    o.error_buffer_size = sizeof err;
    const int32_t missing[] = {63};
    o.n_device_indices = 1;
    o.device_indices = missing;
    kiln_context *ctx = (kiln_context *)&o;  /* must be reset to NULL */
    CHECK(kiln_context_create(&o, &ctx) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == NULL);
    CHECK(strstr(err, "device index 63 does not exist") != NULL);

    o.n_device_indices = 0;
    setenv("KILN_DEVICES", "7", 1);
    CHECK(kiln_context_create(&o, &ctx) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(err, "device index 7 does not exist") != NULL);
    setenv("KILN_DEVICES", ",", 1);   /* an empty device list */
    CHECK(kiln_context_create(&o, &ctx) == KILN_ERROR_INVALID_ARGUMENT && ctx == NULL);
    CHECK(strstr(err, "KILN_DEVICES=\",\" is not understood") != NULL);
    setenv("KILN_DEVICES", "zero", 1);
    CHECK(kiln_context_create(&o, &ctx) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(err, "KILN_DEVICES=\"zero\" is not understood") != NULL);
    unsetenv("KILN_DEVICES");

    o.device_type = KILN_DEVICE_ACCELERATOR;
    kiln_status st = kiln_context_create(&o, &ctx);
    if (st == KILN_OK)
        kiln_context_destroy(ctx);  /* a machine with an accelerator */
    else
        CHECK(st == KILN_ERROR_NO_DEVICE && strstr(err, "no accelerator device") != NULL);

    CHECK(strcmp(kiln_status_name(KILN_ERROR_SHAPE), "KILN_ERROR_SHAPE") == 0);
    CHECK(strcmp(kiln_status_name((kiln_status)-99), "KILN_UNKNOWN_STATUS") == 0);
    CHECK(strlen(kiln_status_description(KILN_ERROR_DATA)) > 10);
    kiln_context_destroy(NULL);
    kiln_model_destroy(NULL);
    kiln_dataset_destroy(NULL);
}

/* kiln_context_create's message, which goes to the default log (stderr) when the
 * options cannot be trusted to say where else. */
static kiln_status create_capturing_stderr(const kiln_context_options *o, kiln_context **ctx,
                                           char *text, size_t size)
{
    fflush(stderr);
    FILE *log = tmpfile();
    const int saved = dup(2);
    if (!log || saved < 0 || dup2(fileno(log), 2) < 0)
        SKIP("cannot capture stderr");
    const kiln_status st = kiln_context_create(o, ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(log);
    const size_t n = fread(text, 1, size - 1, log);
    text[n] = '\0';
    fclose(log);
    return st;
}

/* A nonzero struct_size too short for the fields a call needs is refused by
 * name, not read as zero fields. */
static void test_short_struct_size(kiln_context *ctx)
{
    char text[1024], want[160];
    kiln_context_options co = {.struct_size = 3};
    kiln_context *made = (kiln_context *)&co;
    CHECK(create_capturing_stderr(&co, &made, text, sizeof text) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(made == NULL);
    snprintf(want, sizeof want, "kiln_context_create: kiln_context_options.struct_size is 3; "
             "it must be 0 or at least %zu", sizeof(size_t));
    CHECK(strstr(text, want) != NULL);

    kiln_model *m = small_classifier(ctx, 3);
    kiln_compile_options opts = {.struct_size = sizeof(size_t),
                                 .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: kiln_compile_options"
                ".struct_size is", kiln_model_compile(m, &opts));
    opts.struct_size = sizeof opts;
    kiln_optimizer_options opt = {.struct_size = 5};
    opts.optimizer = &opt;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_compile: kiln_optimizer_options"
                ".struct_size is 5", kiln_model_compile(m, &opts));
    opt.struct_size = 0;
    CHECK_OK(ctx, kiln_model_compile(m, &opts));
    float x[6] = {0};
    int32_t label = 0;
    kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = 1, .feature_rank = 1,
                             .feature_dims = {6}, .features = x,
                             .label_kind = KILN_LABELS_SPARSE, .sparse_labels = &label};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    /* Every field of kiln_fit_options has a zero default: only a size that
     * cannot hold struct_size itself is refused. */
    const kiln_fit_options fo = {.struct_size = 4};
    snprintf(want, sizeof want, "kiln_model_fit: kiln_fit_options.struct_size is 4; it must be "
             "0 or at least %zu", sizeof(size_t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_fit(m, ds, &fo));
    kiln_dataset_destroy(ds);
    desc.struct_size = offsetof(kiln_arrays_desc, dense_labels);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_dataset_from_arrays: kiln_arrays_desc"
                ".struct_size is", kiln_dataset_from_arrays(ctx, &desc, &ds));
    CHECK(ds == NULL);
    kiln_model_destroy(m);

    m = new_model(ctx);
    const int32_t dims[] = {6};
    kiln_input(m, 1, dims, NULL);
    kiln_dense_options d = {.struct_size = offsetof(kiln_dense_options, units), .units = 4};
    CHECK(kiln_dense(m, KILN_NODE_PREVIOUS, &d) == KILN_NODE_INVALID);
    snprintf(want, sizeof want, "kiln_dense: kiln_dense_options.struct_size is %zu; it must be "
             "0 or at least %zu", d.struct_size, offsetof(kiln_dense_options, activation));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_compile(m, &opts));
    kiln_model_destroy(m);
}

/* A dropout rate outside [0, 1) and a struct_size that cannot hold
 * struct_size are refused, naming the layer or the struct. */
static void test_dropout_errors(kiln_context *ctx)
{
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    const int32_t dims[] = {4};
    const float rates[] = {1.0f, -0.1f, NAN};
    const char *why[] = {"layer 'd' (dropout): rate must be in [0, 1), got 1",
                         "layer 'd' (dropout): rate must be in [0, 1), got -0.1",
                         "layer 'd' (dropout): rate must be in [0, 1), got nan"};
    for (int i = 0; i < 3; i++) {
        kiln_model *m = new_model(ctx);
        kiln_input(m, 1, dims, NULL);
        const kiln_dropout_options o = {.struct_size = sizeof o, .name = "d", .rate = rates[i]};
        kiln_dropout(m, KILN_NODE_PREVIOUS, &o);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, why[i], kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    kiln_model *m = new_model(ctx);
    kiln_input(m, 1, dims, NULL);
    const kiln_dropout_options short_size = {.struct_size = 4, .rate = 0.5f};
    CHECK(kiln_dropout(m, KILN_NODE_PREVIOUS, &short_size) == KILN_NODE_INVALID);
    char want[128];
    snprintf(want, sizeof want, "kiln_dropout: kiln_dropout_options.struct_size is 4; it must "
             "be 0 or at least %zu", sizeof(size_t));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* Every builder that takes only a name (and concatenate) refuses a
 * struct_size that cannot hold struct_size, naming its call and struct;
 * compile reports it. */
static void test_name_option_errors(kiln_context *ctx)
{
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    const int32_t vec[] = {4}, img[] = {2, 2, 4};
    const kiln_input_options bad_input = {.struct_size = 4};
    const kiln_flatten_options bad_flatten = {.struct_size = 4};
    const kiln_global_pool2d_options bad_pool = {.struct_size = 4};
    const kiln_activation_layer_options bad_activation = {.struct_size = 4};
    const kiln_reshape_options bad_reshape = {.struct_size = 4};
    const kiln_concatenate_options bad_join = {.struct_size = 4};
    const kiln_add_options bad_add = {.struct_size = 4};
    const kiln_dot_options bad_dot = {.struct_size = 4};
    const char *what[] = {"kiln_input: kiln_input_options",
                          "kiln_input_ints: kiln_input_options",
                          "kiln_flatten: kiln_flatten_options",
                          "kiln_global_average_pooling2d: kiln_global_pool2d_options",
                          "kiln_activation_layer: kiln_activation_layer_options",
                          "kiln_reshape: kiln_reshape_options",
                          "kiln_concatenate: kiln_concatenate_options",
                          "kiln_add: kiln_add_options",
                          "kiln_dot: kiln_dot_options"};
    for (int i = 0; i < 9; i++) {
        kiln_model *m = new_model(ctx);
        const kiln_node x = i == 3 ? kiln_input(m, 3, img, NULL) : kiln_input(m, 1, vec, NULL);
        const kiln_node pair[2] = {x, x};
        const kiln_node got =
            i == 0   ? kiln_input(m, 1, vec, &bad_input)
            : i == 1 ? kiln_input_ints(m, 1, vec, &bad_input)
            : i == 2 ? kiln_flatten(m, x, &bad_flatten)
            : i == 3 ? kiln_global_average_pooling2d(m, x, &bad_pool)
            : i == 4 ? kiln_activation_layer(m, x, KILN_ACTIVATION_RELU, &bad_activation)
            : i == 5 ? kiln_reshape(m, x, 1, vec, &bad_reshape)
            : i == 6 ? kiln_concatenate(m, pair, 2, &bad_join)
            : i == 7 ? kiln_add(m, pair, 2, &bad_add)
                     : kiln_dot(m, x, x, &bad_dot);
        CHECK(got == KILN_NODE_INVALID);
        char want[160];
        snprintf(want, sizeof want, "%s.struct_size is 4; it must be 0 or at least %zu", what[i],
                 sizeof(size_t));
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, want, kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
}

/* kiln_batch_arrays: the wrong typed array for an Input or a loss, none or
 * two of them, counts and shapes, each refused naming what was wrong. */
static void test_batch_arrays_errors(kiln_context *ctx)
{
    kiln_model *m = small_classifier(ctx, 3);
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const float x[12] = {0}, targets[6] = {0};
    const int32_t ids[12] = {0}, classes[2] = {0, 2}, big[2] = {0, 3};
    float out[6];
    const struct {
        kiln_batch_arrays b;
        kiln_status status;
        const char *why;
    } cases[] = {
        {{.count = 2, .features = x, .sparse_labels = classes}, KILN_OK, ""},
        {{.count = 2, .int_features = ids, .sparse_labels = classes},
         KILN_ERROR_INVALID_ARGUMENT, "kiln_model_train_on_batch: kiln_batch_arrays: Input "
         "'input_layer' takes floats: set features, not int_features"},
        {{.count = 2, .features = x, .dense_labels = targets}, KILN_ERROR_INVALID_ARGUMENT,
         "kiln_batch_arrays: output 'dense' takes int32 class ids (its loss is sparse): set "
         "sparse_labels, not dense_labels"},
        {{.count = 2, .features = x, .int_features = ids, .sparse_labels = classes},
         KILN_ERROR_INVALID_ARGUMENT, "set exactly one of kiln_batch_arrays.features, "
         "int_features and inputs (2 are set)"},
        {{.count = 2, .sparse_labels = classes}, KILN_ERROR_INVALID_ARGUMENT,
         "set exactly one of kiln_batch_arrays.features, int_features and inputs (0 are set)"},
        {{.count = 2, .features = x}, KILN_ERROR_INVALID_ARGUMENT,
         "set exactly one of kiln_batch_arrays.sparse_labels, dense_labels and outputs (0 are "
         "set)"},
        {{.count = 0, .features = x, .sparse_labels = classes}, KILN_ERROR_INVALID_ARGUMENT,
         "kiln_batch_arrays.count is 0; it must be >= 1"},
        {{.count = (int64_t)INT32_MAX + 1, .features = x, .sparse_labels = classes},
         KILN_ERROR_INVALID_ARGUMENT, "kiln_batch_arrays.count is 2147483648; a batch holds at "
         "most 2^31 - 1 samples"},
        {{.count = 2, .features = x, .n_inputs = 2}, KILN_ERROR_INVALID_ARGUMENT,
         "set exactly one of kiln_batch_arrays.features, int_features and inputs (2 are set)"},
        {{.count = 2, .features = x, .sparse_labels = big}, KILN_ERROR_DATA,
         "sample 1 has label 3, outside [0, 3)"},
        {{.count = 2, .features = x, .sparse_labels = classes, .n_outputs = 2},
         KILN_ERROR_INVALID_ARGUMENT, "(2 are set)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_batch_arrays b = cases[i].b;
        b.struct_size = sizeof b;
        if (cases[i].status == KILN_OK)
            CHECK_OK(ctx, kiln_model_train_on_batch(m, &b, NULL));
        else
            CHECK_FAILS(ctx, cases[i].status, cases[i].why, kiln_model_train_on_batch(m, &b, NULL));
    }
    /* One Input given as an array of inputs: its shape is checked. */
    const kiln_input_array wrong = {.rank = 2, .dims = {2, 3}, .features = x};
    const kiln_batch_arrays shaped = {.struct_size = sizeof shaped, .count = 2, .n_inputs = 1,
                                      .inputs = &wrong, .sparse_labels = classes};
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "kiln_model_test_on_batch: inputs[0] is (2, 3) but Input "
                "'input_layer' is (6,)", kiln_model_test_on_batch(m, &shaped, NULL));
    /* A label array whose kind disagrees with the array it sets. */
    const kiln_label_array mixed = {.label_kind = KILN_LABELS_DENSE, .sparse_labels = classes};
    const kiln_batch_arrays labelled = {.struct_size = sizeof labelled, .count = 2,
                                        .features = x, .n_outputs = 1, .outputs = &mixed};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "outputs[0]: label_kind is dense but "
                "sparse_labels is set", kiln_model_test_on_batch(m, &labelled, NULL));
    /* predict takes the same struct, in batches, and no labels. */
    float six[6];
    const kiln_batch_arrays two = {.struct_size = sizeof two, .count = 2, .features = x};
    CHECK_OK(ctx, kiln_model_predict(m, &two, six, 1));
    const kiln_batch_arrays two_ids = {.struct_size = sizeof two_ids, .count = 2,
                                       .int_features = ids};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict: kiln_batch_arrays: Input "
                "'input_layer' takes floats: set features, not int_features",
                kiln_model_predict(m, &two_ids, six, 1));
    const kiln_batch_arrays none = {.struct_size = sizeof none, .features = x};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict: kiln_batch_arrays.count "
                "is 0; it must be >= 1", kiln_model_predict(m, &none, six, 1));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict: batch is NULL",
                kiln_model_predict(m, NULL, six, 1));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict: outputs must be set",
                kiln_model_predict(m, &two, NULL, 1));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict takes no labels",
                kiln_model_predict(m, &(kiln_batch_arrays){.count = 2, .features = x,
                                                           .sparse_labels = classes},
                                   six, 1));
    /* predict_on_batch takes no labels; NULL and a short struct_size are refused. */
    const kiln_batch_arrays with_labels = {.struct_size = sizeof with_labels, .count = 2,
                                           .features = x, .sparse_labels = classes};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict_on_batch takes no labels",
                kiln_model_predict_on_batch(m, &with_labels, out));
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_train_on_batch: batch is NULL",
                kiln_model_train_on_batch(m, NULL, NULL));
    const kiln_batch_arrays short_size = {.struct_size = offsetof(kiln_batch_arrays, count),
                                          .count = 2, .features = x};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_predict_on_batch: "
                "kiln_batch_arrays.struct_size is", kiln_model_predict_on_batch(m, &short_size,
                                                                                 out));
    kiln_model_destroy(m);

    /* An Input of ids takes int_features. */
    m = new_model(ctx);
    const int32_t dims[] = {6};
    const kiln_embedding_options e = {.struct_size = sizeof e, .input_dim = 4, .output_dim = 2};
    kiln_input_ints(m, 1, dims, &(kiln_input_options){.name = "tokens"});
    kiln_embedding(m, KILN_NODE_PREVIOUS, &e);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    const kiln_compile_options mse = {.struct_size = sizeof mse,
                                      .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    CHECK_OK(ctx, kiln_model_compile(m, &mse));
    const kiln_batch_arrays floats = {.struct_size = sizeof floats, .count = 1, .features = x};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_batch_arrays: Input 'tokens' takes int32 "
                "ids (kiln_input_ints): set int_features, not features",
                kiln_model_predict_on_batch(m, &floats, out));
    const kiln_batch_arrays sparse = {.struct_size = sizeof sparse, .count = 1,
                                      .int_features = ids, .sparse_labels = classes};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "output 'flatten' takes float labels (its loss "
                "is dense): set dense_labels, not sparse_labels",
                kiln_model_test_on_batch(m, &sparse, NULL));
    float twelve[12];
    const kiln_batch_arrays typed = {.struct_size = sizeof typed, .count = 1, .int_features = ids};
    CHECK_OK(ctx, kiln_model_predict_on_batch(m, &typed, twelve));
    kiln_model_destroy(m);
}

/* kiln_learning_rate_at refuses what compile refuses, with a message, and
 * leaves the rate 0. */
static void test_learning_rate_errors(kiln_context *ctx)
{
    double rate = 5.0;
    CHECK(kiln_learning_rate_at(NULL, NULL, 0, &rate) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(rate == 0.0);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_learning_rate_at: rate is NULL",
                kiln_learning_rate_at(ctx, NULL, 0, NULL));
    rate = 5.0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_learning_rate_at: step -1 is negative",
                kiln_learning_rate_at(ctx, NULL, -1, &rate));
    CHECK(rate == 0.0);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .beta_1 = 2.0f};
    rate = 5.0;
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "Adam: beta_1 (2) and beta_2 (0.999) must be",
                kiln_learning_rate_at(ctx, &adam, 0, &rate));
    CHECK(rate == 0.0);
    const kiln_lr_schedule cosine = {.struct_size = sizeof cosine, .kind = KILN_LR_COSINE_DECAY,
                                     .decay_steps = 10, .alpha = 1.5f};
    const kiln_optimizer_options sgd = {.struct_size = sizeof sgd, .kind = KILN_OPTIMIZER_SGD,
                                        .schedule = &cosine};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "schedule: alpha 1.5 must be in [0, 1]",
                kiln_learning_rate_at(ctx, &sgd, 0, &rate));
    const kiln_optimizer_options unknown = {.struct_size = sizeof unknown,
                                            .kind = (kiln_optimizer_kind)7};
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "optimizer kind 7 is not a kiln_optimizer_kind",
                kiln_learning_rate_at(ctx, &unknown, 0, &rate));
}

int main(void)
{
    kiln_context *ctx = test_context(1);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_build_errors(ctx);
    test_compile_and_fit_errors(ctx);
    test_dataset_shapes(ctx);
    test_sample_buffers_errors(ctx);
    test_null_out_pointers(ctx);
    test_short_struct_size(ctx);
    test_learning_rate_errors(ctx);
    test_dropout_errors(ctx);
    test_name_option_errors(ctx);
    test_batch_arrays_errors(ctx);
    kiln_context_destroy(ctx);
    test_context_errors();
    test_context_destroyed_first();
    test_environment_fills_defaults();
    return test_finish("test_errors");
}
