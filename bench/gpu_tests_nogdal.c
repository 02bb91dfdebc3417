/* gpu_tests_nogdal.c — the GDAL functions tests/runner.c calls (its PNG
 * readers, hsi_test_png_size / hsi_test_png_rgb), as "no file can be
 * opened", for build/gpu/run/gpu_tests only (bench/gpu_prepare.sh): the GPU
 * image has no GDAL, and GDAL with its libraries (over 100 of them, about
 * 170 MB) would not fit the carried build. None of the suites linked into
 * gpu_tests (test_cuda.c, test_pipeline_loader.c) reads a PNG; a suite that
 * did would fail its check, never pass it. Compiled against GDAL's own
 * headers, so a prototype that changes is a compile error here. When
 * runner.c calls another GDAL function, the gpu_tests link names it: add
 * it here. Not a GDAL implementation, and not in libhsi or hsi_tests. */
#include <cpl_error.h>
#include <gdal.h>

#include <stddef.h>

void CPL_STDCALL GDALAllRegister(void) {}

void CPL_STDCALL CPLQuietErrorHandler(CPLErr e, CPLErrorNum n, const char *msg)
{
    (void)e, (void)n, (void)msg;
}
void CPL_STDCALL CPLPushErrorHandler(CPLErrorHandler h) { (void)h; }
void CPL_STDCALL CPLPopErrorHandler(void) {}

GDALDatasetH CPL_STDCALL GDALOpen(const char *path, GDALAccess access)
{
    (void)path, (void)access;
    return NULL; /* every caller then reports "not a readable PNG" */
}

/* unreachable after a NULL GDALOpen; defined for the link */
void CPL_STDCALL GDALClose(GDALDatasetH ds) { (void)ds; }
GDALDriverH CPL_STDCALL GDALGetDatasetDriver(GDALDatasetH ds)
{
    (void)ds;
    return NULL;
}
const char *CPL_STDCALL GDALGetDriverShortName(GDALDriverH d)
{
    (void)d;
    return "";
}
int CPL_STDCALL GDALGetRasterXSize(GDALDatasetH ds)
{
    (void)ds;
    return 0;
}
int CPL_STDCALL GDALGetRasterYSize(GDALDatasetH ds)
{
    (void)ds;
    return 0;
}
int CPL_STDCALL GDALGetRasterCount(GDALDatasetH ds)
{
    (void)ds;
    return 0;
}
GDALRasterBandH CPL_STDCALL GDALGetRasterBand(GDALDatasetH ds, int band)
{
    (void)ds, (void)band;
    return NULL;
}
CPLErr CPL_STDCALL GDALRasterIO(GDALRasterBandH b, GDALRWFlag rw, int x, int y, int nx, int ny,
                                void *buf, int bx, int by, GDALDataType t, int ps, int ls)
{
    (void)b, (void)rw, (void)x, (void)y, (void)nx, (void)ny, (void)buf, (void)bx, (void)by,
        (void)t, (void)ps, (void)ls;
    return CE_Failure;
}
CPLErr CPL_STDCALL GDALDatasetRasterIO(GDALDatasetH ds, GDALRWFlag rw, int x, int y, int nx, int ny,
                                       void *buf, int bx, int by, GDALDataType t, int n_bands,
                                       int *bands, int ps, int ls, int bs)
{
    (void)ds, (void)rw, (void)x, (void)y, (void)nx, (void)ny, (void)buf, (void)bx, (void)by,
        (void)t, (void)n_bands, (void)bands, (void)ps, (void)ls, (void)bs;
    return CE_Failure;
}
