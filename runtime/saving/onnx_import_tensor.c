/* The importer's initializers (onnx_import.h): inline (raw_data or the
 * typed arrays) or external data, decoded into the arena and checked
 * against their shapes. */
#include "runtime/saving/onnx_import.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Little-endian bytes whatever the host. */
static uint64_t little(const uint8_t *b, size_t width)
{
    uint64_t v = 0;
    for (size_t k = width; k-- > 0;)
        v = v << 8 | b[k];
    return v;
}

/* The external-data entry `key` of t, or NULL. */
static const char *external(const KilnOnnx__TensorProto *t, const char *key)
{
    for (size_t k = 0; k < t->n_external_data; k++)
        if (t->external_data[k]->key && strcmp(t->external_data[k]->key, key) == 0)
            return t->external_data[k]->value;
    return NULL;
}

/* A whole non-negative number of text, or -1. */
static int64_t whole(const char *s)
{
    if (!s || !*s)
        return -1;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* `bytes` bytes of t's external data into buf. */
static kiln_status read_external(kiln_importer *im, const KilnOnnx__TensorProto *t,
                                 const char *name, size_t bytes, uint8_t *buf)
{
    kiln_context *ctx = im->ctx;
    const char *location = external(t, "location");
    const int64_t offset = external(t, "offset") ? whole(external(t, "offset")) : 0;
    const int64_t length = external(t, "length") ? whole(external(t, "length")) : (int64_t)bytes;
    if (!im->folder)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, KILN_IMPORT_CALL ": initializer "
                          "'%s' is in external data ('%s'); importing from a buffer needs "
                          "kiln_import_options.base_folder", name, location ? location : "");
    if (!location || !*location || location[0] == '/' || strstr(location, ".."))
        return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": initializer '%s': "
                          "external-data location '%s' is not a file name inside the model's "
                          "folder", name, location ? location : "");
    if (offset < 0 || length < 0)
        return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": initializer '%s': "
                          "external-data offset or length is not a whole number", name);
    if ((uint64_t)length != bytes)
        return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": initializer '%s': "
                          "external-data length %lld disagrees with its shape and type, which "
                          "take %zu bytes", name, (long long)length, bytes);
    char *path = kiln_onnx_printf(&im->mem, "%s/%s", im->folder, location);
    if (!path)
        return kiln_error_oom(ctx, "a path", im->mem.oom_bytes);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return kiln_error(ctx, KILN_ERROR_IO, KILN_IMPORT_CALL ": initializer '%s': cannot open "
                          "external-data file %s: %s", name, path, strerror(errno));
    size_t got = 0;
    if (fseek(fp, (long)offset, SEEK_SET) == 0)
        got = fread(buf, 1, bytes, fp);
    fclose(fp);
    if (got != bytes)
        return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": initializer '%s': "
                          "external-data file %s holds %zu of the %zu bytes it needs from "
                          "offset %lld", name, path, got, bytes, (long long)offset);
    return KILN_OK;
}

