/* The training report: one HTML file a browser shows as it is (no script,
 * nothing fetched), rebuilt whole after every epoch. */
#include "runtime/train/report.h"

#include "runtime/data/dataset.h"
#include "runtime/model/loss.h"
#include "runtime/model/optimizer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Page layout in CSS pixels. The charts sit at fixed places, so a test of
 * the rendered page knows where to look (test/train/report_render.py). */
#define CHART_W 570
#define CHART_H 320
#define PLOT_X 70
#define PLOT_Y 44
#define PLOT_W 480
#define PLOT_H 230
#define AXIS_GAP 8      /* the axes stand off the plot: no curve hides them */
#define TABLES_TOP 770
#define N_CHARTS 4
static const int chart_left[N_CHARTS] = {20, 610, 20, 610};
static const int chart_top[N_CHARTS] = {84, 84, 424, 424};
static const char *const colours[2] = {"#1f77b4", "#ff7f0e"};

typedef enum quantity { Q_LOSS, Q_VAL_LOSS, Q_ACCURACY, Q_VAL_ACCURACY, Q_LR, Q_RATE } quantity;

typedef struct chart_spec {
    const char *id, *title, *axis, *desc;
    int n_series;
    quantity q[2];
    const char *name[2];
} chart_spec;

static const chart_spec charts[N_CHARTS] = {
    {.id = "loss", .title = "Loss", .axis = "loss", .n_series = 2,
     .desc = "Mean loss per epoch: training, and validation after the epoch.",
     .q = {Q_LOSS, Q_VAL_LOSS}, .name = {"training", "validation"}},
    {.id = "accuracy", .title = "Accuracy", .axis = "accuracy", .n_series = 2,
     .desc = "Accuracy per epoch: training, and validation after the epoch.",
     .q = {Q_ACCURACY, Q_VAL_ACCURACY}, .name = {"training", "validation"}},
    {.id = "learning-rate", .title = "Learning rate", .axis = "learning rate", .n_series = 1,
     .desc = "The schedule's learning rate at the end of each epoch (that of the next "
             "update); unknown for epochs of an earlier fit.",
     .q = {Q_LR}, .name = {"learning rate"}},
    {.id = "throughput", .title = "Throughput", .axis = "samples/s", .n_series = 1,
     .desc = "Training samples per second of each epoch (samples / seconds).",
     .q = {Q_RATE}, .name = {"training"}},
};

struct kiln_report {
    kiln_model *m;
    char *path;
    char *fixed_rows;    /* the run table's rows that do not change */
    char *fixed_tail;    /* devices and model summary */
    double *lr;          /* per history epoch; NaN: unknown */
    int32_t n_lr, cap_lr;
    int32_t first;       /* history length when fit began */
    int32_t total;       /* the history's length when fit ends */
    double started;
};

/* A growing string on the context's allocator; an allocation failure
 * sticks and is reported once, at the end. */
typedef struct sbuf {
    kiln_context *ctx;
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) KILN_PRINTF(2, 3);

static void put(sbuf *b, const char *fmt, ...)
{
    while (!b->oom) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 16384;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *grown = kiln_realloc(b->ctx, b->s, cap);
        if (!grown)
            b->oom = 1;
        else
            b->s = grown, b->cap = cap;
    }
}

/* Text as HTML character data or attribute value; control characters other
 * than newline and tab become '?'. */
static void put_text(sbuf *b, const char *s)
{
    while (*s) {
        size_t run = 0;
        while (s[run] && !strchr("&<>\"'", s[run]) &&
               ((unsigned char)s[run] >= 32 || s[run] == '\n' || s[run] == '\t'))
            run++;
        put(b, "%.*s", (int)run, s);
        s += run;
        switch (*s) {
        case '\0': return;
        case '&': put(b, "&amp;"); break;
        case '<': put(b, "&lt;"); break;
        case '>': put(b, "&gt;"); break;
        case '"': put(b, "&quot;"); break;
        case '\'': put(b, "&#39;"); break;
        default: put(b, "?");
        }
        s++;
    }
}

