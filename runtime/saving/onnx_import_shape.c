/* The importer's shape ops on computed values (onnx_import.h): Squeeze and
 * Unsqueeze as Reshape layers, Slice and Split as Slice layers, Gather of a
 * constant index as a Slice (and a Reshape where the index is a scalar).
 * The batch (axis 0) is never touched: an op that would is refused. Of
 * integer constants the same ops fold (onnx_import_fold.c,
 * onnx_import_ops.c). */
#include "runtime/saving/onnx_import.h"

#include <stdio.h>
#include <string.h>

#define CALL KILN_IMPORT_CALL

/* The refusal of node n, naming it and its op. */
#define REFUSE(im, n, status, fmt, ...)                                                       \
    kiln_error((im)->ctx, status, CALL ": node '%s' (%s): " fmt, kiln_import_node_name(n),     \
               (n)->op_type, __VA_ARGS__)

/* The values of n's int attribute list `name` (NULL: absent). */
static const KilnOnnx__AttributeProto *attr(const KilnOnnx__NodeProto *n, const char *name)
{
    for (size_t k = 0; k < n->n_attribute; k++)
        if (strcmp(n->attribute[k]->name, name) == 0)
            return n->attribute[k];
    return NULL;
}

/* Refuses an attribute not in the comma-separated `known`. */
static kiln_status only_attrs(kiln_importer *im, const KilnOnnx__NodeProto *n, const char *known)
{
    for (size_t k = 0; k < n->n_attribute; k++) {
        const char *a = n->attribute[k]->name, *at = strstr(known, a);
        const size_t len = strlen(a);
        if (!at || (at != known && at[-1] != ',') || (at[len] && at[len] != ','))
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "attribute '%s' is not supported (%s "
                          "reads %s)", a, n->op_type, *known ? known : "none");
    }
    return KILN_OK;
}

/* The axes of Squeeze, Unsqueeze or Split's sizes: an int list attribute
 * `name` before opset 13, input k from 13 on (an integer constant); *count
 * -1 when neither is given. */
static kiln_status int_list(kiln_importer *im, const KilnOnnx__NodeProto *n, const char *name,
                            size_t k, const int64_t **values, int64_t *count)
{
    *values = NULL;
    *count = -1;
    const KilnOnnx__AttributeProto *a = attr(n, name);
    if (im->opset < 13 && a) {
        *values = a->ints;
        *count = (int64_t)a->n_ints;
    } else if (im->opset >= 13 && k < n->n_input && *n->input[k]) {
        const kiln_import_value *v = kiln_import_find(im, n->input[k]);
        if (v->computed || !v->ints || v->rank > 1)
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "input %zu (%s) must be a 1-D integer "
                          "constant", k, name);
        *values = v->ints;
        *count = v->rank ? v->dims[0] : 1;
    }
    return KILN_OK;
}

/* Axis `a` of a value of `rank` axes, negative counting from the end, into
 * *out; refused when it is the batch or out of range. */
static kiln_status sample_axis(kiln_importer *im, const KilnOnnx__NodeProto *n, int64_t a,
                               int rank, int64_t *out)
{
    *out = a < 0 ? a + rank : a;
    if (*out < 0 || *out >= rank)
        return REFUSE(im, n, KILN_ERROR_FORMAT, "axis %lld is out of range for %d dimensions",
                      (long long)a, rank);
    if (*out == 0)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "axis %lld is the batch; kiln's %s takes a "
                      "sample's axes only (1..%d)", (long long)a, n->op_type, rank - 1);
    return KILN_OK;
}

/* v (in ONNX's order) reshaped to ONNX dims (rank, dims[0] the batch):
 * a Reshape layer named `layer`, making n's output. */
static kiln_status reshape_to(kiln_importer *im, const KilnOnnx__NodeProto *n,
                              kiln_import_value *v, int rank, const int64_t *dims)
{
    if (rank < 2 || rank > KILN_MAX_RANK + 1)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "the result has %d dimensions; kiln "
                      "holds values of 2 to %d (the batch first)", rank, KILN_MAX_RANK + 1);
    int32_t to[KILN_MAX_RANK];
    for (int d = 1; d < rank; d++)
        to[d - 1] = (int32_t)dims[d];
    kiln_node in;
    const kiln_status st = kiln_import_in_layout(im, v, 0, &in);
    if (st != KILN_OK)
        return st;
    const kiln_reshape_options o = {.struct_size = sizeof o, .name = kiln_import_node_name(n)};
    return kiln_import_made(im, n, kiln_reshape(im->m, in, rank - 1, to, &o), 0);
}

