/* Fuzz target: the ONNX importer (kiln_model_import_onnx_buffer) on any
 * bytes, with no device: what imports is a model built through the
 * builders on a host-only context, then destroyed. External data is
 * refused without a base folder, so no file is read. Built for libFuzzer
 * with -Dfuzzing=true (clang); otherwise linked with fuzz_driver.c. */
#include "runtime/context/context.h"

#include <stdlib.h>

static void *plain_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static void quiet(void *user, kiln_log_level level, const char *message)
{
    (void)user, (void)level, (void)message;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, plain_realloc, NULL, quiet);
    kiln_model *m = NULL;
    const kiln_status st = kiln_model_import_onnx_buffer(&ctx, data, size, NULL, &m);
    if ((st == KILN_OK) != (m != NULL))
        abort();   /* a model on failure, or none on success */
    kiln_model_destroy(m);
    kiln_context_release_host_only(&ctx);
    return 0;
}
