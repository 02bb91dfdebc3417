/* stats.c — per-band mean/std/min/max/count (+ histogram, percentiles) over
 * any strided cube: blocks of pixels are converted to double, reduced with
 * an in-cache two-pass (mean, then sum of squared deviations) and merged
 * with Chan's formula, per thread, then across threads in thread order.
 * Also a naive reference. Not a reader: it takes views. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "kern_internal.h"
#include "kernels/cuda.h"

void hsi_stats_merge(int64_t *na, double *mean_a, double *m2_a, int64_t nb, double mean_b,
                     double m2_b)
{
    if (nb == 0) return;
    if (*na == 0) {
        *na = nb;
        *mean_a = mean_b;
        *m2_a = m2_b;
        return;
    }
    double n = (double)(*na + nb), d = mean_b - *mean_a;
    *mean_a += d * (double)nb / n;
    *m2_a += m2_b + d * d * (double)(*na) * (double)nb / n;
    *na += nb;
}

void hsi_stats_free(hsi_stats *s)
{
    if (!s) return;
    free(s->count);
    free(s->mean);
    free(s->std);
    free(s->var);
    free(s->var_ddof1);
    free(s->min);
    free(s->max);
    free(s->hist);
    free(s->percentile);
    memset(s, 0, sizeof *s);
}

static hsi_status stats_alloc(hsi_stats *s, int64_t nb, const hsi_stats_opts *o)
{
    memset(s, 0, sizeof *s);
    s->n_bands = nb;
    size_t n = (size_t)(nb > 0 ? nb : 1);
    s->count = calloc(n, sizeof(int64_t));
    s->mean = calloc(n, sizeof(double));
    s->std = calloc(n, sizeof(double));
    s->var = calloc(n, sizeof(double));
    s->var_ddof1 = calloc(n, sizeof(double));
    s->min = calloc(n, sizeof(double));
    s->max = calloc(n, sizeof(double));
    int ok = s->count && s->mean && s->std && s->var && s->var_ddof1 && s->min && s->max;
    if (o && o->hist_bins > 0) {
        s->hist_bins = o->hist_bins;
        s->hist = calloc(n * (size_t)o->hist_bins, sizeof(int64_t));
        ok = ok && s->hist;
        if (o->n_percentiles > 0) {
            s->n_percentiles = o->n_percentiles;
            s->percentile = calloc(n * (size_t)o->n_percentiles, sizeof(double));
            ok = ok && s->percentile;
        }
    }
    if (!ok) {
        hsi_stats_free(s);
        return HSI_FAIL(HSI_ERR_NOMEM, "stats: cannot allocate results for %lld bands", (long long)nb);
    }
    return HSI_OK;
}

static hsi_status check_opts(const hsi_view *cube, const hsi_stats_opts *o)
{
    hsi_status st = hsi_kern_check_cube(cube, "stats");
    if (st != HSI_OK) return st;
    if (o && o->split && o->split->n_parts > 1 && o->hist_bins > 0)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "stats: histograms and percentiles are not split across processes");
    if (o && o->hist_bins < 0)
        return HSI_FAIL(HSI_ERR_ARG, "stats: hist_bins must be >= 0, found %d", o->hist_bins);
    if (o && o->n_percentiles > 0) {
        if (o->hist_bins <= 0 || !o->percentiles)
            return HSI_FAIL(HSI_ERR_ARG, "stats: percentiles need hist_bins > 0 and a percentile array");
        for (int i = 0; i < o->n_percentiles; i++)
            if (!(o->percentiles[i] >= 0 && o->percentiles[i] <= 100))
                return HSI_FAIL(HSI_ERR_ARG, "stats: percentile %d must be in [0, 100], found %g", i,
                                o->percentiles[i]);
    }
    return HSI_OK;
}

/* numpy.histogram's bin index for x in [lo, hi] with equal bins. */
static inline int64_t hist_bin(double x, double lo, double hi, int bins)
{
    if (!(hi > lo)) return 0;
    double norm = bins / (hi - lo);
    int64_t i = (int64_t)((x - lo) * norm);
    if (i >= bins) i = bins - 1;
    if (i < 0) i = 0;
    /* numpy corrects the index against the linspace edges */
    double e0 = lo + (hi - lo) * (double)i / bins, e1 = lo + (hi - lo) * (double)(i + 1) / bins;
    if (i == bins - 1) e1 = hi;
    if (x < e0 && i > 0) i--;
    else if (x >= e1 && i < bins - 1) i++;
    return i;
}

/* ------------------------------------------------ exact integer fast path */

/* 8/16-bit integer cubes without mask or ignore value: per row (or per line
 * of spectra) exact integer sums and sums of squares read straight from the
 * mapped bytes (unaligned, swapped or not), turned into (mean, M2) exactly
 * and merged with Chan's formula. */
typedef uint16_t u16u __attribute__((aligned(1), may_alias));

#define ROW_LOOP(CONV)                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                              \
        int32_t v = CONV;                                                                          \
        s += v;                                                                                    \
        q += (uint64_t)((uint32_t)v * (uint32_t)v);                                                \
        mn = v < mn ? v : mn;                                                                      \
        mx = v > mx ? v : mx;                                                                      \
    }

#ifdef __AVX2__
/* Adds cnt values' sums taken in the flipped domain x' (row_16bit_avx2)
 * to the exact sums of x: sum x = sum x' + 32768 cnt, sum x^2 = sum x'^2
 * + 65536 sum x' + 2^30 cnt (uint16; int16 needs no shift). */
