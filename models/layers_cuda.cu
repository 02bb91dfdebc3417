/* layers_cuda.cu — convolution (im2col + cuBLAS sgemm), max/avg pooling,
 * global average pooling and batch norm on the GPU, float32, packed device
 * arrays (see models/layers_cuda.h). Backward passes gather (no atomics),
 * so results do not depend on scheduling. Not the engine, not cuDNN. */
#include <math.h>
#include <string.h>

#include "kernels/cuda_internal.h"
#include "kernels/fastdiv.h"
#include "models/cuda_index.h"
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
 * 256 MiB, at least 1; at most HSI_CUDA_CONV_CHUNK when set (read once: so
 * that the device suites reach several chunks on small batches) */
static int64_t conv_chunk(const conv_geom *g, int64_t n)
{
    static int64_t cap = -1;
    if (cap < 0) {
        const char *e = getenv("HSI_CUDA_CONV_CHUNK");
        cap = e && atoll(e) > 0 ? atoll(e) : 0;
    }
    int64_t per = g->CK * g->OS + g->K * g->CK;
    int64_t c = ((int64_t)64 << 20) / (per > 0 ? per : 1);
    if (c < 1) c = 1;
    if (cap > 0 && c > cap) c = cap;
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

/* The same two in 32 bits with fastdivs (models/cuda_index.h), for
 * chunks of fewer than 2^31 elements: the 64-bit divisions above cost more
 * than the elements' memory traffic. */
__global__ void im2col_fd_kernel(float *col, const float *x, const __grid_constant__ hsi_im2col_geom g,
                                 uint32_t total)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int64_t src = hsi_im2col_src(&g, i);
        col[i] = src < 0 ? 0.0f : x[src];
    }
}

__global__ void col2im_fd_kernel(float *dx, const float *dcol, const __grid_constant__ hsi_im2col_geom g,
                                 uint32_t total)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        dx[i] += hsi_col2im_sum(&g, dcol, i);
}

/* col (nc, CK, OS) from the nc samples at x */
static hsi_status im2col(float *col, const float *x, const conv_geom *g, const hsi_conv_dims *d,
                         int64_t nc, const char *what)
{
    hsi_im2col_geom fg;
    int64_t tot = nc * g->CK * g->OS;
    if (hsi_im2col_geom_make(&fg, d, nc))
        im2col_fd_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
            col, x, fg, (uint32_t)tot);
    else
        im2col_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(col, x, *g, nc);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

