/* Callbacks of fit: the application's functions and Keras's EarlyStopping,
 * ReduceLROnPlateau, ModelCheckpoint, LearningRateScheduler, CSVLogger and
 * TerminateOnNaN, with Keras's rules (keras/src/callbacks). */
#include "runtime/train/callbacks.h"
#include "runtime/train/stop.h"

#include "runtime/saving/checkpoint.h"
#include "runtime/model/loss.h"
#include "runtime/model/ema.h"
#include "runtime/context/text.h"
#include "base/files.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CALLBACKS 64
/* loss, accuracy, 3 metrics, each twice, and the rate; or the total loss
 * and each output's loss and accuracy, each twice, and the rate */
#define MAX_VALUES (3 + 4 * KILN_MAX_MODEL_OUTPUTS)
#define MAX_PATH 4096

/* A value of the epoch a callback may monitor or log: its name and where
 * the epoch record keeps it. */
typedef struct value {
    char name[96];       /* "val_" + an output's layer name + "_accuracy" */
    size_t offset;
    int up;              /* larger is better */
} value;

typedef struct callback {
    kiln_callback_spec spec;
    char label[64];      /* "callbacks[2] (EarlyStopping)", for messages */
    int monitored;       /* index into the fit's values, or -1 */
    int up;              /* the monitored value improves upward */
    double best;
    int32_t best_epoch;
    int32_t wait, cooldown_left;
    int32_t wait_improved;  /* EarlyStopping: epochs of the wait that beat the best only */
    float *best_weights; /* EarlyStopping with restore_best_weights */
    int has_best_weights;
    int csv;             /* CSVLogger's file descriptor, -1 when none is open */
    int csv_header;      /* the header is still to be written */
} callback;

struct kiln_callbacks {
    kiln_model *m;
    int32_t epochs;
    callback *cb;
    int n;
    value values[MAX_VALUES];
    int n_values;
    int csv_order[MAX_VALUES];  /* the values in sorted name order (CSVLogger) */
};

static const char *kind_name(kiln_callback_kind kind)
{
    switch (kind) {
    case KILN_CALLBACK_FUNCTION: return "function";
    case KILN_CALLBACK_EARLY_STOPPING: return "EarlyStopping";
    case KILN_CALLBACK_REDUCE_LR_ON_PLATEAU: return "ReduceLROnPlateau";
    case KILN_CALLBACK_MODEL_CHECKPOINT: return "ModelCheckpoint";
    case KILN_CALLBACK_LEARNING_RATE_SCHEDULER: return "LearningRateScheduler";
    case KILN_CALLBACK_CSV_LOGGER: return "CSVLogger";
    case KILN_CALLBACK_TERMINATE_ON_NAN: return "TerminateOnNaN";
    default: return "none";
    }
}

/* The fields of kiln_callback_spec past `kind`, and the kinds that read
 * each; any other kind must leave it 0. */
#define KIND(k) (1u << (k))
#define MONITORS \
    (KIND(KILN_CALLBACK_EARLY_STOPPING) | KIND(KILN_CALLBACK_REDUCE_LR_ON_PLATEAU) | \
     KIND(KILN_CALLBACK_MODEL_CHECKPOINT))
#define FIELD(name, kinds) {#name, offsetof(kiln_callback_spec, name), \
                            sizeof(((kiln_callback_spec *)0)->name), kinds}
static const struct field {
    const char *name;
    size_t offset, size;
    unsigned kinds;
} fields[] = {
    FIELD(monitor, MONITORS),
    FIELD(mode, MONITORS),
    FIELD(min_delta, KIND(KILN_CALLBACK_EARLY_STOPPING) | KIND(KILN_CALLBACK_REDUCE_LR_ON_PLATEAU)),
    FIELD(patience, KIND(KILN_CALLBACK_EARLY_STOPPING) | KIND(KILN_CALLBACK_REDUCE_LR_ON_PLATEAU)),
    FIELD(has_baseline, KIND(KILN_CALLBACK_EARLY_STOPPING)),
    FIELD(baseline, KIND(KILN_CALLBACK_EARLY_STOPPING)),
    FIELD(restore_best_weights, KIND(KILN_CALLBACK_EARLY_STOPPING)),
    FIELD(start_from_epoch, KIND(KILN_CALLBACK_EARLY_STOPPING)),
    FIELD(factor, KIND(KILN_CALLBACK_REDUCE_LR_ON_PLATEAU)),
    FIELD(cooldown, KIND(KILN_CALLBACK_REDUCE_LR_ON_PLATEAU)),
    FIELD(min_lr, KIND(KILN_CALLBACK_REDUCE_LR_ON_PLATEAU)),
    FIELD(path, KIND(KILN_CALLBACK_MODEL_CHECKPOINT) | KIND(KILN_CALLBACK_CSV_LOGGER)),
    FIELD(save_best_only, KIND(KILN_CALLBACK_MODEL_CHECKPOINT)),
    FIELD(save_weights_only, KIND(KILN_CALLBACK_MODEL_CHECKPOINT)),
    FIELD(separator, KIND(KILN_CALLBACK_CSV_LOGGER)),
    FIELD(append, KIND(KILN_CALLBACK_CSV_LOGGER)),
    FIELD(function, KIND(KILN_CALLBACK_FUNCTION)),
    FIELD(schedule, KIND(KILN_CALLBACK_LEARNING_RATE_SCHEDULER)),
    FIELD(user, KIND(KILN_CALLBACK_FUNCTION) | KIND(KILN_CALLBACK_LEARNING_RATE_SCHEDULER)),
};

