/* tiles512.c — the AVX-512 register tiles of conv_direct.c and the fused
 * pass (see tiles512.h). Each tile is written once as an always-inline function of
 * its row count R and instantiated for every R by a switch, so the
 * accumulators of a given R are registers and the unused ones vanish.
 * The accumulators are named variables, not arrays: GCC keeps an array of
 * vectors in registers but also stores it to the stack every iteration. */
#include "kernels/tiles512.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define C5_TARGET __attribute__((target("avx512f,avx2,fma")))
#define C5_INLINE static inline __attribute__((always_inline)) C5_TARGET

int hsi_c512_cpu_ok(void)
{
    static int ok = -1;
    if (ok < 0) ok = __builtin_cpu_supports("avx512f");
    return ok;
}

#define C5_DECL                                                                                \
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, z2 = z0, z3 = z0, z4 = z0, z5 = z0, z6 = z0,     \
           z7 = z0, z8 = z0, z9 = z0, z10 = z0, z11 = z0, z12 = z0, z13 = z0, z14 = z0,         \
           z15 = z0, z16 = z0, z17 = z0, z18 = z0, z19 = z0, z20 = z0, z21 = z0, z22 = z0,      \
           z23 = z0
#define C5_DECL16                                                                              \
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, z2 = z0, z3 = z0, z4 = z0, z5 = z0, z6 = z0,     \
           z7 = z0, z8 = z0, z9 = z0, z10 = z0, z11 = z0, z12 = z0, z13 = z0, z14 = z0, z15 = z0
/* rows of two registers (32 channels), of one (16 channels) */
#define C5_ROWS2(X)                                                                            \
    X(0, z0, z1) X(1, z2, z3) X(2, z4, z5) X(3, z6, z7) X(4, z8, z9) X(5, z10, z11)           \
    X(6, z12, z13) X(7, z14, z15) X(8, z16, z17) X(9, z18, z19) X(10, z20, z21)               \
    X(11, z22, z23)
#define C5_ROWS1(X)                                                                            \
    X(0, z0) X(1, z1) X(2, z2) X(3, z3) X(4, z4) X(5, z5) X(6, z6) X(7, z7) X(8, z8) X(9, z9) \
    X(10, z10) X(11, z11) X(12, z12) X(13, z13) X(14, z14) X(15, z15) X(16, z16) X(17, z17)   \
    X(18, z18) X(19, z19) X(20, z20) X(21, z21) X(22, z22) X(23, z23)

/* R <= 12 positions x 32 channels (24 accumulators, 2 filter loads and R
 * broadcasts per step) */
C5_INLINE void c5_tile2(const int R, float *restrict acc, int64_t ld, const float *in,
                        const int64_t rs, const int32_t *restrict off, int64_t nk,
                        const float *restrict w0, const float *restrict w1)
{
    C5_DECL;
    for (int64_t k = 0; k < nk; k++) {
        __m512 u0 = _mm512_loadu_ps(w0 + 16 * k), u1 = _mm512_loadu_ps(w1 + 16 * k);
        const float *p = in + off[k];
#define C5_STEP(r, a, b)                                                                       \
    if (R > r) {                                                                               \
        __m512 v = _mm512_set1_ps(p[r * rs]);                                                  \
        a = _mm512_fmadd_ps(v, u0, a);                                                         \
        b = _mm512_fmadd_ps(v, u1, b);                                                         \
    }
        C5_ROWS2(C5_STEP)
#undef C5_STEP
    }
#define C5_STORE(r, a, b)                                                                      \
    if (R > r) {                                                                               \
        _mm512_storeu_ps(acc + r * ld, a);                                                     \
        _mm512_storeu_ps(acc + r * ld + 16, b);                                                \
    }
    C5_ROWS2(C5_STORE)
#undef C5_STORE
}

