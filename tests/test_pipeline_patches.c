/* test_pipeline_patches.c — patch extraction against numpy.pad 'reflect'
 * (tests/fixtures/pipeline/pad_reflect.txt from make_pipeline_fixtures.py)
 * and against naive references written here: windows read element by
 * element, flips and rot90 applied as array operations on a copy. */
#include "test.h"

#include "pipeline/patches.h"

static float val(int64_t c, int64_t y, int64_t x) { return (float)(1000 * c + 10 * y + x) + 0.25f; }

/* A (C, L, S) float32 cube with values val(), stored with layout 0 BSQ,
 * 1 BIP, 2 BIL with a 3-float gap per line (general strides). */
static hsi_view make_cube(int64_t C, int64_t L, int64_t S, int layout)
{
    hsi_buffer *buf = NULL;
    int64_t n = C * L * (S + 3);
    CU_ASSERT_EQUAL_FATAL(hsi_buffer_alloc(&buf, (size_t)n * 4, HSI_BUF_HOST), HSI_OK);
    float *d = buf->data;
    int64_t st[3];
    if (layout == 0) st[0] = L * S, st[1] = S, st[2] = 1;
    else if (layout == 1) st[0] = 1, st[1] = S * C, st[2] = C;
    else st[0] = S + 3, st[1] = C * (S + 3), st[2] = 1;
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < L; y++)
            for (int64_t x = 0; x < S; x++) d[c * st[0] + y * st[1] + x * st[2]] = val(c, y, x);
    hsi_view v;
    int64_t shape[3] = {C, L, S}, bst[3] = {st[0] * 4, st[1] * 4, st[2] * 4};
    CU_ASSERT_EQUAL(hsi_view_make(&v, buf, 0, HSI_F32, 3, shape, bst, 0), HSI_OK);
    hsi_buffer_release(buf);
    return v;
}

/* Independent reflect for the naive reference (numpy semantics, checked
 * against the fixture below). */
static int64_t ref_reflect(int64_t t, int64_t n)
{
    if (n == 1) return 0;
    while (t < 0 || t >= n) t = t < 0 ? -t : 2 * (n - 1) - t;
    return t;
}

/* Naive window: w (C, P, P); zero = 1 for zero padding. */
static void naive_window(float *w, int64_t C, int64_t L, int64_t S, int64_t y0, int64_t x0, int P,
                         int zero)
{
    int r = P / 2;
    for (int64_t c = 0; c < C; c++)
        for (int i = 0; i < P; i++)
            for (int j = 0; j < P; j++) {
                int64_t y = y0 - r + i, x = x0 - r + j;
                float v;
                if (y >= 0 && y < L && x >= 0 && x < S)
                    v = val(c, y, x);
                else if (zero)
                    v = 0.0f;
                else
                    v = val(c, ref_reflect(y, L), ref_reflect(x, S));
                w[(c * P + i) * P + j] = v;
            }
}

static void test_mirror_vs_numpy(void)
{
    char *text = NULL;
    size_t len = 0;
    HSI_CHECK_OK(hsi_read_file("tests/fixtures/pipeline/pad_reflect.txt", &text, &len));
    int cases = 0;
    char *p = text;
    while ((p = strstr(p, "case "))) {
        int h, w, pad, used;
        CU_ASSERT_EQUAL_FATAL(sscanf(p, "case %d %d %d%n", &h, &w, &pad, &used), 3);
        p += used;
        int H = h + 2 * pad, W = w + 2 * pad, P = 2 * pad + 1;
        double *padded = malloc((size_t)(H * W) * sizeof *padded);
        for (int i = 0; i < H * W; i++) padded[i] = strtod(p, &p);
        /* cube (1, h, w) with value y*w + x */
        hsi_view cube;
        int64_t shape[3] = {1, h, w};
        HSI_CHECK_OK(hsi_view_alloc(&cube, HSI_F32, 3, shape, HSI_BUF_HOST));
        for (int i = 0; i < h * w; i++) ((float *)cube.buf->data)[i] = (float)i;
        hsi_patcher pt;
        HSI_CHECK_OK(hsi_patcher_init(&pt, &cube, P, HSI_PAD_MIRROR, NULL));
        float *out = malloc((size_t)(P * P) * sizeof *out);
        int bad = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int64_t px = (int64_t)y * w + x;
                HSI_CHECK_OK(hsi_patches_extract(&pt, out, &px, 1, 0, 0));
                for (int i = 0; i < P; i++)
                    for (int j = 0; j < P; j++) {
                        bad += out[i * P + j] != (float)padded[(y + i) * W + (x + j)];
                        /* and the test's own reflect agrees with numpy */
                        bad += ref_reflect(y - pad + i, h) * w + ref_reflect(x - pad + j, w) !=
                               (int64_t)padded[(y + i) * W + (x + j)];
                    }
            }
        CU_ASSERT_EQUAL(bad, 0);
        cases++;
        free(out);
        free(padded);
        hsi_patcher_free(&pt);
        hsi_view_release(&cube);
    }
    CU_ASSERT_EQUAL(cases, 3);
    free(text);
}

