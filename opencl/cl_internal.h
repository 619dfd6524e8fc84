/* Private to opencl/: the OpenCL-typed bodies of devices, buffers and
 * kernels, and the one macro every OpenCL call goes through. */
#ifndef KILN_OPENCL_CL_INTERNAL_H
#define KILN_OPENCL_CL_INTERNAL_H

#include "opencl/device.h"
#include "base/clock.h"
#include "base/hash.h"
#include "base/host.h"
#include "base/options.h"

#include <CL/cl.h>
#include <pthread.h>

/* Room for every kernel file and every kernel the library has (34 files
 * and 145 kernels now; test_kernel_builds builds them all on each device),
 * with room to grow: a model that uses every layer kind must not find
 * the table full. */
#define KILN_MAX_PROGRAMS 64
#define KILN_MAX_KERNELS 256

typedef struct kiln_program_slot {
    const char *file;      /* embedded source name (static) */
    cl_program program;
} kiln_program_slot;

struct kiln_kernel {
    const char *file;
    char name[64];
    cl_kernel kernel;
};

/* KILN_PROFILE=1: per-kernel device time, printed when the device closes. */
#define KILN_PROFILE_PENDING 256
#define KILN_PROFILE_ENTRIES 64

typedef struct kiln_profile_entry {
    char name[64];
    double ms;
    long count;
} kiln_profile_entry;

typedef struct kiln_profile {
    cl_event pending[KILN_PROFILE_PENDING];
    int pending_entry[KILN_PROFILE_PENDING];
    int n_pending;
    kiln_profile_entry entries[KILN_PROFILE_ENTRIES];
    int n_entries;
} kiln_profile;

struct kiln_device {
    kiln_host *host;               /* the context's: allocator, log, diagnostics */
    const char *cache_dir;         /* the context's program cache folder ("": none) */
    int32_t index;                 /* among all devices of all platforms */
    cl_platform_id platform;
    cl_device_id id;
    cl_context cl;
    cl_command_queue queue;
    char label[320];
    kiln_device_info info;
    size_t max_work_group;
    /* Runs the kernels' GPU variants (local-memory tiles; kernel_variant.c). */
    int gpu_kernels;
    /* CLBlast's GEMM runs parameters searched for this device (gemm_tuning.c). */
    int gemm_tuned;
    /* The CPU variant's GEMM keeps about this many bytes of operand rows in
     * the core's cache (gemm_choice.c): KILN_GEMM_CACHE_BYTES, or searched
     * for the device (gemm_cache_search.c). */
    size_t gemm_cache_bytes;
    /* Nonzero: it packs B where that pays (blas.c's packs_b); 1 unless the
     * same search found packing slower on the device. */
    int gemm_pack;
    kiln_program_slot programs[KILN_MAX_PROGRAMS];
    int n_programs;
    kiln_kernel kernels[KILN_MAX_KERNELS];
    int n_kernels;
    kiln_profile *profile;         /* NULL unless KILN_PROFILE is set */
    uint64_t gemm_seen[64];        /* GEMM shapes CLBlast has run here (blas.c) */
    int n_gemm_seen;
    /* Device memory kiln holds (buffer.c), now and at most. */
    pthread_mutex_t memory_lock;
    /* Two models on one context may drive the device from two threads; this
     * guards what they share: the kernel and program tables, a kernel's
     * arguments until its launch is enqueued (OpenCL forbids concurrent
     * clSetKernelArg on one kernel), the profile's pending events and the
     * GEMM shapes seen. */
    pthread_mutex_t lock;
    size_t bytes_in_use, peak_bytes;
    /* kiln's own GEMMs' device buffers (blas.c), grown to the largest
     * asked for: the chunks' sums of the CPU variant, a transposed operand
     * and B packed in panels. The lock holds them from a GEMM's first
     * launch to its last, so two threads' GEMMs never interleave in them. */
    kiln_buffer *gemm_partials, *gemm_transposed, *gemm_packed;
    pthread_mutex_t gemm_lock;
};

struct kiln_buffer {
    kiln_device *dev;
    cl_mem mem;
    size_t bytes;
};

/* Names of OpenCL and CLBlast error codes ("CL_OUT_OF_RESOURCES"). */
const char *kiln_cl_error_name(int code);

