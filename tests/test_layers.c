/* test_layers.c — the layer kernels of models/layers.h (conv, pool, global
 * average pool, batch norm) against three independent references: PyTorch
 * fixtures (tests/fixtures/make_layer_fixtures.py), naive loops written here
 * from the definitions, and central finite differences in double. */
#include "test.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>

#include "models/conv_direct.h"
#include "models/cuda_index.h"
#include "models/layers.h"

/* ------------------------------------------------------------ utilities */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static void fill_rand(double *a, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++) a[i] = (2 * urand() - 1) * scale;
}
/* Distinct values (a shuffled ramp with gaps of 0.01): no ties for max
 * pooling, so finite differences with small steps are well defined. */
static void fill_distinct(double *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) a[i] = 0.01 * (double)i - 0.005 * (double)n;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double t = a[i];
        a[i] = a[j], a[j] = t;
    }
}
static double *dalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
/* max |a - b| / (atol + rtol |b|); <= 1 passes */
static double err_ratio(const double *a, const double *b, int64_t n, double atol, double rtol,
                        int64_t *where)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= worst)) worst = e, *where = i; /* NaN counts as worst */
    }
    return worst;
}
#define CHECK_CLOSE(what, a, b, n, atol, rtol)                                         \
    do {                                                                               \
        int64_t at_ = 0;                                                               \
        double r_ = err_ratio((a), (b), (n), (atol), (rtol), &at_);                    \
        if (!(r_ <= 1))                                                                \
            fprintf(stderr, "\n  %s: %s differs at %lld: %.9g vs %.9g (ratio %.3g)\n", \
                    __func__, (what), (long long)at_, (a)[at_], (b)[at_], r_);         \
        CU_ASSERT(r_ <= 1);                                                            \
    } while (0)

/* -------------------------------------------- central finite differences */

/* loss(ctx) = sum(forward(...) * r) with the parameters as they are now. */
typedef double (*loss_fn)(void *ctx);

/* Compares analytic d loss / d p[i] with (loss(p+h) - loss(p-h)) / 2h for up
 * to 60 elements spread over p. Returns the number of mismatches. */
static int fd_check(const char *what, double *p, int64_t n, const double *analytic, loss_fn f,
                    void *ctx)
{
    const double h = 1e-6, tol = 1e-6;
    int64_t step = n > 60 ? n / 60 : 1;
    int bad = 0;
    for (int64_t i = 0; i < n; i += step) {
        double v = p[i];
        p[i] = v + h;
        double lp = f(ctx);
        p[i] = v - h;
        double lm = f(ctx);
        p[i] = v;
        double num = (lp - lm) / (2 * h);
        if (!(fabs(num - analytic[i]) <= tol * (1 + fabs(num)))) {
            if (bad < 3)
                fprintf(stderr, "\n  fd %s[%lld]: analytic %.10g, numeric %.10g\n", what,
                        (long long)i, analytic[i], num);
            bad++;
        }
    }
    return bad;
}

/* ------------------------------------------------------ fixture reader */

typedef struct fx_array {
    char name[32];
    int dtype; /* 0 f32, 1 i32 */
    int ndim;
    int64_t dims[6], count;
    void *data;
} fx_array;
typedef struct fx_file {
    int n;
    fx_array a[24];
} fx_file;

static int fx_load(fx_file *fx, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/layers/%s.fx", name);
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "\n  cannot open %s (run the tests from the repository root)\n", path);
        return -1;
    }
    char magic[8];
    uint32_t count = 0;
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "HSIFX1\0\0", 8) &&
             fread(&count, 4, 1, f) == 1 && count <= 24;
    for (uint32_t i = 0; ok && i < count; i++) {
        fx_array *a = &fx->a[i];
        uint32_t len = 0, dt = 0, nd = 0;
        ok = fread(&len, 4, 1, f) == 1 && len < sizeof a->name && fread(a->name, 1, len, f) == len &&
             fread(&dt, 4, 1, f) == 1 && fread(&nd, 4, 1, f) == 1 && nd <= 6 && dt <= 1;
        if (!ok) break;
        a->dtype = (int)dt, a->ndim = (int)nd, a->count = 1;
        for (uint32_t k = 0; ok && k < nd; k++) {
            ok = fread(&a->dims[k], 8, 1, f) == 1 && a->dims[k] >= 0 && a->dims[k] < (1 << 24);
            a->count *= a->dims[k];
        }
        if (!ok) break;
        a->data = malloc((size_t)a->count * 4 + 4);
        ok = fread(a->data, 4, (size_t)a->count, f) == (size_t)a->count;
        fx->n++;
    }
    fclose(f);
    if (!ok) fprintf(stderr, "\n  %s: malformed fixture\n", path);
    return ok ? 0 : -1;
}
static void fx_free(fx_file *fx)
{
    for (int i = 0; i < fx->n; i++) free(fx->a[i].data);
}
static const fx_array *fx_get(const fx_file *fx, const char *name)
{
    for (int i = 0; i < fx->n; i++)
        if (!strcmp(fx->a[i].name, name)) return &fx->a[i];
    return NULL;
}
/* The array as doubles (malloc'd), NULL when absent. */
static double *fx_f64(const fx_file *fx, const char *name, int64_t *count)
{
    const fx_array *a = fx_get(fx, name);
    if (!a) return NULL;
    double *d = dalloc(a->count);
    for (int64_t i = 0; i < a->count; i++)
        d[i] = a->dtype == 0 ? (double)((const float *)a->data)[i]
                             : (double)((const int32_t *)a->data)[i];
    if (count) *count = a->count;
    return d;
}
static const int32_t *fx_i32(const fx_file *fx, const char *name)
{
    const fx_array *a = fx_get(fx, name);
    return a && a->dtype == 1 ? (const int32_t *)a->data : NULL;
}
static float *to_f32(const double *d, int64_t n)
{
    if (!d) return NULL;
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}
static void from_f32(double *d, const float *f, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
}

/* ------------------------------------------------- naive references */

/* A 2-D or 3-D geometry as 3 axes (D = 1 for 2-D). */
typedef struct geo3 {
    int64_t in[3], ker[3], stride[3], pad[3], out[3], in_sp, out_sp, ker_sp;
} geo3;
static geo3 geo_from(int nd, const int *in, const int *ker, const int *stride, const int *pad,
                     const int *out)
{
    geo3 g;
    int o = nd == 3 ? 0 : 1;
    for (int a = 0; a < 3; a++) {
        int i = a - o;
        g.in[a] = i < 0 ? 1 : in[i], g.ker[a] = i < 0 ? 1 : ker[i];
        g.stride[a] = i < 0 ? 1 : stride[i], g.pad[a] = i < 0 ? 0 : pad[i];
        g.out[a] = i < 0 ? 1 : out[i];
    }
    g.in_sp = g.in[0] * g.in[1] * g.in[2];
    g.out_sp = g.out[0] * g.out[1] * g.out[2];
    g.ker_sp = g.ker[0] * g.ker[1] * g.ker[2];
    return g;
}

/* Direct convolution by the definition; y overwritten, dx/dw/db accumulated
 * when dy is given (any of them may be NULL). */
static void ref_conv(double *y, double *dx, double *dw, double *db, const double *dy,
                     const double *x, const double *w, const double *b, const hsi_conv_dims *d)
{
    geo3 g = geo_from(d->nd, d->in, d->ker, d->stride, d->pad, d->out);
    for (int64_t n = 0; n < d->n; n++)
        for (int64_t k = 0; k < d->k; k++)
            for (int64_t o0 = 0; o0 < g.out[0]; o0++)
                for (int64_t o1 = 0; o1 < g.out[1]; o1++)
                    for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
                        int64_t yi = ((n * d->k + k) * g.out[0] + o0) * g.out[1] * g.out[2] +
                                     o1 * g.out[2] + o2;
                        double s = b ? b[k] : 0, gy = dy ? dy[yi] : 0;
                        if (dy && db) db[k] += gy;
                        for (int64_t c = 0; c < d->c; c++)
                            for (int64_t a0 = 0; a0 < g.ker[0]; a0++)
                                for (int64_t a1 = 0; a1 < g.ker[1]; a1++)
                                    for (int64_t a2 = 0; a2 < g.ker[2]; a2++) {
                                        int64_t i0 = o0 * g.stride[0] - g.pad[0] + a0;
                                        int64_t i1 = o1 * g.stride[1] - g.pad[1] + a1;
                                        int64_t i2 = o2 * g.stride[2] - g.pad[2] + a2;
                                        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 ||
                                            i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2])
                                            continue;
                                        int64_t xi = ((n * d->c + c) * g.in[0] + i0) *
                                                         g.in[1] * g.in[2] +
                                                     i1 * g.in[2] + i2;
                                        int64_t wi = ((k * d->c + c) * g.ker[0] + a0) *
                                                         g.ker[1] * g.ker[2] +
                                                     a1 * g.ker[2] + a2;
                                        s += x[xi] * w[wi];
                                        if (dy && dx) dx[xi] += w[wi] * gy;
                                        if (dy && dw) dw[wi] += x[xi] * gy;
                                    }
                        if (y) y[yi] = s;
                    }
}

