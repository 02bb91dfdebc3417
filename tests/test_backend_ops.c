/* test_backend_ops.c — one table of the preprocessing ops (statistics, the
 * PCA covariance, the fused pass with and without PCA, patches), each driven through its public
 * dispatching entry point on every backend there is and compared with an
 * independent reference (the naive double implementations) on every
 * layout: contiguous, unaligned, byte-swapped, pixel-major, column-major
 * and reversed views of every real dtype (as ggml's test-backend-ops);
 * complex cubes refused. Suite
 * "backend_ops" runs the table on the CPU everywhere; "cuda_backend_ops"
 * runs the same table on the GPU, host cubes and cubes already in device
 * memory (inactive without a device). Also the backend rule itself
 * (core.h's hsi_device_pick) and every `--device cuda` entry point of the
 * CLI refusing when there is no device. Not the CUDA layers' parity
 * (test_cuda.c). */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "kernels/bands.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"
#include "kernels/stats.h"
#include "pipeline/patches.h"

/* ------------------------------------------------------------ layouts */

enum { BSQ, BIL, BIP, COLMAJOR, N_IL };

typedef struct layout {
    hsi_dtype dt;
    int il, swapped, lead; /* lead 1: elements at odd addresses */
    int reversed;          /* lines stored last to first (negative stride) */
} layout;

static uint64_t g_rng;
static double urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}

/* A (B, L, S) cube in layout `lay`: integers 0..3999 or normals*50+300;
 * every 13th element of band 2 is 0 (the ignore value used here). */
static hsi_view make_cube(int64_t B, int64_t L, int64_t S, const layout *lay, uint64_t seed)
{
    const int64_t e = (int64_t)hsi_dtype_size(lay->dt);
    hsi_buffer *buf = NULL;
    HSI_CHECK_OK(hsi_buffer_alloc(&buf, (size_t)(B * L * S * e + lay->lead), HSI_BUF_HOST));
    int64_t st[3];
    if (lay->il == BSQ) st[0] = L * S * e, st[1] = S * e, st[2] = e;
    else if (lay->il == BIL) st[0] = S * e, st[1] = B * S * e, st[2] = e;
    else if (lay->il == BIP) st[0] = e, st[1] = S * B * e, st[2] = B * e;
    else st[0] = L * S * e, st[1] = e, st[2] = L * e;
    int64_t off = lay->lead;
    if (lay->reversed) {
        off += (L - 1) * st[1];
        st[1] = -st[1];
    }
    g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++)
            for (int64_t s = 0; s < S; s++) {
                /* integers: 0..3999, within 8 bits -100..155 (int8: -100..27) */
                double v = hsi_dtype_is_float(lay->dt) ? 300 + 50 * (urand() + urand() + urand() - 1.5)
                           : lay->dt == HSI_U8 ? floor(urand() * 256)
                           : lay->dt == HSI_I8 ? floor(urand() * 228) - 100
                                               : floor(urand() * 4000);
                if (b == 2 && (l * S + s) % 13 == 0) v = 0;
                char *p = (char *)buf->data + off + b * st[0] + l * st[1] + s * st[2];
                hsi_convert(p, e, lay->dt, lay->swapped, &v, 8, HSI_F64, 0, 1);
            }
    hsi_view v;
    int64_t shape[3] = {B, L, S};
    HSI_CHECK_OK(hsi_view_make(&v, buf, off, lay->dt, 3, shape, st, lay->swapped));
    hsi_buffer_release(buf);
    return v;
}

/* The same bytes, offset, strides and byte order in device memory. */
static hsi_view to_device(const hsi_view *v)
{
    hsi_buffer *db = NULL;
    hsi_view out;
    memset(&out, 0, sizeof out);
    HSI_CHECK_OK(hsi_cuda_buffer(&db, v->buf->size));
    if (!db) return out;
    HSI_CHECK_OK(hsi_cuda_upload(db->data, v->buf->data, v->buf->size));
    HSI_CHECK_OK(hsi_view_make(&out, db, v->offset, v->dtype, v->ndim, v->shape, v->strides, v->swapped));
    hsi_buffer_release(db);
    return out;
}

