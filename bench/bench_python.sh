#!/usr/bin/env bash
# hsi from Python beside SPy, rasterio, numpy and scikit-learn (bench/bench_python.py).
# A venv over Debian's Python packages; scikit-learn >= 1.5 from PyPI when it
# can be fetched (for PCA(svd_solver="covariance_eigh")), Debian's otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HSI_BENCH_VENV:-build/bench-venv}
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -c "import sklearn, sys; sys.exit(tuple(map(int, sklearn.__version__.split('.')[:2])) < (1, 5))" 2>/dev/null ||
    "$VENV/bin/pip" install -q "scikit-learn>=1.5" 2>/dev/null || echo "bench_python: scikit-learn >= 1.5 not available; using Debian's"
HSI_LIBRARY=$PWD/build/libhsi.so.0 PYTHONPATH=$PWD/python OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} \
    "$VENV/bin/python" bench/bench_python.py "${HSI_BENCH_DIR:-build/bench-data}" "${HSI_BENCH_REPEATS:-5}"
