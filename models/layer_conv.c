/* layer_conv.c — 2-D/3-D convolution kernels, forward and backward, in float
 * and double. Float convolutions the AVX2 kernels take (stride 1; see
 * conv_direct.c, hsi_conv_direct_usable) go there; everything else here:
 * im2col over a group of samples + one OpenBLAS gemm per group.
 * Two column layouts: channels-last (the input group is first transposed to
 * zero-padded (n, D, H, W, C), so each column row copies kW*C contiguous
 * values) when C*kW is large, channels-first (rows of oW values, bounds
 * checked) when it is small (e.g. the first 3-D conv, C = 1). Channels-last
 * columns are built and consumed in row chunks that stay in L2.
 * With several BLAS threads the batch is split between that many of our own
 * threads (each with its workspace slot and single-threaded BLAS), so the
 * im2col/col2im copies run in parallel too, not only the gemms.
 * Not a graph node and not a view: packed arrays in, packed arrays out, no
 * allocation (scratch comes from the caller, sized by hsi_conv_workspace_bytes).
 *
 * The type-generic body lives at the bottom of this file, which includes
 * itself twice (float, double) so both precisions run the same algorithm. */
#ifndef HSI_LAYER_T

#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "kernels/kern_internal.h"
#include "models/conv_direct.h"
#include "models/layers.h"

/* Geometry normalised to 3 spatial dims: a 2-D conv is a 3-D conv with D = 1. */
typedef struct conv_geom {
    int64_t n, c, k;
    int64_t id, ih, iw, kd, kh, kw, sd, sh, sw, pd, ph, pw, od, oh, ow;
    int64_t in_sp, out_sp, ker_sp; /* D*H*W, oD*oH*oW, kD*kH*kW */
    int64_t ckk;                   /* C * ker_sp: rows of the column matrix */
    int64_t group;                 /* samples per im2col group */
    int nhwc;                      /* 1: channels-last columns */
    int64_t dp, hp, wp, pad_sp;    /* padded input dims, Dp*Hp*Wp (channels-last) */
    int slots;                     /* workspace slots = most threads a pass may use */
    int64_t chunk;                 /* channels-last: column rows per gemm */
} conv_geom;

/* Channels-last: the column matrix is built and consumed in row chunks of
 * about this many bytes (in L2 while the gemm or the fold reads it). */
#ifndef HSI_CONV_CHUNK_BYTES
#define HSI_CONV_CHUNK_BYTES ((int64_t)256 << 10)
#endif

/* At most this many threads (and workspace slots) per convolution. */
#define HSI_CONV_MAX_SLOTS 16

/* Channels-last columns when a row run kW*C is at least this long (measured
 * on hybridsn: C = 8, kW = 3 (run 24) trains about 1.5-2x faster channels-last;
 * C = 1 (run 3) is faster channels-first). */
#ifndef HSI_CONV_NHWC_MIN_RUN
#define HSI_CONV_NHWC_MIN_RUN 16
#endif

/* Scratch per group: cols (ckk x group*out_sp) + tmp (k x group*out_sp)
 * (+ the padded channels-last input group (group*pad_sp x C) and two
 * reordered weight matrices (K x ckk) in the channels-last path).
 * The group is chosen so that the scratch stays around this many elements
 * (bigger gemms run faster, smaller columns stay in cache); tuned on the
 * cnn2d layers (see bench/) — any value gives the same results. */
#ifndef HSI_CONV_GROUP_TARGET_BYTES
#define HSI_CONV_GROUP_TARGET_BYTES ((int64_t)2 << 20)
#endif

