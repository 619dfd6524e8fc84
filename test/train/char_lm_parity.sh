#!/bin/sh
# examples/char_lm beside PyTorch (test/bench/torch_char_lm.py) on a tiny
# model: the same initial weights and batches, 30 steps of Adam; kiln's
# losses must stay as close to PyTorch's float64 run as PyTorch's float32 run
# does (times 4). Exits 77 (SKIP) without PyTorch, 1 under CI=true.
# Usage: char_lm_parity.sh SOURCE_ROOT CHAR_LM
set -eu
root=$1 exe=$2
. "$root/test/common/missing.sh"
/usr/bin/python3 -c "import torch" 2>/dev/null ||
    skip_missing "no PyTorch (Debian: python3-torch; tools/install_deps.sh --test)"
text=$("${KILN_PYTHON:-python3}" -c 'import os; print(os.path.dirname(os.__file__))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
POCL_DEVICES=${POCL_DEVICES:-pthread} $exe --blocks 2 --width 32 --heads 2 --context 16 \
    --batch 16 --steps 30 --epochs 1 --val-windows 0 --generate 0 --gelu exact \
    --text "$text" --dump "$tmp"
/usr/bin/python3 "$root/test/bench/torch_char_lm.py" --dump "$tmp" --check 4
