/* layers_cuda_stub.c — the models/layers_cuda.h entry points in a build
 * without CUDA: each returns HSI_ERR_NO_CUDA. In a CUDA build this file is
 * empty (layers_cuda.cu and ops_cuda.cu define them). Not a CPU fallback. */
#include "models/layers_cuda.h"

#ifndef HSI_HAVE_CUDA

#define NO_CUDA(what) hsi_fail(HSI_ERR_NO_CUDA, "%s: this hsi was built without CUDA", what)

size_t hsi_conv_workspace_bytes_cuda(const hsi_conv_dims *d)
{
    (void)d;
    return 0;
}
hsi_status hsi_conv_forward_cuda(float *y, const float *x, const float *w, const float *b,
                                 const hsi_conv_dims *d, void *ws)
{
    (void)y, (void)x, (void)w, (void)b, (void)d, (void)ws;
    return NO_CUDA("conv forward");
}
hsi_status hsi_conv_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const float *w, const hsi_conv_dims *d, void *ws)
{
    (void)dx, (void)dw, (void)db, (void)dy, (void)x, (void)w, (void)d, (void)ws;
    return NO_CUDA("conv backward");
}
hsi_status hsi_pool_forward_cuda(float *y, int32_t *argmax, const float *x, const hsi_pool_dims *d)
{
    (void)y, (void)argmax, (void)x, (void)d;
    return NO_CUDA("pool forward");
}
hsi_status hsi_pool_backward_cuda(float *dx, const float *dy, const int32_t *argmax,
                                  const hsi_pool_dims *d)
{
    (void)dx, (void)dy, (void)argmax, (void)d;
    return NO_CUDA("pool backward");
}
hsi_status hsi_gap_forward_cuda(float *y, const float *x, int n, int c, int64_t s)
{
    (void)y, (void)x, (void)n, (void)c, (void)s;
    return NO_CUDA("global average pool");
}
hsi_status hsi_gap_backward_cuda(float *dx, const float *dy, int n, int c, int64_t s)
{
    (void)dx, (void)dy, (void)n, (void)c, (void)s;
    return NO_CUDA("global average pool");
}
hsi_status hsi_bn_forward_cuda(float *y, float *save_mean, float *save_invstd, float *running_mean,
                               float *running_var, const float *x, const float *gamma,
                               const float *beta, int n, int c, int64_t s, float eps,
                               float momentum, int training)
{
    (void)y, (void)save_mean, (void)save_invstd, (void)running_mean, (void)running_var, (void)x;
    (void)gamma, (void)beta, (void)n, (void)c, (void)s, (void)eps, (void)momentum, (void)training;
    return NO_CUDA("batch norm forward");
}
hsi_status hsi_bn_backward_cuda(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int64_t s, int training)
{
    (void)dx, (void)dgamma, (void)dbeta, (void)dy, (void)x, (void)gamma, (void)save_mean;
    (void)save_invstd, (void)n, (void)c, (void)s, (void)training;
    return NO_CUDA("batch norm backward");
}
hsi_status hsi_relu_forward_cuda(float *y, const float *x, int64_t n)
{
    (void)y, (void)x, (void)n;
    return NO_CUDA("relu");
}
hsi_status hsi_relu_backward_cuda(float *dx, const float *dy, const float *y, int64_t n)
{
    (void)dx, (void)dy, (void)y, (void)n;
    return NO_CUDA("relu");
}
hsi_status hsi_linear_forward_cuda(float *y, const float *x, const float *w, const float *b, int n,
                                   int in, int out)
{
    (void)y, (void)x, (void)w, (void)b, (void)n, (void)in, (void)out;
    return NO_CUDA("linear forward");
}
hsi_status hsi_linear_backward_cuda(float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *w, int n, int in, int out)
{
    (void)dx, (void)dw, (void)db, (void)dy, (void)x, (void)w, (void)n, (void)in, (void)out;
    return NO_CUDA("linear backward");
}
hsi_status hsi_dropout_forward_cuda(float *y, float *mask, const float *x, int64_t n, double p,
                                    uint64_t seed)
{
    (void)y, (void)mask, (void)x, (void)n, (void)p, (void)seed;
    return NO_CUDA("dropout");
}
hsi_status hsi_dropout_backward_cuda(float *dx, const float *dy, const float *mask, int64_t n)
{
    (void)dx, (void)dy, (void)mask, (void)n;
    return NO_CUDA("dropout");
}
hsi_status hsi_cross_entropy_forward_cuda(float *loss, float *wsum, float *p, const float *z,
                                          const int32_t *target, const float *weight, int64_t n,
                                          int64_t c, double eps, int64_t ignore_index)
{
    (void)loss, (void)wsum, (void)p, (void)z, (void)target, (void)weight, (void)n, (void)c;
    (void)eps, (void)ignore_index;
    return NO_CUDA("cross-entropy forward");
}
hsi_status hsi_cross_entropy_backward_cuda(float *dz, const float *dloss, const float *wsum,
                                           const float *p, const int32_t *target,
                                           const float *weight, int64_t n, int64_t c, double eps,
                                           int64_t ignore_index)
{
    (void)dz, (void)dloss, (void)wsum, (void)p, (void)target, (void)weight, (void)n, (void)c;
    (void)eps, (void)ignore_index;
    return NO_CUDA("cross-entropy backward");
}
hsi_status hsi_adam_step_cuda(float *p, const float *g, float *m, float *v, int64_t n,
                              const hsi_optim_config *cfg, int64_t step)
{
    (void)p, (void)g, (void)m, (void)v, (void)n, (void)cfg, (void)step;
    return NO_CUDA("Adam step");
}

#else
typedef int hsi_layers_cuda_stub_unused; /* the .cu files define the API */
#endif
