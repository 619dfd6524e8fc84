#!/bin/sh
# kiln beside its peer, PyTorch on the CPU, on the seed CNN: training and
# evaluation samples/s at batch 32 and 128. This machine's speed drifts by up
# to 20% between runs, so the two alternate within one run (taking turns to go
# first) and the table reports medians and the ratio kiln / PyTorch.
# Then kiln's GEMM beside OpenBLAS (bench_gemm): GFLOPS on the seed CNN's
# GEMM shapes, as ratios to OpenBLAS and to the device's peak.
#
# Environment (defaults in brackets):
#   BENCH_REPEATS [3]    rounds per batch size
#   BENCH_STEPS [200]    timed training steps per run
#   BENCH_WARMUP [20]    warm-up steps per run
#   BENCH_EPOCHS [0]     >0: also train that many full epochs and report test accuracy
#   BENCH_BUILD_DIR [build]  meson build folder, set up if missing
#   KILN_GEMM_TUNING [stored]  off: CLBlast's default GEMM parameters (before/after)
# POCL_DEVICES and KILN_DEVICES pass through untouched (default: PoCL's
# pthread device). Raw results: bench-results/results.json, one JSON object a
# line, rewritten by each run.
set -eu
cd "$(dirname "$0")/../.."
repeats=${BENCH_REPEATS:-3}
steps=${BENCH_STEPS:-200}
warmup=${BENCH_WARMUP:-20}
epochs=${BENCH_EPOCHS:-0}
build=${BENCH_BUILD_DIR:-build}

# The peers' packages, where missing: PyTorch, and OpenBLAS for bench_gemm and
# for PyTorch itself (Debian's default libblas3 is the reference BLAS, with
# which PyTorch runs about 4x slower). Without them the peers are left out.
deps=$(sh tools/install_deps.sh python3-torch libopenblas0-pthread libopenblas-dev 2>&1) ||
    echo "run.sh: could not install the peers' packages; going on without them" >&2
[ -z "$deps" ] || printf '%s\n' "$deps"
# A build folder set up before OpenBLAS was installed would not look again.
case $deps in
    *"install_deps: installing"*)
        [ ! -f "$build/build.ninja" ] || meson setup --reconfigure "$build" >/dev/null ;;
esac

[ -f "$build/build.ninja" ] || meson setup "$build"
# Only the benchmark's target: a test mid-edit elsewhere must not block it.
ninja -C "$build" test/bench/bench_train test/bench/bench_gemm >/dev/null

out=bench-results/results.json
mkdir -p bench-results
: > "$out"

# kiln's GEMM parameters searched for this device first (once; stored).
sh test/bench/tune.sh "$build"

peer=1
why=$(/usr/bin/python3 -c "import torch" 2>&1) || peer=0
if [ $peer = 0 ]; then
    echo "PyTorch is not available, kiln's numbers only: $(printf '%s' "$why" | tail -n 1)"
fi
. test/bench/peer_blas.sh

opts="--steps $steps --warmup $warmup --eval --epochs-accuracy $epochs --json $out"
kiln_cmd="$build/test/bench/bench_train $opts"
peer_cmd="$peer_env /usr/bin/python3 test/bench/torch_seed_cnn.py $opts"

run_kiln() {
    $kiln_cmd --batch "$1" || { echo "run.sh: bench_train failed (batch $1)" >&2; exit 1; }
}

run_peer() {
    [ $peer = 1 ] || return 0
    $peer_cmd --batch "$1" || { echo "run.sh: torch_seed_cnn.py failed (batch $1)" >&2; exit 1; }
}

# Other work on the machine skews the ratio (PyTorch's two OpenMP threads
# suffer most when cores are oversubscribed), so the load goes in the report.
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
start=$(date +%s)
for batch in 32 128; do
    r=1
    while [ "$r" -le "$repeats" ]; do
        if [ $((r % 2)) = 1 ]; then
            run_kiln "$batch"
            run_peer "$batch"
        else
            run_peer "$batch"
            run_kiln "$batch"
        fi
        r=$((r + 1))
    done
done
echo "took $(($(date +%s) - start)) s; 1-minute load average $load_start at the start," \
    "$(load) at the end, on $(getconf _NPROCESSORS_ONLN) cores"

