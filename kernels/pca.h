/* pca.h — principal component analysis of a cube's spectra on the CPU:
 * covariance by OpenBLAS ssyrk over shifted pixel blocks (each block's
 * product summed in double, per thread, merged in double), eigenpairs by LAPACKE_dsyevr, components by count or variance
 * fraction, whitening, a deterministic sign, pixel masks, save/load and the
 * (reference) forward and inverse transforms. The fast transform of a whole
 * raw cube is the fused pass (fused.h). Takes views; reads no cube files. */
#ifndef HSI_PCA_H
#define HSI_PCA_H

#include <stdint.h>

#include "core/core.h"
#include "normalize.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sign convention: in each component the loading with the largest absolute
 * value is positive (the first one on a tie). */
typedef struct hsi_pca {
    hsi_norm norm;          /* raw cube bands -> features (selection + normalisation) */
    int64_t n_features;     /* = norm.n_bands */
    int64_t n_components;
    int64_t n_samples;      /* pixels the fit used */
    int whiten;             /* transform divides by sqrt(explained_variance) */
    double *mean;           /* (n_features) feature means */
    double *components;     /* (n_components, n_features) row-major, like sklearn's components_ */
    double *explained_variance;       /* (n_components) eigenvalues, ddof = 1 (sklearn) */
    double *explained_variance_ratio; /* (n_components) */
    double total_variance;  /* trace of the covariance (ddof = 1) */
} hsi_pca;

typedef struct hsi_pca_opts {
    int64_t n_components;     /* > 0: keep this many */
    double variance_fraction; /* used when n_components == 0: smallest k whose cumulative
                                 ratio exceeds it (sklearn's rule); 0 = keep all */
    int whiten;
    const hsi_view *mask;     /* (lines, samples) any real dtype, nonzero = fit on the pixel */
    int64_t tile_lines;       /* 0 = 64 */
    int n_threads;            /* 0 = hsi_threads() */
    const char *progress_label;
    const hsi_pass_split *split; /* NULL = one process (stats.h) */
    hsi_device device;        /* where hsi_covariance (and so hsi_pca_fit) runs a host cube
                                 (core.h's rule; a device cube goes to the GPU) */
} hsi_pca_opts;

/* Mean and covariance (ddof = 1) of the features norm makes from cube
 * pixels (those in mask when given). mean: (n_features); cov: (n_features,
 * n_features) row-major, full symmetric. norm NULL = raw values of all bands. */
hsi_status hsi_covariance(double *mean, double *cov, int64_t *n_used, const hsi_view *cube,
                          const hsi_norm *norm, const hsi_pca_opts *opts);

/* One read of the cube for two results: stats of every cube band, as
 * hsi_stats_compute(stats, cube, opts) gives them (bit for bit while the
 * covariance leaves the chunk count at its default: up to 362 bands, see
 * hsi_kern_stats_chunks; to rounding beyond), and the
 * mean and covariance (as hsi_covariance with the identity map over bands,
 * n_bands of them; NULL = all) of the raw values over the same pixels
 * (opts->mask), gathered tile by tile while the statistics pass has the
 * lines in cache. No ignore value and no histogram (the covariance cannot
 * skip what the statistics skip); NaN elements are not skipped by the
 * covariance, so a band whose count is below n_used has them. */
hsi_status hsi_stats_covariance(hsi_stats *stats, double *mean, double *cov, int64_t *n_used,
                                const hsi_view *cube, const int64_t *bands, int64_t n_bands,
                                const hsi_stats_opts *opts);

/* Fits on cube (band, line, sample), any dtype/strides/byte order.
 * norm NULL = raw values of all bands (copied into out->norm). */
hsi_status hsi_pca_fit(hsi_pca *out, const hsi_view *cube, const hsi_norm *norm,
                       const hsi_pca_opts *opts);
/* Same from a precomputed mean/covariance (n_samples pixels). */
hsi_status hsi_pca_fit_cov(hsi_pca *out, const double *mean, const double *cov, int64_t n_samples,
                           const hsi_norm *norm, const hsi_pca_opts *opts);
void hsi_pca_free(hsi_pca *p);

/* Reference transforms over feature cubes (double loops, one thread):
 * scores: (n_components, lines, samples) float32 view, any strides;
 * features: (n_features, lines, samples) view, any real dtype. */
hsi_status hsi_pca_transform_features(hsi_view *scores, const hsi_view *features, const hsi_pca *p);
/* features: (n_features, lines, samples) float32 out; scores: (k', lines,
 * samples) any real dtype with k' <= n_components (missing ones taken as 0). */
hsi_status hsi_pca_inverse(hsi_view *features, const hsi_view *scores, const hsi_pca *p);

/* Model file: little-endian binary "HSIPCA1", the norm and the PCA arrays;
 * written atomically. Loading checks magic, version, sizes and file length. */
hsi_status hsi_pca_save(const hsi_pca *p, const char *path);
hsi_status hsi_pca_load(hsi_pca *out, const char *path);
/* Parses a model from memory (what hsi_pca_load uses; fuzzable). */
hsi_status hsi_pca_parse(hsi_pca *out, const void *data, size_t size, const char *name);

#ifdef __cplusplus
}
#endif
#endif
