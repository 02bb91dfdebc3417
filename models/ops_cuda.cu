/* ops_cuda.cu — ReLU, linear (cuBLAS), softmax cross-entropy and the fused
 * Adam/AdamW update on the GPU, float32, packed device arrays (see
 * models/layers_cuda.h). The loss stays on the device: nothing here reads a
 * value back to the host. Not the engine's graph code. */
#include <math.h>
#include <string.h>

#include "kernels/cuda_internal.h"
#include "models/cuda_ops.h"
#include "models/layers_cuda.h"

#define OC_THREADS 256

static uint64_t oc_mix64_host(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ ReLU */

__global__ void relu_fwd_kernel(float *y, const float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_bwd_kernel(float *dx, const float *dy, const float *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
}

extern "C" hsi_status hsi_relu_forward_cuda(float *y, const float *x, int64_t n)
{
    HSI_CU_TRY(hsi_cuda_require("relu"));
    if (n <= 0) return HSI_OK;
    relu_fwd_kernel<<<hsi_cu_blocks(n, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(y, x, n);
    HSI_CU_LAUNCHED("relu forward (CUDA)");
    return HSI_OK;
}

extern "C" hsi_status hsi_relu_backward_cuda(float *dx, const float *dy, const float *y, int64_t n)
{
    HSI_CU_TRY(hsi_cuda_require("relu"));
    if (n <= 0) return HSI_OK;
    relu_bwd_kernel<<<hsi_cu_blocks(n, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(dx, dy, y, n);
    HSI_CU_LAUNCHED("relu backward (CUDA)");
    return HSI_OK;
}

/* --------------------------------------------------------------- dropout */

__device__ __forceinline__ uint64_t oc_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* key: the mixed seed, or with dkey the kernel mixes dkey->dropout_key + add */
__global__ void dropout_fwd_kernel(float *y, float *mask, const float *x, int64_t n, double p,
                                   float keep_scale, uint64_t key, const hsi_step_scalars *dkey,
                                   uint64_t add)
{
    if (dkey) key = oc_mix64(dkey->dropout_key + add);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        double u = (double)(oc_mix64(key + (uint64_t)i * 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
        float m = u < p ? 0.0f : keep_scale;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

__global__ void dropout_bwd_kernel(float *dx, const float *dy, const float *mask, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dx[i] += dy[i] * mask[i];
}

static hsi_status dropout_fwd(float *y, float *mask, const float *x, int64_t n, double p,
                              uint64_t seed, const hsi_step_scalars *dkey, uint64_t add)
{
    HSI_CU_TRY(hsi_cuda_require("dropout"));
    if (!(p >= 0 && p < 1))
        return hsi_fail(HSI_ERR_ARG, "dropout (CUDA): p must be in [0, 1) (found %g)", p);
    if (n <= 0) return HSI_OK;
    dropout_fwd_kernel<<<hsi_cu_blocks(n, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(
        y, mask, x, n, p, (float)(1.0 / (1.0 - p)), oc_mix64_host(seed), dkey, add);
    HSI_CU_LAUNCHED("dropout forward (CUDA)");
    return HSI_OK;
}

extern "C" hsi_status hsi_dropout_forward_cuda(float *y, float *mask, const float *x, int64_t n,
                                               double p, uint64_t seed)
{
    return dropout_fwd(y, mask, x, n, p, seed, NULL, 0);
}

extern "C" hsi_status hsi_dropout_forward_dev_cuda(float *y, float *mask, const float *x, int64_t n,
                                                   double p, const hsi_step_scalars *dev, uint64_t add)
{
    if (!dev) return hsi_fail(HSI_ERR_ARG, "dropout (CUDA): no device step values");
    return dropout_fwd(y, mask, x, n, p, 0, dev, add);
}

extern "C" hsi_status hsi_dropout_backward_cuda(float *dx, const float *dy, const float *mask,
                                                int64_t n)
{
    HSI_CU_TRY(hsi_cuda_require("dropout"));
    if (n <= 0) return HSI_OK;
    dropout_bwd_kernel<<<hsi_cu_blocks(n, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(dx, dy,
                                                                                        mask, n);
    HSI_CU_LAUNCHED("dropout backward (CUDA)");
    return HSI_OK;
}

/* ---------------------------------------------------------------- linear */

__global__ void rows_fill_kernel(float *y, const float *b, int64_t n, int64_t out)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * out;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % out];
}

/* db[j] += sum_i dy[i*out + j], summed in double, one thread per j */
__global__ void col_sum_kernel(float *db, const float *dy, int64_t n, int64_t out)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < out;
         j += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += dy[i * out + j];
        db[j] += (float)acc;
    }
}

extern "C" hsi_status hsi_linear_forward_cuda(float *y, const float *x, const float *w,
                                              const float *b, int n, int in, int out)
{
    const char *what = "linear forward (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    if (n < 1 || in < 1 || out < 1) return hsi_fail(HSI_ERR_ARG, "%s: empty shape", what);
    cublasHandle_t h;
    HSI_CU_TRY(hsi_cu_cublas(&h, what));
    if (b) {
        rows_fill_kernel<<<hsi_cu_blocks((int64_t)n * out, OC_THREADS), OC_THREADS, 0,
                           hsi_cu_stream()>>>(y, b, n, out);
        HSI_CU_LAUNCHED("linear forward (CUDA): bias");
    }
    const float one = 1.0f, beta = b ? 1.0f : 0.0f;
    /* column-major y^T (out x N, ld out) = w^T... : w (in x out, ld in)^T * x (in x N, ld in) */
    HSI_CUBLAS_RET(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x, in, &beta,
                               y, out),
                   what);
    return HSI_OK;
}

extern "C" hsi_status hsi_linear_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                               const float *x, const float *w, int n, int in,
                                               int out)
{
    const char *what = "linear backward (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    cublasHandle_t h;
    HSI_CU_TRY(hsi_cu_cublas(&h, what));
    const float one = 1.0f;
    /* dx^T (in x N, ld in) += w (in x out, ld in) * dy^T (out x N, ld out) */
    if (dx)
        HSI_CUBLAS_RET(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, in, dy, out,
                                   &one, dx, in),
                       what);
    /* dw^T (in x out, ld in) += x^T (in x N, ld in) * dy (N x out) */
    if (dw)
        HSI_CUBLAS_RET(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dy, out,
                                   &one, dw, in),
                       what);
    if (db) {
        col_sum_kernel<<<hsi_cu_blocks(out, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(db, dy, n,
                                                                                         out);
        HSI_CU_LAUNCHED("linear backward (CUDA): bias");
    }
    return HSI_OK;
}

/* --------------------------------------------------------- cross-entropy */

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_down_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return __shfl_sync(0xffffffffu, v, 0);
}

/* One warp per row: p = softmax(z); rowloss[i], roww[i] = the row's terms of
 * the weighted sum and of the denominator (0, 0 for ignored rows). */
__global__ void ce_fwd_kernel(float *p, double *rowloss, double *roww, const float *z,
                              const int32_t *tgt, const float *w, int64_t n, int64_t c, double eps,
                              int64_t ignore_index)
{
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
        const float *zr = z + i * c;
        float *pr = p + i * c;
        float mx = -INFINITY;
        for (int64_t j = lane; j < c; j += 32) mx = zr[j] > mx ? zr[j] : mx;
        mx = warp_max(mx);
        double s = 0;
        for (int64_t j = lane; j < c; j += 32) {
            float e = expf(zr[j] - mx);
            pr[j] = e;
            s += e;
        }
        s = warp_sum(s);
        float inv = (float)(1.0 / s);
        for (int64_t j = lane; j < c; j += 32) pr[j] *= inv;
        int64_t y = tgt[i];
        double lse = (double)mx + log(s);
        double smooth = 0;
        if (eps > 0) {
            for (int64_t j = lane; j < c; j += 32) smooth += (w ? (double)w[j] : 1.0) * (lse - zr[j]);
            smooth = warp_sum(smooth);
        }
        if (lane == 0) {
            if (y == ignore_index) {
                rowloss[i] = 0;
                roww[i] = 0;
            } else if (y < 0 || y >= c) {
                rowloss[i] = NAN; /* the CPU refuses such a target; here it poisons the loss */
                roww[i] = 0;
            } else {
                double wy = w ? (double)w[y] : 1.0;
                double nll = lse - (double)zr[y];
                rowloss[i] = (1 - eps) * wy * nll + eps / (double)c * smooth;
                roww[i] = wy;
            }
        }
    }
}

