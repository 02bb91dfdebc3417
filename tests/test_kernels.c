/* test_kernels.c — statistics, normalisation, band selection, PCA and the
 * fused pass against numpy/scikit-learn fixtures (tests/fixtures/kernels,
 * made by make_kernels_fixtures.py) on cubes built in memory in every
 * interleave, dtype and byte order; fused == unfused; masks; ignore value. */
#include "test.h"

#include <pthread.h>
#include <stdint.h>

#include "io/meta.h"
#include "kernels/bands.h"
#include "kernels/fastdiv.h"
#include "kernels/tile_plan.h"
#include "kernels/fused.h"
#include "kernels/kern_internal.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"
#include "kernels/stats.h"
#include "pipeline/preprocess.h"

/* ------------------------------------------------------------ fixtures */

#define MAX_ARR 64
static struct {
    char name[64];
    int64_t n;
    double *v;
} refs[MAX_ARR];
static int n_refs = -1;

static void load_refs(void)
{
    if (n_refs >= 0) return;
    n_refs = 0;
    FILE *fp = fopen("tests/fixtures/kernels/ref.txt", "r");
    if (!fp) return;
    char name[64];
    long long n;
    while (n_refs < MAX_ARR && fscanf(fp, "%63s %lld", name, &n) == 2) {
        refs[n_refs].v = malloc(sizeof(double) * (size_t)(n + 1));
        snprintf(refs[n_refs].name, sizeof refs[n_refs].name, "%s", name);
        refs[n_refs].n = n;
        for (long long i = 0; i < n; i++)
            if (fscanf(fp, "%lf", &refs[n_refs].v[i]) != 1) break;
        n_refs++;
    }
    fclose(fp);
}

/* The fixture array `name` (fails the test when missing or short). */
static const double *ref(const char *name, int64_t want)
{
    load_refs();
    for (int i = 0; i < n_refs; i++)
        if (!strcmp(refs[i].name, name)) {
            if (want >= 0 && refs[i].n != want) {
                fprintf(stderr, "\n  fixture %s has %lld values, expected %lld\n", name,
                        (long long)refs[i].n, (long long)want);
                CU_FAIL_FATAL("fixture size");
            }
            return refs[i].v;
        }
    fprintf(stderr, "\n  fixture %s missing (run tests/fixtures/make_kernels_fixtures.py)\n", name);
    CU_FAIL_FATAL("fixture missing");
    return NULL;
}

static int64_t B_, L_, S_;
static void dims(void)
{
    const double *d = ref("dims", 3);
    B_ = (int64_t)d[0];
    L_ = (int64_t)d[1];
    S_ = (int64_t)d[2];
}

/* ----------------------------------------------------------- test cubes */

enum { BSQ = 0, BIL = 1, BIP = 2 };
static const char *il_name[] = {"bsq", "bil", "bip"};

/* A (B, L, S) cube of `vals` (C order) stored in interleave il as dtype
 * dt, optionally byte-swapped, 3 bytes into its buffer (unaligned). */
static hsi_view make_cube(const double *vals, int64_t B, int64_t L, int64_t S, hsi_dtype dt, int il,
                          int swapped)
{
    int64_t e = (int64_t)hsi_dtype_size(dt), pad = 3;
    hsi_buffer *buf = NULL;
    hsi_view v;
    memset(&v, 0, sizeof v);
    CU_ASSERT_EQUAL_FATAL(hsi_buffer_alloc(&buf, (size_t)(B * L * S * e + pad), HSI_BUF_HOST), HSI_OK);
    int64_t st[3][3] = {{L * S * e, S * e, e}, {S * e, B * S * e, e}, {e, S * B * e, B * e}};
    int64_t shape[3] = {B, L, S};
    CU_ASSERT_EQUAL_FATAL(hsi_view_make(&v, buf, pad, dt, 3, shape, st[il], swapped), HSI_OK);
    hsi_buffer_release(buf);
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < L; y++)
            for (int64_t x = 0; x < S; x++) {
                int64_t idx[3] = {b, y, x};
                hsi_convert(hsi_view_ptr(&v, idx), e, dt, swapped, &vals[(b * L + y) * S + x], 8, HSI_F64, 0, 1);
            }
    return v;
}

static hsi_view make_mask(const double *m, int64_t L, int64_t S, hsi_dtype dt)
{
    hsi_view v;
    int64_t shape[2] = {L, S};
    CU_ASSERT_EQUAL_FATAL(hsi_view_alloc(&v, dt, 2, shape, HSI_BUF_HOST), HSI_OK);
    for (int64_t i = 0; i < L * S; i++) {
        int64_t idx[2] = {i / S, i % S};
        hsi_convert(hsi_view_ptr(&v, idx), 0, dt, 0, &m[i], 8, HSI_F64, 0, 1);
    }
    return v;
}

static int rel_close(double a, double b, double tol)
{
    double d = fabs(a - b), s = fabs(b) > 1e-300 ? fabs(b) : 1.0;
    return d <= tol * s;
}

static int count_bad_rel(const double *got, const double *want, int64_t n, double tol, const char *what)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!rel_close(got[i], want[i], tol)) {
            if (bad < 3)
                fprintf(stderr, "\n  %s[%lld]: got %.12g, want %.12g", what, (long long)i, got[i], want[i]);
            bad++;
        }
    return bad;
}

static void check_stats(const hsi_stats *s, const char *prefix, int64_t nb)
{
    char n[64];
    snprintf(n, sizeof n, "%s_mean", prefix);
    CU_ASSERT_EQUAL(count_bad_rel(s->mean, ref(n, nb), nb, 1e-6, n), 0);
    snprintf(n, sizeof n, "%s_std", prefix);
    CU_ASSERT_EQUAL(count_bad_rel(s->std, ref(n, nb), nb, 1e-6, n), 0);
    snprintf(n, sizeof n, "%s_min", prefix);
    if (strcmp(prefix, "ign")) {
        CU_ASSERT_EQUAL(count_bad_rel(s->min, ref(n, nb), nb, 0, n), 0);
        snprintf(n, sizeof n, "%s_max", prefix);
        CU_ASSERT_EQUAL(count_bad_rel(s->max, ref(n, nb), nb, 0, n), 0);
    }
}

/* ---------------------------------------------------------- statistics */

static const hsi_dtype dtypes[3] = {HSI_U16, HSI_I16, HSI_F32};

/* The 16-bit statistics loops (vectorised where the CPU has AVX2): uint16
 * and int16, BSQ and BIL rows of lengths around the vector width and long
 * ones, BIP spectra of 35 bands (two vectors and a rest) or 1041 over
 * runs of pixels around the 256-pixel blocks; each band with its minimum and
 * maximum in another vector lane, the dtype's extremes present, bands of
 * one value at either end, vs the naive two-pass reference. */
static void test_stats_16bit_rows(void)
{
    const int64_t Ss[] = {1, 15, 16, 17, 31, 33, 257, 1000};
    for (int u = 0; u < 2; u++)
        for (int il = 0; il < 3; il++)
            for (size_t si = 0; si < sizeof Ss / sizeof *Ss; si++) {
                /* and once 1041 bands: more than the 1024 whose sums stay in cache */
                int64_t B = il == 2 && si == 6 ? 1041 : 35, L = 3, S = Ss[si], N = L * S;
                hsi_dtype dt = u ? HSI_U16 : HSI_I16;
                double *vals = malloc(sizeof(double) * (size_t)(B * N));
                uint32_t r = 7u + (uint32_t)(si * 31 + il * 7 + u);
                for (int64_t b = 0; b < B; b++) {
                    for (int64_t i = 0; i < N; i++) {
                        r = r * 1664525u + 1013904223u;
                        vals[b * N + i] = u ? (double)(r >> 16) : (double)(int16_t)(r >> 16);
                    }
                    /* the band's extremes at lane b (and b + 3) of some vector */
                    int64_t at = (16 * (int64_t)(r % 7) + b) % N, at2 = (16 * (int64_t)(r % 5) + b + 3) % N;
                    vals[b * N + at] = u ? 65535 : 32767;
                    if (at2 != at) vals[b * N + at2] = u ? 0 : -32768;
                    if (b == 5 || b == 22) /* bands of one value */
                        for (int64_t i = 0; i < N; i++) vals[b * N + i] = u ? 65535 : 32767;
                    if (b == 6 || b == 21)
                        for (int64_t i = 0; i < N; i++) vals[b * N + i] = u ? 0 : -32768;
                }
                hsi_view v = make_cube(vals, B, L, S, dt, il, 0);
                hsi_stats got, want;
                HSI_CHECK_OK(hsi_stats_compute(&got, &v, NULL));
                HSI_CHECK_OK(hsi_stats_compute_ref(&want, &v, NULL));
                for (int64_t b = 0; b < B; b++) {
                    CU_ASSERT_EQUAL(got.count[b], want.count[b]);
                    CU_ASSERT_EQUAL(got.min[b], want.min[b]);
                    CU_ASSERT_EQUAL(got.max[b], want.max[b]);
                    CU_ASSERT_DOUBLE_EQUAL(got.mean[b], want.mean[b], 1e-12 * (1 + fabs(want.mean[b])));
                    CU_ASSERT_DOUBLE_EQUAL(got.var[b], want.var[b], 1e-9 * (1 + want.var[b]));
                }
                hsi_stats_free(&got);
                hsi_stats_free(&want);
                hsi_view_release(&v);
                free(vals);
            }
}

static void test_stats_layouts(void)
{
    dims();
    const double *cube = ref("cube", B_ * L_ * S_);
    for (int d = 0; d < 3; d++)
        for (int il = 0; il < 3; il++)
            for (int sw = 0; sw < 2; sw++) {
                hsi_view v = make_cube(cube, B_, L_, S_, dtypes[d], il, sw);
                for (int nt = 1; nt <= 3; nt++) {
                    hsi_stats s;
                    hsi_stats_opts o = {.n_threads = nt, .tile_lines = nt == 3 ? 1 : 0};
                    HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
                    check_stats(&s, "all", B_);
                    CU_ASSERT_EQUAL(s.count[0], L_ * S_);
                    hsi_stats_free(&s);
                }
                hsi_view_release(&v);
            }
}

