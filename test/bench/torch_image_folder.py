#!/usr/bin/python3
"""The peer of `bench_input folder`: images/s that PyTorch's DataLoader
delivers to training from an image folder, timed the same way.

torchvision.datasets.ImageFolder(DIR, Grayscale(1) then ToTensor) read by a
DataLoader(batch_size=B, num_workers=T, shuffle=True), each batch one step
of the same one-layer model as kiln's (Flatten, Linear to the class count;
CrossEntropyLoss is kiln's softmax + sparse cross-entropy; Adam with Keras's
epsilon), keeping the running loss and accuracy as kiln's fit does. Listing
the folder and building the model are outside the timing, as in kiln; the
DataLoader's start (its worker processes) is inside, as kiln's loader
threads' start is inside fit.

The step itself runs on one intra-op thread (--torch-threads, default 1):
the model is a 7850-parameter product whose compute is negligible beside
decoding, and a second intra-op thread would only take a core from the
DataLoader's workers on a small machine.

Prints one JSON object on stdout. Exits 77 (skip) without PyTorch or
torchvision.

Usage: torch_image_folder.py DIR [--batch B] [--threads T] [--epochs E]
                             [--torch-threads N]
"""
import argparse
import json
import os
import sys
import time

# OpenBLAS's own thread pool fights PyTorch's (set before torch loads it).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

try:
    import torch
    from torch import nn
    import torchvision
    from torchvision import transforms
except ImportError as e:
    print("SKIP: PyTorch or torchvision not available (%s)" % e)
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="image folder, one subfolder per class")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="DataLoader num_workers")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="intra-op threads of the training step")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)

    dataset = torchvision.datasets.ImageFolder(
        args.dir, transform=transforms.Compose([transforms.Grayscale(1),
                                                transforms.ToTensor()]))
    channels, height, width = dataset[0][0].shape
    classes = len(dataset.classes)
    model = nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, classes))
    nn.init.xavier_uniform_(model[1].weight)
    nn.init.zeros_(model[1].bias)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()

    t0 = time.perf_counter()
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                         num_workers=args.threads,
                                         persistent_workers=args.threads > 0)
    for _ in range(args.epochs):
        loss_sum, correct, seen = 0.0, 0, 0
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
    seconds = time.perf_counter() - t0
    del loader
    print(json.dumps({"bench": "folder", "name": "pytorch", "images": len(dataset),
                      "epochs": args.epochs, "threads": args.threads,
                      "torch_threads": args.torch_threads,
                      "images_per_s": round(len(dataset) * args.epochs / seconds, 1),
                      "accuracy_last_epoch": round(correct / seen, 4)}))


if __name__ == "__main__":
    main()