static const char *unread_field(const kiln_callback_spec *s)
{
    static const unsigned char zeros[sizeof(kiln_callback_spec)];
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!(fields[i].kinds & KIND(s->kind)) &&
            memcmp((const char *)s + fields[i].offset, zeros, fields[i].size) != 0)
            return fields[i].name;
    return NULL;
}

static void add_value(kiln_callbacks *c, const char *prefix, const char *name, size_t offset,
                      int up)
{
    value *v = &c->values[c->n_values++];
    snprintf(v->name, sizeof v->name, "%s%s", prefix, name);
    v->offset = offset;
    v->up = up;
}

/* The values this fit records, as Keras's logs name them. */
static void list_values(kiln_callbacks *c, int validation)
{
    const kiln_loss_plan *plan = kiln_model_totals(c->m);
    static const size_t metric_at[2][3] = {
        {offsetof(kiln_epoch_record, top_k_accuracy),
         offsetof(kiln_epoch_record, mean_absolute_error),
         offsetof(kiln_epoch_record, binary_accuracy)},
        {offsetof(kiln_epoch_record, val_top_k_accuracy),
         offsetof(kiln_epoch_record, val_mean_absolute_error),
         offsetof(kiln_epoch_record, val_binary_accuracy)}};
    for (int val = 0; val <= validation; val++) {
        const char *prefix = val ? "val_" : "";
        add_value(c, prefix, "loss",
                  val ? offsetof(kiln_epoch_record, val_loss) : offsetof(kiln_epoch_record, loss),
                  0);
        /* Keras names an output's values after its layer: "cls_loss". */
        for (int32_t k = 0; k < kiln_model_outputs_apart(c->m); k++) {
            const size_t at = (val ? offsetof(kiln_epoch_record, val_outputs)
                                   : offsetof(kiln_epoch_record, outputs)) +
                              (size_t)k * sizeof(kiln_output_metrics);
            char name[80];
            snprintf(name, sizeof name, "%s_loss", c->m->graph.nodes[c->m->graph.outputs[k]].name);
            add_value(c, prefix, name, at + offsetof(kiln_output_metrics, loss), 0);
            snprintf(name, sizeof name, "%s_accuracy", c->m->graph.nodes[c->m->graph.outputs[k]].name);
            if (c->m->plan.heads[k].accuracy)
                add_value(c, prefix, name, at + offsetof(kiln_output_metrics, accuracy), 1);
        }
        if (plan->accuracy)
            add_value(c, prefix, "accuracy",
                      val ? offsetof(kiln_epoch_record, val_accuracy)
                          : offsetof(kiln_epoch_record, accuracy), 1);
        for (int k = 0; k < 3; k++)
            if (kiln_metric_name(plan, k))
                add_value(c, prefix, kiln_metric_name(plan, k), metric_at[val][k], k != 1);
    }
}

static int find_value(const kiln_callbacks *c, const char *name)
{
    for (int i = 0; i < c->n_values; i++)
        if (strcmp(c->values[i].name, name) == 0)
            return i;
    return -1;
}

static double value_of(const kiln_callbacks *c, int i, const kiln_epoch_record *r)
{
    double v;
    memcpy(&v, (const char *)r + c->values[i].offset, sizeof v);
    return v;
}

static kiln_status bad(const kiln_callbacks *c, const callback *cb, const char *fmt, ...)
    KILN_PRINTF(3, 4);

static kiln_status bad(const kiln_callbacks *c, const callback *cb, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return kiln_error(c->m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: %s: %s",
                      cb->label, why);
}

static kiln_status take_monitor(kiln_callbacks *c, callback *cb)
{
    const char *name = cb->spec.monitor ? cb->spec.monitor : "val_loss";
    cb->monitored = find_value(c, name);
    if (cb->monitored < 0) {
        char list[1024] = "";
        for (int i = 0; i < c->n_values; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     c->values[i].name);
        return bad(c, cb, "monitor '%s' is not a value this fit computes (%s%s)", name, list,
                   strncmp(name, "val_", 4) == 0 && find_value(c, "val_loss") < 0
                       ? "; val_ values need validation data" : "");
    }
    const kiln_monitor_mode mode = cb->spec.mode;
    if ((int)mode < KILN_MONITOR_AUTO || mode > KILN_MONITOR_MAX)
        return bad(c, cb, "mode %d is not a kiln_monitor_mode", (int)mode);
    cb->up = mode == KILN_MONITOR_AUTO ? c->values[cb->monitored].up : mode == KILN_MONITOR_MAX;
    cb->best = cb->up ? -INFINITY : INFINITY;
    return KILN_OK;
}

