/* The training report (kiln_fit_options.report_path): 4 epochs with
 * validation data, the SVG read back by string scanning and every curve's
 * numbers and points checked against the history; the report rewritten as
 * epochs end; a stopped fit says so; a path that cannot be written fails
 * fit before training, a write failing later only warns; every allocation
 * failed in turn. `test_report PATH` also keeps the finished report
 * at PATH (test/train/report_render.sh looks at it in a browser). */
#include "harness.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRAIN 40
#define VALID 20
#define FEATURES 12
#define BATCH 10
#define EPOCHS 4
#define STEPS (TRAIN / BATCH)
#define ODD_NAME "hidden<&\"'>"
#define ODD_NAME_HTML "hidden&lt;&amp;&quot;&#39;&gt;"

static char dir[64];

static kiln_model *small_model(kiln_context *ctx)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {FEATURES};
    kiln_dense_options hidden = {.struct_size = sizeof hidden, .units = 16,
                                 .activation = KILN_ACTIVATION_RELU, .name = ODD_NAME};
    kiln_dense_options head = {.struct_size = sizeof head, .units = 3,
                               .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &hidden);
    kiln_dense(m, KILN_NODE_PREVIOUS, &head);
    /* A rate that moves, so its chart is not flat. */
    const kiln_lr_schedule decay = {.struct_size = sizeof decay,
                                    .kind = KILN_LR_EXPONENTIAL_DECAY, .decay_steps = STEPS,
                                    .decay_rate = 0.6f};
    const kiln_optimizer_options adam = {.struct_size = sizeof adam, .kind = KILN_OPTIMIZER_ADAM,
                                         .learning_rate = 0.05f, .schedule = &decay};
    const kiln_compile_options co = {.struct_size = sizeof co,
                                     .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                     .optimizer = &adam};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static kiln_dataset *small_data(kiln_context *ctx, int32_t count, int salt)
{
    float x[TRAIN * FEATURES];
    int32_t y[TRAIN];
    for (int i = 0; i < count; i++) {
        const int32_t cls = i % 3;
        for (int j = 0; j < FEATURES; j++)
            x[i * FEATURES + j] = (float)(((i + salt) * 29 + j * 7) % 53) / 53.0f +
                                  (j % 3 == cls ? 0.8f : 0.0f);
        /* Some validation labels are wrong, so its curves part from training's. */
        y[i] = salt && i % 4 == 0 ? (cls + 1) % 3 : cls;
    }
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = count, .feature_rank = 1,
                          .feature_dims = {FEATURES}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    return ds;
}

static char *read_text(const char *path)
{
    size_t size = 0;
    unsigned char *data = test_read_file(path, &size);
    char *text = data ? realloc(data, size + 1) : NULL;
    if (text)
        text[size] = '\0';
    else
        free(data);
    return text;
}

/* The value of attribute `name` of the tag starting at `tag` into out. */
static int attr(const char *tag, const char *name, char *out, size_t size)
{
    const char *end = strchr(tag, '>');
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *at = strstr(tag, key);
    if (!at || !end || at > end)
        return 0;
    at += strlen(key);
    const char *close = strchr(at, '"');
    if (!close || (size_t)(close - at) >= size)
        return 0;
    memcpy(out, at, (size_t)(close - at));
    out[close - at] = '\0';
    return 1;
}

static int parse_numbers(const char *s, double *v, int max)
{
    int n = 0;
    char *end;
    for (;;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s || n == max)
            return n;
        v[n] = strtod(s, &end);
        if (end == s)
            return -1;
        n++;
        s = end;
    }
}

typedef struct chart {
    double plot[4], x_range[2], y_range[2];
    const char *start, *end;   /* the <svg ...> ... </svg> text */
} chart;

