#!/bin/sh
# Runs test_multi_worker_faults as 2 MPI processes and checks that each
# rank reported the stall and tore down ("rank R: ok"). mpirun's own status
# is not used: after an abandoned collective kiln leaves MPI unfinalised,
# which mpirun reports as a failed job. Exits 77 without mpirun.
set -u
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (Debian: openmpi-bin)"; exit 77; }
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
# Every process gets kiln's and PoCL's settings that are set here.
for v in POCL_DEVICES KILN_CACHE_DIR KILN_STRATEGY; do
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
out=$(timeout 120 mpirun $root --oversubscribe -np 2 "$@" 2>&1)
echo "$out"
for r in 0 1; do
    echo "$out" | grep -q "^rank $r: ok$" || { echo "FAIL: rank $r did not report ok"; exit 1; }
done
