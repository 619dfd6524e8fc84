#!/bin/sh
# Does kiln work on this machine's GPU, and how fast? Run in the repository
# root of a tree prepared by tools/gpu_deps.sh (which packs the build, the
# libraries a bare machine lacks and Fashion-MNIST into .gpu/), on a machine
# with a GPU driver and no network. Within a total budget, each step under
# its own time limit (so that one hang cannot eat the rest):
#   setup     unpack .gpu/build.tar.xz and .gpu/libs.tar.xz (into a
#             temporary folder); find the vendor's OpenCL driver (NVIDIA's
#             libnvidia-opencl.so) and write an .icd file for it into a
#             folder named by OCL_ICD_VENDORS; LD_LIBRARY_PATH to the
#             unpacked libraries; `kiln devices` (what kiln sees;
#             with no GPU the tests and benchmarks are left out, saying why)
#   tests     the test suite on the GPU (tools/gpu_tests.py: no meson needed;
#             KILN_DEVICES=gpu; layers, train and strategies first; the
#             _gpu_kernels runs, and the kernel tests once more with the CPU
#             variants)
#   tune      kiln's GEMM parameter search for the device (stored in the
#             benchmarks' cache folder; on a timeout they run untuned)
#   gemm      test/bench/bench_gemm: GFLOPS of kiln_gemm on the table's shapes
#   train_*   test/bench/bench_train, the seed CNN: training and evaluation
#             samples/s at batch 32 and 128, and at 128 with the CPU variants
#   resnet_*  examples/resnet --input 32 (batch 64) and 224 (batch 8):
#             training samples/s; 32 once more with the CPU variants
#   torch_resnet_*  PyTorch's seed ResNet (test/bench/torch_resnet.py --device
#             cuda) at the same shapes, where python3 has PyTorch with CUDA,
#             and the ratios kiln / PyTorch
#   profile   examples/resnet at 224 under KILN_PROFILE=1: every kernel's time
# Results land in $OUT (default ./gpu-check-out): summary.txt (a line per
# step: pass, fail, timeout or skipped, its seconds, its numbers), check.log
# (everything printed), tests.log (each test's output), tests.txt (a line per
# test), bench.json (the benchmarks' JSON lines). Exits 0 whatever failed
# (the results are the point), 2 only when it cannot write $OUT.
#
# Environment, with defaults (seconds):
#   GPU_CHECK_BUDGET_S [450]  the whole run; each step gets at most what is left
#   GPU_CHECK_SETUP_S [60] GPU_CHECK_TESTS_S [170] GPU_CHECK_TUNE_S [40]
#   GPU_CHECK_GEMM_S [40] GPU_CHECK_TRAIN_S [25] (each of 3 runs)
#   GPU_CHECK_RESNET_S [30] (each of 3 runs) GPU_CHECK_TORCH_S [30] (each of 2)
#   GPU_CHECK_PROFILE_S [25]
#   GPU_CHECK_TORCH_DEVICE [cuda]  PyTorch's device ('cpu': a test here)
#   GPU_CHECK_PYTHON [python3]     the Python with PyTorch
#   GPU_CHECK_TRAIN_STEPS [200] GPU_CHECK_RESNET_STEPS [20]
#   GPU_CHECK_PROFILE_STEPS [5]  timed steps
#   GPU_CHECK_JOBS [8]        tests run at a time
#   GPU_CHECK_TEST_CAP_S [120]  the most one test may take
#   GPU_CHECK_DEVICES [gpu]   KILN_DEVICES for every step ('cpu': PoCL here)
#   GPU_CHECK_ONLY            comma-separated test names: run only those
#   GPU_CHECK_OPENCL_LIB      the vendor's OpenCL library to register (default:
#                             libnvidia-opencl.so* found under /; a test here
#                             names PoCL's libpocl.so.2)
#   GPU_CHECK_NO_ICD=1        write no .icd file: use the machine's own ICDs
set -u
cd "$(dirname "$0")/.." || exit 2
root=$(pwd -P)