/* max |got - want| <= tol * max(1, max|want|); says where it is not */
static int close_to(const float *got, const float *want, int64_t n, double tol, const char *what)
{
    double mx = 1, worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d, wi = i;
    }
    int ok = worst <= tol * mx;
    if (!ok)
        fprintf(stderr, "\n  %s: element %lld: got %.9g, want %.9g (tolerance %.3g)\n", what,
                (long long)wi, (double)got[wi], (double)want[wi], tol * mx);
    CU_ASSERT(ok);
    return ok;
}

/* ----------------------------------------------------------- the ops */

/* Where the op runs in one row of the table: the backend asked for, and
 * whether the cube is first copied into device memory. */
typedef struct backend {
    hsi_device device;
    int cube_on_device;
    const char *name;
} backend;

static void describe(char *what, size_t n, const char *op, const backend *be, const layout *lay)
{
    static const char *const ils[N_IL] = {"bsq", "bil", "bip", "column-major"};
    snprintf(what, n, "%s on %s: %s %s%s%s%s", op, be->name, hsi_dtype_name(lay->dt), ils[lay->il],
             lay->swapped ? " swapped" : "", lay->lead ? " unaligned" : "",
             lay->reversed ? " reversed" : "");
}

/* Statistics, plain and with a mask and the ignore value: count, min and
 * max exact, mean to 1e-10 and the variances to 1e-9 of their scale,
 * against hsi_stats_compute_ref. */
static void op_stats(const backend *be, const layout *lay, const hsi_view *host, const hsi_view *cube)
{
    const int64_t L = host->shape[1], S = host->shape[2];
    hsi_view mask;
    int64_t ms[2] = {L, S};
    HSI_CHECK_OK(hsi_view_alloc(&mask, HSI_U8, 2, ms, HSI_BUF_HOST));
    for (int64_t i = 0; i < L * S; i++) ((uint8_t *)mask.buf->data)[i] = i % 7 != 3;
    char what[160];
    describe(what, sizeof what, "statistics", be, lay);
    for (int variant = 0; variant < 2; variant++) {
        hsi_stats_opts o = {.tile_lines = 5, .device = be->device};
        if (variant) o.mask = &mask, o.has_ignore = 1, o.ignore_value = 0;
        hsi_stats want, got;
        HSI_CHECK_OK(hsi_stats_compute_ref(&want, host, &o));
        hsi_status st = hsi_stats_compute(&got, cube, &o);
        HSI_CHECK_OK(st);
        if (st != HSI_OK) {
            hsi_stats_free(&want);
            continue;
        }
        int bad = 0;
        for (int64_t b = 0; b < want.n_bands; b++) {
            double sc = fabs(want.mean[b]) + want.std[b] + 1e-300;
            bad += got.count[b] != want.count[b] || got.min[b] != want.min[b] || got.max[b] != want.max[b];
            bad += !(fabs(got.mean[b] - want.mean[b]) <= 1e-10 * sc);
            bad += !(fabs(got.var[b] - want.var[b]) <= 1e-9 * (want.var[b] + 1e-300));
            bad += !(fabs(got.var_ddof1[b] - want.var_ddof1[b]) <= 1e-9 * (want.var_ddof1[b] + 1e-300));
        }
        if (bad) fprintf(stderr, "\n  %s%s: %d mismatches\n", what, variant ? " (mask, ignore)" : "", bad);
        CU_ASSERT_EQUAL(bad, 0);
        hsi_stats_free(&got);
        hsi_stats_free(&want);
    }
    hsi_view_release(&mask);
}

/* The ops' normalisation of a host cube: the bands of spec, the ignore
 * value 0 filled, and one of modes chosen by the layout. */
static void layout_norm(hsi_norm *nm, const hsi_view *host, const layout *lay, const char *spec,
                        const hsi_norm_mode modes[3])
{
    int64_t *bands = NULL, nb = 0;
    HSI_CHECK_OK(hsi_bands_parse(&bands, &nb, spec, host->shape[0]));
    hsi_stats s;
    hsi_stats_opts so = {.has_ignore = 1, .ignore_value = 0};
    HSI_CHECK_OK(hsi_stats_compute_ref(&s, host, &so));
    HSI_CHECK_OK(hsi_norm_build(nm, modes[(lay->il + lay->dt) % 3], host->shape[0], bands, nb, &s, NULL, 1, 0));
    hsi_stats_free(&s);
    free(bands);
}

