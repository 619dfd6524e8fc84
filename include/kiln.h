/*
 * kiln.h: train neural networks on OpenCL devices from C.
 *
 * The one public header of kiln. It compiles alone as C99 (-pedantic) and as
 * C++, and names no OpenCL type (see kiln_opencl.h for interop).
 *
 * Conventions, true of every declaration below unless its doc block says
 * otherwise:
 *  - A fallible call returns kiln_status; KILN_OK is 0. The object acted on
 *    comes first, out-parameters last; an out-pointer is set to NULL (or 0) on
 *    failure. kiln_context_last_error() then says what went wrong: which call,
 *    which layer, which shapes, which device, which OpenCL error by name.
 *    A NULL context or model has nowhere to keep a message: such a call
 *    returns KILN_ERROR_INVALID_ARGUMENT and leaves the last error as it was.
 *  - Option structs start with struct_size (set it to sizeof the struct; 0 is
 *    read as the size this header declares). A NULL options pointer means all
 *    defaults, and so does a zero field (0, 0.0f of either sign, NULL): the
 *    Keras default (for an option Keras lacks, the default its doc gives).
 *    Where 0 itself is a value to ask for, a has_* field beside it says so
 *    (has_weight, has_binary_threshold, has_baseline, has_ignore_class).
 *    Fields added in later versions go at the end and default to 0.
 *    A nonzero struct_size that does not reach the end of the fields the call
 *    cannot default (those "required" or for which 0 is an error; never less
 *    than sizeof(size_t)) is KILN_ERROR_INVALID_ARGUMENT, the message naming
 *    the struct and the size, instead of reading those fields as 0.
 *    An options struct never holds another struct by value (which would
 *    move every later field when the inner one grew): it points to it, NULL
 *    meaning the inner struct's defaults. The structs of an array
 *    (kiln_callback_spec, kiln_output_loss, kiln_input_array,
 *    kiln_label_array) start with struct_size too, which is also the
 *    distance between elements: the same in each (0: this header's size).
 *  - Destructors accept NULL.
 *  - const: a call takes `const kiln_model *` when it only reads facts the
 *    model keeps on the host (its layers, shapes, settings, history,
 *    statistics, memory report) and `kiln_model *` when it changes the
 *    model or runs work on its devices, reading the parameters back
 *    included (kiln_model_get_weights, kiln_model_get_tensor, every save,
 *    kiln_model_export_onnx, evaluate and predict), even where nothing
 *    changes. Both kinds take the model's busy lock (see Threads below),
 *    which is not part of its state. A dataset is const to every call that
 *    reads it (fit, evaluate, kiln_dataset_read, a subset or zip of it);
 *    only kiln_dataset_transform changes one. Reading may count the samples
 *    a source skipped (kiln_dataset_skipped), a statistic of the reads, not
 *    the data. A context is const to the calls that only report on it.
 *  - kiln never aborts the process on bad input: every bad argument, shape,
 *    file, device or allocation failure comes back as a status.
 *  - All sizes count float32 elements unless named *_bytes.
 *  - Threads: contexts, and the models of one context, may be used from
 *    different threads at once. A model takes one call at a time: a call on
 *    a model that another call is using (from another thread, or from fit's
 *    callback) fails with KILN_ERROR_STATE naming that call; it never waits.
 *    The accessors that only read (history, stop reason, training
 *    statistics, memory, summary, stage plan, parameter count, output size,
 *    distribution, rank, the Inputs and outputs, the layer and weight
 *    lists) follow the same rule, since compile and fit write what they
 *    read, except that fit's callback may call them on the model it is
 *    fitting. kiln_model_stop() is the exception: it never takes the
 *    model, so it works from any thread while another call runs.
 *    kiln_context_last_error() is the calling thread's own message. A
 *    context stays open while models or datasets made from it live.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 2
#define KILN_VERSION_PATCH 0
/** Version as one comparable number: major * 10000 + minor * 100 + patch. */
#define KILN_VERSION_NUMBER \
    (KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH)

#if defined(KILN_BUILDING_LIBRARY) && defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#elif defined(KILN_BUILDING_LIBRARY) && defined(_WIN32)
#define KILN_API __declspec(dllexport)
#else
#define KILN_API
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/** X(name, value, description): the single list behind kiln_status,
 *  kiln_status_name() and kiln_status_description(). */
#define KILN_STATUS_LIST(X)                                                              \
    X(OK, 0, "success")                                                                  \
    X(ERROR_INVALID_ARGUMENT, -1, "an argument or option is invalid")                    \
    X(ERROR_SHAPE, -2, "tensor shapes do not fit together")                              \
    X(ERROR_OUT_OF_MEMORY, -3, "host or device memory could not be allocated")           \
    X(ERROR_NO_DEVICE, -4, "no OpenCL platform or device matches the request")           \
    X(ERROR_DEVICE, -5, "an OpenCL or CLBlast call failed on a device")                  \
    X(ERROR_BUILD, -6, "an OpenCL program failed to build")                              \
    X(ERROR_IO, -7, "a file could not be opened, read or written")                       \
    X(ERROR_FORMAT, -8, "a file is malformed: wrong magic, size or truncated")           \
    X(ERROR_DATA, -9, "data is invalid: a label out of range, a size that disagrees")    \
    X(ERROR_STATE, -10, "the call does not fit the object's state (e.g. fit before compile)") \
    X(ERROR_UNSUPPORTED, -11, "not supported by this build, device or version")          \
    X(ERROR_NUMERIC, -12, "a loss or gradient is not finite (NaN or Inf)")               \
    X(ERROR_STOPPED, -13, "a callback asked training to stop")                          \
    X(ERROR_TIMEOUT, -14, "a step or its data did not finish within the watchdog timeout")

typedef enum kiln_status {
#define KILN_STATUS_ENUM_(name, value, text) KILN_##name = value,
    KILN_STATUS_LIST(KILN_STATUS_ENUM_)
#undef KILN_STATUS_ENUM_
    KILN_STATUS_LAST_ = -15
} kiln_status;

/** "KILN_ERROR_SHAPE" for KILN_ERROR_SHAPE; "KILN_UNKNOWN_STATUS" for others.
 *  The string is static. */
KILN_API const char *kiln_status_name(kiln_status status);

/** One line saying what the status means. The string is static. */
KILN_API const char *kiln_status_description(kiln_status status);

/** "major.minor.patch" of the library actually linked. The string is static. */
KILN_API const char *kiln_version(void);

/** KILN_VERSION_NUMBER of the library actually linked. */
KILN_API int kiln_version_number(void);

/* ------------------------------------------------------------------------ */
/* Context: devices, seed, allocator, log                                   */
/* ------------------------------------------------------------------------ */

typedef struct kiln_context kiln_context;

typedef enum kiln_device_type {
    KILN_DEVICE_DEFAULT = 0,  /**< every GPU if there is one, else every device */
    KILN_DEVICE_ALL,          /**< every device of every platform */
    KILN_DEVICE_CPU,
    KILN_DEVICE_GPU,
    KILN_DEVICE_ACCELERATOR
} kiln_device_type;

typedef enum kiln_log_level {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARNING,
    KILN_LOG_INFO,
    KILN_LOG_DEBUG
} kiln_log_level;

/** Receives log lines (without trailing newline). Called from kiln's threads;
 *  it must be thread-safe. */
typedef void (*kiln_log_fn)(void *user, kiln_log_level level, const char *message);

/** One function does all host allocation, as Lua's lua_Alloc does:
 *  realloc(user, NULL, n) allocates, realloc(user, p, n) resizes,
 *  realloc(user, p, 0) frees and returns NULL. It must be thread-safe. */
typedef void *(*kiln_realloc_fn)(void *user, void *ptr, size_t size);

/** What kiln_context_create() does about CLBlast's GEMM parameters, which
 *  decide most of a dense or convolutional model's speed. CLBlast ships
 *  parameters tuned for the devices in its database; on others (CPU
 *  OpenCL devices, many embedded GPUs) its defaults can be several times
 *  slower than the device allows. */
typedef enum kiln_gemm_tuning {
    /** Apply parameters an earlier search stored for this device (same name,
     *  vendor, platform and driver) in the cache folder; else CLBlast's. */
    KILN_GEMM_TUNING_STORED = 0,
    /** As STORED, but a device with nothing stored is searched first: a few
     *  candidate parameter sets are compiled and timed on GEMM shapes of
     *  dense and convolution layers, and the fastest (or CLBlast's defaults,
     *  if none beats them) is stored. Once per device: tens of seconds to a
     *  few minutes, mostly kernel compilation. On a device running the CPU
     *  kernel variant, kiln's own GEMM's cache budget (how many bytes of
     *  operand rows its tiles count on finding in cache, which sets its
     *  chunks of k) is searched and stored the same way: 256 KiB to 8 MiB
     *  timed on four GEMMs of the seed ResNet's shapes, the default 1 MiB
     *  kept unless another is 3% faster; a second or two. A search changes
     *  the order of a GEMM's sums, so results stay the same from run to run
     *  only between searches. `kiln tune` runs both ahead of time. */
    KILN_GEMM_TUNING_SEARCH,
    /** CLBlast's own parameters, nothing read or stored. */
    KILN_GEMM_TUNING_OFF
} kiln_gemm_tuning;

/** Options of kiln_context_create(). */
typedef struct kiln_context_options {
    size_t struct_size;          /**< sizeof(kiln_context_options) */
    /** Which devices to use. Left at the default (and no device_indices),
     *  the KILN_DEVICES variable chooses; an explicit setting wins. */
    kiln_device_type device_type;
    /** If n_device_indices > 0, use exactly these devices, by their index in
     *  the list of all devices of all platforms (as `KILN_DEVICES=0,2` would);
     *  device_type is then ignored. The array is read during the call only. */
    int32_t n_device_indices;
    const int32_t *device_indices;  /**< see n_device_indices */
    /** Seed of every random choice (weights, shuffling). 0: the default seed
     *  (a fixed constant, so runs are reproducible unless asked otherwise). */
    uint64_t seed;
    /** Folder for the OpenCL program binary cache. NULL: $KILN_CACHE_DIR,
     *  else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln. */
    const char *cache_dir;
    /** Nonzero: never read or write the program binary cache. */
    int32_t disable_cache;
    /** Host allocator; NULL: the C library's. */
    kiln_realloc_fn realloc_fn;
    void *realloc_user;          /**< passed to realloc_fn */
    /** Log sink; NULL: warnings and errors go to stderr. */
    kiln_log_fn log_fn;
    void *log_user;              /**< passed to log_fn */
    /** Most verbose level passed to log_fn (default KILN_LOG_ERROR = 0 keeps
     *  errors only; set KILN_LOG_WARNING or above for more). */
    kiln_log_level log_level;
    /** Where a failed kiln_context_create() writes its message (there is no
     *  context yet to hold it); may be NULL. Written only during the call. */
    char *error_buffer;
    size_t error_buffer_size;    /**< bytes at error_buffer */
    /** GEMM parameter tuning. Left at the default (stored), the
     *  KILN_GEMM_TUNING variable ("stored", "search" or "off") chooses; an
     *  explicit setting wins. */
    kiln_gemm_tuning gemm_tuning;
} kiln_context_options;

/**
 * Discovers OpenCL platforms and devices and opens the selected ones.
 *
 * The environment variable KILN_DEVICES chooses the devices when the options
 * leave them at the default (device_type KILN_DEVICE_DEFAULT, no indices):
 * "all", "cpu", "gpu", "accelerator", or a comma-separated list of indices
 * ("0,1"). Explicit options win.
 *
 * Returns KILN_ERROR_NO_DEVICE when there is no OpenCL platform at all or no
 * device matches, KILN_ERROR_INVALID_ARGUMENT for an index that does not
 * exist or a malformed KILN_DEVICES, KILN_ERROR_DEVICE when a device cannot
 * be opened, KILN_ERROR_OUT_OF_MEMORY. On failure *out is NULL and the
 * message goes to options->error_buffer when given, else to the log (to
 * stderr when options->struct_size is too short to be read at all).
 * The caller owns *out and releases it with kiln_context_destroy().
 */
KILN_API kiln_status kiln_context_create(const kiln_context_options *options,
                                         kiln_context **out);

/** Releases the context and every device resource it holds. Destroy its
 *  models and datasets first: while any of them lives, the context logs an
 *  error saying how many, stays open for them, and closes when the last is
 *  destroyed (never freeing what they still use). Accepts NULL. */
KILN_API void kiln_context_destroy(kiln_context *ctx);

/** Message of the calling thread's last failed call on this context (empty
 *  if it has none), as errno or cudaGetLastError keep one per thread: a
 *  thread never sees another thread's message. Owned by the context; valid
 *  until the same thread's next failing call on it, or the context's
 *  destroy. A failure on kiln's own worker threads is reported to the
 *  thread whose call it failed. */
KILN_API const char *kiln_context_last_error(const kiln_context *ctx);

/** Number of devices the context uses. */
KILN_API kiln_status kiln_context_device_count(const kiln_context *ctx, int32_t *count);

/** What kiln_context_device_info() reports about a device. */
typedef struct kiln_device_info {
    size_t struct_size;          /**< sizeof(kiln_device_info) */
    int32_t index;               /**< index among all devices (as in KILN_DEVICES) */
    kiln_device_type type;       /**< CPU, GPU or ACCELERATOR */
    char name[256];              /**< CL_DEVICE_NAME */
    char vendor[128];            /**< CL_DEVICE_VENDOR */
    char platform[128];          /**< the platform's CL_PLATFORM_NAME */
    char driver_version[64];     /**< CL_DRIVER_VERSION */
    uint64_t global_memory_bytes;  /**< CL_DEVICE_GLOBAL_MEM_SIZE */
    uint32_t compute_units;      /**< CL_DEVICE_MAX_COMPUTE_UNITS */
    uint32_t max_clock_mhz;      /**< CL_DEVICE_MAX_CLOCK_FREQUENCY */
    /** The GEMM parameters in use: "CLBlast defaults", or the tuned
     *  XgemmDirect parameters ("WGD=64 MDIMCD=8 ..."); on a device running
     *  the CPU kernel variant followed by kiln's own GEMM's cache budget,
     *  "; kiln GEMM cache 1024 KiB (default)" or "(searched)". */
    char gemm_parameters[128];
    /** Nonzero: the device runs the kernels' GPU variants (work-groups
     *  tiled in local memory), chosen for a GPU with dedicated local
     *  memory, or by KILN_KERNEL_VARIANT=gpu (docs/performance.md, "Kernel variants"). */
    int32_t gpu_kernels;
} kiln_device_info;

/** Describes device i (0 <= i < device count) of the context.
 *  KILN_ERROR_INVALID_ARGUMENT if i is out of range. */
KILN_API kiln_status kiln_context_device_info(const kiln_context *ctx, int32_t i,
                                              kiln_device_info *info);

/* ------------------------------------------------------------------------ */
/* Model building: one builder for Sequential and functional models        */
/* ------------------------------------------------------------------------ */

typedef struct kiln_model kiln_model;

/** A node is the output of one layer. Node ids are small non-negative
 *  integers in the order layers were added. */
typedef int32_t kiln_node;
/** Returned by a builder call that failed (the error is kept on the model
 *  and reported by kiln_model_compile). Passing it on is allowed. */
#define KILN_NODE_INVALID ((kiln_node)-1)
/** As an input: the node added just before (Keras Sequential style). */
#define KILN_NODE_PREVIOUS ((kiln_node)-2)

/** The largest rank of a sample (the batch dimension not counted). Public
 *  structs hold arrays of this length, so it never changes (a larger rank
 *  would come with new structs). */
#define KILN_MAX_RANK 4

/** How a source stores its features (the model always sees float32), and
 *  what a model's input or output holds (kiln_tensor_info: float32, or
 *  int32 for ids). */
typedef enum kiln_dtype {
    KILN_DTYPE_FLOAT32 = 0,
    KILN_DTYPE_FLOAT16,
    KILN_DTYPE_UINT8,
    KILN_DTYPE_INT8,
    KILN_DTYPE_UINT16,
    KILN_DTYPE_INT16,
    KILN_DTYPE_INT32,
    KILN_DTYPE_INT64             /**< .npy files; as ids or labels each must fit an int32 */
} kiln_dtype;

/** Activations, each as Keras's function of that name with its default
 *  arguments. GELU, GELU (tanh) and SiLU need their input for the gradient:
 *  a layer with one of them keeps both its output before and after the
 *  activation, which the others (but softmax) need not. */
typedef enum kiln_activation {
    KILN_ACTIVATION_LINEAR = 0,
    KILN_ACTIVATION_RELU,
    KILN_ACTIVATION_SIGMOID,
    KILN_ACTIVATION_TANH,
    KILN_ACTIVATION_SOFTMAX,     /**< over the last dimension */
    /** x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): Keras's "gelu" (approximate=False) */
    KILN_ACTIVATION_GELU,
    /** 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): gelu(approximate=True) */
    KILN_ACTIVATION_GELU_TANH,
    /** x for x > 0, else 0.2 x: Keras's "leaky_relu" (negative_slope 0.2; the
     *  LeakyReLU layer's default, 0.3, is another function) */
    KILN_ACTIVATION_LEAKY_RELU,
    /** x sigmoid(x): Keras's "silu" (also "swish") */
    KILN_ACTIVATION_SILU,
    /** min(max(x, 0), 6): Keras's "relu6", PyTorch's ReLU6, ONNX's
     *  Clip(x, 0, 6) (mobilenet_v2's); the gradient is 0 at 0 and at 6, as
     *  PyTorch's. */
    KILN_ACTIVATION_RELU6,
    /** log(softmax(x)) over the last dimension, computed as x - max - log(sum
     *  exp(x - max)) (no log of a rounded-off 0): Keras's "log_softmax",
     *  ONNX's LogSoftmax. Not fused with a loss: the crossentropies read
     *  their input as probabilities or as softmax's logits. */
    KILN_ACTIVATION_LOG_SOFTMAX,
    /** relu6(x + 3) / 6 = min(max(x + 3, 0), 6) / 6: Keras 3's
     *  "hard_sigmoid", PyTorch's Hardsigmoid, ONNX's HardSigmoid with alpha
     *  1/6 and beta 0.5 (as which it is exported and imported). The
     *  gradient is 1/6 for -3 < x < 3 and 0 elsewhere, 0 at -3 and at 3 too,
     *  as PyTorch 1.13's; it is read from the output (so that a layer can
     *  fuse it), which differs from PyTorch's at one float32 input only,
     *  the one just below 3, whose x + 3 rounds to 6 (0 there, 1/6 in
     *  PyTorch). (Keras 2's hard_sigmoid, 0.2 x + 0.5, is kiln_math's
     *  KILN_MATH_HARD_SIGMOID.) */
    KILN_ACTIVATION_HARD_SIGMOID,
    /** x relu6(x + 3) / 6: Keras 3's "hard_silu" (also "hard_swish"),
     *  PyTorch's Hardswish, ONNX's HardSwish (opset 14; kiln's export,
     *  opset 13, writes x HardSigmoid(x)). The gradient is 0 for x < -3,
     *  x / 3 + 0.5 for -3 <= x <= 3 (-0.5 at -3, 1.5 at 3) and 1 for x > 3,
     *  as PyTorch 1.13's. It needs its input, as GELU's and SiLU's. */
    KILN_ACTIVATION_HARD_SWISH
} kiln_activation;

/** How a convolution's or a pool's window meets the input's edges. */
typedef enum kiln_padding {
    /** No padding: every window lies inside the input (Keras's "valid"). */
    KILN_PADDING_VALID = 0,
    /** Keras's "same": at stride 1 the output keeps the input's size; the
     *  padding is split evenly, an odd pixel after (bottom, right). */
    KILN_PADDING_SAME,
    /** The layer's own `pads` (top, left, bottom, right), ONNX's and
     *  PyTorch's explicit padding, which may differ on each side. */
    KILN_PADDING_EXPLICIT
} kiln_padding;

/** Creates an empty model on a context. The caller owns *out. */
KILN_API kiln_status kiln_model_create(kiln_context *ctx, kiln_model **out);

/** Releases the model and its device memory. Accepts NULL. */
KILN_API void kiln_model_destroy(kiln_model *model);

/**
 * Builder calls. Each adds one layer fed by earlier node(s) and returns its
 * output node, or KILN_NODE_INVALID after recording the error on the model
 * (the first error is kept; kiln_model_compile returns it). Shapes are
 * inferred as layers are added; data layout is channels-last (NHWC).
 * Every builder takes its settings in an options struct (NULL: all
 * defaults), whose `name` is the layer's name: NULL gives "conv2d",
 * "conv2d_1", ... as Keras names them; it is copied. Only what a layer
 * cannot do without (its inputs, a shape, an activation layer's function)
 * is an argument of its own. One sample of a layer's output, and each of its parameters
 * (a dense kernel's inputs x units, a conv kernel's kh x kw x C x F), hold
 * at most 2^31 - 1 floats, and a 'same' window's padded axis at most
 * 2^31 - 1 pixels: kiln_model_compile returns KILN_ERROR_SHAPE naming the
 * layer for more.
 */

/** The most Inputs a model may declare. */
#define KILN_MAX_MODEL_INPUTS 8

/** Options of kiln_input() and kiln_input_ints(). */
typedef struct kiln_input_options {
    size_t struct_size;          /**< sizeof(kiln_input_options) */
    const char *name;            /**< layer name, or NULL for "input_layer", ... */
} kiln_input_options;

/** Input of one sample's shape (rank 1..KILN_MAX_RANK, batch not counted),
 *  e.g. {28, 28, 1}. A model may declare up to KILN_MAX_MODEL_INPUTS
 *  Inputs (float or int32 ids, each its own shape), as Keras's
 *  Model(inputs=[...]): their order of declaration is the model's input
 *  order. Every Input must reach the output (else kiln_model_compile is
 *  KILN_ERROR_INVALID_ARGUMENT naming it). A dataset for several inputs
 *  carries one feature array per input (kiln_arrays_desc.inputs), and so
 *  do kiln_model_predict and the *_on_batch calls (kiln_batch_arrays.inputs);
 *  where a sample is read back whole (kiln_dataset_read), it is its
 *  inputs' values one after another in input order (kiln_sample_buffers
 *  says where). */
KILN_API kiln_node kiln_input(kiln_model *model, int32_t rank, const int32_t *dims,
                              const kiln_input_options *options);

/** An Input whose features are int32 ids (tokens, user or item ids), not
 *  floats, as Keras's Input(shape, dtype="int32"): only kiln_embedding()
 *  reads it (any other layer fed by it is KILN_ERROR_SHAPE at compile,
 *  naming both layers). Datasets for it carry int32 features
 *  (kiln_arrays_desc.int_features, kiln_npy_options.ids,
 *  kiln_callback_desc.int_features); fit and evaluate refuse a float
 *  dataset for it, and a dataset of ids for a float Input, with
 *  KILN_ERROR_INVALID_ARGUMENT. Every id is checked before it reaches a
 *  device: one outside [0, input_dim) of an Embedding it feeds is
 *  KILN_ERROR_DATA naming the sample and the position. kiln_model_predict
 *  and the *_on_batch calls take such a model's features as
 *  kiln_batch_arrays.int_features (an int32_t array). */
KILN_API kiln_node kiln_input_ints(kiln_model *model, int32_t rank, const int32_t *dims,
                                   const kiln_input_options *options);

