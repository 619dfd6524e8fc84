/* What the layer kinds' import ops share (onnx_import.h). */
#include "layers/onnx_import.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const kiln_onnx_in_attr *kiln_onnx_find_attr(const kiln_onnx_import *imp, const char *name)
{
    for (size_t k = 0; k < imp->n_attrs; k++)
        if (strcmp(imp->attrs[k].name, name) == 0)
            return &imp->attrs[k];
    return NULL;
}

int64_t kiln_onnx_attr_i(const kiln_onnx_import *imp, const char *name, int64_t fallback)
{
    const kiln_onnx_in_attr *a = kiln_onnx_find_attr(imp, name);
    return a && a->kind == KILN_ONNX_IN_INT ? a->i : fallback;
}

float kiln_onnx_attr_f(const kiln_onnx_import *imp, const char *name, float fallback)
{
    const kiln_onnx_in_attr *a = kiln_onnx_find_attr(imp, name);
    return a && a->kind == KILN_ONNX_IN_FLOAT ? a->f : fallback;
}

kiln_status kiln_onnx_refuse(kiln_onnx_import *imp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(imp->error, sizeof imp->error, fmt, ap);
    va_end(ap);
    return KILN_ERROR_UNSUPPORTED;
}

/* `known` lists "name:kind" entries, kind one of i, f, I (ints), s. */
kiln_status kiln_onnx_check_attrs(kiln_onnx_import *imp, const char *known)
{
    static const char kinds[] = {[KILN_ONNX_IN_INT] = 'i', [KILN_ONNX_IN_FLOAT] = 'f',
                                 [KILN_ONNX_IN_INTS] = 'I', [KILN_ONNX_IN_STRING] = 's',
                                 [KILN_ONNX_IN_OTHER] = '?'};
    for (size_t k = 0; k < imp->n_attrs; k++) {
        const kiln_onnx_in_attr *a = &imp->attrs[k];
        const size_t len = strlen(a->name);
        const char *at = known;
        int found = 0;
        while (!found && len && (at = strstr(at, a->name)) != NULL) {
            found = (at == known || at[-1] == ',') && at[len] == ':' &&
                    at[len + 1] == kinds[a->kind];
            at += len;
        }
        if (!found)
            return kiln_onnx_refuse(imp, "attribute '%s' is not supported (%s reads %s)",
                                    a->name, imp->op, *known ? known : "no attributes");
    }
    return KILN_OK;
}

kiln_status kiln_onnx_need_constant(kiln_onnx_import *imp, int k, const char *what,
                                    int optional)
{
    if (k >= imp->n_in || !*imp->in[k].name)
        return optional ? KILN_OK : kiln_onnx_refuse(imp, "input %d (%s) is missing", k, what);
    if (!imp->in[k].data)
        return kiln_onnx_refuse(imp, "input %d (%s) '%s' is computed by the graph; kiln takes "
                                "it only as an initializer", k, what, imp->in[k].name);
    return KILN_OK;
}

kiln_status kiln_onnx_clip_bounds(kiln_onnx_import *imp, float *lo, float *hi)
{
    *lo = kiln_onnx_attr_f(imp, "min", -INFINITY);
    *hi = kiln_onnx_attr_f(imp, "max", INFINITY);
    float *bound[] = {lo, hi};
    static const char *const what[] = {"min", "max"};
    for (int k = 1; k <= 2; k++) {
        const kiln_status st = kiln_onnx_need_constant(imp, k, what[k - 1], 1);
        if (st != KILN_OK)
            return st;
        if (k >= imp->n_in || !*imp->in[k].name)
            continue;
        const kiln_onnx_in *t = &imp->in[k];
        int64_t size = 1;
        for (int d = 0; d < t->rank; d++)
            size *= t->dims[d];
        if (size != 1)
            return kiln_onnx_refuse(imp, "input %d (%s) '%s' holds %lld values; Clip takes one",
                                    k, what[k - 1], t->name, (long long)size);
        *bound[k - 1] = t->data[0];
    }
    return KILN_OK;
}

void kiln_onnx_param_from(kiln_onnx_import *imp, int p, int k, kiln_onnx_param_layout layout)
{
    imp->param_input[p] = k;
    imp->param_layout[p] = layout;
    if (p + 1 > imp->n_params)
        imp->n_params = p + 1;
}

/* The ints attribute `name` as n values, or `fallback` in each. */
static int ints_attr(kiln_onnx_import *imp, const char *name, size_t n, int64_t fallback,
                     int64_t *out)
{
    const kiln_onnx_in_attr *a = kiln_onnx_find_attr(imp, name);
    for (size_t k = 0; k < n; k++)
        out[k] = fallback;
    if (!a)
        return 1;
    if (a->n_ints != n)
        return 0;
    memcpy(out, a->ints, n * sizeof *out);
    return 1;
}

