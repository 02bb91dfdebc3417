/* test_cuda.c — CPU/GPU parity of every CUDA launcher (kernels/cuda.h,
 * models/layers_cuda.h, models/model_cuda.h, pipeline/patches_cuda.h): random data, non-contiguous,
 * unaligned and byte-swapped views where the API takes views. The CPU code is
 * the reference; each comparison states its tolerance (the real Salinas-A
 * scene is in test_cuda_scene.c). Suites "cuda_*" need a device (inactive
 * without one; `make test-cuda` requires one). Suite "gpu_api_absent" runs
 * everywhere: without a device every entry point must say HSI_ERR_NO_CUDA. */
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "kernels/bands.h"
#include "core/cuda_plugin.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"
#include "kernels/stats.h"
#include "models/layers.h"
#include "models/layers_cuda.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"
#include "pipeline/patches.h"
#include "pipeline/patches_cuda.h"

/* ------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x1234567887654321ull;
static void rng_seed(uint64_t s) { g_rng = s * 0x9E3779B97F4A7C15ull + 1; }
static double urand(void) /* [0, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}
static void fill_uniform(float *a, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) a[i] = lo + (hi - lo) * (float)urand();
}

/* device copy of n floats (or bytes with dev_bytes) */
static void *dev_bytes(const void *h, size_t n)
{
    void *d = NULL;
    HSI_CHECK_OK(hsi_cuda_malloc(&d, n));
    if (h) HSI_CHECK_OK(hsi_cuda_upload(d, h, n));
    return d;
}
static float *dev_f32(const float *h, int64_t n) { return dev_bytes(h, sizeof(float) * (size_t)n); }
static float *dev_zero(int64_t n)
{
    float *z = calloc((size_t)n + 1, sizeof(float));
    float *d = dev_f32(z, n);
    free(z);
    return d;
}
static float *dev_fill(int64_t n, float value)
{
    float *h = malloc(sizeof(float) * (size_t)n + 4);
    for (int64_t i = 0; i < n; i++) h[i] = value;
    float *d = dev_f32(h, n);
    free(h);
    return d;
}
static float *host_of(const float *d, int64_t n)
{
    float *h = malloc(sizeof(float) * (size_t)n + 4);
    HSI_CHECK_OK(hsi_cuda_download(h, d, sizeof(float) * (size_t)n));
    return h;
}

/* max |got - want| <= atol + rtol * max|want|; prints the worst element */
int hsi_test_close_f32(const float *got, const float *want, int64_t n, double rtol, double atol,
                     const char *what)
{
    double mx = 0, worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= worst) || isnan(d)) {
            worst = isnan(d) ? INFINITY : d;
            wi = i;
        }
    }
    int ok = worst <= atol + rtol * mx;
    if (!ok)
        fprintf(stderr, "\n  %s: element %lld: got %.9g, want %.9g (max |want| %.4g, tol %.3g)\n",
                what, (long long)wi, (double)got[wi], (double)want[wi], mx, atol + rtol * mx);
    CU_ASSERT(ok);
    return ok;
}

/* ---------------------------------------------- raw cubes in any layout */

enum { BSQ = 0, BIL = 1, BIP = 2, COLMAJOR = 3 }; /* COLMAJOR: lines fastest, as a .mat cube */

/* A (B, L, S) cube of dtype dt stored in interleave il, byte-swapped when
 * sw, starting `lead` bytes into its buffer (lead = 1 gives unaligned
 * elements). Values: integers 0..3999 (ints) or normals*50+300 (floats);
 * every 17th element of band 1 is 0 (the ignore value of the tests). */
static hsi_view make_cube(int64_t B, int64_t L, int64_t S, hsi_dtype dt, int il, int sw, int lead,
                          uint64_t seed)
{
    int64_t e = (int64_t)hsi_dtype_size(dt), n = B * L * S;
    hsi_buffer *buf = NULL;
    HSI_CHECK_OK(hsi_buffer_alloc(&buf, (size_t)(n * e + lead), HSI_BUF_HOST));
    int64_t st[3];
    if (il == BSQ) st[0] = L * S * e, st[1] = S * e, st[2] = e;
    else if (il == BIL) st[0] = S * e, st[1] = B * S * e, st[2] = e;
    else if (il == BIP) st[0] = e, st[1] = S * B * e, st[2] = B * e;
    else st[0] = L * S * e, st[1] = e, st[2] = L * e;
    rng_seed(seed);
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++)
            for (int64_t s = 0; s < S; s++) {
                double v = hsi_dtype_is_float(dt) ? 300 + 50 * (urand() + urand() + urand() - 1.5)
                                                  : floor(urand() * 4000);
                if (b == 1 && (l * S + s) % 17 == 0) v = 0;
                char *p = (char *)buf->data + lead + b * st[0] + l * st[1] + s * st[2];
                hsi_convert(p, e, dt, sw, &v, 8, HSI_F64, 0, 1);
            }
    hsi_view v;
    int64_t shape[3] = {B, L, S};
    HSI_CHECK_OK(hsi_view_make(&v, buf, lead, dt, 3, shape, st, sw));
    hsi_buffer_release(buf);
    return v;
}

/* -------------------------------------------- suite: no device present */

static void test_absent(void)
{
    if (hsi_cuda_device_count() > 0) {
        /* with a device the gate must open */
        HSI_CHECK_OK(hsi_cuda_require("test"));
        return;
    }
    HSI_CHECK_FAILS(hsi_cuda_require("conv2d forward"), HSI_ERR_NO_CUDA, "conv2d forward");
    void *p = (void *)1;
    HSI_CHECK_FAILS(hsi_cuda_malloc(&p, 16), HSI_ERR_NO_CUDA, "device allocation");
    CU_ASSERT_PTR_NULL(p);
    hsi_cuda_free(NULL);
    hsi_view cube = make_cube(3, 4, 5, HSI_U16, BSQ, 0, 0, 1), dv;
    HSI_CHECK_FAILS(hsi_cuda_view_to_device(&dv, &cube, HSI_F32), HSI_ERR_NO_CUDA, "view to device");
    hsi_stats s;
    HSI_CHECK_FAILS(hsi_stats_compute_cuda(&s, &cube, NULL), HSI_ERR_NO_CUDA, "stats");
    hsi_norm nm;
    HSI_CHECK_OK(hsi_norm_identity(&nm, 3));
    float out[60];
    HSI_CHECK_FAILS(hsi_fused_run_cuda(out, 0, &cube, &nm, NULL, NULL), HSI_ERR_NO_CUDA, "fused");
    double mu[3], cv[9];
    HSI_CHECK_FAILS(hsi_covariance_cuda(mu, cv, NULL, &cube, &nm, NULL), HSI_ERR_NO_CUDA, "covariance");
    hsi_norm_free(&nm);
    hsi_conv_dims cd;
    int in[2] = {5, 5}, k[2] = {3, 3}, one[2] = {1, 1}, zero[2] = {0, 0};
    HSI_CHECK_OK(hsi_conv_dims_init(&cd, 2, 1, 1, 1, in, k, one, zero));
    HSI_CHECK_FAILS(hsi_conv_forward_cuda(out, out, out, NULL, &cd, NULL), HSI_ERR_NO_CUDA, "conv");
    HSI_CHECK_FAILS(hsi_conv_backward_cuda(out, NULL, NULL, out, out, out, &cd, NULL),
                    HSI_ERR_NO_CUDA, "conv");
    hsi_pool_dims pd;
    int two[2] = {2, 2};
    HSI_CHECK_OK(hsi_pool_dims_init(&pd, HSI_POOL_MAX, 2, 1, 1, in, two, two, zero));
    int32_t am[4];
    HSI_CHECK_FAILS(hsi_pool_forward_cuda(out, am, out, &pd), HSI_ERR_NO_CUDA, "pool");
    HSI_CHECK_FAILS(hsi_pool_backward_cuda(out, out, am, &pd), HSI_ERR_NO_CUDA, "pool");
    HSI_CHECK_FAILS(hsi_gap_forward_cuda(out, out, 1, 1, 4), HSI_ERR_NO_CUDA, "average pool");
    HSI_CHECK_FAILS(hsi_bn_forward_cuda(out, NULL, NULL, NULL, NULL, out, NULL, NULL, 1, 1, 4,
                                        1e-5f, 0.1f, 1),
                    HSI_ERR_NO_CUDA, "batch norm");
    HSI_CHECK_FAILS(hsi_relu_forward_cuda(out, out, 4), HSI_ERR_NO_CUDA, "relu");
    HSI_CHECK_FAILS(hsi_linear_forward_cuda(out, out, out, NULL, 1, 2, 2), HSI_ERR_NO_CUDA, "linear");
    int32_t t[2] = {0, 1};
    HSI_CHECK_FAILS(hsi_cross_entropy_forward_cuda(out, out + 1, out, out, t, NULL, 2, 2, 0, -100),
                    HSI_ERR_NO_CUDA, "cross-entropy");
    hsi_optim_config oc;
    hsi_optim_config_default(&oc, HSI_OPT_ADAMW);
    HSI_CHECK_FAILS(hsi_adam_step_cuda(out, out, out, out, 4, &oc, 1), HSI_ERR_NO_CUDA, "Adam");
    hsi_step_scalars sv = {0};
    HSI_CHECK_FAILS(hsi_step_scalars_set_cuda(&sv, &sv), HSI_ERR_NO_CUDA, "training step values");
    HSI_CHECK_FAILS(hsi_adam_step_dev_cuda(out, out, out, out, 4, &oc, &sv), HSI_ERR_NO_CUDA, "Adam");
    HSI_CHECK_FAILS(hsi_dropout_forward_dev_cuda(out, out, out, 4, 0.5, &sv, 0), HSI_ERR_NO_CUDA, "dropout");
    HSI_CHECK_FAILS(hsi_cuda_copy(out, out, 4), HSI_ERR_NO_CUDA, "device-to-device copy");
    HSI_CHECK_FAILS(hsi_cuda_scratch_begin(NULL, 0, 0), HSI_ERR_NO_CUDA, "device scratch");
    CU_ASSERT_EQUAL(hsi_cuda_scratch_end(), 0);
    int64_t px[1] = {0};
    HSI_CHECK_FAILS(hsi_patches_extract_cuda(out, &cube, 3, HSI_PAD_MIRROR, NULL, px, 1, 0, 0),
                    HSI_ERR_NO_CUDA, "patches");
    hsi_view_release(&cube);
}

HSI_SUITE(gpu_api_absent, 0, {"every CUDA entry point says HSI_ERR_NO_CUDA", test_absent})

/* --------------------------------------------------- memory and copies */

/* 0 under HSI_CUDA_NO_CACHE (compute-sanitizer's runs): every request is
 * then a cudaMalloc, and the counts of cache hits do not hold */
static int cache_on(void)
{
    const char *e = getenv("HSI_CUDA_NO_CACHE");
    return !(e && *e && strcmp(e, "0") != 0);
}

static void test_allocator(void)
{
    hsi_cuda_mem_stats a, b;
    void *p = NULL, *q = NULL;
    /* a negative size cast to size_t: refused, not rounded to 0 */
    CU_ASSERT_EQUAL(hsi_cuda_malloc(&p, sizeof(float) * (size_t)(int64_t)-1), HSI_ERR_OVERFLOW);
    CU_ASSERT_PTR_NULL(p);
    if (!cache_on()) { /* nothing cached to test (test_allocator_no_cache's case) */
        CU_PASS("HSI_CUDA_NO_CACHE set: no cache");
        return;
    }
    HSI_CHECK_OK(hsi_cuda_malloc(&p, 3000));
    hsi_cuda_free(p);
    hsi_cuda_mem_get(&a);
    /* same class (4096) again: served from the cache, same block */
    HSI_CHECK_OK(hsi_cuda_malloc(&q, 4000));
    hsi_cuda_mem_get(&b);
    CU_ASSERT_PTR_EQUAL(p, q);
    CU_ASSERT_EQUAL(b.n_cuda_malloc, a.n_cuda_malloc);
    CU_ASSERT_EQUAL(b.n_requests, a.n_requests + 1);
    CU_ASSERT_EQUAL(b.in_use_bytes, a.in_use_bytes + 4096);
    /* a steady-state loop of the same requests never reaches cudaMalloc */
    for (int it = 0; it < 3; it++) {
        void *x[4];
        for (int i = 0; i < 4; i++) HSI_CHECK_OK(hsi_cuda_malloc(&x[i], (size_t)(1000 << (3 * i))));
        for (int i = 0; i < 4; i++) hsi_cuda_free(x[i]);
        if (it == 0) hsi_cuda_mem_get(&a);
    }
    hsi_cuda_mem_get(&b);
    CU_ASSERT_EQUAL(b.n_cuda_malloc, a.n_cuda_malloc);
    hsi_cuda_free(q);
    hsi_cuda_cache_trim();
    hsi_cuda_mem_get(&b);
    CU_ASSERT_EQUAL(b.cached_bytes, 0);
}

