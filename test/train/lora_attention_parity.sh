#!/bin/sh
# LoRA on MultiHeadAttention beside PyTorch (test/train/torch_lora_attention.py):
# kiln trains 5 SGD steps (test_lora_attention --dump), PyTorch the same
# from kiln's initial weights with the adapted kernels written by hand:
# LoRA's default targets (query, value), then key and attention_output.
# Exits 77 (SKIP) without PyTorch, 1 under CI=true.
# Usage: lora_attention_parity.sh SOURCE_ROOT TEST_LORA_ATTENTION
set -eu
root=$1 exe=$2
. "$root/test/common/missing.sh"
/usr/bin/python3 -c "import torch" 2>/dev/null ||
    skip_missing "no PyTorch (Debian: python3-torch; tools/install_deps.sh --test)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" --dump "$tmp"
/usr/bin/python3 "$root/test/train/torch_lora_attention.py" "$tmp" query,value
rm -f "$tmp"/*
"$exe" --dump "$tmp" key,attention_output
/usr/bin/python3 "$root/test/train/torch_lora_attention.py" "$tmp" key,attention_output