/* A double as Python's repr() writes it: the shortest digits that read back
 * the same, "0.25", "2.0", "1e-05", "1.5e+16", "nan", "inf". */
static void python_float(double v, char *out, size_t size)
{
    if (isnan(v) || isinf(v)) {
        snprintf(out, size, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return;
    }
    char sci[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, v);
        if (strtod(sci, NULL) == v)
            break;
    }
    const int neg = sci[0] == '-';
    char digits[24];
    int n = 0;
    const char *s = sci + neg;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[n++] = *s;
    const int e = atoi(s + 1);
    while (n > 1 && digits[n - 1] == '0')
        n--;
    digits[n] = '\0';
    const char *sign = neg ? "-" : "";
    if (e < -4 || e >= 16)
        snprintf(out, size, "%s%c%s%se%c%02d", sign, digits[0], n > 1 ? "." : "", digits + 1,
                 e < 0 ? '-' : '+', e < 0 ? -e : e);
    else if (e < 0)
        snprintf(out, size, "%s0.%.*s%s", sign, -e - 1, "0000", digits);
    else if (n <= e + 1)
        snprintf(out, size, "%s%s%.*s.0", sign, digits, e + 1 - n, "0000000000000000");
    else
        snprintf(out, size, "%s%.*s.%s", sign, e + 1, digits, digits + e + 1);
}

/* ModelCheckpoint's path for `epoch` (counting from 0) from its pattern:
 * "{epoch}" and "{<value>}", each with an optional printf-like ":spec"
 * ([0][width][.precision][d|f|e|g]), "{{" and "}}". r NULL checks the
 * pattern only. Returns 0, or -1 with `why`. */
static int format_path(const kiln_callbacks *c, const char *pattern, int32_t epoch,
                       const kiln_epoch_record *r, char *out, size_t size, char *why,
                       size_t why_size)
{
    size_t at = 0;
    out[0] = '\0';
    for (const char *p = pattern; *p;) {
        char piece[128];
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            snprintf(piece, sizeof piece, "%c", p[0]);
            p += 2;
        } else if (*p == '}') {
            snprintf(why, why_size, "a single '}' in path \"%s\" (write \"}}\")", pattern);
            return -1;
        } else if (*p != '{') {
            snprintf(piece, sizeof piece, "%c", *p++);
        } else {
            const char *end = strchr(p, '}');
            const size_t len = end ? (size_t)(end - p - 1) : 0;
            char field[64];
            if (!end || len == 0 || len >= sizeof field) {
                snprintf(why, why_size, "path \"%s\" has an unclosed or empty '{'", pattern);
                return -1;
            }
            memcpy(field, p + 1, len);
            field[len] = '\0';
            p = end + 1;
            char *spec = strchr(field, ':');
            if (spec)
                *spec++ = '\0';
            const int is_epoch = strcmp(field, "epoch") == 0;
            const int v = is_epoch ? -1 : find_value(c, field);
            if (!is_epoch && v < 0) {
                snprintf(why, why_size, "path \"%s\" names {%s}, which is neither epoch nor a "
                         "value this fit computes", pattern, field);
                return -1;
            }
            /* [0][width][.precision][conversion], at most two digits each. */
            const char *s = spec ? spec : "";
            size_t i = s[0] == '0' ? 1 : 0;
            size_t digits = strspn(s + i, "0123456789");
            i += digits;
            int ok = digits <= 2;
            if (s[i] == '.') {
                digits = strspn(s + i + 1, "0123456789");
                ok &= digits >= 1 && digits <= 2;
                i += 1 + digits;
            }
            const size_t body = i;
            const char conv = s[i] ? s[i++] : (is_epoch ? 'd' : 'g');
            ok &= s[i] == '\0' && (is_epoch ? conv == 'd' : strchr("feg", conv) != NULL);
            if (!ok) {
                snprintf(why, why_size, "path \"%s\": {%s:%s} is not a format kiln reads "
                         "([0][width][.precision] then %s)", pattern, field, s,
                         is_epoch ? "d" : "f, e or g");
                return -1;
            }
            char fmt[16];
            snprintf(fmt, sizeof fmt, "%%%.*s%c", (int)body, s, conv);
            if (is_epoch)
                snprintf(piece, sizeof piece, fmt, (int)epoch + 1);
            else if (!spec)   /* str.format's default: repr */
                python_float(r ? value_of(c, v, r) : 0.0, piece, sizeof piece);
            else
                snprintf(piece, sizeof piece, fmt, r ? value_of(c, v, r) : 0.0);
        }
        const size_t n = strlen(piece);
        if (at + n >= size) {
            snprintf(why, why_size, "path \"%s\" makes a name longer than %zu bytes", pattern,
                     size - 1);
            return -1;
        }
        memcpy(out + at, piece, n + 1);
        at += n;
    }
    return 0;
}