static void test_stats_reference_path(void)
{
    dims();
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_I16, BIL, 1);
    hsi_stats s;
    HSI_CHECK_OK(hsi_stats_compute_ref(&s, &v, NULL));
    check_stats(&s, "all", B_);
    hsi_stats_free(&s);
    hsi_view_release(&v);
}

static void test_stats_subview(void)
{
    dims();
    for (int il = 0; il < 3; il++) {
        hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, il, il == BIP);
        hsi_view a, b;
        HSI_CHECK_OK(hsi_view_bands(&a, &v, 2, 7));
        HSI_CHECK_OK(hsi_view_crop(&b, &a, 1, 6, 2, 7));
        CU_ASSERT_FALSE(hsi_view_is_packed(&b));
        hsi_stats s;
        HSI_CHECK_OK(hsi_stats_compute(&s, &b, NULL));
        check_stats(&s, "sub", 7);
        hsi_stats_free(&s);
        hsi_view_release(&b);
        hsi_view_release(&a);
        hsi_view_release(&v);
    }
}

static void test_stats_mask(void)
{
    dims();
    const double *m = ref("mask", L_ * S_);
    hsi_dtype mdt[2] = {HSI_U8, HSI_I32};
    for (int il = 0; il < 3; il++) {
        hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_F32, il, 0);
        hsi_view mk = make_mask(m, L_, S_, mdt[il & 1]);
        hsi_stats s;
        hsi_stats_opts o = {.mask = &mk};
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
        check_stats(&s, "masked", B_);
        int64_t n = 0;
        for (int64_t i = 0; i < L_ * S_; i++) n += m[i] != 0;
        CU_ASSERT_EQUAL(s.count[3], n);
        hsi_stats_free(&s);
        /* the masked stats equal the stats of the selected pixels only */
        hsi_stats r;
        HSI_CHECK_OK(hsi_stats_compute_ref(&r, &v, &o));
        check_stats(&r, "masked", B_);
        hsi_stats_free(&r);
        hsi_view_release(&mk);
        hsi_view_release(&v);
    }
    /* a mask that selects nothing is an error, not NaNs */
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BSQ, 0);
    double *zero = calloc((size_t)(L_ * S_), sizeof(double));
    hsi_view mk = make_mask(zero, L_, S_, HSI_U8);
    hsi_stats s;
    hsi_stats_opts o = {.mask = &mk};
    HSI_CHECK_FAILS(hsi_stats_compute(&s, &v, &o), HSI_ERR_NUMERIC, "no valid element");
    hsi_view bad;
    int64_t shp[2] = {L_, S_ + 1};
    HSI_CHECK_OK(hsi_view_alloc(&bad, HSI_U8, 2, shp, HSI_BUF_HOST));
    o.mask = &bad;
    HSI_CHECK_FAILS(hsi_stats_compute(&s, &v, &o), HSI_ERR_ARG, "mask");
    hsi_view_release(&bad);
    free(zero);
    hsi_view_release(&mk);
    hsi_view_release(&v);
}

static void test_stats_ignore(void)
{
    dims();
    const double *cnt = ref("ign_count", B_);
    for (int il = 0; il < 3; il++)
        for (int d = 0; d < 3; d++) {
            hsi_view v = make_cube(ref("ign_cube", B_ * L_ * S_), B_, L_, S_, dtypes[d], il, d == 1);
            hsi_stats s;
            hsi_stats_opts o = {.has_ignore = 1, .ignore_value = 0};
            HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
            check_stats(&s, "ign", B_);
            for (int64_t b = 0; b < B_; b++) CU_ASSERT_EQUAL(s.count[b], (int64_t)cnt[b]);
            CU_ASSERT(s.min[0] > 0);
            hsi_stats_free(&s);
            hsi_view_release(&v);
        }
}

static void test_stats_histogram(void)
{
    dims();
    const double *h = ref("hist", B_ * 16), *pct = ref("pct", B_ * 3);
    double q[3] = {5, 50, 95};
    for (int il = 0; il < 3; il++) {
        hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, il, 0);
        hsi_stats s;
        hsi_stats_opts o = {.hist_bins = 16, .n_percentiles = 3, .percentiles = q};
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
        int bad = 0;
        for (int64_t i = 0; i < B_ * 16; i++) bad += s.hist[i] != (int64_t)h[i];
        CU_ASSERT_EQUAL(bad, 0);
        for (int64_t b = 0; b < B_; b++)
            for (int k = 0; k < 3; k++) {
                double w = (s.max[b] - s.min[b]) / 16;
                CU_ASSERT(fabs(s.percentile[b * 3 + k] - pct[b * 3 + k]) <= w);
            }
        hsi_stats_free(&s);
        hsi_view_release(&v);
    }
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BSQ, 0);
    hsi_stats s;
    double badq = 101;
    hsi_stats_opts o = {.hist_bins = 4, .n_percentiles = 1, .percentiles = &badq};
    HSI_CHECK_FAILS(hsi_stats_compute(&s, &v, &o), HSI_ERR_ARG, "percentile 0 must be in [0, 100]");
    hsi_view_release(&v);
}

/* ------------------------------------------------------- normalisation */

