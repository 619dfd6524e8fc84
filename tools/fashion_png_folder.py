#!/usr/bin/env python3
"""Writes Fashion-MNIST (IDX files, plain or gzip) as an image folder.

OUT/train/<class>/<n>.png and OUT/test/<class>/<n>.png, 8-bit grayscale
PNG files, one folder per class named so that sorted order is label order
("0_tshirt_top" ... "9_ankle_boot"), <n> the sample's index in its IDX
file, zero-padded so that sorted order is file order. This is the layout
keras.utils.image_dataset_from_directory and kiln_dataset_from_image_folder
read. Python 3 standard library only.

Usage: fashion_png_folder.py OUT [--source DIR] [--limit N]
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

CLASSES = ["0_tshirt_top", "1_trouser", "2_pullover", "3_dress", "4_coat",
           "5_sandal", "6_shirt", "7_sneaker", "8_bag", "9_ankle_boot"]
SPLITS = {"train": "train", "test": "t10k"}


def open_idx(path):
    """The file at path, or path + '.gz', gzip-decompressed when it is."""
    for name in (path, path + ".gz"):
        if os.path.exists(name):
            with open(name, "rb") as f:
                gz = f.read(2) == b"\x1f\x8b"
            return gzip.open(name, "rb") if gz else open(name, "rb")
    raise FileNotFoundError("no %s or %s.gz" % (path, path))


def read_idx(path, magic, n_dims, limit):
    """(dims, body) of an IDX file of unsigned bytes, at most `limit` items."""
    with open_idx(path) as f:
        head = f.read(4 + 4 * n_dims)
        if len(head) < 4 + 4 * n_dims:
            raise ValueError("%s: truncated IDX header" % path)
        (got,) = struct.unpack(">I", head[:4])
        if got != magic:
            raise ValueError("%s: magic 0x%08x, expected 0x%08x" % (path, got, magic))
        dims = list(struct.unpack(">%dI" % n_dims, head[4:]))
        if limit:
            dims[0] = min(dims[0], limit)
        size = 1
        for d in dims:
            size *= d
        body = f.read(size)
        if len(body) < size:
            raise ValueError("%s: truncated, %d of %d bytes" % (path, len(body), size))
        return dims, body


def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))


def gray_png(rows, cols, pixels):
    """An 8-bit grayscale PNG (no filter, one IDAT) of rows x cols bytes."""
    raw = b"".join(b"\x00" + pixels[r * cols:(r + 1) * cols] for r in range(rows))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_split(source, prefix, out, limit):
    (count, rows, cols), images = read_idx(
        os.path.join(source, prefix + "-images-idx3-ubyte"), 0x803, 3, limit)
    (n_labels,), labels = read_idx(
        os.path.join(source, prefix + "-labels-idx1-ubyte"), 0x801, 1, limit)
    if n_labels != count:
        raise ValueError("%s: %d images but %d labels" % (prefix, count, n_labels))
    for name in CLASSES:
        os.makedirs(os.path.join(out, name), exist_ok=True)
    width = len(str(count - 1))
    size = rows * cols
    for i in range(count):
        if labels[i] >= len(CLASSES):
            raise ValueError("%s: sample %d has label %d" % (prefix, i, labels[i]))
        path = os.path.join(out, CLASSES[labels[i]], "%0*d.png" % (width, i))
        with open(path, "wb") as f:
            f.write(gray_png(rows, cols, images[i * size:(i + 1) * size]))
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write train/ and test/ into")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist",
                        help="folder of the IDX files (default: Debian's)")
    parser.add_argument("--limit", type=int, default=0,
                        help="write at most N samples of each split (0: all)")
    args = parser.parse_args()
    if args.limit < 0:
        parser.error("--limit must be >= 0")
    for split, prefix in SPLITS.items():
        n = write_split(args.source, prefix, os.path.join(args.out, split), args.limit)
        print("%s: %d images" % (os.path.join(args.out, split), n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
