/* patches_cuda.h — patch extraction on the GPU: P x P windows around pixels
 * of a float32 cube that lives in device memory, written into a device batch
 * (N, C, P, P), with the padding modes and the seeded augmentation of
 * patches.h (same draws, same noise stream: the same batch as
 * hsi_patches_extract up to the last bits of the noise's libm calls).
 * Returns HSI_ERR_NO_CUDA without CUDA or a device. Not the loader. */
#ifndef HSI_PATCHES_CUDA_H
#define HSI_PATCHES_CUDA_H

#include <stdint.h>

#include "core/core.h"
#include "pipeline/patches.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cube: (bands, lines, samples) float32 DEVICE view in native byte order,
 * strides multiples of 4 bytes (any sign). pixels: (n,) DEVICE array of
 * flat indices y * n_samples + x; a pixel outside the scene cannot be
 * reported without reading back, so its patch is filled with NaN. out:
 * (n, C, P, P) packed float32 DEVICE array. augment = 1: sample i uses
 * hsi_patch_sample_seed(seed, i) and aug (NULL = none), as on the CPU.
 * Queued on this thread's stream; no synchronisation. */
hsi_status hsi_patches_extract_cuda(float *out, const hsi_view *cube, int patch, hsi_pad_mode pad,
                                    const hsi_augment *aug, const int64_t *pixels, int64_t n,
                                    int augment, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
