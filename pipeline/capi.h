/* capi.h — the C API for foreign callers (the Python package, ctypes, cffi,
 * Julia, ...): opaque handles with accessors, no struct layout in the
 * contract, plain C types only (char *, int, int64_t, double, pointers to
 * caller-owned arrays). Every fallible call returns hsi_status (0 = ok) and
 * leaves the reason in hsi_last_error(). Strings the library returns as
 * `char **` are malloc'd: free them with hsi_string_free. Handles are safe
 * to read from several threads; a handle is freed once, by its owner.
 * The structs behind the handles (io/cube.h, pipeline/preprocess.h,
 * pipeline/run.h) are the C programmer's API; this one stays stable
 * across their changes (hsi_abi_version). */
#ifndef HSI_CAPI_H
#define HSI_CAPI_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ versions */

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *hsi_version(void);
/* The version of this API; bumped when a signature or meaning changes. */
#define HSI_ABI_VERSION 1
int hsi_abi_version(void);

void hsi_string_free(char *s); /* NULL is fine */

/* Also part of this API, from core/core.h: hsi_last_error() (this thread's
 * last failure message), hsi_set_quiet(1) (no warnings or progress bars on
 * stderr). */

/* --------------------------------------------------------------- cubes */

typedef struct hsi_hcube hsi_hcube;

/* Opens any cube hsi reads (ENVI, SPE, .mat, GDAL). var: .mat variable or
 * GDAL subdataset, NULL = choose. Raw formats stay mapped: the data are
 * not read. */
hsi_status hsi_hcube_open(hsi_hcube **out, const char *path, const char *var);

/* A cube over memory the caller owns and keeps alive for the handle's life
 * (a numpy array): dtype a numpy name ("uint16", "float32", ...); shape and
 * byte strides of the (band, line, sample) axes; swapped = 1 when the
 * elements are in the non-native byte order. No header: meta is empty. */
hsi_status hsi_hcube_wrap(hsi_hcube **out, void *data, const char *dtype, const int64_t shape[3],
                          const int64_t strides[3], int swapped);

void hsi_hcube_free(hsi_hcube *c); /* NULL is fine */

/* (band, line, sample) shape and byte strides of the view. */
void hsi_hcube_shape(const hsi_hcube *c, int64_t shape[3]);
void hsi_hcube_strides(const hsi_hcube *c, int64_t strides[3]);
/* The numpy name of the element type ("uint16"; "complex64" for ENVI 6). */
const char *hsi_hcube_dtype(const hsi_hcube *c);
/* 1 when the elements are stored in the non-native byte order. */
int hsi_hcube_swapped(const hsi_hcube *c);
/* Address of element (0, 0, 0), and the bytes of the whole mapping or
 * buffer it lies in (for checks that a view is zero-copy). Read-only. */
const void *hsi_hcube_data(const hsi_hcube *c);
const void *hsi_hcube_buffer(const hsi_hcube *c, size_t *size);
/* "bsq", "bil" or "bip" as stored (what the strides say for other formats). */
const char *hsi_hcube_interleave(const hsi_hcube *c);
/* The reader that opened it: "envi", "spe", "mat", "gdal", "memory". */
const char *hsi_hcube_format(const hsi_hcube *c);
/* Paths of the header and data file ("" when there is none). */
const char *hsi_hcube_header_path(const hsi_hcube *c);
const char *hsi_hcube_data_path(const hsi_hcube *c);

/* Every header key in file order, verbatim: key i and its value text
 * (braces removed); NULL past the end. */
int hsi_hcube_meta_count(const hsi_hcube *c);
const char *hsi_hcube_meta_key(const hsi_hcube *c, int i);
const char *hsi_hcube_meta_value(const hsi_hcube *c, int i);
/* The value of a key (any letter case), NULL when absent. */
const char *hsi_hcube_meta_get(const hsi_hcube *c, const char *key);

/* Typed fields. Arrays have one entry per band, or are NULL when the
 * header has none; they live as long as the handle. */
