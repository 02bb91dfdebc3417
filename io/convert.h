/* convert.h — a cube rewritten in another layout, type, byte order or band
 * subset (`hsi convert`): ENVI streamed in line tiles (memory bounded by
 * the tile whatever the size, and shared by the ranks of an MPI job), or
 * GeoTIFF through GDAL. */
#ifndef HSI_CONVERT_H
#define HSI_CONVERT_H

#include "io/cube.h"
#include "io/envi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bands sel[0..n_sel) (0-based, any order) of c to the ENVI pair at
 * out_hdr with storage o (dtype HSI_DT_INVALID: the cube's); the header
 * keeps c's metadata for those bands. across_ranks: every rank of the job
 * (core/dist.h) calls it and copies its share of the lines into the one
 * output (hsi_envi_write_shared); the bytes are those of one process.
 * progress: a progress bar on rank 0. */
hsi_status hsi_convert_envi(const char *out_hdr, const hsi_cube *c, const int64_t *sel, int64_t n_sel,
                            const hsi_envi_write_options *o, int across_ranks, int progress);

/* The same bands to a GeoTIFF (hsi_gdal_write_geotiff_co: dtype
 * HSI_DT_INVALID keeps the cube's, co the creation options or NULL). The
 * selected bands are gathered in memory first (GDAL writes the file). */
hsi_status hsi_convert_geotiff(const char *out_tif, const hsi_cube *c, const int64_t *sel,
                               int64_t n_sel, hsi_dtype dtype, const char *const *co);

#ifdef __cplusplus
}
#endif
#endif
