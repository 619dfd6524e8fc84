/* Kernels several layers share (activation, bias gradient, copies). */
#include "layers/layer.h"

kiln_status kiln_activation_forward(kiln_device *dev, kiln_activation act,
                                    const kiln_buffer *x, kiln_buffer *y, size_t rows,
                                    size_t cols)
{
    if (act == KILN_ACTIVATION_SOFTMAX || act == KILN_ACTIVATION_LOG_SOFTMAX) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_buffer(y), kiln_arg_int((int64_t)rows),
                                kiln_arg_int((int64_t)cols));
        return kiln_run_per_row(dev, "activation", act == KILN_ACTIVATION_SOFTMAX
                                ? "kiln_activation_softmax_forward"
                                : "kiln_activation_log_softmax_forward", rows, cols, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_buffer(y),
                            kiln_arg_int((int64_t)(rows * cols)), kiln_arg_int(act));
    return kiln_run1(dev, "activation", "kiln_activation_forward", (rows * cols + 7) / 8, a);
}

kiln_status kiln_activation_backward(kiln_device *dev, kiln_activation act,
                                     const kiln_buffer *x, const kiln_buffer *y,
                                     kiln_buffer *dy, size_t rows, size_t cols)
{
    if (act == KILN_ACTIVATION_LINEAR)
        return KILN_OK;
    if (act == KILN_ACTIVATION_SOFTMAX || act == KILN_ACTIVATION_LOG_SOFTMAX) {
        kiln_args a = KILN_ARGS(kiln_arg_buffer(y), kiln_arg_buffer(dy),
                                kiln_arg_int((int64_t)rows), kiln_arg_int((int64_t)cols));
        return kiln_run_per_row(dev, "activation", act == KILN_ACTIVATION_SOFTMAX
                                ? "kiln_activation_softmax_backward"
                                : "kiln_activation_log_softmax_backward", rows, cols, a);
    }
    kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_buffer(y), kiln_arg_buffer(dy),
                            kiln_arg_int((int64_t)(rows * cols)), kiln_arg_int(act));
    return kiln_run1(dev, "activation", "kiln_activation_backward", (rows * cols + 7) / 8, a);
}

int kiln_activation_needs_input(kiln_activation act)
{
    return act == KILN_ACTIVATION_GELU || act == KILN_ACTIVATION_GELU_TANH ||
           act == KILN_ACTIVATION_SILU || act == KILN_ACTIVATION_HARD_SWISH;
}

kiln_status kiln_bias_add(kiln_device *dev, kiln_buffer *y, size_t rows, size_t cols,
                          const kiln_buffer *params, size_t offset, kiln_activation act)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(y), kiln_arg_int((int64_t)rows),
                            kiln_arg_int((int64_t)cols), kiln_arg_buffer(params),
                            kiln_arg_int((int64_t)offset), kiln_arg_int(act));
    const kiln_range cpu = {.dims = 2, .size = {(cols + 7) / 8, rows}};
    const kiln_range gpu = {.dims = 2, .size = {cols, rows}};
    return kiln_run_variant(dev, "bias", "kiln_bias_add", &cpu, &gpu, a);
}

kiln_status kiln_step_activate(const kiln_step *s, const kiln_buffer *from)
{
    if (s->activation == KILN_ACTIVATION_LINEAR)
        return KILN_OK;
    const size_t n = (size_t)s->batch * (size_t)kiln_shape_size(s->out_shape);
    return kiln_activation_forward(s->dev, s->activation, from, s->out, n, 1);
}

int kiln_layer_fuses_activation(const void *config)
{
    (void)config;
    return 1;
}

