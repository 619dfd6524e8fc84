#!/bin/sh
# Installs what is missing of what building and running need (not the
# test tools: tools/install_deps.sh without --test), builds kiln and trains the seed CNN on
# Fashion-MNIST on every default OpenCL device (mirrored across them).
# Extra arguments go to the example (e.g. --epochs 1).
set -eu
cd "$(dirname "$0")/.."
sh tools/install_deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
# Two PoCL "basic" devices each compute on the thread that drives them, so
# on a machine without a GPU they act as two independent devices and the
# example trains with the mirrored strategy across both. (PoCL's default
# "pthread" devices share one thread pool: two of them are no faster than one.)
export POCL_DEVICES="${POCL_DEVICES:-basic basic}"
# Each replica takes 32 samples a step (TensorFlow's per-replica batch: the
# global batch is 32 x the replicas), so that a second device adds work
# instead of halving each one's share; --batch N asks for a global batch.
case " $* " in
    *" --batch "*|*" --per-replica-batch "*) exec ./build/examples/fashion_mnist "$@" ;;
esac
exec ./build/examples/fashion_mnist --per-replica-batch 32 "$@"
