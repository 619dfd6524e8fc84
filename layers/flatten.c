/* Flatten: one dimension per sample; memory order is unchanged. */
#include "layers/layer.h"
#include "layers/onnx_graph.h"

#include <stdio.h>

typedef struct flatten_config {
    int32_t unused;
} flatten_config;

static kiln_status flatten_infer(void *config, kiln_layer_build *b)
{
    (void)config;
    const int64_t size = kiln_shape_size(&b->in[0]);
    if (size > INT32_MAX) {
        snprintf(b->error, sizeof b->error, "%lld values per sample is too many",
                 (long long)size);
        return KILN_ERROR_SHAPE;
    }
    b->out.rank = 1;
    b->out.dims[0] = (int32_t)size;
    return KILN_OK;
}

/* kiln's Flatten keeps memory order, which is NHWC's. */
static void flatten_export_onnx(kiln_onnx_graph *g, int32_t i)
{
    if (kiln_onnx_input_shape(g, i, 0)->rank == 1) {
        kiln_onnx_identity(g, i);
        return;
    }
    const char *x = kiln_onnx_input_value(g, i, 0, KILN_ONNX_CL);
    const char *out = kiln_onnx_output(g, i, KILN_ONNX_CL);
    kiln_onnx_attr_int(g, kiln_onnx_add_node(g, "Flatten", &x, 1, out), "axis", 1);
    kiln_onnx_activate(g, i, KILN_ONNX_CL, out);
}

const kiln_layer_ops kiln_layer_flatten = {
    .kind = "flatten", .config_size = sizeof(flatten_config), .min_inputs = 1, .max_inputs = 1,
    .infer = flatten_infer, .forward = kiln_identity_forward, .backward = kiln_identity_backward,
    .export_onnx = flatten_export_onnx,
};