# --unpack DIR LIBS (the setup step, under its time limit): .gpu/build.tar.xz
# into DIR, .gpu/libs.tar.xz into LIBS.
if [ "${1:-}" = --unpack ]; then
    for pair in "build.tar.xz $2" "libs.tar.xz $3"; do
        pack=.gpu/${pair%% *} into=${pair#* }
        [ -f "$pack" ] || { echo "no $pack: run tools/gpu_deps.sh first"; exit 1; }
        mkdir -p "$into.part"
        if ! tar -C "$into.part" -xJf "$pack"; then
            echo "tar -xJ failed; unpacking with Python's tarfile"
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                "$pack" "$into.part" || exit 1
        fi
        mv "$into.part" "$into"
        echo "$pack: $into ($(du -sm "$into" | cut -f1) MiB unpacked)"
    done
    exit 0
fi
OUT=${OUT:-$root/gpu-check-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd -P)
summary=$OUT/summary.txt
log=$OUT/check.log
json=$OUT/bench.json
: > "$summary"
: > "$log"
: > "$json"
rm -f "$OUT/tests.txt" "$OUT/tests.log"

budget=${GPU_CHECK_BUDGET_S:-450}
start=$(date +%s)
deadline=$((start + budget))
devices=${GPU_CHECK_DEVICES-gpu}
work=$(mktemp -d)
# Unpacked outside the tree, so that nothing new lies in .gpu (what the device
# tool carries) after a run.
build=$work/build libs=$work/libs
trap 'rm -rf "$work"' EXIT

say() { printf '%s\n' "$*" | tee -a "$log"; }
line() { printf '%s\n' "$*" >> "$summary"; say "summary: $*"; }
left() { echo $((deadline - $(date +%s))); }

# step NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, what is left)
# seconds, its output into check.log and $work/NAME.out; its verdict into
# $work/NAME.verdict and the summary (with any numbers added by the caller).
step() {
    name=$1 limit=$2
    shift 2
    l=$(left)
    [ "$limit" -le "$l" ] || limit=$l
    : > "$work/$name.out"
    if [ "$limit" -lt 3 ]; then
        echo skipped > "$work/$name.verdict"
        step_line="$name skipped 0 s (under 3 s for it: its limit, or what is left"
        step_line="$step_line of the ${budget} s)"
        say "==== $step_line"
        return 0
    fi
    say "==== $name (limit $limit s): $*"
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" > "$work/$name.out" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    cat "$work/$name.out" >> "$log"
    case $rc in
        0) verdict=pass ;;
        77) verdict=skip ;;
        124|137) verdict=timeout ;;
        *) verdict=fail ;;
    esac
    echo "$verdict" > "$work/$name.verdict"
    say "==== $name: $verdict (exit $rc) in $secs s"
    step_line="$name $verdict $secs s"
}

say "gpu_check.sh on $(uname -n) at $(date -u +%Y-%m-%dT%H:%M:%SZ), budget $budget s, OUT=$OUT"
say "built from: $(sed -n 's/^commit //p' "$root/.gpu/origin" 2>/dev/null)"
{
    uname -a
    nproc
    command -v nvidia-smi >/dev/null &&
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
} >> "$log" 2>&1

# report NAME TEXT: the step's summary line, with TEXT (its numbers) when it ran.
report() {
    if [ "$(cat "$work/$1.verdict")" = skipped ] || [ -z "$2" ]; then
        line "$step_line"
    else
        line "$step_line: $2"
    fi
}

# ---- setup: the build, the ICD, the libraries, the devices ----
step setup_build "${GPU_CHECK_SETUP_S:-60}" sh "$root/tools/gpu_check.sh" --unpack "$build" \
    "$libs"
line "$step_line"

arch=x86_64-linux-gnu
# OpenBLAS (bench_gemm's peer) lies in a folder of its own, which Debian
# names in ld.so.conf.d where it installs the package.
libpath=$libs/usr/lib/$arch:$libs/lib/$arch:$libs/usr/lib/$arch/openblas-pthread
if [ "${GPU_CHECK_NO_ICD:-0}" != 1 ]; then
    lib=${GPU_CHECK_OPENCL_LIB:-}
    if [ -z "$lib" ]; then
        # The versioned real file first (libnvidia-opencl.so.580.159.04), then
        # the .so.1 link; where libraries live first, then all but /proc and /sys.
        found=$(timeout 30 find /usr /lib /lib64 /opt -name 'libnvidia-opencl.so*' 2>/dev/null)
        [ -n "$found" ] || found=$(timeout 30 find / \( -path /proc -o -path /sys -o \
            -path "$root" \) -prune -o -name 'libnvidia-opencl.so*' -print 2>/dev/null)
        say "found: $(echo "$found" | tr '\n' ' ')"
        found=$(echo "$found" | grep -v -e i386 -e /lib32/)   # 64-bit only
        lib=$(echo "$found" | grep -E '\.so\.[0-9]+\.[0-9]' | head -n 1)
        [ -n "$lib" ] || lib=$(echo "$found" | grep -E '\.so\.1$' | head -n 1)
        [ -n "$lib" ] || lib=$(echo "$found" | head -n 1)
    fi
    if [ -n "$lib" ] && [ -f "$lib" ]; then
        export OCL_ICD_VENDORS="$work/vendors"
        mkdir -p "$OCL_ICD_VENDORS"
        echo "$lib" > "$OCL_ICD_VENDORS/gpu_check.icd"
        # The driver's folder too: its OpenCL library loads its neighbours.
        libpath=$libpath:$(dirname "$lib")
        line "icd pass 0 s ($lib in OCL_ICD_VENDORS=$OCL_ICD_VENDORS)"
    else
        line "icd fail 0 s (no libnvidia-opencl.so* on this machine, GPU_CHECK_OPENCL_LIB" \
            "unset: no GPU driver to register)"
    fi
