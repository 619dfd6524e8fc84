#!/bin/sh
# Installs what is missing of what building and testing need
# (tools/install_deps.sh --test), builds kiln and runs every test but the
# suite zoo. The last line is "N passed, N failed, N skipped".
set -eu
cd "$(dirname "$0")/.."
sh tools/install_deps.sh --test
# ONNX Runtime (npm), which the ONNX tests compare with; they report it
# missing if this fails (no network to npm, say).
sh tools/install_onnxruntime.sh .deps/onnxruntime || true
[ -f build/build.ninja ] || meson setup build
ninja -C build
status=0
# The suite zoo (torchvision's heavy networks beside PyTorch, tens of minutes)
# is left out: .ci/run runs it on its own.
meson test -C build --print-errorlogs --num-processes 2 --no-suite zoo "$@" || status=$?
# meson writes one JSON object per test; count its verdicts.
python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0, "TIMEOUT": 0, "ERROR": 0, "EXPECTEDFAIL": 0,
          "UNEXPECTEDPASS": 0}
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if line:
        result = json.loads(line)["result"]
        counts[result] = counts.get(result, 0) + 1
failed = counts["FAIL"] + counts["TIMEOUT"] + counts["ERROR"] + counts["UNEXPECTEDPASS"]
print("%d passed, %d failed, %d skipped" % (counts["OK"] + counts["EXPECTEDFAIL"], failed,
                                             counts["SKIP"]))
PY
exit $status