/* Squeeze's and Unsqueeze's computed input and axes (an attribute before
 * opset 13, a constant input from 13; count -1 when absent). */
static kiln_status value_and_axes(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                  kiln_import_value **v, const int64_t **axes, int64_t *count)
{
    kiln_status st = kiln_import_computed(im, n, 0, v);
    if (st == KILN_OK)
        st = only_attrs(im, n, im->opset < 13 ? "axes" : "");
    if (st == KILN_OK)
        st = int_list(im, n, "axes", 1, axes, count);
    return st;
}

kiln_status kiln_import_squeeze(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    const int64_t *axes;
    int64_t count;
    kiln_status st = value_and_axes(im, n, &v, &axes, &count);
    if (st != KILN_OK)
        return st;
    int drop[KILN_MAX_RANK + 1] = {0};
    for (int64_t k = 0; k < count; k++) {
        int64_t a;
        if ((st = sample_axis(im, n, axes[k], v->rank, &a)) != KILN_OK)
            return st;
        if (v->dims[a] != 1)
            return REFUSE(im, n, KILN_ERROR_SHAPE, "axis %lld has length %lld; Squeeze drops "
                          "axes of length 1", (long long)axes[k], (long long)v->dims[a]);
        drop[a] = 1;
    }
    for (int d = 1; count < 0 && d < v->rank; d++)   /* no axes: every 1 but the batch */
        drop[d] = v->dims[d] == 1;
    int64_t dims[KILN_MAX_RANK + 1];
    int rank = 0;
    for (int d = 0; d < v->rank; d++)
        if (!drop[d])
            dims[rank++] = v->dims[d];
    return reshape_to(im, n, v, rank, dims);
}

kiln_status kiln_import_unsqueeze_value(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    const int64_t *axes;
    int64_t count;
    kiln_status st = value_and_axes(im, n, &v, &axes, &count);
    if (st != KILN_OK)
        return st;
    if (count < 1)
        return REFUSE(im, n, KILN_ERROR_FORMAT, "%s", "no axes given");
    const int64_t rank = v->rank + count;
    if (rank > KILN_MAX_RANK + 1)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "the result has %lld dimensions; kiln "
                      "holds values of 2 to %d (the batch first)", (long long)rank,
                      KILN_MAX_RANK + 1);
    int one[KILN_MAX_RANK + 1] = {0};
    for (int64_t k = 0; k < count; k++) {
        int64_t a;
        if ((st = sample_axis(im, n, axes[k], (int)rank, &a)) != KILN_OK)
            return st;
        if (one[a])
            return REFUSE(im, n, KILN_ERROR_FORMAT, "axis %lld is given twice",
                          (long long)axes[k]);
        one[a] = 1;
    }
    int64_t dims[KILN_MAX_RANK + 1];
    for (int64_t d = 0, from = 0; d < rank; d++)
        dims[d] = one[d] ? 1 : v->dims[from++];
    return reshape_to(im, n, v, (int)rank, dims);
}

/* A window on each of ONNX's axes, the batch's (0) unused: kiln's Slice
 * options one axis longer. */
typedef struct onnx_window {
    int32_t begin[KILN_MAX_RANK + 1], size[KILN_MAX_RANK + 1], step[KILN_MAX_RANK + 1];
} onnx_window;

/* ONNX axis a (1..rank-1) of v as the axis of kiln's sample it is held
 * in: a 4-D value held channels-last keeps C last. */
static int held_axis(const kiln_import_value *v, int64_t a)
{
    static const int cl_axis[4] = {-1, 2, 0, 1};
    return v->cl ? cl_axis[a] : (int)a - 1;
}

/* A Slice layer named `layer` of v, making output `out` of n: `w` on
 * ONNX's axes (zeros keep an axis whole). A 4-D value held channels-last
 * is sliced as held. */
