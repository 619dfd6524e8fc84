/* Private: all the runtime knows about a layer kind. A layer file defines its
 * configuration struct, its per-replica device state and one ops table. */
#ifndef KILN_LAYERS_LAYER_H
#define KILN_LAYERS_LAYER_H

#include "kiln.h"
#include "opencl/device.h"

#define KILN_MAX_INPUTS 8
/* MultiHeadAttention's 8, and LoRA's adapters on its projections. */
#define KILN_MAX_PARAMS 16
/* Values one kiln_step.sum_replicas call may carry: batch norm's two sums
 * per channel for up to 4096 channels, and a count. */
#define KILN_MAX_SYNC_VALUES (2 * 4096 + 1)

typedef struct kiln_shape {
    int32_t rank;
    int32_t dims[KILN_MAX_RANK];
} kiln_shape;

/* The product of the dimensions; -1 if it does not fit an int64. */
int64_t kiln_shape_size(const kiln_shape *shape);

/* The most floats one sample of a layer's output, or one parameter, may
 * hold: kernels index them with 32-bit ints. */
#define KILN_MAX_FLOATS INT32_MAX
/* "(28, 28, 1)" into buf; returns buf. */
const char *kiln_shape_str(const kiln_shape *shape, char *buf, size_t size);

/* KILN_INIT_UNIFORM: uniform in [-init_limit, init_limit] (Keras RandomUniform);
 * KILN_INIT_CONSTANT: every value init_value (Keras Constant). */
typedef enum kiln_init {
    KILN_INIT_ZEROS,
    KILN_INIT_GLOROT_UNIFORM,
    KILN_INIT_ONES,
    KILN_INIT_UNIFORM,
    KILN_INIT_CONSTANT
} kiln_init;

typedef struct kiln_param_spec {
    const char *name;     /* "kernel", "bias": a static string */
    kiln_shape shape;
    kiln_init init;
    int64_t fan_in, fan_out;
    float init_limit;     /* KILN_INIT_UNIFORM's */
    float init_value;     /* KILN_INIT_CONSTANT's */
    /* State the layer updates itself (batch norm's moving statistics): no
     * gradient, no optimizer; saved and loaded with the weights. */
    int non_trainable;
    /* With non_trainable: a value nothing ever changes (a binary layer's
     * constant operand), kept beside the frozen weights, which replicas
     * never average (averaging identical copies could round them). */
    int constant;
    /* Weights the optimizer never updates while the rest of the layer
     * trains (LoRA's base kernel): laid out with frozen layers' weights, so
     * no decay, clipping or update reaches them; their gradient goes unused. */
    int frozen;
    /* A low-rank adapter (LoRA's A and B): merge_adapters folds it into the
     * weight it adapts, and model files and ONNX export carry only that. */
    int adapter;
} kiln_param_spec;

/* What infer receives and fills. On a shape error infer writes a message
 * (without the layer's name; the caller adds it) and returns KILN_ERROR_SHAPE
 * or KILN_ERROR_INVALID_ARGUMENT. */
typedef struct kiln_layer_build {
    const kiln_shape *in;
    int n_in;
    kiln_shape out;
    /* Set by infer when the output holds int32 ids, not floats (an Input
     * declared with kiln_input_ints); the bits ride in the 4-byte slots. */
    int out_ints;
    kiln_param_spec params[KILN_MAX_PARAMS];
    int n_params;
    char error[256];
} kiln_layer_build;

/* One forward or backward call on one replica. Offsets count floats. */
typedef struct kiln_step {
    kiln_device *dev;
    int32_t batch;
    int training;
    const kiln_shape *in_shape;     /* n_in shapes, batch not counted */
    const kiln_shape *out_shape;
    int n_in;
    kiln_buffer *const *in;         /* n_in activations, batch x size */
    kiln_buffer *out;
    /* Forward: the element-wise activation the layer applies to `out`
     * itself (fuses_activation said it would); KILN_ACTIVATION_LINEAR when
     * the runtime applies the node's activation, or there is none. */
    kiln_activation activation;
    /* The layer is frozen (kiln_model_set_trainable): its parameter
     * gradients go unused, and a layer with an inference mode (batch norm)
     * runs it in training too, as in Keras. */
    int frozen;
    kiln_buffer *params;            /* the replica's flat parameter buffer */
    kiln_buffer *grads;             /* its flat gradient buffer, same layout */
    const size_t *param_offset;     /* per parameter of this layer */
    /* Backward: the gradient arriving at `out`, and where the input
     * gradients go. d_in[i] is NULL when input i needs none; when
     * d_in_accumulate[i] is set the layer adds to it instead of writing. */
    kiln_buffer *d_out;
    kiln_buffer *const *d_in;
    const int *d_in_accumulate;
    /* Synchronised layers (batch norm) replace values[0..n) (n at most
     * KILN_MAX_SYNC_VALUES) with their sums over the step's replicas, in a
     * fixed order; NULL: this replica alone. Fails with a message when a
     * replica stopped. */
    kiln_status (*sum_replicas)(void *user, double *values, size_t n);
    void *sum_replicas_user;
    /* Random masks (dropout) depend only on these, so every strategy draws
     * the same for a sample: the context's seed, the training step, and
     * where this replica's first sample sits in the global batch. */
    uint64_t seed;
    int64_t step_number;
    int32_t first_sample;
} kiln_step;

