#!/bin/sh
# kiln fit, and .onnx files wherever the kiln tool takes MODEL, on the
# backbone tools/pretrain_fashion.py wrote (test/data/onnx/
# fashion_backbone.onnx) and random images: --help names every option and
# its default; summary of an .onnx; predict on it against a NumPy
# (float64) forward pass of the same graph; evaluate with --loss and
# --from-logits; fit with a new head on a frozen backbone (history lines,
# the frozen weights unchanged), the saved file's summary, predict, and its
# ONNX export predicting the same; fit again on that model file; with
# --no-shuffle, one epoch is exactly N/B SGD steps in order (a Gemm's
# weights against NumPy's); and each bad option, exit 2 or 1 naming it.
# Usage: cli_fit.sh SOURCE_DIR KILN
set -eu
src=$1
kiln=$2
python=${KILN_PYTHON:-/usr/bin/python3}
. "$src/test/common/missing.sh"
"$python" -c "import numpy, onnx" 2> /dev/null ||
    skip_missing "NumPy and ONNX's Python package are not installed (python3-numpy, python3-onnx)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_fit.sh: $*" >&2; exit 1; }
net=$src/test/data/onnx/fashion_backbone.onnx

expect() {   # expect STATUS NEEDLE COMMAND...
    want=$1 needle=$2
    shift 2
    if "$@" > "$work/out.txt" 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" = "$want" ] || { cat "$work/out.txt"; fail "$* exited $rc, not $want"; }
    grep -qF -- "$needle" "$work/out.txt" || { cat "$work/out.txt"; fail "$*: no '$needle'"; }
}

# --help: every option of fit, with its default where it has one.
"$kiln" fit --help > "$work/help.txt"
for needle in "kiln fit MODEL FEATURES.npy LABELS.npy --save OUT" "--epochs N         default 1" \
    "--batch N          samples per step (default 32)" "--no-shuffle" \
    "sparse_categorical_crossentropy" \
    "(default), categorical_crossentropy, binary_crossentropy, mse" \
    "--from-logits" "--optimizer NAME   adam (default) or sgd" \
    "--learning-rate R  default: adam 0.001, sgd 0.01" \
    "--momentum M       sgd only, in [0, 1) (default 0)" \
    "--nesterov" "--validation-split F" "default 0" "--freeze PREFIX" \
    "--head UNITS --head-from NODE" \
    "--strategy NAME    one_device (default) or mirrored" "--seed S" "--scale S" "(default 1)"; do
    grep -qF -- "$needle" "$work/help.txt" || fail "kiln fit --help: no '$needle'"
done

"$python" - "$work" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(5)
np.save(d + "/x.npy", rng.uniform(0, 1, (40, 1, 28, 28)).astype(np.float32))
np.save(d + "/y.npy", rng.integers(0, 5, 40))
PY

# summary of an ONNX file: its layers as imported, no loss (not compiled).
"$kiln" summary "$net" > "$work/summary.txt"
grep -q "^/Flatten (flatten)  *(None, 128)" "$work/summary.txt" ||
    fail "summary of .onnx: no /Flatten"
grep -q "^Loss" "$work/summary.txt" && fail "summary of .onnx shows a loss"

# predict on the ONNX file (NCHW, as the graph declares) against NumPy.
"$kiln" predict "$net" "$work/x.npy" "$work/logits.npy"
"$python" - "$net" "$work" <<'PY' || fail "predict of .onnx differs from NumPy's forward pass"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
g = onnx.load(sys.argv[1]).graph
w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
eps = {n.input[1].rsplit(".", 1)[0]: n.attribute[[a.name for a in n.attribute].index("epsilon")].f
       for n in g.node if n.op_type == "BatchNormalization"}
def conv(x, k, stride):
    n, c, h, wd = x.shape
    o, _, s, _ = k.shape
    p = s // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ho, wo = (h + 2 * p - s) // stride + 1, (wd + 2 * p - s) // stride + 1
    out = np.zeros((n, o, ho, wo))
    for i in range(s):
        for j in range(s):
            patch = xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
            out += np.einsum("nchw,oc->nohw", patch, k[:, :, i, j])
    return out
