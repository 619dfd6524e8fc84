/* End to end through the public API only: the seed CNN on a Fashion-MNIST
 * subset (6,000 training images, 2 epochs) must reach 80% on 2,000 test
 * images. Skips when Debian's dataset-fashion-mnist is not installed. */
#include "harness.h"

#include <unistd.h>

#define DIR "/usr/share/datasets/fashion-mnist"

int main(void)
{
    if (access(DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
        SKIP("%s is missing: install dataset-fashion-mnist", DIR);
    kiln_context *ctx = test_context(2024);
    if (!ctx)
        SKIP("no OpenCL device");
    kiln_dataset *train = NULL, *test = NULL;
    kiln_idx_options train_opts = {.struct_size = sizeof train_opts};
    train_opts.limit = 6000;
    kiln_idx_options test_opts = {.struct_size = sizeof test_opts};
    test_opts.limit = 2000;
    CHECK_OK(ctx, kiln_dataset_from_idx(ctx, DIR "/train-images-idx3-ubyte.gz",
                                        DIR "/train-labels-idx1-ubyte.gz", &train_opts, &train));
    CHECK_OK(ctx, kiln_dataset_from_idx(ctx, DIR "/t10k-images-idx3-ubyte.gz",
                                        DIR "/t10k-labels-idx1-ubyte.gz", &test_opts, &test));
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t shape[] = {28, 28, 1};
    kiln_conv2d_options conv = {sizeof conv, NULL, 32, {3, 3}, {1, 1}, KILN_PADDING_VALID,
                                KILN_ACTIVATION_RELU, 0};
    kiln_pool2d_options pool = {sizeof pool, NULL, {2, 2}, {2, 2}, KILN_PADDING_VALID};
    kiln_dense_options hidden = {sizeof hidden, NULL, 64, KILN_ACTIVATION_RELU, 0};
    kiln_dense_options head = {sizeof head, NULL, 10, KILN_ACTIVATION_SOFTMAX, 0};
    kiln_input(m, 3, shape, NULL);
    kiln_conv2d(m, KILN_NODE_PREVIOUS, &conv);
    kiln_max_pooling2d(m, KILN_NODE_PREVIOUS, &pool);
    kiln_flatten(m, KILN_NODE_PREVIOUS, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    kiln_compile_options co = {.struct_size = sizeof co};
    co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    kiln_fit_options fo;
    kiln_fit_options_init(&fo);
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