static void check_f32_cube(const float *got, int64_t stride_o, int64_t stride_p, const double *want,
                           int64_t n_out, int64_t n_pix, double tol, const char *what)
{
    /* got element (o, p) at got[o*stride_o + p*stride_p]; want: (n_out, n_pix) */
    int bad = 0;
    double scale = 0;
    for (int64_t i = 0; i < n_out * n_pix; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t p = 0; p < n_pix; p++) {
            double g = got[o * stride_o + p * stride_p], w = want[o * n_pix + p];
            if (!(fabs(g - w) <= tol * scale)) {
                if (bad < 3) fprintf(stderr, "\n  %s (%lld, %lld): got %.9g, want %.9g", what, (long long)o,
                                     (long long)p, g, w);
                bad++;
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_normalize_modes(void)
{
    dims();
    int64_t N = L_ * S_;
    const char *fx[5] = {NULL, "norm_zscore", "norm_minmax", "norm_gminmax", "norm_l2"};
    for (int il = 0; il < 3; il++) {
        hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, dtypes[il], il, il == BIL);
        hsi_stats s;
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
        for (int m = HSI_NORM_ZSCORE; m <= HSI_NORM_L2; m++) {
            hsi_norm nm;
            HSI_CHECK_OK(hsi_norm_build(&nm, (hsi_norm_mode)m, B_, NULL, B_, &s, NULL, 0, 0));
            const double *want = ref(fx[m], B_ * N);
            /* unfused reference pass */
            hsi_view out;
            int64_t shp[3] = {B_, L_, S_};
            HSI_CHECK_OK(hsi_view_alloc(&out, HSI_F32, 3, shp, HSI_BUF_HOST));
            HSI_CHECK_OK(hsi_normalize_cpu(&out, &v, &nm));
            check_f32_cube(out.buf->data, N, 1, want, B_, N, 1e-6, fx[m]);
            /* fused pass without PCA, both output layouts */
            float *f = malloc(sizeof(float) * (size_t)(B_ * N));
            for (int pm = 0; pm < 2; pm++) {
                hsi_fused_opts fo = {.pixel_major = pm, .n_threads = 2};
                HSI_CHECK_OK(hsi_fused_run(f, &v, &nm, NULL, &fo));
                check_f32_cube(f, pm ? 1 : N, pm ? B_ : 1, want, B_, N, 1e-6, fx[m]);
            }
            free(f);
            hsi_view_release(&out);
            hsi_norm_free(&nm);
        }
        hsi_stats_free(&s);
        hsi_view_release(&v);
    }
    hsi_norm_mode md;
    HSI_CHECK_OK(hsi_norm_mode_parse(&md, "global-minmax"));
    CU_ASSERT_EQUAL(md, HSI_NORM_GLOBAL_MINMAX);
    HSI_CHECK_FAILS(hsi_norm_mode_parse(&md, "zscor"), HSI_ERR_ARG, "zscore");
}

static void test_normalize_calibration(void)
{
    dims();
    int64_t N = L_ * S_;
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BIP, 1);
    hsi_stats s;
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
    hsi_calib cal = {ref("gain", B_), ref("offset", B_), 10000.0};
    const char *fx[2] = {"norm_calib", "norm_calib_zscore"};
    hsi_norm_mode modes[2] = {HSI_NORM_NONE, HSI_NORM_ZSCORE};
    for (int k = 0; k < 2; k++) {
        hsi_norm nm;
        HSI_CHECK_OK(hsi_norm_build(&nm, modes[k], B_, NULL, B_, &s, &cal, 0, 0));
        float *f = malloc(sizeof(float) * (size_t)(B_ * N));
        HSI_CHECK_OK(hsi_fused_run(f, &v, &nm, NULL, NULL));
        check_f32_cube(f, N, 1, ref(fx[k], B_ * N), B_, N, 1e-6, fx[k]);
        free(f);
        hsi_norm_free(&nm);
    }
    hsi_stats_free(&s);
    hsi_view_release(&v);
}

/* ----------------------------------------------------------------- PCA */

/* |cos| of component rows and the sign that aligns ours with theirs. */
static void check_components(const hsi_pca *p, const double *comp, const double *ev, int64_t k, double *sign,
                             const char *what)
{
    int64_t nf = p->n_features;
    for (int64_t c = 0; c < k; c++) {
        double dot = 0, na = 0, nb = 0;
        for (int64_t j = 0; j < nf; j++) {
            dot += p->components[c * nf + j] * comp[c * nf + j];
            na += p->components[c * nf + j] * p->components[c * nf + j];
            nb += comp[c * nf + j] * comp[c * nf + j];
        }
        double cs = fabs(dot) / sqrt(na * nb);
        if (cs < 0.9999) fprintf(stderr, "\n  %s component %lld: |cos| %.8f", what, (long long)c, cs);
        CU_ASSERT(cs >= 0.9999);
        if (sign) sign[c] = dot < 0 ? -1 : 1;
        if (!rel_close(p->explained_variance[c], ev[c], 1e-5))
            fprintf(stderr, "\n  %s ev %lld: %.10g vs %.10g", what, (long long)c, p->explained_variance[c], ev[c]);
        CU_ASSERT(rel_close(p->explained_variance[c], ev[c], 1e-5));
        /* sign rule: the largest |loading| is positive */
        double big = 0;
        int64_t arg = 0;
        for (int64_t j = 0; j < nf; j++)
            if (fabs(p->components[c * nf + j]) > big) {
                big = fabs(p->components[c * nf + j]);
                arg = j;
            }
        CU_ASSERT(p->components[c * nf + arg] > 0);
    }
}

/* scores: pixel-major (N, k) float; want: (N, k) sklearn, signs aligned */
static void check_scores(const float *got, const double *want, const double *sign, int64_t N, int64_t k,
                         double tol, const char *what)
{
    double scale = 0;
    int bad = 0;
    for (int64_t i = 0; i < N * k; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t p = 0; p < N; p++)
        for (int64_t c = 0; c < k; c++) {
            double g = got[p * k + c] * sign[c], w = want[p * k + c];
            if (!(fabs(g - w) <= tol * scale)) {
                if (bad < 3) fprintf(stderr, "\n  %s (%lld, %lld): %.8g vs %.8g", what, (long long)p, (long long)c, g, w);
                bad++;
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_pca_fit_layouts(void)
{
    dims();
    int64_t N = L_ * S_, K = 4;
    for (int d = 0; d < 3; d++)
        for (int il = 0; il < 3; il++)
            for (int sw = 0; sw < 2; sw++) {
                hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, dtypes[d], il, sw);
                hsi_pca p;
                hsi_pca_opts o = {.n_components = K, .n_threads = 1 + (il + sw) % 3};
                HSI_CHECK_OK(hsi_pca_fit(&p, &v, NULL, &o));
                CU_ASSERT_EQUAL(p.n_components, K);
                CU_ASSERT_EQUAL(p.n_samples, N);
                double sign[8];
                check_components(&p, ref("pca_components", K * B_), ref("pca_ev", K), K, sign, il_name[il]);
                CU_ASSERT_EQUAL(count_bad_rel(p.explained_variance_ratio, ref("pca_evr", K), K, 1e-5, "evr"), 0);
                CU_ASSERT_EQUAL(count_bad_rel(p.mean, ref("pca_mean", B_), B_, 1e-9, "mean"), 0);
                float *f = malloc(sizeof(float) * (size_t)(N * K));
                hsi_fused_opts fo = {.pixel_major = 1};
                HSI_CHECK_OK(hsi_fused_run(f, &v, NULL, &p, &fo));
                check_scores(f, ref("pca_scores", N * K), sign, N, K, 2e-6, "scores");
                free(f);
                hsi_pca_free(&p);
                hsi_view_release(&v);
            }
}

static void test_pca_whiten_inverse_fraction(void)
{
    dims();
    int64_t N = L_ * S_, K = 4;
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_F32, BIL, 0);
    hsi_pca p;
    hsi_pca_opts o = {.n_components = K, .whiten = 1};
    HSI_CHECK_OK(hsi_pca_fit(&p, &v, NULL, &o));
    double sign[8];
    check_components(&p, ref("pca_components", K * B_), ref("pca_ev", K), K, sign, "whiten");
    float *f = malloc(sizeof(float) * (size_t)(N * K));
    hsi_fused_opts fo = {.pixel_major = 1};
    HSI_CHECK_OK(hsi_fused_run(f, &v, NULL, &p, &fo));
    check_scores(f, ref("pca_white_scores", N * K), sign, N, K, 2e-6, "whitened");
    /* inverse of the (unwhitened-equivalent) scores gives sklearn's inverse_transform */
    hsi_view sc, back;
    int64_t sshape[3] = {K, L_, S_}, fshape[3] = {B_, L_, S_};
    HSI_CHECK_OK(hsi_view_alloc(&sc, HSI_F32, 3, sshape, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_view_alloc(&back, HSI_F32, 3, fshape, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_fused_run(sc.buf->data, &v, NULL, &p, NULL));
    HSI_CHECK_OK(hsi_pca_inverse(&back, &sc, &p));
    check_f32_cube(back.buf->data, N, 1, ref("pca_inverse", N * B_), B_, N, 1e-6, "inverse");
    hsi_view_release(&sc);
    hsi_view_release(&back);
    free(f);
    hsi_pca_free(&p);
    /* variance fraction: sklearn's rule */
    hsi_pca_opts of = {.variance_fraction = 0.95};
    HSI_CHECK_OK(hsi_pca_fit(&p, &v, NULL, &of));
    CU_ASSERT_EQUAL(p.n_components, (int64_t)ref("pca_frac95_k", 1)[0]);
    hsi_pca_free(&p);
    hsi_pca_opts bad = {.n_components = B_ + 1};
    HSI_CHECK_FAILS(hsi_pca_fit(&p, &v, NULL, &bad), HSI_ERR_ARG, "n_components");
    hsi_view_release(&v);
}

static void test_pca_mask_norm_subset(void)
{
    dims();
    int64_t N = L_ * S_, K = 4;
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BIP, 0);
    hsi_view mk = make_mask(ref("mask", N), L_, S_, HSI_U8);
    hsi_pca p;
    hsi_pca_opts o = {.n_components = K, .mask = &mk};
    HSI_CHECK_OK(hsi_pca_fit(&p, &v, NULL, &o));
    check_components(&p, ref("pca_mask_components", K * B_), ref("pca_mask_ev", K), K, NULL, "masked");
    hsi_pca_free(&p);
    /* z-score then PCA */
    hsi_stats s;
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
    hsi_norm nm;
    HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B_, NULL, B_, &s, NULL, 0, 0));
    hsi_pca_opts oz = {.n_components = K};
    HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &oz));
    double sign[8];
    check_components(&p, ref("zpca_components", K * B_), ref("zpca_ev", K), K, sign, "zscore");
    float *f = malloc(sizeof(float) * (size_t)(N * K));
    hsi_fused_opts fo = {.pixel_major = 1};
    HSI_CHECK_OK(hsi_fused_run(f, &v, NULL, &p, &fo));
    check_scores(f, ref("zpca_scores", N * K), sign, N, K, 2e-6, "zscore scores");
    free(f);
    hsi_pca_free(&p);
    hsi_norm_free(&nm);
    /* band subset 2,4,5,6,9 (1-based) then PCA(3) */
    int64_t *bands = NULL, nb = 0;
    HSI_CHECK_OK(hsi_bands_parse(&bands, &nb, "2,4-6,9", B_));
    HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_NONE, B_, bands, nb, &s, NULL, 0, 0));
    hsi_pca_opts o3 = {.n_components = 3};
    HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &o3));
    check_components(&p, ref("selpca_components", 3 * 5), ref("selpca_ev", 3), 3, NULL, "subset");
    hsi_pca_free(&p);
    hsi_norm_free(&nm);
    free(bands);
    hsi_stats_free(&s);
    hsi_view_release(&mk);
    hsi_view_release(&v);
}

/* ------------------------------------------------------ fused == unfused */

typedef struct sink_ctx {
    float *dst; /* band-major (n_out, L, S) */
    int64_t L, calls, next_line;
} sink_ctx;

static hsi_status collect(void *vc, const float *tile, int64_t line0, int64_t n_lines, int64_t n_out,
                          int64_t S, int pm)
{
    sink_ctx *c = vc;
    c->calls++;
    CU_ASSERT_EQUAL(line0, c->next_line); /* tiles arrive in line order */
    c->next_line = line0 + n_lines;
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t y = 0; y < n_lines; y++)
            for (int64_t x = 0; x < S; x++)
                c->dst[(o * c->L + line0 + y) * S + x] =
                    pm ? tile[(y * S + x) * n_out + o] : tile[(o * n_lines + y) * S + x];
    return HSI_OK;
}

/* want (K, L*S) = the unfused chain: v normalised by nm to a float cube
 * of nf bands, then transformed by p (K components). */
static void unfused_pca(double *want, const hsi_view *v, const hsi_norm *nm, const hsi_pca *p, int64_t nf,
                        int64_t K)
{
    int64_t L = v->shape[1], S = v->shape[2];
    hsi_view feat, sc;
    int64_t fs[3] = {nf, L, S}, ss[3] = {K, L, S};
    HSI_CHECK_OK(hsi_view_alloc(&feat, HSI_F32, 3, fs, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_view_alloc(&sc, HSI_F32, 3, ss, HSI_BUF_HOST));
    HSI_CHECK_OK(hsi_normalize_cpu(&feat, v, nm));
    /* ignored elements were replaced by the band mean before scaling */
    HSI_CHECK_OK(hsi_pca_transform_features(&sc, &feat, p));
    for (int64_t i = 0; i < K * L * S; i++) want[i] = ((float *)sc.buf->data)[i];
    hsi_view_release(&feat);
    hsi_view_release(&sc);
}

static void test_fused_equals_unfused(void)
{
    dims();
    int64_t N = L_ * S_, K = 3;
    int64_t *bands = NULL, nb = 0;
    HSI_CHECK_OK(hsi_bands_parse(&bands, &nb, "1-3,5,7-", B_));
    hsi_norm_mode modes[3] = {HSI_NORM_ZSCORE, HSI_NORM_L2, HSI_NORM_MINMAX};
    for (int d = 0; d < 3; d++)
        for (int il = 0; il < 3; il++) {
            hsi_view v = make_cube(ref("ign_cube", -1), B_, L_, S_, dtypes[d], il, (il + d) & 1);
            hsi_stats s;
            hsi_stats_opts so = {.has_ignore = 1, .ignore_value = 0};
            HSI_CHECK_OK(hsi_stats_compute(&s, &v, &so));
            hsi_norm nm;
            HSI_CHECK_OK(hsi_norm_build(&nm, modes[(d + il) % 3], B_, bands, nb, &s, NULL, 1, 0));
            hsi_pca p;
            hsi_pca_opts po = {.n_components = K, .whiten = d == 2};
            HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &po));
            double *want = malloc(sizeof(double) * (size_t)(K * N));
            unfused_pca(want, &v, &nm, &p, nb, K);
            float *f = malloc(sizeof(float) * (size_t)(K * N));
            for (int pm = 0; pm < 4; pm++) { /* pm & 2: the projection by sgemm, not the tiles */
                hsi_fused_opts fo = {.pixel_major = pm & 1, .n_threads = 1 + (pm & 1),
                                     .tile_lines = 1 + 2 * (pm & 1)};
                hsi_kern_set_tiles(!(pm & 2));
                HSI_CHECK_OK(hsi_fused_run(f, &v, NULL, &p, &fo));
                check_f32_cube(f, pm & 1 ? 1 : N, pm & 1 ? K : 1, want, K, N, 1e-5, "fused vs unfused");
            }
            hsi_kern_set_tiles(1);
            /* streaming through a sink in small tiles gives the same cube */
            float *g = calloc((size_t)(K * N), sizeof(float));
            sink_ctx sc2 = {g, L_, 0, 0};
            hsi_fused_opts fo = {.pixel_major = il == BIP, .tile_lines = 2, .n_threads = 2,
                                 .sink = collect, .sink_ctx = &sc2};
            HSI_CHECK_OK(hsi_fused_run(NULL, &v, NULL, &p, &fo));
            CU_ASSERT_EQUAL(sc2.calls, (L_ + 1) / 2);
            check_f32_cube(g, N, 1, want, K, N, 1e-5, "sink");
            free(g);
            free(f);
            free(want);
            hsi_pca_free(&p);
            hsi_norm_free(&nm);
            hsi_stats_free(&s);
            hsi_view_release(&v);
        }
    free(bands);
}

