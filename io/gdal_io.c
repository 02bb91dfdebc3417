/* gdal_io.c — the GDAL bridge: any GDAL raster into a host (band, line,
 * sample) view read block by block; GeoTIFF and PNG writers; ENVI map info
 * <-> GDAL geotransform/CRS. GDAL's own messages are captured (quiet error
 * handler) and folded into hsi errors. Not a zero-copy path.
 * libgdal is not linked: it is dlopen'ed (HSI_GDAL_SONAME, from the Makefile)
 * on the first call that needs it, so programs that never touch a GDAL format
 * do not pay for loading it and its ~110 dependencies. The only file of hsi
 * that includes GDAL headers (for the prototypes and types). */
#define _GNU_SOURCE
#include "gdal_io.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <gdal.h>
#include <ogr_srs_api.h>

#ifndef HSI_GDAL_SONAME
#define HSI_GDAL_SONAME "libgdal.so"
#endif

/* ------------------------------------------------- loading libgdal lazily */

/* Every GDAL/CPL/CSL/OSR/VSI function this file calls (CPLFree is VSIFree).
 * Each gets a pointer of its own prototype's type, resolved by dlsym; the
 * #defines below route the calls in the rest of the file through them. A
 * call to a function missing here links against the real symbol, which the
 * hsi binary's link (no -lgdal) reports as undefined. */
/* clang-format off */
#define HSI_GDAL_FUNCS(X) \
    X(CPLErrorReset) X(CPLGetLastErrorMsg) X(CPLGetLastErrorType) X(CPLPopErrorHandler) \
    X(CPLPushErrorHandler) X(CPLQuietErrorHandler) X(CSLAddString) X(CSLCount) X(CSLDestroy) \
    X(CSLFetchNameValue) X(CSLSetNameValue) X(GDALAllRegister) X(GDALClose) X(GDALCreate) \
    X(GDALCreateColorTable) X(GDALCreateCopy) X(GDALDestroyColorTable) X(GDALGetBlockSize) \
    X(GDALGetColorEntry) X(GDALGetColorEntryCount) X(GDALGetDataTypeName) \
    X(GDALGetDatasetDriver) X(GDALGetDescription) X(GDALGetDriverByName) \
    X(GDALGetDriverShortName) X(GDALGetGeoTransform) X(GDALGetMetadata) X(GDALGetProjectionRef) \
    X(GDALGetRasterBand) X(GDALGetRasterCategoryNames) X(GDALGetRasterColorTable) \
    X(GDALGetRasterCount) X(GDALGetRasterDataType) X(GDALGetRasterNoDataValue) \
    X(GDALGetRasterXSize) X(GDALGetRasterYSize) X(GDALOpenEx) X(GDALRasterIO) \
    X(GDALSetColorEntry) X(GDALSetDescription) X(GDALSetGeoTransform) X(GDALSetMetadataItem) \
    X(GDALSetProjection) X(GDALSetRasterCategoryNames) X(GDALSetRasterColorInterpretation) \
    X(GDALSetRasterColorTable) X(GDALSetRasterNoDataValue) X(GDALValidateCreationOptions) X(OSRClone) \
    X(OSRDestroySpatialReference) X(OSRExportToWkt) X(OSRGetAttrValue) X(OSRGetUTMZone) \
    X(OSRImportFromESRI) X(OSRImportFromWkt) X(OSRIsGeographic) X(OSRMorphToESRI) \
    X(OSRNewSpatialReference) X(OSRSetFromUserInput) X(OSRSetUTM) X(OSRSetWellKnownGeogCS) \
    X(VSIFree)
/* clang-format on */

#define HSI_GDAL_PTR(f) static __typeof__(f) *p_##f;
HSI_GDAL_FUNCS(HSI_GDAL_PTR)
#undef HSI_GDAL_PTR

static pthread_once_t g_gdal_once = PTHREAD_ONCE_INIT;
static int g_gdal_ok;
static char g_gdal_why[512]; /* why loading failed: dlerror() or the missing symbol */

static void gdal_load(void)
{
    void *h = dlopen(HSI_GDAL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_gdal_why, sizeof g_gdal_why, "dlopen: %s", e ? e : "no detail");
        return;
    }
    const char *missing = NULL;
#define HSI_GDAL_SYM(f)                                                                            \
    if (!missing && !(p_##f = (__typeof__(f) *)dlsym(h, #f))) missing = #f;
    HSI_GDAL_FUNCS(HSI_GDAL_SYM)
#undef HSI_GDAL_SYM
    if (missing) {
        snprintf(g_gdal_why, sizeof g_gdal_why, "it has no symbol %s", missing);
        dlclose(h);
        return;
    }
    p_GDALAllRegister();
    g_gdal_ok = 1; /* the handle stays open for the life of the process */
}

/* Loads GDAL once (thread-safe); every entry point that needs GDAL calls
 * this first. path and task (what GDAL was needed for) go into the message. */
static hsi_status need_gdal(const char *path, const char *task)
{
    pthread_once(&g_gdal_once, gdal_load);
    if (g_gdal_ok) return HSI_OK;
    return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: %s needs GDAL, but %s cannot be loaded (%s)", path,
                    task, HSI_GDAL_SONAME, g_gdal_why);
}

