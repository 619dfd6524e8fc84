"""ONNX files for test_import.c's refusals and name checks, written with
ONNX's own helpers (Debian's python3-onnx; PyTorch for the attention
models alone):

    make_bad_models.py OUTDIR

Each NAME.onnx is a small graph, X (N, 2, 4, 4) -> Conv 3x3 -> Relu ->
Flatten -> Gemm (N, 3), changed in one way (the comment above each says
how). Exits 77 when onnx is missing."""
import os
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("onnx is not installed for /usr/bin/python3 (Debian: python3-onnx)")
    sys.exit(77)


def init(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)


def graph(nodes=None, inits=None, dims=("N", 2, 4, 4), extra_nodes=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    if nodes is None:
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[0, 0, 0, 0]),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"),
                 helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
                 helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    if inits is None:
        inits = [init("w", (3, 2, 3, 3), 1), init("b", (3,), 2), init("fc_w", (3, 12), 3),
                 init("fc_b", (3,), 4)]
    return helper.make_graph(list(nodes) + list(extra_nodes), "g", [x], [y], inits)


def save(outdir, name, g, opset=17, ir=8):
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    onnx.save(m, os.path.join(outdir, name + ".onnx"))


def between(out):
    """Graphs of one node between the Conv and the Flatten (or two, the
    second reading the first's output) that kiln refuses."""
    def one(name, *nodes, consts=()):
        chain = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv")] + list(nodes)
        chain += [helper.make_node("Flatten", [nodes[-1].output[0]], ["f"], name="flatten"),
                  helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
        inits = [init("w", (3, 2, 3, 3), 1), init("b", (3,), 2), init("fc_w", (3, 12), 3),
                 init("fc_b", (3,), 4)]
        inits += [numpy_helper.from_array(np.array(v), k) for k, v in consts]
        save(out, name, graph(nodes=chain, inits=inits))

    node = helper.make_node
    # ReduceMean over the batch and H; over every axis (no axes); ReduceSum
    # over axes the graph computes.
    one("reduce_axes", node("ReduceMean", ["c"], ["r"], name="mean", axes=[0, 2]))
    one("reduce_all", node("ReduceMean", ["c"], ["r"], name="mean"))
    one("reduce_computed_axes", node("ReduceSum", ["c", "c"], ["r"], name="sum"))
    # Softmax and LogSoftmax over the batch.
    one("softmax_axis", node("Softmax", ["c"], ["r"], name="soft", axis=0))
    one("log_softmax_axis", node("LogSoftmax", ["c"], ["r"], name="logsoft", axis=-4))
    # LayerNormalization over the batch too; over C, H and W with a Scale
    # broadcast from (C, 1, 1); over W with stash_type 0.
    one("layer_norm_axis", node("LayerNormalization", ["c", "scale"], ["r"], name="ln", axis=0),
        consts=[("scale", np.ones((3, 2, 2), np.float32))])
    one("layer_norm_broadcast", node("LayerNormalization", ["c", "scale"], ["r"], name="ln",
                                     axis=1),
        consts=[("scale", np.ones((3, 1, 1), np.float32))])
    one("layer_norm_stash", node("LayerNormalization", ["c", "scale"], ["r"], name="ln",
                                 stash_type=0),
        consts=[("scale", np.ones((2,), np.float32))])
    # Pads kiln refuses: reflected, of 1, on the channels (test_import's
    # pad_conv and pad_layer import the others).
    pads = ("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    w2 = ("w2", np.ones((3, 3, 1, 1), np.float32))
    one("pad_reflect", node("Pad", ["c", "pads"], ["p"], name="pad", mode="reflect"),
        node("Conv", ["p", "w2"], ["r"], name="conv2"), consts=[pads, w2])
    one("pad_value", node("Pad", ["c", "pads", "one"], ["p"], name="pad"),
        node("Conv", ["p", "w2"], ["r"], name="conv2"),
        consts=[pads, w2, ("one", np.array(1.0, np.float32))])
    one("pad_channels", node("Pad", ["c", "pads"], ["p"], name="pad"),
        node("Conv", ["p", "w2"], ["r"], name="conv2"),
        consts=[w2, ("pads", np.array([0, 1, 1, 1, 0, 0, 1, 1], np.int64))])
    # Integer arithmetic on computed values (kiln folds it on constants).
    one("slice_batch", node("Slice", ["c", "zero", "one"], ["r"], name="slice"),
        consts=[("zero", np.array([0], np.int64)), ("one", np.array([1], np.int64))])
    # Shape ops on the computed (N, 3, 2, 2) that kiln refuses: a MatMul of
    # vectors, one whose inner dimensions differ, Squeeze of the batch and
    # of an axis of 3, an Unsqueeze past 5 dimensions, an empty Slice,
    # Gather at uneven and at computed indices, Splits unequal and not
    # adding up, Expand of the batch and of an axis of 3 to 4, Where of
    # constants of two shapes.
    ints = lambda name, v: (name, np.array(v, np.int64))
    one("matmul_vectors", node("Flatten", ["c"], ["f2"], name="flat2"),
        node("MatMul", ["f2", "f2"], ["r"], name="mm"))
    one("matmul_inner", node("Reshape", ["c", "rows"], ["rs"], name="rows"),
        node("MatMul", ["rs", "rs"], ["r"], name="mm"), consts=[ints("rows", [0, 3, 4])])
    one("squeeze_batch", node("Squeeze", ["c", "axes"], ["r"], name="sq"),
        consts=[ints("axes", [0])])
    one("squeeze_long", node("Squeeze", ["c", "axes"], ["r"], name="sq"),
        consts=[ints("axes", [1])])
    one("unsqueeze_rank", node("Unsqueeze", ["c", "axes"], ["r"], name="unsq"),
        consts=[ints("axes", [1, -1])])
    one("slice_empty", node("Slice", ["c", "s", "e", "a"], ["r"], name="slice"),
        consts=[ints("s", [5]), ints("e", [9]), ints("a", [2])])
    one("gather_uneven", node("Gather", ["c", "i"], ["r"], name="take", axis=1),
        consts=[ints("i", [0, 2, 1])])
    one("gather_computed", node("Gather", ["c", "c"], ["r"], name="take", axis=1))
    one("split_unequal", node("Split", ["c"], ["r", "r2"], name="split", axis=1))
    one("split_sum", node("Split", ["c", "sizes"], ["r", "r2"], name="split", axis=1),
        consts=[ints("sizes", [1, 1])])
    one("expand_batch", node("Expand", ["c", "shape"], ["r"], name="ex"),
        consts=[ints("shape", [2, 3, 2, 2])])
    one("expand_axis", node("Expand", ["c", "shape"], ["r"], name="ex"),
        consts=[ints("shape", [1, 4, 2, 2])])
    # Integer Div folded on constants: by zero, and of the batch (Shape of
    # a computed value), which has no value at import.
    one("div_zero", node("Div", ["s", "z"], ["q"], name="div"),
        node("Reshape", ["c", "q"], ["r"], name="rs"), consts=[ints("s", [0, 12]),
                                                              ints("z", [1, 0])])
    one("div_batch", node("Shape", ["c"], ["sh"], name="shape"),
        node("Div", ["sh", "two"], ["q"], name="div"),
        node("Reshape", ["c", "q"], ["r"], name="rs"), consts=[ints("two", [2])])
    # Expand of an initializer, which kiln imports as LearnedTokens only
    # when it repeats a (1, ...) initializer over the batch: to a fixed
    # first entry; repeating axis 1 too; a Constant node's value; 4-D.
    token = lambda shape: ("k", np.linspace(-1, 1, int(np.prod(shape)),
                                            dtype=np.float32).reshape(shape))
    one("tokens_not_batch", node("Expand", ["k", "shape"], ["e"], name="ex"),
        node("Reshape", ["e", "rows"], ["e2"], name="rows"),
        node("Add", ["c", "e2"], ["r"], name="add"),
        consts=[token((1, 3, 4)), ints("shape", [2, 3, 4]), ints("rows", [2, 3, 2, 2])])
    one("tokens_axis", node("Shape", ["c"], ["sh"], name="shape"),
        node("Slice", ["sh", "zero", "two"], ["sh2"], name="first2"),
        node("Concat", ["sh2", "four"], ["to"], name="to", axis=0),
        node("Expand", ["k", "to"], ["e"], name="ex"),
        node("Reshape", ["e", "back"], ["e2"], name="back"),
        node("Add", ["c", "e2"], ["r"], name="add"),
        consts=[token((1, 1, 4)), ints("zero", [0]), ints("two", [2]), ints("four", [4]),
                ints("back", [0, 3, 2, 2])])
    one("tokens_constant_node",
        node("Constant", [], ["k"], name="const",
             value=numpy_helper.from_array(np.ones((1, 12), np.float32))),
        node("Shape", ["c"], ["sh"], name="shape"),
        node("Slice", ["sh", "zero", "one"], ["n"], name="batch"),
        node("Concat", ["n", "twelve"], ["to"], name="to", axis=0),
        node("Expand", ["k", "to"], ["e"], name="ex"),
        node("Reshape", ["e", "back"], ["e2"], name="back"),
        node("Add", ["c", "e2"], ["r"], name="add"),
        consts=[ints("zero", [0]), ints("one", [1]), ints("twelve", [12]),
                ints("back", [0, 3, 2, 2])])
    one("tokens_4d", node("Shape", ["c"], ["sh"], name="shape"),
        node("Expand", ["k", "sh"], ["e"], name="ex"),
        node("Add", ["c", "e"], ["r"], name="add"), consts=[token((1, 3, 2, 2))])
    one("where_shapes", node("Where", ["cond", "s", "e"], ["w"], name="where"),
        node("Reshape", ["c", "w"], ["r"], name="rs"),
        consts=[ints("cond", [1, 0]), ints("s", [0, 12, 1]), ints("e", [0, 12])])
    # Broadcasts kiln refuses: shapes that do not broadcast; a constant
    # with a batch axis of 2; a computed value of a lower rank (its batch
    # would meet H); two constants; an initializer two nodes would train;
    # an attribute (opset 6's broadcast); an empty input.
    one("mul_no_broadcast", node("Mul", ["c", "k"], ["r"], name="mul"),
        consts=[("k", np.ones((3, 1, 5), np.float32))])
    one("add_batch_constant", node("Add", ["c", "k"], ["r"], name="add"),
        consts=[("k", np.ones((2, 3, 2, 2), np.float32))])
    one("sub_lower_rank", node("Flatten", ["c"], ["fl"], name="flat"),
        node("Sub", ["c", "fl"], ["r"], name="sub"))
    one("div_constants", node("Div", ["k", "k2"], ["q"], name="div"),
        node("Mul", ["c", "q"], ["r"], name="mul"),
        consts=[("k", np.ones((3, 1, 1), np.float32)), ("k2", np.ones(1, np.float32))])
    one("mul_tied", node("Mul", ["c", "k"], ["m"], name="mul"),
        node("Add", ["m", "k"], ["r"], name="add"),
        consts=[("k", np.ones((3, 1, 1), np.float32))])
    one("max_attribute", node("Max", ["c", "c"], ["r"], name="max", broadcast=1))
    # An Add whose second input is empty (ONNX's absent optional input; the
    # fuzzer's mutation that crashed the importer).
    one("add_empty_input", node("Add", ["c", ""], ["r"], name="add"))
    # Pow by a computed exponent, and by one of 3 values (broadcast over
    # the channels); Clip of a computed bound, of bounds of 2 values and of
    # a NaN bound; HardSigmoid of alpha 0 and beta 0.
    one("pow_computed", node("Pow", ["c", "c"], ["r"], name="pow"))
    one("pow_tensor", node("Pow", ["c", "e"], ["r"], name="pow"),
        consts=[("e", np.array([1.0, 2.0, 3.0], np.float32).reshape(3, 1, 1))])
    one("clip_computed", node("Clip", ["c", "c"], ["r"], name="clip"))
    one("clip_two", node("Clip", ["c", "lo"], ["r"], name="clip"),
        consts=[("lo", np.array([0.0, 1.0], np.float32))])
    one("clip_nan", node("Clip", ["c", "", "hi"], ["r"], name="clip"),
        consts=[("hi", np.array(np.nan, np.float32))])
    one("hard_sigmoid_zero", node("HardSigmoid", ["c"], ["r"], name="hard", alpha=0.0,
                                  beta=0.0))
    # Training-form BatchNormalization whose running mean a node reads.
    stats = [("s", np.ones(3, np.float32)), ("bb", np.zeros(3, np.float32)),
             ("m", np.zeros(3, np.float32)), ("v", np.ones(3, np.float32))]
    one("bn_stats_read", node("BatchNormalization", ["c", "s", "bb", "m", "v"],
                              ["n", "running_mean", "running_var"], name="bn", training_mode=1),
        node("Add", ["n", "running_mean"], ["r"], name="add"), consts=stats)
    # GlobalMaxPool of a 2-D value.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    # Gemm's transA 1 (A's batch axis read as features), alpha 0 (B would
    # not count; alpha and beta otherwise import, test_import), and A an
    # initializer with B the graph's value (a product over the batch).
    for name, gemm, ins in (("gemm_trans_a", dict(transA=1), ["x", "gw", "gb"]),
                            ("gemm_alpha_zero", dict(alpha=0.0), ["x", "gw", "gb"]),
                            ("gemm_const_a", dict(transB=1), ["gw", "x", "gb"])):
        nodes = [helper.make_node("Gemm", ins, ["y"], name="gemm", **gemm)]
        save(out, name, helper.make_graph(nodes, "g", [x], [y], [init("gw", (4, 4), 8),
                                                              init("gb", (4,), 9)]))
    # Gemm's C as one row (1, 4), which imports, and as one value, which a
    # trained bias of 4 values would not stay.
    for name, shape in (("gemm_row_bias", (1, 4)), ("gemm_scalar_bias", (1,))):
        nodes = [helper.make_node("Gemm", ["x", "gw", "gb"], ["y"], name="gemm", transB=1)]
        save(out, name, helper.make_graph(nodes, "g", [x], [y], [init("gw", (4, 4), 8),
                                                              init("gb", shape, 9)]))
    nodes = [helper.make_node("GlobalMaxPool", ["x"], ["y"], name="gmp")]
    save(out, "global_max_2d", helper.make_graph(nodes, "g", [x], [y], []))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # The graph as it should be.
    save(out, "good", graph())
    # The input's H and W are named dimensions.
    save(out, "dynamic", graph(dims=("N", 2, "height", 4)))
    # IR 3 and opset 10: outside what kiln reads.
    save(out, "old_ir", graph(), ir=3)
    save(out, "old_opset", graph(), opset=10)
    # Conv's bias holds 2 floats where its shape says 3.
    bad = init("b", (3,), 2)
    bad.raw_data = bad.raw_data[:8]
    save(out, "short_initializer", graph(inits=[init("w", (3, 2, 3, 3), 1), bad,
                                                init("fc_w", (3, 12), 3), init("fc_b", (3,), 4)]))
    # Relu reads Flatten's output, which reads Relu's.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Add", ["c", "f2"], ["r"], name="loop_add"),
             helper.make_node("Relu", ["r"], ["f2"], name="loop_relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "cycle", graph(nodes=nodes))
    # An op kiln does not know.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Mystery", ["c"], ["r"], name="odd_one"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "unknown_op", graph(nodes=nodes))
    # A dilated max pool (kiln pools contiguous windows only).
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("MaxPool", ["c"], ["r"], name="pool", kernel_shape=[1, 1],
                              dilations=[2, 2]),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "dilated", graph(nodes=nodes))
    # Clip to (0, 1): neither ReLU6 nor ReLU, kiln_math's clip.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Clip", ["c", "lo", "hi"], ["r"], name="clip"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    bounds = [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(1.0, np.float32), "hi")]
    save(out, "clip_bounds", graph(nodes=nodes, inits=[init("w", (3, 2, 3, 3), 1),
                                                        init("b", (3,), 2),
                                                        init("fc_w", (3, 12), 3),
                                                        init("fc_b", (3,), 4)] + bounds))
    # A Transpose that moves the batch (kiln keeps it first).
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Transpose", ["c"], ["t"], name="swap_batch", perm=[1, 0, 2, 3]),
             helper.make_node("Flatten", ["t"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "transpose_batch", graph(nodes=nodes))
    # Gemm's weight in an external-data file (written whole, and short).
    fc_w = init("fc_w", (3, 12), 3)
    data = fc_w.raw_data
    for name, length in (("external", len(data)), ("external_short", len(data) - 8),
                         ("external_missing", None)):
        t = init("fc_w", (3, 12), 3)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        location = name + ".bin"
        for key, value in (("location", location), ("offset", "4")):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        if length is not None:
            with open(os.path.join(out, location), "wb") as f:
                f.write(b"\0" * 4 + data[:length])
        save(out, name, graph(inits=[init("w", (3, 2, 3, 3), 1), init("b", (3,), 2), t,
                                     init("fc_b", (3,), 4)]))
    # A Relu of an initializer: kiln takes computed values there.
    nodes = [helper.make_node("Relu", ["w"], ["rw"], name="relu_of_weight"),
             helper.make_node("Conv", ["x", "rw", "b"], ["c"], name="conv"),
             helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "constant_input", graph(nodes=nodes))
    # A parameter name longer than kiln keeps (95 bytes).
    long_name = "w" * 120
    nodes = [helper.make_node("Conv", ["x", long_name, "b"], ["c"], name="conv"),
             helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "long_name", graph(nodes=nodes, inits=[init(long_name, (3, 2, 3, 3), 1),
                                                     init("b", (3,), 2), init("fc_w", (3, 12), 3),
                                                     init("fc_b", (3,), 4)]))
    # A node name longer than kiln's layer names (63 bytes), as deep
    # PyTorch networks have: imported under a shortened name.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="/block" * 12 + "/Conv"),
             helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "long_node", graph(nodes=nodes))
    # Dropout with its ratio as a constant input (opset 12 on): imports; a
    # ratio of 1 does not.
    for name, ratio in (("dropout", 0.3), ("dropout_one", 1.0)):
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
                 helper.make_node("Dropout", ["c", "ratio"], ["r"], name="drop"),
                 helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
                 helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
        save(out, name, graph(nodes=nodes, inits=[
            init("w", (3, 2, 3, 3), 1), init("b", (3,), 2), init("fc_w", (3, 12), 3),
            init("fc_b", (3,), 4), numpy_helper.from_array(np.array(ratio, np.float32),
                                                           "ratio")]))
    # LeakyRelu of an infinite slope.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("LeakyRelu", ["c"], ["r"], name="leaky", alpha=float("inf")),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "leaky_slope", graph(nodes=nodes))
    between(out)
    # Lookups kiln refuses: a double input; a Gather of the table on axis
    # 1; a 3-D table; ids that pass a Relu (kiln's Embedding reads an
    # Input's ids directly).
    def lookup(name, node, table_shape=(10, 4), kind=TensorProto.INT64, after=None):
        ids = helper.make_tensor_value_info("ids", kind, ["N", 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4])
        nodes = ([after] if after else []) + [node]
        save(out, name, helper.make_graph(nodes, "g", [ids], [y], [init("table", table_shape, 5)]))
    gather = helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")
    lookup("ids_double", gather, kind=TensorProto.DOUBLE)
    lookup("ids_axis", helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup", axis=1))
    lookup("ids_table_3d", gather, table_shape=(10, 4, 2))
    lookup("ids_computed", helper.make_node("Gather", ["table", "r"], ["y"], name="lookup"),
           after=helper.make_node("Identity", ["ids"], ["r"], name="copy"))
    # A bool input read by anything but nn.MultiheadAttention's key_padding_mask.
    flags = helper.make_tensor_value_info("flags", TensorProto.BOOL, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    save(out, "bool_input", helper.make_graph(
        [helper.make_node("Cast", ["flags"], ["y"], name="as_float", to=TensorProto.FLOAT)],
        "g", [flags], [y]))
    # What the importer's fuzz target found: a node without inputs, an
    # attribute without a name, an initializer without a name.
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", [], ["r"], name="no_input"),
             helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "no_input", graph(nodes=nodes))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[0, 0, 0, 0]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    nodes[0].attribute[0].name = ""
    save(out, "unnamed_attribute", graph(nodes=nodes))
    unnamed = init("b", (3,), 2)
    unnamed.ClearField("name")
    save(out, "unnamed_initializer", graph(inits=[init("w", (3, 2, 3, 3), 1), unnamed,
                                                  init("fc_w", (3, 12), 3),
                                                  init("fc_b", (3,), 4)]))
    # ConvTranspose (W (2, 3, 3, 3): 2 channels in, 3 out), each way kiln
    # refuses, and output_shape that crops evenly (imported, (3, 8, 8)).
    for name, attrs in (("convt_auto_pad", dict(auto_pad="SAME", strides=[2, 2])),
                        ("convt_output_padding", dict(strides=[2, 2], output_padding=[2, 0])),
                        ("convt_group", dict(group=3)),
                        ("convt_kernel_shape", dict(kernel_shape=[2, 2])),
                        ("convt_big_shape", dict(strides=[2, 2], output_shape=[12, 8])),
                        ("convt_three_values", dict(output_padding=[0, 0, 0])),
                        ("convt_output_shape", dict(strides=[2, 2], output_padding=[1, 1],
                                                    output_shape=[8, 8]))):
        nodes = [helper.make_node("ConvTranspose", ["x", "wt", "b"], ["c"], name="up", **attrs),
                 helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
                 helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
        save(out, name, graph(nodes=nodes, inits=[init("wt", (2, 3, 3, 3), 1),
                                                  init("b", (3,), 2),
                                                  init("fc_w", (3, 3 * 8 * 8), 3),
                                                  init("fc_b", (3,), 4)]))
    # ConvTranspose of a ramp X (N, 1, 3, 3) by a kernel of ones (1, 1, 3,
    # 3) at stride 2, its output the graph's: auto_pad SAME_UPPER and
    # SAME_LOWER, output_shape cropping an odd pixel, and output_shape past
    # the full output (test_import_errors holds ONNX Runtime's outputs).
    ones = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "ones")
    for name, size, attrs in (("convt_upper", 6, dict(auto_pad="SAME_UPPER")),
                              ("convt_lower", 6, dict(auto_pad="SAME_LOWER")),
                              ("convt_odd_shape", 6, dict(output_shape=[6, 6])),
                              ("convt_past_shape", 8, dict(output_shape=[8, 8]))):
        node = helper.make_node("ConvTranspose", ["x", "ones"], ["y"], name="up", strides=[2, 2],
                                **attrs)
        save(out, name, helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 3, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, size, size])],
            [ones]))
    # A 1-D ConvTranspose: X (N, 2, 4), W (2, 3, 3).
    nodes = [helper.make_node("ConvTranspose", ["x", "wt", "b"], ["c"], name="up"),
             helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    save(out, "convt_1d", graph(nodes=nodes, dims=("N", 2, 4),
                                inits=[init("wt", (2, 3, 3), 1), init("b", (3,), 2),
                                       init("fc_w", (3, 18), 3), init("fc_b", (3,), 4)]))
    # Two Gemms reading one weight directly: a tied parameter.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    two = [helper.make_node("Gemm", ["x", "shared", "bias1"], ["h"], name="first", transB=1),
           helper.make_node("Gemm", ["h", "shared", "bias2"], ["y"], name="second", transB=1)]
    inits = [init("shared", (4, 4), 5), init("bias1", (4,), 6), init("bias2", (4,), 7)]
    save(out, "tied", helper.make_graph(two, "g", [x], [y], inits))
    # The same weight through two Identity copies, as PyTorch 1.13 writes
    # equal initializers: each copy is a parameter of its own.
    copies = [helper.make_node("Identity", ["shared"], ["first.weight"], name="copy1"),
              helper.make_node("Identity", ["shared"], ["second.weight"], name="copy2"),
              helper.make_node("Gemm", ["x", "first.weight", "bias1"], ["h"], name="first",
                               transB=1),
              helper.make_node("Gemm", ["h", "second.weight", "bias2"], ["y"], name="second",
                               transB=1)]
    save(out, "copies", helper.make_graph(copies, "g", [x], [y], inits))
    attention_near_misses(out)