static void conv_geom_fill(conv_geom *g, const hsi_conv_dims *d, size_t elem)
{
    int o = d->nd == 3 ? 0 : -1; /* index of D in the arrays, -1 = none */
    g->n = d->n, g->c = d->c, g->k = d->k;
    g->id = o < 0 ? 1 : d->in[0], g->kd = o < 0 ? 1 : d->ker[0];
    g->sd = o < 0 ? 1 : d->stride[0], g->pd = o < 0 ? 0 : d->pad[0];
    g->od = o < 0 ? 1 : d->out[0];
    g->ih = d->in[o + 1], g->kh = d->ker[o + 1], g->sh = d->stride[o + 1];
    g->ph = d->pad[o + 1], g->oh = d->out[o + 1];
    g->iw = d->in[o + 2], g->kw = d->ker[o + 2], g->sw = d->stride[o + 2];
    g->pw = d->pad[o + 2], g->ow = d->out[o + 2];
    g->in_sp = g->id * g->ih * g->iw;
    g->out_sp = g->od * g->oh * g->ow;
    g->ker_sp = g->kd * g->kh * g->kw;
    g->ckk = g->c * g->ker_sp;
    g->nhwc = g->c * g->kw >= HSI_CONV_NHWC_MIN_RUN;
    g->dp = g->id + 2 * g->pd, g->hp = g->ih + 2 * g->ph, g->wp = g->iw + 2 * g->pw;
    g->pad_sp = g->dp * g->hp * g->wp;
    int64_t per = ((g->ckk + g->k) * g->out_sp + (g->nhwc ? g->pad_sp * g->c : 0)) *
                  (int64_t)elem;
    int64_t grp = HSI_CONV_GROUP_TARGET_BYTES / (per > 0 ? per : 1);
    /* each of the slots' threads owns about n / slots samples */
    g->slots = hsi_threads();
    if (g->slots > HSI_CONV_MAX_SLOTS) g->slots = HSI_CONV_MAX_SLOTS;
    if (g->slots > g->n) g->slots = (int)g->n;
    int64_t share = (g->n + g->slots - 1) / g->slots;
    if (grp < 1) grp = 1;
    if (grp > share) grp = share;
    /* equal groups: 128 samples at 40 per group run as 4 x 32, not 3 x 40 + 8 */
    int64_t n_groups = (share + grp - 1) / grp;
    g->group = (share + n_groups - 1) / n_groups;
    /* gemm sizes are ints */
    while (g->group > 1 && g->group * g->out_sp > INT_MAX) g->group /= 2;
    /* channels-last: chunks of about HSI_CONV_CHUNK_BYTES of columns, at least 64 rows */
    g->chunk = HSI_CONV_CHUNK_BYTES / (g->ckk * (int64_t)elem);
    if (g->chunk < 64) g->chunk = 64;
    g->chunk = (g->chunk + 15) & ~(int64_t)15;
    if (g->chunk > g->group * g->out_sp) g->chunk = g->group * g->out_sp;
}

hsi_status hsi_conv_dims_init(hsi_conv_dims *d, int nd, int n, int c, int k, const int *in,
                              const int *ker, const int *stride, const int *pad)
{
    static const char *axis2[] = {"H", "W"}, *axis3[] = {"D", "H", "W"};
    if (!d || !in || !ker || !stride || !pad)
        return HSI_FAIL(HSI_ERR_ARG, "conv: NULL argument (dims, in, ker, stride or pad)");
    memset(d, 0, sizeof *d);
    if (nd != 2 && nd != 3)
        return HSI_FAIL(HSI_ERR_ARG, "conv: spatial dims must be 2 or 3 (found %d)", nd);
    if (n < 1 || c < 1 || k < 1)
        return HSI_FAIL(HSI_ERR_ARG,
                        "conv: batch, in channels and out channels must be >= 1 "
                        "(found n=%d c=%d k=%d)", n, c, k);
    const char **ax = nd == 2 ? axis2 : axis3;
    d->nd = nd, d->n = n, d->c = c, d->k = k;
    int64_t in_sp = 1, out_sp = 1, ker_sp = 1;
    for (int i = 0; i < nd; i++) {
        if (in[i] < 1 || ker[i] < 1 || stride[i] < 1 || pad[i] < 0)
            return HSI_FAIL(HSI_ERR_ARG,
                            "conv%dd: axis %s needs input >= 1, kernel >= 1, stride >= 1, "
                            "padding >= 0 (found input %d, kernel %d, stride %d, padding %d)",
                            nd, ax[i], in[i], ker[i], stride[i], pad[i]);
        int64_t span = (int64_t)in[i] + 2 * (int64_t)pad[i] - ker[i];
        if (span < 0)
            return HSI_FAIL(HSI_ERR_ARG,
                            "conv%dd: axis %s: kernel %d is larger than the padded input "
                            "%d + 2*%d; output would be empty",
                            nd, ax[i], ker[i], in[i], pad[i]);
        d->in[i] = in[i], d->ker[i] = ker[i], d->stride[i] = stride[i], d->pad[i] = pad[i];
        d->out[i] = (int)(span / stride[i] + 1);
        in_sp *= in[i], out_sp *= d->out[i], ker_sp *= ker[i];
    }
    /* Every size the kernels index with, and every gemm dimension, must fit. */
    if (in_sp * c > INT_MAX || out_sp * k > INT_MAX || ker_sp * c > INT_MAX ||
        (double)n * (double)c * (double)in_sp > 9.0e18 ||
        (double)n * (double)k * (double)out_sp > 9.0e18)
        return HSI_FAIL(HSI_ERR_OVERFLOW,
                        "conv%dd: sizes too large (C*in = %lld, K*out = %lld, C*kernel = %lld)",
                        nd, (long long)(in_sp * c), (long long)(out_sp * k),
                        (long long)(ker_sp * c));
    return HSI_OK;
}

