/* kiln fit: an imported model gets its new head, frozen layers, loss and
 * optimizer here; a model file trains on as it was compiled. */
#include "fit.h"
#include "lora_args.h"
#include "model_open.h"
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Index of the layer named `name`, or -1. */
static int32_t layer_index(const kiln_model *m, const char *name, kiln_layer_info *info)
{
    int32_t n = 0;
    kiln_model_layer_count(m, &n);
    for (int32_t i = 0; i < n; i++)
        if (kiln_model_layer_info(m, i, info) == KILN_OK && strcmp(info->name, name) == 0)
            return i;
    return -1;
}

/* --head UNITS --head-from NODE: a Dense named "head" with the loss's
 * activation, after a Flatten when NODE's output is not 1-D. */
static kiln_status add_head(kiln_model *m, const cli_args *a)
{
    kiln_node x = KILN_NODE_INVALID;
    kiln_layer_info info = {.struct_size = sizeof info};
    kiln_status st = kiln_model_find_layer(m, a->head_from, &x);
    if (st != KILN_OK)
        return st;
    if (layer_index(m, a->head_from, &info) >= 0 && info.rank > 1) {
        const kiln_flatten_options f = {.struct_size = sizeof f, .name = "head_flatten"};
        x = kiln_flatten(m, x, &f);
    }
    const kiln_activation act = a->loss == KILN_LOSS_MEAN_SQUARED_ERROR ? KILN_ACTIVATION_LINEAR
                              : a->loss == KILN_LOSS_BINARY_CROSSENTROPY
                                  ? KILN_ACTIVATION_SIGMOID
                                  : KILN_ACTIVATION_SOFTMAX;
    const kiln_dense_options d = {.struct_size = sizeof d, .name = "head", .units = a->head,
                                  .activation = act};
    return kiln_model_set_output(m, kiln_dense(m, x, &d));
}

/* --freeze PREFIX...: each must match a layer; 1 (said) when one does not. */
static int freeze(kiln_context *ctx, kiln_model *m, const cli_args *a)
{
    int32_t n = 0;
    kiln_model_layer_count(m, &n);
    for (int p = 0; p < a->n_freeze; p++) {
        const size_t len = strlen(a->freeze[p]);
        int matched = 0;
        for (int32_t i = 0; i < n; i++) {
            kiln_layer_info info = {.struct_size = sizeof info};
            kiln_status st = kiln_model_layer_info(m, i, &info);
            if (st == KILN_OK && strncmp(info.name, a->freeze[p], len) == 0) {
                st = kiln_model_set_trainable(m, info.name, 0);
                matched++;
            }
            if (st != KILN_OK)
                return cli_failed(ctx, a->command, st);
        }
        if (!matched)
            return cli_refuse(a->command, KILN_ERROR_INVALID_ARGUMENT, "--freeze %s matches no "
                              "layer of %s (kiln summary lists them)", a->freeze[p],
                              a->paths[0]);
        printf("froze %d layer(s) named %s...\n", (int)matched, a->freeze[p]);
    }
    return 0;
}

/* Whether OUT's folder can be written, asked before training so that a
 * typo does not cost the run; 1 (said) when not. */
static int check_save_folder(const cli_args *a)
{
    const char *slash = strrchr(a->save, '/');
    char *dir = slash ? malloc((size_t)(slash - a->save) + 2) : NULL;
    if (slash && !dir)
        return cli_refuse(a->command, KILN_ERROR_OUT_OF_MEMORY, "no memory for a file name");
    if (dir)
        snprintf(dir, (size_t)(slash - a->save) + 2, "%.*s", (int)(slash - a->save + 1),
                 a->save);
    const int ok = access(dir ? dir : ".", W_OK) == 0;
    int rc = 0;
    if (!ok)
        rc = cli_refuse(a->command, KILN_ERROR_IO, "cannot write --save %s: its folder %s: %s",
                        a->save, dir ? dir : ".", strerror(errno));
    free(dir);
    return rc;
}