static inline void fold_16bit(int is_u16, int64_t cnt, int64_t sx, uint64_t qx, int32_t m0, int32_t m1,
                              int64_t *s, uint64_t *q, int32_t *mn, int32_t *mx)
{
    int32_t off = is_u16 ? 32768 : 0;
    *s += sx + (int64_t)off * cnt;
    *q += qx + (is_u16 ? (uint64_t)65536 * (uint64_t)sx + ((uint64_t)cnt << 30) : 0);
    *mn = m0 + off < *mn ? m0 + off : *mn;
    *mx = m1 + off > *mx ? m1 + off : *mx;
}

/* 16-bit rows in native order, 16 values a step: x' = x (int16) or
 * x - 32768 (uint16, by flipping the top bit) so that madd_epi16 gives the
 * pair sums of x' (into int32 lanes, widened every 16 Ki steps before they
 * could overflow) and of x'^2 (each at most 2^31: uint32, widened at once);
 * then sum x = sum x' + 32768 n and sum x^2 = sum x'^2 + 65536 sum x' +
 * 2^30 n. Exact integers: the same results as the scalar loop. Returns the
 * values done (a multiple of 16); the caller does the rest. */
static int64_t row_16bit_avx2(const u16u *w, int64_t n, int is_u16, int64_t *s, uint64_t *q, int32_t *mn,
                              int32_t *mx)
{
    int64_t nv = n / 16;
    if (nv == 0) return 0;
    const __m256i flip = _mm256_set1_epi16(is_u16 ? (short)0x8000 : 0), ones = _mm256_set1_epi16(1);
    const __m256i lo32 = _mm256_set1_epi64x(0xffffffff);
    __m256i vmn = _mm256_set1_epi16(0x7fff), vmx = _mm256_set1_epi16((short)0x8000);
    __m256i q64 = _mm256_setzero_si256(), s64 = _mm256_setzero_si256();
    for (int64_t i0 = 0; i0 < nv; i0 += 16384) {
        int64_t i1 = i0 + 16384 < nv ? i0 + 16384 : nv;
        __m256i s32 = _mm256_setzero_si256();
        for (int64_t i = i0; i < i1; i++) {
            __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + 16 * i)), flip);
            vmn = _mm256_min_epi16(vmn, x);
            vmx = _mm256_max_epi16(vmx, x);
            s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(x, ones));
            __m256i p2 = _mm256_madd_epi16(x, x);
            q64 = _mm256_add_epi64(q64, _mm256_and_si256(p2, lo32));
            q64 = _mm256_add_epi64(q64, _mm256_srli_epi64(p2, 32));
        }
        s64 = _mm256_add_epi64(s64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(s32)));
        s64 = _mm256_add_epi64(s64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(s32, 1)));
    }
    int64_t sl[4], sx = 0;
    uint64_t ql[4], qx = 0;
    int16_t ml[16], xl[16];
    _mm256_storeu_si256((__m256i *)sl, s64);
    _mm256_storeu_si256((__m256i *)ql, q64);
    _mm256_storeu_si256((__m256i *)ml, vmn);
    _mm256_storeu_si256((__m256i *)xl, vmx);
    for (int k = 0; k < 4; k++) {
        sx += sl[k];
        qx += ql[k];
    }
    int32_t m0 = INT16_MAX, m1 = INT16_MIN;
    for (int k = 0; k < 16; k++) {
        m0 = ml[k] < m0 ? ml[k] : m0;
        m1 = xl[k] > m1 ? xl[k] : m1;
    }
    fold_16bit(is_u16, 16 * nv, sx, qx, m0, m1, s, q, mn, mx);
    return 16 * nv;
}
#endif

static void row_int(const uint8_t *p, int64_t n, hsi_dtype dt, int sw, int64_t *sum, uint64_t *sq,
                    int32_t *mnp, int32_t *mxp)
{
    int64_t s = 0;
    uint64_t q = 0;
    int32_t mn = INT32_MAX, mx = INT32_MIN;
    const u16u *w = (const u16u *)p;
#ifdef __AVX2__
    if ((dt == HSI_U16 || dt == HSI_I16) && !sw) {
        int64_t done = row_16bit_avx2(w, n, dt == HSI_U16, &s, &q, &mn, &mx);
        w += done;
        p += 2 * done;
        n -= done;
    }
#endif
    if (dt == HSI_U8) {
        ROW_LOOP(p[i])
    } else if (dt == HSI_U16) {
        if (sw) {
            ROW_LOOP(__builtin_bswap16(w[i]))
        } else {
            ROW_LOOP(w[i])
        }
    } else {
        if (sw) {
            ROW_LOOP((int16_t)__builtin_bswap16(w[i]))
        } else {
            ROW_LOOP((int16_t)w[i])
        }
    }
    *sum = s;
    *sq = q;
    *mnp = mn;
    *mxp = mx;
}

#define PIX_LOOP(CONV)                                                                             \
    for (int64_t px = 0; px < np; px++) {                                                          \
        const uint8_t *p = base + px * ss;                                                         \
        const u16u *w = (const u16u *)p;                                                           \
        (void)w;                                                                                   \
        for (int64_t j = j0; j < nb; j++) {                                                        \
            int32_t v = CONV;                                                                      \
            sum[j] += v;                                                                           \
            sq[j] += (uint64_t)((uint32_t)v * (uint32_t)v);                                        \
            mn[j] = v < mn[j] ? v : mn[j];                                                         \
            mx[j] = v > mx[j] ? v : mx[j];                                                         \
        }                                                                                          \
    }