/* R <= 24 positions x 16 channels */
C5_INLINE void c5_tile1(const int R, float *restrict acc, int64_t ld, const float *in,
                        const int64_t rs, const int32_t *restrict off, int64_t nk,
                        const float *restrict w0)
{
    C5_DECL;
    for (int64_t k = 0; k < nk; k++) {
        __m512 u0 = _mm512_loadu_ps(w0 + 16 * k);
        const float *p = in + off[k];
#define C5_STEP(r, a)                                                                          \
    if (R > r) a = _mm512_fmadd_ps(_mm512_set1_ps(p[r * rs]), u0, a);
        C5_ROWS1(C5_STEP)
#undef C5_STEP
    }
#define C5_STORE(r, a)                                                                         \
    if (R > r) _mm512_storeu_ps(acc + r * ld, a);
    C5_ROWS1(C5_STORE)
#undef C5_STORE
}

/* Q <= 12 pairs of positions x 8 channels: the 8 filters duplicated into
 * lanes (j, j), the two inputs of a pair broadcast as one 64-bit element
 * (lanes alternate between them); stored as two rows of 8 */
C5_INLINE void c5_tile8(const int Q, float *restrict acc, const float *in,
                        const int32_t *restrict off, int64_t nk, const float *restrict w)
{
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i split =
        _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    C5_DECL;
    for (int64_t k = 0; k < nk; k++) {
        __m512 u = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(w + 8 * k)));
        const float *p = in + off[k];
#define C5_STEP(q, a)                                                                          \
    if (Q > q) {                                                                               \
        double pair;                                                                           \
        memcpy(&pair, p + 2 * q, sizeof pair);                                                 \
        a = _mm512_fmadd_ps(_mm512_castpd_ps(_mm512_set1_pd(pair)), u, a);                     \
    }
        C5_ROWS1(C5_STEP)
#undef C5_STEP
    }
#define C5_STORE(q, a)                                                                         \
    if (Q > q) _mm512_storeu_ps(acc + 16 * q, _mm512_permutexvar_ps(split, a));
    C5_ROWS1(C5_STORE)
#undef C5_STORE
}

