/* A model's description (model_desc.h): written from the node graph, read
 * back without a device, rebuilt through kiln_model_add_layer as the public
 * builders do. Each layer kind's options are the fields its ops table
 * lists (layers/layer.h); no kind is named here. */
#include "runtime/saving/model_desc.h"

#include "runtime/formats/json_writer.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Names of the enumerations, indexed by value. */
static const char *const activation_names[] = {"linear", "relu", "sigmoid", "tanh", "softmax",
                                               "gelu", "gelu_tanh", "leaky_relu", "silu",
                                               "relu6", "log_softmax", "hard_sigmoid",
                                               "hard_silu"};
static const char *const padding_names[] = {"valid", "same", "explicit"};
static const char *const dtype_names[] = {"float32", "int32"};
static const char *const loss_names[] = {"none", "sparse_categorical_crossentropy",
                                         "categorical_crossentropy", "binary_crossentropy",
                                         "mean_squared_error"};
static const char *const optimizer_names[] = {"adam", "sgd", "adamw", "rmsprop", "adagrad"};
static const char *const schedule_names[] = {"constant", "step_decay", "exponential_decay",
                                             "cosine_decay", "piecewise_constant_decay"};
#define COUNT(a) ((int)(sizeof a / sizeof a[0]))

static const char *name_of(const char *const *names, int n, int value)
{
    return value >= 0 && value < n ? names[value] : "unknown";
}

/* ---- writing ------------------------------------------------------------- */

/* Each field of the struct at `base` under its key, in the table's order. */
/* The bytes an optional field takes (the int32 types optional fields have). */
static size_t optional_size(kiln_field_type type)
{
    return type == KILN_FIELD_QUAD ? 4 * sizeof(int32_t)
           : type == KILN_FIELD_PAIR ? 2 * sizeof(int32_t) : sizeof(int32_t);
}

static int all_zero(const unsigned char *at, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (at[k])
            return 0;
    return 1;
}

static void write_fields(kiln_jw *w, const kiln_layer_field *fields, int n, const void *base)
{
    for (int f = 0; f < n; f++) {
        const kiln_layer_field *fd = &fields[f];
        const unsigned char *at = (const unsigned char *)base + fd->offset;
        int32_t i32[4];
        memcpy(i32, at, sizeof(int32_t));
        if (fd->type == KILN_FIELD_DTYPE && !i32[0])
            continue;
        if (fd->optional && all_zero(at, optional_size(fd->type)))
            continue;
        kiln_jw_key(w, fd->key);
        switch (fd->type) {
        case KILN_FIELD_INT:
            kiln_jw_int(w, i32[0]);
            break;
        case KILN_FIELD_PAIR:
        case KILN_FIELD_QUAD:
            memcpy(i32, at, fd->type == KILN_FIELD_QUAD ? 4 * sizeof(int32_t)
                                                         : 2 * sizeof(int32_t));
            kiln_jw_begin_array(w);
            for (int k = 0; k < (fd->type == KILN_FIELD_QUAD ? 4 : 2); k++)
                kiln_jw_int(w, i32[k]);
            kiln_jw_end_array(w);
            break;
        case KILN_FIELD_FLOAT: {
            float v;
            memcpy(&v, at, sizeof v);
            kiln_jw_float(w, v);
            break;
        }
        case KILN_FIELD_BOOL:
        case KILN_FIELD_NOT_BOOL:
            kiln_jw_bool(w, (i32[0] != 0) != (fd->type == KILN_FIELD_NOT_BOOL));
            break;
        case KILN_FIELD_PADDING: {
            kiln_padding p;
            memcpy(&p, at, sizeof p);
            kiln_jw_string(w, name_of(padding_names, COUNT(padding_names), (int)p));
            break;
        }
        case KILN_FIELD_SEED: {
            uint64_t v;
            memcpy(&v, at, sizeof v);
            kiln_jw_uint(w, v);
            break;
        }
        case KILN_FIELD_COUNT: {
            int64_t v;
            memcpy(&v, at, sizeof v);
            kiln_jw_int(w, v);
            break;
        }
        case KILN_FIELD_DTYPE:
            kiln_jw_string(w, dtype_names[1]);
            break;
        case KILN_FIELD_NAME:
            kiln_jw_string(w, name_of(fd->names, fd->n_names, i32[0]));
            break;
        case KILN_FIELD_SHAPE: {
            kiln_input_args shape;
            memcpy(&shape, at, sizeof shape);
            kiln_jw_begin_array(w);
            for (int32_t d = 0; d < shape.rank && shape.dims; d++)
                kiln_jw_int(w, shape.dims[d]);
            kiln_jw_end_array(w);
            break;
        }
        }
    }
}

/* The options the builder was given, as describe gives them back. */
static void write_options(kiln_jw *w, const kiln_node_rec *node)
{
    kiln_layer_args args;
    memset(&args, 0, sizeof args);
    if (node->ops->describe)
        node->ops->describe(node->config, &args);
    kiln_jw_begin_object(w);
    write_fields(w, node->ops->fields, node->ops->n_fields, &args);
    kiln_jw_end_object(w);
}

/* The optimizer's and its schedule's settings besides their kinds, in the
 * order files hold them: a new setting is a row here. */
static const kiln_layer_field optimizer_fields[] = {
    {.key = "learning_rate", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_optimizer_options, learning_rate)},
    {.key = "momentum", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_optimizer_options, momentum)},
    {.key = "nesterov", .type = KILN_FIELD_BOOL,
     .offset = offsetof(kiln_optimizer_options, nesterov)},
    {.key = "beta_1", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_optimizer_options, beta_1)},
    {.key = "beta_2", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_optimizer_options, beta_2)},
    {.key = "epsilon", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_optimizer_options, epsilon)},
    /* Clipping: written when set, 0 (off) when absent. */
    {.key = "clipnorm", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_optimizer_options, clipnorm), .optional = 1},
    {.key = "clipvalue", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_optimizer_options, clipvalue), .optional = 1},
    {.key = "global_clipnorm", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_optimizer_options, global_clipnorm), .optional = 1},
    /* Optional: written where they are not zero, so files of the optimizers
     * and settings before them stay as they were. */
    {.key = "weight_decay", .type = KILN_FIELD_FLOAT, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, weight_decay)},
    {.key = "exclude_vectors_from_weight_decay", .type = KILN_FIELD_BOOL, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, exclude_vectors_from_weight_decay)},
    {.key = "rho", .type = KILN_FIELD_FLOAT, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, rho)},
    {.key = "centered", .type = KILN_FIELD_BOOL, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, centered)},
    {.key = "initial_accumulator_value", .type = KILN_FIELD_FLOAT, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, initial_accumulator_value)},
    {.key = "use_ema", .type = KILN_FIELD_BOOL, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, use_ema)},
    {.key = "ema_momentum", .type = KILN_FIELD_FLOAT, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, ema_momentum)},
    {.key = "ema_overwrite_frequency", .type = KILN_FIELD_INT, .optional = 1,
     .offset = offsetof(kiln_optimizer_options, ema_overwrite_frequency)},
};
static const kiln_layer_field schedule_fields[] = {
    {.key = "decay_steps", .type = KILN_FIELD_COUNT,
     .offset = offsetof(kiln_lr_schedule, decay_steps)},
    {.key = "decay_rate", .type = KILN_FIELD_FLOAT,
     .offset = offsetof(kiln_lr_schedule, decay_rate)},
    {.key = "alpha", .type = KILN_FIELD_FLOAT, .offset = offsetof(kiln_lr_schedule, alpha)},
    {.key = "warmup_steps", .type = KILN_FIELD_COUNT,
     .offset = offsetof(kiln_lr_schedule, warmup_steps)},
};