static kiln_status check_kind(kiln_callbacks *c, callback *cb, const kiln_fit_options *o)
{
    const kiln_model *m = c->m;
    kiln_callback_spec *s = &cb->spec;
    const int sets_rate = s->kind == KILN_CALLBACK_REDUCE_LR_ON_PLATEAU ||
                          s->kind == KILN_CALLBACK_LEARNING_RATE_SCHEDULER;
    if ((sets_rate || s->kind == KILN_CALLBACK_TERMINATE_ON_NAN) &&
        m->placement.strategy == &kiln_strategy_parameter_server_mpi)
        return kiln_error(m->ctx, KILN_ERROR_UNSUPPORTED, "kiln_model_fit: %s: not supported "
                          "by the parameter server across MPI processes, whose ranks see "
                          "their steps at different times", cb->label);
    if (sets_rate && (m->plan.lr_schedule.kind != KILN_LR_CONSTANT ||
                      m->plan.lr_schedule.warmup_steps > 0))
        return bad(c, cb, "it sets the learning rate, but the model's follows the schedule "
                   "given at compile (Keras too refuses to set a scheduled rate)");
    switch (s->kind) {
    case KILN_CALLBACK_FUNCTION:
        return s->function ? KILN_OK : bad(c, cb, "function is NULL");
    case KILN_CALLBACK_EARLY_STOPPING:
        if (s->patience < 0 || s->start_from_epoch < 0 || !isfinite(s->min_delta) ||
            (s->has_baseline && !isfinite(s->baseline)))
            return bad(c, cb, "patience (%d) and start_from_epoch (%d) must be >= 0, min_delta "
                       "(%g) and baseline (%g) finite", (int)s->patience,
                       (int)s->start_from_epoch, s->min_delta, s->baseline);
        s->min_delta = fabs(s->min_delta);
        return take_monitor(c, cb);
    case KILN_CALLBACK_REDUCE_LR_ON_PLATEAU:
        s->factor = s->factor == 0.0 ? 0.1 : s->factor;
        s->patience = s->patience == 0 ? 10 : s->patience;
        s->min_delta = s->min_delta == 0.0 ? 1e-4 : s->min_delta;
        if (!(s->factor > 0.0 && s->factor < 1.0) || s->patience < 0 || s->cooldown < 0 ||
            !(s->min_lr >= 0.0) || !isfinite(s->min_lr) || !isfinite(s->min_delta))
            return bad(c, cb, "factor (%g) must be in (0, 1), patience (%d) and cooldown (%d) "
                       ">= 0, min_lr (%g) a finite number >= 0, min_delta (%g) finite",
                       s->factor, (int)s->patience, (int)s->cooldown, s->min_lr, s->min_delta);
        return take_monitor(c, cb);
    case KILN_CALLBACK_MODEL_CHECKPOINT: {
        if (!s->path || !s->path[0])
            return bad(c, cb, "path is %s", s->path ? "empty" : "NULL");
        char path[MAX_PATH], why[512];
        if (format_path(c, s->path, 0, NULL, path, sizeof path, why, sizeof why) != 0)
            return bad(c, cb, "%s", why);
        return s->save_best_only || s->monitor ? take_monitor(c, cb) : KILN_OK;
    }
    case KILN_CALLBACK_LEARNING_RATE_SCHEDULER:
        return s->schedule ? KILN_OK : bad(c, cb, "schedule is NULL");
    case KILN_CALLBACK_CSV_LOGGER:
        if (!s->path || !s->path[0])
            return bad(c, cb, "path is %s", s->path ? "empty" : "NULL");
        s->separator = s->separator ? s->separator : ',';
        if (s->separator == '\r' || s->separator == '\n' || s->separator == '"')
            return bad(c, cb, "separator %d cannot separate CSV fields", (int)s->separator);
        return KILN_OK;
    case KILN_CALLBACK_TERMINATE_ON_NAN:
        return o->skip_nonfinite ? bad(c, cb, "it stops at a non-finite step that "
                                      "skip_nonfinite asks to skip; set one of them")
                                 : KILN_OK;
    default:
        return bad(c, cb, "kind %d is not a kiln_callback_kind", (int)s->kind);
    }
}

static void sort_values(kiln_callbacks *c)
{
    for (int i = 0; i < c->n_values; i++)
        c->csv_order[i] = i;
    for (int i = 1; i < c->n_values; i++)
        for (int j = i; j > 0 && strcmp(c->values[c->csv_order[j - 1]].name,
                                        c->values[c->csv_order[j]].name) > 0; j--) {
            const int t = c->csv_order[j];
            c->csv_order[j] = c->csv_order[j - 1];
            c->csv_order[j - 1] = t;
        }
}

