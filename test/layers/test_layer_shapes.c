/* Reshape, Concatenate, LayerNormalization, Reduce, Softmax and the newer
 * activations as a user builds them: output shapes, Keras's layer and
 * weight names and initial values, and each bad shape or option refused at
 * compile naming the layer and the shapes. */
#include "harness.h"

static kiln_compile_options mse(void)
{
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_MEAN_SQUARED_ERROR;
    return co;
}

static kiln_model *new_model(kiln_context *ctx, int32_t rank, const int32_t *dims)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_input(m, rank, dims, NULL);
    return m;
}

/* Layer `index` has this name and output shape. */
static void check_layer(kiln_context *ctx, const kiln_model *m, int32_t index, const char *name,
                        int32_t rank, const int32_t *dims)
{
    kiln_layer_info li = {.struct_size = sizeof li};
    CHECK_OK(ctx, kiln_model_layer_info(m, index, &li));
    CHECK(li.name && strcmp(li.name, name) == 0);
    CHECK(li.rank == rank);
    for (int32_t d = 0; d < rank && li.rank == rank; d++)
        CHECK(li.dims[d] == dims[d]);
    if (li.name && strcmp(li.name, name) != 0)
        fprintf(stderr, "layer %d is '%s', expected '%s'\n", (int)index, li.name, name);
}

