/* What docs/importing.md says kiln's importer takes, as
 * test_onnx_conformance.c reads it: the ops it claims, and the documented
 * limits under which a refusal is a skip rather than a failure. An op that
 * starts to be imported is one line in conformance_ops; a documented limit
 * one line in conformance_limits. */
#ifndef KILN_TEST_CONFORMANCE_CLAIMS_H
#define KILN_TEST_CONFORMANCE_CLAIMS_H

/* An op of docs/importing.md's table. data_inputs: how many of a node's
 * first inputs are values the graph computes (-1: all of them); the rest
 * are weights, which ONNX's node tests pass as graph inputs and the runner
 * turns into initializers. */
typedef struct conformance_op {
    const char *op;
    int data_inputs;
} conformance_op;

static const conformance_op conformance_ops[] = {
    {.op = "Conv", .data_inputs = 1},
    {.op = "ConvTranspose", .data_inputs = 1},
    {.op = "BatchNormalization", .data_inputs = 1},
    {.op = "Gemm", .data_inputs = 1},
    {.op = "MatMul", .data_inputs = 1},
    {.op = "MaxPool", .data_inputs = 1},
    {.op = "AveragePool", .data_inputs = 1},
    {.op = "GlobalAveragePool", .data_inputs = 1},
    {.op = "Relu", .data_inputs = 1},
    {.op = "LeakyRelu", .data_inputs = 1},
    {.op = "Sigmoid", .data_inputs = 1},
    {.op = "Tanh", .data_inputs = 1},
    {.op = "Softmax", .data_inputs = 1},
    {.op = "Clip", .data_inputs = 1},
    {.op = "Dropout", .data_inputs = 1},
    {.op = "Add", .data_inputs = -1},
    {.op = "Sub", .data_inputs = -1},
    {.op = "Mul", .data_inputs = -1},
    {.op = "Div", .data_inputs = -1},
    {.op = "Max", .data_inputs = -1},
    {.op = "Min", .data_inputs = -1},
    {.op = "Concat", .data_inputs = -1},
    {.op = "Identity", .data_inputs = 1},
    {.op = "Constant", .data_inputs = 0},
    {.op = "Cast", .data_inputs = 1},
    {.op = "Flatten", .data_inputs = 1},
    {.op = "Reshape", .data_inputs = 1},
    {.op = "Pad", .data_inputs = 1},
    {.op = "Transpose", .data_inputs = 1},
    {.op = "GlobalMaxPool", .data_inputs = 1},
    {.op = "ReduceMean", .data_inputs = 1},
    {.op = "LogSoftmax", .data_inputs = 1},
    {.op = "ReduceSum", .data_inputs = 1},
    {.op = "ReduceMax", .data_inputs = 1},
    {.op = "ReduceMin", .data_inputs = 1},
    {.op = "LayerNormalization", .data_inputs = 1},
    {.op = "HardSigmoid", .data_inputs = 1},
    {.op = "HardSwish", .data_inputs = 1},
    {.op = "Sqrt", .data_inputs = 1},
    {.op = "Reciprocal", .data_inputs = 1},
    {.op = "Neg", .data_inputs = 1},
    {.op = "Abs", .data_inputs = 1},
    {.op = "Exp", .data_inputs = 1},
    {.op = "Log", .data_inputs = 1},
    {.op = "Erf", .data_inputs = 1},
    {.op = "Pow", .data_inputs = 1},
    {.op = "Squeeze", .data_inputs = 1},
    {.op = "Unsqueeze", .data_inputs = 1},
    {.op = "Slice", .data_inputs = 1},
    {.op = "Split", .data_inputs = 1},
    {.op = "Gather", .data_inputs = 1},
    {.op = "Expand", .data_inputs = 1},
};

/* A refusal docs/importing.md documents: an import that fails with
 * KILN_ERROR_UNSUPPORTED, on a test of `op` (NULL: any), whose message
 * holds `needle` is skipped for `reason`. Any other failure fails. */
typedef struct conformance_limit {
    const char *op;
    const char *needle;
    const char *reason;
} conformance_limit;

