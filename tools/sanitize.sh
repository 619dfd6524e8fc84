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
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime mistakes some dynamic
# TLS blocks (PoCL's kernel libraries, loaded with dlopen) for a pre-2.25
# glibc header and reads a bogus range from them, so the leak checker's
# tracer crashes at exit ("Tracer caught signal 11") with no leak to report.
# Leaks are still found without it; only dynamic TLS stops being a root.
export ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0
export LSAN_OPTIONS="suppressions=$(pwd)/test/lsan.supp"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The suite consumer rebuilds kiln without sanitizers; the suite zoo
# (torchvision's heavy networks, tens of minutes unsanitized) runs once in
# .ci/run; the rest all run.
meson test -C "$dir" --num-processes 2 --print-errorlogs --no-suite consumer --no-suite zoo
