#!/usr/bin/python3
"""Writes .npy files with NumPy for test_npy, each beside the values it
holds as raw little-endian float64 (<name>.f64; a float16 file's as NumPy
converts them to float32). Usage: write_npy.py FOLDER"""
import os
import sys

import numpy as np
from numpy.lib import format as npy_format

folder = sys.argv[1]
rng = np.random.default_rng(15)


def save(name, a, version=None):
    path = os.path.join(folder, name + ".npy")
    if version is None:
        np.save(path, a)
    else:
        with open(path, "wb") as f:
            npy_format.write_array(f, a, version=version)
    if a.dtype.fields is not None:
        return   # a structured array has no float64 values
    # float16 as NumPy converts it to float32; int64 too, rounded once
    # (through float64 it would be rounded twice).
    with np.errstate(invalid="ignore"):   # NaN stays NaN
        ref = a.astype(np.float32 if a.dtype in (np.float16, np.int64) else np.float64)
        ref.astype("<f8").tofile(os.path.join(folder, name + ".f64"))


def ints(dtype, shape):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.int64)
    flat = a.reshape(-1)
    flat[0], flat[-1] = info.min, info.max   # both ends of the range
    return a.astype(dtype)


# Features: every supported dtype, ranks 2 to 5, and versions 2.0 and 3.0.
save("u1", ints(np.uint8, (7, 5)))
save("i1", ints(np.int8, (6, 3, 2)))
save("u2", ints(np.uint16, (5, 2, 3, 2)))
save("i2", ints(np.int16, (4, 2, 2, 3, 2)))
i4 = ints(np.int32, (9, 4))
i4[1, :] = [16777217, -16777219, 2**30 + 1, 0]   # rounded to float
save("i4", i4)
# Every float16 bit pattern: zeros, subnormals, normals, infinities, NaNs.
save("f2", np.arange(65536, dtype=np.uint16).view(np.float16).reshape(256, 256))
f4 = rng.standard_normal((5, 4, 3)).astype(np.float32)
f4[0, 0, :] = [-0.0, 1e-45, np.finfo(np.float32).max]
f4[1, 0, :] = [np.inf, -np.inf, np.nan]
save("f4", f4)
save("f4_v2", rng.standard_normal((3, 2)).astype(np.float32), version=(2, 0))
save("u1_v3", ints(np.uint8, (4, 3)), version=(3, 0))

# Labels, one file per features file: each integer dtype, and dense float32.
counts = {"u1": 7, "i1": 6, "u2": 5, "i2": 4, "i4": 9, "f2": 256, "f4": 5, "f4_v2": 3,
          "u1_v3": 4}
label_types = [np.uint8, np.int8, np.uint16, np.int16, np.int32]
for i, (name, count) in enumerate(sorted(counts.items())):
    kind = label_types[i % len(label_types)]
    y = rng.integers(0, min(np.iinfo(kind).max, 1000), size=count, endpoint=True)
    y[-1] = np.iinfo(kind).max if kind != np.int32 else 2**31 - 1
    save(name + ".labels", y.astype(kind))
save("f4.dense", rng.standard_normal((5, 3)).astype(np.float32))

# int64, what np.save writes for np.array([0, 1, 2]) on every 64-bit
# platform: features over the whole range, labels of the default dtype.
i8 = ints(np.int64, (6, 2))
i8[1, :] = [2**24 + 1, -(2**53 + 3)]   # rounded to float
save("i8", i8)
default = np.array([2, 0, 1, 1, 0, 2])
assert default.dtype == np.int64, default.dtype
save("i8.labels", default)
save("default.labels", np.array([0, 1, 2, 1, 0, 2, 1]))   # for u1.npy's 7 samples
save("big.labels", np.array([0, 1, 2**31, 1, 0, 2, 1]))
save("negative64.labels", np.array([0, -(2**40), 2, 1, 0, 2, 1]))

# Bytes after the data, which np.load ignores (a file written over a longer
# one without truncating it): read as NumPy reads them.
trailing = np.arange(6, dtype=np.float32).reshape(3, 2)
save("trailing", trailing)
save("trailing.labels", np.array([1, 0, 1], dtype=np.uint8))
for name in ("trailing", "trailing.labels"):
    with open(os.path.join(folder, name + ".npy"), "ab") as f:
        f.write(b"\0bytes after the array\n")
assert (np.load(os.path.join(folder, "trailing.npy")) == trailing).all()

# Files kiln refuses, as NumPy writes them.
save("f8", rng.standard_normal((3, 2)))
save("bool", np.ones((3, 2), dtype=bool))
save("big_endian", np.arange(6, dtype=">i4").reshape(3, 2))
save("fortran", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(3, 2)))
save("structured", np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]))
save("one_d", np.arange(7, dtype=np.float32))
save("rank6", np.zeros((2, 1, 1, 1, 1, 1), dtype=np.float32))
save("empty", np.zeros((0, 3), dtype=np.float32))
save("zero_dim", np.zeros((4, 0), dtype=np.float32))
save("negative.labels", np.array([0, 3, -1, 2, 1, 0, 0], dtype=np.int8))
save("float.labels", np.zeros(7, dtype=np.float32))
save("nan.labels", np.array([[0, 1], [np.nan, 0], [1, 0], [0, 1], [1, 0]], dtype=np.float32))
save("rank3.labels", np.zeros((7, 1, 1), dtype=np.int32))
