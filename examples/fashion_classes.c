#include "fashion_classes.h"
#include "fashion_data.h"

#include <stdlib.h>

kiln_status fashion_classes_load(kiln_context *ctx, const char *dir, int train, int32_t first,
                                 int32_t n_classes, int64_t limit, int channels_first,
                                 kiln_dataset **out)
{
    enum { PIXELS = 28 * 28 };
    kiln_dataset *all = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    int64_t count = 0, kept = 0;
    *out = NULL;
    kiln_status st = fashion_load(ctx, FASHION_IDX, dir, train, 0, &all);
    if (st == KILN_OK)
        st = kiln_dataset_count(all, &count);
    if (st != KILN_OK)
        goto done;
    const int64_t room = limit > 0 && limit < count ? limit : count;
    x = malloc((size_t)room * PIXELS * sizeof *x);
    y = malloc((size_t)room * sizeof *y);
    if (!x || !y) {
        st = KILN_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    /* Read each sample into the next free slot; keep it only if its class
     * is wanted (the slot is reused otherwise). */
    for (int64_t i = 0; st == KILN_OK && i < count && kept < room; i++) {
        const kiln_sample_buffers b = {.struct_size = sizeof b, .features = x + kept * PIXELS,
                                       .sparse_labels = y + kept};
        st = kiln_dataset_read(all, i, &b);
        if (st == KILN_OK && y[kept] >= first && y[kept] < first + n_classes)
            y[kept++] -= first;
    }
    if (st != KILN_OK)
        goto done;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = kept, .feature_rank = 3,
                          .features = x, .sparse_labels = y, .num_classes = n_classes};
    const int32_t nchw[3] = {1, 28, 28}, nhwc[3] = {28, 28, 1};
    for (int k = 0; k < 3; k++)
        d.feature_dims[k] = channels_first ? nchw[k] : nhwc[k];
    st = kiln_dataset_from_arrays(ctx, &d, out);
done:
    free(x);
    free(y);
    kiln_dataset_destroy(all);
    return st;
}