/* dx (nc, C, IS) += the columns dcol (nc, CK, OS) gathered */
static hsi_status col2im(float *dx, const float *dcol, const conv_geom *g, const hsi_conv_dims *d,
                         int64_t nc, const char *what)
{
    hsi_im2col_geom fg;
    int64_t tot = nc * g->C * g->IS;
    if (hsi_im2col_geom_make(&fg, d, nc))
        col2im_fd_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
            dx, dcol, fg, (uint32_t)tot);
    else
        col2im_kernel<<<hsi_cu_blocks(tot, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(dx, dcol, *g, nc);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
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

/* Per-channel sums of (N, C, S) arrays over many blocks. One block per
 * channel (conv_db_kernel, bn_fwd_kernel, bn_bwd_kernel) leaves most of a
 * large GPU idle (C = 8..128 blocks) and divides in 64 bits per element;
 * the bias gradient and batch norm use these instead: they split each channel's
 * N * S elements into `parts` ranges, one block each (grid parts x C), sum
 * them in double in a fixed order, and a second kernel adds the parts of a
 * channel in order: the same bits on every run. Flat indices split into
 * (sample, position) with a fastdiv, so the arrays must hold fewer than
 * 2^31 elements (else the one-block-per-channel kernels run). */
/* the second sum: of squares (batch norm forward), of dy * (x - mean)
 * (its backward), none (the bias gradient) */
enum { CS_SUM_SQ = 0, CS_DY_XM = 1, CS_SUM = 2 };

template <int MODE>
__global__ void chan_parts_kernel(double2 *part, const float *a, const float *b, const float *mean,
                                  uint32_t c, uint32_t s, hsi_fastdiv sdiv, uint32_t cnt, uint32_t len)
{
    __shared__ double sh[LC_THREADS];
    uint32_t ch = blockIdx.y, p = blockIdx.x;
    uint32_t i0 = p * len, i1 = i0 >= cnt ? i0 : cnt - i0 < len ? cnt : i0 + len;
    float m = MODE == CS_DY_XM ? mean[ch] : 0.0f;
    double s0 = 0, s1 = 0;
    for (uint32_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        uint32_t r = hsi_fastdiv_q(sdiv, i);
        size_t k = ((size_t)r * c + ch) * s + (i - r * s);
        float v = a[k];
        s0 += v;
        if (MODE == CS_SUM_SQ) s1 += (double)v * v;
        else if (MODE == CS_DY_XM) s1 += (double)(v * (b[k] - m));
    }
    s0 = block_sum(s0, sh);
    if (MODE != CS_SUM) s1 = block_sum(s1, sh);
    if (threadIdx.x == 0) part[(size_t)ch * gridDim.x + p] = make_double2(s0, s1);
}

/* 1 when (n, c, s) takes the split kernels: fewer than 2^31 elements, and
 * channels within the grid's y limit */
static int bn_split(int64_t n, int64_t c, int64_t s)
{
    return hsi_index32_fits(n * c * s) && c <= 65535;
}

/* Blocks per channel: about 1024 blocks in all, at least 1024 elements
 * each, at most 1024 per channel. */
static int chan_parts(int64_t cnt, int64_t c)
{
    int64_t p = 1024 / c, by_size = cnt / 1024;
    if (p > by_size) p = by_size;
    if (p > 1024) p = 1024;
    return p < 1 ? 1 : (int)p;
}

/* part (c * parts double2) from a, b over (n, c, s): the MODE sums */
template <int MODE>
static hsi_status chan_sums(double2 *part, int parts, const float *a, const float *b,
                            const float *mean, int64_t n, int64_t c, int64_t s, const char *what)
{
    uint32_t cnt = (uint32_t)(n * s), len = (uint32_t)((cnt + parts - 1) / parts);
    dim3 grid((unsigned)parts, (unsigned)c);
    chan_parts_kernel<MODE><<<grid, LC_THREADS, 0, hsi_cu_stream()>>>(
        part, a, b, mean, (uint32_t)c, (uint32_t)s, hsi_fastdiv_make((uint32_t)s), cnt, len);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

/* the status of the launches just queued */
static hsi_status launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? HSI_OK : hsi_fail(HSI_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
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

/* db[k] += the k-th channel's sum of the parts */
__global__ void chan_db_kernel(float *db, const double2 *part, int parts, int k)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= k) return;
    double acc = 0;
    for (int p = 0; p < parts; p++) acc += part[(size_t)ch * parts + p].x;
    db[ch] += (float)acc;
}

hsi_status hsi_cu_conv_db(float *db, const float *dy, int64_t n, int64_t k, int64_t os, const char *what)
{
    if (!bn_split(n, k, os)) {
        conv_db_kernel<<<(unsigned)k, LC_THREADS, 0, hsi_cu_stream()>>>(db, dy, n, k, os);
        HSI_CU_LAUNCHED(what);
        return HSI_OK;
    }
    hsi_status st = HSI_OK;
    void *part = NULL;
    int parts = chan_parts(n * os, k);
    HSI_CU_TRY(hsi_cuda_malloc(&part, sizeof(double2) * (size_t)(k * parts)));
    st = chan_sums<CS_SUM>((double2 *)part, parts, dy, NULL, NULL, n, k, os, what);
    if (st == HSI_OK) {
        chan_db_kernel<<<(unsigned)((k + 127) / 128), 128, 0, hsi_cu_stream()>>>(db, (const double2 *)part,
                                                                              parts, (int)k);
        st = launched(what);
    }
    hsi_cuda_free(part);
    return st;
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
        HSI_CU_TRY(im2col(col, x + n0 * g.C * g.IS, &g, d, nc, "conv forward (CUDA): im2col"));
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
            HSI_CU_TRY(im2col(col, x + n0 * g.C * g.IS, &g, d, nc, "conv backward (CUDA): im2col"));
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
            HSI_CU_TRY(col2im(dx + n0 * g.C * g.IS, col, &g, d, nc, "conv backward (CUDA): col2im"));
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

/* The same two in 32 bits with fastdivs (models/cuda_index.h), for arrays
 * of fewer than 2^31 elements; the same sums in the same order. */
__global__ void pool_fwd_fd_kernel(float *y, int32_t *argmax, const float *x,
                                   const __grid_constant__ hsi_pool_geom32 g, uint32_t total, int is_max)
{
    float inv = 1.0f / (float)((int64_t)g.KD * g.KH * g.KW);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int32_t lo[3], hi[3];
        const float *xp = x + (int64_t)hsi_pool_window(&g, i, lo, hi) * g.IS;
        if (is_max) {
            float m = -INFINITY;
            int32_t idx = (lo[0] * g.IH + lo[1]) * g.IW + lo[2];
            for (int32_t zd = lo[0]; zd < hi[0]; zd++)
                for (int32_t zh = lo[1]; zh < hi[1]; zh++) {
                    int32_t r = (zd * g.IH + zh) * g.IW;
                    for (int32_t zw = lo[2]; zw < hi[2]; zw++) {
                        float v = xp[r + zw];
                        if (v > m || isnan(v)) m = v, idx = r + zw;
                    }
                }
            y[i] = m;
            argmax[i] = idx;
        } else {
            float sum = 0.0f;
            for (int32_t zd = lo[0]; zd < hi[0]; zd++)
                for (int32_t zh = lo[1]; zh < hi[1]; zh++) {
                    const float *r = xp + (zd * g.IH + zh) * g.IW;
                    for (int32_t zw = lo[2]; zw < hi[2]; zw++) sum += r[zw];
                }
            y[i] = sum * inv;
        }
    }
}

__global__ void pool_bwd_fd_kernel(float *dx, const float *dy, const int32_t *argmax,
                                   const __grid_constant__ hsi_pool_geom32 g, uint32_t total, int is_max)
{
    float inv = 1.0f / (float)((int64_t)g.KD * g.KH * g.KW);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int32_t q, lo[3], hi[3];
        uint32_t p = hsi_pool_outs(&g, i, &q, lo, hi);
        const float *dyp = dy + (int64_t)p * g.OS;
        const int32_t *ap = is_max ? argmax + (int64_t)p * g.OS : NULL;
        float acc = 0.0f;
        for (int32_t od = lo[0]; od <= hi[0]; od++)
            for (int32_t oh = lo[1]; oh <= hi[1]; oh++)
                for (int32_t ow = lo[2]; ow <= hi[2]; ow++) {
                    int32_t o = (od * g.OH + oh) * g.OW + ow;
                    if (is_max) {
                        if (ap[o] == q) acc += dyp[o];
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
    hsi_pool_geom32 g32;
    if (hsi_pool_geom32_make(&g32, d))
        pool_fwd_fd_kernel<<<hsi_cu_blocks(g.planes * g.OS, LC_THREADS), LC_THREADS, 0,
                             hsi_cu_stream()>>>(y, argmax, x, g32, (uint32_t)(g.planes * g.OS), g.is_max);
    else
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
    hsi_pool_geom32 g32;
    if (hsi_pool_geom32_make(&g32, d))
        pool_bwd_fd_kernel<<<hsi_cu_blocks(g.planes * g.IS, LC_THREADS), LC_THREADS, 0,
                             hsi_cu_stream()>>>(dx, dy, argmax, g32, (uint32_t)(g.planes * g.IS), g.is_max);
    else
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

/* Short rows (s below GAP_WARP_MAX): one warp per row, the row's sum in
 * double over the lanes then a fixed shuffle tree; a block per row left
 * most of its 256 threads idle on cnn2d's 5x5 maps. */
#define GAP_WARP_MAX 2048
__global__ void gap_fwd_warp_kernel(float *y, const float *x, int64_t rows, int64_t s)
{
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
        const float *xr = x + row * s;
        double acc = 0;
        for (int64_t i = lane; i < s; i += 32) acc += xr[i];
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (lane == 0) y[row] = (float)(acc / (double)s);
    }
}

/* dx (rows, s) += dy[row] / s, the row by a fastdiv (fewer than 2^31 elements) */
__global__ void gap_bwd_fd_kernel(float *dx, const float *dy, hsi_fastdiv sd, uint32_t total, float inv)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
        dx[i] += dy[hsi_fastdiv_q(sd, i)] * inv;
}

extern "C" hsi_status hsi_gap_forward_cuda(float *y, const float *x, int n, int c, int64_t s)
{
    HSI_CU_TRY(hsi_cuda_require("global average pool"));
    int64_t rows = (int64_t)n * c;
    if (rows <= 0 || s <= 0) return hsi_fail(HSI_ERR_ARG, "global average pool (CUDA): empty input");
    if (rows > INT32_MAX) return hsi_fail(HSI_ERR_UNSUPPORTED, "global average pool (CUDA): too many rows");
    if (s < GAP_WARP_MAX)
        gap_fwd_warp_kernel<<<hsi_cu_blocks(rows * 32, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
            y, x, rows, s);
    else
        gap_fwd_kernel<<<(unsigned)rows, LC_THREADS, 0, hsi_cu_stream()>>>(y, x, s);
    HSI_CU_LAUNCHED("global average pool forward (CUDA)");
    return HSI_OK;
}

extern "C" hsi_status hsi_gap_backward_cuda(float *dx, const float *dy, int n, int c, int64_t s)
{
    HSI_CU_TRY(hsi_cuda_require("global average pool"));
    int64_t rows = (int64_t)n * c;
    if (rows <= 0 || s <= 0) return hsi_fail(HSI_ERR_ARG, "global average pool backward (CUDA): empty input");
    if (hsi_index32_fits(rows * s))
        gap_bwd_fd_kernel<<<hsi_cu_blocks(rows * s, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
            dx, dy, hsi_fastdiv_make((uint32_t)s), (uint32_t)(rows * s), 1.0f / (float)s);
    else
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

/* training: the statistics from the parts (mean, biased variance), saved
 * and folded into the running ones; eval: the running ones. coef[ch] =
 * (scale, shift) with y = x * scale + shift. One thread per channel. */
__global__ void bn_fwd_coef_kernel(float2 *coef, float *save_mean, float *save_invstd, float *rmean,
                                   float *rvar, const double2 *part, int parts, const float *gamma,
                                   const float *beta, int c, double count, float eps, float momentum,
                                   int training)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float mean, invstd;
    if (training) {
        double s0 = 0, s1 = 0;
        for (int p = 0; p < parts; p++) {
            double2 v = part[(size_t)ch * parts + p];
            s0 += v.x;
            s1 += v.y;
        }
        double m = s0 / count, var = s1 / count - m * m;
        if (var < 0) var = 0;
        mean = (float)m;
        invstd = (float)(1.0 / sqrt(var + (double)eps));
        if (save_mean) save_mean[ch] = mean;
        if (save_invstd) save_invstd[ch] = invstd;
        if (rmean && rvar) {
            double unbiased = count > 1 ? var * count / (count - 1) : var;
            rmean[ch] = (float)((1 - (double)momentum) * rmean[ch] + (double)momentum * m);
            rvar[ch] = (float)((1 - (double)momentum) * rvar[ch] + (double)momentum * unbiased);
        }
    } else {
        mean = rmean[ch];
        invstd = (float)(1.0 / sqrt((double)rvar[ch] + (double)eps));
    }
    float scale = gamma ? gamma[ch] * invstd : invstd;
    coef[ch] = make_float2(scale, (beta ? beta[ch] : 0.0f) - mean * scale);
}

/* y = x * coef[ch].x + coef[ch].y over (N, C, S), flat */
__global__ void bn_apply_kernel(float *y, const float *x, const float2 *coef, hsi_fastdiv sdiv,
                                hsi_fastdiv cdiv, uint32_t total)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t row = hsi_fastdiv_q(sdiv, i);
        float2 k = coef[row - hsi_fastdiv_q(cdiv, row) * cdiv.d];
        y[i] = x[i] * k.x + k.y;
    }
}

