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
# weights against NumPy's), and so with --decay piecewise and a warm-up
# then cosine decay at each step's rate, and with each clipping option,
# clipped as NumPy clips; --label-smoothing kept in the saved file;
# --activations float16 reported and moving the fit a little, --half
# activations the same fit bit for bit, --half weights refused; and each bad
# option, exit 2 or 1 naming it.
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
    "--from-logits" "--optimizer NAME   adam (default), sgd, adamw, rmsprop or adagrad" \
    "--learning-rate R  default: sgd 0.01, the others 0.001" \
    "--momentum M       sgd and rmsprop only, in [0, 1) (default 0)" \
    "--weight-decay W   decoupled weight decay" "(default: adamw" "0.004, the others 0)" \
    "--nesterov" "--clipnorm C" "--clipvalue V" "--global-clipnorm C" \
    "clip_grad_norm_" "--validation-split F" "default 0" "--freeze PREFIX" \
    "--head UNITS --head-from NODE" \
    "--strategy NAME    one_device (default) or mirrored" "--seed S" "--scale S" "(default 1)" \
    "--warmup-steps N" "--warmup-target R" "--decay KIND       cosine" "--decay-steps N" \
    "--decay-rate R" "--alpha A" "--boundaries B1,B2,..." "--values V0,V1,..." \
    "--label-smoothing LS  Keras's label_smoothing, in [0, 1] (default 0)" \
    "--ema M            keep a moving average of the weights" "--lora RANK" \
    "--lora-alpha A     the adapters' scale is A / RANK" "--lora-layers PREFIX" \
    "--lora-targets LIST  the attention projections adapted" \
    "--activations TYPE  float32 (default) or float16" \
    "--half WHAT        activations: the same as --activations float16; weights are"; do
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
for line in "froze 9 layer(s) named /features..." "saved $work/tuned.kiln"; do
    grep -qxF "$line" "$work/fit.txt" || fail "fit on .onnx: no '$line'"
done
grep -q "^epoch 2/2: loss [0-9.]*, accuracy [0-9.]*$" "$work/fit.txt" || fail "fit: no history"
grep -q "Epoch 2/2" "$work/fit.err" || fail "fit: no Keras progress on stderr"
grep -qxF "Optimizer: sgd, learning rate 0.1, momentum 0.9" "$work/fit.txt" ||
    fail "fit on .onnx: no report of the optimizer it trains with"
grep -q "^Activations:" "$work/fit.txt" && fail "fit without --activations: half activations"
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

# --clipnorm, --clipvalue, --global-clipnorm: the same 3 steps with the
# gradient clipped as NumPy clips it (per weight, per element, globally),
# each acting on every step.
for clip in clipnorm:0.3 clipvalue:0.1 global-clipnorm:0.3; do
    "$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/clip.kiln" \
        --loss mse --optimizer sgd --learning-rate 0.1 --batch 4 --no-shuffle \
        "--${clip%:*}" "${clip#*:}" > /dev/null 2>&1 || fail "fit --${clip%:*} exited $?"
    "$kiln" predict "$work/clip.kiln" "$work/gx.npy" "$work/cy.npy"
    "$kiln" summary "$work/clip.kiln" | grep -q "^Optimizer: sgd, learning rate 0.1, $(echo \
        "${clip%:*}" | tr - _) ${clip#*:}$" || fail "summary of a --${clip%:*} model"
    "$python" - "$work" "${clip%:*}" "${clip#*:}" <<'PY' || fail "--${clip%:*}: not NumPy's"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
