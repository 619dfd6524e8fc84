/* The importer's patterns (onnx_import.h): chains of primitive ops that
 * torch.onnx.export writes for one function kiln has as one layer, found
 * before any node is imported and imported as that function's ONNX op:
 *   GELU (nn.GELU(), below opset 20):
 *     Div(x, sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)
 *   GELU, tanh form (nn.GELU(approximate='tanh')):
 *     Mul(x, x) -> Mul(x, .) -> Mul(0.044715, .) -> Add(x, .)
 *     -> Mul(sqrt(2 / pi), .) -> Tanh -> Add(1, .) -> Mul(x, .) -> Mul(0.5, .)
 *   HardSwish (nn.Hardswish below opset 14, where HardSwish does not exist):
 *     HardSigmoid(x, alpha 1/6, beta 0.5) -> Mul(x, .)
 *   LayerNorm over the last axis (nn.LayerNorm, F.layer_norm, below opset
 *   17, where LayerNormalization does not exist):
 *     ReduceMean(x, axes -1) -> Sub(x, .) -> Pow(., 2) -> ReduceMean(axes -1)
 *     -> Add(., eps) -> Sqrt -> Div(Sub's, .) -> Mul(., scale) -> Add(., bias)
 * A chain is taken only as written there (operands in either order where
 * the op commutes), its constants equal to the float32 values PyTorch
 * writes, and every value inside it read by the chain alone; anything else
 * is imported op by op. Its first node is replaced by a node of the one op
 * (Gelu as opset 20 defines it, HardSwish as opset 14 does,
 * LayerNormalization as opset 17 does) named
 * after the chain's last node and making its output; the others are
 * skipped. The numbers are the function's, as kiln computes it: within
 * float32 rounding of the chain's. */
#include "runtime/saving/onnx_import.h"

#include <math.h>
#include <string.h>

/* The node that makes `name` (SIZE_MAX: none). */
static size_t maker(const kiln_importer *im, const char *name)
{
    for (size_t k = 0; k < im->g->n_node; k++)
        for (size_t o = 0; o < im->g->node[k]->n_output; o++)
            if (strcmp(im->g->node[k]->output[o], name) == 0)
                return k;
    return SIZE_MAX;
}

/* The nodes that read `name`, up to `max` of them into `who`; their
 * count, a graph output counting as a reader that is no node (SIZE_MAX). */
static int readers_of(const kiln_importer *im, const char *name, size_t *who, int max)
{
    int count = 0;
    for (size_t k = 0; k < im->g->n_node; k++) {
        const KilnOnnx__NodeProto *n = im->g->node[k];
        for (size_t i = 0; i < n->n_input; i++)
            if (strcmp(n->input[i], name) == 0) {
                if (count < max)
                    who[count] = k;
                count++;
                break;
            }
    }
    for (size_t k = 0; k < im->g->n_output; k++)
        if (strcmp(im->g->output[k]->name, name) == 0) {
            if (count < max)
                who[count] = SIZE_MAX;
            count++;
        }
    return count;
}

/* The one node that reads `name`, if it is an `op` of `n_input` inputs
 * with one output and no attributes; SIZE_MAX otherwise. */
static size_t only_reader(const kiln_importer *im, const char *name, const char *op, size_t n_input)
{
    size_t who;
    if (readers_of(im, name, &who, 1) != 1 || who == SIZE_MAX)
        return SIZE_MAX;
    const KilnOnnx__NodeProto *n = im->g->node[who];
    const int onnx_domain = !n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
    if (!onnx_domain || strcmp(n->op_type, op) != 0 || n->n_input != n_input ||
        n->n_output != 1 || n->n_attribute != 0 || im->skip[who])
        return SIZE_MAX;
    return who;
}

/* A float scalar constant (an initializer or a Constant node's value of
 * one element) into *out; 0 when `name` is not one. */