/* The projection on the AVX-512 tiles (where the CPU has them) and by
 * sgemm, against the unfused reference (normalise, then transform): 1, 17
 * and 40 components (one, two and three 16-wide blocks), 45 bands, rows of
 * 1500 pixels (a 1456-pixel block and a short one; not a multiple of the
 * tiles' 12 or 24), every interleave, both product orientations. */
static void test_fused_projection_widths(void)
{
    int64_t B = 45, L = 3, S = 1500, N = L * S;
    double *vals = malloc(sizeof(double) * (size_t)(B * N));
    uint32_t r = 777;
    for (int64_t i = 0; i < B * N; i++) {
        r = r * 1664525u + 1013904223u;
        vals[i] = (double)(2000 + (r >> 20) + (i / N) * 13);
    }
    const int64_t ks[3] = {1, 17, 40};
    float *f = malloc(sizeof(float) * (size_t)(40 * N));
    double *want = malloc(sizeof(double) * (size_t)(40 * N));
    for (int il = 0; il < 3; il++) {
        hsi_view v = make_cube(vals, B, L, S, HSI_U16, il, il == BIL);
        hsi_stats s;
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
        hsi_norm nm;
        HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B, NULL, B, &s, NULL, 0, 0));
        for (int ki = 0; ki < 3; ki++) {
            int64_t K = ks[ki];
            hsi_pca p;
            hsi_pca_opts po = {.n_components = K, .whiten = ki == 1};
            HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &po));
            unfused_pca(want, &v, &nm, &p, B, K);
            for (int c = 0; c < 4; c++) {
                int pm = c & 1;
                hsi_kern_set_tiles(!(c & 2));
                hsi_fused_opts fo = {.pixel_major = pm, .n_threads = 2};
                HSI_CHECK_OK(hsi_fused_run(f, &v, NULL, &p, &fo));
                check_f32_cube(f, pm ? 1 : N, pm ? K : 1, want, K, N, 1e-5,
                               c & 2 ? "sgemm vs unfused" : "tiles vs unfused");
            }
            hsi_kern_set_tiles(1);
            hsi_pca_free(&p);
        }
        hsi_norm_free(&nm);
        hsi_stats_free(&s);
        hsi_view_release(&v);
    }
    free(f);
    free(want);
    free(vals);
}

/* Outputs of 64 MiB and more are written with non-temporal stores (in
 * blocks staged in cache); the sink's tiles never are: both give the same
 * bits, for rows of samples (BSQ) and spectra (BIP), both product
 * orientations, with and without a projection, on rows whose starts are
 * not all 32-byte aligned and longer than one 2048-pixel run. */
static void test_fused_streamed_output(void)
{
    int64_t B = 64, L = 130, S = 2100, N = L * S;
    hsi_buffer *buf = NULL;
    CU_ASSERT_EQUAL_FATAL(hsi_buffer_alloc(&buf, (size_t)(B * N * 2), HSI_BUF_HOST), HSI_OK);
    uint32_t r = 12345;
    for (int64_t i = 0; i < B * N; i++) {
        r = r * 1664525u + 1013904223u;
        ((uint16_t *)buf->data)[i] = (uint16_t)(1000 + (r >> 22) + (i % B) * 7);
    }
    float *a = hsi_aligned_alloc(sizeof(float) * (size_t)(B * N));
    float *g = hsi_aligned_alloc(sizeof(float) * (size_t)(B * N));
    CU_ASSERT_FATAL(a && g);
    for (int il = 0; il < 3; il += 2) { /* BSQ: rows of samples; BIP: spectra (BIL loads as BSQ) */
        hsi_view v;
        int64_t shape[3] = {B, L, S}, st[3];
        hsi_interleave_strides((hsi_interleave)il, B, L, S, 2, st);
        HSI_CHECK_OK(hsi_view_make(&v, buf, 0, HSI_U16, 3, shape, st, 0));
        hsi_stats s;
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
        hsi_norm nm;
        HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B, NULL, B, &s, NULL, 0, 0));
        hsi_pca p;
        hsi_pca_opts po = {.n_components = B};
        HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &po));
        for (int c = 0; c < 4; c++) {
            int pm = c & 1, proj = c >> 1;
            const hsi_norm *n = proj ? NULL : &nm;
            const hsi_pca *pc = proj ? &p : NULL;
            memset(a, 0xff, sizeof(float) * (size_t)(B * N));
            hsi_fused_opts fo = {.pixel_major = pm, .n_threads = 2};
            HSI_CHECK_OK(hsi_fused_run(a, &v, n, pc, &fo));
            sink_ctx sc = {g, L, 0, 0};
            hsi_fused_opts fs = {.pixel_major = pm, .n_threads = 2, .tile_lines = 16, .sink = collect,
                                 .sink_ctx = &sc};
            HSI_CHECK_OK(hsi_fused_run(NULL, &v, n, pc, &fs));
            /* a is in the requested orientation, g band-major */
            int64_t bad = 0;
            for (int64_t o = 0; o < B; o++)
                for (int64_t q = 0; q < N; q++) {
                    float x = pm ? a[q * B + o] : a[o * N + q];
                    if (memcmp(&x, &g[o * N + q], sizeof x) != 0) bad++;
                }
            if (bad) fprintf(stderr, "  %s %s %s: %lld of %lld floats differ\n", il_name[il],
                             pm ? "pixel-major" : "band-major", proj ? "PCA" : "zscore", (long long)bad,
                             (long long)(B * N));
            CU_ASSERT_EQUAL(bad, 0);
        }
        hsi_pca_free(&p);
        hsi_norm_free(&nm);
        hsi_stats_free(&s);
        hsi_view_release(&v);
    }
    hsi_aligned_free(a);
    hsi_aligned_free(g);
    hsi_buffer_release(buf);
}

static void test_pca_save_load(void)
{
    dims();
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BSQ, 0);
    hsi_stats s;
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
    hsi_norm nm;
    int64_t bands[4] = {7, 1, 2, 5};
    HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_L2, B_, bands, 4, &s, NULL, 1, 65535));
    hsi_pca p, q;
    hsi_pca_opts o = {.n_components = 2, .whiten = 1};
    HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &o));
    const char *path = hsi_test_tmp("model.hsipca");
    HSI_CHECK_OK(hsi_pca_save(&p, path));
    HSI_CHECK_OK(hsi_pca_load(&q, path));
    CU_ASSERT_EQUAL(q.n_components, 2);
    CU_ASSERT_EQUAL(q.n_features, 4);
    CU_ASSERT_EQUAL(q.whiten, 1);
    CU_ASSERT_EQUAL(q.norm.l2, 1);
    CU_ASSERT_EQUAL(q.norm.has_ignore, 1);
    CU_ASSERT_EQUAL(q.norm.ignore_value, 65535);
    CU_ASSERT_EQUAL(q.norm.bands[0], 7);
    CU_ASSERT_EQUAL(memcmp(q.components, p.components, sizeof(double) * 8), 0);
    CU_ASSERT_EQUAL(memcmp(q.mean, p.mean, sizeof(double) * 4), 0);
    CU_ASSERT_EQUAL(memcmp(q.norm.scale, p.norm.scale, sizeof(double) * 4), 0);
    CU_ASSERT_EQUAL(q.explained_variance[1], p.explained_variance[1]);
    /* truncated and foreign files are refused with the sizes in the message */
    char *text = NULL;
    size_t len = 0;
    HSI_CHECK_OK(hsi_read_file(path, &text, &len));
    hsi_pca r;
    HSI_CHECK_FAILS(hsi_pca_parse(&r, text, len - 8, "cut"), HSI_ERR_FORMAT, "expected 360 bytes for 4 features x 2 components, found 352");
    HSI_CHECK_FAILS(hsi_pca_parse(&r, "ENVI\n", 5, "x.hdr"), HSI_ERR_FORMAT, "not an hsi PCA model");
    text[31] = 0x7f; /* absurd feature count */
    HSI_CHECK_FAILS(hsi_pca_parse(&r, text, len, "bad"), HSI_ERR_FORMAT, "bad sizes");
    hsi_pca_free(&p);
    free(text);
    hsi_pca_free(&q);
    /* applying a model to a cube with another band count is refused */
    hsi_view w = make_cube(ref("cube", -1), B_ - 1, L_, S_, HSI_U16, BSQ, 0);
    float *f = malloc(sizeof(float) * (size_t)(2 * L_ * S_));
    hsi_pca_load(&q, path);
    HSI_CHECK_FAILS(hsi_fused_run(f, &w, NULL, &q, NULL), HSI_ERR_ARG, "10-band cube");
    free(f);
    hsi_pca_free(&q);
    hsi_view_release(&w);
    hsi_norm_free(&nm);
    hsi_stats_free(&s);
    hsi_view_release(&v);
}

