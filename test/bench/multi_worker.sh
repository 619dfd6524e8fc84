#!/bin/sh
# Training samples/s of the seed CNN across processes, alternating in one
# run (BENCH_ROUNDS rounds, default 2): kiln on 1 PoCL basic device, kiln
# with 1 process x 2 basic devices (mirrored), kiln with 2 processes x 1
# basic device (multi_worker through mpirun), PyTorch DDP over gloo with 2
# processes x 1 thread, and PyTorch in one process with 2 threads; global
# batch 128, one epoch over 20,000 Fashion-MNIST images (PyTorch: the same
# count of steps). Installs the peers' packages (python3-torch, OpenBLAS)
# like run.sh.
set -eu
cd "$(dirname "$0")/../.."
rounds=${BENCH_ROUNDS:-2}
sh tools/install_deps.sh python3-torch libopenblas0-pthread libopenblas-dev >/dev/null 2>&1 ||
    echo "multi_worker.sh: could not install the peers' packages" >&2
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build examples/fashion_mnist >/dev/null
run="./build/examples/fashion_mnist --epochs 1 --limit 20000 --batch 128"
r=0
while [ $r -lt "$rounds" ]; do
    echo "kiln 1 process x 1 device: $(POCL_DEVICES=basic $run 2>&1 | grep 'training time')"
    echo "kiln 1 process x 2 devices: $(POCL_DEVICES="basic basic" $run 2>&1 | grep 'training time')"
    echo "kiln 2 processes x 1 device: $(POCL_DEVICES=basic KILN_STRATEGY=multi_worker \
        sh test/common/mpi_run.sh $run 2>&1 | grep 'training time')"
    /usr/bin/python3 test/bench/torch_ddp_seed_cnn.py --limit 20000 2>&1 | tail -1
    /usr/bin/python3 test/bench/torch_seed_cnn.py --batch 128 --steps 156 2>&1 | tail -1
    r=$((r + 1))
done
