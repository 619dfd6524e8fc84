/* The registry of layer kinds (layers/kinds.h): what model files, ONNX
 * export and their tests walk instead of naming kinds. */
#include "layers/layer.h"

#include <string.h>

const kiln_layer_ops *const kiln_layer_kinds[] = {
#define KILN_LAYER_KIND(name) &kiln_layer_##name,
#include "layers/kinds.h"
#undef KILN_LAYER_KIND
};

const int kiln_layer_kind_count = (int)(sizeof kiln_layer_kinds / sizeof kiln_layer_kinds[0]);

const kiln_layer_ops *kiln_layer_kind_named(const char *kind)
{
    for (int k = 0; k < kiln_layer_kind_count; k++)
        if (strcmp(kiln_layer_kinds[k]->kind, kind) == 0)
            return kiln_layer_kinds[k];
    return NULL;
}