static int find_chart(const char *page, const char *id, chart *c)
{
    char key[64], value[256];
    snprintf(key, sizeof key, "<svg id=\"chart-%s\"", id);
    c->start = strstr(page, key);
    c->end = c->start ? strstr(c->start, "</svg>") : NULL;
    if (!c->end)
        return 0;
    return attr(c->start, "data-plot", value, sizeof value) &&
           parse_numbers(value, c->plot, 4) == 4 &&
           attr(c->start, "data-x-range", value, sizeof value) &&
           parse_numbers(value, c->x_range, 2) == 2 &&
           attr(c->start, "data-y-range", value, sizeof value) &&
           parse_numbers(value, c->y_range, 2) == 2;
}

/* Series `name` of chart `id` must hold `want` for epochs 1..n, exactly,
 * at the points the axes put them. */
static void check_series(const char *page, const char *id, const char *name, const double *want,
                         int n)
{
    chart c;
    if (!find_chart(page, id, &c)) {
        fprintf(stderr, "chart %s: not found or without its data- attributes\n", id);
        test_failures++;
        return;
    }
    CHECK(c.x_range[0] == 1 && c.x_range[1] == (n > 2 ? n : 2));
    CHECK(c.y_range[0] < c.y_range[1]);
    char key[96];
    snprintf(key, sizeof key, "<polyline class=\"series\" data-series=\"%s\"", name);
    const char *line = strstr(c.start, key);
    if (!line || line > c.end) {
        fprintf(stderr, "chart %s: no %s curve\n", id, name);
        test_failures++;
        return;
    }
    static char value[65536];
    double epochs[64], values[64], points[128];
    CHECK(attr(line, "data-epochs", value, sizeof value) && parse_numbers(value, epochs, 64) == n);
    CHECK(attr(line, "data-values", value, sizeof value) && parse_numbers(value, values, 64) == n);
    CHECK(attr(line, "points", value, sizeof value) && parse_numbers(value, points, 128) == 2 * n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double x = c.plot[0] + (epochs[i] - c.x_range[0]) /
                                         (c.x_range[1] - c.x_range[0]) * c.plot[2];
        const double y = c.plot[1] + c.plot[3] - (values[i] - c.y_range[0]) /
                                                     (c.y_range[1] - c.y_range[0]) * c.plot[3];
        if (epochs[i] != i + 1 || values[i] != want[i] || fabs(points[2 * i] - x) > 0.006 ||
            fabs(points[2 * i + 1] - y) > 0.006 || values[i] < c.y_range[0] ||
            values[i] > c.y_range[1]) {
            fprintf(stderr, "chart %s, %s, epoch %d: %.17g at (%.3f, %.3f); want %.17g at "
                    "(%.3f, %.3f)\n", id, name, i + 1, values[i], points[2 * i],
                    points[2 * i + 1], want[i], x, y);
            bad++;
        }
    }
    CHECK(bad == 0);
    snprintf(key, sizeof key, ">%s</text></g>", name);
    const char *legend = strstr(c.start, key);
    CHECK(legend && legend < c.end);
}

static void check_against_history(const char *page, const kiln_model *m)
{
    int32_t n = 0;
    CHECK_OK(m->ctx, kiln_model_history_count(m, &n));
    CHECK(n == EPOCHS);
    if (n != EPOCHS)
        return;
    double loss[EPOCHS], acc[EPOCHS], val_loss[EPOCHS], val_acc[EPOCHS], lr[EPOCHS],
        rate[EPOCHS];
    for (int32_t i = 0; i < n; i++) {
        kiln_epoch_record r = {.struct_size = sizeof r};
        CHECK_OK(m->ctx, kiln_model_history_epoch(m, i, &r));
        CHECK(r.has_validation && r.accuracy >= 0 && r.seconds > 0);
        loss[i] = r.loss;
        acc[i] = r.accuracy;
        val_loss[i] = r.val_loss;
        val_acc[i] = r.val_accuracy;
        rate[i] = (double)r.samples / r.seconds;
        /* The rate of the next update, as Keras reports it at an epoch's end. */
        lr[i] = kiln_optimizer_learning_rate(&m->plan.optimizer, (int64_t)(i + 1) * STEPS);
        CHECK(fabs(lr[i] - test_learning_rate(m->ctx, &m->plan.optimizer, (i + 1) * STEPS)) <
              1e-6 * lr[i]);
    }
    CHECK(lr[EPOCHS - 1] < lr[0]);
    check_series(page, "loss", "training", loss, n);
    check_series(page, "loss", "validation", val_loss, n);
    check_series(page, "accuracy", "training", acc, n);
    check_series(page, "accuracy", "validation", val_acc, n);
    check_series(page, "learning-rate", "learning rate", lr, n);
    check_series(page, "throughput", "training", rate, n);
}

