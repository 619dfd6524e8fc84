#include "fashion_data.h"

#include <stdio.h>
#include <time.h>

kiln_status fashion_load(kiln_context *ctx, const char *dir, const char *prefix, long limit,
                         kiln_dataset **out)
{
    char images[1024], labels[1024];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    kiln_idx_options o = {.struct_size = sizeof o, .limit = limit};
    return kiln_dataset_from_idx(ctx, images, labels, &o, out);
}

double fashion_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