static kiln_status slice_layer(kiln_importer *im, const KilnOnnx__NodeProto *n,
                               const kiln_import_value *v, const onnx_window *onnx_axes,
                               const char *layer, char *out)
{
    kiln_slice_options o = {.struct_size = sizeof o, .name = layer};
    for (int a = 1; a < v->rank; a++) {
        const int h = held_axis(v, a);
        o.begin[h] = onnx_axes->begin[a];
        o.size[h] = onnx_axes->size[a];
        o.step[h] = onnx_axes->step[a];
    }
    KilnOnnx__NodeProto part = *n;
    char *outs[1] = {out};
    part.output = outs;
    part.n_output = 1;
    return kiln_import_made(im, &part, kiln_slice(im->m, v->node, &o), v->cl);
}

/* Slice of a computed value: constant starts, ends, axes and steps (opset
 * 10's inputs), the batch whole. */
kiln_status kiln_import_slice_value(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    kiln_status st = kiln_import_computed(im, n, 0, &v);
    if (st == KILN_OK && n->n_attribute)
        st = REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "%s", "attributes starts, ends and axes "
                    "(opset 1's form) are not supported; kiln reads them as inputs (opset 10)");
    if (st != KILN_OK)
        return st;
    const kiln_import_value *in[5] = {NULL};
    static const char *const what[5] = {"data", "starts", "ends", "axes", "steps"};
    for (size_t k = 1; k < 5 && k < n->n_input; k++) {
        in[k] = *n->input[k] ? kiln_import_find(im, n->input[k]) : NULL;
        if (in[k] && (in[k]->computed || !in[k]->ints || in[k]->rank != 1))
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "input %zu (%s) must be a 1-D integer "
                          "constant", k, what[k]);
    }
    if (!in[1] || !in[2])
        return REFUSE(im, n, KILN_ERROR_FORMAT, "%s", "starts or ends is missing");
    const int64_t m = in[1]->dims[0];
    for (int k = 2; k < 5; k++)
        if (in[k] && in[k]->dims[0] != m)
            return REFUSE(im, n, KILN_ERROR_FORMAT, "%s holds %lld values, starts %lld",
                          what[k], (long long)in[k]->dims[0], (long long)m);
    onnx_window o = {.begin = {0}};
    int seen[KILN_MAX_RANK + 1] = {0};
    for (int64_t k = 0; k < m; k++) {
        int64_t a = in[3] ? in[3]->ints[k] : k;
        const int64_t step = in[4] ? in[4]->ints[k] : 1;
        a = a < 0 ? a + v->rank : a;
        if (a < 0 || a >= v->rank || seen[a] || step == 0)
            return REFUSE(im, n, KILN_ERROR_FORMAT, "axis %lld (given twice, or out of range) "
                          "or step %lld", (long long)(in[3] ? in[3]->ints[k] : k),
                          (long long)step);
        seen[a] = 1;
        int64_t b = in[1]->ints[k], e = in[2]->ints[k];
        if (a == 0) {
            if (b != 0 || step != 1 || e < INT32_MAX)
                return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "it slices axis 0 (starts %lld, "
                              "ends %lld, step %lld); kiln keeps the batch whole", (long long)b,
                              (long long)e, (long long)step);
            continue;
        }
        const int64_t len = v->dims[a];
        /* ONNX's clamping: positive steps within [0, len], negative within
         * [-1, len - 1]. */
        b = b < 0 ? b + len : b;
        e = e < 0 ? e + len : e;
        int64_t size;
        if (step > 0) {
            b = b < 0 ? 0 : b > len ? len : b;
            e = e < 0 ? 0 : e > len ? len : e;
            size = e > b ? (e - b + step - 1) / step : 0;
        } else {
            b = b < 0 ? -1 : b > len - 1 ? len - 1 : b;
            e = e < -1 ? -1 : e > len - 1 ? len - 1 : e;
            size = b > e ? (b - e - step - 1) / -step : 0;
        }
        if (size == 0)
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "the slice of axis %lld is empty "
                          "(starts %lld, ends %lld, steps %lld); kiln holds no empty values",
                          (long long)a, (long long)in[1]->ints[k], (long long)in[2]->ints[k],
                          (long long)step);
        if (step > INT32_MAX || step < -INT32_MAX)
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "step %lld", (long long)step);
        o.begin[a] = (int32_t)b;
        o.size[a] = (int32_t)size;
        o.step[a] = (int32_t)step;
    }
    return slice_layer(im, n, v, &o, kiln_import_node_name(n), n->output[0]);
}