#ifdef __AVX2__
/* The accumulators (pix_16bit_avx2) of gn <= 64 groups of 16 bands from
 * base, over pixels [px0, px1) ss bytes apart; is_u16 a constant where it
 * is inlined, so each dtype gets its own loop. */
static inline __attribute__((always_inline)) void pix_16bit_block(const uint8_t *base, int64_t ss,
                                                                  int64_t px0, int64_t px1,
                                                                  int64_t gn, int is_u16,
                                                                  __m256i *acc)
{
    const __m256i flip = _mm256_set1_epi16(is_u16 ? (short)0x8000 : 0);
    for (int64_t g = 0; g < gn; g++) {
        __m256i *a = acc + 10 * g;
        a[0] = _mm256_set1_epi16(0x7fff);
        a[1] = _mm256_set1_epi16((short)0x8000);
        for (int k = 2; k < 10; k++) a[k] = _mm256_setzero_si256();
    }
    for (int64_t px = px0; px < px1;) {
        for (int64_t k1 = px + 3 < px1 ? px + 3 : px1; px < k1; px++) {
            const uint8_t *p = base + px * ss;
            for (int64_t g = 0; g < gn; g++) {
                __m256i *a = acc + 10 * g;
                __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 32 * g)), flip);
                a[0] = _mm256_min_epi16(a[0], x);
                a[1] = _mm256_max_epi16(a[1], x);
                a[2] = _mm256_add_epi32(a[2], _mm256_cvtepi16_epi32(_mm256_castsi256_si128(x)));
                a[3] = _mm256_add_epi32(a[3], _mm256_cvtepi16_epi32(_mm256_extracti128_si256(x, 1)));
                __m256i lo = _mm256_mullo_epi16(x, x), hi = _mm256_mulhi_epi16(x, x);
                /* 32-bit squares: bands 0-3 | 8-11 and 4-7 | 12-15 */
                a[4] = _mm256_add_epi32(a[4], _mm256_unpacklo_epi16(lo, hi));
                a[5] = _mm256_add_epi32(a[5], _mm256_unpackhi_epi16(lo, hi));
            }
        }
        for (int64_t g = 0; g < gn; g++) {
            __m256i *a = acc + 10 * g;
            a[6] = _mm256_add_epi64(a[6], _mm256_cvtepu32_epi64(_mm256_castsi256_si128(a[4])));
            a[7] = _mm256_add_epi64(a[7], _mm256_cvtepu32_epi64(_mm256_extracti128_si256(a[4], 1)));
            a[8] = _mm256_add_epi64(a[8], _mm256_cvtepu32_epi64(_mm256_castsi256_si128(a[5])));
            a[9] = _mm256_add_epi64(a[9], _mm256_cvtepu32_epi64(_mm256_extracti128_si256(a[5], 1)));
            a[4] = a[5] = _mm256_setzero_si256();
        }
    }
}

static __attribute__((noinline)) void pix_u16_block(const uint8_t *base, int64_t ss, int64_t px0,
                                                    int64_t px1, int64_t gn, __m256i *acc)
{
    pix_16bit_block(base, ss, px0, px1, gn, 1, acc);
}

static __attribute__((noinline)) void pix_i16_block(const uint8_t *base, int64_t ss, int64_t px0,
                                                    int64_t px1, int64_t gn, __m256i *acc)
{
    pix_16bit_block(base, ss, px0, px1, gn, 0, acc);
}

/* 16-bit spectra in native order (bands contiguous, pixels ss bytes apart),
 * 16 bands a vector: x' as in row_16bit_avx2; per band group, sums of x'
 * into int32 lanes and squares (at most 2^30 each) as 32-bit products
 * added over 3 pixels, then into 64-bit lanes. The accumulators of up to
 * 64 groups (1024 bands) stay in L1 while the pixels of a 256-pixel block
 * are read in order (1.3x the band-group-outer order here). The block's
 * loop is a function of its own for each dtype (pix_u16_block,
 * pix_i16_block; noinline): inlined here, under the loop over 64-group
 * chunks, GCC 12 compiled it to half the speed (11-13 against 24-27 GB/s
 * on a page-cached 512 MiB BIP cube, 2 threads). Exact integers. Returns the bands done (a multiple of
 * 16). */
static int64_t pix_16bit_avx2(const uint8_t *base, int64_t ss, int64_t np, int64_t nb, int is_u16,
                              int64_t *restrict sum, uint64_t *restrict sq, int32_t *restrict mn,
                              int32_t *restrict mx)
{
    enum { GMAX = 64 };
    /* per group: min, max, sums (2), 32-bit squares (2), 64-bit squares (4) */
    __m256i acc[10 * GMAX];
    int64_t ng = nb / 16;
    for (int64_t px0 = 0; px0 < np; px0 += 256) {
        int64_t px1 = px0 + 256 < np ? px0 + 256 : np, cnt = px1 - px0;
        for (int64_t g0 = 0; g0 < ng; g0 += GMAX) {
            int64_t gn = ng - g0 < GMAX ? ng - g0 : GMAX;
            (is_u16 ? pix_u16_block : pix_i16_block)(base + 32 * g0, ss, px0, px1, gn, acc);
            for (int64_t g = 0; g < gn; g++) {
                __m256i *a = acc + 10 * g;
                int32_t s32[16];
                uint64_t q64[16];
                int16_t m0[16], m1[16];
                _mm256_storeu_si256((__m256i *)s32, a[2]);
                _mm256_storeu_si256((__m256i *)(s32 + 8), a[3]);
                _mm256_storeu_si256((__m256i *)q64, a[6]);        /* bands 0-3 */
                _mm256_storeu_si256((__m256i *)(q64 + 8), a[7]);  /* 8-11 */
                _mm256_storeu_si256((__m256i *)(q64 + 4), a[8]);  /* 4-7 */
                _mm256_storeu_si256((__m256i *)(q64 + 12), a[9]); /* 12-15 */
                _mm256_storeu_si256((__m256i *)m0, a[0]);
                _mm256_storeu_si256((__m256i *)m1, a[1]);
                for (int k = 0; k < 16; k++) {
                    int64_t j = 16 * (g0 + g) + k;
                    fold_16bit(is_u16, cnt, s32[k], q64[k], m0[k], m1[k], &sum[j], &sq[j], &mn[j], &mx[j]);
                }
            }
        }
    }
    return 16 * ng;
}
#endif