/* ------------------------------------------------------ band selection */

static void test_bands_parse(void)
{
    int64_t *b = NULL, n = 0;
    HSI_CHECK_OK(hsi_bands_parse(&b, &n, "1-3, 35,40-", 42));
    int64_t want[] = {0, 1, 2, 34, 39, 40, 41};
    CU_ASSERT_EQUAL(n, 7);
    if (n == 7) CU_ASSERT_EQUAL(memcmp(b, want, sizeof want), 0);
    free(b);
    HSI_CHECK_OK(hsi_bands_parse(&b, &n, "-2", 42));
    CU_ASSERT_EQUAL(n, 2);
    free(b);
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "1-3,2", 42), HSI_ERR_ARG, "band 2 is listed twice");
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "0-3", 42), HSI_ERR_ARG, "outside 1..42");
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "40-50", 42), HSI_ERR_ARG, "outside 1..42");
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "5-3", 42), HSI_ERR_ARG, "reversed");
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "1;2", 42), HSI_ERR_ARG, "offset 1");
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "", 42), HSI_ERR_ARG, "empty");
    HSI_CHECK_FAILS(hsi_bands_parse(&b, &n, "a", 42), HSI_ERR_ARG, "offset 0");

    double wl[8] = {0.40, 0.70, 1.30, 1.40, 1.50, 1.90, 2.00, 2.50};
    hsi_wavelengths_to_nm(wl, 8, "Micrometers");
    CU_ASSERT_DOUBLE_EQUAL(wl[0], 400, 1e-9);
    HSI_CHECK_OK(hsi_bands_from_wavelengths(&b, &n, "400-1340, 1450-1800,1960-2450", wl, 8));
    int64_t ww[] = {0, 1, 2, 4, 6};
    CU_ASSERT_EQUAL(n, 5);
    if (n == 5) CU_ASSERT_EQUAL(memcmp(b, ww, sizeof ww), 0);
    int bbl[8] = {1, 0, 1, 1, 1, 1, 1, 1};
    hsi_bands_drop_bad(b, &n, bbl);
    CU_ASSERT_EQUAL(n, 4);
    CU_ASSERT_EQUAL(b[1], 2);
    free(b);
    HSI_CHECK_FAILS(hsi_bands_from_wavelengths(&b, &n, "3000-4000", wl, 8), HSI_ERR_ARG, "select no band");
    HSI_CHECK_FAILS(hsi_bands_from_wavelengths(&b, &n, "400-", wl, 8), HSI_ERR_ARG, "end of the range");
    double nm[3] = {450, 550, 650};
    hsi_wavelengths_to_nm(nm, 3, NULL);
    CU_ASSERT_DOUBLE_EQUAL(nm[2], 650, 0);
}

static void test_bands_rank_opbs(void)
{
    dims();
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_I16, BIL, 0);
    hsi_stats s;
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
    int64_t order[64];
    hsi_bands_rank_variance(order, s.var, B_);
    const double *ro = ref("rank_variance", B_);
    for (int64_t i = 0; i < B_; i++) CU_ASSERT_EQUAL(order[i], (int64_t)ro[i]);
    double *mean = malloc(sizeof(double) * (size_t)B_), *cov = malloc(sizeof(double) * (size_t)(B_ * B_));
    int64_t n = 0;
    HSI_CHECK_OK(hsi_covariance(mean, cov, &n, &v, NULL, NULL));
    CU_ASSERT_EQUAL(n, L_ * S_);
    int64_t sel[5];
    double res[5];
    HSI_CHECK_OK(hsi_bands_opbs(sel, res, cov, B_, 5));
    const double *op = ref("opbs5", 5);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(sel[i], (int64_t)op[i]);
    CU_ASSERT_EQUAL(sel[0], order[0]); /* OPBS starts with the max-variance band */
    for (int i = 1; i < 5; i++) CU_ASSERT(res[i] <= res[i - 1] * (1 + 1e-12));
    HSI_CHECK_FAILS(hsi_bands_opbs(sel, res, cov, B_, 0), HSI_ERR_ARG, "asked for 0");
    free(mean);
    free(cov);
    hsi_stats_free(&s);
    hsi_view_release(&v);
}

/* ------------------------------------------------- mapped file streaming */

static void test_mapped_cube(void)
{
    dims();
    hsi_view mem = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BIL, 1);
    const char *path = hsi_test_tmp("cube.bil");
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite((uint8_t *)mem.buf->data + mem.offset, 2, (size_t)(B_ * L_ * S_), fp);
    fclose(fp);
    hsi_buffer *buf = NULL;
    HSI_CHECK_OK(hsi_buffer_map(&buf, path));
    hsi_view v;
    HSI_CHECK_OK(hsi_view_make(&v, buf, 0, HSI_U16, 3, mem.shape, mem.strides, 1));
    hsi_buffer_release(buf);
    hsi_stats s;
    hsi_stats_opts o = {.tile_lines = 1, .n_threads = 2};
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
    check_stats(&s, "all", B_);
    hsi_stats_free(&s);
    /* pages released after each tile are read again correctly */
    HSI_CHECK_OK(hsi_stats_compute(&s, &v, &o));
    check_stats(&s, "all", B_);
    hsi_stats_free(&s);
    hsi_view_release(&v);
    hsi_view_release(&mem);
}

/* Covariance of a larger cube whose mean is 400 std: float blocks (shifted)
 * summed in double must stay within 1e-5 of a naive two-pass double
 * computation (written here, element by element). */
static void test_covariance_precision(void)
{
    int64_t B = 24, L = 96, S = 160, N = L * S;
    double *vals = malloc(sizeof(double) * (size_t)(B * N));
    uint64_t h = 88172645463325252ull;
    for (int64_t p = 0; p < N; p++) {
        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
        double a = (double)(h % 1000) / 1000.0 - 0.5;
        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
        double b2 = (double)(h % 1000) / 1000.0 - 0.5;
        for (int64_t b = 0; b < B; b++) {
            h ^= h << 13, h ^= h >> 7, h ^= h << 17;
            double v = 20000 + 150 * a * sin(0.3 * (double)b) + 60 * b2 * cos(0.7 * (double)b) + (double)(h % 11);
            vals[b * N + p] = (double)(float)(v + 0.001 * (double)(h % 997)); /* exact in float32 */
        }
    }
    double *mean = calloc((size_t)B, sizeof(double)), *cov = calloc((size_t)(B * B), sizeof(double));
    double *m2 = calloc((size_t)B, sizeof(double)), *c2 = calloc((size_t)(B * B), sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        for (int64_t p = 0; p < N; p++) m2[b] += vals[b * N + p];
        m2[b] /= (double)N;
    }
    for (int64_t i = 0; i < B; i++)
        for (int64_t j = 0; j < B; j++) {
            double acc = 0;
            for (int64_t p = 0; p < N; p++) acc += (vals[i * N + p] - m2[i]) * (vals[j * N + p] - m2[j]);
            c2[i * B + j] = acc / (double)(N - 1);
        }
    for (int c = 0; c < 6; c++) { /* c >= 3: ssyrk, not the AVX-512 tiles */
        int il = c % 3;
        hsi_kern_set_tiles(c < 3);
        hsi_view v = make_cube(vals, B, L, S, HSI_F32, il, il == 2);
        int64_t n = 0;
        hsi_pca_opts o = {.n_threads = 2};
        HSI_CHECK_OK(hsi_covariance(mean, cov, &n, &v, NULL, &o));
        CU_ASSERT_EQUAL(n, N);
        double worst = 0;
        for (int64_t i = 0; i < B; i++) {
            CU_ASSERT(fabs(mean[i] - m2[i]) <= 1e-9 * m2[i]);
            for (int64_t j = 0; j < B; j++) {
                double e = fabs(cov[i * B + j] - c2[i * B + j]) / sqrt(c2[i * B + i] * c2[j * B + j]);
                worst = e > worst ? e : worst;
            }
        }
        /* the tiles add their float sums into double every 64 pixels:
         * 9.9e-8 here (2.4e-7 every 256, 6.3e-7 once a 4096-pixel block);
         * ssyrk 2.5e-7 with Debian's OpenBLAS */
        double tol = c < 3 && hsi_kern_tiles() ? 1.5e-7 : 1e-5;
        if (worst > tol || getenv("HSI_TEST_SHOW"))
            fprintf(stderr, "\n  %s %s: covariance relative error %.3g", il_name[il], c < 3 ? "tiles" : "ssyrk",
                    worst);
        CU_ASSERT(worst <= tol);
        hsi_view_release(&v);
    }
    hsi_kern_set_tiles(1);
    free(vals);
    free(mean);
    free(cov);
    free(m2);
    free(c2);
}

/* The covariance of raw 8/16-bit integer bands by exact int16 pair
 * products (VNNI), against exact integer sums (int64, written here):
 * within 1e-12 where the values fit (1.2e-6 to 1.8e-6 for the float
 * tiles, held to 5e-6).
 * Cases: 40 bands (column blocks of 32 and 16, 8 padded lanes), odd pixel
 * counts (a mask), int16 values in two groups 8000 apart in every band
 * (|x - mid| ~ 4005: 66 pairs a spill, every lane's sum near 2^31 - 1: a
 * longer spill interval wraps), and a band spanning 0..65535 (blocks out
 * of int16: the float tiles take them, the others the ints). The dtypes
 * the ints take: uint16 (byte-swapped too), int16, uint8. */
