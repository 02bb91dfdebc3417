/* synth.h — a deterministic synthetic labelled scene: spatially coherent
 * fields of classes whose spectra differ but overlap, with illumination
 * variation, mixing at field borders and sensor noise. It is what
 * data_samples/ holds and what `make demo` trains on; it is not a physical
 * model of any sensor. */
#ifndef HSI_SYNTH_H
#define HSI_SYNTH_H

#include "core/core.h"
#include "io/meta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_synth_params {
    uint64_t seed;
    int n_lines, n_samples, n_bands; /* default 96 x 96 x 128 */
    int n_classes;                   /* default 8 (1..n_classes; 0 = unlabelled) */
    int n_fields;                    /* Voronoi fields, default 40 */
    double noise;                    /* relative sensor noise, default 0.05 */
    double unlabelled_fraction;      /* share of fields left unlabelled, default 0.15 */
} hsi_synth_params;

void hsi_synth_params_init(hsi_synth_params *p);

/* cube: new (band, line, sample) uint16 view stored BIL (DN, 0..65535);
 * labels: new (line, sample) uint8 view; meta: wavelengths (nm), fwhm,
 * class names and colours, description. Everything derives from p->seed. */
hsi_status hsi_synth_scene(hsi_view *cube, hsi_view *labels, hsi_meta *cube_meta,
                           hsi_meta *label_meta, const hsi_synth_params *p);

#ifdef __cplusplus
}
#endif
#endif