/* One block: loss = sum rowloss / sum roww, in a fixed order. */
__global__ void ce_reduce_kernel(float *loss, float *wsum, const double *rowloss, const double *roww,
                                 int64_t n)
{
    __shared__ double sa[OC_THREADS], sb[OC_THREADS];
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) a += rowloss[i], b += roww[i];
    int t = threadIdx.x;
    sa[t] = a, sb[t] = b;
    __syncthreads();
    for (int h = OC_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) sa[t] += sa[t + h], sb[t] += sb[t + h];
        __syncthreads();
    }
    if (t == 0) {
        *loss = (float)(sa[0] / sb[0]); /* NaN when every sample is ignored, like PyTorch */
        *wsum = (float)sb[0];
    }
}

/* One warp per row: dz += g/W * (qsum p - q). */
__global__ void ce_bwd_kernel(float *dz, const float *dloss, const float *wsum, const float *p,
                              const int32_t *tgt, const float *w, int64_t n, int64_t c, double eps,
                              int64_t ignore_index)
{
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    double scale = (dloss ? (double)*dloss : 1.0) / (double)*wsum;
    double sw = (double)c;
    if (w) {
        sw = 0;
        for (int64_t j = lane; j < c; j += 32) sw += w[j];
        sw = warp_sum(sw);
    }
    for (int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
        int64_t y = tgt[i];
        if (y == ignore_index || y < 0 || y >= c) continue;
        const float *pr = p + i * c;
        float *dr = dz + i * c;
        double wy = w ? (double)w[y] : 1.0;
        double qsum = (1 - eps) * wy + eps / (double)c * sw;
        for (int64_t j = lane; j < c; j += 32) {
            double q = eps / (double)c * (w ? (double)w[j] : 1.0);
            if (j == y) q += (1 - eps) * wy;
            dr[j] += (float)(scale * (qsum * (double)pr[j] - q));
        }
    }
}