def bn(x, name):
    sh = (1, -1, 1, 1)
    return np.maximum((x - w[name + ".running_mean"].reshape(sh)) /
                      np.sqrt(w[name + ".running_var"].reshape(sh) + eps[name]) *
                      w[name + ".weight"].reshape(sh) + w[name + ".bias"].reshape(sh), 0)
x = np.load(sys.argv[2] + "/x.npy").astype(np.float64)
x = bn(conv(x, w["features.0.weight"], 1), "features.1")
n, c, h, wd = x.shape
x = x.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
x = bn(conv(x, w["features.4.weight"], 1), "features.5")
x = bn(conv(x, w["features.7.weight"], 2), "features.8")
x = bn(conv(x, w["features.10.weight"], 1), "features.11")
want = x.mean(axis=(2, 3)) @ w["fc.weight"].T + w["fc.bias"]
got = np.load(sys.argv[2] + "/logits.npy")
worst = float(np.abs(got - want).max() / np.abs(want).max())
print("predict of .onnx: largest difference from NumPy (float64) %.2e of the largest logit" % worst)
assert got.shape == (40, 5) and got.dtype == np.float32, got.shape
sys.exit(0 if worst < 1e-5 else 1)
PY

# evaluate of an ONNX file: --loss, and --from-logits's softmax.
"$kiln" evaluate "$net" "$work/x.npy" "$work/y.npy" --from-logits > "$work/eval.txt"
grep -q "^samples: 40$" "$work/eval.txt" && grep -q "^accuracy: " "$work/eval.txt" ||
    { cat "$work/eval.txt"; fail "evaluate of .onnx"; }
expect 1 "KILN_ERROR_SHAPE" "$kiln" evaluate "$net" "$work/x.npy" "$work/y.npy" \
    --loss binary_crossentropy

# fit: a new head on the frozen backbone, mirrored on two devices when
# there are two.
strategy=one_device
case "${POCL_DEVICES:-}" in *" "*) strategy=mirrored ;; esac
"$kiln" fit "$net" "$work/x.npy" "$work/y.npy" --save "$work/tuned.kiln" --epochs 2 --batch 8 \
    --head 5 --head-from /Flatten --freeze /features --optimizer sgd --learning-rate 0.1 \
    --momentum 0.9 --strategy "$strategy" --seed 3 > "$work/fit.txt" 2> "$work/fit.err" ||
    { cat "$work/fit.txt" "$work/fit.err"; fail "fit on .onnx exited $?"; }
cat "$work/fit.txt"
for line in "froze 13 layer(s) named /features..." "saved $work/tuned.kiln"; do
    grep -qxF "$line" "$work/fit.txt" || fail "fit on .onnx: no '$line'"
done
grep -q "^epoch 2/2: loss [0-9.]*, accuracy [0-9.]*$" "$work/fit.txt" || fail "fit: no history"
grep -q "Epoch 2/2" "$work/fit.err" || fail "fit: no Keras progress on stderr"
"$kiln" summary "$work/tuned.kiln" > "$work/summary2.txt"
grep -q "^head (dense)  *(None, 5)  *645  */Flatten$" "$work/summary2.txt" &&
    grep -q "^Loss: sparse_categorical_crossentropy (with accuracy)$" "$work/summary2.txt" &&
    grep -q "^Optimizer: sgd, learning rate 0.1, momentum 0.9$" "$work/summary2.txt" ||
    { cat "$work/summary2.txt"; fail "summary of the fitted model"; }
# The backbone's 18,896 frozen; the head's 645 and the cut-off head's (off
# the output's path, which no step changes) trainable.
grep -q "^Non-trainable params: 18,896$" "$work/summary2.txt" &&
    grep -q "^Trainable params: 1,290$" "$work/summary2.txt" || fail "the backbone is not frozen"
