/* test_quicklook.c — `hsi quicklook` end to end: the command is run as a
 * user would run it and the PNG it writes is decoded by GDAL (size, bands,
 * pixels). The drawing itself is tested in test_gdal.c. */
#include <cpl_error.h>
#include <gdal.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "test.h"

#define FIX "tests/fixtures/formats/"

/* Width, height, band count of a PNG as GDAL decodes it (0 when it cannot). */
static int png_size(const char *path, int *w, int *h, int *n)
{
    GDALAllRegister();
    CPLPushErrorHandler(CPLQuietErrorHandler);
    GDALDatasetH ds = GDALOpen(path, GA_ReadOnly);
    CPLPopErrorHandler();
    if (!ds) return 0;
    int ok = strcmp(GDALGetDriverShortName(GDALGetDatasetDriver(ds)), "PNG") == 0;
    *w = GDALGetRasterXSize(ds);
    *h = GDALGetRasterYSize(ds);
    *n = GDALGetRasterCount(ds);
    GDALClose(ds);
    return ok;
}

static void test_cube(void)
{
    char out[4096];
    const char *png = hsi_test_tmp("cli_cube.png");
    int w = 0, h = 0, n = 0;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "cube3.tif %s --bands 3,2,1", png),
                    0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bands 3,2,1"));
    CU_ASSERT_FATAL(png_size(png, &w, &h, &n));
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
    CU_ASSERT_FATAL(png_size(png, &w, &h, &n));
    CU_ASSERT(w > 6 && h >= 4 && n == 3); /* map + legend */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook " FIX "classes_envi.hdr %s --no-legend --overwrite",
                        png),
                    0);
    CU_ASSERT_FATAL(png_size(png, &w, &h, &n));
    CU_ASSERT(w == 6 && h == 4);
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
    CU_ASSERT_FATAL(png_size(png, &w, &h, &n));
    CU_ASSERT(w == 86 && h == 83 && n == 3);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook %s %s --overwrite", gt, png), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "7 ids present"));
    CU_ASSERT_FATAL(png_size(png, &w, &h, &n));
    CU_ASSERT(w > 86 && h >= 83);
}

HSI_SUITE(quicklook_cli, 0, {"false colour", test_cube}, {"label map + legend", test_labels})
HSI_SUITE(quicklook_cli_shared, HSI_SUITE_NEEDS_SHARED, {"SalinasA cube and ground truth", test_shared})