extern "C" hsi_status hsi_cross_entropy_forward_cuda(float *loss, float *wsum, float *p,
                                                     const float *z, const int32_t *target,
                                                     const float *weight, int64_t n, int64_t c,
                                                     double eps, int64_t ignore_index)
{
    const char *what = "cross-entropy forward (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    if (n < 1 || c < 1) return hsi_fail(HSI_ERR_ARG, "%s: empty logits (%lld, %lld)", what,
                                        (long long)n, (long long)c);
    if (!(eps >= 0 && eps <= 1))
        return hsi_fail(HSI_ERR_ARG, "%s: label smoothing must be in [0, 1] (found %g)", what, eps);
    void *rows = NULL;
    HSI_CU_TRY(hsi_cuda_malloc(&rows, sizeof(double) * 2 * (size_t)n));
    double *rowloss = (double *)rows, *roww = rowloss + n;
    ce_fwd_kernel<<<hsi_cu_blocks(n * 32, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(
        p, rowloss, roww, z, target, weight, n, c, eps, ignore_index);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        ce_reduce_kernel<<<1, OC_THREADS, 0, hsi_cu_stream()>>>(loss, wsum, rowloss, roww, n);
        e = cudaGetLastError();
    }
    hsi_cuda_free(rows); /* reused only by later work on this stream */
    if (e != cudaSuccess) return hsi_fail(HSI_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
    return HSI_OK;
}

