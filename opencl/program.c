#include "opencl/cl_internal.h"
#include "opencl/kernel_sources.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Program builds go one at a time in the process: PoCL 3.1 compiles with
 * LLVM 15, whose option tables are not safe to parse from two threads at
 * once, and two devices' workers building their first programs together
 * (mirrored replicas on a cold kernel cache) raced there under
 * ThreadSanitizer (tools/tsan.sh, test_dataset_zip). Cached binaries take
 * the same lock: a build of one is a driver call of the same kind. Builds
 * are rare (once per program and context). */
static pthread_mutex_t program_builds = PTHREAD_MUTEX_INITIALIZER;

static cl_int build_one_at_a_time(cl_program program, const kiln_device *dev,
                                  const char *options)
{
    pthread_mutex_lock(&program_builds);
    const cl_int err = clBuildProgram(program, 1, &dev->id, options, NULL, NULL);
    pthread_mutex_unlock(&program_builds);
    return err;
}

/* Each device builds with its own KILN_DEVICE_SLOT (unused by the
 * kernels): PoCL 3.1's CPU drivers share one cache of loaded work-group
 * functions, found by the program's build hash, the local size and the
 * grid's width when a kernel starts but by the hash and local size alone
 * when it ends. Two devices running one kernel at once, with one local
 * size and two global sizes (a pipeline's stages, mirrored replicas'
 * uneven shares), could then release each other's entry and abort in
 * pocl_release_dlhandle_cache (test_concurrent_devices). Distinct options
 * make distinct hashes: each device's entries are its own, and a device
 * runs one kernel at a time. */
static void build_options(const kiln_device *dev, char *out, size_t size)
{
    snprintf(out, size, "-cl-std=CL1.2 -D KILN_DEVICE_SLOT=%d", (int)dev->index);
}

static const kiln_kernel_source *find_source(const char *file)
{
    for (int i = 0; i < kiln_kernel_source_count; i++)
        if (strcmp(kiln_kernel_sources[i].name, file) == 0)
            return &kiln_kernel_sources[i];
    return NULL;
}

static kiln_status build_log_error(kiln_device *dev, cl_program program, const char *file,
                                   cl_int err)
{
    char log[768] = "";
    clGetProgramBuildInfo(program, dev->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    log[sizeof log - 1] = '\0';
    return kiln_fail(dev->host, KILN_ERROR_BUILD, "building %s.cl on %s failed: %s: %s", file,
                     dev->label, kiln_cl_error_name(err), log);
}

/* The cache key covers everything that changes the binary. */
static kiln_cache_key key_for(const kiln_device *dev, const kiln_kernel_source *prelude,
                              const kiln_kernel_source *src, const char *options)
{
    char platform_version[128] = "";
    clGetPlatformInfo(dev->platform, CL_PLATFORM_VERSION, sizeof platform_version - 1,
                      platform_version, NULL);
    const char *parts[] = {prelude->text, src->text, options, dev->info.name,
                           dev->info.vendor, dev->info.driver_version, dev->info.platform,
                           platform_version};
    size_t lengths[] = {prelude->length, src->length, 0, 0, 0, 0, 0, 0};
    for (int i = 2; i < 8; i++)
        lengths[i] = strlen(parts[i]);
    return kiln_cache_key_of(parts, lengths, 8);
}

/* The cached binary for `key`, if there is a usable one (*out NULL if not). */
static void try_cached(kiln_device *dev, const kiln_cache_key *key, const char *options,
                       cl_program *out)
{
    unsigned char *binary;
    size_t size;
    *out = NULL;
    kiln_cache_load(dev->host, dev->cache_dir, key, &binary, &size);
    if (!binary)
        return;
    cl_int status, err;
    const unsigned char *bin = binary;
    cl_program p = clCreateProgramWithBinary(dev->cl, 1, &dev->id, &size, &bin, &status, &err);
    kiln_host_free(dev->host, binary);
    if (err == CL_SUCCESS && status == CL_SUCCESS &&
        build_one_at_a_time(p, dev, options) == CL_SUCCESS) {
        *out = p;
        return;
    }
    /* A stale or corrupt entry: rebuild from source and overwrite it. */
    if (p)
        clReleaseProgram(p);
    kiln_host_log(dev->host, KILN_LOG_WARNING, "ignoring an unusable cached program on %s",
                  dev->label);
}

static void store(kiln_device *dev, const kiln_cache_key *key, cl_program program)
{
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
            CL_SUCCESS || size == 0)
        return;
    unsigned char *binary = kiln_host_alloc(dev->host, size);
    if (!binary)
        return;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) ==
        CL_SUCCESS)
        kiln_cache_store(dev->host, dev->cache_dir, key, binary, size);
    kiln_host_free(dev->host, binary);
}

kiln_status kiln_program_build(kiln_device *dev, const char *file, cl_program *out)
{
    for (int i = 0; i < dev->n_programs; i++) {
        if (strcmp(dev->programs[i].file, file) == 0) {
            *out = dev->programs[i].program;
            return KILN_OK;
        }
    }
    const kiln_kernel_source *src = find_source(file);
    const kiln_kernel_source *prelude = find_source("prelude");
    if (!src || !prelude)
        return kiln_fail(dev->host, KILN_ERROR_BUILD, "no embedded kernel file %s.cl", file);
    if (dev->n_programs == KILN_MAX_PROGRAMS)
        return kiln_fail(dev->host, KILN_ERROR_UNSUPPORTED, "program table full on %s",
                         dev->label);

    char options[64];
    build_options(dev, options, sizeof options);
    kiln_cache_key key = key_for(dev, prelude, src, options);
    cl_program program = NULL;
    try_cached(dev, &key, options, &program);
    if (!program) {
        /* The shared prelude is the first source string. */
        const char *texts[] = {prelude->text, src->text};
        size_t lengths[] = {prelude->length, src->length};
        cl_int err;
        program = clCreateProgramWithSource(dev->cl, 2, texts, lengths, &err);
        if (err != CL_SUCCESS)
            return kiln_cl_fail(dev, "clCreateProgramWithSource", err);
        err = build_one_at_a_time(program, dev, options);
        if (err != CL_SUCCESS) {
            const kiln_status st = build_log_error(dev, program, file, err);
            clReleaseProgram(program);
            return st;
        }
        store(dev, &key, program);
    }
    dev->programs[dev->n_programs].file = src->name;
    dev->programs[dev->n_programs].program = program;
    dev->n_programs++;
    *out = program;
    return KILN_OK;
}