/* One thread's part of the workspace, offsets and size in elements, each
 * rounded up to 16 elements (64-byte multiples):
 * cols (ckk x group*out_sp; channels-last: chunk x ckk), tmp (K x group*out_sp), xt (group*pad_sp x C,
 * channels-last only) and dw (K x ckk: the thread's weight-gradient partial). */
typedef struct conv_slot {
    int64_t cols, tmp, xt, dw, size;
} conv_slot;

static inline int64_t conv_round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

static void conv_slot_layout(conv_slot *s, const conv_geom *g)
{
    s->cols = 0;
    s->tmp = s->cols + conv_round16(g->ckk * (g->nhwc ? g->chunk : g->group * g->out_sp));
    s->xt = s->tmp + conv_round16(g->k * g->group * g->out_sp);
    s->dw = s->xt + (g->nhwc ? conv_round16(g->group * g->pad_sp * g->c) : 0);
    s->size = s->dw + conv_round16(g->k * g->ckk);
}

/* Elements before slot 0: the reordered weights wr (K x ckk), channels-last only. */
static int64_t conv_shared_elems(const conv_geom *g)
{
    return g->nhwc ? conv_round16(g->k * g->ckk) : 0;
}

/* Threads of this pass: one per workspace slot (hsi_threads(), at most
 * one per sample). */
static int conv_threads(const conv_geom *g) { return g->slots < 1 ? 1 : g->slots; }

size_t hsi_conv_workspace_bytes(const hsi_conv_dims *d, size_t elem_size)
{
    conv_geom g;
    conv_slot s;
    conv_geom_fill(&g, d, elem_size);
    conv_slot_layout(&s, &g);
    size_t bytes = (size_t)(conv_shared_elems(&g) + g.slots * s.size) * elem_size;
    if (elem_size == sizeof(float) && hsi_conv_direct_usable(d)) {
        size_t direct = hsi_conv_direct_ws_bytes(d);
        if (direct > bytes) bytes = direct;
    }
    return bytes;
}

/* First ow at which ow*s - p + kk >= 0, and one past the last at which it is
 * < len, both clamped to [0, n_out]. */
static inline void conv_valid_range(int64_t *lo, int64_t *hi, int64_t len, int64_t s,
                                    int64_t p, int64_t kk, int64_t n_out)
{
    int64_t a = p - kk; /* need ow*s >= a */
    int64_t l = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t b = len + p - kk; /* need ow*s < b */
    int64_t h = b <= 0 ? 0 : (b + s - 1) / s;
    if (l > n_out) l = n_out;
    if (h > n_out) h = n_out;
    if (h < l) h = l;
    *lo = l, *hi = h;
}

#define HSI_CAT_(a, b) a##b
#define HSI_CAT(a, b) HSI_CAT_(a, b)

#define HSI_LAYER_T float
#define HSI_FN(name) HSI_CAT(name, _f32)
#define HSI_GEMM cblas_sgemm
#define HSI_DIRECT 1
#include "layer_conv.c"
#undef HSI_DIRECT
#undef HSI_LAYER_T
#undef HSI_FN
#undef HSI_GEMM

#define HSI_LAYER_T double
#define HSI_FN(name) HSI_CAT(name, _f64)
#define HSI_GEMM cblas_dgemm
#include "layer_conv.c"
#undef HSI_LAYER_T
#undef HSI_FN
#undef HSI_GEMM

#else /* ------------------------------------------- type-generic body */

#define T HSI_LAYER_T

/* cols (ckk, n_grp*out_sp) packed, row (c, kd, kh, kw) — the layout of one
 * filter of w — column (g, od, oh, ow), from x (n_grp, C, D, H, W) packed. */
