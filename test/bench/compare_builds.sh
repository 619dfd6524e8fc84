#!/bin/sh
# Two builds of kiln side by side, for a change that should not move speed:
# the seed CNN's training samples/s (bench_train, batch 32 and 128) and the
# seed ResNet's (examples/resnet, 32x32 batch 64), each build taking turns to
# go first in every round. Prints every run, the medians and new / old.
#
#   sh test/bench/compare_builds.sh OLD_BUILD NEW_BUILD
#
# Each folder is a configured meson build of its own tree (git worktree add
# ... OLD_COMMIT; meson setup build); the targets are built first.
# Environment (defaults in brackets): BENCH_REPEATS [5] rounds,
# BENCH_STEPS [200] seed CNN steps per run, BENCH_STEPS_32 [20] ResNet steps,
# BENCH_WARMUP [20] and [2] untimed steps. POCL_DEVICES defaults to pthread.
set -eu
[ $# = 2 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD" >&2; exit 2; }
old=$1 new=$2
repeats=${BENCH_REPEATS:-5}
steps=${BENCH_STEPS:-200}
steps32=${BENCH_STEPS_32:-20}
export POCL_DEVICES="${POCL_DEVICES:-pthread}"
for b in "$old" "$new"; do
    ninja -C "$b" test/bench/bench_train examples/resnet >/dev/null
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows   # "case build rate" a line
: > "$rows"

# One run of one case on one build: its samples/s into $rows.
run_one() {  # case build
    case $1 in
        cnn32|cnn128)
            "$2/test/bench/bench_train" --batch "${1#cnn}" --steps "$steps" \
                --warmup "${BENCH_WARMUP:-20}" > "$tmp/out" 2>&1
            rate=$(sed -n 's/.* steps: \([0-9.]*\) train samples\/s.*/\1/p' "$tmp/out") ;;
        resnet32)
            "$2/examples/resnet" --input 32 --batch 64 --steps "$steps32" --warmup 2 \
                > "$tmp/out" 2>/dev/null
            rate=$(sed -n 's/.*input .*, batch .*: .* s per step, \([0-9.]*\) samples\/s.*/\1/p' \
                   "$tmp/out") ;;
    esac
    [ -n "$rate" ] || { cat "$tmp/out" >&2; echo "compare_builds.sh: no rate ($1, $2)" >&2; exit 1; }
    echo "$1 $2 $rate" >> "$rows"
    echo "  $1 $(basename "$(cd "$2/.." && pwd)")/$(basename "$2"): $rate samples/s"
}

echo "load at start: $(cut -d' ' -f1 /proc/loadavg)"
for case in cnn32 cnn128 resnet32; do
    r=1
    while [ "$r" -le "$repeats" ]; do
        if [ $((r % 2)) = 1 ]; then run_one $case "$old"; run_one $case "$new"
        else run_one $case "$new"; run_one $case "$old"; fi
        r=$((r + 1))
    done
done
echo "load at end: $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$rows" "$old" "$new" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
old, new = sys.argv[2], sys.argv[3]
for case in ("cnn32", "cnn128", "resnet32"):
    a = [float(r[2]) for r in rows if r[0] == case and r[1] == old]
    b = [float(r[2]) for r in rows if r[0] == case and r[1] == new]
    print("%-8s old %s | new %s | median new/old %.3f" % (
        case, " ".join("%.0f" % x for x in a), " ".join("%.0f" % x for x in b),
        statistics.median(b) / statistics.median(a)))
PY
