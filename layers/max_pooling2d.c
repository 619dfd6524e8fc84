/* MaxPooling2D over NHWC; 'same' padding never picks a padded cell. */
#include "layers/pool2d.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <string.h>

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

/* MaxPool, and GlobalMaxPool as one window of the input's whole H x W:
 * the same maximum, and the gradient to its first place as PyTorch's
 * adaptive max pool sends it. */
static kiln_status max_pooling2d_import_onnx(kiln_onnx_import *imp)
{
    if (strcmp(imp->op, "GlobalMaxPool") != 0)
        return kiln_pool2d_import_onnx(imp, 0);
    const kiln_status st = kiln_onnx_check_attrs(imp, "");
    if (st != KILN_OK)
        return st;
    const kiln_onnx_in *x = &imp->in[0];
    if (x->rank != 4)
        return kiln_onnx_refuse(imp, "X is %d-D; kiln pools 4-D (N, C, H, W) values", x->rank);
    if (x->dims[2] < 1 || x->dims[3] < 1 || x->dims[2] > INT32_MAX || x->dims[3] > INT32_MAX)
        return kiln_onnx_refuse(imp, "X's H and W are %lld and %lld; kiln needs them known",
                                (long long)x->dims[2], (long long)x->dims[3]);
    kiln_pool2d_options *o = (kiln_pool2d_options *)imp->args.bytes;
    *o = (kiln_pool2d_options){.struct_size = sizeof *o,
                               .pool_size = {(int32_t)x->dims[2], (int32_t)x->dims[3]},
                               .strides = {1, 1}, .padding = KILN_PADDING_VALID};
    imp->want = KILN_ONNX_WANT_CHANNELS_LAST;
    imp->n_data = 1;
    return KILN_OK;
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
