/* test_gdal.c — GDAL bridge: reading GeoTIFFs written by GDAL's Python
 * bindings (tests/fixtures/make_formats_fixtures.py), ENVI (map info) ->
 * GeoTIFF with the geotransform/CRS checked by GDAL itself, classification
 * GeoTIFF colour table/categories, PNG size and pixels, content dispatch. */
#include "test.h"

#include <cJSON.h>
#include <unistd.h>

#include <cpl_error.h>
#include <gdal.h>
#include <ogr_srs_api.h>

#include "io/cube.h"
#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"
#include "io/quicklook.h"

#define FIX "tests/fixtures/formats/"

static void test_read_geotiff(void)
{
    hsi_cube c;
    HSI_CHECK_OK(hsi_cube_open(&c, FIX "cube3.tif", NULL));
    CU_ASSERT_STRING_EQUAL(c.meta.format, "gdal");
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16);
    CU_ASSERT_EQUAL(c.view.shape[0], 3);
    CU_ASSERT_EQUAL(c.view.shape[1], 5);
    CU_ASSERT_EQUAL(c.view.shape[2], 6);
    int bad = 0;
    int64_t i[3];
    for (i[0] = 0; i[0] < 3; i[0]++)
        for (i[1] = 0; i[1] < 5; i[1]++)
            for (i[2] = 0; i[2] < 6; i[2]++)
                bad += hsi_view_get_f64(&c.view, i) != 100.0 * i[0] + 10.0 * i[1] + i[2];
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_TRUE(c.meta.map_info.valid);
    CU_ASSERT_STRING_EQUAL(c.meta.map_info.projection, "UTM");
    CU_ASSERT_EQUAL(c.meta.map_info.zone, 11);
    CU_ASSERT_EQUAL(c.meta.map_info.north, 1);
    HSI_ASSERT_NEAR(c.meta.map_info.easting, 500000.0, 1e-9);
    HSI_ASSERT_NEAR(c.meta.map_info.northing, 4100000.0, 1e-9);
    HSI_ASSERT_NEAR(c.meta.map_info.x_size, 15.0, 1e-12);
    double gt[6];
    CU_ASSERT_TRUE(hsi_meta_geotransform(&c.meta, gt));
    HSI_ASSERT_NEAR(gt[5], -15.0, 1e-12);
    hsi_cube_free(&c);
}

/* NetCDF with two variables: GDAL subdatasets, chosen by --var. */
static void test_subdatasets(void)
{
    hsi_cube c;
    const char *p = FIX "two_vars.nc";
    HSI_CHECK_FAILS(hsi_cube_open(&c, p, NULL), HSI_ERR_ARG, "several subdatasets");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), ":b"));
    hsi_open_options o = {"zz", 0};
    HSI_CHECK_FAILS(hsi_cube_open(&c, p, &o), HSI_ERR_NOT_FOUND, "no such subdataset");
    o.var = "b";
    HSI_CHECK_OK(hsi_cube_open(&c, p, &o));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16);
    CU_ASSERT(c.view.shape[0] == 3 && c.view.shape[1] == 4 && c.view.shape[2] == 5);
    const hsi_kv *kv = hsi_meta_find(&c.meta, "gdal subdataset");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    /* the reference is GDAL's own read of that subdataset (GDAL decides the
     * row order of a NetCDF without coordinates) */
    CPLPushErrorHandler(CPLQuietErrorHandler);
    GDALDatasetH ds = GDALOpen(kv->value, GA_ReadOnly);
    CPLPopErrorHandler();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    int bad = 0;
    for (int b = 0; b < 3; b++) {
        int16_t ref[20];
        CU_ASSERT_EQUAL(GDALRasterIO(GDALGetRasterBand(ds, b + 1), GF_Read, 0, 0, 5, 4, ref, 5, 4,
                                     GDT_Int16, 0, 0),
                        CE_None);
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 5; x++) {
                int64_t i[3] = {b, y, x};
                bad += hsi_view_get_f64(&c.view, i) != ref[y * 5 + x];
                /* and it is one of the two orientations of z - y + x */
                int v = ref[y * 5 + x];
                bad += v != b - y + x && v != b - (3 - y) + x;
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    GDALClose(ds);
    hsi_cube_free(&c);
    o.var = "1";
    HSI_CHECK_OK(hsi_cube_open(&c, p, &o));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_F32);
    hsi_cube_free(&c);
    /* a GDAL subdataset name as the path */
    HSI_CHECK_OK(hsi_cube_open(&c, "NETCDF:\"" FIX "two_vars.nc\":b", NULL));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16);
    hsi_cube_free(&c);
    HSI_CHECK_FAILS(hsi_cube_open(&c, hsi_test_tmp("absent.img"), NULL), HSI_ERR_IO, "absent.img");
}