/* clang-format off */
#define CPLErrorReset (*p_CPLErrorReset)
#define CPLGetLastErrorMsg (*p_CPLGetLastErrorMsg)
#define CPLGetLastErrorType (*p_CPLGetLastErrorType)
#define CPLPopErrorHandler (*p_CPLPopErrorHandler)
#define CPLPushErrorHandler (*p_CPLPushErrorHandler)
#define CPLQuietErrorHandler (*p_CPLQuietErrorHandler)
#define CSLAddString (*p_CSLAddString)
#define CSLCount (*p_CSLCount)
#define CSLDestroy (*p_CSLDestroy)
#define CSLFetchNameValue (*p_CSLFetchNameValue)
#define CSLSetNameValue (*p_CSLSetNameValue)
#define GDALAllRegister (*p_GDALAllRegister)
#define GDALClose (*p_GDALClose)
#define GDALCreate (*p_GDALCreate)
#define GDALCreateColorTable (*p_GDALCreateColorTable)
#define GDALCreateCopy (*p_GDALCreateCopy)
#define GDALValidateCreationOptions (*p_GDALValidateCreationOptions)
#define GDALDestroyColorTable (*p_GDALDestroyColorTable)
#define GDALGetBlockSize (*p_GDALGetBlockSize)
#define GDALGetColorEntry (*p_GDALGetColorEntry)
#define GDALGetColorEntryCount (*p_GDALGetColorEntryCount)
#define GDALGetDataTypeName (*p_GDALGetDataTypeName)
#define GDALGetDatasetDriver (*p_GDALGetDatasetDriver)
#define GDALGetDescription (*p_GDALGetDescription)
#define GDALGetDriverByName (*p_GDALGetDriverByName)
#define GDALGetDriverShortName (*p_GDALGetDriverShortName)
#define GDALGetGeoTransform (*p_GDALGetGeoTransform)
#define GDALGetMetadata (*p_GDALGetMetadata)
#define GDALGetProjectionRef (*p_GDALGetProjectionRef)
#define GDALGetRasterBand (*p_GDALGetRasterBand)
#define GDALGetRasterCategoryNames (*p_GDALGetRasterCategoryNames)
#define GDALGetRasterColorTable (*p_GDALGetRasterColorTable)
#define GDALGetRasterCount (*p_GDALGetRasterCount)
#define GDALGetRasterDataType (*p_GDALGetRasterDataType)
#define GDALGetRasterNoDataValue (*p_GDALGetRasterNoDataValue)
#define GDALGetRasterXSize (*p_GDALGetRasterXSize)
#define GDALGetRasterYSize (*p_GDALGetRasterYSize)
#define GDALOpenEx (*p_GDALOpenEx)
#define GDALRasterIO (*p_GDALRasterIO)
#define GDALSetColorEntry (*p_GDALSetColorEntry)
#define GDALSetDescription (*p_GDALSetDescription)
#define GDALSetGeoTransform (*p_GDALSetGeoTransform)
#define GDALSetMetadataItem (*p_GDALSetMetadataItem)
#define GDALSetProjection (*p_GDALSetProjection)
#define GDALSetRasterCategoryNames (*p_GDALSetRasterCategoryNames)
#define GDALSetRasterColorInterpretation (*p_GDALSetRasterColorInterpretation)
#define GDALSetRasterColorTable (*p_GDALSetRasterColorTable)
#define GDALSetRasterNoDataValue (*p_GDALSetRasterNoDataValue)
#define OSRClone (*p_OSRClone)
#define OSRDestroySpatialReference (*p_OSRDestroySpatialReference)
#define OSRExportToWkt (*p_OSRExportToWkt)
#define OSRGetAttrValue (*p_OSRGetAttrValue)
#define OSRGetUTMZone (*p_OSRGetUTMZone)
#define OSRImportFromESRI (*p_OSRImportFromESRI)
#define OSRImportFromWkt (*p_OSRImportFromWkt)
#define OSRIsGeographic (*p_OSRIsGeographic)
#define OSRMorphToESRI (*p_OSRMorphToESRI)
#define OSRNewSpatialReference (*p_OSRNewSpatialReference)
#define OSRSetFromUserInput (*p_OSRSetFromUserInput)
#define OSRSetUTM (*p_OSRSetUTM)
#define OSRSetWellKnownGeogCS (*p_OSRSetWellKnownGeogCS)
#define VSIFree (*p_VSIFree)
/* clang-format on */

/* Every entry point runs inside quiet(): GDAL errors are kept, not printed.
 * need_gdal() first. */
static void quiet_begin(void)
{
    CPLPushErrorHandler(CPLQuietErrorHandler);
    CPLErrorReset();
}
static void quiet_end(void) { CPLPopErrorHandler(); }
static const char *gdal_why(void)
{
    const char *m = CPLGetLastErrorMsg();
    return m && *m ? m : "no detail from GDAL";
}

static hsi_dtype from_gdt(GDALDataType t)
{
    switch (t) {
    case GDT_Byte: return HSI_U8;
    case GDT_UInt16: return HSI_U16;
    case GDT_Int16: return HSI_I16;
    case GDT_UInt32: return HSI_U32;
    case GDT_Int32: return HSI_I32;
    case GDT_Float32: return HSI_F32;
    case GDT_Float64: return HSI_F64;
    case GDT_CFloat32: return HSI_C64;
    case GDT_CFloat64: return HSI_C128;
    case GDT_Int64: return HSI_I64;
    case GDT_UInt64: return HSI_U64;
    default: return HSI_DT_INVALID;
    }
}

static GDALDataType to_gdt(hsi_dtype d)
{
    switch (d) {
    case HSI_U8: return GDT_Byte;
    case HSI_U16: return GDT_UInt16;
    case HSI_I16: return GDT_Int16;
    case HSI_U32: return GDT_UInt32;
    case HSI_I32: return GDT_Int32;
    case HSI_F32: return GDT_Float32;
    case HSI_F64: return GDT_Float64;
    case HSI_I64: return GDT_Int64;
    case HSI_U64: return GDT_UInt64;
    default: return GDT_Unknown;
    }
}

/* ------------------------------------------------------- georeferencing */

int hsi_meta_geotransform(const hsi_meta *m, double gt[6])
{
    if (!m || !m->map_info.valid) return 0;
    const hsi_map_info *mi = &m->map_info;
    if (!(mi->x_size > 0) || !(mi->y_size > 0) || !isfinite(mi->x_size) ||
        !isfinite(mi->y_size) || !isfinite(mi->easting) || !isfinite(mi->northing) ||
        !isfinite(mi->ref_x) || !isfinite(mi->ref_y) || !isfinite(mi->rotation))
        return 0;
    /* GDAL's convention for ENVI "rotation=" (degrees) */
    double r = mi->rotation * M_PI / 180.0, c = cos(r), s = sin(r);
    gt[1] = c * mi->x_size;
    gt[2] = s * mi->y_size;
    gt[4] = s * mi->x_size;
    gt[5] = -c * mi->y_size;
    /* the tie point (ref_x, ref_y) is 1-based: pixel (1, 1) is the upper-left
     * corner of the first pixel */
    double px = mi->ref_x - 1.0, py = mi->ref_y - 1.0;
    gt[0] = mi->easting - px * gt[1] - py * gt[2];
    gt[3] = mi->northing - px * gt[4] - py * gt[5];
    for (int i = 0; i < 6; i++)
        if (!isfinite(gt[i])) return 0; /* finite inputs, overflowing products */
    return 1;
}

