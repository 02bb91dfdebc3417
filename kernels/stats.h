/* stats.h — per-band statistics of a cube (mean, std, min, max, count,
 * optional histogram and percentiles) in one streaming pass over any
 * strided view, on the CPU with pthreads. Not a reader: it takes views. */
#ifndef HSI_STATS_H
#define HSI_STATS_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One pass shared by several processes (MPI ranks, each with its own
 * threads): this process reads only the chunks of lines k (the kernels'
 * fixed chunks) in its contiguous share [n*part/n_parts, n*(part+1)/n_parts)
 * of the n chunks, and `exchange` combines every
 * process's per-chunk partials before the merge: elementwise max, where
 * each element is finite on the one process that read its chunk and -inf
 * on the others (MPI_Allreduce with MPI_MAX). Every process then merges the
 * chunks in order and gets the bits one process gets. NULL or n_parts <= 1:
 * the whole cube here. */
typedef struct hsi_pass_split {
    int part, n_parts;
    hsi_status (*exchange)(void *ctx, double *v, int64_t n);
    void *ctx;
} hsi_pass_split;

typedef struct hsi_stats_opts {
    /* (lines, samples) view of any real dtype, nonzero = use the pixel;
     * NULL = every pixel. */
    const hsi_view *mask;
    int has_ignore;      /* exclude elements equal to ignore_value */
    double ignore_value; /* ENVI 'data ignore value' (compared after conversion to double) */
    int hist_bins;       /* > 0: also a per-band histogram (second pass) */
    int n_percentiles;   /* percentiles wanted (needs hist_bins > 0) */
    const double *percentiles; /* (n_percentiles) in [0, 100] */
    int64_t tile_lines;  /* lines per tile per thread (0 = 64) */
    int n_threads;       /* 0 = hsi_threads() */
    const char *progress_label; /* NULL = no progress bar */
    const hsi_pass_split *split; /* NULL = one process (no histogram when split) */
    hsi_device device;   /* where hsi_stats_compute runs a host cube (core.h's rule;
                            a device cube always goes to the GPU): CPU (0), CUDA, AUTO */
} hsi_stats_opts;

/* Results; every array has n_bands entries unless said otherwise.
 * NaN elements and ignored elements are not counted; std is the
 * population std (ddof = 0, numpy's default); var_ddof1 is sklearn's. */
typedef struct hsi_stats {
    int64_t n_bands;
    int64_t *count;
    double *mean, *std, *var, *var_ddof1, *min, *max;
    int hist_bins;
    int64_t *hist;          /* (n_bands, hist_bins) row-major, bins over [min, max] */
    int n_percentiles;
    double *percentile;     /* (n_bands, n_percentiles), linear inside a bin */
} hsi_stats;

/* cube: (band, line, sample) host view, any real dtype, strides, byte order.
 * Fails with HSI_ERR_NUMERIC when a band has no valid element. */
hsi_status hsi_stats_compute(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts);
void hsi_stats_free(hsi_stats *s);

/* Naive reference (single thread, element by element via hsi_view_get_f64,
 * two passes); same semantics. For tests and the GPU port. */
hsi_status hsi_stats_compute_ref(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts);

/* Chan et al. merge of two partial (count, mean, M2) triples into a. */
void hsi_stats_merge(int64_t *na, double *mean_a, double *m2_a, int64_t nb, double mean_b,
                     double m2_b);

#ifdef __cplusplus
}
#endif
#endif