/* dwp rows r < R <= 8 (+=) over npos positions, 16 * NB channels */
C5_INLINE void c5_dw(const int NB, const int R, float *restrict dwp, int64_t ld,
                     const float *in, const int32_t *restrict off, const int32_t *restrict pos,
                     int64_t npos, const float *restrict dyt)
{
    C5_DECL16;
    const float *b0 = in + off[0], *b1 = R > 1 ? in + off[1] : in, *b2 = R > 2 ? in + off[2] : in,
                *b3 = R > 3 ? in + off[3] : in, *b4 = R > 4 ? in + off[4] : in,
                *b5 = R > 5 ? in + off[5] : in, *b6 = R > 6 ? in + off[6] : in,
                *b7 = R > 7 ? in + off[7] : in;
#define C5_ROWSDW(X)                                                                           \
    X(0, z0, z1) X(1, z2, z3) X(2, z4, z5) X(3, z6, z7) X(4, z8, z9) X(5, z10, z11)           \
    X(6, z12, z13) X(7, z14, z15)
#define C5_LOAD(r, x, y)                                                                       \
    if (R > r) {                                                                               \
        x = _mm512_loadu_ps(dwp + r * ld);                                                     \
        if (NB > 1) y = _mm512_loadu_ps(dwp + r * ld + 16);                                    \
    }
    C5_ROWSDW(C5_LOAD)
#undef C5_LOAD
    for (int64_t o = 0; o < npos; o++, dyt += ld) {
        __m512 d0 = _mm512_loadu_ps(dyt), d1 = NB > 1 ? _mm512_loadu_ps(dyt + 16) : d0;
        int32_t p = pos[o];
#define C5_STEP(r, x, y)                                                                       \
    if (R > r) {                                                                               \
        __m512 v = _mm512_set1_ps(b##r[p]);                                                    \
        x = _mm512_fmadd_ps(v, d0, x);                                                         \
        if (NB > 1) y = _mm512_fmadd_ps(v, d1, y);                                             \
    }
        C5_ROWSDW(C5_STEP)
#undef C5_STEP
    }
#define C5_STORE(r, x, y)                                                                      \
    if (R > r) {                                                                               \
        _mm512_storeu_ps(dwp + r * ld, x);                                                     \
        if (NB > 1) _mm512_storeu_ps(dwp + r * ld + 16, y);                                    \
    }
    C5_ROWSDW(C5_STORE)
#undef C5_STORE
#undef C5_ROWSDW
}

#define C5_CASES8(C) C(8) C(7) C(6) C(5) C(4) C(3) C(2)
#define C5_CASES12(C) C(12) C(11) C(10) C(9) C5_CASES8(C)
#define C5_CASES24(C)                                                                          \
    C(24) C(23) C(22) C(21) C(20) C(19) C(18) C(17) C(16) C(15) C(14) C(13) C5_CASES12(C)

C5_TARGET void hsi_c512_tile(int nb, int R, float *acc, int64_t ld, const float *in, int64_t rs,
                             const int32_t *off, int64_t nk, const float *w, int64_t wblk)
{
#define C5_T2(n)                                                                               \
    case n: c5_tile2(n, acc, ld, in, rs, off, nk, w, w + wblk); break;
#define C5_T1(n)                                                                               \
    case n: c5_tile1(n, acc, ld, in, rs, off, nk, w); break;
    if (nb > 1)
        switch (R) {
            C5_CASES12(C5_T2)
        default: c5_tile2(1, acc, ld, in, rs, off, nk, w, w + wblk);
        }
    else
        switch (R) {
            C5_CASES24(C5_T1)
        default: c5_tile1(1, acc, ld, in, rs, off, nk, w);
        }
#undef C5_T2
#undef C5_T1
}

C5_TARGET void hsi_c512_tile8(int R, float *acc, const float *in, const int32_t *off, int64_t nk,
                              const float *w)
{
#define C5_T(n)                                                                                \
    case n: c5_tile8(n, acc, in, off, nk, w); break;
    switch ((R + 1) / 2) {
        C5_CASES12(C5_T)
    default: c5_tile8(1, acc, in, off, nk, w);
    }
#undef C5_T
}

C5_TARGET void hsi_c512_dw_tile(int nb, int R, float *dwp, int64_t ld, const float *in,
                                const int32_t *off, const int32_t *pos, int64_t npos,
                                const float *dyt)
{
#define C5_D2(n)                                                                               \
    case n: c5_dw(2, n, dwp, ld, in, off, pos, npos, dyt); break;
#define C5_D1(n)                                                                               \
    case n: c5_dw(1, n, dwp, ld, in, off, pos, npos, dyt); break;
    if (nb > 1)
        switch (R) {
            C5_CASES8(C5_D2)
        default: c5_dw(2, 1, dwp, ld, in, off, pos, npos, dyt);
        }
    else
        switch (R) {
            C5_CASES8(C5_D1)
        default: c5_dw(1, 1, dwp, ld, in, off, pos, npos, dyt);
        }
#undef C5_D2
#undef C5_D1
}


void hsi_c512_rows(float *acc, int64_t ld, const float *in, int64_t rs, const int32_t *off, int64_t nk,
                   const float *w, int64_t wblk, int64_t nrow, int64_t ncol)
{
    int64_t tk;
    for (int64_t k0 = 0; k0 < ncol; k0 += tk) {
        tk = ncol - k0 > 16 ? 32 : 16;
        int tp = tk == 32 ? HSI_C512_P2 : HSI_C512_P1;
        for (int64_t r0 = 0; r0 < nrow; r0 += tp) {
            int R = (int)(nrow - r0 < tp ? nrow - r0 : tp);
            hsi_c512_tile((int)(tk / 16), R, acc + r0 * ld + k0, ld, in + r0 * rs, rs, off, nk,
                          w + k0 / 16 * wblk, wblk);
        }
    }
}

/* ------------------------------------------------ int16 pairs (VNNI) */

#define I5_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))
#define I5_INLINE static inline __attribute__((always_inline)) I5_TARGET

int hsi_c512_vnni_ok(void)
{
    static int ok = -1;
    if (ok < 0)
        ok = hsi_c512_cpu_ok() && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    return ok;
}

#define I5_DECL                                                                                \
    __m512i z0 = _mm512_setzero_si512(), z1 = z0, z2 = z0, z3 = z0, z4 = z0, z5 = z0, z6 = z0, \
            z7 = z0, z8 = z0, z9 = z0, z10 = z0, z11 = z0, z12 = z0, z13 = z0, z14 = z0,        \
            z15 = z0, z16 = z0, z17 = z0, z18 = z0, z19 = z0, z20 = z0, z21 = z0, z22 = z0,     \
            z23 = z0

/* R <= 12 rows x 32 columns: per pair of pixels 2 column loads, R
 * broadcasts, 2 R vpdpwssd */
I5_INLINE void i5_tile2(const int R, int32_t *restrict acc, int64_t ld, const int32_t *a,
                        const int32_t *b, int64_t lda, int64_t nq)
{
    I5_DECL;
    for (int64_t q = 0; q < nq; q++, a += lda, b += lda) {
        __m512i u0 = _mm512_loadu_si512(b), u1 = _mm512_loadu_si512(b + 16);
#define I5_STEP(r, x, y)                                                                       \
    if (R > r) {                                                                               \
        __m512i v = _mm512_set1_epi32(a[r]);                                                   \
        x = _mm512_dpwssd_epi32(x, v, u0);                                                     \
        y = _mm512_dpwssd_epi32(y, v, u1);                                                     \
    }
        C5_ROWS2(I5_STEP)
#undef I5_STEP
    }
#define I5_STORE(r, x, y)                                                                      \
    if (R > r) {                                                                               \
        _mm512_storeu_si512(acc + r * ld, x);                                                  \
        _mm512_storeu_si512(acc + r * ld + 16, y);                                             \
    }
    C5_ROWS2(I5_STORE)
#undef I5_STORE
}

/* R <= 24 rows x 16 columns */
I5_INLINE void i5_tile1(const int R, int32_t *restrict acc, int64_t ld, const int32_t *a,
                        const int32_t *b, int64_t lda, int64_t nq)
{
    I5_DECL;
    for (int64_t q = 0; q < nq; q++, a += lda, b += lda) {
        __m512i u0 = _mm512_loadu_si512(b);
#define I5_STEP(r, x)                                                                          \
    if (R > r) x = _mm512_dpwssd_epi32(x, _mm512_set1_epi32(a[r]), u0);
        C5_ROWS1(I5_STEP)
#undef I5_STEP
    }
#define I5_STORE(r, x)                                                                         \
    if (R > r) _mm512_storeu_si512(acc + r * ld, x);
    C5_ROWS1(I5_STORE)
#undef I5_STORE
}

static I5_TARGET void i5_tile(int nb, int R, int32_t *acc, int64_t ld, const int32_t *a,
                              const int32_t *b, int64_t lda, int64_t nq)
{
#define I5_T2(n)                                                                               \
    case n: i5_tile2(n, acc, ld, a, b, lda, nq); break;
#define I5_T1(n)                                                                               \
    case n: i5_tile1(n, acc, ld, a, b, lda, nq); break;
    if (nb > 1)
        switch (R) {
            C5_CASES12(I5_T2)
        default: i5_tile2(1, acc, ld, a, b, lda, nq);
        }
    else
        switch (R) {
            C5_CASES24(I5_T1)
        default: i5_tile1(1, acc, ld, a, b, lda, nq);
        }
#undef I5_T2
#undef I5_T1
}

void hsi_c512_rows_i16(int32_t *acc, int64_t ld, const int32_t *a, const int32_t *b, int64_t lda,
                       int64_t nq, int64_t nrow, int64_t ncol)
{
    int64_t tk;
    for (int64_t k0 = 0; k0 < ncol; k0 += tk) {
        tk = ncol - k0 > 16 ? 32 : 16;
        int tp = tk == 32 ? HSI_C512_P2 : HSI_C512_P1;
        for (int64_t r0 = 0; r0 < nrow; r0 += tp) {
            int R = (int)(nrow - r0 < tp ? nrow - r0 : tp);
            i5_tile((int)(tk / 16), R, acc + r0 * ld + k0, ld, a + r0, b + k0, lda, nq);
        }
    }
}

I5_TARGET uint32_t hsi_c512_pack_i16(int32_t *P, int64_t ldp, int32_t *colsum, int32_t *mid,
                                     const float *pk, int64_t fill, int64_t nb)
{
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    __m512i big = _mm512_setzero_si512(), ends = big;
    for (int64_t b = 0; b < nb; b++) {
        const float *x = pk + 16 * b * fill;
        /* the midpoint of each feature's range in the block: |value - mid|
         * is then at most half the range */
        __m512 mn = _mm512_loadu_ps(x), mx = mn;
        for (int64_t k = 1; k < fill; k++) {
            __m512 v = _mm512_loadu_ps(x + 16 * k);
            mn = _mm512_min_ps(mn, v);
            mx = _mm512_max_ps(mx, v);
        }
        /* out-of-range floats convert to INT32_MIN: |.| as unsigned is 2^31 */
        __m512i lo = _mm512_cvtps_epi32(mn), hi = _mm512_cvtps_epi32(mx);
        ends = _mm512_max_epu32(ends, _mm512_max_epu32(_mm512_abs_epi32(lo), _mm512_abs_epi32(hi)));
        __m512i m = _mm512_srai_epi32(_mm512_add_epi32(lo, hi), 1), sum = _mm512_setzero_si512();
        _mm512_storeu_si512(mid + 16 * b, m);
        for (int64_t k = 0; k < fill; k += 2) {
            __m512i v0 = _mm512_sub_epi32(_mm512_cvtps_epi32(_mm512_loadu_ps(x + 16 * k)), m);
            __m512i v1 = k + 1 < fill
                             ? _mm512_sub_epi32(_mm512_cvtps_epi32(_mm512_loadu_ps(x + 16 * k + 16)), m)
                             : _mm512_setzero_si512();
            big = _mm512_max_epu32(big, _mm512_max_epu32(_mm512_abs_epi32(v0), _mm512_abs_epi32(v1)));
            sum = _mm512_add_epi32(sum, _mm512_add_epi32(v0, v1));
            _mm512_storeu_si512(P + k / 2 * ldp + 16 * b,
                                _mm512_or_si512(_mm512_and_si512(v0, lo16), _mm512_slli_epi32(v1, 16)));
        }
        _mm512_storeu_si512(colsum + 16 * b, sum);
    }
    if (_mm512_reduce_max_epu32(ends) >= (1u << 24)) return UINT32_MAX; /* not exact in float */
    return (uint32_t)_mm512_reduce_max_epu32(big);
}

/* r[i] (16 rows of 16 int32) becomes its transpose */
I5_INLINE void i5_transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
            t[8 * i + 4 + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0xdd);
        }
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
        r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
    }
}

