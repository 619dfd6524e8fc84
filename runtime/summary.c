/* kiln_model_summary: the Keras-style table of a model's layers. */
#include "runtime/context.h"
#include "runtime/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends to a bounded buffer, counting what did not fit. */
typedef struct text_out {
    char *text;
    size_t size, length;
} text_out;

static void out(text_out *t, const char *fmt, ...) KILN_PRINTF(2, 3);

static void out(text_out *t, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    const size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (t->length + 1 < t->size) {
        const size_t room = t->size - 1 - t->length;
        memcpy(t->text + t->length, line, len < room ? len : room);
        t->text[t->length + (len < room ? len : room)] = '\0';
    }
    t->length += len;
}

/* 1234567 -> "1,234,567" */
static const char *grouped(int64_t v, char *buf, size_t size)
{
    char digits[32];
    const int n = snprintf(digits, sizeof digits, "%lld", (long long)v);
    size_t at = 0;
    for (int i = 0; i < n && at + 1 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0 && at + 2 < size)
            buf[at++] = ',';
        buf[at++] = digits[i];
    }
    buf[at] = '\0';
    return buf;
}

static int64_t node_params(const kiln_node_rec *node, int trainable_only)
{
    int64_t n = 0;
    for (int p = 0; p < node->n_params; p++)
        if (!trainable_only || !node->params[p].non_trainable)
            n += kiln_shape_size(&node->params[p].shape);
    return n;
}

kiln_status kiln_model_summary(const kiln_model *m, char *text, size_t size, size_t *length)
{
    if (!m || (!text && size > 0))
        return KILN_ERROR_INVALID_ARGUMENT;
    if (m->build_status != KILN_OK)
        return kiln_error(m->ctx, m->build_status, "kiln_model_summary: the model failed to "
                          "build: %s", m->build_error);
    text_out t = {text, size, 0};
    if (size > 0)
        text[0] = '\0';
    const char *rule = "============================================================"
                       "====================================";
    out(&t, "%-50s %-20s %11s  %s\n", "Layer (type)", "Output Shape", "Param #",
        "Connected to");
    out(&t, "%s\n", rule);
    int64_t total = 0, trainable = 0;
    for (int32_t i = 0; i < m->n_nodes; i++) {
        const kiln_node_rec *node = &m->nodes[i];
        char label[160], shape[64] = "(None", count[32];
        snprintf(label, sizeof label, "%s (%s)", node->name, node->ops->kind);
        for (int d = 0; d < node->shape.rank; d++) {
            const size_t used = strlen(shape);
            snprintf(shape + used, sizeof shape - used, ", %d", (int)node->shape.dims[d]);
        }
        strcat(shape, ")");
        const int64_t params = node_params(node, 0);
        total += params;
        trainable += node_params(node, 1);
        out(&t, "%-50s %-20s %11s", label, shape, grouped(params, count, sizeof count));
        for (int k = 0; k < node->n_inputs; k++)
            out(&t, "%s%s", k ? ", " : "  ", m->nodes[node->inputs[k]].name);
        out(&t, "\n");
    }
    char a[32], b[32], c[32];
    out(&t, "%s\nTotal params: %s\nTrainable params: %s\nNon-trainable params: %s\n", rule,
        grouped(total, a, sizeof a), grouped(trainable, b, sizeof b),
        grouped(total - trainable, c, sizeof c));
    if (length)
        *length = t.length;
    return KILN_OK;
}
