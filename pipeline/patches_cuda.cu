/* patches_cuda.cu — patch extraction on the GPU (see patches_cuda.h): one
 * thread per output element; the sample's flips/rotation and its noise
 * stream are recomputed from the sample seed with prng.h's splitmix64
 * formulas (counter-based, so any element can find its own draws). Not the
 * loader and not the CPU extractor. */
#include <math.h>
#include <string.h>

#include "kernels/cuda_internal.h"
#include "pipeline/cuda_ops.h"
#include "pipeline/patches_cuda.h"

#define PC_THREADS 256
#define PC_GOLDEN 0x9E3779B97F4A7C15ull

/* prng.h's hsi_prng_mix64 / hsi_prng_key, on the device (must stay equal) */
__device__ __forceinline__ uint64_t pc_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ uint64_t pc_key(uint64_t seed, uint64_t v)
{
    return pc_mix64(pc_mix64(seed + PC_GOLDEN) ^ (v * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull));
}

/* k-th output (k >= 1) of a stream initialised with key */
__device__ __forceinline__ uint64_t pc_nth(uint64_t key, uint64_t k)
{
    return pc_mix64(pc_mix64(key) + k * PC_GOLDEN);
}

__device__ __forceinline__ double pc_unif(uint64_t x) { return (double)(x >> 11) * 0x1.0p-53; }

/* patches.c's pad_index: index t of an axis of length n after padding; -1 = zero */
__device__ __forceinline__ int64_t pc_pad(int64_t t, int64_t n, int zero_pad)
{
    if (t >= 0 && t < n) return t;
    if (zero_pad) return -1;
    if (n == 1) return 0;
    int64_t period = 2 * (n - 1);
    t %= period;
    if (t < 0) t += period;
    return t < n ? t : period - t;
}

typedef struct pc_args {
    const float *cube;
    int64_t sb, sy, sx, C, L, S;
    int P, zero_pad, augment, flips, rotations;
    float noise_std;
    uint64_t seed;
} pc_args;

__global__ void patches_kernel(float *out, const int64_t *pixels, int64_t n, pc_args a)
{
    int64_t PP = (int64_t)a.P * a.P, per = a.C * PP, total = n * per;
    int r = a.P / 2;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t smp = i / per, e = i - smp * per, c = e / PP, q = e - c * PP;
        int pi = (int)(q / a.P), pj = (int)(q % a.P);
        int64_t pixel = pixels[smp];
        if (pixel < 0 || pixel >= a.L * a.S) {
            out[i] = NAN;
            continue;
        }
        int64_t cy = pixel / a.S, cx = pixel % a.S;
        int u = pi, v = pj;
        uint64_t noise_key = 0;
        if (a.augment) {
            uint64_t sseed = pc_key(a.seed ^ 0x7061746368ull, (uint64_t)smp);
            uint64_t d = pc_nth(sseed, 1);
            int flip_ud = a.flips ? (int)(d & 1) : 0, flip_lr = a.flips ? (int)((d >> 1) & 1) : 0;
            int rot = a.rotations ? (int)((d >> 2) & 3) : 0;
            noise_key = pc_nth(sseed, 2);
            /* undo the rotations (rot90: out[i][j] = in[j][P-1-i]), then the flips */
            for (int k = 0; k < rot; k++) {
                int t = u;
                u = v;
                v = a.P - 1 - t;
            }
            if (flip_lr) v = a.P - 1 - v;
            if (flip_ud) u = a.P - 1 - u;
        }
        int64_t ys = pc_pad(cy - r + u, a.L, a.zero_pad), xs = pc_pad(cx - r + v, a.S, a.zero_pad);
        float val = (ys < 0 || xs < 0) ? 0.0f : a.cube[c * a.sb + ys * a.sy + xs * a.sx];
        if (a.augment && a.noise_std > 0) {
            /* element e of the sample uses draws 2*(e/2)+1 and 2*(e/2)+2 (Box-Muller pair) */
            uint64_t k = 2 * (uint64_t)(e / 2);
            double u1 = 1.0 - pc_unif(pc_nth(noise_key, k + 1)), u2 = pc_unif(pc_nth(noise_key, k + 2));
            double m = sqrt(-2.0 * log(u1)) * (double)a.noise_std, ang = 6.283185307179586 * u2;
            val += (float)(m * ((e & 1) ? sin(ang) : cos(ang)));
        }
        out[i] = val;
    }
}

