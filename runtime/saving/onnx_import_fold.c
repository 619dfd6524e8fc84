/* The importer's folding of integer constants (onnx_import.h): the
 * arithmetic torch.onnx.export writes for the pads of nn.ZeroPad2d and
 * F.pad (ConstantOfShape -> Concat -> Reshape -> Slice reversed ->
 * Transpose -> Reshape -> Cast) works on constants only, so it is done at
 * import. Of a computed value each of these ops is refused. */
#include "runtime/saving/onnx_import.h"

#include <stdio.h>
#include <string.h>

#define CALL KILN_IMPORT_CALL

/* The product of dims; -1 past INT64_MAX (a file may say anything). */
static int64_t count(int rank, const int64_t *dims)
{
    int64_t c = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0 || (dims[d] && c > INT64_MAX / dims[d]))
            return -1;
        c *= dims[d];
    }
    return c;
}

/* Input k of n as an integer constant, or NULL after the error. */
static const kiln_import_value *ints_in(kiln_importer *im, const KilnOnnx__NodeProto *n,
                                        size_t k, const char *what, kiln_status *st)
{
    const kiln_import_value *v = k < n->n_input && *n->input[k]
                                     ? kiln_import_find(im, n->input[k]) : NULL;
    if (v && !v->computed && v->ints)
        return v;
    *st = kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): input %zu (%s) "
                     "is %s; kiln folds %s of integer constants only (the pads PyTorch "
                     "computes)", kiln_import_node_name(n), n->op_type, k, what,
                     !v ? "missing" : v->computed ? "computed by the graph" : "of floats",
                     n->op_type);
    return NULL;
}

/* A new integer constant named n's first output; its values at *out. */
static kiln_status new_ints(kiln_importer *im, const KilnOnnx__NodeProto *n, int rank,
                            const int64_t *dims, int64_t **out)
{
    const int64_t size = count(rank, dims);
    int64_t *ints = size >= 0 && size < (1 << 24)
                        ? kiln_onnx_alloc(&im->mem, (size_t)(size + 1) * sizeof *ints) : NULL;
    kiln_import_value *v = ints ? kiln_import_add_value(im, n->output[0]) : NULL;
    if (!v)
        return kiln_error_oom(im->ctx, "a constant", im->mem.oom_bytes);
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->ints = ints;
    *out = ints;
    return KILN_OK;
}

/* Zeros (or the `value` attribute's one integer) of the shape input 0 holds. */
kiln_status kiln_import_constant_of_shape(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_status st = KILN_OK;
    const kiln_import_value *shape = ints_in(im, n, 0, "input", &st);
    if (!shape)
        return st;
    int64_t fill = 0;
    for (size_t k = 0; k < n->n_attribute; k++) {
        const KilnOnnx__TensorProto *t = n->attribute[k]->t;
        const int integer = t && t->data_type == KILN_ONNX_INT64;
        if (strcmp(n->attribute[k]->name, "value") != 0 || !integer)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' "
                              "(ConstantOfShape): attribute '%s' is not an int64 value; kiln "
                              "folds integer constants only", kiln_import_node_name(n),
                              n->attribute[k]->name);
        if (t->n_int64_data == 1)
            fill = t->int64_data[0];
        else if (t->raw_data.len == 8)
            for (int b = 7; b >= 0; b--)   /* little-endian */
                fill = (int64_t)((uint64_t)fill << 8 | t->raw_data.data[b]);
        else
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (ConstantOfShape): "
                              "its value holds no one int64", kiln_import_node_name(n));
    }
    const int rank = shape->rank ? (int)shape->dims[0] : 0;
    if (shape->rank > 1 || rank > KILN_MAX_RANK + 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (ConstantOfShape): "
                          "a shape of %d dimensions", kiln_import_node_name(n), rank);
    int64_t dims[KILN_MAX_RANK + 1];
    for (int d = 0; d < rank; d++) {
        dims[d] = shape->ints[d];
        if (dims[d] < 0 || dims[d] > (1 << 20))
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' "
                              "(ConstantOfShape): dimension %d is %lld",
                              kiln_import_node_name(n), d, (long long)dims[d]);
    }
    int64_t *out;
    if ((st = new_ints(im, n, rank, dims, &out)) != KILN_OK)
        return st;
    for (int64_t i = 0; i < count(rank, dims); i++)
        out[i] = fill;
    return KILN_OK;
}