static char *take(sbuf *b)
{
    char *s = b->s;
    if (b->oom) {
        kiln_free(b->ctx, s);
        s = NULL;
    }
    *b = (sbuf){.ctx = b->ctx};
    return s;
}

static int value_of(const kiln_report *r, quantity q, int32_t i, double *v)
{
    const kiln_epoch_record *e = &r->m->training.history[i];
    switch (q) {
    case Q_LOSS: *v = e->loss; break;
    case Q_VAL_LOSS: *v = e->has_validation ? e->val_loss : NAN; break;
    case Q_ACCURACY: *v = e->accuracy >= 0 ? e->accuracy : NAN; break;
    case Q_VAL_ACCURACY: *v = e->has_validation && e->val_accuracy >= 0 ? e->val_accuracy : NAN;
        break;
    case Q_LR: *v = i < r->n_lr ? r->lr[i] : NAN; break;
    case Q_RATE: *v = e->seconds > 0 ? (double)e->samples / e->seconds : NAN; break;
    }
    return isfinite(*v);
}

/* 1, 2 or 5 times a power of ten, giving about `ticks` steps over span. */
static double nice_step(double span, int ticks)
{
    const double raw = span / ticks, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

typedef struct axis {
    double lo, hi, step;
} axis;

static axis value_axis(double lo, double hi)
{
    if (!(lo <= hi))
        lo = 0, hi = 1;                 /* no data */
    if (hi - lo <= fabs(hi) * 1e-9) {   /* flat: a band around the value */
        const double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    axis a = {.step = nice_step(hi - lo, 5)};
    a.lo = floor(lo / a.step) * a.step;
    a.hi = ceil(hi / a.step) * a.step;
    a.lo -= a.lo > lo ? a.step : 0;     /* rounding must not leave a value outside */
    a.hi += a.hi < hi ? a.step : 0;
    return a;
}

static void put_tick_label(sbuf *b, double v, double step)
{
    const int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) < step * 1e-6)
        v = 0;                          /* not "-0.0" */
    if (decimals > 5 || fabs(v) >= 1e7)
        put(b, "%.3g", v);
    else
        put(b, "%.*f", decimals, v);
}

static double x_pos(double epoch, double x_hi)
{
    return PLOT_X + (epoch - 1) / (x_hi - 1) * PLOT_W;
}

static double y_pos(double v, const axis *y)
{
    return PLOT_Y + PLOT_H - (v - y->lo) / (y->hi - y->lo) * PLOT_H;
}

static void put_axes(sbuf *b, const chart_spec *c, const axis *y, int32_t x_hi)
{
    const int left = PLOT_X - AXIS_GAP, base = PLOT_Y + PLOT_H + AXIS_GAP;
    put(b, "<g stroke=\"#444\" fill=\"none\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", left, PLOT_Y, left, PLOT_Y + PLOT_H,
        PLOT_X, base, PLOT_X + PLOT_W, base);
    const long first = lround(y->lo / y->step), last = lround(y->hi / y->step);
    for (long k = first; k <= last && k - first <= 20; k++)
        put(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>", left - 5,
            y_pos((double)k * y->step, y), left, y_pos((double)k * y->step, y));
    int32_t step = (int32_t)nice_step(x_hi - 1, 8);
    step = step < 1 ? 1 : step;
    for (int32_t e = 1; e <= x_hi; e++)
        if (e == 1 || e % step == 0)
            put(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>", x_pos(e, x_hi), base,
                x_pos(e, x_hi), base + 5);
    put(b, "</g>\n<g fill=\"#222\" text-anchor=\"end\">");
    for (long k = first; k <= last && k - first <= 20; k++) {
        put(b, "<text x=\"%d\" y=\"%.2f\">", left - 8, y_pos((double)k * y->step, y) + 4);
        put_tick_label(b, (double)k * y->step, y->step);
        put(b, "</text>");
    }
    put(b, "</g>\n<g fill=\"#222\" text-anchor=\"middle\">");
    for (int32_t e = 1; e <= x_hi; e++)
        if (e == 1 || e % step == 0)
            put(b, "<text x=\"%.2f\" y=\"%d\">%d</text>", x_pos(e, x_hi), base + 18, (int)e);
    put(b, "<text x=\"%d\" y=\"%d\">epoch</text><text transform=\"translate(14 %d) "
        "rotate(-90)\">", PLOT_X + PLOT_W / 2, CHART_H - 8, PLOT_Y + PLOT_H / 2);
    put_text(b, c->axis);
    put(b, "</text></g>\n");
}