/* How a model file writes one of a kind's options (runtime/saving/
 * model_desc.c reads and writes the JSON): its key, its type, and where it
 * sits in the args struct the kind's configure takes and describe fills.
 * The model file's optimizer and schedule settings are listed the same way. */
typedef enum kiln_field_type {
    KILN_FIELD_INT,        /* int32_t */
    KILN_FIELD_PAIR,       /* int32_t[2] */
    KILN_FIELD_FLOAT,      /* float */
    KILN_FIELD_BOOL,       /* int32_t, 0 or 1 */
    KILN_FIELD_NOT_BOOL,   /* int32_t written negated: no_bias as "use_bias" */
    KILN_FIELD_PADDING,    /* kiln_padding */
    KILN_FIELD_SEED,       /* uint64_t */
    /* kiln_input_args's rank and dims: a sample's shape. */
    KILN_FIELD_SHAPE,
    /* int32_t: 0 float32, 1 int32; written only when int32 and read as
     * float32 when absent, so that files of float models stay as they were. */
    KILN_FIELD_DTYPE,
    KILN_FIELD_COUNT,      /* int64_t, >= 0 (steps) */
    KILN_FIELD_QUAD,       /* int32_t[4] */
    /* int32_t written as names[value] (kiln_layer_field.names): an enum */
    KILN_FIELD_NAME
} kiln_field_type;

typedef struct kiln_layer_field {
    const char *key;
    kiln_field_type type;
    size_t offset;
    /* Nonzero: written only when not zero, and zero when absent, so that
     * files from before the option read as they did and files of layers
     * that leave it at zero stay as they were. */
    int optional;
    /* KILN_FIELD_NAME's names, indexed by value. */
    const char *const *names;
    int n_names;
} kiln_layer_field;

/* The largest args struct of any kind (the registry test checks each). */
#define KILN_LAYER_ARGS_MAX 256

/* Room for any kind's args struct, aligned for any of its members. */
typedef union kiln_layer_args {
    unsigned char bytes[KILN_LAYER_ARGS_MAX];
    uint64_t align_u64;
    double align_double;
    void *align_pointer;
} kiln_layer_args;

#define KILN_FIELDS(list) .fields = list, .n_fields = (int)(sizeof list / sizeof list[0])

struct kiln_onnx_graph;
struct kiln_onnx_import;

