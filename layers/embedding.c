/* Embedding (Keras Embedding): int32 ids (batch, ...) look up rows of an
 * (input_dim, output_dim) table, giving (batch, ..., output_dim).
 *
 * The table's gradient is a scatter-add over the batch's ids. Float
 * atomics would make it depend on the order work-items ran, so backward
 * links each id slot to the next slot holding the same id, and one
 * work-item per (first slot of an id, column) sums that chain in slot
 * order: the same sum on every device and every run. The CPU variant finds
 * each slot's neighbours by scanning; the GPU variant sorts the (id, slot)
 * pairs and links neighbours in sorted order, which gives the same links.
 * Ids are checked on the host (kiln_layer_ops.id_limit); the kernels only
 * guard their reads. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"
#include "layers/onnx_import.h"

#include <stdio.h>
#include <stddef.h>

/* The GPU variant's sort: work-items per group and pairs per block
 * (SORT_ITEMS and SORT_BLOCK in sort.cl). */
#define SORT_ITEMS 256
#define SORT_BLOCK (2 * SORT_ITEMS)

typedef struct embedding_config {
    int32_t input_dim, output_dim;
    int64_t positions;       /* inferred: ids per sample */
} embedding_config;

typedef struct embedding_replica {
    kiln_buffer *links;      /* per id slot: the next slot with its id, then "first" flags */
    kiln_buffer *keys;       /* GPU variant: the (id, slot) pairs being sorted */
    struct {
        kiln_kernel *forward, *links, *grad;
        kiln_kernel *sort_blocks, *sort_step, *sort_merge;   /* GPU variant */
    } kernels;
    int sorted;   /* links through the sort (GPU variant) */
} embedding_replica;

static kiln_status embedding_infer(void *config, kiln_layer_build *b)
{
    embedding_config *c = config;
    const kiln_shape *in = &b->in[0];
    if (c->input_dim <= 0 || c->output_dim <= 0) {
        snprintf(b->error, sizeof b->error, "input_dim (%d) and output_dim (%d) must be > 0",
                 (int)c->input_dim, (int)c->output_dim);
        return KILN_ERROR_INVALID_ARGUMENT;
    }
    if (in->rank >= KILN_MAX_RANK) {
        char s[64];
        snprintf(b->error, sizeof b->error, "ids of shape %s would give an output of rank %d; "
                 "kiln supports samples of rank up to %d", kiln_shape_str(in, s, sizeof s),
                 (int)in->rank + 1, KILN_MAX_RANK);
        return KILN_ERROR_SHAPE;
    }
    c->positions = kiln_shape_size(in);
    b->out = *in;
    b->out.dims[b->out.rank++] = c->output_dim;
    kiln_param_spec *t = &b->params[b->n_params++];
    t->name = "embeddings";
    t->shape.rank = 2;
    t->shape.dims[0] = c->input_dim;
    t->shape.dims[1] = c->output_dim;
    t->init = KILN_INIT_UNIFORM;   /* Keras's RandomUniform(-0.05, 0.05) */
    t->init_limit = 0.05f;
    t->fan_in = c->input_dim;
    t->fan_out = c->output_dim;
    return KILN_OK;
}

/* Pairs the sort takes for `slots` ids: a power of two, a block at least. */
static size_t sort_size(size_t slots)
{
    size_t padded = SORT_BLOCK;
    while (padded < slots)
        padded *= 2;
    return padded;
}

static kiln_status embedding_kernels(const void *config, void *replica, kiln_device *dev)
{
    (void)config;
    embedding_replica *r = replica;
    r->sorted = kiln_device_gpu_kernels(dev);
    kiln_status st = kiln_kernel_get(dev, "embedding", "kiln_embedding_forward",
                                     &r->kernels.forward);
    if (st == KILN_OK)   /* from the ids (_cpu) or from the sorted pairs (_gpu) */
        st = kiln_kernel_get_variant(dev, "embedding", "kiln_embedding_links", &r->kernels.links);
    if (st == KILN_OK && r->sorted)
        st = kiln_kernel_get(dev, "sort", "kiln_sort_blocks", &r->kernels.sort_blocks);
    if (st == KILN_OK && r->sorted)
        st = kiln_kernel_get(dev, "sort", "kiln_sort_step", &r->kernels.sort_step);
    if (st == KILN_OK && r->sorted)
        st = kiln_kernel_get(dev, "sort", "kiln_sort_merge", &r->kernels.sort_merge);
    if (st == KILN_OK)
        st = kiln_kernel_get(dev, "embedding", "kiln_embedding_grad", &r->kernels.grad);
    return st;
}

