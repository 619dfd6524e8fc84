#!/usr/bin/python3
"""The peer of examples/char_lm.c: the same GPT-style character model in
PyTorch, in two modes.

Parity (--dump DIR, a folder written by `char_lm --dump DIR`): loads kiln's
initial weights (DIR/initial.safetensors), trains on the very batches kiln
trained on (DIR/batches.bin) for as many steps, and compares every step's loss
with kiln's (DIR/losses.txt) and every final tensor with kiln's
(DIR/final.safetensors). It trains twice, in float32 and in float64, so that
kiln's distance from the float64 run can be read beside float32 PyTorch's own:
the two agree to round-off when they are of the same size.

Speed (--bench): training tokens/s on random ids, torch.set_num_threads(2),
after untimed warm-up steps; prints
  pytorch: context T, batch B: S s per step, R tokens/s

The model, layer for layer as kiln builds it: Embedding + learned positions;
N pre-norm blocks x + MHA(LN(x)) (causal), x + Dense(W)(GELU(Dense(4W)(LN(x))));
a final LayerNorm; Dense(V) with the softmax folded into the loss. LayerNorm
has Keras's epsilon 1e-3. Attention is written out in Keras's layout: query,
key and value kernels (W, heads, key_dim) with biases (heads, key_dim), the
output kernel (heads, key_dim, W), scores scaled by 1/sqrt(key_dim). Adam is
Keras's (and kiln's), written out: epsilon 1e-7 added to sqrt(v) with the
bias corrections folded into the step size, which torch.optim.Adam does
differently (it adds epsilon to the bias-corrected sqrt(v)). No dropout.
Exits 77 (skip) without PyTorch."""
import argparse
import json
import math
import os
import struct
import sys
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"   # as torch_seed_cnn.py: no second thread pool
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("SKIP: PyTorch not available (%s)" % e)
    sys.exit(77)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy()
    return out


def tensor_names(cfg):
    names = ["token_embedding/embeddings", "position_embedding/embeddings"]
    for b in range(cfg["blocks"]):
        p = "block_%d_" % b
        names += [p + "ln_1/gamma", p + "ln_1/beta"]
        for part in ("query", "key", "value", "attention_output"):
            names += [p + "attention/%s/kernel" % part, p + "attention/%s/bias" % part]
        names += [p + "ln_2/gamma", p + "ln_2/beta", p + "mlp_up/kernel", p + "mlp_up/bias",
                  p + "mlp_down/kernel", p + "mlp_down/bias"]
    return names + ["final_ln/gamma", "final_ln/beta", "logits/kernel", "logits/bias"]


def init_weights(cfg, dtype, seed):
    """Random weights of kiln's shapes (speed mode: the values do not matter)."""
    g = torch.Generator().manual_seed(seed)
    W, H, V, T = cfg["width"], cfg["heads"], cfg["vocab"], cfg["context"]
    K = W // H
    shapes = {"token_embedding/embeddings": (V, W), "position_embedding/embeddings": (T, W),
              "final_ln/gamma": (W,), "final_ln/beta": (W,), "logits/kernel": (W, V),
              "logits/bias": (V,)}
    for b in range(cfg["blocks"]):
        p = "block_%d_" % b
        for ln in ("ln_1", "ln_2"):
            shapes[p + ln + "/gamma"] = shapes[p + ln + "/beta"] = (W,)
        for part in ("query", "key", "value"):
            shapes[p + "attention/%s/kernel" % part] = (W, H, K)
            shapes[p + "attention/%s/bias" % part] = (H, K)
        shapes[p + "attention/attention_output/kernel"] = (H, K, W)
        shapes[p + "attention/attention_output/bias"] = (W,)
        shapes[p + "mlp_up/kernel"], shapes[p + "mlp_up/bias"] = (W, 4 * W), (4 * W,)
        shapes[p + "mlp_down/kernel"], shapes[p + "mlp_down/bias"] = (4 * W, W), (W,)
    out = {}
    for n in tensor_names(cfg):
        t = torch.empty(shapes[n], dtype=dtype)
        if n.endswith("gamma"):
            t.fill_(1.0)
        elif n.endswith("bias") or n.endswith("beta"):
            t.zero_()
        else:
            t.uniform_(-0.05, 0.05, generator=g)
        out[n] = t.requires_grad_()
    return out


