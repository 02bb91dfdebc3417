/* bands.h — band selection: explicit 1-based lists and ranges
 * ("1-20,35,40-"), wavelength ranges in nm, dropping bbl = 0 bands,
 * ranking by variance and orthogonal-projection band selection (OPBS) on a
 * covariance matrix. Works on plain arrays; no cube access. */
#ifndef HSI_BANDS_H
#define HSI_BANDS_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses "1-20,35,40-" (1-based, inclusive, "-5" = 1..5, "40-" = 40..n;
 * spaces allowed) into 0-based indices in the order written. Duplicates and
 * out-of-range bands are errors. *out is malloc'd. */
hsi_status hsi_bands_parse(int64_t **out, int64_t *n_out, const char *spec, int64_t n_bands);

/* Bands whose centre wavelength (nm) lies in one of the ranges of spec
 * ("400-1340,1450-1800,1960-2450", inclusive; decimals allowed), in
 * ascending band order. wavelength_nm: (n_bands). Empty result = error. */
hsi_status hsi_bands_from_wavelengths(int64_t **out, int64_t *n_out, const char *spec,
                                      const double *wavelength_nm, int64_t n_bands);

/* Converts wavelengths to nm given the header's 'wavelength units'
 * (Micrometers/um, Nanometers/nm, Millimeters/mm, case-insensitive);
 * NULL/unknown units: values > 100 are taken as nm, else as micrometres. */
void hsi_wavelengths_to_nm(double *wl, int64_t n, const char *units);

/* Removes, in place, the entries of bands[0..*n) whose bbl is 0.
 * bbl: (n_cube_bands) 0/1. */
void hsi_bands_drop_bad(int64_t *bands, int64_t *n, const int *bbl);

/* order: (n) indices sorted by variance descending (stable on ties). */
void hsi_bands_rank_variance(int64_t *order, const double *variance, int64_t n);

/* OPBS: greedily picks the band with the largest residual variance after
 * orthogonal projection on the bands already picked (the first is the
 * max-variance band). On a covariance matrix this is Cholesky with
 * diagonal pivoting, done by LAPACKE_dpstrf. cov: (n, n) row-major
 * symmetric; sel: (k) out, in pick order; residual: (k) residual variance
 * of each pick (may be NULL). */
hsi_status hsi_bands_opbs(int64_t *sel, double *residual, const double *cov, int64_t n, int64_t k);

#ifdef __cplusplus
}
#endif
#endif