const double *hsi_hcube_wavelengths(const hsi_hcube *c); /* nm when the units were known */
int hsi_hcube_wavelengths_nm(const hsi_hcube *c);        /* 1: the above are nanometres */
const double *hsi_hcube_fwhm(const hsi_hcube *c);
const int *hsi_hcube_bbl(const hsi_hcube *c);            /* 1 good, 0 bad */
const char *hsi_hcube_band_name(const hsi_hcube *c, int64_t band); /* NULL when none */
/* The data ignore value: 1 and *value when the header has one. */
int hsi_hcube_ignore_value(const hsi_hcube *c, double *value);
/* The GDAL geotransform of the map info: 1 when georeferenced. */
int hsi_hcube_geotransform(const hsi_hcube *c, double gt[6]);
/* The coordinate system as WKT (malloc'd, hsi_string_free), or *wkt =
 * NULL when the cube has none. */
hsi_status hsi_hcube_crs_wkt(const hsi_hcube *c, char **wkt);
/* Classification files: class count, and name / RGB colour of class k. */
int hsi_hcube_n_classes(const hsi_hcube *c);
const char *hsi_hcube_class_name(const hsi_hcube *c, int k);
int hsi_hcube_class_color(const hsi_hcube *c, int k, uint8_t rgb[3]); /* 1 when known */
/* Warnings the reader issued (not fatal), NULL past the end. */
const char *hsi_hcube_warning(const hsi_hcube *c, int i);

/* ---------------------------------------------------------- statistics */

/* Per-band statistics over the pixels whose mask value is nonzero (mask:
 * (lines * samples) uint8, line-major, or NULL = every pixel), skipping
 * the ignore value and NaN. Each output array has n_bands entries,
 * caller-allocated; count may be NULL. */
hsi_status hsi_hcube_stats(const hsi_hcube *c, const uint8_t *mask, double *mean, double *std,
                           double *min, double *max, int64_t *count);

/* ------------------------------------------------------ writing cubes */

/* Writes c as an ENVI cube (atomically): interleave "bsq"/"bil"/"bip"
 * (NULL = bsq), dtype a numpy name (NULL = as c); header keys from
 * keys/values (n pairs, values as they would appear in a header, braces
 * optional), e.g. {"wavelength", "{400, 410, 420}"}; "byte order" ("0"
 * little-endian, the default, or "1" big-endian) chooses the file's byte
 * order; the other keys hsi sets itself (samples, lines, bands, data type,
 * interleave, header offset) are ignored. */
hsi_status hsi_hcube_write_envi(const hsi_hcube *c, const char *hdr_path, const char *interleave,
                                const char *dtype, const char *const *keys,
                                const char *const *values, int n);

/* ------------------------------------------------------- preprocessing */

typedef struct hsi_hprep hsi_hprep;

/* Fits band selection, normalisation and PCA (pipeline/preprocess.h) on
 * the pixels of mask ((lines * samples) uint8 or NULL = all). bands:
 * "1-20,35" (1-based) or NULL; wavelengths: "400-1340,1450-1800" nm or
 * NULL; normalize: none, zscore, minmax, global-minmax, l2 (NULL = zscore);
 * pca > 0 components, or pca_variance in (0, 1] (0 and 0 = no PCA). */
hsi_status hsi_hprep_fit(hsi_hprep **out, const hsi_hcube *c, const uint8_t *mask,
                         const char *bands, const char *wavelengths, int drop_bbl,
                         const char *normalize, int64_t pca, double pca_variance, int whiten);
/* Loads a preprocessing file (preprocessing.safetensors, `hsi preprocess
 * --save-model`, `hsi pca fit`, or an older hsi's pca.bin). */
hsi_status hsi_hprep_load(hsi_hprep **out, const char *path);
hsi_status hsi_hprep_save(const hsi_hprep *p, const char *path);
void hsi_hprep_free(hsi_hprep *p);

int64_t hsi_hprep_n_out(const hsi_hprep *p);      /* output features */
int64_t hsi_hprep_n_in(const hsi_hprep *p);       /* cube bands it applies to */
int64_t hsi_hprep_n_bands(const hsi_hprep *p);    /* selected bands */
const int64_t *hsi_hprep_bands(const hsi_hprep *p); /* (n_bands) 0-based */
const char *hsi_hprep_normalize(const hsi_hprep *p); /* "zscore", ... */
int hsi_hprep_whiten(const hsi_hprep *p);            /* 1: PCA scores whitened */
/* PCA only (NULL otherwise): (n_out, n_bands) components row-major, (n_bands)
 * mean, (n_out) explained variance and its ratio. */
