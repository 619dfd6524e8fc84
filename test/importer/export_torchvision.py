"""torchvision classifiers exported to ONNX as a user exports one to
fine-tune it (run with Debian's /usr/bin/python3, which has torch 1.13 and
torchvision 0.14):

    export_torchvision.py OUTDIR SIZE NAME...

writes OUTDIR/NAME.onnx for each network of zoo_models.py (torchvision's
classifiers and a reduced ViT): random initial weights (fixed seed), 10
classes, input (batch, 3, SIZE, SIZE) with a dynamic batch,
batch norm kept in its inference form (TrainingMode.PRESERVE, no constant
folding). Exits 77 when torch or torchvision is missing."""
import os
import sys

try:
    import torch
    import zoo_models
except ImportError:
    print("torch or torchvision is not installed for /usr/bin/python3 "
          "(Debian: python3-torch python3-torchvision)")
    sys.exit(77)


def main():
    outdir, size = sys.argv[1], int(sys.argv[2])
    os.makedirs(outdir, exist_ok=True)
    for name in sys.argv[3:]:
        model = zoo_models.build(name).eval()
        x = torch.randn(1, 3, size, size)
        torch.onnx.export(model, x, os.path.join(outdir, name + ".onnx"), opset_version=17,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


if __name__ == "__main__":
    main()
