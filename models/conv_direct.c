/* conv_direct.c — float convolution (2-D and 3-D, stride 1) with AVX2 + FMA
 * register tiles, or the AVX-512 ones of kernels/tiles512.c where the CPU has
 * them; no column matrix, no BLAS. Convolutions 3x3 in H and W with pad 0
 * or 1 (2-D, or 3-D with any depth kernel, slice by slice) use Winograd
 * F(2x2, 3x3) for the forward pass, dw and dx (sections below, on the same
 * register tiles); everything else the direct kernels described here.
 * Inference can fuse a ReLU into the forward pass's stores.
 *
 * The work is an implicit gemm per sample. Forward: out (K, positions) =
 * w (K, C*taps) x the input read in place: the sample's input is copied
 * into a zero-padded plane (C, Dp, Hp, Wp) that stays in L2, and a tile of
 * R <= 6 consecutive output positions x 16 output channels (12 ymm
 * accumulators) runs over the C*taps reduction with one broadcast load per
 * position and two loads of packed weights (16 channels of one (c, tap)) per
 * step — the offset of each (c, tap) in the padded plane comes from a table;
 * convolutions with <= 8 output channels take R <= 12 positions x 8 channels
 * instead. The channel blocks take turns over bands of 4 output rows, so the
 * input rows a band reads stay in cache (a 3-D plane is often larger than L2).
 * Backward to the input is the same kernel on dy padded by kernel-1-pad with
 * the filters flipped and transposed. Backward to the weights: for 6 (c, tap)
 * rows x 16 output channels, sum over the sample's positions of the padded
 * input at that tap times dy transposed to (positions, K), over chunks of
 * positions whose rows of dy stay in L2.
 *
 * Threads: samples are split between threads (hsi_parallel); each
 * thread has its own padded planes and weight-gradient partial, and the
 * partials are added in thread order, so results do not depend on timing.
 * Used by layer_conv.c (hsi_conv_forward_f32 / hsi_conv_backward_f32). */
#include "models/conv_direct.h"

#include <stdint.h>
#include <string.h>

#include "kernels/kern_internal.h"
#include "kernels/tiles512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DC_X86 1
#include <immintrin.h>
#define DC_TARGET __attribute__((target("avx2,fma")))
#else
#define DC_X86 0
#define DC_TARGET
#endif

#define DC_MAX_SLOTS 16
#define DC_TILE_P 6  /* output positions per register tile */
#define DC_TILE_K 16 /* output channels per register tile (two ymm) */
#define DC_BAND_ROWS 4 /* output rows the direct kernel's channel blocks share */
#define DC_DW_CHUNK 16384 /* floats of dy (positions x kpad) per dw pass: 64 KiB, in L2 */
#define DC_TILE_MAX 384   /* floats of the largest register tile (AVX-512: 12 x 32, 24 x 16) */
#define DC_SLACK 16       /* floats past a direct plane: AVX-512's narrow tile reads one */

static int dc_impl = HSI_CONV_IMPL_AUTO;
static int dc_simd = HSI_CONV_SIMD_AUTO;

void hsi_conv_set_impl(hsi_conv_impl impl) { dc_impl = impl; }
void hsi_conv_set_simd(hsi_conv_simd simd) { dc_simd = simd; }
int hsi_conv_uses_avx512(void) { return dc_simd == HSI_CONV_SIMD_AUTO && hsi_c512_cpu_ok(); }

typedef struct dc_geom {
    int64_t n, c, k, taps, kpad, cpad;
    int64_t in[3], ker[3], pad[3], out[3]; /* D, H, W (D = 1 for 2-D) */
    int64_t fp[3], fplane;                 /* padded input plane */
    int64_t bp[3], bplane;                 /* dy padded by ker-1-pad */
    int64_t in_sp, out_sp, nkf, nkb;       /* nkf = C*taps, nkb = K*taps */
    int wg, wgdx;                          /* Winograd F(2x2, 3x3) for forward and dw; dx */
    int v512;                              /* AVX-512 tiles (kernels/tiles512.h), else AVX2 */
    int nd;                                /* 2 or 3 (3: Winograd slice by slice) */
    int64_t wg_fgroup, wg_group;           /* samples per forward/dx and per dw pass */
    int64_t th, tw, nt, hq, wq;            /* its tiles (th x tw = nt) and plane (hq x wq) */
    int slots;
} dc_geom;

typedef struct dc_ws {
    float *wf, *wb;          /* packed filters: (kpad/16, nkf, 16), (cpad/16, nkb, 16);
                                Winograd: transformed, (16, kpad/16, c8, 16), (16, cpad/16, k8, 16) */
    int32_t *offf, *offb;    /* plane offset of each (c, tap) / (k, tap); Winograd: 0, 1, ... */
    int32_t *pos;            /* plane offset of each output position (forward plane);
                                Winograd dw: offset of each tile's row of V */
    float *slot0;            /* per-thread: plane, dyT, dwp, dbp (kpad doubles), V, M, O, Z,
                                3-D Winograd offsets */
    int64_t plane_len, dyt_len, dwp_len, dbp_len, v_len, m_len, o_len, z_len, off_len, slot_len;
} dc_ws;

static int64_t dc_round16(int64_t n) { return (n + 15) & ~(int64_t)15; }
static int64_t dc_round8(int64_t n) { return (n + 7) & ~(int64_t)7; }

static void dc_geom_tiles(dc_geom *g);
static void dc_geom_dx(dc_geom *gd, const dc_geom *g);

static void dc_geom_fill(dc_geom *g, const hsi_conv_dims *d)
{
    int o = d->nd == 3 ? 0 : -1;
    memset(g, 0, sizeof *g);
    g->n = d->n, g->c = d->c, g->k = d->k, g->nd = d->nd;
    for (int a = 0; a < 3; a++) {
        int i = o + a;
        int use = d->nd == 3 || a > 0;
        g->in[a] = use ? d->in[i] : 1;
        g->ker[a] = use ? d->ker[i] : 1;
        g->pad[a] = use ? d->pad[i] : 0;
        g->out[a] = use ? d->out[i] : 1;
        g->fp[a] = g->in[a] + 2 * g->pad[a];
        g->bp[a] = g->out[a] + 2 * (g->ker[a] - 1 - g->pad[a]);
    }
    g->fplane = g->fp[0] * g->fp[1] * g->fp[2];
    g->bplane = g->bp[0] * g->bp[1] * g->bp[2];
    g->taps = g->ker[0] * g->ker[1] * g->ker[2];
    g->in_sp = g->in[0] * g->in[1] * g->in[2];
    g->out_sp = g->out[0] * g->out[1] * g->out[2];
    g->kpad = dc_round16(g->k), g->cpad = dc_round16(g->c);
    g->nkf = g->c * g->taps, g->nkb = g->k * g->taps;
    g->v512 = hsi_conv_uses_avx512();
    g->slots = hsi_threads();
    if (g->slots > DC_MAX_SLOTS) g->slots = DC_MAX_SLOTS;
    if (g->slots > g->n) g->slots = (int)g->n;
    /* Winograd: 3x3 in H and W with pad 0 or 1 (stride 1 is checked by the
     * caller), any depth kernel in 3-D, for the forward pass, dw and dx (dx:
     * the tiles of dc_geom_dx) */
    g->wg = dc_impl == HSI_CONV_IMPL_AUTO && g->ker[1] == 3 && g->ker[2] == 3 &&
            g->pad[1] <= 1 && g->pad[2] <= 1 && g->c >= 4 && g->k >= 4;
    g->wgdx = g->wg;
    dc_geom_tiles(g);
    if (g->wg && g->nd == 3) { /* the ring's int32 offsets (wg3_conv) */
        dc_geom gd;
        dc_geom_dx(&gd, g);
        int64_t nt = g->nt > gd.nt ? g->nt : gd.nt, ch = dc_round8(g->c > g->k ? g->c : g->k);
        if (g->ker[0] * 16 * nt * ch > INT32_MAX) g->wg = g->wgdx = 0, dc_geom_tiles(g);
    }
}

/* Tiles (th x tw of 2x2 outputs) and plane (hq x wq) of the Winograd pass
 * whose output is g->out; the forward and dx products take the tiles of
 * wg_fgroup samples at once (about 36 tiles), dw sums over those of
 * wg_group samples (about 72). */
