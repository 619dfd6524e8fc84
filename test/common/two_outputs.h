/* The model of two outputs test_multi_output and test_multi_output_mpi
 * train: a shared Dense trunk (relu) with a softmax head "cls" under
 * sparse cross-entropy and a linear head "reg" under mean squared error,
 * SGD; and its data, N samples of IN floats, a class id and REG targets
 * each. */
#ifndef KILN_TEST_TWO_OUTPUTS_H
#define KILN_TEST_TWO_OUTPUTS_H

#include "harness.h"

enum { N = 12, IN = 5, HID = 6, CLS = 3, REG = 2 };
static const double LR = 0.1;

typedef struct data {
    float x[N * IN];
    int32_t cls[N];
    float reg[N * REG];
} data;

static void make_data(data *d)
{
    uint32_t s = 12345;
    for (int i = 0; i < N * IN; i++) {
        s = s * 1664525u + 1013904223u;
        d->x[i] = (float)((s >> 8) % 2000) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < N; i++) {
        d->cls[i] = (int32_t)((i * 7 + 1) % CLS);
        for (int k = 0; k < REG; k++)
            d->reg[i * REG + k] = 0.3f * (float)(k + 1) * d->x[i * IN + k] - 0.2f;
    }
}

typedef struct model_spec {
    kiln_strategy strategy;
    int replicas;
    float weights[2];   /* the compile options' weights */
    int32_t has_weight[2];   /* and has_weight: 1 makes a weight of 0 exactly 0 */
    int accumulation;   /* gradient_accumulation_steps */
} model_spec;

static kiln_model *build(kiln_context *ctx, kiln_node *heads)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {IN};
    const kiln_node x = kiln_input(m, 1, dims, &(kiln_input_options){.name = "features"});
    const kiln_dense_options trunk = {.struct_size = sizeof trunk, .name = "trunk",
                                      .units = HID, .activation = KILN_ACTIVATION_RELU};
    const kiln_node h = kiln_dense(m, x, &trunk);
    const kiln_dense_options cls = {.struct_size = sizeof cls, .name = "cls", .units = CLS,
                                    .activation = KILN_ACTIVATION_SOFTMAX};
    const kiln_dense_options reg = {.struct_size = sizeof reg, .name = "reg", .units = REG};
    heads[0] = kiln_dense(m, h, &cls);
    heads[1] = kiln_dense(m, h, &reg);
    return m;
}

static kiln_model *compiled(kiln_context *ctx, const model_spec *s)
{
    kiln_node heads[2];
    kiln_model *m = build(ctx, heads);
    CHECK_OK(ctx, kiln_model_set_outputs(m, heads, 2));
    const kiln_output_loss losses[2] = {
        {.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .weight = s->weights[0],
         .has_weight = s->has_weight[0]},
        {.loss = KILN_LOSS_MEAN_SQUARED_ERROR, .weight = s->weights[1],
         .has_weight = s->has_weight[1]}};
    const kiln_optimizer_options optimizer = {.struct_size = sizeof optimizer,
                                              .kind = KILN_OPTIMIZER_SGD,
                                              .learning_rate = (float)LR};
    kiln_compile_options co = {.struct_size = sizeof co, .strategy = s->strategy,
                               .replicas = s->replicas, .n_outputs = 2, .outputs = losses,
                               .gradient_accumulation_steps = s->accumulation};
    co.optimizer = &optimizer;
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_dataset *dataset(kiln_context *ctx, const data *d, int64_t first, int64_t count)
{
    const kiln_label_array labels[2] = {
        {.label_kind = KILN_LABELS_SPARSE, .sparse_labels = d->cls + first, .num_classes = CLS},
        {.label_kind = KILN_LABELS_DENSE, .dense_labels = d->reg + first * REG,
         .label_size = REG}};
    const kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = count,
                                   .feature_rank = 1, .feature_dims = {IN},
                                   .features = d->x + first * IN, .n_outputs = 2,
                                   .outputs = labels};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    return ds;
}

#endif
