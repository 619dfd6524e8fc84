#!/bin/sh
# The zoo, network by network: each network of test/importer/zoo_models.py
# (dlprimitives' 14 torchvision benchmarks and a reduced ViT), exported to
# ONNX (export_torchvision.py: random weights, opset 17, batch norm kept),
# imported into kiln and run on one device (bench_import) beside the same
# network in PyTorch on the same CPU (torch_zoo.py: channels-last, 2
# threads), training (SGD with momentum, cross-entropy) and inference
# (predict; PyTorch in eval mode without autograd). The runs of a network
# alternate, taking turns to go first, since this machine drifts; warm-up
# steps are untimed. A network kiln refuses to import is listed with the
# reason. Tables: ms per step (medians, every run listed), the ratio PyTorch
# ms / kiln ms (above 1: kiln faster), kiln's peak device memory
# (kiln_model_memory) and PyTorch's peak resident memory (Python and
# PyTorch included); then the geometric mean of the ratios over the
# networks both ran:
#   zoo kiln/pytorch geomean: R            (training)
#   zoo inference kiln/pytorch geomean: R
#
# Environment (defaults in brackets):
#   BENCH_REPEATS [3]        runs per side, mode and network
#   BENCH_STEPS [5]          timed steps per run
#   BENCH_WARMUP [1]         untimed steps first
#   BENCH_NETS [all 15]      networks ("resnet18 efficientnet_b0 ...")
#   BENCH_MODES [train infer]
#   BENCH_BUILD_DIR [build]  meson build folder, set up if missing
# POCL_DEVICES passes through (default pthread). Input size and batch per
# network below: chosen so that a training step takes about 0.1 to 2 s on
# this project's 2-core machine (alexnet and vgg16 export only at 224x224,
# where their adaptive pooling divides evenly).
set -eu
cd "$(dirname "$0")/../.."
repeats=${BENCH_REPEATS:-3}
steps=${BENCH_STEPS:-5}
warmup=${BENCH_WARMUP:-1}
nets=${BENCH_NETS:-"alexnet resnet18 resnet50 convnext_small vgg16 densenet161 mobilenet_v2
    mobilenet_v3_small mobilenet_v3_large resnext50_32x4d wide_resnet50_2 mnasnet1_0
    efficientnet_b0 regnet_y_400mf vit_small"}
modes=${BENCH_MODES:-"train infer"}
build=${BENCH_BUILD_DIR:-build}
export POCL_DEVICES="${POCL_DEVICES:-pthread}"

shape() {  # net -> "size batch"
    case $1 in
        alexnet) echo "224 4" ;;
        vgg16) echo "224 2" ;;
        vit_small) echo "32 16" ;;
        resnet18|mobilenet_v2|mobilenet_v3_small|mobilenet_v3_large|mnasnet1_0|efficientnet_b0|regnet_y_400mf)
            echo "64 16" ;;
        *) echo "64 8" ;;
    esac
}

[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" test/bench/bench_import >/dev/null
why=$(/usr/bin/python3 -c "import torch, torchvision" 2>&1) ||
    { echo "zoo.sh: PyTorch and torchvision are needed: $why" >&2; exit 77; }
. test/bench/peer_blas.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows      # "net mode side ms peak" a line, or "net mode side refused reason..."
: > "$rows"

run_one() {  # net mode side size batch
    net=$1 mode=$2 side=$3 size=$4 batch=$5
    flag=""
    [ "$mode" = train ] || flag=--infer
    case $side in
        kiln) set -- "$build/test/bench/bench_import" "$tmp/$net.onnx" ;;
        pytorch) set -- $peer_env /usr/bin/python3 \
                     test/bench/torch_zoo.py "$net" --size "$size" ;;
    esac
    if ! "$@" --batch "$batch" --steps "$steps" --warmup "$warmup" $flag \
            >"$tmp/out" 2>"$tmp/err"; then
        reason=$(grep -hv '^$' "$tmp/err" "$tmp/out" | head -n 1 | cut -c1-300)
        echo "zoo.sh: $net $mode $side failed: $reason" >&2
        echo "$net $mode $side refused ${reason:-no message}" >> "$rows"
        return 1
    fi
    line=$(grep 'ms_per_step' "$tmp/out")
    ms=$(echo "$line" | sed -n 's/.*ms_per_step \([0-9.]*\).*/\1/p')
    peak=$(echo "$line" | sed -n 's/.*peak_[a-z_]*bytes \([0-9]*\).*/\1/p')
    echo "$net $mode $side $ms $peak" >> "$rows"
}