static void HSI_FN(im2col)(T *cols, const T *x, const conv_geom *g, int64_t n_grp)
{
    int64_t ld = n_grp * g->out_sp;
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t kd = 0; kd < g->kd; kd++)
            for (int64_t kh = 0; kh < g->kh; kh++)
                for (int64_t kw = 0; kw < g->kw; kw++) {
                    int64_t row = ((c * g->kd + kd) * g->kh + kh) * g->kw + kw;
                    int64_t lo, hi;
                    conv_valid_range(&lo, &hi, g->iw, g->sw, g->pw, kw, g->ow);
                    for (int64_t s = 0; s < n_grp; s++) {
                        const T *xp = x + (s * g->c + c) * g->in_sp;
                        T *out = cols + row * ld + s * g->out_sp;
                        for (int64_t od = 0; od < g->od; od++) {
                            int64_t zd = od * g->sd - g->pd + kd;
                            for (int64_t oh = 0; oh < g->oh; oh++, out += g->ow) {
                                int64_t zh = oh * g->sh - g->ph + kh;
                                if (zd < 0 || zd >= g->id || zh < 0 || zh >= g->ih) {
                                    memset(out, 0, (size_t)g->ow * sizeof(T));
                                    continue;
                                }
                                const T *xr = xp + (zd * g->ih + zh) * g->iw - g->pw + kw;
                                for (int64_t o = 0; o < lo; o++) out[o] = 0;
                                if (g->sw == 1)
                                    memcpy(out + lo, xr + lo, (size_t)(hi - lo) * sizeof(T));
                                else
                                    for (int64_t o = lo; o < hi; o++) out[o] = xr[o * g->sw];
                                for (int64_t o = hi; o < g->ow; o++) out[o] = 0;
                            }
                        }
                    }
                }
}

/* dx (n_grp, C, D, H, W) += the columns folded back (the adjoint of im2col). */
static void HSI_FN(col2im)(T *dx, const T *cols, const conv_geom *g, int64_t n_grp)
{
    int64_t ld = n_grp * g->out_sp;
    for (int64_t c = 0; c < g->c; c++)
        for (int64_t kd = 0; kd < g->kd; kd++)
            for (int64_t kh = 0; kh < g->kh; kh++)
                for (int64_t kw = 0; kw < g->kw; kw++) {
                    int64_t row = ((c * g->kd + kd) * g->kh + kh) * g->kw + kw;
                    int64_t lo, hi;
                    conv_valid_range(&lo, &hi, g->iw, g->sw, g->pw, kw, g->ow);
                    for (int64_t s = 0; s < n_grp; s++) {
                        T *xp = dx + (s * g->c + c) * g->in_sp;
                        const T *in = cols + row * ld + s * g->out_sp;
                        for (int64_t od = 0; od < g->od; od++) {
                            int64_t zd = od * g->sd - g->pd + kd;
                            for (int64_t oh = 0; oh < g->oh; oh++, in += g->ow) {
                                int64_t zh = oh * g->sh - g->ph + kh;
                                if (zd < 0 || zd >= g->id || zh < 0 || zh >= g->ih) continue;
                                T *xr = xp + (zd * g->ih + zh) * g->iw - g->pw + kw;
                                if (g->sw == 1)
                                    for (int64_t o = lo; o < hi; o++) xr[o] += in[o];
                                else
                                    for (int64_t o = lo; o < hi; o++) xr[o * g->sw] += in[o];
                            }
                        }
                    }
                }
}

/* ------------------------------------------------ channels-last path */

/* Zeroes the padding border of xt (n_grp, Dp, Hp, Wp, C): whole padded
 * planes/rows, then the left and right pads of each interior row. */
static void HSI_FN(zero_border)(T *xt, const conv_geom *g, int64_t n_grp)
{
    if (!g->pd && !g->ph && !g->pw) return;
    int64_t row = g->wp * g->c, plane = g->hp * row;
    for (int64_t s = 0; s < n_grp; s++)
        for (int64_t zd = 0; zd < g->dp; zd++) {
            T *pl = xt + (s * g->dp + zd) * plane;
            if (zd < g->pd || zd >= g->pd + g->id) {
                memset(pl, 0, (size_t)plane * sizeof(T));
                continue;
            }
            memset(pl, 0, (size_t)(g->ph * row) * sizeof(T));
            memset(pl + (g->ph + g->ih) * row, 0, (size_t)(g->ph * row) * sizeof(T));
            if (g->pw)
                for (int64_t zh = g->ph; zh < g->ph + g->ih; zh++) {
                    memset(pl + zh * row, 0, (size_t)(g->pw * g->c) * sizeof(T));
                    memset(pl + zh * row + (g->pw + g->iw) * g->c, 0,
                           (size_t)(g->pw * g->c) * sizeof(T));
                }
        }
}

/* Tile size of the transposes between (C, positions) and (positions, C). */
#define HSI_CONV_TILE 8

/* xt (n_grp, Dp, Hp, Wp, C) packed, zero borders = x (n_grp, C, D, H, W) packed,
 * transposed and padded. (Measured: this plain order beats 8 x 8 tiles here.) */
