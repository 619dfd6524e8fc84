/* Which variant of kiln's kernels each device runs: the CPU variant
 * (vectors across work-items, no local memory, what PoCL's CPU devices
 * compile best) or the GPU variant (work-groups tiled in local memory,
 * coalesced loads). Chosen from what the device reports, never from a
 * vendor's name; KILN_KERNEL_VARIANT ("auto", "cpu", "gpu") overrides, so
 * that the tests run the GPU variant on PoCL's CPU devices. The kernels of
 * the two are named <name>_cpu and <name>_gpu; device.h's selector
 * (kiln_kernel_get_variant, kiln_run_variant, kiln_run_per_row) picks. */
#include "opencl/cl_internal.h"

#include <stdlib.h>
#include <string.h>

/* The GPU GEMM's work-groups are 16 x 16 items with two blocks of about 4 KiB. */
#define GPU_GROUP_ITEMS 256
#define GPU_LOCAL_BYTES (16u << 10)

typedef enum variant { VARIANT_AUTO, VARIANT_CPU, VARIANT_GPU } variant;

static kiln_status requested(kiln_host *host, variant *v)
{
    static const char *const words[] = {"auto", "cpu", "gpu"};
    const char *env = getenv("KILN_KERNEL_VARIANT");
    *v = VARIANT_AUTO;
    if (!env || !*env)
        return KILN_OK;
    for (int i = 0; i < 3; i++)
        if (strcmp(env, words[i]) == 0) {
            *v = (variant)i;
            return KILN_OK;
        }
    return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                     "KILN_KERNEL_VARIANT='%s': expected 'auto', 'cpu' or 'gpu'", env);
}

/* A GPU with dedicated local memory large enough for the tiles: CPU
 * drivers emulate local memory in ordinary memory (CL_GLOBAL), where
 * staging a block only adds copies. */
static int suits_gpu(const kiln_device *dev)
{
    cl_device_type type = 0;
    cl_device_local_mem_type local_type = CL_GLOBAL;
    cl_ulong local_bytes = 0;
    clGetDeviceInfo(dev->id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(dev->id, CL_DEVICE_LOCAL_MEM_TYPE, sizeof local_type, &local_type, NULL);
    clGetDeviceInfo(dev->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_bytes, &local_bytes, NULL);
    return (type & CL_DEVICE_TYPE_GPU) && local_type == CL_LOCAL &&
           local_bytes >= GPU_LOCAL_BYTES;
}

kiln_status kiln_kernel_variant_setup(kiln_host *host, kiln_device *const *devices, int32_t n)
{
    variant v;
    const kiln_status st = requested(host, &v);
    if (st != KILN_OK)
        return st;
    for (int32_t i = 0; i < n; i++) {
        kiln_device *dev = devices[i];
        const int wanted = v == VARIANT_GPU || (v == VARIANT_AUTO && suits_gpu(dev));
        /* A device whose groups cannot hold the tile runs the CPU variant,
         * whatever was asked: the GPU kernels need the whole group. */
        dev->gpu_kernels = wanted && dev->max_work_group >= GPU_GROUP_ITEMS;
        dev->info.gpu_kernels = dev->gpu_kernels;
        if (wanted && !dev->gpu_kernels)
            kiln_host_log(host, KILN_LOG_WARNING, "%s: work-groups of at most %zu items: the "
                          "GPU kernels need %d; it runs the CPU kernels", dev->label,
                          dev->max_work_group, GPU_GROUP_ITEMS);
    }
    return KILN_OK;
}