static const conformance_limit conformance_limits[] = {
    /* What kiln reads */
    {.op = NULL, .needle = "kiln imports float (1) inputs",
     .reason = "a graph input not of float"},
    {.op = NULL, .needle = "is not a tensor of known rank",
     .reason = "a graph input not a tensor (optional, sequence)"},
    {.op = NULL, .needle = "has 1 dimensions; kiln imports 2 to",
     .reason = "a 1-D graph input (the batch alone)"},
    {.op = NULL, .needle = "kiln imports float (1), int32 (6), int64 (7), bool (9) and double",
     .reason = "an initializer of another type (float16, int8, string)"},
    {.op = NULL, .needle = "kiln imports a node's first output only",
     .reason = "a second output read (a mask, indices, training statistics)"},
    {.op = NULL, .needle = "the graph has no input but its initializers",
     .reason = "no graph input: nothing computed"},
    /* The op table */
    {.op = "Conv", .needle = "kiln imports 2-D convolutions",
     .reason = "1-D or 3-D convolution (2-D only)"},
    {.op = "ConvTranspose", .needle = "kiln imports 2-D transposed convolutions",
     .reason = "1-D or 3-D transposed convolution (2-D only)"},
    {.op = "BatchNormalization", .needle = "kiln supports 2-D (N, C) and 4-D",
     .reason = "3-D or 5-D input (2-D and 4-D only)"},
    {.op = "Gemm", .needle = "attribute 'transA' is", .reason = "transA 1"},
    {.op = "Gemm", .needle = "attributes 'alpha'", .reason = "alpha 0, or alpha or beta not finite"},
    {.op = "Gemm", .needle = "kiln supports a bias of one value per output",
     .reason = "C not one value per output (a matrix or a broadcast scalar)"},
    {.op = "MatMul", .needle = "kiln supports a 2-D weight", .reason = "B of 3 or more dimensions"},
    {.op = "MaxPool", .needle = "kiln pools 4-D (N, C, H, W) values",
     .reason = "1-D or 3-D pooling (2-D only)"},
    {.op = "MaxPool", .needle = "attribute 'dilations' is",
     .reason = "dilations other than 1"},
    {.op = "AveragePool", .needle = "kiln pools 4-D (N, C, H, W) values",
     .reason = "1-D or 3-D pooling (2-D only)"},
    {.op = "Pow", .needle = "kiln raises to one constant exponent",
     .reason = "an exponent of more than one value (a tensor, broadcast)"},
    {.op = "Softmax", .needle = "the batch; kiln's softmax stays within a sample",
     .reason = "over the batch (axis 0)"},
    {.op = "LogSoftmax", .needle = "the batch; kiln's softmax stays within a sample",
     .reason = "over the batch (axis 0)"},
    /* ReduceMean, ReduceSum, ReduceMax, ReduceMin */
    {.op = NULL, .needle = "every axis reduced, the batch (axis 0) too; kiln reduces within",
     .reason = "no axes: every axis reduced, the batch too"},
    {.op = NULL, .needle = "is the batch (axis 0); kiln reduces within a sample",
     .reason = "a reduction over the batch (axis 0)"},
    {.op = NULL, .needle = "values along the batch axis; kiln broadcasts constants over the batch",
     .reason = "a constant operand of Add/Sub/Mul/Div/Max/Min with the batch's size on axis 0"},
    {.op = "Concat", .needle = "must name an axis of a sample", .reason = "the batch axis"},
    {.op = "Flatten", .needle = "kiln supports 1 (the batch kept)", .reason = "axis other than 1"},
    {.op = "Reshape", .needle = "kiln keeps the batch first",
     .reason = "a shape that does not keep the batch first"},
    {.op = "Reshape", .needle = "kiln reshapes to 2 to",
     .reason = "a shape that does not keep the batch first"},
    {.op = "Reshape", .needle = "Reshape reads allowzero 0", .reason = "allowzero 1"},
    {.op = "Cast", .needle = "kiln folds a cast of a constant to float",
     .reason = "a cast of a computed value (constants only)"},
    {.op = "Pad", .needle = "kiln pads with zeros only",
     .reason = "a fill value other than 0"},
    {.op = "Pad", .needle = "kiln pads in mode 'constant' only",
     .reason = "mode reflect or edge"},
    {.op = "Transpose", .needle = "that keeps the batch (axis 0) first",
     .reason = "a perm that moves the batch, or none (the axes reversed)"},
    {.op = NULL, .needle = "is the batch; kiln",
     .reason = "Squeeze, Unsqueeze, Gather or Split on axis 0 (the batch)"},
    {.op = NULL, .needle = "kiln holds values of 2 to",
     .reason = "a result of more than 5 dimensions (kiln's samples have up to 4)"},
    {.op = NULL, .needle = "kiln holds no empty values",
     .reason = "an empty slice or split part"},
    {.op = "Slice", .needle = "kiln keeps the batch whole",
     .reason = "a slice of axis 0 (the batch, whose length kiln does not know at import)"},
    {.op = "Gather", .needle = "do not step evenly",
     .reason = "indices of a computed value that are not evenly spaced"},
    {.op = "Gather", .needle = "must be a scalar or 1-D integer constant",
     .reason = "indices of 2 or more dimensions"},
    {.op = "Expand", .needle = "would put axes before the batch",
     .reason = "a shape of higher rank than the value (new axes before the batch)"},
    {.op = "Expand", .needle = "kiln keeps the batch as it is",
     .reason = "a shape whose first entry is not 1 (the batch, whose length kiln does not "
               "know at import)"},
};

#endif
