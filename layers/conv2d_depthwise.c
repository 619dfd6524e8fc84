/* Conv2D's depthwise path (opencl/kernels/conv2d_depthwise.cl), for groups
 * == channels == filters (mobilenet's): direct kernels for the forward and
 * both gradients; the weight gradient is summed per chunk of output pixels,
 * then over the chunks in a fixed order, as on the direct path. */
#include "layers/conv2d.h"

/* The weight gradient's sums over pixels: on a CPU, chunks of at least this
 * many pixels, enough work per work-item (kiln_chunk_length). */
#define MIN_CHUNK_PIXELS 256

/* Here, not in conv2d.c, so that tests can wrap the choice at link time
 * and run the grouped GEMM on the same shapes. */
int32_t kiln_conv2d_use_depthwise(const conv2d_config *c)
{
    return c->groups == c->c && c->groups == c->filters;
}

kiln_status kiln_conv2d_depthwise_kernels(conv2d_replica *r, kiln_device *dev)
{
    kiln_status st = kiln_kernel_get_variant(dev, "conv2d_depthwise",
                                             "kiln_conv2d_depthwise_forward", &r->kernels.forward);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "conv2d_depthwise", "kiln_conv2d_depthwise_grad_partial",
                                     &r->kernels.grad_partial);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "conv2d_direct", "kiln_conv2d_direct_reduce",
                             &r->kernels.reduce);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "conv2d_depthwise", "kiln_conv2d_depthwise_input_grad",
                                     &r->kernels.input_grad);
    return st;
}

/* Taps of one channel's kernel; the partial sums have K + 1 rows, the bias
 * last. */
static size_t taps(const conv2d_config *c)
{
    return (size_t)c->kh * (size_t)c->kw;
}

size_t kiln_conv2d_depthwise_scratch(const conv2d_config *c, const kiln_device *dev,
                                     int32_t max_batch)
{
    const size_t pixels = kiln_conv2d_out_pixels(c, max_batch);
    const size_t per = kiln_chunk_length(dev, pixels, MIN_CHUNK_PIXELS);
    const size_t chunks = (pixels + per - 1) / per;
    return chunks * (taps(c) + 1) * (size_t)c->c * sizeof(float);
}

/* A pixel kernel's two ranges: a value a work-item over (C, width, rows)
 * (GPU), or eight channels of a row over (channel blocks, rows) (CPU). */
static kiln_status run_pixels(kiln_device *dev, kiln_kernel *kernel, size_t channels,
                              size_t width, size_t rows, kiln_args a)
{
    const kiln_range cpu = {.dims = 2, .size = {(channels + 7) / 8, rows}};
    const kiln_range gpu = {.dims = 3, .size = {channels, width, rows}};
    return kiln_kernel_run_variant(dev, kernel, &cpu, &gpu, a);
}

kiln_status kiln_conv2d_depthwise_forward(const conv2d_config *c, conv2d_replica *r,
                                          const kiln_step *s)
{
    const size_t rows = (size_t)s->batch * (size_t)c->oh;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_buffer(s->params), kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_int(c->use_bias ? (int64_t)s->param_offset[1] : 0),
                            kiln_arg_int(c->use_bias), kiln_arg_int(s->activation),
                            kiln_arg_int((int64_t)rows), KILN_CONV2D_WINDOW_ARGS(c));
    return run_pixels(s->dev, r->kernels.forward, (size_t)c->c, (size_t)c->ow, rows, a);
}

static kiln_status weight_grad(const conv2d_config *c, conv2d_replica *r, const kiln_step *s)
{
    const size_t pixels = kiln_conv2d_out_pixels(c, s->batch), k = taps(c);
    const size_t per = kiln_chunk_length(s->dev, pixels, MIN_CHUNK_PIXELS);
    const size_t chunks = (pixels + per - 1) / per;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(r->scratch), kiln_arg_int((int64_t)chunks),
                            kiln_arg_int((int64_t)per), kiln_arg_int((int64_t)pixels),
                            KILN_CONV2D_WINDOW_ARGS(c));
    const kiln_range cpu = {.dims = 3, .size = {((size_t)c->c + 7) / 8, k + 1, chunks}};
    const kiln_range gpu = {.dims = 3, .size = {(size_t)c->c, k + 1, chunks}};
    kiln_status st = kiln_kernel_run_variant(s->dev, r->kernels.grad_partial, &cpu, &gpu, a);
    if (st != KILN_OK)
        return st;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(r->scratch), kiln_arg_buffer(s->grads),
                            kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_int(c->use_bias ? (int64_t)s->param_offset[1] : 0),
                            kiln_arg_int(c->use_bias), kiln_arg_int(c->c),
                            kiln_arg_int((int64_t)k), kiln_arg_int((int64_t)chunks));
    const size_t sums[2] = {(size_t)c->c, k + 1};
    return kiln_kernel_run(s->dev, r->kernels.reduce, 2, sums, b);
}

kiln_status kiln_conv2d_depthwise_backward(const conv2d_config *c, conv2d_replica *r,
                                           const kiln_step *s)
{
    kiln_status st = s->frozen ? KILN_OK : weight_grad(c, r, s);   /* frozen: no gradient kept */
    if (st != KILN_OK || !s->d_in[0])
        return st;
    const size_t rows = (size_t)s->batch * (size_t)c->h;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_buffer(s->params),
                            kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_buffer(s->d_in[0]), kiln_arg_int(s->d_in_accumulate[0]),
                            kiln_arg_int((int64_t)rows), KILN_CONV2D_WINDOW_ARGS(c));
    return run_pixels(s->dev, r->kernels.input_grad, (size_t)c->c, (size_t)c->w, rows, a);
}
