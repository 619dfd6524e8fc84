#include "runtime/train/progress.h"

#include "runtime/context/context.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#define BAR_WIDTH 20
#define REDRAW_SECONDS 0.1

void kiln_progress_init(kiln_progress_bar *bar, kiln_verbosity verbosity, FILE *out)
{
    memset(bar, 0, sizeof *bar);
    bar->out = out;
    bar->silent = verbosity == KILN_VERBOSE_SILENT;
    bar->live = verbosity == KILN_VERBOSE_BAR ||
                (verbosity == KILN_VERBOSE_AUTO && isatty(fileno(out)));
}

/* A bounded string builder: appends never overrun and keep it terminated. */
typedef struct text {
    char *buf;
    size_t size, at;
} text;

static void put(text *t, const char *fmt, ...)
{
    if (t->at >= t->size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->at, t->size - t->at, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->at += (size_t)n;
}

/* Keras's style: "14s", "2:05", "1:02:05". */
static void put_time(text *t, double seconds)
{
    const long s = (long)(seconds + 0.5);
    if (s >= 3600)
        put(t, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else if (s >= 60)
        put(t, "%ld:%02ld", s / 60, s % 60);
    else
        put(t, "%lds", s);
}

/* Several outputs: the total "loss" and each output's "<layer>_loss" and
 * "<layer>_accuracy", in sorted order as the single-output names are
 * ("accuracy" before "loss"). */
typedef struct named_value {
    char name[80];
    double value;
} named_value;

static void put_outputs(text *t, const char *prefix, const kiln_output_metrics *o, int32_t n,
                        double loss)
{
    named_value e[1 + 2 * KILN_MAX_MODEL_OUTPUTS];
    int count = 0;
    snprintf(e[count].name, sizeof e[count].name, "loss");
    e[count++].value = loss;
    for (int32_t k = 0; k < n && k < KILN_MAX_MODEL_OUTPUTS; k++) {
        snprintf(e[count].name, sizeof e[count].name, "%s_loss", o[k].name);
        e[count++].value = o[k].loss;
        if (o[k].accuracy < 0)
            continue;
        snprintf(e[count].name, sizeof e[count].name, "%s_accuracy", o[k].name);
        e[count++].value = o[k].accuracy;
    }
    for (int i = 1; i < count; i++)
        for (int j = i; j > 0 && strcmp(e[j - 1].name, e[j].name) > 0; j--) {
            const named_value swap = e[j];
            e[j] = e[j - 1];
            e[j - 1] = swap;
        }
    for (int i = 0; i < count; i++)
        put(t, " - %s%s: %.4f", prefix, e[i].name, e[i].value);
}

void kiln_progress_format(char *buf, size_t size, int64_t step, int64_t steps, double seconds,
                          double per_step, double loss, double accuracy,
                          const kiln_epoch_record *validation)
{
    text t = {.buf = buf, .size = size};
    buf[0] = '\0';
    const int digits = snprintf(NULL, 0, "%lld", (long long)steps);
    put(&t, "%*lld/%lld ", digits, (long long)step, (long long)steps);
    const int64_t done = steps > 0 ? BAR_WIDTH * step / steps : BAR_WIDTH;
    for (int64_t i = 0; i < BAR_WIDTH; i++)
        put(&t, "%s", i < done ? "\xe2\x94\x81" : "\xe2\x94\x80");  /* heavy / light line */
    put(&t, " ");
    put_time(&t, seconds);
    if (per_step >= 1.0)
        put(&t, " %.0fs/step", per_step);
    else if (per_step >= 1e-3)
        put(&t, " %.0fms/step", per_step * 1e3);
    else
        put(&t, " %.0fus/step", per_step * 1e6);
    if (validation && validation->n_outputs > 0) {
        put_outputs(&t, "", validation->outputs, validation->n_outputs, loss);
        if (validation->has_validation)
            put_outputs(&t, "val_", validation->val_outputs, validation->n_outputs,
                        validation->val_loss);
        return;
    }
    if (accuracy >= 0)
        put(&t, " - accuracy: %.4f", accuracy);
    put(&t, " - loss: %.4f", loss);
    if (validation && validation->has_validation) {
        if (validation->val_accuracy >= 0)
            put(&t, " - val_accuracy: %.4f", validation->val_accuracy);
        put(&t, " - val_loss: %.4f", validation->val_loss);
    }
}

void kiln_progress_begin(kiln_progress_bar *bar, int32_t epoch, int32_t epochs, int64_t steps)
{
    bar->epoch = epoch;
    bar->epochs = epochs;
    bar->steps = steps;
    bar->start = kiln_now();
    bar->last_draw = 0;
    if (!bar->silent)
        fprintf(bar->out, "Epoch %d/%d\n", (int)epoch + 1, (int)epochs);
}

void kiln_progress_step(kiln_progress_bar *bar, int64_t step, const kiln_epoch_record *r)
{
    if (bar->silent || !bar->live || step >= bar->steps)
        return;  /* the last step is drawn by kiln_progress_end */
    const double t = kiln_now();
    if (t - bar->last_draw < REDRAW_SECONDS)
        return;
    bar->last_draw = t;
    const double elapsed = t - bar->start, per_step = elapsed / (double)step;
    char line[2048];
    kiln_progress_format(line, sizeof line, step, bar->steps, per_step * (double)(bar->steps - step),
                         per_step, r->loss, r->accuracy, r);
    fprintf(bar->out, "\r%s\x1b[K", line);
    fflush(bar->out);
}

void kiln_progress_end(kiln_progress_bar *bar, const kiln_epoch_record *r)
{
    if (bar->silent)
        return;
    const double elapsed = kiln_now() - bar->start;
    char line[2048];
    kiln_progress_format(line, sizeof line, bar->steps, bar->steps, elapsed,
                         elapsed / (double)(bar->steps ? bar->steps : 1), r->loss, r->accuracy, r);
    fprintf(bar->out, bar->live ? "\r%s\x1b[K\n" : "%s\n", line);
    fflush(bar->out);
}

void kiln_progress_abort(kiln_progress_bar *bar)
{
    if (!bar->silent && bar->live && bar->last_draw > 0) {
        fputc('\n', bar->out);
        fflush(bar->out);
    }
}