/* HSI_CUDA_NO_CACHE=1 (read at every request): exact cudaMalloc and
 * cudaFree, nothing cached; unset, the cache again. The caller's setting
 * is put back after (the suites that follow run as asked). */
static void test_allocator_no_cache(void)
{
    hsi_cuda_mem_stats a, b;
    void *p = NULL;
    char keep[64] = "";
    if (getenv("HSI_CUDA_NO_CACHE")) snprintf(keep, sizeof keep, "%s", getenv("HSI_CUDA_NO_CACHE"));
    hsi_cuda_mem_get(&a);
    setenv("HSI_CUDA_NO_CACHE", "1", 1);
    HSI_CHECK_OK(hsi_cuda_malloc(&p, 3000));
    hsi_cuda_mem_get(&b);
    CU_ASSERT_EQUAL(b.n_cuda_malloc, a.n_cuda_malloc + 1);
    CU_ASSERT_EQUAL(b.in_use_bytes, a.in_use_bytes + 3000); /* not rounded to 4096 */
    hsi_cuda_free(p);
    hsi_cuda_mem_get(&b);
    CU_ASSERT_EQUAL(b.n_cuda_free, a.n_cuda_free + 1);
    CU_ASSERT_EQUAL(b.cached_bytes, a.cached_bytes);
    CU_ASSERT_EQUAL(b.in_use_bytes, a.in_use_bytes);
    unsetenv("HSI_CUDA_NO_CACHE");
    HSI_CHECK_OK(hsi_cuda_malloc(&p, 3000));
    hsi_cuda_free(p);
    hsi_cuda_mem_get(&b);
    CU_ASSERT_EQUAL(b.cached_bytes, a.cached_bytes + 4096);
    if (keep[0]) setenv("HSI_CUDA_NO_CACHE", keep, 1);
}

/* A block written on stream A and freed there, then handed to stream B
 * (the same block: no cudaMalloc) and read back on B: B waits for A's
 * work before the free, so the bytes are A's. Two host threads' worth of
 * streams on one thread, switched with hsi_cuda_set_stream. A's work is
 * long (eight copies of zeros, then the pattern, all from page-locked
 * memory, so each copy is queued, not staged by the host) and B's read
 * short: without the wait B would read zeros. */
static void test_allocator_streams(void)
{
    const hsi_cuda_plugin *cu = NULL;
    HSI_CHECK_OK(hsi_cuda_plugin_require(&cu, "allocator stream test"));
    void *sa = NULL, *sb = NULL;
    HSI_CHECK_OK(cu->stream_create(&sa));
    HSI_CHECK_OK(cu->stream_create(&sb));
    const size_t n = (size_t)48 << 20;
    hsi_buffer *hb = NULL, *zb = NULL, *bb = NULL;
    HSI_CHECK_OK(hsi_buffer_alloc(&hb, n, HSI_BUF_PINNED));
    HSI_CHECK_OK(hsi_buffer_alloc(&zb, n, HSI_BUF_PINNED));
    HSI_CHECK_OK(hsi_buffer_alloc(&bb, n, HSI_BUF_PINNED));
    uint8_t *host = hb->data, *back = bb->data;
    for (size_t i = 0; i < n; i++) host[i] = (uint8_t)(i * 2654435761u >> 13);
    memset(zb->data, 0, n);
    memset(back, 0xAB, n);
    void *prev = hsi_cuda_set_stream(sa);
    void *p = NULL, *q = NULL;
    HSI_CHECK_OK(hsi_cuda_malloc(&p, n));
    for (int k = 0; k < 8; k++) HSI_CHECK_OK(cu->memcpy_async(p, zb->data, n, 0, sa));
    HSI_CHECK_OK(cu->memcpy_async(p, host, n, 0, sa));
    hsi_cuda_free(p); /* A's copies are still running */
    hsi_cuda_mem_stats a, b;
    hsi_cuda_mem_get(&a);
    hsi_cuda_set_stream(sb);
    HSI_CHECK_OK(hsi_cuda_malloc(&q, n));
    hsi_cuda_mem_get(&b);
    if (cache_on()) { /* the same block, from the cache */
        CU_ASSERT_PTR_EQUAL(q, p);
        CU_ASSERT_EQUAL(b.n_cuda_malloc, a.n_cuda_malloc);
    }
    HSI_CHECK_OK(cu->memcpy_async(back, q, n, 1, sb));
    HSI_CHECK_OK(hsi_cuda_sync());
    CU_ASSERT_EQUAL(memcmp(back, host, n), 0);
    hsi_cuda_free(q);
    hsi_cuda_set_stream(prev);
    cu->stream_destroy(sa);
    cu->stream_destroy(sb);
    hsi_buffer_release(hb);
    hsi_buffer_release(zb);
    hsi_buffer_release(bb);
}

/* A byte-swapped BIP u16 view, band-sliced: to the device as float32 and
 * back equals hsi_view_contiguous on the host. */
static void test_view_copies(void)
{
    hsi_view cube = make_cube(7, 9, 11, HSI_U16, BIP, 1, 0, 5), sub, want, dv, back;
    HSI_CHECK_OK(hsi_view_slice(&sub, &cube, 0, 1, 7, 2));
    HSI_CHECK_OK(hsi_view_contiguous(&want, &sub, HSI_F32));
    HSI_CHECK_OK(hsi_cuda_view_to_device(&dv, &sub, HSI_F32));
    CU_ASSERT_EQUAL(dv.buf->kind, HSI_BUF_DEVICE);
    CU_ASSERT_EQUAL(dv.dtype, HSI_F32);
    HSI_CHECK_OK(hsi_cuda_view_to_host(&back, &dv));
    CU_ASSERT_EQUAL(memcmp(back.buf->data, want.buf->data, (size_t)hsi_view_nbytes(&want)), 0);
    /* a non-packed device view is refused, not copied wrong */
    hsi_view strided;
    HSI_CHECK_OK(hsi_view_slice(&strided, &dv, 2, 0, 11, 2));
    hsi_view bad;
    HSI_CHECK_FAILS(hsi_cuda_view_to_host(&bad, &strided), HSI_ERR_UNSUPPORTED, "not packed");
    hsi_view_release(&strided);
    hsi_view_release(&back);
    hsi_view_release(&dv);
    hsi_view_release(&want);
    hsi_view_release(&sub);
    hsi_view_release(&cube);
}

/* The scratch of a graph capture (hsi_cuda_scratch_begin): requests carved
 * out of the caller's block, last in first out, at the same offsets when
 * repeated, no cache request; a measurement (no block) gives the peak of
 * the live requests; strict refuses what does not fit, naming the sizes;
 * what does not fit otherwise comes from the cache and is freed back to it. */
static void test_scratch(void)
{
    void *a = NULL, *b = NULL, *c = NULL, *block = NULL;
    hsi_cuda_mem_stats m0, m1;
    /* measure: a (1000 -> 1024) and b (300 -> 512) live together, then c (5000 -> 5120) alone */
    HSI_CHECK_OK(hsi_cuda_scratch_begin(NULL, 0, 0));
    HSI_CHECK_FAILS(hsi_cuda_scratch_begin(NULL, 0, 0), HSI_ERR_ARG, "already set");
    HSI_CHECK_OK(hsi_cuda_malloc(&a, 1000));
    HSI_CHECK_OK(hsi_cuda_malloc(&b, 300));
    hsi_cuda_free(b);
    hsi_cuda_free(a);
    HSI_CHECK_OK(hsi_cuda_malloc(&c, 5000));
    hsi_cuda_free(c);
    CU_ASSERT_EQUAL(hsi_cuda_scratch_end(), 5120);
    HSI_CHECK_OK(hsi_cuda_malloc(&block, 8192));
    for (int rep = 0; rep < 2; rep++) {
        hsi_cuda_mem_get(&m0);
        HSI_CHECK_OK(hsi_cuda_scratch_begin(block, 8192, 1));
        HSI_CHECK_OK(hsi_cuda_malloc(&a, 1000));
        HSI_CHECK_OK(hsi_cuda_malloc(&b, 300));
        CU_ASSERT_PTR_EQUAL(a, block);
        CU_ASSERT_PTR_EQUAL(b, (char *)block + 1024);
        hsi_cuda_free(a); /* out of order: b still holds its place */
        HSI_CHECK_OK(hsi_cuda_malloc(&c, 100));
        CU_ASSERT_PTR_EQUAL(c, (char *)block + 1536);
        hsi_cuda_free(c);
        hsi_cuda_free(b); /* now both pop */
        HSI_CHECK_OK(hsi_cuda_malloc(&c, 8000));
        CU_ASSERT_PTR_EQUAL(c, block);
        HSI_CHECK_FAILS(hsi_cuda_malloc(&a, 512), HSI_ERR_NOMEM, "512 bytes does not fit");
        hsi_cuda_free(c);
        CU_ASSERT_EQUAL(hsi_cuda_scratch_end(), 8192 + 512);
        hsi_cuda_mem_get(&m1);
        CU_ASSERT_EQUAL(m1.n_requests, m0.n_requests); /* the cache was not asked */
    }
    /* not strict: what does not fit comes from the cache, and goes back to it */
    HSI_CHECK_OK(hsi_cuda_scratch_begin(block, 8192, 0));
    HSI_CHECK_OK(hsi_cuda_malloc(&a, 6000));
    HSI_CHECK_OK(hsi_cuda_malloc(&b, 6000));
    CU_ASSERT_PTR_EQUAL(a, block);
    CU_ASSERT_PTR_NOT_EQUAL(b, (char *)block + 6144);
    hsi_cuda_mem_get(&m0);
    hsi_cuda_free(b);
    hsi_cuda_mem_get(&m1);
    CU_ASSERT(m1.in_use_bytes < m0.in_use_bytes);
    hsi_cuda_free(a);
    CU_ASSERT_EQUAL(hsi_cuda_scratch_end(), 12288);
    hsi_cuda_free(block);
}

HSI_SUITE(cuda_mem, HSI_SUITE_NEEDS_CUDA, {"caching allocator", test_allocator},
          {"scratch for a graph capture", test_scratch},
          {"HSI_CUDA_NO_CACHE: exact cudaMalloc and cudaFree", test_allocator_no_cache},
          {"a block freed on one stream, reused on another", test_allocator_streams},
          {"view copies (swapped, strided, converted)", test_view_copies})

/* ---------------------------------------------------------- statistics */

/* tolerances: count/min/max exact; mean and var to 1e-10 of the band's
 * scale (both are double computations in a different order) */