I5_TARGET uint32_t hsi_c512_pack_rows16(int32_t *P, int64_t ldp, int32_t *colsum, int32_t *mid,
                                        const uint16_t *raw, int64_t ld, int64_t nf, int64_t fill,
                                        int is_signed)
{
    uint32_t big = 0;
    /* each row's range: mid its midpoint, |x - mid| at most half of it */
    for (int64_t j = 0; j < nf; j++) {
        const uint16_t *x = raw + j * ld;
        int32_t lo, hi;
        if (is_signed) {
            int16_t a = (int16_t)x[0], b = a;
            for (int64_t k = 1; k < fill; k++) {
                int16_t v = (int16_t)x[k];
                a = v < a ? v : a;
                b = v > b ? v : b;
            }
            lo = a, hi = b;
        } else {
            uint16_t a = x[0], b = a;
            for (int64_t k = 1; k < fill; k++) {
                a = x[k] < a ? x[k] : a;
                b = x[k] > b ? x[k] : b;
            }
            lo = a, hi = b;
        }
        mid[j] = (lo + hi) >> 1;
        uint32_t r = (uint32_t)(hi - mid[j] > mid[j] - lo ? hi - mid[j] : mid[j] - lo);
        big = r > big ? r : big;
    }
    if (big > 32767) return big;
    for (int64_t j = nf; j < ldp; j++) mid[j] = 0;
    const __m512i ones = _mm512_set1_epi16(1);
    int64_t full = fill / 32 * 32; /* pixels in whole 16 x 16 blocks of pairs */
    for (int64_t j0 = 0; j0 < ldp; j0 += 16) {
        __m512i r[16], sum[16], m[16];
        for (int i = 0; i < 16; i++) {
            sum[i] = _mm512_setzero_si512();
            m[i] = _mm512_set1_epi16((short)mid[j0 + i]);
        }
        for (int64_t k0 = 0; k0 < full; k0 += 32) {
            /* 16 rows of 32 values: 16 pairs each, x - mid in 16-bit lanes
             * (exact: |x - mid| <= 32767), then pair-major by the transpose */
            for (int i = 0; i < 16; i++) {
                r[i] = j0 + i < nf ? _mm512_sub_epi16(_mm512_loadu_si512(raw + (j0 + i) * ld + k0), m[i])
                                   : _mm512_setzero_si512();
                sum[i] = _mm512_add_epi32(sum[i], _mm512_madd_epi16(r[i], ones));
            }
            i5_transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(P + (k0 / 2 + i) * ldp + j0, r[i]);
        }
        for (int i = 0; i < 16; i++) {
            int64_t j = j0 + i;
            int32_t s = _mm512_reduce_add_epi32(sum[i]);
            for (int64_t k = full; k < fill + (fill & 1); k += 2) {
                int32_t z0 = j < nf ? (is_signed ? (int16_t)raw[j * ld + k] : raw[j * ld + k]) - mid[j] : 0;
                int32_t z1 = j < nf && k + 1 < fill
                                 ? (is_signed ? (int16_t)raw[j * ld + k + 1] : raw[j * ld + k + 1]) - mid[j]
                                 : 0;
                s += z0 + z1;
                P[k / 2 * ldp + j] = (int32_t)((uint32_t)(z0 & 0xffff) | (uint32_t)z1 << 16);
            }
            colsum[j] = s;
        }
    }
    return big;
}