extern "C" hsi_status hsi_cross_entropy_backward_cuda(float *dz, const float *dloss,
                                                      const float *wsum, const float *p,
                                                      const int32_t *target, const float *weight,
                                                      int64_t n, int64_t c, double eps,
                                                      int64_t ignore_index)
{
    const char *what = "cross-entropy backward (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    if (n < 1 || c < 1) return hsi_fail(HSI_ERR_ARG, "%s: empty logits", what);
    ce_bwd_kernel<<<hsi_cu_blocks(n * 32, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(
        dz, dloss, wsum, p, target, weight, n, c, eps, ignore_index);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

/* ----------------------------------------------------------------- Adam */

/* ADAM_BODY(float) of optim.c, element by element; with f, the factors
 * (step_size, bc2s, decay) are read from the device */
__global__ void adam_kernel(float *p, const float *g, float *m, float *v, int64_t n, float b1,
                            float b2, float omb1, float omb2, float wd, float eps, float step_size,
                            float bc2s, float decay, int decoupled, const hsi_step_scalars *f)
{
    if (f) {
        step_size = f->adam[0];
        bc2s = f->adam[1];
        decay = f->adam[2];
    }
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        float pk = p[k], gi = g[k];
        if (decoupled)
            pk = pk * decay;
        else if (wd != 0.0f)
            gi = gi + wd * pk;
        float mk = m[k] * b1 + omb1 * gi;
        float vk = v[k] * b2 + omb2 * (gi * gi);
        float denom = sqrtf(vk) / bc2s + eps;
        p[k] = pk - step_size * (mk / denom);
        m[k] = mk;
        v[k] = vk;
    }
}

/* step: the host's factors; else dev's */
static hsi_status adam_step(float *p, const float *g, float *m, float *v, int64_t n,
                            const hsi_optim_config *c, int64_t step, const hsi_step_scalars *dev)
{
    const char *what = "Adam step (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    if (!c || (c->kind != HSI_OPT_ADAM && c->kind != HSI_OPT_ADAMW))
        return hsi_fail(HSI_ERR_ARG, "%s: the config is not Adam or AdamW", what);
    if (!dev && step < 1)
        return hsi_fail(HSI_ERR_ARG, "%s: step must be >= 1 (found %lld)", what, (long long)step);
    if (n <= 0) return HSI_OK;
    float f[3] = {0, 0, 0};
    if (!dev) hsi_adam_factors(f, c, step);
    adam_kernel<<<hsi_cu_blocks(n, OC_THREADS), OC_THREADS, 0, hsi_cu_stream()>>>(
        p, g, m, v, n, (float)c->beta1, (float)c->beta2, (float)(1 - c->beta1),
        (float)(1 - c->beta2), (float)c->weight_decay, (float)c->eps, f[0], f[1], f[2],
        c->kind == HSI_OPT_ADAMW, dev);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

extern "C" hsi_status hsi_adam_step_cuda(float *p, const float *g, float *m, float *v, int64_t n,
                                         const hsi_optim_config *c, int64_t step)
{
    return adam_step(p, g, m, v, n, c, step, NULL);
}

extern "C" hsi_status hsi_adam_step_dev_cuda(float *p, const float *g, float *m, float *v,
                                             int64_t n, const hsi_optim_config *c,
                                             const hsi_step_scalars *dev)
{
    if (!dev) return hsi_fail(HSI_ERR_ARG, "Adam step (CUDA): no device step values");
    return adam_step(p, g, m, v, n, c, 0, dev);
}

/* ------------------------------------------------------ per-step values */

__global__ void step_scalars_kernel(hsi_step_scalars *dev, hsi_step_scalars s) { *dev = s; }

extern "C" hsi_status hsi_step_scalars_set_cuda(hsi_step_scalars *dev, const hsi_step_scalars *s)
{
    HSI_CU_TRY(hsi_cuda_require("training step values"));
    step_scalars_kernel<<<1, 1, 0, hsi_cu_stream()>>>(dev, *s);
    HSI_CU_LAUNCHED("training step values (CUDA)");
    return HSI_OK;
}

/* ------------------------------------------------------ the plugin table */

/* This layer's part of the plugin's table (see cuda_ops.h). */
static hsi_cuda_model_ops make_ops(void)
{
    hsi_cuda_model_ops t;
    memset(&t, 0, sizeof t);
    t.conv_workspace_bytes = hsi_conv_workspace_bytes_cuda;
    t.conv_forward = hsi_conv_forward_cuda;
    t.conv_backward = hsi_conv_backward_cuda;
    t.pool_forward = hsi_pool_forward_cuda;
    t.pool_backward = hsi_pool_backward_cuda;
    t.gap_forward = hsi_gap_forward_cuda;
    t.gap_backward = hsi_gap_backward_cuda;
    t.bn_forward = hsi_bn_forward_cuda;
    t.bn_backward = hsi_bn_backward_cuda;
    t.relu_forward = hsi_relu_forward_cuda;
    t.relu_backward = hsi_relu_backward_cuda;
    t.linear_forward = hsi_linear_forward_cuda;
    t.linear_backward = hsi_linear_backward_cuda;
    t.dropout_forward = hsi_dropout_forward_cuda;
    t.dropout_backward = hsi_dropout_backward_cuda;
    t.cross_entropy_forward = hsi_cross_entropy_forward_cuda;
    t.cross_entropy_backward = hsi_cross_entropy_backward_cuda;
    t.adam_step = hsi_adam_step_cuda;
    t.step_scalars_set = hsi_step_scalars_set_cuda;
    t.dropout_forward_dev = hsi_dropout_forward_dev_cuda;
    t.adam_step_dev = hsi_adam_step_dev_cuda;
    t.conv_cudnn_available = hsi_conv_cudnn_available;
    t.conv_forward_cudnn = hsi_conv_forward_cudnn;
    t.conv_backward_cudnn = hsi_conv_backward_cudnn;
    t.bn_cudnn_available = hsi_bn_cudnn_available;
    t.bn_forward_cudnn = hsi_bn_forward_cudnn;
    t.bn_backward_cudnn = hsi_bn_backward_cudnn;
    return t;
}

extern "C" const hsi_cuda_model_ops *hsi_cu_model_ops(void)
{
    static const hsi_cuda_model_ops ops = make_ops(); /* thread-safe static init */
    return &ops;
}