void hsi_test_cuda_check_stats(const hsi_stats *g, const hsi_stats *w, const char *what)
{
    int bad = 0;
    for (int64_t b = 0; b < w->n_bands; b++) {
        double sc = fabs(w->mean[b]) + w->std[b] + 1e-300;
        bad += g->count[b] != w->count[b];
        bad += g->min[b] != w->min[b] || g->max[b] != w->max[b];
        bad += !(fabs(g->mean[b] - w->mean[b]) <= 1e-10 * sc);
        bad += !(fabs(g->var[b] - w->var[b]) <= 1e-9 * (w->var[b] + 1e-300));
        bad += !(fabs(g->var_ddof1[b] - w->var_ddof1[b]) <= 1e-9 * (w->var_ddof1[b] + 1e-300));
        if (bad && b == 0)
            fprintf(stderr, "\n  %s band 0: count %lld/%lld mean %.15g/%.15g var %.15g/%.15g\n",
                    what, (long long)g->count[b], (long long)w->count[b], g->mean[b], w->mean[b],
                    g->var[b], w->var[b]);
    }
    if (bad) fprintf(stderr, "\n  %s: %d mismatches\n", what, bad);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_stats_layouts(void)
{
    const hsi_dtype dts[4] = {HSI_U16, HSI_I16, HSI_F32, HSI_F64};
    /* mask: a diagonal band of pixels */
    int64_t B = 6, L = 37, S = 23;
    hsi_view mask;
    int64_t ms[2] = {L, S};
    HSI_CHECK_OK(hsi_view_alloc(&mask, HSI_U8, 2, ms, HSI_BUF_HOST));
    for (int64_t i = 0; i < L * S; i++) ((uint8_t *)mask.buf->data)[i] = (i % 5) != 0;
    for (int d = 0; d < 4; d++)
        for (int il = 0; il < 4; il++) { /* COLMAJOR: tiles packed on the host, capped by bytes */
            int sw = (d + il) & 1, lead = (il == BIL) ? 1 : 0; /* BIL cases are unaligned */
            hsi_view v = make_cube(B, L, S, dts[d], il, sw, lead, 10 + d * 3 + il);
            for (int variant = 0; variant < 2; variant++) {
                hsi_stats_opts o = {0};
                o.tile_lines = 8; /* several tiles, a short last one */
                if (variant) o.mask = &mask, o.has_ignore = 1, o.ignore_value = 0;
                hsi_stats want, got;
                HSI_CHECK_OK(hsi_stats_compute_ref(&want, &v, &o));
                HSI_CHECK_OK(hsi_stats_compute_cuda(&got, &v, &o));
                hsi_test_cuda_check_stats(&got, &want, "stats host cube");
                hsi_stats_free(&got);
                hsi_stats_free(&want);
            }
            hsi_view_release(&v);
        }
    hsi_view_release(&mask);
}

/* The raw bytes of a host cube view copied to the device with the same
 * offset, strides and byte order (an odd offset makes unaligned elements). */
static hsi_view raw_to_device(const hsi_view *v)
{
    hsi_buffer *db = NULL;
    hsi_view out;
    HSI_CHECK_OK(hsi_cuda_buffer(&db, v->buf->size));
    HSI_CHECK_OK(hsi_cuda_upload(db->data, v->buf->data, v->buf->size));
    HSI_CHECK_OK(hsi_view_make(&out, db, v->offset, v->dtype, v->ndim, v->shape, v->strides,
                               v->swapped));
    hsi_buffer_release(db);
    return out;
}

/* A cube already on the device, read in place (also unaligned and
 * byte-swapped); a reversed (negative stride) host view goes through the
 * packed-copy path. */
static void test_stats_device_and_reversed(void)
{
    hsi_view v = make_cube(5, 20, 30, HSI_U16, BSQ, 0, 0, 77), dv, rev;
    HSI_CHECK_OK(hsi_cuda_view_to_device(&dv, &v, HSI_DT_INVALID));
    hsi_stats want, got;
    HSI_CHECK_OK(hsi_stats_compute_ref(&want, &v, NULL));
    HSI_CHECK_OK(hsi_stats_compute_cuda(&got, &dv, NULL));
    hsi_test_cuda_check_stats(&got, &want, "stats device cube");
    hsi_stats_free(&got);
    hsi_stats_free(&want);
    for (int k = 0; k < 2; k++) {
        hsi_view h = make_cube(4, 9, 13, k ? HSI_F32 : HSI_I16, k ? BIP : BIL, 1, 1, 78 + k);
        hsi_view hd = raw_to_device(&h);
        hsi_stats_opts o = {.has_ignore = 1, .ignore_value = 0, .tile_lines = 4};
        HSI_CHECK_OK(hsi_stats_compute_ref(&want, &h, &o));
        HSI_CHECK_OK(hsi_stats_compute_cuda(&got, &hd, &o));
        hsi_test_cuda_check_stats(&got, &want, "stats unaligned swapped device cube");
        hsi_stats_free(&got);
        hsi_stats_free(&want);
        hsi_view_release(&hd);
        hsi_view_release(&h);
    }
    int64_t rst[3] = {v.strides[0], -v.strides[1], v.strides[2]};
    HSI_CHECK_OK(hsi_view_make(&rev, v.buf, v.offset + 19 * v.strides[1], v.dtype, 3, v.shape, rst,
                               v.swapped));
    HSI_CHECK_OK(hsi_stats_compute_ref(&want, &rev, NULL));
    HSI_CHECK_OK(hsi_stats_compute_cuda(&got, &rev, NULL));
    hsi_test_cuda_check_stats(&got, &want, "stats reversed lines");
    hsi_stats_free(&got);
    hsi_stats_free(&want);
    hsi_stats_opts o = {.hist_bins = 10};
    HSI_CHECK_FAILS(hsi_stats_compute_cuda(&got, &v, &o), HSI_ERR_UNSUPPORTED, "histograms");
    hsi_view_release(&rev);
    hsi_view_release(&dv);
    hsi_view_release(&v);
}

HSI_SUITE(cuda_stats, HSI_SUITE_NEEDS_CUDA,
          {"dtypes x interleaves x byte order, mask, ignore value", test_stats_layouts},
          {"device cube in place, reversed view, refusals", test_stats_device_and_reversed})

/* ---------------------------------------------------------- fused pass */

typedef struct sink_buf {
    float *all;
    int64_t L, calls, next_line;
    int bad_order;
} sink_buf;

static hsi_status collect(void *ctx, const float *tile, int64_t line0, int64_t n_lines,
                          int64_t n_out, int64_t n_samples, int pixel_major)
{
    sink_buf *s = ctx;
    s->calls++;
    s->bad_order += line0 != s->next_line;
    s->next_line = line0 + n_lines;
    int64_t npix = n_lines * n_samples;
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t p = 0; p < npix; p++)
            s->all[o * s->L * n_samples + line0 * n_samples + p] =
                pixel_major ? tile[p * n_out + o] : tile[o * npix + p];
    return HSI_OK;
}

/* GPU vs CPU fused pass on cube v with norm/pca: host output both layouts,
 * device output, sink. Tolerance: 1e-4 of the output's largest magnitude
 * (both float32; the CPU pass itself is within 1e-5 of the double chain). */
void hsi_test_cuda_fused_compare(const hsi_view *v, const hsi_norm *nm, const hsi_pca *p, int64_t tile,
                          const char *what)
{
    int64_t L = v->shape[1], S = v->shape[2], no = hsi_fused_n_out(nm, p), N = no * L * S;
    float *want = malloc(sizeof(float) * (size_t)N), *got = malloc(sizeof(float) * (size_t)N);
    for (int pm = 0; pm < 2; pm++) {
        hsi_fused_opts fo = {.pixel_major = pm, .n_threads = 2};
        HSI_CHECK_OK(hsi_fused_run(want, v, nm, p, &fo));
        fo.tile_lines = tile;
        memset(got, 0xff, sizeof(float) * (size_t)N);
        HSI_CHECK_OK(hsi_fused_run_cuda(got, 0, v, nm, p, &fo));
        hsi_test_close_f32(got, want, N, 1e-4, 0, what);
        float *d = dev_zero(N);
        HSI_CHECK_OK(hsi_fused_run_cuda(d, 1, v, nm, p, &fo));
        float *h = host_of(d, N);
        hsi_test_close_f32(h, want, N, 1e-4, 0, what);
        free(h);
        hsi_cuda_free(d);
    }
    /* band-major reference for the sink */
    hsi_fused_opts fo = {.pixel_major = 0};
    HSI_CHECK_OK(hsi_fused_run(want, v, nm, p, &fo));
    sink_buf sb = {got, L, 0, 0, 0};
    hsi_fused_opts so = {.pixel_major = 1, .tile_lines = tile, .sink = collect, .sink_ctx = &sb};
    HSI_CHECK_OK(hsi_fused_run_cuda(NULL, 0, v, nm, p, &so));
    CU_ASSERT_EQUAL(sb.calls, (L + tile - 1) / tile);
    CU_ASSERT_EQUAL(sb.bad_order, 0);
    hsi_test_close_f32(got, want, N, 1e-4, 0, what);
    free(want);
    free(got);
}

static void test_fused_layouts(void)
{
    const hsi_dtype dts[3] = {HSI_U16, HSI_I16, HSI_F64};
    int64_t B = 9, L = 21, S = 17;
    int64_t *bands = NULL, nb = 0;
    HSI_CHECK_OK(hsi_bands_parse(&bands, &nb, "1-3,5,7-", B));
    const hsi_norm_mode modes[3] = {HSI_NORM_ZSCORE, HSI_NORM_L2, HSI_NORM_MINMAX};
    for (int d = 0; d < 3; d++)
        for (int il = 0; il < 4; il++) {
            hsi_view v = make_cube(B, L, S, dts[d], il, (d + il) & 1, il == BIP ? 1 : 0, 40 + d * 3 + il);
            hsi_stats s;
            hsi_stats_opts so = {.has_ignore = 1, .ignore_value = 0};
            HSI_CHECK_OK(hsi_stats_compute(&s, &v, &so));
            hsi_norm nm;
            HSI_CHECK_OK(hsi_norm_build(&nm, modes[(d + il) % 3], B, bands, nb, &s, NULL, 1, 0));
            hsi_test_cuda_fused_compare(&v, &nm, NULL, 4, "fused, normalisation only");
            hsi_pca p;
            hsi_pca_opts po = {.n_components = 3, .whiten = d == 2};
            HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &po));
            hsi_test_cuda_fused_compare(&v, NULL, &p, 5, "fused, PCA");
            hsi_pca_free(&p);
            hsi_norm_free(&nm);
            hsi_stats_free(&s);
            hsi_view_release(&v);
        }
    free(bands);
}

/* The projection kernel's accumulator widths (8, 16, 32, 64 components)
 * and its own loaders (uint8, float32, aligned, native order), and k = 65,
 * beyond it (normalisation kernel + sgemm) */
static void test_fused_widths(void)
{
    const hsi_dtype dts[2] = {HSI_U8, HSI_F32};
    const int64_t ks[5] = {5, 12, 30, 64, 65};
    int64_t B = 70, L = 9, S = 13;
    for (int d = 0; d < 2; d++) {
        hsi_view v = make_cube(B, L, S, dts[d], d ? BSQ : BIP, 0, 0, 70 + d);
        hsi_stats s;
        HSI_CHECK_OK(hsi_stats_compute(&s, &v, NULL));
        hsi_norm nm;
        HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B, NULL, B, &s, NULL, 0, 0));
        for (int i = 0; i < 5; i++) {
            hsi_pca p;
            hsi_pca_opts po = {.n_components = ks[i], .whiten = i & 1};
            HSI_CHECK_OK(hsi_pca_fit(&p, &v, &nm, &po));
            hsi_test_cuda_fused_compare(&v, NULL, &p, 4, "fused, PCA widths");
            hsi_pca_free(&p);
        }
        hsi_norm_free(&nm);
        hsi_stats_free(&s);
        hsi_view_release(&v);
    }
}

/* v's statistics on the CPU, a z-score over every band and a PCA of k
 * components fitted after it (the fused pass's usual inputs) */
static void fit_zscore_pca(const hsi_view *v, int64_t k, hsi_stats *s, hsi_norm *nm, hsi_pca *p)
{
    const int nb = (int)v->shape[0];
    HSI_CHECK_OK(hsi_stats_compute(s, v, NULL));
    HSI_CHECK_OK(hsi_norm_build(nm, HSI_NORM_ZSCORE, nb, NULL, nb, s, NULL, 0, 0));
    hsi_pca_opts po = {.n_components = k};
    HSI_CHECK_OK(hsi_pca_fit(p, v, nm, &po));
}

static void test_fused_device_cube(void)
{
    /* unaligned, byte-swapped, pixel-major raw bytes on the device */
    hsi_view v = make_cube(8, 16, 19, HSI_F32, BIP, 1, 1, 91);
    hsi_view dv = raw_to_device(&v);
    hsi_stats s;
    hsi_norm nm;
    hsi_pca p;
    fit_zscore_pca(&v, 4, &s, &nm, &p);
    int64_t N = 4 * 16 * 19;
    float *want = malloc(sizeof(float) * (size_t)N);
    HSI_CHECK_OK(hsi_fused_run(want, &v, NULL, &p, NULL));
    float *d = dev_zero(N);
    hsi_fused_opts fo = {.tile_lines = 3};
    HSI_CHECK_OK(hsi_fused_run_cuda(d, 1, &dv, NULL, &p, &fo));
    float *h = host_of(d, N);
    hsi_test_close_f32(h, want, N, 1e-4, 0, "fused, device cube");
    free(h);
    hsi_cuda_free(d);
    free(want);
    hsi_pca_free(&p);
    hsi_norm_free(&nm);
    hsi_stats_free(&s);
    hsi_view_release(&dv);
    hsi_view_release(&v);
}

/* A host cube of many tiles through the tile stream on one stream
 * (HSI_CUDA_TILE_STREAMS=1: copies and kernels in order) and on three (the
 * copies in and out on their own streams): the fused pass's output (both
 * layouts), the statistics and the covariance the same bits. */
static void test_tile_streams(void)
{
    hsi_view v = make_cube(12, 37, 23, HSI_U16, BIL, 1, 0, 77);
    hsi_stats s, g[2];
    hsi_norm nm;
    hsi_pca p;
    fit_zscore_pca(&v, 4, &s, &nm, &p);
    int64_t N = 12 * 37 * 23;
    float *out[2][2];
    double mu[2][12], cv[2][144];
    for (int m = 0; m < 2; m++) {
        if (m == 0) setenv("HSI_CUDA_TILE_STREAMS", "1", 1);
        else unsetenv("HSI_CUDA_TILE_STREAMS");
        for (int pm = 0; pm < 2; pm++) {
            hsi_fused_opts fo = {.pixel_major = pm, .tile_lines = 3};
            out[m][pm] = malloc(sizeof(float) * (size_t)N);
            HSI_CHECK_OK(hsi_fused_run_cuda(out[m][pm], 0, &v, pm ? NULL : &nm, pm ? &p : NULL, &fo));
        }
        hsi_stats_opts so = {.tile_lines = 3};
        HSI_CHECK_OK(hsi_stats_compute_cuda(&g[m], &v, &so));
        hsi_pca_opts co = {.tile_lines = 3};
        HSI_CHECK_OK(hsi_covariance_cuda(mu[m], cv[m], NULL, &v, &nm, &co));
    }
    unsetenv("HSI_CUDA_TILE_STREAMS");
    CU_ASSERT_EQUAL(memcmp(out[0][0], out[1][0], sizeof(float) * (size_t)N), 0);
    CU_ASSERT_EQUAL(memcmp(out[0][1], out[1][1], sizeof(float) * (size_t)(4 * 37 * 23)), 0);
    CU_ASSERT_EQUAL(memcmp(g[0].mean, g[1].mean, sizeof(double) * 12), 0);
    CU_ASSERT_EQUAL(memcmp(g[0].var, g[1].var, sizeof(double) * 12), 0);
    CU_ASSERT_EQUAL(memcmp(mu[0], mu[1], sizeof mu[0]), 0);
    CU_ASSERT_EQUAL(memcmp(cv[0], cv[1], sizeof cv[0]), 0);
    /* and the CPU's statistics */
    hsi_test_cuda_check_stats(&g[1], &s, "tile streams");
    for (int m = 0; m < 2; m++) {
        free(out[m][0]);
        free(out[m][1]);
        hsi_stats_free(&g[m]);
    }
    hsi_pca_free(&p);
    hsi_norm_free(&nm);
    hsi_stats_free(&s);
    hsi_view_release(&v);
}