/* One series: the polyline, with its numbers in data- attributes (exact,
 * %.17g) and a tooltip, then a dot per epoch. */
static void put_series(sbuf *b, const kiln_report *r, const chart_spec *c, int s,
                       const axis *y, int32_t x_hi)
{
    const int32_t n = r->m->training.n_history;
    double v;
    put(b, "<polyline class=\"series\" data-series=\"");
    put_text(b, c->name[s]);
    put(b, "\" data-epochs=\"");
    const char *sep = "";
    for (int32_t i = 0; i < n; i++)
        if (value_of(r, c->q[s], i, &v))
            put(b, "%s%d", sep, (int)i + 1), sep = " ";
    put(b, "\" data-values=\"");
    sep = "";
    for (int32_t i = 0; i < n; i++)
        if (value_of(r, c->q[s], i, &v))
            put(b, "%s%.17g", sep, v), sep = " ";
    put(b, "\" points=\"");
    sep = "";
    for (int32_t i = 0; i < n; i++)
        if (value_of(r, c->q[s], i, &v))
            put(b, "%s%.2f,%.2f", sep, x_pos(i + 1, x_hi), y_pos(v, y)), sep = " ";
    put(b, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-linejoin=\"round\">"
        "<title>", colours[s]);
    put_text(b, c->name[s]);
    put(b, " ");
    put_text(b, c->axis);
    for (int32_t i = 0; i < n; i++)
        if (value_of(r, c->q[s], i, &v))
            put(b, "\nepoch %d: %.6g", (int)i + 1, v);
    put(b, "</title></polyline>\n<g fill=\"%s\">", colours[s]);
    for (int32_t i = 0; i < n; i++)
        if (value_of(r, c->q[s], i, &v))
            put(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/>", x_pos(i + 1, x_hi),
                y_pos(v, y));
    put(b, "</g>\n");
}

static void put_chart(sbuf *b, const kiln_report *r, int which)
{
    const chart_spec *c = &charts[which];
    const int32_t n = r->m->training.n_history;
    double lo = INFINITY, hi = -INFINITY, v;
    int count[2] = {0, 0};
    for (int s = 0; s < c->n_series; s++)
        for (int32_t i = 0; i < n; i++)
            if (value_of(r, c->q[s], i, &v)) {
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
                count[s]++;
            }
    const axis y = value_axis(lo, hi);
    const int32_t x_hi = n > 2 ? n : 2;
    put(b, "<svg id=\"chart-%s\" class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\""
        " style=\"position:absolute;left:%dpx;top:%dpx\" data-plot=\"%d %d %d %d\" "
        "data-x-range=\"1 %d\" data-y-range=\"%.17g %.17g\" font-family=\"sans-serif\" "
        "font-size=\"11\">\n<title>", c->id, CHART_W, CHART_H, CHART_W, CHART_H,
        chart_left[which], chart_top[which], PLOT_X, PLOT_Y, PLOT_W, PLOT_H, (int)x_hi, y.lo,
        y.hi);
    put_text(b, c->title);
    put(b, "</title><desc>");
    put_text(b, c->desc);
    put(b, "</desc>\n<text x=\"%d\" y=\"18\" font-size=\"15\" font-weight=\"bold\" "
        "fill=\"#222\">", PLOT_X - AXIS_GAP);
    put_text(b, c->title);
    put(b, "</text>\n");
    put_axes(b, c, &y, x_hi);
    for (int s = 0, at = 0; s < c->n_series; s++)
        if (count[s]) {
            const int x = PLOT_X + PLOT_W - 120 * (c->n_series - at++);
            put(b, "<g class=\"legend\"><line x1=\"%d\" y1=\"29\" x2=\"%d\" y2=\"29\" "
                "stroke=\"%s\" stroke-width=\"2\"/><text x=\"%d\" y=\"33\" fill=\"#222\">", x,
                x + 24, colours[s], x + 30);
            put_text(b, c->name[s]);
            put(b, "</text></g>\n");
        }
    if (!count[0] && !count[1])
        put(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\" font-size=\"13\">"
            "%s</text>\n", PLOT_X + PLOT_W / 2, PLOT_Y + PLOT_H / 2,
            n ? "not measured" : "no epoch yet");
    for (int s = 0; s < c->n_series; s++)
        if (count[s])
            put_series(b, r, c, s, &y, x_hi);
    put(b, "</svg>\n");
}

