/* layer_bn.c — batch normalisation over (N, C, S) packed arrays (BatchNorm1d
 * on (N, C) or (N, C, L), 2d, 3d), training and eval, forward and backward,
 * in float and double, optionally fused with a following ReLU. Channels are
 * split between threads. Not a module: no parameters owned, no allocation.
 *
 * The type-generic body lives at the bottom of this file, which includes
 * itself twice (float, double) so both precisions run the same code. */
#ifndef HSI_LAYER_T

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern_internal.h"
#include "models/layers.h"

#define HSI_CAT_(a, b) a##b
#define HSI_CAT(a, b) HSI_CAT_(a, b)

#define HSI_LAYER_T float
#define HSI_FN(name) HSI_CAT(name, _f32)
#include "layer_bn.c"
#undef HSI_LAYER_T
#undef HSI_FN

#define HSI_LAYER_T double
#define HSI_FN(name) HSI_CAT(name, _f64)
#include "layer_bn.c"
#undef HSI_LAYER_T
#undef HSI_FN

#else /* ------------------------------------------- type-generic body */

#define T HSI_LAYER_T

/* The channel sums below run each row of S elements in the lanes of one
 * 32-byte vector of T (GCC/Clang vector extensions: 8 floats or 4 doubles;
 * the lanes are added in a fixed order, so results do not depend on the
 * machine), and add the rows in double. */
typedef T HSI_FN(bn_vec) __attribute__((vector_size(32)));
#define VT HSI_FN(bn_vec)
#define BN_L ((int64_t)(32 / sizeof(T)))

static inline VT HSI_FN(bn_load)(const T *p)
{
    VT v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline double HSI_FN(bn_lanes)(VT v)
{
    T a[32 / sizeof(T)];
    memcpy(a, &v, sizeof a);
    double t = 0;
    for (int64_t l = 0; l < BN_L; l++) t += (double)a[l];
    return t;
}

/* sum over channel ch of x (N, C, S) */
static double HSI_FN(bn_sum)(const T *x, int n, int c, int64_t s, int64_t ch)
{
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const T *r = x + (i * c + ch) * s;
        VT p = {0};
        T t = 0;
        int64_t j = 0;
        for (; j + BN_L <= s; j += BN_L) p += HSI_FN(bn_load)(r + j);
        for (; j < s; j++) t += r[j];
        acc += HSI_FN(bn_lanes)(p) + (double)t;
    }
    return acc;
}

/* sum of (x - m)^2 over channel ch */
static double HSI_FN(bn_sqdev)(const T *x, int n, int c, int64_t s, int64_t ch, T m)
{
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const T *r = x + (i * c + ch) * s;
        VT p = {0};
        T t = 0;
        int64_t j = 0;
        for (; j + BN_L <= s; j += BN_L) {
            VT d = HSI_FN(bn_load)(r + j) - m;
            p += d * d;
        }
        for (; j < s; j++) t += (r[j] - m) * (r[j] - m);
        acc += HSI_FN(bn_lanes)(p) + (double)t;
    }
    return acc;
}

/* sums of g and g * (x - m) over channel ch, g = dy, or dy masked where
 * yr <= 0 (fused ReLU; yr NULL: no mask) */
static void HSI_FN(bn_dsums)(double *sum_dy, double *sum_dyxm, const T *dy, const T *yr,
                             const T *x, int n, int c, int64_t s, int64_t ch, T m)
{
    double a0 = 0, a1 = 0;
    const VT zero = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t o = (i * c + ch) * s;
        const T *g = dy + o, *r = x + o, *q = yr ? yr + o : NULL;
        VT p = {0}, u = {0};
        T tp = 0, tu = 0;
        int64_t j = 0;
        for (; j + BN_L <= s; j += BN_L) {
            VT gv = HSI_FN(bn_load)(g + j);
            if (q) /* lanes where y <= 0 get 0: AND with the all-ones/zero compare mask */
                gv = (VT)((__typeof__(gv > zero))gv & (HSI_FN(bn_load)(q + j) > zero));
            p += gv, u += gv * (HSI_FN(bn_load)(r + j) - m);
        }
        for (; j < s; j++) {
            T gv = !q || q[j] > 0 ? g[j] : 0;
            tp += gv, tu += gv * (r[j] - m);
        }
        a0 += HSI_FN(bn_lanes)(p) + (double)tp, a1 += HSI_FN(bn_lanes)(u) + (double)tu;
    }
    *sum_dy = a0, *sum_dyxm = a1;
}