static void check_self_contained(const char *page)
{
    static const char *const banned[] = {"<script", "http:", "https:", "url(", "<link",
                                         "@import", "<img", "<iframe"};
    CHECK(strncmp(page, "<!DOCTYPE html>", 15) == 0);
    CHECK(strstr(page, "</html>") != NULL);
    for (size_t i = 0; i < sizeof banned / sizeof *banned; i++)
        if (strstr(page, banned[i])) {
            fprintf(stderr, "the report holds \"%s\"\n", banned[i]);
            test_failures++;
        }
    /* Every layer name is escaped, in the summary and wherever else. */
    CHECK(strstr(page, ODD_NAME) == NULL);
    CHECK(strstr(page, "<pre id=\"summary\">") && strstr(page, ODD_NAME_HTML " (dense)"));
}

static int count_temporaries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp-") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* At each epoch's first step, the report on disk shows the epochs before. */
typedef struct watch {
    const char *path;
    int32_t stop_after;   /* > 0: stop at that epoch's end */
    int looked, behind;
} watch;

static int look(void *user, const kiln_progress *p)
{
    watch *w = user;
    if (p->event == KILN_EVENT_EPOCH_END && w->stop_after && p->epoch + 1 == w->stop_after)
        return 1;
    if (p->event != KILN_EVENT_BATCH_END || p->step != 1)
        return 0;
    char want[64];
    snprintf(want, sizeof want, "Training: %d of %d epochs done", (int)p->epoch, EPOCHS);
    char *page = read_text(w->path);
    w->looked++;
    if (!page || !strstr(page, want) || !strstr(page, "http-equiv=\"refresh\"") ||
        (p->epoch == 0) != (strstr(page, "no epoch yet") != NULL)) {
        fprintf(stderr, "at epoch %d the report is not \"%s\"\n", (int)p->epoch + 1, want);
        w->behind++;
    }
    free(page);
    return 0;
}

static kiln_status fit_with_report(kiln_model *m, const char *path, kiln_callback_fn callback,
                                   void *user)
{
    kiln_dataset *train = small_data(m->ctx, TRAIN, 0);
    kiln_dataset *valid = small_data(m->ctx, VALID, 5);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = EPOCHS;
    fo.batch_size = BATCH;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = valid;
    fo.report_path = path;
    fo.callback = callback;
    fo.callback_user = user;
    const kiln_status st = kiln_model_fit(m, train, &fo);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(valid);
    return st;
}

