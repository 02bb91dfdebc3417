/* kern_common.c — shared machinery of the CPU kernels: OpenBLAS thread
 * control, the prep block loader over any strided cube, mmap page release
 * and mask packing. Not a kernel itself; see kern_internal.h. */
#define _GNU_SOURCE
#include "kern_internal.h"
#include "kernels/tiles512.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cblas.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

int hsi_kern_blas_single_begin(void)
{
    int prev = openblas_get_num_threads();
    if (prev != 1) openblas_set_num_threads(1);
    return prev;
}

void hsi_kern_blas_single_end(int previous)
{
    if (previous > 1) openblas_set_num_threads(previous);
}

static int64_t iabs64(int64_t x) { return x < 0 ? -x : x; }

int hsi_kern_pixel_major_input(const hsi_view *cube)
{
    return iabs64(cube->strides[0]) < iabs64(cube->strides[2]);
}

int64_t hsi_kern_scratch_len(const hsi_view *cube, int64_t n_pix, int64_t n_sel)
{
    return n_pix * (cube->shape[0] + 2) + 5 * n_sel + 64;
}

/* Contiguous 8/16-bit and float runs converted inline (vectorised); every
 * other dtype, stride or byte order goes through core's hsi_load_*. */
typedef uint16_t kern_u16u __attribute__((aligned(1), may_alias));
typedef float kern_f32u __attribute__((aligned(1), may_alias));
#define KERN_RAW_FN(NAME, T, CORE)                                                                 \
    static void NAME(T *restrict dst, const void *src, int64_t stride, hsi_dtype dt, int sw,      \
                     int64_t n)                                                                    \
    {                                                                                              \
        const kern_u16u *w = src;                                                                  \
        if (dt == HSI_U16 && stride == 2) {                                                        \
            if (sw)                                                                                \
                for (int64_t i = 0; i < n; i++) dst[i] = (T)(uint16_t)__builtin_bswap16(w[i]);     \
            else                                                                                   \
                for (int64_t i = 0; i < n; i++) dst[i] = (T)w[i];                                  \
        } else if (dt == HSI_I16 && stride == 2) {                                                 \
            if (sw)                                                                                \
                for (int64_t i = 0; i < n; i++) dst[i] = (T)(int16_t)__builtin_bswap16(w[i]);      \
            else                                                                                   \
                for (int64_t i = 0; i < n; i++) dst[i] = (T)(int16_t)w[i];                         \
        } else if (dt == HSI_U8 && stride == 1) {                                                  \
            const uint8_t *b = src;                                                                \
            for (int64_t i = 0; i < n; i++) dst[i] = (T)b[i];                                      \
        } else if (dt == HSI_F32 && stride == 4 && !sw) {                                          \
            const kern_f32u *f = src;                                                              \
            for (int64_t i = 0; i < n; i++) dst[i] = (T)f[i];                                      \
        } else {                                                                                   \
            CORE(dst, src, stride, dt, sw, n);                                                     \
        }                                                                                          \
    }
KERN_RAW_FN(raw_f64, double, hsi_load_f64)
KERN_RAW_FN(raw_f32, float, hsi_load_f32)

/* Whole spectra of 16-bit or float32 samples straight to the affine map,
 * one sweep per spectrum (no converted copy in between): for BIP blocks.
 * Returns 0 (nothing done) for other dtypes. */
#define SPEC_LOOP(CONV)                                                                            \
    for (int64_t p = 0; p < n_pix; p++) {                                                          \
        const uint8_t *px = base + p * ss;                                                         \
        const kern_u16u *w = (const kern_u16u *)px;                                                \
        const kern_f32u *f = (const kern_f32u *)px;                                                \
        (void)w;                                                                                   \
        (void)f;                                                                                   \
        T *o = dst + p * ld;                                                                       \
        if (bands)                                                                                 \
            for (int64_t j = 0; j < nb; j++) {                                                     \
                int64_t i = bands[j];                                                              \
                o[j] = sc[j] * ((T)(CONV) - ce[j]) + of[j];                                        \
            }                                                                                      \
        else                                                                                       \
            for (int64_t i = 0; i < nb; i++) o[i] = sc[i] * ((T)(CONV) - ce[i]) + of[i];           \
    }
