#include "opencl/cl_internal.h"

#include <CL/cl_ext.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KILN_MAX_ALL_DEVICES 64

typedef struct found_device {
    cl_platform_id platform;
    cl_device_id id;
    cl_device_type type;
} found_device;

static kiln_device_type type_of(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU)
        return KILN_DEVICE_GPU;
    if (t & CL_DEVICE_TYPE_ACCELERATOR)
        return KILN_DEVICE_ACCELERATOR;
    return KILN_DEVICE_CPU;
}

static kiln_status list_all(kiln_host *host, found_device *found, int32_t *n_found)
{
    cl_platform_id platforms[16];
    cl_uint n_platforms = 0;
    cl_int err = clGetPlatformIDs(16, platforms, &n_platforms);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && n_platforms == 0))
        return kiln_fail(host, KILN_ERROR_NO_DEVICE,
                         "no OpenCL platform found: install an OpenCL driver (for the CPU, "
                         "Debian's pocl-opencl-icd) and check /etc/OpenCL/vendors");
    if (err != CL_SUCCESS)
        return kiln_fail(host, KILN_ERROR_NO_DEVICE, "clGetPlatformIDs failed: %s (%d)",
                         kiln_cl_error_name(err), err);
    *n_found = 0;
    for (cl_uint p = 0; p < n_platforms && p < 16; p++) {
        cl_device_id ids[KILN_MAX_ALL_DEVICES];
        cl_uint n = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, KILN_MAX_ALL_DEVICES, ids, &n) !=
            CL_SUCCESS)
            continue;  /* a platform without devices is not an error */
        for (cl_uint d = 0; d < n && *n_found < KILN_MAX_ALL_DEVICES; d++) {
            found_device *f = &found[(*n_found)++];
            f->platform = platforms[p];
            f->id = ids[d];
            clGetDeviceInfo(ids[d], CL_DEVICE_TYPE, sizeof f->type, &f->type, NULL);
        }
    }
    if (*n_found == 0)
        return kiln_fail(host, KILN_ERROR_NO_DEVICE,
                         "%u OpenCL platform(s) found but no device on any of them",
                         (unsigned)n_platforms);
    return KILN_OK;
}

/* Parses KILN_DEVICES: a type word or comma-separated indices. */
static kiln_status parse_env(kiln_host *host, const char *s, kiln_device_type *type,
                             int32_t *indices, int32_t *n_indices)
{
    static const struct { const char *word; kiln_device_type type; } words[] = {
        {.word = "all", .type = KILN_DEVICE_ALL}, {.word = "cpu", .type = KILN_DEVICE_CPU},
        {.word = "gpu", .type = KILN_DEVICE_GPU},
        {.word = "accelerator", .type = KILN_DEVICE_ACCELERATOR},
        {.word = "default", .type = KILN_DEVICE_DEFAULT},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (strcmp(s, words[i].word) == 0) {
            *type = words[i].type;
            *n_indices = 0;
            return KILN_OK;
        }
    }
    *n_indices = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= KILN_MAX_ALL_DEVICES || *n_indices >= KILN_MAX_ALL_DEVICES ||
            (*end && *end != ','))
            return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                             "KILN_DEVICES=\"%s\" is not understood: use all, cpu, gpu, "
                             "accelerator or device indices such as 0,1", s);
        indices[(*n_indices)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (*n_indices == 0)
        return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT, "KILN_DEVICES is empty");
    return KILN_OK;
}

static void get_string(cl_device_id id, cl_device_info what, char *buf, size_t size)
{
    buf[0] = '\0';
    clGetDeviceInfo(id, what, size, buf, NULL);
    buf[size - 1] = '\0';
}