static void test_covariance_ints(void)
{
    int64_t B = 40, L = 97, S = 53, N = L * S; /* chunks of ~6 lines: 159 pairs a block */
    double *vals = malloc(sizeof(double) * (size_t)(B * N)), *mk = malloc(sizeof(double) * (size_t)N);
    double *mean = malloc(sizeof(double) * (size_t)B), *cov = malloc(sizeof(double) * (size_t)(B * B));
    int64_t *S2 = malloc(sizeof(int64_t) * (size_t)(B * B)), s1[40];
    int vnni = hsi_kern_ints();
    if (!vnni) fprintf(stderr, "\n  (no AVX512-VNNI here: the float tiles only) ");
    int bad = 0;
    for (int kind = 0; kind < 4; kind++) /* 0 u16 narrow, 1 i16 wide, 2 u8, 3 u16 full range */
        for (int il = 0; il < 3; il++)
            for (int masked = 0; masked < 2; masked++)
                for (int ints = 0; ints < 2; ints++) {
                    hsi_dtype dt = kind == 1 ? HSI_I16 : kind == 2 ? HSI_U8 : HSI_U16;
                    uint64_t h = 0x9e3779b97f4a7c15ull + (uint64_t)kind;
                    int64_t n = 0;
                    for (int64_t p = 0; p < N; p++) {
                        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
                        int sgn = p == 0 || h % 10 == 0 ? 1 : -1; /* most pixels far from the first */
                        mk[p] = (double)(h % 7 != 0);
                        for (int64_t b = 0; b < B; b++) {
                            h ^= h << 13, h ^= h >> 7, h ^= h << 17;
                            double v = kind == 0   ? 3000 + 40 * (double)b + (double)(h % 1500)
                                       : kind == 1 ? -2000 + 4000 * sgn + (double)(h % 11)
                                       : kind == 2 ? (double)(h % 256)
                                                   : (double)(h % 4000) + (b == 7 && p % 389 == 3 ? 61535 : 0);
                            vals[b * N + p] = v;
                        }
                    }
                    /* exact sums over the fitted pixels */
                    memset(S2, 0, sizeof(int64_t) * (size_t)(B * B));
                    memset(s1, 0, sizeof s1);
                    for (int64_t p = 0; p < N; p++) {
                        if (masked && !mk[p]) continue;
                        n++;
                        for (int64_t i = 0; i < B; i++) {
                            int64_t xi = (int64_t)vals[i * N + p];
                            s1[i] += xi;
                            for (int64_t j = 0; j < B; j++) S2[i * B + j] += xi * (int64_t)vals[j * N + p];
                        }
                    }
                    hsi_kern_set_ints(ints);
                    hsi_view v = make_cube(vals, B, L, S, dt, il, kind == 0 && il == 1);
                    hsi_view m = make_mask(mk, L, S, HSI_U8);
                    hsi_pca_opts o = {.n_threads = 2, .mask = masked ? &m : NULL};
                    int64_t used = 0;
                    HSI_CHECK_OK(hsi_covariance(mean, cov, &used, &v, NULL, &o));
                    CU_ASSERT_EQUAL(used, n);
                    double worst = 0;
                    for (int64_t i = 0; i < B; i++)
                        for (int64_t j = 0; j < B; j++) {
                            long double r = ((long double)S2[i * B + j] -
                                             (long double)s1[i] * (long double)s1[j] / (long double)n) /
                                            (long double)(n - 1);
                            long double ri = ((long double)S2[i * B + i] - (long double)s1[i] * s1[i] / (long double)n),
                                        rj = ((long double)S2[j * B + j] - (long double)s1[j] * s1[j] / (long double)n);
                            double e = (double)(fabsl((long double)cov[i * B + j] - r) /
                                                sqrtl(ri * rj / ((long double)(n - 1) * (n - 1))));
                            worst = e > worst ? e : worst;
                        }
                    /* exact where the ints take every block; the float tiles (and
                     * the full-range case's float blocks) to float precision */
                    double tol = ints && vnni && kind != 3 ? 1e-12 : 5e-6;
                    if (worst > tol || getenv("HSI_TEST_SHOW")) {
                        fprintf(stderr, "\n  kind %d %s%s, ints %d: covariance relative error %.3g", kind,
                                il_name[il], masked ? " masked" : "", ints, worst);
                        if (worst > tol) bad++;
                    }
                    hsi_view_release(&m);
                    hsi_view_release(&v);
                }
    hsi_kern_set_ints(1);
    CU_ASSERT_EQUAL(bad, 0);
    free(vals);
    free(mk);
    free(mean);
    free(cov);
    free(S2);
}

/* Statistics and covariance from one read equal the two passes bit for
 * bit (same threads: the same line ranges and blocks), over interleaves,
 * the exact-integer and float paths, masks, band subsets and threads; a
 * NaN shows as a count below n. Then hsi_prep_fit, which takes that road
 * for zscore + PCA, fits the components the two-pass chain fits. */
static void test_stats_covariance_one_pass(void)
{
    dims();
    int64_t N = L_ * S_;
    hsi_view mk = make_mask(ref("mask", N), L_, S_, HSI_U8);
    int64_t sub[4] = {1, 3, 4, 8};
    size_t bb = sizeof(double) * (size_t)B_;
    double *m1 = malloc(bb), *m2 = malloc(bb), *c1 = malloc(bb * (size_t)B_), *c2 = malloc(bb * (size_t)B_);
    int cases = 0, bad = 0;
    for (int il = 0; il < 3; il++)
        for (int k = 0; k < 2; k++) {
            hsi_dtype dt = k ? HSI_F32 : HSI_U16;
            hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, dt, il, il == 1);
            for (int nt = 1; nt <= 3; nt++)
                for (int variant = 0; variant < 3; variant++) {
                    const int64_t *sel = variant == 2 ? sub : NULL;
                    int64_t ns = sel ? 4 : B_, n1 = 0, n2 = 0;
                    hsi_stats_opts so = {.mask = variant == 1 ? &mk : NULL, .n_threads = nt, .tile_lines = 3};
                    hsi_pca_opts po = {.mask = so.mask, .n_threads = nt, .tile_lines = 3};
                    hsi_stats s1, s2;
                    hsi_norm nm;
                    HSI_CHECK_OK(hsi_stats_covariance(&s1, m1, c1, &n1, &v, sel, ns, &so));
                    HSI_CHECK_OK(hsi_stats_compute(&s2, &v, &so));
                    HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_NONE, B_, sel, ns, NULL, NULL, 0, 0));
                    HSI_CHECK_OK(hsi_covariance(m2, c2, &n2, &v, &nm, &po));
                    int same = n1 == n2 && !memcmp(m1, m2, sizeof(double) * (size_t)ns) &&
                               !memcmp(c1, c2, sizeof(double) * (size_t)(ns * ns)) &&
                               !memcmp(s1.mean, s2.mean, bb) && !memcmp(s1.var, s2.var, bb) &&
                               !memcmp(s1.min, s2.min, bb) && !memcmp(s1.max, s2.max, bb) &&
                               !memcmp(s1.count, s2.count, sizeof(int64_t) * (size_t)B_);
                    if (!same) {
                        fprintf(stderr, "\n  one pass differs: %s %s, %d threads, variant %d", il_name[il],
                                k ? "f32" : "u16", nt, variant);
                        bad++;
                    }
                    cases++;
                    hsi_norm_free(&nm);
                    hsi_stats_free(&s1);
                    hsi_stats_free(&s2);
                }
            hsi_view_release(&v);
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(cases, 54);
    /* a NaN in band 2: the statistics skip it, the covariance cannot */
    double *vals = malloc(sizeof(double) * (size_t)(B_ * N));
    memcpy(vals, ref("cube", -1), sizeof(double) * (size_t)(B_ * N));
    vals[2 * N + 5] = NAN;
    hsi_view vn = make_cube(vals, B_, L_, S_, HSI_F32, BIP, 0);
    hsi_stats sn;
    int64_t nn = 0;
    HSI_CHECK_OK(hsi_stats_covariance(&sn, m1, c1, &nn, &vn, NULL, B_, NULL));
    CU_ASSERT_EQUAL(nn, N);
    CU_ASSERT_EQUAL(sn.count[2], N - 1);
    CU_ASSERT_EQUAL(sn.count[1], N);
    CU_ASSERT(c1[2 * B_ + 2] != c1[2 * B_ + 2]);
    hsi_stats_free(&sn);
    /* the ignore value is refused (the covariance would count it) */
    hsi_stats_opts si = {.has_ignore = 1, .ignore_value = 0};
    CU_ASSERT_EQUAL(hsi_stats_covariance(&sn, m1, c1, &nn, &vn, NULL, B_, &si), HSI_ERR_ARG);
    /* hsi_prep_fit (zscore + PCA 4): one read, the two-pass chain's fit;
     * with the NaN it falls back to the two passes and still fits */
    for (int withnan = 0; withnan < 2; withnan++) {
        hsi_view v = withnan ? vn : make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BSQ, 0);
        hsi_cube cube;
        hsi_cube_init(&cube);
        cube.view = v;
        cube.meta.n_bands = B_;
        hsi_prep_spec spec;
        hsi_prep_spec_init(&spec);
        spec.norm = HSI_NORM_ZSCORE;
        spec.pca = 4;
        hsi_prep pr;
        hsi_status st1 = hsi_prep_fit(&pr, &cube, NULL, &spec);
        hsi_stats s;
        hsi_norm nm;
        hsi_pca p;
        hsi_pca_opts po = {.n_components = 4};
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
        HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B_, NULL, B_, &s, NULL, 0, 0));
        hsi_status st2 = hsi_pca_fit(&p, &v, &nm, &po);
        CU_ASSERT_EQUAL(st1, st2); /* with the NaN: whatever the two passes do */
        if (!withnan) {
            HSI_CHECK_OK(st1);
            CU_ASSERT_EQUAL(pr.pca.n_samples, p.n_samples);
            /* scikit-learn's fit of the same chain (as the two-pass test) */
            check_components(&pr.pca, ref("zpca_components", 4 * B_), ref("zpca_ev", 4), 4, NULL, "one-pass prep");
            for (int64_t j = 0; j < B_; j++) {
                CU_ASSERT(pr.norm.scale[j] == nm.scale[j] && pr.norm.center[j] == nm.center[j]);
                /* z-scored features have mean 0: exactly from the statistics' mean,
                 * to float rounding through the two passes' block sums */
                CU_ASSERT(fabs(pr.pca.mean[j]) <= 1e-12 && fabs(p.mean[j]) <= 1e-5);
            }
        }
        if (st2 == HSI_OK) hsi_pca_free(&p);
        hsi_norm_free(&nm);
        hsi_stats_free(&s);
        hsi_prep_free(&pr);
        if (!withnan) hsi_view_release(&v);
    }
    hsi_view_release(&vn);
    free(vals);
    free(m1);
    free(m2);
    free(c1);
    free(c2);
    hsi_view_release(&mk);
}