int hsi_meta_epsg(const hsi_meta *m)
{
    if (!m || !m->map_info.valid) return 0;
    const hsi_map_info *mi = &m->map_info;
    const char *d = mi->datum;
    int wgs84 = !strcasecmp(d, "WGS-84") || !strcasecmp(d, "WGS84");
    int nad83 = !strcasecmp(d, "North America 1983") || !strcasecmp(d, "NAD83");
    if (!strcasecmp(mi->projection, "UTM") && mi->zone >= 1 && mi->zone <= 60) {
        if (wgs84) return (mi->north ? 32600 : 32700) + mi->zone;
        if (nad83 && mi->north && mi->zone <= 23) return 26900 + mi->zone;
        return 0;
    }
    if (!strcasecmp(mi->projection, "Geographic Lat/Lon") && wgs84) return 4326;
    return 0;
}

hsi_status hsi_meta_crs_wkt(char **wkt, const hsi_meta *m)
{
    *wkt = NULL;
    int has_cs = m && m->coordinate_system && *m->coordinate_system;
    if (!has_cs && !(m && m->map_info.valid)) return HSI_OK; /* nothing to convert: no GDAL */
    hsi_status st = need_gdal("coordinate system", "conversion to WKT");
    if (st != HSI_OK) return st;
    quiet_begin();
    OGRSpatialReferenceH srs = OSRNewSpatialReference(NULL);
    int ok = 0;
    if (has_cs) {
        char *lines[2] = {m->coordinate_system, NULL};
        ok = OSRImportFromESRI(srs, lines) == OGRERR_NONE;
        if (!ok) ok = OSRSetFromUserInput(srs, m->coordinate_system) == OGRERR_NONE;
    }
    if (!ok && m->map_info.valid) {
        const hsi_map_info *mi = &m->map_info;
        const char *datum = mi->datum;
        const char *geog = strncasecmp(datum, "NAD-27", 6) == 0   ? "NAD27"
                           : strncasecmp(datum, "NAD-83", 6) == 0 ? "NAD83"
                                                                  : "WGS84";
        if (strcasecmp(mi->projection, "UTM") == 0 && mi->zone > 0) {
            ok = OSRSetWellKnownGeogCS(srs, geog) == OGRERR_NONE &&
                 OSRSetUTM(srs, mi->zone, mi->north) == OGRERR_NONE;
        } else if (strncasecmp(mi->projection, "Geographic", 10) == 0) {
            ok = OSRSetWellKnownGeogCS(srs, geog) == OGRERR_NONE;
        }
    }
    if (ok) {
        char *w = NULL;
        if (OSRExportToWkt(srs, &w) == OGRERR_NONE && w) {
            *wkt = strdup(w);
            CPLFree(w);
        }
    }
    OSRDestroySpatialReference(srs);
    quiet_end();
    return HSI_OK;
}

/* Fills map_info / coordinate_system from a GDAL geotransform + WKT. */
static void meta_from_geo(hsi_meta *m, const double gt[6], const char *wkt, const char *path)
{
    char buf[256];
    for (int i = 0; i < 6; i++)
        if (!isfinite(gt[i]) || !(hypot(gt[1], gt[4]) > 0) || !(hypot(gt[2], gt[5]) > 0)) {
            hsi_meta_warn(m,
                          "%s: GDAL's geotransform {%g, %g, %g, %g, %g, %g} is not finite or has "
                          "a zero pixel size; georeferencing not used",
                          path, gt[0], gt[1], gt[2], gt[3], gt[4], gt[5]);
            return;
        }
    snprintf(buf, sizeof buf, "%.17g, %.17g, %.17g, %.17g, %.17g, %.17g", gt[0], gt[1], gt[2],
             gt[3], gt[4], gt[5]);
    hsi_meta_set(m, "geotransform", buf, 1);
    hsi_map_info *mi = &m->map_info;
    memset(mi, 0, sizeof *mi);
    snprintf(mi->projection, sizeof mi->projection, "Arbitrary");
    snprintf(mi->units, sizeof mi->units, "Meters");
    OGRSpatialReferenceH srs = NULL;
    if (wkt && *wkt) {
        srs = OSRNewSpatialReference(NULL);
        char *w = (char *)wkt;
        if (OSRImportFromWkt(srs, &w) != OGRERR_NONE) {
            OSRDestroySpatialReference(srs);
            srs = NULL;
        }
    }
    if (srs) {
        int north = 1, zone = OSRGetUTMZone(srs, &north);
        const char *d = OSRGetAttrValue(srs, "DATUM", 0);
        if (d && (strstr(d, "WGS_1984") || strstr(d, "WGS84") || strstr(d, "WGS 84")))
            snprintf(mi->datum, sizeof mi->datum, "WGS-84");
        else if (d)
            snprintf(mi->datum, sizeof mi->datum, "%s", d);
        if (zone > 0) {
            snprintf(mi->projection, sizeof mi->projection, "UTM");
            mi->zone = zone;
            mi->north = north ? 1 : 0;
        } else if (OSRIsGeographic(srs)) {
            snprintf(mi->projection, sizeof mi->projection, "Geographic Lat/Lon");
            snprintf(mi->units, sizeof mi->units, "Degrees");
        }
        OGRSpatialReferenceH esri = OSRClone(srs);
        char *e = NULL;
        if (OSRMorphToESRI(esri) == OGRERR_NONE && OSRExportToWkt(esri, &e) == OGRERR_NONE && e) {
            free(m->coordinate_system);
            m->coordinate_system = strdup(e);
        }
        CPLFree(e);
        OSRDestroySpatialReference(esri);
        OSRDestroySpatialReference(srs);
    }
    mi->ref_x = mi->ref_y = 1.0;
    mi->easting = gt[0];
    mi->northing = gt[3];
    mi->x_size = hypot(gt[1], gt[4]);
    mi->y_size = hypot(gt[2], gt[5]);
    mi->rotation = (gt[2] != 0.0 || gt[4] != 0.0) ? atan2(gt[2], gt[1]) * 180.0 / M_PI : 0.0;
    mi->valid = 1;
}

/* ---------------------------------------------------------------- reading */

