#!/usr/bin/env bash
# gpu_prepare.sh — run on a BUILD machine (CUDA toolkit + the Debian
# libraries, no GPU needed) before a GPU session: builds the CUDA build under
# build/gpu with the Makefile's own flags (OPT, default -O3 -march=x86-64-v3:
# any AVX2 machine, the same code as a normal build, so the CPU baseline of
# the GPU/CPU ratios is the real one; OPT=... in the environment overrides it
# as for make), links the two programs the GPU check needs without GDAL
# (not on the GPU image, and too big to carry; libhsi dlopens it):
# build/gpu/run/gpu_tests (tests/runner.c + test_cuda.c + test_cuda_cudnn.c + test_cuda_plugin.c +
# test_backend_ops.c + test_pipeline_loader.c, with bench/gpu_tests_nogdal.c
# for the runner's GDAL calls), build/gpu/run/gpu_bench and the hsi command
# itself (build/gpu/run/hsi, for the check's --device stage), copies the shared libraries they
# need that a CUDA image lacks (OpenBLAS, LAPACK(E), gfortran, CUnit, matio,
# libxml2, cairo and theirs; a library not found here stops the script) into
# build/gpu/run/lib, copies Salinas-A (SalinasA_corrected.mat and
# SalinasA_gt.mat, 1.5 MB, for the check's salinas_a stage: the GPU machine
# has no ../shared) from ${HSI_SHARED_DATA:-../shared/data}/salinas_a into
# build/gpu/run/data/salinas_a when both are there (into the build output
# only, never the git tree; without them the stage is skipped and says so),
# writes build/gpu/run/BUILD_INFO (which says whether the data was packed),
# and packs it all into build/gpu/run.tar.xz (carry that path; build/ is
# ignored by git). Not the check itself: that is bench/gpu_check.sh, run on
# the GPU machine.
# shellcheck disable=SC2016 # the $(...) in the --eval strings are make's
set -euo pipefail
trap 'echo "gpu_prepare: FAILED (exit status $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
G=build/gpu
R=$G/run
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc ||
    { echo "gpu_prepare: no nvcc here: a CUDA build is needed" >&2; exit 1; }
mk() { make -s --no-print-directory BUILD=$G "$@"; }
CFLAGS=$(mk --eval 'print-cflags: ; @echo $(CFLAGS)' print-cflags | sed 's/-MMD -MP//')
CUDA_HOME=$(mk --eval 'print-cudahome: ; @echo $(CUDA_HOME)' print-cudahome)
LDLIBS=$(mk --eval 'print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
echo "gpu_prepare: CFLAGS $CFLAGS"
# objects built with other flags (an older -O2 build) are not reused
if [ -f $G/.cflags ] && [ "$(cat $G/.cflags)" != "$CFLAGS" ]; then
    echo "gpu_prepare: $G was built with other flags ($(cat $G/.cflags)): rebuilding it"
    rm -rf "$G"
fi
mkdir -p $G && printf '%s\n' "$CFLAGS" > $G/.cflags
make --no-print-directory -s BUILD=$G -j"$JOBS" $G/libhsi.a $G/libhsi_cuda.so $G/hsi
test -f $G/libhsi_cuda.so || { echo "gpu_prepare: the build has no CUDA plugin" >&2; exit 1; }
rm -rf "$R" && mkdir -p "$R/lib"
# CUDA is the plugin beside the programs (found there by libhsi); they
# export libhsi's symbols to it (-rdynamic). gpu_bench also calls cudart and
# cuBLAS (the sgemm rate).
cp $G/libhsi_cuda.so $G/hsi $R/
# shellcheck disable=SC2086 # CFLAGS and LDLIBS are word lists
# runner.c's PNG readers call GDAL: bench/gpu_tests_nogdal.c stands in for it
# (the suites that run hsi run the one carried beside gpu_tests)
cc $CFLAGS -DHSI_BIN="\"./$R/hsi\"" -rdynamic tests/runner.c tests/test_cuda.c tests/test_cuda_cudnn.c \
    tests/test_cuda_plugin.c tests/test_backend_ops.c tests/test_pipeline_loader.c \
    bench/gpu_tests_nogdal.c $G/libhsi.a -Wl,--as-needed -lcunit $LDLIBS -o $R/gpu_tests
# shellcheck disable=SC2086
cc $CFLAGS -I"$CUDA_HOME/include" -rdynamic bench/gpu_bench.c $G/libhsi.a -Wl,--as-needed $LDLIBS \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcublas -lcudart -o $R/gpu_bench
# libraries: everything but the C runtime and CUDA's own (the GPU image has both)
for bin in $R/gpu_tests $R/gpu_bench $R/hsi $R/libhsi_cuda.so; do
    if ldd "$bin" | grep -q "not found"; then
        echo "gpu_prepare: $bin needs libraries this machine lacks:" >&2
        ldd "$bin" | grep "not found" >&2
        exit 1
    fi
    ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
    case "$soname" in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libgcc_s*|libstdc++*|ld-linux*) ;;
    libcuda.so*|libcudart*|libcublas*) ;;
    *) cp -L "$path" "$R/lib/$soname" ;;
    esac
done
# Salinas-A for the check's salinas_a stage (hsi train --device cuda against cpu)
SAL=${HSI_SHARED_DATA:-../shared/data}/salinas_a
if [ -f "$SAL/SalinasA_corrected.mat" ] && [ -f "$SAL/SalinasA_gt.mat" ]; then
    mkdir -p "$R/data/salinas_a"
    cp "$SAL/SalinasA_corrected.mat" "$SAL/SalinasA_gt.mat" "$R/data/salinas_a/"
    chmod 644 "$R"/data/salinas_a/*.mat
    SAL_PACKED="packed from $SAL into run/data/salinas_a ($(du -ch "$R"/data/salinas_a/*.mat | tail -1 | cut -f1))"
else
    SAL_PACKED="not packed (no $SAL/SalinasA_corrected.mat and SalinasA_gt.mat here): the check's salinas_a stage will be skipped"
fi
echo "gpu_prepare: Salinas-A $SAL_PACKED"
{
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built: $(date -u +%FT%TZ) on $(hostname)"
    echo "cflags: $CFLAGS"
    echo "nvcc: $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | tail -1)"
    echo "cuda libraries needed: $(ldd $R/libhsi_cuda.so $R/gpu_bench | awk '$1 ~ /^lib(cudart|cublas)/ {print $1}' | sort -u | tr '\n' ' ')"
    echo "salinas_a data: $SAL_PACKED"
} > $R/BUILD_INFO
cat $R/BUILD_INFO
ls -la $R/lib
tar -C $G -cJf $G/run.tar.xz run
tar -tJf $G/run.tar.xz > /dev/null || { echo "gpu_prepare: $G/run.tar.xz does not read back" >&2; exit 1; }
du -sh $R $G/run.tar.xz
echo "gpu_prepare: carry build/gpu/run.tar.xz; on the GPU machine run: bash bench/gpu_check.sh"
