/* kcli.h — what the preprocessing commands (stats, bands, pca, preprocess)
 * share: opening a cube and a label mask, band selection from options,
 * calibration from the header, the output header and the ENVI tile sink.
 * Only cli/cmd_{stats,bands,pca,preprocess}.c include this. */
#ifndef HSI_KCLI_H
#define HSI_KCLI_H

#include <stdint.h>

#include "io/cube.h"
#include "io/envi.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"

/* A label image opened as a mask: view is (lines, samples), nonzero = use. */
typedef struct kcli_mask {
    hsi_cube cube;
    hsi_view view;
    int open;
} kcli_mask;

/* Opens path (any readable cube with one band, same lines/samples as
 * `like`) as a mask. */
hsi_status kcli_mask_open(kcli_mask *m, const char *path, const hsi_view *like);
void kcli_mask_close(kcli_mask *m);

/* Selected bands from --bands SPEC and --wavelengths SPEC (both: the
 * intersection, in --bands order) and drop_bbl; NULL specs = all bands.
 * *out is malloc'd, 0-based. */
hsi_status kcli_select_bands(int64_t **out, int64_t *n, const hsi_meta *m, const char *bands_spec,
                             const char *wl_spec, int drop_bbl);

/* Calibration from the header's gain/offset/reflectance scale. */
void kcli_calib(hsi_calib *c, const hsi_meta *m);

/* Output header: a copy of in, storage-free: band subset `bands` (no PCA)
 * or k "PCn (x.x %)" bands (PCA), calibration and ignore value removed
 * (the output is normalised float32), a description line added. */
hsi_status kcli_out_meta(hsi_meta *out, const hsi_meta *in, const int64_t *bands, int64_t n,
                         const hsi_pca *pca, const char *what);

/* Fused-pass sink that streams tiles to an ENVI writer. */
typedef struct kcli_sink {
    hsi_envi_writer *w;
} kcli_sink;
hsi_status kcli_sink_tile(void *ctx, const float *tile, int64_t line0, int64_t n_lines, int64_t n_out,
                          int64_t n_samples, int pixel_major);

/* Options the preprocessing commands share. */
typedef struct kcli_opts {
    const char *bands, *wavelengths, *normalize; /* --bands, --wavelengths, --normalize */
    int drop_bbl;                                /* --drop-bbl */
    long long tile_lines, threads;               /* --tile-lines, --threads (0 = default) */
} kcli_opts;
enum { KCLI_OPT_BANDS = 1, KCLI_OPT_NORMALIZE = 2, KCLI_OPT_TILES = 4 };
/* Parses argv[*i] if it is one of the shared options selected by `which`
 * (BANDS: --bands --wavelengths --drop-bbl; NORMALIZE: --normalize; TILES:
 * --tile-lines --threads). Returns 1 when consumed, 0 when it is not one of
 * them, -1 after printing a usage error. */
int kcli_opt(const char *cmd, int argc, char **argv, int *i, kcli_opts *o, unsigned which);

/* Parses --interleave bsq|bil|bip. */
int kcli_parse_interleave(const char *cmd, const char *s, hsi_interleave *out);

#endif

/* Fits what a command needs on the fit pixels (mask may be NULL): the
 * raw statistics (when the mode or an ignore value needs them), the
 * normalisation map over bands sel (ns), and, when pca_opts is given, the
 * PCA (into *pca). */
hsi_status kcli_fit(hsi_norm *norm, hsi_pca *pca, const hsi_cube *c, const int64_t *sel, int64_t ns,
                    hsi_norm_mode mode, const hsi_view *mask, const hsi_pca_opts *pca_opts,
                    int64_t tile_lines, int n_threads);

/* Runs the fused pass over c and streams float32 to out_hdr (ENVI). */
hsi_status kcli_write_fused(const char *out_hdr, const hsi_cube *c, const hsi_meta *out_meta,
                            const hsi_norm *norm, const hsi_pca *pca, hsi_interleave il,
                            int64_t tile_lines, int n_threads);
