#!/bin/sh
# Data-parallel scaling on one machine: training samples/s of the seed CNN
# with the mirrored strategy on two PoCL "basic" devices (each computes on the
# thread that drives it) over one, alternating in one run; also the reducer
# bandwidth against memcpy, and how much of the reduction hid behind
# backward. BENCH_REPEATS (default 3), BENCH_STEPS (default 150).
set -eu
cd "$(dirname "$0")/../.."
[ -f build/build.ninja ] || meson setup build
ninja -C build >/dev/null
repeats=${BENCH_REPEATS:-3}
steps=${BENCH_STEPS:-150}
batch=${BENCH_BATCH:-128}
mkdir -p bench-results
out=bench-results/scaling.jsonl
: > "$out"
POCL_DEVICES="basic" sh test/bench/tune.sh build
r=0
while [ $r -lt "$repeats" ]; do
    POCL_DEVICES="basic" ./build/test/bench/bench_train --batch "$batch" --steps "$steps" \
        --json "$out"
    POCL_DEVICES="basic basic" ./build/test/bench/bench_train --batch "$batch" --steps "$steps" \
        --json "$out"
    ./build/test/bench/bench_reducer 1 >> "$out"
    ./build/test/bench/bench_reducer 2 >> "$out"
    r=$((r + 1))
done
echo "command: BENCH_REPEATS=$repeats BENCH_STEPS=$steps BENCH_BATCH=$batch sh test/bench/scaling.sh"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
def med(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else None
one = [r for r in rows if r["name"] == "kiln" and r["replicas"] == 1]
two = [r for r in rows if r["name"] == "kiln" and r["replicas"] == 2]
a, b = med(one, "train_samples_per_s"), med(two, "train_samples_per_s")
print("| what | value |")
print("|---|---|")
print("| samples/s, 1 basic device | %.0f |" % a)
print("| samples/s, 2 basic devices, mirrored | %.0f |" % b)
print("| scaling 2 / 1 | %.2f |" % (b / a))
print("| reducer time per step, 2 replicas | %.2f ms |" % med(two, "reduce_ms_per_step"))
print("| reduction hidden behind backward | %.0f%% |" % (100 * med(two, "reduce_hidden_fraction")))
for t in (1, 2):
    red = [r for r in rows if r["name"] == "reducer" and r["threads"] == t]
    print("| reducer, 64 MiB x 2 replicas, %d thread(s): GB/s (memcpy GB/s) | %.2f (%.2f) |"
          % (t, med(red, "reduce_gb_s"), med(red, "memcpy_gb_s")))
    print("| reducer / memcpy, %d thread(s) | %.2f |" % (t, med(red, "ratio")))
PY
