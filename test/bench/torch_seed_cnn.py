#!/usr/bin/python3
"""The peer of bench_train.c: the seed CNN in PyTorch on the CPU, timed the
same way on the same data, model, optimizer, batch, warm-up and step count.

  startup_s            from bringing up the runtime (import torch, as kiln's
                       context creation loads PoCL) to the end of the first
                       training step
  train_samples_per_s  after a warm-up epoch over W*B samples, one shuffled
                       epoch over N*B further samples
  eval_samples_per_s   (--eval) the 10k test set at batch B, after a warm-up
                       pass meeting the same batch shapes
  accuracy             (--epochs-accuracy E) a fresh model trained E epochs on
                       all 60k samples, then its test accuracy

An epoch does what kiln_model_fit does: shuffle, gather each batch, step, and
keep the running loss and accuracy. Exits 77 (skip) without PyTorch."""
import argparse
import gzip
import json
import os
import struct
import sys
import time

# Measured best on this machine: OpenBLAS's own thread pool fights PyTorch's
# (set before torch loads OpenBLAS; forced, so a caller's setting cannot
# handicap the peer).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

T_START = time.perf_counter()
try:
    import torch
    from torch import nn
except ImportError as e:
    print("SKIP: PyTorch not available (%s)" % e)
    sys.exit(77)
try:
    import numpy as np
except ImportError:
    np = None

TRAIN_SAMPLES = 60000
TEST_SAMPLES = 10000


def now():
    return time.perf_counter()


def read_idx(data, prefix, limit):
    """Images scaled by 1/255 as (n, 1, 28, 28) float32, labels int64."""
    with gzip.open("%s/%s-images-idx3-ubyte.gz" % (data, prefix), "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        n = min(n, limit) if limit else n
        pixels = f.read(n * rows * cols)
    with gzip.open("%s/%s-labels-idx1-ubyte.gz" % (data, prefix), "rb") as f:
        magic_l, n_l = struct.unpack(">II", f.read(8))
        labels = f.read(n)
    if magic != 0x803 or magic_l != 0x801 or n_l < n or len(pixels) != n * rows * cols \
            or len(labels) != n:
        raise ValueError("%s/%s: not a matching pair of IDX files" % (data, prefix))
    if np is not None:
        x = torch.from_numpy(np.frombuffer(pixels, dtype=np.uint8).copy())
        y = torch.from_numpy(np.frombuffer(labels, dtype=np.uint8).astype(np.int64))
    else:
        x = torch.frombuffer(bytearray(pixels), dtype=torch.uint8)
        y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x.float().div_(255.0).reshape(n, 1, rows, cols), y


def seed_cnn():
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(13 * 13 * 32, 64), nn.ReLU(), nn.Linear(64, 10))
    # Keras's (and kiln's) initialisation, so accuracies compare.
    for layer in model:
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)  # Keras's epsilon
    return model, opt


# Softmax folded into the loss, as kiln fuses it with sparse cross-entropy.
LOSS = nn.CrossEntropyLoss()


def fit_epoch(model, opt, x, y, batch, gen, first_step=None):
    model.train()
    n = x.shape[0]
    order = torch.randperm(n, generator=gen)
    loss_sum, correct = 0.0, 0
    for i in range(0, n, batch):
        idx = order[i:i + batch]
        xb, yb = x[idx], y[idx]
        opt.zero_grad(set_to_none=True)
        out = model(xb)
        loss = LOSS(out, yb)
        loss.backward()
        opt.step()
        loss_sum += loss.item() * len(idx)
        correct += (out.argmax(1) == yb).sum().item()
        if i == 0 and first_step is not None:
            first_step()
    return loss_sum / n, correct / n


def evaluate(model, x, y, batch):
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.inference_mode():
        for i in range(0, x.shape[0], batch):
            out = model(x[i:i + batch])
            loss_sum += LOSS(out, y[i:i + batch]).item() * out.shape[0]
            correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    return loss_sum / x.shape[0], correct / x.shape[0]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=200, help="timed training steps")
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps, >= 1")
    p.add_argument("--limit", type=int, default=0,
                   help="training samples read (0: what warm-up and timing use)")
    p.add_argument("--eval", action="store_true", help="also time evaluation")
    p.add_argument("--epochs-accuracy", type=int, default=0, metavar="E")
    p.add_argument("--json", metavar="PATH", help="append one JSON object to PATH")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    a = p.parse_args()
    need = (a.warmup + a.steps) * a.batch
    if min(a.batch, a.steps, a.warmup, a.threads) < 1 or a.epochs_accuracy < 0 \
            or need > (a.limit or TRAIN_SAMPLES) or a.limit > TRAIN_SAMPLES:
        p.error("need batch, steps, warmup, threads >= 1 and (warmup + steps) * batch = %d "
                "<= limit <= %d" % (need, TRAIN_SAMPLES))
    a.limit = a.limit or need
    return a


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(2)

    x, y = read_idx(a.data, "train", a.limit)
    model, opt = seed_cnn()
    t_first = []
    w = a.warmup * a.batch
    fit_epoch(model, opt, x[:w], y[:w], a.batch, gen, lambda: t_first.append(now()))
    startup = t_first[0] - T_START

    # Slices are cut before the clock starts: only the epoch is timed.
    xs, ys = x[w:w + a.steps * a.batch], y[w:w + a.steps * a.batch]
    t0 = now()
    fit_epoch(model, opt, xs, ys, a.batch, gen)
    train_rate = a.steps * a.batch / (now() - t0)

    eval_rate = accuracy = xt = yt = None
    if a.eval or a.epochs_accuracy:
        xt, yt = read_idx(a.data, "t10k", 0)
    if a.eval:
        n = min(w + TEST_SAMPLES % a.batch, xt.shape[0])
        evaluate(model, xt[:n], yt[:n], a.batch)
        t0 = now()
        evaluate(model, xt, yt, a.batch)
        eval_rate = xt.shape[0] / (now() - t0)
    if a.epochs_accuracy:
        xf, yf = read_idx(a.data, "train", 0)
        fresh, fresh_opt = seed_cnn()
        for _ in range(a.epochs_accuracy):
            fit_epoch(fresh, fresh_opt, xf, yf, a.batch, gen)
        accuracy = evaluate(fresh, xt, yt, a.batch)[1]

    device = "cpu: %s, %d thread(s)" % (cpu_name(), torch.get_num_threads())
    if a.json:
        row = {"name": "pytorch", "batch": a.batch, "steps": a.steps, "warmup": a.warmup,
               "train_samples_per_s": round(train_rate, 4),
               "eval_samples_per_s": None if eval_rate is None else round(eval_rate, 4),
               "startup_s": round(startup, 4), "accuracy": accuracy,
               "epochs_accuracy": a.epochs_accuracy, "device": device,
               "threads": torch.get_num_threads(), "torch": torch.__version__}
        with open(a.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    line = "pytorch: batch %d, %d steps: %.0f train samples/s" % (a.batch, a.steps, train_rate)
    if eval_rate is not None:
        line += ", %.0f eval samples/s" % eval_rate
    line += ", startup %.2f s" % startup
    if accuracy is not None:
        line += ", test accuracy %.4f after %d epoch(s)" % (accuracy, a.epochs_accuracy)
    print(line + " [%s, torch %s]" % (device, torch.__version__))


if __name__ == "__main__":
    main()
