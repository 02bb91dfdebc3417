/* test_capi.c — the C API for foreign callers (pipeline/capi.h) against
 * the structs it wraps: a cube's accessors equal what hsi_cube_open and the
 * header say, a wrapped array reads back its bytes (any strides, swapped),
 * statistics equal a direct computation, the preprocessing handle equals
 * the struct API, JSON training options are checked by name, and a run's
 * predictions and evaluation agree with the run directory. */
#include <cJSON.h>

#include "io/cube.h"
#include "pipeline/capi.h"
#include "pipeline/preprocess.h"
#include "test.h"

#define CUBE "data_samples/scene.hdr"
#define GT "data_samples/scene_gt.hdr"

static void test_cube_accessors(void)
{
    hsi_hcube *c = NULL;
    HSI_CHECK_OK(hsi_hcube_open(&c, CUBE, NULL));
    int64_t sh[3], stv[3];
    hsi_hcube_shape(c, sh);
    hsi_hcube_strides(c, stv);
    CU_ASSERT(sh[0] == 128 && sh[1] == 96 && sh[2] == 96);
    CU_ASSERT(stv[0] == 2 * 96 && stv[1] == 2 * 96 * 128 && stv[2] == 2); /* BIL uint16 */
    CU_ASSERT_STRING_EQUAL(hsi_hcube_dtype(c), "uint16");
    CU_ASSERT_STRING_EQUAL(hsi_hcube_interleave(c), "bil");
    CU_ASSERT_STRING_EQUAL(hsi_hcube_format(c), "envi");
    CU_ASSERT_EQUAL(hsi_hcube_swapped(c), 0);
    size_t size = 0;
    const char *buf = hsi_hcube_buffer(c, &size), *data = hsi_hcube_data(c);
    CU_ASSERT(data >= buf && data + 128 * 96 * 96 * 2 <= buf + size); /* a view over the mapping */
    CU_ASSERT_STRING_EQUAL(hsi_hcube_meta_get(c, "Samples"), "96");
    CU_ASSERT(hsi_hcube_meta_count(c) >= 8);
    CU_ASSERT_PTR_NULL(hsi_hcube_meta_key(c, 10000));
    CU_ASSERT_PTR_NOT_NULL_FATAL(hsi_hcube_wavelengths(c));
    hsi_cube ref;
    hsi_cube_init(&ref);
    HSI_CHECK_OK(hsi_cube_open(&ref, CUBE, NULL));
    CU_ASSERT_EQUAL(memcmp(hsi_hcube_wavelengths(c), ref.meta.wavelength, 128 * sizeof(double)), 0);
    CU_ASSERT_EQUAL(memcmp(data, (const char *)ref.view.buf->data + ref.view.offset, 2 * 96 * 128), 0);
    hsi_cube_free(&ref);
    /* statistics = the first band computed here */
    double mean[128], sd[128], mn[128], mx[128];
    int64_t cnt[128];
    HSI_CHECK_OK(hsi_hcube_stats(c, NULL, mean, sd, mn, mx, cnt));
    double s = 0, s2 = 0, lo = 1e30, hi = -1e30;
    for (int l = 0; l < 96; l++)
        for (int x = 0; x < 96; x++) {
            uint16_t v;
            memcpy(&v, data + l * stv[1] + x * stv[2], 2); /* band 0 */
            s += v;
            s2 += (double)v * v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    double m0 = s / (96 * 96);
    HSI_ASSERT_NEAR(mean[0], m0, 1e-9 * m0);
    HSI_ASSERT_NEAR(sd[0], sqrt(s2 / (96 * 96) - m0 * m0), 1e-6 * m0);
    CU_ASSERT(mn[0] == lo && mx[0] == hi && cnt[0] == 96 * 96);
    hsi_hcube_free(c);
    /* errors: the message names the file */
    HSI_CHECK_FAILS(hsi_hcube_open(&c, "no/such/cube.hdr", NULL), HSI_ERR_IO, "no/such/cube.hdr");
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_STRING_EQUAL(hsi_version(), "0.1.0");
    CU_ASSERT_EQUAL(hsi_abi_version(), HSI_ABI_VERSION);
}

/* A wrapped (line, sample, band) array with negative strides and swapped
 * bytes reads as the same values, and writes as ENVI with the caller's keys. */
static void test_wrap_and_write(void)
{
    enum { B = 3, L = 4, S = 5 };
    uint16_t a[L][S][B]; /* BIP, big-endian */
    for (int l = 0; l < L; l++)
        for (int s = 0; s < S; s++)
            for (int b = 0; b < B; b++) {
                uint16_t v = (uint16_t)(1000 * b + 10 * l + s);
                a[l][s][b] = (uint16_t)((v >> 8) | (v << 8));
            }
    /* (band, line, sample) with the lines reversed: negative line stride */
    int64_t shape[3] = {B, L, S}, strides[3] = {2, -(int64_t)(2 * S * B), 2 * B};
    hsi_hcube *c = NULL, *back = NULL;
    HSI_CHECK_OK(hsi_hcube_wrap(&c, &a[L - 1][0][0], "uint16", shape, strides, 1));
    CU_ASSERT_STRING_EQUAL(hsi_hcube_interleave(c), "bip");
    CU_ASSERT_STRING_EQUAL(hsi_hcube_format(c), "memory");
    const char *path = hsi_test_tmp("capi_w.hdr");
    const char *keys[] = {"wavelength", "description", "samples"};
    const char *vals[] = {"400, 500, 600", "written through the C API", "999"};
    HSI_CHECK_OK(hsi_hcube_write_envi(c, path, "bil", "float32", keys, vals, 3));
    HSI_CHECK_OK(hsi_hcube_open(&back, path, NULL));
    int64_t sh[3];
    hsi_hcube_shape(back, sh);
    CU_ASSERT(sh[0] == B && sh[1] == L && sh[2] == S); /* "samples = 999" ignored */
    CU_ASSERT_STRING_EQUAL(hsi_hcube_interleave(back), "bil");
    CU_ASSERT_STRING_EQUAL(hsi_hcube_dtype(back), "float32");
    HSI_ASSERT_NEAR(hsi_hcube_wavelengths(back)[2], 600, 0);
    CU_ASSERT_STRING_EQUAL(hsi_hcube_meta_get(back, "description"), "written through the C API");
    int64_t st[3];
    hsi_hcube_strides(back, st);
    const char *d = hsi_hcube_data(back);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int l = 0; l < L; l++)
            for (int s = 0; s < S; s++) {
                float v;
                memcpy(&v, d + b * st[0] + l * st[1] + s * st[2], 4);
                bad += v != (float)(1000 * b + 10 * (L - 1 - l) + s);
            }
    CU_ASSERT_EQUAL(bad, 0);
    HSI_CHECK_FAILS(hsi_hcube_write_envi(c, path, "bsx", NULL, NULL, NULL, 0), HSI_ERR_ARG, "bsq, bil or bip");
    hsi_hcube_free(back);
    HSI_CHECK_FAILS(hsi_hcube_wrap(&back, a, "uint99", shape, strides, 0), HSI_ERR_ARG, "uint99");
    CU_ASSERT_PTR_NULL(back);
    hsi_hcube_free(c);
}

