#!/bin/sh
# Side-by-side training and inference throughput, kiln vs PyTorch (CPU), on
# the seed CNN; the two alternate within one run, since this machine's speed
# drifts by up to 20% between runs. Prints medians and ratios, and keeps the
# raw JSON in bench-results/. BENCH_REPEATS (default 3) sets the rounds.
set -eu
cd "$(dirname "$0")/../.."
# The peer needs PyTorch and an optimised BLAS (Debian's default libblas3 is
# the reference implementation, which makes PyTorch's dense layers 4x slower).
sh tools/install_deps.sh python3-torch libopenblas0-pthread
[ -f build/build.ninja ] || meson setup build
ninja -C build >/dev/null
repeats=${BENCH_REPEATS:-3}
steps=${BENCH_STEPS:-150}
mkdir -p bench-results
out=bench-results/results.jsonl
: > "$out"
have_torch=1
/usr/bin/python3 -c "import torch" 2>/dev/null || have_torch=0
[ $have_torch = 1 ] || echo "PyTorch (python3-torch) is not installed: kiln's numbers only"
for batch in 32 128; do
    r=0
    while [ $r -lt "$repeats" ]; do
        ./build/test/bench/bench_train --batch $batch --steps "$steps" --eval >> "$out"
        if [ $have_torch = 1 ]; then
            /usr/bin/python3 test/bench/torch_seed_cnn.py --batch $batch --steps "$steps" \
                --eval >> "$out"
        fi
        r=$((r + 1))
    done
done
echo "command: BENCH_REPEATS=$repeats BENCH_STEPS=$steps sh test/bench/run.sh"
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
def med(name, batch, key):
    v = [r[key] for r in rows if r["name"] == name and r["batch"] == batch and r[key]]
    return statistics.median(v) if v else None
print("| batch | metric | kiln samples/s | PyTorch samples/s | kiln / PyTorch |")
print("|---|---|---|---|---|")
for batch in sorted({r["batch"] for r in rows}):
    for key, label in (("train_samples_per_s", "training"), ("eval_samples_per_s", "inference")):
        k, t = med("kiln", batch, key), med("pytorch", batch, key)
        ratio = "%.2f" % (k / t) if k and t else "-"
        print("| %d | %s | %s | %s | %s |" % (batch, label, "%.0f" % k if k else "-",
                                              "%.0f" % t if t else "-", ratio))
PY