static hsi_status pick_subdataset(char **chosen, GDALDatasetH ds, const char *path,
                                  const char *var)
{
    char **md = GDALGetMetadata(ds, "SUBDATASETS");
    int n = 0;
    for (char **p = md; p && *p; p++)
        if (strstr(*p, "_NAME=")) n++;
    *chosen = NULL;
    if (n == 0)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: GDAL (%s) found no raster bands and no subdatasets",
                        path, GDALGetDriverShortName(GDALGetDatasetDriver(ds)));
    char list[2048];
    size_t w = 0;
    list[0] = 0;
    for (int i = 1; i <= n; i++) {
        char key[64];
        snprintf(key, sizeof key, "SUBDATASET_%d_NAME", i);
        const char *name = CSLFetchNameValue(md, key);
        if (!name) continue;
        int hit = n == 1 && !var;
        if (var) {
            char *end = NULL;
            long k = strtol(var, &end, 10);
            const char *tail = strrchr(name, ':');
            hit = (end != var && !*end && k == i) || strcmp(var, name) == 0 ||
                  (tail && strcmp(tail + 1, var) == 0) ||
                  (tail && tail[1] == '/' && strcmp(tail + 2, var) == 0);
        }
        if (hit) {
            *chosen = strdup(name);
            return *chosen ? HSI_OK : HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        }
        int k = snprintf(list + w, sizeof list - w, "%s%d: %s", w ? "; " : "", i, name);
        if (k > 0 && (size_t)k < sizeof list - w) w += (size_t)k;
    }
    return HSI_FAIL(var ? HSI_ERR_NOT_FOUND : HSI_ERR_ARG,
                    "%s: %s; name one with --var (name or 1-based index). Subdatasets: %s", path,
                    var ? "no such subdataset" : "several subdatasets", list);
}

/* A FIFO (or a directory, a symlink loop...) is refused before GDAL would
 * block on it or misread it. path is a file name, or a GDAL dataset name
 * such as NETCDF:"file.nc":var, whose quoted file is checked instead; names
 * that are not files (/vsi..., connection strings) go to GDAL as they are. */
static hsi_status input_check(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) == 0 || errno != ENOENT) return hsi_input_check(path, "cube");
    const char *q = strstr(path, ":\""), *e = q ? strchr(q + 2, '"') : NULL;
    if (!q || !e || e == q + 2 || (size_t)(e - q - 2) >= 4096) return HSI_OK;
    char inner[4096];
    snprintf(inner, sizeof inner, "%.*s", (int)(e - q - 2), q + 2);
    if (lstat(inner, &sb) == 0 || errno != ENOENT) return hsi_input_check(inner, "cube");
    return HSI_OK;
}

