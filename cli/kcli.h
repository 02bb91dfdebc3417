/* kcli.h — what the preprocessing commands (stats, bands, pca, preprocess)
 * share: a label mask and option parsing. The job itself is the library's
 * (pipeline/preprocess.h). Only cli/cmd_{stats,bands,pca,preprocess}.c
 * include this. */
#ifndef HSI_KCLI_H
#define HSI_KCLI_H

#include <stdint.h>

#include "io/cube.h"
#include "io/envi.h"
#include "kernels/normalize.h"
#include "pipeline/preprocess.h"

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

/* Options the preprocessing commands share. */
typedef struct kcli_opts {
    const char *bands, *wavelengths, *normalize; /* --bands, --wavelengths, --normalize */
    int drop_bbl;                                /* --drop-bbl */
    long long tile_lines, threads;               /* --tile-lines, --threads (0 = default) */
    hsi_device device;                           /* --device (default cpu) */
} kcli_opts;
enum { KCLI_OPT_BANDS = 1, KCLI_OPT_NORMALIZE = 2, KCLI_OPT_TILES = 4, KCLI_OPT_DEVICE = 8 };
/* Parses argv[*i] if it is one of the shared options selected by `which`
 * (BANDS: --bands --wavelengths --drop-bbl; NORMALIZE: --normalize; TILES:
 * --tile-lines --threads; DEVICE: --device). Returns 1 when consumed, 0
 * when it is not one of them, -1 after printing a usage error. */
int kcli_opt(const char *cmd, int argc, char **argv, int *i, kcli_opts *o, unsigned which);
/* The help lines of --device, for the commands that take it. */
#define KCLI_DEVICE_HELP                                                                        \
    "  --device cpu|cuda|auto   where the passes run (default cpu). cuda: on the GPU,\n"        \
    "                    or an error saying why not; auto: the GPU when there is one\n"       \
    "                    and the pass can run there, else the CPU\n"
/* The fused pass's settings from the shared options. */
hsi_prep_pass kcli_pass(const kcli_opts *o);

/* Parses --interleave bsq|bil|bip. */
int kcli_parse_interleave(const char *cmd, const char *s, hsi_interleave *out);

/* Fits the preprocessing from the shared options on the mask's pixels (mk
 * may be closed: every pixel): k components (or frac of the variance; 0 and
 * 0 = no PCA); an error naming k_opt when k exceeds the selected bands.
 * split: the fit shared by every rank of the job (they all call it), or NULL. */
hsi_status kcli_fit(hsi_prep *p, const hsi_cube *c, const kcli_mask *mk, const kcli_opts *o,
                    hsi_norm_mode mode, long long k, double frac, int whiten, const char *k_opt,
                    const hsi_pass_split *split);

#endif
