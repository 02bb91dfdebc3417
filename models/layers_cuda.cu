/* layers_cuda.cu — convolution (im2col + cuBLAS sgemm), max/avg pooling,
 * global average pooling and batch norm on the GPU, float32, packed device
 * arrays (see models/layers_cuda.h). Backward passes gather (no atomics),
 * so results do not depend on scheduling. Not the engine, not cuDNN. */
#include <math.h>
#include <string.h>

#include "kernels/cuda_internal.h"
#include "models/cuda_ops.h"
#include "models/layers_cuda.h"

#define LC_THREADS 256

/* ------------------------------------------------------------ geometry */

typedef struct conv_geom {
    int64_t C, K, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW, OD, OH, OW;
    int64_t CK, OS, IS;
} conv_geom;

static void conv_geom_fill(conv_geom *g, const hsi_conv_dims *d)
{
    int o = d->nd == 3 ? 0 : -1;
    g->C = d->c, g->K = d->k;
    g->ID = o < 0 ? 1 : d->in[0], g->KD = o < 0 ? 1 : d->ker[0];
    g->SD = o < 0 ? 1 : d->stride[0], g->PD = o < 0 ? 0 : d->pad[0];
    g->OD = o < 0 ? 1 : d->out[0];
    g->IH = d->in[o + 1], g->KH = d->ker[o + 1], g->SH = d->stride[o + 1];
    g->PH = d->pad[o + 1], g->OH = d->out[o + 1];
    g->IW = d->in[o + 2], g->KW = d->ker[o + 2], g->SW = d->stride[o + 2];
    g->PW = d->pad[o + 2], g->OW = d->out[o + 2];
    g->CK = g->C * g->KD * g->KH * g->KW;
    g->OS = g->OD * g->OH * g->OW;
    g->IS = g->ID * g->IH * g->IW;
}

/* samples per workspace chunk: columns and weight-gradient parts of at most
 * 256 MiB, at least 1 */
static int64_t conv_chunk(const conv_geom *g, int64_t n)
{
    int64_t per = g->CK * g->OS + g->K * g->CK;
    int64_t c = ((int64_t)64 << 20) / (per > 0 ? per : 1);
    if (c < 1) c = 1;
    return c < n ? c : n;
}

/* workspace: the columns (chunk, CK, OS), then per-sample weight gradients
 * (chunk, K, CK) summed in a second pass */
extern "C" size_t hsi_conv_workspace_bytes_cuda(const hsi_conv_dims *d)
{
    conv_geom g;
    conv_geom_fill(&g, d);
    int64_t c = conv_chunk(&g, d->n);
    return sizeof(float) * (size_t)(c * g.CK * g.OS + c * g.K * g.CK);
}

/* dw[i] += sum over the nc per-sample gradients part[n * len + i], in order */
__global__ void sum_parts_kernel(float *dw, const float *part, int64_t len, int64_t nc)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0;
        for (int64_t n = 0; n < nc; n++) acc += part[n * len + i];
        dw[i] += (float)acc;
    }
}

/* col: (nc, CK, OS) from x samples n0.. : col[(n*CK + ck)*OS + o] */
__global__ void im2col_kernel(float *col, const float *x, conv_geom g, int64_t nc)
{
    int64_t total = nc * g.CK * g.OS;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i % g.OS, r = i / g.OS, ck = r % g.CK, n = r / g.CK;
        int64_t kw = ck % g.KW, t = ck / g.KW, kh = t % g.KH;
        t /= g.KH;
        int64_t kd = t % g.KD, c = t / g.KD;
        int64_t ow = o % g.OW, u = o / g.OW, oh = u % g.OH, od = u / g.OH;
        int64_t iz = od * g.SD - g.PD + kd, iy = oh * g.SH - g.PH + kh, ix = ow * g.SW - g.PW + kw;
        float v = 0.0f;
        if (iz >= 0 && iz < g.ID && iy >= 0 && iy < g.IH && ix >= 0 && ix < g.IW)
            v = x[(n * g.C + c) * g.IS + (iz * g.IH + iy) * g.IW + ix];
        col[i] = v;
    }
}

