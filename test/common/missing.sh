# Sourced by the shell tests: skip_missing REASON, for a test that cannot
# run because something it needs is not installed. Exits 77 (meson: SKIP),
# or 1 under CI=true, where test/run.sh has installed everything. A test
# that finds one device where it wants two skips as before.
skip_missing() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL (CI=true: a missing dependency fails): $*" >&2
        exit 1
    fi
    echo "SKIP: $*"
    exit 77
}
