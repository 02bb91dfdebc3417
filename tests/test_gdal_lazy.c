/* test_gdal_lazy.c — libgdal is dlopen'ed only when a GDAL format is used: a
 * fresh hsi process, traced by the dynamic loader (LD_DEBUG=files logs every
 * object it maps and why), maps it for a GeoTIFF and not for an ENVI cube or
 * --help. Not a test of what GDAL reads and writes (test_gdal.c). */
#include "test.h"

#include "io/cube.h"

/* Runs `HSI_BIN args` with LD_DEBUG=files: hsi's stdout into out (n bytes),
 * its stderr (the loader's log, and hsi's own messages) into *log
 * (malloc'd). Returns hsi's exit status. */
static int run_traced(char *out, size_t n, char **log, const char *args)
{
    char trace[4096];
    snprintf(trace, sizeof trace, "%s", hsi_test_tmp("ld_debug.txt"));
    remove(trace);
    int rc = hsi_test_run(out, n, "{ LD_DEBUG=files %s %s 2>'%s'; }", HSI_BIN, args, trace);
    size_t len = 0;
    *log = NULL;
    if (hsi_read_file(trace, log, &len) != HSI_OK) *log = NULL;
    return rc;
}

/* The loader's line for libgdal ("file=libgdal.so.32 [0];  dynamically
 * loaded by ..."), cut at its end into line; 0 when libgdal was not mapped. */
static int gdal_line(const char *log, char *line, size_t n)
{
    const char *p = log ? strstr(log, "file=libgdal") : NULL;
    if (!p) return 0;
    const char *e = strchr(p, '\n');
    size_t k = e ? (size_t)(e - p) : strlen(p);
    if (k >= n) k = n - 1;
    memcpy(line, p, k);
    line[k] = 0;
    return 1;
}

/* The trace works at all: libc is in every log. */
static void check_traced(const char *log)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "file=libc.so"));
}

static void test_envi_no_gdal(void)
{
    char out[8192], line[512];
    char *log = NULL;
    CU_ASSERT_EQUAL(run_traced(out, sizeof out, &log, "info data_samples/scene.hdr"), 0);
    check_traced(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "96 samples x 96 lines x 128 bands"));
    CU_ASSERT_FALSE(gdal_line(log, line, sizeof line));
    if (gdal_line(log, line, sizeof line)) fprintf(stderr, "\n  info scene.hdr mapped: %s\n", line);
    free(log);

    /* map info and a coordinate system string: printed without GDAL */
    CU_ASSERT_EQUAL(run_traced(out, sizeof out, &log, "info tests/fixtures/formats/geo_envi.hdr"),
                    0);
    check_traced(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "UTM zone 11 North"));
    CU_ASSERT_FALSE(gdal_line(log, line, sizeof line));
    free(log);

    CU_ASSERT_EQUAL(run_traced(out, sizeof out, &log, "--help"), 0);
    check_traced(log);
    CU_ASSERT_FALSE(gdal_line(log, line, sizeof line));
    free(log);
}

static void test_geotiff_loads_gdal(void)
{
    char out[8192], line[512], args[4200];
    char *log = NULL;
    char tif[4096];
    snprintf(tif, sizeof tif, "%s", hsi_test_tmp("lazy.tif"));

    /* writing a GeoTIFF maps libgdal, by dlopen (not as a NEEDED library) */
    snprintf(args, sizeof args, "convert data_samples/scene.hdr '%s'", tif);
    CU_ASSERT_EQUAL(run_traced(out, sizeof out, &log, args), 0);
    check_traced(log);
    CU_ASSERT_FATAL(gdal_line(log, line, sizeof line));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "dynamically loaded"));
    free(log);

    /* and so does reading it, in a fresh process */
    snprintf(args, sizeof args, "info '%s'", tif);
    CU_ASSERT_EQUAL(run_traced(out, sizeof out, &log, args), 0);
    check_traced(log);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "format:        gdal"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "96 samples x 96 lines x 128 bands"));
    CU_ASSERT_FATAL(gdal_line(log, line, sizeof line));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "dynamically loaded"));
    free(log);

    /* what the child wrote is the ENVI cube, value for value */
    hsi_cube e, t;
    HSI_CHECK_OK(hsi_cube_open(&e, "data_samples/scene.hdr", NULL));
    HSI_CHECK_OK(hsi_cube_open(&t, tif, NULL));
    CU_ASSERT_STRING_EQUAL(t.meta.format, "gdal");
    CU_ASSERT_EQUAL(t.view.dtype, e.view.dtype);
    for (int k = 0; k < 3; k++)
        CU_ASSERT_EQUAL(t.view.shape[k], e.view.shape[k]);
    int64_t bad = 0, i[3];
    for (i[0] = 0; i[0] < e.view.shape[0]; i[0]++)
        for (i[1] = 0; i[1] < e.view.shape[1]; i[1]++)
            for (i[2] = 0; i[2] < e.view.shape[2]; i[2]++)
                bad += hsi_view_get_f64(&t.view, i) != hsi_view_get_f64(&e.view, i);
    CU_ASSERT_EQUAL(bad, 0);
    hsi_cube_free(&t);
    hsi_cube_free(&e);
}

HSI_SUITE(gdal_lazy, 0, {"ENVI info, --help: libgdal not loaded", test_envi_no_gdal},
          {"GeoTIFF write/read: libgdal dlopen'ed, values kept", test_geotiff_loads_gdal})