/* One pass's arguments; threads split the channels (each channel is done
 * by one thread with the same arithmetic, so results do not depend on the
 * thread count). */
typedef struct HSI_FN(bn_job) {
    T *y, *save_mean, *save_invstd, *running_mean, *running_var, *dx, *dgamma, *dbeta;
    const T *x, *gamma, *beta, *dy, *yr, *mean, *invstd;
    int n, c, training, relu; /* relu: forward clamps y at 0; backward masks dy by yr > 0 */
    int acc;                  /* backward: dx += (1) or dx = (0) */
    int64_t s;
    T eps, momentum;
} HSI_FN(bn_job);

static hsi_status HSI_FN(bn_fwd_part)(void *ctx, int t, int nt)
{
    const HSI_FN(bn_job) *j = ctx;
    int n = j->n, c = j->c;
    int64_t s = j->s, c0, c1;
    hsi_split_range(c, t, nt, &c0, &c1);
    double count = (double)n * (double)s;
    for (int64_t ch = c0; ch < c1; ch++) {
        T mean, invstd;
        if (j->training) {
            double m = HSI_FN(bn_sum)(j->x, n, c, s, ch) / count;
            double var = HSI_FN(bn_sqdev)(j->x, n, c, s, ch, (T)m) / count;
            mean = (T)m;
            invstd = (T)(1.0 / sqrt(var + (double)j->eps));
            if (j->save_mean) j->save_mean[ch] = mean;
            if (j->save_invstd) j->save_invstd[ch] = invstd;
            if (j->running_mean && j->running_var) {
                /* PyTorch: unbiased variance in the running estimate (it refuses a
                 * single value per channel in training; here the biased one is kept) */
                double unbiased = count > 1 ? var * count / (count - 1) : var;
                j->running_mean[ch] = (T)((1 - (double)j->momentum) * j->running_mean[ch] +
                                          (double)j->momentum * m);
                j->running_var[ch] = (T)((1 - (double)j->momentum) * j->running_var[ch] +
                                         (double)j->momentum * unbiased);
            }
        } else {
            mean = j->running_mean[ch];
            invstd = (T)(1.0 / sqrt((double)j->running_var[ch] + (double)j->eps));
        }
        T scale = j->gamma ? j->gamma[ch] * invstd : invstd;
        T shift = (j->beta ? j->beta[ch] : (T)0) - mean * scale;
        for (int64_t i = 0; i < n; i++) {
            const T *r = j->x + (i * c + ch) * s;
            T *o = j->y + (i * c + ch) * s;
            if (j->relu)
                for (int64_t e = 0; e < s; e++) {
                    T v = r[e] * scale + shift;
                    o[e] = v > 0 ? v : 0;
                }
            else
                for (int64_t e = 0; e < s; e++) o[e] = r[e] * scale + shift;
        }
    }
    return HSI_OK;
}