/* The preprocessing handle gives the struct API's features. */
static void test_prep_handle(void)
{
    hsi_hcube *c = NULL;
    hsi_hprep *p = NULL, *q = NULL;
    HSI_CHECK_OK(hsi_hcube_open(&c, CUBE, NULL));
    HSI_CHECK_OK(hsi_hprep_fit(&p, c, NULL, "2-60", NULL, 0, "zscore", 4, 0, 0));
    CU_ASSERT_EQUAL(hsi_hprep_n_out(p), 4);
    CU_ASSERT_EQUAL(hsi_hprep_n_bands(p), 59);
    CU_ASSERT_EQUAL(hsi_hprep_n_in(p), 128);
    CU_ASSERT_EQUAL(hsi_hprep_bands(p)[0], 1);
    CU_ASSERT_PTR_NOT_NULL(hsi_hprep_components(p));
    float *a = malloc(sizeof(float) * 4 * 96 * 96), *b = malloc(sizeof(float) * 4 * 96 * 96);
    HSI_CHECK_OK(hsi_hprep_transform(p, c, a));
    const char *path = hsi_test_tmp("capi_prep.safetensors");
    HSI_CHECK_OK(hsi_hprep_save(p, path));
    HSI_CHECK_OK(hsi_hprep_load(&q, path));
    HSI_CHECK_OK(hsi_hprep_transform(q, c, b));
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * 4 * 96 * 96), 0);
    /* the struct API on the same cube */
    hsi_cube cube;
    hsi_cube_init(&cube);
    HSI_CHECK_OK(hsi_cube_open(&cube, CUBE, NULL));
    hsi_prep_spec ps;
    hsi_prep_spec_init(&ps);
    ps.bands = "2-60";
    ps.pca = 4;
    hsi_prep r;
    HSI_CHECK_OK(hsi_prep_fit(&r, &cube, NULL, &ps));
    hsi_view f;
    HSI_CHECK_OK(hsi_prep_transform(&f, &r, &cube.view, NULL));
    CU_ASSERT_EQUAL(memcmp(a, f.buf->data, sizeof(float) * 4 * 96 * 96), 0);
    hsi_view_release(&f);
    hsi_prep_free(&r);
    hsi_cube_free(&cube);
    hsi_hprep_free(q);
    HSI_CHECK_FAILS(hsi_hprep_fit(&q, c, NULL, NULL, NULL, 0, "zscroe", 0, 0, 0), HSI_ERR_ARG, "zscroe");
    HSI_CHECK_FAILS(hsi_hprep_fit(&q, c, NULL, NULL, NULL, 0, NULL, 3, 0.5, 0), HSI_ERR_ARG, "not both");
    CU_ASSERT_PTR_NULL(q);
    free(a);
    free(b);
    hsi_hprep_free(p);
    hsi_hprep_free(q);
    hsi_hcube_free(c);
}