HSI_SUITE(cuda_fused, HSI_SUITE_NEEDS_CUDA,
          {"dtypes x interleaves x byte order, ignore fill, modes, PCA", test_fused_layouts},
          {"PCA of 5 to 65 components, uint8 and float32", test_fused_widths},
          {"device cube, device output", test_fused_device_cube},
          {"the tile stream on one stream and on three: the same bits", test_tile_streams})

/* ------------------------------------------------------------- patches */

static void test_patches(void)
{
    int64_t C = 5, L = 13, S = 11, n = 40;
    hsi_view host;
    int64_t sh[3] = {L, S, C}; /* stored pixel-major, viewed (C, L, S) */
    HSI_CHECK_OK(hsi_view_alloc(&host, HSI_F32, 3, sh, HSI_BUF_HOST));
    rng_seed(3);
    fill_uniform(host.buf->data, C * L * S, -2, 2);
    int perm[3] = {2, 0, 1};
    hsi_view cube, dcube;
    HSI_CHECK_OK(hsi_view_permute(&cube, &host, perm));
    /* the device copy keeps the pixel-major strides: build it by hand */
    hsi_buffer *db = NULL;
    HSI_CHECK_OK(hsi_cuda_buffer(&db, sizeof(float) * (size_t)(C * L * S)));
    HSI_CHECK_OK(hsi_cuda_upload(db->data, host.buf->data, sizeof(float) * (size_t)(C * L * S)));
    HSI_CHECK_OK(hsi_view_make(&dcube, db, 0, HSI_F32, 3, cube.shape, cube.strides, 0));
    hsi_buffer_release(db);
    int64_t px[40];
    for (int64_t i = 0; i < n; i++) px[i] = (i * 37) % (L * S); /* corners and borders included */
    px[0] = 0, px[1] = L * S - 1, px[2] = S - 1;
    int64_t *dpx = dev_bytes(px, sizeof px);
    for (int P = 1; P <= 7; P += 6)
        for (int pad = 0; pad < 2; pad++)
            for (int aug = 0; aug < 2; aug++) {
                hsi_augment a = {.flips = 1, .rotations = 1, .noise_std = aug ? 0.1f : 0};
                hsi_patcher pt;
                HSI_CHECK_OK(hsi_patcher_init(&pt, &cube, P, (hsi_pad_mode)pad, &a));
                int64_t per = hsi_patcher_sample_floats(&pt);
                float *want = malloc(sizeof(float) * (size_t)(n * per));
                HSI_CHECK_OK(hsi_patches_extract(&pt, want, px, n, aug, 1234 + P));
                float *d = dev_zero(n * per);
                HSI_CHECK_OK(hsi_patches_extract_cuda(d, &dcube, P, (hsi_pad_mode)pad, &a, dpx, n,
                                                      aug, 1234 + P));
                float *got = host_of(d, n * per);
                /* copies are exact; the noise differs only by libm's last bits */
                hsi_test_close_f32(got, want, n * per, 0, aug ? 1e-6 : 0, "patches");
                free(got);
                hsi_cuda_free(d);
                free(want);
                hsi_patcher_free(&pt);
            }
    hsi_cuda_free(dpx);
    hsi_view_release(&dcube);
    hsi_view_release(&cube);
    hsi_view_release(&host);
}

HSI_SUITE(cuda_patches, HSI_SUITE_NEEDS_CUDA,
          {"mirror/zero padding, flips, rotations, noise vs CPU", test_patches})

/* ------------------------------------------------------------- layers */

/* conv forward/backward (2-D and 3-D, stride and padding) vs the CPU
 * kernels; tolerance 1e-4 of the largest magnitude (float sums in another
 * order; cuBLAS default math, no TF32). */
static void conv_case(int nd, int n, int c, int k, const int *in, const int *ker, const int *str,
                      const int *pad)
{
    hsi_conv_dims d;
    HSI_CHECK_OK(hsi_conv_dims_init(&d, nd, n, c, k, in, ker, str, pad));
    int64_t is = 1, ks = 1, os = 1;
    for (int i = 0; i < nd; i++) is *= in[i], ks *= ker[i], os *= d.out[i];
    int64_t nx = n * c * is, nw = k * c * ks, ny = n * k * os;
    float *x = malloc(4 * nx), *w = malloc(4 * nw), *b = malloc(4 * k), *dy = malloc(4 * ny);
    fill_uniform(x, nx, -1, 1);
    fill_uniform(w, nw, -0.5f, 0.5f);
    fill_uniform(b, k, -0.5f, 0.5f);
    fill_uniform(dy, ny, -1, 1);
    float *y = malloc(4 * ny), *dx = calloc(nx, 4), *dw = calloc(nw, 4), *dbb = calloc(k, 4);
    void *ws = malloc(hsi_conv_workspace_bytes(&d, 4) + 64);
    hsi_conv_forward_f32(y, x, w, b, &d, ws);
    /* backward accumulates: start the gradients at 1 on both sides */
    for (int64_t i = 0; i < nx; i++) dx[i] = 1;
    for (int64_t i = 0; i < nw; i++) dw[i] = 1;
    for (int64_t i = 0; i < k; i++) dbb[i] = 1;
    hsi_conv_backward_f32(dx, dw, dbb, dy, x, w, &d, ws);
    float *gx = dev_f32(x, nx), *gw = dev_f32(w, nw), *gb = dev_f32(b, k), *gdy = dev_f32(dy, ny);
    float *gy = dev_zero(ny);
    float *gdx = dev_fill(nx, 1), *gdw = dev_fill(nw, 1), *gdb = dev_fill(k, 1);
    void *gws = dev_bytes(NULL, hsi_conv_workspace_bytes_cuda(&d) + 64);
    HSI_CHECK_OK(hsi_conv_forward_cuda(gy, gx, gw, gb, &d, gws));
    HSI_CHECK_OK(hsi_conv_backward_cuda(gdx, gdw, gdb, gdy, gx, gw, &d, gws));
    float *hy = host_of(gy, ny), *hdx = host_of(gdx, nx), *hdw = host_of(gdw, nw),
          *hdb = host_of(gdb, k);
    hsi_test_close_f32(hy, y, ny, 1e-4, 0, "conv forward");
    hsi_test_close_f32(hdx, dx, nx, 1e-4, 0, "conv dx");
    hsi_test_close_f32(hdw, dw, nw, 1e-4, 0, "conv dw");
    hsi_test_close_f32(hdb, dbb, k, 1e-4, 0, "conv db");
    free(hy), free(hdx), free(hdw), free(hdb), free(ws);
    hsi_cuda_free(gx), hsi_cuda_free(gw), hsi_cuda_free(gb), hsi_cuda_free(gdy), hsi_cuda_free(gy);
    hsi_cuda_free(gdx), hsi_cuda_free(gdw), hsi_cuda_free(gdb), hsi_cuda_free(gws);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(dbb);
}

static void test_conv(void)
{
    rng_seed(11);
    int in2[2] = {9, 8}, k2[2] = {3, 3}, s1[2] = {1, 1}, p1[2] = {1, 1}, s2[2] = {2, 2}, p0[2] = {0, 0};
    conv_case(2, 3, 4, 5, in2, k2, s1, p1);
    conv_case(2, 2, 3, 6, in2, k2, s2, p0);
    int in3[3] = {10, 7, 6}, k3[3] = {7, 3, 3}, s3[3] = {1, 1, 1}, q3[3] = {0, 1, 0}, t3[3] = {2, 1, 2};
    conv_case(3, 2, 1, 8, in3, k3, s3, q3); /* HybridSN's first layer, smaller */
    conv_case(3, 2, 3, 4, in3, k3, t3, q3);
    /* the bias gradient's channel sums over many blocks (75 per channel) */
    int in4[2] = {40, 40};
    conv_case(2, 48, 2, 3, in4, k2, s1, p1);
}

static void pool_case(hsi_pool_kind kind, int nd, const int *in, const int *ker, const int *str,
                      const int *pad)
{
    hsi_pool_dims d;
    int n = 2, c = 3;
    HSI_CHECK_OK(hsi_pool_dims_init(&d, kind, nd, n, c, in, ker, str, pad));
    int64_t is = 1, os = 1;
    for (int i = 0; i < nd; i++) is *= in[i], os *= d.out[i];
    int64_t nx = n * c * is, ny = n * c * os;
    float *x = malloc(4 * nx), *dy = malloc(4 * ny), *y = malloc(4 * ny), *dx = malloc(4 * nx);
    int32_t *am = malloc(4 * ny);
    fill_uniform(x, nx, -1, 1);
    x[3] = NAN; /* the NaN rule */
    fill_uniform(dy, ny, -1, 1);
    for (int64_t i = 0; i < nx; i++) dx[i] = 0.5f;
    hsi_pool_forward_f32(y, kind == HSI_POOL_MAX ? am : NULL, x, &d);
    hsi_pool_backward_f32(dx, dy, kind == HSI_POOL_MAX ? am : NULL, &d);
    float *gx = dev_f32(x, nx), *gy = dev_zero(ny), *gdy = dev_f32(dy, ny);
    float *gdx = dev_fill(nx, 0.5f);
    int32_t *gam = dev_bytes(NULL, 4 * (size_t)ny);
    HSI_CHECK_OK(hsi_pool_forward_cuda(gy, kind == HSI_POOL_MAX ? gam : NULL, gx, &d));
    HSI_CHECK_OK(hsi_pool_backward_cuda(gdx, gdy, kind == HSI_POOL_MAX ? gam : NULL, &d));
    float *hy = host_of(gy, ny), *hdx = host_of(gdx, nx);
    /* NaN outputs compare equal when both are NaN */
    int nan_bad = 0;
    for (int64_t i = 0; i < ny; i++) {
        nan_bad += isnan(hy[i]) != isnan(y[i]);
        if (isnan(y[i])) hy[i] = y[i] = 0;
    }
    CU_ASSERT_EQUAL(nan_bad, 0);
    hsi_test_close_f32(hy, y, ny, 1e-6, 0, "pool forward");
    hsi_test_close_f32(hdx, dx, nx, 1e-6, 0, "pool backward");
    if (kind == HSI_POOL_MAX) {
        int32_t *ham = malloc(4 * ny);
        HSI_CHECK_OK(hsi_cuda_download(ham, gam, 4 * (size_t)ny));
        CU_ASSERT_EQUAL(memcmp(ham, am, 4 * (size_t)ny), 0);
        free(ham);
    }
    free(hy), free(hdx), free(x), free(dy), free(y), free(dx), free(am);
    hsi_cuda_free(gx), hsi_cuda_free(gy), hsi_cuda_free(gdy), hsi_cuda_free(gdx), hsi_cuda_free(gam);
}

static void test_pool_gap(void)
{
    rng_seed(12);
    int in2[2] = {9, 8}, k2[2] = {2, 2}, k3x[2] = {3, 3}, s2[2] = {2, 2}, s1[2] = {1, 1},
        p0[2] = {0, 0}, p1[2] = {1, 1};
    for (int kind = 0; kind < 2; kind++) {
        pool_case((hsi_pool_kind)kind, 2, in2, k2, s2, p0);
        pool_case((hsi_pool_kind)kind, 2, in2, k3x, s1, p1);
        int in3[3] = {5, 6, 7}, k3[3] = {3, 2, 3}, s3[3] = {2, 2, 1}, q3[3] = {1, 0, 1};
        pool_case((hsi_pool_kind)kind, 3, in3, k3, s3, q3);
    }
    int n = 3, c = 4;
    int64_t s = 50, nx = n * c * s;
    float *x = malloc(4 * nx), *dy = malloc(4 * n * c), *y = malloc(4 * n * c), *dx = malloc(4 * nx);
    fill_uniform(x, nx, -1, 3);
    fill_uniform(dy, n * c, -1, 1);
    for (int64_t i = 0; i < nx; i++) dx[i] = 0.25f;
    hsi_gap_forward_f32(y, x, n, c, s);
    hsi_gap_backward_f32(dx, dy, n, c, s);
    float *gx = dev_f32(x, nx), *gy = dev_zero(n * c), *gdy = dev_f32(dy, n * c), *gdx = dev_f32(dx, nx);
    /* the device dx starts from the same 0.25 */
    float *q = malloc(4 * nx);
    for (int64_t i = 0; i < nx; i++) q[i] = 0.25f;
    HSI_CHECK_OK(hsi_cuda_upload(gdx, q, 4 * (size_t)nx));
    HSI_CHECK_OK(hsi_gap_forward_cuda(gy, gx, n, c, s));
    HSI_CHECK_OK(hsi_gap_backward_cuda(gdx, gdy, n, c, s));
    float *hy = host_of(gy, n * c), *hdx = host_of(gdx, nx);
    hsi_test_close_f32(hy, y, n * c, 1e-6, 0, "gap forward");
    hsi_test_close_f32(hdx, dx, nx, 1e-6, 0, "gap backward");
    free(hy), free(hdx), free(x), free(dy), free(y), free(dx);
    hsi_cuda_free(gx), hsi_cuda_free(gy), hsi_cuda_free(gdy), hsi_cuda_free(gdx);
}

