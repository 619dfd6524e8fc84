/* Private: the model's graph part (m->graph), owned by model/: the nodes the
 * builders add, the Inputs and outputs, and the first builder error. Other
 * rooms touch it only as docs/architecture.md ("The parts of a model")
 * allows; tools/check_floors.py checks it. */
#ifndef KILN_RUNTIME_MODEL_GRAPH_H
#define KILN_RUNTIME_MODEL_GRAPH_H

#include "layers/layer.h"
#include "runtime/data/dataset.h"

typedef struct kiln_node_rec {
    const kiln_layer_ops *ops;
    void *config;
    char name[64];
    kiln_node inputs[KILN_MAX_INPUTS];
    int n_inputs;
    kiln_activation activation;   /* applied by the runtime after the layer */
    kiln_shape shape;             /* output, batch not counted */
    kiln_param_spec params[KILN_MAX_PARAMS];
    int n_params;
    size_t param_offset[KILN_MAX_PARAMS];  /* floats into the flat buffer */
    int on_path;                  /* the output depends on it */
    /* A trainable parameter at or before it (compile): backward runs it and
     * its gradient is kept; a frozen or parameterless prefix (a frozen
     * backbone, an imported model's input permute) runs no backward. */
    int needs_gradient;
    int32_t device;               /* kiln_model_place: its device, or -1 */
    int frozen;                   /* kiln_model_set_trainable(.., 0): no updates */
    int ints;                     /* its output holds int32 ids (an int Input) */
    /* Imported (kiln_model_import_onnx): each parameter's own name, which
     * files and accessors use instead of "<layer>/<param>" (NULL: that), and
     * its initial value in kiln's layout (NULL: the spec's initialiser).
     * Both belong to the model. */
    char *param_name[KILN_MAX_PARAMS];
    float *param_init[KILN_MAX_PARAMS];
    /* Nonzero: the ONNX file held it transposed ((out, in), Gemm's transB):
     * export writes it back so, under the same name. */
    unsigned char param_transposed[KILN_MAX_PARAMS];
    /* kiln_model_enable_lora's rank (0: no LoRA), alpha and targets ("":
     * the kind's default), which model files that keep the adapters
     * describe. */
    int32_t lora_rank;
    float lora_alpha;
    char lora_targets[64];
} kiln_node_rec;

typedef struct kiln_graph {
    kiln_node_rec *nodes;
    int32_t n_nodes, cap_nodes;
    kiln_node output;            /* -1: the last node; with several outputs the first */
    /* The outputs in order (compile makes `output` the only one when
     * kiln_model_set_outputs was not called), each with its loss plan
     * (heads) and weight; a sample's labels are output 0's label words
     * (ids or floats, 4 bytes each), then output 1's, ... */
    kiln_node outputs[KILN_MAX_MODEL_OUTPUTS];
    int32_t n_outputs;
    kiln_status build_status;    /* first builder error, reported by compile */
    char build_error[512];
    /* The Inputs in declaration order, the model's input order; `input` is
     * the first. One sample's features are the inputs' values one after
     * another: input k's input_size[k] floats at input_offset[k], the
     * whole sample_size floats (ids ride as int32 bits). */
    kiln_node inputs[KILN_MAX_MODEL_INPUTS];
    int32_t n_inputs;
    kiln_node input;
    int64_t input_offset[KILN_MAX_MODEL_INPUTS];
    int64_t sample_size;
    /* Inputs of int32 ids: each id must be below ids[k].limit, the smallest
     * of the id-reading layers input k feeds (limit 0: a float input). */
    kiln_id_range ids[KILN_MAX_MODEL_INPUTS];
    int input_ints;              /* the first input holds ids */
    int placed;                  /* some node was placed on a device */
} kiln_graph;

/* Nothing updates parameter p of the node: its layer is frozen, or the
 * parameter is (LoRA's base kernel). */
static inline int kiln_param_frozen(const kiln_node_rec *node, int p)
{
    return node->frozen || node->params[p].frozen;
}

/* Parameter p of a node as files and accessors name it: its own name, or
 * "<layer>/<param>"; returns buf. */
const char *kiln_node_param_name(const kiln_node_rec *node, int p, char *buf, size_t size);

/* The node's output size per sample and the input size of the model. */
int64_t kiln_node_size(const kiln_model *m, kiln_node node);

/* Compile's part: the Inputs in order, their places in a sample and their
 * id limits; every Input must reach the output. */
kiln_status kiln_model_find_inputs(kiln_model *m);

/* Gives node i an element-wise activation after the fact, and the name of
 * the node whose output it now makes (the importer's Sigmoid -> Mul as the
 * SiLU of the Conv before it): 0, changing nothing, unless its kind takes
 * one and it has none yet. */
int kiln_node_take_activation(kiln_model *m, kiln_node i, kiln_activation act,
                              const char *name);

/* Which of the model's outputs node i is, or -1. */
int32_t kiln_model_output_index(const kiln_model *m, kiln_node i);

/* Is node i one of the model's Inputs? */
int kiln_node_is_input(const kiln_model *m, kiln_node i);

/* The checks a batch of `count` samples of host features (sample_size
 * floats each, sample i named first_sample + i) gets before any device
 * work: ids in range for every input of ids and, when `finite`, no NaN or
 * Inf in float inputs. `call` starts the messages. */
kiln_status kiln_model_check_features(const kiln_model *m, const char *call, const float *x,
                                      int64_t count, int64_t first_sample, int finite);

/* A hash of every parameter's layer kind, name and shape (checkpoints
 * carry it; the processes of an MPI job compare it). */
uint64_t kiln_model_fingerprint(const kiln_model *m);
/* The same with LoRA's adapters merged away: a model file's, which is the
 * fingerprint of the plain model it loads as. */
uint64_t kiln_model_fingerprint_merged(const kiln_model *m);

/* Host copy of initial parameters in the flat layout (n_param_floats). */
void kiln_model_init_params(const kiln_model *m, float *flat);

#endif