static kiln_status embedding_prepare(const void *config, void *replica, kiln_device *dev,
                                     const kiln_shape *in_shape, int32_t max_batch)
{
    const embedding_config *c = config;
    embedding_replica *r = replica;
    (void)in_shape;
    const size_t slots = (size_t)max_batch * (size_t)c->positions;
    kiln_status st = kiln_buffer_create(dev, 2 * slots * sizeof(int32_t),
                                        "an embedding's id links", &r->links);
    if (st == KILN_OK && r->sorted)
        st = kiln_buffer_create(dev, 2 * sort_size(slots) * sizeof(int32_t),
                                "an embedding's sorted ids", &r->keys);
    return st;
}

static void embedding_release(void *replica)
{
    embedding_replica *r = replica;
    kiln_buffer_destroy(r->links);
    kiln_buffer_destroy(r->keys);
    r->links = r->keys = NULL;
}

static kiln_status embedding_forward(const void *config, void *replica, const kiln_step *s)
{
    const embedding_config *c = config;
    embedding_replica *r = replica;
    const size_t slots = (size_t)s->batch * (size_t)c->positions;
    kiln_args a = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_int((int64_t)slots),
                            kiln_arg_int(c->input_dim), kiln_arg_int(c->output_dim),
                            kiln_arg_buffer(s->params), kiln_arg_int((int64_t)s->param_offset[0]),
                            kiln_arg_buffer(s->out));
    const size_t range[2] = {(size_t)c->output_dim, slots};
    kiln_status st = kiln_kernel_run(s->dev, r->kernels.forward, 2, range, a);
    if (st == KILN_OK)
        st = kiln_step_activate(s, s->out);
    return st;
}

/* The bitonic sort of the (id, slot) pairs into r->keys: blocks sorted in
 * local memory, then each later stage's strides of a block or more as
 * global passes and the rest block by block. */
static kiln_status sort_ids(const embedding_replica *r, const kiln_step *s, size_t slots)
{
    const size_t padded = sort_size(slots), half = padded / 2, local = SORT_ITEMS;
    kiln_args b = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_int((int64_t)slots),
                            kiln_arg_int((int64_t)padded), kiln_arg_buffer(r->keys));
    kiln_status st = kiln_kernel_run_groups(s->dev, r->kernels.sort_blocks, 1, &half, &local, b);
    for (size_t k = 2 * SORT_BLOCK; st == KILN_OK && k <= padded; k *= 2) {
        for (size_t j = k / 2; st == KILN_OK && j >= SORT_BLOCK; j /= 2) {
            kiln_args g = KILN_ARGS(kiln_arg_buffer(r->keys), kiln_arg_int((int64_t)padded),
                                    kiln_arg_int((int64_t)k), kiln_arg_int((int64_t)j));
            st = kiln_kernel_run1(s->dev, r->kernels.sort_step, half, g);
        }
        kiln_args m = KILN_ARGS(kiln_arg_buffer(r->keys), kiln_arg_int((int64_t)padded),
                                kiln_arg_int((int64_t)k));
        if (st == KILN_OK)
            st = kiln_kernel_run_groups(s->dev, r->kernels.sort_merge, 1, &half, &local, m);
    }
    return st;
}

static kiln_status embedding_backward(const void *config, void *replica, const kiln_step *s)
{
    const embedding_config *c = config;
    embedding_replica *r = replica;
    if (s->frozen)   /* its gradient goes unused; ids have none */
        return KILN_OK;
    const size_t slots = (size_t)s->batch * (size_t)c->positions;
    const size_t table = (size_t)c->input_dim * (size_t)c->output_dim;
    kiln_status st = r->sorted ? sort_ids(r, s, slots) : KILN_OK;
    kiln_args l = KILN_ARGS(kiln_arg_buffer(r->sorted ? r->keys : s->in[0]),
                            kiln_arg_int((int64_t)slots), kiln_arg_buffer(r->links));
    if (st == KILN_OK)
        st = kiln_kernel_run1(s->dev, r->kernels.links, slots, l);
    /* Rows no id touched get 0; the others are written whole below. */
    if (st == KILN_OK)
        st = kiln_buffer_zero(s->dev, s->grads, s->param_offset[0] * sizeof(float),
                              table * sizeof(float));
    kiln_args g = KILN_ARGS(kiln_arg_buffer(s->in[0]), kiln_arg_buffer(s->d_out),
                            kiln_arg_int((int64_t)slots), kiln_arg_int(c->input_dim),
                            kiln_arg_int(c->output_dim), kiln_arg_buffer(r->links),
                            kiln_arg_buffer(s->grads), kiln_arg_int((int64_t)s->param_offset[0]));
    const size_t range[2] = {(size_t)c->output_dim, slots};
    if (st == KILN_OK)
        st = kiln_kernel_run(s->dev, r->kernels.grad, 2, range, g);
    return st;
}