static void pix_int(const uint8_t *base, int64_t ss, int64_t np, int64_t nb, hsi_dtype dt, int sw,
                    int64_t *restrict sum, uint64_t *restrict sq, int32_t *restrict mn, int32_t *restrict mx)
{
    int64_t j0 = 0; /* bands before j0 done */
#ifdef __AVX2__
    if ((dt == HSI_U16 || dt == HSI_I16) && !sw)
        j0 = pix_16bit_avx2(base, ss, np, nb, dt == HSI_U16, sum, sq, mn, mx);
#endif
    if (dt == HSI_U8) {
        PIX_LOOP(p[j])
    } else if (dt == HSI_U16) {
        if (sw) {
            PIX_LOOP(__builtin_bswap16(w[j]))
        } else {
            PIX_LOOP(w[j])
        }
    } else {
        if (sw) {
            PIX_LOOP((int16_t)__builtin_bswap16(w[j]))
        } else {
            PIX_LOOP((int16_t)w[j])
        }
    }
}

static void merge_exact(int64_t *an, double *amean, double *am2, int64_t n, int64_t s, uint64_t q)
{
    if (n == 0) return;
    __int128 num = (__int128)n * (__int128)q - (__int128)s * (__int128)s;
    hsi_stats_merge(an, amean, am2, n, (double)s / (double)n, (double)num / (double)n);
}

static int fast_int_ok(const hsi_view *cube, const uint8_t *mask, const hsi_stats_opts *o)
{
    hsi_dtype dt = cube->dtype;
    int64_t e = (int64_t)hsi_dtype_size(dt);
    if (mask || (o && o->has_ignore)) return 0;
    if (dt != HSI_U8 && dt != HSI_U16 && dt != HSI_I16) return 0;
    if (cube->shape[2] > ((int64_t)1 << 30)) return 0;
    return hsi_kern_pixel_major_input(cube) ? cube->strides[0] == e : cube->strides[2] == e;
}

/* --------------------------------------------------------------- fast path */

typedef struct stats_ctx {
    const hsi_view *cube;
    const hsi_stats_opts *o;
    const uint8_t *mask; /* (lines*samples) or NULL */
    int need_filter;
    int hist_phase;      /* 0: moments, 1: histogram */
    int64_t chunk, tile;
    /* per thread partials, (n_threads, n_bands) */
    int64_t *n;
    double *mean, *m2, *mn, *mx;
    int64_t *hist;       /* (n_threads, n_bands, bins) */
    const hsi_stats *res; /* min/max for the histogram phase */
    hsi_progress *prog;
    int64_t *lines_done;
    hsi_kern_tile_hook hook; /* moments phase: called per tile read */
    void *hook_ctx;
    int64_t n_chunks;        /* fixed chunks of lines: partials per chunk */
    int64_t next_chunk;      /* hsi_kern_next_chunk's counter */
} stats_ctx;

