/* Fuzz target: the IDX reader, in memory. The input is split in two (its
 * first byte chooses where) into an image file and a label file. */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    const size_t split = 1 + (size - 1) * data[0] / 255;
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    kiln_idx_options o = {.struct_size = sizeof o, .limit = 64};
    kiln_dataset *ds = NULL;
    if (kiln_dataset_from_idx_memory(&ctx, data + 1, split - 1, data + split, size - split, &o,
                                     &ds) == KILN_OK)
        kiln_dataset_destroy(ds);
    kiln_context_release_host_only(&ctx);
    return 0;
}
