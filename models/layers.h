/* layers.h — the layer kernels of the CNN: convolution (2-D/3-D), max/average
 * pooling, global average pooling and batch norm, forward and backward, in
 * float and double, over PACKED row-major arrays. Not tensors, not a graph:
 * no views, no allocation inside (scratch memory is passed in); the autograd
 * engine (models/) wraps these as graph nodes.
 *
 * Conventions: forward functions OVERWRITE y (and argmax / save_mean /
 * save_invstd / running statistics as documented). All backward functions
 * ACCUMULATE (+=) into every gradient they produce (dx, dw, db, dgamma, dbeta);
 * pass NULL for a gradient that is not needed. Dims structs are filled by the
 * *_dims_init functions, which validate them; kernels trust a filled struct. */
#ifndef HSI_LAYERS_H
#define HSI_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ convolution */

typedef struct hsi_conv_dims {
    int nd;                 /* 2 or 3 spatial dims */
    int n, c, k;            /* batch, in channels, out channels */
    int in[3], ker[3], stride[3], pad[3], out[3]; /* (D,)H,W; for nd=2 only [0],[1] are used */
} hsi_conv_dims;

/* Fills out[] = (in + 2 pad - ker) / stride + 1; HSI_ERR_ARG when any out < 1
 * (or any size/stride is not positive, a pad is negative, or nd is not 2/3).
 * in, ker, stride, pad: nd ints each, ordered (D,)H,W. */
hsi_status hsi_conv_dims_init(hsi_conv_dims *d, int nd, int n, int c, int k, const int *in,
                              const int *ker, const int *stride, const int *pad);
/* Bytes of scratch memory `ws` the forward and backward of d need for
 * elements of elem_size bytes (4 or 8); 64-byte alignment is best. */
size_t hsi_conv_workspace_bytes(const hsi_conv_dims *d, size_t elem_size);

/* x: (N, C, [D,] H, W); w: (K, C, [kD,] kH, kW); b: (K) or NULL; y: (N, K, [oD,] oH, oW);
 * all packed row-major. Forward overwrites y. Backward accumulates into dx
 * (shape of x), dw (shape of w) and db (K), each optional (NULL). dy has the
 * shape of y. ws: hsi_conv_workspace_bytes(d, sizeof element) bytes. */
void hsi_conv_forward_f32(float *y, const float *x, const float *w, const float *b,
                          const hsi_conv_dims *d, void *ws);
void hsi_conv_backward_f32(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, const hsi_conv_dims *d, void *ws);
void hsi_conv_forward_f64(double *y, const double *x, const double *w, const double *b,
                          const hsi_conv_dims *d, void *ws);
void hsi_conv_backward_f64(double *dx, double *dw, double *db, const double *dy,
                           const double *x, const double *w, const hsi_conv_dims *d, void *ws);

/* Which float convolution runs: AUTO takes the kernels of
 * models/conv_direct.c where they apply — stride 1, pad <= kernel - 1, a
 * CPU with AVX2 and FMA — with Winograd F(2x2, 3x3) for convolutions 3x3
 * in H and W with pad 0 or 1, 2-D or 3-D with any depth kernel (forward,
 * weight and input gradients), and im2col + gemm
 * otherwise; DIRECT the same without Winograd; GEMM always im2col + gemm
 * (for tests and benchmarks that compare them). Set it before sizing
 * workspaces; double always uses im2col + gemm. */
typedef enum {
    HSI_CONV_IMPL_AUTO = 0,   /* Winograd for 2-D 3x3 pad 0/1 convs, else direct */
    HSI_CONV_IMPL_GEMM = 1,   /* im2col + gemm everywhere */
    HSI_CONV_IMPL_DIRECT = 2  /* the direct kernels, no Winograd */
} hsi_conv_impl;
void hsi_conv_set_impl(hsi_conv_impl impl);
/* The vector width of the direct and Winograd kernels: AUTO takes AVX-512
 * register tiles (kernels/tiles512.h) on CPUs with AVX-512F and AVX2 ones
 * otherwise; AVX2 keeps the AVX2 tiles (for tests and benchmarks that
 * compare them). Results differ only by float rounding. */