/* Lines [l0, l1) (one chunk) on thread t into the partials of slot. */
static hsi_status stats_range(stats_ctx *c, int t, int64_t slot, int64_t l0, int64_t l1)
{
    const hsi_view *cube = c->cube;
    int64_t nb = cube->shape[0], S = cube->shape[2];
    int64_t ch = c->chunk;
    int band_major = !hsi_kern_pixel_major_input(cube);
    double *blk = hsi_aligned_alloc(sizeof(double) * (size_t)(nb * ch));
    double *scr = hsi_aligned_alloc(sizeof(double) * (size_t)hsi_kern_scratch_len(cube, ch, nb));
    double *bs = hsi_aligned_alloc(sizeof(double) * (size_t)(5 * nb + 8));
    if (!blk || !scr || !bs) {
        hsi_aligned_free(blk);
        hsi_aligned_free(scr);
        hsi_aligned_free(bs);
        return HSI_FAIL(HSI_ERR_NOMEM, "stats: cannot allocate a %lld-pixel block", (long long)ch);
    }
    int64_t *an = c->n + slot * nb;
    double *amean = c->mean + slot * nb, *am2 = c->m2 + slot * nb, *amn = c->mn + slot * nb,
           *amx = c->mx + slot * nb;
    int64_t *hist = c->hist_phase ? c->hist + (int64_t)t * nb * c->o->hist_bins : NULL;
    int bins = c->o ? c->o->hist_bins : 0;
    hsi_kern_prep pp = {.n_bands = nb};
    int has_ig = c->o && c->o->has_ignore;
    double ig = has_ig ? c->o->ignore_value : 0;
    double *bsum = bs, *bmean = bs + nb, *bm2 = bs + 2 * nb, *bmin = bs + 3 * nb, *bmax = bs + 4 * nb;
    int64_t *bn = calloc((size_t)nb + 1, sizeof(int64_t));
    int fast = !hist && fast_int_ok(cube, c->mask, c->o);
    int64_t *isum = NULL;
    uint64_t *isq = NULL;
    int32_t *imn = NULL, *imx = NULL;
    if (fast) {
        isum = malloc(sizeof(int64_t) * (size_t)nb);
        isq = malloc(sizeof(uint64_t) * (size_t)nb);
        imn = malloc(sizeof(int32_t) * (size_t)nb);
        imx = malloc(sizeof(int32_t) * (size_t)nb);
    }
    if (!bn || (fast && (!isum || !isq || !imn || !imx))) {
        free(bn);
        free(isum);
        free(isq);
        free(imn);
        free(imx);
        hsi_aligned_free(blk);
        hsi_aligned_free(scr);
        hsi_aligned_free(bs);
        return HSI_FAIL(HSI_ERR_NOMEM, "stats: out of memory");
    }
    if (fast && band_major && cube->strides[1] == S * cube->strides[2]) {
        /* BSQ-like: the lines of a tile are one contiguous run per band,
         * read as a single stream */
        for (int64_t tl0 = l0; tl0 < l1; tl0 += c->tile) {
            int64_t tl1 = tl0 + c->tile < l1 ? tl0 + c->tile : l1;
            const uint8_t *tb = (const uint8_t *)cube->buf->data + cube->offset + tl0 * cube->strides[1];
            for (int64_t j = 0; j < nb; j++) {
                for (int64_t y0 = tl0; y0 < tl1;) {
                    /* keep runs below 2^24 elements: exact 64-bit sums */
                    int64_t ny = (((int64_t)1 << 24) / S) > 0 ? ((int64_t)1 << 24) / S : 1;
                    if (ny > tl1 - y0) ny = tl1 - y0;
                    int64_t sm;
                    uint64_t q;
                    int32_t mn, mx;
                    row_int(tb + j * cube->strides[0] + (y0 - tl0) * cube->strides[1], ny * S, cube->dtype,
                            cube->swapped, &sm, &q, &mn, &mx);
                    merge_exact(&an[j], &amean[j], &am2[j], ny * S, sm, q);
                    if (mn < amn[j]) amn[j] = mn;
                    if (mx > amx[j]) amx[j] = mx;
                    y0 += ny;
                }
            }
            if (c->hook) c->hook(c->hook_ctx, slot, t, tl0, tl1);
            hsi_kern_release_lines(cube, tl0, tl1);
            if (c->prog) {
                int64_t d = __atomic_add_fetch(c->lines_done, tl1 - tl0, __ATOMIC_RELAXED);
                if (t == 0) hsi_progress_update(c->prog, d);
            }
        }
        l1 = l0; /* done: skip the line loop */
    }
    for (int64_t y = l0; y < l1; y++) {
        if (fast) {
            const uint8_t *lb = (const uint8_t *)cube->buf->data + cube->offset + y * cube->strides[1];
            if (band_major) {
                for (int64_t j = 0; j < nb; j++) {
                    int64_t sm;
                    uint64_t q;
                    int32_t mn, mx;
                    row_int(lb + j * cube->strides[0], S, cube->dtype, cube->swapped, &sm, &q, &mn, &mx);
                    merge_exact(&an[j], &amean[j], &am2[j], S, sm, q);
                    if (mn < amn[j]) amn[j] = mn;
                    if (mx > amx[j]) amx[j] = mx;
                }
            } else {
                for (int64_t j = 0; j < nb; j++) {
                    isum[j] = 0;
                    isq[j] = 0;
                    imn[j] = INT32_MAX;
                    imx[j] = INT32_MIN;
                }
                pix_int(lb, cube->strides[2], S, nb, cube->dtype, cube->swapped, isum, isq, imn, imx);
                for (int64_t j = 0; j < nb; j++) {
                    merge_exact(&an[j], &amean[j], &am2[j], S, isum[j], isq[j]);
                    if (imn[j] < amn[j]) amn[j] = imn[j];
                    if (imx[j] > amx[j]) amx[j] = imx[j];
                }
            }
        }
        for (int64_t s0 = 0; s0 < S && !fast; s0 += ch) {
            int64_t np = S - s0 < ch ? S - s0 : ch;
            const uint8_t *mk = c->mask ? c->mask + y * S + s0 : NULL;
            hsi_kern_load_f64(blk, band_major ? np : nb, band_major, cube, &pp, y, s0, np, scr);
#define VALID(p, x) ((!mk || mk[p]) && (x) == (x) && !(has_ig && (x) == ig))
            if (hist) {
                if (band_major) {
                    for (int64_t j = 0; j < nb; j++) {
                        const double *r = blk + j * np;
                        int64_t *h = hist + j * bins;
                        double lo = c->res->min[j], hi = c->res->max[j];
                        for (int64_t p = 0; p < np; p++)
                            if (VALID(p, r[p])) h[hist_bin(r[p], lo, hi, bins)]++;
                    }
                } else {
                    for (int64_t p = 0; p < np; p++) {
                        const double *r = blk + p * nb;
                        for (int64_t j = 0; j < nb; j++)
                            if (VALID(p, r[j]))
                                hist[j * bins + hist_bin(r[j], c->res->min[j], c->res->max[j], bins)]++;
                    }
                }
                continue;
            }
            if (band_major) {
                for (int64_t j = 0; j < nb; j++) {
                    const double *r = blk + j * np;
                    int64_t n = 0;
                    double s = 0, mn = INFINITY, mx = -INFINITY, m2 = 0, m;
                    if (!c->need_filter) {
                        for (int64_t p = 0; p < np; p++) {
                            s += r[p];
                            mn = r[p] < mn ? r[p] : mn;
                            mx = r[p] > mx ? r[p] : mx;
                        }
                        n = np;
                        m = s / (double)n;
                        for (int64_t p = 0; p < np; p++) m2 += (r[p] - m) * (r[p] - m);
                    } else {
                        for (int64_t p = 0; p < np; p++)
                            if (VALID(p, r[p])) {
                                n++;
                                s += r[p];
                                mn = r[p] < mn ? r[p] : mn;
                                mx = r[p] > mx ? r[p] : mx;
                            }
                        if (n == 0) continue;
                        m = s / (double)n;
                        for (int64_t p = 0; p < np; p++)
                            if (VALID(p, r[p])) m2 += (r[p] - m) * (r[p] - m);
                    }
                    hsi_stats_merge(&an[j], &amean[j], &am2[j], n, m, m2);
                    if (mn < amn[j]) amn[j] = mn;
                    if (mx > amx[j]) amx[j] = mx;
                }
            } else {
                for (int64_t j = 0; j < nb; j++) {
                    bsum[j] = 0;
                    bm2[j] = 0;
                    bn[j] = 0;
                    bmin[j] = INFINITY;
                    bmax[j] = -INFINITY;
                }
                if (!c->need_filter) {
                    for (int64_t p = 0; p < np; p++) {
                        const double *r = blk + p * nb;
                        for (int64_t j = 0; j < nb; j++) {
                            bsum[j] += r[j];
                            bmin[j] = r[j] < bmin[j] ? r[j] : bmin[j];
                            bmax[j] = r[j] > bmax[j] ? r[j] : bmax[j];
                        }
                    }
                    for (int64_t j = 0; j < nb; j++) {
                        bn[j] = np;
                        bmean[j] = bsum[j] / (double)np;
                    }
                    for (int64_t p = 0; p < np; p++) {
                        const double *r = blk + p * nb;
                        for (int64_t j = 0; j < nb; j++) bm2[j] += (r[j] - bmean[j]) * (r[j] - bmean[j]);
                    }
                } else {
                    for (int64_t p = 0; p < np; p++) {
                        if (mk && !mk[p]) continue;
                        const double *r = blk + p * nb;
                        for (int64_t j = 0; j < nb; j++)
                            if (VALID(p, r[j])) {
                                bn[j]++;
                                bsum[j] += r[j];
                                bmin[j] = r[j] < bmin[j] ? r[j] : bmin[j];
                                bmax[j] = r[j] > bmax[j] ? r[j] : bmax[j];
                            }
                    }
                    for (int64_t j = 0; j < nb; j++) bmean[j] = bn[j] ? bsum[j] / (double)bn[j] : 0;
                    for (int64_t p = 0; p < np; p++) {
                        if (mk && !mk[p]) continue;
                        const double *r = blk + p * nb;
                        for (int64_t j = 0; j < nb; j++)
                            if (VALID(p, r[j])) bm2[j] += (r[j] - bmean[j]) * (r[j] - bmean[j]);
                    }
                }
                for (int64_t j = 0; j < nb; j++) {
                    hsi_stats_merge(&an[j], &amean[j], &am2[j], bn[j], bmean[j], bm2[j]);
                    if (bmin[j] < amn[j]) amn[j] = bmin[j];
                    if (bmax[j] > amx[j]) amx[j] = bmax[j];
                }
            }
#undef VALID
        }
        if ((y - l0 + 1) % c->tile == 0 || y + 1 == l1) {
            int64_t tl0 = y + 1 - ((y - l0) % c->tile + 1);
            if (c->hook && !c->hist_phase) c->hook(c->hook_ctx, slot, t, tl0, y + 1);
            hsi_kern_release_lines(cube, tl0, y + 1);
            if (c->prog) {
                int64_t d = __atomic_add_fetch(c->lines_done, y + 1 - tl0, __ATOMIC_RELAXED);
                if (t == 0) hsi_progress_update(c->prog, d);
            }
        }
    }
    free(bn);
    free(isum);
    free(isq);
    free(imn);
    free(imx);
    hsi_aligned_free(blk);
    hsi_aligned_free(scr);
    hsi_aligned_free(bs);
    return HSI_OK;
}