/* backward: dgamma, dbeta += the channel's sums; coef[ch] = (a, b, e, mean)
 * with dx += dy * a + (x - mean) * b + e (training) or dy * a (eval) */
__global__ void bn_bwd_coef_kernel(float4 *coef, float *dgamma, float *dbeta, const double2 *part,
                                   int parts, const float *gamma, const float *save_mean,
                                   const float *save_invstd, int c, double count, int training)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    double sum_dy = 0, sum_dyxm = 0;
    for (int p = 0; p < parts; p++) {
        double2 v = part[(size_t)ch * parts + p];
        sum_dy += v.x;
        sum_dyxm += v.y;
    }
    float m = save_mean[ch], is = save_invstd[ch];
    double sum_dyxhat = sum_dyxm * (double)is;
    if (dgamma) dgamma[ch] += (float)sum_dyxhat;
    if (dbeta) dbeta[ch] += (float)sum_dy;
    float gis = (gamma ? gamma[ch] : 1.0f) * is;
    if (training) {
        float kk = (float)(sum_dyxhat / count) * is;
        coef[ch] = make_float4(gis, -gis * kk, -gis * (float)(sum_dy / count), m);
    } else {
        coef[ch] = make_float4(gis, 0.0f, 0.0f, m);
    }
}

template <int TRAINING>
__global__ void bn_bwd_apply_kernel(float *dx, const float *dy, const float *x, const float4 *coef,
                                    hsi_fastdiv sdiv, hsi_fastdiv cdiv, uint32_t total)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t row = hsi_fastdiv_q(sdiv, i);
        float4 k = coef[row - hsi_fastdiv_q(cdiv, row) * cdiv.d];
        if (TRAINING) dx[i] += dy[i] * k.x + (x[i] - k.w) * k.y + k.z;
        else dx[i] += dy[i] * k.x;
    }
}

