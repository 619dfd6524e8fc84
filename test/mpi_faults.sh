#!/bin/sh
# Runs test_multi_worker_faults as 2 MPI processes (Open MPI's mpirun) and
# checks that the ranks that should survive reported the fault and tore
# down ("rank R: ok"). Usage: mpi_faults.sh PROGRAM stall|kill
#   stall: rank 1 stalls; both ranks must report;
#   kill:  rank 1 dies; rank 0 must report (mpirun is told not to end the
#          job when a process dies, as a scheduler that lets the others
#          notice would).
# mpirun's own status is not used: after an abandoned collective kiln leaves
# MPI unfinalised, which mpirun reports as a failed job. Exits 77 without
# mpirun.
set -u
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (Debian: openmpi-bin)"; exit 77; }
prog=$1
mode=$2
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
# Every process gets kiln's and PoCL's settings that are set here.
for v in POCL_DEVICES KILN_CACHE_DIR; do
    eval "isset=\${$v+x}"
    [ -n "$isset" ] && root="$root -x $v"
done
# Under tools/sanitize.sh: Open MPI's plugins (dlopen'd, unloaded at exit)
# leak memory that LSan cannot attribute to a module to suppress.
if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export ASAN_OPTIONS
    root="$root -x ASAN_OPTIONS"
fi
out=$(timeout 120 mpirun $root --oversubscribe --mca orte_abort_on_non_zero_status 0 -np 2 \
      "$prog" "$mode" 2>&1)
echo "$out"
ranks="0 1"
[ "$mode" = kill ] && ranks="0"
for r in $ranks; do
    echo "$out" | grep -q "^rank $r: ok$" || { echo "FAIL: rank $r did not report ok"; exit 1; }
done
