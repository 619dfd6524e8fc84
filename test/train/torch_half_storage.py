"""PyTorch's side of half_storage_parity.sh: test_half_storage --dump's
network (in (8, 8, 2) -> Conv 4 3x3 same relu -> BatchNorm -> Conv 4 3x3
same relu, added to the BatchNorm's output -> AveragePool 2 -> Flatten ->
Dense(6, tanh) -> Dense(5, softmax) -> Dense(3), MSE) trained 5 SGD steps
(momentum 0.9, Keras's form) from kiln's initial weights in float64 with
autograd, twice: with every layer output rounded to IEEE half where kiln's
activation_storage float16 rounds it (each output of a layer but the model's
last, the Dense(5)'s logits and its softmax each; the gradients through the
rounding left as they are, and tanh's and softmax's gradients taken from the
rounded values, which is what kiln keeps), and without any rounding.

kiln with half storage must sit on the rounded run: its distance from it at
most 10 % of the rounding's own effect (the distance between the two PyTorch
runs), and kiln in float32 on the plain run the same way. A float32 value
that falls on the other side of a half rounding boundary than float64's
moves one activation by one half step; that is the residue allowed (2.9 %
measured here, 2026-11-28). Leaving out any one of the roundings moves the
PyTorch run by 18 % (batch norm's output, tanh's, softmax's) to 96 % (the
first convolution's) of the effect: each is seen."""
import sys

import numpy as np
import torch

from parity_dump import read_tensors, unpack

BATCH, SIDE, CHANNELS, FILTERS, OUTPUTS, STEPS, LR, MOMENTUM = 4, 8, 2, 4, 3, 5, 0.05, 0.9
BN_MOMENTUM, BN_EPSILON = 0.99, 1e-3


class Round(torch.autograd.Function):
    """x rounded to half, its gradient passed on as it is."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.float16).to(torch.float64)

    @staticmethod
    def backward(ctx, g):
        return g


class RoundedTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        y = torch.tanh(z).to(torch.float16).to(torch.float64)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class RoundedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        y = torch.softmax(z, dim=-1).to(torch.float16).to(torch.float64)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(dim=-1, keepdim=True))


def conv(x, w, name):
    """x (B, H, W, C) channels last, kernel (kh, kw, in, out), 'same', relu."""
    y = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w[f"{name}/kernel"].permute(3, 2, 0, 1),
                                   w[f"{name}/bias"], padding=1)
    return torch.relu(y).permute(0, 2, 3, 1)


def batch_norm(x, w):
    mean = x.mean(dim=(0, 1, 2))
    var = x.var(dim=(0, 1, 2), unbiased=False)
    count = x.shape[0] * x.shape[1] * x.shape[2]
    with torch.no_grad():
        w["bn/moving_mean"].mul_(BN_MOMENTUM).add_((1 - BN_MOMENTUM) * mean)
        w["bn/moving_variance"].mul_(BN_MOMENTUM).add_(
            (1 - BN_MOMENTUM) * var * count / (count - 1))
    return (x - mean) / torch.sqrt(var + BN_EPSILON) * w["bn/gamma"] + w["bn/beta"]


def forward(w, x, rounded):
    r = Round.apply if rounded else (lambda v: v)
    b1 = r(batch_norm(r(conv(x, w, "c1")), w))
    a = r(b1 + r(conv(b1, w, "c2")))
    p = r(torch.nn.functional.avg_pool2d(a.permute(0, 3, 1, 2), 2).permute(0, 2, 3, 1))
    f = p.reshape(x.shape[0], -1)
    z1 = f @ w["d1/kernel"] + w["d1/bias"]
    h1 = RoundedTanh.apply(z1) if rounded else torch.tanh(z1)
    z2 = h1 @ w["d2/kernel"] + w["d2/bias"]
    h2 = RoundedSoftmax.apply(z2) if rounded else torch.softmax(z2, dim=-1)
    return h2 @ w["out/kernel"] + w["out/bias"]


def train(init, tensors, x, y, rounded):
    w = unpack(init, tensors)
    velocity = {name: torch.zeros_like(t) for name, t in w.items() if t.requires_grad}
    for s in range(STEPS):
        loss = ((forward(w, torch.tensor(x[s], dtype=torch.float64), rounded) -
                 torch.tensor(y[s], dtype=torch.float64)) ** 2).mean()
        grads = torch.autograd.grad(loss, [w[name] for name in velocity])
        with torch.no_grad():
            for (name, v), g in zip(velocity.items(), grads):
                v.mul_(MOMENTUM).sub_(LR * g)
                w[name].add_(v)
    flat = np.zeros_like(init, dtype=np.float64)
    for name, _, offset, dims in tensors:
        flat[offset:offset + int(np.prod(dims))] = w[name].detach().numpy().reshape(-1)
    return flat


def main():
    folder = sys.argv[1]
    tensors = read_tensors(folder)
    x = np.fromfile(f"{folder}/x.f32", dtype=np.float32).reshape(STEPS, BATCH, SIDE, SIDE, CHANNELS)
    y = np.fromfile(f"{folder}/y.f32", dtype=np.float32).reshape(STEPS, BATCH, OUTPUTS)
    init = np.fromfile(f"{folder}/init.f32", dtype=np.float32)
    half = np.fromfile(f"{folder}/half.f32", dtype=np.float32).astype(np.float64)
    full = np.fromfile(f"{folder}/float.f32", dtype=np.float32).astype(np.float64)
    ref_rounded = train(init, tensors, x, y, True)
    ref_plain = train(init, tensors, x, y, False)
    used = np.zeros(init.shape, dtype=bool)
    for _, _, offset, dims in tensors:
        used[offset:offset + int(np.prod(dims))] = True

    def distance(a, b):
        return float(np.max(np.abs(a - b)[used] / np.maximum(1.0, np.abs(b[used]))))

    effect = distance(ref_rounded, ref_plain)
    d_half, d_float = distance(half, ref_rounded), distance(full, ref_plain)
    print(f"rounding's effect on the weights (PyTorch float64, rounded vs not): {effect:.3e}")
    print(f"kiln half storage vs PyTorch rounded: {d_half:.3e} ({d_half / effect:.4f} of it)")
    print(f"kiln float32 vs PyTorch plain: {d_float:.3e} ({d_float / effect:.4f} of it)")
    print(f"kiln half storage vs PyTorch plain: {distance(half, ref_plain):.3e}")
    ok = effect > 1e-6 and d_half <= 0.10 * effect and d_float <= 0.10 * effect
    print("OK" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