kiln_status kiln_import_tensor(kiln_importer *im, const KilnOnnx__TensorProto *t,
                               const char *name, const char *node)
{
    kiln_context *ctx = im->ctx;
    char what[160];
    if (node)
        snprintf(what, sizeof what, "Constant node '%s'", node);
    else
        snprintf(what, sizeof what, "initializer '%s'", name);
    const int type = t->has_data_type ? t->data_type : 0;
    size_t width;
    switch (type) {
    case KILN_ONNX_FLOAT:
        width = 4;
        break;
    case KILN_ONNX_INT32:
        width = 4;
        break;
    case KILN_ONNX_INT64:
        width = 8;
        break;
    case KILN_ONNX_BOOL:
        width = 1;
        break;
    case KILN_ONNX_DOUBLE:   /* rounded to float: PyTorch writes clamp's bounds so */
        width = 8;
        break;
    default:
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, KILN_IMPORT_CALL ": %s has data type %d; "
                          "kiln imports float (1), int32 (6), int64 (7), bool (9) and double "
                          "(11, as float) tensors", what, type);
    }
    if (t->n_dims > KILN_MAX_RANK + 1)
        return kiln_error(ctx, KILN_ERROR_UNSUPPORTED, KILN_IMPORT_CALL ": %s has %zu "
                          "dimensions; kiln imports up to %d", what, t->n_dims,
                          KILN_MAX_RANK + 1);
    uint64_t count = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] < 0 || (t->dims[d] && count > ((uint64_t)1 << 40) / (uint64_t)t->dims[d]))
            return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": %s has dimension %zu "
                              "of %lld", what, d, (long long)t->dims[d]);
        count *= (uint64_t)t->dims[d];
    }
    const size_t bytes = (size_t)count * width;
    const int is_external = t->has_data_location &&
                            t->data_location == KILN_ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const size_t typed = type == KILN_ONNX_FLOAT    ? t->n_float_data
                         : type == KILN_ONNX_DOUBLE ? t->n_double_data
                         : type == KILN_ONNX_INT64  ? t->n_int64_data : t->n_int32_data;
    uint8_t *raw = NULL;
    if (is_external) {
        raw = kiln_onnx_alloc(&im->mem, bytes ? bytes : 1);
        if (!raw)
            return kiln_error_oom(ctx, "an initializer", bytes);
        const kiln_status st = read_external(im, t, name, bytes, raw);
        if (st != KILN_OK)
            return st;
    } else if (t->has_raw_data && (t->raw_data.len || !typed)) {
        if (t->raw_data.len != bytes)
            return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": %s holds %zu bytes "
                              "but its shape takes %llu values of %zu bytes", what,
                              t->raw_data.len, (unsigned long long)count, width);
        raw = t->raw_data.data;
    } else if (typed != count) {
        return kiln_error(ctx, KILN_ERROR_FORMAT, KILN_IMPORT_CALL ": %s holds %zu values but "
                          "its shape takes %llu", what, typed, (unsigned long long)count);
    }
    kiln_import_value *v = kiln_import_add_value(im, name);
    const int floats = type == KILN_ONNX_FLOAT || type == KILN_ONNX_DOUBLE;
    float *f = floats ? kiln_onnx_alloc(&im->mem, (count + 1) * sizeof *f) : NULL;
    int64_t *ints = !floats ? kiln_onnx_alloc(&im->mem, (count + 1) * 8) : NULL;
    if (!v || (!f && !ints))
        return kiln_error_oom(ctx, "an initializer", bytes);
    for (uint64_t k = 0; k < count; k++) {
        if (type == KILN_ONNX_FLOAT) {
            const uint32_t bits = raw ? (uint32_t)little(raw + 4 * k, 4) : 0;
            if (raw)
                memcpy(&f[k], &bits, sizeof bits);
            else
                f[k] = t->float_data[k];
        } else if (type == KILN_ONNX_DOUBLE) {
            const uint64_t bits = raw ? little(raw + 8 * k, 8) : 0;
            double d = 0.0;
            if (raw)
                memcpy(&d, &bits, sizeof d);
            else
                d = t->double_data[k];
            f[k] = (float)d;
        } else if (type == KILN_ONNX_INT32) {
            ints[k] = raw ? (int32_t)(uint32_t)little(raw + 4 * k, 4) : t->int32_data[k];
        } else if (type == KILN_ONNX_BOOL) {   /* bools ride in int32_data */
            ints[k] = raw ? raw[k] != 0 : t->int32_data[k] != 0;
        } else {
            ints[k] = raw ? (int64_t)little(raw + 8 * k, 8) : t->int64_data[k];
        }
    }
    v->computed = 0;
    v->rank = (int)t->n_dims;
    for (size_t d = 0; d < t->n_dims; d++)
        v->dims[d] = t->dims[d];
    v->f = f;
    v->ints = ints;
    v->constant_node = node != NULL;
    return KILN_OK;
}