extern "C" hsi_status hsi_bn_forward_cuda(float *y, float *save_mean, float *save_invstd,
                                          float *running_mean, float *running_var, const float *x,
                                          const float *gamma, const float *beta, int n, int c,
                                          int64_t s, float eps, float momentum, int training)
{
    hsi_status st = HSI_OK;
    void *scratch = NULL;
    HSI_CU_TRY(hsi_cuda_require("batch norm forward"));
    if (n < 1 || c < 1 || s < 1)
        return hsi_fail(HSI_ERR_ARG, "batch norm forward (CUDA): empty input (%d, %d, %lld)", n,
                        c, (long long)s);
    if (!training && (!running_mean || !running_var))
        return hsi_fail(HSI_ERR_ARG, "batch norm forward (CUDA): eval mode needs running statistics");
    if (!bn_split(n, c, s)) {
        bn_fwd_kernel<<<(unsigned)c, LC_THREADS, 0, hsi_cu_stream()>>>(
            y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta, n, c, s, eps,
            momentum, training);
        HSI_CU_LAUNCHED("batch norm forward (CUDA)");
        return HSI_OK;
    }
    int parts = training ? chan_parts((int64_t)n * s, c) : 0;
    size_t part_off = (sizeof(float2) * (size_t)c + 15) / 16 * 16;
    uint32_t total = (uint32_t)((int64_t)n * c * s);
    HSI_CU_TRY(hsi_cuda_malloc(&scratch, part_off + sizeof(double2) * (size_t)c * (size_t)parts));
    float2 *coef = (float2 *)scratch;
    double2 *part = (double2 *)((char *)scratch + part_off);
    if (training &&
        (st = chan_sums<CS_SUM_SQ>(part, parts, x, NULL, NULL, n, c, s,
                                   "batch norm forward (CUDA), sums")) != HSI_OK)
        goto cleanup;
    bn_fwd_coef_kernel<<<(unsigned)((c + 127) / 128), 128, 0, hsi_cu_stream()>>>(
        coef, save_mean, save_invstd, running_mean, running_var, part, parts, gamma, beta, c,
        (double)n * (double)s, eps, momentum, training);
    bn_apply_kernel<<<hsi_cu_blocks(total, LC_THREADS), LC_THREADS, 0, hsi_cu_stream()>>>(
        y, x, coef, hsi_fastdiv_make((uint32_t)s), hsi_fastdiv_make((uint32_t)c), total);
    st = launched("batch norm forward (CUDA)");
cleanup:
    hsi_cuda_free(scratch); /* stream-ordered: reused only after the work queued above */
    return st;
}