static kiln_status open_device(kiln_host *host, const char *cache_dir, const found_device *f,
                               int32_t index, kiln_device **out)
{
    kiln_device *dev = kiln_host_calloc(host, 1, sizeof *dev);
    if (!dev)
        return kiln_fail_oom(host, "a device", sizeof *dev);
    dev->host = host;
    dev->cache_dir = cache_dir;
    dev->index = index;
    dev->gemm_cache_bytes = KILN_GEMM_CACHE_BYTES;
    dev->gemm_pack = 1;
    pthread_mutex_init(&dev->memory_lock, NULL);
    pthread_mutex_init(&dev->lock, NULL);
    pthread_mutex_init(&dev->gemm_lock, NULL);
    dev->platform = f->platform;
    dev->id = f->id;
    kiln_device_info *info = &dev->info;
    info->struct_size = sizeof *info;
    info->index = index;
    info->type = type_of(f->type);
    get_string(f->id, CL_DEVICE_NAME, info->name, sizeof info->name);
    get_string(f->id, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    get_string(f->id, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    clGetPlatformInfo(f->platform, CL_PLATFORM_NAME, sizeof info->platform, info->platform,
                      NULL);
    info->platform[sizeof info->platform - 1] = '\0';
    cl_ulong mem = 0;
    cl_uint cus = 0, clock = 0;
    clGetDeviceInfo(f->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof clock, &clock, NULL);
    clGetDeviceInfo(f->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof dev->max_work_group,
                    &dev->max_work_group, NULL);
    if (dev->max_work_group == 0)
        dev->max_work_group = 1;
    info->global_memory_bytes = mem;
    info->compute_units = cus;
    info->max_clock_mhz = clock;
    snprintf(dev->label, sizeof dev->label, "device %d (%s)", (int)index, info->name);

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)f->platform,
                                     0};
    dev->cl = clCreateContext(props, 1, &f->id, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        kiln_status st = kiln_cl_fail(dev, "clCreateContext", err);
        kiln_device_destroy(dev);
        return st;
    }
    const char *profile = getenv("KILN_PROFILE");
    const int profiling = profile && *profile && strcmp(profile, "0") != 0;
    if (profiling && !(dev->profile = kiln_host_calloc(host, 1, sizeof *dev->profile))) {
        kiln_device_destroy(dev);
        return kiln_fail_oom(host, "the profile", sizeof *dev->profile);
    }
    dev->queue = clCreateCommandQueue(dev->cl, f->id,
                                      profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    if (err != CL_SUCCESS) {
        kiln_status st = kiln_cl_fail(dev, "clCreateCommandQueue", err);
        kiln_device_destroy(dev);
        return st;
    }
    *out = dev;
    return KILN_OK;
}

static int type_matches(kiln_device_type want, cl_device_type have)
{
    switch (want) {
    case KILN_DEVICE_CPU: return (have & CL_DEVICE_TYPE_CPU) != 0;
    case KILN_DEVICE_GPU: return (have & CL_DEVICE_TYPE_GPU) != 0;
    case KILN_DEVICE_ACCELERATOR: return (have & CL_DEVICE_TYPE_ACCELERATOR) != 0;
    default: return 1;
    }
}

static const char *type_word(kiln_device_type t)
{
    switch (t) {
    case KILN_DEVICE_CPU: return "CPU";
    case KILN_DEVICE_GPU: return "GPU";
    case KILN_DEVICE_ACCELERATOR: return "accelerator";
    default: return "any";
    }
}

/* The option, unless KILN_GEMM_TUNING says otherwise. */
static kiln_status gemm_tuning_mode(kiln_host *host, const kiln_context_options *o,
                                    kiln_gemm_tuning *mode)
{
    static const char *const words[] = {"stored", "search", "off"};
    /* Explicit settings win: the variable fills in only the default. */
    const char *env = o->gemm_tuning == KILN_GEMM_TUNING_STORED ? getenv("KILN_GEMM_TUNING")
                                                                : NULL;
    *mode = o->gemm_tuning;
    if (env && *env) {
        int i = 0;
        while (i < 3 && strcmp(env, words[i]) != 0)
            i++;
        if (i == 3)
            return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT, "KILN_GEMM_TUNING='%s': expected "
                             "'stored', 'search' or 'off'", env);
        *mode = (kiln_gemm_tuning)i;
    }
    if ((int)*mode < KILN_GEMM_TUNING_STORED || *mode > KILN_GEMM_TUNING_OFF)
        return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT, "gemm_tuning %d is not a "
                         "kiln_gemm_tuning", (int)*mode);
    return KILN_OK;
}

/* The devices the indices name, checked. */
static kiln_status choose_by_index(kiln_host *host, const int32_t *indices, int32_t n_indices,
                                   int32_t n_found, int32_t *chosen, int32_t *n_chosen)
{
    for (int32_t i = 0; i < n_indices; i++) {
        if (indices[i] < 0 || indices[i] >= n_found)
            return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                             "device index %d does not exist: there are %d device(s), "
                             "indices 0 to %d", (int)indices[i], (int)n_found,
                             (int)n_found - 1);
        for (int32_t j = 0; j < i; j++)
            if (indices[j] == indices[i])
                return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                                 "device index %d is listed twice", (int)indices[i]);
        chosen[(*n_chosen)++] = indices[i];
    }
    return KILN_OK;
}

/* The devices of a type; the default type is the GPUs where there are any,
 * else everything. */
static kiln_status choose_by_type(kiln_host *host, kiln_device_type type,
                                  const found_device *found, int32_t n_found, int32_t *chosen,
                                  int32_t *n_chosen)
{
    if (type == KILN_DEVICE_DEFAULT) {
        type = KILN_DEVICE_ALL;
        for (int32_t i = 0; i < n_found; i++)
            if (found[i].type & CL_DEVICE_TYPE_GPU)
                type = KILN_DEVICE_GPU;
    }
    for (int32_t i = 0; i < n_found; i++)
        if (type_matches(type, found[i].type))
            chosen[(*n_chosen)++] = i;
    if (*n_chosen == 0)
        return kiln_fail(host, KILN_ERROR_NO_DEVICE,
                         "no %s device among the %d OpenCL device(s) found", type_word(type),
                         (int)n_found);
    return KILN_OK;
}

/* Opens found[chosen[0..n_chosen)] and applies their kernel variant and
 * GEMM parameters. */
