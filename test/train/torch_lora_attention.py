"""PyTorch's side of lora_attention_parity.sh: test_lora_attention --dump's
model (in (5, 4) -> Dense(6, tanh) -> causal self-attention, 2 heads,
key_dim 3, value_dim 2, LoRA rank 2 alpha 4 on the projections the second
argument names, "query,value" or "key,attention_output") written by hand:
each adapted kernel used as W + (alpha/r) * einsum('dhr,rk->dhk', A, B)
(Keras 3's EinsumDense LoRA; the output's A is (heads, value_dim, rank)),
the projections not adapted frozen whole, trained 5 SGD steps from kiln's
initial weights (B away from zeros) on the same batches, in float64 with
autograd. kiln's tensors must be exactly the targets' adapters, its
trained weights must match to 1e-5 relative to max(1, |w|), and the frozen
tensors must not move at all."""
import sys

import numpy as np
import torch

from parity_dump import read_tensors, unpack

BATCH, T, IN, WIDTH, HEADS, KEY, VALUE, RANK, ALPHA, STEPS, LR = 4, 5, 4, 6, 2, 3, 2, 2, 4.0, 5, 0.1


def forward(w, x):
    scale = ALPHA / RANK

    def kernel(proj):
        base = w[f"attn/{proj}/kernel"]
        a = w.get(f"attn/{proj}/lora_kernel_a")
        if a is None:
            return base
        return base + scale * torch.einsum("dhr,rk->dhk", a, w[f"attn/{proj}/lora_kernel_b"])

    h = torch.tanh(x @ w["in/kernel"] + w["in/bias"])
    q = torch.einsum("btd,dhk->bthk", h, kernel("query")) + w["attn/query/bias"]
    k = torch.einsum("btd,dhk->bthk", h, kernel("key")) + w["attn/key/bias"]
    v = torch.einsum("btd,dhk->bthk", h, kernel("value")) + w["attn/value/bias"]
    scores = torch.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(KEY)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    context = torch.einsum("bhqs,bshv->bqhv", probs, v)
    return (torch.einsum("bqhv,hvo->bqo", context, kernel("attention_output")) +
            w["attn/attention_output/bias"])


def main():
    folder, targets = sys.argv[1], sys.argv[2].split(",")
    tensors = read_tensors(folder)
    adapters = sorted(name for name, *_ in tensors if "lora" in name)
    want = sorted(f"attn/{t}/lora_kernel_{ab}" for t in targets for ab in "ab")
    if adapters != want:
        print(f"FAIL: kiln's adapters are {adapters}, not {want}")
        sys.exit(1)
    # What trains: the Dense, the targets' biases and adapters; nothing else.
    for name, trainable_flag, *_ in tensors:
        proj = name.split("/")[1] if name.startswith("attn/") else None
        trains = proj is None or (proj in targets and not name.endswith("/kernel"))
        if bool(trainable_flag) != trains:
            print(f"FAIL: {name} is {'trainable' if trainable_flag else 'frozen'} in kiln")
            sys.exit(1)
    x = np.fromfile(f"{folder}/x.f32", dtype=np.float32).reshape(STEPS, BATCH, T, IN)
    y = np.fromfile(f"{folder}/y.f32", dtype=np.float32).reshape(STEPS, BATCH, T, WIDTH)
    init = np.fromfile(f"{folder}/init.f32", dtype=np.float32)
    final = np.fromfile(f"{folder}/final.f32", dtype=np.float32)
    w = unpack(init, tensors)
    trainable = [p for p in w.values() if p.requires_grad]
    for step in range(STEPS):
        out = forward(w, torch.tensor(x[step], dtype=torch.float64))
        loss = torch.mean((out - torch.tensor(y[step], dtype=torch.float64)) ** 2)
        for p in trainable:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in trainable:
                p -= LR * p.grad
    worst, failures = 0.0, 0
    for name, trainable_flag, offset, dims in tensors:
        got = final[offset:offset + int(np.prod(dims))].astype(np.float64)
        want = w[name].detach().numpy().ravel()
        diff = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
        worst = max(worst, diff)
        if not trainable_flag and not np.array_equal(final[offset:offset + got.size],
                                                     init[offset:offset + got.size]):
            print(f"FAIL: {name} is frozen but kiln changed it")
            failures += 1
        if diff > 1e-5:
            print(f"FAIL: {name}: kiln and PyTorch differ by {diff:.3g}")
            failures += 1
    moved = min(float(np.max(np.abs(w[name].detach().numpy().ravel() -
                                    init[offset:offset + int(np.prod(dims))])))
                for name, _, offset, dims in tensors if "lora" in name)
    print(f"5 SGD steps, LoRA on attention's {','.join(targets)} vs PyTorch (float64, "
          f"W + (alpha/r) A B by hand): max difference {worst:.2e} over {len(tensors)} tensors; "
          f"each adapter moved by at least {moved:.3g}")
    if moved < 1e-3:
        print("FAIL: an adapter did not train")
        failures += 1
    sys.exit(1 if failures else 0)


main()