def attention(x, w, p, heads):
    """Keras MultiHeadAttention, self-attention with the causal mask."""
    K = w[p + "query/kernel"].shape[2]
    q = torch.einsum("btd,dhk->bthk", x, w[p + "query/kernel"]) + w[p + "query/bias"]
    k = torch.einsum("btd,dhk->bthk", x, w[p + "key/kernel"]) + w[p + "key/bias"]
    v = torch.einsum("btd,dhk->bthk", x, w[p + "value/kernel"]) + w[p + "value/bias"]
    scores = torch.einsum("bqhk,bshk->bhqs", q, k) * (1.0 / math.sqrt(K))
    T = x.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.einsum("bhqs,bshk->bqhk", probs, v)
    return (torch.einsum("bqhk,hkd->bqd", ctx, w[p + "attention_output/kernel"]) +
            w[p + "attention_output/bias"])


def forward(w, ids, cfg):
    """Logits (B, T, V) of int64 ids (B, T)."""
    T, W = ids.shape[1], cfg["width"]
    ln = lambda x, n: F.layer_norm(x, (W,), w[n + "/gamma"], w[n + "/beta"], eps=1e-3)
    gelu = "tanh" if cfg.get("gelu") == "tanh" else "none"
    x = w["token_embedding/embeddings"][ids] + w["position_embedding/embeddings"][:T]
    for b in range(cfg["blocks"]):
        p = "block_%d_" % b
        x = x + attention(ln(x, p + "ln_1"), w, p + "attention/", cfg["heads"])
        h = ln(x, p + "ln_2") @ w[p + "mlp_up/kernel"] + w[p + "mlp_up/bias"]
        h = F.gelu(h, approximate=gelu)
        x = x + (h @ w[p + "mlp_down/kernel"] + w[p + "mlp_down/bias"])
    return ln(x, "final_ln") @ w["logits/kernel"] + w["logits/bias"]


class KerasAdam:
    """kiln's (Keras's) Adam: alpha = lr sqrt(1 - b2^t) / (1 - b1^t),
    p -= alpha m / (sqrt(v) + eps)."""

    def __init__(self, params, lr, beta_1=0.9, beta_2=0.999, eps=1e-7):
        self.params, self.lr, self.b1, self.b2, self.eps = params, lr, beta_1, beta_2, eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        alpha = self.lr * math.sqrt(1.0 - self.b2 ** self.t) / (1.0 - self.b1 ** self.t)
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            m.add_((g - m) * (1.0 - self.b1))
            v.add_((g * g - v) * (1.0 - self.b2))
            p.sub_(alpha * m / (v.sqrt() + self.eps))
            p.grad = None