d, mode, c = sys.argv[1], sys.argv[2], float(sys.argv[3])
init = {t.name: numpy_helper.to_array(t) for t in onnx.load(d + "/gemm.onnx").graph.initializer}
W, B = init["w"].astype(np.float64), init["b"].astype(np.float64)
x, t = np.load(d + "/gx.npy").astype(np.float64), np.load(d + "/gt.npy").astype(np.float64)
acted = 0
for s in range(0, 12, 4):
    xb, tb = x[s:s + 4], t[s:s + 4]
    e = 2 * (xb @ W.T + B - tb) / tb.size
    gw, gb = e.T @ xb, e.sum(axis=0)
    if mode == "clipnorm":
        acted += max(np.linalg.norm(gw), np.linalg.norm(gb)) > c
        gw, gb = (g * c / max(np.linalg.norm(g), c) for g in (gw, gb))
    elif mode == "clipvalue":
        acted += max(np.abs(gw).max(), np.abs(gb).max()) > c
        gw, gb = np.clip(gw, -c, c), np.clip(gb, -c, c)
    else:
        norm = np.sqrt((gw ** 2).sum() + (gb ** 2).sum())
        acted += norm > c
        gw, gb = (g * min(1.0, c / (norm + 1e-6)) for g in (gw, gb))
    W, B = W - 0.1 * gw, B - 0.1 * gb
worst = np.abs(np.load(d + "/cy.npy") - (x @ W.T + B)).max()
print("--%s %g: clipping acted on %d of 3 steps; largest difference from NumPy %.2e"
      % (mode, c, acted, worst))
sys.exit(0 if worst < 1e-5 and acted == 3 else 1)
PY
done
# Schedules: the same 3 steps of 4 at each step's rate, against NumPy: piecewise
# constant (Keras: the earlier value holds at a boundary step), and a warm-up
# from --learning-rate to --warmup-target then cosine decay from it.
cosine="--learning-rate 0.05 --warmup-steps 1 --warmup-target 0.2 --decay cosine"
for sched in "piecewise:--decay piecewise --boundaries 0,1 --values 0.1,0.05,0.02" \
    "cosine:$cosine --decay-steps 4 --alpha 0.1"; do
    # shellcheck disable=SC2086
    "$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/${sched%%:*}.kiln" \
        --loss mse --optimizer sgd --batch 4 --no-shuffle ${sched#*:} > /dev/null 2>&1 ||
        fail "fit --decay ${sched%%:*} exited $?"
    "$kiln" predict "$work/${sched%%:*}.kiln" "$work/gx.npy" "$work/${sched%%:*}.npy"
done
"$python" - "$work" <<'PY' || fail "--decay: not 3 SGD steps at the schedule's rates"
import math
import sys
import numpy as np
d = sys.argv[1]
x, t = np.load(d + "/gx.npy").astype(np.float64), np.load(d + "/gt.npy").astype(np.float64)
import onnx
from onnx import numpy_helper
g = onnx.load(d + "/gemm.onnx").graph
w0 = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in g.initializer}
cos = lambda s: 0.2 * (0.9 * 0.5 * (1 + math.cos(math.pi * (s - 1) / 4)) + 0.1)
rates = {"piecewise": [0.1, 0.05, 0.02], "cosine": [0.05, cos(1), cos(2)]}
worst = 0
for name, r in rates.items():
    W, B = [v for v in w0.values() if v.ndim == 2][0], [v for v in w0.values() if v.ndim == 1][0]
    for k, s in enumerate(range(0, 12, 4)):
        xb, tb = x[s:s + 4], t[s:s + 4]
        e = 2 * (xb @ W.T + B - tb) / tb.size
        W, B = W - r[k] * e.T @ xb, B - r[k] * e.sum(axis=0)
    diff = np.abs(np.load(d + "/%s.npy" % name) - (x @ W.T + B)).max()
    print("--decay %s, 3 steps of 4: largest difference from NumPy's SGD %.2e" % (name, diff))
    worst = max(worst, diff)
sys.exit(0 if worst < 1e-5 else 1)
PY
# --label-smoothing reaches the saved model's compile settings.
"$kiln" fit "$net" "$work/x.npy" "$work/y.npy" --save "$work/smooth.kiln" --epochs 1 \
    --batch 8 --head 5 --head-from /Flatten --freeze / --label-smoothing 0.1 > /dev/null 2>&1 ||
    fail "fit --label-smoothing exited $?"
