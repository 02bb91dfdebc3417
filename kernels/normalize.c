/* normalize.c — builds the per-band affine map of each normalisation mode
 * from raw statistics and calibration, and the unfused reference pass
 * (straightforward double loops). The fast path is the fused pass
 * (fused.c); this file is what it is checked against. */
#include "normalize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"

static const char *mode_names[] = {"none", "zscore", "minmax", "global-minmax", "l2"};

const char *hsi_norm_mode_name(hsi_norm_mode m)
{
    return (m >= 0 && m <= HSI_NORM_L2) ? mode_names[m] : "?";
}

hsi_status hsi_norm_mode_parse(hsi_norm_mode *out, const char *s)
{
    for (int m = 0; m <= HSI_NORM_L2; m++)
        if (s && !strcmp(s, mode_names[m])) {
            *out = (hsi_norm_mode)m;
            return HSI_OK;
        }
    return HSI_FAIL(HSI_ERR_ARG,
                    "normalisation mode: expected none, zscore, minmax, global-minmax or l2, found '%s'",
                    s ? s : "(null)");
}

void hsi_norm_free(hsi_norm *n)
{
    if (!n) return;
    free(n->bands);
    free(n->scale);
    free(n->center);
    free(n->offset);
    free(n->fill);
    memset(n, 0, sizeof *n);
}

static hsi_status norm_alloc(hsi_norm *n, int64_t nb)
{
    size_t k = (size_t)(nb > 0 ? nb : 1);
    n->n_bands = nb;
    n->bands = calloc(k, sizeof(int64_t));
    n->scale = calloc(k, sizeof(double));
    n->center = calloc(k, sizeof(double));
    n->offset = calloc(k, sizeof(double));
    n->fill = calloc(k, sizeof(double));
    if (!n->bands || !n->scale || !n->center || !n->offset || !n->fill) {
        hsi_norm_free(n);
        return HSI_FAIL(HSI_ERR_NOMEM, "normalisation: cannot allocate %lld bands", (long long)nb);
    }
    return HSI_OK;
}

hsi_status hsi_norm_copy(hsi_norm *out, const hsi_norm *in)
{
    hsi_norm t = *in;
    hsi_status st = norm_alloc(&t, in->n_bands);
    if (st != HSI_OK) return st;
    size_t b = sizeof(double) * (size_t)in->n_bands;
    memcpy(t.bands, in->bands, sizeof(int64_t) * (size_t)in->n_bands);
    memcpy(t.scale, in->scale, b);
    memcpy(t.center, in->center, b);
    memcpy(t.offset, in->offset, b);
    memcpy(t.fill, in->fill, b);
    *out = t;
    return HSI_OK;
}

hsi_status hsi_norm_identity(hsi_norm *out, int64_t n_cube_bands)
{
    return hsi_norm_build(out, HSI_NORM_NONE, n_cube_bands, NULL, n_cube_bands, NULL, NULL, 0, 0);
}

