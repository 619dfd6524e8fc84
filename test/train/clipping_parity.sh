#!/bin/sh
# Gradient clipping beside PyTorch (test/train/torch_clipping.py): kiln
# trains a small model 20 steps in each clipping mode (test_clipping
# --dump), PyTorch trains the same from kiln's initial weights on the same
# batches, in float32 and float64. Exits 77 (SKIP) without PyTorch, 1 under
# CI=true. Usage: clipping_parity.sh SOURCE_ROOT TEST_CLIPPING
set -eu
root=$1 exe=$2
. "$root/test/common/missing.sh"
/usr/bin/python3 -c "import torch" 2>/dev/null ||
    skip_missing "no PyTorch (Debian: python3-torch; tools/install_deps.sh --test)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" --dump "$tmp"
/usr/bin/python3 "$root/test/train/torch_clipping.py" "$tmp"