fi
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The fallback's libstdc++, libgcc_s and zlib only where this machine lacks one.
if LD_LIBRARY_PATH=$LD_LIBRARY_PATH ldd "$build/examples/resnet" "$build/cli/kiln" 2>&1 |
        grep -q 'not found'; then
    fb=$root/.gpu/fallback
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$fb/usr/lib/$arch:$fb/lib/$arch"
    say "some library was missing: the fallback folder joins LD_LIBRARY_PATH"
fi
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldd "$build/examples/resnet" >> "$log" 2>&1
if ldd "$build/examples/resnet" 2>&1 | grep 'not found' >> "$log"; then
    line "libraries fail 0 s (ldd finds some missing: check.log)"
fi

# Every step after this one uses the same cache folder (kernels and GEMM
# parameters), and the devices GPU_CHECK_DEVICES names.
export KILN_CACHE_DIR="$work/cache"
[ -z "$devices" ] || export KILN_DEVICES="$devices"
step devices 30 "$build/cli/kiln" devices
gpu_seen=0
[ "$(cat "$work/devices.verdict")" = pass ] && gpu_seen=1
line "$step_line: $(grep '^device' "$work/devices.out" | tr '\n' ';' | sed 's/;$//')$(
    [ $gpu_seen = 1 ] || printf ' %s' "$(tail -n 1 "$work/devices.out")")"
if [ $gpu_seen = 0 ]; then
    KILN_DEVICES=all "$build/cli/kiln" devices >> "$log" 2>&1
    line "no device for KILN_DEVICES='$devices': the tests and benchmarks are left out" \
        "(every device kiln sees is in check.log)"
    say "done in $(($(date +%s) - start)) s"
    exit 0
fi

# Fashion-MNIST where the tests look for it, if this machine has none (a
# link to the carried copy; only as root, only where nothing is).
fashion=/usr/share/datasets/fashion-mnist
data=$root/.gpu/root$fashion
if [ ! -e "$fashion" ] && [ -d "$data" ] && [ "$(id -u)" = 0 ]; then
    mkdir -p "$(dirname "$fashion")" && ln -s "$data" "$fashion" &&
        say "linked $fashion -> $data (the tests read it there)"
fi
[ -d "$data" ] || data=$fashion

# ---- tests ----
if command -v python3 >/dev/null; then
    # gpu_tests.py's own deadline ends 5 s before the step's limit.
    t=${GPU_CHECK_TESTS_S:-170}
    [ "$t" -le "$(left)" ] || t=$(left)
    step tests "$t" python3 "$root/tools/gpu_tests.py" "$root" "$build" "$OUT/tests.log" \
        "$OUT/tests.txt" --seconds $((t - 5)) --jobs "${GPU_CHECK_JOBS:-8}" \
        --cap "${GPU_CHECK_TEST_CAP_S:-120}" \
        --devices "$devices" --only "${GPU_CHECK_ONLY:-}"
    if [ -f "$OUT/tests.txt" ]; then
        counts=$(awk '{n[$2]++} END {printf "%d pass, %d fail, %d timeout, %d skip, %d notrun, " \
            "%d left-out", n["pass"], n["fail"], n["timeout"], n["skip"], n["notrun"],
            n["left-out"]}' "$OUT/tests.txt")
        bad=$(awk '$2 == "fail" || $2 == "timeout" {printf "%s%s", s, $1; s = ", "}' \
            "$OUT/tests.txt")
        # gpu_tests.py exits 0 whatever the tests did: the step ran.
        step_line=$(echo "$step_line" | sed 's/^tests pass/tests ran/')
        report tests "$counts${bad:+ (failed: $bad)}"
    else
        report tests ""
    fi
else
    line "tests fail 0 s (no python3 on this machine: gpu_tests.py cannot run)"
fi

