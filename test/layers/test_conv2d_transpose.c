/* Conv2DTranspose forward and backward against the float64 reference
 * (reference_conv_transpose.c, a scatter written from the definition), on
 * odd sizes, batch 1 and odd batches: Keras's 'valid' and 'same' with and
 * without output_padding, PyTorch's and ONNX's explicit pads, dilations,
 * groups, with and without a bias, its activation fused; the output shapes
 * of known cases; every refusal of bad options. */
#include "layer_check.h"
#include "reference_conv_transpose.h"
#include "reference.h"

#define TOL 2e-5

typedef struct convt_case {
    int filters, kh, kw, sh, sw;
    kiln_padding padding;
    kiln_activation act;
    int no_bias;
    int pads[4];             /* KILN_PADDING_EXPLICIT's (top, left, bottom, right) */
    int output_padding[2];   /* 0: Keras's None for 'valid' and 'same' */
    int dil[2], groups;      /* 0: 1 */
} convt_case;

static kiln_node build(kiln_model *m, kiln_node pre, const void *arg)
{
    const convt_case *c = arg;
    const kiln_conv2d_transpose_options o = {
        .struct_size = sizeof o, .filters = c->filters, .kernel_size = {c->kh, c->kw},
        .strides = {c->sh, c->sw}, .padding = c->padding, .activation = c->act,
        .no_bias = c->no_bias, .pads = {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
        .output_padding = {c->output_padding[0], c->output_padding[1]},
        .dilations = {c->dil[0], c->dil[1]}, .groups = c->groups};
    return kiln_conv2d_transpose(m, pre, &o);
}

/* The reference's geometry for case c over (h, w, channels). */
static ref_convt geometry(const convt_case *c, const int32_t *dims, int batch)
{
    ref_convt g = {.batch = batch, .h = dims[0], .w = dims[1], .c = dims[2], .f = c->filters,
                   .kh = c->kh, .kw = c->kw, .sh = c->sh ? c->sh : 1, .sw = c->sw ? c->sw : 1,
                   .dil_h = c->dil[0] ? c->dil[0] : 1, .dil_w = c->dil[1] ? c->dil[1] : 1,
                   .groups = c->groups};
    if (c->padding == KILN_PADDING_EXPLICIT) {
        ref_convt_axis_onnx(g.h, g.kh, g.sh, g.dil_h, c->pads[0], c->pads[2],
                            c->output_padding[0], &g.oh, &g.crop_top);
        ref_convt_axis_onnx(g.w, g.kw, g.sw, g.dil_w, c->pads[1], c->pads[3],
                            c->output_padding[1], &g.ow, &g.crop_left);
    } else {
        const int same = c->padding == KILN_PADDING_SAME;
        ref_convt_axis_keras(g.h, g.kh, g.sh, g.dil_h, same,
                             c->output_padding[0] ? c->output_padding[0] : -1, &g.oh,
                             &g.crop_top);
        ref_convt_axis_keras(g.w, g.kw, g.sw, g.dil_w, same,
                             c->output_padding[1] ? c->output_padding[1] : -1, &g.ow,
                             &g.crop_left);
    }
    return g;
}

static const char *const padding_name[] = {"valid", "same", "explicit"};

static void check(kiln_context *ctx, const int32_t *dims, int batch, const convt_case *c)
{
    layer_run r;
    if (!layer_run_once(ctx, 3, dims, batch, build, c, &r))
        return;
    const ref_convt g = geometry(c, dims, batch);
    char what[256];
    snprintf(what, sizeof what, "conv2d_transpose %dx%d stride %dx%d %s (%d, %d, %d, %d) "
             "output_padding (%d, %d) dilation %dx%d groups %d, %d filters, act %d%s, batch %d "
             "on (%d, %d, %d) -> (%d, %d), crop (%d, %d)", g.kh, g.kw, g.sh, g.sw,
             padding_name[c->padding], c->pads[0], c->pads[1], c->pads[2], c->pads[3],
             c->output_padding[0], c->output_padding[1], g.dil_h, g.dil_w,
             c->groups ? c->groups : 1, g.f, (int)c->act, c->no_bias ? ", no bias" : "", batch,
             dims[0], dims[1], dims[2], g.oh, g.ow, g.crop_top, g.crop_left);
    const int64_t ny = (int64_t)batch * g.oh * g.ow * g.f, nx = batch * r.in_size;
    if (ny != batch * r.out_size) {
        fprintf(stderr, "%s: output size %lld, reference %lld\n", what,
                (long long)(batch * r.out_size), (long long)ny);
        test_failures++;
        layer_run_free(&r);
        return;
    }
    const int64_t nw = (int64_t)g.kh * g.kw * (g.f / (c->groups ? c->groups : 1)) * g.c;
    double *z = calloc((size_t)ny, sizeof(double)), *y = calloc((size_t)ny, sizeof(double));
    double *dz = calloc((size_t)ny, sizeof(double)), *dx = calloc((size_t)nx, sizeof(double));
    double *dw = calloc((size_t)nw, sizeof(double)), *db = calloc((size_t)g.f, sizeof(double));
    ref_convt_forward(&g, r.x, r.params[0], c->no_bias ? NULL : r.params[1], z);
    ref_activation_forward(c->act, z, (int)(ny / g.f), g.f, y);
    ref_activation_backward_z(c->act, z, r.dy, (int)(ny / g.f), g.f, dz);
    ref_convt_backward(&g, r.x, r.params[0], dz, dw, c->no_bias ? NULL : db, dx);
    test_worst = 0;
    test_close(what, 0, r.y, y, sizeof(double), ny, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dparams[0], dw, sizeof(double), nw, TEST_OF_ARRAY, TOL);
    if (!c->no_bias)
        test_close(what, 0, r.dparams[1], db, sizeof(double), g.f, TEST_OF_ARRAY, TOL);
    test_close(what, 0, r.dx, dx, sizeof(double), nx, TEST_OF_ARRAY, TOL);
    printf("%s: largest error %.2g\n", what, test_worst);
    free(z), free(y), free(dz), free(dx), free(dw), free(db);
    layer_run_free(&r);
}

static const kiln_compile_options *mse(void)
{
    static const kiln_compile_options co = {.struct_size = sizeof co,
                                            .loss = KILN_LOSS_MEAN_SQUARED_ERROR};
    return &co;
}

/* The layer on (h, w, c) compiles to (oh, ow, filters). */
static void shape_is(kiln_context *ctx, const int32_t *in, const kiln_conv2d_transpose_options *o,
                     int32_t oh, int32_t ow, const char *why)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    kiln_conv2d_transpose(m, kiln_input(m, 3, in, NULL), o);
    CHECK_OK(ctx, kiln_model_compile(m, mse()));
    kiln_layer_info li = {.struct_size = sizeof li};
    CHECK_OK(ctx, kiln_model_layer_info(m, 1, &li));
    const int ok = li.rank == 3 && li.dims[0] == oh && li.dims[1] == ow &&
                   li.dims[2] == o->filters && !strcmp(li.kind, "conv2d_transpose");
    printf("%s: (%d, %d, %d)\n", why, (int)li.dims[0], (int)li.dims[1], (int)li.dims[2]);
    if (!ok)
        fprintf(stderr, "%s: want (%d, %d, %d)\n", why, (int)oh, (int)ow, (int)o->filters);
    CHECK(ok);
    kiln_model_destroy(m);
}

