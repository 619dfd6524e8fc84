#!/bin/sh
# The kiln tool. Without data: --help, of the tool, each command and every
# example program (exit 0, the usage on stdout); a model of two outputs
# (cli_predict --two-outputs writes it): summary's loss and optimizer lines,
# and predict writing a file per output, each compared bit for bit with
# kiln_model_predict run in another process and, in NumPy, with the heads'
# softmax(x W + b) and x W + b. Then on the model examples/fashion_mnist
# trained and saved (--save; SKIP without Fashion-MNIST): summary; predict,
# compared bit for bit with kiln_model_predict (cli_predict); evaluate,
# equal to the example's own test loss and accuracy; its refusals (exit 1
# with kiln's message) and usage errors (exit 2).
# Usage: cli.sh SOURCE_DIR FASHION_MNIST_EXAMPLE KILN CLI_PREDICT [EXAMPLE...]
set -eu
src=$1
example=$2
kiln=$3
check=$4
shift 4
python=${KILN_PYTHON:-/usr/bin/python3}
. "$src/test/common/missing.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli.sh: $*" >&2; exit 1; }

# Refusals: kiln's message and exit 1; usage errors: exit 2.
expect() {   # expect STATUS NEEDLE COMMAND...
    want=$1 needle=$2
    shift 2
    if "$@" > "$work/out.txt" 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" = "$want" ] || { cat "$work/out.txt"; fail "$* exited $rc, not $want"; }
    grep -qF -- "$needle" "$work/out.txt" || { cat "$work/out.txt"; fail "$*: no '$needle'"; }
}

# --help: the usage on stdout, exit 0.
helps() {   # helps NEEDLE COMMAND...
    needle=$1
    shift
    if "$@" > "$work/help.txt" 2> "$work/help.err"; then rc=0; else rc=$?; fi
    [ "$rc" = 0 ] || { cat "$work/help.txt" "$work/help.err"; fail "$* exited $rc, not 0"; }
    grep -qF -- "$needle" "$work/help.txt" ||
        { cat "$work/help.txt" "$work/help.err"; fail "$*: no '$needle' on stdout"; }
}
for command in "" summary predict evaluate fit export-onnx devices tune; do
    # shellcheck disable=SC2086   # no command: kiln --help itself
    helps "usage: kiln summary MODEL" "$kiln" $command --help
done
helps "out.npy -> out.<layer>.npy" "$kiln" predict -h
helps "usage: kiln summary MODEL" "$kiln" predict m.kiln --help   # before the missing paths
for program in "$example" "$@"; do
    helps "usage: $(basename "$program")" "$program" --help
done
echo "cli.sh: --help of kiln, its commands and $((1 + $#)) examples: usage, exit 0"

# devices: a line per device the context uses; a file name is a usage error.
"$kiln" devices > "$work/devices.txt"
cat "$work/devices.txt"
grep -q "^device 0: .* kernels, GEMM: " "$work/devices.txt" || fail "kiln devices: no device 0 line"
expect 2 "devices takes 0 file names, got 1" "$kiln" devices m.kiln

