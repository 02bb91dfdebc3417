/* cuda_ops.h — PRIVATE: the pipeline's part of the CUDA plugin's table
 * (core/cuda_plugin.h): what the forwarders in libhsi call and the plugin
 * fills. Not installed. */
#ifndef HSI_PIPELINE_CUDA_OPS_H
#define HSI_PIPELINE_CUDA_OPS_H

#include "core/cuda_plugin.h"
#include "pipeline/patches_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_cuda_pipeline_ops {
    hsi_status (*patches_extract)(float *out, const hsi_view *cube, int patch, hsi_pad_mode pad,
                                  const hsi_augment *aug, const int64_t *pixels, int64_t n,
                                  int augment, uint64_t seed);
} hsi_cuda_pipeline_ops;

/* Plugin side: the filled part (hidden inside libhsi_cuda.so). */
const hsi_cuda_pipeline_ops *hsi_cu_pipeline_ops(void);

/* libhsi side: the plugin's part, or NULL with HSI_ERR_NO_CUDA
 * "<what>: <why the plugin cannot be loaded>" set. */
static inline const hsi_cuda_pipeline_ops *hsi_cuda_pipeline_ops_get(const char *what)
{
    const hsi_cuda_plugin *t = hsi_cuda_plugin_get();
    if (!t) {
        hsi_fail_context(HSI_ERR_NO_CUDA, "%s", what);
        return NULL;
    }
    return (const hsi_cuda_pipeline_ops *)t->pipeline;
}

#ifdef __cplusplus
}
#endif
#endif
