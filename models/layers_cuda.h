/* layers_cuda.h — the model ops on the GPU, float32, over PACKED row-major
 * DEVICE arrays, with the semantics of their CPU counterparts (layers.h,
 * the engine's ReLU / linear / cross-entropy, optim.h's AdamW): forwards
 * overwrite, backwards ACCUMULATE (+=) into every gradient, NULL = not
 * needed. Dims structs come from the same hsi_*_dims_init as on the CPU.
 * Work is queued on this thread's stream (hsi_cuda_set_stream); nothing
 * here synchronises the device or reads a value back. Every function
 * returns HSI_ERR_NO_CUDA without CUDA or without a device. Not tensors,
 * not a graph (see the report in issue 7 for the engine's device dispatch). */
#ifndef HSI_LAYERS_CUDA_H
#define HSI_LAYERS_CUDA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "models/layers.h"
#include "models/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ convolution */

/* Device workspace bytes for hsi_conv_*_cuda: im2col columns and
 * per-sample weight gradients for up to 256 MiB worth of samples at a time
 * (at least one sample). */
size_t hsi_conv_workspace_bytes_cuda(const hsi_conv_dims *d);
/* x: (N, C, [D,] H, W); w: (K, C, [kD,] kH, kW); b: (K) or NULL;
 * y: (N, K, [oD,] oH, oW). im2col + cuBLAS sgemm (batched over the
 * samples of a workspace chunk). ws: hsi_conv_workspace_bytes_cuda(d)
 * device bytes. */
hsi_status hsi_conv_forward_cuda(float *y, const float *x, const float *w, const float *b,
                                 const hsi_conv_dims *d, void *ws);
/* dx (shape of x), dw (shape of w), db (K) accumulate; each may be NULL.
 * dw: one batched sgemm for the per-sample products, summed in double in
 * sample order (deterministic). */
hsi_status hsi_conv_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const float *w, const hsi_conv_dims *d,
                                  void *ws);

/* ------------------------------------------------- convolution by cuDNN */

/* The same convolutions through cuDNN's legacy API (models/cudnn.cu).
 * cuDNN is loaded at run time, never linked: the library named by the
 * environment variable HSI_CUDNN (a path to libcudnn.so.9), else
 * "libcudnn.so.9" on the plugin's search path (its RUNPATH is the CUDA
 * toolkit's lib64). True FP32 (CUDNN_FMA_MATH: no TF32); per geometry
 * (batch included) the fastest algorithm, as cuDNN times them once per
 * process (cuDNN's heuristic order when timing fails), that is
 * deterministic, needs no tensor cores and at most 1 GiB of workspace (the
 * fastest such algorithm when none is deterministic); the workspace comes
 * from the caching allocator (hsi_cuda_malloc) at each call. */

/* HSI_OK when cuDNN 9 loads and gives this thread a handle; *version (may
 * be NULL) = cudnnGetVersion(), e.g. 91900 for 9.19.0. Else
 * HSI_ERR_NO_CUDA (no plugin or no device), HSI_ERR_NOT_FOUND (the
 * library, one of its functions or cuDNN 9 itself missing: the message
 * names the file tried and dlerror's reason) or HSI_ERR_CUDA (cudnnCreate
 * failed). The library is looked for once per process. */
hsi_status hsi_conv_cudnn_available(int *version);
/* The environment variable HSI_CUDNN_ALGO: 0 for deterministic algorithms
 * only (unset, empty or "deterministic", the default), 1 for "fastest"
 * (cuDNN's fastest, deterministic or not: PyTorch's cudnn.benchmark
 * choice), -1 for anything else (cuDNN then does not load, saying so). */
static inline int hsi_cudnn_algo_fastest(void)
{
    const char *a = getenv("HSI_CUDNN_ALGO");
    if (!a || !*a || !strcmp(a, "deterministic")) return 0;
    return strcmp(a, "fastest") ? -1 : 1;
}
/* 1 when d's tensors fit cuDNN's int sizes (x, y and w each below 2^31
 * elements): the geometries hsi_conv_*_cudnn take. */