static hsi_status HSI_FN(bn_bwd_part)(void *ctx, int t, int nt)
{
    const HSI_FN(bn_job) *j = ctx;
    int n = j->n, c = j->c;
    int64_t s = j->s, c0, c1;
    hsi_split_range(c, t, nt, &c0, &c1);
    double count = (double)n * (double)s;
    const T *yr = j->yr;
    for (int64_t ch = c0; ch < c1; ch++) {
        T m = j->mean[ch], is = j->invstd[ch];
        double sum_dy, sum_dyxm;
        HSI_FN(bn_dsums)(&sum_dy, &sum_dyxm, j->dy, yr, j->x, n, c, s, ch, m);
        double sum_dyxhat = sum_dyxm * (double)is; /* sum dy * xhat */
        if (j->dgamma) j->dgamma[ch] += (T)sum_dyxhat;
        if (j->dbeta) j->dbeta[ch] += (T)sum_dy;
        if (!j->dx) continue;
        T gis = (j->gamma ? j->gamma[ch] : (T)1) * is;
        /* training: dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)),
         * xhat = (x - m) * invstd; folded as dy*a + (x - m)*b + e
         * (x - m first: no cancellation when |mean| >> std). Eval: dy * gis. */
        T k = (T)(sum_dyxhat / count) * is; /* mean(dy*xhat) * invstd */
        T a = gis, b = j->training ? -gis * k : 0, e = j->training ? -gis * (T)(sum_dy / count) : 0;
        for (int64_t i = 0; i < n; i++) {
            const T *g = j->dy + (i * c + ch) * s, *r = j->x + (i * c + ch) * s;
            T *o = j->dx + (i * c + ch) * s;
            const T *q = yr ? yr + (i * c + ch) * s : NULL;
            if (q && j->acc)
                for (int64_t f = 0; f < s; f++)
                    o[f] += (q[f] > 0 ? g[f] : 0) * a + (r[f] - m) * b + e;
            else if (q)
                for (int64_t f = 0; f < s; f++)
                    o[f] = (q[f] > 0 ? g[f] : 0) * a + (r[f] - m) * b + e;
            else if (j->training && j->acc)
                for (int64_t f = 0; f < s; f++) o[f] += g[f] * a + (r[f] - m) * b + e;
            else if (j->training)
                for (int64_t f = 0; f < s; f++) o[f] = g[f] * a + (r[f] - m) * b + e;
            else if (j->acc)
                for (int64_t f = 0; f < s; f++) o[f] += g[f] * a;
            else
                for (int64_t f = 0; f < s; f++) o[f] = g[f] * a;
        }
    }
    return HSI_OK;
}


static void HSI_FN(bn_forward_any)(T *y, T *save_mean, T *save_invstd, T *running_mean,
                                   T *running_var, const T *x, const T *gamma, const T *beta,
                                   int n, int c, int64_t s, T eps, T momentum, int training,
                                   int relu)
{
    HSI_FN(bn_job) j = {.y = y, .save_mean = save_mean, .save_invstd = save_invstd,
                        .running_mean = running_mean, .running_var = running_var, .x = x,
                        .gamma = gamma, .beta = beta, .relu = relu, .n = n, .c = c,
                        .s = s, .eps = eps, .momentum = momentum, .training = training};
    (void)hsi_parallel(hsi_threads_for((double)n * c * s, c), HSI_FN(bn_fwd_part), &j);
}

void HSI_FN(hsi_bn_forward)(T *y, T *save_mean, T *save_invstd, T *running_mean,
                            T *running_var, const T *x, const T *gamma, const T *beta, int n,
                            int c, int64_t s, T eps, T momentum, int training)
{
    HSI_FN(bn_forward_any)(y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta,
                           n, c, s, eps, momentum, training, 0);
}

void HSI_FN(hsi_bn_relu_forward)(T *y, T *save_mean, T *save_invstd, T *running_mean,
                                 T *running_var, const T *x, const T *gamma, const T *beta,
                                 int n, int c, int64_t s, T eps, T momentum, int training)
{
    HSI_FN(bn_forward_any)(y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta,
                           n, c, s, eps, momentum, training, 1);
}

void HSI_FN(hsi_bn_backward)(T *dx, T *dgamma, T *dbeta, const T *dy, const T *x,
                             const T *gamma, const T *save_mean, const T *save_invstd, int n,
                             int c, int64_t s, int training)
{
    HSI_FN(hsi_bn_relu_backward)(dx, dgamma, dbeta, dy, x, NULL, gamma, save_mean, save_invstd,
                                 n, c, s, training, 1);
}

void HSI_FN(hsi_bn_relu_backward)(T *dx, T *dgamma, T *dbeta, const T *dy, const T *x,
                                  const T *y, const T *gamma, const T *save_mean,
                                  const T *save_invstd, int n, int c, int64_t s, int training,
                                  int accumulate)
{
    HSI_FN(bn_job) j = {.dx = dx, .dgamma = dgamma, .dbeta = dbeta, .dy = dy, .x = x, .yr = y,
                        .gamma = gamma, .mean = save_mean, .invstd = save_invstd, .n = n,
                        .c = c, .s = s, .training = training, .acc = accumulate};
    (void)hsi_parallel(hsi_threads_for((double)n * c * s, c), HSI_FN(bn_bwd_part), &j);
}

