/* Private: LoRA (kiln_model_enable_lora) as the rooms that write weights
 * out see it. */
#ifndef KILN_RUNTIME_MODEL_LORA_H
#define KILN_RUNTIME_MODEL_LORA_H

#include "runtime/model/model.h"

/* Folds every layer's adapters into the weights they adapt, in `flat`, a
 * host copy of the parameters in the flat layout: what model files and
 * ONNX export carry. */
void kiln_model_merge_adapters(const kiln_model *m, float *flat);

/* Nonzero when parameter p of node i is an adapter, which merged files
 * leave out. */
int kiln_node_param_is_adapter(const kiln_model *m, kiln_node i, int p);

#endif