/** Options of kiln_dense(). */
typedef struct kiln_dense_options {
    size_t struct_size;          /**< sizeof(kiln_dense_options) */
    const char *name;            /**< layer name, or NULL for "dense", "dense_1", ... */
    int32_t units;               /**< required, > 0 */
    kiln_activation activation;  /**< default linear */
    int32_t no_bias;             /**< nonzero: no bias vector */
    /** ONNX Gemm's scale of the product: y = alpha x W + beta b, each
     * trained as written (the kernel's gradient is alpha x^T dy). 0 (the
     * default) reads as 1. */
    float alpha;
    /** The bias's scale in y = alpha x W + beta b (its gradient is
     * beta sum(dy)). 0 (the default) reads as 1; ignored without a bias. */
    float beta;
} kiln_dense_options;

/** Dense (fully connected) on the last dimension; kernel (in, units). */
KILN_API kiln_node kiln_dense(kiln_model *model, kiln_node input,
                              const kiln_dense_options *options);

/** Options of kiln_conv2d(). */
typedef struct kiln_conv2d_options {
    size_t struct_size;          /**< sizeof(kiln_conv2d_options) */
    const char *name;            /**< layer name, or NULL for "conv2d", "conv2d_1", ... */
    int32_t filters;             /**< required, > 0 */
    int32_t kernel_size[2];      /**< (height, width), required, > 0 */
    int32_t strides[2];          /**< default (1, 1) */
    kiln_padding padding;        /**< default valid */
    kiln_activation activation;  /**< default linear */
    int32_t no_bias;             /**< nonzero: no bias vector */
    /** Zeros added (top, left, bottom, right) when padding is
     *  KILN_PADDING_EXPLICIT, each >= 0; ignored otherwise. ONNX's Conv
     *  `pads` in the same order. */
    int32_t pads[4];
    /** Spacing of the kernel's taps (height, width): 0 or 1 for a
     *  contiguous kernel, d for a kernel that reads every d-th pixel and
     *  spans (kernel - 1) * d + 1; ONNX's `dilations`, Keras's
     *  dilation_rate. Negative is KILN_ERROR_INVALID_ARGUMENT. */
    int32_t dilations[2];
    /** 0 or 1: every filter sees every input channel. g: the channels and
     *  the filters split into g groups, filter group i seeing channel group
     *  i only (ONNX's `group`, PyTorch's and Keras's `groups`); the kernel
     *  is then (kh, kw, C / g, filters). Both the input's channels and the
     *  filters must divide by it, else KILN_ERROR_INVALID_ARGUMENT naming
     *  the layer and `groups`. groups == channels == filters is a depthwise
     *  convolution, computed by kernels of its own. */
    int32_t groups;
} kiln_conv2d_options;

/** 2-D convolution of an (H, W, C) input; kernel (kh, kw, C / groups,
 *  filters), channels last (ONNX export writes PyTorch's (filters, C /
 *  groups, kh, kw)). A dilated kernel spans (kernel - 1) * dilation + 1
 *  pixels; with explicit pads an output side is floor((in + pad_before +
 *  pad_after - span) / stride) + 1 (ONNX's and PyTorch's arithmetic),
 *  'valid' and 'same' are Keras's on the span. An output side below 1 is
 *  KILN_ERROR_SHAPE at compile naming the layer; a negative pad, dilation
 *  or groups, or groups that do not divide, KILN_ERROR_INVALID_ARGUMENT
 *  naming the layer and the field. */
KILN_API kiln_node kiln_conv2d(kiln_model *model, kiln_node input,
                               const kiln_conv2d_options *options);

/** Options of kiln_conv2d_transpose(). */
typedef struct kiln_conv2d_transpose_options {
    size_t struct_size;          /**< sizeof(kiln_conv2d_transpose_options) */
    /** layer name, or NULL for "conv2d_transpose", "conv2d_transpose_1", ... */
    const char *name;
    int32_t filters;             /**< output channels, required, > 0 */
    int32_t kernel_size[2];      /**< (height, width), required, > 0 */
    int32_t strides[2];          /**< default (1, 1); the input's pixels land this far apart */
    kiln_padding padding;        /**< default valid */
    kiln_activation activation;  /**< default linear */
    int32_t no_bias;             /**< nonzero: no bias vector */
    /** Pixels cropped (top, left, bottom, right) off the full output when
     *  padding is KILN_PADDING_EXPLICIT, each >= 0; ignored otherwise.
     *  ONNX's ConvTranspose `pads` and PyTorch's ConvTranspose2d `padding`
     *  (both sides). */
    int32_t pads[4];
    /** Rows and columns added after the output (height, width), each >= 0
     *  and below the stride or the dilation of its axis (PyTorch's rule;
     *  else KILN_ERROR_INVALID_ARGUMENT). With explicit pads, ONNX's and
     *  PyTorch's `output_padding`; with 'valid' and 'same', Keras's: 0
     *  stands for Keras's None (see kiln_conv2d_transpose()). */
    int32_t output_padding[2];
    /** Spacing of the kernel's taps (height, width), 0 or 1 contiguous, as
     *  kiln_conv2d_options.dilations. */
    int32_t dilations[2];
    /** 0 or 1: every filter sees every input channel; g: channels and
     *  filters split into g groups as kiln_conv2d_options.groups (PyTorch's
     *  `groups`, ONNX's `group`); the kernel is then (kh, kw, filters / g,
     *  C). Both must divide by it. */
    int32_t groups;
} kiln_conv2d_transpose_options;

/** Transposed 2-D convolution of an (H, W, C) input (Keras's
 *  Conv2DTranspose, PyTorch's ConvTranspose2d, ONNX's ConvTranspose): each
 *  input pixel (y, x) adds its channels times the kernel into the output
 *  window at (y * stride - crop_top, x * stride - crop_left); the input
 *  gradient of kiln_conv2d() with the same kernel. Kernel (kh, kw,
 *  filters / groups, C) as Keras's (ONNX export writes PyTorch's (C,
 *  filters / groups, kh, kw)). With span = (kernel - 1) * dilation + 1
 *  and full = (in - 1) * stride + span, an output side is, with explicit
 *  pads, full - pad_before - pad_after + output_padding (ONNX's and
 *  PyTorch's); with 'valid', full + output_padding, or in * stride +
 *  max(span - stride, 0) when output_padding is 0; with 'same', in *
 *  stride, or full - 2 (span / 2) + output_padding when output_padding is
 *  not 0 (Keras's), the difference from full cropped as TensorFlow does,
 *  half before (rounded down) and the rest after. So Keras's 'same' with
 *  a 3x3 kernel at stride 2 crops nothing before, where PyTorch's padding
 *  1 crops one row and column: the same output shifted. An output side
 *  below 1, or a full output longer than 2^31 - 1 pixels, is
 *  KILN_ERROR_SHAPE at compile naming the layer; a negative size, pad or
 *  dilation, an output_padding not below its stride or dilation, or groups
 *  that do not divide, KILN_ERROR_INVALID_ARGUMENT naming the layer and
 *  the field. */
KILN_API kiln_node kiln_conv2d_transpose(kiln_model *model, kiln_node input,
                                         const kiln_conv2d_transpose_options *options);

/** Options of kiln_max_pooling2d(). */
typedef struct kiln_pool2d_options {
    size_t struct_size;          /**< sizeof(kiln_pool2d_options) */
    const char *name;            /**< layer name, or NULL for "max_pooling2d", ... */
    int32_t pool_size[2];        /**< default (2, 2) */
    int32_t strides[2];          /**< default: pool_size */
    kiln_padding padding;        /**< default valid */
    /** The padding (top, left, bottom, right) when padding is
     *  KILN_PADDING_EXPLICIT, each >= 0 and less than the pool's size
     *  along its axis (as ONNX requires: a window never lies wholly in the
     *  padding); ignored otherwise. ONNX's `pads` in the same order. */
    int32_t pads[4];
    /** Nonzero: the output size rounds up, ceil((in + pads - pool) /
     *  stride) + 1, as ONNX's and PyTorch's ceil_mode, except that a window
     *  must start inside the input or the padding before it (PyTorch's
     *  rule); windows that reach past the input and its padding pool the
     *  cells they hold. 0: rounds down. 'same' padding rounds up already. */
    int32_t ceil_mode;
    /** Average pooling only (max pooling ignores it). Nonzero: divide by
     *  the window's cells inside the padded input, padding counted, as
     *  PyTorch's and ONNX's count_include_pad = 1 (a window reaching past
     *  the padding after, by ceil_mode, counts only up to it). 0 (Keras's
     *  and kiln's default): divide by the cells inside the input. */
    int32_t count_include_pad;
} kiln_pool2d_options;

/** Max pooling over (H, W) of an (H, W, C) input; padded cells never
 *  win. Output side as Conv2D's, or rounded up with ceil_mode. Bad pads
 *  (negative, or not less than the pool) are KILN_ERROR_INVALID_ARGUMENT
 *  at compile naming the layer and `pads`. */
KILN_API kiln_node kiln_max_pooling2d(kiln_model *model, kiln_node input,
                                      const kiln_pool2d_options *options);

/** Average pooling over (H, W) of an (H, W, C) input (Keras
 *  AveragePooling2D): with 'same' or explicit padding an output averages
 *  only the window's cells inside the input, unless count_include_pad. */
KILN_API kiln_node kiln_average_pooling2d(kiln_model *model, kiln_node input,
                                          const kiln_pool2d_options *options);

/** Options of kiln_zero_padding2d(). */
typedef struct kiln_zero_padding2d_options {
    size_t struct_size;          /**< sizeof(kiln_zero_padding2d_options) */
    const char *name;            /**< layer name, or NULL for "zero_padding2d", ... */
    /** Rows and columns of zeros (top, bottom, left, right): Keras's
     *  ((top, bottom), (left, right)); each >= 0. Taken as given, 0 being
     *  no zeros on that side (asymmetric padding needs it), so a zeroed
     *  struct pads nothing; NULL options are Keras's default, 1 on each
     *  side. */
    int32_t padding[4];
} kiln_zero_padding2d_options;

/** Pads an (H, W, C) input with zeros (Keras ZeroPadding2D, channels
 *  last): the output is (top + H + bottom, left + W + right, C); the
 *  gradient is the output's at the input's places. ONNX export writes a
 *  Pad (mode constant, value 0). A negative pad is
 *  KILN_ERROR_INVALID_ARGUMENT and an input of another rank
 *  KILN_ERROR_SHAPE, both at compile naming the layer. */
KILN_API kiln_node kiln_zero_padding2d(kiln_model *model, kiln_node input,
                                       const kiln_zero_padding2d_options *options);

/** Options of kiln_global_average_pooling2d() and
 *  kiln_global_max_pooling2d(). */
typedef struct kiln_global_pool2d_options {
    size_t struct_size;          /**< sizeof(kiln_global_pool2d_options) */
    /** layer name, or NULL for "global_average_pooling2d" (or
     *  "global_max_pooling2d"), ... */
    const char *name;
} kiln_global_pool2d_options;

/** The mean over (H, W) of an (H, W, C) input, giving (C) (Keras
 *  GlobalAveragePooling2D). */
KILN_API kiln_node kiln_global_average_pooling2d(kiln_model *model, kiln_node input,
                                                 const kiln_global_pool2d_options *options);

/** The maximum over (H, W) of each channel of an (H, W, C) input, giving
 *  (C) (Keras GlobalMaxPooling2D); the gradient goes to the first place
 *  of the maximum, as PyTorch's adaptive max pool sends it. ONNX export
 *  writes a ReduceMax over H and W (or GlobalMaxPool and a Flatten). An
 *  input of another rank is KILN_ERROR_SHAPE at compile. */
KILN_API kiln_node kiln_global_max_pooling2d(kiln_model *model, kiln_node input,
                                             const kiln_global_pool2d_options *options);

/** Options of kiln_batch_normalization(); zero fields take Keras's
 *  defaults. */
typedef struct kiln_batch_norm_options {
    size_t struct_size;          /**< sizeof(kiln_batch_norm_options) */
    const char *name;            /**< layer name, or NULL for "batch_normalization", ... */
    float momentum;              /**< of the moving statistics; 0: 0.99 */
    float epsilon;               /**< added to the variance, finite and > 0; 0: 1e-3 */
    /** Nonzero: under a data-parallel strategy, normalise with the statistics
     *  of the global batch (Keras's SyncBatchNormalization, PyTorch's
     *  SyncBatchNorm), the replicas exchanging per-channel sums twice
     *  forward and once backward. Zero (Keras's default): each replica uses
     *  its own shard's statistics; the moving statistics are then the mean
     *  of the replicas'. */
    int32_t synchronized;
    kiln_activation activation;  /**< applied after normalising (default linear) */
} kiln_batch_norm_options;

/** Batch normalisation over the last axis (channels): y = gamma (x - mean)
 *  / sqrt(var + epsilon) + beta. fit normalises with the batch's statistics
 *  and updates the moving mean and variance (the unbiased batch variance,
 *  as PyTorch and Keras's fused kernel; with one value per channel the
 *  batch variance is 0); evaluate and predict use the moving statistics.
 *  Parameters: gamma and beta (trainable), moving_mean and moving_variance
 *  (saved and loaded with the weights, never touched by the optimizer). */
KILN_API kiln_node kiln_batch_normalization(kiln_model *model, kiln_node input,
                                            const kiln_batch_norm_options *options);

/** Options of kiln_dropout(). */
typedef struct kiln_dropout_options {
    size_t struct_size;          /**< sizeof(kiln_dropout_options) */
    const char *name;            /**< layer name, or NULL for "dropout", "dropout_1", ... */
    /** The probability that a value is zeroed, in [0, 1) (0: none, the
     *  identity; Keras's rate has no default). */
    float rate;
    uint64_t seed;               /**< mixed with the context's seed for the masks */
} kiln_dropout_options;

/** Dropout (Keras Dropout): during fit each value is zeroed with
 *  probability `rate` (0 <= rate < 1) and the others are scaled by
 *  1 / (1 - rate); evaluate and predict pass values through. The mask is a
 *  hash of the context's seed, the options' seed, the training step and
 *  the sample's place in the global batch: runs with the same seeds are
 *  identical, under every strategy and replica count. A rate outside
 *  [0, 1) is KILN_ERROR_INVALID_ARGUMENT at compile, naming the layer. */
KILN_API kiln_node kiln_dropout(kiln_model *model, kiln_node input,
                                const kiln_dropout_options *options);

/** Options of kiln_flatten(). */
typedef struct kiln_flatten_options {
    size_t struct_size;          /**< sizeof(kiln_flatten_options) */
    const char *name;            /**< layer name, or NULL for "flatten", "flatten_1", ... */
} kiln_flatten_options;

/** Flattens a sample to one dimension (row-major, channels last). */
KILN_API kiln_node kiln_flatten(kiln_model *model, kiln_node input,
                                const kiln_flatten_options *options);

/** Options of kiln_activation_layer(). */
typedef struct kiln_activation_layer_options {
    size_t struct_size;          /**< sizeof(kiln_activation_layer_options) */
    const char *name;            /**< layer name, or NULL for "activation", ... */
    /** With KILN_ACTIVATION_LEAKY_RELU only: the slope for x < 0 (x for
     *  x > 0, negative_slope x else; Keras's LeakyReLU layer's
     *  `negative_slope`, ONNX's LeakyRelu `alpha`, PyTorch's
     *  `negative_slope`), any finite value; 0 means Keras's default, 0.2.
     *  The gradient at 0 is the slope's, as PyTorch's. Model files keep it
     *  (`"negative_slope"`) and ONNX export writes it as LeakyRelu's alpha. */
    float negative_slope;
} kiln_activation_layer_options;

/** Applies `activation` as a layer of its own (Keras Activation, whose
 *  activation is required too). A `negative_slope` with an activation
 *  other than leaky_relu, or not finite, is KILN_ERROR_INVALID_ARGUMENT
 *  (reported by kiln_model_compile, as every builder error). */
KILN_API kiln_node kiln_activation_layer(kiln_model *model, kiln_node input,
                                         kiln_activation activation,
                                         const kiln_activation_layer_options *options);

/** The element-wise functions of kiln_math(). */
typedef enum kiln_math_op {
    /** sqrt(x) (NaN for x < 0); gradient 0.5 / sqrt(x): inf at 0, as
     *  PyTorch's. ONNX's Sqrt. */
    KILN_MATH_SQRT = 0,
    /** 1 / x; gradient -1 / x^2 (-inf at 0). ONNX's Reciprocal. */
    KILN_MATH_RECIPROCAL,
    /** -x. ONNX's Neg. */
    KILN_MATH_NEG,
    /** |x|; gradient sign(x), 0 at 0 as PyTorch's. ONNX's Abs. */
    KILN_MATH_ABS,
    /** e^x. ONNX's Exp. */
    KILN_MATH_EXP,
    /** The natural logarithm (-inf at 0, NaN below); gradient 1 / x (inf
     *  at 0). ONNX's Log. */
    KILN_MATH_LOG,
    /** The error function; gradient 2 / sqrt(pi) e^(-x^2). ONNX's Erf. */
    KILN_MATH_ERF,
    /** x^exponent, the exponent a constant (kiln_math_options.exponent):
     *  NaN for x < 0 and an exponent that is not an integer. The gradient
     *  is PyTorch's, exponent x^(exponent - 1), and 0 everywhere for the
     *  exponent 0 (x^0 is 1, 0^0 too). ONNX's Pow with a constant exponent. */
    KILN_MATH_POW,
    /** max(0, min(1, alpha x + beta)) (kiln_math_options.alpha and beta):
     *  ONNX's HardSigmoid in its general form. The gradient is alpha where
     *  0 < alpha x + beta < 1 and 0 elsewhere, at the kinks too, as
     *  PyTorch's Hardsigmoid. KILN_ACTIVATION_HARD_SIGMOID is the case
     *  alpha 1/6, beta 0.5, which a layer can fuse. */
    KILN_MATH_HARD_SIGMOID,
    /** min(max(x, min), max), either bound optional
     *  (kiln_math_options.has_min, has_max); where min > max every value is
     *  max, as ONNX's Clip and PyTorch's clamp. The gradient is 1 where
     *  min <= x <= max (at the bounds too) and 0 elsewhere, as PyTorch's
     *  clamp. ONNX's Clip. */
    KILN_MATH_CLIP
} kiln_math_op;

/** Options of kiln_math(): the constants of the op that takes them. A
 *  constant given to an op that does not take it, or NaN, is
 *  KILN_ERROR_INVALID_ARGUMENT (reported by kiln_model_compile). */
typedef struct kiln_math_options {
    size_t struct_size;          /**< sizeof(kiln_math_options) */
    const char *name;            /**< layer name, or NULL for "math", "math_1", ... */
    /** KILN_MATH_POW's exponent, finite; 0 is x^0 = 1 (there is no
     *  default: NULL options raise to the power 0). */
    float exponent;
    /** KILN_MATH_HARD_SIGMOID's slope, finite. alpha and beta both 0 take
     *  ONNX's defaults, 0.2 and 0.5 (a constant 0 is no use); otherwise
     *  each is taken as given. */
    float alpha;
    float beta;                  /**< KILN_MATH_HARD_SIGMOID's offset, finite */
    int32_t has_min;             /**< KILN_MATH_CLIP: nonzero when `min` bounds x */
    float min;                   /**< KILN_MATH_CLIP's lower bound (when has_min), not NaN */
    int32_t has_max;             /**< KILN_MATH_CLIP: nonzero when `max` bounds x */
    float max;                   /**< KILN_MATH_CLIP's upper bound (when has_max), not NaN */
} kiln_math_options;

/** An element-wise function `op` of a value of any shape, as a layer of
 *  its own (what TensorFlow names tf.math.sqrt, tf.math.pow, ...; ONNX's
 *  unary ops). No parameters; the output has the input's shape. Model files
 *  keep the op's name (`"op": "sqrt"`) and its constants; ONNX export
 *  writes the ONNX op each kiln_math_op names. An op that is not a
 *  kiln_math_op, or bad constants, are KILN_ERROR_INVALID_ARGUMENT
 *  (reported by kiln_model_compile, as every builder error). */
KILN_API kiln_node kiln_math(kiln_model *model, kiln_node input, kiln_math_op op,
                             const kiln_math_options *options);

/** Options of kiln_layer_normalization(); zero fields take Keras's
 *  defaults. */
typedef struct kiln_layer_norm_options {
    size_t struct_size;          /**< sizeof(kiln_layer_norm_options) */
    const char *name;            /**< layer name, or NULL for "layer_normalization", ... */
    float epsilon;               /**< added to the variance, finite and > 0; 0: 1e-3 */
    int32_t no_center;           /**< nonzero: no beta (Keras center=False) */
    int32_t no_scale;            /**< nonzero: no gamma (Keras scale=False) */
} kiln_layer_norm_options;

/** Layer normalisation over the last axis of an input of any rank (Keras
 *  LayerNormalization, axis -1): each sample's every position is
 *  normalised by the mean and (biased) variance of its last-axis values,
 *  y = gamma (x - mean) / sqrt(var + epsilon) + beta. Parameters: gamma
 *  (ones) and beta (zeros), each of the last axis's length, the same in
 *  fit, evaluate and predict. */
KILN_API kiln_node kiln_layer_normalization(kiln_model *model, kiln_node input,
                                            const kiln_layer_norm_options *options);

/** Options of kiln_reshape(). */
typedef struct kiln_reshape_options {
    size_t struct_size;          /**< sizeof(kiln_reshape_options) */
    const char *name;            /**< layer name, or NULL for "reshape", "reshape_1", ... */
} kiln_reshape_options;

/** Reshapes a sample to `dims` (rank 1..KILN_MAX_RANK, batch not counted;
 *  Keras Reshape's target_shape): the values keep their row-major order.
 *  One dimension may be -1, inferred from the input's size. A malformed
 *  target (a dimension of 0 or below -1, two -1s, dims NULL) is
 *  KILN_ERROR_INVALID_ARGUMENT; a target of another size than the input,
 *  KILN_ERROR_SHAPE; both reported by kiln_model_compile naming the layer
 *  and the shapes. `dims` is copied. */
KILN_API kiln_node kiln_reshape(kiln_model *model, kiln_node input, int32_t rank,
                                const int32_t *dims, const kiln_reshape_options *options);

/** Options of kiln_permute(). */
typedef struct kiln_permute_options {
    size_t struct_size;          /**< sizeof(kiln_permute_options) */
    const char *name;            /**< layer name, or NULL for "permute", "permute_1", ... */
} kiln_permute_options;

/** Reorders a sample's axes (Keras Permute): `dims` is a permutation of
 *  1..rank, counting a sample's axes from 1 as Keras's does (the batch
 *  stays first); output axis d is input axis dims[d] - 1, so {3, 1, 2}
 *  turns (H, W, C) into (C, H, W). `rank` must be the input's rank. A
 *  `dims` that is NULL or not such a permutation is
 *  KILN_ERROR_INVALID_ARGUMENT, another rank KILN_ERROR_SHAPE, both
 *  reported by kiln_model_compile naming the layer. `dims` is copied.
 *  ONNX export writes a Transpose. */
KILN_API kiln_node kiln_permute(kiln_model *model, kiln_node input, int32_t rank,
                                const int32_t *dims, const kiln_permute_options *options);