/* Gather of a computed value by a constant index on a sample's axis:
 * a scalar index takes one place and drops the axis (ViT's class token,
 * x[:, 0]); 1-D indices that step evenly (one index, or 0, 2, 4, ...)
 * keep it. Other indices are refused. */
kiln_status kiln_import_gather_value(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    kiln_status st = kiln_import_computed(im, n, 0, &v);
    if (st == KILN_OK)
        st = only_attrs(im, n, "axis");
    if (st != KILN_OK)
        return st;
    const KilnOnnx__AttributeProto *axis_attr = attr(n, "axis");
    int64_t a;
    if ((st = sample_axis(im, n, axis_attr ? axis_attr->i : 0, v->rank, &a)) != KILN_OK)
        return st;
    const kiln_import_value *idx = n->n_input > 1 ? kiln_import_find(im, n->input[1]) : NULL;
    if (!idx || idx->computed || !idx->ints || idx->rank > 1)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "%s", "its indices must be a scalar or "
                      "1-D integer constant (kiln gathers a computed value at known places)");
    const int64_t count = idx->rank ? idx->dims[0] : 1, len = v->dims[a];
    int64_t first = 0, step = 1;
    for (int64_t k = 0; k < count; k++) {
        int64_t i = idx->ints[k];
        if (i < -len || i >= len)
            return REFUSE(im, n, KILN_ERROR_FORMAT, "index %lld is outside axis %lld of "
                          "length %lld", (long long)i, (long long)a, (long long)len);
        i = i < 0 ? i + len : i;
        if (k == 0)
            first = i;
        else if (k == 1)
            step = i - first;
        if (k > 0 && (step == 0 || i != first + k * step))
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "indices %lld, %lld, ... do not step "
                          "evenly; kiln gathers indices that do (a slice)", (long long)first,
                          (long long)i);
    }
    onnx_window w = {.begin = {0}};
    w.begin[a] = (int32_t)first;
    w.size[a] = (int32_t)count;
    w.step[a] = (int32_t)step;
    if (idx->rank == 1)
        return slice_layer(im, n, v, &w, kiln_import_node_name(n), n->output[0]);
    /* A scalar: the one place, then the axis dropped. */
    int64_t dims[KILN_MAX_RANK + 1];
    int rank = 0;
    for (int d = 0; d < v->rank; d++)
        if (d != a)
            dims[rank++] = v->dims[d];
    if (rank < 2)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "the result is the batch alone (%d-D); "
                      "kiln holds values of 2 to %d dimensions", rank, KILN_MAX_RANK + 1);
    const char *name = kiln_import_node_name(n);
    const size_t len_name = strlen(name);
    char *layer = kiln_onnx_printf(&im->mem, "%s/take", len_name > 58 ? name + len_name - 58
                                                                       : name);
    char *taken = kiln_onnx_printf(&im->mem, "%s/take", n->output[0]);
    if (!layer || !taken)
        return kiln_error_oom(im->ctx, "a name", im->mem.oom_bytes);
    if ((st = slice_layer(im, n, v, &w, layer, taken)) != KILN_OK)
        return st;
    return reshape_to(im, n, kiln_import_find(im, taken), rank, dims);
}

/* Split of a computed value on a sample's axis into parts of constant
 * sizes (the 'split' attribute before opset 13, input 1 from 13 on) or
 * equal ones: a Slice layer per output read, named after the node and the
 * output's place. */
