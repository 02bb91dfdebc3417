/* run_internal.h — what run.c and trainer.c share and nothing else needs:
 * paths inside a run directory, JSON and class-map writers, the model file
 * with its metadata. Not installed. */
#ifndef HSI_RUN_INTERNAL_H
#define HSI_RUN_INTERNAL_H

#include "pipeline/run.h"

/* Version of pipeline.json written (1: the normalisation in the JSON and
 * the PCA in the private pca.bin; 2: preprocessing.safetensors, split.hdr,
 * model metadata). */
#define HSI_RUN_VERSION 2

/* dir/name, malloc'd; NULL (with the error set) when out of memory. */
char *hsi_run_path(const char *dir, const char *name);

/* Writes j as indented JSON, atomically. */
hsi_status hsi_run_save_json(const char *path, const struct cJSON *j);

/* An ENVI classification file: classes (1, lines, samples) u8/u16, names
 * and rgb (n_classes each; NULL entries get "Class k"), georeferencing
 * from geo (may be NULL). */
hsi_status hsi_write_class_envi(const char *path, const hsi_view *classes, int n_classes,
                                char *const *names, const uint8_t *rgb, const hsi_meta *geo,
                                const char *description);

/* model.safetensors with the architecture, input shape, classes, class
 * names and label values in its __metadata__. */
hsi_status hsi_run_save_model(const hsi_run *r, const char *path);

#endif
