"""PyTorch's side of clipping_parity.sh: each case of test_clipping --dump
trained again from kiln's initial weights on the same 20 batches (in order,
16 samples each), with Keras's SGD and Adam written out (kiln's update
rules) and PyTorch's clipping: clip_grad_norm_ (global_clipnorm),
clip_grad_value_ (clipvalue) and Keras's clip_by_norm per tensor by hand
(clipnorm), over the trainable parameters only. Run in float32 and float64;
kiln's final weights must be as close to the float64 run as PyTorch's
float32 run is (times 4, and at least 1e-5 relative to max(1, |w|)).
Prints on how many steps clipping acted."""
import sys

import numpy as np
import torch

STEPS, BATCH, IN, HIDDEN, OUT = 20, 16, 6, 8, 3
SHAPES = [(IN, HIDDEN), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (HIDDEN, OUT), (OUT,)]


def split(flat):
    out, at = [], 0
    for shape in SHAPES:
        n = int(np.prod(shape))
        out.append(flat[at:at + n].reshape(shape))
        at += n
    return out


def train(case, init, x, y, dtype):
    (name, kind, lr, momentum, beta_1, beta_2, epsilon, clipnorm, clipvalue, global_clipnorm,
     frozen) = case
    params = [torch.tensor(w, dtype=dtype, requires_grad=True) for w in split(init)]
    trainable = [p for i, p in enumerate(params) if not (frozen == "d0" and i < 2)]
    slots = [[torch.zeros_like(p) for p in trainable] for _ in range(2)]
    clipped = 0
    for step in range(STEPS):
        xb = torch.tensor(x[step * BATCH:(step + 1) * BATCH], dtype=dtype)
        yb = torch.tensor(y[step * BATCH:(step + 1) * BATCH], dtype=dtype)
        h = torch.tanh(xb @ params[0] + params[1])
        h = torch.tanh(h @ params[2] + params[3])
        loss = torch.mean((h @ params[4] + params[5] - yb) ** 2)
        for p in trainable:
            p.grad = None
        loss.backward()
        grads = [p.grad for p in trainable]
        if global_clipnorm > 0:
            norm = torch.nn.utils.clip_grad_norm_(trainable, global_clipnorm)
            clipped += bool(norm > global_clipnorm)
        elif clipvalue > 0:
            clipped += any(bool(g.abs().max() > clipvalue) for g in grads)
            torch.nn.utils.clip_grad_value_(trainable, clipvalue)
        elif clipnorm > 0:
            acted = False
            for g in grads:   # Keras's clip_by_norm: g * c / max(||g||, c)
                norm = g.norm()
                acted |= bool(norm > clipnorm)
                g.mul_(clipnorm / torch.maximum(norm, torch.tensor(clipnorm, dtype=dtype)))
            clipped += acted
        t = step + 1
        with torch.no_grad():
            for i, (p, g) in enumerate(zip(trainable, grads)):
                if kind == "adam":   # Keras: epsilon outside the bias correction
                    m, v = slots[0][i], slots[1][i]
                    m += (g - m) * (1 - beta_1)
                    v += (g * g - v) * (1 - beta_2)
                    alpha = lr * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
                    p -= alpha * m / (torch.sqrt(v) + epsilon)
                elif momentum > 0:
                    v = slots[0][i]
                    v.mul_(momentum).sub_(lr * g)
                    p += v
                else:
                    p -= lr * g
    return np.concatenate([p.detach().double().numpy().ravel() for p in params]), clipped


def main():
    folder = sys.argv[1]
    x = np.fromfile(f"{folder}/x.f32", dtype=np.float32).reshape(-1, IN)
    y = np.fromfile(f"{folder}/y.f32", dtype=np.float32).reshape(-1, OUT)
    failures = 0
    for line in open(f"{folder}/cases.txt"):
        f = line.split()
        case = [f[0], f[1]] + [float(v) for v in f[2:10]] + [f[10]]
        init = np.fromfile(f"{folder}/{f[0]}.init.f32", dtype=np.float32)
        kiln = np.fromfile(f"{folder}/{f[0]}.final.f32", dtype=np.float32).astype(np.float64)
        ref, clipped = train(case, init, x, y, torch.float64)
        t32, _ = train(case, init, x, y, torch.float32)
        scale = np.maximum(1.0, np.abs(ref))
        torch_err = float(np.max(np.abs(t32 - ref) / scale))
        kiln_err = float(np.max(np.abs(kiln - ref) / scale))
        moved = float(np.max(np.abs(ref - init) / scale))
        tol = max(4 * torch_err, 1e-5)
        ok = kiln_err <= tol
        failures += not ok
        print(f"{f[0]:28s} clipped on {clipped:2d} of {STEPS} steps; vs float64: kiln "
              f"{kiln_err:.2e}, PyTorch float32 {torch_err:.2e} (tolerance {tol:.1e}; weights "
              f"moved {moved:.2e}) {'ok' if ok else 'FAIL'}")
        if clipped < STEPS // 2:
            print(f"{f[0]}: clipping acted on only {clipped} steps")
            failures += 1
        if f[10] == "d0" and not np.array_equal(kiln[:IN * HIDDEN + HIDDEN],
                                                init[:IN * HIDDEN + HIDDEN]):
            print(f"{f[0]}: the frozen layer's weights moved")
            failures += 1
    print(f"{'FAIL' if failures else 'PASS'}: {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