static kiln_status open_chosen(kiln_host *host, const char *cache_dir, const found_device *found,
                               const int32_t *chosen, int32_t n_chosen, kiln_gemm_tuning tuning,
                               kiln_device ***devices, int32_t *n_devices)
{
    kiln_device **opened = kiln_host_calloc(host, (size_t)n_chosen, sizeof *opened);
    if (!opened)
        return kiln_fail_oom(host, "the device list", (size_t)n_chosen * sizeof(void *));
    kiln_status st = KILN_OK;
    for (int32_t i = 0; i < n_chosen && st == KILN_OK; i++)
        st = open_device(host, cache_dir, &found[chosen[i]], chosen[i], &opened[i]);
    if (st == KILN_OK)
        st = kiln_kernel_variant_setup(host, opened, n_chosen);
    if (st == KILN_OK)
        st = kiln_gemm_tuning_setup(host, opened, n_chosen, tuning);
    if (st == KILN_OK)
        st = kiln_gemm_cache_setup(host, opened, n_chosen, tuning);
    if (st != KILN_OK) {
        kiln_devices_close(host, opened, n_chosen);
        return st;
    }
    *devices = opened;
    *n_devices = n_chosen;
    return KILN_OK;
}

kiln_status kiln_devices_open(kiln_host *host, const kiln_context_options *o, const char *cache_dir,
                              kiln_device ***devices, int32_t *n_devices)
{
    *devices = NULL;
    *n_devices = 0;
    kiln_device_type type = o->device_type;
    if (o->n_device_indices < 0 || (o->n_device_indices > 0 && !o->device_indices) ||
        o->n_device_indices > KILN_MAX_ALL_DEVICES)
        return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT,
                         "device_indices: %d indices (at most %d, and the array must be set)",
                         (int)o->n_device_indices, KILN_MAX_ALL_DEVICES);
    if ((int)type < KILN_DEVICE_DEFAULT || type > KILN_DEVICE_ACCELERATOR)
        return kiln_fail(host, KILN_ERROR_INVALID_ARGUMENT, "device_type %d is not a "
                         "kiln_device_type", (int)type);
    kiln_gemm_tuning tuning;
    kiln_status st = gemm_tuning_mode(host, o, &tuning);
    if (st != KILN_OK)
        return st;
    int32_t indices[KILN_MAX_ALL_DEVICES];
    int32_t n_indices = 0;
    for (int32_t i = 0; i < o->n_device_indices; i++)
        indices[n_indices++] = o->device_indices[i];
    /* Explicit settings win: the variable fills in only the default. */
    const char *env = type == KILN_DEVICE_DEFAULT && n_indices == 0 ? getenv("KILN_DEVICES")
                                                                     : NULL;
    if (env && *env && (st = parse_env(host, env, &type, indices, &n_indices)) != KILN_OK)
        return st;
    found_device found[KILN_MAX_ALL_DEVICES];
    int32_t n_found = 0;
    if ((st = list_all(host, found, &n_found)) != KILN_OK)
        return st;
    int32_t chosen[KILN_MAX_ALL_DEVICES];
    int32_t n_chosen = 0;
    st = n_indices > 0 ? choose_by_index(host, indices, n_indices, n_found, chosen, &n_chosen)
                       : choose_by_type(host, type, found, n_found, chosen, &n_chosen);
    if (st != KILN_OK)
        return st;
    return open_chosen(host, cache_dir, found, chosen, n_chosen, tuning, devices, n_devices);
}

void kiln_devices_close(kiln_host *host, kiln_device **devices, int32_t n_devices)
{
    for (int32_t i = 0; devices && i < n_devices; i++)
        kiln_device_destroy(devices[i]);
    kiln_host_free(host, devices);
}

void kiln_device_destroy(kiln_device *dev)
{
    if (!dev)
        return;
    if (dev->profile) {
        kiln_profile_flush(dev, 1);
        kiln_host_free(dev->host, dev->profile);
    }
    kiln_buffer_destroy(dev->gemm_partials);
    kiln_buffer_destroy(dev->gemm_transposed);
    kiln_buffer_destroy(dev->gemm_packed);
    for (int i = 0; i < dev->n_kernels; i++)
        clReleaseKernel(dev->kernels[i].kernel);
    for (int i = 0; i < dev->n_programs; i++)
        clReleaseProgram(dev->programs[i].program);
    if (dev->queue)
        clReleaseCommandQueue(dev->queue);
    if (dev->cl)
        clReleaseContext(dev->cl);
    pthread_mutex_destroy(&dev->memory_lock);
    pthread_mutex_destroy(&dev->lock);
    pthread_mutex_destroy(&dev->gemm_lock);
    kiln_host_free(dev->host, dev);
}

void kiln_device_describe(const kiln_device *dev, kiln_device_info *info)
{
    kiln_struct_export(info, &dev->info, sizeof *info);
}

int kiln_device_gpu_kernels(const kiln_device *dev)
{
    return dev->gpu_kernels;
}

size_t kiln_device_max_work_group(const kiln_device *dev)
{
    return dev->max_work_group;
}

const char *kiln_device_label(const kiln_device *dev)
{
    return dev->label;
}

kiln_host *kiln_device_host(const kiln_device *dev)
{
    return dev->host;
}
