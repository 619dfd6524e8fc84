#!/bin/sh
# Prepares, on a Debian 12 machine with network, what tools/gpu_check.sh
# needs on a GPU machine that has no network and no OpenCL ICD loader,
# CLBlast or Fashion-MNIST installed (the device tool's NVIDIA machines):
#   .gpu/root/      the .deb files of the libraries kiln's binaries link that
#                   a bare machine lacks (found with ldd, mapped to their
#                   packages with dpkg -S), and dataset-fashion-mnist,
#                   extracted with dpkg -x (never into /)
#   .gpu/libs.tar.xz  their lib folders, packed (OpenBLAS, which bench_gemm
#                   links, is 37 MB as it lies and 4 MB packed); gpu_check.sh
#                   unpacks them beside the build and puts their
#                   x86_64-linux-gnu folders on LD_LIBRARY_PATH
#   .gpu/fallback/  libstdc++6, libgcc-s1 and zlib1g, which every Debian or
#                   Ubuntu has: used there only if ldd finds one missing
#   .gpu/build.tar.xz  BUILD_DIR's programs, libraries, test data and test
#                   list (meson-info/), debug info stripped, without objects
#                   or static libraries (127 MiB of build folder -> ~2.5 MiB)
#   .gpu/origin     where BUILD_DIR and the source tree were, so that
#                   gpu_check.sh can rewrite the test list's paths, and the
#                   commit built
# Usage: sh tools/gpu_deps.sh [BUILD_DIR]   (default build-gpu, set up with
# -Dmpi=disabled if missing; any build folder without MPI will do, since the
# GPU machine has none), built with ninja. Then carry ".gpu" (the device
# tool's `carry`) and run `sh tools/gpu_check.sh` there.
# Assumed present on the GPU machine, not carried: glibc (libc6), and the
# fallback's three (carried anyway, in case). Prints the size to carry.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
dest=.gpu
arch=x86_64-linux-gnu
mkdir -p "$dest"
here=$(pwd -P)
[ "$(uname -m)" = x86_64 ] ||
    { echo "gpu_deps.sh: this machine is $(uname -m); the GPU machine is x86-64" >&2; exit 1; }

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dmpi=disabled
fi
if grep -q 'KILN_HAVE_MPI 1' "$build/kiln_config.h" 2>/dev/null; then
    echo "gpu_deps.sh: $build is built with MPI, which the GPU machine lacks; name a folder" \
        "set up with -Dmpi=disabled (the default, build-gpu, is set up so)" >&2
    exit 1
fi
nice -n 10 ninja -C "$build" >/dev/null

# The libraries the built programs load, by the package that ships each.
# glibc's own and the fallback's are assumed on any Debian-like machine.
base='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|linux-vdso'
base="$base"'|libgcc_s|libstdc\+\+|libz)\.so'
libs=$(find "$build" -name '*.p' -prune -o -type f -perm -u+x -print |
    while read -r f; do
        file "$f" | grep -q ELF || continue
        ldd "$f" 2>/dev/null | sed -n 's/^[[:space:]]*\([^ ]*\) => \(\/[^ ]*\) .*/\1 \2/p'
    done | sort -u)