/** What kiln_reduce() computes over the values it reduces. */
typedef enum kiln_reduce_op {
    /** Their mean; the gradient reaches every value, over their count. */
    KILN_REDUCE_MEAN,
    /** Their sum; the gradient reaches every value as it is. */
    KILN_REDUCE_SUM,
    /** Their largest (a NaN among them gives NaN). The gradient is split
     *  evenly among the values equal to the largest, as PyTorch 1.13's
     *  amax: of (1, 3, 3, 2) each 3 gets half (torch.max(dim) gives one
     *  of them all of it instead). */
    KILN_REDUCE_MAX,
    /** Their smallest, its gradient split among ties as KILN_REDUCE_MAX's
     *  (PyTorch's amin). */
    KILN_REDUCE_MIN
} kiln_reduce_op;

/** Options of kiln_reduce(). */
typedef struct kiln_reduce_options {
    size_t struct_size;          /**< sizeof(kiln_reduce_options) */
    const char *name;            /**< layer name, or NULL for "reduce", "reduce_1", ... */
    /** Nonzero: each reduced axis stays, of length 1 (ONNX's and PyTorch's
     *  keepdims); 0: reduced axes are dropped. */
    int32_t keepdims;
} kiln_reduce_options;

/** Reduces a sample over `n_axes` of its axes (ONNX ReduceMean, ReduceSum,
 *  ReduceMax, ReduceMin; PyTorch's mean, sum, amax, amin over dims): each
 *  output value is `op` of the values that differ only along those axes.
 *  `axes` counts the batch as axis 0, as Keras's and ONNX's do: a sample's
 *  axes are 1..rank, or -rank..-1 from the last; each at most once. Axis 0
 *  is refused: it would mix samples, so that a sample's output would
 *  depend on what else is in its batch (and on how fit splits a batch
 *  between replicas). Without keepdims the output keeps the axes not
 *  reduced in their order; reducing every axis gives (1). An axis out of
 *  range or given twice, axis 0, n_axes outside 1..rank or `axes` NULL is
 *  KILN_ERROR_INVALID_ARGUMENT, reported by kiln_model_compile naming the
 *  layer. `axes` is copied. The sums run in a fixed order (deterministic);
 *  ONNX export writes the Reduce op of `op`. */
KILN_API kiln_node kiln_reduce(kiln_model *model, kiln_node input, kiln_reduce_op op,
                               int32_t n_axes, const int32_t *axes,
                               const kiln_reduce_options *options);

/** Options of kiln_softmax(). */
typedef struct kiln_softmax_options {
    size_t struct_size;          /**< sizeof(kiln_softmax_options) */
    const char *name;            /**< layer name, or NULL for "softmax", "softmax_1", ... */
    /** The axis, counting the batch as 0 (Keras's Softmax axis): 1..rank,
     *  or -rank..-1 from the last; 0: -1, the last. */
    int32_t axis;
    /** Nonzero: over every axis from `axis` to the last together, as one
     *  (ONNX's Softmax before opset 13, which coerces its input to 2-D at
     *  `axis`). */
    int32_t through_last;
    /** Nonzero: log softmax, x - log(sum exp(x)) along the axis. */
    int32_t log;
} kiln_softmax_options;

/** Softmax (or log softmax) of a sample along one axis of any rank, or
 *  along all axes from one to the last (through_last): the values that
 *  differ only along them sum to 1 (their exps, for log). The softmax
 *  activation (KILN_ACTIVATION_SOFTMAX) covers the last axis, and the loss
 *  fuses with it; this layer is for the others (an attention map's, the
 *  channels of an image). An axis out of range (-rank - 1, the batch,
 *  included) is KILN_ERROR_INVALID_ARGUMENT, reported by
 *  kiln_model_compile naming the layer. ONNX export writes
 *  Softmax or LogSoftmax (opset 13) over the axis, or a Reshape to flatten
 *  the axes of through_last around it. */
KILN_API kiln_node kiln_softmax(kiln_model *model, kiln_node input,
                                const kiln_softmax_options *options);

/** Options of kiln_concatenate(). */
typedef struct kiln_concatenate_options {
    size_t struct_size;          /**< sizeof(kiln_concatenate_options) */
    const char *name;            /**< layer name, or NULL for "concatenate", ... */
    /** The axis to join along, counting the batch dimension as Keras's
     *  does: -1 is the last axis, 1 a sample's first; 0 (the batch axis,
     *  which cannot be joined along): -1, Keras's default. */
    int32_t axis;
} kiln_concatenate_options;

/** Joins 2..8 inputs along the options' axis (Keras Concatenate): the
 *  inputs have one rank and equal dimensions but on that axis. Axes past
 *  the rank are KILN_ERROR_SHAPE, as are mismatched dimensions (reported
 *  by kiln_model_compile naming the layer and the shapes). The same node
 *  may be given more than once. */
KILN_API kiln_node kiln_concatenate(kiln_model *model, const kiln_node *inputs,
                                    int32_t n_inputs, const kiln_concatenate_options *options);

/** Options of kiln_add(). */
typedef struct kiln_add_options {
    size_t struct_size;          /**< sizeof(kiln_add_options) */
    const char *name;            /**< layer name, or NULL for "add", "add_1", ... */
} kiln_add_options;

/** Element-wise sum of 2..8 inputs of one shape (Keras Add). */
KILN_API kiln_node kiln_add(kiln_model *model, const kiln_node *inputs, int32_t n_inputs,
                            const kiln_add_options *options);

/** Options of kiln_dot(). */
typedef struct kiln_dot_options {
    size_t struct_size;          /**< sizeof(kiln_dot_options) */
    const char *name;            /**< layer name, or NULL for "dot", "dot_1", ... */
} kiln_dot_options;

/** Inner product of two samples of one length D: (D,) and (D,) give (1,),
 *  as Keras's Dot(axes=-1) on (batch, D) inputs (no normalisation): the
 *  meeting point of a two-tower recommender's user and item vectors.
 *  Other shapes are KILN_ERROR_SHAPE at kiln_model_compile, naming the layer
 *  and both shapes. The same node may be given twice. Model files record
 *  it; ONNX export writes Mul and ReduceSum. */
KILN_API kiln_node kiln_dot(kiln_model *model, kiln_node a, kiln_node b,
                            const kiln_dot_options *options);

/** What kiln_binary() computes, element by element (a and b its operands,
 *  in order). */
typedef enum kiln_binary_op {
    KILN_BINARY_ADD,             /**< a + b (Keras Add; ONNX Add) */
    KILN_BINARY_SUBTRACT,        /**< a - b (Keras Subtract; ONNX Sub) */
    KILN_BINARY_MULTIPLY,        /**< a * b (Keras Multiply; ONNX Mul) */
    KILN_BINARY_DIVIDE,          /**< a / b (tf.math.divide; ONNX Div) */
    /** max(a, b) (Keras Maximum; ONNX Max): on a tie each operand gets half
     *  the gradient, as PyTorch's torch.maximum. */
    KILN_BINARY_MAXIMUM,
    KILN_BINARY_MINIMUM          /**< min(a, b) (Keras Minimum; ONNX Min), ties as Maximum */
} kiln_binary_op;

/** Options of kiln_binary() and kiln_binary_param(); the param_* fields
 *  are kiln_binary_param()'s and must be 0 for kiln_binary(). */
typedef struct kiln_binary_options {
    size_t struct_size;          /**< sizeof(kiln_binary_options) */
    const char *name;            /**< layer name, or NULL for "binary", "binary_1", ... */
    kiln_binary_op op;           /**< the operation; 0: KILN_BINARY_ADD */
    /** The parameter's rank, 1..KILN_MAX_RANK (a single value: rank 1,
     *  dims {1}). */
    int32_t param_rank;
    int32_t param_dims[KILN_MAX_RANK];  /**< its shape, each >= 1; 0 past param_rank */
    /** Nonzero: the parameter is the left operand (p - x, p / x); 0: the
     *  right (x - p). */
    int32_t param_first;
    /** Nonzero: a constant (GELU's sqrt(2), a 0.5): saved and loaded with
     *  the weights but not trained; 0: trained like any weight (a layer
     *  scale, a learned position table). */
    int32_t param_constant;
    float param_value;           /**< the value every element starts at */
} kiln_binary_options;

/** a op b element-wise with NumPy's broadcasting over a sample's axes (the
 *  batch is shared): the shapes are right-aligned and each axis must be
 *  equal or 1 in one of them; the output has the larger rank and on each
 *  axis the larger size. (H, W, C) * (C) scales each channel (squeeze-and-
 *  excitation) without repeating the scale in memory. Gradients are summed
 *  over the axes an operand was broadcast along, in a fixed order. Shapes
 *  that do not broadcast are KILN_ERROR_SHAPE at kiln_model_compile naming
 *  the layer and both shapes; an op out of range or param_* options set
 *  are KILN_ERROR_INVALID_ARGUMENT. The same node may be given twice.
 *  Model files record it; ONNX export writes Add, Sub, Mul, Div, Max or
 *  Min (an (H, W, C) output and its operands in ONNX's NCHW). */
KILN_API kiln_node kiln_binary(kiln_model *model, kiln_node a, kiln_node b,
                               const kiln_binary_options *options);

/** x op p or (param_first) p op x, p a tensor of shape param_dims the
 *  layer owns, broadcast against x as kiln_binary() broadcasts: trained,
 *  its gradient summed over the batch and the broadcast axes, or
 *  (param_constant) a constant. Every element starts at param_value;
 *  kiln_model_set_weights or an imported initializer gives others. The
 *  parameter is named "operand". Errors as kiln_binary()'s; a param_rank
 *  or param_dims out of range is KILN_ERROR_INVALID_ARGUMENT. ONNX export
 *  writes the parameter as an initializer. */
KILN_API kiln_node kiln_binary_param(kiln_model *model, kiln_node x,
                                     const kiln_binary_options *options);

/** Options of kiln_slice(): per axis of a sample (the batch not counted),
 *  where the window starts, how many values it takes and the step between
 *  them. All zeros keep an axis whole; NULL keeps every axis whole. */
typedef struct kiln_slice_options {
    size_t struct_size;          /**< sizeof(kiln_slice_options) */
    const char *name;            /**< layer name, or NULL for "slice", "slice_1", ... */
    /** The first index taken on each axis, 0 .. the axis' length - 1
     *  (counted from the start even when stepping down). */
    int32_t begin[KILN_MAX_RANK];
    /** How many indices each axis keeps; 0: as many as the steps reach
     *  before the axis ends (stepping down, before index 0 is passed). */
    int32_t size[KILN_MAX_RANK];
    /** The step between kept indices; negative walks the axis backwards
     *  (-1 reverses it); 0: 1. */
    int32_t step[KILN_MAX_RANK];
} kiln_slice_options;

/** A strided window of each sample (NumPy's x[:, b:e:s, ...] on any axis
 *  but the batch, ONNX's Slice): on axis a, index o of the output is
 *  index begin[a] + o * step[a] of the input. Its gradient goes to the
 *  values the window took, zero to the others. A begin outside its axis,
 *  a negative size or a size the steps cannot reach inside the axis is
 *  KILN_ERROR_SHAPE at kiln_model_compile (KILN_ERROR_INVALID_ARGUMENT for
 *  a setting on an axis past the input's rank), naming the layer and the
 *  shape. Model files record it; ONNX export writes Slice. */
KILN_API kiln_node kiln_slice(kiln_model *model, kiln_node input,
                              const kiln_slice_options *options);

/** Options of kiln_expand(). */
typedef struct kiln_expand_options {
    size_t struct_size;          /**< sizeof(kiln_expand_options) */
    const char *name;            /**< layer name, or NULL for "expand", "expand_1", ... */
} kiln_expand_options;

/** Broadcasts a sample to `dims` (rank 1..KILN_MAX_RANK, batch not
 *  counted; NumPy's broadcast_to, ONNX's Expand, PyTorch's
 *  x.unsqueeze(1).expand(-1, 4, -1)): the sample's shape is right-aligned
 *  against dims, and each of its axes must equal dims' or be 1, which
 *  repeats; missing leading axes repeat too. The gradient of each input
 *  value is the sum over its repeats. A target of lower rank, a dimension
 *  that neither matches nor is 1 is KILN_ERROR_SHAPE, dims NULL, a rank out
 *  of range or a dimension < 1 KILN_ERROR_INVALID_ARGUMENT, at
 *  kiln_model_compile, naming the layer and the shapes. `dims` is copied.
 *  Model files record it; ONNX export writes Expand. */
KILN_API kiln_node kiln_expand(kiln_model *model, kiln_node input, int32_t rank,
                               const int32_t *dims, const kiln_expand_options *options);

/** Options of kiln_learned_tokens(). */
typedef struct kiln_learned_tokens_options {
    size_t struct_size;          /**< sizeof(kiln_learned_tokens_options) */
    const char *name;            /**< layer name, or NULL for "learned_tokens", ... */
} kiln_learned_tokens_options;

/** A trainable tensor "tokens" of shape `dims` (rank 1..KILN_MAX_RANK,
 *  batch not counted), zeros at first, emitted for every sample: a Vision
 *  Transformer's class token (torchvision's class_token.expand(n, -1, -1)),
 *  typically followed by kiln_concatenate() with the patch tokens. `like`
 *  only gives the batch: its values are not read and get a zero gradient;
 *  the parameter's gradient is the sum over the batch. dims NULL, a rank
 *  out of range, a dimension < 1 or a shape over 2^31 - 1 floats is
 *  KILN_ERROR_INVALID_ARGUMENT at kiln_model_compile, naming the layer.
 *  `dims` is copied. Model files record it; ONNX export writes the
 *  parameter as an initializer and an Expand of it to the batch, which
 *  kiln_model_import_onnx reads back as this layer. */
KILN_API kiln_node kiln_learned_tokens(kiln_model *model, kiln_node like, int32_t rank,
                                       const int32_t *dims,
                                       const kiln_learned_tokens_options *options);

/** Options of kiln_matmul(). */
typedef struct kiln_matmul_options {
    size_t struct_size;          /**< sizeof(kiln_matmul_options) */
    const char *name;            /**< layer name, or NULL for "matmul", "matmul_1", ... */
} kiln_matmul_options;

/** Matrix product of two computed values, batched over their leading axes
 *  as NumPy's and ONNX's MatMul: samples of shapes (..., M, K) and
 *  (..., K, N) give (..., M, N), where the leading axes (the batch not
 *  counted) broadcast against each other, right-aligned, each pair equal
 *  or one of them 1 or absent. Attention's scores are a (h, T, d) query
 *  times a (h, d, T) key, its context the (h, T, T) weights times a
 *  (h, T, d) value. Both inputs get their gradients, summed over the axes
 *  along which they were broadcast. Samples of rank 1 (a vector, which
 *  NumPy promotes to a matrix) are refused: reshape them to (1, K) or
 *  (K, 1) first. Shapes whose inner dimensions differ, whose leading axes
 *  do not broadcast, or whose product is beyond KILN_MAX_RANK are
 *  KILN_ERROR_SHAPE at kiln_model_compile, naming the layer and both
 *  shapes. The same node may be given twice. Model files record it;
 *  ONNX export writes MatMul. */
KILN_API kiln_node kiln_matmul(kiln_model *model, kiln_node a, kiln_node b,
                               const kiln_matmul_options *options);

/** Options of kiln_multi_head_attention(); zero fields take Keras's
 *  defaults. */
typedef struct kiln_multi_head_attention_options {
    size_t struct_size;          /**< sizeof(kiln_multi_head_attention_options) */
    const char *name;            /**< layer name, or NULL for "multi_head_attention", ... */
    int32_t num_heads;           /**< required, > 0 */
    int32_t key_dim;             /**< size of each head for query and key, required, > 0 */
    int32_t value_dim;           /**< size of each head for value; 0: key_dim */
    /** Dropout on the attention probabilities during fit (0 <= dropout < 1),
     *  drawn as kiln_dropout draws its masks (the same under every
     *  strategy); evaluate and predict use none. */
    float dropout;
    uint64_t seed;               /**< mixed with the context's seed for that dropout */
    /** Nonzero: query position i attends to value positions j <= i only
     *  (Keras's use_causal_mask; with query and value of other lengths,
     *  Keras's lower-triangular mask, aligned at the first position). */
    int32_t use_causal_mask;
    int32_t no_bias;             /**< nonzero: no bias vectors (Keras use_bias=False) */
    int32_t output_shape;        /**< last dimension of the output; 0: the query's */
} kiln_multi_head_attention_options;

/** Multi-head attention (Keras MultiHeadAttention, key = value): `query`
 *  of shape (Tq, D) attends over `value` of shape (Tv, Dv), both rank 2
 *  (batch not counted); Tq and Tv, D and Dv may differ (cross-attention),
 *  and `value` may be `query` (self-attention). Per head h: Q = query Wq +
 *  bq, K = value Wk + bk, V = value Wv + bv, softmax(Q K^T / sqrt(key_dim))
 *  over the value positions (masked when causal), times V; the heads'
 *  results go through the output projection to (Tq, output_shape).
 *  Parameters, in Keras's layout and names: query/kernel (D, heads,
 *  key_dim), query/bias (heads, key_dim), key/kernel (Dv, heads, key_dim),
 *  key/bias, value/kernel (Dv, heads, value_dim), value/bias (heads,
 *  value_dim), attention_output/kernel (heads, value_dim, output_shape),
 *  attention_output/bias; kernels glorot_uniform with Keras's fans, biases
 *  zero. Heads or key_dim below 1, a negative value_dim or output_shape, a
 *  dropout outside [0, 1) are KILN_ERROR_INVALID_ARGUMENT; inputs not of
 *  rank 2, KILN_ERROR_SHAPE; both reported by kiln_model_compile naming
 *  the layer. */
KILN_API kiln_node kiln_multi_head_attention(kiln_model *model, kiln_node query,
                                             kiln_node value,
                                             const kiln_multi_head_attention_options *options);

/** kiln_multi_head_attention() with a key padding mask: `padding_mask`
 *  holds a float per value position, shape (Tv) (batch not counted), and
 *  where it is nonzero (NaN included) that position of that sample is
 *  padding, seen by no query position. This is PyTorch's
 *  `key_padding_mask` (True = ignore), the opposite of Keras's
 *  `attention_mask` (1 = attend), which is also per query position; a
 *  Keras mask m of one row for every query is the padding mask 1 - m. It
 *  combines with use_causal_mask (a position must pass both). A query row
 *  that sees no position at all (every one padding) gets probabilities of
 *  0, so its context is 0 and its output the output projection's bias;
 *  gradients through that row are 0. (PyTorch gives NaN there, Keras's
 *  additive mask an average over all positions.) The mask gets a gradient
 *  of 0. Ids (kiln_input_ints) are refused as the mask, as anywhere but an
 *  Embedding: give the flags as floats. A mask not of shape (Tv) is
 *  KILN_ERROR_SHAPE at kiln_model_compile, naming the layer and both
 *  shapes; the other refusals are kiln_multi_head_attention()'s. Model
 *  files record the third input; ONNX export adds the mask to the scores
 *  (-1e30 where nonzero) and multiplies the probabilities by where it is
 *  zero, so a row of padding gives 0 there too. */
KILN_API kiln_node kiln_multi_head_attention_masked(
    kiln_model *model, kiln_node query, kiln_node value, kiln_node padding_mask,
    const kiln_multi_head_attention_options *options);

/** Options of kiln_embedding(). */
typedef struct kiln_embedding_options {
    size_t struct_size;          /**< sizeof(kiln_embedding_options) */
    const char *name;            /**< layer name, or NULL for "embedding", ... */
    int32_t input_dim;           /**< required, > 0: ids are in [0, input_dim) */
    int32_t output_dim;          /**< required, > 0: the width of a row */
} kiln_embedding_options;

/** Embedding (Keras Embedding): looks up each int32 id of an Input
 *  declared with kiln_input_ints() (shape (...), rank 1 to 3) in a table
 *  "embeddings" of shape (input_dim, output_dim), initialised uniform in
 *  [-0.05, 0.05] (Keras's RandomUniform), giving (..., output_dim). Its
 *  gradient adds up every use of an id in the batch, in a fixed order (the
 *  same on every device and run). An id outside [0, input_dim) stops fit,
 *  evaluate or predict with KILN_ERROR_DATA naming the sample and the
 *  position, before any device work. Fed by anything but an int Input it
 *  is KILN_ERROR_SHAPE at compile. Keras's mask_zero is not supported. */
KILN_API kiln_node kiln_embedding(kiln_model *model, kiln_node input,
                                  const kiln_embedding_options *options);

/** Options of kiln_position_embedding(). */
typedef struct kiln_position_embedding_options {
    size_t struct_size;          /**< sizeof(kiln_position_embedding_options) */
    const char *name;            /**< layer name, or NULL for "position_embedding", ... */
    int32_t max_length;          /**< required, > 0: the longest sequence */
} kiln_position_embedding_options;

/** Learned positions (keras_hub PositionEmbedding, with the Add fused): a
 *  table "embeddings" of shape (max_length, width), Glorot uniform, whose
 *  first T rows are added to a (T, width) input, y[t] = x[t] + table[t].
 *  Typically after an Embedding of (T) ids. An input that is not
 *  (T, width), or with T > max_length, is KILN_ERROR_SHAPE naming the
 *  layer; rows past T get no gradient. */
KILN_API kiln_node kiln_position_embedding(kiln_model *model, kiln_node input,
                                           const kiln_position_embedding_options *options);

/** Makes `node` the model's output (default: the last node added). */
KILN_API kiln_status kiln_model_set_output(kiln_model *model, kiln_node node);

/** The most outputs a model may declare (kiln_model_set_outputs). Public
 *  structs hold arrays of this length (kiln_progress, kiln_metrics,
 *  kiln_epoch_record), so it never changes. */
#define KILN_MAX_MODEL_OUTPUTS 8

/** Makes the `n` nodes the model's outputs, in this order (Keras's
 *  Model(outputs=[...])): compile then takes a loss per output
 *  (kiln_compile_options.outputs), a dataset one label array per output
 *  (kiln_arrays_desc.outputs), and the history, callbacks and evaluate
 *  report each output by its layer's name ("<layer>_loss",
 *  "<layer>_accuracy"). n = 1 is kiln_model_set_output(). An output may
 *  not feed another layer of the model (KILN_ERROR_UNSUPPORTED at
 *  compile). KILN_ERROR_INVALID_ARGUMENT for `outputs` NULL, n outside
 *  1..KILN_MAX_MODEL_OUTPUTS, a node not in the model or named twice;
 *  KILN_ERROR_STATE once compiled. `outputs` is copied. */
KILN_API kiln_status kiln_model_set_outputs(kiln_model *model, const kiln_node *outputs,
                                            int32_t n);

/* ------------------------------------------------------------------------ */
/* Compile                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum kiln_loss {
    KILN_LOSS_NONE = 0,                         /**< invalid: compile needs a loss */
    /** integer class labels: one per sample against a (classes,) output, or one
     *  per position against a (positions..., classes) output, the loss then
     *  averaged over every position (Keras on a rank-3 output) */
    KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
    /** one-hot / probability labels, per position too on a
     *  (positions..., classes) output (averaged over the positions) */
    KILN_LOSS_CATEGORICAL_CROSSENTROPY,
    KILN_LOSS_BINARY_CROSSENTROPY,              /**< labels in [0, 1] per output */
    KILN_LOSS_MEAN_SQUARED_ERROR
} kiln_loss;

