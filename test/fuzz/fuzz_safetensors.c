/* Fuzz target: the safetensors reader (and its JSON parser) on any bytes.
 * Built for libFuzzer with -Dfuzzing=true (clang); otherwise linked with
 * fuzz_driver.c, which replays a corpus and mutations of it for a bounded
 * time as part of the test suite. */
#include "runtime/context/context.h"
#include "runtime/formats/safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    kiln_st_file f;
    if (kiln_st_parse(&ctx, "fuzz", data, size, &f) == KILN_OK) {
        /* Touch every tensor's bytes: they must lie inside the input. */
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < f.n_tensors; i++) {
            const kiln_st_tensor *t = &f.tensors[i];
            if (t->end > t->begin)
                sink ^= kiln_st_data(&f, t)[t->end - t->begin - 1];
        }
        (void)sink;
        (void)kiln_st_meta(&f, "format");
        kiln_st_free(&f);
    }
    kiln_context_release_host_only(&ctx);
    return 0;
}