kiln_status kiln_column_sum(kiln_device *dev, const kiln_buffer *x, size_t rows, size_t cols,
                            kiln_buffer *out, size_t offset, int accumulate)
{
    kiln_args a = KILN_ARGS(kiln_arg_buffer(x), kiln_arg_int((int64_t)rows),
                            kiln_arg_int((int64_t)cols), kiln_arg_buffer(out),
                            kiln_arg_int((int64_t)offset), kiln_arg_int(accumulate));
    /* Eight columns a work-item, or 16 columns x 16 lanes of rows a group. */
    const kiln_range cpu = {.dims = 1, .size = {(cols + 7) / 8}};
    const kiln_range gpu = {.dims = 2, .size = {cols, 16}, .local = {16, 16}};
    return kiln_run_variant(dev, "bias", "kiln_bias_column_sum", &cpu, &gpu, a);
}

kiln_status kiln_copy_or_add(kiln_device *dev, const kiln_buffer *src, kiln_buffer *dst,
                             size_t n, int accumulate)
{
    if (!accumulate)
        return kiln_buffer_copy(dev, dst, 0, src, 0, n * sizeof(float));
    kiln_args a = KILN_ARGS(kiln_arg_buffer(src), kiln_arg_buffer(dst), kiln_arg_int((int64_t)n),
                            kiln_arg_int(1));
    return kiln_run1(dev, "copy", "kiln_copy_or_add", n, a);
}

const char *kiln_padding_words(kiln_padding padding)
{
    return padding == KILN_PADDING_SAME       ? "'same' padding"
           : padding == KILN_PADDING_EXPLICIT ? "explicit pads"
                                              : "'valid' padding";
}

int kiln_window_infer(kiln_window_axis *a)
{
    /* int64: in, window, stride and the pads may each be near INT32_MAX. */
    const int64_t span = ((int64_t)a->window - 1) * a->dilation + 1;
    if (a->padding == KILN_PADDING_SAME) {
        const int64_t n = ((int64_t)a->in + a->stride - 1) / a->stride;
        const int64_t total = (n - 1) * a->stride + span;
        if (total > INT32_MAX)
            return -1;
        const int64_t pad = total > a->in ? total - a->in : 0;
        a->out = (int32_t)n;
        a->pad_before = (int32_t)(pad / 2);
        a->pad_after = (int32_t)(pad - pad / 2);
        return 1;
    }
    if (a->padding == KILN_PADDING_VALID)
        a->pad_before = a->pad_after = 0;
    const int64_t padded = (int64_t)a->in + a->pad_before + a->pad_after;
    if (padded > INT32_MAX || span > INT32_MAX)
        return -1;
    if (padded < span)
        return 0;
    int64_t n = (padded - span) / a->stride + 1;
    if (a->ceil_mode) {
        n = (padded - span + a->stride - 1) / a->stride + 1;
        /* PyTorch's rule: the last window starts inside the input or the
         * padding before it, never in the padding after. */
        if ((n - 1) * a->stride >= (int64_t)a->in + a->pad_before)
            n--;
    }
    a->out = (int32_t)n;
    return 1;
}

kiln_status kiln_identity_forward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    const size_t n = (size_t)s->batch * (size_t)kiln_shape_size(s->out_shape);
    return kiln_copy_or_add(s->dev, s->in[0], s->out, n, 0);
}

kiln_status kiln_identity_backward(const void *config, void *replica, const kiln_step *s)
{
    (void)config;
    (void)replica;
    if (!s->d_in[0])
        return KILN_OK;
    const size_t n = (size_t)s->batch * (size_t)kiln_shape_size(s->out_shape);
    return kiln_copy_or_add(s->dev, s->d_out, s->d_in[0], n, s->d_in_accumulate[0]);
}

size_t kiln_chunks_most(const kiln_device *dev)
{
    return kiln_device_gpu_kernels(dev) ? 1024 : 64;
}

size_t kiln_chunk_length(const kiln_device *dev, size_t n, size_t cpu_least)
{
    const size_t most = kiln_chunks_most(dev);
    const size_t least = kiln_device_gpu_kernels(dev) ? 16 : cpu_least;
    const size_t even = (n + most - 1) / most;
    return even > least ? even : least;
}
