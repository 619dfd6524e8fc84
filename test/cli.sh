#!/bin/sh
# The kiln tool on the model examples/fashion_mnist trained and saved
# (--save): summary; predict, compared bit for bit with kiln_model_predict
# run in another process (cli_predict); evaluate, equal to the example's
# own test loss and accuracy; its refusals (exit 1 with kiln's message) and
# usage errors (exit 2).
# Usage: cli.sh SOURCE_DIR FASHION_MNIST_EXAMPLE KILN CLI_PREDICT
set -eu
src=$1
example=$2
kiln=$3
check=$4
python=${KILN_PYTHON:-/usr/bin/python3}
. "$src/test/missing.sh"
[ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] ||
    skip_missing "Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli.sh: $*" >&2; exit 1; }
model=$work/m.safetensors
scale=0.00392156863   # the float nearest 1/255: as the IDX reader scales bytes

"$example" --epochs 1 --limit 2000 --save "$model" | tee "$work/train.txt"
"$python" "$src/tools/fashion_npy.py" "$work/data" --limit 10000
x=$work/data/test_images.npy
labels=$work/data/test_labels.npy

"$kiln" summary "$model" | tee "$work/summary.txt"
grep -q "^Total params: 347,146$" "$work/summary.txt" || fail "summary: wrong parameter count"
grep -q "^Loss: sparse_categorical_crossentropy" "$work/summary.txt" || fail "summary: no loss"

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

# Refusals: kiln's message and exit 1; usage errors: exit 2.
expect() {   # expect STATUS NEEDLE COMMAND...
    want=$1 needle=$2
    shift 2
    if "$@" > "$work/out.txt" 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" = "$want" ] || { cat "$work/out.txt"; fail "$* exited $rc, not $want"; }
    grep -qF -- "$needle" "$work/out.txt" || { cat "$work/out.txt"; fail "$*: no '$needle'"; }
}
expect 1 "the model takes samples of shape (28, 28, 1)" \
    "$kiln" predict "$model" "$labels" "$work/y2.npy"
expect 1 "cannot open" "$kiln" summary "$work/missing.safetensors"
expect 1 "KILN_ERROR_FORMAT" "$kiln" summary "$x"
expect 1 "cannot write" "$kiln" predict "$model" "$x" "$work/no/such/dir/y.npy" --scale "$scale"
expect 2 "usage:" "$kiln" predict "$model" "$x"
expect 2 "usage:" "$kiln" frobnicate
expect 2 "--batch needs a whole number" "$kiln" predict "$model" "$x" "$work/y.npy" --batch 0
expect 2 "--batch and --scale are for predict and evaluate" "$kiln" summary "$model" --batch 4
if "$kiln" export-onnx "$model" "$work/m.onnx" > "$work/out.txt" 2>&1; then
    [ -s "$work/m.onnx" ] || fail "export-onnx wrote nothing"
else
    rc=$?
    # A kiln built without the meson feature onnx says so.
    [ "$rc" = 1 ] && grep -q "built without ONNX export" "$work/out.txt" ||
        { cat "$work/out.txt"; fail "export-onnx exited $rc"; }
fi
echo "cli.sh: summary, predict, evaluate and refusals as expected"