typedef enum kiln_optimizer_kind {
    KILN_OPTIMIZER_ADAM = 0,
    KILN_OPTIMIZER_SGD,
    /** Keras's AdamW: Adam with decoupled weight decay, weight_decay 0.004
     *  by default (Keras's; torch.optim.AdamW's is 0.01). Numerics equal
     *  torch.optim.AdamW's (amsgrad off) and Keras's: each update first
     *  multiplies the weight by (1 - lr * weight_decay), then takes Adam's
     *  step; Keras and PyTorch both decay before the step, and so does kiln. */
    KILN_OPTIMIZER_ADAMW,
    /** Keras's RMSprop: v = rho * v + (1 - rho) * g^2; centered also keeps
     *  a = rho * a + (1 - rho) * g and uses v - a^2; the step is
     *  lr * g / sqrt(v + epsilon) (Keras: epsilon inside the root), added to
     *  a momentum buffer (m = momentum * m + step, w -= m) when momentum > 0.
     *  torch.optim.RMSprop puts epsilon outside the root (sqrt(v) + eps) and
     *  lr outside the buffer (w -= lr * m): kiln follows Keras, equal to
     *  PyTorch within round-off for a constant rate and an epsilon far
     *  below v (1e-10, say); its alpha is kiln's rho. */
    KILN_OPTIMIZER_RMSPROP,
    /** Keras's Adagrad: an accumulator starting at initial_accumulator_value
     *  (0.1) adds g^2, and w -= lr * g / sqrt(accumulator + epsilon) (Keras:
     *  epsilon inside the root; torch.optim.Adagrad's sqrt(acc) + eps, its
     *  initial_accumulator_value 0 and lr_decay 0 by default, agrees within
     *  round-off for an epsilon far below the accumulator). */
    KILN_OPTIMIZER_ADAGRAD
} kiln_optimizer_kind;

typedef enum kiln_lr_schedule_kind {
    KILN_LR_CONSTANT = 0,
    /** learning_rate * decay_rate ^ floor(step / decay_steps) */
    KILN_LR_STEP_DECAY,
    /** learning_rate * decay_rate ^ (step / decay_steps) (Keras ExponentialDecay) */
    KILN_LR_EXPONENTIAL_DECAY,
    /** from learning_rate down to alpha * learning_rate along a half cosine
     *  over decay_steps, then constant (Keras CosineDecay) */
    KILN_LR_COSINE_DECAY,
    /** values[0] up to and including step boundaries[0], values[i] for
     *  boundaries[i-1] < step <= boundaries[i], values[n_boundaries] after
     *  the last boundary: Keras PiecewiseConstantDecay(boundaries, values),
     *  whose rule at a boundary step is the same (the earlier value still
     *  holds at the boundary itself, the next one from the step after). The
     *  values are the rates themselves, as in Keras: learning_rate is left
     *  0 (it then reads values[0]) or equals values[0]. */
    KILN_LR_PIECEWISE_CONSTANT_DECAY
} kiln_lr_schedule_kind;

/** The most boundaries a piecewise constant schedule takes. */
#define KILN_LR_MAX_BOUNDARIES 64

/** How the learning rate moves with the optimizer step (updates applied so
 *  far, counting from 0), kiln_optimizer_options.schedule. With warmup_steps
 *  > 0 it first rises linearly over warmup_steps updates, and the schedule
 *  then runs on (step - warmup_steps). Without a warm-up target the rise is
 *  from 0 to learning_rate (lr x step / warmup_steps, the
 *  linear-scaling-plus-warm-up recipe for large global batches; Keras's
 *  CosineDecay(initial_learning_rate=0, warmup_target=lr)); with one
 *  (has_warmup_target) it is Keras CosineDecay's warm-up: from
 *  learning_rate (Keras's initial_learning_rate) to warmup_target,
 *  learning_rate + (warmup_target - learning_rate) x step / warmup_steps,
 *  and the decay then starts from warmup_target instead of learning_rate
 *  (for every decaying kind; a constant schedule then stays at
 *  warmup_target). A zeroed struct is a constant rate. */
typedef struct kiln_lr_schedule {
    size_t struct_size;          /**< sizeof(kiln_lr_schedule) */
    kiln_lr_schedule_kind kind;  /**< default constant */
    int64_t decay_steps;         /**< > 0 for the decaying kinds */
    float decay_rate;            /**< step and exponential decay, finite and > 0 */
    float alpha;                 /**< cosine: final fraction of learning_rate, in [0, 1] */
    int64_t warmup_steps;        /**< >= 0 */
    /** Nonzero: warm up to warmup_target (Keras CosineDecay's
     *  warmup_target; Keras's default None is 0 here). Not with a piecewise
     *  constant schedule, whose values say every rate. */
    int32_t has_warmup_target;
    float warmup_target;         /**< finite and > 0 when has_warmup_target, else 0 */
    /** Piecewise constant decay: n_boundaries (1 to KILN_LR_MAX_BOUNDARIES)
     *  optimizer steps, >= 0 and strictly increasing, counted after the
     *  warm-up; 0 and NULL for the other kinds. Copied by compile. */
    int32_t n_boundaries;
    const int64_t *boundaries;   /**< see n_boundaries */
    /** Piecewise constant decay: the n_boundaries + 1 rates (n_values must
     *  say so), finite and > 0; 0 and NULL for the other kinds. Copied. */
    int32_t n_values;
    const float *values;         /**< see n_values */
} kiln_lr_schedule;

/** The optimizer of kiln_compile_options.optimizer. Zero fields take
 *  Keras's defaults: Adam(learning_rate 1e-3, beta_1 0.9, beta_2 0.999,
 *  epsilon 1e-7); SGD(learning_rate 1e-2, momentum 0); AdamW(as Adam,
 *  weight_decay 0.004); RMSprop(learning_rate 1e-3, rho 0.9, momentum 0,
 *  epsilon 1e-7, centered off); Adagrad(learning_rate 1e-3,
 *  initial_accumulator_value 0.1, epsilon 1e-7); no weight decay but
 *  AdamW's; a constant learning rate. Written with designated initialisers:
 *
 *     const kiln_lr_schedule decay = {.struct_size = sizeof decay,
 *         .kind = KILN_LR_EXPONENTIAL_DECAY, .decay_steps = 1000, .decay_rate = 0.9f};
 *     const kiln_optimizer_options sgd = {.struct_size = sizeof sgd,
 *         .kind = KILN_OPTIMIZER_SGD, .learning_rate = 0.05f, .schedule = &decay};
 *     kiln_compile_options co = {.struct_size = sizeof co, .loss = ..., .optimizer = &sgd};
 */
typedef struct kiln_optimizer_options {
    size_t struct_size;          /**< sizeof(kiln_optimizer_options) */
    kiln_optimizer_kind kind;    /**< default Adam */
    float learning_rate;         /**< the base rate, before the schedule */
    float momentum;              /**< SGD and RMSprop, in [0, 1) */
    int32_t nesterov;            /**< SGD only, needs momentum > 0 */
    float beta_1;                /**< Adam and AdamW */
    float beta_2;                /**< Adam and AdamW */
    /** Adam, AdamW, RMSprop and Adagrad, finite and > 0 (where each puts
     *  it: kiln_optimizer_kind) */
    float epsilon;
    /** How the rate moves with the step; NULL: constant. Read during the
     *  call only: compile keeps its own copy. */
    const kiln_lr_schedule *schedule;
    /* Gradient clipping (Keras's optimizer arguments of the same names,
     * default None = 0: off). At most one of the three may be set, as Keras
     * 3 requires; each must be finite and >= 0. Clipping acts on the
     * gradient of the global batch (summed over replicas, pipeline stages
     * and MPI processes, and over the micro-batches of
     * gradient_accumulation_steps, where Keras 3 clips each micro-batch's)
     * just before every optimizer's update; frozen layers' gradients take
     * no part. A gradient with a NaN or infinity still skips its step (see
     * kiln_fit_options.skip_nonfinite): clipping never turns one finite. */
    /** > 0: each parameter tensor's gradient g becomes g * clipnorm /
     *  max(||g||, clipnorm), ||g|| its L2 norm (Keras's clipnorm; by hand in
     *  PyTorch: g.mul_(c / max(g.norm(), c)) per parameter). */
    float clipnorm;
    /** > 0: each gradient element is clamped to [-clipvalue, clipvalue]
     *  (Keras's clipvalue, PyTorch's torch.nn.utils.clip_grad_value_). */
    float clipvalue;
    /** > 0: every gradient is scaled by min(1, global_clipnorm / (N +
     *  1e-6)), N the L2 norm of all trainable gradients together (PyTorch's
     *  torch.nn.utils.clip_grad_norm_; Keras's global_clipnorm, which omits
     *  the 1e-6). N is computed over the whole model under every strategy:
     *  squares summed in double where the device has cl_khr_fp64 (else
     *  float, where a finite gradient whose squares overflow counts as
     *  non-finite), in a fixed order, so training stays deterministic. The
     *  parameter server clips each pushed gradient (one batch's, of the
     *  whole model) by its own norm, as each of its updates applies one. */
    float global_clipnorm;
    /** Keras's weight_decay, on every optimizer: decoupled, each update
     *  first sets w -= lr * weight_decay * w (lr the scheduled rate), then
     *  takes the optimizer's step on the gradient alone. Finite and >= 0;
     *  0: none (AdamW: 0.004, Keras's default; use Adam for AdamW without
     *  decay). PyTorch's SGD and Adam weight_decay is an L2 term added to
     *  the gradient instead, which kiln does not offer: for SGD without
     *  momentum the two are the same update (set the same number); with
     *  momentum or Adam, add the L2 term to the loss, or use this
     *  (torch.optim.AdamW's decoupled form). */
    float weight_decay;
    /** RMSprop's discounting factor (Keras's rho, PyTorch's alpha), in
     *  [0, 1); 0: 0.9 */
    float rho;
    /** RMSprop: nonzero normalises by the centred second moment (the
     *  gradient's estimated variance), Keras's and PyTorch's centered */
    int32_t centered;
    /** Adagrad's accumulator's starting value, finite and > 0; 0: 0.1 */
    float initial_accumulator_value;
    /** Which parameters weight_decay leaves alone (Keras's
     *  exclude_from_weight_decay): nonzero excludes every parameter of
     *  rank 1, which in kiln's layers are the biases and the normalization
     *  layers' gamma and beta (the usual recipe: Keras's
     *  exclude_from_weight_decay(var_names=["bias", "gamma", "beta"]),
     *  timm's and Hugging Face's no-decay groups); 0: every trainable
     *  parameter decays. */
    int32_t exclude_vectors_from_weight_decay;
    /** Nonzero: keep an exponential moving average of the trainable
     *  weights (Keras 3's use_ema). After each optimizer update (once per
     *  update: with gradient_accumulation_steps, once per K micro-batches,
     *  where Keras 3 also folds the unchanged weights in at each micro-step)
     *  every trainable weight w updates its average a, in float32, as Keras
     *  3's _update_model_variables_moving_average does: a = m a + (1 - m) w
     *  with m = ema_momentum, except on the first update (the one numbered
     *  1, kiln_model's optimizer step count 0 before it), where m is 0 and
     *  the average starts as a copy of the updated weights. Batch
     *  normalization's moving statistics and frozen layers' parameters are
     *  not averaged (Keras averages trainable variables only); whatever uses
     *  the averages takes them as they are. The averages live with the
     *  weights under every strategy (replicas, central storage's host copy,
     *  the parameter store, each pipeline stage its own) as one more
     *  optimizer slot, so they cost one more parameter-sized buffer where
     *  the optimizer's state lives. The parameter server across MPI
     *  processes (parameter_store_ranks > 0) refuses it with
     *  KILN_ERROR_UNSUPPORTED: its workers keep no optimizer state, so their
     *  evaluate and predict could not use the averages. Once at least one
     *  update has been
     *  applied, kiln_model_evaluate, kiln_model_predict (and their
     *  on-batch forms and fit's validation), kiln_model_save,
     *  kiln_model_save_weights and kiln_model_export_onnx use the averages
     *  in place of the trainable weights, the other parameters as they
     *  are (evaluate and predict swap the averages in through the host and
     *  back after, bit for bit: two copies of the parameters per call);
     *  before any update they use the weights. kiln_model_get_weights
     *  returns the weights being trained. kiln_model_save_checkpoint keeps
     *  both, the averages as "optimizer/<param>/average", so a resumed run
     *  continues bit-identically. kiln_model_set_weights,
     *  kiln_model_set_tensor, kiln_model_load_weights, kiln_model_load
     *  and EarlyStopping's restore_best_weights restart the averages from
     *  the weights they write. */
    int32_t use_ema;
    /** The averages' momentum m (Keras's ema_momentum), in [0, 1); 0: 0.99
     *  (Keras's default; a momentum of exactly 0 would make the averages
     *  the weights). NaN, infinite, negative or >= 1:
     *  KILN_ERROR_INVALID_ARGUMENT, with use_ema off too (files store every
     *  setting). */
    float ema_momentum;
    /** > 0 (use_ema only): after every N-th update (the update numbered
     *  N, 2N, ...) the trainable weights are overwritten by their averages
     *  (Keras's ema_overwrite_frequency), so training continues from them;
     *  0: never (Keras's None). Negative: KILN_ERROR_INVALID_ARGUMENT. */
    int32_t ema_overwrite_frequency;
} kiln_optimizer_options;

/** Sets *rate to the learning rate `options` give at optimizer step `step`
 *  (updates applied so far, counting from 0), defaults filled in as
 *  compile fills them (NULL: Adam's defaults, 1e-3 at every step); the
 *  rate is computed in double, as training computes it. `ctx` holds the
 *  message of a failure (kiln_context_last_error).
 *  KILN_ERROR_INVALID_ARGUMENT, *rate 0, for `rate` NULL, a negative step,
 *  a nonzero struct_size of the options or their schedule below
 *  sizeof(size_t), or an option kiln_model_compile refuses (named as
 *  compile names it), and, with no message, for `ctx` NULL. */
KILN_API kiln_status kiln_learning_rate_at(kiln_context *ctx,
                                           const kiln_optimizer_options *options, int64_t step,
                                           double *rate);

typedef enum kiln_strategy {
    KILN_STRATEGY_AUTO = 0,       /**< one_device for one device, mirrored for more */
    KILN_STRATEGY_ONE_DEVICE,     /**< train on the context's first device */
    /** One replica per device, each driven by its own host thread; every
     *  global batch is split across them, gradients are summed by a
     *  shared-memory reducer (in a fixed order: deterministic) while
     *  backward runs, and every replica applies the same update. */
    KILN_STRATEGY_MIRRORED,
    /** Parameters and optimizer state in host memory; the replicas compute
     *  gradients on their share of the batch, the host sums them and applies
     *  the optimizer. */
    KILN_STRATEGY_CENTRAL_STORAGE,
    /** Model parallelism: the layers are split into stages, one per device
     *  (kiln_model_place, or balanced automatically), and each global batch
     *  flows through them as micro-batches, so every device works at once
     *  (see kiln_pipeline_schedule). The default when any layer is placed. */
    KILN_STRATEGY_PIPELINE,
    /** Mirrored across the processes of an MPI job (one per machine or
     *  group of devices, launched by mpirun) and the devices of each: every
     *  process assembles the same global batch and trains on its part;
     *  gradients are summed over the local replicas, then over the
     *  processes bucket by bucket (MPI) while backward goes on. Initial
     *  weights come from rank 0; loss and metrics are global; only rank 0
     *  prints progress and writes checkpoints. Needs kiln built with MPI.
     *  Every process must build the same model with the same replica count,
     *  loss and optimizer settings, and call fit, evaluate and predict with
     *  the same settings and dataset sizes: compile, fit, evaluate and
     *  predict return KILN_ERROR_INVALID_ARGUMENT on every rank, naming
     *  what differs, when they do not. */
    KILN_STRATEGY_MULTI_WORKER,
    /** Asynchronous training in one process: parameters and optimizer
     *  state in a host store; each device's worker takes the next batch
     *  when it is free, pulls the parameters if they changed, and pushes
     *  its gradient, which the store applies at once (no barrier between
     *  workers, so gradients may be a few updates stale; see
     *  max_staleness). Loss and accuracy reach fit as batches finish. */
    KILN_STRATEGY_PARAMETER_SERVER
} kiln_strategy;

/** How pipeline stages order their micro-batches' forward (F) and backward
 *  (B) passes. Both compute the same gradients and leave the same idle
 *  share ("bubble"), (S - 1) / (M + S - 1) for S equal stages and M
 *  micro-batches; they differ in activation memory. */
typedef enum kiln_pipeline_schedule {
    KILN_PIPELINE_DEFAULT = 0,   /**< 1F1B */
    /** All forwards, then all backwards: each stage keeps the activations
     *  of all M micro-batches. */
    KILN_PIPELINE_GPIPE,
    /** One forward, one backward in steady state: stage s keeps at most
     *  S - s micro-batches' activations. */
    KILN_PIPELINE_1F1B
} kiln_pipeline_schedule;

/** The loss of one output of a model of several outputs
 *  (kiln_compile_options.outputs). */
typedef struct kiln_output_loss {
    /** sizeof(kiln_output_loss) (0: this header's): also the distance
     *  between elements of the array, so it must be the same in each. */
    size_t struct_size;
    kiln_loss loss;              /**< required, as kiln_compile_options.loss */
    /** Nonzero: `weight` is used as given, 0 included (an output computed
     *  and reported but not trained on); 0: a weight of 0 means 1. */
    int32_t has_weight;
    /** The output's share of the total loss, finite and >= 0 (Keras's
     *  loss_weights): the total is the sum of weight x loss over the
     *  outputs; 0: 1 (Keras's default) unless has_weight. */
    float weight;
    /** This output's label smoothing, as kiln_compile_options.label_smoothing. */
    float label_smoothing;
} kiln_output_loss;

/** Where the activations of kiln_compile_options.activation_storage live.
 *  KILN_STORAGE_FLOAT16: every layer's output, as soon as it is computed,
 *  is rounded to IEEE half precision (to nearest, ties to even; both
 *  before and after its activation when the activation is not fused into
 *  the layer) and kept as half until the layer's last reader has gone
 *  backward; the layers compute in float32 from those rounded values,
 *  forward and backward (as PyTorch computes a network whose every layer
 *  output is rounded with .half().float()). The gradients of the outputs
 *  stay float32 (so no loss scaling is needed), but live only from their
 *  first consumer's backward pass to their own layer's, in a pool of
 *  float32 buffers that also holds each output while a layer reads it
 *  (where that pool would hold no less than the layers' own buffers, as
 *  in a network of one or two hidden layers, they keep those, rounded in
 *  place: the same numbers, never more memory than float32 but for a
 *  4-byte flag); kiln_model_memory's activation_bytes counts the half
 *  copies and that pool. The model's Inputs and outputs, what the loss
 *  reads and predict returns, stay float32, and so do the values a pipeline stage sends to
 *  the next, and the layers' own workspace (attention's probabilities,
 *  batch normalization's statistics). An output beyond half's range (a
 *  magnitude of 65520 or more rounds to infinity) fails the step, the
 *  evaluation or the prediction with KILN_ERROR_NUMERIC naming the layer.
 *  Parameters stay float32. */
typedef enum kiln_storage {
    KILN_STORAGE_FLOAT32 = 0,   /**< float32 buffers of every layer's own, for the whole step */
    KILN_STORAGE_FLOAT16 = 1,   /**< IEEE half between forward and backward, as above */
} kiln_storage;

/** Options of kiln_model_compile(). */
typedef struct kiln_compile_options {
    size_t struct_size;          /**< sizeof(kiln_compile_options) */
    kiln_loss loss;              /**< required */
    /** NULL: Adam with Keras's defaults (as a zeroed kiln_optimizer_options).
     *  Read during the call only: the model keeps its own copy, schedule
     *  included. */
    const kiln_optimizer_options *optimizer;
    /** How training is spread over the context's devices. Left at
     *  KILN_STRATEGY_AUTO, the KILN_STRATEGY environment variable
     *  ("one_device", "mirrored", "central_storage", "pipeline",
     *  "multi_worker", "parameter_server") chooses; an explicit strategy
     *  wins. */
    kiln_strategy strategy;
    /** Nonzero: do not compute accuracy (it is computed by default for the
     *  cross-entropy losses). */
    int32_t no_accuracy;
    /** Update every K steps with the mean gradient of the K (Keras's
     *  gradient_accumulation_steps); 0 or 1: every step. */
    int32_t gradient_accumulation_steps;
    /** Replicas (devices) for mirrored and central storage: the context's
     *  first n devices; 0: all of them. More than the context has is
     *  KILN_ERROR_INVALID_ARGUMENT, whichever strategy runs. */
    int32_t replicas;
    /** Watchdog, under every strategy (one_device included): a step that a
     *  replica has not finished after this many seconds fails with
     *  KILN_ERROR_TIMEOUT naming the replica, its device and layer (the
     *  model then accepts only kiln_model_destroy); and fit's or
     *  evaluate's wait for the data loader's next batch fails with
     *  KILN_ERROR_TIMEOUT after as long, naming the step, the sample a
     *  loader thread is reading and the source (an application's fill or
     *  map function that never returns), the model staying usable. A
     *  thread inside such a function cannot be killed: it is left running,
     *  detached, and ends when the function returns; the dataset (and its
     *  context) stays alive until then, even if destroyed, and may be used
     *  meanwhile (the function is called again, from other threads). Reads
     *  on the fitting thread (loader_threads -1) are not bounded. 0: 600 s;
     *  negative, NaN or infinite: KILN_ERROR_INVALID_ARGUMENT. */
    double step_timeout_seconds;
    /** Gradient bucket sizes for the reducer (a layer larger than the size
     *  gets a bucket of its own); 0: 1 MiB for both (PyTorch DDP's first
     *  bucket; docs/distributed.md says why not its 25 MiB after). */
    int64_t first_bucket_bytes;
    int64_t bucket_bytes;        /**< see first_bucket_bytes */
    /** Reducer threads; 0: 2 (docs/distributed.md gives the measurement). */
    int32_t reducer_threads;
    /** Pipeline: stages when no layer is placed (the context's first n
     *  devices, one stage each, layers split by compute cost); 0: every
     *  device. With placements the stages are the placed devices. */
    int32_t pipeline_stages;
    /** Pipeline: micro-batches per global batch (uneven when they must
     *  be); 0: 4. */
    int32_t micro_batches;
    kiln_pipeline_schedule pipeline_schedule;   /**< 0: 1F1B */
    /** Pipeline: device memory each stage may use, in bytes, standing in for
     *  smaller devices; 0: each device's global memory. Parameters,
     *  gradients and optimizer state are checked at compile, activations
     *  when the batch size is first seen (before the first step). */
    uint64_t device_memory_budget;
    /** Parameter server: a worker that has finished more than this many
     *  batches beyond the slowest worker waits (stale synchronous
     *  parallel); 0: no bound. */
    int32_t max_staleness;
    /** Parameter server across the processes of an MPI job: R > 0 makes
     *  ranks 0..R-1 the store, the parameters cut into R shards of equal
     *  size, and every other rank a worker (the KILN_PARAMETER_STORE_RANKS
     *  environment variable overrides it); 0: the store and its workers
     *  live in this process. The job needs a worker rank besides the
     *  stores, and every rank the same model, loss, optimizer settings,
     *  parameter_store_ranks and max_staleness, and the same fit settings
     *  and dataset sizes: else KILN_ERROR_INVALID_ARGUMENT on every rank,
     *  naming what differs. */
    int32_t parameter_store_ranks;
    /* Metrics beyond loss and accuracy (Keras's compile(metrics=[...])):
     * computed on the device with the loss, reported by evaluate, in the
     * history, to callbacks, and monitored by name ("val_" + name for the
     * validation data). None is computed unless asked for. */
    /** > 0: top-k categorical accuracy with this k (Keras's default k is 5):
     *  the share of samples whose true class is among the k highest outputs,
     *  ties at the k-th place counted in, as tf.math.in_top_k counts them (a
     *  non-finite output of the true class is a miss). Named
     *  "sparse_top_k_categorical_accuracy" under sparse labels and
     *  "top_k_categorical_accuracy" under dense ones (the true class is the
     *  first largest target). The categorical cross-entropy losses only. */
    int32_t top_k;
    /** Nonzero: "mean_absolute_error", the mean over samples and outputs of
     *  |output - target|. Losses with dense labels only. */
    int32_t mean_absolute_error;
    /** Nonzero: "binary_accuracy", the share of outputs for which (output >
     *  binary_threshold) is the target (1 or 0; another target never
     *  matches, as in Keras). Losses with dense labels only. */
    int32_t binary_accuracy;
    /** Nonzero: binary_threshold is used as given, 0 included; 0: a
     *  threshold of 0 means 0.5. */
    int32_t has_binary_threshold;
    /** binary_accuracy's threshold, finite; 0: 0.5 (Keras's default)
     *  unless has_binary_threshold. */
    float binary_threshold;
    /** Nonzero: sparse labels equal to ignore_class mark padding (Keras's
     *  SparseCategoricalCrossentropy(ignore_class=...)): those positions count
     *  in neither the loss nor its average nor accuracy and top-k accuracy,
     *  and get no gradient. The loss is the sum over the other positions
     *  divided by their count in the global batch, as Keras divides by the
     *  unmasked count; a batch with every position ignored has loss 0 and a
     *  zero gradient. Epoch and evaluate means are taken over all counted
     *  positions of the epoch or dataset (Keras averages batch means, which
     *  differs when batches count different numbers of positions).
     *  sparse_categorical_crossentropy only. */
    int32_t has_ignore_class;
    /** The padding label, >= 0; it may lie outside [0, classes) (labels are
     *  checked against the output's classes except where they equal it).
     *  Datasets refuse negative labels, so -1 padding is not possible. */
    int32_t ignore_class;
    /** A model of several outputs (kiln_model_set_outputs): one loss and
     *  weight per output, in output order, instead of `loss` (then left
     *  0); n_outputs must be the model's output count. Accuracy is
     *  computed per output whose loss is a cross-entropy (unless
     *  no_accuracy). With several outputs, top_k, mean_absolute_error,
     *  binary_accuracy and ignore_class are KILN_ERROR_UNSUPPORTED, and so
     *  under the pipeline is an output on a stage before the last (which
     *  computes the loss), naming it. 0: one output, whose loss is
     *  `loss`. */
    int32_t n_outputs;
    /** n_outputs losses (NULL when n_outputs is 0); copied. */
    const kiln_output_loss *outputs;
    /** Keras's label_smoothing (default 0), in [0, 1], for a model of one
     *  output (several: kiln_output_loss.label_smoothing each, this left
     *  0). The loss reads each target t as Keras smooths it: categorical
     *  cross-entropy t (1 - ls) + ls / classes; sparse categorical
     *  cross-entropy the same on the one-hot its class id implies (Keras's
     *  SparseCategoricalCrossentropy has no label_smoothing; this is
     *  PyTorch's CrossEntropyLoss(label_smoothing=ls)); binary
     *  cross-entropy t (1 - ls) + ls / 2. On the softmax (sigmoid) output's
     *  logits and on probabilities alike; accuracy and the other metrics
     *  read the labels as given. Mean squared error: must be 0. NaN,
     *  infinite or outside [0, 1]: KILN_ERROR_INVALID_ARGUMENT. */
    float label_smoothing;
    /** How a layer's output is kept between its forward pass and its
     *  backward pass; 0: KILN_STORAGE_FLOAT32. KILN_STORAGE_FLOAT16 keeps
     *  it in IEEE half precision (see kiln_storage), on any device. Another
     *  value: KILN_ERROR_INVALID_ARGUMENT. */
    kiln_storage activation_storage;
} kiln_compile_options;