kiln_status kiln_import_split(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_import_value *v;
    const int64_t *sizes;
    int64_t count;
    kiln_status st = kiln_import_computed(im, n, 0, &v);
    if (st == KILN_OK)
        st = only_attrs(im, n, im->opset < 13 ? "axis,split" : "axis,num_outputs");
    if (st == KILN_OK)
        st = int_list(im, n, "split", 1, &sizes, &count);
    if (st != KILN_OK)
        return st;
    const KilnOnnx__AttributeProto *axis_attr = attr(n, "axis");
    int64_t a;
    if ((st = sample_axis(im, n, axis_attr ? axis_attr->i : 0, v->rank, &a)) != KILN_OK)
        return st;
    const int64_t len = v->dims[a], parts = (int64_t)n->n_output;
    if (count >= 0 && count != parts)
        return REFUSE(im, n, KILN_ERROR_FORMAT, "split gives %lld sizes for %lld outputs",
                      (long long)count, (long long)parts);
    if (count < 0 && len % parts != 0)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "axis %lld of length %lld does not split "
                      "into %lld equal parts; kiln splits evenly or by sizes given",
                      (long long)a, (long long)len, (long long)parts);
    int64_t total = 0;
    for (int64_t k = 0; k < parts; k++) {
        const int64_t size = count < 0 ? len / parts : sizes[k];
        if (size <= 0)
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "part %lld is %lld long; kiln holds "
                          "no empty values", (long long)k, (long long)size);
        total += size;
    }
    if (total != len)
        return REFUSE(im, n, KILN_ERROR_FORMAT, "the parts add up to %lld; axis %lld is %lld "
                      "long", (long long)total, (long long)a, (long long)len);
    const char *name = kiln_import_node_name(n);
    const size_t len_name = strlen(name);
    const kiln_import_value held = *v;   /* the values array moves as outputs are added */
    int64_t begin = 0;
    for (int64_t k = 0; k < parts; k++) {
        const int64_t size = count < 0 ? len / parts : sizes[k];
        onnx_window w = {.begin = {0}};
        w.begin[a] = (int32_t)begin;
        w.size[a] = (int32_t)size;
        begin += size;
        if (!*n->output[k] || !kiln_import_readers(im, n->output[k]))   /* unread: no layer */
            continue;
        char *layer = kiln_onnx_printf(&im->mem, "%s/%lld", len_name > 56
                                       ? name + len_name - 56 : name, (long long)k);
        if (!layer)
            return kiln_error_oom(im->ctx, "a name", im->mem.oom_bytes);
        if ((st = slice_layer(im, n, &held, &w, layer, n->output[k])) != KILN_OK)
            return st;
    }
    return KILN_OK;
}

/* Expand of a float initializer to the batch (the first entry of the
 * shape is the batch, as Shape of a computed value folds it) and to its
 * own sample shape (1s or its dimensions elsewhere): a LearnedTokens
 * layer whose parameter keeps the initializer's name, ViT's
 * class_token.expand(n, -1, -1). Its `like` is the graph's first computed
 * input, which only gives the batch. */
static kiln_status import_learned_tokens(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                         const kiln_import_value *c,
                                         const kiln_import_value *shape)
{
    if (!c->f || c->constant_node)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "input 0 '%s' is %s; kiln expands a float "
                      "initializer (a parameter repeated for every sample) or a computed "
                      "value", c->name, c->constant_node ? "a Constant node's value"
                                                         : "not floats");
    const int64_t m = shape->dims[0];
    if (m < 2 || shape->ints[0] != INT64_MIN)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "it expands initializer '%s' to a shape "
                      "whose first entry is %s; kiln repeats an initializer over the batch "
                      "only (the first entry taken from Shape of a computed value)", c->name,
                      m < 1 ? "missing" : m < 2 ? "all there is" : "not the batch");
    if (c->rank > m || (c->rank == m && c->dims[0] != 1) || m > KILN_MAX_RANK + 1 || m == 4)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "initializer '%s' of %d dimensions "
                      "expanded to %lld; kiln repeats a (1, ...) initializer over the batch, "
                      "2, 3 or 5 dimensions in all", c->name, c->rank, (long long)m);
    int32_t dims[KILN_MAX_RANK];
    int64_t pdims[KILN_MAX_RANK];
    for (int64_t d = 1; d < m; d++) {
        const int64_t at = d - (m - c->rank);
        const int64_t have = at >= 0 ? c->dims[at] : 1, s = shape->ints[d];
        if (s != 1 && s != have)
            return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "it expands axis %lld of initializer "
                          "'%s' from %lld to %lld; kiln repeats an initializer over the batch "
                          "only", (long long)d, c->name, (long long)have, (long long)s);
        dims[d - 1] = (int32_t)have;
        pdims[d - 1] = have;
    }
    kiln_import_value *like = NULL;
    for (size_t k = 0; !like && k < im->g->n_input; k++) {
        kiln_import_value *v = kiln_import_find(im, im->g->input[k]->name);
        like = v && v->computed ? v : NULL;
    }
    kiln_node in;
    kiln_status st = like ? kiln_import_in_layout(im, like, like->cl, &in)
                          : REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "%s", "the graph has no "
                                   "input to take the batch from");
    if (st != KILN_OK)
        return st;
    const kiln_learned_tokens_options o = {.struct_size = sizeof o,
                                           .name = kiln_import_node_name(n)};
    const kiln_node node = kiln_learned_tokens(im->m, in, (int32_t)m - 1, dims, &o);
    if ((st = kiln_import_made(im, n, node, 0)) != KILN_OK)
        return st;
    return kiln_import_take_constant(im, n, node, c->name, c->f, (int)m - 1, pdims, 0);
}

