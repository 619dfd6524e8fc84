#!/usr/bin/env python3
"""Copies ONNX's onnx.proto with its package renamed to kiln_onnx.

protoc-c names every generated symbol after the package (onnx__model_proto__pack);
renamed, they are kiln_onnx__*, within kiln's prefix, and cannot clash with
another copy of ONNX's generated code in an application. The wire format
does not depend on the package. Usage: onnx_proto.py ONNX_PROTO OUTPUT
"""
import re
import sys


def main():
    source, output = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    text, n = re.subn(r"^package onnx;$", "package kiln_onnx;", text, flags=re.M)
    if n != 1:
        sys.stderr.write("%s: no 'package onnx;' line; is it ONNX's onnx.proto?\n" % source)
        return 1
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
