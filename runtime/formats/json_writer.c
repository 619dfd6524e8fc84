#include "runtime/formats/json_writer.h"

#include "runtime/context/context.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kiln_jw_init(kiln_jw *w, kiln_context *ctx)
{
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
}

void kiln_jw_free(kiln_jw *w)
{
    kiln_free(w->ctx, w->text);
    w->text = NULL;
    w->length = w->capacity = 0;
}

static void fail(kiln_jw *w, kiln_status status, const char *why)
{
    if (w->status != KILN_OK)
        return;
    w->status = status;
    snprintf(w->why, sizeof w->why, "%s", why);
}

static void put(kiln_jw *w, const char *s, size_t n)
{
    if (w->status != KILN_OK)
        return;
    if (w->capacity - w->length < n + 1) {
        size_t cap = w->capacity ? w->capacity : 1024;
        while (cap - w->length < n + 1)
            cap *= 2;
        char *grown = kiln_realloc(w->ctx, w->text, cap);
        if (!grown) {
            kiln_error_oom(w->ctx, "a JSON text", cap);
            fail(w, KILN_ERROR_OUT_OF_MEMORY, "out of memory");
            return;
        }
        w->text = grown;
        w->capacity = cap;
    }
    memcpy(w->text + w->length, s, n);
    w->length += n;
    w->text[w->length] = '\0';
}

/* Before any value: the comma that separates it from the one before. */
static void separate(kiln_jw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->depth > 0 && w->items[w->depth - 1]++ > 0)
        put(w, ",", 1);
}

static void open_level(kiln_jw *w, const char *bracket)
{
    separate(w);
    if (w->depth == KILN_JW_MAX_DEPTH) {
        fail(w, KILN_ERROR_INVALID_ARGUMENT, "JSON nested too deeply");
        return;
    }
    put(w, bracket, 1);
    w->items[w->depth++] = 0;
}

static void close_level(kiln_jw *w, const char *bracket)
{
    if (w->depth > 0)
        w->depth--;
    put(w, bracket, 1);
}

void kiln_jw_begin_object(kiln_jw *w)
{
    open_level(w, "{");
}

void kiln_jw_end_object(kiln_jw *w)
{
    close_level(w, "}");
}

void kiln_jw_begin_array(kiln_jw *w)
{
    open_level(w, "[");
}

void kiln_jw_end_array(kiln_jw *w)
{
    close_level(w, "]");
}

/* Length of the UTF-8 sequence at p, or 0 if it is not one JSON allows
 * (overlong forms, surrogates, past U+10FFFF): json.c reads the same. */
static int utf8_length(const unsigned char *p)
{
    const unsigned c = p[0];
    int n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)   /* also stops at the NUL */
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

static void put_string(kiln_jw *w, const char *s)
{
    put(w, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p && w->status == KILN_OK) {
        const char *simple = NULL;
        switch (*p) {
        case '"': simple = "\\\""; break;
        case '\\': simple = "\\\\"; break;
        case '\b': simple = "\\b"; break;
        case '\f': simple = "\\f"; break;
        case '\n': simple = "\\n"; break;
        case '\r': simple = "\\r"; break;
        case '\t': simple = "\\t"; break;
        default: break;
        }
        if (simple) {
            put(w, simple, 2);
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)*p);
            put(w, esc, 6);
            p++;
        } else {
            const int n = utf8_length(p);
            if (!n) {
                char why[160];
                snprintf(why, sizeof why, "'%.60s' is not valid UTF-8 (byte %d is 0x%02x)", s,
                         (int)(p - (const unsigned char *)s), (unsigned)*p);
                fail(w, KILN_ERROR_INVALID_ARGUMENT, why);
                return;
            }
            put(w, (const char *)p, (size_t)n);
            p += n;
        }
    }
    put(w, "\"", 1);
}

void kiln_jw_key(kiln_jw *w, const char *key)
{
    separate(w);
    put_string(w, key);
    put(w, ":", 1);
    w->after_key = 1;
    w->key = key;
}

void kiln_jw_string(kiln_jw *w, const char *s)
{
    separate(w);
    put_string(w, s);
}

void kiln_jw_int(kiln_jw *w, int64_t v)
{
    char text[32];
    separate(w);
    put(w, text, (size_t)snprintf(text, sizeof text, "%lld", (long long)v));
}

void kiln_jw_uint(kiln_jw *w, uint64_t v)
{
    char text[32];
    separate(w);
    put(w, text, (size_t)snprintf(text, sizeof text, "%llu", (unsigned long long)v));
}

/* printf writes the locale's decimal point; JSON's is '.'. */
static void c_locale_number(char *text)
{
    const char *point = localeconv()->decimal_point;
    if (!point || strcmp(point, ".") == 0 || !*point)
        return;
    char *at = strstr(text, point);
    if (!at)
        return;
    const size_t n = strlen(point);
    *at = '.';
    memmove(at + 1, at + n, strlen(at + n) + 1);
}

int kiln_json_number_to_double(const char *text, size_t length, double *out)
{
    char buf[64];
    if (length == 0 || length >= sizeof buf - 8)
        return 0;
    memcpy(buf, text, length);
    buf[length] = '\0';
    const char *point = localeconv()->decimal_point;
    char *dot = strchr(buf, '.');
    if (dot && point && *point && strcmp(point, ".") != 0 && strlen(point) < 8) {
        const size_t n = strlen(point);
        memmove(dot + n, dot + 1, strlen(dot + 1) + 1);
        memcpy(dot, point, n);
    }
    char *end;
    const double v = strtod(buf, &end);
    if (end == buf || *end != '\0' || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

/* The fewest significant digits (up to `most`) that read back as v. */
static void put_real(kiln_jw *w, double v, int is_float)
{
    separate(w);
    if (!isfinite(v)) {
        /* The key says which setting: an array's values go under its key. */
        char why[96];
        snprintf(why, sizeof why, "%.48s is %s, not a finite number",
                 w->key ? w->key : "a number", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        fail(w, KILN_ERROR_INVALID_ARGUMENT, why);
        return;
    }
    char text[48];
    const int most = is_float ? 9 : 17;
    for (int digits = 1; digits <= most; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, v);
        c_locale_number(text);
        double back;
        if (kiln_json_number_to_double(text, strlen(text), &back) &&
            (is_float ? (float)back == (float)v : back == v))
            break;
    }
    put(w, text, strlen(text));
}

void kiln_jw_float(kiln_jw *w, float v)
{
    put_real(w, (double)v, 1);
}

void kiln_jw_double(kiln_jw *w, double v)
{
    put_real(w, v, 0);
}

void kiln_jw_bool(kiln_jw *w, int v)
{
    separate(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void kiln_jw_null(kiln_jw *w)
{
    separate(w);
    put(w, "null", 4);
}

kiln_status kiln_jw_finish(kiln_jw *w, char **text, size_t *length)
{
    *text = NULL;
    *length = 0;
    if (w->status == KILN_OK && !w->text)
        put(w, "", 0);
    const kiln_status st = w->status;
    if (st != KILN_OK) {
        kiln_jw_free(w);
        return st;
    }
    *text = w->text;
    *length = w->length;
    w->text = NULL;
    w->capacity = w->length = 0;
    return KILN_OK;
}
