#!/bin/sh
# The input pipeline, three ways (build/test/bench/bench_input, and PyTorch's
# DataLoader as the peer of the third):
#  1. I/O hidden: the seed CNN from Fashion-MNIST in memory against a
#     callback source whose fill costs half an in-memory step per batch,
#     with the loader's prefetch and without (loader_threads -1). The fill
#     busy-loops (CPU work), or sleeps (a wait, like I/O); the busy one once
#     more with PoCL on one core (POCL_MAX_PTHREAD_COUNT=1), leaving the
#     loader a core of its own. R = prefetched / in-memory samples/s, the
#     median of each round's ratio, busy fill on every core.
#  2. Memory: one epoch of the seed CNN at batch 128 from a uint8 .npy of
#     Fashion-MNIST's training images tiled past 2 GB (flipped on alternate
#     copies), peak resident memory from /usr/bin/time -v.
#  3. Image folders: images/s delivered to training of a one-layer model
#     from a PNG folder (tools/fashion_png_folder.py), kiln's loader beside
#     torchvision's ImageFolder + DataLoader, 1 and 2 loader threads /
#     workers, alternating (taking turns to go first).
# Prints a markdown table of every run and the medians, then, last:
#   input pipeline: streamed/in-memory R, peak RSS M MiB
#
# Environment (defaults in brackets):
#   INPUT_BENCH_ROUNDS [5]       rounds of each I/O-hidden configuration
#   INPUT_BENCH_SAMPLES [12800]  Fashion-MNIST samples each I/O-hidden run trains on
#   INPUT_BENCH_TILES [45]       copies of the 60000 images in the .npy (45: 2.1 GB)
#   INPUT_BENCH_LIMIT [0]        >0: train on the .npy's first N samples only
#   INPUT_BENCH_IMAGES [20000]   images in the PNG folder
#   INPUT_BENCH_REPEATS [3]      rounds of the image-folder comparison
#   INPUT_BENCH_BUILD_DIR [build]  meson build folder, set up if missing
#   TMPDIR [/tmp]                where the .npy and the folder are written
#                                (and removed at the end)
# Raw results: bench-results/input_pipeline.jsonl, one JSON object a line.
set -eu
cd "$(dirname "$0")/../.."
rounds=${INPUT_BENCH_ROUNDS:-5}
samples=${INPUT_BENCH_SAMPLES:-12800}
tiles=${INPUT_BENCH_TILES:-45}
limit=${INPUT_BENCH_LIMIT:-0}
images=${INPUT_BENCH_IMAGES:-20000}
repeats=${INPUT_BENCH_REPEATS:-3}
build=${INPUT_BENCH_BUILD_DIR:-build}
data=/usr/share/datasets/fashion-mnist
py=/usr/bin/python3

# The peer's packages, where missing (without them the PyTorch column goes).
sh tools/install_deps.sh python3-torch python3-torchvision python3-numpy >/dev/null 2>&1 ||
    echo "input_pipeline.sh: could not install PyTorch and numpy; going on without" >&2
[ -f "$build/build.ninja" ] || meson setup "$build"
# Only the benchmark's target: a test mid-edit elsewhere must not block it.
ninja -C "$build" test/bench/bench_input >/dev/null
bench=$build/test/bench/bench_input

mkdir -p bench-results
out="bench-results/input_pipeline.jsonl"
: > "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-input-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# Runs a command and keeps its JSON lines, each tagged with what ran:
#   run TAGS COMMAND...   (TAGS: '"key": value, ...'). Through a file, not a
# pipe, so that the command's status (77: no device, a skip) is the script's.
run() {
    tags=$1
    shift
    "$@" > "$work/run.json"
    sed -n "s/^{/{$tags, /p" "$work/run.json" >> "$out"
}

load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
load_start=$(load)
start=$(date +%s)

# 1. I/O hidden.
io="io --rounds $rounds --samples $samples --cost-fraction 0.5 --data $data"
# shellcheck disable=SC2086 # $io is split into arguments on purpose
{
    run "\"config\": \"busy\", \"samples\": $samples" "$bench" $io
    run "\"config\": \"sleep\", \"samples\": $samples" "$bench" $io --sleep
    run "\"config\": \"busy_one_core\", \"samples\": $samples" \
        env POCL_MAX_PTHREAD_COUNT=1 "$bench" $io
}