/**
 * Checks the graph, lays out parameters, initialises them (Glorot uniform
 * kernels, zero biases, from the context's seed) and readies the devices.
 * Returns the first error recorded while building (KILN_ERROR_SHAPE naming
 * the layer and both shapes, KILN_ERROR_INVALID_ARGUMENT for a bad option),
 * KILN_ERROR_INVALID_ARGUMENT for a missing loss or bad optimizer option
 * (a struct_size of the optimizer, its schedule or an output loss
 * included, naming the struct; a setting the optimizer or schedule does
 * not use must be finite too, since model files and checkpoints store
 * every setting),
 * KILN_ERROR_SHAPE when the loss does not fit the output (the categorical
 * cross-entropies need at least 2 classes on the output's last axis),
 * KILN_ERROR_UNSUPPORTED for more than 2^31 parameters, for a model with
 * more than KILN_MAX_MODEL_INPUTS Inputs, and for what a model of several outputs does not support (see
 * kiln_compile_options.n_outputs; naming the strategy or option), for
 * kiln_optimizer_options.use_ema under the parameter server across MPI
 * processes,
 * KILN_ERROR_INVALID_ARGUMENT for losses given for another count of
 * outputs or a negative or non-finite loss weight,
 * KILN_ERROR_BUILD / KILN_ERROR_DEVICE for device failures.
 * A model is compiled once; KILN_ERROR_STATE if called again.
 */
KILN_API kiln_status kiln_model_compile(kiln_model *model, const kiln_compile_options *options);

/** How a compiled model trains: the strategy's name ("one_device",
 *  "mirrored", "central_storage", "pipeline", "multi_worker",
 *  "parameter_server"; static string) and its
 *  replica count (for the pipeline: its stages, which kiln_model_memory
 *  reports one by one). Either pointer may be NULL. */
KILN_API kiln_status kiln_model_distribution(const kiln_model *model, const char **strategy,
                                             int32_t *replicas);

/** This process's place among the processes training a compiled model:
 *  its MPI rank and their number under multi_worker, 0 and 1 otherwise.
 *  Applications print and save on rank 0 only. Either pointer may be NULL. */
KILN_API kiln_status kiln_model_rank(const kiln_model *model, int32_t *rank, int32_t *count);

/** Where a model's training time went, since compile in this process
 *  (kiln_model_training_stats). Times are wall-clock seconds. */
typedef struct kiln_training_stats {
    size_t struct_size;            /**< sizeof(kiln_training_stats) */
    int64_t steps;                 /**< training steps run by fit */
    double input_seconds;          /**< assembling batches on the host */
    double step_seconds;           /**< forward, backward, reduction and update */
    int64_t reductions;            /**< gradient all-reduces (data-parallel strategies) */
    double reduce_seconds;         /**< reducer threads summing gradient buckets */
    double reduce_hidden_seconds;  /**< of which overlapped backward on every replica */
    /** Pipeline: the share of stage time spent waiting for other stages
     *  (the "bubble"), 1 - sum of stage busy time / (stages x step time),
     *  over all training steps; 0 for other strategies. */
    double pipeline_bubble;
    /** Pipeline: stages x training step time, seconds, over the same steps
     *  (so busy time is (1 - pipeline_bubble) x this). */
    double pipeline_stage_seconds;
    /** Parameter server: the most updates applied between a worker's pull
     *  and its push (how stale a gradient got). */
    int64_t max_staleness;
    /** Parameter server: the most batches a worker had finished beyond the
     *  slowest worker when it took one (bounded by max_staleness). */
    int64_t max_lead;
} kiln_training_stats;

/** Fills `stats` (struct_size set by the caller) with the model's training
 *  time breakdown: how long fit spent assembling input, in steps, and, for
 *  data-parallel strategies, in the gradient reduction and how much of that
 *  hid behind backward. */
KILN_API kiln_status kiln_model_training_stats(const kiln_model *model,
                                               kiln_training_stats *stats);

/** Device memory one replica of a compiled model holds
 *  (kiln_model_memory). Activation and workspace buffers are sized for the
 *  largest batch run so far, so they are 0 before the first fit, evaluate
 *  or predict. */
typedef struct kiln_memory_report {
    size_t struct_size;           /**< sizeof(kiln_memory_report) */
    int32_t device;               /**< the replica's device, as kiln_context_device_info counts */
    int32_t batch_capacity;       /**< samples per replica the activation buffers hold */
    uint64_t parameter_bytes;     /**< weights and biases */
    uint64_t gradient_bytes;      /**< their gradients (and accumulated gradients) */
    uint64_t optimizer_bytes;     /**< optimizer state (Adam's moments, momentum) */
    uint64_t activation_bytes;    /**< layer outputs, activations and their gradients, labels */
    uint64_t workspace_bytes;     /**< layers' scratch: im2col matrices, pooling indices */
    uint64_t device_bytes;        /**< everything kiln holds on the device now */
    uint64_t device_peak_bytes;   /**< the most kiln has held on the device at once */
} kiln_memory_report;

/** Fills `report` (struct_size set by the caller) for replica `replica`
 *  (0 <= replica < the count kiln_model_distribution gives). Buffers
 *  CLBlast allocates for itself are not counted. */
KILN_API kiln_status kiln_model_memory(const kiln_model *model, int32_t replica,
                                       kiln_memory_report *report);

/** Places nodes first..last (inclusive, in the order they were added) on
 *  the context's device `device` (as kiln_context_device_info counts), like
 *  TensorFlow's `with tf.device(...)`. Nodes left unplaced go with the node
 *  before them. Placing any node makes the pipeline strategy the default;
 *  each device's nodes must form one contiguous range (a stage). Errors
 *  (a bad range, a device the context lacks) are also kept on the model
 *  and reported by kiln_model_compile. */
KILN_API kiln_status kiln_model_place(kiln_model *model, kiln_node first, kiln_node last,
                                      int32_t device);

/** The pipeline's stage plan of a compiled model as a table: each stage's
 *  device, layers, compute share and memory (parameters, gradients,
 *  optimizer state, and activations once a batch has run), like
 *  kiln_model_summary (same `text`, `size`, `length` rules).
 *  KILN_ERROR_STATE when the model does not train as a pipeline. */
KILN_API kiln_status kiln_model_stage_plan(const kiln_model *model, char *text, size_t size,
                                           size_t *length);

/** Writes a table of the model's layers like Keras's model.summary(): each
 *  layer's name and kind, output shape, parameter count and the layers it
 *  takes (for functional graphs), then the total, trainable and
 *  non-trainable parameter counts. A compiled model's summary then ends
 *  with its compile settings: "Loss: <loss>" (a model of several outputs:
 *  "Loss of output '<layer>': <loss> x <weight>" for each, in output
 *  order), either followed by " (with accuracy)" when accuracy is reported,
 *  and "Optimizer: adam|sgd, learning rate <rate>" with SGD's ", momentum
 *  <m>" (and " (Nesterov)") and ", gradients accumulated over <n> steps"
 *  when n > 1, then "Activations: half precision between forward and
 *  backward" under KILN_STORAGE_FLOAT16. Works before compile, without those lines (on a model whose
 *  building failed it reports that error). At most `size` bytes including
 *  the terminating NUL go to `text` (which may be NULL when size is 0);
 *  `length`, when not NULL, receives the full length, so a first call with
 *  size 0 sizes the buffer. */
KILN_API kiln_status kiln_model_summary(const kiln_model *model, char *text, size_t size,
                                        size_t *length);

/** Number of float32 parameters (weights and biases) of a compiled model. */
KILN_API kiln_status kiln_model_parameter_count(const kiln_model *model, int64_t *count);

/** Copies all parameters, in layer order (kernel before bias), to `weights`
 *  (capacity `count` floats, at least the parameter count; room to spare is
 *  left untouched; KILN_ERROR_INVALID_ARGUMENT if too small or NULL). */
KILN_API kiln_status kiln_model_get_weights(kiln_model *model, float *weights, int64_t count);

/** Replaces all parameters (same order as get) with `count` floats, which
 *  must be exactly the parameter count (else KILN_ERROR_INVALID_ARGUMENT,
 *  naming both). Optimizer state is kept. */
KILN_API kiln_status kiln_model_set_weights(kiln_model *model, const float *weights,
                                            int64_t count);

/** Number of floats one sample's output has (e.g. 10 for a 10-way softmax);
 *  for a model of several outputs, all of them together (predict writes a
 *  sample's outputs one after another, in output order). */
KILN_API kiln_status kiln_model_output_size(const kiln_model *model, int64_t *size);

/** One Input or output of a compiled model (kiln_model_input_info,
 *  kiln_model_output_info). */
typedef struct kiln_tensor_info {
    size_t struct_size;          /**< sizeof(kiln_tensor_info) */
    const char *name;            /**< the layer's name, owned by the model: valid while it lives */
    int32_t rank;                /**< of one sample (the batch not counted) */
    int32_t dims[KILN_MAX_RANK]; /**< that sample's shape; 0 past rank */
    /** KILN_DTYPE_FLOAT32, or KILN_DTYPE_INT32 for ids (an Input of
     *  kiln_input_ints(), whose values kiln_model_predict takes as
     *  int_features). */
    kiln_dtype dtype;
} kiln_tensor_info;

/** Number of Inputs of a compiled model (1..KILN_MAX_MODEL_INPUTS): the
 *  Inputs in the order they were added, the order kiln_model_predict
 *  takes a sample's inputs in. KILN_ERROR_INVALID_ARGUMENT for a NULL
 *  model (no message: it has no context) or `count` NULL; KILN_ERROR_STATE
 *  before compile (compile decides which Inputs the model has) or while
 *  another call (another thread) is inside the model. *count is 0 after a
 *  failure. */
KILN_API kiln_status kiln_model_input_count(const kiln_model *model, int32_t *count);

/** Input `index` (0..kiln_model_input_count - 1) of a compiled model: its
 *  layer's name, one sample's shape and dtype (float32, or int32 for ids).
 *  `info` is the caller's, with struct_size set; its name points into the
 *  model. KILN_ERROR_INVALID_ARGUMENT for a NULL model, `info` NULL or of
 *  a smaller struct_size, an index out of range (naming it and the count);
 *  KILN_ERROR_STATE as kiln_model_input_count. */
KILN_API kiln_status kiln_model_input_info(const kiln_model *model, int32_t index,
                                           kiln_tensor_info *info);

/** Number of outputs of a compiled model (1..KILN_MAX_MODEL_OUTPUTS): 1
 *  for a model of one output (kiln_model_set_output or the last layer),
 *  else those of kiln_model_set_outputs, in its order, the order
 *  kiln_model_predict writes a sample's outputs in. Statuses as
 *  kiln_model_input_count. */
KILN_API kiln_status kiln_model_output_count(const kiln_model *model, int32_t *count);

/** Output `index` (0..kiln_model_output_count - 1) of a compiled model:
 *  its layer's name, one sample's shape and dtype (KILN_DTYPE_FLOAT32).
 *  The floats kiln_model_predict writes per sample are the outputs' element
 *  counts summed (kiln_model_output_size). `info` and statuses as
 *  kiln_model_input_info. */
KILN_API kiln_status kiln_model_output_info(const kiln_model *model, int32_t index,
                                            kiln_tensor_info *info);

/* ------------------------------------------------------------------------ */
/* Layers and parameter tensors as objects                                  */
/* ------------------------------------------------------------------------ */

/* Vocabulary: a "tensor" is one named parameter array of a layer
 * ("dense/kernel", "batch_normalization/moving_mean"), listed by
 * kiln_model_tensor_count and kiln_model_tensor_info and read or written
 * by name with kiln_model_get_tensor and kiln_model_set_tensor; "weights"
 * are all of them at once, one flat float array in tensor order
 * (kiln_model_get_weights and kiln_model_set_weights, as Keras's
 * get_weights; kiln_model_save_weights). */

/** One layer of a model (kiln_model_layer_info). */
typedef struct kiln_layer_info {
    size_t struct_size;          /**< sizeof(kiln_layer_info) */
    const char *name;            /**< valid while the model lives */
    const char *kind;            /**< "conv2d", "dense", "batch_normalization", ... */
    int32_t rank;                /**< of one sample's output */
    int32_t dims[KILN_MAX_RANK]; /**< that output's shape */
    int32_t trainable;           /**< 0 when frozen (kiln_model_set_trainable) */
    int32_t n_tensors;           /**< its parameter tensors (kiln_model_tensor_info) */
} kiln_layer_info;

/** One parameter tensor of a compiled model (kiln_model_tensor_info), in
 *  the order of kiln_model_get_weights()'s array. */
typedef struct kiln_parameter_info {
    size_t struct_size;          /**< sizeof(kiln_parameter_info) */
    /** "<layer>/<tensor>", as in the weight files and kiln_model_get_tensor */
    char name[96];
    int32_t rank;                /**< of the tensor */
    int32_t dims[KILN_MAX_RANK]; /**< its shape (a conv kernel: height, width, in, out) */
    int64_t size;                /**< floats */
    int64_t offset;              /**< where it starts in kiln_model_get_weights()'s array */
    int32_t trainable;           /**< 0: frozen, or state the layer updates (moving statistics) */
} kiln_parameter_info;

/** Number of layers (Input included), in the order they were added.
 *  KILN_ERROR_INVALID_ARGUMENT for `count` NULL. */
KILN_API kiln_status kiln_model_layer_count(const kiln_model *model, int32_t *count);

/** Layer `index` (0..kiln_model_layer_count - 1): its name, kind, output
 *  shape, trainability and tensor count. KILN_ERROR_INVALID_ARGUMENT for
 *  `info` NULL or of a smaller struct_size, an index out of range. */
KILN_API kiln_status kiln_model_layer_info(const kiln_model *model, int32_t index,
                                           kiln_layer_info *info);

/** Number of parameter tensors of a compiled model (KILN_ERROR_STATE
 *  before compile). */
KILN_API kiln_status kiln_model_tensor_count(const kiln_model *model, int32_t *count);

/** Tensor `index` (0..kiln_model_tensor_count - 1) of a compiled model:
 *  its name, shape, size, offset in the flat weights and trainability.
 *  KILN_ERROR_INVALID_ARGUMENT for `info` NULL or of a smaller
 *  struct_size, an index out of range; KILN_ERROR_STATE before compile. */
KILN_API kiln_status kiln_model_tensor_info(const kiln_model *model, int32_t index,
                                            kiln_parameter_info *info);

/** Reads (get) or replaces (set) one parameter tensor of a compiled model by
 *  name; `count` must be its size exactly. KILN_ERROR_INVALID_ARGUMENT for an
 *  unknown name (the model is unchanged) or another count. Optimizer state
 *  is kept. Transfer learning: copy the feature layers' tensors from a
 *  trained model into a new one with another head. */
KILN_API kiln_status kiln_model_get_tensor(kiln_model *model, const char *name, float *data,
                                           int64_t count);
KILN_API kiln_status kiln_model_set_tensor(kiln_model *model, const char *name,
                                           const float *data, int64_t count);
/** Freezes (trainable 0) or unfreezes a layer before the model is compiled
 *  (KILN_ERROR_STATE after: as in Keras, trainability takes effect when the
 *  model is compiled). A frozen layer's weights get no update, and a frozen
 *  BatchNormalization runs on its moving statistics in training too.
 *  KILN_ERROR_INVALID_ARGUMENT for a layer that does not exist, naming it.
 *  Every strategy supports frozen layers. */
KILN_API kiln_status kiln_model_set_trainable(kiln_model *model, const char *layer,
                                              int32_t trainable);

/** LoRA (low-rank adaptation; Keras 3's `Dense.enable_lora(rank,
 *  lora_alpha)`) on the Dense or MultiHeadAttention layer named `layer`,
 *  before the model is compiled. On a Dense: its kernel W is frozen (no
 *  gradient used, no update, no decay or clipping), and two adapters are
 *  trained, `<layer>/lora_kernel_a` A (inputs x rank, HeUniform as Keras)
 *  and `<layer>/lora_kernel_b` B (rank x units, zeros), so that the layer
 *  computes x·W + (alpha/rank)·(x·A)·B + bias. The bias keeps training, as
 *  in Keras. On a MultiHeadAttention: what KerasHub's `enable_lora` does to
 *  a transformer's attention (its default targets, "query" and "value";
 *  kiln_model_enable_lora_with chooses others): the key and output
 *  projections are frozen whole, and the query and value projections
 *  adapted, each as Keras 3's
 *  `EinsumDense.enable_lora` does it: `<layer>/query/kernel` (features,
 *  heads, key_dim) frozen, `<layer>/query/lora_kernel_a` A (features, heads,
 *  rank, HeUniform over fans features x heads) and
 *  `<layer>/query/lora_kernel_b` B (rank, key_dim, zeros), the kernel
 *  used being W + (alpha/rank)·A·B with the product over A's last axis
 *  (per head, A's slice times B); the same for value (value_dim in place
 *  of key_dim); their biases keep training. `alpha` 0 means `rank` (Keras's
 *  default, a scale of 1). Works on imported models, whose Dense layers
 *  carry their Gemm or MatMul node's name. kiln_model_save and
 *  kiln_model_export_onnx write the merged kernels W + (alpha/rank)·A·B and
 *  no adapters (plain layers: the file loads and predicts as the LoRA model
 *  did) unless the save options keep adapters apart
 *  (kiln_model_save_ex); kiln_model_save_weights and checkpoints keep W, A
 *  and B apart. Every strategy supports it.
 *  KILN_ERROR_INVALID_ARGUMENT for `layer` NULL or not in the model, rank
 *  <= 0, alpha negative, NaN or infinite; KILN_ERROR_UNSUPPORTED for a layer
 *  of another kind; KILN_ERROR_STATE for a compiled model or a layer
 *  with LoRA already. Each names what it refused. */
KILN_API kiln_status kiln_model_enable_lora(kiln_model *model, const char *layer, int32_t rank,
                                            float alpha);

/** Options of kiln_model_enable_lora_with(). */
typedef struct kiln_lora_options {
    size_t struct_size;    /**< sizeof(kiln_lora_options) */
    int32_t rank;          /**< the adapters' rank, > 0 (no default, as in Keras) */
    float alpha;           /**< the adapters' scale is alpha / rank; 0: rank (Keras's default) */
    /** What a MultiHeadAttention adapts: its projections by Keras's sublayer
     *  names, comma-separated without spaces, each at most once, in any
     *  order: "query", "key", "value", "attention_output" (e.g.
     *  "query,key,value,attention_output"; PEFT's target_modules). Each is
     *  adapted as kiln_model_enable_lora adapts query and value
     *  (`<layer>/<target>/lora_kernel_a` and `lora_kernel_b`, the same
     *  initialisers, merged by kiln_model_save and ONNX export); the
     *  projections not named are frozen whole, kernel and bias. NULL:
     *  "query,value", KerasHub's default. Must be NULL on a Dense, which
     *  has one kernel. */
    const char *targets;
} kiln_lora_options;

/** kiln_model_enable_lora with options: the same LoRA, and on a
 *  MultiHeadAttention the projections `options->targets` names. A model
 *  file that keeps the adapters (kiln_save_options.keep_lora_adapters)
 *  describes the targets too ("lora": {"rank", "alpha", "targets"}), so
 *  kiln_model_load rebuilds the same adapters. Its errors, and
 *  KILN_ERROR_INVALID_ARGUMENT for `options` NULL or with a struct_size
 *  that is nonzero and too small to hold rank, and for targets on a Dense,
 *  empty (""), with an empty or unknown name or a name given twice (each
 *  naming the targets and what is wrong). The model and the layer are
 *  unchanged after any refusal. */
