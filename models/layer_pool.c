/* layer_pool.c — max and average pooling (2-D/3-D) and global average
 * pooling, forward and backward, in float and double, over packed arrays.
 * Not a graph node: the engine wraps these; no allocation here.
 *
 * The type-generic body lives at the bottom of this file, which includes
 * itself twice (float, double) so both precisions run the same code. */
#ifndef HSI_LAYER_T

#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_internal.h"
#include "models/layers.h"

typedef struct pool_geom {
    int64_t planes; /* N * C */
    int64_t id, ih, iw, kd, kh, kw, sd, sh, sw, pd, ph, pw, od, oh, ow;
    int64_t in_sp, out_sp, ker_sp;
} pool_geom;

static void pool_geom_fill(pool_geom *g, const hsi_pool_dims *d)
{
    int o = d->nd == 3 ? 0 : -1;
    g->planes = (int64_t)d->n * d->c;
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
}

hsi_status hsi_pool_dims_init(hsi_pool_dims *d, hsi_pool_kind kind, int nd, int n, int c,
                              const int *in, const int *ker, const int *stride, const int *pad)
{
    static const char *axis2[] = {"H", "W"}, *axis3[] = {"D", "H", "W"};
    if (!d || !in || !ker || !stride || !pad)
        return HSI_FAIL(HSI_ERR_ARG, "pool: NULL argument (dims, in, ker, stride or pad)");
    memset(d, 0, sizeof *d);
    if (kind != HSI_POOL_MAX && kind != HSI_POOL_AVG)
        return HSI_FAIL(HSI_ERR_ARG, "pool: kind must be HSI_POOL_MAX or HSI_POOL_AVG (found %d)",
                        (int)kind);
    if (nd != 2 && nd != 3)
        return HSI_FAIL(HSI_ERR_ARG, "pool: spatial dims must be 2 or 3 (found %d)", nd);
    if (n < 1 || c < 1)
        return HSI_FAIL(HSI_ERR_ARG, "pool%dd: batch and channels must be >= 1 (found n=%d c=%d)",
                        nd, n, c);
    const char **ax = nd == 2 ? axis2 : axis3;
    d->kind = kind, d->nd = nd, d->n = n, d->c = c;
    int64_t in_sp = 1, out_sp = 1;
    for (int i = 0; i < nd; i++) {
        if (in[i] < 1 || ker[i] < 1 || stride[i] < 1 || pad[i] < 0)
            return HSI_FAIL(HSI_ERR_ARG,
                            "pool%dd: axis %s needs input >= 1, kernel >= 1, stride >= 1, "
                            "padding >= 0 (found input %d, kernel %d, stride %d, padding %d)",
                            nd, ax[i], in[i], ker[i], stride[i], pad[i]);
        if (pad[i] > ker[i] / 2)
            return HSI_FAIL(HSI_ERR_ARG,
                            "pool%dd: axis %s: padding %d is more than half the kernel %d "
                            "(PyTorch's limit: a window must overlap the input)",
                            nd, ax[i], pad[i], ker[i]);
        int64_t span = (int64_t)in[i] + 2 * (int64_t)pad[i] - ker[i];
        if (span < 0)
            return HSI_FAIL(HSI_ERR_ARG,
                            "pool%dd: axis %s: kernel %d is larger than the padded input "
                            "%d + 2*%d; output would be empty",
                            nd, ax[i], ker[i], in[i], pad[i]);
        d->in[i] = in[i], d->ker[i] = ker[i], d->stride[i] = stride[i], d->pad[i] = pad[i];
        d->out[i] = (int)(span / stride[i] + 1);
        in_sp *= in[i], out_sp *= d->out[i];
    }
    if (in_sp > INT32_MAX || (double)n * c * (double)in_sp > 9.0e18)
        return HSI_FAIL(HSI_ERR_OVERFLOW,
                        "pool%dd: an input plane of %lld elements does not fit the int32 "
                        "argmax index", nd, (long long)in_sp);
    return HSI_OK;
}

/* Clipped window [*lo, *hi) along one axis for output position o. */
static inline void pool_window(int64_t *lo, int64_t *hi, int64_t o, int64_t s, int64_t p,
                               int64_t k, int64_t len)
{
    int64_t a = o * s - p, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > len ? len : b;
}

#define HSI_CAT_(a, b) a##b
#define HSI_CAT(a, b) HSI_CAT_(a, b)

#define HSI_LAYER_T float
#define HSI_FN(name) HSI_CAT(name, _f32)
#include "layer_pool.c"
#undef HSI_LAYER_T
#undef HSI_FN

