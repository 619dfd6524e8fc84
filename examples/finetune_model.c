#include "finetune_model.h"

#include <string.h>

kiln_status finetune_freeze(kiln_model *m, const char *prefix, int32_t *frozen)
{
    int32_t n = 0;
    *frozen = 0;
    kiln_status st = kiln_model_layer_count(m, &n);
    for (int32_t i = 0; st == KILN_OK && i < n; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        st = kiln_model_layer_info(m, i, &info);
        if (st == KILN_OK && strncmp(info.name, prefix, strlen(prefix)) == 0) {
            st = kiln_model_set_trainable(m, info.name, 0);
            ++*frozen;
        }
    }
    if (st == KILN_OK && *frozen == 0) {
        /* set_trainable on the prefix itself fails naming it, as we want. */
        st = kiln_model_set_trainable(m, prefix, 0);
        if (st == KILN_OK)
            *frozen = 1;
    }
    return st;
}

kiln_status finetune_build(kiln_context *ctx, const char *onnx_path, const char *features,
                           const char *backbone, int32_t classes, kiln_model **out)
{
    kiln_model *m = NULL;
    kiln_node cut = KILN_NODE_INVALID;
    int32_t frozen = 0;
    *out = NULL;
    kiln_status st = kiln_model_import_onnx(ctx, onnx_path, NULL, &m);
    if (st == KILN_OK)
        st = kiln_model_find_layer(m, features, &cut);
    int32_t n = 0;
    for (int32_t i = 0; st == KILN_OK && kiln_model_layer_count(m, &n) == KILN_OK && i < n; i++) {
        kiln_layer_info info = {.struct_size = sizeof info};
        st = kiln_model_layer_info(m, i, &info);
        if (st == KILN_OK && strcmp(info.name, features) == 0 && info.rank > 1) {
            const kiln_flatten_options f = {.struct_size = sizeof f, .name = "head_flatten"};
            cut = kiln_flatten(m, cut, &f);
            break;
        }
    }
    if (st == KILN_OK) {
        const kiln_dense_options head = {.struct_size = sizeof head, .name = FINETUNE_HEAD,
                                         .units = classes,
                                         .activation = KILN_ACTIVATION_SOFTMAX};
        st = kiln_model_set_output(m, kiln_dense(m, cut, &head));
    }
    if (st == KILN_OK)
        st = finetune_freeze(m, backbone, &frozen);
    if (st != KILN_OK) {
        kiln_model_destroy(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}
