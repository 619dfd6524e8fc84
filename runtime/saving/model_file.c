/* Model files (kiln_model_save, kiln_model_load): the weights and the
 * model's description (model_desc.h) in one safetensors file, written by
 * checkpoint.c, and read back into a new compiled model. */
#include "runtime/saving/checkpoint.h"
#include "runtime/saving/model_desc.h"
#include "runtime/formats/safetensors.h"
#include "base/options.h"

#include <stdio.h>
#include <string.h>

kiln_status kiln_model_save(kiln_model *m, const char *path)
{
    kiln_status st = kiln_model_enter(m, "kiln_model_save");
    if (st == KILN_OK) {
        st = kiln_checkpoint_save_model(m, path, 0);
        kiln_model_leave(m);
    }
    return st;
}

kiln_status kiln_model_save_with(kiln_model *m, const char *path, const kiln_save_options *options)
{
    kiln_save_options o;
    kiln_diag why;
    kiln_status st = kiln_model_enter(m, "kiln_model_save_with");
    if (st != KILN_OK)
        return st;
    st = kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_save_options", &why);
    if (st != KILN_OK)
        st = kiln_error(m->ctx, why.status, "kiln_model_save_with: %s", why.message);
    else
        st = kiln_checkpoint_save_model(m, path, o.keep_lora_adapters != 0);
    kiln_model_leave(m);
    return st;
}

static float read_f32(const unsigned char *p)
{
    const uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Every parameter the description gives must be in the file as an F32
 * tensor of its shape, and every tensor in the file (optimizer state
 * aside) a parameter. */
static kiln_status check_tensors(const kiln_model *m, const kiln_st_file *f, const char *path)
{
    char name[160], a[64];
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].n_params; p++) {
            const kiln_param_spec *spec = &m->graph.nodes[i].params[p];
            kiln_node_param_name(&m->graph.nodes[i], p, name, sizeof name);
            kiln_shape_str(&spec->shape, a, sizeof a);
            const kiln_st_tensor *t = kiln_st_find(f, name);
            if (!t)
                return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load: %s: the model "
                                  "description has tensor '%s' %s, the file has no such "
                                  "tensor", path, name, a);
            int same = t->rank == spec->shape.rank && strcmp(t->dtype, "F32") == 0;
            for (int d = 0; same && d < t->rank; d++)
                same = t->shape[d] == (uint64_t)spec->shape.dims[d];
            if (same)
                continue;
            char b[160];
            size_t at = (size_t)snprintf(b, sizeof b, "(");
            for (int d = 0; d < t->rank && at < sizeof b; d++)
                at += (size_t)snprintf(b + at, sizeof b - at, "%s%llu", d ? ", " : "",
                                       (unsigned long long)t->shape[d]);
            if (at < sizeof b)
                snprintf(b + at, sizeof b - at, t->rank == 1 ? ",)" : ")");
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load: %s: tensor '%s' is "
                              "%s %s in the file, but the model description gives it F32 %s",
                              path, name, t->dtype, b, a);
        }
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *t = f->tensors[i].name;
        if (strncmp(t, "optimizer/", 10) == 0)
            continue;
        int known = 0;
        for (int32_t n = 0; n < m->graph.n_nodes && !known; n++)
            for (int p = 0; p < m->graph.nodes[n].n_params && !known; p++) {
                kiln_node_param_name(&m->graph.nodes[n], p, name, sizeof name);
                known = strcmp(name, t) == 0;
            }
        if (!known)
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "kiln_model_load: %s: tensor '%.80s' "
                              "is in the file but not in the model description", path, t);
    }
    return KILN_OK;
}

