/* The tests' model of three Inputs and its data (test_multi_input,
 * test_multi_input_mpi): an item id, two user ids and SIDE floats per
 * sample, a regression target. */
#ifndef KILN_TEST_THREE_INPUTS_H
#define KILN_TEST_THREE_INPUTS_H

#include "harness.h"

#define SAMPLES 48
#define ITEMS 7      /* item ids, one per sample (the first input) */
#define USERS 13     /* user ids, two per sample (the second input) */
#define SIDE 3       /* floats per sample (the third input) */
#define PER_SAMPLE (1 + 2 + SIDE)

typedef struct data {
    int32_t items[SAMPLES], users[SAMPLES * 2];
    float side[SAMPLES * SIDE], y[SAMPLES];
} data;

static inline void make_data(data *d)
{
    uint64_t s = 11;
    for (int i = 0; i < SAMPLES; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        d->items[i] = (int32_t)((s >> 33) % ITEMS);
        d->users[2 * i] = (int32_t)((s >> 40) % USERS);
        d->users[2 * i + 1] = (int32_t)((s >> 20) % USERS);
        for (int k = 0; k < SIDE; k++)
            d->side[i * SIDE + k] = (float)(((s >> (8 * k + 3)) & 255) / 255.0 - 0.5);
        d->y[i] = 0.3f * (float)(d->items[i] % 3) - 0.1f * (float)(d->users[2 * i] % 4) +
                  d->side[i * SIDE];
    }
}

static inline kiln_dataset *dataset(kiln_context *ctx, const data *d, int32_t n_inputs)
{
    const kiln_input_array in[3] = {
        {.rank = 1, .dims = {1}, .int_features = d->items},
        {.rank = 1, .dims = {2}, .int_features = d->users},
        {.rank = 1, .dims = {SIDE}, .features = d->side}};
    const kiln_arrays_desc desc = {.struct_size = sizeof desc, .count = SAMPLES,
                                   .label_kind = KILN_LABELS_DENSE, .label_size = 1,
                                   .dense_labels = d->y, .n_inputs = n_inputs, .inputs = in};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &desc, &ds));
    return ds;
}

/* Samples [start, start + count) as the *_on_batch calls take them: each
 * Input's array in `in` (room for 3), and the targets. */
static inline kiln_batch_arrays batch_of(const data *d, int32_t start, int32_t count,
                                         kiln_input_array *in)
{
    in[0] = (kiln_input_array){.rank = 1, .dims = {1}, .int_features = d->items + start};
    in[1] = (kiln_input_array){.rank = 1, .dims = {2}, .int_features = d->users + 2 * start};
    in[2] = (kiln_input_array){.rank = 1, .dims = {SIDE}, .features = d->side + start * SIDE};
    return (kiln_batch_arrays){.struct_size = sizeof(kiln_batch_arrays), .count = count,
                               .n_inputs = 3, .inputs = in, .dense_labels = d->y + start};
}

/* All samples' Inputs, no labels, as predict takes them. */
static inline kiln_batch_arrays inputs_of(const data *d, kiln_input_array *in)
{
    kiln_batch_arrays b = batch_of(d, 0, SAMPLES, in);
    b.dense_labels = NULL;
    return b;
}

/* One sample packed as kiln_dataset_read gives it: item id, two user ids, the floats. */
static inline void pack(const data *d, float *x)
{
    for (int i = 0; i < SAMPLES; i++) {
        float *row = x + i * PER_SAMPLE;
        memcpy(row, &d->items[i], 4);
        memcpy(row + 1, &d->users[2 * i], 8);
        memcpy(row + 3, &d->side[i * SIDE], SIDE * sizeof(float));
    }
}

/* item (1) -> Embedding(7, 4) -> Flatten; users (2) -> Embedding(13, 3) ->
 * Flatten; side (3) -> Dense(4, tanh); Concatenate -> Dense(6, relu) ->
 * Dense(1). The side input is declared last, after the id towers' layers;
 * returns it. */
static inline kiln_node three_inputs(kiln_model *m)
{
    const int32_t one[] = {1}, two[] = {2}, side[] = {SIDE};
    const kiln_embedding_options ie = {.struct_size = sizeof ie, .input_dim = ITEMS,
                                       .output_dim = 4, .name = "item_embedding"};
    const kiln_embedding_options ue = {.struct_size = sizeof ue, .input_dim = USERS,
                                       .output_dim = 3, .name = "user_embedding"};
    const kiln_dense_options sd = {.struct_size = sizeof sd, .units = 4, .name = "side_dense",
                                   .activation = KILN_ACTIVATION_TANH};
    const kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 6,
                                       .name = "hidden", .activation = KILN_ACTIVATION_RELU};
    const kiln_dense_options head = {.struct_size = sizeof head, .units = 1, .name = "head"};
    kiln_node item = kiln_input_ints(m, 1, one, &(kiln_input_options){.name = "item"});
    item = kiln_flatten(m, kiln_embedding(m, item, &ie), NULL);
    kiln_node user = kiln_input_ints(m, 1, two, &(kiln_input_options){.name = "user"});
    user = kiln_flatten(m, kiln_embedding(m, user, &ue), NULL);
    const kiln_node side_in = kiln_input(m, 1, side, &(kiln_input_options){.name = "side"});
    const kiln_node s = kiln_dense(m, side_in, &sd);
    const kiln_node all[] = {item, user, s};
    kiln_concatenate(m, all, 3, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    return side_in;
}

#endif
