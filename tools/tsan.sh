#!/bin/sh
# Builds kiln with ThreadSanitizer and runs the tests under it: the worker
# crews of every strategy (test_threads, test_strategies, test_pipeline,
# test_parameter_server, test_faults, test_nonfinite, the ResNet mirrored
# runs), the reducer's threads, the diagnostics' per-thread slots, and the
# MPI tests (each rank is a TSan process). The first report stops its test
# and fails the run; reports wholly inside PoCL or Open MPI, which are not
# instrumented, are suppressed by test/tsan.supp.
set -eu
cd "$(dirname "$0")/.."
dir=build-tsan
# The default compiler's TSan (gcc 12's libtsan).
[ -f "$dir/build.ninja" ] || meson setup "$dir" -Db_sanitize=thread -Db_lundef=false > /dev/null
ninja -C "$dir" -j2 > /dev/null
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4"
export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$(pwd)/test/tsan.supp"
# The tests' own watchdogs (test_seconds in test/common/harness.h) stretch
# as meson's timeouts do below, and more: an MPI test's four TSan processes
# on two cores exceeded its 60 s step watchdog.
export KILN_TEST_TIME_SCALE=5
# This TSan (gcc 12) expects the kernel's default ASLR entropy (28 bits
# here, where it runs as is); with more it stops at start with "unexpected
# memory mapping". Then every test runs with randomisation off (setarch -R
# is inherited by meson's children).
run=""
if "$dir/test/base/test_diag" 2>&1 | grep -q 'unexpected memory mapping'; then
    run="setarch $(uname -m) -R"
fi
# Named tests, or all but the suite consumer (its tests rebuild kiln without
# sanitizers). Two at a time on two cores: the whole pass took 5.5 min on
# an idle 2-core machine and 11 min, build included, beside another suite.
# The time goes into PoCL's kernels, which TSan does not instrument: the
# slowest tests take up to 4.6x their usual time, and twice that on a busy
# machine (test_parameter_server 120-270 s of its 600, the mirrored ResNets
# 80-134 s of 300), hence the timeouts' multiplier of 2. The timeouts also
# bound a hang: when a crash and a race are reported at once, this libtsan
# can deadlock between its two reports (seen with a deliberate race that
# also crashed); the test then times out and fails.
[ $# -gt 0 ] || set -- --no-suite consumer --no-suite zoo   # zoo: once, in .ci/run
status=0
$run meson test -C "$dir" --num-processes 2 --timeout-multiplier 2 --print-errorlogs "$@" \
    || status=$?
# mpi_faults.sh ignores mpirun's status by design: a report in any process
# still fails the pass.
if grep -q 'WARNING: ThreadSanitizer' "$dir/meson-logs/testlog.txt"; then
    echo "tsan.sh: ThreadSanitizer reported (see $dir/meson-logs/testlog.txt)"
    status=1
fi
exit $status
