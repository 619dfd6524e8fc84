#!/bin/sh
# Installs what is missing, builds kiln and trains the seed CNN on
# Fashion-MNIST on the default OpenCL device. Extra arguments go to the
# example (e.g. --epochs 1).
set -eu
cd "$(dirname "$0")/.."
sh tools/install_deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
exec ./build/examples/fashion_mnist "$@"
