#!/bin/sh
# Half-precision activation storage beside PyTorch
# (test/train/torch_half_storage.py): kiln trains 5 SGD steps with
# activation_storage float16 and with float32 (test_half_storage --dump),
# PyTorch the same network from kiln's initial weights in float64, with
# every layer output rounded to half where kiln rounds it, and without.
# Exits 77 (SKIP) without PyTorch, 1 under CI=true.
# Usage: half_storage_parity.sh SOURCE_ROOT TEST_HALF_STORAGE
set -eu
root=$1 exe=$2
. "$root/test/common/missing.sh"
/usr/bin/python3 -c "import torch" 2>/dev/null ||
    skip_missing "no PyTorch (Debian: python3-torch; tools/install_deps.sh --test)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$exe" --dump "$tmp"
/usr/bin/python3 "$root/test/train/torch_half_storage.py" "$tmp"