/* Nonzero when node n's inputs are all integer constants: Add then folds
 * (kiln_import_arithmetic), else it is the add layer's. */
int kiln_import_all_ints(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    for (size_t k = 0; k < n->n_input; k++) {
        const kiln_import_value *v = *n->input[k] ? kiln_import_find(im, n->input[k]) : NULL;
        if (!v || v->computed || !v->ints)
            return 0;
    }
    return n->n_input > 0;
}

/* Add, Sub, Mul and Div of two integer constants of one shape, or one a
 * single value (PyTorch computes nn.ZeroPad2d's pad count as 4 * 2 - rank,
 * and torchvision's ViT its patch count as h // p, a Div). Div truncates
 * toward zero, as the ONNX spec says of integers and ONNX Runtime does;
 * a zero divisor, or the batch (which has no value here) in a Div, is
 * refused. */
kiln_status kiln_import_arithmetic(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_status st = KILN_OK;
    const kiln_import_value *a = ints_in(im, n, 0, "A", &st);
    const kiln_import_value *b = a ? ints_in(im, n, 1, "B", &st) : NULL;
    if (!b)
        return st;
    const int64_t na = count(a->rank, a->dims), nb = count(b->rank, b->dims);
    const int same = a->rank == b->rank && memcmp(a->dims, b->dims, (size_t)a->rank *
                                                  sizeof *a->dims) == 0;
    if (n->n_input != 2 || n->n_attribute || (!same && na != 1 && nb != 1))
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): kiln folds "
                          "two integer constants of one shape, or one a single value",
                          kiln_import_node_name(n), n->op_type);
    const kiln_import_value *big = na > nb || (na == nb && a->rank >= b->rank) ? a : b;
    int64_t dims[KILN_MAX_RANK + 1] = {0};
    memcpy(dims, big->dims, (size_t)big->rank * sizeof *dims);
    const int rank = big->rank, op = n->op_type[0];   /* A, S, M or D */
    for (int64_t i = 0; op == 'D' && i < count(rank, dims); i++) {
        const int64_t x = a->ints[na == 1 ? 0 : i], y = b->ints[nb == 1 ? 0 : i];
        if (y == 0 || x == INT64_MIN || y == INT64_MIN)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Div): "
                              "element %lld divides %s by %s; kiln folds a Div of sizes by "
                              "nonzero sizes", kiln_import_node_name(n), (long long)i,
                              x == INT64_MIN ? "the batch" : "a size",
                              y == 0 ? "zero" : y == INT64_MIN ? "the batch" : "a size");
    }
    int64_t *out;
    if ((st = new_ints(im, n, rank, dims, &out)) != KILN_OK)
        return st;
    a = kiln_import_find(im, n->input[0]);
    b = kiln_import_find(im, n->input[1]);
    for (int64_t i = 0; i < count(rank, dims); i++) {
        const int64_t x = a->ints[na == 1 ? 0 : i], y = b->ints[nb == 1 ? 0 : i];
        /* Wrapping as two's complement, as ONNX Runtime's int64 does. */
        const uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
        out[i] = op == 'D' ? x / y
                           : (int64_t)(op == 'A' ? ux + uy : op == 'S' ? ux - uy : ux * uy);
    }
    return KILN_OK;
}