static void put_cell(sbuf *b, const kiln_report *r, quantity q, int32_t i, const char *fmt)
{
    double v;
    put(b, "<td class=\"n\">");
    if (value_of(r, q, i, &v))
        put(b, fmt, v);
    else
        put(b, "&#8211;");
    put(b, "</td>");
}

static void put_epochs_table(sbuf *b, const kiln_report *r)
{
    static const char *const heads[] = {"epoch", "loss", "accuracy", "val loss",
                                        "val accuracy", "learning rate", "samples", "seconds",
                                        "samples/s", "skipped steps"};
    put(b, "<h2>Epochs</h2>\n<table id=\"epochs\"><tr>");
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++)
        put(b, "<th>%s</th>", heads[i]);
    put(b, "</tr>\n");
    for (int32_t i = 0; i < r->m->training.n_history; i++) {
        const kiln_epoch_record *e = &r->m->training.history[i];
        put(b, "<tr><td class=\"n\">%d</td>", (int)i + 1);
        put_cell(b, r, Q_LOSS, i, "%.4f");
        put_cell(b, r, Q_ACCURACY, i, "%.4f");
        put_cell(b, r, Q_VAL_LOSS, i, "%.4f");
        put_cell(b, r, Q_VAL_ACCURACY, i, "%.4f");
        put_cell(b, r, Q_LR, i, "%.4g");
        put(b, "<td class=\"n\">%lld</td><td class=\"n\">%.2f</td>", (long long)e->samples,
            e->seconds);
        put_cell(b, r, Q_RATE, i, "%.0f");
        put(b, "<td class=\"n\">%lld</td></tr>\n", (long long)e->skipped_steps);
    }
    put(b, "</table>\n");
}

/* Several outputs: each one's values per epoch by Keras's names. */
static void put_outputs_table(sbuf *b, const kiln_report *r)
{
    const kiln_model *m = r->m;
    if (!kiln_model_outputs_apart(m))
        return;
    put(b, "<h2>Outputs</h2>\n<table id=\"outputs\"><tr><th>epoch</th>");
    for (int val = 0; val < 2; val++)
        for (int32_t k = 0; k < m->graph.n_outputs; k++) {
            put(b, "<th>%s", val ? "val_" : "");
            put_text(b, m->graph.nodes[m->graph.outputs[k]].name);
            put(b, "_loss</th>");
            if (!m->plan.heads[k].accuracy)
                continue;
            put(b, "<th>%s", val ? "val_" : "");
            put_text(b, m->graph.nodes[m->graph.outputs[k]].name);
            put(b, "_accuracy</th>");
        }
    put(b, "</tr>\n");
    for (int32_t i = 0; i < m->training.n_history; i++) {
        const kiln_epoch_record *e = &m->training.history[i];
        put(b, "<tr><td class=\"n\">%d</td>", (int)i + 1);
        for (int val = 0; val < 2; val++)
            for (int32_t k = 0; k < m->graph.n_outputs; k++) {
                const kiln_output_metrics *o = val ? &e->val_outputs[k] : &e->outputs[k];
                const int known = !val || e->has_validation;
                for (int acc = 0; acc <= m->plan.heads[k].accuracy; acc++) {
                    if (known)
                        put(b, "<td class=\"n\">%.4f</td>", acc ? o->accuracy : o->loss);
                    else
                        put(b, "<td class=\"n\">&#8211;</td>");
                }
            }
        put(b, "</tr>\n");
    }
    put(b, "</table>\n");
}