/* dx (nc, C, IS) += gathered dcol (nc, CK, OS) */
__global__ void col2im_kernel(float *dx, const float *dcol, conv_geom g, int64_t nc)
{
    int64_t total = nc * g.C * g.IS;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ix = i % g.IW, r = i / g.IW, iy = r % g.IH;
        r /= g.IH;
        int64_t iz = r % g.ID;
        r /= g.ID;
        int64_t c = r % g.C, n = r / g.C;
        const float *dn = dcol + n * g.CK * g.OS;
        float acc = 0.0f;
        for (int64_t kd = 0; kd < g.KD; kd++) {
            int64_t tz = iz + g.PD - kd;
            if (tz < 0 || tz % g.SD) continue;
            int64_t od = tz / g.SD;
            if (od >= g.OD) continue;
            for (int64_t kh = 0; kh < g.KH; kh++) {
                int64_t ty = iy + g.PH - kh;
                if (ty < 0 || ty % g.SH) continue;
                int64_t oh = ty / g.SH;
                if (oh >= g.OH) continue;
                for (int64_t kw = 0; kw < g.KW; kw++) {
                    int64_t tx = ix + g.PW - kw;
                    if (tx < 0 || tx % g.SW) continue;
                    int64_t ow = tx / g.SW;
                    if (ow >= g.OW) continue;
                    int64_t ck = ((c * g.KD + kd) * g.KH + kh) * g.KW + kw;
                    acc += dn[ck * g.OS + (od * g.OH + oh) * g.OW + ow];
                }
            }
        }
        dx[i] += acc;
    }
}

/* y (nc, K, OS) = b[k] */
__global__ void bias_fill_kernel(float *y, const float *b, int64_t K, int64_t OS, int64_t nc)
{
    int64_t total = nc * K * OS;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[(i / OS) % K];
}

/* Sum of v over the block (blockDim.x == LC_THREADS), fixed tree; the
 * result is valid in thread 0. sh: LC_THREADS doubles. */
__device__ double block_sum(double v, double *sh)
{
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int h = LC_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) sh[t] += sh[t + h];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* db[k] += sum over n, o of dy (N, K, OS); one block per k */
__global__ void conv_db_kernel(float *db, const float *dy, int64_t N, int64_t K, int64_t OS)
{
    __shared__ double sh[LC_THREADS];
    int64_t k = blockIdx.x;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < N * OS; i += blockDim.x) {
        int64_t n = i / OS, o = i - n * OS;
        acc += dy[(n * K + k) * OS + o];
    }
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) db[k] += (float)s;
}

hsi_status hsi_cu_conv_db(float *db, const float *dy, int64_t n, int64_t k, int64_t os, const char *what)
{
    conv_db_kernel<<<(unsigned)k, LC_THREADS, 0, hsi_cu_stream()>>>(db, dy, n, k, os);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

extern "C" hsi_status hsi_conv_forward_cuda(float *y, const float *x, const float *w,
                                            const float *b, const hsi_conv_dims *d, void *ws)
{
    const char *what = "conv forward (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    conv_geom g;
    conv_geom_fill(&g, d);
    if (g.CK * g.OS > INT32_MAX || g.K * g.OS > INT32_MAX)
        return hsi_fail(HSI_ERR_UNSUPPORTED, "%s: a sample's columns exceed cuBLAS's int sizes",
                        what);
    cublasHandle_t h;
    HSI_CU_TRY(hsi_cu_cublas(&h, what));
    int64_t N = d->n, chunk = conv_chunk(&g, N);
    float *col = (float *)ws;
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nc = N - n0 < chunk ? N - n0 : chunk;
        float *yc = y + n0 * g.K * g.OS;
        int64_t tot = nc * g.CK * g.OS;
        im2col_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
            col, x + n0 * g.C * g.IS, g, nc);
        HSI_CU_LAUNCHED("conv forward (CUDA): im2col");
        if (b) {
            bias_fill_kernel<<<hsi_cu_blocks(nc * g.K * g.OS, LC_THREADS), LC_THREADS, 0,
                               hsi_cu_stream()>>>(yc, b, g.K, g.OS, nc);
            HSI_CU_LAUNCHED("conv forward (CUDA): bias");
        }
        const float one = 1.0f, beta = b ? 1.0f : 0.0f;
        /* per sample, column-major: y_n (OS x K, ld OS) = col_n (OS x CK, ld OS) * w (CK x K, ld CK) */
        HSI_CUBLAS_RET(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.OS, (int)g.K,
                                                 (int)g.CK, &one, col, (int)g.OS, g.CK * g.OS, w,
                                                 (int)g.CK, 0, &beta, yc, (int)g.OS, g.K * g.OS,
                                                 (int)nc),
                       what);
    }
    return HSI_OK;
}