/* Row-major strides of dims. */
static void strides_of(int rank, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

/* Slice (opset 10 on: starts, ends, axes and steps as constant inputs). */
kiln_status kiln_import_slice(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    kiln_status st = KILN_OK;
    const kiln_import_value *data = ints_in(im, n, 0, "data", &st);
    const kiln_import_value *starts = data ? ints_in(im, n, 1, "starts", &st) : NULL;
    const kiln_import_value *ends = starts ? ints_in(im, n, 2, "ends", &st) : NULL;
    if (!ends)
        return st;
    const kiln_import_value *axes = n->n_input > 3 && *n->input[3]
                                        ? ints_in(im, n, 3, "axes", &st) : NULL;
    const kiln_import_value *steps = st == KILN_OK && n->n_input > 4 && *n->input[4]
                                         ? ints_in(im, n, 4, "steps", &st) : NULL;
    if (st != KILN_OK)
        return st;
    const int rank = data->rank;
    const int64_t m = count(starts->rank, starts->dims);
    if (n->n_attribute || m != count(ends->rank, ends->dims) ||
        (axes && count(axes->rank, axes->dims) != m) ||
        (steps && count(steps->rank, steps->dims) != m) || m > rank)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Slice): kiln "
                          "folds the opset 10 form (no attributes; starts, ends, axes and steps "
                          "of one length, at most the data's rank)", name);
    int64_t start[KILN_MAX_RANK + 1], step[KILN_MAX_RANK + 1], dims[KILN_MAX_RANK + 1];
    for (int d = 0; d < rank; d++) {
        start[d] = 0;
        step[d] = 1;
        dims[d] = data->dims[d];
    }
    for (int64_t k = 0; k < m; k++) {
        int64_t a = axes ? axes->ints[k] : k;
        a = a < 0 ? a + rank : a;
        const int64_t s = steps ? steps->ints[k] : 1, len = data->dims[a < 0 || a >= rank ? 0 : a];
        if (a < 0 || a >= rank || s == 0 || s > INT32_MAX || s < -INT32_MAX)
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Slice): axis %lld "
                              "or step %lld", name, (long long)(axes ? axes->ints[k] : k),
                              (long long)s);
        int64_t b = starts->ints[k], e = ends->ints[k];
        b = b < 0 ? (b < -len ? 0 : b + len) : b;
        e = e < 0 ? (e < -len ? -1 : e + len) : e;
        if (s > 0) {
            b = b > len ? len : b;
            e = e < 0 ? 0 : e > len ? len : e;
            dims[a] = e > b ? (e - b + s - 1) / s : 0;
        } else {
            b = b > len - 1 ? len - 1 : b;
            e = e > len - 1 ? len - 1 : e;
            dims[a] = b > e ? (b - e - s - 1) / -s : 0;
        }
        start[a] = b;
        step[a] = s;
    }
    int64_t *out, from[KILN_MAX_RANK + 1], to[KILN_MAX_RANK + 1];
    if ((st = new_ints(im, n, rank, dims, &out)) != KILN_OK)
        return st;
    data = kiln_import_find(im, n->input[0]);   /* the values array may have moved */
    strides_of(rank, data->dims, from);
    strides_of(rank, dims, to);
    for (int64_t i = 0; i < count(rank, dims); i++) {
        int64_t at = 0;
        for (int d = 0; d < rank; d++)
            at += (start[d] + (i / to[d] % dims[d]) * step[d]) * from[d];
        out[i] = data->ints[at];
    }
    return KILN_OK;
}

/* Transpose of a constant (`perm`, the axes reversed when absent). */
kiln_status kiln_import_transpose(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    kiln_status st = KILN_OK;
    const kiln_import_value *data = ints_in(im, n, 0, "data", &st);
    if (!data)
        return st;
    const int rank = data->rank;
    int64_t perm[KILN_MAX_RANK + 1], dims[KILN_MAX_RANK + 1];
    int seen[KILN_MAX_RANK + 1] = {0};
    for (int d = 0; d < rank; d++)
        perm[d] = rank - 1 - d;
    for (size_t k = 0; k < n->n_attribute; k++) {
        const KilnOnnx__AttributeProto *a = n->attribute[k];
        if (strcmp(a->name, "perm") != 0 || a->n_ints != (size_t)rank)
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Transpose): "
                              "attribute '%s' is not a perm of %d axes",
                              kiln_import_node_name(n), a->name, rank);
        memcpy(perm, a->ints, (size_t)rank * sizeof *perm);
    }
    for (int d = 0; d < rank; d++) {
        if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]]++)
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Transpose): perm "
                              "is not a permutation", kiln_import_node_name(n));
        dims[d] = data->dims[perm[d]];
    }
    int64_t *out, from[KILN_MAX_RANK + 1], to[KILN_MAX_RANK + 1];
    if ((st = new_ints(im, n, rank, dims, &out)) != KILN_OK)
        return st;
    data = kiln_import_find(im, n->input[0]);
    strides_of(rank, data->dims, from);
    strides_of(rank, dims, to);
    for (int64_t i = 0; i < count(rank, dims); i++) {
        int64_t at = 0;
        for (int d = 0; d < rank; d++)
            at += (i / to[d] % dims[d]) * from[perm[d]];
        out[i] = data->ints[at];
    }
    return KILN_OK;
}

/* Reshape of an integer constant: the same values in a new shape (0
 * copies the input's dimension, one -1 takes the rest). */