static inline int hsi_conv_cudnn_fits(const hsi_conv_dims *d)
{
    int64_t x = (int64_t)d->n * d->c, y = (int64_t)d->n * d->k, w = (int64_t)d->k * d->c;
    for (int i = 0; i < d->nd; i++) x *= d->in[i], y *= d->out[i], w *= d->ker[i];
    return x <= INT32_MAX && y <= INT32_MAX && w <= INT32_MAX;
}
/* As hsi_conv_forward_cuda / hsi_conv_backward_cuda, without a workspace
 * argument: y overwritten (+ b); dx, dw, db accumulate (+=), each may be
 * NULL; db by a deterministic sum of ours. HSI_ERR_UNSUPPORTED when
 * !hsi_conv_cudnn_fits(d); the errors of hsi_conv_cudnn_available; a cuDNN
 * call that fails gives HSI_ERR_CUDA naming the convolution and cuDNN's
 * message. */
hsi_status hsi_conv_forward_cudnn(float *y, const float *x, const float *w, const float *b,
                                  const hsi_conv_dims *d);
hsi_status hsi_conv_backward_cudnn(float *dx, float *dw, float *db, const float *dy,
                                   const float *x, const float *w, const hsi_conv_dims *d);

/* ---------------------------------------------------------------- pooling */

/* x: (N, C, [D,] H, W) -> y: (N, C, [oD,] oH, oW); argmax (max only): int32
 * flat index into the input plane, same count as y (PyTorch's NaN rule and
 * first-maximum tie rule, like the CPU). avg counts padding (count_include_pad).
 * Backward gathers (no atomics: deterministic) and accumulates into dx. */
hsi_status hsi_pool_forward_cuda(float *y, int32_t *argmax, const float *x,
                                 const hsi_pool_dims *d);
hsi_status hsi_pool_backward_cuda(float *dx, const float *dy, const int32_t *argmax,
                                  const hsi_pool_dims *d);
/* x (N, C, S) -> y (N, C) means; backward dx (N, C, S) += dy / S. */
hsi_status hsi_gap_forward_cuda(float *y, const float *x, int n, int c, int64_t s);
hsi_status hsi_gap_backward_cuda(float *dx, const float *dy, int n, int c, int64_t s);

/* ------------------------------------------------------------- batch norm */

/* Same arguments and rules as hsi_bn_forward_f32 / hsi_bn_backward_f32
 * (x (N, C, S); per-channel arrays (C); all device pointers). Channel sums
 * are taken in double over many blocks per channel, added in a fixed order
 * (the same bits on every run). */
hsi_status hsi_bn_forward_cuda(float *y, float *save_mean, float *save_invstd,
                               float *running_mean, float *running_var, const float *x,
                               const float *gamma, const float *beta, int n, int c, int64_t s,
                               float eps, float momentum, int training);
hsi_status hsi_bn_backward_cuda(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int64_t s,
                                int training);

/* The same through cuDNN's batch norm (models/cudnn.cu; CUDNN_BATCHNORM_
 * SPATIAL, loaded with the convolutions): hsi_bn_cudnn_available is HSI_OK
 * when cuDNN loads and has its three batch-norm functions (else the errors
 * of hsi_conv_cudnn_available, or HSI_ERR_NOT_FOUND naming the function
 * missing). Where cuDNN cannot take a call (no gamma/beta, eps below
 * CUDNN_BN_MIN_EPSILON, 2^31 elements or more, no dx, an eval-mode
 * backward) the kernels above run it. eps: the forward's (cuDNN checks the
 * saved statistics against it). */
hsi_status hsi_bn_cudnn_available(void);
hsi_status hsi_bn_forward_cudnn(float *y, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var, const float *x,
                                const float *gamma, const float *beta, int n, int c, int64_t s,
                                float eps, float momentum, int training);
hsi_status hsi_bn_backward_cudnn(float *dx, float *dgamma, float *dbeta, const float *dy,
                                 const float *x, const float *gamma, const float *save_mean,
                                 const float *save_invstd, int n, int c, int64_t s, float eps,
                                 int training);

/* ------------------------------------------------------ elementwise, linear */

/* y = max(x, 0) over n elements; backward dx += (y > 0) ? dy : 0. */
hsi_status hsi_relu_forward_cuda(float *y, const float *x, int64_t n);
hsi_status hsi_relu_backward_cuda(float *dx, const float *dy, const float *y, int64_t n);
/* x: (N, in), w: (out, in), b: (out) or NULL -> y: (N, out) = x w^T + b.
 * Backward: dx (N, in) += dy w; dw (out, in) += dy^T x; db += column sums. */
hsi_status hsi_linear_forward_cuda(float *y, const float *x, const float *w, const float *b,
                                   int n, int in, int out);
hsi_status hsi_linear_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *w, int n, int in, int out);

