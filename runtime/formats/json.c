#include "runtime/formats/json.h"

#include "runtime/context/context.h"

#include <string.h>

#define JSON_MAX_DEPTH 16

#define JSON_BLOCK 65536

/* The arena: blocks chained through their first word. */
typedef struct block {
    struct block *next;
    size_t used, capacity;
} block;

typedef struct parser {
    kiln_context *ctx;
    const char *what;
    const unsigned char *p, *start, *end;
    block *blocks;
    int depth;
    const char *error;
} parser;

static void *take(parser *ps, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    block *b = ps->blocks;
    if (!b || bytes > b->capacity - b->used) {
        const size_t capacity = bytes > JSON_BLOCK ? bytes : JSON_BLOCK;
        block *fresh = kiln_alloc(ps->ctx, sizeof(block) + 16 + capacity);
        if (!fresh) {
            ps->error = "out of memory";
            return NULL;
        }
        fresh->next = b;
        fresh->used = 0;
        fresh->capacity = capacity;
        ps->blocks = b = fresh;
    }
    unsigned char *base = (unsigned char *)b + ((sizeof(block) + 15) & ~(size_t)15);
    void *out = base + b->used;
    b->used += bytes;
    memset(out, 0, bytes);
    return out;
}

static void free_blocks(kiln_context *ctx, block *b)
{
    while (b) {
        block *next = b->next;
        kiln_free(ctx, b);
        b = next;
    }
}

static void skip_space(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
                               *ps->p == '\r'))
        ps->p++;
}

static int fail(parser *ps, const char *why)
{
    if (!ps->error)
        ps->error = why;
    return 0;
}

/* Length of the UTF-8 sequence at p (1-4), or 0 if it is not valid:
 * overlong forms, surrogates and code points past U+10FFFF are rejected. */
