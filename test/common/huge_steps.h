/* The data of the non-finite update tests (test/api/test_nonfinite.c and
 * test/strategies/test_nonfinite_mpi.c): HUGE_STEPS batches of HUGE_BATCH
 * samples of 6 features and 3 classes. The loss and gradients stay finite
 * at every step, but at step HUGE_STEP one feature of each sample is 1e38,
 * so Adam's second moment (g * g) overflows: the update itself goes
 * non-finite. */
#ifndef KILN_TEST_HUGE_STEPS_H
#define KILN_TEST_HUGE_STEPS_H

#include "harness.h"

#define HUGE_BATCH 4
#define HUGE_STEPS 4
#define HUGE_STEP 3

/* Batches [first_step, first_step + steps) of that data. */
static inline kiln_dataset *huge_data(kiln_context *ctx, int first_step, int steps)
{
    float x[HUGE_STEPS * HUGE_BATCH * 6];
    int32_t y[HUGE_STEPS * HUGE_BATCH];
    const int n = steps * HUGE_BATCH;
    for (int i = 0; i < n; i++) {
        const int sample = first_step * HUGE_BATCH + i;
        for (int f = 0; f < 6; f++)
            x[i * 6 + f] = (float)((sample * 6 + f) % 7) / 7.0f;
        if (sample / HUGE_BATCH == HUGE_STEP - 1)
            x[i * 6 + sample % 6] = 1e38f;
        y[i] = sample % 3;
    }
    const kiln_arrays_desc d = {.struct_size = sizeof d, .count = n, .feature_rank = 1,
                                .feature_dims = {6}, .features = x, .sparse_labels = y,
                                .num_classes = 3};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

#endif