static void dc_geom_tiles(dc_geom *g)
{
    g->th = (g->out[1] + 1) / 2, g->tw = (g->out[2] + 1) / 2, g->nt = g->th * g->tw;
    g->hq = 2 * g->th + 2, g->wq = 2 * g->tw + 2;
    int grouped = g->wg && g->nd == 2; /* 3-D: one sample at a time, slice by slice */
    g->wg_fgroup = grouped ? (36 + g->nt - 1) / g->nt : 1;
    g->wg_group = grouped ? (72 + g->nt - 1) / g->nt : 1;
}

/* The geometry of the Winograd dx pass: a convolution of dy, padded by
 * ker - 1 - pad, whose output is dx (the input's size): with pad 1 the
 * forward's tiles, with pad 0 one tile more per side. */
static void dc_geom_dx(dc_geom *gd, const dc_geom *g)
{
    *gd = *g;
    for (int a = 0; a < 3; a++) gd->out[a] = g->in[a];
    dc_geom_tiles(gd);
}

/* Fills the slot lengths and returns the floats before slot 0; with a base
 * (64-byte aligned), also the pointers. */
static int64_t dc_max(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t dc_ws_layout(dc_ws *w, const dc_geom *g, void *base)
{
    /* filters: direct (kpad, C*taps) or Winograd (16, kpad, kD*C), the same for dx */
    int64_t c8 = dc_round8(g->c), k8 = dc_round8(g->k), kd = g->ker[0];
    int64_t nwf = dc_round16(dc_max(g->kpad * g->nkf, g->wg ? 16 * g->kpad * kd * c8 : 0)),
            nwb = dc_round16(dc_max(g->cpad * g->nkb, g->wg ? 16 * g->cpad * kd * k8 : 0));
    int64_t nof = dc_round16(dc_max(g->nkf, c8)), nob = dc_round16(dc_max(g->nkb, k8));
    int64_t npos = dc_round16(dc_max(g->out_sp, g->nt * g->wg_group));
    int64_t head = nwf + nwb + nof + nob + npos;
    if (base) {
        float *p = base;
        w->wf = p, p += nwf;
        w->wb = p, p += nwb;
        w->offf = (int32_t *)p, p += nof;
        w->offb = (int32_t *)p, p += nob;
        w->pos = (int32_t *)p, p += npos;
        w->slot0 = p;
    }
    int64_t a = g->c * g->fplane, b = g->k * g->bplane, ch = dc_max(c8, k8);
    dc_geom gd; /* the dx pass's tiles: as many as the forward's, or more (pad 0) */
    dc_geom_dx(&gd, g);
    int64_t hw = dc_max(g->hq * g->wq, gd.hq * gd.wq);
    int64_t tiles = dc_max(g->nt * dc_max(g->wg_group, g->wg_fgroup), gd.nt * gd.wg_fgroup);
    /* 3-D: V of kD source slices (the ring of wg3_conv), M of one output slice */
    int64_t ring = g->nd == 3 ? kd * dc_max(g->nt, gd.nt) : 0;
    w->plane_len = dc_round16(dc_max(dc_max(a, b) + DC_SLACK, g->wg ? ch * hw : 0));
    w->dyt_len = dc_round16(g->out_sp * g->kpad);
    w->dwp_len = dc_round16(g->nkf * g->kpad);
    w->dbp_len = 2 * g->kpad;
    w->v_len = g->wg ? dc_round16(16 * ch * dc_max(tiles, ring)) : 0;
    w->m_len = g->wg ? dc_round16(16 * tiles * dc_max(g->kpad, g->cpad)) : 0;
    w->o_len = g->wg ? dc_round16(4 * dc_max(g->nt, gd.nt) * dc_max(g->kpad, g->cpad)) : 0; /* one sample */
    w->z_len = g->wg ? dc_round16(16 * kd * c8 * g->kpad) : 0;
    w->off_len = g->wg && g->nd == 3 ? dc_round16(kd * ch) : 0; /* int32: the ring's offsets */
    w->slot_len = w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len + w->v_len + w->m_len +
                  w->o_len + w->z_len + w->off_len;
    return head;
}

static int dc_cpu_ok(void)
{
#if DC_X86
    static int ok = -1;
    if (ok < 0) ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return ok;
#else
    return 0;
#endif
}

int hsi_conv_direct_usable(const hsi_conv_dims *d)
{
    if (dc_impl == HSI_CONV_IMPL_GEMM || !dc_cpu_ok()) return 0;
    for (int i = 0; i < d->nd; i++)
        if (d->stride[i] != 1 || d->pad[i] > d->ker[i] - 1) return 0;
    /* plane offsets are int32 */
    dc_geom g;
    dc_geom_fill(&g, d);
    if (g.c * g.fplane > INT32_MAX || g.k * g.bplane > INT32_MAX) return 0;
    return 1;
}

size_t hsi_conv_direct_ws_bytes(const hsi_conv_dims *d)
{
    dc_geom g;
    dc_ws w;
    dc_geom_fill(&g, d);
    int64_t head = dc_ws_layout(&w, &g, NULL);
    return (size_t)(head + g.slots * w.slot_len) * sizeof(float);
}

/* offsets of every (channel, tap) in a plane of dims p[3] with ch_len per channel */
static void dc_offsets(int32_t *off, int64_t n_ch, int64_t ch_len, const int64_t *ker,
                       const int64_t *p)
{
    int64_t q = 0;
    for (int64_t c = 0; c < n_ch; c++)
        for (int64_t a = 0; a < ker[0]; a++)
            for (int64_t b = 0; b < ker[1]; b++)
                for (int64_t e = 0; e < ker[2]; e++)
                    off[q++] = (int32_t)(c * ch_len + (a * p[1] + b) * p[2] + e);
}

/* ------------------------------------------------------------ micro-kernels */

#if DC_X86
/* The accumulators are named variables, not arrays: GCC keeps an array of
 * vectors in registers but also stores it to the stack every iteration. */
#define DC_ACC_DECL                                                                            \
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,  \
           a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00
#define DC_FOR_R(X) X(0, a00, a01) X(1, a10, a11) X(2, a20, a21) X(3, a30, a31) X(4, a40, a41) \
    X(5, a50, a51)

/* acc (R rows of 16, ld floats apart) = sum over k < nk of in[off[k] + r*rs] * w[k][0..16) */
static inline __attribute__((always_inline)) DC_TARGET void
dc_tile(const int R, float *restrict acc, int64_t ld, const float *in, const int64_t rs,
        const int32_t *restrict off, int64_t nk, const float *restrict w)
{
    DC_ACC_DECL;
    for (int64_t k = 0; k < nk; k++, w += 16) {
        __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
        const float *p = in + off[k];
#define DC_STEP(r, x0, x1)                                                                     \
    if (R > r) {                                                                               \
        __m256 v = _mm256_broadcast_ss(p + r * rs);                                            \
        x0 = _mm256_fmadd_ps(v, w0, x0);                                                       \
        x1 = _mm256_fmadd_ps(v, w1, x1);                                                       \
    }
        DC_FOR_R(DC_STEP)
#undef DC_STEP
    }
#define DC_STORE(r, x0, x1)                                                                    \
    if (R > r) {                                                                               \
        _mm256_storeu_ps(acc + ld * r, x0);                                                    \
        _mm256_storeu_ps(acc + ld * r + 8, x1);                                                \
    }
    DC_FOR_R(DC_STORE)
#undef DC_STORE
}

/* The narrow tile for convolutions with at most 8 output channels (the
 * first conv of hybridsn, the input gradient of its second): 16 channels
 * would leave half the lanes on zero filters, so R <= 12 positions x 8
 * channels instead (12 ymm accumulators, one packed weight load and 12
 * broadcasts per step). acc (R rows of 8) = sum over k < nk of
 * in[off[k] + r] * w[k][0..8). */
#define DC_TILE_P8 12
#define DC_ACC8_DECL                                                                           \
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,     \
           c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0
#define DC_FOR_R8(X) X(0, c0) X(1, c1) X(2, c2) X(3, c3) X(4, c4) X(5, c5) X(6, c6) X(7, c7) \
    X(8, c8) X(9, c9) X(10, c10) X(11, c11)

static inline __attribute__((always_inline)) DC_TARGET void
dc_tile8(const int R, float *restrict acc, const float *in, const int32_t *restrict off,
         int64_t nk, const float *restrict w)
{
    DC_ACC8_DECL;
    for (int64_t k = 0; k < nk; k++, w += 8) {
        __m256 w0 = _mm256_loadu_ps(w);
        const float *p = in + off[k];
#define DC_STEP8(r, x)                                                                         \
    if (R > r) x = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r), w0, x);
        DC_FOR_R8(DC_STEP8)
#undef DC_STEP8
    }
