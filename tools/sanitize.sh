#!/bin/sh
# Builds kiln with AddressSanitizer and UndefinedBehaviorSanitizer and runs
# the tests under them, leak checking on. Leaks inside the OpenCL driver
# stack (PoCL, LLVM, the ICD loader, CLBlast) are suppressed by
# test/lsan.supp; anything in kiln fails the run.
set -eu
cd "$(dirname "$0")/.."
dir=build-asan
[ -f "$dir/build.ninja" ] || meson setup "$dir" -Db_sanitize=address,undefined -Db_lundef=false \
    > /dev/null
ninja -C "$dir" > /dev/null
export ASAN_OPTIONS=detect_leaks=1
export LSAN_OPTIONS="suppressions=$(pwd)/test/lsan.supp"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The suite consumer rebuilds kiln without sanitizers; the rest all run.
meson test -C "$dir" --num-processes 2 --print-errorlogs --no-suite consumer