static void test_report(kiln_context *ctx, const char *keep)
{
    char path[128];
    snprintf(path, sizeof path, "%s/report.html", dir);
    kiln_model *m = small_model(ctx);
    watch w = {.path = path};
    CHECK_OK(ctx, fit_with_report(m, path, look, &w));
    CHECK(w.looked == EPOCHS && w.behind == 0);
    char *page = read_text(path);
    CHECK(page != NULL);
    if (page) {
        check_self_contained(page);
        check_against_history(page, m);
        CHECK(strstr(page, "Finished: 4 epochs") != NULL);
        CHECK(strstr(page, "http-equiv=\"refresh\"") == NULL);
        /* The strategy compile chose: one_device on one device, mirrored on
         * several (POCL_DEVICES="basic basic", or KILN_DEVICES naming two). */
        int32_t devices = 0;
        CHECK_OK(ctx, kiln_context_device_count(ctx, &devices));
        char row[96];
        snprintf(row, sizeof row,
                 "<th>strategy</th><td>%s</td></tr>\n<tr><th>replicas</th><td>%d</td>",
                 devices > 1 ? "mirrored" : "one_device", (int)devices);
        if (!strstr(page, row))
            fprintf(stderr, "the report lacks %s\n", row);
        CHECK(strstr(page, row) != NULL);
        CHECK(strstr(page, "<th>batch size</th><td>10</td>") != NULL);
        CHECK(strstr(page, "<table id=\"devices\">") != NULL);
        if (keep) {
            FILE *f = fopen(keep, "w");
            CHECK(f && fputs(page, f) >= 0);
            CHECK(f && fclose(f) == 0);
        }
    }
    free(page);
    CHECK(count_temporaries() == 0);
    kiln_model_destroy(m);
}

/* A callback that stops fit: the last report says how and why. */
static void test_stopped(kiln_context *ctx)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stopped.html", dir);
    kiln_model *m = small_model(ctx);
    watch w = {.path = path, .stop_after = 2};
    CHECK(fit_with_report(m, path, look, &w) == KILN_ERROR_STOPPED);
    char *page = read_text(path);
    CHECK(page && strstr(page, "Stopped after 2 of 4 epochs: KILN_ERROR_STOPPED"));
    CHECK(page && strstr(page, "<th>error</th><td>kiln_model_fit: the callback stopped"));
    CHECK(page && strstr(page, "data-epochs=\"1 2\""));
    free(page);
    kiln_model_destroy(m);
}

static void test_unwritable(kiln_context *ctx)
{
    char file_as_folder[160], path[160];
    snprintf(file_as_folder, sizeof file_as_folder, "%s/report.html/inside.html", dir);
    const char *paths[] = {"/nonexistent-kiln-folder/report.html", file_as_folder, dir};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        kiln_model *m = small_model(ctx);
        snprintf(path, sizeof path, "the report %s cannot be written", paths[i]);
        CHECK_FAILS(ctx, KILN_ERROR_IO, path, fit_with_report(m, paths[i], NULL, NULL));
        printf("%s\n", kiln_context_last_error(ctx));
        int32_t n = -1;
        CHECK_OK(ctx, kiln_model_history_count(m, &n));
        CHECK(n == 0);   /* failed before training */
        kiln_model_destroy(m);
    }
    CHECK(count_temporaries() == 0);
}

static int warnings;

static void count_warnings(void *user, kiln_log_level level, const char *message)
{
    (void)user;
    warnings += level == KILN_LOG_WARNING && strstr(message, "was not updated") != NULL;
}

typedef struct move {
    const char *from, *to;
} move;

static int move_away(void *user, const kiln_progress *p)
{
    const move *mv = user;
    if (p->event == KILN_EVENT_BATCH_END && p->epoch == 1 && p->step == 1)
        CHECK(rename(mv->from, mv->to) == 0);
    return 0;
}

/* A write that fails once training runs (here its folder goes away) is a
 * warning, and training goes on. */
static void test_later_failure(void)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 17, .log_fn = count_warnings,
                              .log_level = KILN_LOG_WARNING};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK) {
        test_failures++;
        return;
    }
    char from[96], to[96], path[128];
    snprintf(from, sizeof from, "%s/watched", dir);
    snprintf(to, sizeof to, "%s/moved", dir);
    CHECK(mkdir(from, 0755) == 0);
    snprintf(path, sizeof path, "%s/report.html", from);
    kiln_model *m = small_model(ctx);
    move mv = {.from = from, .to = to};
    CHECK_OK(ctx, fit_with_report(m, path, move_away, &mv));
    int32_t n = 0;
    CHECK_OK(ctx, kiln_model_history_count(m, &n));
    CHECK(n == EPOCHS);
    CHECK(warnings == EPOCHS - 1 + 1);   /* epochs 2 to 4, and the end */
    snprintf(path, sizeof path, "%s/report.html", to);
    char *page = read_text(path);
    CHECK(page && strstr(page, "Training: 1 of 4 epochs done"));
    free(page);
    remove(path);
    rmdir(to);
    kiln_model_destroy(m);
    kiln_context_destroy(ctx);
}

