/* What a Dense stack holds on its device, by kiln_model_memory, trained in
 * full, with LoRA, or with a moving average of the weights (test/bench/
 * memory.sh prints the table): 784 -> Dense(1024, relu) -> Dense(1024,
 * relu) -> Dense(10, softmax), Adam, batch 128, one step on random data
 * (so that every buffer a step needs is there); `half` keeps activations
 * in half precision (activation_storage).
 * Usage: bench_memory full|half|lora RANK|ema M
 * Prints one line:
 *   dense_stack KIND: trainable T, parameters P, gradients G, optimizer O,
 *   activations A, workspace W, peak K   (bytes; T in floats) */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 128

static int fail(kiln_context *ctx, kiln_status st)
{
    fprintf(stderr, "bench_memory: %s: %s\n", kiln_status_name(st), kiln_context_last_error(ctx));
    return 1;
}

int main(int argc, char **argv)
{
    const int lora = argc == 3 && strcmp(argv[1], "lora") == 0;
    const int ema = argc == 3 && strcmp(argv[1], "ema") == 0;
    const int half = argc == 2 && strcmp(argv[1], "half") == 0;
    if (!(argc == 2 && strcmp(argv[1], "full") == 0) && !half && !lora && !ema) {
        fprintf(stderr, "usage: bench_memory full|half|lora RANK|ema M\n");
        return 2;
    }
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(NULL, &ctx);
    if (st != KILN_OK)
        return fprintf(stderr, "bench_memory: no context\n"), 1;
    kiln_model *m = NULL;
    if ((st = kiln_model_create(ctx, &m)) != KILN_OK)
        return fail(ctx, st);
    const int32_t dims[] = {784};
    kiln_input(m, 1, dims, NULL);
    const char *names[] = {"fc1", "fc2", "head"};
    for (int i = 0; i < 3; i++) {
        const kiln_dense_options d = {.struct_size = sizeof d, .name = names[i],
                                      .units = i < 2 ? 1024 : 10,
                                      .activation = i < 2 ? KILN_ACTIVATION_RELU
                                                          : KILN_ACTIVATION_SOFTMAX};
        kiln_dense(m, KILN_NODE_PREVIOUS, &d);
        if (lora && (st = kiln_model_enable_lora(m, names[i], atoi(argv[2]), 0.0f)) != KILN_OK)
            return fail(ctx, st);
    }
    const kiln_optimizer_options adam = {.struct_size = sizeof adam,
                                         .kind = KILN_OPTIMIZER_ADAM, .use_ema = ema,
                                         .ema_momentum = ema ? (float)atof(argv[2]) : 0.0f};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam,
                                     .activation_storage = half ? KILN_STORAGE_FLOAT16
                                                                : KILN_STORAGE_FLOAT32};
    if ((st = kiln_model_compile(m, &co)) != KILN_OK)
        return fail(ctx, st);
    float *x = malloc(sizeof(float) * BATCH * 784);
    int32_t labels[BATCH];
    for (int i = 0; i < BATCH * 784; i++)
        x[i] = (float)((i * 7919) % 1000) / 1000.0f;
    for (int i = 0; i < BATCH; i++)
        labels[i] = i % 10;
    const kiln_batch_arrays b = {.struct_size = sizeof b, .count = BATCH, .features = x,
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
    printf("dense_stack %s: trainable %lld, parameters %llu, gradients %llu, optimizer %llu, "
           "activations %llu, workspace %llu, peak %llu\n", argv[1], (long long)trainable,
           (unsigned long long)mem.parameter_bytes, (unsigned long long)mem.gradient_bytes,
           (unsigned long long)mem.optimizer_bytes, (unsigned long long)mem.activation_bytes,
           (unsigned long long)mem.workspace_bytes, (unsigned long long)mem.device_peak_bytes);
    free(x);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
    return 0;
}
