#!/usr/bin/env python3
"""Prints major.minor.patch from kiln.h's KILN_VERSION_* macros."""
import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
parts = [re.search(r"#define KILN_VERSION_%s (\d+)" % k, text).group(1)
         for k in ("MAJOR", "MINOR", "PATCH")]
print(".".join(parts))
