/* layers_cuda_stub.c — the models/layers_cuda.h entry points in libhsi:
 * forwarding stubs into the CUDA plugin (loaded on first use, see
 * core/cuda_runtime.c). When it cannot be loaded each returns
 * HSI_ERR_NO_CUDA naming the op, the plugin file and dlerror's reason. The
 * same in every build. Not a CPU fallback. */
#include "models/layers_cuda.h"

#include "models/cuda_ops.h"

/* Evaluates to the table, or returns HSI_ERR_NO_CUDA "<what>: <why not>". */
#define PLUGIN(t, what)                                                                            \
    const hsi_cuda_model_ops *t = hsi_cuda_model_ops_get(what);                                    \
    if (!t) return HSI_ERR_NO_CUDA

size_t hsi_conv_workspace_bytes_cuda(const hsi_conv_dims *d)
{
    const hsi_cuda_model_ops *t = hsi_cuda_model_ops_get("conv workspace");
    return t ? t->conv_workspace_bytes(d) : 0;
}
hsi_status hsi_conv_forward_cuda(float *y, const float *x, const float *w, const float *b,
                                 const hsi_conv_dims *d, void *ws)
{
    PLUGIN(t, "conv forward");
    return t->conv_forward(y, x, w, b, d, ws);
}
hsi_status hsi_conv_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const float *w, const hsi_conv_dims *d, void *ws)
{
    PLUGIN(t, "conv backward");
    return t->conv_backward(dx, dw, db, dy, x, w, d, ws);
}
hsi_status hsi_conv_cudnn_available(int *version)
{
    if (version) *version = 0;
    PLUGIN(t, "cuDNN");
    return t->conv_cudnn_available(version);
}
hsi_status hsi_conv_forward_cudnn(float *y, const float *x, const float *w, const float *b,
                                  const hsi_conv_dims *d)
{
    PLUGIN(t, "conv forward (cuDNN)");
    return t->conv_forward_cudnn(y, x, w, b, d);
}
hsi_status hsi_conv_backward_cudnn(float *dx, float *dw, float *db, const float *dy,
                                   const float *x, const float *w, const hsi_conv_dims *d)
{
    PLUGIN(t, "conv backward (cuDNN)");
    return t->conv_backward_cudnn(dx, dw, db, dy, x, w, d);
}
hsi_status hsi_bn_cudnn_available(void)
{
    PLUGIN(t, "batch norm (cuDNN)");
    return t->bn_cudnn_available();
}
hsi_status hsi_bn_forward_cudnn(float *y, float *save_mean, float *save_invstd,
                                float *running_mean, float *running_var, const float *x,
                                const float *gamma, const float *beta, int n, int c, int64_t s,
                                float eps, float momentum, int training)
{
    PLUGIN(t, "batch norm forward (cuDNN)");
    return t->bn_forward_cudnn(y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                               beta, n, c, s, eps, momentum, training);
}
hsi_status hsi_bn_backward_cudnn(float *dx, float *dgamma, float *dbeta, const float *dy,
                                 const float *x, const float *gamma, const float *save_mean,
                                 const float *save_invstd, int n, int c, int64_t s, float eps,
                                 int training)
{
    PLUGIN(t, "batch norm backward (cuDNN)");
    return t->bn_backward_cudnn(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, n, c, s,
                                eps, training);
}
hsi_status hsi_pool_forward_cuda(float *y, int32_t *argmax, const float *x, const hsi_pool_dims *d)
{
    PLUGIN(t, "pool forward");
    return t->pool_forward(y, argmax, x, d);
}
hsi_status hsi_pool_backward_cuda(float *dx, const float *dy, const int32_t *argmax,
                                  const hsi_pool_dims *d)
{
    PLUGIN(t, "pool backward");
    return t->pool_backward(dx, dy, argmax, d);
}
hsi_status hsi_gap_forward_cuda(float *y, const float *x, int n, int c, int64_t s)
{
    PLUGIN(t, "global average pool");
    return t->gap_forward(y, x, n, c, s);
}
hsi_status hsi_gap_backward_cuda(float *dx, const float *dy, int n, int c, int64_t s)
{
    PLUGIN(t, "global average pool");
    return t->gap_backward(dx, dy, n, c, s);
}
hsi_status hsi_bn_forward_cuda(float *y, float *save_mean, float *save_invstd, float *running_mean,
                               float *running_var, const float *x, const float *gamma,
                               const float *beta, int n, int c, int64_t s, float eps,
                               float momentum, int training)
{
    PLUGIN(t, "batch norm forward");
    return t->bn_forward(y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta, n,
                         c, s, eps, momentum, training);
}
hsi_status hsi_bn_backward_cuda(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int64_t s, int training)
{
    PLUGIN(t, "batch norm backward");
    return t->bn_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, n, c, s,
                          training);
}
hsi_status hsi_relu_forward_cuda(float *y, const float *x, int64_t n)
{
    PLUGIN(t, "relu");
    return t->relu_forward(y, x, n);
}
hsi_status hsi_relu_backward_cuda(float *dx, const float *dy, const float *y, int64_t n)
{
    PLUGIN(t, "relu");
    return t->relu_backward(dx, dy, y, n);
}
hsi_status hsi_linear_forward_cuda(float *y, const float *x, const float *w, const float *b, int n,
                                   int in, int out)
{
    PLUGIN(t, "linear forward");
    return t->linear_forward(y, x, w, b, n, in, out);
}
hsi_status hsi_linear_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *w, int n, int in, int out)
{
    PLUGIN(t, "linear backward");
    return t->linear_backward(dx, dw, db, dy, x, w, n, in, out);
}
hsi_status hsi_dropout_forward_cuda(float *y, float *mask, const float *x, int64_t n, double p,
                                    uint64_t seed)
{
    PLUGIN(t, "dropout");
    return t->dropout_forward(y, mask, x, n, p, seed);
}
hsi_status hsi_dropout_backward_cuda(float *dx, const float *dy, const float *mask, int64_t n)
{
    PLUGIN(t, "dropout");
    return t->dropout_backward(dx, dy, mask, n);
}
hsi_status hsi_cross_entropy_forward_cuda(float *loss, float *wsum, float *p, const float *z,
                                          const int32_t *target, const float *weight, int64_t n,
                                          int64_t c, double eps, int64_t ignore_index)
{
    PLUGIN(t, "cross-entropy forward");
    return t->cross_entropy_forward(loss, wsum, p, z, target, weight, n, c, eps, ignore_index);
}
hsi_status hsi_cross_entropy_backward_cuda(float *dz, const float *dloss, const float *wsum,
                                           const float *p, const int32_t *target,
                                           const float *weight, int64_t n, int64_t c, double eps,
                                           int64_t ignore_index)
{
    PLUGIN(t, "cross-entropy backward");
    return t->cross_entropy_backward(dz, dloss, wsum, p, target, weight, n, c, eps, ignore_index);
}
hsi_status hsi_adam_step_cuda(float *p, const float *g, float *m, float *v, int64_t n,
                              const hsi_optim_config *cfg, int64_t step)
{
    PLUGIN(t, "Adam step");
    return t->adam_step(p, g, m, v, n, cfg, step);
}
hsi_status hsi_step_scalars_set_cuda(hsi_step_scalars *dev, const hsi_step_scalars *s)
{
    PLUGIN(t, "training step values");
    return t->step_scalars_set(dev, s);
}
hsi_status hsi_dropout_forward_dev_cuda(float *y, float *mask, const float *x, int64_t n, double p,
                                        const hsi_step_scalars *dev, uint64_t add)
{
    PLUGIN(t, "dropout");
    return t->dropout_forward_dev(y, mask, x, n, p, dev, add);
}
hsi_status hsi_adam_step_dev_cuda(float *p, const float *g, float *m, float *v, int64_t n,
                                  const hsi_optim_config *cfg, const hsi_step_scalars *dev)
{
    PLUGIN(t, "Adam step");
    return t->adam_step_dev(p, g, m, v, n, cfg, dev);
}
