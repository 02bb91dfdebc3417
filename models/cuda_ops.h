/* cuda_ops.h — PRIVATE: the models' part of the CUDA plugin's table
 * (core/cuda_plugin.h): what the forwarders in libhsi call and the plugin
 * fills. Not installed. */
#ifndef HSI_MODELS_CUDA_OPS_H
#define HSI_MODELS_CUDA_OPS_H

#include "core/cuda_plugin.h"
#include "models/layers_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_cuda_model_ops {
    size_t (*conv_workspace_bytes)(const hsi_conv_dims *d);
    hsi_status (*conv_forward)(float *y, const float *x, const float *w, const float *b,
                               const hsi_conv_dims *d, void *ws);
    hsi_status (*conv_backward)(float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, const hsi_conv_dims *d, void *ws);
    hsi_status (*pool_forward)(float *y, int32_t *argmax, const float *x, const hsi_pool_dims *d);
    hsi_status (*pool_backward)(float *dx, const float *dy, const int32_t *argmax,
                                const hsi_pool_dims *d);
    hsi_status (*gap_forward)(float *y, const float *x, int n, int c, int64_t s);
    hsi_status (*gap_backward)(float *dx, const float *dy, int n, int c, int64_t s);
    hsi_status (*bn_forward)(float *y, float *save_mean, float *save_invstd, float *running_mean,
                             float *running_var, const float *x, const float *gamma,
                             const float *beta, int n, int c, int64_t s, float eps,
                             float momentum, int training);
    hsi_status (*bn_backward)(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *gamma, const float *save_mean,
                              const float *save_invstd, int n, int c, int64_t s, int training);
    hsi_status (*relu_forward)(float *y, const float *x, int64_t n);
    hsi_status (*relu_backward)(float *dx, const float *dy, const float *y, int64_t n);
    hsi_status (*linear_forward)(float *y, const float *x, const float *w, const float *b, int n,
                                 int in, int out);
    hsi_status (*linear_backward)(float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const float *w, int n, int in, int out);
    hsi_status (*dropout_forward)(float *y, float *mask, const float *x, int64_t n, double p,
                                  uint64_t seed);
    hsi_status (*dropout_backward)(float *dx, const float *dy, const float *mask, int64_t n);
    hsi_status (*cross_entropy_forward)(float *loss, float *wsum, float *p, const float *z,
                                        const int32_t *target, const float *weight, int64_t n,
                                        int64_t c, double eps, int64_t ignore_index);
    hsi_status (*cross_entropy_backward)(float *dz, const float *dloss, const float *wsum,
                                         const float *p, const int32_t *target,
                                         const float *weight, int64_t n, int64_t c, double eps,
                                         int64_t ignore_index);
    hsi_status (*adam_step)(float *p, const float *g, float *m, float *v, int64_t n,
                            const hsi_optim_config *cfg, int64_t step);
    hsi_status (*step_scalars_set)(hsi_step_scalars *dev, const hsi_step_scalars *s);
    hsi_status (*dropout_forward_dev)(float *y, float *mask, const float *x, int64_t n, double p,
                                      const hsi_step_scalars *dev, uint64_t add);
    hsi_status (*adam_step_dev)(float *p, const float *g, float *m, float *v, int64_t n,
                                const hsi_optim_config *cfg, const hsi_step_scalars *dev);
    /* convolutions by cuDNN (models/cudnn.cu) */
    hsi_status (*conv_cudnn_available)(int *version);
    hsi_status (*conv_forward_cudnn)(float *y, const float *x, const float *w, const float *b,
                                     const hsi_conv_dims *d);
    hsi_status (*conv_backward_cudnn)(float *dx, float *dw, float *db, const float *dy,
                                      const float *x, const float *w, const hsi_conv_dims *d);
    /* batch norm by cuDNN (models/cudnn.cu) */
    hsi_status (*bn_cudnn_available)(void);
    hsi_status (*bn_forward_cudnn)(float *y, float *save_mean, float *save_invstd,
                                   float *running_mean, float *running_var, const float *x,
                                   const float *gamma, const float *beta, int n, int c, int64_t s,
                                   float eps, float momentum, int training);
    hsi_status (*bn_backward_cudnn)(float *dx, float *dgamma, float *dbeta, const float *dy,
                                    const float *x, const float *gamma, const float *save_mean,
                                    const float *save_invstd, int n, int c, int64_t s, float eps,
                                    int training);
} hsi_cuda_model_ops;

/* Plugin side: the filled part (hidden inside libhsi_cuda.so). */
const hsi_cuda_model_ops *hsi_cu_model_ops(void);
/* Plugin side: db[k] += the sum over samples and positions of dy (N, K,
 * os) in double, one block per k (models/layers_cuda.cu; the im2col and
 * cuDNN convolutions share it, so db is the same bits on both). */
hsi_status hsi_cu_conv_db(float *db, const float *dy, int64_t n, int64_t k, int64_t os, const char *what);

/* libhsi side: the plugin's part, or NULL with HSI_ERR_NO_CUDA
 * "<what>: <why the plugin cannot be loaded>" set. */
static inline const hsi_cuda_model_ops *hsi_cuda_model_ops_get(const char *what)
{
    const hsi_cuda_plugin *t = hsi_cuda_plugin_get();
    if (!t) {
        hsi_fail_context(HSI_ERR_NO_CUDA, "%s", what);
        return NULL;
    }
    return (const hsi_cuda_model_ops *)t->models;
}

#ifdef __cplusplus
}
#endif
#endif