static int read_expected(double gt[6], int *epsg)
{
    FILE *fp = fopen(FIX "geo_envi_expected.txt", "r");
    if (!fp) return 0;
    int ok = fscanf(fp, "geotransform %lf %lf %lf %lf %lf %lf\nepsg %d", &gt[0], &gt[1], &gt[2],
                    &gt[3], &gt[4], &gt[5], epsg) == 7;
    fclose(fp);
    return ok;
}

static void test_envi_to_geotiff(void)
{
    double want[6];
    int epsg = 0;
    CU_ASSERT_FATAL(read_expected(want, &epsg));
    hsi_cube c;
    HSI_CHECK_OK(hsi_cube_open(&c, FIX "geo_envi.hdr", NULL));
    CU_ASSERT_STRING_EQUAL(c.meta.format, "envi");
    const char *out = hsi_test_tmp("geo.tif");
    HSI_CHECK_OK(hsi_gdal_write_geotiff(out, &c.view, &c.meta, HSI_F32));

    /* GDAL itself reads the result */
    GDALAllRegister();
    GDALDatasetH ds = GDALOpen(out, GA_ReadOnly);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    double gt[6];
    CU_ASSERT_EQUAL(GDALGetGeoTransform(ds, gt), CE_None);
    for (int k = 0; k < 6; k++) HSI_ASSERT_NEAR(gt[k], want[k], 1e-9);
    OGRSpatialReferenceH got = OSRNewSpatialReference(GDALGetProjectionRef(ds));
    OGRSpatialReferenceH ref = OSRNewSpatialReference(NULL);
    CU_ASSERT_EQUAL(OSRImportFromEPSG(ref, epsg), OGRERR_NONE);
    CU_ASSERT_TRUE(OSRIsSame(got, ref));
    int north = 0;
    CU_ASSERT_EQUAL(OSRGetUTMZone(got, &north), 11);
    CU_ASSERT_EQUAL(north, 1);
    OSRDestroySpatialReference(got);
    OSRDestroySpatialReference(ref);
    CU_ASSERT_EQUAL(GDALGetRasterCount(ds), 2);
    float row[6];
    CU_ASSERT_EQUAL(GDALRasterIO(GDALGetRasterBand(ds, 2), GF_Read, 0, 3, 6, 1, row, 6, 1,
                                 GDT_Float32, 0, 0),
                    CE_None);
    for (int x = 0; x < 6; x++) HSI_ASSERT_NEAR(row[x], 1.5 + 30 + x, 0);
    GDALClose(ds);

    /* and our reader round-trips it */
    hsi_cube r;
    HSI_CHECK_OK(hsi_cube_open(&r, out, NULL));
    CU_ASSERT_EQUAL(r.view.dtype, HSI_F32);
    int64_t i[3] = {1, 4, 5};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&r.view, i), hsi_view_get_f64(&c.view, i));
    HSI_ASSERT_NEAR(r.meta.map_info.easting, c.meta.map_info.easting, 1e-9);
    hsi_cube_free(&r);
    hsi_cube_free(&c);
}

