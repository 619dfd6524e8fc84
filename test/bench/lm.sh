#!/bin/sh
# kiln's character language model (examples/char_lm) beside the same model in
# PyTorch on the CPU (test/bench/torch_char_lm.py --bench, 2 threads):
# training tokens/s at the example's default size (4 blocks, width 128, 4
# heads, context 64, batch 32, exact GELU). This machine's speed drifts between
# runs, so the two alternate within one run (taking turns to go first); the
# table lists every run, the medians and the ratio kiln / PyTorch of the
# medians. Warm-up steps (kernel builds, first allocations) are untimed in
# both. kiln trains on the example's text; PyTorch on random ids of the same
# vocabulary (the ids do not change the work).
#
# Environment (defaults in brackets):
#   BENCH_REPEATS [5]          rounds
#   BENCH_STEPS [20]           timed steps per run
#   BENCH_WARMUP [3]           untimed steps first, each run
#   BENCH_CONTEXT [64], BENCH_BATCH [32], BENCH_WIDTH [128], BENCH_BLOCKS [4]
#   BENCH_BUILD_DIR [build]    meson build folder, set up if missing
# POCL_DEVICES passes through (default here: pthread, PoCL's multi-threaded
# CPU device; kiln uses its first device). The last line is
#   lm kiln/pytorch tokens/s: R
set -eu
cd "$(dirname "$0")/../.."
repeats=${BENCH_REPEATS:-5}
steps=${BENCH_STEPS:-20}
warmup=${BENCH_WARMUP:-3}
context=${BENCH_CONTEXT:-64}
batch=${BENCH_BATCH:-32}
width=${BENCH_WIDTH:-128}
blocks=${BENCH_BLOCKS:-4}
build=${BENCH_BUILD_DIR:-build}
export POCL_DEVICES="${POCL_DEVICES:-pthread}"
model="--blocks $blocks --width $width --heads 4 --context $context --batch $batch --gelu exact"

[ -f "$build/build.ninja" ] || meson setup "$build"
# Only the example: a test mid-edit elsewhere must not block the benchmark.
ninja -C "$build" examples/char_lm >/dev/null

peer=1
why=$(/usr/bin/python3 -c "import torch" 2>&1) || peer=0
[ $peer = 1 ] ||
    echo "PyTorch is not available, kiln's numbers only: $(printf '%s' "$why" | tail -n 1)"
. test/bench/peer_blas.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows          # "name tokens/s" a line
: > "$rows"

run_one() {  # name
    if [ "$1" = kiln ]; then
        set -- kiln "$build/examples/char_lm" $model --steps "$steps" --warmup "$warmup" \
            --epochs 1 --val-windows 0 --generate 0
        pattern='s/^epoch 1\/1: .*, \([0-9.]*\) tokens\/s$/\1/p'
    else
        [ $peer = 1 ] || return 0
        set -- pytorch $peer_env /usr/bin/python3 test/bench/torch_char_lm.py --bench $model \
            --steps "$steps" --warmup "$warmup" --threads 2
        pattern='s/^pytorch: .*, \([0-9.]*\) tokens\/s$/\1/p'
    fi
    name=$1
    shift
    if ! "$@" >"$tmp/out" 2>&1; then
        cat "$tmp/out" >&2
        echo "lm.sh: $name failed" >&2
        exit 1
    fi
    rate=$(sed -n "$pattern" "$tmp/out")
    [ -n "$rate" ] || { cat "$tmp/out" >&2; echo "lm.sh: no tokens/s from $name" >&2; exit 1; }
    echo "$name $rate" >> "$rows"
    if [ ! -f "$tmp/params-$name" ]; then
        if [ "$name" = kiln ]; then
            sed -n 's/^model: .*: \([0-9]*\) parameters.*$/\1/p' "$tmp/out" > "$tmp/params-$name"
        else
            sed -n 's/^pytorch params: \([0-9]*\)$/\1/p' "$tmp/out" > "$tmp/params-$name"
        fi
    fi
}

load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
start=$(date +%s)
r=1
while [ "$r" -le "$repeats" ]; do
    if [ $((r % 2)) = 1 ]; then
        run_one kiln
        run_one pytorch
    else
        run_one pytorch
        run_one kiln
    fi
    r=$((r + 1))
done
echo "took $(($(date +%s) - start)) s; 1-minute load average $load_start at the start," \
    "$(load) at the end, on $(getconf _NPROCESSORS_ONLN) cores"
echo "command: POCL_DEVICES='$POCL_DEVICES' BENCH_REPEATS=$repeats BENCH_STEPS=$steps" \
    "BENCH_WARMUP=$warmup BENCH_CONTEXT=$context BENCH_BATCH=$batch BENCH_WIDTH=$width" \
    "BENCH_BLOCKS=$blocks sh test/bench/lm.sh"
echo "  kiln:    $build/examples/char_lm $model --steps $steps --warmup $warmup --epochs 1" \
    "--val-windows 0 --generate 0"
[ $peer = 0 ] || echo "  pytorch: $peer_env /usr/bin/python3 test/bench/torch_char_lm.py --bench $model" \
    "--steps $steps --warmup $warmup --threads 2"
kp=$(cat "$tmp/params-kiln" 2>/dev/null || echo "?")
echo "parameters: kiln $kp, pytorch $(cat "$tmp/params-pytorch" 2>/dev/null || echo "-")"
if [ $peer = 1 ] && [ "$kp" != "$(cat "$tmp/params-pytorch")" ]; then
    echo "lm.sh: the two models' parameter counts differ" >&2
    exit 1
fi
echo

/usr/bin/python3 - "$rows" "$repeats" "$steps" "$warmup" "$context" "$batch" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
repeats, steps, warmup, context, batch = sys.argv[2:7]

def runs(name):
    return [float(r[1]) for r in rows if r[0] == name]

k, t = runs("kiln"), runs("pytorch")
mk = statistics.median(k) if k else None
mt = statistics.median(t) if t else None
ratio = "%.2f" % (mk / mt) if mk and mt else "-"
print("training tokens/s, medians of %s run(s) each, kiln and PyTorch alternating "
      "(%s warm-up steps untimed)" % (repeats, warmup))
print("| context, batch | timed steps | kiln | PyTorch | kiln / PyTorch | kiln, every run "
      "| PyTorch, every run |")
print("|---|---|---|---|---|---|---|")
print("| %s, %s | %s | %s | %s | %s | %s | %s |" % (
    context, batch, steps, "%.0f" % mk if mk else "-", "%.0f" % mt if mt else "-", ratio,
    ", ".join("%.0f" % v for v in k), ", ".join("%.0f" % v for v in t) or "-"))
print()
print("lm kiln/pytorch tokens/s: %s" % ratio)
PY
