/* kiln: the command-line tool for model files (kiln_model_save) and ONNX
 * files.
 *   kiln summary MODEL
 *   kiln predict MODEL INPUT.npy OUTPUT.npy [--batch N] [--scale S]
 *   kiln evaluate MODEL FEATURES.npy LABELS.npy [--batch N] [--scale S] [--loss L]
 *   kiln fit MODEL FEATURES.npy LABELS.npy --save OUT [options] (cli/fit.c)
 *   kiln export-onnx MODEL OUT.onnx
 *   kiln devices
 *   kiln tune
 * Every option is in cli/args.c's usage text. Exit status: 0 done, 1 kiln
 * refused or failed (its message on stderr), 2 usage.
 * It is written on include/kiln.h alone, as any application could be: the
 * model's inputs and outputs come from kiln_model_input_info and
 * kiln_model_output_info, a .npy file from kiln_dataset_from_npy. */
#include "args.h"
#include "fit.h"
#include "model_open.h"
#include "report.h"
#include "kiln.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MODEL on one device (placements of a model-parallel model are not needed
 * to predict), compiled: an ONNX file with --loss after --from-logits for
 * evaluate (`for_loss`), with any loss to predict or export (mse: it fits
 * every output). */
static kiln_status load(kiln_context *ctx, const cli_args *a, int for_loss, kiln_model **m)
{
    kiln_status st = cli_open(ctx, a->paths[0], KILN_STRATEGY_ONE_DEVICE,
                              KILN_STORAGE_FLOAT32, m);
    if (st != KILN_OK || !cli_is_onnx(a->paths[0]))
        return st;
    if (for_loss && (a->given & CLI_FROM_LOGITS))
        st = cli_from_logits(*m, a->loss);
    const kiln_compile_options co = {.struct_size = sizeof co,
        .loss = for_loss ? a->loss : KILN_LOSS_MEAN_SQUARED_ERROR,
        .strategy = KILN_STRATEGY_ONE_DEVICE};
    if (st == KILN_OK)
        st = kiln_model_compile(*m, &co);
    if (st != KILN_OK) {
        kiln_model_destroy(*m);
        *m = NULL;
    }
    return st;
}

static int summary(kiln_context *ctx, const cli_args *a)
{
    kiln_model *m = NULL;
    /* An imported model is shown as imported, before any compile. */
    kiln_status st = cli_open(ctx, a->paths[0], KILN_STRATEGY_ONE_DEVICE,
                              KILN_STORAGE_FLOAT32, &m);
    if (st != KILN_OK)
        return cli_failed(ctx, a->command, st);
    size_t length = 0;
    st = kiln_model_summary(m, NULL, 0, &length);
    char *text = st == KILN_OK ? malloc(length + 1) : NULL;
    if (st == KILN_OK && !text)
        st = KILN_ERROR_OUT_OF_MEMORY;
    if (st == KILN_OK)
        st = kiln_model_summary(m, text, length + 1, NULL);
    if (st == KILN_OK)
        fputs(text, stdout);   /* a model file's ends with its loss and optimizer */
    free(text);
    kiln_model_destroy(m);
    return st == KILN_OK ? 0 : cli_failed(ctx, a->command, st);
}

/* A version 1.0 .npy header for float32 data of `shape` (rows first), padded
 * as NumPy pads it (the data starts on a multiple of 64); then `rows` rows
 * of shape[1..] floats, row i at data + i * stride. */
static int write_npy(const char *path, const int64_t *shape, int rank, const float *data,
                     int64_t stride)
{
    char dict[256], dims[160] = "";
    int64_t row = 1;
    for (int d = 0; d < rank; d++) {
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%lld,%s",
                 (long long)shape[d], d + 1 < rank ? " " : "");
        row *= d ? shape[d] : 1;
    }
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
    for (int64_t i = 0; ok && i < shape[0]; i++)
        for (int64_t e = 0; ok && e < row; e++) {
            uint32_t u;
            memcpy(&u, &data[i * stride + e], 4);
            const unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8),
                                         (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
            ok = fwrite(le, 1, 4, f) == 4;
        }
    return fclose(f) == 0 && ok;
}

/* "(28, 28, 1)", "(4,)"; with `count` >= 0 it comes first, as a file's
 * samples do. */
