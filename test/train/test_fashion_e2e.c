/* End to end through the public API only: the seed CNN on a Fashion-MNIST
 * subset (6,000 training images, 2 epochs) must reach 80% on 2,000 test
 * images. Skips when Debian's dataset-fashion-mnist is not installed. */
#include "test_data.h"

#include <unistd.h>

int main(void)
{
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        SKIP_MISSING("%s is missing: install dataset-fashion-mnist", FASHION_DIR);
    kiln_context *ctx = test_context(2024);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    kiln_dataset *train = fashion_subset(ctx, "train", 6000);
    kiln_dataset *test = fashion_subset(ctx, "t10k", 2000);
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    seed_cnn_layers(m);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.verbosity = KILN_VERBOSE_EPOCH;
    fo.validation = test;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fo));
    kiln_metrics met = {.struct_size = sizeof met};
    CHECK_OK(ctx, kiln_model_evaluate(m, test, 100, &met));
    printf("test accuracy on 2000 images after 2 epochs on 6000: %.4f (loss %.4f)\n",
           met.accuracy, met.loss);
    CHECK(met.accuracy >= 0.80);
    kiln_epoch_record last = {.struct_size = sizeof last};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &last));
    CHECK(fabs(last.val_accuracy - met.accuracy) < 1e-9);
    kiln_model_destroy(m);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(test);
    kiln_context_destroy(ctx);
    return test_finish("test_fashion_e2e");
}
