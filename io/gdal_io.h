/* gdal_io.h — GDAL bridge: read any raster GDAL opens into a (band, line,
 * sample) host view (block by block), write GeoTIFF (data cubes and
 * classification maps with colour table and category names) georeferenced
 * from hsi_meta (ENVI map info / coordinate system string), write PNG.
 * Not a zero-copy reader: GDAL formats are read into a host buffer.
 * libgdal is not linked: the first call that needs it dlopens it (once, thread
 * safe). hsi_meta_geotransform never does, hsi_meta_crs_wkt only for a meta
 * with a coordinate system or map info. When it cannot be loaded, those calls
 * return HSI_ERR_UNSUPPORTED naming the library and the dlerror() text. */
#ifndef HSI_GDAL_IO_H
#define HSI_GDAL_IO_H

#include "core/core.h"
#include "cube.h"
#include "meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens a raster: out->view is a packed (bands, lines, samples) host view.
 * Files with subdatasets (HDF5, NetCDF) need var = the subdataset name, its
 * 1-based index, or NULL when there is exactly one (else the error lists
 * them). Georeferencing goes into meta.map_info / meta.coordinate_system
 * (+ verbatim "geotransform"), nodata into ignore value, band descriptions
 * into band names, a colour table / category names into class_names /
 * class_lookup (category names from the .aux.xml, or, without one, from
 * band 1's metadata items CATEGORY_<value> as hsi_gdal_write_classes
 * writes them). meta.format = "gdal", verbatim key "gdal driver". */
hsi_status hsi_gdal_open(hsi_cube *out, const char *path, const char *var);

/* GDAL geotransform from ENVI map info (tie point, pixel size, rotation).
 * Returns 1 when meta has usable map info, else 0. */
int hsi_meta_geotransform(const hsi_meta *m, double gt[6]);
/* The EPSG code of an ENVI map info that names one without doubt (UTM on
 * WGS-84: 326zz/327zz; UTM on NAD83, north: 269zz; geographic WGS-84: 4326);
 * 0 otherwise (the CRS may still be known, as WKT). Never loads GDAL. */
int hsi_meta_epsg(const hsi_meta *m);
/* CRS as OGC WKT from coordinate_system (ESRI WKT) or, failing that, from a
 * UTM / Geographic map info. *wkt is malloc'd, NULL when unknown. */
hsi_status hsi_meta_crs_wkt(char **wkt, const hsi_meta *m);

/* Writes cube (bands, lines, samples; any strides/dtype/byte order) as a
 * GeoTIFF of out_dtype (HSI_DT_INVALID = the view's dtype; complex is
 * refused), tiled and deflate-compressed, with geotransform/CRS from meta
 * (may be NULL), band names and wavelengths as band descriptions/metadata,
 * and nodata from the ignore value. Written to a temporary name and renamed. */
hsi_status hsi_gdal_write_geotiff(const char *path, const hsi_view *cube, const hsi_meta *meta,
                                  hsi_dtype out_dtype);
/* The same with GDAL creation options co (NULL-terminated "KEY=VALUE", as
 * gdal_translate -co; may be NULL): they replace the defaults above (e.g.
 * COMPRESS=ZSTD, PREDICTOR=2, BLOCKXSIZE=512); options or values the driver
 * does not accept are refused. COG=YES writes a Cloud Optimized GeoTIFF
 * through GDAL's COG driver, the other options then being the COG
 * driver's (COMPRESS, BLOCKSIZE, OVERVIEWS...). */
hsi_status hsi_gdal_write_geotiff_co(const char *path, const hsi_view *cube, const hsi_meta *meta,
                                     hsi_dtype out_dtype, const char *const *co);

/* Writes a classification map: map is (lines, samples), integer values in
 * 0..65535 (uint8 file when all < 256, else uint16); n_classes names (may be
 * NULL or have NULL entries) and colours rgb[3 * n_classes] (may be NULL: a
 * default palette) become the band's category names and colour table.
 * The colour table is in the TIFF (TIFFTAG_COLORMAP, uint8 maps); the
 * names are in the TIFF too, as band metadata CATEGORY_0..CATEGORY_<n-1>
 * in GDAL's GDAL_METADATA tag (GDAL and rasterio read them as band
 * tags), besides GDAL's category names in the .aux.xml side-car. */
hsi_status hsi_gdal_write_classes(const char *path, const hsi_view *map, int n_classes,
                                  char *const *names, const uint8_t *rgb, const hsi_meta *geo);

/* Writes an 8-bit PNG. img: (lines, samples, channels) packed uint8,
 * channels 1 (grey), 3 (RGB) or 4 (RGBA). */
hsi_status hsi_gdal_write_png(const char *path, const uint8_t *img, int64_t lines,
                              int64_t samples, int channels);

#ifdef __cplusplus
}
#endif
#endif