extern "C" hsi_status hsi_patches_extract_cuda(float *out, const hsi_view *cube, int patch,
                                               hsi_pad_mode pad, const hsi_augment *aug,
                                               const int64_t *pixels, int64_t n, int augment,
                                               uint64_t seed)
{
    const char *what = "patches (CUDA)";
    HSI_CU_TRY(hsi_cuda_require(what));
    if (!cube || !cube->buf || cube->ndim != 3)
        return hsi_fail(HSI_ERR_ARG, "%s: expected a (bands, lines, samples) cube", what);
    if (cube->buf->kind != HSI_BUF_DEVICE || cube->dtype != HSI_F32 || cube->swapped)
        return hsi_fail(HSI_ERR_UNSUPPORTED,
                        "%s: expected a float32 device cube in native byte order, found %s %s%s",
                        what, cube->buf->kind == HSI_BUF_DEVICE ? "device" : "host",
                        hsi_dtype_name(cube->dtype), cube->swapped ? " byte-swapped" : "");
    if (patch < 1 || patch % 2 == 0 || patch > HSI_PATCH_MAX)
        return hsi_fail(HSI_ERR_ARG, "%s: patch size must be odd and in [1, %d] (found %d)", what,
                        HSI_PATCH_MAX, patch);
    if (pad != HSI_PAD_MIRROR && pad != HSI_PAD_ZERO)
        return hsi_fail(HSI_ERR_ARG, "%s: unknown padding mode %d", what, (int)pad);
    if (cube->offset % 4 || cube->strides[0] % 4 || cube->strides[1] % 4 || cube->strides[2] % 4)
        return hsi_fail(HSI_ERR_UNSUPPORTED, "%s: cube offset/strides are not multiples of 4", what);
    for (int k = 0; k < 3; k++)
        if (cube->shape[k] <= 0) return hsi_fail(HSI_ERR_ARG, "%s: empty cube", what);
    if (aug && !(aug->noise_std >= 0))
        return hsi_fail(HSI_ERR_ARG, "%s: noise_std must be >= 0 (found %g)", what,
                        (double)aug->noise_std);
    if (n <= 0) return HSI_OK;
    pc_args a;
    memset(&a, 0, sizeof a);
    a.cube = (const float *)((const char *)cube->buf->data + cube->offset);
    a.sb = cube->strides[0] / 4;
    a.sy = cube->strides[1] / 4;
    a.sx = cube->strides[2] / 4;
    a.C = cube->shape[0];
    a.L = cube->shape[1];
    a.S = cube->shape[2];
    a.P = patch;
    a.zero_pad = pad == HSI_PAD_ZERO;
    a.augment = augment && aug;
    a.flips = aug ? aug->flips : 0;
    a.rotations = aug ? aug->rotations : 0;
    a.noise_std = aug ? aug->noise_std : 0.0f;
    a.seed = seed;
    int64_t total = n * a.C * patch * patch;
    patches_kernel<<<hsi_cu_blocks(total, PC_THREADS), PC_THREADS, 0, hsi_cu_stream()>>>(out, pixels,
                                                                                        n, a);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

/* ------------------------------------------------------ the plugin table */

/* This layer's part of the plugin's table (see cuda_ops.h). */
static hsi_cuda_pipeline_ops make_ops(void)
{
    hsi_cuda_pipeline_ops t;
    memset(&t, 0, sizeof t);
    t.patches_extract = hsi_patches_extract_cuda;
    return t;
}

extern "C" const hsi_cuda_pipeline_ops *hsi_cu_pipeline_ops(void)
{
    static const hsi_cuda_pipeline_ops ops = make_ops(); /* thread-safe static init */
    return &ops;
}