# 2. Memory.
bytes=$((tiles * 60000 * 788))
free_kib=$(df -Pk "$work" | awk 'NR == 2 {print $4}')
if [ $((bytes / 1024 + 262144)) -gt "$free_kib" ]; then
    echo "input_pipeline.sh: the .npy needs $((bytes >> 20)) MiB in $work (and 256 MiB" \
        "to spare); $((free_kib >> 10)) MiB free. Set TMPDIR or INPUT_BENCH_TILES." >&2
    exit 1
fi
# Writes TILES copies as $work/features.npy and $work/labels.npy, trains one
# epoch from them under /usr/bin/time -v, keeps the result with the peak RSS.
npy_epoch() {
    $py - "$data" "$work" "$1" <<'PY'
import gzip, sys
import numpy as np
data, work, tiles = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(data + "/train-images-idx3-ubyte.gz", "rb") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
with gzip.open(data + "/train-labels-idx1-ubyte.gz", "rb") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int32)
n = len(x) * tiles
with open(work + "/features.npy", "wb") as f:
    np.lib.format.write_array_header_1_0(
        f, {"descr": "|u1", "fortran_order": False, "shape": (n, 28, 28, 1)})
    flipped = np.ascontiguousarray(x[:, :, ::-1])
    for t in range(tiles):
        f.write((flipped if t % 2 else x).tobytes())
np.save(work + "/labels.npy", np.tile(y, tiles))
PY
    status=0
    /usr/bin/time -v "$bench" npy "$work/features.npy" "$work/labels.npy" --batch 128 \
        --limit "$2" > "$work/npy.json" 2> "$work/time.txt" || status=$?
    [ $status = 0 ] || { cat "$work/time.txt" >&2; exit $status; }
    rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/time.txt")
    file_bytes=$(stat -c %s "$work/features.npy")
    run "\"tiles\": $1, \"file_bytes\": $file_bytes, \"peak_rss_kib\": $rss_kib" \
        cat "$work/npy.json"
    rm -f "$work/features.npy" "$work/labels.npy"
}
npy_epoch 1 0              # what the process holds whatever the file's size
npy_epoch "$tiles" "$limit"

# 3. Image folders, kiln beside PyTorch.
$py tools/fashion_png_folder.py "$work/png" --source "$data" --limit "$images" >/dev/null
folder=$work/png/train
find "$folder" -type f -exec cat {} + > /dev/null    # into the page cache for both
peer=1
why=$($py -c "import torch, torchvision" 2>&1) || peer=0
kiln() {
    run "\"name\": \"kiln\", \"round\": $r" \
        "$bench" folder "$folder" --batch 64 --threads "$t" --epochs 2
}
pytorch() {
    [ $peer = 1 ] || return 0
    run "\"round\": $r" \
        $py test/bench/torch_image_folder.py "$folder" --batch 64 --threads "$t" --epochs 2 \
        --torch-threads 1
}
r=1
while [ "$r" -le "$repeats" ]; do
    for t in 1 2; do
        if [ $((r % 2)) = 1 ]; then kiln; pytorch; else pytorch; kiln; fi
    done
    r=$((r + 1))
done

echo "took $(($(date +%s) - start)) s; 1-minute load average $load_start at the start," \
    "$(load) at the end, on $(getconf _NPROCESSORS_ONLN) cores; $(date -u +%Y-%m-%d)"
echo "command: INPUT_BENCH_ROUNDS=$rounds INPUT_BENCH_SAMPLES=$samples" \
    "INPUT_BENCH_TILES=$tiles INPUT_BENCH_LIMIT=$limit INPUT_BENCH_IMAGES=$images" \
    "INPUT_BENCH_REPEATS=$repeats sh test/bench/input_pipeline.sh"
[ $peer = 1 ] || echo "PyTorch or torchvision is not available: $(printf '%s' "$why" | tail -n 1)"
echo
$py - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = statistics.median

io = [r for r in rows if r.get("bench") == "io"]
if io:
    print("I/O hidden: seed CNN, batch %d, Fashion-MNIST's first %d samples; the callback "
          "fill costs half an in-memory step per batch" % (io[0]["batch"], io[0]["samples"]))
print()
print("| fill | PoCL threads | round | in memory, samples/s | streamed, prefetched | "
      "streamed, no prefetch | prefetched / in memory | no prefetch / in memory | "
      "fill per batch, ms (asked; measured) |")
print("|---|---|---|---|---|---|---|---|---|")
configs = [("busy", "busy loop", "all"), ("sleep", "sleep", "all"),
           ("busy_one_core", "busy loop", "1")]