/* map info with rotation=: the geotransform GDAL derives (fixture). */
static void test_rotation(void)
{
    FILE *fp = fopen(FIX "geo_rotation_expected.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char mi[512], line[512];
    double want[6];
    CU_ASSERT_FATAL(fgets(line, sizeof line, fp) != NULL);
    CU_ASSERT_FATAL(sscanf(line, "map info %511[^\n]", mi) == 1);
    CU_ASSERT_FATAL(fscanf(fp, "geotransform %lf %lf %lf %lf %lf %lf", &want[0], &want[1], &want[2],
                           &want[3], &want[4], &want[5]) == 6);
    fclose(fp);
    char hdr[1024];
    snprintf(hdr, sizeof hdr,
             "ENVI\nsamples = 100\nlines = 100\nbands = 1\nheader offset = 0\ndata type = 1\n"
             "interleave = bsq\nbyte order = 0\nmap info = {%s}\n",
             mi);
    hsi_meta m;
    HSI_CHECK_OK(hsi_envi_parse(&m, hdr, strlen(hdr), "rotation.hdr"));
    double gt[6];
    CU_ASSERT_FATAL(hsi_meta_geotransform(&m, gt));
    for (int k = 0; k < 6; k++) HSI_ASSERT_NEAR(gt[k], want[k], 1e-6);
    hsi_meta_free(&m);
}

static void test_write_classes(void)
{
    hsi_view m;
    int64_t shape[2] = {3, 4};
    HSI_CHECK_OK(hsi_view_alloc(&m, HSI_I32, 2, shape, HSI_BUF_HOST));
    int32_t *d = m.buf->data;
    for (int k = 0; k < 12; k++) d[k] = k % 3;
    char *names[3] = {"none", "crop", NULL};
    uint8_t rgb[9] = {0, 0, 0, 10, 20, 30, 200, 100, 50};
    const char *out = hsi_test_tmp("cls.tif");
    HSI_CHECK_OK(hsi_gdal_write_classes(out, &m, 3, names, rgb, NULL));
    GDALDatasetH ds = GDALOpen(out, GA_ReadOnly);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    GDALRasterBandH b = GDALGetRasterBand(ds, 1);
    CU_ASSERT_EQUAL(GDALGetRasterDataType(b), GDT_Byte);
    GDALColorTableH ct = GDALGetRasterColorTable(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ct);
    const GDALColorEntry *ce = GDALGetColorEntry(ct, 1);
    CU_ASSERT(ce->c1 == 10 && ce->c2 == 20 && ce->c3 == 30);
    char **cats = GDALGetRasterCategoryNames(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cats);
    CU_ASSERT_STRING_EQUAL(cats[1], "crop");
    CU_ASSERT_STRING_EQUAL(cats[2], "Class 2");
    uint8_t px[12];
    CU_ASSERT_EQUAL(GDALRasterIO(b, GF_Read, 0, 0, 4, 3, px, 4, 3, GDT_Byte, 0, 0), CE_None);
    int bad = 0;
    for (int k = 0; k < 12; k++) bad += px[k] != k % 3;
    CU_ASSERT_EQUAL(bad, 0);
    GDALClose(ds);
    d[5] = 70000;
    HSI_CHECK_FAILS(hsi_gdal_write_classes(out, &m, 3, names, rgb, NULL), HSI_ERR_ARG,
                    "line 1 sample 1");
    hsi_view_release(&m);
}

/* The class names and colours travel in the .tif itself: with the
 * .aux.xml side-car deleted, GDAL still reads the colour table (the TIFF
 * colour map) and the names (band metadata CATEGORY_<value>, the TIFF's
 * GDAL_METADATA tag), and so does hsi's reader. */
static void test_classes_in_tiff(void)
{
    hsi_view m;
    int64_t shape[2] = {4, 5};
    HSI_CHECK_OK(hsi_view_alloc(&m, HSI_U8, 2, shape, HSI_BUF_HOST));
    uint8_t *d = m.buf->data;
    for (int k = 0; k < 20; k++) d[k] = (uint8_t)(k % 4);
    char *names[4] = {"Unlabelled", "Ma\xc3\xafs jeune", "Bl\xc3\xa9 = wheat, 1", "Asphalt"};
    uint8_t rgb[12] = {0, 0, 0, 120, 200, 80, 230, 210, 40, 90, 90, 100};
    const char *out = hsi_test_tmp("cls_alone.tif");
    char aux[4200];
    snprintf(aux, sizeof aux, "%s.aux.xml", out);
    HSI_CHECK_OK(hsi_gdal_write_classes(out, &m, 4, names, rgb, NULL));
    hsi_view_release(&m);
    CU_ASSERT_EQUAL(access(aux, F_OK), 0); /* GDAL's category names, as before */
    CU_ASSERT_EQUAL_FATAL(unlink(aux), 0);
    GDALDatasetH ds = GDALOpen(out, GA_ReadOnly);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    GDALRasterBandH b = GDALGetRasterBand(ds, 1);
    GDALColorTableH ct = GDALGetRasterColorTable(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ct);
    for (int k = 0; k < 4; k++) {
        const GDALColorEntry *ce = GDALGetColorEntry(ct, k);
        CU_ASSERT(ce->c1 == rgb[3 * k] && ce->c2 == rgb[3 * k + 1] && ce->c3 == rgb[3 * k + 2]);
    }
    for (int k = 0; k < 4; k++) {
        char key[32];
        snprintf(key, sizeof key, "CATEGORY_%d", k);
        const char *v = GDALGetMetadataItem(b, key, NULL);
        CU_ASSERT_PTR_NOT_NULL(v);
        if (v) CU_ASSERT_STRING_EQUAL(v, names[k]);
    }
    GDALClose(ds);
    CU_ASSERT_NOT_EQUAL(access(aux, F_OK), 0); /* reading made no side-car */
    hsi_cube c;
    HSI_CHECK_OK(hsi_cube_open(&c, out, NULL));
    CU_ASSERT_EQUAL_FATAL(c.meta.n_classes, 4);
    for (int k = 0; k < 4; k++) {
        CU_ASSERT_STRING_EQUAL(c.meta.class_names[k], names[k]);
        CU_ASSERT_EQUAL(memcmp(c.meta.class_lookup + 3 * k, rgb + 3 * k, 3), 0);
    }
    CU_ASSERT_EQUAL(c.meta.file_kind, HSI_FILE_CLASSIFICATION);
    hsi_cube_free(&c);
}

static void test_png(void)
{
    uint8_t img[5 * 7 * 3];
    for (int k = 0; k < 5 * 7 * 3; k++) img[k] = (uint8_t)(k * 3);
    const char *out = hsi_test_tmp("q.png");
    HSI_CHECK_OK(hsi_gdal_write_png(out, img, 5, 7, 3));
    FILE *fp = fopen(out, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    uint8_t sig[8];
    CU_ASSERT_EQUAL(fread(sig, 1, 8, fp), 8);
    fclose(fp);
    CU_ASSERT_EQUAL(memcmp(sig, "\x89PNG\r\n\x1a\n", 8), 0);
    GDALDatasetH ds = GDALOpen(out, GA_ReadOnly);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    CU_ASSERT_STRING_EQUAL(GDALGetDriverShortName(GDALGetDatasetDriver(ds)), "PNG");
    CU_ASSERT_EQUAL(GDALGetRasterXSize(ds), 7);
    CU_ASSERT_EQUAL(GDALGetRasterYSize(ds), 5);
    CU_ASSERT_EQUAL(GDALGetRasterCount(ds), 3);
    uint8_t g[35];
    CU_ASSERT_EQUAL(GDALRasterIO(GDALGetRasterBand(ds, 2), GF_Read, 0, 0, 7, 5, g, 7, 5, GDT_Byte,
                                 0, 0),
                    CE_None);
    CU_ASSERT_EQUAL(g[2 * 7 + 3], img[(2 * 7 + 3) * 3 + 1]);
    GDALClose(ds);
    HSI_CHECK_FAILS(hsi_gdal_write_png(out, img, 5, 7, 2), HSI_ERR_ARG, "1, 3 or 4");
}

/* Reads band b (1-based) of a PNG through GDAL into out (w*h bytes). */
static int png_band(const char *path, int b, uint8_t *out, int *w, int *h, int *n)
{
    GDALDatasetH ds = GDALOpen(path, GA_ReadOnly);
    if (!ds) return 0;
    *w = GDALGetRasterXSize(ds);
    *h = GDALGetRasterYSize(ds);
    *n = GDALGetRasterCount(ds);
    int ok = out == NULL || GDALRasterIO(GDALGetRasterBand(ds, b), GF_Read, 0, 0, *w, *h, out, *w,
                                         *h, GDT_Byte, 0, 0) == CE_None;
    GDALClose(ds);
    return ok;
}

static void test_quicklook(void)
{
    hsi_cube c;
    HSI_CHECK_OK(hsi_cube_open(&c, FIX "cube3.tif", NULL));
    const char *out = hsi_test_tmp("ql.png");
    int64_t band[3] = {2, 1, 0};
    HSI_CHECK_OK(hsi_quicklook_rgb_png(out, &c.view, band, 0.0, &c.meta));
    uint8_t r[30], b[30];
    int w = 0, h = 0, n = 0;
    CU_ASSERT_FATAL(png_band(out, 1, r, &w, &h, &n));
    CU_ASSERT(w == 6 && h == 5 && n == 3);
    CU_ASSERT_FATAL(png_band(out, 3, b, &w, &h, &n));
    /* min..max stretch: 10y + x + const spans 0..45 in every band */
    CU_ASSERT_EQUAL(r[0], 0);
    CU_ASSERT_EQUAL(r[29], 255);
    CU_ASSERT_EQUAL(b[1 * 6 + 2], (uint8_t)lrint(12.0 / 45.0 * 255.0));
    band[0] = 3;
    HSI_CHECK_FAILS(hsi_quicklook_rgb_png(out, &c.view, band, 2.0, &c.meta), HSI_ERR_ARG, "band 3");
    hsi_cube_free(&c);

    /* a label map with legend: map pixels in the file's class colours */
    hsi_labels l;
    HSI_CHECK_OK(hsi_labels_open(&l, FIX "classes_envi.hdr", NULL));
    out = hsi_test_tmp("qll.png");
    HSI_CHECK_OK(hsi_quicklook_labels(out, &l, 1));
    CU_ASSERT_FATAL(png_band(out, 1, NULL, &w, &h, &n));
    CU_ASSERT(w > 6 + 40 && h >= 4 && n == 3); /* map + legend panel */
    uint8_t *g = malloc((size_t)(w * h));
    CU_ASSERT_FATAL(png_band(out, 2, g, &w, &h, &n));
    CU_ASSERT_EQUAL(g[2 * w + 3], 200); /* class 1 "Grass" = (0, 200, 0) */
    CU_ASSERT_EQUAL(g[0], 0);           /* unlabelled: black */
    free(g);
    HSI_CHECK_OK(hsi_quicklook_labels(out, &l, 0));
    CU_ASSERT_FATAL(png_band(out, 1, NULL, &w, &h, &n));
    CU_ASSERT(w == 6 && h == 4);
    hsi_labels_free(&l);
}

static void test_dispatch(void)
{
    hsi_cube c;
    /* content, not extension: an SPE renamed .dat, a .mat renamed .bin */
    const char *p = hsi_test_tmp("renamed.dat");
    char *t = NULL;
    size_t n = 0;
    HSI_CHECK_OK(hsi_read_file(FIX "synth_v2_i16.spe", &t, &n));
    FILE *fp = fopen(p, "wb");
    fwrite(t, 1, n, fp);
    fclose(fp);
    free(t);
    HSI_CHECK_OK(hsi_cube_open(&c, p, NULL));
    CU_ASSERT_STRING_EQUAL(c.meta.format, "spe");
    hsi_cube_free(&c);
    HSI_CHECK_OK(hsi_read_file(FIX "synth_u16.mat", &t, &n));
    p = hsi_test_tmp("renamed.bin");
    fp = fopen(p, "wb");
    fwrite(t, 1, n, fp);
    fclose(fp);
    free(t);
    HSI_CHECK_OK(hsi_cube_open(&c, p, NULL));
    CU_ASSERT_STRING_EQUAL(c.meta.format, "mat");
    hsi_cube_free(&c);
    /* a .spe that is neither ENVI nor SPE: the failed checks are listed */
    p = hsi_test_tmp("junk.spe");
    fp = fopen(p, "wb");
    for (int k = 0; k < 5000; k++) fputc(k & 0x7f, fp);
    fclose(fp);
    HSI_CHECK_FAILS(hsi_cube_open(&c, p, NULL), HSI_ERR_FORMAT, "neither ENVI");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "datatype @108"));
    /* a .spe data file with an ENVI side-car is ENVI */
    p = hsi_test_tmp("cam.spe");
    fp = fopen(p, "wb");
    for (int k = 0; k < 2 * 3 * 4 * 2; k++) fputc(k, fp);
    fclose(fp);
    fp = fopen(hsi_test_tmp("cam.hdr"), "w");
    fputs("ENVI\nsamples = 4\nlines = 3\nbands = 2\nheader offset = 0\ndata type = 12\n"
          "interleave = bil\nbyte order = 0\n",
          fp);
    fclose(fp);
    HSI_CHECK_OK(hsi_cube_open(&c, p, NULL));
    CU_ASSERT_STRING_EQUAL(c.meta.format, "envi");
    CU_ASSERT_EQUAL(c.view.shape[0], 2);
    hsi_cube_free(&c);
    /* something nobody reads */
    p = hsi_test_tmp("note.txt");
    fp = fopen(p, "w");
    fputs("hello\n", fp);
    fclose(fp);
    HSI_CHECK_FAILS(hsi_cube_open(&c, p, NULL), HSI_ERR_FORMAT, "GDAL cannot open it");
}