KILN_API kiln_status kiln_model_enable_lora_with(kiln_model *model, const char *layer,
                                                 const kiln_lora_options *options);

/* ------------------------------------------------------------------------ */
/* Datasets                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct kiln_dataset kiln_dataset;

typedef enum kiln_label_kind {
    KILN_LABELS_SPARSE = 0,  /**< label_size int32 class ids per sample (default 1) */
    KILN_LABELS_DENSE        /**< label_size floats per sample (one-hot, targets) */
} kiln_label_kind;

/** One input's samples in kiln_arrays_desc.inputs. */
typedef struct kiln_input_array {
    /** sizeof(kiln_input_array) (0: this header's): also the distance
     *  between elements of the array, so it must be the same in each. */
    size_t struct_size;
    int32_t rank;                  /**< 1..KILN_MAX_RANK */
    int32_t dims[KILN_MAX_RANK];   /**< one sample's shape for this input */
    const float *features;         /**< count * prod(dims) floats, or */
    const int32_t *int_features;   /**< count * prod(dims) ids (a kiln_input_ints Input) */
} kiln_input_array;

/** One output's labels in kiln_arrays_desc.outputs: as the single-output
 *  fields label_kind, sparse_labels, label_size, dense_labels and
 *  num_classes of kiln_arrays_desc. */
typedef struct kiln_label_array {
    /** sizeof(kiln_label_array) (0: this header's): also the distance
     *  between elements of the array, so it must be the same in each. */
    size_t struct_size;
    kiln_label_kind label_kind;    /**< default sparse */
    const int32_t *sparse_labels;  /**< KILN_LABELS_SPARSE: count * label_size ids */
    int32_t label_size;            /**< ids or floats per sample (sparse: 0 is 1) */
    const float *dense_labels;     /**< KILN_LABELS_DENSE: count * label_size floats */
    int32_t num_classes;           /**< sparse labels must be below it; 0: unchecked here */
} kiln_label_array;

/** Host arrays for kiln_dataset_from_arrays(). */
typedef struct kiln_arrays_desc {
    size_t struct_size;          /**< sizeof(kiln_arrays_desc) */
    int64_t count;                 /**< number of samples, > 0 */
    int32_t feature_rank;          /**< 1..KILN_MAX_RANK */
    int32_t feature_dims[KILN_MAX_RANK];  /**< one sample's shape, e.g. {28, 28, 1} */
    const float *features;         /**< count * prod(feature_dims) floats */
    kiln_label_kind label_kind;  /**< default sparse */
    const int32_t *sparse_labels;  /**< KILN_LABELS_SPARSE: count * label_size ids */
    /** KILN_LABELS_DENSE: floats per sample. KILN_LABELS_SPARSE: ids per sample
     *  (0: 1), one per position of a (positions..., classes) output, e.g. T
     *  for a (T, classes) output; sample i's ids are
     *  sparse_labels[i * label_size ...]. */
    int32_t label_size;
    const float *dense_labels;     /**< KILN_LABELS_DENSE: count * label_size */
    /** Sparse labels must be in [0, num_classes); 0: not checked here (the
     *  model's output size is checked against every label at fit, except
     *  labels equal to the compile options' ignore_class). */
    int32_t num_classes;
    /** Instead of `features` (exactly one of the two is set): count *
     *  prod(feature_dims) int32 ids, for a model whose Input was declared
     *  with kiln_input_ints(). Ids are checked against the Embedding they
     *  feed when fit or evaluate reads them. */
    const int32_t *int_features;
    /** For a model of several Inputs, instead of feature_rank, feature_dims,
     *  features and int_features (which are then left zero): n_inputs
     *  descriptors, one per Input in the model's input order. 0: one input,
     *  described by the fields above. */
    int32_t n_inputs;
    /** n_inputs descriptors (NULL when n_inputs is 0), one per Input in the
     *  model's input order; each is copied like the single-input fields. */
    const kiln_input_array *inputs;
    /** For a model of several outputs, instead of label_kind,
     *  sparse_labels, label_size, dense_labels and num_classes (which are
     *  then left zero): n_outputs label arrays, one per output in the
     *  model's output order (1..KILN_MAX_MODEL_OUTPUTS). 0: one output's
     *  labels, in the fields above. */
    int32_t n_outputs;
    /** n_outputs label arrays (NULL when n_outputs is 0); each is copied. */
    const kiln_label_array *outputs;
} kiln_arrays_desc;

/** Makes a dataset from host arrays, which are copied (the caller keeps
 *  ownership of its arrays). KILN_ERROR_INVALID_ARGUMENT for bad sizes, for
 *  both or neither of features and int_features (of the desc, or of an
 *  input array, named by its index), for n_inputs outside
 *  0..KILN_MAX_MODEL_INPUTS or with the single-input fields also set, for
 *  n_outputs outside 0..KILN_MAX_MODEL_OUTPUTS or with the single-output
 *  label fields also set (a bad label array is named by its index), an
 *  input or label array's struct_size too short or unlike element 0's,
 *  KILN_ERROR_DATA for a label out of range (naming the sample and, for
 *  several ids per sample, the position) or a feature or dense label that
 *  is NaN or infinite (naming the first such sample and element). */
KILN_API kiln_status kiln_dataset_from_arrays(kiln_context *ctx, const kiln_arrays_desc *desc,
                                              kiln_dataset **out);

/** Options of kiln_dataset_from_idx(). */
typedef struct kiln_idx_options {
    size_t struct_size;          /**< sizeof(kiln_idx_options) */
    /** Each pixel is multiplied by this; 0: 1/255, so bytes map to [0, 1].
     *  Finite and at most FLT_MAX / 255, so every pixel stays finite. */
    float scale;
    /** Reads at most this many samples (0: all). */
    int64_t limit;
} kiln_idx_options;

/**
 * Reads an IDX image file and its IDX label file, as MNIST and
 * Fashion-MNIST ship them: plain (read a sample at a time with pread, so
 * the data stays in the page cache), or gzip-compressed (".gz", needs a
 * build with zlib; inflated once into memory). Pixels stay bytes
 * (KILN_DTYPE_UINT8) until a batch needs them; samples are (rows, cols, 1)
 * floats, labels sparse int32. KILN_ERROR_IO if a file cannot be opened or
 * read (also mid-training: a plain file cut short, naming it and the
 * sample), KILN_ERROR_FORMAT for a wrong magic number, a truncated file or
 * sizes that disagree, KILN_ERROR_UNSUPPORTED for a .gz file in a build
 * without zlib.
 */
KILN_API kiln_status kiln_dataset_from_idx(kiln_context *ctx, const char *images_path,
                                           const char *labels_path,
                                           const kiln_idx_options *options,
                                           kiln_dataset **out);

/** Number of samples. */
KILN_API kiln_status kiln_dataset_count(const kiln_dataset *dataset, int64_t *count);

/** A new dataset holding samples [start, start + count) of `dataset` (a
 *  copy). KILN_ERROR_INVALID_ARGUMENT if the range is out of bounds. */
KILN_API kiln_status kiln_dataset_subset(const kiln_dataset *dataset, int64_t start,
                                         int64_t count, kiln_dataset **out);

/** Accepts NULL. A subset keeps what it reads from alive: destroying the
 *  dataset it was cut from first is fine. */
KILN_API void kiln_dataset_destroy(kiln_dataset *dataset);

/** One sample's feature shape (rank and dims, dims room for KILN_MAX_RANK)
 *  and how the source stores it (dtype may be NULL). A dataset of several
 *  inputs (kiln_arrays_desc.inputs) gives the packed sample kiln_dataset_read
 *  gives: rank 1, the inputs' element counts summed. */
KILN_API kiln_status kiln_dataset_sample_shape(const kiln_dataset *dataset, int32_t *rank,
                                               int32_t *dims, kiln_dtype *dtype);

/** What the model receives of the dataset's features (unlike
 *  kiln_dataset_sample_shape's dtype, how a source stores them):
 *  KILN_DTYPE_FLOAT32, or KILN_DTYPE_INT32 for ids (kiln_arrays_desc.
 *  int_features, kiln_npy_options.ids, kiln_callback_desc.int_features),
 *  which only an Input declared with kiln_input_ints() takes. A dataset of
 *  several inputs says which all of them hold, and is
 *  KILN_ERROR_INVALID_ARGUMENT when some hold ids and some floats. */
KILN_API kiln_status kiln_dataset_feature_type(const kiln_dataset *dataset, kiln_dtype *type);

/** Where one sample goes: kiln_dataset_read() writes it there, and a
 *  kiln_sample_fn fills it. Typed as kiln_batch_arrays types a batch: the
 *  features as floats or as int32 ids, the labels as int32 class ids (sparse)
 *  or floats (dense). Sizes are the dataset's: features and int_features
 *  hold its sample's element count (kiln_dataset_sample_shape), the labels
 *  its label_size. The buffers belong to the caller (to kiln, for the
 *  callback's: valid during the call only).
 *
 *  A dataset of several inputs or outputs (kiln_arrays_desc.inputs and
 *  outputs, kiln_dataset_zip) gives its packed sample: the features are each
 *  input's values in turn, in `int_features` when every input holds ids,
 *  else in `features` with ids as int32 bits in their float slots (as
 *  kiln_dataset_sample_shape counts them); the labels are each output's in
 *  turn, in `sparse_labels` when every output's are sparse, else in
 *  `dense_labels` with sparse ids as int32 bits in their float slots. A
 *  model of several inputs takes them separately: kiln_batch_arrays.inputs
 *  and outputs, and kiln_dataset_zip's one dataset per input or output. */
typedef struct kiln_sample_buffers {
    size_t struct_size;          /**< sizeof(kiln_sample_buffers) (0: this header's) */
    /** Float features (kiln_dataset_feature_type KILN_DTYPE_FLOAT32). */
    float *features;
    /** Features of int32 ids (kiln_dataset_feature_type KILN_DTYPE_INT32). */
    int32_t *int_features;
    /** Sparse labels: label_size int32 class ids. */
    int32_t *sparse_labels;
    /** Dense labels: label_size floats. */
    float *dense_labels;
} kiln_sample_buffers;

/** Reads sample `index` as the model would get it in evaluation (scaled and
 *  mapped, never augmented) into `buffers` (a kiln_sample_buffers): each of
 *  its buffers may be NULL when not wanted, and `buffers` NULL reads and
 *  checks the sample and writes nothing. The buffers given must be of the
 *  dataset's kinds: `features` for float features and `int_features` for
 *  ids (kiln_dataset_feature_type), `sparse_labels` for sparse labels and
 *  `dense_labels` for dense ones (a dataset of several inputs or outputs:
 *  see kiln_sample_buffers); another kind is KILN_ERROR_INVALID_ARGUMENT
 *  naming what the dataset holds, as is a label asked of a dataset without
 *  labels (kiln_dataset_from_npy with labels_path NULL), an index outside
 *  [0, count) or a struct_size from 1 to sizeof(size_t) - 1. The sample's
 *  own errors are those of kiln_model_fit reading it (KILN_ERROR_DATA,
 *  KILN_ERROR_IO), naming the sample. */
KILN_API kiln_status kiln_dataset_read(const kiln_dataset *dataset, int64_t index,
                                       const kiln_sample_buffers *buffers);

/** Image folders and any source given class names: their number (0 when
 *  the dataset has none) and each name (valid while the dataset lives). */
KILN_API kiln_status kiln_dataset_class_count(const kiln_dataset *dataset, int32_t *count);
KILN_API kiln_status kiln_dataset_class_name(const kiln_dataset *dataset, int32_t index,
                                             const char **name);

/** Options of kiln_dataset_from_npy(). */
typedef struct kiln_npy_options {
    size_t struct_size;          /**< sizeof(kiln_npy_options) */
    /** Features become value * scale + offset, converted when a batch is
     *  gathered (a uint8 file stays uint8 in memory); 0: 1 (values as
     *  stored). Finite. */
    float scale;
    float offset;                /**< finite; default 0 */
    int64_t limit;               /**< reads at most this many samples (0: all) */
    /** Nonzero: the features are int32 ids for an Input of kiln_input_ints()
     *  (kiln_dataset_feature_type says KILN_DTYPE_INT32), read from an
     *  integer file (uint8, int8, uint16, int16, int32 or int64) as they
     *  are stored; a float file is KILN_ERROR_INVALID_ARGUMENT, as are a
     *  scale or offset. An int64 id that does not fit an int32 stops the
     *  read of its sample (KILN_ERROR_DATA naming the file, the sample and
     *  the element). */
    int32_t ids;
} kiln_npy_options;

/**
 * A dataset over NumPy .npy files (np.save's format, versions 1 to 3),
 * read in place: both files are read a sample at a time when a batch needs
 * it (with pread, so the data stays in the page cache and out of the
 * process's resident memory), and the labels are checked once at creation.
 * Features: C order, dtype uint8, int8, uint16, int16, int32, int64,
 * float16 or float32 (little-endian), samples first and 1 to KILN_MAX_RANK
 * dimensions per sample. Labels: a 1-D integer array (sparse class ids, >=
 * 0 and below 2^31: int64, np.save's default for integers, included), a
 * 2-D integer array (N, T) (T sparse ids per sample, one per output
 * position) or a 2-D float32 array (dense, one finite row per sample).
 * labels_path NULL makes a dataset of features alone, to read
 * (kiln_dataset_read with no label buffer) and feed
 * kiln_model_predict: kiln_model_fit, kiln_model_evaluate and a zip's
 * outputs refuse it, as does a read asking for a label
 * (KILN_ERROR_INVALID_ARGUMENT). KILN_ERROR_INVALID_ARGUMENT for
 * features_path or out NULL, a negative limit, a scale or offset not
 * finite (or set with ids). KILN_ERROR_IO when a file cannot be opened or
 * read (also mid-training: a file cut short, naming the file and the
 * sample); KILN_ERROR_FORMAT for a bad magic or header, a file shorter than
 * its shape needs (bytes after the data are ignored, as np.load ignores
 * them), features and labels of different counts; KILN_ERROR_SHAPE for
 * features without a sample dimension or labels of another rank;
 * KILN_ERROR_UNSUPPORTED for Fortran order, big-endian data or another
 * dtype; KILN_ERROR_DATA for no samples, a negative, non-finite or too
 * large label (naming the sample); each naming the file. Float features are checked for NaN and Inf as
 * batches are gathered (KILN_ERROR_DATA naming the sample).
 */
KILN_API kiln_status kiln_dataset_from_npy(kiln_context *ctx, const char *features_path,
                                           const char *labels_path,
                                           const kiln_npy_options *options,
                                           kiln_dataset **out);

/** Options of kiln_dataset_from_image_folder(). */
typedef struct kiln_image_folder_options {
    size_t struct_size;          /**< sizeof(kiln_image_folder_options) */
    /** Images are resized (bilinear) to this, >= 0; 0: 256 (Keras's
     *  image_size default, (256, 256)). */
    int32_t height;
    int32_t width;               /**< >= 0; 0: 256 */
    int32_t channels;            /**< 1 (grayscale) or 3 (RGB); 0: 3 */
    /** Pixels become value * scale + offset; 0: 1/255, so bytes map to
     *  [0, 1] (Keras has no such option and gives 0..255: set 1 for that). */
    float scale;
    float offset;                /**< added after scale; default 0 */
    /** Nonzero: an image that cannot be decoded, or a symbolic link whose
     *  target is missing or loops, is left out of its batch's place by
     *  reading the next sample of its class instead, and counted
     *  (kiln_dataset_skipped); 0: it stops fit with KILN_ERROR_FORMAT
     *  (KILN_ERROR_IO for the link) naming the file. A file that cannot be
     *  read otherwise (gone since the folder was listed) is never skipped. */
    int32_t skip_bad_images;
} kiln_image_folder_options;

/**
 * A dataset of the images under `folder`, one subfolder per class, as
 * keras.utils.image_dataset_from_directory reads them: class names are the
 * subfolders' names in sorted (byte) order, labels are their indices
 * (sparse), files (.png, .jpg, .jpeg, any case) are listed once, sorted,
 * and decoded when a batch needs them (libpng and libjpeg-turbo; a build
 * without one says so when such a file is read: KILN_ERROR_UNSUPPORTED).
 * Samples are (height, width, channels), resized with TensorFlow's
 * bilinear arithmetic (half-pixel centres, no antialiasing). Colour images
 * read as 1 channel are converted with TensorFlow's weights (0.299, 0.587,
 * 0.114); alpha is dropped; 16-bit PNGs are scaled to 8 bits with rounding.
 * The listing is Keras's: classes are the entries that are folders
 * (symbolic links followed) and do not start with '.'; a class's files are
 * its entries with an image extension, hidden ones (".a.png") included,
 * symbolic links too whether or not their target exists. Unlike Keras,
 * class folders are read flat (no nested folders) and special files
 * (FIFOs, devices) are left out. KILN_ERROR_IO when the folder cannot be
 * read; KILN_ERROR_DATA for a folder with no class subfolder, a class
 * folder with no image, naming it; an image that cannot be decoded stops
 * fit with KILN_ERROR_FORMAT naming the file, a dangling or looping link
 * with KILN_ERROR_IO naming it (or see skip_bad_images).
 */
KILN_API kiln_status kiln_dataset_from_image_folder(kiln_context *ctx, const char *folder,
                                                    const kiln_image_folder_options *options,
                                                    kiln_dataset **out);

/** Samples a source skipped so far (kiln_image_folder_options.skip_bad_images). */
KILN_API kiln_status kiln_dataset_skipped(const kiln_dataset *dataset, int64_t *count);

/**
 * Fills one sample for kiln_dataset_from_callback() into `buffers`, of
 * which exactly the fields of its dataset's kinds are set, the others NULL:
 * `features` (the sample's element count of floats) or, for
 * kiln_callback_desc.int_features, `int_features` (as many int32 ids); and
 * `sparse_labels` (label_size int32 class ids; label_size 1 by default) or,
 * for KILN_LABELS_DENSE, `dense_labels` (label_size floats). The buffers are
 * kiln's, valid during the call only. Return 0 on success; nonzero stops the
 * call using the dataset with KILN_ERROR_DATA naming the index and
 * `message` (room for message_size bytes; may be left empty). Called from
 * kiln's loader threads, several at once for different indices: it must be
 * safe to call concurrently (read-only shared state, or its own locking),
 * and must not call kiln on the model being trained, except
 * kiln_model_stop().
 */
typedef int (*kiln_sample_fn)(void *user, int64_t index, const kiln_sample_buffers *buffers,
                              char *message, size_t message_size);

/** An application's samples, for kiln_dataset_from_callback(). */
typedef struct kiln_callback_desc {
    size_t struct_size;          /**< sizeof(kiln_callback_desc) */
    int64_t count;               /**< number of samples, > 0 */
    int32_t feature_rank;        /**< 1..KILN_MAX_RANK */
    int32_t feature_dims[KILN_MAX_RANK];  /**< one sample's shape, e.g. {28, 28, 1} */
    kiln_label_kind label_kind;  /**< default sparse */
    /** KILN_LABELS_DENSE: floats per sample; KILN_LABELS_SPARSE: ids per
     *  sample, one per output position (0: 1). */
    int32_t label_size;
    kiln_sample_fn fill;         /**< required */
    void *user;                  /**< passed to fill */
    /** Sparse labels must be in [0, num_classes) (KILN_ERROR_DATA naming the
     *  index and position otherwise); 0: checked against the model's output
     *  only. */
    int32_t num_classes;
    /** Nonzero: the features are int32 ids for an Input of
     *  kiln_input_ints(): `fill` writes the sample's element count of
     *  int32 ids to buffers->int_features (buffers->features is NULL). */
    int32_t int_features;
} kiln_callback_desc;

/** A dataset whose samples the application fills on demand (Keras's
 *  PyDataset, PyTorch's map-style Dataset). Features and dense labels are
 *  checked for NaN and Inf as they arrive (KILN_ERROR_DATA naming the
 *  index). */
KILN_API kiln_status kiln_dataset_from_callback(kiln_context *ctx, const kiln_callback_desc *desc,
                                                kiln_dataset **out);

/** The datasets kiln_dataset_zip() joins: one per model input and one per
 *  output, in the model's orders. */
typedef struct kiln_zip_desc {
    size_t struct_size;          /**< sizeof(kiln_zip_desc) */
    /** 1..KILN_MAX_MODEL_INPUTS: input k's values are the features of
     *  inputs[k]. */
    int32_t n_inputs;
    const kiln_dataset *const *inputs;   /**< n_inputs datasets */
    /** 1..KILN_MAX_MODEL_OUTPUTS: output k's labels are the labels of
     *  outputs[k]. */
    int32_t n_outputs;
    const kiln_dataset *const *outputs;  /**< n_outputs datasets */
} kiln_zip_desc;

/**
 * A dataset for a model of several inputs or outputs from datasets of one
 * each (tf.data.Dataset.zip of ((x1, x2, ...), (y1, y2, ...))): sample i
 * holds input k's features from sample i of inputs[k] and output k's
 * labels from sample i of outputs[k]. Any dataset joins: .npy files,
 * callbacks, image folders, IDX files, host arrays and subsets of them (so
 * a .npy file of ids and one of floats, each with the same labels file,
 * feed a model of two inputs). A dataset may take several places; it is
 * read once per sample. Each is read through its own map and
 * augmentations (augmented in training when it feeds an input), and the
 * zip then behaves as kiln_dataset_from_arrays' several inputs and
 * outputs: kiln_dataset_read gives the packed sample, and fit checks each
 * array against its input or output (sparse ids before training, or as
 * they are read for a callback's; KILN_ERROR_DATA naming the sample, the
 * label array and the file that holds it). The zip holds
 * the datasets it joins: destroying them first is fine.
 * KILN_ERROR_INVALID_ARGUMENT for n_inputs or n_outputs out of range, and
 * for a dataset that is NULL, of another context, of another count than
 * inputs[0] or itself of several inputs (in inputs) or label arrays (in
 * outputs), naming its place (e.g. "outputs[1]").
 */
KILN_API kiln_status kiln_dataset_zip(kiln_context *ctx, const kiln_zip_desc *desc,
                                      kiln_dataset **out);

/**
 * Transforms one sample after it is read (tf.data's map), in place: the
 * features have the dataset's sample shape. Return 0 on success; nonzero
 * stops the call with KILN_ERROR_DATA naming the index and `message`.
 * Called from loader threads, concurrently: the same rules as
 * kiln_sample_fn.
 */
typedef int (*kiln_map_fn)(void *user, int64_t index, float *features, char *message,
                           size_t message_size);

/** Random augmentations applied to training batches only (never in
 *  evaluate or kiln_dataset_read), as Keras's preprocessing layers. Each
 *  sample's draws depend on (seed, epoch, sample index) alone: the same
 *  batches whatever the number of loader threads, and exact resume. Samples
 *  must be (height, width, channels). */
