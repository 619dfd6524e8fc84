#!/bin/sh
# Searches the GEMM parameters of every device kiln will use (KILN_DEVICES
# chooses them: CLBlast's XgemmDirect parameters, and on a CPU kiln's own
# GEMM's cache budget), ahead of the first training run, and stores them in
# kiln's cache folder (KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
# ~/.cache/kiln), where every later run reads them. Prints each
# candidate's time (stderr) and each device's result. It is `kiln tune`,
# built first if need be.
set -eu
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build > /dev/null
ninja -C build cli/kiln > /dev/null
exec build/cli/kiln tune "$@"