typedef struct kiln_layer_ops {
    const char *kind;
    size_t config_size;    /* the layer's options and inferred shapes */
    size_t replica_size;   /* per-replica device state (0: none) */
    int min_inputs, max_inputs;
    /* Fills the zeroed config (config_size bytes) from what the layer's
     * public builder (runtime/model/builders.c) received, `args`: its
     * options struct, or the kiln_*_args struct named above the kind's
     * configure function. May be NULL: the zeroed config is the layer's. */
    void (*configure)(void *config, const void *args);
    /* The size of the struct configure takes (0: none), and its options as
     * model files write them, in the order written (keys are Keras's). */
    size_t args_size;
    const kiln_layer_field *fields;
    int n_fields;
    /* Nonzero when the kind's builder takes an activation. */
    int takes_activation;
    /* The inverse of configure: fills `args` (zeroed, of the struct
     * configure takes) so that configure(args) gives this config again;
     * what model files write (runtime/saving/model_desc.c). Names, activations
     * and pointers are the runtime's; NULL when configure is. */
    void (*describe)(const void *config, void *args);
    kiln_status (*infer)(void *config, kiln_layer_build *build);
    /* Fetches the kernels forward and backward launch (kiln_kernel_get) into
     * the replica state; called once when the replica is created, so that
     * kiln_model_compile reports a kernel that is missing or does not build.
     * May be NULL. */
    kiln_status (*kernels)(const void *config, void *replica, kiln_device *dev);
    /* Allocates per-replica buffers for batches up to max_batch; called
     * again with a larger max_batch after release. May be NULL. */
    kiln_status (*prepare)(const void *config, void *replica, kiln_device *dev,
                           const kiln_shape *in_shape, int32_t max_batch);
    kiln_status (*forward)(const void *config, void *replica, const kiln_step *step);
    /* Writes parameter gradients (overwriting) and requested input gradients. */
    kiln_status (*backward)(const void *config, void *replica, const kiln_step *step);
    void (*release)(void *replica);  /* may be NULL */
    uint64_t (*flops)(const void *config, const kiln_shape *in_shape);  /* per sample */
    /* Nonzero when the layer exchanges values between replicas through
     * kiln_step.sum_replicas (may be NULL: never). */
    int (*synchronized)(const void *config);
    /* Nonzero when forward applies an element-wise activation
     * (kiln_step.activation) to its output itself, saving the runtime's
     * pass over it and its separate buffer (may be NULL: never). */
    int (*fuses_activation)(const void *config);
    /* Non-NULL for a layer that reads int32 ids (its one input must hold
     * them; no other layer may take ids): ids must be in [0, id_limit).
     * The runtime checks every id on the host before it reaches the
     * device, naming the sample and position (kiln_check_ids). */
    int32_t (*id_limit)(const void *config);
    /* Writes node i's inference form into the ONNX graph (layers/
     * onnx_graph.h), ending with kiln_onnx_activate or kiln_onnx_identity;
     * NULL: the kind has no ONNX form, and export says so. */
    void (*export_onnx)(struct kiln_onnx_graph *g, int32_t i);
    /* Reads an ONNX node whose op maps onto this kind (layers/
     * onnx_import.h): checks its attributes, fills the builder's options
     * and where each parameter comes from; KILN_ERROR_UNSUPPORTED with
     * imp->error naming what is not supported. NULL: no op imports as it. */
    kiln_status (*import_onnx)(struct kiln_onnx_import *imp);
    /* Turns on LoRA (kiln_model_enable_lora_with) before compile: the
     * layer's next infer freezes its kernels and adds the adapters.
     * `targets`: what to adapt, a comma-separated list of the kind's own
     * names (NULL: the kind's default). A list the kind does not take is
     * refused with KILN_ERROR_INVALID_ARGUMENT and `error` saying why
     * (without the layer's name), the config unchanged. NULL: the kind has
     * no LoRA. */
    kiln_status (*enable_lora)(void *config, int32_t rank, float alpha, const char *targets,
                               char *error, size_t size);
    /* Nonzero: backward writes no gradient that nothing uses: none for a
     * frozen layer (kiln_step.frozen) and none for a frozen, non_trainable
     * or constant parameter. Replicas then keep gradients for the trainable
     * parameters only; a kind with parameters that leaves it 0 gets a
     * gradient buffer reaching its frozen weights too. */
    int writes_trainable_gradients_only;
    /* Adds the adapters' product into the weights they adapt, in a host
     * copy of the parameters (params[p]: parameter p's values), for the
     * files and graphs that carry merged weights. NULL: no adapters. */
    void (*merge_adapters)(const void *config, float *const *params);
} kiln_layer_ops;

/* For fuses_activation: always. */
int kiln_layer_fuses_activation(const void *config);

/* What the Dropout and Input builders hand their layer's configure op
 * (the other builders hand their public options struct). */
typedef struct kiln_dropout_args {
    float rate;
    uint64_t seed;
} kiln_dropout_args;

typedef struct kiln_input_args {
    int32_t rank;
    const int32_t *dims;   /* NULL: infer reports the missing shape */
    int32_t ints;          /* Input: the features are int32 ids (kiln_input_ints) */
} kiln_input_args;

/* What the Reshape builder hands its configure op: the target shape, as
 * Input's (one dimension may be -1). */
typedef kiln_input_args kiln_reshape_args;

/* What the Expand builder hands its configure op: the target shape, as
 * Input's. */
typedef kiln_input_args kiln_expand_args;

/* What the LearnedTokens builder hands its configure op: the per-sample
 * shape, as Input's. */
typedef kiln_input_args kiln_learned_tokens_args;

/* What the Permute builder hands its configure op: the permutation, as
 * Input's shape (axes counted from 1). */
typedef kiln_input_args kiln_permute_args;

/* What the Reduce builder hands its configure op: the op, the axes as the
 * caller gave them (the batch counted as 0; copied, at most KILN_MAX_RANK
 * read) and the options' keepdims. */
typedef struct kiln_reduce_args {
    int32_t op;            /* kiln_reduce_op */
    int32_t n_axes;
    int32_t axes[KILN_MAX_RANK];
    int32_t keepdims;
    int32_t no_axes;       /* the caller's axes was NULL */
} kiln_reduce_args;

/* What the Concatenate builder hands its configure op: the axis as the
 * caller gave it (Keras's, counting the batch). */
typedef struct kiln_concatenate_args {
    int32_t axis;
} kiln_concatenate_args;

/* What the kiln_math builder hands its configure op: the op and its
 * constants (kiln_math_options's, HARD_SIGMOID's defaults applied). */