typedef struct kiln_augment_options {
    size_t struct_size;          /**< sizeof(kiln_augment_options) */
    int32_t flip_horizontal;     /**< nonzero: mirror left-right with probability 1/2 */
    int32_t flip_vertical;       /**< nonzero: mirror top-bottom with probability 1/2 */
    /** Shift by up to this fraction of the height / width, each way
     *  (RandomTranslation), filling with 0; in [0, 1). */
    float translate_height;
    float translate_width;       /**< as translate_height, for the width */
    /** Pad each side with this many zero pixels, then crop a random window
     *  of the original size (the CIFAR recipe); >= 0. */
    int32_t pad_crop;
    /** Add a random delta in [-brightness, brightness] to every value; >= 0. */
    float brightness;
    /** Scale each channel's deviation from its mean by a random factor in
     *  [1 - contrast, 1 + contrast] (RandomContrast); in [0, 1]. */
    float contrast;
    uint64_t seed;               /**< 0: derived from the context's seed */
} kiln_augment_options;

/** Sets the application's map (NULL: none) and the training augmentations
 *  (NULL: none) of a dataset; they apply to every later use of it. Map runs
 *  first, then augmentation. A dataset of ids takes neither (they work on
 *  float features): KILN_ERROR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_dataset_transform(kiln_dataset *dataset, kiln_map_fn map,
                                            void *map_user,
                                            const kiln_augment_options *augment);

/* ------------------------------------------------------------------------ */
/* ONNX export                                                              */
/* ------------------------------------------------------------------------ */

/**
 * Writes a compiled model as an ONNX file (opset 13, IR version 7) that
 * computes what kiln_model_predict computes: the layers on the path to the
 * output in inference mode (dropout the identity, batch normalization on
 * its moving statistics), with their current weights. The graph's input
 * and output are named after kiln's input and output layers and shaped as
 * kiln's, batch first and symbolic ("batch"), images NHWC; the file holds
 * transposes to ONNX's NCHW around convolutions, pooling and batch
 * normalization. Weight tensors are named "<layer>/<weight>" as in
 * kiln_model_save_weights (convolution kernels in ONNX's (F, C, kh, kw)).
 * Every layer kind and activation kiln has is exported (layer norm and
 * GELU, which opset 13 lacks, as the ops they are made of). The write is
 * atomic (a temporary file in the same folder, fsync'd and renamed; a
 * killed export's temporaries of `path` are removed first, as
 * kiln_model_save_weights does). The model is not changed; it is busy for
 * the call (KILN_ERROR_STATE, as kiln_model_get_weights).
 * KILN_ERROR_INVALID_ARGUMENT if path is NULL or empty, KILN_ERROR_STATE if
 * the model is not compiled, KILN_ERROR_UNSUPPORTED naming the layer for a
 * layer kind or activation with no ONNX form (one added to kiln later than
 * the exporter), when kiln was built without the meson feature "onnx" (the
 * message says so), or for weights past protobuf's 2 GiB; KILN_ERROR_IO
 * naming the path if it cannot be written (the file there, if any, is
 * then unchanged); KILN_ERROR_OUT_OF_MEMORY. A model of several outputs
 * has a graph output per output, in output order, named as its layer.
 */
KILN_API kiln_status kiln_model_export_onnx(kiln_model *model, const char *path);

/* ------------------------------------------------------------------------ */
/* Training, evaluation, prediction                                         */
/* ------------------------------------------------------------------------ */

typedef enum kiln_verbosity {
    KILN_VERBOSE_AUTO = 0,   /**< a live bar on a terminal, one line per epoch otherwise */
    KILN_VERBOSE_SILENT,
    KILN_VERBOSE_BAR,        /**< the live bar even when stderr is not a terminal */
    KILN_VERBOSE_EPOCH       /**< one line per epoch */
} kiln_verbosity;

typedef enum kiln_event {
    KILN_EVENT_BATCH_END = 0,
    KILN_EVENT_EPOCH_END
} kiln_event;

/** One output's loss and accuracy, in a model of several outputs. Unlike
 *  the other structs it has no struct_size and never grows: kiln_progress,
 *  kiln_metrics and kiln_epoch_record hold arrays of it, whose later fields
 *  would move. Values added per output later come as arrays of their own
 *  at the end of those structs. */
typedef struct kiln_output_metrics {
    /** The output's layer name: Keras logs "<name>_loss" and
     *  "<name>_accuracy" (and "val_" before them on validation data). */
    char name[64];
    double loss;                 /**< mean over the samples (positions for sequences) */
    double accuracy;             /**< negative when not computed */
} kiln_output_metrics;

/** What a callback sees. Loss and accuracy are running means over the epoch
 *  so far (as Keras reports them); accuracy is negative when not computed;
 *  val_* are set at KILN_EVENT_EPOCH_END when validation data was given. */
typedef struct kiln_progress {
    size_t struct_size;          /**< sizeof(kiln_progress) */
    kiln_event event;            /**< batch or epoch end */
    int32_t epoch;               /**< counts from 0 */
    int32_t epochs;              /**< of this fit */
    int64_t step;                /**< step within the epoch, counts from 1 */
    int64_t steps;               /**< steps in the epoch */
    double loss;                 /**< running mean over the epoch */
    double accuracy;             /**< running mean, negative when not computed */
    int32_t has_validation;      /**< val_* are set */
    double val_loss;             /**< at epoch end, with validation data */
    double val_accuracy;         /**< at epoch end, with validation data */
    double seconds;              /**< since the epoch started */
    /** Running means of the metrics kiln_compile_options asked for, and at
     *  epoch end their validation values; negative when not computed. */
    double top_k_accuracy;
    double mean_absolute_error;      /**< see top_k_accuracy */
    double binary_accuracy;          /**< see top_k_accuracy */
    double val_top_k_accuracy;       /**< see top_k_accuracy */
    double val_mean_absolute_error;  /**< see top_k_accuracy */
    double val_binary_accuracy;      /**< see top_k_accuracy */
    double learning_rate;            /**< of the last update */
    /** A model of several outputs: as kiln_epoch_record's fields of the
     *  same names (running means; val_outputs at epoch end). */
    int32_t n_outputs;
    kiln_output_metrics outputs[KILN_MAX_MODEL_OUTPUTS];      /**< see n_outputs */
    kiln_output_metrics val_outputs[KILN_MAX_MODEL_OUTPUTS];  /**< see n_outputs */
} kiln_progress;

/** What a kiln_callback_fn returns. */
typedef enum kiln_callback_result {
    KILN_CALLBACK_CONTINUE = 0,  /**< go on training */
    /** Stop with an error: fit returns KILN_ERROR_STOPPED (as any value other
     *  than these three does, which is what callbacks written before
     *  KILN_CALLBACK_STOP existed return). */
    KILN_CALLBACK_ABORT = 1,
    /** Stop as Keras's model.stop_training = True does: fit ends normally
     *  and returns KILN_OK; kiln_model_stop_reason says why it ended. At an
     *  epoch's end the epoch is in the history; after a step that leaves
     *  its epoch unfinished, that epoch is not (unlike Keras, which records
     *  the part it ran): the history holds whole epochs, as resuming from a
     *  checkpoint needs. */
    KILN_CALLBACK_STOP = 2
} kiln_callback_result;

/** Called after every training step and at every epoch's end; returns a
 *  kiln_callback_result. Runs inside kiln_model_fit, on the fitting thread:
 *  a call on the model being fit fails with KILN_ERROR_STATE, except the
 *  accessors that only read it (see "Threads" at the top of this header). */
typedef int (*kiln_callback_fn)(void *user, const kiln_progress *progress);

/** A LearningRateScheduler's schedule: the learning rate for epoch `epoch`
 *  (counting from 0; a resumed fit goes on counting) given the current one.
 *  Return a finite number >= 0. */
typedef double (*kiln_lr_schedule_fn)(void *user, int32_t epoch, double learning_rate);

/** The callbacks fit runs besides kiln_fit_options.callback, Keras's. */
typedef enum kiln_callback_kind {
    KILN_CALLBACK_NONE = 0,      /**< invalid: set a kind */
    /** The application's `function` (with `user`), as
     *  kiln_fit_options.callback but one of a list. */
    KILN_CALLBACK_FUNCTION,
    /** EarlyStopping: after an epoch whose `monitor` has not improved by
     *  more than |min_delta| on the best value for `patience` epochs in a
     *  row (0: the first such epoch; never at epoch 0), fit stops
     *  normally. The count restarts only on an epoch that also beats
     *  `baseline` when has_baseline is set (the stop reason then says how
     *  many of the epochs counted improved on the best). With
     *  restore_best_weights, fit ends (stopped or not) with the weights of
     *  the best epoch (the first monitored epoch's when none improved), the
     *  optimizer state kept, as Keras does. Epochs before start_from_epoch are not
     *  monitored. Reads monitor, mode, min_delta, patience, has_baseline,
     *  baseline, restore_best_weights, start_from_epoch. */
    KILN_CALLBACK_EARLY_STOPPING,
    /** ReduceLROnPlateau: when `monitor` has not improved by more than
     *  min_delta (0: 1e-4) for `patience` epochs (0: 10; 1 reduces at the
     *  first epoch without improvement), the learning rate becomes
     *  max(rate x factor, min_lr) (factor in (0, 1); 0: 0.1) unless it is
     *  min_lr or lower already; then `cooldown` epochs pass before the
     *  count starts again. Reads monitor, mode, min_delta, patience,
     *  factor, cooldown, min_lr. */
    KILN_CALLBACK_REDUCE_LR_ON_PLATEAU,
    /** ModelCheckpoint: at every epoch's end (with save_best_only, at the
     *  end of an epoch whose `monitor` beats every earlier one) saves to
     *  `path`, in which "{epoch}" (or "{epoch:02d}", a printf width) is the
     *  epoch counting from 1 and "{name}" (or "{name:.4f}") any monitorable
     *  value ("{{" and "}}" are braces): the weights
     *  (kiln_model_save_weights) with save_weights_only, else the training
     *  state (kiln_model_save_checkpoint). Atomic, on rank 0 only under
     *  multi_worker; the folder must exist. Reads path, monitor, mode,
     *  save_best_only, save_weights_only. */
    KILN_CALLBACK_MODEL_CHECKPOINT,
    /** LearningRateScheduler: before each epoch, the learning rate becomes
     *  schedule(user, epoch, current rate). Reads schedule, user. */
    KILN_CALLBACK_LEARNING_RATE_SCHEDULER,
    /** CSVLogger: one row per epoch in the file at `path`, as Keras writes
     *  it: a header "epoch" then the epoch's values' names in sorted order
     *  ("accuracy", "learning_rate", "loss", then the other metrics and the
     *  val_ ones; Keras has "learning_rate" only when a callback sets the
     *  rate, kiln always), rows with the epoch counting from 0 and each
     *  value as Python prints a float (0.25, 1e-05, 2.0), fields separated
     *  by `separator` (0: ','), lines ending in "\r\n". The file is replaced
     *  unless `append` (then rows are added, under a header only if the file
     *  is empty; a last line without its line end, a row cut by a killed
     *  writer, is removed first, with a warning). Each row is written whole
     *  in one write: one that fails (a full disk) is cut back to the last
     *  whole row and fit fails with KILN_ERROR_IO naming the file. Rank 0
     *  only under multi_worker. Reads path, separator, append. */
    KILN_CALLBACK_CSV_LOGGER,
    /** TerminateOnNaN: a step whose loss or gradient is NaN or infinite
     *  (never applied, as always) ends fit normally, its reason saying which
     *  step, instead of failing with KILN_ERROR_NUMERIC; the epoch it
     *  interrupted is not added to the history. Without it fit fails there,
     *  or with kiln_fit_options.skip_nonfinite skips the step and goes on
     *  (the two together are KILN_ERROR_INVALID_ARGUMENT). Reads nothing. */
    KILN_CALLBACK_TERMINATE_ON_NAN
} kiln_callback_kind;

/** Which way a monitored value improves. */
typedef enum kiln_monitor_mode {
    /** From the name: loss and mean_absolute_error down, accuracies up. */
    KILN_MONITOR_AUTO = 0,
    KILN_MONITOR_MIN,
    KILN_MONITOR_MAX
} kiln_monitor_mode;

/**
 * One callback of kiln_fit_options.callbacks: a kind and the options it
 * reads (each kind's doc lists them; any other field must be 0, else fit
 * returns KILN_ERROR_INVALID_ARGUMENT naming it). Zero fields take Keras's
 * defaults. Written with designated initialisers:
 *
 *     const kiln_callback_spec callbacks[] = {
 *         {.kind = KILN_CALLBACK_EARLY_STOPPING, .monitor = "val_loss",
 *          .patience = 3, .restore_best_weights = 1},
 *         {.kind = KILN_CALLBACK_CSV_LOGGER, .path = "training.csv"},
 *     };
 *
 * Monitorable names are those of the epoch's values: "loss", "accuracy"
 * (when computed), the metrics kiln_compile_options asked for
 * ("sparse_top_k_categorical_accuracy" or "top_k_categorical_accuracy",
 * "mean_absolute_error", "binary_accuracy"), and each with "val_" before it
 * when fit has validation data. Any other name, or one this fit will not
 * compute, is KILN_ERROR_INVALID_ARGUMENT at fit start, naming it (the model
 * unchanged). Epochs count as kiln_progress.epoch counts them: from 0 in
 * each fit, a resumed fit going on from its checkpoint's.
 */
typedef struct kiln_callback_spec {
    /** sizeof(kiln_callback_spec) (0: this header's): also the distance
     *  between elements of the array, so it must be the same in each. */
    size_t struct_size;
    kiln_callback_kind kind;     /**< required */
    const char *monitor;         /**< a monitorable name; NULL: "val_loss" */
    kiln_monitor_mode mode;      /**< default: from the name */
    /** Improvement needed: early stopping |min_delta| (default 0); reduce
     *  on plateau: 0 means 1e-4, any other value is used as is. */
    double min_delta;
    int32_t patience;            /**< epochs without improvement; see the kinds */
    int32_t has_baseline;        /**< early stopping: nonzero reads `baseline` */
    double baseline;             /**< early stopping: the value to beat */
    int32_t restore_best_weights;  /**< early stopping */
    int32_t start_from_epoch;    /**< early stopping: epochs not monitored, >= 0 */
    double factor;               /**< reduce on plateau, in (0, 1); 0: 0.1 */
    int32_t cooldown;            /**< reduce on plateau, >= 0 */
    double min_lr;               /**< reduce on plateau, >= 0 */
    /** Model checkpoint: the file name pattern; CSV logger: the file. */
    const char *path;
    int32_t save_best_only;      /**< model checkpoint */
    int32_t save_weights_only;   /**< model checkpoint */
    char separator;              /**< CSV logger; 0: ',' */
    int32_t append;              /**< CSV logger */
    kiln_callback_fn function;   /**< KILN_CALLBACK_FUNCTION: required */
    kiln_lr_schedule_fn schedule;  /**< learning rate scheduler: required */
    void *user;                  /**< passed to function or schedule */
} kiln_callback_spec;

/** Why the last kiln_model_fit ended before its last epoch
 *  (kiln_model_stop_reason). */
typedef enum kiln_stop_cause {
    KILN_STOP_NONE = 0,          /**< it ran every epoch (or failed: see its status) */
    KILN_STOP_EARLY_STOPPING,    /**< an EarlyStopping callback */
    KILN_STOP_TERMINATE_ON_NAN,  /**< a non-finite step under TerminateOnNaN */
    KILN_STOP_CALLBACK,          /**< an application callback returned KILN_CALLBACK_STOP */
    KILN_STOP_APPLICATION        /**< the application called kiln_model_stop() */
} kiln_stop_cause;

/** Options of kiln_model_fit(). As every options struct, a zeroed one
 *  (with struct_size set) is the defaults, Keras's: 1 epoch, batch 32,
 *  shuffled, automatic verbosity. */
typedef struct kiln_fit_options {
    size_t struct_size;          /**< sizeof(kiln_fit_options) */
    /** Number of epochs, >= 0; 0: Keras's default 1 (negative is an
     *  error). */
    int32_t epochs;
    /** Samples per step (the global batch, split across the replicas),
     *  >= 0; 0: per_replica_batch_size times the replicas when that is set,
     *  else Keras's default 32 (negative is an error). The last batch of an
     *  epoch holds what is left. */
    int32_t batch_size;
    int32_t no_shuffle;          /**< nonzero: keep dataset order */
    uint64_t shuffle_seed;       /**< 0: derived from the context's seed */
    const kiln_dataset *validation;  /**< evaluated after each epoch; may be NULL */
    kiln_verbosity verbosity;    /**< progress output on stderr */
    /** Called on the fitting thread at each step's and each epoch's end
     *  (see kiln_callback_fn); NULL: none. */
    kiln_callback_fn callback;
    void *callback_user;         /**< passed to callback */
    /** Folder for training checkpoints, "ckpt-<training step, 12 digits>
     *  .safetensors" (step 20 is "ckpt-000000000020.safetensors"), created
     *  with its parents if missing (NULL: no checkpoints). One writer saves
     *  them, whatever the number of replicas (rank 0 under multi_worker).
     *  A save writes "<name>.tmp-<pid>-<n>" and renames it; fit removes,
     *  and logs as a warning, such temporaries left by a killed save (their
     *  process is gone, or their step is older than the newest checkpoint),
     *  so that leftovers never fill the disk. */
    const char *checkpoint_dir;
    /** Save every this many training steps (0: not by steps). With gradient
     *  accumulation, only at the end of an accumulation cycle. */
    int64_t checkpoint_every_steps;
    int32_t checkpoint_every_epoch;  /**< nonzero: save after every epoch */
    int32_t keep_checkpoints;    /**< how many of the newest to keep; 0: 3 */
    /** Nonzero: first load the newest valid checkpoint in checkpoint_dir (a
     *  damaged one is skipped) and continue exactly where it was, mid-epoch
     *  included, with the same shuffled order; `epochs` is then the total to
     *  reach. Without a checkpoint, training starts afresh. */
    int32_t resume;
    /** A step whose loss or any parameter gradient is NaN or infinite never
     *  updates the parameters (a gradient can be NaN under a finite loss: a
     *  ReLU maps NaN to 0); nor does one whose update would leave a
     *  parameter or the optimizer's state NaN or infinite from a finite loss
     *  and gradients (Adam's squared gradient overflows past 1.8e19): the
     *  update is checked before it is made. By default fit then stops with
     *  KILN_ERROR_NUMERIC naming the step and which of the two went
     *  non-finite; nonzero: it skips the step, counts it
     *  (kiln_epoch_record.skipped_steps) and goes on, the parameters and
     *  optimizer state as they were before it. */
    int32_t skip_nonfinite;
    /** Keras's validation_split: the last fraction of the training samples,
     *  taken before shuffling, is held out and evaluated after each epoch
     *  instead of `validation` (which must then be NULL); in [0, 1). */
    float validation_split;
    /** Threads that read, decode and transform the next batches while the
     *  devices compute (0: the number of processors minus 1, at least 1;
     *  -1: none, each batch is read on the fitting thread when its step
     *  comes, with no prefetch, and no watchdog bounds the read); the
     *  batches are the same whatever the number. */
    int32_t loader_threads;
    /** Batches prepared ahead, at most (0: 2 per loader thread). 1 or more;
     *  memory is this many batches of host staging. */
    int32_t prefetch_batches;
    /** A training report to watch in a browser (NULL: none): one
     *  self-contained HTML file, with no script and nothing to fetch: inline
     *  SVG charts of the loss, accuracy, learning rate and throughput per
     *  epoch, training and validation; a table of the epochs; the run's
     *  settings, strategy, replicas, devices and model summary. Written at
     *  the start of fit, after every epoch and at the end (saying how fit
     *  ended), each time to "<path>.tmp-<pid>-<n>" renamed over `path`, so
     *  that a reader never sees half a page; rank 0 writes it under
     *  multi_worker. The folder must exist. A path that cannot be written
     *  fails fit with KILN_ERROR_IO naming it, before any training: a typo
     *  should not cost a long run its report. A later write that fails (a
     *  full disk) is logged as a warning and training goes on: the weights
     *  matter more than their picture. Each chart's curve carries its
     *  numbers exactly (data-epochs and data-values attributes, %.17g). */
    const char *report_path;
    /* Callbacks (Keras's fit(callbacks=[...])). */
    /** n_callbacks callbacks, run in order after `callback` at each step's
     *  and each epoch's end (the scheduler before each epoch); a stop asked
     *  for at an epoch's end comes after all of them ran. Read during the
     *  call only; NULL when n_callbacks is 0. Callbacks that set the
     *  learning rate (reduce on plateau, scheduler) need a constant
     *  compile-time rate (no schedule or warm-up: KILN_ERROR_INVALID_ARGUMENT,
     *  as Keras refuses to set a scheduled rate); the rate they set stays
     *  after fit and in checkpoints. Under multi_worker every rank runs them
     *  on the same global values, so all decide alike; under the parameter
     *  server across MPI processes those two and TerminateOnNaN are
     *  KILN_ERROR_UNSUPPORTED. Their state (best value, patience count)
     *  starts afresh with each fit, resumed or not. */
    const kiln_callback_spec *callbacks;
    int32_t n_callbacks;         /**< see callbacks; 0 to 64 */
    /** Samples each replica computes per step (TensorFlow's per-replica
     *  batch size); 0: not used, batch_size is the global batch. When > 0
     *  the global batch is this times the replicas that split each batch
     *  in sync: the devices for one_device (1), mirrored and
     *  central_storage; every process's replicas together under
     *  multi_worker (so each process's devices compute this many samples
     *  each). Strategies where a batch is not split across replicas count
     *  one: parameter_server (each worker trains whole batches, as in
     *  TensorFlow, whose ParameterServerStrategy counts one worker's
     *  devices as the replicas in sync) and pipeline (the stages together
     *  hold one replica of the model; micro-batches cut the global batch).
     *  batch_size must then be 0 or equal that global batch;
     *  KILN_ERROR_INVALID_ARGUMENT, naming both, when they disagree, when
     *  this is negative, or when the product exceeds INT32_MAX. Everything
     *  that reads batch_size (validation, checkpoints, the report) sees
     *  the global batch. */
    int32_t per_replica_batch_size;
} kiln_fit_options;

/**
 * Trains a compiled model. Each epoch shuffles (seeded) and visits every
 * sample once. Per-epoch metrics go to the history.
 * KILN_ERROR_STATE if not compiled; KILN_ERROR_INVALID_ARGUMENT for epochs
 * or batch_size < 0 (0 is the default), or a per_replica_batch_size that is
 * negative, overflows or disagrees with batch_size; KILN_ERROR_SHAPE if the
 * dataset's samples are not of the
 * input's shape (compared dimension by dimension: (2, 3) does not fit (6,)),
 * naming both shapes, or its dense labels are not as many floats as the
 * output, or its sparse labels not one id per output position (a (T,)
 * label sequence against an output of T' != T positions, or T > 1 ids
 * against a (classes,) output; naming the output and both shapes);
 * KILN_ERROR_INVALID_ARGUMENT for float features into an Input of
 * kiln_input_ints() or ids into a float Input; KILN_ERROR_DATA for a label
 * out of range, or an id outside its Embedding's input_dim (naming the
 * sample and the position; a label of a file source also names the file,
 * and of a zip the label array; both before training);
 * KILN_ERROR_NUMERIC when the loss or a gradient becomes NaN or Inf (naming
 * the step; the step is not applied, on every strategy);
 * KILN_ERROR_STOPPED if a callback returned KILN_CALLBACK_ABORT (or any
 * value but KILN_CALLBACK_CONTINUE and KILN_CALLBACK_STOP); KILN_ERROR_IO,
 * before training, when report_path or checkpoint_dir cannot be written,
 * and when a ModelCheckpoint or CSVLogger cannot write, naming the file;
 * KILN_ERROR_INVALID_ARGUMENT for a bad callback, before any step. A stop
 * that a callback asks for (KILN_CALLBACK_STOP, EarlyStopping,
 * TerminateOnNaN) ends fit normally: KILN_OK, the history holding the
 * epochs completed, and kiln_model_stop_reason says why.
 * KILN_ERROR_TIMEOUT when a replica stalls past the watchdog, or the data
 * loader's next batch does not come within it (naming the sample being
 * read; the model stays usable); device errors,
 * naming the replica, device and layer. After a replica failed or stalled,
 * the model only accepts
 * kiln_model_destroy (KILN_ERROR_STATE otherwise).
 */
