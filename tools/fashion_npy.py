#!/usr/bin/env python3
"""Writes Fashion-MNIST (IDX files, plain or gzip) as NumPy .npy files.

OUT/train_images.npy and OUT/test_images.npy: uint8, shape (count, 28, 28, 1);
OUT/train_labels.npy and OUT/test_labels.npy: uint8, shape (count,). What
np.save writes (format 1.0), what kiln_dataset_from_npy reads. Python 3
standard library only (the IDX reading is fashion_png_folder.py's).

Usage: fashion_npy.py OUT [--source DIR] [--limit N]
"""
import argparse
import os

from fashion_png_folder import SPLITS, read_idx


def npy_bytes(shape, body):
    """A version 1.0 .npy file of unsigned bytes: header padded to 64 bytes."""
    dims = "".join("%d, " % d for d in shape) if len(shape) > 1 else "%d," % shape[0]
    header = "{'descr': '|u1', 'fortran_order': False, 'shape': (%s), }" % dims.rstrip(" ")
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the .npy files into")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist",
                        help="folder of the IDX files (default: Debian's)")
    parser.add_argument("--limit", type=int, default=0,
                        help="write at most N samples of each split (0: all)")
    args = parser.parse_args()
    if args.limit < 0:
        parser.error("--limit must be >= 0")
    os.makedirs(args.out, exist_ok=True)
    for split, prefix in SPLITS.items():
        (count, rows, cols), images = read_idx(
            os.path.join(args.source, prefix + "-images-idx3-ubyte"), 0x803, 3, args.limit)
        (n_labels,), labels = read_idx(
            os.path.join(args.source, prefix + "-labels-idx1-ubyte"), 0x801, 1, args.limit)
        if n_labels != count:
            raise ValueError("%s: %d images but %d labels" % (prefix, count, n_labels))
        with open(os.path.join(args.out, split + "_images.npy"), "wb") as f:
            f.write(npy_bytes((count, rows, cols, 1), images))
        with open(os.path.join(args.out, split + "_labels.npy"), "wb") as f:
            f.write(npy_bytes((count,), labels))
        print("%s: %d samples" % (split, count))


if __name__ == "__main__":
    main()
