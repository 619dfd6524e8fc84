/* Fuzz target: the IDX reader. The input is split in two (its first byte
 * chooses where) into an image file and a label file. */
#include "runtime/context.h"
#include "runtime/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *plain_realloc(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, size);
}

static int write_file(char *path, const unsigned char *data, size_t size)
{
    const int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    const int ok = write(fd, data, size) == (ssize_t)size;
    close(fd);
    return ok;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    const size_t split = 1 + (size - 1) * data[0] / 255;
    char images[] = "/tmp/kiln-fuzz-images-XXXXXX", labels[] = "/tmp/kiln-fuzz-labels-XXXXXX";
    if (write_file(images, data + 1, split - 1) && write_file(labels, data + split, size - split)) {
        kiln_context ctx;
        kiln_context_init_host_only(&ctx, plain_realloc, NULL, NULL);
        kiln_idx_options o = {.struct_size = sizeof o, .limit = 64};
        kiln_dataset *ds = NULL;
        if (kiln_dataset_from_idx(&ctx, images, labels, &o, &ds) == KILN_OK)
            kiln_dataset_destroy(ds);
        kiln_context_release_host_only(&ctx);
    }
    unlink(images);
    unlink(labels);
    return 0;
}
