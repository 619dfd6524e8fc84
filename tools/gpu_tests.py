#!/usr/bin/env python3
"""Runs kiln's test suite from a packed build folder without meson (the GPU
machine has neither this build's meson nor its paths): reads the build's
meson-info/intro-tests.json, rewrites the source and build paths it was made
with (.gpu/origin) to where they are now, and runs the tests, several at a
time, each under its own time limit and all before a deadline.

Usage: gpu_tests.py ROOT BUILD LOG RESULTS --seconds S [--jobs N] [--devices D]
                   [--cap C] [--only NAME,...]
  ROOT     the source tree here; BUILD the unpacked build folder
  LOG      every test's output, one after another
  RESULTS  a line per test: name, verdict (pass fail skip timeout notrun),
           seconds, exit status
  --devices D  KILN_DEVICES for every test (default gpu; '' keeps each test's)
  --cap C      seconds any one test may take (default 120; less when its meson
               timeout is less), so that one hang cannot take the whole budget
Tests meson runs alone (is_parallel false: test_parameter_server) run first,
one at a time; then the rest, N at a time.
Suites first: layers, train, strategies, model, api, opencl, comm, saving,
importer, datasets, base, common. Left out: what needs a compiler, meson,
node, chromium or PyTorch, and what checks the sources rather than a device
(LEFT_OUT below). Added: the kernel tests with KILN_KERNEL_VARIANT=cpu (the
CPU variants on the GPU; on a GPU the plain runs already run the GPU ones).
Exit status 0 whatever the tests did (the results are the point)."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

ORDER = ["layers", "train", "strategies", "model", "api", "opencl", "comm", "saving",
         "importer", "datasets", "base", "common"]
LEFT_OUT = {
    "kernel_names": "reads the sources (python)",
    "floors_check": "reads the sources (python)",
    "exported_symbols": "reads the library's symbols (nm), no device",
    "report_render": "needs chromium",
    "char_lm_parity": "needs Debian's PyTorch",
    "consumer_subproject": "builds kiln again (meson, a compiler)",
    "consumer_installed": "builds kiln again (meson, a compiler)",
}
LEFT_OUT_SUITES = {"fuzz": "file parsers, no device", "consumer": "builds kiln again",
                   "mpi": "needs MPI"}
CPU_VARIANT = ["test_layers", "test_train", "test_gradcheck", "test_conv2d_transpose",
               "test_attention"]
LOG_LINES = 400       # the tail of each test's output kept in LOG


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("build")
    p.add_argument("log")
    p.add_argument("results")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--devices", default="gpu")
    p.add_argument("--only", default="", help="comma-separated test names (a quick check)")
    p.add_argument("--cap", type=float, default=120,
                   help="seconds any one test may take, below its meson timeout")
    a = p.parse_args()
    deadline = time.monotonic() + a.seconds
    root, build = os.path.abspath(a.root), os.path.abspath(a.build)

    origin = {}
    with open(os.path.join(root, ".gpu", "origin")) as f:
        for line in f:
            k, _, v = line.strip().partition(" ")
            origin[k] = v

    def here(s):
        # The build folder first: it lies inside the source tree there.
        s = s.replace(origin["build"], build)
        return s.replace(origin["source"], root)

    with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
        tests = json.load(f)
    runs, out_lines = [], []
    for t in tests:
        suites = [s.split(":")[-1] for s in t["suite"]]
        why = LEFT_OUT.get(t["name"]) or next(
            (LEFT_OUT_SUITES[s] for s in suites if s in LEFT_OUT_SUITES), None)
        if why:
            out_lines.append("%s left-out 0 - %s" % (t["name"], why))
            continue
        env = {k: here(v) for k, v in t["env"].items()}
        if "KILN_PYTHON" in env and not os.path.exists(env["KILN_PYTHON"]):
            # The build's Python (Debian's) may not be there: this machine's own.
            env["KILN_PYTHON"] = shutil.which("python3") or sys.executable
        run = {"name": t["name"], "suite": suites[0], "cmd": [here(c) for c in t["cmd"]],
               "env": env, "timeout": t["timeout"] or 300,
               "cwd": here(t.get("workdir") or build), "alone": not t["is_parallel"]}
        runs.append(run)
        if t["name"] in CPU_VARIANT:
            cpu = dict(run, name=t["name"] + "_cpu_kernels",
                       env=dict(env, KILN_KERNEL_VARIANT="cpu"))
            runs.append(cpu)
    if a.only:
        wanted = a.only.split(",")
        runs = [r for r in runs if r["name"] in wanted]
    rank = {s: i for i, s in enumerate(ORDER)}
    runs.sort(key=lambda r: rank.get(r["suite"], len(ORDER)))   # stable within a suite

    lock = threading.Lock()
    log = open(a.log, "w")
    results = open(a.results, "w")
    for line in out_lines:
        results.write(line + "\n")
    results.flush()
    base_env = dict(os.environ)
    base_env.pop("CI", None)   # missing tools skip, as on a developer's machine
    # Tests meson runs alone (is_parallel: false) go first, one at a time.
    alone = [r for r in runs if r["alone"]]
    queue = [r for r in runs if not r["alone"]]

    def run_one(r):
        left = deadline - time.monotonic()
        if left < 3:
            return "notrun", 0.0, "-", "the tests' time ran out"
        limit = min(r["timeout"], left, a.cap)
        env = dict(base_env)
        for k, v in r["env"].items():
            if k == "LD_LIBRARY_PATH":
                v = v + ":" + base_env.get("LD_LIBRARY_PATH", "")
            env[k] = v
        if a.devices:
            env["KILN_DEVICES"] = a.devices
        start = time.monotonic()
        try:
            proc = subprocess.Popen(r["cmd"], cwd=r["cwd"], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            return "fail", 0.0, "-", "could not start: %s" % e
        try:
            out, _ = proc.communicate(timeout=limit)
            verdict = {0: "pass", 77: "skip"}.get(proc.returncode, "fail")
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            verdict, rc = "timeout", "killed after %.0f s" % limit
        secs = time.monotonic() - start
        text = out.decode("utf-8", "replace").splitlines()
        if len(text) > LOG_LINES:
            text = ["[%d lines before these left out]" % (len(text) - LOG_LINES)] + \
                   text[-LOG_LINES:]
        with lock:
            shown = dict(r["env"], **({"KILN_DEVICES": a.devices} if a.devices else {}))
            log.write("==== %s: %s, %.1f s, exit %s\n$ cd %s && %s%s\n" % (
                r["name"], verdict, secs, rc, r["cwd"],
                "".join("%s='%s' " % kv for kv in shown.items()), " ".join(r["cmd"])))
            log.write("\n".join(text) + "\n")
            log.flush()
        return verdict, secs, rc, ""

    def record(r, verdict, secs, rc, note):
        with lock:
            results.write("%s %s %.1f %s%s\n" % (r["name"], verdict, secs, rc,
                                                 " - " + note if note else ""))
            results.flush()
            print("%-40s %-8s %6.1f s" % (r["name"], verdict, secs), flush=True)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                r = queue.pop(0)
            record(r, *run_one(r))

    for r in alone:
        record(r, *run_one(r))

    threads = [threading.Thread(target=worker) for _ in range(max(1, a.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    results.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
