/* gpu_bench.c — the GPU figures of issue 7 in one run, as JSON lines on
 * stdout, one object per figure, printed and flushed as soon as it is
 * measured (progress on stderr): host-to-device GB/s from pinned vs
 * pageable memory; device memcpy GB/s (the card's practical bandwidth); GPU
 * statistics and fused (z-score + PCA 30) GB/s on a device cube and end to
 * end from a host cube, with the CPU fused pass on the same cube for the
 * ratio; cnn2d (batch --batch and --batch2) and HybridSN training /
 * inference samples/s on the GPU through hsi_dmodel (models/model_cuda.h:
 * the nn.c models, dropout included), plus the loss before and after the
 * timed steps on the fixed batch (it must fall) and the cudaMalloc calls in
 * the timed steps (must be 0), and the same models trained by the CPU
 * engine (all cores) for the ratio; a device-resident cnn2d epoch (patch
 * extraction on the GPU + step).
 *
 * Lines: {"<figure>": value} (value a number, string or object), a failed
 * call {"stage": "<section>", "error": "<call> failed: <message>"} after
 * which the next independent measurement runs (a sticky CUDA error fails
 * the rest, each with its own line), and last {"gpu_bench_errors": n}.
 * Exit status: 0 when every figure was measured, 1 when some call failed,
 * 2 bad option, 3 no usable device (cudaGetDeviceCount's own error, e.g. a
 * driver older than the runtime, or the CUDA plugin not loadable).
 * Not a test and not the engine. Built and run by bench/gpu_check.sh:
 *     gpu_bench [--mib 400] [--batch 128] [--batch2 1024] (0: none) [--bands 30] [--patch 11]
 *               [--classes 16] [--steps 20] [--cpu-steps 5] (0: no CPU engine run)
 *               [--cpu-only 1] (no GPU part) [--probe 1] (the device lines only)
 *               [--conv auto|gemm|cudnn] (the GPU model's convolutions; auto) */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/core.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/pca.h"
#include "kernels/stats.h"
#include "models/layers_cuda.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"
#include "pipeline/patches_cuda.h"
#include "pipeline/trainer.h"

static int g_n_errors; /* failed calls reported so far */
/* the device model's convolutions (--conv auto|gemm|cudnn): auto, as hsi's
 * commands run them */
static hsi_gpu_conv g_conv = HSI_GPU_CONV_AUTO;
static const char *g_conv_name = "auto";

/* s as a JSON string (quotes, backslashes and control bytes escaped) */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* {"stage": stage, "error": "<what> failed: <why>"} on stdout, the same on stderr */
static void report_error(const char *stage, const char *what, const char *why)
{
    char msg[2048];
    snprintf(msg, sizeof msg, "%s failed: %s", what, why && why[0] ? why : "(no message)");
    fputs("{\"stage\": ", stdout);
    json_str(stdout, stage);
    fputs(", \"error\": ", stdout);
    json_str(stdout, msg);
    fputs("}\n", stdout);
    fflush(stdout);
    fprintf(stderr, "gpu_bench: %s: %s\n", stage, msg);
    g_n_errors++;
}

/* {"<key>": <printf of fmt>}: fmt makes a JSON value (number or object) */
/* v as a JSON number (fmt), or null when it is not finite (printf's "nan"
 * is not JSON: the whole line would be lost) */
static const char *jnum(char *buf, size_t n, const char *fmt, double v)
{
    if (!isfinite(v)) snprintf(buf, n, "null");
    else snprintf(buf, n, fmt, v);
    return buf;
}

static void emit(const char *key, const char *fmt, ...)
{
    va_list ap;
    fputc('{', stdout);
    json_str(stdout, key);
    fputs(": ", stdout);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputs("}\n", stdout);
    fflush(stdout);
}

/* In a function with a `const char *stage` and a `cleanup:` label: a failed
 * call is reported as a JSON line and ends that function (its measurement),
 * not the program. */