/* "sparse_categorical_crossentropy", or for several outputs each one's
 * loss and weight. */
static void loss_text(const kiln_model *m, char *buf, size_t size)
{
    if (!kiln_model_outputs_apart(m)) {
        snprintf(buf, size, "%s", kiln_loss_name(m->plan.heads[0].loss));
        return;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (int32_t k = 0; k < m->graph.n_outputs && at < size; k++) {
        const int n =
            snprintf(buf + at, size - at, "%s%s: %s x %g", k ? ", " : "",
                     m->graph.nodes[m->graph.outputs[k]].name,
                     kiln_loss_name(m->plan.heads[k].loss), (double)m->plan.head_weight[k]);
        at += n > 0 ? (size_t)n : 0;
    }
}

static void put_row(sbuf *b, const char *key, const char *value)
{
    put(b, "<tr><th>");
    put_text(b, key);
    put(b, "</th><td>");
    put_text(b, value);
    put(b, "</td></tr>\n");
}

static void local_time(char *buf, size_t size)
{
    const time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, size, "?");
}

/* `ended`: fit returned `status` (with `message`); else training goes on. */
static char *build_page(const kiln_report *r, int ended, kiln_status status,
                        const char *message)
{
    sbuf b = {.ctx = r->m->ctx};
    const int32_t n = r->m->training.n_history;
    char state[256], line[256], now[64];
    double seconds = 0;
    for (int32_t i = r->first; i < n; i++)
        seconds += r->m->training.history[i].seconds;
    if (!ended)
        snprintf(state, sizeof state, "Training: %d of %d epochs done", (int)n, (int)r->total);
    else if (status == KILN_OK)
        snprintf(state, sizeof state, "Finished: %d epochs", (int)n);
    else
        snprintf(state, sizeof state, "Stopped after %d of %d epochs: %s", (int)n,
                 (int)r->total, kiln_status_name(status));
    local_time(now, sizeof now);
    put(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    if (!ended)   /* a person watching sees each epoch come in */
        put(&b, "<meta http-equiv=\"refresh\" content=\"10\">\n");
    put(&b, "<title>");
    put_text(&b, state);
    put(&b, " &#8212; kiln training report</title>\n<style>\n"
        "body{margin:0;background:#fff;color:#222;font:14px sans-serif}\n"
        "h1{font-size:22px;margin:0}h2{font-size:17px;margin:18px 0 6px}\n"
        "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:3px 8px;"
        "text-align:left;vertical-align:top}\ntd.n{text-align:right;"
        "font-variant-numeric:tabular-nums}\n"
        "pre{background:#f6f6f6;border:1px solid #ddd;padding:8px;font-size:12px;"
        "overflow-x:auto}\n</style>\n</head>\n<body>\n"
        "<div id=\"head\" style=\"position:absolute;left:20px;top:14px;width:1160px;"
        "height:60px;overflow:hidden\">\n<h1>kiln training report</h1>\n"
        "<p id=\"status\" style=\"margin:8px 0 0\">");
    put_text(&b, state);
    put(&b, " &#183; updated ");
    put_text(&b, now);
    put(&b, "</p>\n</div>\n");
    for (int i = 0; i < N_CHARTS; i++)
        put_chart(&b, r, i);
    put(&b, "<div id=\"tables\" style=\"position:absolute;left:20px;top:%dpx;width:1160px\">\n",
        TABLES_TOP);
    put_epochs_table(&b, r);
    put_outputs_table(&b, r);
    put(&b, "<h2>Run</h2>\n<table id=\"run\">\n");
    put_row(&b, "status", state);
    if (ended && status != KILN_OK)
        put_row(&b, "error", message);
    put_row(&b, "updated", now);
    snprintf(line, sizeof line, "%.2f s in %d epochs of this fit (%.2f s per epoch)", seconds,
             (int)(n - r->first), n > r->first ? seconds / (n - r->first) : 0.0);
    put_row(&b, "time", line);
    put(&b, "%s</table>\n%s</div>\n</body>\n</html>\n", r->fixed_rows, r->fixed_tail);
    return take(&b);
}

/* Written whole to "<path>.tmp-<pid>-<n>" and renamed over the path: a
 * browser reloading the page never reads half a report. No fsync: the next
 * epoch writes it again, and nothing reads it back. On failure, `why` says
 * what failed (KILN_ERROR_IO, KILN_ERROR_OUT_OF_MEMORY). */
static kiln_status write_atomically(const kiln_report *r, const char *page, char *why,
                                    size_t size)
{
    static unsigned long counter;   /* atomic: two models may write at once */
    kiln_context *ctx = r->m->ctx;
    const size_t tmp_size = strlen(r->path) + 64;
    char *tmp = kiln_alloc(ctx, tmp_size);
    if (!tmp) {
        snprintf(why, size, "out of host memory for a file name");
        return KILN_ERROR_OUT_OF_MEMORY;
    }
    snprintf(tmp, tmp_size, "%s.tmp-%ld-%lu", r->path, (long)getpid(),
             __atomic_fetch_add(&counter, 1UL, __ATOMIC_RELAXED));
    int err = 0;
    const char *doing = "create";
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        err = errno;
    } else {
        const size_t n = strlen(page);
        size_t done = 0;
        while (done < n && !err) {
            const ssize_t k = write(fd, page + done, n - done);
            if (k > 0)
                done += (size_t)k;
            else if (k < 0 && errno != EINTR)
                err = errno, doing = "write";
        }
        if (close(fd) != 0 && !err)
            err = errno, doing = "write";
        if (!err && rename(tmp, r->path) != 0)
            err = errno, doing = "rename";
        if (err)
            unlink(tmp);
    }
    if (err)
        snprintf(why, size, "cannot %s %s%s: %s", doing, tmp,
                 strcmp(doing, "rename") ? "" : " over it", strerror(err));
    kiln_free(ctx, tmp);
    return err ? KILN_ERROR_IO : KILN_OK;
}