/* Inverted dropout over n elements: mask[i] = 0 with probability p, else
 * 1/(1-p), drawn from a counter-based stream of (seed, i) (not the CPU
 * engine's generator: the same seed gives the same mask on any GPU, not the
 * CPU's mask); y = x * mask. p = 0 gives y = x and mask 1. Backward:
 * dx += dy * mask. */
hsi_status hsi_dropout_forward_cuda(float *y, float *mask, const float *x, int64_t n, double p,
                                    uint64_t seed);
hsi_status hsi_dropout_backward_cuda(float *dx, const float *dy, const float *mask, int64_t n);

/* --------------------------------------------------------- cross-entropy */

/* Softmax cross-entropy with PyTorch's semantics (as hsi_cross_entropy):
 * z: (N, C) logits; target: (N) int32 classes (rows equal to ignore_index
 * are skipped; other values must lie in [0, C): a bad one makes the loss
 * NaN rather than reading out of bounds); weight: (C) or NULL;
 * label_smoothing eps. Writes p (N, C) softmax, loss[0] = the mean loss
 * (sum over rows / sum of weight[target]) and wsum[0] = that denominator —
 * device scalars, never read back here. */
hsi_status hsi_cross_entropy_forward_cuda(float *loss, float *wsum, float *p, const float *z,
                                          const int32_t *target, const float *weight, int64_t n,
                                          int64_t c, double eps, int64_t ignore_index);
/* dz (N, C) += g / wsum * d(sum)/dz, g = dloss[0] (a device scalar; NULL =
 * 1), from the saved p and wsum. */
hsi_status hsi_cross_entropy_backward_cuda(float *dz, const float *dloss, const float *wsum,
                                           const float *p, const int32_t *target,
                                           const float *weight, int64_t n, int64_t c,
                                           double eps, int64_t ignore_index);

/* --------------------------------------------------------------- AdamW */

/* One fused Adam/AdamW update of n parameters (device p, g, m, v) with
 * cfg (kind HSI_OPT_ADAM or HSI_OPT_ADAMW, lr, betas, eps, weight decay)
 * at step `step` (1 for the first update), operation for operation as
 * hsi_optim_step's float path: bias corrections in double on the host. */
hsi_status hsi_adam_step_cuda(float *p, const float *g, float *m, float *v, int64_t n,
                              const hsi_optim_config *cfg, int64_t step);

/* Adam's factors at `step`, in double on the host as hsi_optim_step's:
 * f[0] = lr / (1 - beta1^step), f[1] = sqrt(1 - beta2^step), f[2] = 1 - lr
 * * weight_decay (AdamW's decay). */
static inline void hsi_adam_factors(float f[3], const hsi_optim_config *c, int64_t step)
{
    double bc1 = 1 - pow(c->beta1, (double)step), bc2 = 1 - pow(c->beta2, (double)step);
    f[0] = (float)(c->lr / bc1);
    f[1] = (float)sqrt(bc2);
    f[2] = (float)(1 - c->lr * c->weight_decay);
}

/* ------------------------------------------------- per-step device values */

/* What changes from one training step to the next, kept in device memory
 * and read by the kernels when they run, so that a step captured once (a
 * CUDA Graph, models/model_cuda.h) replays with each step's values. */
typedef struct hsi_step_scalars {
    uint64_t dropout_key; /* a dropout layer's masks: seed dropout_key + its offset */
    float adam[3];        /* hsi_adam_factors of the step */
    float unused;
} hsi_step_scalars;
/* *dev = *s, queued on this thread's stream as a kernel's argument: s may
 * change as soon as this returns (no host copy waits for it). */
hsi_status hsi_step_scalars_set_cuda(hsi_step_scalars *dev, const hsi_step_scalars *s);
/* hsi_dropout_forward_cuda with the seed dev->dropout_key + add (the same
 * masks as that seed given on the host). */
hsi_status hsi_dropout_forward_dev_cuda(float *y, float *mask, const float *x, int64_t n, double p,
                                        const hsi_step_scalars *dev, uint64_t add);
/* hsi_adam_step_cuda with the factors dev->adam (the same bits as
 * hsi_adam_step_cuda at the step they were made for). */
hsi_status hsi_adam_step_dev_cuda(float *p, const float *g, float *m, float *v, int64_t n,
                                  const hsi_optim_config *cfg, const hsi_step_scalars *dev);

#ifdef __cplusplus
}
#endif
#endif
