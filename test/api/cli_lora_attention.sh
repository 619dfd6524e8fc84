#!/bin/sh
# kiln fit --lora on attention: a PyTorch Linear(4, 8) then
# nn.MultiheadAttention(8, 2) self-attention, exported to ONNX (the block
# imports as one MultiHeadAttention layer), fitted with --lora 2
# --lora-layers / --lora-targets key,attention_output. The saved file
# holds merged kernels and no adapters: the Dense's kernel moved by a
# matrix of rank 2; the query and value weights and biases (frozen whole)
# exactly PyTorch's; the key and output kernels moved by rank-2 changes
# (the key's per head, its (features x heads, key_dim) view), the output's
# bias trained; the file predicts. Then each refusal of --lora-targets, exit 2
# or 1 naming it. SKIP without PyTorch.
# Usage: cli_lora_attention.sh SOURCE_DIR KILN
set -eu
src=$1
kiln=$2
python=${KILN_PYTHON:-/usr/bin/python3}
. "$src/test/common/missing.sh"
"$python" -c "import numpy, onnx, torch" 2> /dev/null ||
    skip_missing "PyTorch, NumPy or ONNX's Python package is not installed"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_lora_attention.sh: $*" >&2; exit 1; }

expect() {   # expect STATUS NEEDLE COMMAND...
    want=$1 needle=$2
    shift 2
    if "$@" > "$work/out.txt" 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" = "$want" ] || { cat "$work/out.txt"; fail "$* exited $rc, not $want"; }
    grep -qF -- "$needle" "$work/out.txt" || { cat "$work/out.txt"; fail "$*: no '$needle'"; }
}

"$python" - "$work" <<'PY'
import sys
import numpy as np
import torch
from torch import nn

d = sys.argv[1]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        with torch.no_grad():
            self.attn.in_proj_bias.normal_(0, 0.3)
            self.attn.out_proj.bias.normal_(0, 0.3)

    def forward(self, x):
        h = self.proj(x)
        return self.attn(h, h, h, need_weights=False)[0]


