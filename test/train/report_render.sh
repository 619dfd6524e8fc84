#!/bin/sh
# The training report as a person sees it: test_report writes one, headless
# chromium takes a screenshot, and report_render.py checks that each curve
# is drawn in its colour where its numbers put it and that nothing else is
# in the plots. Installs nothing: without chromium it skips (fails under
# CI=true).
# Usage: report_render.sh TEST_REPORT REPORT_RENDER_PY
# REPORT_RENDER_KEEP=DIR keeps the report and its screenshot in DIR.
set -eu
. "$(dirname "$0")/../common/missing.sh"
command -v chromium >/dev/null 2>&1 ||
    skip_missing "chromium is not installed (Debian: chromium; tools/install_deps.sh --test)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
"$1" "$work/report.html" || status=$?
[ "$status" -eq 0 ] || exit "$status"   # 77: no OpenCL device
# The size the test's layout assumes, one CSS pixel per screen pixel.
timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --force-device-scale-factor=1 --user-data-dir="$work/profile" \
    --screenshot="$work/report.png" --window-size=1200,1600 "file://$work/report.html" \
    >"$work/chromium.log" 2>&1 || { cat "$work/chromium.log"; exit 1; }
[ -s "$work/report.png" ] ||
    { echo "chromium wrote no screenshot:"; cat "$work/chromium.log"; exit 1; }
if [ -n "${REPORT_RENDER_KEEP:-}" ]; then
    mkdir -p "$REPORT_RENDER_KEEP"
    cp "$work/report.html" "$work/report.png" "$REPORT_RENDER_KEEP"
fi
/usr/bin/python3 "$2" "$work/report.html" "$work/report.png"