# tune: the searches, into a cache folder of its own, each candidate
# logged; then what devices prints, which a later run reads back.
KILN_CACHE_DIR="$work/tune-cache" "$kiln" tune > "$work/tune.txt" 2> "$work/tune.err"
grep -q "^device 0: .* kernels, GEMM: " "$work/tune.txt" || fail "kiln tune: no device 0 line"
if grep -q "CPU kernels" "$work/tune.txt"; then
    grep -q "kiln GEMM cache [0-9]* KiB\(, unpacked\)\? (searched)" "$work/tune.txt" ||
        fail "kiln tune: no searched cache budget"
    [ "$(grep -c "searching kiln's GEMM cache budget" "$work/tune.err")" -ge 12 ] ||
        { cat "$work/tune.err"; fail "kiln tune: the candidates were not logged"; }
    KILN_CACHE_DIR="$work/tune-cache" "$kiln" devices > "$work/tuned.txt"
    cmp -s "$work/tune.txt" "$work/tuned.txt" ||
        { cat "$work/tune.txt" "$work/tuned.txt"; fail "kiln devices did not read tune's record"; }
fi
expect 2 "tune takes 0 file names, got 1" "$kiln" tune m.kiln

# A model of two outputs: summary, and predict's file per output.
two=$work/two
mkdir "$two"
"$check" --two-outputs "$two"
"$kiln" summary "$two/two.kiln" | tee "$work/summary_two.txt"
sgd="Optimizer: sgd, learning rate 0.05, momentum 0.9 (Nesterov), gradients accumulated over"
for line in "Loss of output 'cls': sparse_categorical_crossentropy x 1 (with accuracy)" \
            "Loss of output 'reg': mean_squared_error x 0.5" "$sgd 2 steps"; do
    grep -qxF "$line" "$work/summary_two.txt" || fail "summary of two outputs: no '$line'"
done
"$kiln" predict "$two/two.kiln" "$two/x.npy" "$two/out.npy" > "$work/paths.txt" ||
    fail "predict of a model of two outputs exited $?"
printf '%s\n' "$two/out.cls.npy" "$two/out.reg.npy" | cmp -s - "$work/paths.txt" ||
    { cat "$work/paths.txt"; fail "predict of two outputs: not the two paths it should write"; }
[ ! -e "$two/out.npy" ] || fail "predict of two outputs also wrote out.npy"
"$check" "$two/two.kiln" "$two/x.npy" "$two/out.npy" 1 32
"$python" - "$two" <<'PY' || fail "predict of two outputs differs from NumPy's"
import sys
import numpy as np
d = sys.argv[1]
x = np.load(d + "/x.npy").astype(np.float64)
worst = 0.0
for layer, units in (("cls", 3), ("reg", 2)):
    y = np.load("%s/out.%s.npy" % (d, layer))
    z = x @ np.load("%s/%s.kernel.npy" % (d, layer)) + np.load("%s/%s.bias.npy" % (d, layer))
    if layer == "cls":
        z = np.exp(z - z.max(axis=1, keepdims=True))
        z /= z.sum(axis=1, keepdims=True)
    assert y.dtype == np.float32 and y.shape == (40, units), (layer, y.dtype, y.shape)
    worst = max(worst, float(np.abs(y - z).max()))
print("predict of two outputs: largest difference from NumPy (float64) %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
PY
# Without an extension the layer name is appended.
"$kiln" predict "$two/two.kiln" "$two/x.npy" "$two/plain" > "$work/paths.txt"
printf '%s\n' "$two/plain.cls" "$two/plain.reg" | cmp -s - "$work/paths.txt" ||
    { cat "$work/paths.txt"; fail "predict of two outputs to a name without an extension"; }
expect 1 "cannot write $two/no/such/dir/y.cls.npy" \
    "$kiln" predict "$two/two.kiln" "$two/x.npy" "$two/no/such/dir/y.npy"
expect 1 "the model takes samples of shape (4,)" \
    "$kiln" predict "$two/two.kiln" "$two/cls.bias.npy" "$two/y.npy"
expect 1 "holds an array of shape (4, 3), the model takes samples of shape (4,)" \
    "$kiln" predict "$two/two.kiln" "$two/cls.kernel.npy" "$two/y.npy"
expect 2 "--scale needs a finite number other than 0" \
    "$kiln" predict "$two/two.kiln" "$two/x.npy" "$two/y.npy" --scale 0

[ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] ||
    skip_missing "Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)"
model=$work/m.safetensors
scale=0.00392156863   # the float nearest 1/255: as the IDX reader scales bytes

"$example" --epochs 1 --limit 2000 --save "$model" | tee "$work/train.txt"
"$python" "$src/tools/fashion_npy.py" "$work/data" --limit 10000
x=$work/data/test_images.npy
labels=$work/data/test_labels.npy

"$kiln" summary "$model" | tee "$work/summary.txt"
grep -q "^Total params: 347,146$" "$work/summary.txt" || fail "summary: wrong parameter count"
grep -q "^Loss: sparse_categorical_crossentropy" "$work/summary.txt" || fail "summary: no loss"
grep -qx "Optimizer: adam, learning rate 0.001" "$work/summary.txt" || fail "summary: no optimizer"

"$kiln" predict "$model" "$x" "$work/y.npy" --scale "$scale"
"$check" "$model" "$x" "$work/y.npy" "$scale" 32

# The example evaluated the same 10000 test images in batches of 256.
"$kiln" evaluate "$model" "$x" "$labels" --scale "$scale" --batch 256 | tee "$work/eval.txt"
"$python" - "$work/train.txt" "$work/eval.txt" <<'PY' || fail "evaluate differs from the example"
import sys
def read(path, prefix):
    return {l.split(":")[0][len(prefix):]: l.split(":")[1].strip()
            for l in open(path) if l.startswith(prefix)}
want, got = read(sys.argv[1], "test "), read(sys.argv[2], "")
print("example: loss %s accuracy %s; kiln evaluate: loss %s accuracy %s"
      % (want["loss"], want["accuracy"], got["loss"], got["accuracy"]))
ok = abs(float(got["loss"]) - float(want["loss"])) <= 0.5e-4 + 1e-9 and \
    "%.4f" % float(got["accuracy"]) == want["accuracy"] and got["samples"] == "10000"
sys.exit(0 if ok else 1)
PY

expect 1 "the model takes samples of shape (28, 28, 1)" \
    "$kiln" predict "$model" "$labels" "$work/y2.npy"
expect 1 "cannot open" "$kiln" summary "$work/missing.safetensors"
expect 1 "KILN_ERROR_FORMAT" "$kiln" summary "$x"
expect 1 "cannot write" "$kiln" predict "$model" "$x" "$work/no/such/dir/y.npy" --scale "$scale"
expect 2 "usage:" "$kiln" predict "$model" "$x"
expect 2 "usage:" "$kiln" frobnicate
expect 2 "--batch needs a whole number" "$kiln" predict "$model" "$x" "$work/y.npy" --batch 0
expect 2 "--batch is not an option of summary" "$kiln" summary "$model" --batch 4
if "$kiln" export-onnx "$model" "$work/m.onnx" > "$work/out.txt" 2>&1; then
    [ -s "$work/m.onnx" ] || fail "export-onnx wrote nothing"
else
    rc=$?
    # A kiln built without the meson feature onnx says so.
    [ "$rc" = 1 ] && grep -q "built without ONNX export" "$work/out.txt" ||
        { cat "$work/out.txt"; fail "export-onnx exited $rc"; }
fi
echo "cli.sh: --help, two outputs, summary, predict, evaluate and refusals as expected"