/* The schedule's settings written only where they apply (older files
 * have none): Keras CosineDecay's warmup_target, PiecewiseConstantDecay's
 * boundaries and values. */
static void write_schedule_extras(kiln_jw *w, const kiln_lr_schedule *s)
{
    if (s->has_warmup_target) {
        kiln_jw_key(w, "warmup_target");
        kiln_jw_float(w, s->warmup_target);
    }
    if (s->kind != KILN_LR_PIECEWISE_CONSTANT_DECAY)
        return;
    kiln_jw_key(w, "boundaries");
    kiln_jw_begin_array(w);
    for (int32_t i = 0; i < s->n_boundaries; i++)
        kiln_jw_int(w, s->boundaries[i]);
    kiln_jw_end_array(w);
    kiln_jw_key(w, "values");
    kiln_jw_begin_array(w);
    for (int32_t i = 0; i < s->n_values; i++)
        kiln_jw_float(w, s->values[i]);
    kiln_jw_end_array(w);
}

static void write_compile(kiln_jw *w, const kiln_model *m)
{
    const kiln_optimizer_options *o = &m->plan.optimizer;
    const kiln_lr_schedule *s = &m->plan.lr_schedule;
    /* The first output's loss, ignore class and metrics are the model's
     * (several outputs have no ignore class or metrics). */
    const kiln_loss_plan *first = &m->plan.heads[0];
    kiln_jw_key(w, "compile");
    kiln_jw_begin_object(w);
    kiln_jw_key(w, "loss");
    kiln_jw_string(w, name_of(loss_names, COUNT(loss_names), (int)first->loss));
    /* compile's no_accuracy left every cross-entropy output its accuracy,
     * or none. */
    int accuracy = 0;
    for (int32_t k = 0; k < m->graph.n_outputs; k++)
        accuracy |= m->plan.heads[k].accuracy;
    kiln_jw_key(w, "accuracy");
    kiln_jw_bool(w, accuracy);
    kiln_jw_key(w, "gradient_accumulation_steps");
    kiln_jw_int(w, m->plan.accumulation_steps);
    /* Keras's SparseCategoricalCrossentropy config: null when none. */
    kiln_jw_key(w, "ignore_class");
    if (first->has_ignore)
        kiln_jw_int(w, first->ignore);
    else
        kiln_jw_null(w);
    /* Written only when set (older files have none). */
    if (!kiln_model_outputs_apart(m) && first->label_smoothing != 0.0f) {
        kiln_jw_key(w, "label_smoothing");
        kiln_jw_float(w, first->label_smoothing);
    }
    if (kiln_model_outputs_apart(m)) {   /* written for several outputs only (version 1) */
        kiln_jw_key(w, "losses");
        kiln_jw_begin_array(w);
        for (int32_t k = 0; k < m->graph.n_outputs; k++) {
            kiln_jw_begin_object(w);
            kiln_jw_key(w, "loss");
            kiln_jw_string(w, name_of(loss_names, COUNT(loss_names), (int)m->plan.heads[k].loss));
            /* The weight in use; 0 as -0, which kiln 0.1 (where 0 meant
             * the default 1) reads as 0 too. */
            kiln_jw_key(w, "weight");
            kiln_jw_float(w, m->plan.head_weight[k] == 0.0f ? -0.0f : m->plan.head_weight[k]);
            if (m->plan.heads[k].label_smoothing != 0.0f) {
                kiln_jw_key(w, "label_smoothing");
                kiln_jw_float(w, m->plan.heads[k].label_smoothing);
            }
            kiln_jw_end_object(w);
        }
        kiln_jw_end_array(w);
    }
    kiln_jw_key(w, "metrics");
    kiln_jw_begin_object(w);
    kiln_jw_key(w, "top_k");
    kiln_jw_int(w, first->top_k);
    kiln_jw_key(w, "mean_absolute_error");
    kiln_jw_bool(w, first->mean_abs_error);
    kiln_jw_key(w, "binary_accuracy");
    kiln_jw_bool(w, first->binary_accuracy);
    /* The threshold in use; 0 as -0, which kiln 0.1 (where 0 meant the
     * default 0.5) reads as 0 too. */
    kiln_jw_key(w, "binary_threshold");
    kiln_jw_float(w, first->threshold == 0.0f ? -0.0f : first->threshold);
    kiln_jw_end_object(w);
    kiln_jw_key(w, "optimizer");
    kiln_jw_begin_object(w);
    kiln_jw_key(w, "kind");
    kiln_jw_string(w, name_of(optimizer_names, COUNT(optimizer_names), (int)o->kind));
    write_fields(w, optimizer_fields, COUNT(optimizer_fields), o);
    kiln_jw_key(w, "schedule");
    kiln_jw_begin_object(w);
    kiln_jw_key(w, "kind");
    kiln_jw_string(w, name_of(schedule_names, COUNT(schedule_names), (int)s->kind));
    write_fields(w, schedule_fields, COUNT(schedule_fields), s);
    write_schedule_extras(w, s);
    kiln_jw_end_object(w);
    kiln_jw_end_object(w);
    kiln_jw_end_object(w);
}

