/* test_mat.c — MATLAB .mat reader: files written by scipy.io.savemat
 * (tests/fixtures/make_formats_fixtures.py), a v7.3 (HDF5) file written here
 * through matio with values from an index formula, SalinasA against scipy's
 * loadmat samples, and malformed input. */
#include "test.h"

#include <matio.h>

#include "io/mat.h"

#define FIX "tests/fixtures/formats/"

/* cube(r, c, b) = 100 r + 10 c + b, MATLAB shape (5, 4, 3) */
static int check_formula(const hsi_view *v, double scale, double add)
{
    int bad = 0;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < v->shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < v->shape[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < v->shape[2]; idx[2]++) {
                double want = (100.0 * idx[1] + 10.0 * idx[2] + idx[0]) * scale + add;
                if (hsi_view_get_f64(v, idx) != want) bad++;
            }
    return bad;
}

static void test_v5_compressed(void)
{
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_u16.mat", NULL));
    CU_ASSERT_EQUAL(c.view.ndim, 3);
    CU_ASSERT_EQUAL(c.view.shape[0], 3); /* bands */
    CU_ASSERT_EQUAL(c.view.shape[1], 5); /* lines = MATLAB rows */
    CU_ASSERT_EQUAL(c.view.shape[2], 4); /* samples = MATLAB cols */
    CU_ASSERT_EQUAL(c.view.dtype, HSI_U16);
    /* column-major, no copy: row stride is one element */
    CU_ASSERT_EQUAL(c.view.strides[1], 2);
    CU_ASSERT_EQUAL(c.view.strides[2], 10);
    CU_ASSERT_EQUAL(c.view.strides[0], 40);
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, 0), 0);
    CU_ASSERT_STRING_EQUAL(c.meta.format, "mat");
    CU_ASSERT_EQUAL(c.meta.n_bands, 3);
    const hsi_kv *kv = hsi_meta_find(&c.meta, "mat variable");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "cube");
    hsi_cube_free(&c);

    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_v5_uncompressed.mat", NULL));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_F32);
    CU_ASSERT_EQUAL(check_formula(&c.view, 0.5, 0), 0);
    hsi_cube_free(&c);
}

static void test_var_choice(void)
{
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_mat_open(&c, FIX "synth_two.mat", NULL), HSI_ERR_ARG, "--var");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "a (5x4x3 float64)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "b (5x4x3 int16)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "gt (5x4 uint8)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "z (5x4x3 complex)"));
    HSI_CHECK_FAILS(hsi_mat_open(&c, FIX "synth_two.mat", "z"), HSI_ERR_UNSUPPORTED, "complex");
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_two.mat", "b"));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16);
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, -7), 0);
    hsi_cube_free(&c);
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_two.mat", "a"));
    CU_ASSERT_EQUAL(check_formula(&c.view, 0.25, 0), 0);
    hsi_cube_free(&c);
    HSI_CHECK_FAILS(hsi_mat_open(&c, FIX "synth_two.mat", "zz"), HSI_ERR_NOT_FOUND, "no variable 'zz'");
    /* the 2-D label map is chosen automatically among 3-D arrays */
    hsi_view v;
    char *name = NULL;
    HSI_CHECK_OK(hsi_mat_open_2d(&v, &name, FIX "synth_two.mat", NULL));
    CU_ASSERT_STRING_EQUAL(name, "gt");
    CU_ASSERT_EQUAL(v.shape[0], 5);
    CU_ASSERT_EQUAL(v.shape[1], 4);
    int64_t idx[2] = {4, 2};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&v, idx), 1); /* r % 3 */
    free(name);
    hsi_view_release(&v);
    /* a 2-D map opened as a cube by name: one band */
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_two.mat", "gt"));
    CU_ASSERT_EQUAL(c.view.shape[0], 1);
    CU_ASSERT_EQUAL(c.view.shape[1], 5);
    hsi_cube_free(&c);
}

/* A ground-truth file (one 2-D map, no cube) opens as a one-band
 * classification cube. */
static void test_gt_as_cube(void)
{
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_gt.mat", NULL));
    CU_ASSERT(c.view.shape[0] == 1 && c.view.shape[1] == 6 && c.view.shape[2] == 7);
    CU_ASSERT_EQUAL(c.view.dtype, HSI_U8);
    CU_ASSERT_EQUAL(c.meta.file_kind, HSI_FILE_CLASSIFICATION);
    CU_ASSERT_EQUAL(c.meta.n_classes, 6);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.meta.class_names);
    CU_ASSERT_STRING_EQUAL(c.meta.class_names[5], "Class 5");
    int64_t i[3] = {0, 4, 3};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&c.view, i), 5);
    hsi_cube_free(&c);
}