extern "C" hsi_status hsi_conv_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                             const float *x, const float *w,
                                             const hsi_conv_dims *d, void *ws)
{
    const char *what = "conv backward (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    conv_geom g;
    conv_geom_fill(&g, d);
    if (g.CK * g.OS > INT32_MAX || g.K * g.OS > INT32_MAX)
        return hsi_fail(HSI_ERR_UNSUPPORTED, "%s: a sample's columns exceed cuBLAS's int sizes",
                        what);
    cublasHandle_t h;
    HSI_CU_TRY(hsi_cu_cublas(&h, what));
    int64_t N = d->n, chunk = conv_chunk(&g, N);
    float *col = (float *)ws;
    const float one = 1.0f, zero = 0.0f;
    if (db) {
        HSI_CU_TRY(hsi_cu_conv_db(db, dy, N, g.K, g.OS, "conv backward (CUDA): bias gradient"));
    }
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nc = N - n0 < chunk ? N - n0 : chunk;
        const float *dyc = dy + n0 * g.K * g.OS;
        if (dw) {
            int64_t tot = nc * g.CK * g.OS;
            im2col_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
                col, x + n0 * g.C * g.IS, g, nc);
            HSI_CU_LAUNCHED("conv backward (CUDA): im2col");
            /* per sample: part_n (CK x K col-major, ld CK) = col_n^T (CK x OS) * dy_n (OS x K),
             * one batched call; then dw += the sum over the samples */
            float *part = col + chunk * g.CK * g.OS;
            HSI_CUBLAS_RET(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)g.CK, (int)g.K,
                                                     (int)g.OS, &one, col, (int)g.OS, g.CK * g.OS,
                                                     dyc, (int)g.OS, g.K * g.OS, &zero, part,
                                                     (int)g.CK, g.CK * g.K, (int)nc),
                           what);
            sum_parts_kernel<<<hsi_cu_blocks(g.CK * g.K, LC_THREADS), LC_THREADS, 0,
                               hsi_cu_stream()>>>(dw, part, g.CK * g.K, nc);
            HSI_CU_LAUNCHED("conv backward (CUDA): weight gradient sum");
        }
        if (dx) {
            /* dcol_n (OS x CK, ld OS) = dy_n (OS x K, ld OS) * w^T (K x CK) */
            HSI_CUBLAS_RET(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)g.OS,
                                                     (int)g.CK, (int)g.K, &one, dyc, (int)g.OS,
                                                     g.K * g.OS, w, (int)g.CK, 0, &zero, col,
                                                     (int)g.OS, g.CK * g.OS, (int)nc),
                           what);
            int64_t tot = nc * g.C * g.IS;
            col2im_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
                dx + n0 * g.C * g.IS, col, g, nc);
            HSI_CU_LAUNCHED("conv backward (CUDA): col2im");
        }
    }
    return HSI_OK;
}

/* ---------------------------------------------------------------- pooling */

typedef struct pool_geom {
    int64_t planes, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW, OD, OH, OW, IS, OS;
    int is_max;
} pool_geom;

static void pool_geom_fill(pool_geom *g, const hsi_pool_dims *d)
{
    int o = d->nd == 3 ? 0 : -1;
    g->planes = (int64_t)d->n * d->c;
    g->ID = o < 0 ? 1 : d->in[0], g->KD = o < 0 ? 1 : d->ker[0];
    g->SD = o < 0 ? 1 : d->stride[0], g->PD = o < 0 ? 0 : d->pad[0];
    g->OD = o < 0 ? 1 : d->out[0];
    g->IH = d->in[o + 1], g->KH = d->ker[o + 1], g->SH = d->stride[o + 1];
    g->PH = d->pad[o + 1], g->OH = d->out[o + 1];
    g->IW = d->in[o + 2], g->KW = d->ker[o + 2], g->SW = d->stride[o + 2];
    g->PW = d->pad[o + 2], g->OW = d->out[o + 2];
    g->IS = g->ID * g->IH * g->IW;
    g->OS = g->OD * g->OH * g->OW;
    g->is_max = d->kind == HSI_POOL_MAX;
}