static kiln_status write_page(const kiln_report *r, int ended, kiln_status status,
                              const char *message, char *why, size_t size)
{
    char *page = build_page(r, ended, status, message);
    if (!page) {
        snprintf(why, size, "out of host memory for the page");
        return KILN_ERROR_OUT_OF_MEMORY;
    }
    const kiln_status st = write_atomically(r, page, why, size);
    kiln_free(r->m->ctx, page);
    return st;
}

static const char *schedule_name(kiln_lr_schedule_kind kind)
{
    switch (kind) {
    case KILN_LR_STEP_DECAY: return "step decay";
    case KILN_LR_EXPONENTIAL_DECAY: return "exponential decay";
    case KILN_LR_COSINE_DECAY: return "cosine decay";
    case KILN_LR_PIECEWISE_CONSTANT_DECAY: return "piecewise constant decay";
    default: return "constant";
    }
}

static const char *device_type_name(kiln_device_type type)
{
    switch (type) {
    case KILN_DEVICE_CPU: return "CPU";
    case KILN_DEVICE_GPU: return "GPU";
    case KILN_DEVICE_ACCELERATOR: return "accelerator";
    default: return "other";
    }
}

static kiln_status put_devices(sbuf *b, kiln_context *ctx)
{
    int32_t n = 0;
    kiln_status st = kiln_context_device_count(ctx, &n);
    put(b, "<h2>Devices</h2>\n<table id=\"devices\"><tr><th>#</th><th>type</th><th>name</th>"
        "<th>vendor</th><th>platform</th><th>driver</th><th>memory</th>"
        "<th>compute units</th><th>clock</th><th>GEMM</th></tr>\n");
    for (int32_t i = 0; i < n && st == KILN_OK; i++) {
        kiln_device_info d;
        memset(&d, 0, sizeof d);
        d.struct_size = sizeof d;
        st = kiln_context_device_info(ctx, i, &d);
        if (st != KILN_OK)
            break;
        put(b, "<tr><td class=\"n\">%d</td><td>%s</td><td>", (int)d.index,
            device_type_name(d.type));
        put_text(b, d.name);
        put(b, "</td><td>");
        put_text(b, d.vendor);
        put(b, "</td><td>");
        put_text(b, d.platform);
        put(b, "</td><td>");
        put_text(b, d.driver_version);
        put(b, "</td><td class=\"n\">%.1f GiB</td><td class=\"n\">%u</td><td class=\"n\">%u MHz"
            "</td><td>", (double)d.global_memory_bytes / (1024.0 * 1024.0 * 1024.0),
            (unsigned)d.compute_units, (unsigned)d.max_clock_mhz);
        put_text(b, d.gemm_parameters);
        put(b, "</td></tr>\n");
    }
    put(b, "</table>\n");
    return st;
}

