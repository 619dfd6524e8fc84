#!/usr/bin/python3
"""Reads a kiln checkpoint the way another tool would: only the safetensors
layout (8-byte little-endian length, JSON header, raw little-endian data),
with the standard library. Prints the tensor names and the sum of all F32
values of the named tensors, for test_checkpoint to compare."""
import json
import struct
import sys

path, names = sys.argv[1], sys.argv[2:]
data = open(path, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n].decode("utf-8"))
body = data[8 + n:]
total = 0.0
for name in names:
    t = header[name]
    assert t["dtype"] == "F32", t
    begin, end = t["data_offsets"]
    count = 1
    for d in t["shape"]:
        count *= d
    assert end - begin == 4 * count
    total += sum(struct.unpack("<%df" % count, body[begin:end]))
print("%s %.9g" % (header["__metadata__"]["format"], total))