static const char *shape_str(int64_t count, int32_t rank, const int32_t *dims, char *buf,
                             size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    if (count >= 0 && used < size)
        used += (size_t)snprintf(buf + used, size - used, "%lld%s", (long long)count,
                                 rank ? ", " : "");
    for (int32_t d = 0; d < rank && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d", d ? ", " : "", (int)dims[d]);
    if (used < size)
        snprintf(buf + used, size - used, rank + (count >= 0) == 1 ? ",)" : ")");
    return buf;
}

/* OUTPUT with `name` put before its extension: out.npy -> out.<name>.npy
 * (out -> out.<name>). A '/' in a layer name would move the file to
 * another folder, so it becomes '_'. */
static char *output_path(const char *out, const char *name)
{
    const char *slash = strrchr(out, '/');
    const char *dot = strrchr(slash ? slash + 1 : out, '.');
    const size_t stem = dot && dot != (slash ? slash + 1 : out) ? (size_t)(dot - out)
                                                                 : strlen(out);
    const size_t size = strlen(out) + strlen(name) + 2;
    char *path = malloc(size);
    if (!path)
        return NULL;
    snprintf(path, size, "%.*s.%s%s", (int)stem, out, name, out + stem);
    for (char *c = path + stem + 1; c < path + stem + 1 + strlen(name); c++)
        *c = *c == '/' ? '_' : *c;
    return path;
}

/* Writes the `count` samples' outputs (output_size floats each, the
 * model's outputs one after another, as kiln_model_predict writes them)
 * to OUTPUT, or one file per output; 0, or 1 with the reason printed. */
static int write_outputs(kiln_context *ctx, kiln_model *m, const cli_args *a, const float *out,
                         int64_t count, int64_t output_size)
{
    int32_t n_outputs = 0;
    kiln_status st = kiln_model_output_count(m, &n_outputs);
    int64_t offset = 0;
    for (int32_t k = 0; st == KILN_OK && k < n_outputs; k++) {
        kiln_tensor_info info = {.struct_size = sizeof info};
        st = kiln_model_output_info(m, k, &info);
        if (st != KILN_OK)
            break;
        int64_t shape[KILN_MAX_RANK + 1] = {count}, size = 1;
        for (int d = 0; d < info.rank; d++) {
            shape[d + 1] = info.dims[d];
            size *= info.dims[d];
        }
        char *path = n_outputs == 1 ? NULL : output_path(a->paths[2], info.name);
        if (n_outputs > 1 && !path)
            return cli_refuse(a->command, KILN_ERROR_OUT_OF_MEMORY, "no memory for a file name");
        const char *to = path ? path : a->paths[2];
        if (!write_npy(to, shape, info.rank + 1, out + offset, output_size)) {
            cli_refuse(a->command, KILN_ERROR_IO, "cannot write %s: %s", to, strerror(errno));
            free(path);
            return 1;
        }
        if (path)
            printf("%s\n", path);
        free(path);
        offset += size;
    }
    return st == KILN_OK ? 0 : cli_failed(ctx, a->command, st);
}

/* Every sample's features, into `ids` for a dataset of ids, else `floats`. */
static kiln_status read_all(const kiln_dataset *ds, int64_t count, int64_t size, float *floats,
                            int32_t *ids)
{
    kiln_status st = KILN_OK;
    for (int64_t i = 0; st == KILN_OK && i < count; i++) {
        const kiln_sample_buffers b = {.struct_size = sizeof b,
                                       .features = ids ? NULL : floats + i * size,
                                       .int_features = ids ? ids + i * size : NULL};
        st = kiln_dataset_read(ds, i, &b);
    }
    return st;
}

static int predict(kiln_context *ctx, const cli_args *a)
{
    kiln_model *m = NULL;
    kiln_dataset *ds = NULL;
    float *in = NULL, *out = NULL;
    int32_t *in_ids = NULL;
    int rc = 0;
    int32_t n_inputs = 0, rank = 0, dims[KILN_MAX_RANK] = {0};
    int64_t count = 0, output_size = 0;
    kiln_tensor_info input = {.struct_size = sizeof input};
    kiln_dtype dtype = KILN_DTYPE_FLOAT32;
    char want[64], got[96];
    kiln_status st = load(ctx, a, 0, &m);
    if (st == KILN_OK)
        st = kiln_model_input_count(m, &n_inputs);
    if (st == KILN_OK)
        st = kiln_model_input_info(m, 0, &input);
    if (st == KILN_OK)
        st = kiln_model_output_size(m, &output_size);
    if (st != KILN_OK)
        goto fail;
    if (n_inputs > 1) {
        rc = cli_refuse(a->command, KILN_ERROR_UNSUPPORTED, "the model has %d inputs; predict "
                    "reads one .npy file, for a model of one input", (int)n_inputs);
        goto done;
    }
    shape_str(-1, input.rank, input.dims, want, sizeof want);
    /* Read as stored first: the file's dtype decides whether ids may be read. */
    kiln_npy_options o = {.struct_size = sizeof o, .scale = a->scale};
    st = kiln_dataset_from_npy(ctx, a->paths[1], NULL, &o, &ds);
    if (st == KILN_ERROR_SHAPE) {   /* no sample dimension: say what the model takes */
        rc = cli_refuse(a->command, st, "%s; the model takes samples of shape %s",
                    kiln_context_last_error(ctx), want);
        goto done;
    }
    if (st == KILN_OK)
        st = kiln_dataset_count(ds, &count);
    if (st == KILN_OK)
        st = kiln_dataset_sample_shape(ds, &rank, dims, &dtype);
    if (st != KILN_OK)
        goto fail;
    int same = rank == input.rank;
    for (int d = 0; same && d < rank; d++)
        same = dims[d] == input.dims[d];
    if (!same) {
        rc = cli_refuse(a->command, KILN_ERROR_SHAPE, "%s holds an array of shape %s, the model "
                    "takes samples of shape %s", a->paths[1],
                    shape_str(count, rank, dims, got, sizeof got), want);
        goto done;
    }
    const int ids = input.dtype == KILN_DTYPE_INT32;
    if (ids && (dtype == KILN_DTYPE_FLOAT32 || dtype == KILN_DTYPE_FLOAT16 ||
                a->scale != 1.0f)) {
        rc = cli_refuse(a->command, KILN_ERROR_INVALID_ARGUMENT, "the model's input '%s' takes "
                    "int32 ids: %s must hold integers, without --scale", input.name,
                    a->paths[1]);
        goto done;
    }
    if (ids) {   /* the same file again, its integers read as the ids they are */
        kiln_dataset_destroy(ds);
        ds = NULL;
        o = (kiln_npy_options){.struct_size = sizeof o, .ids = 1};
        st = kiln_dataset_from_npy(ctx, a->paths[1], NULL, &o, &ds);
        if (st != KILN_OK)
            goto fail;
    }
    int64_t in_size = 1;
    for (int d = 0; d < rank; d++)
        in_size *= dims[d];
    if (ids)
        in_ids = malloc((size_t)(count * in_size) * sizeof(int32_t));
    else
        in = malloc((size_t)(count * in_size) * sizeof(float));
    out = malloc((size_t)(count * output_size) * sizeof(float));
    if ((!in && !in_ids) || !out) {
        rc = cli_refuse(a->command, KILN_ERROR_OUT_OF_MEMORY, "%lld samples do not fit in memory",
                    (long long)count);
        goto done;
    }
    st = read_all(ds, count, in_size, in, in_ids);
    const kiln_batch_arrays batch = {.struct_size = sizeof batch, .count = count,
                                     .features = in, .int_features = in_ids};
    if (st == KILN_OK)
        st = kiln_model_predict(m, &batch, out, a->batch);
    if (st != KILN_OK)
        goto fail;
    rc = write_outputs(ctx, m, a, out, count, output_size);
    goto done;
fail:
    rc = cli_failed(ctx, a->command, st);
done:
    kiln_dataset_destroy(ds);
    free(in), free(out), free(in_ids);
    kiln_model_destroy(m);
    return rc;
}

static int evaluate(kiln_context *ctx, const cli_args *a)
{
    kiln_model *m = NULL;
    kiln_dataset *ds = NULL;
    kiln_npy_options o = {.struct_size = sizeof o, .scale = a->scale};
    kiln_metrics r = {.struct_size = sizeof r};
    kiln_tensor_info input = {.struct_size = sizeof input};
    kiln_status st = load(ctx, a, 1, &m);
    if (st == KILN_OK)
        st = kiln_model_input_info(m, 0, &input);
    o.ids = st == KILN_OK && input.dtype == KILN_DTYPE_INT32;   /* a model of ids reads ids */
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
    return st == KILN_OK ? 0 : cli_failed(ctx, a->command, st);
}

static int export_onnx(kiln_context *ctx, const cli_args *a)
{
    kiln_model *m = NULL;
    kiln_status st = load(ctx, a, 0, &m);
    if (st == KILN_OK)
        st = kiln_model_export_onnx(m, a->paths[1]);
    kiln_model_destroy(m);
    return st == KILN_OK ? 0 : cli_failed(ctx, a->command, st);
}

/* One line per device of the context (KILN_DEVICES chooses them): what a
 * script on a new machine prints first (tools/gpu_check.sh). */
static int devices(kiln_context *ctx, const cli_args *a)
{
    int32_t n = 0;
    kiln_status st = kiln_context_device_count(ctx, &n);
    for (int32_t i = 0; i < n && st == KILN_OK; i++) {
        kiln_device_info d = {.struct_size = sizeof d};
        st = kiln_context_device_info(ctx, i, &d);
        if (st != KILN_OK)
            break;
        const char *type = d.type == KILN_DEVICE_GPU ? "GPU"
                           : d.type == KILN_DEVICE_CPU ? "CPU"
                           : d.type == KILN_DEVICE_ACCELERATOR ? "accelerator" : "other";
        printf("device %d: %s %s (%s; platform %s; driver %s), %.0f MiB, %u compute units, "
               "%u MHz, %s kernels, GEMM: %s\n", (int)d.index, type, d.name, d.vendor,
               d.platform, d.driver_version, (double)d.global_memory_bytes / 1048576.0,
               d.compute_units, d.max_clock_mhz, d.gpu_kernels ? "GPU" : "CPU",
               d.gemm_parameters);
    }
    return st == KILN_OK ? 0 : cli_failed(ctx, a->command, st);
}

/* The GEMM parameter searches (KILN_GEMM_TUNING=search: CLBlast's
 * parameters and kiln's own GEMM's cache budget), run by the context this
 * command opens, stored in kiln's cache folder for every later context;
 * then what `devices` prints. */
static int tune(kiln_context *ctx, const cli_args *a)
{
    return devices(ctx, a);
}

int main(int argc, char **argv)
{
#define IO (CLI_BATCH | CLI_SCALE)
    static const struct {
        const char *name;
        int paths;
        cli_options options;   /* the CLI_* options it takes */
        int (*run)(kiln_context *ctx, const cli_args *a);
    } commands[] = {
        {.name = "summary", .paths = 1, .run = summary},
        {.name = "predict", .paths = 3, .options = IO, .run = predict},
        {.name = "evaluate", .paths = 3, .options = IO | CLI_LOSS | CLI_FROM_LOGITS,
         .run = evaluate},
        {.name = "fit", .paths = 3, .options = CLI_ALL_OPTIONS, .run = cli_fit},
        {.name = "export-onnx", .paths = 2, .run = export_onnx},
        {.name = "devices", .paths = 0, .run = devices},
        {.name = "tune", .paths = 0, .run = tune},
    };
#undef IO
    if (argc < 2)
        return cli_usage(NULL);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        cli_print_usage(stdout);
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
    if (c == n)
        return cli_usage("unknown command '%s'", argv[1]);
    cli_args a;
    if (!cli_parse(argc, argv, commands[c].options, &a))
        return 2;
    if (a.help) {   /* asked for, so stdout and success, whatever else was given */
        cli_print_usage(stdout);
        return 0;
    }
    if (a.n_paths != commands[c].paths)
        return cli_usage("%s takes %d file name%s, got %d", a.command, commands[c].paths,
                         commands[c].paths == 1 ? "" : "s", a.n_paths);
    if (a.n_paths > 0 && !cli_is_onnx(a.paths[0]) && (a.given & CLI_BUILD_OPTIONS))
        return cli_usage("%s is for ONNX models: the model file %s keeps the loss, optimizer "
                         "and frozen layers it was compiled with",
                         cli_option_name(a.given & CLI_BUILD_OPTIONS), a.paths[0]);
    char err[1024] = "";
    const kiln_gemm_tuning tuning =
        commands[c].run == tune ? KILN_GEMM_TUNING_SEARCH : KILN_GEMM_TUNING_STORED;
    /* tune shows each candidate's time as it searches. */
    const kiln_context_options co = {
        .struct_size = sizeof co, .error_buffer = err, .error_buffer_size = sizeof err,
        .seed = a.seed, .gemm_tuning = tuning,
        .log_level = commands[c].run == tune ? KILN_LOG_INFO : KILN_LOG_ERROR};
    kiln_context *ctx = NULL;
    if (kiln_context_create(&co, &ctx) != KILN_OK) {
        fprintf(stderr, "kiln %s: %s\n", a.command, err);
        return 1;
    }
    const int rc = commands[c].run(ctx, &a);
    kiln_context_destroy(ctx);
    return rc;
}