/* batch norm, training and eval, with and without affine; tolerance 1e-4;
 * channel sums in one block, then over many (93, and 20 with a short last
 * one) */
static void test_bn(void)
{
    rng_seed(13);
    const int shapes[3][2] = {{4, 37}, {64, 1500}, {7, 3001}};
    for (int sh = 0; sh < 3; sh++)
    for (int training = 1; training >= 0; training--)
        for (int affine = 0; affine < 2; affine++) {
            int n = shapes[sh][0], c = 3;
            int64_t s = shapes[sh][1], nx = n * c * s;
            float *x = malloc(4 * nx), *dy = malloc(4 * nx), *y = malloc(4 * nx), *dx = malloc(4 * nx);
            float g[3] = {1.5f, -0.5f, 0.8f}, be[3] = {0.1f, 0.2f, -0.3f};
            float rm[3] = {0.1f, 0.0f, 5.0f}, rv[3] = {1.0f, 2.0f, 0.5f};
            float sm[3], si[3], dg[3] = {1, 1, 1}, dbe[3] = {1, 1, 1};
            fill_uniform(x, nx, 2, 6); /* a mean far from 0 */
            fill_uniform(dy, nx, -1, 1);
            for (int64_t i = 0; i < nx; i++) dx[i] = 1;
            float *gg = dev_f32(g, 3), *gbe = dev_f32(be, 3), *grm = dev_f32(rm, 3), *grv = dev_f32(rv, 3);
            float *gx = dev_f32(x, nx), *gdy = dev_f32(dy, nx), *gy = dev_zero(nx), *gdx = dev_f32(dx, nx);
            float *gsm = dev_zero(3), *gsi = dev_zero(3), *gdg = dev_f32(dg, 3), *gdbe = dev_f32(dbe, 3);
            hsi_bn_forward_f32(y, sm, si, rm, rv, x, affine ? g : NULL, affine ? be : NULL, n, c, s,
                               1e-5f, 0.1f, training);
            HSI_CHECK_OK(hsi_bn_forward_cuda(gy, gsm, gsi, grm, grv, gx, affine ? gg : NULL,
                                             affine ? gbe : NULL, n, c, s, 1e-5f, 0.1f, training));
            if (!training) /* eval backward takes the running statistics */
                for (int k = 0; k < 3; k++) sm[k] = rm[k], si[k] = (float)(1.0 / sqrt(rv[k] + 1e-5));
            HSI_CHECK_OK(hsi_cuda_upload(gsm, sm, sizeof sm)); /* same saved statistics both sides */
            HSI_CHECK_OK(hsi_cuda_upload(gsi, si, sizeof si));
            hsi_bn_backward_f32(dx, affine ? dg : NULL, affine ? dbe : NULL, dy, x,
                                affine ? g : NULL, sm, si, n, c, s, training);
            HSI_CHECK_OK(hsi_bn_backward_cuda(gdx, affine ? gdg : NULL, affine ? gdbe : NULL, gdy,
                                              gx, affine ? gg : NULL, gsm, gsi, n, c, s, training));
            float *hy = host_of(gy, nx), *hdx = host_of(gdx, nx), *hrm = host_of(grm, 3),
                  *hrv = host_of(grv, 3), *hdg = host_of(gdg, 3), *hdbe = host_of(gdbe, 3);
            hsi_test_close_f32(hy, y, nx, 1e-4, 0, "bn forward");
            hsi_test_close_f32(hrm, rm, 3, 1e-5, 0, "bn running mean");
            hsi_test_close_f32(hrv, rv, 3, 1e-4, 0, "bn running var");
            hsi_test_close_f32(hdx, dx, nx, 1e-4, 0, "bn dx");
            hsi_test_close_f32(hdg, dg, 3, 1e-4, 0, "bn dgamma");
            hsi_test_close_f32(hdbe, dbe, 3, 1e-4, 0, "bn dbeta");
            free(hy), free(hdx), free(hrm), free(hrv), free(hdg), free(hdbe);
            free(x), free(dy), free(y), free(dx);
            hsi_cuda_free(gg), hsi_cuda_free(gbe), hsi_cuda_free(grm), hsi_cuda_free(grv);
            hsi_cuda_free(gx), hsi_cuda_free(gdy), hsi_cuda_free(gy), hsi_cuda_free(gdx);
            hsi_cuda_free(gsm), hsi_cuda_free(gsi), hsi_cuda_free(gdg), hsi_cuda_free(gdbe);
        }
}

/* the GPU's own saved statistics equal the CPU's (the test above feeds
 * both backwards the CPU's) */
static void test_bn_saved(void)
{
    rng_seed(14);
    int n = 5, c = 2;
    int64_t s = 11, nx = n * c * s;
    float *x = malloc(4 * nx), *y = malloc(4 * nx), sm[2], si[2];
    fill_uniform(x, nx, -3, 9);
    hsi_bn_forward_f32(y, sm, si, NULL, NULL, x, NULL, NULL, n, c, s, 1e-5f, 0.1f, 1);
    float *gx = dev_f32(x, nx), *gy = dev_zero(nx), *gsm = dev_zero(2), *gsi = dev_zero(2);
    HSI_CHECK_OK(hsi_bn_forward_cuda(gy, gsm, gsi, NULL, NULL, gx, NULL, NULL, n, c, s, 1e-5f, 0.1f, 1));
    float *hsm = host_of(gsm, 2), *hsi_ = host_of(gsi, 2);
    hsi_test_close_f32(hsm, sm, 2, 1e-6, 0, "bn saved mean");
    hsi_test_close_f32(hsi_, si, 2, 1e-5, 0, "bn saved invstd");
    free(hsm), free(hsi_), free(x), free(y);
    hsi_cuda_free(gx), hsi_cuda_free(gy), hsi_cuda_free(gsm), hsi_cuda_free(gsi);
}

HSI_SUITE(cuda_layers, HSI_SUITE_NEEDS_CUDA, {"conv2d/conv3d forward and backward", test_conv},
          {"max/avg pool 2-D/3-D, global average pool", test_pool_gap},
          {"batch norm train/eval, affine or not", test_bn},
          {"batch norm saved statistics", test_bn_saved})

/* ------------------------------------------------------------ ops */

static void test_relu_linear(void)
{
    rng_seed(21);
    int64_t n = 1000;
    float *x = malloc(4 * n), *dy = malloc(4 * n), *want = malloc(4 * n), *dwant = malloc(4 * n);
    fill_uniform(x, n, -1, 1);
    fill_uniform(dy, n, -1, 1);
    for (int64_t i = 0; i < n; i++) {
        want[i] = x[i] > 0 ? x[i] : 0;
        dwant[i] = 0.5f + (want[i] > 0 ? dy[i] : 0);
    }
    float *gx = dev_f32(x, n), *gy = dev_zero(n), *gdy = dev_f32(dy, n), *gdx = dev_fill(n, 0.5f);
    HSI_CHECK_OK(hsi_relu_forward_cuda(gy, gx, n));
    HSI_CHECK_OK(hsi_relu_backward_cuda(gdx, gdy, gy, n));
    float *hy = host_of(gy, n), *hdx = host_of(gdx, n);
    hsi_test_close_f32(hy, want, n, 0, 0, "relu forward");
    hsi_test_close_f32(hdx, dwant, n, 0, 1e-7, "relu backward");
    free(hy), free(hdx), free(x), free(dy), free(want), free(dwant);
    hsi_cuda_free(gx), hsi_cuda_free(gy), hsi_cuda_free(gdy), hsi_cuda_free(gdx);

    /* linear vs the engine (x (N, in) w (out, in) b (out)), double loops as reference */
    int N = 7, in = 13, out = 5;
    float *lx = malloc(4 * N * in), *lw = malloc(4 * out * in), *lb = malloc(4 * out),
          *ldy = malloc(4 * N * out);
    fill_uniform(lx, N * in, -1, 1);
    fill_uniform(lw, out * in, -1, 1);
    fill_uniform(lb, out, -1, 1);
    fill_uniform(ldy, N * out, -1, 1);
    float *ry = malloc(4 * N * out), *rdx = malloc(4 * N * in), *rdw = malloc(4 * out * in),
          *rdb = malloc(4 * out);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < out; j++) {
            double a = lb[j];
            for (int t = 0; t < in; t++) a += (double)lx[i * in + t] * lw[j * in + t];
            ry[i * out + j] = (float)a;
        }
    for (int i = 0; i < N; i++)
        for (int t = 0; t < in; t++) {
            double a = 1;
            for (int j = 0; j < out; j++) a += (double)ldy[i * out + j] * lw[j * in + t];
            rdx[i * in + t] = (float)a;
        }
    for (int j = 0; j < out; j++) {
        double bb = 1;
        for (int t = 0; t < in; t++) {
            double a = 1;
            for (int i = 0; i < N; i++) a += (double)ldy[i * out + j] * lx[i * in + t];
            rdw[j * in + t] = (float)a;
        }
        for (int i = 0; i < N; i++) bb += ldy[i * out + j];
        rdb[j] = (float)bb;
    }
    float *glx = dev_f32(lx, N * in), *glw = dev_f32(lw, out * in), *glb = dev_f32(lb, out);
    float *gldy = dev_f32(ldy, N * out), *gly = dev_zero(N * out);
    float *gldx = dev_fill(N * in, 1), *gldw = dev_fill(out * in, 1), *gldb = dev_fill(out, 1);
    HSI_CHECK_OK(hsi_linear_forward_cuda(gly, glx, glw, glb, N, in, out));
    HSI_CHECK_OK(hsi_linear_backward_cuda(gldx, gldw, gldb, gldy, glx, glw, N, in, out));
    float *a1 = host_of(gly, N * out), *a2 = host_of(gldx, N * in), *a3 = host_of(gldw, out * in),
          *a4 = host_of(gldb, out);
    hsi_test_close_f32(a1, ry, N * out, 1e-5, 0, "linear forward");
    hsi_test_close_f32(a2, rdx, N * in, 1e-5, 0, "linear dx");
    hsi_test_close_f32(a3, rdw, out * in, 1e-5, 0, "linear dw");
    hsi_test_close_f32(a4, rdb, out, 1e-5, 0, "linear db");
    free(a1), free(a2), free(a3), free(a4);
    free(lx), free(lw), free(lb), free(ldy), free(ry), free(rdx), free(rdw), free(rdb);
    hsi_cuda_free(glx), hsi_cuda_free(glw), hsi_cuda_free(glb), hsi_cuda_free(gldy);
    hsi_cuda_free(gly), hsi_cuda_free(gldx), hsi_cuda_free(gldw), hsi_cuda_free(gldb);
}

/* cross-entropy vs the engine's hsi_cross_entropy (weights, label smoothing,
 * an ignored row); loss to 1e-5 relative, gradient to 1e-6 absolute */
