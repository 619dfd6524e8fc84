#!/usr/bin/python3
"""The peer: the seed CNN in PyTorch (CPU), timed exactly as bench_train.c
times kiln: same data, model, optimizer, batch, warm-up and step count.
Prints one JSON object. Exits 77 (skip) without PyTorch."""
import argparse
import gzip
import json
import os
import struct
import sys
import time

# Measured best settings on this machine: OpenBLAS's own pool fights
# PyTorch's and halves its speed; torch defaults to 1 thread here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:
    print("SKIP: PyTorch not available (%s)" % e)
    sys.exit(77)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(images, labels, limit):
    with gzip.open(images, "rb") as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        n = min(n, limit) if limit else n
        x = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    with gzip.open(labels, "rb") as f:
        f.read(8)
        y = np.frombuffer(f.read(n), dtype=np.uint8)
    x = torch.from_numpy(x.reshape(n, 1, rows, cols).astype(np.float32) / 255.0)
    return x, torch.from_numpy(y.astype(np.int64))


def seed_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(13 * 13 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def train(model, opt, loss_fn, x, y, batch, steps, offset=0):
    model.train()
    n = x.shape[0]
    for s in range(steps):
        i = (offset + s) * batch % max(n - batch, 1)
        opt.zero_grad()
        loss = loss_fn(model(x[i:i + batch]), y[i:i + batch])
        loss.backward()
        opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--eval", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    t_start = time.perf_counter()
    x, y = read_idx(DATA + "/train-images-idx3-ubyte.gz", DATA + "/train-labels-idx1-ubyte.gz",
                    (args.steps + args.warmup) * args.batch)
    model = seed_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)  # Keras's epsilon
    loss_fn = nn.CrossEntropyLoss()  # softmax folded into the loss, as kiln fuses it
    train(model, opt, loss_fn, x, y, args.batch, 1)
    startup = time.perf_counter() - t_start
    train(model, opt, loss_fn, x, y, args.batch, args.warmup)
    t0 = time.perf_counter()
    train(model, opt, loss_fn, x, y, args.batch, args.steps, args.warmup)
    train_rate = args.steps * args.batch / (time.perf_counter() - t0)
    eval_rate = None
    if args.eval:
        xt, yt = read_idx(DATA + "/t10k-images-idx3-ubyte.gz", DATA + "/t10k-labels-idx1-ubyte.gz", 0)
        model.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            for i in range(0, xt.shape[0], 256):
                loss_fn(model(xt[i:i + 256]), yt[i:i + 256])
        eval_rate = xt.shape[0] / (time.perf_counter() - t0)
    print(json.dumps({"name": "pytorch", "batch": args.batch, "steps": args.steps,
                      "train_samples_per_s": train_rate, "eval_samples_per_s": eval_rate,
                      "startup_s": startup, "threads": args.threads}))


if __name__ == "__main__":
    main()
