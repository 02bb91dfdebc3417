/* test_labels.c — label maps from ENVI classification (written by Spectral
 * Python), GeoTIFF with colour table/categories (written by GDAL), .mat
 * (scipy), and the six real *_gt.mat files against the per-class counts in
 * shared/data/SOURCES.md (scipy.io.loadmat). */
#include "test.h"

#include "io/labels.h"

#define FIX "tests/fixtures/formats/"

static void test_envi_classification(void)
{
    hsi_labels l;
    HSI_CHECK_OK(hsi_labels_open(&l, FIX "classes_envi.hdr", NULL));
    CU_ASSERT_EQUAL(l.map.shape[0], 4);
    CU_ASSERT_EQUAL(l.map.shape[1], 6);
    CU_ASSERT_EQUAL(l.n_classes, 4);
    CU_ASSERT(l.counts[0] == 14 && l.counts[1] == 3 && l.counts[2] == 6 && l.counts[3] == 1);
    CU_ASSERT_EQUAL(hsi_labels_n_labelled(&l), 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l.names);
    CU_ASSERT_STRING_EQUAL(l.names[2], "Road");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l.colors);
    CU_ASSERT(l.colors[3] == 0 && l.colors[4] == 200 && l.colors[5] == 0);
    int64_t i[2] = {2, 3};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&l.map, i), 1);
    hsi_labels_free(&l);
}

static void test_geotiff(void)
{
    hsi_labels l;
    HSI_CHECK_OK(hsi_labels_open(&l, FIX "classes.tif", NULL));
    CU_ASSERT_EQUAL(l.n_classes, 4);
    CU_ASSERT(l.counts[0] == 11 && l.counts[1] == 5 && l.counts[2] == 1 && l.counts[3] == 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l.names);
    CU_ASSERT_STRING_EQUAL(l.names[1], "Water");
    CU_ASSERT_STRING_EQUAL(l.names[3], "Urban");
    CU_ASSERT_PTR_NOT_NULL_FATAL(l.colors);
    CU_ASSERT(l.colors[9] == 0 && l.colors[10] == 0 && l.colors[11] == 255);
    hsi_labels_free(&l);
}

static void test_mat(void)
{
    hsi_labels l;
    HSI_CHECK_OK(hsi_labels_open(&l, FIX "synth_gt.mat", NULL));
    CU_ASSERT_EQUAL(l.map.shape[0], 6);
    CU_ASSERT_EQUAL(l.map.shape[1], 7);
    CU_ASSERT_EQUAL(l.n_classes, 6);
    CU_ASSERT(l.counts[0] == 28 && l.counts[1] == 1 && l.counts[2] == 6 && l.counts[5] == 7 &&
              l.counts[3] == 0);
    CU_ASSERT_PTR_NULL(l.names);
    CU_ASSERT_PTR_NOT_NULL(strstr(l.source, ":labels"));
    int64_t i[2] = {5, 6};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&l.map, i), 1);
    hsi_labels_free(&l);
}

