"""Replays kiln's 20 SGD steps of test_label_smoothing.c in PyTorch, float64:
Linear(in, h) + tanh, Linear(h, c), CrossEntropyLoss(label_smoothing=0.1)
on the logits (class ids, or the one-hot rows as class probabilities),
SGD(lr=0.5), from kiln's initial weights (Keras layout: kernels (in, out)).
Exit 0 when kiln's losses and final weights are within float32 round-off,
1 when not, 77 without PyTorch."""
import sys

try:
    import torch
except ImportError:
    sys.exit(77)

rows = {}
with open(sys.argv[1]) as f:
    for line in f:
        key, *vals = line.split()
        rows[key] = vals
n_in, h, c, b, steps = map(int, rows["shape"])
w0 = torch.tensor([float(v) for v in rows["w0"]], dtype=torch.float64)
x = torch.tensor([float(v) for v in rows["x"]], dtype=torch.float64).reshape(b, n_in)
y = torch.tensor([int(v) for v in rows["y"]])
dense = rows["dense"][0] == "1"
kiln_losses = [float(v) for v in rows["losses"]]
kiln_w = torch.tensor([float(v) for v in rows["w20"]], dtype=torch.float64)


def split(w):
    at, out = 0, []
    for shape in [(n_in, h), (h,), (h, c), (c,)]:
        size = 1
        for d in shape:
            size *= d
        out.append(w[at:at + size].reshape(shape).clone().requires_grad_(True))
        at += size
    return out


params = split(w0)
opt = torch.optim.SGD(params, lr=0.5)
ce = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
target = torch.nn.functional.one_hot(y, c).double() if dense else y
losses = []
for _ in range(steps):
    opt.zero_grad()
    k1, b1, k2, b2 = params
    logits = torch.tanh(x @ k1 + b1) @ k2 + b2
    loss = ce(logits, target)
    losses.append(loss.item())
    loss.backward()
    opt.step()
final = torch.cat([p.detach().reshape(-1) for p in params])
loss_err = max(abs(a - k) / (1 + abs(a)) for a, k in zip(losses, kiln_losses))
w_err = (final - kiln_w).abs().max().item()
print(f"label smoothing 0.1, {'one-hot' if dense else 'class id'} labels, {steps} SGD steps "
      f"against PyTorch float64: loss {kiln_losses[0]:.6f} -> {kiln_losses[-1]:.6f} "
      f"(torch {losses[0]:.6f} -> {losses[-1]:.6f}), largest loss difference {loss_err:.2e}, "
      f"weights {w_err:.2e}")
sys.exit(0 if loss_err < 1e-5 and w_err < 1e-5 else 1)