hsi_status hsi_gdal_open(hsi_cube *out, const char *path, const char *var)
{
    hsi_status st = HSI_OK;
    GDALDatasetH ds = NULL;
    char *sub = NULL;
    char **own_cats = NULL; /* category names read from the band metadata */
    hsi_cube_init(out);
    st = input_check(path);
    if (st != HSI_OK) return st;
    st = need_gdal(path, "reading a format other than ENVI, SPE or MATLAB");
    if (st != HSI_OK) return st;
    quiet_begin();
    ds = GDALOpenEx(path, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL, NULL, NULL);
    if (!ds) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not a format hsi reads (not ENVI, SPE, MATLAB), and GDAL "
                      "cannot open it either (%s)",
                      path, gdal_why());
        goto cleanup;
    }
    if (GDALGetRasterCount(ds) == 0 || (var && GDALGetMetadata(ds, "SUBDATASETS"))) {
        HSI_TRY(pick_subdataset(&sub, ds, path, var));
        GDALClose(ds);
        ds = GDALOpenEx(sub, GDAL_OF_RASTER | GDAL_OF_READONLY, NULL, NULL, NULL);
        if (!ds) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: cannot open subdataset %s (%s)", path, sub,
                          gdal_why());
            goto cleanup;
        }
    }
    int64_t B = GDALGetRasterCount(ds), L = GDALGetRasterYSize(ds), S = GDALGetRasterXSize(ds);
    if (B <= 0 || L <= 0 || S <= 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: GDAL reports %lld bands, %lld lines, %lld samples", path,
                      (long long)B, (long long)L, (long long)S);
        goto cleanup;
    }
    GDALRasterBandH b0 = GDALGetRasterBand(ds, 1);
    GDALDataType gdt = GDALGetRasterDataType(b0);
    for (int b = 2; b <= B; b++)
        if (GDALGetRasterDataType(GDALGetRasterBand(ds, b)) != gdt) {
            /* mixed types: promote to float64 */
            gdt = GDT_Float64;
            break;
        }
    hsi_dtype dt = from_gdt(gdt);
    if (dt == HSI_DT_INVALID) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: GDAL data type %s is not supported", path,
                      GDALGetDataTypeName(gdt));
        goto cleanup;
    }
    int64_t shape[3] = {B, L, S};
    HSI_TRY(hsi_view_alloc(&out->view, dt, 3, shape, HSI_BUF_HOST));
    int64_t e = (int64_t)hsi_dtype_size(dt);
    hsi_progress prog;
    hsi_progress_begin(&prog, "gdal read", B * L);
    for (int b = 1; b <= B; b++) {
        GDALRasterBandH band = GDALGetRasterBand(ds, b);
        int bx = 0, by = 0;
        GDALGetBlockSize(band, &bx, &by);
        if (by <= 0) by = 1;
        int64_t step = by < 64 ? ((64 + by - 1) / by) * by : by; /* whole blocks */
        for (int64_t y = 0; y < L; y += step) {
            int64_t n = L - y < step ? L - y : step;
            uint8_t *dst = (uint8_t *)out->view.buf->data + ((b - 1) * L + y) * S * e;
            if (GDALRasterIO(band, GF_Read, 0, (int)y, (int)S, (int)n, dst, (int)S, (int)n, gdt, 0,
                             0) != CE_None) {
                hsi_progress_end(&prog);
                st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL read of band %d lines %lld..%lld failed (%s)",
                              path, b, (long long)y, (long long)(y + n - 1), gdal_why());
                goto cleanup;
            }
            hsi_progress_update(&prog, (b - 1) * L + y + n);
        }
    }
    hsi_progress_end(&prog);

    hsi_meta *m = &out->meta;
    m->n_bands = B;
    m->n_lines = L;
    m->n_samples = S;
    m->dtype = dt;
    m->interleave = HSI_BSQ;
    m->format = strdup("gdal");
    out->data_path = strdup(path);
    if (!m->format || !out->data_path) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_meta_set(m, "gdal driver", GDALGetDriverShortName(GDALGetDatasetDriver(ds)), 0));
    if (sub) HSI_TRY(hsi_meta_set(m, "gdal subdataset", sub, 0));
    double gt[6];
    if (GDALGetGeoTransform(ds, gt) == CE_None)
        meta_from_geo(m, gt, GDALGetProjectionRef(ds), path);
    int has_nd = 0;
    double nd = GDALGetRasterNoDataValue(b0, &has_nd);
    if (has_nd) {
        m->has_ignore_value = 1;
        m->ignore_value = nd;
    }
    int named = 0;
    for (int b = 1; b <= B; b++) {
        const char *d = GDALGetDescription(GDALGetRasterBand(ds, b));
        if (d && *d) named = 1;
    }
    if (named) {
        m->band_names = calloc((size_t)B, sizeof *m->band_names);
        if (!m->band_names) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int b = 1; b <= B; b++) {
            const char *d = GDALGetDescription(GDALGetRasterBand(ds, b));
            m->band_names[b - 1] = strdup(d ? d : "");
        }
    }
    /* classification: colour table and category names of band 1 */
    GDALColorTableH ct = GDALGetRasterColorTable(b0);
    char **cats = GDALGetRasterCategoryNames(b0);
    if (!CSLCount(cats)) {
        /* no .aux.xml: the names hsi (or anyone) put in the band metadata
         * as CATEGORY_<value> (the TIFF's GDAL_METADATA tag) */
        char **bmd = GDALGetMetadata(b0, NULL);
        int top = -1;
        for (int i = 0; bmd && bmd[i]; i++) {
            int v = -1, used = 0;
            if (sscanf(bmd[i], "CATEGORY_%d=%n", &v, &used) == 1 && used > 0 && v >= 0 && v < 65536 && v > top)
                top = v;
        }
        for (int i = 0; i <= top; i++) {
            char key[32];
            snprintf(key, sizeof key, "CATEGORY_%d", i);
            const char *nm = CSLFetchNameValue(bmd, key);
            own_cats = CSLAddString(own_cats, nm ? nm : "");
        }
        if (own_cats) cats = own_cats;
    }
    int nct = ct ? GDALGetColorEntryCount(ct) : 0, ncat = CSLCount(cats);
    /* GTiff pads colour tables to 256 entries: keep the named ones, or the
     * entries up to the last non-black colour */
    int nc = ncat;
    if (nc == 0 && ct) {
        for (int i = nct - 1; i >= 0 && !nc; i--) {
            const GDALColorEntry *ce = GDALGetColorEntry(ct, i);
            if (ce->c1 || ce->c2 || ce->c3) nc = i + 1;
        }
    }
    if (nc > 65536) nc = 65536;
    if (nc > 0) {
        m->n_classes = nc;
        m->class_names = calloc((size_t)nc, sizeof *m->class_names);
        m->class_lookup = calloc((size_t)nc * 3, 1);
        if (!m->class_names || !m->class_lookup) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int i = 0; i < nc; i++) {
            char dflt[32];
            snprintf(dflt, sizeof dflt, "Class %d", i);
            m->class_names[i] = strdup(i < ncat && cats[i][0] ? cats[i] : dflt);
            if (i < nct) {
                const GDALColorEntry *ce = GDALGetColorEntry(ct, i);
                m->class_lookup[3 * i] = (uint8_t)ce->c1;
                m->class_lookup[3 * i + 1] = (uint8_t)ce->c2;
                m->class_lookup[3 * i + 2] = (uint8_t)ce->c3;
            }
        }
        m->file_kind = HSI_FILE_CLASSIFICATION;
    }
    out->file_size = (int64_t)out->view.buf->size;
cleanup:
    if (ds) GDALClose(ds);
    CSLDestroy(own_cats);
    free(sub);
    quiet_end();
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

/* ---------------------------------------------------------------- writing */

/* Temporaries: the core's atomic file beside the target,
 * "<path>.hsi-tmp-XXXXXX" (core/files.c), that GDAL writes by its name. Its
 * FILE* stays open, without a byte written through it: it holds the lock
 * that marks a live writer (GDAL's own open of the name truncates the same
 * file), so that the temporary is removed on SIGINT/SIGTERM and, when a
 * killed run left it, by the next write to the same target, but never while
 * it is being written. GDAL may write a side-car "<tmp>.aux.xml" (PAM
 * metadata, e.g. category names): it moves with the file; stale side-cars
 * of temporaries that are gone are removed here. */
static hsi_status gdal_tmp_open(hsi_atomic_file *af, const char *path)
{
    hsi_status st = hsi_atomic_open(af, path); /* removes dead writers' temporaries */
    if (st != HSI_OK) return st;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[4200];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + (slash == path)) : 1,
             slash ? path : ".");
    DIR *d = opendir(dir);
    if (!d) return HSI_OK;
    size_t bl = strlen(base);
    struct dirent *e;
    while ((e = readdir(d))) {
        /* "<base>.hsi-tmp-XXXXXX.aux.xml" */
        const char *n = e->d_name;
        size_t nl = strlen(n);
        if (nl != bl + 9 + 6 + 8 || strncmp(n, base, bl) || strncmp(n + bl, ".hsi-tmp-", 9) ||
            strcmp(n + nl - 8, ".aux.xml"))
            continue;
        char side[8400], tmp[8400];
        snprintf(side, sizeof side, "%s/%s", dir, n);
        snprintf(tmp, sizeof tmp, "%.*s", (int)(strlen(side) - 8), side);
        if (access(tmp, F_OK) != 0) unlink(side); /* its temporary is gone: a leftover */
    }
    closedir(d);
    return HSI_OK;
}

/* Moves the temporary (and its side-car, when GDAL wrote one; else a stale
 * side-car of an older file at path is removed, it would lie) into place
 * and forgets it. keep_aux 0: the side-car is dropped (PNG). af is closed
 * either way. */