/* Pooling by the definition, in double; argmax as int64 plane index. */
static void ref_pool(double *y, int64_t *argmax, double *dx, const double *dy, const double *x,
                     const hsi_pool_dims *d)
{
    geo3 g = geo_from(d->nd, d->in, d->ker, d->stride, d->pad, d->out);
    for (int64_t p = 0; p < (int64_t)d->n * d->c; p++)
        for (int64_t o0 = 0; o0 < g.out[0]; o0++)
            for (int64_t o1 = 0; o1 < g.out[1]; o1++)
                for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
                    int64_t yi = p * g.out_sp + (o0 * g.out[1] + o1) * g.out[2] + o2;
                    double best = -INFINITY, sum = 0;
                    int64_t bi = -1;
                    for (int64_t a0 = 0; a0 < g.ker[0]; a0++)
                        for (int64_t a1 = 0; a1 < g.ker[1]; a1++)
                            for (int64_t a2 = 0; a2 < g.ker[2]; a2++) {
                                int64_t i0 = o0 * g.stride[0] - g.pad[0] + a0;
                                int64_t i1 = o1 * g.stride[1] - g.pad[1] + a1;
                                int64_t i2 = o2 * g.stride[2] - g.pad[2] + a2;
                                if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] ||
                                    i2 < 0 || i2 >= g.in[2])
                                    continue; /* padding: zero for avg, ignored by max */
                                int64_t xi = (i0 * g.in[1] + i1) * g.in[2] + i2;
                                double v = x[p * g.in_sp + xi];
                                sum += v;
                                if (v > best) best = v, bi = xi;
                                if (dy && d->kind == HSI_POOL_AVG)
                                    dx[p * g.in_sp + xi] += dy[yi] / (double)g.ker_sp;
                            }
                    if (d->kind == HSI_POOL_MAX) {
                        if (y) y[yi] = best;
                        if (argmax) argmax[yi] = bi;
                        if (dy) dx[p * g.in_sp + bi] += dy[yi];
                    } else if (y) {
                        y[yi] = sum / (double)g.ker_sp;
                    }
                }
}

/* ------------------------------------------------------- conv: dims */

static void test_conv_dims(void)
{
    hsi_conv_dims d;
    int in2[2] = {11, 11}, k3[2] = {3, 3}, s1[2] = {1, 1}, p1[2] = {1, 1}, s2[2] = {2, 3},
        p0[2] = {0, 0};
    HSI_CHECK_OK(hsi_conv_dims_init(&d, 2, 128, 30, 64, in2, k3, s1, p1));
    CU_ASSERT_EQUAL(d.out[0], 11);
    CU_ASSERT_EQUAL(d.out[1], 11);
    HSI_CHECK_OK(hsi_conv_dims_init(&d, 2, 1, 1, 1, in2, k3, s2, p0));
    CU_ASSERT_EQUAL(d.out[0], 5); /* (11 - 3) / 2 + 1 */
    CU_ASSERT_EQUAL(d.out[1], 3); /* (11 - 3) / 3 + 1 */
    int in3[3] = {30, 25, 25}, k73[3] = {7, 3, 3}, s3[3] = {1, 1, 1}, p3[3] = {0, 0, 0};
    HSI_CHECK_OK(hsi_conv_dims_init(&d, 3, 2, 1, 8, in3, k73, s3, p3));
    CU_ASSERT_EQUAL(d.out[0], 24);
    CU_ASSERT_EQUAL(d.out[2], 23);
    CU_ASSERT(hsi_conv_workspace_bytes(&d, 4) >= (size_t)(63 + 8) * 24 * 23 * 23 * 4);
    int tiny[2] = {2, 5};
    HSI_CHECK_FAILS(hsi_conv_dims_init(&d, 2, 1, 1, 1, tiny, k3, s1, p0), HSI_ERR_ARG,
                    "axis H: kernel 3 is larger than the padded input 2");
    HSI_CHECK_FAILS(hsi_conv_dims_init(&d, 4, 1, 1, 1, in2, k3, s1, p0), HSI_ERR_ARG,
                    "must be 2 or 3 (found 4)");
    int zs[2] = {1, 0};
    HSI_CHECK_FAILS(hsi_conv_dims_init(&d, 2, 1, 1, 1, in2, k3, zs, p0), HSI_ERR_ARG,
                    "stride 0");
    HSI_CHECK_FAILS(hsi_conv_dims_init(&d, 2, 0, 1, 1, in2, k3, s1, p0), HSI_ERR_ARG, "n=0");
}

/* -------------------------------------- conv: fast path vs definition */

typedef struct conv_case {
    int nd, n, c, k, in[3], ker[3], stride[3], pad[3], bias;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 2, 3, 4, {7, 6}, {3, 3}, {1, 1}, {1, 1}, 1},
    {2, 3, 2, 5, {9, 8}, {3, 2}, {2, 3}, {0, 1}, 0},
    {2, 1, 1, 1, {1, 1}, {1, 1}, {1, 1}, {0, 0}, 1},   /* 1x1 everything */
    {2, 2, 3, 2, {4, 5}, {5, 5}, {1, 2}, {2, 3}, 1},   /* pad wider than the input edge */
    {2, 2, 2, 3, {6, 6}, {1, 1}, {2, 2}, {0, 0}, 1},   /* 1x1 kernel, stride 2 */
    {3, 2, 2, 3, {5, 6, 5}, {3, 3, 2}, {1, 2, 1}, {1, 0, 1}, 1},
    {3, 3, 8, 4, {12, 12, 12}, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, 1}, /* several groups */
    {2, 40, 16, 16, {11, 11}, {3, 3}, {1, 1}, {1, 1}, 1},          /* several groups */
    /* C * kW >= 32: the channels-last path */
    {2, 2, 16, 3, {7, 6}, {3, 2}, {2, 3}, {0, 1}, 1},
    {2, 3, 8, 5, {6, 7}, {5, 5}, {1, 2}, {2, 2}, 0},
    {3, 2, 11, 3, {5, 6, 5}, {3, 3, 3}, {1, 2, 1}, {1, 0, 1}, 1},
    {2, 20, 32, 8, {24, 24}, {3, 3}, {1, 1}, {1, 1}, 1},           /* several groups */
    /* channels-last, column rows in several chunks that cross D planes and samples */
    {3, 3, 16, 5, {9, 14, 13}, {3, 3, 3}, {2, 1, 2}, {1, 1, 0}, 1},
    /* Winograd F(2x2, 3x3) (2-D, 3x3, pad 1): odd sizes (partial tiles), channel
     * counts that are not multiples of 16, and a 1-pixel-wide input */
    {2, 3, 5, 20, {7, 9}, {3, 3}, {1, 1}, {1, 1}, 1},
    {2, 2, 4, 33, {5, 5}, {3, 3}, {1, 1}, {1, 1}, 0},
    {2, 2, 6, 4, {1, 8}, {3, 3}, {1, 1}, {1, 1}, 1},
    /* Winograd with pad 0 and mixed pads (forward and dw; dx direct) */
    {2, 3, 6, 10, {9, 8}, {3, 3}, {1, 1}, {0, 0}, 1},
    {2, 2, 8, 5, {7, 10}, {3, 3}, {1, 1}, {1, 0}, 0},
};

/* Forward and backward (all gradients, accumulating onto a prefilled value)
 * of the kernel in precision f32 or f64 against ref_conv. */
static void run_conv_vs_ref(const conv_case *cc, int f32)
{
    hsi_conv_dims d;
    HSI_CHECK_OK(hsi_conv_dims_init(&d, cc->nd, cc->n, cc->c, cc->k, cc->in, cc->ker,
                                    cc->stride, cc->pad));
    geo3 g = geo_from(d.nd, d.in, d.ker, d.stride, d.pad, d.out);
    int64_t nx = d.n * d.c * g.in_sp, nw = d.k * d.c * g.ker_sp, ny = d.n * d.k * g.out_sp;
    double *x = dalloc(nx), *w = dalloc(nw), *b = dalloc(d.k), *dy = dalloc(ny);
    double *y = dalloc(ny), *dx = dalloc(nx), *dw = dalloc(nw), *db = dalloc(d.k);
    double *ry = dalloc(ny), *rdx = dalloc(nx), *rdw = dalloc(nw), *rdb = dalloc(d.k);
    fill_rand(x, nx, 1), fill_rand(w, nw, 0.5), fill_rand(b, d.k, 1), fill_rand(dy, ny, 1);
    const double pre = 0.25; /* gradients start here: backward must add, not store */
    for (int64_t i = 0; i < nx; i++) dx[i] = rdx[i] = pre;
    for (int64_t i = 0; i < nw; i++) dw[i] = rdw[i] = pre;
    for (int64_t i = 0; i < d.k; i++) db[i] = rdb[i] = pre;
    ref_conv(ry, rdx, rdw, rdb, dy, x, w, cc->bias ? b : NULL, &d);
    size_t wsb = hsi_conv_workspace_bytes(&d, f32 ? 4 : 8);
    void *ws = malloc(wsb);
    memset(ws, 0xFF, wsb); /* NaN everywhere: an arena reused from other layers */
    if (f32) {
        float *fx = to_f32(x, nx), *fw = to_f32(w, nw), *fb = to_f32(b, d.k),
              *fdy = to_f32(dy, ny), *fy = to_f32(y, ny), *fdx = to_f32(dx, nx),
              *fdw = to_f32(dw, nw), *fdb = to_f32(db, d.k);
        hsi_conv_forward_f32(fy, fx, fw, cc->bias ? fb : NULL, &d, ws);
        memset(ws, 0xFF, wsb);
        hsi_conv_backward_f32(fdx, fdw, fdb, fdy, fx, fw, &d, ws);
        from_f32(y, fy, ny), from_f32(dx, fdx, nx), from_f32(dw, fdw, nw), from_f32(db, fdb, d.k);
        /* the direct kernels' overwrite mode (a fresh gradient buffer): dx
         * starts as NaN and comes out as the accumulated one minus the prefill */
        if (hsi_conv_direct_usable(&d)) {
            for (int64_t i = 0; i < nx; i++) fdx[i] = NAN;
            memset(ws, 0xFF, wsb);
            hsi_conv_direct_backward(fdx, NULL, NULL, fdy, fx, fw, &d, ws, 0);
            double *dx2 = dalloc(nx);
            from_f32(dx2, fdx, nx);
            for (int64_t i = 0; i < nx; i++) dx2[i] += pre;
            CHECK_CLOSE("dx overwrite", dx2, rdx, nx, 1e-4, 1e-4);
            free(dx2);
        }
        /* the weight gradient alone (a first layer) comes out the same */
        for (int64_t i = 0; i < nw; i++) fdw[i] = (float)pre;
        memset(ws, 0xFF, wsb);
        hsi_conv_backward_f32(NULL, fdw, NULL, fdy, fx, fw, &d, ws);
        double *dw2 = dalloc(nw);
        from_f32(dw2, fdw, nw);
        CHECK_CLOSE("dw alone", dw2, rdw, nw, 1e-3, 1e-4);
        free(dw2);
        free(fx), free(fw), free(fb), free(fdy), free(fy), free(fdx), free(fdw), free(fdb);
        /* the inputs were rounded to float: compare with float-sized tolerance */
        CHECK_CLOSE("y", y, ry, ny, 1e-4, 1e-4);
        CHECK_CLOSE("dx", dx, rdx, nx, 1e-4, 1e-4);
        CHECK_CLOSE("dw", dw, rdw, nw, 1e-3, 1e-4);
        CHECK_CLOSE("db", db, rdb, d.k, 1e-3, 1e-4);
    } else {
        hsi_conv_forward_f64(y, x, w, cc->bias ? b : NULL, &d, ws);
        memset(ws, 0xFF, wsb);
        hsi_conv_backward_f64(dx, dw, db, dy, x, w, &d, ws);
        CHECK_CLOSE("y", y, ry, ny, 1e-12, 1e-12);
        CHECK_CLOSE("dx", dx, rdx, nx, 1e-12, 1e-12);
        CHECK_CLOSE("dw", dw, rdw, nw, 1e-11, 1e-12);
        CHECK_CLOSE("db", db, rdb, d.k, 1e-11, 1e-12);
        /* NULL gradients: the others come out the same */
        double *dw2 = dalloc(nw);
        for (int64_t i = 0; i < nw; i++) dw2[i] = pre;
        hsi_conv_backward_f64(NULL, dw2, NULL, dy, x, w, &d, ws);
        CHECK_CLOSE("dw alone", dw2, rdw, nw, 1e-11, 1e-12);
        free(dw2);
    }
    free(ws);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    free(ry), free(rdx), free(rdw), free(rdb);
}