#define CHECK(expr)                                                                               \
    do {                                                                                          \
        hsi_status s_ = (expr);                                                                   \
        if (s_ != HSI_OK) {                                                                       \
            report_error(stage, #expr, hsi_last_error());                                         \
            hsi_clear_error();                                                                    \
            goto cleanup;                                                                         \
        }                                                                                         \
    } while (0)
#define CUCHECK(expr)                                                                             \
    do {                                                                                          \
        cudaError_t e_ = (expr);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            char why_[512];                                                                       \
            snprintf(why_, sizeof why_, "%s (%s)", cudaGetErrorString(e_), cudaGetErrorName(e_)); \
            report_error(stage, #expr, why_);                                                     \
            goto cleanup;                                                                         \
        }                                                                                         \
    } while (0)
/* a host allocation that failed */
#define HCHECK(ptr)                                                                               \
    do {                                                                                          \
        if (!(ptr)) {                                                                             \
            report_error(stage, #ptr " = malloc", "out of host memory");                          \
            goto cleanup;                                                                         \
        }                                                                                         \
    } while (0)

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) /* [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-52 - 1.0);
}

static double gbps(double bytes, double s) { return bytes / s / 1e9; }

/* -------------------------------------------------------------- device */

/* The device lines; 0 when a device is usable, else 3 with the runtime's
 * own error (a driver older than the runtime is not "no device"). */
static int bench_device(void)
{
    const char *stage = "device";
    int n = 0, drv = 0, rt = 0, dev = 0, rc = 3;
    struct cudaDeviceProp prop;
    cudaDriverGetVersion(&drv); /* 0 when no driver is installed */
    cudaRuntimeGetVersion(&rt);
    emit("cuda_versions", "{\"driver\": %d, \"runtime\": %d}", drv, rt);
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        char why[512];
        snprintf(why, sizeof why, "%s (%s); CUDA driver version %d, runtime %d%s", cudaGetErrorString(e),
                 cudaGetErrorName(e), drv, rt,
                 drv == 0 ? ": no CUDA driver is loaded"
                 : drv < rt ? ": the driver is older than the runtime this program was built with"
                            : "");
        report_error(stage, "cudaGetDeviceCount", why);
        goto cleanup;
    }
    if (n == 0) {
        report_error(stage, "cudaGetDeviceCount", "the CUDA runtime reports 0 devices");
        goto cleanup;
    }
    CUCHECK(cudaGetDevice(&dev));
    CUCHECK(cudaGetDeviceProperties(&prop, dev));
    fputs("{\"device\": ", stdout);
    json_str(stdout, prop.name);
    fputs("}\n", stdout);
    emit("device_count", "%d", n);
    emit("device_memory_gib", "%.1f", (double)prop.totalGlobalMem / 1073741824.0);
    emit("compute_capability", "\"%d.%d\"", prop.major, prop.minor);
    fprintf(stderr, "device: %s (%d of them), compute capability %d.%d, driver %d, runtime %d\n",
            prop.name, n, prop.major, prop.minor, drv, rt);
    CHECK(hsi_cuda_require("gpu_bench")); /* loads the CUDA plugin */
    rc = 0;
cleanup:
    return rc;
}

/* ------------------------------------------------------------ transfers */

static double g_memcpy_gbps; /* device-to-device, read+write */

static void bench_copies(void)
{
    const char *stage = "copies";
    const char *keys[3] = {"h2d_pinned_gbps", "h2d_pageable_gbps", "device_memcpy_gbps"};
    size_t n = (size_t)256 << 20;
    void *pin = NULL, *dev = NULL, *dev2 = NULL;
    char *page = malloc(n);
    HCHECK(page);
    memset(page, 1, n);
    CUCHECK(cudaHostAlloc(&pin, n, cudaHostAllocDefault));
    memset(pin, 1, n);
    CUCHECK(cudaMalloc(&dev, n));
    CUCHECK(cudaMalloc(&dev2, n));
    for (int k = 0; k < 3; k++) {
        void *src = k == 0 ? pin : k == 1 ? (void *)page : dev2;
        enum cudaMemcpyKind kind = k < 2 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
        CUCHECK(cudaMemcpy(dev, src, n, kind)); /* warm-up */
        CUCHECK(cudaDeviceSynchronize());
        double t0 = hsi_now();
        for (int i = 0; i < 5; i++) CUCHECK(cudaMemcpyAsync(dev, src, n, kind, 0));
        CUCHECK(cudaDeviceSynchronize());
        /* device-to-device reads and writes n bytes per copy */
        double r = gbps((k == 2 ? 2.0 : 1.0) * 5.0 * (double)n, hsi_now() - t0);
        emit(keys[k], "%.2f", r);
        if (k == 2) g_memcpy_gbps = r;
        fprintf(stderr, "%s: %.1f GB/s%s\n", keys[k], r, k == 2 ? " (read+write)" : "");
    }
cleanup:
    cudaFree(dev2);
    cudaFree(dev);
    cudaFreeHost(pin);
    free(page);
}

/* The card's FP32 matrix rate: cuBLAS sgemm 8192^3 (pedantic math: no
 * TF32), best of 3 after a warm-up; 0 when it could not be measured. */
static double g_sgemm_gflops;

static void bench_sgemm(void)
{
    const char *stage = "sgemm";
    const int n = 8192;
    size_t bytes = sizeof(float) * (size_t)n * (size_t)n;
    float *a = NULL, *b = NULL, *c = NULL;
    cublasHandle_t h = NULL;
    const float one = 1.0f, zero = 0.0f;
    double best = 1e30;
    CUCHECK(cudaMalloc((void **)&a, bytes));
    CUCHECK(cudaMalloc((void **)&b, bytes));
    CUCHECK(cudaMalloc((void **)&c, bytes));
    CUCHECK(cudaMemset(a, 0x3c, bytes)); /* 0x3c3c3c3c: about 0.0115 */
    CUCHECK(cudaMemset(b, 0x3c, bytes));
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {
        report_error(stage, "cublasCreate / cublasSetMathMode", "cuBLAS error");
        goto cleanup;
    }
    for (int r = 0; r < 4; r++) {
        double t = hsi_now();
        if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n) != CUBLAS_STATUS_SUCCESS) {
            report_error(stage, "cublasSgemm", "cuBLAS error");
            goto cleanup;
        }
        CUCHECK(cudaDeviceSynchronize());
        t = hsi_now() - t;
        if (r > 0 && t < best) best = t;
    }
    g_sgemm_gflops = 2.0 * n * (double)n * n / best / 1e9;
    emit("sgemm_fp32_gflops", "%.0f", g_sgemm_gflops);
    fprintf(stderr, "sgemm FP32 (cuBLAS, no TF32) %d^3: %.0f GFLOP/s\n", n, g_sgemm_gflops);