static void HSI_FN(pack_nhwc)(T *xt, const T *x, const conv_geom *g, int64_t n_grp)
{
    const int64_t C = g->c, in_sp = g->in_sp;
    HSI_FN(zero_border)(xt, g, n_grp);
    for (int64_t s = 0; s < n_grp; s++) {
        const T *xs = x + s * C * in_sp;
        for (int64_t zd = 0; zd < g->id; zd++)
            for (int64_t zh = 0; zh < g->ih; zh++) {
                const T *xr = xs + (zd * g->ih + zh) * g->iw; /* + c * in_sp + zw */
                T *o = xt + (((s * g->dp + zd + g->pd) * g->hp + zh + g->ph) * g->wp + g->pw) * C;
                for (int64_t zw = 0; zw < g->iw; zw++)
                    for (int64_t c = 0; c < C; c++) o[zw * C + c] = xr[c * in_sp + zw];
            }
    }
}

/* dx (n_grp, C, D, H, W) += the interior of dxt (n_grp, Dp, Hp, Wp, C). */
static void HSI_FN(unpack_nhwc_add)(T *dx, const T *dxt, const conv_geom *g, int64_t n_grp)
{
    const int64_t B = HSI_CONV_TILE, C = g->c, in_sp = g->in_sp;
    for (int64_t s = 0; s < n_grp; s++) {
        T *xs = dx + s * C * in_sp;
        for (int64_t zd = 0; zd < g->id; zd++)
            for (int64_t zh = 0; zh < g->ih; zh++) {
                T *xr = xs + (zd * g->ih + zh) * g->iw;
                const T *o =
                    dxt + (((s * g->dp + zd + g->pd) * g->hp + zh + g->ph) * g->wp + g->pw) * C;
                for (int64_t c0 = 0; c0 < C; c0 += B) {
                    int64_t c1 = c0 + B < C ? c0 + B : C;
                    for (int64_t w0 = 0; w0 < g->iw; w0 += B) {
                        int64_t w1 = w0 + B < g->iw ? w0 + B : g->iw;
                        for (int64_t c = c0; c < c1; c++)
                            for (int64_t zw = w0; zw < w1; zw++)
                                xr[c * in_sp + zw] += o[zw * C + c];
                    }
                }
            }
    }
}

/* dst[0..n) = src[0..n) in blocks of 8 fixed-size copies (inlined vector
 * moves; a memcpy call per short kW*C run cost more than the copy). */
static inline void HSI_FN(copy_run)(T *restrict dst, const T *restrict src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(dst + i, src + i, 8 * sizeof(T));
    for (; i < n; i++) dst[i] = src[i];
}

/* The rows [r0, r1) of the column matrix (n_grp*out_sp, ckk): row
 * (s, od, oh, ow), column (kd, kh, kw, c), from xt (n_grp, Dp, Hp, Wp, C);
 * cols holds only those rows, (r1 - r0, ckk) packed. Each (row, kd, kh) is
 * one run of kW*C. */
static void HSI_FN(im2col_nhwc)(T *cols, const T *xt, const conv_geom *g, int64_t r0,
                                int64_t r1)
{
    int64_t run = g->kw * g->c;
    int64_t ow = r0 % g->ow, oh = r0 / g->ow % g->oh, od = r0 / (g->ow * g->oh) % g->od,
            s = r0 / g->out_sp;
    T *row = cols;
    for (int64_t r = r0; r < r1; r++) {
        const T *base = xt + (((s * g->dp + od * g->sd) * g->hp + oh * g->sh) * g->wp +
                              ow * g->sw) * g->c;
        for (int64_t kd = 0; kd < g->kd; kd++)
            for (int64_t kh = 0; kh < g->kh; kh++, row += run)
                HSI_FN(copy_run)(row, base + (kd * g->hp + kh) * g->wp * g->c, run);
        if (++ow == g->ow) {
            ow = 0;
            if (++oh == g->oh) {
                oh = 0;
                if (++od == g->od) od = 0, s++;
            }
        }
    }
}

/* dxt (n_grp, Dp, Hp, Wp, C) += the rows [r0, r1) of the column matrix
 * folded back; cols holds those rows only, as im2col_nhwc writes them, and
 * is left zero (so the next gemm can accumulate into it: beta = 1 skips
 * BLAS's separate pass that zeroes C). */