/* Statistics and covariance have the same bits on 1, 2, 3 and 5 threads
 * (fixed chunks of lines merged in chunk order), in every interleave, on
 * the exact-integer and the float paths, with and without a mask. */
static void test_stats_threads_same_bits(void)
{
    dims();
    int64_t N = L_ * S_;
    hsi_view mk = make_mask(ref("mask", N), L_, S_, HSI_U8);
    size_t bb = sizeof(double) * (size_t)B_;
    double *m[2], *cv[2];
    for (int i = 0; i < 2; i++) {
        m[i] = malloc(bb);
        cv[i] = malloc(bb * (size_t)B_);
    }
    int bad = 0, cases = 0;
    const int threads[4] = {1, 2, 3, 5};
    for (int il = 0; il < 3; il++)
        for (int k = 0; k < 2; k++) {
            hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, k ? HSI_F32 : HSI_U16, il, 0);
            for (int masked = 0; masked < 2; masked++) {
                hsi_stats s[2];
                int64_t n[2];
                for (int r = 0; r < 4; r++) {
                    int w = r ? 1 : 0;
                    hsi_stats_opts so = {.mask = masked ? &mk : NULL, .n_threads = threads[r], .tile_lines = 2};
                    hsi_pca_opts po = {.mask = so.mask, .n_threads = threads[r], .tile_lines = 5};
                    HSI_CHECK_OK(hsi_stats_compute(&s[w], &v, &so));
                    HSI_CHECK_OK(hsi_covariance(m[w], cv[w], &n[w], &v, NULL, &po));
                    if (r && (n[0] != n[1] || memcmp(m[0], m[1], bb) || memcmp(cv[0], cv[1], bb * (size_t)B_) ||
                              memcmp(s[0].mean, s[1].mean, bb) || memcmp(s[0].var, s[1].var, bb) ||
                              memcmp(s[0].min, s[1].min, bb) || memcmp(s[0].max, s[1].max, bb))) {
                        fprintf(stderr, "\n  %s %s mask %d: %d threads differ from 1", il_name[il],
                                k ? "f32" : "u16", masked, threads[r]);
                        bad++;
                    }
                    if (r) hsi_stats_free(&s[1]);
                    cases++;
                }
                hsi_stats_free(&s[0]);
            }
            hsi_view_release(&v);
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(cases, 48);
    for (int i = 0; i < 2; i++) {
        free(m[i]);
        free(cv[i]);
    }
    hsi_view_release(&mk);
}

/* A split pass (hsi_pass_split) as N processes would run it, here N
 * threads meeting at a barrier to combine their partials by elementwise max
 * (what MPI_Allreduce with MPI_MAX does): every part gets the unsplit
 * result, bit for bit, for N = 2, 3, 5 and 9 (more parts than the 8 chunks
 * of the 8-line cube: one part reads nothing). */
typedef struct split_world {
    pthread_barrier_t bar;
    double *acc;
    int64_t n;
    pthread_mutex_t lock;
} split_world;

static hsi_status split_exchange(void *ctx, double *v, int64_t n)
{
    split_world *w = ctx;
    pthread_mutex_lock(&w->lock);
    if (!w->acc) {
        w->acc = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) w->acc[i] = -INFINITY;
        w->n = n;
    }
    for (int64_t i = 0; i < n && n == w->n; i++) w->acc[i] = v[i] > w->acc[i] ? v[i] : w->acc[i];
    pthread_mutex_unlock(&w->lock);
    pthread_barrier_wait(&w->bar);
    memcpy(v, w->acc, sizeof(double) * (size_t)n);
    if (pthread_barrier_wait(&w->bar) == PTHREAD_BARRIER_SERIAL_THREAD) { /* all copied: reset */
        free(w->acc);
        w->acc = NULL;
    }
    pthread_barrier_wait(&w->bar);
    return HSI_OK;
}

typedef struct split_rank {
    split_world *w;
    hsi_pass_split sp;
    const hsi_view *cube, *mask;
    hsi_stats st;
    double mean[16], cov[256];
    int64_t n;
    hsi_status rc;
} split_rank;

static void *split_rank_main(void *p)
{
    split_rank *r = p;
    hsi_stats_opts so = {.mask = r->mask, .n_threads = 2, .split = &r->sp};
    r->rc = hsi_stats_covariance(&r->st, r->mean, r->cov, &r->n, r->cube, NULL, 0, &so);
    return NULL;
}

static void test_stats_split_parts(void)
{
    dims();
    CU_ASSERT_FATAL(B_ <= 16);
    int64_t N = L_ * S_;
    hsi_view mk = make_mask(ref("mask", N), L_, S_, HSI_U8);
    size_t bb = sizeof(double) * (size_t)B_;
    int bad = 0;
    for (int k = 0; k < 2; k++)
        for (int masked = 0; masked < 2; masked++) {
            hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, k ? HSI_F32 : HSI_U16, k ? BIP : BSQ, 0);
            hsi_stats ref_s;
            double ref_m[16], ref_c[256];
            int64_t ref_n = 0;
            hsi_stats_opts so = {.mask = masked ? &mk : NULL, .n_threads = 3};
            HSI_CHECK_OK(hsi_stats_covariance(&ref_s, ref_m, ref_c, &ref_n, &v, NULL, 0, &so));
            const int parts[4] = {2, 3, 5, 9};
            for (int q = 0; q < 4; q++) {
                int np = parts[q];
                split_world w = {.acc = NULL};
                pthread_barrier_init(&w.bar, NULL, (unsigned)np);
                pthread_mutex_init(&w.lock, NULL);
                split_rank r[9];
                pthread_t th[9];
                for (int i = 0; i < np; i++) {
                    r[i] = (split_rank){.w = &w, .sp = {i, np, split_exchange, &w}, .cube = &v,
                                        .mask = masked ? &mk : NULL};
                    pthread_create(&th[i], NULL, split_rank_main, &r[i]);
                }
                for (int i = 0; i < np; i++) pthread_join(th[i], NULL);
                for (int i = 0; i < np; i++) {
                    HSI_CHECK_OK(r[i].rc);
                    if (r[i].rc != HSI_OK) continue;
                    if (r[i].n != ref_n || memcmp(r[i].mean, ref_m, bb) || memcmp(r[i].cov, ref_c, bb * (size_t)B_) ||
                        memcmp(r[i].st.mean, ref_s.mean, bb) || memcmp(r[i].st.var, ref_s.var, bb) ||
                        memcmp(r[i].st.min, ref_s.min, bb) || memcmp(r[i].st.max, ref_s.max, bb) ||
                        memcmp(r[i].st.count, ref_s.count, sizeof(int64_t) * (size_t)B_)) {
                        fprintf(stderr, "\n  part %d of %d (%s, mask %d) differs from one process", i, np,
                                k ? "f32 bip" : "u16 bsq", masked);
                        bad++;
                    }
                    hsi_stats_free(&r[i].st);
                }
                pthread_barrier_destroy(&w.bar);
                pthread_mutex_destroy(&w.lock);
            }
            hsi_stats_free(&ref_s);
            hsi_view_release(&v);
        }
    CU_ASSERT_EQUAL(bad, 0);
    /* a histogram is not split; a split without an exchange is refused */
    hsi_view v = make_cube(ref("cube", -1), B_, L_, S_, HSI_U16, BSQ, 0);
    hsi_pass_split sp = {0, 2, split_exchange, NULL};
    hsi_stats_opts sh = {.hist_bins = 4, .split = &sp};
    hsi_stats s;
    CU_ASSERT_EQUAL(hsi_stats_compute(&s, &v, &sh), HSI_ERR_UNSUPPORTED);
    hsi_pass_split nox = {1, 2, NULL, NULL};
    hsi_stats_opts sn = {.split = &nox};
    CU_ASSERT_EQUAL(hsi_stats_compute(&s, &v, &sn), HSI_ERR_ARG);
    hsi_view_release(&v);
    hsi_view_release(&mk);
}

/* kernels/fastdiv.h against the hardware divide: every divisor up to 4096
 * and the powers of two and their neighbours, with numerators at both ends
 * of the range, around multiples of d and at random. */