packages=""
printf '%s\n' "$libs" | while read -r name path; do
    [ -n "$name" ] || continue
    if printf '%s\n' "$name" | grep -Eq "$base"; then continue; fi
    case $(readlink -f "$path") in "$here"/*) continue ;; esac   # the build's own
    real=$(readlink -f "$path")
    pkg=""
    for p in "$real" "${real#/usr}" "/usr$real" "$path"; do
        pkg=$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1) && [ -n "$pkg" ] && break
    done
    [ -n "$pkg" ] || { echo "gpu_deps.sh: no package ships $path ($name)" >&2; exit 1; }
    echo "$pkg"
done > "$dest/packages.txt"
packages=$(sort -u "$dest/packages.txt" | tr '\n' ' ')
packages="$packages dataset-fashion-mnist"
fallback="libstdc++6 libgcc-s1 zlib1g"
echo "gpu_deps.sh: carried: $packages"
echo "gpu_deps.sh: fallback (used there only if missing): $fallback"

# Downloaded into a scratch folder (apt-get download writes into the current
# one), extracted, and removed: only the extracted files travel.
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
chmod 755 "$debs"
mkdir "$debs/main" "$debs/fb"
chmod 777 "$debs/main" "$debs/fb"   # apt-get downloads as its _apt user where it can
# shellcheck disable=SC2086   # word lists
(cd "$debs/main" && apt-get download $packages >/dev/null &&
    cd ../fb && apt-get download $fallback >/dev/null) ||
    { echo "gpu_deps.sh: apt-get download failed (network? apt-get update?)" >&2; exit 1; }
rm -rf "$dest/root" "$dest/fallback"
for d in main:root fb:fallback; do
    for deb in "$debs/${d%%:*}"/*.deb; do
        dpkg -x "$deb" "$dest/${d#*:}"
    done
done
# Only the libraries and the data: documentation, man pages and lintian
# overrides do not travel.
rm -rf "$dest/root/usr/share/doc" "$dest/root/usr/share/doc-base" "$dest/root/usr/share/man" \
    "$dest/root/usr/share/lintian" "$dest/fallback/usr/share"
(cd "$debs" && ls main fb) | grep '\.deb$' > "$dest/debs.txt"

# The build folder, packed: what runs and what tests read, not what builds.
stage=$debs/build
mkdir "$stage"
(cd "$build" && find . \( -name '*.p' -o -name meson-private -o -name meson-logs \
        -o -name kernel-cache -o -name '*.dir' \) -prune -o \
        \( -type f -o -type l \) ! -name '*.a' ! -name '*.o' ! -name '.ninja_*' \
        ! -name build.ninja ! -name compile_commands.json -print) |
    while read -r f; do
        mkdir -p "$stage/$(dirname "$f")"
        cp -P "$build/$f" "$stage/$f"
        if [ -f "$stage/$f" ] && [ ! -L "$stage/$f" ] && file "$stage/$f" | grep -q ELF; then
            strip --strip-debug "$stage/$f"
        fi
    done
tar -C "$stage" -cf - . | nice -n 10 xz -6 -T2 > "$dest/build.tar.xz"
commit=$(git log -1 --format='%h %cd %s' --date=short 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] ||
    commit="$commit, with uncommitted changes"
printf 'source %s\nbuild %s\ncommit %s\n' "$(pwd)" "$(cd "$build" && pwd)" "$commit" \
    > "$dest/origin"

# Every library the programs need resolves inside .gpu or to glibc's.
carried=$here/$dest/root/usr/lib/$arch
missing=$(LD_LIBRARY_PATH="$carried:$here/$dest/root/lib/$arch:$carried/openblas-pthread" \
    ldd "$build/examples/resnet" "$build/test/layers/test_layers" \
    "$build/test/bench/bench_gemm" 2>&1 |
    sed -n 's/^[[:space:]]*\([^ ]*\) => \(\/[^ ]*\) .*/\1 \2/p' |
    grep -Ev " $here/|$base" || true)
if [ -n "$missing" ]; then
    echo "gpu_deps.sh: found outside .gpu (not on a bare machine?):" >&2
    printf '%s\n' "$missing" >&2
fi
# The libraries travel packed; the data (already gzipped) as it is.
rm -f "$dest/libs.tar.xz"
libdirs=$(cd "$dest/root" && for d in usr/lib lib; do [ ! -d "$d" ] || echo "$d"; done)
# shellcheck disable=SC2086   # a word list
tar -C "$dest/root" -cf - $libdirs | nice -n 10 xz -6 -T2 > "$dest/libs.tar.xz"
# shellcheck disable=SC2086
(cd "$dest/root" && rm -rf $libdirs)
size=$(du -sm "$dest" | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
echo "gpu_deps.sh: .gpu is $size MiB; tracked files $((tree / 1048576)) MiB;" \
    "the device tool carries 64 MiB in all"
if [ $((size + tree / 1048576)) -ge 63 ]; then
    echo "gpu_deps.sh: too much to carry: leave something out of .gpu" >&2
    exit 1
fi