/* Fixed chunks of lines, dealt round-robin: each chunk's partials depend on
 * the cube and the chunk count only, and are merged in chunk order, so the
 * result has the same bits on any number of threads. */
static hsi_status stats_worker(void *vctx, int t, int nt)
{
    stats_ctx *c = vctx;
    const hsi_pass_split *sp = c->o ? c->o->split : NULL;
    int64_t k0, k1, k;
    hsi_kern_split_range(sp, c->n_chunks, &k0, &k1);
    while ((k = hsi_kern_next_chunk(&c->next_chunk, k0, k1)) >= 0) {
        int64_t l0, l1;
        hsi_split_range(c->cube->shape[1], (int)k, (int)c->n_chunks, &l0, &l1);
        hsi_status st = stats_range(c, t, k, l0, l1);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

int64_t hsi_kern_stats_chunks(const hsi_view *cube, int64_t n_features)
{
    int64_t L = cube->shape[1], k = L / 64; /* chunks of ~64 lines: long runs per band */
    if (k < 16) k = 16;
    if (k > 64) k = 64;
    /* covariance partials (n_features^2 doubles a chunk) within 64 MiB */
    if (n_features > 0) {
        int64_t by_mem = ((int64_t)1 << 23) / (n_features * n_features);
        k = by_mem < 4 ? 4 : by_mem < k ? by_mem : k;
    }
    return L < k ? (L > 0 ? L : 1) : k;
}

/* Percentiles (numpy 'linear' rank q/100*(n-1)) read off a histogram. */
static void percentiles_from_hist(hsi_stats *s, const hsi_stats_opts *o)
{
    int bins = s->hist_bins;
    for (int64_t j = 0; j < s->n_bands; j++) {
        const int64_t *h = s->hist + j * bins;
        double lo = s->min[j], hi = s->max[j], w = (hi - lo) / bins;
        for (int q = 0; q < o->n_percentiles; q++) {
            double r = o->percentiles[q] / 100.0 * (double)(s->count[j] - 1);
            int64_t cum = 0;
            double v = hi;
            for (int b = 0; b < bins; b++) {
                if ((double)(cum + h[b]) > r) {
                    v = lo + w * (b + (r - (double)cum + 0.5) / (double)h[b]);
                    break;
                }
                cum += h[b];
            }
            s->percentile[j * o->n_percentiles + q] = v < lo ? lo : v > hi ? hi : v;
        }
    }
}

static hsi_status finish(hsi_stats *s)
{
    for (int64_t j = 0; j < s->n_bands; j++) {
        if (s->count[j] == 0)
            return HSI_FAIL(HSI_ERR_NUMERIC, "stats: band %lld has no valid element (all masked, ignored or NaN)",
                            (long long)j);
        s->std[j] = sqrt(s->var[j]);
    }
    return HSI_OK;
}

/* Every process's chunk partials (n, mean, M2, max, -min per band) to every
 * process, for a split pass. */
static hsi_status exchange_partials(stats_ctx *c, int64_t nb)
{
    int64_t C = c->n_chunks, w = 5 * nb;
    double *rows = malloc(sizeof(double) * (size_t)(C * w));
    if (!rows) return HSI_FAIL(HSI_ERR_NOMEM, "stats: out of memory for %lld chunk partials", (long long)C);
    for (int64_t k = 0; k < C; k++)
        for (int64_t j = 0; j < nb; j++) {
            double *r = rows + k * w + 5 * j;
            int64_t i = k * nb + j;
            r[0] = (double)c->n[i];
            r[1] = c->mean[i];
            r[2] = c->m2[i];
            r[3] = c->mx[i];
            r[4] = -c->mn[i];
        }
    hsi_status st = hsi_kern_split_exchange(c->o->split, rows, C, w);
    for (int64_t k = 0; st == HSI_OK && k < C; k++)
        for (int64_t j = 0; j < nb; j++) {
            const double *r = rows + k * w + 5 * j;
            int64_t i = k * nb + j;
            c->n[i] = (int64_t)r[0];
            c->mean[i] = r[1];
            c->m2[i] = r[2];
            c->mx[i] = r[3];
            c->mn[i] = -r[4];
        }
    free(rows);
    return st;
}

const char *hsi_stats_cuda_unsupported(const hsi_view *cube, const hsi_stats_opts *o)
{
    if (o && (o->hist_bins != 0 || o->n_percentiles != 0))
        return "histograms and percentiles are computed on the CPU only";
    if (o && o->split && o->split->n_parts > 1)
        return "a pass shared by MPI ranks is computed on the CPU only";
    if (cube && cube->ndim == 3 && cube->shape[0] > 65535) return "a cube has at most 65535 bands";
    return NULL;
}

hsi_status hsi_stats_compute(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts)
{
    hsi_device d;
    memset(out, 0, sizeof *out);
    hsi_status st = hsi_device_pick(&d, opts ? opts->device : HSI_DEVICE_CPU, hsi_view_on_device(cube),
                                    "statistics", hsi_stats_cuda_unsupported(cube, opts));
    if (st != HSI_OK) return st;
    if (d == HSI_DEVICE_CUDA) return hsi_stats_compute_cuda(out, cube, opts);
    return hsi_stats_compute_hooked(out, cube, opts, 0, NULL, NULL);
}

hsi_status hsi_stats_compute_hooked(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts,
                                    int64_t n_chunks, hsi_kern_tile_hook hook, void *hook_ctx)
{
    hsi_status st = HSI_OK;
    hsi_stats_opts o0 = {0};
    const hsi_stats_opts *o = opts ? opts : &o0;
    stats_ctx c = {0};
    hsi_progress prog;
    int64_t done = 0;
    uint8_t *mask = NULL;
    memset(out, 0, sizeof *out);
    HSI_TRY(check_opts(cube, o));
    int64_t nb = cube->shape[0], L = cube->shape[1], S = cube->shape[2];
    HSI_TRY(hsi_kern_mask_pack(&mask, o->mask, L, S));
    HSI_TRY(stats_alloc(out, nb, o));
    int nt = o->n_threads > 0 ? o->n_threads : hsi_threads();
    if (nt > L) nt = L > 0 ? (int)L : 1;
    c.cube = cube;
    c.o = o;
    c.mask = mask;
    c.hook = hook;
    c.hook_ctx = hook_ctx;
    c.n_chunks = n_chunks > 0 ? n_chunks : hsi_kern_stats_chunks(cube, 0);
    c.need_filter = mask || o->has_ignore || hsi_dtype_is_float(cube->dtype);
    c.tile = o->tile_lines > 0 ? o->tile_lines : 64;
    c.chunk = 32768 / (nb > 0 ? nb : 1);
    if (c.chunk < 64) c.chunk = 64;
    if (c.chunk > S) c.chunk = S > 0 ? S : 1;
    size_t nn = (size_t)(c.n_chunks * nb + 1);
    c.n = calloc(nn, sizeof(int64_t));
    c.mean = calloc(nn, sizeof(double));
    c.m2 = calloc(nn, sizeof(double));
    c.mn = malloc(nn * sizeof(double));
    c.mx = malloc(nn * sizeof(double));
    if (!c.n || !c.mean || !c.m2 || !c.mn || !c.mx) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "stats: out of memory for %d x %lld partials", nt, (long long)nb);
        goto cleanup;
    }
    for (size_t i = 0; i < nn; i++) {
        c.mn[i] = INFINITY;
        c.mx[i] = -INFINITY;
    }
    if (o->progress_label) {
        hsi_progress_begin(&prog, o->progress_label, o->hist_bins > 0 ? 2 * L : L);
        c.prog = &prog;
        c.lines_done = &done;
    }
    HSI_TRY(hsi_parallel(nt, stats_worker, &c));
    if (o->split && o->split->n_parts > 1) HSI_TRY(exchange_partials(&c, nb));
    for (int64_t j = 0; j < nb; j++) {
        int64_t n = 0;
        double m = 0, m2 = 0, mn = INFINITY, mx = -INFINITY;
        for (int64_t k = 0; k < c.n_chunks; k++) {
            hsi_stats_merge(&n, &m, &m2, c.n[k * nb + j], c.mean[k * nb + j], c.m2[k * nb + j]);
            if (c.mn[k * nb + j] < mn) mn = c.mn[k * nb + j];
            if (c.mx[k * nb + j] > mx) mx = c.mx[k * nb + j];
        }
        out->count[j] = n;
        out->mean[j] = m;
        out->var[j] = n > 0 ? m2 / (double)n : 0;
        out->var_ddof1[j] = n > 1 ? m2 / (double)(n - 1) : 0;
        out->min[j] = mn;
        out->max[j] = mx;
    }
    HSI_TRY(finish(out));
    if (o->hist_bins > 0) {
        c.hist = calloc((size_t)(nt * nb * o->hist_bins), sizeof(int64_t));
        if (!c.hist) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "stats: out of memory for histograms");
            goto cleanup;
        }
        c.hist_phase = 1;
        c.res = out;
        c.next_chunk = 0;
        HSI_TRY(hsi_parallel(nt, stats_worker, &c));
        for (int t = 0; t < nt; t++)
            for (int64_t i = 0; i < nb * o->hist_bins; i++) out->hist[i] += c.hist[t * nb * o->hist_bins + i];
        if (o->n_percentiles > 0) percentiles_from_hist(out, o);
    }
