/* Private: a model's description (its graph, every layer's options and the
 * training settings, as versioned JSON) that model files and checkpoints
 * carry in their safetensors __metadata__, and the way back: parsed into a
 * kiln_model_desc (no device needed) and rebuilt through the public
 * builders. The format, version 1:
 *   {"format": "kiln.model", "version": 1, "writer": "kiln 0.1.0",
 *    "layers": [{"name": "conv2d", "kind": "conv2d", "inputs": ["input_layer"],
 *                "activation": "relu", "device": null, "trainable": true,
 *                "options": {"filters": 32, "kernel_size": [3, 3], ...}}, ...],
 *    "output": "dense_1",
 *    "compile": {"loss": "sparse_categorical_crossentropy", "accuracy": true,
 *                "gradient_accumulation_steps": 1,
 *                "optimizer": {"kind": "adam", "learning_rate": 0.001, ...,
 *                              "schedule": {"kind": "constant", ...}}}}
 * Every key is required ("compile" only of compiled models; "device" is
 * null for a layer not placed) and no other is allowed: a reader of
 * version 1 knows exactly what a layer was built with. Optional, written
 * only where they apply (older files have none): compile's "ignore_class"
 * and "label_smoothing" (and each of several outputs' in "losses"),
 * the schedule's "warmup_target" (with one) and "boundaries" and "values"
 * (piecewise constant decay),
 * a layer's "lora": {"rank": 8, "alpha": 16} (kiln_model_enable_lora, in a
 * file that keeps the adapters apart: checkpoints, kiln_save_options's
 * keep_lora_adapters) and in it "targets": "key,value" (where
 * kiln_model_enable_lora_with chose them),
 * and for a model of several outputs "outputs": ["cls", "reg"] beside
 * "output" (the first) and compile's "losses": [{"loss":
 * "mean_squared_error", "weight": 0.5}, ...], one per output. */
#ifndef KILN_RUNTIME_SAVING_MODEL_DESC_H
#define KILN_RUNTIME_SAVING_MODEL_DESC_H

#include "runtime/formats/json.h"
#include "runtime/model/model.h"

/* The __metadata__ key that holds the description. */
#define KILN_MODEL_META_KEY "kiln.model"
/* The description version this kiln writes, and the newest it reads. */
#define KILN_MODEL_DESC_VERSION KILN_MODEL_FILE_VERSION

/* The description of `m` (compiled or not) as JSON text, NUL-terminated
 * (free it with kiln_free). `adapters`: the file keeps LoRA's adapters
 * apart, and each LoRA layer gets "lora": {"rank": r, "alpha": a} and its
 * chosen "targets" (0: the
 * kernels hold them merged, and the layers are described as plain ones).
 * KILN_ERROR_UNSUPPORTED for a layer kind model files do not know,
 * KILN_ERROR_INVALID_ARGUMENT for a layer name that is not UTF-8, each
 * naming the layer after `call`; KILN_ERROR_OUT_OF_MEMORY. */
kiln_status kiln_model_describe(const kiln_model *m, const char *call, int adapters,
                                char **text, size_t *length);

/* One layer as the description gives it. */
typedef struct kiln_layer_desc {
    const kiln_layer_ops *ops;
    const char *name;                  /* in the parsed document */
    int32_t inputs[KILN_MAX_INPUTS];   /* indices of earlier layers */
    int n_inputs;
    kiln_activation activation;
    int32_t device;                    /* -1: not placed */
    int trainable;
    kiln_shape shape;                  /* Input: one sample's shape */
    kiln_layer_args options;           /* the args its kind's configure takes */
    /* "weights": each parameter's own name (an imported model's), in the
     * parsed document; NULL when the file names them "<layer>/<param>". */
    const kiln_json *weights;
    /* "transposed_weights": per parameter, whether ONNX export writes it
     * transposed (an imported Gemm's transB weight); NULL: none. */
    const kiln_json *transposed;
    /* "lora": kiln_model_enable_lora's rank (0: none) and alpha, and the
     * targets (in the parsed document; NULL: the kind's default). */
    int32_t lora_rank;
    float lora_alpha;
    const char *lora_targets;
} kiln_layer_desc;

typedef struct kiln_model_desc {
    kiln_json_doc doc;                 /* the names point into it */
    kiln_layer_desc *layers;
    int32_t n_layers;
    int32_t output;                    /* a layer index */
    int has_compile;                   /* the settings below were given */
    kiln_loss loss;
    int32_t no_accuracy;
    int32_t top_k, mean_absolute_error, binary_accuracy;   /* the metrics compile asked for */
    float binary_threshold;
    int32_t has_ignore_class, ignore_class;   /* sparse labels' padding class */
    float label_smoothing;             /* a model of one output's */
    int32_t gradient_accumulation_steps;
    /* Compile's optimizer; its schedule points at `schedule` below, so a
     * description is used where it was parsed, never copied. */
    kiln_optimizer_options optimizer;
    kiln_lr_schedule schedule;
    kiln_lr_pieces schedule_pieces;    /* the schedule's boundaries and values */
    /* Several outputs ("outputs" and compile's "losses", written only for
     * such a model): layer indices, and each one's loss and weight. */
    int32_t n_outputs;
    kiln_node outputs[KILN_MAX_MODEL_OUTPUTS];
    int32_t n_losses;
    kiln_output_loss losses[KILN_MAX_MODEL_OUTPUTS];
} kiln_model_desc;

/* Parses a description; `what` (the file) starts every message.
 * KILN_ERROR_FORMAT naming what is malformed (and where), also for an
 * unknown key; KILN_ERROR_UNSUPPORTED for a newer version (naming both) or
 * a layer kind this kiln does not know; KILN_ERROR_OUT_OF_MEMORY. On
 * failure `out` is left empty (kiln_model_desc_free accepts it). */
kiln_status kiln_model_desc_parse(kiln_context *ctx, const char *what, const char *text,
                                  size_t length, kiln_model_desc *out);
void kiln_model_desc_free(kiln_model_desc *desc);

/* Adds the description's layers to the empty model `m` through the public
 * builders, then (with `place`) its placements, its frozen layers and its
 * output. A layer the builders refuse is KILN_ERROR_FORMAT naming `what`
 * and the builder's message; a placement on a device the context lacks is
 * KILN_ERROR_INVALID_ARGUMENT naming both. */
kiln_status kiln_model_desc_build(const kiln_model_desc *desc, const char *what, int place,
                                  kiln_model *m);

#endif
