#include "fashion_data.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int fashion_format_parse(const char *name)
{
    static const char *const names[] = {"idx", "npy", "folder"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

kiln_status fashion_load(kiln_context *ctx, fashion_format format, const char *dir, int train,
                         long limit, kiln_dataset **out)
{
    char a[1024], b[1024];
    if (format == FASHION_NPY) {
        snprintf(a, sizeof a, "%s/%s_images.npy", dir, train ? "train" : "test");
        snprintf(b, sizeof b, "%s/%s_labels.npy", dir, train ? "train" : "test");
        kiln_npy_options o = {.struct_size = sizeof o, .scale = 1.0f / 255.0f, .limit = limit};
        return kiln_dataset_from_npy(ctx, a, b, &o, out);
    }
    if (format == FASHION_FOLDER) {
        snprintf(a, sizeof a, "%s/%s", dir, train ? "train" : "test");
        kiln_image_folder_options o = {.struct_size = sizeof o, .height = 28, .width = 28,
                                       .channels = 1};
        return kiln_dataset_from_image_folder(ctx, a, &o, out);
    }
    snprintf(a, sizeof a, "%s/%s-images-idx3-ubyte.gz", dir, train ? "train" : "t10k");
    snprintf(b, sizeof b, "%s/%s-labels-idx1-ubyte.gz", dir, train ? "train" : "t10k");
    kiln_idx_options o = {.struct_size = sizeof o, .limit = limit};
    return kiln_dataset_from_idx(ctx, a, b, &o, out);
}

double fashion_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
