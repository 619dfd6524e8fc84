#!/bin/sh
# Runs the kernel tests under Oclgrind, which simulates an OpenCL 1.2 device
# and reports out-of-bounds accesses, work-item data races and misused API
# calls. Oclgrind leaves the program's exit status as it was whatever it
# found (21.10 has no option to change that), so any report fails the run:
# a kernel's, which --log writes to a file of its own, or an API call's,
# which goes to stderr with "Oclgrind - " first; so does a test that fails
# or skips.
#
# Every layer's kernels run in test_layers, again on work-groups of at most
# 4 (_small_groups) and with every convolution through im2col and every GEMM
# through CLBlast (_clblast); test_attention runs attention's (dropout,
# the causal mask, cross-attention); gradcheck and train add the losses,
# the optimizers and multi-layer backward passes; nonfinite the update
# check; sequence_labels the losses and metrics per position, with
# ignored ones; multi_output the losses of several outputs into their
# slots of the sums; math kiln_math's kernels (3 s); ema the weights'
# moving average (7 s). A name ending in _gpu_kernels runs its test through
# the kernels' GPU variants (KILN_KERNEL_VARIANT=gpu), as meson's do.
# test_conv2d_transpose runs Conv2D's im2col and col2im with the roles of
# input and output swapped (16 s with _small_groups; its _gpu_kernels, 131 s,
# is left out: test_layers_gpu_kernels runs the same kernels' GPU variants).
# test_gradcheck_clblast is left out: the same kernels as
# test_layers_clblast, at 160 s. So is test_embedding_gpu_kernels (130 s):
# test_layers_gpu_kernels runs the embedding's links and sort.cl's sort on
# more ids. So is test_nonfinite_gpu_kernels (2 to 6 minutes: every strategy's
# fits): name it when the update check's GPU variant changes.
# --uninitialized is left out too: in Oclgrind 21.10 it flags values built
# in vectors (its issue 126: here kiln_load8's) and changes what runs:
# test_layers' convolution, pooling and dropout checks, which pass without
# it, fail with it.
#
# Test names as arguments run those instead; logs are in build/oclgrind/.
set -eu
cd "$(dirname "$0")/.."
sh tools/install_deps.sh oclgrind
[ -f build/build.ninja ] || meson setup build > /dev/null
ninja -C build > /dev/null
tests=${*:-"test_layers test_layers_gpu_kernels test_conv2d_transpose test_gradcheck
    test_train test_clipping test_math test_attention test_nonfinite
    test_sequence_labels test_multi_input test_ema
    test_multi_output test_layers_small_groups test_conv2d_transpose_small_groups
    test_train_gpu_kernels test_attention_gpu_kernels test_attention_small_groups
    test_gradcheck_small_groups test_train_small_groups test_layers_clblast
    test_binary test_binary_gpu_kernels test_half_storage"}
dir=build/oclgrind
mkdir -p "$dir"
# The program meson runs for test $1: the tests' folders (test/layers/, ...)
# hold them, and a _gpu_kernels test runs its test's own program.
meson introspect build --tests > "$dir/tests.json"
binary() {
    python3 -c 'import json, sys
tests = [t for t in json.load(open(sys.argv[1])) if t["name"] == sys.argv[2]]
print(tests[0]["cmd"][0] if tests else "no-such-test-" + sys.argv[2])' "$dir/tests.json" "$1"
}
# Oclgrind's runtime is preloaded; with no ICD vendors a program it did not
# reach finds no device and skips, which fails here. GEMM tuning off: a
# search would time CLBlast's candidates on the simulator. Every work-group
# runs (no --quick), on Oclgrind's own device limits.
export OCL_ICD_VENDORS=/nonexistent
export KILN_GEMM_TUNING=off
unset KILN_DEVICES KILN_STRATEGY KILN_PROFILE OCLGRIND_QUICK OCLGRIND_MAX_WGSIZE
# --log takes the kernels' reports; misused API calls still go to stderr.
api_errors='^Oclgrind - |^Oclgrind: |^\[Oclgrind\]'
failed=0
not_run=""
all_start=$(date +%s)
# KILN_OCLGRIND_SECONDS bounds the whole run (CI gives it what is left of
# its time): a test is not started with under a minute left, and one still
# running at the end is stopped there. Both are listed at the end, not
# failed; what Oclgrind reported up to the stop still fails the run.
budget=${KILN_OCLGRIND_SECONDS:-0}
for t in $tests; do
    limit=""
    if [ "$budget" -gt 0 ]; then
        left=$((budget - ($(date +%s) - all_start)))
        if [ "$left" -lt 60 ]; then
            not_run="$not_run $t"
            continue
        fi
        limit="timeout $left"
    fi
    # An empty kernel cache: the first context builds its programs from
    # source, so reports quote source lines. A later context loads them from
    # the cache and reports without source; the line numbers of "input.cl"
    # count prelude.cl's lines first, in either case.
    rm -rf "$dir/cache-$t" "$dir/$t.log"
    start=$(date +%s)
    status=0
    # Oclgrind's device reports every device type, GPU included, and
    # dedicated local memory, so "auto" would pick the GPU variant: name
    # the variant, the CPU one except for the _gpu_kernels tests.
    variant=cpu
    [ "${t%_gpu_kernels}" = "$t" ] || variant=gpu
    KILN_KERNEL_VARIANT=$variant KILN_CACHE_DIR="$dir/cache-$t" \
        $limit oclgrind --check-api --data-races --log "$dir/$t.log" \
        "$(binary "$t")" > "$dir/$t.out" 2>&1 || status=$?
    seconds=$(($(date +%s) - start))
    stopped=""
    if [ -n "$limit" ] && [ "$status" -eq 124 ]; then
        stopped=1
        echo "oclgrind: $t stopped at the time budget after ${seconds} s (checked up to there)"
        not_run="$not_run $t(part)"
        status=0
    elif [ "$status" -ne 0 ]; then
        echo "oclgrind: $t exited with $status (${seconds} s); the end of $dir/$t.out:" >&2
        tail -n 20 "$dir/$t.out" >&2
        failed=1
    fi
    if [ -s "$dir/$t.log" ]; then
        echo "oclgrind: $t: Oclgrind reported (${seconds} s); the start of $dir/$t.log:" >&2
        head -n 40 "$dir/$t.log" >&2
        failed=1
    elif grep -q -E "$api_errors" "$dir/$t.out"; then
        echo "oclgrind: $t: Oclgrind reported (${seconds} s); in $dir/$t.out:" >&2
        grep -A 4 -E "$api_errors" "$dir/$t.out" | head -n 40 >&2
        failed=1
    elif [ "$status" -eq 0 ] && [ -z "$stopped" ]; then
        echo "oclgrind: $t clean (${seconds} s)"
    fi
done
echo "oclgrind: $(($(date +%s) - all_start)) s in all"
[ -z "$not_run" ] || echo "oclgrind: the time budget ($budget s) left unchecked:$not_run"
exit $failed