__device__ __forceinline__ void pool_win(int64_t *lo, int64_t *hi, int64_t o, int64_t s, int64_t p,
                                         int64_t k, int64_t len)
{
    int64_t a = o * s - p, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > len ? len : b;
}

__global__ void pool_fwd_kernel(float *y, int32_t *argmax, const float *x, pool_geom g)
{
    int64_t total = g.planes * g.OS;
    float inv = 1.0f / (float)(g.KD * g.KH * g.KW);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i % g.OS, p = i / g.OS;
        int64_t ow = o % g.OW, t = o / g.OW, oh = t % g.OH, od = t / g.OH;
        int64_t d0, d1, h0, h1, w0, w1;
        pool_win(&d0, &d1, od, g.SD, g.PD, g.KD, g.ID);
        pool_win(&h0, &h1, oh, g.SH, g.PH, g.KH, g.IH);
        pool_win(&w0, &w1, ow, g.SW, g.PW, g.KW, g.IW);
        const float *xp = x + p * g.IS;
        if (g.is_max) {
            float m = -INFINITY;
            int64_t idx = (d0 * g.IH + h0) * g.IW + w0;
            for (int64_t zd = d0; zd < d1; zd++)
                for (int64_t zh = h0; zh < h1; zh++) {
                    int64_t r = (zd * g.IH + zh) * g.IW;
                    for (int64_t zw = w0; zw < w1; zw++) {
                        float v = xp[r + zw];
                        if (v > m || isnan(v)) m = v, idx = r + zw;
                    }
                }
            y[i] = m;
            argmax[i] = (int32_t)idx;
        } else {
            float sum = 0.0f;
            for (int64_t zd = d0; zd < d1; zd++)
                for (int64_t zh = h0; zh < h1; zh++) {
                    const float *r = xp + (zd * g.IH + zh) * g.IW;
                    for (int64_t zw = w0; zw < w1; zw++) sum += r[zw];
                }
            y[i] = sum * inv;
        }
    }
}

/* First and last output index along one axis whose window contains i. */
__device__ __forceinline__ void pool_outs(int64_t *lo, int64_t *hi, int64_t i, int64_t s,
                                          int64_t p, int64_t k, int64_t n_out)
{
    int64_t a = i + p - k + 1; /* o*s >= a */
    int64_t l = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t h = (i + p) / s;
    *lo = l;
    *hi = h < n_out - 1 ? h : n_out - 1;
}

__global__ void pool_bwd_kernel(float *dx, const float *dy, const int32_t *argmax, pool_geom g)
{
    int64_t total = g.planes * g.IS;
    float inv = 1.0f / (float)(g.KD * g.KH * g.KW);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = i % g.IS, p = i / g.IS;
        int64_t ix = q % g.IW, t = q / g.IW, iy = t % g.IH, iz = t / g.IH;
        int64_t d0, d1, h0, h1, w0, w1;
        pool_outs(&d0, &d1, iz, g.SD, g.PD, g.KD, g.OD);
        pool_outs(&h0, &h1, iy, g.SH, g.PH, g.KH, g.OH);
        pool_outs(&w0, &w1, ix, g.SW, g.PW, g.KW, g.OW);
        const float *dyp = dy + p * g.OS;
        const int32_t *ap = g.is_max ? argmax + p * g.OS : NULL;
        float acc = 0.0f;
        for (int64_t od = d0; od <= d1; od++)
            for (int64_t oh = h0; oh <= h1; oh++)
                for (int64_t ow = w0; ow <= w1; ow++) {
                    int64_t o = (od * g.OH + oh) * g.OW + ow;
                    if (g.is_max) {
                        if (ap[o] == (int32_t)q) acc += dyp[o];
                    } else {
                        acc += dyp[o] * inv;
                    }
                }
        dx[i] += acc;
    }
}

extern "C" hsi_status hsi_pool_forward_cuda(float *y, int32_t *argmax, const float *x,
                                            const hsi_pool_dims *d)
{
    HSI_CU_TRY(hsi_cuda_require("pool forward"));
    pool_geom g;
    pool_geom_fill(&g, d);
    if (g.is_max && !argmax)
        return hsi_fail(HSI_ERR_ARG, "pool forward (CUDA): max pooling needs an argmax array");
    pool_fwd_kernel<<<hsi_cu_blocks(g.planes * g.OS, LC_THREADS), LC_THREADS, 0,
                      hsi_cu_stream()>>>(y, argmax, x, g);
    HSI_CU_LAUNCHED("pool forward (CUDA)");
    return HSI_OK;
}