static void HSI_FN(col2im_nhwc)(T *dxt, T *cols, const conv_geom *g, int64_t r0, int64_t r1)
{
    int64_t run = g->kw * g->c;
    int64_t ow = r0 % g->ow, oh = r0 / g->ow % g->oh, od = r0 / (g->ow * g->oh) % g->od,
            s = r0 / g->out_sp;
    T *row = cols;
    for (int64_t r = r0; r < r1; r++) {
        T *base = dxt + (((s * g->dp + od * g->sd) * g->hp + oh * g->sh) * g->wp +
                         ow * g->sw) * g->c;
        for (int64_t kd = 0; kd < g->kd; kd++)
            for (int64_t kh = 0; kh < g->kh; kh++, row += run) {
                T *o = base + (kd * g->hp + kh) * g->wp * g->c;
                for (int64_t i = 0; i < run; i++) o[i] += row[i], row[i] = 0;
            }
        if (++ow == g->ow) {
            ow = 0;
            if (++oh == g->oh) {
                oh = 0;
                if (++od == g->od) od = 0, s++;
            }
        }
    }
}

/* wr (K, kD, kH, kW, C) = w (K, C, kD, kH, kW) reordered. */
static void HSI_FN(reorder_w)(T *wr, const T *w, const conv_geom *g)
{
    for (int64_t k = 0; k < g->k; k++)
        for (int64_t c = 0; c < g->c; c++)
            for (int64_t q = 0; q < g->ker_sp; q++)
                wr[(k * g->ker_sp + q) * g->c + c] = w[(k * g->c + c) * g->ker_sp + q];
}

/* ------------------------------------------------------------- entry points */

/* y (N, K, out_sp) for samples n0.. = tmp (K x ng*out_sp) + b */
static void HSI_FN(scatter_out)(T *y, const T *tmp, const T *b, const conv_geom *g, int64_t n0,
                                int64_t ng)
{
    int64_t cols_n = ng * g->out_sp;
    for (int64_t s = 0; s < ng; s++)
        for (int64_t k = 0; k < g->k; k++) {
            T *yo = y + ((n0 + s) * g->k + k) * g->out_sp;
            const T *t = tmp + k * cols_n + s * g->out_sp;
            T bias = b ? b[k] : (T)0;
            for (int64_t o = 0; o < g->out_sp; o++) yo[o] = t[o] + bias;
        }
}

/* What one thread of a forward or backward pass needs: it owns samples
 * [n*t/nt, n*(t+1)/nt) and slot t of the workspace. */
typedef struct HSI_FN(conv_job) {
    const conv_geom *g;
    T *y;                 /* forward: (N, K, out_sp) */
    const T *x, *w, *b;   /* (N, C, in_sp), (K, CKK), (K) or NULL */
    const T *wr;          /* channels-last: w as (K, kk, C) */
    const T *dy;          /* backward: (N, K, out_sp) */
    T *dx;                /* backward: (N, C, in_sp) += ..., or NULL */
    int want_dw;          /* backward: fill each slot's dw partial */
    T *slots;             /* workspace slot 0 (see conv_slot_layout) */
    int64_t has_dw[HSI_CONV_MAX_SLOTS]; /* thread t wrote its dw partial */
} HSI_FN(conv_job);

static hsi_status HSI_FN(conv_forward_part)(void *ctx, int t, int nt)
{
    HSI_FN(conv_job) *j = ctx;
    const conv_geom *g = j->g;
    conv_slot sl;
    conv_slot_layout(&sl, g);
    T *cols = j->slots + t * sl.size + sl.cols, *tmp = j->slots + t * sl.size + sl.tmp;
    T *xt = j->slots + t * sl.size + sl.xt;
    int64_t s0 = g->n * t / nt, s1 = g->n * (t + 1) / nt;
    for (int64_t n0 = s0; n0 < s1; n0 += g->group) {
        int64_t ng = s1 - n0 < g->group ? s1 - n0 : g->group;
        int64_t cols_n = ng * g->out_sp;
        const T *xg = j->x + n0 * g->c * g->in_sp;
        /* out (K x cols_n): y itself for one sample, else tmp (scattered below) */
        T *out = ng == 1 ? j->y + n0 * g->k * g->out_sp : tmp;
        if (g->nhwc) {
            HSI_FN(pack_nhwc)(xt, xg, g, ng);
            for (int64_t r0 = 0; r0 < cols_n; r0 += g->chunk) {
                int64_t nr = cols_n - r0 < g->chunk ? cols_n - r0 : g->chunk;
                HSI_FN(im2col_nhwc)(cols, xt, g, r0, r0 + nr);
                /* out[:, r0..] (K x nr, ld cols_n) = wr (K x CKK) * cols^T; cols is nr x CKK */
                HSI_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->k, (int)nr,
                         (int)g->ckk, 1, j->wr, (int)g->ckk, cols, (int)g->ckk, 0, out + r0,
                         (int)cols_n);
            }
        } else {
            HSI_FN(im2col)(cols, xg, g, ng);
            /* out (K x cols_n) = w (K x CKK, ld CKK) * cols (CKK x cols_n, ld cols_n) */
            HSI_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->k, (int)cols_n,
                     (int)g->ckk, 1, j->w, (int)g->ckk, cols, (int)cols_n, 0, out, (int)cols_n);
        }
        if (ng > 1)
            HSI_FN(scatter_out)(j->y, tmp, j->b, g, n0, ng);
        else if (j->b)
            for (int64_t k = 0; k < g->k; k++)
                for (int64_t o = 0; o < g->out_sp; o++) out[k * g->out_sp + o] += j->b[k];
    }
    return HSI_OK;
}

