/* Private: devices, buffers and kernels as the rest of kiln sees them.
 * No OpenCL type appears here: only the files in opencl/ include CL/cl.h. */
#ifndef KILN_OPENCL_DEVICE_H
#define KILN_OPENCL_DEVICE_H

#include "base/host.h"
#include "kiln.h"

typedef struct kiln_device kiln_device;
typedef struct kiln_buffer kiln_buffer;
typedef struct kiln_kernel kiln_kernel;

/* Opens the devices that `options` (and KILN_DEVICES) select, with their
 * GEMM parameters applied, into a kiln_host_alloc'd array. `host` and
 * `cache_dir` (the program cache folder, "" for none) must outlive them. */
kiln_status kiln_devices_open(kiln_host *host, const kiln_context_options *options,
                              const char *cache_dir, kiln_device ***devices, int32_t *n_devices);
/* Closes devices[0..n_devices) and frees the array; accepts NULL. */
void kiln_devices_close(kiln_host *host, kiln_device **devices, int32_t n_devices);
void kiln_device_destroy(kiln_device *dev);

void kiln_device_describe(const kiln_device *dev, kiln_device_info *info);
/* Nonzero when the device runs kernels' GPU variant (kernel_variant.c):
 * the one accessor for the choice. */
int kiln_device_gpu_kernels(const kiln_device *dev);
/* CL_DEVICE_MAX_WORK_GROUP_SIZE (at least 1): for a caller sizing its groups. */
size_t kiln_device_max_work_group(const kiln_device *dev);
/* "device 0 (pthread-skylake-avx512)": for messages. */
const char *kiln_device_label(const kiln_device *dev);
/* The host (allocator, log, diagnostics) the device reports through. */
kiln_host *kiln_device_host(const kiln_device *dev);

/* Device memory. `what` names the allocation in an out-of-memory message. */
kiln_status kiln_buffer_create(kiln_device *dev, size_t bytes, const char *what,
                               kiln_buffer **out);
void kiln_buffer_destroy(kiln_buffer *buf);
size_t kiln_buffer_bytes(const kiln_buffer *buf);

/* Bytes of the device's buffers kiln holds now and the most it has held at
 * once since the context opened it (CLBlast's own temporaries not counted). */
void kiln_device_memory(kiln_device *dev, size_t *in_use, size_t *peak);

/* Transfers on the device's in-order queue. A non-blocking write must keep
 * `src` alive and unchanged until the next kiln_device_finish(). */
kiln_status kiln_buffer_write(kiln_device *dev, kiln_buffer *dst, size_t offset,
                              const void *src, size_t bytes, int blocking);
/* A blocking write of `rows` rows of `row_bytes` each, taken every
 * `src_pitch` bytes from `src`, packed one after another into dst from
 * offset 0 (one column block of a row-major host array). */
kiln_status kiln_buffer_write_rows(kiln_device *dev, kiln_buffer *dst, const void *src,
                                   size_t rows, size_t row_bytes, size_t src_pitch);
kiln_status kiln_buffer_read(kiln_device *dev, const kiln_buffer *src, size_t offset,
                             void *dst, size_t bytes);
/* The converse of kiln_buffer_write_rows: `rows` packed rows of src into
 * dst every `dst_pitch` bytes (blocking). */
kiln_status kiln_buffer_read_rows(kiln_device *dev, const kiln_buffer *src, void *dst,
                                  size_t rows, size_t row_bytes, size_t dst_pitch);
kiln_status kiln_buffer_copy(kiln_device *dev, kiln_buffer *dst, size_t dst_offset,
                             const kiln_buffer *src, size_t src_offset, size_t bytes);
kiln_status kiln_buffer_zero(kiln_device *dev, kiln_buffer *buf, size_t offset, size_t bytes);

/* Waits for everything enqueued on the device. */
kiln_status kiln_device_finish(kiln_device *dev);

/* A kernel of an embedded .cl file (opencl/kernels/<file>.cl), built on
 * first use (binary cache on disk) and kept for the device's lifetime: the
 * handle stays valid until the device is destroyed. */
kiln_status kiln_kernel_get(kiln_device *dev, const char *file, const char *name,
                            kiln_kernel **out);

typedef enum kiln_arg_kind {
    KILN_ARG_BUFFER,
    KILN_ARG_INT,
    KILN_ARG_UINT,
    KILN_ARG_FLOAT
} kiln_arg_kind;

typedef struct kiln_arg {
    kiln_arg_kind kind;
    const kiln_buffer *buffer;
    int32_t i;
    uint32_t u;
    float f;
} kiln_arg;

kiln_arg kiln_arg_buffer(const kiln_buffer *b);
kiln_arg kiln_arg_int(int64_t i);  /* checked to fit int32 at launch */
kiln_arg kiln_arg_uint(uint32_t u);  /* a kernel's uint: hashes, seeds */
kiln_arg kiln_arg_float(float f);

/* A launch's arguments in the kernel's order, and how many. */
typedef struct kiln_args {
    const kiln_arg *arg;
    int n;
} kiln_args;

/* kiln_args from a list the compiler counts:
 * KILN_ARGS(kiln_arg_buffer(x), kiln_arg_int(n)). The list is evaluated once
 * (sizeof does not evaluate it) and lives until the end of the enclosing block. */
#define KILN_ARGS(...)                                                                        \
    ((kiln_args){.arg = (const kiln_arg[]){__VA_ARGS__},                                      \
                 .n = (int)(sizeof((const kiln_arg[]){__VA_ARGS__}) / sizeof(kiln_arg))})

/* Enqueues `kernel` over a `dims`-dimensional range of exactly `size`
 * work-items; the range is padded up to whole work-groups, so every kernel
 * checks its bounds. */