static void test_cross_entropy(void)
{
    rng_seed(22);
    int64_t N = 9, C = 5;
    for (int variant = 0; variant < 3; variant++) {
        hsi_graph *g = NULL;
        HSI_CHECK_OK(hsi_graph_new(&g));
        hsi_tensor *z = NULL, *t = NULL, *w = NULL, *loss = NULL;
        int64_t zs[2] = {N, C}, ts[1] = {N}, wsh[1] = {C};
        HSI_CHECK_OK(hsi_tensor_new(&z, HSI_F32, 2, zs, 1));
        HSI_CHECK_OK(hsi_tensor_new(&t, HSI_I32, 1, ts, 0));
        HSI_CHECK_OK(hsi_tensor_new(&w, HSI_F32, 1, wsh, 0));
        float *zp = hsi_tensor_ptr(z), *wp = hsi_tensor_ptr(w);
        int32_t *tp = hsi_tensor_ptr(t);
        fill_uniform(zp, N * C, -3, 3);
        fill_uniform(wp, C, 0.2f, 2);
        for (int64_t i = 0; i < N; i++) tp[i] = (int32_t)((i * 3) % C);
        hsi_ce_opts o;
        hsi_ce_opts_default(&o);
        if (variant >= 1) o.weight = w, tp[4] = -100;
        if (variant == 2) o.label_smoothing = 0.1;
        HSI_CHECK_OK(hsi_cross_entropy(&loss, g, z, t, &o));
        float want = (float)hsi_tensor_item(loss);
        HSI_CHECK_OK(hsi_backward(loss, 0));
        float *gz = dev_f32(zp, N * C), *gw = dev_f32(wp, C), *gp = dev_zero(N * C);
        float *gl = dev_zero(2), *gdz = dev_zero(N * C);
        int32_t *gt = dev_bytes(tp, 4 * (size_t)N);
        HSI_CHECK_OK(hsi_cross_entropy_forward_cuda(gl, gl + 1, gp, gz, gt, o.weight ? gw : NULL, N,
                                                    C, o.label_smoothing, o.ignore_index));
        HSI_CHECK_OK(hsi_cross_entropy_backward_cuda(gdz, NULL, gl + 1, gp, gt,
                                                     o.weight ? gw : NULL, N, C, o.label_smoothing,
                                                     o.ignore_index));
        float *hl = host_of(gl, 2), *hdz = host_of(gdz, N * C);
        hsi_test_close_f32(hl, &want, 1, 1e-5, 0, "cross-entropy loss");
        hsi_test_close_f32(hdz, hsi_tensor_ptr(z->grad), N * C, 0, 1e-6, "cross-entropy gradient");
        free(hl), free(hdz);
        hsi_cuda_free(gz), hsi_cuda_free(gw), hsi_cuda_free(gp), hsi_cuda_free(gl);
        hsi_cuda_free(gdz), hsi_cuda_free(gt);
        hsi_graph_free(g);
        hsi_tensor_free(z), hsi_tensor_free(t), hsi_tensor_free(w);
    }
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Dropout: every mask element recomputed on the host from the counter-based
 * stream's definition (mix64 of the mixed seed plus i times the golden
 * ratio, 53 bits); y = x * mask exactly; the share of zeros within 5 sigma
 * of p; p = 0 keeps x; backward accumulates dy * mask (to 1e-6); the key read from
 * the device (dropout_key + add) gives the masks of seed dropout_key + add. */
static void test_dropout(void)
{
    rng_seed(29);
    const int64_t n = (int64_t)1 << 18;
    const double p = 0.3;
    const uint64_t seed = 0x1234567ull;
    float *hx = malloc(4 * (size_t)n), *hdy = malloc(4 * (size_t)n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hdy);
    fill_uniform(hx, n, -1, 1);
    fill_uniform(hdy, n, -1, 1);
    float *x = dev_f32(hx, n), *dy = dev_f32(hdy, n), *y = dev_zero(n), *mask = dev_zero(n),
          *dx = dev_f32(hdy, n), *y2 = dev_zero(n), *mask2 = dev_zero(n);
    HSI_CHECK_OK(hsi_dropout_forward_cuda(y, mask, x, n, p, seed));
    HSI_CHECK_OK(hsi_dropout_backward_cuda(dx, dy, mask, n));
    float *hy = host_of(y, n), *hm = host_of(mask, n), *hdx = host_of(dx, n);
    const float keep = (float)(1.0 / (1.0 - p));
    int64_t zeros = 0, bad_mask = 0, bad_y = 0, bad_dx = 0;
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(mix64(mix64(seed) + (uint64_t)i * 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
        float m = u < p ? 0.0f : keep;
        zeros += m == 0.0f;
        bad_mask += hm[i] != m;
        bad_y += hy[i] != hx[i] * m;
        float want = hdy[i] + hdy[i] * m; /* the device may fuse it (one rounding) */
        bad_dx += fabsf(hdx[i] - want) > 1e-6f * fabsf(want);
    }
    CU_ASSERT_EQUAL(bad_mask, 0);
    CU_ASSERT_EQUAL(bad_y, 0);
    CU_ASSERT_EQUAL(bad_dx, 0);
    CU_ASSERT(fabs((double)zeros / n - p) < 5 * sqrt(p * (1 - p) / n));
    /* the key from the device */
    hsi_step_scalars *sc = NULL, v = {0};
    HSI_CHECK_OK(hsi_cuda_malloc((void **)&sc, sizeof *sc));
    v.dropout_key = seed - 5;
    HSI_CHECK_OK(hsi_step_scalars_set_cuda(sc, &v));
    HSI_CHECK_OK(hsi_dropout_forward_dev_cuda(y2, mask2, x, n, p, sc, 5));
    float *hm2 = host_of(mask2, n), *hy2 = host_of(y2, n);
    CU_ASSERT_EQUAL(memcmp(hm2, hm, 4 * (size_t)n), 0);
    CU_ASSERT_EQUAL(memcmp(hy2, hy, 4 * (size_t)n), 0);
    free(hm2), free(hy2);
    /* another seed, other masks; p = 0: y = x, mask 1 */
    HSI_CHECK_OK(hsi_dropout_forward_cuda(y2, mask2, x, n, p, seed + 1));
    hm2 = host_of(mask2, n);
    CU_ASSERT_NOT_EQUAL(memcmp(hm2, hm, 4 * (size_t)n), 0);
    free(hm2);
    HSI_CHECK_OK(hsi_dropout_forward_cuda(y2, mask2, x, n, 0.0, seed));
    hy2 = host_of(y2, n);
    hm2 = host_of(mask2, n);
    CU_ASSERT_EQUAL(memcmp(hy2, hx, 4 * (size_t)n), 0);
    int64_t not_one = 0;
    for (int64_t i = 0; i < n; i++) not_one += hm2[i] != 1.0f;
    CU_ASSERT_EQUAL(not_one, 0);
    HSI_CHECK_FAILS(hsi_dropout_forward_cuda(y2, mask2, x, n, 1.0, seed), HSI_ERR_ARG, "p must be in [0, 1)");
    free(hm2), free(hy2), free(hy), free(hm), free(hdx), free(hx), free(hdy);
    hsi_cuda_free(sc);
    float *ds[] = {x, dy, y, mask, dx, y2, mask2};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) hsi_cuda_free(ds[i]);
}

/* Adam and AdamW: three steps vs hsi_optim_step on the same tensor;
 * 1e-6 relative (same float formula; FMA contraction may differ) */
static void test_adam(void)
{
    rng_seed(23);
    int64_t n = 257;
    for (int kind = HSI_OPT_ADAM; kind <= HSI_OPT_ADAMW; kind++) {
        hsi_tensor *p = NULL, *gr = NULL;
        HSI_CHECK_OK(hsi_tensor_new(&p, HSI_F32, 1, &n, 1));
        HSI_CHECK_OK(hsi_tensor_new(&gr, HSI_F32, 1, &n, 0));
        p->grad = gr;
        fill_uniform(hsi_tensor_ptr(p), n, -1, 1);
        hsi_optim *o = calloc(1, sizeof *o);
        hsi_optim_config_default(&o->cfg, (hsi_optim_kind)kind);
        o->cfg.lr = 0.01;
        o->cfg.weight_decay = 0.05;
        o->n = 1;
        o->params = calloc(1, sizeof *o->params);
        o->params[0].t = p;
        o->state1 = calloc(2, sizeof *o->state1);
        o->state2 = calloc(2, sizeof *o->state2);
        float *gp = dev_f32(hsi_tensor_ptr(p), n), *gm = dev_zero(n), *gv = dev_zero(n);
        float *gg = dev_zero(n);
        for (int step = 1; step <= 3; step++) {
            fill_uniform(hsi_tensor_ptr(gr), n, -1, 1);
            HSI_CHECK_OK(hsi_cuda_upload(gg, hsi_tensor_ptr(gr), 4 * (size_t)n));
            HSI_CHECK_OK(hsi_optim_step(o));
            HSI_CHECK_OK(hsi_adam_step_cuda(gp, gg, gm, gv, n, &o->cfg, step));
        }
        float *hp = host_of(gp, n), *hm = host_of(gm, n), *hv = host_of(gv, n);
        /* the same three steps with the factors read from the device: the same bits */
        {
            float *dp = dev_f32(hsi_tensor_ptr(p), n), *dm = dev_zero(n), *dv = dev_zero(n);
            hsi_step_scalars *sc = NULL;
            HSI_CHECK_OK(hsi_cuda_malloc((void **)&sc, sizeof *sc));
            HSI_CHECK_OK(hsi_cuda_upload(dp, hp, 4 * (size_t)n)); /* start where the first run ended */
            HSI_CHECK_OK(hsi_cuda_upload(dm, hm, 4 * (size_t)n));
            HSI_CHECK_OK(hsi_cuda_upload(dv, hv, 4 * (size_t)n));
            float *ep = dev_f32(hp, n), *em = dev_f32(hm, n), *ev = dev_f32(hv, n);
            for (int step = 4; step <= 6; step++) {
                hsi_step_scalars v = {0};
                hsi_adam_factors(v.adam, &o->cfg, step);
                HSI_CHECK_OK(hsi_step_scalars_set_cuda(sc, &v));
                v.adam[0] = -1; /* changed after the call: the kernel reads what was set */
                HSI_CHECK_OK(hsi_adam_step_dev_cuda(dp, gg, dm, dv, n, &o->cfg, sc));
                HSI_CHECK_OK(hsi_adam_step_cuda(ep, gg, em, ev, n, &o->cfg, step));
            }
            float *a1 = host_of(dp, n), *b1 = host_of(ep, n), *a2 = host_of(dv, n), *b2 = host_of(ev, n);
            CU_ASSERT_EQUAL(memcmp(a1, b1, 4 * (size_t)n), 0);
            CU_ASSERT_EQUAL(memcmp(a2, b2, 4 * (size_t)n), 0);
            free(a1), free(b1), free(a2), free(b2);
            hsi_cuda_free(dp), hsi_cuda_free(dm), hsi_cuda_free(dv), hsi_cuda_free(sc);
            hsi_cuda_free(ep), hsi_cuda_free(em), hsi_cuda_free(ev);
        }
        hsi_test_close_f32(hp, hsi_tensor_ptr(p), n, 1e-6, 0, "Adam parameters");
        hsi_test_close_f32(hm, hsi_tensor_ptr(o->state1[0]), n, 1e-6, 0, "Adam exp_avg");
        hsi_test_close_f32(hv, hsi_tensor_ptr(o->state2[0]), n, 1e-6, 0, "Adam exp_avg_sq");
        free(hp), free(hm), free(hv);
        hsi_cuda_free(gp), hsi_cuda_free(gm), hsi_cuda_free(gv), hsi_cuda_free(gg);
        hsi_optim_free(o);
        hsi_tensor_free(p);
    }
}

HSI_SUITE(cuda_ops, HSI_SUITE_NEEDS_CUDA, {"relu, linear", test_relu_linear},
          {"dropout (masks from their definition, device key)", test_dropout},
          {"cross-entropy (weights, smoothing, ignore_index)", test_cross_entropy},
          {"Adam / AdamW steps", test_adam})

/* ------------------------------------------------------- device model */

static void set_dropout(hsi_module *m, double p)
{
    if (m->kind == HSI_MOD_DROPOUT) m->p = p;
    for (int i = 0; i < m->n_children; i++) set_dropout(m->children[i], p);
}

/* One training step of a model on the GPU (hsi_dmodel) against the CPU
 * engine from the same initialisation (dropout off on both: the masks come
 * from different generators): loss to 1e-5, every gradient to 1e-3 of its
 * tensor's largest, running statistics to 1e-4; after one AdamW step the
 * parameters within 2.5 lr (Adam's first step is lr * sign(g), so a gradient
 * near 0 may flip); eval logits of the same parameters to 1e-4. */
