#!/bin/sh
# The quick start's question: does a second device pay off? One PoCL pthread
# device at batch 32 against two basic devices at per-replica batch 32
# (global 64, what examples/quickstart.sh runs), the seed CNN on
# Fashion-MNIST, alternating (taking turns to go first); training samples/s
# of each run as examples/fashion_mnist prints it.
#
# Environment (defaults in brackets):
#   BENCH_REPEATS [3]   runs of each
#   BENCH_EPOCHS [1]    epochs per run (60,000 images each)
#   BENCH_BUILD_DIR [build]
set -eu
cd "$(dirname "$0")/../.."
repeats=${BENCH_REPEATS:-3}
epochs=${BENCH_EPOCHS:-1}
build=${BENCH_BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build" examples/fashion_mnist >/dev/null

rate() { sed -n 's/^training time: .*, \([0-9]*\) samples\/s$/\1/p'; }
one() {
    POCL_DEVICES=pthread "$build/examples/fashion_mnist" --epochs "$epochs" --batch 32 \
        2>/dev/null | rate >> "$tmp/one"
}
two() {
    POCL_DEVICES="basic basic" "$build/examples/fashion_mnist" --epochs "$epochs" \
        --per-replica-batch 32 2>/dev/null | rate >> "$tmp/two"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
r=1
while [ "$r" -le "$repeats" ]; do
    if [ $((r % 2)) = 1 ]; then one; two; else two; one; fi
    r=$((r + 1))
done
echo "1-minute load average $load_start at the start, $(load) at the end," \
    "on $(getconf _NPROCESSORS_ONLN) cores"
echo "command: BENCH_REPEATS=$repeats BENCH_EPOCHS=$epochs sh test/bench/quickstart_devices.sh"
/usr/bin/python3 - "$tmp/one" "$tmp/two" <<'PY'
import statistics, sys
one, two = ([float(v) for v in open(p).read().split()] for p in sys.argv[1:3])
print("| devices | batch | samples/s, median | every run |")
print("|---|---|---|---|")
print("| 1 PoCL pthread | 32 | %.0f | %s |" % (statistics.median(one), ", ".join("%.0f" % v for v in one)))
print("| 2 PoCL basic, mirrored | per-replica 32 (global 64) | %.0f | %s |"
      % (statistics.median(two), ", ".join("%.0f" % v for v in two)))
print("two devices / one: %.2f" % (statistics.median(two) / statistics.median(one)))
PY
