#!/usr/bin/python3
"""The peer of bench_import: a network of test/importer/zoo_models.py
(torchvision's classifiers and a reduced ViT, random weights, 10 classes)
run in PyTorch on the CPU with what bench_import gives kiln's imported
copy: fixed synthetic batches of (B, 3, S, S); in training, cross-entropy
on the logits (kiln fuses its softmax head into the loss) and SGD with
momentum 0.9 at lr 1e-3; with --infer, the forward pass in eval mode
without autograd (as kiln's predict). W untimed warm-up steps, then N timed
ones. Channels-last memory (oneDNN's fast path on the CPU), 2 threads.

    torch_zoo.py NAME --size S --batch B --steps N --warmup W [--infer]

Prints one line: "params P samples_per_s R ms_per_step T peak_rss_bytes M"
(M: the process's peak resident memory, Python and PyTorch included).
Exits 77 (skip) without PyTorch and torchvision."""
import argparse
import os
import resource
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "importer"))
try:
    import torch
    import zoo_models
except ImportError as e:
    print("SKIP: PyTorch or torchvision not available (%s)" % e)
    sys.exit(77)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--infer", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = zoo_models.build(a.name)
    model = model.to(memory_format=torch.channels_last)
    model = model.eval() if a.infer else model.train()
    params = sum(t.numel() for t in model.state_dict().values() if t.dtype.is_floating_point)
    x = (torch.rand(a.batch, 3, a.size, a.size) * 2 - 1).contiguous(
        memory_format=torch.channels_last)
    y = torch.arange(a.batch) % 10
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = 0.0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            start = time.perf_counter()
        if a.infer:
            with torch.no_grad():
                model(x)
        else:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux
    print("params %d samples_per_s %.2f ms_per_step %.3f peak_rss_bytes %d" % (
        params, a.batch * a.steps / seconds, 1e3 * seconds / a.steps, peak))


if __name__ == "__main__":
    main()
