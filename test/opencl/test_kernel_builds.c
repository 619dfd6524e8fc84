/* Every embedded kernel file builds from source on the default device
 * without a word: nothing on stderr (PoCL's compiler writes "N warnings
 * generated." there itself, whatever kiln does with the build log) and no
 * warning in the build log. kiln's cache and PoCL's start empty, or a
 * cached program would skip the compiler and hide its warnings. */
#include "harness.h"
#include "opencl/cl_internal.h"
#include "opencl/device.h"
#include "opencl/kernel_sources.h"
#include "runtime/context/context.h"

#include <stdlib.h>
#include <unistd.h>

/* What `file` printed on stderr while building, in text (empty if nothing). */
static kiln_status build_capturing_stderr(kiln_device *dev, const char *file, char *text,
                                          size_t size, cl_program *program)
{
    fflush(stderr);
    FILE *log = tmpfile();
    const int saved = dup(2);
    if (!log || saved < 0 || dup2(fileno(log), 2) < 0)
        SKIP("cannot capture stderr");
    const kiln_status st = kiln_program_build(dev, file, program);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(log);
    const size_t n = fread(text, 1, size - 1, log);
    text[n] = '\0';
    fclose(log);
    return st;
}

int main(void)
{
    char pocl_dir[] = "/tmp/kiln-pocl-cache-XXXXXX", kiln_dir[] = "/tmp/kiln-cache-XXXXXX";
    if (!mkdtemp(pocl_dir) || !mkdtemp(kiln_dir))
        SKIP("cannot make a temporary folder");
    /* Before the first OpenCL call, which starts PoCL. */
    setenv("POCL_CACHE_DIR", pocl_dir, 1);
    kiln_context_options o = {.struct_size = sizeof o, .cache_dir = kiln_dir};
    char err[512] = "";
    o.error_buffer = err;
    o.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK) {
        fprintf(stderr, "no context: %s\n", err);
        SKIP_MISSING("no OpenCL device");
    }
    kiln_device *dev = ctx->devices[0];
    CHECK(dev->n_programs == 0);   /* none built unwatched */
    int built = 0;
    for (int i = 0; i < kiln_kernel_source_count; i++) {
        const char *file = kiln_kernel_sources[i].name;
        if (strcmp(file, "prelude") == 0)   /* the first part of every program */
            continue;
        char printed[4096], log[4096] = "";
        cl_program program = NULL;
        const kiln_status st = build_capturing_stderr(dev, file, printed, sizeof printed,
                                                      &program);
        CHECK_OK(ctx, st);
        if (st != KILN_OK)
            continue;
        clGetProgramBuildInfo(program, dev->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        if (printed[0]) {
            fprintf(stderr, "building %s.cl printed:\n%s", file, printed);
            test_failures++;
        }
        if (strstr(log, "warning")) {
            fprintf(stderr, "building %s.cl: its build log warns:\n%s\n", file, log);
            test_failures++;
        }
        built++;
    }
    printf("%d kernel files built on %s\n", built, dev->label);
    kiln_context_destroy(ctx);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", pocl_dir, kiln_dir);
    CHECK(system(cmd) == 0);
    return test_finish("test_kernel_builds");
}
