/* test_kernels_cli.c — `hsi stats`, `hsi bands`, `hsi pca fit|apply` and
 * `hsi preprocess` end to end on the committed sample scene, checked
 * against numpy/scikit-learn values (tests/fixtures/kernels/scene_ref.txt,
 * from make_kernels_fixtures.py). Runs ./build/hsi as a user would. */
#include <cJSON.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "io/cube.h"
#include "test.h"

#define SCENE "data_samples/scene.hdr"
#define SCENE_GT "data_samples/scene_gt.hdr"

static char out[1 << 17];

/* fixture array `name` from scene_ref.txt (static storage, 1024 values max) */
static const double *sref(const char *name, int64_t want)
{
    static double v[8][1024];
    static int slot;
    double *d = v[slot++ & 7];
    FILE *fp = fopen("tests/fixtures/kernels/scene_ref.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char nm[64];
    long long n;
    int found = 0;
    while (!found && fscanf(fp, "%63s %lld", nm, &n) == 2) {
        for (long long i = 0; i < n; i++) {
            double x;
            if (fscanf(fp, "%lf", &x) != 1) break;
            if (!strcmp(nm, name) && i < 1024) d[i] = x;
        }
        if (!strcmp(nm, name)) found = n == want;
    }
    fclose(fp);
    if (!found) fprintf(stderr, "\n  fixture %s missing or not %lld values\n", name, (long long)want);
    CU_ASSERT_FATAL(found);
    return d;
}

static void test_cli_stats(void)
{
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --json --mask " SCENE_GT), 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON *arr = cJSON_GetObjectItem(j, "stats");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(arr), 128);
    const double *mean = sref("scene_masked_mean", 128), *std = sref("scene_masked_std", 128);
    double cnt = sref("scene_masked_count", 1)[0];
    int bad = 0;
    for (int b = 0; b < 128; b++) {
        cJSON *e = cJSON_GetArrayItem(arr, b);
        double m = cJSON_GetObjectItem(e, "mean")->valuedouble, s = cJSON_GetObjectItem(e, "std")->valuedouble;
        bad += fabs(m - mean[b]) > 1e-9 * fabs(mean[b]) || fabs(s - std[b]) > 1e-9 * std[b];
        bad += cJSON_GetObjectItem(e, "count")->valuedouble != cnt;
        bad += cJSON_GetObjectItem(e, "band")->valueint != b + 1;
    }
    CU_ASSERT_EQUAL(bad, 0);
    cJSON_Delete(j);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --bands 3-2"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "reversed"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --mask " SCENE), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "one band"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats " SCENE " --percentiles 101"), 2);
}

static void test_cli_bands(void)
{
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " bands " SCENE " --opbs 5"), 0);
    const double *pk = sref("scene_opbs5", 5);
    char want[128];
    snprintf(want, sizeof want, "bands: %d,%d,%d,%d,%d\n", (int)pk[0] + 1, (int)pk[1] + 1, (int)pk[2] + 1,
             (int)pk[3] + 1, (int)pk[4] + 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bands " SCENE " --select 1-3,10 --wavelengths 400-420"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bands: 1-2\n"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bands " SCENE " --rank variance --top 2"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "variance"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bands " SCENE), 2);
}

/* Reads the first n pixels (k bands) of an output cube, pixel-major. */
static void read_pixels(const char *hdr, double *dst, int n, int k)
{
    hsi_cube c;
    hsi_cube_init(&c);
    HSI_CHECK_OK(hsi_cube_open(&c, hdr, NULL));
    CU_ASSERT_EQUAL_FATAL(c.view.shape[0], k);
    CU_ASSERT_EQUAL(c.view.dtype, HSI_F32);
    for (int p = 0; p < n; p++)
        for (int b = 0; b < k; b++) {
            int64_t idx[3] = {b, p / c.view.shape[2], p % c.view.shape[2]};
            dst[p * k + b] = hsi_view_get_f64(&c.view, idx);
        }
    hsi_cube_free(&c);
}