extern "C" hsi_status hsi_pool_backward_cuda(float *dx, const float *dy, const int32_t *argmax,
                                             const hsi_pool_dims *d)
{
    HSI_CU_TRY(hsi_cuda_require("pool backward"));
    pool_geom g;
    pool_geom_fill(&g, d);
    if (g.is_max && !argmax)
        return hsi_fail(HSI_ERR_ARG, "pool backward (CUDA): max pooling needs the argmax array");
    pool_bwd_kernel<<<hsi_cu_blocks(g.planes * g.IS, LC_THREADS), LC_THREADS, 0,
                      hsi_cu_stream()>>>(dx, dy, argmax, g);
    HSI_CU_LAUNCHED("pool backward (CUDA)");
    return HSI_OK;
}

/* ------------------------------------------------- global average pool */

/* one block per row of x (rows, s) */
__global__ void gap_fwd_kernel(float *y, const float *x, int64_t s)
{
    __shared__ double sh[LC_THREADS];
    const float *xr = x + (int64_t)blockIdx.x * s;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < s; i += blockDim.x) acc += xr[i];
    double t = block_sum(acc, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = (float)(t / (double)s);
}

__global__ void gap_bwd_kernel(float *dx, const float *dy, int64_t rows, int64_t s)
{
    float inv = 1.0f / (float)s;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * s;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] += dy[i / s] * inv;
}

extern "C" hsi_status hsi_gap_forward_cuda(float *y, const float *x, int n, int c, int64_t s)
{
    HSI_CU_TRY(hsi_cuda_require("global average pool"));
    int64_t rows = (int64_t)n * c;
    if (rows <= 0 || s <= 0) return hsi_fail(HSI_ERR_ARG, "global average pool (CUDA): empty input");
    if (rows > INT32_MAX) return hsi_fail(HSI_ERR_UNSUPPORTED, "global average pool (CUDA): too many rows");
    gap_fwd_kernel<<<(unsigned)rows, LC_THREADS, 0, hsi_cu_stream()>>>(y, x, s);
    HSI_CU_LAUNCHED("global average pool forward (CUDA)");
    return HSI_OK;
}

extern "C" hsi_status hsi_gap_backward_cuda(float *dx, const float *dy, int n, int c, int64_t s)
{
    HSI_CU_TRY(hsi_cuda_require("global average pool"));
    int64_t rows = (int64_t)n * c;
    gap_bwd_kernel<<<hsi_cu_blocks(rows * s, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
        dx, dy, rows, s);
    HSI_CU_LAUNCHED("global average pool backward (CUDA)");
    return HSI_OK;
}

/* ------------------------------------------------------------- batch norm */

/* one block per channel: statistics (training) or running ones (eval),
 * then y = x * scale + shift over the channel */
__global__ void bn_fwd_kernel(float *y, float *save_mean, float *save_invstd, float *rmean,
                              float *rvar, const float *x, const float *gamma, const float *beta,
                              int64_t n, int64_t c, int64_t s, float eps, float momentum,
                              int training)
{
    __shared__ double sh[LC_THREADS];
    __shared__ float s_scale, s_shift;
    int64_t ch = blockIdx.x, cnt = n * s;
    double count = (double)cnt;
    if (training) {
        double acc = 0;
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            int64_t r = i / s, j = i - r * s;
            acc += x[(r * c + ch) * s + j];
        }
        double m = block_sum(acc, sh) / count;
        float mf = (float)m;
        acc = 0;
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            int64_t r = i / s, j = i - r * s;
            float a = x[(r * c + ch) * s + j] - mf;
            acc += (double)(a * a);
        }
        double var = block_sum(acc, sh) / count;
        if (threadIdx.x == 0) {
            float invstd = (float)(1.0 / sqrt(var + (double)eps));
            if (save_mean) save_mean[ch] = mf;
            if (save_invstd) save_invstd[ch] = invstd;
            if (rmean && rvar) {
                double unbiased = count > 1 ? var * count / (count - 1) : var;
                rmean[ch] = (float)((1 - (double)momentum) * rmean[ch] + (double)momentum * m);
                rvar[ch] = (float)((1 - (double)momentum) * rvar[ch] + (double)momentum * unbiased);
            }
            float scale = gamma ? gamma[ch] * invstd : invstd;
            s_scale = scale;
            s_shift = (beta ? beta[ch] : 0.0f) - mf * scale;
        }
    } else if (threadIdx.x == 0) {
        float mean = rmean[ch];
        float invstd = (float)(1.0 / sqrt((double)rvar[ch] + (double)eps));
        float scale = gamma ? gamma[ch] * invstd : invstd;
        s_scale = scale;
        s_shift = (beta ? beta[ch] : 0.0f) - mean * scale;
    }
    __syncthreads();
    float sc = s_scale, sf = s_shift;
    for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
        int64_t r = i / s, j = i - r * s, k = (r * c + ch) * s + j;
        y[k] = x[k] * sc + sf;
    }
}

