/* preprocess.h — the fitted preprocessing pipeline: band selection (list,
 * wavelength ranges, bad-band list), normalisation and PCA, fitted on the
 * pixels of a mask, applied by the fused pass to a whole cube or a tile,
 * saved to and loaded from one self-describing safetensors file. What
 * `hsi preprocess --save-model`, `hsi pca`, `hsi train` and `hsi predict`
 * share; the kernels it sequences live in kernels/. */
#ifndef HSI_PREPROCESS_H
#define HSI_PREPROCESS_H

#include <stdint.h>

#include "core/core.h"
#include "io/cube.h"
#include "io/envi.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to fit. Strings are borrowed for the length of the call. */
typedef struct hsi_prep_spec {
    const char *bands;        /* "1-20,35" (1-based) or NULL = every band */
    const char *wavelengths;  /* "400-1340,1450-1800" (nm) or NULL; with bands: the intersection */
    int drop_bbl;             /* drop bands whose header bbl is 0 */
    hsi_norm_mode norm;       /* HSI_NORM_NONE: calibration only */
    int64_t pca;              /* > 0: keep this many components (capped at the selected bands) */
    double pca_variance;      /* > 0 (and pca == 0): components by explained variance */
    int whiten;               /* PCA scores divided by sqrt(eigenvalue) */
    int64_t tile_lines;       /* 0 = kernel default */
    int n_threads;            /* 0 = hsi_threads() */
    int progress;             /* 1: progress bars on stderr (when it is a terminal) */
    const hsi_pass_split *split; /* the fit shared by processes (hsi_prep_dist_split); NULL = this one */
    hsi_device device;        /* where the statistics and the PCA covariance run (core.h's
                                 rule; on the GPU they are two passes, on the CPU one) */
} hsi_prep_spec;

void hsi_prep_spec_init(hsi_prep_spec *s); /* every band, zscore, no PCA */

/* The statistics and covariance passes shared by the ranks of this job
 * (core/dist.h: each rank reads its chunks of lines, partials combined by
 * MPI_Allreduce MAX, so every rank fits what one process fits, bit for
 * bit); NULL with one rank. Every rank must then make the same calls. */
const hsi_pass_split *hsi_prep_dist_split(void);

/* A fitted pipeline. Owns its arrays. norm maps raw cube bands to
 * features; with PCA, pca.norm is the same map and pca projects it. */
typedef struct hsi_prep {
    int64_t n_cube_bands; /* bands of the cubes it applies to */
    hsi_norm norm;
    int has_pca;
    hsi_pca pca;
} hsi_prep;

/* Selected 0-based bands from a --bands list and --wavelengths ranges
 * (both: the intersection, in list order), minus bbl = 0 bands when
 * drop_bbl; NULL specs = every band. *out is malloc'd. */
hsi_status hsi_prep_select_bands(int64_t **out, int64_t *n, const hsi_meta *m, const char *bands,
                                 const char *wavelengths, int drop_bbl);

/* Fits on the pixels of mask ((lines, samples), any real dtype, nonzero =
 * fit; NULL = every pixel): raw statistics when the mode or an ignore value
 * needs them, the normalisation map, and the PCA when asked for. */
hsi_status hsi_prep_fit(hsi_prep *out, const hsi_cube *cube, const hsi_view *mask,
                        const hsi_prep_spec *spec);

/* Output features: PCA components, or selected bands. */
int64_t hsi_prep_n_out(const hsi_prep *p);

/* Checks that cube (band, line, sample) has the bands p was fitted on;
 * `what` names the cube in the message. */
hsi_status hsi_prep_check(const hsi_prep *p, const hsi_view *cube, const char *what);

/* How a fitted pipeline's pass runs. Zeroed (or NULL) = defaults. */
typedef struct hsi_prep_pass {
    int64_t tile_lines;         /* 0 = kernel default */
    int n_threads;              /* 0 = hsi_threads() */
    const char *progress_label; /* transform: NULL = no bar; the ENVI writers: NULL =
                                   "project" or "normalise" */
    hsi_device device;          /* where the fused pass runs (core.h's rule) */
    int out_on_device;          /* transform: the output in device memory (the pass on the
                                   GPU, whatever device says) */
} hsi_prep_pass;

/* The fused pass over a whole cube or a crop of one (a tile): out is
 * allocated as a packed (n_out, lines, samples) float32 host view, or with
 * pass->out_on_device a device view (a cached device buffer; UNSUPPORTED
 * with hsi_fused_cuda_unsupported's reason when the GPU cannot take the
 * cube). */
hsi_status hsi_prep_transform(hsi_view *out, const hsi_prep *p, const hsi_view *cube,
                              const hsi_prep_pass *pass);

/* Streams the fused pass to an ENVI float32 cube (out_meta from
 * hsi_prep_out_meta), tile by tile: bounded memory, written atomically. */
hsi_status hsi_prep_write_envi(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                               const hsi_meta *out_meta, hsi_interleave il, const hsi_prep_pass *pass);
/* The same, shared by the ranks of this job (core/dist.h): every rank calls
 * it; each projects its share of the lines and writes them where they go in
 * the one output, which rank 0 opens, sizes and, once every rank has
 * finished, renames into place. The bytes are those of one process. With
 * one rank: hsi_prep_write_envi. */
hsi_status hsi_prep_write_envi_dist(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                                    const hsi_meta *out_meta, hsi_interleave il,
                                    const hsi_prep_pass *pass);
/* hsi_prep_write_envi, one process, with the floats of hsi_prep_transform
 * whatever il is: the pass multiplies band-major, where a BIP output
 * otherwise multiplies pixel-major (faster, and may differ in the last
 * bit). */
hsi_status hsi_prep_write_envi_exact(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                                     const hsi_meta *out_meta, hsi_interleave il,
                                     const hsi_prep_pass *pass);

/* The output header: a copy of in for the selected bands, or k "PCn (x %)"
 * bands with PCA; calibration and ignore value removed (the output is
 * normalised float32); `what` appended to the description when not NULL. */
hsi_status hsi_prep_out_meta(hsi_meta *out, const hsi_meta *in, const hsi_prep *p,
                             const char *what);

/* Saves as safetensors (see docs/run-directory.md): tensors bands (I64),
 * scale, center, offset, fill (F64), and with PCA pca.mean,
 * pca.components (k, n_features), pca.explained_variance,
 * pca.explained_variance_ratio; the mode and formula in __metadata__.
 * Written atomically. */
hsi_status hsi_prep_save(const hsi_prep *p, const char *path);

/* Loads what hsi_prep_save wrote, or a legacy "HSIPCA1" pca.bin model.
 * Validated as strictly as a cube header: every metadata value typed and in
 * range, exactly the tensors documented (dtype and shape each), band
 * indices inside the cube, every F64 value finite; errors name the file,
 * the key or tensor, what was expected and what was found. */
hsi_status hsi_prep_load(hsi_prep *out, const char *path);
/* The same over memory (either layout); `what` names it in messages. What
 * hsi_prep_load checks, for fuzzing. */
hsi_status hsi_prep_parse(hsi_prep *out, const void *data, size_t size, const char *what);

void hsi_prep_free(hsi_prep *p); /* zeroed memory is fine */

#ifdef __cplusplus
}
#endif
#endif
