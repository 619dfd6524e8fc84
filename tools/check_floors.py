#!/usr/bin/env python3
"""Fails when a source file includes a header it may not see.

The floors, lowest first: base <- opencl <- comm, layers <- runtime, and
inside runtime/ its rooms: context <- formats <- data <- model <- parallel,
saving <- train (saving never sees parallel). cli/ and examples/ are
applications: they see the public headers in include/ and their own folder,
nothing else. docs/architecture.md draws the same picture.

Every project include is checked: "floor/x.h" and "runtime/room/x.h" against
the table, a bare "x.h" only where it names a public header, a generated
one or (in an application) a file of its own folder, and "../" never (it
would hide the arrow). Only opencl/ names OpenCL headers, besides the
file that implements the public interop header (include/kiln_opencl.h).

struct kiln_model is composed of parts (runtime/model/graph.h, plan.h,
placement.h, training.h), each owned by one room. A runtime file outside
that room touches a part's members (`m->plan.heads`) only where PARTS below
lets it: a reader may read, a writer also assign. A write is an assignment,
++ or -- of the member (or of anything reached through it), or the first
argument of memcpy, memset and their kin; a write through a pointer taken
from the member is not seen. docs/architecture.md ("The parts of a model")
has the same table.

Usage: check_floors.py SOURCE_ROOT STAMP
"""
import os
import re
import sys

RUNTIME_ROOMS = ["context", "formats", "data", "model", "parallel", "saving", "train"]
BELOW_ROOM = {
    "context": {"context"},
    "formats": {"context", "formats"},
    "data": {"context", "formats", "data"},
    "model": {"context", "formats", "data", "model"},
    "parallel": {"context", "formats", "data", "model", "parallel"},
    "saving": {"context", "formats", "data", "model", "saving"},
    "train": set(RUNTIME_ROOMS),
}
BELOW = {
    "base": {"base"},
    "opencl": {"base", "opencl"},
    "comm": {"base", "opencl", "comm"},
    "layers": {"base", "opencl", "layers"},
    "runtime": {"base", "opencl", "comm", "layers", "runtime"},
    "cli": set(),
    "examples": set(),
}
APPLICATIONS = {"cli", "examples"}
PUBLIC = {"kiln.h", "kiln_opencl.h"}
GENERATED = {"kiln_config.h", "kiln_onnx.pb-c.h", "kernel_sources_data.h"}
OPENCL_HEADERS = re.compile(r'#\s*include\s*[<"](CL/|clblast|kiln_opencl\.h)')
PROJECT_INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"')
CL_EXCEPTIONS = {"runtime/context/interop.c", "opencl/interop.h"}

# The parts of struct kiln_model: the header that defines each (model/, since
# the struct holds them by value), the room that owns it (reads and writes
# it), the files elsewhere that also write it and why, and the rooms or files
# elsewhere that may read it.
PARTS = {
    "graph": {
        "header": "runtime/model/graph.h",
        "owner": "model",
        "writers": {
            "runtime/train/compile.c": "compile completes the graph: the outputs, the nodes "
                                       "on their path",
        },
        "readers": {"parallel", "saving", "train"},
    },
    "plan": {
        "header": "runtime/model/plan.h",
        "owner": "train",
        "writers": {
            "runtime/model/outputs.c": "the outputs' loss plans and label layout, which "
                                       "compile asks of kiln_model_plan_outputs",
        },
        "readers": {"model", "parallel", "saving"},
    },
    "placement": {
        "header": "runtime/model/placement.h",
        "owner": "parallel",
        "writers": {
            "runtime/train/compile.c": "compile sets the settings from its options and "
                                       "picks the strategy",
        },
        "readers": {"train", "runtime/model/graph.c", "runtime/model/layer_info.c",
                    "runtime/model/model.c", "runtime/model/ema.c", "runtime/saving/checkpoint.c",
                    "runtime/saving/onnx_export.c"},
    },
    "training": {
        "header": "runtime/model/training.h",
        "owner": "train",
        "writers": {
            "runtime/saving/checkpoint.c": "loading a checkpoint restores where training stood",
            "runtime/model/model.c": "kiln_update_end counts the optimizer updates",
            "runtime/parallel/parameter_server.c": "the asynchronous strategy counts its "
                                                   "updates",
            "runtime/parallel/parameter_server_mpi.c": "the asynchronous strategy counts its "
                                                       "updates",
        },
        "readers": {"runtime/model/graph.c", "runtime/model/model.c", "runtime/model/ema.c",
                    "runtime/parallel/data_parallel.c", "runtime/parallel/parameter_server_mpi.c",
                    "runtime/parallel/pipeline.c", "runtime/saving/checkpoint.c"},
    },
}
PART_ACCESS = re.compile(r"(->|\.)(%s)\.(\w+)" % "|".join(PARTS))
# After the member: subscripts and further members, then an assignment.
ASSIGNED = re.compile(r"(\s*(\[[^]\n]*\]|(->|\.)\w+))*\s*(<<=|>>=|[-+*/%&|^]?=(?!=)|\+\+|--)")
# Before the object the member is reached from: ++, -- or a copy into it.
WRITTEN_BEFORE = re.compile(r"((\+\+|--)|\b(memcpy|memmove|memset|strcpy|strncpy|snprintf)"
                            r"\(\s*&?\s*)[\w>.\[\]()-]*$")


