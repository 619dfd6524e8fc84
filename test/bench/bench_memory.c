/* What a model holds on its device, by kiln_model_memory, trained in full,
 * with activations in half precision (activation_storage float16), with
 * LoRA, or with a moving average of the weights (test/bench/memory.sh
 * prints the table). Adam, one step on fixed pseudo-random data (so that
 * every buffer a step needs is there). The models:
 *   dense (default): 784 -> Dense(1024, relu) -> Dense(1024, relu) ->
 *     Dense(10, softmax), batch 128; LoRA on all three Dense layers;
 *   resnet: the seed ResNet (examples/resnet_model.c) on SIZE x SIZE x 3
 *     images, 10 classes (default 224, batch 8);
 *   an ONNX file: imported (kiln_model_import_onnx; its input's size as
 *     exported, a softmax put after its output; default batch 8).
 * On the last two, LoRA goes on the last Dense layer (the head) and every
 * other layer is frozen: a fine-tuning of the head alone.
 * Usage: bench_memory [--model dense|resnet|FILE.onnx] [--batch N] [--size S]
 *                     full|half|lora RANK|ema M
 * Prints one line:
 *   MODEL KIND: trainable T, parameters P, gradients G, optimizer O,
 *   activations A, workspace W, peak K   (bytes; T in floats)
 * MODEL is dense_stack, seed_resnet or onnx. Exits 0, 1 on a kiln error,
 * 2 on bad usage. */
#include "kiln.h"
#include "bench_util.h"
#include "resnet_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLASSES 10

static int fail(kiln_context *ctx, kiln_status st)
{
    fprintf(stderr, "bench_memory: %s: %s\n", kiln_status_name(st), kiln_context_last_error(ctx));
    return 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_memory [--model dense|resnet|FILE.onnx] [--batch N] "
            "[--size S] full|half|lora RANK|ema M\n");
    return 2;
}

static kiln_status dense_stack(kiln_model *m, int32_t lora_rank)
{
    const int32_t dims[] = {784};
    kiln_input(m, 1, dims, NULL);
    const char *names[] = {"fc1", "fc2", "head"};
    for (int i = 0; i < 3; i++) {
        const kiln_dense_options d = {.struct_size = sizeof d, .name = names[i],
                                      .units = i < 2 ? 1024 : CLASSES,
                                      .activation = i < 2 ? KILN_ACTIVATION_RELU
                                                          : KILN_ACTIVATION_SOFTMAX};
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
        const kiln_status st = lora_rank ? kiln_model_enable_lora(m, names[i], lora_rank, 0.0f)
                                         : KILN_OK;
        if (st != KILN_OK)
            return st;
    }
    return KILN_OK;
}