__global__ void bn_bwd_kernel(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *gamma, const float *save_mean,
                              const float *save_invstd, int64_t n, int64_t c, int64_t s,
                              int training)
{
    __shared__ double sh[LC_THREADS];
    int64_t ch = blockIdx.x, cnt = n * s;
    double count = (double)cnt;
    float m = save_mean[ch], is = save_invstd[ch];
    double a0 = 0, a1 = 0;
    for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
        int64_t r = i / s, j = i - r * s, k = (r * c + ch) * s + j;
        a0 += dy[k];
        a1 += (double)(dy[k] * (x[k] - m));
    }
    double sum_dy = block_sum(a0, sh), sum_dyxm = block_sum(a1, sh);
    double sum_dyxhat = sum_dyxm * (double)is;
    if (threadIdx.x == 0) {
        if (dgamma) dgamma[ch] += (float)sum_dyxhat;
        if (dbeta) dbeta[ch] += (float)sum_dy;
    }
    if (!dx) return;
    float gis = (gamma ? gamma[ch] : 1.0f) * is;
    if (training) {
        float kk = (float)(sum_dyxhat / count) * is;
        float a = gis, b = -gis * kk, e = -gis * (float)(sum_dy / count);
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            int64_t r = i / s, j = i - r * s, k = (r * c + ch) * s + j;
            dx[k] += dy[k] * a + (x[k] - m) * b + e;
        }
    } else {
        for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
            int64_t r = i / s, j = i - r * s, k = (r * c + ch) * s + j;
            dx[k] += dy[k] * gis;
        }
    }
}

extern "C" hsi_status hsi_bn_forward_cuda(float *y, float *save_mean, float *save_invstd,
                                          float *running_mean, float *running_var, const float *x,
                                          const float *gamma, const float *beta, int n, int c,
                                          int64_t s, float eps, float momentum, int training)
{
    HSI_CU_TRY(hsi_cuda_require("batch norm forward"));
    if (n < 1 || c < 1 || s < 1)
        return hsi_fail(HSI_ERR_ARG, "batch norm forward (CUDA): empty input (%d, %d, %lld)", n,
                        c, (long long)s);
    if (!training && (!running_mean || !running_var))
        return hsi_fail(HSI_ERR_ARG, "batch norm forward (CUDA): eval mode needs running statistics");
    bn_fwd_kernel<<<(unsigned)c, LC_THREADS, 0, hsi_cu_stream()>>>(
        y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta, n, c, s, eps,
        momentum, training);
    HSI_CU_LAUNCHED("batch norm forward (CUDA)");
    return HSI_OK;
}

extern "C" hsi_status hsi_bn_backward_cuda(float *dx, float *dgamma, float *dbeta, const float *dy,
                                           const float *x, const float *gamma,
                                           const float *save_mean, const float *save_invstd,
                                           int n, int c, int64_t s, int training)
{
    HSI_CU_TRY(hsi_cuda_require("batch norm backward"));
    if (n < 1 || c < 1 || s < 1)
        return hsi_fail(HSI_ERR_ARG, "batch norm backward (CUDA): empty input");
    bn_bwd_kernel<<<(unsigned)c, LC_THREADS, 0, hsi_cu_stream()>>>(
        dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, n, c, s, training);
    HSI_CU_LAUNCHED("batch norm backward (CUDA)");
    return HSI_OK;
}
