/* Private: a small JSON writer (the reader is json.h). Values go into one
 * growing text on the context's allocator; commas and nesting are kept
 * track of, strings are escaped. The first failure (out of memory, a
 * string that is not UTF-8, a number that is not finite, nesting past
 * KILN_JW_MAX_DEPTH) is kept and every later call does nothing, so a
 * writer checks once, at kiln_jw_finish. */
#ifndef KILN_RUNTIME_FORMATS_JSON_WRITER_H
#define KILN_RUNTIME_FORMATS_JSON_WRITER_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

#define KILN_JW_MAX_DEPTH 16

typedef struct kiln_jw {
    kiln_context *ctx;
    char *text;
    size_t length, capacity;
    int depth;
    int items[KILN_JW_MAX_DEPTH];   /* values written so far at each level */
    int after_key;                  /* a key was written: its value comes next */
    const char *key;                /* the last key (the caller's), for messages */
    kiln_status status;
    char why[160];
} kiln_jw;

void kiln_jw_init(kiln_jw *w, kiln_context *ctx);
/* Frees the text (after a failure, or when kiln_jw_finish was not called). */
void kiln_jw_free(kiln_jw *w);

void kiln_jw_begin_object(kiln_jw *w);
void kiln_jw_end_object(kiln_jw *w);
void kiln_jw_begin_array(kiln_jw *w);
void kiln_jw_end_array(kiln_jw *w);
/* A member's key; its value is the next call. */
void kiln_jw_key(kiln_jw *w, const char *key);

void kiln_jw_string(kiln_jw *w, const char *s);
void kiln_jw_int(kiln_jw *w, int64_t v);
void kiln_jw_uint(kiln_jw *w, uint64_t v);
/* Shortest text that reads back as the same float (9 significant digits)
 * or double (17), with a '.' whatever the locale. */
void kiln_jw_float(kiln_jw *w, float v);
void kiln_jw_double(kiln_jw *w, double v);
void kiln_jw_bool(kiln_jw *w, int v);
void kiln_jw_null(kiln_jw *w);

/* Hands over the NUL-terminated text (free it with kiln_free) and its
 * length, or returns the first failure: KILN_ERROR_OUT_OF_MEMORY with the
 * context's message set, or KILN_ERROR_INVALID_ARGUMENT with w->why saying
 * what (the caller names its call). The writer is freed either way. */
kiln_status kiln_jw_finish(kiln_jw *w, char **text, size_t *length);

/* Reads a JSON number's text (as kiln_json keeps it) as a double, whatever
 * the locale; 0 if it is not a finite number. */
int kiln_json_number_to_double(const char *text, size_t length, double *out);

#endif