kiln_status kiln_model_describe(const kiln_model *m, const char *call, int adapters,
                                char **text, size_t *length)
{
    *text = NULL;
    *length = 0;
    for (int32_t i = 0; i < m->graph.n_nodes; i++)
        if (kiln_layer_kind_named(m->graph.nodes[i].ops->kind) != m->graph.nodes[i].ops)
            return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED, "%s: layer '%s' is of kind '%s', "
                              "which model files cannot describe", call, m->graph.nodes[i].name,
                              m->graph.nodes[i].ops->kind);
    kiln_jw w;
    kiln_jw_init(&w, m->ctx);
    char writer[64];
    snprintf(writer, sizeof writer, "kiln %s", kiln_version());
    kiln_jw_begin_object(&w);
    kiln_jw_key(&w, "format");
    kiln_jw_string(&w, "kiln.model");
    kiln_jw_key(&w, "version");
    kiln_jw_int(&w, KILN_MODEL_DESC_VERSION);
    kiln_jw_key(&w, "writer");
    kiln_jw_string(&w, writer);
    kiln_jw_key(&w, "layers");
    kiln_jw_begin_array(&w);
    for (int32_t i = 0; i < m->graph.n_nodes; i++) {
        const kiln_node_rec *node = &m->graph.nodes[i];
        kiln_jw_begin_object(&w);
        kiln_jw_key(&w, "name");
        kiln_jw_string(&w, node->name);
        kiln_jw_key(&w, "kind");
        kiln_jw_string(&w, node->ops->kind);
        kiln_jw_key(&w, "inputs");
        kiln_jw_begin_array(&w);
        for (int k = 0; k < node->n_inputs; k++)
            kiln_jw_string(&w, m->graph.nodes[node->inputs[k]].name);
        kiln_jw_end_array(&w);
        kiln_jw_key(&w, "activation");
        kiln_jw_string(&w, name_of(activation_names, COUNT(activation_names),
                                   (int)node->activation));
        kiln_jw_key(&w, "device");
        if (node->device >= 0)
            kiln_jw_int(&w, node->device);
        else
            kiln_jw_null(&w);
        kiln_jw_key(&w, "trainable");
        kiln_jw_bool(&w, !node->frozen);
        kiln_jw_key(&w, "options");
        write_options(&w, node);
        if (adapters && node->lora_rank > 0) {
            kiln_jw_key(&w, "lora");
            kiln_jw_begin_object(&w);
            kiln_jw_key(&w, "rank");
            kiln_jw_int(&w, node->lora_rank);
            kiln_jw_key(&w, "alpha");
            kiln_jw_float(&w, node->lora_alpha);
            if (node->lora_targets[0]) {   /* chosen; absent: the kind's default */
                kiln_jw_key(&w, "targets");
                kiln_jw_string(&w, node->lora_targets);
            }
            kiln_jw_end_object(&w);
        }
        /* Merged, the adapters are gone: a plain layer's parameters. */
        int own = 0, n_params = 0;
        for (int p = 0; p < node->n_params; p++)
            if (adapters || !node->params[p].adapter) {
                own |= node->param_name[p] != NULL;
                n_params = p + 1;
            }
        if (own) {   /* an imported model's parameter names; others keep the default */
            kiln_jw_key(&w, "weights");
            kiln_jw_begin_array(&w);
            for (int p = 0; p < n_params; p++) {
                char name[160];
                kiln_jw_string(&w, kiln_node_param_name(node, p, name, sizeof name));
            }
            kiln_jw_end_array(&w);
        }
        int transposed = 0;
        for (int p = 0; p < n_params; p++)
            transposed |= node->param_transposed[p];
        if (transposed) {   /* written back to ONNX as the file held them */
            kiln_jw_key(&w, "transposed_weights");
            kiln_jw_begin_array(&w);
            for (int p = 0; p < n_params; p++)
                kiln_jw_bool(&w, node->param_transposed[p]);
            kiln_jw_end_array(&w);
        }
        kiln_jw_end_object(&w);
    }
    kiln_jw_end_array(&w);
    kiln_jw_key(&w, "output");
    kiln_jw_string(&w, m->graph.nodes[m->graph.output >= 0 ? m->graph.output : m->graph.n_nodes - 1].name);
    if (kiln_model_outputs_apart(m)) {   /* written for several outputs only (version 1) */
        kiln_jw_key(&w, "outputs");
        kiln_jw_begin_array(&w);
        for (int32_t k = 0; k < m->graph.n_outputs; k++)
            kiln_jw_string(&w, m->graph.nodes[m->graph.outputs[k]].name);
        kiln_jw_end_array(&w);
    }
    if (m->plan.compiled)
        write_compile(&w, m);
    kiln_jw_end_object(&w);
    const kiln_status st = kiln_jw_finish(&w, text, length);
    if (st == KILN_ERROR_INVALID_ARGUMENT)
        return kiln_error(m->ctx, st, "%s: the model cannot be described: %s", call, w.why);
    return st;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct reader {
    kiln_context *ctx;
    const char *what;
    char where[160];   /* "layer 3 ('dense_1'): " */
} reader;

static kiln_status malformed(reader *r, const char *fmt, ...) KILN_PRINTF(2, 3);

static kiln_status malformed(reader *r, const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return kiln_error(r->ctx, KILN_ERROR_FORMAT, "%s: malformed model description: %s%s",
                      r->what, r->where, why);
}

static const char *type_name(kiln_json_type t)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string",
                                        "an array", "an object"};
    return names[t];
}

/* Member `key` of object o, of type `type`. */
static kiln_status member(reader *r, const kiln_json *o, const char *key, kiln_json_type type,
                          const kiln_json **out)
{
    const kiln_json *v = kiln_json_get(o, key);
    *out = v;
    if (!v)
        return malformed(r, "'%s' is missing", key);
    if (v->type != type)
        return malformed(r, "'%s' must be %s, not %s", key, type_name(type), type_name(v->type));
    return KILN_OK;
}

/* Every key of o must be one of `keys`. */
static kiln_status only_keys(reader *r, const kiln_json *o, const char *const *keys, int n)
{
    for (size_t i = 0; i < o->count; i++) {
        int known = 0;
        for (int k = 0; k < n && !known; k++)
            known = strcmp(o->keys[i], keys[k]) == 0;
        if (!known)
            return malformed(r, "unknown key '%.60s'", o->keys[i]);
    }
    return KILN_OK;
}

/* o holds only the keys of the fields and of `also` (the kinds, a nested
 * object); `what` says whose fields they are, for the message. */
static kiln_status only_fields(reader *r, const kiln_json *o, const kiln_layer_field *fields,
                               int n, const char *const *also, int n_also, const char *what)
{
    for (size_t i = 0; i < o->count; i++) {
        int known = 0;
        for (int f = 0; f < n && !known; f++)
            known = strcmp(o->keys[i], fields[f].key) == 0;
        for (int k = 0; k < n_also && !known; k++)
            known = strcmp(o->keys[i], also[k]) == 0;
        if (!known)
            return malformed(r, "%s have no option '%.60s'", what, o->keys[i]);
    }
    return KILN_OK;
}