static hsi_status HSI_FN(conv_backward_part)(void *ctx, int t, int nt)
{
    HSI_FN(conv_job) *j = ctx;
    const conv_geom *g = j->g;
    conv_slot sl;
    conv_slot_layout(&sl, g);
    T *base = j->slots + t * sl.size;
    T *cols = base + sl.cols, *tmp = base + sl.tmp, *xt = base + sl.xt, *dwp = base + sl.dw;
    int64_t s0 = g->n * t / nt, s1 = g->n * (t + 1) / nt;
    j->has_dw[t] = 0;
    for (int64_t n0 = s0; n0 < s1; n0 += g->group) {
        int64_t ng = s1 - n0 < g->group ? s1 - n0 : g->group;
        int64_t cols_n = ng * g->out_sp;
        const T *xg = j->x + n0 * g->c * g->in_sp;
        T beta = j->has_dw[t] ? 1 : 0;
        /* dyg (K x cols_n): dy of this group, samples side by side (in tmp;
         * dy itself for one sample) */
        const T *dyg = j->dy + n0 * g->k * g->out_sp;
        if (ng > 1) {
            for (int64_t s = 0; s < ng; s++)
                for (int64_t k = 0; k < g->k; k++)
                    memcpy(tmp + k * cols_n + s * g->out_sp,
                           j->dy + ((n0 + s) * g->k + k) * g->out_sp,
                           (size_t)g->out_sp * sizeof(T));
            dyg = tmp;
        }
        if (g->nhwc) {
            /* column rows in chunks of g->chunk, so that each chunk of
             * cols is still in cache when the gemm or the fold reads it */
            if (j->want_dw) {
                HSI_FN(pack_nhwc)(xt, xg, g, ng);
                for (int64_t r0 = 0; r0 < cols_n; r0 += g->chunk) {
                    int64_t nr = cols_n - r0 < g->chunk ? cols_n - r0 : g->chunk;
                    HSI_FN(im2col_nhwc)(cols, xt, g, r0, r0 + nr);
                    /* dwp (K x CKK, as (K, kk, C)) (+)= dyg[:, r0..] (K x nr) * cols (nr x CKK) */
                    HSI_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->k, (int)g->ckk,
                             (int)nr, 1, dyg + r0, (int)cols_n, cols, (int)g->ckk, beta, dwp,
                             (int)g->ckk);
                    beta = 1;
                }
                j->has_dw[t] = 1;
            }
            if (j->dx) {
                memset(xt, 0, (size_t)(ng * g->pad_sp * g->c) * sizeof(T));
                memset(cols, 0, (size_t)(g->chunk * g->ckk) * sizeof(T));
                for (int64_t r0 = 0; r0 < cols_n; r0 += g->chunk) {
                    int64_t nr = cols_n - r0 < g->chunk ? cols_n - r0 : g->chunk;
                    /* cols (nr x CKK, zero) += dyg[:, r0..]^T (nr x K) * wr (K x CKK) */
                    HSI_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nr, (int)g->ckk,
                             (int)g->k, 1, dyg + r0, (int)cols_n, j->wr, (int)g->ckk, 1, cols,
                             (int)g->ckk);
                    HSI_FN(col2im_nhwc)(xt, cols, g, r0, r0 + nr);
                }
                HSI_FN(unpack_nhwc_add)(j->dx + n0 * g->c * g->in_sp, xt, g, ng);
            }
        } else {
            if (j->want_dw) {
                HSI_FN(im2col)(cols, xg, g, ng);
                /* dwp (K x CKK) (+)= dyg (K x cols_n) * cols^T; cols is CKK x cols_n */
                HSI_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->k, (int)g->ckk,
                         (int)cols_n, 1, dyg, (int)cols_n, cols, (int)cols_n, beta, dwp,
                         (int)g->ckk);
                j->has_dw[t] = 1;
            }
            if (j->dx) {
                /* cols (CKK x cols_n) = w^T (CKK x K; w is K x CKK) * dyg (K x cols_n) */
                HSI_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g->ckk, (int)cols_n,
                         (int)g->k, 1, j->w, (int)g->ckk, dyg, (int)cols_n, 0, cols,
                         (int)cols_n);
                HSI_FN(col2im)(j->dx + n0 * g->c * g->in_sp, cols, g, ng);
            }
        }
    }
    return HSI_OK;
}