typedef enum {
    HSI_CONV_SIMD_AUTO = 0,
    HSI_CONV_SIMD_AVX2 = 1
} hsi_conv_simd;
void hsi_conv_set_simd(hsi_conv_simd simd);
/* 1 when the float convolutions run the AVX-512 tiles now. */
int hsi_conv_uses_avx512(void);

/* ---------------------------------------------------------------- pooling */

typedef enum { HSI_POOL_MAX = 0, HSI_POOL_AVG = 1 } hsi_pool_kind;
typedef struct hsi_pool_dims {
    int nd, n, c;
    int in[3], ker[3], stride[3], pad[3], out[3];
    hsi_pool_kind kind;     /* AVG counts padding as zeros, like PyTorch count_include_pad=True */
} hsi_pool_dims;
/* Fills out[] = (in + 2 pad - ker) / stride + 1 (floor mode, like PyTorch's
 * default); HSI_ERR_ARG when any out < 1 or pad > ker / 2 (PyTorch's limit). */
hsi_status hsi_pool_dims_init(hsi_pool_dims *d, hsi_pool_kind kind, int nd, int n, int c,
                              const int *in, const int *ker, const int *stride, const int *pad);
/* x: (N, C, [D,] H, W) -> y: (N, C, [oD,] oH, oW); argmax: same count as y (int32 flat index
 * into the input plane), written by max forward, read by max backward; NULL for AVG.
 * Backward accumulates into dx (shape of x); dy has the shape of y. */
void hsi_pool_forward_f32(float *y, int32_t *argmax, const float *x, const hsi_pool_dims *d);
void hsi_pool_backward_f32(float *dx, const float *dy, const int32_t *argmax,
                           const hsi_pool_dims *d);
void hsi_pool_forward_f64(double *y, int32_t *argmax, const double *x, const hsi_pool_dims *d);
void hsi_pool_backward_f64(double *dx, const double *dy, const int32_t *argmax,
                           const hsi_pool_dims *d);

/* global average pool: x (N, C, S) with S = product of spatial dims -> y (N, C).
 * Backward accumulates dy / S into every element of dx (N, C, S). */
void hsi_gap_forward_f32(float *y, const float *x, int n, int c, int64_t s);
void hsi_gap_backward_f32(float *dx, const float *dy, int n, int c, int64_t s);
void hsi_gap_forward_f64(double *y, const double *x, int n, int c, int64_t s);
void hsi_gap_backward_f64(double *dx, const double *dy, int n, int c, int64_t s);

/* ------------------------------------------------------------- batch norm */

/* Batch norm over x (N, C, S) (S = 1 for BatchNorm1d on (N, C)). Training: uses batch
 * statistics (biased variance for normalising), writes save_mean/save_invstd (C), and updates
 * running_mean/running_var (unbiased variance) with momentum like PyTorch:
 * r = (1 - momentum) r + momentum * batch. Eval: uses running statistics.
 * gamma/beta may be NULL (affine=False). running_mean/running_var may be NULL
 * in training (track_running_stats=False: nothing is updated); save_mean /
 * save_invstd may be NULL when no backward will follow. In eval mode the
 * running statistics are read, save_* are not written. */
void hsi_bn_forward_f32(float *y, float *save_mean, float *save_invstd, float *running_mean,
                        float *running_var, const float *x, const float *gamma,
                        const float *beta, int n, int c, int64_t s, float eps, float momentum,
                        int training);
/* dy, x, dx: (N, C, S); gamma, save_mean, save_invstd, dgamma, dbeta: (C).
 * training = 1: gradient through the batch statistics. training = 0 (eval):
 * statistics are constants; pass save_mean = running_mean and
 * save_invstd = 1/sqrt(running_var + eps), computed by the caller. */
void hsi_bn_backward_f32(float *dx, float *dgamma, float *dbeta, const float *dy,
                         const float *x, const float *gamma, const float *save_mean,
                         const float *save_invstd, int n, int c, int64_t s, int training);
/* Batch norm followed by ReLU in one pass: y = max(0, bn(x)), same
 * arguments as hsi_bn_forward. Backward takes that y as well and masks dy
 * where y <= 0 (PyTorch's ReLU gradient) before the batch-norm backward;
 * accumulate = 0 overwrites dx instead of adding to it (dgamma and dbeta
 * always accumulate). */
void hsi_bn_relu_forward_f32(float *y, float *save_mean, float *save_invstd,
                             float *running_mean, float *running_var, const float *x,
                             const float *gamma, const float *beta, int n, int c, int64_t s,
                             float eps, float momentum, int training);
