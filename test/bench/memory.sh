#!/bin/sh
# Device memory (kiln_model_memory of replica 0, in bytes) of four models
# trained several ways: in full, with activations kept in half precision
# (activation_storage float16), with LoRA of rank 8, and (the first two)
# with a moving average of the weights (Keras's use_ema, momentum 0.99);
# Adam throughout, one training step each.
#   char LM: examples/char_lm at its default size (4 blocks, width 128, 4
#     heads, context 64, batch 32); LoRA on every attention layer's query
#     and value projections, every other weight frozen, starting from the
#     full run's saved model (--init, --lora 8).
#   Dense stack: test/bench/bench_memory, 784 -> Dense(1024, relu) ->
#     Dense(1024, relu) -> Dense(10, softmax), batch 128; LoRA on all three
#     Dense layers (their kernels frozen, biases trained).
#   seed ResNet: examples/resnet_model.c (bench_memory --model resnet) on
#     224x224x3 images, 10 classes, batch 8; LoRA on its Dense head, every
#     other layer frozen (batch norm then runs on its moving statistics).
#   resnet50: torchvision's, random weights, exported to ONNX by
#     test/importer/export_torchvision.py (224x224, 10 classes) and imported
#     (bench_memory --model FILE.onnx), batch 8; LoRA on its fc, every other
#     layer frozen. Without PyTorch and torchvision its rows are left out,
#     with the reason.
# It measures memory, not time: no peer, no repeats. Not a meson benchmark.
#
# Environment (defaults in brackets):
#   BENCH_BUILD_DIR [build]    meson build folder, set up if missing
#   BENCH_TEXT [the python3 standard library]  char_lm's --text
#   BENCH_IMAGE_SIZE [224]     the seed ResNet's and resnet50's input side
#   BENCH_IMAGE_BATCH [8]      their batch
# POCL_DEVICES passes through (default here: pthread). Prints a Markdown
# table; bytes, trainable parameters in floats.
set -eu
cd "$(dirname "$0")/../.."
build=${BENCH_BUILD_DIR:-build}
text=${BENCH_TEXT:-$(python3 -c 'import os; print(os.path.dirname(os.__file__))')}
size=${BENCH_IMAGE_SIZE:-224}
batch=${BENCH_IMAGE_BATCH:-8}
export POCL_DEVICES="${POCL_DEVICES:-pthread}"

[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build" examples/char_lm test/bench/bench_memory >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "trainable parameters gradients optimizer activations workspace peak"
# from char_lm's output (its "model:" and "device memory bytes:" lines).
lm_row() {  # name [char_lm options]
    name=$1
    shift
    "$build/examples/char_lm" --steps 1 --epochs 1 --val-windows 0 --generate 0 \
        --text "$text" "$@" >"$tmp/$name" 2>&1 || { cat "$tmp/$name"; exit 1; }
    trainable=$(sed -n 's/^model: .* \([0-9]*\) trainable$/\1/p' "$tmp/$name")
    sed -n "s/^device memory bytes: parameters \([0-9]*\), gradients \([0-9]*\), optimizer \
\([0-9]*\), activations \([0-9]*\), workspace \([0-9]*\), peak \([0-9]*\)$/$trainable \1 \2 \3 \
\4 \5 \6/p" "$tmp/$name"
}

bench_row() {  # bench_memory arguments
    "$build/test/bench/bench_memory" "$@" | sed -n "s/^[a-z_]* [a-z]*: trainable \([0-9]*\), \
parameters \([0-9]*\), gradients \([0-9]*\), optimizer \([0-9]*\), activations \([0-9]*\), \
workspace \([0-9]*\), peak \([0-9]*\)$/\1 \2 \3 \4 \5 \6 \7/p"
}

row() {  # model training values...
    m=$1 t=$2
    shift 2
    [ $# -eq 7 ] || { echo "memory.sh: no memory line for $m, $t"; exit 1; }
    echo "| $m | $t | $1 | $2 | $3 | $4 | $5 | $6 | $7 |"
}

echo "| model | training | trainable parameters | parameters | gradients | optimizer slots | activations | workspace | peak |"
echo "|---|---|---|---|---|---|---|---|---|"
row "char LM" full $(lm_row full --save "$tmp/base.kiln")
row "char LM" "LoRA rank 8" $(lm_row lora --init "$tmp/base.kiln" --lora 8)
row "char LM" "EMA 0.99" $(lm_row ema --ema 0.99)
row "char LM" "half activations" $(lm_row half --activations float16)
row "Dense stack" full $(bench_row full)
row "Dense stack" "LoRA rank 8" $(bench_row lora 8)
row "Dense stack" "EMA 0.99" $(bench_row ema 0.99)
row "Dense stack" "half activations" $(bench_row half)
image="--size $size --batch $batch"
row "seed ResNet" full $(bench_row --model resnet $image full)
row "seed ResNet" "half activations" $(bench_row --model resnet $image half)
row "seed ResNet" "LoRA rank 8 (head)" $(bench_row --model resnet $image lora 8)
missing=""
if /usr/bin/python3 test/importer/export_torchvision.py "$tmp" "$size" resnet50 \
        >"$tmp/export" 2>&1; then
    onnx="--model $tmp/resnet50.onnx --batch $batch"
    row "resnet50 (imported)" full $(bench_row $onnx full)
    row "resnet50 (imported)" "half activations" $(bench_row $onnx half)
    row "resnet50 (imported)" "LoRA rank 8 (fc)" $(bench_row $onnx lora 8)
else
    missing="resnet50: not measured: $(grep -v '^$' "$tmp/export" | tail -n 1)"
fi
echo
echo "device: $POCL_DEVICES (PoCL); bytes held on replica 0's device after one training step;" \
    "seed ResNet and resnet50 at ${size}x${size}x3, batch $batch"
[ -z "$missing" ] || echo "$missing"