static hsi_status gdal_tmp_commit(hsi_atomic_file *af, int keep_aux)
{
    hsi_status st = HSI_OK;
    const char *path = af->final_path;
    char a[4200], b[4200];
    int moved_aux = 0;
    snprintf(a, sizeof a, "%s.aux.xml", af->tmp_path);
    snprintf(b, sizeof b, "%s.aux.xml", path);
    /* what GDAL wrote, on disk before it is named (the lock's fd is the same file) */
    if (af->fp && fsync(fileno(af->fp)) != 0 && errno != EINVAL) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot sync the written file: %s", path, strerror(errno));
        goto cleanup;
    }
    if (keep_aux && access(a, F_OK) == 0) {
        moved_aux = 1;
        if (rename(a, b) != 0) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: cannot rename %s into place: %s", b, a,
                          strerror(errno));
            goto cleanup;
        }
    } else {
        unlink(a);
        unlink(b);
    }
    if (hsi_fault_point("rename") || rename(af->tmp_path, path) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot rename the temporary file %s into place: %s", path,
                      af->tmp_path, strerror(errno));
        goto cleanup;
    }
    /* in place: nothing to unlink any more */
    free(af->tmp_path);
    af->tmp_path = NULL;
cleanup:
    if (af->tmp_path) {
        unlink(a);
        if (moved_aux) unlink(b); /* the side-car of a file that did not move */
    }
    hsi_atomic_abort(af);
    return st;
}

/* Removes the temporary and its side-car (a failed write). */
static void gdal_tmp_drop(hsi_atomic_file *af)
{
    if (af->tmp_path) {
        char a[4200];
        snprintf(a, sizeof a, "%s.aux.xml", af->tmp_path);
        unlink(a);
    }
    hsi_atomic_abort(af);
}

static void set_geo(GDALDatasetH ds, const hsi_meta *meta, const char *path)
{
    double gt[6];
    if (meta && hsi_meta_geotransform(meta, gt)) GDALSetGeoTransform(ds, gt);
    else if (meta && meta->map_info.valid) {
        const hsi_map_info *mi = &meta->map_info;
        hsi_warn("%s: written without georeferencing: the map info (pixel size %g x %g, tie "
                 "point (%g, %g) at (%g, %g), rotation %g) gives no finite geotransform",
                 path, mi->x_size, mi->y_size, mi->ref_x, mi->ref_y, mi->easting, mi->northing,
                 mi->rotation);
    }
    char *wkt = NULL;
    if (meta && hsi_meta_crs_wkt(&wkt, meta) == HSI_OK && wkt) GDALSetProjection(ds, wkt);
    free(wkt);
}

/* Writes one band of src ((bands, lines, samples) view) in chunks of lines,
 * converted to dt. */
static hsi_status write_band(GDALRasterBandH band, const hsi_view *src, int64_t b, hsi_dtype dt,
                             const char *path)
{
    hsi_status st = HSI_OK;
    hsi_view sub = {0}, packed = {0};
    int64_t L = src->shape[1], S = src->shape[2];
    int64_t step = (1 << 22) / (S > 0 ? S : 1);
    if (step < 1) step = 1;
    for (int64_t y = 0; y < L; y += step) {
        int64_t n = L - y < step ? L - y : step;
        HSI_TRY(hsi_view_bands(&sub, src, b, 1));
        HSI_TRY(hsi_view_crop(&sub, &sub, y, n, 0, S));
        HSI_TRY(hsi_view_contiguous(&packed, &sub, dt));
        if (GDALRasterIO(band, GF_Write, 0, (int)y, (int)S, (int)n, (uint8_t *)packed.buf->data + packed.offset, (int)S,
                         (int)n, to_gdt(dt), 0, 0) != CE_None) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL write of band %lld failed (%s)", path,
                          (long long)b + 1, gdal_why());
            goto cleanup;
        }
        hsi_view_release(&sub);
        hsi_view_release(&packed);
    }
cleanup:
    hsi_view_release(&sub);
    hsi_view_release(&packed);
    return st;
}

hsi_status hsi_gdal_write_geotiff(const char *path, const hsi_view *cube, const hsi_meta *meta,
                                  hsi_dtype out_dtype)
{
    return hsi_gdal_write_geotiff_co(path, cube, meta, out_dtype, NULL);
}

/* "KEY=VALUE" entries onto opts (replacing a default of the same key);
 * COG=YES/NO is hsi's own (*cog). */
static hsi_status merge_co(char ***opts, const char *const *co, int *cog, const char *path)
{
    for (int i = 0; co && co[i]; i++) {
        const char *eq = strchr(co[i], '=');
        if (!eq || eq == co[i])
            return HSI_FAIL(HSI_ERR_ARG, "%s: creation option '%s' is not KEY=VALUE", path, co[i]);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - co[i]), co[i]);
        if (!strcasecmp(key, "COG")) {
            *cog = !strcasecmp(eq + 1, "YES") || !strcasecmp(eq + 1, "TRUE") || !strcmp(eq + 1, "1");
            continue;
        }
        *opts = CSLSetNameValue(*opts, key, eq + 1);
    }
    return HSI_OK;
}

/* Refuses options the driver does not know or values it rejects (GDAL
 * would only warn, and write something else than asked). */
static hsi_status check_co(GDALDriverH drv, char **opts, const char *path, const char *drv_name)
{
    CPLErrorReset();
    if (GDALValidateCreationOptions(drv, opts)) return HSI_OK;
    return HSI_FAIL(HSI_ERR_ARG, "%s: the %s driver refuses the creation options (%s)", path,
                    drv_name, gdal_why());
}

