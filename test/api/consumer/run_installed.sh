#!/bin/sh
# Installs kiln from an existing build into a temporary folder, then builds
# the consumer with nothing but `pkg-config --cflags --libs kiln`, shared and
# static, and runs both. Usage: run_installed.sh KILN_SOURCE_DIR KILN_BUILD_DIR
set -eu
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --destdir "$work/root" --no-rebuild > "$work/install.log" 2>&1 ||
    { cat "$work/install.log"; exit 1; }
pcdir=$(dirname "$(find "$work/root" -name kiln.pc | head -n 1)")
libdir=$(dirname "$(find "$work/root" -name 'libkiln.so*' | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"
# The sysroot puts the temporary root in front of the installed prefix.
export PKG_CONFIG_SYSROOT_DIR="$work/root"
pc="pkg-config"
cc=${CC:-cc}
# No public header mentions MPI, so its compile flags must not leak out.
if $pc --cflags kiln | grep -q -i mpi; then
    echo "pkg-config --cflags kiln names MPI: $($pc --cflags kiln)"; exit 1
fi
# shared, found at run time through the rpath docs/embedding.md suggests (no
# LD_LIBRARY_PATH)
$cc -std=c99 -Wall -Wextra -Werror -pedantic $($pc --cflags kiln) \
    "$src/test/api/consumer/consumer.c" -o "$work/consumer-shared" $($pc --libs kiln) \
    -Wl,-rpath,"$libdir"
"$work/consumer-shared"
if ldd "$work/consumer-shared" | grep -q "libkiln.so"; then :; else
    echo "the shared consumer does not use libkiln.so"; exit 1
fi
# static: libkiln.a, its dependencies from Libs.private
$cc -std=c99 -Wall -Wextra -Werror -pedantic $($pc --cflags kiln) \
    "$src/test/api/consumer/consumer.c" -o "$work/consumer-static" \
    "$libdir/libkiln.a" $($pc --static --libs-only-other --libs-only-L kiln) \
    $($pc --static --libs kiln | tr ' ' '\n' | grep -v '^-lkiln$' | tr '\n' ' ')
if ldd "$work/consumer-static" | grep -q "libkiln.so"; then
    echo "the static consumer still loads libkiln.so"; exit 1
fi
"$work/consumer-static"
