#!/bin/sh
# Installs, with apt-get, what kiln needs to build, test and run its examples
# on Debian 12. Only missing packages are installed. Run as root (or with sudo
# available). Extra package names may be passed as arguments.
set -eu

packages="meson ninja-build pkg-config gcc g++ python3 ocl-icd-opencl-dev opencl-c-headers \
libclblast-dev pocl-opencl-icd zlib1g-dev libpng-dev libturbojpeg0-dev dataset-fashion-mnist \
libopenmpi-dev openmpi-bin oclgrind python3-pil chromium $*"

# ONNX export: protobuf-c and python3-onnx (ONNX's onnx.proto, its checker);
# test_onnx has npm install ONNX Runtime on first use (install_onnxruntime.sh).
packages="$packages libprotobuf-c-dev protobuf-c-compiler python3-onnx nodejs npm"

missing=""
for p in $packages; do
    # NodeSource's nodejs package carries npm and conflicts with Debian's.
    if { [ "$p" = nodejs ] && command -v node >/dev/null 2>&1; } ||
       { [ "$p" = npm ] && command -v npm >/dev/null 2>&1; }; then
        continue
    fi
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "install_deps: need root to install:$missing" >&2
    exit 1
fi
echo "install_deps: installing$missing"
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends $missing
