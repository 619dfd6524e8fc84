/* Conv2D's Winograd path (opencl/kernels/conv2d_winograd.cl): F(2x2, 3x3)
 * for 3x3 stride-1 'same' convolutions of one group, undilated, forward and input gradient (the
 * same convolution with the kernel turned and its channels swapped); the
 * weight gradient stays im2col + GEMM (conv2d.c). The 16 products are
 * kiln_gemm calls, so they run in kiln's GEMM kernels or CLBlast's like
 * any other. */
#include "layers/conv2d.h"

/* Both channel counts at least this: with fewer, the transforms' passes
 * over memory cost more than the multiplies they save. Measured on the
 * seed ResNet (docs/benchmarks.md): with 8 here its 64-channel layers ran slower than
 * im2col + GEMM, with 128 every layer taken is faster. */
#define MIN_CHANNELS 128
/* Images at least this high and wide: a 2 x 2 tile over a 1-pixel image
 * computes four outputs to keep one. */
#define MIN_SIDE 2
#define POSITIONS 16   /* a 4 x 4 transformed patch */

/* Here, not in conv2d.c, so that tests can wrap the choice at link time
 * and run the im2col path on the same shapes. */
int32_t kiln_conv2d_use_winograd(const conv2d_config *c)
{
    return c->kh == 3 && c->kw == 3 && c->sh == 1 && c->sw == 1 && c->dh == 1 && c->dw == 1 &&
           c->groups == 1 &&
           c->padding == KILN_PADDING_SAME && c->c >= MIN_CHANNELS &&
           c->filters >= MIN_CHANNELS && c->h >= MIN_SIDE && c->w >= MIN_SIDE;
}

/* 2 x 2 output pixels per tile; 'same' at stride 1 keeps the input's size. */
static size_t tiles(const conv2d_config *c, int32_t batch)
{
    return (size_t)batch * (size_t)((c->h + 1) / 2) * (size_t)((c->w + 1) / 2);
}

kiln_status kiln_conv2d_winograd_kernels(conv2d_replica *r, kiln_device *dev)
{
    kiln_status st = kiln_kernel_get(dev, "conv2d_winograd", "kiln_conv2d_winograd_filter",
                                     &r->kernels.wino_filter);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "conv2d_winograd", "kiln_conv2d_winograd_filter_flipped",
                             &r->kernels.wino_filter_flipped);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "conv2d_winograd", "kiln_conv2d_winograd_input",
                             &r->kernels.wino_input);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "conv2d_winograd", "kiln_conv2d_winograd_output",
                             &r->kernels.wino_output);
    return st;
}

kiln_status kiln_conv2d_winograd_prepare(const conv2d_config *c, conv2d_replica *r,
                                         kiln_device *dev, int32_t max_batch)
{
    /* The input gradient runs the same passes with C and F swapped. */
    const size_t widest = (size_t)(c->c > c->filters ? c->c : c->filters);
    const size_t per_position = tiles(c, max_batch) * widest * sizeof(float);
    kiln_status st = kiln_buffer_create(dev, POSITIONS * (size_t)c->c * (size_t)c->filters *
                                                 sizeof(float),
                                        "a Winograd-transformed conv2d kernel", &r->wino_u);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, POSITIONS * per_position, "Winograd-transformed conv2d "
                                "input patches", &r->wino_v);
    if (st == KILN_OK)
        st = kiln_buffer_create(dev, POSITIONS * per_position, "Winograd conv2d products",
                                &r->wino_m);
    return st;
}

/* `out` (+)= the convolution of `in` (cin channels) by the kernel as
 * kiln_conv2d_winograd_filter made it into r->wino_u (cin x cout per position). */
static kiln_status convolve(const conv2d_config *c, conv2d_replica *r, const kiln_step *s,
                            const kiln_buffer *in, size_t cin, size_t cout, kiln_buffer *out,
                            int accumulate)
{
    const size_t n = tiles(c, s->batch);
    /* Eight channels a work-item (conv2d_winograd.cl). */
    const size_t in_range[2] = {(cin + 7) / 8, n}, out_range[2] = {(cout + 7) / 8, n};
    kiln_args a = KILN_ARGS(kiln_arg_buffer(in), kiln_arg_int(c->h), kiln_arg_int(c->w),
                            kiln_arg_int((int64_t)cin), kiln_arg_int((int64_t)n),
                            kiln_arg_buffer(r->wino_v));
    kiln_status st = kiln_kernel_run(s->dev, r->kernels.wino_input, 2, in_range, a);
    /* The 16 products M[xi] = V[xi] U[xi] in one batched launch. */
    if (st == KILN_OK)
        st = kiln_gemm_batched(s->dev, KILN_GEMM_N, KILN_GEMM_N, n, cout, cin, 1.0f, r->wino_v,
                               0, cin, n * cin, r->wino_u, 0, cout, cin * cout, 0.0f, r->wino_m,
                               0, cout, n * cout, POSITIONS);
    if (st != KILN_OK)
        return st;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(r->wino_m), kiln_arg_int(c->h), kiln_arg_int(c->w),
                            kiln_arg_int((int64_t)cout), kiln_arg_int((int64_t)n),
                            kiln_arg_int(accumulate), kiln_arg_buffer(out));
    return kiln_kernel_run(s->dev, r->kernels.wino_output, 2, out_range, b);
}

/* U from the layer's kernel as it is now (it changes every step): eight
 * channels a work-item, output channels as stored, or input channels for
 * the flipped kernel (conv2d_winograd.cl). */
static kiln_status transform_kernel(const conv2d_config *c, conv2d_replica *r,
                                    const kiln_step *s, int flip)
{
    const size_t C = (size_t)c->c, F = (size_t)c->filters;
    const size_t as_stored[2] = {(F + 7) / 8, C}, flipped[2] = {F, (C + 7) / 8};
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->params), kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_int(c->c), kiln_arg_int(c->filters),
                            kiln_arg_buffer(r->wino_u));
    return kiln_kernel_run(s->dev, flip ? r->kernels.wino_filter_flipped : r->kernels.wino_filter,
                           2, flip ? flipped : as_stored, a);
}

kiln_status kiln_conv2d_winograd_forward(const conv2d_config *c, conv2d_replica *r,
                                         const kiln_step *s)
{
    const kiln_status st = transform_kernel(c, r, s, 0);
    return st != KILN_OK ? st : convolve(c, r, s, s->in[0], (size_t)c->c, (size_t)c->filters,
                                         s->out, 0);
}

kiln_status kiln_conv2d_winograd_input_grad(const conv2d_config *c, conv2d_replica *r,
                                            const kiln_step *s)
{
    const kiln_status st = transform_kernel(c, r, s, 1);
    return st != KILN_OK ? st : convolve(c, r, s, s->d_out, (size_t)c->filters, (size_t)c->c,
                                         s->d_in[0], s->d_in_accumulate[0]);
}