hsi_status hsi_norm_build(hsi_norm *out, hsi_norm_mode mode, int64_t n_cube_bands,
                          const int64_t *bands, int64_t n_bands, const hsi_stats *raw,
                          const hsi_calib *calib, int has_ignore, double ignore_value)
{
    hsi_status st = HSI_OK;
    memset(out, 0, sizeof *out);
    if (mode < HSI_NORM_NONE || mode > HSI_NORM_L2)
        return HSI_FAIL(HSI_ERR_ARG, "normalisation: unknown mode %d", (int)mode);
    if (n_bands <= 0) return HSI_FAIL(HSI_ERR_ARG, "normalisation: no band selected");
    if (!bands && n_bands != n_cube_bands)
        return HSI_FAIL(HSI_ERR_ARG, "normalisation: no band list but %lld bands of %lld",
                        (long long)n_bands, (long long)n_cube_bands);
    int needs_stats = mode == HSI_NORM_ZSCORE || mode == HSI_NORM_MINMAX || mode == HSI_NORM_GLOBAL_MINMAX;
    if (needs_stats && !raw)
        return HSI_FAIL(HSI_ERR_ARG, "normalisation '%s' needs raw statistics", hsi_norm_mode_name(mode));
    if (raw && raw->n_bands != n_cube_bands)
        return HSI_FAIL(HSI_ERR_ARG, "normalisation: statistics have %lld bands, the cube %lld",
                        (long long)raw->n_bands, (long long)n_cube_bands);
    double rs = calib && calib->refl_scale != 0 ? calib->refl_scale : 1.0;
    HSI_TRY(norm_alloc(out, n_bands));
    out->mode = mode;
    out->n_cube_bands = n_cube_bands;
    out->l2 = mode == HSI_NORM_L2;
    out->has_ignore = has_ignore;
    out->ignore_value = ignore_value;
    double gmin = INFINITY, gmax = -INFINITY;
    for (int64_t j = 0; j < n_bands; j++) {
        int64_t b = bands ? bands[j] : j;
        if (b < 0 || b >= n_cube_bands) {
            st = HSI_FAIL(HSI_ERR_ARG, "normalisation: band index %lld out of range 0..%lld",
                          (long long)b, (long long)n_cube_bands - 1);
            goto cleanup;
        }
        out->bands[j] = b;
        double a = (calib && calib->gain ? calib->gain[b] : 1.0) / rs;
        double c = (calib && calib->offset ? calib->offset[b] : 0.0) / rs;
        /* physical = a*raw + c; stats of physical follow from raw stats */
        if (raw) {
            double lo = a >= 0 ? a * raw->min[b] + c : a * raw->max[b] + c;
            double hi = a >= 0 ? a * raw->max[b] + c : a * raw->min[b] + c;
            if (lo < gmin) gmin = lo;
            if (hi > gmax) gmax = hi;
            out->fill[j] = raw->mean[b];
        }
        out->center[j] = raw ? raw->mean[b] : 0.0;
        double pmean = a * out->center[j] + c;
        switch (mode) {
        case HSI_NORM_NONE:
        case HSI_NORM_L2:
            out->scale[j] = a;
            out->offset[j] = pmean;
            break;
        case HSI_NORM_ZSCORE: {
            double sd = fabs(a) * raw->std[b];
            out->scale[j] = sd > 0 ? a / sd : 0.0;
            out->offset[j] = 0.0;
            break;
        }
        case HSI_NORM_MINMAX:
        case HSI_NORM_GLOBAL_MINMAX: {
            double lo = a >= 0 ? a * raw->min[b] + c : a * raw->max[b] + c;
            double hi = a >= 0 ? a * raw->max[b] + c : a * raw->min[b] + c;
            double r = hi - lo;
            out->scale[j] = r > 0 ? a / r : 0.0;
            out->offset[j] = r > 0 ? (pmean - lo) / r : 0.0;
            break;
        }
        }
    }
    if (mode == HSI_NORM_GLOBAL_MINMAX) {
        double r = gmax - gmin;
        for (int64_t j = 0; j < n_bands; j++) {
            int64_t b = out->bands[j];
            double a = (calib && calib->gain ? calib->gain[b] : 1.0) / rs;
            double c = (calib && calib->offset ? calib->offset[b] : 0.0) / rs;
            double pmean = a * out->center[j] + c;
            out->scale[j] = r > 0 ? a / r : 0.0;
            out->offset[j] = r > 0 ? (pmean - gmin) / r : 0.0;
        }
    }
cleanup:
    if (st != HSI_OK) hsi_norm_free(out);
    return st;
}

hsi_status hsi_normalize_cpu(hsi_view *out, const hsi_view *cube, const hsi_norm *norm)
{
    hsi_status st = HSI_OK;
    double *rows = NULL;
    HSI_TRY(hsi_kern_check_cube(cube, "normalize"));
    int64_t nb = norm->n_bands, L = cube->shape[1], S = cube->shape[2];
    if (norm->n_cube_bands != cube->shape[0]) {
        st = HSI_FAIL(HSI_ERR_ARG, "normalize: the map is for %lld bands, the cube has %lld",
                      (long long)norm->n_cube_bands, (long long)cube->shape[0]);
        goto cleanup;
    }
    if (!out || out->ndim != 3 || out->dtype != HSI_F32 || out->shape[0] != nb || out->shape[1] != L ||
        out->shape[2] != S || out->swapped) {
        st = HSI_FAIL(HSI_ERR_ARG, "normalize: output must be a native float32 (%lld, %lld, %lld) view",
                      (long long)nb, (long long)L, (long long)S);
        goto cleanup;
    }
    rows = malloc(sizeof(double) * (size_t)(nb * S + S));
    if (!rows) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "normalize: cannot allocate one line (%lld values)", (long long)(nb * S));
        goto cleanup;
    }
    const uint8_t *base = (const uint8_t *)cube->buf->data + cube->offset;
    uint8_t *obase = (uint8_t *)out->buf->data + out->offset;
    for (int64_t y = 0; y < L; y++) {
        for (int64_t j = 0; j < nb; j++) {
            double *r = rows + j * S;
            hsi_load_f64(r, base + norm->bands[j] * cube->strides[0] + y * cube->strides[1],
                         cube->strides[2], cube->dtype, cube->swapped, S);
            for (int64_t x = 0; x < S; x++) {
                double v = r[x];
                if (v != v || (norm->has_ignore && v == norm->ignore_value)) v = norm->fill[j];
                r[x] = norm->scale[j] * (v - norm->center[j]) + norm->offset[j];
            }
        }
        for (int64_t x = 0; x < S; x++) {
            double f = 1.0;
            if (norm->l2) {
                double s = 0;
                for (int64_t j = 0; j < nb; j++) s += rows[j * S + x] * rows[j * S + x];
                f = s > 0 ? 1.0 / sqrt(s) : 0.0;
            }
            for (int64_t j = 0; j < nb; j++) {
                float v = (float)(rows[j * S + x] * f);
                memcpy(obase + j * out->strides[0] + y * out->strides[1] + x * out->strides[2], &v, 4);
            }
        }
    }
cleanup:
    free(rows);
    return st;
}