cleanup:
    if (h) cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
}

/* ------------------------------------------------------- preprocessing */

/* A uint16 BIP cube on the host, the z-score + PCA 30 it is projected with,
 * and the same cube on the device as BSQ and as BIP. */
typedef struct fused_ctx {
    hsi_view raw, cube, sub, dcube, dbip;
    hsi_stats st;
    hsi_norm nm;
    hsi_pca pca;
    int64_t n_out; /* output floats: 30 x lines x samples */
    double in_bytes;
    float *dout, *hout; /* device output; host output of the host-to-host run */
    int have_hout;
} fused_ctx;

static void fused_free(fused_ctx *c)
{
    free(c->hout);
    hsi_cuda_free(c->dout);
    hsi_view_release(&c->dbip);
    hsi_view_release(&c->dcube);
    hsi_view_release(&c->sub);
    hsi_pca_free(&c->pca);
    hsi_norm_free(&c->nm);
    hsi_stats_free(&c->st);
    hsi_view_release(&c->cube);
    hsi_view_release(&c->raw);
}

/* 1 when the cube, the projection and the device copies are ready */
static int fused_setup(fused_ctx *c, int64_t mib)
{
    const char *stage = "fused_setup";
    int ok = 0;
    int64_t B = 200, S = 1024, L = mib * 1048576 / (B * S * 2);
    if (L < 8) L = 8;
    int64_t shape[3] = {L, S, B}; /* BIP uint16 */
    int perm[3] = {2, 0, 1};
    hsi_buffer *db = NULL;
    hsi_pca_opts po = {.n_components = 30};
    CHECK(hsi_view_alloc(&c->raw, HSI_U16, 3, shape, HSI_BUF_HOST));
    uint16_t *p = c->raw.buf->data;
    for (int64_t i = 0; i < L * S * B; i++)
        p[i] = (uint16_t)(1000 + (i % B) * 7 + ((i / B) * 2654435761u >> 22) % 500);
    CHECK(hsi_view_permute(&c->cube, &c->raw, perm));
    c->in_bytes = (double)(L * S * B * 2);
    c->n_out = 30 * L * S;
    fprintf(stderr, "fused: uint16 BIP cube %lld x %lld x %lld (%.0f MiB)\n", (long long)B,
            (long long)L, (long long)S, c->in_bytes / 1048576);
    emit("fused_cube", "[%lld, %lld, %lld]", (long long)B, (long long)L, (long long)S);
    CHECK(hsi_stats_compute(&c->st, &c->cube, NULL));
    CHECK(hsi_norm_build(&c->nm, HSI_NORM_ZSCORE, B, NULL, B, &c->st, NULL, 0, 0));
    CHECK(hsi_view_slice(&c->sub, &c->cube, 1, 0, L < 64 ? L : 64, 1)); /* fit on a slice: fast */
    CHECK(hsi_pca_fit(&c->pca, &c->sub, &c->nm, &po));
    CHECK(hsi_cuda_view_to_device(&c->dcube, &c->cube, HSI_DT_INVALID)); /* packed: becomes BSQ */
    /* keep the BIP layout on the device too: copy the raw bytes */
    CHECK(hsi_cuda_buffer(&db, (size_t)c->in_bytes));
    CHECK(hsi_cuda_upload(db->data, c->raw.buf->data, (size_t)c->in_bytes));
    CHECK(hsi_view_make(&c->dbip, db, 0, HSI_U16, 3, c->cube.shape, c->cube.strides, 0));
    CHECK(hsi_cuda_malloc((void **)&c->dout, sizeof(float) * (size_t)c->n_out));
    c->hout = malloc(sizeof(float) * (size_t)c->n_out);
    HCHECK(c->hout);
    ok = 1;
cleanup:
    hsi_buffer_release(db); /* dbip holds its own reference */
    return ok;
}

/* GPU statistics of a device cube: best of 3 after a warm-up */
static void fused_stats_gpu(fused_ctx *c, const hsi_view *dv, const char *layout)
{
    char stage[64], key[64];
    snprintf(stage, sizeof stage, "gpu_stats_%s", layout);
    hsi_stats gs = {0};
    double best = 1e30;
    CHECK(hsi_stats_compute_cuda(&gs, dv, NULL)); /* warm-up */
    hsi_stats_free(&gs);
    memset(&gs, 0, sizeof gs);
    for (int r = 0; r < 3; r++) {
        double t = hsi_now();
        CHECK(hsi_stats_compute_cuda(&gs, dv, NULL));
        t = hsi_now() - t;
        best = t < best ? t : best;
        hsi_stats_free(&gs);
        memset(&gs, 0, sizeof gs);
    }
    snprintf(key, sizeof key, "gpu_stats_device_%s_gbps", layout);
    emit(key, "%.1f", gbps(c->in_bytes, best));
    fprintf(stderr, "GPU stats, device %s cube: %.1f GB/s\n", layout, gbps(c->in_bytes, best));
cleanup:
    hsi_stats_free(&gs);
}