static int n_epochs;
static int count_epochs(void *ctx, int kind, const char *text, int epoch, int epochs, double loss,
                        double acc, double val, double lr)
{
    (void)ctx;
    CU_ASSERT_PTR_NOT_NULL(text);
    if (kind == 1) {
        n_epochs++;
        CU_ASSERT(isfinite(loss) && lr > 0 && epochs == 2);
    }
    return 0;
}

/* Training from JSON options; a run handle predicts and evaluates. */
static void test_train_and_run(void)
{
    const char *dir = hsi_test_tmp("capi_run");
    char *metrics = NULL, *ev = NULL;
    HSI_CHECK_FAILS(hsi_train_json(CUBE, GT, dir, "{\"epochz\": 2}", NULL, NULL, NULL), HSI_ERR_ARG,
                    "'epochz'");
    HSI_CHECK_FAILS(hsi_train_json(CUBE, GT, dir, "{\"train\": 2}", NULL, NULL, NULL), HSI_ERR_ARG,
                    "'train'");
    HSI_CHECK_FAILS(hsi_train_json(CUBE, GT, dir, "[1]", NULL, NULL, NULL), HSI_ERR_ARG, "JSON object");
    HSI_CHECK_FAILS(hsi_train_json(CUBE, GT, dir, "{\"conv\": \"fast\"}", NULL, NULL, NULL), HSI_ERR_ARG,
                    "'conv'");
    /* cuDNN on the CPU (the default device) is refused before any work */
    HSI_CHECK_FAILS(hsi_train_json(CUBE, GT, dir, "{\"conv\": \"cudnn\"}", NULL, NULL, NULL), HSI_ERR_ARG,
                    "cudnn");
    n_epochs = 0;
    HSI_CHECK_OK(hsi_train_json(CUBE, GT, dir, "{\"epochs\": 2, \"train\": 0.03, \"seed\": 4}",
                                count_epochs, NULL, &metrics));
    CU_ASSERT_EQUAL(n_epochs, 2);
    cJSON *m = cJSON_Parse(metrics);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    hsi_hrun *r = NULL;
    hsi_hcube *c = NULL, *gt = NULL;
    HSI_CHECK_OK(hsi_hrun_load(&r, dir));
    CU_ASSERT_STRING_EQUAL(hsi_hrun_model(r), "cnn2d");
    CU_ASSERT_EQUAL(hsi_hrun_n_classes(r), 8);
    CU_ASSERT_EQUAL(hsi_hrun_class_label(r, 0), 1);
    CU_ASSERT_EQUAL(hsi_hprep_n_out(hsi_hrun_prep(r)), 30);
    CU_ASSERT_EQUAL(hsi_hrun_has_split(r), 1);
    HSI_CHECK_OK(hsi_hcube_open(&c, CUBE, NULL));
    HSI_CHECK_OK(hsi_hcube_open(&gt, GT, NULL));
    int32_t *map = malloc(sizeof(int32_t) * 96 * 96), *lab = malloc(sizeof(int32_t) * 96 * 96);
    uint8_t roles[96 * 96];
    HSI_CHECK_OK(hsi_hrun_predict(r, c, map, 0));
    HSI_CHECK_OK(hsi_hrun_roles(r, roles, 96, 96));
    const uint8_t *g = hsi_hcube_data(gt);
    int64_t n_test = 0;
    for (int i = 0; i < 96 * 96; i++) {
        lab[i] = g[i];
        n_test += roles[i] == 3;
    }
    HSI_CHECK_OK(hsi_hrun_evaluate(r, map, lab, 96, 96, "test", &ev));
    cJSON *e = cJSON_Parse(ev);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "oa")->valuedouble, cJSON_GetObjectItem(m, "oa")->valuedouble, 0);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "n")->valuedouble, (double)n_test, 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(e, "on")->valuestring, "test");
    cJSON_Delete(e);
    hsi_string_free(ev);
    HSI_CHECK_OK(hsi_hrun_evaluate(r, map, lab, 96, 96, "train", &ev));
    e = cJSON_Parse(ev);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "n")->valuedouble,
                    cJSON_GetObjectItem(cJSON_GetObjectItem(m, "split_counts"), "train")->valuedouble, 0);
    cJSON_Delete(e);
    hsi_string_free(ev);
    HSI_CHECK_FAILS(hsi_hrun_evaluate(r, map, lab, 96, 96, "val", &ev), HSI_ERR_ARG, "'val'");
    cJSON_Delete(m);
    hsi_string_free(metrics);
    free(map);
    free(lab);
    hsi_hcube_free(c);
    hsi_hcube_free(gt);
    hsi_hrun_free(r);
}

HSI_SUITE(capi, 0, {"cube handle: accessors, zero-copy, statistics", test_cube_accessors},
          {"wrapped arrays (strides, byte order) and ENVI writing", test_wrap_and_write},
          {"preprocessing handle = the struct API", test_prep_handle},
          {"training from JSON options; run handle predicts and evaluates", test_train_and_run})