/* Turns a failed OpenCL call into a status and a message naming the call,
 * the device and the error. */
kiln_status kiln_cl_fail(const kiln_device *dev, const char *call, int code);

#define KILN_CL_CHECK(dev, call)                                      \
    do {                                                              \
        cl_int kiln_cl_err_ = (call);                                 \
        if (kiln_cl_err_ != CL_SUCCESS)                               \
            return kiln_cl_fail((dev), #call, kiln_cl_err_);          \
    } while (0)

/* Where a profiled command stores its event (NULL when not profiling). */
cl_event *kiln_profile_event(kiln_device *dev, const char *name);
/* Collects finished events into the totals; prints them when `report`. */
void kiln_profile_flush(kiln_device *dev, int report);

/* Builds (or loads from the disk cache) the program for embedded file
 * `file` on `dev`. */
kiln_status kiln_program_build(kiln_device *dev, const char *file, cl_program *out);

/* Disk cache of program binaries and tuning records (program_cache.c) in
 * folder `dir` ("": no cache). A lookup sets *binary to a kiln_host_alloc'd
 * copy when a valid entry exists for `key`, else to NULL. */
typedef struct kiln_cache_key {
    uint64_t hash[2];
} kiln_cache_key;

kiln_cache_key kiln_cache_key_of(const char *const *parts, const size_t *lengths, int n);
void kiln_cache_load(kiln_host *host, const char *dir, const kiln_cache_key *key,
                     unsigned char **binary, size_t *size);
void kiln_cache_store(kiln_host *host, const char *dir, const kiln_cache_key *key,
                      const unsigned char *binary, size_t size);
/* A record of exactly `size` bytes into `out` (a struct of the caller's
 * version): 1 when the entry exists, is intact and is that long, else 0
 * with `out` unspecified. */
int kiln_cache_load_record(kiln_host *host, const char *dir, const kiln_cache_key *key,
                           void *out, size_t size);

/* The GEMM choices (gemm_choice.c), apart so that tests can wrap them.
 * Whether kiln's own kernel (gemm.cl) runs a GEMM of this shape rather
 * than CLBlast, on a device running the GPU variant or the CPU one, whose
 * CLBlast runs searched parameters or its defaults. */
int kiln_gemm_use_own_kernel(int gpu_kernels, int gemm_tuned, kiln_gemm_op trans_a,
                             kiln_gemm_op trans_b, size_t m, size_t n, size_t k);
/* The CPU variant's cache budget where nothing was searched: half an L2
 * of this project's machine (docs/performance.md). */
#define KILN_GEMM_CACHE_BYTES ((size_t)1 << 20)
/* How many steps of k a chunk of the CPU variant's GEMM (gemm.cl) takes:
 * all k, or fewer so that a chunk's rows stay within `cache_bytes`. */
size_t kiln_gemm_chunk_steps(size_t cache_bytes, kiln_gemm_op trans_a, size_t m, size_t n,
                             size_t k);
/* Whether the CPU variant runs a column's tiles one after another, rather
 * than a row's (gemm.cl): B larger than `cache_bytes`, A not. */
int kiln_gemm_rows_first(size_t cache_bytes, size_t m, size_t n, size_t k);
/* How many of the `available` parameter sets a tuning search tries: all. */
int kiln_gemm_tuning_candidates(int available);

/* Chooses each device's kernel variant (kiln_device.gpu_kernels) from what
 * it reports, or as KILN_KERNEL_VARIANT says; a bad value of it is
 * KILN_ERROR_INVALID_ARGUMENT. */
kiln_status kiln_kernel_variant_setup(kiln_host *host, kiln_device *const *devices, int32_t n);

/* Applies stored GEMM parameters to the devices, searching first where
 * `mode` asks (gemm_tuning.c). */
kiln_status kiln_gemm_tuning_setup(kiln_host *host, kiln_device *const *devices,
                                   int32_t n_devices, kiln_gemm_tuning mode);

/* The same for the CPU variant's own GEMM cache budget
 * (gemm_cache_search.c): stored, searched where `mode` asks, or the
 * default; each CPU-variant device's gemm_parameters then names it. */
kiln_status kiln_gemm_cache_setup(kiln_host *host, kiln_device *const *devices,
                                  int32_t n_devices, kiln_gemm_tuning mode);

#endif