torch.manual_seed(3)
net = Net().eval()
x = torch.randn(16, 5, 4)
# As test/importer/make_models.py exports: constant folding would rewrite the
# attention block into a form kiln does not recognise as one layer.
torch.onnx.export(net, x, d + "/attn.onnx", opset_version=17, input_names=["input"],
                  output_names=["output"],
                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                  training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
rng = np.random.default_rng(7)
np.save(d + "/x.npy", x.numpy())
np.save(d + "/y.npy", rng.normal(0, 1, (16, 5 * 8)).astype(np.float32))   # 2-D, as fit reads
PY

"$kiln" fit "$work/attn.onnx" "$work/x.npy" "$work/y.npy" --save "$work/lora.kiln" --loss mse \
    --optimizer sgd --learning-rate 0.1 --batch 4 --epochs 2 --no-shuffle --lora 2 \
    --lora-alpha 4 --lora-layers / --lora-targets key,attention_output > "$work/lora.txt" 2>&1 ||
    { rc=$?; cat "$work/lora.txt"; fail "fit --lora on attention exited $rc"; }
grep -q "^LoRA rank 2 on 1 Dense layer(s) named /\.\.\.$" "$work/lora.txt" ||
    { cat "$work/lora.txt"; fail "fit --lora: no report of the Dense"; }
grep -q "^LoRA rank 2 on 1 MultiHeadAttention layer(s) named /\.\.\. (key,attention_output)$" \
    "$work/lora.txt" || { cat "$work/lora.txt"; fail "fit --lora: no report of the attention"; }
"$kiln" predict "$work/lora.kiln" "$work/x.npy" "$work/p.npy" > /dev/null 2>&1 ||
    fail "predict of the LoRA-fitted model exited $?"

"$python" - "$work" <<'PY' || fail "--lora-targets: the saved kernels are not what LoRA leaves"
import json
import struct
import sys
import numpy as np
import onnx
from onnx import numpy_helper

d = sys.argv[1]
with open(d + "/lora.kiln", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
names = sorted(k for k in head if k != "__metadata__")
t = {k: np.frombuffer(data[head[k]["data_offsets"][0]:head[k]["data_offsets"][1]], "<f4")
     .reshape(head[k]["shape"]).astype(np.float64) for k in names}
w = {i.name: numpy_helper.to_array(i).astype(np.float64)
     for i in onnx.load(d + "/attn.onnx").graph.initializer}
E, H, D = 8, 2, 4
ok = not any("lora" in k for k in names)
print("tensors:", names)
in_w = next(k for k in w if k.endswith("in_proj_weight"))
in_b = next(k for k in w if k.endswith("in_proj_bias"))
out_w = next(k for k in w if k.endswith("out_proj.weight"))
out_b = next(k for k in w if k.endswith("out_proj.bias"))
dense = next(k for k in w if w[k].shape in ((4, 8), (8, 4)))   # the Linear's weight


def as_torch(v):
    """An attention kernel as PyTorch's (out, in): kiln's file holds Keras's
    (in, heads, dim) or (heads, dim, out), each PyTorch's transposed."""
    return v.reshape(E, E).T if v.ndim == 3 else v


parts = {p: (w[in_w][i * E:(i + 1) * E], w[in_b][i * E:(i + 1) * E])
         for i, p in enumerate(("query", "key", "value"))}
for p in ("query", "value"):
    same = (np.array_equal(as_torch(t[f"{in_w}/{p}"]), parts[p][0]) and
            np.array_equal(t[f"{in_b}/{p}"].ravel(), parts[p][1]))
    print(f"{p}: weight and bias unchanged bit for bit: {same}")
    ok &= same
# The key's change per head: (in, heads, dim) viewed as (in x heads, dim) is A B.
dk = (as_torch(t[f"{in_w}/key"]) - parts["key"][0]).T.reshape(E * H, D)
sk = np.linalg.svd(dk, compute_uv=False)
so = np.linalg.svd(as_torch(t[out_w]) - w[out_w], compute_uv=False)
# The key's bias trains but never moves: it adds q . b to a whole row of
# scores, which the softmax cancels, so its gradient is 0.
moved_b = float(np.abs(t[out_b].ravel() - w[out_b]).max())
print("key's change per head, singular values", sk, "; the output's", so,
      "; the output's bias moved by", moved_b)
ok &= sk[0] > 1e-4 and sk[2] < 1e-6 * sk[0] + 1e-7
ok &= so[0] > 1e-4 and so[2] < 1e-6 * so[0] + 1e-7 and moved_b > 1e-4
kd = t[dense] if t[dense].shape == w[dense].shape else t[dense].T
sp = np.linalg.svd(kd - w[dense], compute_uv=False)
print("the Dense's change, singular values", sp)
ok &= sp[0] > 1e-4 and sp[2] < 1e-6 * sp[0] + 1e-7
sys.exit(0 if ok else 1)
PY

f="$kiln fit $work/attn.onnx $work/x.npy $work/y.npy --loss mse"
expect 1 "targets 'query,queries' names 'queries', which is no projection of a MultiHeadAttention" \
    $f --save "$work/o.kiln" --lora 2 --lora-layers / --lora-targets query,queries
expect 1 "targets 'key,key' names 'key' twice" $f --save "$work/o.kiln" --lora 2 \
    --lora-layers / --lora-targets key,key
expect 1 "--lora-targets key chooses attention projections, but --lora-layers matches no \
MultiHeadAttention layer" $f --save "$work/o.kiln" --lora 2 --lora-layers /proj --lora-targets key
expect 2 "--lora-targets needs a comma-separated list of query, key, value and \
attention_output, not ''" $f --save "$work/o.kiln" --lora 2 --lora-layers / --lora-targets ""
expect 2 "--lora-targets is given twice" $f --save "$work/o.kiln" --lora 2 --lora-layers / \
    --lora-targets key --lora-targets value
expect 2 "--lora-alpha, --lora-layers and --lora-targets need --lora RANK" $f \
    --save "$work/o.kiln" --lora-targets key
echo "cli_lora_attention.sh: passed"