static void model_parity(const char *name, int bands, int patch, int classes, int batch)
{
    hsi_module *mc = NULL, *mg = NULL;
    HSI_CHECK_OK(hsi_model_create(&mc, name, bands, patch, classes, HSI_F32, 5));
    HSI_CHECK_OK(hsi_model_create(&mg, name, bands, patch, classes, HSI_F32, 5));
    set_dropout(mc, 0);
    set_dropout(mg, 0);
    int64_t xs[5], ys[1] = {batch};
    int nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    hsi_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    HSI_CHECK_OK(hsi_tensor_new(&x, HSI_F32, nd, xs, 0));
    HSI_CHECK_OK(hsi_tensor_new(&y, HSI_I32, 1, ys, 0));
    int64_t nx = hsi_tensor_count(x);
    fill_uniform(hsi_tensor_ptr(x), nx, -1, 1);
    int32_t *yp = hsi_tensor_ptr(y);
    for (int i = 0; i < batch; i++) yp[i] = (i * 7) % classes;
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    HSI_CHECK_OK(hsi_module_forward(&logits, mc, g, x));
    HSI_CHECK_OK(hsi_cross_entropy(&loss, g, logits, y, NULL));
    float loss_cpu = (float)hsi_tensor_item(loss);
    HSI_CHECK_OK(hsi_backward(loss, 0));

    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    hsi_dmodel *d = NULL;
    HSI_CHECK_OK(hsi_dmodel_create(&d, mg, nd - 1, xs + 1, batch, &cfg, 9));
    CU_ASSERT_EQUAL(hsi_dmodel_classes(d), classes);
    float *gx = dev_f32(hsi_tensor_ptr(x), nx);
    int32_t *gy = dev_bytes(yp, sizeof(int32_t) * (size_t)batch);
    HSI_CHECK_OK(hsi_dmodel_forward_backward(d, gx, gy, batch));
    double lg = 0;
    HSI_CHECK_OK(hsi_dmodel_loss(d, &lg));
    float loss_gpu = (float)lg;
    hsi_test_close_f32(&loss_gpu, &loss_cpu, 1, 1e-5, 0, "model loss");
    HSI_CHECK_OK(hsi_dmodel_to_host(d, mg, 1));
    hsi_named_tensor *sc = NULL, *sg = NULL;
    int nc = 0, ng = 0;
    HSI_CHECK_OK(hsi_module_state(mc, &sc, &nc));
    HSI_CHECK_OK(hsi_module_state(mg, &sg, &ng));
    CU_ASSERT_EQUAL_FATAL(nc, ng);
    /* a gradient that is zero in exact arithmetic (the bias of a conv
     * followed by batch norm) is float noise on both sides: each tensor's
     * tolerance is 1e-3 of its own largest value plus 1e-6 of the model's */
    double gmax = 0;
    for (int k = 0; k < nc; k++)
        if (!sc[k].is_buffer && sc[k].t->grad) {
            const float *gp = hsi_tensor_ptr(sc[k].t->grad);
            for (int64_t i = 0; i < hsi_tensor_count(sc[k].t); i++) gmax = fmax(gmax, fabs(gp[i]));
        }
    for (int k = 0; k < nc; k++) {
        hsi_tensor *a = sg[k].t, *b = sc[k].t;
        int64_t n = hsi_tensor_count(b);
        if (b->data.dtype == HSI_I64) {
            CU_ASSERT_EQUAL(*(int64_t *)hsi_tensor_ptr(a), *(int64_t *)hsi_tensor_ptr(b));
        } else if (sc[k].is_buffer) {
            hsi_test_close_f32(hsi_tensor_ptr(a), hsi_tensor_ptr(b), n, 1e-4, 1e-6, sc[k].name);
        } else {
            CU_ASSERT_PTR_NOT_NULL_FATAL(a->grad);
            CU_ASSERT_PTR_NOT_NULL_FATAL(b->grad);
            hsi_test_close_f32(hsi_tensor_ptr(a->grad), hsi_tensor_ptr(b->grad), n, 1e-3, 1e-6 * gmax, sc[k].name);
        }
    }
    hsi_optim *o = NULL;
    HSI_CHECK_OK(hsi_optim_new(&o, &cfg, mc));
    HSI_CHECK_OK(hsi_optim_step(o));
    HSI_CHECK_OK(hsi_dmodel_optim_step(d));
    CU_ASSERT_EQUAL(hsi_dmodel_steps(d), 1);
    HSI_CHECK_OK(hsi_dmodel_to_host(d, mg, 0));
    for (int k = 0; k < nc; k++)
        if (!sc[k].is_buffer)
            hsi_test_close_f32(hsi_tensor_ptr(sg[k].t), hsi_tensor_ptr(sc[k].t), hsi_tensor_count(sc[k].t), 0,
                      2.5 * cfg.lr, sc[k].name);
    /* eval: the GPU's logits equal the CPU engine's with the GPU's parameters */
    hsi_module_train(mg, 0);
    int prev = hsi_set_grad_enabled(0);
    hsi_graph_reset(g);
    HSI_CHECK_OK(hsi_module_forward(&logits, mg, g, x));
    hsi_set_grad_enabled(prev);
    const float *dl = NULL;
    HSI_CHECK_OK(hsi_dmodel_predict(d, &dl, gx, batch));
    float *hl = host_of(dl, (int64_t)batch * classes);
    hsi_test_close_f32(hl, hsi_tensor_ptr(logits), (int64_t)batch * classes, 1e-4, 0, "model eval logits");
    /* a second training step runs (no allocation needed: the cache serves it) */
    hsi_cuda_mem_stats m0, m1;
    hsi_cuda_mem_get(&m0);
    HSI_CHECK_OK(hsi_dmodel_train_step(d, gx, gy, batch - 1)); /* a short batch too */
    HSI_CHECK_OK(hsi_cuda_sync());
    hsi_cuda_mem_get(&m1);
    if (cache_on()) CU_ASSERT_EQUAL(m1.n_cuda_malloc, m0.n_cuda_malloc);
    free(hl);
    free(sc);
    free(sg);
    hsi_optim_free(o);
    hsi_dmodel_free(d);
    hsi_cuda_free(gx);
    hsi_cuda_free(gy);
    hsi_graph_free(g);
    hsi_tensor_free(x);
    hsi_tensor_free(y);
    hsi_module_free(mc);
    hsi_module_free(mg);
}

/* Training steps and eval forwards as CUDA Graphs (hsi_dmodel_set_graph)
 * against the same calls launched one by one, from the same
 * initialisation, dropout on: each step's loss, then every parameter,
 * gradient and running statistic, then the eval logits, bit for bit. On the
 * way: a short batch (run as usual), a new learning rate (read by the
 * captured step), set_conv (the graph dropped and captured again), replays
 * with no cudaMalloc, a training step between graph eval forwards. */
/* A random batch for model `name` in device memory: x uniform in [-1, 1]
 * (*gx), labels (i * mul) % classes (*gy); xs[0..*nd): the input shape. */
static void dev_batch(const char *name, int batch, int bands, int patch, int classes, int mul,
                      int64_t *xs, int *nd, float **gx, int32_t **gy)
{
    int64_t nx = 1;
    *nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    for (int i = 0; i < *nd; i++) nx *= xs[i];
    float *hx = malloc(sizeof(float) * (size_t)nx);
    int32_t *hy = malloc(sizeof(int32_t) * (size_t)batch);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hy);
    fill_uniform(hx, nx, -1, 1);
    for (int i = 0; i < batch; i++) hy[i] = (i * mul) % classes;
    *gx = dev_f32(hx, nx);
    *gy = dev_bytes(hy, sizeof(int32_t) * (size_t)batch);
    free(hx);
    free(hy);
}

/* The two modules' states hold the same bytes, tensor by tensor (and the
 * gradients, where both have them); each one that differs fails, named
 * after what. */
static void states_same(hsi_module *ma, hsi_module *mb, const char *what)
{
    hsi_named_tensor *st[2] = {NULL, NULL};
    int ns[2] = {0, 0};
    HSI_CHECK_OK(hsi_module_state(ma, &st[0], &ns[0]));
    HSI_CHECK_OK(hsi_module_state(mb, &st[1], &ns[1]));
    CU_ASSERT_EQUAL(ns[0], ns[1]);
    for (int k = 0; k < ns[0] && k < ns[1]; k++) {
        const hsi_tensor *a = st[0][k].t, *b = st[1][k].t;
        size_t bytes = hsi_dtype_size(a->data.dtype) * (size_t)hsi_tensor_count(a);
        if (memcmp(hsi_tensor_ptr((hsi_tensor *)a), hsi_tensor_ptr((hsi_tensor *)b), bytes) != 0 ||
            (a->grad && b->grad && memcmp(hsi_tensor_ptr(a->grad), hsi_tensor_ptr(b->grad), bytes) != 0)) {
            CU_FAIL("another tensor");
            fprintf(stderr, "\n  %s: %s differs\n", what, st[0][k].name);
        }
    }
    free(st[0]);
    free(st[1]);
}

static void graph_parity(const char *name, int bands, int patch, int classes, int batch)
{
    hsi_module *m[2] = {NULL, NULL};
    hsi_dmodel *d[2] = {NULL, NULL};
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    int64_t xs[5];
    int nd;
    float *gx;
    int32_t *gy;
    dev_batch(name, batch, bands, patch, classes, 5, xs, &nd, &gx, &gy);
    for (int v = 0; v < 2; v++) {
        HSI_CHECK_OK(hsi_model_create(&m[v], name, bands, patch, classes, HSI_F32, 5));
        HSI_CHECK_OK(hsi_dmodel_create(&d[v], m[v], nd - 1, xs + 1, batch, &cfg, 9));
    }
    HSI_CHECK_OK(hsi_dmodel_set_graph(d[1], 1));
    hsi_cuda_mem_stats m0, m1;
    double wsum = 0, lsum = 0; /* the steps' losses weighted by batch size, for loss_mean */
    for (int s = 0; s < 8; s++) {
        int64_t n = s == 3 ? batch - 1 : batch;
        for (int v = 0; v < 2; v++) {
            if (s == 4) hsi_dmodel_set_lr(d[v], cfg.lr * 0.5);
            if (s == 6) HSI_CHECK_OK(hsi_dmodel_set_conv(d[v], HSI_GPU_CONV_AUTO));
        }
        if (s == 5) {
            HSI_CHECK_OK(hsi_cuda_sync());
            hsi_cuda_mem_get(&m0);
        }
        for (int v = 0; v < 2; v++) HSI_CHECK_OK(hsi_dmodel_train_step(d[v], gx, gy, n));
        if (s == 5) {
            HSI_CHECK_OK(hsi_cuda_sync());
            hsi_cuda_mem_get(&m1);
            if (cache_on()) CU_ASSERT_EQUAL(m1.n_cuda_malloc, m0.n_cuda_malloc);
        }
        double l[2] = {0, 1};
        for (int v = 0; v < 2; v++) HSI_CHECK_OK(hsi_dmodel_loss(d[v], &l[v]));
        if (l[0] != l[1]) {
            CU_FAIL("graph step: another loss");
            fprintf(stderr, "\n  %s step %d: loss %.9g one by one, %.9g as a graph\n", name, s, l[0], l[1]);
        }
        lsum += (double)n * l[0], wsum += (double)n;
    }
    /* the mean loss recorded on the device, both ways: the same sums in the
     * same order as here; then a new count */
    for (int v = 0; v < 2; v++) {
        double mean = 0;
        int64_t k = 0;
        HSI_CHECK_OK(hsi_dmodel_loss_mean(d[v], &mean, &k));
        CU_ASSERT_EQUAL(k, 8);
        CU_ASSERT_DOUBLE_EQUAL(mean, lsum / wsum, 0);
        HSI_CHECK_OK(hsi_dmodel_loss_mean(d[v], &mean, &k));
        CU_ASSERT_EQUAL(k, 0);
        CU_ASSERT(isnan(mean));
    }
    /* steps 0 and 6 measure, 1 and 7 capture; 3 is short */
    CU_ASSERT_EQUAL(hsi_dmodel_graph_launches(d[1], 1), 5);
    CU_ASSERT_EQUAL(hsi_dmodel_graph_launches(d[0], 1), 0);
    CU_ASSERT_EQUAL(hsi_dmodel_steps(d[1]), 8);
    for (int v = 0; v < 2; v++) HSI_CHECK_OK(hsi_dmodel_to_host(d[v], m[v], 1));
    char what[64];
    snprintf(what, sizeof what, "%s graph steps", name);
    states_same(m[0], m[1], what);
    /* eval forwards: the first measures, the rest by the graph, with a
     * training step before the fourth (the folded filters redone); the
     * logits the same */
    for (int c = 0; c < 5; c++) {
        const float *z[2];
        float *hz[2];
        for (int v = 0; v < 2; v++) {
            if (c == 3) HSI_CHECK_OK(hsi_dmodel_train_step(d[v], gx, gy, batch));
            HSI_CHECK_OK(hsi_dmodel_predict(d[v], &z[v], gx, batch));
            hz[v] = host_of(z[v], (int64_t)batch * classes);
        }
        if (memcmp(hz[0], hz[1], sizeof(float) * (size_t)batch * classes) != 0) {
            CU_FAIL("graph eval forward: other logits");
            fprintf(stderr, "\n  %s: eval call %d differs\n", name, c);
        }
        for (int v = 0; v < 2; v++) free(hz[v]);
    }
    CU_ASSERT_EQUAL(hsi_dmodel_graph_launches(d[1], 0), 4);
    for (int v = 0; v < 2; v++) {
        hsi_dmodel_free(d[v]);
        hsi_module_free(m[v]);
    }
    hsi_cuda_free(gx);
    hsi_cuda_free(gy);
}

/* A gate one thread opens and another waits at. */
typedef struct thr_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
} thr_gate;

