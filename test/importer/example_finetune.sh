#!/bin/sh
# examples/finetune on a little Fashion-MNIST (200 samples, 1 epoch; SKIP
# without the dataset), mirrored under POCL_DEVICES="basic basic": it
# prints the three accuracies, and the model file and ONNX it saves (a head
# on a flattened 4-D cut) predict the
# same through the kiln tool; its usage errors exit 2 and a missing
# backbone 1, each naming the cause.
# Usage: example_finetune.sh SOURCE_DIR FINETUNE KILN
set -eu
src=$1
example=$2
kiln=$3
python=${KILN_PYTHON:-/usr/bin/python3}
. "$src/test/common/missing.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "example_finetune.sh: $*" >&2; exit 1; }
expect() {   # expect STATUS NEEDLE COMMAND...
    want=$1 needle=$2
    shift 2
    if "$@" > "$work/out.txt" 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" = "$want" ] || { cat "$work/out.txt"; fail "$* exited $rc, not $want"; }
    grep -qF -- "$needle" "$work/out.txt" || { cat "$work/out.txt"; fail "$*: no '$needle'"; }
}
net=$src/test/data/onnx/fashion_backbone.onnx
expect 2 "--backbone is required" "$example"
expect 2 "unknown option --frobnicate" "$example" --backbone "$net" --frobnicate 1
expect 2 "must be positive" "$example" --backbone "$net" --epochs 0
[ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] ||
    skip_missing "Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)"
expect 1 "$work/missing.onnx" "$example" --backbone "$work/missing.onnx"

"$example" --backbone "$net" --samples 200 --epochs 1 --save "$work/tuned.kiln" \
    --save-onnx "$work/tuned.onnx" > "$work/run.txt" 2>&1 ||
    { cat "$work/run.txt"; fail "exited $?"; }
grep -v "━" "$work/run.txt"
line="test accuracy on classes 5-9: head on /Flatten 0\.[0-9]*, head on"
line="$line /features/features\.9/Relu 0\.[0-9]*, from scratch 0\.[0-9]*"
grep -q "^$line$" "$work/run.txt" || fail "no accuracy line"
case "${POCL_DEVICES:-}" in
    *" "*) grep -q "^2 device(s): mirrored$" "$work/run.txt" || fail "not mirrored on two" ;;
esac
"$python" -c "import numpy as np, sys
x = np.random.default_rng(1).uniform(0, 1, (16, 1, 28, 28))
np.save(sys.argv[1], x.astype(np.float32))" "$work/x.npy"
"$kiln" predict "$work/tuned.kiln" "$work/x.npy" "$work/a.npy"
"$kiln" predict "$work/tuned.onnx" "$work/x.npy" "$work/b.npy"
cmp -s "$work/a.npy" "$work/b.npy" || fail "the saved model file and ONNX predict otherwise"
echo "example_finetune.sh: both accuracies, files that reload alike, usage errors as expected"
