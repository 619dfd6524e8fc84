/* AveragePooling2D and GlobalAveragePooling2D over NHWC: one pair of
 * kernels, the global layer's window being the whole input. */
#include "layers/pool2d.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

/* What divides a sum, after the window geometry: count_include_pad and
 * the padding after, which it counts. */
#define AVERAGE_ARGS(c)                                                                       \
    kiln_arg_int((c)->include_pad), kiln_arg_int((c)->pad_bottom), kiln_arg_int((c)->pad_right)

typedef struct avg_replica {
    kiln_kernel *forward, *backward;
} avg_replica;

static kiln_status avg_kernels(const void *config, void *replica, kiln_device *dev)
{
    avg_replica *r = replica;
    (void)config;
    kiln_status st = kiln_kernel_get_variant(dev, "average_pooling2d",
                                        "kiln_average_pooling2d_forward", &r->forward);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "average_pooling2d",
                                "kiln_average_pooling2d_backward", &r->backward);
    return st;
}

static kiln_status avg_forward(const void *config, void *replica, const kiln_step *s)
{
    const pool_config *c = config;
    const avg_replica *r = replica;
    const size_t pixels = kiln_pool2d_out_count(c, s->batch) / (size_t)c->c;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            KILN_POOL2D_GEOMETRY_ARGS(c, pixels), AVERAGE_ARGS(c));
    return kiln_pool2d_run(s->dev, r->forward, pixels, (size_t)c->ow, (size_t)c->c, a);
}

static kiln_status avg_backward(const void *config, void *replica, const kiln_step *s)
{
    const pool_config *c = config;
    const avg_replica *r = replica;
    if (!s->d_in[0])
        return KILN_OK;
    const size_t pixels = (size_t)s->batch * (size_t)c->h * (size_t)c->w;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_buffer(s->d_in[0]),
                            KILN_POOL2D_GEOMETRY_ARGS(c, pixels), AVERAGE_ARGS(c),
                            kiln_arg_int(s->d_in_accumulate[0]));
    return kiln_pool2d_run(s->dev, r->backward, pixels, (size_t)c->w, (size_t)c->c, a);
}

/* args: the kiln_pool2d_options the builder copied. */
static void avg_configure(void *config, const void *args)
{
    *(pool_config *)config = kiln_pool2d_config(args);
}

/* No args: the window is the whole input. */
static void global_avg_configure(void *config, const void *args)
{
    (void)args;
    *(pool_config *)config = (pool_config){.padding = KILN_PADDING_VALID, .global = 1};
}

static void average_pooling2d_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    kiln_pool2d_export_onnx(g, i, "AveragePool");
}

/* From NCHW when the input is there already, else a mean over H and W of
 * NHWC: no transpose either way. */
static void global_average_pooling2d_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const kiln_onnx_value *in = &g->values[g->values[kiln_onnx_input(g, i, 0)].rep];
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    if (in->name[KILN_ONNX_CL]) {
        kiln_onnx_node *nd = kiln_onnx_add_node(g, "ReduceMean", &in->name[KILN_ONNX_CL], 1,
                                                out);
        const int64_t axes[2] = {1, 2};
        kiln_onnx_attr_ints(g, nd, "axes", axes, 2);
        kiln_onnx_attr_int(g, nd, "keepdims", 0);
    } else {
        const char *pooled = kiln_onnx_unique_name(g, kiln_onnx_printf(g, "%s/nchw_pooled",
                                                                       g->layers[i].name));
        kiln_onnx_add_node(g, "GlobalAveragePool", &in->name[KILN_ONNX_CF], 1, pooled);
        kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Flatten", &pooled, 1, out), "axis", 1);
    }
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

static kiln_status average_pooling2d_import_onnx(kiln_onnx_import *imp)
{
    return kiln_pool2d_import_onnx(imp, 1);
}

const kiln_layer_ops kiln_layer_average_pooling2d = {
    .kind = "average_pooling2d", .config_size = sizeof(pool_config),
    .replica_size = sizeof(avg_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = avg_configure, .describe = kiln_pool2d_describe, .infer = kiln_pool2d_infer,
    .kernels = avg_kernels, .forward = avg_forward, .backward = avg_backward,
    .flops = kiln_pool2d_flops,
    .args_size = sizeof(kiln_pool2d_options), KILN_FIELDS(kiln_pool2d_fields),
    .export_onnx = average_pooling2d_export_onnx,
    .import_onnx = average_pooling2d_import_onnx,
};

const kiln_layer_ops kiln_layer_global_average_pooling2d = {
    .kind = "global_average_pooling2d", .config_size = sizeof(pool_config),
    .replica_size = sizeof(avg_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = global_avg_configure, .infer = kiln_pool2d_infer, .kernels = avg_kernels,
    .forward = avg_forward, .backward = avg_backward, .flops = kiln_pool2d_flops,
    .export_onnx = global_average_pooling2d_export_onnx,
    .import_onnx = kiln_pool2d_import_global,
};