static kiln_status take_spec(kiln_callbacks *c, const kiln_fit_options *o, int i, size_t stride)
{
    callback *cb = &c->cb[c->n];
    const void *src = (const char *)o->callbacks + (size_t)i * stride;
    const size_t size = *(const size_t *)src;
    snprintf(cb->label, sizeof cb->label, "callbacks[%d]", i);
    if (size != 0 && size != stride)
        return bad(c, cb, "struct_size is %zu but callbacks[0]'s is %zu; the array's elements "
                   "must all have the same", size, stride);
    kiln_diag why;
    if (kiln_options_take(&cb->spec, sizeof cb->spec, src, offsetof(kiln_callback_spec, monitor),
                          "kiln_callback_spec", &why) != KILN_OK)
        return bad(c, cb, "%s", why.message);
    snprintf(cb->label, sizeof cb->label, "callbacks[%d] (%s)", i, kind_name(cb->spec.kind));
    cb->monitored = -1;
    c->n++;
    /* A kind that is none of them reads no field, and check_kind names it;
     * unread_field would shift a bit by it first (undefined at 32 or past,
     * or below 0). */
    if ((int)cb->spec.kind <= KILN_CALLBACK_NONE ||
        cb->spec.kind > KILN_CALLBACK_TERMINATE_ON_NAN)
        return check_kind(c, cb, o);
    const char *stray = unread_field(&cb->spec);
    if (stray)
        return bad(c, cb, "%s is set, but %s does not read it", stray,
                   kind_name(cb->spec.kind));
    return check_kind(c, cb, o);
}

kiln_status kiln_callbacks_create(kiln_model *m, const kiln_fit_options *o, int validation,
                                  kiln_callbacks **out)
{
    *out = NULL;
    if (o->n_callbacks < 0 || o->n_callbacks > MAX_CALLBACKS ||
        (o->n_callbacks > 0 && !o->callbacks))
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: n_callbacks is "
                          "%d; it must be in [0, %d], with callbacks set when it is not 0",
                          (int)o->n_callbacks, MAX_CALLBACKS);
    const int n = o->n_callbacks + (o->callback != NULL);
    if (n == 0)
        return KILN_OK;
    kiln_callbacks *c = kiln_calloc(m->ctx, 1, sizeof *c);
    if (c)
        c->cb = kiln_calloc(m->ctx, (size_t)n, sizeof *c->cb);
    if (!c || !c->cb) {
        kiln_free(m->ctx, c);
        return kiln_error_oom(m->ctx, "the callbacks", (size_t)n * sizeof *c->cb);
    }
    for (int i = 0; i < n; i++)
        c->cb[i].csv = -1;
    c->m = m;
    c->epochs = o->epochs;
    list_values(c, validation);
    sort_values(c);
    kiln_status st = KILN_OK;
    if (o->callback) {
        callback *cb = &c->cb[c->n++];
        cb->spec = (kiln_callback_spec){.struct_size = sizeof cb->spec,
                                        .kind = KILN_CALLBACK_FUNCTION,
                                        .function = o->callback, .user = o->callback_user};
        snprintf(cb->label, sizeof cb->label, "the callback");
        cb->monitored = -1;
    }
    const size_t stride = o->n_callbacks > 0 && o->callbacks[0].struct_size
                              ? o->callbacks[0].struct_size : sizeof(kiln_callback_spec);
    for (int i = 0; i < o->n_callbacks && st == KILN_OK; i++)
        st = take_spec(c, o, i, stride);
    for (int i = 0; i < c->n && st == KILN_OK; i++) {
        callback *cb = &c->cb[i];
        if (cb->spec.kind != KILN_CALLBACK_EARLY_STOPPING || !cb->spec.restore_best_weights)
            continue;
        cb->best_weights = kiln_calloc(m->ctx, m->plan.n_param_floats ? m->plan.n_param_floats : 1,
                                       sizeof(float));
        if (!cb->best_weights)
            st = kiln_error_oom(m->ctx, "EarlyStopping's best weights",
                                m->plan.n_param_floats * sizeof(float));
    }
    if (st != KILN_OK) {
        kiln_callbacks_destroy(c);
        return st;
    }
    *out = c;
    return KILN_OK;
}

void kiln_callbacks_destroy(kiln_callbacks *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        kiln_free(c->m->ctx, c->cb[i].best_weights);
        if (c->cb[i].csv >= 0)
            close(c->cb[i].csv);
    }
    kiln_free(c->m->ctx, c->cb);
    kiln_free(c->m->ctx, c);
}

/* The length of fd's whole lines: a last line without its '\n' is not
 * one. -1 when it cannot be read. */