/* ------------------------------------------- synchronised (SyncBatchNorm) */

/* One synchronised pass's arguments: per-channel sums into a / b, or the
 * application of the global statistics. */
typedef struct HSI_FN(bn_sjob) {
    const T *x, *dy, *yr, *gamma, *beta, *mean, *invstd;
    T *y, *dx, *dgamma, *dbeta;
    double *a, *b; /* per channel: sums (phase 0, 1, 3) */
    double count;  /* global values per channel (phase 4) */
    int n, c, relu, acc, phase;
    int64_t s;
} HSI_FN(bn_sjob);

static hsi_status HSI_FN(bn_sync_part)(void *ctx, int t, int nt)
{
    const HSI_FN(bn_sjob) *j = ctx;
    int n = j->n, c = j->c;
    int64_t s = j->s, c0, c1;
    hsi_split_range(c, t, nt, &c0, &c1);
    for (int64_t ch = c0; ch < c1; ch++) {
        switch (j->phase) {
        case 0: j->a[ch] = HSI_FN(bn_sum)(j->x, n, c, s, ch); break;
        case 1: j->b[ch] = HSI_FN(bn_sqdev)(j->x, n, c, s, ch, j->mean[ch]); break;
        case 2: { /* y = x * scale + shift (ReLU fused) */
            T scale = j->gamma ? j->gamma[ch] * j->invstd[ch] : j->invstd[ch];
            T shift = (j->beta ? j->beta[ch] : (T)0) - j->mean[ch] * scale;
            for (int64_t i = 0; i < n; i++) {
                const T *r = j->x + (i * c + ch) * s;
                T *o = j->y + (i * c + ch) * s;
                for (int64_t e = 0; e < s; e++) {
                    T v = r[e] * scale + shift;
                    o[e] = j->relu && !(v > 0) ? 0 : v;
                }
            }
            break;
        }
        case 3: {
            HSI_FN(bn_dsums)(&j->a[ch], &j->b[ch], j->dy, j->yr, j->x, n, c, s, ch, j->mean[ch]);
            /* this rank's parameter gradients (a data-parallel step sums them) */
            if (j->dgamma) j->dgamma[ch] += (T)(j->b[ch] * (double)j->invstd[ch]);
            if (j->dbeta) j->dbeta[ch] += (T)j->a[ch];
            break;
        }
        case 4: { /* dx from the global sums a (dy), b (dy (x - m)) */
            if (!j->dx) break;
            T m = j->mean[ch], is = j->invstd[ch];
            T gis = (j->gamma ? j->gamma[ch] : (T)1) * is;
            T k = (T)(j->b[ch] * (double)is / j->count) * is;
            T a = gis, bb = -gis * k, e = -gis * (T)(j->a[ch] / j->count);
            for (int64_t i = 0; i < n; i++) {
                const T *g = j->dy + (i * c + ch) * s, *r = j->x + (i * c + ch) * s;
                const T *q = j->yr ? j->yr + (i * c + ch) * s : NULL;
                T *o = j->dx + (i * c + ch) * s;
                for (int64_t f = 0; f < s; f++) {
                    T gv = !q || q[f] > 0 ? g[f] : 0;
                    T v = gv * a + (r[f] - m) * bb + e;
                    o[f] = j->acc ? o[f] + v : v;
                }
            }
            break;
        }
        }
    }
    return HSI_OK;
}

static hsi_status HSI_FN(bn_sync_run)(HSI_FN(bn_sjob) *j, int phase)
{
    j->phase = phase;
    return hsi_parallel(hsi_threads_for((double)j->n * j->c * j->s, j->c), HSI_FN(bn_sync_part), j);
}

