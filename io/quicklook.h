/* quicklook.h — pictures for people: a false-colour PNG of three bands of a
 * cube with a per-channel percent stretch, and a label map drawn with class
 * colours and a legend (colour, id, name, pixel count). Not a plotting
 * library: the legend's text is drawn by cairo (plot.h, DejaVu Sans, UTF-8
 * names); pictures without a legend go out through GDAL. */
#ifndef HSI_IO_QUICKLOOK_H
#define HSI_IO_QUICKLOOK_H

#include "core/core.h"
#include "labels.h"
#include "meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cube: (bands, lines, samples) view, any dtype/strides/byte order.
 * band[3]: 0-based band for R, G, B. pct: stretch between the pct and
 * 100-pct percentiles of each channel (0 = min..max); NaN/Inf and meta's
 * ignore value (meta may be NULL) are left out of the percentiles and drawn
 * black. Writes an RGB PNG of lines x samples. */
hsi_status hsi_quicklook_rgb_png(const char *path, const hsi_view *cube, const int64_t band[3],
                                 double pct, const hsi_meta *meta);

/* map: (lines, samples) integer view of class ids (0 = unlabelled, drawn
 * black), any strides. n_classes: entries in names/rgb (ids may exceed it:
 * a fixed palette and "class N" are used). names/rgb may be NULL. Writes an
 * RGB PNG: the map, then (legend != 0) a white panel to the right listing
 * each class present with its colour, id, name and pixel count. The map's
 * pixels are the class colours exactly (nearest-neighbour, no blending);
 * the text grows with the map (13 px up to 416 lines, then lines/32, at most
 * 40), the entries in as many columns as keep the panel about as tall as
 * the map (at least 400 px); when the panel is the taller, the picture is
 * as tall as it and white under the map. With a legend each side is at
 * most 32767 pixels. */
hsi_status hsi_quicklook_labels_png_legend(const char *path, const hsi_view *map, int n_classes,
                                           const char *const *names, const uint8_t *rgb,
                                           int legend);
/* The same with a legend. */
hsi_status hsi_quicklook_labels_png(const char *path, const hsi_view *map, int n_classes,
                                    const char *const *names, const uint8_t *rgb);

/* A label map with its names and colours (legend != 0: with legend). */
hsi_status hsi_quicklook_labels(const char *path, const hsi_labels *l, int legend);

/* The same, the picture width pixels wide (0: the cube's own width), the
 * aspect kept, nearest-neighbour (a zoom of K is width = K x samples; a
 * width below the cube's shrinks it). Label pixel counts in the legend stay
 * the file's. */
hsi_status hsi_quicklook_rgb_png_sized(const char *path, const hsi_view *cube, const int64_t band[3],
                                       double pct, const hsi_meta *meta, int64_t width);
hsi_status hsi_quicklook_labels_png_sized(const char *path, const hsi_view *map, int n_classes,
                                          const char *const *names, const uint8_t *rgb,
                                          int legend, int64_t width);
hsi_status hsi_quicklook_labels_sized(const char *path, const hsi_labels *l, int legend,
                                      int64_t width);

/* The colour of class id in the fixed palette used when a file has none
 * (0 = black). */
void hsi_quicklook_palette(int id, uint8_t rgb[3]);

#ifdef __cplusplus
}
#endif
#endif
