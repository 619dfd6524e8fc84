#!/bin/sh
# Imported torchvision networks (test/importer/export_torchvision.py: random
# weights, 10 classes, batch norm kept) in kiln beside the same networks in
# PyTorch (test/bench/torch_zoo.py), and the imported resnet18 beside the
# same network built layer for layer in kiln's API (bench_import
# --handmade): import time, parameter count and training samples/s with
# SGD and momentum on fixed synthetic batches. This machine's speed drifts,
# so the runs of one network alternate (taking turns to go first); the
# table lists every run, the medians and the ratios of the medians. Warm-up
# steps are untimed in every run. The peer runs OpenBLAS at its best
# (test/bench/peer_blas.sh).
#
# Environment (defaults in brackets):
#   BENCH_REPEATS [3]            runs per side and network
#   BENCH_STEPS [6]              timed steps per run
#   BENCH_WARMUP [2]             untimed steps first
#   BENCH_NETS [all nine]        networks ("resnet18 mobilenet_v2 ...")
#   BENCH_BUILD_DIR [build]      meson build folder, set up if missing
# alexnet and vgg16 run at 224x224 batch 4 (their adaptive pooling needs
# it), the others at 64x64 batch 8. POCL_DEVICES passes through (default
# pthread). The last line is "import resnet18 imported/handmade R".
set -eu
cd "$(dirname "$0")/../.."
repeats=${BENCH_REPEATS:-3}
steps=${BENCH_STEPS:-6}
warmup=${BENCH_WARMUP:-2}
nets=${BENCH_NETS:-"alexnet vgg16 resnet18 resnet50 wide_resnet50_2 resnext50_32x4d densenet161 mobilenet_v2 mnasnet1_0"}
build=${BENCH_BUILD_DIR:-build}
export POCL_DEVICES="${POCL_DEVICES:-pthread}"

[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build" test/bench/bench_import >/dev/null
peer=1
why=$(/usr/bin/python3 -c "import torch, torchvision" 2>&1) || peer=0
. test/bench/peer_blas.sh
[ $peer = 1 ] || { echo "import.sh: PyTorch and torchvision are needed to export the networks: $why" >&2; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows           # "net side import_s params samples_per_s" a line
: > "$rows"

shape() {  # net -> "size batch"
    case $1 in alexnet|vgg16) echo "224 4" ;; *) echo "64 8" ;; esac
}

run_one() {  # net side size batch
    net=$1 side=$2 size=$3 batch=$4
    case $side in
        imported) set -- "$build/test/bench/bench_import" "$tmp/$net.onnx" ;;
        handmade) set -- "$build/test/bench/bench_import" --handmade "$net" --size "$size" ;;
        pytorch) set -- $peer_env /usr/bin/python3 \
                     test/bench/torch_zoo.py "$net" --size "$size" ;;
    esac
    if ! "$@" --batch "$batch" --steps "$steps" --warmup "$warmup" >"$tmp/out" 2>"$tmp/err"; then
        cat "$tmp/out" "$tmp/err" >&2
        echo "import.sh: $net $side failed" >&2
        echo "$net $side failed - -" >> "$rows"
        return 0
    fi
    line=$(grep 'samples_per_s' "$tmp/out")
    import_s=$(echo "$line" | sed -n 's/.*import_s \([0-9.]*\).*/\1/p')
    params=$(echo "$line" | sed -n 's/.*params \([0-9]*\).*/\1/p')
    rate=$(echo "$line" | sed -n 's/.*samples_per_s \([0-9.]*\).*/\1/p')
    echo "$net $side ${import_s:-0} $params $rate" >> "$rows"
}

load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
start=$(date +%s)
for net in $nets; do
    set -- $(shape "$net")
    size=$1 batch=$2
    /usr/bin/python3 test/importer/export_torchvision.py "$tmp" "$size" "$net" >/dev/null 2>&1 ||
        { echo "import.sh: could not export $net" >&2; exit 1; }
    sides="imported pytorch"
    [ "$net" != resnet18 ] || sides="imported handmade pytorch"
    r=1
    while [ "$r" -le "$repeats" ]; do
        order=$sides
        [ $((r % 2)) = 1 ] || order=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
        for side in $order; do
            run_one "$net" "$side" "$size" "$batch"
        done
        r=$((r + 1))
    done
done
echo "took $(($(date +%s) - start)) s; 1-minute load average $load_start at the start," \
    "$(load) at the end, on $(getconf _NPROCESSORS_ONLN) cores; $(date -u +%Y-%m-%d)"
echo "command: POCL_DEVICES='$POCL_DEVICES' BENCH_REPEATS=$repeats BENCH_STEPS=$steps" \
    "BENCH_WARMUP=$warmup sh test/bench/import.sh"
echo

/usr/bin/python3 - "$rows" "$repeats" "$steps" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
nets = []
for r in rows:
    if r[0] not in nets:
        nets.append(r[0])

def runs(net, side, col):
    return [float(r[col]) for r in rows if r[0] == net and r[1] == side and r[2] != "failed"]

def med(v):
    return statistics.median(v) if v else None

print("training samples/s (medians of %s runs of %s timed steps; every run listed), import "
      "time (median), parameters (with batch norm's moving statistics)" % (sys.argv[2],
                                                                          sys.argv[3]))
print("| network | input, batch | import s | parameters kiln / PyTorch | kiln | PyTorch "
      "| kiln / PyTorch | kiln, every run | PyTorch, every run |")
print("|---|---|---|---|---|---|---|---|---|")
for net in nets:
    size, batch = ("224", 4) if net in ("alexnet", "vgg16") else ("64", 8)
    k, t = runs(net, "imported", 4), runs(net, "pytorch", 4)
    imp = med(runs(net, "imported", 2))
    pk = runs(net, "imported", 3)
    pt = runs(net, "pytorch", 3)
    ratio = "%.2f" % (med(k) / med(t)) if k and t else "-"
    print("| %s | %sx%s, %d | %s | %s / %s | %s | %s | %s | %s | %s |" % (
        net, size, size, batch, "%.3f" % imp if imp is not None else "failed",
        "%d" % pk[0] if pk else "-", "%d" % pt[0] if pt else "-",
        "%.1f" % med(k) if k else "-", "%.1f" % med(t) if t else "-", ratio,
        ", ".join("%.1f" % v for v in k) or "-", ", ".join("%.1f" % v for v in t) or "-"))
h, i = runs("resnet18", "handmade", 4), runs("resnet18", "imported", 4)
if h and i:
    print()
    print("resnet18 imported %.1f (runs %s) vs built in kiln's API %.1f (runs %s) samples/s" % (
        med(i), ", ".join("%.1f" % v for v in i), med(h), ", ".join("%.1f" % v for v in h)))
    print("import resnet18 imported/handmade %.3f" % (med(i) / med(h)))
PY