/* LoRA on the last Dense layer, every other layer frozen. */
static kiln_status lora_on_head(kiln_model *m, int32_t rank)
{
    int32_t layers = 0, head = -1;
    kiln_status st = kiln_model_layer_count(m, &layers);
    for (int32_t i = 0; st == KILN_OK && i < layers; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        st = kiln_model_layer_info(m, i, &info);
        if (st == KILN_OK && strcmp(info.kind, "dense") == 0)
            head = i;
    }
    if (st == KILN_OK && head < 0) {
        fprintf(stderr, "bench_memory: the model has no Dense layer for LoRA\n");
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    for (int32_t i = 0; st == KILN_OK && i < layers; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        st = kiln_model_layer_info(m, i, &info);
        if (st == KILN_OK && i == head)
            st = kiln_model_enable_lora(m, info.name, rank, 0.0f);
        else if (st == KILN_OK && info.n_tensors > 0)
            st = kiln_model_set_trainable(m, info.name, 0);
    }
    return st;
}

int main(int argc, char **argv)
{
    const char *model = "dense";
    long batch = 0, size = 224;
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--model") == 0)
            model = argv[i + 1];
        else if (strcmp(argv[i], "--batch") == 0) {
            if (!bench_parse_long("bench_memory", "--batch", argv[i + 1], 1, 4096, &batch))
                return 2;
        } else if (strcmp(argv[i], "--size") == 0) {
            if (!bench_parse_long("bench_memory", "--size", argv[i + 1], 32, 4096, &size))
                return 2;
        } else
            return usage();
    }
    const char *kind = i < argc ? argv[i] : "";
    const int lora = argc == i + 2 && strcmp(kind, "lora") == 0;
    const int ema = argc == i + 2 && strcmp(kind, "ema") == 0;
    const int half = argc == i + 1 && strcmp(kind, "half") == 0;
    if (!(argc == i + 1 && strcmp(kind, "full") == 0) && !half && !lora && !ema)
        return usage();
    long rank = 0;
    if (lora && !bench_parse_long("bench_memory", "lora", argv[i + 1], 1, 4096, &rank))
        return 2;
    const float momentum = ema ? (float)atof(argv[i + 1]) : 0.0f;
    if (ema && !(momentum > 0.0f && momentum < 1.0f))
        return fprintf(stderr, "bench_memory: ema needs a momentum in (0, 1)\n"), 2;
    const int is_dense = strcmp(model, "dense") == 0, is_resnet = strcmp(model, "resnet") == 0;
    const size_t len = strlen(model);
    if (!is_dense && !is_resnet && (len < 5 || strcmp(model + len - 5, ".onnx") != 0))
        return usage();
    if (!batch)
        batch = is_dense ? 128 : 8;

    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(NULL, &ctx);
    if (st != KILN_OK)
        return fprintf(stderr, "bench_memory: no context\n"), 1;
    kiln_model *m = NULL;
    if (is_dense || is_resnet)
        st = kiln_model_create(ctx, &m);
    else
        st = kiln_model_import_onnx(ctx, model, NULL, &m);
    if (st == KILN_OK && is_dense)
        st = dense_stack(m, (int32_t)rank);
    if (st == KILN_OK && is_resnet)
        resnet_build(m, (int32_t)size, (int32_t)size, 3, CLASSES, 0);
    if (st == KILN_OK && !is_dense && !is_resnet) {
        const kiln_activation_layer_options so = {.struct_size = sizeof so};
        kiln_activation_layer(m, KILN_NODE_PREVIOUS, KILN_ACTIVATION_SOFTMAX, &so);
    }
    if (st == KILN_OK && lora && !is_dense)
        st = lora_on_head(m, (int32_t)rank);
    const kiln_optimizer_options adam = {.struct_size = sizeof adam,
                                         .kind = KILN_OPTIMIZER_ADAM, .use_ema = ema,
                                         .ema_momentum = momentum};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam,
                                     .strategy = KILN_STRATEGY_ONE_DEVICE,
                                     .activation_storage = half ? KILN_STORAGE_FLOAT16
                                                                : KILN_STORAGE_FLOAT32};
    if (st == KILN_OK)
        st = kiln_model_compile(m, &co);
    kiln_tensor_info in = {.struct_size = sizeof in};
    if (st == KILN_OK)
        st = kiln_model_input_info(m, 0, &in);
    if (st != KILN_OK)
        return fail(ctx, st);
    int64_t sample = 1;
    for (int d = 0; d < in.rank; d++)
        sample *= in.dims[d];
    float *x = malloc(sizeof(float) * (size_t)(batch * sample));
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
    if (!x || !labels)
        return fprintf(stderr, "bench_memory: out of memory\n"), 1;
    for (int64_t k = 0; k < batch * sample; k++)
        x[k] = (float)((k * 7919) % 1000) / 1000.0f;
    for (long k = 0; k < batch; k++)
        labels[k] = (int32_t)(k % CLASSES);
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = batch, .features = x,
                                 .sparse_labels = labels};
    if ((st = kiln_model_train_on_batch(m, &b, NULL)) != KILN_OK)
        return fail(ctx, st);
    int32_t tensors = 0;
    int64_t trainable = 0;
    kiln_model_tensor_count(m, &tensors);
    for (int32_t t = 0; t < tensors; t++) {
        kiln_parameter_info info = {.struct_size = sizeof info};
        if (kiln_model_tensor_info(m, t, &info) == KILN_OK && info.trainable)
            trainable += info.size;
    }
    kiln_memory_report mem = {.struct_size = sizeof mem};
    if ((st = kiln_model_memory(m, 0, &mem)) != KILN_OK)
        return fail(ctx, st);
    printf("%s %s: trainable %lld, parameters %llu, gradients %llu, optimizer %llu, "
           "activations %llu, workspace %llu, peak %llu\n",
           is_dense ? "dense_stack" : is_resnet ? "seed_resnet" : "onnx", kind,
           (long long)trainable, (unsigned long long)mem.parameter_bytes,
           (unsigned long long)mem.gradient_bytes, (unsigned long long)mem.optimizer_bytes,
           (unsigned long long)mem.activation_bytes, (unsigned long long)mem.workspace_bytes,
           (unsigned long long)mem.device_peak_bytes);
    free(x);
    free(labels);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return 0;
}
