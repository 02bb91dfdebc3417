#!/usr/bin/env bash
# gpu_prepare.sh — run on a BUILD machine (CUDA toolkit + the Debian
# libraries, no GPU needed) before a GPU session: builds a portable CUDA
# build (no -march=native) under build/gpu, links the two programs the GPU
# check needs without the file readers (GDAL, matio, libxml2 are not on the
# GPU image): build/gpu/run/gpu_tests (tests/runner.c + test_cuda.c +
# test_pipeline_loader.c) and build/gpu/run/gpu_bench, copies the shared
# libraries they need that a CUDA image lacks (OpenBLAS, LAPACK(E),
# gfortran, CUnit) into build/gpu/run/lib, and packs it all into
# build/gpu/run.tar.xz (carry that path; build/ is ignored by git).
# Not the check itself: that is bench/gpu_check.sh, run on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
G=build/gpu
R=$G/run
command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc ||
    { echo "gpu_prepare: no nvcc here: a CUDA build is needed" >&2; exit 1; }
make --no-print-directory -s BUILD=$G OPT="-O2" -j2 $G/libhsi.a $G/libhsi_cuda.so
CUDA_HOME=$(make -s --no-print-directory BUILD=$G --eval 'print-cudahome: ; @echo $(CUDA_HOME)' print-cudahome)
LDLIBS=$(make -s --no-print-directory BUILD=$G --eval 'print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
CFLAGS=$(make -s --no-print-directory BUILD=$G OPT="-O2" --eval 'print-cflags: ; @echo $(CFLAGS)' print-cflags |
         sed 's/-MMD -MP//')
test -f $G/libhsi_cuda.so || { echo "gpu_prepare: the build has no CUDA plugin" >&2; exit 1; }
rm -rf "$R" && mkdir -p "$R/lib"
# CUDA is the plugin beside the programs (found there by libhsi); they
# export libhsi's symbols to it (-rdynamic). gpu_bench also calls cudart.
cp $G/libhsi_cuda.so $R/
cc $CFLAGS -rdynamic tests/runner.c tests/test_cuda.c tests/test_pipeline_loader.c $G/libhsi.a \
    -Wl,--as-needed -lcunit $LDLIBS -o $R/gpu_tests
cc $CFLAGS -I"$CUDA_HOME/include" -rdynamic bench/gpu_bench.c $G/libhsi.a -Wl,--as-needed $LDLIBS \
    -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -o $R/gpu_bench
# libraries: everything but the C runtime and CUDA's own (the GPU image has both)
for bin in $R/gpu_tests $R/gpu_bench $R/libhsi_cuda.so; do
    ldd $bin | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
    case "$soname" in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libgcc_s*|libstdc++*|ld-linux*) ;;
    libcuda.so*|libcudart*|libcublas*) ;;
    *) cp -L "$path" "$R/lib/$soname" ;;
    esac
done
ls -la $R/lib
tar -C $G -cJf $G/run.tar.xz run
du -sh $R $G/run.tar.xz
echo "gpu_prepare: carry build/gpu/run.tar.xz; on the GPU machine run: bash bench/gpu_check.sh"