/* info --json: the geotransform GDAL reads from the same header, the
 * bounds from its corners, the EPSG code GDAL's own script wrote down. */
static void test_info_georef(void)
{
    double want[6];
    int epsg = 0;
    CU_ASSERT_FATAL(read_expected(want, &epsg));
    char out[1 << 15];
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "{ " HSI_BIN " info " FIX "geo_envi.hdr --json 2>/dev/null; }"), 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON *g = cJSON_GetObjectItem(j, "geotransform");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(g), 6);
    for (int k = 0; k < 6; k++) HSI_ASSERT_NEAR(cJSON_GetArrayItem(g, k)->valuedouble, want[k], 1e-9);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "epsg")->valueint, epsg);
    GDALAllRegister();
    GDALDatasetH ds = GDALOpen(FIX "geo_envi.img", GA_ReadOnly); /* GDAL opens ENVI by its data */
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    double W = GDALGetRasterXSize(ds), H = GDALGetRasterYSize(ds);
    GDALClose(ds);
    cJSON *b = cJSON_GetObjectItem(j, "bounds");
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(b, "left")->valuedouble, want[0], 1e-6);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(b, "top")->valuedouble, want[3], 1e-6);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(b, "right")->valuedouble, want[0] + W * want[1], 1e-6);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(b, "bottom")->valuedouble, want[3] + H * want[5], 1e-6);
    cJSON_Delete(j);
}

