/* tiles512.h — AVX-512 register tiles (internal): small implicit-gemm
 * kernels, acc (rows x 16 or 32 channels) = sum over k of a broadcast input
 * value times a 16-channel weight vector, with the rows' inputs at any
 * offsets. They are the float convolutions' tiles in models/conv_direct.c
 * (the same tiles as its AVX2 ones, on 16-float registers: 32 registers
 * hold 24 accumulators, twice the AVX2 tile's products per step) and the
 * fused pass's PCA projection (kernels/fused.c). Called only when
 * hsi_c512_cpu_ok() says the CPU has AVX-512F. Packed weights: blocks of
 * 16 output channels (nk, 16), 8-wide blocks (nk, 8) for the narrow tile. */
#ifndef HSI_TILES512_H
#define HSI_TILES512_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_C512_P2 12 /* positions of the 32-channel tile */
#define HSI_C512_P1 24 /* positions of the 16-channel and the 8-channel tiles */
#define HSI_C512_DW 8  /* rows of the weight-gradient tile */

/* 1 when this CPU has AVX-512F (and the OS saves its registers). */
int hsi_c512_cpu_ok(void);

/* acc (R rows, ld floats apart, of 16 * nb channels; nb 1 or 2) = sum over
 * k < nk of in[off[k] + r * rs] * w_b[16 k + j], with w_b = w + b * wblk
 * the packed block of channels 16 b .. 16 b + 15. R <= HSI_C512_P2 for
 * nb = 2, <= HSI_C512_P1 for nb = 1. */
void hsi_c512_tile(int nb, int R, float *acc, int64_t ld, const float *in, int64_t rs,
                   const int32_t *off, int64_t nk, const float *w, int64_t wblk);

/* The same over a whole product: acc (nrow rows, ld floats apart, of ncol
 * channels, ncol a multiple of 16) = sum over k < nk of in[off[k] + r * rs]
 * * w_b[16 k + j] for every channel block b (w_b = w + b * wblk), in tiles
 * of 12 rows x 32 channels and 24 x 16 for the last block. */
void hsi_c512_rows(float *acc, int64_t ld, const float *in, int64_t rs, const int32_t *off, int64_t nk,
                   const float *w, int64_t wblk, int64_t nrow, int64_t ncol);

/* The narrow tile (at most 8 output channels): two positions per register
 * (lanes 2j + s = channel j of position r + s), so no lane holds a zero
 * filter. acc (rows of 8) = sum over k < nk of in[off[k] + r] * w[8 k + j]
 * for r < R <= HSI_C512_P1; acc has room for R rounded up to even rows,
 * and in[off[k] + R] is read when R is odd (its products are dropped). */
void hsi_c512_tile8(int R, float *acc, const float *in, const int32_t *off, int64_t nk,
                    const float *w);

/* dwp rows r < R <= HSI_C512_DW (ld floats apart, 16 * nb channels) +=
 * sum over o < npos of in[off[r] + pos[o]] * dyt[o * ld + j]. */
void hsi_c512_dw_tile(int nb, int R, float *dwp, int64_t ld, const float *in,
                      const int32_t *off, const int32_t *pos, int64_t npos, const float *dyt);

#ifdef __cplusplus
}
#endif

#endif
