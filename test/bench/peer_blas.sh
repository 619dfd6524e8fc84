# Sourced by the benchmarks that run a peer on OpenBLAS (PyTorch through
# Debian's libblas.so.3, bench_gemm's cblas_sgemm): sets $peer_env to the
# `env` prefix that runs the peer on OpenBLAS at its best, and prints which
# core that is. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset (this
# environment has set them, pinning older kernels), then
# test/bench/blas_core.py times the candidates (unset, set empty, named
# AVX-512 and AVX2 cores) and picks the fastest: Debian's OpenBLAS 0.3.21
# falls back to its SSE3 kernels on some newer CPUs when left to itself.
# Needs PyTorch (without it: the variables unset, nothing timed).
peer_env="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
if /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
    peer_blas_log=$(mktemp)
    peer_blas_best=$(/usr/bin/python3 test/bench/blas_core.py --best 2>"$peer_blas_log") ||
        peer_blas_best=""
    if [ -n "$peer_blas_best" ]; then
        peer_env="$peer_env OPENBLAS_CORETYPE=${peer_blas_best#set:}"
    fi
    echo "the peer's OpenBLAS, each candidate (PyTorch's 1024^3 float32 product, 2 threads):"
    sed 's/^/  /' "$peer_blas_log"
    echo "the peer runs under: $peer_env"
    rm -f "$peer_blas_log"
fi
