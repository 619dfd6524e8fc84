/* kiln: the command-line tool for model files (kiln_model_save).
 *   kiln summary MODEL
 *   kiln predict MODEL INPUT.npy OUTPUT.npy [--batch N] [--scale S]
 *   kiln evaluate MODEL FEATURES.npy LABELS.npy [--batch N] [--scale S]
 *   kiln export-onnx MODEL OUT.onnx
 * The model runs on one device (KILN_DEVICES chooses which). Exit status:
 * 0 done, 1 kiln refused or failed (its message on stderr), 2 usage.
 * It links kiln's internal archive, not the shared library: it reads .npy
 * files with kiln's own strict reader (runtime/formats/npy.h) and the model's input
 * and output shapes, which the public API does not give, from the model. */
#include "kiln.h"
#include "runtime/context/context.h"
#include "runtime/model/loss.h"
#include "runtime/model/model.h"
#include "runtime/formats/npy.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kiln summary MODEL\n"
    "       kiln predict MODEL INPUT.npy OUTPUT.npy [--batch N] [--scale S]\n"
    "       kiln evaluate MODEL FEATURES.npy LABELS.npy [--batch N] [--scale S]\n"
    "       kiln export-onnx MODEL OUT.onnx\n"
    "MODEL is a file written by kiln_model_save (or a checkpoint). predict writes\n"
    "float32 outputs of shape (samples, output dims...); evaluate prints the loss\n"
    "and accuracy. Features are read as value * S (default 1; 0.00392156863 maps\n"
    "bytes to [0, 1] as the examples train). --batch: samples per step (default 32).\n";

static int usage(const char *why)
{
    if (why)
        fprintf(stderr, "kiln: %s\n", why);
    fputs(usage_text, stderr);
    return 2;
}

typedef struct args {
    const char *command;
    const char *paths[3];
    int n_paths;
    int32_t batch;
    float scale;
    int options;      /* --batch or --scale was given */
} args;

/* Positional paths and the options; 0 (with the reason printed) on a
 * usage error. */
static int parse(int argc, char **argv, args *a)
{
    a->command = argv[1];
    a->n_paths = 0;
    a->batch = 32;
    a->scale = 1.0f;
    a->options = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--batch") == 0 || strcmp(arg, "--scale") == 0) {
            char *end = NULL;
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            errno = 0;
            a->options = 1;
            if (v && arg[2] == 'b') {
                const long n = strtol(v, &end, 10);
                if (*end || errno || n < 1 || n > INT32_MAX)
                    return usage("--batch needs a whole number >= 1"), 0;
                a->batch = (int32_t)n;
            } else if (v) {
                const double s = strtod(v, &end);
                if (*end || errno || !isfinite(s) || fabs(s) > 3.4e38)
                    return usage("--scale needs a finite number"), 0;
                a->scale = (float)s;
            } else {
                fprintf(stderr, "kiln: %s needs a value\n", arg);
                return usage(NULL), 0;
            }
        } else if (arg[0] == '-' && arg[1] == '-') {
            fprintf(stderr, "kiln: unknown option %s\n", arg);
            return usage(NULL), 0;
        } else if (a->n_paths == 3) {
            fprintf(stderr, "kiln: unexpected argument %s\n", arg);
            return usage(NULL), 0;
        } else {
            a->paths[a->n_paths++] = arg;
        }
    }
    return 1;
}

/* Prints the context's message for a failed call; returns 1. */
static int failed(kiln_context *ctx, const char *command, kiln_status st)
{
    fprintf(stderr, "kiln %s: %s (%s)\n", command, kiln_context_last_error(ctx),
            kiln_status_name(st));
    return 1;
}

static kiln_status load(kiln_context *ctx, const char *path, kiln_model **m)
{
    /* One device: placements of a model-parallel model are not needed to
     * predict. */
    const kiln_compile_options one = {.struct_size = sizeof one,
                                      .strategy = KILN_STRATEGY_ONE_DEVICE};
    return kiln_model_load(ctx, path, &one, m);
}