extern "C" hsi_status hsi_bn_backward_cuda(float *dx, float *dgamma, float *dbeta, const float *dy,
                                           const float *x, const float *gamma,
                                           const float *save_mean, const float *save_invstd,
                                           int n, int c, int64_t s, int training)
{
    hsi_status st = HSI_OK;
    void *scratch = NULL;
    HSI_CU_TRY(hsi_cuda_require("batch norm backward"));
    if (n < 1 || c < 1 || s < 1)
        return hsi_fail(HSI_ERR_ARG, "batch norm backward (CUDA): empty input");
    if (!bn_split(n, c, s)) {
        bn_bwd_kernel<<<(unsigned)c, LC_THREADS, 0, hsi_cu_stream()>>>(
            dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, n, c, s, training);
        HSI_CU_LAUNCHED("batch norm backward (CUDA)");
        return HSI_OK;
    }
    int parts = chan_parts((int64_t)n * s, c);
    size_t part_off = (sizeof(float4) * (size_t)c + 15) / 16 * 16;
    uint32_t total = (uint32_t)((int64_t)n * c * s);
    hsi_fastdiv sd = hsi_fastdiv_make((uint32_t)s), cd = hsi_fastdiv_make((uint32_t)c);
    unsigned blocks = hsi_cu_blocks(total, LC_THREADS);
    HSI_CU_TRY(hsi_cuda_malloc(&scratch, part_off + sizeof(double2) * (size_t)c * (size_t)parts));
    float4 *coef = (float4 *)scratch;
    double2 *part = (double2 *)((char *)scratch + part_off);
    if ((st = chan_sums<CS_DY_XM>(part, parts, dy, x, save_mean, n, c, s,
                                  "batch norm backward (CUDA), sums")) != HSI_OK)
        goto cleanup;
    bn_bwd_coef_kernel<<<(unsigned)((c + 127) / 128), 128, 0, hsi_cu_stream()>>>(
        coef, dgamma, dbeta, part, parts, gamma, save_mean, save_invstd, c, (double)n * (double)s,
        training);
    if (dx && training)
        bn_bwd_apply_kernel<1><<<blocks, LC_THREADS, 0, hsi_cu_stream()>>>(dx, dy, x, coef, sd, cd, total);
    else if (dx)
        bn_bwd_apply_kernel<0><<<blocks, LC_THREADS, 0, hsi_cu_stream()>>>(dx, dy, x, coef, sd, cd, total);
    st = launched("batch norm backward (CUDA)");
cleanup:
    hsi_cuda_free(scratch);
    return st;
}
