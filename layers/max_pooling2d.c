/* MaxPooling2D over NHWC; 'same' padding never picks a padded cell. */
#include "layers/layer.h"
#include "runtime/context.h"

#include <stdio.h>

typedef struct pool_config {
    int32_t ph, pw, sh, sw;
    kiln_padding padding;
    /* inferred */
    int32_t h, w, c, oh, ow, pad_top, pad_left;
} pool_config;

typedef struct pool_replica {
    kiln_buffer *argmax;   /* per output: index of the winner within its sample */
} pool_replica;

static kiln_status pool_infer(void *config, kiln_layer_build *b)
{
    pool_config *c = config;
    const kiln_shape *in = &b->in[0];
    char s[64];
    if (c->ph <= 0 || c->pw <= 0 || c->sh <= 0 || c->sw <= 0) {
        snprintf(b->error, sizeof b->error, "pool_size (%d, %d) and strides (%d, %d) must be "
                 "> 0", (int)c->ph, (int)c->pw, (int)c->sh, (int)c->sw);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if ((int)c->padding < KILN_PADDING_VALID || c->padding > KILN_PADDING_SAME) {
        snprintf(b->error, sizeof b->error, "padding %d is not a kiln_padding", (int)c->padding);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (in->rank != 3) {
        snprintf(b->error, sizeof b->error, "expects a (height, width, channels) input, got %s",
                 kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    c->h = in->dims[0];
    c->w = in->dims[1];
    c->c = in->dims[2];
    if (!kiln_window_output(c->h, c->ph, c->sh, c->padding, &c->oh, &c->pad_top) ||
        !kiln_window_output(c->w, c->pw, c->sw, c->padding, &c->ow, &c->pad_left)) {
        snprintf(b->error, sizeof b->error, "pool (%d, %d) is larger than input %s with "
                 "'valid' padding", (int)c->ph, (int)c->pw, kiln_shape_str(in, s, sizeof s));
        return KILN_ERROR_SHAPE;
    }
    b->out.rank = 3;
    b->out.dims[0] = c->oh;
    b->out.dims[1] = c->ow;
    b->out.dims[2] = c->c;
    return KILN_OK;
}

static size_t out_count(const pool_config *c, int32_t batch)
{
    return (size_t)batch * (size_t)c->oh * (size_t)c->ow * (size_t)c->c;
}

static kiln_status pool_prepare(const void *config, void *replica, kiln_device *dev,
                                const kiln_shape *in_shape, int32_t max_batch)
{
    (void)in_shape;
    return kiln_buffer_create(dev, out_count(config, max_batch) * sizeof(int32_t),
                              "max-pooling indices", &((pool_replica *)replica)->argmax);
}

static void pool_release(void *replica)
{
    pool_replica *r = replica;
    kiln_buffer_destroy(r->argmax);
    r->argmax = NULL;
}

/* Arguments after the buffers; `count` is the number of pixels (work-items). */
static void geometry_args(const pool_config *c, size_t count, kiln_arg *a)
{
    a[0] = kiln_arg_int((int64_t)count);
    a[1] = kiln_arg_int(c->h);
    a[2] = kiln_arg_int(c->w);
    a[3] = kiln_arg_int(c->c);
    a[4] = kiln_arg_int(c->oh);
    a[5] = kiln_arg_int(c->ow);
    a[6] = kiln_arg_int(c->ph);
    a[7] = kiln_arg_int(c->pw);
    a[8] = kiln_arg_int(c->sh);
    a[9] = kiln_arg_int(c->sw);
    a[10] = kiln_arg_int(c->pad_top);
    a[11] = kiln_arg_int(c->pad_left);
}

static kiln_status pool_forward(const void *config, void *replica, const kiln_step *s)
{
    const pool_config *c = config;
    const pool_replica *r = replica;
    const size_t pixels = out_count(c, s->batch) / (size_t)c->c;
    kiln_arg a[15];
    a[0] = kiln_arg_buffer(s->in[0]);
    a[1] = kiln_arg_buffer(s->out);
    a[2] = kiln_arg_buffer(r->argmax);
    geometry_args(c, pixels, a + 3);
    return kiln_run1(s->dev, "max_pooling2d", "kiln_max_pooling2d_forward", pixels, a, 15);
}

static kiln_status pool_backward(const void *config, void *replica, const kiln_step *s)
{
    const pool_config *c = config;
    const pool_replica *r = replica;
    if (!s->d_in[0])
        return KILN_OK;
    const size_t pixels = (size_t)s->batch * (size_t)c->h * (size_t)c->w;
    kiln_arg a[16];
    a[0] = kiln_arg_buffer(s->d_out);
    a[1] = kiln_arg_buffer(r->argmax);
    a[2] = kiln_arg_buffer(s->d_in[0]);
    geometry_args(c, pixels, a + 3);
    a[15] = kiln_arg_int(s->d_in_accumulate[0]);
    return kiln_run1(s->dev, "max_pooling2d", "kiln_max_pooling2d_backward", pixels, a, 16);
}

static uint64_t pool_flops(const void *config, const kiln_shape *in_shape)
{
    const pool_config *c = config;
    (void)in_shape;
    return (uint64_t)out_count(c, 1) * (uint64_t)c->ph * (uint64_t)c->pw;
}

const kiln_layer_ops kiln_layer_max_pooling2d = {
    "max_pooling2d", sizeof(pool_config), sizeof(pool_replica), 1, 1, pool_infer, pool_prepare,
    pool_forward, pool_backward, pool_release, pool_flops,
};

kiln_node kiln_max_pooling2d(kiln_model *model, kiln_node input,
                             const kiln_pool2d_options *options)
{
    kiln_pool2d_options o;
    kiln_options_copy(&o, sizeof o, options);
    const int32_t ph = o.pool_size[0] ? o.pool_size[0] : 2;
    const int32_t pw = o.pool_size[1] ? o.pool_size[1] : 2;
    pool_config c = {ph, pw, o.strides[0] ? o.strides[0] : ph, o.strides[1] ? o.strides[1] : pw,
                     o.padding, 0, 0, 0, 0, 0, 0, 0};
    return kiln_model_add_layer(model, &kiln_layer_max_pooling2d, &c, &input, 1, o.name,
                                KILN_ACTIVATION_LINEAR);
}
