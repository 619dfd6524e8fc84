/* A compiled model's Inputs and outputs as the public API lists them: how
 * many, and each one's name, sample shape and dtype. Compile decides both
 * lists (inputs.c finds the Inputs, outputs.c plans the outputs), so these
 * read what compile left. */
#include "runtime/context/context.h"
#include "runtime/model/model.h"

typedef enum which { INPUTS, OUTPUTS } which;

static const char *const count_call[] = {"kiln_model_input_count", "kiln_model_output_count"};
static const char *const info_call[] = {"kiln_model_input_info", "kiln_model_output_info"};
static const char *const noun[] = {"input", "output"};

static kiln_status count_of(const kiln_model *m, which w, int32_t *count)
{
    if (count)
        *count = 0;
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!count)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: count is NULL",
                          count_call[w]);
    int entered;
    kiln_status st = kiln_model_enter_reading(m, count_call[w], &entered);
    if (st == KILN_OK)
        st = kiln_model_check_compiled(m, count_call[w]);
    if (st == KILN_OK)
        *count = w == INPUTS ? m->graph.n_inputs : m->graph.n_outputs;
    kiln_model_leave_reading(m, entered);
    return st;
}

static kiln_status info_of(const kiln_model *m, which w, int32_t index, kiln_tensor_info *info)
{
    if (!m)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!info || info->struct_size < sizeof *info)
        return kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: info is NULL or its "
                          "struct_size is not sizeof(kiln_tensor_info)", info_call[w]);
    int entered;
    kiln_status st = kiln_model_enter_reading(m, info_call[w], &entered);
    if (st == KILN_OK)
        st = kiln_model_check_compiled(m, info_call[w]);
    const int32_t n = w == INPUTS ? m->graph.n_inputs : m->graph.n_outputs;
    if (st == KILN_OK && (index < 0 || index >= n))
        st = kiln_error(m->ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: %s %d of %d", info_call[w],
                        noun[w], (int)index, (int)n);
    if (st == KILN_OK) {
        /* Compile fills outputs[] for one output too (n_outputs is then 1). */
        const kiln_node_rec *node = &m->graph.nodes[w == INPUTS ? m->graph.inputs[index]
                                                           : m->graph.outputs[index]];
        kiln_tensor_info r = {.struct_size = sizeof r, .name = node->name,
                              .rank = node->shape.rank,
                              .dtype = node->ints ? KILN_DTYPE_INT32 : KILN_DTYPE_FLOAT32};
        for (int32_t d = 0; d < node->shape.rank; d++)
            r.dims[d] = node->shape.dims[d];   /* the rest stay 0, as kiln.h says */
        kiln_struct_export(info, &r, sizeof r);
    }
    kiln_model_leave_reading(m, entered);
    return st;
}

kiln_status kiln_model_input_count(const kiln_model *m, int32_t *count)
{
    return count_of(m, INPUTS, count);
}

kiln_status kiln_model_input_info(const kiln_model *m, int32_t index, kiln_tensor_info *info)
{
    return info_of(m, INPUTS, index, info);
}

kiln_status kiln_model_output_count(const kiln_model *m, int32_t *count)
{
    return count_of(m, OUTPUTS, count);
}

kiln_status kiln_model_output_info(const kiln_model *m, int32_t index, kiln_tensor_info *info)
{
    return info_of(m, OUTPUTS, index, info);
}