/* GPU fused pass, device cube -> device output: best of 3 after a warm-up */
static void fused_gpu(fused_ctx *c, const hsi_view *dv, const char *layout)
{
    char stage[64], key[64];
    snprintf(stage, sizeof stage, "gpu_fused_%s", layout);
    hsi_fused_opts fo = {.tile_lines = 0};
    double best = 1e30, out_bytes = (double)c->n_out * 4;
    CHECK(hsi_fused_run_cuda(c->dout, 1, dv, NULL, &c->pca, &fo));
    CHECK(hsi_cuda_sync());
    for (int r = 0; r < 3; r++) {
        double t = hsi_now();
        CHECK(hsi_fused_run_cuda(c->dout, 1, dv, NULL, &c->pca, &fo));
        CHECK(hsi_cuda_sync());
        t = hsi_now() - t;
        best = t < best ? t : best;
    }
    snprintf(key, sizeof key, "gpu_fused_device_%s_in_gbps", layout);
    emit(key, "%.1f", gbps(c->in_bytes, best));
    snprintf(key, sizeof key, "gpu_fused_device_%s_inout_gbps", layout);
    emit(key, "%.1f", gbps(c->in_bytes + out_bytes, best));
    fprintf(stderr, "GPU fused zscore+PCA30, device %s cube -> device: %.1f GB/s in, %.1f GB/s in+out\n",
            layout, gbps(c->in_bytes, best), gbps(c->in_bytes + out_bytes, best));
    if (g_sgemm_gflops > 0 && g_memcpy_gbps > 0) {
        /* the pass's bound: its bytes at the device copy rate or its
         * projection's multiply-adds at the sgemm rate, whichever is slower */
        int64_t npix = c->cube.shape[1] * c->cube.shape[2];
        double flops = 2.0 * (double)c->cube.shape[0] * (double)c->pca.n_components * (double)npix;
        double tb = fmax((c->in_bytes + out_bytes) / (g_memcpy_gbps * 1e9), flops / (g_sgemm_gflops * 1e9));
        snprintf(key, sizeof key, "gpu_fused_device_%s_of_bound", layout);
        emit(key, "%.3f", tb / best);
        fprintf(stderr, "  bound %.3f ms (copy %.3f ms, FP32 projection %.3f ms): %.0f%% of it\n", tb * 1e3,
                (c->in_bytes + out_bytes) / (g_memcpy_gbps * 1e9) * 1e3, flops / (g_sgemm_gflops * 1e9) * 1e3,
                100 * tb / best);
    }
cleanup:
    return;
}

/* end to end from the host cube (BIP, pageable) into host memory */
static void fused_host(fused_ctx *c)
{
    const char *stage = "gpu_fused_host_to_host";
    hsi_fused_opts fo = {.tile_lines = 0};
    float *norm_out = NULL;
    char streams_env[32] = "";
    /* the first call page-locks its staging blocks (and faults the output's
     * pages in); later calls reuse the cached blocks: best of 3 */
    double t0 = hsi_now(), best = 1e30;
    CHECK(hsi_fused_run_cuda(c->hout, 0, &c->cube, NULL, &c->pca, &fo));
    t0 = hsi_now() - t0;
    for (int r = 0; r < 3; r++) {
        double t = hsi_now();
        CHECK(hsi_fused_run_cuda(c->hout, 0, &c->cube, NULL, &c->pca, &fo));
        t = hsi_now() - t;
        best = t < best ? t : best;
    }
    c->have_hout = 1;
    emit("gpu_fused_host_to_host_first_gbps", "%.2f", gbps(c->in_bytes, t0));
    emit("gpu_fused_host_to_host_gbps", "%.2f", gbps(c->in_bytes, best));
    fprintf(stderr, "GPU fused, host cube -> host output (tiles via pinned staging): %.2f GB/s (first call %.2f)\n",
            gbps(c->in_bytes, best), gbps(c->in_bytes, t0));
    /* the tile stream on one stream (HSI_CUDA_TILE_STREAMS=1) and on three,
     * alternated over 3 rounds: PCA 30 (small output) and the normalisation
     * alone (float output twice the uint16 input: the copies out weigh) */
    norm_out = malloc(sizeof(float) * (size_t)(c->nm.n_bands * c->cube.shape[1] * c->cube.shape[2]));
    HCHECK(norm_out);
    if (getenv("HSI_CUDA_TILE_STREAMS")) /* the caller's setting, put back after */
        snprintf(streams_env, sizeof streams_env, "%s", getenv("HSI_CUDA_TILE_STREAMS"));
    for (int pc = 1; pc >= 0; pc--) {
        double g[2][3], lo = 1e30, hi = 0, sum[2] = {0, 0};
        /* the normalisation's output pages and staging blocks are new (PCA's
         * were warmed above): one call untimed, or round 0's one-stream run
         * would pay for them */
        if (!pc) CHECK(hsi_fused_run_cuda(norm_out, 0, &c->cube, &c->nm, NULL, &fo));
        for (int r = 0; r < 3; r++)
            for (int m = 0; m < 2; m++) {
                if (m == 0) setenv("HSI_CUDA_TILE_STREAMS", "1", 1);
                else unsetenv("HSI_CUDA_TILE_STREAMS");
                double t = hsi_now();
                CHECK(hsi_fused_run_cuda(pc ? c->hout : norm_out, 0, &c->cube, pc ? NULL : &c->nm,
                                         pc ? &c->pca : NULL, &fo));
                g[m][r] = gbps(c->in_bytes, hsi_now() - t);
                sum[m] += g[m][r];
            }
        for (int r = 0; r < 3; r++) {
            double q = g[1][r] / g[0][r];
            lo = q < lo ? q : lo, hi = q > hi ? q : hi;
        }
        emit(pc ? "gpu_fused_host_to_host_streams" : "gpu_norm_host_to_host_streams",
             "{\"one_stream_gbps\": %.2f, \"three_streams_gbps\": %.2f, \"ratio\": %.3f, "
             "\"ratio_min\": %.3f, \"ratio_max\": %.3f}", sum[0] / 3, sum[1] / 3, sum[1] / sum[0], lo, hi);
        fprintf(stderr, "GPU %s, host cube -> host output: one stream %.2f GB/s, three %.2f GB/s (%.2fx, "
                        "rounds %.2f-%.2fx)\n", pc ? "fused PCA 30" : "normalisation only",
                sum[0] / 3, sum[1] / 3, sum[1] / sum[0], lo, hi);
    }
cleanup:
    if (streams_env[0]) setenv("HSI_CUDA_TILE_STREAMS", streams_env, 1);
    else unsetenv("HSI_CUDA_TILE_STREAMS");
    free(norm_out);
    return;
}

