/* patches.h — P x P windows (P odd) around pixels of a float32 cube,
 * written straight into a batch buffer (N, C, P, P), with mirror or zero
 * padding at the borders and seeded augmentation (flips, 90-degree
 * rotations, additive noise). No per-sample heap copies. It does not
 * choose pixels (split.h) or schedule batches (loader.h). */
#ifndef HSI_PATCHES_H
#define HSI_PATCHES_H

#include "core/core.h"
#include "pipeline/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_PATCH_MAX 99 /* largest patch side */

typedef enum hsi_pad_mode {
    /* numpy.pad 'reflect': the edge is not repeated (-1 -> 1, n -> n-2),
     * reflected again as often as needed; a side of length 1 repeats its
     * one pixel (as numpy does). */
    HSI_PAD_MIRROR = 0,
    HSI_PAD_ZERO = 1 /* zeros outside the scene */
} hsi_pad_mode;

typedef struct hsi_augment {
    int flips;       /* 1: flip up-down and left-right, each with p = 1/2 */
    int rotations;   /* 1: rotate by k * 90 degrees (numpy.rot90, counter-
                        clockwise), k uniform in 0..3, after the flips */
    float noise_std; /* > 0: add N(0, noise_std^2) to every element */
} hsi_augment;

typedef struct hsi_patcher {
    hsi_view cube;      /* reference that keeps the cube's buffer alive */
    const float *data;  /* element (c, y, x) at data[c*sb + y*sy + x*sx] */
    int64_t sb, sy, sx; /* element strides */
    int64_t n_bands, n_lines, n_samples;
    int patch, radius;  /* P = 2 * radius + 1 */
    hsi_pad_mode pad;
    hsi_augment aug;
    int on_device;      /* the cube is in device memory: extraction runs on the GPU */
} hsi_patcher;

/* cube: (bands, lines, samples) float32 host view in native byte order
 * with element strides that are multiples of 4 bytes: band-major packed
 * (BSQ) is the fast path, pixel-major (BIP, band stride 4 bytes) has its
 * own loop, any other strides work through the general gather. aug may be
 * NULL (none). The patcher holds a reference to the cube. A cube in device
 * memory is taken too: hsi_patches_extract then runs the CUDA kernel
 * (pipeline/patches_cuda.h) on device arrays. */
hsi_status hsi_patcher_init(hsi_patcher *p, const hsi_view *cube, int patch, hsi_pad_mode pad,
                            const hsi_augment *aug);
void hsi_patcher_free(hsi_patcher *p);

/* Floats per sample: C * P * P. */
int64_t hsi_patcher_sample_floats(const hsi_patcher *p);

/* Random choices for one sample, all from its seed. */
typedef struct hsi_patch_draw {
    int flip_ud, flip_lr, rot; /* rot in 0..3 */
    uint64_t noise_key;        /* key of the noise stream */
} hsi_patch_draw;
void hsi_patch_draw_make(hsi_patch_draw *d, const hsi_augment *aug, uint64_t sample_seed);
/* Seed of sample i of a batch whose seed is batch_seed. */
uint64_t hsi_patch_sample_seed(uint64_t batch_seed, int64_t i);

/* out: (n, C, P, P) packed float32; pixels: (n,) flat indices
 * y * n_samples + x. augment = 0: plain windows; 1: sample i augmented
 * with hsi_patch_sample_seed(seed, i). Thread-safe (reads only p). With a
 * device cube (p->on_device) out and pixels are DEVICE arrays and the work
 * is queued on this thread's stream (hsi_patches_extract_cuda's contract:
 * a pixel outside the scene gives a NaN patch instead of an error). */
hsi_status hsi_patches_extract(const hsi_patcher *p, float *out, const int64_t *pixels, int64_t n,
                               int augment, uint64_t seed);
/* HSI_OK when every one of the n HOST pixel indices is in p's scene, else
 * HSI_ERR_ARG naming the first that is not (the check the host extraction
 * makes; callers of the device extraction make it before the upload). */
hsi_status hsi_patches_check(const hsi_patcher *p, const int64_t *pixels, int64_t n);

/* The standard fill callback of the loader: ctx is a hsi_patch_dataset;
 * x gets (n, C, P, P) float32 patches of pixels[samples[i]] (augmented
 * with the batch seed when augment is set), y gets (n,) int32
 * labels[samples[i]] when labels and y are set. Loader x_bytes must be
 * C*P*P*4, y_bytes 4 (or 0). */
typedef struct hsi_patch_dataset {
    const hsi_patcher *patcher;
    const int64_t *pixels; /* (n_samples,) flat pixel indices */
    const int32_t *labels; /* (n_samples,) class indices, or NULL */
    int augment;
} hsi_patch_dataset;
hsi_status hsi_patch_fill(void *ctx, const hsi_batch *b);
/* The loader's fill when the patches are cut on the GPU from a cube in
 * device memory: x gets the (n,) int64 flat pixel indices pixels[samples[i]]
 * (checked against the patcher's scene, which may live on either side), y
 * the labels as hsi_patch_fill. hsi_patches_extract of the batch's device
 * copy with augment and the batch's seed then gives, for one rank
 * (b->first = 0), the patches hsi_patch_fill would have. Loader x_bytes
 * must be 8, y_bytes 4 (or 0). */
hsi_status hsi_pixel_fill(void *ctx, const hsi_batch *b);

#ifdef __cplusplus
}
#endif
#endif