"$kiln" predict "$work/tuned.kiln" "$work/x.npy" "$work/p1.npy"
"$kiln" export-onnx "$work/tuned.kiln" "$work/tuned.onnx"
"$kiln" predict "$work/tuned.onnx" "$work/x.npy" "$work/p2.npy"
"$python" - "$work" <<'PY' || fail "the exported ONNX predicts otherwise"
import sys
import numpy as np
d = sys.argv[1]
a, b = np.load(d + "/p1.npy"), np.load(d + "/p2.npy")
print("fitted model file and its ONNX export: largest difference %.2e" % np.abs(a - b).max())
assert a.shape == (40, 5) and np.allclose(a.sum(axis=1), 1, atol=1e-5)   # the head's softmax
sys.exit(0 if np.abs(a - b).max() <= 1e-6 else 1)
PY
# A model file trains on with the loss and optimizer it was compiled with.
"$kiln" fit "$work/tuned.kiln" "$work/x.npy" "$work/y.npy" --save "$work/again.kiln" \
    --validation-split 0.25 --no-shuffle > "$work/fit2.txt" 2>&1 ||
    { cat "$work/fit2.txt"; fail "fit on a model file exited $?"; }
grep -q "^epoch 1/1: loss [0-9.]*, accuracy [0-9.]*, val_loss [0-9.]*, val_accuracy" \
    "$work/fit2.txt" || { cat "$work/fit2.txt"; fail "fit on a model file: no history line"; }
"$kiln" predict "$work/again.kiln" "$work/x.npy" "$work/p3.npy"
cmp -s "$work/p1.npy" "$work/p3.npy" && fail "fit on a model file changed nothing"

# --no-shuffle: an epoch of --batch 4 over 12 samples is 3 SGD steps in
# order, as NumPy takes them on a Gemm (mean squared error).
"$python" - "$work" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
d = sys.argv[1]
rng = np.random.default_rng(9)
w, b = rng.normal(0, 0.5, (2, 3)).astype(np.float32), rng.normal(0, 0.1, 2).astype(np.float32)
x = rng.normal(0, 1, (12, 3)).astype(np.float32)
t = rng.normal(0, 1, (12, 2)).astype(np.float32)
g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
                      "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.save(m, d + "/gemm.onnx")
np.save(d + "/gx.npy", x)
np.save(d + "/gt.npy", t)
W, B = w.astype(np.float64), b.astype(np.float64)
for s in range(0, 12, 4):   # Keras's MSE: the mean over outputs and samples
    xb, tb = x[s:s + 4].astype(np.float64), t[s:s + 4].astype(np.float64)
    e = 2 * (xb @ W.T + B - tb) / tb.size
    W, B = W - 0.1 * e.T @ xb, B - 0.1 * e.sum(axis=0)
np.save(d + "/gwant.npy", x.astype(np.float64) @ W.T + B)
PY
"$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/gemm.kiln" --loss mse \
    --optimizer sgd --learning-rate 0.1 --batch 4 --no-shuffle > /dev/null 2>&1 ||
    fail "fit --no-shuffle on a Gemm exited $?"