/* Shapes worked out by hand from Keras's and PyTorch's formulas. */
static void shapes(kiln_context *ctx)
{
    const int32_t in[] = {5, 7, 3};
    kiln_conv2d_transpose_options o = {.struct_size = sizeof o, .filters = 4,
                                       .kernel_size = {3, 3}, .strides = {2, 2},
                                       .padding = KILN_PADDING_SAME};
    shape_is(ctx, in, &o, 10, 14, "Keras 3x3/2 'same': in x 2");
    o.padding = KILN_PADDING_VALID;
    shape_is(ctx, in, &o, 11, 15, "Keras 3x3/2 'valid': (in - 1) x 2 + 3");
    o.kernel_size[0] = 1;   /* narrower than the stride: in x 2 */
    shape_is(ctx, in, &o, 10, 15, "Keras 1x3/2 'valid'");
    o.output_padding[0] = 1;
    o.kernel_size[0] = 3;
    o.padding = KILN_PADDING_SAME;
    shape_is(ctx, in, &o, 10, 14, "Keras 3x3/2 'same' output_padding (1, 0): 8 + 3 - 2 + 1");
    o.padding = KILN_PADDING_EXPLICIT;
    o.pads[0] = o.pads[1] = o.pads[2] = o.pads[3] = 1;
    o.output_padding[1] = 1;
    shape_is(ctx, in, &o, 10, 14, "PyTorch padding 1, output_padding 1: in x 2");
    o.dilations[0] = 2;
    o.output_padding[0] = 0;
    shape_is(ctx, in, &o, 11, 14, "dilated 2: 8 + 5 - 2");
}

