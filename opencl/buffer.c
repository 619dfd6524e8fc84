#include "opencl/cl_internal.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#define KILN_WORK_GROUP 64

kiln_status kiln_buffer_create(kiln_device *dev, size_t bytes, const char *what,
                               kiln_buffer **out)
{
    *out = NULL;
    kiln_buffer *buf = kiln_host_calloc(dev->host, 1, sizeof *buf);
    if (!buf)
        return kiln_fail_oom(dev->host, what, sizeof *buf);
    cl_int err;
    buf->dev = dev;
    buf->bytes = bytes;
    buf->mem = clCreateBuffer(dev->cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    if (err != CL_SUCCESS) {
        kiln_host_free(dev->host, buf);
        return kiln_fail(dev->host, KILN_ERROR_OUT_OF_MEMORY,
                         "cannot allocate %zu bytes of device memory for %s on %s: %s",
                         bytes, what, dev->label, kiln_cl_error_name(err));
    }
    pthread_mutex_lock(&dev->memory_lock);
    dev->bytes_in_use += bytes;
    if (dev->bytes_in_use > dev->peak_bytes)
        dev->peak_bytes = dev->bytes_in_use;
    pthread_mutex_unlock(&dev->memory_lock);
    *out = buf;
    return KILN_OK;
}

void kiln_buffer_destroy(kiln_buffer *buf)
{
    if (!buf)
        return;
    kiln_device *dev = buf->dev;
    pthread_mutex_lock(&dev->memory_lock);
    dev->bytes_in_use -= buf->bytes;
    pthread_mutex_unlock(&dev->memory_lock);
    clReleaseMemObject(buf->mem);
    kiln_host_free(dev->host, buf);
}

void kiln_device_memory(kiln_device *dev, size_t *in_use, size_t *peak)
{
    pthread_mutex_lock(&dev->memory_lock);
    if (in_use)
        *in_use = dev->bytes_in_use;
    if (peak)
        *peak = dev->peak_bytes;
    pthread_mutex_unlock(&dev->memory_lock);
}

size_t kiln_buffer_bytes(const kiln_buffer *buf)
{
    return buf->bytes;
}

static kiln_status check_range(kiln_device *dev, const kiln_buffer *buf, size_t offset,
                               size_t bytes, const char *op)
{
    if (offset > buf->bytes || bytes > buf->bytes - offset)
        return kiln_fail(dev->host, KILN_ERROR_INVALID_ARGUMENT,
                         "%s of %zu bytes at offset %zu overruns a %zu-byte buffer on %s", op,
                         bytes, offset, buf->bytes, dev->label);
    return KILN_OK;
}

kiln_status kiln_buffer_write(kiln_device *dev, kiln_buffer *dst, size_t offset,
                              const void *src, size_t bytes, int blocking)
{
    kiln_status st = check_range(dev, dst, offset, bytes, "write");
    if (st != KILN_OK || bytes == 0)
        return st;
    KILN_CL_CHECK(dev, clEnqueueWriteBuffer(dev->queue, dst->mem, blocking ? CL_TRUE : CL_FALSE,
                                            offset, bytes, src, 0, NULL, NULL));
    return KILN_OK;
}

kiln_status kiln_buffer_write_rows(kiln_device *dev, kiln_buffer *dst, const void *src,
                                   size_t rows, size_t row_bytes, size_t src_pitch)
{
    if (row_bytes == src_pitch)   /* packed already: one plain write */
        return kiln_buffer_write(dev, dst, 0, src, rows * row_bytes, 1);
    kiln_status st = check_range(dev, dst, 0, rows * row_bytes, "write");
    if (st != KILN_OK || rows == 0 || row_bytes == 0)
        return st;
    const size_t origin[3] = {0, 0, 0}, region[3] = {row_bytes, rows, 1};
    KILN_CL_CHECK(dev, clEnqueueWriteBufferRect(dev->queue, dst->mem, CL_TRUE, origin, origin,
                                                region, row_bytes, 0, src_pitch, 0, src, 0,
                                                NULL, NULL));
    return KILN_OK;
}

kiln_status kiln_buffer_read(kiln_device *dev, const kiln_buffer *src, size_t offset,
                             void *dst, size_t bytes)
{
    kiln_status st = check_range(dev, src, offset, bytes, "read");
    if (st != KILN_OK || bytes == 0)
        return st;
    KILN_CL_CHECK(dev, clEnqueueReadBuffer(dev->queue, src->mem, CL_TRUE, offset, bytes, dst, 0,
                                           NULL, NULL));
    return KILN_OK;
}

kiln_status kiln_buffer_read_rows(kiln_device *dev, const kiln_buffer *src, void *dst,
                                  size_t rows, size_t row_bytes, size_t dst_pitch)
{
    if (row_bytes == dst_pitch)   /* packed: one plain read */
        return kiln_buffer_read(dev, src, 0, dst, rows * row_bytes);
    kiln_status st = check_range(dev, src, 0, rows * row_bytes, "read");
    if (st != KILN_OK || rows == 0 || row_bytes == 0)
        return st;
    const size_t origin[3] = {0, 0, 0}, region[3] = {row_bytes, rows, 1};
    KILN_CL_CHECK(dev, clEnqueueReadBufferRect(dev->queue, src->mem, CL_TRUE, origin, origin,
                                               region, row_bytes, 0, dst_pitch, 0, dst, 0,
                                               NULL, NULL));
    return KILN_OK;
}

kiln_status kiln_buffer_copy(kiln_device *dev, kiln_buffer *dst, size_t dst_offset,
                             const kiln_buffer *src, size_t src_offset, size_t bytes)
{
    kiln_status st = check_range(dev, dst, dst_offset, bytes, "copy");
    if (st == KILN_OK)
        st = check_range(dev, src, src_offset, bytes, "copy");
    if (st != KILN_OK || bytes == 0)
        return st;
    KILN_CL_CHECK(dev, clEnqueueCopyBuffer(dev->queue, src->mem, dst->mem, src_offset,
                                           dst_offset, bytes, 0, NULL, NULL));
    return KILN_OK;
}

kiln_status kiln_buffer_zero(kiln_device *dev, kiln_buffer *buf, size_t offset, size_t bytes)
{
    kiln_status st = check_range(dev, buf, offset, bytes, "fill");
    if (st != KILN_OK || bytes == 0)
        return st;
    const float zero = 0.0f;
    KILN_CL_CHECK(dev, clEnqueueFillBuffer(dev->queue, buf->mem, &zero, sizeof zero, offset,
                                           bytes, 0, NULL, NULL));
    return KILN_OK;
}

kiln_status kiln_device_finish(kiln_device *dev)
{
    KILN_CL_CHECK(dev, clFinish(dev->queue));
    return KILN_OK;
}

/* kiln_kernel_get under dev->lock. */
static kiln_status kernel_get_locked(kiln_device *dev, const char *file, const char *name,
                                     kiln_kernel **out)
{
    for (int i = 0; i < dev->n_kernels; i++) {
        if (strcmp(dev->kernels[i].name, name) == 0) {
            *out = &dev->kernels[i];
            return KILN_OK;
        }
    }
    if (dev->n_kernels == KILN_MAX_KERNELS || strlen(name) >= sizeof dev->kernels[0].name)
        return kiln_fail(dev->host, KILN_ERROR_UNSUPPORTED, "kernel table full or name too "
                         "long at %s", name);
    cl_program program;
    kiln_status st = kiln_program_build(dev, file, &program);
    if (st != KILN_OK)
        return st;
    cl_int err;
    kiln_kernel *k = &dev->kernels[dev->n_kernels];
    k->kernel = clCreateKernel(program, name, &err);
    if (err != CL_SUCCESS)
        return kiln_fail(dev->host, KILN_ERROR_BUILD, "kernel %s not found in %s.cl on %s: %s",
                         name, file, dev->label, kiln_cl_error_name(err));
    k->file = file;
    strcpy(k->name, name);
    dev->n_kernels++;
    *out = k;
    return KILN_OK;
}

kiln_status kiln_kernel_get(kiln_device *dev, const char *file, const char *name,
                            kiln_kernel **out)
{
    *out = NULL;
    pthread_mutex_lock(&dev->lock);
    const kiln_status st = kernel_get_locked(dev, file, name, out);
    pthread_mutex_unlock(&dev->lock);
    return st;
}

/* The one place a variant's suffix is appended. */
static kiln_status get_variant(kiln_device *dev, const char *file, const char *name, int gpu,
                               kiln_kernel **out)
{
    char full[sizeof dev->kernels[0].name];
    snprintf(full, sizeof full, "%s_%s", name, gpu ? "gpu" : "cpu");
    return kiln_kernel_get(dev, file, full, out);
}

kiln_status kiln_kernel_get_variant(kiln_device *dev, const char *file, const char *name,
                                    kiln_kernel **out)
{
    return get_variant(dev, file, name, dev->gpu_kernels, out);
}

kiln_arg kiln_arg_buffer(const kiln_buffer *b)
{
    kiln_arg a;
    memset(&a, 0, sizeof a);
    a.kind = KILN_ARG_BUFFER;
    a.buffer = b;
    return a;
}

kiln_arg kiln_arg_int(int64_t i)
{
    kiln_arg a;
    memset(&a, 0, sizeof a);
    a.kind = KILN_ARG_INT;
    /* Values past int32 are clamped to a marker that kiln_kernel_run rejects. */
    a.i = (i > INT32_MAX || i < INT32_MIN) ? INT32_MIN : (int32_t)i;
    a.f = (i > INT32_MAX || i < INT32_MIN) ? 1.0f : 0.0f;
    return a;
}

kiln_arg kiln_arg_uint(uint32_t u)
{
    kiln_arg a;
    memset(&a, 0, sizeof a);
    a.kind = KILN_ARG_UINT;
    a.u = u;
    return a;
}

kiln_arg kiln_arg_float(float f)
{
    kiln_arg a;
    memset(&a, 0, sizeof a);
    a.kind = KILN_ARG_FLOAT;
    a.f = f;
    return a;
}

/* Under dev->lock: the arguments stay the kernel's until it is enqueued. */
static kiln_status set_args(kiln_device *dev, kiln_kernel *kernel, kiln_args args)
{
    for (int i = 0; i < args.n; i++) {
        const kiln_arg *a = &args.arg[i];
        cl_int err = CL_SUCCESS;
        switch (a->kind) {
        case KILN_ARG_BUFFER:
            err = clSetKernelArg(kernel->kernel, (cl_uint)i, sizeof(cl_mem), &a->buffer->mem);
            break;
        case KILN_ARG_INT:
            if (a->i == INT32_MIN && a->f != 0.0f)
                return kiln_fail(dev->host, KILN_ERROR_UNSUPPORTED,
                                 "%s: argument %d exceeds the 32-bit range kernels use",
                                 kernel->name, i);
            err = clSetKernelArg(kernel->kernel, (cl_uint)i, sizeof(cl_int), &a->i);
            break;
        case KILN_ARG_UINT:
            err = clSetKernelArg(kernel->kernel, (cl_uint)i, sizeof(cl_uint), &a->u);
            break;
        case KILN_ARG_FLOAT:
            err = clSetKernelArg(kernel->kernel, (cl_uint)i, sizeof(cl_float), &a->f);
            break;
        }
        if (err != CL_SUCCESS)
            return kiln_fail(dev->host, KILN_ERROR_DEVICE, "clSetKernelArg(%s, %d) failed on "
                             "%s: %s", kernel->name, i, dev->label, kiln_cl_error_name(err));
    }
    return KILN_OK;
}

kiln_status kiln_kernel_run(kiln_device *dev, kiln_kernel *kernel, int dims,
                            const size_t *size, kiln_args args)
{
    size_t local[3];
    /* A power of two (the reduction kernels halve it), within the device's
     * limit, along the first dimension, no wider than it needs to be. */
    size_t group = KILN_WORK_GROUP;
    while (group > dev->max_work_group || (group > 1 && group / 2 >= size[0]))
        group /= 2;
    for (int d = 0; d < dims; d++)
        local[d] = d == 0 ? group : 1;
    /* On a GPU, a launch narrow along the first dimension (3 channels, 10
     * classes) would get groups of a few items, a fraction of a warp each:
     * the rest of the group goes along the second. A kernel launched here
     * uses no local memory, so the shape is free; PoCL's CPU devices keep
     * one dimension, which their work-group loops vectorise. Only a group
     * that divides the second dimension: the kernels check the first
     * against its size, not the second (often the batch), so a range
     * rounded up there would run past their buffers. */
    if (dims > 1 && dev->gpu_kernels)
        while (group * local[1] * 2 <= KILN_WORK_GROUP &&
               group * local[1] * 2 <= dev->max_work_group && size[1] % (local[1] * 2) == 0)
            local[1] *= 2;
    return kiln_kernel_run_groups(dev, kernel, dims, size, local, args);
}

kiln_status kiln_kernel_run_groups(kiln_device *dev, kiln_kernel *kernel, int dims,
                                   const size_t *size, const size_t *local, kiln_args args)
{
    size_t global[3];
    for (int d = 0; d < dims; d++) {
        global[d] = (size[d] + local[d] - 1) / local[d] * local[d];
        if (size[d] == 0)
            return KILN_OK;
    }
    pthread_mutex_lock(&dev->lock);
    kiln_status st = set_args(dev, kernel, args);
    cl_int err = CL_SUCCESS;
    if (st == KILN_OK)
        err = clEnqueueNDRangeKernel(dev->queue, kernel->kernel, (cl_uint)dims, NULL, global,
                                     local, 0, NULL, kiln_profile_event(dev, kernel->name));
    pthread_mutex_unlock(&dev->lock);
    if (st == KILN_OK && err != CL_SUCCESS)
        st = kiln_fail(dev->host, err == CL_OUT_OF_RESOURCES ? KILN_ERROR_OUT_OF_MEMORY
                                                             : KILN_ERROR_DEVICE,
                       "launching %s on %s failed: %s (%d)", kernel->name, dev->label,
                       kiln_cl_error_name(err), err);
    return st;
}

kiln_status kiln_run_groups(kiln_device *dev, const char *file, const char *name, int dims,
                            const size_t *size, const size_t *local, kiln_args args)
{
    kiln_kernel *kernel;
    const kiln_status st = kiln_kernel_get(dev, file, name, &kernel);
    return st != KILN_OK ? st : kiln_kernel_run_groups(dev, kernel, dims, size, local, args);
}

static kiln_status run_range(kiln_device *dev, kiln_kernel *kernel, const kiln_range *range,
                             kiln_args args)
{
    if (range->local[0])
        return kiln_kernel_run_groups(dev, kernel, range->dims, range->size, range->local, args);
    return kiln_kernel_run(dev, kernel, range->dims, range->size, args);
}

#ifndef NDEBUG
/* Whether `kernel` is a pair's GPU variant: its name ends in "_gpu". */
static int is_gpu_variant(const kiln_kernel *kernel)
{
    const size_t n = strlen(kernel->name);
    return n > 4 && strcmp(kernel->name + n - 4, "_gpu") == 0;
}
#endif

kiln_status kiln_kernel_run_variant(kiln_device *dev, kiln_kernel *kernel, const kiln_range *cpu,
                                    const kiln_range *gpu, kiln_args args)
{
    /* The kernel kept and the range picked here read the same choice. */
    assert(is_gpu_variant(kernel) == (dev->gpu_kernels != 0));
    return run_range(dev, kernel, dev->gpu_kernels ? gpu : cpu, args);
}

kiln_status kiln_run_variant(kiln_device *dev, const char *file, const char *name,
                             const kiln_range *cpu, const kiln_range *gpu, kiln_args args)
{
    kiln_kernel *kernel;
    const kiln_status st = kiln_kernel_get_variant(dev, file, name, &kernel);
    return st != KILN_OK ? st : kiln_kernel_run_variant(dev, kernel, cpu, gpu, args);
}

kiln_status kiln_run_per_row(kiln_device *dev, const char *file, const char *name, size_t rows,
                             size_t width, kiln_args args)
{
    kiln_kernel *kernel;
    if (dev->gpu_kernels && width >= KILN_ROW_LANES) {
        const size_t size = rows * KILN_ROW_LANES, local = KILN_ROW_LANES;
        const kiln_status st = get_variant(dev, file, name, 1, &kernel);
        return st != KILN_OK ? st : kiln_kernel_run_groups(dev, kernel, 1, &size, &local, args);
    }
    const kiln_status st = kiln_kernel_get(dev, file, name, &kernel);
    return st != KILN_OK ? st : kiln_kernel_run(dev, kernel, 1, &rows, args);
}

kiln_status kiln_kernel_run1(kiln_device *dev, kiln_kernel *kernel, size_t n, kiln_args args)
{
    return kiln_kernel_run(dev, kernel, 1, &n, args);
}

kiln_status kiln_run(kiln_device *dev, const char *file, const char *name, int dims,
                     const size_t *size, kiln_args args)
{
    kiln_kernel *k;
    kiln_status st = kiln_kernel_get(dev, file, name, &k);
    if (st != KILN_OK)
        return st;
    return kiln_kernel_run(dev, k, dims, size, args);
}

kiln_status kiln_run1(kiln_device *dev, const char *file, const char *name, size_t n,
                      kiln_args args)
{
    return kiln_run(dev, file, name, 1, &n, args);
}