# ---- benchmarks ----
# tune: the search writes its choice into KILN_CACHE_DIR for the rest.
step tune "${GPU_CHECK_TUNE_S:-40}" env KILN_GEMM_TUNING=search "$build/test/bench/bench_train" \
    --batch 32 --steps 1 --warmup 1 --limit 64 --data "$data"
report tune "$(sed -n 's/.*GEMM: \(.*\)\]$/GEMM parameters: \1/p' "$work/tune.out" | tail -n 1)"

step gemm "${GPU_CHECK_GEMM_S:-40}" "$build/test/bench/bench_gemm" --json "$json"
report gemm "$(grep -E '^\| [a-z]' "$work/gemm.out" | grep -v '^| shape' |
    awk -F'|' '{gsub(/^ +| +$/, "", $2); gsub(/ /, "", $5); printf "%s%s %s GFLOPS", s, $2, $5;
                s = "; "}')"

train() {   # NAME BATCH [VARIANT]
    name=$1 batch=$2 variant=${3:-auto}
    step "$name" "${GPU_CHECK_TRAIN_S:-25}" env KILN_KERNEL_VARIANT="$variant" \
        "$build/test/bench/bench_train" --batch "$batch" --steps "${GPU_CHECK_TRAIN_STEPS:-200}" \
        --warmup 20 --eval \
        --json "$json" --data "$data"
    report "$name" "$(grep -E 'samples/s' "$work/$name.out" | tail -n 1)"
}
train train_b32 32
train train_b128 128
train train_b128_cpu_kernels 128 cpu

resnet() {   # NAME SIDE BATCH STEPS [VARIANT]
    name=$1 side=$2 batch=$3 steps=$4 variant=${5:-auto}
    step "$name" "${GPU_CHECK_RESNET_S:-30}" env KILN_KERNEL_VARIANT="$variant" \
        "$build/examples/resnet" --input "$side" --batch "$batch" --steps "$steps" --warmup 2
    report "$name" "$(grep -E 'samples/s' "$work/$name.out" | tail -n 1)"
}
steps=${GPU_CHECK_RESNET_STEPS:-20}
resnet resnet_32_b64 32 64 "$steps"
resnet resnet_224_b8 224 8 "$steps"
resnet resnet_32_b64_cpu_kernels 32 64 "$steps" cpu

# The peer: PyTorch's seed ResNet on the same GPU, where PyTorch with CUDA is
# installed (float32, no TF32), and the ratios of the two.
rate() { sed -n 's/.*batch [0-9]*: .* s per step, \([0-9.]*\) samples\/s.*/\1/p' "$work/$1.out" |
    tail -n 1; }
tdev=${GPU_CHECK_TORCH_DEVICE:-cuda}
py=${GPU_CHECK_PYTHON:-python3}
if timeout 60 "$py" -c 'import sys, torch
sys.exit(0 if sys.argv[1] != "cuda" or torch.cuda.is_available() else 1)' "$tdev" \
        >/dev/null 2>&1; then
    for shape in "32 64" "224 8"; do
        set -- $shape
        step "torch_resnet_$1_b$2" "${GPU_CHECK_TORCH_S:-30}" "$py" \
            "$root/test/bench/torch_resnet.py" --device "$tdev" --input "$1" --batch "$2" \
            --steps "$steps" --warmup 2
        report "torch_resnet_$1_b$2" "$(grep '^pytorch: input' "$work/torch_resnet_$1_b$2.out")"
    done
    ratios=""
    for shape in "32 64" "224 8"; do
        set -- $shape
        k=$(rate "resnet_$1_b$2") t=$(rate "torch_resnet_$1_b$2")
        r=-
        [ -z "$k" ] || [ -z "$t" ] || r=$(awk -v k="$k" -v t="$t" 'BEGIN {printf "%.2f", k / t}')
        ratios="$ratios, ${1}x$1 b$2 $r"
    done
    line "resnet kiln/pytorch, training samples/s (PyTorch on $tdev): ${ratios#, }"
else
    line "torch_resnet skipped 0 s (no PyTorch with $tdev for $py here)"
fi

# The table comes when the context closes: a run killed by its limit has none.
step profile "${GPU_CHECK_PROFILE_S:-25}" env KILN_PROFILE=1 "$build/examples/resnet" \
    --input 224 --batch 8 --steps "${GPU_CHECK_PROFILE_STEPS:-5}" --warmup 2
top=$(grep -E '^ +[0-9.]+% ' "$work/profile.out" | head -n 12 | sed 's/^ *//;s/  */ /g' |
    tr '\n' ';' | sed 's/;$//')
report profile "${top:+the kernels' device times, the first 12 (all in check.log): $top}"

say "done in $(($(date +%s) - start)) s; summary in $summary"
exit 0
