#include "runtime/formats/safetensors.h"

#include "base/files.h"
#include "runtime/context/context.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; size_t size; } dtypes[] = {
    {.name = "F64", .size = 8}, {.name = "F32", .size = 4}, {.name = "F16", .size = 2},
    {.name = "BF16", .size = 2}, {.name = "I64", .size = 8}, {.name = "I32", .size = 4},
    {.name = "I16", .size = 2}, {.name = "I8", .size = 1}, {.name = "U64", .size = 8},
    {.name = "U32", .size = 4}, {.name = "U16", .size = 2}, {.name = "U8", .size = 1},
    {.name = "BOOL", .size = 1}, {.name = "F8_E4M3", .size = 1}, {.name = "F8_E5M2", .size = 1},
};

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

static kiln_status bad(kiln_context *ctx, const char *what, const char *fmt, const char *name,
                       unsigned long long a, unsigned long long b)
{
    char detail[256];
    snprintf(detail, sizeof detail, fmt, name, a, b);
    return kiln_error(ctx, KILN_ERROR_FORMAT, "%s: %s", what, detail);
}

/* One tensor entry of the header. */
static kiln_status take_tensor(kiln_context *ctx, const char *what, const char *name,
                               const kiln_json *v, kiln_st_tensor *t)
{
    if (!name[0])
        return bad(ctx, what, "a tensor has an empty name%s", "", 0, 0);
    if (v->type != KILN_JSON_OBJECT || v->count != 3)
        return bad(ctx, what, "tensor '%s' must be an object of dtype, shape and "
                   "data_offsets", name, 0, 0);
    const kiln_json *dt = kiln_json_get(v, "dtype"), *shape = kiln_json_get(v, "shape"),
                    *off = kiln_json_get(v, "data_offsets");
    if (!dt || dt->type != KILN_JSON_STRING || !shape || shape->type != KILN_JSON_ARRAY ||
        !off || off->type != KILN_JSON_ARRAY || off->count != 2)
        return bad(ctx, what, "tensor '%s' must have a dtype string, a shape array and two "
                   "data_offsets", name, 0, 0);
    t->name = name;
    t->dtype = NULL;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dt->text, dtypes[i].name) == 0) {
            t->dtype = dtypes[i].name;
            t->dtype_size = dtypes[i].size;
        }
    if (!t->dtype) {
        char msg[160];
        snprintf(msg, sizeof msg, "tensor '%s' has unknown dtype '%.40s'", name, dt->text);
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s: %s", what, msg);
    }
    if (shape->count > KILN_ST_MAX_RANK)
        return bad(ctx, what, "tensor '%s' has rank %llu (at most %llu)", name,
                   (unsigned long long)shape->count, KILN_ST_MAX_RANK);
    t->rank = (int)shape->count;
    uint64_t elements = 1;
    for (int i = 0; i < t->rank; i++) {
        if (!kiln_json_uint(&shape->items[i], &t->shape[i]))
            return bad(ctx, what, "tensor '%s': shape entry %llu is not a non-negative "
                       "integer", name, (unsigned long long)i, 0);
        if (t->shape[i] && elements > UINT64_MAX / t->shape[i])
            return bad(ctx, what, "tensor '%s': its size overflows", name, 0, 0);
        elements *= t->shape[i];
    }
    if (!kiln_json_uint(&off->items[0], &t->begin) || !kiln_json_uint(&off->items[1], &t->end))
        return bad(ctx, what, "tensor '%s': data_offsets must be non-negative integers", name,
                   0, 0);
    if (t->end < t->begin)
        return bad(ctx, what, "tensor '%s': data_offsets [%llu, %llu] run backwards", name,
                   t->begin, t->end);
    if (elements > UINT64_MAX / t->dtype_size || t->end - t->begin != elements * t->dtype_size)
        return bad(ctx, what, "tensor '%s': data_offsets span %llu bytes, its shape and dtype "
                   "need %llu", name, t->end - t->begin,
                   elements > UINT64_MAX / t->dtype_size ? UINT64_MAX : elements * t->dtype_size);
    return KILN_OK;
}