typedef struct budget {
    long allowed;    /* allocations that succeed before one fails (-1: all) */
    long made, live;
} budget;

/* Called from kiln's threads too (the loader's): the counts are atomic. */
static void *counting_realloc(void *user, void *ptr, size_t size)
{
    budget *b = user;
    if (size == 0) {
        __atomic_sub_fetch(&b->live, ptr != NULL, __ATOMIC_RELAXED);
        free(ptr);
        return NULL;
    }
    if (b->allowed >= 0 && __atomic_fetch_add(&b->made, 1, __ATOMIC_RELAXED) >= b->allowed)
        return NULL;
    if (b->allowed < 0)
        __atomic_add_fetch(&b->made, 1, __ATOMIC_RELAXED);
    void *p = realloc(ptr, size);
    __atomic_add_fetch(&b->live, p && !ptr, __ATOMIC_RELAXED);
    return p;
}

/* Each host allocation of a fit with a report failed in turn: fit ends in
 * KILN_ERROR_OUT_OF_MEMORY, or KILN_OK when only a rewrite of the report
 * failed (a warning), and leaks nothing. */
static void test_allocation_failures(void)
{
    budget b = {.allowed = -1};
    kiln_context_options o = {.struct_size = sizeof o, .seed = 17,
                              .realloc_fn = counting_realloc, .realloc_user = &b};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&o, &ctx) != KILN_OK) {
        test_failures++;
        return;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/alloc.html", dir);
    kiln_dataset *train = small_data(ctx, TRAIN, 0), *valid = small_data(ctx, VALID, 5);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = EPOCHS;
    fo.batch_size = BATCH;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = valid;
    fo.report_path = path;
    int oom = 0, ok = 0, bad = 0;
    for (long k = 0;; k++) {
        kiln_model *m = small_model(ctx);
        const long live = b.live;
        b.allowed = b.made + k;
        const kiln_status st = kiln_model_fit(m, train, &fo);
        const int all_made = b.made < b.allowed;
        b.allowed = -1;
        kiln_model_destroy(m);
        oom += st == KILN_ERROR_OUT_OF_MEMORY;
        ok += st == KILN_OK;
        if ((st != KILN_OK && st != KILN_ERROR_OUT_OF_MEMORY) || b.live > live) {
            fprintf(stderr, "allocation %ld of fit failed: %s (%s), %ld leaked\n", k,
                    kiln_status_name(st), kiln_context_last_error(ctx), b.live - live);
            bad++;
        }
        if (all_made)
            break;
    }
    printf("allocation failures in fit: %d out of memory, %d trained on\n", oom, ok);
    CHECK(bad == 0 && oom > 0 && ok > 1);
    remove(path);
    kiln_dataset_destroy(train);
    kiln_dataset_destroy(valid);
    kiln_context_destroy(ctx);
    CHECK(b.live == 0);
}

int main(int argc, char **argv)
{
    kiln_context *ctx = test_context(17);
    if (!ctx)
        SKIP_MISSING("no OpenCL device");
    snprintf(dir, sizeof dir, "/tmp/kiln-report-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    test_report(ctx, argc > 1 ? argv[1] : NULL);
    test_stopped(ctx);
    test_unwritable(ctx);
    test_later_failure();
    test_allocation_failures();
    char path[128];
    snprintf(path, sizeof path, "%s/report.html", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/stopped.html", dir);
    remove(path);
    rmdir(dir);
    kiln_context_destroy(ctx);
    return test_finish("test_report");
}