#else /* not x86-64: never called (hsi_c512_cpu_ok is 0) */

int hsi_c512_cpu_ok(void) { return 0; }

void hsi_c512_tile(int nb, int R, float *acc, int64_t ld, const float *in, int64_t rs,
                   const int32_t *off, int64_t nk, const float *w, int64_t wblk)
{
    (void)nb, (void)R, (void)acc, (void)ld, (void)in, (void)rs, (void)off, (void)nk, (void)w,
        (void)wblk;
}
void hsi_c512_rows(float *acc, int64_t ld, const float *in, int64_t rs, const int32_t *off, int64_t nk,
                   const float *w, int64_t wblk, int64_t nrow, int64_t ncol)
{
    (void)acc, (void)ld, (void)in, (void)rs, (void)off, (void)nk, (void)w, (void)wblk, (void)nrow,
        (void)ncol;
}
void hsi_c512_tile8(int R, float *acc, const float *in, const int32_t *off, int64_t nk,
                    const float *w)
{
    (void)R, (void)acc, (void)in, (void)off, (void)nk, (void)w;
}
void hsi_c512_dw_tile(int nb, int R, float *dwp, int64_t ld, const float *in,
                      const int32_t *off, const int32_t *pos, int64_t npos, const float *dyt)
{
    (void)nb, (void)R, (void)dwp, (void)ld, (void)in, (void)off, (void)pos, (void)npos,
        (void)dyt;
}
int hsi_c512_vnni_ok(void) { return 0; }
uint32_t hsi_c512_pack_i16(int32_t *P, int64_t ldp, int32_t *colsum, int32_t *mid, const float *pk,
                           int64_t fill, int64_t nb)
{
    (void)P, (void)ldp, (void)colsum, (void)mid, (void)pk, (void)fill, (void)nb;
    return UINT32_MAX;
}
uint32_t hsi_c512_pack_rows16(int32_t *P, int64_t ldp, int32_t *colsum, int32_t *mid,
                              const uint16_t *raw, int64_t ld, int64_t nf, int64_t fill,
                              int is_signed)
{
    (void)P, (void)ldp, (void)colsum, (void)mid, (void)raw, (void)ld, (void)nf, (void)fill,
        (void)is_signed;
    return UINT32_MAX;
}
void hsi_c512_rows_i16(int32_t *acc, int64_t ld, const int32_t *a, const int32_t *b, int64_t lda,
                       int64_t nq, int64_t nrow, int64_t ncol)
{
    (void)acc, (void)ld, (void)a, (void)b, (void)lda, (void)nq, (void)nrow, (void)ncol;
}
#endif
