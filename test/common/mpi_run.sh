#!/bin/sh
# Runs an MPI test program as MPI_PROCESSES (default 2) processes on this
# machine (loopback, more processes than cores allowed, as root when run as
# root), passing kiln's and PoCL's settings on. Exits 77 (meson: skipped)
# without mpirun, 1 under CI=true.
set -eu
. "$(dirname "$0")/missing.sh"
command -v mpirun >/dev/null 2>&1 || skip_missing "mpirun not found (Debian: openmpi-bin)"
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
# Every process gets kiln's and PoCL's settings that are set here.
for v in POCL_DEVICES KILN_CACHE_DIR KILN_STRATEGY KILN_TEST_TIME_SCALE; do
    eval "isset=\${$v+x}"
    [ -n "$isset" ] && root="$root -x $v"
done
# Under tools/sanitize.sh: Open MPI's plugins (dlopen'd, unloaded at exit)
# leak memory that LSan cannot attribute to a module to suppress, so leak
# checking is off here; kiln's own paths are leak-checked by the other tests.
if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
    root="$root -x ASAN_OPTIONS"
fi
exec mpirun $root --oversubscribe -np "${MPI_PROCESSES:-2}" "$@"
