#!/usr/bin/env bash
# gpu_check.sh — the one prepared script for a GPU session (issue 7), under
# 10 minutes on an H200: (1) the CUDA test suites (`--require-cuda cuda`:
# fails without a device), (2) bench/gpu_bench (H2D GB/s pinned vs pageable,
# device memcpy GB/s, GPU stats / fused GB/s vs the CPU fused pass, cnn2d and
# HybridSN training samples/s on the card vs the CPU engine), (3)
# bench/torch_gpu.py (the same models in PyTorch on the same card). Every
# output goes to $OUT (the device tool's folder) or bench/out/gpu, and a
# summary of the figures is printed last. Not a test of the CPU code.
#
# Binaries: when this machine has nvcc and the Debian -dev libraries, the
# project is built here (make, hsi_tests: `make test-cuda`'s suites, the
# Salinas-A one too if HSI_SHARED_DATA points at the data); otherwise the
# portable build made beforehand by bench/gpu_prepare.sh is used:
#   here (build machine):  bash bench/gpu_prepare.sh
#   device tool:           run(command="bash bench/gpu_check.sh",
#                              carry=["build/gpu/run.tar.xz"], timeout_s=560)
# HSI_GPU_CHECK_MODE=carried forces the carried build even where a local
# build would be possible. Exit status 0 only when the suites and the
# benchmark both succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-bench/out/gpu}
mkdir -p "$O"
exec > >(tee "$O/gpu_check.log") 2>&1
t_start=$(date +%s)
echo "== gpu_check $(date -u +%FT%TZ) on $(hostname), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv 2>&1 | head -3
NVCC=$(command -v nvcc || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; } || true)
echo "nvcc: ${NVCC:-none} $($NVCC --version 2>/dev/null | tail -1)"

# ---- binaries
rc_build=0
if [ "${HSI_GPU_CHECK_MODE:-}" != carried ] && [ -n "$NVCC" ] && pkg-config --exists openblas lapacke gdal matio libxml-2.0 libcjson 2>/dev/null &&
   { pkg-config --exists cunit 2>/dev/null || test -f /usr/include/CUnit/CUnit.h; }; then
    echo "== building here (nvcc and the libraries are present)"
    make --no-print-directory -j"$(nproc)" all build/hsi_tests > "$O/build.log" 2>&1 || rc_build=$?
    LDLIBS=$(make -s --no-print-directory --eval 'print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
    CFLAGS=$(make -s --no-print-directory --eval 'print-cflags: ; @echo $(CFLAGS)' print-cflags |
             sed 's/-MMD -MP//')
    CUDA_HOME=$(make -s --no-print-directory --eval 'print-cudahome: ; @echo $(CUDA_HOME)' print-cudahome)
    # beside build/libhsi_cuda.so (libhsi finds the plugin there); gpu_bench also calls cudart
    [ $rc_build -eq 0 ] && { cc $CFLAGS -I"$CUDA_HOME/include" -rdynamic bench/gpu_bench.c build/libhsi.a \
        $LDLIBS -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -o build/gpu_bench \
        >> "$O/build.log" 2>&1 || rc_build=$?; }
    TESTS=(./build/hsi_tests --require-cuda cuda)
    BENCH=./build/gpu_bench
else
    echo "== using the carried portable build (bench/gpu_prepare.sh)"
    if [ ! -f build/gpu/run.tar.xz ] && [ ! -x build/gpu/run/gpu_tests ]; then
        echo "gpu_check: no build/gpu/run.tar.xz: run bench/gpu_prepare.sh on the build machine and"
        echo "           carry build/gpu/run.tar.xz (nvcc or the -dev libraries are missing here)"
        exit 2
    fi
    [ -f build/gpu/run.tar.xz ] && tar -C build/gpu -xJf build/gpu/run.tar.xz
    CUDALIB=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -e "$d/libcublas.so.13" ] && { CUDALIB=$d; break; }
    done
    if [ -z "$CUDALIB" ]; then
        f=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' -print -quit 2>/dev/null)
        [ -n "$f" ] && CUDALIB=$(dirname "$f")
        g=$(find /usr/local /opt /usr/lib -name 'libcudart.so.13*' -print -quit 2>/dev/null)
        [ -n "$g" ] && CUDALIB="$CUDALIB:$(dirname "$g")"
    fi
    export LD_LIBRARY_PATH="$PWD/build/gpu/run/lib${CUDALIB:+:$CUDALIB}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    if ldd build/gpu/run/gpu_tests build/gpu/run/libhsi_cuda.so | grep "not found"; then rc_build=1; fi
    TESTS=(./build/gpu/run/gpu_tests --require-cuda cuda)
    BENCH=./build/gpu/run/gpu_bench
fi
if [ $rc_build -ne 0 ]; then
    echo "gpu_check: the binaries are not usable (see $O/build.log / the ldd lines above)"
    tail -30 "$O/build.log" 2>/dev/null
fi

