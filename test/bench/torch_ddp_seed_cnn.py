#!/usr/bin/python3
"""The peer of kiln's multi_worker strategy: the seed CNN in PyTorch
DistributedDataParallel over the gloo backend, 2 processes on this machine
(loopback), 1 thread each, each taking its half of every global batch as
kiln's processes do. Prints training samples/s of one epoch over LIMIT
images after a warm-up of 5 steps, timed like the example's fit.

Usage: torch_ddp_seed_cnn.py [--batch B] [--limit N] [--processes P]
Exits 77 (skip) without PyTorch or its distributed package."""
import argparse
import os
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    import torch_seed_cnn as peer
except ImportError as e:
    print("SKIP: PyTorch not available (%s)" % e)
    sys.exit(77)


def worker(rank, args, port, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=args.processes)
    torch.manual_seed(0)
    x, y = peer.read_idx(args.data, "train", args.limit)
    model, _ = peer.seed_cnn()
    model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    gen = torch.Generator().manual_seed(1)
    n = x.shape[0]
    share = args.batch // args.processes

    def steps(order, count):
        for i in range(0, count * args.batch, args.batch):
            idx = order[i + rank * share:i + (rank + 1) * share]
            opt.zero_grad(set_to_none=True)
            loss = peer.LOSS(model(x[idx]), y[idx])
            loss.backward()
            opt.step()

    steps(torch.randperm(n, generator=gen), 5)   # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    steps(torch.randperm(n, generator=gen), n // args.batch)
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        results.put((n // args.batch) * args.batch / elapsed)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--limit", type=int, default=20000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if not dist.is_available() or not dist.is_gloo_available():
        print("SKIP: torch.distributed with gloo is not available")
        sys.exit(77)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=worker, args=(r, a, port, results))
             for r in range(a.processes)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode != 0 for proc in procs):
        sys.exit(1)
    print("pytorch DDP gloo: %d processes x 1 thread, batch %d, %d images: %.0f train "
          "samples/s [torch %s]" % (a.processes, a.batch, a.limit, results.get(),
                                    torch.__version__))


if __name__ == "__main__":
    main()
