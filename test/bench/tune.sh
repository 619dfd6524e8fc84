#!/bin/sh
# Searches GEMM parameters for the devices POCL_DEVICES / KILN_DEVICES select,
# unless kiln's cache already holds them (then returns at once), so that a
# benchmark's timed runs use tuned GEMMs without paying for the search.
# Usage: sh test/bench/tune.sh BUILD_DIR. Does nothing under
# KILN_GEMM_TUNING=off (measuring CLBlast's defaults).
set -eu
[ "${KILN_GEMM_TUNING:-stored}" = off ] && exit 0
KILN_GEMM_TUNING=search "$1/test/bench/bench_train" --batch 32 --steps 1 --warmup 1 \
    --limit 64 >/dev/null || { echo "tune.sh: GEMM tuning failed" >&2; exit 1; }
