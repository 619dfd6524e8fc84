/* The seed ResNet (examples/resnet_model.c): its summary's parameter counts
 * equal the ones computed by hand below, and it trains (the loss falls over
 * two epochs on a Fashion-MNIST subset) and evaluates under whatever
 * strategy and batch norm meson asks for (POCL_DEVICES, RESNET_SYNC_BN),
 * and its weights, moving statistics included, reload into a fresh model. */
#include "harness.h"
#include "resnet_model.h"

#include <unistd.h>

/* Keras's counts: a k x k conv from i to o channels has k*k*i*o weights and
 * o biases; batch norm has 4 per channel (gamma, beta trainable; moving mean
 * and variance not). */
static int64_t conv(int64_t k, int64_t i, int64_t o)
{
    return k * k * i * o + o;
}

static void expected_counts(int64_t *total, int64_t *non_trainable)
{
    static const int64_t filters[] = {64, 64, 128, 128, 256, 256, 512, 512};
    static const int64_t strides[] = {1, 1, 2, 1, 2, 1, 2, 1};
    int64_t t = conv(7, 1, 64) + 4 * 64, frozen = 2 * 64, in = 64;
    for (int b = 0; b < 8; b++) {
        const int64_t f = filters[b];
        t += conv(3, in, f) + 4 * f + conv(3, f, f) + 4 * f;
        frozen += 2 * f + 2 * f;
        if (strides[b] != 1 || in != f) {
            t += conv(1, in, f) + 4 * f;
            frozen += 2 * f;
        }
        in = f;
    }
    *total = t + 512 * 10 + 10;   /* the head */
    *non_trainable = frozen;
}

int main(void)
{
    kiln_context_options co = {.struct_size = sizeof co};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK)
        SKIP_MISSING("no OpenCL device");
    const char *sync = getenv("RESNET_SYNC_BN");
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    resnet_build(m, 28, 28, 1, 10, sync && *sync == '1');

    int64_t total = 0, frozen = 0;
    expected_counts(&total, &frozen);
    char want[160], text[16384];
    size_t length = 0;
    CHECK_OK(ctx, kiln_model_summary(m, text, sizeof text, &length));
    CHECK(length < sizeof text && strlen(text) == length);
    snprintf(want, sizeof want, "Total params: %lld,%03lld,%03lld\n", (long long)(total / 1000000),
             (long long)(total / 1000 % 1000), (long long)(total % 1000));
    CHECK(strstr(text, want) != NULL);   /* 11,189,770 */
    snprintf(want, sizeof want, "Non-trainable params: %lld,%03lld\n", (long long)(frozen / 1000),
             (long long)(frozen % 1000));
    CHECK(strstr(text, want) != NULL);   /* 9,600 */
    char small[64];
    CHECK_OK(ctx, kiln_model_summary(m, small, sizeof small, &length));
    CHECK(strlen(small) == sizeof small - 1 && length > sizeof small);  /* cut, NUL-ended */

    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_ADAM, .learning_rate = 1e-3f};
    kiln_compile_options opts = {.struct_size = sizeof opts};
    opts.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    opts.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &opts));
    int64_t count = 0;
    CHECK_OK(ctx, kiln_model_parameter_count(m, &count));
    CHECK(count == total);
    const char *strategy = "";
    int32_t replicas = 0;
    CHECK_OK(ctx, kiln_model_distribution(m, &strategy, &replicas));
    printf("%lld parameters (%lld non-trainable); %s, %d replica(s), %s batch norm\n",
           (long long)total, (long long)frozen, strategy, (int)replicas,
           sync && *sync == '1' ? "synchronised" : "per-replica");

    const char *dir = "/usr/share/datasets/fashion-mnist";
    kiln_idx_options io = {.struct_size = sizeof io, .limit = 384};
    kiln_dataset *train = NULL;
    char images[256], labels[256];
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", dir);
    if (kiln_dataset_from_idx(ctx, images, labels, &io, &train) != KILN_OK) {
        kiln_model_destroy(m);
        kiln_context_destroy(ctx);
        SKIP_MISSING("no Fashion-MNIST in %s", dir);
    }
    kiln_fit_options fit = {.struct_size = sizeof fit};
    fit.epochs = 2;
    fit.batch_size = 32;
    fit.verbosity = KILN_VERBOSE_SILENT;
    CHECK_OK(ctx, kiln_model_fit(m, train, &fit));
    kiln_epoch_record first = {.struct_size = sizeof first}, second = first;
    CHECK_OK(ctx, kiln_model_history_epoch(m, 0, &first));
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &second));
    printf("loss by epoch: %.4f, %.4f\n", first.loss, second.loss);
    CHECK(second.loss < first.loss);
    kiln_metrics met = {.struct_size = sizeof met};
    CHECK_OK(ctx, kiln_model_evaluate(m, train, 64, &met));
    CHECK(met.samples == 384 && met.loss == met.loss);

    /* The moving statistics travel with the weights: a fresh model loading
     * them evaluates alike. */
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln-test-resnet-%ld.safetensors", (long)getpid());
    CHECK_OK(ctx, kiln_model_save_weights(m, path));
    kiln_model *copy = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &copy));
    resnet_build(copy, 28, 28, 1, 10, 0);
    CHECK_OK(ctx, kiln_model_compile(copy, &opts));
    CHECK_OK(ctx, kiln_model_load_weights(copy, path));
    kiln_metrics again = {.struct_size = sizeof again};
    CHECK_OK(ctx, kiln_model_evaluate(copy, train, 64, &again));
    printf("evaluate: loss %.6f, reloaded %.6f\n", met.loss, again.loss);
    CHECK(fabs(again.loss - met.loss) <= 1e-5 * fabs(met.loss));
    remove(path);
    kiln_model_destroy(copy);
    kiln_dataset_destroy(train);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return test_finish("test_resnet");
}