echo
# Device selection only where the caller set it (unset and empty differ for PoCL).
devices=""
[ -z "${POCL_DEVICES+set}" ] || devices="POCL_DEVICES='$POCL_DEVICES' "
[ -z "${KILN_DEVICES+set}" ] || devices="${devices}KILN_DEVICES='$KILN_DEVICES' "
echo "command: ${devices}BENCH_REPEATS=$repeats BENCH_STEPS=$steps BENCH_WARMUP=$warmup" \
    "BENCH_EPOCHS=$epochs BENCH_BUILD_DIR=$build sh test/bench/run.sh"
echo "  kiln:    $kiln_cmd --batch B"
[ $peer = 0 ] || echo "  pytorch: $peer_cmd --batch B"
echo

/usr/bin/python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]

def med(name, batch, key):
    v = [r[key] for r in rows if r["name"] == name and r["batch"] == batch
         and r.get(key) is not None]
    return statistics.median(v) if v else None

def cell(v, fmt):
    return fmt % v if v is not None else "-"

print("medians of %s run(s) each, kiln and PyTorch alternating" % sys.argv[2])
print("| batch | metric | kiln | PyTorch | kiln / PyTorch |")
print("|---|---|---|---|---|")
metrics = [("train_samples_per_s", "training samples/s", "%.0f"),
           ("eval_samples_per_s", "eval samples/s", "%.0f"),
           ("startup_s", "startup s", "%.2f"),
           ("accuracy", "test accuracy", "%.4f")]
for batch in sorted({r["batch"] for r in rows}):
    for key, label, fmt in metrics:
        k, t = med("kiln", batch, key), med("pytorch", batch, key)
        if k is None and t is None:
            continue
        ratio = "%.2f" % (k / t) if k is not None and t else "-"
        print("| %d | %s | %s | %s | %s |" % (batch, label, cell(k, fmt), cell(t, fmt), ratio))
for name in ("kiln", "pytorch"):
    dev = [r["device"] for r in rows if r["name"] == name]
    if dev:
        print("%s device: %s" % (name, dev[0]))
print()
print("kiln device memory after training (replica 0), MiB")
print("| batch | peak | parameters + gradients + optimizer state + activations | layers' workspace |")
print("|---|---|---|---|")
for batch in sorted({r["batch"] for r in rows}):
    print("| %d | %s | %s | %s |" % (batch, cell(med("kiln", batch, "memory_peak_mib"), "%.1f"),
          cell(med("kiln", batch, "memory_least_mib"), "%.1f"),
          cell(med("kiln", batch, "memory_workspace_mib"), "%.1f")))
PY

echo
# Start-up to the end of the first training step. Cold: an empty kiln cache
# folder and the drivers' own kernel caches off (PoCL's, NVIDIA's), so every
# kernel compiles and GEMM runs untuned; warm: the same folder again, every
# cache full.
startup() {
    "$build/test/bench/bench_train" --batch 128 --steps 1 --warmup 1 --limit 256 |
        sed -n 's/.*startup \([0-9.]*\) s.*/\1/p'
}
fresh=$(mktemp -d)
cold=$(POCL_KERNEL_CACHE=0 CUDA_CACHE_DISABLE=1 KILN_CACHE_DIR=$fresh startup)
# (the first warm run fills the drivers' caches the cold one left empty)
KILN_CACHE_DIR=$fresh startup >/dev/null
warm=$(KILN_CACHE_DIR=$fresh startup)
rm -rf "$fresh"
echo "kiln start-up, context creation to the end of the first step: cold $cold s, warm $warm s"

echo
# OpenBLAS gets as many threads as there are cores, all of which PoCL's
# pthread device uses; set for bench_gemm only.
blas_threads=$(getconf _NPROCESSORS_ONLN)
echo "GEMM efficiency: OpenBLAS with OPENBLAS_NUM_THREADS=$blas_threads (the number of cores)"
echo "command: ${devices}$peer_env OPENBLAS_NUM_THREADS=$blas_threads $build/test/bench/bench_gemm --json $out"
$peer_env OPENBLAS_NUM_THREADS=$blas_threads "$build/test/bench/bench_gemm" --json "$out" ||
    { echo "run.sh: bench_gemm failed" >&2; exit 1; }