static int by_begin(const void *a, const void *b)
{
    const kiln_st_tensor *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

kiln_status kiln_st_parse(kiln_context *ctx, const char *what, const unsigned char *bytes,
                          size_t size, kiln_st_file *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->bytes = (unsigned char *)bytes;
    f->size = size;
    if (size < 8)
        return bad(ctx, what, "%s%llu bytes: too short for a safetensors header", "",
                   (unsigned long long)size, 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | bytes[i];
    if (n < 2 || n > KILN_ST_MAX_HEADER || n > size - 8)
        return bad(ctx, what, "%sheader length %llu is out of range for a %llu-byte file", "",
                   n, (unsigned long long)size);
    if (bytes[8] != '{')
        return bad(ctx, what, "%sthe header does not start with '{'", "", 0, 0);
    kiln_status st = kiln_json_parse(ctx, what, (const char *)bytes + 8, (size_t)n, &f->doc);
    if (st != KILN_OK)
        return st;
    const kiln_json *root = f->doc.root;
    if (root->type != KILN_JSON_OBJECT) {
        kiln_st_free(f);
        return bad(ctx, what, "%sthe header is not a JSON object", "", 0, 0);
    }
    f->data_start = 8 + (size_t)n;
    f->tensors = root->count ? kiln_calloc(ctx, root->count, sizeof *f->tensors) : NULL;
    if (root->count && !f->tensors) {
        const size_t bytes = root->count * sizeof *f->tensors;   /* root goes with f */
        kiln_st_free(f);
        return kiln_error_oom(ctx, "tensor list", bytes);
    }
    for (size_t i = 0; i < root->count && st == KILN_OK; i++) {
        const kiln_json *v = &root->items[i];
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            for (size_t j = 0; v->type == KILN_JSON_OBJECT && j < v->count; j++)
                if (v->items[j].type != KILN_JSON_STRING)
                    st = bad(ctx, what, "__metadata__ value '%s' is not a string",
                             v->keys[j], 0, 0);
            if (v->type != KILN_JSON_OBJECT)
                st = bad(ctx, what, "%s__metadata__ is not an object", "", 0, 0);
            f->metadata = v;
            continue;
        }
        st = take_tensor(ctx, what, root->keys[i], v, &f->tensors[f->n_tensors]);
        f->n_tensors++;
    }
    if (st != KILN_OK) {
        kiln_st_free(f);
        return st;
    }
    /* Tensors must tile the data section: sorted, no gap, no overlap. */
    if (f->n_tensors > 1)
        qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_begin);
    const uint64_t data_size = size - f->data_start;
    uint64_t at = 0;
    for (size_t i = 0; i < f->n_tensors && st == KILN_OK; i++) {
        const kiln_st_tensor *t = &f->tensors[i];
        if (t->begin != at)
            st = bad(ctx, what, "tensor '%s' starts at byte %llu where %llu was expected "
                     "(overlapping or unordered tensors, or a gap)", t->name, t->begin, at);
        else if (t->end > data_size)
            st = bad(ctx, what, "tensor '%s' ends at byte %llu, past the %llu bytes of data",
                     t->name, t->end, data_size);
        at = t->end;
    }
    if (st == KILN_OK && at != data_size)
        st = bad(ctx, what, "%sthe tensors cover %llu bytes of the %llu bytes of data", "", at,
                 data_size);
    if (st != KILN_OK)
        kiln_st_free(f);
    return st;
}