/* the CPU fused pass on the same cube, all threads; the GPU difference
 * when the host-to-host run produced an output */
static void fused_cpu(fused_ctx *c)
{
    const char *stage = "cpu_fused";
    float *cout = malloc(sizeof(float) * (size_t)c->n_out);
    HCHECK(cout);
    double t = 1e30;
    for (int r = 0; r < 3; r++) { /* best of 3, as the GPU's */
        double t1 = hsi_now();
        CHECK(hsi_fused_run(cout, &c->cube, NULL, &c->pca, NULL));
        t1 = hsi_now() - t1;
        t = t1 < t ? t1 : t;
    }
    emit("cpu_fused_gbps", "%.2f", gbps(c->in_bytes, t));
    fprintf(stderr, "CPU fused (same cube, all threads): %.2f GB/s\n", gbps(c->in_bytes, t));
    if (c->have_hout) {
        double maxd = 0, maxv = 0;
        char q[32];
        for (int64_t i = 0; i < c->n_out; i++) {
            double dd = fabs((double)cout[i] - c->hout[i]);
            if (!(dd <= maxd)) maxd = dd; /* a NaN sticks (fmax would skip it) */
            maxv = fmax(maxv, fabs((double)cout[i]));
        }
        /* null: a NaN in either output */
        emit("fused_gpu_cpu_max_abs_diff_rel", "%s", jnum(q, sizeof q, "%.3g", maxd / (maxv > 0 ? maxv : 1)));
        fprintf(stderr, "GPU vs CPU fused max diff %.3g of max %.3g\n", maxd, maxv);
    }
cleanup:
    free(cout);
}

static void bench_fused(int64_t mib)
{
    fused_ctx c;
    memset(&c, 0, sizeof c);
    if (fused_setup(&c, mib)) {
        fused_stats_gpu(&c, &c.dcube, "bsq");
        fused_gpu(&c, &c.dcube, "bsq");
        fused_stats_gpu(&c, &c.dbip, "bip");
        fused_gpu(&c, &c.dbip, "bip");
        fused_host(&c);
        fused_cpu(&c);
    }
    fused_free(&c);
}

/* ------------------------------------------------------------- training */

/* The model of nn.c trained on the GPU through hsi_dmodel (models/model_cuda.h):
 * what `hsi train --device cuda` runs per batch, dropout included. key: the
 * figure's name ("cnn2d", "cnn2d_b1024", "hybridsn"), also the stage. */
