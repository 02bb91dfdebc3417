#!/usr/bin/env bash
# make bench: every benchmark, each beside what users would use instead, in
# one run. Figures, never pass/fail. Output also saved under bench/out/.
set -uo pipefail
cd "$(dirname "$0")/.."
HSI=./build/hsi
PY=/usr/bin/python3
mkdir -p bench/out
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
have_py() { "$PY" -c "import $1" 2>/dev/null; }
if ! have_py numpy; then
    echo "bench: Debian's python3-numpy/-spectral/-gdal/-sklearn/-torch are needed for the"
    echo "       comparisons: HSI_DEPS_EXTRA='python3-numpy python3-spectral python3-gdal"
    echo "       python3-sklearn python3-torch' bash scripts/install-deps.sh"
fi
for b in bench/bench_*.sh; do
    [ -f "$b" ] || continue
    echo "== $(basename "$b" .sh)"
    bash "$b" 2>&1 | tee "bench/out/$(basename "$b" .sh).txt"
done
