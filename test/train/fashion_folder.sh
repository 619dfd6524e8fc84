#!/bin/sh
# End to end from an image folder: Fashion-MNIST written as PNG files by
# tools/fashion_png_folder.py (the first 10000 training and 10000 test
# images), the seed CNN trained 2 epochs by examples/fashion_mnist from the
# folder, and its test accuracy required to reach 0.83 (0.853 measured).
# Usage: fashion_folder.sh SOURCE_DIR FASHION_MNIST_EXAMPLE
set -eu
src=$1
example=$2
. "$src/test/common/missing.sh"
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
    skip_missing "Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$src/tools/fashion_png_folder.py" "$work" --limit 10000
"$example" --epochs 2 --data-format folder --data "$work" | tee "$work/log"
accuracy=$(sed -n 's/^test accuracy: //p' "$work/log")
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.83 else 1)" ||
    { echo "test accuracy $accuracy is below 0.83"; exit 1; }