static void test_layouts_vs_naive(void)
{
    int64_t C = 3, L = 7, S = 6;
    int P = 5;
    float *out = malloc((size_t)(C * P * P) * 4), *ref = malloc((size_t)(C * P * P) * 4);
    for (int layout = 0; layout < 3; layout++)
        for (int zero = 0; zero < 2; zero++) {
            hsi_view cube = make_cube(C, L, S, layout);
            hsi_patcher pt;
            HSI_CHECK_OK(hsi_patcher_init(&pt, &cube, P, zero ? HSI_PAD_ZERO : HSI_PAD_MIRROR, NULL));
            CU_ASSERT_EQUAL(hsi_patcher_sample_floats(&pt), C * P * P);
            int bad = 0;
            for (int64_t px = 0; px < L * S; px++) {
                HSI_CHECK_OK(hsi_patches_extract(&pt, out, &px, 1, 0, 0));
                naive_window(ref, C, L, S, px / S, px % S, P, zero);
                bad += memcmp(out, ref, (size_t)(C * P * P) * 4) != 0;
            }
            CU_ASSERT_EQUAL(bad, 0);
            hsi_patcher_free(&pt);
            hsi_view_release(&cube);
        }
    /* several pixels into one (n, C, P, P) buffer */
    hsi_view cube = make_cube(C, L, S, 0);
    hsi_patcher pt;
    HSI_CHECK_OK(hsi_patcher_init(&pt, &cube, 3, HSI_PAD_ZERO, NULL));
    int64_t pix[3] = {0, 20, 41};
    float batch[3 * 3 * 9], one[27];
    HSI_CHECK_OK(hsi_patches_extract(&pt, batch, pix, 3, 0, 0));
    for (int i = 0; i < 3; i++) {
        naive_window(one, C, L, S, pix[i] / S, pix[i] % S, 3, 1);
        CU_ASSERT_EQUAL(memcmp(batch + i * 27, one, sizeof one), 0);
    }
    hsi_patcher_free(&pt);
    hsi_view_release(&cube);
    free(out);
    free(ref);
}

/* Flips and rotations as array operations on a (C, P, P) copy. */
static void naive_augment(float *w, int64_t C, int P, const hsi_patch_draw *d)
{
    float *t = malloc((size_t)(C * P * P) * 4);
    int64_t PP = (int64_t)P * P;
    if (d->flip_ud) {
        memcpy(t, w, (size_t)(C * PP) * 4);
        for (int64_t c = 0; c < C; c++)
            for (int i = 0; i < P; i++)
                for (int j = 0; j < P; j++) w[c * PP + i * P + j] = t[c * PP + (P - 1 - i) * P + j];
    }
    if (d->flip_lr) {
        memcpy(t, w, (size_t)(C * PP) * 4);
        for (int64_t c = 0; c < C; c++)
            for (int i = 0; i < P; i++)
                for (int j = 0; j < P; j++) w[c * PP + i * P + j] = t[c * PP + i * P + (P - 1 - j)];
    }
    for (int k = 0; k < d->rot; k++) { /* numpy.rot90: out[i][j] = in[j][P-1-i] */
        memcpy(t, w, (size_t)(C * PP) * 4);
        for (int64_t c = 0; c < C; c++)
            for (int i = 0; i < P; i++)
                for (int j = 0; j < P; j++) w[c * PP + i * P + j] = t[c * PP + j * P + (P - 1 - i)];
    }
    free(t);
}

