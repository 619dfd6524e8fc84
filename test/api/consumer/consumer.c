/* A consumer of kiln that sees only kiln.h: trains a tiny classifier and
 * checks that it learned. Used by the subproject and installed-library tests. */
#include <kiln.h>

#include <stdio.h>

int main(void)
{
    float x[64 * 2];
    int32_t y[64];
    for (int i = 0; i < 64; i++) {
        x[2 * i] = (float)(i % 8) / 8.0f;
        x[2 * i + 1] = (float)(i / 8) / 8.0f;
        y[i] = x[2 * i] > x[2 * i + 1];
    }
    kiln_context *ctx = NULL;
    char err[512] = "";
    kiln_context_options co = {.struct_size = sizeof co, .error_buffer = err,
                               .error_buffer_size = sizeof err};
    if (kiln_context_create(&co, &ctx) != KILN_OK) {
        printf("SKIP: no OpenCL device: %s\n", err);
        return 77;
    }
    kiln_model *m = NULL;
    kiln_dataset *ds = NULL;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 64, .feature_rank = 1,
                          .feature_dims = {2}, .features = x, .sparse_labels = y,
                          .num_classes = 2};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 8,
                                 .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options out = {.struct_size = sizeof out, .units = 2,
                              .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .learning_rate = 0.05f};
    const kiln_compile_options cc = {.struct_size = sizeof cc,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam};
    const kiln_fit_options fo = {.struct_size = sizeof fo, .epochs = 40, .batch_size = 16,
                                 .verbosity = KILN_VERBOSE_SILENT};
    kiln_metrics met = {.struct_size = sizeof met};
    const int32_t dims[] = {2};
    kiln_status st = kiln_dataset_from_arrays(ctx, &d, &ds);
    if (st == KILN_OK)
        st = kiln_model_create(ctx, &m);
    if (st == KILN_OK) {
        kiln_input(m, 1, dims, NULL);
        kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
        kiln_dense(m, KILN_NODE_PREVIOUS, &out);
        st = kiln_model_compile(m, &cc);
    }
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fo);
    if (st == KILN_OK)
        st = kiln_model_evaluate(m, ds, 0, &met);
    if (st != KILN_OK)
        printf("kiln %s: %s\n", kiln_version(), kiln_context_last_error(ctx));
    else
        printf("kiln %s: accuracy %.3f\n", kiln_version(), met.accuracy);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return st == KILN_OK && met.accuracy >= 0.9 ? 0 : 1;
}