/* An integer in [lo, hi]: digits with an optional '-', nothing else. */
static int integer(const kiln_json *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!v || v->type != KILN_JSON_NUMBER)
        return 0;
    const char *p = v->text;
    const int negative = *p == '-';
    p += negative;
    if (!*p)
        return 0;
    uint64_t n = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
            return 0;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    if (negative ? n > (uint64_t)INT64_MAX + 1 : n > (uint64_t)INT64_MAX)
        return 0;
    const int64_t value = negative ? (int64_t)(0 - n) : (int64_t)n;
    if (value < lo || value > hi)
        return 0;
    *out = value;
    return 1;
}

static kiln_status get_int(reader *r, const kiln_json *o, const char *key, int64_t lo,
                           int64_t hi, int64_t *out)
{
    const kiln_json *v;
    kiln_status st = member(r, o, key, KILN_JSON_NUMBER, &v);
    if (st == KILN_OK && !integer(v, lo, hi, out))
        st = malformed(r, "'%s' is %.40s; it must be an integer in [%lld, %lld]", key, v->text,
                       (long long)lo, (long long)hi);
    return st;
}

static kiln_status get_float(reader *r, const kiln_json *o, const char *key, float *out)
{
    const kiln_json *v;
    double d;
    kiln_status st = member(r, o, key, KILN_JSON_NUMBER, &v);
    if (st == KILN_OK && (!kiln_json_number_to_double(v->text, v->length, &d) ||
                          fabs(d) > (double)FLT_MAX))
        st = malformed(r, "'%s' is %.40s; it must be a finite float32", key, v->text);
    if (st == KILN_OK)
        *out = (float)d;
    return st;
}

static kiln_status get_bool(reader *r, const kiln_json *o, const char *key, int32_t *out)
{
    const kiln_json *v;
    kiln_status st = member(r, o, key, KILN_JSON_BOOL, &v);
    if (st == KILN_OK)
        *out = v->boolean;
    return st;
}

/* A string naming one of `names`: its index. */
static kiln_status get_name(reader *r, const kiln_json *o, const char *key,
                            const char *const *names, int n, int first, int *out)
{
    const kiln_json *v;
    kiln_status st = member(r, o, key, KILN_JSON_STRING, &v);
    if (st != KILN_OK)
        return st;
    for (int i = first; i < n; i++)
        if (strcmp(v->text, names[i]) == 0) {
            *out = i;
            return KILN_OK;
        }
    char list[256] = "";
    for (int i = first; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i > first ? ", " : "",
                 names[i]);
    return malformed(r, "'%s' is '%.40s', not one of %s", key, v->text, list);
}

/* An array of n int32 integers. */
static kiln_status get_ints(reader *r, const kiln_json *o, const char *key, int n,
                            int32_t *out)
{
    const kiln_json *v;
    kiln_status st = member(r, o, key, KILN_JSON_ARRAY, &v);
    if (st == KILN_OK && v->count != (size_t)n)
        return malformed(r, "'%s' must be an array of %s integers", key, n == 2 ? "two" : "four");
    for (int k = 0; st == KILN_OK && k < n; k++) {
        int64_t i;
        if (!integer(&v->items[k], INT32_MIN, INT32_MAX, &i))
            return malformed(r, "'%s' must be an array of %s integers", key,
                             n == 2 ? "two" : "four");
        out[k] = (int32_t)i;
    }
    return st;
}

static kiln_status get_pair(reader *r, const kiln_json *o, const char *key, int32_t *out)
{
    return get_ints(r, o, key, 2, out);
}

/* Field fd of the struct at `base` from its key in o; a shape goes to the
 * layer's d->shape (NULL for tables without one). */
