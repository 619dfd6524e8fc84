#!/usr/bin/python3
"""Pretrains a small CNN on Fashion-MNIST classes 0-4 and exports it to ONNX,
the backbone examples/finetune.c fine-tunes on classes 5-9.

    /usr/bin/python3 tools/pretrain_fashion.py OUT.onnx [--epochs N] [--limit N]
        [--seed S] [--source DIR]

The network is torchvision-style: four Conv/BatchNorm/ReLU blocks (3x3 with
a max pool after the first and a stride of 2 in the third, then a 1x1 to 128
channels), a global average pool, a Flatten ("/Flatten": the pooled
features) and a Linear head of 5 logits. A new head goes on /Flatten or,
better for classes 5-9, on the last 3x3 block's output
("/features/features.9/Relu"): docs/importing.md, "Fine-tuning". It is
exported as test_import exports its CNN (opset 17, batch norm kept, no
constant folding) with a dynamic batch; the input is "image", (batch, 1,
28, 28) floats in [0, 1]. Seeded: the same
file every run on the same machine. Needs Debian's python3-torch and
python3-onnx under /usr/bin/python3; kiln never runs it.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_png_folder import read_idx  # noqa: E402  (reads Debian's .gz IDX files)

try:
    import torch
    from torch import nn
except ImportError:
    print("torch is not installed for /usr/bin/python3 (Debian: python3-torch)")
    sys.exit(77)


def block(cin, cout, stride, size=3):
    return [nn.Conv2d(cin, cout, size, stride=stride, padding=size // 2, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU()]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        # The 1x1 block widens the pooled features to 128: a linear head on
        # them learns new classes better than on 32 (measured: 0.84 against
        # 0.74 on classes 5-9 from 1,000 samples in PyTorch).
        self.features = nn.Sequential(*block(1, 16, 1), nn.MaxPool2d(2), *block(16, 32, 1),
                                      *block(32, 32, 2), *block(32, 128, 1, 1))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def load(source, split, limit):
    prefix = {"train": "train", "test": "t10k"}[split]
    (n, rows, cols), images = read_idx(os.path.join(source, prefix + "-images-idx3-ubyte"),
                                       0x803, 3, 0)
    _, labels = read_idx(os.path.join(source, prefix + "-labels-idx1-ubyte"), 0x801, 1, 0)
    x = np.frombuffer(images, np.uint8).reshape(n, 1, rows, cols).astype(np.float32) / 255
    y = np.frombuffer(labels, np.uint8).astype(np.int64)
    keep = y < 5   # the classes the backbone learns; finetune.c takes 5-9
    x, y = x[keep], y[keep]
    return (x[:limit], y[:limit]) if limit else (x, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .onnx file to write")
    parser.add_argument("--epochs", type=int, default=2, help="default 2")
    parser.add_argument("--limit", type=int, default=0,
                        help="train on at most N samples of classes 0-4 (0: all 30000)")
    parser.add_argument("--seed", type=int, default=1, help="default 1")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist",
                        help="folder of the IDX files (default: Debian's)")
    args = parser.parse_args()
    if args.epochs < 1 or args.limit < 0:
        parser.error("--epochs must be >= 1 and --limit >= 0")
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)   # deterministic, and fair to a shared machine
    x, y = load(args.source, "train", args.limit)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    order = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        net.train()
        perm = torch.randperm(len(x), generator=order)
        total = 0.0
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        print("epoch %d: loss %.4f" % (epoch + 1, total / len(x)))
    tx, ty = load(args.source, "test", 0)
    net.eval()
    with torch.no_grad():
        acc = float((net(torch.from_numpy(tx)).argmax(1).numpy() == ty).mean())
    print("test accuracy on classes 0-4: %.4f" % acc)
    torch.onnx.export(net, torch.zeros(2, 1, 28, 28), args.out, opset_version=17,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    print("wrote %s (%d bytes)" % (args.out, os.path.getsize(args.out)))


if __name__ == "__main__":
    main()
