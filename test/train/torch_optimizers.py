"""The optimizers of test_optimizers.c in PyTorch, float64 and float32.

Usage: torch_optimizers.py DIR KIND LR WEIGHT_DECAY EXCLUDE MOMENTUM NESTEROV
                           RHO CENTERED EPSILON INIT BETA_1 BETA_2 STEPS BATCH FORM

DIR holds what the C test wrote: x.bin (float32, N x 5 x 5 x 2, channels
last), y.bin (int32 class ids), params.txt ("NAME RANK DIMS..." per tensor,
in kiln's layouts) and init.K.bin (each tensor's float32 initial values).
The model is the test's: Conv2D(3, 3x3, tanh) -> Flatten -> Dense(8, tanh)
-> Dense(3) with softmax cross-entropy, its parameters kept in kiln's
layouts (the updates are element-wise, so the layout does not matter to
them) and permuted for PyTorch's ops. STEPS updates on consecutive batches
of BATCH samples (wrapping around). FORM "torch" uses torch.optim (AdamW,
RMSprop, Adagrad, with decoupled decay by hand before RMSprop's and
Adagrad's steps); "keras" writes Keras's update rules by hand (SGD with its
decoupled weight decay, RMSprop and Adagrad with epsilon inside the root).
Writes torch.K.bin (float64 result) and torch32.K.bin (float32 result).
Exits 77 without PyTorch.
"""
import sys

try:
    import torch
except ImportError:
    sys.exit(77)
import numpy as np


def read(path, dtype):
    return np.fromfile(path, dtype=dtype)


def forward(params, x):
    conv_w, conv_b, d1_w, d1_b, d2_w, d2_b = params
    h = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), conv_w.permute(3, 2, 0, 1), conv_b)
    h = torch.tanh(h).permute(0, 2, 3, 1).reshape(x.shape[0], -1)
    h = torch.tanh(h @ d1_w + d1_b)
    return h @ d2_w + d2_b


def keras_step(cfg, params, state, step):
    """Keras's rules by hand: decoupled decay first, then the step."""
    with torch.no_grad():
        for i, p in enumerate(params):
            g = p.grad
            if cfg["decays"][i]:
                p -= p * cfg["wd"] * cfg["lr"]
            s = state.setdefault(i, {})
            lr, kind = cfg["lr"], cfg["kind"]
            if kind == "sgd":
                if cfg["momentum"] == 0:
                    p -= lr * g
                else:
                    v = s.get("v", torch.zeros_like(p))
                    v = cfg["momentum"] * v - lr * g
                    s["v"] = v
                    p += cfg["momentum"] * v - lr * g if cfg["nesterov"] else v
            elif kind == "rmsprop":
                rho = cfg["rho"]
                v = rho * s.get("v", torch.zeros_like(p)) + (1 - rho) * g * g
                s["v"] = v
                den = v
                if cfg["centered"]:
                    a = rho * s.get("a", torch.zeros_like(p)) + (1 - rho) * g
                    s["a"] = a
                    den = v - a * a
                inc = lr * g / torch.sqrt(den + cfg["eps"])
                if cfg["momentum"] > 0:
                    m = cfg["momentum"] * s.get("m", torch.zeros_like(p)) + inc
                    s["m"] = m
                    p -= m
                else:
                    p -= inc
            elif kind == "adagrad":
                acc = s.get("acc", torch.full_like(p, cfg["init"])) + g * g
                s["acc"] = acc
                p -= lr * g / torch.sqrt(acc + cfg["eps"])
            else:
                raise SystemExit("no Keras form for " + kind)


def torch_optimizer(cfg, params):
    groups = [{"params": [p for i, p in enumerate(params) if cfg["decays"][i]],
               "weight_decay": cfg["wd"]},
              {"params": [p for i, p in enumerate(params) if not cfg["decays"][i]],
               "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    kind, lr = cfg["kind"], cfg["lr"]
    if kind in ("adam", "adamw"):
        # Keras's decoupled decay on Adam is AdamW's.
        return torch.optim.AdamW(groups, lr=lr, betas=(cfg["beta_1"], cfg["beta_2"]),
                                 eps=cfg["eps"])
    plain = [{"params": g["params"]} for g in groups]
    if kind == "rmsprop":
        return torch.optim.RMSprop(plain, lr=lr, alpha=cfg["rho"], eps=cfg["eps"],
                                   momentum=cfg["momentum"], centered=bool(cfg["centered"]))
    if kind == "adagrad":
        return torch.optim.Adagrad(plain, lr=lr, initial_accumulator_value=cfg["init"],
                                   eps=cfg["eps"])
    raise SystemExit("no torch.optim form for " + kind)


def train(cfg, init, x, y, dtype):
    params = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in init]
    x = torch.tensor(x, dtype=dtype)
    y = torch.tensor(y, dtype=torch.long)
    opt = torch_optimizer(cfg, params) if cfg["form"] == "torch" else None
    state = {}
    n = x.shape[0]
    for step in range(1, cfg["steps"] + 1):
        at = (step - 1) * cfg["batch"] % n
        xb, yb = x[at:at + cfg["batch"]], y[at:at + cfg["batch"]]
        for p in params:
            p.grad = None
        loss = torch.nn.functional.cross_entropy(forward(params, xb), yb)
        loss.backward()
        if opt is None:
            keras_step(cfg, params, state, step)
            continue
        if cfg["kind"] in ("rmsprop", "adagrad"):
            # Keras's decay, decoupled, before the step (torch.optim's own
            # weight_decay there is L2 on the gradient).
            with torch.no_grad():
                for i, p in enumerate(params):
                    if cfg["decays"][i]:
                        p -= p * cfg["wd"] * cfg["lr"]
        opt.step()
    return [p.detach().numpy() for p in params]


def main():
    d = sys.argv[1]
    a = sys.argv[2:]
    cfg = {"kind": a[0], "lr": float(a[1]), "wd": float(a[2]), "exclude": int(a[3]),
           "momentum": float(a[4]), "nesterov": int(a[5]), "rho": float(a[6]),
           "centered": int(a[7]), "eps": float(a[8]), "init": float(a[9]),
           "beta_1": float(a[10]), "beta_2": float(a[11]), "steps": int(a[12]),
           "batch": int(a[13]), "form": a[14]}
    shapes = []
    for line in open(d + "/params.txt"):
        f = line.split()
        shapes.append([int(v) for v in f[2:2 + int(f[1])]])
    init = [read("%s/init.%d.bin" % (d, k), np.float32).reshape(s)
            for k, s in enumerate(shapes)]
    cfg["decays"] = [cfg["wd"] > 0 and (not cfg["exclude"] or len(s) > 1) for s in shapes]
    x = read(d + "/x.bin", np.float32).reshape(-1, 5, 5, 2)
    y = read(d + "/y.bin", np.int32)
    for dtype, name in ((torch.float64, "torch"), (torch.float32, "torch32")):
        for k, p in enumerate(train(cfg, init, x, y, dtype)):
            p.astype(np.float64).tofile("%s/%s.%d.bin" % (d, name, k))


main()
