#!/bin/sh
# Cross-compiles kiln for aarch64 from scratch, as a user targeting an ARM
# board would (tools/cross/aarch64-linux-gnu.ini), and checks the result: an
# aarch64 shared library exporting only kiln_* symbols, with the soversion of
# the header's version (major.minor before 1.0). Then runs the unit tests that need no OpenCL device
# (datasets, reducer) under qemu-user. Installs what it needs with apt-get.
set -eu
cd "$(dirname "$0")/.."
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    [ "$(id -u)" -eq 0 ] || { echo "cross_aarch64: need root to add the arm64 architecture"; exit 1; }
    dpkg --add-architecture arm64
    apt-get update
fi
sh tools/install_deps.sh gcc-aarch64-linux-gnu libc6-dev-arm64-cross ocl-icd-opencl-dev:arm64 \
    libclblast-dev:arm64 zlib1g-dev:arm64 qemu-user binutils-aarch64-linux-gnu file
dir=build-aarch64
rm -rf "$dir"
meson setup "$dir" --cross-file tools/cross/aarch64-linux-gnu.ini -Dwerror=true > /dev/null
ninja -C "$dir" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
lib=$(ls "$dir"/libkiln.so.*.*.* | head -n 1)
file -L "$lib" | grep -q "ARM aarch64" || { echo "$lib is not an aarch64 library"; exit 1; }
echo "built $(file -L "$lib" | cut -d, -f1-2)"
NM=aarch64-linux-gnu-nm
bad=$($NM -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^kiln_' || true)
[ -z "$bad" ] || { echo "exported symbols without the kiln_ prefix: $bad"; exit 1; }
echo "$($NM -D --defined-only "$lib" | grep -c ' kiln_') exported symbols, all kiln_*"
# The soversion as meson.build makes it: major.minor before 1.0, then major.
soversion=$(python3 tools/version.py include/kiln.h | awk -F. '{print ($1 == 0 ? $1 "." $2 : $1)}')
[ -e "$dir/libkiln.so.$soversion" ] || { echo "no libkiln.so.$soversion"; exit 1; }
for t in datasets/test_dataset comm/test_reducer; do
    QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64 -L / "$dir/test/$t" | tail -n 1
done