/* The file's tensors in kiln_model_set_weights order. */
static kiln_status set_weights(kiln_model *m, const kiln_st_file *f)
{
    int64_t count = 0;
    kiln_status st = kiln_model_parameter_count(m, &count);
    float *packed = st == KILN_OK ? kiln_alloc(m->ctx, (size_t)(count ? count : 1) * 4) : NULL;
    if (st == KILN_OK && !packed)
        return kiln_error_oom(m->ctx, "the weights", (size_t)count * 4);
    int64_t at = 0;
    for (int32_t i = 0; st == KILN_OK && i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].n_params; p++) {
            char name[160];
            kiln_node_param_name(&m->graph.nodes[i], p, name, sizeof name);
            const kiln_st_tensor *t = kiln_st_find(f, name);
            const unsigned char *src = kiln_st_data(f, t);
            const int64_t n = kiln_shape_size(&m->graph.nodes[i].params[p].shape);
            for (int64_t j = 0; j < n; j++)
                packed[at + j] = read_f32(src + 4 * j);
            at += n;
        }
    if (st == KILN_OK)
        st = kiln_model_set_weights(m, packed, count);
    kiln_free(m->ctx, packed);
    return st;
}

/* The caller's options with the file's training settings. Placements are
 * kept unless the caller chose a strategy that ignores them. */
static kiln_status compile_options(kiln_context *ctx, const kiln_compile_options *given,
                                   const kiln_model_desc *d, kiln_compile_options *o,
                                   int *place)
{
    kiln_diag why;
    if (kiln_options_take(o, sizeof *o, given, sizeof(size_t), "kiln_compile_options",
                          &why) != KILN_OK)
        return kiln_error(ctx, why.status, "kiln_model_load: %s", why.message);
    o->struct_size = sizeof *o;
    *place = o->strategy == KILN_STRATEGY_AUTO || o->strategy == KILN_STRATEGY_PIPELINE;
    if (d->has_compile) {
        o->loss = d->n_losses ? KILN_LOSS_NONE : d->loss;
        o->n_outputs = d->n_losses;
        o->outputs = d->n_losses ? d->losses : NULL;   /* d outlives the compile */
        o->optimizer = &d->optimizer;
        o->no_accuracy = d->no_accuracy;
        o->top_k = d->top_k;
        o->mean_absolute_error = d->mean_absolute_error;
        o->binary_accuracy = d->binary_accuracy;
        o->has_binary_threshold = 1;   /* the file holds the threshold in use */
        o->binary_threshold = d->binary_threshold;
        o->has_ignore_class = d->has_ignore_class;
        o->ignore_class = d->ignore_class;
        o->label_smoothing = d->label_smoothing;
        o->gradient_accumulation_steps = d->gradient_accumulation_steps;
    }
    return KILN_OK;
}

kiln_status kiln_model_load(kiln_context *ctx, const char *path,
                            const kiln_compile_options *options, kiln_model **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out || !path || !path[0])
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_load: %s",
                          !out ? "out is NULL" : !path ? "path is NULL" : "path is empty");
    kiln_st_file f;
    kiln_model_desc d;
    kiln_model *m = NULL;
    kiln_compile_options o;
    int place = 1;
    memset(&d, 0, sizeof d);
    kiln_status st = kiln_st_read(ctx, path, &f);
    if (st != KILN_OK)
        return st;
    const char *text = kiln_st_meta(&f, KILN_MODEL_META_KEY);
    if (!text)
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "kiln_model_load: %s holds weights without a "
                        "model description ('%s' in __metadata__), as kiln_model_save_weights "
                        "writes them: build the model in code and call kiln_model_load_weights",
                        path, KILN_MODEL_META_KEY);
    if (st == KILN_OK)
        st = kiln_model_desc_parse(ctx, path, text, strlen(text), &d);
    if (st == KILN_OK)
        st = compile_options(ctx, options, &d, &o, &place);
    if (st == KILN_OK)
        st = kiln_model_create(ctx, &m);
    if (st == KILN_OK)
        st = kiln_model_desc_build(&d, path, place, m);
    if (st == KILN_OK)
        st = check_tensors(m, &f, path);
    if (st == KILN_OK)
        st = kiln_model_compile(m, &o);
    if (st == KILN_OK)
        st = set_weights(m, &f);
    if (st == KILN_OK) {
        *out = m;
        m = NULL;
    }
    kiln_model_destroy(m);   /* nothing half-made is left */
    kiln_model_desc_free(&d);
    kiln_st_free(&f);
    return st;
}