# ---- 1. the CUDA suites (make test-cuda's command)
echo "== CUDA test suites: ${TESTS[*]}"
rc_tests=1
if [ $rc_build -eq 0 ]; then
    timeout 240 "${TESTS[@]}" > "$O/tests.log" 2>&1
    rc_tests=$?
    grep -E "^Suite|Test:.*(passed|FAILED)|^ +[0-9]+\. |skipped" "$O/tests.log" | grep -v "^$" | head -80
    tail -8 "$O/tests.log"
fi
echo "tests exit status: $rc_tests"

# ---- 1b. the kernels under compute-sanitizer memcheck (out-of-bounds and
# misaligned accesses, launch errors), when the tool is there and time allows
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1 || true)
if [ $rc_build -eq 0 ] && [ -n "$SAN" ] && [ $(( $(date +%s) - t_start )) -lt 240 ]; then
    echo "== compute-sanitizer memcheck (90 s at most)"
    timeout 90 "$SAN" --tool memcheck --error-exitcode 9 "${TESTS[0]}" cuda_mem cuda_stats \
        cuda_patches cuda_layers cuda_ops cuda_model > "$O/memcheck.log" 2>&1
    echo "memcheck exit status: $? (0 clean, 9 errors found, 124 timed out)"
    grep -E "ERROR SUMMARY|Invalid|out of bounds|misaligned" "$O/memcheck.log" | sort | uniq -c | head -20
fi

# ---- 2. hsi's GPU figures
echo "== gpu_bench"
rc_bench=1
if [ $rc_build -eq 0 ]; then
    HSI_THREADS=$(nproc) OPENBLAS_NUM_THREADS=$(nproc) timeout 200 $BENCH --mib 400 --steps 20 \
        --cpu-steps 5 > "$O/gpu_bench.json" 2> "$O/gpu_bench.err"
    rc_bench=$?
    cat "$O/gpu_bench.err"
fi
echo "gpu_bench exit status: $rc_bench"

# ---- 3. PyTorch on the same card
echo "== torch_gpu.py"
PY=python3
$PY -c "import torch" 2>/dev/null || PY=/usr/bin/python3
PYTHONUNBUFFERED=1 timeout 150 $PY bench/torch_gpu.py --steps 20 > "$O/torch_gpu.json" 2> "$O/torch_gpu.err"
rc_torch=$?
tail -5 "$O/torch_gpu.err"
echo "torch_gpu exit status: $rc_torch"

# ---- summary
$PY - "$O" <<'PY' 2>&1 || true
import json, os, sys
o = sys.argv[1]
def load(n):
    try:
        return json.load(open(os.path.join(o, n)))
    except Exception as e:
        print("(%s unreadable: %s)" % (n, e))
        return {}
g, t = load("gpu_bench.json"), load("torch_gpu.json")
print("== summary")
for k in ("device", "h2d_pinned_gbps", "h2d_pageable_gbps", "device_memcpy_gbps",
          "gpu_stats_device_bsq_gbps", "gpu_stats_device_bip_gbps",
          "gpu_fused_device_bsq_in_gbps", "gpu_fused_device_bip_in_gbps",
          "gpu_fused_device_bsq_inout_gbps", "gpu_fused_device_bip_inout_gbps",
          "gpu_fused_host_to_host_gbps", "cpu_fused_gbps", "fused_gpu_cpu_max_abs_diff_rel",
          "gpu_patches_samples_per_s", "cnn2d_device_epoch_samples_per_s"):
    if k in g:
        print("  %-34s %s" % (k, g[k]))
if "device_memcpy_gbps" in g:
    for k in ("gpu_fused_device_bsq_inout_gbps", "gpu_fused_device_bip_inout_gbps"):
        if k in g:
            print("  %-34s %.0f%% of device memcpy" % (k, 100 * g[k] / g["device_memcpy_gbps"]))
if "h2d_pinned_gbps" in t:
    print("  torch h2d pinned / pageable GB/s   %.1f / %.1f" % (t["h2d_pinned_gbps"], t["h2d_pageable_gbps"]))
for m in ("cnn2d", "hybridsn"):
    a, c = g.get(m, {}), g.get(m + "_cpu", {})
    for mode in ("tf32conv", "fp32"):
        b = t.get("%s_%s" % (m, mode), {})
        if a and b:
            print("  %-8s train samples/s: hsi GPU %8.0f | torch GPU (%s) %8.0f | ratio %.2fx" %
                  (m, a["train_samples_per_s"], mode, b["train_samples_per_s"],
                   a["train_samples_per_s"] / b["train_samples_per_s"]))
    if a and c:
        print("  %-8s train samples/s: hsi GPU %8.0f | hsi CPU (%d threads) %8.0f | ratio %.1fx" %
              (m, a["train_samples_per_s"], c["threads"], c["train_samples_per_s"],
               a["train_samples_per_s"] / c["train_samples_per_s"]))
    if a:
        print("  %-8s hsi GPU loss %.4f -> %.4f (fixed batch; must fall), cudaMalloc in steady steps: %s"
              % (m, a["loss_first"], a["loss_last"], a["steady_cuda_mallocs"]))
PY
echo "== done in $(( $(date +%s) - t_start )) s: tests $rc_tests, gpu_bench $rc_bench, torch $rc_torch"
[ $rc_tests -eq 0 ] && [ $rc_bench -eq 0 ]