#define HSI_LAYER_T double
#define HSI_FN(name) HSI_CAT(name, _f64)
#include "layer_pool.c"
#undef HSI_LAYER_T
#undef HSI_FN

#else /* ------------------------------------------- type-generic body */

#define T HSI_LAYER_T

/* Max pooling 2x2, stride 2, no padding, 2-D: the cnn2d case, unrolled. */
static void HSI_FN(max2x2)(T *y, int32_t *argmax, const T *x, const pool_geom *g, int64_t p0,
                           int64_t p1)
{
    for (int64_t p = p0; p < p1; p++) {
        const T *xp = x + p * g->in_sp;
        T *yp = y + p * g->out_sp;
        int32_t *ap = argmax + p * g->out_sp;
        for (int64_t oh = 0; oh < g->oh; oh++) {
            const T *r0 = xp + 2 * oh * g->iw, *r1 = r0 + g->iw;
            int32_t base = (int32_t)(2 * oh * g->iw);
            for (int64_t ow = 0; ow < g->ow; ow++) {
                /* same visiting order and NaN rule as the general loop */
                T m = r0[2 * ow];
                int32_t idx = base + (int32_t)(2 * ow);
                T v = r0[2 * ow + 1];
                if (v > m || isnan(v)) m = v, idx = base + (int32_t)(2 * ow + 1);
                v = r1[2 * ow];
                if (v > m || isnan(v)) m = v, idx = base + (int32_t)(g->iw + 2 * ow);
                v = r1[2 * ow + 1];
                if (v > m || isnan(v)) m = v, idx = base + (int32_t)(g->iw + 2 * ow + 1);
                yp[oh * g->ow + ow] = m;
                ap[oh * g->ow + ow] = idx;
            }
        }
    }
}

/* planes (n, c) are split between threads: each plane is done by one */
typedef struct HSI_FN(pool_job) {
    const hsi_pool_dims *d;
    const pool_geom *g;
    T *y, *dx;
    const T *x, *dy;
    int32_t *argmax;
    const int32_t *argmax_in;
} HSI_FN(pool_job);

static hsi_status HSI_FN(pool_fwd_part)(void *ctx, int t, int nt)
{
    const HSI_FN(pool_job) *j = ctx;
    const pool_geom *gp = j->g;
    const pool_geom g = *gp;
    T *y = j->y;
    const T *x = j->x;
    int32_t *argmax = j->argmax;
    int64_t p0, p1;
    hsi_split_range(g.planes, t, nt, &p0, &p1);
    int is_max = j->d->kind == HSI_POOL_MAX;
    if (is_max && j->d->nd == 2 && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 &&
        g.ph == 0 && g.pw == 0) {
        HSI_FN(max2x2)(y, argmax, x, gp, p0, p1);
        return HSI_OK;
    }
    T inv = (T)1 / (T)g.ker_sp; /* count_include_pad: always the full window */
    for (int64_t p = p0; p < p1; p++) {
        const T *xp = x + p * g.in_sp;
        T *yp = y + p * g.out_sp;
        int32_t *ap = is_max ? argmax + p * g.out_sp : NULL;
        for (int64_t od = 0; od < g.od; od++) {
            int64_t d0, d1;
            pool_window(&d0, &d1, od, g.sd, g.pd, g.kd, g.id);
            for (int64_t oh = 0; oh < g.oh; oh++) {
                int64_t h0, h1;
                pool_window(&h0, &h1, oh, g.sh, g.ph, g.kh, g.ih);
                for (int64_t ow = 0; ow < g.ow; ow++) {
                    int64_t w0, w1;
                    pool_window(&w0, &w1, ow, g.sw, g.pw, g.kw, g.iw);
                    int64_t o = (od * g.oh + oh) * g.ow + ow;
                    if (is_max) {
                        /* PyTorch's rule: start at the first element of the clipped
                         * window with -inf, take v when v > max or v is NaN */
                        T m = (T)-INFINITY;
                        int64_t idx = (d0 * g.ih + h0) * g.iw + w0;
                        for (int64_t zd = d0; zd < d1; zd++)
                            for (int64_t zh = h0; zh < h1; zh++) {
                                int64_t r = (zd * g.ih + zh) * g.iw;
                                for (int64_t zw = w0; zw < w1; zw++) {
                                    T v = xp[r + zw];
                                    if (v > m || isnan(v)) m = v, idx = r + zw;
                                }
                            }
                        yp[o] = m;
                        ap[o] = (int32_t)idx;
                    } else {
                        T sum = 0;
                        for (int64_t zd = d0; zd < d1; zd++)
                            for (int64_t zh = h0; zh < h1; zh++) {
                                const T *r = xp + (zd * g.ih + zh) * g.iw;
                                for (int64_t zw = w0; zw < w1; zw++) sum += r[zw];
                            }
                        yp[o] = sum * inv;
                    }
                }
            }
        }
    }
    return HSI_OK;
}

