/* layer_bn.c — batch normalisation over (N, C, S) packed arrays (BatchNorm1d
 * on (N, C) or (N, C, L), 2d, 3d), training and eval, forward and backward,
 * in float and double. Not a module: no parameters owned, no allocation.
 *
 * The type-generic body lives at the bottom of this file, which includes
 * itself twice (float, double) so both precisions run the same code. */
#ifndef HSI_LAYER_T

#include <math.h>
#include <string.h>

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

/* Sums over one channel c of x (N, C, S): each row of S elements in four
 * partial sums of T (so the compiler can vectorise), rows added in double. */
static double HSI_FN(bn_sum)(const T *x, int n, int c, int64_t s, int64_t ch)
{
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const T *r = x + (i * c + ch) * s;
        T p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        int64_t j = 0;
        for (; j + 4 <= s; j += 4) p0 += r[j], p1 += r[j + 1], p2 += r[j + 2], p3 += r[j + 3];
        for (; j < s; j++) p0 += r[j];
        acc += (double)((p0 + p1) + (p2 + p3));
    }
    return acc;
}

/* sum of (x - m)^2 over channel ch */
static double HSI_FN(bn_sqdev)(const T *x, int n, int c, int64_t s, int64_t ch, T m)
{
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const T *r = x + (i * c + ch) * s;
        T p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        int64_t j = 0;
        for (; j + 4 <= s; j += 4) {
            T a = r[j] - m, b = r[j + 1] - m, e = r[j + 2] - m, f = r[j + 3] - m;
            p0 += a * a, p1 += b * b, p2 += e * e, p3 += f * f;
        }
        for (; j < s; j++) p0 += (r[j] - m) * (r[j] - m);
        acc += (double)((p0 + p1) + (p2 + p3));
    }
    return acc;
}

/* sum of dy and of dy * (x - m) over channel ch */
static void HSI_FN(bn_dsums)(double *sum_dy, double *sum_dyxm, const T *dy, const T *x, int n,
                             int c, int64_t s, int64_t ch, T m)
{
    double a0 = 0, a1 = 0;
    for (int64_t i = 0; i < n; i++) {
        const T *g = dy + (i * c + ch) * s, *r = x + (i * c + ch) * s;
        T p0 = 0, p1 = 0, q0 = 0, q1 = 0;
        int64_t j = 0;
        for (; j + 2 <= s; j += 2) {
            p0 += g[j], p1 += g[j + 1];
            q0 += g[j] * (r[j] - m), q1 += g[j + 1] * (r[j + 1] - m);
        }
        for (; j < s; j++) p0 += g[j], q0 += g[j] * (r[j] - m);
        a0 += (double)(p0 + p1), a1 += (double)(q0 + q1);
    }
    *sum_dy = a0, *sum_dyxm = a1;
}

void HSI_FN(hsi_bn_forward)(T *y, T *save_mean, T *save_invstd, T *running_mean,
                            T *running_var, const T *x, const T *gamma, const T *beta, int n,
                            int c, int64_t s, T eps, T momentum, int training)
{
    double count = (double)n * (double)s;
    for (int64_t ch = 0; ch < c; ch++) {
        T mean, invstd;
        if (training) {
            double m = HSI_FN(bn_sum)(x, n, c, s, ch) / count;
            double var = HSI_FN(bn_sqdev)(x, n, c, s, ch, (T)m) / count;
            mean = (T)m;
            invstd = (T)(1.0 / sqrt(var + (double)eps));
            if (save_mean) save_mean[ch] = mean;
            if (save_invstd) save_invstd[ch] = invstd;
            if (running_mean && running_var) {
                /* PyTorch: unbiased variance in the running estimate (it refuses a
                 * single value per channel in training; here the biased one is kept) */
                double unbiased = count > 1 ? var * count / (count - 1) : var;
                running_mean[ch] = (T)((1 - (double)momentum) * running_mean[ch] +
                                       (double)momentum * m);
                running_var[ch] = (T)((1 - (double)momentum) * running_var[ch] +
                                      (double)momentum * unbiased);
            }
        } else {
            mean = running_mean[ch];
            invstd = (T)(1.0 / sqrt((double)running_var[ch] + (double)eps));
        }
        T scale = gamma ? gamma[ch] * invstd : invstd;
        T shift = (beta ? beta[ch] : (T)0) - mean * scale;
        for (int64_t i = 0; i < n; i++) {
            const T *r = x + (i * c + ch) * s;
            T *o = y + (i * c + ch) * s;
            for (int64_t j = 0; j < s; j++) o[j] = r[j] * scale + shift;
        }
    }
}

void HSI_FN(hsi_bn_backward)(T *dx, T *dgamma, T *dbeta, const T *dy, const T *x,
                             const T *gamma, const T *save_mean, const T *save_invstd, int n,
                             int c, int64_t s, int training)
{
    double count = (double)n * (double)s;
    for (int64_t ch = 0; ch < c; ch++) {
        T m = save_mean[ch], is = save_invstd[ch];
        double sum_dy, sum_dyxm;
        HSI_FN(bn_dsums)(&sum_dy, &sum_dyxm, dy, x, n, c, s, ch, m);
        double sum_dyxhat = sum_dyxm * (double)is; /* sum dy * xhat */
        if (dgamma) dgamma[ch] += (T)sum_dyxhat;
        if (dbeta) dbeta[ch] += (T)sum_dy;
        if (!dx) continue;
        T gis = (gamma ? gamma[ch] : (T)1) * is;
        if (training) {
            /* dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)),
             * xhat = (x - m) * invstd; folded as dy*a + (x - m)*b + e
             * (x - m first: no cancellation when |mean| >> std) */
            T k = (T)(sum_dyxhat / count) * is; /* mean(dy*xhat) * invstd */
            T a = gis, b = -gis * k, e = -gis * (T)(sum_dy / count);
            for (int64_t i = 0; i < n; i++) {
                const T *g = dy + (i * c + ch) * s, *r = x + (i * c + ch) * s;
                T *o = dx + (i * c + ch) * s;
                for (int64_t j = 0; j < s; j++) o[j] += g[j] * a + (r[j] - m) * b + e;
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                const T *g = dy + (i * c + ch) * s;
                T *o = dx + (i * c + ch) * s;
                for (int64_t j = 0; j < s; j++) o[j] += g[j] * gis;
            }
        }
    }
}

#undef T
#endif
