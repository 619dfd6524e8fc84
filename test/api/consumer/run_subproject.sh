#!/bin/sh
# Vendors the kiln tree as a subproject of test/api/consumer (in a temporary
# folder), builds it with -Werror, and runs the consumer. Usage:
# run_subproject.sh KILN_SOURCE_DIR
set -eu
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src/test/api/consumer/meson.build" "$src/test/api/consumer/consumer.c" "$work/"
mkdir "$work/subprojects"
ln -s "$src" "$work/subprojects/kiln"
meson setup "$work/build" "$work" > "$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
ninja -C "$work/build" > "$work/ninja.log" 2>&1 || { cat "$work/ninja.log"; exit 1; }
# kiln's tests and examples stay out of a parent's build.
if [ -e "$work/build/subprojects/kiln/test" ] || [ -e "$work/build/subprojects/kiln/examples" ]; then
    echo "kiln built its tests or examples as a subproject"
    exit 1
fi
"$work/build/consumer"
