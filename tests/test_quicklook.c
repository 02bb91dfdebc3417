/* test_quicklook.c — `hsi quicklook` end to end: the command is run as a
 * user would run it and the PNG it writes is decoded by GDAL (size, bands,
 * pixels). The drawing itself is tested in test_gdal.c and
 * test_quicklook_legend.c. */
#include <cpl_error.h>
#include <gdal.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "test.h"

#define FIX "tests/fixtures/formats/"

static void test_cube(void)
{
    char out[4096];
    const char *png = hsi_test_tmp("cli_cube.png");
    int w = 0, h = 0, n = 0;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --bands 3,2,1", png),
                    0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bands 3,2,1"));
    CU_ASSERT_FATAL(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w == 6 && h == 5 && n == 3);
    /* usage errors exit 2 and name the problem */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --bands 1,2,4 --overwrite", png),
                    2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "band 4 is not in 1..3"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif x.jpg"), 2);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --rgb 640,550,460 --overwrite",
                        png),
                    2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "wavelengths"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook %s %s --overwrite", hsi_test_tmp("nothing.img"), png),
                    1);
}

static void test_labels(void)
{
    char out[4096];
    const char *png = hsi_test_tmp("cli_labels.png");
    int w = 0, h = 0, n = 0;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "classes_envi.hdr %s", png), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "label map"));
    CU_ASSERT_FATAL(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w > 6 && h >= 4 && n == 3); /* map + legend */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "classes_envi.hdr %s --no-legend --overwrite",
                        png),
                    0);
    CU_ASSERT_FATAL(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w == 6 && h == 4);
    /* --zoom: K x K pixels per map pixel; the colours those of the map */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "classes_envi.hdr %s --no-legend --zoom 3 --overwrite",
                        png),
                    0);
    CU_ASSERT_FATAL(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w == 18 && h == 12);
}

/* --zoom and --width: the picture's size, each zoomed pixel a copy of its
 * source pixel (GDAL reads both pictures back). */
static void test_zoom(void)
{
    char out[4096];
    const char *a = hsi_test_tmp("z1.png"), *b = hsi_test_tmp("z4.png"), *c = hsi_test_tmp("zw.png");
    int w = 0, h = 0, n = 0;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --bands 3,2,1", a), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --bands 3,2,1 --zoom 4", b), 0);
    CU_ASSERT_FATAL(hsi_test_png_size(b, &w, &h, &n));
    CU_ASSERT(w == 24 && h == 20 && n == 3);
    GDALDatasetH da = GDALOpen(a, GA_ReadOnly), db = GDALOpen(b, GA_ReadOnly);
    CU_ASSERT_FATAL(da && db);
    uint8_t pa[6 * 5 * 3], pb[24 * 20 * 3];
    int bands[3] = {1, 2, 3};
    CU_ASSERT_EQUAL(GDALDatasetRasterIO(da, GF_Read, 0, 0, 6, 5, pa, 6, 5, GDT_Byte, 3, bands, 3, 18, 1), CE_None);
    CU_ASSERT_EQUAL(GDALDatasetRasterIO(db, GF_Read, 0, 0, 24, 20, pb, 24, 20, GDT_Byte, 3, bands, 3, 72, 1), CE_None);
    int bad = 0;
    for (int y = 0; y < 20; y++)
        for (int x = 0; x < 24; x++)
            bad += memcmp(pb + 3 * (y * 24 + x), pa + 3 * ((y / 4) * 6 + x / 4), 3) != 0;
    CU_ASSERT_EQUAL(bad, 0);
    GDALClose(da);
    GDALClose(db);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --width 3", c), 0);
    CU_ASSERT_FATAL(hsi_test_png_size(c, &w, &h, &n));
    CU_ASSERT(w == 3 && h == 3); /* 5 lines x 3/6, rounded */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --zoom 2 --width 9 --overwrite", c), 2);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --zoom 0 --overwrite", c), 2);
}

static void test_shared(void)
{
    const char *cube = hsi_test_shared("salinas_a/SalinasA_corrected.mat");
    char gt[4096];
    const char *g = hsi_test_shared("salinas_a/SalinasA_gt.mat");
    if (!cube || !g) return;
    snprintf(gt, sizeof gt, "%s", g);
    char out[4096];
    const char *png = hsi_test_tmp("cli_sa.png");
    int w = 0, h = 0, n = 0;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook %s %s --stretch 1", cube, png), 0);
    CU_ASSERT_FATAL(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w == 86 && h == 83 && n == 3);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook %s %s --overwrite", gt, png), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "7 ids present"));
    CU_ASSERT_FATAL(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w > 86 && h >= 83);
}

HSI_SUITE(quicklook_cli, 0, {"false colour", test_cube}, {"label map + legend", test_labels},
          {"--zoom and --width", test_zoom})
HSI_SUITE(quicklook_cli_shared, HSI_SUITE_NEEDS_SHARED, {"SalinasA cube and ground truth", test_shared})
