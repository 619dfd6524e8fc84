"""One network of zoo_models.py (torchvision's) exported to ONNX and trained in PyTorch at
float32 and float64, for test_zoo.c (run with Debian's /usr/bin/python3,
which has torch 1.13 and torchvision 0.14):

    make_zoo.py OUTDIR NAME [OPSET]

Writes, all little-endian and raw:
  NAME.onnx      torch.onnx.export of the network in eval mode, opset 17 (or OPSET),
                 TrainingMode.PRESERVE, no constant folding (issue 28's call),
                 vit_small's batch symbolic (DYNAMIC_BATCH)
  NAME.in        the inference input, float32 NCHW
  NAME.batches   STEPS training batches, float32 NCHW, one after another
  NAME.targets   their targets, float32 (N, 10) each
  NAME.loss      per step PyTorch's float32 losses, then its float64 ones, then
                 those of its second float32 run (doubles)
  NAME.final32   every parameter and moving statistic after the last step,
                 float32 run, in NAME.tensors order (floats)
  NAME.final32b  the same of the second float32 run (floats)
  NAME.final64   the same of the float64 run (doubles)
  NAME.tensors   one line per tensor: ONNX NAME, rank, dims (ONNX's layout)
  NAME.txt       "N C H W STEPS LEARNING_RATE MOMENTUM SECONDS"
Exits 77 when torch or torchvision is missing, 1 when the export does not
look as test_zoo.c expects (an initializer not named after its parameter,
a Dropout left in the graph, a batch norm momentum other than PyTorch's).

Training: SGD at 0.001 with momentum 0.9 (PyTorch's b = m b + g,
w -= lr b, equal to Keras's v = m v - lr g, w += v at a constant rate), MSE
against random targets, train mode (batch norm on batch statistics, running
statistics updated with the module's momentum, 0.1 but mnasnet's 0.0003,
and the unbiased variance). PyTorch float32 trains twice: as set up
(two threads where the machine has them), and on one thread with each
batch's samples reversed, so its sums run in another order; test_zoo.c
takes the farther of the two from float64 as float32's distance
(efficientnet_b0's fourth loss: 1.45e-4 of itself in the first, 6.85e-4 in
the second, on a 2-core AMD EPYC, 2026-11-28). Dropout is made
inert in both: its p set to 0 here, and the eval-mode export leaves no
Dropout node in the graph (checked), so kiln has none.
"""
import copy
import os
import sys
import time

try:
    import numpy as np
    import onnx
    import torch
    import torchvision
    import zoo_models
    from torch import nn
except ImportError as e:
    print("%s is not installed for /usr/bin/python3 (Debian: python3-torch, "
          "python3-torchvision, python3-onnx)" % e.name)
    sys.exit(77)

STEPS = 5
# 0.01 made resnet18's 5 steps chaotic (PyTorch float32 1e-4 from float64
# at the fifth loss, conv1.weight 15 %); at 0.001 they stay near float64.
LEARNING_RATE = 0.001
MOMENTUM = 0.9
CLASSES = 10
# adaptive pooling in alexnet and vgg16 wants 224x224 to pool without
# uneven windows; the others take 64x64.
SHAPES = {"alexnet": (4, 3, 224, 224), "vgg16": (4, 3, 224, 224), "vit_small": (8, 3, 32, 32)}
DEFAULT_SHAPE = (8, 3, 64, 64)
# torchvision's ViT reshapes its patches with the batch it reads from
# x.shape: exported with a fixed batch that is the constant 8, which kiln
# cannot tell from a size; with a symbolic one it is Shape(input)[0],
# kiln's batch. The others' graphs name no batch, so they stay as they were.
DYNAMIC_BATCH = {"vit_small"}