static void bench_model(const char *key, const char *name, int batch, int bands, int patch,
                        int classes, int steps)
{
    const char *stage = key;
    hsi_module *m = NULL;
    hsi_dmodel *d = NULL, *dg = NULL;
    float *h = NULL, *x = NULL;
    int32_t *t = NULL, *y = NULL;
    int64_t xs[5], nx = 1;
    hsi_optim_config cfg;
    hsi_cuda_mem_stats a, b;
    double loss0 = 0, loss1 = 0, tt, ti;
    char l0[32], l1[32];
    const float *logits = NULL;
    CHECK(hsi_model_create(&m, name, bands, patch, classes, HSI_F32, 1));
    int nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    CHECK(hsi_dmodel_create(&d, m, nd - 1, xs + 1, batch, &cfg, 1));
    CHECK(hsi_dmodel_set_conv(d, g_conv));
    for (int i = 0; i < nd; i++) nx *= xs[i];
    h = malloc(sizeof(float) * (size_t)nx);
    t = malloc(sizeof(int32_t) * (size_t)batch);
    HCHECK(h);
    HCHECK(t);
    for (int64_t i = 0; i < nx; i++) h[i] = frand();
    for (int i = 0; i < batch; i++) t[i] = i % classes;
    CHECK(hsi_cuda_malloc((void **)&x, sizeof(float) * (size_t)nx));
    CHECK(hsi_cuda_upload(x, h, sizeof(float) * (size_t)nx));
    CHECK(hsi_cuda_malloc((void **)&y, sizeof(int32_t) * (size_t)batch));
    CHECK(hsi_cuda_upload(y, t, sizeof(int32_t) * (size_t)batch));
    CHECK(hsi_dmodel_train_step(d, x, y, batch));
    CHECK(hsi_dmodel_loss(d, &loss0));
    for (int i = 0; i < 2; i++) CHECK(hsi_dmodel_train_step(d, x, y, batch)); /* warm-up */
    CHECK(hsi_cuda_sync());
    hsi_cuda_mem_get(&a);
    tt = hsi_now();
    for (int i = 0; i < steps; i++) CHECK(hsi_dmodel_train_step(d, x, y, batch));
    CHECK(hsi_cuda_sync());
    tt = hsi_now() - tt;
    hsi_cuda_mem_get(&b);
    CHECK(hsi_dmodel_loss(d, &loss1));
    double train_sps = (double)batch * steps / tt;
    long long mallocs = (long long)(b.n_cuda_malloc - a.n_cuda_malloc);
    /* the training figures first: an inference failure keeps them */
    emit(key,
         "{\"batch\": %d, \"train_samples_per_s\": %.1f, \"ms_per_step\": %.3f, "
         "\"loss_first\": %s, \"loss_last\": %s, \"steady_cuda_mallocs\": %lld, \"conv\": \"%s\"}",
         batch, train_sps, 1e3 * tt / steps, jnum(l0, sizeof l0, "%.5f", loss0),
         jnum(l1, sizeof l1, "%.5f", loss1), mallocs, hsi_dmodel_conv_name(d));
    fprintf(stderr, "%s (batch %d) on the GPU (conv: %s): train %.0f samples/s (%.2f ms/step); loss %.4f -> %.4f; "
                    "cudaMalloc calls in the timed steps: %lld\n",
            name, batch, hsi_dmodel_conv_name(d), train_sps, 1e3 * tt / steps, loss0, loss1, mallocs);
    CHECK(hsi_dmodel_predict(d, &logits, x, batch));
    CHECK(hsi_cuda_sync());
    ti = hsi_now();
    for (int i = 0; i < steps; i++) CHECK(hsi_dmodel_predict(d, &logits, x, batch));
    CHECK(hsi_cuda_sync());
    ti = hsi_now() - ti;
    char ikey[96];
    snprintf(ikey, sizeof ikey, "%s_infer", key);
    emit(ikey, "{\"batch\": %d, \"infer_samples_per_s\": %.1f}", batch, (double)batch * steps / ti);
    fprintf(stderr, "%s (batch %d) on the GPU: infer %.0f samples/s\n", name, batch,
            (double)batch * steps / ti);
    /* the same steps as one CUDA Graph each (hsi_dmodel_set_graph) on a second
     * copy, timed in alternation with the one-by-one copy: 3 rounds */
    CHECK(hsi_dmodel_create(&dg, m, nd - 1, xs + 1, batch, &cfg, 1));
    CHECK(hsi_dmodel_set_conv(dg, g_conv));
    CHECK(hsi_dmodel_set_graph(dg, 1));
    for (int i = 0; i < 3; i++) { /* measure, capture */
        CHECK(hsi_dmodel_train_step(dg, x, y, batch));
        CHECK(hsi_dmodel_predict(dg, &logits, x, batch));
    }
    for (int train = 1; train >= 0; train--) {
        double r_plain[3], r_graph[3], lo = 1e30, hi = 0, gs = 0, ps = 0;
        for (int r = 0; r < 3; r++) {
            for (int v = 0; v < 2; v++) {
                hsi_dmodel *dv = v ? dg : d;
                CHECK(hsi_cuda_sync());
                double t0 = hsi_now();
                for (int i = 0; i < steps; i++)
                    CHECK(train ? hsi_dmodel_train_step(dv, x, y, batch) : hsi_dmodel_predict(dv, &logits, x, batch));
                CHECK(hsi_cuda_sync());
                (v ? r_graph : r_plain)[r] = (double)batch * steps / (hsi_now() - t0);
            }
            double q = r_graph[r] / r_plain[r];
            lo = q < lo ? q : lo, hi = q > hi ? q : hi;
            gs += r_graph[r], ps += r_plain[r];
        }
        snprintf(ikey, sizeof ikey, "%s%s_graph", key, train ? "" : "_infer");
        emit(ikey, "{\"batch\": %d, \"samples_per_s\": %.1f, \"plain_samples_per_s\": %.1f, "
                   "\"ratio\": %.3f, \"ratio_min\": %.3f, \"ratio_max\": %.3f, \"graph_launches\": %lld}",
             batch, gs / 3, ps / 3, gs / ps, lo, hi, (long long)hsi_dmodel_graph_launches(dg, train));
        fprintf(stderr, "%s (batch %d) on the GPU: %s as a CUDA Graph %.0f samples/s vs %.0f one by "
                        "one (%.2fx, rounds %.2f-%.2fx)\n", name, batch, train ? "train" : "infer",
                gs / 3, ps / 3, gs / ps, lo, hi);
    }
cleanup:
    hsi_dmodel_free(dg);
    hsi_cuda_free(y);
    hsi_cuda_free(x);
    free(t);
    free(h);
    hsi_dmodel_free(d);
    hsi_module_free(m);
}

/* A device-resident epoch: a float32 (K, 512, 512) cube on the device, the
 * pixels and labels of the epoch uploaded once, and per batch
 * hsi_patches_extract_cuda (mirror padding, flips and rotations) then
 * hsi_dmodel_train_step: no host transfer or synchronisation per batch. */