hsi_status HSI_FN(hsi_bn_sync_forward)(T *y, T *save_mean, T *save_invstd, T *running_mean,
                                       T *running_var, const T *x, const T *gamma, const T *beta,
                                       int n, int c, int64_t s, T eps, T momentum, int relu,
                                       hsi_status (*sync)(void *, double *, int64_t), void *ctx)
{
    hsi_status st = HSI_OK;
    double *v = malloc((size_t)(2 * c + 1) * sizeof *v);
    T *mean = malloc((size_t)(2 * c) * sizeof *mean);
    if (!v || !mean) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "batch_norm (sync): out of memory");
        goto cleanup;
    }
    T *invstd = mean + c;
    HSI_FN(bn_sjob) j = {.x = x, .y = y, .gamma = gamma, .beta = beta, .mean = mean,
                         .invstd = invstd, .a = v, .b = v + c + 1, .n = n, .c = c, .s = s,
                         .relu = relu};
    HSI_TRY(HSI_FN(bn_sync_run)(&j, 0));
    v[c] = (double)n * (double)s;
    HSI_TRY(sync(ctx, v, c + 1));
    double count = v[c];
    if (!(count >= 2)) {
        st = HSI_FAIL(HSI_ERR_ARG, "batch_norm (sync): training needs more than 1 value per "
                                   "channel over all ranks (got %g)", count);
        goto cleanup;
    }
    for (int ch = 0; ch < c; ch++) mean[ch] = (T)(v[ch] / count);
    HSI_TRY(HSI_FN(bn_sync_run)(&j, 1));
    HSI_TRY(sync(ctx, j.b, c));
    for (int ch = 0; ch < c; ch++) {
        double m = v[ch] / count, var = j.b[ch] / count;
        invstd[ch] = (T)(1.0 / sqrt(var + (double)eps));
        if (save_mean) save_mean[ch] = mean[ch];
        if (save_invstd) save_invstd[ch] = invstd[ch];
        if (running_mean && running_var) {
            double unbiased = var * count / (count - 1);
            running_mean[ch] = (T)((1 - (double)momentum) * running_mean[ch] + (double)momentum * m);
            running_var[ch] = (T)((1 - (double)momentum) * running_var[ch] + (double)momentum * unbiased);
        }
    }
    HSI_TRY(HSI_FN(bn_sync_run)(&j, 2));
cleanup:
    free(v);
    free(mean);
    return st;
}

hsi_status HSI_FN(hsi_bn_sync_backward)(T *dx, T *dgamma, T *dbeta, const T *dy, const T *x,
                                        const T *y, const T *gamma, const T *save_mean,
                                        const T *save_invstd, int n, int c, int64_t s,
                                        int accumulate,
                                        hsi_status (*sync)(void *, double *, int64_t), void *ctx)
{
    hsi_status st = HSI_OK;
    double *v = malloc((size_t)(2 * c + 1) * sizeof *v);
    if (!v) return HSI_FAIL(HSI_ERR_NOMEM, "batch_norm (sync): out of memory");
    HSI_FN(bn_sjob) j = {.x = x, .dy = dy, .yr = y, .gamma = gamma, .mean = save_mean,
                         .invstd = save_invstd, .dx = dx, .dgamma = dgamma, .dbeta = dbeta,
                         .a = v, .b = v + c, .n = n, .c = c, .s = s, .acc = accumulate};
    HSI_TRY(HSI_FN(bn_sync_run)(&j, 3));
    v[2 * c] = (double)n * (double)s;
    HSI_TRY(sync(ctx, v, 2 * c + 1));
    j.count = v[2 * c];
    HSI_TRY(HSI_FN(bn_sync_run)(&j, 4));
cleanup:
    free(v);
    return st;
}

void HSI_FN(hsi_bn_fold)(T *wf, T *bf, const T *w, const T *b, const T *gamma, const T *beta,
                         const T *mean, const T *var, double eps, int64_t k, int64_t per)
{
    for (int64_t o = 0; o < k; o++) {
        double sc = (gamma ? (double)gamma[o] : 1.0) / sqrt((double)var[o] + eps);
        bf[o] = (T)(((b ? (double)b[o] : 0.0) - (double)mean[o]) * sc + (beta ? (double)beta[o] : 0.0));
        T s_ = (T)sc;
        for (int64_t i = 0; i < per; i++) wf[o * per + i] = w[o * per + i] * s_;
    }
}

#undef BN_L
#undef VT
#undef T
#endif