static int summary(kiln_context *ctx, const args *a)
{
    kiln_model *m = NULL;
    kiln_status st = load(ctx, a->paths[0], &m);
    if (st != KILN_OK)
        return failed(ctx, a->command, st);
    size_t length = 0;
    st = kiln_model_summary(m, NULL, 0, &length);
    char *text = st == KILN_OK ? malloc(length + 1) : NULL;
    if (st == KILN_OK && !text)
        st = KILN_ERROR_OUT_OF_MEMORY;
    if (st == KILN_OK)
        st = kiln_model_summary(m, text, length + 1, NULL);
    if (st == KILN_OK) {
        const kiln_optimizer_options *o = &m->optimizer;
        fputs(text, stdout);
        if (kiln_model_outputs_apart(m))
            for (int32_t k = 0; k < m->n_outputs; k++)
                printf("Loss of output '%s': %s x %g%s\n", m->nodes[m->outputs[k]].name,
                       kiln_loss_name(m->heads[k].loss), (double)m->head_weight[k],
                       m->heads[k].accuracy ? " (with accuracy)" : "");
        else
            printf("Loss: %s%s\n", kiln_loss_name(m->heads[0].loss),
                   m->heads[0].accuracy ? " (with accuracy)" : "");
        printf("Optimizer: %s, learning rate %g", o->kind == KILN_OPTIMIZER_ADAM ? "adam" : "sgd",
               (double)o->learning_rate);
        if (o->kind == KILN_OPTIMIZER_SGD && o->momentum > 0.0f)
            printf(", momentum %g%s", (double)o->momentum, o->nesterov ? " (Nesterov)" : "");
        if (m->accumulation_steps > 1)
            printf(", gradients accumulated over %d steps", (int)m->accumulation_steps);
        printf("\n");
    }
    free(text);
    kiln_model_destroy(m);
    return st == KILN_OK ? 0 : failed(ctx, a->command, st);
}

/* A version 1.0 .npy header for float32 data of `shape`, padded as NumPy
 * pads it (the data starts on a multiple of 64). */
static int write_npy(const char *path, const int64_t *shape, int rank, const float *data,
                     int64_t count)
{
    char dict[256], dims[160] = "";
    for (int d = 0; d < rank; d++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%lld,%s",
                 (long long)shape[d], d + 1 < rank ? " " : "");
    if (rank > 1)
        dims[strlen(dims) - 1] = '\0';   /* (3, 10) but (3,) */
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': (%s), }", dims);
    while ((10 + n + 1) % 64)
        dict[n++] = ' ';
    dict[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff),
                              (unsigned char)(n >> 8)};
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head &&
             fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (int64_t i = 0; ok && i < count; i++) {
        uint32_t u;
        memcpy(&u, &data[i], 4);
        const unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8),
                                     (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
        ok = fwrite(le, 1, 4, f) == 4;
    }
    return fclose(f) == 0 && ok;
}

static int same_shape(const kiln_npy *x, const kiln_shape *s)
{
    int same = x->rank == s->rank + 1;
    for (int d = 0; same && d < s->rank; d++)
        same = x->shape[d + 1] == s->dims[d];
    return same;
}

static int predict(kiln_context *ctx, const args *a)
{
    kiln_model *m = NULL;
    kiln_npy x;
    memset(&x, 0, sizeof x);
    float *in = NULL, *out = NULL;
    kiln_status st = load(ctx, a->paths[0], &m);
    if (st == KILN_OK && m->n_inputs > 1)
        st = kiln_error(ctx, KILN_ERROR_UNSUPPORTED, "the model has %d inputs; predict reads "
                        "one .npy file, for a model of one input", (int)m->n_inputs);
    if (st == KILN_OK)
        st = kiln_npy_map(ctx, a->paths[1], &x);
    if (st != KILN_OK)
        goto fail;
    const kiln_shape *in_shape = &m->nodes[m->input].shape;
    const kiln_shape *out_shape = &m->nodes[m->output].shape;
    if (!same_shape(&x, in_shape)) {
        char want[64], got[96] = "(";
        for (int d = 0; d < x.rank; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)x.shape[d]);
        st = kiln_error(ctx, KILN_ERROR_SHAPE, "%s holds an array of shape %s%s, the model "
                        "takes samples of shape %s", a->paths[1], got, x.rank == 1 ? ",)" : ")",
                        kiln_shape_str(in_shape, want, sizeof want));
        goto fail;
    }
    const int64_t count = x.rows, out_size = kiln_shape_size(out_shape);
    in = malloc((size_t)(count * x.row_size + 1) * sizeof(float));
    out = malloc((size_t)(count * out_size + 1) * sizeof(float));
    if (!in || !out) {
        st = kiln_error(ctx, KILN_ERROR_OUT_OF_MEMORY, "%lld samples do not fit in memory",
                        (long long)count);
        goto fail;
    }
    if (m->input_ints && (x.dtype == KILN_DTYPE_FLOAT32 || x.dtype == KILN_DTYPE_FLOAT16 ||
                          a->scale != 1.0f)) {
        st = kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "the model's input '%s' takes int32 "
                        "ids: %s must hold integers, without --scale",
                        m->nodes[m->input].name, a->paths[1]);
        goto fail;
    }
    if (m->input_ints) {   /* ids ride in the floats' place (kiln_input_ints) */
        kiln_npy flat = x;
        flat.rows = count * x.row_size;
        flat.row_size = 1;
        for (int64_t i = 0; i < flat.rows; i++)
            kiln_npy_read_label(&flat, i, (int32_t *)(void *)(in + i));
    } else {
        kiln_npy_read_floats(&x, 0, count, a->scale, 0.0f, in);
    }
    if (count > 0)
        st = kiln_model_predict(m, in, count, out, a->batch);
    if (st != KILN_OK)
        goto fail;
    int64_t shape[KILN_MAX_RANK + 1] = {count};
    for (int d = 0; d < out_shape->rank; d++)
        shape[d + 1] = out_shape->dims[d];
    if (!write_npy(a->paths[2], shape, out_shape->rank + 1, out, count * out_size)) {
        st = kiln_error(ctx, KILN_ERROR_IO, "cannot write %s: %s", a->paths[2], strerror(errno));
        goto fail;
    }
    kiln_npy_unmap(&x);
    free(in), free(out);
    kiln_model_destroy(m);
    return 0;
