/* Conv2D's direct path (opencl/kernels/conv2d_direct.cl): no im2col matrix;
 * the weight gradient is summed per chunk of output pixels, then over the
 * chunks in a fixed order, so results do not depend on the device. */
#include "layers/conv2d.h"

/* The weight gradient's sums over pixels: on a CPU, chunks of at least
 * this many pixels, enough work per work-item (kiln_chunk_length). */
#define MIN_CHUNK_PIXELS 256
/* Most window elements per weight-gradient work-item (TAPS in the kernel),
 * and filters per work-item of the CPU variant (8 x BLOCKS there; the GPU
 * variant takes one). */
#define GRAD_TAPS 5
#define GRAD_FILTERS 32

/* Small patches go direct, but 1x1 windows: strided (stride 1 is
 * conv2d_pointwise.c's), the direct input gradient ran at a third of
 * im2col + GEMM's speed (docs/performance.md). Here, not in conv2d.c, so
 * that tests can wrap the choice at link time and run both paths on every
 * shape. */
int32_t kiln_conv2d_use_direct(const conv2d_config *c)
{
    return c->groups == 1 && (c->kh > 1 || c->kw > 1) &&
           kiln_conv2d_patch(c) <= KILN_CONV_DIRECT_MAX_PATCH;
}

kiln_status kiln_conv2d_direct_kernels(conv2d_replica *r, kiln_device *dev)
{
    kiln_status st = kiln_kernel_get_variant(dev, "conv2d_direct", "kiln_conv2d_direct_forward",
                                             &r->kernels.forward);
    if (st == KILN_OK)
        st = kiln_kernel_get_variant(dev, "conv2d_direct", "kiln_conv2d_direct_grad_partial",
                                     &r->kernels.grad_partial);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "conv2d_direct", "kiln_conv2d_direct_reduce",
                             &r->kernels.reduce);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "conv2d_direct", "kiln_conv2d_direct_input_grad",
                             &r->kernels.input_grad);
    return st;
}

size_t kiln_conv2d_direct_scratch(const conv2d_config *c, const kiln_device *dev,
                                  int32_t max_batch)
{
    const size_t pixels = kiln_conv2d_out_pixels(c, max_batch);
    const size_t per = kiln_chunk_length(dev, pixels, MIN_CHUNK_PIXELS);
    const size_t chunks = (pixels + per - 1) / per;
    return chunks * (kiln_conv2d_patch(c) + 1) * (size_t)c->filters * sizeof(float);
}

kiln_status kiln_conv2d_direct_forward(const conv2d_config *c, conv2d_replica *r,
                                       const kiln_step *s)
{
    /* A work-item per output row of a sample; for the GPU variant a
     * work-item per output value, filters along the first dimension (the
     * kernels take the count of rows or of values). */
    const size_t rows = (size_t)s->batch * (size_t)c->oh;
    const size_t count = kiln_device_gpu_kernels(s->dev) ? rows * (size_t)c->ow : rows;
    /* Every direct kernel ends with the window. */
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->out),
                            kiln_arg_buffer(s->params), kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_int(c->use_bias ? (int64_t)s->param_offset[1] : 0),
                            kiln_arg_int(c->use_bias), kiln_arg_int(s->activation),
                            kiln_arg_int(c->filters), kiln_arg_int((int64_t)count),
                            KILN_CONV2D_WINDOW_ARGS(c));
    const kiln_range cpu = {.dims = 1, .size = {count}};
    const kiln_range gpu = {.dims = 2, .size = {(size_t)c->filters, count}};
    return kiln_kernel_run_variant(s->dev, r->kernels.forward, &cpu, &gpu, a);
}

static kiln_status weight_grad(const conv2d_config *c, conv2d_replica *r, const kiln_step *s)
{
    const size_t pixels = kiln_conv2d_out_pixels(c, s->batch), k = kiln_conv2d_patch(c);
    const size_t per = kiln_chunk_length(s->dev, pixels, MIN_CHUNK_PIXELS);
    const size_t chunks = (pixels + per - 1) / per;
    /* The K + 1 rows (the bias last) in equal groups of at most GRAD_TAPS. */
    const size_t groups = (k + GRAD_TAPS) / GRAD_TAPS, taps = (k + groups) / groups;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_buffer(r->scratch), kiln_arg_int(c->filters),
                            kiln_arg_int((int64_t)k), kiln_arg_int((int64_t)taps),
                            kiln_arg_int((int64_t)chunks), kiln_arg_int((int64_t)per),
                            kiln_arg_int((int64_t)pixels), KILN_CONV2D_WINDOW_ARGS(c));
    /* The CPU variant takes GRAD_FILTERS filters an item; the GPU one a filter. */
    const size_t blocks = ((size_t)c->filters + GRAD_FILTERS - 1) / GRAD_FILTERS;
    const kiln_range cpu = {.dims = 3, .size = {blocks, groups, chunks}};
    const kiln_range gpu = {.dims = 3, .size = {(size_t)c->filters, groups, chunks}};
    kiln_status st = kiln_kernel_run_variant(s->dev, r->kernels.grad_partial, &cpu, &gpu, a);
    if (st != KILN_OK)
        return st;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(r->scratch), kiln_arg_buffer(s->grads),
                            kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_int(c->use_bias ? (int64_t)s->param_offset[1] : 0),
                            kiln_arg_int(c->use_bias), kiln_arg_int(c->filters),
                            kiln_arg_int((int64_t)k), kiln_arg_int((int64_t)chunks));
    const size_t sums[2] = {(size_t)c->filters, k + 1};
    return kiln_kernel_run(s->dev, r->kernels.reduce, 2, sums, b);
}

kiln_status kiln_conv2d_direct_backward(const conv2d_config *c, conv2d_replica *r,
                                        const kiln_step *s)
{
    kiln_status st = s->frozen ? KILN_OK : weight_grad(c, r, s);   /* frozen: no gradient kept */
    if (st != KILN_OK || !s->d_in[0])
        return st;
    const size_t pixels = (size_t)s->batch * (size_t)c->h * (size_t)c->w;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->d_out), kiln_arg_buffer(s->params),
                            kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_buffer(s->d_in[0]), kiln_arg_int(s->d_in_accumulate[0]),
                            kiln_arg_int(c->filters), kiln_arg_int((int64_t)pixels),
                            KILN_CONV2D_WINDOW_ARGS(c));
    const size_t range[2] = {(size_t)c->c, pixels};
    return kiln_kernel_run(s->dev, r->kernels.input_grad, 2, range, a);
}
