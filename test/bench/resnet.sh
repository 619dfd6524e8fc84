#!/bin/sh
# kiln's seed ResNet (examples/resnet --input S) beside the same architecture
# in PyTorch on the CPU (test/bench/torch_resnet.py): training samples/s at
# 32x32x3 batch 64 and at the seed's 224x224x3 batch 8, on synthetic data.
# This machine's speed drifts between runs, so the two alternate within one
# run (taking turns to go first); the table reports every run, the medians
# and the ratio kiln / PyTorch of the medians. Warm-up steps (kernel builds,
# first allocations, oneDNN's primitive cache) are untimed in both.
#
# Environment (defaults in brackets):
#   BENCH_REPEATS [5]          rounds per shape
#   BENCH_STEPS_32 [20]        timed steps per run at 32x32, batch 64
#   BENCH_STEPS_224 [6]        timed steps per run at 224x224, batch 8
#   BENCH_WARMUP [2]           untimed steps first, each run
#   BENCH_BUILD_DIR [build]    meson build folder, set up if missing
# POCL_DEVICES passes through (default here: pthread, PoCL's multi-threaded
# CPU device; kiln uses its first device). The last line is
#   resnet kiln/pytorch: 32x32 b64 R1, 224x224 b8 R2
set -eu
cd "$(dirname "$0")/../.."
repeats=${BENCH_REPEATS:-5}
steps32=${BENCH_STEPS_32:-20}
steps224=${BENCH_STEPS_224:-6}
warmup=${BENCH_WARMUP:-2}
build=${BENCH_BUILD_DIR:-build}
export POCL_DEVICES="${POCL_DEVICES:-pthread}"

# The peer's packages, where missing (as run.sh): PyTorch, and OpenBLAS
# (Debian's default libblas3 is the reference BLAS).
deps=$(sh tools/install_deps.sh python3-torch libopenblas0-pthread 2>&1) ||
    echo "resnet.sh: could not install the peer's packages; going on without them" >&2
[ -z "$deps" ] || printf '%s\n' "$deps"

[ -f "$build/build.ninja" ] || meson setup "$build"
# Only the example: a test mid-edit elsewhere must not block the benchmark.
ninja -C "$build" examples/resnet >/dev/null

peer=1
why=$(/usr/bin/python3 -c "import torch" 2>&1) || peer=0
[ $peer = 1 ] || echo "PyTorch is not available, kiln's numbers only: $(printf '%s' "$why" | tail -n 1)"
. test/bench/peer_blas.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows          # "shape name rate" a line
: > "$rows"

# Runs one side at one shape and appends its samples/s to $rows; the
# progress bar (stderr) is shown only when the run fails.
run_one() {  # name side batch steps
    if [ "$1" = kiln ]; then
        set -- "$@" "$build/examples/resnet"
    else
        [ $peer = 1 ] || return 0
        set -- "$@" $peer_env /usr/bin/python3 test/bench/torch_resnet.py
    fi
    name=$1 side=$2 batch=$3 steps=$4
    shift 4
    if ! "$@" --input "$side" --batch "$batch" --steps "$steps" --warmup "$warmup" \
            >"$tmp/out" 2>"$tmp/err"; then
        cat "$tmp/out" "$tmp/err" >&2
        echo "resnet.sh: $name failed at ${side}x${side} batch $batch" >&2
        exit 1
    fi
    rate=$(sed -n 's/.*input .*, batch .*: .* s per step, \([0-9.]*\) samples\/s.*/\1/p' "$tmp/out")
    [ -n "$rate" ] || { cat "$tmp/out" >&2; echo "resnet.sh: no samples/s from $name" >&2; exit 1; }
    echo "$side $name $rate" >> "$rows"
    # The parameter counts, once per side: the two must be the same model.
    if [ ! -f "$tmp/params-$name" ]; then
        if [ "$name" = kiln ]; then
            sed -n 's/^Total params: *//p;s/^Non-trainable params: *//p' "$tmp/out" | tr -d , |
                paste -sd' ' > "$tmp/params-$name"
        else
            sed -n 's/^pytorch params: total \([0-9]*\), .*non-trainable \([0-9]*\)/\1 \2/p' \
                "$tmp/out" > "$tmp/params-$name"
        fi
    fi
}

load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
start=$(date +%s)
for shape in "32 64 $steps32" "224 8 $steps224"; do
    set -- $shape
    side=$1 batch=$2 steps=$3
    r=1
    while [ "$r" -le "$repeats" ]; do
        if [ $((r % 2)) = 1 ]; then
            run_one kiln "$side" "$batch" "$steps"
            run_one pytorch "$side" "$batch" "$steps"
        else
            run_one pytorch "$side" "$batch" "$steps"
            run_one kiln "$side" "$batch" "$steps"
        fi
        r=$((r + 1))
    done
done
echo "took $(($(date +%s) - start)) s; 1-minute load average $load_start at the start," \
    "$(load) at the end, on $(getconf _NPROCESSORS_ONLN) cores"
echo "command: POCL_DEVICES='$POCL_DEVICES' BENCH_REPEATS=$repeats BENCH_STEPS_32=$steps32" \
    "BENCH_STEPS_224=$steps224 BENCH_WARMUP=$warmup BENCH_BUILD_DIR=$build sh test/bench/resnet.sh"
echo "  kiln:    $build/examples/resnet --input S --batch B --steps N --warmup $warmup"
[ $peer = 0 ] || echo "  pytorch: $peer_env /usr/bin/python3 test/bench/torch_resnet.py --input S --batch B" \
    "--steps N --warmup $warmup   (torch.set_num_threads(2), channels-last)"
kp=$(cat "$tmp/params-kiln" 2>/dev/null || echo "? ?")
echo "parameters (total, of which batch norm's moving statistics): kiln $kp," \
    "pytorch $(cat "$tmp/params-pytorch" 2>/dev/null || echo "-")"
if [ $peer = 1 ] && [ "$kp" != "$(cat "$tmp/params-pytorch")" ]; then
    echo "resnet.sh: the two models' parameter counts differ" >&2
    exit 1
fi
echo

/usr/bin/python3 - "$rows" "$repeats" "$steps32" "$steps224" "$warmup" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
repeats, steps = sys.argv[2], {"32": sys.argv[3], "224": sys.argv[4]}
batch = {"32": 64, "224": 8}

def runs(side, name):
    return [float(r[2]) for r in rows if r[0] == side and r[1] == name]

print("training samples/s, medians of %s run(s) each, kiln and PyTorch alternating "
      "(%s warm-up steps untimed)" % (repeats, sys.argv[5]))
print("| input, batch | timed steps | kiln | PyTorch | kiln / PyTorch | kiln, every run "
      "| PyTorch, every run |")
print("|---|---|---|---|---|---|---|")
ratios = {}
for side in ("32", "224"):
    k, t = runs(side, "kiln"), runs(side, "pytorch")
    mk = statistics.median(k) if k else None
    mt = statistics.median(t) if t else None
    ratios[side] = "%.2f" % (mk / mt) if mk and mt else "-"
    print("| %sx%sx3, %d | %s | %s | %s | %s | %s | %s |" % (
        side, side, batch[side], steps[side], "%.1f" % mk if mk else "-",
        "%.1f" % mt if mt else "-", ratios[side], ", ".join("%.1f" % v for v in k),
        ", ".join("%.1f" % v for v in t) or "-"))
print()
print("resnet kiln/pytorch: 32x32 b64 %s, 224x224 b8 %s" % (ratios["32"], ratios["224"]))
PY