kiln_status kiln_import_reshape_constant(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const char *name = kiln_import_node_name(n);
    kiln_status st = KILN_OK;
    const kiln_import_value *data = ints_in(im, n, 0, "data", &st);
    const kiln_import_value *shape = data ? ints_in(im, n, 1, "shape", &st) : NULL;
    if (!shape)
        return st;
    const int rank = shape->rank == 1 ? (int)shape->dims[0] : -1;
    if (rank < 0 || rank > KILN_MAX_RANK + 1)
        return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (Reshape): a "
                          "shape of %d dimensions", name, rank);
    const int64_t size = count(data->rank, data->dims);
    int64_t dims[KILN_MAX_RANK + 1], known = 1;
    int unknown = -1;
    for (int d = 0; d < rank; d++) {
        dims[d] = shape->ints[d] == 0 && d < data->rank ? data->dims[d] : shape->ints[d];
        if (dims[d] == -1 && unknown < 0)
            unknown = d;
        else if (dims[d] < 0 || dims[d] > INT32_MAX)
            return kiln_error(im->ctx, KILN_ERROR_FORMAT, CALL ": node '%s' (Reshape): "
                              "shape[%d] is %lld", name, d, (long long)shape->ints[d]);
        else
            known *= dims[d];
    }
    if (unknown >= 0)
        dims[unknown] = known ? size / known : 0;
    if (count(rank, dims) != size)
        return kiln_error(im->ctx, KILN_ERROR_SHAPE, CALL ": node '%s' (Reshape): %lld values "
                          "do not fill the shape", name, (long long)size);
    int64_t *out;
    if ((st = new_ints(im, n, rank, dims, &out)) != KILN_OK)
        return st;
    data = kiln_import_find(im, n->input[0]);
    memcpy(out, data->ints, (size_t)size * sizeof *out);
    return KILN_OK;
}


/* Equal of two integer constants (one shape, or one a single value): 1
 * where they are equal, else 0; Where of integer constants: X where the
 * condition is nonzero, else Y, each of one shape or a single value.
 * torch.onnx.export writes x.expand(-1, 4, -1)'s shape through them. */
kiln_status kiln_import_equal_where(kiln_importer *im, const KilnOnnx__NodeProto *n)
{
    const int where = strcmp(n->op_type, "Where") == 0;
    const size_t inputs = where ? 3 : 2;
    static const char *const what[2][3] = {{"A", "B", ""}, {"condition", "X", "Y"}};
    kiln_status st = KILN_OK;
    const kiln_import_value *in[3] = {NULL};
    for (size_t k = 0; k < inputs && st == KILN_OK; k++)
        in[k] = ints_in(im, n, k, what[where][k], &st);
    if (st != KILN_OK)
        return st;
    const kiln_import_value *big = in[0];
    for (size_t k = 1; k < inputs; k++)
        if (count(in[k]->rank, in[k]->dims) > count(big->rank, big->dims))
            big = in[k];
    const int64_t size = count(big->rank, big->dims);
    for (size_t k = 0; k < inputs; k++) {
        const int64_t c = count(in[k]->rank, in[k]->dims);
        const int same = in[k]->rank == big->rank &&
                         memcmp(in[k]->dims, big->dims, (size_t)big->rank * sizeof *big->dims) == 0;
        if (n->n_input != inputs || n->n_attribute || (!same && c != 1))
            return kiln_error(im->ctx, KILN_ERROR_UNSUPPORTED, CALL ": node '%s' (%s): kiln "
                              "folds integer constants of one shape, or single values",
                              kiln_import_node_name(n), n->op_type);
    }
    int64_t dims[KILN_MAX_RANK + 1] = {0}, *out;
    memcpy(dims, big->dims, (size_t)big->rank * sizeof *dims);
    const int rank = big->rank;
    if ((st = new_ints(im, n, rank, dims, &out)) != KILN_OK)
        return st;
    int64_t single[3];
    for (size_t k = 0; k < inputs; k++) {   /* the values array may have moved */
        in[k] = kiln_import_find(im, n->input[k]);
        single[k] = count(in[k]->rank, in[k]->dims) == 1 && size != 1;
    }
    for (int64_t i = 0; i < size; i++) {
        const int64_t a = in[0]->ints[single[0] ? 0 : i], b = in[1]->ints[single[1] ? 0 : i];
        out[i] = where ? (a ? b : in[2]->ints[single[2] ? 0 : i]) : a == b;
    }
    return KILN_OK;
}
