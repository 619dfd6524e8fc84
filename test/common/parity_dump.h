/* What a test's --dump writes for its PyTorch side (the parity scripts in
 * test/train, which read it with test/train/parity_dump.py): raw float32
 * arrays, and the list of a model's tensors with where each lies in
 * kiln_model_get_weights's array. Include after harness.h. */
#ifndef KILN_TEST_PARITY_DUMP_H
#define KILN_TEST_PARITY_DUMP_H

#include <stdio.h>

/* DIR/NAME: n floats as they lie in memory. */
static inline void dump_floats(const char *dir, const char *name, const float *x, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(x, sizeof(float), n, f) == n);
    if (f)
        fclose(f);
}

/* DIR/tensors.txt: a line per tensor, "name trainable offset dims...". */
static inline void dump_tensor_list(kiln_context *ctx, kiln_model *m, const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tensors.txt", dir);
    FILE *list = fopen(path, "w");
    CHECK(list != NULL);
    int32_t count = 0;
    CHECK_OK(ctx, kiln_model_tensor_count(m, &count));
    for (int32_t t = 0; list && t < count; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        CHECK_OK(ctx, kiln_model_tensor_info(m, t, &info));
        fprintf(list, "%s %d %lld", info.name, (int)info.trainable, (long long)info.offset);
        for (int d = 0; d < info.rank; d++)
            fprintf(list, " %d", (int)info.dims[d]);
        fprintf(list, "\n");
    }
    if (list)
        fclose(list);
}

#endif
