#!/usr/bin/python3
"""The peer of examples/resnet.c --input S: the seed ResNet
(examples/resnet_model.c) in PyTorch on the CPU (or a CUDA GPU, --device
cuda: tools/gpu_check.sh), trained on the same kind of
synthetic data at the same input, batch, warm-up and step count.

Same architecture, layer for layer: a 7x7/2 stem of 64 filters, batch norm,
ReLU, 3x3/2 max pooling; eight residual blocks of 64, 64, 128/2, 128, 256/2,
256, 512/2, 512 filters (conv 3x3 - BN - ReLU - conv 3x3 - BN, a 1x1 conv and
BN on the shortcut where the block downsamples or widens; Add; ReLU); global
average pooling; Dense(10). Convolutions keep their bias (Keras's default).
Padding is Keras's 'same', which pads the extra row and column of a stride-2
window at the bottom and right (PyTorch's padding= is symmetric, so those
layers pad explicitly; max pooling pads with -inf). Batch norm: Keras's
epsilon 1e-3 and momentum 0.99 (PyTorch's momentum 0.01). Adam with Keras's
defaults (lr 1e-3, betas 0.9 and 0.999, epsilon 1e-7). Softmax is folded
into the loss, as kiln fuses it with sparse cross-entropy. Channels-last
memory, the layout kiln computes in.

Prints the parameter count (trainable + batch norm's moving statistics, as
kiln's summary counts them), then one line:
  pytorch: input SxSx3, batch B: T s per step, R samples/s
Exits 77 (skip) without PyTorch."""
import argparse
import os
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"   # as torch_seed_cnn.py: no second thread pool
try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:
    print("SKIP: PyTorch not available (%s)" % e)
    sys.exit(77)


def same_pads(size, window, stride):
    """Keras's 'same' padding of one axis: (before, after)."""
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + window - size, 0)
    return total // 2, total - total // 2, out


class SameConv(nn.Module):
    def __init__(self, side, cin, cout, k, stride):
        super().__init__()
        top, bottom, self.out = same_pads(side, k, stride)
        self.pad = None if top == bottom else (top, bottom, top, bottom)
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=top if top == bottom else 0)
        nn.init.xavier_uniform_(self.conv.weight)   # Keras's glorot_uniform
        nn.init.zeros_(self.conv.bias)

    def forward(self, x):
        return self.conv(x if self.pad is None else F.pad(x, self.pad))


def bn(c):
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)


class SamePool(nn.Module):
    def __init__(self, side, k, stride):
        super().__init__()
        top, bottom, self.out = same_pads(side, k, stride)
        self.pad = (top, bottom, top, bottom)
        self.k, self.stride = k, stride

    def forward(self, x):
        return F.max_pool2d(F.pad(x, self.pad, value=float("-inf")), self.k, self.stride)


class Block(nn.Module):
    def __init__(self, side, cin, cout, stride):
        super().__init__()
        self.conv1 = SameConv(side, cin, cout, 3, stride)
        self.bn1 = bn(cout)
        self.conv2 = SameConv(self.conv1.out, cout, cout, 3, 1)
        self.bn2 = bn(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(SameConv(side, cin, cout, 1, stride), bn(cout))
        self.out = self.conv1.out

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    def __init__(self, side, channels, classes):
        super().__init__()
        self.stem = SameConv(side, channels, 64, 7, 2)
        self.stem_bn = bn(64)
        self.pool = SamePool(self.stem.out, 3, 2)
        side, cin, blocks = self.pool.out, 64, []
        for cout, stride in zip((64, 64, 128, 128, 256, 256, 512, 512), (1, 1, 2, 1, 2, 1, 2, 1)):
            blocks.append(Block(side, cin, cout, stride))
            side, cin = blocks[-1].out, cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, classes)
        nn.init.xavier_uniform_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        x = self.pool(F.relu(self.stem_bn(self.stem(x))))
        x = self.blocks(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--input", type=int, default=32, help="side S of the S x S x 3 input")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="timed training steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first, >= 1")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda (a GPU: float32 without TF32, cuDNN's autotuner on)")
    a = p.parse_args()
    if min(a.input, a.batch, a.steps, a.warmup, a.threads) < 1:
        p.error("input, batch, steps, warmup and threads must be >= 1")
    return a


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    where = "%d thread(s)" % torch.get_num_threads()
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("SKIP: PyTorch sees no CUDA device")
            sys.exit(77)
        # kiln computes in float32: no TF32 in PyTorch's convolutions or
        # products either; the autotuner picks cuDNN's fastest (warm-up steps).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        where = "%s, float32 without TF32" % torch.cuda.get_device_name(dev)
    model = ResNet(a.input, 3, 10).to(memory_format=torch.channels_last)
    trainable = sum(p.numel() for p in model.parameters())
    moving = sum(b.numel() for n, b in model.named_buffers() if not n.endswith("batches_tracked"))
    print("pytorch params: total %d, trainable %d, non-trainable %d"
          % (trainable + moving, trainable, moving))
    loss_fn = nn.CrossEntropyLoss()

    # Uniform [0, 1) images and labels i % 10, as resnet.c's synthetic data.
    n = a.batch * (a.warmup + a.steps)
    x = torch.rand(n, 3, a.input, a.input).contiguous(memory_format=torch.channels_last)
    y = torch.arange(n) % 10
    model, x, y = model.to(dev), x.to(dev), y.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
    model.train()

    def step(i):
        xb, yb = x[i * a.batch:(i + 1) * a.batch], y[i * a.batch:(i + 1) * a.batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()   # kiln reads its loss sums back each step too (a GPU sync)

    for i in range(a.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(a.warmup, a.warmup + a.steps):
        step(i)
    dt = time.perf_counter() - t0
    print("pytorch: input %dx%dx3, batch %d: %.3f s per step, %.1f samples/s [torch %s, "
          "%s]" % (a.input, a.input, a.batch, dt / a.steps, a.batch * a.steps / dt,
                   torch.__version__, where))


if __name__ == "__main__":
    main()