/* convert --co: GDAL reads back the compression, predictor and layout
 * asked for, the values unchanged; bad options are refused, nothing written. */
static void test_creation_options(void)
{
    char out[8192];
    const char *z = hsi_test_tmp("co_zstd.tif"), *c = hsi_test_tmp("co_cog.tif"), *y = hsi_test_tmp("co_bad.tif");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --co COMPRESS=ZSTD --co PREDICTOR=2 --co BLOCKXSIZE=32 --co BLOCKYSIZE=32", z), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --co COG=YES --co COMPRESS=LZW", c), 0);
    GDALAllRegister();
    hsi_cube src;
    HSI_CHECK_OK(hsi_cube_open(&src, "data_samples/scene.hdr", NULL));
    const char *files[2] = {z, c}, *comp[2] = {"ZSTD", "LZW"};
    for (int f = 0; f < 2; f++) {
        GDALDatasetH ds = GDALOpen(files[f], GA_ReadOnly);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
        const char *cm = GDALGetMetadataItem(ds, "COMPRESSION", "IMAGE_STRUCTURE");
        CU_ASSERT(cm && !strcmp(cm, comp[f]));
        if (f == 0) {
            const char *p = GDALGetMetadataItem(ds, "PREDICTOR", "IMAGE_STRUCTURE");
            CU_ASSERT(p && !strcmp(p, "2"));
            int bx = 0, by = 0;
            GDALGetBlockSize(GDALGetRasterBand(ds, 1), &bx, &by);
            CU_ASSERT(bx == 32 && by == 32);
        } else {
            const char *l = GDALGetMetadataItem(ds, "LAYOUT", "IMAGE_STRUCTURE");
            CU_ASSERT(l && !strcmp(l, "COG"));
        }
        CU_ASSERT_EQUAL(GDALGetRasterCount(ds), 128);
        /* band 7, every pixel, against the source */
        uint16_t a[96 * 96];
        CU_ASSERT_EQUAL(GDALRasterIO(GDALGetRasterBand(ds, 7), GF_Read, 0, 0, 96, 96, a, 96, 96, GDT_UInt16, 0, 0), CE_None);
        int bad = 0;
        for (int64_t yy = 0; yy < 96; yy++)
            for (int64_t xx = 0; xx < 96; xx++) {
                int64_t idx[3] = {6, yy, xx};
                bad += hsi_view_get_f64(&src.view, idx) != a[yy * 96 + xx];
            }
        CU_ASSERT_EQUAL(bad, 0);
        GDALClose(ds);
    }
    hsi_cube_free(&src);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --co FOO=1", y), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "FOO"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --co COMPRESS=BOGUS", y), 1);
    CU_ASSERT_EQUAL(access(y, F_OK), -1);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s.hdr --co COMPRESS=LZW", y), 2);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --co NOEQUALS", y), 2);
}

HSI_SUITE(gdal, 0, {"read GeoTIFF (GDAL-written)", test_read_geotiff},
          {"ENVI map info -> GeoTIFF geotransform/CRS", test_envi_to_geotiff},
          {"map info rotation -> geotransform (GDAL)", test_rotation},
          {"classification GeoTIFF", test_write_classes},
          {"class names and colours in the .tif alone (no .aux.xml)", test_classes_in_tiff},
          {"PNG", test_png},
          {"quicklook PNGs (cube, label map + legend)", test_quicklook},
          {"NetCDF subdatasets", test_subdatasets}, {"open by content", test_dispatch},
          {"convert --co: creation options and COG", test_creation_options},
          {"info --json: geotransform, bounds, EPSG", test_info_georef})
