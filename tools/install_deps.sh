#!/bin/sh
# Installs, with apt-get, what kiln needs on Debian 12; only missing packages
# are installed. Run as root (or with sudo available).
#   sh tools/install_deps.sh [--test] [PACKAGE...]
# Without --test: what building kiln and running its examples need (what
# examples/quickstart.sh installs). With --test: also what the test suite
# needs (test/run.sh). Extra package names are installed too.
set -eu

with_tests=0
if [ "${1:-}" = --test ]; then
    with_tests=1
    shift
fi

# The build: compilers, meson, OpenCL (loader, headers, CLBlast, PoCL as the
# CPU device), the image and gzip decoders, and the two features the default
# build turns on where they are found: ONNX export (protobuf-c, and ONNX's own
# onnx.proto, which meson takes from python3-onnx) and multi-worker training
# over MPI. Fashion-MNIST is the examples' data.
packages="meson ninja-build pkg-config gcc python3 ocl-icd-opencl-dev opencl-c-headers \
libclblast-dev pocl-opencl-icd zlib1g-dev libpng-dev libturbojpeg0-dev \
libprotobuf-c-dev protobuf-c-compiler python3-onnx libopenmpi-dev openmpi-bin \
dataset-fashion-mnist"

# The tests: g++ (the public headers compiled as C++), Oclgrind
# (tools/oclgrind.sh), PIL and NumPy (image and .npy files compared with
# theirs), PyTorch (char_lm_parity), chromium (report_render), node +
# npm, with which test_onnx installs ONNX Runtime on first use
# (install_onnxruntime.sh), ONNX's own conformance tests
# (test_onnx_conformance), and OpenBLAS: Debian's PyTorch calls the system
# BLAS, whose reference implementation ran the float64 references of the
# parity and zoo tests (PyTorch's float64 convolutions are GEMMs) one slow
# loop at a time; its -dev package builds bench_gemm's peer column
# (cblas_sgemm beside kiln's GEMM on the same threads).
if [ "$with_tests" -eq 1 ]; then
    packages="$packages g++ oclgrind python3-pil python3-numpy python3-torch \
python3-torchvision chromium nodejs npm libonnx-testdata libopenblas0-pthread \
libopenblas-dev"
fi
packages="$packages $*"

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