static void gate_open(thr_gate *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void gate_wait(thr_gate *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

#define THR_STEPS 8

/* One training run of thr_job's model: on a stream of its own (own = 1,
 * as a second host thread does) or on the caller's; the losses and the
 * state after. No CUnit call: it may run on another thread. A graph run
 * opens `captured` once its step is captured (its second step); a plain
 * run waits at `wait` before any CUDA call. */
typedef struct thr_job {
    const char *name;
    int bands, patch, classes, batch, graph, own;
    const float *gx;
    const int32_t *gy;
    thr_gate *wait, *captured;
    double loss[THR_STEPS];
    hsi_named_tensor *state;
    int n_state;
    hsi_module *m; /* made by the caller */
    hsi_status st;
    char err[512];
} thr_job;

static void *thr_train(void *arg)
{
    thr_job *j = arg;
    hsi_status st = HSI_OK;
    hsi_dmodel *d = NULL;
    void *stream = NULL, *prev = NULL;
    const hsi_cuda_plugin *cu = hsi_cuda_plugin_get();
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    int64_t xs[5];
    int nd = hsi_model_input_shape(j->name, j->batch, j->bands, j->patch, xs);
    gate_wait(j->wait);
    if (j->own) {
        HSI_TRY(cu->stream_create(&stream));
        prev = hsi_cuda_set_stream(stream);
    }
    HSI_TRY(hsi_dmodel_create(&d, j->m, nd - 1, xs + 1, j->batch, &cfg, 9));
    HSI_TRY(hsi_dmodel_set_graph(d, j->graph));
    for (int s = 0; s < THR_STEPS; s++) {
        HSI_TRY(hsi_dmodel_train_step(d, j->gx, j->gy, j->batch));
        HSI_TRY(hsi_dmodel_loss(d, &j->loss[s]));
        if (s == 1) gate_open(j->captured);
    }
    HSI_TRY(hsi_dmodel_to_host(d, j->m, 1));
    HSI_TRY(hsi_module_state(j->m, &j->state, &j->n_state));
cleanup:
    gate_open(j->captured); /* also on a failure: the other run must not wait for ever */
    if (st != HSI_OK) snprintf(j->err, sizeof j->err, "%s", hsi_last_error());
    hsi_dmodel_free(d);
    if (j->own) {
        hsi_cuda_set_stream(prev);
        if (stream) cu->stream_destroy(stream);
    }
    j->st = st;
    return NULL;
}

/* Two host threads, each on its own stream, training their own copies at
 * the same time (one of them as CUDA Graphs): each run's losses, parameters,
 * gradients and statistics the same bits as the same run alone on the main
 * thread's stream (per-thread cuBLAS and cuDNN handles, per-thread scratch,
 * the allocator's blocks across streams). The plain run starts once the
 * graph run's step is captured: CUDA forbids a device-wide synchronisation
 * during a capture, and the plain run's first cudaMalloc (handles,
 * workspaces) or, with HSI_CUDA_NO_CACHE=1 as under memcheck, any cudaFree
 * may bring one. The graph's launches and the plain steps then overlap. */
static void test_threads_streams(void)
{
    rng_seed(36);
    thr_job jobs[2][2];
    int batch = 8, bands = 6, patch = 7, classes = 4;
    int64_t xs[5];
    int nd;
    float *gx;
    int32_t *gy;
    dev_batch("cnn2d", batch, bands, patch, classes, 1, xs, &nd, &gx, &gy);
    HSI_CHECK_OK(hsi_cuda_sync());
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < 2; r++) /* r 0: alone, in turn, on this thread's stream; 1: two threads */
        for (int k = 0; k < 2; k++) {
            jobs[r][k] = (thr_job){.name = "cnn2d", .bands = bands, .patch = patch, .classes = classes,
                                   .batch = batch, .graph = k, .own = r, .gx = gx, .gy = gy};
            /* the modules here: their initialisation draws from the process's generator */
            HSI_CHECK_OK(hsi_model_create(&jobs[r][k].m, "cnn2d", bands, patch, classes, HSI_F32, 5));
        }
    for (int k = 0; k < 2; k++) thr_train(&jobs[0][k]);
    thr_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    jobs[1][0].wait = &gate;     /* the plain run */
    jobs[1][1].captured = &gate; /* the graph run */
    pthread_t th[2];
    int made[2] = {0, 0};
    for (int k = 1; k >= 0; k--) { /* the graph run first */
        made[k] = pthread_create(&th[k], NULL, thr_train, &jobs[1][k]) == 0;
        CU_ASSERT(made[k]);
        if (!made[k]) {
            jobs[1][k].st = HSI_ERR_STATE;
            snprintf(jobs[1][k].err, sizeof jobs[1][k].err, "no thread");
            gate_open(&gate);
        }
    }
    for (int k = 0; k < 2; k++)
        if (made[k]) pthread_join(th[k], NULL);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++)
            if (jobs[r][k].st != HSI_OK) {
                CU_FAIL("a training run failed");
                fprintf(stderr, "\n  run %d/%d: %s\n", r, k, jobs[r][k].err);
            }
    for (int k = 0; k < 2; k++) {
        thr_job *a = &jobs[0][k], *b = &jobs[1][k];
        if (a->st != HSI_OK || b->st != HSI_OK) continue;
        CU_ASSERT_EQUAL(memcmp(a->loss, b->loss, sizeof a->loss), 0);
        CU_ASSERT_EQUAL_FATAL(a->n_state, b->n_state);
        for (int i = 0; i < a->n_state; i++) {
            const hsi_tensor *ta = a->state[i].t, *tb = b->state[i].t;
            size_t bytes = hsi_dtype_size(ta->data.dtype) * (size_t)hsi_tensor_count(ta);
            if (memcmp(hsi_tensor_ptr((hsi_tensor *)ta), hsi_tensor_ptr((hsi_tensor *)tb), bytes) != 0 ||
                (ta->grad && memcmp(hsi_tensor_ptr(ta->grad), hsi_tensor_ptr(tb->grad), bytes) != 0)) {
                CU_FAIL("two threads: another tensor");
                fprintf(stderr, "\n  %s (graph %d) differs\n", a->state[i].name, k);
            }
        }
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++) {
            free(jobs[r][k].state);
            hsi_module_free(jobs[r][k].m);
        }
    hsi_cuda_free(gx);
    hsi_cuda_free(gy);
}

/* The device's Adam state to a CPU optimiser and back (hsi_dmodel_optim_state,
 * what a GPU run's checkpoint and --resume use). After one step from zero
 * moments, AdamW's are m = (1 - beta1) g and v = (1 - beta2) g^2 of that
 * step's gradient g (to 1e-6: the device may contract into a fused
 * multiply-add): each moment in its own parameter's slot. Then a model made
 * from the saved parameters and given the saved state steps on as the
 * first does, dropout on (its keys follow the step count): the same losses
 * and parameters, bit for bit. */
static void test_optim_state(void)
{
    rng_seed(37);
    const int batch = 8, bands = 6, patch = 7, classes = 4;
    hsi_module *m = NULL, *m1 = NULL;
    hsi_optim *o = NULL;
    hsi_dmodel *d[2] = {NULL, NULL};
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    HSI_CHECK_OK(hsi_model_create(&m, "cnn2d", bands, patch, classes, HSI_F32, 5));
    HSI_CHECK_OK(hsi_model_create(&m1, "cnn2d", bands, patch, classes, HSI_F32, 6));
    int64_t xs[5];
    int nd;
    float *gx;
    int32_t *gy;
    dev_batch("cnn2d", batch, bands, patch, classes, 3, xs, &nd, &gx, &gy);
    HSI_CHECK_OK(hsi_dmodel_create(&d[0], m, nd - 1, xs + 1, batch, &cfg, 9));
    HSI_CHECK_OK(hsi_optim_new(&o, &cfg, m));
    HSI_CHECK_OK(hsi_dmodel_train_step(d[0], gx, gy, batch));
    HSI_CHECK_OK(hsi_dmodel_to_host(d[0], m, 1));
    HSI_CHECK_OK(hsi_dmodel_optim_state(d[0], m, o, 1));
    CU_ASSERT_EQUAL(o->step, 1);
    for (int j = 0; j < o->n; j++) {
        const hsi_tensor *p = o->params[j].t;
        CU_ASSERT_PTR_NOT_NULL_FATAL(p->grad);
        CU_ASSERT_PTR_NOT_NULL_FATAL(o->state1[j]);
        const float *g = hsi_tensor_ptr(p->grad), *m1p = hsi_tensor_ptr(o->state1[j]),
                    *v1p = hsi_tensor_ptr(o->state2[j]);
        int bad = 0;
        for (int64_t i = 0; i < hsi_tensor_count(p); i++) {
            double wm = (1 - cfg.beta1) * g[i], wv = (1 - cfg.beta2) * (double)g[i] * g[i];
            bad += fabs(m1p[i] - wm) > 1e-6 * fabs(wm) + 1e-30 || fabs(v1p[i] - wv) > 1e-6 * wv + 1e-30;
        }
        if (bad) {
            CU_FAIL("Adam moments to the host: not those of the first step");
            fprintf(stderr, "\n  %s: %d values\n", o->params[j].name, bad);
        }
    }
    /* one more step, then the state saved and a second model made from it */
    HSI_CHECK_OK(hsi_dmodel_train_step(d[0], gx, gy, batch));
    HSI_CHECK_OK(hsi_dmodel_to_host(d[0], m, 0));
    HSI_CHECK_OK(hsi_dmodel_optim_state(d[0], m, o, 1));
    CU_ASSERT_EQUAL(o->step, 2);
    HSI_CHECK_OK(hsi_dmodel_create(&d[1], m, nd - 1, xs + 1, batch, &cfg, 9));
    HSI_CHECK_OK(hsi_dmodel_optim_state(d[1], m, o, 0));
    CU_ASSERT_EQUAL(hsi_dmodel_steps(d[1]), 2);
    for (int s = 0; s < 3; s++) {
        double l[2] = {0, 1};
        for (int v = 0; v < 2; v++) {
            HSI_CHECK_OK(hsi_dmodel_train_step(d[v], gx, gy, batch));
            HSI_CHECK_OK(hsi_dmodel_loss(d[v], &l[v]));
        }
        CU_ASSERT_EQUAL(l[0], l[1]);
    }
    HSI_CHECK_OK(hsi_dmodel_to_host(d[0], m, 0));
    HSI_CHECK_OK(hsi_dmodel_to_host(d[1], m1, 0));
    states_same(m, m1, "resumed from the saved state");
    /* another optimiser kind is refused, naming the model's */
    hsi_optim *sgd = NULL;
    hsi_optim_config sc;
    hsi_optim_config_default(&sc, HSI_OPT_SGD);
    HSI_CHECK_OK(hsi_optim_new(&sgd, &sc, m));
    CU_ASSERT_EQUAL(hsi_dmodel_optim_state(d[0], m, sgd, 1), HSI_ERR_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "AdamW"));
    hsi_optim_free(sgd);
    for (int v = 0; v < 2; v++) hsi_dmodel_free(d[v]);
    hsi_optim_free(o);
    hsi_module_free(m);
    hsi_module_free(m1);
    hsi_cuda_free(gx);
    hsi_cuda_free(gy);
}

static void test_graph_cnn2d(void) { rng_seed(34); graph_parity("cnn2d", 6, 7, 4, 10); }
static void test_graph_hybridsn(void) { rng_seed(35); graph_parity("hybridsn", 16, 9, 5, 6); }

/* The device holds float32 only: a float64 model is refused, naming the
 * dtype, by every model's first parameter (before the arena, the copies'
 * own check refused it; the arena's copies had none). */
static void test_model_f64_refused(void)
{
    const char *names[3] = {"cnn2d", "hybridsn", "cnn1d"};
    for (int k = 0; k < 3; k++) {
        hsi_module *m = NULL;
        HSI_CHECK_OK(hsi_model_create(&m, names[k], 16, k == 2 ? 1 : 9, 4, HSI_F64, 5));
        int64_t xs[5];
        int nd = hsi_model_input_shape(names[k], 2, 16, k == 2 ? 1 : 9, xs);
        hsi_optim_config cfg;
        hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
        hsi_dmodel *d = NULL;
        CU_ASSERT_EQUAL(hsi_dmodel_create(&d, m, nd - 1, xs + 1, 2, &cfg, 9), HSI_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NULL(d);
        CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "must be packed float32"));
        hsi_dmodel_free(d);
        hsi_module_free(m);
    }
}

static void test_model_cnn2d(void) { rng_seed(31); model_parity("cnn2d", 6, 7, 4, 10); }
static void test_model_hybridsn(void) { rng_seed(32); model_parity("hybridsn", 16, 9, 5, 6); }
static void test_model_cnn1d(void) { rng_seed(33); model_parity("cnn1d", 20, 1, 3, 8); }

HSI_SUITE(cuda_model, HSI_SUITE_NEEDS_CUDA, {"cnn2d step vs the CPU engine", test_model_cnn2d},
          {"hybridsn step vs the CPU engine", test_model_hybridsn},
          {"cnn1d step vs the CPU engine", test_model_cnn1d},
          {"a float64 model refused, not copied as float32", test_model_f64_refused},
          {"Adam state to a CPU optimiser and back: resumes bit for bit", test_optim_state},
          {"cnn2d steps as a CUDA Graph: the same bits", test_graph_cnn2d},
          {"hybridsn steps as a CUDA Graph: the same bits", test_graph_hybridsn},
          {"two threads on their own streams: the same bits as alone", test_threads_streams})
