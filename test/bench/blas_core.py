"""The peer's BLAS at its best. PyTorch from Debian calls the system BLAS
(libblas.so.3, OpenBLAS when installed), whose kernels OpenBLAS picks for
the CPU when it loads, unless OPENBLAS_CORETYPE names a core. This
environment has set that variable (pinning older kernels), and Debian's
OpenBLAS 0.3.21 on this project's Sapphire Rapids machine picks its SSE3
"Prescott" fallback when the variable is unset (26 GFLOPS at 1024^3 on two
threads) but its AVX-512 "Cooperlake" kernels when it is set empty (114).
So the benchmarks ask this script:

    blas_core.py --best   prints the OPENBLAS_CORETYPE value ("" for unset)
                          under which PyTorch's 1024^3 float32 product runs
                          fastest on 2 threads, and on stderr every
                          candidate's core and GFLOPS
    blas_core.py          prints the BLAS PyTorch loaded and OpenBLAS's core
"""
import ctypes
import os
import subprocess
import sys

UNSET = "(unset)"
CANDIDATES = [UNSET, "", "Cooperlake", "SkylakeX", "Haswell"]

PROBE = r"""
import ctypes, os, time, torch
torch.set_num_threads(2)
a = torch.rand(1024, 1024); b = a.clone()
best = 0.0
for _ in range(3):
    t = time.time(); n = 0
    while time.time() - t < 0.4:
        a @ b; n += 1
    best = max(best, 2 * 1024 ** 3 * n / (time.time() - t) / 1e9)
print("%.1f" % best)
"""


def describe():
    """The BLAS libraries this process loaded (with torch) and OpenBLAS's core."""
    import torch  # noqa: F401  (loads the BLAS PyTorch uses)
    blas = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if "blas" in os.path.basename(line.split()[-1])})
    core = "-"
    for path in blas:
        if "openblas" in path:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
            break
    return ", ".join(os.path.realpath(p) for p in blas) or "no BLAS found", core


def best():
    results = []
    for value in CANDIDATES:
        env = dict(os.environ)
        env.pop("OPENBLAS_L2_SIZE", None)
        env.pop("OPENBLAS_CORETYPE", None)
        if value != UNSET:
            env["OPENBLAS_CORETYPE"] = value
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                             text=True)
        core = subprocess.run([sys.executable, __file__], env=env, capture_output=True,
                              text=True).stdout.strip()
        gflops = float(out.stdout) if out.returncode == 0 else 0.0
        print("OPENBLAS_CORETYPE=%r: %s, %.1f GFLOPS" % (value, core, gflops), file=sys.stderr)
        results.append((gflops, value))
    value = max(results)[1]
    print("" if value == UNSET else "set:" + value)


if __name__ == "__main__":
    if sys.argv[1:] == ["--best"]:
        best()
    else:
        blas, core = describe()
        print("BLAS %s; OpenBLAS core %s" % (blas, core))