fail:
    kiln_npy_unmap(&x);
    free(in), free(out);
    kiln_model_destroy(m);
    return failed(ctx, a->command, st);
}

static int evaluate(kiln_context *ctx, const args *a)
{
    kiln_model *m = NULL;
    kiln_dataset *ds = NULL;
    kiln_npy_options o = {.struct_size = sizeof o, .scale = a->scale};
    kiln_metrics r = {.struct_size = sizeof r};
    kiln_status st = load(ctx, a->paths[0], &m);
    o.ids = st == KILN_OK && m->input_ints;   /* a model of ids reads its features as ids */
    if (o.ids && a->scale == 1.0f)
        o.scale = 0.0f;   /* ids are read as stored; another --scale is refused */
    if (st == KILN_OK)
        st = kiln_dataset_from_npy(ctx, a->paths[1], a->paths[2], &o, &ds);
    if (st == KILN_OK)
        st = kiln_model_evaluate(m, ds, a->batch, &r);
    if (st == KILN_OK) {
        printf("samples: %lld\nloss: %.6f\n", (long long)r.samples, r.loss);
        if (r.accuracy >= 0)
            printf("accuracy: %.6f\n", r.accuracy);
        else
            printf("accuracy: not computed\n");
    }
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
    return st == KILN_OK ? 0 : failed(ctx, a->command, st);
}

static int export_onnx(kiln_context *ctx, const args *a)
{
    kiln_model *m = NULL;
    kiln_status st = load(ctx, a->paths[0], &m);
    if (st == KILN_OK)
        st = kiln_model_export_onnx(m, a->paths[1]);
    kiln_model_destroy(m);
    return st == KILN_OK ? 0 : failed(ctx, a->command, st);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int paths;
        int options;   /* takes --batch and --scale */
        int (*run)(kiln_context *ctx, const args *a);
    } commands[] = {
        {.name = "summary", .paths = 1, .run = summary},
        {.name = "predict", .paths = 3, .options = 1, .run = predict},
        {.name = "evaluate", .paths = 3, .options = 1, .run = evaluate},
        {.name = "export-onnx", .paths = 2, .run = export_onnx},
    };
    if (argc < 2)
        return usage(NULL);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kiln %s\n", kiln_version());
        return 0;
    }
    int c = 0;
    const int n = (int)(sizeof commands / sizeof commands[0]);
    while (c < n && strcmp(argv[1], commands[c].name) != 0)
        c++;
    if (c == n) {
        fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
        return usage(NULL);
    }
    args a;
    if (!parse(argc, argv, &a))
        return 2;
    if (a.n_paths != commands[c].paths) {
        fprintf(stderr, "kiln %s: takes %d file name%s, got %d\n", a.command, commands[c].paths,
                commands[c].paths == 1 ? "" : "s", a.n_paths);
        return usage(NULL);
    }
    if (!commands[c].options && a.options)
        return usage("--batch and --scale are for predict and evaluate");
    kiln_context_options co = {.struct_size = sizeof co};
    char err[1024] = "";
    co.error_buffer = err;
    co.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK) {
        fprintf(stderr, "kiln %s: %s\n", a.command, err);
        return 1;
    }
    const int rc = commands[c].run(ctx, &a);
    kiln_context_destroy(ctx);
    return rc;
}