/* Runs part(job, t, nt) on nt threads, each calling single-threaded BLAS. */
static void HSI_FN(conv_run)(hsi_status (*part)(void *, int, int), HSI_FN(conv_job) *j, int nt)
{
    int prev = hsi_kern_blas_single_begin();
    hsi_status st = hsi_parallel(nt, part, j);
    hsi_kern_blas_single_end(prev);
    (void)st; /* the parts cannot fail */
}

void HSI_FN(hsi_conv_forward)(T *y, const T *x, const T *w, const T *b,
                              const hsi_conv_dims *d, void *ws)
{
#ifdef HSI_DIRECT
    if (hsi_conv_direct_usable(d)) {
        hsi_conv_direct_forward(y, x, w, b, d, ws, 0);
        return;
    }
#endif
    conv_geom g;
    conv_geom_fill(&g, d, sizeof(T));
    T *wr = (T *)ws; /* channels-last only */
    HSI_FN(conv_job) j = {.g = &g, .y = y, .x = x, .w = w, .b = b, .wr = wr,
                          .slots = wr + conv_shared_elems(&g)};
    if (g.nhwc) HSI_FN(reorder_w)(wr, w, &g);
    HSI_FN(conv_run)(HSI_FN(conv_forward_part), &j, conv_threads(&g));
}

void HSI_FN(hsi_conv_backward)(T *dx, T *dw, T *db, const T *dy, const T *x, const T *w,
                               const hsi_conv_dims *d, void *ws)
{
#ifdef HSI_DIRECT
    if (hsi_conv_direct_usable(d)) {
        hsi_conv_direct_backward(dx, dw, db, dy, x, w, d, ws, 1);
        return;
    }
#endif
    conv_geom g;
    conv_geom_fill(&g, d, sizeof(T));
    if (db) {
        /* db[k] += sum over n and positions of dy; partial sums per row keep
         * the float rounding error to that of out_sp terms */
        for (int64_t k = 0; k < g.k; k++) {
            double acc = 0;
            for (int64_t n = 0; n < g.n; n++) {
                const T *r = dy + (n * g.k + k) * g.out_sp;
                T p0 = 0, p1 = 0, p2 = 0, p3 = 0;
                int64_t o = 0;
                for (; o + 4 <= g.out_sp; o += 4) p0 += r[o], p1 += r[o + 1], p2 += r[o + 2],
                                                  p3 += r[o + 3];
                for (; o < g.out_sp; o++) p0 += r[o];
                acc += (double)((p0 + p1) + (p2 + p3));
            }
            db[k] += (T)acc;
        }
    }
    if (!dw && !dx) return;
    T *wr = (T *)ws; /* channels-last only */
    HSI_FN(conv_job) j = {.g = &g, .x = x, .w = w, .wr = wr, .dy = dy, .dx = dx,
                          .want_dw = dw != NULL, .slots = wr + conv_shared_elems(&g)};
    if (g.nhwc && dx) HSI_FN(reorder_w)(wr, w, &g);
    int nt = conv_threads(&g);
    HSI_FN(conv_run)(HSI_FN(conv_backward_part), &j, nt);
    if (!dw) return;
    /* dw += the partials of the threads, in thread order (results do not
     * depend on scheduling); channels-last partials are (K, kk, C) */
    conv_slot sl;
    conv_slot_layout(&sl, &g);
    for (int t = 0; t < nt; t++) {
        if (!j.has_dw[t]) continue;
        const T *p = j.slots + t * sl.size + sl.dw;
        if (g.nhwc)
            for (int64_t k = 0; k < g.k; k++)
                for (int64_t c = 0; c < g.c; c++)
                    for (int64_t q = 0; q < g.ker_sp; q++)
                        dw[(k * g.c + c) * g.ker_sp + q] += p[(k * g.ker_sp + q) * g.c + c];
        else
            for (int64_t i = 0; i < g.k * g.ckk; i++) dw[i] += p[i];
    }
}

#undef T
#endif