static void test_conv_vs_definition_f64(void)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
        run_conv_vs_ref(&conv_cases[i], 0);
}

/* Runs cases n_cases under every float implementation (the direct kernels
 * take the stride-1 cases on CPUs that have AVX2, with Winograd for 2-D 3x3
 * pad 0/1 in AUTO; im2col + gemm takes every case), the direct and
 * Winograd ones with each register-tile width: AVX-512 where the CPU has
 * it (the AUTO width), then AVX2. */
static void run_conv_every_impl(const conv_case *cases, size_t n_cases)
{
    static const hsi_conv_impl impls[3] = {HSI_CONV_IMPL_AUTO, HSI_CONV_IMPL_DIRECT,
                                           HSI_CONV_IMPL_GEMM};
    static const hsi_conv_simd simds[2] = {HSI_CONV_SIMD_AUTO, HSI_CONV_SIMD_AVX2};
    for (int sv = 0; sv < 2; sv++)
        for (int impl = 0; impl < 3; impl++) {
            if (sv == 1 && impls[impl] == HSI_CONV_IMPL_GEMM) continue; /* no tiles */
            hsi_conv_set_simd(simds[sv]);
            hsi_conv_set_impl(impls[impl]);
            for (size_t i = 0; i < n_cases; i++) run_conv_vs_ref(&cases[i], 1);
        }
    hsi_conv_set_impl(HSI_CONV_IMPL_AUTO);
    hsi_conv_set_simd(HSI_CONV_SIMD_AUTO);
}

static void test_conv_vs_definition_f32(void)
{
    run_conv_every_impl(conv_cases, sizeof conv_cases / sizeof *conv_cases);
}

/* Shapes at the edges of the AVX-512 tiles (kernels/tiles512.h), each
 * against the definition under every implementation and both tile widths:
 * 32-channel blocks over 12-position tiles and 16-channel blocks over 24
 * (K = 20: one 32 block; K = 40 and 36: a 32 and a 16 block; rows of 27,
 * 29, 30 and 31 outputs: full tiles and remainders), the narrow pair tile
 * with an odd remainder (it reads one input past the last position: W = 29
 * and 31 outputs, dx of C = 2 and 3), weight-gradient rows not a multiple
 * of 8 (81, 216, 2 x 18, 3) with kpad 32 and 48, and the Winograd products
 * with 16- and 48-wide channel blocks and 3 samples' tiles. Without
 * AVX-512 both passes run the AVX2 tiles. */
static void test_conv_tile_edges(void)
{
    static const conv_case cases[] = {
        {3, 2, 3, 20, {5, 9, 30}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1},
        {3, 2, 12, 40, {4, 7, 27}, {2, 3, 3}, {1, 1, 1}, {0, 1, 1}, 1},
        {3, 2, 2, 5, {3, 4, 31}, {1, 2, 3}, {1, 1, 1}, {0, 0, 0}, 1},
        {3, 2, 3, 16, {4, 5, 29}, {2, 2, 1}, {1, 1, 1}, {0, 0, 0}, 0},
        {2, 3, 7, 9, {11, 29}, {3, 3}, {1, 1}, {1, 1}, 1},
        {2, 2, 40, 36, {10, 13}, {3, 3}, {1, 1}, {0, 0}, 1},
        {3, 2, 1, 17, {2, 3, 20}, {1, 1, 3}, {1, 1, 1}, {0, 0, 0}, 1}, /* 3 dw rows, K 17 */
    };
    if (!hsi_conv_uses_avx512())
        fprintf(stderr, "\n    (this CPU has no AVX-512: the AVX2 tiles only) ");
    run_conv_every_impl(cases, sizeof cases / sizeof *cases);
}

/* The four convolutions of hybridsn (30 bands, 25x25 patches; 2 samples, so
 * 2 threads split them) and odd shapes around what its kernels special-case:
 * the narrow tile (<= 8 output channels, forward and dx), output rows in
 * bands of 4 (heights that are not multiples of 4), the weight gradient's
 * position chunks (positions x kpad > 16384 floats, the last chunk short)
 * the 2-D pad-0 dx, and the 3-D Winograd pass (slice by slice, depth taps
 * in the padding left out). Every implementation against the definition in
 * double with the tolerances of run_conv_vs_ref (float inputs; y, dx 1e-4
 * abs + 1e-4 rel; dw, db 1e-3 abs + 1e-4 rel). */
