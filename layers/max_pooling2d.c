/* MaxPooling2D over NHWC; 'same' padding never picks a padded cell. */
#include "layers/pool2d.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

typedef struct pool_replica {
    kiln_buffer *argmax;   /* per output: index of the winner within its sample */
    kiln_kernel *forward, *backward;
} pool_replica;

static kiln_status pool_kernels(const void *config, void *replica, kiln_device *dev)
{
    pool_replica *r = replica;
    (void)config;
    kiln_status st = kiln_kernel_get_variant(dev, "max_pooling2d", "kiln_max_pooling2d_forward",
                                        &r->forward);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "max_pooling2d", "kiln_max_pooling2d_backward",
                                &r->backward);
    return st;
}

static kiln_status pool_prepare(const void *config, void *replica, kiln_device *dev,
                                const kiln_shape *in_shape, int32_t max_batch)
{
    (void)in_shape;
    return kiln_buffer_create(dev, kiln_pool2d_out_count(config, max_batch) * sizeof(int32_t),
                              "max-pooling indices", &((pool_replica *)replica)->argmax);
}

static void pool_release(void *replica)
{
    pool_replica *r = replica;
    kiln_buffer_destroy(r->argmax);
    r->argmax = NULL;
}

static kiln_status pool_forward(const void *config, void *replica, const kiln_step *s)
{
    const pool_config *c = config;
    const pool_replica *r = replica;
    const size_t pixels = kiln_pool2d_out_count(c, s->batch) / (size_t)c->c;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_buffer(r->argmax), KILN_POOL2D_GEOMETRY_ARGS(c, pixels));
    return kiln_pool2d_run(s->dev, r->forward, pixels, (size_t)c->ow, (size_t)c->c, a);
}

static kiln_status pool_backward(const void *config, void *replica, const kiln_step *s)
{
    const pool_config *c = config;
    const pool_replica *r = replica;
    if (!s->d_in[0])
        return KILN_OK;
    const size_t pixels = (size_t)s->batch * (size_t)c->h * (size_t)c->w;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_buffer(r->argmax),
                            kiln_arg_buffer(s->d_in[0]), KILN_POOL2D_GEOMETRY_ARGS(c, pixels),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return kiln_pool2d_run(s->dev, r->backward, pixels, (size_t)c->w, (size_t)c->c, a);
}

/* args: the kiln_pool2d_options the builder copied. */
static void pool_configure(void *config, const void *args)
{
    *(pool_config *)config = kiln_pool2d_config(args);
}

static void max_pooling2d_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    kiln_pool2d_export_onnx(g, i, "MaxPool");
}

static kiln_status max_pooling2d_import_onnx(kiln_onnx_import *imp)
{
    return kiln_pool2d_import_onnx(imp, 0);
}

/* No args: the window is the whole input. */
static void global_max_configure(void *config, const void *args)
{
    (void)args;
    *(pool_config *)config = (pool_config){.padding = KILN_PADDING_VALID, .global = 1};
}

/* From NCHW when the input is there already, else a maximum over H and W
 * of NHWC (opset 13's ReduceMax takes its axes as an attribute). */
static void global_max_pooling2d_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const kiln_onnx_value *in = &g->values[g->values[kiln_onnx_input(g, i, 0)].rep];
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    if (in->name[KILN_ONNX_CL]) {
        kiln_onnx_node *nd = kiln_onnx_add_node(g, "ReduceMax", &in->name[KILN_ONNX_CL], 1, out);
        const int64_t axes[2] = {1, 2};
        kiln_onnx_attr_ints(g, nd, "axes", axes, 2);
        kiln_onnx_attr_int(g, nd, "keepdims", 0);
    } else {
        const char *pooled = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/nchw_pooled",
                                                                       g->layers[i].name));
        kiln_onnx_add_node(g, "GlobalMaxPool", &in->name[KILN_ONNX_CF], 1, pooled);
        kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Flatten", &pooled, 1, out), "axis", 1);
    }
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_max_pooling2d = {
    .kind = "max_pooling2d", .config_size = sizeof(pool_config),
    .replica_size = sizeof(pool_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = pool_configure, .describe = kiln_pool2d_describe, .infer = kiln_pool2d_infer,
    .kernels = pool_kernels, .prepare = pool_prepare, .forward = pool_forward,
    .backward = pool_backward, .release = pool_release, .flops = kiln_pool2d_flops,
    .args_size = sizeof(kiln_pool2d_options), KILN_FIELDS(kiln_pool2d_fields),
    .export_onnx = max_pooling2d_export_onnx,
    .import_onnx = max_pooling2d_import_onnx,
};

const kiln_layer_ops kiln_layer_global_max_pooling2d = {
    .kind = "global_max_pooling2d", .config_size = sizeof(pool_config),
    .replica_size = sizeof(pool_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = global_max_configure, .infer = kiln_pool2d_infer, .kernels = pool_kernels,
    .prepare = pool_prepare, .forward = pool_forward, .backward = pool_backward,
    .release = pool_release, .flops = kiln_pool2d_flops,
    .export_onnx = global_max_pooling2d_export_onnx,
    .import_onnx = kiln_pool2d_import_global,
};