/* What stays the same during the fit: the run's settings, the devices and
 * the model summary. */
static kiln_status build_fixed(kiln_report *r, const kiln_dataset *train,
                               const kiln_fit_options *o)
{
    kiln_model *m = r->m;
    const char *strategy = NULL;
    int32_t replicas = 0;
    kiln_status st = kiln_model_distribution(m, &strategy, &replicas);
    if (st != KILN_OK)
        return st;
    sbuf b = {.ctx = m->ctx};
    char line[256];
    put_row(&b, "strategy", strategy);
    snprintf(line, sizeof line, "%d", (int)replicas);
    put_row(&b, "replicas", line);
    snprintf(line, sizeof line, "%d", (int)o->batch_size);
    put_row(&b, "batch size", line);
    snprintf(line, sizeof line, "%lld", (long long)((train->count + o->batch_size - 1) /
                                                     o->batch_size));
    put_row(&b, "steps per epoch", line);
    snprintf(line, sizeof line, "%lld", (long long)train->count);
    put_row(&b, "training samples", line);
    snprintf(line, sizeof line, "%lld", o->validation ? (long long)o->validation->count : 0LL);
    put_row(&b, "validation samples", line);
    snprintf(line, sizeof line, "%d (from epoch %d)", (int)r->total, (int)r->first + 1);
    put_row(&b, "epochs", line);
    char losses[1024];
    loss_text(m, losses, sizeof losses);
    put_row(&b, "loss", losses);
    static const char *const optimizers[] = {"adam", "sgd", "adamw", "rmsprop", "adagrad"};
    snprintf(line, sizeof line, "%s, learning rate %g, %s schedule",
             optimizers[m->plan.optimizer.kind], (double)m->plan.optimizer.learning_rate,
             schedule_name(m->plan.lr_schedule.kind));
    if (m->plan.optimizer.weight_decay > 0.0f)
        snprintf(line + strlen(line), sizeof line - strlen(line), ", weight decay %g",
                 (double)m->plan.optimizer.weight_decay);
    put_row(&b, "optimizer", line);
    local_time(line, sizeof line);
    put_row(&b, "started", line);
    put_row(&b, "kiln", kiln_version());
    r->fixed_rows = take(&b);
    st = put_devices(&b, m->ctx);
    size_t length = 0;
    char *summary = NULL;
    if (st == KILN_OK)
        st = kiln_model_summary(m, NULL, 0, &length);
    if (st == KILN_OK && !(summary = kiln_alloc(m->ctx, length + 1)))
        st = kiln_error_oom(m->ctx, "the report's model summary", length + 1);
    if (st == KILN_OK)
        st = kiln_model_summary(m, summary, length + 1, NULL);
    if (st == KILN_OK) {
        put(&b, "<h2>Model</h2>\n<pre id=\"summary\">");
        put_text(&b, summary);
        put(&b, "</pre>\n");
    }
    kiln_free(m->ctx, summary);
    r->fixed_tail = take(&b);
    if (st == KILN_OK && (!r->fixed_rows || !r->fixed_tail))
        st = kiln_error_oom(m->ctx, "the report", 0);
    return st;
}

