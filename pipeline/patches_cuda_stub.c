/* patches_cuda_stub.c — hsi_patches_extract_cuda in libhsi: a forwarding
 * stub into the CUDA plugin (patches_cuda.cu, loaded on first use); when
 * the plugin cannot be loaded, HSI_ERR_NO_CUDA saying which file and why.
 * The same in every build. */
#include "pipeline/patches_cuda.h"

#include "pipeline/cuda_ops.h"

hsi_status hsi_patches_extract_cuda(float *out, const hsi_view *cube, int patch, hsi_pad_mode pad,
                                    const hsi_augment *aug, const int64_t *pixels, int64_t n,
                                    int augment, uint64_t seed)
{
    const hsi_cuda_pipeline_ops *t = hsi_cuda_pipeline_ops_get("patches (CUDA)");
    if (!t) return HSI_ERR_NO_CUDA;
    return t->patches_extract(out, cube, patch, pad, aug, pixels, n, augment, seed);
}