static off_t whole_lines(int fd)
{
    struct stat s;
    if (fstat(fd, &s) != 0)
        return -1;
    char buf[4096];
    for (off_t end = s.st_size; end > 0;) {
        const size_t n = end < (off_t)sizeof buf ? (size_t)end : sizeof buf;
        if (pread(fd, buf, n, end - (off_t)n) != (ssize_t)n)
            return -1;
        for (size_t i = n; i > 0; i--)
            if (buf[i - 1] == '\n')
                return end - (off_t)n + (off_t)i;
        end -= (off_t)n;
    }
    return 0;
}

/* Keras's CSVLogger: a header unless it appends to a file that has one.
 * A file to append to that ends in a cut row (its writer was killed
 * mid-row, or an older kiln's write failed) loses that row first, with a
 * warning: the next row must not be glued onto it. */
static kiln_status open_csv(kiln_callbacks *c, callback *cb)
{
    const char *path = cb->spec.path;
    kiln_context *ctx = c->m->ctx;
    cb->csv_header = 1;
    cb->csv = open(path, cb->spec.append ? O_RDWR | O_CREAT | O_APPEND
                                         : O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (cb->csv < 0)
        return kiln_error(ctx, KILN_ERROR_IO, "kiln_model_fit: %s: cannot open %s: %s",
                          cb->label, path, strerror(errno));
    if (!cb->spec.append)
        return KILN_OK;
    struct stat s;
    const off_t whole = whole_lines(cb->csv);
    if (whole < 0 || fstat(cb->csv, &s) != 0)
        return kiln_error(ctx, KILN_ERROR_IO, "kiln_model_fit: %s: cannot read %s to append "
                          "to it: %s", cb->label, path, strerror(errno));
    if (whole < s.st_size) {
        if (ftruncate(cb->csv, whole) != 0)
            return kiln_error(ctx, KILN_ERROR_IO, "kiln_model_fit: %s: %s ends in a cut row "
                              "that cannot be removed: %s", cb->label, path, strerror(errno));
        kiln_log(ctx, KILN_LOG_WARNING, "kiln_model_fit: %s: %s ended in a cut row (%lld bytes "
                 "without a line end: a write that failed or was killed); removed it before "
                 "appending", cb->label, path, (long long)(s.st_size - whole));
    }
    cb->csv_header = whole == 0;
    return KILN_OK;
}

kiln_status kiln_callbacks_begin(kiln_callbacks *c)
{
    kiln_status st = KILN_OK;
    for (int i = 0; c && i < c->n && st == KILN_OK; i++)
        if (c->cb[i].spec.kind == KILN_CALLBACK_CSV_LOGGER && c->m->placement.rank == 0)
            st = open_csv(c, &c->cb[i]);
    return st;
}

/* What a Keras optimizer's float32 variable would hold. */
static void set_rate(kiln_model *m, double lr)
{
    m->training.has_lr_override = 1;
    m->training.lr_override = (double)(float)lr;
}

static double current_rate(const kiln_model *m)
{
    return kiln_model_learning_rate(m, m->training.n_optimizer_steps);
}

kiln_status kiln_callbacks_epoch_begin(kiln_callbacks *c, int32_t epoch)
{
    for (int i = 0; c && i < c->n; i++) {
        const callback *cb = &c->cb[i];
        if (cb->spec.kind != KILN_CALLBACK_LEARNING_RATE_SCHEDULER)
            continue;
        const double lr = cb->spec.schedule(cb->spec.user, epoch, current_rate(c->m));
        if (!isfinite(lr) || lr < 0)
            return kiln_error(c->m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: %s "
                              "returned %g for epoch %d; a learning rate is a finite number "
                              ">= 0", cb->label, lr, (int)epoch + 1);
        set_rate(c->m, lr);
    }
    return KILN_OK;
}

int kiln_callbacks_terminate_on_nan(const kiln_callbacks *c)
{
    for (int i = 0; c && i < c->n; i++)
        if (c->cb[i].spec.kind == KILN_CALLBACK_TERMINATE_ON_NAN)
            return 1;
    return 0;
}

static kiln_status call_function(kiln_callbacks *c, const callback *cb, kiln_event event,
                                 int32_t epoch, int64_t step, int64_t steps,
                                 const kiln_epoch_record *r)
{
    kiln_progress p = {
        .struct_size = sizeof p, .event = event, .epoch = epoch, .epochs = c->epochs,
        .step = step, .steps = steps, .loss = r->loss, .accuracy = r->accuracy,
        .has_validation = r->has_validation, .val_loss = r->val_loss,
        .val_accuracy = r->val_accuracy, .seconds = r->seconds,
        .top_k_accuracy = r->top_k_accuracy, .mean_absolute_error = r->mean_absolute_error,
        .binary_accuracy = r->binary_accuracy, .val_top_k_accuracy = r->val_top_k_accuracy,
        .val_mean_absolute_error = r->val_mean_absolute_error,
        .val_binary_accuracy = r->val_binary_accuracy, .learning_rate = r->learning_rate,
        .n_outputs = r->n_outputs};
    memcpy(p.outputs, r->outputs, sizeof p.outputs);
    memcpy(p.val_outputs, r->val_outputs, sizeof p.val_outputs);
    const int said = cb->spec.function(cb->spec.user, &p);
    char when[64];
    if (event == KILN_EVENT_EPOCH_END)
        snprintf(when, sizeof when, "after epoch %d", (int)epoch + 1);
    else
        snprintf(when, sizeof when, "at epoch %d, step %lld", (int)epoch + 1, (long long)step);
    if (said == KILN_CALLBACK_CONTINUE)
        return KILN_OK;
    if (said == KILN_CALLBACK_STOP) {
        kiln_model_record_stop(c->m, KILN_STOP_CALLBACK, "%s stopped training %s", cb->label,
                               when);
        return KILN_OK;
    }
    return kiln_error(c->m->ctx, KILN_ERROR_STOPPED, "kiln_model_fit: %s stopped training %s",
                      cb->label, when);
}

/* Keras's monitor_op(current - min_delta, best), min_delta signed by mode. */
static int improves(const callback *cb, double current, double reference, double min_delta)
{
    return cb->up ? current - min_delta > reference : current + min_delta < reference;
}

static kiln_status early_stopping(kiln_callbacks *c, callback *cb, int32_t epoch,
                                  const kiln_epoch_record *r)
{
    kiln_model *m = c->m;
    const kiln_callback_spec *s = &cb->spec;
    const double current = value_of(c, cb->monitored, r);
    if (epoch < s->start_from_epoch)
        return KILN_OK;
    kiln_status st = KILN_OK;
    if (s->restore_best_weights && !cb->has_best_weights) {
        st = m->placement.strategy->get_params(m->placement.strategy_impl, cb->best_weights);
        cb->has_best_weights = 1;
        cb->best_epoch = epoch;
    }
    cb->wait++;
    if (improves(cb, current, cb->best, s->min_delta)) {
        cb->best = current;
        cb->best_epoch = epoch;
        if (s->restore_best_weights && st == KILN_OK)
            st = m->placement.strategy->get_params(m->placement.strategy_impl, cb->best_weights);
        cb->wait_improved++;
        if (!s->has_baseline || improves(cb, current, s->baseline, s->min_delta))
            cb->wait = cb->wait_improved = 0;
        return st;
    }
    if (cb->wait < s->patience || epoch == 0)
        return st;
    const char *name = c->values[cb->monitored].name;
    /* Epochs that beat the best but not the baseline do not restart the
     * wait (Keras): "did not improve" alone would deny them. */
    if (cb->wait_improved > 0)
        kiln_model_record_stop(m, KILN_STOP_EARLY_STOPPING, "EarlyStopping: %s did not "
                               "improve on the baseline %.6g for %d epoch(s) (%d of them "
                               "improved on the best, %.6g after epoch %d); training stopped "
                               "after epoch %d", name, s->baseline, (int)cb->wait,
                               (int)cb->wait_improved, cb->best, (int)cb->best_epoch + 1,
                               (int)epoch + 1);
    else
        kiln_model_record_stop(m, KILN_STOP_EARLY_STOPPING, "EarlyStopping: %s did not "
                               "improve for %d epoch(s) on its best, %.6g after epoch %d; "
                               "training stopped after epoch %d", name, (int)cb->wait,
                               cb->best, (int)cb->best_epoch + 1, (int)epoch + 1);
    return st;
}

static void reduce_on_plateau(kiln_callbacks *c, callback *cb, int32_t epoch,
                              const kiln_epoch_record *r)
{
    const kiln_callback_spec *s = &cb->spec;
    const double current = value_of(c, cb->monitored, r);
    if (cb->cooldown_left > 0) {
        cb->cooldown_left--;
        cb->wait = 0;
    }
    if (cb->up ? current > cb->best + s->min_delta : current < cb->best - s->min_delta) {
        cb->best = current;
        cb->wait = 0;
        return;
    }
    if (cb->cooldown_left > 0 || ++cb->wait < s->patience)
        return;
    const double old = current_rate(c->m);
    if (old > (double)(float)s->min_lr) {
        const double lr = fmax(old * s->factor, s->min_lr);
        set_rate(c->m, lr);
        kiln_log(c->m->ctx, KILN_LOG_INFO, "Epoch %d: ReduceLROnPlateau reducing learning "
                 "rate to %g", (int)epoch + 1, c->m->training.lr_override);
        cb->cooldown_left = s->cooldown;
        cb->wait = 0;
    }
}

static kiln_status model_checkpoint(kiln_callbacks *c, callback *cb, int32_t epoch,
                                    const kiln_epoch_record *r)
{
    const kiln_callback_spec *s = &cb->spec;
    if (s->save_best_only) {
        const double current = value_of(c, cb->monitored, r);
        if (!improves(cb, current, cb->best, 0.0))
            return KILN_OK;
        cb->best = current;
    }
    if (c->m->placement.rank != 0)
        return KILN_OK;
    char path[MAX_PATH], why[512];
    if (format_path(c, s->path, epoch, r, path, sizeof path, why, sizeof why) != 0)
        return kiln_error(c->m->ctx, KILN_ERROR_INVALID_ARGUMENT, "kiln_model_fit: %s: %s",
                          cb->label, why);
    return s->save_weights_only ? kiln_checkpoint_save_weights(c->m, path)
                                : kiln_checkpoint_save(c->m, path);
}

/* The header (when still due) and the epoch's row are written whole, in
 * one write: one that fails (a full disk) is cut back to where it began, so
 * the file never ends in a cut row that the next append would be glued
 * onto. */
static kiln_status csv_row(kiln_callbacks *c, callback *cb, int32_t epoch,
                           const kiln_epoch_record *r)
{
    if (cb->csv < 0)
        return KILN_OK;
    const char sep = cb->spec.separator;
    /* Keras's columns: "epoch", then the names in sorted order; the rate
     * sorts between "binary_accuracy" and "loss". */
    int rate_at = 0;
    while (rate_at < c->n_values &&
           strcmp(c->values[c->csv_order[rate_at]].name, "learning_rate") < 0)
        rate_at++;
    char line[2 * (MAX_VALUES + 2) * (sizeof c->values[0].name + 2) + 64], text[64];
    kiln_text t = {.text = line, .size = sizeof line};
    if (cb->csv_header) {
        kiln_text_printf(&t, "epoch");
        for (int i = 0; i <= c->n_values; i++) {
            if (i == rate_at)
                kiln_text_printf(&t, "%clearning_rate", sep);
            if (i < c->n_values)
                kiln_text_printf(&t, "%c%s", sep, c->values[c->csv_order[i]].name);
        }
        kiln_text_printf(&t, "\r\n");
    }
    kiln_text_printf(&t, "%d", (int)epoch);
    for (int i = 0; i <= c->n_values; i++) {
        if (i == rate_at) {
            python_float(r->learning_rate, text, sizeof text);
            kiln_text_printf(&t, "%c%s", sep, text);
        }
        if (i < c->n_values) {
            python_float(value_of(c, c->csv_order[i], r), text, sizeof text);
            kiln_text_printf(&t, "%c%s", sep, text);
        }
    }
    kiln_text_printf(&t, "\r\n");
    assert(t.length < sizeof line);   /* the names and numbers are bounded */
    struct stat s;
    const off_t start = fstat(cb->csv, &s) == 0 ? s.st_size : -1;
    if (start >= 0 && kiln_write_all(cb->csv, line, t.length)) {
        cb->csv_header = 0;
        return KILN_OK;
    }
    const int error = errno;
    /* Without O_APPEND the offset moved on too: back to the row's start. */
    const int whole = start >= 0 && ftruncate(cb->csv, start) == 0 &&
                      lseek(cb->csv, start, SEEK_SET) == start;
    return kiln_error(c->m->ctx, KILN_ERROR_IO, "kiln_model_fit: %s: cannot write %s: %s; %s",
                      cb->label, cb->spec.path, strerror(error),
                      whole ? "it ends with the last whole row"
                            : "its last row may be cut short (an append removes it)");
}

kiln_status kiln_callbacks_notify(kiln_callbacks *c, kiln_event event, int32_t epoch,
                                  int64_t step, int64_t steps, const kiln_epoch_record *r)
{
    kiln_status st = KILN_OK;
    for (int i = 0; c && i < c->n && st == KILN_OK; i++) {
        callback *cb = &c->cb[i];
        if (cb->spec.kind == KILN_CALLBACK_FUNCTION)
            st = call_function(c, cb, event, epoch, step, steps, r);
        if (event != KILN_EVENT_EPOCH_END)
            continue;
        switch (cb->spec.kind) {
        case KILN_CALLBACK_EARLY_STOPPING: st = early_stopping(c, cb, epoch, r); break;
        case KILN_CALLBACK_REDUCE_LR_ON_PLATEAU: reduce_on_plateau(c, cb, epoch, r); break;
        case KILN_CALLBACK_MODEL_CHECKPOINT: st = model_checkpoint(c, cb, epoch, r); break;
        case KILN_CALLBACK_CSV_LOGGER: st = csv_row(c, cb, epoch, r); break;
        default: break;
        }
    }
    return st;
}

kiln_status kiln_callbacks_end(kiln_callbacks *c)
{
    kiln_status st = KILN_OK;
    for (int i = 0; c && i < c->n && st == KILN_OK; i++) {
        const callback *cb = &c->cb[i];
        if (!cb->has_best_weights)
            continue;
        kiln_log(c->m->ctx, KILN_LOG_INFO, "Restoring model weights from the end of the best "
                 "epoch: %d", (int)cb->best_epoch + 1);
        st = kiln_model_write_params(c->m, cb->best_weights);
    }
    return st;
}