static void check_scores(const double *got, const double *want, int n, int k, double tol)
{
    /* tolerance relative to the largest score (float32 rounding of a
     * projection scales with the input, not with each component) */
    int bad = 0;
    double scale = 0;
    for (int i = 0; i < n * k; i++) scale = fmax(scale, fabs(want[i]));
    for (int c = 0; c < k; c++) {
        double dot = 0;
        for (int p = 0; p < n; p++) dot += got[p * k + c] * want[p * k + c];
        double sg = dot < 0 ? -1 : 1;
        for (int p = 0; p < n; p++)
            if (fabs(sg * got[p * k + c] - want[p * k + c]) > tol * scale) {
                if (bad < 3) fprintf(stderr, "\n  component %d pixel %d: %.8g vs %.8g", c, p, sg * got[p * k + c], want[p * k + c]);
                bad++;
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_cli_preprocess_pca(void)
{
    const char *o1 = hsi_test_tmp("pp_pca5.hdr"), *model = hsi_test_tmp("pp.model");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s --normalize none --pca 5 "
                                                "--save-model %s --interleave bip --tile-lines 7",
                              o1, model),
                          0);
    double got[20 * 5];
    read_pixels(o1, got, 20, 5);
    check_scores(got, sref("scene_pca5_scores20", 100), 20, 5, 1e-4);
    char *hdr = NULL;
    size_t len = 0;
    HSI_CHECK_OK(hsi_read_file(o1, &hdr, &len));
    const double *evr = sref("scene_pca5_evr", 5);
    char name[64];
    snprintf(name, sizeof name, "PC1 (%.1f %%)", 100 * evr[0]);
    CU_ASSERT_PTR_NOT_NULL(strstr(hdr, name));
    CU_ASSERT_PTR_NOT_NULL(strstr(hdr, "interleave = bip"));
    CU_ASSERT_PTR_NULL(strstr(hdr, "wavelength"));
    free(hdr);
    /* the saved model applied again gives the same cube (up to float
     * rounding: another tile shape and output layout) */
    const char *o2 = hsi_test_tmp("pa.hdr");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " pca apply %s " SCENE " %s --interleave bsq", model, o2), 0);
    double again[20 * 5];
    read_pixels(o2, again, 20, 5);
    check_scores(again, got, 20, 5, 1e-6);
    /* z-score then PCA 3 */
    const char *o3 = hsi_test_tmp("pp_z3.hdr");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s --normalize zscore --pca 3", o3), 0);
    double z[20 * 3];
    read_pixels(o3, z, 20, 3);
    check_scores(z, sref("scene_zpca3_scores20", 60), 20, 3, 1e-4);
    /* pca fit prints the explained variance of sklearn */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " pca fit " SCENE " %s -k 5 --overwrite", model), 0);
    snprintf(name, sizeof name, "%10.4f", 100 * evr[1]);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, name));
    /* errors name the problem */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s --pca 500 --overwrite", o3), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "only 128 bands"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s --normalize zscores", o3), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "global-minmax"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " pca apply %s %s %s --overwrite", model, o3, o2), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "128-band"));
}

static void test_cli_preprocess_bands(void)
{
    const char *o = hsi_test_tmp("pp_sel.hdr");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess " SCENE " %s --bands 5,7-9 --normalize minmax", o),
                          0);
    hsi_cube c;
    hsi_cube_init(&c);
    HSI_CHECK_OK(hsi_cube_open(&c, o, NULL));
    CU_ASSERT_EQUAL(c.view.shape[0], 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.meta.wavelength);
    CU_ASSERT_DOUBLE_EQUAL(c.meta.wavelength[0], 400 + 4 * (2100.0 / 127), 1e-3);
    double mn = 1e9, mx = -1e9;
    for (int64_t y = 0; y < c.view.shape[1]; y++)
        for (int64_t x = 0; x < c.view.shape[2]; x++) {
            int64_t idx[3] = {1, y, x};
            double v = hsi_view_get_f64(&c.view, idx);
            mn = fmin(mn, v);
            mx = fmax(mx, v);
        }
    CU_ASSERT_DOUBLE_EQUAL(mn, 0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(mx, 1, 1e-6);
    hsi_cube_free(&c);
}

HSI_SUITE(kernels_cli, 0, {"hsi stats --json --mask vs numpy", test_cli_stats},
          {"hsi bands --opbs/--select/--rank", test_cli_bands},
          {"hsi preprocess/pca vs sklearn, model round trip", test_cli_preprocess_pca},
          {"hsi preprocess --bands --normalize minmax", test_cli_preprocess_bands})