def randomise_constants(model):
    """Batch norm's moving statistics, and every parameter whose values are
    all equal (batch and layer norm's scales and shifts, the biases that
    torchvision starts at 0, ConvNeXt's layer scales, ViT's class token),
    drawn at random: equal initializers are written once by the exporter,
    behind Identity nodes under other names; random ones keep every
    initializer under its parameter's name, and a swap shows. A value v is
    redrawn in [v/2, 3v/2], a zero in [-0.1, 0.1]."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        for p in model.parameters():
            first = p.reshape(-1)[0].item()
            if p.numel() > 1 and bool((p == first).all()):
                if first == 0:
                    p.uniform_(-0.1, 0.1)
                else:
                    p.copy_(first * (0.5 + torch.rand_like(p)))


def silence_randomness(model):
    """Dropout and stochastic depth (efficientnet's, convnext's) made
    inert, so that training is the same function in PyTorch and in kiln:
    the eval-mode export has neither (checked for Dropout)."""
    for m in model.modules():
        if isinstance(m, nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0


def write(path, array, dtype="<f4"):
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(array, dtype=dtype).tobytes())


def check_export(path, names, model):
    """The graph as test_zoo.c reads it: every parameter an initializer of
    its own name, no Dropout, each batch norm's momentum 1 - PyTorch's
    (0.9 for PyTorch's default 0.1; mnasnet's is 0.0003)."""
    momenta = {1 - m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm2d)}
    graph = onnx.load(path).graph
    initializers = {i.name for i in graph.initializer}
    missing = [n for n in names if n not in initializers]
    if missing:
        sys.exit("%s: no initializer named %s" % (path, ", ".join(missing[:5])))
    for node in graph.node:
        if node.op_type == "Dropout":
            sys.exit("%s: a Dropout node (%s) is in the graph" % (path, node.name))
        if node.op_type == "BatchNormalization":
            momentum = [a.f for a in node.attribute if a.name == "momentum"]
            if not momentum or min(abs(momentum[0] - m) for m in momenta) > 1e-6:
                sys.exit("%s: %s has momentum %s, not 1 - PyTorch's (%s)"
                         % (path, node.name, momentum, sorted(momenta)))


def train(model, batches, targets, dtype):
    """STEPS steps of SGD with momentum in train mode; the losses and the
    state (parameters and moving statistics) after them."""
    model = copy.deepcopy(model).to(dtype).train()
    silence_randomness(model)
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    losses = []
    for x, y in zip(batches, targets):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x.to(dtype)), y.to(dtype))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def main():
    outdir, name = sys.argv[1], sys.argv[2]
    opset = int(sys.argv[3]) if len(sys.argv) > 3 else 17
    start = time.time()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    base = os.path.join(outdir, name)
    shape = SHAPES.get(name, DEFAULT_SHAPE)
    model = zoo_models.build(name)
    randomise_constants(model)
    model.eval()
    x = torch.randn(*shape)
    torch.onnx.export(model, x, base + ".onnx", opset_version=opset,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes=({"input": {0: "batch"}, "output": {0: "batch"}}
                                    if name in DYNAMIC_BATCH else None))
    state = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    check_export(base + ".onnx", state, model)
    write(base + ".in", x.numpy())
    batches = [torch.randn(*shape) for _ in range(STEPS)]
    targets = [torch.randn(shape[0], CLASSES) for _ in range(STEPS)]
    write(base + ".batches", np.stack([b.numpy() for b in batches]))
    write(base + ".targets", np.stack([t.numpy() for t in targets]))
    loss32, final32 = train(model, batches, targets, torch.float32)
    loss64, final64 = train(model, batches, targets, torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    loss32b, final32b = train(model, [b.flip(0) for b in batches],
                              [t.flip(0) for t in targets], torch.float32)
    torch.set_num_threads(threads)
    write(base + ".loss", np.array([loss32, loss64, loss32b]), "<f8")
    with open(base + ".tensors", "w") as f:
        for k, v in state.items():
            f.write("%s %d %s\n" % (k, v.dim(), " ".join(str(d) for d in v.shape)))
    write(base + ".final32", np.concatenate([final32[k].numpy().ravel() for k in state]))
    write(base + ".final32b", np.concatenate([final32b[k].numpy().ravel() for k in state]))
    write(base + ".final64", np.concatenate([final64[k].numpy().ravel() for k in state]), "<f8")
    with open(base + ".txt", "w") as f:
        f.write("%s %d %g %g %.1f\n" % (" ".join(str(d) for d in shape), STEPS, LEARNING_RATE,
                                        MOMENTUM, time.time() - start))


if __name__ == "__main__":
    main()