static void test_fastdiv(void)
{
    uint64_t r = 12345;
    int64_t bad = 0, checked = 0;
    uint32_t ds[4096 + 3 * 31 + 4];
    int nd = 0;
    for (uint32_t d = 1; d <= 4096; d++) ds[nd++] = d;
    for (int k = 12; k < 31; k++) {
        ds[nd++] = (1u << k) - 1;
        ds[nd++] = 1u << k;
        ds[nd++] = (1u << k) + 1;
    }
    ds[nd++] = 0x7fffffffu;
    ds[nd++] = 121;
    ds[nd++] = 529 * 24;
    for (int a = 0; a < nd; a++) {
        uint32_t d = ds[a];
        hsi_fastdiv f = hsi_fastdiv_make(d);
        for (int t = 0; t < 200; t++) {
            uint32_t n;
            if (t < 8) n = (uint32_t)t;
            else if (t < 16) n = 0x7fffffffu - (uint32_t)(t - 8);
            else if (t < 64) {
                uint64_t q = (uint64_t)(t - 16) * 1000003u % (0x7fffffffu / d + 1);
                n = (uint32_t)(q * d + (uint64_t)(t % 3) - 1);
                if (n > 0x7fffffffu) n = (uint32_t)(q * d);
            } else {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                n = (uint32_t)(r >> 33);
            }
            checked++;
            if (hsi_fastdiv_q(f, n) != n / d) {
                if (bad++ < 5)
                    fprintf(stderr, "\n  fastdiv: %u / %u gave %u, not %u\n", n, d, hsi_fastdiv_q(f, n), n / d);
            }
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_TRUE(checked > 800000);
}

/* A (b, l, s) uint16 view with these byte strides (no buffer: the plan
 * reads shapes and strides only). */
static hsi_view plan_view(int64_t nb, int64_t L, int64_t S, int64_t sb, int64_t sl, int64_t ss)
{
    hsi_view v;
    memset(&v, 0, sizeof v);
    v.dtype = HSI_U16;
    v.ndim = 3;
    v.shape[0] = nb, v.shape[1] = L, v.shape[2] = S;
    v.strides[0] = sb, v.strides[1] = sl, v.strides[2] = ss;
    return v;
}

/* kernels/tile_plan.h: how each host layout goes to the GPU. Each plan's
 * tile fits 64 MiB (or is one line), and one more line would not fit; a
 * span's bytes (modes 1 and 2) are checked against the farthest element
 * of the tile found by walking its corners; cropped views whose spans are
 * mostly other bytes are packed on the host (mode 3): one band of a BIL
 * cube at 224 bands took 854 MiB a tile for 2000 lines of 1000 samples
 * before, and 4.2 GiB for 10000. */
static void test_tile_plan(void)
{
    const int64_t nb = 224, L = 10000, S = 1000, e = 2, cap = HSI_TILE_CAP;
    struct {
        const char *name;
        hsi_view v;
        int mode;
    } cases[] = {
        {"BSQ", plan_view(nb, L, S, L * S * e, S * e, e), 2},
        {"BIL", plan_view(nb, L, S, S * e, nb * S * e, e), 1},
        {"BIP", plan_view(nb, L, S, e, nb * S * e, nb * e), 1},
        {"BIL, half the bands", plan_view(nb / 2, L, S, S * e, nb * S * e, e), 1},
        {"BIL, one band", plan_view(1, L, S, S * e, nb * S * e, e), 3},
        {"BIP, 10 samples", plan_view(nb, L, 10, e, nb * S * e, nb * e), 3},
        {"BSQ, 10 samples", plan_view(nb, L, 10, L * S * e, S * e, e), 3},
        {"column-major (.mat)", plan_view(nb, L, S, L * S * e, e, L * e), 3},
        {"lines reversed", plan_view(nb, L, S, S * e, -nb * S * e, e), 3},
        {"one line over the cap", plan_view(nb, 4, 200000, 200000 * e, nb * 200000 * e, e), 1},
        {"one line", plan_view(nb, 1, S, S * e, nb * S * e, e), 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const hsi_view *v = &cases[k].v;
        int mode = -1;
        int64_t lines = 0, pitch, pitch1;
        hsi_tile_plan(v, 0, &mode, &lines);
        int64_t bytes = hsi_tile_bytes(v, mode, lines, &pitch);
        int64_t more = lines < v->shape[1] ? hsi_tile_bytes(v, mode, lines + 1, &pitch1) : 0;
        int bad = mode != cases[k].mode || lines < 1 || lines > v->shape[1] || (lines > 1 && bytes > cap) ||
                  (lines < v->shape[1] && more <= cap);
        if (mode == 1 || mode == 2) { /* the span against the tile's farthest element */
            int64_t far = 0;
            for (int c = 0; c < 8; c++) {
                int64_t o = ((c & 1) ? v->shape[0] - 1 : 0) * v->strides[0] +
                            ((c & 2) ? lines - 1 : 0) * v->strides[1] + ((c & 4) ? v->shape[2] - 1 : 0) * v->strides[2];
                far = o > far ? o : far;
            }
            if (mode == 1) bad |= bytes != far + e;
            else bad |= pitch * v->shape[0] != bytes || pitch < far - (v->shape[0] - 1) * v->strides[0] + e;
        }
        if (mode == 3) bad |= bytes != v->shape[0] * lines * v->shape[2] * e;
        if (bad) {
            CU_FAIL("tile plan");
            fprintf(stderr, "\n  %s: mode %d (want %d), %lld lines, %lld bytes a tile, %lld with one more\n",
                    cases[k].name, mode, cases[k].mode, (long long)lines, (long long)bytes, (long long)more);
        }
    }
    /* lines asked for: kept, at most the cube's */
    int mode;
    int64_t lines;
    hsi_tile_plan(&cases[0].v, 7, &mode, &lines);
    CU_ASSERT_EQUAL(lines, 7);
    hsi_tile_plan(&cases[0].v, 2 * L, &mode, &lines);
    CU_ASSERT_EQUAL(lines, L);
}

HSI_SUITE(kernels_fastdiv, 0, {"fastdiv = the hardware divide (n, d < 2^31)", test_fastdiv})
HSI_SUITE(kernels_tile_plan, 0, {"GPU tile plan: modes, 64 MiB tiles, sparse spans packed", test_tile_plan})
HSI_SUITE(kernels_stats, 0, {"stats: 3 dtypes x 3 interleaves x 2 byte orders x 1-3 threads", test_stats_layouts},
          {"stats: naive reference path", test_stats_reference_path},
          {"stats: 16-bit rows of 1 to 1000 values, extremes in every lane, vs the reference",
           test_stats_16bit_rows},
          {"stats: crop + band subset views", test_stats_subview}, {"stats: pixel masks", test_stats_mask},
          {"stats: data ignore value", test_stats_ignore},
          {"stats: histogram + percentiles", test_stats_histogram},
          {"stats: mmap'd cube, tiles released", test_mapped_cube},
          {"stats + covariance in one read == two passes, bit for bit", test_stats_covariance_one_pass},
          {"stats and covariance: the same bits on 1, 2, 3, 5 threads", test_stats_threads_same_bits},
          {"stats + covariance split across 2, 3, 5, 9 parts == one process", test_stats_split_parts})
HSI_SUITE(kernels_normalize, 0, {"normalize: zscore/minmax/global/l2, unfused + fused", test_normalize_modes},
          {"normalize: gain/offset/reflectance scale", test_normalize_calibration})
HSI_SUITE(kernels_pca, 0, {"pca: sklearn fit on 18 layouts + scores", test_pca_fit_layouts},
          {"pca: whiten, inverse, variance fraction", test_pca_whiten_inverse_fraction},
          {"pca: mask, zscore chain, band subset", test_pca_mask_norm_subset},
          {"pca: save/load + corrupt files", test_pca_save_load},
          {"pca: covariance of a 15k-pixel cube vs naive double", test_covariance_precision},
          {"pca: covariance of 8/16-bit bands by exact int16 products vs int64 sums", test_covariance_ints})
HSI_SUITE(kernels_fused, 0, {"fused == unfused (modes, subsets, ignore, layouts, sink)", test_fused_equals_unfused},
          {"fused: outputs over 64 MiB (non-temporal stores) == the sink's tiles, bit for bit",
           test_fused_streamed_output},
          {"fused PCA: AVX-512 tiles and sgemm == unfused, 1/17/40 components, every layout",
           test_fused_projection_widths})
HSI_SUITE(kernels_bands, 0, {"bands: spec, wavelengths, bbl", test_bands_parse},
          {"bands: variance ranking + OPBS vs numpy", test_bands_rank_opbs})

/* ------------------------------------------------------------ thread pool */

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kern_internal.h"

/* Each part adds 1 to its own counter (t of n), and part 0 of an outer call
 * runs a nested call (which must not wait on the pool it is running in). */
typedef struct pool_ctx {
    int counts[8];
    int nested;
} pool_ctx;

static hsi_status pool_inner(void *p, int t, int n)
{
    (void)n;
    __atomic_add_fetch(&((pool_ctx *)p)->counts[4 + t], 1, __ATOMIC_RELAXED);
    return HSI_OK;
}

static hsi_status pool_outer(void *p, int t, int n)
{
    pool_ctx *c = p;
    __atomic_add_fetch(&c->counts[t], 1, __ATOMIC_RELAXED);
    if (t == 0 && c->nested) return hsi_parallel(n, pool_inner, c);
    if (t == 2) return HSI_FAIL(HSI_ERR_ARG, "part %d of %d fails on purpose", t, n);
    return HSI_OK;
}

static void *pool_caller(void *p)
{
    int *bad = p;
    for (int r = 0; r < 300; r++) {
        pool_ctx c = {{0}, r % 2};
        int n = 1 + r % 4;
        hsi_status st = hsi_parallel(n, pool_outer, &c);
        /* part 2 fails when there is one; its message comes back */
        if ((n > 2) != (st != HSI_OK)) (*bad)++;
        if (st != HSI_OK && !strstr(hsi_last_error(), "fails on purpose")) (*bad)++;
        for (int t = 0; t < 4; t++) {
            if (c.counts[t] != (t < n)) (*bad)++;
            if (c.counts[4 + t] != (c.nested && t < n)) (*bad)++;
        }
    }
    return NULL;
}

/* The persistent pool: every part runs exactly once, from two threads calling
 * at the same time (one of them gets threads of its own), with nested calls
 * and failing parts. */
static void test_pool_concurrent(void)
{
    pthread_t th;
    int bad_a = 0, bad_b = 0;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, pool_caller, &bad_a), 0);
    pool_caller(&bad_b);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(bad_a, 0);
    CU_ASSERT_EQUAL(bad_b, 0);
}

/* After fork() the child has none of the pool's workers: a parallel call
 * there must start new ones, not wait for the parent's (which would hang;
 * the child is killed by an alarm after 20 s if it does). */
static void test_pool_after_fork(void)
{
    pool_ctx c = {{0}, 0};
    CU_ASSERT_EQUAL(hsi_parallel(2, pool_inner, &c), HSI_OK); /* the pool exists now */
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        alarm(20);
        pool_ctx k = {{0}, 0};
        int ok = hsi_parallel(4, pool_inner, &k) == HSI_OK;
        for (int t = 0; t < 4; t++) ok &= k.counts[4 + t] == 1;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* and the parent's pool still works */
    pool_ctx d = {{0}, 0};
    CU_ASSERT_EQUAL(hsi_parallel(3, pool_inner, &d), HSI_OK);
    CU_ASSERT(d.counts[4] == 1 && d.counts[5] == 1 && d.counts[6] == 1);
}

HSI_SUITE(kernels_pool, 0, {"thread pool: concurrent callers, nesting, errors", test_pool_concurrent},
          {"thread pool: a parallel call in a forked child", test_pool_after_fork})
