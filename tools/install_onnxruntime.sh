#!/bin/sh
# Installs ONNX Runtime for Node.js (onnxruntime-node, CPU) into DIR/node_modules
# with npm, unless that version is there already: what test_onnx runs kiln's
# ONNX files with. Its install script, which fetches CUDA libraries, is
# skipped (--ignore-scripts); the CPU runtime is in the package itself.
# Tests that start at once each call it; a lock (flock, util-linux) makes
# the second wait for the first's install instead of racing it in npm.
# Usage: install_onnxruntime.sh DIR   (ONNXRUNTIME_NODE_VERSION overrides the version)
set -eu

if [ -z "${KILN_ORT_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
    mkdir -p "$1"
    KILN_ORT_LOCKED=1 exec flock "$1/.install.lock" sh "$0" "$@"
fi

dir="$1"
version="${ONNXRUNTIME_NODE_VERSION:-1.30.0}"
installed="$dir/node_modules/onnxruntime-node/package.json"

if [ -f "$installed" ] && grep -q "\"version\": \"$version\"" "$installed"; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "install_onnxruntime: npm is not installed (Debian: apt-get install npm)" >&2
    exit 1
fi
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
echo "install_onnxruntime: npm install onnxruntime-node@$version into $dir"
npm install --prefix "$dir" --ignore-scripts --no-audit --no-fund --no-save \
    "onnxruntime-node@$version"