/* The fused pass (band subset, ignore fill, a normalisation mode, then PCA
 * with whitening on every other layout), band- and pixel-major, against
 * the unfused double references hsi_normalize_cpu and
 * hsi_pca_transform_features; 1e-5 of the output's range. */
static void op_fused(const backend *be, const layout *lay, const hsi_view *host, const hsi_view *cube)
{
    static const hsi_norm_mode modes[3] = {HSI_NORM_ZSCORE, HSI_NORM_L2, HSI_NORM_MINMAX};
    const int64_t L = host->shape[1], S = host->shape[2];
    hsi_norm nm;
    layout_norm(&nm, host, lay, "1-3,5,7-", modes);
    const int64_t nb = nm.n_bands;
    hsi_pca p;
    hsi_pca_opts po = {.n_components = 3, .whiten = lay->il % 2};
    HSI_CHECK_OK(hsi_pca_fit(&p, host, &nm, &po));
    hsi_view feat, scores;
    int64_t fs[3] = {nb, L, S}, ks[3] = {3, L, S};
    HSI_CHECK_OK(hsi_view_alloc(&feat, HSI_F32, 3, fs, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_view_alloc(&scores, HSI_F32, 3, ks, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_normalize_cpu(&feat, host, &nm));
    HSI_CHECK_OK(hsi_pca_transform_features(&scores, &feat, &p));
    float *got = malloc(sizeof(float) * (size_t)(nb * L * S));
    float *bm = malloc(sizeof(float) * (size_t)(nb * L * S));
    char what[160];
    for (int with_pca = 0; with_pca < 2; with_pca++) {
        const int64_t k = with_pca ? 3 : nb, N = k * L * S;
        const float *want = with_pca ? scores.buf->data : feat.buf->data;
        describe(what, sizeof what, with_pca ? "fused pass + PCA" : "fused pass", be, lay);
        for (int pm = 0; pm < 2; pm++) {
            hsi_fused_opts fo = {.pixel_major = pm, .tile_lines = 4, .n_threads = 2, .device = be->device};
            memset(got, 0xff, sizeof(float) * (size_t)N);
            hsi_status st = hsi_fused_run(got, cube, with_pca ? NULL : &nm, with_pca ? &p : NULL, &fo);
            HSI_CHECK_OK(st);
            if (st != HSI_OK) continue;
            const float *cmp = got;
            if (pm) { /* (L, S, k) -> (k, L, S) */
                for (int64_t i = 0; i < L * S; i++)
                    for (int64_t o = 0; o < k; o++) bm[o * L * S + i] = got[i * k + o];
                cmp = bm;
            }
            close_to(cmp, want, N, 1e-5, what);
        }
    }
    free(bm);
    free(got);
    hsi_view_release(&scores);
    hsi_view_release(&feat);
    hsi_pca_free(&p);
    hsi_norm_free(&nm);
}

/* The PCA covariance (hsi_covariance: a band subset, the ignore fill and a
 * normalisation mode, with and without a mask) against a two-pass double
 * covariance of hsi_normalize_cpu's features: mean to 1e-6 and covariance
 * to 1e-5 of their largest magnitude (float products, double sums). */
static void op_covariance(const backend *be, const layout *lay, const hsi_view *host, const hsi_view *cube)
{
    static const hsi_norm_mode modes[3] = {HSI_NORM_MINMAX, HSI_NORM_ZSCORE, HSI_NORM_NONE};
    const int64_t L = host->shape[1], S = host->shape[2];
    hsi_norm nm;
    layout_norm(&nm, host, lay, "2-4,6-", modes);
    const int64_t nb = nm.n_bands;
    hsi_view feat, mask;
    int64_t fs[3] = {nb, L, S}, ms[2] = {L, S};
    HSI_CHECK_OK(hsi_view_alloc(&feat, HSI_F32, 3, fs, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_normalize_cpu(&feat, host, &nm));
    HSI_CHECK_OK(hsi_view_alloc(&mask, HSI_U8, 2, ms, HSI_BUF_HOST));
    uint8_t *mk = mask.buf->data;
    for (int64_t i = 0; i < L * S; i++) mk[i] = i > 5 && i % 4 != 1; /* the first pixels out */
    const float *f = feat.buf->data;
    double *mean = malloc(sizeof(double) * (size_t)nb), *cov = malloc(sizeof(double) * (size_t)(nb * nb));
    double *rm = malloc(sizeof(double) * (size_t)nb), *rc = malloc(sizeof(double) * (size_t)(nb * nb));
    char what[160];
    describe(what, sizeof what, "covariance", be, lay);
    for (int masked = 0; masked < 2; masked++) {
        int64_t n = 0;
        for (int64_t j = 0; j < nb; j++) rm[j] = 0;
        for (int64_t p = 0; p < L * S; p++)
            if (!masked || mk[p]) {
                n++;
                for (int64_t j = 0; j < nb; j++) rm[j] += f[j * L * S + p];
            }
        for (int64_t j = 0; j < nb; j++) rm[j] /= (double)n;
        for (int64_t a = 0; a < nb; a++)
            for (int64_t b = 0; b < nb; b++) {
                double acc = 0;
                for (int64_t p = 0; p < L * S; p++)
                    if (!masked || mk[p])
                        acc += ((double)f[a * L * S + p] - rm[a]) * ((double)f[b * L * S + p] - rm[b]);
                rc[a * nb + b] = acc / (double)(n - 1);
            }
        hsi_pca_opts po = {.mask = masked ? &mask : NULL, .tile_lines = 6, .device = be->device};
        int64_t used = 0;
        hsi_status st = hsi_covariance(mean, cov, &used, cube, &nm, &po);
        HSI_CHECK_OK(st);
        if (st != HSI_OK) continue;
        CU_ASSERT_EQUAL(used, n);
        double mm = 0, mc = 0, em = 0, ec = 0;
        for (int64_t j = 0; j < nb; j++) mm = fmax(mm, fabs(rm[j])), em = fmax(em, fabs(mean[j] - rm[j]));
        for (int64_t i = 0; i < nb * nb; i++) mc = fmax(mc, fabs(rc[i])), ec = fmax(ec, fabs(cov[i] - rc[i]));
        int ok = em <= 1e-6 * (mm + 1) && ec <= 1e-5 * mc;
        if (!ok)
            fprintf(stderr, "\n  %s%s: mean off by %.3g (max %.3g), covariance by %.3g (max %.3g)\n",
                    what, masked ? " (mask)" : "", em, mm, ec, mc);
        CU_ASSERT(ok);
    }
    free(rc);
    free(rm);
    free(cov);
    free(mean);
    hsi_view_release(&mask);
    hsi_view_release(&feat);
    hsi_norm_free(&nm);
}

/* numpy.pad 'reflect' index */
static int64_t reflect(int64_t i, int64_t n)
{
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
}

/* 5 x 5 patches (mirror and zero padding, no augmentation) of the float32
 * cube, against windows indexed here; exact. The patcher takes float32
 * only: the layout gives its strides, the values are the cube's as
 * float32. */
static void op_patches(const backend *be, const layout *lay, const hsi_view *host, const hsi_view *cube)
{
    (void)cube;
    const int64_t B = host->shape[0], L = host->shape[1], S = host->shape[2], P = 5, r = 2, n = 23;
    if (lay->swapped || lay->lead) return; /* the patcher's contract: aligned native float32 */
    hsi_view f;
    int64_t fs[3] = {B, L, S};
    HSI_CHECK_OK(hsi_view_alloc(&f, HSI_F32, 3, fs, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_view_copy(&f, host));
    hsi_view fv = f; /* the float cube in the layout's strides: BIP as (L, S, B) storage */
    hsi_view strided;
    memset(&strided, 0, sizeof strided);
    if (lay->il == BIP) {
        int64_t ps[3] = {L, S, B};
        HSI_CHECK_OK(hsi_view_alloc(&strided, HSI_F32, 3, ps, HSI_BUF_HOST));
        float *d = strided.buf->data;
        const float *sf = f.buf->data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < L * S; i++) d[i * B + b] = sf[b * L * S + i];
        int64_t st[3] = {4, 4 * S * B, 4 * B};
        HSI_CHECK_OK(hsi_view_make(&fv, strided.buf, 0, HSI_F32, 3, fs, st, 0));
        hsi_view_release(&strided);
    } else {
        hsi_view_ref(&fv, &f);
    }
    hsi_view dv;
    memset(&dv, 0, sizeof dv);
    const hsi_view *src = &fv;
    if (be->cube_on_device) {
        dv = to_device(&fv);
        src = &dv;
    }
    int64_t px[23];
    for (int64_t i = 0; i < n; i++) px[i] = (i * 7919) % (L * S);
    px[0] = 0, px[1] = L * S - 1; /* two corners */
    float *want = malloc(sizeof(float) * (size_t)(n * B * P * P));
    float *got = malloc(sizeof(float) * (size_t)(n * B * P * P));
    const float *sf = f.buf->data;
    char what[160];
    describe(what, sizeof what, "patches", be, lay);
    for (int pad = 0; pad < 2; pad++) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t dy = 0; dy < P; dy++)
                    for (int64_t dx = 0; dx < P; dx++) {
                        int64_t y = px[i] / S + dy - r, x = px[i] % S + dx - r;
                        int inside = y >= 0 && y < L && x >= 0 && x < S;
                        float v = pad == HSI_PAD_ZERO && !inside ? 0.0f
                                  : sf[b * L * S + reflect(y, L) * S + reflect(x, S)];
                        want[((i * B + b) * P + dy) * P + dx] = v;
                    }
        hsi_patcher pt;
        HSI_CHECK_OK(hsi_patcher_init(&pt, src, (int)P, (hsi_pad_mode)pad, NULL));
        if (be->cube_on_device) {
            float *out_d = NULL;
            int64_t *px_d = NULL;
            HSI_CHECK_OK(hsi_cuda_malloc((void **)&out_d, sizeof(float) * (size_t)(n * B * P * P)));
            HSI_CHECK_OK(hsi_cuda_malloc((void **)&px_d, sizeof px));
            HSI_CHECK_OK(hsi_cuda_upload(px_d, px, sizeof px));
            HSI_CHECK_OK(hsi_patches_extract(&pt, out_d, px_d, n, 0, 0));
            HSI_CHECK_OK(hsi_cuda_download(got, out_d, sizeof(float) * (size_t)(n * B * P * P)));
            hsi_cuda_free(out_d);
            hsi_cuda_free(px_d);
        } else {
            HSI_CHECK_OK(hsi_patches_extract(&pt, got, px, n, 0, 0));
        }
        hsi_patcher_free(&pt);
        close_to(got, want, n * B * P * P, 0, what);
    }
    free(got);
    free(want);
    if (be->cube_on_device) hsi_view_release(&dv);
    hsi_view_release(&fv);
    hsi_view_release(&f);
}

typedef void (*op_fn)(const backend *be, const layout *lay, const hsi_view *host, const hsi_view *cube);

static const struct {
    const char *name;
    op_fn run;
    int on_device; /* the op takes a cube already in device memory */
} ops[] = {
    {"statistics", op_stats, 1},
    {"fused pass", op_fused, 1},
    {"covariance", op_covariance, 1},
    {"patches", op_patches, 1},
};

/* Every op of the table, every layout, on backend be. */
static void run_table(const backend *be)
{
    /* every real dtype (the GPU's typed loaders take the first four when
     * aligned, its generic one the rest) */
    static const hsi_dtype dts[] = {HSI_U16, HSI_I16, HSI_F32, HSI_F64, HSI_U8, HSI_I8,
                                    HSI_I32, HSI_U32, HSI_I64, HSI_U64};
    const int nd = (int)(sizeof dts / sizeof dts[0]);
    int n_cases = 0;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        if (be->cube_on_device && !ops[o].on_device) continue;
        for (int d = 0; d < nd; d++)
            for (int il = 0; il < N_IL; il++) {
                layout lay = {dts[d], il, (d + il) & 1, il == BIL, il == BSQ && d == 3};
                hsi_view host = make_cube(9, 19, 14, &lay, 100 + d * 7 + il), dev;
                memset(&dev, 0, sizeof dev);
                const hsi_view *cube = &host;
                if (be->cube_on_device) {
                    dev = to_device(&host);
                    cube = &dev;
                }
                ops[o].run(be, &lay, &host, cube);
                n_cases++;
                if (be->cube_on_device) hsi_view_release(&dev);
                hsi_view_release(&host);
            }
    }
    CU_ASSERT_EQUAL(n_cases, (int)(sizeof ops / sizeof ops[0]) * nd * N_IL);
    /* a complex cube is refused, saying a real one is expected */
    if (!be->cube_on_device) {
        hsi_view c;
        int64_t shape[3] = {3, 4, 5};
        HSI_CHECK_OK(hsi_view_alloc(&c, HSI_C64, 3, shape, HSI_BUF_HOST));
        memset(c.buf->data, 0, (size_t)hsi_view_nbytes(&c));
        hsi_stats s;
        hsi_stats_opts o = {.device = be->device};
        CU_ASSERT_NOT_EQUAL(hsi_stats_compute(&s, &c, &o), HSI_OK);
        if (!strstr(hsi_last_error(), "real")) {
            CU_FAIL("complex cube: the error does not say a real one is expected");
            fprintf(stderr, "\n  %s: %s\n", be->name, hsi_last_error());
        }
        hsi_clear_error();
        hsi_view_release(&c);
    }
}

