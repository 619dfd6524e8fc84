#!/bin/sh
# Fails if the shared library exports any symbol not named kiln_*.
set -eu
lib="$1"
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^kiln_' || true)
count=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/' | grep -c ' kiln_' || true)
if [ -n "$bad" ]; then
    echo "exported symbols without the kiln_ prefix:"
    echo "$bad"
    exit 1
fi
echo "$count exported symbols, all kiln_*"
[ "$count" -gt 20 ]
