#!/usr/bin/env bash
# Issue 4 benchmark: statistics and fused passes on a uint16 cube in each
# interleave (GB/s, vs memcpy, vs SPy and GDAL), PCA 30 fit + transform vs
# SPy and scikit-learn. Optional: HSI_BENCH_BIG_GIB=32 runs `hsi preprocess
# --normalize zscore --pca 30` on a sparse cube of that size under
# /usr/bin/time -v (peak resident memory). Figures, never pass/fail.
# Env: HSI_BENCH_MIB (default 512), HSI_BENCH_DIR (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out build
LDLIBS=$(make -s --no-print-directory --eval 'print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
CFLAGS=$(make -s --no-print-directory --eval 'print-cflags: ; @echo $(CFLAGS)' print-cflags | sed 's/-MMD -MP//')
cc $CFLAGS bench/bench_kernels.c build/libhsi.a $LDLIBS -o build/bench_kernels
DIR=${HSI_BENCH_DIR:-$(mktemp -d -t hsi-bench-kernels.XXXXXX)}
[ -n "${HSI_BENCH_DIR:-}" ] || trap 'rm -rf "$DIR"' EXIT
./build/bench_kernels "$DIR" "${HSI_BENCH_MIB:-512}" 3 > bench/out/kernels.json
/usr/bin/python3 bench/bench_kernels.py "$DIR" bench/out/kernels.json
rm -f "$DIR"/stats_u16.* "$DIR"/pca_*
if [ -n "${HSI_BENCH_BIG_GIB:-}" ]; then
    # B x L x S uint16 BIL, sparse (reads as zeros): a cube bigger than RAM
    B=200 S=1024
    L=$(( HSI_BENCH_BIG_GIB * 1073741824 / (B * S * 2) ))
    truncate -s $(( B * L * S * 2 )) "$DIR/big.bil"
    printf 'ENVI\nsamples = %d\nlines = %d\nbands = %d\nheader offset = 0\nfile type = ENVI Standard\ndata type = 12\ninterleave = bil\nbyte order = 0\n' \
        $S $L $B > "$DIR/big.hdr"
    echo "== hsi preprocess --normalize zscore --pca 30 on a ${HSI_BENCH_BIG_GIB} GiB sparse cube ($B x $L x $S)"
    /usr/bin/time -v ./build/hsi preprocess "$DIR/big.hdr" "$DIR/big_pca.hdr" --overwrite --normalize zscore --pca 30 \
        2> bench/out/kernels_big_time.txt || true
    grep -E "Elapsed|Maximum resident|Exit status" bench/out/kernels_big_time.txt
    tail -3 bench/out/kernels_big_time.txt | head -0
    rm -f "$DIR"/big*
fi