"$python" - "$work/smooth.kiln" <<'PY' || fail "--label-smoothing is not in the saved model"
import json
import struct
import sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
ls = json.loads(meta["kiln.model"])["compile"]["label_smoothing"]
print("--label-smoothing: the model file's compile has label_smoothing", ls)
sys.exit(0 if abs(ls - 0.1) < 1e-7 else 1)
PY
# --ema reaches the saved model's optimizer settings.
"$kiln" fit "$net" "$work/x.npy" "$work/y.npy" --save "$work/ema.kiln" --epochs 1 \
    --batch 8 --head 5 --head-from /Flatten --freeze / --ema 0.9 > /dev/null 2>&1 ||
    fail "fit --ema exited $?"
"$python" - "$work/ema.kiln" <<'PY' || fail "--ema is not in the saved model"
import json
import struct
import sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
o = json.loads(meta["kiln.model"])["compile"]["optimizer"]
print("--ema: the model file's optimizer has use_ema", o.get("use_ema"), "ema_momentum",
      o.get("ema_momentum"))
sys.exit(0 if o.get("use_ema") is True and abs(o["ema_momentum"] - 0.9) < 1e-7 else 1)
PY
# --activations float16: the compiled model reports half activations, and
# trains a head on the backbone's outputs rounded to half: the predictions
# of the same fit in float32 move, by little. A model file takes it too (a
# setting of the machine, not of the file).
for t in float32 float16; do
    "$kiln" fit "$net" "$work/x.npy" "$work/y.npy" --save "$work/$t.kiln" --batch 8 --head 5 \
        --head-from /Flatten --freeze /features --no-shuffle --seed 3 --activations "$t" \
        > "$work/$t.txt" 2>&1 ||
        { rc=$?; cat "$work/$t.txt"; fail "fit --activations $t exited $rc"; }
    "$kiln" predict "$work/$t.kiln" "$work/x.npy" "$work/$t.npy" > /dev/null
done
half="Activations: half precision between forward and backward"
grep -qxF "$half" "$work/float16.txt" ||
    { cat "$work/float16.txt"; fail "fit --activations float16: no '$half'"; }
grep -q "^Activations:" "$work/float32.txt" && fail "fit --activations float32: half activations"
"$python" - "$work" <<'PY' || fail "--activations float16: not float32's fit with rounded outputs"
import sys
import numpy as np
d = sys.argv[1]
a, b = np.load(d + "/float32.npy"), np.load(d + "/float16.npy")
diff = float(np.abs(a - b).max() / np.abs(a).max())
print("--activations float16: predictions %.2e from float32's fit (relative)" % diff)
sys.exit(0 if 0 < diff < 1e-3 else 1)
PY
# The issue's spelling, --half activations, is --activations float16: the
# same fit, the same predictions bit for bit.
"$kiln" fit "$net" "$work/x.npy" "$work/y.npy" --save "$work/halfflag.kiln" --batch 8 --head 5 \
    --head-from /Flatten --freeze /features --no-shuffle --seed 3 --half activations \
    > "$work/halfflag.txt" 2>&1 ||
    { rc=$?; cat "$work/halfflag.txt"; fail "fit --half activations exited $rc"; }
grep -qxF "$half" "$work/halfflag.txt" ||
    { cat "$work/halfflag.txt"; fail "fit --half activations: no '$half'"; }
"$kiln" predict "$work/halfflag.kiln" "$work/x.npy" "$work/halfflag.npy" > /dev/null
cmp -s "$work/halfflag.npy" "$work/float16.npy" ||
    fail "fit --half activations predicts otherwise than --activations float16"
"$kiln" fit "$work/tuned.kiln" "$work/x.npy" "$work/y.npy" --save "$work/half.kiln" \
    --activations float16 --strategy "$strategy" > "$work/half.txt" 2>&1 ||
    { rc=$?; cat "$work/half.txt"; fail "fit --activations float16 on a model file exited $rc"; }
grep -qxF "$half" "$work/half.txt" ||
    { cat "$work/half.txt"; fail "fit --activations float16 of a model file: no '$half'"; }