static void test_cpu(void) { run_table(&(backend){HSI_DEVICE_CPU, 0, "cpu"}); }

/* auto without a device is the CPU (and with one the GPU: then the same
 * tolerances hold) */
static void test_auto(void) { run_table(&(backend){HSI_DEVICE_AUTO, 0, "auto"}); }

static void test_cuda_host(void) { run_table(&(backend){HSI_DEVICE_CUDA, 0, "cuda (host cube)"}); }
static void test_cuda_device(void) { run_table(&(backend){HSI_DEVICE_CUDA, 1, "cuda (device cube)"}); }

/* ------------------------------------------------------ the rule itself */

static void test_rule(void)
{
    hsi_device d = HSI_DEVICE_AUTO;
    HSI_CHECK_OK(hsi_device_parse(&d, "CUDA", "--device"));
    CU_ASSERT_EQUAL(d, HSI_DEVICE_CUDA);
    HSI_CHECK_FAILS(hsi_device_parse(&d, "gpu", "--device"), HSI_ERR_ARG, "cpu, cuda or auto");
    CU_ASSERT_STRING_EQUAL(hsi_device_name(HSI_DEVICE_AUTO), "auto");
    /* the CPU is always there; a call the GPU cannot take stays on it under auto */
    HSI_CHECK_OK(hsi_device_pick(&d, HSI_DEVICE_CPU, 0, "op", NULL));
    CU_ASSERT_EQUAL(d, HSI_DEVICE_CPU);
    HSI_CHECK_OK(hsi_device_pick(&d, HSI_DEVICE_AUTO, 0, "op", "it cannot"));
    CU_ASSERT_EQUAL(d, HSI_DEVICE_CPU);
    HSI_CHECK_FAILS(hsi_device_pick(&d, HSI_DEVICE_CUDA, 0, "statistics", "it cannot"),
                    HSI_ERR_UNSUPPORTED, "statistics with --device cuda");
    /* the op's own supports check, through the op */
    hsi_view v = make_cube(4, 6, 5, &(layout){HSI_U16, BSQ, 0, 0, 0}, 3);
    hsi_stats s;
    hsi_stats_opts o = {.hist_bins = 8, .n_percentiles = 1, .percentiles = (double[]){50}};
    o.device = HSI_DEVICE_CUDA;
    HSI_CHECK_FAILS(hsi_stats_compute(&s, &v, &o), HSI_ERR_UNSUPPORTED, "percentiles");
    o.device = HSI_DEVICE_AUTO; /* histograms: the CPU, whatever is there */
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
    CU_ASSERT_PTR_NOT_NULL(s.percentile);
    hsi_stats_free(&s);
    if (hsi_cuda_device_count() == 0) {
        o = (hsi_stats_opts){.device = HSI_DEVICE_CUDA};
        HSI_CHECK_FAILS(hsi_stats_compute(&s, &v, &o), HSI_ERR_NO_CUDA, "statistics");
        hsi_norm nm;
        HSI_CHECK_OK(hsi_norm_identity(&nm, 4));
        float out[120];
        hsi_fused_opts fo = {.device = HSI_DEVICE_CUDA};
        HSI_CHECK_FAILS(hsi_fused_run(out, &v, &nm, NULL, &fo), HSI_ERR_NO_CUDA, "fused pass");
        hsi_norm_free(&nm);
        HSI_CHECK_FAILS(hsi_device_resolve(&d, HSI_DEVICE_CUDA, "--device cuda"), HSI_ERR_NO_CUDA,
                        "--device cuda");
        HSI_CHECK_OK(hsi_device_resolve(&d, HSI_DEVICE_AUTO, "--device auto"));
        CU_ASSERT_EQUAL(d, HSI_DEVICE_CPU);
    }
    hsi_view_release(&v);
}