void hsi_bn_relu_backward_f32(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *y, const float *gamma,
                              const float *save_mean, const float *save_invstd, int n, int c,
                              int64_t s, int training, int accumulate);
void hsi_bn_relu_forward_f64(double *y, double *save_mean, double *save_invstd,
                             double *running_mean, double *running_var, const double *x,
                             const double *gamma, const double *beta, int n, int c, int64_t s,
                             double eps, double momentum, int training);
void hsi_bn_relu_backward_f64(double *dx, double *dgamma, double *dbeta, const double *dy,
                              const double *x, const double *y, const double *gamma,
                              const double *save_mean, const double *save_invstd, int n, int c,
                              int64_t s, int training, int accumulate);
/* Convolution then eval-mode batch norm as one convolution (inference on
 * either device): s = gamma / sqrt(var + eps) in double; wf (K, per) = w s,
 * bf (K) = (b - mean) s + beta. b, gamma, beta may be NULL (0, 1, 0). */
void hsi_bn_fold_f32(float *wf, float *bf, const float *w, const float *b, const float *gamma,
                     const float *beta, const float *mean, const float *var, double eps, int64_t k,
                     int64_t per);
void hsi_bn_fold_f64(double *wf, double *bf, const double *w, const double *b,
                     const double *gamma, const double *beta, const double *mean,
                     const double *var, double eps, int64_t k, int64_t per);
/* ..._f64 versions with the same arguments in double */
void hsi_bn_forward_f64(double *y, double *save_mean, double *save_invstd, double *running_mean,
                        double *running_var, const double *x, const double *gamma,
                        const double *beta, int n, int c, int64_t s, double eps,
                        double momentum, int training);
void hsi_bn_backward_f64(double *dx, double *dgamma, double *dbeta, const double *dy,
                         const double *x, const double *gamma, const double *save_mean,
                         const double *save_invstd, int n, int c, int64_t s, int training);

/* Synchronised batch norm (training only; PyTorch's SyncBatchNorm): the
 * per-channel sums are added over all ranks by sync(ctx, v, n), which sums
 * n doubles in place. Forward: sums of x and the value count (C + 1), then
 * sums of (x - mean)^2 around the global mean (C); mean, biased variance
 * for normalising and the unbiased one for running_var come from the
 * global sums and count. Backward: sums of dy and dy * (x - mean) (2 C and
 * the count), so dx is the gradient through the global statistics;
 * dgamma and dbeta (accumulated) stay this rank's sums (a data-parallel
 * trainer adds them over ranks with the other gradients). y: the forward's
 * output when relu (dy masked where y <= 0), else NULL. Returns sync's
 * status. Same arguments as above otherwise. */
hsi_status hsi_bn_sync_forward_f32(float *y, float *save_mean, float *save_invstd,
                                   float *running_mean, float *running_var, const float *x,
                                   const float *gamma, const float *beta, int n, int c, int64_t s,
                                   float eps, float momentum, int relu,
                                   hsi_status (*sync)(void *ctx, double *v, int64_t n), void *ctx);
hsi_status hsi_bn_sync_backward_f32(float *dx, float *dgamma, float *dbeta, const float *dy,
                                    const float *x, const float *y, const float *gamma,
                                    const float *save_mean, const float *save_invstd, int n,
                                    int c, int64_t s, int accumulate,
                                    hsi_status (*sync)(void *ctx, double *v, int64_t n), void *ctx);
hsi_status hsi_bn_sync_forward_f64(double *y, double *save_mean, double *save_invstd,
                                   double *running_mean, double *running_var, const double *x,
                                   const double *gamma, const double *beta, int n, int c,
                                   int64_t s, double eps, double momentum, int relu,
                                   hsi_status (*sync)(void *ctx, double *v, int64_t n), void *ctx);
hsi_status hsi_bn_sync_backward_f64(double *dx, double *dgamma, double *dbeta, const double *dy,
                                    const double *x, const double *y, const double *gamma,
                                    const double *save_mean, const double *save_invstd, int n,
                                    int c, int64_t s, int accumulate,
                                    hsi_status (*sync)(void *ctx, double *v, int64_t n), void *ctx);

#ifdef __cplusplus
}
#endif

#endif
