/* ops_kern.h — element kernels of ops.c written once for float and double:
 * ops.c includes this file twice with T / SFX / GEMM / EXPF / LOGF / ERFF
 * defined. Packed arrays only (ops.c makes inputs packed first). Not a
 * public header and not a standalone one. */

#define KN_(a, b) a##_##b
#define KN(a, b) KN_(a, b)
#define K(name) KN(name, SFX)

/* 5-D loop over shape sh with three operands (element strides, zero =
 * broadcast). mode 0: d = s1 + alpha s2; 1: d = s1 * s2; 2: d += alpha s1;
 * 3: d += s1 * s2. */
static void K(tern)(int mode, const int64_t *sh, T *d, const int64_t *ds, const T *s1,
                    const int64_t *s1s, const T *s2, const int64_t *s2s, T alpha)
{
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++)
                for (int64_t i3 = 0; i3 < sh[3]; i3++) {
                    T *dp = d + i0 * ds[0] + i1 * ds[1] + i2 * ds[2] + i3 * ds[3];
                    const T *a = s1 + i0 * s1s[0] + i1 * s1s[1] + i2 * s1s[2] + i3 * s1s[3];
                    const T *b = s2 ? s2 + i0 * s2s[0] + i1 * s2s[1] + i2 * s2s[2] + i3 * s2s[3]
                                    : NULL;
                    int64_t n = sh[4], dd = ds[4], as = s1s[4], bs = s2 ? s2s[4] : 0;
                    switch (mode) {
                    case 0:
                        for (int64_t i = 0; i < n; i++) dp[i * dd] = a[i * as] + alpha * b[i * bs];
                        break;
                    case 1:
                        for (int64_t i = 0; i < n; i++) dp[i * dd] = a[i * as] * b[i * bs];
                        break;
                    case 2:
                        for (int64_t i = 0; i < n; i++) dp[i * dd] += alpha * a[i * as];
                        break;
                    default:
                        for (int64_t i = 0; i < n; i++) dp[i * dd] += a[i * as] * b[i * bs];
                        break;
                    }
                }
}

/* x: (N, in), w: (out, in), b: (out) or NULL -> y: (N, out) */
static void K(linear_fwd)(T *y, const T *x, const T *w, const T *b, int n, int in, int out)
{
    if (b)
        for (int i = 0; i < n; i++) memcpy(y + (size_t)i * out, b, sizeof(T) * (size_t)out);
    /* row-major y(N,out) = x(N,in) * w(out,in)^T; lda = in, ldb = in, ldc = out */
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1, x, in, w, in, b ? 1 : 0, y,
         out);
}

static void K(linear_bwd)(T *dx, T *dw, T *db, const T *dy, const T *x, const T *w, int n,
                          int in, int out)
{
    /* dx(N,in) += dy(N,out) w(out,in) */
    if (dx) GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1, dy, out, w, in, 1, dx,
                 in);
    /* dw(out,in) += dy(N,out)^T x(N,in) */
    if (dw) GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1, dy, out, x, in, 1, dw,
                 in);
    if (db)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < out; j++) db[j] += dy[(size_t)i * out + j];
}

/* a: (M, K), b: (K, N) -> y (M, N) */
static void K(matmul_fwd)(T *y, const T *a, const T *b, int m, int k, int n)
{
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, y, n);
}

static void K(matmul_bwd)(T *da, T *db, const T *dy, const T *a, const T *b, int m, int k, int n)
{
    /* da(M,K) += dy(M,N) b(K,N)^T */
    if (da) GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, m, k, n, 1, dy, n, b, n, 1, da, k);
    /* db(K,N) += a(M,K)^T dy(M,N) */
    if (db) GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, m, 1, a, k, dy, n, 1, db, n);
}

/* unary activations; kind: 0 relu, 1 leaky, 2 gelu, 3 swish (save = sigmoid) */
static void K(act_fwd)(int kind, T *y, T *save, const T *x, int64_t n, T slope)
{
    switch (kind) {
    case 0:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case 1:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : slope * x[i];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++)
            y[i] = (T)0.5 * x[i] * ((T)1 + ERFF(x[i] * (T)0.70710678118654752440));
        break;
    default:
        for (int64_t i = 0; i < n; i++) {
            T s = (T)1 / ((T)1 + EXPF(-x[i]));
            if (save) save[i] = s;
            y[i] = x[i] * s;
        }
        break;
    }
}