hsi_status hsi_gdal_write_geotiff_co(const char *path, const hsi_view *cube, const hsi_meta *meta,
                                     hsi_dtype out_dtype, const char *const *co)
{
    hsi_status st = HSI_OK;
    GDALDatasetH ds = NULL, cog_ds = NULL;
    hsi_atomic_file af = {0}, src = {0};
    char **opts = NULL, **cog_opts = NULL;
    int cog = 0;
    if (cube->ndim != 3)
        return HSI_FAIL(HSI_ERR_ARG, "%s: GeoTIFF writer expects a (bands, lines, samples) view, "
                        "got %d dimensions", path, cube->ndim);
    hsi_dtype dt = out_dtype == HSI_DT_INVALID ? cube->dtype : out_dtype;
    if (to_gdt(dt) == GDT_Unknown)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: cannot write %s to GeoTIFF", path,
                        hsi_dtype_name(dt));
    if (hsi_dtype_is_complex(cube->dtype))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: complex cubes are not written to GeoTIFF", path);
    int64_t B = cube->shape[0], L = cube->shape[1], S = cube->shape[2];
    if (B > 65535 || L > INT32_MAX || S > INT32_MAX || B < 1 || L < 1 || S < 1)
        return HSI_FAIL(HSI_ERR_ARG, "%s: cube of %lld x %lld x %lld cannot be a GeoTIFF", path,
                        (long long)B, (long long)L, (long long)S);
    st = need_gdal(path, "writing GeoTIFF");
    if (st != HSI_OK) return st;
    quiet_begin();
    GDALDriverH drv = GDALGetDriverByName("GTiff");
    if (!drv) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "GDAL has no GTiff driver");
        goto cleanup;
    }
    HSI_TRY(gdal_tmp_open(&af, path));
    GDALDriverH cog_drv = NULL;
    {
        /* a COG is a GeoTIFF copied by the COG driver (tiles, overviews,
         * layout): the options are the COG driver's then */
        int want = 0;
        HSI_TRY(merge_co(&cog_opts, co, &want, path));
        cog = want;
        if (cog) {
            if (!(cog_drv = GDALGetDriverByName("COG"))) {
                st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: this GDAL has no COG driver (GDAL >= 3.1)", path);
                goto cleanup;
            }
            if (!CSLFetchNameValue(cog_opts, "COMPRESS")) cog_opts = CSLSetNameValue(cog_opts, "COMPRESS", "DEFLATE");
            if (!CSLFetchNameValue(cog_opts, "BIGTIFF")) cog_opts = CSLSetNameValue(cog_opts, "BIGTIFF", "IF_SAFER");
            HSI_TRY(check_co(cog_drv, cog_opts, path, "COG"));
        }
    }
    opts = CSLSetNameValue(opts, "TILED", "YES");
    opts = CSLSetNameValue(opts, "COMPRESS", "DEFLATE");
    opts = CSLSetNameValue(opts, "INTERLEAVE", "BAND");
    opts = CSLSetNameValue(opts, "BIGTIFF", "IF_SAFER");
    if (!cog) {
        HSI_TRY(merge_co(&opts, co, &cog, path));
        HSI_TRY(check_co(drv, opts, path, "GTiff"));
    }
    /* a COG: the plain GeoTIFF first, beside, under a temporary name */
    const char *target = af.tmp_path;
    if (cog) {
        char sp[4200];
        snprintf(sp, sizeof sp, "%s.src.tif", path);
        HSI_TRY(gdal_tmp_open(&src, sp));
        target = src.tmp_path;
    }
    ds = GDALCreate(drv, target, (int)S, (int)L, (int)B, to_gdt(dt), opts);
    if (!ds) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL cannot create the GeoTIFF (%s)", path, gdal_why());
        goto cleanup;
    }
    set_geo(ds, meta, path);
    for (int64_t b = 0; b < B; b++) {
        GDALRasterBandH band = GDALGetRasterBand(ds, (int)b + 1);
        if (meta && meta->band_names && b < meta->n_bands && meta->band_names[b])
            GDALSetDescription(band, meta->band_names[b]);
        if (meta && meta->wavelength && b < meta->n_bands) {
            char v[64];
            snprintf(v, sizeof v, "%.10g", meta->wavelength[b]);
            GDALSetMetadataItem(band, "wavelength", v, NULL);
            GDALSetMetadataItem(band, "wavelength_units",
                                meta->wavelength_nm ? "nm"
                                : meta->wavelength_units ? meta->wavelength_units
                                                         : "",
                                NULL);
        }
        if (meta && meta->has_ignore_value) GDALSetRasterNoDataValue(band, meta->ignore_value);
        HSI_TRY(write_band(band, cube, b, dt, path));
    }
    if (cog) {
        cog_ds = GDALCreateCopy(cog_drv, af.tmp_path, ds, FALSE, cog_opts, NULL, NULL);
        if (!cog_ds) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL cannot write the COG (%s)", path, gdal_why());
            goto cleanup;
        }
        GDALClose(cog_ds);
        cog_ds = NULL;
    }
    GDALClose(ds);
    ds = NULL;
    if (CPLGetLastErrorType() >= CE_Failure) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL failed while writing (%s)", path, gdal_why());
        goto cleanup;
    }
    st = gdal_tmp_commit(&af, 1);
cleanup:
    if (cog_ds) GDALClose(cog_ds);
    if (ds) GDALClose(ds);
    CSLDestroy(opts);
    CSLDestroy(cog_opts);
    gdal_tmp_drop(&src); /* the COG's source: never kept */
    gdal_tmp_drop(&af);  /* nothing left to drop after a commit */
    quiet_end();
    return st;
}

/* A fixed, distinguishable palette for maps without colours (0 = black). */
static void default_color(int i, uint8_t rgb[3])
{
    static const uint8_t pal[20][3] = {
        {31, 119, 180}, {255, 127, 14}, {44, 160, 44},   {214, 39, 40},   {148, 103, 189},
        {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34},  {23, 190, 207},
        {174, 199, 232}, {255, 187, 120}, {152, 223, 138}, {255, 152, 150}, {197, 176, 213},
        {196, 156, 148}, {247, 182, 210}, {199, 199, 199}, {219, 219, 141}, {158, 218, 229}};
    if (i == 0) {
        rgb[0] = rgb[1] = rgb[2] = 0;
        return;
    }
    memcpy(rgb, pal[(i - 1) % 20], 3);
}

