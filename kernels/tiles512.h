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

/* 1 when this CPU also has AVX-512BW and AVX512-VNNI (vpdpwssd: two
 * int16 products added into each int32 lane, twice the multiply-adds of a
 * float FMA per instruction). */
int hsi_c512_vnni_ok(void);

/* Integer products of int16 pairs: acc (nrow rows, ld int32 apart, ncol
 * columns, ncol a multiple of 16) = sum over q < nq of a[q lda + r] .
 * b[q lda + j], where each int32 element holds two int16 values (one per
 * pixel of a pair) and "." sums their two products. Lanes wrap modulo
 * 2^32: the caller bounds nq so that the exact sums fit in int32. Tiles of
 * 12 rows x 32 columns, 24 x 16 for a last block of 16. */
void hsi_c512_rows_i16(int32_t *acc, int64_t ld, const int32_t *a, const int32_t *b, int64_t lda,
                       int64_t nq, int64_t nrow, int64_t ncol);

/* Pairs of pixels for hsi_c512_rows_i16 from nb blocks of 16 features,
 * pk + 16 b fill holding block b as (fill, 16) floats that are integers
 * below 2^24: mid[16 b + l] = floor((min + max) / 2) of feature 16 b + l
 * over the block, P[q ldp + 16 b + l] = value (2q, l) - mid in its low
 * half, (2q + 1, l) - mid in its high half (0 past fill), and colsum[16 b
 * + l] = the sum of value - mid over the fill pixels. Returns the largest
 * |value - mid|, or a number above 32767 when one does not fit int16 (or
 * a value is not below 2^24): P is then incomplete. fill <= 65536. */
uint32_t hsi_c512_pack_i16(int32_t *P, int64_t ldp, int32_t *colsum, int32_t *mid, const float *pk,
                           int64_t fill, int64_t nb);

/* The same from nf rows of 16-bit integers (row j at raw + j ld, fill
 * values, int16 when is_signed else uint16), the layout of band-major
 * blocks of a BSQ or BIL cube: mid, P (lanes nf .. ldp - 1 zero), colsum
 * and the return value as above, mid and colsum with ldp entries. */
uint32_t hsi_c512_pack_rows16(int32_t *P, int64_t ldp, int32_t *colsum, int32_t *mid,
                              const uint16_t *raw, int64_t ld, int64_t nf, int64_t fill,
                              int is_signed);

#ifdef __cplusplus
}
#endif

#endif