KILN_API kiln_status kiln_model_fit(kiln_model *model, const kiln_dataset *train,
                                    const kiln_fit_options *options);

/** What kiln_model_evaluate() measured. */
typedef struct kiln_metrics {
    size_t struct_size;          /**< sizeof(kiln_metrics) */
    double loss;                 /**< mean over the samples (positions for sequences) */
    double accuracy;             /**< negative when not computed */
    int64_t samples;             /**< samples evaluated */
    /** The metrics kiln_compile_options asked for; negative when not computed. */
    double top_k_accuracy;
    double mean_absolute_error;  /**< see top_k_accuracy */
    double binary_accuracy;      /**< see top_k_accuracy */
    /** A model of several outputs: their count (0 for one output; `loss`
     *  is then the weighted total and `accuracy` negative) and each
     *  output's loss and accuracy, in output order. */
    int32_t n_outputs;
    kiln_output_metrics outputs[KILN_MAX_MODEL_OUTPUTS];  /**< see n_outputs */
} kiln_metrics;

/** Mean loss and accuracy over a dataset, in inference mode, in batches of
 *  `batch_size` (0: 32). The dataset is checked as by kiln_model_fit()
 *  (KILN_ERROR_SHAPE, KILN_ERROR_DATA). */
KILN_API kiln_status kiln_model_evaluate(kiln_model *model, const kiln_dataset *data,
                                         int32_t batch_size, kiln_metrics *out);

/** Host arrays for kiln_model_predict, kiln_model_train_on_batch,
 *  kiln_model_test_on_batch and kiln_model_predict_on_batch, typed as
 *  kiln_arrays_desc types a dataset's: each Input's values as floats or as
 *  int32 ids, each output's labels as int32 class ids (a sparse loss) or
 *  floats (the others). Exactly one of features, int_features and inputs
 *  is set, and for the training and test calls exactly one of
 *  sparse_labels, dense_labels and outputs (the predict calls take none). The arrays
 *  are read during the call only. */
typedef struct kiln_batch_arrays {
    size_t struct_size;          /**< sizeof(kiln_batch_arrays) */
    /** Samples, >= 1 (at most INT32_MAX for the *_on_batch calls). */
    int64_t count;
    /** A model of one float Input: count * its size floats. */
    const float *features;
    /** A model of one Input of ids (kiln_input_ints): count * its size ids. */
    const int32_t *int_features;
    /** A model of several Inputs: n_inputs arrays (the model's count), one
     *  per Input in input order, each with features or int_features as its
     *  Input takes and rank and dims its Input's shape (rank 0: not
     *  checked). 0: one Input, in the fields above. */
    int32_t n_inputs;
    const kiln_input_array *inputs;  /**< see n_inputs; NULL when it is 0 */
    /** A model of one output with a sparse loss: count * positions class
     *  ids (one per sample against a (classes,) output). */
    const int32_t *sparse_labels;
    /** A model of one output with a dense loss: count * output size floats. */
    const float *dense_labels;
    /** A model of several outputs: n_outputs label arrays (the model's
     *  count), one per output in output order, each with label_kind,
     *  sparse_labels or dense_labels as its loss takes (label_size 0 or
     *  the ids or floats per sample; num_classes 0 or an upper bound of the
     *  ids). 0: one output, in the fields above. */
    int32_t n_outputs;
    const kiln_label_array *outputs;  /**< see n_outputs; NULL when it is 0 */
} kiln_batch_arrays;

/** Runs the model on the `inputs->count` samples of `inputs` (a
 *  kiln_batch_arrays: each Input's features typed, floats or int32 ids, and
 *  no labels), in batches of `batch_size` (0: 32), and writes count *
 *  output size floats to `outputs` (a model of several outputs: each
 *  sample's outputs one after another, in output order). Each batch is
 *  packed when it runs, so the arrays are not copied whole. The statuses
 *  of kiln_batch_arrays as kiln_model_train_on_batch gives them (labels
 *  set: KILN_ERROR_INVALID_ARGUMENT), KILN_ERROR_INVALID_ARGUMENT for
 *  `outputs` NULL or a negative batch_size, KILN_ERROR_DATA, naming the
 *  sample, position, input and layer, for an id outside its Embedding
 *  (every id is checked before the first batch runs). */
KILN_API kiln_status kiln_model_predict(kiln_model *model, const kiln_batch_arrays *inputs,
                                        float *outputs, int32_t batch_size);

/* ------------------------------------------------------------------------ */
/* Custom training loops                                                    */
/* ------------------------------------------------------------------------ */

/** One training step on `batch` (kiln_batch_arrays), as fit would take
 *  it under the model's strategy (split across replicas, reduced, one
 *  optimizer update). The batch's mean loss and accuracy go to `out` (may
 *  be NULL). It counts as a training step for checkpoints and schedules
 *  and leaves fit's epoch position alone. KILN_ERROR_INVALID_ARGUMENT for
 *  `batch` NULL or of a struct_size too short, a count below 1, none or
 *  more than one of the features or of the labels set, or the wrong one:
 *  float features for an Input of ids or ids for a float Input, class ids
 *  for a loss of dense labels or floats for a sparse one (naming the
 *  Input or output), n_inputs or n_outputs other than the model's, a
 *  label array whose label_kind disagrees with the array it sets;
 *  KILN_ERROR_SHAPE for an input array's shape other than its Input's or a
 *  label array's label_size other than its output's; KILN_ERROR_DATA for
 *  a label out of range (of the output, or of a label array's
 *  num_classes), a non-finite float or an id outside its Embedding
 *  (naming the sample). A non-finite loss or gradient skips the update and returns
 *  KILN_ERROR_NUMERIC. The parameter server's asynchronous steps are
 *  waited for, so the result is this batch's. */
KILN_API kiln_status kiln_model_train_on_batch(kiln_model *model, const kiln_batch_arrays *batch,
                                               kiln_metrics *out);
/** The loss and accuracy of one batch in inference mode (no update); the
 *  batch and its statuses as kiln_model_train_on_batch's. */
KILN_API kiln_status kiln_model_test_on_batch(kiln_model *model, const kiln_batch_arrays *batch,
                                              kiln_metrics *out);
/** The outputs of one batch (count * output size floats), as predict; the
 *  batch's features as kiln_model_train_on_batch takes them, and no
 *  labels (KILN_ERROR_INVALID_ARGUMENT if some are set). */
KILN_API kiln_status kiln_model_predict_on_batch(kiln_model *model,
                                                 const kiln_batch_arrays *batch, float *outputs);

/** One epoch of a model's history. */
typedef struct kiln_epoch_record {
    size_t struct_size;          /**< sizeof(kiln_epoch_record) */
    double loss;                 /**< mean training loss over the epoch */
    double accuracy;             /**< mean training accuracy, negative when not computed */
    int32_t has_validation;      /**< val_* are set */
    double val_loss;             /**< on the validation data after the epoch */
    double val_accuracy;         /**< on the validation data after the epoch */
    double seconds;              /**< wall time of the epoch */
    int64_t samples;             /**< training samples seen */
    int64_t skipped_steps;       /**< non-finite steps skipped (skip_nonfinite) */
    /** Means over the epoch of the metrics kiln_compile_options asked for
     *  (top_k, mean_absolute_error, binary_accuracy), then the same on the
     *  validation data; negative when not computed. */
    double top_k_accuracy;
    double mean_absolute_error;      /**< see top_k_accuracy */
    double binary_accuracy;          /**< see top_k_accuracy */
    double val_top_k_accuracy;       /**< see top_k_accuracy */
    double val_mean_absolute_error;  /**< see top_k_accuracy */
    double val_binary_accuracy;      /**< see top_k_accuracy */
    /** The learning rate of the epoch's last update: the compile-time
     *  schedule's, or the one a callback set (see kiln_callback_spec). */
    double learning_rate;
    /** A model of several outputs: their count (else 0), and each output's
     *  means over the epoch, then on the validation data (when
     *  has_validation); loss is then the weighted total. */
    int32_t n_outputs;
    kiln_output_metrics outputs[KILN_MAX_MODEL_OUTPUTS];      /**< see n_outputs */
    kiln_output_metrics val_outputs[KILN_MAX_MODEL_OUTPUTS];  /**< see n_outputs */
} kiln_epoch_record;

/** Why the model's last fit ended before its last epoch: the cause (may be
 *  NULL) and a sentence ("EarlyStopping: val_loss did not improve for 2
 *  epoch(s) on its best, 0.4172 after epoch 3; training stopped after epoch
 *  5"; with a baseline not beaten, "EarlyStopping: val_loss did not improve
 *  on the baseline 0.4 for 5 epoch(s) (3 of them improved on the best,
 *  0.4172 after epoch 4); training stopped after epoch 5"), empty with
 *  KILN_STOP_NONE. kiln_model_evaluate() and kiln_model_predict() that
 *  kiln_model_stop() cut short leave their reason here too (an evaluate or
 *  predict that ran whole leaves the last fit's). `text`, `size` and
 *  `length` as kiln_model_summary's. fit's callbacks may call it. */
KILN_API kiln_status kiln_model_stop_reason(const kiln_model *model, kiln_stop_cause *cause,
                                            char *text, size_t size, size_t *length);

/** Asks the model's running kiln_model_fit(), kiln_model_evaluate() or
 *  kiln_model_predict() to stop, as Keras's model.stop_training = True
 *  does; callable from any thread, and from fit's callbacks. It only
 *  raises a flag and returns: it never waits, and never takes the model
 *  (it is not refused while another call is inside, unlike every other
 *  call on a model). The call honours it between steps:
 *  - fit ends after the step it is running (its callbacks run first) and
 *    returns KILN_OK, with kiln_model_stop_reason() giving
 *    KILN_STOP_APPLICATION and "kiln_model_stop: the application stopped
 *    training at epoch 2, step 5 of 8" (or "after epoch 2"). The history
 *    holds the whole epochs done; an epoch cut short is left out, as after
 *    KILN_CALLBACK_STOP (Keras records its part): its steps are applied to
 *    the weights and count for the optimizer and checkpoints, and a later
 *    fit with resume continues from the last checkpoint. Validation data is
 *    evaluated whole: a stop asked meanwhile takes effect after the epoch.
 *  - evaluate ends after the batch it is running and returns KILN_OK with
 *    the metrics of the samples done (kiln_metrics.samples says how many,
 *    fewer than the dataset's), as Keras's stop_evaluating does; the stop
 *    reason says "kiln_model_evaluate after 64 of 200 samples".
 *  - predict ends after its batch and returns KILN_ERROR_STOPPED, naming
 *    the samples whose outputs are written (the rest are not), since it
 *    has no count to give back; the stop reason says the same.
 *  A stop also ends fit's or evaluate's wait for the data loader's next
 *  batch (without waiting for a read still running, which is left to its
 *  thread as at the watchdog: see step_timeout_seconds).
 *  A request made while no call runs is dropped when the next one begins
 *  (as Keras's fit resets stop_training), so a later call runs normally. The model must
 *  stay alive (not destroyed) while this is called. Under an MPI strategy
 *  (multi_worker, parameter_server with parameter_store_ranks) each process
 *  stops on its own: call it in every process at the same step (as a
 *  callback deciding from the same values does), else the processes that
 *  go on fail at the watchdog with KILN_ERROR_TIMEOUT.
 *  @return KILN_OK; KILN_ERROR_INVALID_ARGUMENT for a NULL model. */
KILN_API kiln_status kiln_model_stop(kiln_model *model);

/** Number of epochs in the history (every fit appends its epochs). */
KILN_API kiln_status kiln_model_history_count(const kiln_model *model, int32_t *count);

/** Metrics of history epoch i (0 <= i < kiln_model_history_count). */
KILN_API kiln_status kiln_model_history_epoch(const kiln_model *model, int32_t i,
                                              kiln_epoch_record *record);

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                              */
/* ------------------------------------------------------------------------ */

/**
 * Saves the parameters of a compiled model as a safetensors file (readable
 * by PyTorch, NumPy and the safetensors tools): one F32 tensor per
 * parameter, named "<layer name>/<parameter>" ("conv2d/kernel",
 * "dense_1/bias"), with kiln's shapes (dense kernel (in, units), conv kernel
 * (kh, kw, C, F)). The write is atomic: a temporary file in the same folder
 * ("<path>.tmp-<pid>-<n>"), fsync'd and renamed, so an interrupted save
 * leaves the previous file whole. The temporaries of `path` that a killed
 * save left (their process is gone) are removed first, each logged as a
 * warning, so that leftovers never fill the disk; so do every other save
 * and ONNX export, and ModelCheckpoint's.
 * KILN_ERROR_STATE if not compiled, KILN_ERROR_INVALID_ARGUMENT if path is
 * NULL or empty, KILN_ERROR_IO if the file cannot be written (the message
 * names the path and the system's reason).
 */
KILN_API kiln_status kiln_model_save_weights(kiln_model *model, const char *path);

/**
 * Saves the full training state: the parameters as kiln_model_save_weights
 * does, the optimizer state as "optimizer/<layer>/<parameter>/m" and "/v"
 * (Adam, AdamW), "/momentum" (SGD with momentum), "/velocity", "/momentum"
 * (with momentum) and "/average_gradient" (centered) (RMSprop) or
 * "/accumulator" (Adagrad), and in __metadata__ kiln's
 * format version, the model fingerprint, the optimizer and its settings, the
 * optimizer step, the epoch and step within it, the shuffle seed and the
 * history (for a model of several outputs, each output's values and sums
 * too), and the model's description as kiln_model_save writes it. Atomic as
 * above. A model that cannot be described (see kiln_model_save) gets no
 * checkpoint: the save fails as kiln_model_save does and writes nothing.
 */
KILN_API kiln_status kiln_model_save_checkpoint(kiln_model *model, const char *path);

/**
 * Loads parameters from a safetensors file written by kiln or another tool:
 * every parameter of the model must be there as an F32 tensor of the right
 * shape. KILN_ERROR_SHAPE lists every missing, misshapen, mistyped or
 * unexpected tensor by name; KILN_ERROR_FORMAT for a malformed file;
 * KILN_ERROR_IO. Optimizer tensors in the file are ignored. The model's
 * parameters are unchanged on failure.
 */
KILN_API kiln_status kiln_model_load_weights(kiln_model *model, const char *path);

/**
 * Loads a file written by kiln_model_save_checkpoint, under any strategy or
 * device count: parameters, optimizer state, optimizer step, history and
 * position in the epoch, so that fit with resume continues exactly.
 * KILN_ERROR_DATA if the file is for another model (fingerprint) or
 * optimizer, plus the errors of kiln_model_load_weights.
 */
KILN_API kiln_status kiln_model_load_checkpoint(kiln_model *model, const char *path);

/* ------------------------------------------------------------------------ */
/* Model files                                                              */
/* ------------------------------------------------------------------------ */

/** The version of the model description kiln_model_save writes; the newest
 *  kiln_model_load reads. */
#define KILN_MODEL_FILE_VERSION 1

/**
 * Saves a compiled model whole: a safetensors file holding the weights as
 * kiln_model_save_weights writes them, and in __metadata__ under
 * "kiln.model" a JSON description of the model: its format version, every
 * layer's kind, name, options (as its builder took them, defaults filled
 * in), inputs (by name), activation, device placement and trainability,
 * the output layer, and what compile was given that decides training: the
 * loss, whether accuracy is computed, gradient accumulation and the
 * optimizer with all its settings and schedule (not the strategy, devices
 * or replicas, which belong to the machine that loads it). Checkpoints
 * (kiln_model_save_checkpoint, fit's checkpoint folder) carry the same
 * description. Atomic as kiln_model_save_weights. KILN_ERROR_STATE if not
 * compiled, KILN_ERROR_INVALID_ARGUMENT for a NULL or empty path, a layer
 * name that is not UTF-8 or a number that is not finite (naming it),
 * KILN_ERROR_IO naming the path. A model of several
 * outputs keeps them, in order, with each one's loss and weight.
 */
KILN_API kiln_status kiln_model_save(kiln_model *model, const char *path);

/** Options of kiln_model_save_with(); NULL or all zero: kiln_model_save's. */
typedef struct kiln_save_options {
    size_t struct_size;          /**< sizeof(kiln_save_options) */
    /** Nonzero: LoRA's adapters (kiln_model_enable_lora) stay apart in the
     *  file, as checkpoints keep them: the base kernels as they were, A and B
     *  under their names, and each LoRA layer's rank, alpha and chosen
     *  targets in the description ("lora": {"rank", "alpha", "targets"},
     *  targets only where kiln_model_enable_lora_with chose them), so that
     *  kiln_model_load rebuilds the LoRA model (base kernels frozen, adapters trainable) and
     *  training continues where it stopped (an optimizer's state is a
     *  checkpoint's, not a model file's). 0 (the default): the kernels hold
     *  W + (alpha/rank)·A·B and the layers load as plain ones. A model
     *  without LoRA writes the same file either way. */
    int32_t keep_lora_adapters;
} kiln_save_options;

/** kiln_model_save with options (NULL: defaults). Its errors, and
 *  KILN_ERROR_INVALID_ARGUMENT for an options struct_size that is nonzero
 *  and smaller than a size_t. */
KILN_API kiln_status kiln_model_save_with(kiln_model *model, const char *path,
                                          const kiln_save_options *options);

/**
 * Makes a new model from a file written by kiln_model_save or a checkpoint:
 * rebuilds the layers through the builders, compiles with the file's loss,
 * optimizer and training settings, and loads the weights (a checkpoint's
 * optimizer state and training position are left out: continue training
 * with kiln_model_load_checkpoint on the result). The strategy, replicas and
 * the other settings of the machine come from `options` (NULL: defaults;
 * its loss and optimizer are ignored when the file has them). The file's
 * device placements are applied when `options` leave the strategy at auto
 * or pipeline, and ignored under any other. The model predicts exactly as
 * the saved one did. On failure *out is NULL and nothing is left behind:
 * KILN_ERROR_IO when the file cannot be read; KILN_ERROR_FORMAT for a
 * malformed file or description (naming what and where), a description
 * that disagrees with the file's tensors (naming the tensor and both
 * shapes), or a file of weights without a description (as
 * kiln_model_save_weights writes); KILN_ERROR_UNSUPPORTED for a
 * description newer than KILN_MODEL_FILE_VERSION (naming both versions) or
 * a layer kind this kiln does not know; KILN_ERROR_INVALID_ARGUMENT for a
 * placement on a device the context lacks; and the errors of
 * kiln_model_compile. The caller owns *out.
 */
KILN_API kiln_status kiln_model_load(kiln_context *ctx, const char *path,
                                     const kiln_compile_options *options, kiln_model **out);

/* ------------------------------------------------------------------------ */
/* ONNX import                                                              */
/* ------------------------------------------------------------------------ */

/** The size of a named dynamic dimension of an ONNX graph's input (its
 *  dim_param), for kiln_import_options. */
typedef struct kiln_import_dim {
    const char *name;            /**< the dim_param, e.g. "height" */
    int64_t size;                /**< its size, > 0 */
} kiln_import_dim;

/** Options of kiln_model_import_onnx(); NULL means all defaults. */
typedef struct kiln_import_options {
    size_t struct_size;          /**< sizeof(kiln_import_options) */
    /** The sizes of the inputs' dynamic dimensions other than the batch (an
     *  input's first dimension is always the batch, whatever it is named or
     *  sized): each named dimension must be found here. */
    const kiln_import_dim *dims;
    int32_t n_dims;              /**< entries in dims */
    /** The folder external-data files are named relative to:
     *  kiln_model_import_onnx's default is the model file's folder;
     *  kiln_model_import_onnx_buffer refuses external data without it. */
    const char *base_folder;
    /** Nonzero: every BatchNormalization imports with
     *  kiln_batch_norm_options.synchronized set, so that under a
     *  data-parallel strategy it normalises with the global batch's
     *  statistics and trains as on one device (PyTorch's
     *  SyncBatchNorm.convert_sync_batchnorm). Zero: each replica its own
     *  shard's, as Keras's BatchNormalization. */
    int32_t synchronized_batch_norm;
} kiln_import_options;

/**
 * Builds a model from an ONNX inference graph (opsets 11 to 18, IR 6 to 9),
 * as a builder would: the model is not compiled (compile it with a loss and
 * an optimizer, after adding a head or freezing layers if you like), and
 * its parameters start at the graph's initializers, converted to kiln's
 * layouts once. The ops and attributes kiln imports are listed in
 * docs/importing.md.
 *
 * The model takes each input as the graph declares it (an image in ONNX's
 * NCHW order, as ONNX Runtime and PyTorch are fed) and writes its outputs
 * in ONNX's order; kiln computes channels-last inside and converts where
 * the graph's values change layout. Every layer is named after its ONNX
 * node (a node without a name, after its first output); each parameter
 * keeps its initializer's name in kiln_model_get_tensor(), weight files,
 * model files and checkpoints; an Identity of an initializer is a
 * parameter of its own named after the Identity's output.
 *
 * On failure *out is NULL: KILN_ERROR_IO when the file or an external-data
 * file cannot be read; KILN_ERROR_FORMAT for bytes that are not an ONNX
 * model, a truncated file, an initializer whose data disagrees with its
 * shape, an external-data file shorter than its entry, a graph with a cycle
 * or an input no node makes (naming it); KILN_ERROR_UNSUPPORTED naming the
 * op and the node for an op kiln does not import, naming the attribute, its
 * value and what is supported for an attribute it does not, naming the
 * versions for an IR or opset outside the range, and naming the
 * initializer and both nodes for an initializer two nodes use directly
 * (kiln cannot tie parameters); KILN_ERROR_INVALID_ARGUMENT for a NULL
 * argument, a dynamic dimension without its size in `options` (naming the
 * input and the dimension), and external data in a buffer without a
 * base_folder; KILN_ERROR_SHAPE for shapes that do not fit together
 * (naming the node); KILN_ERROR_OUT_OF_MEMORY. `options` and `path` are not
 * kept. The caller owns *out.
 */
KILN_API kiln_status kiln_model_import_onnx(kiln_context *ctx, const char *path,
                                            const kiln_import_options *options,
                                            kiln_model **out);

/** kiln_model_import_onnx() from `size` bytes in memory (not kept). */
KILN_API kiln_status kiln_model_import_onnx_buffer(kiln_context *ctx, const void *data,
                                                   size_t size,
                                                   const kiln_import_options *options,
                                                   kiln_model **out);

/** The node of the layer named `name` (an imported model's ONNX node
 *  names, or a builder's names), for building on it (a new head) or
 *  passing it to kiln_model_set_output(). KILN_ERROR_INVALID_ARGUMENT
 *  naming it when no layer has that name (*node is then
 *  KILN_NODE_INVALID), or for a NULL argument. */
KILN_API kiln_status kiln_model_find_layer(const kiln_model *model, const char *name,
                                           kiln_node *node);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