static kiln_status read_field(reader *r, const kiln_json *o, const kiln_layer_field *fd,
                              void *base, kiln_layer_desc *d)
{
    unsigned char *at = (unsigned char *)base + fd->offset;
    int64_t i64 = 0;
    int32_t i32[4] = {0, 0, 0, 0};
    kiln_status st = KILN_OK;
    if (fd->optional && !kiln_json_get(o, fd->key)) {
        memset(at, 0, optional_size(fd->type));
        return KILN_OK;
    }
    switch (fd->type) {
    case KILN_FIELD_INT:
        st = get_int(r, o, fd->key, INT32_MIN, INT32_MAX, &i64);
        i32[0] = (int32_t)i64;
        memcpy(at, i32, sizeof(int32_t));
        return st;
    case KILN_FIELD_PAIR:
        st = get_pair(r, o, fd->key, i32);
        memcpy(at, i32, 2 * sizeof(int32_t));
        return st;
    case KILN_FIELD_QUAD:
        st = get_ints(r, o, fd->key, 4, i32);
        memcpy(at, i32, sizeof i32);
        return st;
    case KILN_FIELD_FLOAT: {
        float v = 0.0f;
        st = get_float(r, o, fd->key, &v);
        memcpy(at, &v, sizeof v);
        return st;
    }
    case KILN_FIELD_BOOL:
    case KILN_FIELD_NOT_BOOL:
        st = get_bool(r, o, fd->key, i32);
        i32[0] = fd->type == KILN_FIELD_NOT_BOOL ? !i32[0] : i32[0];
        memcpy(at, i32, sizeof(int32_t));
        return st;
    case KILN_FIELD_PADDING: {
        int p = 0;
        st = get_name(r, o, fd->key, padding_names, COUNT(padding_names), 0, &p);
        const kiln_padding padding = (kiln_padding)p;
        memcpy(at, &padding, sizeof padding);
        return st;
    }
    case KILN_FIELD_SEED: {
        const kiln_json *v;
        uint64_t n = 0;
        st = member(r, o, fd->key, KILN_JSON_NUMBER, &v);
        for (const char *p = st == KILN_OK ? v->text : ""; *p && st == KILN_OK; p++)
            if (*p < '0' || *p > '9' || n > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
                st = malformed(r, "'%s' is %.40s; it must be an integer in [0, 2^64)",
                               fd->key, v->text);
            else
                n = n * 10 + (uint64_t)(*p - '0');
        memcpy(at, &n, sizeof n);
        return st;
    }
    case KILN_FIELD_COUNT: {
        st = get_int(r, o, fd->key, 0, INT64_MAX, &i64);
        memcpy(at, &i64, sizeof i64);
        return st;
    }
    case KILN_FIELD_NAME: {
        int v = 0;
        st = get_name(r, o, fd->key, fd->names, fd->n_names, 0, &v);
        i32[0] = v;
        memcpy(at, i32, sizeof(int32_t));
        return st;
    }
    case KILN_FIELD_DTYPE: {
        int t = 0;
        if (kiln_json_get(o, fd->key))
            st = get_name(r, o, fd->key, dtype_names, COUNT(dtype_names), 0, &t);
        i32[0] = t;
        memcpy(at, i32, sizeof(int32_t));
        return st;
    }
    case KILN_FIELD_SHAPE: {
        const kiln_json *v;
        st = member(r, o, fd->key, KILN_JSON_ARRAY, &v);
        if (st == KILN_OK && (v->count < 1 || v->count > KILN_MAX_RANK))
            return malformed(r, "'%s' must have 1 to %d dimensions, not %d", fd->key,
                             KILN_MAX_RANK, (int)v->count);
        for (size_t k = 0; st == KILN_OK && k < v->count; k++) {
            if (!integer(&v->items[k], INT32_MIN, INT32_MAX, &i64))
                return malformed(r, "'%s' dimension %d is not an integer", fd->key, (int)k);
            d->shape.dims[k] = (int32_t)i64;
        }
        if (st == KILN_OK)
            d->shape.rank = (int32_t)v->count;
        return st;
    }
    }
    return st;
}

/* Each field of the table from o, into the struct at `base`. */
static kiln_status read_fields(reader *r, const kiln_json *o, const kiln_layer_field *fields,
                               int n, void *base, kiln_layer_desc *d)
{
    kiln_status st = KILN_OK;
    for (int f = 0; f < n && st == KILN_OK; f++)
        st = read_field(r, o, &fields[f], base, d);
    return st;
}

/* "lora": {"rank": r, "alpha": a} and optionally "targets": "query,key",
 * on a kind that has LoRA; the layer checks the targets when applied. */
static kiln_status read_lora(reader *r, const kiln_json *lora, const kiln_layer_ops *ops,
                             kiln_layer_desc *d)
{
    static const char *const keys[] = {"rank", "alpha", "targets"};
    if (lora->type != KILN_JSON_OBJECT)
        return malformed(r, "'lora' must be an object, not %s", type_name(lora->type));
    if (!ops->enable_lora)
        return malformed(r, "'lora' is given, but %s layers have no LoRA", ops->kind);
    int64_t rank = 0;
    kiln_status st = only_keys(r, lora, keys, COUNT(keys));
    if (st == KILN_OK)
        st = get_int(r, lora, "rank", 1, INT32_MAX, &rank);
    if (st == KILN_OK)
        st = get_float(r, lora, "alpha", &d->lora_alpha);
    if (st == KILN_OK && !(d->lora_alpha > 0.0f))
        st = malformed(r, "LoRA's 'alpha' is %g; it must be > 0", (double)d->lora_alpha);
    const kiln_json *targets = kiln_json_get(lora, "targets");
    if (st == KILN_OK && targets && targets->type != KILN_JSON_STRING)
        st = malformed(r, "LoRA's 'targets' must be a string, not %s", type_name(targets->type));
    d->lora_targets = st == KILN_OK && targets ? targets->text : NULL;
    d->lora_rank = (int32_t)rank;
    return st;
}

static kiln_status read_layer(reader *r, const kiln_model_desc *desc, int32_t index,
                              const kiln_json *o, kiln_layer_desc *d)
{
    static const char *const keys[] = {"name", "kind", "inputs", "activation", "device",
                                       "trainable", "options", "weights",
                                       "transposed_weights", "lora"};
    snprintf(r->where, sizeof r->where, "layer %d: ", (int)index);
    if (o->type != KILN_JSON_OBJECT)
        return malformed(r, "it must be an object, not %s", type_name(o->type));
    const kiln_json *name, *kind, *inputs, *options, *device;
    kiln_status st = member(r, o, "name", KILN_JSON_STRING, &name);
    if (st != KILN_OK)
        return st;
    d->name = name->text;
    snprintf(r->where, sizeof r->where, "layer %d ('%.60s'): ", (int)index, d->name);
    for (int32_t j = 0; j < index; j++)
        if (strcmp(desc->layers[j].name, d->name) == 0)
            return malformed(r, "the name is used by layer %d too", (int)j);
    if ((st = only_keys(r, o, keys, COUNT(keys))) != KILN_OK ||
        (st = member(r, o, "kind", KILN_JSON_STRING, &kind)) != KILN_OK)
        return st;
    const kiln_layer_ops *ops = kiln_layer_kind_named(kind->text);
    if (!ops)
        return kiln_error(r->ctx, KILN_ERROR_UNSUPPORTED, "%s: the model description's layer "
                          "%d ('%.60s') is of kind '%.60s', which this kiln (%s) does not know",
                          r->what, (int)index, d->name, kind->text, kiln_version());
    d->ops = ops;
    if ((st = member(r, o, "inputs", KILN_JSON_ARRAY, &inputs)) != KILN_OK)
        return st;
    if ((int)inputs->count < ops->min_inputs || (int)inputs->count > ops->max_inputs)
        return malformed(r, "%s layers take %d to %d inputs, not %d", ops->kind,
                         ops->min_inputs, ops->max_inputs, (int)inputs->count);
    for (size_t k = 0; k < inputs->count; k++) {
        const kiln_json *in = &inputs->items[k];
        if (in->type != KILN_JSON_STRING)
            return malformed(r, "input %d must be a layer's name, not %s", (int)k,
                             type_name(in->type));
        int32_t j = 0;
        while (j < index && strcmp(desc->layers[j].name, in->text) != 0)
            j++;
        if (j == index)
            return malformed(r, "input %d, '%.60s', is not an earlier layer", (int)k, in->text);
        d->inputs[k] = j;
    }
    d->n_inputs = (int)inputs->count;
    int activation = 0;
    if ((st = get_name(r, o, "activation", activation_names, COUNT(activation_names), 0,
                       &activation)) != KILN_OK)
        return st;
    d->activation = (kiln_activation)activation;
    if (!ops->takes_activation && d->activation != KILN_ACTIVATION_LINEAR)
        return malformed(r, "%s layers take no activation, but it is '%s'", ops->kind,
                         activation_names[activation]);
    device = kiln_json_get(o, "device");
    int64_t dev = -1;
    if (!device)
        return malformed(r, "'device' is missing");
    if (device->type != KILN_JSON_NULL &&
        (st = get_int(r, o, "device", 0, INT32_MAX, &dev)) != KILN_OK)
        return st;
    d->device = (int32_t)dev;
    if ((st = get_bool(r, o, "trainable", &d->trainable)) != KILN_OK ||
        (st = member(r, o, "options", KILN_JSON_OBJECT, &options)) != KILN_OK)
        return st;
    d->weights = kiln_json_get(o, "weights");
    for (size_t k = 0; d->weights && k < d->weights->count; k++)
        if (d->weights->items[k].type != KILN_JSON_STRING || !*d->weights->items[k].text)
            return malformed(r, "'weights' must be an array of names");
    if (d->weights && d->weights->type != KILN_JSON_ARRAY)
        return malformed(r, "'weights' must be an array of names");
    d->transposed = kiln_json_get(o, "transposed_weights");
    if (d->transposed && d->transposed->type != KILN_JSON_ARRAY)
        return malformed(r, "'transposed_weights' must be an array of booleans");
    for (size_t k = 0; d->transposed && k < d->transposed->count; k++)
        if (d->transposed->items[k].type != KILN_JSON_BOOL)
            return malformed(r, "'transposed_weights' must be an array of booleans");
    const kiln_json *lora = kiln_json_get(o, "lora");
    if (lora && (st = read_lora(r, lora, ops, d)) != KILN_OK)
        return st;
    snprintf(r->where, sizeof r->where, "layer %d ('%.60s') options: ", (int)index, d->name);
    char layers[80];
    snprintf(layers, sizeof layers, "%s layers", ops->kind);
    st = only_fields(r, options, ops->fields, ops->n_fields, NULL, 0, layers);
    return st == KILN_OK ? read_fields(r, options, ops->fields, ops->n_fields, &d->options, d)
                         : st;
}

/* Optional "losses": one {"loss", "weight"} per output of a model of
 * several. */
static kiln_status read_losses(reader *r, const kiln_json *c, kiln_model_desc *d)
{
    static const char *const keys[] = {"loss", "weight", "label_smoothing"};
    const kiln_json *losses = kiln_json_get(c, "losses");
    if (!losses)
        return KILN_OK;
    if (losses->type != KILN_JSON_ARRAY || losses->count < 2 ||
        losses->count > KILN_MAX_MODEL_OUTPUTS)
        return malformed(r, "'losses' must be an array of 2 to %d objects",
                         KILN_MAX_MODEL_OUTPUTS);
    kiln_status st = KILN_OK;
    for (size_t k = 0; k < losses->count && st == KILN_OK; k++) {
        const kiln_json *l = &losses->items[k];
        int loss = 0;
        snprintf(r->where, sizeof r->where, "compile.losses[%d]: ", (int)k);
        if (l->type != KILN_JSON_OBJECT)
            return malformed(r, "it must be an object, not %s", type_name(l->type));
        st = only_keys(r, l, keys, COUNT(keys));
        if (st == KILN_OK)
            st = get_name(r, l, "loss", loss_names, COUNT(loss_names), 1, &loss);
        if (st == KILN_OK)
            st = get_float(r, l, "weight", &d->losses[k].weight);
        if (st == KILN_OK && kiln_json_get(l, "label_smoothing"))
            st = get_float(r, l, "label_smoothing", &d->losses[k].label_smoothing);
        d->losses[k].loss = (kiln_loss)loss;
        d->losses[k].has_weight = 1;   /* the weight in use, 0 included */
    }
    d->n_losses = (int32_t)losses->count;
    snprintf(r->where, sizeof r->where, "compile: ");
    return st;
}

/* Optional "outputs": the layers of a model of several outputs, in order. */
static kiln_status read_outputs(reader *r, const kiln_json *root, kiln_model_desc *d)
{
    const kiln_json *outputs = kiln_json_get(root, "outputs");
    if (!outputs)
        return KILN_OK;
    if (outputs->type != KILN_JSON_ARRAY || outputs->count < 2 ||
        outputs->count > KILN_MAX_MODEL_OUTPUTS)
        return malformed(r, "'outputs' must be an array of 2 to %d layer names",
                         KILN_MAX_MODEL_OUTPUTS);
    for (size_t k = 0; k < outputs->count; k++) {
        const kiln_json *name = &outputs->items[k];
        if (name->type != KILN_JSON_STRING)
            return malformed(r, "'outputs' item %d must be a string, not %s", (int)k,
                             type_name(name->type));
        kiln_node i = 0;
        while (i < d->n_layers && strcmp(d->layers[i].name, name->text) != 0)
            i++;
        if (i == d->n_layers)
            return malformed(r, "'outputs' item %d is '%.60s', which is not a layer", (int)k,
                             name->text);
        d->outputs[k] = i;
    }
    d->n_outputs = (int32_t)outputs->count;
    return KILN_OK;
}

/* The optional schedule settings write_schedule_extras writes; compile
 * checks them as it checks an application's. */
static kiln_status read_schedule_extras(reader *r, const kiln_json *sched, kiln_model_desc *d)
{
    kiln_lr_schedule *s = &d->schedule;
    kiln_status st = KILN_OK;
    if (kiln_json_get(sched, "warmup_target")) {
        s->has_warmup_target = 1;
        st = get_float(r, sched, "warmup_target", &s->warmup_target);
    }
    const kiln_json *b = kiln_json_get(sched, "boundaries"), *v = kiln_json_get(sched, "values");
    if (st != KILN_OK || (!b && !v))
        return st;
    if ((st = member(r, sched, "boundaries", KILN_JSON_ARRAY, &b)) != KILN_OK ||
        (st = member(r, sched, "values", KILN_JSON_ARRAY, &v)) != KILN_OK)
        return st;
    if (b->count > KILN_LR_MAX_BOUNDARIES || v->count > KILN_LR_MAX_BOUNDARIES + 1)
        return malformed(r, "%d boundaries and %d values; at most %d boundaries", (int)b->count,
                         (int)v->count, KILN_LR_MAX_BOUNDARIES);
    for (size_t i = 0; i < b->count; i++)
        if (!integer(&b->items[i], 0, INT64_MAX, &d->schedule_pieces.boundaries[i]))
            return malformed(r, "'boundaries' item %d is not an integer >= 0", (int)i);
    for (size_t i = 0; i < v->count; i++) {
        double x;
        const kiln_json *item = &v->items[i];
        if (item->type != KILN_JSON_NUMBER ||
            !kiln_json_number_to_double(item->text, item->length, &x) || fabs(x) > FLT_MAX)
            return malformed(r, "'values' item %d is not a finite float32", (int)i);
        d->schedule_pieces.values[i] = (float)x;
    }
    s->n_boundaries = (int32_t)b->count;
    s->boundaries = d->schedule_pieces.boundaries;
    s->n_values = (int32_t)v->count;
    s->values = d->schedule_pieces.values;
    return KILN_OK;
}

static kiln_status read_compile(reader *r, const kiln_json *c, kiln_model_desc *d)
{
    static const char *const keys[] = {"loss", "accuracy", "gradient_accumulation_steps",
                                       "metrics", "optimizer", "ignore_class", "losses",
                                       "label_smoothing"};
    static const char *const metric_keys[] = {"top_k", "mean_absolute_error",
                                              "binary_accuracy", "binary_threshold"};
    static const char *const optimizer_keys[] = {"kind", "schedule"};
    static const char *const schedule_keys[] = {"kind", "warmup_target", "boundaries",
                                                "values"};
    snprintf(r->where, sizeof r->where, "compile: ");
    const kiln_json *opt, *sched, *metrics;
    int loss = 0, kind = 0, schedule = 0;
    int64_t top_k = 0;
    int32_t accuracy = 0;
    int64_t steps = 0;
    kiln_optimizer_options *o = &d->optimizer;
    kiln_status st = only_keys(r, c, keys, COUNT(keys));
    if (st == KILN_OK)
        st = get_name(r, c, "loss", loss_names, COUNT(loss_names), 1, &loss);
    if (st == KILN_OK)
        st = get_bool(r, c, "accuracy", &accuracy);
    if (st == KILN_OK)
        st = get_int(r, c, "gradient_accumulation_steps", 1, INT32_MAX, &steps);
    /* Optional: files written before it have none. */
    const kiln_json *ignore = kiln_json_get(c, "ignore_class");
    int64_t ignore_class = 0;
    if (st == KILN_OK && ignore && ignore->type != KILN_JSON_NULL)
        st = get_int(r, c, "ignore_class", 0, INT32_MAX, &ignore_class);
    d->has_ignore_class = ignore && ignore->type != KILN_JSON_NULL;
    d->ignore_class = (int32_t)ignore_class;
    if (st == KILN_OK && kiln_json_get(c, "label_smoothing"))
        st = get_float(r, c, "label_smoothing", &d->label_smoothing);
    if (st == KILN_OK)
        st = read_losses(r, c, d);
    /* Optional: files written before compile's metrics have none (none asked). */
    metrics = kiln_json_get(c, "metrics");
    if (st == KILN_OK && metrics)
        st = member(r, c, "metrics", KILN_JSON_OBJECT, &metrics);
    if (st == KILN_OK)
        st = member(r, c, "optimizer", KILN_JSON_OBJECT, &opt);
    if (st != KILN_OK)
        return st;
    snprintf(r->where, sizeof r->where, "compile.metrics: ");
    if (metrics)
        st = only_keys(r, metrics, metric_keys, COUNT(metric_keys));
    if (st == KILN_OK && metrics)
        st = get_int(r, metrics, "top_k", 0, INT32_MAX, &top_k);
    if (st == KILN_OK && metrics)
        st = get_bool(r, metrics, "mean_absolute_error", &d->mean_absolute_error);
    if (st == KILN_OK && metrics)
        st = get_bool(r, metrics, "binary_accuracy", &d->binary_accuracy);
    /* The threshold in use, 0 included; without metrics, compile's default. */
    d->binary_threshold = 0.5f;
    if (st == KILN_OK && metrics)
        st = get_float(r, metrics, "binary_threshold", &d->binary_threshold);
    if (st != KILN_OK)
        return st;
    d->top_k = (int32_t)top_k;
    d->loss = (kiln_loss)loss;
    d->no_accuracy = !accuracy;
    d->gradient_accumulation_steps = (int32_t)steps;
    snprintf(r->where, sizeof r->where, "compile.optimizer: ");
    o->struct_size = sizeof *o;
    st = only_fields(r, opt, optimizer_fields, COUNT(optimizer_fields), optimizer_keys,
                     COUNT(optimizer_keys), "optimizers");
    if (st == KILN_OK)
        st = get_name(r, opt, "kind", optimizer_names, COUNT(optimizer_names), 0, &kind);
    if (st == KILN_OK)
        st = read_fields(r, opt, optimizer_fields, COUNT(optimizer_fields), o, NULL);
    if (st == KILN_OK)
        st = member(r, opt, "schedule", KILN_JSON_OBJECT, &sched);
    if (st != KILN_OK)
        return st;
    o->kind = (kiln_optimizer_kind)kind;
    snprintf(r->where, sizeof r->where, "compile.optimizer.schedule: ");
    kiln_lr_schedule *s = &d->schedule;
    s->struct_size = sizeof *s;
    o->schedule = s;
    st = only_fields(r, sched, schedule_fields, COUNT(schedule_fields), schedule_keys,
                     COUNT(schedule_keys), "schedules");
    if (st == KILN_OK)
        st = get_name(r, sched, "kind", schedule_names, COUNT(schedule_names), 0, &schedule);
    if (st == KILN_OK)
        st = read_fields(r, sched, schedule_fields, COUNT(schedule_fields), s, NULL);
    if (st == KILN_OK)
        st = read_schedule_extras(r, sched, d);
    if (st != KILN_OK)
        return st;
    s->kind = (kiln_lr_schedule_kind)schedule;
    d->has_compile = 1;
    return KILN_OK;
}

static kiln_status parse_root(reader *r, const kiln_json *root, kiln_model_desc *d)
{
    static const char *const keys[] = {"format", "version", "writer", "layers", "output",
                                       "compile", "outputs"};
    const kiln_json *format, *layers, *output, *writer;
    int64_t version = 0;
    if (root->type != KILN_JSON_OBJECT)
        return malformed(r, "it must be a JSON object, not %s", type_name(root->type));
    kiln_status st = member(r, root, "format", KILN_JSON_STRING, &format);
    if (st == KILN_OK && strcmp(format->text, "kiln.model") != 0)
        st = malformed(r, "'format' is '%.40s', not 'kiln.model'", format->text);
    if (st == KILN_OK)
        st = get_int(r, root, "version", 1, INT32_MAX, &version);
    if (st != KILN_OK)
        return st;
    /* A newer writer may have changed anything else: say so first. */
    if (version > KILN_MODEL_DESC_VERSION)
        return kiln_error(r->ctx, KILN_ERROR_UNSUPPORTED, "%s: the model description is of "
                          "version %lld, newer than version %d, the newest this kiln (%s) "
                          "reads", r->what, (long long)version, KILN_MODEL_DESC_VERSION,
                          kiln_version());
    if ((st = only_keys(r, root, keys, COUNT(keys))) != KILN_OK ||
        (st = member(r, root, "writer", KILN_JSON_STRING, &writer)) != KILN_OK ||
        (st = member(r, root, "layers", KILN_JSON_ARRAY, &layers)) != KILN_OK ||
        (st = member(r, root, "output", KILN_JSON_STRING, &output)) != KILN_OK)
        return st;
    if (layers->count == 0 || layers->count > INT32_MAX)
        return malformed(r, "'layers' is empty");
    d->layers = kiln_calloc(r->ctx, layers->count, sizeof *d->layers);
    if (!d->layers)
        return kiln_error_oom(r->ctx, "a model description", layers->count * sizeof *d->layers);
    for (size_t i = 0; i < layers->count && st == KILN_OK; i++) {
        st = read_layer(r, d, (int32_t)i, &layers->items[i], &d->layers[i]);
        d->n_layers = (int32_t)i + 1;   /* the names read so far */
    }
    if (st != KILN_OK)
        return st;
    r->where[0] = '\0';
    d->output = 0;
    while (d->output < d->n_layers && strcmp(d->layers[d->output].name, output->text) != 0)
        d->output++;
    if (d->output == d->n_layers)
        return malformed(r, "'output' is '%.60s', which is not a layer", output->text);
    if ((st = read_outputs(r, root, d)) != KILN_OK)
        return st;
    const kiln_json *compile = kiln_json_get(root, "compile");
    if (compile && compile->type != KILN_JSON_OBJECT)
        return malformed(r, "'compile' must be an object, not %s", type_name(compile->type));
    if (compile && (st = read_compile(r, compile, d)) != KILN_OK)
        return st;
    r->where[0] = '\0';
    if (compile && d->n_losses != d->n_outputs)
        return malformed(r, "%d outputs but %d losses in 'compile'", (int)d->n_outputs,
                         (int)d->n_losses);
    return KILN_OK;
}

kiln_status kiln_model_desc_parse(kiln_context *ctx, const char *what, const char *text,
                                  size_t length, kiln_model_desc *out)
{
    memset(out, 0, sizeof *out);
    reader r = {.ctx = ctx, .what = what};
    kiln_status st = kiln_json_parse(ctx, what, text, length, &out->doc);
    if (st == KILN_ERROR_FORMAT) {
        char why[512];
        snprintf(why, sizeof why, "%s", kiln_context_last_error(ctx));
        return kiln_error(ctx, st, "%s: the model description ('%s' in __metadata__) is not "
                          "JSON: %s", what, KILN_MODEL_META_KEY, why);
    }
    if (st == KILN_OK)
        st = parse_root(&r, out->doc.root, out);
    if (st != KILN_OK)
        kiln_model_desc_free(out);
    return st;
}

void kiln_model_desc_free(kiln_model_desc *d)
{
    if (!d)
        return;
    if (d->layers)
        kiln_free(d->doc.ctx, d->layers);
    kiln_json_free(&d->doc);
    memset(d, 0, sizeof *d);
}

/* ---- building ------------------------------------------------------------ */

/* Node l as its kind's builder adds it: the options as read, a shape
 * field pointing at the layer's parsed shape. */
static kiln_node build_layer(kiln_model *m, const kiln_layer_desc *l)
{
    kiln_layer_args args = l->options;
    for (int f = 0; f < l->ops->n_fields; f++)
        if (l->ops->fields[f].type == KILN_FIELD_SHAPE) {
            kiln_input_args shape;
            memcpy(&shape, args.bytes + l->ops->fields[f].offset, sizeof shape);
            shape.rank = l->shape.rank;
            shape.dims = l->shape.dims;
            memcpy(args.bytes + l->ops->fields[f].offset, &shape, sizeof shape);
        }
    kiln_node in[KILN_MAX_INPUTS];
    for (int k = 0; k < l->n_inputs; k++)
        in[k] = l->inputs[k];
    return kiln_model_add_layer(m, l->ops, l->ops->args_size ? &args : NULL, in, l->n_inputs,
                                l->name, l->activation);
}

kiln_status kiln_model_desc_build(const kiln_model_desc *d, const char *what, int place,
                                  kiln_model *m)
{
    for (int32_t i = 0; i < d->n_layers; i++) {
        if (build_layer(m, &d->layers[i]) != i) {
            const kiln_status st = m->graph.build_status == KILN_ERROR_OUT_OF_MEMORY
                                       ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_FORMAT;
            return kiln_error(m->ctx, st, "%s: the model description does not build: %s", what,
                              m->graph.build_error);
        }
        /* LoRA before the next layer: its adapters join this layer's
         * parameters, which "weights" below counts. */
        const kiln_layer_desc *l = &d->layers[i];
        const kiln_lora_options lora = {.struct_size = sizeof lora, .rank = l->lora_rank,
                                        .alpha = l->lora_alpha, .targets = l->lora_targets};
        if (l->lora_rank > 0 && kiln_model_enable_lora_with(m, l->name, &lora) != KILN_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", kiln_context_last_error(m->ctx));
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "%s: the model description's LoRA on "
                              "layer '%s' does not apply: %s", what, l->name, why);
        }
    }
    for (int32_t i = 0; i < d->n_layers; i++) {
        const kiln_layer_desc *l = &d->layers[i];
        kiln_node_rec *node = &m->graph.nodes[i];
        if (l->weights && (int)l->weights->count != node->n_params)
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "%s: layer '%s' names %d weights; its "
                              "kind has %d", what, l->name, (int)l->weights->count,
                              node->n_params);
        for (int p = 0; l->weights && p < node->n_params; p++)
            if (!(node->param_name[p] = kiln_strdup(m->ctx, l->weights->items[p].text)))
                return kiln_error_oom(m->ctx, "a weight's name", 160);
        if (l->transposed && (int)l->transposed->count != node->n_params)
            return kiln_error(m->ctx, KILN_ERROR_FORMAT, "%s: layer '%s' lists %d "
                              "transposed_weights; its kind has %d weights", what, l->name,
                              (int)l->transposed->count, node->n_params);
        for (int p = 0; l->transposed && p < node->n_params; p++)
            node->param_transposed[p] = (unsigned char)l->transposed->items[p].boolean;
    }
    for (int32_t i = 0; i < d->n_layers; i++) {
        const kiln_layer_desc *l = &d->layers[i];
        kiln_status st = KILN_OK;
        if (place && l->device >= 0 && (st = kiln_model_place(m, i, i, l->device)) != KILN_OK)
            return kiln_error(m->ctx, st, "%s: layer '%s' is placed on device %d, but the "
                              "context has %d device(s); compile with a strategy other than "
                              "pipeline to ignore placements", what, l->name, (int)l->device,
                              (int)m->ctx->n_devices);
        if (!l->trainable && (st = kiln_model_set_trainable(m, l->name, 0)) != KILN_OK)
            return st;
    }
    return d->n_outputs ? kiln_model_set_outputs(m, d->outputs, d->n_outputs)
                        : kiln_model_set_output(m, d->output);
}