load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
start=$(date +%s)
for net in $nets; do
    set -- $(shape "$net")
    size=$1 batch=$2
    if ! /usr/bin/python3 test/importer/export_torchvision.py "$tmp" "$size" "$net" \
            >"$tmp/export" 2>&1; then
        reason=$(grep -v '^$' "$tmp/export" | tail -n 1 | cut -c1-300)
        for mode in $modes; do echo "$net $mode kiln refused export: $reason" >> "$rows"; done
        continue
    fi
    for mode in $modes; do
        r=1
        while [ "$r" -le "$repeats" ]; do
            order="kiln pytorch"
            [ $((r % 2)) = 1 ] || order="pytorch kiln"
            for side in $order; do
                run_one "$net" "$mode" "$side" "$size" "$batch" || { [ "$side" = pytorch ] || r=$repeats; }
            done
            r=$((r + 1))
        done
    done
done
echo "took $(($(date +%s) - start)) s; 1-minute load average $load_start at the start," \
    "$(load) at the end, on $(getconf _NPROCESSORS_ONLN) cores; $(date -u +%Y-%m-%d)"
echo "command: POCL_DEVICES='$POCL_DEVICES' BENCH_REPEATS=$repeats BENCH_STEPS=$steps" \
    "BENCH_WARMUP=$warmup sh test/bench/zoo.sh"
for net in $nets; do echo "shape $net $(shape "$net")"; done >> "$rows"

/usr/bin/python3 - "$rows" "$repeats" "$steps" "$modes" <<'PY'
import math, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
shapes = {r[1]: (r[2], r[3]) for r in rows if r[0] == "shape"}
rows = [r for r in rows if r[0] != "shape"]
nets = list(shapes)

def runs(net, mode, side, col):
    return [float(r[col]) for r in rows
            if r[:3] == [net, mode, side] and r[3] != "refused"]

def refusal(net, mode):
    for r in rows:
        if r[:2] == [net, mode] and r[3] == "refused":
            return "%s: %s" % (r[2], " ".join(r[4:]))
    return None

def mib(v):
    return "%.0f MiB" % (max(v) / 2**20) if v else "-"

for mode in sys.argv[4].split():
    title = "training steps" if mode == "train" else "inference (predict)"
    print()
    print("%s: ms per step, medians of %s runs of %s timed steps (every run listed); ratio = "
          "PyTorch ms / kiln ms" % (title, sys.argv[2], sys.argv[3]))
    print("| network | batch | input | kiln ms | PyTorch ms | ratio | kiln peak device memory "
          "| PyTorch peak RSS | kiln, every run | PyTorch, every run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for net in nets:
        size, batch = shapes[net]
        k, t = runs(net, mode, "kiln", 3), runs(net, mode, "pytorch", 3)
        why = refusal(net, mode)
        ratio = statistics.median(t) / statistics.median(k) if k and t else None
        if ratio:
            ratios.append(ratio)
        print("| %s | %s | %sx%s | %s | %s | %s | %s | %s | %s | %s |" % (
            net, batch, size, size,
            "%.1f" % statistics.median(k) if k else "refused" if why else "-",
            "%.1f" % statistics.median(t) if t else "-",
            "%.2f" % ratio if ratio else "-",
            mib(runs(net, mode, "kiln", 4)), mib(runs(net, mode, "pytorch", 4)),
            ", ".join("%.1f" % v for v in k) or (why or "-"),
            ", ".join("%.1f" % v for v in t) or "-"))
    g = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    print()
    print("zoo %skiln/pytorch geomean: %.3f (over %d networks)" % (
        "" if mode == "train" else "inference ", g, len(ratios)))
PY
