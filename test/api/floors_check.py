#!/usr/bin/env python3
"""tools/check_floors.py against planted includes: the real tree passes, and
each kind of wrong include (a floor above, a room above, saving seeing
parallel, ../, a bare name, an application reaching inside) fails naming
its file; and each way of touching a part of struct kiln_model that
check_floors.py's PARTS does not allow (a read from a room that is not a
reader, an assignment, ++ and a memset from a room that only reads) fails
naming the member. Usage: floors_check.py SOURCE_ROOT"""
import importlib.util
import os
import shutil
import sys
import tempfile

root = sys.argv[1]
spec = importlib.util.spec_from_file_location("check_floors",
                                              os.path.join(root, "tools", "check_floors.py"))
floors = importlib.util.module_from_spec(spec)
spec.loader.exec_module(floors)

failures = 0


def expect(what, problems, needle):
    global failures
    hit = [p for p in problems if needle in p]
    print("%-52s %s" % (what, "ok" if hit else "MISSED"))
    if not hit:
        failures += 1
        print("  problems were: %s" % problems)


real = floors.problems_in(root)
print("%-52s %s" % ("the tree as it is", "ok" if not real else "FAILS"))
failures += bool(real)
for p in real:
    print("  " + p)

PLANTS = [
    ("layers/ including runtime/", "layers/planted.c", '#include "runtime/model/model.h"',
     "a floor above layers/"),
    ("comm/ including layers/", "comm/planted.c", '#include "layers/layer.h"',
     "a floor above comm/"),
    ("model/ including parallel/", "runtime/model/planted.c",
     '#include "runtime/parallel/replica.h"', "runtime/model/ may not see runtime/parallel/"),
    ("saving/ including parallel/", "runtime/saving/planted.c",
     '#include "runtime/parallel/crew.h"', "runtime/saving/ may not see runtime/parallel/"),
    ("formats/ including data/", "runtime/formats/planted.h",
     '#include "runtime/data/dataset.h"', "runtime/formats/ may not see runtime/data/"),
    ("a file outside every room", "runtime/planted.c", '#include "kiln.h"',
     "runtime files live in a room"),
    ("a ../ include", "runtime/data/planted.c", '#include "../train/fit.h"', "relative path"),
    ("a bare-name include in the library", "runtime/model/planted2.c", '#include "loss.h"',
     "by bare name"),
    ("examples/ reaching into runtime/", "examples/planted.c",
     '#include "runtime/context/context.h"', "sees only include/"),
    ("the kiln tool reaching into runtime/", "cli/kiln.c",
     '#include "runtime/model/model.h"', "sees only include/"),
    ("examples/ by a bare name of another folder", "examples/planted2.c",
     '#include "model.h"', "by bare name"),
    ("OpenCL outside opencl/", "layers/planted2.c", "#include <CL/cl.h>",
     "names OpenCL outside opencl/"),
    ("parallel/ reading the training part", "runtime/parallel/planted3.c",
     "int32_t f(const kiln_model *m) { return m->training.n_history; }",
     "reads training.n_history"),
    ("saving/ (a reader) assigning to the plan", "runtime/saving/planted3.c",
     "void f(kiln_model *m) { m->plan.compiled = 0; }", "writes plan.compiled"),
    ("parallel/ (a reader) incrementing the graph", "runtime/parallel/planted4.c",
     "void f(kiln_model *m) { ++m->graph.nodes[0].frozen; }", "writes graph.nodes"),
    ("train/ clearing the placement with memset", "runtime/train/planted3.c",
     "void f(kiln_model *m) { memset(&m->placement.rank, 0, 4); }", "writes placement.rank"),
]
tmp = tempfile.mkdtemp()
try:
    for floor in floors.BELOW:
        shutil.copytree(os.path.join(root, floor), os.path.join(tmp, floor))
    for what, path, line, needle in PLANTS:
        planted = os.path.join(tmp, path)
        with open(planted, "w", encoding="utf-8") as f:
            f.write("/* planted */\n" + line + "\n")
        expect(what, floors.problems_in(tmp), needle)
        os.remove(planted)
finally:
    shutil.rmtree(tmp)
print("%d failed" % failures)
sys.exit(1 if failures else 0)