static int utf8_length(const unsigned char *p, const unsigned char *end)
{
    const unsigned c = p[0];
    int n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (end - p < n)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

static int hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        const unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(unsigned char *dst, unsigned cp)
{
    if (cp < 0x80) {
        dst[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (unsigned char)(0xc0 | cp >> 6);
        dst[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (unsigned char)(0xe0 | cp >> 12);
        dst[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        dst[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    dst[0] = (unsigned char)(0xf0 | cp >> 18);
    dst[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    dst[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    dst[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at ps->p (the opening quote), decoded into the arena. */
static int parse_string(parser *ps, const char **out, size_t *length)
{
    ps->p++;
    const unsigned char *q = ps->p;
    /* Decoding never grows the text, so its raw length bounds the result. */
    while (q < ps->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    unsigned char *dst = take(ps, (size_t)(q - ps->p) + 1);
    if (!dst)
        return 0;
    size_t n = 0;
    while (*ps->p != '"') {
        const unsigned char c = *ps->p;
        if (c < 0x20)
            return fail(ps, "control character in a string");
        if (c != '\\') {
            const int len = utf8_length(ps->p, ps->end);
            if (!len)
                return fail(ps, "invalid UTF-8");
            memcpy(dst + n, ps->p, (size_t)len);
            n += (size_t)len;
            ps->p += len;
            continue;
        }
        const unsigned char e = ps->p[1];
        ps->p += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            dst[n++] = (unsigned char)decoded[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp;
        if (e != 'u' || ps->end - ps->p < 4 || !hex4(ps->p, &cp))
            return fail(ps, "bad escape in a string");
        ps->p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            unsigned low;
            if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                !hex4(ps->p + 2, &low) || low < 0xdc00 || low > 0xdfff)
                return fail(ps, "unpaired surrogate in a string");
            ps->p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            return fail(ps, "unpaired surrogate in a string");
        }
        if (cp == 0)
            return fail(ps, "NUL in a string");
        n += put_utf8(dst + n, cp);
    }
    ps->p++;
    dst[n] = '\0';
    *out = (const char *)dst;
    *length = n;
    return 1;
}

static int parse_value(parser *ps, kiln_json *v);

/* Arrays and objects: items are collected in a linked chunk list first,
 * then copied into one array. */
typedef struct chain {
    kiln_json value;
    const char *key;
    struct chain *next;
} chain;

static int parse_container(parser *ps, kiln_json *v, int object)
{
    if (++ps->depth > JSON_MAX_DEPTH)
        return fail(ps, "nested too deeply");
    ps->p++;
    chain *first = NULL, *last = NULL;
    size_t count = 0;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == (object ? '}' : ']')) {
        ps->p++;
    } else {
        for (;;) {
            chain *c = take(ps, sizeof *c);
            if (!c)
                return 0;
            skip_space(ps);
            if (object) {
                size_t klen;
                if (ps->p >= ps->end || *ps->p != '"')
                    return fail(ps, "expected a key");
                if (!parse_string(ps, &c->key, &klen))
                    return 0;
                for (chain *o = first; o; o = o->next)
                    if (strcmp(o->key, c->key) == 0)
                        return fail(ps, "duplicate key");
                skip_space(ps);
                if (ps->p >= ps->end || *ps->p != ':')
                    return fail(ps, "expected ':'");
                ps->p++;
            }
            if (!parse_value(ps, &c->value))
                return 0;
            if (last)
                last->next = c;
            else
                first = c;
            last = c;
            count++;
            skip_space(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == (object ? '}' : ']')) {
                ps->p++;
                break;
            }
            return fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    v->type = object ? KILN_JSON_OBJECT : KILN_JSON_ARRAY;
    v->count = count;
    v->items = count ? take(ps, count * sizeof *v->items) : NULL;
    if (object && count)
        v->keys = take(ps, count * sizeof *v->keys);
    if (count && (!v->items || (object && !v->keys)))
        return 0;
    size_t i = 0;
    for (chain *c = first; c; c = c->next, i++) {
        v->items[i] = c->value;
        if (object)
            v->keys[i] = c->key;
    }
    ps->depth--;
    return 1;
}

static int parse_number(parser *ps, kiln_json *v)
{
    const unsigned char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "bad number");
    if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')
        return fail(ps, "leading zero in a number");
    while (ps->p < ps->end && ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '.' ||
                               *ps->p == 'e' || *ps->p == 'E' || *ps->p == '+' ||
                               *ps->p == '-'))
        ps->p++;
    char *digits = take(ps, (size_t)(ps->p - s) + 1);
    if (!digits)
        return 0;
    memcpy(digits, s, (size_t)(ps->p - s));
    v->type = KILN_JSON_NUMBER;
    v->text = digits;
    v->length = (size_t)(ps->p - s);
    return 1;
}

static int literal(parser *ps, const char *word)
{
    const size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected character");
    ps->p += n;
    return 1;
}

static int parse_value(parser *ps, kiln_json *v)
{
    skip_space(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end");
    switch (*ps->p) {
    case '{': return parse_container(ps, v, 1);
    case '[': return parse_container(ps, v, 0);
    case '"':
        v->type = KILN_JSON_STRING;
        return parse_string(ps, &v->text, &v->length);
    case 't':
        v->type = KILN_JSON_BOOL;
        v->boolean = 1;
        return literal(ps, "true");
    case 'f':
        v->type = KILN_JSON_BOOL;
        return literal(ps, "false");
    case 'n':
        v->type = KILN_JSON_NULL;
        return literal(ps, "null");
    default:
        return parse_number(ps, v);
    }
}

kiln_status kiln_json_parse(kiln_context *ctx, const char *what, const char *text, size_t size,
                            kiln_json_doc *doc)
{
    memset(doc, 0, sizeof *doc);
    doc->ctx = ctx;
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.ctx = ctx;
    ps.what = what;
    ps.p = ps.start = (const unsigned char *)text;
    ps.end = ps.p + size;
    kiln_json *root = take(&ps, sizeof *root);
    int ok = root && parse_value(&ps, root);
    if (ok) {
        skip_space(&ps);
        if (ps.p != ps.end)
            ok = fail(&ps, "text after the JSON value");
    }
    if (!ok) {
        free_blocks(ctx, ps.blocks);
        if (ps.error && strcmp(ps.error, "out of memory") == 0)
            return kiln_error_oom(ctx, "a JSON header", size);
        return kiln_error(ctx, KILN_ERROR_FORMAT, "%s: malformed JSON header at byte %ld: %s",
                          what, (long)(ps.p - ps.start), ps.error ? ps.error : "error");
    }
    doc->root = root;
    doc->arena = ps.blocks;
    return KILN_OK;
}

void kiln_json_free(kiln_json_doc *doc)
{
    if (!doc)
        return;
    if (doc->arena)
        free_blocks(doc->ctx, doc->arena);
    memset(doc, 0, sizeof *doc);
}

const kiln_json *kiln_json_get(const kiln_json *o, const char *key)
{
    if (!o || o->type != KILN_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < o->count; i++)
        if (strcmp(o->keys[i], key) == 0)
            return &o->items[i];
    return NULL;
}

int kiln_json_uint(const kiln_json *v, uint64_t *out)
{
    if (!v || v->type != KILN_JSON_NUMBER || v->length == 0 || v->length > 16)
        return 0;
    uint64_t n = 0;
    for (size_t i = 0; i < v->length; i++) {
        if (v->text[i] < '0' || v->text[i] > '9')
            return 0;
        n = n * 10 + (uint64_t)(v->text[i] - '0');
    }
    if (n >= (1ull << 53))
        return 0;
    *out = n;
    return 1;
}

int kiln_json_put_string(char *buf, size_t size, size_t *at, const char *s)
{
    size_t n = *at;
    if (n >= size)
        return 0;
    buf[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        size_t len = 1;
        esc[0] = (char)*p;
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            len = 2;
        } else if (*p < 0x20) {
            static const char hexd[] = "0123456789abcdef";
            memcpy(esc, "\\u00", 4);
            esc[4] = hexd[*p >> 4];
            esc[5] = hexd[*p & 15];
            len = 6;
        }
        if (size - n < len + 1)
            return 0;
        memcpy(buf + n, esc, len);
        n += len;
    }
    if (size - n < 2)
        return 0;
    buf[n++] = '"';
    buf[n] = '\0';
    *at = n;
    return 1;
}