/* A one-band integer raw file + ENVI header (not a classification file). */
static void test_raw_header(void)
{
    const char *dat = hsi_test_tmp("gt_raw.bin");
    FILE *fp = fopen(dat, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    for (int i = 0; i < 3 * 7; i++) {
        uint16_t v = (uint16_t)(i % 4 == 0 ? 300 : i % 5); /* ids > 255 are fine */
        fwrite(&v, 2, 1, fp);
    }
    fclose(fp);
    fp = fopen(hsi_test_tmp("gt_raw.hdr"), "w");
    fputs("ENVI\nsamples = 7\nlines = 3\nbands = 1\nheader offset = 0\ndata type = 12\n"
          "interleave = bsq\nbyte order = 0\n",
          fp);
    fclose(fp);
    hsi_labels l;
    HSI_CHECK_OK(hsi_labels_open(&l, dat, NULL));
    CU_ASSERT_EQUAL(l.n_classes, 301);
    int64_t want[5] = {0};
    int64_t n300 = 0;
    for (int i = 0; i < 21; i++) {
        if (i % 4 == 0) n300++;
        else want[i % 5]++;
    }
    CU_ASSERT_EQUAL(l.counts[300], n300);
    for (int c = 0; c < 5; c++) CU_ASSERT_EQUAL(l.counts[c], want[c]);
    CU_ASSERT_PTR_NULL(l.names);
    hsi_labels_free(&l);
}

static void test_bad(void)
{
    hsi_labels l;
    HSI_CHECK_FAILS(hsi_labels_open(&l, FIX "cube3.tif", NULL), HSI_ERR_FORMAT, "one band");
    hsi_view v;
    int64_t shape[2] = {2, 2};
    HSI_CHECK_OK(hsi_view_alloc(&v, HSI_F32, 2, shape, HSI_BUF_HOST));
    float *d = v.buf->data;
    d[3] = 2.5f;
    HSI_CHECK_FAILS(hsi_labels_from_view(&l, &v, NULL), HSI_ERR_FORMAT, "line 1 sample 1");
    d[3] = 2.0f;
    HSI_CHECK_OK(hsi_labels_from_view(&l, &v, NULL));
    CU_ASSERT_EQUAL(l.n_classes, 3);
    CU_ASSERT_EQUAL(l.counts[0], 3);
    hsi_labels_free(&l);
    hsi_view_release(&v);
    HSI_CHECK_OK(hsi_view_alloc(&v, HSI_I16, 2, shape, HSI_BUF_HOST));
    ((int16_t *)v.buf->data)[1] = -1;
    HSI_CHECK_FAILS(hsi_labels_from_view(&l, &v, NULL), HSI_ERR_FORMAT, "value -1");
    hsi_view_release(&v);
}

/* SOURCES.md, section 1: scipy.io.loadmat counts, label 0 = unlabelled. */
typedef struct gt_case {
    const char *path;
    int64_t lines, samples;
    int n;
    int64_t counts[17];
} gt_case;

static const gt_case gts[] = {
    {"salinas_a/SalinasA_gt.mat", 83, 86, 15, {1790, 391, 0, 0, 0, 0, 0, 0, 0, 0, 1343, 616, 1525, 674, 799}},
    {"indian_pines/Indian_pines_gt.mat", 145, 145, 17,
     {10776, 46, 1428, 830, 237, 483, 730, 28, 478, 20, 972, 2455, 593, 205, 1265, 386, 93}},
    {"salinas/Salinas_gt.mat", 512, 217, 17,
     {-1, 2009, 3726, 1976, 1394, 2678, 3959, 3579, 11271, 6203, 3278, 1068, 1927, 916, 1070, 7268,
      1807}},
    {"pavia_university/PaviaU_gt.mat", 610, 340, 10,
     {-1, 6631, 18649, 2099, 3064, 1345, 5029, 1330, 3682, 947}},
    {"ksc/KSC_gt.mat", 512, 614, 14, {-1, 761, 243, 256, 252, 161, 229, 105, 431, 520, 404, 419, 503, 927}},
    {"botswana/Botswana_gt.mat", 1476, 256, 15,
     {-1, 270, 101, 251, 215, 269, 269, 259, 203, 314, 248, 305, 181, 268, 95}},
};

static void test_real_gt(void)
{
    int done = 0;
    for (size_t k = 0; k < sizeof gts / sizeof gts[0]; k++) {
        const gt_case *g = &gts[k];
        const char *p = hsi_test_shared(g->path);
        if (!p) continue;
        hsi_labels l;
        HSI_CHECK_OK(hsi_labels_open(&l, p, NULL));
        int bad = l.map.shape[0] != g->lines || l.map.shape[1] != g->samples || l.n_classes != g->n;
        int64_t labelled = 0;
        for (int c = 0; c < g->n && c < l.n_classes; c++) {
            if (g->counts[c] >= 0 && l.counts[c] != g->counts[c]) bad++;
            if (c > 0) labelled += g->counts[c];
        }
        if (labelled != hsi_labels_n_labelled(&l)) bad++;
        if (l.counts[0] != g->lines * g->samples - labelled) bad++;
        if (bad) fprintf(stderr, "\n  %s: %d mismatches\n", g->path, bad);
        CU_ASSERT_EQUAL(bad, 0);
        hsi_labels_free(&l);
        done++;
    }
    CU_ASSERT_EQUAL(done, 6);
}

HSI_SUITE(labels, 0, {"ENVI classification (SPy)", test_envi_classification},
          {"GeoTIFF colour table + categories", test_geotiff}, {".mat label map", test_mat},
          {"raw + ENVI header", test_raw_header},
          {"bad label maps", test_bad})
HSI_SUITE(labels_shared, HSI_SUITE_NEEDS_SHARED, {"six *_gt.mat vs SOURCES.md counts", test_real_gt})