static void refusals(kiln_context *ctx)
{
    const int32_t in[] = {5, 7, 4};
    const struct {
        kiln_conv2d_transpose_options o;
        kiln_status status;
        const char *why;
    } bad[] = {
        {{.filters = 0, .kernel_size = {3, 3}}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 't' (conv2d_transpose): filters (0), kernel_size (3, 3) and strides (1, 1) "
         "must be > 0"},
        {{.filters = 2, .kernel_size = {3, 3}, .strides = {-1, 1}}, KILN_ERROR_INVALID_ARGUMENT,
         "strides (-1, 1) must be > 0"},
        {{.filters = 2, .kernel_size = {3, 3}, .padding = (kiln_padding)5},
         KILN_ERROR_INVALID_ARGUMENT, "layer 't' (conv2d_transpose): padding 5 is not a "
         "kiln_padding"},
        {{.filters = 2, .kernel_size = {3, 3}, .padding = KILN_PADDING_EXPLICIT,
          .pads = {0, 1, -1, 0}}, KILN_ERROR_INVALID_ARGUMENT, "pads (0, 1, -1, 0) must be >= 0"},
        {{.filters = 2, .kernel_size = {3, 3}, .strides = {2, 2}, .output_padding = {2, 0}},
         KILN_ERROR_INVALID_ARGUMENT, "layer 't' (conv2d_transpose): output_padding (2, 0) must "
         "be >= 0 and below the strides (2, 2) or the dilations (1, 1)"},
        {{.filters = 2, .kernel_size = {3, 3}, .output_padding = {0, -1}},
         KILN_ERROR_INVALID_ARGUMENT, "output_padding (0, -1) must be >= 0"},
        {{.filters = 2, .kernel_size = {3, 3}, .dilations = {1, -2}},
         KILN_ERROR_INVALID_ARGUMENT, "dilations (1, -2) must be >= 0"},
        {{.filters = 6, .kernel_size = {3, 3}, .groups = 3}, KILN_ERROR_INVALID_ARGUMENT,
         "layer 't' (conv2d_transpose): groups 3 must divide the input's channels (4) and the "
         "filters (6)"},
        {{.filters = 6, .kernel_size = {3, 3}, .groups = -2}, KILN_ERROR_INVALID_ARGUMENT,
         "groups -2"},
        /* 5 + 3 - 1 = 7 rows, all cropped. */
        {{.filters = 2, .kernel_size = {3, 3}, .padding = KILN_PADDING_EXPLICIT,
          .pads = {4, 0, 3, 0}}, KILN_ERROR_SHAPE,
         "layer 't' (conv2d_transpose): pads (4, 0, 3, 0) crop all of the output (0, 9)"},
        {{.filters = 2, .kernel_size = {3, 3}, .strides = {1, 1 << 30}}, KILN_ERROR_SHAPE,
         "makes an output longer than 2147483647 pixels"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_conv2d_transpose_options o = bad[i].o;
        o.struct_size = sizeof o;
        o.name = "t";
        kiln_model *m = NULL;
        CHECK_OK(ctx, kiln_model_create(ctx, &m));
        kiln_conv2d_transpose(m, kiln_input(m, 3, in, NULL), &o);
        CHECK_FAILS(ctx, bad[i].status, bad[i].why, kiln_model_compile(m, mse()));
        printf("refused: %s\n", kiln_context_last_error(ctx));
        kiln_model_destroy(m);
    }
    /* A rank-2 input, and options too short to hold the kernel size. */
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t flat[] = {5, 4};
    const kiln_conv2d_transpose_options o = {.struct_size = sizeof o, .filters = 2,
                                             .kernel_size = {3, 3}};
    kiln_conv2d_transpose(m, kiln_input(m, 2, flat, NULL), &o);
    CHECK_FAILS(ctx, KILN_ERROR_SHAPE, "expects a (height, width, channels) input, got (5, 4)",
                kiln_model_compile(m, mse()));
    kiln_model_destroy(m);
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const kiln_conv2d_transpose_options tiny = {.struct_size = sizeof(size_t)};
    kiln_conv2d_transpose(m, kiln_input(m, 3, in, NULL), &tiny);
    CHECK_FAILS(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_conv2d_transpose_options",
                kiln_model_compile(m, mse()));
    kiln_model_destroy(m);
}

int main(void)
{
    kiln_context *ctx = test_context(7);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    const int32_t img[] = {5, 4, 3}, tall[] = {7, 3, 2}, quad[] = {4, 5, 4};
    const convt_case cases[] = {
        /* Keras's decoder: 3x3 stride 2 'same' doubles the size. */
        {.filters = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_RELU},
        /* PyTorch's: padding 1, output_padding 1 (the same size, shifted). */
        {.filters = 5, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 1, 1, 1}, .output_padding = {1, 1}, .act = KILN_ACTIVATION_TANH,
         .no_bias = 1},
        /* 2x2 stride 2 'valid': each pixel its own block. */
        {.filters = 3, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_SIGMOID},
        /* A kernel narrower than its stride: rows no pixel reaches. */
        {.filters = 2, .kh = 2, .kw = 3, .sh = 3, .sw = 2, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_LINEAR},
        /* Keras's 'same' and 'valid' with output_padding. */
        {.filters = 3, .kh = 4, .kw = 3, .sh = 2, .sw = 3, .padding = KILN_PADDING_SAME,
         .output_padding = {1, 2}, .act = KILN_ACTIVATION_LINEAR},
        {.filters = 3, .kh = 3, .kw = 2, .sh = 3, .sw = 2, .padding = KILN_PADDING_VALID,
         .output_padding = {2, 1}, .act = KILN_ACTIVATION_LINEAR},
        /* 'same' at stride 1 keeps the size; 1x1 is a per-pixel Dense. */
        {.filters = 6, .kh = 3, .kw = 2, .sh = 1, .sw = 1, .padding = KILN_PADDING_SAME,
         .act = KILN_ACTIVATION_LINEAR},
        {.filters = 4, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .padding = KILN_PADDING_VALID,
         .act = KILN_ACTIVATION_LINEAR, .no_bias = 1},
        /* Dilated, asymmetric pads, output_padding below the dilation only. */
        {.filters = 3, .kh = 3, .kw = 2, .sh = 1, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {2, 0, 1, 1}, .output_padding = {1, 0}, .dil = {2, 1},
         .act = KILN_ACTIVATION_LINEAR},
        /* Pads larger than the kernel crop past it. */
        {.filters = 2, .kh = 2, .kw = 2, .sh = 2, .sw = 1, .padding = KILN_PADDING_EXPLICIT,
         .pads = {3, 1, 0, 1}, .act = KILN_ACTIVATION_LINEAR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check(ctx, img, 1, &cases[i]);
        check(ctx, tall, 3, &cases[i]);
    }
    /* Groups: 2 over 4 channels to 6 filters, and depthwise-like 4 to 4. */
    const convt_case grouped[] = {
        {.filters = 6, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .padding = KILN_PADDING_EXPLICIT,
         .pads = {1, 0, 0, 1}, .output_padding = {1, 0}, .groups = 2,
         .act = KILN_ACTIVATION_LINEAR},
        {.filters = 4, .kh = 2, .kw = 3, .sh = 1, .sw = 2, .padding = KILN_PADDING_SAME,
         .groups = 4, .act = KILN_ACTIVATION_LINEAR, .no_bias = 1},
    };
    for (size_t i = 0; i < sizeof grouped / sizeof grouped[0]; i++)
        check(ctx, quad, 3, &grouped[i]);
    /* Wider than the GEMM tiles: 37 channels to 19 filters, batch 5. */
    const int32_t deep[] = {6, 7, 37};
    const convt_case wide = {.filters = 19, .kh = 3, .kw = 3, .sh = 2, .sw = 2,
                             .padding = KILN_PADDING_SAME, .act = KILN_ACTIVATION_LINEAR};
    check(ctx, deep, 5, &wide);
    /* Not the output: the activation applied by the layer itself, with a
     * bias and without. */
    check_inner = 1;
    for (size_t i = 0; i < 3; i++)
        check(ctx, img, 2, &cases[i]);
    check_inner = 0;
    shapes(ctx);
    refusals(ctx);
    kiln_context_destroy(ctx);
    return test_finish("test_conv2d_transpose");
}