static uint64_t embedding_flops(const void *config, const kiln_shape *in_shape)
{
    const embedding_config *c = config;
    (void)in_shape;
    return (uint64_t)c->positions * (uint64_t)c->output_dim;
}

static int32_t embedding_id_limit(const void *config)
{
    return ((const embedding_config *)config)->input_dim;
}

/* args: the kiln_embedding_options the builder copied. */
static void embedding_configure(void *config, const void *args)
{
    const kiln_embedding_options *o = args;
    *(embedding_config *)config = (embedding_config){.input_dim = o->input_dim,
                                                     .output_dim = o->output_dim};
}

static void embedding_describe(const void *config, void *args)
{
    const embedding_config *c = config;
    kiln_embedding_options *o = args;
    o->input_dim = c->input_dim;
    o->output_dim = c->output_dim;
}

static const kiln_layer_field embedding_fields[] = {
    {.key = "input_dim", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_embedding_options, input_dim)},
    {.key = "output_dim", .type = KILN_FIELD_INT,
     .offset = offsetof(kiln_embedding_options, output_dim)},
};

/* Gather's rows of the table by the int32 ids (the graph's input). */
static void embedding_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    const char *args[2] = {kiln_onnx_param_initializer(g, i, "embeddings"),
                           kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL)};
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Gather", args, 2, out), "axis", 0);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

/* ONNX Gather of a 2-D float initializer (the table) by the graph's ids
 * on axis 0, as the importer hands it: the ids first, the table second.
 * ONNX lets an index count from the end (-1 the last row); kiln's ids are
 * in [0, rows), and one outside stops the run with KILN_ERROR_DATA. */
static kiln_status embedding_import_onnx(kiln_onnx_import *imp)
{
    const kiln_status st = kiln_onnx_check_attrs(imp, "axis:i");
    if (st != KILN_OK)
        return st;
    const int64_t axis = kiln_onnx_attr_i(imp, "axis", 0);
    if (axis != 0)
        return kiln_onnx_refuse(imp, "attribute 'axis' is %lld; kiln looks up rows of a table "
                                "(axis 0)", (long long)axis);
    const kiln_onnx_in *table = &imp->in[1];
    if (imp->n_in != 2 || !table->data || table->rank != 2 || table->dims[0] < 1 ||
        table->dims[1] < 1 || table->dims[0] > INT32_MAX || table->dims[1] > INT32_MAX)
        return kiln_onnx_refuse(imp, "its table '%s' is not a 2-D float initializer of "
                                "1..2^31-1 rows and columns", table->name);
    kiln_embedding_options *o = (kiln_embedding_options *)(void *)imp->args.bytes;
    *o = (kiln_embedding_options){.struct_size = sizeof *o, .input_dim = (int32_t)table->dims[0],
                                  .output_dim = (int32_t)table->dims[1]};
    imp->want = KILN_ONNX_WANT_ONNX;
    imp->n_data = 1;
    imp->param_input[0] = 1;
    imp->param_layout[0] = KILN_ONNX_PARAM_AS_IS;
    imp->n_params = 1;
    return KILN_OK;
}

const kiln_layer_ops kiln_layer_embedding = {
    .kind = "embedding", .config_size = sizeof(embedding_config),
    .replica_size = sizeof(embedding_replica), .min_inputs = 1, .max_inputs = 1,
    .configure = embedding_configure, .describe = embedding_describe,
    .infer = embedding_infer, .kernels = embedding_kernels, .prepare = embedding_prepare,
    .forward = embedding_forward, .backward = embedding_backward,
    .release = embedding_release, .flops = embedding_flops, .id_limit = embedding_id_limit,
    .args_size = sizeof(kiln_embedding_options), KILN_FIELDS(embedding_fields),
    .export_onnx = embedding_export_onnx, .import_onnx = embedding_import_onnx,
    .writes_trainable_gradients_only = 1,
};