hsi_status hsi_gdal_write_classes(const char *path, const hsi_view *map, int n_classes,
                                  char *const *names, const uint8_t *rgb, const hsi_meta *geo)
{
    hsi_status st = HSI_OK;
    GDALDatasetH ds = NULL;
    GDALColorTableH ct = NULL;
    char **cats = NULL;
    hsi_view m3 = {0};
    hsi_atomic_file af = {0};
    if (map->ndim != 2)
        return HSI_FAIL(HSI_ERR_ARG, "%s: a class map is (lines, samples), got %d dimensions",
                        path, map->ndim);
    double vmax = 0;
    int64_t idx[2];
    for (idx[0] = 0; idx[0] < map->shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < map->shape[1]; idx[1]++) {
            double v = hsi_view_get_f64(map, idx);
            if (!(v >= 0 && v <= 65535) || v != floor(v))
                return HSI_FAIL(HSI_ERR_ARG,
                                "%s: class id %g at line %lld sample %lld is not an integer in "
                                "0..65535",
                                path, v, (long long)idx[0], (long long)idx[1]);
            if (v > vmax) vmax = v;
        }
    int n = (int)vmax + 1 > n_classes ? (int)vmax + 1 : n_classes;
    hsi_dtype dt = n <= 256 ? HSI_U8 : HSI_U16;
    int64_t shape3[3] = {1, map->shape[0], map->shape[1]};
    int64_t strides3[3] = {0, map->strides[0], map->strides[1]};
    st = hsi_view_make(&m3, map->buf, map->offset, map->dtype, 3, shape3, strides3, map->swapped);
    if (st != HSI_OK) return st;
    st = need_gdal(path, "writing a classification GeoTIFF");
    if (st != HSI_OK) {
        hsi_view_release(&m3);
        return st;
    }
    quiet_begin();
    HSI_TRY(gdal_tmp_open(&af, path));
    char **opts = CSLSetNameValue(NULL, "COMPRESS", "DEFLATE");
    ds = GDALCreate(GDALGetDriverByName("GTiff"), af.tmp_path, (int)map->shape[1],
                    (int)map->shape[0], 1, to_gdt(dt), opts);
    CSLDestroy(opts);
    if (!ds) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL cannot create the GeoTIFF (%s)", path, gdal_why());
        goto cleanup;
    }
    set_geo(ds, geo, path);
    GDALRasterBandH band = GDALGetRasterBand(ds, 1);
    ct = GDALCreateColorTable(GPI_RGB);
    for (int i = 0; i < n; i++) {
        uint8_t c[3];
        if (rgb && i < n_classes)
            memcpy(c, rgb + 3 * i, 3);
        else
            default_color(i, c);
        GDALColorEntry ce = {c[0], c[1], c[2], 255};
        GDALSetColorEntry(ct, i, &ce);
        char dflt[32];
        snprintf(dflt, sizeof dflt, i ? "Class %d" : "Unclassified", i);
        const char *name = names && i < n_classes && names[i] ? names[i] : dflt;
        cats = CSLAddString(cats, name);
        /* GDAL's GTiff driver (< 3.12) keeps category names in the .aux.xml
         * only; band metadata goes into the TIFF's own GDAL_METADATA tag,
         * so the names travel with the .tif alone as CATEGORY_<value> */
        char key[32];
        snprintf(key, sizeof key, "CATEGORY_%d", i);
        GDALSetMetadataItem(band, key, name, NULL);
    }
    /* the colour table goes into the TIFF itself (TIFFTAG_COLORMAP) */
    if (dt == HSI_U8) GDALSetRasterColorTable(band, ct);
    GDALSetRasterCategoryNames(band, cats);
    HSI_TRY(write_band(band, &m3, 0, dt, path));
    GDALClose(ds);
    ds = NULL;
    if (CPLGetLastErrorType() >= CE_Failure) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL failed while writing (%s)", path, gdal_why());
        goto cleanup;
    }
    st = gdal_tmp_commit(&af, 1);
cleanup:
    if (ds) GDALClose(ds);
    gdal_tmp_drop(&af);
    if (ct) GDALDestroyColorTable(ct);
    CSLDestroy(cats);
    quiet_end();
    hsi_view_release(&m3);
    return st;
}

hsi_status hsi_gdal_write_png(const char *path, const uint8_t *img, int64_t lines,
                              int64_t samples, int channels)
{
    hsi_status st = HSI_OK;
    GDALDatasetH mem = NULL, png = NULL;
    hsi_atomic_file af = {0};
    if (channels != 1 && channels != 3 && channels != 4)
        return HSI_FAIL(HSI_ERR_ARG, "%s: PNG needs 1, 3 or 4 channels, got %d", path, channels);
    if (lines < 1 || samples < 1 || lines > 1000000 || samples > 1000000)
        return HSI_FAIL(HSI_ERR_ARG, "%s: PNG of %lld x %lld pixels refused", path,
                        (long long)lines, (long long)samples);
    st = need_gdal(path, "writing PNG");
    if (st != HSI_OK) return st;
    quiet_begin();
    GDALDriverH pdrv = GDALGetDriverByName("PNG"), mdrv = GDALGetDriverByName("MEM");
    if (!pdrv || !mdrv) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "GDAL lacks the PNG or MEM driver");
        goto cleanup;
    }
    mem = GDALCreate(mdrv, "", (int)samples, (int)lines, channels, GDT_Byte, NULL);
    if (!mem) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "%s: GDAL MEM dataset failed (%s)", path, gdal_why());
        goto cleanup;
    }
    for (int c = 0; c < channels; c++) {
        GDALRasterBandH band = GDALGetRasterBand(mem, c + 1);
        /* img is (lines, samples, channels): pixel spacing = channels */
        if (GDALRasterIO(band, GF_Write, 0, 0, (int)samples, (int)lines, (void *)(img + c),
                         (int)samples, (int)lines, GDT_Byte, channels,
                         (GSpacing)(samples * channels)) != CE_None) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL MEM write failed (%s)", path, gdal_why());
            goto cleanup;
        }
        if (channels >= 3)
            GDALSetRasterColorInterpretation(band, c == 0   ? GCI_RedBand
                                                   : c == 1 ? GCI_GreenBand
                                                   : c == 2 ? GCI_BlueBand
                                                            : GCI_AlphaBand);
    }
    HSI_TRY(gdal_tmp_open(&af, path));
    png = GDALCreateCopy(pdrv, af.tmp_path, mem, FALSE, NULL, NULL, NULL);
    if (!png) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: GDAL PNG write failed (%s)", path, gdal_why());
        goto cleanup;
    }
    GDALClose(png);
    png = NULL;
    /* PNG has no room for PAM metadata we care about: no side-car */
    st = gdal_tmp_commit(&af, 0);
cleanup:
    if (png) GDALClose(png);
    gdal_tmp_drop(&af);
    if (mem) GDALClose(mem);
    quiet_end();
    return st;
}