#define DC_STORE8(r, x)                                                                        \
    if (R > r) _mm256_storeu_ps(acc + 8 * r, x);
    DC_FOR_R8(DC_STORE8)
#undef DC_STORE8
}

/* dwp rows r < R (ld floats apart, 16 channels each) += sum over positions
 * o < npos of in[off[r] + pos[o]] * dyt[o * ld + 0..16) */
static inline __attribute__((always_inline)) DC_TARGET void
dc_dw_tile(const int R, float *restrict dwp, int64_t ld, const float *in,
           const int32_t *restrict off, const int32_t *restrict pos, int64_t npos,
           const float *restrict dyt)
{
    DC_ACC_DECL;
    const float *b0 = in + off[0], *b1 = R > 1 ? in + off[1] : in, *b2 = R > 2 ? in + off[2] : in,
                *b3 = R > 3 ? in + off[3] : in, *b4 = R > 4 ? in + off[4] : in,
                *b5 = R > 5 ? in + off[5] : in;
#define DC_LOAD(r, x0, x1)                                                                     \
    if (R > r) {                                                                               \
        x0 = _mm256_loadu_ps(dwp + r * ld);                                                    \
        x1 = _mm256_loadu_ps(dwp + r * ld + 8);                                                \
    }
    DC_FOR_R(DC_LOAD)
#undef DC_LOAD
    for (int64_t o = 0; o < npos; o++, dyt += ld) {
        __m256 d0 = _mm256_loadu_ps(dyt), d1 = _mm256_loadu_ps(dyt + 8);
        int32_t p = pos[o];
#define DC_STEP(r, x0, x1)                                                                     \
    if (R > r) {                                                                               \
        __m256 v = _mm256_broadcast_ss(b##r + p);                                              \
        x0 = _mm256_fmadd_ps(v, d0, x0);                                                       \
        x1 = _mm256_fmadd_ps(v, d1, x1);                                                       \
    }
        DC_FOR_R(DC_STEP)
#undef DC_STEP
    }
#define DC_STORE(r, x0, x1)                                                                    \
    if (R > r) {                                                                               \
        _mm256_storeu_ps(dwp + r * ld, x0);                                                    \
        _mm256_storeu_ps(dwp + r * ld + 8, x1);                                                \
    }
    DC_FOR_R(DC_STORE)
#undef DC_STORE
}

#define DC_SWITCH(R, CALL)                                                                     \
    switch (R) {                                                                               \
    case 6: CALL(6); break;                                                                    \
    case 5: CALL(5); break;                                                                    \
    case 4: CALL(4); break;                                                                    \
    case 3: CALL(3); break;                                                                    \
    case 2: CALL(2); break;                                                                    \
    default: CALL(1); break;                                                                   \
    }

static DC_TARGET void dc_tile_any(int R, float *acc, int64_t ld, const float *in,
                                  const int32_t *off, int64_t nk, const float *w)
{
#define DC_T(n) dc_tile(n, acc, ld, in, 1, off, nk, w)
    DC_SWITCH(R, DC_T)
#undef DC_T
}

/* the same with rows rs floats apart in `in` */
static DC_TARGET void dc_tile_rs_any(int R, float *acc, int64_t ld, const float *in, int64_t rs,
                                     const int32_t *off, int64_t nk, const float *w)
{
#define DC_T(n) dc_tile(n, acc, ld, in, rs, off, nk, w)
    DC_SWITCH(R, DC_T)
#undef DC_T
}

static DC_TARGET void dc_dw_tile_any(int R, float *dwp, int64_t ld, const float *in,
                                     const int32_t *off, const int32_t *pos, int64_t npos,
                                     const float *dyt)
{
#define DC_T(n) dc_dw_tile(n, dwp, ld, in, off, pos, npos, dyt)
    DC_SWITCH(R, DC_T)
#undef DC_T
}

static DC_TARGET void dc_tile8_any(int R, float *acc, const float *in, const int32_t *off,
                                   int64_t nk, const float *w)
{
#define DC_T(n) dc_tile8(n, acc, in, off, nk, w)
    switch (R) {
    case 12: DC_T(12); break;
    case 11: DC_T(11); break;
    case 10: DC_T(10); break;
    case 9: DC_T(9); break;
    case 8: DC_T(8); break;
    case 7: DC_T(7); break;
    default: DC_SWITCH(R, DC_T)
    }
#undef DC_T
}
#else
static void dc_tile8_any(int R, float *acc, const float *in, const int32_t *off, int64_t nk,
                         const float *w)
{
    (void)R, (void)acc, (void)in, (void)off, (void)nk, (void)w; /* never called */
}
static void dc_tile_any(int R, float *acc, int64_t ld, const float *in, const int32_t *off,
                        int64_t nk, const float *w)
{
    (void)R, (void)acc, (void)ld, (void)in, (void)off, (void)nk, (void)w; /* never called */
}
static void dc_tile_rs_any(int R, float *acc, int64_t ld, const float *in, int64_t rs,
                           const int32_t *off, int64_t nk, const float *w)
{
    (void)R, (void)acc, (void)ld, (void)in, (void)rs, (void)off, (void)nk, (void)w;
}
static void dc_dw_tile_any(int R, float *dwp, int64_t ld, const float *in, const int32_t *off,
                           const int32_t *pos, int64_t npos, const float *dyt)
{
    (void)R, (void)dwp, (void)ld, (void)in, (void)off, (void)pos, (void)npos, (void)dyt;
}
#endif

/* y[j * ld + r] (+)= tile[r * tk + j] (+ bias[j], ReLU) for the R positions
 * and nkk channels of a register tile (tk channels wide) */
static void dc_tile_store(float *y, int64_t ld, const float *tile, int tk, int R, int64_t nkk,
                          const float *bias, int acc, int relu)
{
    for (int64_t j = 0; j < nkk; j++, y += ld) {
        float bj = bias ? bias[j] : 0.0f;
        if (acc)
            for (int r = 0; r < R; r++) y[r] += tile[r * tk + j];
        else if (relu)
            for (int r = 0; r < R; r++) {
                float v = tile[r * tk + j] + bj;
                y[r] = v > 0 ? v : 0;
            }
        else
            for (int r = 0; r < R; r++) y[r] = tile[r * tk + j] + bj;
    }
}

/* out (n_out, out dims o[3]) (+)= filters wpk (n_out padded to 16 blocks of
 * (nk, 16)) applied to the padded plane `in` (plane dims p[3]) at stride 1;
 * (8 wide when n_out <= 8);
 * off: nk plane offsets; bias (n_out) or NULL; acc: 1 adds to out; relu: 1
 * stores max(0, value) (not with acc); v512: the AVX-512 tiles, whose
 * channel blocks are 32 wide where 17 or more channels remain (12
 * positions), else 16 (24 positions), and 8 for the narrow case (24). */
static void dc_conv_plane(float *out, int64_t n_out, const int64_t *o, const float *in,
                          const int64_t *p, const int32_t *off, int64_t nk, const float *wpk,
                          const float *bias, int acc, int relu, int v512)
{
    int64_t out_sp = o[0] * o[1] * o[2];
    float tile[DC_TILE_MAX];
    /* n_out <= 8: the narrow tile (filters packed 8 wide, dc_pack_width) */
    int narrow = n_out <= 8;
    /* Output rows in bands of DC_BAND_ROWS, every channel block over a band
     * before the next: a band reads kD x (DC_BAND_ROWS + kH - 1) rows of each
     * input channel, which stay in L1/L2 while the channel blocks take their
     * turns (channel blocks outermost would stream the whole plane, often
     * larger than L2 for 3-D convolutions, once per block). */
    for (int64_t a = 0; a < o[0]; a++)
        for (int64_t b0 = 0; b0 < o[1]; b0 += DC_BAND_ROWS) {
            int64_t b1 = b0 + DC_BAND_ROWS < o[1] ? b0 + DC_BAND_ROWS : o[1];
            int64_t tk;
            for (int64_t k0 = 0; k0 < n_out; k0 += tk) {
                int tp;
                if (narrow)
                    tk = 8, tp = v512 ? HSI_C512_P1 : DC_TILE_P8;
                else if (!v512)
                    tk = DC_TILE_K, tp = DC_TILE_P;
                else if (n_out - k0 > 16)
                    tk = 32, tp = HSI_C512_P2;
                else
                    tk = 16, tp = HSI_C512_P1;
                const float *wb = wpk + k0 * nk;
                int64_t nkk = n_out - k0 < tk ? n_out - k0 : tk;
                for (int64_t b = b0; b < b1; b++) {
                    const float *row = in + (a * p[1] + b) * p[2];
                    int64_t o_row = (a * o[1] + b) * o[2];
                    for (int64_t e0 = 0; e0 < o[2]; e0 += tp) {
                        int R = (int)(o[2] - e0 < tp ? o[2] - e0 : tp);
                        if (v512 && narrow)
                            hsi_c512_tile8(R, tile, row + e0, off, nk, wb);
                        else if (v512)
                            hsi_c512_tile((int)(tk / 16), R, tile, tk, row + e0, 1, off, nk, wb,
                                          16 * nk);
                        else if (narrow)
                            dc_tile8_any(R, tile, row + e0, off, nk, wb);
                        else
                            dc_tile_any(R, tile, DC_TILE_K, row + e0, off, nk, wb);
                        dc_tile_store(out + k0 * out_sp + o_row + e0, out_sp, tile, (int)tk, R,
                                      nkk, bias ? bias + k0 : NULL, acc, relu);
                    }
                }
            }
        }
}

/* m (nrow rows, ldm floats apart, of ncol channels) = v (nrow rows, rs
 * floats apart) x u (nk, ncol) packed in blocks of 16 channels (nk, 16)
 * whose first is u and the next ublk floats on, the rows of v read at
 * off[0..nk): the products of the Winograd pass, on the register tiles of
 * the CPU */
static void dc_products(float *m, int64_t ldm, const float *v, int64_t rs, int64_t nrow,
                        const int32_t *off, int64_t nk, const float *u, int64_t ublk,
                        int64_t ncol, int v512)
{
    if (v512) {
        hsi_c512_rows(m, ldm, v, rs, off, nk, u, ublk, nrow, ncol);
        return;
    }
    for (int64_t k0 = 0; k0 < ncol; k0 += DC_TILE_K) {
        const float *uk = u + k0 / 16 * ublk;
        for (int64_t t0 = 0; t0 < nrow; t0 += DC_TILE_P) {
            int R = (int)(nrow - t0 < DC_TILE_P ? nrow - t0 : DC_TILE_P);
            dc_tile_rs_any(R, m + t0 * ldm + k0, ldm, v + t0 * rs, rs, off, nk, uk);
        }
    }
}

/* dwp (nrow rows, ld floats apart, of ncol channels) += sum over positions
 * o < npos of in[off[r] + pos[o]] * dyt[o * ld + j]: the weight gradients,
 * on the register tiles of the CPU */
static void dc_dw_rows(float *dwp, int64_t ld, const float *in, const int32_t *off, int64_t nrow,
                       const int32_t *pos, int64_t npos, const float *dyt, int64_t ncol, int v512)
{
    int tp = v512 ? HSI_C512_DW : DC_TILE_P;
    for (int64_t q0 = 0; q0 < nrow; q0 += tp) {
        int R = (int)(nrow - q0 < tp ? nrow - q0 : tp);
        int64_t tk;
        for (int64_t k0 = 0; k0 < ncol; k0 += tk) {
            tk = v512 && ncol - k0 > 16 ? 32 : 16;
            if (v512)
                hsi_c512_dw_tile((int)(tk / 16), R, dwp + q0 * ld + k0, ld, in, off + q0, pos,
                                 npos, dyt + k0);
            else
                dc_dw_tile_any(R, dwp + q0 * ld + k0, ld, in, off + q0, pos, npos, dyt + k0);
        }
    }
}

/* plane (n_ch, p[3]) interior at lead[3] = src (n_ch, s[3]) packed; the
 * border is left as it is (zeroed once by the caller). */
static void dc_pad_copy(float *plane, const float *src, int64_t n_ch, const int64_t *s,
                        const int64_t *p, const int64_t *lead)
{
    int64_t plen = p[0] * p[1] * p[2];
    for (int64_t c = 0; c < n_ch; c++)
        for (int64_t a = 0; a < s[0]; a++)
            for (int64_t b = 0; b < s[1]; b++)
                memcpy(plane + c * plen + ((a + lead[0]) * p[1] + b + lead[1]) * p[2] + lead[2],
                       src + ((c * s[0] + a) * s[1] + b) * s[2], (size_t)s[2] * sizeof(float));
}

/* --------------------------------------------- Winograd F(2x2, 3x3) */

/* A 3x3 convolution with pad 1 at stride 1 as Winograd's F(2x2, 3x3): each
 * 2x2 block of outputs from a 4x4 window of the padded input, with 16
 * products per (in, out) channel pair instead of 36. Per sample: the input
 * goes channels-last into a zero-padded plane (hq, wq, cp), cp = channels
 * rounded up to 8; the windows are transformed 8 channels at a time
 * (V = B^T d B, into V (16, tiles, cp)); 16 independent products M[xi]
 * (tiles, npad) = V[xi] (tiles, cp) U[xi] (cp, npad) run on the register
 * tile above; the outputs come back 8 channels at a time through
 * Y = A^T M A. U = G g G^T is built per call.
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],  A^T = [1 1 1 0; 0 1 -1 -1] */

typedef float dc_v8 __attribute__((vector_size(32), aligned(4), may_alias));
#define DC_V8(p) (*(dc_v8 *)(p))

/* U (16, npad/16, kd * cp, 16): U[xi][o0][z * cp + i][j] = (G g G^T)[xi]
 * for the 3x3 filter g at depth tap z (kd = 1 in 2-D) from input channel i
 * to output channel o0 + j; zero past n_out and n_in. flip_transpose: the
 * filters of dx, w (n_in, n_out, kd, 3, 3) rotated 180 deg in all axes. */
typedef struct wg_pack_job {
    float *u;
    const float *w;
    int64_t n_out, n_in, kd;
    int flip_transpose;
} wg_pack_job;

/* wg_pack for the 16-channel blocks of output channels that thread th of nth owns */
static hsi_status wg_pack_part(void *ctx, int th, int nth)
{
    const wg_pack_job *j = ctx;
    int64_t n_out = j->n_out, n_in = j->n_in, npad = dc_round16(n_out), cp = dc_round8(n_in),
            kd = j->kd;
    int64_t b0, b1; /* 16-channel blocks: each block's slice of u is one thread's */
    hsi_split_range(npad / 16, th, nth, &b0, &b1);
    float *u = j->u;
    const float *w = j->w;
    /* block by block, input channel by input channel, the 16 output channels
     * of the block innermost: each 64-byte row of u is written at once */
    for (int64_t b = b0; b < b1; b++)
        for (int64_t zi = 0; zi < kd * cp; zi++) {
            int64_t z = zi / cp, i = zi % cp;
            float r16[16][16]; /* [xi][j] */
            for (int64_t jj = 0; jj < 16; jj++) {
                int64_t o = 16 * b + jj;
                if (o >= n_out || i >= n_in) { /* padding: zero filters */
                    for (int xi = 0; xi < 16; xi++) r16[xi][jj] = 0;
                    continue;
                }
                float g[9], t[12];
                if (j->flip_transpose)
                    for (int e = 0; e < 9; e++)
                        g[e] = w[((i * n_out + o) * kd + kd - 1 - z) * 9 + 8 - e];
                else
                    for (int e = 0; e < 9; e++) g[e] = w[((o * n_in + i) * kd + z) * 9 + e];
                for (int c = 0; c < 3; c++) { /* t (4x3) = G g */
                    t[0 * 3 + c] = g[c];
                    t[1 * 3 + c] = 0.5f * (g[c] + g[3 + c] + g[6 + c]);
                    t[2 * 3 + c] = 0.5f * (g[c] - g[3 + c] + g[6 + c]);
                    t[3 * 3 + c] = g[6 + c];
                }
                for (int a = 0; a < 4; a++) { /* (t G^T)[a][.] */
                    const float *q = t + a * 3;
                    r16[a * 4 + 0][jj] = q[0];
                    r16[a * 4 + 1][jj] = 0.5f * (q[0] + q[1] + q[2]);
                    r16[a * 4 + 2][jj] = 0.5f * (q[0] - q[1] + q[2]);
                    r16[a * 4 + 3][jj] = q[2];
                }
            }
            for (int xi = 0; xi < 16; xi++)
                memcpy(u + ((xi * (npad / 16) + b) * kd * cp + zi) * 16, r16[xi], sizeof r16[xi]);
        }
    return HSI_OK;
}

static void wg_pack(float *u, const float *w, int64_t n_out, int64_t n_in, int64_t kd,
                    int flip_transpose, int nt)
{
    wg_pack_job j = {u, w, n_out, n_in, kd, flip_transpose};
    int64_t blocks = dc_round16(n_out) / 16;
    (void)hsi_parallel(nt < blocks ? nt : (int)blocks, wg_pack_part, &j);
}

/* plane (hq, wq, cp) interior at (lead_y, lead_x) = src (n_in, h, w), its
 * channels cs floats apart, transposed; the border and channels past n_in
 * stay as they are (zeroed once). */
static void wg_plane(float *plane, const float *src, int64_t n_in, int64_t h, int64_t w,
                     int64_t cs, int64_t lead_y, int64_t lead_x, const dc_geom *g)
{
    int64_t cp = dc_round8(n_in);
    for (int64_t y = 0; y < h; y++)
        hsi_kern_transpose_f32(plane + ((y + lead_y) * g->wq + lead_x) * cp, cp, src + y * w, cs,
                               n_in, w);
}

/* V (16, nt, cp) = B^T d B of every 4x4 window (tile ti, tj at 2ti, 2tj);
 * xs: floats between the 16 planes of V (nt * cp, or more when V holds the
 * tiles of several samples) */
static DC_TARGET void wg_input(float *v, const float *plane, int64_t cp, int64_t xs,
                               const dc_geom *g)
{
    int64_t row = g->wq * cp;
    for (int64_t ti = 0; ti < g->th; ti++)
        for (int64_t tj = 0; tj < g->tw; tj++) {
            const float *d = plane + (2 * ti * g->wq + 2 * tj) * cp;
            float *o = v + (ti * g->tw + tj) * cp;
            for (int64_t c = 0; c < cp; c += 8) {
                dc_v8 t[16];
                for (int b = 0; b < 4; b++) { /* t = B^T d (rows a) */
                    dc_v8 d0 = DC_V8(d + b * cp + c), d1 = DC_V8(d + row + b * cp + c),
                          d2 = DC_V8(d + 2 * row + b * cp + c), d3 = DC_V8(d + 3 * row + b * cp + c);
                    t[0 * 4 + b] = d0 - d2, t[1 * 4 + b] = d1 + d2;
                    t[2 * 4 + b] = d2 - d1, t[3 * 4 + b] = d1 - d3;
                }
                for (int a = 0; a < 4; a++) { /* (B^T d) B (columns) */
                    const dc_v8 *q = t + a * 4;
                    DC_V8(o + (a * 4 + 0) * xs + c) = q[0] - q[2];
                    DC_V8(o + (a * 4 + 1) * xs + c) = q[1] + q[2];
                    DC_V8(o + (a * 4 + 2) * xs + c) = q[2] - q[1];
                    DC_V8(o + (a * 4 + 3) * xs + c) = q[1] - q[3];
                }
            }
        }
}

/* out (n_out, oh, ow; channels cs floats apart) (+)= A^T M A per tile, M
 * (16, nt, npad) with xs floats between its 16 planes; bias or NULL; relu:
 * max(0, value) (not with acc).
 * The 2x2 blocks go channels-last into
 * o (oh+1, ow+1, npad) with vector stores, then out gets them transposed,
 * one channel row at a time. */
static DC_TARGET void wg_output(float *out, int64_t n_out, int64_t cs, const float *m, int64_t xs,
                                float *o, const dc_geom *g, const float *bias, int acc, int relu)
{
    int64_t npad = dc_round16(n_out), oh = g->out[1], ow = g->out[2], ow2 = 2 * g->tw;
    for (int64_t ti = 0; ti < g->th; ti++)
        for (int64_t tj = 0; tj < g->tw; tj++) {
            const float *mt = m + (ti * g->tw + tj) * npad;
            float *ot = o + (2 * ti * ow2 + 2 * tj) * npad;
            for (int64_t k0 = 0; k0 < npad; k0 += 8) {
                dc_v8 q[16], r[8];
                for (int xi = 0; xi < 16; xi++) q[xi] = DC_V8(mt + xi * xs + k0);
                for (int c = 0; c < 4; c++) { /* A^T q (rows) */
                    r[c] = q[c] + q[4 + c] + q[8 + c];
                    r[4 + c] = q[4 + c] - q[8 + c] - q[12 + c];
                }
                DC_V8(ot + k0) = r[0] + r[1] + r[2];
                DC_V8(ot + npad + k0) = r[1] - r[2] - r[3];
                DC_V8(ot + ow2 * npad + k0) = r[4] + r[5] + r[6];
                DC_V8(ot + (ow2 + 1) * npad + k0) = r[5] - r[6] - r[7];
            }
        }
    if (acc) {
        for (int64_t k = 0; k < n_out; k++)
            for (int64_t y = 0; y < oh; y++) {
                float *dst = out + k * cs + y * ow;
                const float *src = o + y * ow2 * npad + k;
                for (int64_t x = 0; x < ow; x++) dst[x] += src[x * npad];
            }
        return;
    }
    for (int64_t y = 0; y < oh; y++) /* rows of o, transposed into out */
        hsi_kern_transpose_f32(out + y * ow, cs, o + y * ow2 * npad, npad, ow, n_out);
    if (!bias && !relu) return;
    for (int64_t k = 0; k < n_out; k++) {
        float b = bias ? bias[k] : 0.0f, *dst = out + k * cs;
        if (relu)
            for (int64_t i = 0; i < oh * ow; i++) dst[i] = dst[i] + b > 0 ? dst[i] + b : 0;
        else
            for (int64_t i = 0; i < oh * ow; i++) dst[i] += b;
    }
}

/* ns samples (at most wg_fgroup): out (ns, n_out, oh, ow) (+)= the
 * convolution of src (ns, n_in, src_hw), placed at `lead` in the padded
 * plane, with the transformed filters u. The tiles of the ns samples share one set of 16 products (few tiles per
 * sample would leave the register tile half empty). plane, v, m, o: scratch
 * (plane's border zeroed by the caller); off: cp offsets 0, 1, ... */
static void wg_samples(float *out, int64_t n_out, const float *src, int64_t n_in,
                       const int64_t *src_hw, const int64_t *lead, int64_t ns, float *plane,
                       const float *u, const int32_t *off, float *v, float *m, float *o,
                       const dc_geom *g, const float *bias, int acc, int relu)
{
    int64_t npad = dc_round16(n_out), cp = dc_round8(n_in), nt = g->nt * ns;
    int64_t in_sp = n_in * src_hw[0] * src_hw[1], out_sp = n_out * g->out[1] * g->out[2];
    for (int64_t e = 0; e < ns; e++) {
        wg_plane(plane, src + e * in_sp, n_in, src_hw[0], src_hw[1], src_hw[0] * src_hw[1],
                 lead[0], lead[1], g);
        wg_input(v + e * g->nt * cp, plane, cp, nt * cp, g);
    }
    for (int xi = 0; xi < 16; xi++)
        dc_products(m + xi * nt * npad, npad, v + xi * nt * cp, cp, nt, off, cp,
                    u + xi * npad * cp, 16 * cp, npad, g->v512);
    for (int64_t e = 0; e < ns; e++)
        wg_output(out + e * out_sp, n_out, g->out[1] * g->out[2], m + e * g->nt * npad, nt * npad,
                  o, g, bias, acc, relu);
}

static void wg_offsets(int32_t *off, int64_t n)
{
    for (int64_t i = 0; i < n; i++) off[i] = (int32_t)i;
}

/* For dw: Dy (16, nt, kpad) = A dY A^T of every 2x2 block of dy (K, oh, ow;
 * channels cs floats apart)
 * (A = [1 0; 1 1; 1 -1; 0 -1], the adjoint of the output transform); dyc
 * (2th, 2tw, kpad): dy channels-last, its padding zeroed by the caller; xs:
 * floats between the 16 planes of Dy. */
static DC_TARGET void wg_dy(float *m, int64_t xs, float *dyc, const float *dy, int64_t cs,
                            const dc_geom *g)
{
    int64_t kpad = g->kpad, oh = g->out[1], ow = g->out[2], ow2 = 2 * g->tw;
    for (int64_t y = 0; y < oh; y++)
        hsi_kern_transpose_f32(dyc + y * ow2 * kpad, kpad, dy + y * ow, cs, g->k, ow);
    for (int64_t ti = 0; ti < g->th; ti++)
        for (int64_t tj = 0; tj < g->tw; tj++) {
            const float *d = dyc + (2 * ti * ow2 + 2 * tj) * kpad;
            float *o = m + (ti * g->tw + tj) * kpad;
            for (int64_t k0 = 0; k0 < kpad; k0 += 8) {
                dc_v8 d00 = DC_V8(d + k0), d01 = DC_V8(d + kpad + k0),
                      d10 = DC_V8(d + ow2 * kpad + k0), d11 = DC_V8(d + (ow2 + 1) * kpad + k0);
                dc_v8 r[4][2] = {{d00, d01}, {d00 + d10, d01 + d11}, {d00 - d10, d01 - d11},
                                 {-d10, -d11}}; /* A dY (rows) */
                for (int a = 0; a < 4; a++) { /* (A dY) A^T (columns) */
                    DC_V8(o + (a * 4 + 0) * xs + k0) = r[a][0];
                    DC_V8(o + (a * 4 + 1) * xs + k0) = r[a][0] + r[a][1];
                    DC_V8(o + (a * 4 + 2) * xs + k0) = r[a][0] - r[a][1];
                    DC_V8(o + (a * 4 + 3) * xs + k0) = -r[a][1];
                }
            }
        }
}

typedef struct wg_fin_job {
    float *dw;
    const dc_ws *w;
    const dc_geom *g;
    int n_parts; /* threads whose Z partials are summed */
} wg_fin_job;

/* output channels [k0, k1): dw (K, C, kD, 3, 3) += G^T Z G, Z = the partials
 * (16, kD * cp, kpad) of the threads added in thread order (kD = 1 in
 * 2-D); 8 output channels at
 * a time in the lanes of a vector (Z is contiguous along k), the rest one
 * by one */
static DC_TARGET hsi_status wg_fin_part(void *ctx, int t, int nt)
{
    const wg_fin_job *j = ctx;
    const dc_ws *w = j->w;
    const dc_geom *g = j->g;
    int64_t cp = dc_round8(g->c), kp = g->kpad, kd = g->ker[0], k0, k1;
    int64_t zoff = w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len + w->v_len + w->m_len +
                   w->o_len;
    hsi_split_range(g->k, t, nt, &k0, &k1);
    for (int64_t zc = 0; zc < kd * g->c; zc++)
        for (int64_t k = k0; k < k1; k += 8) {
            int64_t dz = zc / g->c, c = zc % g->c;
            int64_t nk = k1 - k < 8 ? k1 - k : 8;
            dc_v8 z[16], tt[3][4];
            float zs[8];
            for (int xi = 0; xi < 16; xi++) {
                dc_v8 acc = {0};
                for (int p = 0; p < j->n_parts; p++) {
                    const float *zt =
                        w->slot0 + p * w->slot_len + zoff + (xi * kd * cp + dz * cp + c) * kp + k;
                    if (nk == 8) {
                        acc += DC_V8(zt);
                    } else { /* the last few channels of the range */
                        memcpy(zs, zt, (size_t)nk * sizeof(float));
                        for (int64_t l = nk; l < 8; l++) zs[l] = 0;
                        acc += DC_V8(zs);
                    }
                }
                z[xi] = acc;
            }
            for (int b = 0; b < 4; b++) { /* G^T Z: rows 1/2 (z0 + z1 + z2), ... */
                tt[0][b] = z[b] + 0.5f * (z[4 + b] + z[8 + b]);
                tt[1][b] = 0.5f * (z[4 + b] - z[8 + b]);
                tt[2][b] = 0.5f * (z[4 + b] + z[8 + b]) + z[12 + b];
            }
            float o9[9][8];
            for (int i = 0; i < 3; i++) { /* (G^T Z) G */
                dc_v8 e0 = tt[i][0] + 0.5f * (tt[i][1] + tt[i][2]);
                dc_v8 e1 = 0.5f * (tt[i][1] - tt[i][2]);
                dc_v8 e2 = 0.5f * (tt[i][1] + tt[i][2]) + tt[i][3];
                memcpy(o9[i * 3 + 0], &e0, 32);
                memcpy(o9[i * 3 + 1], &e1, 32);
                memcpy(o9[i * 3 + 2], &e2, 32);
            }
            for (int64_t l = 0; l < nk; l++) {
                float *o = j->dw + (((k + l) * g->c + c) * kd + dz) * 9;
                for (int e = 0; e < 9; e++) o[e] += o9[e][l];
            }
        }
    return HSI_OK;
}

static void wg_dw_finish(float *dw, const dc_ws *w, const dc_geom *g, int n_parts)
{
    wg_fin_job j = {dw, w, g, n_parts};
    int nt = g->slots < 1 ? 1 : g->slots;
    (void)hsi_parallel(nt > g->k ? (int)g->k : nt, wg_fin_part, &j);
}

/* ---------------------------------------------- Winograd in 3-D, by slices */

/* A kD x 3 x 3 convolution is, for each output slice d, the sum over the
 * depth taps z of the 2-D 3x3 convolution of source slice d + z - lead
 * with the filters' slice z: in Winograd's terms, M[xi] (tiles, npad) =
 * sum over z of V[xi] of that slice (tiles, cp) U[xi][z] (cp, npad), one
 * product whose reduction runs over (z, channel). The V of each source
 * slice is computed once, into a ring of kD slices (a slice is needed by
 * kD output slices in a row), and the reduction's table of offsets points
 * each (z, channel) into the ring. Taps that fall in the depth padding are
 * left out of the reduction (their slices are zero). */

/* the depth taps [z0, z1) of output slice d whose source slice d + z -
 * lead lies in [0, sd); never empty, since lead <= kd - 1 and the output
 * has sd + 2 lead - kd + 1 slices */
static void wg3_taps(int64_t d, int64_t lead, int64_t sd, int64_t kd, int64_t *z0, int64_t *z1)
{
    *z0 = lead - d > 0 ? lead - d : 0;
    *z1 = sd + lead - d < kd ? sd + lead - d : kd;
}

/* V of source slices up to `upto` (exclusive) into the ring, from *next
 * on: src (n_in, sd, sh, sw), placed at lead[1..2] in the plane */
static void wg3_fill(float *ring, int64_t *next, int64_t upto, const float *src, int64_t n_in,
                     const int64_t *sdim, const int64_t *lead, float *plane, const dc_geom *g)
{
    int64_t cp = dc_round8(n_in), slab = 16 * g->nt * cp, kd = g->ker[0];
    for (; *next < upto; ++*next) {
        wg_plane(plane, src + *next * sdim[1] * sdim[2], n_in, sdim[1], sdim[2],
                 sdim[0] * sdim[1] * sdim[2], lead[1], lead[2], g);
        wg_input(ring + *next % kd * slab, plane, cp, g->nt * cp, g);
    }
}

/* off[(z - z0) * cp + c] = the ring offset of channel c of source slice
 * d + z - lead, for z in [z0, z1) */
static void wg3_offsets(int32_t *off, int64_t d, int64_t lead, int64_t z0, int64_t z1,
                        int64_t cp, int64_t slab, int64_t kd)
{
    for (int64_t z = z0; z < z1; z++)
        for (int64_t c = 0; c < cp; c++)
            off[(z - z0) * cp + c] = (int32_t)((d + z - lead) % kd * slab + c);
}

/* One sample: out (n_out, od, oh, ow) (+)= the kD x 3 x 3 convolution of
 * src (n_in, sdim) placed at lead[3] in its zero-padded volume, with the
 * transformed filters u (16, npad/16, kD * cp, 16); g: the tiles of out.
 * plane (border zeroed by the caller), ring, m, o, off: the slot's scratch. */
static void wg3_conv(float *out, int64_t n_out, const float *src, int64_t n_in,
                     const int64_t *sdim, const int64_t *lead, const float *u, float *plane,
                     float *ring, float *m, float *o, int32_t *off, const dc_geom *g,
                     const float *bias, int acc, int relu)
{
    int64_t npad = dc_round16(n_out), cp = dc_round8(n_in), nt = g->nt, kd = g->ker[0];
    int64_t slab = 16 * nt * cp, osl = g->out[1] * g->out[2], next = 0;
    for (int64_t d = 0; d < g->out[0]; d++) {
        int64_t z0, z1;
        wg3_taps(d, lead[0], sdim[0], kd, &z0, &z1);
        wg3_fill(ring, &next, d + z1 - lead[0], src, n_in, sdim, lead, plane, g);
        wg3_offsets(off, d, lead[0], z0, z1, cp, slab, kd);
        for (int xi = 0; xi < 16; xi++)
            dc_products(m + xi * nt * npad, npad, ring + xi * nt * cp, cp, nt, off, (z1 - z0) * cp,
                        u + (xi * npad * kd + z0 * 16) * cp, 16 * kd * cp, npad, g->v512);
        wg_output(out + d * osl, n_out, g->out[0] * osl, m, nt * npad, o, g, bias, acc, relu);
    }
}

/* One sample's weight gradient: Z (16, kD * cp, kpad) += the sums over
 * output slices d and tiles of V[xi] of slice d + z - pad (tiles, cp)^T Dy[xi]
 * of slice d (tiles, kpad). x (C, in), dy (K, out); dyt holds Dy, dyc
 * the channels-last dy of a slice (its padding zeroed by the caller), pos
 * the tile rows of V (t * cp). */
static void wg3_dw(float *z, const float *x, const float *dy, float *plane, float *ring,
                   float *dyt, float *dyc, int32_t *off, const int32_t *pos, const dc_geom *g)
{
    int64_t cp = dc_round8(g->c), kp = g->kpad, nt = g->nt, kd = g->ker[0];
    int64_t slab = 16 * nt * cp, osl = g->out[1] * g->out[2], next = 0;
    for (int64_t d = 0; d < g->out[0]; d++) {
        int64_t z0, z1;
        wg3_taps(d, g->pad[0], g->in[0], kd, &z0, &z1);
        wg3_fill(ring, &next, d + z1 - g->pad[0], x, g->c, g->in, g->pad, plane, g);
        wg3_offsets(off, d, g->pad[0], z0, z1, cp, slab, kd);
        wg_dy(dyt, nt * kp, dyc, dy + d * osl, g->out_sp, g);
        for (int xi = 0; xi < 16; xi++)
            dc_dw_rows(z + (xi * kd + z0) * cp * kp, kp, ring + xi * nt * cp, off, (z1 - z0) * cp,
                       pos, nt, dyt + xi * nt * kp, kp, g->v512);
    }
}

/* ----------------------------------------------------------------- passes */

typedef struct dc_job {
    const dc_geom *g;
    const dc_ws *w;
    float *y, *dx;
    const float *x, *b, *dy;
    int want_dw, want_db, dx_acc, relu;
} dc_job;

static hsi_status dc_forward_part(void *ctx, int t, int nt)
{
    const dc_job *j = ctx;
    const dc_geom *g = j->g;
    const dc_ws *w = j->w;
    float *plane = w->slot0 + t * w->slot_len;
    int64_t s0 = g->n * t / nt, s1 = g->n * (t + 1) / nt;
    if (g->wg && g->nd == 3) {
        float *v = plane + w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len, *m = v + w->v_len,
              *o = m + w->m_len;
        int32_t *off = (int32_t *)(o + w->o_len + w->z_len);
        memset(plane, 0, (size_t)(dc_round8(g->c) * g->hq * g->wq) * sizeof(float));
        for (int64_t s = s0; s < s1; s++)
            wg3_conv(j->y + s * g->k * g->out_sp, g->k, j->x + s * g->c * g->in_sp, g->c, g->in,
                     g->pad, w->wf, plane, v, m, o, off, g, j->b, 0, j->relu);
        return HSI_OK;
    }
    if (g->wg) {
        float *v = plane + w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len, *m = v + w->v_len;
        memset(plane, 0, (size_t)(dc_round8(g->c) * g->hq * g->wq) * sizeof(float));
        for (int64_t s = s0; s < s1; s += g->wg_fgroup) {
            int64_t ns = s1 - s < g->wg_fgroup ? s1 - s : g->wg_fgroup;
            wg_samples(j->y + s * g->k * g->out_sp, g->k, j->x + s * g->c * g->in_sp, g->c,
                       g->in + 1, g->pad + 1, ns, plane, w->wf, w->offf, v, m, m + w->m_len, g,
                       j->b, 0, j->relu);
        }
        return HSI_OK;
    }
    memset(plane, 0, (size_t)(g->c * g->fplane + DC_SLACK) * sizeof(float));
    for (int64_t s = s0; s < s1; s++) {
        dc_pad_copy(plane, j->x + s * g->c * g->in_sp, g->c, g->in, g->fp, g->pad);
        dc_conv_plane(j->y + s * g->k * g->out_sp, g->k, g->out, plane, g->fp, w->offf, g->nkf,
                      w->wf, j->b, 0, j->relu, g->v512);
    }
    return HSI_OK;
}

static hsi_status dc_backward_part(void *ctx, int t, int nt)
{
    const dc_job *j = ctx;
    const dc_geom *g = j->g;
    const dc_ws *w = j->w;
    float *plane = w->slot0 + t * w->slot_len, *dyt = plane + w->plane_len,
          *dwp = dyt + w->dyt_len;
    double *dbp = (double *)(dwp + w->dwp_len);
    int64_t s0 = g->n * t / nt, s1 = g->n * (t + 1) / nt;
    if (j->want_db) {
        /* dbp (K) = sum of dy over this thread's samples and positions (rows of
         * out_sp in float, added in double) */
        memset(dbp, 0, (size_t)g->k * sizeof(double));
        for (int64_t s = s0; s < s1; s++)
            for (int64_t k = 0; k < g->k; k++) {
                const float *r = j->dy + (s * g->k + k) * g->out_sp;
                float p = 0;
                for (int64_t o = 0; o < g->out_sp; o++) p += r[o];
                dbp[k] += (double)p;
            }
    }
    if (j->want_dw && g->wg && g->nd == 3) {
        float *v = plane + w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len, *m = v + w->v_len,
              *dyc = m + w->m_len, *z = dyc + w->o_len;
        int32_t *off = (int32_t *)(z + w->z_len);
        memset(z, 0, (size_t)w->z_len * sizeof(float));
        memset(dyc, 0, (size_t)w->o_len * sizeof(float));
        memset(plane, 0, (size_t)(dc_round8(g->c) * g->hq * g->wq) * sizeof(float));
        for (int64_t s = s0; s < s1; s++)
            wg3_dw(z, j->x + s * g->c * g->in_sp, j->dy + s * g->k * g->out_sp, plane, v, m, dyc,
                   off, w->pos, g);
    } else if (j->want_dw && g->wg) {
        /* Z (16, cp, kpad) += V[xi]^T (cp, nt) Dy[xi] (nt, kpad), every sample */
        float *v = plane + w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len, *m = v + w->v_len,
              *dyc = m + w->m_len, *z = dyc + w->o_len;
        int64_t cp = dc_round8(g->c), kp = g->kpad, gn = g->wg_group, nt_ = g->nt * gn;
        memset(z, 0, (size_t)w->z_len * sizeof(float));
        memset(dyc, 0, (size_t)w->o_len * sizeof(float));
        memset(plane, 0, (size_t)(cp * g->hq * g->wq) * sizeof(float));
        for (int64_t s = s0; s < s1; s += gn) {
            int64_t ns = s1 - s < gn ? s1 - s : gn, nts = g->nt * ns; /* tiles this pass */
            for (int64_t e = 0; e < ns; e++) { /* V and Dy of sample s + e at tile e * nt */
                wg_plane(plane, j->x + (s + e) * g->c * g->in_sp, g->c, g->in[1], g->in[2],
                         g->in_sp, g->pad[1], g->pad[2], g);
                wg_input(v + e * g->nt * cp, plane, cp, nt_ * cp, g);
                wg_dy(m + e * g->nt * kp, nt_ * kp, dyc, j->dy + (s + e) * g->k * g->out_sp,
                      g->out_sp, g);
            }
            for (int xi = 0; xi < 16; xi++)
                dc_dw_rows(z + xi * cp * kp, kp, v + xi * nt_ * cp, w->offf, cp, w->pos, nts,
                           m + xi * nt_ * kp, kp, g->v512);
        }
    } else if (j->want_dw) {
        memset(dwp, 0, (size_t)w->dwp_len * sizeof(float));
        memset(dyt, 0, (size_t)w->dyt_len * sizeof(float));
        memset(plane, 0, (size_t)(g->c * g->fplane) * sizeof(float));
        for (int64_t s = s0; s < s1; s++) {
            const float *dys = j->dy + s * g->k * g->out_sp;
            dc_pad_copy(plane, j->x + s * g->c * g->in_sp, g->c, g->in, g->fp, g->pad);
            /* dyt (positions, kpad) = dy of sample s (K, positions) transposed */
            hsi_kern_transpose_f32(dyt, g->kpad, dys, g->out_sp, g->k, g->out_sp);
            /* positions in chunks whose rows of dyt stay in L2 while every
             * (c, tap) row block passes over them (all of dyt, 800 KiB for
             * hybridsn's third conv, would come from L3 each time) */
            int64_t chunk = DC_DW_CHUNK / g->kpad;
            for (int64_t o0 = 0; o0 < g->out_sp; o0 += chunk) {
                int64_t no = g->out_sp - o0 < chunk ? g->out_sp - o0 : chunk;
                dc_dw_rows(dwp, g->kpad, plane, w->offf, g->nkf, w->pos + o0, no,
                           dyt + o0 * g->kpad, g->kpad, g->v512);
            }
        }
    }
    if (j->dx && g->wgdx && g->nd == 3) { /* dy padded by ker - 1 - pad, flipped filters */
        float *v = plane + w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len, *m = v + w->v_len,
              *o = m + w->m_len;
        int32_t *off = (int32_t *)(o + w->o_len + w->z_len);
        dc_geom gd;
        dc_geom_dx(&gd, g);
        int64_t lead[3];
        for (int a = 0; a < 3; a++) lead[a] = g->ker[a] - 1 - g->pad[a];
        memset(plane, 0, (size_t)(dc_round8(g->k) * gd.hq * gd.wq) * sizeof(float));
        for (int64_t s = s0; s < s1; s++)
            wg3_conv(j->dx + s * g->c * g->in_sp, g->c, j->dy + s * g->k * g->out_sp, g->k, g->out,
                     lead, w->wb, plane, v, m, o, off, &gd, NULL, j->dx_acc, 0);
    } else if (j->dx && g->wgdx) { /* dy padded by 2 - pad, flipped filters: dx */
        float *v = plane + w->plane_len + w->dyt_len + w->dwp_len + w->dbp_len, *m = v + w->v_len;
        dc_geom gd;
        dc_geom_dx(&gd, g);
        const int64_t lead[2] = {g->ker[1] - 1 - g->pad[1], g->ker[2] - 1 - g->pad[2]};
        memset(plane, 0, (size_t)(dc_round8(g->k) * gd.hq * gd.wq) * sizeof(float));
        for (int64_t s = s0; s < s1; s += gd.wg_fgroup) {
            int64_t ns = s1 - s < gd.wg_fgroup ? s1 - s : gd.wg_fgroup;
            wg_samples(j->dx + s * g->c * g->in_sp, g->c, j->dy + s * g->k * g->out_sp, g->k,
                       g->out + 1, lead, ns, plane, w->wb, w->offb, v, m, m + w->m_len, &gd,
                       NULL, j->dx_acc, 0);
        }
    } else if (j->dx) {
        int64_t lead[3];
        for (int a = 0; a < 3; a++) lead[a] = g->ker[a] - 1 - g->pad[a];
        memset(plane, 0, (size_t)(g->k * g->bplane + DC_SLACK) * sizeof(float));
        for (int64_t s = s0; s < s1; s++) {
            dc_pad_copy(plane, j->dy + s * g->k * g->out_sp, g->k, g->out, g->bp, lead);
            dc_conv_plane(j->dx + s * g->c * g->in_sp, g->c, g->in, plane, g->bp, w->offb,
                          g->nkb, w->wb, NULL, j->dx_acc, 0, g->v512);
        }
    }
    return HSI_OK;
}

static int dc_threads(const dc_geom *g) { return g->slots < 1 ? 1 : g->slots; }

/* width of the packed filter blocks of dc_conv_plane for n_out channels */
static int64_t dc_pack_width(int64_t n_out) { return n_out <= 8 ? 8 : 16; }

/* wf (kpad/bw, nkf, bw): wf[k0][q][j] = w[k0 + j][q], zero past K; bw = dc_pack_width(K) */
static void dc_pack_forward(float *wf, const float *w, const dc_geom *g)
{
    int64_t bw = dc_pack_width(g->k);
    for (int64_t k0 = 0; k0 < g->k; k0 += bw)
        for (int64_t q = 0; q < g->nkf; q++)
            for (int64_t j = 0; j < bw; j++)
                wf[(k0 * g->nkf) + q * bw + j] = k0 + j < g->k ? w[(k0 + j) * g->nkf + q] : 0.0f;
}

/* wb (cpad/bw, nkb, bw): wb[c0][k*taps + t][j] = w[k][c0 + j][taps - 1 - t] (flipped),
 * zero past C; bw = dc_pack_width(C) */
static void dc_pack_backward(float *wb, const float *w, const dc_geom *g)
{
    int64_t bw = dc_pack_width(g->c);
    for (int64_t c0 = 0; c0 < g->c; c0 += bw)
        for (int64_t k = 0; k < g->k; k++)
            for (int64_t t = 0; t < g->taps; t++)
                for (int64_t j = 0; j < bw; j++)
                    wb[c0 * g->nkb + (k * g->taps + t) * bw + j] =
                        c0 + j < g->c ? w[(k * g->c + c0 + j) * g->taps + g->taps - 1 - t] : 0.0f;
}

void hsi_conv_direct_forward(float *y, const float *x, const float *w, const float *b,
                             const hsi_conv_dims *d, void *ws, int relu)
{
    dc_geom g;
    dc_ws wl;
    dc_geom_fill(&g, d);
    dc_ws_layout(&wl, &g, ws);
    if (g.wg) {
        wg_pack(wl.wf, w, g.k, g.c, g.ker[0], 0, dc_threads(&g));
        wg_offsets(wl.offf, dc_round8(g.c));
    } else {
        dc_pack_forward(wl.wf, w, &g);
        dc_offsets(wl.offf, g.c, g.fplane, g.ker, g.fp);
    }
    dc_job j = {.g = &g, .w = &wl, .y = y, .x = x, .b = b, .relu = relu};
    (void)hsi_parallel(dc_threads(&g), dc_forward_part, &j); /* parts cannot fail */
}

void hsi_conv_direct_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const hsi_conv_dims *d, void *ws, int dx_accumulate)
{
    if (!dx && !dw && !db) return;
    dc_geom g;
    dc_ws wl;
    dc_geom_fill(&g, d);
    dc_ws_layout(&wl, &g, ws);
    if (dw && g.wg) { /* Winograd dw: channel offsets and tile rows of V */
        wg_offsets(wl.offf, dc_round8(g.c));
        for (int64_t t = 0; t < g.nt * g.wg_group; t++) wl.pos[t] = (int32_t)(t * dc_round8(g.c));
    } else if (dw) {
        dc_offsets(wl.offf, g.c, g.fplane, g.ker, g.fp);
        int64_t o = 0;
        for (int64_t a = 0; a < g.out[0]; a++)
            for (int64_t b = 0; b < g.out[1]; b++)
                for (int64_t e = 0; e < g.out[2]; e++)
                    wl.pos[o++] = (int32_t)((a * g.fp[1] + b) * g.fp[2] + e);
    }
    if (dx && g.wgdx) {
        wg_pack(wl.wb, w, g.c, g.k, g.ker[0], 1, dc_threads(&g));
        wg_offsets(wl.offb, dc_round8(g.k));
    } else if (dx) {
        dc_pack_backward(wl.wb, w, &g);
        dc_offsets(wl.offb, g.k, g.bplane, g.ker, g.bp);
    }
    int nt = dc_threads(&g);
    dc_job j = {.g = &g, .w = &wl, .dx = dx, .dy = dy, .x = x, .want_dw = dw != NULL,
                .want_db = db != NULL, .dx_acc = dx_accumulate};
    (void)hsi_parallel(nt, dc_backward_part, &j);
    if (db) /* db (K) += the partials of the threads, in thread order */
        for (int64_t k = 0; k < g.k; k++) {
            double acc = 0;
            for (int t = 0; t < nt; t++)
                acc += ((const double *)(wl.slot0 + t * wl.slot_len + wl.plane_len + wl.dyt_len +
                                         wl.dwp_len))[k];
            db[k] += (float)acc;
        }
    if (!dw) return;
    if (g.wg) {
        wg_dw_finish(dw, &wl, &g, nt);
        return;
    }
    /* dw (K, C*taps) += the partials (C*taps, kpad) of the threads, in thread order */
    for (int t = 0; t < nt; t++) {
        const float *p = wl.slot0 + t * wl.slot_len + wl.plane_len + wl.dyt_len;
        for (int64_t q = 0; q < g.nkf; q++)
            for (int64_t k = 0; k < g.k; k++) dw[k * g.nkf + q] += p[q * g.kpad + k];
    }
}
