/* cube.h — hsi_cube: an opened cube (a view over its data plus its metadata)
 * and hsi_cube_open, which picks the reader by looking at the file's content
 * (ENVI header, Princeton SPE, MATLAB .mat, anything GDAL reads). */
#ifndef HSI_CUBE_H
#define HSI_CUBE_H

#include "core/core.h"
#include "meta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_cube {
    hsi_view view;     /* (band, line, sample); zero-copy over a mapping for raw formats */
    hsi_meta meta;     /* what the header said; meta.format names the reader */
    char *header_path; /* NULL when the format has no separate header */
    char *data_path;
    int64_t file_size; /* bytes of the data file */
    /* formats with several images (SPE ROIs, .mat variables): how many, and
     * which one this cube is (0-based) */
    int n_images, image_index;
} hsi_cube;

void hsi_cube_init(hsi_cube *c);
void hsi_cube_free(hsi_cube *c);

/* Opens any supported cube by content. `options` may be NULL. */
typedef struct hsi_open_options {
    const char *var; /* .mat variable / GDAL subdataset; NULL = choose */
    int image;       /* ROI / image index, default 0 */
} hsi_open_options;
hsi_status hsi_cube_open(hsi_cube *out, const char *path, const hsi_open_options *options);

#ifdef __cplusplus
}
#endif
#endif
