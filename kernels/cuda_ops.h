/* cuda_ops.h — PRIVATE: the kernels' part of the CUDA plugin's table
 * (core/cuda_plugin.h): what the forwarders in libhsi call and the plugin
 * fills. Not installed. */
#ifndef HSI_KERNELS_CUDA_OPS_H
#define HSI_KERNELS_CUDA_OPS_H

#include "core/cuda_plugin.h"
#include "kernels/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_cuda_kernel_ops {
    hsi_status (*sync)(void);
    hsi_status (*malloc)(void **out, size_t size);
    void (*free)(void *p);
    hsi_status (*buffer)(hsi_buffer **out, size_t size);
    void (*cache_trim)(void);
    void (*mem_get)(hsi_cuda_mem_stats *s);
    hsi_status (*view_to_device)(hsi_view *out, const hsi_view *in, hsi_dtype dtype);
    hsi_status (*view_to_host)(hsi_view *out, const hsi_view *in);
    hsi_status (*upload)(void *dev, const void *host, size_t n);
    hsi_status (*download)(void *host, const void *dev, size_t n);
    hsi_status (*memset)(void *dev, int value, size_t n);
    hsi_status (*copy)(void *dst, const void *src, size_t n);
    hsi_status (*scratch_begin)(void *base, size_t bytes, int strict);
    size_t (*scratch_end)(void);
    hsi_status (*stats_compute)(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts);
    hsi_status (*fused_run)(float *out, int out_on_device, const hsi_view *cube,
                            const hsi_norm *norm, const hsi_pca *pca, const hsi_fused_opts *opts);
    hsi_status (*covariance)(double *mean, double *cov, int64_t *n_used, const hsi_view *cube,
                             const hsi_norm *norm, const hsi_pca_opts *opts);
} hsi_cuda_kernel_ops;

/* Plugin side: the filled part (hidden inside libhsi_cuda.so). */
const hsi_cuda_kernel_ops *hsi_cu_kernel_ops(void);

/* libhsi side: the plugin's part, or NULL with HSI_ERR_NO_CUDA
 * "<what>: <why the plugin cannot be loaded>" set. */
static inline const hsi_cuda_kernel_ops *hsi_cuda_kernel_ops_get(const char *what)
{
    const hsi_cuda_plugin *t = hsi_cuda_plugin_get();
    if (!t) {
        hsi_fail_context(HSI_ERR_NO_CUDA, "%s", what);
        return NULL;
    }
    return (const hsi_cuda_kernel_ops *)t->kernels;
}

#ifdef __cplusplus
}
#endif
#endif
