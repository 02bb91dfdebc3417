/* normalize.h — normalisation modes (per-band z-score, per-band min-max,
 * global min-max, per-pixel L2) with ENVI gain/offset and reflectance
 * scale, as one per-band affine map from raw values (+ optional L2), and
 * the unfused reference pass that writes a float32 cube. Takes views; knows
 * nothing about files. */
#ifndef HSI_NORMALIZE_H
#define HSI_NORMALIZE_H

#include <stdint.h>

#include "core/core.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hsi_norm_mode {
    HSI_NORM_NONE = 0,          /* calibration only */
    HSI_NORM_ZSCORE = 1,        /* per band (x - mean) / std (population std) */
    HSI_NORM_MINMAX = 2,        /* per band (x - min) / (max - min) */
    HSI_NORM_GLOBAL_MINMAX = 3, /* (x - min_all) / (max_all - min_all) over the selected bands */
    HSI_NORM_L2 = 4             /* each spectrum divided by its Euclidean norm */
} hsi_norm_mode;

const char *hsi_norm_mode_name(hsi_norm_mode m); /* "zscore", ... */
hsi_status hsi_norm_mode_parse(hsi_norm_mode *out, const char *s);

/* Calibration from the header: physical = (gain[b] * raw + offset[b]) / refl_scale.
 * All arrays have one entry per band of the cube (not of the selection). */
typedef struct hsi_calib {
    const double *gain;   /* NULL = 1 */
    const double *offset; /* NULL = 0 */
    double refl_scale;    /* 0 = none (same as 1) */
} hsi_calib;

/* The map from raw cube bands to output features j = 0..n_bands-1:
 *   y[j] = scale[j] * (raw[bands[j]] - center[j]) + offset[j]
 * raw equal to the ignore value, or NaN, is first replaced by fill[j] (the
 * raw mean of that band: mean imputation); with l2 each spectrum y is then
 * divided by its Euclidean norm (zero spectra stay zero). Owns its arrays. */
typedef struct hsi_norm {
    hsi_norm_mode mode;
    int64_t n_cube_bands; /* bands of the cube it applies to */
    int64_t n_bands;      /* selected bands = output features */
    int64_t *bands;       /* (n_bands) 0-based cube band indices */
    double *scale, *center, *offset, *fill; /* (n_bands) each */
    int l2;
    int has_ignore;
    double ignore_value;
} hsi_norm;

/* Builds the map. bands: (n_bands) 0-based indices into the cube (NULL =
 * all n_cube_bands). raw: statistics of the raw cube over all its bands
 * (hsi_stats_compute on the same pixels you fit on; may be NULL for
 * HSI_NORM_NONE and HSI_NORM_L2, then fill is 0). calib may be NULL.
 * Constant bands (std or range 0) map to 0 under zscore/minmax. */
hsi_status hsi_norm_build(hsi_norm *out, hsi_norm_mode mode, int64_t n_cube_bands,
                          const int64_t *bands, int64_t n_bands, const hsi_stats *raw,
                          const hsi_calib *calib, int has_ignore, double ignore_value);
/* Identity over all bands (raw values, no fill). */
hsi_status hsi_norm_identity(hsi_norm *out, int64_t n_cube_bands);
hsi_status hsi_norm_copy(hsi_norm *out, const hsi_norm *in);
void hsi_norm_free(hsi_norm *n);

/* Unfused reference pass, one thread, in double, rounded to float at the end:
 * out: (n_bands, lines, samples) float32 host view, any strides;
 * cube: (band, line, sample) view of any real dtype, strides, byte order. */
hsi_status hsi_normalize_cpu(hsi_view *out, const hsi_view *cube, const hsi_norm *norm);

#ifdef __cplusplus
}
#endif
#endif