static int scalar(const kiln_importer *im, const char *name, float *out)
{
    const kiln_import_value *v = kiln_import_find((kiln_importer *)im, name);
    if (v) {
        int64_t count = 1;
        for (int d = 0; d < v->rank; d++)
            count *= v->dims[d];
        if (v->computed || !v->f || count != 1)
            return 0;
        *out = v->f[0];
        return 1;
    }
    const size_t k = maker(im, name);
    if (k == SIZE_MAX || strcmp(im->g->node[k]->op_type, "Constant") != 0 ||
        im->g->node[k]->n_attribute != 1)
        return 0;
    const KilnOnnx__AttributeProto *a = im->g->node[k]->attribute[0];
    if (strcmp(a->name, "value_float") == 0) {
        *out = a->f;
        return 1;
    }
    const KilnOnnx__TensorProto *t = a->t;
    if (strcmp(a->name, "value") != 0 || !t || !t->has_data_type ||
        t->data_type != KILN_ONNX_FLOAT || t->data_location == KILN_ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return 0;
    for (size_t d = 0; d < t->n_dims; d++)
        if (t->dims[d] != 1)
            return 0;
    if (t->n_float_data == 1) {
        *out = t->float_data[0];
        return 1;
    }
    if (t->has_raw_data && t->raw_data.len == 4) {   /* little-endian, as ONNX stores it */
        const uint8_t *b = t->raw_data.data;
        const uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                              (uint32_t)b[3] << 24;
        memcpy(out, &bits, sizeof *out);
        return 1;
    }
    return 0;
}

/* Node n's input other than `known` (a binary op's), or NULL when neither
 * input is `known`. */
static const char *other_input(const KilnOnnx__NodeProto *n, const char *known)
{
    if (strcmp(n->input[0], known) == 0)
        return n->input[1];
    return strcmp(n->input[1], known) == 0 ? n->input[0] : NULL;
}

/* Node n is a binary op reading `known` and the scalar constant `value`
 * (exactly, as float32). */
static int with_scalar(const kiln_importer *im, const KilnOnnx__NodeProto *n, const char *known,
                       float value)
{
    const char *other = other_input(n, known);
    float got;
    return other && scalar(im, other, &got) && got == value;
}

/* The next node of a chain: the only reader of node k's output, an `op`
 * of `n_input` inputs (SIZE_MAX when k is SIZE_MAX or it is not). */
static size_t next(const kiln_importer *im, size_t k, const char *op, size_t n_input)
{
    return k == SIZE_MAX ? SIZE_MAX : only_reader(im, im->g->node[k]->output[0], op, n_input);
}

/* The replacement node: `op` named after node `last`, reading `inputs`,
 * making last's output, with the attributes given. */
static KilnOnnx__NodeProto *replacement(kiln_importer *im, const char *op, size_t last,
                                        const char *const *inputs, size_t n_inputs,
                                        KilnOnnx__AttributeProto **attrs, size_t n_attrs)
{
    KilnOnnx__NodeProto *n = kiln_onnx_alloc(&im->mem, sizeof *n);
    char **in = kiln_onnx_alloc(&im->mem, n_inputs * sizeof *in);
    KilnOnnx__AttributeProto **a = kiln_onnx_alloc(&im->mem, (n_attrs + 1) * sizeof *a);
    if (!n || !in || !a)
        return NULL;
    kiln_onnx__node_proto__init(n);
    for (size_t i = 0; i < n_inputs; i++)
        in[i] = (char *)inputs[i];
    for (size_t i = 0; i < n_attrs; i++)
        a[i] = attrs[i];
    const KilnOnnx__NodeProto *end = im->g->node[last];
    n->op_type = (char *)op;
    n->name = (char *)kiln_import_node_name(end);
    n->input = in;
    n->n_input = n_inputs;
    n->output = end->output;
    n->n_output = 1;
    n->attribute = a;
    n->n_attribute = n_attrs;
    return n;
}

static KilnOnnx__AttributeProto *attr(kiln_importer *im, const char *name)
{
    KilnOnnx__AttributeProto *a = kiln_onnx_alloc(&im->mem, sizeof *a);
    if (a) {
        kiln_onnx__attribute_proto__init(a);
        a->name = (char *)name;
    }
    return a;
}

/* Nodes first..: the chain found; the others skipped, the first replaced. */
static kiln_status take(kiln_importer *im, const size_t *chain, size_t n, KilnOnnx__NodeProto *by)
{
    if (!by)
        return kiln_error_oom(im->ctx, "a pattern's node", im->mem.oom_bytes);
    for (size_t i = 1; i < n; i++)
        im->skip[chain[i]] = 1;
    im->replace[chain[0]] = by;
    return KILN_OK;
}

/* The erf form of GELU from its Div. */
static kiln_status gelu_erf(kiln_importer *im, size_t k, int *found)
{
    const KilnOnnx__NodeProto *div = im->g->node[k];
    const char *x = div->input[0];
    size_t c[5] = {k};
    if (div->n_input != 2 || !with_scalar(im, div, x, 1.41421353816986083984375f) ||
        strcmp(div->input[1], x) == 0)
        return KILN_OK;
    c[1] = next(im, c[0], "Erf", 1);
    c[2] = next(im, c[1], "Add", 2);
    c[3] = next(im, c[2], "Mul", 2);
    c[4] = next(im, c[3], "Mul", 2);
    if (c[4] == SIZE_MAX || !with_scalar(im, im->g->node[c[2]], im->g->node[c[1]]->output[0], 1.0f))
        return KILN_OK;
    const char *y = other_input(im->g->node[c[3]], im->g->node[c[2]]->output[0]);
    if (!y || strcmp(y, x) != 0 ||
        !with_scalar(im, im->g->node[c[4]], im->g->node[c[3]]->output[0], 0.5f))
        return KILN_OK;
    *found = 1;
    KilnOnnx__AttributeProto *a = attr(im, "approximate");
    if (a) {
        a->type = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        a->s.data = (uint8_t *)"none";
        a->s.len = 4;
    }
    return take(im, c, 5, a ? replacement(im, "Gelu", c[4], &x, 1, &a, 1) : NULL);
}

/* The tanh form of GELU from its Mul(x, x). */
static kiln_status gelu_tanh(kiln_importer *im, size_t k, int *found)
{
    const KilnOnnx__NodeProto *sq = im->g->node[k];
    const char *x = sq->input[0];
    if (sq->n_input != 2 || strcmp(sq->input[1], x) != 0)
        return KILN_OK;
    size_t c[9] = {k};
    static const char *const ops[9] = {"Mul", "Mul", "Mul", "Add", "Mul", "Tanh", "Add", "Mul",
                                       "Mul"};
    for (int i = 1; i < 9; i++)
        c[i] = next(im, c[i - 1], ops[i], i == 5 ? 1 : 2);
    if (c[8] == SIZE_MAX)
        return KILN_OK;
    const char *out[9];
    for (int i = 0; i < 9; i++)
        out[i] = im->g->node[c[i]]->output[0];
    const char *cube = other_input(im->g->node[c[1]], out[0]);
    const char *sum = other_input(im->g->node[c[3]], out[2]);
    const char *gate = other_input(im->g->node[c[7]], out[6]);
    if (!cube || strcmp(cube, x) != 0 || !sum || strcmp(sum, x) != 0 || !gate ||
        strcmp(gate, x) != 0 || !with_scalar(im, im->g->node[c[2]], out[1], 0.044714998453855515f) ||
        !with_scalar(im, im->g->node[c[4]], out[3], 0.7978845834732056f) ||
        !with_scalar(im, im->g->node[c[6]], out[5], 1.0f) ||
        !with_scalar(im, im->g->node[c[8]], out[7], 0.5f))
        return KILN_OK;
    *found = 1;
    KilnOnnx__AttributeProto *a = attr(im, "approximate");
    if (a) {
        a->type = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        a->s.data = (uint8_t *)"tanh";
        a->s.len = 4;
    }
    return take(im, c, 9, a ? replacement(im, "Gelu", c[8], &x, 1, &a, 1) : NULL);
}

/* HardSwish from its HardSigmoid (alpha 1/6 and beta 0.5 as float32, the
 * values PyTorch writes; beta may be left at ONNX's default, 0.5). */
static kiln_status hard_swish(kiln_importer *im, size_t k, int *found)
{
    const KilnOnnx__NodeProto *hs = im->g->node[k];
    if (strcmp(hs->op_type, "HardSigmoid") != 0 || hs->n_input != 1)
        return KILN_OK;
    float alpha = 0.2f, beta = 0.5f;
    for (size_t i = 0; i < hs->n_attribute; i++) {
        const KilnOnnx__AttributeProto *a = hs->attribute[i];
        if (a->type != KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT)
            return KILN_OK;
        if (strcmp(a->name, "alpha") == 0)
            alpha = a->f;
        else if (strcmp(a->name, "beta") == 0)
            beta = a->f;
        else
            return KILN_OK;
    }
    const char *x = hs->input[0];
    size_t c[2] = {k, only_reader(im, hs->output[0], "Mul", 2)};
    if (alpha != 1.0f / 6.0f || beta != 0.5f || c[1] == SIZE_MAX)
        return KILN_OK;
    const char *y = other_input(im->g->node[c[1]], hs->output[0]);
    if (!y || strcmp(y, x) != 0)
        return KILN_OK;
    *found = 1;
    return take(im, c, 2, replacement(im, "HardSwish", c[1], &x, 1, NULL, 0));
}

/* A ReduceMean over the last axis only, keeping it (attributes axes [-1]
 * and keepdims absent or 1). */
static int mean_of_last(const KilnOnnx__NodeProto *n)
{
    if (n->n_input != 1 || n->n_output != 1 || strcmp(n->op_type, "ReduceMean") != 0)
        return 0;
    int axes = 0;
    for (size_t i = 0; i < n->n_attribute; i++) {
        const KilnOnnx__AttributeProto *a = n->attribute[i];
        if (strcmp(a->name, "axes") == 0 && a->n_ints == 1 && a->ints[0] == -1)
            axes = 1;
        else if (strcmp(a->name, "keepdims") != 0 || a->i != 1)
            return 0;
    }
    return axes;
}

/* The LayerNorm chain from its first ReduceMean. */
static kiln_status layer_norm(kiln_importer *im, size_t k, int *found)
{
    const KilnOnnx__NodeProto *mean = im->g->node[k];
    if (!mean_of_last(mean))
        return KILN_OK;
    const char *x = mean->input[0];
    size_t c[9] = {k}, r[2];
    c[1] = only_reader(im, mean->output[0], "Sub", 2);
    if (c[1] == SIZE_MAX || strcmp(im->g->node[c[1]]->input[0], x) != 0)
        return KILN_OK;
    const char *centred = im->g->node[c[1]]->output[0];
    if (readers_of(im, centred, r, 2) != 2 || r[0] == SIZE_MAX || r[1] == SIZE_MAX)
        return KILN_OK;
    const int pow_first = strcmp(im->g->node[r[0]]->op_type, "Pow") == 0;
    c[2] = r[pow_first ? 0 : 1];   /* Pow */
    const KilnOnnx__NodeProto *p = im->g->node[c[2]];
    float eps;
    if (strcmp(p->op_type, "Pow") != 0 || p->n_input != 2 || strcmp(p->input[0], centred) != 0 ||
        !scalar(im, p->input[1], &eps) || eps != 2.0f || im->skip[c[2]])
        return KILN_OK;
    size_t who;
    if (readers_of(im, p->output[0], &who, 1) != 1 || who == SIZE_MAX ||
        !mean_of_last(im->g->node[who]) || im->skip[who])
        return KILN_OK;
    c[3] = who;
    c[4] = next(im, c[3], "Add", 2);
    c[5] = next(im, c[4], "Sqrt", 1);
    c[6] = next(im, c[5], "Div", 2);
    c[7] = next(im, c[6], "Mul", 2);
    c[8] = next(im, c[7], "Add", 2);
    if (c[8] == SIZE_MAX || c[6] != r[pow_first ? 1 : 0])
        return KILN_OK;
    const KilnOnnx__NodeProto *add = im->g->node[c[4]], *div = im->g->node[c[6]];
    const char *e = other_input(add, im->g->node[c[3]]->output[0]);
    if (!e || !scalar(im, e, &eps) || !(eps > 0.0f) || strcmp(div->input[0], centred) != 0)
        return KILN_OK;
    const char *scale = other_input(im->g->node[c[7]], div->output[0]);
    const char *bias = other_input(im->g->node[c[8]], im->g->node[c[7]]->output[0]);
    const kiln_import_value *s = scale ? kiln_import_find(im, scale) : NULL;
    const kiln_import_value *b = bias ? kiln_import_find(im, bias) : NULL;
    if (!s || !b || s->computed || b->computed || !s->f || !b->f || s->rank != 1 ||
        b->rank != 1 || s->dims[0] != b->dims[0])
        return KILN_OK;
    *found = 1;
    KilnOnnx__AttributeProto *a[2] = {attr(im, "axis"), attr(im, "epsilon")};
    if (a[0] && a[1]) {
        a[0]->type = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a[0]->has_i = 1;
        a[0]->i = -1;
        a[1]->type = KILN_ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        a[1]->has_f = 1;
        a[1]->f = eps;
    }
    const char *inputs[3] = {x, scale, bias};
    return take(im, c, 9, a[0] && a[1] ? replacement(im, "LayerNormalization", c[8], inputs, 3,
                                                      a, 2) : NULL);
}

kiln_status kiln_import_patterns(kiln_importer *im)
{
    static kiln_status (*const patterns[])(kiln_importer *, size_t, int *) = {
        gelu_erf, gelu_tanh, hard_swish, layer_norm,
    };
    kiln_status st = KILN_OK;
    for (size_t k = 0; k < im->g->n_node && st == KILN_OK; k++) {
        const KilnOnnx__NodeProto *n = im->g->node[k];
        const int onnx_domain = !n->domain || !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
        if (!onnx_domain || im->skip[k] || im->replace[k] || n->n_input < 1 || n->n_output != 1)
            continue;
        int found = 0;
        for (size_t p = 0; p < sizeof patterns / sizeof patterns[0] && !found && st == KILN_OK; p++)
            st = patterns[p](im, k, &found);
    }
    return st;
}