kiln_status kiln_st_read(kiln_context *ctx, const char *path, kiln_st_file *out)
{
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return kiln_error(ctx, KILN_ERROR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || sb.st_size < 0) {
        fclose(fp);
        return kiln_error(ctx, KILN_ERROR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    const size_t size = (size_t)sb.st_size;
    unsigned char *bytes = kiln_alloc(ctx, size ? size : 1);
    if (!bytes) {
        fclose(fp);
        return kiln_error_oom(ctx, path, size);
    }
    const size_t got = fread(bytes, 1, size, fp);
    const int failed = ferror(fp);
    fclose(fp);
    if (failed || got != size) {
        kiln_free(ctx, bytes);
        return kiln_error(ctx, KILN_ERROR_IO, "reading %s failed after %zu of %zu bytes", path,
                          got, size);
    }
    kiln_status st = kiln_st_parse(ctx, path, bytes, size, out);
    if (st != KILN_OK) {
        kiln_free(ctx, bytes);
        return st;
    }
    out->owns_bytes = 1;
    return KILN_OK;
}

void kiln_st_free(kiln_st_file *f)
{
    if (!f || !f->ctx)
        return;
    kiln_json_free(&f->doc);
    kiln_free(f->ctx, f->tensors);
    if (f->owns_bytes)
        kiln_free(f->ctx, f->bytes);
    memset(f, 0, sizeof *f);
}

const kiln_st_tensor *kiln_st_find(const kiln_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *kiln_st_meta(const kiln_st_file *f, const char *key)
{
    const kiln_json *v = kiln_json_get(f->metadata, key);
    return v && v->type == KILN_JSON_STRING ? v->text : NULL;
}

const unsigned char *kiln_st_data(const kiln_st_file *f, const kiln_st_tensor *t)
{
    return f->bytes + f->data_start + t->begin;
}

/* The header: {"__metadata__":{...},"name":{"dtype":"F32","shape":[..],
 * "data_offsets":[b,e]},...}, padded with spaces to a multiple of 8. */
static char *build_header(kiln_context *ctx, const kiln_st_entry *e, size_t n,
                          const char *const *keys, const char *const *values, size_t n_meta,
                          size_t *length)
{
    size_t size = 256;
    for (size_t i = 0; i < n; i++)
        size += 6 * strlen(e[i].name) + 160 + 24 * (size_t)e[i].rank;
    for (size_t i = 0; i < n_meta; i++)
        size += 6 * (strlen(keys[i]) + strlen(values[i])) + 8;
    char *h = kiln_alloc(ctx, size);
    if (!h)
        return NULL;
    size_t at = 0;
    int ok = 1;
    h[at++] = '{';
    if (n_meta) {
        at += (size_t)snprintf(h + at, size - at, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta && ok; i++) {
            ok = kiln_json_put_string(h, size, &at, keys[i]);
            h[at++] = ':';
            ok = ok && kiln_json_put_string(h, size, &at, values[i]);
            if (i + 1 < n_meta)
                h[at++] = ',';
        }
        h[at++] = '}';
        if (n)
            h[at++] = ',';
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n && ok; i++) {
        uint64_t count = 1;
        ok = kiln_json_put_string(h, size, &at, e[i].name);
        at += (size_t)snprintf(h + at, size - at, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < e[i].rank; d++) {
            at += (size_t)snprintf(h + at, size - at, "%s%lld", d ? "," : "",
                                   (long long)e[i].shape[d]);
            count *= (uint64_t)e[i].shape[d];
        }
        at += (size_t)snprintf(h + at, size - at, "],\"data_offsets\":[%llu,%llu]}%s",
                               (unsigned long long)offset,
                               (unsigned long long)(offset + 4 * count), i + 1 < n ? "," : "");
        offset += 4 * count;
    }
    h[at++] = '}';
    while (at % 8)
        h[at++] = ' ';
    if (!ok || at >= size) {
        kiln_free(ctx, h);
        return NULL;
    }
    *length = at;
    return h;
}

/* Floats as little-endian bytes, whatever the host. */
static int write_floats(int fd, const float *data, size_t count)
{
    if (host_is_little_endian())
        return kiln_write_all(fd, data, count * sizeof(float));
    unsigned char buf[4096];
    for (size_t i = 0; i < count;) {
        size_t k = 0;
        for (; k + 4 <= sizeof buf && i < count; i++, k += 4) {
            uint32_t u;
            memcpy(&u, &data[i], 4);
            buf[k] = (unsigned char)u;
            buf[k + 1] = (unsigned char)(u >> 8);
            buf[k + 2] = (unsigned char)(u >> 16);
            buf[k + 3] = (unsigned char)(u >> 24);
        }
        if (!kiln_write_all(fd, buf, k))
            return 0;
    }
    return 1;
}

kiln_status kiln_st_write(kiln_context *ctx, const char *path, const kiln_st_entry *entries,
                          size_t n, const char *const *meta_keys,
                          const char *const *meta_values, size_t n_meta)
{
    size_t hlen = 0;
    char *header = build_header(ctx, entries, n, meta_keys, meta_values, n_meta, &hlen);
    if (!header)
        return kiln_error_oom(ctx, "a safetensors header", hlen);
    char tmp[4200];
    kiln_status st = KILN_OK;
    kiln_remove_dead_temporaries(&ctx->host, path);
    const int fd = kiln_create_temporary(path, tmp, sizeof tmp);
    if (fd < 0) {
        kiln_free(ctx, header);
        return kiln_error(ctx, KILN_ERROR_IO, "cannot create %s: %s", tmp, strerror(errno));
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = kiln_write_all(fd, len, 8) && kiln_write_all(fd, header, hlen);
    for (size_t i = 0; i < n && ok; i++) {
        size_t count = 1;
        for (int d = 0; d < entries[i].rank; d++)
            count *= (size_t)entries[i].shape[d];
        ok = write_floats(fd, entries[i].data, count);
    }
    const int saved_errno = errno;
    ok = ok && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    kiln_free(ctx, header);
    if (!ok) {
        st = kiln_error(ctx, KILN_ERROR_IO, "writing %s failed: %s; %s is unchanged", tmp,
                        strerror(saved_errno ? saved_errno : errno), path);
        unlink(tmp);
        kiln_temporary_closed();
        return st;
    }
    if (rename(tmp, path) != 0) {
        st = kiln_error(ctx, KILN_ERROR_IO, "renaming %s to %s failed: %s", tmp, path,
                        strerror(errno));
        unlink(tmp);
        kiln_temporary_closed();
        return st;
    }
    kiln_temporary_closed();
    kiln_sync_folder_of(path);   /* the rename itself must survive a crash */
    return KILN_OK;
}