def part_members(root, header, part):
    """The member names of struct kiln_<part> in header."""
    with open(os.path.join(root, header), encoding="utf-8") as f:
        text = f.read()
    name = "kiln_" + part
    found = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S)
    if not found:
        return None
    body = re.sub(r"/\*.*?\*/", "", found.group(1), flags=re.S)
    members = set()
    for decl in body.split(";"):
        decl = re.sub(r"\[[^]]*\]", "", decl).strip()
        if decl:
            first, *rest = decl.split(",")
            members.add(first.split()[-1].lstrip("*"))
            members.update(r.strip().lstrip("*") for r in rest)
    return members


def part_problems(rel, room, line, members):
    """What line of runtime file rel (in room) does to parts it may not touch."""
    problems = []
    for m in PART_ACCESS.finditer(line):
        part, member = m.group(2), m.group(3)
        rule = PARTS[part]
        if member not in members[part] or room == rule["owner"]:
            continue
        write = ASSIGNED.match(line, m.end()) or WRITTEN_BEFORE.search(line[:m.start()])
        if write and rel not in rule["writers"]:
            problems.append("writes %s.%s: the %s part (%s) is written by runtime/%s/ "
                            "and the writers PARTS names" % (part, member, part, rule["header"],
                                                             rule["owner"]))
        elif not write and rel not in rule["writers"] and room not in rule["readers"] \
                and rel not in rule["readers"]:
            problems.append("reads %s.%s: the %s part (%s) belongs to runtime/%s/; ask it "
                            "through a function of its header, or add a reader to PARTS and "
                            "docs/architecture.md" % (part, member, part, rule["header"],
                                                      rule["owner"]))
    return problems


def room_of(rel):
    """'runtime/model/graph.c' -> ('runtime', 'model'); 'layers/dense.c' -> ('layers', None)."""
    parts = rel.split("/")
    if parts[0] == "runtime":
        return "runtime", parts[1] if len(parts) > 2 else None
    return parts[0], None


def check_include(rel, target, root):
    """The problem with `#include "target"` in file rel, or None."""
    floor, room = room_of(rel)
    if "../" in target or target.startswith("./"):
        return 'includes "%s": a relative path hides which floor it reaches' % target
    if "/" not in target:
        if target in PUBLIC or target in GENERATED:
            return None
        if floor in APPLICATIONS and os.path.isfile(
                os.path.join(root, os.path.dirname(rel), target)):
            return None
        return ('includes "%s" by bare name: write the floor ("%s/%s") so the arrow is '
                'checked' % (target, os.path.dirname(rel), target))
    to_floor = target.split("/")[0]
    if to_floor not in BELOW:
        return None   # a system header in quotes, or a header meson generates in a folder
    if floor in APPLICATIONS:
        return 'includes "%s": %s/ sees only include/ and its own folder' % (target, floor)
    if to_floor not in BELOW[floor]:
        return 'includes "%s", from %s/, a floor above %s/' % (target, to_floor, floor)
    if floor == "runtime" and to_floor == "runtime":
        parts = target.split("/")
        to_room = parts[1] if len(parts) > 2 else None
        if room is None or to_room not in RUNTIME_ROOMS:
            return 'includes "%s": runtime files live in a room (%s)' % (
                target, ", ".join(RUNTIME_ROOMS))
        if to_room not in BELOW_ROOM[room]:
            return 'includes "%s": runtime/%s/ may not see runtime/%s/' % (target, room, to_room)
    return None


def sources(root):
    for floor in BELOW:
        for folder, dirs, names in os.walk(os.path.join(root, floor)):
            dirs.sort()
            for name in sorted(names):
                if name.endswith((".c", ".h", ".cc")):
                    path = os.path.join(folder, name)
                    yield os.path.relpath(path, root).replace(os.sep, "/"), path


def problems_in(root):
    problems = []
    members = {part: part_members(root, rule["header"], part) for part, rule in PARTS.items()}
    for part, rule in PARTS.items():
        if not members[part]:
            problems.append("%s: no struct kiln_%s, the model's %s part" % (rule["header"], part,
                                                                        part))
            members[part] = set()
    for rel, path in sources(root):
        floor, room = room_of(rel)
        if floor == "runtime" and room is None:
            problems.append("%s: runtime files live in a room (%s)"
                            % (rel, ", ".join(RUNTIME_ROOMS)))
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                text = line.strip()
                m = PROJECT_INCLUDE.match(text)
                problem = m and check_include(rel, m.group(1), root)
                if problem:
                    problems.append("%s:%d %s" % (rel, number, problem))
                if floor == "runtime" and room is not None:
                    problems.extend("%s:%d %s" % (rel, number, p)
                                    for p in part_problems(rel, room, line, members))
                if (OPENCL_HEADERS.match(text) and floor not in ("opencl",) + tuple(APPLICATIONS)
                        and rel not in CL_EXCEPTIONS):
                    problems.append("%s:%d names OpenCL outside opencl/" % (rel, number))
    return problems


def main():
    root, stamp = sys.argv[1], sys.argv[2]
    problems = problems_in(root)
    if problems:
        sys.stderr.write("kiln's floors are base <- opencl <- comm, layers <- runtime "
                         "(context <- formats <- data <- model <- parallel, saving <- train); "
                         "cli/ and examples/ see include/ only; a part of struct kiln_model is "
                         "touched only as tools/check_floors.py's PARTS says:\n")
        sys.stderr.write("".join("  %s\n" % p for p in problems))
        return 1
    with open(stamp, "w", encoding="utf-8") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