static void test_v73(void)
{
    const char *p = hsi_test_tmp("v73.mat");
    mat_t *mat = Mat_CreateVer(p, NULL, MAT_FT_MAT73);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mat);
    double data[5 * 4 * 3];
    for (int b = 0; b < 3; b++)
        for (int col = 0; col < 4; col++)
            for (int r = 0; r < 5; r++) data[r + 5 * col + 20 * b] = 100.0 * r + 10.0 * col + b;
    size_t dims[3] = {5, 4, 3};
    matvar_t *mv = Mat_VarCreate("hsi", MAT_C_DOUBLE, MAT_T_DOUBLE, 3, dims, data, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mv);
    CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, MAT_COMPRESSION_NONE), 0);
    Mat_VarFree(mv);
    Mat_Close(mat);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    CU_ASSERT_EQUAL(c.view.shape[0], 3);
    CU_ASSERT_EQUAL(c.view.shape[1], 5);
    CU_ASSERT_EQUAL(c.view.shape[2], 4);
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, 0), 0);
    const hsi_kv *kv = hsi_meta_find(&c.meta, "mat version");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "7.3");
    hsi_cube_free(&c);
}

static void test_malformed(void)
{
    hsi_cube c;
    hsi_status st = hsi_mat_open(&c, FIX "bad_truncated.mat", NULL);
    CU_ASSERT_NOT_EQUAL(st, HSI_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "bad_truncated.mat"));
    /* a text header followed by garbage */
    const char *p = hsi_test_tmp("garbage.mat");
    FILE *fp = fopen(p, "wb");
    char hdr[128];
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, "MATLAB 5.0 MAT-file", 19);
    hdr[124] = 0;
    hdr[125] = 1;
    hdr[126] = 'I';
    hdr[127] = 'M';
    fwrite(hdr, 1, sizeof hdr, fp);
    for (int i = 0; i < 300; i++) fputc((i * 37) & 0xff, fp);
    fclose(fp);
    st = hsi_mat_open(&c, p, NULL);
    CU_ASSERT_NOT_EQUAL(st, HSI_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "garbage.mat"));
    HSI_CHECK_FAILS(hsi_mat_open(&c, hsi_test_tmp("missing.mat"), NULL), HSI_ERR_FORMAT,
                    "missing.mat");
    char probe[16] = "MATLAB 5.0 MAT";
    CU_ASSERT_EQUAL(hsi_mat_probe(probe, 14), 1);
    CU_ASSERT_EQUAL(hsi_mat_probe("ENVI\nsamples", 12), 0);
}

static void test_salinas_a(void)
{
    const char *p = hsi_test_shared("salinas_a/SalinasA_corrected.mat");
    if (!p) return;
    FILE *fp = fopen(FIX "salinas_a_samples.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    CU_ASSERT_EQUAL(c.view.shape[0], 204);
    CU_ASSERT_EQUAL(c.view.shape[1], 83);
    CU_ASSERT_EQUAL(c.view.shape[2], 86);
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16); /* stored type; the MATLAB class is double */
    const hsi_kv *kv = hsi_meta_find(&c.meta, "mat class");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "float64");
    char line[256];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, fp)) {
        long long r, col, b, val;
        double sum;
        if (sscanf(line, "sum %lf", &sum) == 1) {
            double s = 0;
            int64_t idx[3];
            for (idx[0] = 0; idx[0] < 204; idx[0]++)
                for (idx[1] = 0; idx[1] < 83; idx[1]++)
                    for (idx[2] = 0; idx[2] < 86; idx[2]++) s += hsi_view_get_f64(&c.view, idx);
            CU_ASSERT_EQUAL(s, sum);
        } else if (sscanf(line, "%lld %lld %lld %lld", &r, &col, &b, &val) == 4) {
            int64_t idx[3] = {b, r, col}; /* (band, line = row, sample = col) */
            if (hsi_view_get_f64(&c.view, idx) != (double)val) bad++;
            n++;
        }
    }
    fclose(fp);
    CU_ASSERT_EQUAL(n, 64);
    CU_ASSERT_EQUAL(bad, 0);
    hsi_cube_free(&c);
}

HSI_SUITE(mat, 0, {"v5 compressed/uncompressed orientation", test_v5_compressed},
          {"variable choice and --var", test_var_choice},
          {"ground truth as a classification cube", test_gt_as_cube}, {"v7.3 (HDF5) via matio", test_v73},
          {"malformed files", test_malformed})
HSI_SUITE(mat_shared, HSI_SUITE_NEEDS_SHARED, {"SalinasA vs scipy loadmat", test_salinas_a})