kiln_status kiln_onnx_window(kiln_onnx_import *imp, int dilated, kiln_onnx_window_spec *w)
{
    int64_t k[2], s[2], d[2], p[4];
    if (!ints_attr(imp, "kernel_shape", 2, 0, k))
        return kiln_onnx_refuse(imp, "attribute 'kernel_shape' must have 2 values (2-D "
                                "windows only)");
    if (!kiln_onnx_find_attr(imp, "kernel_shape")) {
        k[0] = w->kernel[0];
        k[1] = w->kernel[1];
    }
    if (k[0] < 1 || k[1] < 1 || k[0] > INT32_MAX || k[1] > INT32_MAX)
        return kiln_onnx_refuse(imp, "attribute 'kernel_shape' is %s", kiln_onnx_find_attr(imp,
                                "kernel_shape") ? "not two positive sizes" : "missing");
    if (!ints_attr(imp, "strides", 2, 1, s) || s[0] < 1 || s[1] < 1 || s[0] > INT32_MAX ||
        s[1] > INT32_MAX)
        return kiln_onnx_refuse(imp, "attribute 'strides' must be two positive strides");
    if (!ints_attr(imp, "dilations", 2, 1, d) || d[0] < 1 || d[1] < 1 || d[0] > INT32_MAX ||
        d[1] > INT32_MAX)
        return kiln_onnx_refuse(imp, "attribute 'dilations' must be two positive dilations");
    if (!dilated && (d[0] != 1 || d[1] != 1))
        return kiln_onnx_refuse(imp, "attribute 'dilations' is (%lld, %lld); kiln pools "
                                "contiguous windows only (1, 1)", (long long)d[0],
                                (long long)d[1]);
    if (!ints_attr(imp, "pads", 4, 0, p))
        return kiln_onnx_refuse(imp, "attribute 'pads' must have 4 values (2-D windows)");
    for (int a = 0; a < 4; a++)
        if (p[a] < 0 || p[a] > INT32_MAX)
            return kiln_onnx_refuse(imp, "attribute 'pads' (%lld, %lld, %lld, %lld) holds a "
                                    "pad below 0", (long long)p[0], (long long)p[1],
                                    (long long)p[2], (long long)p[3]);
    const kiln_onnx_in_attr *ap = kiln_onnx_find_attr(imp, "auto_pad");
    const char *auto_pad = ap && ap->kind == KILN_ONNX_IN_STRING ? ap->s : "NOTSET";
    for (int a = 0; a < 2; a++) {
        w->kernel[a] = (int32_t)k[a];
        w->strides[a] = (int32_t)s[a];
        w->dilations[a] = (int32_t)d[a];
    }
    memset(w->pads, 0, sizeof w->pads);
    if (strcmp(auto_pad, "VALID") == 0) {
        w->padding = KILN_PADDING_VALID;
        return KILN_OK;
    }
    if (strcmp(auto_pad, "SAME_UPPER") == 0) {   /* the odd pixel after: Keras's 'same' */
        w->padding = KILN_PADDING_SAME;
        return KILN_OK;
    }
    if (strcmp(auto_pad, "SAME_LOWER") == 0) {
        /* ONNX's SAME_LOWER: 'same''s total padding, the odd pixel before. */
        for (int a = 0; a < 2; a++) {
            const int64_t in = imp->in[0].dims[2 + a];
            const int64_t out = (in + s[a] - 1) / s[a];
            const int64_t span = (k[a] - 1) * d[a] + 1;
            int64_t total = (out - 1) * s[a] + span - in;
            total = total > 0 ? total : 0;
            if (in < 1 || total > INT32_MAX)
                return kiln_onnx_refuse(imp, "attribute 'auto_pad' SAME_LOWER needs input 0's "
                                        "size, which is %lld", (long long)in);
            w->pads[a] = (int32_t)(total - total / 2);
            w->pads[a + 2] = (int32_t)(total / 2);
        }
        w->padding = KILN_PADDING_EXPLICIT;
        return KILN_OK;
    }
    if (strcmp(auto_pad, "NOTSET") != 0)
        return kiln_onnx_refuse(imp, "attribute 'auto_pad' is '%s'; kiln supports NOTSET, "
                                "VALID, SAME_UPPER and SAME_LOWER", auto_pad);
    if (!p[0] && !p[1] && !p[2] && !p[3]) {
        w->padding = KILN_PADDING_VALID;
        return KILN_OK;
    }
    /* ONNX's pads are (x1_begin, x2_begin, x1_end, x2_end): kiln's (top,
     * left, bottom, right). */
    for (int a = 0; a < 4; a++)
        w->pads[a] = (int32_t)p[a];
    w->padding = KILN_PADDING_EXPLICIT;
    return KILN_OK;
}

void kiln_onnx_param_convert(const kiln_onnx_in *t, kiln_onnx_param_layout layout, float *dst)
{
    int64_t size = 1;
    for (int d = 0; d < t->rank; d++)
        size *= t->dims[d];
    if (layout == KILN_ONNX_PARAM_OIHW) {
        const int64_t f = t->dims[0], c = t->dims[1], kh = t->dims[2], kw = t->dims[3];
        for (int64_t o = 0; o < f; o++)
            for (int64_t i = 0; i < c; i++)
                for (int64_t y = 0; y < kh; y++)
                    for (int64_t x = 0; x < kw; x++)
                        dst[((y * kw + x) * c + i) * f + o] = t->data[((o * c + i) * kh + y) * kw
                                                                      + x];
    } else if (layout == KILN_ONNX_PARAM_TRANSPOSED) {
        const int64_t a = t->dims[0], b = t->dims[1];
        for (int64_t r = 0; r < a; r++)
            for (int64_t q = 0; q < b; q++)
                dst[q * a + r] = t->data[r * b + q];
    } else {
        memcpy(dst, t->data, (size_t)size * sizeof *dst);
    }
}