/* What the compiled model trains with, as kiln reports it: its summary's
 * lines after the parameter counts (the loss, the optimizer and, under
 * --activations float16, "Activations: half precision ..."). */
static kiln_status print_settings(const kiln_model *m)
{
    size_t length = 0;
    kiln_status st = kiln_model_summary(m, NULL, 0, &length);
    char *text = st == KILN_OK ? malloc(length + 1) : NULL;
    if (st == KILN_OK && !text)
        st = KILN_ERROR_OUT_OF_MEMORY;
    if (st == KILN_OK)
        st = kiln_model_summary(m, text, length + 1, NULL);
    const char *counts = st == KILN_OK ? strstr(text, "\nNon-trainable params:") : NULL;
    const char *after = counts ? strchr(counts + 1, '\n') : NULL;
    if (after)
        fputs(after + 1, stdout);
    free(text);
    return st;
}

static void print_history(const kiln_model *m)
{
    int32_t n = 0;
    kiln_model_history_count(m, &n);
    for (int32_t i = 0; i < n; i++) {
        kiln_epoch_record r = {.struct_size = sizeof r};
        if (kiln_model_history_epoch(m, i, &r) != KILN_OK)
            return;
        printf("epoch %d/%d: loss %.6f", (int)i + 1, (int)n, r.loss);
        if (r.accuracy >= 0)
            printf(", accuracy %.6f", r.accuracy);
        if (r.has_validation) {
            printf(", val_loss %.6f", r.val_loss);
            if (r.val_accuracy >= 0)
                printf(", val_accuracy %.6f", r.val_accuracy);
        }
        printf("\n");
    }
}

int cli_fit(kiln_context *ctx, const cli_args *a)
{
    const int onnx = cli_is_onnx(a->paths[0]);
    if (!a->save)
        return cli_usage("fit needs --save OUT, the model file to write");
    if (check_save_folder(a))
        return 1;
    kiln_model *m = NULL;
    kiln_dataset *ds = NULL;
    int rc = 0;
    kiln_status st = cli_open(ctx, a->paths[0], a->strategy, a->activations, &m);
    if (st == KILN_OK && onnx && a->head)
        st = add_head(m, a);
    if (st == KILN_OK && onnx && (a->given & CLI_FROM_LOGITS))
        st = cli_from_logits(m, a->loss);
    if (st != KILN_OK)
        goto fail;
    if (onnx && (rc = freeze(ctx, m, a)) != 0)
        goto done;
    if (onnx && (rc = cli_lora_apply(ctx, m, a)) != 0)
        goto done;
    if (onnx && (st = cli_compile(m, a)) != KILN_OK)
        goto fail;
    if ((st = print_settings(m)) != KILN_OK)
        goto fail;
    kiln_tensor_info input = {.struct_size = sizeof input};
    st = kiln_model_input_info(m, 0, &input);
    kiln_npy_options o = {.struct_size = sizeof o, .scale = a->scale};
    o.ids = st == KILN_OK && input.dtype == KILN_DTYPE_INT32;   /* a model of ids reads ids */
    if (o.ids && a->scale == 1.0f)
        o.scale = 0.0f;   /* ids are read as stored; another --scale is refused */
    if (st == KILN_OK)
        st = kiln_dataset_from_npy(ctx, a->paths[1], a->paths[2], &o, &ds);
    const kiln_fit_options fit = {.struct_size = sizeof fit, .epochs = a->epochs,
                                  .batch_size = a->batch,
                                  .no_shuffle = (a->given & CLI_NO_SHUFFLE) != 0,
                                  .validation_split = a->validation_split};
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fit);
    if (st == KILN_OK)
        print_history(m);
    if (st == KILN_OK)
        st = kiln_model_save(m, a->save);
    if (st != KILN_OK)
        goto fail;
    printf("saved %s\n", a->save);
    goto done;
fail:
    rc = cli_failed(ctx, a->command, st);
done:
    kiln_dataset_destroy(ds);
    kiln_model_destroy(m);
    return rc;
}
