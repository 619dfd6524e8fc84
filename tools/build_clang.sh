#!/bin/sh
# Builds kiln, its examples and tests with clang as C99 at warning_level=3
# with warnings as errors, and runs the test suite on that build.
set -eu
cd "$(dirname "$0")/.."
sh tools/install_deps.sh --test clang
dir=build-clang
[ -f "$dir/build.ninja" ] || CC=clang CXX=clang++ meson setup "$dir" -Dwerror=true > /dev/null
ninja -C "$dir"
# The suite zoo (torchvision's heavy networks) runs once, on the gcc build.
# Further arguments go to meson test (.ci/run: --no-suite consumer).
meson test -C "$dir" --num-processes 2 --print-errorlogs --no-suite zoo "$@"
