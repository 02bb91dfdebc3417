/* patches_cuda_stub.c — hsi_patches_extract_cuda in a build without CUDA:
 * returns HSI_ERR_NO_CUDA. Empty in a CUDA build (patches_cuda.cu). */
#include "pipeline/patches_cuda.h"

#ifndef HSI_HAVE_CUDA
hsi_status hsi_patches_extract_cuda(float *out, const hsi_view *cube, int patch, hsi_pad_mode pad,
                                    const hsi_augment *aug, const int64_t *pixels, int64_t n,
                                    int augment, uint64_t seed)
{
    (void)out, (void)cube, (void)patch, (void)pad, (void)aug, (void)pixels, (void)n;
    (void)augment, (void)seed;
    return hsi_fail(HSI_ERR_NO_CUDA, "patches (CUDA): this hsi was built without CUDA");
}
#else
typedef int hsi_patches_cuda_stub_unused; /* patches_cuda.cu defines it */
#endif
