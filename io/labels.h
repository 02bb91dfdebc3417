/* labels.h — hsi_labels: a ground-truth / classification map with class ids
 * (0 = unlabelled), names and colours when the file knows them, and
 * per-class pixel counts. Read from ENVI classification (or any one-band
 * integer raw + header), GeoTIFF (colour table, category names), and .mat.
 * Not a splitter or sampler (pipeline/ does that). */
#ifndef HSI_LABELS_H
#define HSI_LABELS_H

#include "core/core.h"
#include "meta.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_LABELS_MAX_CLASS 65535

typedef struct hsi_labels {
    hsi_view map;     /* (lines, samples) packed host int32; 0 = unlabelled */
    int n_classes;    /* highest id present or named, + 1 (ids 0..n_classes-1) */
    int64_t *counts;  /* n_classes: pixels per id (counts[0] = unlabelled) */
    char **names;     /* n_classes, entries may be NULL; NULL when none known */
    uint8_t *colors;  /* 3 * n_classes (r, g, b) or NULL */
    hsi_meta meta;    /* geometry + georeferencing of the source */
    char *source;     /* path, and ":var" for .mat */
} hsi_labels;

void hsi_labels_init(hsi_labels *l);
void hsi_labels_free(hsi_labels *l);

/* Opens a label map from any supported file. var: .mat variable / GDAL
 * subdataset (NULL = choose). Values must be integers in 0..65535;
 * a float map is accepted when every value is integral. */
hsi_status hsi_labels_open(hsi_labels *out, const char *path, const char *var);

/* Builds labels from a (lines, samples) view (any dtype/strides); names and
 * colours are copied from meta's class fields when meta != NULL. */
hsi_status hsi_labels_from_view(hsi_labels *out, const hsi_view *map, const hsi_meta *meta);

/* Number of labelled pixels (id > 0). */
int64_t hsi_labels_n_labelled(const hsi_labels *l);

#ifdef __cplusplus
}
#endif
#endif
