#!/usr/bin/env python3
"""Fails when a source file includes a header from a floor above its own.

The floors, lowest first: base <- opencl <- comm, layers <- runtime. Only
opencl/ names OpenCL headers, besides runtime/interop.c, which implements
the public interop header (include/kiln_opencl.h) and sees CL types only
through it. Usage: check_floors.py SOURCE_ROOT STAMP
"""
import os
import re
import sys

BELOW = {
    "base": {"base"},
    "opencl": {"base", "opencl"},
    "comm": {"base", "opencl", "comm"},
    "layers": {"base", "opencl", "layers"},
    "runtime": {"base", "opencl", "comm", "layers", "runtime"},
}
OPENCL_HEADERS = re.compile(r'#\s*include\s*[<"](CL/|clblast|kiln_opencl\.h)')
LOCAL = re.compile(r'#\s*include\s*"([a-z_]+)/[^"]+"')
CL_EXCEPTIONS = {"runtime/interop.c", "opencl/interop.h"}


def main():
    root, stamp = sys.argv[1], sys.argv[2]
    problems = []
    for floor, allowed in BELOW.items():
        folder = os.path.join(root, floor)
        for name in sorted(os.listdir(folder)):
            if not name.endswith((".c", ".h")):
                continue
            rel = floor + "/" + name
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = LOCAL.match(line.strip())
                    if m and m.group(1) in BELOW and m.group(1) not in allowed:
                        problems.append("%s:%d includes %s/, a floor above %s/"
                                        % (rel, number, m.group(1), floor))
                    if (OPENCL_HEADERS.match(line.strip()) and floor != "opencl"
                            and rel not in CL_EXCEPTIONS):
                        problems.append("%s:%d names OpenCL outside opencl/" % (rel, number))
    if problems:
        sys.stderr.write("kiln's floors are base <- opencl <- comm, layers <- runtime:\n")
        sys.stderr.write("".join("  %s\n" % p for p in problems))
        return 1
    with open(stamp, "w", encoding="utf-8") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