def attention_near_misses(out):
    """nn.MultiheadAttention's exported block changed so that kiln's
    MultiHeadAttention cannot compute it (PyTorch exports these; where torch
    is missing they are not written, and test_import_errors says so):
    attention_scale, the query scaled by 1/3 where d = 4 asks 1/2;
    attention_mask, an attn_mask of random floats (kiln takes a causal one);
    attention_padded_mask, a key_padding_mask with an attn_mask beside it;
    attention_kdim_vdim, cross-attention with kdim 6 and vdim 4 (key and
    value different tensors, which kiln's layer projects from one input);
    attention_kv_apart, kdim = vdim = 6, key and value different tensors."""
    try:
        import torch
    except ImportError:
        return

    class Attention(torch.nn.Module):
        def __init__(self, mask=None):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
            self.mask = mask

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False, attn_mask=self.mask)[0]

    class Padded(Attention):
        def forward(self, x, pad):
            return self.attn(x, x, x, need_weights=False, attn_mask=self.mask,
                             key_padding_mask=pad)[0]

    torch.manual_seed(3)
    for name, model in (("attention_scale", Attention()),
                        ("attention_mask", Attention(torch.randn(5, 5)))):
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(model.eval(), torch.randn(2, 5, 8), path, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
        if name == "attention_scale":   # the Constant 2.0 = sqrt(4) the query is divided by
            m = onnx.load(path)
            for n in m.graph.node:
                if n.op_type == "Constant" and n.attribute[0].t.data_type == TensorProto.FLOAT:
                    if numpy_helper.to_array(n.attribute[0].t).tolist() == 2.0:
                        n.attribute[0].t.CopyFrom(numpy_helper.from_array(
                            np.array(3.0, np.float32)))
            onnx.save(m, path)
    class Separate(torch.nn.Module):
        def __init__(self, kdim, vdim):
            super().__init__()
            self.to_k = torch.nn.Linear(8, kdim)
            self.to_v = torch.nn.Linear(8, vdim)
            self.attn = torch.nn.MultiheadAttention(8, 2, kdim=kdim, vdim=vdim,
                                                    batch_first=True)

        def forward(self, x):
            k = torch.tanh(self.to_k(x))[:, 1:4]
            v = torch.tanh(self.to_v(x))[:, 1:4]
            return self.attn(x, k, v, need_weights=False)[0]

    for name, model in (("attention_kdim_vdim", Separate(6, 4)),
                        ("attention_kv_apart", Separate(6, 6))):
        torch.onnx.export(model.eval(), torch.randn(2, 5, 8), os.path.join(out, name + ".onnx"),
                          opset_version=17, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    pad = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.bool)
    torch.onnx.export(Padded(torch.randn(5, 5)).eval(), (torch.randn(2, 5, 8), pad),
                      os.path.join(out, "attention_padded_mask.onnx"), opset_version=17,
                      input_names=["x", "pad"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "pad": {0: "batch"}, "y": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


if __name__ == "__main__":
    main()
