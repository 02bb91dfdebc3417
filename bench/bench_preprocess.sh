#!/usr/bin/env bash
# Issue 16 benchmark: the whole `hsi preprocess --normalize zscore --pca 30`
# command on uint16 cubes of 64 MiB to 2 GiB (HSI_BENCH_PREP_SIZES="64 512
# 2048 8192" for more), in and out of the page cache, beside numpy +
# scikit-learn doing the same job (current versions from PyPI in a venv of
# their own, and Debian's), with the machine's bound measured in the same
# run. Figures, never pass/fail. Env: HSI_BENCH_DIR (default a temp dir),
# HSI_BENCH_REPEATS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out build
LDLIBS=$(make -s --no-print-directory --eval 'print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
CFLAGS=$(make -s --no-print-directory --eval 'print-cflags: ; @echo $(CFLAGS)' print-cflags | sed 's/-MMD -MP//')
cc $CFLAGS bench/bench_preprocess.c build/libhsi.a $LDLIBS -o build/bench_preprocess
VENV=${HSI_BENCH_VENV:-build/bench-venv-pypi}
if [ ! -x "$VENV/bin/python" ]; then
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "numpy>=2" "scikit-learn>=1.5" spectral rasterio 2>/dev/null ||
        { echo "bench_preprocess: PyPI not reachable: Debian's numpy and scikit-learn only"; rm -rf "$VENV"; }
fi
PYS=(/usr/bin/python3)
[ -x "$VENV/bin/python" ] && PYS=("$VENV/bin/python" /usr/bin/python3)
DIR=${HSI_BENCH_DIR:-$(mktemp -d -t hsi-bench-prep.XXXXXX)}
[ -n "${HSI_BENCH_DIR:-}" ] || trap 'rm -rf "$DIR"' EXIT
OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} /usr/bin/python3 bench/bench_preprocess.py ./build/hsi \
    ./build/bench_preprocess "$DIR" "${HSI_BENCH_PREP_SIZES:-64 512 2048}" "${PYS[@]}"