static hsi_status HSI_FN(pool_bwd_part)(void *ctx, int t, int nt)
{
    const HSI_FN(pool_job) *j = ctx;
    const pool_geom g = *j->g;
    T *dx = j->dx;
    const T *dy = j->dy;
    const int32_t *argmax = j->argmax_in;
    int64_t p0, p1;
    hsi_split_range(g.planes, t, nt, &p0, &p1);
    if (j->d->kind == HSI_POOL_MAX) {
        for (int64_t p = p0; p < p1; p++) {
            T *xp = dx + p * g.in_sp;
            const T *yp = dy + p * g.out_sp;
            const int32_t *ap = argmax + p * g.out_sp;
            for (int64_t o = 0; o < g.out_sp; o++) xp[ap[o]] += yp[o];
        }
        return HSI_OK;
    }
    T inv = (T)1 / (T)g.ker_sp;
    for (int64_t p = p0; p < p1; p++) {
        T *xp = dx + p * g.in_sp;
        const T *yp = dy + p * g.out_sp;
        for (int64_t od = 0; od < g.od; od++) {
            int64_t d0, d1;
            pool_window(&d0, &d1, od, g.sd, g.pd, g.kd, g.id);
            for (int64_t oh = 0; oh < g.oh; oh++) {
                int64_t h0, h1;
                pool_window(&h0, &h1, oh, g.sh, g.ph, g.kh, g.ih);
                for (int64_t ow = 0; ow < g.ow; ow++) {
                    int64_t w0, w1;
                    pool_window(&w0, &w1, ow, g.sw, g.pw, g.kw, g.iw);
                    T v = yp[(od * g.oh + oh) * g.ow + ow] * inv;
                    for (int64_t zd = d0; zd < d1; zd++)
                        for (int64_t zh = h0; zh < h1; zh++) {
                            T *r = xp + (zd * g.ih + zh) * g.iw;
                            for (int64_t zw = w0; zw < w1; zw++) r[zw] += v;
                        }
                }
            }
        }
    }
    return HSI_OK;
}


void HSI_FN(hsi_pool_forward)(T *y, int32_t *argmax, const T *x, const hsi_pool_dims *d)
{
    pool_geom g;
    pool_geom_fill(&g, d);
    HSI_FN(pool_job) j = {.d = d, .g = &g, .y = y, .x = x, .argmax = argmax};
    (void)hsi_parallel(hsi_threads_for((double)g.planes * g.in_sp, g.planes), HSI_FN(pool_fwd_part), &j);
}

void HSI_FN(hsi_pool_backward)(T *dx, const T *dy, const int32_t *argmax,
                               const hsi_pool_dims *d)
{
    pool_geom g;
    pool_geom_fill(&g, d);
    HSI_FN(pool_job) j = {.d = d, .g = &g, .dx = dx, .dy = dy, .argmax_in = argmax};
    (void)hsi_parallel(hsi_threads_for((double)g.planes * g.in_sp, g.planes), HSI_FN(pool_bwd_part), &j);
}

/* x (N, C, S) -> y (N, C): the mean of each row, summed in 4 partial sums
 * of T and then in double. */
void HSI_FN(hsi_gap_forward)(T *y, const T *x, int n, int c, int64_t s)
{
    int64_t rows = (int64_t)n * c;
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * s;
        T p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        int64_t i = 0;
        for (; i + 4 <= s; i += 4) p0 += xr[i], p1 += xr[i + 1], p2 += xr[i + 2], p3 += xr[i + 3];
        for (; i < s; i++) p0 += xr[i];
        y[r] = (T)((double)((p0 + p1) + (p2 + p3)) / (double)s);
    }
}

/* dx (N, C, S) += dy (N, C) / S, broadcast over S. */
void HSI_FN(hsi_gap_backward)(T *dx, const T *dy, int n, int c, int64_t s)
{
    int64_t rows = (int64_t)n * c;
    T inv = (T)1 / (T)s;
    for (int64_t r = 0; r < rows; r++) {
        T v = dy[r] * inv;
        T *xr = dx + r * s;
        for (int64_t i = 0; i < s; i++) xr[i] += v;
    }
}

#undef T
#endif
