#!/usr/bin/env bash
# hsi from Python beside SPy, rasterio, numpy and scikit-learn (bench/bench_python.py),
# the peers in their current versions from PyPI (numpy 2, scikit-learn >= 1.5
# for PCA(svd_solver="covariance_eigh"), SPy, rasterio with its own GDAL) in a
# venv of their own; when PyPI cannot be reached, Debian's versions instead.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HSI_BENCH_VENV:-build/bench-venv-pypi}
if [ ! -x "$VENV/bin/python" ]; then
    /usr/bin/python3 -m venv "$VENV"
    if ! "$VENV/bin/pip" install -q "numpy>=2" "scikit-learn>=1.5" spectral rasterio 2>/dev/null; then
        echo "bench_python: PyPI not reachable; comparing with Debian's Python packages"
        rm -rf "$VENV"
        /usr/bin/python3 -m venv --system-site-packages "$VENV"
    fi
fi
HSI_LIBRARY=$PWD/build/libhsi.so.0 PYTHONPATH=$PWD/python OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} \
    "$VENV/bin/python" bench/bench_python.py "${HSI_BENCH_DIR:-build/bench-data}" "${HSI_BENCH_REPEATS:-5}"
