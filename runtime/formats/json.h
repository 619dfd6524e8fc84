/* Private: a strict JSON parser for file headers that come from outside
 * (safetensors). Bounded depth, valid UTF-8 only, no duplicate keys, numbers
 * kept as text and read on demand. Values live in one allocation owned by
 * the kiln_json_doc. */
#ifndef KILN_RUNTIME_FORMATS_JSON_H
#define KILN_RUNTIME_FORMATS_JSON_H

#include "kiln.h"

#include <stddef.h>

typedef enum kiln_json_type {
    KILN_JSON_NULL, KILN_JSON_BOOL, KILN_JSON_NUMBER, KILN_JSON_STRING, KILN_JSON_ARRAY,
    KILN_JSON_OBJECT
} kiln_json_type;

typedef struct kiln_json kiln_json;
struct kiln_json {
    kiln_json_type type;
    const char *text;      /* string: decoded, NUL-terminated; number: its digits */
    size_t length;         /* string length in bytes */
    int boolean;
    kiln_json *items;      /* array items or object values */
    const char **keys;     /* object keys (decoded, NUL-terminated) */
    size_t count;
};

typedef struct kiln_json_doc {
    kiln_context *ctx;
    kiln_json *root;
    void *arena;
} kiln_json_doc;

/* Parses `size` bytes. On failure returns KILN_ERROR_FORMAT with a message
 * naming `what` (a file name) and the byte offset. */
kiln_status kiln_json_parse(kiln_context *ctx, const char *what, const char *text, size_t size,
                            kiln_json_doc *doc);
void kiln_json_free(kiln_json_doc *doc);

/* The member `key` of an object, or NULL. */
const kiln_json *kiln_json_get(const kiln_json *object, const char *key);
/* A non-negative integer below 2^53; returns 0 if the value is not one. */
int kiln_json_uint(const kiln_json *value, uint64_t *out);

/* Appends `s` as a JSON string literal (quoted, escaped) to buf at *at,
 * never past size; returns 0 if it did not fit. */
int kiln_json_put_string(char *buf, size_t size, size_t *at, const char *s);

#endif