ratios = {}
for config, fill, cores in configs:
    head = [r for r in rows if r.get("config") == config and "fill" in r]
    runs = [r for r in rows if r.get("config") == config and "round" in r]
    if not runs:
        continue
    asked = head[0]["fill_seconds_per_batch"] * 1e3
    pre = [r["streamed"] / r["in_memory"] for r in runs]
    inl = [r["streamed_no_prefetch"] / r["in_memory"] for r in runs]
    for r, p, i in zip(runs, pre, inl):
        print("| %s | %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f; %.2f |"
              % (fill, cores, r["round"] + 1, r["in_memory"], r["streamed"],
                 r["streamed_no_prefetch"], p, i, asked,
                 r["fill_seconds_per_batch_measured"] * 1e3))
    print("| %s | %s | **median** | %.0f | %.0f | %.0f | **%.2f** | **%.2f** | %.2f; %.2f |"
          % (fill, cores, med(r["in_memory"] for r in runs), med(r["streamed"] for r in runs),
             med(r["streamed_no_prefetch"] for r in runs), med(pre), med(inl), asked,
             med(r["fill_seconds_per_batch_measured"] for r in runs) * 1e3))
    ratios[config] = med(pre)

npy = [r for r in rows if r.get("bench") == "npy"]
rss_mib = None
if npy:
    n, base = npy[-1], npy[0]
    count = n["tiles"] * 60000
    rss_mib = n["peak_rss_kib"] / 1024
    print()
    print("Memory: one epoch of the seed CNN at batch 128 from a uint8 .npy "
          "(kiln_dataset_from_npy), /usr/bin/time -v")
    print()
    print("| what | value |")
    print("|---|---|")
    print("| samples in the file (%d x 60000, flipped on alternate copies) | %d |"
          % (n["tiles"], count))
    print("| features file, uint8 | %.0f MiB |" % (n["file_bytes"] / 2**20))
    print("| the same samples as float32 (count x 784 x 4) | %.0f MiB |"
          % (count * 784 * 4 / 2**20))
    print("| samples trained | %d%s |" % (n["samples"],
                                         "" if n["samples"] == count else " (--limit)"))
    print("| training samples/s | %.0f |" % n["samples_per_s"])
    print("| **peak resident memory** | **%.0f MiB** |" % rss_mib)
    print("| the same, 1 copy (60000 samples, %.0f MiB file, one epoch) | %.0f MiB |"
          % (base["file_bytes"] / 2**20, base["peak_rss_kib"] / 1024))
    print("| peak RSS / file size | %.3f |" % (n["peak_rss_kib"] * 1024 / n["file_bytes"]))

folder = [r for r in rows if r.get("bench") == "folder"]
if folder:
    print()
    print("Image folders: %d PNG images (28x28 grayscale), a one-layer model (Flatten, Dense "
          "to 10, Adam), batch 64, 2 epochs, images/s; kiln's loader_threads T against "
          "PyTorch's DataLoader num_workers T (one intra-op thread)" % folder[0]["images"])
    print()
    print("| T | round | kiln images/s | PyTorch images/s | kiln / PyTorch |")
    print("|---|---|---|---|---|")
    for t in sorted({r["threads"] for r in folder}):
        k = {r["round"]: r["images_per_s"] for r in folder
             if r["name"] == "kiln" and r["threads"] == t}
        p = {r["round"]: r["images_per_s"] for r in folder
             if r["name"] == "pytorch" and r["threads"] == t}
        ratio = [k[i] / p[i] for i in sorted(k) if i in p]
        for i in sorted(k):
            print("| %d | %d | %.0f | %s | %s |" % (t, i, k[i],
                  "%.0f" % p[i] if i in p else "-",
                  "%.2f" % (k[i] / p[i]) if i in p else "-"))
        print("| %d | **median** | %.0f | %s | %s |"
              % (t, med(k.values()), "%.0f" % med(p.values()) if p else "-",
                 "**%.2f**" % med(ratio) if ratio else "-"))

print()
print("busy fill, all cores: R %.2f; sleeping fill: %.2f; busy fill, PoCL on one thread: %.2f"
      % tuple(ratios.get(c, float("nan")) for c in ("busy", "sleep", "busy_one_core")))
print("input pipeline: streamed/in-memory %.2f, peak RSS %s MiB"
      % (ratios.get("busy", float("nan")), "%.0f" % rss_mib if rss_mib is not None else "-"))
PY