static void K(act_bwd)(int kind, T *dx, const T *dy, const T *x, const T *y, const T *save,
                       int64_t n, T slope)
{
    switch (kind) {
    case 0:
        for (int64_t i = 0; i < n; i++) dx[i] += y[i] > 0 ? dy[i] : 0;
        break;
    case 1:
        for (int64_t i = 0; i < n; i++) dx[i] += x[i] > 0 ? dy[i] : slope * dy[i];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++) {
            T cdf = (T)0.5 * ((T)1 + ERFF(x[i] * (T)0.70710678118654752440));
            T pdf = EXPF((T)-0.5 * x[i] * x[i]) * (T)0.39894228040143267794;
            dx[i] += dy[i] * (cdf + x[i] * pdf);
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++) {
            T s = save[i];
            dx[i] += dy[i] * s * ((T)1 + x[i] * ((T)1 - s));
        }
        break;
    }
}

/* rows of length c: y = x - max - log(sum exp(x - max)) */
static void K(log_softmax_fwd)(T *y, const T *x, int64_t rows, int64_t c)
{
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * c;
        T *yr = y + r * c;
        T mx = xr[0];
        for (int64_t j = 1; j < c; j++) mx = xr[j] > mx ? xr[j] : mx;
        double s = 0;
        for (int64_t j = 0; j < c; j++) s += (double)EXPF(xr[j] - mx);
        T lse = mx + (T)log(s);
        for (int64_t j = 0; j < c; j++) yr[j] = xr[j] - lse;
    }
}

/* dx += dy - exp(y) sum(dy) per row */
static void K(log_softmax_bwd)(T *dx, const T *dy, const T *y, int64_t rows, int64_t c)
{
    for (int64_t r = 0; r < rows; r++) {
        const T *dr = dy + r * c, *yr = y + r * c;
        T *xr = dx + r * c;
        double s = 0;
        for (int64_t j = 0; j < c; j++) s += dr[j];
        for (int64_t j = 0; j < c; j++) xr[j] += dr[j] - EXPF(yr[j]) * (T)s;
    }
}

/* Cross-entropy. z: (N, C) logits; tgt: class per row (already validated;
 * ignored rows have ign[i] = 1); w: (C) or NULL; p: (N, C) softmax out.
 * Returns sum of per-sample losses and *wsum = sum of w[target]. */
static double K(ce_fwd)(T *p, const T *z, const int64_t *tgt, const uint8_t *ign, const T *w,
                        int64_t n, int64_t c, double eps, double *wsum)
{
    double total = 0, W = 0, sw = 0;
    if (w)
        for (int64_t j = 0; j < c; j++) sw += w[j];
    else
        sw = (double)c;
    for (int64_t i = 0; i < n; i++) {
        const T *zr = z + i * c;
        T *pr = p + i * c;
        T mx = zr[0];
        for (int64_t j = 1; j < c; j++) mx = zr[j] > mx ? zr[j] : mx;
        double s = 0;
        for (int64_t j = 0; j < c; j++) {
            T e = EXPF(zr[j] - mx);
            pr[j] = e;
            s += e;
        }
        T inv = (T)(1.0 / s);
        for (int64_t j = 0; j < c; j++) pr[j] *= inv;
        if (ign[i]) continue;
        double lse = (double)mx + log(s);
        int64_t y = tgt[i];
        double wy = w ? (double)w[y] : 1.0;
        double nll = lse - (double)zr[y];
        double smooth = 0;
        if (eps > 0) {
            for (int64_t j = 0; j < c; j++) smooth += (w ? (double)w[j] : 1.0) * (lse - zr[j]);
        }
        total += (1 - eps) * wy * nll + eps / (double)c * smooth;
        W += wy;
    }
    (void)sw;
    *wsum = W;
    return total;
}

static void K(ce_bwd)(T *dz, const T *p, const int64_t *tgt, const uint8_t *ign, const T *w,
                      int64_t n, int64_t c, double eps, double scale)
{
    double sw = 0;
    if (w)
        for (int64_t j = 0; j < c; j++) sw += w[j];
    else
        sw = (double)c;
    for (int64_t i = 0; i < n; i++) {
        if (ign[i]) continue;
        const T *pr = p + i * c;
        T *dr = dz + i * c;
        int64_t y = tgt[i];
        double wy = w ? (double)w[y] : 1.0;
        double qsum = (1 - eps) * wy + eps / (double)c * sw;
        for (int64_t j = 0; j < c; j++) {
            double q = eps / (double)c * (w ? (double)w[j] : 1.0);
            if (j == y) q += (1 - eps) * wy;
            dr[j] += (T)(scale * (qsum * (double)pr[j] - q));
        }
    }
}

#undef K
#undef KN
#undef KN_