static void test_augment_vs_naive(void)
{
    int64_t C = 4, L = 9, S = 8;
    int P = 5, n = 64;
    hsi_augment aug = {1, 1, 0.0f};
    int seen_rot[4] = {0}, seen_ud = 0, seen_lr = 0;
    for (int layout = 0; layout < 3; layout++) {
        hsi_view cube = make_cube(C, L, S, layout);
        hsi_patcher pt;
        HSI_CHECK_OK(hsi_patcher_init(&pt, &cube, P, HSI_PAD_MIRROR, &aug));
        int64_t *pix = malloc((size_t)n * 8);
        for (int i = 0; i < n; i++) pix[i] = (i * 37) % (L * S);
        float *out = malloc((size_t)(n * C * P * P) * 4), *ref = malloc((size_t)(C * P * P) * 4);
        uint64_t seed = 12345;
        HSI_CHECK_OK(hsi_patches_extract(&pt, out, pix, n, 1, seed));
        int bad = 0;
        for (int i = 0; i < n; i++) {
            hsi_patch_draw d;
            hsi_patch_draw_make(&d, &aug, hsi_patch_sample_seed(seed, i));
            seen_rot[d.rot]++;
            seen_ud += d.flip_ud;
            seen_lr += d.flip_lr;
            naive_window(ref, C, L, S, pix[i] / S, pix[i] % S, P, 0);
            naive_augment(ref, C, P, &d);
            bad += memcmp(out + i * C * P * P, ref, (size_t)(C * P * P) * 4) != 0;
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* same seed: same bytes; no augmentation: plain windows */
        float *again = malloc((size_t)(n * C * P * P) * 4);
        HSI_CHECK_OK(hsi_patches_extract(&pt, again, pix, n, 1, seed));
        CU_ASSERT_EQUAL(memcmp(out, again, (size_t)(n * C * P * P) * 4), 0);
        HSI_CHECK_OK(hsi_patches_extract(&pt, again, pix, n, 1, seed + 1));
        CU_ASSERT_NOT_EQUAL(memcmp(out, again, (size_t)(n * C * P * P) * 4), 0);
        HSI_CHECK_OK(hsi_patches_extract(&pt, again, pix, 1, 0, seed));
        naive_window(ref, C, L, S, pix[0] / S, pix[0] % S, P, 0);
        CU_ASSERT_EQUAL(memcmp(again, ref, (size_t)(C * P * P) * 4), 0);
        free(again);
        free(out);
        free(ref);
        free(pix);
        hsi_patcher_free(&pt);
        hsi_view_release(&cube);
    }
    /* every rotation and both flips occur (3 x 64 draws) */
    for (int k = 0; k < 4; k++) CU_ASSERT(seen_rot[k] > 10);
    CU_ASSERT(seen_ud > 40 && seen_ud < 152);
    CU_ASSERT(seen_lr > 40 && seen_lr < 152);
}

static void test_noise(void)
{
    int64_t C = 6, L = 10, S = 10;
    int P = 7, n = 100;
    hsi_view cube = make_cube(C, L, S, 0);
    hsi_augment clean = {1, 1, 0.0f}, noisy = {1, 1, 0.5f};
    hsi_patcher a, b;
    HSI_CHECK_OK(hsi_patcher_init(&a, &cube, P, HSI_PAD_MIRROR, &clean));
    HSI_CHECK_OK(hsi_patcher_init(&b, &cube, P, HSI_PAD_MIRROR, &noisy));
    int64_t pix[100], per = C * P * P;
    for (int i = 0; i < n; i++) pix[i] = (i * 13) % (L * S);
    float *x0 = malloc((size_t)(n * per) * 4), *x1 = malloc((size_t)(n * per) * 4);
    HSI_CHECK_OK(hsi_patches_extract(&a, x0, pix, n, 1, 99));
    HSI_CHECK_OK(hsi_patches_extract(&b, x1, pix, n, 1, 99));
    /* the noise is added on top of the same flips/rotations */
    double s = 0, s2 = 0;
    int64_t m = n * per;
    for (int64_t i = 0; i < m; i++) {
        double d = (double)x1[i] - x0[i];
        s += d;
        s2 += d * d;
    }
    double mean = s / m, sd = sqrt(s2 / m - mean * mean);
    CU_ASSERT(fabs(mean) < 0.02);
    CU_ASSERT(fabs(sd - 0.5) < 0.02);
    /* per-sample streams: sample 5 alone with the same sample seed matches */
    float *one = malloc((size_t)per * 4);
    hsi_batch bt;
    memset(&bt, 0, sizeof bt);
    int64_t samples[2] = {7, 5};
    int32_t labels[100];
    for (int i = 0; i < n; i++) labels[i] = i % 9;
    float *xb = malloc((size_t)(2 * per) * 4);
    int32_t yb[2] = {-1, -1};
    hsi_patch_dataset ds = {&b, pix, labels, 1};
    bt.n = 2;
    bt.samples = samples;
    bt.seed = 99;
    bt.x = xb;
    bt.y = yb;
    HSI_CHECK_OK(hsi_patch_fill(&ds, &bt));
    int64_t p7[2] = {pix[7], pix[5]};
    HSI_CHECK_OK(hsi_patches_extract(&b, x1, p7, 2, 1, 99));
    CU_ASSERT_EQUAL(memcmp(xb, x1, (size_t)(2 * per) * 4), 0);
    CU_ASSERT_EQUAL(yb[0], 7);
    CU_ASSERT_EQUAL(yb[1], 5);
    /* the pixel fill (patches cut on the device): the indices and labels,
     * and extracting them with the batch's seed gives the patch fill's batch */
    int64_t xp[2] = {-1, -1};
    int32_t yp[2] = {-1, -1};
    bt.x = xp;
    bt.y = yp;
    HSI_CHECK_OK(hsi_pixel_fill(&ds, &bt));
    CU_ASSERT_EQUAL(xp[0], pix[7]);
    CU_ASSERT_EQUAL(xp[1], pix[5]);
    CU_ASSERT_EQUAL(yp[0], 7);
    CU_ASSERT_EQUAL(yp[1], 5);
    HSI_CHECK_OK(hsi_patches_extract(&b, x1, xp, 2, 1, bt.seed));
    CU_ASSERT_EQUAL(memcmp(xb, x1, (size_t)(2 * per) * 4), 0);
    int64_t bad[1] = {L * S};
    hsi_patch_dataset dbad = {&b, bad, NULL, 1};
    int64_t s0[1] = {0};
    bt.n = 1;
    bt.samples = s0;
    HSI_CHECK_FAILS(hsi_pixel_fill(&dbad, &bt), HSI_ERR_ARG, "asks for pixel");
    free(one);
    free(xb);
    free(x0);
    free(x1);
    hsi_patcher_free(&a);
    hsi_patcher_free(&b);
    hsi_view_release(&cube);
}

static void test_errors(void)
{
    hsi_view cube = make_cube(2, 4, 4, 0), d;
    hsi_patcher pt;
    HSI_CHECK_FAILS(hsi_patcher_init(&pt, &cube, 4, HSI_PAD_ZERO, NULL), HSI_ERR_ARG, "odd");
    int64_t shape[3] = {2, 4, 4};
    HSI_CHECK_OK(hsi_view_alloc(&d, HSI_F64, 3, shape, HSI_BUF_HOST));
    HSI_CHECK_FAILS(hsi_patcher_init(&pt, &d, 3, HSI_PAD_ZERO, NULL), HSI_ERR_UNSUPPORTED,
                    "float64");
    HSI_CHECK_OK(hsi_patcher_init(&pt, &cube, 3, HSI_PAD_ZERO, NULL));
    float out[18];
    int64_t px = 16;
    HSI_CHECK_FAILS(hsi_patches_extract(&pt, out, &px, 1, 0, 0), HSI_ERR_ARG,
                    "pixel 16; the scene has 16");
    /* the check alone (made before a device extraction): the first bad one named */
    int64_t pxs[4] = {0, 15, -1, 99};
    HSI_CHECK_OK(hsi_patches_check(&pt, pxs, 2));
    HSI_CHECK_FAILS(hsi_patches_check(&pt, pxs, 4), HSI_ERR_ARG, "sample 2 asks for pixel -1");
    hsi_patcher_free(&pt);
    hsi_view_release(&cube);
    hsi_view_release(&d);
}

HSI_SUITE(pipeline_patches, 0, {"mirror padding vs numpy.pad reflect", test_mirror_vs_numpy},
          {"BSQ/BIP/strided, mirror/zero vs naive", test_layouts_vs_naive},
          {"flips/rotations vs naive array ops", test_augment_vs_naive},
          {"noise statistics, fill callback", test_noise}, {"errors", test_errors})