/* Without a device every command's --device cuda refuses before any work,
 * naming the option, and writes nothing; --device auto gives the CPU's
 * bytes. */
#define SCENE "data_samples/scene.hdr"
#define GT "data_samples/scene_gt.hdr"

static void test_cli(void)
{
    char out[8192], cmd[2048];
    const char *t = hsi_test_tmpdir();
    if (hsi_cuda_device_count() == 0) {
        static const char *const cmds[] = {
            "stats " SCENE,
            "preprocess " SCENE " %s/dev_p.hdr --normalize zscore --pca 3",
            "pca apply %s/none.safetensors " SCENE " %s/dev_a.hdr",
            "train " SCENE " " GT " --out %s/dev_run --epochs 1",
            "predict %s/none_run " SCENE " %s/dev_map.hdr",
            "eval %s/none_run " SCENE " " GT,
            "bench model cnn2d --steps 1 --warmup 0",
        };
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
            char args[512];
            snprintf(args, sizeof args, cmds[i], t, t, t);
            snprintf(cmd, sizeof cmd, HSI_BIN " %s --device cuda", args);
            int rc = hsi_test_run(out, sizeof out, "%s", cmd);
            CU_ASSERT_EQUAL(rc, 1);
            int said = strstr(out, "--device cuda") && (strstr(out, "CUDA") || strstr(out, "cuda"));
            if (rc != 1 || !said) fprintf(stderr, "\n  %s -> %d: %s\n", cmd, rc, out);
            CU_ASSERT(said);
        }
        char p[1024];
        snprintf(p, sizeof p, "%s/dev_p.hdr", t);
        CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0); /* nothing written */
        snprintf(p, sizeof p, "%s/dev_run", t);
        CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0);
    }
    /* auto = the CPU's bytes here (with a device: the GPU's, within the
     * op table's tolerances, so only the exit status is checked) */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --json --device auto > %s/dev_sa.json", t), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --json > %s/dev_sc.json", t), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s/dev_pa.hdr --normalize zscore --pca 4 --device auto", t), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s/dev_pc.hdr --normalize zscore --pca 4", t), 0);
    if (hsi_cuda_device_count() == 0) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/dev_sa.json", t);
        snprintf(b, sizeof b, "%s/dev_sc.json", t);
        CU_ASSERT(hsi_test_same_file(a, b));
        snprintf(a, sizeof a, "%s/dev_pa", t);
        snprintf(b, sizeof b, "%s/dev_pc", t);
        CU_ASSERT(hsi_test_same_file(a, b));
    }
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --device gpu"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--device expects cpu, cuda or auto"));
}

HSI_SUITE(backend_ops, 0, {"the op table on the CPU: every op, dtype and layout vs the references", test_cpu},
          {"the op table under --device auto", test_auto},
          {"the backend rule: parse, pick, supports, refusals", test_rule},
          {"every --device cuda command refuses without a device; auto = cpu", test_cli})
HSI_SUITE(cuda_backend_ops, HSI_SUITE_NEEDS_CUDA,
          {"the op table on the GPU, host cubes", test_cuda_host},
          {"the op table on the GPU, cubes in device memory", test_cuda_device})