"$kiln" predict "$work/gemm.kiln" "$work/gx.npy" "$work/gy.npy"
"$python" - "$work" <<'PY' || fail "--no-shuffle: not 3 SGD steps in order"
import sys
import numpy as np
d = sys.argv[1]
worst = np.abs(np.load(d + "/gy.npy") - np.load(d + "/gwant.npy")).max()
print("--no-shuffle, 3 steps of 4: largest difference from NumPy's SGD %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
PY

# --seed: shuffled fits with one seed are bit-identical, with another not.
for run in 1a:1 1b:1 2:2; do
    "$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/s${run%:*}.kiln" \
        --loss mse --optimizer sgd --learning-rate 0.1 --batch 4 --seed "${run#*:}" \
        > /dev/null 2>&1 || fail "fit --seed ${run#*:} exited $?"
    "$kiln" predict "$work/s${run%:*}.kiln" "$work/gx.npy" "$work/s${run%:*}.npy"
done
cmp -s "$work/s1a.npy" "$work/s1b.npy" || fail "two fits with --seed 1 differ"
cmp -s "$work/s1a.npy" "$work/s2.npy" && fail "fits with --seed 1 and --seed 2 are the same"

# Bad options: usage errors exit 2, refusals 1, each naming what is wrong.
f="$kiln fit $net $work/x.npy $work/y.npy"
expect 2 "unknown option --frobnicate" $f --save "$work/o.kiln" --frobnicate
expect 2 "--save needs a value" $f --save
expect 2 "--epochs needs a whole number >= 1, not 'two'" $f --save "$work/o.kiln" --epochs two
expect 2 "--batch needs a whole number >= 1, not '0'" $f --save "$work/o.kiln" --batch 0
expect 2 "--learning-rate needs a finite number > 0, not '-1'" $f --save "$work/o.kiln" \
    --learning-rate -1
expect 2 "--validation-split needs a number in [0, 1), not '1'" $f --save "$work/o.kiln" \
    --validation-split 1
expect 2 "--momentum needs a number in [0, 1), not 'nan'" $f --save "$work/o.kiln" \
    --optimizer sgd --momentum nan
expect 2 "--seed needs a whole number >= 0, not '-3'" $f --save "$work/o.kiln" --seed -3
expect 2 "--head needs a whole number of units >= 1, not '5x'" $f --save "$work/o.kiln" \
    --head 5x --head-from /Flatten
expect 2 "unknown loss 'hinge'" $f --save "$work/o.kiln" --loss hinge
expect 2 "unknown optimizer 'rmsprop'" $f --save "$work/o.kiln" --optimizer rmsprop
expect 2 "unknown strategy 'pipeline'" $f --save "$work/o.kiln" --strategy pipeline
expect 2 "--head needs --head-from NODE" $f --save "$work/o.kiln" --head 5
expect 2 "--head-from needs --head UNITS" $f --save "$work/o.kiln" --head-from /Flatten
expect 2 "--momentum and --nesterov are for --optimizer sgd" $f --save "$work/o.kiln" \
    --momentum 0.5
expect 2 "--nesterov needs --momentum > 0" $f --save "$work/o.kiln" --optimizer sgd --nesterov
expect 2 "--from-logits is for the cross-entropy losses, not mse" $f --save "$work/o.kiln" \
    --loss mse --from-logits
expect 2 "fit needs --save OUT" $f
expect 2 "fit takes 3 file names, got 2" "$kiln" fit "$net" "$work/x.npy" --save "$work/o.kiln"
expect 2 "--epochs is not an option of evaluate" "$kiln" evaluate "$net" "$work/x.npy" \
    "$work/y.npy" --epochs 2
expect 2 "--loss is for ONNX models: the model file $work/tuned.kiln keeps" \
    "$kiln" fit "$work/tuned.kiln" "$work/x.npy" "$work/y.npy" --save "$work/o.kiln" --loss mse
expect 2 "--freeze is for ONNX models" "$kiln" fit "$work/tuned.kiln" "$work/x.npy" \
    "$work/y.npy" --save "$work/o.kiln" --freeze head
expect 1 "--freeze /nothing matches no layer" $f --save "$work/o.kiln" --freeze /features \
    --freeze /nothing
expect 1 "'/NoSuchNode'" $f --save "$work/o.kiln" --head 5 --head-from /NoSuchNode
expect 1 "cannot write --save $work/no/such/dir/o.kiln: its folder $work/no/such/dir/" \
    $f --save "$work/no/such/dir/o.kiln" --epochs 1
grep -q "Epoch" "$work/out.txt" && fail "fit trained before finding --save unwritable"
[ ! -e "$work/o.kiln" ] || fail "a refused fit wrote its --save file"
echo "cli_fit.sh: .onnx models, fit, its history, saved models and every refusal as expected"