def train(w, cfg, batches, dtype):
    """Trains on batches (steps, B, T + 1); returns each step's loss."""
    params = [w[n] for n in tensor_names(cfg)]
    opt = KerasAdam(params, cfg["lr"])
    losses = []
    for windows in batches:
        x, y = windows[:, :-1], windows[:, 1:]
        logits = forward(w, x, cfg)
        loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def parity(a):
    cfg = json.load(open(os.path.join(a.dump, "config.json")))
    initial = read_safetensors(os.path.join(a.dump, "initial.safetensors"))
    final = read_safetensors(os.path.join(a.dump, "final.safetensors"))
    kiln_losses = [float(l) for l in open(os.path.join(a.dump, "losses.txt"))]
    T, B, steps = cfg["context"], cfg["batch"], cfg["steps"]
    raw = np.fromfile(os.path.join(a.dump, "batches.bin"), dtype="<i4")
    batches = torch.from_numpy(raw.reshape(steps, B, T + 1).astype(np.int64))
    missing = set(tensor_names(cfg)) ^ set(initial)
    if missing:
        sys.exit("torch_char_lm: tensor names differ from kiln's: %s" % sorted(missing))
    torch.set_num_threads(a.threads)
    runs = {}
    for dtype in (torch.float32, torch.float64):
        w = {n: torch.tensor(initial[n], dtype=dtype).requires_grad_() for n in initial}
        runs[dtype] = (w, train(w, cfg, batches, dtype))
    (w32, l32), (w64, l64) = runs[torch.float32], runs[torch.float64]
    print("config: %s" % json.dumps(cfg))
    print("step  kiln loss    pytorch f32  pytorch f64  |kiln-f64|  |f32-f64|  |kiln-f32|")
    worst = [0.0, 0.0, 0.0]
    for s, (k, p, d) in enumerate(zip(kiln_losses, l32, l64)):
        diffs = (abs(k - d), abs(p - d), abs(k - p))
        worst = [max(x, y) for x, y in zip(worst, diffs)]
        if s < 5 or s % a.every == 0 or s == steps - 1:
            print("%4d  %.7f  %.7f  %.7f  %.2e    %.2e   %.2e" % ((s, k, p, d) + diffs))
    print("max loss difference over %d steps: kiln-f64 %.2e, pytorch f32-f64 %.2e, "
          "kiln-pytorch f32 %.2e" % (len(l64), worst[0], worst[1], worst[2]))
    print("final weights, max |difference| (and relative to the tensor's max |value|):")
    print("%-44s %-22s %-22s %s" % ("tensor", "kiln - f64", "pytorch f32 - f64", "kiln - f32"))
    worst_w = [0.0, 0.0, 0.0]
    for n in tensor_names(cfg):
        k = final[n].astype(np.float64)
        p = w32[n].detach().numpy().astype(np.float64)
        d = w64[n].detach().numpy()
        scale = max(np.abs(d).max(), 1e-30)
        cols = [np.abs(k - d).max(), np.abs(p - d).max(), np.abs(k - p).max()]
        if not n.endswith("key/bias"):   # zero in exact arithmetic: nothing to be relative to
            worst_w = [max(x, c / scale) for x, c in zip(worst_w, cols)]
        print("%-44s %-22s %-22s %s" % ((n,) + tuple("%.2e (%.1e)" % (c, c / scale)
                                                    for c in cols)))
    print("largest relative weight difference: kiln-f64 %.2e, pytorch f32-f64 %.2e, "
          "kiln-pytorch f32 %.2e" % tuple(worst_w))
    print("(the key biases are left out of that line: the softmax ignores a constant per row,\n"
          " so their gradient is zero but for round-off, which Adam turns into steps; their\n"
          " float64 values stay near 0 and their float32 ones wander by about 1e-6)")
    if a.check is not None:
        # kiln may stray from the float64 run by float32 round-off: as far as
        # PyTorch's float32 run does, times the factor, with a floor for runs
        # where both happen to land close.
        bound = max(a.check * worst[1], 1e-6)
        verdict = "within" if worst[0] <= bound else "NOT within"
        print("check: kiln's loss %s %.2e of the float64 run (%.1f x PyTorch float32's %.2e)"
              % (verdict, bound, a.check, worst[1]))
        if worst[0] > bound:
            sys.exit(1)


def bench(a):
    torch.set_num_threads(a.threads)
    cfg = {"blocks": a.blocks, "width": a.width, "heads": a.heads, "context": a.context,
           "vocab": 98, "lr": 1e-3, "gelu": a.gelu}
    w = init_weights(cfg, torch.float32, 1)
    g = torch.Generator().manual_seed(2)
    batches = torch.randint(0, cfg["vocab"], (a.warmup + a.steps, a.batch, a.context + 1),
                            generator=g)
    n = sum(t.numel() for t in w.values())
    print("pytorch params: %d" % n)
    train(w, cfg, batches[:a.warmup], torch.float32)
    t0 = time.perf_counter()
    train(w, cfg, batches[a.warmup:], torch.float32)
    dt = time.perf_counter() - t0
    print("pytorch: context %d, batch %d: %.4f s per step, %.1f tokens/s" % (
        a.context, a.batch, dt / a.steps, a.steps * a.batch * a.context / dt))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dump", help="folder written by char_lm --dump: the parity check")
    p.add_argument("--every", type=int, default=10, help="parity: print every Nth step")
    p.add_argument("--check", type=float, metavar="FACTOR",
                   help="parity: exit 1 unless kiln's largest loss difference from the float64 "
                        "run is within FACTOR x PyTorch float32's")
    p.add_argument("--bench", action="store_true", help="training speed on random ids")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--gelu", choices=("exact", "tanh"), default="exact")
    p.add_argument("--steps", type=int, default=10, help="bench: timed steps")
    p.add_argument("--warmup", type=int, default=2, help="bench: untimed steps first")
    a = p.parse_args()
    if a.dump:
        parity(a)
    elif a.bench:
        bench(a)
    else:
        p.error("give --dump DIR or --bench")


if __name__ == "__main__":
    main()