const double *hsi_hprep_components(const hsi_hprep *p);
const double *hsi_hprep_mean(const hsi_hprep *p);
const double *hsi_hprep_explained_variance(const hsi_hprep *p);
const double *hsi_hprep_explained_variance_ratio(const hsi_hprep *p);

/* The fused pass: out is a caller-allocated packed (n_out, lines, samples)
 * float32 array. */
hsi_status hsi_hprep_transform(const hsi_hprep *p, const hsi_hcube *c, float *out);

/* ------------------------------------------------------------ training */

/* Progress of a training run: kind 0 a line or table of text, 1 an epoch
 * ended (epoch of epochs, loss, train_acc (NaN on the GPU), val_oa (NaN
 * without validation), lr), 2 the test metrics table. Return nonzero to
 * stop after this epoch (the run still writes every file). */
typedef int (*hsi_progress_fn)(void *ctx, int kind, const char *text, int epoch, int epochs,
                               double loss, double train_acc, double val_oa, double lr);

/* Trains like `hsi train CUBE LABELS --out OUT`. options_json: a JSON
 * object of settings named as the CLI's options without dashes ("model",
 * "epochs", "batch", "lr", "pca", "patch", "train", "per_class", "val",
 * "split", "seed", "normalize", "bands", "wavelengths", "keep_bad_bands",
 * "fit_on", "patience", "weight_decay", "schedule", "augment", "workers",
 * "prefetch", "threads", "device", "conv", "cuda_graph", "host_patches", "resume", "overwrite", "var", "labels_var",
 * "train_labels", "test_labels", "pad", "block", "whiten", "pca_variance"), NULL = the
 * defaults; an unknown key is an error naming it. *metrics_json (may be
 * NULL): the test metrics as metrics.json holds them. */
hsi_status hsi_train_json(const char *cube_path, const char *labels_path, const char *out_dir,
                          const char *options_json, hsi_progress_fn progress, void *ctx,
                          char **metrics_json);

/* ------------------------------------------------------ run directories */

typedef struct hsi_hrun hsi_hrun;

hsi_status hsi_hrun_load(hsi_hrun **out, const char *dir);
void hsi_hrun_free(hsi_hrun *r);

const char *hsi_hrun_model(const hsi_hrun *r); /* "cnn2d" */
int hsi_hrun_patch(const hsi_hrun *r);
int hsi_hrun_n_features(const hsi_hrun *r);
int hsi_hrun_n_classes(const hsi_hrun *r);
int64_t hsi_hrun_class_label(const hsi_hrun *r, int k); /* label value of class index k */
const char *hsi_hrun_class_name(const hsi_hrun *r, int k);
/* The preprocessing of the run (owned by the run: do not free). */
const hsi_hprep *hsi_hrun_prep(const hsi_hrun *r);
/* 1 when the run holds its split (split.hdr); roles: caller-allocated
 * (lines * samples) uint8, 0 unused, 1 train, 2 validation, 3 test. */
int hsi_hrun_has_split(const hsi_hrun *r);
/* The split's (lines, samples): 1 when the run holds one. */
int hsi_hrun_split_shape(const hsi_hrun *r, int64_t *n_lines, int64_t *n_samples);
hsi_status hsi_hrun_roles(const hsi_hrun *r, uint8_t *roles, int64_t n_lines, int64_t n_samples);

/* Predicts every pixel of c: map is a caller-allocated (lines, samples)
 * int32 array of label values. batch <= 0: 256. */
hsi_status hsi_hrun_predict(const hsi_hrun *r, const hsi_hcube *c, int32_t *map, int batch);

/* Scores map against labels (both (lines, samples) int32 label values, 0 =
 * unlabelled) on "test" (the run's split), "all" or "train" pixels;
 * *metrics_json: OA, AA, kappa, per class, confusion (metrics.json's form,
 * plus "on" and "n_unknown"). */
hsi_status hsi_hrun_evaluate(const hsi_hrun *r, const int32_t *map, const int32_t *labels,
                             int64_t n_lines, int64_t n_samples, const char *on,
                             char **metrics_json);

#ifdef __cplusplus
}
#endif
#endif