cleanup:
    if (c.prog) hsi_progress_end(c.prog);
    if (st != HSI_OK) hsi_stats_free(out);
    free(c.n);
    free(c.mean);
    free(c.m2);
    free(c.mn);
    free(c.mx);
    free(c.hist);
    free(mask);
    return st;
}

/* ---------------------------------------------------------- reference path */

hsi_status hsi_stats_compute_ref(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_stats_opts o0 = {0};
    const hsi_stats_opts *o = opts ? opts : &o0;
    uint8_t *mask = NULL;
    memset(out, 0, sizeof *out);
    HSI_TRY(check_opts(cube, o));
    int64_t nb = cube->shape[0], L = cube->shape[1], S = cube->shape[2];
    HSI_TRY(hsi_kern_mask_pack(&mask, o->mask, L, S));
    HSI_TRY(stats_alloc(out, nb, o));
    for (int64_t b = 0; b < nb; b++) {
        double s = 0, m2 = 0, mn = INFINITY, mx = -INFINITY;
        int64_t n = 0, idx[3] = {b, 0, 0};
        for (int pass = 0; pass < 3; pass++) {
            for (idx[1] = 0; idx[1] < L; idx[1]++)
                for (idx[2] = 0; idx[2] < S; idx[2]++) {
                    if (mask && !mask[idx[1] * S + idx[2]]) continue;
                    double x = hsi_view_get_f64(cube, idx);
                    if (x != x || (o->has_ignore && x == o->ignore_value)) continue;
                    if (pass == 0) {
                        n++;
                        s += x;
                        if (x < mn) mn = x;
                        if (x > mx) mx = x;
                    } else if (pass == 1) {
                        double m = s / (double)n;
                        m2 += (x - m) * (x - m);
                    } else if (out->hist) {
                        out->hist[b * o->hist_bins + hist_bin(x, mn, mx, o->hist_bins)]++;
                    }
                }
            if (pass == 0 && n == 0) break;
        }
        out->count[b] = n;
        out->mean[b] = n ? s / (double)n : 0;
        out->var[b] = n ? m2 / (double)n : 0;
        out->var_ddof1[b] = n > 1 ? m2 / (double)(n - 1) : 0;
        out->min[b] = mn;
        out->max[b] = mx;
    }
    HSI_TRY(finish(out));
    if (o->n_percentiles > 0) percentiles_from_hist(out, o);
cleanup:
    if (st != HSI_OK) hsi_stats_free(out);
    free(mask);
    return st;
}