#define KERN_SPEC_FN(NAME, T)                                                                      \
    static int NAME(T *restrict dst, int64_t ld, const uint8_t *base, int64_t ss, hsi_dtype dt,   \
                    int sw, int64_t n_pix, int64_t nb, const int64_t *bands, const T *sc,          \
                    const T *ce, const T *of)                                                      \
    {                                                                                              \
        if (dt == HSI_U16 && !sw) SPEC_LOOP(w[i])                                                  \
        else if (dt == HSI_U16) SPEC_LOOP((uint16_t)__builtin_bswap16(w[i]))                       \
        else if (dt == HSI_I16 && !sw) SPEC_LOOP((int16_t)w[i])                                    \
        else if (dt == HSI_I16) SPEC_LOOP((int16_t)__builtin_bswap16(w[i]))                        \
        else if (dt == HSI_F32 && !sw) SPEC_LOOP(f[i])                                             \
        else return 0;                                                                             \
        return 1;                                                                                  \
    }
#define T double
KERN_SPEC_FN(spec_f64, double)
#undef T
#define T float
KERN_SPEC_FN(spec_f32, float)
#undef T
#undef SPEC_LOOP

#define T double
#define KERN_LOAD hsi_kern_load_f64
#define KERN_RAW raw_f64
#define KERN_SPEC spec_f64
#include "kern_load.inc"
#undef T
#undef KERN_LOAD
#undef KERN_RAW
#undef KERN_SPEC
#define T float
#define KERN_LOAD hsi_kern_load_f32
#define KERN_RAW raw_f32
#define KERN_SPEC spec_f32
#include "kern_load.inc"
#undef T
#undef KERN_LOAD
#undef KERN_RAW
#undef KERN_SPEC

void hsi_kern_stream_f32(float *dst, const float *src, int64_t n)
{
#ifdef __AVX__
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 31); i++) dst[i] = src[i];
    for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    for (; i < n; i++) dst[i] = src[i];
#else
    memcpy(dst, src, sizeof(float) * (size_t)n);
#endif
}

void hsi_kern_stream_fence(void)
{
#ifdef __AVX__
    _mm_sfence();
#endif
}

void hsi_kern_release_lines(const hsi_view *cube, int64_t l0, int64_t l1)
{
    if (!cube->buf || cube->buf->kind != HSI_BUF_MMAP || l1 <= l0 || !cube->buf->data) return;
    /* Only cubes that would crowd memory are dropped as we go: re-faulting
     * a page-cached file on every pass costs more than it saves. */
    static int64_t limit = -1;
    if (limit < 0) {
        const char *env = getenv("HSI_RELEASE_MIB");
        long long phys = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
        limit = env ? atoll(env) << 20 : phys / 4;
    }
    if ((int64_t)cube->buf->size < limit) return;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t data = (uintptr_t)cube->buf->data, end_buf = data + cube->buf->size;
    int64_t esz = (int64_t)hsi_dtype_size(cube->dtype);
    int64_t span_b = iabs64(cube->strides[0]) * (cube->shape[0] - 1);
    int64_t span_s = iabs64(cube->strides[2]) * (cube->shape[2] - 1);
    int64_t span_inner = span_b + span_s + esz;
    int per_band = iabs64(cube->strides[1]) < span_inner && cube->shape[0] > 1;
    int64_t nreg = per_band ? cube->shape[0] : 1;
    for (int64_t b = 0; b < nreg; b++) {
        /* byte range of lines l0..l1-1 (of band b, or of all bands) */
        int64_t lo = cube->offset, hi = cube->offset;
        int64_t idx_l[2] = {l0, l1 - 1};
        for (int k = 0; k < 2; k++) {
            int64_t o = cube->offset + idx_l[k] * cube->strides[1];
            if (per_band) {
                o += b * cube->strides[0];
                int64_t a = o, z = o + (cube->strides[2] < 0 ? -span_s : span_s);
                int64_t mn = a < z ? a : z, mx = a < z ? z : a;
                if (k == 0) { lo = mn; hi = mx; }
                if (mn < lo) lo = mn;
                if (mx > hi) hi = mx;
            } else {
                int64_t mn = o, mx = o;
                if (cube->strides[0] < 0) mn -= span_b; else mx += span_b;
                if (cube->strides[2] < 0) mn -= span_s; else mx += span_s;
                if (k == 0) { lo = mn; hi = mx; }
                if (mn < lo) lo = mn;
                if (mx > hi) hi = mx;
            }
        }
        uintptr_t a = (data + (uintptr_t)lo) & ~(uintptr_t)(pg - 1);
        uintptr_t z = data + (uintptr_t)hi + (uintptr_t)esz;
        if (z > end_buf) z = end_buf;
        if (z > a) madvise((void *)a, z - a, MADV_DONTNEED);
    }
}