static void bench_pipeline(int batch, int bands, int patch, int classes, int steps)
{
    const char *stage = "cnn2d_device_epoch";
    int64_t L = 512, S = 512, nc = (int64_t)bands * L * S, n = (int64_t)batch * steps;
    int64_t shape[3] = {bands, L, S}, xs[5];
    float *h = NULL, *x = NULL;
    int64_t *px = NULL, *dpx = NULL;
    int32_t *lab = NULL, *dlab = NULL;
    hsi_buffer *cb = NULL;
    hsi_view cube = {0};
    hsi_module *m = NULL;
    hsi_dmodel *d = NULL;
    hsi_optim_config cfg;
    hsi_augment aug = {.flips = 1, .rotations = 1};
    double t, tp, loss = 0;
    h = malloc(sizeof(float) * (size_t)nc);
    px = malloc(sizeof(int64_t) * (size_t)n);
    lab = malloc(sizeof(int32_t) * (size_t)n);
    HCHECK(h);
    HCHECK(px);
    HCHECK(lab);
    for (int64_t i = 0; i < nc; i++) h[i] = frand();
    CHECK(hsi_cuda_buffer(&cb, sizeof(float) * (size_t)nc));
    CHECK(hsi_cuda_upload(cb->data, h, sizeof(float) * (size_t)nc));
    CHECK(hsi_view_make_packed(&cube, cb, 0, HSI_F32, 3, shape));
    for (int64_t i = 0; i < n; i++) {
        px[i] = (int64_t)((frand() + 1) * 0.5 * (double)(L * S - 1));
        lab[i] = (int32_t)(i % classes);
    }
    CHECK(hsi_cuda_malloc((void **)&dpx, sizeof(int64_t) * (size_t)n));
    CHECK(hsi_cuda_malloc((void **)&dlab, sizeof(int32_t) * (size_t)n));
    CHECK(hsi_cuda_upload(dpx, px, sizeof(int64_t) * (size_t)n));
    CHECK(hsi_cuda_upload(dlab, lab, sizeof(int32_t) * (size_t)n));
    CHECK(hsi_model_create(&m, "cnn2d", bands, patch, classes, HSI_F32, 1));
    int nd = hsi_model_input_shape("cnn2d", batch, bands, patch, xs);
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    CHECK(hsi_dmodel_create(&d, m, nd - 1, xs + 1, batch, &cfg, 1));
    CHECK(hsi_dmodel_set_conv(d, g_conv));
    CHECK(hsi_cuda_malloc((void **)&x, sizeof(float) * (size_t)batch * bands * patch * patch));
    for (int i = 0; i < 2; i++) { /* warm-up */
        CHECK(hsi_patches_extract_cuda(x, &cube, patch, HSI_PAD_MIRROR, &aug, dpx, batch, 1, i));
        CHECK(hsi_dmodel_train_step(d, x, dlab, batch));
    }
    CHECK(hsi_cuda_sync());
    t = hsi_now();
    for (int i = 0; i < steps; i++) {
        CHECK(hsi_patches_extract_cuda(x, &cube, patch, HSI_PAD_MIRROR, &aug, dpx + (int64_t)i * batch,
                                       batch, 1, (uint64_t)i));
        CHECK(hsi_dmodel_train_step(d, x, dlab + (int64_t)i * batch, batch));
    }
    CHECK(hsi_cuda_sync());
    t = hsi_now() - t;
    CHECK(hsi_dmodel_loss(d, &loss));
    emit("cnn2d_device_epoch_samples_per_s", "%.1f", (double)n / t);
    fprintf(stderr, "cnn2d device-resident epoch (patches + step): %.0f samples/s; last loss %.4f\n",
            (double)n / t, loss);
    /* patch extraction alone */
    tp = hsi_now();
    for (int i = 0; i < steps; i++)
        CHECK(hsi_patches_extract_cuda(x, &cube, patch, HSI_PAD_MIRROR, &aug, dpx + (int64_t)i * batch,
                                       batch, 1, (uint64_t)i));
    CHECK(hsi_cuda_sync());
    tp = hsi_now() - tp;
    emit("gpu_patches_samples_per_s", "%.1f", (double)n / tp);
    fprintf(stderr, "GPU patch extraction alone: %.0f samples/s\n", (double)n / tp);
cleanup:
    hsi_cuda_free(x);
    hsi_dmodel_free(d);
    hsi_module_free(m);
    hsi_cuda_free(dlab);
    hsi_cuda_free(dpx);
    hsi_view_release(&cube);
    hsi_buffer_release(cb);
    free(lab);
    free(px);
    free(h);
}

