#!/bin/sh
# Builds the libFuzzer targets with docs/testing.md's command and runs each for
# FUZZ_SECONDS (default 30) from its seed corpus; a crash, leak or sanitizer
# report fails the run. New inputs go to a scratch corpus, never test/data.
set -eu
cd "$(dirname "$0")/.."
dir=build-fuzz
seconds=${FUZZ_SECONDS:-30}
[ -f "$dir/build.ninja" ] || CC=clang meson setup "$dir" -Dfuzzing=true -Db_lundef=false \
    > /dev/null
ninja -C "$dir" test/fuzz/fuzz_safetensors test/fuzz/fuzz_idx test/fuzz/fuzz_npy test/fuzz/fuzz_image \
    test/fuzz/fuzz_model_json test/fuzz/fuzz_onnx_import > /dev/null
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export LSAN_OPTIONS="suppressions=$(pwd)/test/lsan.supp"
for target in safetensors idx npy image model_json onnx_import; do
    mkdir -p "$scratch/$target"
    corpus=test/data/$target
    [ "$target" = onnx_import ] && corpus=test/data/onnx
    "./$dir/test/fuzz/fuzz_$target" "$scratch/$target" "$corpus" \
        -max_total_time="$seconds" -print_final_stats=1 2> "$scratch/$target.log" || {
        tail -n 40 "$scratch/$target.log"
        echo "fuzz_$target failed" >&2
        exit 1
    }
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$target.log")
    echo "fuzz_$target: $runs executions in $seconds s, no finding"
done
