/* Fuzz target: the model description reader (runtime/saving/model_desc.h) on any
 * bytes, with no device: what parses is built into a model on a host-only
 * context through the public builders, and a model that builds is
 * described again, which must parse. Built for libFuzzer with
 * -Dfuzzing=true (clang); otherwise linked with fuzz_driver.c. */
#include "runtime/context/context.h"
#include "runtime/saving/model_desc.h"

#include <stdlib.h>
#include <string.h>

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
    kiln_model_desc desc;
    kiln_model *m = NULL;
    if (kiln_model_desc_parse(&ctx, "fuzz", (const char *)data, size, &desc) == KILN_OK &&
        kiln_model_create(&ctx, &m) == KILN_OK &&
        kiln_model_desc_build(&desc, "fuzz", 1, m) == KILN_OK) {
        char *text = NULL;
        size_t length = 0;
        kiln_model_desc again;
        if (kiln_model_describe(m, "fuzz", 0, &text, &length) == KILN_OK) {
            if (kiln_model_desc_parse(&ctx, "fuzz", text, length, &again) != KILN_OK)
                abort();   /* kiln wrote what it cannot read */
            kiln_model_desc_free(&again);
        }
        kiln_free(&ctx, text);
    }
    kiln_model_destroy(m);
    kiln_model_desc_free(&desc);
    kiln_context_release_host_only(&ctx);
    return 0;
}