/* The CPU engine's step (as `hsi bench model`): same model, batch, AdamW. */
static void bench_model_cpu(const char *name, int batch, int bands, int patch, int classes, int steps)
{
    char stage[64];
    snprintf(stage, sizeof stage, "%s_cpu", name);
    hsi_module *m = NULL;
    hsi_optim *o = NULL;
    hsi_graph *g = NULL;
    hsi_tensor *x = NULL, *y = NULL;
    hsi_optim_config cfg;
    int64_t xs[5], ys[1] = {batch};
    double t = 0;
    hsi_manual_seed(1);
    CHECK(hsi_model_create(&m, name, bands, patch, classes, HSI_F32, 1));
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    CHECK(hsi_optim_new(&o, &cfg, m));
    CHECK(hsi_graph_new(&g));
    int nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    CHECK(hsi_tensor_new(&x, HSI_F32, nd, xs, 0));
    CHECK(hsi_tensor_new(&y, HSI_I64, 1, ys, 0));
    float *xp = hsi_tensor_ptr(x);
    for (int64_t i = 0; i < hsi_tensor_count(x); i++) xp[i] = frand();
    int64_t *yp = hsi_tensor_ptr(y);
    for (int i = 0; i < batch; i++) yp[i] = i % classes;
    for (int s = 0; s < 2 + steps; s++) {
        double t0 = hsi_now(), loss = 0;
        hsi_graph_reset(g);
        CHECK(hsi_train_step(m, o, g, x, y, NULL, &loss, NULL, NULL));
        if (s >= 2) t += hsi_now() - t0;
    }
    double sps = (double)batch * steps / t;
    /* the engine's threads: HSI_THREADS, else every core (its BLAS calls are single-threaded) */
    const char *ht = getenv("HSI_THREADS");
    int n_threads = ht && atoi(ht) > 0 ? atoi(ht) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "%s on the CPU engine (%d threads, batch %d): train %.0f samples/s\n", name,
            n_threads, batch, sps);
    emit(stage, "{\"batch\": %d, \"train_samples_per_s\": %.1f, \"threads\": %d}", batch, sps,
         n_threads);
cleanup:
    hsi_tensor_free(y);
    hsi_tensor_free(x);
    hsi_graph_free(g);
    hsi_optim_free(o);
    hsi_module_free(m);
}

int main(int argc, char **argv)
{
    int64_t mib = 400;
    int batch = 128, batch2 = 1024, bands = 30, patch = 11, classes = 16, steps = 20;
    int cpu_steps = 5, cpu_only = 0, probe = 0;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "gpu_bench: option %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--conv")) { /* a name, not an integer */
            if (hsi_conv_option(argv[i + 1], HSI_DEVICE_CUDA, NULL, &g_conv) != HSI_OK) {
                fprintf(stderr, "gpu_bench: %s\n", hsi_last_error());
                return 2;
            }
            g_conv_name = argv[i + 1];
            continue;
        }
        char *end = NULL;
        long v = strtol(argv[i + 1], &end, 10);
        if (!end || *end || end == argv[i + 1]) {
            fprintf(stderr, "gpu_bench: %s expects an integer, found '%s'\n", argv[i], argv[i + 1]);
            return 2;
        }
        if (!strcmp(argv[i], "--mib")) mib = v;
        else if (!strcmp(argv[i], "--batch")) batch = (int)v;
        else if (!strcmp(argv[i], "--batch2")) batch2 = (int)v;
        else if (!strcmp(argv[i], "--bands")) bands = (int)v;
        else if (!strcmp(argv[i], "--patch")) patch = (int)v;
        else if (!strcmp(argv[i], "--classes")) classes = (int)v;
        else if (!strcmp(argv[i], "--steps")) steps = (int)v;
        else if (!strcmp(argv[i], "--cpu-steps")) cpu_steps = (int)v;
        else if (!strcmp(argv[i], "--cpu-only")) cpu_only = (int)v;
        else if (!strcmp(argv[i], "--probe")) probe = (int)v;
        else {
            fprintf(stderr, "gpu_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (batch <= 0 || batch2 < 0 || steps <= 0 || cpu_steps < 0 || mib <= 0 || bands <= 0 ||
        patch <= 0 || classes <= 0) {
        fprintf(stderr, "gpu_bench: --batch, --steps, --mib, --bands, --patch, --classes must be > 0; "
                        "--batch2 and --cpu-steps >= 0\n");
        return 2;
    }
    emit("train_config", "{\"batch\": %d, \"batch2\": %d, \"bands\": %d, \"patch\": %d, \"classes\": %d, "
                         "\"steps\": %d, \"cpu_steps\": %d, \"conv\": \"%s\"}",
         batch, batch2, bands, patch, classes, steps, cpu_steps, g_conv_name);
    if (cpu_only) { /* the CPU engine part alone (checks this program without a GPU) */
        bench_model_cpu("cnn2d", batch, bands, patch, classes, cpu_steps > 0 ? cpu_steps : 1);
        bench_model_cpu("hybridsn", batch, bands, patch, classes, cpu_steps > 0 ? cpu_steps : 1);
        emit("gpu_bench_errors", "%d", g_n_errors);
        return g_n_errors ? 1 : 0;
    }
    int rc = bench_device();
    if (rc != 0 || probe) {
        emit("gpu_bench_errors", "%d", g_n_errors);
        return rc;
    }
    /* most wanted first: what a timeout cuts off is the end */
    bench_copies();
    bench_sgemm();
    bench_model("cnn2d", "cnn2d", batch, bands, patch, classes, steps);
    if (batch2 > 0) {
        char key[32];
        snprintf(key, sizeof key, "cnn2d_b%d", batch2);
        bench_model(key, "cnn2d", batch2, bands, patch, classes, steps);
    }
    bench_model("hybridsn", "hybridsn", batch, bands, patch, classes, steps);
    bench_fused(mib);
    bench_pipeline(batch, bands, patch, classes, steps);
    if (cpu_steps > 0) {
        bench_model_cpu("cnn2d", batch, bands, patch, classes, cpu_steps);
        bench_model_cpu("hybridsn", batch, bands, patch, classes, cpu_steps);
    }
    emit("gpu_bench_errors", "%d", g_n_errors);
    return g_n_errors ? 1 : 0;
}