# --lora on the Gemm "fc": the saved model holds one merged kernel w + (alpha/r)·A·B and
# no adapters; the kernel moved by a matrix of rank 1 (the adapters' rank) and the bias
# trained, as Keras 3's enable_lora leaves it trainable.
"$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/lora.kiln" --loss mse \
    --optimizer sgd --learning-rate 0.1 --batch 4 --no-shuffle --lora 1 --lora-alpha 2 \
    --lora-layers fc > "$work/lora.txt" 2>&1 ||
    { cat "$work/lora.txt"; fail "fit --lora exited $?"; }
grep -qxF "LoRA rank 1 on 1 Dense layer(s) named fc..." "$work/lora.txt" ||
    { cat "$work/lora.txt"; fail "fit --lora: no report of the layers"; }
"$python" - "$work" <<'PY' || fail "--lora: not a merged kernel of a rank-1 change"
import json
import struct
import sys
import numpy as np
import onnx
from onnx import numpy_helper
d = sys.argv[1]
with open(d + "/lora.kiln", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
names = sorted(k for k in head if k != "__metadata__")
t = {k: np.frombuffer(data[head[k]["data_offsets"][0]:head[k]["data_offsets"][1]], "<f4")
     .reshape(head[k]["shape"]) for k in names}
g = onnx.load(d + "/gemm.onnx").graph
w = {i.name: numpy_helper.to_array(i) for i in g.initializer}
base = w["w"].astype(np.float64)   # (out, in); kiln's file may hold it as (in, out)
kernel = t["w"].astype(np.float64)
sv = np.linalg.svd(kernel - (base.T if kernel.shape != base.shape else base), compute_uv=False)
print("--lora: tensors", names, "; singular values of the kernel's change", sv,
      "; bias moved by", float(np.abs(t["b"] - w["b"]).max()))
ok = names == ["b", "w"] and sv[0] > 1e-4 and sv[1] < 1e-6 * sv[0] + 1e-7
sys.exit(0 if ok and np.abs(t["b"] - w["b"]).max() > 1e-4 else 1)
PY
# --optimizer adamw --weight-decay: 3 steps in order as NumPy takes Keras's
# AdamW (decay first, w -= lr * wd * w, then Adam's step; epsilon 1e-7), and
# the saved model's summary names it; rmsprop and adagrad with their
# settings likewise.
"$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/adamw.kiln" --loss mse \
    --optimizer adamw --weight-decay 0.05 --learning-rate 0.01 --batch 4 --no-shuffle \
    > /dev/null 2>&1 || fail "fit --optimizer adamw exited $?"
"$kiln" predict "$work/adamw.kiln" "$work/gx.npy" "$work/ay.npy"
"$python" - "$work" "$net" <<'PY' || fail "--optimizer adamw: not 3 AdamW steps in order"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
d = sys.argv[1]
g = onnx.load(d + "/gemm.onnx").graph
w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
W, B = w["w"], w["b"]
x, t = np.load(d + "/gx.npy").astype(np.float64), np.load(d + "/gt.npy").astype(np.float64)
lr, wd, b1, b2, eps = 0.01, 0.05, 0.9, 0.999, 1e-7
state = [[np.zeros_like(W), np.zeros_like(W)], [np.zeros_like(B), np.zeros_like(B)]]
for step, s in enumerate(range(0, 12, 4), start=1):
    xb, tb = x[s:s + 4], t[s:s + 4]
    e = 2 * (xb @ W.T + B - tb) / tb.size
    new = []
    for p, grad, (m, v) in ((W, e.T @ xb, state[0]), (B, e.sum(axis=0), state[1])):
        p = p - p * wd * lr
        m += (1 - b1) * (grad - m)
        v += (1 - b2) * (grad * grad - v)
        alpha = lr * np.sqrt(1 - b2 ** step) / (1 - b1 ** step)
        new.append(p - alpha * m / (np.sqrt(v) + eps))
    W, B = new
worst = np.abs(np.load(d + "/ay.npy") - (x @ W.T + B)).max()
print("--optimizer adamw, 3 steps of 4: largest difference from NumPy's AdamW %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
PY
"$kiln" summary "$work/adamw.kiln" | grep -qx \
    "Optimizer: adamw, learning rate 0.01, weight decay 0.05" || fail "summary of adamw"
"$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/rms.kiln" --loss mse \
    --optimizer rmsprop --momentum 0.5 --batch 4 > /dev/null 2>&1 ||
    fail "fit --optimizer rmsprop exited $?"
"$kiln" summary "$work/rms.kiln" | grep -qx \
    "Optimizer: rmsprop, learning rate 0.001, rho 0.9, momentum 0.5" || fail "summary of rmsprop"
"$kiln" fit "$work/gemm.onnx" "$work/gx.npy" "$work/gt.npy" --save "$work/ada.kiln" --loss mse \
    --optimizer adagrad --weight-decay 0.01 --batch 4 > /dev/null 2>&1 ||
    fail "fit --optimizer adagrad exited $?"
"$kiln" summary "$work/ada.kiln" | grep -qx \
    "Optimizer: adagrad, learning rate 0.001, initial accumulator 0.1, weight decay 0.01" ||
    fail "summary of adagrad"

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
expect 2 "unknown optimizer 'lamb' (adam, sgd, adamw, rmsprop, adagrad)" $f \
    --save "$work/o.kiln" --optimizer lamb
expect 2 "--weight-decay needs a finite number >= 0, not '-0.1'" $f --save "$work/o.kiln" \
    --weight-decay -0.1
expect 2 "--weight-decay needs a finite number >= 0, not 'inf'" $f --save "$work/o.kiln" \
    --weight-decay inf
expect 2 "--momentum is for --optimizer sgd and rmsprop" $f --save "$work/o.kiln" \
    --optimizer adamw --momentum 0.5
expect 2 "--nesterov is for --optimizer sgd" $f --save "$work/o.kiln" --optimizer rmsprop \
    --momentum 0.5 --nesterov
expect 2 "--weight-decay is for ONNX models" "$kiln" fit "$work/tuned.kiln" "$work/x.npy" \
    "$work/y.npy" --save "$work/o.kiln" --weight-decay 0.1
expect 2 "unknown strategy 'pipeline'" $f --save "$work/o.kiln" --strategy pipeline
expect 2 "--head needs --head-from NODE" $f --save "$work/o.kiln" --head 5
expect 2 "--head-from needs --head UNITS" $f --save "$work/o.kiln" --head-from /Flatten
expect 2 "--momentum is for --optimizer sgd and rmsprop" $f --save "$work/o.kiln" \
    --momentum 0.5
expect 2 "--nesterov needs --momentum > 0" $f --save "$work/o.kiln" --optimizer sgd --nesterov
expect 2 "--clipnorm needs a finite number > 0, not '-1'" $f --save "$work/o.kiln" --clipnorm -1
expect 2 "--clipvalue needs a finite number > 0, not 'nan'" $f --save "$work/o.kiln" \
    --clipvalue nan
expect 2 "--global-clipnorm needs a finite number > 0, not '0'" $f --save "$work/o.kiln" \
    --global-clipnorm 0
expect 2 "only one of --clipnorm, --clipvalue and --global-clipnorm" $f --save "$work/o.kiln" \
    --clipnorm 1 --global-clipnorm 1
expect 2 "--from-logits is for the cross-entropy losses, not mse" $f --save "$work/o.kiln" \
    --loss mse --from-logits
expect 2 "--warmup-steps needs a whole number >= 0, not '-1'" $f --save "$work/o.kiln" \
    --warmup-steps -1
expect 2 "unknown decay 'linear' (cosine, exponential, piecewise)" $f --save "$work/o.kiln" \
    --decay linear
expect 2 "--decay-steps needs --decay" $f --save "$work/o.kiln" --decay-steps 5
expect 2 "--decay piecewise needs --boundaries and --values" $f --save "$work/o.kiln" \
    --decay piecewise --boundaries 3
expect 2 "--boundaries and --values are for --decay piecewise" $f --save "$work/o.kiln" \
    --decay cosine --decay-steps 3 --values 0.1
expect 2 "--boundaries needs 1 to 64 whole numbers, comma-separated, not '3,x'" $f \
    --save "$work/o.kiln" --decay piecewise --boundaries 3,x --values 0.1,0.2
expect 1 "n_values 3 must be n_boundaries + 1 (2)" $f --save "$work/o.kiln" \
    --decay piecewise --boundaries 3 --values 0.1,0.2,0.3
expect 1 "boundaries[1] is 2; boundaries must be steps >= 0 in strictly increasing order" $f \
    --save "$work/o.kiln" --decay piecewise --boundaries 3,2 --values 0.1,0.2,0.3
expect 1 "decay_rate" $f --save "$work/o.kiln" --decay exponential --decay-steps 3
expect 2 "--ema needs a momentum in (0, 1), not '1'" $f --save "$work/o.kiln" --ema 1
expect 2 "--ema needs a momentum in (0, 1), not 'nan'" $f --save "$work/o.kiln" --ema nan
expect 2 "--lora needs a whole number >= 1, not '0'" $f --save "$work/o.kiln" --lora 0 \
    --lora-layers /fc
expect 2 "--lora-alpha needs a finite number > 0, not '-1'" $f --save "$work/o.kiln" --lora 2 \
    --lora-alpha -1 --lora-layers /fc
expect 2 "--lora-alpha needs a finite number > 0, not 'nan'" $f --save "$work/o.kiln" --lora 2 \
    --lora-alpha nan --lora-layers /fc
expect 2 "--lora needs --lora-layers PREFIX" $f --save "$work/o.kiln" --lora 2
expect 2 "--lora-alpha, --lora-layers and --lora-targets need --lora RANK" $f \
    --save "$work/o.kiln" --lora-layers /fc
expect 1 "--lora-layers /features matches no Dense or MultiHeadAttention layer" $f \
    --save "$work/o.kiln" --lora 2 --lora-layers /features
expect 2 "--lora is for ONNX models" "$kiln" fit "$work/tuned.kiln" "$work/x.npy" \
    "$work/y.npy" --save "$work/o.kiln" --lora 2 --lora-layers head
expect 2 "--label-smoothing needs a number in [0, 1], not '1.5'" $f --save "$work/o.kiln" \
    --label-smoothing 1.5
expect 1 "label smoothing is for the cross-entropy losses, not mean_squared_error" $f \
    --save "$work/o.kiln" --loss mse --label-smoothing 0.1
expect 2 "--decay is for ONNX models" "$kiln" fit "$work/tuned.kiln" "$work/x.npy" \
    "$work/y.npy" --save "$work/o.kiln" --decay cosine
expect 2 "unknown activation storage 'half' (float32, float16)" $f --save "$work/o.kiln" \
    --activations half
expect 2 "--activations needs a value" $f --save "$work/o.kiln" --activations
expect 2 "--half weights is not offered: weights stay float32, since a half copy beside the \
optimizer's float32 master adds memory and saves none" $f --save "$work/o.kiln" --half weights
expect 2 "unknown --half 'float16' (activations; weights are not offered)" $f \
    --save "$work/o.kiln" --half float16
expect 2 "--half needs a value" $f --save "$work/o.kiln" --half
expect 2 "--half activations is --activations float16: give one of them" $f \
    --save "$work/o.kiln" --half activations --activations float32
expect 2 "--half is not an option of predict" "$kiln" predict "$net" "$work/x.npy" \
    "$work/p.npy" --half activations
expect 2 "--activations is not an option of predict" "$kiln" predict "$net" "$work/x.npy" \
    "$work/p.npy" --activations float16
expect 2 "fit needs --save OUT" $f
expect 2 "fit takes 3 file names, got 2" "$kiln" fit "$net" "$work/x.npy" --save "$work/o.kiln"
expect 2 "--epochs is not an option of evaluate" "$kiln" evaluate "$net" "$work/x.npy" \
    "$work/y.npy" --epochs 2
expect 2 "--loss is for ONNX models: the model file $work/tuned.kiln keeps" \
    "$kiln" fit "$work/tuned.kiln" "$work/x.npy" "$work/y.npy" --save "$work/o.kiln" --loss mse
expect 2 "--global-clipnorm is for ONNX models" "$kiln" fit "$work/tuned.kiln" "$work/x.npy" \
    "$work/y.npy" --save "$work/o.kiln" --global-clipnorm 1
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