/* Expand of a computed value to a constant shape, ONNX's broadcast both
 * ways (a 1 in the shape keeps the input's axis), the batch kept: an
 * Expand layer. Of an initializer: a LearnedTokens layer (above). */
kiln_status kiln_import_expand(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const kiln_import_value *c = n->n_input == 2 ? kiln_import_find(im, n->input[0]) : NULL;
    const kiln_import_value *target = c ? kiln_import_find(im, n->input[1]) : NULL;
    if (c && !c->computed && target && !target->computed && target->ints &&
        target->rank == 1 && n->n_attribute == 0)
        return import_learned_tokens(im, n, c, target);
    kiln_import_value *v;
    kiln_status st = kiln_import_computed(im, n, 0, &v);
    if (st == KILN_OK)
        st = only_attrs(im, n, "");
    if (st != KILN_OK)
        return st;
    const kiln_import_value *shape = n->n_input > 1 ? kiln_import_find(im, n->input[1]) : NULL;
    if (!shape || shape->computed || !shape->ints || shape->rank != 1)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "%s", "its shape must be a 1-D integer "
                      "constant");
    const int64_t m = shape->dims[0];
    if (m > v->rank)
        return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "a shape of %lld dimensions for a %d-D "
                      "value would put axes before the batch; kiln keeps the batch first",
                      (long long)m, v->rank);
    int64_t dims[KILN_MAX_RANK + 1];
    for (int d = 0; d < v->rank; d++) {
        const int at = d - (v->rank - (int)m);
        const int64_t s = at < 0 ? 1 : shape->ints[at];
        if (d == 0) {
            if (s != 1 && s != INT64_MIN)   /* INT64_MIN: the batch, as Shape folds it */
                return REFUSE(im, n, KILN_ERROR_UNSUPPORTED, "it expands axis 0 to %lld; kiln "
                              "keeps the batch as it is", (long long)s);
            dims[0] = v->dims[0];
        } else if (s == 1 || s == v->dims[d]) {
            dims[d] = v->dims[d];
        } else if (v->dims[d] == 1 && s > 1 && s <= INT32_MAX) {
            dims[d] = s;
        } else {
            return REFUSE(im, n, KILN_ERROR_FORMAT, "axis %d of length %lld cannot expand to "
                          "%lld", d, (long long)v->dims[d], (long long)s);
        }
    }
    int32_t to[KILN_MAX_RANK];
    for (int d = 1; d < v->rank; d++)
        to[d - 1] = (int32_t)dims[d];
    kiln_node in;
    if ((st = kiln_import_in_layout(im, v, 0, &in)) != KILN_OK)
        return st;
    const kiln_expand_options o = {.struct_size = sizeof o, .name = kiln_import_node_name(n)};
    return kiln_import_made(im, n, kiln_expand(im->m, in, v->rank - 1, to, &o), 0);
}