static void test_reshape(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    const int32_t in[] = {2, 3, 5};
    const int32_t infer[] = {-1, 6}, four[] = {1, 5, 3, 2}, wrong[] = {4, -1}, seven[] = {7, 5};
    kiln_model *m = new_model(ctx, 3, in);
    kiln_reshape(m, KILN_NODE_PREVIOUS, 2, infer, NULL);
    kiln_reshape(m, KILN_NODE_PREVIOUS, 4, four, NULL);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int32_t five_six[] = {5, 6};
    check_layer(ctx, m, 1, "reshape", 2, five_six);
    check_layer(ctx, m, 2, "reshape_1", 4, four);
    kiln_model_destroy(m);

    m = new_model(ctx, 3, in);
    kiln_reshape(m, KILN_NODE_PREVIOUS, 2, wrong, &(kiln_reshape_options){.name = "r"});
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'r' (reshape): cannot reshape input (2, 3, 5) "
                "(30 values) to (4, -1)", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx, 3, in);
    kiln_reshape(m, KILN_NODE_PREVIOUS, 2, seven, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'reshape' (reshape): cannot reshape input "
                "(2, 3, 5) (30 values) to (7, 5)", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    /* A product past int64 is refused, not wrapped round to a match. */
    const int32_t huge[] = {INT32_MAX, INT32_MAX, INT32_MAX, -1};
    m = new_model(ctx, 3, in);
    kiln_reshape(m, KILN_NODE_PREVIOUS, 4, huge, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "cannot reshape input (2, 3, 5) (30 values) to "
                "(2147483647, 2147483647, 2147483647, -1)", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    const int32_t two_unknown[] = {-1, 2, -1}, zero[] = {0, 30}, minus[] = {-2, -15};
    struct {
        int32_t rank;
        const int32_t *dims;
        const char *why;
    } bad[] = {
        {3, two_unknown, "layer 'reshape' (reshape): target shape dimensions 0 and 2 are both "
         "-1; one may be"},
        {2, zero, "target shape dimension 0 is 0; it must be > 0 or -1"},
        {2, minus, "target shape dimension 0 is -2"},
        {5, in, "target shape rank 5 is not in 1..4"},
        {0, in, "target shape rank 0 is not in 1..4"},
        {2, NULL, "target shape dims is NULL (rank 2)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = new_model(ctx, 3, in);
        CHECK(kiln_reshape(m, KILN_NODE_PREVIOUS, bad[i].rank, bad[i].dims, NULL) ==
              KILN_NODE_INVALID);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[i].why, kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
}

static void test_concatenate(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    const int32_t in[] = {3, 4}, flat[] = {12};
    kiln_dense_options d2 = {.struct_size = sizeof d2, .units = 2};
    kiln_model *m = new_model(ctx, 2, in);
    kiln_node x = 0, y = kiln_dense(m, x, &d2);            /* (3, 2) */
    kiln_node xy[] = {x, y}, xxx[] = {x, x, x};
    kiln_concatenate(m, xy, 2, NULL);                   /* (3, 6) */
    const kiln_concatenate_options axis1 = {.struct_size = sizeof axis1, .axis = 1};
    const kiln_concatenate_options axis2 = {.struct_size = sizeof axis2, .axis = 2};
    const kiln_concatenate_options rows_too = {.struct_size = sizeof rows_too,
                                               .name = "rows_too", .axis = -2};
    kiln_concatenate(m, xy, 2, &axis2);                     /* the same axis, counted from 1 */
    kiln_node rows = kiln_concatenate(m, xxx, 3, &axis1);  /* (9, 4) */
    kiln_node again[] = {rows, kiln_concatenate(m, xxx, 3, &rows_too)};
    kiln_concatenate(m, again, 2, &(kiln_concatenate_options){.name = "eighteen", .axis = -2});
    /* Axis 0 (the batch axis, which cannot be joined along) is Keras's default, -1. */
    kiln_concatenate(m, xy, 2, &(kiln_concatenate_options){.axis = 0});
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int32_t wide[] = {3, 6}, nine[] = {9, 4}, eighteen[] = {18, 4};
    check_layer(ctx, m, 2, "concatenate", 2, wide);
    check_layer(ctx, m, 3, "concatenate_1", 2, wide);
    check_layer(ctx, m, 4, "concatenate_2", 2, nine);
    check_layer(ctx, m, 5, "rows_too", 2, nine);
    check_layer(ctx, m, 6, "eighteen", 2, eighteen);
    check_layer(ctx, m, 7, "concatenate_5", 2, wide);
    kiln_model_destroy(m);

    /* Mismatched dimensions off the axis, ranks, and axes out of range. */
    kiln_dense_options d6 = {.struct_size = sizeof d6, .units = 6};
    m = new_model(ctx, 2, in);
    kiln_node six = kiln_dense(m, 0, &d6);                  /* (3, 6) */
    kiln_node pair[] = {0, six};
    const kiln_concatenate_options join = {.struct_size = sizeof join, .name = "join", .axis = 1};
    CHECK(kiln_concatenate(m, pair, 2, &join) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'join' (concatenate): input 0 is (3, 4) but input "
                "1 is (3, 6): they must match but on axis 1", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    m = new_model(ctx, 2, in);
    kiln_node line = kiln_reshape(m, 0, 1, flat, NULL);     /* (12,) */
    kiln_node ranks[] = {0, line};
    kiln_concatenate(m, ranks, 2, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "layer 'concatenate' (concatenate): input 0 is (3, 4) but "
                "input 1 is (12,): they must match but on axis -1", kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    const struct {
        int32_t axis;
        const char *why;
    } axes[] = {
        {3, "layer 'concatenate' (concatenate): axis 3 is out of range for inputs of shape "
         "(3, 4) (axes 1..2 or -2..-1)"},
        {-3, "axis -3 is out of range for inputs of shape (3, 4)"},
    };
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++) {
        m = new_model(ctx, 2, in);
        kiln_node same[] = {0, 0};
        const kiln_concatenate_options o = {.struct_size = sizeof o, .axis = axes[i].axis};
        CHECK(kiln_concatenate(m, same, 2, &o) == KILN_NODE_INVALID);
        CHECK_FAILS(ctx, KILN_ERROR_SHAPE, axes[i].why, kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }

    /* 2 to 8 inputs. */
    kiln_node nine_of[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    m = new_model(ctx, 2, in);
    kiln_concatenate(m, nine_of, 9, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'concatenate' takes 2 to 8 inputs, "
                "got 9", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    m = new_model(ctx, 2, in);
    kiln_concatenate(m, nine_of, 1, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "takes 2 to 8 inputs, got 1",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    m = new_model(ctx, 2, in);
    kiln_concatenate(m, NULL, 2, NULL);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "takes 2 to 8 inputs, got 0",
                kiln_model_compile(m, &co));
    kiln_model_destroy(m);
    m = new_model(ctx, 2, in);
    kiln_concatenate(m, nine_of, 8, NULL);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int32_t thirty_two[] = {3, 32};
    check_layer(ctx, m, 1, "concatenate", 2, thirty_two);
    kiln_model_destroy(m);
}

/* Reads weight `name` of a compiled model: its size, and whether every
 * value is `value`. */
static void check_weight(kiln_context *ctx, kiln_model *m, const char *name, int64_t size,
                         float value)
{
    float got[64];
    CHECK(size <= 64);
    CHECK_OK(ctx, kiln_model_get_tensor(m, name, got, size));
    int same = 1;
    for (int64_t i = 0; i < size; i++)
        same &= got[i] == value;
    if (!same)
        fprintf(stderr, "%s does not start as %g\n", name, (double)value);
    CHECK(same);
}

static void test_layer_norm(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    const int32_t in[] = {2, 3, 5};
    kiln_layer_norm_options no_scale = {.struct_size = sizeof no_scale, .no_scale = 1};
    kiln_layer_norm_options bare = {.struct_size = sizeof bare, .no_scale = 1, .no_center = 1};
    kiln_model *m = new_model(ctx, 3, in);
    kiln_layer_normalization(m, KILN_NODE_PREVIOUS, NULL);
    kiln_layer_normalization(m, KILN_NODE_PREVIOUS, &no_scale);
    kiln_layer_normalization(m, KILN_NODE_PREVIOUS, &bare);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    check_layer(ctx, m, 1, "layer_normalization", 3, in);
    check_layer(ctx, m, 3, "layer_normalization_2", 3, in);
    int32_t n = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &n));
    CHECK(n == 3);
    const char *names[] = {"layer_normalization/gamma", "layer_normalization/beta",
                           "layer_normalization_1/beta"};
    for (int32_t i = 0; i < n && i < 3; i++) {
        kiln_parameter_info w = {.struct_size = sizeof w};
        CHECK_OK(ctx, kiln_model_tensor_info(m, i, &w));
        CHECK(strcmp(w.name, names[i]) == 0);
        CHECK(w.rank == 1 && w.dims[0] == 5 && w.trainable);
    }
    check_weight(ctx, m, "layer_normalization/gamma", 5, 1.0f);
    check_weight(ctx, m, "layer_normalization/beta", 5, 0.0f);
    check_weight(ctx, m, "layer_normalization_1/beta", 5, 0.0f);
    int64_t count = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &count));
    CHECK(count == 15);
    kiln_model_destroy(m);

    const float bad_eps[] = {-1e-3f, INFINITY, NAN};
    const char *why[] = {"'ln' (layer_normalization): epsilon (-0.001) must be a finite number",
                         "epsilon (inf)", "epsilon (nan)"};
    for (int i = 0; i < 3; i++) {
        kiln_layer_norm_options o = {.struct_size = sizeof o, .name = "ln",
                                     .epsilon = bad_eps[i]};
        m = new_model(ctx, 3, in);
        CHECK(kiln_layer_normalization(m, KILN_NODE_PREVIOUS, &o) == KILN_NODE_INVALID);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, why[i], kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    kiln_layer_norm_options short_size = {.struct_size = 2};
    m = new_model(ctx, 3, in);
    kiln_layer_normalization(m, KILN_NODE_PREVIOUS, &short_size);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_layer_normalization: "
                "kiln_layer_norm_options", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* The newer activations as a layer option and as a layer; one past the
 * last is refused. */
static void test_activations(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    const int32_t in[] = {6};
    const kiln_activation acts[] = {KILN_ACTIVATION_GELU, KILN_ACTIVATION_GELU_TANH,
                                    KILN_ACTIVATION_LEAKY_RELU, KILN_ACTIVATION_SILU,
                                    KILN_ACTIVATION_RELU6, KILN_ACTIVATION_HARD_SIGMOID,
                                    KILN_ACTIVATION_HARD_SWISH};
    kiln_model *m = new_model(ctx, 1, in);
    for (int i = 0; i < 7; i++) {
        kiln_dense_options d = {.struct_size = sizeof d, .units = 4, .activation = acts[i]};
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
        kiln_activation_layer(m, KILN_NODE_PREVIOUS, acts[i], NULL);
    }
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_model_destroy(m);

    kiln_dense_options past = {.struct_size = sizeof past, .name = "past", .units = 4,
                               .activation = (kiln_activation)(KILN_ACTIVATION_HARD_SWISH + 1)};
    m = new_model(ctx, 1, in);
    CHECK(kiln_dense(m, KILN_NODE_PREVIOUS, &past) == KILN_NODE_INVALID);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "layer 'past': activation 13 is not a "
                "kiln_activation", kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* ONNX's and PyTorch's window attributes: the output shapes their
 * arithmetic gives, and each bad value refused at compile naming the
 * layer and the field. */
static void test_window_options(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    const int32_t in[] = {9, 8, 4};
    kiln_model *m = new_model(ctx, 3, in);
    const kiln_conv2d_options pads = {.struct_size = sizeof pads, .filters = 6,
                                      .kernel_size = {3, 2}, .strides = {2, 3},
                                      .padding = KILN_PADDING_EXPLICIT, .pads = {2, 0, 1, 4}};
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &pads);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    /* (9 + 3 - 3) / 2 + 1 = 5, (8 + 4 - 2) / 3 + 1 = 4 */
    const int32_t padded[] = {5, 4, 6};
    check_layer(ctx, m, 1, "conv2d", 3, padded);
    kiln_model_destroy(m);
    m = new_model(ctx, 3, in);
    kiln_conv2d_options dilated = pads;
    dilated.dilations[0] = 2;
    dilated.dilations[1] = 3;
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &dilated);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    /* spans 5 and 4: (9 + 3 - 5) / 2 + 1 = 4, (8 + 4 - 4) / 3 + 1 = 3 */
    const int32_t spread[] = {4, 3, 6};
    check_layer(ctx, m, 1, "conv2d", 3, spread);
    kiln_model_destroy(m);
    /* Grouped: the kernel sees a group's channels only. */
    m = new_model(ctx, 3, in);
    kiln_conv2d_options grouped = pads;
    grouped.groups = 2;
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &grouped);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    check_layer(ctx, m, 1, "conv2d", 3, padded);
    int64_t count = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &count));
    CHECK(count == 3 * 2 * 2 * 6 + 6);
    kiln_model_destroy(m);

    const struct {
        kiln_conv2d_options o;
        kiln_status status;
        const char *why;
    } bad[] = {
        {{.filters = 2, .kernel_size = {3, 3}, .padding = KILN_PADDING_EXPLICIT,
          .pads = {1, 1, -1, 1}}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'c' (conv2d): pads (1, 1, -1, 1) must be >= 0"},
        {{.filters = 2, .kernel_size = {3, 3}, .padding = (kiln_padding)3},
         KILN_ERROR_INVALID_ARGUMENT, "layer 'c' (conv2d): padding 3 is not a kiln_padding"},
        {{.filters = 2, .kernel_size = {12, 3}, .padding = KILN_PADDING_EXPLICIT,
          .pads = {1, 0, 1, 0}}, KILN_ERROR_SHAPE,
         "layer 'c' (conv2d): kernel (12, 3) is larger than input (9, 8, 4) with explicit pads"},
        {{.filters = 2, .kernel_size = {2, 3}, .dilations = {1, 4}}, KILN_ERROR_SHAPE,
         "layer 'c' (conv2d): kernel (2, 3) dilated (1, 4) is larger than input (9, 8, 4) with "
         "'valid' padding"},
        {{.filters = 2, .kernel_size = {2, 3}, .dilations = {-1, 2}}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'c' (conv2d): dilations (-1, 2) must be >= 0"},
        {{.filters = 6, .kernel_size = {3, 3}, .groups = 3}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'c' (conv2d): groups 3 must divide the input's channels (4) and the filters (6)"},
        {{.filters = 3, .kernel_size = {3, 3}, .groups = 2}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'c' (conv2d): groups 2 must divide the input's channels (4) and the filters (3)"},
        {{.filters = 4, .kernel_size = {3, 3}, .groups = -4}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 'c' (conv2d): groups -4 must be >= 0"},
    };
    /* ceil_mode: (9 + 1 - 3) / 2 rounds up to 4, + 1; (8 - 3) / 2 to 3, + 1 */
    m = new_model(ctx, 3, in);
    const kiln_pool2d_options ceil = {.struct_size = sizeof ceil, .pool_size = {3, 3},
                                      .strides = {2, 2}, .padding = KILN_PADDING_EXPLICIT,
                                      .pads = {1, 0, 0, 0}, .ceil_mode = 1};
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &ceil);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int32_t rounded[] = {5, 4, 4};
    check_layer(ctx, m, 1, "max_pooling2d", 3, rounded);
    kiln_model_destroy(m);
    const struct {
        kiln_pool2d_options o;
        const char *why;
    } bad_pools[] = {
        {{.pool_size = {3, 2}, .padding = KILN_PADDING_EXPLICIT, .pads = {0, 0, 0, -1}},
         "layer 'p' (max_pooling2d): pads (0, 0, 0, -1) must be >= 0 and less than pool_size "
         "(3, 2)"},
        {{.pool_size = {3, 2}, .padding = KILN_PADDING_EXPLICIT, .pads = {0, 2, 0, 0}},
         "layer 'p' (max_pooling2d): pads (0, 2, 0, 0) must be >= 0 and less than pool_size "
         "(3, 2)"},
        {{.pool_size = {3, 2}, .padding = KILN_PADDING_EXPLICIT, .pads = {3, 0, 0, 0}},
         "pads (3, 0, 0, 0) must be >= 0 and less than pool_size (3, 2)"},
        {{.pool_size = {3, 2}, .padding = (kiln_padding)7},
         "layer 'p' (max_pooling2d): padding 7 is not a kiln_padding"},
    };
    for (size_t i = 0; i < sizeof bad_pools / sizeof bad_pools[0]; i++) {
        kiln_pool2d_options o = bad_pools[i].o;
        o.struct_size = sizeof o;
        o.name = "p";
        m = new_model(ctx, 3, in);
        kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &o);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad_pools[i].why,
                    kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_conv2d_options o = bad[i].o;
        o.struct_size = sizeof o;
        o.name = "c";
        m = new_model(ctx, 3, in);
        kiln_conv2d(m, KILN_NODE_PREVIOUS, &o);
        CHECK_FAILS(ctx, bad[i].status, bad[i].why, kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
}

/* Reduce's and Softmax's output shapes and names, and each bad axis or
 * option refused at compile naming the layer. */
static void test_reduce_softmax(kiln_context *ctx)
{
    const kiln_compile_options co = mse();
    /* four: more axes than the input has (each array as long as its n_axes). */
    const int32_t in[] = {2, 3, 5}, first_last[] = {1, -1}, all[] = {3, 1, 2},
                  four[] = {1, 2, 3, -1};
    const kiln_reduce_options keep = {.struct_size = sizeof keep, .keepdims = 1};
    kiln_model *m = new_model(ctx, 3, in);   /* the input is node 0 */
    kiln_reduce(m, 0, KILN_REDUCE_MAX, 2, first_last, NULL);
    kiln_reduce(m, 0, KILN_REDUCE_SUM, 2, first_last, &keep);
    kiln_reduce(m, 0, KILN_REDUCE_MEAN, 3, all, NULL);
    kiln_softmax(m, 0, NULL);
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    const int32_t three[] = {3}, kept[] = {1, 3, 1}, one[] = {1};
    check_layer(ctx, m, 1, "reduce", 1, three);
    check_layer(ctx, m, 2, "reduce_1", 3, kept);
    check_layer(ctx, m, 3, "reduce_2", 1, one);
    check_layer(ctx, m, 4, "softmax", 3, in);
    kiln_model_destroy(m);

    const int32_t batch[] = {0}, twice[] = {2, -2}, past[] = {4}, below[] = {-4};
    struct {
        kiln_reduce_op op;
        int32_t n_axes;
        const int32_t *axes;
        const char *why;
    } bad[] = {
        {KILN_REDUCE_MEAN, 1, batch, "layer 'reduce' (reduce): axis 0 is the batch: a sample's "
         "output would depend on the other samples of its batch (axes 1..3 or -3..-1 of the "
         "input (2, 3, 5))"},
        {KILN_REDUCE_SUM, 2, twice, "layer 'reduce' (reduce): axis -2 is given twice"},
        {KILN_REDUCE_MAX, 1, past, "axis 4 is out of range: axes 1..3 or -3..-1 of the input "
         "(2, 3, 5)"},
        {KILN_REDUCE_MIN, 1, below, "axis -4 is out of range"},
        {KILN_REDUCE_MEAN, 0, batch, "n_axes is out of range; the input (2, 3, 5) has 3 axes"},
        {KILN_REDUCE_MEAN, 4, four, "n_axes is out of range"},
        {KILN_REDUCE_MEAN, 1, NULL, "axes is NULL"},
        {(kiln_reduce_op)7, 1, past, "op 7 is not a kiln_reduce_op"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = new_model(ctx, 3, in);
        kiln_reduce(m, 0, bad[i].op, bad[i].n_axes, bad[i].axes, NULL);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, bad[i].why, kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
    const int32_t axes[] = {4, -4};
    for (int k = 0; k < 2; k++) {
        const kiln_softmax_options o = {.struct_size = sizeof o, .axis = axes[k], .log = 1};
        m = new_model(ctx, 3, in);
        kiln_softmax(m, 0, &o);
        CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, k ? "layer 'softmax' (softmax): axis -4 "
                    "is the batch of the input (2, 3, 5)" : "axis 4 is out of range of the "
                    "input (2, 3, 5) (axes 1..3 or -3..-1)", kiln_model_compile(m, &co));
        kiln_model_destroy(m);
    }
}

/* Compiling a model of Input(in) -> build fails with `status`, naming
 * what `needle` says. */
static void shape_refused(kiln_context *ctx, int32_t rank, const int32_t *in,
                          kiln_node (*build)(kiln_model *m, kiln_node x, int which), int which,
                          kiln_status status, const char *needle)
{
    const kiln_compile_options co = mse();
    kiln_model *m = new_model(ctx, rank, in);
    build(m, 0, which);
    CHECK_FAILS(ctx, status, needle, kiln_model_compile(m, &co));
    kiln_model_destroy(m);
}

/* The bad MatMul, Slice and Expand layers of test_shape_ops, by number. */
static kiln_node bad_shape_op(kiln_model *m, kiln_node x, int which)
{
    const int32_t rows[] = {3, 5, 2}, zero[] = {0, 5};
    const int32_t lower[] = {7}, wider[] = {2, 4, 3, 5, 1}, huge[] = {65536, 32768};
    switch (which) {
    case 0:   /* a vector */
        return kiln_matmul(m, kiln_flatten(m, x, NULL), kiln_flatten(m, x, NULL), NULL);
    case 1:   /* (2, 3, 5) by (2, 3, 5): 5 against 3 */
        return kiln_matmul(m, x, x, &(kiln_matmul_options){.name = "mm"});
    case 2:   /* (2, 3, 5) by (3, 5, 2): 2 against 3 */
        return kiln_matmul(m, x, kiln_reshape(m, x, 3, rows, NULL), NULL);
    case 3:   /* begin past the axis */
        return kiln_slice(m, x, &(kiln_slice_options){.begin = {0, 3}});
    case 4:   /* more values than the steps reach */
        return kiln_slice(m, x, &(kiln_slice_options){.begin = {0, 1}, .size = {0, 2},
                                                      .step = {0, 2}});
    case 5:   /* a negative size */
        return kiln_slice(m, x, &(kiln_slice_options){.size = {-1}});
    case 6:   /* an axis past the rank */
        return kiln_slice(m, x, &(kiln_slice_options){.begin = {0, 0, 0, 1}});
    case 7:   /* to a lower rank */
        return kiln_expand(m, x, 1, lower, NULL);
    case 8:   /* 3 neither 4 nor 1 */
        return kiln_expand(m, x, 4, wider, &(kiln_expand_options){.name = "ex"});
    case 9:   /* no dims */
        return kiln_expand(m, x, 2, NULL, NULL);
    case 10:  /* a dimension of 0 */
        return kiln_expand(m, x, 2, zero, NULL);
    case 11:  /* learned tokens without dims */
        return kiln_learned_tokens(m, x, 2, NULL, NULL);
    case 12:  /* a rank past KILN_MAX_RANK */
        return kiln_learned_tokens(m, x, 5, wider, &(kiln_learned_tokens_options){
                                                         .name = "cls"});
    case 13:  /* a dimension of 0 */
        return kiln_learned_tokens(m, x, 2, zero, NULL);
    default:  /* 2^31 floats */
        return kiln_learned_tokens(m, x, 2, huge, NULL);
    }
}

/* MatMul, Slice and Expand: their output shapes, and each bad shape or
 * option refused at compile, naming the layer and the shapes. */
static void test_shape_ops(kiln_context *ctx)
{
    const int32_t in[] = {2, 3, 5}, swap[] = {1, 3, 2}, to[] = {4, 2, 3, 5};
    kiln_model *m = new_model(ctx, 3, in);
    const kiln_node x = 0;
    kiln_matmul(m, x, kiln_permute(m, x, 3, swap, NULL), NULL);          /* 2: (2, 3, 3) */
    kiln_slice(m, x, &(kiln_slice_options){.begin = {1, 2, 4}, .step = {-1, -1, -2}});
    kiln_expand(m, x, 4, to, NULL);
    const int32_t scores[] = {2, 3, 3}, window[] = {2, 3, 3};
    CHECK_OK(ctx, kiln_model_set_outputs(m, (const kiln_node[]){2, 3, 4}, 3));
    const kiln_output_loss losses[3] = {{.struct_size = sizeof(kiln_output_loss),
                                         .loss = KILN_LOSS_MEAN_SQUARED_ERROR},
                                        {.struct_size = sizeof(kiln_output_loss),
                                         .loss = KILN_LOSS_MEAN_SQUARED_ERROR},
                                        {.struct_size = sizeof(kiln_output_loss),
                                         .loss = KILN_LOSS_MEAN_SQUARED_ERROR}};
    kiln_compile_options several = {.struct_size = sizeof several, .n_outputs = 3,
                                    .outputs = losses};
    CHECK_OK(ctx, kiln_model_compile(m, &several));
    check_layer(ctx, m, 2, "matmul", 3, scores);
    check_layer(ctx, m, 3, "slice", 3, window);
    check_layer(ctx, m, 4, "expand", 4, to);
    kiln_model_destroy(m);

    shape_refused(ctx, 3, in, bad_shape_op, 0, KILN_ERROR_SHAPE, "layer 'matmul' (matmul): "
                  "its inputs are (30,) and (30,); MatMul multiplies samples of rank 2 or more");
    shape_refused(ctx, 3, in, bad_shape_op, 1, KILN_ERROR_SHAPE, "layer 'mm' (matmul): its "
                  "inputs are (2, 3, 5) and (2, 3, 5): the first's last dimension (5) is not "
                  "the second's next to last (3)");
    shape_refused(ctx, 3, in, bad_shape_op, 2, KILN_ERROR_SHAPE, "its inputs are (2, 3, 5) and "
                  "(3, 5, 2), whose leading axes do not broadcast (2 against 3;");
    shape_refused(ctx, 3, in, bad_shape_op, 3, KILN_ERROR_SHAPE, "layer 'slice' (slice): "
                  "begin[1] 3 or size[1] 0 does not fit the input (2, 3, 5)");
    shape_refused(ctx, 3, in, bad_shape_op, 4, KILN_ERROR_SHAPE, "axis 1: 2 values from 1 in "
                  "steps of 2 pass the end of the input (2, 3, 5)");
    shape_refused(ctx, 3, in, bad_shape_op, 5, KILN_ERROR_SHAPE, "begin[0] 0 or size[0] -1 "
                  "does not fit");
    shape_refused(ctx, 3, in, bad_shape_op, 6, KILN_ERROR_INVALID_ARGUMENT, "begin[3] 1 or "
                  "size[3] 0 does not fit the input (2, 3, 5)");
    shape_refused(ctx, 3, in, bad_shape_op, 7, KILN_ERROR_SHAPE, "layer 'expand' (expand): "
                  "cannot expand input (2, 3, 5) to (7,), a lower rank");
    shape_refused(ctx, 3, in, bad_shape_op, 8, KILN_ERROR_SHAPE, "layer 'ex' (expand): cannot "
                  "expand input (2, 3, 5) to (2, 4, 3, 5): dimension 0 (2) is neither 4 nor 1");
    shape_refused(ctx, 3, in, bad_shape_op, 9, KILN_ERROR_INVALID_ARGUMENT, "target shape dims "
                  "NULL of rank 2");
    shape_refused(ctx, 3, in, bad_shape_op, 10, KILN_ERROR_INVALID_ARGUMENT, "target shape "
                  "(0, 5): dimension 0 is 0; each must be > 0");
    shape_refused(ctx, 3, in, bad_shape_op, 11, KILN_ERROR_INVALID_ARGUMENT, "layer "
                  "'learned_tokens' (learned_tokens): shape dims NULL of rank 2");
    shape_refused(ctx, 3, in, bad_shape_op, 12, KILN_ERROR_INVALID_ARGUMENT, "layer 'cls' "
                  "(learned_tokens): shape given of rank 5; it must be given, of rank 1..4");
    shape_refused(ctx, 3, in, bad_shape_op, 13, KILN_ERROR_INVALID_ARGUMENT, "shape (0, 5): "
                  "dimension 0 is 0; each must be > 0");
    shape_refused(ctx, 3, in, bad_shape_op, 14, KILN_ERROR_INVALID_ARGUMENT, "shape (65536, "
                  "32768) holds more than 2147483647 floats");
}

int main(void)
{
    kiln_context *ctx = test_context(3);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    test_reshape(ctx);
    test_concatenate(ctx);
    test_layer_norm(ctx);
    test_activations(ctx);
    test_window_options(ctx);
    test_reduce_softmax(ctx);
    test_shape_ops(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_layer_shapes");
}