static void test_conv_hybridsn_shapes(void)
{
    static const conv_case cases[] = {
        {3, 2, 1, 8, {30, 25, 25}, {7, 3, 3}, {1, 1, 1}, {0, 0, 0}, 1},
        {3, 2, 8, 16, {24, 23, 23}, {5, 3, 3}, {1, 1, 1}, {0, 0, 0}, 1},
        {3, 2, 16, 32, {20, 21, 21}, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, 1},
        {2, 2, 576, 64, {19, 19}, {3, 3}, {1, 1}, {0, 0}, 1},
        {3, 3, 5, 7, {9, 11, 13}, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, 1}, /* narrow, dx narrow */
        {3, 2, 3, 5, {6, 30, 31}, {3, 2, 3}, {1, 1, 1}, {1, 0, 2}, 0},  /* dw chunks, pads */
        {2, 3, 9, 12, {14, 27}, {3, 3}, {1, 1}, {0, 0}, 1},             /* pad-0 2-D dx */
        {2, 2, 8, 3, {13, 9}, {5, 3}, {1, 1}, {2, 0}, 1},               /* narrow 2-D */
        /* 3-D Winograd: depth and spatial pads, depth taps in the padding at
         * both ends, a depth kernel of 1 and one deeper than the input */
        {3, 2, 5, 6, {3, 8, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, 1},
        {3, 2, 4, 9, {2, 5, 7}, {5, 3, 3}, {1, 1, 1}, {3, 0, 1}, 1},
        {3, 3, 6, 5, {4, 6, 7}, {1, 3, 3}, {1, 1, 1}, {0, 1, 0}, 0},
    };
    char *saved = hsi_test_threads_set("2");
    run_conv_every_impl(cases, sizeof cases / sizeof *cases);
    hsi_test_threads_restore(saved);
}

/* The same cases with the batch split between 1 and 3 threads (BLAS
 * HSI_THREADS, which sizes the workspace slots), both implementations: 1 runs the
 * samples on the caller, 3 splits 2, 3, 20 and 40 samples unevenly and sums
 * per-thread weight-gradient partials. */
static void test_conv_threads(void)
{
    char *saved = hsi_test_threads_set("1");
    static const char *counts[2] = {"1", "3"};
    for (int i = 0; i < 2; i++) {
        setenv("HSI_THREADS", counts[i], 1);
        for (size_t c = 0; c < sizeof conv_cases / sizeof *conv_cases; c++) {
            run_conv_vs_ref(&conv_cases[c], 0);
            hsi_conv_set_impl(HSI_CONV_IMPL_GEMM);
            run_conv_vs_ref(&conv_cases[c], 1);
            hsi_conv_set_impl(HSI_CONV_IMPL_DIRECT);
            run_conv_vs_ref(&conv_cases[c], 1);
            hsi_conv_set_impl(HSI_CONV_IMPL_AUTO);
            run_conv_vs_ref(&conv_cases[c], 1);
        }
    }
    hsi_test_threads_restore(saved);
}

/* ----------------------------------------------- conv: finite differences */

typedef struct conv_fd_ctx {
    hsi_conv_dims d;
    double *x, *w, *b, *y, *r;
    int64_t ny;
    void *ws;
} conv_fd_ctx;

static double conv_loss(void *p)
{
    conv_fd_ctx *c = p;
    hsi_conv_forward_f64(c->y, c->x, c->w, c->b, &c->d, c->ws);
    return dot(c->y, c->r, c->ny);
}

static void test_conv_gradcheck(void)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
        const conv_case *cc = &conv_cases[i];
        if (cc->n * cc->c * cc->in[0] * cc->in[1] > 20000) continue; /* the big ones: above */
        conv_fd_ctx c;
        HSI_CHECK_OK(hsi_conv_dims_init(&c.d, cc->nd, cc->n, cc->c, cc->k, cc->in, cc->ker,
                                        cc->stride, cc->pad));
        geo3 g = geo_from(c.d.nd, c.d.in, c.d.ker, c.d.stride, c.d.pad, c.d.out);
        int64_t nx = c.d.n * c.d.c * g.in_sp, nw = c.d.k * c.d.c * g.ker_sp;
        c.ny = c.d.n * c.d.k * g.out_sp;
        c.x = dalloc(nx), c.w = dalloc(nw), c.b = cc->bias ? dalloc(c.d.k) : NULL;
        c.y = dalloc(c.ny), c.r = dalloc(c.ny);
        fill_rand(c.x, nx, 1), fill_rand(c.w, nw, 0.5), fill_rand(c.r, c.ny, 1);
        if (c.b) fill_rand(c.b, c.d.k, 1);
        c.ws = malloc(hsi_conv_workspace_bytes(&c.d, 8));
        double *dx = dalloc(nx), *dw = dalloc(nw), *db = dalloc(c.d.k);
        hsi_conv_backward_f64(dx, dw, db, c.r, c.x, c.w, &c.d, c.ws);
        bad += fd_check("conv x", c.x, nx, dx, conv_loss, &c);
        bad += fd_check("conv w", c.w, nw, dw, conv_loss, &c);
        if (c.b) bad += fd_check("conv b", c.b, c.d.k, db, conv_loss, &c);
        free(dx), free(dw), free(db), free(c.ws);
        free(c.x), free(c.w), free(c.b), free(c.y), free(c.r);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---------------------------------------------------- conv: PyTorch */

static void run_conv_fixture(const char *name)
{
    fx_file fx;
    if (fx_load(&fx, name) != 0) {
        CU_FAIL("fixture missing");
        return;
    }
    const int32_t *cfg = fx_i32(&fx, "cfg");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    int nd = cfg[0], has_b = cfg[4];
    const int *in = cfg + 5, *ker = in + nd, *stride = ker + nd, *pad = stride + nd;
    hsi_conv_dims d;
    HSI_CHECK_OK(hsi_conv_dims_init(&d, nd, cfg[1], cfg[2], cfg[3], in, ker, stride, pad));
    int64_t nx, nw, ny, nb = d.k;
    double *x = fx_f64(&fx, "x", &nx), *w = fx_f64(&fx, "w", &nw), *ty = fx_f64(&fx, "y", &ny);
    double *dy = fx_f64(&fx, "dy", NULL), *tdx = fx_f64(&fx, "dx", NULL),
           *tdw = fx_f64(&fx, "dw", NULL);
    double *b = has_b ? fx_f64(&fx, "b", NULL) : NULL, *tdb = has_b ? fx_f64(&fx, "db", NULL) : NULL;
    geo3 g = geo_from(nd, d.in, d.ker, d.stride, d.pad, d.out);
    CU_ASSERT_EQUAL_FATAL(ny, d.n * d.k * g.out_sp); /* PyTorch's output size = ours */
    for (int f32 = 0; f32 < 2; f32++) {
        double *y = dalloc(ny), *dx = dalloc(nx), *dw = dalloc(nw), *db = dalloc(nb);
        void *ws = malloc(hsi_conv_workspace_bytes(&d, f32 ? 4 : 8));
        if (f32) {
            float *fx_ = to_f32(x, nx), *fw = to_f32(w, nw), *fb = to_f32(b, nb),
                  *fdy = to_f32(dy, ny), *fy = to_f32(y, ny), *fdx = to_f32(dx, nx),
                  *fdw = to_f32(dw, nw), *fdb = to_f32(db, nb);
            hsi_conv_forward_f32(fy, fx_, fw, fb, &d, ws);
            hsi_conv_backward_f32(fdx, fdw, has_b ? fdb : NULL, fdy, fx_, fw, &d, ws);
            from_f32(y, fy, ny), from_f32(dx, fdx, nx), from_f32(dw, fdw, nw);
            from_f32(db, fdb, nb);
            free(fx_), free(fw), free(fb), free(fdy), free(fy), free(fdx), free(fdw), free(fdb);
        } else {
            hsi_conv_forward_f64(y, x, w, b, &d, ws);
            hsi_conv_backward_f64(dx, dw, has_b ? db : NULL, dy, x, w, &d, ws);
        }
        /* tolerance: float32 sums of up to C*k products (PyTorch's own rounding) */
        CHECK_CLOSE(name, y, ty, ny, 2e-5, 2e-5);
        CHECK_CLOSE(name, dx, tdx, nx, 2e-5, 2e-5);
        CHECK_CLOSE(name, dw, tdw, nw, 1e-4, 2e-5);
        if (has_b) CHECK_CLOSE(name, db, tdb, nb, 1e-4, 2e-5);
        free(ws), free(y), free(dx), free(dw), free(db);
    }
    free(x), free(w), free(ty), free(dy), free(tdx), free(tdw), free(b), free(tdb);
    fx_free(&fx);
}

static void test_conv_pytorch(void)
{
    run_conv_fixture("conv2d_pad1");
    run_conv_fixture("conv2d_stride");
    run_conv_fixture("conv2d_k5_nobias");
    run_conv_fixture("conv2d_cnn2d_like");
    run_conv_fixture("conv3d_mixed");
    run_conv_fixture("conv3d_hybridsn_like");
    run_conv_fixture("conv2d_nhwc_stride");
    run_conv_fixture("conv3d_nhwc_mixed");
}

/* ------------------------------------------------------------- pooling */

typedef struct pool_case {
    hsi_pool_kind kind;
    int nd, n, c, in[3], ker[3], stride[3], pad[3];
} pool_case;

static const pool_case pool_cases[] = {
    {HSI_POOL_MAX, 2, 2, 3, {11, 11}, {2, 2}, {2, 2}, {0, 0}}, /* the unrolled path */
    {HSI_POOL_MAX, 2, 2, 3, {8, 6}, {2, 2}, {2, 2}, {0, 0}},
    {HSI_POOL_MAX, 2, 2, 2, {7, 6}, {3, 3}, {2, 2}, {1, 1}},
    {HSI_POOL_MAX, 2, 1, 2, {5, 7}, {3, 2}, {1, 3}, {1, 0}},
    {HSI_POOL_MAX, 3, 2, 2, {5, 4, 6}, {2, 2, 3}, {2, 1, 2}, {1, 0, 1}},
    {HSI_POOL_AVG, 2, 2, 3, {11, 11}, {2, 2}, {2, 2}, {0, 0}},
    {HSI_POOL_AVG, 2, 2, 2, {7, 6}, {3, 3}, {2, 2}, {1, 1}},
    {HSI_POOL_AVG, 3, 2, 2, {5, 4, 6}, {3, 2, 2}, {1, 2, 2}, {1, 1, 0}},
};

static void test_pool_vs_definition(void)
{
    for (size_t ci = 0; ci < sizeof pool_cases / sizeof *pool_cases; ci++) {
        const pool_case *pc = &pool_cases[ci];
        hsi_pool_dims d;
        HSI_CHECK_OK(hsi_pool_dims_init(&d, pc->kind, pc->nd, pc->n, pc->c, pc->in, pc->ker,
                                        pc->stride, pc->pad));
        geo3 g = geo_from(d.nd, d.in, d.ker, d.stride, d.pad, d.out);
        int64_t nx = d.n * d.c * g.in_sp, ny = d.n * d.c * g.out_sp;
        double *x = dalloc(nx), *dy = dalloc(ny), *y = dalloc(ny), *ry = dalloc(ny);
        double *dx = dalloc(nx), *rdx = dalloc(nx);
        int64_t *ram = calloc((size_t)ny, sizeof(int64_t));
        int32_t *am = calloc((size_t)ny, sizeof(int32_t));
        fill_distinct(x, nx), fill_rand(dy, ny, 1);
        for (int64_t i = 0; i < nx; i++) dx[i] = rdx[i] = -0.5;
        ref_pool(ry, ram, rdx, dy, x, &d);
        int is_max = pc->kind == HSI_POOL_MAX;
        for (int f32 = 0; f32 < 2; f32++) {
            double *ydx = dalloc(nx);
            for (int64_t i = 0; i < nx; i++) ydx[i] = -0.5;
            if (f32) {
                float *fx = to_f32(x, nx), *fy = to_f32(y, ny), *fdy = to_f32(dy, ny),
                      *fdx = to_f32(ydx, nx);
                hsi_pool_forward_f32(fy, is_max ? am : NULL, fx, &d);
                hsi_pool_backward_f32(fdx, fdy, is_max ? am : NULL, &d);
                from_f32(y, fy, ny), from_f32(ydx, fdx, nx);
                free(fx), free(fy), free(fdy), free(fdx);
                CHECK_CLOSE("pool y f32", y, ry, ny, 1e-6, 1e-6);
                CHECK_CLOSE("pool dx f32", ydx, rdx, nx, 1e-6, 1e-6);
            } else {
                hsi_pool_forward_f64(y, is_max ? am : NULL, x, &d);
                hsi_pool_backward_f64(ydx, dy, is_max ? am : NULL, &d);
                CHECK_CLOSE("pool y", y, ry, ny, 1e-14, 1e-14);
                CHECK_CLOSE("pool dx", ydx, rdx, nx, 1e-14, 1e-14);
            }
            if (is_max) {
                int wrong = 0;
                for (int64_t i = 0; i < ny; i++) wrong += am[i] != ram[i];
                CU_ASSERT_EQUAL(wrong, 0);
            }
            free(ydx);
        }
        free(x), free(dy), free(y), free(ry), free(dx), free(rdx), free(ram), free(am);
    }
}

typedef struct pool_fd_ctx {
    hsi_pool_dims d;
    double *x, *y, *r;
    int32_t *am;
    int64_t ny;
} pool_fd_ctx;

static double pool_loss(void *p)
{
    pool_fd_ctx *c = p;
    hsi_pool_forward_f64(c->y, c->d.kind == HSI_POOL_MAX ? c->am : NULL, c->x, &c->d);
    return dot(c->y, c->r, c->ny);
}

static void test_pool_gradcheck(void)
{
    int bad = 0;
    for (size_t ci = 0; ci < sizeof pool_cases / sizeof *pool_cases; ci++) {
        const pool_case *pc = &pool_cases[ci];
        pool_fd_ctx c;
        HSI_CHECK_OK(hsi_pool_dims_init(&c.d, pc->kind, pc->nd, pc->n, pc->c, pc->in, pc->ker,
                                        pc->stride, pc->pad));
        geo3 g = geo_from(c.d.nd, c.d.in, c.d.ker, c.d.stride, c.d.pad, c.d.out);
        int64_t nx = c.d.n * c.d.c * g.in_sp;
        c.ny = c.d.n * c.d.c * g.out_sp;
        c.x = dalloc(nx), c.y = dalloc(c.ny), c.r = dalloc(c.ny);
        c.am = calloc((size_t)c.ny, sizeof(int32_t));
        fill_distinct(c.x, nx), fill_rand(c.r, c.ny, 1);
        double *dx = dalloc(nx);
        pool_loss(&c); /* argmax for the backward */
        hsi_pool_backward_f64(dx, c.r, c.am, &c.d);
        bad += fd_check("pool x", c.x, nx, dx, pool_loss, &c);
        free(dx), free(c.x), free(c.y), free(c.r), free(c.am);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void run_pool_fixture(const char *name)
{
    fx_file fx;
    if (fx_load(&fx, name) != 0) {
        CU_FAIL("fixture missing");
        return;
    }
    const int32_t *cfg = fx_i32(&fx, "cfg");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    int nd = cfg[1];
    const int *in = cfg + 4, *ker = in + nd, *stride = ker + nd, *pad = stride + nd;
    hsi_pool_dims d;
    HSI_CHECK_OK(hsi_pool_dims_init(&d, (hsi_pool_kind)cfg[0], nd, cfg[2], cfg[3], in, ker,
                                    stride, pad));
    int64_t nx, ny;
    double *x = fx_f64(&fx, "x", &nx), *ty = fx_f64(&fx, "y", &ny), *dy = fx_f64(&fx, "dy", NULL),
           *tdx = fx_f64(&fx, "dx", NULL);
    const int32_t *tam = fx_i32(&fx, "argmax");
    geo3 g = geo_from(nd, d.in, d.ker, d.stride, d.pad, d.out);
    CU_ASSERT_EQUAL_FATAL(ny, d.n * d.c * g.out_sp);
    int32_t *am = calloc((size_t)ny, sizeof(int32_t));
    float *fx_ = to_f32(x, nx), *fy = calloc((size_t)ny, 4), *fdy = to_f32(dy, ny),
          *fdx = calloc((size_t)nx, 4);
    hsi_pool_forward_f32(fy, tam ? am : NULL, fx_, &d);
    hsi_pool_backward_f32(fdx, fdy, tam ? am : NULL, &d);
    double *y = dalloc(ny), *dx = dalloc(nx);
    from_f32(y, fy, ny), from_f32(dx, fdx, nx);
    CHECK_CLOSE(name, y, ty, ny, 1e-6, 1e-6);
    CHECK_CLOSE(name, dx, tdx, nx, 1e-6, 1e-6);
    if (tam) {
        int wrong = 0;
        for (int64_t i = 0; i < ny; i++) wrong += am[i] != tam[i];
        CU_ASSERT_EQUAL(wrong, 0);
    }
    free(am), free(fx_), free(fy), free(fdy), free(fdx), free(y), free(dx);
    free(x), free(ty), free(dy), free(tdx);
    fx_free(&fx);
}

static void test_pool_pytorch(void)
{
    run_pool_fixture("maxpool2d_2x2");
    run_pool_fixture("maxpool2d_k3s2p1");
    run_pool_fixture("maxpool3d");
    run_pool_fixture("avgpool2d_k3s2p1");
    run_pool_fixture("avgpool3d");
}

static void test_pool_dims_and_nan(void)
{
    hsi_pool_dims d;
    int in[2] = {4, 4}, k2[2] = {2, 2}, s2[2] = {2, 2}, p0[2] = {0, 0}, p2[2] = {2, 0};
    HSI_CHECK_FAILS(hsi_pool_dims_init(&d, HSI_POOL_MAX, 2, 1, 1, in, k2, s2, p2), HSI_ERR_ARG,
                    "padding 2 is more than half the kernel 2");
    int big[2] = {5, 5};
    HSI_CHECK_FAILS(hsi_pool_dims_init(&d, HSI_POOL_AVG, 2, 1, 1, in, big, s2, p0), HSI_ERR_ARG,
                    "kernel 5 is larger");
    HSI_CHECK_FAILS(hsi_pool_dims_init(&d, (hsi_pool_kind)7, 2, 1, 1, in, k2, s2, p0),
                    HSI_ERR_ARG, "found 7");
    /* NaN propagates through max pooling (as in PyTorch), in both paths */
    int k3[2] = {3, 3}, s1[2] = {1, 1};
    for (int path = 0; path < 2; path++) {
        HSI_CHECK_OK(hsi_pool_dims_init(&d, HSI_POOL_MAX, 2, 1, 1, in, path ? k3 : k2,
                                        path ? s1 : s2, p0));
        float x[16], y[4];
        int32_t am[4];
        for (int i = 0; i < 16; i++) x[i] = (float)i;
        int at = path ? 0 : 5; /* first visited (general) / last visited (2x2) */
        x[at] = NAN;
        hsi_pool_forward_f32(y, am, x, &d);
        CU_ASSERT(isnan(y[0]));
        CU_ASSERT_EQUAL(am[0], at);
        CU_ASSERT_EQUAL(y[3], 15.0f);
        CU_ASSERT_EQUAL(am[3], 15);
    }
}

/* Planes split between 3 threads give what one thread gives, bit for bit
 * (max 2x2 fast path, general max, average), on sizes above the threshold
 * where the pass goes multi-threaded. */
static void test_pool_threads(void)
{
    struct { hsi_pool_kind kind; int k, s, p; } cases[] = {
        {HSI_POOL_MAX, 2, 2, 0}, {HSI_POOL_MAX, 3, 2, 1}, {HSI_POOL_AVG, 3, 1, 1}};
    char *saved = hsi_test_threads_set("1");
    int in[2] = {23, 21}, n = 8, c = 20;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int k[2] = {cases[i].k, cases[i].k}, st[2] = {cases[i].s, cases[i].s},
            pd[2] = {cases[i].p, cases[i].p};
        hsi_pool_dims d;
        HSI_CHECK_OK(hsi_pool_dims_init(&d, cases[i].kind, 2, n, c, in, k, st, pd));
        int64_t nx = (int64_t)n * c * in[0] * in[1], ny = (int64_t)n * c * d.out[0] * d.out[1];
        double *dxd = dalloc(nx), *dyd = dalloc(ny);
        fill_rand(dxd, nx, 1), fill_rand(dyd, ny, 1);
        float *x = to_f32(dxd, nx), *dy = to_f32(dyd, ny);
        float *y[2], *dx[2];
        int32_t *am[2];
        for (int t = 0; t < 2; t++) {
            setenv("HSI_THREADS", t ? "3" : "1", 1);
            y[t] = calloc((size_t)ny, 4), dx[t] = calloc((size_t)nx, 4);
            am[t] = calloc((size_t)ny, 4);
            hsi_pool_forward_f32(y[t], am[t], x, &d);
            hsi_pool_backward_f32(dx[t], dy, am[t], &d);
        }
        CU_ASSERT(memcmp(y[0], y[1], 4 * (size_t)ny) == 0);
        CU_ASSERT(memcmp(dx[0], dx[1], 4 * (size_t)nx) == 0);
        if (cases[i].kind == HSI_POOL_MAX) CU_ASSERT(memcmp(am[0], am[1], 4 * (size_t)ny) == 0);
        /* the gradient went somewhere: its sum is dy's sum (max) or dy's sum (avg, full
         * windows inside; padding takes a share) */
        double sx = 0, sy = 0;
        for (int64_t e = 0; e < nx; e++) sx += dx[1][e];
        for (int64_t e = 0; e < ny; e++) sy += dy[e];
        if (cases[i].kind == HSI_POOL_MAX) CU_ASSERT(fabs(sx - sy) < 1e-3 * (1 + fabs(sy)));
        CU_ASSERT(sx != 0);
        for (int t = 0; t < 2; t++) free(y[t]), free(dx[t]), free(am[t]);
        free(x), free(dy), free(dxd), free(dyd);
    }
    hsi_test_threads_restore(saved);
}

/* --------------------------------------------------- global average pool */

static void test_gap(void)
{
    const char *names[2] = {"gap2d", "gap3d"};
    for (int f = 0; f < 2; f++) {
        fx_file fx;
        if (fx_load(&fx, names[f]) != 0) {
            CU_FAIL("fixture missing");
            continue;
        }
        const int32_t *cfg = fx_i32(&fx, "cfg");
        int n = cfg[0], c = cfg[1];
        int64_t s = cfg[2], nx, ny;
        double *x = fx_f64(&fx, "x", &nx), *ty = fx_f64(&fx, "y", &ny),
               *dy = fx_f64(&fx, "dy", NULL), *tdx = fx_f64(&fx, "dx", NULL);
        CU_ASSERT_EQUAL(nx, n * c * s);
        double *y = dalloc(ny), *dx = dalloc(nx);
        hsi_gap_forward_f64(y, x, n, c, s);
        hsi_gap_backward_f64(dx, dy, n, c, s);
        CHECK_CLOSE(names[f], y, ty, ny, 1e-6, 1e-6);
        CHECK_CLOSE(names[f], dx, tdx, nx, 1e-7, 1e-6);
        float *fx_ = to_f32(x, nx), *fy = calloc((size_t)ny, 4), *fdy = to_f32(dy, ny),
              *fdx = calloc((size_t)nx, 4);
        hsi_gap_forward_f32(fy, fx_, n, c, s);
        hsi_gap_backward_f32(fdx, fdy, n, c, s);
        hsi_gap_backward_f32(fdx, fdy, n, c, s); /* accumulates: twice the gradient */
        from_f32(y, fy, ny), from_f32(dx, fdx, nx);
        for (int64_t i = 0; i < nx; i++) dx[i] *= 0.5;
        CHECK_CLOSE(names[f], y, ty, ny, 1e-6, 1e-6);
        CHECK_CLOSE(names[f], dx, tdx, nx, 1e-7, 1e-6);
        free(fx_), free(fy), free(fdy), free(fdx), free(y), free(dx);
        free(x), free(ty), free(dy), free(tdx);
        fx_free(&fx);
    }
}

/* ---------------------------------------------------------- batch norm */

typedef struct bn_fd_ctx {
    int n, c, training;
    int64_t s, nx;
    double *x, *gamma, *beta, *rm, *rv, *y, *r, eps;
} bn_fd_ctx;

static double bn_loss(void *p)
{
    bn_fd_ctx *b = p;
    /* running statistics are updated by a training forward: work on copies */
    double rm[16], rv[16];
    memcpy(rm, b->rm, (size_t)b->c * sizeof(double));
    memcpy(rv, b->rv, (size_t)b->c * sizeof(double));
    hsi_bn_forward_f64(b->y, NULL, NULL, rm, rv, b->x, b->gamma, b->beta, b->n, b->c, b->s,
                       b->eps, 0.1, b->training);
    return dot(b->y, b->r, b->nx);
}

static void test_bn_gradcheck(void)
{
    struct {
        int n, c;
        int64_t s;
        int training, affine;
    } cases[] = {{4, 3, 6, 1, 1}, {6, 4, 1, 1, 1}, {3, 2, 5, 1, 0}, {4, 3, 6, 0, 1},
                 {2, 2, 7, 0, 0}};
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bn_fd_ctx b;
        memset(&b, 0, sizeof b);
        b.n = cases[i].n, b.c = cases[i].c, b.training = cases[i].training, b.s = cases[i].s;
        b.nx = (int64_t)b.n * b.c * b.s;
        b.eps = 1e-5;
        b.x = dalloc(b.nx), b.y = dalloc(b.nx), b.r = dalloc(b.nx);
        b.rm = dalloc(b.c), b.rv = dalloc(b.c);
        b.gamma = cases[i].affine ? dalloc(b.c) : NULL;
        b.beta = cases[i].affine ? dalloc(b.c) : NULL;
        fill_rand(b.x, b.nx, 2), fill_rand(b.r, b.nx, 1), fill_rand(b.rm, b.c, 0.5);
        for (int k = 0; k < b.c; k++) {
            b.rv[k] = 0.5 + urand();
            if (b.gamma) b.gamma[k] = 0.5 + urand(), b.beta[k] = urand() - 0.5;
        }
        double sm[16], si[16], rm[16], rv[16];
        memcpy(rm, b.rm, (size_t)b.c * sizeof(double));
        memcpy(rv, b.rv, (size_t)b.c * sizeof(double));
        hsi_bn_forward_f64(b.y, sm, si, rm, rv, b.x, b.gamma, b.beta, b.n, b.c, b.s, b.eps, 0.1,
                           b.training);
        if (!b.training)
            for (int k = 0; k < b.c; k++) sm[k] = b.rm[k], si[k] = 1 / sqrt(b.rv[k] + b.eps);
        double *dx = dalloc(b.nx), dg[16] = {0}, dbt[16] = {0};
        hsi_bn_backward_f64(dx, b.gamma ? dg : NULL, b.beta ? dbt : NULL, b.r, b.x, b.gamma, sm,
                            si, b.n, b.c, b.s, b.training);
        bad += fd_check("bn x", b.x, b.nx, dx, bn_loss, &b);
        if (b.gamma) {
            bad += fd_check("bn gamma", b.gamma, b.c, dg, bn_loss, &b);
            bad += fd_check("bn beta", b.beta, b.c, dbt, bn_loss, &b);
        }
        free(dx), free(b.x), free(b.y), free(b.r), free(b.rm), free(b.rv), free(b.gamma),
            free(b.beta);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void run_bn_fixture(const char *name)
{
    fx_file fx;
    if (fx_load(&fx, name) != 0) {
        CU_FAIL("fixture missing");
        return;
    }
    const int32_t *cfg = fx_i32(&fx, "cfg");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    int n = cfg[0], c = cfg[1], training = cfg[3], affine = cfg[4];
    int64_t s = cfg[2], nx;
    double *hyper = fx_f64(&fx, "hyper", NULL);
    double *x = fx_f64(&fx, "x", &nx), *ty = fx_f64(&fx, "y", NULL), *dy = fx_f64(&fx, "dy", NULL),
           *tdx = fx_f64(&fx, "dx", NULL), *rm0 = fx_f64(&fx, "rm0", NULL),
           *rv0 = fx_f64(&fx, "rv0", NULL), *trm = fx_f64(&fx, "rm", NULL),
           *trv = fx_f64(&fx, "rv", NULL);
    double *gamma = affine ? fx_f64(&fx, "gamma", NULL) : NULL,
           *beta = affine ? fx_f64(&fx, "beta", NULL) : NULL,
           *tdg = affine ? fx_f64(&fx, "dgamma", NULL) : NULL,
           *tdb = affine ? fx_f64(&fx, "dbeta", NULL) : NULL;
    CU_ASSERT_EQUAL_FATAL(nx, (int64_t)n * c * s);
    double eps = hyper[0], mom = hyper[1];
    for (int f32 = 0; f32 < 2; f32++) {
        double *y = dalloc(nx), *dx = dalloc(nx), *rm = dalloc(c), *rv = dalloc(c);
        double *sm = dalloc(c), *si = dalloc(c), *dg = dalloc(c), *db = dalloc(c);
        memcpy(rm, rm0, (size_t)c * 8), memcpy(rv, rv0, (size_t)c * 8);
        if (f32) {
            float *fx_ = to_f32(x, nx), *fy = to_f32(y, nx), *fdy = to_f32(dy, nx),
                  *fdx = to_f32(dx, nx), *frm = to_f32(rm, c), *frv = to_f32(rv, c),
                  *fsm = to_f32(sm, c), *fsi = to_f32(si, c), *fg = to_f32(gamma, c),
                  *fb = to_f32(beta, c), *fdg = to_f32(dg, c), *fdb = to_f32(db, c);
            hsi_bn_forward_f32(fy, fsm, fsi, frm, frv, fx_, fg, fb, n, c, s, (float)eps,
                               (float)mom, training);
            if (!training)
                for (int k = 0; k < c; k++)
                    fsm[k] = frm[k], fsi[k] = (float)(1 / sqrt((double)frv[k] + eps));
            hsi_bn_backward_f32(fdx, affine ? fdg : NULL, affine ? fdb : NULL, fdy, fx_, fg, fsm,
                                fsi, n, c, s, training);
            from_f32(y, fy, nx), from_f32(dx, fdx, nx), from_f32(rm, frm, c);
            from_f32(rv, frv, c), from_f32(dg, fdg, c), from_f32(db, fdb, c);
            free(fx_), free(fy), free(fdy), free(fdx), free(frm), free(frv), free(fsm);
            free(fsi), free(fg), free(fb), free(fdg), free(fdb);
        } else {
            hsi_bn_forward_f64(y, sm, si, rm, rv, x, gamma, beta, n, c, s, eps, mom, training);
            if (!training)
                for (int k = 0; k < c; k++) sm[k] = rm[k], si[k] = 1 / sqrt(rv[k] + eps);
            hsi_bn_backward_f64(dx, affine ? dg : NULL, affine ? db : NULL, dy, x, gamma, sm, si,
                                n, c, s, training);
        }
        CHECK_CLOSE(name, y, ty, nx, 2e-5, 2e-5);
        CHECK_CLOSE(name, dx, tdx, nx, 2e-5, 2e-5);
        CHECK_CLOSE(name, rm, trm, c, 1e-5, 1e-5);
        CHECK_CLOSE(name, rv, trv, c, 1e-5, 1e-5);
        if (affine) {
            CHECK_CLOSE(name, dg, tdg, c, 1e-4, 2e-5);
            CHECK_CLOSE(name, db, tdb, c, 1e-4, 2e-5);
        }
        free(y), free(dx), free(rm), free(rv), free(sm), free(si), free(dg), free(db);
    }
    free(hyper), free(x), free(ty), free(dy), free(tdx), free(rm0), free(rv0), free(trm);
    free(trv), free(gamma), free(beta), free(tdg), free(tdb);
    fx_free(&fx);
}

static void test_bn_pytorch(void)
{
    run_bn_fixture("bn1d_train");
    run_bn_fixture("bn2d_train");
    run_bn_fixture("bn2d_train_offset");
    run_bn_fixture("bn2d_train_noaffine");
    run_bn_fixture("bn2d_eval");
    run_bn_fixture("bn3d_train");
}

/* Batch norm + ReLU fused (and channels split between 3 threads) against
 * batch norm on one thread followed by a ReLU done here, in training and
 * eval, affine or not, float and double; and the fused pass on 1 and 3
 * threads bit for bit. The sizes cross the threshold where the pass goes
 * multi-threaded. */
static void test_bn_relu_fused(void)
{
    struct { int n, c; int64_t s; int training, affine; } cases[] = {
        {4, 3, 6, 1, 1}, {16, 8, 600, 1, 1}, {16, 8, 600, 0, 1}, {9, 5, 1500, 1, 0}};
    char *saved = hsi_test_threads_set("1");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = cases[i].n, c = cases[i].c, tr = cases[i].training;
        int64_t sp = cases[i].s, nx = (int64_t)n * c * sp;
        double *x = dalloc(nx), *dy = dalloc(nx), *g = dalloc(c), *b = dalloc(c);
        double *rm = dalloc(c), *rv = dalloc(c), *rm2 = dalloc(c), *rv2 = dalloc(c);
        double *y = dalloc(nx), *y2 = dalloc(nx), *dx = dalloc(nx), *dx2 = dalloc(nx),
               *gm = dalloc(nx);
        double mean[16], istd[16], mean2[16], istd2[16], dg[16] = {0}, db[16] = {0},
               dg2[16] = {0}, db2[16] = {0};
        fill_rand(x, nx, 2), fill_rand(dy, nx, 1), fill_rand(g, c, 1), fill_rand(b, c, 0.5);
        for (int k = 0; k < c; k++) rm[k] = rm2[k] = 0.1 * k, rv[k] = rv2[k] = 1 + 0.2 * k;
        for (int64_t e = 0; e < nx; e++) dx[e] = dx2[e] = 0.25;
        double *gp = cases[i].affine ? g : NULL, *bp = cases[i].affine ? b : NULL;
        if (!tr)
            for (int k = 0; k < c; k++) mean[k] = mean2[k] = rm[k],
                                        istd[k] = istd2[k] = 1 / sqrt(rv[k] + 1e-5);
        /* reference: one thread, separate ReLU */
        setenv("HSI_THREADS", "1", 1);
        hsi_bn_forward_f64(y, tr ? mean : NULL, tr ? istd : NULL, rm, rv, x, gp, bp, n, c, sp,
                           1e-5, 0.1, tr);
        for (int64_t e = 0; e < nx; e++) y[e] = y[e] > 0 ? y[e] : 0;
        for (int64_t e = 0; e < nx; e++) gm[e] = y[e] > 0 ? dy[e] : 0;
        hsi_bn_backward_f64(dx, gp ? dg : NULL, bp ? db : NULL, gm, x, gp, mean, istd, n, c, sp,
                            tr);
        /* fused, three threads */
        setenv("HSI_THREADS", "3", 1);
        hsi_bn_relu_forward_f64(y2, tr ? mean2 : NULL, tr ? istd2 : NULL, rm2, rv2, x, gp, bp, n,
                                c, sp, 1e-5, 0.1, tr);
        hsi_bn_relu_backward_f64(dx2, gp ? dg2 : NULL, bp ? db2 : NULL, dy, x, y2, gp, mean2,
                                 istd2, n, c, sp, tr, 1);
        /* forward: the same arithmetic; backward: the masked sums may contract
         * to FMA differently than the unmasked loop, so a rounding-level tolerance */
        CU_ASSERT(memcmp(y, y2, sizeof *y * (size_t)nx) == 0);
        CU_ASSERT(memcmp(rm, rm2, sizeof *rm * (size_t)c) == 0);
        CU_ASSERT(memcmp(rv, rv2, sizeof *rv * (size_t)c) == 0);
        CHECK_CLOSE("dx", dx2, dx, nx, 1e-13, 1e-12);
        CHECK_CLOSE("dgamma", dg2, dg, c, 1e-13, 1e-12);
        CHECK_CLOSE("dbeta", db2, db, c, 1e-13, 1e-12);
        /* fused on one thread = fused on three, bit for bit */
        double *dx3 = dalloc(nx), dg3[16] = {0}, db3[16] = {0};
        for (int64_t e = 0; e < nx; e++) dx3[e] = 0.25;
        setenv("HSI_THREADS", "1", 1);
        hsi_bn_relu_backward_f64(dx3, gp ? dg3 : NULL, bp ? db3 : NULL, dy, x, y2, gp, mean2,
                                 istd2, n, c, sp, tr, 1);
        CU_ASSERT(memcmp(dx3, dx2, sizeof *dx * (size_t)nx) == 0);
        /* overwrite mode: dx3 = NaN first, result = the accumulated one minus the 0.25 */
        for (int64_t e = 0; e < nx; e++) dx3[e] = NAN;
        hsi_bn_relu_backward_f64(dx3, NULL, NULL, dy, x, y2, gp, mean2, istd2, n, c, sp, tr, 0);
        for (int64_t e = 0; e < nx; e++) dx3[e] += 0.25;
        CHECK_CLOSE("dx overwrite", dx3, dx2, nx, 1e-13, 1e-12);
        CU_ASSERT(memcmp(dg3, dg2, sizeof dg) == 0 && memcmp(db3, db2, sizeof db) == 0);
        free(dx3);
        /* float: fused on three threads = separate on one */
        float *fx = to_f32(x, nx), *fdy = to_f32(dy, nx), *fg = to_f32(g, c), *fb = to_f32(b, c);
        float *fy = calloc((size_t)nx, 4), *fy2 = calloc((size_t)nx, 4), *fgm = calloc((size_t)nx, 4),
              *fdx = calloc((size_t)nx, 4), *fdx2 = calloc((size_t)nx, 4);
        float frm[16], frv[16], fm[16], fs[16], fm2[16], fs2[16];
        for (int k = 0; k < c; k++) frm[k] = (float)(0.1 * k), frv[k] = (float)(1 + 0.2 * k),
                                    fm[k] = fm2[k] = frm[k],
                                    fs[k] = fs2[k] = (float)(1 / sqrt(frv[k] + 1e-5));
        float *fgp = cases[i].affine ? fg : NULL, *fbp = cases[i].affine ? fb : NULL;
        setenv("HSI_THREADS", "1", 1);
        hsi_bn_forward_f32(fy, tr ? fm : NULL, tr ? fs : NULL, frm, frv, fx, fgp, fbp, n, c, sp,
                           1e-5f, 0.1f, 0);
        for (int64_t e = 0; e < nx; e++) fy[e] = fy[e] > 0 ? fy[e] : 0;
        for (int64_t e = 0; e < nx; e++) fgm[e] = fy[e] > 0 ? fdy[e] : 0;
        hsi_bn_backward_f32(fdx, NULL, NULL, fgm, fx, fgp, fm, fs, n, c, sp, tr);
        setenv("HSI_THREADS", "3", 1);
        hsi_bn_relu_forward_f32(fy2, tr ? fm2 : NULL, tr ? fs2 : NULL, frm, frv, fx, fgp, fbp, n,
                                c, sp, 1e-5f, 0.1f, 0);
        hsi_bn_relu_backward_f32(fdx2, NULL, NULL, fdy, fx, fy2, fgp, fm2, fs2, n, c, sp, tr, 1);
        CU_ASSERT(memcmp(fy, fy2, 4 * (size_t)nx) == 0);
        double *a1 = dalloc(nx), *a2 = dalloc(nx);
        from_f32(a1, fdx, nx), from_f32(a2, fdx2, nx);
        CHECK_CLOSE("dx f32", a2, a1, nx, 1e-6, 1e-5);
        free(a1), free(a2);
        /* and the ReLU did something: some outputs are clamped, some not */
        int64_t zeros = 0;
        for (int64_t e = 0; e < nx; e++) zeros += y2[e] == 0;
        CU_ASSERT(zeros > 0 && zeros < nx);
        free(fx), free(fdy), free(fg), free(fb), free(fy), free(fy2), free(fgm), free(fdx),
            free(fdx2);
        free(x), free(dy), free(g), free(b), free(rm), free(rv), free(rm2), free(rv2), free(y),
            free(y2), free(dx), free(dx2), free(gm);
    }
    hsi_test_threads_restore(saved);
}

/* models/cuda_index.h (the GPU's im2col and col2im in 32 bits with
 * fastdivs) against loops over the convolution's axes: every column
 * element's source in x, and every x element's gathered sum of columns
 * (small integers, so the sums are exact), over 2-D and 3-D geometries
 * with strides 1-3 and paddings 0-2. */
static void im2col_case(int nd, const int *in, const int *ker, const int *str, const int *pad)
{
    const int nc = 2, C = 3;
    hsi_conv_dims d;
    hsi_im2col_geom g = {0};
    HSI_CHECK_OK(hsi_conv_dims_init(&d, nd, nc, C, 1, in, ker, str, pad));
    CU_ASSERT_EQUAL_FATAL(hsi_im2col_geom_make(&g, &d, nc), 1);
    int o = nd == 3 ? 0 : -1;
    int ID = o < 0 ? 1 : in[0], KD = o < 0 ? 1 : ker[0], SD = o < 0 ? 1 : str[0], PD = o < 0 ? 0 : pad[0];
    int OD = o < 0 ? 1 : d.out[0], IH = in[o + 1], KH = ker[o + 1], SH = str[o + 1], PH = pad[o + 1];
    int OH = d.out[o + 1], IW = in[o + 2], KW = ker[o + 2], SW = str[o + 2], PW = pad[o + 2];
    int OW = d.out[o + 2];
    int64_t CK = (int64_t)C * KD * KH * KW, OS = (int64_t)OD * OH * OW, IS = (int64_t)ID * IH * IW;
    int64_t ncol = nc * CK * OS, nx = nc * C * IS, bad = 0;
    float *dcol = malloc(sizeof(float) * (size_t)ncol);
    double *want = calloc((size_t)nx, sizeof(double));
    for (int64_t i = 0; i < ncol; i++) dcol[i] = (float)((i * 7) % 13 - 6);
    for (int n = 0; n < nc; n++)
        for (int c = 0; c < C; c++)
            for (int kd = 0; kd < KD; kd++)
                for (int kh = 0; kh < KH; kh++)
                    for (int kw = 0; kw < KW; kw++)
                        for (int od = 0; od < OD; od++)
                            for (int oh = 0; oh < OH; oh++)
                                for (int ow = 0; ow < OW; ow++) {
                                    int64_t ck = ((c * KD + kd) * KH + kh) * KW + kw;
                                    int64_t col = (n * CK + ck) * OS + (od * OH + oh) * OW + ow;
                                    int iz = od * SD - PD + kd, iy = oh * SH - PH + kh, ix = ow * SW - PW + kw;
                                    int64_t src = -1;
                                    if (iz >= 0 && iz < ID && iy >= 0 && iy < IH && ix >= 0 && ix < IW) {
                                        src = ((int64_t)(n * C + c) * ID + iz) * IH * IW + (int64_t)iy * IW + ix;
                                        want[src] += dcol[col];
                                    }
                                    bad += hsi_im2col_src(&g, (uint32_t)col) != src;
                                }
    for (int64_t i = 0; i < nx; i++) bad += hsi_col2im_sum(&g, dcol, (uint32_t)i) != (float)want[i];
    if (bad) fprintf(stderr, "\n  im2col index (%d-D): %lld of %lld elements differ\n", nd, (long long)bad,
                     (long long)(ncol + nx));
    CU_ASSERT_EQUAL(bad, 0);
    free(dcol);
    free(want);
}

static void test_im2col_index(void)
{
    int a2[2] = {9, 8}, k3[2] = {3, 3}, s1[2] = {1, 1}, p1[2] = {1, 1}, s2[2] = {2, 2}, p0[2] = {0, 0};
    im2col_case(2, a2, k3, s1, p1);
    im2col_case(2, a2, k3, s2, p0);
    int b2[2] = {5, 7}, k1[2] = {1, 1}, s3[2] = {3, 3}, k5[2] = {5, 2}, q2[2] = {2, 1}, t2[2] = {3, 1};
    im2col_case(2, b2, k1, s3, p0);
    im2col_case(2, b2, k5, t2, q2);
    int a3[3] = {10, 7, 6}, k73[3] = {7, 3, 3}, u1[3] = {1, 1, 1}, q3[3] = {0, 1, 0}, t3[3] = {2, 1, 2};
    im2col_case(3, a3, k73, u1, q3); /* HybridSN's first layer, smaller */
    im2col_case(3, a3, k73, t3, q3);
    int b3[3] = {6, 5, 4}, k2[3] = {2, 2, 2}, v3[3] = {3, 2, 1}, w1[3] = {1, 1, 1};
    im2col_case(3, b3, k2, v3, w1);
    /* beyond 32 bits: the 64-bit kernels' case */
    hsi_conv_dims d;
    hsi_im2col_geom g = {0};
    int big[2] = {4096, 4096};
    HSI_CHECK_OK(hsi_conv_dims_init(&d, 2, 16, 16, 1, big, k3, s1, p1));
    CU_ASSERT_EQUAL(hsi_im2col_geom_make(&g, &d, 16), 0);
    CU_ASSERT_EQUAL(hsi_im2col_geom_make(&g, &d, 1), 0); /* 16 * 9 * 4096^2 columns per sample */
}

/* cuda_index.h's pooling arithmetic against the definition: every output's
 * window (o * stride - pad, clipped) and, per input element, the first and
 * last output whose window holds it, found by trying every output. */
static void pool_index_case(int nd, const int *in, const int *ker, const int *str, const int *pad)
{
    hsi_pool_dims d;
    hsi_pool_geom32 g = {0};
    HSI_CHECK_OK(hsi_pool_dims_init(&d, HSI_POOL_MAX, nd, 2, 3, in, ker, str, pad));
    CU_ASSERT_EQUAL_FATAL(hsi_pool_geom32_make(&g, &d), 1);
    int o = nd == 3 ? 0 : -1, ax_in[3], ax_k[3], ax_s[3], ax_p[3], ax_o[3];
    for (int a = 0; a < 3; a++) {
        int k = o + a;
        ax_in[a] = k < 0 ? 1 : in[k], ax_k[a] = k < 0 ? 1 : ker[k], ax_s[a] = k < 0 ? 1 : str[k];
        ax_p[a] = k < 0 ? 0 : pad[k], ax_o[a] = k < 0 ? 1 : d.out[k];
    }
    int64_t planes = 6, OS = (int64_t)ax_o[0] * ax_o[1] * ax_o[2], IS = (int64_t)ax_in[0] * ax_in[1] * ax_in[2], bad = 0;
    for (int64_t i = 0; i < planes * OS; i++) {
        int32_t lo[3], hi[3];
        uint32_t p = hsi_pool_window(&g, (uint32_t)i, lo, hi);
        int64_t r = i % OS, out[3] = {r / (ax_o[1] * ax_o[2]), r / ax_o[2] % ax_o[1], r % ax_o[2]};
        bad += p != (uint32_t)(i / OS);
        for (int a = 0; a < 3; a++) {
            int b = (int)out[a] * ax_s[a] - ax_p[a], e = b + ax_k[a];
            bad += lo[a] != (b < 0 ? 0 : b) || hi[a] != (e > ax_in[a] ? ax_in[a] : e);
        }
    }
    for (int64_t i = 0; i < planes * IS; i++) {
        int32_t q, lo[3], hi[3];
        uint32_t p = hsi_pool_outs(&g, (uint32_t)i, &q, lo, hi);
        int64_t r = i % IS, at[3] = {r / (ax_in[1] * ax_in[2]), r / ax_in[2] % ax_in[1], r % ax_in[2]};
        bad += p != (uint32_t)(i / IS) || q != (int32_t)r;
        for (int a = 0; a < 3; a++) {
            int first = -1, last = -2;
            for (int ox = 0; ox < ax_o[a]; ox++) {
                int b = ox * ax_s[a] - ax_p[a];
                if (at[a] >= b && at[a] < b + ax_k[a]) {
                    if (first < 0) first = ox;
                    last = ox;
                }
            }
            /* empty: any lo > hi will do */
            bad += first < 0 ? !(lo[a] > hi[a]) : (lo[a] != first || hi[a] != last);
        }
    }
    if (bad) fprintf(stderr, "\n  pool index (%d-D): %lld mismatches\n", nd, (long long)bad);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_pool_index(void)
{
    int a2[2] = {11, 11}, k2[2] = {2, 2}, z2[2] = {0, 0}, b2[2] = {9, 7}, k3[2] = {3, 3}, s1[2] = {1, 1};
    int p1[2] = {1, 1}, s3[2] = {3, 2}, k1[2] = {1, 1};
    pool_index_case(2, a2, k2, k2, z2); /* cnn2d's */
    pool_index_case(2, b2, k3, s1, p1);
    pool_index_case(2, b2, k3, s3, p1);
    pool_index_case(2, b2, k1, s3, z2);
    int a3[3] = {7, 6, 5}, k33[3] = {3, 2, 3}, s33[3] = {2, 2, 1}, p33[3] = {1, 0, 1};
    pool_index_case(3, a3, k33, s33, p33);
}

HSI_SUITE(layers_conv, 0, {"dims and errors", test_conv_dims},
          {"GPU im2col/col2im index arithmetic vs loops", test_im2col_index},
          {"GPU pooling index arithmetic vs the definition", test_pool_index},
          {"f64 vs direct definition", test_conv_vs_definition_f64},
          {"f32 vs direct definition", test_conv_vs_definition_f32},
          {"1 and 3 threads vs direct definition", test_conv_threads},
          {"hybridsn shapes, every implementation vs definition", test_conv_hybridsn_shapes},
          {"AVX-512 tile edges, both tile widths vs definition", test_conv_tile_edges},
          {"finite differences", test_conv_gradcheck}, {"PyTorch fixtures", test_conv_pytorch})
HSI_SUITE(layers_pool, 0, {"vs definition (f32, f64)", test_pool_vs_definition},
          {"finite differences", test_pool_gradcheck}, {"PyTorch fixtures", test_pool_pytorch},
          {"dims errors and NaN", test_pool_dims_and_nan}, {"global average pool", test_gap},
          {"3 threads = 1 thread", test_pool_threads})
HSI_SUITE(layers_bn, 0, {"finite differences", test_bn_gradcheck},
          {"PyTorch fixtures", test_bn_pytorch},
          {"fused ReLU and threads = separate", test_bn_relu_fused})