kiln_status kiln_kernel_run(kiln_device *dev, kiln_kernel *kernel, int dims,
                            const size_t *size, kiln_args args);

/* As kiln_kernel_run, on work-groups of exactly `local` items per
 * dimension (a kernel that tiles its group in local memory); the caller
 * checks the device's limit. */
kiln_status kiln_kernel_run_groups(kiln_device *dev, kiln_kernel *kernel, int dims,
                                   const size_t *size, const size_t *local, kiln_args args);

/* kiln_kernel_get + kiln_kernel_run_groups. */
kiln_status kiln_run_groups(kiln_device *dev, const char *file, const char *name, int dims,
                            const size_t *size, const size_t *local, kiln_args args);

/* Shorthand for the common 1-D case. */
kiln_status kiln_kernel_run1(kiln_device *dev, kiln_kernel *kernel, size_t n, kiln_args args);

/* kiln_kernel_get + kiln_kernel_run, for a kernel not fetched beforehand. */
kiln_status kiln_run(kiln_device *dev, const char *file, const char *name, int dims,
                     const size_t *size, kiln_args args);

/* kiln_kernel_get + kiln_kernel_run1. */
kiln_status kiln_run1(kiln_device *dev, const char *file, const char *name, size_t n,
                      kiln_args args);

/* Kernels with a variant per kind of device (docs/architecture.md,
 * "Kernels"): "<name>_cpu" and "<name>_gpu", of which the device runs the
 * one kernel_variant.c chose (kiln_device_gpu_kernels). Every launch of
 * such a pair goes through these, which append the suffix: a caller names
 * the pair, never a variant. Where the two variants' ranges differ, the
 * caller gives both, side by side. */

/* A launch's range: `dims` dimensions of `size` work-items, on
 * work-groups of `local` items per dimension (a kernel that tiles its
 * group in local memory; the caller checks the device's limit), or of
 * kiln_kernel_run's choosing where local[0] is 0. */
typedef struct kiln_range {
    int dims;
    size_t size[3];
    size_t local[3];
} kiln_range;

/* kiln_kernel_get of the variant of `name` the device runs. */
kiln_status kiln_kernel_get_variant(kiln_device *dev, const char *file, const char *name,
                                    kiln_kernel **out);

/* Runs `kernel`, which kiln_kernel_get_variant fetched, over the range of
 * the variant it is: `cpu` or `gpu`. */
kiln_status kiln_kernel_run_variant(kiln_device *dev, kiln_kernel *kernel, const kiln_range *cpu,
                                    const kiln_range *gpu, kiln_args args);

/* kiln_kernel_get_variant + kiln_kernel_run_variant. */
kiln_status kiln_run_variant(kiln_device *dev, const char *file, const char *name,
                             const kiln_range *cpu, const kiln_range *gpu, kiln_args args);

/* Lanes of the kernels that give a row a work-group (prelude.cl's
 * KILN_ROW_LANES, which must match). */
#define KILN_ROW_LANES 64
/* A kernel over `rows` rows of `width` values: `name` gives a row a
 * work-item, and both variants run it; "<name>_gpu", which takes the same
 * arguments, gives a row a work-group of KILN_ROW_LANES lanes, and the GPU
 * variant runs it instead on rows of at least KILN_ROW_LANES values (a
 * vocabulary; a narrower row would leave most of a group's lanes idle). */
kiln_status kiln_run_per_row(kiln_device *dev, const char *file, const char *name, size_t rows,
                             size_t width, kiln_args args);

/* What kiln_gemm does to an operand before multiplying: BLAS's 'N' and 'T'. */
typedef enum kiln_gemm_op {
    KILN_GEMM_N,  /* as stored */
    KILN_GEMM_T   /* transposed */
} kiln_gemm_op;

/* Row-major single-precision GEMM through CLBlast:
 * C = alpha * op(A) * op(B) + beta * C, with op(A) m x k and op(B) k x n.
 * Offsets and leading dimensions count floats. */
kiln_status kiln_gemm(kiln_device *dev, kiln_gemm_op trans_a, kiln_gemm_op trans_b, size_t m,
                      size_t n, size_t k, float alpha, const kiln_buffer *a, size_t a_offset,
                      size_t lda, const kiln_buffer *b, size_t b_offset, size_t ldb,
                      float beta, kiln_buffer *c, size_t c_offset, size_t ldc);

/* `count` GEMMs as kiln_gemm's, the i-th on A, B and C at their offsets
 * plus i times their strides (floats; a stride of 0 reads one operand for
 * every product): CLBlast's strided batched GEMM or kiln's own kernels
 * over a third range dimension, one launch for all. C's stride must keep
 * the products apart. */
kiln_status kiln_gemm_batched(kiln_device *dev, kiln_gemm_op trans_a, kiln_gemm_op trans_b,
                              size_t m, size_t n, size_t k, float alpha, const kiln_buffer *a,
                              size_t a_offset, size_t lda, size_t a_stride,
                              const kiln_buffer *b, size_t b_offset, size_t ldb,
                              size_t b_stride, float beta, kiln_buffer *c, size_t c_offset,
                              size_t ldc, size_t c_stride, size_t count);

/* dst = the rows x cols matrix at src_offset, transposed. GEMMs with a
 * transposed right operand run at half the speed of plain ones (CLBlast's
 * direct kernel; kiln's own transposes B first): layers that can,
 * transpose their kernel once and run plain GEMMs. */
kiln_status kiln_transpose(kiln_device *dev, const kiln_buffer *src, size_t src_offset,
                           size_t rows, size_t cols, kiln_buffer *dst);

#endif