static void report_free(kiln_report *r)
{
    if (!r)
        return;
    kiln_context *ctx = r->m->ctx;
    kiln_free(ctx, r->path);
    kiln_free(ctx, r->fixed_rows);
    kiln_free(ctx, r->fixed_tail);
    kiln_free(ctx, r->lr);
    kiln_free(ctx, r);
}

kiln_status kiln_report_open(kiln_model *m, const kiln_dataset *train, const kiln_fit_options *o,
                             int32_t epochs, kiln_report **out)
{
    *out = NULL;
    if (!o->report_path || m->placement.rank != 0)
        return KILN_OK;
    kiln_report *r = kiln_calloc(m->ctx, 1, sizeof *r);
    if (!r)
        return kiln_error_oom(m->ctx, "the report", sizeof *r);
    r->m = m;
    r->first = m->training.n_history;
    r->total = m->training.n_history + (epochs > 0 ? epochs : 0);
    r->cap_lr = r->total;
    r->started = kiln_now();
    r->path = kiln_strdup(m->ctx, o->report_path);
    r->lr = kiln_calloc(m->ctx, (size_t)(r->cap_lr > 0 ? r->cap_lr : 1), sizeof *r->lr);
    kiln_status st = !r->path || !r->lr ? kiln_error_oom(m->ctx, "the report", 0)
                                        : build_fixed(r, train, o);
    for (r->n_lr = 0; st == KILN_OK && r->n_lr < r->first; r->n_lr++)
        r->lr[r->n_lr] = NAN;
    char why[512];
    if (st == KILN_OK && (st = write_page(r, 0, KILN_OK, NULL, why, sizeof why)) != KILN_OK)
        st = kiln_error(m->ctx, st, "kiln_model_fit: the report %s cannot be written: %s",
                        o->report_path, why);
    if (st != KILN_OK)
        report_free(r);
    else
        *out = r;
    return st;
}

static void catch_up(kiln_report *r)
{
    const double lr =
        kiln_optimizer_learning_rate(&r->m->plan.optimizer, r->m->training.n_optimizer_steps);
    for (; r->n_lr < r->m->training.n_history && r->n_lr < r->cap_lr; r->n_lr++)
        r->lr[r->n_lr] = lr;
}

void kiln_report_epoch(kiln_report *r)
{
    if (!r)
        return;
    catch_up(r);
    char why[512];
    if (write_page(r, 0, KILN_OK, NULL, why, sizeof why) != KILN_OK)
        kiln_log(r->m->ctx, KILN_LOG_WARNING, "kiln_model_fit: the report %s was not updated: "
                 "%s; training goes on", r->path, why);
}

void kiln_report_close(kiln_report *r, kiln_status status)
{
    if (!r)
        return;
    catch_up(r);
    char why[512];
    const char *message = kiln_context_last_error(r->m->ctx);
    if (write_page(r, 1, status, message, why, sizeof why) != KILN_OK)
        kiln_log(r->m->ctx, KILN_LOG_WARNING, "kiln_model_fit: the report %s was not updated: "
                 "%s", r->path, why);
    report_free(r);
}