typedef struct kiln_math_args {
    int32_t op;            /* kiln_math_op */
    float exponent;
    float alpha, beta;
    int32_t has_min;
    float min;
    int32_t has_max;
    float max;
} kiln_math_args;

/* The last kiln_activation value. */
#define KILN_ACTIVATION_LAST KILN_ACTIVATION_HARD_SWISH

/* Applies an activation to rows x cols values (softmax over each row).
 * Backward turns dy (in place) into the gradient before the activation,
 * given the activation's input x and output y; x is read only when
 * kiln_activation_needs_input says so (else it may be y). */
kiln_status kiln_activation_forward(kiln_device *dev, kiln_activation act,
                                    const kiln_buffer *x, kiln_buffer *y, size_t rows,
                                    size_t cols);
kiln_status kiln_activation_backward(kiln_device *dev, kiln_activation act,
                                     const kiln_buffer *x, const kiln_buffer *y,
                                     kiln_buffer *dy, size_t rows, size_t cols);

/* Nonzero when the activation's gradient needs its input, not only its
 * output (GELU, SiLU, hard swish: not monotonic): no layer fuses it, so that the
 * runtime keeps the input. */
int kiln_activation_needs_input(kiln_activation act);

/* y[r, c] = act(y[r, c] + bias[c]) over a rows x cols matrix; the bias is
 * at `offset` in the flat parameter buffer; act is element-wise or linear. */
kiln_status kiln_bias_add(kiln_device *dev, kiln_buffer *y, size_t rows, size_t cols,
                          const kiln_buffer *params, size_t offset, kiln_activation act);

/* out = kiln_step.activation(from), batch x output-size values (nothing
 * when the activation is linear); `from` may be `out`: in place, for
 * layers that fuse it no better. */
kiln_status kiln_step_activate(const kiln_step *s, const kiln_buffer *from);

/* Column sums of a rows x cols matrix into out[offset..offset+cols), added to
 * out when accumulate is set: the bias gradient. */
kiln_status kiln_column_sum(kiln_device *dev, const kiln_buffer *x, size_t rows, size_t cols,
                            kiln_buffer *out, size_t offset, int accumulate);

/* The length of the chunks a long dimension of n values is summed in, a
 * partial sum a chunk, then the chunks in a fixed order (batch norm's and
 * layer norm's rows, the direct convolution's pixels): on a CPU at most 64
 * chunks of at least `cpu_least`, few long ones; for the GPU variant at
 * most 1024 of at least 16, so that their work-items fill a GPU. */
size_t kiln_chunk_length(const kiln_device *dev, size_t n, size_t cpu_least);
/* The most chunks kiln_chunk_length makes on this device (partial sums'
 * buffers are sized for it). */
size_t kiln_chunks_most(const kiln_device *dev);

/* One axis of a convolution's or a pool's window. The caller sets the
 * input length, the window, its stride and dilation (1: contiguous), the
 * padding, the explicit pads (KILN_PADDING_EXPLICIT's, each >= 0) and
 * ceil_mode; kiln_window_infer sets the output length and the pads every
 * padding comes to ('same' puts the odd pixel after, as Keras; 'valid' pads
 * nothing). */
typedef struct kiln_window_axis {
    int32_t in, window, stride, dilation;
    kiln_padding padding;
    int32_t pad_before, pad_after;
    /* Nonzero: the output rounds up (ONNX's and PyTorch's ceil_mode), but
     * a window must start inside the input or the padding before it. */
    int32_t ceil_mode;
    int32_t out;
} kiln_window_axis;

/* "'valid' padding", "'same' padding" or "explicit pads", for messages. */
const char *kiln_padding_words(kiln_padding padding);

/* Returns 1 if at least one window fits, 0 if not, -1 if the padded axis
 * or the dilated window would be longer than INT32_MAX. */
int kiln_window_infer(kiln_window_axis *axis);

/* Forward and backward of layers that leave the data as it is (Flatten,
 * Activation): copies of batch x output-size floats. */
kiln_status kiln_identity_forward(const void *config, void *replica, const kiln_step *step);
kiln_status kiln_identity_backward(const void *config, void *replica, const kiln_step *step);

/* dst = src (accumulate 0) or dst += src, n floats. */
kiln_status kiln_copy_or_add(kiln_device *dev, const kiln_buffer *src, kiln_buffer *dst,
                             size_t n, int accumulate);

/* Every layer kind, one line each in layers/kinds.h. */
#define KILN_LAYER_KIND(name) extern const kiln_layer_ops kiln_layer_##name;
#include "layers/kinds.h"
#undef KILN_LAYER_KIND

/* The registry: every kind, in layers/kinds.h's order. */
extern const kiln_layer_ops *const kiln_layer_kinds[];
extern const int kiln_layer_kind_count;
/* The kind named `kind` ("dense"), or NULL. */
const kiln_layer_ops *kiln_layer_kind_named(const char *kind);

#endif