static int split_on(const hsi_pass_split *sp) { return sp && sp->n_parts > 1; }

/* Part p reads the contiguous chunks [n*p/N, n*(p+1)/N): long runs of lines. */
void hsi_kern_split_range(const hsi_pass_split *sp, int64_t n_chunks, int64_t *k0, int64_t *k1)
{
    if (!split_on(sp)) {
        *k0 = 0;
        *k1 = n_chunks;
        return;
    }
    *k0 = n_chunks * sp->part / sp->n_parts;
    *k1 = n_chunks * (sp->part + 1) / sp->n_parts;
}

int64_t hsi_kern_next_chunk(int64_t *next, int64_t k0, int64_t k1)
{
    int64_t k = k0 + __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
    return k < k1 ? k : -1;
}

hsi_status hsi_kern_split_exchange(const hsi_pass_split *sp, double *rows, int64_t n_chunks, int64_t width)
{
    if (!split_on(sp)) return HSI_OK;
    if (!sp->exchange || sp->part < 0 || sp->part >= sp->n_parts)
        return HSI_FAIL(HSI_ERR_ARG, "split pass: part %d of %d needs an exchange function", sp->part, sp->n_parts);
    int64_t k0, k1;
    hsi_kern_split_range(sp, n_chunks, &k0, &k1);
    for (int64_t k = 0; k < n_chunks; k++)
        if (k < k0 || k >= k1)
            for (int64_t i = 0; i < width; i++) rows[k * width + i] = -INFINITY;
    return sp->exchange(sp->ctx, rows, n_chunks * width);
}

hsi_status hsi_kern_mask_pack(uint8_t **out, const hsi_view *mask, int64_t n_lines,
                              int64_t n_samples)
{
    hsi_status st = HSI_OK;
    uint8_t *m = NULL;
    float *row = NULL;
    *out = NULL;
    if (!mask) return HSI_OK;
    if (mask->ndim != 2 || mask->shape[0] != n_lines || mask->shape[1] != n_samples) {
        st = HSI_FAIL(HSI_ERR_ARG, "mask: expected a (%lld lines, %lld samples) view, found %d dims (%lld, %lld)",
                      (long long)n_lines, (long long)n_samples, mask->ndim,
                      (long long)mask->shape[0], (long long)(mask->ndim > 1 ? mask->shape[1] : 0));
        goto cleanup;
    }
    if (hsi_dtype_is_complex(mask->dtype) || !mask->buf || mask->buf->kind == HSI_BUF_DEVICE) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "mask: expected a real host view, found %s",
                      hsi_dtype_name(mask->dtype));
        goto cleanup;
    }
    m = malloc((size_t)(n_lines * n_samples) + 1);
    row = malloc(sizeof(float) * (size_t)(n_samples + 1));
    if (!m || !row) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "mask: cannot allocate %lld bytes", (long long)(n_lines * n_samples));
        goto cleanup;
    }
    for (int64_t y = 0; y < n_lines; y++) {
        const uint8_t *src = (const uint8_t *)mask->buf->data + mask->offset + y * mask->strides[0];
        hsi_load_f32(row, src, mask->strides[1], mask->dtype, mask->swapped, n_samples);
        for (int64_t x = 0; x < n_samples; x++) m[y * n_samples + x] = row[x] != 0.0f;
    }
    *out = m;
    m = NULL;
cleanup:
    free(m);
    free(row);
    return st;
}

hsi_status hsi_kern_check_cube(const hsi_view *v, const char *what)
{
    if (!v || !v->buf) return HSI_FAIL(HSI_ERR_ARG, "%s: no cube view given", what);
    if (v->ndim != 3)
        return HSI_FAIL(HSI_ERR_ARG, "%s: expected a (band, line, sample) view with 3 dims, found %d",
                        what, v->ndim);
    if (v->buf->kind == HSI_BUF_DEVICE)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: the CPU kernel needs a host view (this one is on a device)", what);
    if (hsi_dtype_is_complex(v->dtype) || hsi_dtype_size(v->dtype) == 0)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: expected a real dtype, found %s", what,
                        hsi_dtype_name(v->dtype));
    return HSI_OK;
}

/* dst[c * ldd + r] = src[r * lds + c] for a rows x cols block: 8 x 8
 * register transposes where the CPU has AVX. */
void hsi_kern_transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                            int64_t cols)
{
    int64_t r0 = 0;
#ifdef __AVX__
    for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) {
            const float *a = src + r0 * lds + c0;
            __m256 x0 = _mm256_loadu_ps(a), x1 = _mm256_loadu_ps(a + lds), x2 = _mm256_loadu_ps(a + 2 * lds),
                   x3 = _mm256_loadu_ps(a + 3 * lds), x4 = _mm256_loadu_ps(a + 4 * lds),
                   x5 = _mm256_loadu_ps(a + 5 * lds), x6 = _mm256_loadu_ps(a + 6 * lds),
                   x7 = _mm256_loadu_ps(a + 7 * lds);
            __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1),
                   t2 = _mm256_unpacklo_ps(x2, x3), t3 = _mm256_unpackhi_ps(x2, x3),
                   t4 = _mm256_unpacklo_ps(x4, x5), t5 = _mm256_unpackhi_ps(x4, x5),
                   t6 = _mm256_unpacklo_ps(x6, x7), t7 = _mm256_unpackhi_ps(x6, x7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
                   u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
                   u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
                   u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
            float *d = dst + c0 * ldd + r0;
            _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (int64_t r = r0; r < r0 + 8; r++)
            for (int64_t c = c0; c < cols; c++) dst[c * ldd + r] = src[r * lds + c];
    }
#endif
    /* the remaining rows, 16 x 16 tiles so the strided side stays in cache */
    for (int64_t c0 = 0; c0 < cols; c0 += 16)
        for (int64_t q0 = r0; q0 < rows; q0 += 16) {
            int64_t c1 = c0 + 16 < cols ? c0 + 16 : cols, q1 = q0 + 16 < rows ? q0 + 16 : rows;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = q0; r < q1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

static int kern_tiles = 1;

void hsi_kern_set_tiles(int on) { kern_tiles = on != 0; }

int hsi_kern_tiles(void) { return kern_tiles && hsi_c512_cpu_ok(); }

static int kern_ints = 1;

void hsi_kern_set_ints(int on) { kern_ints = on != 0; }

int hsi_kern_ints(void) { return kern_ints && hsi_c512_vnni_ok(); }
